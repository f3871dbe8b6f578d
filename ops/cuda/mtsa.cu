/* mtsa.cu - the CUDA side of ops/mtsa_attn.c: MTSA's multi-dim
 * token2token attention by the same factorisation as the CPU,
 *
 *     H = (ER (v ⊙ ES)) / (ER ES),   ER [N,N] and [ES | v ⊙ ES] [N,2dh] per slice,
 *
 * so no [N,N,dh] tensor exists here either.  The kernels below compute ER,
 * [ES | v ⊙ ES] and the elementwise ends; the three products per slice
 * are cuBLAS's strided-batched GEMMs (ops/cuda/mtsa.c, with the
 * family's table).  Each slice is a full [N,N] / [N,2dh] block, 0 on
 * padded queries and keys, so one batched product serves every length
 * with exact zeros where the CPU's stop at L.
 * One thread per row, column or element: no atomics, no reductions across
 * threads, the same bits every run. */
#include "../../graph/prelude.cuh"
#include "mtsa.cuh"
#include "../mtsa.h" /* AG_KMTSA_Z_MIN */
#include "../vecmath.h"

__device__ static inline ag_real score_of(ag_real r, bool identity) { return identity ? r : ag__vlog_sigmoid(r); }

static unsigned blocks_of(int64_t n) {
    int64_t b = (n + AG_CUDA_THREADS - 1) / AG_CUDA_THREADS;
    return (unsigned)(b < 1 ? 1 : b);
}

/* ER of row (slice i, query q): exp(score - max over allowed k), 0 where
 * the mask or padding forbids; a row with no allowed key is all 0. */
__global__ void mtsa_er_kernel(const ag_real *R, const ag_real *MASK, int mask_slices, int mask_run,
                               const int32_t *len, int per_b, ag_real *ER, int64_t slices, int N, bool identity) {
    int64_t iq = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (iq >= slices * N) return;
    int64_t i = iq / N;
    int q = (int)(iq % N), L = len[i / per_b];
    const ag_real *rq = R + iq * N;
    const ag_real *mq = MASK ? MASK + ((i / mask_run % mask_slices) * N + q) * N : NULL;
    ag_real *e = ER + iq * N;
    int valid = q < L ? L : 0; /* a padded query has no key */
    ag_real mx = -INFINITY;
    for (int k = 0; k < valid; k++) {
        e[k] = score_of(rq[k], identity);
        if ((!mq || mq[k] != 0) && e[k] > mx) mx = e[k];
    }
    for (int k = 0; k < valid; k++) e[k] = !mq || mq[k] != 0 ? ag__vexp_nonpos(e[k] - mx) : 0;
    for (int k = valid; k < N; k++) e[k] = 0;
}

/* Column l of [ES | v ⊙ ES] in slice i: ES = exp(S - max over valid k). */
__global__ void mtsa_ep_kernel(const ag_real *S, const ag_real *V, const int32_t *len, int per_b, ag_real *EP,
                               int64_t slices, int N, int dh) {
    int64_t il = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (il >= slices * dh) return;
    int64_t i = il / dh;
    int l = (int)(il % dh), L = len[i / per_b];
    const ag_real *s = S + i * N * dh + l, *v = V + i * N * dh + l;
    ag_real *ep = EP + i * N * 2 * dh + l;
    ag_real mx = -INFINITY;
    for (int k = 0; k < L; k++) mx = s[(int64_t)k * dh] > mx ? s[(int64_t)k * dh] : mx;
    for (int k = 0; k < N; k++) {
        ag_real es = k < L ? ag__vexp_nonpos(s[(int64_t)k * dh] - mx) : 0;
        ep[(int64_t)k * 2 * dh] = es;
        ep[(int64_t)k * 2 * dh + dh] = k < L ? es * v[(int64_t)k * dh] : 0;
    }
}

/* [dZ | dNum] of each query row: dNum = dH / Z, dZ = -dNum H (dNum = dH,
 * dZ = 0 where Z was set to 1); 0 on padded queries and at the entries
 * computed directly (Z < 0: their gradient is added apart). */
