/* cpu_pack.c - the CPU backend's packed copies of a model's weights
 * (cpu_backend.h): made by cb_pack (the backend's prepare), freed by
 * cb_unpack (its release). The model and the other backends never see
 * them but as wt_weight.packed, which only the CPU kernels read. */
#include <stdlib.h>

#include "cpu_backend.h"
#include "kernels.h"
#include "util.h"

enum { LAYER_MATS = 16 }; /* matrices a layer can have (matrices() lists them) */

/* Every distinct matrix of the model that cb_pack packs, once (a tied
 * lm_head is the embedding): not the experts, which stay in the mapping
 * (a packed copy of a 30B-A3B's experts would not fit beside it in RAM;
 * the kernels give the same bits without one). */
static int matrices(mdl_model *m, wt_weight **out) {
    int n = 0;
    if (m->embed.rows) out[n++] = &m->embed;
    if (m->lm_head.rows && m->lm_head.data != m->embed.data) out[n++] = &m->lm_head;
    if (m->fc.rows) out[n++] = &m->fc;
    for (int l = 0; l < m->cfg.n_layers && m->layers; l++) {
        mdl_layer *L = &m->layers[l];
        wt_weight *ws[] = {&L->wq,  &L->wk,      &L->wv,    &L->wo,    &L->wg,    &L->wu,   &L->wd,
                           &L->router, &L->lin_qkv, &L->lin_z, &L->lin_b, &L->lin_a, &L->lin_out,
                           &L->sh_wg,  &L->sh_wu,   &L->sh_wd};
        for (int i = 0; i < LAYER_MATS; i++)
            if (ws[i]->rows) out[n++] = ws[i];
    }
    return n;
}

int cb_pack(mdl_model *m) {
    wt_weight **ws = dfl_malloc(sizeof(wt_weight *) * (size_t)(3 + LAYER_MATS * m->cfg.n_layers));
    int n = matrices(m, ws), rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (!ws[i]->packed) rc = kn_pack(ws[i]);
    free(ws);
    if (m->lm_head.data == m->embed.data) m->lm_head.packed = m->embed.packed;
    return rc;
}

void cb_unpack(mdl_model *m) {
    if (!m->layers && !m->embed.rows) return;
    if (m->lm_head.data == m->embed.data) m->lm_head.packed = NULL; /* shares the embedding's copy */
    wt_weight **ws = dfl_malloc(sizeof(wt_weight *) * (size_t)(3 + LAYER_MATS * m->cfg.n_layers));
    int n = matrices(m, ws);
    for (int i = 0; i < n; i++) kn_unpack(ws[i]);
    free(ws);
}
