/* fuzz_common.h - shared by the libFuzzer harnesses in tests/fuzz/: a
 * per-process scratch directory for inputs that must be files, removed at
 * exit. Built and run by `make fuzz` (tests/fuzz/run.sh). */
#ifndef DFL_FUZZ_COMMON_H
#define DFL_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir[64];

static void fz_cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", fz_dir);
    if (fz_dir[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", fz_dir);
}

static const char *fz_scratch(void) {
    if (!fz_dir[0]) {
        snprintf(fz_dir, sizeof fz_dir, "/tmp/dflash-fuzz-XXXXXX");
        if (!mkdtemp(fz_dir)) abort();
        atexit(fz_cleanup);
    }
    return fz_dir;
}

/* Write data to SCRATCH/name (or remove it when data is NULL); the path. */
static const char *fz_file(const char *name, const uint8_t *data, size_t n) {
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", fz_scratch(), name);
    unlink(path[k]);
    if (!data) return path[k];
    FILE *f = fopen(path[k], "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) abort();
    return path[k];
}

#endif
