/* shape.c - reshape, permute/transpose, concat, slice, index-select and
 * embedding lookup.  Reshape is a view: it shares the input's data. */
#include "../graph/internal.h"

/* ---- reshape: a zero-copy view; backward adds the gradient back ---- */

static void reshape_backward(ag_node *n) {
    ag_real *gx = ag__grad(n->in[0]);
    const ag_real *g = n->out->grad;
    for (int64_t i = 0; i < n->out->size; i++) gx[i] += g[i];
}

ag_tensor *ag_reshape(ag_tensor *x, int ndim, const int *shape) {
    char sx[64];
    if (ndim < 0 || ndim > AG_MAX_DIMS) ag__fatal("ag_reshape", "%d dims (at most %d)", ndim, AG_MAX_DIMS);
    int s[AG_MAX_DIMS], infer = -1;
    int64_t known = 1;
    for (int i = 0; i < ndim; i++) {
        s[i] = shape[i];
        if (s[i] == -1) {
            if (infer >= 0) ag__fatal("ag_reshape", "more than one -1 in the new shape");
            infer = i;
        } else {
            if (s[i] < 0) ag__fatal("ag_reshape", "negative dim %d", s[i]);
            known *= s[i];
        }
    }
    if (infer >= 0) s[infer] = known ? (int)(x->size / known) : 0;
    int64_t size = 1;
    for (int i = 0; i < ndim; i++) size *= s[i];
    if (size != x->size) {
        ag_tensor tmp = {.ndim = ndim};
        for (int i = 0; i < ndim; i++) tmp.shape[i] = s[i];
        char st[64];
        ag__fatal("ag_reshape", "cannot view %s as %s (sizes %lld and %lld)", ag_shape_str(x, sx, sizeof sx),
                  ag_shape_str(&tmp, st, sizeof st), (long long)x->size, (long long)size);
    }
    ag_tensor *out = ag_arena_zalloc(sizeof *out);
    *out = (ag_tensor){.ndim = ndim, .size = size, .data = x->data, .device = x->device};
    for (int i = 0; i < AG_MAX_DIMS; i++) out->shape[i] = i < ndim ? s[i] : 1;
    ag__record("ag_reshape", reshape_backward, out, 1, &x);
    return out;
}
