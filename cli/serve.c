/* serve.c - `dflash serve`: an OpenAI-compatible HTTP server on libmicrohttpd.
 * Talks to the library through dflash.h only (plus the stop-string matcher,
 * src/stopstr.h, and the reply splitter, src/reply.h: reasoning and tool
 * calls out of the text). Prefix: sv_.
 *
 *   GET  /                       the chat page (cli/serve_page.html, compiled in)
 *   GET  /health                 {"status":"ok"}
 *   GET  /v1/models              the one model; /v1/models/{id} it alone (404 for another id)
 *   GET  /metrics                Prometheus text
 *   GET  /props, /slots          llama-server style: model, template, defaults, draft; the slots
 *   POST /v1/chat/completions    OpenAI chat, "stream": true for SSE
 *   POST /v1/completions         OpenAI text completion
 *   POST /tokenize, /detokenize  llama-server style
 *   POST /apply-template         llama-server style: a chat request's prompt text
 *
 * Threads: libmicrohttpd runs one thread per connection; they parse, check
 * and tokenize requests (tokenizing only reads the model, dflash.h allows it
 * beside a generation) and queue a job. --parallel N worker threads (slots)
 * each generate on their own sequence (slot 0: the model's own, the others
 * dflash_seq_new's). Jobs leave the queue in arrival order (dispatch): each
 * to the free slot whose cache holds the longest prefix of its prompt
 * (ties: the lowest id); before generating, the slot copies in a longer
 * prefix that another slot (free or generating) holds, if any
 * (dflash_copy_prefix: the same reply as a fresh prefill). The library batches the
 * running slots' target forwards into one per step (continuous batching: a
 * job joins at the next step, a finished or cancelled one leaves its slot at
 * once), and each reply is the one the request gets alone. A worker writes a job's output into the job (under srv->mu) and
 * signals job->cv; the connection thread sends it: the whole reply at the
 * end, or SSE events as they come. A connection thread that finds its client
 * gone marks the job cancelled and the worker stops it at the next token.
 *
 * A job is shared by its connection and its worker (the slot that runs it):
 * refs counts the holders
 * (2 once queued) and the last release frees it. */
#include "serve.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cJSON.h>
#include <microhttpd.h>

#include "chat.h"
#include "dflash.h"
#include "reply.h"
#include "serve_page.h"
#include "stopstr.h"
#include "util.h"

enum {
    SV_MAX_BODY = 1 << 20,  /* request bodies larger than this get 413 */
    SV_MAX_STOPS = 16,      /* stop strings per request */
    SV_MAX_STOP_LEN = 256,  /* bytes per stop string */
    SV_MAX_CONNS = 256,     /* open connections (one thread each) */
    SV_MAX_SLOTS = 64,      /* --parallel at most (the library batches up to BE_MAX_SEQS) */
    SV_IDLE_S = 120,        /* an idle connection is closed after this */
    SV_POLL_MS = 50,        /* how often a waiting connection checks its client */
    SV_DRAIN_S = 20,        /* on SIGTERM: how long accepted requests may finish */
};

static const char *help_serve =
    "usage: dflash serve -m DIR [--draft DIR] [options]\n"
    "\n"
    "An OpenAI-compatible HTTP server with DFlash speculative decoding:\n"
    "  POST /v1/chat/completions, /v1/completions  (\"stream\": true for SSE)\n"
    "  POST /tokenize, /detokenize                  (llama-server style)\n"
    "  POST /apply-template                         a chat request's prompt text\n"
    "                                               (llama-server style)\n"
    "  GET  /v1/models, /v1/models/{id}, /health, /metrics (Prometheus), /props and\n"
    "  /slots (llama-server style), and a chat page at /. Requests may name any\n"
    "  model: the one loaded answers them.\n"
    "Requests run in arrival order on the one loaded model, one at a time (with\n"
    "--parallel N: N at once, batched). The KV cache is reused for the longest\n"
    "common prefix of the prompt (a multi-turn chat pays only for the new turn):\n"
    "a request goes to the free slot whose cache holds the longest prefix of it,\n"
    "and a longer prefix another slot holds (free, or generating: its prompt) is\n"
    "copied in first (CPU; not for Qwen3.5 / Qwen3-Next recurrent layers or\n"
    "sliding-window rings); usage's cached_tokens counts both, /metrics\n"
    "prompt_tokens_copied_total the copied ones. SIGTERM or SIGINT: stop\n"
    "accepting, let accepted requests finish (at most 20 s), exit 0.\n"
    "\n"
    "  -m, --model PATH       target model: a Hugging Face / MLX directory or a .gguf file\n"
    "  -md, --draft PATH      DFlash draft (directory or .gguf): speculative decoding\n"
    "      --host ADDR        address to listen on (default 127.0.0.1)\n"
    "      --port N           port (default 8080; 0 = a free port, printed at start)\n"
    "      --api-key KEY      require \"Authorization: Bearer KEY\" (or X-Api-Key)\n"
    "                         on everything but / and /health\n"
    "      --alias NAME       the model id in the API (default: the target\n"
    "                         directory's name); requests may name it or omit it\n"
    "  -c, --ctx-size N       context positions (default min(model max, 4096))\n"
    "      --parallel N       slots: requests generated at once, their target\n"
    "                         forwards batched into one per step (default 1;\n"
    "                         each slot's KV cache may fill the context, its\n"
    "                         size printed at start; on the CPU it is taken in\n"
    "                         pages of 16 positions as they are used); every\n"
    "                         reply is the one the request gets alone\n"
    "      --kv-budget MiB    the target KV cache all slots may hold together\n"
    "                         (CPU; default: no limit). A request runs once its\n"
    "                         prompt + max_tokens + 64 positions (no max_tokens:\n"
    "                         the whole context) fit beside the running ones',\n"
    "                         idle slots' cached prompts dropped, least recently\n"
    "                         used first; until then it waits on its slot. One\n"
    "                         that can never fit gets a 400 naming max_tokens\n"
    "      --step-tokens N    with --parallel: while other slots generate, a\n"
    "                         prompt is prefilled N rows a step, less the\n"
    "                         others' rows (at least 16), beside their decoding\n"
    "                         (default 64; alone: 256 rows a forward)\n"
    "      --queue N          requests waiting at most; more get 503 (default 64)\n"
    "  -n, --n-predict N      max_tokens of a request that gives none (default:\n"
    "                         until a stop token or the context is full, as\n"
    "                         OpenAI's API and llama-server do)\n"
    "      --temp T           temperature of a request that gives none (default 0)\n"
    "      --draft-max N|auto draft_max of a request that gives none (default auto)\n"
    "      --draft-vocab N|full|freq:N|FILE[:N]  the token ids the draft proposes,\n"
    "                         for every request, as for generate (default: ids\n"
    "                         < 32768 of a larger vocabulary; replies unchanged)\n"
    "      --think            thinking on for requests that do not say (default off)\n"
    "      --reasoning-effort low|medium|high  gpt-oss (harmony): \"Reasoning:\" of a\n"
    "                         request that gives none (default medium)\n"
    "      --chat-date YYYY-MM-DD  gpt-oss: the \"Current date:\" of every request\n"
    "                         (default today, local time)\n"
    "  -t, --threads N        worker threads (default: physical cores)\n"
    "      --quant bf16|q8|q4 convert the weights at load\n"
    "      --draft-quant keep|bf16|q8|q4  the draft's weights at load\n"
    "      --backend auto|cpu|cuda  where to compute (default auto: CUDA when\n"
    "                         built in and a GPU is present)\n"
    "      --tokenizer PATH   tokenizer (and chat template) from PATH: a directory\n"
    "                         with tokenizer.json or a GGUF file (default: the model's)\n"
    "  -h, --help             this help\n"
    "Options that take a value also take it as --option=VALUE.\n"
    "\n"
    "Request fields: messages, prompt, max_tokens / max_completion_tokens,\n"
    "temperature, top_p, seed, stop (string or array), stream,\n"
    "stream_options.include_usage, n (1 only), tools, tool_choice (\"auto\" or\n"
    "\"none\"), parallel_tool_calls, frequency_penalty and presence_penalty\n"
    "(-2..2), logit_bias ({\"token id\": -100..100}), logprobs (chat: true +\n"
    "top_logprobs 0..20; completions: N 0..20); extensions: top_k, min_p, repeat_penalty,\n"
    "repeat_last_n (default 64, -1 = all), n_probs, ignore_eos, draft_max (0 =\n"
    "plain decoding, N, or \"auto\"), think or chat_template_kwargs.enable_thinking,\n"
    "reasoning_effort or chat_template_kwargs.reasoning_effort and .model_identity\n"
    "(gpt-oss),\n"
    "n_predict, cache_prompt. Any other field is a 400 naming it (README lists\n"
    "those accepted at their off value).\n"
    "The penalties and logit_bias act on the target's logits with the history\n"
    "plain decoding has (DFlash output unchanged); logprobs are the target's\n"
    "log-softmax after them, before temperature / top-k / top-p / min-p.\n"
    "Tools use the model's own format, parsed into message.tool_calls\n"
    "(finish_reason \"tool_calls\"; streamed as generated, in OpenAI's tool-call\n"
    "deltas). Qwen3: a <tool_call> block that starts {\"name\": \"NAME\",\n"
    "\"arguments\": { is a call, its arguments that object's text as written;\n"
    "another block is a call only if it is whole valid tool-call JSON, else it\n"
    "stays in the content. gpt-oss (harmony): a message to=functions.NAME on\n"
    "the commentary channel, its body the arguments (<|call|> ends the reply).\n"
    "Gemma 4: <|tool_call>call:NAME{...}<tool_call|>, its arguments turned\n"
    "into JSON (<|tool_response> ends the reply); its tool messages go into\n"
    "the calling turn, as its template wants them. parallel_tool_calls false:\n"
    "the reply ends after the first call.\n"
    "With thinking on, a reply's <think>...</think> goes to reasoning_content;\n"
    "gpt-oss (harmony) and Gemma 4 replies are always split by channel (analysis,\n"
    "Gemma 4's <|channel>thought: reasoning_content; the rest: content).\n"
    "Replies carry usage and a llama-server style \"timings\" object (prompt_n,\n"
    "prompt_ms, predicted_n, predicted_ms, predicted_per_second, cache_n, draft_n,\n"
    "draft_n_accepted, tau). Request bodies are limited to 1 MiB.\n";

/* ---- small helpers --------------------------------------------------------- */

static void *xrealloc(void *p, size_t n) {
    p = realloc(p, n ? n : 1);
    if (!p) {
        fprintf(stderr, "dflash serve: out of memory\n");
        abort();
    }
    return p;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "dflash serve: out of memory\n");
        abort();
    }
    return p;
}

/* The text of b (dfl_buf, util.h); out of memory in it is fatal, as in
 * xrealloc. */
static const char *sb_text(const dfl_buf *b) {
    if (b->failed) {
        fprintf(stderr, "dflash serve: %s\n", dfl_lasterr());
        abort();
    }
    return b->s ? b->s : "";
}

