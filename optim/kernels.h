/* kernels.h - the optimizers' kernels (ops/dispatch.h): the updates of
 * optim/optimizer.c, and the gradient arithmetic of optim/gradients.c with
 * the training step's values.  The CPU's tables are in those two files,
 * CUDA's in optim/cuda/optimizer.cu.  The coefficients are computed once
 * on the host, for both devices, so the per-element arithmetic is the same
 * expression on each; every pointer is in the device's memory. */
#ifndef AG_OPTIM_KERNELS_H
#define AG_OPTIM_KERNELS_H

#include "../graph/kreal.h"

#include <math.h> /* sqrt: Adafactor's pieces below */

AG_KERNELS_BEGIN

typedef struct {
    ag__kreal lr, wd, mu, keep;
    bool first, nesterov; /* first: the momentum buffer starts as the gradient */
} ag__ksgd;
typedef struct {
    ag__kreal b1, b2, one_b1, one_b2, step_size, bc2_sqrt, eps, l2, decay;
    bool coupled_decay, decoupled_decay;
} ag__kadam;
typedef struct {
    ag__kreal lr, wd, rho, one_rho, eps;
} ag__kadadelta;
typedef struct {
    ag__kreal clr, wd, eps; /* clr: lr / (1 + (t-1) lr_decay) */
} ag__kadagrad;
typedef struct {
    ag__kreal lr, wd, alpha, one_alpha, eps, mu;
} ag__krmsprop;

/* Adafactor's scalars of one parameter's step: w = 1 - beta2 at step t,
 * eps1, decay = 1 - lr wd, the first moment's b1 and 1 - b1, rho =
 * min(lr, 1/sqrt(t)) (lr without relative_step), eps2, d, and whether
 * RMS(θ) scales the step. */
typedef struct {
    ag__kreal w, eps1, decay, b1, one_b1;
    double rho, eps2, d;
    bool scaled;
} ag__kadafactor;

/* One Muon matrix for the muon_* entries below: its values p, momentum b
 * and gradient g (g_clear: g again where the update zeroes it, or NULL),
 * u its slice of the step's direction, n elements, and its update's
 * scalars, θ = decay θ - rate u. */
typedef struct {
    ag__kreal *p, *b, *u, *g_clear;
    const ag__kreal *g;
    int64_t n;
    ag__kreal decay, rate;
} ag__muon_span;

/* One parameter's Adafactor step for the adafactor_* entries below, as
 * [batch, rows, cols]: a factored one's R [batch, rows] and C [batch,
 * cols] (V NULL), a vector's V (R and C NULL; batch = rows = 1); m its
 * first moment (Hugging Face's beta1), or NULL.  Its arrays and k, its
 * scalars, in the device's memory; sq there too, where the step finds its
 * two sums of squares (θ's before the update, u's). */
typedef struct {
    const ag__kadafactor *k;
    const ag__kreal *g;
    ag__kreal *p, *R, *C, *V, *m, *u, *means, *g_clear;
    const double *sq;
    int64_t batch;
    int rows, cols;
} ag__adafactor_span;

/* Sums of squares run in blocks of AG_SQ_BLOCK elements, each in
 * AG_SQ_LANES double lanes, the blocks then added in order: the same bits
 * on either device and for any thread count. */
enum { AG_SQ_BLOCK = 4096, AG_SQ_LANES = 8 };

#ifndef AG_HD /* __host__ __device__ under nvcc (graph/prelude.cuh) */
#define AG_HD
#endif

/* sum_blocks_in_order below, as the CPU runs it and CUDA's one thread
 * does: one source, so the two devices add in the same order. */
AG_HD static inline double ag__sum_blocks_in_order(const double *block_sq, const int64_t *first, int arrays,
                                                   bool per_array, double init) {
    double total = init;
    for (int a = 0; a < arrays; a++) {
        double own = 0;
        for (int64_t b = first[a]; b < first[a + 1]; b++) {
            if (per_array) own += block_sq[b];
            else total += block_sq[b];
        }
        if (per_array) total += own;
    }
    return total;
}

/* update_all's kind: ag_optim_kind's values (attngrad/optim.h, which the
 * CUDA side does not include; optim/optimizer.c checks that they agree). */
enum { AG__OPTIM_SGD, AG__OPTIM_ADAM, AG__OPTIM_ADAMW, AG__OPTIM_ADADELTA, AG__OPTIM_ADAGRAD, AG__OPTIM_RMSPROP };

