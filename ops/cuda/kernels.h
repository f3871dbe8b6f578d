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

#include "../kreal.h"
#include "../softmax.h"
#include "../elementwise.h"
#include "../reduce.h"
#include "../shape.h"
#include "../layernorm.h"
#include "../dropout.h"
#include "../matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The elementwise family: ops/elementwise.h. */

/* The reduce family: ops/reduce.h; the shape family: ops/shape.h. */

/* The softmax family: ops/softmax.h. */

/* ---- optim/cuda/optimizer.cu: the updates of optim/optimizer.c and the
 * gradient arithmetic of optim/gradients.c.  The coefficients are computed
 * once on the host, for both devices, so the per-element arithmetic is the
 * same expression on each. ---- */
typedef struct {
    ag_kreal lr, wd, mu, keep;
    bool first, nesterov; /* first: the momentum buffer starts as the gradient */
} ag_ksgd;
typedef struct {
    ag_kreal b1, b2, one_b1, one_b2, step_size, bc2_sqrt, eps, l2, decay;
    bool coupled_decay, decoupled_decay;
} ag_kadam;
typedef struct {
    ag_kreal lr, wd, rho, one_rho, eps;
} ag_kadadelta;
/* c points at the coefficients in device memory; gate, when not NULL, at
 * a value on the device that skips the update unless finite. */
void ag__sgd_update_cuda(const ag_ksgd *c, ag_kreal *p, const ag_kreal *g, ag_kreal *buf, int64_t n,
                         const double *gate);
/* vmax NULL: no amsgrad */
void ag__adam_update_cuda(const ag_kadam *c, ag_kreal *p, const ag_kreal *g, ag_kreal *m, ag_kreal *v, ag_kreal *vmax,
                          int64_t n, const double *gate);
void ag__adadelta_update_cuda(const ag_kadadelta *c, ag_kreal *p, const ag_kreal *g, ag_kreal *v, ag_kreal *u,
                              int64_t n, const double *gate);
/* The training step on the device (models/train.c): *gate = *sq, or NaN
 * when *loss is not finite; out[0..2] = loss, *sq, *psq for one read. */
void ag__step_gate_cuda(const ag_kreal *loss, const double *sq, double *gate);
void ag__step_values_cuda(const ag_kreal *loss, const double *sq, const double *psq, double *out);
/* block_sq[b] = the sum of x^2 over elements [b*4096, (b+1)*4096) in double,
 * in 8 lanes added as optim/gradients.c adds them (the same bits). */
enum { AG_SQ_BLOCK = 4096, AG_SQ_LANES = 8 };
void ag__sum_squares_blocks_cuda(const ag_kreal *x, int64_t n, double *block_sq);
/* *out = init + the block sums of `arrays` arrays (array a's are
 * block_sq[first[a] .. first[a+1]), first on the device) added in the
 * CPU's order: per array, then the arrays (per_array), or one running sum
 * over all blocks. */
void ag__sum_blocks_in_order_cuda(const double *block_sq, const int64_t *first, int arrays, bool per_array,
                                  double init, double *out);
/* *coef = max_norm / (sqrt(*sq) + 1e-6), on the device; x *= *coef where
 * *coef < 1 (clipping with no value crossing to the host) */
void ag__clip_coef_cuda(const double *sq, double max_norm, double *coef);
void ag__scale_below_one_cuda(ag_kreal *x, int64_t n, const double *coef);
/* y += a x */
void ag__axpy_cuda(ag_kreal a, const ag_kreal *x, ag_kreal *y, int64_t n);

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

/* The dropout family: ops/dropout.h. */

/* The layer norm family: ops/layernorm.h. */

/* The matmul family (the linear layer's bias, activation and column sums):
 * ops/matmul.h. */

/* The Gaussian positional attention (ops/gaussian.c).  The mean recurrence,
 * one thread per example: mu [B,N] and above (1 where the max took
 * m_t . b_t) from m [B,N,3] and the lengths; backward gm (fresh: stored). */
void ag__gaussian_mu_cuda(const ag_kreal *m, const int32_t *len, ag_kreal *mu, uint8_t *above, int B, int N);
void ag__gaussian_mu_backward_cuda(const ag_kreal *m, const ag_kreal *mu, const ag_kreal *g, const int32_t *len,
                                   const uint8_t *above, ag_kreal *gm, int B, int N, bool fresh);
/* The context's normalised weights w [B,N,N] (0 outside each window and
 * on padding) and window sums [B,N]; backward: dmu, dsigma [B,N] from
 * dw = dC h^T (either output may be NULL). */
void ag__gauss_weights_cuda(ag_kreal *w, ag_kreal *sum, const ag_kreal *mu, const ag_kreal *sigma, const int32_t *len,
                            int B, int N, bool strict, ag_kreal eps);
void ag__gauss_weights_backward_cuda(const ag_kreal *w, const ag_kreal *dw, const ag_kreal *sum, const ag_kreal *mu,
                                     const ag_kreal *sigma, const int32_t *len, ag_kreal *gmu, ag_kreal *gsigma, int B,
                                     int N, bool strict, ag_kreal eps, bool fresh_mu, bool fresh_sigma);