__global__ void mtsa_d_kernel(const ag_real *G, const ag_real *OUT, const ag_real *ZN, const int32_t *len, int per_b,
                              ag_real *D, int64_t slices, int N, int dh) {
    int64_t n = slices * N * dh;
    AG_CUDA_FOR(x, n) {
        int64_t iq = x / dh, i = iq / N;
        int l = (int)(x % dh), q = (int)(iq % N);
        const ag_real *z = ZN + iq * 2 * dh;
        ag_real *d = D + iq * 2 * dh;
        if (q >= len[i / per_b]) {
            d[l] = d[dh + l] = 0;
            continue;
        }
        bool set_to_one = !(z[l] > 0);
        ag_real dnum = set_to_one ? G[x] : G[x] / z[l];
        d[l] = set_to_one ? 0 : -dnum * OUT[x];
        d[dh + l] = z[l] < 0 ? 0 : dnum;
    }
}

/* dR = dER ⊙ ER ⊙ sigma_t'(R) where ER is not 0 (ER is 0 on every masked
 * or padded entry). */
__global__ void mtsa_r_grad_kernel(const ag_real *DER, const ag_real *ER, const ag_real *R, ag_real *GR, int64_t n,
                                   bool identity, bool fresh) {
    AG_CUDA_FOR(x, n) {
        ag_real e = ER[x], add = 0;
        if (e != 0) add = identity ? DER[x] * e : DER[x] * e * ag__vsigmoid(-R[x]);
        GR[x] = fresh ? add : GR[x] + add;
    }
}

/* dS = (dES + d(v ⊙ ES) ⊙ v) ⊙ ES, dv = d(v ⊙ ES) ⊙ ES; 0 on padded keys
 * (either output may be NULL). */
__global__ void mtsa_sv_grad_kernel(const ag_real *DEP, const ag_real *EP, const ag_real *V, const int32_t *len,
                                    int per_b, ag_real *GS, ag_real *GV, int64_t slices, int N, int dh, bool fresh_s,
                                    bool fresh_v) {
    int64_t n = slices * N * dh;
    AG_CUDA_FOR(x, n) {
        int64_t ik = x / dh, i = ik / N;
        int l = (int)(x % dh), k = (int)(ik % N);
        ag_real ds = 0, dv = 0;
        if (k < len[i / per_b]) {
            const ag_real *row = EP + ik * 2 * dh, *drow = DEP + ik * 2 * dh;
            ag_real es = row[l];
            ds = (drow[l] + drow[dh + l] * V[x]) * es;
            dv = drow[dh + l] * es;
        }
        if (GS) GS[x] = fresh_s ? ds : GS[x] + ds;
        if (GV) GV[x] = fresh_v ? dv : GV[x] + dv;
    }
}

/* ---- the entries computed directly (ops/mtsa.h), in the CPU's order of
 * operations: the same bits ---- */

/* Row q of slice i's mask, or NULL. */
__device__ static inline const ag_real *mask_row(const ag__kmtsa_direct &p, int64_t i, int q) {
    return p.mask ? p.mask + ((i / p.mask_run % p.mask_slices) * p.N + q) * (int64_t)p.N : NULL;
}

/* a_k = sigma_t(R[q,k]) + S[k,l] of entry (slice i, q, l). */
__device__ static inline ag_real direct_score(const ag__kmtsa_direct &p, int64_t i, int q, int k, int l) {
    return score_of(p.r[(i * p.N + q) * p.N + k], p.identity) + p.s[(i * p.N + k) * p.dh + l];
}

/* One thread per entry: H = Num / Z, or Num (= 0) where Z is 0, and 0 on
 * padded queries; where Z underflowed on a row with an allowed key, H over
 * the entry's own max, marked [Z | Num] = [-sum, max] (the CPU's
 * mtsa_forward_part and direct_forward, in one pass). */