/* A JSON string literal of s[0..n) (valid UTF-8; NUL bytes allowed). */
static void sb_json_str(dfl_buf *b, const char *s, size_t n) {
    dfl_buf_add(b, "\"", 1);
    size_t run = 0; /* bytes s[i - run .. i) need no escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            run++;
            continue;
        }
        dfl_buf_add(b, s + i - run, run);
        run = 0;
        char e[8];
        switch (c) {
        case '"': dfl_buf_add(b, "\\\"", 2); break;
        case '\\': dfl_buf_add(b, "\\\\", 2); break;
        case '\n': dfl_buf_add(b, "\\n", 2); break;
        case '\r': dfl_buf_add(b, "\\r", 2); break;
        case '\t': dfl_buf_add(b, "\\t", 2); break;
        default:
            snprintf(e, sizeof e, "\\u%04x", c);
            dfl_buf_add(b, e, 6);
        }
    }
    dfl_buf_add(b, s + n - run, run);
    dfl_buf_add(b, "\"", 1);
}

/* cJSON node holding the string s[0..n) exactly (cJSON strings stop at NUL). */
static cJSON *json_text(const char *s, size_t n) {
    dfl_buf b = {0};
    sb_json_str(&b, s, n);
    cJSON *r = cJSON_CreateRaw(sb_text(&b));
    dfl_buf_free(&b);
    return r;
}

static int utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return 0;
        unsigned cp = k == 1 ? c : c & (0x7F >> k);
        for (size_t j = 1; j < k; j++) {
            if ((u[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (u[i + j] & 0x3F);
        }
        if ((k == 2 && cp < 0x80) || (k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += k;
    }
    return 1;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Deadline ms from now on CLOCK_MONOTONIC (the clock of every cond var here). */
static struct timespec deadline_ms(int ms) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    t.tv_sec += ms / 1000;
    t.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) t.tv_sec++, t.tv_nsec -= 1000000000L;
    return t;
}

static void cond_init(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* The client closed its end (or the socket failed). Peeks; never consumes. */
static int peer_gone(int fd) {
    if (fd < 0) return 0;
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLHUP | POLLERR | POLLNVAL)) return 1;
    if (!(p.revents & POLLIN)) return 0;
    char c;
    ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* ---- errors in OpenAI's shape --------------------------------------------- */

typedef struct {
    int status;
    const char *type;  /* invalid_request_error, authentication_error, ... */
    const char *code;  /* NULL or a machine-readable code */
    char param[64];    /* "" = null */
    char msg[320];
} sv_err;

static int fail(sv_err *e, int status, const char *code, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401   ? "authentication_error"
              : status == 404 && (!code || strcmp(code, "model_not_found")) ? "not_found_error"
              : status == 503 ? "unavailable_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return -1;
}

static cJSON *err_json(const sv_err *e) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(in, "message", e->msg);
    cJSON_AddStringToObject(in, "type", e->type);
    if (e->param[0]) cJSON_AddStringToObject(in, "param", e->param);
    else cJSON_AddNullToObject(in, "param");
    if (e->code) cJSON_AddStringToObject(in, "code", e->code);
    else cJSON_AddNullToObject(in, "code");
    return o;
}

/* ---- server and job state -------------------------------------------------- */

enum { JOB_CHAT, JOB_COMPLETION };
enum { JOB_QUEUED, JOB_RUNNING, JOB_DONE };
/* sv_job.cancelled: why a job stops at the next token */
enum { JOB_LIVE = 0, JOB_CLIENT_GONE, JOB_SHUTDOWN };

typedef struct sv_server sv_server;

/* One emitted token's log-probabilities and where its text lies in the
 * generated text: bytes [start, end), start_cp code points before it. */
typedef struct {
    dflash_logprob lp;
    size_t start, end, start_cp;
} sv_logprob;

typedef struct sv_job {
    /* the request: set before queueing, read-only afterwards */
    sv_server *srv;
    int kind;
    int32_t *ids;
    size_t n_ids;
    dflash_gen gen;
    ss_matcher *stop;          /* the worker's alone */
    rp_splitter *split;        /* chat with thinking or tools: the worker's alone; NULL: text is content */
    int stream, include_usage;
    dflash_logit_bias *bias;   /* [gen.n_logit_bias], gen.logit_bias points here */
    char *grammar;             /* GBNF (response_format, grammar, json_schema); gen.grammar points here */
    int logprobs;              /* report log-probabilities (gen.top_logprobs alternatives) */
    size_t own;                /* set by dispatch: the prompt's prefix its slot's cache held */
    char id[48];
    long created;
    struct sv_job *next;       /* queue link */
    /* shared: under srv->mu */
    int refs;
    int state;
    int cancelled;             /* JOB_LIVE, or why to stop at the next token (written by atomic stores:
                                  gen.cancel points here) */
    dfl_buf out;               /* stream: SSE bytes, out[sent..n) not yet sent; else: the reply text */
    size_t sent;
    dfl_buf reasoning;         /* not streamed: the reasoning_content */
    cJSON *calls;              /* not streamed: the tool_calls array (NULL: none) */
    dfl_buf args;              /* not streamed: the open call's arguments so far */
    int rc;                    /* dflash_generate's result; err says why when -1 */
    char err[256];
    dflash_stats st;
    const char *finish;        /* "stop" or "length" */
    /* logprobs: the worker's, under srv->mu. A token's entry goes out with
     * the first text chunk that releases all of its text (stop strings hold
     * text back); tokens cut by a stop string are never reported. */
    sv_logprob *lps;
    size_t n_lps, cap_lps, sent_lps;
    size_t gen_bytes, gen_cp;  /* generated text so far: bytes, code points */
    size_t released;           /* bytes of it passed to the client (the stop matcher's output) */
    pthread_cond_t cv;         /* out grew or state changed */
} sv_job;

/* Counters for /metrics, under srv->mu. */
typedef struct {
    long codes[16], code_n[16]; /* HTTP status -> responses */
    int n_codes;
    long gens, cancelled, prompt_tokens, cached_tokens, gen_tokens;
    long copied_tokens;        /* cached ones that were copied from another slot */
    long drafts, draft_tokens, accepted, acc_pos[64];
    double prompt_s, decode_s;
} sv_metrics;

/* A slot: one worker thread and the sequence it generates on. */
typedef struct {
    sv_server *srv;
    int id;
    dflash_seq *seq;           /* NULL: slot 0, the model's own sequence */
    pthread_t th;
    pthread_cond_t cv;         /* dispatch gave it a job, or the workers should exit */
    /* under srv->mu */
    sv_job *running;           /* the job dispatch gave it (waiting to start, or generating); NULL: free */
    int exited;                /* its worker has ended (no more jobs) */
    double tau;                /* tau of the last finished generation that drafted (0: none yet) */
    double draft_len;          /* drafts per round of the last finished generation (0: plain decoding) */
    long gens;
} sv_slot;

struct sv_server {
    dflash_model *m;
    dflash_info info;
    const char *alias, *model_path, *api_key;
    int queue_max, n_predict, think, draft_max;
    const char *reasoning_effort, *chat_date; /* --reasoning-effort, --chat-date (harmony); NULL: the template's */
    cli_draft_vocab dv;        /* --draft-vocab: every request's draft vocabulary */
    float temp;
    long created;
    pthread_mutex_t mu;
    sv_job *head, *tail;       /* waiting jobs, oldest first (none while a slot is free: dispatch) */
    int n_queued;
    sv_slot *slots;            /* [n_slots] */
    int n_slots;
    int n_running;             /* slots with a job (running != NULL) */
    int copy_off;              /* dflash_copy_prefix refused once (the model or backend cannot): not tried again */
    int stopping;              /* refuse new requests */
    int worker_exit;           /* free workers end (the queue is empty then) */
    int n_streams;             /* streamed replies whose response is not freed yet (last event not out) */
    unsigned long next_id;
    sv_metrics mt;
};

static void job_release(sv_job *j) { /* srv->mu held */
    if (--j->refs > 0) return;
    free(j->ids);
    free(j->bias);
    free(j->grammar);
    free(j->lps);
    ss_free(j->stop);
    rp_free(j->split);
    dfl_buf_free(&j->out);
    dfl_buf_free(&j->reasoning);
    dfl_buf_free(&j->args);
    cJSON_Delete(j->calls);
    pthread_cond_destroy(&j->cv);
    free(j);
}

static void count_status(sv_server *s, int status) {
    pthread_mutex_lock(&s->mu);
    sv_metrics *m = &s->mt;
    int i = 0;
    while (i < m->n_codes && m->codes[i] != status) i++;
    if (i == m->n_codes && i < 16) m->codes[m->n_codes++] = status;
    if (i < 16) m->code_n[i]++;
    pthread_mutex_unlock(&s->mu);
}

/* ---- response JSON pieces --------------------------------------------------- */

static cJSON *usage_json(const dflash_stats *st) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", st->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", st->n_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", st->n_prompt + st->n_tokens);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", st->n_reused);
    return u;
}

/* llama-server's timings: prompt_n counts the prompt tokens computed (the
 * cached ones are cache_n); draft_n / draft_n_accepted count draft tokens. */
static cJSON *timings_json(const dflash_stats *st) {
    cJSON *t = cJSON_CreateObject();
    int pn = st->n_prompt - st->n_reused;
    double pms = 1e3 * st->prompt_s, dms = 1e3 * st->decode_s;
    cJSON_AddNumberToObject(t, "cache_n", st->n_reused);
    cJSON_AddNumberToObject(t, "prompt_n", pn);
    cJSON_AddNumberToObject(t, "prompt_ms", pms);
    cJSON_AddNumberToObject(t, "prompt_per_token_ms", pn ? pms / pn : 0);
    cJSON_AddNumberToObject(t, "prompt_per_second", pms > 0 ? 1e3 * pn / pms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", st->n_tokens);
    cJSON_AddNumberToObject(t, "predicted_ms", dms);
    /* the first token comes with the prompt: predicted_ms holds the steps of
     * the other n - 1 (a one-token reply has no rate) */
    int dn = st->n_tokens > 1 ? st->n_tokens - 1 : 0;
    cJSON_AddNumberToObject(t, "predicted_per_token_ms", dn ? dms / dn : 0);
    cJSON_AddNumberToObject(t, "predicted_per_second", dn && dms > 0 ? 1e3 * dn / dms : 0);
    cJSON_AddNumberToObject(t, "draft_n", st->n_drafted);
    cJSON_AddNumberToObject(t, "draft_n_accepted", st->n_accepted);
    cJSON_AddNumberToObject(t, "draft_rounds", st->rounds);
    cJSON_AddNumberToObject(t, "tau", st->tau);
    return t;
}

/* {"id", "object", "created", "model"} of a reply or chunk. */
static cJSON *reply_head(const sv_job *j, int chunk) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                             : "text_completion");
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", j->srv->alias);
    return o;
}

/* One choice: a chat message / delta or a completion text. text NULL: no
 * content (a finish or role-only chunk). */
static cJSON *choice_json(const sv_job *j, int chunk, const char *role, const char *text, size_t len,
                          const char *finish) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", 0);
    if (j->kind == JOB_CHAT) {
        cJSON *msg = cJSON_AddObjectToObject(c, chunk ? "delta" : "message");
        if (role) cJSON_AddStringToObject(msg, "role", role);
        if (!chunk && j->calls && !len) cJSON_AddNullToObject(msg, "content"); /* OpenAI: null beside tool calls */
        else if (text) cJSON_AddItemToObject(msg, "content", json_text(text, len));
        if (!chunk && j->reasoning.n) cJSON_AddItemToObject(msg, "reasoning_content", json_text(sb_text(&j->reasoning), j->reasoning.n));
        if (!chunk && j->calls) cJSON_AddItemReferenceToObject(msg, "tool_calls", j->calls);
    } else {
        cJSON_AddItemToObject(c, "text", text ? json_text(text, len) : cJSON_CreateString(""));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    return c;
}

/* A token as OpenAI shows it: its text, or "bytes:\\xNN..." when its bytes
 * are not whole UTF-8 characters (or hold a NUL); *bytes gets them as
 * numbers when not NULL. The text is malloc'd. */
static char *lp_token(const sv_job *j, int32_t id, cJSON **bytes) {
    char small[256], *buf = small;
    int n = dflash_token_piece(j->srv->m, id, small, sizeof small);
    if (n >= (int)sizeof small) {
        buf = xrealloc(NULL, (size_t)n + 1);
        dflash_token_piece(j->srv->m, id, buf, (size_t)n + 1);
    }
    if (n < 0) n = 0;
    dfl_buf t = {0};
    if (utf8_valid(buf, (size_t)n) && memchr(buf, 0, (size_t)n) == NULL) {
        dfl_buf_add(&t, buf, (size_t)n);
    } else {
        dfl_buf_str(&t, "bytes:");
        for (int i = 0; i < n; i++) dfl_buf_printf(&t, "\\x%02x", (unsigned char)buf[i]);
    }
    if (bytes) {
        *bytes = cJSON_CreateArray();
        for (int i = 0; i < n; i++) cJSON_AddItemToArray(*bytes, cJSON_CreateNumber((unsigned char)buf[i]));
    }
    if (buf != small) free(buf);
    sb_text(&t);
    return dfl_buf_take(&t);
}

/* {"token", "logprob", "bytes"} of a chat entry */
static cJSON *lp_entry(const sv_job *j, int32_t id, float logprob) {
    cJSON *e = cJSON_CreateObject(), *bytes;
    char *t = lp_token(j, id, &bytes);
    cJSON_AddStringToObject(e, "token", t);
    cJSON_AddNumberToObject(e, "logprob", isfinite(logprob) ? (double)logprob : -9999.0);
    cJSON_AddItemToObject(e, "bytes", bytes);
    free(t);
    return e;
}

/* -inf has no JSON number: OpenAI's -9999 */
static double lp_num(float x) { return isfinite(x) ? (double)x : -9999.0; }

/* The "logprobs" of a choice for entries lps[from..to): chat
 * {"content": [{token, logprob, bytes, top_logprobs}], "refusal": null},
 * completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
 * (text_offset in code points of the completion text). */
static cJSON *logprobs_json(const sv_job *j, size_t from, size_t to) {
    cJSON *o = cJSON_CreateObject();
    if (j->kind == JOB_CHAT) {
        cJSON *content = cJSON_AddArrayToObject(o, "content");
        for (size_t i = from; i < to; i++) {
            const dflash_logprob *lp = &j->lps[i].lp;
            cJSON *e = lp_entry(j, lp->id, lp->logprob);
            cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
            for (int k = 0; k < lp->n_top; k++) cJSON_AddItemToArray(top, lp_entry(j, lp->top[k].id, lp->top[k].logprob));
            cJSON_AddItemToArray(content, e);
        }
        cJSON_AddNullToObject(o, "refusal");
        return o;
    }
    cJSON *tokens = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = from; i < to; i++) {
        const dflash_logprob *lp = &j->lps[i].lp;
        char *t = lp_token(j, lp->id, NULL);
        cJSON_AddItemToArray(tokens, cJSON_CreateString(t));
        free(t);
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_num(lp->logprob)));
        cJSON *top = cJSON_CreateObject();
        for (int k = 0; k < lp->n_top; k++) { /* two ids of the same text: the likelier one */
            char *key = lp_token(j, lp->top[k].id, NULL);
            if (!cJSON_GetObjectItemCaseSensitive(top, key)) cJSON_AddNumberToObject(top, key, lp_num(lp->top[k].logprob));
            free(key);
        }
        cJSON_AddItemToArray(tops, top);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)j->lps[i].start_cp));
    }
    return o;
}

/* Put the logprobs of the entries whose text is all released and not yet
 * sent into choice c (srv->mu held); with nothing to report, they stay null. */
static void attach_logprobs(sv_job *j, cJSON *c) {
    if (!j->logprobs) return;
    size_t to = j->sent_lps;
    while (to < j->n_lps && j->lps[to].end <= j->released) to++;
    if (to == j->sent_lps && j->stream) return;
    cJSON_ReplaceItemInObjectCaseSensitive(c, "logprobs", logprobs_json(j, j->sent_lps, to));
    j->sent_lps = to;
}

static void sse_event(dfl_buf *b, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    dfl_buf_str(b, "data: ");
    dfl_buf_str(b, s);
    dfl_buf_str(b, "\n\n");
    free(s);
    cJSON_Delete(o);
}

/* A streamed chunk with one choice (choice may be NULL: "choices": []). */
static void sse_chunk(sv_job *j, cJSON *choice, cJSON *usage, cJSON *timings) {
    cJSON *o = reply_head(j, 1);
    cJSON *arr = cJSON_AddArrayToObject(o, "choices");
    if (choice) cJSON_AddItemToArray(arr, choice);
    if (usage) cJSON_AddItemToObject(o, "usage", usage);
    else if (j->include_usage) cJSON_AddNullToObject(o, "usage");
    if (timings) cJSON_AddItemToObject(o, "timings", timings);
    sse_event(&j->out, o);
}

/* ---- the worker ------------------------------------------------------------ */

/* A streamed chunk whose delta holds one string field (content, reasoning_content). */
static void sse_delta(sv_job *j, const char *field, const char *text, size_t len) {
    cJSON *c = choice_json(j, 1, NULL, NULL, 0, NULL);
    cJSON_AddItemToObject(cJSON_GetObjectItemCaseSensitive(c, "delta"), field, json_text(text, len));
    attach_logprobs(j, c); /* the tokens released to the splitter so far */
    sse_chunk(j, c, NULL, NULL);
}

/* The id of the reply's call number `index`. */
static void call_id(const sv_job *j, int index, char *buf, size_t size) {
    const char *dash = strchr(j->id, '-');
    snprintf(buf, size, "call_%s_%d", dash ? dash + 1 : j->id, index);
}

/* A streamed chunk whose delta is one tool call's (tool_calls: [call]). */
static void sse_call(sv_job *j, cJSON *call) {
    cJSON *c = choice_json(j, 1, NULL, NULL, 0, NULL);
    cJSON_AddItemToArray(cJSON_AddArrayToObject(cJSON_GetObjectItemCaseSensitive(c, "delta"), "tool_calls"), call);
    sse_chunk(j, c, NULL, NULL);
}

/* rp_emit_fn: a decided piece of a chat reply (srv->mu held). Streamed, a
 * tool call goes out as OpenAI's deltas do: one with its index, id, type
 * and name (arguments ""), then one per piece of the arguments' text as the
 * splitter releases it (index and function.arguments); not streamed, the
 * pieces are joined into the call's arguments, the same text. */
static void job_piece(void *ud, const rp_event *ev) {
    sv_job *j = ud;
    if (ev->kind == RP_CONTENT || ev->kind == RP_REASONING) {
        if (j->stream) sse_delta(j, ev->kind == RP_CONTENT ? "content" : "reasoning_content", ev->text, ev->len);
        else dfl_buf_add(ev->kind == RP_CONTENT ? &j->out : &j->reasoning, ev->text, ev->len);
        return;
    }
    if (ev->kind == RP_CALL_ARGS) {
        if (!j->stream) {
            dfl_buf_add(&j->args, ev->text, ev->len);
            return;
        }
        cJSON *call = cJSON_CreateObject();
        cJSON_AddNumberToObject(call, "index", ev->index);
        cJSON_AddItemToObject(cJSON_AddObjectToObject(call, "function"), "arguments", json_text(ev->text, ev->len));
        sse_call(j, call);
        return;
    }
    if (ev->kind == RP_CALL_END) {
        if (!j->stream) { /* the last call of j->calls is this one */
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(j->calls, ev->index), "function");
            cJSON_AddItemToObject(fn, "arguments", json_text(sb_text(&j->args), j->args.n));
            dfl_buf_reset(&j->args);
        }
        return;
    }
    /* RP_CALL_BEGIN */
    char id[80];
    call_id(j, ev->index, id, sizeof id);
    cJSON *call = cJSON_CreateObject();
    if (j->stream) cJSON_AddNumberToObject(call, "index", ev->index);
    cJSON_AddStringToObject(call, "id", id);
    cJSON_AddStringToObject(call, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(call, "function");
    cJSON_AddStringToObject(fn, "name", ev->name);
    if (!j->stream) {
        if (!j->calls) j->calls = cJSON_CreateArray();
        cJSON_AddItemToArray(j->calls, call);
        dfl_buf_reset(&j->args);
        return;
    }
    cJSON_AddStringToObject(fn, "arguments", "");
    sse_call(j, call);
}

