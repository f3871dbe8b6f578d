/* linear.cu - the CUDA side of ops/matmul.c's linear layer beyond the
 * product (cuBLAS): the bias and ag_dense's activation added to the
 * product in one pass, the activation's derivative from the output, and the
 * bias gradient's column sums (blocks of rows, then the blocks in order, in
 * one launch: the last block to finish adds them), with the derivative in
 * the same pass when there is one.  A grouped layer's G planes go through
 * the same kernels in the same launches, each plane with its own bias row
 * and its own column sums.
 * ops/cuda/matmul.c composes them with cuBLAS (ops/cuda/matmul.cuh). */
#include "../../graph/prelude.cuh"
#include "matmul.cuh"
#include "../vecmath.h"

__global__ void bias_rows_kernel(const ag_real *bias, ag_real *Y, int64_t rows, int cols) {
    AG_CUDA_FOR(i, rows * cols) Y[i] = bias ? bias[i % cols] : 0;
}

/* As matmul.c's act_row and act_grad_row (the gradient from the output y). */
__device__ static inline ag_real act_of(int act, ag_real y) {
    switch (act) {
    case AG_KACT_RELU: return y > 0 ? y : 0;
    case AG_KACT_ELU: return y > 0 ? y : ag__vexpm1(y);
    case AG_KACT_TANH: return ag__vtanh(y);
    case AG_KACT_SIGMOID: return ag__vsigmoid(y);
    default: return y;
    }
}

__device__ static inline ag_real act_grad_of(int act, ag_real dy, ag_real y) {
    switch (act) {
    case AG_KACT_RELU: return y > 0 ? dy : 0;
    case AG_KACT_ELU: return y > 0 ? dy : dy * (y + 1);
    case AG_KACT_TANH: return dy * (1 - y * y);
    case AG_KACT_SIGMOID: return dy * (y * (1 - y));
    default: return dy;
    }
}

/* y = act(y + bias) after the product (bias NULL: act only): one pass for
 * both, where a bias fill before the product and the activation after it
 * were two launches.  Grouped layers: n = groups x group_cells, each group's
 * cells (rows x cols) with its own bias row. */
__global__ void bias_act_kernel(const ag_real *bias, int act, ag_real *Y, int64_t n, int64_t group_cells, int cols) {
    AG_CUDA_FOR(i, n) Y[i] = act_of(act, bias ? Y[i] + bias[(i / group_cells) * cols + i % cols] : Y[i]);
}

__global__ void act_grad_kernel(int act, const ag_real *DY, const ag_real *Y, ag_real *G, int64_t n) {
    AG_CUDA_FOR(i, n) G[i] = act_grad_of(act, DY[i], Y[i]);
}

/* out (+)= the partial sums P [groups, blocks, cols] in block order, as
 * the CPU adds them (out + P[0] + P[1] + ...; with scale, out + *scale
 * (P[0] + P[1] + ...)), group g's into out [g, cols]; out's element k by
 * threads k, k + stride, ...  P is read past L1 (__ldcg): other blocks of
 * the same kernel may have written it. */
__device__ static inline void add_partials(const ag_real *P, int groups, int64_t blocks, int cols,
                                           const ag_real *scale, ag_real *out, int64_t k0, int64_t stride) {
    for (int64_t gk = k0; gk < (int64_t)groups * cols; gk += stride) {
        int64_t g = gk / cols, k = gk - g * cols;
        const ag_real *p = P + g * blocks * cols + k;
        if (!scale) {
            ag_real acc = out[gk];
            for (int64_t b = 0; b < blocks; b++) acc += __ldcg(p + b * cols);
            out[gk] = acc;
        } else {
            ag_real s = 0;
            for (int64_t b = 0; b < blocks; b++) s += __ldcg(p + b * cols);
            out[gk] += *scale * s;
        }
    }
}

/* Partials up to this many are added by the last block of the kernel that
 * wrote them (one launch); more, by a kernel of their own spread over the
 * GPU, where one block adding them all could take longer than the launch
 * it saves (a vocabulary-wide bias: 10,000 columns).  The models' layers
 * (300 columns, 15-30 blocks of rows) are under it.  Not yet timed on a
 * GPU. */
enum { LAST_BLOCK_PARTIALS_MAX = 16384 };

/* The end of a column-sum kernel, where tickets is not NULL: the last of
 * its blocks to finish adds the partials into out and sets the ticket
 * counter back to zero for the next kernel.  Each block counts itself
 * once its partials are visible to the others (the fence), so the last one
 * reads them all; the rest return. */
__device__ static void add_partials_in_last_block(const ag_real *P, int groups, int64_t blocks, int cols,
                                                  const ag_real *scale, ag_real *out, unsigned *tickets) {
    if (!tickets) return;
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(tickets, 1u) == gridDim.x - 1;
    __syncthreads();
    if (!last) return;
    add_partials(P, groups, blocks, cols, scale, out, threadIdx.x, blockDim.x);
    if (threadIdx.x == 0) *tickets = 0;
}

/* The kernel of their own, a thread an element of out. */
__global__ void add_partials_kernel(const ag_real *P, int groups, int64_t blocks, int cols, const ag_real *scale,
                                    ag_real *out) {
    add_partials(P, groups, blocks, cols, scale, out, blockIdx.x * (int64_t)blockDim.x + threadIdx.x,
                 (int64_t)gridDim.x * blockDim.x);
}

