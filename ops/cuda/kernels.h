/* kernels.h - the CUDA kernels' launchers, as C sees them.
 *
 * Each op family's kernels live in ops/cuda/<family>.cu, beside the CPU code
 * in ops/<family>.c, and the launchers keep the CPU function's name with a
 * _cuda suffix: softmax_rows_forward in ops/softmax.c has
 * ag__softmax_rows_forward_cuda in ops/cuda/softmax.cu.  Launchers take raw
 * device pointers and sizes (no ag_tensor: the .cu files are C++ and see
 * none of the engine), run on the engine's one stream and return at once:
 * no hidden synchronisation. */
#ifndef AG_CUDA_KERNELS_H
#define AG_CUDA_KERNELS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef AG_REAL_DOUBLE
typedef double ag_kreal;
#else
typedef float ag_kreal;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The unary table of ops/unary_table.h, by its index (AG_UNARY_<NAME>). */
void ag__unary_forward_cuda(int op, const ag_kreal *x, ag_kreal *y, int64_t n);
/* gx = (fresh ? 0 : gx) + g * f'(x, y) */
void ag__unary_backward_cuda(int op, const ag_kreal *x, const ag_kreal *y, const ag_kreal *g, ag_kreal *gx,
                             int64_t n, bool fresh);

/* Binary ops with broadcasting (ops/elementwise.c's plan): the output's
 * shape right-aligned in 4 dims, and each operand's strides (0 where it is
 * repeated).  op: AG_BINARY_add, _sub, _mul, _div, _maximum. */
typedef struct {
    int shape[4];
    int64_t sa[4], sb[4];
} ag_kbcast;
enum { AG_BINARY_add, AG_BINARY_sub, AG_BINARY_mul, AG_BINARY_div, AG_BINARY_maximum };
void ag__binary_forward_cuda(int op, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b, ag_kreal *y);
/* The gradient of one operand (side 0: a, 1: b), whose strides are in bc:
 * each of its elements sums, in increasing output order, the terms of every
 * output position that reads it (no atomics: the same bits every run).
 * gx has the operand's size; fresh: store instead of add. */
void ag__binary_backward_cuda(int op, int side, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b,
                              const ag_kreal *g, ag_kreal *gx, int64_t gx_size, bool fresh);
/* y = scale x + shift; backward gx (+)= scale g */
void ag__affine_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal scale, ag_kreal shift, int64_t n);
void ag__affine_backward_cuda(const ag_kreal *g, ag_kreal *gx, ag_kreal scale, int64_t n, bool fresh);
void ag__fill_cuda(ag_kreal *y, ag_kreal value, int64_t n);
/* y += x */
void ag__add_into_cuda(ag_kreal *y, const ag_kreal *x, int64_t n);

/* *out = scale * sum of x[0..n), in a fixed order (deterministic for a
 * given n; scale 1/n gives the mean). */
void ag__sum_forward_cuda(const ag_kreal *x, ag_kreal scale, ag_kreal *out, int64_t n);
/* gx (+)= scale g[0] for every element (g is on the device). */
void ag__sum_backward_cuda(const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n, bool fresh);

/* Softmax over the last axis of [rows, cols]; backward
 * gx (+)= y (g - sum(g y)). */
void ag__softmax_rows_forward_cuda(const ag_kreal *x, ag_kreal *y, int64_t rows, int cols);
void ag__softmax_rows_backward_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, int64_t rows, int cols,
                                    bool fresh);

/* ---- losses (ops/loss.c; ops/cuda/loss.cu) ----
 * Cross-entropy, a warp per row of [rows, C]: m = max z, s = log sum
 * exp(z - m), loss = s - (z_y - m); ignored rows (label ignore_index) get
 * loss 0 and m, s unset. */
void ag__cross_entropy_forward_cuda(const ag_kreal *z, const int32_t *labels, int ignore_index, ag_kreal *row_max,
                                    ag_kreal *row_lse, ag_kreal *row_loss, int64_t rows, int C);
/* gz (+)= g[0] / counted (softmax - onehot) on counted rows; ignored rows
 * 0 when fresh, untouched otherwise. */
void ag__cross_entropy_backward_cuda(const ag_kreal *z, const int32_t *labels, int ignore_index,
                                     const ag_kreal *row_max, const ag_kreal *row_lse, const ag_kreal *g,
                                     int64_t counted, ag_kreal *gz, int64_t rows, int C, bool fresh);
/* *out = n ? (ag_kreal)(sum of row_loss[0..rows) in double, in row order) / n : 0. */
void ag__row_loss_mean_cuda(const ag_kreal *row_loss, int64_t rows, int64_t n, ag_kreal *out);
void ag__row_loss_mean_f64_cuda(const double *row_loss, int64_t rows, int64_t n, ag_kreal *out);
/* The fused linear + cross-entropy on its counted rows z [n, C] (bias and
 * product already in): row losses, and with to_grad the rows become
 * softmax - onehot in place. */
void ag__lce_rows_cuda(ag_kreal *z, const int32_t *labels, ag_kreal *loss, int64_t n, int C, bool to_grad);
/* scal[0] = g[0] / n, scal[1] = 0, scal[2] = 1: the fused backward's GEMM
 * factors, made on the device (no read of g on the host). */