/* ss_out_fn: text that is final goes to the client (srv->mu held). */
static void job_text(void *ud, const char *text, size_t len) {
    sv_job *j = ud;
    if (!len) return;
    j->released += len;
    if (j->split) {
        rp_feed(j->split, text, len, job_piece, j); /* its content / reasoning deltas carry the logprobs */
    } else if (j->stream) {
        cJSON *c = choice_json(j, 1, NULL, text, len, NULL);
        attach_logprobs(j, c);
        sse_chunk(j, c, NULL, NULL);
    } else {
        dfl_buf_add(&j->out, text, len);
    }
}

/* dflash_on_logprob: called before job_on_token for the same token. */
static int job_on_logprob(void *ud, const dflash_logprob *lp) {
    sv_job *j = ud;
    pthread_mutex_lock(&j->srv->mu);
    if (j->n_lps == j->cap_lps) {
        j->cap_lps = j->cap_lps ? 2 * j->cap_lps : 64;
        j->lps = xrealloc(j->lps, j->cap_lps * sizeof *j->lps);
    }
    j->lps[j->n_lps++] = (sv_logprob){.lp = *lp, .start = j->gen_bytes, .end = j->gen_bytes, .start_cp = j->gen_cp};
    pthread_mutex_unlock(&j->srv->mu);
    return 0;
}

static int job_on_token(void *ud, int32_t id, const char *text, size_t len) {
    sv_job *j = ud;
    (void)id;
    pthread_mutex_lock(&j->srv->mu);
    int stop = j->cancelled;
    j->gen_bytes += len; /* the text of the last token (id -1: the decoder's flushed tail, also its) */
    for (size_t i = 0; i < len; i++) j->gen_cp += ((unsigned char)text[i] & 0xC0) != 0x80;
    if (j->n_lps) j->lps[j->n_lps - 1].end = j->gen_bytes;
    if (!stop) {
        stop = ss_feed(j->stop, text, len, job_text, j);
        /* parallel_tool_calls false: the first call has ended, the rest would be dropped */
        if (j->split && rp_done(j->split)) stop = 1;
        pthread_cond_broadcast(&j->cv);
    }
    pthread_mutex_unlock(&j->srv->mu);
    return stop;
}

/* Copy into sl's cache the longest prefix of j's prompt that another slot
 * holds, where longer than its own (dflash_copy_prefix); the slot it came
 * from, -1: none. The first refusal (a model with recurrent layers or
 * rings, a backend without copies) turns copying off. */
static int copy_prefix(sv_slot *sl, sv_job *j) {
    sv_server *s = sl->srv;
    dflash_seq *src[SV_MAX_SLOTS];
    int slot[SV_MAX_SLOTS], n = 0, k = -1;
    for (int i = 0; i < s->n_slots; i++)
        if (i != sl->id) src[n] = s->slots[i].seq, slot[n++] = i;
    int p = dflash_copy_prefix(s->m, sl->seq, src, n, j->ids, j->n_ids, &k);
    if (p < 0) {
        pthread_mutex_lock(&s->mu);
        if (!s->copy_off) fprintf(stderr, "dflash serve: prompt prefixes are not copied between slots: %s\n",
                                  dflash_error());
        s->copy_off = 1;
        pthread_mutex_unlock(&s->mu);
    }
    return p > 0 ? slot[k] : -1;
}

static void run_job(sv_slot *sl, sv_job *j, int try_copy) {
    sv_server *s = sl->srv;
    dflash_stats st;
    double t0 = now_s();
    int from = try_copy ? copy_prefix(sl, j) : -1;
    double copy_s = now_s() - t0;
    int rc = sl->seq ? dflash_seq_generate(sl->seq, j->ids, j->n_ids, &j->gen, job_on_token, j, NULL, NULL, &st)
                     : dflash_generate(s->m, j->ids, j->n_ids, &j->gen, job_on_token, j, NULL, NULL, &st);
    st.prompt_s += copy_s; /* the time to the first token */
    /* of the cached tokens, those beyond the slot's own prefix came from the copy */
    int own = (int)(j->own < j->n_ids ? j->own : j->n_ids - 1); /* the last prompt row always runs */
    int copied = from >= 0 && st.n_reused > own ? st.n_reused - own : 0;
    pthread_mutex_lock(&s->mu);
    if (rc == 0) sl->gens++;
    if (rc == 0 && st.rounds > 0) sl->tau = st.tau;
    if (rc == 0 && st.rounds + st.plain_steps > 0)
        sl->draft_len = (double)st.n_drafted / (st.rounds + st.plain_steps);
    j->rc = rc;
    j->st = st;
    if (rc != 0) snprintf(j->err, sizeof j->err, "%s", dflash_error());
    int cancelled = j->cancelled;
    if (rc == 0 && !cancelled) ss_finish(j->stop, job_text, j);
    if (rc == 0 && !cancelled && j->split) rp_finish(j->split, job_piece, j);
    if (rc == 0 && cancelled == JOB_SHUTDOWN) { /* a cut reply is not a finished one: say so */
        rc = j->rc = -1;
        snprintf(j->err, sizeof j->err, "the server is shutting down: the reply was cut after %d tokens",
                 st.n_tokens);
    }
    j->finish = ss_matched(j->stop) || !strcmp(st.stop_reason, "stop token") ? "stop"
                : !strcmp(st.stop_reason, "callback")                       ? "stop"
                                                                            : "length";
    if (j->split && rp_n_calls(j->split) > 0 && !strcmp(j->finish, "stop")) j->finish = "tool_calls";
    if (j->stream) {
        if (rc != 0) { /* an error event and no [DONE]: the stream did not finish */
            sv_err e;
            if (cancelled == JOB_SHUTDOWN) fail(&e, 503, "server_shutdown", NULL, "%s", j->err);
            else fail(&e, 500, NULL, NULL, "generation failed: %s", j->err);
            sse_event(&j->out, err_json(&e));
        } else {
            cJSON *c = choice_json(j, 1, NULL, NULL, 0, j->finish);
            attach_logprobs(j, c); /* tokens whose text came out with no chunk of its own */
            sse_chunk(j, c, NULL, timings_json(&st));
            if (j->include_usage) sse_chunk(j, NULL, usage_json(&st), NULL);
            dfl_buf_str(&j->out, "data: [DONE]\n\n");
        }
    }
    sv_metrics *m = &s->mt;
    m->cancelled += rc != 0 && cancelled;
    if (rc == 0) {
        m->gens++;
        m->cancelled += cancelled != JOB_LIVE;
        m->prompt_tokens += st.n_prompt;
        m->cached_tokens += st.n_reused;
        m->copied_tokens += copied;
        m->gen_tokens += st.n_tokens;
        m->prompt_s += st.prompt_s;
        m->decode_s += st.decode_s;
        m->drafts += st.rounds;
        m->draft_tokens += st.n_drafted;
        m->accepted += st.n_accepted;
        for (int i = 0; i < st.n_pos && i < 64; i++) m->acc_pos[i] += st.accepted_at_pos[i];
    }
    pthread_mutex_unlock(&s->mu);
    char cp[48] = "";
    if (copied) snprintf(cp, sizeof cp, ", %d copied from slot %d", copied, from);
    if (rc == 0)
        fprintf(stderr, "%s: prompt %d tokens (%d cached%s) %.1f ms, %d tokens %.1f tok/s, tau %.2f, %s%s\n", j->id,
                st.n_prompt, st.n_reused, cp, 1e3 * st.prompt_s, st.n_tokens,
                st.n_tokens > 1 && st.decode_s > 0 ? (st.n_tokens - 1) / st.decode_s : 0.0, st.tau, j->finish,
                cancelled == JOB_CLIENT_GONE ? " (client gone)" : "");
    else if (cancelled == JOB_SHUTDOWN)
        fprintf(stderr, "%s: cut: %s (prompt %d tokens)\n", j->id, j->err, st.n_prompt);
    else
        fprintf(stderr, "%s: error: %s\n", j->id, j->err);
}

/* The free slot (not exited) whose cache holds the longest prefix of
 * ids[0..n) (ties: the lowest id), *p that prefix; NULL: none is free
 * (srv->mu held; a free slot's sequence is idle, so reading its cache
 * record is allowed: dflash.h). */
static sv_slot *best_slot(sv_server *s, const int32_t *ids, size_t n, size_t *p) {
    sv_slot *best = NULL;
    for (int i = 0; i < s->n_slots; i++) {
        sv_slot *sl = &s->slots[i];
        if (sl->running || sl->exited) continue;
        size_t q = sl->seq ? dflash_seq_cached_prefix(sl->seq, ids, n) : dflash_cached_prefix(s->m, ids, n);
        if (!best || q > *p) best = sl, *p = q;
    }
    return best;
}

/* Hand the queued jobs, oldest first, to free slots (srv->mu held): each to
 * best_slot's. Runs when a job is queued and when a slot frees up, so the
 * queue holds jobs only while every slot has one. */
static void dispatch(sv_server *s) {
    while (s->head) {
        sv_job *j = s->head;
        size_t p = 0;
        sv_slot *sl = best_slot(s, j->ids, j->n_ids, &p);
        if (!sl) return;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_queued--;
        j->own = p;
        sl->running = j;
        s->n_running++;
        pthread_cond_signal(&sl->cv);
    }
}

static void *worker_main(void *arg) {
    sv_slot *sl = arg;
    sv_server *s = sl->srv;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!sl->running && !s->worker_exit) pthread_cond_wait(&sl->cv, &s->mu);
        sv_job *j = sl->running;
        if (!j) break;
        if (!j->cancelled) {
            j->state = JOB_RUNNING;
            int try_copy = s->n_slots > 1 && !s->copy_off;
            pthread_mutex_unlock(&s->mu);
            run_job(sl, j, try_copy);
            pthread_mutex_lock(&s->mu);
        } else {
            j->rc = -1;
            snprintf(j->err, sizeof j->err, "%s", j->cancelled == JOB_SHUTDOWN ? "the server is shutting down: the "
                     "request was not started" : "cancelled before it started");
            s->mt.cancelled++;
        }
        sl->running = NULL;
        s->n_running--;
        j->state = JOB_DONE;
        pthread_cond_broadcast(&j->cv);
        job_release(j);
        dispatch(s); /* this slot is free again */
    }
    sl->exited = 1;
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- request parsing --------------------------------------------------------- */

/* Field helpers: 0 = absent or null, 1 = set, -1 = wrong type (e filled). */
static int get_num(cJSON *o, const char *k, double lo, double hi, double *v, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || !(x->valuedouble >= lo && x->valuedouble <= hi))
        return fail(e, 400, "invalid_value", k, "'%s' must be a number in %g..%g", k, lo, hi);
    *v = x->valuedouble;
    return 1;
}

static int get_int(cJSON *o, const char *k, double lo, double hi, long long *v, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || !(x->valuedouble >= lo && x->valuedouble <= hi))
        return fail(e, 400, "invalid_value", k, "'%s' must be an integer in %.0f..%.0f", k, lo, hi);
    *v = (long long)x->valuedouble;
    return 1;
}

static int get_bool(cJSON *o, const char *k, int *v, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsBool(x)) return fail(e, 400, "invalid_type", k, "'%s' must be true or false", k);
    *v = cJSON_IsTrue(x);
    return 1;
}

/* Whether a JSON text holds the escape \u0000 inside a string (a raw NUL
 * byte is invalid JSON and cJSON refuses it). */
static int json_has_nul(const char *p, size_t n) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        if (!in_str) {
            in_str = p[i] == '"';
        } else if (p[i] == '"') {
            in_str = 0;
        } else if (p[i] == '\\' && i + 1 < n) {
            if (p[i + 1] == 'u' && i + 5 < n && !memcmp(p + i + 2, "0000", 4)) return 1;
            i++; /* the escaped character */
        }
    }
    return 0;
}

/* End of the JSON value at p[i] (p[0..n) parsed as JSON already), or n. */
static size_t json_skip(const char *p, size_t n, size_t i) {
    int depth = 0;
    for (; i < n; i++) {
        char c = p[i];
        if (c == '"') {
            for (i++; i < n && p[i] != '"'; i++)
                if (p[i] == '\\') i++;
            if (!depth) return i + 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth <= 0) return depth < 0 ? i : i + 1;
        } else if (!depth && (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
            return i;
        }
    }
    return n;
}

/* The text of the first top-level member `key` of the JSON object p[0..n)
 * (the one cJSON finds) as the client wrote it: malloc'd, or NULL when it
 * is not there or its key is written with escapes. The chat templates take
 * tools as Python reads them, where 1.0 is no 1: cJSON's numbers lose that. */
static char *json_member_text(const char *p, size_t n, const char *key) {
    size_t i = 0, k = strlen(key);
    while (i < n && p[i] != '{') i++;
    for (i++; i < n;) {
        while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == ',')) i++;
        if (i >= n || p[i] != '"') return NULL;
        size_t ks = i + 1, ke = json_skip(p, n, i);
        i = ke;
        while (i < n && p[i] != ':') i++;
        size_t v = i + 1;
        while (v < n && (p[v] == ' ' || p[v] == '\t' || p[v] == '\n' || p[v] == '\r')) v++;
        size_t ve = json_skip(p, n, v);
        if (ke - 1 - ks == k && !memcmp(p + ks, key, k)) {
            char *t = xcalloc(1, ve - v + 1);
            memcpy(t, p + v, ve - v);
            return t;
        }
        if (memchr(p + ks, '\\', ke - 1 - ks) && ke - 1 - ks >= k) return NULL; /* an escaped key might be it */
        i = ve;
    }
    return NULL;
}

/* Parameters OpenAI defines that this server does not implement: accepted
 * only at their "off" values. */
static int check_unsupported(cJSON *o, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "functions");
    if (x && !cJSON_IsNull(x))
        return fail(e, 400, "unsupported_parameter", "functions", "'functions' is not supported");
    x = cJSON_GetObjectItemCaseSensitive(o, "echo");
    if (x && !cJSON_IsNull(x) && !cJSON_IsFalse(x))
        return fail(e, 400, "unsupported_parameter", "echo", "'echo' is not supported");
    x = cJSON_GetObjectItemCaseSensitive(o, "suffix");
    if (x && !cJSON_IsNull(x)) return fail(e, 400, "unsupported_parameter", "suffix", "'suffix' is not supported");
    long long v;
    if (get_int(o, "best_of", 1, 1, &v, e) < 0)
        return fail(e, 400, "unsupported_parameter", "best_of", "'best_of' must be 1");
    x = cJSON_GetObjectItemCaseSensitive(o, "n");
    if (x && !cJSON_IsNull(x) && !(cJSON_IsNumber(x) && x->valuedouble == 1))
        return fail(e, 400, "unsupported_parameter", "n", "only n = 1 is supported (one choice per request)");
    return 0;
}

