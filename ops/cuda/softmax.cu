/* softmax.cu - the CUDA side of ops/softmax.c: masked and scaled softmax and
 * log-softmax over the last axis, softmax along an axis over the valid
 * positions, the softmax-gated mixture, and masked softmax along any axis.
 *
 * Last-axis rows: a warp per row; the row's max, sum of exponentials and
 * (backward) the dot product g.y are warp reductions in a fixed order.
 * Along an axis (over lengths or under a mask) and the mixture: a thread
 * per output column or feature,
 * its loop over the axis or the sources in the CPU's order.  e^x is
 * vecmath.h's ag__vexp_nonpos, the CPU's function, on arguments <= 0. */
#include "../../graph/prelude.cuh"
#include "../softmax.h"
#include "../vecmath.h"

#ifdef AG_CUDA_EMULATOR
/* The emulator checks a launch's pointer arguments; ag__kmix carries its
 * pointers inside (the mixture's len among them: device memory or NULL). */
template <> inline void ag__emu_check_argument<ag__kmix>(const void *kernel, int index, const ag__kmix &j) {
    const void *p[] = {j.z, j.out, j.dout, j.gate, j.y, j.dz, j.len};
    for (const void *q : p) ag__emu_check_pointer_argument(kernel, index, q);
    for (int s = 0; s < j.n && s < AG_KMIX_MAX_SOURCES; s++) {
        ag__emu_check_pointer_argument(kernel, index, j.src[s]);
        ag__emu_check_pointer_argument(kernel, index, j.dsrc[s]);
    }
}
#endif

/* Last-axis rows: a warp per row (prelude.cuh's AG_CUDA_WARP_ROW), so a
 * lane returns only when its whole warp does and every shuffle sees all 32. */

/* The mask row of score row r (the plan's 3 leading dims, strides 0 where
 * the mask repeats). */
__device__ static inline const ag_real *mask_row(const ag_real *M, const ag__kmask &p, int64_t r) {
    int64_t i2 = r % p.rows3[2], i01 = r / p.rows3[2];
    return M + i01 / p.rows3[1] * p.stride3[0] + i01 % p.rows3[1] * p.stride3[1] + i2 * p.stride3[2];
}

/* ---- masked softmax ---- */

__global__ void softmax_rows_kernel(const ag_real *X, const ag_real *M, ag__kmask p, ag_real scale, ag_real *Y,
                                    int64_t rows) {
    AG_CUDA_WARP_ROW(r, rows);
    int cols = p.cols;
    const ag_real *x = X + r * cols, *m = M ? mask_row(M, p, r) : NULL;
    ag_real *y = Y + r * cols; /* may be x: each lane reads x[c] before it writes y[c] */
    ag_real mx = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += 32) mx = fmax(mx, m ? scale * x[c] + m[c] : scale * x[c]);
    mx = ag__warp_max(mx);
    if (mx == -INFINITY) { /* fully masked: zeros, as the CPU (the whole warp takes this branch) */
        for (int c = threadIdx.x; c < cols; c += 32) y[c] = 0;
        return;
    }
    ag_real s = 0;
    for (int c = threadIdx.x; c < cols; c += 32) {
        ag_real e = ag__vexp_nonpos((m ? scale * x[c] + m[c] : scale * x[c]) - mx);
        y[c] = e;
        s += e;
    }
    ag_real inv = 1 / ag__warp_sum(s); /* sum >= 1: the max entry contributes e^0 */
    for (int c = threadIdx.x; c < cols; c += 32) y[c] *= inv;
}

/* gx may be g (fresh): the dot product is complete (ag__warp_sum) before any
 * lane writes, and each lane writes only the entries it read. */
__global__ void softmax_rows_grad_kernel(const ag_real *Y, const ag_real *G, ag_real scale, ag_real *GX, int64_t rows,
                                         int cols, bool fresh) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *y = Y + r * cols, *g = G + r * cols;
    ag_real *gx = GX + r * cols;
    ag_real dot = 0;
    for (int c = threadIdx.x; c < cols; c += 32) dot += g[c] * y[c];
    dot = ag__warp_sum(dot);
    for (int c = threadIdx.x; c < cols; c += 32) {
        ag_real d = scale * y[c] * (g[c] - dot); /* masked: y = 0, so no gradient */
        gx[c] = fresh ? d : gx[c] + d;
    }
}

