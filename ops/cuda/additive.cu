/* additive.cu - the CUDA side of ops/additive.c: MPSAN's masked unit
 * (scalar additive self-attention whose values are its inputs) in one
 * launch forward and three backward, where the composition took 30.
 *
 * Forward: a warp per query row (b, q).  Lane k computes h_k.u itself, so
 * no launch computes the projections first: the row's scores, its softmax
 * and out_q = sum_k p[q,k] h_k (a lane per feature) in one kernel.
 * Backward: dz a warp per query row, dh a thread per (key row, feature)
 * summing over the queries, du, dv and dbias a thread each summing over the
 * rows.  Every sum up to dz and after it runs in the CPU's order (the dots
 * and the softmax's sum in softmax_rows.h's 8 lanes, the rest serial), so
 * p and dz have the CPU's bits, and so have the gradients of u, v and the
 * bias, sums of dz that cancel heavily (ops/additive.c, pair_dots).  No
 * atomics: the same bits every run. */
#include "../../graph/prelude.cuh"
#include "../additive.h"
#include "../vecmath.h"

/* The mask row (offset) of score row r = b N + q (ops/softmax.h). */
__device__ static inline int64_t mask_row(const ag__kmask &m, int64_t r) {
    int64_t i2 = r % m.rows3[2], i01 = r / m.rows3[2];
    return i01 / m.rows3[1] * m.stride3[0] + i01 % m.rows3[1] * m.stride3[1] + i2 * m.stride3[2];
}

/* sum_j a[j] b[j] in 8 lanes: softmax_rows.h's ag__dot_row, the same bits. */
__device__ static inline ag_real dot_row(const ag_real *a, const ag_real *b, int n) {
    ag_real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += a[j + l] * b[j + l];
    for (; j < n; j++) acc[j % 8] += a[j] * b[j];
    ag_real s = 0;
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* sum_j x[j] in 8 lanes: softmax_rows.h's ag__softmax_row sum. */
__device__ static inline ag_real sum_row(const ag_real *x, int n) {
    ag_real acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int l = 0; l < 8; l++) acc[l] += x[j + l];
    for (; j < n; j++) acc[j % 8] += x[j];
    ag_real s = 0;
    for (int l = 0; l < 8; l++) s += acc[l];
    return s;
}

/* ops/additive.c's score_of and score_slope. */
__device__ static inline ag_real score_of(ag_real z, ag_real inv_c, ag_real c, bool elu) {
    ag_real x = z * inv_c;
    return elu ? ag__velu(x) : ag__vtanh(x) * c;
}

__device__ static inline ag_real score_slope(ag_real z, ag_real inv_c, bool elu) {
    ag_real x = z * inv_c;
    if (elu) return (x > 0 ? 1 : ag__velu(x) + 1) * inv_c;
    ag_real t = ag__vtanh(x);
    return 1 - t * t;
}

/* The rows of all G units run as one: row r = (g B + b) N + q of h
 * [G,B,N,d] (and of p, huv, out, dz laid out alike) is unit g's query q of
 * example b, so only u, v, the bias and the mask need the unit g. */

