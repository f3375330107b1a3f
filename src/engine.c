/* engine.c - libdflash's public API (include/dflash.h): loading, the
 * prompt cache, and the glue between the decoding loop (spec.c) and a
 * backend (backend.h).
 *
 * Cache rule: m->cache_tok[0..target length) are the tokens whose K/V the
 * target cache holds. When a draft is in use, the draft's context (its
 * draft_ctx_length, which counts rows the backend keeps pending) holds
 * exactly the same positions after every round. A call that runs without the
 * draft leaves the draft context at min(its length, the common prefix); the
 * next drafting call prefills from the shorter of the two.
 *
 * Stable rule (m->stable; prefix copies between sequences): cache_tok[0..
 * stable) and the target rows there stay as they are until the sequence's
 * current generation ends - during one, the prompt rows reused or
 * prefilled so far (a generation never rolls back into its prompt), outside
 * one, every cached row. It changes only with the bat_lock held or by an
 * atomic release store after the rows and cache_tok are written (a prefill
 * chunk), so a copy under bat_lock may read rows 0..stable-1 of a sequence
 * that is generating on another thread (dflash_copy_prefix: the prefix rule
 * of backend.h makes the copy a fresh prefill's rows, bit for bit).
 *
 * Budget rule (dflash_params.kv_budget_mib, a backend with trim): the
 * target KV pages of a model and its sequences count against one budget,
 * and a generation is admitted only with a reservation: the positions it
 * may use, R = prompt + n_predict + a verify block (SPEC_MAX_BLOCK), at
 * most the context (reserve_rows). Invariant, under bat_lock: the pages
 * held + every running generation's pages still to come (kv_need up to
 * its R) <= the budget. So a running generation never runs out: its
 * forwards only take pages it has reserved. Admission (kv_admit, before
 * the prefill, in arrival order: a line of waiting generations (adm_line),
 * only its head may be admitted; dflash_gen.cancel takes a waiting one out
 * of the line) makes room first - the generation's own
 * pages past R go back, then every idle sequence's pages past its length,
 * then idle caches are evicted, least recently used first (length 0,
 * stable 0: their next request prefills in full); a running generation's
 * cache is never touched. If the reservation still does not fit, the
 * generation waits (bat_sleep) until a running one ends; if none runs, it
 * can never fit and fails at once with an error naming the budget, before
 * any row is computed. dflash_copy_prefix takes pages only where the
 * invariant allows.
 *
 * Sequences (dflash_seq_new): a sequence is a dflash_model of its own that
 * shares its owner's weights, tokenizer, backend instance and forward
 * scheduler (m->owner, m->bat) and has its own everything else below - KV
 * caches, draft context, sampler, stop rules, grammar, prompt cache. Every
 * backend call of a generation goes through the scheduler (batch.h): target
 * forwards by bat_forward, greedy argmaxes by bat_argmax and draft blocks by
 * bat_draft, batched with the other sequences' of the step; all other calls
 * between bat_lock and bat_unlock.
 *
 * Per greedy round only ids cross from the backend (argmax, draft_block's
 * out); sampling, the logit controls (logit_bias, penalties) and logprobs
 * bring the verify rows' logits to the host (pick_row). The hidden taps stay
 * in the target's sequence state and reach the draft through draft_feed.
 *
 * Grammar rule (dflash_gen.grammar): m->gr_emitted is the matcher state
 * after the prompt's generated continuation so far - exactly the tokens
 * on_emit has reported, and only those (a rolled-back draft never reaches
 * it). Verify row r is picked with m->gr_row = gr_emitted advanced over the
 * drafts before row r, which are the target's own picks for rows 0..r-1
 * while the row is one spec_run can use (a row after a rejected draft is
 * never used and gets no grammar work): the state plain decoding has at
 * that position. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "batch.h"
#include "chat.h"
#include "dflash.h"
#include "gguf_model.h"
#include "gguf_write.h"
#include "grammar.h"
#include "quant.h"
#include "sample.h"
#include "spec.h"
#include "tokenizer.h"
#include "util.h"
#include "vocab.h"

enum { PREFILL_ROWS = BE_MAX_ROWS };
/* Verify rows projected per predict call when sampling on a backend that
 * otherwise takes every row at once. */
enum { PREDICT_ROWS = 4 };
/* Candidates per draft slot a tree is built from (<= BE_DRAFT_TOPK). */
enum { TREE_TOPK = 8 };

struct dflash_model {
    dflash_model *owner; /* a sequence: the model it belongs to; NULL: the model itself */
    bat_sched *bat;      /* the model's forward scheduler (a sequence: its owner's) */
    mdl_model target, draft;
    int has_target, has_draft;
    tok_tokenizer *tok;
    const be_ops *be;    /* the backend's table */
    void *bi;            /* its instance (be->open) */
    int prepared, dprepared; /* be->prepare ran on target, draft */
    void *seq, *dseq;
    int n_ctx;
    int32_t *cache_tok;  /* [n_ctx] tokens in the target KV cache */
    int stable;          /* rows 0..stable-1 of the cache stay until the generation ends (the stable rule) */
    /* the KV budget (the budget rule), all under bat_lock */
    dflash_model *seqs;  /* a model: its sequences (dflash_seq_new), newest first */
    dflash_model *next_seq; /* a sequence: the next of its owner's */
    int busy;            /* a generation runs on it (admitted: its reservation counts) */
    int reserve;         /* while busy: the positions it reserved (the budget rule's R) */
    dflash_model *adm_line; /* a model: the generations waiting for admission, first come first */
    dflash_model *adm_next; /* a waiting generation: the one behind it in its owner's line */
    int kv_waiting;      /* a model: generations waiting for their reservation now */
    long kv_waits;       /* a model: generations that had to wait, so far */
    unsigned long last_use; /* the owner's use_clock when its last generation ended */
    unsigned long use_clock; /* a model: generations ended so far */
    long kv_evictions;   /* a model: idle caches evicted for others */
    float *logits;       /* [SPEC_MAX_BLOCK][vocab]: prefill's last row, sampling */
    void *smp_work;
    int *pen_count;      /* [vocab] zeros: smp_transform_apply's scratch */
    double load_s;
    char format[96], draft_format[96];
    /* per-call state used by the spec_iface callbacks */
    smp_params sp;
    smp_transform tf;    /* logit_bias and penalties of this call */
    smp_bias *bias;      /* [tf.n_bias], this call's copy */
    int host_logits;     /* rows come to the host (sampling, transforms, logprobs); else argmax on the backend */
    dflash_on_logprob on_lp;
    int top_lp;
    dflash_logprob lp[SPEC_MAX_BLOCK]; /* per verify row (the first token: [0]), filled by pick_row */
    int lp_row;          /* the row of the next emitted token */
    int drafting;        /* this call computes taps and feeds the draft */
    int block_len;       /* verify rows of the last forward */
    int verify_len;      /* committed length before the last verify */
    int predict_rows;    /* verify rows projected to logits at a time (greedy: while the batch's model
                            cannot choose) */
    int predict_rows_fixed; /* DFLASH_PREDICT_ROWS set: predict_rows always */
    int n_stop;
    int32_t stop[CFG_MAX_EOS + 1 + CHAT_MAX_STOP]; /* config's, tokenizer_config's, the chat format's */
    int draft_nv, draft_nx;          /* reduced draft vocabulary: ids < nv (or draft_ids), plus */
    int32_t draft_extra[CFG_MAX_EOS + 1 + CHAT_MAX_STOP]; /* these stop ids beyond it */
    /* a ranked draft vocabulary (dflash_gen.draft_vocab_rank): the file's
     * ranking, and the draft_nv ids scored, ascending (NULL: ids < draft_nv) */
    char *rank_path;
    voc_rank rank;
    int32_t *draft_ids;
    int draft_ids_cap;
    int draft_ids_n;     /* the selection draft_ids holds (0: none) */
    int draft_ids_on;    /* this call scores draft_ids[0..draft_nv) */
    spec_auto ctl;       /* draft length control, kept across calls */
    bat_member member;   /* this generation in the scheduler (its round's plan for the batch's cost model) */
    /* tree rounds (dflash_gen.tree): the last tree verify's rows, 0: a chain */
    int tree_n;
    int32_t tree_tok[SPEC_MAX_BLOCK];   /* [tree_n] its tokens */
    int tree_depth[SPEC_MAX_BLOCK];     /* [tree_n] their depths (anchor 0) */
    int32_t top_ids[SPEC_MAX_BLOCK * BE_DRAFT_TOPK]; /* [slots][K] draft candidates */
    float top_logp[SPEC_MAX_BLOCK * BE_DRAFT_TOPK];  /* [slots][K] their log-probabilities */
    /* constrained decoding (this call's grammar; NULL: none) */
    gr_grammar *gr;
    gr_state *gr_emitted;  /* after the emitted tokens (the grammar rule above) */
    gr_state *gr_row;      /* for the verify row being picked */
    gr_state *gr_try;      /* scratch: testing one token */
    int gr_row_live;       /* gr_row is a row spec_run may use */
    int32_t gr_prev_pick;  /* the pick for the row before gr_row's */
    int gr_eos_when_done;  /* ignore_eos: stop tokens only where nothing else can follow */
    int gr_failed;         /* on_emit could not advance gr_emitted (message set) */
    int16_t *tok_first;    /* [vocab] first byte of each token's piece, -1: no bytes (lazily, once) */
};

const char *dflash_error(void) { return dfl_lasterr(); }

const char *dflash_version(void) { return DFLASH_VERSION_STRING; }

dflash_params dflash_default_params(void) {
    dflash_params p = {.n_threads = 0, .n_ctx = 0, .quant = NULL, .quant_group = 64, .draft_quant = NULL,
                       .backend = NULL, .tokenizer = NULL};
    return p;
}

dflash_gen dflash_default_gen(void) {
    dflash_gen g;
    memset(&g, 0, sizeof g);
    g.n_predict = 256;
    g.top_p = 1.0f;
    g.use_draft = 1;
    g.draft_max = -1;
    g.draft_vocab = 0;
    g.repeat_penalty = 1.0f;
    g.repeat_last_n = 64;
    return g;
}

int dflash_quantize(const char *in_dir, const char *out_dir, int bits, int group) {
    return qt_checkpoint(in_dir, out_dir, bits, group);
}

int dflash_convert(const char *in_dir, const char *out_path, const char *type, const char *tok_dir) {
    return ggm_convert(in_dir, out_path, type, tok_dir);
}

int dflash_is_gguf(const char *path) { return gguf_is_gguf(path); }

