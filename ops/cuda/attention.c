/* attention.c (CUDA) - ops/attention.c's kernels on the GPU: every product
 * is one strided-batched cuBLAS call over all slices at once, the softmax is
 * the masked softmax kernel over P in place (ops/cuda/softmax.cu), and
 * backward's dP/dS is one [slices, Nq, Nk] buffer, released when backward
 * returns.  ag_attention_recompute (probs NULL) takes the same steps over
 * blocks of query rows whose [slices, rows, Nk] scratch is bounded, and
 * makes P again in backward.  The head permutes are strided copies
 * (ops/cuda/shape.cu). */
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

/* ---- recomputed attention (probs NULL) ----
 *
 * Rows r0.. of every query slice at once, as many rows as keep a block's
 * [slices, rows, nk] scratch within RECOMPUTE_SCRATCH reals (one block for
 * most shapes: then the steps are the stored path's).  A group's query
 * slices are not contiguous within a block, so each product runs once per
 * slice of the group, batched over the units.  The op body keeps the
 * probabilities for empty shapes, so every size here is >= 1. */
enum { RECOMPUTE_SCRATCH = 1 << 24 };

static int recompute_rows(const ag__kattn *p) {
    if (p->block_rows > 0) return p->block_rows < p->nq ? p->block_rows : p->nq;
    int64_t rows = RECOMPUTE_SCRATCH / ((int64_t)p->slices * p->nk);
    if (rows < 1) rows = 1;
    return rows < p->nq ? (int)rows : p->nq;
}

/* C(unit u) = op(A(u)) op(B(u)) (+ C) for the units' slice g of their group,
 * where a block of `rows` rows of each of a unit's slices is at A, B or C
 * with unit stride `group` times a slice's. */
static void units_gemm(const ag__kattn *p, bool ta, bool tb, int M, int N, int K, const ag_real *A, int lda,
                       int64_t sa, const ag_real *B, int ldb, int64_t sb, bool accumulate, ag_real *C, int ldc,
                       int64_t sc) {
    ag__cuda_gemm_batched(ta, tb, M, N, K, A, lda, sa, B, ldb, sb, accumulate ? 1 : 0, C, ldc, sc,
                          p->slices / p->group);
}

/* P [slices, rows, nk] = softmax(scale Q K^T + mask) over rows r0.. of
 * every slice: a product per slice of a group and one softmax launch. */
static void block_probs(const ag__kattn *p, const ag_real *Q, const ag_real *K, int r0, int rows, ag_real *P) {
    int64_t gq = (int64_t)p->group * p->nq, bp = (int64_t)rows * p->nk;
    for (int g = 0; g < p->group; g++)
        units_gemm(p, false, true, rows, p->nk, p->d, Q + (g * p->nq + r0) * (int64_t)p->d, p->d, gq * p->d, K, p->d,
                   (int64_t)p->nk * p->d, false, P + g * bp, p->nk, p->group * bp);
    ag__kmask block = *p->mask_plan;
    block.rows3[2] = rows;
    const ag_real *mask = p->mask ? p->mask + r0 * block.stride3[2] : NULL;
    ag__softmax_cuda.rows_forward(P, mask, &block, p->scale, P, (int64_t)p->slices * rows);
}

static void recompute_forward(const ag__kattn *p, const ag_real *Q, const ag_real *K, const ag_real *V, ag_real *out) {
    int block = recompute_rows(p);
    int64_t gq = (int64_t)p->group * p->nq;
    size_t pos;
    int chunk;
    ag__cuda_arena_mark(&pos, &chunk); /* the scratch lives for this call only (the stream keeps the order) */
    ag_real *P = ag__cuda_arena_alloc((size_t)p->slices * block * p->nk * sizeof(ag_real));
    for (int r0 = 0; r0 < p->nq; r0 += block) {
        int rows = p->nq - r0 < block ? p->nq - r0 : block;
        int64_t bp = (int64_t)rows * p->nk;
        block_probs(p, Q, K, r0, rows, P);
        for (int g = 0; g < p->group; g++)
            units_gemm(p, false, false, rows, p->dv, p->nk, P + g * bp, p->nk, p->group * bp, V, p->dv,
                       (int64_t)p->nk * p->dv, false, out + (g * p->nq + r0) * (int64_t)p->dv, p->dv, gq * p->dv);
    }
    ag__cuda_arena_rewind(pos, chunk);
}