__global__ void mtsa_out_kernel(ag__kmtsa_direct p, ag_real *ZN, ag_real *OUT) {
    int64_t n = p.slices * p.N * p.dh;
    AG_CUDA_FOR(x, n) {
        int64_t iq = x / p.dh, i = iq / p.N;
        int l = (int)(x % p.dh), q = (int)(iq % p.N), L = p.len[i / p.per_b];
        ag_real *z = ZN + iq * 2 * p.dh;
        if (q >= L) {
            OUT[x] = 0;
            continue;
        }
        OUT[x] = z[l] > 0 ? z[p.dh + l] / z[l] : z[p.dh + l];
        if (z[l] >= AG_KMTSA_Z_MIN) continue;
        const ag_real *mq = mask_row(p, i, q);
        ag_real mx = -INFINITY, sum = 0, num = 0;
        for (int k = 0; k < L; k++) { /* a masked key's score is never needed (a row of none: no work) */
            if (mq && mq[k] == 0) continue;
            ag_real a = direct_score(p, i, q, k, l);
            mx = a > mx ? a : mx;
        }
        if (mx == -INFINITY) continue; /* no allowed key: Z is 0, H 0 */
        for (int k = 0; k < L; k++) {
            if (mq && mq[k] == 0) continue;
            ag_real e = ag__vexp_nonpos(direct_score(p, i, q, k, l) - mx);
            sum += e;
            num += e * p.v[(i * p.N + k) * p.dh + l];
        }
        OUT[x] = num / sum;
        z[l] = -sum;
        z[p.dh + l] = mx;
    }
}

/* Key k's share of marked entry (slice i, q, l), whose [Z | Num] holds
 * [-sum, max]: *pk = e^(a_k - max) / sum, and da_k = dH p_k (v[k,l] - H). */
__device__ static inline ag_real direct_term(const ag__kmtsa_direct &p, int64_t i, int q, int k, int l, ag_real mx,
                                             ag_real sum, ag_real g, ag_real h, ag_real *pk) {
    *pk = ag__vexp_nonpos(direct_score(p, i, q, k, l) - mx) / sum;
    return g * *pk * (p.v[(i * p.N + k) * p.dh + l] - h);
}

/* Query row iq (its thread alone writes dR's row): with p_k = e^(a_k -
 * max) / sum, dR[q,k] += dH p_k (v[k,l] - H) sigma_t'(R[q,k]) over the
 * row's marked entries l. */
__device__ static void direct_r_grad(const ag__kmtsa_direct &p, const ag_real *ZN, const ag_real *G, const ag_real *OUT,
                                     ag_real *GR, int64_t iq) {
    int64_t i = iq / p.N;
    int q = (int)(iq % p.N), L = p.len[i / p.per_b];
    if (q >= L) return;
    const ag_real *z = ZN + iq * 2 * p.dh, *rq = p.r + iq * p.N, *mq = mask_row(p, i, q);
    for (int l = 0; l < p.dh; l++) {
        if (!(z[l] < 0)) continue;
        ag_real sum = -z[l], mx = z[p.dh + l], g = G[iq * p.dh + l], h = OUT[iq * p.dh + l];
        for (int k = 0; k < L; k++) {
            if (mq && mq[k] == 0) continue;
            ag_real pk, da = direct_term(p, i, q, k, l, mx, sum, g, h, &pk);
            GR[iq * p.N + k] += p.identity ? da : da * ag__vsigmoid(-rq[k]);
        }
    }
}

/* Feature column il of a slice (its thread alone writes that column of dS
 * and dv): dS[k,l] += dH p_k (v[k,l] - H), dv[k,l] += dH p_k over the
 * column's marked entries q. */
__device__ static void direct_sv_grad(const ag__kmtsa_direct &p, const ag_real *ZN, const ag_real *G, const ag_real *OUT,
                                      ag_real *GS, ag_real *GV, int64_t il) {
    int64_t i = il / p.dh;
    int l = (int)(il % p.dh), L = p.len[i / p.per_b];
    for (int q = 0; q < L; q++) {
        int64_t iq = i * p.N + q;
        const ag_real *z = ZN + iq * 2 * p.dh, *mq = mask_row(p, i, q);
        if (!(z[l] < 0)) continue;
        ag_real sum = -z[l], mx = z[p.dh + l], g = G[iq * p.dh + l], h = OUT[iq * p.dh + l];
        for (int k = 0; k < L; k++) {
            if (mq && mq[k] == 0) continue;
            int64_t kl = (i * p.N + k) * p.dh + l;
            ag_real pk, da = direct_term(p, i, q, k, l, mx, sum, g, h, &pk);
            if (GS) GS[kl] += da;
            if (GV) GV[kl] += g * pk;
        }
    }
}