static const char *weight_format(const mdl_model *m, char *buf, size_t n) {
    const wt_weight *w = &m->layers[0].wq;
    if (!w->rows) w = &m->layers[0].lin_qkv; /* a Gated DeltaNet layer (Qwen3.5) */
    if (w->dtype == WT_Q8 || w->dtype == WT_Q4)
        snprintf(buf, n, "MLX %d-bit, group %d, scales %s", w->bits, w->group_size, wt_dtype_name(w->scale_dtype));
    else
        snprintf(buf, n, "%s", wt_dtype_name(w->dtype));
    return buf;
}

/* The draft must fit the target it reads features, embeddings and lm_head from. */
static int check_draft(const mdl_model *t, const mdl_model *d) {
    const cfg_model *tc = &t->cfg, *dc = &d->cfg;
    if (!dc->is_draft) {
        dfl_seterr("draft: config.json is not a DFlash draft (architectures[0] is %s, want DFlashDraftModel)",
                   dc->arch_name);
        return -1;
    }
    if (dc->hidden != tc->hidden) {
        dfl_seterr("draft hidden_size %d does not match the target's %d", dc->hidden, tc->hidden);
        return -1;
    }
    /* the draft's heads are its own: it shares only the hidden size, the
     * embedding and the lm_head with the target (Qwen3.5 targets have
     * 256-wide gated heads, a draft plain Qwen3 ones) */
    if (dc->n_target_layers && dc->n_target_layers != tc->n_layers) {
        dfl_seterr("draft num_target_layers %d does not match the target's num_hidden_layers %d",
                   dc->n_target_layers, tc->n_layers);
        return -1;
    }
    for (int i = 0; i < dc->n_taps; i++)
        if (dc->tap_layers[i] < 0 || dc->tap_layers[i] >= tc->n_layers) {
            dfl_seterr("draft target_layer_ids[%d] = %d is outside the target's %d layers", i, dc->tap_layers[i],
                       tc->n_layers);
            return -1;
        }
    if (dc->mask_token_id < 0 || dc->mask_token_id >= tc->vocab) {
        dfl_seterr("draft mask_token_id %d is outside the target's embedding table (vocab_size %d)",
                   dc->mask_token_id, tc->vocab);
        return -1;
    }
    if (dc->vocab != tc->vocab) {
        dfl_seterr("draft vocab_size %d does not match the target's %d", dc->vocab, tc->vocab);
        return -1;
    }
    return 0;
}

/* The tokenizer of PATH: a GGUF file's tokenizer.ggml.*, or a directory's
 * tokenizer.json; NULL + error otherwise. */
static tok_tokenizer *load_tokenizer(const char *path) {
    if (mdl_check_path(path) != 0) return NULL;
    return gguf_is_gguf(path) ? ggm_tokenizer(path) : tok_load(path);
}

dflash_model *dflash_load_tokenizer(const char *dir) {
    dflash_model *m = dfl_calloc(1, sizeof *m);
    if (!(m->tok = load_tokenizer(dir))) {
        free(m);
        return NULL;
    }
    return m;
}

/* A sequence's own state (the struct's comment): its backend states and buffers. */
static int seq_init(dflash_model *m) {
    const cfg_model *c = &m->target.cfg;
    if (!(m->seq = m->be->create(m->bi, &m->target, m->n_ctx))) return -1;
    if (m->has_draft && !(m->dseq = m->be->draft_create(m->bi, &m->draft, &m->target, m->n_ctx))) return -1;
    m->cache_tok = dfl_malloc(sizeof(int32_t) * (size_t)m->n_ctx);
    m->logits = dfl_malloc(sizeof(float) * SPEC_MAX_BLOCK * (size_t)c->vocab);
    m->smp_work = dfl_malloc(smp_work_size(c->vocab));
    m->pen_count = dfl_calloc((size_t)c->vocab, sizeof(int));
    return 0;
}

static void seq_release(dflash_model *m) {
    if (m->seq) m->be->destroy(m->seq);
    if (m->dseq) m->be->draft_destroy(m->dseq);
    free(m->cache_tok);
    free(m->logits);
    free(m->smp_work);
    free(m->pen_count);
    free(m->bias);
    free(m->tok_first);
    free(m->rank_path);
    voc_rank_free(&m->rank);
    free(m->draft_ids);
    gr_state_free(m->gr_emitted);
    gr_state_free(m->gr_row);
    gr_state_free(m->gr_try);
    gr_free(m->gr);
}

dflash_model *dflash_load(const char *target_dir, const char *draft_dir, const dflash_params *p) {
    double t0 = dfl_now();
    dflash_params def = dflash_default_params();
    if (!p) p = &def;
    dflash_model *m = dfl_calloc(1, sizeof *m);
    if (!(m->be = be_select(p->backend))) goto fail;
    if (p->kv_budget_mib < 0 || (p->kv_budget_mib > 0 && !m->be->trim)) {
        dfl_seterr("kv_budget_mib %d: %s", p->kv_budget_mib,
                   p->kv_budget_mib < 0 ? "must be 0 (no limit) or a size in MiB"
                                        : "the KV budget needs a paged cache; this backend allocates each "
                                          "sequence's cache whole (the CPU backend pages it)");
        goto fail;
    }
    be_options bo = {.n_threads = p->n_threads, .kv_budget = (size_t)p->kv_budget_mib << 20};
    if (!(m->bi = m->be->open(&bo))) {
        dfl_preferr("backend %s", m->be->name);
        goto fail;
    }
    if (mdl_load(&m->target, target_dir) != 0) goto fail;
    m->has_target = 1;
    if (m->target.cfg.is_draft) {
        dfl_seterr("%s is a DFlash draft, not a target model (pass it with --draft)", target_dir);
        goto fail;
    }
    if (!(m->tok = load_tokenizer(p->tokenizer ? p->tokenizer : target_dir))) {
        if (!p->tokenizer && gguf_is_gguf(target_dir))
            dfl_preferr("%s has no usable tokenizer (pass one with --tokenizer DIR)", target_dir);
        goto fail;
    }
    if (draft_dir) {
        if (mdl_load(&m->draft, draft_dir) != 0) goto fail;
        m->has_draft = 1;
        if (check_draft(&m->target, &m->draft) != 0) {
            dfl_preferr("%s", draft_dir);
            goto fail;
        }
        if (p->draft_window < 0) {
            dfl_seterr("draft window %d must be >= 0", p->draft_window);
            goto fail;
        }
        if (p->draft_window > 0) { /* every draft layer sliding (cfg_model: window, sliding_layer) */
            cfg_model *dc = &m->draft.cfg;
            dc->window = p->draft_window;
            dc->n_sliding_layers = dc->n_layers;
            for (int l = 0; l < dc->n_layers; l++) dc->sliding_layer[l] = 1;
        }
    }
    qt_kind qk, dk = QT_KEEP;
    if (qt_parse(p->quant, &qk) != 0) goto fail;
    int qg = p->quant_group ? p->quant_group : 64;
    if (p->draft_quant && strcmp(p->draft_quant, "keep") != 0) {
        if (qt_parse(p->draft_quant, &dk) != 0) {
            dfl_preferr("draft quantization");
            goto fail;
        }
    } else if (!p->draft_quant) {
        wt_dtype dt = m->draft.layers ? m->draft.layers[0].wq.dtype : WT_Q8;
        int fl = dt == WT_BF16 || dt == WT_F16 || dt == WT_F32;
        dk = qk != QT_KEEP ? qk : fl && m->be->draft_q8(m->bi) ? QT_Q8 : QT_KEEP;
    }
    if (qt_model(&m->target, qk, qg) != 0 || (m->has_draft && qt_model(&m->draft, dk, qg) != 0)) goto fail;
    if (m->be->prepare(m->bi, &m->target) != 0) goto fail;
    m->prepared = 1;
    if (m->has_draft) {
        if (m->be->prepare(m->bi, &m->draft) != 0) goto fail;
        m->dprepared = 1;
    }
    const cfg_model *c = &m->target.cfg;
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : (c->max_pos < 4096 ? c->max_pos : 4096);
    if (n_ctx > c->max_pos) {
        dfl_seterr("context size %d exceeds the model's max_position_embeddings %d", n_ctx, c->max_pos);
        goto fail;
    }
    if (n_ctx < 2) {
        dfl_seterr("context size %d is too small", n_ctx);
        goto fail;
    }
    m->n_ctx = n_ctx;
    m->predict_rows = m->be->predict_rows;
    const char *pr = getenv("DFLASH_PREDICT_ROWS"); /* for benchmarking; 0 = all rows at once */
    if (pr && *pr) m->predict_rows = atoi(pr), m->predict_rows_fixed = 1;
    m->bat = bat_new(m->be, p->step_tokens);
    if (seq_init(m) != 0) goto fail;
    weight_format(&m->target, m->format, sizeof m->format);
    if (m->has_draft) weight_format(&m->draft, m->draft_format, sizeof m->draft_format);
    m->load_s = dfl_now() - t0;
    return m;
fail:
    dflash_free(m);
    return NULL;
}

void dflash_free(dflash_model *m) {
    if (!m) return;
    seq_release(m);
    if (m->owner) { /* a sequence: the rest is its owner's */
        free(m);
        return;
    }
    bat_free(m->bat);
    if (m->prepared) m->be->release(m->bi, &m->target);
    if (m->dprepared) m->be->release(m->bi, &m->draft);
    if (m->has_target) mdl_free(&m->target);
    if (m->has_draft) mdl_free(&m->draft);
    if (m->bi) m->be->close(m->bi);
    tok_free(m->tok);
    free(m);
}

struct dflash_seq {
    dflash_model *m; /* the sequence's own dflash_model (owner set) */
};

dflash_seq *dflash_seq_new(dflash_model *m) {
    if (!m || !m->has_target || m->owner) {
        dfl_seterr("dflash_seq_new: %s", !m ? "no model" : m->owner ? "not a model" : "no model loaded (tokenizer only)");
        return NULL;
    }
    dflash_model *c = dfl_calloc(1, sizeof *c);
    *c = (dflash_model){.owner = m, .bat = m->bat, .target = m->target, .draft = m->draft,
                        .has_target = m->has_target, .has_draft = m->has_draft, .tok = m->tok, .be = m->be,
                        .bi = m->bi, .n_ctx = m->n_ctx, .load_s = m->load_s, .predict_rows = m->predict_rows,
                        .predict_rows_fixed = m->predict_rows_fixed};
    memcpy(c->format, m->format, sizeof c->format);
    memcpy(c->draft_format, m->draft_format, sizeof c->draft_format);
    bat_lock(m->bat); /* the backend's allocations beside a running step */
    int rc = seq_init(c);
    if (rc == 0) { /* the budget rule's list */
        c->next_seq = m->seqs;
        m->seqs = c;
    }
    bat_unlock(m->bat);
    if (rc != 0) {
        dflash_free(c);
        return NULL;
    }
    dflash_seq *s = dfl_calloc(1, sizeof *s);
    s->m = c;
    return s;
}

