/* main.c - the dflash command line. Talks to libdflash through dflash.h only.
 *
 *   dflash generate -m DIR (-p TEXT | -f FILE) [options]   stream a completion
 *   dflash chat -m DIR [options]                           interactive chat
 *   dflash tokenize -m DIR (-p TEXT | -f FILE) [--special] print token ids
 *   dflash vocab-rank -m DIR -o FILE TEXT...               rank token ids by frequency
 *   dflash serve -m DIR [options]                          OpenAI-compatible server (cli/serve.c)
 *
 * stdout carries only generated text (or ids for tokenize); everything else
 * goes to stderr. Exit status: 0 ok, 1 error, 2 bad usage. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cJSON.h>
#ifdef DFLASH_LIBEDIT
#include <editline/readline.h>
#endif

#include "chat.h"
#include "dflash.h"
#include "reply.h"
#include "serve.h"
#include "util.h"

static const char *prog = "dflash";

#ifndef DFLASH_GIT_REV
#define DFLASH_GIT_REV ""
#endif

/* ---- stdout: write errors are failures (dflash generate >/dev/full) ------ */

static int stdout_errno; /* first failed write to stdout */

static int out_write(const char *text, size_t len) {
    if (stdout_errno) return -1;
    if (fwrite(text, 1, len, stdout) != len || fflush(stdout) != 0) {
        stdout_errno = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

/* atexit: flush stdout; a failed write anywhere makes the exit status 1. */
static void check_stdout(void) {
    if (fflush(stdout) != 0 && !stdout_errno) stdout_errno = errno ? errno : EIO;
    if (ferror(stdout) && !stdout_errno) stdout_errno = EIO;
    if (stdout_errno) {
        fprintf(stderr, "%s: error: writing to stdout: %s\n", prog, strerror(stdout_errno));
        _exit(1);
    }
}

static void die(const char *fmt, const char *a) {
    fprintf(stderr, "%s: error: ", prog);
    fprintf(stderr, fmt, a);
    fputc('\n', stderr);
    exit(1);
}

void cli_usage_err(const char *cmd, const char *msg, const char *arg) {
    fprintf(stderr, "%s %s: %s%s%s\n", prog, cmd, msg, arg ? " " : "", arg ? arg : "");
    fprintf(stderr, "Try '%s %s --help'.\n", prog, cmd);
    exit(2);
}

enum { CLI_MAX_LOGIT_BIAS = 1024 }; /* --logit-bias given at most this often */

typedef struct {
    const char *cmd;
    const char *model, *draft, *prompt, *file, *system;
    const char *think_given; /* the --think / --no-think given, for the check that needs --chat */
    const char *reasoning_effort, *chat_date; /* harmony's (gpt-oss) options, NULL: the template's */
    int n_predict, threads, ctx, chat, think, stats_json, ignore_eos, no_draft, block_size, draft_max, verbose;
    const char *prompts, *quant, *draft_quant, *plot, *backend, *tokenizer;
    int raw, max_prompts, reps, depth, json, draft_window;
    int tree; /* --tree N: verify rows of a tree round, 0 = the chain */
    cli_draft_vocab dv;          /* --draft-vocab */
    float temp, top_p;
    int top_k;
    unsigned long long seed;
    int seed_given; /* -s N with N >= 0; otherwise a random seed */
    float min_p, repeat_penalty, frequency_penalty, presence_penalty;
    int repeat_last_n;
    dflash_logit_bias logit_bias[CLI_MAX_LOGIT_BIAS];
    int n_logit_bias;
    int logprobs; /* -1: off; else print each token's log-probability and its N most likely alternatives */
    const char *grammar_file, *json_schema_file; /* constrained decoding (generate) */
    int json_object;
    int special; /* tokenize: the ids of a plain prompt, with the tokenizer's special tokens */
    int verbose_prompt; /* generate: the prompt's text (after the template) on stderr */
} opts;

static const char *help_generate =
    "usage: dflash generate -m DIR (-p TEXT | -f FILE) [options]\n"
    "\n"
    "Generate a continuation of a prompt and stream it to stdout. Timing and\n"
    "statistics go to stderr.\n"
    "\n"
    "  -m, --model PATH       target model: a Hugging Face / MLX directory or a .gguf file\n"
    "  -md, --draft PATH      DFlash draft (directory or .gguf): speculative decoding\n"
    "  -p, --prompt TEXT      prompt text\n"
    "  -f, --file FILE        read the prompt from FILE\n"
    "  -n, --n-predict N      generate at most N tokens (default 256; -1 = until a stop\n"
    "                         token or the context is full)\n"
    "      --chat             wrap the prompt in the model's chat template\n"
    "      --system TEXT      system message (with --chat)\n"
    "      --think, --no-think  Qwen3 / Gemma 4 thinking on/off with --chat (default:\n"
    "                         off); with gpt-oss (harmony) the model always reasons: stdout\n"
    "                         gets its final channel only, --think shows the analysis on\n"
    "                         stderr; with Gemma 4 stdout gets the answer, --think shows\n"
    "                         the thought channel on stderr\n"
    "      --reasoning-effort low|medium|high  gpt-oss (harmony) with --chat: the\n"
    "                         system message's \"Reasoning:\" (default medium)\n"
    "      --chat-date YYYY-MM-DD  gpt-oss with --chat: the system message's\n"
    "                         \"Current date:\" (default today, local time)\n"
    "      --verbose-prompt   print the prompt's text (after the template) on stderr\n"
    "  -t, --threads N        worker threads (default: physical cores)\n"
    "  -c, --ctx-size N       context positions (default min(model max, 4096))\n"
    "      --backend auto|cpu|cuda  where to compute (default auto: CUDA when\n"
    "                         built in with make CUDA=1 and a GPU is present)\n"
    "      --tokenizer PATH   tokenizer (and chat template) from PATH: a directory\n"
    "                         with tokenizer.json or a GGUF file (default: the model's)\n"
    "      --temp T           sampling temperature (default 0 = greedy)\n"
    "      --top-k K          keep the K most likely tokens (default 0 = off)\n"
    "      --top-p P          nucleus sampling (default 1 = off)\n"
    "  -s, --seed S           sampling seed (default -1 = random, printed on stderr)\n"
    "      --min-p P          drop tokens less likely than P x the most likely one\n"
    "                         (0..1, default 0 = off; after top-k and top-p)\n"
    "      --repeat-penalty R penalise tokens of the last --repeat-last-n: a logit\n"
    "                         l > 0 becomes l / R, else l x R (default 1 = off)\n"
    "      --repeat-last-n N  the penalties' window over prompt + output (default 64;\n"
    "                         -1 = all of it, 0 = penalties off)\n"
    "      --presence-penalty P   subtract P from the logit of a token in the window\n"
    "      --frequency-penalty F  subtract F x its count in the window (default 0)\n"
    "      --logit-bias ID=BIAS   add BIAS (-100..100) to token ID's logit; repeatable\n"
    "                         (every control is applied to the target's logits with\n"
    "                         plain decoding's history: DFlash output is unchanged)\n"
    "      --logprobs N       after the text, print each token's log-probability and\n"
    "                         its N (0..20) most likely alternatives on stderr (the\n"
    "                         target's, after --logit-bias and the penalties, before\n"
    "                         --temp, top-k/top-p/min-p)\n"
    "      --grammar FILE     constrain the output to a GBNF grammar (llama.cpp's\n"
    "                         format, start rule root); DFlash output is unchanged\n"
    "      --json-schema FILE constrain the output to JSON matching a JSON Schema\n"
    "                         (types, properties, required, items, enum, const,\n"
    "                         anyOf/oneOf, $ref; other keywords are refused)\n"
    "      --json-object      constrain the output to a JSON object\n"
    "      --block-size B     DFlash verify width (default: the draft's block_size)\n"
    "      --draft-max N|auto most drafted tokens per round (default auto)\n"
    "      --tree N|auto      verify a token tree of at most N rows per round (2..64,\n"
    "                         the anchor included; best-first from the draft's top\n"
    "                         candidates per slot); 0 = the chain (default); auto =\n"
    "                         per round the chain or a tree of 8/16/32 rows, the best\n"
    "                         measured tok/s. Same output; CPU and CUDA, full-\n"
    "                         attention targets, no grammar, logit controls or\n"
    "                         logprobs\n"
    "      --draft-vocab N|full|freq:N|FILE[:N]  the token ids the draft proposes\n"
    "                         (plus stop tokens): ids < N; full: all; freq:N: the N\n"
    "                         most frequent of vocab_rank.txt in the --tokenizer or\n"
    "                         -m directory; FILE[:N]: of a rank file (dflash\n"
    "                         vocab-rank; no N: every id it lists). CPU only by rank.\n"
    "                         Default 32768 for vocabularies > 65536 (ids < 32768).\n"
    "                         Speed only: output is the same\n"
    "      --no-draft         ignore --draft (plain decoding)\n"
    "      --ignore-eos       do not stop at end-of-sequence tokens\n"
    "      --stats-json       print statistics as one JSON object (last stderr line)\n"
    "      --quant bf16|q8|q4|q8_0 convert the weights at load (MLX affine, group 64;\n"
    "                         q8_0: llama.cpp's Q8_0, as a Q8_0 GGUF loads)\n"
    "      --draft-quant keep|bf16|q8|q4  the draft's weights at load (default: as\n"
    "                         --quant, else q8 for a float draft on int8 kernels)\n"
    "      --draft-window N   the draft attends to the last N context positions only\n"
    "                         (default: as its config.json; output unchanged)\n"
    "  -h, --help             this help\n";

static const char *help_chat =
    "usage: dflash chat -m DIR [options]\n"
    "\n"
    "Interactive multi-turn chat on stdin/stdout with the model's chat template.\n"
    "Type a message and press Enter; /reset clears the conversation, /help lists\n"
    "the commands, /exit or end-of-file quits. Ctrl-C stops an answer (the\n"
    "conversation stays); at the prompt it quits. Each turn extends the tokens\n"
    "already read and written, so only the new message is prefilled (with\n"
    "--think the history is rendered again, earlier reasoning dropped); when\n"
    "the conversation outgrows the context the oldest turns are dropped (and\n"
    "said so); a message too long for the context on its own is\n"
    "refused and the conversation kept. On a terminal, lines can be edited and\n"
    "recalled (arrow keys) when dflash was built with libedit. With a gpt-oss\n"
    "(harmony) model only the answer's final channel is printed (--think: the\n"
    "analysis on stderr) and kept in the history; with Gemma 4 the answer without\n"
    "its thought channel (--think: that channel on stderr).\n"
    "Options as for 'dflash generate' (-m, -md, -n, -t, -c, --system, --think,\n"
    "--no-think, --reasoning-effort, --chat-date, --temp, --top-k, --top-p, -s,\n"
    "--min-p, --repeat-penalty, --repeat-last-n, --presence-penalty,\n"
    "--frequency-penalty, --logit-bias, --block-size, --draft-max, --quant,\n"
    "--draft-quant, --draft-window).\n"
    "      --backend auto|cpu|cuda  where to compute (default auto: CUDA when\n"
    "                         built in with make CUDA=1 and a GPU is present)\n"
    "      --tokenizer PATH   tokenizer (and chat template) from PATH: a directory\n"
    "                         with tokenizer.json or a GGUF file (default: the model's)\n"
    "  -v, --verbose          print timing and DFlash statistics after each answer\n";

static const char *help_tokenize =
    "usage: dflash tokenize -m DIR (-p TEXT | -f FILE) [--special]\n"
    "\n"
    "Print the token ids of the text, space-separated, on one line. Needs only\n"
    "tokenizer.json (and tokenizer_config.json) in DIR, or a GGUF file's tokenizer.\n"
    "\n"
    "      --special          the ids a plain prompt gets (generate without --chat):\n"
    "                         the text's, with the special tokens the tokenizer adds\n"
    "                         around it (tokenizer.json's post_processor, e.g. Gemma's\n"
    "                         <bos>; a GGUF's tokenizer.ggml.add_bos_token /\n"
    "                         add_eos_token); default: the text's ids alone\n";

static const char *help_bench =
    "usage: dflash bench -m DIR [--draft DIR --prompts FILE.jsonl] [options]\n"
    "\n"
    "Measure: the memory bandwidth the backend's weights stream from (CPU: a\n"
    "parallel read; CUDA: a device-to-device copy); the cost of a greedy step\n"
    "(target forward + argmax of each row) at T = 1, 2, ..., 16 (median of\n"
    "--reps runs after a warm-up, at context depth --depth); decode tok/s and\n"
    "GB/s at T=1; and with a draft and a prompt file, greedy vs DFlash tok/s,\n"
    "tau and speed-up per domain, checking the outputs are identical.\n"
    "\n"
    "  -m, --model PATH       target model (directory or .gguf)\n"
    "  -md, --draft DIR       DFlash draft\n"
    "      --prompts FILE     JSON lines {\"domain\": ..., \"prompt\": ...}\n"
    "      --raw              do not apply the chat template to the prompts\n"
    "      --max-prompts N    use at most N prompts per domain (default all)\n"
    "  -n, --n-predict N      tokens per prompt (default 128)\n"
    "      --reps N           repetitions (default 3; medians reported)\n"
    "      --depth N          context depth for the forward costs (default 256; without\n"
    "                         -c the context is sized to hold depth + 16 rows)\n"
    "      --draft-max N|auto, --block-size B, --draft-vocab V   as for generate (the\n"
    "                         draft block is timed at that vocabulary)\n"
    "      --tree N|auto      also run each prompt with a tree of N rows and compare\n"
    "                         it with the chain per domain (tau, rows, speed)\n"
    "  -t, --threads N        worker threads (default: physical cores)\n"
    "      --backend auto|cpu|cuda  where to compute (default auto)\n"
    "      --tokenizer PATH   tokenizer (and chat template) from PATH: a directory\n"
    "                         with tokenizer.json or a GGUF file (default: the model's)\n"
    "      --quant bf16|q8|q4|q8_0 convert the weights at load\n"
    "      --draft-quant keep|bf16|q8|q4  the draft's weights, as for generate\n"
    "      --draft-window N   the draft's context window, as for generate\n"
    "      --json             print one JSON object on stdout instead of the table\n"
    "      --plot FILE.svg    draw the cost curve and the per-domain speed-ups\n";

static const char *help_synth =
    "usage: dflash synth --shape SHAPE [--draft] [--bits 4|8] [--force] -o DIR\n"
    "\n"
    "SHAPE: qwen3-0.6b, qwen3-1.7b, qwen3-4b, qwen3-30b-a3b, qwen3.5-0.8b,\n"
    "qwen3.5-4b, qwen3.5-9b, qwen3.5-35b-a3b, gpt-oss-20b, gpt-oss-120b (--bits 4:\n"
    "MXFP4 experts and the rest BF16, as openai ships them; no --bits 8),\n"
    "gemma-4-31b, gemma-4-26b-a4b (its experts BF16 only: no --bits), or the\n"
    "small tiny, tiny-moe, tiny-qwen35, tiny-qwen35moe, tiny-gptoss, tiny-gemma4,\n"
    "tiny-gemma4-moe.\n"
    "\n"
    "Write a checkpoint with random weights and the real config of that model\n"
    "(speed does not depend on the values). --draft writes the matching DFlash\n"
    "draft (5 layers; 2 for the tiny shapes; Qwen3 layers for a Qwen3.5 target).\n"
    "--bits writes the MLX affine layout (group 64); default bf16. --tokenizer\n"
    "DIR links DIR's tokenizer files into a target (DIR must hold tokenizer.json;\n"
    "default models/qwen3-tokenizer when it exists: the Qwen3 tokenizer, whose\n"
    "ids all fit the Qwen3.5 vocabulary too). An existing non-empty DIR is\n"
    "refused unless --force (its model files are then replaced). The files are\n"
    "written under temporary names and put in place only when all are written:\n"
    "on failure DIR is left as it was.\n";

static const char *help_quantize =
    "usage: dflash quantize -m IN --bits 4|8 [--group-size 32|64|128] [--force] -o OUT\n"
    "\n"
    "Write IN (BF16/F16/F32 safetensors) to OUT in the MLX affine layout used by\n"
    "mlx-community checkpoints (packed uint32 weights + bf16 scales and biases;\n"
    "config.json gets \"quantization\"). Embeddings and every projection are\n"
    "quantized; norms are copied. Default group size 64. IN is a model\n"
    "directory (a GGUF file is refused: quantize it at load with --quant). OUT\n"
    "must not be IN; an existing non-empty OUT is refused unless --force. IN is\n"
    "read and checked before anything is written, and OUT's files are put in\n"
    "place only when all are written: on failure OUT is left as it was.\n";

static const char *help_convert =
    "usage: dflash convert IN_DIR -o OUT.gguf [--type f16|bf16|q8_0|q4_0] [--target DIR] [--force]\n"
    "\n"
    "Write a Hugging Face / MLX target (qwen3, llama, qwen3_moe; Qwen3.5,\n"
    "Qwen3.5-MoE and Qwen3-Next as GGUF qwen35, qwen35moe, qwen3next, the\n"
    "multi-token-prediction blocks left out; gpt_oss and gemma4 as gpt-oss and\n"
    "gemma4) or a DFlash draft as one\n"
    "GGUF file the way llama.cpp's converter does: its tensor names and metadata\n"
    "keys, the tokenizer (tokenizer.ggml.*: byte-level BPE as gpt2, Gemma's\n"
    "SentencePiece-style BPE as gemma4) and chat template inside (a draft\n"
    "takes its target's: --target TARGET_DIR; architecture dflash, target layers\n"
    "stored +1, mask token). --type f16 (default), bf16 (exact for a bf16\n"
    "checkpoint), q8_0 or q4_0 (llama.cpp's Q8_0 / Q4_0: blocks of 32 8-/4-bit\n"
    "values with an f16 scale, quantized as llama.cpp does; a matrix whose rows\n"
    "are not whole blocks is written F16); norms and routers stay F32. OUT must not be the input; an existing OUT\n"
    "is refused unless --force. OUT is written under a temporary name and renamed\n"
    "when complete: on failure it is left as it was.\n";

static const char *help_main =
    "usage: dflash COMMAND [options]\n"
    "\n"
    "Plain-C LLM inference with DFlash speculative decoding.\n"
    "\n"
    "commands:\n"
    "  generate   generate text from a prompt (plain or with a DFlash draft)\n"
    "  chat       interactive chat\n"
    "  serve      OpenAI-compatible HTTP server with a chat page\n"
    "  tokenize   print the token ids of a text\n"
    "  vocab-rank rank token ids by frequency in text files (for --draft-vocab)\n"
    "  bench      measure forward cost, decode speed, DFlash speed-up\n"
    "  synth      write a random-weight checkpoint with a real model's shapes\n"
    "  quantize   convert a checkpoint to MLX 4-bit or 8-bit\n"
    "  convert    write a checkpoint as a GGUF file (f16, bf16, q8_0 or q4_0)\n"
    "\n"
    "'dflash COMMAND --help' describes each command; 'dflash --version' the build.\n";

long cli_parse_int(const char *cmd, const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || *end || end == v || x < lo || x > hi) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s expects an integer in %ld..%ld, got", flag, lo, hi);
        cli_usage_err(cmd, msg, v);
    }
    return x;
}

