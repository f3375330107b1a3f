/* cu_kernels.cuh - the CUDA backend's device code. Prefix: cu_ / k_.
 *
 * Exactness rule (the GPU form of kernels.h's batch invariance): every value
 * a kernel writes for token row t depends only on row t's inputs and on the
 * weights, through one fixed order of operations that does not depend on how
 * many rows the launch covers:
 *   - k_gemm: a warp owns 16 weight rows and a fixed slice of K (the slices
 *     depend on the weight's shape only, cw_weight.split); it walks its slice
 *     in ascending k with tensor-core MMAs (m16n8k16, bf16 in, f32
 *     accumulate), each output element of an MMA computed from its own row,
 *     column and accumulator only; the slices' partial sums are then added in
 *     slice order. Token rows are the MMA's n columns: a row's result is the
 *     same whether its 8-column tile holds 1 token or 8, and whether the launch
 *     has 1 tile or 4 (T up to 32; wider batches are cut into launches of 32).
 *   - row kernels (RMSNorm, q/k norm + RoPE, embedding) reduce one row in
 *     one fixed tree; the SwiGLU is the gate/up GEMM's epilogue; a GEMM's
 *     tail (cu_tail) runs a row kernel's own code once the rows it needs
 *     are written, so folding it there changes no bit;
 *   - attention (the default, k_att_part/k_att_merge): per query, chunks of
 *     a fixed number of absolute key positions, each an exact softmax in a
 *     fixed order, merged in ascending chunk order (the rule is stated at
 *     the kernels); the older kernels (DFLASH_CUDA_ATT_SPLIT=0):
 *     each (row, query head) walks its keys in chunks (16 keys for
 *     head_dim 64/128, 32 otherwise), chunk c handled by warp c % 8, each
 *     warp an online softmax over its chunks in ascending order, the 8 warps
 *     merged in warp order; a block may serve the query heads that share a
 *     K/V head without changing any of that. Which keys a row sees depends
 *     on its position only;
 *   - argmax: the first index of the maximum (a total order: any split gives
 *     the same answer).
 *
 * Numerics: weights are streamed as stored (BF16, or MLX affine 8/4-bit
 * dequantized in registers to bfloat16: w = s*q + b in f32, rounded once);
 * activations enter a matmul as bfloat16 (rounded once from f32) and every
 * sum is f32. The residual stream, norms, RoPE, softmax and K/V stay f32. */
#ifndef DFL_CU_KERNELS_CUH
#define DFL_CU_KERNELS_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

enum { CW_BF16 = 0, CW_Q8 = 1, CW_Q4 = 2 };   /* weight kinds on the device */
enum { SC_BF16 = 0, SC_F16 = 1, SC_F32 = 2 }; /* scale/bias storage */
enum { CW_ROW_ALIGN = 16, CW_COL_ALIGN = 128 };

/* A weight matrix W[rows][cols] resident on the device.
 *   data: rows_p rows of row_bytes each: BF16 [cols_p] bf16; Q8 [cols_p] u8;
 *         Q4 [cols_p/2] bytes, element k in nibble k%2 of byte k/2 (low first)
 *         - the MLX packing read as bytes - stored in the order k_gemm
 *         reads them ("tiled"): 16-row tiles one after the other; inside a
 *         tile, 64-byte column steps; inside a step 1024 bytes: rows 0-7
 *         then rows 8-15, each half as 32 lanes x 16 bytes, lane l = row%8*4
 *         + (16-byte quarter of the step). A warp's load of one step is then
 *         512 contiguous bytes. Byte b of row r lives at cu_tiled(r, b).
 *   sb:   Q8/Q4 only: [rows_p][cols_p/group] (scale, bias) pairs, 2 x 16-bit
 *         (SC_BF16/SC_F16) or 2 x f32 (SC_F32).
 * rows_p and cols_p are padded (16 rows + one spare tile, 128 columns) with
 * zeros: a padded weight is 0 (scale 0, bias 0), and activation buffers keep
 * their padding columns at 0, so padding adds exact zeros.
 * split: K slices per 16-row tile (1..8), fixed at upload from the shape;
 * row views keep it, so a row's bits never depend on the view. */
typedef struct {
    int kind, rows, cols, rows_p, cols_p, group, sdt, split;
    int iq; /* Q4 only, fixed at upload: 1 = the integer-MMA nibble order (cu_iq_pos) */
    int mx; /* Q4 only: the nibbles are MXFP4 (e2m1) codes of an 8-bit weight (cu_mx4_q) */
    size_t row_bytes, sb_row_bytes;
    uint8_t *data, *sb;
} cw_weight;

__device__ __forceinline__ float cu_bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

__device__ __forceinline__ void cu_load_sb(const cw_weight &w, int r, int grp, float *s, float *b) {
    const uint8_t *p = w.sb + (size_t)r * w.sb_row_bytes;
    if (w.sdt == SC_F32) {
        float2 v = ((const float2 *)p)[grp];
        *s = v.x;
        *b = v.y;
    } else {
        uint32_t v = ((const uint32_t *)p)[grp];
        if (w.sdt == SC_BF16) {
            *s = cu_bf2f((uint16_t)(v & 0xffff));
            *b = cu_bf2f((uint16_t)(v >> 16));
        } else {
            *s = __half2float(__ushort_as_half((unsigned short)(v & 0xffff)));
            *b = __half2float(__ushort_as_half((unsigned short)(v >> 16)));
        }
    }
}

/* Offset in data of byte b of row r (row-major byte b = k * element size). */
__host__ __device__ __forceinline__ size_t cu_tiled(size_t row_bytes, int r, size_t b) {
    return (size_t)(r >> 4) * 16 * row_bytes + (b >> 6) * 1024 + (size_t)((r >> 3) & 1) * 512 +
           (size_t)(((r & 7) << 2) | ((b >> 4) & 3)) * 16 + (b & 15);
}

/* The integer-MMA order of a Q4 row (w.iq; k_gemm with DQ >= 2): inside
 * each 128-column step, MMA m (0..7) takes columns 16m..16m+15, lane t
 * (0..3) columns 16m+4t..16m+4t+3, so one MMA never crosses a group of 16,
 * 32, 64 or 128. Lane t's 16 bytes (nibble p = its element 4m+j, j < 4)
 * are 4 words of 8 elements e0..e7 with e0,e2,e4,e6 in nibbles 0-3 and
 * e1,e3,e5,e7 in nibbles 4-7: then lop3(word >> 4i, 0x000f000f, 0x43004300)
 * is the bf16 pair (128 + e_2i, 128 + e_2i+1), the MMA operand. Returns the
 * nibble index (row-major, before tiling) where element k lives. */
__host__ __device__ __forceinline__ int cu_iq_pos(int k) {
    int c = k & 127, m = c >> 4, t = (c >> 2) & 3, e = 4 * m + (c & 3); /* element e of lane t's 32 */
    int word = e >> 3, e8 = e & 7, nib = (e8 >> 1) + (e8 & 1) * 4;
    return (k & ~127) + t * 32 + word * 8 + nib;
}

/* Row-major Q4 rows -> the cu_iq_pos order, in place: one thread per
 * 64-byte step of a row (rows * steps of them). */
__global__ void k_iq_order(uint8_t *data, size_t n_steps) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n_steps) return;
    uint8_t *p = data + i * 64, in[64], out[64];
    for (int b = 0; b < 64; b++) in[b] = p[b], out[b] = 0;
    for (int k = 0; k < 128; k++) {
        int q = (in[k >> 1] >> ((k & 1) * 4)) & 15, n = cu_iq_pos(k);
        out[n >> 1] |= (uint8_t)(q << ((n & 1) * 4));
    }
    for (int b = 0; b < 64; b++) p[b] = out[b];
}

/* W[r][k] as f32 (embedding rows, extra logits). */
__device__ __forceinline__ float cu_get(const cw_weight &w, int r, int k) {
    const uint8_t *d = w.data;
    if (w.kind == CW_BF16) {
        uint16_t h;
        memcpy(&h, d + cu_tiled(w.row_bytes, r, (size_t)k * 2), 2);
        return cu_bf2f(h);
    }
    int q;
    if (w.kind == CW_Q8) q = d[cu_tiled(w.row_bytes, r, k)];
    else if (w.iq) q = (d[cu_tiled(w.row_bytes, r, cu_iq_pos(k) >> 1)] >> ((cu_iq_pos(k) & 1) * 4)) & 15;
    else q = (d[cu_tiled(w.row_bytes, r, k >> 1)] >> ((k & 1) * 4)) & 15;
    float s, b;
    cu_load_sb(w, r, k / w.group, &s, &b);
    return fmaf(s, (float)q, b);
}

/* Programmatic dependent launch (sm_90): kernels of a forward are launched
 * so that the next one may start while this one runs (cuda_backend.cu
 * launch()). Every kernel calls cu_pdl_wait() before it reads anything an
 * earlier kernel wrote or writes anything at all - the wait returns once the
 * previous kernel has finished and its writes are visible, and so, by
 * induction, every earlier one - and cu_pdl_trigger() to let the next kernel
 * start its own prologue. Before the wait only immutable data (weights) may
 * be touched. Both are no-ops without the launch attribute or below sm_90. */
__device__ __forceinline__ void cu_pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void cu_pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* dst row r = src row of r under interleave8 (gate rows 0..I-1, up rows
 * I..2I-1 -> tile j holds gate 8j..8j+7, up 8j..8j+7), or zeros past I;
 * rows of rb bytes, 4-byte words. */
__global__ void k_interleave8(const uint32_t *src, uint32_t *dst, size_t rb4, int I, int rows) {
    int r = blockIdx.y;
    int i = ((r >> 4) << 3) + (r & 7), sr = i + ((r >> 3) & 1) * I;
    if (r >= rows) return;
    for (size_t c = blockIdx.x * blockDim.x + threadIdx.x; c < rb4; c += (size_t)gridDim.x * blockDim.x)
        dst[(size_t)r * rb4 + c] = i < I ? src[(size_t)sr * rb4 + c] : 0u;
}

/* Row-major src [rows_p][row_bytes] -> tiled dst, one 16-byte piece per
 * thread (rows_p % 16 == 0, row_bytes % 64 == 0). */
__global__ void k_tile(const uint8_t *src, uint8_t *dst, size_t row_bytes, size_t n16) {
    size_t c = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n16) return;
    size_t tile_b = 16 * row_bytes, tile = c * 16 / tile_b, rem = c * 16 % tile_b;
    size_t step = rem / 1024, within = rem % 1024;
    int half = (int)(within / 512), lane = (int)(within % 512) / 16;
    size_t r = tile * 16 + half * 8 + (lane >> 2);
    *(uint4 *)(dst + c * 16) = *(const uint4 *)(src + r * row_bytes + step * 64 + (lane & 3) * 16);
}

/* ---- skinny GEMM ---------------------------------------------------------- */

__device__ __forceinline__ uint4 cu_ld_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* Asynchronous 16-byte copies global -> shared (sm_80+, bypassing L1); a
 * thread's copies complete, for that thread, at cp.async.wait_group. */
__device__ __forceinline__ void cu_cp16(void *smem, const void *g) {
    unsigned sa = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sa), "l"(g) : "memory");
}
__device__ __forceinline__ void cu_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cu_cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ void cu_mma(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t cu_pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* u8 value as float exactly: 2^23 + q as bits, minus 2^23. */
__device__ __forceinline__ float cu_u2f(uint32_t q) { return __uint_as_float(0x4B000000u | q) - 8388608.0f; }

/* Real k values per thread per step: one 16-byte load of a row. */
template <int KIND> struct cu_ck { enum { CK = KIND == CW_BF16 ? 8 : KIND == CW_Q8 ? 16 : 32 }; };

/* One row's 16 bytes -> CK bf16 values as CK/2 packed pairs (pair i holds
 * elements 2i, 2i+1 of the thread's chunk). */
template <int KIND>
__device__ __forceinline__ void cu_dequant(uint4 raw, float s, float b, uint32_t *out) {
    uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
    if (KIND == CW_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) out[i] = wv[i];
    } else if (KIND == CW_Q8) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float e0 = fmaf(s, cu_u2f(wv[i] & 0xff), b), e1 = fmaf(s, cu_u2f((wv[i] >> 8) & 0xff), b);
            float e2 = fmaf(s, cu_u2f((wv[i] >> 16) & 0xff), b), e3 = fmaf(s, cu_u2f(wv[i] >> 24), b);
            out[2 * i] = cu_pack_bf16(e0, e1);
            out[2 * i + 1] = cu_pack_bf16(e2, e3);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float e0 = fmaf(s, cu_u2f((wv[i] >> (8 * j)) & 15), b);
                float e1 = fmaf(s, cu_u2f((wv[i] >> (8 * j + 4)) & 15), b);
                out[4 * i + j] = cu_pack_bf16(e0, e1);
            }
    }
}

/* The same values as cu_dequant (same f32 FMA, same rounding: identical
 * bits), fewer instructions per weight: one PRMT places a byte (Q8) or a
 * pre-masked nibble (Q4) under the 2^23 exponent, where cu_dequant spends a
 * shift, a mask and an OR. DQ = 1 in k_gemm (the default;
 * DFLASH_CUDA_GEMM_DQ=0 selects cu_dequant, for comparison). */
__device__ __forceinline__ float cu_byte2f(uint32_t w, uint32_t sel) {
    return __uint_as_float(__byte_perm(w, 0x4B000000u, sel)) - 8388608.0f;
}

/* MXFP4 (gpt-oss's experts) kept at 4 bits: their values are those of the
 * 8-bit codes q = 2 v + 12 of the e2m1 value v (weight.h wt_mx4_q: q in
 * {0, 4, 6, 8..16, 18, 20, 24}, scale 2^(e-128), bias -12 scale, group 32);
 * such a weight goes up as Q4 nibbles c (w.mx) with q = CU_MX4[c]:
 * c 0..7 -> 12 13 14 15 16 18 20 24, c 8..15 -> 12 11 10 9 8 6 4 0. Here
 * the four nibbles of n (one a byte) become their four q bytes: two PRMTs
 * read the halves of the table by the code's low 3 bits, its bit 3 picks
 * the half. The weight's values are then s q + b exactly as the Q8 path
 * computes them (cu_dequant_prmt<Q4, 1>). */
__device__ __forceinline__ uint32_t cu_mx4_q(uint32_t n) {
    uint32_t sel = (n & 7u) | ((n >> 4) & 0x70u) | ((n >> 8) & 0x700u) | ((n >> 12) & 0x7000u);
    uint32_t pos = __byte_perm(0x0F0E0D0Cu, 0x18141210u, sel), neg = __byte_perm(0x090A0B0Cu, 0x00040608u, sel);
    uint32_t m = ((n >> 3) & 0x01010101u) * 0xFFu;
    return (pos & ~m) | (neg & m);
}

template <int KIND, int MX = 0>
__device__ __forceinline__ void cu_dequant_prmt(uint4 raw, float s, float b, uint32_t *out) {
    uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
    if (KIND == CW_BF16) {
#pragma unroll
        for (int i = 0; i < 4; i++) out[i] = wv[i];
    } else if (KIND == CW_Q8) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float e0 = fmaf(s, cu_byte2f(wv[i], 0x7540), b), e1 = fmaf(s, cu_byte2f(wv[i], 0x7541), b);
            float e2 = fmaf(s, cu_byte2f(wv[i], 0x7542), b), e3 = fmaf(s, cu_byte2f(wv[i], 0x7543), b);
            out[2 * i] = cu_pack_bf16(e0, e1);
            out[2 * i + 1] = cu_pack_bf16(e2, e3);
        }
    } else {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint32_t lo = wv[i] & 0x0f0f0f0fu, hi = (wv[i] >> 4) & 0x0f0f0f0fu;
            if (MX) lo = cu_mx4_q(lo), hi = cu_mx4_q(hi);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float e0 = fmaf(s, cu_byte2f(lo, 0x7540u + j), b);
                float e1 = fmaf(s, cu_byte2f(hi, 0x7540u + j), b);
                out[4 * i + j] = cu_pack_bf16(e0, e1);
            }
        }
    }
}

enum { GEMM_MAX_SPLIT = 8, GEMM_MAX_NT = 4 };