/* Every gradient is added block by block, so the fresh ones are zeroed
 * first (all of them before any is added: q, k and v may be one tensor). */
static void recompute_backward(const ag__kattn *p, const ag_real *Q, const ag_real *K, const ag_real *V,
                               const ag_real *G, ag_real *GQ, bool fresh_q, ag_real *GK, bool fresh_k, ag_real *GV,
                               bool fresh_v) {
    int units = p->slices / p->group, block = recompute_rows(p);
    int64_t gq = (int64_t)p->group * p->nq;
    if (GV && fresh_v) ag__elementwise_cuda.fill(GV, 0, (int64_t)units * p->nk * p->dv);
    if (GQ && fresh_q) ag__elementwise_cuda.fill(GQ, 0, (int64_t)p->slices * p->nq * p->d);
    if (GK && fresh_k) ag__elementwise_cuda.fill(GK, 0, (int64_t)units * p->nk * p->d);
    size_t pos;
    int chunk;
    ag__cuda_arena_mark(&pos, &chunk);
    int64_t scratch = (int64_t)p->slices * block * p->nk;
    ag_real *P = ag__cuda_arena_alloc((size_t)(GQ || GK ? 2 : 1) * scratch * sizeof(ag_real)), *dS = P + scratch;
    for (int r0 = 0; r0 < p->nq; r0 += block) {
        int rows = p->nq - r0 < block ? p->nq - r0 : block;
        int64_t bp = (int64_t)rows * p->nk;
        block_probs(p, Q, K, r0, rows, P);
        for (int g = 0; g < p->group; g++) {
            const ag_real *Gg = G + (g * p->nq + r0) * (int64_t)p->dv;
            if (GV)
                units_gemm(p, true, false, p->nk, p->dv, rows, P + g * bp, p->nk, p->group * bp, Gg, p->dv,
                           gq * p->dv, true, GV, p->dv, (int64_t)p->nk * p->dv);
            if (GQ || GK) /* dP = dO V^T */
                units_gemm(p, false, true, rows, p->nk, p->dv, Gg, p->dv, gq * p->dv, V, p->dv, (int64_t)p->nk * p->dv,
                           false, dS + g * bp, p->nk, p->group * bp);
        }
        if (!GQ && !GK) continue;
        ag__softmax_cuda.rows_backward(P, dS, p->scale, dS, (int64_t)p->slices * rows, p->nk, true);
        for (int g = 0; g < p->group; g++) {
            int64_t at = (g * p->nq + r0) * (int64_t)p->d;
            if (GQ)
                units_gemm(p, false, false, rows, p->d, p->nk, dS + g * bp, p->nk, p->group * bp, K, p->d,
                           (int64_t)p->nk * p->d, true, GQ + at, p->d, gq * p->d);
            if (GK)
                units_gemm(p, true, false, p->nk, p->d, rows, dS + g * bp, p->nk, p->group * bp, Q + at, p->d,
                           gq * p->d, true, GK, p->d, (int64_t)p->nk * p->d);
        }
    }
    ag__cuda_arena_rewind(pos, chunk);
}

/* A group's query slices (grouped-query attention) are one product of
 * group * nq rows against their key-value slice: `units` of them. */
static void attention_forward(const ag__kattn *p, const ag__kmask *mp, const ag_real *mask, const ag_real *Q,
                              const ag_real *K, const ag_real *V, ag_real *out) {
    if (!p->probs) {
        recompute_forward(p, Q, K, V, out);
        return;
    }
    int units = p->slices / p->group, gq = p->group * p->nq;
    slices_gemm(false, true, gq, p->nk, p->d, Q, K, false, p->probs, units); /* scores, unscaled */
    ag__softmax_cuda.rows_forward(p->probs, mask, mp, p->scale, p->probs, (int64_t)p->slices * p->nq);
    slices_gemm(false, false, gq, p->dv, p->nk, p->probs, V, false, out, units);
}

static void attention_backward(const ag__kattn *p, const ag_real *Q, const ag_real *K, const ag_real *V,
                               const ag_real *G, ag_real *GQ, bool fresh_q, ag_real *GK, bool fresh_k, ag_real *GV,
                               bool fresh_v) {
    if (!p->probs) {
        recompute_backward(p, Q, K, V, G, GQ, fresh_q, GK, fresh_k, GV, fresh_v);
        return;
    }
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