/* One trained parameter's arrays for update_all: its slots in the order
 * the per-parameter entries take them (NULL where unused), and its
 * coefficients (an ag__ksgd, ag__kadam, ag__kadadelta, ag__kadagrad or
 * ag__krmsprop) in the device's memory.  RMSprop's: s0 square_avg, s1 the
 * momentum buffer (NULL without momentum), s2 grad_avg (NULL unless
 * centered). */
typedef struct {
    const void *coef;
    ag__kreal *p, *s0, *s1, *s2;
    const ag__kreal *g;
    int64_t n;
    /* Not NULL: g's memory, zeroed once the update has read it (not where
     * the gate skips the update): the training step's zero_grad, in the
     * update's pass over memory it reads anyway, where a pass of its own
     * wrote all of it. */
    ag__kreal *g_clear;
    /* Not NULL: the block sums of squares of the values after the update
     * (of the values as they are where the gate skips it), as
     * sum_squares_blocks writes them, made in the same pass while the
     * values are in cache: the training step's parameter norm. */
    double *block_sq;
    /* Lazy updates (ag_optim_config.lazy): row > 0 cuts the arrays into
     * rows of `row` elements, and a row whose gradient is all zero is left
     * as it is (value and slots).  live: n / row bytes of the device's step
     * memory, which update_all fills (1: the row's gradient holds a
     * nonzero) before it updates the live rows.  block_sq then sums the
     * live rows alone, as if the dead ones were 0: they have not changed. */
    int64_t row;
    uint8_t *live;
    /* Lazy rules whose zero-gradient step decays their state and leaves
     * the value (adadelta; rmsprop without momentum or centering): not NULL,
     * the optimizer's missed[i]: missed[r], the steps row r has skipped
     * since its state was brought up to date, kept from step to step;
     * catchup[r] (step memory), what update_all's live pass owes a live row
     * this step (its missed count), before its update.  ag__lazy_row_steps
     * below keeps them.  decay: what each missed step multiplies s0 and s1
     * (where not NULL) by: adadelta's rho, rmsprop's alpha. */
    int32_t *missed, *catchup;
    ag__kreal decay;
} ag__update_span;

/* The live pass's bookkeeping of row r of a decaying lazy span, the same on
 * both devices: a live row is owed the steps it missed, a dead one has
 * missed one more (a step the gate skips is no step: not called then). */
AG_HD static inline void ag__lazy_row_steps(const ag__update_span *u, int64_t r, bool live) {
    int32_t m = u->missed[r];
    u->catchup[r] = live ? m : 0;
    u->missed[r] = live ? 0 : m < INT32_MAX ? m + 1 : m; /* by then its state has long been 0 */
}

/* The rule's update with a zero gradient, `steps` times, on one element's
 * state a (and b, where not NULL): each multiplies them by decay and
 * leaves the value.  Adadelta: rho v + (1 - rho) 0 is rho v (v >= +0), the
 * delta 0, so u too is rho u; rmsprop: alpha v, and g / d is 0.  So a lazy
 * row that catches up gets the dense rule's bits.  Once they are 0 nothing
 * more changes. */