/* A warp per query row r: huv[r], p[r,:] and out[r,:]. */
__global__ void additive_forward_kernel(ag__kmask mp, int G, int B, int N, int d, int64_t mask_group, bool elu,
                                        ag_real c, const ag_real *H, const ag_real *U, const ag_real *V,
                                        const ag_real *BIAS, const ag_real *M, ag_real *P, ag_real *HUV, ag_real *OUT) {
    AG_CUDA_WARP_ROW(r, (int64_t)G * B * N);
    int64_t unit_rows = (int64_t)B * N, g = r / unit_rows;
    int q = (int)(r % N), lane = AG_CUDA_LANE;
    const ag_real *h = H + (r - q) * d, *m = M ? M + g * mask_group + mask_row(mp, r - g * unit_rows) : NULL;
    const ag_real *u = U + g * d, *v = V + g * d;
    ag_real inv_c = 1 / c, hv = dot_row(h + (int64_t)q * d, v, d), bias = BIAS[g];
    ag_real *p = P + r * N, *out = OUT + r * d;
    if (lane == 0) {
        HUV[2 * r] = dot_row(h + (int64_t)q * d, u, d);
        HUV[2 * r + 1] = hv;
    }
    ag_real mx = -INFINITY;
    for (int k = lane; k < N; k += 32) {
        ag_real s = score_of((dot_row(h + (int64_t)k * d, u, d) + hv) + bias, inv_c, c, elu);
        p[k] = m ? s + m[k] : s;
        mx = fmax(mx, p[k]);
    }
    mx = ag__warp_max(mx);
    if (mx == -INFINITY) { /* no key allowed: zeros, as the CPU (the whole warp takes this branch) */
        for (int k = lane; k < N; k += 32) p[k] = 0;
        for (int l = lane; l < d; l += 32) out[l] = 0;
        return;
    }
    for (int k = lane; k < N; k += 32) p[k] = ag__vexp_nonpos(p[k] - mx);
    __syncwarp(); /* every lane reads the whole row from here on */
    /* the sum in the CPU's order (softmax_rows.h's 8 lanes), so p has its bits */
    ag_real inv = 1 / sum_row(p, N); /* sum >= 1: the max entry contributes e^0 */
    __syncwarp(); /* every lane has read p before any scales it */
    for (int k = lane; k < N; k += 32) p[k] *= inv;
    __syncwarp();
    for (int l = lane; l < d; l += 32) {
        ag_real acc = 0;
        for (int k = 0; k < N; k++) acc += p[k] * h[(int64_t)k * d + l];
        out[l] = acc;
    }
}

/* A warp per query row r: dz[r,:] = p (dp - sum p dp) f'(z), dp[k] =
 * G_r.h_k, and its sum dhv[r]. */
__global__ void additive_dz_kernel(int units, int B, int N, int d, bool elu, ag_real c, const ag_real *H,
                                   const ag_real *BIAS, const ag_real *P, const ag_real *HUV, const ag_real *G,
                                   ag_real *DZ, ag_real *DHV) {
    AG_CUDA_WARP_ROW(r, (int64_t)units * B * N);
    int q = (int)(r % N), lane = AG_CUDA_LANE;
    int64_t b0 = r - q; /* the example's first row */
    const ag_real *h = H + b0 * d, *g = G + r * d, *p = P + r * N;
    ag_real *dz = DZ + r * N, inv_c = 1 / c, hv = HUV[2 * r + 1], bias = BIAS[r / ((int64_t)B * N)];
    for (int k = lane; k < N; k += 32) dz[k] = dot_row(g, h + (int64_t)k * d, d); /* dp */
    __syncwarp();
    ag_real dot = dot_row(dz, p, N); /* the CPU's order, in every lane */
    __syncwarp(); /* every lane has read dp before any overwrites it */
    for (int k = lane; k < N; k += 32) /* masked: p = 0, so dz = 0 */
        dz[k] = p[k] * (dz[k] - dot) * score_slope((HUV[2 * (b0 + k)] + hv) + bias, inv_c, elu);
    __syncwarp();
    if (lane == 0) { /* the row's sum in the CPU's order */
        ag_real sum = 0;
        for (int k = 0; k < N; k++) sum += dz[k];
        DHV[r] = sum;
    }
}

/* A thread per (key row t = b N + k, feature l): dhu[t] = sum_q dz[q,k]
 * and dh[t,l] (+)= sum_q p[q,k] G[q,l] + dhu[t] u[l] + dhv[t] v[l] (GH may
 * be NULL: dhu only, for du). */
__global__ void additive_dh_kernel(int units, int B, int N, int d, const ag_real *U, const ag_real *V,
                                   const ag_real *P, const ag_real *G, const ag_real *DZ, const ag_real *DHV,
                                   ag_real *DHU, ag_real *GH, bool fresh) {
    AG_CUDA_FOR(e, (int64_t)units * B * N * d) {
        int64_t t = e / d;
        int l = (int)(e % d), k = (int)(t % N);
        int64_t b0 = t - k, ud = t / ((int64_t)B * N) * d; /* unit g's u and v at g d */
        ag_real dhu = 0;
        for (int q = 0; q < N; q++) dhu += DZ[(b0 + q) * N + k];
        if (l == 0) DHU[t] = dhu;
        if (!GH) continue;
        ag_real acc = 0;
        for (int q = 0; q < N; q++) acc += P[(b0 + q) * N + k] * G[(b0 + q) * d + l];
        ag_real base = fresh ? acc : GH[e] + acc;
        GH[e] = base + (dhu * U[ud + l] + DHV[t] * V[ud + l]);
    }
}