/* The stop strings: a string, an array of strings, or null. */
static int parse_stop(cJSON *o, ss_matcher **out, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "stop");
    const char *list[SV_MAX_STOPS];
    int n = 0;
    if (x && cJSON_IsString(x)) {
        list[n++] = x->valuestring;
    } else if (x && cJSON_IsArray(x)) {
        cJSON *it;
        cJSON_ArrayForEach(it, x) {
            if (!cJSON_IsString(it)) return fail(e, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
            if (n == SV_MAX_STOPS) return fail(e, 400, "invalid_value", "stop", "at most %d stop strings", SV_MAX_STOPS);
            list[n++] = it->valuestring;
        }
    } else if (x && !cJSON_IsNull(x)) {
        return fail(e, 400, "invalid_type", "stop", "'stop' must be a string or an array of strings");
    }
    for (int i = 0; i < n; i++) {
        size_t l = strlen(list[i]);
        if (l > SV_MAX_STOP_LEN)
            return fail(e, 400, "invalid_value", "stop", "a stop string is longer than %d bytes", SV_MAX_STOP_LEN);
        if (!utf8_valid(list[i], l)) return fail(e, 400, "invalid_value", "stop", "a stop string is not valid UTF-8");
    }
    *out = ss_new(list, n);
    if (!*out) return fail(e, 500, NULL, NULL, "out of memory");
    return 0;
}

/* One rule for every field of a generation request: a field is read (the
 * lists below; the logit controls and logprobs in parse_controls), accepted
 * only at its "off" value (check_unsupported), or
 * refused with 400 naming it - never ignored silently. Accepted and
 * ignored: OpenAI's bookkeeping fields (user, metadata, store,
 * service_tier) and llama-server's cache_prompt (the cache is always
 * reused). */
static int check_fields(cJSON *o, int kind, sv_err *e) {
    static const char *const known[] = {
        "model", "max_tokens", "max_completion_tokens", "n_predict", "temperature", "top_p", "top_k", "seed",
        "draft_max", "ignore_eos", "stream", "stream_options", "stop", "frequency_penalty", "presence_penalty",
        "logprobs", "functions", "logit_bias", "response_format", "n", "user", "metadata",
        "store", "service_tier", "cache_prompt", "min_p", "repeat_penalty", "repeat_last_n", "n_probs", "grammar",
        "json_schema"};
    static const char *const chat_only[] = {"messages", "tools", "tool_choice", "parallel_tool_calls",
                                            "chat_template_kwargs", "think", "top_logprobs", "reasoning_effort"};
    static const char *const completion_only[] = {"prompt", "echo", "suffix", "best_of"};
    cJSON *x;
    cJSON_ArrayForEach(x, o) {
        int found = 0;
        for (size_t i = 0; i < sizeof known / sizeof *known && !found; i++) found = !strcmp(x->string, known[i]);
        if (kind == JOB_CHAT)
            for (size_t i = 0; i < sizeof chat_only / sizeof *chat_only && !found; i++) found = !strcmp(x->string, chat_only[i]);
        else
            for (size_t i = 0; i < sizeof completion_only / sizeof *completion_only && !found; i++)
                found = !strcmp(x->string, completion_only[i]);
        if (!found)
            return fail(e, 400, "unsupported_parameter", x->string,
                        "'%.60s' is not supported by this server (README lists the request fields)", x->string);
    }
    x = cJSON_GetObjectItemCaseSensitive(o, "cache_prompt");
    if (x && !cJSON_IsNull(x) && !cJSON_IsBool(x))
        return fail(e, 400, "invalid_type", "cache_prompt", "'cache_prompt' must be true or false");
    return 0;
}

/* logit_bias: {"token id": bias, ...} -> j->bias. */
static int parse_logit_bias(sv_server *s, cJSON *o, sv_job *j, sv_err *e) {
    cJSON *x = cJSON_GetObjectItemCaseSensitive(o, "logit_bias");
    if (!x || cJSON_IsNull(x)) return 0;
    if (!cJSON_IsObject(x))
        return fail(e, 400, "invalid_type", "logit_bias", "'logit_bias' must be an object of token id -> bias");
    int n = cJSON_GetArraySize(x), i = 0;
    j->bias = xcalloc((size_t)n, sizeof *j->bias);
    cJSON *it;
    cJSON_ArrayForEach(it, x) {
        char *end;
        errno = 0;
        long id = strtol(it->string, &end, 10);
        if (errno || end == it->string || *end || id < 0 || id >= s->info.vocab)
            return fail(e, 400, "invalid_value", "logit_bias",
                        "'logit_bias' key '%.40s' is not a token id in 0..%d", it->string, s->info.vocab - 1);
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
            return fail(e, 400, "invalid_value", "logit_bias",
                        "'logit_bias' of token %ld must be a number in -100..100", id);
        j->bias[i++] = (dflash_logit_bias){.id = (int32_t)id, .bias = (float)it->valuedouble};
    }
    j->gen.logit_bias = j->bias;
    j->gen.n_logit_bias = n;
    return 0;
}

/* A JSON Schema (an object or a boolean) into j->grammar; param names it in errors. */
static int schema_grammar(cJSON *schema, sv_job *j, const char *param, sv_err *e) {
    if (!cJSON_IsObject(schema) && !cJSON_IsBool(schema))
        return fail(e, 400, "invalid_type", param, "'%s' must be a JSON Schema object", param);
    char *text = cJSON_PrintUnformatted(schema);
    if (!text) return fail(e, 500, NULL, NULL, "out of memory");
    j->grammar = dflash_json_schema_grammar(text);
    free(text);
    if (!j->grammar) return fail(e, 400, "invalid_value", param, "'%s': %s", param, dflash_error());
    return 0;
}

/* Constrained output: OpenAI's response_format (text, json_object,
 * json_schema) or llama-server's grammar (GBNF) / json_schema, one of them,
 * into j->grammar and j->gen.grammar. Every malformed or unsupported part
 * is a 400 naming its field. */
static int parse_grammar(cJSON *o, sv_job *j, sv_err *e) {
    cJSON *rf = cJSON_GetObjectItemCaseSensitive(o, "response_format"), *gb = cJSON_GetObjectItemCaseSensitive(o, "grammar"),
          *js = cJSON_GetObjectItemCaseSensitive(o, "json_schema");
    int n = 0;
    if (rf && !cJSON_IsNull(rf)) {
        cJSON *t = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(t))
            return fail(e, 400, "invalid_type", "response_format", "'response_format' must be an object with a string 'type'");
        if (!strcmp(t->valuestring, "json_object")) {
            j->grammar = dflash_json_schema_grammar(NULL);
            n++;
        } else if (!strcmp(t->valuestring, "json_schema")) {
            cJSON *w = cJSON_GetObjectItemCaseSensitive(rf, "json_schema");
            if (!cJSON_IsObject(w))
                return fail(e, 400, "invalid_type", "response_format.json_schema",
                            "'response_format.json_schema' must be an object with 'name' and 'schema'");
            cJSON *k;
            cJSON_ArrayForEach(k, w) {
                if (strcmp(k->string, "name") && strcmp(k->string, "schema") && strcmp(k->string, "strict") &&
                    strcmp(k->string, "description"))
                    return fail(e, 400, "unsupported_parameter", "response_format.json_schema",
                                "'response_format.json_schema.%.60s' is not supported", k->string);
            }
            cJSON *nm = cJSON_GetObjectItemCaseSensitive(w, "name"), *st = cJSON_GetObjectItemCaseSensitive(w, "strict"),
                  *sc = cJSON_GetObjectItemCaseSensitive(w, "schema");
            if (nm && !cJSON_IsString(nm))
                return fail(e, 400, "invalid_type", "response_format.json_schema.name", "'response_format.json_schema.name' must be a string");
            if (st && !cJSON_IsNull(st) && !cJSON_IsBool(st))
                return fail(e, 400, "invalid_type", "response_format.json_schema.strict",
                            "'response_format.json_schema.strict' must be true or false");
            if (!sc) /* OpenAI: no schema = any JSON object */
                j->grammar = dflash_json_schema_grammar(NULL);
            else if (schema_grammar(sc, j, "response_format.json_schema.schema", e) < 0)
                return -1;
            n++;
        } else if (strcmp(t->valuestring, "text")) {
            return fail(e, 400, "invalid_value", "response_format",
                        "'response_format' type '%.40s' is not one of text, json_object, json_schema", t->valuestring);
        }
    }
    if (gb && !cJSON_IsNull(gb)) {
        if (!cJSON_IsString(gb)) return fail(e, 400, "invalid_type", "grammar", "'grammar' must be a GBNF string");
        if (n) return fail(e, 400, "invalid_value", "grammar", "give one of 'response_format' (json), 'grammar' and 'json_schema'");
        if (dflash_grammar_check(gb->valuestring) != 0)
            return fail(e, 400, "invalid_value", "grammar", "'grammar': %s", dflash_error());
        j->grammar = strdup(gb->valuestring);
        if (!j->grammar) return fail(e, 500, NULL, NULL, "out of memory");
        n++;
    }
    if (js && !cJSON_IsNull(js)) {
        if (n) return fail(e, 400, "invalid_value", "json_schema", "give one of 'response_format' (json), 'grammar' and 'json_schema'");
        if (schema_grammar(js, j, "json_schema", e) < 0) return -1;
    }
    j->gen.grammar = j->grammar;
    return 0;
}

/* The logit controls and log-probabilities into j->gen (the library applies
 * them to the target's logits with plain decoding's history: DFlash output
 * is unchanged). */
