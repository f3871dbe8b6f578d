/* shape.cu - the CUDA side of ops/shape.c (and of ops/attention.c's head
 * split/merge): one strided copy for permutes, slices, concat parts and
 * heads, and the gather of index_select/embedding with its gradient.  One
 * thread per destination element everywhere, so no two threads write the
 * same element and no float atomics are needed. */
#include "../../graph/prelude.cuh"
#include "../shape.h"

/* Thread per element of p.shape: read through the source strides, write
 * through the destination ones. */
__global__ void strided_copy_kernel(ag__kstrided p, const ag_real *S, ag_real *D, bool add, int64_t n) {
    AG_CUDA_FOR(i, n) {
        int64_t is, id;
        ag__offsets4(i, p.shape, p.src_stride, p.dst_stride, &is, &id);
        D[id] = add ? D[id] + S[is] : S[is];
    }
}

static void strided_copy(const ag__kstrided *p, const ag_real *src, ag_real *dst, bool add) {
    int64_t n = p->shape[0] * p->shape[1] * p->shape[2] * p->shape[3];
    if (n > 0) ag__launch(strided_copy_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, *p, src, dst, add, n);
}

static void copy_rows(int64_t rows, int64_t cols, const ag_real *src, int64_t src_ld, ag_real *dst, int64_t dst_ld,
                      bool add) {
    ag__kstrided p = {{1, 1, rows, cols}, {0, 0, src_ld, 1}, {0, 0, dst_ld, 1}};
    strided_copy(&p, src, dst, add);
}

/* Forward reads x through the plan's strides into the dense output;
 * backward (grad) writes the output's gradient back through them. */
static void permute(const ag__kpermute *p, const ag_real *src, ag_real *dst, bool grad, bool add) {
    ag__kstrided k;
    int64_t dense = 1;
    for (int d = 3; d >= 0; d--) {
        k.shape[d] = p->shape[d];
        k.src_stride[d] = grad ? dense : p->stride[d];
        k.dst_stride[d] = grad ? p->stride[d] : dense;
        dense *= p->shape[d];
    }
    strided_copy(&k, src, dst, add);
}

/* Thread per output element (o, i, k) of [outer, n, inner]. */
__global__ void gather_kernel(const ag_real *X, const int32_t *index, ag_real *Y, int in_rows, int n, int64_t inner,
                              int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, oi = e / inner;
        int64_t i = oi % n, o = oi / n;
        Y[e] = X[(o * in_rows + index[i]) * inner + k];
    }
}

static void gather(const ag_real *x, const int32_t *index, ag_real *out, int64_t outer, int in_rows, int n,
                   int64_t inner) {
    int64_t size = outer * n * inner;
    if (size > 0)
        ag__launch(gather_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, x, index, out, in_rows, n, inner, size);
}

/* Thread per element (o, r, k) of gx [outer, in_rows, inner]: it adds the
 * gradients of the positions that read row r, in increasing position - the
 * CPU's order (ops/shape.c's gather_grad_columns), so the same bits. */
__global__ void gather_grad_kernel(const ag_real *G, const int32_t *first, const int32_t *pos, ag_real *GX,
                                   int in_rows, int n, int64_t inner, bool fresh, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t k = e % inner, orow = e / inner;
        int64_t r = orow % in_rows, o = orow / in_rows;
        ag_real acc = fresh ? 0 : GX[e];
        for (int32_t p = first[r]; p < first[r + 1]; p++) acc += G[(o * n + pos[p]) * inner + k];
        GX[e] = acc;
    }
}

static void gather_backward(const ag_real *g, const int32_t *first, const int32_t *pos, ag_real *gx, int64_t outer,
                            int in_rows, int n, int64_t inner, bool fresh) {
    int64_t size = outer * in_rows * inner;
    if (size > 0)
        ag__launch(gather_grad_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, g, first, pos, gx, in_rows, n, inner,
                   fresh, size);
}

/* Differences from the last block: a thread per output element forward;
 * backward a thread per (row, feature l), writing l in every block and
 * summing them in block order, as the CPU. */
__global__ void ref_diff_kernel(const ag_real *X, ag_real *Y, int g, int d, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t r = e / ((int64_t)g * d), i = e % ((int64_t)g * d);
        const ag_real *xr = X + r * (g + 1) * d;
        Y[e] = xr[i] - xr[(int64_t)g * d + i % d];
    }
}

__global__ void ref_diff_grad_kernel(const ag_real *GY, ag_real *GX, int g, int d, bool fresh, int64_t size) {
    AG_CUDA_FOR(e, size) {
        int64_t r = e / d;
        int l = (int)(e % d);
        const ag_real *gyr = GY + r * g * d;
        ag_real *gxr = GX + r * (g + 1) * d, sum = 0;
        for (int k = 0; k < g; k++) {
            ag_real v = gyr[(int64_t)k * d + l];
            gxr[(int64_t)k * d + l] = fresh ? v : gxr[(int64_t)k * d + l] + v;
            sum += v;
        }
        gxr[(int64_t)g * d + l] = fresh ? -sum : gxr[(int64_t)g * d + l] - sum;
    }
}

static void ref_diff(const ag_real *x, ag_real *y, int64_t rows, int g, int d) {
    int64_t size = rows * g * d;
    if (size > 0) ag__launch(ref_diff_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, x, y, g, d, size);
}

static void ref_diff_backward(const ag_real *gy, ag_real *gx, int64_t rows, int g, int d, bool fresh) {
    int64_t size = rows * d;
    if (size > 0)
        ag__launch(ref_diff_grad_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, gy, gx, g, d, fresh, size);
}

extern "C" const ag__shape_kernels ag__shape_cuda = {strided_copy, copy_rows,         permute, gather, gather_backward,
                                                     ref_diff,     ref_diff_backward};
