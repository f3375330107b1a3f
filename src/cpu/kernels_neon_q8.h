/* kernels_neon_q8.h - the q8-mode row loop of kernels_neon.c, included there
 * once per integer-dot flavour (under that flavour's target pragma), with
 *   Q8_NAME           the function's name
 *   DOT16(acc, w, x)  int32x4 acc + the 16 products of weight vector w and
 *                     s8 vector x, each lane a sum of 4 of them (exact)
 *   WQ4(v)            a uint8x16 of Q4 nibbles (0..15) or MXFP4 integers
 *                     (0..24) as DOT16's w type
 *   WQ8(p)            16 Q8 weight bytes at p as DOT16's w type
 *   Q8_CORR           1 if WQ8 gives q - 128: then I += 128 * S (S = the
 *                     piece's sum of xq)
 * and #undefs them. Not a header of its own: nothing else includes it.
 *
 * Rows [r0, r1) in tiles of RC rows (the last tile repeats its last row;
 * only real rows are stored); per K block the tile's scales and biases are
 * transposed once (lanes = rows), then every row of x runs over the block:
 * per piece (a block of 32 columns, or for Q8 with groups of 16 the half of
 * one) the exact I of each row, then the float steps of kernels.h. */
static void Q8_NAME(const kn_job *job, int r0, int r1) {
    const wt_weight *w = job->w;
    const kn_qx *qx = job->qx;
    int cols = w->cols, g = w->group_size, T = job->T, q4 = kn_is_nib(w), mx = w->dtype == WT_MXFP4;
    const uint8x16_t lut = vld1q_u8(wt_mx4_q); /* MXFP4: code -> integer */
    int nb = cols / KN_QBLOCK, ng = cols / g, step = g == 16 ? 16 : KN_QBLOCK;
    size_t rb = q4 ? (size_t)cols / 2 : (size_t)cols;
    float32x4_t sT[MAXG], bT[MAXG];
    _Alignas(16) float acc[KN_TBLOCK][RC];
    for (int t0 = 0; t0 < T; t0 += KN_TBLOCK) {
        int tn = T - t0 < KN_TBLOCK ? T - t0 : KN_TBLOCK;
        for (int r = r0; r < r1; r += RC) {
            int rc = r1 - r < RC ? r1 - r : RC, rows[RC];
            const uint8_t *p[RC];
            for (int c = 0; c < RC; c++) {
                rows[c] = r + (c < rc ? c : rc - 1);
                p[c] = (const uint8_t *)w->data + (size_t)rows[c] * rb;
            }
            memset(acc, 0, sizeof acc[0] * (size_t)tn);
            for (int k0 = 0; k0 < cols; k0 += KN_KBLOCK) {
                int kn = cols - k0 < KN_KBLOCK ? cols - k0 : KN_KBLOCK, gi0 = k0 / g;
                load_sbT(w, rows, gi0, kn / g, sT, bT);
                for (int t = t0; t < t0 + tn; t++) {
                    const int8_t *xq = qx->q + (size_t)t * qx->ldq;
                    const float *d = qx->d + (size_t)t * nb, *xs = qx->xs + (size_t)t * ng;
                    float32x4_t fa = vld1q_f32(acc[t - t0]);
                    for (int j = k0; j < k0 + kn; j += step) {
                        int32x4_t ia[RC];
#pragma GCC unroll 4
                        for (int c = 0; c < RC; c++) ia[c] = vdupq_n_s32(0);
                        if (q4) { /* x: [16 even columns, 16 odd ones] */
                            int8x16_t xe = vld1q_s8(xq + j), xo = vld1q_s8(xq + j + 16);
#pragma GCC unroll 4
                            for (int c = 0; c < RC; c++) {
                                uint8x16_t b = vld1q_u8(p[c] + j / 2);
                                uint8x16_t lo = vandq_u8(b, vdupq_n_u8(15)), hi = vshrq_n_u8(b, 4);
                                if (mx) lo = vqtbl1q_u8(lut, lo), hi = vqtbl1q_u8(lut, hi);
                                ia[c] = DOT16(ia[c], WQ4(lo), xe);
                                ia[c] = DOT16(ia[c], WQ4(hi), xo);
                            }
                        } else {
                            for (int h = 0; h < step; h += 16) {
                                int8x16_t xv = vld1q_s8(xq + j + h);
#pragma GCC unroll 4
                                for (int c = 0; c < RC; c++) ia[c] = DOT16(ia[c], WQ8(p[c] + j + h), xv);
                            }
                        }
                        int32x4_t I = hsum4(ia);
#if Q8_CORR
                        if (!q4) {
                            int32_t S = vaddlvq_s8(vld1q_s8(xq + j));
                            if (step == 32) S += vaddlvq_s8(vld1q_s8(xq + j + 16));
                            I = vaddq_s32(I, vdupq_n_s32(128 * S));
                        }
#endif
                        int gl = j / g - gi0;
                        fa = vfmaq_f32(fa, vcvtq_f32_s32(I), vmulq_n_f32(sT[gl], d[j / KN_QBLOCK]));
                        if ((j + step) % g == 0) fa = vfmaq_n_f32(fa, bT[gl], xs[j / g]);
                    }
                    vst1q_f32(acc[t - t0], fa);
                }
            }
            for (int t = 0; t < tn; t++)
                for (int c = 0; c < rc; c++) job->y[(size_t)(t0 + t) * w->rows + r + c] = acc[t][c];
        }
    }
}
#undef Q8_NAME
#undef DOT16
#undef WQ4
#undef WQ8
#undef Q8_CORR