/* A thread per output of unit g, over its rows: du[l] = sum_t dhu[t] h[t,l]
 * (j = l), dv[l] = sum_t dhv[t] h[t,l] (j = d + l), dbias = sum_t dhv[t]
 * (j = 2d); NULL: skipped. */
__global__ void additive_params_kernel(int units, int64_t rows, int d, const ag_real *H, const ag_real *DHU,
                                       const ag_real *DHV, ag_real *GU, bool fresh_u, ag_real *GV, bool fresh_v,
                                       ag_real *GB, bool fresh_b) {
    AG_CUDA_FOR(i, units * (2 * (int64_t)d + 1)) {
        int64_t g = i / (2 * (int64_t)d + 1), j = i % (2 * (int64_t)d + 1);
        const ag_real *H_g = H + g * rows * d, *dhu = DHU + g * rows, *dhv = DHV + g * rows;
        ag_real sum = 0;
        if (j == 2 * d) {
            if (!GB) continue;
            for (int64_t t = 0; t < rows; t++) sum += dhv[t];
            GB[g] = fresh_b ? sum : GB[g] + sum;
            continue;
        }
        bool is_u = j < d;
        ag_real *out = is_u ? GU : GV;
        const ag_real *w = is_u ? dhu : dhv;
        int l = (int)(is_u ? j : j - d);
        if (!out) continue;
        out += g * d;
        for (int64_t t = 0; t < rows; t++) sum += w[t] * H_g[t * d + l];
        out[l] = (is_u ? fresh_u : fresh_v) ? sum : out[l] + sum;
    }
}

static void forward(const ag__kadd *p, const ag_real *h, const ag_real *u, const ag_real *v, const ag_real *bias,
                    const ag_real *mask, ag_real *out) {
    int64_t rows = (int64_t)p->G * p->B * p->N;
    if (rows > 0)
        ag__launch(additive_forward_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), p->mask, p->G, p->B, p->N, p->d,
                   p->mask_group, p->elu, p->c, h, u, v, bias, mask, p->probs, p->huv, out);
}

/* work: the G units' dz [G B N, N], then their dhu [G B N], then dhv. */
static void backward(const ag__kadd *p, const ag_real *h, const ag_real *u, const ag_real *v, const ag_real *bias,
                     const ag_real *g, ag_real *work, ag_real *gh, bool fresh_h, ag_real *gu, bool fresh_u, ag_real *gv,
                     bool fresh_v, ag_real *gbias, bool fresh_bias) {
    int64_t unit_rows = (int64_t)p->B * p->N, rows = p->G * unit_rows;
    int d = p->d;
    ag_real *dz = work, *dhu = work + rows * p->N, *dhv = dhu + rows;
    if (rows > 0)
        ag__launch(additive_dz_kernel, AG_CUDA_WARP_ROWS_LAUNCH(rows), p->G, p->B, p->N, d, p->elu, p->c, h, bias,
                   p->probs, p->huv, g, dz, dhv);
    if (rows > 0 && d > 0 && (gh || gu))
        ag__launch(additive_dh_kernel, ag__cuda_blocks(rows * d), AG_CUDA_THREADS, 0, p->G, p->B, p->N, d, u, v,
                   p->probs, g, dz, dhv, dhu, gh, fresh_h);
    if (gu || gv || gbias) /* with no rows: zeros */
        ag__launch(additive_params_kernel, ag__cuda_blocks(p->G * (2 * (int64_t)d + 1)), AG_CUDA_THREADS, 0, p->G,
                   unit_rows, d, h, dhu, dhv, gu, fresh_u, gv, fresh_v, gbias, fresh_bias);
}

extern "C" const ag__additive_kernels ag__additive_cuda = {forward, backward};
