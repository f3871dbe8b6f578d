/* loss.h - the loss family's kernels (ops/dispatch.h): the CPU's in
 * ops/loss.c, CUDA's in ops/cuda/loss.c (the fused classifier's cuBLAS
 * products) over the kernels of ops/cuda/loss.cu.  Every pointer is in the
 * device's memory; a loss's scalar (out, g) is a 0-dim tensor's one value
 * there, so no value crosses to the host. */
#ifndef AG_OPS_LOSS_H
#define AG_OPS_LOSS_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* The classifier's linear layer fused with its cross-entropy
 * (ag_linear_cross_entropy), over the n counted rows of x [rows, in]:
 * kept[i] is counted row i's row of x, pos[r] row r's index in kept (or
 * -1); X [n, in] those rows, P [n, C] their logits, then (with to_grad)
 * softmax - onehot.  W is [in, C], or [C, in] when tw. */
typedef struct {
    const int32_t *kept, *pos;
    ag__kreal *X, *P;
    int64_t rows, n;
    int in, C;
    bool tw;
    ag__kreal eps; /* label smoothing: the target (1 - eps) onehot + eps / C */
} ag__klce;

typedef struct {
    /* Cross-entropy over the rows of z [rows, C]: m = max z, s = log sum
     * exp(z - m), loss = s - (z_y - m), or with label smoothing eps != 0
     * s - (1 - eps)(z_y - m) - eps (mean z - m); ignored rows (label
     * ignore_index) get loss 0 and m, s unset.  Backward: gz (+)= g[0] /
     * counted (softmax - onehot, or - ((1 - eps) onehot + eps / C)) on
     * counted rows; ignored rows 0 when fresh, untouched otherwise.  eps = 0
     * computes what it did before smoothing existed, to the bit. */
    void (*ce_forward)(const ag__kreal *z, const int32_t *labels, int ignore_index, ag__kreal eps, ag__kreal *row_max,
                       ag__kreal *row_lse, ag__kreal *row_loss, int64_t rows, int C);
    void (*ce_backward)(const ag__kreal *z, const int32_t *labels, int ignore_index, ag__kreal eps,
                        const ag__kreal *row_max, const ag__kreal *row_lse, const ag__kreal *g, int64_t counted,
                        ag__kreal *gz, int64_t rows, int C, bool fresh);
    /* *out = n ? (ag__kreal)(sum of row_loss[0..rows) in double, in row
     * order) / n : 0 (the CPU's order; CUDA's is one block's fixed tree). */
    void (*row_mean)(const ag__kreal *row_loss, int64_t rows, int64_t n, ag__kreal *out);
    void (*row_mean_f64)(const double *row_loss, int64_t rows, int64_t n, ag__kreal *out);
    /* Forward: X gathered, P = bias + X op(W) (bias NULL: none), loss[i]
     * the counted row's loss (smoothed by p->eps as ce_forward's), and with
     * to_grad P becomes softmax minus the target in place.  Backward, with the factor g[0] / n: dx (+)= g P op(W)^T on
     * the counted rows (0 elsewhere when fresh), dw += g X^T P (or
     * g P^T X), db += g 1^T P; any of dx, dw, db NULL: not wanted. */
    void (*lce_forward)(const ag__klce *p, const ag__kreal *x, const ag__kreal *w, const ag__kreal *bias,
                        const int32_t *labels, ag__kreal *loss, bool to_grad);
    void (*lce_backward)(const ag__klce *p, const ag__kreal *w, const ag__kreal *g, ag__kreal *dx, bool fresh_x,
                         ag__kreal *dw, ag__kreal *db);
    /* KL to a soft target t [rows, C]: m, s, the row's target mass, and the
     * row's loss in double; backward gz += g[0] / rows (mass softmax - t). */
    void (*kl_forward)(const ag__kreal *z, const ag__kreal *t, ag__kreal *row_max, ag__kreal *row_lse, ag__kreal *row_mass,
                       double *row_loss, int64_t rows, int C);
    void (*kl_backward)(const ag__kreal *z, const ag__kreal *t, const ag__kreal *row_max, const ag__kreal *row_lse,
                        const ag__kreal *row_mass, const ag__kreal *g, ag__kreal *gz, int64_t rows, int C);
    /* *out = sum (p - t)^2 in double / n; backward gp += s (p - t),
     * gt -= s (p - t) with s = 2 g[0] / n (either may be NULL). */
    void (*mse_forward)(const ag__kreal *p, const ag__kreal *t, ag__kreal *out, int64_t n);
    void (*mse_backward)(const ag__kreal *p, const ag__kreal *t, const ag__kreal *g, ag__kreal *gp, ag__kreal *gt,
                         int64_t n);
} ag__loss_kernels;

extern const ag__loss_kernels ag__loss_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__loss_kernels *ag__loss_on(const char *op, ag_device dev);
/* How many losses with label smoothing > 0 the _smoothed ops have made:
 * ag_model_loss checks that a kind's own loss made one when asked to. */
extern int64_t ag__smoothed_losses;
#endif

#endif