static float parse_float(const char *cmd, const char *flag, const char *v, float lo, float hi) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || *end || end == v || !(x >= lo && x <= hi)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s expects a number in %g..%g, got", flag, lo, hi);
        cli_usage_err(cmd, msg, v);
    }
    return x;
}

/* Which command takes which option (parse_opts reads them all into one
 * struct): an option of another command is an error, not silently ignored.
 * G generate, C chat, T tokenize, B bench. */
static const struct {
    const char *s, *l;
    int value;
    const char *cmds;
} known_opts[] = {
    {"-m", "--model", 1, "GCTB"},          {"-md", "--draft", 1, "GCB"},
    {"-p", "--prompt", 1, "GT"},           {"-f", "--file", 1, "GT"},
    {"-n", "--n-predict", 1, "GCB"},       {"-t", "--threads", 1, "GCB"},
    {"-c", "--ctx-size", 1, "GCB"},        {NULL, "--chat", 0, "G"},
    {NULL, "--system", 1, "GC"},           {NULL, "--think", 0, "GCB"},
    {NULL, "--no-think", 0, "GCB"},        {NULL, "--temp", 1, "GC"},
    {NULL, "--reasoning-effort", 1, "GC"}, {NULL, "--chat-date", 1, "GC"},
    {NULL, "--verbose-prompt", 0, "G"},
    {NULL, "--temperature", 1, "GC"},      {NULL, "--top-k", 1, "GC"},
    {NULL, "--top-p", 1, "GC"},            {"-s", "--seed", 1, "GC"},
    {NULL, "--block-size", 1, "GCB"},      {NULL, "--draft-max", 1, "GCB"},
    {NULL, "--draft-vocab", 1, "GCB"},     {NULL, "--no-draft", 0, "GC"},
    {NULL, "--ignore-eos", 0, "G"},        {NULL, "--stats-json", 0, "G"},
    {"-v", "--verbose", 0, "C"},           {NULL, "--prompts", 1, "B"},
    {NULL, "--raw", 0, "B"},               {NULL, "--max-prompts", 1, "B"},
    {NULL, "--reps", 1, "B"},              {NULL, "--depth", 1, "B"},
    {NULL, "--json", 0, "B"},              {NULL, "--plot", 1, "B"},
    {NULL, "--quant", 1, "GCB"},           {NULL, "--draft-quant", 1, "GCB"},
    {NULL, "--draft-window", 1, "GCB"},
    {NULL, "--tokenizer", 1, "GCB"},      {NULL, "--min-p", 1, "GC"},
    {NULL, "--repeat-penalty", 1, "GC"},   {NULL, "--repeat-last-n", 1, "GC"},
    {NULL, "--presence-penalty", 1, "GC"}, {NULL, "--frequency-penalty", 1, "GC"},
    {NULL, "--logit-bias", 1, "GC"},       {NULL, "--logprobs", 1, "G"},
    {NULL, "--grammar", 1, "G"},           {NULL, "--json-schema", 1, "G"},
    {NULL, "--json-object", 0, "G"},       {NULL, "--special", 0, "T"},
};

static void reject_foreign_opts(const char *cmd, int argc, char **argv) {
    char c = !strcmp(cmd, "generate") ? 'G' : !strcmp(cmd, "chat") ? 'C' : !strcmp(cmd, "tokenize") ? 'T' : 'B';
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return; /* help wins */
        for (size_t k = 0; k < sizeof known_opts / sizeof known_opts[0]; k++) {
            if (strcmp(a, known_opts[k].l) && !(known_opts[k].s && !strcmp(a, known_opts[k].s))) continue;
            if (!strchr(known_opts[k].cmds, c)) {
                fprintf(stderr, "%s %s: option %s is not used by '%s' (it belongs to other commands)\n", prog, cmd,
                        a, cmd);
                fprintf(stderr, "Try '%s %s --help'.\n", prog, cmd);
                exit(2);
            }
            i += known_opts[k].value; /* skip its value */
            break;
        }
    }
}

/* -m/-md must name a model directory or a GGUF file; say what to do with
 * another file. */
static void check_model_path(const char *cmd, const char *flag, const char *path) {
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISDIR(st.st_mode)) return; /* missing: the loader says so */
    if (dflash_is_gguf(path)) return;
    size_t n = strlen(path);
    const char *why = n >= 5 && !strcmp(path + n - 5, ".gguf")
                          ? "is not a GGUF file (no \"GGUF\" magic at its start)"
                          : "is a file; pass the model directory that holds it (config.json, *.safetensors, "
                            "tokenizer.json) or a GGUF file";
    fprintf(stderr, "%s %s: error: %s %s: %s\n", prog, cmd, flag, path, why);
    exit(1);
}

/* --draft-vocab N | full | freq:N | FILE | FILE:N (a rank file, src/vocab.h;
 * freq:N takes vocab_rank.txt in the --tokenizer or -m directory, resolved once
 * -m and --tokenizer are known: cli_find_freq_rank). */
void cli_parse_draft_vocab(const char *cmd, const char *flag, const char *v, cli_draft_vocab *dv) {
    dv->rank[0] = 0;
    dv->freq = 0;
    if (!*v) cli_usage_err(cmd, "--draft-vocab expects N, full, freq:N or a rank file FILE[:N], got", "''");
    if (!strcmp(v, "full")) {
        dv->n = -1;
        return;
    }
    if (strspn(v, "0123456789") == strlen(v) || v[0] == '-') {
        dv->n = (int)cli_parse_int(cmd, flag, v, 1, INT_MAX);
        return;
    }
    if (!strncmp(v, "freq:", 5)) {
        dv->n = (int)cli_parse_int(cmd, "--draft-vocab freq:", v + 5, 1, INT_MAX);
        dv->freq = 1;
        return;
    }
    /* FILE:N where the tail is a number, else the whole value is the file */
    const char *colon = strrchr(v, ':');
    size_t n = strlen(v);
    dv->n = 0; /* every id the file lists */
    if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1)) {
        dv->n = (int)cli_parse_int(cmd, "--draft-vocab FILE:", colon + 1, 1, INT_MAX);
        n = (size_t)(colon - v);
    }
    if (n == 0 || n >= sizeof dv->rank) cli_usage_err(cmd, "--draft-vocab: rank file name empty or too long:", v);
    memcpy(dv->rank, v, n);
    dv->rank[n] = 0;
    struct stat st;
    if (stat(dv->rank, &st) != 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s %s: --draft-vocab %s: %s is not a rank file (want N, full, freq:N or FILE[:N])\n", prog,
                cmd, v, dv->rank);
        exit(2);
    }
}

