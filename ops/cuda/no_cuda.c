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
const char *ag__cuda_launch_error(void) { return ""; }

/* optim/cuda/optimizer.cu */

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
