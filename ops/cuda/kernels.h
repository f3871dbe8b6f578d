/* kernels.h - the CUDA kernels' launchers, as C sees them.
 *
 * Each op family's kernels live in ops/cuda/<family>.cu, beside the CPU code
 * in ops/<family>.c, and the launchers keep the CPU function's name with a
 * _cuda suffix: softmax_rows_forward in ops/softmax.c has
 * ag__softmax_rows_forward_cuda in ops/cuda/softmax.cu.  Launchers take raw
 * device pointers and sizes (no ag_tensor: the .cu files are C++ and see
 * none of the engine), run on the engine's one stream and return at once:
 * no hidden synchronisation. */
#ifndef AG_CUDA_KERNELS_H
#define AG_CUDA_KERNELS_H

#include "../kreal.h"
#include "../softmax.h"
#include "../../optim/kernels.h"
#include "../loss.h"
#include "../gaussian.h"
#include "../mtsa.h"
#include "../lstm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The unary table of ops/unary_table.h, by its index (AG_UNARY_<NAME>). */
void ag__unary_forward_cuda(int op, const ag_kreal *x, ag_kreal *y, int64_t n);
/* gx = (fresh ? 0 : gx) + g * f'(x, y) */
void ag__unary_backward_cuda(int op, const ag_kreal *x, const ag_kreal *y, const ag_kreal *g, ag_kreal *gx,
                             int64_t n, bool fresh);

/* Binary ops with broadcasting (ops/elementwise.c's plan): the output's
 * shape right-aligned in 4 dims, and each operand's strides (0 where it is
 * repeated).  op: AG_BINARY_add, _sub, _mul, _div, _maximum. */
typedef struct {
    int shape[4];
    int64_t sa[4], sb[4];
} ag_kbcast;
enum { AG_BINARY_add, AG_BINARY_sub, AG_BINARY_mul, AG_BINARY_div, AG_BINARY_maximum };
void ag__binary_forward_cuda(int op, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b, ag_kreal *y);
/* The gradient of one operand (side 0: a, 1: b), whose strides are in bc:
 * each of its elements sums, in increasing output order, the terms of every
 * output position that reads it (no atomics: the same bits every run).
 * gx has the operand's size; fresh: store instead of add. */
void ag__binary_backward_cuda(int op, int side, const ag_kbcast *bc, const ag_kreal *a, const ag_kreal *b,
                              const ag_kreal *g, ag_kreal *gx, int64_t gx_size, bool fresh);
/* y = scale x + shift; backward gx (+)= scale g */
void ag__affine_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal scale, ag_kreal shift, int64_t n);
void ag__affine_backward_cuda(const ag_kreal *g, ag_kreal *gx, ag_kreal scale, int64_t n, bool fresh);
void ag__fill_cuda(ag_kreal *y, ag_kreal value, int64_t n);
/* y += x */
void ag__add_into_cuda(ag_kreal *y, const ag_kreal *x, int64_t n);

/* *out = scale * sum of x[0..n), in a fixed order (deterministic for a
 * given n; scale 1/n gives the mean). */
void ag__sum_forward_cuda(const ag_kreal *x, ag_kreal scale, ag_kreal *out, int64_t n);
/* gx (+)= scale g[0] for every element (g is on the device). */
void ag__sum_backward_cuda(const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n, bool fresh);

/* The softmax family: ops/softmax.h. */

/* The optimizers' kernels: optim/kernels.h. */

/* ---- tensor ops (ops/shape.c, ops/reduce.c, ops/elementwise.c's clamp,
 * ops/attention.c's head split/merge) ---- */

/* A strided copy over 4 dims, the one building block of permutes, slices,
 * concat parts and head split/merge: the element at coordinates c of shape
 * goes from src[sum c[d] src_stride[d]] to dst[sum c[d] dst_stride[d]],
 * stored, or added when add.  Distinct elements must have distinct
 * destinations (every caller's map is one to one), so threads never race. */
typedef struct {
    int64_t shape[4];
    int64_t src_stride[4], dst_stride[4];
} ag_kstrided;
void ag__strided_copy_cuda(const ag_kstrided *p, const ag_kreal *src, ag_kreal *dst, bool add);

/* index_select and embedding: x as [outer, in_rows, inner], out as
 * [outer, n, inner], out[o, i, :] = x[o, index[i], :] (index on the device). */
void ag__gather_cuda(const ag_kreal *x, const int32_t *index, ag_kreal *out, int64_t outer, int in_rows, int n,
                     int64_t inner);
/* Its gradient without atomics: gx[o, r, :] (+)= the sum, in increasing
 * position, of g[o, i, :] over the positions i with index[i] == r, which
 * are pos[first[r] .. first[r + 1]) (a counting sort of the index, made on
 * the host).  Every element of gx is written; fresh: store instead of add. */
void ag__gather_backward_cuda(const ag_kreal *g, const int32_t *first, const int32_t *pos, ag_kreal *gx,
                              int64_t outer, int in_rows, int n, int64_t inner, bool fresh);

/* Along an axis, x as [outer, n, inner] and the result as [outer, inner]:
 * y = scale * sum over the axis, in increasing position (the CPU's order);
 * backward gx (+)= scale g. */
void ag__sum_axis_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal scale, int64_t outer, int64_t n,
                               int64_t inner);
void ag__sum_axis_backward_cuda(const ag_kreal *g, ag_kreal *gx, ag_kreal scale, int64_t outer, int64_t n,
                                int64_t inner, bool fresh);
/* y = the max over the axis and arg its first position (ties go to the
 * first, as on the CPU); backward gx (+)= g at arg, 0 elsewhere. */