/* freq:N's rank file: vocab_rank.txt in the --tokenizer directory, else in
 * the model's directory (a GGUF file or a tokenizer file: its directory). */
void cli_find_freq_rank(const char *cmd, cli_draft_vocab *dv, const char *tokenizer, const char *model) {
    if (!dv->freq) return;
    char dir[4096];
    const char *cands[2] = {tokenizer, model};
    for (int i = 0; i < 2; i++) {
        if (!cands[i]) continue;
        struct stat st;
        snprintf(dir, sizeof dir, "%s", cands[i]);
        if (stat(dir, &st) == 0 && !S_ISDIR(st.st_mode)) {
            char *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            else snprintf(dir, sizeof dir, ".");
        }
        int w = snprintf(dv->rank, sizeof dv->rank, "%s/vocab_rank.txt", dir);
        if (w > 0 && (size_t)w < sizeof dv->rank && stat(dv->rank, &st) == 0) return;
    }
    fprintf(stderr,
            "%s %s: --draft-vocab freq:%d: no vocab_rank.txt in the --tokenizer or -m directory (looked in %s%s%s); "
            "give a rank file: --draft-vocab FILE:%d (dflash vocab-rank makes one)\n",
            prog, cmd, dv->n, tokenizer ? tokenizer : "", tokenizer ? " and " : "", model ? model : "", dv->n);
    exit(2);
}

static void parse_opts(opts *o, int argc, char **argv, const char *help) {
    memset(o, 0, sizeof *o);
    o->cmd = argv[1];
    o->n_predict = 256;
    o->top_p = 1.0f;
    o->think = 0;
    o->draft_max = -1;
    o->reps = 3;
    o->depth = 256;
    o->repeat_penalty = 1.0f;
    o->repeat_last_n = 64;
    o->logprobs = -1;
    if (!strcmp(o->cmd, "bench")) o->n_predict = 128;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define IS(s, l) (strcmp(a, s) == 0 || strcmp(a, l) == 0)
#define VAL() (i + 1 < argc ? argv[++i] : (cli_usage_err(o->cmd, "missing value for", a), ""))
        if (IS("-h", "--help")) {
            fputs(help, stdout);
            exit(0);
        } else if (IS("-m", "--model")) o->model = VAL();
        else if (IS("-md", "--draft")) o->draft = VAL();
        else if (IS("-p", "--prompt")) o->prompt = VAL();
        else if (IS("-f", "--file")) o->file = VAL();
        else if (IS("-n", "--n-predict")) {
            o->n_predict = (int)cli_parse_int(o->cmd, a, VAL(), -1, INT_MAX);
            if (o->n_predict < 0) o->n_predict = INT_MAX; /* -1: until a stop token or the context is full */
        }
        else if (IS("-t", "--threads")) o->threads = (int)cli_parse_int(o->cmd, a, VAL(), 1, 1024);
        else if (IS("-c", "--ctx-size")) o->ctx = (int)cli_parse_int(o->cmd, a, VAL(), 2, 1 << 24);
        else if (IS("--chat", "--chat")) o->chat = 1;
        else if (IS("--system", "--system")) o->system = VAL();
        else if (IS("--think", "--think")) o->think = 1, o->think_given = a;
        else if (IS("--no-think", "--no-think")) o->think = 0, o->think_given = a;
        else if (IS("--reasoning-effort", "--reasoning-effort")) o->reasoning_effort = VAL();
        else if (IS("--chat-date", "--chat-date")) o->chat_date = VAL();
        else if (IS("--verbose-prompt", "--verbose-prompt")) o->verbose_prompt = 1;
        else if (IS("--temp", "--temperature")) o->temp = parse_float(o->cmd, a, VAL(), 0, 100);
        else if (IS("--top-k", "--top-k")) o->top_k = (int)cli_parse_int(o->cmd, a, VAL(), 0, INT_MAX);
        else if (IS("--top-p", "--top-p")) o->top_p = parse_float(o->cmd, a, VAL(), 1e-6f, 1);
        else if (IS("-s", "--seed")) {
            long v = cli_parse_int(o->cmd, a, VAL(), -1, LONG_MAX);
            o->seed_given = v >= 0;
            o->seed = v >= 0 ? (unsigned long long)v : 0;
        }
        else if (IS("--block-size", "--block-size")) o->block_size = (int)cli_parse_int(o->cmd, a, VAL(), 1, 64);
        else if (IS("--draft-max", "--draft-max")) {
            const char *v = VAL();
            o->draft_max = strcmp(v, "auto") == 0 ? -1 : (int)cli_parse_int(o->cmd, a, v, 0, 63);
        } else if (IS("--tree", "--tree")) {
            const char *v = VAL();
            o->tree = strcmp(v, "auto") == 0 ? -1 : (int)cli_parse_int(o->cmd, a, v, 0, 64);
            if (o->tree == 1)
                cli_usage_err(o->cmd, "--tree needs 2..64 rows (the anchor and a draft) or 0 (the chain), got", "1");
        } else if (IS("--no-draft", "--no-draft")) o->no_draft = 1;
        else if (IS("--ignore-eos", "--ignore-eos")) o->ignore_eos = 1;
        else if (IS("--stats-json", "--stats-json")) o->stats_json = 1;
        else if (IS("-v", "--verbose")) o->verbose = 1;
        else if (IS("--prompts", "--prompts")) o->prompts = VAL();
        else if (IS("--raw", "--raw")) o->raw = 1;
        else if (IS("--max-prompts", "--max-prompts")) o->max_prompts = (int)cli_parse_int(o->cmd, a, VAL(), 1, INT_MAX);
        else if (IS("--reps", "--reps")) o->reps = (int)cli_parse_int(o->cmd, a, VAL(), 1, 1000);
        else if (IS("--depth", "--depth")) o->depth = (int)cli_parse_int(o->cmd, a, VAL(), 0, 1 << 20);
        else if (IS("--json", "--json")) o->json = 1;
        else if (IS("--grammar", "--grammar")) o->grammar_file = VAL();
        else if (IS("--json-schema", "--json-schema")) o->json_schema_file = VAL();
        else if (IS("--json-object", "--json-object")) o->json_object = 1;
        else if (IS("--special", "--special")) o->special = 1;
        else if (IS("--quant", "--quant")) o->quant = VAL();
        else if (IS("--draft-quant", "--draft-quant")) o->draft_quant = VAL();
        else if (IS("--draft-window", "--draft-window")) o->draft_window = (int)cli_parse_int(o->cmd, a, VAL(), 1, 1 << 30);
        else if (IS("--plot", "--plot")) o->plot = VAL();
        else if (IS("--backend", "--backend")) o->backend = VAL();
        else if (IS("--tokenizer", "--tokenizer")) o->tokenizer = VAL();
        else if (IS("--min-p", "--min-p")) o->min_p = parse_float(o->cmd, a, VAL(), 0, 1);
        else if (IS("--repeat-penalty", "--repeat-penalty")) o->repeat_penalty = parse_float(o->cmd, a, VAL(), 1e-6f, 100);
        else if (IS("--repeat-last-n", "--repeat-last-n")) o->repeat_last_n = (int)cli_parse_int(o->cmd, a, VAL(), -1, INT_MAX);
        else if (IS("--presence-penalty", "--presence-penalty")) o->presence_penalty = parse_float(o->cmd, a, VAL(), -100, 100);
        else if (IS("--frequency-penalty", "--frequency-penalty")) o->frequency_penalty = parse_float(o->cmd, a, VAL(), -100, 100);
        else if (IS("--logit-bias", "--logit-bias")) {
            const char *v = VAL();
            char *end, *eq;
            errno = 0;
            long id = strtol(v, &eq, 10);
            float b = *eq == '=' ? strtof(eq + 1, &end) : 0;
            if (errno || eq == v || *eq != '=' || end == eq + 1 || *end || id < 0 || id > INT32_MAX || !(b >= -100 && b <= 100))
                cli_usage_err(o->cmd, "--logit-bias expects ID=BIAS (a token id >= 0, a bias in -100..100), got", v);
            if (o->n_logit_bias == CLI_MAX_LOGIT_BIAS) cli_usage_err(o->cmd, "too many --logit-bias (at most 1024)", NULL);
            o->logit_bias[o->n_logit_bias++] = (dflash_logit_bias){.id = (int32_t)id, .bias = b};
        }
        else if (IS("--logprobs", "--logprobs")) o->logprobs = (int)cli_parse_int(o->cmd, a, VAL(), 0, DFLASH_MAX_TOP_LOGPROBS);
        else if (IS("--draft-vocab", "--draft-vocab")) cli_parse_draft_vocab(o->cmd, a, VAL(), &o->dv);
        else cli_usage_err(o->cmd, "unknown option", a);
#undef IS
#undef VAL
    }
    if (!o->model) cli_usage_err(o->cmd, "missing -m DIR", NULL);
    cli_find_freq_rank(o->cmd, &o->dv, o->tokenizer, o->model);
    if (o->prompt && o->file) cli_usage_err(o->cmd, "give -p or -f, not both", NULL);
    reject_foreign_opts(o->cmd, argc, argv);
    if (!strcmp(o->cmd, "generate") && !o->chat && (o->system || o->think_given))
        cli_usage_err(o->cmd, o->system ? "--system needs --chat (the chat template places it)"
                                    : "--think / --no-think need --chat (the chat template switches thinking)", NULL);
    if ((o->grammar_file != NULL) + (o->json_schema_file != NULL) + o->json_object > 1) /* before any loading */
        cli_usage_err(o->cmd, "give one of --grammar, --json-schema and --json-object", NULL);
    if (!strcmp(o->cmd, "generate") && !o->chat && (o->reasoning_effort || o->chat_date))
        cli_usage_err(o->cmd, o->reasoning_effort ? "--reasoning-effort needs --chat (the chat template writes it)"
                                                  : "--chat-date needs --chat (the chat template writes it)", NULL);
    const char *bad = chat_harmony_check(&(chat_harmony_opts){.reasoning_effort = o->reasoning_effort, .date = o->chat_date});
    if (bad) cli_usage_err(o->cmd, o->reasoning_effort && strstr(bad, "reasoning_effort") ? "--reasoning-effort:" : "--chat-date:", bad);
    check_model_path(o->cmd, "-m", o->model);
    check_model_path(o->cmd, "--draft", o->draft);
}

/* The rest of f as a malloc'd string; dies when memory runs out or it holds
 * a NUL byte (nul_fmt with path: the message). */
static char *read_text(FILE *f, const char *path, const char *nul_fmt) {
    dfl_buf b = {0};
    char chunk[4096];
    size_t r;
    while ((r = fread(chunk, 1, sizeof chunk, f)) > 0) dfl_buf_add(&b, chunk, r);
    size_t n = b.n;
    char *s = dfl_buf_take(&b);
    if (!s) die("out of memory reading %s", path);
    if (strlen(s) != n) die(nul_fmt, path);
    return s;
}

static char *read_prompt(const opts *o) {
    if (o->prompt) return strdup(o->prompt);
    if (!o->file) cli_usage_err(o->cmd, "missing -p TEXT or -f FILE", NULL);
    FILE *f = strcmp(o->file, "-") == 0 ? stdin : fopen(o->file, "rb");
    if (!f) die("cannot open prompt file %s", o->file);
    char *s = read_text(f, o->file, "prompt file %s contains a NUL byte");
    if (f != stdin) fclose(f);
    return s;
}

static char last_out = '\n'; /* last byte written by on_token */

static int on_token(void *ud, int32_t id, const char *text, size_t len) {
    (void)ud;
    (void)id;
    if (len) last_out = text[len - 1];
    return out_write(text, len) != 0; /* stdout failed: stop generating */
}

/* gpt-oss's harmony and Gemma 4's answers (--chat on a model whose template
 * is one of them): the reply goes through the format's splitter (rp_new_for);
 * stdout gets the final channel (the answer) only, stderr the analysis /
 * commentary / thought channel with --think and a line per tool call. */
