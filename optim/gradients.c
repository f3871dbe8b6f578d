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

static int64_t blocks_of(int64_t n) { return (n + SQ_BLOCK - 1) / SQ_BLOCK; }

static double sum_squares(const ag_real *x, int64_t n) {
    int64_t blocks = blocks_of(n);
    if (blocks == 0) return 0;
    double stack[64];
    grad_job j = {.x = x, .n = n, .block_sq = blocks <= 64 ? stack : ag_arena_alloc((size_t)blocks * sizeof(double))};
    ag__parallel_range(blocks, 16, block_squares, &j);
    return sum_blocks(j.block_sq, blocks);
}

/* ---- the squares of many GPU arrays, with one wait ----
 * Which array of a parameter a sum takes: NULL skips the parameter. */
typedef const ag_real *(*array_pick)(const ag_tensor *p);

static const ag_real *trained_grad(const ag_tensor *p) { return p->requires_grad ? p->grad : NULL; }
static const ag_real *any_grad(const ag_tensor *p) { return p->grad; }
static const ag_real *values(const ag_tensor *p) { return p->data; }
static const ag_real *l2_weights(const ag_tensor *p) {
    return ag_is_weight_matrix(p) && p->requires_grad ? p->data : NULL;
}

/* init plus the sum of squares of the picked arrays, left on the device
 * (two doubles: the sum, and room for a clipping coefficient), when they
 * all live on the GPU; else NULL, nothing done.  Copying each array's
 * block sums back was a wait for the GPU per parameter, and a step clips,
 * checks and decays every parameter: most of a GPU step's waits.  Here
 * every array's blocks go into one device buffer and one thread adds them
 * in the CPU's order (per_array: each array's blocks first, as the norms
 * do; else one running sum, as the L2 term does). */
static double *gpu_squares(const ag_params *ps, array_pick pick, bool per_array, double init) {
    int arrays = 0;
    int64_t blocks = 0;
    for (int i = 0; i < ps->count; i++) {
        if (!pick(ps->items[i])) continue;
        if (ps->items[i]->device != AG_CUDA) return NULL;
        arrays++;
        blocks += blocks_of(ps->items[i]->size);
    }
    if (arrays == 0) return NULL;
    int64_t *first = ag_arena_alloc((size_t)(arrays + 1) * sizeof *first), *first_dev;
    double *block_sq = ag__cuda_arena_alloc((size_t)(blocks + 2) * sizeof(double)), *total = block_sq + blocks;
    int a = 0;
    first[0] = 0;
    for (int i = 0; i < ps->count; i++) {
        const ag_real *x = pick(ps->items[i]);
        if (!x) continue;
        ag__sum_squares_blocks_cuda(x, ps->items[i]->size, block_sq + first[a]);
        first[a + 1] = first[a] + blocks_of(ps->items[i]->size);
        a++;
    }
    first_dev = ag__cuda_arena_alloc((size_t)(arrays + 1) * sizeof *first);
    ag__cuda_copy(first_dev, AG_CUDA, first, AG_CPU, (size_t)(arrays + 1) * sizeof *first); /* staged: no wait */
    ag__sum_blocks_in_order_cuda(block_sq, first_dev, arrays, per_array, init, total);
    ag__cuda_check_launch("gradient norm");
    return total;
}

/* *sq plus the picked arrays' squares, read back (one wait), when they all
 * live on the GPU; else false. */
static bool gpu_sum_squares(const ag_params *ps, array_pick pick, bool per_array, double *sq) {
    double *total = gpu_squares(ps, pick, per_array, *sq);
    if (total) ag__cuda_copy(sq, AG_CPU, total, AG_CUDA, sizeof *sq); /* the wait */
    return total != NULL;
}

/* The sum over the parameters, on whichever device holds them. */
static double params_sum_squares(const ag_params *ps, array_pick pick) {
    double sq = 0;
    if (gpu_sum_squares(ps, pick, true, &sq)) return sq; /* all on the GPU */
    for (int i = 0; i < ps->count; i++) {
        const ag_tensor *p = ps->items[i];
        const ag_real *x = pick(p);
        if (!x) continue;
        if (p->device == AG_CUDA) { /* GPU and host parameters mixed: one wait for this one */
            ag_params one = {.items = &ps->items[i], .count = 1};
            gpu_sum_squares(&one, pick, true, &sq);
        } else {
            sq += sum_squares(x, p->size);
        }
    }
    return sq;
}

AG_SIMD_CLONES static void scale_range(void *ctx, int64_t i0, int64_t i1) {
    const grad_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] *= j->scale;
}

/* The trained gradients' sum of squares on the device, and the gradients
 * scaled there by max_norm / (norm + 1e-6) where that is below 1 (NULL
 * unless they are all on the GPU). */
static double *grad_sq_clipped(ag_params *ps, double max_norm) {
    double *total = gpu_squares(ps, trained_grad, true, 0);
    if (!total) return NULL;
    ag__clip_coef_cuda(total, max_norm, total + 1);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (trained_grad(p)) ag__scale_below_one_cuda(p->grad, p->size, total + 1);
    }
    ag__cuda_check_launch("ag_clip_grad_norm");
    return total;
}