void dflash_seq_free(dflash_seq *s) {
    if (!s) return;
    dflash_model *o = s->m->owner;
    bat_lock(o->bat);
    for (dflash_model **p = &o->seqs; *p; p = &(*p)->next_seq)
        if (*p == s->m) {
            *p = s->m->next_seq;
            break;
        }
    bat_unlock(o->bat);
    dflash_free(s->m);
    free(s);
}

int dflash_seq_generate(dflash_seq *s, const int32_t *prompt, size_t n_prompt, const dflash_gen *g,
                        dflash_on_token cb, void *ud, int32_t **out, size_t *n_out, dflash_stats *st) {
    return dflash_generate(s->m, prompt, n_prompt, g, cb, ud, out, n_out, st);
}

void dflash_seq_reset(dflash_seq *s) { dflash_reset(s->m); }

void dflash_batch_stats(const dflash_model *m, dflash_batch_info *out) {
    memset(out, 0, sizeof *out);
    if (!m->bat) return;
    bat_counts c;
    bat_stats(m->bat, &c);
    *out = (dflash_batch_info){.active = c.active, .steps = c.steps, .seq_steps = c.seq_steps, .rows = c.rows,
                               .last_batch = c.last_batch, .max_batch = c.max_batch,
                               .draft_steps = c.draft_steps, .draft_seq_steps = c.draft_seq_steps,
                               .max_draft_batch = c.max_draft_batch, .unbatched_steps = c.unbatched, .max_rows = c.max_rows,
                               .argmax_steps = c.argmax_steps, .argmax_rows = c.argmax_rows,
                               .forward_s = c.forward_s, .draft_s = c.draft_s, .argmax_s = c.argmax_s,
                               .lock_s = c.lock_s, .active_s = c.active_s};
}

void dflash_get_info(const dflash_model *m, dflash_info *in) {
    memset(in, 0, sizeof *in);
    if (!m->has_target) return;
    const cfg_model *c = &m->target.cfg;
    in->arch = c->arch_name;
    in->n_layers = c->n_layers;
    in->hidden = c->hidden;
    in->n_heads = c->n_heads;
    in->n_kv_heads = c->n_kv_heads;
    in->head_dim = c->head_dim;
    in->vocab = c->vocab;
    in->n_ctx = m->n_ctx;
    in->weight_format = m->format;
    in->weight_bytes = m->target.weight_bytes;
    in->load_s = m->load_s;
    in->has_draft = m->has_draft;
    in->draft_layers = m->has_draft ? m->draft.cfg.n_layers : 0;
    in->block_size = m->has_draft ? m->draft.cfg.block_size : 0;
    in->backend = m->be->name;
    in->kernels = m->be->describe(m->bi);
    in->n_threads = m->be->n_threads ? m->be->n_threads(m->bi) : 1;
    in->draft_weight_format = m->draft_format;
    in->token_bytes = m->target.weight_bytes;
    for (int l = 0; l < c->n_layers; l++) { /* the CPU backend's caches (cpu_seq, cpu_draft) */
        int ring = c->n_sliding_layers && c->window + BE_DN_KEEP < m->n_ctx ? c->window + BE_DN_KEEP : 0;
        int rows = c->linear_layer[l] ? 0 : c->sliding_layer[l] && ring ? ring : m->n_ctx;
        in->seq_kv_bytes += 2 * sizeof(float) * (size_t)rows * cfg_kv_heads(c, l) * cfg_head_dim(c, l);
    }
    if (m->has_draft)
        in->seq_kv_bytes += 2 * sizeof(float) * (size_t)m->draft.cfg.n_layers * m->n_ctx * m->draft.cfg.n_kv_heads *
                            m->draft.cfg.head_dim;
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->target.layers[l];
        if (!c->moe_layer[l] || !L->experts) continue;
        size_t eb = 0;
        for (int e = 0; e < c->n_experts; e++)
            eb += wt_bytes(&L->experts[e].wg) + wt_bytes(&L->experts[e].wu) + wt_bytes(&L->experts[e].wd);
        /* the experts as the backend streams them (CUDA: MXFP4 at 4 bits) */
        size_t rb = m->be->expert_bytes ? m->be->expert_bytes(m->bi, &m->target, l) : 0;
        if (rb) in->token_bytes = in->token_bytes - eb + rb, eb = rb;
        in->token_bytes -= eb / (size_t)c->n_experts * (size_t)(c->n_experts - c->n_experts_used);
    }
    /* an input embedding that is not also the lm_head gives one row a token
     * (gpt-oss: 1.16 GB of gpt-oss-20b's 13 GB), Gemma-4's per-layer table too */
    const mdl_model *t = &m->target;
    if (t->embed.rows > 0 && t->embed.data != t->lm_head.data) {
        size_t eb = wt_bytes(&t->embed);
        in->token_bytes -= eb < in->token_bytes ? eb - eb / (size_t)t->embed.rows : 0;
    }
    if (t->ple_embed.rows > 0) {
        size_t pb = wt_bytes(&t->ple_embed);
        in->token_bytes -= pb < in->token_bytes ? pb - pb / (size_t)t->ple_embed.rows : 0;
    }
}

int dflash_tokenize(const dflash_model *m, const char *text, size_t len, int32_t **ids, size_t *n) {
    return tok_encode(m->tok, text, len, ids, n);
}

int dflash_tokenize_prompt(const dflash_model *m, const char *text, size_t len, int32_t **ids, size_t *n) {
    return tok_encode_prompt(m->tok, text, len, ids, n);
}

int dflash_token_piece(const dflash_model *m, int32_t id, char *buf, size_t size) {
    size_t len;
    const char *p = tok_piece(m->tok, id, &len);
    if (!p) {
        dfl_seterr("token id %d is outside the vocabulary (0..%d)", id, tok_n_vocab(m->tok) - 1);
        return -1;
    }
    if (buf && size) {
        memcpy(buf, p, len < size ? len : size);
        if (size > len) buf[len] = 0;
    }
    return (int)len;
}

char *dflash_detokenize(const dflash_model *m, const int32_t *ids, size_t n, size_t *len) {
    int nv = tok_n_vocab(m->tok);
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= nv) {
            dfl_seterr("token %zu has id %d, outside the vocabulary (0..%d)", i, ids[i], nv - 1);
            return NULL;
        }
    size_t piece = tok_max_piece(m->tok) + 8, cap = piece + 1, k = 0;
    char *s = dfl_malloc(cap);
    tok_decoder d = {{0}, 0};
    for (size_t i = 0; i <= n; i++) {
        if (k + piece + 1 > cap) s = dfl_realloc(s, cap = 2 * (k + piece + 1));
        k += i < n ? tok_decode(m->tok, &d, ids[i], s + k, piece) : tok_decode_flush(&d, s + k, piece);
    }
    s[k] = 0;
    if (len) *len = k;
    return s;
}

/* The model's chat format, -1 + error when it has no template we know. */
static int chat_format_of(const dflash_model *m) {
    const char *tmpl = tok_chat_template(m->tok);
    if (!tmpl) return dfl_seterr("the model has no chat_template in tokenizer_config.json"), -1;
    return chat_detect(tmpl);
}

static chat_think think_of(int think) { return think < 0 ? CHAT_THINK_UNSET : think ? CHAT_THINK_ON : CHAT_THINK_OFF; }

char *dflash_chat_prompt(const dflash_model *m, const dflash_message *msgs, int n, int add_generation_prompt,
                         int think) {
    int f = chat_format_of(m);
    if (f < 0) return NULL;
    chat_message *cm = dfl_calloc((size_t)(n ? n : 1), sizeof *cm);
    for (int i = 0; i < n; i++) {
        cm[i].role = msgs[i].role;
        cm[i].content = msgs[i].content ? msgs[i].content : "";
    }
    char *s = chat_render((chat_format)f, cm, n, add_generation_prompt, think_of(think));
    free(cm);
    return s;
}

const char *dflash_chat_template(const dflash_model *m) { return tok_chat_template(m->tok); }

char *dflash_chat_prompt_tools(const dflash_model *m, const dflash_chat_message *msgs, int n, const char *tools_json,
                               int add_generation_prompt, int think) {
    return dflash_chat_prompt_opts(m, msgs, n, tools_json, add_generation_prompt, think, NULL);
}

char *dflash_chat_prompt_opts(const dflash_model *m, const dflash_chat_message *msgs, int n, const char *tools_json,
                              int add_generation_prompt, int think, const dflash_chat_opts *opts) {
    int f = chat_format_of(m);
    if (f < 0) return NULL;
    chat_message *cm = dfl_calloc((size_t)(n ? n : 1), sizeof *cm);
    int n_calls = 0;
    for (int i = 0; i < n; i++) n_calls += msgs[i].n_tool_calls > 0 ? msgs[i].n_tool_calls : 0;
    chat_tool_call *calls = dfl_calloc((size_t)(n_calls ? n_calls : 1), sizeof *calls), *c = calls;
    for (int i = 0; i < n; i++) {
        cm[i] = (chat_message){.role = msgs[i].role,
                               .content = msgs[i].content ? msgs[i].content : "",
                               .reasoning_content = msgs[i].reasoning_content,
                               .tool_calls = c,
                               .n_tool_calls = msgs[i].n_tool_calls};
        for (int k = 0; k < msgs[i].n_tool_calls; k++)
            *c++ = (chat_tool_call){.name = msgs[i].tool_calls[k].name, .arguments = msgs[i].tool_calls[k].arguments};
    }
    chat_harmony_opts ho = {0};
    if (opts)
        ho = (chat_harmony_opts){
            .date = opts->date, .reasoning_effort = opts->reasoning_effort, .model_identity = opts->model_identity};
    char *s = chat_render_opts((chat_format)f, cm, n, tools_json, add_generation_prompt, think_of(think), &ho);
    free(calls);
    free(cm);
    return s;
}

char *dflash_chat_next_turn(const dflash_model *m, const char *user, int think) {
    int f = chat_format_of(m);
    return f < 0 ? NULL : chat_next_turn((chat_format)f, user ? user : "", think_of(think));
}

/* Forget m's cached rows (bat_lock held, no generation on m) and give
 * back its KV pages. */
static void cache_drop(dflash_model *m) {
    m->be->truncate(m->seq, 0);
    if (m->dseq) m->be->draft_ctx_truncate(m->dseq, 0);
    m->tree_n = 0;
    __atomic_store_n(&m->stable, 0, __ATOMIC_RELEASE);
    if (m->be->trim) m->be->trim(m->seq, 0);
}

/* The budget rule's R for a generation of n_prompt tokens and n_predict
 * more (<= 0: until the context is full). */
static int reserve_rows(const dflash_model *m, size_t n_prompt, int n_predict) {
    long most = (long)n_prompt + (n_predict > 0 ? n_predict : m->n_ctx) + SPEC_MAX_BLOCK;
    return most < m->n_ctx ? (int)most : m->n_ctx;
}