static int parse_controls(sv_server *s, cJSON *o, sv_job *j, sv_err *e) {
    dflash_gen *g = &j->gen;
    double d;
    long long v;
    int r;
    if ((r = get_num(o, "min_p", 0, 1, &d, e)) < 0) return -1;
    if (r) g->min_p = (float)d;
    if ((r = get_num(o, "repeat_penalty", 0, 100, &d, e)) < 0) return -1;
    if (r && d <= 0) return fail(e, 400, "invalid_value", "repeat_penalty", "'repeat_penalty' must be in (0, 100] (1 = off)");
    if (r) g->repeat_penalty = (float)d;
    if ((r = get_int(o, "repeat_last_n", -1, INT_MAX, &v, e)) < 0) return -1;
    if (r) g->repeat_last_n = (int)v;
    if ((r = get_num(o, "frequency_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) g->frequency_penalty = (float)d;
    if ((r = get_num(o, "presence_penalty", -2, 2, &d, e)) < 0) return -1;
    if (r) g->presence_penalty = (float)d;
    if (parse_logit_bias(s, o, j, e) < 0) return -1;
    /* chat: logprobs true/false + top_logprobs N; completions: logprobs N;
     * both: llama-server's n_probs N (> 0: logprobs with N alternatives) */
    int top = 0, on = 0;
    cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
    if (j->kind == JOB_CHAT) {
        if (get_bool(o, "logprobs", &on, e) < 0) return -1;
        if ((r = get_int(o, "top_logprobs", 0, DFLASH_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
        if (r && !on)
            return fail(e, 400, "invalid_value", "top_logprobs", "'top_logprobs' needs \"logprobs\": true");
        if (r) top = (int)v;
    } else if (lp && !cJSON_IsNull(lp) && !cJSON_IsFalse(lp)) {
        if (!cJSON_IsNumber(lp) || lp->valuedouble != floor(lp->valuedouble) || lp->valuedouble < 0 ||
            lp->valuedouble > DFLASH_MAX_TOP_LOGPROBS)
            return fail(e, 400, "invalid_value", "logprobs", "'logprobs' must be an integer in 0..%d (alternatives per token)",
                        DFLASH_MAX_TOP_LOGPROBS);
        on = 1;
        top = (int)lp->valuedouble;
    }
    if ((r = get_int(o, "n_probs", 0, DFLASH_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
    if (r && v > 0) {
        if (on && top != v)
            return fail(e, 400, "invalid_value", "n_probs", "'n_probs' %lld differs from the top_logprobs / logprobs given (%d)",
                        v, top);
        on = 1;
        top = (int)v;
    }
    j->logprobs = on;
    if (on) {
        g->on_logprob = job_on_logprob;
        g->top_logprobs = top;
    }
    return 0;
}

/* Fields shared by both endpoints into j->gen, j->stop, j->stream... */
static int parse_common(sv_server *s, cJSON *o, sv_job *j, sv_err *e) {
    if (check_fields(o, j->kind, e) < 0 || check_unsupported(o, e) < 0) return -1;
    /* any model name is served by the one model, as llama-server does (so a
     * client written for another name works); replies name the alias */
    cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (model && !cJSON_IsNull(model) && !cJSON_IsString(model))
        return fail(e, 400, "invalid_type", "model", "'model' must be a string");
    dflash_gen *g = &j->gen;
    *g = dflash_default_gen();
    g->cancel = &j->cancelled; /* a request waiting for its KV reservation leaves the line when cancelled */
    g->n_predict = s->n_predict > 0 ? s->n_predict : s->info.n_ctx;
    g->temp = s->temp;
    g->draft_max = s->draft_max;
    g->draft_vocab = s->dv.n;
    g->draft_vocab_rank = s->dv.rank[0] ? s->dv.rank : NULL;
    long long v;
    double d;
    int r;
    if ((r = get_int(o, "max_tokens", 1, INT_MAX, &v, e)) < 0) return -1;
    if (r) g->n_predict = (int)v;
    if ((r = get_int(o, "max_completion_tokens", 1, INT_MAX, &v, e)) < 0) return -1;
    if (r) g->n_predict = (int)v;
    if ((r = get_int(o, "n_predict", -1, INT_MAX, &v, e)) < 0) return -1; /* llama-server's name; -1: no limit */
    if (r && v == 0) return fail(e, 400, "invalid_value", "n_predict", "'n_predict' must be -1 (no limit) or at least 1");
    if (r) g->n_predict = v > 0 ? (int)v : s->info.n_ctx;
    if ((r = get_num(o, "temperature", 0, 2, &d, e)) < 0) return -1;
    if (r) g->temp = (float)d;
    if ((r = get_num(o, "top_p", 0, 1, &d, e)) < 0) return -1;
    if (r && d <= 0) return fail(e, 400, "invalid_value", "top_p", "'top_p' must be in (0, 1]");
    if (r) g->top_p = (float)d;
    if ((r = get_int(o, "top_k", 0, INT_MAX, &v, e)) < 0) return -1;
    if (r) g->top_k = (int)v;
    if ((r = get_int(o, "seed", -9007199254740991.0, 9007199254740991.0, &v, e)) < 0) return -1;
    if (r) {
        g->seed = (uint64_t)v;
    } else { /* no seed: a different one per request, as OpenAI does */
        pthread_mutex_lock(&s->mu);
        g->seed = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(s->next_id * 0xBF58476D1CE4E5B9ull);
        pthread_mutex_unlock(&s->mu);
    }
    cJSON *dm = cJSON_GetObjectItemCaseSensitive(o, "draft_max");
    if (cJSON_IsString(dm) && !strcmp(dm->valuestring, "auto")) g->draft_max = -1;
    else if ((r = get_int(o, "draft_max", -1, 63, &v, e)) < 0) return fail(e, 400, "invalid_value", "draft_max", "'draft_max' must be \"auto\" or an integer in -1..63");
    else if (r) g->draft_max = (int)v;
    if (g->draft_max == 0) g->use_draft = 0; /* plain decoding */
    if (get_bool(o, "ignore_eos", &g->ignore_eos, e) < 0) return -1;
    if (parse_controls(s, o, j, e) < 0) return -1;
    if (parse_grammar(o, j, e) < 0) return -1;
    if (get_bool(o, "stream", &j->stream, e) < 0) return -1;
    cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) return fail(e, 400, "invalid_type", "stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &j->include_usage, e) < 0) return -1;
    }
    if (!j->stream) j->include_usage = 0;
    return parse_stop(o, &j->stop, e);
}

/* A function name as OpenAI allows it: 1-64 of a-z, A-Z, 0-9, _ and -. */
static int tool_name_ok(const char *n) {
    size_t k = strlen(n);
    if (k < 1 || k > 64) return 0;
    for (size_t i = 0; i < k; i++)
        if (!((n[i] >= 'a' && n[i] <= 'z') || (n[i] >= 'A' && n[i] <= 'Z') || (n[i] >= '0' && n[i] <= '9') ||
              n[i] == '_' || n[i] == '-'))
            return 0;
    return 1;
}

/* tools, tool_choice and parallel_tool_calls: *tools_json the checked array
 * (malloc'd JSON text: the request's own text of it when body has it, so its
 * numbers stay as written) or NULL when there are none or tool_choice is
 * "none"; *one_call 1 for parallel_tool_calls false. */
static int parse_tools(cJSON *o, const char *body, size_t body_n, char **tools_json, int *one_call, sv_err *e) {
    *tools_json = NULL;
    *one_call = 0;
    cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools");
    cJSON *choice = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    cJSON *par = cJSON_GetObjectItemCaseSensitive(o, "parallel_tool_calls");
    if (tools && !cJSON_IsNull(tools) && !cJSON_IsArray(tools))
        return fail(e, 400, "invalid_type", "tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    int i = 0;
    cJSON *t;
    if (tools) cJSON_ArrayForEach(t, tools) {
        char param[64];
        snprintf(param, sizeof param, "tools[%d]", i);
        cJSON *type = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "type") : NULL;
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "function"))
            return fail(e, 400, "invalid_value", param, "%s must be an object with \"type\": \"function\"", param);
        cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        if (!cJSON_IsObject(fn))
            return fail(e, 400, "invalid_type", param, "%s.function must be an object", param);
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        snprintf(param, sizeof param, "tools[%d].function.name", i);
        if (!cJSON_IsString(name) || !tool_name_ok(name->valuestring))
            return fail(e, 400, "invalid_value", param, "%s must be a string of 1-64 letters, digits, _ or -", param);
        cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        snprintf(param, sizeof param, "tools[%d].function.description", i);
        if (desc && !cJSON_IsString(desc)) return fail(e, 400, "invalid_type", param, "%s must be a string", param);
        cJSON *pars = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        snprintf(param, sizeof param, "tools[%d].function.parameters", i);
        if (pars && !cJSON_IsObject(pars))
            return fail(e, 400, "invalid_type", param, "%s must be a JSON Schema object", param);
        cJSON *strict = cJSON_GetObjectItemCaseSensitive(fn, "strict");
        snprintf(param, sizeof param, "tools[%d].function.strict", i);
        if (strict && !cJSON_IsBool(strict) && !cJSON_IsNull(strict))
            return fail(e, 400, "invalid_type", param, "%s must be true or false", param);
        for (cJSON *u = tools->child; u != t; u = u->next)
            if (!strcmp(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(u, "function"), "name")->valuestring,
                        name->valuestring)) {
                snprintf(param, sizeof param, "tools[%d].function.name", i);
                return fail(e, 400, "invalid_value", param, "%s: a second function named '%.64s'", param, name->valuestring);
            }
        i++;
    }
    int none = 0;
    if (choice && !cJSON_IsNull(choice)) {
        if (!cJSON_IsString(choice) && !cJSON_IsObject(choice))
            return fail(e, 400, "invalid_type", "tool_choice", "'tool_choice' must be \"auto\" or \"none\"");
        if (!cJSON_IsString(choice) || (strcmp(choice->valuestring, "auto") && strcmp(choice->valuestring, "none")))
            return fail(e, 400, "unsupported_parameter", "tool_choice",
                        "'tool_choice' may be \"auto\" or \"none\" (\"required\" and a named function are not supported)");
        none = !strcmp(choice->valuestring, "none");
    }
    if (par && !cJSON_IsNull(par)) {
        if (!cJSON_IsBool(par)) return fail(e, 400, "invalid_type", "parallel_tool_calls", "'parallel_tool_calls' must be true or false");
        /* OpenAI: at most one call per reply. The prompt is the same (Qwen3's
         * template has no switch for it): the reply ends at the first call's
         * "</tool_call>" (finish_reason "tool_calls"), src/reply.h rp_max_calls */
        *one_call = cJSON_IsFalse(par);
    }
    if (i > 0 && !none) {
        *tools_json = body ? json_member_text(body, body_n, "tools") : NULL;
        if (!*tools_json) *tools_json = cJSON_PrintUnformatted(tools);
    }
    return 0;
}

/* messages[i].tool_calls into calls (n of them); 0 or -1 (e filled). */
static int parse_tool_calls(cJSON *m, const char *param, dflash_tool_call **calls, int *n, sv_err *e) {
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
    *calls = NULL;
    *n = 0;
    if (!tc || cJSON_IsNull(tc)) return 0;
    if (!cJSON_IsArray(tc)) return fail(e, 400, "invalid_type", param, "%s.tool_calls must be an array", param);
    *calls = xcalloc((size_t)cJSON_GetArraySize(tc), sizeof **calls);
    cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        char p[96];
        snprintf(p, sizeof p, "%s.tool_calls[%d]", param, *n);
        cJSON *type = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "type") : NULL;
        cJSON *fn = cJSON_IsObject(c) ? cJSON_GetObjectItemCaseSensitive(c, "function") : NULL;
        if ((type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))) || !cJSON_IsObject(fn))
            return fail(e, 400, "invalid_value", p, "%s must be {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}", p);
        cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name"), *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        char f[128];
        snprintf(f, sizeof f, "%s.function.name", p);
        if (!cJSON_IsString(name) || !name->valuestring[0])
            return fail(e, 400, "invalid_value", f, "%s must be a non-empty string", f);
        snprintf(f, sizeof f, "%s.function.arguments", p);
        if (!cJSON_IsString(args))
            return fail(e, 400, "invalid_type", f, "%s must be a string (JSON text)", f);
        cJSON *parsed = cJSON_Parse(args->valuestring);
        int obj = cJSON_IsObject(parsed);
        cJSON_Delete(parsed);
        if (!obj) return fail(e, 400, "invalid_value", f, "%s is not a JSON object", f);
        (*calls)[(*n)++] = (dflash_tool_call){.name = name->valuestring, .arguments = args->valuestring};
    }
    return 0;
}

/* messages (and tools) -> the chat prompt text (malloc'd); j->split set up
 * when the reply needs splitting (thinking on, or tools). */
static char *chat_prompt(sv_server *s, cJSON *o, const char *body, size_t body_n, sv_job *j, sv_err *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!msgs || cJSON_IsNull(msgs)) {
        fail(e, 400, "missing_required_parameter", "messages", "'messages' is required");
        return NULL;
    }
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0) {
        fail(e, 400, "invalid_type", "messages", "'messages' must be a non-empty array");
        return NULL;
    }
    char *tools_json = NULL;
    int one_call;
    if (parse_tools(o, body, body_n, &tools_json, &one_call, e) < 0) return NULL;
    int n = cJSON_GetArraySize(msgs), i = 0;
    dflash_chat_message *dm = xcalloc((size_t)n, sizeof *dm);
    char **owned = xcalloc((size_t)n, sizeof *owned); /* joined content parts */
    dflash_tool_call **calls = xcalloc((size_t)n, sizeof *calls);
    char *prompt = NULL;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        char param[48];
        snprintf(param, sizeof param, "messages[%d]", i);
        cJSON *role = cJSON_IsObject(m) ? cJSON_GetObjectItemCaseSensitive(m, "role") : NULL;
        if (!cJSON_IsString(role)) {
            fail(e, 400, "invalid_type", param, "%s must be an object with a string 'role'", param);
            goto out;
        }
        const char *r = role->valuestring;
        if (!strcmp(r, "developer")) r = "system";
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") && strcmp(r, "tool")) {
            fail(e, 400, "invalid_value", param, "%s has an unknown role '%.40s'", param, role->valuestring);
            goto out;
        }
        cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        const char *text = "";
        if (cJSON_IsString(c)) {
            text = c->valuestring;
        } else if (cJSON_IsArray(c)) { /* content parts: text only */
            dfl_buf b = {0};
            cJSON *part;
            cJSON_ArrayForEach(part, c) {
                cJSON *type = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
                cJSON *t = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "text") : NULL;
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(t)) {
                    dfl_buf_free(&b);
                    fail(e, 400, "unsupported_content", param,
                         "%s: only text content parts ({\"type\": \"text\", \"text\": ...}) are supported", param);
                    goto out;
                }
                dfl_buf_str(&b, t->valuestring);
            }
            sb_text(&b);
            text = owned[i] = dfl_buf_take(&b);
        } else if (c && !cJSON_IsNull(c)) {
            fail(e, 400, "invalid_type", param, "%s.content must be a string or an array of text parts", param);
            goto out;
        } else if (strcmp(r, "assistant")) {
            fail(e, 400, "missing_required_parameter", param, "%s.content is required", param);
            goto out;
        }
        dm[i].role = r;
        dm[i].content = text;
        cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (rc && !cJSON_IsNull(rc) && (!cJSON_IsString(rc) || strcmp(r, "assistant"))) {
            fail(e, 400, "invalid_type", param, "%s.reasoning_content must be a string, on an assistant message", param);
            goto out;
        }
        if (cJSON_IsString(rc)) dm[i].reasoning_content = rc->valuestring;
        cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (tc && !cJSON_IsNull(tc) && strcmp(r, "assistant")) {
            fail(e, 400, "invalid_value", param, "%s: only assistant messages have tool_calls", param);
            goto out;
        }
        if (parse_tool_calls(m, param, &calls[i], &dm[i].n_tool_calls, e) < 0) goto out;
        dm[i].tool_calls = calls[i];
        i++;
    }
    int think = s->think;
    cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) {
            fail(e, 400, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
            goto out;
        }
        cJSON *k;
        cJSON_ArrayForEach(k, kw) if (strcmp(k->string, "enable_thinking") && strcmp(k->string, "reasoning_effort") &&
                                      strcmp(k->string, "model_identity")) {
            char param[96];
            snprintf(param, sizeof param, "chat_template_kwargs.%.60s", k->string);
            fail(e, 400, "unsupported_parameter", param,
                 "'%s' is not supported (the kwargs read: enable_thinking; gpt-oss's reasoning_effort and "
                 "model_identity)", param);
            goto out;
        }
        if (get_bool(kw, "enable_thinking", &think, e) < 0) goto out;
    }
    if (get_bool(o, "think", &think, e) < 0) goto out;
    /* harmony's options: the server's defaults, then the request's (OpenAI's
     * top-level reasoning_effort or the template kwarg; both: the same) */
    dflash_chat_opts co = {.reasoning_effort = s->reasoning_effort, .date = s->chat_date};
    static const struct {
        const char *param;
        int top;
    } hopt[] = {{"reasoning_effort", 1}, {"reasoning_effort", 0}, {"model_identity", 0}};
    const char *top_effort = NULL;
    for (size_t h = 0; h < sizeof hopt / sizeof *hopt; h++) {
        cJSON *src = hopt[h].top ? o : cJSON_IsObject(kw) ? kw : NULL;
        cJSON *x = src ? cJSON_GetObjectItemCaseSensitive(src, hopt[h].param) : NULL;
        if (!x || cJSON_IsNull(x)) continue;
        char param[64];
        snprintf(param, sizeof param, "%s%s", hopt[h].top ? "" : "chat_template_kwargs.", hopt[h].param);
        if (!cJSON_IsString(x)) {
            fail(e, 400, "invalid_type", param, "'%s' must be a string", param);
            goto out;
        }
        if (chat_detect(dflash_chat_template(s->m)) != CHAT_HARMONY) {
            fail(e, 400, "unsupported_parameter", param, "'%s' is an option of gpt-oss's harmony template; this "
                 "model's template has none", param);
            goto out;
        }
        chat_harmony_opts one = {.reasoning_effort = h < 2 ? x->valuestring : NULL,
                                 .model_identity = h == 2 ? x->valuestring : NULL};
        const char *bad = chat_harmony_check(&one);
        if (bad) {
            fail(e, 400, "invalid_value", param, "'%s': %s", param, bad);
            goto out;
        }
        if (h == 0) top_effort = x->valuestring;
        if (h == 1 && top_effort && strcmp(top_effort, x->valuestring)) {
            fail(e, 400, "invalid_value", param, "'reasoning_effort' and '%s' differ (give one)", param);
            goto out;
        }
        if (h < 2) co.reasoning_effort = x->valuestring;
        else co.model_identity = x->valuestring;
    }
    prompt = dflash_chat_prompt_opts(s->m, dm, n, tools_json, 1, think, &co);
    if (!prompt) /* the renderers' errors about the tools start "chat_render: tools" */
        fail(e, 400, "invalid_value", tools_json && !strncmp(dflash_error(), "chat_render: tools", 18) ? "tools" : "messages",
             "%s", dflash_error());
    else { /* the format's own splitter: harmony's channels, Gemma 4's thinking channel, Qwen3's tags */
        j->split = rp_new_for(chat_detect(dflash_chat_template(s->m)), think == 1, tools_json != NULL);
        if (j->split && one_call) rp_max_calls(j->split, 1);
    }
out:
    for (int k = 0; k < n; k++) free(owned[k]), free(calls[k]);
    free(owned);
    free(calls);
    free(dm);
    free(tools_json);
    return prompt;
}

/* Tokenize into j->ids and check the context. A plain (completions) prompt
 * gets the tokenizer's special tokens (Gemma: <bos>), a rendered chat prompt
 * holds its own. */
static int job_tokens(sv_server *s, sv_job *j, const char *text, int plain, const char *param, sv_err *e) {
    if (!utf8_valid(text, strlen(text))) return fail(e, 400, "invalid_value", param, "'%s' is not valid UTF-8", param);
    if ((plain ? dflash_tokenize_prompt : dflash_tokenize)(s->m, text, strlen(text), &j->ids, &j->n_ids) != 0)
        return fail(e, 400, "invalid_value", param, "%s", dflash_error());
    return 0;
}

