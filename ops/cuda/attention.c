/* attention.c (CUDA) - ops/attention.c's kernels on the GPU: every product
 * is one strided-batched cuBLAS call over all slices at once, the softmax is
 * the masked softmax kernel over P in place (ops/cuda/softmax.cu), and
 * backward's dP/dS is one [slices, Nq, Nk] buffer, released when backward
 * returns.  The head permutes are strided copies (ops/cuda/shape.cu). */
#include "../attention.h"
#include "../elementwise.h"
#include "../shape.h"
#include "../dispatch.h"
#include "../../graph/device.h"

/* C = op(A) op(B) (+ C when accumulate) for each of `slices` contiguous
 * row-major slices.  Empty sizes make no call (cuBLAS refuses a leading
 * dimension of 0); an empty inner dimension gives C = 0 (or leaves it). */
static void slices_gemm(bool ta, bool tb, int M, int N, int K, const ag_real *A, const ag_real *B, bool accumulate,
                        ag_real *C, int slices) {
    if (slices == 0 || M == 0 || N == 0) return;
    if (K == 0) {
        if (!accumulate) ag__elementwise_cuda.fill(C, 0, (int64_t)slices * M * N);
        return;
    }
    ag__cuda_gemm_batched(ta, tb, M, N, K, A, ta ? M : K, (int64_t)M * K, B, tb ? K : N, (int64_t)K * N,
                          accumulate ? 1 : 0, C, N, (int64_t)M * N, slices);
}

/* A group's query slices (grouped-query attention) are one product of
 * group * nq rows against their key-value slice: `units` of them. */
static void attention_forward(const ag__kattn *p, const ag__kmask *mp, const ag_real *mask, const ag_real *Q,
                              const ag_real *K, const ag_real *V, ag_real *out) {
    int units = p->slices / p->group, gq = p->group * p->nq;
    slices_gemm(false, true, gq, p->nk, p->d, Q, K, false, p->probs, units); /* scores, unscaled */
    ag__softmax_cuda.rows_forward(p->probs, mask, mp, p->scale, p->probs, (int64_t)p->slices * p->nq);
    slices_gemm(false, false, gq, p->dv, p->nk, p->probs, V, false, out, units);
}

static void attention_backward(const ag__kattn *p, const ag_real *Q, const ag_real *K, const ag_real *V,
                               const ag_real *G, ag_real *GQ, bool fresh_q, ag_real *GK, bool fresh_k, ag_real *GV,
                               bool fresh_v) {
    const ag_real *P = p->probs;
    int units = p->slices / p->group, gq = p->group * p->nq;
    if (GV) slices_gemm(true, false, p->nk, p->dv, gq, P, G, !fresh_v, GV, units);
    if (!GQ && !GK) return;
    size_t pos;
    int chunk;
    ag__cuda_arena_mark(&pos, &chunk); /* dS lives for this call only (the stream keeps the order) */
    int64_t pq = (int64_t)p->slices * p->nq * p->nk;
    ag_real *dS = ag__cuda_arena_alloc((size_t)(pq > 0 ? pq : 1) * sizeof(ag_real));
    slices_gemm(false, true, gq, p->nk, p->dv, G, V, false, dS, units); /* dP = dO V^T */
    ag__softmax_cuda.rows_backward(P, dS, p->scale, dS, (int64_t)p->slices * p->nq, p->nk, true);
    if (GQ) slices_gemm(false, false, gq, p->d, p->nk, dS, K, !fresh_q, GQ, units);
    if (GK) slices_gemm(true, false, p->nk, p->d, gq, dS, Q, !fresh_k, GK, units);
    ag__cuda_arena_rewind(pos, chunk);
}

/* The permute as a strided copy walking the destination in order: to heads
 * it reads [outer, N, h, d] (rows `row` apart) as (o, j, t, i), else
 * [outer, h, N, d] as (o, t, j, i). */
static void heads_permute(const ag_real *src, ag_real *dst, int64_t outer, int N, int h, int d, int64_t row,
                          bool to_heads, bool accumulate) {
    int64_t Nd = (int64_t)N * d;
    ag__kstrided p = to_heads ? (ag__kstrided){{outer, h, N, d}, {N * row, d, row, 1}, {h * Nd, Nd, d, 1}}
                             : (ag__kstrided){{outer, N, h, d}, {h * Nd, d, Nd, 1}, {N * row, row, d, 1}};
    ag__shape_cuda.strided_copy(&p, src, dst, accumulate);
}

const ag__attention_kernels ag__attention_cuda = {
    .forward = attention_forward,
    .backward = attention_backward,
    .heads_permute = heads_permute,
};
