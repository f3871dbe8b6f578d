/* reduce.cu - the CUDA side of ops/reduce.c: the sum of all elements. */
#include "prelude.cuh"

/* One block sums x in a fixed order: thread t adds elements t, t + 1024,
 * ... in turn, then a tree over the 1024 partial sums.  No atomics, so the
 * result has the same bits on every run (a multi-block first pass would be
 * faster for very large n; losses and metrics are the sums here). */
enum { SUM_THREADS = 1024 };

__global__ void sum_kernel(const ag_real *X, ag_real scale, ag_real *out, int64_t n) {
    __shared__ ag_real part[SUM_THREADS];
    ag_real acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += SUM_THREADS) acc += X[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = SUM_THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = scale == 1 ? part[0] : part[0] * scale;
}

__global__ void sum_grad_kernel(const ag_real *G, ag_real scale, ag_real *GX, int64_t n, bool fresh) {
    ag_real g = scale * G[0];
    AG_CUDA_FOR(i, n) GX[i] = fresh ? g : GX[i] + g;
}

extern "C" void ag__sum_forward_cuda(const ag_real *x, ag_real scale, ag_real *out, int64_t n) {
    sum_kernel<<<1, SUM_THREADS, 0, ag__cuda_stream()>>>(x, scale, out, n);
}

extern "C" void ag__sum_backward_cuda(const ag_real *g, ag_real scale, ag_real *gx, int64_t n, bool fresh) {
    if (n > 0) sum_grad_kernel<<<ag__cuda_blocks(n), AG_CUDA_THREADS, 0, ag__cuda_stream()>>>(g, scale, gx, n, fresh);
}
