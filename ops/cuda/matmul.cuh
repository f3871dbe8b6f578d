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
/* act (an AG_KACT_) in place; backward g = dy act'(.) from the output y. */
void ag__act_forward_cuda(int act, ag__kreal *y, int64_t n);
void ag__act_backward_cuda(int act, const ag__kreal *dy, const ag__kreal *y, ag__kreal *g, int64_t n);

AG_KERNELS_END

#endif