static void softmax_rows_forward(const ag_real *x, const ag_real *mask, const ag__kmask *plan,
                                              ag_real scale, ag_real *y, int64_t rows) {
    if (rows > 0 && plan->cols > 0)
        ag__launch(softmax_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), x, mask, *plan, scale, y, rows);
}

static void softmax_rows_backward(const ag_real *y, const ag_real *g, ag_real scale, ag_real *gx,
                                               int64_t rows, int cols, bool fresh) {
    if (rows > 0 && cols > 0)
        ag__launch(softmax_rows_grad_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), y, g, scale, gx, rows, cols, fresh);
}

/* ---- log-softmax ---- */

__global__ void log_softmax_rows_kernel(const ag_real *X, ag_real *Y, int64_t rows, int cols) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *x = X + r * cols;
    ag_real *y = Y + r * cols;
    ag_real mx = -INFINITY;
    for (int c = threadIdx.x; c < cols; c += 32) mx = fmax(mx, x[c]);
    mx = ag__warp_max(mx);
    ag_real s = 0;
    for (int c = threadIdx.x; c < cols; c += 32) {
        y[c] = x[c] - mx;
        s += ag__vexp_nonpos(y[c]);
    }
    ag_real lse = log(ag__warp_sum(s));
    for (int c = threadIdx.x; c < cols; c += 32) y[c] -= lse;
}

__global__ void log_softmax_rows_grad_kernel(const ag_real *Y, const ag_real *G, ag_real *GX, int64_t rows, int cols,
                                             bool fresh) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *y = Y + r * cols, *g = G + r * cols;
    ag_real *gx = GX + r * cols;
    ag_real gsum = 0;
    for (int c = threadIdx.x; c < cols; c += 32) gsum += g[c];
    gsum = ag__warp_sum(gsum);
    for (int c = threadIdx.x; c < cols; c += 32) {
        ag_real d = g[c] - ag__vexp_nonpos(y[c]) * gsum; /* dx = g - softmax * sum(g) */
        gx[c] = fresh ? d : gx[c] + d;
    }
}

static void log_softmax_rows(const ag_real *x, ag_real *y, int64_t rows, int cols) {
    if (rows > 0 && cols > 0)
        ag__launch(log_softmax_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), x, y, rows, cols);
}

static void log_softmax_rows_grad(const ag_real *y, const ag_real *g, ag_real *gx, int64_t rows,
                                               int cols, bool fresh) {
    if (rows > 0 && cols > 0)
        ag__launch(log_softmax_rows_grad_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), y, g, gx, rows, cols, fresh);
}

/* ---- softmax along an axis over the valid positions: a thread per
 * (outer o, inner k) column, t in increasing order as the CPU; the threads
 * of a warp take neighbouring k, so their reads are contiguous ---- */

/* One column: y = the softmax of x over t < len, 0 at the padding t >= len. */
__device__ static inline void softmax_column(const ag_real *x, ag_real *y, int64_t len, int64_t n, int64_t inner) {
    for (int64_t t = len; t < n; t++) y[t * inner] = 0; /* padding: weight 0 */
    if (len == 0) return;
    ag_real mx = x[0];
    for (int64_t t = 1; t < len; t++) mx = fmax(mx, x[t * inner]);
    ag_real s = 0;
    for (int64_t t = 0; t < len; t++) {
        ag_real e = ag__vexp_nonpos(x[t * inner] - mx);
        y[t * inner] = e;
        s += e;
    }
    ag_real inv = 1 / s;
    for (int64_t t = 0; t < len; t++) y[t * inner] *= inv;
}

__global__ void softmax_len_kernel(const ag_real *X, ag_real *Y, const int32_t *L, int64_t outer, int64_t n,
                                   int64_t inner, int64_t per_example) {
    AG_CUDA_FOR(i, outer * inner) {
        int64_t o = i / inner, k = i % inner, len = L ? L[o / per_example] : n, at = o * n * inner + k;
        softmax_column(X + at, Y + at, len, n, inner);
    }
}

