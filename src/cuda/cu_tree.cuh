/* cu_tree.cuh - the CUDA backend's device code for tree verification
 * (backend.h's tree rule) and the draft's top-k candidates. Included by
 * cuda_backend.cu after cu_kernels.cuh, whose exactness rule it keeps.
 *
 * A tree batch of T rows (T <= TREE_ANC) below the committed length len:
 *   depth [T]           row t's depth (0: its parent is the last committed row)
 *   anc   [T][TREE_ANC] anc[t][i] = the batch row of row t's ancestor at depth i,
 *                       i = 0..depth[t] (itself at i = depth[t])
 * Row t sits at position len + depth[t]; its K/V are stored at cache row
 * len + t; it sees logical keys 0..len+depth[t]: key j < len at cache row j,
 * key len + i at cache row len + anc[t][i]. Keys keep their logical index,
 * so the chunks of the chunked attention (cu_att_chunk absolute key
 * positions) and every reduction order are those of a decode of the same
 * path: k_att_part_tree / k_att_merge_tree are k_att_part / k_att_merge with
 * only the address of a key and a row's key limit changed, so each value
 * they write for a row is the bits the chain kernels write for a decode row
 * at that position. RoPE goes through the unchanged k_norm_rope_r /
 * k_norm_rope with position base 0 over tables gathered per row
 * (k_tree_rope: table row t = the table's row len + depth[t]) and without
 * their store; k_tree_kv_store then writes the rotated K and V at len + t. */
#ifndef DFL_CU_TREE_CUH
#define DFL_CU_TREE_CUH

enum { TREE_ANC = 64 }; /* the anc table's row stride: the widest tree (BE_KEEP_ROWS) */

/* dst [T][w] = src rows *pos + depth[t] of a RoPE table [.][w] (cos or sin).
 * Grid T, any block. */
__global__ void k_tree_rope(const float *src, int w, const int *pos, const int *depth, float *dst) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int t = blockIdx.x;
    const float *s = src + (size_t)(*pos + depth[t]) * w;
    for (int i = threadIdx.x; i < w; i += blockDim.x) dst[(size_t)t * w + i] = s[i];
}

/* The K/V store k_norm_rope makes, for a tree: key head h of row t (buf
 * [T][ldb] at column k_off + h*hd, rotated) and its value head (v_off +
 * h*hd) into the caches [nkv][n_ctx][hd] at row *pos + t. Grid (T, nkv). */
__global__ void k_tree_kv_store(const float *buf, int ldb, int k_off, int v_off, int hd, const int *pos, float *kc,
                                float *vc, int n_ctx) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int t = blockIdx.x, h = blockIdx.y;
    size_t dst = ((size_t)h * n_ctx + *pos + t) * hd;
    const float *k = buf + (size_t)t * ldb + k_off + (size_t)h * hd, *v = buf + (size_t)t * ldb + v_off + (size_t)h * hd;
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
        kc[dst + i] = k[i];
        vc[dst + i] = v[i];
    }
}

/* tree_commit's compaction: in each of gridDim.y blocks (block b at
 * a + b * stride, and the same in bb when not NULL), row dst0 + i becomes row
 * dst0 + rows[i] for i = 0..n-1, rows of row_words 32-bit words. rows
 * ascend with rows[i] >= i, so walking i upward reads every source before it
 * is overwritten; each thread owns one word column and walks all i itself.
 * Grid (ceil(row_words / blockDim), blocks). */
__global__ void k_rows_compact(uint32_t *a, uint32_t *bb, size_t stride, int row_words, const int *rows, int n,
                               int dst0) {
    cu_pdl_wait();
    cu_pdl_trigger();
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= row_words) return;
    uint32_t *pa = a + (size_t)blockIdx.y * stride, *pb = bb ? bb + (size_t)blockIdx.y * stride : NULL;
    for (int i = 0; i < n; i++) {
        int r = rows[i];
        if (r == i) continue;
        size_t d = (size_t)(dst0 + i) * row_words + c, s = (size_t)(dst0 + r) * row_words + c;
        pa[d] = pa[s];
        if (pb) pb[d] = pb[s];
    }
}

