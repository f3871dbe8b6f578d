/* matmul.cuh - the linear layer's kernels of ops/cuda/linear.cu, as
 * ops/cuda/matmul.c composes them with cuBLAS into the matmul family's CUDA
 * table (ops/matmul.h).  C and C++ alike; for that file only. */
#ifndef AG_CUDA_MATMUL_CUH
#define AG_CUDA_MATMUL_CUH

#include "../matmul.h"

AG_KERNELS_BEGIN

/* The entries of ops/matmul.h of the same names. */
void ag__bias_rows_cuda(const ag__kreal *bias, ag__kreal *y, int64_t rows, int cols);
void ag__col_sums_cuda(const ag__kreal *x, int64_t rows, int cols, const ag__kreal *scale, ag__kreal *partial,
                       ag__kreal *out);
/* The same over groups planes x [rows, cols] one after another (a grouped
 * layer's, ops/matmul.h), in one launch: out [groups, cols], partial
 * [groups, blocks, cols], each group summed as a plane of its own. */
void ag__col_sums_groups_cuda(const ag__kreal *x, int groups, int64_t rows, int cols, const ag__kreal *scale,
                              ag__kreal *partial, ag__kreal *out);
/* y [groups, rows, cols] = act(y + bias) in place, bias [groups, cols], act
 * an AG_KACT_ (bias NULL: act only; neither: no launch); backward g = dy
 * act'(.) from the output y, and that with the column sums of each group's
 * g added to out [groups, cols] (ag__col_sums_groups_cuda's, in the same
 * order) in one pass.  groups 1: one layer. */
void ag__bias_act_cuda(const ag__kreal *bias, int act, ag__kreal *y, int groups, int64_t rows, int cols);
void ag__act_backward_cuda(int act, const ag__kreal *dy, const ag__kreal *y, ag__kreal *g, int64_t n);
void ag__act_backward_col_sums_cuda(int act, const ag__kreal *dy, const ag__kreal *y, ag__kreal *g, int groups,
                                    int64_t rows, int cols, ag__kreal *partial, ag__kreal *out);

AG_KERNELS_END

#endif