/* The pages still to come of every running generation but m's, and how
 * many run (bat_lock held). */
static size_t kv_outstanding(const dflash_model *m, int *running) {
    const dflash_model *o = m->owner ? m->owner : m;
    size_t out = 0;
    int n = 0;
    for (const dflash_model *s = o; s; s = s == o ? o->seqs : s->next_seq)
        if (s != m && s->busy) {
            out += m->be->kv_need(s->seq, s->reserve);
            n++;
        }
    if (running) *running = n;
    return out;
}

/* Does m's reservation of rows fit beside the others' (bat_lock held)? */
static int kv_fits(const dflash_model *m, int rows, size_t budget, int *running) {
    size_t out = kv_outstanding(m, running);
    return m->be->kv_usage(m->bi, NULL, NULL) + m->be->kv_need(m->seq, rows) + out <= budget;
}

/* The budget rule's admission of a generation on m reserving rows
 * (bat_lock held; it may wait, releasing the backend meanwhile): 0 with
 * m busy, or -1 with the error set when the reservation can never fit or
 * *cancel (if given) became nonzero while it waited. */
static int kv_admit(dflash_model *m, int rows, const int *cancel) {
    size_t budget = 0;
    if (m->be->trim && m->be->kv_need) m->be->kv_usage(m->bi, &budget, NULL);
    if (!budget) {
        m->busy = 1;
        return 0;
    }
    dflash_model *o = m->owner ? m->owner : m;
    dflash_model **tail = &o->adm_line;
    while (*tail) tail = &(*tail)->adm_next;
    *tail = m; /* at the end of the line */
    m->adm_next = NULL;
    int waited = 0, rc = 0, running = 0;
    for (;;) {
        if (cancel && __atomic_load_n(cancel, __ATOMIC_ACQUIRE)) {
            dfl_seterr("cancelled while waiting for its KV cache reservation (%d positions)", rows);
            rc = -1;
            break;
        }
        if (o->adm_line == m) {
            m->be->trim(m->seq, rows); /* pages it will not use, from a longer request before */
            int fits = kv_fits(m, rows, budget, &running);
            if (!fits)
                for (dflash_model *s = o; s; s = s == o ? o->seqs : s->next_seq)
                    if (s != m && !s->busy) m->be->trim(s->seq, 0);
            while (!fits && !(fits = kv_fits(m, rows, budget, &running))) {
                dflash_model *lru = NULL;
                for (dflash_model *s = o; s; s = s == o ? o->seqs : s->next_seq)
                    if (s != m && !s->busy && m->be->length(s->seq) > 0 && (!lru || s->last_use < lru->last_use))
                        lru = s;
                if (!lru) break;
                cache_drop(lru);
                o->kv_evictions++;
            }
            if (fits) break;
            if (!running) { /* alone and still too big: it never fits */
                size_t need = m->be->kv_bytes ? m->be->kv_bytes(m->seq, rows) : 0;
                dfl_seterr("KV cache budget: this generation reserves %d positions (its prompt, the tokens it "
                           "may generate and a verify block of %d) = %.2f MiB of KV cache, more than the budget "
                           "of %.2f MiB for all sequences (kv_budget_mib, dflash serve --kv-budget): ask for "
                           "fewer tokens (n_predict, max_tokens) or raise the budget",
                           rows, SPEC_MAX_BLOCK, need / 1048576.0, budget / 1048576.0);
                rc = -1;
                break;
            }
        }
        if (!waited) {
            waited = 1;
            o->kv_waiting++;
            o->kv_waits++;
        }
        bat_sleep(m->bat, cancel ? 20 : 0); /* until a generation ends or the line moves (or a look at *cancel) */
    }
    if (waited) o->kv_waiting--;
    for (dflash_model **p = &o->adm_line; *p; p = &(*p)->adm_next)
        if (*p == m) { /* out of the line */
            *p = m->adm_next;
            break;
        }
    if (rc == 0) {
        m->busy = 1;
        m->reserve = rows;
    }
    bat_notify(m->bat); /* the next in line */
    return rc;
}

size_t dflash_kv_reserve(const dflash_model *m, size_t n_prompt, int n_predict) {
    if (!m || !m->seq || !m->be->kv_bytes || n_prompt >= (size_t)m->n_ctx) return 0;
    return m->be->kv_bytes(m->seq, reserve_rows(m, n_prompt, n_predict));
}

void dflash_reset(dflash_model *m) {
    if (!m->seq) return;
    bat_lock(m->bat);
    cache_drop(m);
    bat_unlock(m->bat);
}

void dflash_kv_stats(const dflash_model *m, dflash_kv_info *out) {
    memset(out, 0, sizeof *out);
    if (!m || !m->bi) return;
    if (m->owner) m = m->owner;
    out->paged = m->be->trim != NULL;
    if (m->be->kv_usage) out->used = m->be->kv_usage(m->bi, &out->budget, &out->peak);
    bat_lock(m->bat);
    out->evictions = m->kv_evictions;
    out->waiting = m->kv_waiting;
    out->waits = m->kv_waits;
    bat_unlock(m->bat);
}

/* Rows cache_tok describes (bat_lock held): a tree verify an error left
 * uncommitted is not among them. */
static int cached_len(const dflash_model *m) { return m->tree_n ? m->verify_len : m->be->length(m->seq); }

/* The common prefix of the stable rows (the stable rule) and ids[0..n). */
static size_t stable_prefix(const dflash_model *m, const int32_t *ids, size_t n) {
    size_t st = (size_t)__atomic_load_n(&m->stable, __ATOMIC_ACQUIRE), p = 0;
    while (p < st && p < n && m->cache_tok[p] == ids[p]) p++;
    return p;
}

size_t dflash_cached_prefix(const dflash_model *m, const int32_t *ids, size_t n) {
    return m && m->cache_tok && ids ? stable_prefix(m, ids, n) : 0;
}

size_t dflash_seq_cached_prefix(const dflash_seq *s, const int32_t *ids, size_t n) {
    return s ? dflash_cached_prefix(s->m, ids, n) : 0;
}

int dflash_copy_prefix(dflash_model *m, dflash_seq *dst, dflash_seq *const *src, int n_src, const int32_t *ids,
                       size_t n, int *from) {
    if (from) *from = -1;
    if (!m || m->owner || !m->has_target || n_src < 0 || (n_src && !src) || (n && !ids)) {
        dfl_seterr("dflash_copy_prefix: %s", !m || !m->has_target ? "no model loaded" : m->owner ? "not a model"
                                                                                              : "bad arguments");
        return -1;
    }
    dflash_model *d = dst ? dst->m : m;
    if (d->owner != (dst ? m : NULL)) {
        dfl_seterr("dflash_copy_prefix: the destination is a sequence of another model");
        return -1;
    }
    for (int i = 0; i < n_src; i++)
        if ((src[i] ? src[i]->m : m) == d || (src[i] && src[i]->m->owner != m)) {
            dfl_seterr("dflash_copy_prefix: source %d is %s", i,
                       (src[i] ? src[i]->m : m) == d ? "the destination" : "a sequence of another model");
            return -1;
        }
    if (n < 2) return 0; /* the last prompt row always runs: nothing to copy before it */
    bat_lock(m->bat);    /* no step runs: every source's rows and stable count hold still */
    size_t own = stable_prefix(d, ids, n - 1), best = own;
    int bi = -1;
    for (int i = 0; i < n_src; i++) {
        size_t p = stable_prefix(src[i] ? src[i]->m : m, ids, n - 1);
        if (p > best) best = p, bi = i;
    }
    /* the budget rule: the copy's pages may not eat the running generations' reservations */
    size_t budget = 0;
    if (bi >= 0 && m->be->kv_need) m->be->kv_usage(m->bi, &budget, NULL);
    if (budget && !kv_fits(d, (int)best, budget, NULL))
        bi = -1; /* not copied: the prompt is prefilled (after admission) as without a source */
    int rc = 0;
    if (bi >= 0) {
        dflash_model *s = src[bi] ? src[bi]->m : m;
        if (!m->be->copy_prefix) {
            dfl_seterr("copy_prefix: not supported by the %s backend", m->be->name);
            rc = -1;
        } else {
            rc = m->be->copy_prefix(d->seq, s->seq, (int)best);
        }
        if (rc == 0) {
            memcpy(d->cache_tok, s->cache_tok, sizeof(int32_t) * best);
            d->tree_n = 0;
            /* the draft context: the source's rows where it has more of the
             * prefix, else the destination's own ones that still match */
            int dl = d->dseq ? m->be->draft_ctx_length(d->dseq) : 0, keep = dl < (int)own ? dl : (int)own;
            int sl = d->dseq && s->dseq ? m->be->draft_ctx_length(s->dseq) : 0, take = sl < (int)best ? sl : (int)best;
            if (d->dseq && !(take > keep && m->be->draft_ctx_copy &&
                             m->be->draft_ctx_copy(d->dseq, s->dseq, take) == 0))
                m->be->draft_ctx_truncate(d->dseq, keep);
            d->stable = (int)best;
            if (from) *from = bi;
        }
    }
    bat_unlock(m->bat);
    return rc != 0 ? -1 : bi >= 0 ? (int)best : 0;
}

/* ---- spec_iface callbacks ------------------------------------------------ */

/* Target forward of the verify rows tok[0..T) (parent: a tree batch, the
 * tree rule of backend.h; NULL: a chain), taps kept for the draft. */
static int verify_rows(dflash_model *m, const int32_t *tok, const int *parent, int T) {
    int len = m->be->length(m->seq);
    be_batch b = {.T = T, .tokens = tok, .keep_rows = 1, .tree_parent = parent};
    if (m->drafting) { /* taps stay in the sequence state for cb_accept's draft_feed */
        b.n_taps = m->draft.cfg.n_taps;
        b.tap_layers = m->draft.cfg.tap_layers;
    }
    if (bat_forward(m->bat, m->seq, &b) != 0) return -1;
    memcpy(m->cache_tok + len, tok, sizeof(int32_t) * (size_t)T); /* a tree: batch order until the commit */
    m->block_len = T;
    m->verify_len = len;
    m->tree_n = parent ? T : 0;
    for (int i = 0; parent && i < T; i++) {
        m->tree_tok[i] = tok[i];
        m->tree_depth[i] = parent[i] < 0 ? 0 : m->tree_depth[parent[i]] + 1;
    }
    return 0;
}

static int cb_verify(void *ud, const int32_t *tok, int T) { return verify_rows(ud, tok, NULL, T); }

static int cb_verify_tree(void *ud, const int32_t *tok, const int *parent, int T) {
    return verify_rows(ud, tok, parent, T);
}

static int is_stop_tok(const dflash_model *m, int32_t t) {
    for (int i = 0; i < m->n_stop; i++)
        if (m->stop[i] == t) return 1;
    return 0;
}

