/* softmax.c - the softmax family: masked and scaled softmax along the last
 * axis, log-softmax, and softmax along any axis over the valid positions
 * of each example (source2token pooling).
 *
 * All of them are max-subtracted.  A row with no allowed entry (every logit
 * -inf, e.g. the first query under a strict PAST mask) gives zeros and no
 * gradient instead of 0/0. */
#include "softmax_rows.h"
#include "dispatch.h"
#include "softmax.h"
#include "../graph/device.h"

/* ---- the mask broadcast, shared with attention.c ---- */

static void pad4(int ndim, const int *shape, int *out4) {
    for (int d = 0; d < 4; d++) out4[d] = d < 4 - ndim ? 1 : shape[d - (4 - ndim)];
}

/* A mask with fewer dims than the scores is aligned at the right, so against
 * [B,h,Nq,Nk] the leading dim of a 3-D mask pairs with the heads.  When B
 * equals h that dim could as well be meant per example - a [B,1,Nk]
 * padding mask made for 3-D scores would mask heads, and padded keys would
 * get weight.  Both readings have a 4-D shape that says which: refused,
 * naming the two.  (The scores' dims before the last two are the only ones
 * that can be confused; a mask's last two dims always pair with Nq, Nk.) */
static void check_unambiguous(const char *op, const ag_tensor *mask, const ag_tensor *scores) {
    int lead = scores->ndim - 2, missing = scores->ndim - mask->ndim;
    if (lead < 2 || missing <= 0) return;
    for (int d = 0; d < mask->ndim - 2; d++) {
        int at = d + missing, size = mask->shape[d];
        if (size == 1) continue;
        for (int other = 0; other < lead; other++) {
            if (other == at || scores->shape[other] != size) continue;
            ag_tensor as_is = {.ndim = scores->ndim}, moved = {.ndim = scores->ndim};
            for (int i = 0; i < scores->ndim; i++) {
                as_is.shape[i] = i < missing ? 1 : mask->shape[i - missing];
                moved.shape[i] = as_is.shape[i];
            }
            moved.shape[at] = 1;
            moved.shape[other] = size;
            char sm[64], ss[64], sa[64], sb[64];
            ag__fatal(op, "mask %s against the scores %s is ambiguous: its dim %d (%d) aligns with the scores' dim %d, "
                      "but the scores' dim %d is %d too. Pass it with the scores' %d dims (ag_reshape): %s to apply "
                      "it along dim %d, %s along dim %d",
                      ag_shape_str(mask, sm, sizeof sm), ag_shape_str(scores, ss, sizeof ss), d, size, at, other, size,
                      scores->ndim, ag_shape_str(&as_is, sa, sizeof sa), at, ag_shape_str(&moved, sb, sizeof sb), other);
        }
    }
}

ag__mask_plan ag__mask_plan_make(const char *op, int ndim, const int *scores_shape, const ag_tensor *mask) {
    int s4[4];
    pad4(ndim, scores_shape, s4);
    ag__mask_plan p = {.rows3 = {s4[0], s4[1], s4[2]}, .cols = s4[3]};
    if (!mask) return p;
    ag__check_live(op, mask);
    char sm[64], ss[64];
    ag_tensor scores = {.ndim = ndim};
    memcpy(scores.shape, scores_shape, (size_t)ndim * sizeof(int));
    int m4[4];
    pad4(mask->ndim, mask->shape, m4);
    bool ok = mask->ndim >= 1 && mask->ndim <= ndim && m4[3] == s4[3];
    for (int d = 0; d < 3; d++) ok = ok && (m4[d] == s4[d] || m4[d] == 1);
    if (!ok)
        ag__fatal(op, "mask %s does not broadcast to the scores %s (its last dim must be %d, the others equal or 1)",
                  ag_shape_str(mask, sm, sizeof sm), ag_shape_str(&scores, ss, sizeof ss), s4[3]);
    check_unambiguous(op, mask, &scores);
    if (mask->requires_grad)
        ag__fatal(op, "the mask %s requires grad, but masks are constants and receive no gradient",
                  ag_shape_str(mask, sm, sizeof sm));
    int64_t stride = p.cols;
    for (int d = 2; d >= 0; d--) {
        p.stride3[d] = m4[d] == 1 ? 0 : stride;
        stride *= m4[d];
    }
    return p;
}

/* A mask on another device than the scores is refused, not copied: a copy
 * per call would hide an upload per step in a model's inner loop, and
 * masks made after ag_set_device(AG_CUDA) are on the GPU already. */
ag__mask_plan ag__mask_plan_on(const char *op, int ndim, const int *scores_shape, ag_device scores_device,
                               const ag_tensor *mask) {
    if (mask) {
        ag__check_live(op, mask);
        if (mask->device != scores_device) {
            char sm[64], ss[64];
            ag_tensor scores = {.ndim = ndim};
            memcpy(scores.shape, scores_shape, (size_t)ndim * sizeof(int));
            ag__fatal(op, "the mask %s is on %s but the scores %s are on %s: make masks after ag_set_device "
                      "(ag_mask*, ag_mask_padding and ag_mask_batch build them there) or move the mask once with ag_to",
                      ag_shape_str(mask, sm, sizeof sm), ag_device_name(mask->device),
                      ag_shape_str(&scores, ss, sizeof ss), ag_device_name(scores_device));
        }
    }
    return ag__mask_plan_make(op, ndim, scores_shape, mask);
}

/* ---- the row loops, compiled for baseline x86-64 and AVX2 ---- */

AG_SIMD_CLONES
void ag__softmax_slice(const ag__mask_plan *p, const ag_real *mask, int i0, int i1, const ag_real *x, int64_t ld,
                       ag_real scale, ag_real *y) {
    const ag_real *m = mask ? mask + i0 * p->stride3[0] + i1 * p->stride3[1] : NULL;
    for (int r = 0; r < p->rows3[2]; r++)
        ag__softmax_row(x + r * ld, m ? m + r * p->stride3[2] : NULL, scale, y + r * ld, p->cols);
}

AG_SIMD_CLONES
void ag__softmax_rows_grad(const ag_real *y, int64_t ldy, const ag_real *g, ag_real scale, ag_real *gx, int64_t rows,
                           int n, bool accumulate) {
    for (int64_t r = 0; r < rows; r++)
        ag__softmax_row_grad(y + r * ldy, g + r * n, scale, gx + r * n, n, accumulate);
}

/* ---- masked softmax: y = softmax(scale * x + mask) along the last axis ---- */

typedef struct {
    const ag__mask_plan *plan;
    const ag_real *mask;
    const ag_real *x, *g;
    const ag_real *fy;       /* backward: the forward's output */
    ag_real *y, *gx;
    ag_real scale;
    int cols;
    bool fresh;              /* backward: gx is new, store instead of add */
} softmax_job;

