/* no_cuda.c - the kernel launchers of kernels.h in a build without CUDA.
 * No tensor can be on the GPU there (ag_to and ag_set_device refuse first),
 * so these are never reached; they exist so that the ops' dispatch links. */
#include "../../graph/internal.h"
#include "kernels.h"

#define UNREACHABLE(name) ag__fatal(name, "this attngrad was built without CUDA")

void ag__unary_forward_cuda(int op, const ag_kreal *x, ag_kreal *y, int64_t n) {
    (void)op, (void)x, (void)y, (void)n;
    UNREACHABLE("unary");
}
void ag__unary_backward_cuda(int op, const ag_kreal *x, const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, int64_t n,
                             bool fresh) {
    (void)op, (void)x, (void)y, (void)g, (void)gx, (void)n, (void)fresh;
    UNREACHABLE("unary");
}
void ag__binary_forward_cuda(int op, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b, ag_kreal *y) {
    (void)op, (void)bc, (void)a, (void)b, (void)y;
    UNREACHABLE("binary");
}
void ag__binary_backward_cuda(int op, int side, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b,
                              const ag_kreal *g, ag_kreal *gx, int64_t gx_size, bool fresh) {
    (void)op, (void)side, (void)bc, (void)a, (void)b, (void)g, (void)gx, (void)gx_size, (void)fresh;
    UNREACHABLE("binary");
}
void ag__affine_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal scale, ag_kreal shift, int64_t n) {
    (void)x, (void)y, (void)scale, (void)shift, (void)n;
    UNREACHABLE("affine");
}
void ag__affine_backward_cuda(const ag_kreal *g, ag_kreal *gx, ag_kreal scale, int64_t n, bool fresh) {
    (void)g, (void)gx, (void)scale, (void)n, (void)fresh;
    UNREACHABLE("affine");
}
void ag__fill_cuda(ag_kreal *y, ag_kreal value, int64_t n) {
    (void)y, (void)value, (void)n;
    UNREACHABLE("fill");
}
void ag__add_into_cuda(ag_kreal *y, const ag_kreal *x, int64_t n) {
    (void)y, (void)x, (void)n;
    UNREACHABLE("add");
}
void ag__sum_forward_cuda(const ag_kreal *x, ag_kreal scale, ag_kreal *out, int64_t n) {
    (void)x, (void)scale, (void)out, (void)n;
    UNREACHABLE("ag_sum");
}
void ag__sum_backward_cuda(const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n, bool fresh) {
    (void)g, (void)scale, (void)gx, (void)n, (void)fresh;
    UNREACHABLE("ag_sum");
}
void ag__strided_copy_cuda(const ag_kstrided *p, const ag_kreal *src, ag_kreal *dst, bool add) {
    (void)p, (void)src, (void)dst, (void)add;
    UNREACHABLE("strided copy");
}
void ag__gather_cuda(const ag_kreal *x, const int32_t *index, ag_kreal *out, int64_t outer, int in_rows, int n,
                     int64_t inner) {
    (void)x, (void)index, (void)out, (void)outer, (void)in_rows, (void)n, (void)inner;
    UNREACHABLE("gather");
}
void ag__gather_backward_cuda(const ag_kreal *g, const int32_t *first, const int32_t *pos, ag_kreal *gx,
                              int64_t outer, int in_rows, int n, int64_t inner, bool fresh) {
    (void)g, (void)first, (void)pos, (void)gx, (void)outer, (void)in_rows, (void)n, (void)inner, (void)fresh;
    UNREACHABLE("gather");
}
void ag__sum_axis_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal scale, int64_t outer, int64_t n,
                               int64_t inner) {
    (void)x, (void)y, (void)scale, (void)outer, (void)n, (void)inner;
    UNREACHABLE("ag_sum_axis");
}
void ag__sum_axis_backward_cuda(const ag_kreal *g, ag_kreal *gx, ag_kreal scale, int64_t outer, int64_t n,
                                int64_t inner, bool fresh) {
    (void)g, (void)gx, (void)scale, (void)outer, (void)n, (void)inner, (void)fresh;
    UNREACHABLE("ag_sum_axis");
}
void ag__max_axis_forward_cuda(const ag_kreal *x, ag_kreal *y, int32_t *arg, int64_t outer, int64_t n,
                               int64_t inner) {
    (void)x, (void)y, (void)arg, (void)outer, (void)n, (void)inner;
    UNREACHABLE("ag_max_axis");
}
void ag__max_axis_backward_cuda(const ag_kreal *g, const int32_t *arg, ag_kreal *gx, int64_t outer, int64_t n,
                                int64_t inner, bool fresh) {
    (void)g, (void)arg, (void)gx, (void)outer, (void)n, (void)inner, (void)fresh;
    UNREACHABLE("ag_max_axis");
}
void ag__clamp_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal lo, ag_kreal hi, int64_t n) {
    (void)x, (void)y, (void)lo, (void)hi, (void)n;
    UNREACHABLE("ag_clamp");
}
void ag__clamp_backward_cuda(const ag_kreal *x, const ag_kreal *g, ag_kreal *gx, ag_kreal lo, ag_kreal hi,
                             int64_t n, bool fresh) {
    (void)x, (void)g, (void)gx, (void)lo, (void)hi, (void)n, (void)fresh;
    UNREACHABLE("ag_clamp");
}
void ag__lstm_gather_input_cuda(const ag_kreal *x, const int32_t *src, const uint8_t *kept, ag_kreal scale,
                                ag_kreal *xin, int64_t rows, int in) {
    (void)x, (void)src, (void)kept, (void)scale, (void)xin, (void)rows, (void)in;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_gather_mask_cuda(const uint8_t *by_row, const int32_t *row_b, const int32_t *src, int N, int T, int in,
                               uint8_t *kept, int64_t rows) {
    (void)by_row, (void)row_b, (void)src, (void)N, (void)T, (void)in, (void)kept, (void)rows;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_bias_rows_cuda(const ag_kreal *b_ih, const ag_kreal *b_hh, ag_kreal *gates, int64_t rows, int n4) {
    (void)b_ih, (void)b_hh, (void)gates, (void)rows, (void)n4;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_states_before_cuda(const ag_kreal *h, const ag_kreal *c, const int32_t *prev, const int32_t *row_b,
                                 const ag_kreal *h0, const ag_kreal *c0, ag_kreal *hprev, ag_kreal *cprev, int k0,
                                 int rows, int H) {
    (void)h, (void)c, (void)prev, (void)row_b, (void)h0, (void)c0, (void)hprev, (void)cprev, (void)k0, (void)rows,
        (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_cells_forward_cuda(ag_kreal *gates, const ag_kreal *cprev, ag_kreal *c, ag_kreal *h, ag_kreal *tc,
                                 int k0, int rows, int H) {
    (void)gates, (void)cprev, (void)c, (void)h, (void)tc, (void)k0, (void)rows, (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_scatter_output_cuda(const ag_kreal *h, const int32_t *src, ag_kreal *out, int64_t rows, int H) {
    (void)h, (void)src, (void)out, (void)rows, (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_final_states_cuda(const ag_kreal *h, const ag_kreal *c, const int32_t *last, const ag_kreal *h0,
                                const ag_kreal *c0, ag_kreal *h_final, ag_kreal *c_final, int B, int H) {
    (void)h, (void)c, (void)last, (void)h0, (void)c0, (void)h_final, (void)c_final, (void)B, (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_cells_backward_cuda(ag_kreal *dG, const ag_kreal *gates, const ag_kreal *cprev, const ag_kreal *tc,
                                  const ag_kreal *dh, const ag_kreal *dY, ag_kreal *dc, const int32_t *src,
                                  const int32_t *row_b, int k0, int rows, int H) {
    (void)dG, (void)gates, (void)cprev, (void)tc, (void)dh, (void)dY, (void)dc, (void)src, (void)row_b, (void)k0,
        (void)rows, (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_scatter_rows_cuda(const ag_kreal *dhc, const int32_t *row_b, ag_kreal *dh, int k0, int rows, int H) {
    (void)dhc, (void)row_b, (void)dh, (void)k0, (void)rows, (void)H;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_column_sums_cuda(const ag_kreal *G, int64_t rows, int n, ag_kreal *g1, ag_kreal *g2) {
    (void)G, (void)rows, (void)n, (void)g1, (void)g2;
    UNREACHABLE("ag_lstm");
}
void ag__lstm_scatter_input_grad_cuda(const ag_kreal *dxin, const int32_t *src, const uint8_t *kept, ag_kreal scale,
                                      ag_kreal *gx, int64_t rows, int in) {
    (void)dxin, (void)src, (void)kept, (void)scale, (void)gx, (void)rows, (void)in;
    UNREACHABLE("ag_lstm");
}
const char *ag__cuda_launch_error(void) { return ""; }

/* optim/cuda/optimizer.cu */
void ag__sgd_update_cuda(const ag_ksgd *c, ag_kreal *p, const ag_kreal *g, ag_kreal *buf, int64_t n,
                         const double *gate) {
    (void)c, (void)p, (void)g, (void)buf, (void)n, (void)gate;
    UNREACHABLE("ag_optim_step");
}
void ag__adam_update_cuda(const ag_kadam *c, ag_kreal *p, const ag_kreal *g, ag_kreal *m, ag_kreal *v, ag_kreal *vmax,
                          int64_t n, const double *gate) {
    (void)c, (void)p, (void)g, (void)m, (void)v, (void)vmax, (void)n, (void)gate;
    UNREACHABLE("ag_optim_step");
}
void ag__adadelta_update_cuda(const ag_kadadelta *c, ag_kreal *p, const ag_kreal *g, ag_kreal *v, ag_kreal *u,
                              int64_t n, const double *gate) {
    (void)c, (void)p, (void)g, (void)v, (void)u, (void)n, (void)gate;
    UNREACHABLE("ag_optim_step");
}
void ag__step_gate_cuda(const ag_kreal *loss, const double *sq, double *gate) {
    (void)loss, (void)sq, (void)gate;
    UNREACHABLE("train step");
}
void ag__step_values_cuda(const ag_kreal *loss, const double *sq, const double *psq, double *out) {
    (void)loss, (void)sq, (void)psq, (void)out;
    UNREACHABLE("train step");
}
void ag__sum_squares_blocks_cuda(const ag_kreal *x, int64_t n, double *block_sq) {
    (void)x, (void)n, (void)block_sq;
    UNREACHABLE("gradient norm");
}
void ag__sum_blocks_in_order_cuda(const double *block_sq, const int64_t *first, int arrays, bool per_array,
                                  double init, double *out) {
    (void)block_sq, (void)first, (void)arrays, (void)per_array, (void)init, (void)out;
    UNREACHABLE("gradient norm");
}
void ag__clip_coef_cuda(const double *sq, double max_norm, double *coef) {
    (void)sq, (void)max_norm, (void)coef;
    UNREACHABLE("ag_clip_grad_norm");
}
void ag__scale_below_one_cuda(ag_kreal *x, int64_t n, const double *coef) {
    (void)x, (void)n, (void)coef;
    UNREACHABLE("ag_clip_grad_norm");
}
void ag__axpy_cuda(ag_kreal a, const ag_kreal *x, ag_kreal *y, int64_t n) {
    (void)a, (void)x, (void)y, (void)n;
    UNREACHABLE("axpy");
}

/* issue 22: dropout, layer norm, the linear layer's bias and activation */
void ag__dropout_mask_cuda(uint8_t *kept, int64_t rows, int64_t row_len, int64_t row_base, const uint64_t *seed,
                           int64_t below) {
    (void)kept, (void)rows, (void)row_len, (void)row_base, (void)seed, (void)below;
    UNREACHABLE("ag_dropout");
}
void ag__dropout_apply_cuda(const uint8_t *kept, const ag_kreal *x, ag_kreal scale, ag_kreal *y, int64_t n) {
    (void)kept, (void)x, (void)scale, (void)y, (void)n;
    UNREACHABLE("ag_dropout");
}
void ag__dropout_backward_cuda(const uint8_t *kept, const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n,
                               bool fresh) {
    (void)kept, (void)g, (void)scale, (void)gx, (void)n, (void)fresh;
    UNREACHABLE("ag_dropout");
}
void ag__layernorm_rows_cuda(const ag_kreal *x, const ag_kreal *gamma, const ag_kreal *beta, ag_kreal eps,
                             ag_kreal *y, ag_kreal *mean, ag_kreal *rstd, int64_t rows, int D) {
    (void)x, (void)gamma, (void)beta, (void)eps, (void)y, (void)mean, (void)rstd, (void)rows, (void)D;
    UNREACHABLE("ag_layernorm");
}
void ag__layernorm_grad_rows_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *gamma, const ag_kreal *mean,
                                  const ag_kreal *rstd, ag_kreal *gx, int64_t rows, int D, bool fresh) {
    (void)x, (void)g, (void)gamma, (void)mean, (void)rstd, (void)gx, (void)rows, (void)D, (void)fresh;
    UNREACHABLE("ag_layernorm");
}
void ag__layernorm_grad_affine_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *mean, const ag_kreal *rstd,
                                    ag_kreal *ggamma, ag_kreal *gbeta, int64_t rows, int D) {
    (void)x, (void)g, (void)mean, (void)rstd, (void)ggamma, (void)gbeta, (void)rows, (void)D;
    UNREACHABLE("ag_layernorm");
}
void ag__bias_rows_cuda(const ag_kreal *bias, ag_kreal *y, int64_t rows, int cols) {
    (void)bias, (void)y, (void)rows, (void)cols;
    UNREACHABLE("ag_linear");
}
void ag__act_forward_cuda(int act, ag_kreal *y, int64_t n) {
    (void)act, (void)y, (void)n;
    UNREACHABLE("ag_dense");
}
void ag__act_backward_cuda(int act, const ag_kreal *dy, const ag_kreal *y, ag_kreal *g, int64_t n) {
    (void)act, (void)dy, (void)y, (void)g, (void)n;
    UNREACHABLE("ag_dense");
}
void ag__col_sums_cuda(const ag_kreal *x, int64_t rows, int cols, const ag_kreal *scale, ag_kreal *partial,
                       ag_kreal *out) {
    (void)x, (void)rows, (void)cols, (void)scale, (void)partial, (void)out;
    UNREACHABLE("ag_linear");
}
void ag__grads_pack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, ag_kreal w, bool zero,
                         ag_kreal *flat, int64_t n, const ag_kreal tail[3]) {
    (void)slots, (void)count, (void)largest, (void)w, (void)zero, (void)flat, (void)n, (void)tail;
    UNREACHABLE("ag_dist_reduce_grads");
}
void ag__grads_unpack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, const ag_kreal *flat, int64_t n) {
    (void)slots, (void)count, (void)largest, (void)flat, (void)n;
    UNREACHABLE("ag_dist_reduce_grads");
}