static int check_ctx(sv_server *s, sv_job *j, const char *param, sv_err *e) {
    if (j->n_ids == 0) return fail(e, 400, "invalid_value", param, "the prompt is empty");
    if (j->n_ids >= (size_t)s->info.n_ctx)
        return fail(e, 400, "context_length_exceeded", param,
                    "the prompt has %zu tokens; this server's context holds %d (start it with a larger --ctx-size)",
                    j->n_ids, s->info.n_ctx);
    /* --kv-budget: a request starts only with its positions reserved
     * (dflash_kv_stats: it waits for running ones to end); one that could
     * never fit is told now */
    dflash_kv_info kv;
    dflash_kv_stats(s->m, &kv);
    size_t need = kv.budget ? dflash_kv_reserve(s->m, j->n_ids, j->gen.n_predict) : 0;
    if (need > kv.budget)
        return fail(e, 400, "invalid_value", "max_tokens",
                    "this request reserves %.2f MiB of KV cache (its %zu prompt tokens, the %d tokens it may "
                    "generate - max_tokens, else the whole context - and a verify block of 64), more than this "
                    "server's --kv-budget of %.2f MiB for all slots: ask for fewer tokens (max_tokens) or start "
                    "the server with a larger --kv-budget",
                    need / 1048576.0, j->n_ids, j->gen.n_predict, kv.budget / 1048576.0);
    return 0;
}

/* /v1/completions: prompt is a string, an array of one string, or token ids. */
static int completion_prompt(sv_server *s, cJSON *o, sv_job *j, sv_err *e) {
    cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (!p || cJSON_IsNull(p)) return fail(e, 400, "missing_required_parameter", "prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && cJSON_IsString(p->child)) p = p->child;
    if (cJSON_IsString(p)) return job_tokens(s, j, p->valuestring, 1, "prompt", e);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return fail(e, 400, "invalid_type", "prompt", "'prompt' must be a string, one string in an array, or token ids");
    int n = cJSON_GetArraySize(p), i = 0;
    j->ids = xcalloc((size_t)n, sizeof *j->ids);
    cJSON *x;
    cJSON_ArrayForEach(x, p) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= s->info.vocab)
            return fail(e, 400, "invalid_value", "prompt", "token ids in 'prompt' must be integers in 0..%d (one prompt per request)",
                        s->info.vocab - 1);
        j->ids[i++] = (int32_t)x->valuedouble;
    }
    j->n_ids = (size_t)n;
    return 0;
}

/* ---- HTTP ------------------------------------------------------------------- */

typedef struct {
    dfl_buf body;
    int too_big;
} sv_req;

static enum MHD_Result queue(struct MHD_Connection *c, sv_server *s, int status, const char *type, const char *body,
                             size_t len) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
    enum MHD_Result ok = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(s, status);
    return ok;
}

static enum MHD_Result send_json(struct MHD_Connection *c, sv_server *s, int status, cJSON *o) {
    char *txt = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!txt) return MHD_NO;
    enum MHD_Result ok = queue(c, s, status, "application/json", txt, strlen(txt));
    free(txt);
    return ok;
}

static enum MHD_Result send_err(struct MHD_Connection *c, sv_server *s, const sv_err *e) {
    return send_json(c, s, e->status, err_json(e));
}

/* Streaming: the connection thread's side of one SSE response. */
typedef struct {
    sv_server *srv;
    sv_job *job;
    int fd;
} sv_stream;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    sv_stream *t = cls;
    sv_job *j = t->job;
    (void)pos;
    pthread_mutex_lock(&t->srv->mu);
    while (j->sent == j->out.n && j->state != JOB_DONE) {
        if (peer_gone(t->fd)) {
            __atomic_store_n(&j->cancelled, JOB_CLIENT_GONE, __ATOMIC_RELEASE);
            pthread_mutex_unlock(&t->srv->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        struct timespec dl = deadline_ms(SV_POLL_MS);
        pthread_cond_timedwait(&j->cv, &t->srv->mu, &dl);
    }
    size_t n = j->out.n - j->sent;
    if (n > max) n = max;
    if (n) memcpy(buf, sb_text(&j->out) + j->sent, n);
    j->sent += n;
    if (j->sent == j->out.n) { /* all sent: reuse the buffer */
        j->sent = 0;
        dfl_buf_reset(&j->out);
    }
    pthread_mutex_unlock(&t->srv->mu);
    return n ? (ssize_t)n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void stream_free(void *cls) {
    sv_stream *t = cls;
    pthread_mutex_lock(&t->srv->mu);
    if (t->job->state != JOB_DONE) /* the connection went away */
        __atomic_store_n(&t->job->cancelled, JOB_CLIENT_GONE, __ATOMIC_RELEASE);
    t->srv->n_streams--;
    job_release(t->job);
    pthread_mutex_unlock(&t->srv->mu);
    free(t);
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? (int)ci->connect_fd : -1;
}

/* Queue the job (refs: the connection's and the worker's), or 503. */
static int submit(sv_server *s, sv_job *j, sv_err *e) {
    pthread_mutex_lock(&s->mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->mu);
        return fail(e, 503, "shutting_down", NULL, "the server is shutting down");
    }
    if (s->n_queued >= s->queue_max) {
        pthread_mutex_unlock(&s->mu);
        return fail(e, 503, "queue_full", NULL, "server busy: %d requests are waiting (--queue); retry later",
                    s->n_queued);
    }
    j->refs = 2;
    j->state = JOB_QUEUED;
    if (s->tail) s->tail->next = j;
    else s->head = j;
    s->tail = j;
    s->n_queued++;
    dispatch(s);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static enum MHD_Result handle_generate(struct MHD_Connection *c, sv_server *s, cJSON *o, const char *body,
                                       size_t body_n, int kind) {
    sv_err e;
    sv_job *j = xcalloc(1, sizeof *j);
    j->srv = s;
    j->kind = kind;
    j->refs = 1;
    cond_init(&j->cv);
    char *prompt = NULL;
    int bad = parse_common(s, o, j, &e) < 0;
    if (!bad && kind == JOB_CHAT) {
        prompt = chat_prompt(s, o, body, body_n, j, &e);
        bad = !prompt || job_tokens(s, j, prompt, 0, "messages", &e) < 0;
    } else if (!bad) {
        bad = completion_prompt(s, o, j, &e) < 0;
    }
    free(prompt);
    if (!bad) bad = check_ctx(s, j, kind == JOB_CHAT ? "messages" : "prompt", &e) < 0;
    if (!bad) {
        pthread_mutex_lock(&s->mu);
        snprintf(j->id, sizeof j->id, "%s-%lx%04lx", kind == JOB_CHAT ? "chatcmpl" : "cmpl", (unsigned long)s->created,
                 ++s->next_id);
        pthread_mutex_unlock(&s->mu);
        j->created = (long)time(NULL);
        if (j->stream && kind == JOB_CHAT) /* the role chunk goes out at once */
            sse_chunk(j, choice_json(j, 1, "assistant", "", 0, NULL), NULL, NULL);
        bad = submit(s, j, &e) < 0;
    }
    if (bad) {
        pthread_mutex_lock(&s->mu);
        job_release(j);
        pthread_mutex_unlock(&s->mu);
        return send_err(c, s, &e);
    }
    int fd = conn_fd(c);
    if (j->stream) {
        sv_stream *t = xcalloc(1, sizeof *t);
        *t = (sv_stream){s, j, fd};
        pthread_mutex_lock(&s->mu);
        s->n_streams++;
        pthread_mutex_unlock(&s->mu);
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, t, stream_free);
        if (!r) {
            stream_free(t);
            return MHD_NO;
        }
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
        enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        count_status(s, 200);
        return ok;
    }
    /* whole reply: wait for the job, watching the client */
    pthread_mutex_lock(&s->mu);
    while (j->state != JOB_DONE) {
        if (peer_gone(fd)) {
            __atomic_store_n(&j->cancelled, JOB_CLIENT_GONE, __ATOMIC_RELEASE);
            job_release(j);
            pthread_mutex_unlock(&s->mu);
            return MHD_NO; /* close the connection */
        }
        struct timespec dl = deadline_ms(SV_POLL_MS);
        pthread_cond_timedwait(&j->cv, &s->mu, &dl);
    }
    pthread_mutex_unlock(&s->mu);
    /* DONE: the worker no longer writes the job */
    enum MHD_Result ok;
    if (j->rc != 0) {
        if (j->cancelled == JOB_SHUTDOWN) fail(&e, 503, "server_shutdown", NULL, "%s", j->err);
        else fail(&e, j->cancelled ? 503 : 500, NULL, NULL, "generation failed: %s", j->err);
        ok = send_err(c, s, &e);
    } else {
        cJSON *r = reply_head(j, 0);
        cJSON *arr = cJSON_AddArrayToObject(r, "choices");
        cJSON *choice = choice_json(j, 0, "assistant", sb_text(&j->out), j->out.n, j->finish);
        attach_logprobs(j, choice);
        cJSON_AddItemToArray(arr, choice);
        cJSON_AddItemToObject(r, "usage", usage_json(&j->st));
        cJSON_AddItemToObject(r, "timings", timings_json(&j->st));
        ok = send_json(c, s, 200, r);
    }
    pthread_mutex_lock(&s->mu);
    job_release(j);
    pthread_mutex_unlock(&s->mu);
    return ok;
}

static enum MHD_Result handle_tokenize(struct MHD_Connection *c, sv_server *s, cJSON *o) {
    sv_err e;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "content");
    if (!t || cJSON_IsNull(t)) {
        fail(&e, 400, "missing_required_parameter", "content", "'content' is required");
        return send_err(c, s, &e);
    }
    if (!cJSON_IsString(t)) {
        fail(&e, 400, "invalid_type", "content", "'content' must be a string");
        return send_err(c, s, &e);
    }
    int pieces = 0;
    if (get_bool(o, "with_pieces", &pieces, &e) < 0) return send_err(c, s, &e);
    int32_t *ids = NULL;
    size_t n = 0;
    if (!utf8_valid(t->valuestring, strlen(t->valuestring)) ||
        dflash_tokenize(s->m, t->valuestring, strlen(t->valuestring), &ids, &n) != 0) {
        fail(&e, 400, "invalid_value", "content", "'content' is not valid UTF-8");
        return send_err(c, s, &e);
    }
    cJSON *r = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(r, "tokens");
    for (size_t i = 0; i < n; i++) {
        if (!pieces) {
            cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
            continue;
        }
        size_t len = 0;
        char *p = dflash_detokenize(s->m, ids + i, 1, &len);
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "id", ids[i]);
        cJSON_AddItemToObject(x, "piece", json_text(p ? p : "", p ? len : 0));
        cJSON_AddItemToArray(arr, x);
        free(p);
    }
    free(ids);
    return send_json(c, s, 200, r);
}

/* POST /apply-template (llama-server's): a chat request's prompt text as
 * the model's template renders it (messages, tools, the think switch,
 * harmony's options: what /v1/chat/completions would generate from),
 * {"prompt": TEXT}; nothing is generated. */
static enum MHD_Result handle_apply_template(struct MHD_Connection *c, sv_server *s, cJSON *o, const char *body,
                                             size_t body_n) {
    sv_err e;
    sv_job j = {.kind = JOB_CHAT};
    if (check_fields(o, JOB_CHAT, &e) < 0) return send_err(c, s, &e);
    char *p = chat_prompt(s, o, body, body_n, &j, &e);
    rp_free(j.split);
    if (!p) return send_err(c, s, &e);
    cJSON *r = cJSON_CreateObject();
    cJSON_AddStringToObject(r, "prompt", p);
    free(p);
    return send_json(c, s, 200, r);
}

static enum MHD_Result handle_detokenize(struct MHD_Connection *c, sv_server *s, cJSON *o) {
    sv_err e;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "tokens");
    if (!t || cJSON_IsNull(t)) {
        fail(&e, 400, "missing_required_parameter", "tokens", "'tokens' is required");
        return send_err(c, s, &e);
    }
    if (!cJSON_IsArray(t)) {
        fail(&e, 400, "invalid_type", "tokens", "'tokens' must be an array of token ids");
        return send_err(c, s, &e);
    }
    int n = cJSON_GetArraySize(t), i = 0;
    int32_t *ids = xcalloc((size_t)n, sizeof *ids);
    cJSON *x;
    cJSON_ArrayForEach(x, t) {
        if (!cJSON_IsNumber(x) || x->valuedouble != floor(x->valuedouble) || x->valuedouble < 0 ||
            x->valuedouble >= s->info.vocab) {
            free(ids);
            fail(&e, 400, "invalid_value", "tokens", "'tokens' must hold integers in 0..%d", s->info.vocab - 1);
            return send_err(c, s, &e);
        }
        ids[i++] = (int32_t)x->valuedouble;
    }
    size_t len = 0;
    char *txt = dflash_detokenize(s->m, ids, (size_t)n, &len);
    free(ids);
    if (!txt) {
        fail(&e, 400, "invalid_value", "tokens", "%s", dflash_error());
        return send_err(c, s, &e);
    }
    cJSON *r = cJSON_CreateObject();
    cJSON_AddItemToObject(r, "content", json_text(txt, len));
    free(txt);
    return send_json(c, s, 200, r);
}

/* GET /v1/models (id NULL: the list of the one model) or /v1/models/{id}
 * (the alias or the model path; else 404 model_not_found). */
static enum MHD_Result handle_models(struct MHD_Connection *c, sv_server *s, const char *id) {
    cJSON *r, *m = cJSON_CreateObject();
    if (id) {
        if (strcmp(id, s->alias) && strcmp(id, s->model_path)) {
            cJSON_Delete(m);
            sv_err e;
            fail(&e, 404, "model_not_found", NULL, "The model '%.100s' does not exist (this server has '%.100s')", id,
                 s->alias);
            return send_err(c, s, &e);
        }
        r = m;
    } else {
        r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "object", "list");
        cJSON_AddItemToArray(cJSON_AddArrayToObject(r, "data"), m);
    }
    cJSON_AddStringToObject(m, "id", s->alias);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)s->created);
    cJSON_AddStringToObject(m, "owned_by", "dflash");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", s->info.arch ? s->info.arch : "");
    cJSON_AddNumberToObject(meta, "n_ctx", s->info.n_ctx);
    cJSON_AddNumberToObject(meta, "n_vocab", s->info.vocab);
    cJSON_AddNumberToObject(meta, "n_layers", s->info.n_layers);
    cJSON_AddStringToObject(meta, "weight_format", s->info.weight_format ? s->info.weight_format : "");
    cJSON_AddBoolToObject(meta, "draft", s->info.has_draft);
    cJSON_AddNumberToObject(meta, "block_size", s->info.block_size);
    return send_json(c, s, 200, r);
}