/* Slices s0..s1-1 of the scores, s = i0 * rows3[1] + i1. */
static void masked_softmax_slices(void *ctx, int64_t s0, int64_t s1) {
    const softmax_job *j = ctx;
    int64_t slice = (int64_t)j->plan->rows3[2] * j->plan->cols;
    for (int64_t s = s0; s < s1; s++)
        ag__softmax_slice(j->plan, j->mask, (int)(s / j->plan->rows3[1]), (int)(s % j->plan->rows3[1]),
                          j->x + s * slice, j->plan->cols, j->scale, j->y + s * slice);
}

static void softmax_rows_forward_cpu(const ag_real *x, const ag_real *mask, const ag__mask_plan *p, ag_real scale,
                                     ag_real *y, int64_t rows) {
    (void)rows; /* the plan's rows3 */
    softmax_job j = {.plan = p, .mask = mask, .x = x, .y = y, .scale = scale};
    ag__parallel_range((int64_t)p->rows3[0] * p->rows3[1], ag__units_per_part((int64_t)p->rows3[2] * p->cols),
                       masked_softmax_slices, &j);
}

static void masked_softmax_grad_range(void *ctx, int64_t r0, int64_t r1) {
    const softmax_job *j = ctx;
    int64_t at = r0 * j->cols;
    /* Masked entries have y = 0, so they get no gradient (0 in a fresh buffer). */
    ag__softmax_rows_grad(j->fy + at, j->cols, j->g + at, j->scale, j->gx + at, r1 - r0, j->cols, !j->fresh);
}

static void softmax_rows_backward_cpu(const ag_real *y, const ag_real *g, ag_real scale, ag_real *gx, int64_t rows,
                                      int cols, bool fresh) {
    softmax_job j = {.fy = y, .g = g, .gx = gx, .scale = scale, .cols = cols, .fresh = fresh};
    ag__parallel_range(rows, ag__units_per_part(cols), masked_softmax_grad_range, &j);
}

static void masked_softmax_backward(ag_node *n) {
    int cols = n->out->shape[n->out->ndim - 1];
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__softmax_on(n->op, n->out->device)
        ->rows_backward(n->out->data, n->out->grad, (ag_real)n->farg[0], gx, cols ? n->out->size / cols : 0, cols,
                        fresh);
}

static ag_tensor *masked_softmax(const char *op, ag_tensor *x, ag_tensor *mask, double scale) {
    ag_device dev = ag__check_same_device(op, x, NULL); /* alive before its shape is read */
    if (x->ndim < 1) ag__fatal(op, "softmax of a 0-dim tensor (it needs an axis)");
    ag__mask_plan p = ag__mask_plan_on(op, x->ndim, x->shape, dev, mask);
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__softmax_on(op, dev)->rows_forward(x->data, mask ? mask->data : NULL, &p, (ag_real)scale, out->data,
                                          p.cols ? x->size / p.cols : 0);
    ag_node *n = ag__record(op, masked_softmax_backward, out, 1, &x);
    if (n) n->farg[0] = scale;
    return out;
}

ag_tensor *ag_masked_softmax(ag_tensor *x, ag_tensor *mask, double scale) {
    return masked_softmax("ag_masked_softmax", x, mask, scale);
}

ag_tensor *ag_softmax(ag_tensor *x) { return masked_softmax("ag_softmax", x, NULL, 1.0); }

/* ---- log-softmax: y = x - max - log sum e^(x - max) ---- */

AG_SIMD_CLONES
static void log_softmax_rows(const ag_real *X, ag_real *Y, int64_t rows, int cols) {
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *x = X + r * cols;
        ag_real *y = Y + r * cols, max = ag__max_row(x, cols);
        for (int j = 0; j < cols; j++) y[j] = x[j] - max;
        ag_real lse = log(ag__sum_exp_row(y, cols));
        for (int j = 0; j < cols; j++) y[j] -= lse;
    }
}

AG_SIMD_CLONES
static void log_softmax_rows_grad(const ag_real *Y, const ag_real *G, ag_real *GX, int64_t rows, int cols, bool fresh) {
    for (int64_t r = 0; r < rows; r++) { /* dx = g - softmax * sum(g) */
        const ag_real *y = Y + r * cols, *g = G + r * cols;
        ag_real *gx = GX + r * cols, gsum = ag__sum_row(g, cols);
        if (fresh)
            for (int j = 0; j < cols; j++) gx[j] = g[j] - ag__vexp_nonpos(y[j]) * gsum;
        else
            for (int j = 0; j < cols; j++) gx[j] += g[j] - ag__vexp_nonpos(y[j]) * gsum;
    }
}

static void log_softmax_range(void *ctx, int64_t r0, int64_t r1) {
    const softmax_job *j = ctx;
    log_softmax_rows(j->x + r0 * j->cols, j->y + r0 * j->cols, r1 - r0, j->cols);
}

static void log_softmax_grad_range(void *ctx, int64_t r0, int64_t r1) {
    const softmax_job *j = ctx;
    int64_t at = r0 * j->cols;
    log_softmax_rows_grad(j->fy + at, j->g + at, j->gx + at, r1 - r0, j->cols, j->fresh);
}

static void log_rows_forward_cpu(const ag_real *x, ag_real *y, int64_t rows, int cols) {
    softmax_job j = {.x = x, .y = y, .cols = cols};
    ag__parallel_range(rows, ag__units_per_part(cols), log_softmax_range, &j);
}

static void log_rows_backward_cpu(const ag_real *y, const ag_real *g, ag_real *gx, int64_t rows, int cols,
                                  bool fresh) {
    softmax_job j = {.fy = y, .g = g, .gx = gx, .cols = cols, .fresh = fresh};
    ag__parallel_range(rows, ag__units_per_part(cols), log_softmax_grad_range, &j);
}

static void log_softmax_backward(ag_node *n) {
    int cols = n->out->shape[n->out->ndim - 1];
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__softmax_on(n->op, n->out->device)
        ->log_rows_backward(n->out->data, n->out->grad, gx, cols ? n->out->size / cols : 0, cols, fresh);
}

ag_tensor *ag_log_softmax(ag_tensor *x) {
    const char *op = "ag_log_softmax";
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim < 1) ag__fatal(op, "log-softmax of a 0-dim tensor (it needs an axis)");
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    int cols = x->shape[x->ndim - 1];
    ag__softmax_on(op, dev)->log_rows_forward(x->data, out->data, cols ? x->size / cols : 0, cols);
    ag__record(op, log_softmax_backward, out, 1, &x);
    return out;
}

/* ---- softmax along an axis over the valid positions of each example ----
 *
 * x is seen as [outer, n, inner] around the axis; every (outer, inner) pair
 * is one softmax over t < len.  The loops run over inner (contiguous) in the
 * innermost position, so a [B, N, d] pooling normalises all d features of a
 * position at once with per-feature max and sum kept in a small scratch. */