__global__ void softmax_len_grad_kernel(const ag_real *Y, const ag_real *G, ag_real *GX, const int32_t *L,
                                        int64_t outer, int64_t n, int64_t inner, int64_t per_example, bool fresh) {
    AG_CUDA_FOR(i, outer * inner) {
        int64_t o = i / inner, k = i % inner, len = L ? L[o / per_example] : n, at = o * n * inner + k;
        const ag_real *y = Y + at, *g = G + at;
        ag_real *gx = GX + at;
        ag_real dot = 0;
        for (int64_t t = 0; t < len; t++) dot += g[t * inner] * y[t * inner];
        for (int64_t t = 0; t < len; t++) {
            ag_real d = y[t * inner] * (g[t * inner] - dot);
            gx[t * inner] = fresh ? d : gx[t * inner] + d;
        }
        if (fresh) /* padded positions had weight 0: no gradient */
            for (int64_t t = len; t < n; t++) gx[t * inner] = 0;
    }
}

/* Softmax pooling: softmax_column, then the weighted sum over t in
 * increasing order (the CPU's pool_block_sum). */
__global__ void softmax_pool_kernel(const ag_real *S, const ag_real *X, ag_real *A, ag_real *OUT, const int32_t *L,
                                    int64_t outer, int64_t n, int64_t inner, int64_t per_example) {
    AG_CUDA_FOR(i, outer * inner) {
        int64_t o = i / inner, k = i % inner, len = L ? L[o / per_example] : n, at = o * n * inner + k;
        const ag_real *x = X + at, *a = A + at;
        softmax_column(S + at, A + at, len, n, inner);
        ag_real pooled = 0;
        for (int64_t t = 0; t < len; t++) pooled += a[t * inner] * x[t * inner];
        OUT[o * inner + k] = pooled;
    }
}

/* Its backward, the CPU's pool_block_grad for one column. */
__global__ void softmax_pool_grad_kernel(const ag_real *A, const ag_real *X, const ag_real *G, ag_real *GS, bool fresh_s,
                                         ag_real *GX, bool fresh_x, const int32_t *L, int64_t outer, int64_t n,
                                         int64_t inner, int64_t per_example) {
    AG_CUDA_FOR(i, outer * inner) {
        int64_t o = i / inner, k = i % inner, len = L ? L[o / per_example] : n, at = o * n * inner + k;
        const ag_real *a = A + at, *x = X + at;
        const ag_real g = G[o * inner + k];
        if (GS) {
            ag_real *gs = GS + at;
            ag_real dot = 0;
            for (int64_t t = 0; t < len; t++) dot += g * x[t * inner] * a[t * inner];
            for (int64_t t = 0; t < len; t++) {
                ag_real d = a[t * inner] * (g * x[t * inner] - dot);
                gs[t * inner] = fresh_s ? d : gs[t * inner] + d;
            }
            if (fresh_s)
                for (int64_t t = len; t < n; t++) gs[t * inner] = 0;
        }
        if (GX) {
            ag_real *gx = GX + at;
            for (int64_t t = 0; t < len; t++) {
                ag_real d = g * a[t * inner];
                gx[t * inner] = fresh_x ? d : gx[t * inner] + d;
            }
            if (fresh_x)
                for (int64_t t = len; t < n; t++) gx[t * inner] = 0;
        }
    }
}

static void softmax_pool(const ag_real *s, const ag_real *x, ag_real *alpha, ag_real *out, const int32_t *len,
                         int64_t outer, int64_t n, int64_t inner, int64_t per_example) {
    if (outer * inner > 0)
        ag__launch(softmax_pool_kernel, ag__cuda_blocks(outer * inner), AG_CUDA_THREADS, 0, s, x, alpha, out, len,
                   outer, n, inner, per_example);
}

static void softmax_pool_grad(const ag_real *alpha, const ag_real *x, const ag_real *g, ag_real *gs, bool fresh_s,
                              ag_real *gx, bool fresh_x, const int32_t *len, int64_t outer, int64_t n, int64_t inner,
                              int64_t per_example) {
    if (outer * inner > 0 && n > 0 && (gs || gx))
        ag__launch(softmax_pool_grad_kernel, ag__cuda_blocks(outer * inner), AG_CUDA_THREADS, 0, alpha, x, g, gs,
                   fresh_s, gx, fresh_x, len, outer, n, inner, per_example);
}

