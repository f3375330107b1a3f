/* cpu.h - what this CPU can run, found once. Prefix: cpu_.
 *
 * The one place that asks the processor (CPUID and XGETBV on x86-64, the
 * kernel's hwcaps on Linux/arm64, sysctl on macOS/arm64). The SIMD choice
 * itself is made in one place too: kn_init (kernels.c) picks a variant from
 * these flags and DFLASH_KERNELS, and every other SIMD user (attention,
 * sampling) follows kn_isa(). Nothing compiled for an instruction set may
 * run before that check has said yes. */
#ifndef DFL_CPU_H
#define DFL_CPU_H

typedef enum {
    CPU_AVX2 = 0,   /* AVX2 with the OS saving YMM state */
    CPU_FMA,
    CPU_F16C,
    CPU_AVX512,     /* AVX-512 F, BW, VL, DQ with ZMM/opmask state saved */
    CPU_AVX512VNNI, /* AVX512_VNNI (vpdpbusd on zmm) */
    CPU_AVX512BF16, /* AVX512_BF16 (vdpbf16ps) */
    CPU_AVXVNNI,    /* AVX-VNNI (VEX vpdpbusd on ymm: Alder Lake, Zen 5) */
    CPU_NEON,       /* arm64 Advanced SIMD (always there on arm64) */
    CPU_DOTPROD,    /* arm64 FEAT_DotProd (sdot/udot) */
    CPU_I8MM,       /* arm64 FEAT_I8MM (usdot, smmla) */
    CPU_N_FEATURES
} cpu_feature;

/* 1 if the CPU and OS support f; detected on the first call (thread-safe). */
int cpu_has(cpu_feature f);
const char *cpu_feature_name(cpu_feature f);
/* The detected features as "avx2 fma f16c ..." (static buffer). */
const char *cpu_features(void);

#endif