typedef struct {
    int64_t outer, n, inner;
    int64_t per_example; /* outer slices per example (lengths index dim 0) */
} axis_view;

static axis_view view_along(const ag_tensor *x, int axis) {
    axis_view v = {1, x->shape[axis], 1, 1};
    for (int i = 0; i < axis; i++) v.outer *= x->shape[i];
    for (int i = axis + 1; i < x->ndim; i++) v.inner *= x->shape[i];
    v.per_example = x->shape[0] ? v.outer / x->shape[0] : 1;
    return v;
}

static int64_t valid_len(const axis_view *v, const int32_t *lengths, int64_t o) {
    return lengths ? lengths[o / v->per_example] : v->n;
}

/* One example's [n, inner] block: softmax over t < len for every k. */
AG_SIMD_CLONES
static void softmax_len_block(const ag_real *X, ag_real *Y, int64_t len, int64_t n, int64_t inner, ag__key *kmax,
                              ag_real *sum) {
    memset(Y + len * inner, 0, (size_t)((n - len) * inner) * sizeof *Y); /* padding: weight 0 */
    if (len == 0) return;
    for (int64_t k = 0; k < inner; k++) {
        kmax[k] = ag__key_of(X[k]);
        sum[k] = 0;
    }
    for (int64_t t = 1; t < len; t++)
        for (int64_t k = 0; k < inner; k++) {
            ag__key key = ag__key_of(X[t * inner + k]);
            kmax[k] = key > kmax[k] ? key : kmax[k];
        }
    for (int64_t t = 0; t < len; t++)
        for (int64_t k = 0; k < inner; k++) {
            ag_real e = ag__vexp_nonpos(X[t * inner + k] - ag__key_value(kmax[k]));
            Y[t * inner + k] = e;
            sum[k] += e;
        }
    for (int64_t k = 0; k < inner; k++) sum[k] = 1 / sum[k];
    for (int64_t t = 0; t < len; t++)
        for (int64_t k = 0; k < inner; k++) Y[t * inner + k] *= sum[k];
}

/* Its backward: gx[t,k] += y[t,k] (g[t,k] - sum_t' g[t',k] y[t',k]); into
 * a fresh gradient buffer (n rows) it stores, with 0 at padded rows. */
AG_SIMD_CLONES
static void softmax_len_block_grad(const ag_real *Y, const ag_real *G, ag_real *GX, int64_t len, int64_t n,
                                   int64_t inner, ag_real *dot, bool fresh) {
    for (int64_t k = 0; k < inner; k++) dot[k] = 0;
    for (int64_t t = 0; t < len; t++)
        for (int64_t k = 0; k < inner; k++) dot[k] += G[t * inner + k] * Y[t * inner + k];
    if (fresh) {
        for (int64_t t = 0; t < len; t++)
            for (int64_t k = 0; k < inner; k++) GX[t * inner + k] = Y[t * inner + k] * (G[t * inner + k] - dot[k]);
        memset(GX + len * inner, 0, (size_t)((n - len) * inner) * sizeof *GX);
        return;
    }
    for (int64_t t = 0; t < len; t++) /* padded positions had weight 0: no gradient */
        for (int64_t k = 0; k < inner; k++) GX[t * inner + k] += Y[t * inner + k] * (G[t * inner + k] - dot[k]);
}

/* Blocks o0..o1-1 in a part of `per_part` blocks; the part's scratch is
 * 2 * inner values at part * 2 * inner. */
typedef struct {
    axis_view v;
    const int32_t *lengths;
    const ag_real *x, *g;
    const ag_real *fy;       /* backward: the forward's output */
    ag_real *y, *gx;
    ag_real *scratch;
    int64_t per_part;
    bool fresh;              /* backward: gx is new, store instead of add */
    /* softmax pooling: the pooled values, the pooled output [outer, inner],
     * the values' gradient and whether it is new */
    const ag_real *values;
    ag_real *pooled, *gvalues;
    bool fresh_values;
} len_job;

static void softmax_len_range(void *ctx, int64_t o0, int64_t o1) {
    const len_job *j = ctx;
    ag_real *sum = j->scratch + o0 / j->per_part * 2 * j->v.inner;
    ag__key *kmax = (ag__key *)(sum + j->v.inner); /* ag__key is as wide as ag_real */
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * j->v.n * j->v.inner;
        softmax_len_block(j->x + base, j->y + base, valid_len(&j->v, j->lengths, o), j->v.n, j->v.inner, kmax, sum);
    }
}

static void softmax_len_grad_range(void *ctx, int64_t o0, int64_t o1) {
    const len_job *j = ctx;
    ag_real *dot = j->scratch + o0 / j->per_part * 2 * j->v.inner;
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * j->v.n * j->v.inner;
        softmax_len_block_grad(j->fy + base, j->g + base, j->gx + base, valid_len(&j->v, j->lengths, o), j->v.n,
                               j->v.inner, dot, j->fresh);
    }
}

/* ---- softmax pooling (ag__softmax_pool): the len softmax above, then the
 * weighted sum over t in increasing order, as ag_sum_axis of ag_mul's
 * products adds them (the same bits) ---- */

AG_SIMD_CLONES
static void pool_block_sum(const ag_real *A, const ag_real *X, ag_real *out, int64_t len, int64_t inner) {
    for (int64_t k = 0; k < inner; k++) out[k] = 0;
    for (int64_t t = 0; t < len; t++)
        for (int64_t k = 0; k < inner; k++) out[k] += A[t * inner + k] * X[t * inner + k];
}

static void softmax_pool_range(void *ctx, int64_t o0, int64_t o1) {
    const len_job *j = ctx;
    ag_real *sum = j->scratch + o0 / j->per_part * 2 * j->v.inner;
    ag__key *kmax = (ag__key *)(sum + j->v.inner);
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * j->v.n * j->v.inner, len = valid_len(&j->v, j->lengths, o);
        softmax_len_block(j->x + base, j->y + base, len, j->v.n, j->v.inner, kmax, sum);
        pool_block_sum(j->y + base, j->values + base, j->pooled + o * j->v.inner, len, j->v.inner);
    }
}

/* Its backward on one block: the weights' gradient is g x (ag_mul's), then
 * len softmax's backward of it; x's is g alpha. */