/* Does the grammar in state s allow token t next? first: the bytes s
 * allows first (gr_next_bytes); eos_ok: stop tokens allowed. -1 + error on
 * a matcher bound. */
static int gr_allows(dflash_model *m, const gr_state *s, int32_t t, int eos_ok, const uint8_t *first) {
    if (is_stop_tok(m, t)) return eos_ok;
    if (m->tok_first[t] < 0 || !first[m->tok_first[t]]) return 0;
    size_t n;
    const char *p = tok_piece(m->tok, t, &n);
    gr_state_copy(m->gr_try, s);
    return gr_feed(m->gr_try, p, n);
}

/* row[t] = -inf for every token s does not allow; the number allowed, -1 on error. */
static int gr_mask(dflash_model *m, float *row, const gr_state *s, int eos_ok, const uint8_t *first) {
    int V = m->target.cfg.vocab, n = 0;
    for (int t = 0; t < V; t++) {
        int a = gr_allows(m, s, t, eos_ok, first);
        if (a < 0) return -1;
        if (!a) row[t] = -INFINITY;
        n += a;
    }
    return n;
}

/* The random number of a sampling position's second draw (after the first
 * drew a token the grammar refuses) comes from this seed. */
#define GR_RESAMPLE_SEED 0x6a09e667f3bcc909ull

/* The constrained choice for position pos in grammar state s (row after the
 * transforms; changed in place): see dflash_gen.grammar. */
static int32_t pick_grammar(dflash_model *m, float *row, int64_t pos, const gr_state *s) {
    int V = m->target.cfg.vocab;
    uint8_t first[256];
    if (gr_next_bytes(s, m->gr_try, first) != 0) return -1;
    int eos_ok = gr_can_end(s) && (!m->gr_eos_when_done || gr_is_done(s));
    int32_t t;
    if (m->sp.temp > 0) {
        t = smp_pick(&m->sp, row, V, pos, m->smp_work);
        if (t < 0) return -1;
        int a = gr_allows(m, s, t, eos_ok, first);
        if (a < 0) return -1;
        if (a) return t;
        int n = gr_mask(m, row, s, eos_ok, first);
        if (n < 0) return -1;
        smp_params p2 = m->sp;
        p2.seed = m->sp.seed ^ GR_RESAMPLE_SEED;
        t = n ? smp_pick(&p2, row, V, pos, m->smp_work) : -1;
    } else { /* candidates in descending logit order (ties: lower id), the first allowed */
        for (int i = 0; i < V; i++)
            if (is_stop_tok(m, i) ? !eos_ok : m->tok_first[i] < 0 || !first[m->tok_first[i]]) row[i] = -INFINITY;
        for (;;) {
            t = smp_argmax(row, V);
            if (!(row[t] > -INFINITY)) {
                t = -1;
                break;
            }
            int a = gr_allows(m, s, t, eos_ok, first);
            if (a < 0) return -1;
            if (a) break;
            row[t] = -INFINITY;
        }
    }
    if (t < 0)
        dfl_seterr("grammar: at position %lld no token of the vocabulary can continue the grammar (or every "
                   "allowed one has logit -inf)", (long long)pos);
    return t;
}

/* The target's token for absolute position pos from its logits row (changed
 * in place): logit_bias and penalties with the history cache_tok[0..pos) -
 * the prompt, the committed tokens and, inside a verify, the drafts before
 * this row, i.e. what plain decoding has there - then the sampler (argmax at
 * temp 0), constrained by the grammar in state gs when not NULL; the
 * log-probabilities (of the masked row with a grammar) into *lp when asked for. */
static int32_t pick_row(dflash_model *m, float *row, int64_t pos, dflash_logprob *lp, const gr_state *gs) {
    int V = m->target.cfg.vocab;
    smp_transform_apply(&m->tf, row, V, m->cache_tok, pos, m->pen_count);
    int32_t t = gs ? pick_grammar(m, row, pos, gs) : smp_pick(&m->sp, row, V, pos, m->smp_work);
    if (t >= 0 && gs && m->on_lp) {
        uint8_t first[256];
        if (gr_next_bytes(gs, m->gr_try, first) != 0 ||
            gr_mask(m, row, gs, gr_can_end(gs) && (!m->gr_eos_when_done || gr_is_done(gs)), first) < 0)
            return -1;
    }
    if (t >= 0 && m->on_lp) {
        int32_t ids[DFLASH_MAX_TOP_LOGPROBS];
        float lps[DFLASH_MAX_TOP_LOGPROBS];
        int n_top = m->top_lp < V ? m->top_lp : V;
        smp_logprobs(row, V, t, &lp->logprob, n_top, ids, lps);
        lp->id = t;
        lp->n_top = n_top;
        for (int k = 0; k < n_top; k++) lp->top[k] = (dflash_token_logprob){.id = ids[k], .logprob = lps[k]};
    }
    return t;
}

static int cb_predict(void *ud, int i, int n, int32_t *pred) {
    dflash_model *m = ud;
    int V = m->target.cfg.vocab;
    if (!m->host_logits) return bat_argmax(m->bat, m->seq, i, n, pred); /* plain greedy: no logits written */
    int rc = bat_logits(m->bat, m->seq, i, n, m->logits); /* the lm_head pass shared with the batch's */
    if (rc != 0) return rc;
    for (int j = 0; j < n; j++) {
        int r = i + j;
        if (m->gr) { /* the grammar state of row r (the rule at the top) */
            if (r == 0) {
                gr_state_copy(m->gr_row, m->gr_emitted);
                m->gr_row_live = 1;
            } else if (m->gr_row_live) {
                int32_t d = m->cache_tok[m->verify_len + r];
                if (d != m->gr_prev_pick || is_stop_tok(m, d)) {
                    m->gr_row_live = 0; /* rejected (or a stop): spec_run uses no later row */
                } else {
                    size_t len;
                    const char *p = tok_piece(m->tok, d, &len);
                    int fed = gr_feed(m->gr_row, p, len);
                    if (fed < 0) return -1;
                    if (fed == 0) {
                        dfl_seterr("grammar: internal error: token %d picked under the grammar does not advance it", d);
                        return -1;
                    }
                }
            }
            if (!m->gr_row_live) {
                pred[j] = 0; /* never used: the row after a rejected draft */
                continue;
            }
        }
        int depth = m->tree_n ? m->tree_depth[r] : r; /* the row's position: the prefix it ends */
        pred[j] = pick_row(m, m->logits + (size_t)j * V, (int64_t)m->verify_len + depth + 1, &m->lp[r],
                           m->gr ? m->gr_row : NULL);
        m->gr_prev_pick = pred[j];
    }
    return 0;
}

/* The first `keep` verify rows are committed: the target forgets the rest,
 * the draft's context gets their taps (the backend may keep them pending
 * until the next draft block). */
static int cb_accept(void *ud, int keep) {
    dflash_model *m = ud;
    int len = m->be->length(m->seq) - m->block_len + keep;
    bat_lock(m->bat);
    int rc = m->be->truncate(m->seq, len) == len ? 0 : -1; /* a verify always rolls back within its own rows */
    if (rc != 0) dfl_seterr("rollback to %d rows failed", len);
    m->lp_row = 0; /* spec_run emits rows 0..keep-1 next */
    if (rc == 0 && m->drafting) rc = m->be->draft_feed(m->dseq, m->seq, 0, keep);
    bat_unlock(m->bat);
    return rc;
}

/* The tree's path rows[0..n) is committed (backend.h's tree rule): its
 * tokens into cache_tok, its taps to the draft. */
static int cb_accept_path(void *ud, const int *rows, int n) {
    dflash_model *m = ud;
    bat_lock(m->bat);
    int rc = m->be->tree_commit(m->seq, rows, n);
    if (rc == 0 && m->drafting) rc = m->be->draft_feed(m->dseq, m->seq, 0, n);
    bat_unlock(m->bat);
    if (rc != 0) return -1;
    for (int i = 0; i < n; i++) m->cache_tok[m->verify_len + i] = m->tree_tok[rows[i]];
    m->tree_n = 0; /* the cache holds a chain again */
    m->lp_row = 0;
    return 0;
}

/* spec_batch_cost: the scheduler's cost model of a round of the batch. */
static int cb_round_costs(void *ud, const double *reach, const spec_round *r, int n, double *cost,
                          double *others_tokens) {
    dflash_model *m = ud;
    return bat_round_costs(m->bat, &m->member, reach, r, n, cost, others_tokens);
}

static void cb_plan(void *ud, const double *reach, const spec_round *r) {
    dflash_model *m = ud;
    bat_plan(m->bat, &m->member, reach, r);
}

/* A candidate of the best-first tree: rank `rank` of slot `depth` below
 * node `parent`, its path log-probability `score`. */
typedef struct {
    int parent, depth, rank;
    float score;
} tree_cand;

/* DDTree's construction from one draft block: each slot's top K candidates
 * with their log-probabilities; a node's score is the sum along its path
 * (the slots taken as independent). Best-first: the best open candidate
 * becomes a node, then its next sibling (rank + 1) and its first child
 * (the next slot's best) open, until the budget is spent; this keeps the
 * budget - 1 most probable paths. Nodes are then numbered depth-first, the
 * better child first, so the draft's own chain is rows 0, 1, 2, ... and a
 * path that follows it predicts contiguous rows. */
