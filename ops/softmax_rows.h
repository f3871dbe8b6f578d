/* softmax_rows.h - the row kernels of the softmax family and the mask
 * broadcast, shared by softmax.c (masked softmax) and attention.c (fused
 * attention), so both normalise rows with exactly the same code.
 *
 * Rows are short (N <= a few hundred) and hot: a kernel works on one
 * contiguous row, keeps its running max and sum in registers, and is written
 * so that GCC vectorises it under the project's plain -O3 (no -ffast-math):
 *  - sums run in AG_LANES independent lanes (a single `sum += e` is a serial
 *    chain no compiler may reorder), in a fixed order, so results do not
 *    depend on the vector width;
 *  - the row max is taken on order-preserving integer keys of the floats,
 *    because a float max reduction only vectorises with -ffinite-math-only;
 *  - e^x is vecmath.h's branch-free polynomial, ag__vexp_nonpos (x <= 0 after
 *    the max is subtracted, so it needs no overflow clamp).
 * The loops over rows that call these kernels are compiled twice, for
 * baseline x86-64 (SSE2) and for x86-64-v3 (AVX2), and the CPU picks one at
 * load time (AG_SIMD_CLONES); -std=c11 implies -ffp-contract=off, so both
 * clones compute bit-identical results. */
#ifndef AG_SOFTMAX_ROWS_H
#define AG_SOFTMAX_ROWS_H

#include "vecmath.h"
#include "softmax.h"

#define AG_LANES 8

/* Floats as integers that order like the floats: the sign-magnitude bits
 * with the magnitude flipped for negatives.  -inf, -0/+0, +inf and NaNs
 * (beyond +-inf) all land in place. */
#ifdef AG_REAL_DOUBLE
typedef int64_t ag__key;
#define AG__KEY_MIN INT64_MIN
static inline ag__key ag__key_of(double f) {
    int64_t b;
    memcpy(&b, &f, sizeof b);
    return b ^ ((b >> 63) & INT64_MAX);
}
static inline double ag__key_value(ag__key k) {
    int64_t b = k ^ ((k >> 63) & INT64_MAX);
    double f;
    memcpy(&f, &b, sizeof f);
    return f;
}
#else
typedef int32_t ag__key;
#define AG__KEY_MIN INT32_MIN
static inline ag__key ag__key_of(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    return b ^ ((b >> 31) & INT32_MAX);
}
static inline float ag__key_value(ag__key k) {
    int32_t b = k ^ ((k >> 31) & INT32_MAX);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}
#endif

/* max_j x[j] (-inf for n = 0), on keys. */
static inline ag_real ag__max_row(const ag_real *x, int n) {
    ag__key kmax = ag__key_of(-INFINITY);
    for (int j = 0; j < n; j++) {
        ag__key k = ag__key_of(x[j]);
        kmax = k > kmax ? k : kmax;
    }
    return ag__key_value(kmax);
}

/* sum_j x[j], in AG_LANES lanes. */
static inline ag_real ag__sum_row(const ag_real *x, int n) {
    ag_real acc[AG_LANES] = {0};
    int j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) acc[l] += x[j + l];
    for (; j < n; j++) acc[j % AG_LANES] += x[j];
    ag_real s = 0;
    for (int l = 0; l < AG_LANES; l++) s += acc[l];
    return s;
}

/* sum_j e^(x[j]), x[j] <= 0, in AG_LANES lanes. */
static inline ag_real ag__sum_exp_row(const ag_real *x, int n) {
    ag_real acc[AG_LANES] = {0};
    int j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) acc[l] += ag__vexp_nonpos(x[j + l]);
    for (; j < n; j++) acc[j % AG_LANES] += ag__vexp_nonpos(x[j]);
    ag_real s = 0;
    for (int l = 0; l < AG_LANES; l++) s += acc[l];
    return s;
}

/* y = softmax(scale * x + m) over one row of n; m may be NULL.  A row with no
 * entry above -inf (fully masked) becomes zeros.  y may alias x. */