__device__ __forceinline__ __nv_bfloat16 cu_swiglu(float g, float u) {
    return __float2bfloat16_rn(g / (1.0f + expf(-g)) * u);
}

/* Integer weights into the MMA (Q4 in the w.iq order, DQ = 2..7): the
 * MMA takes the bf16 values 128 + q exactly (one LOP3 per pair, no
 * rounding of the weight), and each fold of GM = 2, 4, 8 MMAs (32, 64, 128
 * columns: the group, or the step for groups of 128 and more; DQ 2, 3, 4
 * with 16-bit scales, 5, 6, 7 with f32 ones) is scaled afterwards in f32:
 *   acc += s * sum_k (128 + q_k) x_k + (b - 128 s) * sum_k x_k
 * (= sum_k (s q_k + b) x_k). sum_k x_k comes from an MMA with the x of two
 * token tiles as its A and all-ones as its B. Every step of this is per (row, token) element in a fixed
 * order, with the rounding pinned (__fmaf_rn, __fmul_rn, __fadd_rn), so a
 * token's sums do not depend on NT or on which tokens share the MMA. The
 * scales ride in raw 32-bit words (a 16-bit pair per word, or an f32 scale
 * and an f32 bias in two), loaded with the weights. */
__device__ __forceinline__ uint32_t cu_iq_pair(uint32_t w) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(w), "r"(0x000f000fu), "r"(0x43004300u)); /* (a & b) | c */
    return r;
}

template <int F32>
__device__ __forceinline__ void cu_iq_sb(const uint32_t *wd, int f, int sdt, float *s, float *b) {
    if (F32) {
        *s = __uint_as_float(wd[2 * f]);
        *b = __uint_as_float(wd[2 * f + 1]);
    } else if (sdt == SC_BF16) {
        *s = cu_bf2f((uint16_t)(wd[f] & 0xffff));
        *b = cu_bf2f((uint16_t)(wd[f] >> 16));
    } else {
        *s = __half2float(__ushort_as_half((unsigned short)(wd[f] & 0xffff)));
        *b = __half2float(__ushort_as_half((unsigned short)(wd[f] >> 16)));
    }
    *b = __fmaf_rn(-128.0f, *s, *b);
}

/* The NW scale words of one row for step st (NG groups: a 16-bit pair per
 * word, or two f32 words per group), from word st * NW on (groups of up to
 * 128), or the one group of the step (NG = 1); aligned vector loads
 * (cw_upload's sb rows hold cols_p / 128 steps' words). */
template <int NW, int NG>
__device__ __forceinline__ void cu_iq_ld_sb(const uint8_t *row, int st, int group, uint32_t *wd) {
    const uint32_t *p = (const uint32_t *)row + (NG > 1 ? st * NW : (st * 128 / group) * NW);
    if (NW == 8) {
        uint4 a = *(const uint4 *)p, b = *(const uint4 *)(p + 4);
        wd[0] = a.x, wd[1] = a.y, wd[2] = a.z, wd[3] = a.w, wd[4] = b.x, wd[5] = b.y, wd[6] = b.z, wd[7] = b.w;
    } else if (NW == 4) {
        uint4 a = *(const uint4 *)p;
        wd[0] = a.x, wd[1] = a.y, wd[2] = a.z, wd[3] = a.w;
    } else if (NW == 2) {
        uint2 a = *(const uint2 *)p;
        wd[0] = a.x, wd[1] = a.y;
    } else {
        wd[0] = *p;
    }
}

/* One step (128 columns) of the integer-MMA kernel: ra / rb this lane's 16
 * bytes of rows g and g + 8, qa / qb their NW scale words, kb + 16 m this
 * lane's x of MMA m. */
template <int NT, int DQ>
__device__ __forceinline__ void cu_iq_step(uint4 ra, uint4 rb, const uint32_t *qa, const uint32_t *qb, int sdt, int kb,
                                           const __nv_bfloat16 *const *xr, const bool *xv, float (*acc)[4]) {
    constexpr int F32 = DQ >= 5, GM = 1 << ((DQ - 2) % 3 + 1), NG = 8 / GM;
    constexpr uint32_t ONES = 0x3F803F80u; /* bf16 pair (1, 1) */
    const int t = threadIdx.x & 3;
    uint32_t A[16], B[16];
    const uint32_t wva[4] = {ra.x, ra.y, ra.z, ra.w}, wvb[4] = {rb.x, rb.y, rb.z, rb.w};
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) A[4 * i + j] = cu_iq_pair(wva[i] >> (4 * j)), B[4 * i + j] = cu_iq_pair(wvb[i] >> (4 * j));
#pragma unroll
    for (int f = 0; f < NG; f++) {
        float sA, bA, sB, bB;
        cu_iq_sb<F32>(qa, f, sdt, &sA, &bA);
        cu_iq_sb<F32>(qb, f, sdt, &sB, &bB);
        /* token tiles in pairs (n0, n1): the x of both are the A rows
         * of one all-ones MMA (rows g: token 8 n0 + g, rows g + 8:
         * token 8 n1 + g, zeros past NT), whose sums lanes 8t and
         * 8t + 4 hold for the tokens 2t, 2t + 1 this lane needs */
#pragma unroll
        for (int n0 = 0; n0 < NT; n0 += 2) {
            const int n1 = n0 + 1;
            float g0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, g1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            float sx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int mm = 0; mm < GM; mm++) {
                const int m = f * GM + mm;
                uint2 x0 = make_uint2(0u, 0u), x1 = make_uint2(0u, 0u);
                if (xv[n0]) x0 = *(const uint2 *)(xr[n0] + kb + 16 * m);
                if (n1 < NT && xv[n1]) x1 = *(const uint2 *)(xr[n1] + kb + 16 * m);
                cu_mma(g0, A[2 * m], B[2 * m], A[2 * m + 1], B[2 * m + 1], x0.x, x0.y);
                if (n1 < NT) cu_mma(g1, A[2 * m], B[2 * m], A[2 * m + 1], B[2 * m + 1], x1.x, x1.y);
                cu_mma(sx, x0.x, x1.x, x0.y, x1.y, ONES, ONES);
            }
            const float s00 = __shfl_sync(0xffffffffu, sx[0], 8 * t), s01 = __shfl_sync(0xffffffffu, sx[0], 8 * t + 4);
            const float s10 = __shfl_sync(0xffffffffu, sx[2], 8 * t), s11 = __shfl_sync(0xffffffffu, sx[2], 8 * t + 4);
            /* g[0..1]: row g, tokens 2t, 2t+1; g[2..3]: row g+8, the same tokens */
            acc[n0][0] = __fadd_rn(acc[n0][0], __fmaf_rn(sA, g0[0], __fmul_rn(bA, s00)));
            acc[n0][1] = __fadd_rn(acc[n0][1], __fmaf_rn(sA, g0[1], __fmul_rn(bA, s01)));
            acc[n0][2] = __fadd_rn(acc[n0][2], __fmaf_rn(sB, g0[2], __fmul_rn(bB, s00)));
            acc[n0][3] = __fadd_rn(acc[n0][3], __fmaf_rn(sB, g0[3], __fmul_rn(bB, s01)));
            if (n1 < NT) {
                acc[n1][0] = __fadd_rn(acc[n1][0], __fmaf_rn(sA, g1[0], __fmul_rn(bA, s10)));
                acc[n1][1] = __fadd_rn(acc[n1][1], __fmaf_rn(sA, g1[1], __fmul_rn(bA, s11)));
                acc[n1][2] = __fadd_rn(acc[n1][2], __fmaf_rn(sB, g1[2], __fmul_rn(bB, s10)));
                acc[n1][3] = __fadd_rn(acc[n1][3], __fmaf_rn(sB, g1[3], __fmul_rn(bB, s11)));
            }
        }
    }
}

template <int NT, int GEMM_UNROLL, int DQ>
__device__ __forceinline__ void cu_gemm_iq_steps(const cw_weight &w, int r0, int g, int t, int s0, int s1,
                                                 const uint8_t *wa, const uint8_t *wb,
                                                 const __nv_bfloat16 *const *xr, const bool *xv, float (*acc)[4]) {
    constexpr int F32 = DQ >= 5, GM = 1 << ((DQ - 2) % 3 + 1), NG = 8 / GM, NW = F32 ? 2 * NG : NG;
    const uint8_t *sa = w.sb + (size_t)(r0 + g) * w.sb_row_bytes, *sbp = sa + 8 * w.sb_row_bytes;
    const int sdt = w.sdt, group = w.group;
    for (int s = s0; s < s1; s += GEMM_UNROLL) {
        uint4 ra[GEMM_UNROLL], rb[GEMM_UNROLL];
        uint32_t qa[GEMM_UNROLL][NW], qb[GEMM_UNROLL][NW];
#pragma unroll
        for (int u = 0; u < GEMM_UNROLL; u++)
            if (s + u < s1) {
                size_t off = (size_t)(s + u) * 1024;
                ra[u] = cu_ld_stream(wa + off);
                rb[u] = cu_ld_stream(wb + off);
                cu_iq_ld_sb<NW, NG>(sa, s + u, group, qa[u]);
                cu_iq_ld_sb<NW, NG>(sbp, s + u, group, qb[u]);
            }
#pragma unroll
        for (int u = 0; u < GEMM_UNROLL; u++) {
            if (s + u >= s1) break;
            cu_iq_step<NT, DQ>(ra[u], rb[u], qa[u], qb[u], sdt, (s + u) * 128 + 4 * t, xr, xv, acc);
        }
    }
}

/* A row's (scale, bias) pair from its raw storage: 2 x 16-bit in one word
 * (SC_BF16 / SC_F16) or 2 x f32. */
__device__ __forceinline__ void cu_sb_pair(const uint8_t *p, int sdt, float *s, float *b) {
    if (sdt == SC_F32) {
        const float2 v = *(const float2 *)p;
        *s = v.x, *b = v.y;
    } else {
        const uint32_t v = *(const uint32_t *)p;
        if (sdt == SC_BF16) {
            *s = cu_bf2f(v & 0xffff), *b = cu_bf2f(v >> 16);
        } else {
            *s = __half2float(__ushort_as_half((unsigned short)(v & 0xffff)));
            *b = __half2float(__ushort_as_half((unsigned short)(v >> 16)));
        }
    }
}

/* One step of the dequantizing kernel (DQ 0, 1, -1): ra / rb this lane's 16
 * bytes of rows g and g + 8 with their (scale, bias), kb this lane's first
 * column; the MMAs of every token tile. */
template <int KIND, int NT, int DQ>
__device__ __forceinline__ void cu_gemm_step(uint4 ra, uint4 rb, float sca, float bia, float scb, float bib, int kb,
                                             const __nv_bfloat16 *const *xr, const bool *xv, float (*acc)[4]) {
    constexpr int CK = cu_ck<KIND>::CK, NM = CK / 4;
    uint32_t A[CK / 2], B[CK / 2];
    if constexpr (DQ == 1 || DQ == -1) { /* -1: Q4 with MXFP4 codes (w.mx) */
        cu_dequant_prmt<KIND, DQ == -1>(ra, sca, bia, A);
        cu_dequant_prmt<KIND, DQ == -1>(rb, scb, bib, B);
    } else {
        cu_dequant<KIND>(ra, sca, bia, A);
        cu_dequant<KIND>(rb, scb, bib, B);
    }
#pragma unroll
    for (int n = 0; n < NT; n++) {
        uint32_t X[CK / 2];
        if (xv[n]) {
#pragma unroll
            for (int i = 0; i < CK / 8; i++) {
                uint4 v = *(const uint4 *)(xr[n] + kb + 8 * i);
                X[4 * i] = v.x, X[4 * i + 1] = v.y, X[4 * i + 2] = v.z, X[4 * i + 3] = v.w;
            }
        } else {
#pragma unroll
            for (int i = 0; i < CK / 2; i++) X[i] = 0;
        }
        /* MMA m takes elements 4m..4m+3 of the chunk as its virtual
         * k = 2t, 2t+1, 2t+8, 2t+9, in A (rows g, g+8) and B alike */
#pragma unroll
        for (int m = 0; m < NM; m++)
            cu_mma(acc[n], A[2 * m], B[2 * m], A[2 * m + 1], B[2 * m + 1], X[2 * m], X[2 * m + 1]);
    }
}

/* A k_gemm launch's tail: row work that needs every block's output, done
 * by the launch's last block(s) instead of by a kernel of its own (one
 * launch fewer; cu_gemm_tail). Each block, once its outputs are written,
 * fences them and takes a ticket of its group; the block that takes a
 * group's last ticket sees every output of that group, runs the group's
 * work and resets the counter to 0 for the next launch. Nothing waits and no
 * atomic touches a value: the work is the row kernel's own code
 * (cu_rmsnorm4_block, cu_norm_rope_r / _s), so its bits are those of the
 * kernel it replaces. Launches of one grid row, T <= TAIL_MAX_ROWS = 16.
 *   TAIL_RMSNORM: one group, every block; o [T][ldo] bf16 = RMSNorm of the
 *     rows y[t][0..N) with weight w, as k_rmsnorm4 (N % 4 == 0, N <= 8192).
 *   TAIL_NORM_ROPE: y = [T][q (nq heads) | k (nk) | v (nk)] of head size hd
 *     (hd % 16 == 0); group h < nq is q head h's hd / 16 tiles, group nq + j
 *     k head j's and v head j's tiles; its last block runs k_norm_rope_r's
 *     (or, for other head sizes or partial RoPE, k_norm_rope's) warp for
 *     every row of that head, storing k and v into kc / vc when kc. */
enum { TAIL_NONE = 0, TAIL_RMSNORM = 1, TAIL_NORM_ROPE = 2 };

typedef struct {
    int kind;
    unsigned *ticket; /* zeroed counters, one per group; left zeroed */
    /* TAIL_RMSNORM */
    const float *w;
    float eps;
    __nv_bfloat16 *o;
    int ldo;
    /* TAIL_NORM_ROPE (eps as above) */
    int nq, nk, hd, rh, n_ctx;
    const float *qn, *kn, *cos_t, *sin_t;
    const int *pos;
    float *kc, *vc;
} cu_tail;

__device__ __forceinline__ void cu_gemm_tail(const cu_tail &tl, float *y, int ldy, int N, int T);

/* y[t][r] (+)= sum_k W[r][k] x[t][k] for r < N, t < T: block (bx, by)
 * takes rows 16bx.. and tokens 8*NT*by .. 8*NT*by + 8*NT - 1 (gridDim.y =
 * ceil(T / (8*NT)); a token's sums do not depend on which block or column
 * tile holds it).
 * x: bf16 [T][ldx], ldx >= w.cols_p, zero past cols. Block = w.split warps on
 * one 16-row tile; warp s walks steps [s*ns/split, (s+1)*ns/split),
 * GEMM_UNROLL steps' loads issued before their MMAs (the unroll changes the
 * schedule, not the order of the sums; a shared-memory ring of
 * asynchronous copies instead was slower, bench/NOTES.md).
 * SwiGLU epilogue (SWIGLU = 1): w holds gate and up rows interleaved by
 * eights (tile j: gate rows 8j..8j+7, then up rows 8j..8j+7, cw_upload's
 * interleave8), and instead of y the kernel writes h[t][8j + i] =
 * bf16(silu(g) * u) (bf16 [T][ldh]) from the finished sums g, u. */
/* The work of one k_gemm block: weight rows 16 blockIdx.x.. on tokens
 * 0..min(T, 8 NT)-1 (the caller has moved y, h to the block's first token);
 * token i's input is row xrow[i] of x, or row i without xrow. */