static int cb_draft_tree(void *ud, int32_t anchor, int budget, int max_depth, int32_t *tok, int *parent) {
    dflash_model *m = ud;
    const cfg_model *c = &m->target.cfg;
    int32_t blk[SPEC_MAX_BLOCK];
    int B = m->draft.cfg.block_size > max_depth + 1 ? m->draft.cfg.block_size : max_depth + 1;
    if (B > SPEC_MAX_BLOCK) B = SPEC_MAX_BLOCK;
    if (max_depth > B - 1) max_depth = B - 1;
    blk[0] = anchor;
    for (int i = 1; i < B; i++) blk[i] = m->draft.cfg.mask_token_id;
    int K = budget - 1 < TREE_TOPK ? budget - 1 : TREE_TOPK;
    be_draft_block b = {.B = B, .tokens = blk, .n_slots = max_depth, .n_vocab = m->draft_nv ? m->draft_nv : c->vocab,
                        .ids = m->draft_ids_on ? m->draft_ids : NULL, .extra = m->draft_extra,
                        .n_extra = m->draft_nx, .top_k = K, .top_ids = m->top_ids,
                        .top_logp = m->top_logp};
    if (bat_draft(m->bat, m->dseq, &b) != 0) return -1;
    /* best-first, nodes in the order they are taken (node 0: the anchor) */
    int n = 1, np = 0, bf_parent[SPEC_MAX_BLOCK], bf_rank[SPEC_MAX_BLOCK], bf_depth[SPEC_MAX_BLOCK];
    tree_cand open[2 * SPEC_MAX_BLOCK];
    bf_parent[0] = -1, bf_depth[0] = 0, bf_rank[0] = 0;
    open[np++] = (tree_cand){.parent = 0, .depth = 1, .rank = 0, .score = m->top_logp[0]};
    while (n < budget && np > 0) {
        int best = 0;
        for (int i = 1; i < np; i++)
            if (open[i].score > open[best].score) best = i;
        tree_cand x = open[best];
        open[best] = open[--np];
        bf_parent[n] = x.parent, bf_depth[n] = x.depth, bf_rank[n] = x.rank;
        const float *lp = m->top_logp + (size_t)(x.depth - 1) * K;
        if (x.rank + 1 < K)
            open[np++] = (tree_cand){.parent = x.parent, .depth = x.depth, .rank = x.rank + 1,
                                     .score = x.score - lp[x.rank] + lp[x.rank + 1]};
        if (x.depth < max_depth)
            open[np++] = (tree_cand){.parent = n, .depth = x.depth + 1, .rank = 0,
                                     .score = x.score + m->top_logp[(size_t)x.depth * K]};
        n++;
    }
    /* depth-first renumbering, children by rank (a child's rank orders its
     * score among its siblings) */
    int stack[SPEC_MAX_BLOCK], sp = 0, out_of[SPEC_MAX_BLOCK], k = 0;
    stack[sp++] = 0;
    while (sp > 0) {
        int v = stack[--sp];
        out_of[v] = k;
        tok[k] = v ? m->top_ids[(size_t)(bf_depth[v] - 1) * K + bf_rank[v]] : anchor;
        parent[k] = v ? out_of[bf_parent[v]] : -1;
        k++;
        for (int r = K - 1; r >= 0; r--) /* pushed worst first: the best child pops next */
            for (int u = v + 1; u < n; u++)
                if (bf_parent[u] == v && bf_rank[u] == r) stack[sp++] = u;
    }
    return n;
}

static int cb_draft(void *ud, int32_t anchor, int k, int32_t *out) {
    dflash_model *m = ud;
    const cfg_model *c = &m->target.cfg;
    int32_t tok[SPEC_MAX_BLOCK];
    /* the block runs at the length the draft was trained on (a shorter block
     * of masks changes what the draft predicts, measured: far worse); only
     * the k slots to verify are projected */
    int B = m->draft.cfg.block_size > k + 1 ? m->draft.cfg.block_size : k + 1;
    if (B > SPEC_MAX_BLOCK) B = SPEC_MAX_BLOCK;
    tok[0] = anchor;
    for (int i = 1; i < B; i++) tok[i] = m->draft.cfg.mask_token_id;
    int nv = m->draft_nv ? m->draft_nv : c->vocab;
    /* the backend proposes: first maximum over ids 0..nv-1, then the extra ids */
    be_draft_block b = {.B = B, .tokens = tok, .n_slots = k, .n_vocab = nv,
                        .ids = m->draft_ids_on ? m->draft_ids : NULL, .extra = m->draft_extra,
                        .n_extra = m->draft_nx, .out = out};
    return bat_draft(m->bat, m->dseq, &b);
}

/* The drafts the grammar allows in a row after the emitted tokens (the
 * anchor included); a refused one and everything after it can never be
 * accepted (spec_iface.trim). A stop token is kept where the grammar can
 * end, and nothing after it. A matcher bound on a draft's state cuts there
 * (plain decoding may never reach that state: no error). */
static int cb_trim(void *ud, const int32_t *d, int k) {
    dflash_model *m = ud;
    if (!m->gr) return k;
    gr_state_copy(m->gr_row, m->gr_emitted);
    for (int j = 0; j < k; j++) {
        if (is_stop_tok(m, d[j]))
            return gr_can_end(m->gr_row) && (!m->gr_eos_when_done || gr_is_done(m->gr_row)) ? j + 1 : j;
        size_t len;
        const char *p = tok_piece(m->tok, d[j], &len);
        if (!p || !len || gr_feed(m->gr_row, p, len) != 1) return j;
    }
    return k;
}

/* ---- generation ---------------------------------------------------------- */

typedef struct {
    dflash_model *m;
    dflash_on_token cb;
    void *ud;
    tok_decoder dec;
    char *piece;
    int32_t *out;
    size_t n_out, cap_out;
    int stopped;
    const int *cancel; /* dflash_gen.cancel */
} emit_ctx;

static int on_emit(void *ud, int32_t id) {
    emit_ctx *e = ud;
    if (e->n_out == e->cap_out) {
        e->cap_out = e->cap_out ? 2 * e->cap_out : 256;
        e->out = dfl_realloc(e->out, sizeof(int32_t) * e->cap_out);
    }
    e->out[e->n_out++] = id;
    dflash_model *m = e->m;
    if (m->gr) { /* the emitted tokens, and only they, advance gr_emitted */
        size_t len;
        const char *p = tok_piece(m->tok, id, &len);
        int rc = p ? gr_feed(m->gr_emitted, p, len) : 0;
        if (rc != 1) {
            if (rc == 0) dfl_seterr("grammar: internal error: emitted token %d does not advance the grammar", id);
            m->gr_failed = 1;
            return 1;
        }
    }
    if (m->on_lp && m->on_lp(e->ud, &m->lp[m->lp_row++])) return 1;
    int stop = 0;
    if (e->cb) {
        size_t n = e->m->tok ? tok_decode(e->m->tok, &e->dec, id, e->piece, tok_max_piece(e->m->tok)) : 0;
        stop = e->cb(e->ud, id, e->piece, n);
    }
    return stop || (e->cancel && __atomic_load_n(e->cancel, __ATOMIC_ACQUIRE));
}

/* The draft's vocabulary for a call (dflash_gen.draft_vocab and
 * draft_vocab_rank): m->draft_nv ids, ids < draft_nv or, by rank,
 * m->draft_ids (draft_ids_on). A rank file is read once per path and
 * checked even when the call does not draft; drafting: the call drafts (a
 * backend without the gather refuses a ranking only then). */
static int set_draft_vocab(dflash_model *m, const dflash_gen *g, int drafting) {
    const cfg_model *c = &m->target.cfg;
    m->draft_ids_on = 0;
    if (g->draft_vocab < -1) {
        dfl_seterr("draft vocabulary %d: want N > 0 ids, 0 (auto) or -1 (the whole vocabulary)", g->draft_vocab);
        return -1;
    }
    if (!g->draft_vocab_rank) {
        m->draft_nv = g->draft_vocab > 0 ? g->draft_vocab : g->draft_vocab < 0 || c->vocab <= 65536 ? c->vocab : 32768;
        if (m->draft_nv > c->vocab) m->draft_nv = c->vocab;
        return 0;
    }
    if (g->draft_vocab < 0) {
        dfl_seterr("draft vocabulary: a rank file (%s) with the whole vocabulary ranks nothing; give N or drop the file",
                   g->draft_vocab_rank);
        return -1;
    }
    if (g->draft_vocab > c->vocab) {
        dfl_seterr("draft vocabulary %d by rank: the model has only %d token ids", g->draft_vocab, c->vocab);
        return -1;
    }
    if (drafting && !m->be->draft_ids) {
        dfl_seterr("draft vocabulary by rank (%s): backend %s scores ids by number only (--draft-vocab N or full)",
                   g->draft_vocab_rank, m->be->name);
        return -1;
    }
    if (!m->rank_path || strcmp(m->rank_path, g->draft_vocab_rank) != 0) {
        voc_rank r;
        if (voc_rank_read(g->draft_vocab_rank, c->vocab, &r) != 0) return -1;
        voc_rank_free(&m->rank);
        m->rank = r;
        free(m->rank_path);
        m->rank_path = dfl_strdup(g->draft_vocab_rank);
        m->draft_ids_n = 0; /* select again */
    }
    int n = g->draft_vocab > 0 ? g->draft_vocab : m->rank.n;
    if (n > m->draft_ids_cap) {
        free(m->draft_ids);
        m->draft_ids = dfl_malloc(sizeof(int32_t) * (size_t)n);
        m->draft_ids_cap = n;
        m->draft_ids_n = 0;
    }
    if (n != m->draft_ids_n) voc_select(&m->rank, n, m->draft_ids);
    m->draft_ids_n = n;
    m->draft_nv = n;
    m->draft_ids_on = 1;
    return 0;
}