AG_SIMD_CLONES
static void pool_block_grad(const ag_real *A, const ag_real *X, const ag_real *G, ag_real *GS, bool fresh_s,
                            ag_real *GX, bool fresh_x, int64_t len, int64_t n, int64_t inner, ag_real *dot) {
    if (GS) {
        for (int64_t k = 0; k < inner; k++) dot[k] = 0;
        for (int64_t t = 0; t < len; t++)
            for (int64_t k = 0; k < inner; k++) dot[k] += G[k] * X[t * inner + k] * A[t * inner + k];
        for (int64_t t = 0; t < len; t++)
            for (int64_t k = 0; k < inner; k++) {
                ag_real d = A[t * inner + k] * (G[k] * X[t * inner + k] - dot[k]);
                GS[t * inner + k] = fresh_s ? d : GS[t * inner + k] + d;
            }
        if (fresh_s) memset(GS + len * inner, 0, (size_t)((n - len) * inner) * sizeof *GS);
    }
    if (GX) {
        for (int64_t t = 0; t < len; t++)
            for (int64_t k = 0; k < inner; k++) {
                ag_real d = G[k] * A[t * inner + k];
                GX[t * inner + k] = fresh_x ? d : GX[t * inner + k] + d;
            }
        if (fresh_x) memset(GX + len * inner, 0, (size_t)((n - len) * inner) * sizeof *GX);
    }
}

static void softmax_pool_grad_range(void *ctx, int64_t o0, int64_t o1) {
    const len_job *j = ctx;
    ag_real *dot = j->scratch + o0 / j->per_part * 2 * j->v.inner;
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * j->v.n * j->v.inner;
        pool_block_grad(j->fy + base, j->values + base, j->g + o * j->v.inner, j->gx ? j->gx + base : NULL, j->fresh,
                        j->gvalues ? j->gvalues + base : NULL, j->fresh_values, valid_len(&j->v, j->lengths, o),
                        j->v.n, j->v.inner, dot);
    }
}

static void run_len_blocks(len_job *j, ag__range_fn fn) {
    j->per_part = ag__units_per_part(j->v.n * j->v.inner);
    int64_t parts = (j->v.outer + j->per_part - 1) / j->per_part;
    j->scratch = ag__arena_alloc((size_t)(parts ? parts : 1) * 2 * (j->v.inner ? j->v.inner : 1) * sizeof(ag_real));
    ag__parallel_range(j->v.outer, j->per_part, fn, j);
}

static void len_forward_cpu(const ag_real *x, ag_real *y, const int32_t *len, int64_t outer, int64_t n,
                            int64_t inner, int64_t per_example) {
    len_job j = {.v = {outer, n, inner, per_example}, .lengths = len, .x = x, .y = y};
    run_len_blocks(&j, softmax_len_range);
}

static void len_backward_cpu(const ag_real *y, const ag_real *g, ag_real *gx, const int32_t *len, int64_t outer,
                             int64_t n, int64_t inner, int64_t per_example, bool fresh) {
    len_job j = {.v = {outer, n, inner, per_example}, .lengths = len, .fy = y, .g = g, .gx = gx, .fresh = fresh};
    run_len_blocks(&j, softmax_len_grad_range);
}

static void pool_forward_cpu(const ag_real *s, const ag_real *x, ag_real *alpha, ag_real *out, const int32_t *len,
                             int64_t outer, int64_t n, int64_t inner, int64_t per_example) {
    len_job j = {.v = {outer, n, inner, per_example}, .lengths = len, .x = s, .y = alpha, .values = x, .pooled = out};
    run_len_blocks(&j, softmax_pool_range);
}

static void pool_backward_cpu(const ag_real *alpha, const ag_real *x, const ag_real *g, ag_real *gs, bool fresh_s,
                              ag_real *gx, bool fresh_x, const int32_t *len, int64_t outer, int64_t n, int64_t inner,
                              int64_t per_example) {
    len_job j = {.v = {outer, n, inner, per_example}, .lengths = len, .fy = alpha, .values = x, .g = g, .gx = gs,
                 .fresh = fresh_s, .gvalues = gx, .fresh_values = fresh_x};
    run_len_blocks(&j, softmax_pool_grad_range);
}

/* n->saved: the lengths, in the output's device memory (or NULL). */
static void softmax_axis_len_backward(ag_node *n) {
    axis_view v = view_along(n->in[0], n->iarg[0]);
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__softmax_on(n->op, n->out->device)
        ->len_backward(n->out->data, n->out->grad, gx, n->saved, v.outer, v.n, v.inner, v.per_example, fresh);
}

ag_tensor *ag_softmax_axis_len(ag_tensor *x, int axis, const int32_t *lengths) {
    const char *op = "ag_softmax_axis_len";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    axis = ag__axis(op, x, axis);
    if (lengths && axis == 0)
        ag__fatal(op, "lengths index dim 0 of %s, so the softmax axis cannot be 0", ag_shape_str(x, sx, sizeof sx));
    axis_view v = view_along(x, axis);
    const int32_t *saved_len = NULL;
    if (lengths) {
        for (int b = 0; b < x->shape[0]; b++)
            if (lengths[b] < 0 || lengths[b] > v.n)
                ag__fatal(op, "lengths[%d] = %d is outside [0, %lld] (axis %d of %s)", b, (int)lengths[b],
                          (long long)v.n, axis, ag_shape_str(x, sx, sizeof sx));
        /* The caller's array may change before backward runs: keep a copy
         * (on the GPU, the one copy its kernels read). */
        saved_len = ag__step_i32_on(dev, lengths, x->shape[0]);
    }
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__softmax_on(op, dev)->len_forward(x->data, out->data, saved_len, v.outer, v.n, v.inner, v.per_example);
    ag_node *n = ag__record(op, softmax_axis_len_backward, out, 1, &x);
    if (n) {
        n->iarg[0] = axis;
        n->saved = (void *)saved_len; /* read only: the backward reads the lengths */
    }
    return out;
}

/* What the pooling's backward reads, in the device's memory: the weights,
 * and the lengths (or NULL). */
typedef struct {
    const ag_real *alpha;
    const int32_t *len;
} pool_saved;

/* inputs scores, x; n->saved: a pool_saved. */
static void softmax_pool_backward(ag_node *n) {
    ag_tensor *scores = n->in[0], *x = n->in[1];
    const pool_saved *ps = n->saved;
    axis_view v = view_along(scores, 1);
    bool fresh_s = false, fresh_x = false;
    ag_real *gs = ag__wants(n, 0) ? ag__grad_write(scores, &fresh_s) : NULL;
    ag_real *gx = ag__wants(n, 1) ? ag__grad_write(x, &fresh_x) : NULL;
    ag__softmax_on(n->op, n->out->device)
        ->pool_backward(ps->alpha, x->data, n->out->grad, gs, fresh_s, gx, fresh_x, ps->len, v.outer, v.n, v.inner,
                        v.per_example);
}

