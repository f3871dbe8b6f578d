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

#include <stdbool.h>
#include <stdint.h>

#ifdef AG_REAL_DOUBLE
typedef double ag_kreal;
#else
typedef float ag_kreal;
#endif

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

/* How a mask broadcasts over the rows of the scores (ops/softmax_rows.h's
 * ag__mask_plan): the scores' three leading dims right-aligned in 4, the
 * mask's strides along them (0 where it repeats), and the row length.  Row
 * r = (i0 rows3[1] + i1) rows3[2] + i2 reads the mask row at
 * i0 stride3[0] + i1 stride3[1] + i2 stride3[2]. */
typedef struct {
    int rows3[3];
    int64_t stride3[3];
    int cols;
} ag_kmask;

/* y = softmax(scale x + mask) over the last axis of [rows, cols] (mask
 * NULL: none; y may alias x).  A row with no entry above -inf (fully
 * masked) becomes zeros, as on the CPU.  Backward:
 * gx (+)= scale y (g - sum(g y)); gx may alias g when fresh. */
void ag__softmax_rows_forward_cuda(const ag_kreal *x, const ag_kreal *mask, const ag_kmask *plan, ag_kreal scale,
                                   ag_kreal *y, int64_t rows);
void ag__softmax_rows_backward_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal scale, ag_kreal *gx, int64_t rows,
                                    int cols, bool fresh);

/* Log-softmax over the last axis of [rows, cols]: y = x - max - log sum
 * e^(x - max); backward gx (+)= g - e^y sum(g). */
void ag__log_softmax_rows_cuda(const ag_kreal *x, ag_kreal *y, int64_t rows, int cols);
void ag__log_softmax_rows_grad_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, int64_t rows, int cols,
                                    bool fresh);

/* Softmax along an axis over the valid positions: x seen as
 * [outer, n, inner], each (outer o, inner k) column a softmax over
 * t < len[o / per_example] (len NULL: n), zeros at t >= len.  len is in
 * device memory.  Backward: gx[t] (+)= y[t] (g[t] - sum_t' g y) over
 * t < len; a fresh gx gets 0 at padded positions. */
void ag__softmax_len_cuda(const ag_kreal *x, ag_kreal *y, const int32_t *len, int64_t outer, int64_t n,
                          int64_t inner, int64_t per_example);
void ag__softmax_len_grad_cuda(const ag_kreal *y, const ag_kreal *g, ag_kreal *gx, const int32_t *len, int64_t outer,
                               int64_t n, int64_t inner, int64_t per_example, bool fresh);

/* The softmax-gated mixture of ops/softmax.c (ag_softmax_mix*): rows of d
 * features, n sources, nz logits per feature (n, or n - 1 with the last
 * source's fixed at 0); len (device memory, or NULL) makes row r, position
 * r % N of example r / N, padding when past its length: output 0, no
 * gradient.  Forward writes y and the gate [rows, n, d]; backward reads
 * gate, out and dout and writes dz and dsrc[g] (NULL: not wanted; fresh:
 * store).  A source given twice has fresh false on its repeats. */
enum { AG_KMIX_MAX_SOURCES = 8 };
typedef struct {
    const ag_kreal *z, *src[AG_KMIX_MAX_SOURCES], *out, *dout;
    ag_kreal *gate, *y, *dz, *dsrc[AG_KMIX_MAX_SOURCES];
    int n, d, nz, N;
    const int32_t *len;
    bool fresh_z, fresh_src[AG_KMIX_MAX_SOURCES];
} ag_kmix;
void ag__softmax_mix_forward_cuda(const ag_kmix *j, int64_t rows);
void ag__softmax_mix_backward_cuda(const ag_kmix *j, int64_t rows);

/* The last launch error, "" if none (cudaGetLastError's string). */
const char *ag__cuda_launch_error(void);

#ifdef __cplusplus
}
#endif
#endif
