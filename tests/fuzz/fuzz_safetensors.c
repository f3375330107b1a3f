/* fuzz_safetensors.c - the safetensors parser (st_open_file) on arbitrary
 * bytes. Oracle: no crash or sanitizer report; an accepted file's tensors
 * lie inside the mapping, are sorted by name and findable, and their byte
 * counts match their shapes. */
#include "fuzz_common.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *p = fz_file("model.safetensors", data, size);
    st_set s;
    if (st_open_file(&s, p) != 0) {
        if (!dfl_lasterr()[0]) abort(); /* a failure always says why */
        return 0;
    }
    const uint8_t *lo = s.maps[0].data, *hi = lo + s.maps[0].size;
    volatile uint8_t sink = 0;
    for (int i = 0; i < s.n; i++) {
        const st_tensor *t = &s.t[i];
        const uint8_t *b = t->data;
        if (t->nbytes && (b < lo || b + t->nbytes > hi)) abort();
        size_t numel = 1;
        for (int d = 0; d < t->ndim; d++) numel *= (size_t)t->shape[d];
        if (numel * st_dtype_size(t->dtype) != t->nbytes) abort();
        if (t->nbytes) sink ^= b[0] ^ b[t->nbytes - 1];
        if (st_find(&s, t->name) != t) abort();
        if (i && strcmp(s.t[i - 1].name, t->name) >= 0) abort();
    }
    (void)sink;
    st_close(&s);
    return 0;
}