ag_tensor *ag__softmax_pool(ag_tensor *scores, ag_tensor *x, const int32_t *lengths, ag_tensor **alpha) {
    const char *op = "ag__softmax_pool";
    char ss[64], sx[64];
    ag_device dev = ag__check_same_device(op, scores, x);
    if (scores->ndim != 3 || x->ndim != 3 || memcmp(scores->shape, x->shape, 3 * sizeof(int)) != 0)
        ag__fatal(op, "scores %s and x %s: want both [B,N,d]", ag_shape_str(scores, ss, sizeof ss),
                  ag_shape_str(x, sx, sizeof sx));
    int B = x->shape[0], N = x->shape[1], d = x->shape[2];
    const int32_t *saved_len = NULL;
    if (lengths) {
        for (int b = 0; b < B; b++)
            if (lengths[b] < 0 || lengths[b] > N)
                ag__fatal(op, "lengths[%d] = %d is outside [0, %d] (x %s)", b, (int)lengths[b], N,
                          ag_shape_str(x, sx, sizeof sx));
        saved_len = ag__step_i32_on(dev, lengths, B); /* the caller's array may change before backward */
    }
    axis_view v = view_along(x, 1);
    ag_tensor *weights = ag__empty_on(dev, 3, x->shape), *out = ag__empty_on(dev, 2, (int[]){B, d});
    ag__softmax_on(op, dev)->pool_forward(scores->data, x->data, weights->data, out->data, saved_len, v.outer, v.n,
                                          v.inner, v.per_example);
    ag_node *n = ag__record(op, softmax_pool_backward, out, 2, (ag_tensor *[]){scores, x});
    if (n) {
        pool_saved *ps = ag__arena_alloc(sizeof *ps);
        *ps = (pool_saved){weights->data, saved_len};
        n->saved = ps;
    }
    if (alpha) { /* a constant view of the weights, for heatmaps */
        ag__stamp(weights, "ag__softmax_pool(weights)");
        *alpha = weights;
    }
    return out;
}

/* ---- masked softmax along any axis: y = softmax(scale * x + mask) ----
 *
 * Along the last axis this is ag_masked_softmax (its row kernels).  Along
 * another axis x is seen as [outer, n, inner]: every (outer o, inner k) is
 * one softmax over t, and the loops run over inner (contiguous) innermost,
 * as ag_softmax_axis_len's, so no transposed copy is made.  The mask is
 * read through 4-D strides (ops/softmax.h ag__kaxis); its offset splits
 * into a part from o (the dims before the axis), t * stride along the
 * axis, and a part from k (the dims after it), computed once per op. */

/* The mask offset of x's element (o, 0, k), from the dims before (o) or
 * after (k) the axis. */
static int64_t axis_mask_offset(const ag__kaxis *p, int64_t index, bool before) {
    int64_t off = 0;
    for (int d = before ? p->axis4 - 1 : 3; d >= 0 && (before || d > p->axis4); d--) {
        off += index % p->shape4[d] * p->mstride4[d];
        index /= p->shape4[d];
    }
    return off;
}

/* One [n, inner] block of column softmaxes; mo[k] is column k's mask
 * offset (from the block's mask base m), mx and sum scratch [inner]. */
AG_SIMD_CLONES
static void softmax_axis_block(const ag_real *X, const ag_real *m, const int64_t *mo, int64_t mt, ag_real scale,
                               ag_real *Y, int64_t n, int64_t inner, ag_real *mx, ag_real *sum) {
    for (int64_t k = 0; k < inner; k++) mx[k] = -INFINITY, sum[k] = 0;
    for (int64_t t = 0; t < n; t++) {
        const ag_real *x = X + t * inner, *mr = m ? m + t * mt : NULL;
        ag_real *y = Y + t * inner;
        if (mr)
            for (int64_t k = 0; k < inner; k++) y[k] = scale * x[k] + mr[mo[k]];
        else
            for (int64_t k = 0; k < inner; k++) y[k] = scale * x[k];
        for (int64_t k = 0; k < inner; k++) mx[k] = y[k] > mx[k] ? y[k] : mx[k];
    }
    /* A fully masked column (max -inf) has every z - max NaN or -inf: its
     * shift is taken as 0, so each e^(-inf) is 0, and 1/sum is never used. */
    for (int64_t k = 0; k < inner; k++) mx[k] = mx[k] == -INFINITY ? 0 : mx[k];
    for (int64_t t = 0; t < n; t++) {
        ag_real *y = Y + t * inner;
        for (int64_t k = 0; k < inner; k++) {
            y[k] = ag__vexp_nonpos(y[k] - mx[k]);
            sum[k] += y[k];
        }
    }
    for (int64_t k = 0; k < inner; k++) sum[k] = sum[k] > 0 ? 1 / sum[k] : 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < inner; k++) Y[t * inner + k] *= sum[k];
}

/* Its backward: gx[t,k] (+)= scale y[t,k] (g[t,k] - sum_t' g y); dot scratch [inner]. */
AG_SIMD_CLONES
static void softmax_axis_block_grad(const ag_real *Y, const ag_real *G, ag_real scale, ag_real *GX, int64_t n,
                                    int64_t inner, ag_real *dot, bool fresh) {
    for (int64_t k = 0; k < inner; k++) dot[k] = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t k = 0; k < inner; k++) dot[k] += G[t * inner + k] * Y[t * inner + k];
    for (int64_t t = 0; t < n; t++) {
        const ag_real *y = Y + t * inner, *g = G + t * inner;
        ag_real *gx = GX + t * inner;
        if (fresh)
            for (int64_t k = 0; k < inner; k++) gx[k] = scale * y[k] * (g[k] - dot[k]);
        else
            for (int64_t k = 0; k < inner; k++) gx[k] += scale * y[k] * (g[k] - dot[k]);
    }
}

typedef struct {
    const ag__kaxis *p;
    const ag_real *x, *mask, *g;
    const ag_real *fy;       /* backward: the forward's output */
    ag_real *y, *gx;
    const int64_t *mo;       /* the mask offset of each inner k */
    ag_real *scratch;        /* 2 * inner per part */
    ag_real scale;
    int64_t per_part;
    bool fresh;
} axis_job;

static void softmax_axis_range(void *ctx, int64_t o0, int64_t o1) {
    const axis_job *j = ctx;
    const ag__kaxis *p = j->p;
    ag_real *mx = j->scratch + o0 / j->per_part * 2 * p->inner, *sum = mx + p->inner;
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * p->n * p->inner;
        const ag_real *m = j->mask ? j->mask + axis_mask_offset(p, o, true) : NULL;
        softmax_axis_block(j->x + base, m, j->mo, p->mstride4[p->axis4], j->scale, j->y + base, p->n, p->inner, mx,
                           sum);
    }
}

static void softmax_axis_grad_range(void *ctx, int64_t o0, int64_t o1) {
    const axis_job *j = ctx;
    const ag__kaxis *p = j->p;
    ag_real *dot = j->scratch + o0 / j->per_part * 2 * p->inner;
    for (int64_t o = o0; o < o1; o++) {
        int64_t base = o * p->n * p->inner;
        softmax_axis_block_grad(j->fy + base, j->g + base, j->scale, j->gx + base, p->n, p->inner, dot, j->fresh);
    }
}

