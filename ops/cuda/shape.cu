/* shape.cu - the CUDA side of ops/shape.c (and of ops/attention.c's head
 * split/merge): one strided copy for permutes, slices, concat parts and
 * heads, and the gather of index_select/embedding with its gradient.  One
 * thread per destination element everywhere, so no two threads write the
 * same element and no float atomics are needed. */
#include "prelude.cuh"

/* Thread per element of p.shape: read through the source strides, write
 * through the destination ones. */
__global__ void strided_copy_kernel(ag_kstrided p, const ag_real *S, ag_real *D, bool add, int64_t n) {
    AG_CUDA_FOR(i, n) {
        int64_t is, id;
        ag__offsets4(i, p.shape, p.src_stride, p.dst_stride, &is, &id);
        D[id] = add ? D[id] + S[is] : S[is];
    }
}

extern "C" void ag__strided_copy_cuda(const ag_kstrided *p, const ag_real *src, ag_real *dst, bool add) {
    int64_t n = p->shape[0] * p->shape[1] * p->shape[2] * p->shape[3];
    if (n > 0) ag__launch(strided_copy_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, *p, src, dst, add, n);
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

extern "C" void ag__gather_cuda(const ag_real *x, const int32_t *index, ag_real *out, int64_t outer, int in_rows,
                                int n, int64_t inner) {
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

extern "C" void ag__gather_backward_cuda(const ag_real *g, const int32_t *first, const int32_t *pos, ag_real *gx,
                                         int64_t outer, int in_rows, int n, int64_t inner, bool fresh) {
    int64_t size = outer * in_rows * inner;
    if (size > 0)
        ag__launch(gather_grad_kernel, ag__cuda_blocks(size), AG_CUDA_THREADS, 0, g, first, pos, gx, in_rows, n, inner,
                   fresh, size);
}