typedef struct {
    rp_splitter *sp;
    int show;         /* --think: reasoning to stderr */
    dfl_buf *keep;    /* chat: the final text, for the history (NULL: none) */
    int failed;       /* stdout failed */
    int in_reason;    /* the last thing written to stderr was reasoning without its line end */
} hm_out;

/* The model's chat format when its replies are split by channel (harmony,
 * Gemma 4: rp_new_for gives the splitter), else -1. */
static int channel_format(const dflash_model *m) {
    const char *t = dflash_chat_template(m);
    int f = t ? chat_detect(t) : -1;
    return f == CHAT_HARMONY || f == CHAT_GEMMA4 || f == CHAT_GEMMA4_EARLY ? f : -1;
}

static void hm_event(void *ud, const rp_event *ev) {
    hm_out *h = ud;
    if (h->in_reason && ev->kind != RP_REASONING) fputc('\n', stderr), h->in_reason = 0;
    if (ev->kind == RP_CONTENT) {
        if (h->keep && dfl_buf_add(h->keep, ev->text, ev->len) != 0) die("%s", "out of memory");
        last_out = ev->text[ev->len - 1];
        if (out_write(ev->text, ev->len) != 0) h->failed = 1;
    } else if (ev->kind == RP_REASONING) {
        if (h->show) fwrite(ev->text, 1, ev->len, stderr), h->in_reason = ev->text[ev->len - 1] != '\n';
    } else if (ev->kind == RP_CALL_BEGIN) {
        fprintf(stderr, "[tool call %s: ", ev->name);
    } else if (ev->kind == RP_CALL_ARGS) {
        fwrite(ev->text, 1, ev->len, stderr);
    } else {
        fputs("]\n", stderr);
    }
}

static int on_harmony_token(void *ud, int32_t id, const char *text, size_t len) {
    (void)id;
    hm_out *h = ud;
    rp_feed(h->sp, text, len, hm_event, h);
    return h->failed;
}

static void hm_finish(hm_out *h) {
    rp_finish(h->sp, hm_event, h);
    if (h->in_reason) fputc('\n', stderr), h->in_reason = 0;
    rp_free(h->sp);
    h->sp = NULL;
}

/* --logprobs: the entries of the emitted tokens, in order. */
typedef struct {
    dflash_logprob *v;
    size_t n, cap;
} lp_list;

static int on_logprob(void *ud, const dflash_logprob *lp) {
    lp_list *l = ud;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->v = realloc(l->v, l->cap * sizeof *l->v);
        if (!l->v) die("%s", "out of memory");
    }
    l->v[l->n++] = *lp;
    return 0;
}

/* A token's bytes for a terminal line: printable ASCII as is, the rest \xNN. */
static void put_piece(const dflash_model *m, int32_t id) {
    char buf[256];
    int n = dflash_token_piece(m, id, buf, sizeof buf);
    fputc('\'', stderr);
    for (int i = 0; i < n && i < (int)sizeof buf - 1; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') fputc(c, stderr);
        else fprintf(stderr, "\\x%02x", c);
    }
    fputc('\'', stderr);
}

static void print_logprobs(const dflash_model *m, const lp_list *l) {
    fprintf(stderr, "\nlogprobs (the target's log-softmax after --logit-bias and penalties, before --temp):\n");
    for (size_t i = 0; i < l->n; i++) {
        const dflash_logprob *e = &l->v[i];
        fprintf(stderr, "%zu\t%d\t%.6f\t", i, e->id, e->logprob);
        put_piece(m, e->id);
        for (int k = 0; k < e->n_top; k++) {
            fprintf(stderr, k ? " " : "\ttop: ");
            fprintf(stderr, "%d:", e->top[k].id);
            put_piece(m, e->top[k].id);
            fprintf(stderr, ":%.6f", e->top[k].logprob);
        }
        fputc('\n', stderr);
    }
}

static void print_stats(const dflash_model *m, const dflash_stats *st, int json) {
    dflash_info in;
    dflash_get_info(m, &in);
    double pt = st->prompt_s > 0 ? (st->n_prompt - st->n_reused) / st->prompt_s : 0;
    /* the first token comes with the prompt (prefill's logits): decode_s
     * holds the steps of the other n_tokens - 1 (a one-token reply: no rate) */
    double dt = st->n_tokens > 1 && st->decode_s > 0 ? (st->n_tokens - 1) / st->decode_s : 0;
    double ms = st->n_tokens > 1 ? 1000.0 * st->decode_s / (st->n_tokens - 1) : 0;
    if (json) {
        fprintf(stderr,
                "{\"n_prompt\": %d, \"n_tokens\": %d, \"load_s\": %.4f, \"prompt_tok_s\": %.2f, "
                "\"decode_tok_s\": %.2f, \"ms_per_token\": %.3f, \"rounds\": %d, \"plain_steps\": %d, "
                "\"tau\": %.4f, \"accept_per_pos\": [",
                st->n_prompt, st->n_tokens, in.load_s, pt, dt, ms, st->rounds, st->plain_steps, st->tau);
        for (int i = 0; i < st->n_pos; i++) fprintf(stderr, "%s%.4f", i ? ", " : "", st->accept_per_pos[i]);
        int top = 0; /* the histogram up to its last non-zero entry */
        for (int a = 0; a < 64; a++)
            if (st->accept_hist[a]) top = a + 1;
        fprintf(stderr, "], \"accept_hist\": [");
        for (int a = 0; a < top; a++) fprintf(stderr, "%s%d", a ? ", " : "", st->accept_hist[a]);
        fprintf(stderr, "], \"verified_rows\": %d, \"tree_rounds\": %d", st->n_verified, st->n_tree_rounds);
        fprintf(stderr,
                ", \"draft_ms\": %.3f, \"verify_ms\": %.3f, \"other_ms\": %.3f, \"stop_reason\": \"%s\", "
                "\"threads\": %d, \"backend\": \"%s\", \"kernels\": \"%s\"}\n",
                1000 * st->draft_s, 1000 * st->verify_s, 1000 * st->other_s, st->stop_reason, in.n_threads,
                in.backend, in.kernels);
        return;
    }
    fprintf(stderr, "\n\nload: %.3f s | %s, %d layers, hidden %d, %s, %.1f MB | backend %s (%s), %d threads\n",
            in.load_s, in.arch, in.n_layers, in.hidden, in.weight_format, in.weight_bytes / 1e6, in.backend,
            in.kernels, in.n_threads);
    if (in.has_draft) fprintf(stderr, "draft: %d layers, %s\n", in.draft_layers, in.draft_weight_format);
    fprintf(stderr, "prompt: %d tokens (%d reused), %.2f tok/s\n", st->n_prompt, st->n_reused, pt);
    fprintf(stderr, "decode: %d tokens, %.2f tok/s, %.2f ms/token (stopped: %s)\n", st->n_tokens, dt, ms,
            st->stop_reason);
    if (st->rounds) {
        fprintf(stderr, "dflash: %d rounds, tau %.2f, %d plain steps; accept per position:", st->rounds, st->tau,
                st->plain_steps);
        for (int i = 0; i < st->n_pos; i++) fprintf(stderr, " %.2f", st->accept_per_pos[i]);
        fprintf(stderr, "\nrounds by drafts accepted (accepted:rounds):");
        for (int a = 0; a < 64; a++)
            if (st->accept_hist[a]) fprintf(stderr, " %d:%d", a, st->accept_hist[a]);
        fprintf(stderr, "\nverified: %d rows in %d rounds (%.1f a round; %d tree rounds)", st->n_verified, st->rounds,
                (double)st->n_verified / st->rounds, st->n_tree_rounds);
        double tot = st->draft_s + st->verify_s + st->other_s;
        fprintf(stderr, "\ntime: draft %.1f ms (%.0f%%), verify %.1f ms (%.0f%%), other %.1f ms\n", 1000 * st->draft_s,
                tot > 0 ? 100 * st->draft_s / tot : 0, 1000 * st->verify_s, tot > 0 ? 100 * st->verify_s / tot : 0,
                1000 * st->other_s);
    }
}

static dflash_model *load(const opts *o) {
    dflash_params p = dflash_default_params();
    p.n_threads = o->threads;
    p.n_ctx = o->ctx;
    p.quant = o->quant;
    p.draft_quant = o->draft_quant;
    p.draft_window = o->draft_window;
    p.backend = o->backend;
    p.tokenizer = o->tokenizer;
    dflash_model *m = dflash_load(o->model, o->no_draft ? NULL : o->draft, &p);
    if (!m) die("%s", dflash_error());
    return m;
}

/* A seed for when none is given (llama.cpp's default): 63 bits, so that
 * --seed takes it back. */
static unsigned long long random_seed(void) {
    unsigned long long x = 0;
    int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, &x, sizeof x) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (unsigned long long)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (unsigned long long)ts.tv_sec ^
            ((unsigned long long)getpid() << 32);
    }
    if (fd >= 0) close(fd);
    return x & 0x7fffffffffffffffull;
}

static dflash_gen gen_params(const opts *o) {
    dflash_gen g = dflash_default_gen();
    g.n_predict = o->n_predict;
    g.temp = o->temp;
    g.top_k = o->top_k;
    g.top_p = o->top_p;
    g.seed = o->seed_given ? o->seed : random_seed();
    if (!o->seed_given && o->temp > 0) fprintf(stderr, "seed: %llu (--seed %llu repeats this run)\n",
                                               (unsigned long long)g.seed, (unsigned long long)g.seed);
    g.block_size = o->block_size;
    g.draft_max = o->draft_max;
    g.draft_vocab = o->dv.n;
    g.draft_vocab_rank = o->dv.rank[0] ? o->dv.rank : NULL;
    g.tree = o->tree;
    g.ignore_eos = o->ignore_eos;
    g.use_draft = !o->no_draft;
    g.min_p = o->min_p;
    g.repeat_penalty = o->repeat_penalty;
    g.repeat_last_n = o->repeat_last_n;
    g.frequency_penalty = o->frequency_penalty;
    g.presence_penalty = o->presence_penalty;
    g.logit_bias = o->logit_bias;
    g.n_logit_bias = o->n_logit_bias;
    return g;
}

/* The chat template's prompt for msgs with the command line's think switch
 * and harmony options; dies with the library's error (an option the model's
 * template does not take is one). */
static char *chat_prompt(dflash_model *m, const dflash_message *msgs, int n, const opts *o) {
    dflash_chat_message *cm = calloc((size_t)(n ? n : 1), sizeof *cm);
    if (!cm) die("%s", "out of memory");
    for (int i = 0; i < n; i++) cm[i] = (dflash_chat_message){.role = msgs[i].role, .content = msgs[i].content};
    dflash_chat_opts co = {.reasoning_effort = o->reasoning_effort, .date = o->chat_date};
    char *p = dflash_chat_prompt_opts(m, cm, n, NULL, 1, o->think, &co);
    free(cm);
    if (!p) die("%s", dflash_error());
    return p;
}

static int cmd_generate(int argc, char **argv) {
    opts o;
    parse_opts(&o, argc, argv, help_generate);
    char *text = read_prompt(&o);
    dflash_model *m = load(&o);
    if (o.chat) {
        dflash_message msgs[2];
        int n = 0;
        if (o.system) msgs[n++] = (dflash_message){.role = "system", .content = o.system};
        msgs[n++] = (dflash_message){.role = "user", .content = text};
        char *p = chat_prompt(m, msgs, n, &o);
        free(text);
        text = p;
    }
    if (o.verbose_prompt) fprintf(stderr, "prompt:\n%s\n(end of prompt)\n", text);
    dflash_gen g = gen_params(&o);
    char *grammar = NULL;
    if (o.grammar_file || o.json_schema_file) {
        const char *path = o.grammar_file ? o.grammar_file : o.json_schema_file;
        FILE *f = fopen(path, "rb");
        if (!f) die("cannot open %s", path);
        char *s = read_text(f, path, "%s contains a NUL byte");
        fclose(f);
        if (o.grammar_file) grammar = s;
        else {
            grammar = dflash_json_schema_grammar(s);
            free(s);
            if (!grammar) {
                fprintf(stderr, "%s: %s: %s\n", prog, path, dflash_error());
                exit(1);
            }
        }
    } else if (o.json_object) {
        grammar = dflash_json_schema_grammar(NULL);
    }
    g.grammar = grammar;
    dflash_stats st;
    lp_list lps = {0};
    if (o.logprobs >= 0) {
        g.on_logprob = on_logprob;
        g.top_logprobs = o.logprobs;
    }
    hm_out hm = {.show = o.think};
    int chf = o.chat ? channel_format(m) : -1, harmony = chf >= 0; /* harmony or Gemma 4 */
    if (harmony && o.logprobs >= 0)
        cli_usage_err(o.cmd, "--logprobs is not supported with the harmony (gpt-oss) or Gemma 4 chat format yet", NULL);
    if (harmony) hm.sp = rp_new_for(chf, 0, 0);
    /* a chat prompt holds its special tokens; a plain one gets the tokenizer's (Gemma: <bos>) */
    int32_t *pids = NULL;
    size_t n_pids = 0;
    int rc = o.chat ? dflash_tokenize(m, text, strlen(text), &pids, &n_pids)
                    : dflash_tokenize_prompt(m, text, strlen(text), &pids, &n_pids);
    if (rc == 0)
        rc = harmony ? dflash_generate(m, pids, n_pids, &g, on_harmony_token, &hm, NULL, NULL, &st)
                     : dflash_generate(m, pids, n_pids, &g, on_token, &lps, NULL, NULL, &st);
    free(pids);
    if (harmony) hm_finish(&hm);
    free(text);
    free(grammar);
    if (rc == 0 && o.logprobs >= 0) print_logprobs(m, &lps);
    free(lps.v);
    if (last_out != '\n' && isatty(STDOUT_FILENO)) out_write("\n", 1); /* the shell prompt on its own line */
    if (rc != 0) {
        fflush(stdout);
        fprintf(stderr, "%s: error: %s\n", prog, dflash_error());
        dflash_free(m);
        return 1;
    }
    print_stats(m, &st, o.stats_json);
    dflash_free(m);
    return 0;
}


