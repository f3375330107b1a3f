/* backend.c - the backend registry: be_select (backend.h). */
#include <string.h>

#include "backend.h"
#include "util.h"

const be_ops *be_select(const char *name) {
    int is_auto = !name || strcmp(name, "auto") == 0;
    if (name && strcmp(name, "cpu") == 0) return &be_cpu;
    if (!is_auto && strcmp(name, "cuda") != 0) {
        dfl_seterr("unknown backend '%s' (want auto, cpu or cuda)", name);
        return NULL;
    }
#ifdef DFLASH_CUDA
    char why[256] = "";
    if (be_cuda.probe(why, sizeof why)) return &be_cuda;
    if (!is_auto) {
        dfl_seterr("backend cuda: %s", why[0] ? why : "no usable device");
        return NULL;
    }
#else
    if (!is_auto) {
        dfl_seterr("backend cuda: not built in (rebuild with make CUDA=1)");
        return NULL;
    }
#endif
    return &be_cpu;
}