/* 1 if the draft scores id in this call's vocabulary. */
static int draft_scores(const dflash_model *m, int32_t id) {
    if (!m->draft_ids_on) return id < m->draft_nv;
    int lo = 0, hi = m->draft_nv;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (m->draft_ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < m->draft_nv && m->draft_ids[lo] == id;
}

static int generate(dflash_model *m, const int32_t *prompt, size_t n_prompt, const dflash_gen *g,
                    dflash_on_token cb, void *ud, int32_t **out, size_t *n_out, dflash_stats *st) {
    dflash_gen defg = dflash_default_gen();
    if (!g) g = &defg;
    dflash_stats dummy;
    if (!st) st = &dummy;
    memset(st, 0, sizeof *st);
    st->stop_reason = "error"; /* until the generation ends */
    if (!m->has_target) {
        dfl_seterr("no model loaded (tokenizer only)");
        return -1;
    }
    const cfg_model *c = &m->target.cfg;
    if (n_prompt == 0) {
        dfl_seterr("empty prompt");
        return -1;
    }
    if (n_prompt >= (size_t)m->n_ctx) {
        dfl_seterr("prompt of %zu tokens does not fit the context of %d positions (use --ctx-size)", n_prompt,
                   m->n_ctx);
        return -1;
    }
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab) {
            dfl_seterr("prompt token %zu has id %d, outside the model's vocabulary (vocab_size %d)", i, prompt[i],
                       c->vocab);
            return -1;
        }
    if (g->temp < 0 || g->top_p <= 0 || g->top_k < 0 || g->n_predict < 0) {
        dfl_seterr("bad sampling settings (temp %g, top_k %d, top_p %g, n_predict %d)", g->temp, g->top_k,
                   g->top_p, g->n_predict);
        return -1;
    }
    if (!(g->min_p >= 0 && g->min_p <= 1)) {
        dfl_seterr("min_p %g: must be in 0..1", g->min_p);
        return -1;
    }
    if (!(g->repeat_penalty > 0 && isfinite(g->repeat_penalty))) {
        dfl_seterr("repeat_penalty %g: must be a number > 0 (1 = off)", g->repeat_penalty);
        return -1;
    }
    if (g->repeat_last_n < -1) {
        dfl_seterr("repeat_last_n %d: must be -1 (the whole history), 0 (off) or a window length", g->repeat_last_n);
        return -1;
    }
    if (!isfinite(g->frequency_penalty) || !isfinite(g->presence_penalty)) {
        dfl_seterr("frequency_penalty %g / presence_penalty %g: must be finite numbers", g->frequency_penalty,
                   g->presence_penalty);
        return -1;
    }
    if (g->n_logit_bias < 0 || (g->n_logit_bias > 0 && !g->logit_bias)) {
        dfl_seterr("logit_bias: %d entries%s", g->n_logit_bias, g->n_logit_bias > 0 ? " but no array" : "");
        return -1;
    }
    for (int i = 0; i < g->n_logit_bias; i++) {
        const dflash_logit_bias *b = &g->logit_bias[i];
        if (b->id < 0 || b->id >= c->vocab) {
            dfl_seterr("logit_bias[%d]: token id %d is outside the vocabulary (0..%d)", i, b->id, c->vocab - 1);
            return -1;
        }
        if (!(b->bias >= -100 && b->bias <= 100)) {
            dfl_seterr("logit_bias[%d]: bias %g for token %d is outside -100..100", i, b->bias, b->id);
            return -1;
        }
    }
    if (g->top_logprobs < 0 || g->top_logprobs > DFLASH_MAX_TOP_LOGPROBS) {
        dfl_seterr("top_logprobs %d: must be in 0..%d", g->top_logprobs, DFLASH_MAX_TOP_LOGPROBS);
        return -1;
    }
    int block = 1;
    m->drafting = m->has_draft && g->use_draft;
    if (m->drafting) {
        block = g->block_size ? g->block_size : m->draft.cfg.block_size;
        if (block < 1 || block > m->draft.cfg.block_size) {
            dfl_seterr("block size %d out of range 1..%d (the draft's block_size)", block, m->draft.cfg.block_size);
            return -1;
        }
    }
    m->sp = (smp_params){.temp = g->temp, .top_k = g->top_k, .top_p = g->top_p, .seed = g->seed, .min_p = g->min_p};
    free(m->bias);
    m->bias = dfl_malloc(sizeof(smp_bias) * (size_t)(g->n_logit_bias ? g->n_logit_bias : 1));
    for (int i = 0; i < g->n_logit_bias; i++)
        m->bias[i] = (smp_bias){.id = g->logit_bias[i].id, .bias = g->logit_bias[i].bias};
    m->tf = (smp_transform){.bias = m->bias, .n_bias = g->n_logit_bias, .repeat = g->repeat_penalty,
                            .frequency = g->frequency_penalty, .presence = g->presence_penalty,
                            .last_n = g->repeat_last_n};
    m->on_lp = g->on_logprob;
    m->top_lp = g->top_logprobs;
    m->lp_row = 0;
    gr_state_free(m->gr_emitted);
    gr_state_free(m->gr_row);
    gr_state_free(m->gr_try);
    gr_free(m->gr);
    m->gr = NULL;
    m->gr_emitted = m->gr_row = m->gr_try = NULL;
    m->gr_failed = 0;
    if (g->grammar) {
        if (!m->tok) {
            dfl_seterr("grammar: the model has no tokenizer");
            return -1;
        }
        if (!(m->gr = gr_parse(g->grammar, strlen(g->grammar)))) return -1;
        m->gr_emitted = gr_state_new(m->gr);
        m->gr_row = gr_state_new(m->gr);
        m->gr_try = gr_state_new(m->gr);
        if (!m->gr_emitted || !m->gr_row || !m->gr_try) return -1;
        if (!m->tok_first) { /* once per model: the first byte of each piece */
            m->tok_first = dfl_malloc(sizeof(int16_t) * (size_t)c->vocab);
            for (int t = 0; t < c->vocab; t++) {
                size_t len;
                const char *pc = tok_piece(m->tok, t, &len);
                m->tok_first[t] = (int16_t)(pc && len ? (uint8_t)pc[0] : -1);
            }
        }
        m->gr_eos_when_done = g->ignore_eos;
    }
    m->host_logits = m->sp.temp > 0 || smp_transform_active(&m->tf) || m->on_lp || m->gr;
    if (g->tree < -1 || g->tree == 1 || g->tree > SPEC_MAX_BLOCK) {
        dfl_seterr("tree %d: want 0 (the chain), -1 (auto) or 2..%d verify rows", g->tree, SPEC_MAX_BLOCK);
        return -1;
    }
    int tree = m->drafting ? g->tree : 0;
    if (tree) { /* the tree rule (backend.h) and what tree rounds do not track yet */
        const char *why = !m->be->tree_commit ? "the backend has no tree verification"
                          : c->n_linear_layers ? "the target has recurrent (Gated DeltaNet) layers"
                          : c->n_sliding_layers ? "the target has sliding-window layers"
                          : m->gr ? "a grammar follows the emitted path only"
                          : smp_transform_active(&m->tf) ? "logit bias and penalties read a linear history"
                          : m->on_lp ? "logprobs are kept per verify row"
                                     : NULL;
        if (why && tree < 0) tree = 0; /* auto: the chain, which always works */
        if (why && tree > 0) {
            dfl_seterr("tree %d: not available here (%s on backend %s); use the chain (tree 0)", g->tree, why,
                       m->be->name);
            return -1;
        }
    }
    if (set_draft_vocab(m, g, m->drafting) != 0) return -1;
    m->n_stop = 0;
    if (!g->ignore_eos || m->gr) { /* a grammar ends with a stop token (ignore_eos: only where it must) */
        for (int i = 0; i < c->n_eos; i++) m->stop[m->n_stop++] = c->eos_ids[i];
        int e = m->tok ? tok_eos_id(m->tok) : -1;
        int dup = 0;
        for (int i = 0; i < m->n_stop; i++) dup |= m->stop[i] == e;
        if (e >= 0 && !dup) m->stop[m->n_stop++] = e;
        /* the chat format's own ends of a reply (harmony: <|return|> and <|call|>,
         * which no config lists in full) */
        const char *const *names = m->tok ? chat_stop_tokens(tok_chat_template(m->tok)) : NULL;
        for (int k = 0; names && names[k] && k < CHAT_MAX_STOP; k++) {
            int id = tok_lookup(m->tok, names[k]);
            dup = id < 0;
            for (int i = 0; i < m->n_stop; i++) dup |= m->stop[i] == id;
            if (!dup) m->stop[m->n_stop++] = id;
        }
    }

    m->draft_nx = 0;
    for (int i = 0; i < m->n_stop; i++)
        if (m->stop[i] < c->vocab && !draft_scores(m, m->stop[i])) m->draft_extra[m->draft_nx++] = m->stop[i];

    /* admission (the budget rule: it may wait for running generations),
     * then a tree verify left uncommitted (an error ended the call inside
     * its round): its rows are not cache_tok's positions, forget them */
    bat_lock(m->bat);
    if (kv_admit(m, reserve_rows(m, n_prompt, g->n_predict), g->cancel) != 0) {
        bat_unlock(m->bat);
        return -1;
    }
    if (m->tree_n) {
        m->be->truncate(m->seq, m->verify_len);
        m->tree_n = 0;
    }
    /* reuse the cached prefix */
    int len = cached_len(m), p = 0;
    while (p < len && (size_t)p < n_prompt && m->cache_tok[p] == prompt[p]) p++;
    if ((size_t)p == n_prompt) p--; /* the last prompt row must run to give logits */
    int dl = m->dseq ? m->be->draft_ctx_length(m->dseq) : 0;
    if (m->dseq && m->drafting && dl < p) p = dl;
    p = m->be->truncate(m->seq, p); /* a recurrent model may keep fewer rows (backend.h) */
    if (m->dseq) m->be->draft_ctx_truncate(m->dseq, dl < p ? dl : p);
    m->stable = p; /* before any row past p changes (the stable rule) */
    bat_unlock(m->bat);
    bat_enter(m->bat, &m->member); /* admitted (busy): from here the other sequences' steps wait for it */
    st->n_reused = p;
    st->n_prompt = (int)n_prompt;

    double t0 = dfl_now();
    for (size_t r = (size_t)p; r < n_prompt;) {
        /* the chunk: PREFILL_ROWS alone, a slice of a step beside other generations (bat_prefill_rows) */
        int T = bat_prefill_rows(m->bat, &m->member,
                                 (int)(n_prompt - r < PREFILL_ROWS ? n_prompt - r : PREFILL_ROWS));
        int last = r + (size_t)T == n_prompt;
        be_batch b = {.T = T, .tokens = prompt + r, .n_logits = last, .logits = m->logits};
        if (m->drafting) {
            b.n_taps = m->draft.cfg.n_taps;
            b.tap_layers = m->draft.cfg.tap_layers;
        }
        if (bat_forward(m->bat, m->seq, &b) != 0) return -1;
        memcpy(m->cache_tok + r, prompt + r, sizeof(int32_t) * (size_t)T);
        __atomic_store_n(&m->stable, (int)r + T, __ATOMIC_RELEASE); /* after the rows and their tokens */
        if (m->drafting) {
            bat_lock(m->bat);
            int rc = m->be->draft_feed(m->dseq, m->seq, 0, T);
            bat_unlock(m->bat);
            if (rc != 0) return -1;
        }
        r += (size_t)T;
    }
    int32_t first = pick_row(m, m->logits, (int64_t)n_prompt, &m->lp[0], m->gr ? m->gr_emitted : NULL);
    double t1 = dfl_now();
    st->prompt_s = t1 - t0;

    spec_iface it = {.ud = m, .verify = cb_verify, .predict = cb_predict, .accept = cb_accept,
                     .draft = m->drafting ? cb_draft : NULL, .trim = m->gr ? cb_trim : NULL,
                     .draft_tree = tree ? cb_draft_tree : NULL, .verify_tree = cb_verify_tree,
                     .accept_path = cb_accept_path};
    /* sampling reads each row's logits on the host and sorts candidates: a
     * few rows at a time, stopping at the first rejection, even where greedy
     * takes every row at once */
    int rows = m->host_logits && m->predict_rows == 0 ? PREDICT_ROWS : m->predict_rows;
    /* --draft-max auto from the batch's measured step costs (alone: its own
     * steps); a sampling sequence's logits pass over the lm_head runs in the
     * shared argmax steps where the backend batches it (bat_logits,
     * predict_multi), so its predict calls count as shared steps there (its
     * host-side sampling is not modelled) */
    spec_batch_cost bc = {.ud = m, .round_costs = cb_round_costs, .plan = cb_plan,
                          .predict_own = m->host_logits && !m->be->predict_multi};
    spec_params sp = {.n_predict = g->n_predict, .block_size = block, .draft_max = m->drafting ? g->draft_max : 0,
                      .room = m->n_ctx - (int)n_prompt, .stop = m->stop, .n_stop = m->n_stop, .ctl = &m->ctl,
                      .batch = &bc, .predict_rows = rows, .predict_rows_auto = !m->predict_rows_fixed, .tree = tree};
    emit_ctx e = {.m = m, .cb = cb, .ud = ud, .cancel = g->cancel};
    if (m->tok) e.piece = dfl_malloc(tok_max_piece(m->tok) + 8);
    spec_stats ss;
    int rc = spec_run(&it, &sp, first, on_emit, &e, &ss);
    if (m->gr_failed) rc = -1;
    if (cb && m->tok) {
        size_t n = tok_decode_flush(&e.dec, e.piece, tok_max_piece(m->tok) + 8);
        if (n) cb(ud, -1, e.piece, n);
    }
    double t2 = dfl_now();
    free(e.piece);
    st->decode_s = t2 - t1;
    st->n_tokens = ss.n_emitted;
    st->rounds = ss.rounds;
    st->plain_steps = ss.plain_steps;
    st->tau = ss.rounds ? (double)ss.committed_in_rounds / ss.rounds : 0;
    st->n_pos = block - 1 < 64 ? block - 1 : 64;
    for (int i = 0; i < st->n_pos; i++) st->accept_per_pos[i] = ss.tried[i] ? (double)ss.accepted[i] / ss.tried[i] : 0;
    for (int i = 0; i < st->n_pos; i++) st->accepted_at_pos[i] = ss.accepted[i];
    for (int w = 2; w <= SPEC_MAX_BLOCK; w++) st->n_drafted += ss.width_hist[w] * (w - 1);
    st->n_accepted = (int)(ss.committed_in_rounds - ss.rounds);
    for (int a = 0; a < SPEC_MAX_BLOCK && a < 64; a++) st->accept_hist[a] = ss.accept_hist[a];
    for (int w = 2; w <= SPEC_MAX_BLOCK; w++) st->n_verified += ss.width_hist[w] * w;
    st->n_tree_rounds = ss.tree_rounds;
    st->draft_s = ss.draft_s;
    st->verify_s = ss.verify_s;
    st->other_s = ss.other_s;
    static const char *reasons[] = {"budget", "stop token", "context full", "callback"};
    st->stop_reason = reasons[ss.stopped_by];
    if (out) {
        if (!e.out) e.out = dfl_malloc(sizeof(int32_t)); /* never NULL, even when empty */
        *out = e.out;
        if (n_out) *n_out = e.n_out;
    } else {
        free(e.out);
    }
    return rc;
}

