/* loss.cu - the CUDA side of ops/loss.c: cross-entropy (plain and fused
 * with the classifier's linear layer), KL divergence to a soft target, and
 * mean squared error.
 *
 * A row's max, sum of exps and target mass are warp reductions (a warp per
 * row); the mean over rows is one block summing the row losses in double
 * in a fixed order, as the CPU sums them in double.  Where the CPU calls
 * C's double log/exp on a float, so do these kernels (the casts below), so
 * f32 rounds the same way.  The family's table, with the fused
 * classifier's cuBLAS products, is in ops/cuda/loss.c. */
#include "../../graph/prelude.cuh"
#include "loss.cuh"
#include "../vecmath.h"

/* ---- cross-entropy ---- */

/* Label smoothing's mean of z - m over a row, its sum in double (a warp's). */
__device__ static ag_real mean_shifted(const ag_real *z, int C, ag_real m) {
    double shifted = 0;
    for (int c = AG_CUDA_LANE; c < C; c += 32) shifted += (double)(z[c] - m);
    return (ag_real)(ag__warp_sum(shifted) / C);
}

__global__ void ce_rows_kernel(const ag_real *Z, const int32_t *labels, int ignore_index, ag_real eps, ag_real *row_max,
                               ag_real *row_lse, ag_real *row_loss, int64_t rows, int C) {
    AG_CUDA_WARP_ROW(r, rows);
    int y = labels[r];
    if (y == ignore_index) { /* the whole warp leaves: no shuffle waits for it */
        if (AG_CUDA_LANE == 0) row_loss[r] = 0;
        return;
    }
    const ag_real *z = Z + r * C;
    ag_real m = -INFINITY, sum = 0;
    for (int c = AG_CUDA_LANE; c < C; c += 32) m = fmax(m, z[c]);
    m = ag__warp_max(m);
    for (int c = AG_CUDA_LANE; c < C; c += 32) sum += ag__vexp_nonpos(z[c] - m);
    sum = ag__warp_sum(sum);
    ag_real mean = eps == 0 ? 0 : mean_shifted(z, C, m); /* every lane: the warp's sum */
    if (AG_CUDA_LANE == 0) {
        ag_real s = (ag_real)log((double)sum);
        row_max[r] = m;
        row_lse[r] = s;
        row_loss[r] = eps == 0 ? s - (z[y] - m) : s - (1 - eps) * (z[y] - m) - eps * mean;
    }
}

__global__ void ce_grad_kernel(const ag_real *Z, const int32_t *labels, int ignore_index, ag_real eps,
                               const ag_real *row_max, const ag_real *row_lse, const ag_real *G, int64_t counted,
                               ag_real *GZ, int64_t rows, int C, bool fresh) {
    ag_real scale = G[0] / (ag_real)counted;
    AG_CUDA_FOR(i, rows * C) {
        int64_t r = i / C;
        int c = (int)(i - r * C), y = labels[r];
        if (y == ignore_index) {
            if (fresh) GZ[i] = 0;
            continue;
        }
        ag_real d = scale * ag__vexp_nonpos((Z[i] - row_max[r]) - row_lse[r]);
        ag_real v = fresh ? d : GZ[i] + d;
        if (eps == 0) { /* as the CPU: the exp term first, then - scale at the label */
            GZ[i] = c == y ? v - scale : v;
            continue;
        }
        v -= scale * (eps / (ag_real)C); /* then the spread, then the label's share */
        GZ[i] = c == y ? v - scale * (1 - eps) : v;
    }
}

extern "C" void ag__cross_entropy_forward_cuda(const ag_real *z, const int32_t *labels, int ignore_index, ag_real eps,
                                               ag_real *row_max, ag_real *row_lse, ag_real *row_loss, int64_t rows,
                                               int C) {
    if (rows > 0 && C > 0)
        ag__launch(ce_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), z, labels, ignore_index, eps, row_max, row_lse,
                   row_loss, rows, C);
}

extern "C" void ag__cross_entropy_backward_cuda(const ag_real *z, const int32_t *labels, int ignore_index, ag_real eps,
                                                const ag_real *row_max, const ag_real *row_lse, const ag_real *g,
                                                int64_t counted, ag_real *gz, int64_t rows, int C, bool fresh) {
    int64_t n = rows * C;
    if (n > 0 && counted > 0)
        ag__launch(ce_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, z, labels, ignore_index, eps, row_max,
                   row_lse, g, counted, gz, rows, C, fresh);
}

/* ---- the mean over rows: one block, double partials, a fixed tree ---- */

enum { MEAN_THREADS = 256 };

