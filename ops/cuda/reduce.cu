/* reduce.cu - the CUDA side of ops/reduce.c: the sum of all elements, and
 * sum, mean and max along an axis. */
#include "../../graph/prelude.cuh"
#include "../reduce.h"

/* One block sums x in a fixed order: thread t adds elements t, t + 1024,
 * ... in turn, then a tree over the 1024 partial sums.  No atomics, so the
 * result has the same bits on every run (a multi-block first pass would be
 * faster for very large n; losses and metrics are the sums here). */
enum { SUM_THREADS = 1024 };

/* The one kernel launched with 1024 threads: the bound keeps it within the
 * 64 registers a thread such a block can have (ptxas: about 30 now); every
 * other launch has 256 threads or fewer, which any kernel's registers fit. */
__global__ void __launch_bounds__(SUM_THREADS) sum_kernel(const ag_real *X, ag_real scale, ag_real *out, int64_t n) {
    __shared__ ag_real part[SUM_THREADS];
    ag_real acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += SUM_THREADS) acc += X[i];
    ag_real sum = ag__block_sum<SUM_THREADS>(part, acc);
    if (threadIdx.x == 0) *out = scale == 1 ? sum : sum * scale;
}

__global__ void sum_grad_kernel(const ag_real *G, ag_real scale, ag_real *GX, int64_t n, bool fresh) {
    ag_real g = scale * G[0];
    AG_CUDA_FOR(i, n) GX[i] = fresh ? g : GX[i] + g;
}

static void sum_total(const ag_real *x, ag_real scale, ag_real *out, int64_t n) {
    ag__launch(sum_kernel, 1, SUM_THREADS, 0, x, scale, out, n);
}

static void sum_backward(const ag_real *g, ag_real scale, ag_real *gx, int64_t n, bool fresh) {
    if (n > 0) ag__launch(sum_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, g, scale, gx, n, fresh);
}

/* ---- along an axis: x as [outer, n, inner], one thread per output element
 * (o, k) walking the axis in increasing position, as the CPU does (so the
 * same sums, and the same first maximum on ties) ---- */

__global__ void sum_axis_kernel(const ag_real *X, ag_real *Y, ag_real scale, int64_t n, int64_t inner, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, o = e / inner;
        const ag_real *x = X + o * n * inner + k;
        ag_real acc = 0;
        for (int64_t i = 0; i < n; i++) acc += x[i * inner];
        Y[e] = scale != 1 ? acc * scale : acc;
    }
}

/* Thread per input element (o, i, k): gx (+)= scale g[o, k]. */
__global__ void sum_axis_grad_kernel(const ag_real *G, ag_real *GX, ag_real scale, int64_t n, int64_t inner,
                                     bool fresh, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, o = e / inner / n;
        ag_real d = scale * G[o * inner + k];
        GX[e] = fresh ? d : GX[e] + d;
    }
}

__global__ void max_axis_kernel(const ag_real *X, ag_real *Y, int32_t *arg, int64_t n, int64_t inner,
                                const int32_t *len, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, o = e / inner, m = len ? len[o] : n;
        const ag_real *x = X + o * n * inner + k;
        if (m == 0) { /* an empty example: 0, and no gradient */
            Y[e] = 0;
            arg[e] = -1;
            continue;
        }
        ag_real best = x[0];
        int32_t at = 0;
        for (int64_t i = 1; i < m; i++)
            if (x[i * inner] > best) { /* strictly: a tie keeps the first */
                best = x[i * inner];
                at = (int32_t)i;
            }
        Y[e] = best;
        arg[e] = at;
    }
}

/* Thread per input element (o, i, k): the output's gradient if i is the
 * chosen position of (o, k), else 0 (a fresh buffer is written whole). */
__global__ void max_axis_grad_kernel(const ag_real *G, const int32_t *arg, ag_real *GX, int64_t n, int64_t inner,
                                     bool fresh, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, oi = e / inner;
        int64_t i = oi % n, o = oi / n;
        bool chosen = arg[o * inner + k] == i;
        if (chosen) GX[e] = fresh ? G[o * inner + k] : GX[e] + G[o * inner + k];
        else if (fresh) GX[e] = 0;
    }
}

static void sum_axis_forward(const ag_real *x, ag_real *y, ag_real scale, int64_t outer, int64_t n, int64_t inner) {
    int64_t size = outer * inner;
    if (size > 0)
        ag__launch(sum_axis_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, x, y, scale, n, inner, size);
}

static void sum_axis_backward(const ag_real *g, ag_real *gx, ag_real scale, int64_t outer, int64_t n, int64_t inner,
                              bool fresh) {
    int64_t size = outer * n * inner;
    if (size > 0)
        ag__launch(sum_axis_grad_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, g, gx, scale, n, inner, fresh,
                   size);
}

static void max_axis_forward(const ag_real *x, ag_real *y, int32_t *arg, int64_t outer, int64_t n, int64_t inner,
                             const int32_t *len) {
    int64_t size = outer * inner;
    if (size > 0 && (n > 0 || len))
        ag__launch(max_axis_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, x, y, arg, n, inner, len, size);
}

static void max_axis_backward(const ag_real *g, const int32_t *arg, ag_real *gx, int64_t outer, int64_t n,
                              int64_t inner, bool fresh) {
    int64_t size = outer * n * inner;
    if (size > 0)
        ag__launch(max_axis_grad_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, g, arg, gx, n, inner, fresh, size);
}

extern "C" const ag__reduce_kernels ag__reduce_cuda = {
    sum_total, sum_backward, sum_axis_forward, sum_axis_backward, max_axis_forward, max_axis_backward,
};
