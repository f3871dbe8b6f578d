/* dropout.cu - the CUDA side of ops/dropout.c: the mask is drawn on the
 * host (the CPU's generator and keying, bit for bit) and copied; these
 * kernels apply it and its backward. */
#include "prelude.cuh"

__global__ void dropout_apply_kernel(const uint8_t *kept, const ag_real *X, ag_real scale, ag_real *Y, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = kept[i] ? scale * X[i] : 0;
}

__global__ void dropout_grad_kernel(const uint8_t *kept, const ag_real *G, ag_real scale, ag_real *GX, int64_t n,
                                    bool fresh) {
    AG_CUDA_FOR(i, n) {
        if (kept[i]) GX[i] = fresh ? scale * G[i] : GX[i] + scale * G[i];
        else if (fresh) GX[i] = 0;
    }
}

extern "C" void ag__dropout_apply_cuda(const uint8_t *kept, const ag_real *x, ag_real scale, ag_real *y, int64_t n) {
    if (n > 0)
        dropout_apply_kernel<<<ag__cuda_blocks(n), AG_CUDA_THREADS, 0, ag__cuda_stream()>>>(kept, x, scale, y, n);
}

extern "C" void ag__dropout_backward_cuda(const uint8_t *kept, const ag_real *g, ag_real scale, ag_real *gx, int64_t n,
                                          bool fresh) {
    if (n > 0)
        dropout_grad_kernel<<<ag__cuda_blocks(n), AG_CUDA_THREADS, 0, ag__cuda_stream()>>>(kept, g, scale, gx, n,
                                                                                          fresh);
}