template <int KIND, int NT, int GEMM_UNROLL, int SWIGLU, int DQ>
__device__ __forceinline__ void cu_gemm_tile(const cw_weight &w, int N, const __nv_bfloat16 *__restrict__ x, int ldx,
                                             const int *__restrict__ xrow, int T, float *__restrict__ y, int ldy,
                                             int accumulate, __nv_bfloat16 *__restrict__ h, int ldh) {
    constexpr int CK = cu_ck<KIND>::CK, STEP = 4 * CK;
    __shared__ float red[GEMM_MAX_SPLIT][16][8 * NT];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3, S = w.split;
    const int r0 = blockIdx.x * 16;
    const int ns = w.cols_p / STEP;
    const int s0 = warp * ns / S, s1 = (warp + 1) * ns / S;
    const uint8_t *wa = w.data + (size_t)r0 * w.row_bytes + lane * 16, *wb = wa + 512; /* tiled layout */
    const uint8_t *sa = KIND == CW_BF16 ? nullptr : w.sb + (size_t)(r0 + g) * w.sb_row_bytes;
    const uint8_t *sbp = KIND == CW_BF16 ? nullptr : sa + 8 * w.sb_row_bytes;
    /* weights are immutable: the first round goes to L2 while the previous
     * kernel finishes */
#pragma unroll
    for (int u = 0; u < GEMM_UNROLL; u++)
        if (s0 + u < s1) {
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wa + (size_t)(s0 + u) * 1024));
            asm volatile("prefetch.global.L2 [%0];" ::"l"(wb + (size_t)(s0 + u) * 1024));
        }
    cu_pdl_wait();
    cu_pdl_trigger();
    float acc[NT][4];
#pragma unroll
    for (int n = 0; n < NT; n++) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
    const __nv_bfloat16 *xr[NT];
    bool xv[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        int tok = n * 8 + g;
        xv[n] = tok < T;
        xr[n] = x + (size_t)(xv[n] ? (xrow ? xrow[tok] : tok) : 0) * ldx;
    }
    if constexpr (DQ >= 2) {
        cu_gemm_iq_steps<NT, GEMM_UNROLL, DQ>(w, r0, g, t, s0, s1, wa, wb, xr, xv, acc);
    } else
    for (int s = s0; s < s1; s += GEMM_UNROLL) {
        uint4 ra[GEMM_UNROLL], rb[GEMM_UNROLL];
        float sca[GEMM_UNROLL], bia[GEMM_UNROLL], scb[GEMM_UNROLL], bib[GEMM_UNROLL];
#pragma unroll
        for (int u = 0; u < GEMM_UNROLL; u++) {
            if (s + u < s1) {
                int kb = (s + u) * STEP + t * CK;
                size_t off = (size_t)(s + u) * 1024;
                ra[u] = cu_ld_stream(wa + off);
                rb[u] = cu_ld_stream(wb + off);
                if (KIND != CW_BF16) {
                    const int grp = kb / w.group, sz = w.sdt == SC_F32 ? 8 : 4;
                    cu_sb_pair(sa + (size_t)grp * sz, w.sdt, &sca[u], &bia[u]);
                    cu_sb_pair(sbp + (size_t)grp * sz, w.sdt, &scb[u], &bib[u]);
                } else {
                    sca[u] = bia[u] = scb[u] = bib[u] = 0.0f;
                }
            }
        }
#pragma unroll
        for (int u = 0; u < GEMM_UNROLL; u++) {
            if (s + u >= s1) break;
            cu_gemm_step<KIND, NT, DQ>(ra[u], rb[u], sca[u], bia[u], scb[u], bib[u], (s + u) * STEP + t * CK, xr, xv,
                                       acc);
        }
    }
    /* C fragment: acc[n][0..1] = row g, tokens n*8+2t, +1; acc[n][2..3] = row g+8 */
    if (S == 1 && SWIGLU) {
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                int col = r0 / 2 + g, tok = n * 8 + 2 * t + i;
                if (r0 + g < N && tok < T) h[(size_t)tok * ldh + col] = cu_swiglu(acc[n][i], acc[n][2 + i]);
            }
        return;
    }
    if (S == 1) {
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int i = 0; i < 4; i++) {
                int row = r0 + g + (i >> 1) * 8, tok = n * 8 + 2 * t + (i & 1);
                if (row < N && tok < T) {
                    float *p = y + (size_t)tok * ldy + row;
                    *p = accumulate ? *p + acc[n][i] : acc[n][i];
                }
            }
        return;
    }
#pragma unroll
    for (int n = 0; n < NT; n++)
#pragma unroll
        for (int i = 0; i < 4; i++) red[warp][g + (i >> 1) * 8][n * 8 + 2 * t + (i & 1)] = acc[n][i];
    __syncthreads();
    if constexpr (SWIGLU) {
        for (int e = threadIdx.x; e < 8 * 8 * NT; e += blockDim.x) {
            int rr = e / (8 * NT), tok = e % (8 * NT);
            if (r0 + rr >= N || tok >= T) continue;
            float gs = red[0][rr][tok], us = red[0][rr + 8][tok];
            for (int q = 1; q < S; q++) gs += red[q][rr][tok], us += red[q][rr + 8][tok];
            h[(size_t)tok * ldh + r0 / 2 + rr] = cu_swiglu(gs, us);
        }
    } else {
        for (int e = threadIdx.x; e < 16 * 8 * NT; e += blockDim.x) {
            int rr = e / (8 * NT), tok = e % (8 * NT), row = r0 + rr;
            if (row >= N || tok >= T) continue;
            float v = red[0][rr][tok];
            for (int q = 1; q < S; q++) v += red[q][rr][tok];
            float *p = y + (size_t)tok * ldy + row;
            *p = accumulate ? *p + v : v;
        }
    }
}

/* The blocks an SM holds of the k_gemm without a tail, as ptxas sizes it
 * for sm_90 (256 threads: BF16 <= 64 registers at one and two column tiles,
 * 8-bit 80 at one, the rest up to 128): the kernel with a tail keeps that
 * occupancy (left to itself, ptxas gave the 8-bit one 95 registers, 2 blocks
 * instead of 3), spilling a few words instead (12-40 bytes, values live
 * across the main loop). */
template <int KIND, int NT> struct cu_tail_blocks {
    enum { N = KIND == CW_BF16 ? 4 : KIND == CW_Q8 && NT == 1 ? 3 : 2 };
};

/* TAIL = 1: tail, row work after the whole launch (cu_tail; kind
 * TAIL_NONE: none); TAIL = 0 ignores it: the kernel of a GEMM without one,
 * whose code the tail's cannot disturb (compiled into every k_gemm, it
 * raised registers and added spills in many of them). A minimum of 0
 * blocks is no minimum: the TAIL = 0 kernels are today's, register for
 * register. */
template <int KIND, int NT, int GEMM_UNROLL, int SWIGLU, int DQ = 0, int TAIL = 0>
__global__ void __launch_bounds__(32 * GEMM_MAX_SPLIT, TAIL ? cu_tail_blocks<KIND, NT>::N : 0) k_gemm(cw_weight w, int N, const __nv_bfloat16 *__restrict__ x,
                                                                int ldx, int T, float *__restrict__ y, int ldy,
                                                                int accumulate, __nv_bfloat16 *__restrict__ h,
                                                                int ldh, cu_tail tail) {
    const int t0 = blockIdx.y * 8 * NT; /* this block's tokens */
    cu_gemm_tile<KIND, NT, GEMM_UNROLL, SWIGLU, DQ>(w, N, x + (size_t)t0 * ldx, ldx, nullptr, T - t0,
                                                    y ? y + (size_t)t0 * ldy : y, ldy, accumulate,
                                                    h ? h + (size_t)t0 * ldh : h, ldh);
    if constexpr (TAIL) {
        if (tail.kind != TAIL_NONE) cu_gemm_tail(tail, y, ldy, N, T);
    }
}

/* ---- row kernels ---------------------------------------------------------- */

/* Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads in one
 * fixed tree; every thread gets the result. */
__device__ __forceinline__ float cu_block_sum(float v, float *sh) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if ((threadIdx.x & 31) == 0) sh[w] = v;
    __syncthreads();
    float s = 0.0f;
    for (int i = 0; i < nw; i++) s += sh[i];
    return s;
}

/* Row kernels spread each row over many threads and read it once: a decode
 * step has one row, and a loop of dependent loads in one block costs more than
 * the work (a single-block SwiGLU took 20 us for 9728 values). */

/* x[t][k] = embed[tok[t]][k]; grid (T, ceil(H/256)) */
__global__ void k_embed(cw_weight e, const int32_t *tok, float *x, int H) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int t = blockIdx.x, r = tok[t], k = blockIdx.y * blockDim.x + threadIdx.x;
    if (k < H) x[(size_t)t * H + k] = cu_get(e, r, k);
}

enum { RN_THREADS = 256, RN_PER = 8 }; /* k_rmsnorm4: rows of up to 256*4*8 = 8192 values */

/* The sum of squares of a float4, added in x, y, z, w order. */
__device__ __forceinline__ float cu_ss4(float ss, float4 v) {
    ss += v.x * v.x;
    ss += v.y * v.y;
    ss += v.z * v.z;
    ss += v.w * v.w;
    return ss;
}

/* The end of an RMSNorm row held as thread i's float4s i, i + RN_THREADS, ...
 * (v, n values in all, ss this thread's sum of squares in that order): one
 * block tree, then o [n] bf16 = v * inv * w. Every kernel that ends in this
 * norm calls it, so their bits are the same by construction. */
__device__ __forceinline__ void cu_rmsnorm4_out(const float4 (&v)[RN_PER], float ss, int n, const float *w, float eps,
                                                __nv_bfloat16 *orow, float *red) {
    ss = cu_block_sum(ss, red);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    const float4 *w4 = (const float4 *)w;
    __nv_bfloat162 *o = (__nv_bfloat162 *)orow;
#pragma unroll
    for (int i = 0; i < RN_PER; i++) {
        int k = threadIdx.x + i * RN_THREADS;
        if (k < n / 4) {
            float4 g = w4[k];
            o[2 * k] = __floats2bfloat162_rn(v[i].x * inv * g.x, v[i].y * inv * g.y);
            o[2 * k + 1] = __floats2bfloat162_rn(v[i].z * inv * g.z, v[i].w * inv * g.w);
        }
    }
}

/* Row blockIdx.x of x [.][ldx] f32 -> RMSNorm with weight w [n] -> ob (bf16
 * [.][ldo]). n % 4 == 0, n <= RN_THREADS*4*RN_PER, ldx % 4 == 0: thread i holds
 * float4s i, i + 256, ... in registers; its sum of squares runs over them in
 * that order, then one block tree (fixed by n alone). */
__global__ void __launch_bounds__(RN_THREADS) k_rmsnorm4(const float *x, int ldx, const float *w, int n, float eps,
                                                          __nv_bfloat16 *ob, int ldo) {
    cu_pdl_wait();
    cu_pdl_trigger();
    __shared__ float sh[32];
    const float4 *r = (const float4 *)(x + (size_t)blockIdx.x * ldx);
    int n4 = n / 4;
    float4 v[RN_PER];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_PER; i++) {
        int k = threadIdx.x + i * RN_THREADS;
        if (k < n4) {
            v[i] = r[k];
            ss = cu_ss4(ss, v[i]);
        }
    }
    cu_rmsnorm4_out(v, ss, n, w, eps, ob + (size_t)blockIdx.x * ldo, sh);
}

/* Any n: one block per row, strided loops. */
__global__ void k_rmsnorm(const float *x, int ldx, const float *w, int n, float eps, __nv_bfloat16 *ob, int ldo) {
    cu_pdl_wait();
    cu_pdl_trigger();
    __shared__ float sh[32];
    const float *r = x + (size_t)blockIdx.x * ldx;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss += r[i] * r[i];
    ss = cu_block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        ob[(size_t)blockIdx.x * ldo + i] = __float2bfloat16_rn(r[i] * inv * w[i]);
}

/* f32 [rows][n] (stride ldx) -> bf16 [rows][ldo]; grid (rows, ceil(n/256)) */
__global__ void k_to_bf16(const float *x, int ldx, int n, __nv_bfloat16 *o, int ldo) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int i = blockIdx.y * blockDim.x + threadIdx.x;
    if (i < n) o[(size_t)blockIdx.x * ldo + i] = __float2bfloat16_rn(x[(size_t)blockIdx.x * ldx + i]);
}

/* One warp per (row t, head), HD = head_dim >= 64: optional per-head RMSNorm,
 * then RoPE (neox pairing d, d + HD/2) at position *pos_p + t, in place on buf
 * [T][ldb]; heads 0..nq-1 at column q_off (weight qn), then nk key heads at
 * k_off (weight kn). Lane l holds elements l + 32 i, so both halves of each
 * RoPE pair are in one lane. With kc != NULL the key head and the value head
 * at v_off are stored into the caches [nk][n_ctx][HD] at the row's position.
 * The sum of squares runs over i in order, then the xor tree; the products
 * are (v * inv) * w as in the strided form below.
 * cu_norm_rope_r is that warp's work for row t, head h (pos0 = *pos_p);
 * k_norm_rope_r runs it as a kernel and the qkv GEMM's last blocks run it
 * in their tail (cu_gemm_tail), so the two give the same bits by
 * construction. buf is read through L2 (__ldcg): in the tail, other blocks
 * of the same launch wrote it. */
template <int HD>
__device__ __forceinline__ void cu_norm_rope_r(float *buf, int ldb, int q_off, int nq, const float *qn, int k_off,
                                               int v_off, const float *kn, float eps, const float *cos_t,
                                               const float *sin_t, int pos0, float *kc, float *vc, int n_ctx, int t,
                                               int h, int lane) {
    constexpr int NE = HD / 32, HP = NE / 2;
    int pos = pos0 + t;
    int is_k = h >= nq, hh = is_k ? h - nq : h;
    float *v = buf + (size_t)t * ldb + (is_k ? k_off : q_off) + (size_t)hh * HD;
    const float *nw = is_k ? kn : qn;
    const float *cs = cos_t + (size_t)pos * (HD / 2), *sn = sin_t + (size_t)pos * (HD / 2);
    float x[NE], c[HP], sv[HP], vv[NE];
    bool store = is_k && kc;
    const float *vsrc = buf + (size_t)t * ldb + v_off + (size_t)hh * HD;
#pragma unroll
    for (int i = 0; i < NE; i++) x[i] = __ldcg(v + lane + 32 * i);
#pragma unroll
    for (int i = 0; i < HP; i++) c[i] = cs[lane + 32 * i], sv[i] = sn[lane + 32 * i];
    if (store) {
#pragma unroll
        for (int i = 0; i < NE; i++) vv[i] = __ldcg(vsrc + lane + 32 * i);
    }
    if (nw) {
        float ss = 0.0f;
#pragma unroll
        for (int i = 0; i < NE; i++) ss += x[i] * x[i];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float inv = 1.0f / sqrtf(ss / (float)HD + eps);
#pragma unroll
        for (int i = 0; i < NE; i++) x[i] = x[i] * inv * nw[lane + 32 * i];
    }
#pragma unroll
    for (int i = 0; i < HP; i++) {
        float a = x[i], b = x[i + HP];
        x[i] = a * c[i] - b * sv[i];
        x[i + HP] = b * c[i] + a * sv[i];
    }
#pragma unroll
    for (int i = 0; i < NE; i++) v[lane + 32 * i] = x[i];
    if (store) {
        size_t dst = ((size_t)hh * n_ctx + pos) * HD;
#pragma unroll
        for (int i = 0; i < NE; i++) {
            kc[dst + lane + 32 * i] = x[i];
            vc[dst + lane + 32 * i] = vv[i];
        }
    }
}

/* grid (T, nq + nk), 32 threads */
template <int HD>
__global__ void k_norm_rope_r(float *buf, int ldb, int q_off, int nq, const float *qn, int k_off, int v_off, int nk,
                              const float *kn, float eps, const float *cos_t, const float *sin_t, const int *pos_p,
                              float *kc, float *vc, int n_ctx) {
    cu_pdl_wait();
    cu_pdl_trigger();
    cu_norm_rope_r<HD>(buf, ldb, q_off, nq, qn, k_off, v_off, kn, eps, cos_t, sin_t, *pos_p, kc, vc, n_ctx,
                       blockIdx.x, blockIdx.y, threadIdx.x);
}

/* The same for any head_dim (16 and 32 here), and for partial RoPE
 * (Qwen3.5): dims 0..2*rh-1 rotate, pairs (d, d + rh); tables [pos][rh].
 * cu_norm_rope_s is the warp's work for row t, head h (as cu_norm_rope_r:
 * the kernel and the GEMM tail share it). */