static void run_axis_blocks(axis_job *j, ag__range_fn fn) {
    const ag__kaxis *p = j->p;
    j->per_part = ag__units_per_part(p->n * p->inner);
    int64_t parts = (p->outer + j->per_part - 1) / j->per_part;
    j->scratch = ag__arena_alloc((size_t)(parts ? parts : 1) * 2 * (p->inner ? p->inner : 1) * sizeof(ag_real));
    ag__parallel_range(p->outer, j->per_part, fn, j);
}

static void axis_forward_cpu(const ag__kaxis *p, const ag_real *x, const ag_real *mask, ag_real scale, ag_real *y) {
    int64_t *mo = ag__arena_alloc((size_t)(p->inner ? p->inner : 1) * sizeof *mo);
    for (int64_t k = 0; k < p->inner; k++) mo[k] = axis_mask_offset(p, k, false);
    axis_job j = {.p = p, .x = x, .mask = mask, .y = y, .mo = mo, .scale = scale};
    run_axis_blocks(&j, softmax_axis_range);
}

static void axis_backward_cpu(const ag__kaxis *p, const ag_real *y, const ag_real *g, ag_real scale, ag_real *gx,
                              bool fresh) {
    axis_job j = {.p = p, .fy = y, .g = g, .gx = gx, .scale = scale, .fresh = fresh};
    run_axis_blocks(&j, softmax_axis_grad_range);
}

/* n->saved: the plan. */
static void masked_softmax_axis_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__softmax_on(n->op, n->out->device)
        ->axis_backward(n->saved, n->out->data, n->out->grad, (ag_real)n->farg[0], gx, fresh);
}

/* Along an axis other than the last, the mask has x's dims, each equal to
 * x's or 1, and x's size along the axis: with fewer dims, NumPy's right
 * alignment would pair a [N,N] mask with the last two axes of [B,N,N,d]
 * scores - the wrong ones for a softmax over axis 2 - and give weights
 * without complaint. */
static void check_axis_mask(const char *op, const ag_tensor *x, int axis, const ag_tensor *mask) {
    char sm[64], sx[64];
    bool ok = mask->ndim == x->ndim && mask->shape[axis] == x->shape[axis];
    for (int d = 0; ok && d < x->ndim; d++) ok = mask->shape[d] == x->shape[d] || mask->shape[d] == 1;
    if (!ok) {
        char want[96] = "[";
        size_t k = 1;
        for (int d = 0; d < x->ndim && k < sizeof want; d++)
            k += (size_t)snprintf(want + k, sizeof want - k, "%s%s%d", d ? "," : "", d == axis ? "" : "1|",
                                  x->shape[d]);
        if (k < sizeof want) snprintf(want + k, sizeof want - k, "]");
        ag__fatal(op, "mask %s does not fit the softmax of %s along axis %d: along an axis other than the last the "
                  "mask has the scores' %d dims (ag_reshape: a [Nq,Nk] mask over axis 2 of [B,Nq,Nk,d] is "
                  "[1,Nq,Nk,1]), %d along the axis and each other dim equal or 1: %s",
                  ag_shape_str(mask, sm, sizeof sm), ag_shape_str(x, sx, sizeof sx), axis, x->ndim, x->shape[axis],
                  want);
    }
    if (mask->requires_grad)
        ag__fatal(op, "the mask %s requires grad, but masks are constants and receive no gradient",
                  ag_shape_str(mask, sm, sizeof sm));
}

ag_tensor *ag_masked_softmax_axis(ag_tensor *x, int axis, ag_tensor *mask, double scale) {
    const char *op = "ag_masked_softmax_axis";
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim < 1) ag__fatal(op, "softmax of a 0-dim tensor (it needs an axis)");
    axis = ag__axis(op, x, axis);
    if (axis == x->ndim - 1) return masked_softmax(op, x, mask, scale); /* the row kernels, the same rules */
    if (mask) {
        ag__check_live(op, mask);
        if (mask->device != dev) ag__mask_plan_on(op, x->ndim, x->shape, dev, mask); /* fatal, naming both devices */
        check_axis_mask(op, x, axis, mask);
    }
    axis_view v = view_along(x, axis);
    ag__kaxis *p = ag__arena_alloc(sizeof *p);
    *p = (ag__kaxis){.outer = v.outer, .n = v.n, .inner = v.inner, .axis4 = axis + 4 - x->ndim};
    int64_t stride = 1;
    for (int d = 3; d >= 0; d--) {
        int xd = d - (4 - x->ndim), size = xd >= 0 ? x->shape[xd] : 1, msize = mask && xd >= 0 ? mask->shape[xd] : 1;
        p->shape4[d] = size;
        p->mstride4[d] = msize == 1 ? 0 : stride;
        stride *= msize;
    }
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__softmax_on(op, dev)->axis_forward(p, x->data, mask ? mask->data : NULL, (ag_real)scale, out->data);
    ag_node *n = ag__record(op, masked_softmax_axis_backward, out, 1, &x);
    if (n) {
        n->saved = p;
        n->farg[0] = scale;
    }
    return out;
}

/* ---- softmax-gated mixture: out = sum_g softmax_g(z_g) * S_g, per feature ----
 *
 * z is [..., n*d] (source g's logits for feature l at g*d + l), each source
 * [..., d].  One pass per row: max over the n logits, exps, weights a_g,
 * the weighted sum; the weights are kept for backward, which needs nothing
 * else: with out = sum_h a_h S_h,
 *     dS_g = a_g dout,   dz_g = a_g dout (S_g - out).
 * It replaces concat + softmax over a [.., n, d] axis + product + sum
 * (MPSAN's position fusion): four [rows, n, d] passes and their gradients.
 *
 * With a reference source (ag_softmax_mix_ref) z holds n-1 logits per
 * feature and the last source's is 0.  A softmax sees only differences of
 * its logits, so any gate is one of these with z_g - z_{n-1}: a model that
 * computes its logits by a linear layer can compute the differences
 * instead, with n-1 columns of weights where it had n (MPSAN, models/mpsan.c). */

enum { MIX_MAX_SOURCES = AG_KMIX_MAX_SOURCES };

typedef ag__kmix mix_job; /* ops/softmax.h: the same job on either device */

/* Is row r within its example's length (always, without lengths)? */
static inline bool mix_live(const mix_job *j, int64_t r) { return !j->len || r % j->N < j->len[r / j->N]; }

/* Features in chunks of MIX_CHUNK, every inner loop over contiguous
 * features (so each vectorises): the max over sources, the exps and their
 * sum, then the normalised weights and the weighted sum. */
enum { MIX_CHUNK = 64 };

