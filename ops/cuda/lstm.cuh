/* lstm.cuh - the launchers of ops/cuda/lstm.cu, for ops/cuda/lstm.c,
 * which composes them with cuBLAS into the family's CUDA table
 * (ops/lstm.h).  C and C++: no engine types. */
#ifndef AG_CUDA_LSTM_CUH
#define AG_CUDA_LSTM_CUH

#include "../../graph/kreal.h"

AG_KERNELS_BEGIN

/* The LSTM over its packed rows (lstm_saved: step t's rows
 * k in [off[t], off[t+1]), example row_b[k], src[k] = row_b[k] N + t,
 * prev[k] its row at t-1 or -1); the products are cuBLAS's (ops/cuda/lstm.c).  h0/c0 and
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

AG_KERNELS_END

#endif
