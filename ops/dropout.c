/* dropout.c - inverted dropout: each unit is kept with probability `keep`
 * and scaled by 1/keep, so the expected activation is unchanged and
 * evaluation needs no rescaling.  The mask is drawn from the caller's rng,
 * so a seeded run is reproducible, and saved for backward. */
#include "../graph/internal.h"

static void dropout_backward(ag_node *n) {
    const uint8_t *kept = n->saved;
    ag_real scale = (ag_real)n->farg[0];
    const ag_real *G = n->out->grad;
    ag_real *GX = ag__grad(n->in[0]);
    for (int64_t i = 0; i < n->out->size; i++)
        if (kept[i]) GX[i] += scale * G[i];
}

ag_tensor *ag_dropout(ag_tensor *x, double keep, bool training, ag_rng *rng) {
    ag__check_device("ag_dropout", x, NULL);
    if (!(keep > 0 && keep <= 1)) ag__fatal("ag_dropout", "keep probability %g is not in (0, 1]", keep);
    /* Nothing to do: no copy, no tape node; the gradient flows to x as is. */
    if (!training || keep == 1) return x;
    if (!rng) ag__fatal("ag_dropout", "training mode needs an rng");
    ag_tensor *out = ag__empty(x->ndim, x->shape);
    uint8_t *kept = ag_arena_alloc((size_t)x->size);
    ag_real scale = (ag_real)(1 / keep);
    for (int64_t i = 0; i < x->size; i++) {
        kept[i] = ag_rng_uniform(rng) < keep;
        out->data[i] = kept[i] ? scale * x->data[i] : 0;
    }
    ag_node *n = ag__record("ag_dropout", dropout_backward, out, 1, &x);
    if (n) {
        n->saved = kept;
        n->farg[0] = 1 / keep;
    }
    return out;
}