/* ---- chat ------------------------------------------------------------------ */

/* Ctrl-C while an answer streams stops the answer; at the prompt it quits. */
static volatile sig_atomic_t chat_answering, chat_interrupted;

static void on_sigint(int sig) {
    if (chat_answering) {
        chat_interrupted = 1;
        return;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static int on_chat_token(void *ud, int32_t id, const char *text, size_t len) {
    (void)id;
    if (dfl_buf_add(ud, text, len) != 0) die("%s", "out of memory");
    if (out_write(text, len) != 0) return 1;
    return chat_interrupted != 0;
}

/* harmony: the final channel on stdout and into the history (hm_out.keep) */
static int on_chat_harmony_token(void *ud, int32_t id, const char *text, size_t len) {
    return on_harmony_token(ud, id, text, len) || chat_interrupted != 0;
}

/* One line of any length without its line end, malloc'd; NULL at EOF. On a
 * terminal with libedit: line editing and history. */
static char *chat_read_line(int tty) {
#ifdef DFLASH_LIBEDIT
    if (tty) {
        rl_outstream = stderr; /* stdout carries only the answers */
        char *l = readline("> ");
        if (l && *l) add_history(l);
        return l;
    }
#endif
    (void)tty;
    fprintf(stderr, "> ");
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        free(line);
        return NULL;
    }
    line[strcspn(line, "\r\n")] = 0;
    return line;
}

static const char *chat_help =
    "commands:\n"
    "  /reset   forget the conversation (the system message stays)\n"
    "  /help    this list\n"
    "  /exit    quit (also /quit, or end-of-file: Ctrl-D)\n"
    "A message that starts with / is sent with one more: //etc/hosts sends /etc/hosts.\n"
    "Ctrl-C stops an answer; the conversation keeps what was said.\n";

typedef struct {
    dflash_message *msgs;
    char **owned;
    int n, cap, first; /* first: index of the first droppable message (after the system one) */
} chat_hist;

static void hist_add(chat_hist *h, const char *role, char *text) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 16;
        h->msgs = realloc(h->msgs, sizeof *h->msgs * (size_t)h->cap);
        h->owned = realloc(h->owned, sizeof(char *) * (size_t)h->cap);
        if (!h->msgs || !h->owned) die("%s", "out of memory");
    }
    h->owned[h->n] = text;
    h->msgs[h->n++] = (dflash_message){.role = role, .content = text};
}

static void hist_drop(chat_hist *h, int i, int count) {
    if (count == 0) return; /* an empty history has no arrays: memmove(NULL, ...) is undefined */
    for (int k = i; k < i + count; k++) free(h->owned[k]);
    memmove(h->msgs + i, h->msgs + i + count, sizeof *h->msgs * (size_t)(h->n - i - count));
    memmove(h->owned + i, h->owned + i + count, sizeof(char *) * (size_t)(h->n - i - count));
    h->n -= count;
}

/* The prompt of the history without its `drop` oldest exchanges (user
 * message + answer, after the system message); *n_tok its token count.
 * NULL + error when the tokenizer refuses the text. */
static char *hist_render(dflash_model *m, const chat_hist *h, int drop, const opts *o, size_t *n_tok) {
    int n = h->n - 2 * drop;
    dflash_message *v = malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
    if (!v) die("%s", "out of memory");
    memcpy(v, h->msgs, sizeof *v * (size_t)h->first);
    memcpy(v + h->first, h->msgs + h->first + 2 * drop, sizeof *v * (size_t)(n - h->first));
    char *prompt = chat_prompt(m, v, n, o);
    free(v);
    int32_t *ids;
    if (dflash_tokenize(m, prompt, strlen(prompt), &ids, n_tok) != 0) {
        free(prompt);
        return NULL;
    }
    free(ids);
    return prompt;
}

/* The prompt for the history (whose last message is the new user message),
 * leaving `room` positions of the context for the answer. When the new
 * message does not fit even alone (after the system message), it is refused
 * and removed: the earlier conversation stays as it was. Otherwise the
 * fewest oldest exchanges that make it fit are dropped, and said so. */
static char *chat_fit(dflash_model *m, chat_hist *h, const opts *o, int room) {
    dflash_info in;
    dflash_get_info(m, &in);
    int pairs = (h->n - h->first - 1) / 2; /* exchanges before the new message */
    size_t n;
    char *prompt = hist_render(m, h, 0, o, &n);
    if (prompt && (long)n + room <= in.n_ctx) return prompt;
    free(prompt);
    if (pairs > 0) { /* does the new message fit with none of the earlier ones? */
        prompt = hist_render(m, h, pairs, o, &n);
        free(prompt);
    }
    if (!prompt || (long)n + room > in.n_ctx) {
        if (!prompt) fprintf(stderr, "%s: error: %s\n", prog, dflash_error());
        else
            fprintf(stderr, "%s: error: the message is %zu tokens with the template; the context holds %d "
                            "(leaving %d for the answer): shorten it, or use a larger -c%s\n", prog, n, in.n_ctx,
                    room, pairs ? " (the conversation so far is kept)" : "");
        hist_drop(h, h->n - 1, 1);
        return NULL;
    }
    for (int drop = 1; drop <= pairs; drop++) { /* the fewest oldest exchanges that make room */
        prompt = hist_render(m, h, drop, o, &n);
        if (prompt && (long)n + room <= in.n_ctx) {
            hist_drop(h, h->first, 2 * drop);
            fprintf(stderr, "(the conversation outgrew the %d-position context: dropped the %d oldest "
                            "exchange%s (a message and its answer), %d kept; /reset starts over)\n", in.n_ctx,
                    drop, drop > 1 ? "s" : "", pairs - drop);
            return prompt;
        }
        free(prompt);
    }
    return NULL; /* not reached: drop == pairs fits */
}

static int cmd_chat(int argc, char **argv) {
    opts o;
    parse_opts(&o, argc, argv, help_chat);
    dflash_model *m = load(&o);
    dflash_gen g = gen_params(&o);
    dflash_info in;
    dflash_get_info(m, &in);
    int room = g.n_predict < in.n_ctx / 4 ? g.n_predict : in.n_ctx / 4; /* kept free for an answer */
    int chf = channel_format(m), harmony = chf >= 0; /* harmony or Gemma 4: the answer's channels split */
    chat_hist h = {NULL, NULL, 0, 0, 0};
    if (o.system) hist_add(&h, "system", strdup(o.system));
    h.first = h.n;
    /* conv: the tokens the model has read and written so far (the last
     * prompt + its answer as generated). With thinking off a new turn
     * extends them (dflash_chat_next_turn), so the whole cached
     * conversation is reused; after a trim, an error or with --think
     * (whose template drops earlier reasoning) the history is rendered
     * again from the messages. */
    int32_t *conv = NULL;
    size_t n_conv = 0;
    int tty = isatty(STDIN_FILENO);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sa.sa_flags = SA_RESTART; /* a write to stdout blocked on a full pipe resumes */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    fprintf(stderr, "dflash chat: type a message; /help lists commands, Ctrl-C stops an answer, /exit quits.\n");
    int at_eof = 1; /* left by end-of-file (Ctrl-D), not /exit */
    for (char *line; (line = chat_read_line(tty)) != NULL;) {
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
            free(line);
            at_eof = 0;
            break;
        }
        if (!strcmp(line, "/reset") || !strcmp(line, "/help") || !line[0]) {
            if (!strcmp(line, "/reset")) {
                hist_drop(&h, h.first, h.n - h.first);
                free(conv);
                conv = NULL, n_conv = 0;
                fprintf(stderr, "(conversation cleared)\n");
            } else if (line[0]) {
                fputs(chat_help, stderr);
            }
            free(line);
            continue;
        }
        if (line[0] == '/' && line[1] != '/') { /* not a command we know: never sent to the model */
            fprintf(stderr, "(unknown command %.40s: /help lists them; start a message with // to send one "
                            "that begins with /)\n", line);
            free(line);
            continue;
        }
        if (line[0] == '/') memmove(line, line + 1, strlen(line)); /* "//x" is the message "/x" */
        hist_add(&h, "user", line);
        int32_t *ids = NULL;
        size_t n_ids = 0;
        if (conv && !o.think) { /* extend the conversation's tokens */
            char *next = dflash_chat_next_turn(m, line, o.think);
            int32_t *t = NULL;
            size_t nt = 0;
            if (next && dflash_tokenize(m, next, strlen(next), &t, &nt) == 0 && n_conv + nt + (size_t)room <= (size_t)in.n_ctx) {
                ids = malloc(sizeof *ids * (n_conv + nt));
                if (!ids) die("%s", "out of memory");
                memcpy(ids, conv, sizeof *ids * n_conv);
                memcpy(ids + n_conv, t, sizeof *ids * nt);
                n_ids = n_conv + nt;
            }
            free(t);
            free(next);
        }
        if (!ids) { /* render the history (trimmed to fit) from the messages */
            char *prompt = chat_fit(m, &h, &o, room);
            if (!prompt) continue;
            int tr = dflash_tokenize(m, prompt, strlen(prompt), &ids, &n_ids);
            free(prompt);
            if (tr != 0) die("%s", dflash_error()); /* chat_fit tokenized the same text */
        }
        free(conv);
        conv = NULL, n_conv = 0;
        dfl_buf reply = {0};
        dflash_stats st;
        int32_t *answer = NULL;
        size_t n_answer = 0;
        chat_interrupted = 0;
        chat_answering = 1;
        hm_out hm = {.show = o.think, .keep = &reply};
        if (harmony) hm.sp = rp_new_for(chf, 0, 0);
        int rc = harmony ? dflash_generate(m, ids, n_ids, &g, on_chat_harmony_token, &hm, &answer, &n_answer, &st)
                         : dflash_generate(m, ids, n_ids, &g, on_chat_token, &reply, &answer, &n_answer, &st);
        if (harmony) hm_finish(&hm);
        chat_answering = 0;
        if (rc != 0) {
            fprintf(stderr, "\n%s: error: %s\n", prog, dflash_error());
            dfl_buf_free(&reply);
            free(ids);
            free(answer);
            hist_drop(&h, h.n - 1, 1);
            continue;
        }
        conv = realloc(ids, sizeof *ids * (n_ids + n_answer + 1));
        if (!conv) die("%s", "out of memory");
        if (n_answer) memcpy(conv + n_ids, answer, sizeof *conv * n_answer);
        n_conv = n_ids + n_answer;
        free(answer);
        out_write("\n", 1);
        if (stdout_errno) break;
        if (chat_interrupted) fprintf(stderr, "(answer stopped)\n");
        else if (st.stop_reason && !strcmp(st.stop_reason, "context full"))
            fprintf(stderr, "(the context is full: the answer was cut; the oldest turns will be dropped next, "
                            "or /reset starts over)\n");
        if (o.verbose) print_stats(m, &st, 0);
        hist_add(&h, "assistant", dfl_buf_take(&reply));
    }
    if (at_eof && tty) fputc('\n', stderr); /* Ctrl-D at the prompt: end its line */
    hist_drop(&h, 0, h.n);
    free(h.msgs);
    free(h.owned);
    free(conv);
    dflash_free(m);
    return 0;
}

