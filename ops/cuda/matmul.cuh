/* matmul.cuh - the linear layer's kernels of ops/cuda/linear.cu, as
 * ops/cuda/matmul.c composes them with cuBLAS into the matmul family's CUDA
 * table (ops/matmul.h).  C and C++ alike; for that file only. */
#ifndef AG_CUDA_MATMUL_CUH
#define AG_CUDA_MATMUL_CUH

#include "../matmul.h"

AG_KERNELS_BEGIN

/* The entries of ops/matmul.h of the same names. */
void ag__bias_rows_cuda(const ag_kreal *bias, ag_kreal *y, int64_t rows, int cols);
void ag__col_sums_cuda(const ag_kreal *x, int64_t rows, int cols, const ag_kreal *scale, ag_kreal *partial,
                       ag_kreal *out);
/* act (an AG_KACT_) in place; backward g = dy act'(.) from the output y. */
void ag__act_forward_cuda(int act, ag_kreal *y, int64_t n);
void ag__act_backward_cuda(int act, const ag_kreal *dy, const ag_kreal *y, ag_kreal *g, int64_t n);

AG_KERNELS_END

#endif