/* All on the GPU: the coefficient is computed and applied there before
 * the norm is read (grad_sq_clipped), so the launches do not depend on
 * it (a CUDA graph replays them) and the one wait comes last. */
static bool gpu_clip(ag_params *ps, double max_norm, double *norm) {
    double *total = grad_sq_clipped(ps, max_norm); /* any max_norm, as the host's below: 0 zeroes them */
    if (!total) return false;
    double sq = 0;
    ag__cuda_copy(&sq, AG_CPU, total, AG_CUDA, sizeof sq);
    *norm = sqrt(sq);
    return true;
}

double *ag__grad_sq_device(ag_params *ps, double max_norm) {
    if (max_norm <= 0) return gpu_squares(ps, trained_grad, true, 0);
    return grad_sq_clipped(ps, max_norm);
}

double *ag__params_sq_device(const ag_params *ps) { return gpu_squares(ps, values, true, 0); }

double ag_clip_grad_norm(ag_params *ps, double max_norm) {
    double norm;
    if (gpu_clip(ps, max_norm, &norm)) return norm;
    norm = sqrt(params_sum_squares(ps, trained_grad));
    /* torch.nn.utils.clip_grad_norm_: the 1e-6 keeps the clipped norm just
     * under max_norm and the division finite.  A non-finite norm is
     * returned untouched for the caller to act on (skip the step). */
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
        for (int i = 0; i < ps->count; i++) {
            ag_tensor *p = ps->items[i];
            if (!p->grad || !p->requires_grad) continue;
            if (p->device == AG_CUDA) { /* g = coef g: a product, as below (coef g + 0 made -0 +0) */
                ag__elementwise_on("ag_clip_grad_norm", AG_CUDA)
                    ->affine_backward(p->grad, p->grad, (ag_real)coef, p->size, true);
                ag__cuda_check_launch("ag_clip_grad_norm");
                continue;
            }
            grad_job j = {.y = p->grad, .scale = (ag_real)coef};
            ag__parallel_range(p->size, AG_GRAIN_ELEMENTWISE, scale_range, &j);
        }
    }
    return norm;
}

double ag_grad_norm(const ag_params *ps) { return sqrt(params_sum_squares(ps, any_grad)); }

double ag_params_norm(const ag_params *ps) { return sqrt(params_sum_squares(ps, values)); }

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

ag_status ag__check_params_norm(const ag_params *ps, double norm) {
    return isfinite(norm) ? AG_OK : nonfinite(ps, false, norm);
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

/* grad += gamma * w over a range, and (block_sq set) the range's |w|^2
 * into blocks. */
AG_SIMD_CLONES static void l2_range(void *ctx, int64_t b0, int64_t b1) {
    const grad_job *j = ctx;
    for (int64_t i = b0 * SQ_BLOCK; i < b1 * SQ_BLOCK && i < j->n; i++) j->y[i] += j->scale * j->x[i];
    if (j->block_sq) block_squares(ctx, b0, b1);
}

/* The L2 term's gradient, and its value when *sq is wanted (sq not NULL):
 * the squares of the weights, added one block at a time in order. */
static void l2_term(ag_params *ps, double gamma, double *sq) {
    for (int i = 0; i < ps->count; i++) { /* every weight has a gradient buffer before any work */
        const ag_tensor *p = ps->items[i];
        if (l2_weights(p) && !p->grad) ag__fatal("ag_l2_penalty", "parameter '%s' has no gradient buffer", p->name);
    }
    bool on_gpu = sq && gpu_sum_squares(ps, l2_weights, false, sq); /* the squares before the update */
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!l2_weights(p)) continue; /* frozen: no L2 term either */
        int64_t blocks = blocks_of(p->size);
        if (blocks == 0) continue;
        if (p->device == AG_CUDA) {
            if (sq && !on_gpu) { /* host and GPU weights mixed: this one's squares alone */
                ag_params one = {.items = &ps->items[i], .count = 1};
                gpu_sum_squares(&one, l2_weights, false, sq);
            }
            ag__axpy_cuda((ag_real)gamma, p->data, p->grad, p->size);
            ag__cuda_check_launch("ag_l2_penalty");
            continue;
        }
        double stack[64];
        grad_job j = {.x = p->data, .y = p->grad, .n = p->size, .scale = (ag_real)gamma};
        if (sq) j.block_sq = blocks <= 64 ? stack : ag_arena_alloc((size_t)blocks * sizeof(double));
        ag__parallel_range(blocks, 16, l2_range, &j);
        if (sq)
            for (int64_t b = 0; b < blocks; b++) *sq += j.block_sq[b];
    }
}

double ag_l2_penalty(ag_params *ps, double gamma) {
    double sq = 0;
    l2_term(ps, gamma, &sq);
    return gamma * 0.5 * sq;
}

void ag_l2_grad(ag_params *ps, double gamma) { l2_term(ps, gamma, NULL); }
