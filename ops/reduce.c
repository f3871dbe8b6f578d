/* reduce.c - sum, mean and max, in total or along one axis.
 *
 * Along an axis a tensor is seen as [outer, n, inner]; the result is
 * [outer, inner] (with a size-1 dim kept in place when keepdim).  The loops
 * here are the CPU's kernels (ops/reduce.h), CUDA's are in ops/cuda/reduce.cu. */
#include "dispatch.h"
#include "reduce.h"
#include "../graph/device.h"

typedef struct {
    int64_t outer, n, inner;
} axis_view;

static axis_view view_along(const ag_tensor *x, int axis) {
    axis_view v = {1, x->shape[axis], 1};
    for (int i = 0; i < axis; i++) v.outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) v.inner *= x->shape[i];
    return v;
}

/* gx (+)= c: the gradient of a total. */
typedef struct {
    ag_real *gx;
    ag_real c;
    bool fresh;
} fill_job;

AG_SIMD_CLONES static void add_constant_range(void *ctx, int64_t i0, int64_t i1) {
    const fill_job *j = ctx;
    if (j->fresh)
        for (int64_t i = i0; i < i1; i++) j->gx[i] = j->c;
    else
        for (int64_t i = i0; i < i1; i++) j->gx[i] += j->c;
}

static ag_tensor *reduced_out(const ag_tensor *x, int axis, bool keepdim) { /* on x's device */
    int shape[AG_MAX_DIMS], nd = 0;
    for (int i = 0; i < x->ndim; i++) {
        if (i != axis) shape[nd++] = x->shape[i];
        else if (keepdim) shape[nd++] = 1;
    }
    return ag__empty_on(x->device, nd, shape);
}

/* ---- sum and mean: y = scale * sum_i x_i ----
 *
 * Along an axis every output element sums its n inputs in order, and the
 * pool splits the outputs: [outer, inner] in ranges of whole outer rows, or
 * of inner columns when there is one outer row.  A total (every element to
 * one number) is blocked instead: 4096-element blocks summed in 8 lanes,
 * the block sums added pairwise - deterministic, and with an error that
 * grows like log n rather than n. */

typedef struct {
    axis_view v;
    const ag_real *x, *g;
    ag_real *y, *gx;
    ag_real scale;
    bool by_inner;      /* ranges of inner columns (outer == 1) instead of outer rows */
    bool fresh;         /* backward: gx is new, store instead of add */
} reduce_job;

static void reduce_ranges(reduce_job *j, ag__range_fn fn) {
    j->by_inner = j->v.outer == 1;
    int64_t units = j->by_inner ? j->v.inner : j->v.outer;
    int64_t per_unit = j->by_inner ? j->v.n : j->v.n * j->v.inner;
    ag__parallel_range(units, ag__units_per_part(per_unit), fn, j);
}

AG_SIMD_CLONES static void sum_axis_range(void *ctx, int64_t u0, int64_t u1) {
    const reduce_job *j = ctx;
    int64_t o0 = j->by_inner ? 0 : u0, o1 = j->by_inner ? 1 : u1;
    int64_t k0 = j->by_inner ? u0 : 0, k1 = j->by_inner ? u1 : j->v.inner;
    for (int64_t o = o0; o < o1; o++) {
        ag_real *out = j->y + o * j->v.inner;
        for (int64_t k = k0; k < k1; k++) out[k] = 0;
        for (int64_t i = 0; i < j->v.n; i++) {
            const ag_real *x = j->x + (o * j->v.n + i) * j->v.inner;
            for (int64_t k = k0; k < k1; k++) out[k] += x[k];
        }
        if (j->scale != 1)
            for (int64_t k = k0; k < k1; k++) out[k] *= j->scale;
    }
}

AG_SIMD_CLONES static void sum_axis_grad_range(void *ctx, int64_t u0, int64_t u1) {
    const reduce_job *j = ctx;
    int64_t o0 = j->by_inner ? 0 : u0, o1 = j->by_inner ? 1 : u1;
    int64_t k0 = j->by_inner ? u0 : 0, k1 = j->by_inner ? u1 : j->v.inner;
    for (int64_t o = o0; o < o1; o++) {
        const ag_real *g = j->g + o * j->v.inner;
        for (int64_t i = 0; i < j->v.n; i++) {
            ag_real *gx = j->gx + (o * j->v.n + i) * j->v.inner;
            if (j->fresh)
                for (int64_t k = k0; k < k1; k++) gx[k] = j->scale * g[k];
            else
                for (int64_t k = k0; k < k1; k++) gx[k] += j->scale * g[k];
        }
    }
}

static void sum_axis_forward_cpu(const ag_real *x, ag_real *y, ag_real scale, int64_t outer, int64_t n,
                                 int64_t inner) {
    reduce_job j = {.v = {outer, n, inner}, .x = x, .y = y, .scale = scale};
    reduce_ranges(&j, sum_axis_range);
}

