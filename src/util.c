/* util.c - see util.h. */
#define _POSIX_C_SOURCE 200809L
#include "util.h"

#include <errno.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char err_buf[1024];

void dfl_seterr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
}

void dfl_preferr(const char *fmt, ...) {
    char old[sizeof err_buf];
    memcpy(old, err_buf, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n + 2 >= sizeof err_buf) return;
    size_t k = (size_t)n, room = sizeof err_buf - k - 3;
    size_t len = strlen(old) < room ? strlen(old) : room;
    memcpy(err_buf + k, ": ", 2);
    memcpy(err_buf + k + 2, old, len);
    err_buf[k + 2 + len] = 0;
}

const char *dfl_lasterr(void) { return err_buf[0] ? err_buf : "unknown error"; }

static void oom(size_t n) {
    fprintf(stderr, "dflash: out of memory allocating %zu bytes\n", n);
    abort();
}

void *dfl_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *dfl_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *dfl_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

void *dfl_malloc64(size_t n) {
    size_t r = (n + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, r ? r : 64);
    if (!p) oom(n);
    return p;
}

char *dfl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = dfl_malloc(n);
    memcpy(p, s, n);
    return p;
}

/* ---- dfl_buf ---------------------------------------------------------------- */

/* Room for n more bytes and the NUL; 0, or -1 + error and failed. */
static int buf_grow(dfl_buf *b, size_t n) {
    if (b->failed) return -1;
    if (n < b->cap - b->n) return 0; /* b->n < b->cap, or both 0: no wrap */
    size_t cap = n > SIZE_MAX / 4 - b->n ? 0 : 2 * (b->n + n + 1) + 64;
    char *s = cap ? realloc(b->s, cap) : NULL;
    if (!s) {
        dfl_seterr("out of memory growing a buffer of %zu bytes by %zu", b->n, n);
        b->failed = 1;
        return -1;
    }
    b->s = s;
    b->cap = cap;
    return 0;
}

int dfl_buf_add(dfl_buf *b, const void *p, size_t n) {
    if (buf_grow(b, n) != 0) return -1;
    if (n) memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
    return 0;
}

int dfl_buf_str(dfl_buf *b, const char *s) { return dfl_buf_add(b, s, strlen(s)); }

int dfl_buf_char(dfl_buf *b, char c) { return dfl_buf_add(b, &c, 1); }

int dfl_buf_printf(dfl_buf *b, const char *fmt, ...) {
    if (b->failed) return -1;
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        dfl_seterr("dfl_buf_printf: bad format '%s'", fmt);
        b->failed = 1;
        return -1;
    }
    if ((size_t)n < sizeof tmp) return dfl_buf_add(b, tmp, (size_t)n);
    if (buf_grow(b, (size_t)n) != 0) return -1; /* too long for tmp: format in place */
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)n;
    return 0;
}

void dfl_buf_reset(dfl_buf *b) {
    b->n = 0;
    b->failed = 0;
    if (b->s) b->s[0] = 0;
}

char *dfl_buf_take(dfl_buf *b) {
    if (!b->s) dfl_buf_add(b, "", 0);
    char *s = b->failed ? NULL : b->s;
    if (!s) free(b->s);
    *b = (dfl_buf){0};
    return s;
}

void dfl_buf_free(dfl_buf *b) {
    free(b->s);
    *b = (dfl_buf){0};
}

/* Open a regular file for reading. O_NONBLOCK: opening a FIFO must not wait
 * for a writer; anything but a regular file (FIFO, device, directory) is
 * refused before a byte is read. */