/* generate() enters the scheduler's generations once admitted (the budget
 * rule), before its prefill, and stays to the last token (batch.h: the
 * other sequences' steps wait for this one's forwards while it is
 * inside); a generation waiting for admission is not inside, so nothing
 * waits for it. */
int dflash_generate(dflash_model *m, const int32_t *prompt, size_t n_prompt, const dflash_gen *g,
                    dflash_on_token cb, void *ud, int32_t **out, size_t *n_out, dflash_stats *st) {
    if (!m->bat) return generate(m, prompt, n_prompt, g, cb, ud, out, n_out, st); /* tokenizer only: it fails */
    int rc = generate(m, prompt, n_prompt, g, cb, ud, out, n_out, st);
    /* busy: admitted, and so inside the scheduler (only this thread writes it) */
    int was_busy = m->busy;
    if (was_busy) bat_leave(m->bat, &m->member);
    bat_lock(m->bat);
    m->stable = cached_len(m); /* the generation is over: every cached row (the stable rule) */
    m->busy = 0;
    dflash_model *o = m->owner ? m->owner : m;
    m->last_use = ++o->use_clock;
    bat_unlock(m->bat);
    if (was_busy) bat_notify(m->bat); /* its reservation is free: the waiting generations look again */
    return rc;
}

int dflash_generate_text(dflash_model *m, const char *prompt, const dflash_gen *g, dflash_on_token cb, void *ud,
                         dflash_stats *st) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (dflash_tokenize(m, prompt, strlen(prompt), &ids, &n) != 0) return -1;
    int rc = dflash_generate(m, ids, n, g, cb, ud, NULL, NULL, st);
    free(ids);
    return rc;
}

/* ---- benchmarking ---------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int dflash_time_forward(dflash_model *m, int T, int depth, int reps, double *median_s) {
    const cfg_model *c = &m->target.cfg;
    if (T < 1 || T > SPEC_MAX_BLOCK || depth < 0 || depth + T > m->n_ctx || reps < 1) {
        dfl_seterr("time_forward: T %d, depth %d do not fit (context %d, T <= %d)", T, depth, m->n_ctx,
                   SPEC_MAX_BLOCK);
        return -1;
    }
    int32_t *tok = dfl_malloc(sizeof(int32_t) * (size_t)(depth + T));
    for (int i = 0; i < depth + T; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab);
    bat_lock(m->bat); /* the backend alone (no sequence's step beside it) */
    /* the cache rule: rows that already hold these tokens are kept (a
     * sweep over T at one depth fills the context once) */
    int len = m->be->length(m->seq), keep = 0;
    while (keep < len && keep < depth && m->cache_tok[keep] == tok[keep]) keep++;
    keep = m->be->truncate(m->seq, keep); /* a recurrent model may keep fewer */
    int rc = 0;
    for (int r0 = keep; r0 < depth && rc == 0; r0 += PREFILL_ROWS) {
        int n = depth - r0 < PREFILL_ROWS ? depth - r0 : PREFILL_ROWS;
        be_batch b = {.T = n, .tokens = tok + r0};
        rc = m->be->forward(m->seq, &b);
        if (rc == 0) memcpy(m->cache_tok + r0, tok + r0, sizeof(int32_t) * (size_t)n);
    }
    double *ts = dfl_malloc(sizeof(double) * (size_t)(reps + 1));
    int32_t ids[SPEC_MAX_BLOCK];
    for (int r = 0; r <= reps && rc == 0; r++) {
        /* a greedy step: the forward keeps its rows, argmax of each (ids
         * cross, not [T][vocab] logits) */
        be_batch b = {.T = T, .tokens = tok + depth, .keep_rows = 1};
        double t0 = dfl_now();
        rc = m->be->forward(m->seq, &b);
        if (rc == 0) rc = m->be->argmax(m->seq, 0, T, ids);
        ts[r] = dfl_now() - t0;
        m->be->truncate(m->seq, depth);
    }
    if (rc == 0) {
        qsort(ts + 1, (size_t)reps, sizeof(double), cmp_double); /* ts[0] is the warm-up */
        *median_s = ts[1 + reps / 2];
    }
    m->be->truncate(m->seq, rc == 0 ? depth : 0); /* the depth rows stay, as cache_tok says */
    if (m->dseq) m->be->draft_ctx_truncate(m->dseq, 0);
    m->stable = m->be->length(m->seq);
    bat_unlock(m->bat);
    free(ts);
    free(tok);
    return rc;
}

int dflash_time_draft(dflash_model *m, int depth, int reps, double *median_s) {
    return dflash_time_draft_gen(m, NULL, depth, reps, median_s);
}

int dflash_time_draft_gen(dflash_model *m, const dflash_gen *g, int depth, int reps, double *median_s) {
    const cfg_model *c = &m->target.cfg;
    if (!m->has_draft) {
        dfl_seterr("time_draft: no draft loaded");
        return -1;
    }
    dflash_gen dg = dflash_default_gen();
    if (set_draft_vocab(m, g ? g : &dg, 1) != 0) return -1;
    int B = m->draft.cfg.block_size;
    if (B < 2 || B > SPEC_MAX_BLOCK || depth < 1 || depth + B > m->n_ctx || reps < 1) {
        dfl_seterr("time_draft: block %d at depth %d does not fit (context %d)", B, depth, m->n_ctx);
        return -1;
    }
    int32_t *tok = dfl_malloc(sizeof(int32_t) * (size_t)depth);
    for (int i = 0; i < depth; i++) tok[i] = (int32_t)((i * 7919 + 13) % c->vocab);
    bat_lock(m->bat);
    m->be->truncate(m->seq, 0);
    m->be->draft_ctx_truncate(m->dseq, 0);
    int rc = 0;
    for (int r0 = 0; r0 < depth && rc == 0; r0 += PREFILL_ROWS) {
        int n = depth - r0 < PREFILL_ROWS ? depth - r0 : PREFILL_ROWS;
        be_batch b = {.T = n, .tokens = tok + r0, .n_taps = m->draft.cfg.n_taps, .tap_layers = m->draft.cfg.tap_layers};
        rc = m->be->forward(m->seq, &b);
        if (rc == 0) rc = m->be->draft_feed(m->dseq, m->seq, 0, n);
    }
    int32_t blk[SPEC_MAX_BLOCK], out[SPEC_MAX_BLOCK];
    blk[0] = tok[depth - 1];
    for (int i = 1; i < B; i++) blk[i] = m->draft.cfg.mask_token_id;
    double *ts = dfl_malloc(sizeof(double) * (size_t)(reps + 1));
    for (int r = 0; r <= reps && rc == 0; r++) {
        be_draft_block q = {.B = B, .tokens = blk, .n_slots = B - 1, .n_vocab = m->draft_nv,
                            .ids = m->draft_ids_on ? m->draft_ids : NULL, .out = out};
        double t0 = dfl_now();
        rc = m->be->draft_block(m->dseq, &q); /* returns the ids: the work is done */
        ts[r] = dfl_now() - t0;
    }
    if (rc == 0) {
        qsort(ts + 1, (size_t)reps, sizeof(double), cmp_double);
        *median_s = ts[1 + reps / 2];
    }
    m->be->truncate(m->seq, 0);
    m->be->draft_ctx_truncate(m->dseq, 0);
    m->stable = 0;
    bat_unlock(m->bat);
    free(ts);
    free(tok);
    return rc;
}

double dflash_bandwidth(dflash_model *m) {
    if (!m->bi) {
        dfl_seterr("no backend (tokenizer only)");
        return -1;
    }
    return m->be->bandwidth(m->bi);
}

/* The CPU's read bandwidth, whatever backend a model uses. */
double dflash_read_bandwidth(void) { return be_cpu.bandwidth(NULL); }

char *dflash_json_schema_grammar(const char *schema) {
    if (!schema) return dfl_strdup(gr_json_object_gbnf());
    return gr_from_json_schema(schema, strlen(schema));
}

int dflash_grammar_check(const char *gbnf) {
    gr_grammar *g = gr_parse(gbnf, gbnf ? strlen(gbnf) : 0);
    gr_state *st = g ? gr_state_new(g) : NULL;
    int rc = st ? 0 : -1;
    gr_state_free(st);
    gr_free(g);
    return rc;
}

int dflash_vocab_rank_write(const char *path, const int64_t *counts, int vocab) {
    return voc_rank_write(path, counts, vocab);
}

int dflash_vocab_rank_check(const char *path, int vocab, int *n_ids) {
    voc_rank r;
    if (voc_rank_read(path, vocab, &r) != 0) return -1;
    if (n_ids) *n_ids = r.n;
    voc_rank_free(&r);
    return 0;
}