__device__ __forceinline__ void cu_norm_rope_s(float *buf, int ldb, int q_off, int nq, const float *qn, int k_off,
                                               int v_off, const float *kn, int hd, int rh, float eps,
                                               const float *cos_t, const float *sin_t, int pos0, float *kc, float *vc,
                                               int n_ctx, int t, int h, int lane) {
    int half = rh, pos = pos0 + t;
    int is_k = h >= nq, hh = is_k ? h - nq : h;
    float *v = buf + (size_t)t * ldb + (is_k ? k_off : q_off) + (size_t)hh * hd;
    const float *nw = is_k ? kn : qn;
    if (nw) {
        float ss = 0.0f;
        for (int i = lane; i < hd; i += 32) {
            float e = __ldcg(v + i);
            ss += e * e;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        float inv = 1.0f / sqrtf(ss / (float)hd + eps);
        __syncwarp();
        for (int i = lane; i < hd; i += 32) v[i] = __ldcg(v + i) * inv * nw[i];
        __syncwarp();
    }
    const float *cs = cos_t + (size_t)pos * half, *sn = sin_t + (size_t)pos * half;
    for (int i = lane; i < half; i += 32) {
        float a = __ldcg(v + i), b = __ldcg(v + i + half);
        v[i] = a * cs[i] - b * sn[i];
        v[i + half] = b * cs[i] + a * sn[i];
    }
    if (is_k && kc) {
        __syncwarp();
        size_t dst = ((size_t)hh * n_ctx + pos) * hd;
        const float *vv = buf + (size_t)t * ldb + v_off + (size_t)hh * hd;
        for (int i = lane; i < hd; i += 32) {
            kc[dst + i] = __ldcg(v + i);
            vc[dst + i] = __ldcg(vv + i);
        }
    }
}

/* grid (T, nq + nk), 32 threads */
__global__ void k_norm_rope(float *buf, int ldb, int q_off, int nq, const float *qn, int k_off, int v_off, int nk,
                            const float *kn, int hd, int rh, float eps, const float *cos_t, const float *sin_t,
                            const int *pos_p, float *kc, float *vc, int n_ctx) {
    cu_pdl_wait();
    cu_pdl_trigger();
    cu_norm_rope_s(buf, ldb, q_off, nq, qn, k_off, v_off, kn, hd, rh, eps, cos_t, sin_t, *pos_p, kc, vc, n_ctx,
                   blockIdx.x, blockIdx.y, threadIdx.x);
}

/* k_rmsnorm4's arithmetic on rows 0..T-1 of x ([T][ldx], n values, T <=
 * TAIL_MAX_ROWS) by one block of any whole number of warps, into out [T][ldo]:
 * thread i of k_rmsnorm4's 256 sums the squares of float4s i, i + 256, ...
 * in order (cu_ss4), each of its 8 warps adds its 32 sums in the xor tree,
 * and the row's sum is ((0 + warp 0) + warp 1) + ... + warp 7
 * (cu_block_sum). Here unit (row t, warp vw) of those goes to warp
 * (8 t + vw) % nwarps, lane l playing thread 32 vw + l; the units' sums meet
 * in shared memory and are added in that order, then every thread writes
 * float4s of every row with the same products. x is read through L2: other
 * blocks of the launch wrote it. */
enum { TAIL_MAX_ROWS = 16 };

__device__ __forceinline__ void cu_rmsnorm4_block(const float *x, int ldx, int n, const float *w, float eps,
                                                  __nv_bfloat16 *out, int ldo, int T) {
    constexpr int NW = RN_THREADS / 32; /* k_rmsnorm4's warps */
    __shared__ float unit_ss[TAIL_MAX_ROWS * NW], row_inv[TAIL_MAX_ROWS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5, n4 = n / 4;
#pragma unroll 1
    for (int u = warp; u < T * NW; u += nwarps) {
        const int t = u / NW, i = (u % NW) * 32 + lane; /* k_rmsnorm4's thread i of row t */
        const float4 *r = (const float4 *)(x + (size_t)t * ldx);
        float ss = 0.0f;
#pragma unroll
        for (int j0 = 0; j0 < RN_PER; j0 += 4) { /* 4 loads in flight, fewer registers */
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (i + (j0 + j) * RN_THREADS < n4) v[j] = __ldcg(r + i + (j0 + j) * RN_THREADS);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (i + (j0 + j) * RN_THREADS < n4) ss = cu_ss4(ss, v[j]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        if (lane == 0) unit_ss[u] = ss;
    }
    __syncthreads();
    if ((int)threadIdx.x < T) {
        float s = 0.0f;
        for (int vw = 0; vw < NW; vw++) s += unit_ss[threadIdx.x * NW + vw];
        row_inv[threadIdx.x] = 1.0f / sqrtf(s / (float)n + eps);
    }
    __syncthreads();
    const float4 *w4 = (const float4 *)w;
#pragma unroll 4
    for (int e = threadIdx.x; e < T * n4; e += blockDim.x) {
        const int t = e / n4, k = e % n4;
        const float inv = row_inv[t];
        float4 v = __ldcg((const float4 *)(x + (size_t)t * ldx) + k), g = w4[k];
        __nv_bfloat162 *orow = (__nv_bfloat162 *)(out + (size_t)t * ldo);
        orow[2 * k] = __floats2bfloat162_rn(v.x * inv * g.x, v.y * inv * g.y);
        orow[2 * k + 1] = __floats2bfloat162_rn(v.z * inv * g.z, v.w * inv * g.w);
    }
}

/* The ticket of this block (thread 0 calls it): the group it belongs to if
 * it took the group's last ticket (the counter is reset), else -1. */
__device__ __forceinline__ int cu_tail_ticket(const cu_tail &tl) {
    int group = 0, size = (int)gridDim.x;
    if (tl.kind == TAIL_NORM_ROPE) {
        const int r0 = (int)blockIdx.x * 16, tph = tl.hd / 16, Q = tl.nq * tl.hd, KV = tl.nk * tl.hd;
        if (r0 < Q) group = r0 / tl.hd, size = tph;
        else group = tl.nq + ((r0 - Q) % KV) / tl.hd, size = 2 * tph; /* k head j or v head j */
    }
    if (atomicAdd(tl.ticket + group, 1u) != (unsigned)size - 1u) return -1;
    atomicExch(tl.ticket + group, 0u);
    return group;
}

/* The tail of a k_gemm launch (cu_tail): every thread of every block
 * calls it once its outputs are written. Inlined (as a call, its ABI raised
 * the GEMMs' registers: BF16 at one column tile 54 -> 80, with a 120-byte
 * stack frame). */
__device__ __forceinline__ void cu_gemm_tail(const cu_tail &tl, float *y, int ldy, int N, int T) {
    __shared__ int role;
    __threadfence(); /* this thread's outputs, before the block's ticket */
    __syncthreads();
    if (threadIdx.x == 0) {
        role = cu_tail_ticket(tl);
        __threadfence(); /* the other blocks' outputs, after the last ticket */
    }
    __syncthreads();
    if (role < 0) return;
    if (tl.kind == TAIL_RMSNORM) {
        cu_rmsnorm4_block(y, ldy, N, tl.w, tl.eps, tl.o, tl.ldo, T);
        return;
    }
    const int warp = threadIdx.x >> 5, nw = blockDim.x >> 5, lane = threadIdx.x & 31;
    /* TAIL_NORM_ROPE: head `role` of every row, one warp a row (norm_rope()'s choice of kernel) */
    const int pos0 = *tl.pos, Q = tl.nq * tl.hd, KV = tl.nk * tl.hd;
#pragma unroll 1
    for (int t = warp; t < T; t += nw) {
        switch (tl.rh == tl.hd / 2 ? tl.hd : 0) {
        case 64:
            cu_norm_rope_r<64>(y, ldy, 0, tl.nq, tl.qn, Q, Q + KV, tl.kn, tl.eps, tl.cos_t, tl.sin_t, pos0, tl.kc,
                               tl.vc, tl.n_ctx, t, role, lane);
            break;
        case 128:
            cu_norm_rope_r<128>(y, ldy, 0, tl.nq, tl.qn, Q, Q + KV, tl.kn, tl.eps, tl.cos_t, tl.sin_t, pos0, tl.kc,
                                tl.vc, tl.n_ctx, t, role, lane);
            break;
        case 256:
            cu_norm_rope_r<256>(y, ldy, 0, tl.nq, tl.qn, Q, Q + KV, tl.kn, tl.eps, tl.cos_t, tl.sin_t, pos0, tl.kc,
                                tl.vc, tl.n_ctx, t, role, lane);
            break;
        default:
            cu_norm_rope_s(y, ldy, 0, tl.nq, tl.qn, Q, Q + KV, tl.kn, tl.hd, tl.rh, tl.eps, tl.cos_t, tl.sin_t, pos0,
                           tl.kc, tl.vc, tl.n_ctx, t, role, lane);
        }
    }
}

/* ---- Qwen3.5: gated attention and the Gated DeltaNet -------------------------
 * (the CPU reference is deltanet.c; every kernel runs each row the same way
 * for any T, so verify rows equal decode rows bit for bit) */

/* A gated q_proj's rows [nh][query hd | gate hd], then K and V (kv2 values):
 * src [T][lds] -> dst [T][ldd] = [Q | K | V] as norm_rope and attention read
 * them, gate [T][Q]. Grid T, block 256. */
__global__ void k_split_gate(const float *src, int lds, float *dst, int ldd, float *gate, int nh, int hd, int kv2) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int t = blockIdx.x, Q = nh * hd;
    const float *s = src + (size_t)t * lds;
    float *d = dst + (size_t)t * ldd, *g = gate + (size_t)t * Q;
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        int h = i / hd, e = i % hd;
        d[i] = s[(size_t)h * 2 * hd + e];
        g[i] = s[(size_t)h * 2 * hd + hd + e];
    }
    for (int i = threadIdx.x; i < kv2; i += blockDim.x) d[Q + i] = s[2 * Q + i];
}

/* att [T][lda] (bf16) *= sigmoid(gate [T][Q]). Grid T, block 256. */
__global__ void k_gate_att(__nv_bfloat16 *att, int lda, const float *gate, int Q) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int t = blockIdx.x;
    for (int i = threadIdx.x; i < Q; i += blockDim.x) {
        float g = gate[(size_t)t * Q + i];
        __nv_bfloat16 *a = att + (size_t)t * lda + i;
        *a = __float2bfloat16(__bfloat162float(*a) * (1.0f / (1.0f + expf(-g))));
    }
}

/* Causal depthwise conv + silu, one thread per channel ch < C, rows in
 * order: the window is the K-1 state rows (oldest first) then the row, the
 * sum runs j ascending; afterwards the state holds the last K-1 inputs.
 * mix [T][ldm] (channels 0..C-1), w [C][K], state [K-1][C], cv [T][C]. */
__global__ void k_dn_conv(const float *mix, int ldm, int T, float *state, const float *w, int K, float *cv, int C) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= C) return;
    float h[16]; /* K <= 16 (config.c) */
    for (int j = 0; j < K - 1; j++) h[j] = state[(size_t)j * C + ch];
    const float *wc = w + (size_t)ch * K;
    for (int t = 0; t < T; t++) {
        float x = mix[(size_t)t * ldm + ch], acc = 0.0f;
        for (int j = 0; j < K - 1; j++) acc += wc[j] * h[j];
        acc += wc[K - 1] * x;
        for (int j = 0; j + 1 < K - 1; j++) h[j] = h[j + 1];
        if (K > 1) h[K - 2] = x;
        cv[(size_t)t * C + ch] = acc / (1.0f + expf(-acc));
    }
    for (int j = 0; j < K - 1; j++) state[(size_t)j * C + ch] = h[j];
}

/* The gated delta rule for value head blockIdx.x. Column e < dv of S_h is
 * held by P adjacent threads, part p its rows p DK/P .. (p+1) DK/P - 1 in
 * registers over the rows; the block is dv rounded up to whole warps, times
 * P (threads of columns e >= dv only help the sums). Per row: q and k of key
 * head h / (nv / nk) L2-normalised, decay and beta from a / b, S = decay S,
 * delta = (v - S^T k) beta, S += k delta^T; with core: o = S^T q / sqrt(DK),
 * its RMSNorm over the head times nw and silu(z) -> core (bf16). Every sum
 * has one order for any T: k/q squares per thread in element order, the
 * warp's xor tree, the warps in order; S^T k and S^T q as four chains per
 * part added (0+1)+(2+3), then the P parts by an xor tree (the same bits in
 * each of the P threads: IEEE addition commutes). The next row's inputs load
 * while a row runs. rec [nv][DK][dv]; cv [T][C] (q | k | v); mix [T][ldm]
 * with z at z_off, a at a_off, b at b_off. Shared: 2 (DK + 4 P) + 96 floats. */
