/* kernels_mx4_x86.h - MXFP4 codes into the 8-bit integers the Q8 loops
 * read, with SSSE3's byte table lookup. Included only by the x86 variant
 * files (kernels_avx2.c, kernels_avx512.c), each under its own target
 * pragma (both imply SSSE3), never by code that runs before the CPU is
 * checked. */
#ifndef DFL_KERNELS_MX4_X86_H
#define DFL_KERNELS_MX4_X86_H

#include <immintrin.h>
#include <stdint.h>

#include "kernels_impl.h"

/* q[c * KN_KBLOCK + j] (j < kn, a multiple of 32) = the integer wt_mx4_q of
 * MXFP4 code j of the rows at nib + c * rstep (bytes), c < rc: the 8-bit
 * codes the Q8 loops read. */
static inline __attribute__((always_inline)) void mx4_expand(const int rc, uint8_t *q, const uint8_t *nib, size_t rstep, int kn) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)wt_mx4_q), lo4 = _mm_set1_epi8(15);
    for (int c = 0; c < rc; c++)
        for (int j = 0; j < kn; j += 32) {
            __m128i b = _mm_loadu_si128((const __m128i *)(nib + c * rstep + j / 2));
            __m128i lo = _mm_shuffle_epi8(lut, _mm_and_si128(b, lo4));
            __m128i hi = _mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(b, 4), lo4));
            _mm_storeu_si128((__m128i *)(q + c * KN_KBLOCK + j), _mm_unpacklo_epi8(lo, hi));
            _mm_storeu_si128((__m128i *)(q + c * KN_KBLOCK + j + 16), _mm_unpackhi_epi8(lo, hi));
        }
}

#endif
