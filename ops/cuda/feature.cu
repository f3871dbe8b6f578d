/* feature.cu - the CUDA side of ops/feature.c: feature-wise additive
 * attention (DiSAN's token2token), the same recomputation as the CPU: no
 * [B,Nq,Nk,d] tensor, only lse [B,Nq,d] kept for backward.
 *
 * One thread per output element, no atomics: forward and dq a thread per
 * (query row, feature), looping over the keys; dk and dv a thread per (key
 * row, feature), looping over the queries (each recomputes the score and
 * its weight from q, k and lse); the weights for heatmaps a thread per
 * element.  Every sum runs in the CPU's order. */
#include "../../graph/prelude.cuh"
#include "../feature.h"
#include "../vecmath.h"

#ifdef AG_CUDA_EMULATOR
/* The emulator checks a launch's pointer arguments; the plan carries len. */
template <> inline void ag__emu_check_argument<ag__kfeat>(const void *kernel, int index, const ag__kfeat &p) {
    ag__emu_check_pointer_argument(kernel, index, p.len);
}
#endif

/* The mask row (offset) of score row r = b Nq + i (ops/softmax.h). */
__device__ static inline int64_t mask_row(const ag__kmask &m, int64_t r) {
    int64_t i2 = r % m.rows3[2], i01 = r / m.rows3[2];
    return i01 / m.rows3[1] * m.stride3[0] + i01 % m.rows3[1] * m.stride3[1] + i2 * m.stride3[2];
}

__device__ static inline int valid_len(const ag__kfeat &p, int b, int n) { return p.len ? p.len[b] : n; }

__device__ static inline ag_real score(ag_real q, ag_real k, ag_real m, ag_real c, ag_real *t) {
    *t = ag__vtanh((q + k) * (1 / c));
    return c * *t + m;
}

__global__ void feature_forward_kernel(ag__kfeat p, const ag_real *Q, const ag_real *K, const ag_real *V,
                                       const ag_real *M, ag_real c, ag_real *OUT, ag_real *LSE) {
    int d = p.d, Nq = p.Nq, Nk = p.Nk;
    AG_CUDA_FOR(e, (int64_t)p.B * Nq * d) {
        int64_t r = e / d;
        int l = (int)(e % d), b = (int)(r / Nq), i = (int)(r % Nq), L = valid_len(p, b, Nk);
        const ag_real *m = M ? M + mask_row(p.mask, r) : NULL, *k = K + (int64_t)b * Nk * d + l;
        const ag_real *v = V + (int64_t)b * Nk * d + l;
        ag_real q = Q[e], mx = -INFINITY, t;
        if (!p.len || i < L)
            for (int j = 0; j < L; j++) {
                ag_real mj = m ? m[j] : 0;
                if (mj == -INFINITY) continue;
                ag_real s = score(q, k[(int64_t)j * d], mj, c, &t);
                mx = s > mx ? s : mx;
            }
        if (mx == -INFINITY) { /* a padded query, or no key allowed */
            OUT[e] = 0;
            LSE[e] = 0;
            continue;
        }
        ag_real sum = 0, acc = 0;
        for (int j = 0; j < L; j++) {
            ag_real mj = m ? m[j] : 0;
            if (mj == -INFINITY) continue;
            ag_real w = ag__vexp_nonpos(score(q, k[(int64_t)j * d], mj, c, &t) - mx);
            sum += w;
            acc += w * v[(int64_t)j * d];
        }
        OUT[e] = acc / sum;
        LSE[e] = mx + log(sum);
    }
}

__global__ void feature_weights_kernel(ag__kfeat p, const ag_real *Q, const ag_real *K, const ag_real *M, ag_real c,
                                       const ag_real *LSE, ag_real *W) {
    int d = p.d, Nq = p.Nq, Nk = p.Nk;
    AG_CUDA_FOR(e, (int64_t)p.B * Nq * Nk * d) {
        int64_t rj = e / d, r = rj / Nk;
        int l = (int)(e % d), j = (int)(rj % Nk), b = (int)(r / Nq), i = (int)(r % Nq), L = valid_len(p, b, Nk);
        ag_real mj = M ? M[mask_row(p.mask, r) + j] : 0, t;
        bool allowed = j < L && (!p.len || i < L) && mj != -INFINITY;
        W[e] = allowed ? ag__vexp_nonpos(score(Q[r * d + l], K[((int64_t)b * Nk + j) * d + l], mj, c, &t) - LSE[r * d + l])
                       : 0;
    }
}

