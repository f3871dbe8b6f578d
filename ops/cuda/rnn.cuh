/* rnn.cuh - the launchers of ops/cuda/rnn.cu, for ops/cuda/rnn.c,
 * which composes them with cuBLAS into the family's CUDA table
 * (ops/rnn.h).  C and C++: no engine types. */
#ifndef AG_CUDA_RNN_CUH
#define AG_CUDA_RNN_CUH

#include "../../graph/kreal.h"

AG_KERNELS_BEGIN

/* The LSTM and the GRU over their packed rows (rnn_saved: step t's rows
 * k in [off[t], off[t+1]), example row_b[k], src[k] = row_b[k] N + t,
 * prev[k] its row at t-1 or -1); the products are cuBLAS's (ops/cuda/rnn.c).  h0/c0 and
 * h_final/c_final point at the layer's [B,H] slice, or are NULL; kept
 * is the input's dropout mask or NULL. */
void ag__rnn_gather_input_cuda(const ag__kreal *x, const int32_t *src, const uint8_t *kept, ag__kreal scale,
                                ag__kreal *xin, int64_t rows, int in);
/* kept [rows, in] in packed order from by_row, the mask drawn per example
 * over [T, in] (row k: example row_b[k], step src[k] % N) */
void ag__rnn_gather_mask_cuda(const uint8_t *by_row, const int32_t *row_b, const int32_t *src, int N, int T, int in,
                               uint8_t *kept, int64_t rows);
void ag__rnn_bias_rows_cuda(const ag__kreal *b_ih, const ag__kreal *b_hh, ag__kreal *gates, int64_t rows, int n4);
void ag__rnn_states_before_cuda(const ag__kreal *h, const ag__kreal *c, const int32_t *prev, const int32_t *row_b,
                                 const ag__kreal *h0, const ag__kreal *c0, ag__kreal *hprev, ag__kreal *cprev, int k0,
                                 int rows, int H);
/* A step's cells; they also write each row's h and c into its next row's
 * hprev and cprev (next[k] >= 0) and h into out at src[k], so the next
 * step needs no gather and the layer no scatter. */
void ag__lstm_cells_forward_cuda(ag__kreal *gates, ag__kreal *cprev, ag__kreal *c, ag__kreal *h, ag__kreal *tc,
                                 const int32_t *next, const int32_t *src, ag__kreal *hprev, ag__kreal *out, int k0,
                                 int rows, int H);
void ag__rnn_final_states_cuda(const ag__kreal *h, const ag__kreal *c, const int32_t *last, const ag__kreal *h0,
                                const ag__kreal *c0, ag__kreal *h_final, ag__kreal *c_final, int B, int H);
/* dh_next (or NULL at the last step): dG_{t+1} W_hh^T in step t+1's row
 * order, its first row next_k0; a row with no next row reads dh (by example). */
void ag__lstm_cells_backward_cuda(ag__kreal *dG, const ag__kreal *gates, const ag__kreal *cprev, const ag__kreal *tc,
                                  const ag__kreal *dh, const ag__kreal *dh_next, const int32_t *next, int next_k0,
                                  const ag__kreal *dY, ag__kreal *dc, const int32_t *src, const int32_t *row_b, int k0,
                                  int rows, int H);
/* The GRU's step: gates [rows, 3H] the input side, activated in place;
 * hg the recurrent side; h into the row, its next row's hprev and out. */
void ag__gru_cells_forward_cuda(ag__kreal *gates, const ag__kreal *hg, ag__kreal *hprev, ag__kreal *h,
                                const int32_t *next, const int32_t *src, ag__kreal *out, int k0, int rows, int H);
/* Backwards: dh_next and dh as the LSTM's; dh_out [rows, H] in this step's
 * row order receives z dL/dh_t, to which the caller adds dGh W_hh^T. */
void ag__gru_cells_backward_cuda(ag__kreal *dGx, ag__kreal *dGh, const ag__kreal *gates, const ag__kreal *hg,
                                 const ag__kreal *hprev, const ag__kreal *dh, const ag__kreal *dh_next,
                                 const int32_t *next, int next_k0, const ag__kreal *dY, ag__kreal *dh_out,
                                 const int32_t *src, const int32_t *row_b, int k0, int rows, int H);
void ag__rnn_scatter_rows_cuda(const ag__kreal *dhc, const int32_t *row_b, ag__kreal *dh, int k0, int rows, int H);
void ag__rnn_column_sums_cuda(const ag__kreal *G, int64_t rows, int n, ag__kreal *g1, ag__kreal *g2);
void ag__rnn_scatter_input_grad_cuda(const ag__kreal *dxin, const int32_t *src, const uint8_t *kept, ag__kreal scale,
                                      ag__kreal *gx, int64_t rows, int in);

AG_KERNELS_END

#endif