static void sum_axis_backward_cpu(const ag_real *g, ag_real *gx, ag_real scale, int64_t outer, int64_t n,
                                  int64_t inner, bool fresh) {
    reduce_job j = {.v = {outer, n, inner}, .g = g, .gx = gx, .scale = scale, .fresh = fresh};
    reduce_ranges(&j, sum_axis_grad_range);
}

/* n->iarg[0]: the axis; n->farg[0]: the scale. */
static void sum_axis_backward(ag_node *n) {
    axis_view v = view_along(n->in[0], n->iarg[0]);
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__reduce_on(n->op, n->out->device)
        ->sum_axis_backward(n->out->grad, gx, (ag_real)n->farg[0], v.outer, v.n, v.inner, fresh);
}

static ag_tensor *sum_scaled(const char *op, ag_tensor *x, int axis, bool keepdim, bool mean) {
    ag_device dev = ag__check_same_device(op, x, NULL);
    axis_view v = view_along(x, axis);
    if (mean && v.n == 0) ag__fatal(op, "mean over an empty axis %d", axis);
    ag_real scale = mean ? (ag_real)1 / (ag_real)v.n : 1;
    ag_tensor *out = reduced_out(x, axis, keepdim);
    ag__reduce_on(op, dev)->sum_axis_forward(x->data, out->data, scale, v.outer, v.n, v.inner);
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

/* ---- totals: every element to one number (0-dim) ---- */

enum { SUM_BLOCK = 4096, SUM_LANES = 8 };

typedef struct {
    const ag_real *x;
    int64_t n;
    ag_real *block_sums;
} total_job;

AG_SIMD_CLONES static void block_sums(void *ctx, int64_t b0, int64_t b1) {
    const total_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        const ag_real *x = j->x + b * SUM_BLOCK;
        int64_t n = j->n - b * SUM_BLOCK < SUM_BLOCK ? j->n - b * SUM_BLOCK : SUM_BLOCK, i = 0;
        ag_real acc[SUM_LANES] = {0};
        for (; i + SUM_LANES <= n; i += SUM_LANES)
            for (int l = 0; l < SUM_LANES; l++) acc[l] += x[i + l];
        for (; i < n; i++) acc[i % SUM_LANES] += x[i];
        ag_real s = 0;
        for (int l = 0; l < SUM_LANES; l++) s += acc[l];
        j->block_sums[b] = s;
    }
}

/* sum of v[0..n) by halves (n >= 1). */
static ag_real pairwise(const ag_real *v, int64_t n) {
    if (n == 1) return v[0];
    int64_t h = n / 2;
    return pairwise(v, h) + pairwise(v + h, n - h);
}

static void sum_cpu(const ag_real *x, ag_real scale, ag_real *out, int64_t n) {
    int64_t blocks = (n + SUM_BLOCK - 1) / SUM_BLOCK;
    ag_real sum = 0;
    if (blocks > 0) {
        total_job j = {x, n, ag__arena_alloc((size_t)blocks * sizeof(ag_real))};
        ag__parallel_range(blocks, 4, block_sums, &j);
        sum = pairwise(j.block_sums, blocks);
    }
    *out = scale == 1 ? sum : sum * scale;
}

static void sum_backward_cpu(const ag_real *g, ag_real scale, ag_real *gx, int64_t n, bool fresh) {
    fill_job j = {gx, scale * g[0], fresh};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, add_constant_range, &j);
}

/* n->farg[0]: the scale.  The output's gradient stays on its device. */
static void total_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__reduce_on(n->op, n->out->device)->sum_backward(n->out->grad, (ag_real)n->farg[0], gx, n->in[0]->size, fresh);
}

static ag_tensor *total(const char *op, ag_tensor *x, bool mean) {
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (mean && x->size == 0) ag__fatal(op, "mean of an empty tensor");
    ag_real scale = mean ? (ag_real)1 / (ag_real)x->size : 1;
    ag_tensor *out = ag__empty_on(dev, 0, NULL);
    ag__reduce_on(op, dev)->sum(x->data, scale, out->data, x->size);
    ag_node *n = ag__record(op, total_backward, out, 1, &x);
    if (n) n->farg[0] = scale;
    return out;
}

ag_tensor *ag_sum(ag_tensor *x) { return total("ag_sum", x, false); }
ag_tensor *ag_mean(ag_tensor *x) { return total("ag_mean", x, true); }

/* ---- max: the gradient goes to the first maximal element ---- */

typedef struct {
    reduce_job r;
    int32_t *arg;          /* forward: written */
    const int32_t *chosen; /* backward: the forward's arg (-1: none) */
    const int32_t *len;    /* forward: positions per outer index, or NULL (all) */
} max_job;

/* Per output element, the first maximal input; the k loop innermost so the
 * compares of a row of outputs run as SIMD selects. */
