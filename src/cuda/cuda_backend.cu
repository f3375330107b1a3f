/* cuda_backend.cu - the CUDA backend (be_cuda): the target forward (Qwen3,
 * Llama, Qwen3-MoE, Qwen3.5, gpt-oss, dense Gemma-4) with a KV cache and
 * hidden taps, and the DFlash draft, resident on one GPU.
 * Implements be_ops (backend.h); the device code and its exactness rule are
 * in cu_kernels.cuh.
 *
 * Residency: prepare() uploads every weight once (cw_weight; Q/K/V and
 * gate/up concatenated by rows so each is one matmul) and the norm vectors.
 * A sequence's KV cache, activations, hidden taps and kept rows live on the
 * device; per round only token ids (in), ids and counts (out) cross, plus
 * logits when sampling at temp > 0. Kernels run on the backend's stream in
 * order; the calls that return ids (argmax, draft_block) wait for it.
 *
 * Buffers (rows = BE_MAX_ROWS; *p = padded to CW_COL_ALIGN, zero padding):
 *   x    f32  [rows][H]        residual stream
 *   xb   bf16 [rows][Hp]       normed x, matmul input
 *   qkv  f32  [rows][Q+2KV]    q | k | v (q, k normed and rotated in place)
 *   att  bf16 [rows][Qp]       attention output
 *   gu   f32  [rows][2I]       gate | up
 *   hb   bf16 [rows][Ip]       silu(gate) * up
 *   taps f32  [rows][n_taps][H]
 *   kept bf16 [BE_KEEP_ROWS][Hp] final-normed rows kept for logits/argmax
 *   lg   f32  [BE_KEEP_ROWS][V]  logits of kept rows */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cu_kernels.cuh"
#include "cu_tree.cuh"

extern "C" {
#include "backend.h"
#include "rope.h"
#include "util.h"
#include "weight.h"
#include "cuda_backend.h"
}

typedef __nv_bfloat16 bf16;

static_assert((int)TREE_ANC == (int)BE_KEEP_ROWS, "cu_tree.cuh's ancestor table holds the widest tree batch");
static_assert((int)TOPK_MAX >= (int)BE_DRAFT_TOPK, "k_draft_topk ranks up to BE_DRAFT_TOPK candidates");

#define CUCHK(call)                                                                                  \
    do {                                                                                             \
        cudaError_t e_ = (call);                                                                     \
        if (e_ != cudaSuccess) {                                                                     \
            dfl_seterr("cuda: %s: %s (%s:%d)", #call, cudaGetErrorString(e_), __FILE__, __LINE__); \
            return -1;                                                                               \
        }                                                                                            \
    } while (0)

static int cu_alloc(void *p, size_t n) {
    void **pp = (void **)p;
    *pp = NULL;
    cudaError_t e = cudaMalloc(pp, n ? n : 1);
    if (e != cudaSuccess) {
        dfl_seterr("cuda: cannot allocate %zu bytes of device memory: %s", n, cudaGetErrorString(e));
        return -1;
    }
    cudaMemset(*pp, 0, n ? n : 1);
    return 0;
}

static int pad(int n, int a) { return (n + a - 1) / a * a; }

/* ---- profile (DFLASH_CUDA_PROFILE=1) ------------------------------------------
 * A tool for finding where a forward's time goes: kernels are launched one by
 * one (no graphs), an event is recorded after each, and at the end of each
 * forward / draft block the stream is synchronised and the time between
 * consecutive events is added to the kernel's row (so a row includes the gap
 * before the kernel). The table goes to stderr when the backend closes. One
 * process-wide table: profile one model at a time. */
enum { PROF_EV = 4096, PROF_ROWS = 48 };
static struct {
    int on, n, only_T, skip; /* only_T: DFLASH_CUDA_PROFILE_T=N records target forwards of N rows only */
    cudaEvent_t ev[PROF_EV + 1];
    const char *name[PROF_EV + 1];
    double bytes[PROF_EV + 1];
    struct {
        const char *name;
        double ms, bytes;
        long calls;
    } row[PROF_ROWS];
    int nrows;
    long moe_layers;      /* expert blocks run, and the experts they used (profile only: */
    double moe_active;    /* read back after each routing, which costs a sync) */
    int moe_T;
} prof;

static void tuning_init(void);
static void pdl_init(const cudaDeviceProp *p);
static int use_pdl = 0; /* launch(): programmatic dependent launch */
enum { ATT_AUTO, ATT_HEAD, ATT_GQA };
static int att_mode;
static int att_split = 1; /* DFLASH_CUDA_ATT_SPLIT=0: the one-block-per-row kernels (for comparison) */

static void prof_init(void) {
    const char *e = getenv("DFLASH_CUDA_PROFILE");
    if (!e || *e != '1' || prof.on) return;
    for (int i = 0; i <= PROF_EV; i++) cudaEventCreate(&prof.ev[i]);
    prof.on = 1;
    const char *t = getenv("DFLASH_CUDA_PROFILE_T");
    prof.only_T = t ? atoi(t) : 0;
}

/* T: rows of a target forward; -1 for anything else */
static void prof_begin(cudaStream_t s, int T) {
    if (!prof.on) return;
    prof.n = 0;
    prof.skip = prof.only_T > 0 && T != prof.only_T;
    if (prof.skip) return;
    cudaEventRecord(prof.ev[0], s);
}

/* after a launch: its name and the bytes of weights it streamed */
static void prof_mark(cudaStream_t s, const char *name, double bytes) {
    if (!prof.on || prof.skip || prof.n >= PROF_EV) return;
    prof.n++;
    prof.name[prof.n] = name;
    prof.bytes[prof.n] = bytes;
    cudaEventRecord(prof.ev[prof.n], s);
}

static void prof_end(cudaStream_t s) {
    if (!prof.on || prof.n == 0) return;
    cudaStreamSynchronize(s);
    for (int i = 1; i <= prof.n; i++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, prof.ev[i - 1], prof.ev[i]);
        int r = 0;
        while (r < prof.nrows && strcmp(prof.row[r].name, prof.name[i]) != 0) r++;
        if (r == prof.nrows) {
            if (r == PROF_ROWS) continue;
            prof.nrows++;
            prof.row[r].name = prof.name[i];
        }
        prof.row[r].ms += ms;
        prof.row[r].bytes += prof.bytes[i];
        prof.row[r].calls++;
    }
    prof.n = 0;
}

static void prof_report(void) {
    if (!prof.on || !prof.nrows) return;
    double tot = 0;
    for (int r = 0; r < prof.nrows; r++) tot += prof.row[r].ms;
    fprintf(stderr, "cuda profile (kernel time incl. the gap before it):\n  %-18s %9s %10s %9s %8s %9s\n", "kernel",
            "calls", "total ms", "us/call", "share", "GB/s");
    for (int r = 0; r < prof.nrows; r++) {
        double ms = prof.row[r].ms;
        fprintf(stderr, "  %-18s %9ld %10.2f %9.2f %7.1f%% %9.0f\n", prof.row[r].name, prof.row[r].calls, ms,
                1e3 * ms / prof.row[r].calls, 100 * ms / tot, ms > 0 ? prof.row[r].bytes / (ms * 1e-3) / 1e9 : 0.0);
    }
    if (prof.moe_layers)
        fprintf(stderr, "  expert blocks: %.1f experts active per layer on average (%ld blocks%s)\n",
                prof.moe_active / prof.moe_layers, prof.moe_layers,
                prof.moe_T > 0 ? ", forwards of DFLASH_CUDA_PROFILE_T rows" : "");
    prof.nrows = 0;
    prof.moe_layers = 0;
    prof.moe_active = 0;
}

/* ---- backend instance ------------------------------------------------------ */

struct cu_multi_s; /* cu_forward_multi's buffers (below) */
enum { MULTI_MODELS = 4 }; /* models with stacked-row buffers at once (a target and its draft, ...) */

typedef struct {
    int device;
    cudaStream_t stream;
    cudaDeviceProp prop;
    char desc[192];
    struct cu_multi_s *multi[MULTI_MODELS]; /* stacked-row buffers per model (NULL: none yet) */
} cu_be;

static void multi_free(cu_be *be);

static int cu_probe(char *why, size_t n) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why, n, "no CUDA device (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return 1;
}

static void *cu_open(const be_options *o) {
    char why[160];
    if (!cu_probe(why, sizeof why)) {
        dfl_seterr("backend cuda: %s", why);
        return NULL;
    }
    int count = 0;
    cudaGetDeviceCount(&count);
    int dev = o ? o->device : 0;
    if (dev < 0 || dev >= count) {
        dfl_seterr("backend cuda: device %d does not exist (%d devices)", dev, count);
        return NULL;
    }
    cu_be *be = (cu_be *)dfl_calloc(1, sizeof *be);
    be->device = dev;
    if (cudaSetDevice(dev) != cudaSuccess || cudaGetDeviceProperties(&be->prop, dev) != cudaSuccess ||
        cudaStreamCreateWithFlags(&be->stream, cudaStreamNonBlocking) != cudaSuccess) {
        dfl_seterr("backend cuda: cannot open device %d: %s", dev, cudaGetErrorString(cudaGetLastError()));
        free(be);
        return NULL;
    }
    if (be->prop.major < 8) {
        dfl_seterr("backend cuda: %s is compute capability %d.%d; the kernels need 8.0 or newer (bf16 tensor cores)",
                   be->prop.name, be->prop.major, be->prop.minor);
        cudaStreamDestroy(be->stream);
        free(be);
        return NULL;
    }
    prof_init();
    tuning_init();
    pdl_init(&be->prop);
    snprintf(be->desc, sizeof be->desc, "%s sm_%d%d, %d SMs, bf16 tensor-core matmuls", be->prop.name,
             be->prop.major, be->prop.minor, be->prop.multiProcessorCount);
    return be;
}

static void cu_close(void *p) {
    cu_be *be = (cu_be *)p;
    if (!be) return;
    prof_report();
    multi_free(be);
    cudaStreamDestroy(be->stream);
    free(be);
}

static const char *cu_describe(void *p) { return ((cu_be *)p)->desc; }
static int cu_draft_q8(void *p) { return 0; } /* the draft is cheap on a GPU: keep its weights */

/* Device-to-device copy of 1 GiB, best of 5: bytes read + written / time. */
static double cu_bandwidth(void *p) {
    cu_be *be = (cu_be *)p;
    size_t n = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
        cudaFree(a);
        return 0;
    }
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    float best = 1e30f;
    for (int r = 0; r < 6; r++) {
        cudaEventRecord(e0, be->stream);
        cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, be->stream);
        cudaEventRecord(e1, be->stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (r > 0 && ms < best) best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return 2.0 * (double)n / (best * 1e-3) / 1e9;
}

/* ---- weights ----------------------------------------------------------------- */

/* K slices per tile, a function of the shape only: enough warps to cover
 * the GPU (about 16 per SM on a 132-SM part) while each warp keeps >= 4
 * steps. */
static int cw_split(int rows, int cols_p, int kind) {
    int step = kind == CW_BF16 ? 32 : kind == CW_Q8 ? 64 : 128;
    int ns = cols_p / step, tiles = (rows + 15) / 16, s = 1;
    while (s < GEMM_MAX_SPLIT && tiles * s < 2048 && ns / (2 * s) >= 4) s *= 2;
    return s;
}

/* 1: a GEMM of T > 32 rows is one launch (grid.y); 0: one per 32 rows */
static int gemm_grid = 1;
/* quantized dequantization: 1 (default) cu_dequant_prmt, 0 cu_dequant; the
 * same bits either way (cu_kernels.cuh) */
static int gemm_dq = 1;
/* Q4 weights in the integer-MMA order (cu_iq_pos, k_gemm DQ >= 2): the
 * default; DFLASH_CUDA_GEMM_DQ=1 or 0 keeps Q4 on the dequantizing kernels
 * (other bits: the weight is no longer rounded to bf16), for comparison.
 * Decided at upload. */
static int gemm_iq = 1;
/* the integer-MMA kernel's unroll past one column tile: 2 (fewer
 * registers: the faster 16-row verify, bench/NOTES.md), or 4
 * (DFLASH_CUDA_GEMM_IQU=4, for comparison); timing only */
static int iq_unroll = 2;
/* 1: an expert block's combine and the next RMSNorm run as one kernel
 * (k_moe_combine_norm: the same bits); 0 (DFLASH_CUDA_MOE_FUSE=0): two,
 * for comparison */
static int moe_fuse = 1;
/* A stacked step's attention in one launch for all its sequences (cu_segd
 * tables, stack_tables), since test_cuda's multi tests passed with it on an
 * H100 (2026-12-07); DFLASH_CUDA_SEGS=0: a launch per sequence. */
static int seg_tables = 1;
/* 1: an MXFP4 weight (gpt-oss's experts; weight.h), or an 8-bit one whose
 * codes are all MXFP4's, goes up as 4-bit nibbles (cw_weight.mx: half the
 * bytes, the same values); 0 (DFLASH_CUDA_MX=0): as 8-bit, for comparison */
static int upload_mx = 1;
/* Row kernels folded into the tail of the GEMM before them (cu_tail: the
 * same code, so the same bits; one launch fewer each) in forwards of at
 * most fuse_max_t rows: fuse_norm, the RMSNorm after the o / lin_out
 * projection (post-attention norm) and after the down projection (the next
 * layer's input norm, or the final norm of kept rows); fuse_rope, the q/k
 * norm + RoPE + K/V store after the qkv projection. Off (fuse_default):
 * timed on an H100 (2026-12-07, bench/NOTES.md) they are slower - the 4B
 * shape's decode 4.04 -> 4.70 ms in BF16, 2.56 -> 2.79 ms at 4 bits, the
 * norm tail most - though every test_cuda test passes with them.
 * DFLASH_CUDA_FUSE=1 turns both on, =norm or =rope one, =0 none;
 * DFLASH_CUDA_FUSE_T=N (1..16) sets fuse_max_t. Timing only: the bits are
 * the same either way. */
enum { fuse_default = 0 };
/* Tree verification (cu_tree.cuh: the device top-k, the tree forward and
 * tree_commit) is offered (be_cuda.tree_commit set, make_ops) by default
 * since test_cuda's tree tests passed on an H100 (2026-12-07: every tree row
 * bit-identical to its decode, 195/195 --tree runs identical to plain
 * decoding); DFLASH_CUDA_TREE=0 takes it away (the engine then sees a
 * backend without trees: --tree auto runs the chain). The tree forward never
 * takes the fused RoPE tail (layer(): !tree), so fuse_rope does not touch it. */
enum { tree_default = 1 };
static int fuse_norm = fuse_default, fuse_rope = fuse_default, fuse_max_t = TAIL_MAX_ROWS;
enum { TAIL_TICKETS = 4096 };

/* Timing knobs, read once when the backend opens. */
static void tuning_init(void) {
    const char *e = getenv("DFLASH_CUDA_GEMM_GRID");
    gemm_grid = !(e && *e == '0');
    e = getenv("DFLASH_CUDA_MX");
    upload_mx = !(e && *e == '0');
    e = getenv("DFLASH_CUDA_GEMM_DQ");
    gemm_dq = !(e && *e == '0');
    gemm_iq = !(e && (*e == '0' || *e == '1'));
    e = getenv("DFLASH_CUDA_GEMM_IQU");
    iq_unroll = e && *e == '4' ? 4 : 2;
    e = getenv("DFLASH_CUDA_MOE_FUSE");
    moe_fuse = !(e && *e == '0');
    e = getenv("DFLASH_CUDA_SEGS");
    seg_tables = !(e && *e == '0');
    e = getenv("DFLASH_CUDA_ATT");
    att_mode = !e ? ATT_AUTO : strcmp(e, "head") == 0 ? ATT_HEAD : strcmp(e, "gqa") == 0 ? ATT_GQA : ATT_AUTO;
    e = getenv("DFLASH_CUDA_ATT_SPLIT");
    att_split = !(e && *e == '0');
    e = getenv("DFLASH_CUDA_FUSE");
    fuse_norm = !e ? fuse_default : *e == '1' || strstr(e, "norm") != NULL;
    fuse_rope = !e ? fuse_default : *e == '1' || strstr(e, "rope") != NULL;
    e = getenv("DFLASH_CUDA_FUSE_T");
    fuse_max_t = e && atoi(e) >= 1 && atoi(e) <= TAIL_MAX_ROWS ? atoi(e) : TAIL_MAX_ROWS;
}

static void pdl_init(const cudaDeviceProp *p) {
    const char *e = getenv("DFLASH_CUDA_PDL");
    use_pdl = p->major >= 9 && !(e && *e == '0');
}

static void cw_free(cw_weight *w) {
    cudaFree(w->data);
    cudaFree(w->sb);
    memset(w, 0, sizeof *w);
}

static size_t cw_bytes(const cw_weight *w) {
    return (size_t)w->rows * w->row_bytes + (w->sb ? (size_t)w->rows * w->sb_row_bytes : 0);
}

/* Reorder o->data from row-major to the tiled layout k_gemm streams
 * (cu_kernels.cuh, cw_weight). */
