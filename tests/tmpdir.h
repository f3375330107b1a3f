/* tmpdir.h - a test program's private directory for the files it writes
 * (test_badfiles, test_model, test_gguf, test_dflash). main() calls
 * tmpdir_make("NAME") first (/tmp/dflash-NAME-XXXXXX; non-zero: give up) and
 * tmpdir_remove() before CHECK_DONE. Static inline: a test need not use
 * every helper. */
#ifndef DFL_TMPDIR_H
#define DFL_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char tmpdir[256];

static inline int tmpdir_make(const char *name) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dflash-%s-XXXXXX", name);
    return mkdtemp(tmpdir) ? 0 : -1;
}

static inline void tmpdir_remove(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmpdir);
}

/* tmpdir/a or tmpdir/a/b (b NULL: the first); four results live at a time */
static inline char *path(const char *a, const char *b) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    if (b) snprintf(buf[k], sizeof buf[k], "%s/%s/%s", tmpdir, a, b);
    else snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, a);
    return buf[k];
}

/* p holding data[0..n); a failure ends the program */
static inline void write_file(const char *p, const void *data, size_t n) {
    FILE *f = fopen(p, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", p);
        exit(1);
    }
}

#endif