/* The direct entries' gradients in one launch of two kinds of thread: the
 * first slices * N one per query row (dR), the next slices * dh one per
 * feature column (dS, dv).  Each output has one writer: no atomics, the
 * CPU's order of the sums. */
__global__ void mtsa_direct_grad_kernel(ag__kmtsa_direct p, const ag_real *ZN, const ag_real *G, const ag_real *OUT,
                                        ag_real *GR, ag_real *GS, ag_real *GV) {
    int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, rows = p.slices * p.N;
    if (t < rows) {
        if (GR) direct_r_grad(p, ZN, G, OUT, GR, t);
    } else if (t - rows < p.slices * p.dh && (GS || GV)) {
        direct_sv_grad(p, ZN, G, OUT, GS, GV, t - rows);
    }
}

extern "C" void ag__mtsa_er_cuda(const ag_real *r, const ag_real *mask, int mask_slices, int mask_run,
                                 const int32_t *len, int per_b, ag_real *er, int64_t slices, int N, bool identity) {
    if (slices > 0 && N > 0)
        ag__launch(mtsa_er_kernel, blocks_of(slices * N), AG_CUDA_THREADS, 0, r, mask, mask_slices, mask_run, len,
                   per_b, er, slices, N, identity);
}

extern "C" void ag__mtsa_ep_cuda(const ag_real *s, const ag_real *v, const int32_t *len, int per_b, ag_real *ep,
                                 int64_t slices, int N, int dh) {
    if (slices > 0 && N > 0 && dh > 0)
        ag__launch(mtsa_ep_kernel, blocks_of(slices * dh), AG_CUDA_THREADS, 0, s, v, len, per_b, ep, slices, N, dh);
}

extern "C" void ag__mtsa_d_cuda(const ag_real *g, const ag_real *out, const ag_real *zn, const int32_t *len, int per_b,
                                ag_real *d, int64_t slices, int N, int dh) {
    int64_t n = slices * N * dh;
    if (n > 0)
        ag__launch(mtsa_d_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, g, out, zn, len, per_b, d, slices, N, dh);
}

extern "C" void ag__mtsa_r_grad_cuda(const ag_real *der, const ag_real *er, const ag_real *r, ag_real *gr, int64_t n,
                                     bool identity, bool fresh) {
    if (n > 0)
        ag__launch(mtsa_r_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, der, er, r, gr, n, identity, fresh);
}

extern "C" void ag__mtsa_sv_grad_cuda(const ag_real *dep, const ag_real *ep, const ag_real *v, const int32_t *len,
                                      int per_b, ag_real *gs, ag_real *gv, int64_t slices, int N, int dh, bool fresh_s,
                                      bool fresh_v) {
    int64_t n = slices * N * dh;
    if (n > 0)
        ag__launch(mtsa_sv_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, dep, ep, v, len, per_b, gs, gv, slices,
                   N, dh, fresh_s, fresh_v);
}

extern "C" void ag__mtsa_out_cuda(const ag__kmtsa_direct *p, ag_real *zn, ag_real *out) {
    int64_t n = p->slices * p->N * p->dh;
    if (n > 0) ag__launch(mtsa_out_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, *p, zn, out);
}

extern "C" void ag__mtsa_direct_grad_cuda(const ag__kmtsa_direct *p, const ag_real *zn, const ag_real *g,
                                          const ag_real *out, ag_real *gr, ag_real *gs, ag_real *gv) {
    if (p->slices <= 0 || p->N <= 0 || p->dh <= 0) return;
    if (gr || gs || gv)
        ag__launch(mtsa_direct_grad_kernel, blocks_of(p->slices * (p->N + p->dh)), AG_CUDA_THREADS, 0, *p, zn, g, out,
                   gr, gs, gv);
}