static int cmd_tokenize(int argc, char **argv) {
    opts o;
    parse_opts(&o, argc, argv, help_tokenize);
    char *text = read_prompt(&o);
    dflash_model *m = dflash_load_tokenizer(o.model);
    if (!m) die("%s", dflash_error());
    int32_t *ids;
    size_t n;
    if ((o.special ? dflash_tokenize_prompt : dflash_tokenize)(m, text, strlen(text), &ids, &n) != 0) {
        fprintf(stderr, "%s: error: prompt: %s\n", prog, dflash_error());
        free(text);
        dflash_free(m);
        return 1;
    }
    for (size_t i = 0; i < n; i++) printf("%s%d", i ? " " : "", ids[i]);
    printf("\n");
    free(ids);
    free(text);
    dflash_free(m);
    return 0;
}

/* ---- vocab-rank -------------------------------------------------------- */

static const char *help_vocab_rank =
    "usage: dflash vocab-rank -m DIR -o FILE TEXT...\n"
    "\n"
    "Count the tokens of the TEXT files with DIR's tokenizer and write their ids,\n"
    "most frequent first, as a rank file for --draft-vocab FILE:N (freq:N reads\n"
    "vocab_rank.txt in the --tokenizer or -m directory). The header records DIR's\n"
    "config.json vocab_size, which the model must have. Files are tokenized in\n"
    "pieces of about 64 KB cut at line ends.\n"
    "\n"
    "  -m, --model DIR        a model directory (config.json + tokenizer)\n"
    "  -o, --output FILE      the rank file to write\n"
    "  -h, --help             this help\n";

/* config.json's vocab_size in dir, or -1 with a message. */
static int config_vocab(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (size_t r; (cap - n > 0 || (buf = realloc(buf, cap = cap ? 2 * cap : 65536))) &&
                   (r = fread(buf + n, 1, cap - n - 1, f)) > 0;)
        n += r;
    fclose(f);
    if (!buf) return -1;
    buf[n] = 0;
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vocab_size");
    if (!v) v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "text_config"), "vocab_size");
    int vocab = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= (1 << 24) ? (int)v->valuedouble : -1;
    cJSON_Delete(j);
    return vocab;
}

static int cmd_vocab_rank(int argc, char **argv) {
    const char *model = NULL, *out = NULL;
    const char **files = calloc((size_t)argc, sizeof *files);
    int nf = 0;
    if (!files) die("%s", "out of memory");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help_vocab_rank, stdout);
            exit(0);
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (i + 1 >= argc) cli_usage_err("vocab-rank", "missing value for", a);
            model = argv[++i];
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            if (i + 1 >= argc) cli_usage_err("vocab-rank", "missing value for", a);
            out = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            cli_usage_err("vocab-rank", "unknown option", a);
        } else {
            files[nf++] = a;
        }
    }
    if (!model) cli_usage_err("vocab-rank", "missing -m DIR", NULL);
    if (!out) cli_usage_err("vocab-rank", "missing -o FILE", NULL);
    if (!nf) cli_usage_err("vocab-rank", "no TEXT files to count", NULL);
    int vocab = config_vocab(model);
    if (vocab < 1) die("%s/config.json: no vocab_size (the rank file records the model's vocabulary size)", model);
    dflash_model *m = dflash_load_tokenizer(model);
    if (!m) die("%s", dflash_error());
    int64_t *counts = calloc((size_t)vocab, sizeof *counts);
    if (!counts) die("%s", "out of memory");
    long long total = 0;
    for (int k = 0; k < nf; k++) {
        FILE *f = fopen(files[k], "rb");
        if (!f) die("cannot open %s", files[k]);
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (size_t r = 1; r > 0;) {
            if (len == cap && !(buf = realloc(buf, cap = cap ? 2 * cap : 1 << 20))) die("%s", "out of memory");
            r = fread(buf + len, 1, cap - len, f);
            len += r;
        }
        if (ferror(f)) die("cannot read %s", files[k]);
        fclose(f);
        enum { PIECE = 65536 };
        for (size_t at = 0; at < len;) { /* pieces of about PIECE bytes ending at a line end */
            size_t cut = len - at <= PIECE ? len - at : PIECE;
            if (at + cut < len) {
                size_t nl = cut;
                while (nl > 0 && buf[at + nl - 1] != '\n') nl--;
                if (nl > 0) cut = nl;
            }
            int32_t *ids;
            size_t n;
            if (dflash_tokenize(m, buf + at, cut, &ids, &n) != 0) {
                fprintf(stderr, "%s: error: %s: %s\n", prog, files[k], dflash_error());
                exit(1);
            }
            for (size_t t = 0; t < n; t++)
                if (ids[t] >= 0 && ids[t] < vocab) counts[ids[t]]++;
            total += (long long)n;
            free(ids);
            at += cut;
        }
        free(buf);
    }
    if (dflash_vocab_rank_write(out, counts, vocab) != 0) die("%s", dflash_error());
    int listed = 0;
    for (int i = 0; i < vocab; i++) listed += counts[i] > 0;
    fprintf(stderr, "%s: %lld tokens, %d distinct ids of %d, from %d file%s\n", out, total, listed, vocab, nf,
            nf == 1 ? "" : "s");
    free(counts);
    free(files);
    dflash_free(m);
    return 0;
}

/* ---- bench ---------------------------------------------------------------- */

typedef struct {
    char *domain, *prompt;
} bench_prompt;

static bench_prompt *read_prompts(const char *file, int *n) {
    FILE *f = fopen(file, "r");
    if (!f) die("cannot open prompt file %s", file);
    bench_prompt *ps = NULL;
    int cap = 0;
    *n = 0;
    char *line = NULL;
    size_t lcap = 0;
    int lineno = 0;
    while (getline(&line, &lcap, f) > 0) {
        lineno++;
        if (strspn(line, " \t\r\n") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "domain"), *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        if (!cJSON_IsString(d) || !cJSON_IsString(p)) {
            fprintf(stderr, "%s: error: %s line %d: need {\"domain\": string, \"prompt\": string}\n", prog, file,
                    lineno);
            exit(1);
        }
        if (*n == cap) ps = realloc(ps, sizeof *ps * (size_t)(cap = cap ? 2 * cap : 64));
        ps[*n].domain = strdup(d->valuestring);
        ps[*n].prompt = strdup(p->valuestring);
        (*n)++;
        cJSON_Delete(j);
    }
    free(line);
    fclose(f);
    if (!*n) die("no prompts in %s", file);
    return ps;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n ? v[n / 2] : 0;
}

/* DFlash runs of one mode (the chain, or --tree N) in one domain, rep 0 */
typedef struct {
    double tau_sum;          /* mean tau per prompt: the sum over prompts that drafted */
    int tau_n;
    long rounds, verified;   /* verify rows in drafting rounds (nodes, anchors included) */
    long hist[64];           /* drafting rounds by drafts accepted */
    double draft_s, verify_s, other_s;
} mode_stats;

typedef struct {
    char name[64];
    int n_prompts;
    double *greedy, *dflash, *tree; /* tok/s per rep (tree: with --tree N) */
    double tau_sum;
    int tau_n, identical, compared;
    mode_stats chain_m, tree_m;
} domain_stats;

static void mode_add(mode_stats *ms, const dflash_stats *st) {
    if (st->rounds) { /* prompts that never drafted have no tau */
        ms->tau_sum += st->tau;
        ms->tau_n++;
    }
    ms->rounds += st->rounds;
    ms->verified += st->n_verified;
    for (int a = 0; a < 64; a++) ms->hist[a] += st->accept_hist[a];
    ms->draft_s += st->draft_s;
    ms->verify_s += st->verify_s;
    ms->other_s += st->other_s;
}

static double mode_tau(const mode_stats *ms) { return ms->tau_n ? ms->tau_sum / ms->tau_n : 0; }

/* "a:rounds ..." of the histogram, percent of rounds, into buf */
static const char *mode_hist(const mode_stats *ms, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int a = 0; a < 64 && at < n; a++)
        if (ms->hist[a])
            at += (size_t)snprintf(buf + at, n - at, "%s%d:%.0f%%", at ? " " : "", a, 100.0 * ms->hist[a] / ms->rounds);
    return buf;
}

/* An SVG with two panels: forward cost (x T=1) against T, with the ideal
 * "free width" line at 1 and the sequential line T; and speed-up per domain. */
/* FILE.tmp-dflash, the plot's temporary name (renamed to FILE when complete). */
static char *plot_tmp(const char *file) {
    size_t n = strlen(file);
    char *t = malloc(n + sizeof ".tmp-dflash");
    if (!t) die("%s", "out of memory");
    memcpy(t, file, n);
    memcpy(t + n, ".tmp-dflash", sizeof ".tmp-dflash");
    return t;
}

/* Before the benchmark: the plot can be written (its temporary is created
 * and removed again), so that a bad --plot fails now, not after the run. */
static void check_plot(const char *file) {
    struct stat st;
    if (stat(file, &st) == 0 && S_ISDIR(st.st_mode)) {
        fprintf(stderr, "%s bench: error: --plot %s is a directory\n", prog, file);
        exit(1);
    }
    char *t = plot_tmp(file);
    unlink(t);
    int fd = open(t, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd < 0) {
        fprintf(stderr, "%s bench: error: --plot %s: cannot write %s: %s\n", prog, file, t, strerror(errno));
        exit(1);
    }
    close(fd);
    unlink(t);
    free(t);
}

static void write_plot(const char *file, const int *widths, const double *cost, int nw, const domain_stats *ds,
                       const double *speedup, int nd) {
    char *tmp = plot_tmp(file);
    unlink(tmp); /* a leftover (or a link planted there) is replaced, never written through */
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        fprintf(stderr, "%s bench: error: cannot write %s: %s\n", prog, tmp, strerror(errno));
        exit(1);
    }
    fprintf(f, "<svg xmlns='http://www.w3.org/2000/svg' width='760' height='320' font-family='sans-serif' "
               "font-size='12'>\n<rect width='760' height='320' fill='white'/>\n");
    /* panel 1: cost ratio, log2 x axis 1..16, y 0..16 */
    double x0 = 50, y0 = 280, w = 300, h = 240, ymax = 16;
    for (int i = 0; i < nw; i++) ymax = cost[i] / cost[0] > ymax ? cost[i] / cost[0] : ymax;
#define PX(t) (x0 + w * (log2((double)(t)) / 4.0))
#define PY(v) (y0 - h * ((v) / ymax))
    fprintf(f, "<text x='%g' y='25'>target forward cost (x T=1) vs tokens per forward T</text>\n", x0);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='black'/>\n", x0, y0, x0 + w, y0);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='black'/>\n", x0, y0, x0, y0 - h);
    for (int i = 0; i < nw; i++)
        fprintf(f, "<text x='%g' y='%g' text-anchor='middle'>%d</text>\n", PX(widths[i]), y0 + 15, widths[i]);
    for (int v = 0; v <= (int)ymax; v += 4) fprintf(f, "<text x='%g' y='%g' text-anchor='end'>%d</text>\n", x0 - 5, PY(v) + 4, v);
    fprintf(f, "<polyline fill='none' stroke='#bbb' stroke-dasharray='4' points='");
    for (int i = 0; i < nw; i++) fprintf(f, "%g,%g ", PX(widths[i]), PY(widths[i]));
    fprintf(f, "'/>\n<polyline fill='none' stroke='#1f77b4' stroke-width='2' points='");
    for (int i = 0; i < nw; i++) fprintf(f, "%g,%g ", PX(widths[i]), PY(cost[i] / cost[0]));
    fprintf(f, "'/>\n");
    for (int i = 0; i < nw; i++)
        fprintf(f, "<circle cx='%g' cy='%g' r='3' fill='#1f77b4'/><text x='%g' y='%g'>%.2f</text>\n", PX(widths[i]),
                PY(cost[i] / cost[0]), PX(widths[i]) + 4, PY(cost[i] / cost[0]) - 6, cost[i] / cost[0]);
    fprintf(f, "<text x='%g' y='%g' fill='#999'>T (sequential)</text>\n", PX(8) - 30, PY(8) - 8);
