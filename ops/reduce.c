/* reduce.c - sum, mean and max, in total or along one axis.
 *
 * Along an axis a tensor is seen as [outer, n, inner]; the result is
 * [outer, inner] (with a size-1 dim kept in place when keepdim). */
#include "../graph/internal.h"

typedef struct {
    int64_t outer, n, inner;
} axis_view;

static axis_view view_along(const ag_tensor *x, int axis) {
    axis_view v = {1, x->shape[axis], 1};
    for (int i = 0; i < axis; i++) v.outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) v.inner *= x->shape[i];
    return v;
}

static ag_tensor *reduced_out(const ag_tensor *x, int axis, bool keepdim) {
    int shape[AG_MAX_DIMS], nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != axis) shape[nd++] = x->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return ag__empty(nd, shape);
}

/* ---- sum and mean: y = scale * sum_i x_i ---- */

static void sum_axis_backward(ag_node *n) {
    axis_view v = view_along(n->in[0], n->iarg[0]);
    ag_real scale = (ag_real)n->farg[0];
    const ag_real *G = n->out->grad;
    ag_real *GX = ag__grad(n->in[0]);
    for (int64_t o = 0; o < v.outer; o++)
        for (int64_t i = 0; i < v.n; i++)
            for (int64_t k = 0; k < v.inner; k++) GX[(o * v.n + i) * v.inner + k] += scale * G[o * v.inner + k];
}

static ag_tensor *sum_scaled(const char *op, ag_tensor *x, int axis, bool keepdim, bool mean) {
    ag__check_device(op, x, NULL);
    axis_view v = view_along(x, axis);
    if (mean && v.n == 0) ag__fatal(op, "mean over an empty axis %d", axis);
    ag_real scale = mean ? (ag_real)1 / (ag_real)v.n : 1;
    ag_tensor *out = reduced_out(x, axis, keepdim);
    memset(out->data, 0, (size_t)out->size * sizeof(ag_real));
    for (int64_t o = 0; o < v.outer; o++)
        for (int64_t i = 0; i < v.n; i++)
            for (int64_t k = 0; k < v.inner; k++) out->data[o * v.inner + k] += x->data[(o * v.n + i) * v.inner + k];
    if (mean)
        for (int64_t i = 0; i < out->size; i++) out->data[i] *= scale;
    ag_node *n = ag__record(op, sum_axis_backward, out, 1, &x);
    if (n) {
        n->iarg[0] = axis;
        n->farg[0] = scale;
    }
    return out;
}

ag_tensor *ag_sum_axis(ag_tensor *x, int axis, bool keepdim) {
    return sum_scaled("ag_sum_axis", x, ag__axis("ag_sum_axis", x, axis), keepdim, false);
}

ag_tensor *ag_mean_axis(ag_tensor *x, int axis, bool keepdim) {
    return sum_scaled("ag_mean_axis", x, ag__axis("ag_mean_axis", x, axis), keepdim, true);
}

/* Totals reduce the tensor seen as one flat axis; a 0-dim result. */
static ag_tensor *total(const char *op, ag_tensor *x, bool mean) {
    ag_tensor *flat = x;
    if (x->ndim != 1) {
        int64_t size = x->size;
        flat = ag_reshape(x, 1, (int[]){(int)size});
    }
    return sum_scaled(op, flat, 0, false, mean);
}

ag_tensor *ag_sum(ag_tensor *x) { return total("ag_sum", x, false); }
ag_tensor *ag_mean(ag_tensor *x) { return total("ag_mean", x, true); }

/* ---- max: the gradient goes to the first maximal element ---- */

static void max_axis_backward(ag_node *n) {
    const int32_t *arg = n->saved;
    axis_view v = view_along(n->in[0], n->iarg[0]);
    const ag_real *G = n->out->grad;
    ag_real *GX = ag__grad(n->in[0]);
    for (int64_t o = 0; o < v.outer; o++)
        for (int64_t k = 0; k < v.inner; k++) GX[(o * v.n + arg[o * v.inner + k]) * v.inner + k] += G[o * v.inner + k];
}

ag_tensor *ag_max_axis(ag_tensor *x, int axis, bool keepdim) {
    ag__check_device("ag_max_axis", x, NULL);
    axis = ag__axis("ag_max_axis", x, axis);
    axis_view v = view_along(x, axis);
    if (v.n == 0) ag__fatal("ag_max_axis", "max over an empty axis %d", axis);
    ag_tensor *out = reduced_out(x, axis, keepdim);
    int32_t *arg = ag_arena_alloc((size_t)out->size * sizeof *arg);
    for (int64_t o = 0; o < v.outer; o++)
        for (int64_t k = 0; k < v.inner; k++) {
            const ag_real *col = x->data + o * v.n * v.inner + k;
            int32_t best = 0;
            for (int64_t i = 1; i < v.n; i++)
                if (col[i * v.inner] > col[best * v.inner]) best = (int32_t)i;
            arg[o * v.inner + k] = best;
            out->data[o * v.inner + k] = col[best * v.inner];
        }
    ag_node *n = ag__record("ag_max_axis", max_axis_backward, out, 1, &x);
    if (n) {
        n->iarg[0] = axis;
        n->saved = arg;
    }
    return out;
}
