/* cpu_backend.h - the CPU backend's own calls beside be_cpu (backend.h).
 * Prefix: cb_.
 *
 * The CPU backend owns the kernels' packed copies of a model's Q8/Q4
 * matrices, as the CUDA backend's cu_model owns its device copies: its
 * prepare() makes them (cb_pack), its release() frees them (cb_unpack);
 * mdl_free does not. Tests, benchmarks and fuzz harnesses that run the
 * kernels on a model without a backend instance call the two themselves. */
#ifndef DFL_CPU_BACKEND_H
#define DFL_CPU_BACKEND_H

#include "model.h"

/* Give every Q8/Q4 matrix of m (not the experts, which stay mapped) the
 * kernels' packed copy (kn_pack, wt_weight.packed), when the current kernel
 * mode uses one; a tied lm_head shares the embedding's. Call after any
 * conversion (qt_model). 0, or -1 (dfl_seterr) out of memory. */
int cb_pack(mdl_model *m);
/* Free the copies cb_pack made (a model never packed: nothing). Before
 * mdl_free. */
void cb_unpack(mdl_model *m);

#endif