static enum MHD_Result handle_metrics(struct MHD_Connection *c, sv_server *s) {
    dfl_buf b = {0};
    pthread_mutex_lock(&s->mu);
    sv_metrics m = s->mt;
    int queued = s->n_queued, running = s->n_running;
    double tau[SV_MAX_SLOTS], draft_len[SV_MAX_SLOTS];
    int busy[SV_MAX_SLOTS];
    for (int i = 0; i < s->n_slots; i++) {
        tau[i] = s->slots[i].tau;
        draft_len[i] = s->slots[i].draft_len;
        busy[i] = s->slots[i].running != NULL;
    }
    pthread_mutex_unlock(&s->mu);
    dflash_batch_info bi;
    dflash_batch_stats(s->m, &bi);
    const char *P = "dflash:";
#define METRIC(name, kind, help, fmt, val)                                                     \
    dfl_buf_printf(&b, "# HELP %s%s %s\n# TYPE %s%s %s\n%s%s " fmt "\n", P, name, help, P, name, kind, P, name, val)
    dfl_buf_printf(&b, "# HELP %srequests_total HTTP responses by status code.\n# TYPE %srequests_total counter\n", P, P);
    for (int i = 0; i < m.n_codes; i++) dfl_buf_printf(&b, "%srequests_total{code=\"%ld\"} %ld\n", P, m.codes[i], m.code_n[i]);
    METRIC("requests_processing", "gauge", "Generations running now.", "%d", running);
    METRIC("requests_deferred", "gauge", "Generations waiting in the queue.", "%d", queued);
    METRIC("generations_total", "counter", "Generations finished.", "%ld", m.gens);
    METRIC("generations_cancelled_total", "counter", "Generations stopped because the client went away or the server shut down.", "%ld",
           m.cancelled);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens (cached ones included).", "%ld", m.prompt_tokens);
    METRIC("prompt_tokens_cached_total", "counter",
           "Prompt tokens whose KV was reused: the slot's previous request's, or copied from another slot.", "%ld",
           m.cached_tokens);
    METRIC("prompt_tokens_copied_total", "counter",
           "Prompt tokens whose KV was copied from another slot's cache (in prompt_tokens_cached_total too).", "%ld",
           m.copied_tokens);
    METRIC("generation_tokens_total", "counter", "Generated tokens.", "%ld", m.gen_tokens);
    METRIC("prompt_seconds_total", "counter", "Prefill time.", "%.6f", m.prompt_s);
    METRIC("generation_seconds_total", "counter", "Decode time.", "%.6f", m.decode_s);
    METRIC("spec_decode_num_drafts_total", "counter", "DFlash rounds that drafted.", "%ld", m.drafts);
    METRIC("spec_decode_num_draft_tokens_total", "counter", "Tokens the draft proposed.", "%ld", m.draft_tokens);
    METRIC("spec_decode_num_accepted_tokens_total", "counter", "Draft tokens the target accepted.", "%ld", m.accepted);
    METRIC("slots", "gauge", "Slots (--parallel): generations that run at once.", "%d", s->n_slots);
    dflash_kv_info kv;
    dflash_kv_stats(s->m, &kv);
    METRIC("kv_cache_used_bytes", "gauge", "Target KV cache the slots hold now (CPU: pages of 16 positions; "
           "0 where the backend allocates each slot's cache whole).", "%zu", kv.used);
    METRIC("kv_cache_peak_bytes", "gauge", "The most target KV cache held at once.", "%zu", kv.peak);
    METRIC("kv_cache_budget_bytes", "gauge", "--kv-budget in bytes (0: no limit).", "%zu", kv.budget);
    METRIC("kv_cache_evictions_total", "counter", "Idle slots' cached prompts dropped to make room under --kv-budget.",
           "%ld", kv.evictions);
    METRIC("kv_cache_waiting", "gauge",
           "Requests on a slot waiting for their KV reservation under --kv-budget (until running ones end).", "%d",
           kv.waiting);
    METRIC("kv_cache_waits_total", "counter", "Requests that waited for their KV reservation.", "%ld", kv.waits);
    METRIC("batch_size", "gauge", "Sequences in the last target forward (step).", "%d", bi.last_batch);
    METRIC("batch_size_max", "gauge", "The most sequences in one step.", "%d", bi.max_batch);
    METRIC("batch_steps_total", "counter", "Target forwards (steps), each over the rows of every running sequence.",
           "%ld", bi.steps);
    METRIC("batch_sequence_steps_total", "counter",
           "Sequence forwards in the steps (divided by batch_steps_total: the mean batch size).", "%ld", bi.seq_steps);
    METRIC("batch_rows_total", "counter", "Token rows in the steps.", "%ld", bi.rows);
    METRIC("batch_draft_steps_total", "counter", "Draft steps: one draft pass over the blocks of every drafting sequence.",
           "%ld", bi.draft_steps);
    METRIC("batch_draft_sequence_steps_total", "counter",
           "Draft blocks in the draft steps (divided by batch_draft_steps_total: the mean).", "%ld", bi.draft_seq_steps);
    METRIC("batch_draft_size_max", "gauge", "The most draft blocks in one draft step.", "%d", bi.max_draft_batch);
    METRIC("batch_unbatched_steps_total", "counter",
           "Steps of several sequences the backend could not batch (run one sequence at a time).", "%ld",
           bi.unbatched_steps);
    METRIC("batch_argmax_steps_total", "counter",
           "Predict steps: one pass over the LM head for the rows of all (greedy argmaxes, sampled rows' logits).",
           "%ld", bi.argmax_steps);
    METRIC("batch_argmax_rows_total", "counter", "Rows in the argmax steps.", "%ld", bi.argmax_rows);
    METRIC("batch_forward_seconds_total", "counter", "Time in target forward steps.", "%.6f", bi.forward_s);
    METRIC("batch_draft_seconds_total", "counter", "Time in draft steps.", "%.6f", bi.draft_s);
    METRIC("batch_argmax_seconds_total", "counter", "Time in argmax steps.", "%.6f", bi.argmax_s);
    METRIC("batch_lock_seconds_total", "counter",
           "Time the backend ran one sequence's other calls (rollback, draft feed, logits for sampling).", "%.6f",
           bi.lock_s);
    METRIC("batch_active_seconds_total", "counter",
           "Time at least one generation ran (less the four above: the backend idle between calls).", "%.6f",
           bi.active_s);
#undef METRIC
    dfl_buf_printf(&b, "# HELP %sslot_busy 1 while the slot generates.\n# TYPE %sslot_busy gauge\n", P, P);
    for (int i = 0; i < s->n_slots; i++) dfl_buf_printf(&b, "%sslot_busy{slot=\"%d\"} %d\n", P, i, busy[i]);
    dfl_buf_printf(&b,
                   "# HELP %sslot_tau Tokens per drafting round (bonus included) of the slot's last finished "
                   "generation that drafted; 0: none yet.\n# TYPE %sslot_tau gauge\n",
                   P, P);
    for (int i = 0; i < s->n_slots; i++) dfl_buf_printf(&b, "%sslot_tau{slot=\"%d\"} %.4f\n", P, i, tau[i]);
    dfl_buf_printf(&b,
                   "# HELP %sslot_draft_len Drafts per round of the slot's last finished generation (its draft "
                   "length, auto's choice under the batch's load; 0: plain decoding).\n"
                   "# TYPE %sslot_draft_len gauge\n",
                   P, P);
    for (int i = 0; i < s->n_slots; i++)
        dfl_buf_printf(&b, "%sslot_draft_len{slot=\"%d\"} %.4f\n", P, i, draft_len[i]);
    dfl_buf_printf(&b,
              "# HELP %sspec_decode_num_accepted_tokens_per_pos Draft tokens accepted at each draft position.\n"
              "# TYPE %sspec_decode_num_accepted_tokens_per_pos counter\n",
              P, P);
    int np = s->info.block_size > 1 ? s->info.block_size - 1 : 0;
    for (int i = 0; i < np && i < 64; i++)
        dfl_buf_printf(&b, "%sspec_decode_num_accepted_tokens_per_pos{position=\"%d\"} %ld\n", P, i, m.acc_pos[i]);
    enum MHD_Result ok = queue(c, s, 200, "text/plain; version=0.0.4; charset=utf-8", sb_text(&b), b.n);
    dfl_buf_free(&b);
    return ok;
}

#ifndef DFLASH_GIT_REV
#define DFLASH_GIT_REV ""
#endif

/* The settings a request that gives none runs with (llama-server's "params"). */
static cJSON *default_params_json(const sv_server *s) {
    dflash_gen g = dflash_default_gen();
    cJSON *p = cJSON_CreateObject();
    cJSON_AddNumberToObject(p, "n_predict", s->n_predict > 0 ? s->n_predict : -1);
    cJSON_AddNumberToObject(p, "temperature", s->temp);
    cJSON_AddNumberToObject(p, "top_p", g.top_p);
    cJSON_AddNumberToObject(p, "top_k", g.top_k);
    if (s->draft_max < 0) cJSON_AddStringToObject(p, "draft_max", "auto");
    else cJSON_AddNumberToObject(p, "draft_max", s->draft_max);
    cJSON_AddBoolToObject(p, "enable_thinking", s->think == 1);
    cJSON_AddBoolToObject(p, "ignore_eos", 0);
    return p;
}

/* GET /props, as llama-server has it (read-only here: POST is 405). */
static enum MHD_Result handle_props(struct MHD_Connection *c, sv_server *s) {
    cJSON *r = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(r, "default_generation_settings");
    cJSON_AddNumberToObject(d, "id", 0);
    cJSON_AddNumberToObject(d, "n_ctx", s->info.n_ctx);
    cJSON_AddBoolToObject(d, "speculative", s->info.has_draft);
    cJSON_AddItemToObject(d, "params", default_params_json(s));
    cJSON_AddNumberToObject(r, "total_slots", s->n_slots);
    cJSON_AddStringToObject(r, "model_path", s->model_path);
    cJSON_AddStringToObject(r, "model_alias", s->alias);
    cJSON_AddNumberToObject(r, "n_ctx", s->info.n_ctx);
    cJSON_AddNumberToObject(r, "n_vocab", s->info.vocab);
    const char *tmpl = dflash_chat_template(s->m);
    if (tmpl) cJSON_AddStringToObject(r, "chat_template", tmpl);
    else cJSON_AddNullToObject(r, "chat_template");
    cJSON *dr = cJSON_AddObjectToObject(r, "draft");
    cJSON_AddBoolToObject(dr, "loaded", s->info.has_draft);
    cJSON_AddNumberToObject(dr, "block_size", s->info.has_draft ? s->info.block_size : 0);
    cJSON_AddNumberToObject(dr, "layers", s->info.has_draft ? s->info.draft_layers : 0);
    cJSON_AddStringToObject(dr, "weight_format", s->info.draft_weight_format ? s->info.draft_weight_format : "");
    cJSON *mod = cJSON_AddObjectToObject(r, "modalities");
    cJSON_AddBoolToObject(mod, "vision", 0);
    cJSON_AddBoolToObject(mod, "audio", 0);
    char build[96];
    snprintf(build, sizeof build, "dflash %s%s%s", dflash_version(), DFLASH_GIT_REV[0] ? " git " : "", DFLASH_GIT_REV);
    cJSON_AddStringToObject(r, "build_info", build);
    cJSON_AddStringToObject(r, "backend", s->info.backend ? s->info.backend : "");
    return send_json(c, s, 200, r);
}

/* GET /slots: each slot (--parallel): what runs there, its last tau, and
 * what waits (the queue is shared: every slot reports it). */
static enum MHD_Result handle_slots(struct MHD_Connection *c, sv_server *s) {
    char task[SV_MAX_SLOTS][48];
    double tau[SV_MAX_SLOTS];
    pthread_mutex_lock(&s->mu);
    int queued = s->n_queued;
    for (int i = 0; i < s->n_slots; i++) {
        task[i][0] = 0;
        if (s->slots[i].running) snprintf(task[i], sizeof task[i], "%s", s->slots[i].running->id);
        tau[i] = s->slots[i].tau;
    }
    pthread_mutex_unlock(&s->mu);
    cJSON *r = cJSON_CreateArray();
    for (int i = 0; i < s->n_slots; i++) {
        cJSON *slot = cJSON_CreateObject();
        cJSON_AddItemToArray(r, slot);
        cJSON_AddNumberToObject(slot, "id", i);
        cJSON_AddNumberToObject(slot, "n_ctx", s->info.n_ctx);
        cJSON_AddBoolToObject(slot, "speculative", s->info.has_draft);
        cJSON_AddBoolToObject(slot, "is_processing", task[i][0] != 0);
        if (task[i][0]) cJSON_AddStringToObject(slot, "id_task", task[i]);
        else cJSON_AddNullToObject(slot, "id_task");
        cJSON_AddNumberToObject(slot, "tau", tau[i]);
        cJSON_AddNumberToObject(slot, "n_queued", queued);
        cJSON_AddItemToObject(slot, "params", default_params_json(s));
    }
    return send_json(c, s, 200, r);
}

/* The {id} of /v1/models/{id} or /models/{id} (not empty), else NULL. */
static const char *model_id(const char *url) {
    const char *p = !strncmp(url, "/v1/models/", 11) ? url + 11 : !strncmp(url, "/models/", 8) ? url + 8 : NULL;
    return p && *p ? p : NULL;
}

/* Paths: NULL if unknown; *post says whether it takes POST (else GET). */
static const char *route(const char *url, int *post) {
    static const struct {
        const char *path, *name;
        int post;
    } r[] = {
        {"/", "page", 0},
        {"/index.html", "page", 0},
        {"/health", "health", 0},
        {"/v1/health", "health", 0},
        {"/v1/models", "models", 0},
        {"/models", "models", 0},
        {"/metrics", "metrics", 0},
        {"/props", "props", 0},
        {"/slots", "slots", 0},
        {"/v1/chat/completions", "chat", 1},
        {"/chat/completions", "chat", 1},
        {"/v1/completions", "completions", 1},
        {"/completions", "completions", 1},
        {"/tokenize", "tokenize", 1},
        {"/detokenize", "detokenize", 1},
        {"/apply-template", "apply-template", 1},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++)
        if (!strcmp(url, r[i].path)) {
            *post = r[i].post;
            return r[i].name;
        }
    if (model_id(url)) {
        *post = 0;
        return "model";
    }
    return NULL;
}

/* Constant-time comparison of a presented key with the configured one. */
static int key_ok(const char *want, const char *got) {
    if (!got) return 0;
    size_t a = strlen(want), b = strlen(got);
    unsigned char d = a != b;
    for (size_t i = 0; i < a; i++) d |= (unsigned char)(want[i] ^ got[i < b ? i : 0]);
    return d == 0;
}

