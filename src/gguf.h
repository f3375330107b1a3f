/* gguf.h - read-only, memory-mapped GGUF files (v2/v3, little-endian), and a
 * writer. Prefix: gguf_.
 *
 * A file is: magic "GGUF", u32 version, u64 tensor count, u64 key/value
 * count, the key/value pairs (u64-length strings as keys, u32 value type,
 * value; arrays are u32 element type + u64 count + elements), the tensor
 * infos (name, u32 n_dims, u64 ne[n_dims] innermost first, u32 ggml type,
 * u64 offset), padding to general.alignment (default 32), and the data
 * section. gguf_open() validates everything before returning: every length
 * and count against the bytes left, value types, no nested arrays, unique
 * keys and tensor names without control characters (so messages naming
 * them stay one line), the alignment (a power of two), every tensor's type
 * known, its row length a multiple of the type's block, its byte range
 * aligned, inside the data section and overlapping no other. After that a
 * tensor's bytes and every value can be read without further checks. */
#ifndef DFL_GGUF_H
#define DFL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3, GGUF_UINT32 = 4, GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6, GGUF_BOOL = 7, GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
} gguf_vtype;

/* ggml tensor types the reader knows the size of (others are rejected). */
typedef enum {
    GGML_F32 = 0, GGML_F16 = 1, GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
    GGML_Q8_1 = 9, GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14,
    GGML_Q8_K = 15, GGML_I8 = 24, GGML_I16 = 25, GGML_I32 = 26, GGML_I64 = 27, GGML_F64 = 28, GGML_BF16 = 30,
    GGML_MXFP4 = 39, /* blocks of 32: an e8m0 scale byte, then 16 bytes whose low nibbles are elements 0..15
                        and high nibbles 16..31 (e2m1 codes) */
} ggml_type;

typedef struct {
    char *key;          /* NUL-terminated copy */
    gguf_vtype type;    /* GGUF_ARRAY for arrays */
    gguf_vtype atype;   /* element type of an array */
    uint64_t n;         /* elements of an array (1 otherwise) */
    const uint8_t *val; /* the value (array: first element) in the mapping */
    const uint64_t *soff; /* string arrays: offset of element i's u64 length from val */
} gguf_kv;

typedef struct {
    char *name;
    int n_dims;
    int64_t ne[4]; /* ne[0] = innermost (columns of a matrix), unused = 1 */
    ggml_type type;
    uint64_t offset; /* from the start of the data section */
    const void *data;
    size_t nbytes;
} gguf_tensor;

typedef struct {
    char *path;
    dfl_map map;
    uint32_t version;
    uint64_t alignment;
    gguf_kv *kv;
    int n_kv;
    gguf_tensor *t; /* in file order */
    int n_tensors;
    size_t data_off; /* start of the data section */
} gguf_file;

/* 1 if PATH is a regular file that starts with "GGUF". */
int gguf_is_gguf(const char *path);
int gguf_open(gguf_file *g, const char *path);
void gguf_close(gguf_file *g);

const char *ggml_type_name(ggml_type t);
/* Elements per block and bytes per block of a type; 0 if unknown. */
int ggml_blck_size(int type);
size_t ggml_type_size(int type);

const gguf_kv *gguf_find_kv(const gguf_file *g, const char *key);
const gguf_tensor *gguf_find_tensor(const gguf_file *g, const char *name);
const char *gguf_vtype_name(gguf_vtype t);

/* Typed reads. Each returns 0, or -1 with "FILE: key K: ..." when the key is
 * missing (required) or has another type; an absent optional key leaves
 * *out unchanged and returns 1. Integers of any integer type are accepted
 * when the value fits. */
int gguf_get_int(const gguf_file *g, const char *key, int64_t *out, int required);
int gguf_get_float(const gguf_file *g, const char *key, double *out, int required);
int gguf_get_bool(const gguf_file *g, const char *key, int *out, int required);
/* String value: pointer into the mapping (not NUL-terminated) and length. */
int gguf_get_str(const gguf_file *g, const char *key, const char **s, size_t *n, int required);
/* Element i of a string array (no checks: i < kv->n, kv a string array). */
const char *gguf_arr_str(const gguf_kv *kv, uint64_t i, size_t *n);
/* Element i of a numeric array as int64 / double (no checks). */
int64_t gguf_arr_int(const gguf_kv *kv, uint64_t i);
double gguf_arr_float(const gguf_kv *kv, uint64_t i);

/* ---- writing ---------------------------------------------------------- */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_w_new(void);
void gguf_w_free(gguf_writer *w);
void gguf_w_str(gguf_writer *w, const char *key, const char *val);
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_w_f32(gguf_writer *w, const char *key, float v);
void gguf_w_bool(gguf_writer *w, const char *key, int v);
void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n);
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, uint64_t n);
void gguf_w_arr_bool(gguf_writer *w, const char *key, const uint8_t *v, uint64_t n); /* one byte each, 0 / 1 */
/* A key/value of an open file, as it is. */
void gguf_w_copy_kv(gguf_writer *w, const gguf_kv *kv);
/* A tensor; data (nbytes, as ggml_type_size says) must stay valid until
 * gguf_w_write. ne innermost first. */
void gguf_w_tensor(gguf_writer *w, const char *name, ggml_type type, int n_dims, const int64_t *ne,
                   const void *data);
/* A tensor whose bytes are made while the file is written: fill(ctx, dst,
 * nbytes) writes them into a scratch buffer the writer owns (returns 0, or
 * -1 with dfl_seterr to fail the write). ctx must stay valid until
 * gguf_w_write. So a writer holds one tensor's data at a time. */
void gguf_w_tensor_fill(gguf_writer *w, const char *name, ggml_type type, int n_dims, const int64_t *ne,
                        int (*fill)(void *ctx, void *dst, size_t nbytes), void *ctx);
/* Write PATH through a temporary file (dfl_create_tmp / dfl_commit_tmp). */
int gguf_w_write(gguf_writer *w, const char *path);

#endif
