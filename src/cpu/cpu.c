/* cpu.c - see cpu.h. */
#include "cpu.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#elif defined(__aarch64__) && defined(__APPLE__)
#include <sys/sysctl.h>
#endif

static int has[CPU_N_FEATURES];
static char names[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static const char *const feature_names[CPU_N_FEATURES] = {
    [CPU_AVX2] = "avx2",       [CPU_FMA] = "fma",         [CPU_F16C] = "f16c",
    [CPU_AVX512] = "avx512",   [CPU_AVX512VNNI] = "avx512vnni", [CPU_AVX512BF16] = "avx512bf16",
    [CPU_AVXVNNI] = "avxvnni", [CPU_NEON] = "neon",       [CPU_DOTPROD] = "dotprod",
    [CPU_I8MM] = "i8mm",
};

#if defined(__x86_64__)
/* XCR0: which register states the OS saves on a context switch. */
static unsigned long long xgetbv0(void) {
    unsigned lo, hi;
    __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

static void detect_x86(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    int osxsave = (c & bit_OSXSAVE) != 0, avx = (c & bit_AVX) != 0;
    int fma = (c & bit_FMA) != 0, f16c = (c & bit_F16C) != 0;
    unsigned long long xcr0 = osxsave ? xgetbv0() : 0;
    int ymm = (xcr0 & 0x6) == 0x6, zmm = ymm && (xcr0 & 0xe0) == 0xe0;
    unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0, a71 = 0, b71, c71, d71;
    if (__get_cpuid_max(0, NULL) >= 7) {
        __cpuid_count(7, 0, a7, b7, c7, d7);
        if (a7 >= 1) __cpuid_count(7, 1, a71, b71, c71, d71); /* a7: the highest sub-leaf */
    }
    int vex = avx && ymm;
    has[CPU_AVX2] = vex && (b7 & bit_AVX2) != 0;
    has[CPU_FMA] = vex && fma;
    has[CPU_F16C] = vex && f16c;
    /* F (b16), DQ (b17), BW (b30), VL (b31) */
    has[CPU_AVX512] = vex && zmm && (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 30)) && (b7 & (1u << 31));
    has[CPU_AVX512VNNI] = has[CPU_AVX512] && (c7 & (1u << 11));
    has[CPU_AVX512BF16] = has[CPU_AVX512] && (a71 & (1u << 5));
    has[CPU_AVXVNNI] = has[CPU_AVX2] && (a71 & (1u << 4));
}
#endif

#if defined(__aarch64__)
static void detect_arm64(void) {
    has[CPU_NEON] = 1; /* Advanced SIMD is architectural on AArch64 */
#if defined(__linux__)
    unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    has[CPU_DOTPROD] = (hw & (1ul << 20)) != 0; /* HWCAP_ASIMDDP */
    has[CPU_I8MM] = (hw2 & (1ul << 13)) != 0;   /* HWCAP2_I8MM */
#elif defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_DotProd", &v, &n, NULL, 0) == 0) has[CPU_DOTPROD] = v != 0;
    v = 0, n = sizeof v;
    if (sysctlbyname("hw.optional.arm.FEAT_I8MM", &v, &n, NULL, 0) == 0) has[CPU_I8MM] = v != 0;
#endif
}
#endif

static void detect(void) {
#if defined(__x86_64__)
    detect_x86();
#elif defined(__aarch64__)
    detect_arm64();
#endif
    size_t off = 0;
    for (int f = 0; f < CPU_N_FEATURES; f++)
        if (has[f]) off += (size_t)snprintf(names + off, sizeof names - off, "%s%s", off ? " " : "", feature_names[f]);
    if (!off) snprintf(names, sizeof names, "none");
}

int cpu_has(cpu_feature f) {
    pthread_once(&once, detect);
    return f >= 0 && f < CPU_N_FEATURES && has[f];
}

const char *cpu_feature_name(cpu_feature f) { return f >= 0 && f < CPU_N_FEATURES ? feature_names[f] : "?"; }

const char *cpu_features(void) {
    pthread_once(&once, detect);
    return names;
}
