/* no_cuda.c - the kernel launchers of kernels.h in a build without CUDA.
 * No tensor can be on the GPU there (ag_to and ag_set_device refuse first),
 * so these are never reached; they exist so that the ops' dispatch links. */
#include "../../graph/internal.h"
#include "kernels.h"

#define UNREACHABLE(name) ag__fatal(name, "this attngrad was built without CUDA")

void ag__gaussian_mu_cuda(const ag_kreal *m, const int32_t *len, ag_kreal *mu, uint8_t *above, int B, int N) {
    (void)m, (void)len, (void)mu, (void)above, (void)B, (void)N;
    UNREACHABLE("ag_gaussian_mu");
}
void ag__gaussian_mu_backward_cuda(const ag_kreal *m, const ag_kreal *mu, const ag_kreal *g, const int32_t *len,
                                   const uint8_t *above, ag_kreal *gm, int B, int N, bool fresh) {
    (void)m, (void)mu, (void)g, (void)len, (void)above, (void)gm, (void)B, (void)N, (void)fresh;
    UNREACHABLE("ag_gaussian_mu");
}
void ag__gauss_weights_cuda(ag_kreal *w, ag_kreal *sum, const ag_kreal *mu, const ag_kreal *sigma, const int32_t *len,
                            int B, int N, bool strict, ag_kreal eps) {
    (void)w, (void)sum, (void)mu, (void)sigma, (void)len, (void)B, (void)N, (void)strict, (void)eps;
    UNREACHABLE("ag_gaussian_context");
}
void ag__gauss_weights_backward_cuda(const ag_kreal *w, const ag_kreal *dw, const ag_kreal *sum, const ag_kreal *mu,
                                     const ag_kreal *sigma, const int32_t *len, ag_kreal *gmu, ag_kreal *gsigma, int B,
                                     int N, bool strict, ag_kreal eps, bool fresh_mu, bool fresh_sigma) {
    (void)w, (void)dw, (void)sum, (void)mu, (void)sigma, (void)len, (void)gmu, (void)gsigma, (void)B, (void)N,
        (void)strict, (void)eps, (void)fresh_mu, (void)fresh_sigma;
    UNREACHABLE("ag_gaussian_context");
}
void ag__mtsa_er_cuda(const ag_kreal *r, const ag_kreal *mask, int mask_slices, const int32_t *len, int per_b,
                      ag_kreal *er, int64_t slices, int N, bool identity) {
    (void)r, (void)mask, (void)mask_slices, (void)len, (void)per_b, (void)er, (void)slices, (void)N, (void)identity;
    UNREACHABLE("ag_mtsa_attention");
}
void ag__mtsa_ep_cuda(const ag_kreal *s, const ag_kreal *v, const int32_t *len, int per_b, ag_kreal *ep,
                      int64_t slices, int N, int dh) {
    (void)s, (void)v, (void)len, (void)per_b, (void)ep, (void)slices, (void)N, (void)dh;
    UNREACHABLE("ag_mtsa_attention");
}
void ag__mtsa_out_cuda(const ag_kreal *zn, const int32_t *len, int per_b, ag_kreal *out, int64_t slices, int N,
                       int dh) {
    (void)zn, (void)len, (void)per_b, (void)out, (void)slices, (void)N, (void)dh;
    UNREACHABLE("ag_mtsa_attention");
}
void ag__mtsa_d_cuda(const ag_kreal *g, const ag_kreal *out, const ag_kreal *zn, const int32_t *len, int per_b,
                     ag_kreal *d, int64_t slices, int N, int dh) {
    (void)g, (void)out, (void)zn, (void)len, (void)per_b, (void)d, (void)slices, (void)N, (void)dh;
    UNREACHABLE("ag_mtsa_attention");
}
void ag__mtsa_r_grad_cuda(const ag_kreal *der, const ag_kreal *er, const ag_kreal *r, ag_kreal *gr, int64_t n,
                          bool identity, bool fresh) {
    (void)der, (void)er, (void)r, (void)gr, (void)n, (void)identity, (void)fresh;
    UNREACHABLE("ag_mtsa_attention");
}
void ag__mtsa_sv_grad_cuda(const ag_kreal *dep, const ag_kreal *ep, const ag_kreal *v, const int32_t *len, int per_b,
                           ag_kreal *gs, ag_kreal *gv, int64_t slices, int N, int dh, bool fresh_s, bool fresh_v) {
    (void)dep, (void)ep, (void)v, (void)len, (void)per_b, (void)gs, (void)gv, (void)slices, (void)N, (void)dh,
        (void)fresh_s, (void)fresh_v;
    UNREACHABLE("ag_mtsa_attention");
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

/* issue 22: losses, dropout, layer norm, the linear layer's bias and activation */
void ag__cross_entropy_forward_cuda(const ag_kreal *z, const int32_t *labels, int ignore_index, ag_kreal *row_max,
                                    ag_kreal *row_lse, ag_kreal *row_loss, int64_t rows, int C) {
    (void)z, (void)labels, (void)ignore_index, (void)row_max, (void)row_lse, (void)row_loss, (void)rows, (void)C;
    UNREACHABLE("ag_cross_entropy");
}
void ag__cross_entropy_backward_cuda(const ag_kreal *z, const int32_t *labels, int ignore_index,
                                     const ag_kreal *row_max, const ag_kreal *row_lse, const ag_kreal *g,
                                     int64_t counted, ag_kreal *gz, int64_t rows, int C, bool fresh) {
    (void)z, (void)labels, (void)ignore_index, (void)row_max, (void)row_lse, (void)g, (void)counted, (void)gz,
        (void)rows, (void)C, (void)fresh;
    UNREACHABLE("ag_cross_entropy");
}
void ag__row_loss_mean_cuda(const ag_kreal *row_loss, int64_t rows, int64_t n, ag_kreal *out) {
    (void)row_loss, (void)rows, (void)n, (void)out;
    UNREACHABLE("loss");
}
void ag__row_loss_mean_f64_cuda(const double *row_loss, int64_t rows, int64_t n, ag_kreal *out) {
    (void)row_loss, (void)rows, (void)n, (void)out;
    UNREACHABLE("loss");
}
void ag__lce_rows_cuda(ag_kreal *z, const int32_t *labels, ag_kreal *loss, int64_t n, int C, bool to_grad) {
    (void)z, (void)labels, (void)loss, (void)n, (void)C, (void)to_grad;
    UNREACHABLE("ag_linear_cross_entropy");
}
void ag__lce_scale_cuda(const ag_kreal *g, int64_t n, ag_kreal *scal) {
    (void)g, (void)n, (void)scal;
    UNREACHABLE("ag_linear_cross_entropy");
}
void ag__gather_rows_cuda(const ag_kreal *x, int width, const int32_t *idx, int64_t n, ag_kreal *y) {
    (void)x, (void)width, (void)idx, (void)n, (void)y;
    UNREACHABLE("gather rows");
}
void ag__unpack_rows_cuda(ag_kreal *dst, const ag_kreal *src, int width, const int32_t *pos, int64_t rows,
                          bool fresh) {
    (void)dst, (void)src, (void)width, (void)pos, (void)rows, (void)fresh;
    UNREACHABLE("unpack rows");
}
void ag__kl_div_soft_forward_cuda(const ag_kreal *z, const ag_kreal *t, ag_kreal *row_max, ag_kreal *row_lse,
                                  ag_kreal *row_mass, double *row_loss, int64_t rows, int C) {
    (void)z, (void)t, (void)row_max, (void)row_lse, (void)row_mass, (void)row_loss, (void)rows, (void)C;
    UNREACHABLE("ag_kl_div_soft");
}
void ag__kl_div_soft_backward_cuda(const ag_kreal *z, const ag_kreal *t, const ag_kreal *row_max,
                                   const ag_kreal *row_lse, const ag_kreal *row_mass, const ag_kreal *g, ag_kreal *gz,
                                   int64_t rows, int C) {
    (void)z, (void)t, (void)row_max, (void)row_lse, (void)row_mass, (void)g, (void)gz, (void)rows, (void)C;
    UNREACHABLE("ag_kl_div_soft");
}
void ag__mse_forward_cuda(const ag_kreal *p, const ag_kreal *t, ag_kreal *out, int64_t n) {
    (void)p, (void)t, (void)out, (void)n;
    UNREACHABLE("ag_mse");
}
void ag__mse_backward_cuda(const ag_kreal *p, const ag_kreal *t, const ag_kreal *g, ag_kreal *gp, ag_kreal *gt,
                           int64_t n) {
    (void)p, (void)t, (void)g, (void)gp, (void)gt, (void)n;
    UNREACHABLE("ag_mse");
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