AG_HD static inline void ag__lazy_missed_steps(ag__kreal decay, ag__kreal *a, ag__kreal *b, int32_t steps) {
    ag__kreal zero = 0, *bb = b ? b : &zero;
    for (int32_t s = 0; s < steps && (*a != 0 || *bb != 0); s++) *a = decay * *a, *bb = decay * *bb;
}
typedef struct {
    /* The updates of `count` parameters (kind: an ag_optim_kind), in one
     * parallel loop over all of them (CUDA: one launch, after one copy of
     * the spans).  Each span's coef points at its coefficients in the
     * device's memory (read there, so a CUDA graph's recorded arguments
     * stay the same from step to step); gate, when not NULL, at a value
     * there that skips the updates unless finite.  spans in host memory. */
    void (*update_all)(int kind, const ag__update_span *spans, int count, const double *gate);
    /* The parameters' average after the update (ag_optim_config.ema, swa):
     * avg[a] = lerp(avg[a], x[a], *w) over `count` arrays of n[a] elements,
     * torch.lerp's two forms (ag__lerp), unless *gate is not finite (gate
     * NULL: always); *w in the device's memory.  swap_all: x[a] and y[a]
     * trade values.  One parallel loop (CUDA: a launch per 64 arrays);
     * the pointer and length arrays in host memory. */
    void (*average_all)(const ag__kreal *w, ag__kreal *const *avg, const ag__kreal *const *x, const int64_t *n,
                        int count, const double *gate);
    void (*swap_all)(ag__kreal *const *x, ag__kreal *const *y, const int64_t *n, int count);
    /* Lookahead's step back (ag_optim_config.lookahead): slow[a] =
     * lerp(slow[a], x[a], *w), then x[a] = slow[a], unless *gate is not
     * finite; as average_all otherwise. */
    void (*lookahead_all)(const ag__kreal *w, ag__kreal *const *slow, ag__kreal *const *x, const int64_t *n, int count,
                          const double *gate);
    /* A decaying lazy rule's state brought up to date (before it is read):
     * every row of each span (s0, s1, row, missed, decay; the rest unused)
     * gets the steps it missed, and its count goes back to 0. */
    void (*catch_up_all)(const ag__update_span *spans, int count);
    /* Muon, on `count` matrices at once (CUDA: one launch each; spans in
     * host memory; the products between are the matmul family's): each
     * one's momentum and direction u (ag__muon_direction; one_mu = 1 - mu,
     * rounded from double as torch's scalar is), b kept only where *gate
     * is finite (NULL: always); normalize: u, `count` slices of n, slice j
     * divided by max(sqrt(sq[j]), eps), sq in the device's memory; y = a x
     * + b y; and each one's step θ = decay θ - rate u, g_clear (not NULL)
     * zeroed, unless *gate is not finite. */
    void (*muon_momentum)(const ag__muon_span *spans, int count, ag__kreal mu, ag__kreal one_mu, bool nesterov,
                          const double *gate);
    void (*muon_normalize)(ag__kreal *u, int64_t n, int count, const double *sq, ag__kreal eps);
    void (*axpby)(ag__kreal a, const ag__kreal *x, ag__kreal b, ag__kreal *y, int64_t n);
    void (*muon_apply)(const ag__muon_span *spans, int count, const double *gate);
    /* Adafactor's phases, each over `count` parameters at once (CUDA: a
     * launch or three, after one copy of the spans; spans in host memory;
     * optim/optimizer.c, "Adafactor's parameters"; every sum in double, in
     * index order).  A span's scalars are in the device's memory (as
     * update_all's coefficients: a CUDA graph's recorded arguments stay the
     * same).  factors, of the factored spans: R[b, r] = lerp(R, mean_c g²,
     * w), C[b, c] = lerp(C, mean_r g², w), kept only where *gate is finite;
     * then means[b] (ag__adafactor_mean of R's rows).  direction: u =
     * ag__adafactor_direction of R, C and means, or of a vector's V =
     * lerp(V, g², w) (V kept only where *gate is finite).  apply: θ = decay
     * θ - rate u with ag__adafactor_rate of the span's sq (ag__adafactor_step:
     * with a first moment, m = b1 m + (1 - b1) rate u and θ = decay θ - m),
     * g_clear (not NULL) zeroed, unless *gate is not finite. */
    void (*adafactor_factors)(const ag__adafactor_span *spans, int count, const double *gate);
    void (*adafactor_direction)(const ag__adafactor_span *spans, int count, const double *gate);
    void (*adafactor_apply)(const ag__adafactor_span *spans, int count, const double *gate);
} ag__optim_kernels;

/* Newton-Schulz's quintic for Muon (Jordan et al. 2024; torch.optim.Muon's
 * default ns_coefficients). */
#define AG_MUON_NS_A ((ag__kreal)3.4445)
#define AG_MUON_NS_B ((ag__kreal)-4.7750)
#define AG_MUON_NS_C ((ag__kreal)2.0315)

/* torch.lerp(a, b, w) as its kernels compute it, on both devices: from a
 * for small weights, from b for large ones, so w = 1 gives b exactly. */
AG_HD static inline ag__kreal ag__lerp(ag__kreal a, ag__kreal b, ag__kreal w) {
    return w < (ag__kreal)0.5 ? a + w * (b - a) : b - (b - a) * ((ag__kreal)1 - w);
}

/* Muon's momentum of one element, as torch.optim.Muon: b = lerp(b, g,
 * 1 - mu) into *b_new, and the direction, lerp(g, b, mu) with nesterov,
 * else b. */
AG_HD static inline ag__kreal ag__muon_direction(ag__kreal b, ag__kreal g, ag__kreal mu, ag__kreal one_mu, bool nesterov,
                                                 ag__kreal *b_new) {
    *b_new = ag__lerp(b, g, one_mu);
    return nesterov ? ag__lerp(g, *b_new, mu) : *b_new;
}