template <int DK, int P>
__global__ void __launch_bounds__(P == 1 ? 256 : 512)
    k_dn_delta(const float *cv, int C, const float *mix, int ldm, int z_off, int a_off, int b_off, float *rec, int nk,
               int nv, int v_tiled, int dv, const float *dt_bias, const float *neg_a, const float *nw, float eps,
               __nv_bfloat16 *core, int ldc, int T) {
    cu_pdl_wait();
    cu_pdl_trigger();
    constexpr int DKP = DK / P;             /* rows of S per thread */
    constexpr int LD = DKP + 4;             /* a part's stride in kn / qn (no bank conflicts) */
    constexpr int KP = (DK + 32 * P - 1) / (32 * P); /* k / q elements loaded per thread */
    static_assert(DKP % 4 == 0 && 32 % P == 0, "k_dn_delta: DK / P rows in float4s, P lanes per column");
    extern __shared__ __align__(16) float sm[];
    float *kn = sm, *qn = sm + P * LD, *red = sm + 2 * P * LD; /* red: [3][32] warp partials */
    const int h = blockIdx.x, nt = blockDim.x, e = threadIdx.x / P, part = threadIdx.x % P;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nwarp = nt >> 5;
    const int kh = v_tiled ? h % nk : h / (nv / nk); /* config.h: lin_v_tiled */
    const bool col = e < dv;
    float S[DKP];
    float *Sg = rec + (size_t)h * DK * dv + (size_t)part * DKP * dv + e;
#pragma unroll
    for (int i = 0; i < DKP; i++) S[i] = col ? Sg[(size_t)i * dv] : 0.0f;
    const float qscale = 1.0f / sqrtf((float)DK);
    const float dtb = dt_bias[h], na = neg_a[h], nwe = col ? nw[e] : 0.0f;
    /* the row's inputs, in registers: k / q elements threadIdx.x + j nt */
    float kr[KP], qr[KP], v = 0.0f, a = 0.0f, b = 0.0f, z = 0.0f;
#define DN_LOAD(t_)                                                                                        \
    do {                                                                                                   \
        const float *row_ = cv + (size_t)(t_) * C, *mr_ = mix + (size_t)(t_) * ldm;                        \
        _Pragma("unroll") for (int j = 0; j < KP; j++) {                                                   \
            int i_ = threadIdx.x + j * nt;                                                                 \
            kr[j] = i_ < DK ? row_[(size_t)nk * DK + (size_t)kh * DK + i_] : 0.0f;                         \
            qr[j] = i_ < DK ? row_[(size_t)kh * DK + i_] : 0.0f;                                           \
        }                                                                                                  \
        v = col ? row_[(size_t)2 * nk * DK + (size_t)h * dv + e] : 0.0f;                                   \
        z = col && core ? mr_[z_off + h * dv + e] : 0.0f;                                                  \
        a = mr_[a_off + h];                                                                                \
        b = mr_[b_off + h];                                                                                \
    } while (0)
    if (T > 0) DN_LOAD(0);
    for (int t = 0; t < T; t++) {
        /* 1. the squares of k and q: this thread's elements, the warp tree */
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int j = 0; j < KP; j++) {
            sk += kr[j] * kr[j];
            sq += qr[j] * qr[j];
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            sk += __shfl_xor_sync(0xffffffffu, sk, o);
            sq += __shfl_xor_sync(0xffffffffu, sq, o);
        }
        if (lane == 0) {
            red[w] = sk;
            red[32 + w] = sq;
        }
        const float sp = a + dtb > 20.0f ? a + dtb : log1pf(expf(a + dtb));
        const float decay = expf(na * sp), beta = 1.0f / (1.0f + expf(-b));
        __syncthreads();
        /* 2. the block's sums (warps in order); k and q normalised */
        sk = 0.0f, sq = 0.0f;
        for (int i = 0; i < nwarp; i++) {
            sk += red[i];
            sq += red[32 + i];
        }
        const float rk = 1.0f / sqrtf(sk + 1e-6f), rq = 1.0f / sqrtf(sq + 1e-6f) * qscale;
#pragma unroll
        for (int j = 0; j < KP; j++) {
            int i = threadIdx.x + j * nt;
            if (i < DK) {
                kn[(i / DKP) * LD + i % DKP] = kr[j] * rk;
                qn[(i / DKP) * LD + i % DKP] = qr[j] * rq;
            }
        }
        const float vt = v, zt = z;
        if (t + 1 < T) DN_LOAD(t + 1); /* in flight while this row runs */
        __syncthreads();
        /* 3. S = decay S, mem = S^T k, delta, S += k delta, o = S^T q */
        const float4 *k4 = (const float4 *)(kn + part * LD), *q4 = (const float4 *)(qn + part * LD);
        float m0 = 0.0f, m1 = 0.0f, m2 = 0.0f, m3 = 0.0f;
#pragma unroll
        for (int i = 0; i < DKP; i += 4) {
            float4 k = k4[i / 4];
            S[i] = S[i] * decay;
            m0 += S[i] * k.x;
            S[i + 1] = S[i + 1] * decay;
            m1 += S[i + 1] * k.y;
            S[i + 2] = S[i + 2] * decay;
            m2 += S[i + 2] * k.z;
            S[i + 3] = S[i + 3] * decay;
            m3 += S[i + 3] * k.w;
        }
        float mem = (m0 + m1) + (m2 + m3);
#pragma unroll
        for (int o = 1; o < P; o <<= 1) mem += __shfl_xor_sync(0xffffffffu, mem, o);
        const float delta = (vt - mem) * beta;
        if (core) {
            float o0 = 0.0f, o1 = 0.0f, o2 = 0.0f, o3 = 0.0f;
#pragma unroll
            for (int i = 0; i < DKP; i += 4) {
                float4 k = k4[i / 4], q = q4[i / 4];
                S[i] = S[i] + k.x * delta;
                o0 += S[i] * q.x;
                S[i + 1] = S[i + 1] + k.y * delta;
                o1 += S[i + 1] * q.y;
                S[i + 2] = S[i + 2] + k.z * delta;
                o2 += S[i + 2] * q.z;
                S[i + 3] = S[i + 3] + k.w * delta;
                o3 += S[i + 3] * q.w;
            }
            float o = (o0 + o1) + (o2 + o3);
#pragma unroll
            for (int off = 1; off < P; off <<= 1) o += __shfl_xor_sync(0xffffffffu, o, off);
            float ss = col && part == 0 ? o * o : 0.0f;
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
            if (lane == 0) red[64 + w] = ss;
            __syncthreads();
            ss = 0.0f;
            for (int i = 0; i < nwarp; i++) ss += red[64 + i];
            const float r = 1.0f / sqrtf(ss / (float)dv + eps);
            if (col && part == 0)
                core[(size_t)t * ldc + (size_t)h * dv + e] = __float2bfloat16(o * r * nwe * (zt / (1.0f + expf(-zt))));
        } else {
#pragma unroll
            for (int i = 0; i < DKP; i += 4) {
                float4 k = k4[i / 4];
                S[i] = S[i] + k.x * delta;
                S[i + 1] = S[i + 1] + k.y * delta;
                S[i + 2] = S[i + 2] + k.z * delta;
                S[i + 3] = S[i + 3] + k.w * delta;
            }
        }
        /* kn, qn, red are rewritten next row only after its first barrier */
    }
#undef DN_LOAD
    if (col) {
#pragma unroll
        for (int i = 0; i < DKP; i++) Sg[(size_t)i * dv] = S[i];
    }
}

/* ---- attention ------------------------------------------------------------ */

enum { ATT_WARPS = 8 };

/* Block (row t, query head h), HD = head_dim. pos0 = *pos (device memory,
 * so a captured graph replays at any position). Keys: cache rows of kv head
 * h/(nq/nkv) (kc/vc [nkv][n_ctx][HD]): causal rows see cache rows
 * 0..pos0+t; otherwise (draft block) every row sees cache rows 0..pos0-1
 * and then the n_blk block rows (kb/vb, row stride ldkb, head at kv*HD).
 * Keys go in chunks of 32, chunk c to warp c % ATT_WARPS; a lane scores its
 * key (full unrolled dot), then the warp adds the chunk's V rows in key
 * order with lanes over dimensions; warps merge in warp order.
 * q: [T][ldq] at column h*HD; out: bf16 [T][ldo] at column h*HD. */
template <int HD>
__global__ void __launch_bounds__(32 * ATT_WARPS)
    k_attention(const float *q, int ldq, const float *kc, const float *vc, int n_ctx, int causal, const int *pos,
                const float *kb, const float *vb, int ldkb, int n_blk, int nq, int nkv, __nv_bfloat16 *out, int ldo) {
    cu_pdl_wait();
    cu_pdl_trigger();
    constexpr int ND = (HD + 31) / 32;
    __shared__ __align__(16) float qs[HD];
    __shared__ float wm[ATT_WARPS], wl[ATT_WARPS];
    __shared__ float wacc[ATT_WARPS][HD];
    int t = blockIdx.x, h = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int kvh = h / (nq / nkv), pos0 = *pos;
    const float scale = 1.0f / sqrtf((float)HD);
    for (int i = threadIdx.x; i < HD; i += blockDim.x) qs[i] = q[(size_t)t * ldq + (size_t)h * HD + i] * scale;
    __syncthreads();
    int nc = causal ? pos0 + t + 1 : pos0;
    int n = nc + (causal ? 0 : n_blk);
    const float *kh = kc + (size_t)kvh * n_ctx * HD, *vh = vc + (size_t)kvh * n_ctx * HD;
    float m = -INFINITY, l = 0.0f, acc[ND];
#pragma unroll
    for (int i = 0; i < ND; i++) acc[i] = 0.0f;
    for (int c = warp; c * 32 < n; c += ATT_WARPS) {
        int j = c * 32 + lane;
        float s = -INFINITY;
        if (j < n) {
            const float *k = j < nc ? kh + (size_t)j * HD : kb + (size_t)(j - nc) * ldkb + (size_t)kvh * HD;
            float d = 0.0f;
#pragma unroll
            for (int i = 0; i < HD; i += 4) {
                float4 kv = *(const float4 *)(k + i);
                d = fmaf(qs[i], kv.x, d);
                d = fmaf(qs[i + 1], kv.y, d);
                d = fmaf(qs[i + 2], kv.z, d);
                d = fmaf(qs[i + 3], kv.w, d);
            }
            s = d;
        }
        float cm = s;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
        float nm = fmaxf(m, cm);
        float corr = expf(m - nm), p = j < n ? expf(s - nm) : 0.0f;
        float ps = p;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
        l = l * corr + ps;
#pragma unroll
        for (int i = 0; i < ND; i++) acc[i] *= corr;
#pragma unroll 8
        for (int jj = 0; jj < 32; jj++) {
            float pj = __shfl_sync(0xffffffffu, p, jj);
            int key = c * 32 + jj;
            if (key < n) {
                const float *v = key < nc ? vh + (size_t)key * HD : vb + (size_t)(key - nc) * ldkb + (size_t)kvh * HD;
#pragma unroll
                for (int i = 0; i < ND; i++)
                    if (HD % 32 == 0 || lane + 32 * i < HD) acc[i] = fmaf(pj, v[lane + 32 * i], acc[i]);
            }
        }
        m = nm;
    }
    if (lane == 0) wm[warp] = m, wl[warp] = l;
#pragma unroll
    for (int i = 0; i < ND; i++)
        if (HD % 32 == 0 || lane + 32 * i < HD) wacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    if (warp != 0) return;
    float M = wm[0];
    for (int w = 1; w < ATT_WARPS; w++) M = fmaxf(M, wm[w]);
    float L = 0.0f, f[ATT_WARPS];
    for (int w = 0; w < ATT_WARPS; w++) {
        f[w] = wl[w] > 0.0f ? expf(wm[w] - M) : 0.0f;
        L += wl[w] * f[w];
    }
    for (int d = lane; d < HD; d += 32) {
        float o = 0.0f;
        for (int w = 0; w < ATT_WARPS; w++) o += wacc[w][d] * f[w];
        out[(size_t)t * ldo + (size_t)h * HD + d] = __float2bfloat16_rn(o / L);
    }
}

/* The same contract for HD = 64 or 128, keys in chunks of 16 (chunk c to
 * warp c % ATT_WARPS) so that every load of a chunk is in flight at once:
 * scoring, lanes 2kk and 2kk+1 hold key kk's halves of the dot product (each
 * in ascending dimension order, then added); the V rows, lane l holds float4
 * column l + 32 i of each of the 16 rows and adds them in key order; warps
 * merge in warp order. Block (row t, query heads blockIdx.y*G .. +G-1), all
 * of one K/V head: G = 1 is one block per query head (more blocks: a decode
 * step), G = nq / nkv reads each K/V row once for every query head sharing
 * it (a verify of T rows reads n*T*nkv rows instead of n*T*nq). Each query's
 * arithmetic is the same for every G, so G cannot change a bit. */
