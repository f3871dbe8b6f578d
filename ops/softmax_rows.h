/* softmax_rows.h - the row kernels of the softmax family and the mask
 * broadcast, shared by softmax.c (masked softmax) and attention.c (fused
 * attention), so both normalise rows with exactly the same code.
 *
 * Rows are short (N <= a few hundred) and hot: every kernel works on one
 * contiguous row, keeps its running max/sum in registers, and splits its
 * reductions into 8 independent lanes so the compiler can vectorise them
 * without -ffast-math (a plain `sum += e` is a serial dependency chain that
 * no compiler may reorder). */
#ifndef AG_SOFTMAX_ROWS_H
#define AG_SOFTMAX_ROWS_H

#include "../graph/internal.h"

#define AG_LANES 8

/* e^x for the arguments a softmax needs (x <= 0, -inf allowed, result in [0,1]).
 * f64 builds (gradient checks) use libm.  f32 builds use a Cephes-style
 * polynomial that vectorises: exp(x) = 2^n e^r with n = round(x / ln 2),
 * |r| <= ln2/2, r by a two-part Cody-Waite reduction; max relative error
 * ~1.5 ulp.  libm's expf is a call per element and was the whole cost of a
 * softmax row. */
#ifdef AG_REAL_DOUBLE
static inline ag_real ag__exp_nonpos(ag_real x) { return exp(x); }
#else
static inline float ag__exp_nonpos(float x) {
    const float lo = -87.33654f; /* below: e^x underflows f32 normals, return 0 */
    float xc = x < lo ? lo : x;
    /* Round xc / ln2 to an integer with the 1.5 * 2^23 trick: the integer
     * lands in the low mantissa bits of t, no float->int conversion needed. */
    const float shifter = 12582912.0f;
    float t = xc * 1.44269504088896341f + shifter;
    float n = t - shifter;
    int32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    int32_t ni = tbits - 0x4B400000; /* bits of `shifter` */
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;
    uint32_t sbits = (uint32_t)(ni + 127) << 23; /* 2^n, n in [-126, 0] here */
    float s;
    memcpy(&s, &sbits, sizeof s);
    return x < lo ? 0.0f : p * s;
}
#endif

/* y = softmax(scale * x + m) over one row of n; m may be NULL.  A row with no
 * finite entry (fully masked) becomes zeros.  y may alias x. */
static inline void ag__softmax_row(const ag_real *x, const ag_real *m, ag_real scale, ag_real *y, int n) {
    ag_real mx[AG_LANES];
    for (int l = 0; l < AG_LANES; l++) mx[l] = -INFINITY;
    int j = 0;
    if (m) {
        for (; j + AG_LANES <= n; j += AG_LANES)
            for (int l = 0; l < AG_LANES; l++) {
                ag_real z = scale * x[j + l] + m[j + l];
                y[j + l] = z;
                mx[l] = z > mx[l] ? z : mx[l];
            }
        for (; j < n; j++) {
            y[j] = scale * x[j] + m[j];
            mx[0] = y[j] > mx[0] ? y[j] : mx[0];
        }
    } else {
        for (; j + AG_LANES <= n; j += AG_LANES)
            for (int l = 0; l < AG_LANES; l++) {
                ag_real z = scale * x[j + l];
                y[j + l] = z;
                mx[l] = z > mx[l] ? z : mx[l];
            }
        for (; j < n; j++) {
            y[j] = scale * x[j];
            mx[0] = y[j] > mx[0] ? y[j] : mx[0];
        }
    }
    ag_real max = mx[0];
    for (int l = 1; l < AG_LANES; l++) max = mx[l] > max ? mx[l] : max;
    if (max == -INFINITY) { /* fully masked: no key to attend to */
        memset(y, 0, (size_t)n * sizeof *y);
        return;
    }
    ag_real acc[AG_LANES] = {0};
    j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) {
            ag_real e = ag__exp_nonpos(y[j + l] - max);
            y[j + l] = e;
            acc[l] += e;
        }
    for (; j < n; j++) {
        y[j] = ag__exp_nonpos(y[j] - max);
        acc[0] += y[j];
    }
    ag_real sum = 0;
    for (int l = 0; l < AG_LANES; l++) sum += acc[l];
    ag_real inv = 1 / sum; /* sum >= 1: the max entry contributes e^0 */
    for (j = 0; j < n; j++) y[j] *= inv;
}

/* sum_j a[j] b[j], in 8 lanes. */
static inline ag_real ag__dot_row(const ag_real *a, const ag_real *b, int n) {
    ag_real acc[AG_LANES] = {0};
    int j = 0;
    for (; j + AG_LANES <= n; j += AG_LANES)
        for (int l = 0; l < AG_LANES; l++) acc[l] += a[j + l] * b[j + l];
    for (; j < n; j++) acc[0] += a[j] * b[j];
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

/* How a mask broadcasts over the rows of a score tensor.  Scores and mask are
 * right-aligned into 4 dims; the mask's last dim must equal the scores' last
 * dim and each other dim must equal the scores' or be 1 (stride 0). */
typedef struct {
    int rows3[3];        /* the scores' three leading dims (4-D padded) */
    int64_t stride3[3];  /* the mask's strides along them, 0 where broadcast */
    int cols;            /* length of a row */
} ag__mask_plan;

/* Checks mask against scores of shape [ndim] (fatal naming op and both
 * shapes) and returns the plan; mask may be NULL (strides 0). */
ag__mask_plan ag__mask_plan_make(const char *op, int ndim, const int *scores_shape, const ag_tensor *mask);

/* The mask row for the scores' leading index (i0, i1, i2). */
static inline const ag_real *ag__mask_row(const ag__mask_plan *p, const ag_tensor *mask, int i0, int i1, int i2) {
    if (!mask) return NULL;
    return mask->data + i0 * p->stride3[0] + i1 * p->stride3[1] + i2 * p->stride3[2];
}

#endif
