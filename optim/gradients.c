/* gradients.c - what happens to gradients between backward and the
 * optimizer step: global-norm clipping and the L2 penalty of MODELS.md.
 * Sums run in double so the norm does not depend on the real type's
 * rounding more than it must. */
#include "../graph/device.h"
#include "../ops/cuda/kernels.h"

/* Sums of squares in fixed blocks, each in 8 double lanes, the blocks then
 * added in order: deterministic for any thread count, and vectorised (a
 * single running double was a 4-cycle add chain: 10 ms over the LM's 7M
 * gradients). */
enum { SQ_BLOCK = AG_SQ_BLOCK, SQ_LANES = AG_SQ_LANES }; /* the GPU adds the same way (optim/cuda/optimizer.cu) */

typedef struct {
    const ag_real *x;
    ag_real *y;
    int64_t n;
    double *block_sq;
    ag_real scale;
} grad_job;

AG_SIMD_CLONES static void block_squares(void *ctx, int64_t b0, int64_t b1) {
    const grad_job *j = ctx;
    for (int64_t b = b0; b < b1; b++) {
        const ag_real *x = j->x + b * SQ_BLOCK;
        int64_t n = j->n - b * SQ_BLOCK < SQ_BLOCK ? j->n - b * SQ_BLOCK : SQ_BLOCK, i = 0;
        double acc[SQ_LANES] = {0};
        for (; i + SQ_LANES <= n; i += SQ_LANES)
            for (int l = 0; l < SQ_LANES; l++) acc[l] += (double)x[i + l] * (double)x[i + l];
        for (; i < n; i++) acc[i % SQ_LANES] += (double)x[i] * (double)x[i];
        double s = 0;
        for (int l = 0; l < SQ_LANES; l++) s += acc[l];
        j->block_sq[b] = s;
    }
}

/* The blocks' sums in order: the same bits on either device. */
static double sum_blocks(const double *block_sq, int64_t blocks) {
    double s = 0;
    for (int64_t b = 0; b < blocks; b++) s += block_sq[b];
    return s;
}

/* A GPU array's block sums come back to the host: the one wait of a
 * clipped step (the clip decision is the host's).  Added to *acc one block
 * at a time, or summed first (acc NULL): each as its CPU caller does. */
static double sum_squares_cuda(const ag_real *x, int64_t n, double *acc) {
    int64_t blocks = (n + SQ_BLOCK - 1) / SQ_BLOCK;
    size_t bytes = (size_t)blocks * sizeof(double);
    double *dev = ag__cuda_arena_alloc(bytes), stack[64], *host = blocks <= 64 ? stack : ag_arena_alloc(bytes);
    ag__sum_squares_blocks_cuda(x, n, dev);
    ag__cuda_check_launch("gradient norm");
    ag__cuda_copy(host, AG_CPU, dev, AG_CUDA, bytes);
    if (!acc) return sum_blocks(host, blocks);
    for (int64_t b = 0; b < blocks; b++) *acc += host[b];
    return *acc;
}

static double sum_squares(const ag_real *x, int64_t n, ag_device dev) {
    int64_t blocks = (n + SQ_BLOCK - 1) / SQ_BLOCK;
    if (blocks == 0) return 0;
    if (dev == AG_CUDA) return sum_squares_cuda(x, n, NULL);
    double stack[64];
    grad_job j = {.x = x, .n = n, .block_sq = blocks <= 64 ? stack : ag_arena_alloc((size_t)blocks * sizeof(double))};
    ag__parallel_range(blocks, 16, block_squares, &j);
    return sum_blocks(j.block_sq, blocks);
}

AG_SIMD_CLONES static void scale_range(void *ctx, int64_t i0, int64_t i1) {
    const grad_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] *= j->scale;
}

double ag_clip_grad_norm(ag_params *ps, double max_norm) {
    double sq = 0;
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        if (p->grad && p->requires_grad) sq += sum_squares(p->grad, p->size, p->device);
    }
    double norm = sqrt(sq);
    /* torch.nn.utils.clip_grad_norm_: the 1e-6 keeps the clipped norm just
     * under max_norm and the division finite.  A non-finite norm is
     * returned untouched for the caller to act on (skip the step). */
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
        for (int i = 0; i < ps->count; i++) {
            ag_tensor *p = ps->items[i];
            if (!p->grad || !p->requires_grad) continue;
            if (p->device == AG_CUDA) {
                ag__affine_forward_cuda(p->grad, p->grad, (ag_real)coef, 0, p->size);
                ag__cuda_check_launch("ag_clip_grad_norm");
                continue;
            }
            grad_job j = {.y = p->grad, .scale = (ag_real)coef};
            ag__parallel_range(p->size, AG_GRAIN_ELEMENTWISE, scale_range, &j);
        }
    }
    return norm;
}