void ag__max_axis_forward_cuda(const ag_kreal *x, ag_kreal *y, int32_t *arg, int64_t outer, int64_t n,
                               int64_t inner);
void ag__max_axis_backward_cuda(const ag_kreal *g, const int32_t *arg, ag_kreal *gx, int64_t outer, int64_t n,
                                int64_t inner, bool fresh);

/* y = min(max(x, lo), hi) as the CPU writes it; backward gx (+)= g strictly
 * inside (lo, hi), 0 elsewhere. */
void ag__clamp_forward_cuda(const ag_kreal *x, ag_kreal *y, ag_kreal lo, ag_kreal hi, int64_t n);
void ag__clamp_backward_cuda(const ag_kreal *x, const ag_kreal *g, ag_kreal *gx, ag_kreal lo, ag_kreal hi,
                             int64_t n, bool fresh);

/* The loss family: ops/loss.h (its launchers: ops/cuda/loss.cuh). */

/* ---- dropout (ops/dropout.c; ops/cuda/dropout.cu): the mask of
 * ops/dropout_mask.h drawn on the device from the host's draw at `seed` (device memory; rows
 * of row_len, the first being global row row_base; kept when the 32 bits
 * are below `below`); y = kept ? scale x : 0, backward gx (+)= kept ? scale g : 0 ---- */
void ag__dropout_mask_cuda(uint8_t *kept, int64_t rows, int64_t row_len, int64_t row_base, const uint64_t *seed,
                           int64_t below);
void ag__dropout_apply_cuda(const uint8_t *kept, const ag_kreal *x, ag_kreal scale, ag_kreal *y, int64_t n);
void ag__dropout_backward_cuda(const uint8_t *kept, const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t n,
                               bool fresh);

/* ---- layer norm over the last axis (ops/layernorm.c; ops/cuda/layernorm.cu):
 * a warp per row; gamma, beta may be NULL ---- */
void ag__layernorm_rows_cuda(const ag_kreal *x, const ag_kreal *gamma, const ag_kreal *beta, ag_kreal eps,
                             ag_kreal *y, ag_kreal *mean, ag_kreal *rstd, int64_t rows, int D);
void ag__layernorm_grad_rows_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *gamma, const ag_kreal *mean,
                                  const ag_kreal *rstd, ag_kreal *gx, int64_t rows, int D, bool fresh);
/* ggamma, gbeta (either NULL) += their column sums over the rows, a
 * thread per column adding the rows in order (the CPU's order). */
void ag__layernorm_grad_affine_cuda(const ag_kreal *x, const ag_kreal *g, const ag_kreal *mean, const ag_kreal *rstd,
                                    ag_kreal *ggamma, ag_kreal *gbeta, int64_t rows, int D);

/* ---- the linear layer's bias and activation (ops/matmul.c; ops/cuda/linear.cu) ---- */
/* y [rows, cols] = bias in every row (0 when bias is NULL). */
void ag__bias_rows_cuda(const ag_kreal *bias, ag_kreal *y, int64_t rows, int cols);
/* ag_act's values (matmul.c checks that they agree). */
enum { AG_KACT_NONE, AG_KACT_RELU, AG_KACT_ELU, AG_KACT_TANH, AG_KACT_SIGMOID };
/* act (an AG_KACT_) in place; backward g = dy act'(.) from the output y. */
void ag__act_forward_cuda(int act, ag_kreal *y, int64_t n);
void ag__act_backward_cuda(int act, const ag_kreal *dy, const ag_kreal *y, ag_kreal *g, int64_t n);
/* Column sums of x [rows, cols] in two passes, no atomics: each block of
 * AG_KCOL_ROWS rows sums its rows in order into partial [blocks, cols]
 * (the caller's, blocks = ceil(rows / AG_KCOL_ROWS)), then a thread per
 * column adds the partials in block order - matmul.c's bias gradient, to
 * the bit.  scale NULL: out[k] = out[k] + p_0 + p_1 + ...; else (on the
 * device) out[k] += scale (p_0 + p_1 + ...). */
enum { AG_KCOL_ROWS = 64 };
static inline int64_t ag__col_blocks(int64_t rows) { return (rows + AG_KCOL_ROWS - 1) / AG_KCOL_ROWS; }
void ag__col_sums_cuda(const ag_kreal *x, int64_t rows, int cols, const ag_kreal *scale, ag_kreal *partial,
                       ag_kreal *out);

/* The Gaussian positional attention: ops/gaussian.h (its launchers:
 * ops/cuda/gaussian.cuh). */

/* MTSA's token2token attention: ops/mtsa.h (its launchers: ops/cuda/mtsa.cuh). */

/* The LSTM: ops/lstm.h (its launchers: ops/cuda/lstm.cuh). */

/* The last launch error, "" if none (cudaGetLastError's string). */
const char *ag__cuda_launch_error(void);

/* ---- models/cuda/dist.cu: the flat gradient buffer of data-parallel
 * training (models/dist.c), in device memory ---- */
typedef struct {
    ag_kreal *grad;
    int64_t offset, size; /* where the gradient sits in the flat buffer */
} ag_kgrad_slot;
/* slots[0..count) (on the device, count >= 1), largest the longest size:
 * flat[offset + k] = w grad[k] (0 when zero: a rank without rows), and
 * flat[n..n+3) = tail. */
void ag__grads_pack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, ag_kreal w, bool zero,
                         ag_kreal *flat, int64_t n, const ag_kreal tail[3]);
/* After the sum: grad[k] = flat[offset + k] inv, inv = 1 / flat[n + 1] (the
 * summed count) rounded as the host path rounds it, 0 when that is 0. */
void ag__grads_unpack_cuda(const ag_kgrad_slot *slots, int count, int64_t largest, const ag_kreal *flat, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