#undef PX
#undef PY
    /* panel 2: speed-up bars */
    x0 = 430;
    double smax = 2;
    for (int k = 0; k < nd; k++) smax = speedup[k] > smax ? speedup[k] : smax;
    fprintf(f, "<text x='%g' y='25'>DFlash speed-up over greedy per domain</text>\n", x0);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='black'/>\n", x0, y0, x0 + w, y0);
    double one = y0 - h * (1 / smax);
    fprintf(f, "<line x1='%g' y1='%g' x2='%g' y2='%g' stroke='#bbb' stroke-dasharray='4'/>\n", x0, one, x0 + w, one);
    for (int k = 0; k < nd; k++) {
        double bw = w / (nd ? nd : 1) * 0.6, bx = x0 + w / nd * (k + 0.2), bh = h * speedup[k] / smax;
        fprintf(f, "<rect x='%g' y='%g' width='%g' height='%g' fill='#ff7f0e'/>\n", bx, y0 - bh, bw, bh);
        fprintf(f, "<text x='%g' y='%g' text-anchor='middle'>%.2fx</text>\n", bx + bw / 2, y0 - bh - 5, speedup[k]);
        fprintf(f, "<text x='%g' y='%g' text-anchor='middle'>%s</text>\n", bx + bw / 2, y0 + 15, ds[k].name);
    }
    fprintf(f, "</svg>\n");
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno;
    if (fclose(f) != 0 && !bad) bad = 1, e = errno;
    if (bad || rename(tmp, file) != 0) {
        if (!bad) e = errno;
        unlink(tmp);
        fprintf(stderr, "%s bench: error: writing %s: %s (left as it was)\n", prog, file, strerror(e));
        exit(1);
    }
    free(tmp);
}

static int cmd_bench(int argc, char **argv) {
    opts o;
    parse_opts(&o, argc, argv, help_bench);
    /* the forward costs run T <= 16 rows past --depth: without -c the context
     * grows to fit them (the default 4096 would not hold a deep bench) */
    enum { BENCH_ROWS = 16 };
    if (o.ctx == 0 && o.depth + BENCH_ROWS > 4096) o.ctx = o.depth + BENCH_ROWS;
    char err[160];
    if (o.ctx > 0 && o.depth + BENCH_ROWS > o.ctx) {
        snprintf(err, sizeof err, "--depth %d needs a context of at least %d positions (-c %d given)", o.depth,
                 o.depth + BENCH_ROWS, o.ctx);
        die("%s", err);
    }
    if (o.plot) check_plot(o.plot);
    int np = 0; /* the prompt file is read (and checked) before anything runs */
    bench_prompt *ps = o.prompts ? read_prompts(o.prompts, &np) : NULL;
    dflash_model *m = load(&o);
    dflash_info in;
    dflash_get_info(m, &in);
    double bw = dflash_bandwidth(m);
    /* what the backend measured (dflash_bandwidth) */
    const char *bw_what = !strcmp(in.backend, "cpu")    ? "CPU read bandwidth (parallel read)"
                          : !strcmp(in.backend, "cuda") ? "GPU memory bandwidth (device-to-device copy)"
                                                        : "backend memory bandwidth";
    enum { NW = BENCH_ROWS };
    static const int widths[NW] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    double cost[NW];
    int depth = o.depth;
    if (depth + NW > in.n_ctx) { /* a model whose max context is under 4096 */
        snprintf(err, sizeof err, "--depth %d needs a context of at least %d positions; this model's is %d", depth,
                 depth + NW, in.n_ctx);
        die("%s", err);
    }
    for (int i = 0; i < NW; i++)
        if (dflash_time_forward(m, widths[i], depth, o.reps, &cost[i]) != 0) die("%s", dflash_error());
    /* the draft block and what DFlash would gain at a given acceptance:
     * tau tokens per round for one draft block and one verify of the block */
    double draft_s = 0;
    int B = in.has_draft ? in.block_size : 0;
    dflash_gen vg = dflash_default_gen(); /* the draft block at the --draft-vocab asked for */
    vg.draft_vocab = o.dv.n;
    vg.draft_vocab_rank = o.dv.rank[0] ? o.dv.rank : NULL;
    if (B >= 2 && B <= NW && depth >= 1 && dflash_time_draft_gen(m, &vg, depth, o.reps, &draft_s) != 0)
        die("%s", dflash_error());
    static const double taus[] = {3.0, 5.0, 6.5, 8.0};
    double decode = 1.0 / cost[0], gbs = in.token_bytes / cost[0] / 1e9;
    if (!o.json) {
        printf("model: %s, %d layers, hidden %d, %s, %.1f MB | backend %s (%s), %d threads\n", in.arch, in.n_layers,
               in.hidden, in.weight_format, in.weight_bytes / 1e6, in.backend, in.kernels, in.n_threads);
        if (in.token_bytes != in.weight_bytes) /* experts: only the routed ones; one row of an untied embedding */
            printf("%s: %.1f GB/s | decode T=1: %.2f ms, %.1f tok/s, the %.1f MB a token reads (routed experts, "
                   "one embedding row) at %.1f GB/s (%.0f%% of it)\n",
                   bw_what, bw, 1e3 * cost[0], decode, in.token_bytes / 1e6, gbs, 100 * gbs / bw);
        else
            printf("%s: %.1f GB/s | decode T=1: %.2f ms, %.1f tok/s, weights at %.1f GB/s (%.0f%% of it)\n", bw_what,
                   bw, 1e3 * cost[0], decode, gbs, 100 * gbs / bw);
        printf("greedy step cost (forward + argmax) at depth %d:\n  T    ms      x T=1   ms/token\n", depth);
        for (int i = 0; i < NW; i++)
            printf("  %-3d %7.2f %6.2f %8.2f\n", widths[i], 1e3 * cost[i], cost[i] / cost[0], 1e3 * cost[i] / widths[i]);
        if (draft_s > 0) {
            double round = draft_s + cost[B - 1];
            printf("draft block (B=%d, %d slots): %.2f ms | a round (draft + verify T=%d): %.2f ms = %.2f decode steps\n",
                   B, B - 1, 1e3 * draft_s, B, 1e3 * round, round / cost[0]);
            printf("projected DFlash speed-up at acceptance tau (tau * step / round):");
            for (int i = 0; i < 4; i++) printf("  tau %.1f: %.2fx", taus[i], taus[i] * cost[0] / round);
            printf("\n");
        }
    }
    domain_stats ds[32];
    int nd = 0;
    double g_all = 0, d_all = 0, tau_all = 0;
    int all_same = 1, have_spec = o.draft && o.prompts && in.has_draft;
    if (have_spec) {
        dflash_gen g = gen_params(&o);
        g.ignore_eos = 0;
        for (int i = 0; i < np; i++) {
            int k = 0;
            while (k < nd && strcmp(ds[k].name, ps[i].domain)) k++;
            if (k == nd) {
                if (nd == 32) die("%s", "more than 32 domains");
                memset(&ds[nd], 0, sizeof ds[nd]);
                snprintf(ds[nd].name, sizeof ds[nd].name, "%s", ps[i].domain);
                ds[nd].greedy = calloc((size_t)o.reps, sizeof(double));
                ds[nd].dflash = calloc((size_t)o.reps, sizeof(double));
                ds[nd].tree = calloc((size_t)o.reps, sizeof(double));
                nd++;
            }
        }
        /* modes: 0 greedy, 1 DFlash (the chain when --tree is given), 2 --tree N */
        int nm = o.tree ? 3 : 2;
        double *gtok = calloc((size_t)nd * 3, sizeof(double)), *gtime = calloc((size_t)nd * 3, sizeof(double));
        for (int rep = -1; rep < o.reps; rep++) { /* rep -1: warm-up on the first prompt */
            memset(gtok, 0, sizeof(double) * (size_t)nd * 3);
            memset(gtime, 0, sizeof(double) * (size_t)nd * 3);
            int per[32] = {0};
            for (int i = 0; i < np; i++) {
                int k = 0;
                while (strcmp(ds[k].name, ps[i].domain)) k++;
                if ((o.max_prompts && per[k] >= o.max_prompts) || (rep < 0 && i > 0)) continue;
                per[k]++;
                char *text = ps[i].prompt;
                char *chat = NULL;
                if (!o.raw) {
                    dflash_message msg = {"user", ps[i].prompt};
                    chat = dflash_chat_prompt(m, &msg, 1, 1, o.think);
                    if (!chat) die("%s", dflash_error());
                    text = chat;
                }
                int32_t *ids, *out[3];
                size_t n, nout[3];
                if (dflash_tokenize(m, text, strlen(text), &ids, &n) != 0) die("%s", dflash_error());
                dflash_stats st[3];
                for (int mode = 0; mode < nm; mode++) {
                    g.use_draft = mode > 0;
                    g.tree = mode == 2 ? o.tree : nm == 3 ? 0 : o.tree;
                    dflash_reset(m);
                    if (dflash_generate(m, ids, n, &g, NULL, NULL, &out[mode], &nout[mode], &st[mode]) != 0)
                        die("%s", dflash_error());
                    gtok[3 * k + mode] += st[mode].n_tokens;
                    gtime[3 * k + mode] += st[mode].decode_s;
                }
                int same = 1;
                for (int mode = 1; mode < nm; mode++)
                    same &= nout[0] == nout[mode] && !memcmp(out[0], out[mode], sizeof(int32_t) * nout[0]);
                if (rep == 0) {
                    ds[k].compared++;
                    ds[k].identical += same;
                    ds[k].n_prompts++;
                    if (st[1].rounds) { /* prompts that never drafted have no tau */
                        ds[k].tau_sum += st[1].tau;
                        ds[k].tau_n++;
                    }
                    mode_add(&ds[k].chain_m, &st[1]);
                    if (nm == 3) mode_add(&ds[k].tree_m, &st[2]);
                }
                all_same &= same;
                for (int mode = 0; mode < nm; mode++) free(out[mode]);
                free(ids);
                free(chat);
            }
            if (rep >= 0)
                for (int k = 0; k < nd; k++) {
                    ds[k].greedy[rep] = gtime[3 * k] > 0 ? gtok[3 * k] / gtime[3 * k] : 0;
                    ds[k].dflash[rep] = gtime[3 * k + 1] > 0 ? gtok[3 * k + 1] / gtime[3 * k + 1] : 0;
                    ds[k].tree[rep] = gtime[3 * k + 2] > 0 ? gtok[3 * k + 2] / gtime[3 * k + 2] : 0;
                }
        }
        free(gtok);
        free(gtime);
        for (int i = 0; i < np; i++) free(ps[i].domain), free(ps[i].prompt);
        free(ps);
        ps = NULL, np = 0;
        if (!o.json) printf("\ndomain      prompts  greedy tok/s  DFlash tok/s  tau    speed-up  identical\n");
        for (int k = 0; k < nd; k++) {
            double gm = median(ds[k].greedy, o.reps), dm = median(ds[k].dflash, o.reps);
            double tau = ds[k].tau_n ? ds[k].tau_sum / ds[k].tau_n : 0;
            g_all += gm / nd;
            d_all += dm / nd;
            tau_all += tau / nd;
            if (!o.json)
                printf("%-10s  %7d  %12.1f  %12.1f  %5.2f  %7.2fx  %d/%d\n", ds[k].name, ds[k].n_prompts, gm, dm, tau,
                       gm > 0 ? dm / gm : 0, ds[k].identical, ds[k].compared);
        }
        if (!o.json)
            printf("%-10s  %7s  %12.1f  %12.1f  %5.2f  %7.2fx  %s\n", "mean", "", g_all, d_all, tau_all,
                   g_all > 0 ? d_all / g_all : 0, all_same ? "all" : "NOT ALL");
        if (!o.json) { /* the rounds of each DFlash mode (item 6): rows verified, accepted drafts, time */
            char tname[32], hb[512];
            if (o.tree > 0) snprintf(tname, sizeof tname, "tree %d", o.tree);
            else snprintf(tname, sizeof tname, "tree auto");
            printf("\nrounds (first rep): mode, tau, verified rows a round, time draft/verify/other, rounds by drafts "
                   "accepted\n");
            for (int k = 0; k < nd; k++)
                for (int md = 0; md < nm - 1; md++) {
                    const mode_stats *ms = md ? &ds[k].tree_m : &ds[k].chain_m;
                    double tot = ms->draft_s + ms->verify_s + ms->other_s;
                    printf("%-10s  %-9s  tau %5.2f  rows %5.1f  %3.0f/%3.0f/%2.0f%%  %s\n", ds[k].name,
                           md ? tname : "chain", mode_tau(ms), ms->rounds ? (double)ms->verified / ms->rounds : 0,
                           tot > 0 ? 100 * ms->draft_s / tot : 0, tot > 0 ? 100 * ms->verify_s / tot : 0,
                           tot > 0 ? 100 * ms->other_s / tot : 0, mode_hist(ms, hb, sizeof hb));
                }
            if (nm == 3) {
                printf("\n%s vs the chain (same run): domain, chain tok/s, %s tok/s, speed ratio, tau ratio\n", tname,
                       tname);
                for (int k = 0; k < nd; k++) {
                    double cm = median(ds[k].dflash, o.reps), tm = median(ds[k].tree, o.reps);
                    double ct = mode_tau(&ds[k].chain_m), tt = mode_tau(&ds[k].tree_m);
                    printf("%-10s  %8.1f  %8.1f  %6.2fx  %6.2fx\n", ds[k].name, cm, tm, cm > 0 ? tm / cm : 0,
                           ct > 0 ? tt / ct : 0);
                }
            }
        }
    }
    if (o.json) {
        printf("{\"model\": \"%s\", \"weight_format\": \"%s\", \"threads\": %d, \"backend\": \"%s\", "
               "\"kernels\": \"%s\", \"bandwidth\": \"%s\", \"bandwidth_gb_s\": %.2f, \"decode_tok_s\": %.2f, \"decode_gb_s\": %.2f, \"depth\": %d, "
               "\"weight_bytes\": %zu, \"token_bytes\": %zu, \"cost_ms\": {",
               in.arch, in.weight_format, in.n_threads, in.backend, in.kernels, bw_what, bw, decode, gbs, depth,
               in.weight_bytes, in.token_bytes);
        for (int i = 0; i < NW; i++) printf("%s\"%d\": %.4f", i ? ", " : "", widths[i], 1e3 * cost[i]);
        printf("}, \"cost_ratio\": {");
        for (int i = 0; i < NW; i++) printf("%s\"%d\": %.4f", i ? ", " : "", widths[i], cost[i] / cost[0]);
        printf("}");
        if (draft_s > 0) {
            double round = draft_s + cost[B - 1];
            printf(", \"draft_block_ms\": %.4f, \"round_ms\": %.4f, \"projected_speedup\": {", 1e3 * draft_s,
                   1e3 * round);
            for (int i = 0; i < 4; i++) printf("%s\"%.1f\": %.4f", i ? ", " : "", taus[i], taus[i] * cost[0] / round);
            printf("}");
        }
        if (have_spec) {
            printf(", \"greedy_tok_s\": %.2f, \"dflash_tok_s\": %.2f, \"tau\": %.4f, \"speedup\": %.4f, "
                   "\"identical\": %s, \"domains\": {",
                   g_all, d_all, tau_all, g_all > 0 ? d_all / g_all : 0, all_same ? "true" : "false");
            for (int k = 0; k < nd; k++) {
                double gm = median(ds[k].greedy, o.reps), dm = median(ds[k].dflash, o.reps);
                printf("%s\"%s\": {\"tau\": %.4f, \"speedup\": %.4f, \"greedy_tok_s\": %.2f, \"dflash_tok_s\": %.2f, "
                       "\"identical\": %s",
                       k ? ", " : "", ds[k].name, ds[k].tau_n ? ds[k].tau_sum / ds[k].tau_n : 0, gm > 0 ? dm / gm : 0,
                       gm, dm, ds[k].identical == ds[k].compared ? "true" : "false");
                for (int md = 0; md < (o.tree ? 2 : 1); md++) {
                    const mode_stats *ms = md ? &ds[k].tree_m : &ds[k].chain_m;
                    printf(", \"%s\": {\"tau\": %.4f, \"tok_s\": %.2f, \"rounds\": %ld, \"verified_rows\": %ld, "
                           "\"draft_ms\": %.3f, \"verify_ms\": %.3f, \"other_ms\": %.3f, \"accept_hist\": [",
                           md ? "tree" : "chain", mode_tau(ms), median(md ? ds[k].tree : ds[k].dflash, o.reps),
                           ms->rounds, ms->verified, 1e3 * ms->draft_s, 1e3 * ms->verify_s, 1e3 * ms->other_s);
                    int top = 0;
                    for (int a = 0; a < 64; a++)
                        if (ms->hist[a]) top = a + 1;
                    for (int a = 0; a < top; a++) printf("%s%ld", a ? ", " : "", ms->hist[a]);
                    printf("]}");
                }
                printf("}");
            }
            printf("}");
        }
        printf("}\n");
    }
    if (o.plot) {
        double sp[32];
        for (int k = 0; k < nd; k++) {
            double gm = median(ds[k].greedy, o.reps), dm = median(ds[k].dflash, o.reps);
            sp[k] = gm > 0 ? dm / gm : 0;
        }
        write_plot(o.plot, widths, cost, NW, ds, sp, nd);
    }
    for (int k = 0; k < nd; k++) free(ds[k].greedy), free(ds[k].dflash), free(ds[k].tree);
    for (int i = 0; i < np; i++) free(ps[i].domain), free(ps[i].prompt); /* not used: no draft */
    free(ps);
    dflash_free(m);
    return have_spec && !all_same ? 1 : 0;
}