template <int HD, int G>
__global__ void __launch_bounds__(32 * ATT_WARPS)
    k_attention16(const float *q, int ldq, const float *kc, const float *vc, int n_ctx, int causal, const int *pos,
                    const float *kb, const float *vb, int ldkb, int n_blk, int nq, int nkv, __nv_bfloat16 *out,
                    int ldo) {
    cu_pdl_wait();
    cu_pdl_trigger();
    constexpr int CH = 16, HH = HD / 2, NV = HD / 4 >= 32 ? HD / 128 : 1;
    constexpr int VL = HD / 4 < 32 ? HD / 4 : 32;
    __shared__ __align__(16) float qs[G][HD];
    __shared__ float wm[ATT_WARPS][G], wl[ATT_WARPS][G];
    __shared__ __align__(16) float wacc[ATT_WARPS][G][HD];
    int t = blockIdx.x, h0 = blockIdx.y * G, kvh = h0 / (nq / nkv), lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    int pos0 = *pos;
    const float scale = 1.0f / sqrtf((float)HD);
    for (int i = threadIdx.x; i < G * HD; i += blockDim.x)
        qs[i / HD][i % HD] = q[(size_t)t * ldq + (size_t)(h0 + i / HD) * HD + i % HD] * scale;
    __syncthreads();
    int nc = causal ? pos0 + t + 1 : pos0;
    int n = nc + (causal ? 0 : n_blk);
    const float *kh = kc + (size_t)kvh * n_ctx * HD, *vh = vc + (size_t)kvh * n_ctx * HD;
    const int kk = lane >> 1, half = lane & 1;
    float m[G], l[G];
    float4 acc[G][NV];
#pragma unroll
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < NV; i++) acc[g][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int c = warp; c * CH < n; c += ATT_WARPS) {
        int j = c * CH + kk;
        float sc[G];
        {
            float d[G];
#pragma unroll
            for (int g = 0; g < G; g++) d[g] = 0.0f;
            if (j < n) {
                const float *k =
                    (j < nc ? kh + (size_t)j * HD : kb + (size_t)(j - nc) * ldkb + (size_t)kvh * HD) + half * HH;
                float4 kv[HH / 4];
#pragma unroll
                for (int i = 0; i < HH / 4; i++) kv[i] = ((const float4 *)k)[i];
#pragma unroll
                for (int g = 0; g < G; g++) {
                    const float *qh = qs[g] + half * HH;
#pragma unroll
                    for (int i = 0; i < HH / 4; i++) {
                        d[g] = fmaf(qh[4 * i], kv[i].x, d[g]);
                        d[g] = fmaf(qh[4 * i + 1], kv[i].y, d[g]);
                        d[g] = fmaf(qh[4 * i + 2], kv[i].z, d[g]);
                        d[g] = fmaf(qh[4 * i + 3], kv[i].w, d[g]);
                    }
                }
            }
#pragma unroll
            for (int g = 0; g < G; g++) {
                float o = __shfl_xor_sync(0xffffffffu, d[g], 1);
                sc[g] = j < n ? (half ? o + d[g] : d[g] + o) : -INFINITY;
            }
        }
        float4 vr[CH][NV];
#pragma unroll
        for (int r = 0; r < CH; r++) {
            int key = c * CH + r;
#pragma unroll
            for (int i = 0; i < NV; i++) {
                vr[r][i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (key < n && lane < VL) {
                    const float *v =
                        key < nc ? vh + (size_t)key * HD : vb + (size_t)(key - nc) * ldkb + (size_t)kvh * HD;
                    vr[r][i] = ((const float4 *)v)[lane + 32 * i];
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) {
            float cm = sc[g];
#pragma unroll
            for (int o = 16; o > 1; o >>= 1) cm = fmaxf(cm, __shfl_xor_sync(0xffffffffu, cm, o));
            float nm = fmaxf(m[g], cm);
            float corr = expf(m[g] - nm), p = j < n ? expf(sc[g] - nm) : 0.0f;
            float ps = half ? 0.0f : p;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
            l[g] = l[g] * corr + ps;
#pragma unroll
            for (int i = 0; i < NV; i++)
                acc[g][i].x *= corr, acc[g][i].y *= corr, acc[g][i].z *= corr, acc[g][i].w *= corr;
#pragma unroll
            for (int r = 0; r < CH; r++) {
                float pr = __shfl_sync(0xffffffffu, p, 2 * r);
#pragma unroll
                for (int i = 0; i < NV; i++) {
                    acc[g][i].x = fmaf(pr, vr[r][i].x, acc[g][i].x);
                    acc[g][i].y = fmaf(pr, vr[r][i].y, acc[g][i].y);
                    acc[g][i].z = fmaf(pr, vr[r][i].z, acc[g][i].z);
                    acc[g][i].w = fmaf(pr, vr[r][i].w, acc[g][i].w);
                }
            }
            m[g] = nm;
        }
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        if (lane == 0) wm[warp][g] = m[g], wl[warp][g] = l[g];
        if (lane < VL) {
#pragma unroll
            for (int i = 0; i < NV; i++) ((float4 *)wacc[warp][g])[lane + 32 * i] = acc[g][i];
        }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * HD; e += blockDim.x) {
        int g = e / HD, d = e % HD;
        float M = wm[0][g];
        for (int w = 1; w < ATT_WARPS; w++) M = fmaxf(M, wm[w][g]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) {
            float f = wl[w][g] > 0.0f ? expf(wm[w][g] - M) : 0.0f;
            L += wl[w][g] * f;
            o += wacc[w][g][d] * f;
        }
        out[(size_t)t * ldo + (size_t)(h0 + g) * HD + d] = __float2bfloat16_rn(o / L);
    }
}

/* ---- attention split over fixed chunks of key positions -------------------
 * The long-context form (cu_att_chunk keys a chunk, a constant of the head
 * size: never chosen from T, the position or the SM count). Each query q
 * (row t, head h; key limit lim_q = pos0 + t for the target, the last key
 * for a draft block) has, per chunk c of absolute key positions
 * [c*CH, c*CH + CH) that holds a key it sees (c <= lim_q / CH):
 *   s_j  = (d0 + d1) + (d2 + d3) with d_i = sum over k = i mod 4, ascending,
 *          of fmaf(q[k] / sqrt(HD), K_j[k]) (four fixed chains);
 *   m_c  = max of s_j over the chunk's keys j <= lim_q (exact);
 *   p_j  = expf(s_j - m_c); keys past lim_q are not keys of q (p_j = 0, not
 *          added: no signed zero can differ);
 *   L_c  = lane l sums p_j, j = l, l+32, l+64, l+96 in that order, then a
 *          xor butterfly over the 32 lanes (16, 8, 4, 2, 1);
 *   O_c  = for each dimension, one fmaf chain over the chunk's keys j <= lim_q
 *          in ascending j: O_c[d] = fmaf(p_j, V_j[d], O_c[d]);
 * and the merge (k_att_merge): M = max_c m_c; L = sum_c L_c expf(m_c - M) and
 * O[d] = sum_c O_c[d] expf(m_c - M), each in ascending c; out = bf16(O / L).
 * All of it depends on q, lim_q and the keys at positions <= lim_q only: a
 * row's bits are the same for every T, every row block, after a rollback.
 * A block (k_att_part) is one unit: one K/V head x one chunk x the query heads
 * of that K/V head x up to ATT_UNIT_Q / G rows: K and V of the chunk are read
 * once into shared memory for every query of the unit. Which block or thread
 * computes which of these values is scheduling: it cannot change a bit. */
enum { ATT_UNIT_Q = 64, ATT_PART_THREADS = 256 };

__host__ __device__ constexpr int cu_att_chunk(int hd) { return hd <= 128 ? 128 : 64; }

/* Queries of one unit: ATT_UNIT_Q, half of it for heads of 512 (Gemma-4's
 * full layers), whose q rows and chunk would not fit in shared memory at 64.
 * A function of the head size alone: which queries share a unit is
 * scheduling and cannot change a bit. */
__host__ __device__ constexpr int cu_att_unit(int hd) { return hd <= 256 ? ATT_UNIT_Q : ATT_UNIT_Q / 2; }

/* floats of dynamic shared memory for R queries: q, scores, one buffer for
 * the chunk's K and then its V (a decode unit takes ~72 KB at head size 128,
 * so three fit on an SM and one's loads overlap another's arithmetic) */
__host__ __device__ constexpr int cu_att_smem(int hd, int R) {
    return R * hd + R * cu_att_chunk(hd) + cu_att_chunk(hd) * (hd + 4) + 2 * R;
}

/* The lowest key position a causal query at position lim sees: lim - W + 1
 * in a sliding-window layer (gpt-oss), 0 without a window (W = 0). A draft
 * block's rows (not causal) see the last W context keys and the whole
 * block: their lowest key is cu_att_lo(pos0 - 1, W) = pos0 - W (pos0 context
 * keys; attention.h's lo(t) on the CPU). Chunks wholly below it are neither
 * computed nor merged; inside the first chunk the keys below it score -inf
 * (p = 0, and fmaf(0, V, O) leaves O as it is), so a row's bits still depend
 * on its position and keys alone. */
__host__ __device__ __forceinline__ int cu_att_lo(int lim, int window) {
    return window && lim - window + 1 > 0 ? lim - window + 1 : 0;
}


/* Grid (chunk, K/V head), ATT_PART_THREADS threads, cu_att_smem(HD, rows*G)
 * floats of dynamic shared memory. Rows t0 .. t0+rows-1 of the forward (q:
 * [T][ldq], head h at column h*HD); keys as k_attention (kc/vc [nkv][n_ctx]
 * [HD] cache rows, then for a draft block the n_blk rows kb/vb). Writes, for
 * query slot (t - t0) * nq + h and chunk c: po [slot][nch][HD] = O_c and
 * pml [slot][nch] = (m_c, L_c), for the chunks the query sees. */
/* cu_att_part is the block's work, for chunk c and K/V head kvh at first
 * position pos0: k_att_part and k_att_part_seg (several sequences' units in
 * one launch) both run it, so a unit's values are the same bits from either. */
template <int HD>
__device__ __forceinline__ void cu_att_part(const float *q, int ldq, const float *kc, const float *vc, int n_ctx,
                                            int causal, int pos0, const float *kb, const float *vb, int ldkb,
                                            int n_blk, int t0, int rows, int nq, int nkv, float *po, float2 *pml,
                                            int nch, float att_scale, int window, int c, int kvh) {
    constexpr int CH = cu_att_chunk(HD), KS = HD + 4, C4 = HD / 4, NQT = ATT_PART_THREADS / CH;
    constexpr int NU = (cu_att_unit(HD) * C4 + ATT_PART_THREADS - 1) / ATT_PART_THREADS;
    extern __shared__ __align__(16) float sm[];
    const int G = nq / nkv, R = rows * G, tid = threadIdx.x;
    const int c0 = c * CH;
    const int nc = causal ? pos0 + t0 + rows : pos0; /* keys in the cache (causal: this block's last row's) */
    const int n = causal ? nc : pos0 + n_blk;        /* keys any row of the block sees */
    if (c0 >= n) return;
    /* a sliding window: causal row t sees keys cu_att_lo(pos0 + t, W) ..; a draft block's rows keys
     * cu_att_lo(pos0 - 1, W) ..; no row of the block sees a chunk that ends before its first row's lowest key */
    const int blo = causal ? cu_att_lo(pos0 + t0, window) : cu_att_lo(pos0 - 1, window);
    if (window && c0 + CH <= blo) return;
    float *Qs = sm, *S = Qs + R * HD, *Ks = S + R * CH, *Vs = Ks; /* V replaces K after the scores */
    float2 *ML = (float2 *)(Ks + CH * KS);
    const float *kh = kc + (size_t)kvh * n_ctx * HD, *vh = vc + (size_t)kvh * n_ctx * HD;
    /* K of the chunk's keys, 16 bytes at a time (V after the scores) */
    for (int e = tid; e < CH * C4; e += ATT_PART_THREADS) {
        int j = e / C4, i = e % C4, key = c0 + j;
        if (key < n)
            cu_cp16(Ks + j * KS + 4 * i, (key < nc ? kh + (size_t)key * HD : kb + (size_t)(key - nc) * ldkb +
                                                                                  (size_t)kvh * HD) + 4 * i);
    }
    cu_cp_commit();
    const float scale = att_scale != 0.0f ? att_scale : 1.0f / sqrtf((float)HD);
    for (int e = tid; e < R * HD; e += ATT_PART_THREADS) {
        int i = e / HD, k = e % HD, t = t0 + i / G, h = kvh * G + i % G;
        Qs[e] = q[(size_t)t * ldq + (size_t)h * HD + k] * scale;
    }
    cu_cp_wait<0>();
    __syncthreads();
    /* scores: thread (key j, queries i = tid / CH + NQT u) */
    {
        const int j = tid % CH, key = c0 + j;
        for (int ib = tid / CH; ib < R; ib += 8 * NQT) {
            float d[8][4];
#pragma unroll
            for (int b = 0; b < 8; b++) d[b][0] = d[b][1] = d[b][2] = d[b][3] = 0.0f;
#pragma unroll 4
            for (int k4 = 0; k4 < C4; k4++) {
                float4 kv = *(const float4 *)(Ks + j * KS + 4 * k4);
#pragma unroll
                for (int b = 0; b < 8; b++) {
                    int i = ib + b * NQT;
                    if (i < R) {
                        float4 qv = *(const float4 *)(Qs + i * HD + 4 * k4);
                        d[b][0] = fmaf(qv.x, kv.x, d[b][0]);
                        d[b][1] = fmaf(qv.y, kv.y, d[b][1]);
                        d[b][2] = fmaf(qv.z, kv.z, d[b][2]);
                        d[b][3] = fmaf(qv.w, kv.w, d[b][3]);
                    }
                }
            }
#pragma unroll
            for (int b = 0; b < 8; b++) {
                int i = ib + b * NQT;
                if (i < R) {
                    int lim = causal ? pos0 + t0 + i / G : n - 1, lo = causal ? cu_att_lo(lim, window) : blo;
                    S[i * CH + j] = key <= lim && key >= lo && key < n ? (d[b][0] + d[b][1]) + (d[b][2] + d[b][3])
                                                                       : -INFINITY;
                }
            }
        }
    }
    __syncthreads();
    /* V into the buffer K is done with; it arrives during the softmax */
    for (int e = tid; e < CH * C4; e += ATT_PART_THREADS) {
        int j = e / C4, i = e % C4, key = c0 + j;
        if (key < n)
            cu_cp16(Vs + j * KS + 4 * i, (key < nc ? vh + (size_t)key * HD : vb + (size_t)(key - nc) * ldkb +
                                                                                  (size_t)kvh * HD) + 4 * i);
    }
    cu_cp_commit();
    /* softmax of the chunk: warp w, queries i = w, w + 8, ... */
    {
        const int lane = tid & 31, warp = tid >> 5;
        for (int i = warp; i < R; i += ATT_PART_THREADS / 32) {
            float mx = -INFINITY;
#pragma unroll
            for (int r = 0; r < CH / 32; r++) mx = fmaxf(mx, S[i * CH + lane + 32 * r]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float ls = 0.0f;
            if (mx != -INFINITY) {
#pragma unroll
                for (int r = 0; r < CH / 32; r++) {
                    float p = expf(S[i * CH + lane + 32 * r] - mx); /* -inf: 0 */
                    S[i * CH + lane + 32 * r] = p;
                    ls += p;
                }
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
            }
            if (lane == 0) ML[i] = make_float2(mx, ls);
        }
    }
    cu_cp_wait<0>();
    __syncthreads();
    /* O_c: thread (column cc, queries r = tid / C4 + (256 / C4) u) */
    {
        const int cc = tid % C4;
        float4 acc[NU];
        int jm[NU];
#pragma unroll
        for (int u = 0; u < NU; u++) {
            acc[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            int r = tid / C4 + (ATT_PART_THREADS / C4) * u;
            int lim = r < R ? (causal ? pos0 + t0 + r / G : n - 1) : -1;
            int last = lim < n - 1 ? lim : n - 1;
            jm[u] = last - c0 + 1 < CH ? last - c0 + 1 : CH; /* keys 0..jm-1 of the chunk */
        }
        int jend = 0;
#pragma unroll
        for (int u = 0; u < NU; u++) jend = jm[u] > jend ? jm[u] : jend;
#pragma unroll 4
        for (int j = 0; j < jend; j++) {
            float4 v = *(const float4 *)(Vs + j * KS + 4 * cc);
#pragma unroll
            for (int u = 0; u < NU; u++) {
                if (j < jm[u]) {
                    float p = S[(tid / C4 + (ATT_PART_THREADS / C4) * u) * CH + j];
                    acc[u].x = fmaf(p, v.x, acc[u].x);
                    acc[u].y = fmaf(p, v.y, acc[u].y);
                    acc[u].z = fmaf(p, v.z, acc[u].z);
                    acc[u].w = fmaf(p, v.w, acc[u].w);
                }
            }
        }
#pragma unroll
        for (int u = 0; u < NU; u++) {
            int r = tid / C4 + (ATT_PART_THREADS / C4) * u;
            if (r < R && jm[u] > 0) {
                size_t slot = (size_t)(r / G) * nq + kvh * G + r % G;
                *(float4 *)(po + (slot * nch + c) * HD + 4 * cc) = acc[u];
                if (cc == 0) pml[slot * nch + c] = ML[r];
            }
        }
    }
}

template <int HD>
__global__ void __launch_bounds__(ATT_PART_THREADS)
    k_att_part(const float *q, int ldq, const float *kc, const float *vc, int n_ctx, int causal, const int *pos,
               const float *kb, const float *vb, int ldkb, int n_blk, int t0, int rows, int nq, int nkv, float *po,
               float2 *pml, int nch, float att_scale, int window) {
    cu_pdl_wait();
    cu_pdl_trigger();
    cu_att_part<HD>(q, ldq, kc, vc, n_ctx, causal, *pos, kb, vb, ldkb, n_blk, t0, rows, nq, nkv, po, pml, nch,
                    att_scale, window, blockIdx.x, blockIdx.y);
}

/* Grid (rows, nq), HD threads: the chunk partials of query (t0 + blockIdx.x,
 * blockIdx.y) merged in ascending chunk order into out bf16 [T][ldo]. The
 * arithmetic is one fixed chain per dimension (the contract above); what the
 * kernel arranges is only the loads: (m_c, L_c) of ATT_MERGE_TILE chunks go
 * to shared memory at once, and each thread issues its ATT_MERGE_TILE O_c
 * loads before the chain consumes them, so a long context costs a few
 * rounds of memory latency instead of one per chunk (at 32k positions, 256
 * chunks: the merge was one dependent load per chunk). */
enum { ATT_MERGE_TILE = 32 };

/* cu_att_merge: the block's work for row t0 + tl, query head h (k_att_merge
 * and k_att_merge_seg run it). */
template <int HD>
__device__ __forceinline__ void cu_att_merge(int causal, int pos0, int n_blk, int t0, int nq, const float *po,
                                             const float2 *pml, int nch, __nv_bfloat16 *out, int ldo, int window,
                                             const float *sinks, int tl, int h) {
    constexpr int CH = cu_att_chunk(HD);
    __shared__ float2 mls[ATT_MERGE_TILE];
    __shared__ float mred[HD / 32 > 0 ? HD / 32 : 1];
    int d = threadIdx.x;
    int lim = causal ? pos0 + t0 + tl : pos0 + n_blk - 1;
    int ncr = lim / CH + 1, clo = cu_att_lo(causal ? lim : pos0 - 1, window) / CH; /* chunks clo..ncr-1 */
    size_t slot = (size_t)tl * nq + h;
    const float2 *ml = pml + slot * nch;
    const float *o = po + slot * nch * HD + d;
    /* M = max_c m_c: exact, so any order; thread d takes c = d, d + HD, ... */
    float M = -INFINITY;
    for (int c = clo + d; c < ncr; c += HD) M = fmaxf(M, ml[c].x);
    constexpr unsigned WM = HD >= 32 ? 0xffffffffu : (1u << HD) - 1u; /* the lanes of a block of HD < 32 */
#pragma unroll
    for (int k = (HD >= 32 ? 32 : HD) / 2; k > 0; k >>= 1) M = fmaxf(M, __shfl_xor_sync(WM, M, k));
    if constexpr (HD >= 32) {
        if ((d & 31) == 0) mred[d >> 5] = M;
        __syncthreads();
        for (int w = 0; w < HD / 32; w++) M = fmaxf(M, mred[w]);
    }
    /* a sink (gpt-oss): one more logit in the softmax, with no value */
    const float sk = sinks ? sinks[h] : -INFINITY;
    if (sinks) M = fmaxf(M, sk);
    float L = 0.0f, acc = 0.0f;
    for (int c0 = clo; c0 < ncr; c0 += ATT_MERGE_TILE) {
        int nt = ncr - c0 < ATT_MERGE_TILE ? ncr - c0 : ATT_MERGE_TILE;
        __syncthreads(); /* the last tile's mls is read */
        for (int u = d; u < nt; u += HD) mls[u] = ml[c0 + u];
        float ov[ATT_MERGE_TILE];
#pragma unroll
        for (int u = 0; u < ATT_MERGE_TILE; u++) ov[u] = u < nt ? o[(size_t)(c0 + u) * HD] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int u = 0; u < ATT_MERGE_TILE; u++) {
            if (u < nt) {
                float2 e = mls[u];
                float f = expf(e.x - M);
                L = fmaf(e.y, f, L);
                acc = fmaf(ov[u], f, acc);
            }
        }
    }
    if (sinks) L += expf(sk - M);
    out[(size_t)(t0 + tl) * ldo + (size_t)h * HD + d] = __float2bfloat16_rn(acc / L);
}

template <int HD>
__global__ void __launch_bounds__(HD) k_att_merge(int causal, const int *pos, int n_blk, int t0, int nq,
                                                  const float *po, const float2 *pml, int nch, __nv_bfloat16 *out,
                                                  int ldo, int window, const float *sinks) {
    cu_pdl_wait();
    cu_pdl_trigger();
    cu_att_merge<HD>(causal, *pos, n_blk, t0, nq, po, pml, nch, out, ldo, window, sinks, blockIdx.x, blockIdx.y);
}

/* ---- several sequences' attention in one launch (a stacked step) ----
 * cu_forward_multi and cu_draft_block_multi stack the rows of several
 * sequences; their norm + RoPE and attention run as one launch each over a
 * device table with a cu_segd per sequence (of the layer) instead of a
 * launch per sequence. Each block finds its sequence and runs the per-block
 * work of the one-sequence kernels (cu_norm_rope_r / cu_norm_rope_s,
 * cu_att_part, cu_att_merge) with that sequence's position, cache and rows,
 * so every value is the bits the one-sequence launches write. The chunk
 * partials of all sequences live in one scratch: sequence i's at po0 / pml0,
 * [T nq][nch][HD] / [T nq][nch] with its own nch (the chunks its keys fill). */
typedef struct {
    float *kc, *vc;             /* its K/V block of the layer */
    const float *cos_t, *sin_t; /* its RoPE tables for the layer */
    int n_ctx, pos0;            /* cache rows; the position of its first row */
    int row0, T;                /* its rows of the stacked activations */
    int nch;                    /* chunks its rows see (the partials' stride) */
    size_t po0, pml0;           /* its partials' offsets (floats, float2s) */
} cu_segd;

/* grid (rows, nq + nk), 32 threads: k_norm_rope_r (HD > 0) or k_norm_rope
 * (HD = 0) for the stacked row blockIdx.x, of sequence rowseg[row]; the
 * rotated K and V stored into its cache when store (a target's rows; a draft
 * block's are not kept) */
template <int HD>
__global__ void k_norm_rope_seg(float *buf, int ldb, int q_off, int nq, const float *qn, int k_off, int v_off,
                                const float *kn, int hd, int rh, float eps, const cu_segd *sg, const int *rowseg,
                                int store) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const cu_segd *e = sg + rowseg[blockIdx.x];
    const int t = blockIdx.x - e->row0;
    float *bg = buf + (size_t)e->row0 * ldb;
    if constexpr (HD > 0)
        cu_norm_rope_r<HD>(bg, ldb, q_off, nq, qn, k_off, v_off, kn, eps, e->cos_t, e->sin_t, e->pos0,
                           store ? e->kc : NULL, store ? e->vc : NULL, e->n_ctx, t, blockIdx.y, threadIdx.x);
    else
        cu_norm_rope_s(bg, ldb, q_off, nq, qn, k_off, v_off, kn, hd, rh, eps, e->cos_t, e->sin_t, e->pos0,
                       store ? e->kc : NULL, store ? e->vc : NULL, e->n_ctx, t, blockIdx.y, threadIdx.x);
}

/* grid (chunk, K/V head, sequence x upr), ATT_PART_THREADS threads: unit
 * blockIdx.z % upr (rows t0 = that x cu_att_unit(HD) / G on) of sequence
 * blockIdx.z / upr, as k_att_part runs it; q rows [T][ldq] with the
 * sequence's own K and V columns at k_off / v_off (a draft block's keys). */
template <int HD>
__global__ void __launch_bounds__(ATT_PART_THREADS)
    k_att_part_seg(const float *q, int ldq, int k_off, int v_off, int causal, const cu_segd *sg, int upr, int nq,
                   int nkv, float *po, float2 *pml, float att_scale, int window) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const cu_segd *e = sg + blockIdx.z / upr;
    const int rb = cu_att_unit(HD) / (nq / nkv), t0 = (int)(blockIdx.z % upr) * rb;
    if (t0 >= e->T || (int)blockIdx.x >= e->nch) return;
    const int rows = e->T - t0 < rb ? e->T - t0 : rb;
    const float *qg = q + (size_t)e->row0 * ldq;
    cu_att_part<HD>(qg, ldq, e->kc, e->vc, e->n_ctx, causal, e->pos0, qg + k_off, qg + v_off, ldq, e->T, t0, rows,
                    nq, nkv, po + e->po0 + (size_t)t0 * nq * e->nch * HD, pml + e->pml0 + (size_t)t0 * nq * e->nch,
                    e->nch, att_scale, window, blockIdx.x, blockIdx.y);
}

/* grid (rows, nq), HD threads: k_att_merge for the stacked row blockIdx.x */
template <int HD>
__global__ void __launch_bounds__(HD) k_att_merge_seg(int causal, const cu_segd *sg, const int *rowseg, int nq,
                                                      const float *po, const float2 *pml, __nv_bfloat16 *out, int ldo,
                                                      int window, const float *sinks) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const cu_segd *e = sg + rowseg[blockIdx.x];
    const int t = blockIdx.x - e->row0;
    cu_att_merge<HD>(causal, e->pos0, e->T, t, nq, po + e->po0 + (size_t)t * nq * e->nch * HD,
                     pml + e->pml0 + (size_t)t * nq * e->nch, e->nch, out + (size_t)e->row0 * ldo, ldo, window, sinks,
                     0, blockIdx.y);
}