/* Adafactor's pieces, one source for both devices (torch.optim.Adafactor's
 * arithmetic): the mean of R's `rows` values, floored at eps1 (torch's
 * row_var.mean(dim=-2).clamp_(min=eps1)); one element's direction
 * g / sqrt(max(R C / mean, eps1²)) (torch's var_estimate.clamp_(min=eps1
 * * eps1).rsqrt_() * g), and a vector's from its V; the step's rate
 * alpha / max(1, RMS(u) / d), alpha = max(eps2, RMS(θ)) rho, from the sums
 * of squares of θ and u over n elements. */
/* A row's sum of g², in double, in AG_SQ_LANES lanes (element c in lane
 * c % lanes) added in order at the end: the CPU vectorises it, a GPU
 * thread adds the same way. */
AG_HD static inline double ag__adafactor_row_sq(const ag__kreal *g, int cols) {
    double lane[AG_SQ_LANES] = {0}, sum = 0;
    int c = 0;
    for (; c + AG_SQ_LANES <= cols; c += AG_SQ_LANES)
        for (int l = 0; l < AG_SQ_LANES; l++) lane[l] += (double)g[c + l] * g[c + l];
    for (int l = 0; c + l < cols; l++) lane[l] += (double)g[c + l] * g[c + l];
    for (int l = 0; l < AG_SQ_LANES; l++) sum += lane[l];
    return sum;
}
AG_HD static inline void ag__adafactor_mean(const ag__kreal *R, int rows, ag__kreal eps1, ag__kreal *mean) {
    double sum = 0;
    for (int r = 0; r < rows; r++) sum += R[r];
    ag__kreal m = (ag__kreal)(sum / rows);
    *mean = m > eps1 ? m : eps1;
}
#ifdef AG_REAL_DOUBLE
#define AG__KSQRT sqrt
#else
#define AG__KSQRT sqrtf /* not sqrt: in C that is the double one, in CUDA C++ the float one */
#endif
AG_HD static inline ag__kreal ag__adafactor_floor_rsqrt(ag__kreal v, ag__kreal eps1) {
    ag__kreal floor = eps1 * eps1;
    return (ag__kreal)1 / AG__KSQRT(v > floor ? v : floor); /* torch's rsqrt_: 1 / sqrt, IEEE on both devices */
}
AG_HD static inline ag__kreal ag__adafactor_direction(ag__kreal g, ag__kreal r, ag__kreal c, ag__kreal mean,
                                                      ag__kreal eps1) {
    ag__kreal estimate = r * c;
    return g * ag__adafactor_floor_rsqrt(estimate / mean, eps1);
}
AG_HD static inline ag__kreal ag__adafactor_vector_direction(ag__kreal g, ag__kreal v, ag__kreal eps1) {
    return g * ag__adafactor_floor_rsqrt(v, eps1);
}
/* The update's rate: alpha = max(eps2, RMS(θ)) rho (rho alone when not
 * k->scaled), over max(1, RMS(u) / d). */
AG_HD static inline double ag__adafactor_rate(const double *sq, int64_t n, const ag__kadafactor *k) {
    double root_n = sqrt((double)n), rms = sqrt(sq[0]) / root_n, u_rms = sqrt(sq[1]) / (root_n * k->d);
    double scale = !k->scaled ? 1 : rms > k->eps2 ? rms : k->eps2;
    return scale * k->rho / (u_rms > 1 ? u_rms : 1);
}
/* Element i's update, θ = decay θ - rate u, or with a first moment
 * (Hugging Face's: the average of the clipped, scaled updates) θ = decay
 * θ - m, m = b1 m + (1 - b1) rate u. */