template <typename T> __global__ void row_mean_kernel(const T *L, int64_t rows, int64_t n, ag_real *out) {
    __shared__ double part[MEAN_THREADS];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < rows; i += MEAN_THREADS) acc += (double)L[i];
    double sum = ag__block_sum<MEAN_THREADS>(part, acc);
    if (threadIdx.x == 0) *out = n ? (ag_real)(sum / (double)n) : 0;
}

extern "C" void ag__row_loss_mean_cuda(const ag_real *row_loss, int64_t rows, int64_t n, ag_real *out) {
    ag__launch(row_mean_kernel<ag_real>, 1, MEAN_THREADS, 0, row_loss, rows, n, out);
}

extern "C" void ag__row_loss_mean_f64_cuda(const double *row_loss, int64_t rows, int64_t n, ag_real *out) {
    ag__launch(row_mean_kernel<double>, 1, MEAN_THREADS, 0, row_loss, rows, n, out);
}

/* ---- linear + cross-entropy, fused: the counted rows' logits ---- */

__global__ void lce_rows_kernel(ag_real *Z, const int32_t *labels, ag_real eps, ag_real *loss, int64_t n, int C,
                                bool to_grad) {
    AG_CUDA_WARP_ROW(r, n);
    ag_real *z = Z + r * C;
    int y = labels[r];
    ag_real m = -INFINITY, sum = 0;
    for (int c = AG_CUDA_LANE; c < C; c += 32) m = fmax(m, z[c]);
    m = ag__warp_max(m);
    ag_real zy = z[y] - m, mean = eps == 0 ? 0 : mean_shifted(z, C, m);
    __syncwarp(); /* every lane has read z[y] (and z for the mean) before its owner overwrites it */
    for (int c = AG_CUDA_LANE; c < C; c += 32) {
        ag_real e = ag__vexp_nonpos(z[c] - m);
        if (to_grad) z[c] = e;
        sum += e;
    }
    sum = ag__warp_sum(sum);
    if (AG_CUDA_LANE == 0) {
        if (eps == 0) loss[r] = (ag_real)(log((double)sum) - (double)zy);
        else loss[r] = (ag_real)log((double)sum) - (1 - eps) * zy - eps * mean; /* as the CPU's smoothed row */
    }
    if (to_grad) {
        ag_real inv = 1 / sum, spread = eps / (ag_real)C; /* sum >= 1: the max contributes e^0 */
        for (int c = AG_CUDA_LANE; c < C; c += 32) {
            if (eps == 0) z[c] = c == y ? z[c] * inv - 1 : z[c] * inv;
            else z[c] = c == y ? (z[c] * inv - spread) - (1 - eps) : z[c] * inv - spread;
        }
    }
}

__global__ void lce_scale_kernel(const ag_real *G, int64_t n, ag_real *scal) {
    scal[0] = G[0] / (ag_real)n;
    scal[1] = 0;
    scal[2] = 1;
}

__global__ void gather_rows_kernel(const ag_real *X, int width, const int32_t *idx, int64_t n, ag_real *Y) {
    AG_CUDA_FOR(i, n * width) {
        int64_t row = i / width;
        Y[i] = X[(int64_t)idx[row] * width + (i - row * width)];
    }
}

__global__ void unpack_rows_kernel(ag_real *D, const ag_real *S, int width, const int32_t *pos, int64_t rows,
                                   bool fresh) {
    AG_CUDA_FOR(i, rows * width) {
        int64_t row = i / width;
        int32_t p = pos[row];
        if (p < 0) {
            if (fresh) D[i] = 0;
            continue;
        }
        ag_real s = S[(int64_t)p * width + (i - row * width)];
        D[i] = fresh ? s : D[i] + s;
    }
}

extern "C" void ag__lce_rows_cuda(ag_real *z, const int32_t *labels, ag_real eps, ag_real *loss, int64_t n, int C,
                                  bool to_grad) {
    if (n > 0 && C > 0) ag__launch(lce_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(n), z, labels, eps, loss, n, C, to_grad);
}

extern "C" void ag__lce_scale_cuda(const ag_real *g, int64_t n, ag_real *scal) {
    ag__launch(lce_scale_kernel, 1, 1, 0, g, n, scal);
}

extern "C" void ag__gather_rows_cuda(const ag_real *x, int width, const int32_t *idx, int64_t n, ag_real *y) {
    if (n > 0 && width > 0)
        ag__launch(gather_rows_kernel, ag__cuda_blocks(n * width), AG_CUDA_THREADS, 0, x, width, idx, n, y);
}