static void softmax_len(const ag_real *x, ag_real *y, const int32_t *len, int64_t outer, int64_t n,
                                     int64_t inner, int64_t per_example) {
    if (outer * inner > 0 && n > 0)
        ag__launch(softmax_len_kernel, ag__cuda_blocks(outer * inner), AG_CUDA_THREADS, 0, x, y, len, outer, n, inner,
                   per_example);
}

static void softmax_len_grad(const ag_real *y, const ag_real *g, ag_real *gx, const int32_t *len,
                                          int64_t outer, int64_t n, int64_t inner, int64_t per_example, bool fresh) {
    if (outer * inner > 0 && n > 0)
        ag__launch(softmax_len_grad_kernel, ag__cuda_blocks(outer * inner), AG_CUDA_THREADS, 0, y, g, gx, len, outer,
                   n, inner, per_example, fresh);
}

/* ---- the softmax-gated mixture: a thread per (row r, feature l), the
 * sources in the CPU's order (the gate's sum, the weighted sum, and the
 * store-then-add of a source given twice all happen in one thread) ---- */

__device__ static inline bool mix_live(const ag__kmix &j, int64_t r) {
    return !j.len || r % j.N < j.len[r / j.N];
}

__global__ void softmax_mix_kernel(ag__kmix j, int64_t rows) {
    int n = j.n, d = j.d, nz = j.nz;
    bool ref = nz < n; /* the last source's logit is 0 */
    AG_CUDA_FOR(i, rows * d) {
        int64_t r = i / d;
        int l = (int)(i % d);
        if (!mix_live(j, r)) { /* padding: out 0, no gate (backward skips the row) */
            j.y[i] = 0;
            continue;
        }
        const ag_real *z = j.z + r * nz * d + l;
        ag_real *a = j.gate + r * n * d + l;
        ag_real m = ref ? 0 : z[0];
        for (int g = ref ? 0 : 1; g < nz; g++) m = z[g * d] > m ? z[g * d] : m;
        ag_real sum = 0;
        for (int g = 0; g < nz; g++) {
            a[g * d] = ag__vexp_nonpos(z[g * d] - m);
            sum += a[g * d];
        }
        if (ref) {
            a[nz * d] = ag__vexp_nonpos(-m);
            sum += a[nz * d];
        }
        sum = 1 / sum;
        ag_real acc = 0;
        for (int g = 0; g < n; g++) {
            a[g * d] *= sum;
            acc += a[g * d] * j.src[g][i];
        }
        j.y[i] = acc;
    }
}

__global__ void softmax_mix_grad_kernel(ag__kmix j, int64_t rows) {
    int n = j.n, d = j.d, nz = j.nz;
    AG_CUDA_FOR(i, rows * d) {
        int64_t r = i / d;
        int l = (int)(i % d);
        ag_real *dz = j.dz ? j.dz + r * nz * d + l : NULL;
        if (!mix_live(j, r)) { /* padding: no gradient (stored as 0 into fresh buffers) */
            if (dz && j.fresh_z)
                for (int g = 0; g < nz; g++) dz[g * d] = 0;
            for (int g = 0; g < n; g++)
                if (j.dsrc[g] && j.fresh_src[g]) j.dsrc[g][i] = 0;
            continue;
        }
        const ag_real *a = j.gate + r * n * d + l;
        ag_real out = j.out[i], dout = j.dout[i];
        for (int g = 0; g < n; g++) {
            ag_real ag = a[g * d];
            if (dz && g < nz) { /* the reference logit is a constant */
                ag_real v = ag * dout * (j.src[g][i] - out);
                dz[g * d] = j.fresh_z ? v : dz[g * d] + v;
            }
            if (j.dsrc[g]) {
                ag_real v = ag * dout;
                j.dsrc[g][i] = j.fresh_src[g] ? v : j.dsrc[g][i] + v;
            }
        }
    }
}

static void softmax_mix_forward(const ag__kmix *j, int64_t rows) {
    if (rows * j->d > 0)
        ag__launch(softmax_mix_kernel, ag__cuda_blocks(rows * j->d), AG_CUDA_THREADS, 0, *j, rows);
}