/* ---- argmax: out[row] = first index of the maximum of l[row][0..n) (stride
 * ld); NaNs never win. */

/* Two launches: part p of row r scans
 * elements [p*len, (p+1)*len) (len = ceil(n / AMX_PARTS)) into pv/pi
 * [rows][AMX_PARTS]; one warp per row then merges the parts. The first index
 * of the maximum is a total order (value, then lower index), so the split
 * cannot change the answer. */
enum { AMX_PARTS = 64 };

__device__ __forceinline__ void cu_amx_take(float *bv, int *bi, float ov, int oi) {
    if (oi >= 0 && (*bi < 0 || ov > *bv || (ov == *bv && oi < *bi))) *bv = ov, *bi = oi;
}

__global__ void k_argmax_part(const float *l, int ld, int n, float *pv, int *pi) {
    cu_pdl_wait();
    cu_pdl_trigger();
    __shared__ float sv[32];
    __shared__ int si[32];
    int len = (n + AMX_PARTS - 1) / AMX_PARTS, b = blockIdx.x * len, e = b + len < n ? b + len : n;
    const float *r = l + (size_t)blockIdx.y * ld;
    float bv = -INFINITY;
    int bi = -1;
    for (int i = b + threadIdx.x; i < e; i += blockDim.x) {
        float v = r[i];
        if (v > bv || (bi < 0 && v == bv)) bv = v, bi = i;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        cu_amx_take(&bv, &bi, ov, oi);
    }
    int w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) sv[w] = bv, si[w] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 1; i < nw; i++) cu_amx_take(&bv, &bi, sv[i], si[i]);
        pv[(size_t)blockIdx.y * AMX_PARTS + blockIdx.x] = bv;
        pi[(size_t)blockIdx.y * AMX_PARTS + blockIdx.x] = bi;
    }
}

__global__ void k_argmax_merge(const float *pv, const int *pi, int32_t *out, float *best_out) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int lane = threadIdx.x;
    const float *v = pv + (size_t)blockIdx.x * AMX_PARTS;
    const int *ix = pi + (size_t)blockIdx.x * AMX_PARTS;
    float bv = -INFINITY;
    int bi = -1;
    for (int p = lane; p < AMX_PARTS; p += 32) cu_amx_take(&bv, &bi, v[p], ix[p]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        cu_amx_take(&bv, &bi, ov, oi);
    }
    if (lane == 0) {
        out[blockIdx.x] = bi < 0 ? 0 : bi;
        if (best_out) best_out[blockIdx.x] = bv;
    }
}

/* Extra logits: xl[i][e] = lm_head[extra[e]] . x[i] (x bf16 [.][ldx], H
 * columns); one warp per (i, e), lanes in a fixed order then a fixed tree. */
__global__ void k_extra_logits(cw_weight head, const int32_t *extra, int n_extra, const __nv_bfloat16 *x, int ldx,
                               int H, float *xl) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int i = blockIdx.x, e = blockIdx.y, lane = threadIdx.x;
    float s = 0.0f;
    for (int k = lane; k < H; k += 32) s = fmaf(cu_get(head, extra[e], k), __bfloat162float(x[(size_t)i * ldx + k]), s);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) xl[(size_t)i * n_extra + e] = s;
}

/* ids[i]: the argmax over the prefix unless an extra id's logit is strictly
 * greater (extras in order). */
__global__ void k_pick_extra(int32_t *ids, const float *best, const float *xl, const int32_t *extra, int n_extra,
                             int n) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float b = best[i];
    for (int e = 0; e < n_extra; e++)
        if (xl[(size_t)i * n_extra + e] > b) {
            b = xl[(size_t)i * n_extra + e];
            ids[i] = extra[e];
        }
}

/* ---- mixture of experts ----------------------------------------------------
 * A forward of T rows routes each row to K experts and lists the (row,
 * rank) pairs grouped by expert, rows ascending inside an expert (the same
 * order as the CPU's moe()) in one kernel (k_moe_route), runs every active
 * expert's gate/up + SwiGLU GEMM over its pairs' normalised rows and its
 * down GEMM (k_gemm_moe: a k_gemm block whose weight and rows come from the
 * plan), and adds each row's expert outputs in rank order,
 * then the gated shared expert (k_moe_combine). Every step is per row or per
 * (row, expert) through k_gemm's row-invariant tile, so a row's result is the
 * same bits for any T and any mix of rows sharing its experts. All sizes are
 * fixed by T alone (the plan lives on the device), so the forward can be
 * captured in a graph and replayed. */
enum { MOE_MAX_E = 1024, MOE_MAX_K = 32, MOE_MAX_PAIRS = 8192 }; /* pairs: T * K of one forward */

/* Where k_gemm_moe finds its weight and rows: block y = slot * per + r
 * takes rows r*8NT.. of the slot-th active expert (an expert has at most T
 * pairs: per = ceil(T / 8NT)). data/sb: the experts' tiled weights, all of
 * one shape (the cw_weight passed with the map gives it). */
typedef struct {
    const uint8_t *const *data, *const *sb; /* [E] */
    const int *xrow;                        /* [P] each place's input row (NULL: the place itself) */
    const int *start;                       /* [E + 1] first pair of each expert */
    const int *active;                      /* [E] experts with pairs, ascending; *n_active of them */
    const int *n_active;
    int per;
} cu_moe_map;

template <int KIND, int NT, int GEMM_UNROLL, int SWIGLU, int DQ = 0>
__global__ void __launch_bounds__(32 * GEMM_MAX_SPLIT) k_gemm_moe(cw_weight w, cu_moe_map mm, int N,
                                                                    const __nv_bfloat16 *__restrict__ x, int ldx,
                                                                    float *__restrict__ y, int ldy,
                                                                    __nv_bfloat16 *__restrict__ h, int ldh) {
    cu_pdl_wait(); /* the plan is the previous kernels' output */
    const int slot = blockIdx.y / mm.per, part = blockIdx.y % mm.per;
    if (slot >= *mm.n_active) return;
    const int e = mm.active[slot], a = mm.start[e] + part * 8 * NT, T = mm.start[e + 1] - a;
    if (T <= 0) return;
    w.data = (uint8_t *)mm.data[e];
    if (KIND != CW_BF16) w.sb = (uint8_t *)mm.sb[e];
    cu_gemm_tile<KIND, NT, GEMM_UNROLL, SWIGLU, DQ>(w, N, mm.xrow ? x : x + (size_t)a * ldx, ldx,
                                                    mm.xrow ? mm.xrow + a : nullptr, T, y ? y + (size_t)a * ldy : y,
                                                    ldy, 0, h ? h + (size_t)a * ldh : h, ldh);
}

/* Routing and plan of a T-row forward, one block of 1024 threads.
 * Routing, warp w for rows w, w + 32, ...: p = softmax(rl[t][E]) (each
 * lane's values in ascending index, then a butterfly over the lanes: every
 * lane gets the same bits), sel[t][j] = the K largest p, largest first
 * (ties: the lower index), wsel[t][j] their p, divided by their sum taken in
 * rank order when norm, then times pes[sel[t][j]] when pes (Gemma-4). A row's routing depends on its logits alone.
 * Plan of the P = T*K pairs (pair q = row q / K, rank q % K): start[e] =
 * first place of expert e's pairs, which come in ascending q; slot[q] = pair
 * q's place; pair_row[place] = its row; active = the experts with pairs,
 * ascending, *n_active of them. PER = ceil(E / 32) values per lane (a
 * model's E fixes it). */
template <int PER>
__global__ void __launch_bounds__(1024) k_moe_route(const float *__restrict__ rl, const float *__restrict__ bias,
                                                    int T, int E, int K, int norm, const float *__restrict__ pes,
                                                    int *__restrict__ sel, float *__restrict__ wsel,
                                                    int *__restrict__ start, int *__restrict__ active,
                                                    int *__restrict__ n_active, int *__restrict__ slot,
                                                    int *__restrict__ pair_row) {
    __shared__ int cnt[MOE_MAX_E];
    __shared__ int ssel[MOE_MAX_PAIRS]; /* sel, for the plan */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    cu_pdl_wait();
    cu_pdl_trigger();
    for (int t = warp; t < T; t += nw) {
        const float *l = rl + (size_t)t * E;
        float v[PER];
        float mx = -INFINITY;
#pragma unroll
        for (int c = 0; c < PER; c++) {
            int i = c * 32 + lane;
            v[c] = i < E ? (bias ? l[i] + bias[i] : l[i]) : -INFINITY;
            mx = fmaxf(mx, v[c]);
        }
        if (bias) { /* gpt-oss: the K largest biased logits, then a softmax over those K (rank order) */
            float w[MOE_MAX_K];
            unsigned taken = 0; /* bit c: this lane's value c is chosen */
            for (int j = 0; j < K; j++) {
                float bv = -INFINITY;
                int bi = E;
#pragma unroll
                for (int c = 0; c < PER; c++)
                    if (c * 32 + lane < E && !(taken >> c & 1u) && (bi == E || v[c] > bv)) bv = v[c], bi = c * 32 + lane;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) {
                    float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                    int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                    if (oi < E && (bi == E || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
                }
#pragma unroll
                for (int c = 0; c < PER; c++)
                    if (c * 32 + lane == bi) taken |= 1u << c;
                w[j] = bv;
                if (lane == 0) sel[(size_t)t * K + j] = ssel[t * K + j] = bi;
            }
            if (lane == 0) {
                float tot = 0.0f, mx0 = w[0]; /* the largest: w[0] is overwritten below */
                for (int j = 0; j < K; j++) tot += w[j] = expf(w[j] - mx0);
                for (int j = 0; j < K; j++) wsel[(size_t)t * K + j] = w[j] / tot;
            }
            continue;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        float sum = 0.0f;
#pragma unroll
        for (int c = 0; c < PER; c++)
            if (c * 32 + lane < E) sum += v[c] = expf(v[c] - mx);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
#pragma unroll
        for (int c = 0; c < PER; c++) v[c] = c * 32 + lane < E ? v[c] / sum : -1.0f;
        float tot = 0.0f, w[MOE_MAX_K];
        for (int j = 0; j < K; j++) {
            float bv = -1.0f;
            int bi = E;
#pragma unroll
            for (int c = 0; c < PER; c++)
                if (v[c] > bv) bv = v[c], bi = c * 32 + lane;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                int oi = __shfl_xor_sync(0xffffffffu, bi, o);
                if (ov > bv || (ov == bv && oi < bi)) bv = ov, bi = oi;
            }
#pragma unroll
            for (int c = 0; c < PER; c++)
                if (c * 32 + lane == bi) v[c] = -1.0f;
            w[j] = bv;
            tot += bv;
            if (lane == 0) sel[(size_t)t * K + j] = ssel[t * K + j] = bi;
        }
        if (lane == 0)
            for (int j = 0; j < K; j++) {
                float wj = norm ? w[j] / tot : w[j];
                wsel[(size_t)t * K + j] = pes ? wj * pes[ssel[t * K + j]] : wj; /* Gemma-4's per_expert_scale */
            }
    }
    /* the plan: integer counts (shared atomics: any order gives the same
     * numbers), then thread e (E <= MOE_MAX_E = blockDim.x) takes expert e's
     * exclusive prefix of the counts and of the active flags from a block
     * scan: warp scans, then warp 0 scans the warp totals */
    __shared__ int sst[MOE_MAX_E], wc[32], wf[32];
    for (int e = threadIdx.x; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    const int P = T * K;
    for (int q = threadIdx.x; q < P; q += blockDim.x) atomicAdd(&cnt[ssel[q]], 1);
    __syncthreads();
    const int e = threadIdx.x, c = e < E ? cnt[e] : 0, f = c > 0;
    int ic = c, jf = f; /* inclusive scans within the warp */
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        int u = __shfl_up_sync(0xffffffffu, ic, o), g = __shfl_up_sync(0xffffffffu, jf, o);
        if (lane >= o) ic += u, jf += g;
    }
    if (lane == 31) wc[warp] = ic, wf[warp] = jf;
    __syncthreads();
    if (warp == 0) {
        int a = lane < nw ? wc[lane] : 0, b = lane < nw ? wf[lane] : 0, ia = a, ib = b;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            int u = __shfl_up_sync(0xffffffffu, ia, o), g = __shfl_up_sync(0xffffffffu, ib, o);
            if (lane >= o) ia += u, ib += g;
        }
        wc[lane] = ia - a; /* exclusive: the warps before */
        wf[lane] = ib - b;
    }
    __syncthreads();
    if (e < E) {
        int st = wc[warp] + ic - c, na = wf[warp] + jf - f;
        sst[e] = start[e] = st;
        if (f) active[na] = e;
        if (e == E - 1) {
            start[E] = st + c;
            *n_active = na + f;
        }
    }
    __syncthreads();
    if (e < E && c) { /* expert e's pairs in ascending q */
        int a = sst[e];
        for (int q = 0; q < P && a < sst[e] + c; q++)
            if (ssel[q] == e) slot[q] = a, pair_row[a++] = q / K;
    }
}

