/* gradients.c - what happens to gradients between backward and the
 * optimizer step: global-norm clipping and the L2 penalty of docs/models.md.
 * Sums run in double so the norm does not depend on the real type's
 * rounding more than it must.  The arithmetic runs on the device that
 * holds the parameters (optim/kernels.h's grads table), the values staying
 * there until one read. */
#include "kernels.h"
#include "../graph/device.h"
#include "../ops/dispatch.h"

/* ---- the CPU's kernels (CUDA's are in optim/cuda/optimizer.cu) ----
 * Sums of squares are optim/squares.c's blocks, added in order. */
enum { SQ_BLOCK = AG_SQ_BLOCK };

typedef struct {
    const ag_real *x;
    ag_real *y;
    int64_t n;
    ag_real scale;
} grad_job;

static int64_t blocks_of(int64_t n) { return (n + SQ_BLOCK - 1) / SQ_BLOCK; }

static void sum_squares_blocks_cpu(const ag_real *x, int64_t n, double *block_sq) {
    ag__sum_squares_blocks(x, n, block_sq);
}

static void sum_blocks_in_order_cpu(const double *block_sq, const int64_t *first, int arrays, bool per_array,
                                    double init, double *out) {
    *out = ag__sum_blocks_in_order(block_sq, first, arrays, per_array, init);
}

static void sum_blocks_each_cpu(const double *block_sq, const int64_t *first, int arrays, double *out) {
    for (int a = 0; a < arrays; a++) out[a] = ag__sum_blocks_in_order(block_sq, first + a, 1, false, 0);
}

/* torch.nn.utils.clip_grad_norm_: the 1e-6 keeps the clipped norm just
 * under max_norm and the division finite. */
static void clip_coef_cpu(const double *sq, double max_norm, double *coef) { *coef = max_norm / (sqrt(*sq) + 1e-6); }

AG_SIMD_CLONES static void scale_range(void *ctx, int64_t i0, int64_t i1) {
    const grad_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] *= j->scale;
}

/* Not when the coefficient is NaN: the caller sees the norm. */
static void scale_below_one_cpu(ag_real *x, int64_t n, const double *coef) {
    if (!(*coef < 1)) return;
    grad_job j = {.y = x, .scale = (ag_real)*coef};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, scale_range, &j);
}

AG_SIMD_CLONES static void axpy_range(void *ctx, int64_t i0, int64_t i1) {
    const grad_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] += j->scale * j->x[i];
}

static void axpy_cpu(ag_real a, const ag_real *x, ag_real *y, int64_t n) {
    grad_job j = {.x = x, .y = y, .scale = a};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, axpy_range, &j);
}

static void step_gate_cpu(const ag_real *loss, const double *sq, double *gate) {
    *gate = isfinite((double)*loss) ? *sq : NAN;
}

static void step_values_cpu(const ag_real *loss, const double *sq, const double *psq, double *out) {
    out[0] = (double)*loss, out[1] = *sq, out[2] = *psq;
}

/* ---- the same over many arrays in one parallel loop (ag__parallel_spans) ---- */

typedef struct {
    const ag_real *const *x;
    ag_real *const *y;
    const int64_t *first; /* array a's first block in block_sq */
    double *block_sq;
    ag_real scale;
} grads_all_job;

/* Blocks [b0, b1) of array s: one range of ag__parallel_spans is 16 blocks. */
static void squares_span(void *ctx, int s, int64_t begin, int64_t end) {
    const grads_all_job *a = ctx;
    int64_t n = end - begin, b0 = begin / SQ_BLOCK;
    ag__sum_squares_blocks_serial(a->x[s] + begin, n, a->block_sq + a->first[s] + b0);
}

static void sum_squares_blocks_all_cpu(const ag_real *const *x, const int64_t *n, int count, double *block_sq) {
    int64_t room[64];
    int64_t *first = ag__step_room_on(AG_CPU, room, sizeof room, (size_t)(count > 0 ? count : 1) * sizeof *first);
    for (int a = 0, b = 0; a < count; b += (int)blocks_of(n[a]), a++) first[a] = b;
    grads_all_job j = {.x = x, .first = first, .block_sq = block_sq};
    ag__parallel_spans(count, n, 16 * SQ_BLOCK, squares_span, &j); /* as sum_squares_blocks_cpu's 16 blocks */
}

static void scale_span(void *ctx, int s, int64_t begin, int64_t end) {
    const grads_all_job *a = ctx;
    grad_job j = {.y = a->y[s], .scale = a->scale};
    scale_range(&j, begin, end);
}

