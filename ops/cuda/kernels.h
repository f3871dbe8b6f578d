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

#ifdef __cplusplus
}
#endif
#endif