AG_HD static inline void ag__adafactor_step(ag__kreal *p, ag__kreal *m, const ag__kreal *u, int64_t i, ag__kreal rate,
                                            const ag__kadafactor *k) {
    ag__kreal shrunk = p[i] * k->decay;
    if (!m) {
        p[i] = shrunk - rate * u[i];
        return;
    }
    m[i] = m[i] * k->b1 + k->one_b1 * (rate * u[i]);
    p[i] = shrunk - m[i];
}
/* The gradients' arithmetic between backward and the update (optim/gradients.c). */
typedef struct {
    /* block_sq[b] = the sum of x^2 over elements [b*AG_SQ_BLOCK,
     * (b+1)*AG_SQ_BLOCK) in double, in AG_SQ_LANES lanes. */
    void (*sum_squares_blocks)(const ag__kreal *x, int64_t n, double *block_sq);
    /* *out = init + the block sums of `arrays` arrays (array a's are
     * block_sq[first[a] .. first[a+1])) added in order: per array, then the
     * arrays (per_array), or one running sum over all blocks. */
    void (*sum_blocks_in_order)(const double *block_sq, const int64_t *first, int arrays, bool per_array, double init,
                                double *out);
    /* out[a] = array a's block sums added in order, for each of `arrays`
     * arrays at once: sum_blocks_in_order of each alone (init 0), the
     * same bits in one pass (CUDA: one launch).  first and out in the
     * device's memory. */
    void (*sum_blocks_each)(const double *block_sq, const int64_t *first, int arrays, double *out);
    /* *coef = max_norm / (sqrt(*sq) + 1e-6); x *= *coef where *coef < 1
     * (clipping with no value crossing to the host) */
    void (*clip_coef)(const double *sq, double max_norm, double *coef);
    void (*scale_below_one)(ag__kreal *x, int64_t n, const double *coef);
    /* y += a x */
    void (*axpy)(ag__kreal a, const ag__kreal *x, ag__kreal *y, int64_t n);
    /* The training step (train/step.c): *gate = *sq, or NaN when *loss is
     * not finite; out[0..2] = loss, *sq, *psq, for one read. */
    void (*step_gate)(const ag__kreal *loss, const double *sq, double *gate);
    void (*step_values)(const ag__kreal *loss, const double *sq, const double *psq, double *out);
    /* The same over `count` arrays in one pass (one parallel loop over all
     * of them; CUDA: one launch after one copy of the arrays' table), the
     * same bits; the pointer and length arrays in host memory.  NULL: the
     * device runs the entries above once per array.
     * sum_squares_blocks_all lays array a's blocks after array a-1's. */
    void (*sum_squares_blocks_all)(const ag__kreal *const *x, const int64_t *n, int count, double *block_sq);
    void (*scale_below_one_all)(ag__kreal *const *x, const int64_t *n, int count, const double *coef);
    void (*axpy_all)(ag__kreal a, const ag__kreal *const *x, ag__kreal *const *y, const int64_t *n, int count);
} ag__grads_kernels;

extern const ag__optim_kernels ag__optim_cuda;
extern const ag__grads_kernels ag__grads_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
const ag__optim_kernels *ag__optim_on(const char *op, ag_device dev);
const ag__grads_kernels *ag__grads_on(const char *op, ag_device dev);

/* ---- the training step's pieces (train/step.c) ----
 * The sums of squares of the trained gradients (clipped to max_norm > 0
 * first) and of the parameters' values, left in the memory of dev, which
 * holds the parameters (NULL where they are on two devices); the update,
 * skipped unless *gate is finite (opt->step counts it all the same: the
 * caller, who reads the gate later, takes it back when it was not); the
 * parameters' check from a norm. */
double *ag__grad_sq_on(ag_params *ps, double max_norm, ag_device dev);
double *ag__params_sq_on(const ag_params *ps, ag_device dev);
void ag__optim_step_gated(ag_optimizer *opt, const double *gate);
/* The caller's gate skipped the update: opt->step, and the average's
 * count where the update was to go into it, taken back. */
void ag__optim_step_not_taken(ag_optimizer *opt);
/* The same, and ag__params_sq_on's value for opt's parameters after it, the
 * squares taken in the update's own pass on the CPU (the same bits: the
 * same blocks of the same values).  clear_grads: the update also zeroes
 * the gradients it reads (*cleared = clear_grads); with the gate skipping
 * the update they stay as they are. */
double *ag__optim_step_gated_params_sq(ag_optimizer *opt, const double *gate, ag_device dev, bool clear_grads,
                                       bool *cleared);
/* The pieces of it: the update writing parameter i's block sums into
 * block_sq[i] and zeroing the gradients it read where clear_grads, and
 * one host array's block sums on the caller (optim/gradients.c). */
void ag__optim_step_gated_sq(ag_optimizer *opt, const double *gate, double *const *block_sq, bool clear_grads);
/* optim/squares.c: x's sums of squares in blocks of AG_SQ_BLOCK, each in
 * AG_SQ_LANES double lanes, block b's into block_sq[b]: on the pool, or
 * on the caller (inside a part). */
void ag__sum_squares_blocks(const ag_real *x, int64_t n, double *block_sq);
void ag__sum_squares_blocks_serial(const ag_real *x, int64_t n, double *block_sq);
ag_status ag__check_params_norm(const ag_params *ps, double norm);
#endif

#endif
