/* util.h - errors, allocation, files. Prefix: dfl_ (shared helpers).
 *
 * Error convention used by every module: a function that fails returns NULL
 * or a negative number after calling dfl_seterr() with a one-line message
 * that names the culprit (file, tensor, field, value). The caller either
 * passes the failure up unchanged or adds context with dfl_preferr(). The
 * message lives in a thread-local buffer until the next dfl_seterr(). */
#ifndef DFL_UTIL_H
#define DFL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if defined(__GNUC__)
#define DFL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DFL_PRINTF(a, b)
#endif

void dfl_seterr(const char *fmt, ...) DFL_PRINTF(1, 2);
/* Prepend "prefix: " to the current error message. */
void dfl_preferr(const char *fmt, ...) DFL_PRINTF(1, 2);
const char *dfl_lasterr(void);

/* Allocation that aborts with a message on out-of-memory (never returns NULL
 * for n > 0). Used only for sizes already validated at load time. */
void *dfl_malloc(size_t n);
void *dfl_calloc(size_t n, size_t size);
void *dfl_realloc(void *p, size_t n);
char *dfl_strdup(const char *s);
/* 64-byte aligned (kernels read activations with aligned vector loads);
 * release with free(). */
void *dfl_malloc64(size_t n);

/* Growable byte buffer (text being written: a prompt, a grammar, a JSON
 * reply). Start from {0}. Invariants: s[0..n) holds what was added and
 * s[n] == 0 once anything was (s is NULL before: dfl_buf_take gives "");
 * n < cap. Out of memory does not abort: the append that cannot grow the
 * buffer calls dfl_seterr() ("out of memory ...") and sets failed; from
 * then on the buffer keeps what it held and ignores appends, so a writer
 * appends freely and checks failed (or dfl_buf_take's NULL) once, at the
 * end. Each append returns 0, or -1 while failed. */
typedef struct {
    char *s;
    size_t n, cap;
    int failed;
} dfl_buf;
int dfl_buf_add(dfl_buf *b, const void *p, size_t n); /* the n bytes at p (NUL bytes too) */
int dfl_buf_str(dfl_buf *b, const char *s);
int dfl_buf_char(dfl_buf *b, char c);
int dfl_buf_printf(dfl_buf *b, const char *fmt, ...) DFL_PRINTF(2, 3);
/* Empty it (n = 0, failed cleared), keeping the memory. */
void dfl_buf_reset(dfl_buf *b);
/* The contents, malloc'd and NUL-terminated ("" when nothing was added),
 * for the caller to free; NULL (error set) when failed. The buffer is left
 * empty ({0}) either way. */
char *dfl_buf_take(dfl_buf *b);
void dfl_buf_free(dfl_buf *b);

/* Read a whole file into a NUL-terminated buffer. NULL + error on failure. */
char *dfl_read_file(const char *path, size_t *len);

/* Read-only memory map of a whole file. */
typedef struct {
    const uint8_t *data;
    size_t size;
} dfl_map;
int dfl_map_file(const char *path, dfl_map *m);
void dfl_unmap(dfl_map *m);
/* Bytes [p, p + n) of a map that will not be read again (a load copied
 * them): their whole pages leave the process's resident set (the page
 * cache keeps them until the kernel wants the room; a later read would
 * fault them back in). A hint: nothing fails. */
void dfl_map_release(const void *p, size_t n);

/* "dir/name" in a malloc'd string. */
char *dfl_path_join(const char *dir, const char *name);
int dfl_file_exists(const char *path);

/* 1 if a and b name the same file or directory (same device and inode, so
 * symlinks, "..", relative paths are seen through), 0 if not or if either
 * does not exist. */
int dfl_same_file(const char *a, const char *b);

/* Writing a file without ever leaving a half-written one under its name:
 * dfl_create_tmp opens "PATH.tmp-dflash" (*tmp, malloc'd) for writing;
 * dfl_commit_tmp closes it and, when ok and the close succeeded, renames it
 * to PATH, else removes it. Returns 0 or -1 with "PATH: write error: WHY". */
FILE *dfl_create_tmp(const char *path, char **tmp);
int dfl_commit_tmp(FILE *f, char *tmp, const char *path, int ok);

/* Writing a set of files into a directory all or nothing (quantize, synth).
 * dfl_stage_open makes a private staging directory for DIR:
 *   DIR does not exist: "DIR.tmp-dflash-PID-N" next to it, renamed to DIR at
 *     commit (so DIR appears only complete);
 *   DIR is a directory: "DIR/tmp-dflash-PID-N", whose files are renamed into
 *     DIR one by one at commit.
 * The caller writes each file at the path dfl_stage_file() returns (it
 * records the name). dfl_stage_commit moves everything into place, then
 * removes DIR's files named with dfl_stage_drop (a stale index); until then
 * nothing under DIR's names changes. dfl_stage_abort removes every staged
 * file and the staging directory and prefixes the error with "DIR left as it
 * was" (or "DIR not created"). A failed commit cleans up itself.
 * Invariant: after open, exactly one of commit or abort is called. */
typedef struct {
    char *dir;    /* the destination */
    char *stage;  /* the staging directory */
    int fresh;    /* DIR did not exist: stage is renamed to DIR */
    char **files; /* names written in stage [n_files] */
    int n_files;
    char **drop;  /* names removed from DIR at commit [n_drop] */
    int n_drop;
} dfl_stage;
int dfl_stage_open(dfl_stage *s, const char *dir);
char *dfl_stage_file(dfl_stage *s, const char *name); /* malloc'd "stage/name" */
void dfl_stage_drop(dfl_stage *s, const char *name);
int dfl_stage_commit(dfl_stage *s);
void dfl_stage_abort(dfl_stage *s);

/* Monotonic clock in seconds. */
double dfl_now(void);

/* bf16 / f16 <-> f32 scalar conversions (exact for bf16->f32, f16->f32). */
static inline float dfl_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v;
    v.u = (uint32_t)h << 16;
    return v.f;
}
float dfl_f16_to_f32(uint16_t h);
uint16_t dfl_f32_to_bf16(float f); /* round to nearest even */
uint16_t dfl_f32_to_f16(float f);  /* round to nearest even */

/* Valid UTF-8 check (rejects overlongs, surrogates, > U+10FFFF).
 * Returns -1 if valid, else the byte offset of the first bad sequence. */
long dfl_utf8_invalid_at(const char *s, size_t n);

#endif