static int authorized(struct MHD_Connection *c, sv_server *s) {
    if (!s->api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ') h++;
        if (key_ok(s->api_key, h)) return 1;
    }
    return key_ok(s->api_key, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key"));
}

/* Checks that need only the request line and headers; 0 = go on. */
static int early_check(struct MHD_Connection *c, sv_server *s, const char *url, const char *method, sv_err *e) {
    int post = 0;
    const char *name = route(url, &post);
    if (!name) return fail(e, 404, "not_found", NULL, "no such endpoint: %s %.200s", method, url);
    if (strcmp(method, post ? "POST" : "GET") && !(!post && !strcmp(method, "HEAD")))
        return fail(e, 405, "method_not_allowed", NULL, "%.200s takes %s, not %s", url, post ? "POST" : "GET", method);
    if (strcmp(name, "page") && strcmp(name, "health") && !authorized(c, s))
        return fail(e, 401, "invalid_api_key", NULL, "missing or wrong API key (send \"Authorization: Bearer KEY\")");
    /* a body over the limit is read and dropped, then answered 413: answering
     * before it is read makes the connection close under a client still
     * sending, which then sees a reset instead of the 413 */
    pthread_mutex_lock(&s->mu);
    int stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    if (stopping && post) return fail(e, 503, "shutting_down", NULL, "the server is shutting down");
    return 0;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    sv_server *s = cls;
    sv_req *q = *con_cls;
    (void)version;
    sv_err e;
    if (!q) { /* headers are in: answer at once what needs no body */
        if (!strcmp(method, "OPTIONS")) {
            struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key");
            enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
            MHD_destroy_response(r);
            count_status(s, 204);
            return ok;
        }
        if (early_check(c, s, url, method, &e) < 0) return send_err(c, s, &e);
        *con_cls = xcalloc(1, sizeof(sv_req));
        return MHD_YES;
    }
    if (*upload_size) { /* a piece of the body */
        if (!q->too_big && q->body.n + *upload_size > SV_MAX_BODY) {
            q->too_big = 1;
            dfl_buf_free(&q->body);
        }
        if (!q->too_big) dfl_buf_add(&q->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (q->too_big) {
        fail(&e, 413, "request_too_large", NULL, "the request body is larger than %d bytes", SV_MAX_BODY);
        return send_err(c, s, &e);
    }
    int post = 0;
    const char *name = route(url, &post);
    if (!post) {
        if (!strcmp(name, "page"))
            return queue(c, s, 200, "text/html; charset=utf-8", (const char *)serve_page_html, serve_page_html_len);
        if (!strcmp(name, "health")) return queue(c, s, 200, "application/json", "{\"status\":\"ok\"}", 15);
        if (!strcmp(name, "models")) return handle_models(c, s, NULL);
        if (!strcmp(name, "model")) return handle_models(c, s, model_id(url));
        if (!strcmp(name, "props")) return handle_props(c, s);
        if (!strcmp(name, "slots")) return handle_slots(c, s);
        return handle_metrics(c, s);
    }
    if (json_has_nul(sb_text(&q->body), q->body.n)) { /* cJSON's strings would end there: refuse, never truncate */
        fail(&e, 400, "invalid_value", NULL, "a string in the request holds a NUL character (\\u0000), which is not supported");
        return send_err(c, s, &e);
    }
    cJSON *o = q->body.n ? cJSON_ParseWithLength(q->body.s, q->body.n) : NULL;
    if (!o) {
        if (q->body.n) fail(&e, 400, "invalid_json", NULL, "the request body is not valid JSON");
        else fail(&e, 400, "invalid_json", NULL, "the request needs a JSON body");
        return send_err(c, s, &e);
    }
    enum MHD_Result ok;
    if (!cJSON_IsObject(o)) {
        fail(&e, 400, "invalid_json", NULL, "the request body must be a JSON object");
        ok = send_err(c, s, &e);
    } else if (!strcmp(name, "chat")) {
        ok = handle_generate(c, s, o, q->body.s, q->body.n, JOB_CHAT);
    } else if (!strcmp(name, "completions")) {
        ok = handle_generate(c, s, o, q->body.s, q->body.n, JOB_COMPLETION);
    } else if (!strcmp(name, "tokenize")) {
        ok = handle_tokenize(c, s, o);
    } else if (!strcmp(name, "apply-template")) {
        ok = handle_apply_template(c, s, o, q->body.s, q->body.n);
    } else {
        ok = handle_detokenize(c, s, o);
    }
    cJSON_Delete(o);
    return ok;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)c, (void)toe;
    sv_req *q = *con_cls;
    if (!q) return;
    dfl_buf_free(&q->body);
    free(q);
    *con_cls = NULL;
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    /* our stream reader ends a stream whose client has gone with an error
     * (stream_read); the job's own line already says "client gone" */
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    if (strstr(msg, "application error generating response")) return;
    fprintf(stderr, "dflash serve: http: %s", msg);
}

/* ---- command line and main loop --------------------------------------------- */

_Noreturn static void usage_err(const char *msg, const char *arg) { cli_usage_err("serve", msg, arg); }

/* Wait for SIGINT/SIGTERM (blocked in every thread) up to ms; 1 if one came. */
static int wait_signal(const sigset_t *set, int ms) {
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    return sigtimedwait(set, NULL, ms < 0 ? NULL : &t) > 0;
}

int cmd_serve(int argc, char **argv) {
    const char *model = NULL, *draft = NULL, *host = "127.0.0.1", *api_key = NULL, *alias = NULL;
    const char *quant = NULL, *draft_quant = NULL, *backend = NULL, *tokenizer = NULL;
    int port = 8080, ctx = 0, parallel = 1, queue_max = 64, n_predict = -1, think = 0, threads = 0, draft_max = -1;
    const char *reasoning_effort = NULL, *chat_date = NULL;
    int step_tokens = 0, kv_budget = 0;
    float temp = 0;
    cli_draft_vocab dv = {0};
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define IS(s, l) (strcmp(a, s) == 0 || strcmp(a, l) == 0)
#define VAL() (i + 1 < argc ? argv[++i] : (usage_err("missing value for", a), ""))
        if (IS("-h", "--help")) {
            fputs(help_serve, stdout);
            return 0;
        } else if (IS("-m", "--model")) model = VAL();
        else if (IS("-md", "--draft")) draft = VAL();
        else if (IS("--host", "--host")) host = VAL();
        else if (IS("--port", "--port")) port = (int)cli_parse_int("serve", a, VAL(), 0, 65535);
        else if (IS("--api-key", "--api-key")) api_key = VAL();
        else if (IS("--alias", "--alias")) alias = VAL();
        else if (IS("-c", "--ctx-size")) ctx = (int)cli_parse_int("serve", a, VAL(), 2, 1 << 24);
        else if (IS("--parallel", "-np")) parallel = (int)cli_parse_int("serve", a, VAL(), 1, SV_MAX_SLOTS);
        else if (IS("--step-tokens", "--step-tokens")) step_tokens = (int)cli_parse_int("serve", a, VAL(), 1, 4096);
        else if (IS("--kv-budget", "--kv-budget")) kv_budget = (int)cli_parse_int("serve", a, VAL(), 1, 1 << 30);
        else if (IS("--queue", "--queue")) queue_max = (int)cli_parse_int("serve", a, VAL(), 1, 1 << 20);
        else if (IS("-n", "--n-predict")) n_predict = (int)cli_parse_int("serve", a, VAL(), 1, INT_MAX);
        else if (IS("--temp", "--temperature")) {
            const char *v = VAL();
            char *end;
            temp = strtof(v, &end);
            if (*end || end == v || !(temp >= 0 && temp <= 2)) usage_err("--temp expects a number in 0..2, got", v);
        } else if (IS("--draft-max", "--draft-max")) {
            const char *v = VAL();
            draft_max = strcmp(v, "auto") == 0 ? -1 : (int)cli_parse_int("serve", a, v, 0, 63);
        } else if (IS("--draft-vocab", "--draft-vocab")) cli_parse_draft_vocab("serve", a, VAL(), &dv);
        else if (IS("--think", "--think")) think = 1;
        else if (IS("--reasoning-effort", "--reasoning-effort")) reasoning_effort = VAL();
        else if (IS("--chat-date", "--chat-date")) chat_date = VAL();
        else if (IS("-t", "--threads")) threads = (int)cli_parse_int("serve", a, VAL(), 1, 1024);
        else if (IS("--quant", "--quant")) quant = VAL();
        else if (IS("--draft-quant", "--draft-quant")) draft_quant = VAL();
        else if (IS("--backend", "--backend")) backend = VAL();
        else if (IS("--tokenizer", "--tokenizer")) tokenizer = VAL();
        else usage_err("unknown option", a);
#undef IS
#undef VAL
    }
    if (!model) usage_err("missing -m DIR", NULL);
    if (api_key && !*api_key) usage_err("--api-key must not be empty", NULL);
    const char *bad = chat_harmony_check(&(chat_harmony_opts){.reasoning_effort = reasoning_effort, .date = chat_date});
    if (bad) usage_err(reasoning_effort && strstr(bad, "reasoning_effort") ? "--reasoning-effort:" : "--chat-date:", bad);
    cli_find_freq_rank("serve", &dv, tokenizer, model);

    /* the address first: a bad --host fails before the model loads */
    struct addrinfo hints, *ai = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char portstr[16];
    snprintf(portstr, sizeof portstr, "%d", port);
    int gai = getaddrinfo(host, portstr, &hints, &ai);
    if (gai != 0) {
        fprintf(stderr, "dflash serve: error: cannot resolve --host %s: %s\n", host, gai_strerror(gai));
        return 1;
    }

    /* SIGINT/SIGTERM are taken by sigtimedwait in this thread only: block them
     * before any thread starts (threads inherit the mask) */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    dflash_params p = dflash_default_params();
    p.n_threads = threads;
    p.step_tokens = step_tokens;
    p.kv_budget_mib = kv_budget;
    p.n_ctx = ctx;
    p.quant = quant;
    p.draft_quant = draft_quant;
    p.backend = backend;
    p.tokenizer = tokenizer;
    dflash_model *m = dflash_load(model, draft, &p);
    if (!m) {
        fprintf(stderr, "dflash serve: error: %s\n", dflash_error());
        freeaddrinfo(ai);
        return 1;
    }
    sv_server *s = xcalloc(1, sizeof *s);
    s->m = m;
    dflash_get_info(m, &s->info);
    int n_ranked = 0; /* a rank file is checked against the model here, not at each request */
    const char *bad_vocab = !dv.rank[0]                                                       ? NULL
                            : dflash_vocab_rank_check(dv.rank, s->info.vocab, &n_ranked) != 0 ? dflash_error()
                            : dv.n > s->info.vocab ? "N is more than the model's token ids" : NULL;
    if (bad_vocab) {
        fprintf(stderr, "dflash serve: error: --draft-vocab: %s\n", bad_vocab);
        free(s);
        dflash_free(m);
        freeaddrinfo(ai);
        return 1;
    }
    if ((reasoning_effort || chat_date) && chat_detect(dflash_chat_template(m)) != CHAT_HARMONY) {
        fprintf(stderr, "dflash serve: error: %s is an option of gpt-oss's harmony template; this model's "
                        "template has none\n", reasoning_effort ? "--reasoning-effort" : "--chat-date");
        free(s);
        dflash_free(m);
        freeaddrinfo(ai);
        return 1;
    }
    s->dv = dv;
    s->model_path = model;
    if (!alias) { /* the directory's name */
        size_t n = strlen(model);
        while (n > 1 && model[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && model[b - 1] != '/') b--;
        static char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(n - b), model + b);
        alias = name;
    }
    s->alias = alias;
    s->api_key = api_key;
    s->queue_max = queue_max;
    s->n_predict = n_predict;
    s->think = think;
    s->reasoning_effort = reasoning_effort;
    s->chat_date = chat_date;
    s->temp = temp;
    s->draft_max = draft_max;
    s->created = (long)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    s->n_slots = parallel;
    s->slots = xcalloc((size_t)parallel, sizeof *s->slots);
    for (int i = 0; i < parallel; i++) {
        sv_slot *sl = &s->slots[i];
        *sl = (sv_slot){.srv = s, .id = i};
        pthread_cond_init(&sl->cv, NULL);
        if (i > 0 && !(sl->seq = dflash_seq_new(m))) {
            fprintf(stderr, "dflash serve: error: slot %d: %s\n", i, dflash_error());
            for (int k = 1; k < i; k++) dflash_seq_free(s->slots[k].seq);
            free(s->slots);
            free(s);
            dflash_free(m);
            freeaddrinfo(ai);
            return 1;
        }
    }
    for (int i = 0; i < parallel; i++)
        if (pthread_create(&s->slots[i].th, NULL, worker_main, &s->slots[i]) != 0) {
            fprintf(stderr, "dflash serve: error: cannot start the worker threads\n");
            return 1;
        }

    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s,
        MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, (unsigned)SV_MAX_CONNS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)SV_IDLE_S, MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_END);
    char hostbuf[INET6_ADDRSTRLEN + 2];
    snprintf(hostbuf, sizeof hostbuf, strchr(host, ':') ? "[%.*s]" : "%.*s", INET6_ADDRSTRLEN - 1, host);
    freeaddrinfo(ai);
    int rc = 0;
    if (!d) {
        fprintf(stderr, "dflash serve: error: cannot listen on %s:%d (%s)\n", hostbuf, port,
                errno ? strerror(errno) : "libmicrohttpd failed");
        rc = 1;
    } else {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
        int bound = di ? (int)di->port : port;
        dflash_kv_info kvi;
        dflash_kv_stats(s->m, &kvi);
        char kvline[320] = "";
        if (kvi.budget) {
            size_t full = dflash_kv_reserve(s->m, 1, -1); /* a request without max_tokens: the whole context */
            snprintf(kvline, sizeof kvline,
                     ", %d MiB for all (--kv-budget): a request waits until its prompt + max_tokens + 64 positions "
                     "fit (without max_tokens the whole context, %.1f MiB: %zu at once%s)",
                     kv_budget, full / 1048576.0, full ? kvi.budget / full : 0,
                     full > kvi.budget ? ", so such requests are refused" : "");
        }
        fprintf(stderr,
                "dflash serve: model '%s' (%s, %s%s), context %d, queue %d\n"
                "dflash serve: %d slot%s (--parallel), each a KV cache of %.1f MiB%s%s\n"
                "dflash serve: listening on http://%s:%d (chat page at /, API at /v1)\n",
                s->alias, s->info.arch, s->info.weight_format, s->info.has_draft ? ", DFlash draft" : "",
                s->info.n_ctx, queue_max, parallel, parallel > 1 ? "s" : "",
                (double)s->info.seq_kv_bytes / (1024.0 * 1024.0),
                kvi.paged ? " when full (paged: taken as used)" : "", kvline, hostbuf, bound);
        fflush(stderr);
        wait_signal(&sigs, -1);
        fprintf(stderr, "dflash serve: shutting down: finishing accepted requests\n");
        MHD_socket ls = MHD_quiesce_daemon(d); /* no new connections */
        if (ls != MHD_INVALID_SOCKET) close(ls);
        pthread_mutex_lock(&s->mu);
        s->stopping = 1;
        pthread_mutex_unlock(&s->mu);
        /* let accepted requests finish; a second signal or the deadline cancels them */
        double t_end = now_s() + SV_DRAIN_S;
        for (;;) {
            pthread_mutex_lock(&s->mu);
            int busy = s->head || s->n_running;
            pthread_mutex_unlock(&s->mu);
            if (!busy) break;
            if (wait_signal(&sigs, 50) || now_s() > t_end) {
                fprintf(stderr, "dflash serve: cancelling the requests still running\n");
                break;
            }
        }
    }
    pthread_mutex_lock(&s->mu);
    s->stopping = 1;
    s->worker_exit = 1;
    for (sv_job *j = s->head; j; j = j->next)
        if (!j->cancelled) __atomic_store_n(&j->cancelled, JOB_SHUTDOWN, __ATOMIC_RELEASE);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].running && !s->slots[i].running->cancelled)
            __atomic_store_n(&s->slots[i].running->cancelled, JOB_SHUTDOWN, __ATOMIC_RELEASE);
    for (int i = 0; i < s->n_slots; i++) pthread_cond_signal(&s->slots[i].cv);
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < s->n_slots; i++) pthread_join(s->slots[i].th, NULL);
    for (int i = 0; i < s->n_slots; i++) {
        dflash_seq_free(s->slots[i].seq);
        pthread_cond_destroy(&s->slots[i].cv);
    }
    free(s->slots);
    /* the streams write their last event (a cut one: its error event) before
     * the connections close; a client that does not read gets 2 s */
    for (double t_end = now_s() + 2.0; d && now_s() < t_end;) {
        pthread_mutex_lock(&s->mu);
        int n = s->n_streams;
        pthread_mutex_unlock(&s->mu);
        if (!n) break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (d) MHD_stop_daemon(d); /* closes connections, joins their threads (jobs are all done) */
    pthread_mutex_destroy(&s->mu);
    dflash_free(m);
    free(s);
    if (!rc) fprintf(stderr, "dflash serve: stopped\n");
    return rc;
}