AG_SIMD_CLONES static void max_axis_range(void *ctx, int64_t u0, int64_t u1) {
    const max_job *j = ctx;
    const axis_view *v = &j->r.v;
    int64_t o0 = j->r.by_inner ? 0 : u0, o1 = j->r.by_inner ? 1 : u1;
    int64_t k0 = j->r.by_inner ? u0 : 0, k1 = j->r.by_inner ? u1 : v->inner;
    for (int64_t o = o0; o < o1; o++) {
        const ag_real *x = j->r.x + o * v->n * v->inner;
        ag_real *best = j->r.y + o * v->inner;
        int32_t *arg = j->arg + o * v->inner;
        int64_t n = j->len ? j->len[o] : v->n;
        if (n == 0) { /* an empty example: 0, and no gradient */
            for (int64_t k = k0; k < k1; k++) best[k] = 0, arg[k] = -1;
            continue;
        }
        for (int64_t k = k0; k < k1; k++) {
            best[k] = x[k];
            arg[k] = 0;
        }
        for (int64_t i = 1; i < n; i++)
            for (int64_t k = k0; k < k1; k++) {
                ag_real xi = x[i * v->inner + k];
                bool more = xi > best[k];
                best[k] = more ? xi : best[k];
                arg[k] = more ? (int32_t)i : arg[k];
            }
    }
}

static void max_axis_grad_range(void *ctx, int64_t u0, int64_t u1) {
    const max_job *j = ctx;
    const axis_view *v = &j->r.v;
    int64_t o0 = j->r.by_inner ? 0 : u0, o1 = j->r.by_inner ? 1 : u1;
    int64_t k0 = j->r.by_inner ? u0 : 0, k1 = j->r.by_inner ? u1 : v->inner;
    for (int64_t o = o0; o < o1; o++)
        for (int64_t k = k0; k < k1; k++) {
            int32_t at = j->chosen[o * v->inner + k];
            if (at >= 0) j->r.gx[(o * v->n + at) * v->inner + k] += j->r.g[o * v->inner + k];
        }
}

static void max_axis_forward_cpu(const ag_real *x, ag_real *y, int32_t *arg, int64_t outer, int64_t n,
                                 int64_t inner, const int32_t *len) {
    max_job j = {.r = {.v = {outer, n, inner}, .x = x, .y = y}, .arg = arg, .len = len};
    reduce_ranges(&j.r, max_axis_range);
}

/* A fresh gx is zeroed first: each output's gradient reaches one of its n
 * inputs. */
static void max_axis_backward_cpu(const ag_real *g, const int32_t *arg, ag_real *gx, int64_t outer, int64_t n,
                                  int64_t inner, bool fresh) {
    if (fresh) ag__zero(gx, (size_t)(outer * n * inner) * sizeof *gx);
    max_job j = {.r = {.v = {outer, n, inner}, .g = g, .gx = gx}, .chosen = arg};
    reduce_ranges(&j.r, max_axis_grad_range);
}

/* n->iarg[0]: the axis; n->saved: arg, in the output's device memory. */
static void max_axis_backward(ag_node *n) {
    axis_view v = view_along(n->in[0], n->iarg[0]);
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__reduce_on(n->op, n->out->device)->max_axis_backward(n->out->grad, n->saved, gx, v.outer, v.n, v.inner, fresh);
}

static ag_tensor *max_axis(const char *op, ag_tensor *x, int axis, bool keepdim, const int32_t *lengths) {
    ag_device dev = ag__check_same_device(op, x, NULL);
    axis = ag__axis(op, x, axis);
    axis_view v = view_along(x, axis);
    if (v.n == 0 && !lengths) ag__fatal(op, "max over an empty axis %d", axis);
    ag_tensor *out = reduced_out(x, axis, keepdim);
    int32_t *arg = ag__step_alloc_on(dev, (size_t)(out->size ? out->size : 1) * sizeof(int32_t));
    const int32_t *len = lengths ? ag__step_i32_on(dev, lengths, v.outer) : NULL;
    ag__reduce_on(op, dev)->max_axis_forward(x->data, out->data, arg, v.outer, v.n, v.inner, len);
    ag_node *n = ag__record(op, max_axis_backward, out, 1, &x);
    if (n) {
        n->iarg[0] = axis;
        n->saved = arg;
    }
    return out;
}

ag_tensor *ag_max_axis(ag_tensor *x, int axis, bool keepdim) { return max_axis("ag_max_axis", x, axis, keepdim, NULL); }

/* The max of x [B, N, d] over the first lengths[b] positions of each
 * example, 0 (no gradient) for an empty one; lengths checked by the
 * caller (ag_max_over_time). */
ag_tensor *ag__max_over_lengths(ag_tensor *x, const int32_t *lengths) {
    return max_axis("ag_max_over_time", x, 1, false, lengths);
}

/* ---- the CPU's table (ops/reduce.h; CUDA's is in ops/cuda/reduce.cu) ---- */

static const ag__reduce_kernels reduce_cpu = {
    .sum = sum_cpu,
    .sum_backward = sum_backward_cpu,
    .sum_axis_forward = sum_axis_forward_cpu,
    .sum_axis_backward = sum_axis_backward_cpu,
    .max_axis_forward = max_axis_forward_cpu,
    .max_axis_backward = max_axis_backward_cpu,
};
AG_DISPATCH(reduce, reduce_cpu)