static void scale_below_one_all_cpu(ag_real *const *x, const int64_t *n, int count, const double *coef) {
    if (!(*coef < 1)) return;
    grads_all_job j = {.y = x, .scale = (ag_real)*coef};
    ag__parallel_spans(count, n, AG_GRAIN_ELEMENTWISE, scale_span, &j);
}

static void axpy_span(void *ctx, int s, int64_t begin, int64_t end) {
    const grads_all_job *a = ctx;
    grad_job j = {.x = a->x[s], .y = a->y[s], .scale = a->scale};
    axpy_range(&j, begin, end);
}

static void axpy_all_cpu(ag_real alpha, const ag_real *const *x, ag_real *const *y, const int64_t *n, int count) {
    grads_all_job j = {.x = x, .y = y, .scale = alpha};
    ag__parallel_spans(count, n, AG_GRAIN_ELEMENTWISE, axpy_span, &j);
}

static const ag__grads_kernels grads_cpu = {
    .sum_squares_blocks = sum_squares_blocks_cpu,
    .sum_blocks_in_order = sum_blocks_in_order_cpu,
    .sum_blocks_each = sum_blocks_each_cpu,
    .clip_coef = clip_coef_cpu,
    .scale_below_one = scale_below_one_cpu,
    .axpy = axpy_cpu,
    .step_gate = step_gate_cpu,
    .step_values = step_values_cpu,
    .sum_squares_blocks_all = sum_squares_blocks_all_cpu,
    .scale_below_one_all = scale_below_one_all_cpu,
    .axpy_all = axpy_all_cpu,
};
AG_DISPATCH(grads, grads_cpu)

/* ---- sums of squares over parameters, on their device ----
 * Which array of a parameter a sum takes: NULL skips the parameter. */
typedef const ag_real *(*array_pick)(const ag_tensor *p);

static const ag_real *trained_grad(const ag_tensor *p) { return p->requires_grad ? p->grad : NULL; }
static const ag_real *any_grad(const ag_tensor *p) { return p->grad; }
static const ag_real *values(const ag_tensor *p) { return p->data; }
static const ag_real *l2_weights(const ag_tensor *p) {
    return ag_is_weight_matrix(p) && p->requires_grad ? p->data : NULL;
}

/* Room for a sum's block sums and array bounds in the caller's frame: on
 * the CPU a sum over up to SQ_ROOM blocks and arrays then takes no step
 * memory, so that clipping, the L2 term and the norms leave the arena
 * alone (the GPU's sums always live in its step arena). */
enum { SQ_ROOM = 64 };
/* The picked arrays of a pass over many parameters, and their lengths. */
typedef struct {
    ag_real **x;
    int64_t *n;
    int count;
} picked_arrays;

typedef struct {
    ag_real *x[SQ_ROOM];
    int64_t n[SQ_ROOM];
} arrays_room;

typedef struct {
    double block_sq[SQ_ROOM + 2];
    int64_t first[SQ_ROOM + 1];
    arrays_room arrays;
} sq_room;

/* The arrays pick takes from ps, in order: in room where they fit (NULL:
 * no room), else in step memory. */
static picked_arrays pick_arrays(const ag_params *ps, array_pick pick, arrays_room *room) {
    int count = 0;
    for (int i = 0; i < ps->count; i++) count += pick(ps->items[i]) != NULL;
    picked_arrays p = {.count = count};
    size_t want = (size_t)(count ? count : 1);
    bool fits = room && count <= SQ_ROOM;
    p.x = fits ? room->x : ag__arena_alloc(want * sizeof *p.x);
    p.n = fits ? room->n : ag__arena_alloc(want * sizeof *p.n);
    for (int i = 0, a = 0; i < ps->count; i++) {
        const ag_real *x = pick(ps->items[i]);
        if (!x) continue;
        p.x[a] = (ag_real *)x; /* written through only where pick gives a gradient */
        p.n[a++] = ps->items[i]->size;
    }
    return p;
}

/* The one device of the picked arrays of ps (false when they are on two). */
static bool one_device(const ag_params *ps, array_pick pick, ag_device *dev) {
    bool any = false;
    for (int i = 0; i < ps->count; i++) {
        if (!pick(ps->items[i])) continue;
        if (any && ps->items[i]->device != *dev) return false;
        *dev = ps->items[i]->device;
        any = true;
    }
    return true;
}

/* init plus the sum of squares of the picked arrays, left in the memory of
 * the device that holds them all (two doubles: the sum, and room for a
 * clipping coefficient); NULL, nothing done, when they are on two devices.
 * Every array's blocks go into one buffer and the sum adds them in order
 * (per_array: each array's blocks first, as the norms do; else one running
 * sum, as the L2 term does): on the GPU, reading each array's sum back was a
 * wait per parameter, and a step clips, checks and decays every one. */