static int open_regular(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        dfl_seterr("%s: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        dfl_seterr("%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        dfl_seterr("%s: not a regular file (%s)", path,
                   S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket");
        close(fd);
        return -1;
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

char *dfl_read_file(const char *path, size_t *len) {
    int fd = open_regular(path);
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        if (fd >= 0) {
            dfl_seterr("%s: %s", path, strerror(errno));
            close(fd);
        }
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = dfl_malloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = dfl_realloc(buf, cap *= 2);
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        dfl_seterr("%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

int dfl_map_file(const char *path, dfl_map *m) {
    m->data = NULL;
    m->size = 0;
    int fd = open_regular(path);
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        dfl_seterr("%s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    if (st.st_size == 0) { /* mmap of 0 bytes fails; an empty map is valid */
        close(fd);
        return 0;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        dfl_seterr("%s: mmap: %s", path, strerror(errno));
        return -1;
    }
    m->data = p;
    m->size = (size_t)st.st_size;
    return 0;
}

void dfl_map_release(const void *p, size_t n) {
    long ps = sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)p, b = a + n, pg = ps > 0 ? (uintptr_t)ps : 4096;
    a = (a + pg - 1) / pg * pg; /* whole pages inside the range only */
    b = b / pg * pg;
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED);
}

void dfl_unmap(dfl_map *m) {
    if (m->data) munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

char *dfl_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *p = dfl_malloc(a + b + 2);
    memcpy(p, dir, a);
    size_t k = a;
    if (a && dir[a - 1] != '/') p[k++] = '/';
    memcpy(p + k, name, b + 1);
    return p;
}

int dfl_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

int dfl_same_file(const char *a, const char *b) {
    struct stat x, y;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

FILE *dfl_create_tmp(const char *path, char **tmp) {
    static const char sfx[] = ".tmp-dflash";
    size_t n = strlen(path);
    *tmp = dfl_malloc(n + sizeof sfx);
    memcpy(*tmp, path, n);
    memcpy(*tmp + n, sfx, sizeof sfx);
    unlink(*tmp); /* a leftover (or a symlink planted there) is replaced, never written through */
    int fd = open(*tmp, O_WRONLY | O_CREAT | O_EXCL | O_TRUNC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        dfl_seterr("%s: cannot create: %s", *tmp, strerror(errno));
        if (fd >= 0) close(fd);
        free(*tmp);
        *tmp = NULL;
    }
    return f;
}

int dfl_commit_tmp(FILE *f, char *tmp, const char *path, int ok) {
    int e = ok ? 0 : errno; /* the failed write's, when ok was computed from it */
    if (fflush(f) != 0 && ok) ok = 0, e = errno;
    if (fclose(f) != 0 && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path) != 0) {
        dfl_seterr("%s: cannot rename %s to it: %s", path, tmp, strerror(errno));
        unlink(tmp);
        free(tmp);
        return -1;
    }
    if (!ok) {
        if (e) dfl_seterr("%s: write error: %s", path, strerror(e));
        else dfl_seterr("%s: write error", path);
        unlink(tmp);
    }
    free(tmp);
    return ok ? 0 : -1;
}

/* ---- staged output directories ------------------------------------------ */

static void stage_free(dfl_stage *s) {
    for (int i = 0; i < s->n_files; i++) free(s->files[i]);
    for (int i = 0; i < s->n_drop; i++) free(s->drop[i]);
    free(s->files);
    free(s->drop);
    free(s->stage);
    free(s->dir);
    memset(s, 0, sizeof *s);
}

int dfl_stage_open(dfl_stage *s, const char *dir) {
    memset(s, 0, sizeof *s);
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "out/" -> "out": the sibling is "out.tmp-dflash-..." */
    struct stat st;
    char *d = dfl_malloc(n + 1);
    memcpy(d, dir, n);
    d[n] = 0;
    if (stat(d, &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
            dfl_seterr("%s exists and is not a directory", d);
            free(d);
            return -1;
        }
    } else if (errno != ENOENT) {
        dfl_seterr("%s: %s", d, strerror(errno));
        free(d);
        return -1;
    } else {
        s->fresh = 1;
    }
    static int counter;
    size_t cap = n + 64;
    char *p = dfl_malloc(cap);
    for (int tries = 0;; tries++) {
        int k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        if (s->fresh) snprintf(p, cap, "%s.tmp-dflash-%ld-%d", d, (long)getpid(), k);
        else snprintf(p, cap, "%s/tmp-dflash-%ld-%d", d, (long)getpid(), k);
        if (mkdir(p, 0777) == 0) break;
        if (errno != EEXIST || tries > 100) {
            if (s->fresh) dfl_seterr("%s: cannot create directory: %s", d, strerror(errno));
            else dfl_seterr("%s: cannot write into it: %s", d, strerror(errno));
            free(p);
            free(d);
            return -1;
        }
    }
    s->dir = d;
    s->stage = p;
    return 0;
}

char *dfl_stage_file(dfl_stage *s, const char *name) {
    s->files = dfl_realloc(s->files, sizeof(char *) * (size_t)(s->n_files + 1));
    s->files[s->n_files++] = dfl_strdup(name);
    return dfl_path_join(s->stage, name);
}

void dfl_stage_drop(dfl_stage *s, const char *name) {
    s->drop = dfl_realloc(s->drop, sizeof(char *) * (size_t)(s->n_drop + 1));
    s->drop[s->n_drop++] = dfl_strdup(name);
}

static void stage_clean(dfl_stage *s) {
    if (!s->stage) return;
    for (int i = 0; i < s->n_files; i++) {
        char *p = dfl_path_join(s->stage, s->files[i]);
        size_t n = strlen(p);
        char *t = dfl_malloc(n + sizeof ".tmp-dflash");
        memcpy(t, p, n);
        memcpy(t + n, ".tmp-dflash", sizeof ".tmp-dflash");
        unlink(p);
        unlink(t); /* a writer's own temporary (util.h dfl_create_tmp), if it was left */
        free(t);
        free(p);
    }
    rmdir(s->stage);
    stage_free(s);
}

void dfl_stage_abort(dfl_stage *s) {
    if (!s->stage) return;
    dfl_preferr("%s %s", s->dir, s->fresh ? "not created" : "left as it was");
    stage_clean(s);
}

int dfl_stage_commit(dfl_stage *s) {
    int rc = 0;
    if (s->fresh) {
        if (rename(s->stage, s->dir) != 0) {
            dfl_seterr("%s: cannot rename %s to it: %s", s->dir, s->stage, strerror(errno));
            stage_clean(s);
            return -1;
        }
        stage_free(s);
        return 0;
    }
    for (int i = 0; i < s->n_files && rc == 0; i++) {
        char *a = dfl_path_join(s->stage, s->files[i]), *b = dfl_path_join(s->dir, s->files[i]);
        if (rename(a, b) != 0) {
            dfl_seterr("%s: cannot rename %s to it: %s", b, a, strerror(errno));
            rc = -1;
        }
        free(a);
        free(b);
    }
    for (int i = 0; i < s->n_drop && rc == 0; i++) {
        char *p = dfl_path_join(s->dir, s->drop[i]);
        if (unlink(p) != 0 && errno != ENOENT) {
            dfl_seterr("%s: cannot remove the stale file: %s", p, strerror(errno));
            rc = -1;
        }
        free(p);
    }
    stage_clean(s); /* removes what a failed rename left, and the staging directory */
    return rc;
}

double dfl_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

float dfl_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: normalise */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) {
                man <<= 1;
                exp--;
            }
            man &= 0x3ff;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    union { uint32_t u; float f; } v = {u};
    return v.f;
}

uint16_t dfl_f32_to_bf16(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40); /* NaN */
    uint32_t r = v.u + 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)(r >> 16);
}

uint16_t dfl_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = {f};
    uint32_t u = v.u, sign = (u >> 16) & 0x8000u;
    int32_t exp = (int32_t)((u >> 23) & 0xff);
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int32_t e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
    return (uint16_t)h;
}

long dfl_utf8_invalid_at(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        unsigned cp;
        if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            cp = c & 0x07;
        } else {
            return (long)i;
        }
        if (i + len > n) return (long)i;
        for (size_t k = 1; k < len; k++) {
            if ((s[i + k] & 0xc0) != 0x80) return (long)i;
            cp = (cp << 6) | (s[i + k] & 0x3f);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return (long)i;
        i += len;
    }
    return -1;
}