double ag_grad_norm(const ag_params *ps) {
    double sq = 0;
    for (int i = 0; i < ps->count; i++)
        if (ps->items[i]->grad) sq += sum_squares(ps->items[i]->grad, ps->items[i]->size, ps->items[i]->device);
    return sqrt(sq);
}

double ag_params_norm(const ag_params *ps) {
    double sq = 0;
    for (int i = 0; i < ps->count; i++) sq += sum_squares(ps->items[i]->data, ps->items[i]->size, ps->items[i]->device);
    return sqrt(sq);
}

ag_tensor *ag_params_find_nonfinite(const ag_params *ps, bool grads, int64_t *at) {
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        const ag_real *x = grads ? p->grad : p->data;
        double v;
        int64_t j = x ? ag__first_nonfinite(x, p->size, p->device, &v) : -1; /* after a norm said one is there */
        if (j >= 0) {
            if (at) *at = j;
            return p;
        }
    }
    return NULL;
}

/* The message of a non-finite norm: the first tensor that holds an inf or
 * NaN, found by a scan only now that the norm says one is there.  Squares
 * can overflow where no element does (f64 values past 1e154): then the
 * norm is named alone. */
static ag_status nonfinite(const ag_params *ps, bool grads, double norm) {
    int64_t at = 0;
    const ag_tensor *p = ag_params_find_nonfinite(ps, grads, &at);
    const char *what = grads ? "gradient norm" : "parameter norm";
    if (isnan(norm)) norm = NAN; /* "nan", not "-nan" */
    if (!p) return ag__fail(AG_ERR_NONFINITE, "the global %s is %g", what, norm);
    char shape[64];
    double v = 0;
    ag__first_nonfinite(grads ? p->grad : p->data, p->size, p->device, &v);
    if (isnan(v)) v = NAN;
    return ag__fail(AG_ERR_NONFINITE, "the global %s is %g: %s'%s' %s holds %g at element %lld", what, norm,
                    grads ? "the gradient of " : "parameter ", p->name ? p->name : "?", ag_shape_str(p, shape, sizeof shape),
                    v, (long long)at);
}

ag_status ag_check_grads_finite(const ag_params *ps, double norm) {
    return isfinite(norm) ? AG_OK : nonfinite(ps, true, norm);
}

ag_status ag_check_params_finite(const ag_params *ps, double *norm) {
    double n = ag_params_norm(ps);
    if (norm) *norm = n;
    return isfinite(n) ? AG_OK : nonfinite(ps, false, n);
}

static bool starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

bool ag_is_weight_matrix(const ag_tensor *p) {
    if (p->ndim < 2) return false;
    return !(p->name && (starts_with(p->name, "embed") || starts_with(p->name, "bigram")));
}

/* grad += gamma * w over a range, and the range's 1/2 |w|^2 into blocks. */
AG_SIMD_CLONES static void l2_range(void *ctx, int64_t b0, int64_t b1) {
    const grad_job *j = ctx;
    for (int64_t i = b0 * SQ_BLOCK; i < b1 * SQ_BLOCK && i < j->n; i++) j->y[i] += j->scale * j->x[i];
    block_squares(ctx, b0, b1);
}

double ag_l2_penalty(ag_params *ps, double gamma) {
    double sq = 0;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!ag_is_weight_matrix(p) || !p->requires_grad) continue; /* frozen: no L2 term either */
        if (!p->grad) ag__fatal("ag_l2_penalty", "parameter '%s' has no gradient buffer", p->name);
        int64_t blocks = (p->size + SQ_BLOCK - 1) / SQ_BLOCK;
        if (blocks == 0) continue;
        if (p->device == AG_CUDA) { /* the squares of w, then the gradient's term: as the CPU's l2_range */
            sum_squares_cuda(p->data, p->size, &sq);
            ag__axpy_cuda((ag_real)gamma, p->data, p->grad, p->size);
            ag__cuda_check_launch("ag_l2_penalty");
            continue;
        }
        double stack[64];
        grad_job j = {.x = p->data, .y = p->grad, .n = p->size, .scale = (ag_real)gamma,
                      .block_sq = blocks <= 64 ? stack : ag_arena_alloc((size_t)blocks * sizeof(double))};
        ag__parallel_range(blocks, 16, l2_range, &j);
        for (int64_t b = 0; b < blocks; b++) sq += j.block_sq[b];
    }
    return gamma * 0.5 * sq;
}