static inline void ag__softmax_row(const ag_real *x, const ag_real *m, ag_real scale, ag_real *y, int n) {
    ag__key kmax = AG__KEY_MIN;
    if (m)
        for (int j = 0; j < n; j++) {
            ag_real z = scale * x[j] + m[j];
            ag__key k = ag__key_of(z);
            y[j] = z;
            kmax = k > kmax ? k : kmax;
        }
    else
        for (int j = 0; j < n; j++) {
            ag_real z = scale * x[j];
            ag__key k = ag__key_of(z);
            y[j] = z;
            kmax = k > kmax ? k : kmax;
        }
    ag_real max = ag__key_value(kmax);
    if (n == 0 || max == -INFINITY) { /* fully masked: no key to attend to */
        memset(y, 0, (size_t)n * sizeof *y);
        return;
    }
    ag_real acc[AG_LANES] = {0};
    int j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) {
            ag_real e = ag__vexp_nonpos(y[j + l] - max);
            y[j + l] = e;
            acc[l] += e;
        }
    for (; j < n; j++) {
        y[j] = ag__vexp_nonpos(y[j] - max);
        acc[j % AG_LANES] += y[j];
    }
    ag_real sum = 0;
    for (int l = 0; l < AG_LANES; l++) sum += acc[l];
    ag_real inv = 1 / sum; /* sum >= 1: the max entry contributes e^0 */
    for (j = 0; j < n; j++) y[j] *= inv;
}

/* sum_j a[j] b[j], in AG_LANES lanes. */
static inline ag_real ag__dot_row(const ag_real *a, const ag_real *b, int n) {
    ag_real acc[AG_LANES] = {0};
    int j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) acc[l] += a[j + l] * b[j + l];
    for (; j < n; j++) acc[j % AG_LANES] += a[j] * b[j];
    ag_real s = 0;
    for (int l = 0; l < AG_LANES; l++) s += acc[l];
    return s;
}

/* Softmax backward over one row: d(logits) = scale * y * (g - <g, y>).
 * accumulate: gx += that; otherwise gx = that (gx may alias g). */
static inline void ag__softmax_row_grad(const ag_real *y, const ag_real *g, ag_real scale, ag_real *gx, int n,
                                        bool accumulate) {
    ag_real dot = ag__dot_row(g, y, n);
    if (accumulate)
        for (int j = 0; j < n; j++) gx[j] += scale * y[j] * (g[j] - dot);
    else
        for (int j = 0; j < n; j++) gx[j] = scale * y[j] * (g[j] - dot);
}

/* How a mask broadcasts over the rows of a score tensor: ops/softmax.h's
 * plan, the same on every device.  Scores and mask are right-aligned into 4
 * dims; the mask's last dim must equal the scores' last dim and each other
 * dim must equal the scores' or be 1 (stride 0). */
typedef ag__kmask ag__mask_plan;

/* Checks mask against scores of shape [ndim] (fatal naming op and both
 * shapes) and returns the plan; mask may be NULL (strides 0). */
ag__mask_plan ag__mask_plan_make(const char *op, int ndim, const int *scores_shape, const ag_tensor *mask);
/* The same, for scores on scores_device: a mask elsewhere is fatal, naming
 * both devices. */
ag__mask_plan ag__mask_plan_on(const char *op, int ndim, const int *scores_shape, ag_device scores_device,
                               const ag_tensor *mask);

/* ---- row loops (softmax.c), vector-cloned ---- */

/* Softmax of the rows3[2] rows of cols of the scores slice (i0, i1): x and
 * y point at the slice, their rows ld apart (cols: packed), the mask rows
 * come from the plan (mask may be NULL). */
void ag__softmax_slice(const ag__mask_plan *p, const ag_real *mask, int i0, int i1, const ag_real *x, int64_t ld,
                       ag_real scale, ag_real *y);
/* ag__softmax_row_grad over `rows` rows of n: y's rows ldy apart (n:
 * packed), g's and gx's packed. */
void ag__softmax_rows_grad(const ag_real *y, int64_t ldy, const ag_real *g, ag_real scale, ag_real *gx, int64_t rows,
                           int n, bool accumulate);

#endif