void ag__lce_scale_cuda(const ag_kreal *g, int64_t n, ag_kreal *scal);
/* y rows: y[i] = x[idx[i]] (width wide); unpack: dst row r = src row pos[r]
 * (pos -1: 0), stored when fresh (0 on the -1 rows) or added. */
void ag__gather_rows_cuda(const ag_kreal *x, int width, const int32_t *idx, int64_t n, ag_kreal *y);
void ag__unpack_rows_cuda(ag_kreal *dst, const ag_kreal *src, int width, const int32_t *pos, int64_t rows,
                          bool fresh);
/* KL to a soft target t [rows, C]: m, s, the row's target mass, and the
 * row's loss in double. */
void ag__kl_div_soft_forward_cuda(const ag_kreal *z, const ag_kreal *t, ag_kreal *row_max, ag_kreal *row_lse,
                                  ag_kreal *row_mass, double *row_loss, int64_t rows, int C);
/* gz += g[0] / rows (mass softmax - t) */
void ag__kl_div_soft_backward_cuda(const ag_kreal *z, const ag_kreal *t, const ag_kreal *row_max,
                                   const ag_kreal *row_lse, const ag_kreal *row_mass, const ag_kreal *g, ag_kreal *gz,
                                   int64_t rows, int C);
/* *out = sum (p - t)^2 in double, in a fixed order, / n; backward
 * gp += s (p - t), gt -= s (p - t) with s = 2 g[0] / n (either may be NULL). */
void ag__mse_forward_cuda(const ag_kreal *p, const ag_kreal *t, ag_kreal *out, int64_t n);
void ag__mse_backward_cuda(const ag_kreal *p, const ag_kreal *t, const ag_kreal *g, ag_kreal *gp, ag_kreal *gt,
                           int64_t n);

/* ---- dropout (ops/dropout.c; ops/cuda/dropout.cu): the host's mask,
 * copied; y = kept ? scale x : 0, backward gx (+)= kept ? scale g : 0 ---- */
void ag__dropout_apply_cuda(const uint8_t *kept, const ag_kreal *x, ag_kreal scale, ag_kreal *y, int64_t n);
void ag__dropout_backward_cuda(const uint8_t *kept, const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n,
                               bool fresh);

/* ---- layer norm over the last axis (ops/layernorm.c; ops/cuda/layernorm.cu):
 * a warp per row; gamma, beta may be NULL ---- */
void ag__layernorm_rows_cuda(const ag_kreal *x, const ag_kreal *gamma, const ag_kreal *beta, ag_kreal eps,
                             ag_kreal *y, ag_kreal *mean, ag_kreal *rstd, int64_t rows, int D);
void ag__layernorm_grad_rows_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *gamma, const ag_kreal *mean,
                                  const ag_kreal *rstd, ag_kreal *gx, int64_t rows, int D, bool fresh);
/* ggamma, gbeta (either NULL) += their column sums over the rows, a
 * thread per column adding the rows in order (the CPU's order). */
void ag__layernorm_grad_affine_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *mean, const ag_kreal *rstd,
                                    ag_kreal *ggamma, ag_kreal *gbeta, int64_t rows, int D);

/* ---- the linear layer's bias and activation (ops/matmul.c; ops/cuda/linear.cu) ---- */
/* y [rows, cols] = bias in every row (0 when bias is NULL). */
void ag__bias_rows_cuda(const ag_kreal *bias, ag_kreal *y, int64_t rows, int cols);
/* ag_act's values (matmul.c checks that they agree). */
enum { AG_KACT_NONE, AG_KACT_RELU, AG_KACT_ELU, AG_KACT_TANH, AG_KACT_SIGMOID };
/* act (an AG_KACT_) in place; backward g = dy act'(.) from the output y. */
void ag__act_forward_cuda(int act, ag_kreal *y, int64_t n);
void ag__act_backward_cuda(int act, const ag_kreal *dy, const ag_kreal *y, ag_kreal *g, int64_t n);
/* Column sums of x [rows, cols] in two passes, no atomics: each block of
 * AG_KCOL_ROWS rows sums its rows in order into partial [blocks, cols]
 * (the caller's, blocks = ceil(rows / AG_KCOL_ROWS)), then a thread per
 * column adds the partials in block order - matmul.c's bias gradient, to
 * the bit.  scale NULL: out[k] = out[k] + p_0 + p_1 + ...; else (on the
 * device) out[k] += scale (p_0 + p_1 + ...). */
enum { AG_KCOL_ROWS = 64 };
static inline int64_t ag__col_blocks(int64_t rows) { return (rows + AG_KCOL_ROWS - 1) / AG_KCOL_ROWS; }
void ag__col_sums_cuda(const ag_kreal *x, int64_t rows, int cols, const ag_kreal *scale, ag_kreal *partial,
                       ag_kreal *out);

/* The last launch error, "" if none (cudaGetLastError's string). */
const char *ag__cuda_launch_error(void);

#ifdef __cplusplus
}
#endif
#endif
