/* variants.c - the SIMD kernel variants of this build on this CPU, for the
 * test scripts (tests/run.sh runs the model tests once per variant;
 * tests/isa.sh checks the choice under qemu's CPU models). It asks the
 * library only (kn_variant_*, cpu_features: the one dispatch point and the
 * one CPU check), so a variant added to kernels.c is listed without a change
 * here.
 *
 *   variants       the variants this CPU runs, best first, one per line
 *   variants -c    the variant kn_init picks (DFLASH_KERNELS respected); exit 1
 *                  if DFLASH_KERNELS is set and names another variant
 *   variants -a    every variant built in, "NAME yes|no" (this CPU runs it),
 *                  then "cpu: FEATURES" (cpu_features) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/kernels.h"

int main(int argc, char **argv) {
    const char *mode = argc == 2 ? argv[1] : argc == 1 ? "" : NULL;
    if (!mode || (*mode && strcmp(mode, "-c") != 0 && strcmp(mode, "-a") != 0)) {
        fprintf(stderr, "usage: variants [-c | -a]\n");
        return 2;
    }
    if (!strcmp(mode, "-c")) {
        kn_init();
        const char *env = getenv("DFLASH_KERNELS");
        printf("%s\n", kn_variant());
        if (env && *env && strcmp(env, kn_variant()) != 0) {
            fprintf(stderr, "variants: DFLASH_KERNELS=%s but the variant in use is %s\n", env, kn_variant());
            return 1;
        }
        return 0;
    }
    for (int i = 0; i < kn_variant_count(); i++) {
        const char *name = kn_variant_name(i);
        int ok = kn_variant_supported(name);
        if (*mode) printf("%s %s\n", name, ok ? "yes" : "no");
        else if (ok) printf("%s\n", name);
    }
    if (*mode) printf("cpu: %s\n", cpu_features());
    return 0;
}