static int cw_tile(cw_weight *o, const char *name) {
    size_t bytes = o->row_bytes * o->rows_p, n16 = bytes / 16;
    uint8_t *t;
    if (cu_alloc(&t, bytes) != 0) return -1;
    k_tile<<<(unsigned)((n16 + 255) / 256), 256>>>(o->data, t, o->row_bytes, n16);
    cudaError_t e = cudaDeviceSynchronize();
    cudaFree(o->data);
    o->data = t;
    if (e != cudaSuccess) {
        dfl_seterr("cuda upload %s: %s", name, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* o's rows (gate rows 0..I-1, then up rows I..2I-1) -> interleave8 order
 * (cu_kernels.cuh, k_gemm's SwiGLU epilogue), 2 * pad8(I) rows. */
static int cw_interleave8(cw_weight *o, const char *name) {
    int I = o->rows / 2, R = 2 * pad(I, 8), rows_p = pad(R, CW_ROW_ALIGN) + CW_ROW_ALIGN;
    uint8_t *d, *sb = NULL;
    if (cu_alloc(&d, o->row_bytes * rows_p) != 0) return -1;
    if (o->sb && cu_alloc(&sb, o->sb_row_bytes * rows_p) != 0) {
        cudaFree(d);
        return -1;
    }
    k_interleave8<<<dim3(4, R), 256>>>((const uint32_t *)o->data, (uint32_t *)d, o->row_bytes / 4, I, R);
    if (o->sb) k_interleave8<<<dim3(1, R), 256>>>((const uint32_t *)o->sb, (uint32_t *)sb, o->sb_row_bytes / 4, I, R);
    cudaError_t e = cudaDeviceSynchronize();
    cudaFree(o->data);
    cudaFree(o->sb);
    o->data = d;
    o->sb = sb;
    o->rows = R;
    o->rows_p = rows_p;
    o->split = cw_split(R, o->cols_p, o->kind);
    if (e != cudaSuccess) {
        dfl_seterr("cuda upload %s: %s", name, cudaGetErrorString(e));
        return -1;
    }
    return 0;
}

/* ws[0..n) (8-bit, group 32) as MXFP4 nibbles (cu_kernels.cuh cu_mx4_q):
 * [rows][cols/2] bytes, element k in nibble k%2 of byte k/2, low first (the
 * Q4 packing), when every code is one of MXFP4's; else NULL. MXFP4 pieces
 * (weight.h, the host's form of such weights): their codes as they are. */
static uint8_t *mx4_pack(const wt_weight *const *ws, int n, int rows, int cols) {
    static const int8_t nib[25] = {15, -1, -1, -1, 14, -1, 13, -1, 12, 11, 10, 9, 0,
                                   1,  2,  3,  4,  -1, 5,  -1, 6,  -1, -1, -1, 7};
    uint8_t *o = (uint8_t *)dfl_malloc((size_t)rows * cols / 2);
    size_t at = 0;
    if (ws[0]->dtype == WT_MXFP4) {
        for (int i = 0; i < n; at += (size_t)ws[i]->rows * cols / 2, i++)
            memcpy(o + at, ws[i]->data, (size_t)ws[i]->rows * cols / 2);
        return o;
    }
    for (int i = 0; i < n; i++) {
        const uint8_t *q = (const uint8_t *)ws[i]->data;
        size_t m = (size_t)ws[i]->rows * cols;
        for (size_t k = 0; k < m; k += 2) {
            int a = q[k] < 25 ? nib[q[k]] : -1, b = q[k + 1] < 25 ? nib[q[k + 1]] : -1;
            if (a < 0 || b < 0) {
                free(o);
                return NULL;
            }
            o[at++] = (uint8_t)(a | b << 4);
        }
    }
    return o;
}

/* Upload the row-concatenation of ws[0..n) as one device weight. MLX Q8/Q4
 * pieces that agree on bits, group and scale dtype stay quantized; anything
 * else becomes bfloat16 (wt_get_row's f32 values rounded once). */
static int cw_upload(cw_weight *o, const wt_weight *const *ws, int n, const char *name, int interleave8) {
    memset(o, 0, sizeof *o);
    int rows = 0, cols = ws[0]->cols;
    wt_dtype d0 = ws[0]->dtype;
    int mxin = d0 == WT_MXFP4; /* codes and e8m0 bytes (weight.h): up as Q4 nibbles (o->mx), or 8-bit */
    int quant = d0 == WT_Q8 || d0 == WT_Q4 || mxin;
    for (int i = 0; i < n; i++) {
        if (ws[i]->cols != cols) {
            dfl_seterr("cuda upload %s: pieces have %d and %d columns", name, cols, ws[i]->cols);
            return -1;
        }
        rows += ws[i]->rows;
        if (ws[i]->dtype != d0 || (quant && (ws[i]->group_size != ws[0]->group_size ||
                                             ws[i]->scale_dtype != ws[0]->scale_dtype)))
            quant = 0;
    }
    /* k_gemm gives each lane one scale per chunk of CK = 16 (Q8) or 32 (Q4)
     * elements, so a group must hold whole chunks: Q8 with group 16 (GGUF
     * Q6_K) stays 8-bit */
    if (quant && ws[0]->group_size % (d0 == WT_Q8 ? 16 : 32) != 0) quant = 0;
    o->kind = !quant ? CW_BF16 : d0 == WT_Q8 || mxin ? CW_Q8 : CW_Q4;
    /* an 8-bit weight of MXFP4 codes (gpt-oss's experts): 4-bit nibbles, the same values */
    uint8_t *mx = quant && upload_mx && (d0 == WT_Q8 || mxin) && ws[0]->group_size % 32 == 0 && cols % 2 == 0
                      ? mx4_pack(ws, n, rows, cols)
                      : NULL;
    if (mx) o->kind = CW_Q4, o->mx = 1;
    /* MXFP4 with DFLASH_CUDA_MX=0: the codes' 8-bit integers (wt_mx4_q) */
    uint8_t *q8 = mxin && !mx ? (uint8_t *)dfl_malloc((size_t)rows * cols) : NULL;
    for (int i = 0, at = 0; q8 && i < n; at += ws[i]->rows, i++)
        for (size_t k = 0; k < (size_t)ws[i]->rows * cols; k++)
            q8[(size_t)at * cols + k] = wt_mx4_q[((const uint8_t *)ws[i]->data)[k / 2] >> (4 * (k % 2)) & 15];
    o->rows = rows;
    o->cols = cols;
    o->cols_p = pad(cols, CW_COL_ALIGN);
    o->rows_p = pad(rows, CW_ROW_ALIGN) + CW_ROW_ALIGN; /* a spare tile: row views may overrun by < 16 rows */
    o->row_bytes = o->kind == CW_BF16 ? (size_t)o->cols_p * 2 : o->kind == CW_Q8 ? (size_t)o->cols_p
                                                                                 : (size_t)o->cols_p / 2;
    o->split = cw_split(rows, o->cols_p, o->kind);
    if (cu_alloc(&o->data, o->row_bytes * o->rows_p) != 0) {
        free(mx);
        free(q8);
        return -1;
    }
    if (o->kind == CW_BF16) {
        int chunk = 1024;
        float *f = (float *)dfl_malloc(sizeof(float) * (size_t)cols);
        uint16_t *h = (uint16_t *)dfl_malloc(sizeof(uint16_t) * (size_t)cols * chunk);
        int r0 = 0;
        for (int i = 0; i < n; i++) {
            const wt_weight *w = ws[i];
            for (int a = 0; a < w->rows; a += chunk) {
                int m = w->rows - a < chunk ? w->rows - a : chunk;
                const void *src = NULL;
                if (w->dtype == WT_BF16) {
                    src = (const uint16_t *)w->data + (size_t)a * cols;
                } else {
                    for (int r = 0; r < m; r++) {
                        wt_get_row(f, w, a + r);
                        for (int k = 0; k < cols; k++) h[(size_t)r * cols + k] = dfl_f32_to_bf16(f[k]);
                    }
                    src = h;
                }
                cudaError_t e = cudaMemcpy2D(o->data + (size_t)(r0 + a) * o->row_bytes, o->row_bytes, src,
                                             (size_t)cols * 2, (size_t)cols * 2, m, cudaMemcpyHostToDevice);
                if (e != cudaSuccess) {
                    free(f);
                    free(h);
                    dfl_seterr("cuda upload %s: %s", name, cudaGetErrorString(e));
                    return -1;
                }
            }
            r0 += w->rows;
        }
        free(f);
        free(h);
        if (interleave8 && cw_interleave8(o, name) != 0) return -1;
        return cw_tile(o, name);
    }
    o->group = ws[0]->group_size;
    o->sdt = mxin ? SC_BF16 : ws[0]->scale_dtype == WT_F32 ? SC_F32 : ws[0]->scale_dtype == WT_F16 ? SC_F16 : SC_BF16;
    int ng = o->cols_p / o->group, ngs = cols / o->group, es = o->sdt == SC_F32 ? 4 : 2;
    o->sb_row_bytes = (size_t)ng * 2 * es;
    if (cu_alloc(&o->sb, o->sb_row_bytes * o->rows_p) != 0) {
        free(mx);
        free(q8);
        return -1;
    }
    /* integer-MMA order: the fold (group, or the 128-column step) must not
     * cross a group (not for MXFP4 codes: their values are not affine in the nibble) */
    o->iq = o->kind == CW_Q4 && !o->mx && gemm_iq && (o->group <= 128 ? 128 % o->group == 0 : o->group % 128 == 0);
    size_t src_row = o->kind == CW_Q8 ? (size_t)cols : (size_t)cols / 2;
    uint8_t *sbh = (uint8_t *)dfl_calloc((size_t)o->rows_p, o->sb_row_bytes);
    int r0 = 0;
    for (int i = 0; i < n; i++) {
        const wt_weight *w = ws[i];
        const void *src = mx ? (const void *)(mx + (size_t)r0 * src_row) : q8 ? (const void *)(q8 + (size_t)r0 * src_row) : w->data;
        if (cudaMemcpy2D(o->data + (size_t)r0 * o->row_bytes, o->row_bytes, src, src_row, src_row, w->rows,
                         cudaMemcpyHostToDevice) != cudaSuccess) {
            free(mx);
            free(q8);
            free(sbh);
            dfl_seterr("cuda upload %s: copy failed", name);
            return -1;
        }
        for (int r = 0; r < w->rows; r++)
            for (int gi = 0; gi < ngs; gi++) {
                uint8_t *dst = sbh + (size_t)(r0 + r) * o->sb_row_bytes + (size_t)gi * 2 * es;
                if (mxin) { /* bf16 scale and bias of the e8m0 byte */
                    uint8_t e = ((const uint8_t *)w->scales)[(size_t)r * ngs + gi];
                    uint16_t sbv[2] = {wt_mx4_scale_bf16(e), wt_mx4_bias_bf16(e)};
                    memcpy(dst, sbv, 4);
                    continue;
                }
                memcpy(dst, (const uint8_t *)w->scales + ((size_t)r * ngs + gi) * es, es);
                memcpy(dst + es, (const uint8_t *)w->biases + ((size_t)r * ngs + gi) * es, es);
            }
        r0 += w->rows;
    }
    cudaError_t e = cudaMemcpy(o->sb, sbh, o->sb_row_bytes * o->rows_p, cudaMemcpyHostToDevice);
    free(sbh);
    free(mx);
    free(q8);
    if (e == cudaSuccess && o->iq) {
        size_t n_steps = o->row_bytes * o->rows_p / 64;
        k_iq_order<<<(unsigned)((n_steps + 255) / 256), 256>>>(o->data, n_steps);
        e = cudaGetLastError();
    }
    if (e != cudaSuccess) {
        dfl_seterr("cuda upload %s: %s", name, cudaGetErrorString(e));
        return -1;
    }
    if (interleave8 && cw_interleave8(o, name) != 0) return -1;
    return cw_tile(o, name);
}

/* Rows r0..r0+n-1 of w as a weight of their own (same split, so the same
 * bits per row); r0 % 16 == 0 (whole tiles of the tiled layout: callers pass
 * q_dim = heads * head_dim, head_dim a multiple of 16). */
static cw_weight cw_rows(const cw_weight *w, int r0, int n) {
    cw_weight v = *w;
    v.data += (size_t)r0 * w->row_bytes;
    if (v.sb) v.sb += (size_t)r0 * w->sb_row_bytes;
    v.rows = n;
    return v;
}

static int upload_vec(float **d, const float *h, int n) {
    if (!h) {
        *d = NULL;
        return 0;
    }
    if (cu_alloc(d, sizeof(float) * n) != 0) return -1;
    CUCHK(cudaMemcpy(*d, h, sizeof(float) * n, cudaMemcpyHostToDevice));
    return 0;
}

typedef struct {
    cw_weight wqkv, wo, wgu, wd;  /* wqkv: [Q | K | V] rows; Qwen3.5's gated q_proj: [nh][2 hd] first */
    float *in_norm, *post_norm, *q_norm, *k_norm;
    /* Qwen3.5 Gated DeltaNet layer (linear): wqkv, wo, q/k_norm absent */
    int linear;
    cw_weight lin_in;             /* [C + vd + 2 nv, H]: in_proj_qkv, in_proj_z, in_proj_a, in_proj_b */
    cw_weight lin_out;            /* [H, vd] */
    float *conv_w, *dt_bias, *neg_a, *lin_norm; /* [C][K], [nv], [nv], [dv] */
    /* expert block (mixture of experts; wgu/wd unused): the router, every
     * expert's gate/up (interleave8) and down weight, uploaded one by one;
     * eptr on the device: [4][E] their data and sb pointers (gate/up data,
     * gate/up sb, down data, down sb) for k_gemm_moe */
    int moe;
    cw_weight router;             /* [E, H] */
    cw_weight *egu, *edn;         /* host [E]: [2 pad8(MI), H] and [H, MI] */
    const uint8_t **eptr;
    cw_weight sh_gu, sh_dn;       /* the shared expert (Qwen3.5-MoE; else empty) */
    float *sh_gate;               /* [H], NULL without a shared expert */
    /* gpt-oss (else NULL / 0): attention biases [Q + 2 KV] (q | k | v) and
     * [H], sink logits [nh], the layer's window (0: full attention), the
     * router bias [E] and the experts' biases [E][MI] x2, [E][H] */
    float *bqkv, *bo, *sinks;
    int window;
    float *router_bias, *ebg, *ebu, *ebd;
    /* Gemma-4 (else NULL / 0): the layer's head width and kv heads, the
     * sandwich norms [H], the per-layer input's gate [P, H], projection
     * [H, P] and norm [H], layer_scalar */
    int hd, nkv, idx;   /* idx: the layer's index (its slice of the per-layer inputs) */
    float *attn_out_norm, *ffn_out_norm, *ple_norm;
    cw_weight ple_gate, ple_proj;
    float layer_scalar;
    /* Gemma-4's MoE block (cfg.g4_moe; else NULL): the dense MLP (wgu, wd)
     * and the experts beside it; rscale = router.scale * H^-0.5 [H], pes =
     * router.per_expert_scale [E], the norms [H] */
    int g4moe;
    float *rscale, *pes, *moe_in_norm, *ffn_out_norm1, *ffn_out_norm2;
} cu_layer;

typedef struct {
    int n_layers;
    cu_layer *layers;
    cw_weight embed, lm_head, fc;
    cw_weight ple_embed, ple_model_proj; /* Gemma-4 per-layer inputs (else empty) */
    float *ple_proj_norm;
    int head_is_embed;
    float *final_norm, *hidden_norm;
    size_t bytes;
} cu_model;

/* be_ops.expert_bytes: layer l's routed experts as uploaded (MXFP4 codes
 * at 4 bits, cw_weight.mx; padding included) */
static size_t cu_expert_bytes(void *p, const mdl_model *m, int l) {
    (void)p;
    const cu_model *cm = (const cu_model *)m->be_data;
    if (!cm || l < 0 || l >= cm->n_layers || !cm->layers[l].egu) return 0;
    const cu_layer *L = &cm->layers[l];
    size_t b = 0;
    for (int e = 0; e < L->moe; e++) b += cw_bytes(&L->egu[e]) + cw_bytes(&L->edn[e]);
    return b;
}

static void multi_forget(cu_be *be, const cu_model *cm);

static void cu_release(void *p, mdl_model *m) {
    cu_model *cm = (cu_model *)m->be_data;
    if (!cm) return;
    multi_forget((cu_be *)p, cm); /* its stacked-row buffers: a later model may get this address */
    for (int l = 0; l < cm->n_layers; l++) {
        cu_layer *L = &cm->layers[l];
        cw_free(&L->wqkv);
        cw_free(&L->wo);
        cw_free(&L->wgu);
        cw_free(&L->wd);
        cw_free(&L->lin_in);
        cw_free(&L->lin_out);
        cudaFree(L->conv_w);
        cudaFree(L->dt_bias);
        cudaFree(L->neg_a);
        cudaFree(L->lin_norm);
        cudaFree(L->in_norm);
        cudaFree(L->post_norm);
        cudaFree(L->q_norm);
        cudaFree(L->k_norm);
        if (L->moe) {
            for (int e = 0; L->egu && e < L->moe; e++) cw_free(&L->egu[e]);
            for (int e = 0; L->edn && e < L->moe; e++) cw_free(&L->edn[e]);
            free(L->egu);
            free(L->edn);
            cudaFree((void *)L->eptr);
            cw_free(&L->router);
            cw_free(&L->sh_gu);
            cw_free(&L->sh_dn);
            cudaFree(L->sh_gate);
        }
        float *oss[] = {L->bqkv, L->bo, L->sinks, L->router_bias, L->ebg, L->ebu, L->ebd,
                        L->attn_out_norm, L->ffn_out_norm, L->ple_norm, L->rscale, L->pes, L->moe_in_norm,
                        L->ffn_out_norm1, L->ffn_out_norm2};
        cw_free(&L->ple_gate);
        cw_free(&L->ple_proj);
        for (size_t i = 0; i < sizeof oss / sizeof oss[0]; i++) cudaFree(oss[i]);
    }
    free(cm->layers);
    if (!cm->head_is_embed) cw_free(&cm->lm_head);
    cw_free(&cm->embed);
    cw_free(&cm->fc);
    cw_free(&cm->ple_embed);
    cw_free(&cm->ple_model_proj);
    cudaFree(cm->ple_proj_norm);
    cudaFree(cm->final_norm);
    cudaFree(cm->hidden_norm);
    free(cm);
    m->be_data = NULL;
}

static int dn_dk_supported(int dk);

/* Layer L's expert block onto the device (cu_layer). Every expert must come
 * out in one storage kind and shape: k_gemm_moe launches them as one. */
static int upload_experts(cu_layer *D, const mdl_layer *L, const cfg_model *c, const char *name) {
    int E = c->n_experts;
    const wt_weight *r[1] = {&L->router};
    D->moe = E;
    D->egu = (cw_weight *)dfl_calloc((size_t)E, sizeof(cw_weight));
    D->edn = (cw_weight *)dfl_calloc((size_t)E, sizeof(cw_weight));
    if (cw_upload(&D->router, r, 1, name, 0) != 0) return -1;
    for (int e = 0; e < E; e++) {
        const mdl_expert *x = &L->experts[e];
        const wt_weight *gu[2] = {&x->wg, &x->wu}, *dw[1] = {&x->wd};
        if (cw_upload(&D->egu[e], gu, 2, name, 1) != 0 || cw_upload(&D->edn[e], dw, 1, name, 0) != 0) return -1;
        const cw_weight *a = &D->egu[e], *b = &D->edn[e], *a0 = &D->egu[0], *b0 = &D->edn[0];
        if (a->kind != a0->kind || a->group != a0->group || a->sdt != a0->sdt || a->rows != a0->rows ||
            a->mx != a0->mx || b->kind != b0->kind || b->group != b0->group || b->sdt != b0->sdt ||
            b->rows != b0->rows || b->mx != b0->mx) {
            dfl_seterr("cuda upload %s: expert %d is stored unlike expert 0 (every expert must share one type)", name,
                       e);
            return -1;
        }
    }
    const uint8_t **h = (const uint8_t **)dfl_malloc(sizeof(uint8_t *) * 4 * (size_t)E);
    for (int e = 0; e < E; e++) {
        h[e] = D->egu[e].data;
        h[E + e] = D->egu[e].sb;
        h[2 * E + e] = D->edn[e].data;
        h[3 * E + e] = D->edn[e].sb;
    }
    int rc = cu_alloc(&D->eptr, sizeof(uint8_t *) * 4 * (size_t)E);
    if (rc == 0 && cudaMemcpy((void *)D->eptr, h, sizeof(uint8_t *) * 4 * (size_t)E, cudaMemcpyHostToDevice) !=
                       cudaSuccess) {
        dfl_seterr("cuda upload %s: expert table copy failed", name);
        rc = -1;
    }
    free(h);
    if (rc != 0) return -1;
    if (L->router_bias) { /* gpt-oss: router and expert biases, one array each */
        int MI = c->moe_inter, H = c->hidden;
        float *bg = (float *)dfl_malloc(sizeof(float) * (size_t)E * MI), *bu = (float *)dfl_malloc(sizeof(float) * (size_t)E * MI),
              *bd = (float *)dfl_malloc(sizeof(float) * (size_t)E * H);
        for (int e = 0; e < E; e++) {
            const mdl_expert *x = &L->experts[e];
            memcpy(bg + (size_t)e * MI, x->bg, sizeof(float) * MI);
            memcpy(bu + (size_t)e * MI, x->bu, sizeof(float) * MI);
            memcpy(bd + (size_t)e * H, x->bd, sizeof(float) * H);
        }
        rc = upload_vec(&D->router_bias, L->router_bias, E) || upload_vec(&D->ebg, bg, E * MI) ||
             upload_vec(&D->ebu, bu, E * MI) || upload_vec(&D->ebd, bd, E * H) ? -1 : 0;
        free(bg);
        free(bu);
        free(bd);
        if (rc != 0) return -1;
    }
    if (L->sh_gate) {
        const wt_weight *sgu[2] = {&L->sh_wg, &L->sh_wu}, *sd[1] = {&L->sh_wd};
        if (cw_upload(&D->sh_gu, sgu, 2, name, 1) != 0 || cw_upload(&D->sh_dn, sd, 1, name, 0) != 0 ||
            upload_vec(&D->sh_gate, L->sh_gate, c->hidden) != 0)
            return -1;
    }
    return 0;
}

static int cu_prepare(void *p, mdl_model *m) {
    cu_be *be = (cu_be *)p;
    cudaSetDevice(be->device);
    const cfg_model *c = &m->cfg;
    if (c->n_moe_layers && (c->n_experts > MOE_MAX_E || c->n_experts_used > MOE_MAX_K ||
                            BE_MAX_ROWS * c->n_experts_used > MOE_MAX_PAIRS)) {
        dfl_seterr("backend cuda: %d experts, %d per token: at most %d and %d; use --backend cpu", c->n_experts,
                   c->n_experts_used, MOE_MAX_E, MOE_MAX_K);
        return -1;
    }
    if (c->n_linear_layers && (!dn_dk_supported(c->lin_k_dim) || c->lin_v_dim > 128)) {
        dfl_seterr("backend cuda: Gated DeltaNet key dim %d / value dim %d not supported (key 16, 32, 64, 128 or "
                   "256; value <= 128); use --backend cpu", c->lin_k_dim, c->lin_v_dim);
        return -1;
    }
    cu_model *cm = (cu_model *)dfl_calloc(1, sizeof *cm);
    m->be_data = cm;
    cm->n_layers = c->n_layers;
    cm->layers = (cu_layer *)dfl_calloc((size_t)c->n_layers, sizeof(cu_layer));
    char name[64];
    for (int l = 0; l < c->n_layers; l++) {
        const mdl_layer *L = &m->layers[l];
        cu_layer *D = &cm->layers[l];
        /* Gemma-4 attention_k_eq_v (no v_proj): the K rows twice, so v = Wk xn in the same bits as k */
        const wt_weight *qkv[3] = {&L->wq, &L->wk, L->wv.rows ? &L->wv : &L->wk}, *gu[2] = {&L->wg, &L->wu},
                        *o[1] = {&L->wo}, *d[1] = {&L->wd};
        D->hd = cfg_head_dim(c, l);
        D->nkv = cfg_kv_heads(c, l);
        D->idx = l;
        snprintf(name, sizeof name, "layer %d", l);
        if (c->linear_layer[l]) {
            const wt_weight *in[4] = {&L->lin_qkv, &L->lin_z, &L->lin_a, &L->lin_b}, *out[1] = {&L->lin_out};
            int C = 2 * c->lin_k_heads * c->lin_k_dim + c->lin_v_heads * c->lin_v_dim;
            D->linear = 1;
            if (cw_upload(&D->lin_in, in, 4, name, 0) != 0 || cw_upload(&D->lin_out, out, 1, name, 0) != 0 ||
                upload_vec(&D->conv_w, L->conv_w, C * c->lin_conv) != 0 ||
                upload_vec(&D->dt_bias, L->dt_bias, c->lin_v_heads) != 0 ||
                upload_vec(&D->neg_a, L->neg_a, c->lin_v_heads) != 0 ||
                upload_vec(&D->lin_norm, L->lin_norm, c->lin_v_dim) != 0)
                goto fail;
            cm->bytes += cw_bytes(&D->lin_in) + cw_bytes(&D->lin_out);
        } else if (cw_upload(&D->wqkv, qkv, 3, name, 0) != 0 || cw_upload(&D->wo, o, 1, name, 0) != 0) {
            goto fail;
        }
        if (L->experts) {
            if (upload_experts(D, L, c, name) != 0) goto fail;
            cm->bytes += cw_bytes(&D->router) + cw_bytes(&D->sh_gu) + cw_bytes(&D->sh_dn);
            for (int e = 0; e < c->n_experts; e++) cm->bytes += cw_bytes(&D->egu[e]) + cw_bytes(&D->edn[e]);
        }
        if ((!L->experts || c->g4_moe) &&
            (cw_upload(&D->wgu, gu, 2, name, 1) != 0 || cw_upload(&D->wd, d, 1, name, 0) != 0))
            goto fail;
        if (c->g4_moe) { /* the router's scale with H^-0.5 folded in, the block's norms */
            float *rs = (float *)dfl_malloc(sizeof(float) * (size_t)c->hidden);
            const float root = 1.0f / sqrtf((float)c->hidden);
            for (int i = 0; i < c->hidden; i++) rs[i] = L->router_scale[i] * root;
            int rc = upload_vec(&D->rscale, rs, c->hidden);
            free(rs);
            D->g4moe = 1;
            if (rc != 0 || upload_vec(&D->pes, L->router_pes, c->n_experts) != 0 ||
                upload_vec(&D->moe_in_norm, L->moe_in_norm, c->hidden) != 0 ||
                upload_vec(&D->ffn_out_norm1, L->ffn_out_norm1, c->hidden) != 0 ||
                upload_vec(&D->ffn_out_norm2, L->ffn_out_norm2, c->hidden) != 0)
                goto fail;
        }
        if (upload_vec(&D->in_norm, L->in_norm, c->hidden) != 0 ||
            upload_vec(&D->post_norm, L->post_norm, c->hidden) != 0 ||
            upload_vec(&D->q_norm, L->q_norm, D->hd) != 0 || upload_vec(&D->k_norm, L->k_norm, D->hd) != 0)
            goto fail;
        if (upload_vec(&D->attn_out_norm, L->attn_out_norm, c->hidden) != 0 ||
            upload_vec(&D->ffn_out_norm, L->ffn_out_norm, c->hidden) != 0 ||
            upload_vec(&D->ple_norm, L->ple_norm, c->hidden) != 0)
            goto fail;
        D->layer_scalar = c->arch == CFG_GEMMA4 ? L->layer_scalar : 1.0f;
        if (L->ple_gate.rows) {
            const wt_weight *pg[1] = {&L->ple_gate}, *pp[1] = {&L->ple_proj};
            if (cw_upload(&D->ple_gate, pg, 1, name, 0) != 0 || cw_upload(&D->ple_proj, pp, 1, name, 0) != 0) goto fail;
            cm->bytes += cw_bytes(&D->ple_gate) + cw_bytes(&D->ple_proj);
        }
        D->window = c->sliding_layer[l] ? c->window : 0;
        if (L->bq) { /* gpt-oss: q | k | v biases as one vector, the rows of wqkv */
            int Q = c->n_heads * c->head_dim, KV = c->n_kv_heads * c->head_dim;
            float *b = (float *)dfl_malloc(sizeof(float) * (size_t)(Q + 2 * KV));
            memcpy(b, L->bq, sizeof(float) * Q);
            memcpy(b + Q, L->bk, sizeof(float) * KV);
            memcpy(b + Q + KV, L->bv, sizeof(float) * KV);
            int rc = upload_vec(&D->bqkv, b, Q + 2 * KV) || upload_vec(&D->bo, L->bo, c->hidden);
            free(b);
            if (rc) goto fail;
        }
        if (upload_vec(&D->sinks, L->sinks, c->n_heads) != 0) goto fail;
        cm->bytes += cw_bytes(&D->wqkv) + cw_bytes(&D->wo) + cw_bytes(&D->wgu) + cw_bytes(&D->wd);
    }
    if (m->embed.rows > 0) {
        const wt_weight *e[1] = {&m->embed}, *h[1] = {&m->lm_head};
        if (cw_upload(&cm->embed, e, 1, "embed_tokens", 0) != 0) goto fail;
        cm->head_is_embed = m->lm_head.data == m->embed.data;
        if (cm->head_is_embed)
            cm->lm_head = cm->embed;
        else if (cw_upload(&cm->lm_head, h, 1, "lm_head", 0) != 0)
            goto fail;
        cm->bytes += cw_bytes(&cm->lm_head);
    }
    if (c->is_draft) {
        const wt_weight *f[1] = {&m->fc};
        if (cw_upload(&cm->fc, f, 1, "fc", 0) != 0 || upload_vec(&cm->hidden_norm, m->hidden_norm, c->hidden) != 0)
            goto fail;
        cm->bytes += cw_bytes(&cm->fc);
    }
    if (upload_vec(&cm->final_norm, m->final_norm, c->hidden) != 0) goto fail;
    if (c->ple) {
        const wt_weight *pe[1] = {&m->ple_embed}, *pm[1] = {&m->ple_model_proj};
        if (cw_upload(&cm->ple_embed, pe, 1, "embed_tokens_per_layer", 0) != 0 ||
            cw_upload(&cm->ple_model_proj, pm, 1, "per_layer_model_projection", 0) != 0 ||
            upload_vec(&cm->ple_proj_norm, m->ple_proj_norm, c->ple) != 0)
            goto fail;
        cm->bytes += cw_bytes(&cm->ple_model_proj);
    }
    return 0;
fail:
    dfl_preferr("cuda: loading weights");
    cu_release(p, m);
    return -1;
}

/* Launch a kernel of a forward: with programmatic dependent launch where
 * the GPU has it (sm_90+; DFLASH_CUDA_PDL=0 turns it off for comparison),
 * so that it may start while the previous kernel drains; the kernels' side
 * of the contract is cu_pdl_wait / cu_pdl_trigger (cu_kernels.cuh). */
template <typename... KArgs, typename... Args>
static void launch_smem(void (*k)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args... args) {
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = at;
    cfg.numAttrs = use_pdl ? 1 : 0;
    cudaLaunchKernelEx(&cfg, k, ((KArgs)args)...);
}

template <typename... KArgs, typename... Args>
static void launch(void (*k)(KArgs...), dim3 grid, dim3 block, cudaStream_t s, Args... args) {
    launch_smem(k, grid, block, 0, s, args...);
}

/* ---- launches ------------------------------------------------------------------ */

/* One launch for T rows: blocks of up to 32 rows along grid.y, each with
 * ceil(min(T, 32) / 8) column tiles. The unroll is picked per (kind, tile
 * count) to stay within 128 registers (quantized weights hold scales per
 * step); it changes the schedule only, so it may depend on T. */
/* Which dequantization a quantized weight's GEMM runs (the DQ of k_gemm):
 * Q4 in the integer-MMA order (w.iq) folds its scale every 32, 64 or 128
 * columns (DQ 2, 3, 4: the group, or the step); otherwise gemm_dq's PRMT
 * (1) or shift/mask (0) form, which give the same bits. */
static int gemm_dq_of(const cw_weight &w) {
    if (w.kind == CW_BF16) return 0;
    if (w.kind == CW_Q4 && w.mx) return -1; /* MXFP4 codes: the PRMT form with their table */
    if (w.kind == CW_Q4 && w.iq) return (w.group == 32 ? 2 : w.group == 64 ? 3 : 4) + (w.sdt == SC_F32 ? 3 : 0);
    return gemm_dq;
}

/* TL: the k_gemm with a tail (cu_tail; k_gemm's TAIL), only for SW = 0 */
template <int MOE, int NT, int U, int SW, int TL, int DQ, typename... A>
static void gemm_iq_go(cudaStream_t s, dim3 grid, dim3 block, A... args) {
    if constexpr (MOE) launch(k_gemm_moe<CW_Q4, NT, U, SW, DQ>, grid, block, s, args...);
    else launch(k_gemm<CW_Q4, NT, U, SW, DQ, TL>, grid, block, s, args...);
}

/* The integer-MMA kernel for DQ 2..7 (folds of 32/64/128 columns, 16-bit
 * or f32 scales); f32 scales with folds of 32 hold 8 words a row and step,
 * so they run at most U = 2. */
template <int MOE, int NT, int U, int SW, int TL, typename... A>
static void gemm_iq_dq(cudaStream_t s, dim3 grid, dim3 block, int dq, A... args) {
    constexpr int U5 = U > 2 ? 2 : U;
    switch (dq) {
    case 2: gemm_iq_go<MOE, NT, U, SW, TL, 2>(s, grid, block, args...); break;
    case 3: gemm_iq_go<MOE, NT, U, SW, TL, 3>(s, grid, block, args...); break;
    case 4: gemm_iq_go<MOE, NT, U, SW, TL, 4>(s, grid, block, args...); break;
    case 5: gemm_iq_go<MOE, NT, U5, SW, TL, 5>(s, grid, block, args...); break;
    case 6: gemm_iq_go<MOE, NT, U, SW, TL, 6>(s, grid, block, args...); break;
    default: gemm_iq_go<MOE, NT, U, SW, TL, 7>(s, grid, block, args...); break;
    }
}

/* k_gemm or k_gemm_moe (MOE) for one NT and the weight's DQ. The unroll U
 * is timing only (gemm_iq_dq picks it for the integer-MMA kernel). */
template <int MOE, int KIND, int NT, int U, int SW, int TL, typename... A>
static void gemm_go(cudaStream_t s, dim3 grid, dim3 block, int dq, A... args) {
    if constexpr (KIND == CW_Q4) {
        if (dq >= 2) {
            if (NT > 1 && iq_unroll == 2) gemm_iq_dq<MOE, NT, 2, SW, TL>(s, grid, block, dq, args...);
            else gemm_iq_dq<MOE, NT, 4, SW, TL>(s, grid, block, dq, args...);
            return;
        }
    }
    if constexpr (KIND == CW_Q4) {
        if (dq == -1) {
            if constexpr (MOE) launch(k_gemm_moe<KIND, NT, U, SW, -1>, grid, block, s, args...);
            else launch(k_gemm<KIND, NT, U, SW, -1, TL>, grid, block, s, args...);
            return;
        }
    }
    if constexpr (MOE) {
        if (dq == 1) launch(k_gemm_moe<KIND, NT, U, SW, 1>, grid, block, s, args...);
        else launch(k_gemm_moe<KIND, NT, U, SW, 0>, grid, block, s, args...);
    } else {
        if (dq == 1) launch(k_gemm<KIND, NT, U, SW, 1, TL>, grid, block, s, args...);
        else launch(k_gemm<KIND, NT, U, SW, 0, TL>, grid, block, s, args...);
    }
}

/* One launch for T rows: blocks of up to 32 rows along grid.y, each with
 * ceil(min(T, 32) / 8) column tiles. The unroll is picked per (kind, tile
 * count) to stay within 128 registers (quantized weights hold scales per
 * step); it changes the schedule only, so it may depend on T. */
template <int KIND, int U, int SW, int TL>
static void gemm_launch(cudaStream_t s, const cw_weight &w, int N, const bf16 *x, int ldx, int T, float *y, int ldy,
                        int acc, bf16 *h, int ldh, const cu_tail &tl) {
    dim3 grid((N + 15) / 16, (T + 31) / 32), block(32 * w.split);
    constexpr int UQ = KIND == CW_BF16 ? U : 4;
    int dq = gemm_dq_of(w);
    if constexpr (TL) { /* T <= TAIL_MAX_ROWS = 16: one or two column tiles */
        if (T <= 8) gemm_go<0, KIND, 1, U, SW, 1>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
        else gemm_go<0, KIND, 2, UQ, SW, 1>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
        return;
    }
    switch (T >= 32 ? 4 : (T + 7) / 8) {
    case 1: gemm_go<0, KIND, 1, U, SW, 0>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl); break;
    case 2: gemm_go<0, KIND, 2, UQ, SW, 0>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl); break;
    case 3: gemm_go<0, KIND, 3, UQ, SW, 0>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl); break;
    default: gemm_go<0, KIND, 4, UQ, SW, 0>(s, grid, block, dq, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl); break;
    }
}

/* Rows past 32 (a prefill) go in the same launch as grid.y blocks: one
 * launch per matrix instead of one per 32 rows (prefill was bound by
 * launches). DFLASH_CUDA_GEMM_GRID=0 launches 32 rows at a time, for
 * comparison; the bits are the same either way. */
template <int KIND, int SW>
static void gemm_kind(cudaStream_t s, const cw_weight &w, int N, const bf16 *x, int ldx, int T, float *y, int ldy,
                      int acc, bf16 *h, int ldh, const cu_tail &tl) {
    if constexpr (SW == 0) {
        if (tl.kind != TAIL_NONE) { /* T <= fuse_max_t: one launch, the kernels with a tail */
            gemm_launch<KIND, 4, SW, 1>(s, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
            return;
        }
    }
    int per = gemm_grid ? T : 32;
    for (int t0 = 0; t0 < T; t0 += per) {
        int tn = T - t0 < per ? T - t0 : per;
        const bf16 *xx = x + (size_t)t0 * ldx;
        float *yy = y ? y + (size_t)t0 * ldy : NULL;
        bf16 *hh = h ? h + (size_t)t0 * ldh : NULL;
        gemm_launch<KIND, 4, SW, 0>(s, w, N, xx, ldx, tn, yy, ldy, acc, hh, ldh, tl);
    }
}

template <int SW>
static void gemm_any(cudaStream_t s, const cw_weight &w, int N, const bf16 *x, int ldx, int T, float *y, int ldy,
                     int acc, bf16 *h, int ldh, const cu_tail &tl) {
    if (w.kind == CW_BF16) gemm_kind<CW_BF16, SW>(s, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
    else if (w.kind == CW_Q8) gemm_kind<CW_Q8, SW>(s, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
    else gemm_kind<CW_Q4, SW>(s, w, N, x, ldx, T, y, ldy, acc, h, ldh, tl);
}

static const cu_tail no_tail = {TAIL_NONE};

/* y[T][ldy] (+)= x[T][ldx] . W^T for output rows 0..N-1 of w. */
static void gemm(cudaStream_t s, const cw_weight &w, int N, const bf16 *x, int ldx, int T, float *y, int ldy, int acc) {
    gemm_any<0>(s, w, N, x, ldx, T, y, ldy, acc, NULL, 0, no_tail);
}

static long n_tail_launches; /* cu_tail_launches() */
extern "C" long cu_tail_launches(void) { return n_tail_launches; }

/* The same with a tail (cu_tail: row work in the launch's last blocks, in
 * place of a kernel of its own); T <= fuse_max_t. */
static void gemm_tail(cudaStream_t s, const cw_weight &w, int N, const bf16 *x, int ldx, int T, float *y, int ldy,
                      int acc, const cu_tail &tl) {
    gemm_any<0>(s, w, N, x, ldx, T, y, ldy, acc, NULL, 0, tl);
    n_tail_launches++;
}

/* h[T][ldh] = bf16(silu(gate) * up) with w the gate/up weight uploaded with
 * interleave8 (w.rows = 2 * pad8(I) rows): the SwiGLU in the GEMM's epilogue. */
static void gemm_swiglu(cudaStream_t s, const cw_weight &w, const bf16 *x, int ldx, int T, bf16 *h, int ldh) {
    gemm_any<1>(s, w, w.rows, x, ldx, T, NULL, 0, 0, h, ldh, no_tail);
}

/* The experts' GEMMs of a T-row forward (cu_kernels.cuh, k_gemm_moe): w
 * gives the shape, mm the weights and rows. An expert holds at most T pairs,
 * so NT comes from T as in gemm_launch and a row's sums are k_gemm's. */
template <int KIND, int SW>
static void gemm_moe_kind(cudaStream_t s, const cw_weight &w, cu_moe_map mm, int N, int T, int slots, const bf16 *x,
                          int ldx, float *y, int ldy, bf16 *h, int ldh) {
    int nt = T >= 32 ? 4 : (T + 7) / 8;
    mm.per = (T + 8 * nt - 1) / (8 * nt);
    dim3 grid((N + 15) / 16, slots * mm.per), block(32 * w.split);
    int dq = KIND == CW_BF16 ? 0 : w.kind == CW_Q4 && (w.iq || w.mx) ? gemm_dq_of(w) : 1;
    switch (nt) {
    case 1: gemm_go<1, KIND, 1, 4, SW, 0>(s, grid, block, dq, w, mm, N, x, ldx, y, ldy, h, ldh); break;
    case 2: gemm_go<1, KIND, 2, 4, SW, 0>(s, grid, block, dq, w, mm, N, x, ldx, y, ldy, h, ldh); break;
    case 3: gemm_go<1, KIND, 3, 4, SW, 0>(s, grid, block, dq, w, mm, N, x, ldx, y, ldy, h, ldh); break;
    default: gemm_go<1, KIND, 4, 4, SW, 0>(s, grid, block, dq, w, mm, N, x, ldx, y, ldy, h, ldh); break;
    }
}

template <int SW>
static void gemm_moe(cudaStream_t s, const cw_weight &w, cu_moe_map mm, int N, int T, int slots, const bf16 *x,
                     int ldx, float *y, int ldy, bf16 *h, int ldh) {
    if (w.kind == CW_BF16) gemm_moe_kind<CW_BF16, SW>(s, w, mm, N, T, slots, x, ldx, y, ldy, h, ldh);
    else if (w.kind == CW_Q8) gemm_moe_kind<CW_Q8, SW>(s, w, mm, N, T, slots, x, ldx, y, ldy, h, ldh);
    else gemm_moe_kind<CW_Q4, SW>(s, w, mm, N, T, slots, x, ldx, y, ldy, h, ldh);
}

/* rows of x that k_rmsnorm4 takes (else k_rmsnorm) */
static int rmsnorm4_fits(const float *x, int ldx, int n) {
    return n % 4 == 0 && n <= RN_THREADS * 4 * RN_PER && ldx % 4 == 0 && ((uintptr_t)x & 15) == 0;
}

static void rmsnorm(cudaStream_t s, const float *x, int ldx, const float *w, int n, float eps, int rows, bf16 *ob,
                    int ldo) {
    if (rmsnorm4_fits(x, ldx, n))
        launch(k_rmsnorm4, rows, RN_THREADS, s, x, ldx, w, n, eps, ob, ldo);
    else
        launch(k_rmsnorm, rows, 256, s, x, ldx, w, n, eps, ob, ldo);
}

/* out[r] = first index of the maximum of l[r][0..n), r < rows (stride ld);
 * pv/pi: scratch [rows][AMX_PARTS]. */
static void argmax(cudaStream_t s, const float *l, int ld, int n, int rows, float *pv, int *pi, int32_t *out,
                   float *best) {
    launch(k_argmax_part, dim3(AMX_PARTS, rows), 256, s, l, ld, n, pv, pi);
    launch(k_argmax_merge, rows, 32, s, pv, pi, out, best);
}

/* Per-head RMSNorm + RoPE (+ K/V cache store) over grid (T, nq + nk), one
 * warp per head; the register form for the usual head sizes. */
static void norm_rope(cudaStream_t s, float *buf, int ldb, int q_off, int nq, const float *qn, int k_off, int v_off,
                      int nk, const float *kn, int hd, int rh, float eps, const float *cos_t, const float *sin_t,
                      const int *pos, float *kc, float *vc, int n_ctx, int T) {
    dim3 g(T, nq + nk);
    switch (rh == hd / 2 ? hd : 0) { /* partial RoPE (rh < hd / 2): the strided form */
    case 64:
        launch(k_norm_rope_r<64>, g, 32, s, buf, ldb, q_off, nq, qn, k_off, v_off, nk, kn, eps, cos_t, sin_t, pos, kc,
               vc, n_ctx);
        break;
    case 128:
        launch(k_norm_rope_r<128>, g, 32, s, buf, ldb, q_off, nq, qn, k_off, v_off, nk, kn, eps, cos_t, sin_t, pos, kc,
               vc, n_ctx);
        break;
    case 256:
        launch(k_norm_rope_r<256>, g, 32, s, buf, ldb, q_off, nq, qn, k_off, v_off, nk, kn, eps, cos_t, sin_t, pos, kc,
               vc, n_ctx);
        break;
    default:
        launch(k_norm_rope, g, 32, s, buf, ldb, q_off, nq, qn, k_off, v_off, nk, kn, hd, rh, eps, cos_t, sin_t, pos, kc, vc,
               n_ctx);
    }
}

/* ---- shared layer shapes ------------------------------------------------------------ */

typedef struct {
    int H, Hp, hd, nh, nkv, Q, KV, Qp, I, Ip, V, L;
    float eps;
    int rh;                     /* rotary dims / 2 (Qwen3.5: partial) */
    int gated;                  /* Qwen3.5 gated attention: q_proj gives [nh][2 hd] */
    int n_lin;                  /* Gated DeltaNet layers (0: none) */
    int nk, nv, dk, dv, K, C;   /* their heads, dims, conv kernel; C = 2 nk dk + nv dv channels */
    int v_tiled;                /* cfg.lin_v_tiled */
    int vd, vdp, Cm;            /* nv dv, padded; Cm = C + vd + 2 nv: a lin_in output row */
    int E, EK, MI, MIp, S, Sp;  /* experts, per token, expert and shared-expert widths (0: none), padded */
    int norm_topk;
    /* gpt-oss: attention biases (bias), the experts' biases and clamped
     * SwiGLU of limit `limit` (oss; R: the gate/up rows, 2 pad8(MI)) */
    int bias, oss, R;
    float limit;
    float att_scale;            /* the scores' multiplier; 0: 1/sqrt(hd) */
    int need_split;             /* windows, sinks or a scale: only the chunked attention has them */
    /* Gemma-4: hd, nkv, Q, KV are a layer's (layer_dims); the model's dims
     * hold the widest layer's Q, KV (buffers) and Qp stays the widest for
     * every layer (the attention output's row stride) */
    int gemma, v_norm, geglu, Rd; /* Rd: the dense gate/up rows, 2 pad8(I) */
    int g4moe;                  /* Gemma-4's MoE block: gy holds the experts' gate/up sums (R rows) */
    int P, Pp;                  /* per-layer input width, padded (0: none) */
    float softcap, emb_scale;   /* emb_scale 0: none */
} cu_dims;

static cu_dims dims_of(const cfg_model *c, int vocab) {
    cu_dims d;
    d.H = c->hidden;
    d.Hp = pad(d.H, CW_COL_ALIGN);
    d.hd = c->head_dim;
    d.nh = c->n_heads;
    d.nkv = c->n_kv_heads;
    d.Q = d.nh * d.hd;
    d.KV = d.nkv * d.hd;
    d.Qp = pad(d.Q, CW_COL_ALIGN);
    d.I = c->inter;
    d.Ip = pad(d.I, CW_COL_ALIGN);
    d.V = vocab;
    d.L = c->n_layers;
    d.eps = c->eps;
    d.rh = (c->rot_dim ? c->rot_dim : c->head_dim) / 2;
    d.gated = c->attn_gate;
    d.n_lin = c->n_linear_layers;
    d.nk = c->lin_k_heads, d.nv = c->lin_v_heads, d.dk = c->lin_k_dim, d.dv = c->lin_v_dim, d.K = c->lin_conv;
    d.v_tiled = c->lin_v_tiled;
    d.C = 2 * d.nk * d.dk + d.nv * d.dv;
    d.vd = d.nv * d.dv;
    d.vdp = pad(d.vd, CW_COL_ALIGN);
    d.Cm = d.C + d.vd + 2 * d.nv;
    d.E = c->n_moe_layers ? c->n_experts : 0;
    d.EK = d.E ? c->n_experts_used : 0;
    d.MI = d.E ? c->moe_inter : 0;
    d.MIp = pad(d.MI, CW_COL_ALIGN);
    d.S = d.E ? c->shared_inter : 0;
    d.Sp = pad(d.S, CW_COL_ALIGN);
    d.norm_topk = c->norm_topk;
    d.bias = c->attn_bias;
    d.oss = c->arch == CFG_GPT_OSS && d.E;
    d.R = 2 * pad(d.MI, 8);
    d.limit = c->swiglu_limit;
    d.att_scale = c->attn_scale;
    d.need_split = c->n_sliding_layers || c->attn_sinks || c->attn_scale != 0;
    d.gemma = c->arch == CFG_GEMMA4;
    d.v_norm = c->v_norm;
    d.geglu = c->geglu;
    d.Rd = 2 * pad(d.I, 8);
    d.g4moe = c->g4_moe;
    d.P = c->ple;
    d.Pp = pad(d.P, CW_COL_ALIGN);
    d.softcap = c->softcap;
    d.emb_scale = d.gemma ? (float)sqrt((double)d.H) : 0.0f;
    if (d.gemma) { /* buffers for the widest layer */
        d.Q = cfg_max_q(c);
        d.KV = cfg_max_kv(c);
        d.Qp = pad(d.Q, CW_COL_ALIGN);
    }
    return d;
}

/* Layer l's shapes: its head width and kv heads (Gemma-4's full layers
 * differ), RoPE over its whole head there (the proportional table); Qp, the
 * attention output's stride, stays the model's. */
static cu_dims layer_dims(const cu_dims *d, const cfg_model *c, int l) {
    cu_dims e = *d;
    if (!d->gemma) return e;
    e.hd = cfg_head_dim(c, l);
    e.nkv = cfg_kv_heads(c, l);
    e.Q = e.nh * e.hd;
    e.KV = e.nkv * e.hd;
    if (!c->sliding_layer[l]) e.rh = e.hd / 2;
    return e;
}

/* Activations for `rows` rows of one model. */
typedef struct {
    float *x, *qkv;
    bf16 *xb, *att, *hb;
    float *qg, *gate;   /* gated attention: q_proj output [rows][2Q + 2KV], gates [rows][Q] (else NULL) */
    float *mix, *cv;    /* Gated DeltaNet: lin_in output [rows][Cm], conv output [rows][C] */
    bf16 *core;         /* [rows][vdp] the delta rule's gated output, out_proj's input */
    /* expert block, P = rows * EK pairs (k_moe_* in cu_kernels.cuh) */
    float *rl, *wsel;   /* [rows][E] router logits, [rows][EK] weights by rank */
    int *sel, *slot;    /* [rows][EK] experts by rank, each pair's place in the grouped order */
    int *pair_row, *start, *active, *n_active; /* [P], [E + 1], [E], [1] */
    bf16 *he;           /* [P][MIp] the experts' SwiGLU outputs */
    float *ye, *sh;     /* [P][H] expert outputs, [rows][H] the shared expert's */
    bf16 *shb;          /* [rows][Sp] the shared expert's SwiGLU output */
    float *gy;          /* gpt-oss, Gemma-4 MoE: [P][R] the experts' gate/up sums (interleave8 order) */
    float *ob;          /* gpt-oss, Gemma-4: [rows][H] a projection's output before its bias or norm */
    float *gyd;         /* Gemma-4: [rows][Rd] the dense gate/up sums (interleave8 order) */
    float *ple, *pproj; /* Gemma-4 per-layer inputs: [rows][L P] each layer's, the projection's output */
    float *pt;          /* [rows][P] a layer's gate */
    bf16 *pg;           /* [rows][Pp] gelu(gate) * input */
    unsigned *tickets;  /* [TAIL_TICKETS] the GEMM tails' counters (cu_tail), zero between launches */
} cu_act;

static int act_alloc(cu_act *a, const cu_dims *d, int rows) {
    memset(a, 0, sizeof *a);
    if (cu_alloc(&a->x, sizeof(float) * rows * d->H) || cu_alloc(&a->xb, sizeof(bf16) * rows * d->Hp) ||
        cu_alloc(&a->qkv, sizeof(float) * rows * (d->Q + 2 * d->KV)) ||
        cu_alloc(&a->att, sizeof(bf16) * rows * d->Qp) ||
        cu_alloc(&a->hb, sizeof(bf16) * rows * d->Ip) || cu_alloc(&a->tickets, sizeof(unsigned) * TAIL_TICKETS))
        return -1;
    if (d->gated && (cu_alloc(&a->qg, sizeof(float) * rows * (2 * d->Q + 2 * d->KV)) ||
                     cu_alloc(&a->gate, sizeof(float) * rows * d->Q)))
        return -1;
    if (d->n_lin && (cu_alloc(&a->mix, sizeof(float) * rows * d->Cm) || cu_alloc(&a->cv, sizeof(float) * rows * d->C) ||
                     cu_alloc(&a->core, sizeof(bf16) * rows * d->vdp)))
        return -1;
    size_t P = (size_t)rows * d->EK;
    if (d->E && (cu_alloc(&a->rl, sizeof(float) * rows * d->E) || cu_alloc(&a->wsel, sizeof(float) * P) ||
                 cu_alloc(&a->sel, sizeof(int) * P) || cu_alloc(&a->slot, sizeof(int) * P) ||
                 cu_alloc(&a->pair_row, sizeof(int) * P) || cu_alloc(&a->start, sizeof(int) * (d->E + 1)) ||
                 cu_alloc(&a->active, sizeof(int) * d->E) || cu_alloc(&a->n_active, sizeof(int)) ||
                 cu_alloc(&a->he, sizeof(bf16) * P * d->MIp) ||
                 cu_alloc(&a->ye, sizeof(float) * P * d->H)))
        return -1;
    if (d->S && (cu_alloc(&a->sh, sizeof(float) * rows * d->H) || cu_alloc(&a->shb, sizeof(bf16) * rows * d->Sp)))
        return -1;
    if ((d->oss || d->g4moe) && cu_alloc(&a->gy, sizeof(float) * P * d->R)) return -1;
    if ((d->bias || d->gemma) && cu_alloc(&a->ob, sizeof(float) * rows * d->H)) return -1;
    if (d->geglu && cu_alloc(&a->gyd, sizeof(float) * rows * d->Rd)) return -1;
    if (d->P && (cu_alloc(&a->ple, sizeof(float) * rows * d->L * d->P) ||
                 cu_alloc(&a->pproj, sizeof(float) * rows * d->L * d->P) ||
                 cu_alloc(&a->pt, sizeof(float) * rows * d->P) || cu_alloc(&a->pg, sizeof(bf16) * rows * d->Pp)))
        return -1;
    /* cu_alloc zeroes on the legacy stream: finished before the sequence's
     * own (non-blocking) stream reads a buffer - the tail counters must
     * start at 0 */
    if (cudaStreamSynchronize(0) != cudaSuccess) {
        dfl_seterr("cuda: zeroing the activations: %s", cudaGetErrorString(cudaGetLastError()));
        return -1;
    }
    return 0;
}

static void act_free(cu_act *a) {
    cudaFree(a->x);
    cudaFree(a->xb);
    cudaFree(a->qkv);
    cudaFree(a->att);
    cudaFree(a->hb);
    cudaFree(a->tickets);
    cudaFree(a->qg);
    cudaFree(a->gate);
    cudaFree(a->mix);
    cudaFree(a->cv);
    cudaFree(a->core);
    void *moe[] = {a->rl, a->wsel, a->sel, a->slot, a->pair_row, a->start, a->active, a->n_active, a->he,
                   a->ye, a->sh, a->shb, a->gy, a->ob, a->gyd, a->ple, a->pproj, a->pt, a->pg};
    for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) cudaFree(moe[i]);
}

/* ---- Gated DeltaNet state (Qwen3.5), the rule of backend.h / deltanet.h ----
 * Per sequence and linear layer li: conv [K-1][C] and S [nv][dk][dv]; a
 * forward of T <= BE_DN_KEEP rows first copies both to the snapshot and keeps
 * its lin_in rows (keep [li][BE_DN_KEEP][Cm]); truncate into those rows restores
 * the snapshot and replays them through the same kernels. A longer forward
 * keeps no snapshot (truncate below its end restarts the sequence). */
typedef struct {
    float *conv, *rec, *snap_conv, *snap_rec, *keep;
    size_t conv_n, rec_n;   /* floats of one layer's conv / S */
    int snap_len, n_keep;   /* -1: no snapshot */
} cu_dn;

static int dn_dk_supported(int dk) { return dk == 16 || dk == 32 || dk == 64 || dk == 128 || dk == 256; }

/* The conv + delta rule of layer li on T rows of mix (ldm = Cm) into
 * core (NULL: state only, a replay). */
static void dn_rows(cudaStream_t s, const cu_dims *d, const cu_layer *L, cu_dn *dn, int li, const float *mix, float *cv,
                    bf16 *core, int T) {
    launch(k_dn_conv, dim3((d->C + 127) / 128), 128, s, mix, d->Cm, T, dn->conv + (size_t)li * dn->conv_n,
           (const float *)L->conv_w, d->K, cv, d->C);
    float *rec = dn->rec + (size_t)li * dn->rec_n;
    int zo = d->C, ao = d->C + d->vd, bo = d->C + d->vd + d->nv;
    int nb = (d->dv + 31) & ~31; /* whole warps per P (threads per column) */
#define DN_DELTA(DK, P)                                                                                        \
    launch_smem(k_dn_delta<DK, P>, dim3(d->nv), dim3(nb * (P)), sizeof(float) * (2 * ((DK) + 4 * (P)) + 96), s,  \
                (const float *)cv, d->C, mix, d->Cm, zo, ao, bo, rec, d->nk, d->nv, d->v_tiled, d->dv,            \
                (const float *)L->dt_bias, (const float *)L->neg_a, (const float *)L->lin_norm, d->eps, core, d->vdp, T)
    switch (d->dk) {
    case 16: DN_DELTA(16, 1); break;
    case 32: DN_DELTA(32, 1); break;
    case 64: DN_DELTA(64, 2); break;
    case 128: DN_DELTA(128, 4); break;
    default: DN_DELTA(256, 4); break;
    }
#undef DN_DELTA
}

static int att_supported(int hd) { return hd == 16 || hd == 32 || hd == 64 || hd == 128 || hd == 256; }
/* head size 512 (Gemma-4's full layers) has the chunked attention only */
static int att_supported_split(int hd) { return att_supported(hd) || hd == 512; }

/* Scratch of the chunked attention (k_att_part / k_att_merge) for one
 * sequence: a launch serves at most ATT_UNIT_Q / G rows, so query slots
 * (row - t0) * nq + h stay below ATT_UNIT_Q * nkv.
 *   po  f32 [ATT_UNIT_Q * nkv][nch][hd] chunk partials O_c
 *   pml f32x2 [ATT_UNIT_Q * nkv][nch]  (m_c, L_c)
 * nch = chunks of the positions a row can see. po == NULL: the older
 * one-block-per-row kernels (DFLASH_CUDA_ATT_SPLIT=0, or a head grouping the
 * chunked kernel does not take). */
typedef struct {
    float *po;
    float2 *pml;
    int nch;
} cu_split;

static int hd_chunk(int hd) {
    switch (hd) {
    case 16: return cu_att_chunk(16);
    case 32: return cu_att_chunk(32);
    case 64: return cu_att_chunk(64);
    case 128: return cu_att_chunk(128);
    case 256: return cu_att_chunk(256);
    default: return cu_att_chunk(512);
    }
}

template <int HD>
static cudaError_t split_attr(void) {
    int smem = (int)(sizeof(float) * cu_att_smem(HD, cu_att_unit(HD)));
    cudaError_t e = cudaFuncSetAttribute(k_att_part<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return e != cudaSuccess ? e : cudaFuncSetAttribute(k_att_part_seg<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
}

/* positions: the most keys a row of this sequence sees */
static int split_alloc(cu_split *sp, const cu_be *be, const cu_dims *d, const cfg_model *c, int positions) {
    memset(sp, 0, sizeof *sp);
    int grouped = 1; /* every attention layer's query heads a multiple (<= ATT_UNIT_Q) of its K/V heads */
    for (int l = 0; l < c->n_layers; l++) {
        cu_dims e = layer_dims(d, c, l);
        if (!c->linear_layer[l] && (e.nh % e.nkv != 0 || e.nh / e.nkv > cu_att_unit(e.hd))) grouped = 0;
    }
    if (d->need_split && !grouped) {
        dfl_seterr("backend cuda: %d query heads over %d K/V heads: the chunked attention (the one with sliding "
                   "windows, sinks and a score scale) needs a multiple of at most %d", d->nh, d->nkv, ATT_UNIT_Q);
        return -1;
    }
    if (!d->need_split && (!att_split || !grouped)) return 0;
    size_t po = 0, pm = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->linear_layer[l]) continue;
        cu_dims e = layer_dims(d, c, l);
        int hd = e.hd;
        size_t smem = sizeof(float) * (size_t)(hd == 16    ? cu_att_smem(16, cu_att_unit(16))
                                               : hd == 32  ? cu_att_smem(32, cu_att_unit(32))
                                               : hd == 64  ? cu_att_smem(64, cu_att_unit(64))
                                               : hd == 128 ? cu_att_smem(128, cu_att_unit(128))
                                               : hd == 256 ? cu_att_smem(256, cu_att_unit(256))
                                                           : cu_att_smem(512, cu_att_unit(512)));
        if (smem > be->prop.sharedMemPerBlockOptin) {
            if (!d->need_split) return 0;
            dfl_seterr("backend cuda: head_dim %d: the chunked attention needs %zu bytes of shared memory", hd, smem);
            return -1;
        }
        cudaError_t err = hd == 16    ? split_attr<16>()
                          : hd == 32  ? split_attr<32>()
                          : hd == 64  ? split_attr<64>()
                          : hd == 128 ? split_attr<128>()
                          : hd == 256 ? split_attr<256>()
                                      : split_attr<512>();
        if (err != cudaSuccess) {
            dfl_seterr("cuda: shared memory for the chunked attention: %s", cudaGetErrorString(err));
            return -1;
        }
        int nch = (positions + hd_chunk(hd) - 1) / hd_chunk(hd);
        if (nch > sp->nch) sp->nch = nch;
        size_t slots = (size_t)ATT_UNIT_Q * e.nkv;
        if (slots * hd > po) po = slots * hd;
        if (slots > pm) pm = slots;
    }
    if (cu_alloc(&sp->po, sizeof(float) * po * sp->nch) || cu_alloc(&sp->pml, sizeof(float2) * pm * sp->nch)) {
        cudaFree(sp->po);
        sp->po = NULL;
        return -1;
    }
    return 0;
}

static void split_free(cu_split *sp) {
    cudaFree(sp->po);
    cudaFree(sp->pml);
    memset(sp, 0, sizeof *sp);
}

/* The chunked attention of n_blk rows: launches of at most ATT_UNIT_Q / G
 * rows, each a k_att_part over every (chunk, K/V head) and a k_att_merge.
 * The grid covers every chunk of the sequence (a captured graph replays at
 * any position); blocks past the keys return at once. */
template <int HD>
static void attention_split(cudaStream_t s, const cu_dims *d, const cu_split *sp, const float *q, int ldq,
                            const float *kc, const float *vc, int n_ctx, int causal, const int *pos, const float *kb,
                            const float *vb, int n_blk, bf16 *out, int window, const float *sinks) {
    int G = d->nh / d->nkv, rb = cu_att_unit(HD) / G;
    for (int t0 = 0; t0 < n_blk; t0 += rb) {
        int rows = n_blk - t0 < rb ? n_blk - t0 : rb;
        size_t smem = sizeof(float) * cu_att_smem(HD, rows * G);
        launch_smem(k_att_part<HD>, dim3(sp->nch, d->nkv), ATT_PART_THREADS, smem, s, q, ldq, kc, vc, n_ctx, causal,
                    pos, kb, vb, ldq, n_blk, t0, rows, d->nh, d->nkv, sp->po, sp->pml, sp->nch, d->att_scale, window);
        launch(k_att_merge<HD>, dim3(rows, d->nh), HD, s, causal, pos, n_blk, t0, d->nh, (const float *)sp->po,
               (const float2 *)sp->pml, sp->nch, out, d->Qp, window, sinks);
    }
}

/* Attention kernel for head_dim 64/128: ATT_AUTO picks by width (below);
 * DFLASH_CUDA_ATT=head or =gqa forces one grouping (for comparison: the same
 * bits). att_mode is set in tuning_init. */
template <int HD, int G>
static void attention16(cudaStream_t s, const cu_dims *d, const float *q, int ldq, const float *kc, const float *vc,
                        int n_ctx, int causal, const int *pos, const float *kb, const float *vb, int n_blk,
                        bf16 *out) {
    launch(k_attention16<HD, G>, dim3(n_blk, d->nh / G), 32 * ATT_WARPS, s, q, ldq, kc, vc, n_ctx, causal, pos, kb,
           vb, ldq, n_blk, d->nh, d->nkv, out, d->Qp);
}

template <int HD>
static void attention_hd(cudaStream_t s, const cu_dims *d, const float *q, int ldq, const float *kc, const float *vc,
                         int n_ctx, int causal, const int *pos, const float *kb, const float *vb, int n_blk,
                         bf16 *out) {
    if constexpr (HD == 64 || HD == 128) {
        /* grouped when it still gives >= 32 blocks (a verify): fewer K/V
         * reads; per head for a decode step: more SMs at work */
        int G = d->nh / d->nkv;
        int grouped = att_mode == ATT_GQA || (att_mode == ATT_AUTO && n_blk * d->nkv >= 32);
        if (grouped && G == 2) attention16<HD, 2>(s, d, q, ldq, kc, vc, n_ctx, causal, pos, kb, vb, n_blk, out);
        else if (grouped && G == 4) attention16<HD, 4>(s, d, q, ldq, kc, vc, n_ctx, causal, pos, kb, vb, n_blk, out);
        else attention16<HD, 1>(s, d, q, ldq, kc, vc, n_ctx, causal, pos, kb, vb, n_blk, out);
    } else {
        launch(k_attention<HD>, dim3(n_blk, d->nh), 32 * ATT_WARPS, s, q, ldq, kc, vc, n_ctx, causal, pos, kb, vb,
               ldq, n_blk, d->nh, d->nkv, out, d->Qp);
    }
}

/* Attention of T rows (att_supported(hd) was checked at create). */
static void attention(cudaStream_t s, const cu_dims *d, const cu_split *sp, const float *qkv, int ldq,
                      const float *kc, const float *vc, int n_ctx, int causal, const int *pos, int T, bf16 *out,
                      int w, const float *sk) {
    const float *kb = qkv + d->Q, *vb = qkv + d->Q + d->KV;
    if (sp && sp->po) { /* always, for a model with windows, sinks or a scale (split_alloc) */
        switch (d->hd) {
        case 16: attention_split<16>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        case 32: attention_split<32>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        case 64: attention_split<64>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        case 128: attention_split<128>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        case 256: attention_split<256>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        default: attention_split<512>(s, d, sp, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out, w, sk); break;
        }
        return;
    }
    switch (d->hd) {
    case 16: attention_hd<16>(s, d, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out); break;
    case 32: attention_hd<32>(s, d, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out); break;
    case 64: attention_hd<64>(s, d, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out); break;
    case 128: attention_hd<128>(s, d, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out); break;
    default: attention_hd<256>(s, d, qkv, ldq, kc, vc, n_ctx, causal, pos, kb, vb, T, out); break;
    }
}

typedef void (*moe_route_fn)(const float *, const float *, int, int, int, int, const float *, int *, float *, int *,
                             int *, int *, int *, int *);
static moe_route_fn moe_route_kernel(int E) {
    return E <= 128 ? k_moe_route<4> : E <= 256 ? k_moe_route<8> : E <= 512 ? k_moe_route<16> : k_moe_route<32>;
}

/* Gemma-4's MoE layer after its dense MLP (a->ob = Wd h; the CPU's g4_moe):
 * the router on RMSNorm(x) * rscale (bf16 rows, as every GEMM input),
 * softmax, top k renormalised, times pes (k_moe_route); the experts on
 * moe_in_norm(x): gate/up sums, GeGLU per pair (k_moe_geglu), down; then
 * x += ffn_out_norm(ffn_out_norm1(ob) + ffn_out_norm2(experts' sum))
 * (k_g4_moe_out). Each step per row or per pair: batch-invariant as moe(). */
static void g4_moe(cudaStream_t s, const cu_dims *d, const cu_layer *L, cu_act *a, int T) {
    int E = d->E, P = T * d->EK, slots = P < E ? P : E;
    rmsnorm(s, a->x, d->H, L->rscale, d->H, d->eps, T, a->xb, d->Hp);
    gemm(s, L->router, E, a->xb, d->Hp, T, a->rl, E, 0);
    launch(moe_route_kernel(E), 1, 1024, s, (const float *)a->rl, (const float *)NULL, T, E, d->EK, 1,
           (const float *)L->pes, a->sel, a->wsel, a->start, a->active, a->n_active, a->slot, a->pair_row);
    prof_mark(s, "g4 moe router+plan", cw_bytes(&L->router));
    rmsnorm(s, a->x, d->H, L->moe_in_norm, d->H, d->eps, T, a->xb, d->Hp);
    cu_moe_map gu = {L->eptr, L->eptr + E, a->pair_row, a->start, a->active, a->n_active, 0},
               dn = {L->eptr + 2 * E, L->eptr + 3 * E, NULL, a->start, a->active, a->n_active, 0};
    gemm_moe<0>(s, L->egu[0], gu, L->egu[0].rows, T, slots, a->xb, d->Hp, a->gy, d->R, NULL, 0);
    launch(k_moe_geglu, P, 256, s, (const float *)a->gy, d->R, d->MI, a->he, d->MIp);
    gemm_moe<0>(s, L->edn[0], dn, d->H, T, slots, a->he, d->MIp, a->ye, d->H, NULL, 0);
    prof_mark(s, "g4 moe experts", 0);
    launch(k_g4_moe_out, T, 256, s, a->x, a->ob, (const float *)a->ye, (const int *)a->slot, (const float *)a->wsel,
           d->EK, (const float *)L->ffn_out_norm1, (const float *)L->ffn_out_norm2, (const float *)L->ffn_out_norm,
           d->H, d->eps);
    prof_mark(s, "g4 moe out norms", 0);
}

/* The expert block on rows 0..T-1 of a (a->xb: their post-norm rows): x +=
 * each row's experts in rank order (+ the gated shared expert). The steps
 * and why a row's bits do not depend on the other rows: cu_kernels.cuh. */
static int moe(cudaStream_t s, const cu_dims *d, const cu_layer *L, cu_act *a, int T, const float *next_norm,
               bf16 *next_ob) {
    int P = T * d->EK, slots = P < d->E ? P : d->E; /* at most this many experts are active */
    gemm(s, L->router, d->E, a->xb, d->Hp, T, a->rl, d->E, 0);
    prof_mark(s, "gemm router", cw_bytes(&L->router));
    launch(moe_route_kernel(d->E), 1, 1024, s, (const float *)a->rl, (const float *)L->router_bias, T, d->E, d->EK,
           d->norm_topk, (const float *)NULL, a->sel, a->wsel, a->start, a->active, a->n_active, a->slot,
           a->pair_row);
    prof_mark(s, "moe route+plan", 0);
    double eb = 0; /* the expert bytes this block streams (profile only: needs the plan) */
    if (prof.on && !prof.skip) {
        int na = 0;
        cudaMemcpyAsync(&na, a->n_active, sizeof(int), cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        prof.moe_layers++;
        prof.moe_active += na;
        prof.moe_T = prof.only_T;
        eb = na;
        prof_mark(s, "(moe plan read back)", 0); /* the idle gap of that sync, not the GEMM's */
    }
    int E = d->E;
    cu_moe_map gu = {L->eptr, L->eptr + E, a->pair_row, a->start, a->active, a->n_active, 0},
               dn = {L->eptr + 2 * E, L->eptr + 3 * E, NULL, a->start, a->active, a->n_active, 0};
    if (L->ebg) { /* gpt-oss: the sums out, then biases + clamped SwiGLU per pair */
        gemm_moe<0>(s, L->egu[0], gu, L->egu[0].rows, T, slots, a->xb, d->Hp, a->gy, d->R, NULL, 0);
        launch(k_moe_oss_act, P, 256, s, (const float *)a->gy, d->R, (const int *)a->sel, (const int *)a->slot,
               (const float *)L->ebg, (const float *)L->ebu, d->MI, d->limit, a->he, d->MIp);
        prof_mark(s, "gemm experts gate_up+act", eb * cw_bytes(&L->egu[0]));
    } else {
        gemm_moe<1>(s, L->egu[0], gu, L->egu[0].rows, T, slots, a->xb, d->Hp, NULL, 0, a->he, d->MIp);
        prof_mark(s, "gemm experts gate_up+swiglu", eb * cw_bytes(&L->egu[0]));
    }
    gemm_moe<0>(s, L->edn[0], dn, d->H, T, slots, a->he, d->MIp, a->ye, d->H, NULL, 0);
    if (L->ebd) launch(k_moe_bias, P, 256, s, a->ye, d->H, (const int *)a->sel, (const int *)a->slot, (const float *)L->ebd);
    prof_mark(s, "gemm experts down", eb * cw_bytes(&L->edn[0]));
    if (L->sh_gate) {
        gemm_swiglu(s, L->sh_gu, a->xb, d->Hp, T, a->shb, d->Sp);
        gemm(s, L->sh_dn, d->H, a->shb, d->Sp, T, a->sh, d->H, 0);
        prof_mark(s, "gemm shared expert", cw_bytes(&L->sh_gu) + cw_bytes(&L->sh_dn));
    }
    if (next_norm && moe_fuse && d->H % 4 == 0 && d->H <= RN_THREADS * 4 * RN_PER) {
        launch(k_moe_combine_norm, T, RN_THREADS, s, a->x, d->H, (const float *)a->ye, (const int *)a->slot,
               (const float *)a->wsel, d->EK, (const float *)a->sh, (const float *)L->sh_gate, (const bf16 *)a->xb,
               d->Hp, next_norm, d->eps, next_ob, d->Hp);
        prof_mark(s, "moe combine+next rmsnorm", 0);
        return 1;
    }
    launch(k_moe_combine, T, 256, s, a->x, d->H, (const float *)a->ye, (const int *)a->slot, (const float *)a->wsel,
           d->EK, (const float *)a->sh, (const float *)L->sh_gate, (const bf16 *)a->xb, d->Hp);
    prof_mark(s, "moe combine", 0);
    return 0;
}

/* A tree batch's device tables for layer() (cu_tree.cuh; the layout there) */
typedef struct {
    const int *zero;  /* a device 0: norm_rope's position base over the gathered RoPE tables */
    const int *depth; /* [TREE_ANC] row depths */
    const int *anc;   /* [TREE_ANC][TREE_ANC] ancestor rows by depth */
} cu_tree;

/* The chunked attention of tree rows 0..T-1 (k_att_part_tree /
 * k_att_merge_tree, cu_tree.cuh), in launches of at most ATT_UNIT_Q / G
 * rows as attention_split. */
template <int HD>
static void attention_tree_hd(cudaStream_t s, const cu_dims *d, const cu_split *sp, const float *q, int ldq,
                              const float *kc, const float *vc, int n_ctx, const int *pos, const cu_tree *tr, int T,
                              bf16 *out, const float *sinks) {
    int G = d->nh / d->nkv, rb = cu_att_unit(HD) / G;
    for (int t0 = 0; t0 < T; t0 += rb) {
        int rows = T - t0 < rb ? T - t0 : rb;
        size_t smem = sizeof(float) * cu_att_smem(HD, rows * G);
        launch_smem(k_att_part_tree<HD>, dim3(sp->nch, d->nkv), ATT_PART_THREADS, smem, s, q, ldq, kc, vc, n_ctx,
                    pos, tr->depth, tr->anc, t0, rows, d->nh, d->nkv, sp->po, sp->pml, sp->nch, d->att_scale);
        launch(k_att_merge_tree<HD>, dim3(rows, d->nh), HD, s, pos, tr->depth, t0, d->nh, (const float *)sp->po,
               (const float2 *)sp->pml, sp->nch, out, d->Qp, sinks);
    }
}

static void attention_tree(cudaStream_t s, const cu_dims *d, const cu_split *sp, const float *qkv, int ldq,
                           const float *kc, const float *vc, int n_ctx, const int *pos, const cu_tree *tr, int T,
                           bf16 *out, const float *sk) {
    switch (d->hd) {
    case 16: attention_tree_hd<16>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    case 32: attention_tree_hd<32>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    case 64: attention_tree_hd<64>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    case 128: attention_tree_hd<128>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    case 256: attention_tree_hd<256>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    default: attention_tree_hd<512>(s, d, sp, qkv, ldq, kc, vc, n_ctx, pos, tr, T, out, sk); break;
    }
}

/* One transformer layer on rows 0..T-1 of a at positions *pos.. (device
 * memory: the launches can be captured once and replayed). Target (causal):
 * K/V of the rows are stored into kc/vc first and row t attends to cache rows
 * 0..*pos+t. Draft block (causal = 0): the rows attend, without mask, to
 * cache rows 0..*pos-1 and to every row of the block; nothing is stored.
 * A tree batch (tree != NULL, causal; cos_t/sin_t: the tables gathered per
 * row): row t at position *pos + depth, its K/V at cache row *pos + t, its
 * keys the committed rows and its ancestors (cu_tree.cuh). */
/* One sequence's rows in a layer's attention: rows row0..row0+T-1 of the
 * activations, at the positions from *pos on, over its K/V block of n_ctx
 * positions (NULL for a linear layer), with its RoPE tables and chunked
 * attention scratch. A forward of one sequence has one segment of all its
 * rows; cu_forward_multi one per sequence (everything else in a layer is a
 * row's own work: the GEMMs, norms and experts run over all rows at once). */
typedef struct {
    int row0, T;
    const int *pos;
    float *kc, *vc;
    int n_ctx;
    const float *cos_t, *sin_t;
    const cu_split *sp;
} cu_seg;

/* (C++17 has no designated initializers) */
static cu_seg seg_of(int row0, int T, const int *pos, float *kc, float *vc, int n_ctx, const float *cos_t,
                     const float *sin_t, const cu_split *sp) {
    cu_seg g;
    g.row0 = row0, g.T = T, g.pos = pos, g.kc = kc, g.vc = vc, g.n_ctx = n_ctx;
    g.cos_t = cos_t, g.sin_t = sin_t, g.sp = sp;
    return g;
}

/* A stacked step's device table for one layer (cu_kernels.cuh, cu_segd):
 * nseg sequences, their rows' sequence index, the longest one's rows, the
 * most chunks any sees, the step's chunk-partial scratch. NULL: a launch
 * per segment. */
typedef struct {
    const cu_segd *segs; /* device [nseg] */
    const int *rowseg;   /* device [rows] */
    int nseg, maxT, nch;
    float *po;
    float2 *pml;
} cu_stack;

template <int HD>
static void norm_rope_seg_hd(cudaStream_t s, const cu_dims *d, const cu_layer *L, float *qkv, int ldq, int rows,
                             const cu_stack *st, int store) {
    launch(k_norm_rope_seg<HD>, dim3(rows, d->nh + d->nkv), 32, s, qkv, ldq, 0, d->nh, (const float *)L->q_norm, d->Q,
           d->Q + d->KV, (const float *)L->k_norm, d->hd, d->rh, d->eps, st->segs, st->rowseg, store);
}

template <int HD>
static void attention_seg_hd(cudaStream_t s, const cu_dims *d, const float *qkv, int ldq, int causal, int rows,
                             const cu_stack *st, bf16 *out, int window, const float *sinks) {
    int G = d->nh / d->nkv, rb = cu_att_unit(HD) / G, upr = (st->maxT + rb - 1) / rb;
    int r = st->maxT < rb ? st->maxT : rb; /* the most rows a unit holds */
    launch_smem(k_att_part_seg<HD>, dim3(st->nch, d->nkv, st->nseg * upr), ATT_PART_THREADS,
                sizeof(float) * cu_att_smem(HD, r * G), s, qkv, ldq, d->Q, d->Q + d->KV, causal, st->segs, upr, d->nh,
                d->nkv, st->po, st->pml, d->att_scale, window);
    launch(k_att_merge_seg<HD>, dim3(rows, d->nh), HD, s, causal, st->segs, st->rowseg, d->nh, (const float *)st->po,
           (const float2 *)st->pml, out, d->Qp, window, sinks);
}

/* Every sequence's norm + RoPE (+ K/V store when causal) and chunked
 * attention of a stacked step in one launch each (the per-segment loop's
 * kernels and bits, cu_kernels.cuh). */
static void stacked_attention(cudaStream_t s, const cu_dims *d, const cu_layer *L, float *qkv, int ldq, int causal,
                              int rows, const cu_stack *st, bf16 *out, int window, const float *sinks, int rope) {
    if (rope) switch (d->rh == d->hd / 2 ? d->hd : 0) {
        case 64: norm_rope_seg_hd<64>(s, d, L, qkv, ldq, rows, st, causal); break;
        case 128: norm_rope_seg_hd<128>(s, d, L, qkv, ldq, rows, st, causal); break;
        case 256: norm_rope_seg_hd<256>(s, d, L, qkv, ldq, rows, st, causal); break;
        default: norm_rope_seg_hd<0>(s, d, L, qkv, ldq, rows, st, causal); break;
        }
    switch (d->hd) {
    case 16: attention_seg_hd<16>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    case 32: attention_seg_hd<32>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    case 64: attention_seg_hd<64>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    case 128: attention_seg_hd<128>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    case 256: attention_seg_hd<256>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    default: attention_seg_hd<512>(s, d, qkv, ldq, causal, rows, st, out, window, sinks); break;
    }
}

static int layer(cudaStream_t s, const cu_dims *d, const cu_layer *L, cu_act *a, int T, const cu_seg *seg, int nseg,
                 int causal, cu_dn *dn, int li, int normed, const float *next_norm, bf16 *next_ob,
                 const cu_tree *tree, const cu_stack *stk) {
    int ldq = d->Q + 2 * d->KV;
    /* one segment's fields, for the paths that take a single sequence (a
     * linear layer, a tree, the norm + RoPE tail): cu_forward_multi refuses
     * the first two and passes nseg > 1 only without the third */
    const cu_split *sp = seg[0].sp;
    const int *pos = seg[0].pos;
    float *kc = seg[0].kc, *vc = seg[0].vc;
    int n_ctx = seg[0].n_ctx;
    const float *cos_t = seg[0].cos_t, *sin_t = seg[0].sin_t;
    const int fuse = T <= fuse_max_t; /* GEMMs with a tail (cu_tail): one or two column tiles */
    /* the post-attention RMSNorm in the tail of the projection that adds into x */
    cu_tail post = no_tail;
    if (fuse && fuse_norm && rmsnorm4_fits(a->x, d->H, d->H)) {
        post.kind = TAIL_RMSNORM;
        post.ticket = a->tickets;
        post.w = L->post_norm;
        post.eps = d->eps;
        post.o = a->xb;
        post.ldo = d->Hp;
    }
    int post_normed = 0;
    if (!normed) { /* else the previous layer's expert block wrote a->xb (moe) */
        rmsnorm(s, a->x, d->H, L->in_norm, d->H, d->eps, T, a->xb, d->Hp);
        prof_mark(s, causal ? "rmsnorm" : "draft rmsnorm", 0);
    }
    if (L->linear) { /* Qwen3.5 Gated DeltaNet: x += out_proj(delta rule(conv(in_proj xn))) */
        gemm(s, L->lin_in, d->Cm, a->xb, d->Hp, T, a->mix, d->Cm, 0);
        prof_mark(s, "gemm lin_in", cw_bytes(&L->lin_in));
        if (dn->snap_len >= 0 && T <= BE_DN_KEEP) /* this forward's rows, for a replay (see cu_dn) */
            cudaMemcpyAsync(dn->keep + (size_t)li * BE_DN_KEEP * d->Cm, a->mix, sizeof(float) * T * d->Cm,
                            cudaMemcpyDeviceToDevice, s);
        dn_rows(s, d, L, dn, li, a->mix, a->cv, a->core, T);
        prof_mark(s, "deltanet", 0);
        if (post.kind != TAIL_NONE) {
            gemm_tail(s, L->lin_out, d->H, a->core, d->vdp, T, a->x, d->H, 1, post);
            post_normed = 1;
        } else {
            gemm(s, L->lin_out, d->H, a->core, d->vdp, T, a->x, d->H, 1);
        }
        prof_mark(s, post_normed ? "gemm lin_out+rmsnorm" : "gemm lin_out", cw_bytes(&L->lin_out));
    } else {
        float *qb = a->qkv;
        int roped = 0; /* the q/k norm + RoPE (+ K/V store) ran in the qkv GEMM's tail */
        if (d->gated) { /* q_proj rows [query | gate] per head: split them out */
            gemm(s, L->wqkv, 2 * d->Q + 2 * d->KV, a->xb, d->Hp, T, a->qg, 2 * d->Q + 2 * d->KV, 0);
            launch(k_split_gate, T, 256, s, (const float *)a->qg, 2 * d->Q + 2 * d->KV, a->qkv, ldq, a->gate, d->nh,
                   d->hd, 2 * d->KV);
        } else if (!tree && nseg == 1 && fuse && fuse_rope && !L->bqkv && !d->v_norm && d->hd % 16 == 0) {
            /* (a tree batch takes the separate kernel below: its rows' positions are not pos + t) */
            cu_tail tr = no_tail;
            tr.kind = TAIL_NORM_ROPE;
            tr.ticket = a->tickets;
            tr.eps = d->eps;
            tr.nq = d->nh, tr.nk = d->nkv, tr.hd = d->hd, tr.rh = d->rh, tr.n_ctx = n_ctx;
            tr.qn = L->q_norm, tr.kn = L->k_norm, tr.cos_t = cos_t, tr.sin_t = sin_t, tr.pos = pos;
            tr.kc = causal ? kc : NULL, tr.vc = causal ? vc : NULL;
            gemm_tail(s, L->wqkv, ldq, a->xb, d->Hp, T, qb, ldq, 0, tr);
            roped = 1;
        } else {
            gemm(s, L->wqkv, ldq, a->xb, d->Hp, T, qb, ldq, 0);
        }
        if (L->bqkv) launch(k_add_bias, T, 256, s, qb, ldq, (const float *)L->bqkv, ldq);
        if (d->v_norm) launch(k_head_norm, dim3(T, d->nkv), 32, s, a->qkv, ldq, d->Q + d->KV, d->hd, d->eps);
        prof_mark(s, roped ? (causal ? "gemm qkv+norm_rope" : "draft gemm qkv+norm_rope") : causal ? "gemm qkv" : "draft gemm qkv",
                  cw_bytes(&L->wqkv));
        if (tree) { /* the unchanged kernel over the gathered tables (position base 0), no store; then the store */
            norm_rope(s, a->qkv, ldq, 0, d->nh, L->q_norm, d->Q, d->Q + d->KV, d->nkv, L->k_norm, d->hd, d->rh,
                      d->eps, cos_t, sin_t, tree->zero, NULL, NULL, n_ctx, T);
            launch(k_tree_kv_store, dim3(T, d->nkv), 64, s, (const float *)a->qkv, ldq, d->Q, d->Q + d->KV, d->hd,
                   pos, kc, vc, n_ctx);
            prof_mark(s, "norm_rope (tree)", 0);
            attention_tree(s, d, sp, a->qkv, ldq, kc, vc, n_ctx, pos, tree, T, a->att, L->sinks);
            prof_mark(s, "attention (tree)", 0);
        } else if (stk) { /* every sequence's rows over its own cache, one launch for all */
            stacked_attention(s, d, L, a->qkv, ldq, causal, T, stk, a->att, L->window, L->sinks, !roped);
            prof_mark(s, causal ? "norm_rope+attention (stacked)" : "draft norm_rope+attention (stacked)", 0);
        } else {
            for (int g = 0; g < nseg; g++) { /* each sequence's rows over its own cache */
                const cu_seg *sg = &seg[g];
                float *qg = a->qkv + (size_t)sg->row0 * ldq;
                if (!roped) {
                    norm_rope(s, qg, ldq, 0, d->nh, L->q_norm, d->Q, d->Q + d->KV, d->nkv, L->k_norm, d->hd, d->rh,
                              d->eps, sg->cos_t, sg->sin_t, sg->pos, causal ? sg->kc : NULL, causal ? sg->vc : NULL,
                              sg->n_ctx, sg->T);
                    prof_mark(s, causal ? "norm_rope" : "draft norm_rope", 0);
                }
                attention(s, d, sg->sp, qg, ldq, sg->kc, sg->vc, sg->n_ctx, causal, sg->pos, sg->T,
                          a->att + (size_t)sg->row0 * d->Qp, L->window, L->sinks);
                prof_mark(s, causal ? "attention" : "draft attention", 0);
            }
        }
        if (d->gated) launch(k_gate_att, T, 256, s, a->att, d->Qp, (const float *)a->gate, d->Q);
        if (L->bo) { /* gpt-oss: x += (Wo att + bo), as the CPU sums it */
            gemm(s, L->wo, d->H, a->att, d->Qp, T, a->ob, d->H, 0);
            launch(k_add_proj_bias, T, 256, s, a->x, (const float *)a->ob, (const float *)L->bo, d->H);
        } else if (L->attn_out_norm) { /* Gemma-4: x += attn_out_norm(Wo att) */
            gemm(s, L->wo, d->H, a->att, d->Qp, T, a->ob, d->H, 0);
            launch(k_rmsnorm_add, T, 256, s, a->x, (const float *)a->ob, (const float *)L->attn_out_norm, d->H, d->eps);
        } else if (post.kind != TAIL_NONE) {
            gemm_tail(s, L->wo, d->H, a->att, d->Qp, T, a->x, d->H, 1, post);
            post_normed = 1;
        } else {
            gemm(s, L->wo, d->H, a->att, d->Qp, T, a->x, d->H, 1);
        }
        prof_mark(s, post_normed ? (causal ? "gemm o+rmsnorm" : "draft gemm o+rmsnorm") : causal ? "gemm o" : "draft gemm o",
                  cw_bytes(&L->wo));
    }
    if (!post_normed) {
        rmsnorm(s, a->x, d->H, L->post_norm, d->H, d->eps, T, a->xb, d->Hp);
        prof_mark(s, causal ? "rmsnorm" : "draft rmsnorm", 0);
    }
    if (L->moe && !L->g4moe) return moe(s, d, L, a, T, next_norm, next_ob);
    if (d->geglu) { /* Gemma-4: gelu_tanh(g) * u from the f32 sums */
        gemm(s, L->wgu, d->Rd, a->xb, d->Hp, T, a->gyd, d->Rd, 0);
        launch(k_geglu, T, 256, s, (const float *)a->gyd, d->Rd, d->I, a->hb, d->Ip);
    } else {
        gemm_swiglu(s, L->wgu, a->xb, d->Hp, T, a->hb, d->Ip);
    }
    prof_mark(s, causal ? "gemm gate_up+swiglu" : "draft gemm gate_up+swiglu", cw_bytes(&L->wgu));
    if (L->g4moe) { /* Gemma-4 MoE: Wd h into ob, the expert block beside it (g4_moe) */
        gemm(s, L->wd, d->H, a->hb, d->Ip, T, a->ob, d->H, 0);
        g4_moe(s, d, L, a, T);
    } else if (L->ffn_out_norm) { /* Gemma-4: x += ffn_out_norm(Wd h) */
        gemm(s, L->wd, d->H, a->hb, d->Ip, T, a->ob, d->H, 0);
        launch(k_rmsnorm_add, T, 256, s, a->x, (const float *)a->ob, (const float *)L->ffn_out_norm, d->H, d->eps);
    } else if (next_norm && fuse && fuse_norm && !d->gemma && rmsnorm4_fits(a->x, d->H, d->H)) {
        /* the next RMSNorm (the next layer's input norm, or the final norm
         * of kept rows) in the tail; nothing of Gemma-4's follows here */
        cu_tail nx = no_tail;
        nx.kind = TAIL_RMSNORM;
        nx.ticket = a->tickets;
        nx.w = next_norm;
        nx.eps = d->eps;
        nx.o = next_ob;
        nx.ldo = d->Hp;
        gemm_tail(s, L->wd, d->H, a->hb, d->Ip, T, a->x, d->H, 1, nx);
        prof_mark(s, causal ? "gemm down+rmsnorm" : "draft gemm down+rmsnorm", cw_bytes(&L->wd));
        return 1;
    } else {
        gemm(s, L->wd, d->H, a->hb, d->Ip, T, a->x, d->H, 1);
    }
    prof_mark(s, causal ? "gemm down" : "draft gemm down", cw_bytes(&L->wd));
    if (L->ple_gate.rows) { /* Gemma-4's per-layer input: x += ple_norm(Wp (gelu(Wg x) * in_l)) */
        launch(k_to_bf16, dim3(T, (d->H + 255) / 256), 256, s, (const float *)a->x, d->H, d->H, a->xb, d->Hp);
        gemm(s, L->ple_gate, d->P, a->xb, d->Hp, T, a->pt, d->P, 0);
        launch(k_ple_gate, T, 32, s, (const float *)a->pt, (const float *)a->ple, d->L * d->P, L->idx, d->P, a->pg,
               d->Pp);
        gemm(s, L->ple_proj, d->H, a->pg, d->Pp, T, a->ob, d->H, 0);
        launch(k_rmsnorm_add, T, 256, s, a->x, (const float *)a->ob, (const float *)L->ple_norm, d->H, d->eps);
        prof_mark(s, "per-layer input", cw_bytes(&L->ple_gate) + cw_bytes(&L->ple_proj));
    }
    if (d->gemma) launch(k_scale, (T * d->H + 255) / 256, 256, s, a->x, (size_t)T * d->H, L->layer_scalar);
    return 0;
}

static int rope_upload(float **cos_d, float **sin_d, const cfg_model *c, int n) {
    size_t half = (size_t)(c->rot_dim ? c->rot_dim : c->head_dim) / 2; /* rope.h */
    float *cs = (float *)dfl_malloc(sizeof(float) * n * half), *sn = (float *)dfl_malloc(sizeof(float) * n * half);
    rope_fill(c, n, cs, sn);
    int rc = upload_vec(cos_d, cs, (int)(n * half)) || upload_vec(sin_d, sn, (int)(n * half)) ? -1 : 0;
    free(cs);
    free(sn);
    return rc;
}

/* ---- target sequence ---------------------------------------------------------- */

enum { GRAPH_MAX_T = 16 };

typedef struct {
    cu_be *be;
    const mdl_model *m;
    const cu_model *cm;
    cu_dims d;
    int n_ctx, len;
    int n_kept, last_T, last_taps;
    float *kc, *vc;         /* [attention layers][nkv][n_ctx][hd]: none for a linear layer; layer l's
                               block at kv_off[l] (Gemma-4's layers differ in nkv, hd). Sliding
                               layers keep every position too (the window is a lower bound of
                               the keys): n_ctx rows, not a ring of window + BE_DN_KEEP */
    size_t *kv_off;         /* [L] floats */
    float *cos_t, *sin_t;   /* [n_ctx][rh] */
    float *cos_f, *sin_f;   /* Gemma-4's full layers: proportional RoPE [n_ctx][hd_full/2] (else NULL) */
    cu_dn dn;               /* Gated DeltaNet states (d.n_lin > 0) */
    int *lin_of;            /* [L] linear-layer index of layer l, or -1 */
    int *att_of;            /* [L] attention-layer index of layer l (its K/V block), or -1 */
    cu_act a;               /* BE_MAX_ROWS rows */
    cu_split sp;            /* chunked attention scratch (n_ctx positions) */
    float *taps;            /* [BE_MAX_ROWS][taps_cap][H] */
    int taps_cap;
    bf16 *kept;             /* [BE_KEEP_ROWS][Hp] */
    float *lg;              /* [BE_KEEP_ROWS][V] */
    float *amx_v;           /* [BE_KEEP_ROWS][AMX_PARTS] argmax scratch */
    int *amx_i;             /* [BE_KEEP_ROWS][AMX_PARTS] */
    int32_t *d_tok, *d_ids; /* [BE_MAX_ROWS], [BE_KEEP_ROWS] */
    int32_t *h_ids;         /* pinned copy */
    int *d_pos;             /* position of the forward's first row */
    /* One captured forward per (T <= GRAPH_MAX_T, keep_rows), replayed with
     * new tokens and position; sig says which taps it copies (n_taps, layers,
     * buffer) and is checked before each replay. */
    cudaGraphExec_t graph[GRAPH_MAX_T + 1][2];
    uint64_t graph_sig[GRAPH_MAX_T + 1][2];
    int use_graphs;
    /* the last forward (backend.h's tree rule; cu_tree.cuh) */
    int fwd_len, fwd_T;     /* the committed length before it, its rows */
    int tree;               /* it was a tree batch */
    int tree_parent[BE_KEEP_ROWS]; /* [fwd_T] parent rows (-1: the last committed row) */
    int *h_tree;            /* host [1 + TREE_ANC + TREE_ANC * TREE_ANC]: 0, depth [TREE_ANC], anc [TREE_ANC][TREE_ANC] */
    int *d_tree;            /* the same on the device (tr points into it) */
    cu_tree tr;
    int *d_rows;            /* [BE_KEEP_ROWS] tree_commit's path */
    float *tcos, *tsin;     /* [TREE_ANC][rh] the RoPE tables' rows len + depth of each tree row */
    /* tree forwards captured as graph[][] is, for every T <= BE_KEEP_ROWS (the
     * tree's shape lives in d_tree, uploaded before each replay) */
    cudaGraphExec_t tgraph[BE_KEEP_ROWS + 1][2];
    uint64_t tgraph_sig[BE_KEEP_ROWS + 1][2];
} cu_seq;

static void cu_destroy(void *p) {
    cu_seq *q = (cu_seq *)p;
    if (!q) return;
    cudaFree(q->kc);
    cudaFree(q->vc);
    cudaFree(q->dn.conv);
    cudaFree(q->dn.rec);
    cudaFree(q->dn.snap_conv);
    cudaFree(q->dn.snap_rec);
    cudaFree(q->dn.keep);
    free(q->lin_of);
    free(q->att_of);
    free(q->kv_off);
    cudaFree(q->cos_t);
    cudaFree(q->sin_t);
    cudaFree(q->cos_f);
    cudaFree(q->sin_f);
    act_free(&q->a);
    split_free(&q->sp);
    cudaFree(q->taps);
    cudaFree(q->kept);
    cudaFree(q->lg);
    cudaFree(q->amx_v);
    cudaFree(q->amx_i);
    cudaFree(q->d_tok);
    cudaFree(q->d_ids);
    cudaFree(q->d_pos);
    cudaFreeHost(q->h_ids);
    for (int t = 0; t <= GRAPH_MAX_T; t++)
        for (int k = 0; k < 2; k++)
            if (q->graph[t][k]) cudaGraphExecDestroy(q->graph[t][k]);
    for (int t = 0; t <= BE_KEEP_ROWS; t++)
        for (int k = 0; k < 2; k++)
            if (q->tgraph[t][k]) cudaGraphExecDestroy(q->tgraph[t][k]);
    free(q->h_tree);
    cudaFree(q->d_tree);
    cudaFree(q->d_rows);
    cudaFree(q->tcos);
    cudaFree(q->tsin);
    free(q);
}

/* k_att_part_tree's shared memory: as split_attr gives k_att_part */
template <int HD>
static cudaError_t tree_attr(void) {
    return cudaFuncSetAttribute(k_att_part_tree<HD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)(sizeof(float) * cu_att_smem(HD, cu_att_unit(HD))));
}

/* The tree state of a new sequence (cu_seq: h_tree .. tsin); 0 or -1 + error. */
static int tree_alloc(cu_seq *q, const cfg_model *c) {
    size_t nt = 1 + TREE_ANC + (size_t)TREE_ANC * TREE_ANC, half = (size_t)(c->rot_dim ? c->rot_dim : c->head_dim) / 2;
    q->h_tree = (int *)dfl_calloc(nt, sizeof(int));
    if (cu_alloc(&q->d_tree, sizeof(int) * nt) || cu_alloc(&q->d_rows, sizeof(int) * BE_KEEP_ROWS) ||
        cu_alloc(&q->tcos, sizeof(float) * TREE_ANC * half) || cu_alloc(&q->tsin, sizeof(float) * TREE_ANC * half))
        return -1;
    q->tr.zero = q->d_tree;
    q->tr.depth = q->d_tree + 1;
    q->tr.anc = q->d_tree + 1 + TREE_ANC;
    if (!q->sp.po) return 0; /* no chunked attention: tree batches are refused */
    for (int l = 0; l < c->n_layers; l++) {
        if (c->linear_layer[l]) continue;
        int hd = cfg_head_dim(c, l);
        cudaError_t e = hd == 16    ? tree_attr<16>()
                        : hd == 32  ? tree_attr<32>()
                        : hd == 64  ? tree_attr<64>()
                        : hd == 128 ? tree_attr<128>()
                        : hd == 256 ? tree_attr<256>()
                                    : tree_attr<512>();
        if (e != cudaSuccess) {
            dfl_seterr("cuda: shared memory for the tree attention: %s", cudaGetErrorString(e));
            return -1;
        }
    }
    return 0;
}

static void *cu_create(void *p, const mdl_model *m, int n_ctx) {
    cu_be *be = (cu_be *)p;
    if (!m->be_data) {
        dfl_seterr("cuda: model not prepared");
        return NULL;
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        int hd = cfg_head_dim(&m->cfg, l), split = dims_of(&m->cfg, m->cfg.vocab).need_split;
        if (!m->cfg.linear_layer[l] && !(split ? att_supported_split(hd) : att_supported(hd))) {
            dfl_seterr("backend cuda: head_dim %d is not supported (16, 32, 64, 128, 256%s)", hd,
                       split ? ", 512" : "");
            return NULL;
        }
    }
    cu_seq *q = (cu_seq *)dfl_calloc(1, sizeof *q);
    q->be = be;
    q->m = m;
    const char *ng = getenv("DFLASH_CUDA_GRAPHS"); /* 0: launch every kernel each time (for comparison) */
    q->use_graphs = !(ng && *ng == '0') && !prof.on;
    q->cm = (const cu_model *)m->be_data;
    q->d = dims_of(&m->cfg, m->cfg.vocab);
    q->n_ctx = n_ctx;
    const cu_dims *d = &q->d;
    q->kv_off = (size_t *)dfl_malloc(sizeof(size_t) * (size_t)d->L);
    size_t kv = 0;
    for (int l = 0; l < d->L; l++) {
        q->kv_off[l] = kv;
        if (!m->cfg.linear_layer[l]) kv += (size_t)cfg_kv_heads(&m->cfg, l) * n_ctx * cfg_head_dim(&m->cfg, l);
    }
    if (d->gemma) { /* the full layers' proportional RoPE (config.c: the last layer is a full one) */
        int hf = cfg_head_dim(&m->cfg, d->L - 1);
        size_t nf = (size_t)n_ctx * (hf / 2);
        float *cs = (float *)dfl_malloc(sizeof(float) * nf), *sn = (float *)dfl_malloc(sizeof(float) * nf);
        rope_fill_proportional(&m->cfg, hf, n_ctx, cs, sn);
        int rc = upload_vec(&q->cos_f, cs, (int)nf) || upload_vec(&q->sin_f, sn, (int)nf);
        free(cs);
        free(sn);
        if (rc) {
            cu_destroy(q);
            return NULL;
        }
    }
    if (cu_alloc(&q->kc, sizeof(float) * kv) || cu_alloc(&q->vc, sizeof(float) * kv) ||
        rope_upload(&q->cos_t, &q->sin_t, &m->cfg, n_ctx) || act_alloc(&q->a, d, BE_MAX_ROWS) ||
        split_alloc(&q->sp, be, d, &m->cfg, n_ctx) || cu_alloc(&q->kept, sizeof(bf16) * BE_KEEP_ROWS * d->Hp) ||
        cu_alloc(&q->lg, sizeof(float) * BE_KEEP_ROWS * (size_t)d->V) ||
        cu_alloc(&q->d_tok, sizeof(int32_t) * BE_MAX_ROWS) || cu_alloc(&q->d_ids, sizeof(int32_t) * BE_KEEP_ROWS) ||
        cu_alloc(&q->d_pos, sizeof(int)) || cu_alloc(&q->amx_v, sizeof(float) * BE_KEEP_ROWS * AMX_PARTS) ||
        cu_alloc(&q->amx_i, sizeof(int) * BE_KEEP_ROWS * AMX_PARTS) ||
        cudaMallocHost(&q->h_ids, sizeof(int32_t) * BE_KEEP_ROWS) != cudaSuccess || tree_alloc(q, &m->cfg) != 0) {
        if (!*dfl_lasterr()) dfl_seterr("cuda: cannot allocate the sequence state");
        cu_destroy(q);
        return NULL;
    }
    q->lin_of = (int *)dfl_malloc(sizeof(int) * (size_t)d->L);
    q->att_of = (int *)dfl_malloc(sizeof(int) * (size_t)d->L);
    for (int l = 0, n = 0, a = 0; l < d->L; l++) {
        q->lin_of[l] = m->cfg.linear_layer[l] ? n++ : -1;
        q->att_of[l] = m->cfg.linear_layer[l] ? -1 : a++;
    }
    q->dn.snap_len = -1;
    if (d->n_lin) {
        cu_dn *dn = &q->dn;
        dn->conv_n = (size_t)(d->K - 1) * d->C;
        dn->rec_n = (size_t)d->nv * d->dk * d->dv;
        size_t nl = (size_t)d->n_lin;
        if (cu_alloc(&dn->conv, sizeof(float) * nl * dn->conv_n) ||
            cu_alloc(&dn->snap_conv, sizeof(float) * nl * dn->conv_n) ||
            cu_alloc(&dn->rec, sizeof(float) * nl * dn->rec_n) || cu_alloc(&dn->snap_rec, sizeof(float) * nl * dn->rec_n) ||
            cu_alloc(&dn->keep, sizeof(float) * nl * BE_DN_KEEP * d->Cm)) {
            cu_destroy(q);
            return NULL;
        }
    }
    return q;
}

static int cu_length(void *p) { return ((cu_seq *)p)->len; }

/* be_ops.finish: the stream's work done (the forwards only enqueue). */
static void cu_finish(void *p) { cudaStreamSynchronize(((cu_seq *)p)->be->stream); }

/* The KV rule and the recurrent-state rule (backend.h, cu_dn). */
static int cu_truncate(void *p, int len) {
    cu_seq *q = (cu_seq *)p;
    if (len < 0 || len >= q->len) return q->len;
    const cu_dims *d = &q->d;
    cu_dn *dn = &q->dn;
    if (!d->n_lin) {
        q->len = len;
        return len;
    }
    cudaStream_t s = q->be->stream;
    size_t nl = (size_t)d->n_lin;
    if (dn->snap_len < 0 || len < dn->snap_len || len - dn->snap_len > dn->n_keep) { /* restart empty */
        cudaMemsetAsync(dn->conv, 0, sizeof(float) * nl * dn->conv_n, s);
        cudaMemsetAsync(dn->rec, 0, sizeof(float) * nl * dn->rec_n, s);
        dn->snap_len = -1;
        dn->n_keep = 0;
        q->len = 0;
        q->n_kept = 0;
        return 0;
    }
    int n = len - dn->snap_len;
    cudaMemcpyAsync(dn->conv, dn->snap_conv, sizeof(float) * nl * dn->conv_n, cudaMemcpyDeviceToDevice, s);
    cudaMemcpyAsync(dn->rec, dn->snap_rec, sizeof(float) * nl * dn->rec_n, cudaMemcpyDeviceToDevice, s);
    if (n > 0)
        for (int l = 0; l < d->L; l++) {
            int li = q->lin_of[l];
            if (li < 0) continue;
            dn_rows(s, d, &q->cm->layers[l], dn, li, dn->keep + (size_t)li * BE_DN_KEEP * d->Cm, q->a.cv, NULL, n);
        }
    dn->n_keep = n;
    q->len = len;
    return len;
}

/* Gemma-4's final logit softcapping on n rows of V logits (else nothing) */
static void softcap(cudaStream_t s, const cu_dims *d, float *lg, int n) {
    if (d->softcap == 0.0f) return;
    size_t k = (size_t)n * d->V;
    launch(k_softcap, (unsigned)((k + 255) / 256), 256, s, lg, k, d->softcap);
}

static int check_tokens(const int32_t *tok, int n, int vocab) {
    for (int t = 0; t < n; t++)
        if (tok[t] < 0 || tok[t] >= vocab) {
            dfl_seterr("token id %d is outside the model's vocabulary (vocab_size %d)", tok[t], vocab);
            return -1;
        }
    return 0;
}

/* The forward's kernels on rows 0..T-1 at position *d_pos: embedding, the
 * layers, the taps it keeps, the final norm of kept rows. A tree batch
 * (q->tree: its shape in d_tree) first gathers its RoPE rows. */
static void enqueue_forward(cu_seq *q, const be_batch *b) {
    const cu_dims *d = &q->d;
    const cu_model *cm = q->cm;
    cudaStream_t s = q->be->stream;
    int T = b->T;
    const cu_tree *tr = q->tree ? &q->tr : NULL;
    if (tr) {
        int half = (q->m->cfg.rot_dim ? q->m->cfg.rot_dim : q->m->cfg.head_dim) / 2;
        launch(k_tree_rope, T, 128, s, (const float *)q->cos_t, half, (const int *)q->d_pos, tr->depth, q->tcos);
        launch(k_tree_rope, T, 128, s, (const float *)q->sin_t, half, (const int *)q->d_pos, tr->depth, q->tsin);
    }
    launch(k_embed, dim3(T, (d->H + 255) / 256), 256, s, cm->embed, q->d_tok, q->a.x, d->H);
    if (d->emb_scale != 0.0f) launch(k_scale, (T * d->H + 255) / 256, 256, s, q->a.x, (size_t)T * d->H, d->emb_scale);
    if (d->P) { /* Gemma-4's per-layer inputs of the rows (the CPU's ple_inputs) */
        int LP = d->L * d->P;
        launch(k_to_bf16, dim3(T, (d->H + 255) / 256), 256, s, (const float *)q->a.x, d->H, d->H, q->a.xb, d->Hp);
        gemm(s, cm->ple_model_proj, LP, q->a.xb, d->Hp, T, q->a.pproj, LP, 0);
        launch(k_ple_inputs, dim3(T, d->L), 32, s, (const float *)q->a.pproj, cm->ple_embed, (const int32_t *)q->d_tok,
               d->L, d->P, (const float *)cm->ple_proj_norm, d->eps, (float)pow(d->H, -0.5), (float)sqrt((double)d->P),
               (float)pow(2.0, -0.5), q->a.ple);
    }
    prof_mark(s, "embed", 0);
    if (d->n_lin && q->dn.snap_len >= 0) { /* the recurrent state before this forward (cu_dn) */
        size_t nl = (size_t)d->n_lin;
        cudaMemcpyAsync(q->dn.snap_conv, q->dn.conv, sizeof(float) * nl * q->dn.conv_n, cudaMemcpyDeviceToDevice, s);
        cudaMemcpyAsync(q->dn.snap_rec, q->dn.rec, sizeof(float) * nl * q->dn.rec_n, cudaMemcpyDeviceToDevice, s);
    }
    int normed = 0; /* q->a.xb (or, after the last layer, q->kept) holds the next norm's output */
    for (int l = 0; l < d->L; l++) {
        int al = q->att_of[l], last = l + 1 == d->L;
        const float *nn = !last ? cm->layers[l + 1].in_norm : b->keep_rows ? cm->final_norm : NULL;
        cu_dims dl = layer_dims(d, &q->m->cfg, l);
        int full = d->gemma && !q->m->cfg.sliding_layer[l]; /* (a tree is refused on Gemma-4) */
        const float *cs = tr ? q->tcos : full ? q->cos_f : q->cos_t, *sn = tr ? q->tsin : full ? q->sin_f : q->sin_t;
        cu_seg sg = seg_of(0, T, q->d_pos, al < 0 ? NULL : q->kc + q->kv_off[l], al < 0 ? NULL : q->vc + q->kv_off[l],
                           q->n_ctx, cs, sn, &q->sp);
        normed = layer(s, &dl, &cm->layers[l], &q->a, T, &sg, 1, 1, &q->dn, q->lin_of[l], normed, nn,
                       last ? q->kept : q->a.xb, tr, NULL);
        for (int i = 0; i < b->n_taps; i++)
            if (b->tap_layers[i] == l)
                cudaMemcpy2DAsync(q->taps + (size_t)i * d->H, sizeof(float) * b->n_taps * d->H, q->a.x,
                                  sizeof(float) * d->H, sizeof(float) * d->H, T, cudaMemcpyDeviceToDevice, s);
        if (b->n_taps) prof_mark(s, "taps copy", 0);
    }
    if (b->keep_rows && !normed) {
        rmsnorm(s, q->a.x, d->H, cm->final_norm, d->H, d->eps, T, q->kept, d->Hp);
        prof_mark(s, "final norm", 0);
    }
}

static int cu_forward(void *p, const be_batch *b) {
    cu_seq *q = (cu_seq *)p;
    const cfg_model *c = &q->m->cfg;
    const cu_dims *d = &q->d;
    const cu_model *cm = q->cm;
    cudaStream_t s = q->be->stream;
    if (be_check_batch(b, c, q->len, q->n_ctx) != 0) return -1; /* the checks every backend shares */
    if (b->tree_parent) { /* backend.h's tree rule: what this backend's tree forward covers */
        const char *why = d->n_lin ? "recurrent (Gated DeltaNet) layers"
                          : c->n_sliding_layers ? "sliding-window layers"
                          : d->gemma ? "Gemma-4 layers (per-layer RoPE tables)"
                          : !q->sp.po ? "no chunked attention (DFLASH_CUDA_ATT_SPLIT=0, or a head grouping only the "
                                        "per-row kernels take)"
                                      : NULL;
        if (why) {
            dfl_seterr("forward: tree verification on cuda needs full chunked attention in every layer; this %s "
                       "model has %s (use the chain: --tree 0)", c->arch_name, why);
            return -1;
        }
    }
    if (b->n_taps > q->taps_cap) {
        cudaFree(q->taps);
        q->taps_cap = 0;
        if (cu_alloc(&q->taps, sizeof(float) * BE_MAX_ROWS * b->n_taps * d->H) != 0) return -1;
        q->taps_cap = b->n_taps;
    }
    int T = b->T, pos0 = q->len;
    q->n_kept = 0;
    q->tree = 0;
    if (b->tree_parent) { /* depth and ancestors of each row (cu_tree.cuh), uploaded for the kernels */
        int *dep = q->h_tree + 1, *anc = q->h_tree + 1 + TREE_ANC;
        for (int t = 0; t < T; t++) {
            int pa = b->tree_parent[t], dd = pa < 0 ? 0 : dep[pa] + 1;
            q->tree_parent[t] = pa;
            dep[t] = dd;
            if (pa >= 0) memcpy(anc + (size_t)t * TREE_ANC, anc + (size_t)pa * TREE_ANC, sizeof(int) * (size_t)dd);
            anc[(size_t)t * TREE_ANC + dd] = t;
        }
        CUCHK(cudaMemcpyAsync(q->d_tree, q->h_tree, sizeof(int) * (1 + TREE_ANC + (size_t)T * TREE_ANC),
                              cudaMemcpyHostToDevice, s));
        q->tree = 1;
    }
    q->fwd_len = pos0;
    q->fwd_T = T;
    /* recurrent state: snapshot before a forward of <= BE_DN_KEEP rows (set
     * before enqueue_forward, which copies it; graphs capture the copies) */
    q->dn.snap_len = d->n_lin && T <= BE_DN_KEEP ? pos0 : -1;
    q->dn.n_keep = q->dn.snap_len >= 0 ? T : 0;
    prof_begin(s, T);
    /* tokens and position from pageable memory: the copies are staged before
     * the calls return, so the caller's buffers are free at once */
    CUCHK(cudaMemcpyAsync(q->d_tok, b->tokens, sizeof(int32_t) * T, cudaMemcpyHostToDevice, s));
    CUCHK(cudaMemcpyAsync(q->d_pos, &pos0, sizeof(int), cudaMemcpyHostToDevice, s));
    if (q->use_graphs && T <= (q->tree ? (int)BE_KEEP_ROWS : (int)GRAPH_MAX_T) && b->n_logits == 0) {
        uint64_t sig = (uint64_t)(uintptr_t)q->taps * 31 + (uint64_t)b->n_taps;
        for (int i = 0; i < b->n_taps; i++) sig = sig * 131 + (uint64_t)b->tap_layers[i] + 1;
        int k = b->keep_rows != 0;
        cudaGraphExec_t *g = q->tree ? &q->tgraph[T][k] : &q->graph[T][k];
        uint64_t *gsig = q->tree ? &q->tgraph_sig[T][k] : &q->graph_sig[T][k];
        if (*g && *gsig != sig) {
            cudaGraphExecDestroy(*g);
            *g = NULL;
        }
        if (!*g) {
            cudaGraph_t graph;
            CUCHK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            enqueue_forward(q, b);
            CUCHK(cudaStreamEndCapture(s, &graph));
            cudaError_t ge = cudaGraphInstantiate(g, graph, 0);
            cudaGraphDestroy(graph);
            if (ge != cudaSuccess) {
                *g = NULL;
                dfl_seterr("cuda: graph of a %d-row forward: %s", T, cudaGetErrorString(ge));
                return -1;
            }
            *gsig = sig;
        }
        CUCHK(cudaGraphLaunch(*g, s));
    } else {
        enqueue_forward(q, b);
    }
    /* host logits for the last n_logits rows, BE_KEEP_ROWS at a time */
    for (int r = T - b->n_logits; r < T; r += BE_KEEP_ROWS) {
        int n = T - r < BE_KEEP_ROWS ? T - r : BE_KEEP_ROWS;
        rmsnorm(s, q->a.x + (size_t)r * d->H, d->H, cm->final_norm, d->H, d->eps, n, q->a.xb, d->Hp);
        gemm(s, cm->lm_head, d->V, q->a.xb, d->Hp, n, q->lg, d->V, 0);
        softcap(s, d, q->lg, n);
        CUCHK(cudaMemcpyAsync(b->logits + (size_t)(r - (T - b->n_logits)) * d->V, q->lg, sizeof(float) * n * d->V,
                              cudaMemcpyDeviceToHost, s));
    }
    if (b->n_logits) CUCHK(cudaStreamSynchronize(s));
    prof_end(s);
    CUCHK(cudaGetLastError());
    q->len += T;
    q->last_T = T;
    q->last_taps = b->n_taps;
    if (b->keep_rows) q->n_kept = T;
    return 0;
}

/* ---- several sequences in one pass (be_ops.forward_multi, predict_multi) ----
 * The rows of every sequence of a step are stacked into one activation
 * buffer of the model (cu_multi: on the backend, sized for the largest step
 * so far, for one model at a time), the layers run over all of them - each
 * GEMM reads its weights once for every row - and each sequence's rows take
 * their own attention (a cu_seg each: its positions, cache, tables, scratch).
 * A row's result is its own work in the same kernels as cu_forward's (the
 * GEMMs give a row the same bits for any number of rows, the norms and
 * experts are per row), so every sequence ends exactly as cu_forward alone
 * leaves it: its K/V, taps, kept rows, host logits and counters. Refused
 * (nothing run): a tree batch, recurrent layers (their state is per
 * sequence: one forward each), more than MULTI_MAX_ROWS rows, different
 * models, a sequence twice. No CUDA graph yet: the launches are enqueued
 * each step. */
enum { MULTI_MAX_ROWS = 1024 };

typedef struct cu_multi_s {
    const cu_model *cm; /* the model the buffers are sized for */
    int rows;           /* their capacity */
    cu_act a;           /* [rows] */
    int32_t *d_tok;     /* [rows] */
    bf16 *kept;         /* [rows][Hp] the final norm's rows of the stacked forward */
    bf16 *gath;         /* [BE_KEEP_ROWS][Hp] rows gathered for one pass over an lm_head */
    float *lg;          /* [BE_KEEP_ROWS][V] a pass's logits (draft blocks; predict_multi uses sequence 0's) */
    float *best;        /* [BE_KEEP_ROWS] */
    float *amx_v;       /* [BE_KEEP_ROWS][AMX_PARTS] */
    int *amx_i;         /* [BE_KEEP_ROWS][AMX_PARTS] */
    int32_t *d_ids;     /* [BE_KEEP_ROWS] */
    int32_t *h_ids;     /* pinned [BE_KEEP_ROWS] */
    /* a step's attention tables (stack_tables; grown on demand, NULL until
     * a step uses them): cu_segd [layers][sequences], each row's sequence,
     * the chunk partials of the layer's sequences (one layer at a time) */
    cu_segd *d_tab, *h_tab;
    size_t tab_cap;
    int *d_rowseg, *h_rowseg; /* [rows] */
    float *po;
    size_t po_cap;
    float2 *pml;
    size_t pml_cap;
} cu_multi;

static void multi_drop(cu_multi *M) {
    if (!M) return;
    if (M->rows) act_free(&M->a);
    cudaFree(M->d_tok);
    cudaFree(M->kept);
    cudaFree(M->gath);
    cudaFree(M->lg);
    cudaFree(M->best);
    cudaFree(M->amx_v);
    cudaFree(M->amx_i);
    cudaFree(M->d_ids);
    if (M->h_ids) cudaFreeHost(M->h_ids);
    cudaFree(M->d_tab);
    free(M->h_tab);
    cudaFree(M->d_rowseg);
    free(M->h_rowseg);
    cudaFree(M->po);
    cudaFree(M->pml);
    free(M);
}

static void multi_free(cu_be *be) {
    for (int i = 0; i < MULTI_MODELS; i++) {
        multi_drop(be->multi[i]);
        be->multi[i] = NULL;
    }
}

/* Drop model cm's stacked-row buffers (cu_release). */
static void multi_forget(cu_be *be, const cu_model *cm) {
    for (int i = 0; i < MULTI_MODELS; i++)
        if (be->multi[i] && be->multi[i]->cm == cm) {
            multi_drop(be->multi[i]);
            be->multi[i] = NULL;
        }
}

/* The stacked-row buffers of model cm (dims d) with room for rows rows
 * (grown in steps of 64): its entry, else a free one, else the first
 * (dropped; another model's buffers are remade when it comes back). */
static cu_multi *multi_get(cu_be *be, const cu_model *cm, const cu_dims *d, int rows) {
    int e = -1;
    for (int i = 0; i < MULTI_MODELS && e < 0; i++)
        if (be->multi[i] && be->multi[i]->cm == cm) e = i;
    for (int i = 0; i < MULTI_MODELS && e < 0; i++)
        if (!be->multi[i]) e = i;
    if (e < 0) e = 0;
    cu_multi *M = be->multi[e];
    if (M && M->cm == cm && M->rows >= rows) return M;
    multi_drop(M);
    M = be->multi[e] = (cu_multi *)dfl_calloc(1, sizeof *M);
    int cap = (rows + 63) / 64 * 64;
    if (cap < BE_KEEP_ROWS) cap = BE_KEEP_ROWS;
    M->rows = cap; /* (multi_drop frees what act_alloc got) */
    if (act_alloc(&M->a, d, cap) != 0 || cu_alloc(&M->d_tok, sizeof(int32_t) * cap) ||
        cu_alloc(&M->kept, sizeof(bf16) * cap * d->Hp) || cu_alloc(&M->gath, sizeof(bf16) * BE_KEEP_ROWS * d->Hp) ||
        cu_alloc(&M->lg, sizeof(float) * BE_KEEP_ROWS * (size_t)d->V) || cu_alloc(&M->best, sizeof(float) * BE_KEEP_ROWS) ||
        cu_alloc(&M->amx_v, sizeof(float) * BE_KEEP_ROWS * AMX_PARTS) ||
        cu_alloc(&M->amx_i, sizeof(int) * BE_KEEP_ROWS * AMX_PARTS) || cu_alloc(&M->d_ids, sizeof(int32_t) * BE_KEEP_ROWS) ||
        cudaMallocHost(&M->h_ids, sizeof(int32_t) * BE_KEEP_ROWS) != cudaSuccess) {
        if (!*dfl_lasterr()) dfl_seterr("cuda: cannot allocate the buffers of %d stacked rows", cap);
        multi_drop(M);
        be->multi[e] = NULL;
        return NULL;
    }
    M->cm = cm;
    return M;
}

/* Most bytes of chunk partials a stacked step's table path takes; a step
 * that needs more (long contexts, many rows) runs its attention a launch
 * per sequence (the same bits). */
enum { STACK_SCRATCH_MAX = 256 << 20 };

/* The device tables of a stacked step (cu_stack, cu_kernels.cuh's cu_segd):
 * for layer l (dims dl[l]) and sequence i, the entry from seg[l n + i]
 * (its rows, cache, tables) with its first position pos0[i]; st[l] gets the
 * layer's table. 1 when the tables are there, 0 when the step takes the
 * launch per sequence instead (DFLASH_CUDA_SEGS=0, one sequence, a
 * sequence without the chunked attention, too much scratch), -1 + error. */
static int stack_tables(cu_multi *M, cudaStream_t s, int L, int n, const cu_seg *seg, const int *pos0,
                        const cu_dims *dl, int rows, cu_stack *st) {
    if (!seg_tables || n < 2) return 0;
    size_t po_need = 0, pml_need = 0, ne = (size_t)L * n;
    for (size_t k = 0; k < ne; k++)
        if (seg[k].kc && !seg[k].sp->po) return 0;
    if (ne > M->tab_cap) {
        cudaFree(M->d_tab);
        free(M->h_tab);
        M->d_tab = NULL;
        M->h_tab = (cu_segd *)dfl_malloc(sizeof(cu_segd) * ne);
        M->tab_cap = 0;
        if (cu_alloc(&M->d_tab, sizeof(cu_segd) * ne) != 0) return -1;
        M->tab_cap = ne;
    }
    if (!M->d_rowseg) {
        M->h_rowseg = (int *)dfl_malloc(sizeof(int) * M->rows);
        if (cu_alloc(&M->d_rowseg, sizeof(int) * M->rows) != 0) return -1;
    }
    for (int i = 0; i < n; i++) /* each row's sequence: the same rows in every layer */
        for (int t = 0; t < seg[i].T; t++) M->h_rowseg[seg[i].row0 + t] = i;
    for (int l = 0; l < L; l++) {
        size_t po = 0, pml = 0;
        int maxT = 0, nch = 0, ch = cu_att_chunk(dl[l].hd);
        for (int i = 0; i < n; i++) {
            const cu_seg *g = &seg[(size_t)l * n + i];
            cu_segd *e = &M->h_tab[(size_t)l * n + i];
            e->kc = g->kc, e->vc = g->vc, e->cos_t = g->cos_t, e->sin_t = g->sin_t;
            e->n_ctx = g->n_ctx, e->pos0 = pos0[i], e->row0 = g->row0, e->T = g->T;
            e->nch = (pos0[i] + g->T + ch - 1) / ch; /* the chunks its keys fill */
            e->po0 = po, e->pml0 = pml;
            po += (size_t)g->T * dl[l].nh * e->nch * dl[l].hd;
            pml += (size_t)g->T * dl[l].nh * e->nch;
            maxT = g->T > maxT ? g->T : maxT;
            nch = e->nch > nch ? e->nch : nch;
        }
        st[l].nseg = n, st[l].maxT = maxT, st[l].nch = nch;
        st[l].segs = M->d_tab + (size_t)l * n, st[l].rowseg = M->d_rowseg;
        po_need = po > po_need ? po : po_need;
        pml_need = pml > pml_need ? pml : pml_need;
    }
    if (po_need * sizeof(float) > STACK_SCRATCH_MAX) return 0;
    if (po_need > M->po_cap || pml_need > M->pml_cap) {
        cudaFree(M->po);
        cudaFree(M->pml);
        M->po = NULL, M->pml = NULL, M->po_cap = M->pml_cap = 0;
        if (cu_alloc(&M->po, sizeof(float) * po_need) || cu_alloc(&M->pml, sizeof(float2) * pml_need)) return -1;
        M->po_cap = po_need, M->pml_cap = pml_need;
    }
    for (int l = 0; l < L; l++) st[l].po = M->po, st[l].pml = M->pml;
    /* (pageable copies: staged before the calls return) */
    CUCHK(cudaMemcpyAsync(M->d_tab, M->h_tab, sizeof(cu_segd) * ne, cudaMemcpyHostToDevice, s));
    CUCHK(cudaMemcpyAsync(M->d_rowseg, M->h_rowseg, sizeof(int) * rows, cudaMemcpyHostToDevice, s));
    return 1;
}

/* sts[0..n): 1..BE_MAX_SEQS states, each once; 0 or -1 + error. */
static int multi_distinct(void *const *sts, int n, const char *op) {
    if (n < 1 || n > BE_MAX_SEQS) {
        dfl_seterr("%s: %d states (1..%d)", op, n, BE_MAX_SEQS);
        return -1;
    }
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (sts[j] == sts[i]) {
                dfl_seterr("%s: state %d is there twice (as %d)", op, i, j);
                return -1;
            }
    return 0;
}

/* The sequences sts[0..n) distinct, of one model, on one backend; 0 or -1 + error. */
static int multi_check(void *const *sts, int n, const char *op) {
    if (multi_distinct(sts, n, op) != 0) return -1;
    const cu_seq *q0 = (const cu_seq *)sts[0];
    for (int i = 1; i < n; i++) {
        const cu_seq *q = (const cu_seq *)sts[i];
        if (q->cm != q0->cm || q->be != q0->be) {
            dfl_seterr("%s: sequence %d is of another model than sequence 0", op, i);
            return -1;
        }
    }
    return 0;
}

static int cu_forward_multi(void *const *sts, const be_batch *bs, int n) {
    if (multi_check(sts, n, "forward_multi") != 0) return -1;
    cu_seq *q0 = (cu_seq *)sts[0];
    const cfg_model *c = &q0->m->cfg;
    const cu_dims *d = &q0->d;
    const cu_model *cm = q0->cm;
    cudaStream_t s = q0->be->stream;
    if (d->n_lin) {
        dfl_seterr("forward_multi: this %s model has recurrent (Gated DeltaNet) layers: one forward per sequence",
                   c->arch_name);
        return -1;
    }
    int rows = 0, row0[BE_MAX_SEQS], keep = 0;
    for (int i = 0; i < n; i++) {
        cu_seq *q = (cu_seq *)sts[i];
        if (be_check_batch(&bs[i], c, q->len, q->n_ctx) != 0) return -1;
        if (bs[i].tree_parent) {
            dfl_seterr("forward_multi: sequence %d is a tree batch (one forward each)", i);
            return -1;
        }
        row0[i] = rows;
        rows += bs[i].T;
        keep |= bs[i].keep_rows != 0;
    }
    if (rows > MULTI_MAX_ROWS) {
        dfl_seterr("forward_multi: %d rows in all (at most %d)", rows, (int)MULTI_MAX_ROWS);
        return -1;
    }
    for (int i = 0; i < n; i++) { /* as cu_forward: room for the taps */
        cu_seq *q = (cu_seq *)sts[i];
        if (bs[i].n_taps > q->taps_cap) {
            cudaFree(q->taps);
            q->taps_cap = 0;
            if (cu_alloc(&q->taps, sizeof(float) * BE_MAX_ROWS * bs[i].n_taps * d->H) != 0) return -1;
            q->taps_cap = bs[i].n_taps;
        }
    }
    cu_multi *M = multi_get(q0->be, q0->cm, &q0->d, rows);
    if (!M) return -1;
    cu_act *a = &M->a;
    prof_begin(s, rows);
    for (int i = 0; i < n; i++) { /* (pageable copies: staged before the calls return) */
        cu_seq *q = (cu_seq *)sts[i];
        int pos0 = q->len;
        CUCHK(cudaMemcpyAsync(q->d_pos, &pos0, sizeof(int), cudaMemcpyHostToDevice, s));
        CUCHK(cudaMemcpyAsync(M->d_tok + row0[i], bs[i].tokens, sizeof(int32_t) * bs[i].T, cudaMemcpyHostToDevice,
                              s));
    }
    /* enqueue_forward's steps over the stacked rows */
    launch(k_embed, dim3(rows, (d->H + 255) / 256), 256, s, cm->embed, M->d_tok, a->x, d->H);
    if (d->emb_scale != 0.0f) launch(k_scale, (rows * d->H + 255) / 256, 256, s, a->x, (size_t)rows * d->H, d->emb_scale);
    if (d->P) {
        int LP = d->L * d->P;
        launch(k_to_bf16, dim3(rows, (d->H + 255) / 256), 256, s, (const float *)a->x, d->H, d->H, a->xb, d->Hp);
        gemm(s, cm->ple_model_proj, LP, a->xb, d->Hp, rows, a->pproj, LP, 0);
        launch(k_ple_inputs, dim3(rows, d->L), 32, s, (const float *)a->pproj, cm->ple_embed, (const int32_t *)M->d_tok,
               d->L, d->P, (const float *)cm->ple_proj_norm, d->eps, (float)pow(d->H, -0.5), (float)sqrt((double)d->P),
               (float)pow(2.0, -0.5), a->ple);
    }
    prof_mark(s, "embed", 0);
    /* every layer's segments (and, where stack_tables gives them, the
     * device tables that run all sequences' attention in one launch) */
    cu_seg *segs = (cu_seg *)dfl_malloc(sizeof(cu_seg) * d->L * n);
    cu_dims *dls = (cu_dims *)dfl_malloc(sizeof(cu_dims) * d->L);
    cu_stack *stk = (cu_stack *)dfl_malloc(sizeof(cu_stack) * d->L);
    int pos0s[BE_MAX_SEQS];
    for (int i = 0; i < n; i++) pos0s[i] = ((cu_seq *)sts[i])->len;
    for (int l = 0; l < d->L; l++) {
        dls[l] = layer_dims(d, c, l);
        int full = d->gemma && !c->sliding_layer[l];
        for (int i = 0; i < n; i++) {
            cu_seq *q = (cu_seq *)sts[i];
            int al = q->att_of[l];
            segs[(size_t)l * n + i] = seg_of(row0[i], bs[i].T, q->d_pos, al < 0 ? NULL : q->kc + q->kv_off[l],
                                             al < 0 ? NULL : q->vc + q->kv_off[l], q->n_ctx, full ? q->cos_f : q->cos_t,
                                             full ? q->sin_f : q->sin_t, &q->sp);
        }
    }
    int tables = stack_tables(M, s, d->L, n, segs, pos0s, dls, rows, stk);
    if (tables < 0) {
        free(segs), free(dls), free(stk);
        return -1;
    }
    int normed = 0;
    for (int l = 0; l < d->L; l++) {
        int last = l + 1 == d->L;
        const float *nn = !last ? cm->layers[l + 1].in_norm : keep ? cm->final_norm : NULL;
        normed = layer(s, &dls[l], &cm->layers[l], a, rows, segs + (size_t)l * n, n, 1, NULL, -1, normed, nn,
                       last ? M->kept : a->xb, NULL, tables ? &stk[l] : NULL);
        for (int i = 0; i < n; i++) {
            cu_seq *q = (cu_seq *)sts[i];
            for (int t = 0; t < bs[i].n_taps; t++)
                if (bs[i].tap_layers[t] == l)
                    cudaMemcpy2DAsync(q->taps + (size_t)t * d->H, sizeof(float) * bs[i].n_taps * d->H,
                                      a->x + (size_t)row0[i] * d->H, sizeof(float) * d->H, sizeof(float) * d->H,
                                      bs[i].T, cudaMemcpyDeviceToDevice, s);
        }
    }
    free(segs), free(dls), free(stk);
    if (keep && !normed) {
        rmsnorm(s, a->x, d->H, cm->final_norm, d->H, d->eps, rows, M->kept, d->Hp);
        prof_mark(s, "final norm", 0);
    }
    for (int i = 0; i < n; i++) { /* each sequence's kept rows and host logits, as cu_forward leaves them */
        cu_seq *q = (cu_seq *)sts[i];
        const be_batch *b = &bs[i];
        int T = b->T;
        if (b->keep_rows)
            CUCHK(cudaMemcpyAsync(q->kept, M->kept + (size_t)row0[i] * d->Hp, sizeof(bf16) * T * d->Hp,
                                  cudaMemcpyDeviceToDevice, s));
        for (int r = T - b->n_logits; r < T; r += BE_KEEP_ROWS) {
            int nr = T - r < BE_KEEP_ROWS ? T - r : BE_KEEP_ROWS;
            rmsnorm(s, a->x + (size_t)(row0[i] + r) * d->H, d->H, cm->final_norm, d->H, d->eps, nr, a->xb, d->Hp);
            gemm(s, cm->lm_head, d->V, a->xb, d->Hp, nr, q->lg, d->V, 0);
            softcap(s, d, q->lg, nr);
            CUCHK(cudaMemcpyAsync(b->logits + (size_t)(r - (T - b->n_logits)) * d->V, q->lg,
                                  sizeof(float) * nr * d->V, cudaMemcpyDeviceToHost, s));
            CUCHK(cudaStreamSynchronize(s)); /* q->lg is the next row block's too */
        }
    }
    prof_end(s);
    CUCHK(cudaGetLastError());
    for (int i = 0; i < n; i++) { /* cu_forward's bookkeeping */
        cu_seq *q = (cu_seq *)sts[i];
        q->tree = 0;
        q->fwd_len = q->len;
        q->fwd_T = bs[i].T;
        q->dn.snap_len = -1;
        q->dn.n_keep = 0;
        q->len += bs[i].T;
        q->last_T = bs[i].T;
        q->last_taps = bs[i].n_taps;
        q->n_kept = bs[i].keep_rows ? bs[i].T : 0;
    }
    return 0;
}

static int check_kept(const cu_seq *q, int row, int n, const char *op);

/* The kept rows of several sequences through the lm_head in passes of up to
 * BE_KEEP_ROWS rows: gathered (device copies), one GEMM, softcap, argmax -
 * each row's logits and argmax are what cu_logits / cu_argmax give it. */
static int cu_predict_multi(void *const *sts, const int *row, const int *cnt, int32_t *const *ids,
                            float *const *logits, int ns) {
    if (multi_check(sts, ns, "predict_multi") != 0) return -1;
    for (int i = 0; i < ns; i++)
        if (check_kept((const cu_seq *)sts[i], row[i], cnt[i], "predict_multi") != 0) return -1;
    cu_seq *q0 = (cu_seq *)sts[0];
    const cu_dims *d = &q0->d;
    cudaStream_t s = q0->be->stream;
    cu_multi *M = multi_get(q0->be, q0->cm, &q0->d, BE_KEEP_ROWS);
    if (!M) return -1;
    int i = 0, j = 0; /* the next row: sequence i, its row j */
    while (i < ns) {
        int m = 0, si[BE_KEEP_ROWS], sj[BE_KEEP_ROWS]; /* this pass's rows */
        for (; i < ns && m < BE_KEEP_ROWS; j = 0, i++) {
            const cu_seq *q = (const cu_seq *)sts[i];
            int take = cnt[i] - j < BE_KEEP_ROWS - m ? cnt[i] - j : BE_KEEP_ROWS - m;
            CUCHK(cudaMemcpyAsync(M->gath + (size_t)m * d->Hp, q->kept + (size_t)(row[i] + j) * d->Hp,
                                  sizeof(bf16) * take * d->Hp, cudaMemcpyDeviceToDevice, s));
            for (int k = 0; k < take; k++) si[m + k] = i, sj[m + k] = j + k;
            m += take;
            j += take;
            if (j < cnt[i]) break; /* the pass is full: sequence i goes on in the next */
        }
        prof_begin(s, -1);
        gemm(s, q0->cm->lm_head, d->V, M->gath, d->Hp, m, q0->lg, d->V, 0);
        softcap(s, d, q0->lg, m);
        prof_mark(s, "gemm lm_head", cw_bytes(&q0->cm->lm_head));
        argmax(s, q0->lg, d->V, d->V, m, q0->amx_v, q0->amx_i, q0->d_ids, NULL);
        prof_end(s);
        CUCHK(cudaMemcpyAsync(q0->h_ids, q0->d_ids, sizeof(int32_t) * m, cudaMemcpyDeviceToHost, s));
        for (int k = 0; k < m; k++)
            if (logits[si[k]])
                CUCHK(cudaMemcpyAsync(logits[si[k]] + (size_t)sj[k] * d->V, q0->lg + (size_t)k * d->V,
                                      sizeof(float) * d->V, cudaMemcpyDeviceToHost, s));
        CUCHK(cudaStreamSynchronize(s));
        CUCHK(cudaGetLastError());
        for (int k = 0; k < m; k++)
            if (!logits[si[k]]) ids[si[k]][sj[k]] = q0->h_ids[k];
    }
    return 0;
}

static int check_kept(const cu_seq *q, int row, int n, const char *op) {
    if (row >= 0 && n >= 1 && row + n <= q->n_kept) return 0;
    dfl_seterr("%s: rows %d..%d not kept by the last forward (%d kept)", op, row, row + n - 1, q->n_kept);
    return -1;
}

static int cu_logits(void *p, int row, int n, float *out) {
    cu_seq *q = (cu_seq *)p;
    cudaStream_t s = q->be->stream;
    if (check_kept(q, row, n, "logits") != 0) return -1;
    gemm(s, q->cm->lm_head, q->d.V, q->kept + (size_t)row * q->d.Hp, q->d.Hp, n, q->lg, q->d.V, 0);
    softcap(s, &q->d, q->lg, n);
    CUCHK(cudaMemcpyAsync(out, q->lg, sizeof(float) * n * q->d.V, cudaMemcpyDeviceToHost, s));
    CUCHK(cudaStreamSynchronize(s));
    return 0;
}

static int cu_argmax(void *p, int row, int n, int32_t *out) {
    cu_seq *q = (cu_seq *)p;
    cudaStream_t s = q->be->stream;
    if (check_kept(q, row, n, "argmax") != 0) return -1;
    prof_begin(s, -1);
    gemm(s, q->cm->lm_head, q->d.V, q->kept + (size_t)row * q->d.Hp, q->d.Hp, n, q->lg, q->d.V, 0);
    softcap(s, &q->d, q->lg, n); /* tanh may tie distinct logits: the argmax of the capped ones, as the CPU */
    prof_mark(s, "gemm lm_head", cw_bytes(&q->cm->lm_head));
    argmax(s, q->lg, q->d.V, q->d.V, n, q->amx_v, q->amx_i, q->d_ids, NULL);
    prof_mark(s, "argmax", 0);
    prof_end(s);
    CUCHK(cudaMemcpyAsync(q->h_ids, q->d_ids, sizeof(int32_t) * n, cudaMemcpyDeviceToHost, s));
    CUCHK(cudaStreamSynchronize(s));
    CUCHK(cudaGetLastError());
    memcpy(out, q->h_ids, sizeof(int32_t) * n);
    return 0;
}

static int cu_taps(void *p, int row, int n, float *out) {
    cu_seq *q = (cu_seq *)p;
    if (row < 0 || n < 1 || row + n > q->last_T || q->last_taps == 0) {
        dfl_seterr("taps: rows %d..%d not in the last forward (%d rows, %d taps)", row, row + n - 1, q->last_T,
                   q->last_taps);
        return -1;
    }
    size_t r = (size_t)q->last_taps * q->d.H;
    CUCHK(cudaMemcpyAsync(out, q->taps + row * r, sizeof(float) * n * r, cudaMemcpyDeviceToHost, q->be->stream));
    CUCHK(cudaStreamSynchronize(q->be->stream));
    return 0;
}

/* The tree rule (backend.h): the path rows[0..n) of the last forward moves
 * into place on the device - its K/V to cache rows len.., its taps and kept
 * rows to rows 0..n-1 (k_rows_compact) - and the rest is forgotten. A path
 * that is already in place (the draft's own chain: rows 0, 1, ..) moves
 * nothing. */
static int cu_tree_commit(void *p, const int *rows, int n) {
    cu_seq *q = (cu_seq *)p;
    const cu_dims *d = &q->d;
    cudaStream_t s = q->be->stream;
    int T = q->fwd_T, base = q->fwd_len;
    if (be_check_path(rows, n, T, base, q->len, q->tree ? q->tree_parent : NULL) != 0) return -1;
    int moved = 0;
    for (int i = 0; i < n; i++) moved |= rows[i] != i;
    if (d->n_lin) { /* only a chain gets here (trees are refused): the recurrent rule's rollback */
        if (cu_truncate(q, base + n) != base + n) {
            dfl_seterr("tree_commit: the recurrent state did not roll back to %d rows", base + n);
            return -1;
        }
    } else if (moved) {
        CUCHK(cudaMemcpyAsync(q->d_rows, rows, sizeof(int) * n, cudaMemcpyHostToDevice, s));
        /* every attention layer's [nkv][n_ctx][hd] block in a row (trees run on uniform layers only) */
        launch(k_rows_compact, dim3((d->hd + 63) / 64, d->L * d->nkv), 64, s, (uint32_t *)q->kc, (uint32_t *)q->vc,
               (size_t)q->n_ctx * d->hd, d->hd, (const int *)q->d_rows, n, base);
        int tw = q->last_taps * d->H, kw = d->Hp / 2; /* a kept row: Hp bf16 = Hp / 2 words */
        if (q->last_taps)
            launch(k_rows_compact, dim3((tw + 255) / 256, 1), 256, s, (uint32_t *)q->taps, (uint32_t *)NULL,
                   (size_t)0, tw, (const int *)q->d_rows, n, 0);
        if (q->n_kept)
            launch(k_rows_compact, dim3((kw + 255) / 256, 1), 256, s, (uint32_t *)q->kept, (uint32_t *)NULL,
                   (size_t)0, kw, (const int *)q->d_rows, n, 0);
        CUCHK(cudaGetLastError());
    }
    q->len = base + n;
    q->last_T = n;
    if (q->n_kept) q->n_kept = n;
    q->tree = 0;
    q->fwd_T = n; /* the path is now the last forward's rows 0..n-1, a chain */
    return 0;
}

/* Test hook (cuda_backend.h). */
extern "C" int cu_read_kv(void *p, int layer, int pos, float *k, float *v) {
    cu_seq *q = (cu_seq *)p;
    const cu_dims *d = &q->d;
    if (layer < 0 || layer >= d->L || pos < 0 || pos >= q->len || q->lin_of[layer] >= 0) {
        dfl_seterr("cu_read_kv: layer %d, position %d out of range (or a linear layer: no K/V)", layer, pos);
        return -1;
    }
    cu_dims e = layer_dims(d, &q->m->cfg, layer);
    for (int h = 0; h < e.nkv; h++) {
        size_t off = q->kv_off[layer] + ((size_t)h * q->n_ctx + pos) * e.hd;
        CUCHK(cudaMemcpy(k + (size_t)h * e.hd, q->kc + off, sizeof(float) * e.hd, cudaMemcpyDeviceToHost));
        CUCHK(cudaMemcpy(v + (size_t)h * e.hd, q->vc + off, sizeof(float) * e.hd, cudaMemcpyDeviceToHost));
    }
    return 0;
}

/* Test hook (cuda_backend.h): k_draft_topk on host logits. */
extern "C" int cu_topk(const float *lg, int ns, int nv, const float *xl, int nx, const int32_t *extra, int K,
                       int32_t *top_ids, float *top_lp) {
    if (ns < 1 || nv < 1 || nx < 0 || K < 1 || K > TOPK_MAX || K > nv + nx) {
        dfl_seterr("cu_topk: %d rows of %d + %d logits, top %d", ns, nv, nx, K);
        return -1;
    }
    float *dl = NULL, *dx = NULL, *dlp = NULL;
    int32_t *de = NULL, *di = NULL;
    int rc = -1;
    if (cu_alloc(&dl, sizeof(float) * ns * nv) || cu_alloc(&dx, sizeof(float) * ns * (nx ? nx : 1)) ||
        cu_alloc(&de, sizeof(int32_t) * (nx ? nx : 1)) || cu_alloc(&di, sizeof(int32_t) * ns * K) ||
        cu_alloc(&dlp, sizeof(float) * ns * K))
        goto out;
    if (cudaMemcpy(dl, lg, sizeof(float) * ns * nv, cudaMemcpyHostToDevice) != cudaSuccess ||
        (nx && cudaMemcpy(dx, xl, sizeof(float) * ns * nx, cudaMemcpyHostToDevice) != cudaSuccess) ||
        (nx && cudaMemcpy(de, extra, sizeof(int32_t) * nx, cudaMemcpyHostToDevice) != cudaSuccess))
        goto out;
    k_draft_topk<<<ns, TOPK_THREADS>>>(dl, nv, dx, nx, de, K, di, dlp);
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpy(top_ids, di, sizeof(int32_t) * ns * K, cudaMemcpyDeviceToHost) != cudaSuccess ||
        cudaMemcpy(top_lp, dlp, sizeof(float) * ns * K, cudaMemcpyDeviceToHost) != cudaSuccess)
        goto out;
    rc = 0;
out:
    if (rc) dfl_seterr("cu_topk: %s", cudaGetErrorString(cudaGetLastError()));
    cudaFree(dl);
    cudaFree(dx);
    cudaFree(de);
    cudaFree(di);
    cudaFree(dlp);
    return rc;
}

/* ---- DFlash draft --------------------------------------------------------------- */

enum { PEND_ROWS = BE_MAX_ROWS };

typedef struct {
    cu_be *be;
    const mdl_model *dm, *tm;
    const cu_model *dc, *tc;
    cu_dims d;
    int n_ctx, len, n_pend, max_B, F, Fp, n_taps;
    float *kc, *vc;          /* [L][nkv][n_ctx][hd] context K/V */
    float *cos_t, *sin_t;    /* [n_ctx + max_B][hd/2] */
    float *pend;             /* [PEND_ROWS][F] fed rows not yet projected */
    bf16 *fb;                /* [PEND_ROWS][Fp] */
    cu_act a;                /* PEND_ROWS rows */
    cu_split sp;             /* chunked attention scratch (n_ctx + max_B positions) */
    float *lg;               /* [max_B][V] */
    float *best, *xl;        /* [max_B], [max_B][CFG_MAX_EOS + 1] */
    float *amx_v;            /* [max_B][AMX_PARTS] argmax scratch */
    int *amx_i;              /* [max_B][AMX_PARTS] */
    int32_t *d_tok, *d_ids, *d_extra;
    int32_t *h_ids;          /* pinned */
    int *d_pos;              /* position of the rows being projected or drafted */
    int32_t *d_top_ids;      /* [max_B][TOPK_MAX] top-k candidates (k_draft_topk) */
    float *d_top_lp;         /* [max_B][TOPK_MAX] their log-probabilities */
} cu_draft;

static void cu_draft_destroy(void *p) {
    cu_draft *q = (cu_draft *)p;
    if (!q) return;
    cudaFree(q->kc);
    cudaFree(q->vc);
    cudaFree(q->cos_t);
    cudaFree(q->sin_t);
    cudaFree(q->pend);
    cudaFree(q->fb);
    act_free(&q->a);
    split_free(&q->sp);
    cudaFree(q->lg);
    cudaFree(q->best);
    cudaFree(q->xl);
    cudaFree(q->amx_v);
    cudaFree(q->amx_i);
    cudaFree(q->d_tok);
    cudaFree(q->d_ids);
    cudaFree(q->d_extra);
    cudaFree(q->d_pos);
    cudaFreeHost(q->h_ids);
    cudaFree(q->d_top_ids);
    cudaFree(q->d_top_lp);
    free(q);
}

static void *cu_draft_create(void *p, const mdl_model *dm, const mdl_model *tm, int n_ctx) {
    cu_be *be = (cu_be *)p;
    if (!dm->be_data || !tm->be_data) {
        dfl_seterr("cuda: draft or target not prepared");
        return NULL;
    }
    if (!att_supported(dm->cfg.head_dim)) {
        dfl_seterr("backend cuda: head_dim %d is not supported (16, 32, 64, 128, 256)", dm->cfg.head_dim);
        return NULL;
    }
    cu_draft *q = (cu_draft *)dfl_calloc(1, sizeof *q);
    q->be = be;
    q->dm = dm;
    q->tm = tm;
    q->dc = (const cu_model *)dm->be_data;
    q->tc = (const cu_model *)tm->be_data;
    q->d = dims_of(&dm->cfg, tm->cfg.vocab);
    q->n_ctx = n_ctx;
    q->max_B = dm->cfg.block_size > 32 ? dm->cfg.block_size : 32;
    if (q->max_B > BE_KEEP_ROWS) q->max_B = BE_KEEP_ROWS;
    q->n_taps = dm->cfg.n_taps;
    q->F = q->n_taps * q->d.H;
    q->Fp = q->dc->fc.cols_p;
    const cu_dims *d = &q->d;
    size_t kv = (size_t)d->L * d->nkv * n_ctx * d->hd;
    if (cu_alloc(&q->kc, sizeof(float) * kv) || cu_alloc(&q->vc, sizeof(float) * kv) ||
        rope_upload(&q->cos_t, &q->sin_t, &dm->cfg, n_ctx + q->max_B) ||
        cu_alloc(&q->pend, sizeof(float) * PEND_ROWS * q->F) || cu_alloc(&q->fb, sizeof(bf16) * PEND_ROWS * q->Fp) ||
        act_alloc(&q->a, d, PEND_ROWS) || split_alloc(&q->sp, be, d, &dm->cfg, n_ctx + q->max_B) || cu_alloc(&q->lg, sizeof(float) * q->max_B * (size_t)d->V) ||
        cu_alloc(&q->best, sizeof(float) * q->max_B) ||
        cu_alloc(&q->amx_v, sizeof(float) * q->max_B * AMX_PARTS) ||
        cu_alloc(&q->amx_i, sizeof(int) * q->max_B * AMX_PARTS) ||
        cu_alloc(&q->xl, sizeof(float) * q->max_B * (CFG_MAX_EOS + 1)) ||
        cu_alloc(&q->d_tok, sizeof(int32_t) * q->max_B) || cu_alloc(&q->d_ids, sizeof(int32_t) * q->max_B) ||
        cu_alloc(&q->d_extra, sizeof(int32_t) * (CFG_MAX_EOS + 1)) ||
        cu_alloc(&q->d_pos, sizeof(int)) || cudaMallocHost(&q->h_ids, sizeof(int32_t) * q->max_B) != cudaSuccess ||
        cu_alloc(&q->d_top_ids, sizeof(int32_t) * q->max_B * TOPK_MAX) ||
        cu_alloc(&q->d_top_lp, sizeof(float) * q->max_B * TOPK_MAX)) {
        if (!*dfl_lasterr()) dfl_seterr("cuda: cannot allocate the draft state");
        cu_draft_destroy(q);
        return NULL;
    }
    return q;
}

/* Project the pending rows: c = hidden_norm(fc . f), then per layer
 * K = RoPE(k_norm(Wk c)), V = Wv c stored at positions len.. */
static int flush(cu_draft *q) {
    int n = q->n_pend;
    if (!n) return 0;
    const cu_dims *d = &q->d;
    cudaStream_t s = q->be->stream;
    int pos0 = q->len;
    CUCHK(cudaMemcpyAsync(q->d_pos, &pos0, sizeof(int), cudaMemcpyHostToDevice, s));
    prof_begin(s, -1);
    launch(k_to_bf16, dim3(n, (q->F + 255) / 256), 256, s, q->pend, q->F, q->F, q->fb, q->Fp);
    gemm(s, q->dc->fc, d->H, q->fb, q->Fp, n, q->a.x, d->H, 0);
    rmsnorm(s, q->a.x, d->H, q->dc->hidden_norm, d->H, d->eps, n, q->a.xb, d->Hp);
    size_t lkv = (size_t)d->nkv * q->n_ctx * d->hd;
    for (int l = 0; l < d->L; l++) {
        const cu_layer *L = &q->dc->layers[l];
        cw_weight kvw = cw_rows(&L->wqkv, d->Q, 2 * d->KV);
        gemm(s, kvw, 2 * d->KV, q->a.xb, d->Hp, n, q->a.qkv, 2 * d->KV, 0);
        norm_rope(s, q->a.qkv, 2 * d->KV, 0, 0, NULL, 0, d->KV, d->nkv, L->k_norm, d->hd, d->rh, d->eps, q->cos_t, q->sin_t,
                  q->d_pos, q->kc + l * lkv, q->vc + l * lkv, q->n_ctx, n);
    }
    prof_mark(s, "draft ctx project", 0);
    prof_end(s);
    CUCHK(cudaGetLastError());
    q->len += n;
    q->n_pend = 0;
    return 0;
}

static int pend_room(cu_draft *q, int n) {
    if (q->len + q->n_pend + n > q->n_ctx) {
        dfl_seterr("draft context full: %d + %d > %d", q->len + q->n_pend, n, q->n_ctx);
        return -1;
    }
    return q->n_pend + n > PEND_ROWS ? flush(q) : 0;
}

static int cu_draft_feed(void *p, void *seq, int row, int n) {
    cu_draft *q = (cu_draft *)p;
    cu_seq *t = (cu_seq *)seq;
    if (t->last_taps != q->n_taps || row < 0 || n < 0 || row + n > t->last_T) {
        dfl_seterr("draft_feed: rows %d..%d with %d taps, the last forward has %d rows with %d taps", row,
                   row + n - 1, q->n_taps, t->last_T, t->last_taps);
        return -1;
    }
    if (n == 0) return 0;
    if (pend_room(q, n) != 0) return -1;
    CUCHK(cudaMemcpyAsync(q->pend + (size_t)q->n_pend * q->F, t->taps + (size_t)row * q->F,
                          sizeof(float) * n * q->F, cudaMemcpyDeviceToDevice, q->be->stream));
    q->n_pend += n;
    return 0;
}

static int cu_draft_ctx_append(void *p, const float *feats, int n) {
    cu_draft *q = (cu_draft *)p;
    for (int r = 0; r < n;) {
        int c = n - r < PEND_ROWS ? n - r : PEND_ROWS;
        if (pend_room(q, c) != 0) return -1;
        CUCHK(cudaMemcpyAsync(q->pend + (size_t)q->n_pend * q->F, feats + (size_t)r * q->F, sizeof(float) * c * q->F,
                              cudaMemcpyHostToDevice, q->be->stream));
        CUCHK(cudaStreamSynchronize(q->be->stream));
        q->n_pend += c;
        r += c;
    }
    return 0;
}

static int cu_draft_ctx_length(void *p) {
    cu_draft *q = (cu_draft *)p;
    return q->len + q->n_pend;
}

static void cu_draft_ctx_truncate(void *p, int len) {
    cu_draft *q = (cu_draft *)p;
    if (len < 0 || len >= q->len + q->n_pend) return;
    if (len >= q->len) {
        q->n_pend = len - q->len;
    } else {
        q->len = len;
        q->n_pend = 0;
    }
}

/* The checks of a draft block on state q (draft_block's refusals); *ns_out,
 * *nv_out: its slots and scored ids. 0, or -1 + error. */
static int draft_check(const cu_draft *q, const be_draft_block *b, int *ns_out, int *nv_out) {
    const cu_dims *d = &q->d;
    int B = b->B;
    if (B < 2 || B > q->max_B) {
        dfl_seterr("draft block length %d out of range 2..%d", B, q->max_B);
        return -1;
    }
    if (b->n_extra < 0 || b->n_extra > CFG_MAX_EOS + 1) {
        dfl_seterr("draft block: %d extra ids (at most %d)", b->n_extra, CFG_MAX_EOS + 1);
        return -1;
    }
    if (b->ids) { /* be_ops.draft_ids is 0 here: the engine never passes them */
        dfl_seterr("draft block: the cuda backend scores ids by number only (no gathered head)");
        return -1;
    }
    *ns_out = b->n_slots > 0 && b->n_slots < B - 1 ? b->n_slots : B - 1;
    int nv = *nv_out = b->n_vocab > 0 && b->n_vocab < d->V ? b->n_vocab : d->V;
    if (b->top_k > 0 && (b->top_k > BE_DRAFT_TOPK || b->top_k > TOPK_MAX || b->top_k > nv + b->n_extra ||
                         !b->top_ids || !b->top_logp)) {
        dfl_seterr("draft block: top_k %d (at most %d and the %d scored ids, with both output buffers)", b->top_k,
                   BE_DRAFT_TOPK, nv + b->n_extra);
        return -1;
    }
    if (check_tokens(b->tokens, B, d->V) != 0 || check_tokens(b->extra, b->n_extra, d->V) != 0) return -1;
    if (q->len + q->n_pend + B > q->n_ctx + q->max_B) {
        dfl_seterr("draft block at position %d past the context", q->len + q->n_pend);
        return -1;
    }
    return 0;
}

static int cu_draft_block(void *p, const be_draft_block *b) {
    cu_draft *q = (cu_draft *)p;
    const cu_dims *d = &q->d;
    cudaStream_t s = q->be->stream;
    int B = b->B, ns, nv;
    if (draft_check(q, b, &ns, &nv) != 0) return -1;
    if (flush(q) != 0) return -1;
    int pos0 = q->len;
    CUCHK(cudaMemcpyAsync(q->d_pos, &pos0, sizeof(int), cudaMemcpyHostToDevice, s));
    CUCHK(cudaMemcpyAsync(q->d_tok, b->tokens, sizeof(int32_t) * B, cudaMemcpyHostToDevice, s));
    if (b->n_extra)
        CUCHK(cudaMemcpyAsync(q->d_extra, b->extra, sizeof(int32_t) * b->n_extra, cudaMemcpyHostToDevice, s));
    prof_begin(s, -1);
    launch(k_embed, dim3(B, (d->H + 255) / 256), 256, s, q->tc->embed, q->d_tok, q->a.x, d->H);
    if (q->tm->cfg.arch == CFG_GEMMA4) /* the target's embedding module scales (the CPU's embed_rows) */
        launch(k_scale, (B * d->H + 255) / 256, 256, s, q->a.x, (size_t)B * d->H, (float)sqrt((double)d->H));
    prof_mark(s, "draft embed", 0);
    size_t lkv = (size_t)d->nkv * q->n_ctx * d->hd;
    int normed = 0; /* q->a.xb holds the next layer's input norm (layer()) */
    for (int l = 0; l < d->L; l++) {
        cu_seg sg = seg_of(0, B, q->d_pos, q->kc + l * lkv, q->vc + l * lkv, q->n_ctx, q->cos_t, q->sin_t, &q->sp);
        normed = layer(s, d, &q->dc->layers[l], &q->a, B, &sg, 1, 0, NULL, -1, normed,
                       l + 1 < d->L ? q->dc->layers[l + 1].in_norm : NULL, q->a.xb, NULL, NULL);
    }
    rmsnorm(s, q->a.x + d->H, d->H, q->dc->final_norm, d->H, d->eps, ns, q->a.xb, d->Hp);
    prof_mark(s, "draft final norm", 0);
    gemm(s, q->tc->lm_head, nv, q->a.xb, d->Hp, ns, q->lg, nv, 0);
    prof_mark(s, "draft lm_head", (double)nv * q->tc->lm_head.row_bytes);
    argmax(s, q->lg, nv, nv, ns, q->amx_v, q->amx_i, q->d_ids, q->best);
    prof_mark(s, "draft argmax", 0);
    if (b->n_extra) {
        launch(k_extra_logits, dim3(ns, b->n_extra), 32, s, q->tc->lm_head, q->d_extra, b->n_extra, q->a.xb, d->Hp,
               d->H, q->xl);
        launch(k_pick_extra, 1, 64, s, q->d_ids, q->best, q->xl, q->d_extra, b->n_extra, ns);
        prof_mark(s, "draft extra ids", 0);
    }
    if (b->top_k > 0) {
        launch(k_draft_topk, ns, TOPK_THREADS, s, (const float *)q->lg, nv, (const float *)q->xl, b->n_extra,
               (const int32_t *)q->d_extra, b->top_k, q->d_top_ids, q->d_top_lp);
        prof_mark(s, "draft top-k", 0);
    }
    prof_end(s);
    CUCHK(cudaMemcpyAsync(q->h_ids, q->d_ids, sizeof(int32_t) * ns, cudaMemcpyDeviceToHost, s));
    if (b->logits) CUCHK(cudaMemcpyAsync(b->logits, q->lg, sizeof(float) * ns * nv, cudaMemcpyDeviceToHost, s));
    if (b->extra_logits && b->n_extra)
        CUCHK(cudaMemcpyAsync(b->extra_logits, q->xl, sizeof(float) * ns * b->n_extra, cudaMemcpyDeviceToHost, s));
    if (b->top_k > 0) {
        CUCHK(cudaMemcpyAsync(b->top_ids, q->d_top_ids, sizeof(int32_t) * ns * b->top_k, cudaMemcpyDeviceToHost, s));
        CUCHK(cudaMemcpyAsync(b->top_logp, q->d_top_lp, sizeof(float) * ns * b->top_k, cudaMemcpyDeviceToHost, s));
    }
    CUCHK(cudaStreamSynchronize(s));
    CUCHK(cudaGetLastError());
    if (b->out) memcpy(b->out, q->h_ids, sizeof(int32_t) * ns);
    return 0;
}

/* Several draft blocks in one pass (be_ops.draft_block_multi): each state's
 * pending context projected (flush, one at a time), the blocks' rows stacked
 * (cu_multi of the draft model) through the layers with one cu_seg each
 * (its context cache, positions, tables, scratch; non-causal, block K/V not
 * stored), then the slots of whole blocks packed into passes of up to
 * BE_KEEP_ROWS rows over the target's lm_head: one GEMM and argmax a pass,
 * each block's extra ids and top-k over its own rows. Every row is computed
 * by the kernels cu_draft_block uses for it, so each block's out, logits
 * and top candidates are what it gives alone. The blocks must score the same
 * ids (n_vocab): else refused, and the engine runs them one by one. */
static int cu_draft_block_multi(void *const *sts, const be_draft_block *bs, int n) {
    if (multi_distinct(sts, n, "draft_block_multi") != 0) return -1;
    cu_draft *q0 = (cu_draft *)sts[0];
    const cu_dims *d = &q0->d;
    cudaStream_t s = q0->be->stream;
    int ns[BE_MAX_SEQS], row0[BE_MAX_SEQS], rows = 0, nv = 0;
    for (int i = 0; i < n; i++) {
        cu_draft *q = (cu_draft *)sts[i];
        if (q->dc != q0->dc || q->tc != q0->tc || q->be != q0->be) {
            dfl_seterr("draft_block_multi: block %d is of another draft or target than block 0", i);
            return -1;
        }
        int v;
        if (draft_check(q, &bs[i], &ns[i], &v) != 0) {
            char why[256];
            snprintf(why, sizeof why, "%s", dfl_lasterr());
            dfl_seterr("draft_block_multi: block %d: %s", i, why);
            return -1;
        }
        if (i > 0 && v != nv) {
            dfl_seterr("draft_block_multi: block %d scores %d ids, block 0 %d", i, v, nv);
            return -1;
        }
        nv = v;
        row0[i] = rows;
        rows += bs[i].B;
    }
    if (rows > MULTI_MAX_ROWS) {
        dfl_seterr("draft_block_multi: %d rows in all (at most %d)", rows, (int)MULTI_MAX_ROWS);
        return -1;
    }
    cu_multi *M = multi_get(q0->be, q0->dc, d, rows);
    if (!M) return -1;
    cu_act *a = &M->a;
    for (int i = 0; i < n; i++) {
        cu_draft *q = (cu_draft *)sts[i];
        if (flush(q) != 0) return -1;
        int pos0 = q->len;
        CUCHK(cudaMemcpyAsync(q->d_pos, &pos0, sizeof(int), cudaMemcpyHostToDevice, s));
        CUCHK(cudaMemcpyAsync(M->d_tok + row0[i], bs[i].tokens, sizeof(int32_t) * bs[i].B, cudaMemcpyHostToDevice, s));
        if (bs[i].n_extra)
            CUCHK(cudaMemcpyAsync(q->d_extra, bs[i].extra, sizeof(int32_t) * bs[i].n_extra, cudaMemcpyHostToDevice, s));
    }
    prof_begin(s, -1);
    launch(k_embed, dim3(rows, (d->H + 255) / 256), 256, s, q0->tc->embed, M->d_tok, a->x, d->H);
    if (q0->tm->cfg.arch == CFG_GEMMA4)
        launch(k_scale, (rows * d->H + 255) / 256, 256, s, a->x, (size_t)rows * d->H, (float)sqrt((double)d->H));
    prof_mark(s, "draft embed", 0);
    cu_seg *segs = (cu_seg *)dfl_malloc(sizeof(cu_seg) * d->L * n);
    cu_dims *dls = (cu_dims *)dfl_malloc(sizeof(cu_dims) * d->L);
    cu_stack *stk = (cu_stack *)dfl_malloc(sizeof(cu_stack) * d->L);
    int pos0s[BE_MAX_SEQS];
    for (int i = 0; i < n; i++) pos0s[i] = ((cu_draft *)sts[i])->len;
    for (int l = 0; l < d->L; l++) {
        dls[l] = *d;
        for (int i = 0; i < n; i++) {
            cu_draft *q = (cu_draft *)sts[i];
            size_t lkv = (size_t)d->nkv * q->n_ctx * d->hd;
            segs[(size_t)l * n + i] = seg_of(row0[i], bs[i].B, q->d_pos, q->kc + l * lkv, q->vc + l * lkv, q->n_ctx,
                                             q->cos_t, q->sin_t, &q->sp);
        }
    }
    int tables = stack_tables(M, s, d->L, n, segs, pos0s, dls, rows, stk);
    int normed = 0;
    for (int l = 0; l < d->L && tables >= 0; l++)
        normed = layer(s, d, &q0->dc->layers[l], a, rows, segs + (size_t)l * n, n, 0, NULL, -1, normed,
                       l + 1 < d->L ? q0->dc->layers[l + 1].in_norm : NULL, a->xb, NULL, tables ? &stk[l] : NULL);
    free(segs), free(dls), free(stk);
    if (tables < 0) return -1;
    /* passes of whole blocks' slots (a block has at most max_B - 1 <= BE_KEEP_ROWS slots) */
    for (int i0 = 0; i0 < n;) {
        int i1 = i0, m = 0, off[BE_MAX_SEQS];
        for (; i1 < n && m + ns[i1] <= BE_KEEP_ROWS; i1++) {
            off[i1] = m;
            rmsnorm(s, a->x + (size_t)(row0[i1] + 1) * d->H, d->H, q0->dc->final_norm, d->H, d->eps, ns[i1],
                    M->gath + (size_t)m * d->Hp, d->Hp);
            m += ns[i1];
        }
        gemm(s, q0->tc->lm_head, nv, M->gath, d->Hp, m, M->lg, nv, 0);
        prof_mark(s, "draft lm_head", (double)nv * q0->tc->lm_head.row_bytes);
        argmax(s, M->lg, nv, nv, m, M->amx_v, M->amx_i, M->d_ids, M->best);
        for (int i = i0; i < i1; i++) {
            cu_draft *q = (cu_draft *)sts[i];
            const be_draft_block *b = &bs[i];
            int o = off[i];
            if (b->n_extra) {
                launch(k_extra_logits, dim3(ns[i], b->n_extra), 32, s, q0->tc->lm_head, q->d_extra, b->n_extra,
                       M->gath + (size_t)o * d->Hp, d->Hp, d->H, q->xl);
                launch(k_pick_extra, 1, 64, s, M->d_ids + o, M->best + o, q->xl, q->d_extra, b->n_extra, ns[i]);
            }
            if (b->top_k > 0)
                launch(k_draft_topk, ns[i], TOPK_THREADS, s, (const float *)(M->lg + (size_t)o * nv), nv,
                       (const float *)q->xl, b->n_extra, (const int32_t *)q->d_extra, b->top_k, q->d_top_ids,
                       q->d_top_lp);
            if (b->logits)
                CUCHK(cudaMemcpyAsync(b->logits, M->lg + (size_t)o * nv, sizeof(float) * ns[i] * nv,
                                      cudaMemcpyDeviceToHost, s));
            if (b->extra_logits && b->n_extra)
                CUCHK(cudaMemcpyAsync(b->extra_logits, q->xl, sizeof(float) * ns[i] * b->n_extra,
                                      cudaMemcpyDeviceToHost, s));
            if (b->top_k > 0) {
                CUCHK(cudaMemcpyAsync(b->top_ids, q->d_top_ids, sizeof(int32_t) * ns[i] * b->top_k,
                                      cudaMemcpyDeviceToHost, s));
                CUCHK(cudaMemcpyAsync(b->top_logp, q->d_top_lp, sizeof(float) * ns[i] * b->top_k,
                                      cudaMemcpyDeviceToHost, s));
            }
        }
        CUCHK(cudaMemcpyAsync(M->h_ids, M->d_ids, sizeof(int32_t) * m, cudaMemcpyDeviceToHost, s));
        CUCHK(cudaStreamSynchronize(s));
        CUCHK(cudaGetLastError());
        for (int i = i0; i < i1; i++)
            if (bs[i].out) memcpy(bs[i].out, M->h_ids + off[i], sizeof(int32_t) * ns[i]);
        i0 = i1;
    }
    prof_end(s);
    return 0;
}

static be_ops make_ops(void) {
    be_ops o;
    memset(&o, 0, sizeof o);
    o.name = "cuda";
    o.predict_rows = 0; /* every verify row at once: the lm_head pass is memory-bound */
    o.probe = cu_probe;
    o.open = cu_open;
    o.close = cu_close;
    o.describe = cu_describe;
    o.draft_q8 = cu_draft_q8;
    o.prepare = cu_prepare;
    o.release = cu_release;
    o.bandwidth = cu_bandwidth;
    o.expert_bytes = cu_expert_bytes;
    o.create = cu_create;
    o.destroy = cu_destroy;
    o.forward = cu_forward;
    o.length = cu_length;
    o.finish = cu_finish;
    o.truncate = cu_truncate;
    o.logits = cu_logits;
    o.argmax = cu_argmax;
    o.taps = cu_taps;
    const char *tree_env = getenv("DFLASH_CUDA_TREE"); /* tree_default's comment */
    if (tree_env ? *tree_env == '1' : tree_default) o.tree_commit = cu_tree_commit;
    /* forward_multi / predict_multi / draft_block_multi (continuous batching:
     * a step's sequences in one pass), offered since test_cuda's multi and
     * draft_multi tests passed on an H100 (2026-12-07); DFLASH_CUDA_MULTI=0
     * takes them away (the engine then runs a step's sequences one by one),
     * for comparison */
    const char *multi_env = getenv("DFLASH_CUDA_MULTI");
    if (!(multi_env && *multi_env == '0')) {
        o.forward_multi = cu_forward_multi;
        o.predict_multi = cu_predict_multi;
        o.draft_block_multi = cu_draft_block_multi;
    }
    o.draft_create = cu_draft_create;
    o.draft_destroy = cu_draft_destroy;
    o.draft_feed = cu_draft_feed;
    o.draft_ctx_append = cu_draft_ctx_append;
    o.draft_ctx_length = cu_draft_ctx_length;
    o.draft_ctx_truncate = cu_draft_ctx_truncate;
    o.draft_block = cu_draft_block;
    /* copy_prefix / draft_ctx_copy (the prefix rule, backend.h) stay NULL:
     * not written for the device's caches yet (a cudaMemcpyAsync per layer
     * and head would do), so the engine prefills the prompt instead. */
    return o;
}

extern "C" const be_ops be_cuda = make_ops();

extern "C" be_ops cu_ops_with_multi(void) {
    be_ops o = make_ops();
    o.forward_multi = cu_forward_multi;
    o.predict_multi = cu_predict_multi;
    o.draft_block_multi = cu_draft_block_multi;
    return o;
}