/* k_att_part for rows t0..t0+rows-1 of a tree batch (the contract at
 * k_att_part, with query i's key limit lim_i = len + depth[t] and its key
 * len + a read from cache row len + anc[t][a]). Committed keys (< len, seen
 * by every row) go through shared memory as there; the chunk's tree keys are
 * read per query from the cache. Per query, the four score chains, the
 * chunk's max, expf, the lane sums and the ascending fmaf chain over V are
 * k_att_part's, so po / pml hold the bits a decode row writes. Grid (chunk,
 * K/V head), ATT_PART_THREADS threads, cu_att_smem(HD, rows * G) floats. */
template <int HD>
__global__ void __launch_bounds__(ATT_PART_THREADS)
    k_att_part_tree(const float *q, int ldq, const float *kc, const float *vc, int n_ctx, const int *pos,
                    const int *depth, const int *anc, int t0, int rows, int nq, int nkv, float *po, float2 *pml,
                    int nch, float att_scale) {
    cu_pdl_wait();
    cu_pdl_trigger();
    constexpr int CH = cu_att_chunk(HD), KS = HD + 4, C4 = HD / 4, NQT = ATT_PART_THREADS / CH;
    constexpr int NU = (cu_att_unit(HD) * C4 + ATT_PART_THREADS - 1) / ATT_PART_THREADS;
    extern __shared__ __align__(16) float sm[];
    const int G = nq / nkv, R = rows * G, c = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x;
    const int len = *pos, c0 = c * CH;
    int dmax = 0;
    for (int i = 0; i < rows; i++) dmax = depth[t0 + i] > dmax ? depth[t0 + i] : dmax;
    const int n = len + dmax + 1; /* keys any row of the block sees */
    if (c0 >= n) return;
    float *Qs = sm, *S = Qs + R * HD, *Ks = S + R * CH, *Vs = Ks; /* V replaces K after the scores */
    float2 *ML = (float2 *)(Ks + CH * KS);
    const float *kh = kc + (size_t)kvh * n_ctx * HD, *vh = vc + (size_t)kvh * n_ctx * HD;
    for (int e = tid; e < CH * C4; e += ATT_PART_THREADS) {
        int j = e / C4, i = e % C4, key = c0 + j;
        if (key < len) cu_cp16(Ks + j * KS + 4 * i, kh + (size_t)key * HD + 4 * i);
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
            if (key < len) { /* a committed key: one shared row for every query */
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
            } else if (key < n) { /* a tree key: the query's own ancestor at depth key - len */
#pragma unroll
                for (int b = 0; b < 8; b++) {
                    int i = ib + b * NQT;
                    if (i >= R) continue;
                    int t = t0 + i / G, a = key - len;
                    if (a > depth[t]) continue;
                    const float *kp = kh + (size_t)(len + anc[t * TREE_ANC + a]) * HD;
#pragma unroll 4
                    for (int k4 = 0; k4 < C4; k4++) {
                        float4 kv = *(const float4 *)(kp + 4 * k4);
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
                    int lim = len + depth[t0 + i / G];
                    S[i * CH + j] = key <= lim && key < n ? (d[b][0] + d[b][1]) + (d[b][2] + d[b][3]) : -INFINITY;
                }
            }
        }
    }
    __syncthreads();
    for (int e = tid; e < CH * C4; e += ATT_PART_THREADS) {
        int j = e / C4, i = e % C4, key = c0 + j;
        if (key < len) cu_cp16(Vs + j * KS + 4 * i, vh + (size_t)key * HD + 4 * i);
    }
    cu_cp_commit();
    /* softmax of the chunk: warp w, queries i = w, w + 8, ... (k_att_part's) */
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
    /* O_c: thread (column cc, queries r = tid / C4 + (256 / C4) u), each query's
     * fmaf chain over the chunk's keys it sees in ascending key order */
    {
        const int cc = tid % C4;
        float4 acc[NU];
        int jm[NU], tu[NU];
#pragma unroll
        for (int u = 0; u < NU; u++) {
            acc[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            int r = tid / C4 + (ATT_PART_THREADS / C4) * u;
            tu[u] = r < R ? t0 + r / G : 0;
            int lim = r < R ? len + depth[tu[u]] : -1;
            int last = lim < n - 1 ? lim : n - 1;
            jm[u] = last - c0 + 1 < CH ? last - c0 + 1 : CH; /* keys 0..jm-1 of the chunk */
        }
        int jend = 0;
#pragma unroll
        for (int u = 0; u < NU; u++) jend = jm[u] > jend ? jm[u] : jend;
        for (int j = 0; j < jend; j++) {
            const int key = c0 + j;
            if (key < len) {
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
            } else {
#pragma unroll
                for (int u = 0; u < NU; u++) {
                    if (j < jm[u]) {
                        const float *vp = vh + (size_t)(len + anc[tu[u] * TREE_ANC + key - len]) * HD;
                        float4 v = *(const float4 *)(vp + 4 * cc);
                        float p = S[(tid / C4 + (ATT_PART_THREADS / C4) * u) * CH + j];
                        acc[u].x = fmaf(p, v.x, acc[u].x);
                        acc[u].y = fmaf(p, v.y, acc[u].y);
                        acc[u].z = fmaf(p, v.z, acc[u].z);
                        acc[u].w = fmaf(p, v.w, acc[u].w);
                    }
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

/* k_att_merge for tree rows t0..: query (t0 + blockIdx.x, blockIdx.y) with
 * key limit *pos + depth[t], chunks 0..lim/CH in ascending order, the same
 * chains as k_att_merge (no window: trees are refused with one). Grid
 * (rows, nq), HD threads. */
template <int HD>
__global__ void __launch_bounds__(HD) k_att_merge_tree(const int *pos, const int *depth, int t0, int nq,
                                                       const float *po, const float2 *pml, int nch,
                                                       __nv_bfloat16 *out, int ldo, const float *sinks) {
    cu_pdl_wait();
    cu_pdl_trigger();
    constexpr int CH = cu_att_chunk(HD);
    __shared__ float2 mls[ATT_MERGE_TILE];
    __shared__ float mred[HD / 32 > 0 ? HD / 32 : 1];
    int tl = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
    int lim = *pos + depth[t0 + tl];
    int ncr = lim / CH + 1, clo = 0; /* chunks clo..ncr-1 */
    size_t slot = (size_t)tl * nq + h;
    const float2 *ml = pml + slot * nch;
    const float *o = po + slot * nch * HD + d;
    float M = -INFINITY;
    for (int c = clo + d; c < ncr; c += HD) M = fmaxf(M, ml[c].x);
    constexpr unsigned WM = HD >= 32 ? 0xffffffffu : (1u << HD) - 1u;
#pragma unroll
    for (int k = (HD >= 32 ? 32 : HD) / 2; k > 0; k >>= 1) M = fmaxf(M, __shfl_xor_sync(WM, M, k));
    if constexpr (HD >= 32) {
        if ((d & 31) == 0) mred[d >> 5] = M;
        __syncthreads();
        for (int w = 0; w < HD / 32; w++) M = fmaxf(M, mred[w]);
    }
    const float sk = sinks ? sinks[h] : -INFINITY;
    if (sinks) M = fmaxf(M, sk);
    float L = 0.0f, acc = 0.0f;
    for (int c0 = clo; c0 < ncr; c0 += ATT_MERGE_TILE) {
        int nt = ncr - c0 < ATT_MERGE_TILE ? ncr - c0 : ATT_MERGE_TILE;
        __syncthreads();
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

/* ---- the draft's top-k candidates (be_draft_block.top_k) ---------------------
 * Per slot (block): the K best of the scored logits - ids 0..nv-1 of lg
 * [ns][nv], then the extra ids' xl [ns][nx] - in the total order (logit
 * descending, then scan index ascending: j < nv is id j, nv + e the e-th
 * extra id), the CPU's order (its insertion keeps the earlier of equal
 * logits first). Each thread ranks its strided share; the shares are merged
 * pairwise in a fixed tree. The K best under a total order are one set in
 * one order, whatever the split, so the ids are exactly the CPU's on the
 * same logits. NaN logits are not ranked. Log-probabilities: v - (M +
 * logf(sum expf(l - M))) over every scored logit, M the largest; the sum in
 * a fixed order (per thread ascending, then a fixed tree), so repeatable,
 * though not the CPU's sequential sum (a few ulp apart). */
enum { TOPK_THREADS = 256, TOPK_MAX = 16 };

__device__ __forceinline__ bool cu_topk_before(float va, int ia, float vb, int ib) {
    return va > vb || (va == vb && ia < ib);
}

/* Grid ns, TOPK_THREADS threads; K <= TOPK_MAX. top_ids / top_lp [ns][K]
 * (-1 / -inf past the ranked ones). */
__global__ void __launch_bounds__(TOPK_THREADS) k_draft_topk(const float *lg, int nv, const float *xl, int nx,
                                                             const int32_t *extra, int K, int32_t *top_ids,
                                                             float *top_lp) {
    cu_pdl_wait();
    cu_pdl_trigger();
    __shared__ float sv[TOPK_THREADS][TOPK_MAX];
    __shared__ int si[TOPK_THREADS][TOPK_MAX];
    __shared__ int sn[TOPK_THREADS];
    __shared__ float red[TOPK_THREADS];
    const int row = blockIdx.x, tid = threadIdx.x, na = nv + nx;
    const float *l = lg + (size_t)row * nv, *x = xl + (size_t)row * nx;
    float v[TOPK_MAX];
    int ix[TOPK_MAX], n = 0;
    for (int j = tid; j < na; j += TOPK_THREADS) {
        float val = j < nv ? l[j] : x[j - nv];
        if (val != val || (n == K && !(val > v[K - 1]))) continue; /* a later equal logit ranks below */
        int at = n < K ? n++ : K - 1;
        while (at > 0 && !(v[at - 1] >= val)) {
            v[at] = v[at - 1];
            ix[at] = ix[at - 1];
            at--;
        }
        v[at] = val;
        ix[at] = j;
    }
    for (int k = 0; k < n; k++) sv[tid][k] = v[k], si[tid][k] = ix[k];
    sn[tid] = n;
    for (int s = TOPK_THREADS / 2; s > 0; s >>= 1) {
        __syncthreads();
        if (tid < s) { /* lists tid and tid + s -> list tid */
            int nA = sn[tid], nB = sn[tid + s], a = 0, b = 0, m = 0;
            while (m < K && (a < nA || b < nB)) {
                bool ta = b >= nB || (a < nA && cu_topk_before(sv[tid][a], si[tid][a], sv[tid + s][b], si[tid + s][b]));
                if (ta) v[m] = sv[tid][a], ix[m] = si[tid][a], a++;
                else v[m] = sv[tid + s][b], ix[m] = si[tid + s][b], b++;
                m++;
            }
            for (int k = 0; k < m; k++) sv[tid][k] = v[k], si[tid][k] = ix[k];
            sn[tid] = m;
        }
    }
    __syncthreads();
    const float M = sn[0] > 0 ? sv[0][0] : -INFINITY;
    float part = 0.0f;
    for (int j = tid; j < na; j += TOPK_THREADS) part += expf((j < nv ? l[j] : x[j - nv]) - M);
    red[tid] = part;
    for (int s = TOPK_THREADS / 2; s > 0; s >>= 1) {
        __syncthreads();
        if (tid < s) red[tid] += red[tid + s];
    }
    __syncthreads();
    if (tid < K) {
        float lz = M + logf(red[0]);
        int ok = tid < sn[0], j = ok ? si[0][tid] : 0;
        top_ids[(size_t)row * K + tid] = !ok ? -1 : j < nv ? j : extra[j - nv];
        top_lp[(size_t)row * K + tid] = ok ? sv[0][tid] - lz : -INFINITY;
    }
}

#endif
