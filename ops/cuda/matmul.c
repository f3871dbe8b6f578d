/* matmul.c - the matmul family's CUDA table (ops/matmul.h): the products on
 * cuBLAS (graph/cuda.c), composed with the linear layer's kernels of
 * ops/cuda/linear.cu.  In C, beside the engine's device functions; built
 * only with CUDA (ops/cuda/meson.build's cuda_host_sources). */
#include "../dispatch.h"
#include "../matmul.h"
#include "../../graph/device.h"
#include "matmul.cuh"

/* ag_matmul's three cases of ops/matmul.c on cuBLAS, the independent
 * products as one strided-batched call (a shared operand has stride 0). */
static void batched(const ag__kmm *p) {
    int M = p->M, N = p->N, K = p->K;
    int64_t sa = p->a_shared ? 0 : (int64_t)p->a_rows * p->a_cols;
    int64_t sb = p->b_shared ? 0 : (int64_t)p->b_rows * p->b_cols;
    int lda = p->ta ? M : K, ldb = p->tb ? K : N;
    if (p->b_shared && !p->a_shared && !p->c_shared && !p->ta) {
        ag__cuda_gemm(false, p->tb, p->batch * M, N, K, 1, p->A, K, p->B, ldb, p->beta, p->C, N);
    } else if (p->c_shared || p->batch == 1) { /* in batch order: the same sum every run */
        for (int i = 0; i < p->batch; i++)
            ag__cuda_gemm(p->ta, p->tb, M, N, K, 1, p->A + i * sa, lda, p->B + i * sb, ldb, i > 0 ? 1 : p->beta, p->C,
                          N);
    } else {
        ag__cuda_gemm_batched(p->ta, p->tb, M, N, K, p->A, lda, sa, p->B, ldb, sb, p->beta, p->C, N, (int64_t)M * N,
                              p->batch);
    }
}

/* The tall product's gradients as single GEMMs: no row packing here (see
 * below). */
static void tall_backward(bool tb, int rows, int K, int N, const ag_real *G, const ag_real *A, const ag_real *B,
                          ag_real *dA, ag_real *dB) {
    if (dA) ag__cuda_gemm(false, !tb, rows, K, N, 1, G, N, B, tb ? K : N, 1, dA, K);
    if (dB && !tb) ag__cuda_gemm(true, false, K, N, rows, 1, A, K, G, N, 1, dB, N);
    if (dB && tb) ag__cuda_gemm(true, false, N, K, rows, 1, G, N, A, K, 1, dB, K);
}

/* ---- the linear layer: the product on cuBLAS, then the bias and the
 * activation in one pass (ops/cuda/linear.cu): two launches, as the CPU's
 * bias rows + product then activation give the same sum (product + bias).
 * No row packing: zero rows cost the GPU little, and finding them would
 * read the rows back or add a pass.  Backward: G = dY act'(y) (a buffer
 * only with an activation), the bias gradient summed as the CPU sums it
 * (blocks of 64 rows, then the blocks in order: the same bits; with an
 * activation in G's pass), then the products.  G grouped layers take the
 * same launches: each product one strided-batched call over the groups,
 * each pass over all groups at once. ---- */

/* C = op(A) op(B) + beta C for each group's contiguous operands (A [M, K]
 * or [K, M], B [K, N] or [N, K], C [M, N], group after group). */
static void group_gemm(int groups, bool ta, bool tb, int M, int N, int K, const ag_real *A, const ag_real *B,
                       ag_real beta, ag_real *C) {
    if (groups == 1) {
        ag__cuda_gemm_rows(ta, tb, M, N, K, 1, A, B, beta, C);
        return;
    }
    ag__cuda_gemm_batched(ta, tb, M, N, K, A, ag__cuda_ld(ta ? M : K), (int64_t)M * K, B, ag__cuda_ld(tb ? K : N),
                          (int64_t)K * N, beta, C, ag__cuda_ld(N), (int64_t)M * N, groups);
}

static void linear_forward(ag__klinear *j) {
    int groups = ag__klinear_groups(j);
    if (j->rows > 0) group_gemm(groups, false, j->tw, j->rows, j->out, j->in, j->x, j->w, 0, j->y);
    ag__bias_act_cuda(j->bias, j->act, j->y, groups, j->rows, j->out);
}

static void linear_backward(const ag__klinear *j) {
    int groups = ag__klinear_groups(j);
    int64_t cells = (int64_t)groups * j->rows * j->out;
    const ag_real *G = j->dy;
    ag_real *partial = j->db ? ag__cuda_arena_alloc((size_t)(groups * ag__col_blocks(j->rows) * j->out + 1) *
                                                    sizeof(ag_real))
                             : NULL;
    if (j->act != AG_KACT_NONE) {
        ag_real *g = ag__cuda_arena_alloc((size_t)(cells > 0 ? cells : 1) * sizeof(ag_real));
        if (j->db)
            ag__act_backward_col_sums_cuda(j->act, j->dy, j->y, g, groups, j->rows, j->out, partial, j->db);
        else
            ag__act_backward_cuda(j->act, j->dy, j->y, g, cells);
        G = g;
    } else if (j->db) {
        ag__col_sums_groups_cuda(G, groups, j->rows, j->out, NULL, partial, j->db);
    }
    if (j->rows == 0) return; /* x is empty and nothing adds to W */
    if (j->dx) group_gemm(groups, false, !j->tw, j->rows, j->in, j->out, G, j->w, j->fresh_x ? 0 : 1, j->dx);
    if (j->dw && !j->tw) group_gemm(groups, true, false, j->in, j->out, j->rows, j->x, G, 1, j->dw);
    if (j->dw && j->tw) group_gemm(groups, true, false, j->out, j->in, j->rows, G, j->x, 1, j->dw);
}

const ag__matmul_kernels ag__matmul_cuda = {
    .batched = batched,
    .tall_backward = tall_backward,
    .linear_forward = linear_forward,
    .linear_backward = linear_backward,
    .bias_rows = ag__bias_rows_cuda,
    .col_sums = ag__col_sums_cuda,
};
