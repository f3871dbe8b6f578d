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
#include "../elementwise.h"
#include "../reduce.h"
#include "../shape.h"
#include "../layernorm.h"
#include "../dropout.h"
#include "../matmul.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The elementwise family: ops/elementwise.h. */

/* The reduce family: ops/reduce.h; the shape family: ops/shape.h. */

/* The softmax family: ops/softmax.h. */

/* The optimizers' kernels: optim/kernels.h. */

/* The loss family: ops/loss.h (its launchers: ops/cuda/loss.cuh). */

/* The dropout family: ops/dropout.h. */

/* The layer norm family: ops/layernorm.h. */

/* The matmul family (the linear layer's bias, activation and column sums):
 * ops/matmul.h. */

/* The Gaussian positional attention: ops/gaussian.h (its launchers:
 * ops/cuda/gaussian.cuh). */

/* MTSA's token2token attention: ops/mtsa.h (its launchers: ops/cuda/mtsa.cuh). */

/* The LSTM: ops/lstm.h (its launchers: ops/cuda/lstm.cuh). */

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