/* Partial sum i of the column sums of groups planes [rows, cols], laid
 * [groups, blocks, cols] (group g, block b, column k): the offset of its
 * first element, row b AG_KCOL_ROWS of column k in g's plane, and in *n
 * how many rows it sums. */
__device__ static inline int64_t col_block(int64_t i, int64_t rows, int cols, int64_t blocks, int64_t *n) {
    int64_t gb = i / cols, k = i - gb * cols, g = gb / blocks, b = gb - g * blocks, r0 = b * AG_KCOL_ROWS;
    *n = rows - r0 < AG_KCOL_ROWS ? rows - r0 : (int64_t)AG_KCOL_ROWS;
    return (g * rows + r0) * cols + k;
}

/* act_grad_kernel and the column sums in one pass (ag_dense's backward
 * with a bias): each thread writes its column of G over its block of rows
 * (of its group) and sums it, in the same order; out += the sums (its last
 * block, or add_partials_kernel after it). */
__global__ void act_grad_col_sums_kernel(int act, const ag_real *DY, const ag_real *Y, ag_real *G, int groups,
                                         int64_t rows, int cols, int64_t blocks, ag_real *P, unsigned *tickets,
                                         ag_real *out) {
    AG_CUDA_FOR(i, groups * blocks * cols) {
        int64_t n, e = col_block(i, rows, cols, blocks, &n);
        ag_real s = 0;
        for (int64_t r = 0; r < n; r++, e += cols) {
            ag_real g = act_grad_of(act, DY[e], Y[e]);
            G[e] = g;
            s += g;
        }
        P[i] = s;
    }
    add_partials_in_last_block(P, groups, blocks, cols, NULL, out, tickets);
}

/* Thread per (group, block of rows, column): the block's rows in order;
 * then out (+)= the sums (its last block, or add_partials_kernel after
 * it). */
__global__ void col_sums_kernel(const ag_real *X, int groups, int64_t rows, int cols, int64_t blocks,
                                const ag_real *scale, ag_real *P, unsigned *tickets, ag_real *out) {
    AG_CUDA_FOR(i, groups * blocks * cols) {
        int64_t n, e = col_block(i, rows, cols, blocks, &n);
        ag_real s = 0;
        for (int64_t r = 0; r < n; r++, e += cols) s += X[e];
        P[i] = s;
    }
    add_partials_in_last_block(P, groups, blocks, cols, scale, out, tickets);
}

extern "C" void ag__bias_rows_cuda(const ag_real *bias, ag_real *y, int64_t rows, int cols) {
    int64_t n = rows * cols;
    if (n > 0) ag__launch(bias_rows_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, bias, y, rows, cols);
}

extern "C" void ag__bias_act_cuda(const ag_real *bias, int act, ag_real *y, int groups, int64_t rows, int cols) {
    int64_t group_cells = rows * cols, n = groups * group_cells;
    if (n > 0 && (bias || act != AG_KACT_NONE))
        ag__launch(bias_act_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, bias, act, y, n, group_cells, cols);
}

extern "C" void ag__act_backward_cuda(int act, const ag_real *dy, const ag_real *y, ag_real *g, int64_t n) {
    if (n > 0) ag__launch(act_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, act, dy, y, g, n);
}

/* The tickets for a kernel whose last block adds n partials, or NULL:
 * add_partials_kernel adds them after it. */
static unsigned *last_block_tickets(int64_t n) {
    return n <= LAST_BLOCK_PARTIALS_MAX ? ag__cuda_block_tickets() : NULL;
}

static void add_partials_after(unsigned *tickets, const ag_real *partial, int groups, int64_t blocks, int cols,
                               const ag_real *scale, ag_real *out) {
    if (!tickets)
        ag__launch(add_partials_kernel, ag__cuda_blocks((int64_t)groups * cols), AG_CUDA_THREADS, 0, partial, groups,
                   blocks, cols, scale, out);
}

extern "C" void ag__act_backward_col_sums_cuda(int act, const ag_real *dy, const ag_real *y, ag_real *g, int groups,
                                               int64_t rows, int cols, ag_real *partial, ag_real *out) {
    int64_t blocks = ag__col_blocks(rows), n = groups * blocks * cols;
    if (n <= 0) return;
    unsigned *tickets = last_block_tickets(n);
    ag__launch(act_grad_col_sums_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, act, dy, y, g, groups, rows, cols,
               blocks, partial, tickets, out);
    add_partials_after(tickets, partial, groups, blocks, cols, (const ag_real *)NULL, out);
}

extern "C" void ag__col_sums_groups_cuda(const ag_real *x, int groups, int64_t rows, int cols, const ag_real *scale,
                                         ag_real *partial, ag_real *out) {
    int64_t blocks = ag__col_blocks(rows), n = groups * blocks * cols;
    if (n <= 0) return;
    unsigned *tickets = last_block_tickets(n);
    ag__launch(col_sums_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, groups, rows, cols, blocks, scale, partial,
               tickets, out);
    add_partials_after(tickets, partial, groups, blocks, cols, scale, out);
}

extern "C" void ag__col_sums_cuda(const ag_real *x, int64_t rows, int cols, const ag_real *scale, ag_real *partial,
                                  ag_real *out) {
    ag__col_sums_groups_cuda(x, 1, rows, cols, scale, partial, out);
}