static double *squares(const ag_params *ps, array_pick pick, bool per_array, double init, sq_room *room,
                       ag_device *dev) {
    const char *op = "gradient norm";
    if (!one_device(ps, pick, dev)) return NULL; /* *dev stays the caller's where nothing is picked */
    int arrays = 0;
    int64_t blocks = 0;
    for (int i = 0; i < ps->count; i++)
        if (pick(ps->items[i])) arrays++, blocks += blocks_of(ps->items[i]->size);
    size_t sq_bytes = (size_t)(blocks + 2) * sizeof(double);
    int64_t *first = room && arrays <= SQ_ROOM ? room->first : ag__arena_alloc((size_t)(arrays + 1) * sizeof *first);
    double *block_sq = room ? ag__step_room_on(*dev, room->block_sq, sizeof room->block_sq, sq_bytes)
                            : ag__step_alloc_on(*dev, sq_bytes);
    double *total = block_sq + blocks;
    const ag__grads_kernels *k = ag__grads_on(op, *dev);
    picked_arrays p = pick_arrays(ps, pick, room ? &room->arrays : NULL);
    first[0] = 0;
    for (int a = 0; a < p.count; a++) {
        if (!k->sum_squares_blocks_all) k->sum_squares_blocks(p.x[a], p.n[a], block_sq + first[a]);
        first[a + 1] = first[a] + blocks_of(p.n[a]);
    }
    if (k->sum_squares_blocks_all) k->sum_squares_blocks_all((const ag_real *const *)p.x, p.n, p.count, block_sq);
    const int64_t *first_there = ag__step_copy_on(*dev, first, (size_t)(arrays + 1) * sizeof *first); /* no wait */
    k->sum_blocks_in_order(block_sq, first_there, arrays, per_array, init, total);
    ag__kernels_done(op, *dev);
    return total;
}

/* *sq plus the picked arrays' squares, read back (one wait on the GPU):
 * all at once where they share a device, else one parameter at a time. */
static void add_squares(const ag_params *ps, array_pick pick, bool per_array, double *sq) {
    ag_device dev = AG_CPU;
    sq_room room;
    double *total = squares(ps, pick, per_array, *sq, &room, &dev);
    if (total) {
        ag__read_on(dev, sq, total, sizeof *sq);
        return;
    }
    for (int i = 0; i < ps->count; i++) { /* parameters on two devices */
        ag_params one = {.items = &ps->items[i], .count = 1};
        if (pick(ps->items[i])) add_squares(&one, pick, per_array, sq);
    }
}

static double params_sum_squares(const ag_params *ps, array_pick pick) {
    double sq = 0;
    add_squares(ps, pick, true, &sq);
    return sq;
}

/* The trained gradients' sum of squares, and the gradients scaled by
 * max_norm / (norm + 1e-6) where that is below 1, all on their device
 * before the norm is read: the launches do not depend on it (a CUDA graph
 * replays them) and the one wait comes last.  NULL where the parameters
 * are on two devices. */
static double *grad_sq_clipped(ag_params *ps, double max_norm, sq_room *room, ag_device *dev) {
    double *total = squares(ps, trained_grad, true, 0, room, dev);
    if (!total) return NULL;
    const ag__grads_kernels *k = ag__grads_on("ag_clip_grad_norm", *dev);
    k->clip_coef(total, max_norm, total + 1); /* any max_norm: 0 zeroes them */
    if (k->scale_below_one_all) {
        picked_arrays g = pick_arrays(ps, trained_grad, room ? &room->arrays : NULL);
        k->scale_below_one_all(g.x, g.n, g.count, total + 1);
    } else {
        for (int i = 0; i < ps->count; i++) {
            ag_tensor *p = ps->items[i];
            if (trained_grad(p)) k->scale_below_one(p->grad, p->size, total + 1);
        }
    }
    ag__kernels_done("ag_clip_grad_norm", *dev);
    return total;
}

/* For the one-wait training step (train/step.c): in step memory. */
double *ag__grad_sq_on(ag_params *ps, double max_norm, ag_device dev) {
    return max_norm <= 0 ? squares(ps, trained_grad, true, 0, NULL, &dev) : grad_sq_clipped(ps, max_norm, NULL, &dev);
}

double *ag__params_sq_on(const ag_params *ps, ag_device dev) { return squares(ps, values, true, 0, NULL, &dev); }

/* The training step's update and then its parameters' sum of squares, the
 * trained parameters' squares taken by the update in its own pass (their
 * values still in cache: a read of every parameter saved, 62 MB a step for
 * dual-axial), the frozen ones' here; then the blocks added in order as
 * ag__params_sq_on adds them.  The same blocks of the same values: the same
 * bits.  Where the device runs one update per parameter, the two passes. */