AG_SIMD_CLONES static void mix_forward_rows(void *ctx, int64_t r0, int64_t r1) {
    const mix_job *j = ctx;
    int n = j->n, d = j->d, nz = j->nz;
    bool ref = nz < n; /* the last source's logit is 0 */
    for (int64_t r = r0; r < r1; r++) {
        if (!mix_live(j, r)) { /* padding: out 0, no gate (backward skips the row) */
            memset(j->y + r * d, 0, (size_t)d * sizeof(ag_real));
            continue;
        }
        for (int l0 = 0; l0 < d; l0 += MIX_CHUNK) {
            int w = d - l0 < MIX_CHUNK ? d - l0 : MIX_CHUNK;
            const ag_real *z = j->z + r * nz * d + l0;
            ag_real *a = j->gate + r * n * d + l0;
            ag_real m[MIX_CHUNK], sum[MIX_CHUNK], acc[MIX_CHUNK];
            for (int l = 0; l < w; l++) m[l] = ref ? 0 : z[l], sum[l] = 0, acc[l] = 0;
            for (int g = ref ? 0 : 1; g < nz; g++)
                for (int l = 0; l < w; l++) m[l] = z[g * d + l] > m[l] ? z[g * d + l] : m[l];
            for (int g = 0; g < nz; g++)
                for (int l = 0; l < w; l++) {
                    a[g * d + l] = ag__vexp_nonpos(z[g * d + l] - m[l]);
                    sum[l] += a[g * d + l];
                }
            if (ref)
                for (int l = 0; l < w; l++) {
                    a[nz * d + l] = ag__vexp_nonpos(-m[l]);
                    sum[l] += a[nz * d + l];
                }
            for (int l = 0; l < w; l++) sum[l] = 1 / sum[l];
            for (int g = 0; g < n; g++) {
                const ag_real *s = j->src[g] + r * d + l0;
                for (int l = 0; l < w; l++) {
                    a[g * d + l] *= sum[l];
                    acc[l] += a[g * d + l] * s[l];
                }
            }
            for (int l = 0; l < w; l++) j->y[r * d + l0 + l] = acc[l];
        }
    }
}

AG_SIMD_CLONES static void mix_backward_rows(void *ctx, int64_t r0, int64_t r1) {
    const mix_job *j = ctx;
    int n = j->n, d = j->d, nz = j->nz;
    for (int64_t r = r0; r < r1; r++) {
        if (!mix_live(j, r)) { /* padding: no gradient (stored as 0 into fresh buffers) */
            if (j->dz && j->fresh_z) memset(j->dz + r * nz * d, 0, (size_t)nz * d * sizeof(ag_real));
            for (int g = 0; g < n; g++)
                if (j->dsrc[g] && j->fresh_src[g]) memset(j->dsrc[g] + r * d, 0, (size_t)d * sizeof(ag_real));
            continue;
        }
        const ag_real *a = j->gate + r * n * d, *out = j->out + r * d, *dout = j->dout + r * d;
        for (int g = 0; g < n; g++) {
            const ag_real *ag = a + g * d, *s = j->src[g] + r * d;
            if (j->dz && g < nz) { /* the reference logit is a constant */
                ag_real *dz = j->dz + r * nz * d + g * d;
                if (j->fresh_z)
                    for (int l = 0; l < d; l++) dz[l] = ag[l] * dout[l] * (s[l] - out[l]);
                else
                    for (int l = 0; l < d; l++) dz[l] += ag[l] * dout[l] * (s[l] - out[l]);
            }
            if (j->dsrc[g]) {
                ag_real *ds = j->dsrc[g] + r * d;
                if (j->fresh_src[g])
                    for (int l = 0; l < d; l++) ds[l] = ag[l] * dout[l];
                else
                    for (int l = 0; l < d; l++) ds[l] += ag[l] * dout[l];
            }
        }
    }
}

static int64_t mix_grain(int n, int d) { return ag__units_per_part((int64_t)(n + 1) * (d > 0 ? d : 1)); }

static void mix_forward_cpu(const ag__kmix *j, int64_t rows) {
    ag__parallel_range(rows, mix_grain(j->n, j->d), mix_forward_rows, (void *)j);
}

static void mix_backward_cpu(const ag__kmix *j, int64_t rows) {
    ag__parallel_range(rows, mix_grain(j->n, j->d), mix_backward_rows, (void *)j);
}

/* Source g of a mixture: the elements of input `input` (of the node: 1..)
 * from `at` on - a whole tensor (at 0), or a plane of a stack. */
typedef struct {
    int input;
    int64_t at;
} mix_source;

/* What backward needs besides the inputs. */
typedef struct {
    ag_real *gate;
    const int32_t *len; /* a copy of the lengths, or NULL */
    mix_source src[MIX_MAX_SOURCES];
} mix_saved;

static void softmax_mix_backward(ag_node *n) {
    int ns = n->iarg[0], d = n->iarg[1];
    ag_tensor *z = n->in[0];
    const mix_saved *sv = n->saved;
    mix_job j = {.n = ns, .d = d, .nz = n->iarg[3], .gate = sv->gate, .out = n->out->data, .dout = n->out->grad,
                 .len = sv->len, .N = n->iarg[2]};
    if (ag__wants(n, 0)) j.dz = ag__grad_write(z, &j.fresh_z);
    ag_real *grad[1 + MIX_MAX_SOURCES] = {0};
    bool fresh[1 + MIX_MAX_SOURCES] = {0};
    for (int g = 0; g < ns; g++) {
        const mix_source *s = &sv->src[g];
        j.src[g] = n->in[s->input]->data + s->at;
        if (!ag__wants(n, s->input)) continue;
        if (!grad[s->input]) grad[s->input] = ag__grad_write(n->in[s->input], &fresh[s->input]);
        /* a source given twice accumulates: its first use may store into
         * a fresh buffer, the repeats add (rows run the sources in order,
         * so the store comes first); planes of one stack are apart */
        bool repeat = false;
        for (int h = 0; h < g; h++) repeat |= sv->src[h].input == s->input && sv->src[h].at == s->at;
        j.dsrc[g] = grad[s->input] + s->at;
        j.fresh_src[g] = fresh[s->input] && !repeat;
    }
    ag__softmax_on(n->op, n->out->device)->mix_backward(&j, d > 0 ? n->out->size / d : 0);
}

/* The mixture of the n sources src (each of `shape`, inputs[src[g].input]
 * from src[g].at), the node's inputs z and then `inputs` (n_inputs). */