static void softmax_mix_backward(const ag__kmix *j, int64_t rows) {
    if (rows * j->d > 0)
        ag__launch(softmax_mix_grad_kernel, ag__cuda_blocks(rows * j->d), AG_CUDA_THREADS, 0, *j, rows);
}

/* ---- masked softmax along any axis: a thread per (outer o, inner k)
 * column, t in increasing order as the CPU; the threads of a warp take
 * neighbouring k, so their reads are contiguous ---- */

/* The mask offset of x's element (o, 0, k) (ops/softmax.h ag__kaxis). */
__device__ static inline int64_t axis_mask_offset(const ag__kaxis &p, int64_t o, int64_t k) {
    int64_t off = 0;
    for (int d = 3; d > p.axis4; d--) {
        off += k % p.shape4[d] * p.mstride4[d];
        k /= p.shape4[d];
    }
    for (int d = p.axis4 - 1; d >= 0; d--) {
        off += o % p.shape4[d] * p.mstride4[d];
        o /= p.shape4[d];
    }
    return off;
}

__global__ void softmax_axis_kernel(ag__kaxis p, const ag_real *X, const ag_real *M, ag_real scale, ag_real *Y) {
    AG_CUDA_FOR(i, p.outer * p.inner) {
        int64_t o = i / p.inner, k = i % p.inner, n = p.n, inner = p.inner, at = o * n * inner + k;
        const ag_real *x = X + at, *m = M ? M + axis_mask_offset(p, o, k) : NULL;
        int64_t mt = p.mstride4[p.axis4];
        ag_real *y = Y + at;
        ag_real mx = -INFINITY;
        for (int64_t t = 0; t < n; t++) {
            ag_real z = m ? scale * x[t * inner] + m[t * mt] : scale * x[t * inner];
            y[t * inner] = z;
            mx = z > mx ? z : mx;
        }
        if (mx == -INFINITY) mx = 0; /* fully masked: every e^(-inf) is 0, as the CPU */
        ag_real s = 0;
        for (int64_t t = 0; t < n; t++) {
            ag_real e = ag__vexp_nonpos(y[t * inner] - mx);
            y[t * inner] = e;
            s += e;
        }
        ag_real inv = s > 0 ? 1 / s : 0;
        for (int64_t t = 0; t < n; t++) y[t * inner] *= inv;
    }
}

__global__ void softmax_axis_grad_kernel(ag__kaxis p, const ag_real *Y, const ag_real *G, ag_real scale, ag_real *GX,
                                         bool fresh) {
    AG_CUDA_FOR(i, p.outer * p.inner) {
        int64_t o = i / p.inner, k = i % p.inner, n = p.n, inner = p.inner, at = o * n * inner + k;
        const ag_real *y = Y + at, *g = G + at;
        ag_real *gx = GX + at;
        ag_real dot = 0;
        for (int64_t t = 0; t < n; t++) dot += g[t * inner] * y[t * inner];
        for (int64_t t = 0; t < n; t++) {
            ag_real d = scale * y[t * inner] * (g[t * inner] - dot); /* masked: y = 0, no gradient */
            gx[t * inner] = fresh ? d : gx[t * inner] + d;
        }
    }
}

static void softmax_axis(const ag__kaxis *p, const ag_real *x, const ag_real *mask, ag_real scale, ag_real *y) {
    if (p->outer * p->inner > 0 && p->n > 0)
        ag__launch(softmax_axis_kernel, ag__cuda_blocks(p->outer * p->inner), AG_CUDA_THREADS, 0, *p, x, mask, scale,
                   y);
}

static void softmax_axis_grad(const ag__kaxis *p, const ag_real *y, const ag_real *g, ag_real scale, ag_real *gx,
                              bool fresh) {
    if (p->outer * p->inner > 0 && p->n > 0)
        ag__launch(softmax_axis_grad_kernel, ag__cuda_blocks(p->outer * p->inner), AG_CUDA_THREADS, 0, *p, y, g,
                   scale, gx, fresh);
}

extern "C" const ag__softmax_kernels ag__softmax_cuda = {
    softmax_rows_forward, softmax_rows_backward, log_softmax_rows, log_softmax_rows_grad,
    softmax_len,          softmax_len_grad,      softmax_pool,        softmax_pool_grad,
    softmax_mix_forward,  softmax_mix_backward,
    softmax_axis,         softmax_axis_grad,
};
