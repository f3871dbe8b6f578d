/* dropout.c - inverted dropout: each unit is kept with probability `keep`
 * and scaled by 1/keep, so the expected activation is unchanged and
 * evaluation needs no rescaling.  The mask is drawn from the caller's rng,
 * so a seeded run is reproducible, and saved for backward. */
#include "../graph/internal.h"

AG_SIMD_CLONES
static void dropout_backward_loop(const uint8_t *restrict kept, const ag_real *restrict G, ag_real scale,
                                  ag_real *restrict GX, int64_t n, bool fresh) {
    if (fresh) /* a new gradient buffer: store, dropped units get 0 */
        for (int64_t i = 0; i < n; i++) GX[i] = kept[i] ? scale * G[i] : 0;
    else
        for (int64_t i = 0; i < n; i++) GX[i] = kept[i] ? GX[i] + scale * G[i] : GX[i];
}

AG_SIMD_CLONES
static void dropout_apply(const uint8_t *restrict kept, const ag_real *restrict x, ag_real scale,
                          ag_real *restrict y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = kept[i] ? scale * x[i] : 0;
}

/* The mask's application and its backward run in ranges on the pool (the
 * draws themselves are one generator's sequence: serial). */
typedef struct {
    const uint8_t *kept;
    const ag_real *x;
    ag_real *y;
    ag_real scale;
    bool fresh;
} dropout_job;

static void apply_range(void *ctx, int64_t i0, int64_t i1) {
    const dropout_job *j = ctx;
    dropout_apply(j->kept + i0, j->x + i0, j->scale, j->y + i0, i1 - i0);
}

static void backward_range(void *ctx, int64_t i0, int64_t i1) {
    const dropout_job *j = ctx;
    dropout_backward_loop(j->kept + i0, j->x + i0, j->scale, j->y + i0, i1 - i0, j->fresh);
}

static void dropout_backward(ag_node *n) {
    dropout_job j = {n->saved, n->out->grad, NULL, (ag_real)n->farg[0], false};
    j.y = ag__grad_write(n->in[0], &j.fresh);
    ag__parallel_range(n->out->size, AG_GRAIN_ELEMENTWISE, backward_range, &j);
}

/* kept[i] = (ag_rng_uniform(rng) < keep), drawn in order: the uniform is
 * (next >> 11) 2^-53, so the test is (next >> 11) < keep 2^53, that is
 * < ceil(keep 2^53) on integers (both scalings by 2^53 are exact), with the
 * generator's state in registers instead of a call per element. */
static void draw_mask(uint8_t *kept, int64_t n, double keep, ag_rng *rng) {
    const uint64_t below = (uint64_t)ceil(keep * 0x1p53);
    uint64_t s[4] = {rng->s[0], rng->s[1], rng->s[2], rng->s[3]};
    for (int64_t i = 0; i < n; i++) kept[i] = (ag__xoshiro_next(s) >> 11) < below;
    memcpy(rng->s, s, sizeof s);
}

ag_tensor *ag_dropout(ag_tensor *x, double keep, bool training, ag_rng *rng) {
    ag__check_device("ag_dropout", x, NULL);
    if (!(keep > 0 && keep <= 1)) ag__fatal("ag_dropout", "keep probability %g is not in (0, 1]", keep);
    /* Nothing to do: no copy, no tape node; the gradient flows to x as is. */
    if (!training || keep == 1) return x;
    if (!rng) ag__fatal("ag_dropout", "training mode needs an rng");
    ag_tensor *out = ag__empty(x->ndim, x->shape);
    uint8_t *kept = ag_arena_alloc((size_t)x->size);
    draw_mask(kept, x->size, keep, rng);
    dropout_job j = {kept, x->data, out->data, (ag_real)(1 / keep), false};
    ag__parallel_range(x->size, AG_GRAIN_ELEMENTWISE, apply_range, &j);
    ag_node *n = ag__record("ag_dropout", dropout_backward, out, 1, &x);
    if (n) {
        n->saved = kept;
        n->farg[0] = 1 / keep;
    }
    return out;
}
