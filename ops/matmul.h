/* matmul.h - the matmul family's kernels (ops/dispatch.h): batched
 * products and the linear layer.  The CPU's are in ops/matmul.c (OpenBLAS
 * or ops/gemm_kernel.c); CUDA's are in ops/cuda/matmul.c, cuBLAS composed
 * with the linear layer's kernels of ops/cuda/linear.cu.  Every pointer is
 * in the device's memory.  The two devices differ in more than the product
 * (the CPU skips all-zero rows, the GPU does not look for them), so the
 * entries are whole steps. */
#ifndef AG_OPS_MATMUL_H
#define AG_OPS_MATMUL_H

#include "../graph/kreal.h"

AG_KERNELS_BEGIN

/* batch products C_i = op(A_i) op(B_i) + beta C_i, C_i [M, N], each operand
 * row-major and dense ([a_rows, a_cols], [b_rows, b_cols]); a shared
 * operand is one matrix for every product, and a shared C sums all
 * products into one, in batch order (beta applies to the first). */
typedef struct {
    const ag__kreal *A, *B;
    ag__kreal *C;
    int a_rows, a_cols, b_rows, b_cols;
    int M, N, K, batch;
    ag__kreal beta;
    bool ta, tb, a_shared, b_shared, c_shared;
} ag__kmm;

/* ag_act's values (ops/matmul.c checks that they agree). */
enum { AG_KACT_NONE, AG_KACT_RELU, AG_KACT_ELU, AG_KACT_TANH, AG_KACT_SIGMOID };

/* The rows of x [rows, in] that the CPU's forward found nonzero and packed:
 * idx[i] is the row of packed row i, pos[r] the packed row of row r or -1;
 * kept -1: not packed (always on the GPU). */
typedef struct {
    int32_t *idx, *pos;
    int kept;
} ag__krow_pack;

/* One group's packed x (ag__klinear's pack and xc), kept for backward. */
typedef struct {
    ag__krow_pack pack;
    const ag__kreal *xc;
} ag__kgroup_pack;

/* The linear layer y = act(x op(W) + bias): x [rows, in], W [in, out]
 * ([out, in] when tw), bias [out] or NULL, act an AG_KACT_.  Forward writes
 * y (and may keep x's packed rows in pack and xc); backward reads dy and y
 * and adds to dw and db, stores (fresh_x) or adds dx; a gradient not wanted
 * is NULL.
 * groups > 1: that many independent layers, each of the shapes above, laid
 * one after another in every array: group g's x is at x + g rows in, its W
 * at w + g in out, its bias at bias + g out, its y (and dy) at y + g rows
 * out, the gradients likewise (rows is one group's).  fresh_x is dx's as a
 * whole.  The CPU's forward keeps each group's packed x in group_packs
 * ([groups], in the arena; pack and xc unused).  0 or 1: one layer. */
typedef struct {
    const ag__kreal *x, *w, *bias;
    ag__kreal *y;
    const ag__kreal *dy;
    ag__kreal *dx, *dw, *db;
    int rows, in, out, act, groups;
    bool tw, fresh_x;
    ag__krow_pack pack;
    const ag__kreal *xc; /* the packed rows of x, [pack.kept, in] */
    const ag__kgroup_pack *group_packs;
} ag__klinear;

static inline int ag__klinear_groups(const ag__klinear *j) { return j->groups > 1 ? j->groups : 1; }

/* Column sums in blocks of AG_KCOL_ROWS rows (the bias gradient's order). */
enum { AG_KCOL_ROWS = 64 };
static inline int64_t ag__col_blocks(int64_t rows) { return (rows + AG_KCOL_ROWS - 1) / AG_KCOL_ROWS; }

typedef struct {
    void (*batched)(const ag__kmm *p);
    /* A [rows, K] with B shared (ag_matmul's x op(B) as one tall product):
     * dA += dY op(B)^T and dB += A^T dY (dY^T A when tb); either may be
     * NULL (not wanted). */
    void (*tall_backward)(bool tb, int rows, int K, int N, const ag__kreal *dy, const ag__kreal *A, const ag__kreal *B,
                          ag__kreal *dA, ag__kreal *dB);
    void (*linear_forward)(ag__klinear *j);
    void (*linear_backward)(const ag__klinear *j);
    /* y [rows, cols] = bias in every row (0 when bias is NULL). */
    void (*bias_rows)(const ag__kreal *bias, ag__kreal *y, int64_t rows, int cols);
    /* Column sums of x [rows, cols] without atomics: each block of
     * AG_KCOL_ROWS rows sums its rows in order into partial [blocks, cols]
     * (the caller's, blocks = ag__col_blocks(rows)), then each column adds
     * the partials in block order - the linear layer's bias gradient, to
     * the bit.  scale NULL: out[k] = out[k] + p_0 + p_1 + ...; else (in the
     * device's memory) out[k] += scale (p_0 + p_1 + ...). */
    void (*col_sums)(const ag__kreal *x, int64_t rows, int cols, const ag__kreal *scale, ag__kreal *partial,
                     ag__kreal *out);
} ag__matmul_kernels;

extern const ag__matmul_kernels ag__matmul_cuda;

AG_KERNELS_END

#ifndef __cplusplus
#include "attngrad.h"
/* The table of dev's kernels (fatal, naming op, where this build has none). */
const ag__matmul_kernels *ag__matmul_on(const char *op, ag_device dev);
#endif

#endif
