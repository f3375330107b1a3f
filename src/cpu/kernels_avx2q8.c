/* kernels_avx2q8.c - the q8 mode (int8 activations, MLX Q8/Q4 weights) of
 * the "avx2" and "avx512" variants: kernels_q8x8.h compiled for AVX2 + FMA
 * + F16C only (vpmaddubsw / vpmaddwd, no AVX-VNNI or AVX-512 instruction:
 * it runs on Haswell). kernels.c calls it only after kn_avx2q8_supported(). */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define Q8X8_VNNI 0
#define Q8X8_FN(n) kn_avx2q8_##n
#include "kernels_q8x8.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int kn_avx2q8_supported(void) { return cpu_has(CPU_AVX2) && cpu_has(CPU_FMA) && cpu_has(CPU_F16C); }

#else
typedef int kn_avx2q8_unused; /* ISO C wants a declaration in every file */
#endif
