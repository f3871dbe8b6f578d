/* loss.c - the loss family's CUDA table (ops/loss.h): the kernels of
 * ops/cuda/loss.cu, and the fused classifier's steps, which compose them
 * with cuBLAS.  Compiled only in CUDA builds. */
#include "../dispatch.h"
#include "../loss.h"
#include "../../graph/device.h"
#include "loss.cuh"
#include "matmul.cuh" /* the linear layer's bias rows and column sums */

static ag_real *device_reals(int64_t n) { return ag__cuda_arena_alloc((size_t)(n > 0 ? n : 1) * sizeof(ag_real)); }

/* The counted rows gathered, the bias rows, the product on cuBLAS, then
 * each row's loss (and softmax - onehot in place). */
static void lce_forward(const ag__klce *p, const ag_real *x, const ag_real *w, const ag_real *bias,
                        const int32_t *labels, ag_real *loss, bool to_grad) {
    int64_t N = p->n;
    ag__gather_rows_cuda(x, p->in, p->kept, N, p->X);
    ag__bias_rows_cuda(bias, p->P, N, p->C);
    if (N > 0) ag__cuda_gemm_rows(false, p->tw, (int)N, p->C, p->in, 1, p->X, w, 1, p->P);
    ag__lce_rows_cuda(p->P, labels, p->eps, loss, N, p->C, to_grad);
}

/* As the CPU's, with g = scal[0] on the device (cuBLAS's device pointer
 * mode): dx, dW, db in turn. */
static void lce_backward(const ag__klce *sv, const ag_real *w, const ag_real *g, ag_real *dx, bool fresh_x,
                         ag_real *dw, ag_real *db) {
    int N = (int)sv->n, in = sv->in, C = sv->C;
    ag_real *scal = ag__cuda_arena_alloc(3 * sizeof(ag_real)); /* g, 0, 1 */
    ag__lce_scale_cuda(g, N, scal);
    if (dx) {
        ag_real *dXc = device_reals((int64_t)N * in);
        /* zeroed: with beta read from the device, not leaning on cuBLAS
         * to skip C for beta 0 (a NaN left in the arena by an earlier
         * step would survive 0 * NaN if it did not) */
        ag__cuda_zero(dXc, (size_t)N * in * sizeof(ag_real));
        ag__cuda_gemm_rows_dev(false, !sv->tw, N, in, C, scal, sv->P, w, scal + 1, dXc);
        ag__unpack_rows_cuda(dx, dXc, in, sv->pos, sv->rows, fresh_x);
    }
    if (dw) {
        if (sv->tw) ag__cuda_gemm_rows_dev(true, false, C, in, N, scal, sv->P, sv->X, scal + 2, dw);
        else ag__cuda_gemm_rows_dev(true, false, in, C, N, scal, sv->X, sv->P, scal + 2, dw);
    }
    if (db) ag__col_sums_cuda(sv->P, N, C, scal, device_reals(ag__col_blocks(N) * C), db);
}

const ag__loss_kernels ag__loss_cuda = {
    .ce_forward = ag__cross_entropy_forward_cuda,
    .ce_backward = ag__cross_entropy_backward_cuda,
    .row_mean = ag__row_loss_mean_cuda,
    .row_mean_f64 = ag__row_loss_mean_f64_cuda,
    .lce_forward = lce_forward,
    .lce_backward = lce_backward,
    .kl_forward = ag__kl_div_soft_forward_cuda,
    .kl_backward = ag__kl_div_soft_backward_cuda,
    .mse_forward = ag__mse_forward_cuda,
    .mse_backward = ag__mse_backward_cuda,
};