__global__ void feature_dq_kernel(ag__kfeat p, const ag_real *Q, const ag_real *K, const ag_real *V, const ag_real *M,
                                  ag_real c, const ag_real *OUT, const ag_real *LSE, const ag_real *G, ag_real *GQ,
                                  bool fresh) {
    int d = p.d, Nq = p.Nq, Nk = p.Nk;
    AG_CUDA_FOR(e, (int64_t)p.B * Nq * d) {
        int64_t r = e / d;
        int l = (int)(e % d), b = (int)(r / Nq), i = (int)(r % Nq), L = valid_len(p, b, Nk);
        const ag_real *m = M ? M + mask_row(p.mask, r) : NULL, *k = K + (int64_t)b * Nk * d + l;
        const ag_real *v = V + (int64_t)b * Nk * d + l;
        ag_real q = Q[e], out = OUT[e], lse = LSE[e], g = G[e], dq = 0, t;
        if (!p.len || i < L)
            for (int j = 0; j < L; j++) {
                ag_real mj = m ? m[j] : 0;
                if (mj == -INFINITY) continue;
                ag_real pg = ag__vexp_nonpos(score(q, k[(int64_t)j * d], mj, c, &t) - lse) * g;
                dq += pg * (v[(int64_t)j * d] - out) * (1 - t * t);
            }
        GQ[e] = fresh ? dq : GQ[e] + dq;
    }
}

/* A thread per (example b, key j, feature l): its gradients sum over the
 * queries i in increasing order, as the CPU's loop over rows does. */
__global__ void feature_dkv_kernel(ag__kfeat p, const ag_real *Q, const ag_real *K, const ag_real *V, const ag_real *M,
                                   ag_real c, const ag_real *OUT, const ag_real *LSE, const ag_real *G, ag_real *GK,
                                   bool fresh_k, ag_real *GV, bool fresh_v) {
    int d = p.d, Nq = p.Nq, Nk = p.Nk;
    AG_CUDA_FOR(e, (int64_t)p.B * Nk * d) {
        int64_t bj = e / d;
        int l = (int)(e % d), b = (int)(bj / Nk), j = (int)(bj % Nk), L = valid_len(p, b, Nk);
        int rows = p.len ? (L < Nq ? L : Nq) : Nq;
        ag_real k = K[e], v = V[e], dk = 0, dv = 0, t;
        if (j < L)
            for (int i = 0; i < rows; i++) {
                int64_t r = (int64_t)b * Nq + i, at = r * d + l;
                ag_real mj = M ? M[mask_row(p.mask, r) + j] : 0;
                if (mj == -INFINITY) continue;
                ag_real pg = ag__vexp_nonpos(score(Q[at], k, mj, c, &t) - LSE[at]) * G[at];
                dv += pg;
                dk += pg * (v - OUT[at]) * (1 - t * t);
            }
        if (GK) GK[e] = fresh_k ? dk : GK[e] + dk;
        if (GV) GV[e] = fresh_v ? dv : GV[e] + dv;
    }
}

static void forward(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *v, const ag_real *mask,
                    ag_real c, ag_real *out, ag_real *lse) {
    int64_t n = (int64_t)p->B * p->Nq * p->d;
    if (n > 0) ag__launch(feature_forward_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, *p, q, k, v, mask, c, out, lse);
}

static void weights(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *mask, ag_real c,
                    const ag_real *lse, ag_real *w) {
    int64_t n = (int64_t)p->B * p->Nq * p->Nk * p->d;
    if (n > 0) ag__launch(feature_weights_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, *p, q, k, mask, c, lse, w);
}

static void backward(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *v, const ag_real *mask,
                     ag_real c, const ag_real *out, const ag_real *lse, const ag_real *g, ag_real *gq, bool fresh_q,
                     ag_real *gk, bool fresh_k, ag_real *gv, bool fresh_v) {
    int64_t nq = (int64_t)p->B * p->Nq * p->d, nk = (int64_t)p->B * p->Nk * p->d;
    if (gq && nq > 0)
        ag__launch(feature_dq_kernel, ag__cuda_blocks(nq), AG_CUDA_THREADS, 0, *p, q, k, v, mask, c, out, lse, g, gq,
                   fresh_q);
    if ((gk || gv) && nk > 0)
        ag__launch(feature_dkv_kernel, ag__cuda_blocks(nk), AG_CUDA_THREADS, 0, *p, q, k, v, mask, c, out, lse, g, gk,
                   fresh_k, gv, fresh_v);
}

extern "C" const ag__feature_kernels ag__feature_cuda = {forward, weights, backward};