/* gpt-oss's experts (the CPU's clamped_swiglu): pair q = blockIdx.x (row q /
 * K, rank q % K) of expert e = sel[q] at place p = slot[q]; gy [P][ldg] the
 * gate/up GEMM's f32 output in interleave8 order (gate i at row (i/8)*16 +
 * i%8, up i 8 rows after it); he[p][i] = bf16(a sigmoid(1.702 a) (b + 1)),
 * a = min(g + bg[e][i], L), b = clamp(u + bu[e][i], -L, L), i < I. Each
 * place is one pair's: what a row gets depends on that row alone. */
__global__ void k_moe_oss_act(const float *__restrict__ gy, int ldg, const int *__restrict__ sel,
                              const int *__restrict__ slot, const float *__restrict__ bg,
                              const float *__restrict__ bu, int I, float lim, __nv_bfloat16 *__restrict__ he,
                              int ldh) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const int q = blockIdx.x, e = sel[q], p = slot[q];
    const float *g = gy + (size_t)p * ldg;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        int r = (i >> 3) * 16 + (i & 7);
        float a = g[r] + bg[(size_t)e * I + i], b = g[r + 8] + bu[(size_t)e * I + i];
        a = a > lim ? lim : a;
        b = b > lim ? lim : b < -lim ? -lim : b;
        he[(size_t)p * ldh + i] = __float2bfloat16_rn(a / (1.0f + expf(-1.702f * a)) * (b + 1.0f));
    }
}

/* ye[slot[q]] += bd[sel[q]] ([E][H]): the down projection's bias of pair q =
 * blockIdx.x (gpt-oss), before the rows' weighted sums. */
__global__ void k_moe_bias(float *__restrict__ ye, int H, const int *__restrict__ sel, const int *__restrict__ slot,
                           const float *__restrict__ bd) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const int q = blockIdx.x, e = sel[q], p = slot[q];
    for (int d = threadIdx.x; d < H; d += blockDim.x) ye[(size_t)p * H + d] += bd[(size_t)e * H + d];
}

/* buf[t][0..n) += b[0..n) (gpt-oss's q/k/v biases); grid T, block 256 */
__global__ void k_add_bias(float *buf, int ldb, const float *b, int n) {
    cu_pdl_wait();
    cu_pdl_trigger();
    for (int i = threadIdx.x; i < n; i += blockDim.x) buf[(size_t)blockIdx.x * ldb + i] += b[i];
}

/* x[t] += y[t] + b (gpt-oss's o_proj bias: the projection and its bias
 * summed first, as the CPU does); grid T, block 256 */
__global__ void k_add_proj_bias(float *x, const float *y, const float *b, int H) {
    cu_pdl_wait();
    cu_pdl_trigger();
    for (int i = threadIdx.x; i < H; i += blockDim.x) {
        size_t k = (size_t)blockIdx.x * H + i;
        x[k] += y[k] + b[i];
    }
}

/* ---- Gemma-4 (the CPU reference: cpu_backend.c) ---------------------------- */

/* gelu_pytorch_tanh in float, as the CPU's gelu_tanh */
__device__ __forceinline__ float cu_gelu_tanh(float x) {
    const float beta = (float)(M_SQRT2 * M_2_SQRTPI * 0.5), kappa = 0.044715f;
    return 0.5f * x * (1.0f + tanhf(beta * (x + kappa * (x * x * x))));
}

/* h[t][i] = bf16(gelu_tanh(g) * u), i < I, from the gate/up GEMM's f32 sums
 * gy [T][ldg] in interleave8 order (gate i at (i/8)*16 + i%8, up 8 rows
 * later); grid T, block 256 */
__global__ void k_geglu(const float *gy, int ldg, int I, __nv_bfloat16 *h, int ldh) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const float *g = gy + (size_t)blockIdx.x * ldg;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        int r = (i >> 3) * 16 + (i & 7);
        h[(size_t)blockIdx.x * ldh + i] = __float2bfloat16_rn(cu_gelu_tanh(g[r]) * g[r + 8]);
    }
}

/* x[t] += RMSNorm(y[t]) * w (the sandwich norms: Wo att or the MLP's output
 * normed before the residual add); one block of 256 per row, the sum of
 * squares strided then one block tree */
__global__ void k_rmsnorm_add(float *x, const float *y, const float *w, int H, float eps) {
    cu_pdl_wait();
    cu_pdl_trigger();
    __shared__ float sh[32];
    const float *r = y + (size_t)blockIdx.x * H;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < H; i += blockDim.x) ss += r[i] * r[i];
    ss = cu_block_sum(ss, sh);
    float inv = 1.0f / sqrtf(ss / (float)H + eps);
    for (int i = threadIdx.x; i < H; i += blockDim.x) x[(size_t)blockIdx.x * H + i] += r[i] * inv * w[i];
}

/* x[i] *= s over n values (the embedding scale, layer_scalar); grid
 * ceil(n/256) */
__global__ void k_scale(float *x, size_t n, float s) {
    cu_pdl_wait();
    cu_pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

/* Per-head RMSNorm without weight of nk heads of width hd at column off of
 * buf [T][ldb] (Gemma-4's v norm); grid (T, nk), one warp */
__global__ void k_head_norm(float *buf, int ldb, int off, int hd, float eps) {
    cu_pdl_wait();
    cu_pdl_trigger();
    float *v = buf + (size_t)blockIdx.x * ldb + off + (size_t)blockIdx.y * hd;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < hd; i += 32) ss += v[i] * v[i];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = 1.0f / sqrtf(ss / (float)hd + eps);
    __syncwarp();
    for (int i = threadIdx.x; i < hd; i += 32) v[i] = v[i] * inv;
}

/* l = c tanh(l / c) on n logits (final_logit_softcapping) */
__global__ void k_softcap(float *l, size_t n, float c) {
    cu_pdl_wait();
    cu_pdl_trigger();
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) l[i] = tanhf(l[i] / c) * c;
}

/* The per-layer inputs of row t = blockIdx.x, layer l = blockIdx.y (the
 * CPU's ple_inputs): v = proj[t][l P ..] * ps, RMSNorm with weight nw [P],
 * then (v + es * pe[tok][l P + i]) * is into ple [T][L P]; one warp */
__global__ void k_ple_inputs(const float *proj, cw_weight pe, const int32_t *tok, int L, int P, const float *nw,
                             float eps, float ps, float es, float is, float *ple) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const int t = blockIdx.x, l = blockIdx.y, LP = L * P;
    const float *v = proj + (size_t)t * LP + (size_t)l * P;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < P; i += 32) {
        float a = v[i] * ps;
        ss += a * a;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    float inv = 1.0f / sqrtf(ss / (float)P + eps);
    for (int i = threadIdx.x; i < P; i += 32)
        ple[(size_t)t * LP + (size_t)l * P + i] = (v[i] * ps * inv * nw[i] + cu_get(pe, tok[t], l * P + i) * es) * is;
}

/* g[t][i] = bf16(gelu_tanh(pt[t][i]) * ple[t][l P + i]), i < P (the gate of
 * layer l's per-layer input); grid T, block 32 */
__global__ void k_ple_gate(const float *pt, const float *ple, int LP, int l, int P, __nv_bfloat16 *g, int ldg) {
    cu_pdl_wait();
    cu_pdl_trigger();
    for (int i = threadIdx.x; i < P; i += blockDim.x)
        g[(size_t)blockIdx.x * ldg + i] =
            __float2bfloat16_rn(cu_gelu_tanh(pt[(size_t)blockIdx.x * P + i]) * ple[(size_t)blockIdx.x * LP + (size_t)l * P + i]);
}

/* Gemma-4's experts (GeGLU): place p = blockIdx.x of the P pairs, gy [P][ldg]
 * the gate/up GEMM's f32 sums in interleave8 order; he[p][i] =
 * bf16(gelu_tanh(g) * u), i < I. Each place is one pair's. */
__global__ void k_moe_geglu(const float *__restrict__ gy, int ldg, int I, __nv_bfloat16 *__restrict__ he, int ldh) {
    cu_pdl_wait();
    cu_pdl_trigger();
    const float *g = gy + (size_t)blockIdx.x * ldg;
    for (int i = threadIdx.x; i < I; i += blockDim.x) {
        int r = (i >> 3) * 16 + (i & 7);
        he[(size_t)blockIdx.x * ldh + i] = __float2bfloat16_rn(cu_gelu_tanh(g[r]) * g[r + 8]);
    }
}

/* Row t's expert sum at column d: sum over ranks j of wsel[t][j] *
 * ye[slot[t K + j]][d], in rank order (k_moe_combine's order). */
__device__ __forceinline__ float cu_moe_sum(const float *__restrict__ ye, int H, const int *__restrict__ slot,
                                            const float *__restrict__ wsel, int K, int t, int d) {
    float acc = 0.0f;
    for (int j = 0; j < K; j++) acc += wsel[(size_t)t * K + j] * ye[(size_t)slot[(size_t)t * K + j] * H + d];
    return acc;
}

/* Gemma-4's MoE layer output (the CPU's g4_moe): with h1 = ob[t] (the
 * dense MLP's Wd h) and h2 = the experts' sum (cu_moe_sum, computed twice:
 * the same bits each time), x[t] += RMSNorm(RMSNorm(h1) w1 + RMSNorm(h2) w2)
 * w; ob[t] is overwritten with the inner sum. One block (256) per row. */
__global__ void k_g4_moe_out(float *__restrict__ x, float *__restrict__ ob, const float *__restrict__ ye,
                             const int *__restrict__ slot, const float *__restrict__ wsel, int K,
                             const float *__restrict__ w1, const float *__restrict__ w2, const float *__restrict__ w,
                             int H, float eps) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    cu_pdl_wait();
    cu_pdl_trigger();
    float *o = ob + (size_t)t * H;
    float s1 = 0.0f, s2 = 0.0f;
    for (int d = threadIdx.x; d < H; d += blockDim.x) {
        float h = cu_moe_sum(ye, H, slot, wsel, K, t, d);
        s1 += o[d] * o[d];
        s2 += h * h;
    }
    const float r1 = 1.0f / sqrtf(cu_block_sum(s1, red) / (float)H + eps);
    const float r2 = 1.0f / sqrtf(cu_block_sum(s2, red) / (float)H + eps);
    float s3 = 0.0f;
    for (int d = threadIdx.x; d < H; d += blockDim.x) {
        float v = o[d] * r1 * w1[d] + cu_moe_sum(ye, H, slot, wsel, K, t, d) * r2 * w2[d];
        o[d] = v;
        s3 += v * v;
    }
    const float r3 = 1.0f / sqrtf(cu_block_sum(s3, red) / (float)H + eps);
    for (int d = threadIdx.x; d < H; d += blockDim.x) x[(size_t)t * H + d] += o[d] * r3 * w[d];
}

/* x[t] += sum over ranks j of wsel[t][j] * ye[slot[t K + j]] (rank order),
 * + sigmoid(sh_gate . xb[t]) * sh[t] when there is a shared expert
 * (sh_gate NULL: none). One block (256 threads) per row. */
__global__ void k_moe_combine(float *__restrict__ x, int H, const float *__restrict__ ye, const int *__restrict__ slot,
                              const float *__restrict__ wsel, int K, const float *__restrict__ sh,
                              const float *__restrict__ sh_gate, const __nv_bfloat16 *__restrict__ xb, int ldxb) {
    __shared__ float red[32];
    const int t = blockIdx.x;
    cu_pdl_wait();
    cu_pdl_trigger();
    float sg = 0.0f;
    if (sh_gate) {
        float part = 0.0f;
        for (int d = threadIdx.x; d < H; d += blockDim.x) part += sh_gate[d] * __bfloat162float(xb[(size_t)t * ldxb + d]);
        sg = 1.0f / (1.0f + expf(-cu_block_sum(part, red)));
    }
    for (int d = threadIdx.x; d < H; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < K; j++) acc += wsel[(size_t)t * K + j] * ye[(size_t)slot[(size_t)t * K + j] * H + d];
        if (sh_gate) acc += sh[(size_t)t * H + d] * sg;
        x[(size_t)t * H + d] += acc;
    }
}

/* k_moe_combine and the next RMSNorm in one kernel (one block of
 * RN_THREADS per row; n % 4 == 0, n <= RN_THREADS*4*RN_PER, as k_rmsnorm4):
 * x[t] += the experts (and the gated shared expert) exactly as k_moe_combine
 * sums them, then ob[t] = RMSNorm(x[t]) with weight w exactly as k_rmsnorm4
 * (thread i holds float4s i, i + 256, ...: the same order of the sum of
 * squares). So the bits equal the two kernels run one after the other; one
 * launch and one pass over x fewer per expert block. */
__global__ void __launch_bounds__(RN_THREADS) k_moe_combine_norm(float *__restrict__ x, int H,
                                                                 const float *__restrict__ ye,
                                                                 const int *__restrict__ slot,
                                                                 const float *__restrict__ wsel, int K,
                                                                 const float *__restrict__ sh,
                                                                 const float *__restrict__ sh_gate,
                                                                 const __nv_bfloat16 *__restrict__ xb, int ldxb,
                                                                 const float *__restrict__ w, float eps,
                                                                 __nv_bfloat16 *__restrict__ ob, int ldo) {
    __shared__ float red[32];
    __shared__ float ws[MOE_MAX_K];
    __shared__ int ps[MOE_MAX_K];
    const int t = blockIdx.x;
    cu_pdl_wait();
    cu_pdl_trigger();
    if (threadIdx.x < K) {
        ws[threadIdx.x] = wsel[(size_t)t * K + threadIdx.x];
        ps[threadIdx.x] = slot[(size_t)t * K + threadIdx.x];
    }
    float sg = 0.0f;
    if (sh_gate) { /* k_moe_combine's gate: the same scalar order */
        float part = 0.0f;
        for (int d = threadIdx.x; d < H; d += blockDim.x) part += sh_gate[d] * __bfloat162float(xb[(size_t)t * ldxb + d]);
        sg = 1.0f / (1.0f + expf(-cu_block_sum(part, red)));
    }
    __syncthreads();
    float4 *xr = (float4 *)(x + (size_t)t * H);
    const int n4 = H / 4;
    float4 v[RN_PER];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < RN_PER; i++) {
        int k = threadIdx.x + i * RN_THREADS;
        if (k < n4) {
            float a[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int j = 0; j < K; j++) {
                float4 e = ((const float4 *)(ye + (size_t)ps[j] * H))[k];
                a[0] += ws[j] * e.x;
                a[1] += ws[j] * e.y;
                a[2] += ws[j] * e.z;
                a[3] += ws[j] * e.w;
            }
            if (sh_gate) {
                float4 e = ((const float4 *)(sh + (size_t)t * H))[k];
                a[0] += e.x * sg;
                a[1] += e.y * sg;
                a[2] += e.z * sg;
                a[3] += e.w * sg;
            }
            float4 o = xr[k];
            o.x += a[0];
            o.y += a[1];
            o.z += a[2];
            o.w += a[3];
            xr[k] = v[i] = o;
            ss = cu_ss4(ss, v[i]);
        }
    }
    cu_rmsnorm4_out(v, ss, H, w, eps, ob + (size_t)t * ldo, red);
}

#endif