extern "C" void ag__unpack_rows_cuda(ag_real *dst, const ag_real *src, int width, const int32_t *pos, int64_t rows,
                                     bool fresh) {
    if (rows > 0 && width > 0)
        ag__launch(unpack_rows_kernel, ag__cuda_blocks(rows * width), AG_CUDA_THREADS, 0, dst, src, width, pos, rows,
                   fresh);
}

/* ---- KL divergence to a soft target ---- */

__global__ void kl_rows_kernel(const ag_real *Z, const ag_real *T, ag_real *row_max, ag_real *row_lse,
                               ag_real *row_mass, double *row_loss, int64_t rows, int C) {
    AG_CUDA_WARP_ROW(r, rows);
    const ag_real *z = Z + r * C, *t = T + r * C;
    ag_real m = -INFINITY, sum = 0, mass = 0;
    for (int c = AG_CUDA_LANE; c < C; c += 32) m = fmax(m, z[c]);
    m = ag__warp_max(m);
    for (int c = AG_CUDA_LANE; c < C; c += 32) sum += (ag_real)exp((double)(z[c] - m));
    sum = ag__warp_sum(sum);
    ag_real s = (ag_real)log((double)sum);
    double row = 0;
    for (int c = AG_CUDA_LANE; c < C; c += 32) {
        mass += t[c];
        if (t[c] > 0) row += (double)t[c] * (log((double)t[c]) - (double)((z[c] - m) - s));
    }
    mass = ag__warp_sum(mass);
    row = ag__warp_sum(row);
    if (AG_CUDA_LANE == 0) {
        row_max[r] = m;
        row_lse[r] = s;
        row_mass[r] = mass;
        row_loss[r] = row;
    }
}

__global__ void kl_grad_kernel(const ag_real *Z, const ag_real *T, const ag_real *row_max, const ag_real *row_lse,
                               const ag_real *row_mass, const ag_real *G, ag_real *GZ, int64_t rows, int C) {
    ag_real scale = G[0] / (ag_real)rows;
    AG_CUDA_FOR(i, rows * C) {
        int64_t r = i / C;
        double p = exp((double)((Z[i] - row_max[r]) - row_lse[r]));
        GZ[i] = (ag_real)((double)GZ[i] + (double)scale * ((double)row_mass[r] * p - (double)T[i]));
    }
}

extern "C" void ag__kl_div_soft_forward_cuda(const ag_real *z, const ag_real *t, ag_real *row_max, ag_real *row_lse,
                                             ag_real *row_mass, double *row_loss, int64_t rows, int C) {
    if (rows > 0 && C > 0)
        ag__launch(kl_rows_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), z, t, row_max, row_lse, row_mass, row_loss, rows, C);
}

extern "C" void ag__kl_div_soft_backward_cuda(const ag_real *z, const ag_real *t, const ag_real *row_max,
                                              const ag_real *row_lse, const ag_real *row_mass, const ag_real *g,
                                              ag_real *gz, int64_t rows, int C) {
    int64_t n = rows * C;
    if (n > 0)
        ag__launch(kl_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, z, t, row_max, row_lse, row_mass, g, gz,
                   rows, C);
}

/* ---- mean squared error ---- */

__global__ void mse_kernel(const ag_real *P, const ag_real *T, ag_real *out, int64_t n) {
    __shared__ double part[MEAN_THREADS];
    double acc = 0;
    for (int64_t i = threadIdx.x; i < n; i += MEAN_THREADS) {
        ag_real d = P[i] - T[i];
        acc += (double)(d * d);
    }
    double sum = ag__block_sum<MEAN_THREADS>(part, acc);
    if (threadIdx.x == 0) *out = (ag_real)(sum / (double)n);
}

__global__ void mse_grad_kernel(const ag_real *P, const ag_real *T, const ag_real *G, ag_real *GP, ag_real *GT,
                                int64_t n) {
    ag_real scale = 2 * G[0] / (ag_real)n;
    AG_CUDA_FOR(i, n) {
        ag_real d = scale * (P[i] - T[i]);
        if (GP) GP[i] += d;
        if (GT) GT[i] -= d;
    }
}

extern "C" void ag__mse_forward_cuda(const ag_real *p, const ag_real *t, ag_real *out, int64_t n) {
    if (n > 0) ag__launch(mse_kernel, 1, MEAN_THREADS, 0, p, t, out, n);
}

extern "C" void ag__mse_backward_cuda(const ag_real *p, const ag_real *t, const ag_real *g, ag_real *gp, ag_real *gt,
                                      int64_t n) {
    if (n > 0) ag__launch(mse_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, p, t, g, gp, gt, n);
}
