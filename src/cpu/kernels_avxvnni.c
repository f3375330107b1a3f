/* kernels_avxvnni.c - the q8 mode (int8 activations, MLX Q8/Q4 weights) of
 * the "avxvnni" variant: kernels_q8x8.h compiled for AVX2 + FMA + F16C +
 * AVX-VNNI (the VEX-encoded vpdpbusd on ymm: Alder Lake and later, Zen 5).
 * kernels.c calls it only after kn_avxvnni_supported(). */
#if defined(__x86_64__)

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avxvnni")
#endif

#define Q8X8_VNNI 1
#define Q8X8_FN(n) kn_avxvnni_##n
#include "kernels_q8x8.h"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

int kn_avxvnni_supported(void) {
    return cpu_has(CPU_AVX2) && cpu_has(CPU_FMA) && cpu_has(CPU_F16C) && cpu_has(CPU_AVXVNNI);
}

#else
typedef int kn_avxvnni_unused; /* ISO C wants a declaration in every file */
#endif