/* synth/quantize -o OUT: never overwrite silently. OUT may be new or an empty
 * directory; an existing model needs --force; OUT == IN (by device and
 * inode, so symlinks and relative paths count) is always refused. */
static void check_out_dir(const char *cmd, const char *out, const char *in, int force) {
    struct stat so, si;
    if (stat(out, &so) != 0) return; /* created by the library */
    if (in && stat(in, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) {
        fprintf(stderr, "%s %s: error: output directory %s is the input directory %s: choose another -o\n", prog,
                cmd, out, in);
        exit(1);
    }
    if (!S_ISDIR(so.st_mode)) {
        fprintf(stderr, "%s %s: error: %s exists and is not a directory\n", prog, cmd, out);
        exit(1);
    }
    DIR *d = opendir(out);
    int empty = 1;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) empty = 0;
    if (d) closedir(d);
    if (!empty && !force) {
        fprintf(stderr, "%s %s: error: %s already exists and is not empty; pass --force to overwrite the model files "
                        "in it\n", prog, cmd, out);
        exit(1);
    }
}

static int cmd_synth(int argc, char **argv) {
    const char *shape = NULL, *out = NULL, *tokdir = NULL;
    int draft = 0, bits = 0, force = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help_synth, stdout);
            return 0;
        } else if (!strcmp(a, "--draft")) draft = 1;
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "--shape") && v) shape = argv[++i];
        else if (!strcmp(a, "-o") && v) out = argv[++i];
        else if (!strcmp(a, "--tokenizer") && v) tokdir = argv[++i];
        else if (!strcmp(a, "--bits") && v) bits = (int)cli_parse_int("synth", a, argv[++i], 4, 8);
        else cli_usage_err("synth", "unknown or incomplete option", a);
    }
    if (!shape || !out) cli_usage_err("synth", "need --shape and -o", NULL);
    if (!tokdir && access("models/qwen3-tokenizer/tokenizer.json", R_OK) == 0) tokdir = "models/qwen3-tokenizer";
    check_out_dir("synth", out, draft ? NULL : tokdir, force);
    if (dflash_synth(shape, draft, bits, tokdir, out) != 0) die("%s", dflash_error());
    int oss = !draft && !strncmp(shape, "gpt-oss", 7) ? 1 : !draft && !strcmp(shape, "tiny-gptoss");
    fprintf(stderr, "wrote %s %s%s to %s\n", shape, draft ? "draft" : "target",
            bits == 4 ? (oss ? " (MXFP4 experts)" : " (MLX 4-bit)") : bits == 8 ? " (MLX 8-bit)" : "", out);
    return 0;
}

static int cmd_quantize(int argc, char **argv) {
    const char *in = NULL, *out = NULL;
    int bits = 0, group = 64, force = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help_quantize, stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) in = argv[++i];
        else if (!strcmp(a, "-o") && has) out = argv[++i];
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "--bits") && has) bits = (int)cli_parse_int("quantize", a, argv[++i], 4, 8);
        else if (!strcmp(a, "--group-size") && has) group = (int)cli_parse_int("quantize", a, argv[++i], 32, 128);
        else cli_usage_err("quantize", "unknown or incomplete option", a);
    }
    if (!in || !out || !bits) cli_usage_err("quantize", "need -m IN, --bits 4|8 and -o OUT", NULL);
    struct stat si;
    if (stat(in, &si) == 0 && !S_ISDIR(si.st_mode)) { /* before any word on OUT */
        fprintf(stderr, "%s quantize: error: -m %s: %s\n", prog, in,
                dflash_is_gguf(in) ? "is a GGUF file; quantize reads a Hugging Face / MLX model directory (a GGUF "
                                     "model is quantized at load with --quant q8|q4)"
                                   : "is a file; quantize reads a Hugging Face / MLX model directory (config.json, "
                                     "*.safetensors)");
        return 1;
    }
    check_out_dir("quantize", out, in, force);
    if (dflash_quantize(in, out, bits, group) != 0) die("%s", dflash_error());
    fprintf(stderr, "wrote %s (MLX %d-bit, group %d)\n", out, bits, group);
    return 0;
}

static int cmd_convert(int argc, char **argv) {
    const char *in = NULL, *out = NULL, *type = "f16", *target = NULL;
    int force = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has = i + 1 < argc;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(help_convert, stdout);
            return 0;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && has) in = argv[++i];
        else if (!strcmp(a, "-o") && has) out = argv[++i];
        else if (!strcmp(a, "--force")) force = 1;
        else if (!strcmp(a, "--type") && has) type = argv[++i];
        else if (!strcmp(a, "--target") && has) target = argv[++i];
        else if (a[0] != '-' && !in) in = a;
        else cli_usage_err("convert", "unknown or incomplete option", a);
    }
    if (!in || !out) cli_usage_err("convert", "need IN_DIR and -o OUT.gguf", NULL);
    if (strcmp(type, "f16") && strcmp(type, "bf16") && strcmp(type, "q8_0") && strcmp(type, "q4_0"))
        cli_usage_err("convert", "--type must be f16, bf16, q8_0 or q4_0, got", type);
    struct stat so, si;
    if (stat(out, &so) == 0) {
        if (stat(in, &si) == 0 && so.st_dev == si.st_dev && so.st_ino == si.st_ino) {
            fprintf(stderr, "%s convert: error: output %s is the input %s: choose another -o\n", prog, out, in);
            return 1;
        }
        if (S_ISDIR(so.st_mode)) {
            fprintf(stderr, "%s convert: error: %s is a directory; -o names the GGUF file to write\n", prog, out);
            return 1;
        }
        if (!force) {
            fprintf(stderr, "%s convert: error: %s already exists; pass --force to replace it\n", prog, out);
            return 1;
        }
    }
    if (dflash_convert(in, out, type, target) != 0) die("%s", dflash_error());
    fprintf(stderr, "wrote %s (GGUF, %s)\n", out, type);
    return 0;
}

/* --option=VALUE -> --option VALUE, for every command (a flag given a value
 * this way then meets its value as an unknown option, which says so). The
 * new argv lives until exit (freed by free_eq_opts). */
static char **eq_argv, **eq_owned; /* split_eq_opts' argv and the option names it made */
static int eq_n_owned;

static void free_eq_opts(void) {
    for (int i = 0; i < eq_n_owned; i++) free(eq_owned[i]);
    free(eq_owned);
    free(eq_argv);
}

static void split_eq_opts(int *argc, char ***argv) {
    int n = 0;
    for (int i = 2; i < *argc; i++) n += !strncmp((*argv)[i], "--", 2) && strchr((*argv)[i], '=');
    if (!n) return;
    char **v = malloc(sizeof *v * (size_t)(*argc + n + 1));
    eq_owned = malloc(sizeof *eq_owned * (size_t)n);
    if (!v || !eq_owned) exit(1);
    eq_argv = v;
    atexit(free_eq_opts);
    int k = 0;
    for (int i = 0; i < *argc; i++) {
        char *a = (*argv)[i], *eq = i >= 2 && !strncmp(a, "--", 2) ? strchr(a, '=') : NULL;
        if (!eq) {
            v[k++] = a;
            continue;
        }
        char *name = strndup(a, (size_t)(eq - a));
        if (!name) exit(1);
        eq_owned[eq_n_owned++] = name;
        v[k++] = name;
        v[k++] = eq + 1;
    }
    v[k] = NULL;
    *argc = k;
    *argv = v;
}

int main(int argc, char **argv) {
    atexit(check_stdout);
    split_eq_opts(&argc, &argv);
    if (argc >= 2 && (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version"))) {
        printf("dflash %s%s%s\n", dflash_version(), DFLASH_GIT_REV[0] ? " git " : "", DFLASH_GIT_REV);
        return 0;
    }
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        fputs(help_main, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "generate")) return cmd_generate(argc, argv);
    if (!strcmp(argv[1], "chat")) return cmd_chat(argc, argv);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc, argv);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc, argv);
    if (!strcmp(argv[1], "vocab-rank")) return cmd_vocab_rank(argc, argv);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc, argv);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc, argv);
    if (!strcmp(argv[1], "quantize")) return cmd_quantize(argc, argv);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc, argv);
    fprintf(stderr, "%s: unknown command '%s'\n%s", prog, argv[1], help_main);
    return 2;
}