double *ag__optim_step_gated_params_sq(ag_optimizer *opt, const double *gate, ag_device dev, bool clear_grads,
                                       bool *cleared) {
    const ag_params *ps = opt->params;
    ag_device on = dev;
    *cleared = clear_grads;
    if (!one_device(ps, values, &on) || on != AG_CPU) {
        ag__optim_step_gated_sq(opt, gate, NULL, clear_grads);
        return ag__params_sq_on(ps, dev);
    }
    int arrays = 0;
    int64_t blocks = 0;
    for (int i = 0; i < ps->count; i++) arrays++, blocks += blocks_of(ps->items[i]->size);
    int64_t *first = ag__arena_alloc((size_t)(arrays + 1) * sizeof *first);
    double *block_sq = ag__arena_alloc((size_t)(blocks + 2) * sizeof(double)), *total = block_sq + blocks;
    double **out = ag__arena_alloc((size_t)(arrays ? arrays : 1) * sizeof *out);
    first[0] = 0;
    for (int i = 0; i < ps->count; i++) {
        out[i] = block_sq + first[i];
        first[i + 1] = first[i] + blocks_of(ps->items[i]->size);
    }
    const ag__grads_kernels *k = ag__grads_on("gradient norm", AG_CPU);
    ag__optim_step_gated_sq(opt, gate, out, clear_grads);
    for (int i = 0; i < ps->count; i++) /* frozen: not in the update's pass */
        if (!ps->items[i]->requires_grad) k->sum_squares_blocks(ps->items[i]->data, ps->items[i]->size, out[i]);
    k->sum_blocks_in_order(block_sq, first, arrays, true, 0, total);
    return total;
}

double ag_clip_grad_norm(ag_params *ps, double max_norm) {
    ag_device dev = AG_CPU;
    sq_room room;
    double *total = grad_sq_clipped(ps, max_norm, &room, &dev), sq = 0;
    if (total) {
        ag__read_on(dev, &sq, total, sizeof sq);
        return sqrt(sq);
    }
    /* Parameters on two devices: the norm on the host, then each scaled on
     * its own.  A non-finite norm is returned untouched for the caller to
     * act on (skip the step). */
    double norm = sqrt(params_sum_squares(ps, trained_grad)), coef = max_norm / (norm + 1e-6);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!trained_grad(p)) continue;
        const double *coef_there = ag__step_copy_on(p->device, &coef, sizeof coef);
        ag__grads_on("ag_clip_grad_norm", p->device)->scale_below_one(p->grad, p->size, coef_there);
        ag__kernels_done("ag_clip_grad_norm", p->device);
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

/* The L2 term's gradient, grad += gamma w, and its value when *sq is
 * wanted (sq not NULL): the squares of the weights before the update,
 * added one block at a time in order. */
static void l2_term(ag_params *ps, double gamma, double *sq) {
    for (int i = 0; i < ps->count; i++) { /* every weight has a gradient buffer before any work */
        const ag_tensor *p = ps->items[i];
        if (l2_weights(p) && !p->grad) ag__fatal("ag_l2_penalty", "parameter '%s' has no gradient buffer", p->name);
    }
    if (sq) add_squares(ps, l2_weights, false, sq);
    ag_device dev = AG_CPU;
    const ag__grads_kernels *k = one_device(ps, l2_weights, &dev) ? ag__grads_on("ag_l2_penalty", dev) : NULL;
    if (k && k->axpy_all) { /* one pass over every weight */
        arrays_room room;
        picked_arrays w = pick_arrays(ps, l2_weights, &room), g = w;
        ag_real *grads[SQ_ROOM];
        g.x = w.count <= SQ_ROOM ? grads : ag__arena_alloc((size_t)w.count * sizeof *g.x);
        for (int i = 0, a = 0; i < ps->count; i++)
            if (l2_weights(ps->items[i])) g.x[a++] = ps->items[i]->grad;
        k->axpy_all((ag_real)gamma, (const ag_real *const *)w.x, g.x, w.n, w.count);
        ag__kernels_done("ag_l2_penalty", dev);
        return;
    }
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        if (!l2_weights(p)) continue; /* frozen: no L2 term either */
        ag__grads_on("ag_l2_penalty", p->device)->axpy((ag_real)gamma, p->data, p->grad, p->size);
        ag__kernels_done("ag_l2_penalty", p->device);
    }
}

double ag_l2_penalty(ag_params *ps, double gamma) {
    double sq = 0;
    l2_term(ps, gamma, &sq);
    return gamma * 0.5 * sq;
}

void ag_l2_grad(ag_params *ps, double gamma) { l2_term(ps, gamma, NULL); }
