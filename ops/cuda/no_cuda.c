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
void ag__softmax_rows_forward_cuda(const ag_kreal *x, const ag_kreal *mask, const ag_kmask *plan, ag_kreal scale,
                                   ag_kreal *y, int64_t rows) {
    (void)x, (void)mask, (void)plan, (void)scale, (void)y, (void)rows;
    UNREACHABLE("ag_masked_softmax");
}
void ag__softmax_rows_backward_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t rows,
                                    int cols, bool fresh) {
    (void)y, (void)g, (void)scale, (void)gx, (void)rows, (void)cols, (void)fresh;
    UNREACHABLE("ag_masked_softmax");
}
void ag__log_softmax_rows_cuda(const ag_kreal *x, ag_kreal *y, int64_t rows, int cols) {
    (void)x, (void)y, (void)rows, (void)cols;
    UNREACHABLE("ag_log_softmax");
}
void ag__log_softmax_rows_grad_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, int64_t rows, int cols,
                                    bool fresh) {
    (void)y, (void)g, (void)gx, (void)rows, (void)cols, (void)fresh;
    UNREACHABLE("ag_log_softmax");
}
void ag__softmax_len_cuda(const ag_kreal *x, ag_kreal *y, const int32_t *len, int64_t outer, int64_t n, int64_t inner,
                          int64_t per_example) {
    (void)x, (void)y, (void)len, (void)outer, (void)n, (void)inner, (void)per_example;
    UNREACHABLE("ag_softmax_axis_len");
}
void ag__softmax_len_grad_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, const int32_t *len, int64_t outer,
                               int64_t n, int64_t inner, int64_t per_example, bool fresh) {
    (void)y, (void)g, (void)gx, (void)len, (void)outer, (void)n, (void)inner, (void)per_example, (void)fresh;
    UNREACHABLE("ag_softmax_axis_len");
}
void ag__softmax_mix_forward_cuda(const ag_kmix *j, int64_t rows) {
    (void)j, (void)rows;
    UNREACHABLE("ag_softmax_mix");
}
void ag__softmax_mix_backward_cuda(const ag_kmix *j, int64_t rows) {
    (void)j, (void)rows;
    UNREACHABLE("ag_softmax_mix");
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
const char *ag__cuda_launch_error(void) { return ""; }

/* optim/cuda/optimizer.cu */
void ag__sgd_update_cuda(const ag_ksgd *c, ag_kreal *p, const ag_kreal *g, ag_kreal *buf, int64_t n) {
    (void)c, (void)p, (void)g, (void)buf, (void)n;
    UNREACHABLE("ag_optim_step");
}
void ag__adam_update_cuda(const ag_kadam *c, ag_kreal *p, const ag_kreal *g, ag_kreal *m, ag_kreal *v, ag_kreal *vmax,
                          int64_t n) {
    (void)c, (void)p, (void)g, (void)m, (void)v, (void)vmax, (void)n;
    UNREACHABLE("ag_optim_step");
}
void ag__adadelta_update_cuda(const ag_kadadelta *c, ag_kreal *p, const ag_kreal *g, ag_kreal *v, ag_kreal *u,
                              int64_t n) {
    (void)c, (void)p, (void)g, (void)v, (void)u, (void)n;
    UNREACHABLE("ag_optim_step");
}
void ag__sum_squares_blocks_cuda(const ag_kreal *x, int64_t n, double *block_sq) {
    (void)x, (void)n, (void)block_sq;
    UNREACHABLE("gradient norm");
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