/* MTSA's token2token attention (ops/mtsa_attn.c), over `slices` [N,N]
 * score slices (per_b of them per example, len[slice / per_b]): ER
 * [slices,N,N] from R and the {0,1} mask (repeating every mask_slices
 * slices, or NULL), [ES | v ⊙ ES] [slices,N,2dh] from S and v, H from
 * [Z | Num] = ER [ES | v ⊙ ES]; backward [dZ | dNum] into d, then dR from
 * dER, dS and dv from [dES | d(v ⊙ ES)] (gs or gv may be NULL). */
void ag__mtsa_er_cuda(const ag_kreal *r, const ag_kreal *mask, int mask_slices, const int32_t *len, int per_b,
                      ag_kreal *er, int64_t slices, int N, bool identity);
void ag__mtsa_ep_cuda(const ag_kreal *s, const ag_kreal *v, const int32_t *len, int per_b, ag_kreal *ep,
                      int64_t slices, int N, int dh);
void ag__mtsa_out_cuda(const ag_kreal *zn, const int32_t *len, int per_b, ag_kreal *out, int64_t slices, int N,
                       int dh);
void ag__mtsa_d_cuda(const ag_kreal *g, const ag_kreal *out, const ag_kreal *zn, const int32_t *len, int per_b,
                     ag_kreal *d, int64_t slices, int N, int dh);
void ag__mtsa_r_grad_cuda(const ag_kreal *der, const ag_kreal *er, const ag_kreal *r, ag_kreal *gr, int64_t n,
                          bool identity, bool fresh);
void ag__mtsa_sv_grad_cuda(const ag_kreal *dep, const ag_kreal *ep, const ag_kreal *v, const int32_t *len, int per_b,
                           ag_kreal *gs, ag_kreal *gv, int64_t slices, int N, int dh, bool fresh_s, bool fresh_v);

/* The LSTM (ops/lstm.c) over its packed rows (lstm_saved: step t's rows
 * k in [off[t], off[t+1]), example row_b[k], src[k] = row_b[k] N + t,
 * prev[k] its row at t-1 or -1); the products are cuBLAS's.  h0/c0 and
 * h_final/c_final point at the layer's [B,H] slice, or are NULL; kept
 * is the input's dropout mask or NULL. */
void ag__lstm_gather_input_cuda(const ag_kreal *x, const int32_t *src, const uint8_t *kept, ag_kreal scale,
                                ag_kreal *xin, int64_t rows, int in);
/* kept [rows, in] in packed order from by_row, the mask drawn per example
 * over [T, in] (row k: example row_b[k], step src[k] % N) */
void ag__lstm_gather_mask_cuda(const uint8_t *by_row, const int32_t *row_b, const int32_t *src, int N, int T, int in,
                               uint8_t *kept, int64_t rows);
void ag__lstm_bias_rows_cuda(const ag_kreal *b_ih, const ag_kreal *b_hh, ag_kreal *gates, int64_t rows, int n4);
void ag__lstm_states_before_cuda(const ag_kreal *h, const ag_kreal *c, const int32_t *prev, const int32_t *row_b,
                                 const ag_kreal *h0, const ag_kreal *c0, ag_kreal *hprev, ag_kreal *cprev, int k0,
                                 int rows, int H);
void ag__lstm_cells_forward_cuda(ag_kreal *gates, const ag_kreal *cprev, ag_kreal *c, ag_kreal *h, ag_kreal *tc,
                                 int k0, int rows, int H);
void ag__lstm_scatter_output_cuda(const ag_kreal *h, const int32_t *src, ag_kreal *out, int64_t rows, int H);
void ag__lstm_final_states_cuda(const ag_kreal *h, const ag_kreal *c, const int32_t *last, const ag_kreal *h0,
                                const ag_kreal *c0, ag_kreal *h_final, ag_kreal *c_final, int B, int H);
void ag__lstm_cells_backward_cuda(ag_kreal *dG, const ag_kreal *gates, const ag_kreal *cprev, const ag_kreal *tc,
                                  const ag_kreal *dh, const ag_kreal *dY, ag_kreal *dc, const int32_t *src,
                                  const int32_t *row_b, int k0, int rows, int H);
void ag__lstm_scatter_rows_cuda(const ag_kreal *dhc, const int32_t *row_b, ag_kreal *dh, int k0, int rows, int H);
void ag__lstm_column_sums_cuda(const ag_kreal *G, int64_t rows, int n, ag_kreal *g1, ag_kreal *g2);
void ag__lstm_scatter_input_grad_cuda(const ag_kreal *dxin, const int32_t *src, const uint8_t *kept, ag_kreal scale,
                                      ag_kreal *gx, int64_t rows, int in);

/* The last launch error, "" if none (cudaGetLastError's string). */
const char *ag__cuda_launch_error(void);

/* ---- models/cuda/dist.cu: the flat gradient buffer of data-parallel
 * training (models/dist.c), in device memory ---- */
typedef struct {
    ag_kreal *grad;
    int64_t offset, size; /* where the gradient sits in the flat buffer */
} ag_kgrad_slot;
/* slots[0..count) (on the device, count >= 1), largest the longest size:
 * flat[offset + k] = w grad[k] (0 when zero: a rank without rows), and
 * flat[n..n+3) = tail. */
void ag__grads_pack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, ag_kreal w, bool zero,
                         ag_kreal *flat, int64_t n, const ag_kreal tail[3]);
/* After the sum: grad[k] = flat[offset + k] inv, inv = 1 / flat[n + 1] (the
 * summed count) rounded as the host path rounds it, 0 when that is 0. */
void ag__grads_unpack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, const ag_kreal *flat, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