static ag_tensor *mix_of(const char *op, ag_tensor *z, const ag_tensor *shape, ag_tensor *const *inputs,
                         int n_inputs, const mix_source *src, int n, const int32_t *lengths, bool ref) {
    char sz[64], s0[64];
    ag_device dev = z->device;
    int d = shape->ndim > 0 ? shape->shape[shape->ndim - 1] : 1, lead = shape->ndim - 1, nz = n - ref;
    bool flat = z->ndim == shape->ndim && z->ndim >= 1 && z->shape[lead] == nz * d;
    bool split = z->ndim == shape->ndim + 1 && z->shape[lead] == nz && z->shape[lead + 1] == d;
    for (int k = 0; k < lead; k++) flat = flat && z->shape[k] == shape->shape[k], split = split && z->shape[k] == shape->shape[k];
    if (!flat && !split)
        ag__fatal(op, "logits %s do not fit %d sources of %s%s (want [..., %d] or [..., %d, %d])",
                  ag_shape_str(z, sz, sizeof sz), n, ag_shape_str(shape, s0, sizeof s0),
                  ref ? ", the last one the reference" : "", nz * d, nz, d);
    const int32_t *len = NULL;
    if (lengths) {
        if (shape->ndim != 3)
            ag__fatal(op, "lengths need sources [B, N, d], got %s", ag_shape_str(shape, s0, sizeof s0));
        int B = shape->shape[0], N = shape->shape[1];
        for (int b = 0; b < B; b++)
            if (lengths[b] < 0 || lengths[b] > N)
                ag__fatal(op, "lengths[%d] = %d is outside [0, %d] (sources %s)", b, (int)lengths[b], N,
                          ag_shape_str(shape, s0, sizeof s0));
        len = ag__step_i32_on(dev, lengths, B); /* the caller's may change before backward */
    }
    ag_tensor *out = ag__empty_on(dev, shape->ndim, shape->shape);
    int64_t rows = d > 0 ? shape->size / d : 0;
    size_t gate_bytes = (size_t)(rows * n * d > 0 ? rows * n * d : 1) * sizeof(ag_real);
    mix_job j = {.z = z->data, .y = out->data, .n = n, .d = d, .nz = nz, .len = len, .N = len ? shape->shape[1] : 1,
                 .gate = ag__step_alloc_on(dev, gate_bytes)};
    for (int g = 0; g < n; g++) j.src[g] = inputs[src[g].input - 1]->data + src[g].at;
    ag__softmax_on(op, dev)->mix_forward(&j, rows);
    ag_tensor *in[1 + MIX_MAX_SOURCES] = {z};
    for (int k = 0; k < n_inputs; k++) in[1 + k] = inputs[k];
    ag_node *node = ag__record(op, softmax_mix_backward, out, 1 + n_inputs, in);
    if (node) {
        mix_saved *sv = ag__arena_alloc(sizeof *sv);
        *sv = (mix_saved){.gate = j.gate, .len = len};
        memcpy(sv->src, src, (size_t)n * sizeof *src);
        node->saved = sv;
        node->iarg[0] = n;
        node->iarg[1] = d;
        node->iarg[2] = j.N;
        node->iarg[3] = nz;
    }
    return out;
}

static ag_tensor *softmax_mix(const char *op, ag_tensor *z, ag_tensor *const *sources, int n, const int32_t *lengths,
                              bool ref) {
    char ss[64], s0[64];
    ag__need_array(op, "the sources array", sources);
    if (n < 1 + ref || n > MIX_MAX_SOURCES) ag__fatal(op, "%d sources (want %d to %d)", n, 1 + ref, MIX_MAX_SOURCES);
    ag__check_same_device(op, z, NULL);
    const ag_tensor *first = sources[0];
    if (!first) ag__fatal(op, "source 0 is NULL");
    if (first->ndim < 1) ag__fatal(op, "sources must have a feature axis, got %s", ag_shape_str(first, s0, sizeof s0));
    mix_source src[MIX_MAX_SOURCES];
    for (int g = 0; g < n; g++) {
        if (!sources[g]) ag__fatal(op, "source %d is NULL", g);
        ag__check_same_device(op, z, sources[g]);
        if (!ag_same_shape(sources[g], first))
            ag__fatal(op, "source %d is %s but source 0 is %s (all sources share one shape)", g,
                      ag_shape_str(sources[g], ss, sizeof ss), ag_shape_str(first, s0, sizeof s0));
        src[g] = (mix_source){.input = 1 + g};
        for (int h = 0; h < g; h++) /* a tensor given twice: one input, its first */
            if (sources[h] == sources[g] && src[g].input == 1 + g) src[g].input = 1 + h;
    }
    return mix_of(op, z, first, sources, n, src, n, lengths, ref);
}

ag_tensor *ag__softmax_mix_ref_planes(ag_tensor *z, ag_tensor *stack, ag_tensor *ref, const int32_t *lengths) {
    const char *op = "ag__softmax_mix_ref_planes";
    char ss[64], sr[64];
    ag__check_same_device(op, z, stack);
    ag__check_same_device(op, z, ref);
    int G = stack->ndim >= 2 ? stack->shape[0] : 0;
    bool fits = stack->ndim == ref->ndim + 1 && G >= 1 && G + 1 <= MIX_MAX_SOURCES;
    for (int k = 0; fits && k < ref->ndim; k++) fits = stack->shape[k + 1] == ref->shape[k];
    if (!fits || ref->ndim < 1)
        ag__fatal(op, "stack %s and reference %s: want the stack [G, ...] of G <= %d planes of the reference's shape",
                  ag_shape_str(stack, ss, sizeof ss), ag_shape_str(ref, sr, sizeof sr), MIX_MAX_SOURCES - 1);
    mix_source src[MIX_MAX_SOURCES];
    for (int g = 0; g < G; g++) src[g] = (mix_source){.input = 1, .at = g * ref->size};
    src[G] = (mix_source){.input = 2};
    return mix_of(op, z, ref, (ag_tensor *[]){stack, ref}, 2, src, G + 1, lengths, true);
}

ag_tensor *ag_softmax_mix(ag_tensor *z, ag_tensor *const *sources, int n) {
    return softmax_mix("ag_softmax_mix", z, sources, n, NULL, false);
}

ag_tensor *ag_softmax_mix_len(ag_tensor *z, ag_tensor *const *sources, int n, const int32_t *lengths) {
    return softmax_mix("ag_softmax_mix_len", z, sources, n, lengths, false);
}

ag_tensor *ag_softmax_mix_ref(ag_tensor *z, ag_tensor *const *sources, int n, const int32_t *lengths) {
    return softmax_mix("ag_softmax_mix_ref", z, sources, n, lengths, true);
}

/* ---- the CPU's table (ops/softmax.h; CUDA's is in ops/cuda/softmax.cu) ---- */

static const ag__softmax_kernels softmax_cpu = {
    .rows_forward = softmax_rows_forward_cpu,
    .rows_backward = softmax_rows_backward_cpu,
    .log_rows_forward = log_rows_forward_cpu,
    .log_rows_backward = log_rows_backward_cpu,
    .len_forward = len_forward_cpu,
    .len_backward = len_backward_cpu,
    .pool_forward = pool_forward_cpu,
    .pool_backward = pool_backward_cpu,
    .mix_forward = mix_forward_cpu,
    .mix_backward = mix_backward_cpu,
    .axis_forward = axis_forward_cpu,
    .axis_backward = axis_backward_cpu,
};
AG_DISPATCH(softmax, softmax_cpu)
