/* safetensors.h - read-only, memory-mapped safetensors files. Prefix: st_.
 *
 * A file is: u64 little-endian header length N, N bytes of JSON mapping each
 * tensor name to {dtype, shape, data_offsets [begin, end)} relative to the
 * data section that follows the header. st_open() validates everything
 * before returning: header length within the file, JSON well formed, every
 * dtype known, shape product * dtype size == end - begin, every range inside
 * the data section, no two ranges overlapping. After that, a tensor's bytes
 * can be read without further checks. */
#ifndef DFL_SAFETENSORS_H
#define DFL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef enum {
    ST_F32, ST_F16, ST_BF16, ST_F64,
    ST_I8, ST_U8, ST_I16, ST_U16, ST_I32, ST_U32, ST_I64, ST_U64, ST_BOOL,
} st_dtype;

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data; /* into the mapping */
    size_t nbytes;
    const char *file; /* path of the file it came from (owned by st_set) */
} st_tensor;

/* The tensors of one checkpoint: a single file or all shards of a sharded one. */
typedef struct {
    st_tensor *t; /* sorted by name */
    int n;
    dfl_map *maps;
    char **paths;
    int n_files;
} st_set;

const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);

/* Open PATH as one safetensors file. */
int st_open_file(st_set *s, const char *path);
/* Open a model directory: model.safetensors.index.json (sharded) if present,
 * else model.safetensors. Every tensor named in the index must be found in
 * the shard it names. */
int st_open_dir(st_set *s, const char *dir);
void st_close(st_set *s);

/* Tensor by exact name, or NULL. */
const st_tensor *st_find(const st_set *s, const char *name);

/* Writing: tensors are laid out in the order given, 8-byte aligned. */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[4];
    const void *data; /* shape product * dtype size bytes */
} st_out;

/* Write a safetensors file; metadata_json (may be NULL) is a JSON object of
 * string values stored as "__metadata__". */
int st_write(const char *path, const st_out *t, int n, const char *metadata_json);

#endif
