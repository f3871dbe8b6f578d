/* mtsa_attn.c - MTSA's multi-dim token2token attention (MODELS.md §5 steps
 * 2-4) without the [N,N,dh] tensor.  The score of query q, key k, feature l
 * is sigma_t(R[q,k]) + S[k,l]: a token2token part plus a source2token part,
 * so its softmax over k factorises,
 *
 *     H[q,l] = sum_k softmax_k(sigma_t(R[q,k]) + S[k,l] + log M[q,k]) v[k,l]
 *            = (ER (v ⊙ ES))[q,l] / (ER ES)[q,l],
 *     ER = M ⊙ exp(sigma_t(R) - rowmax),   ES = valid(k) ⊙ exp(S - colmax),
 *
 * and the whole op is one GEMM forward (ER times [ES | v ⊙ ES]) and two
 * backward.  sigma_t is log-sigmoid (the paper's ER = M ⊙ sigmoid(R)) or,
 * as a FLAG, the identity (ER = M ⊙ exp(R)).  The row and column maxima
 * cancel between numerator and denominator, so subtracting them changes
 * nothing but overflow and underflow; their derivative is exactly 0.
 * Where the denominator is 0 (a fully masked or padded query row) it is set
 * to 1, making H = 0 there with no gradient. */
#include "vecmath.h"
#include "../graph/device.h"
#include "cuda/kernels.h"

typedef struct {
    int32_t *len;       /* [B] (on the GPU, it and er, ep, zn are device memory: see mtsa_cuda) */
    int slices, per_b;  /* slices = product of the leading dims; per_b of them per example */
    ag_mtsa_score score;
    ag_real *er; /* slice i: [L,L] at i*N*N */
    ag_real *ep; /* slice i: [L,2dh] = [ES | v ⊙ ES] at i*N*2dh */
    ag_real *zn; /* slice i: [L,2dh] = [Z | Num] = ER ep */
} mtsa_saved;

/* The exps and log-sigmoids run on vecmath's branch-free f32 kernels (a few
 * ulp; libm in the f64 build), the maxima as selects: SIMD loops. */
static inline ag_real score_of(ag_real r, ag_mtsa_score s) { return s == AG_MTSA_IDENTITY ? r : ag__vlog_sigmoid(r); }

/* ER of one slice: [L,L], row q = exp(score - max over allowed k), 0 where masked. */
AG_SIMD_CLONES
static void slice_er(ag_real *er, const ag_real *r, const ag_real *mask, int N, int L, ag_mtsa_score score) {
    for (int q = 0; q < L; q++) {
        const ag_real *rq = r + (int64_t)q * N, *mq = mask ? mask + (int64_t)q * N : NULL;
        ag_real *e = er + (int64_t)q * L, mx = -INFINITY;
        for (int k = 0; k < L; k++) e[k] = score_of(rq[k], score);
        if (mq) {
            for (int k = 0; k < L; k++) mx = mq[k] != 0 && e[k] > mx ? e[k] : mx;
            for (int k = 0; k < L; k++) e[k] = mq[k] != 0 ? ag__vexp_nonpos(e[k] - mx) : 0;
        } else {
            for (int k = 0; k < L; k++) mx = e[k] > mx ? e[k] : mx;
            for (int k = 0; k < L; k++) e[k] = ag__vexp_nonpos(e[k] - mx);
        }
    }
}

/* [ES | v ⊙ ES] of one slice: [L,2dh], ES over the valid keys k < L. */
AG_SIMD_CLONES
static void slice_ep(ag_real *ep, const ag_real *s, const ag_real *v, int L, int dh, ag_real *colmax) {
    for (int l = 0; l < dh; l++) colmax[l] = -INFINITY;
    for (int k = 0; k < L; k++)
        for (int l = 0; l < dh; l++) {
            ag_real x = s[(int64_t)k * dh + l];
            colmax[l] = x > colmax[l] ? x : colmax[l];
        }
    for (int k = 0; k < L; k++) {
        const ag_real *sk = s + (int64_t)k * dh, *vk = v + (int64_t)k * dh;
        ag_real *row = ep + (int64_t)k * 2 * dh;
        for (int l = 0; l < dh; l++) {
            row[l] = ag__vexp_nonpos(sk[l] - colmax[l]);
            row[dh + l] = row[l] * vk[l];
        }
    }
}

/* With Z = ER ES, Num = ER (v ⊙ ES), H = Num / Z:
 *   dNum = dH / Z, dZ = -dH H / Z   (dNum = dH, dZ = 0 where Z was set to 1)
 *   [dER] = [dZ | dNum] [ES | v ⊙ ES]^T,   [dES | d(v ⊙ ES)] = ER^T [dZ | dNum]
 *   dS = (dES + d(v ⊙ ES) ⊙ v) ⊙ ES,   dv = d(v ⊙ ES) ⊙ ES
 *   dR = dER ⊙ ER ⊙ sigma_t'(R),   sigma_t' = sigmoid(-R) or 1. */
/* Slices run on the pool, in at most MAX_PARTS groups (fixed by the
 * shape), each group with its own scratch; a slice is computed whole by
 * one thread with single-threaded GEMMs. */
enum { MAX_PARTS = 32 };

typedef struct {
    const mtsa_saved *sv;
    const ag_tensor *r, *s, *v;
    const ag_real *mask;
    int mask_slices, N, dh;
    const ag_real *G, *OUT;
    ag_real *out, *gr, *gs, *gv;
    ag_real *scratch;        /* per part: forward colmax [dh]; backward d, dep [N,2dh] and der [N,N] */
    int64_t scratch_per_part, per_part;
} mtsa_job;

static void mtsa_job_parts(mtsa_job *j, int64_t scratch_per_part) {
    int64_t parts = j->sv->slices < MAX_PARTS ? j->sv->slices : MAX_PARTS;
    j->per_part = parts ? (j->sv->slices + parts - 1) / parts : 1;
    j->scratch_per_part = scratch_per_part;
    j->scratch = ag_arena_alloc((size_t)(parts ? parts : 1) * scratch_per_part * sizeof(ag_real) + 1);
}

static int64_t mtsa_parts(const mtsa_job *j) { return (j->sv->slices + j->per_part - 1) / j->per_part; }

/* dR = dER ⊙ ER ⊙ sigma_t'(R) over one slice; where ER is 0 (masked, or a
 * weight that underflowed) nothing is added. */
AG_SIMD_CLONES
static void mtsa_score_grad(ag_real *g, const ag_real *der, const ag_real *er, const ag_real *rr, int N, int L,
                            ag_mtsa_score score) {
    for (int q = 0; q < L; q++) {
        const ag_real *e = er + (int64_t)q * L, *d = der + (int64_t)q * L, *rq = rr + (int64_t)q * N;
        ag_real *gq = g + (int64_t)q * N;
        if (score == AG_MTSA_IDENTITY)
            for (int k = 0; k < L; k++) gq[k] = e[k] != 0 ? gq[k] + d[k] * e[k] : gq[k];
        else
            for (int k = 0; k < L; k++) gq[k] = e[k] != 0 ? gq[k] + d[k] * e[k] * ag__vsigmoid(-rq[k]) : gq[k];
    }
}

static void mtsa_backward_part(void *ctx, int64_t part) {
    const mtsa_job *j = ctx;
    const mtsa_saved *sv = j->sv;
    int N = j->N, dh = j->dh;
    ag_real *d = j->scratch + part * j->scratch_per_part;
    ag_real *dep = d + (int64_t)N * 2 * dh, *der = dep + (int64_t)N * 2 * dh;
    int64_t end = (part + 1) * j->per_part < sv->slices ? (part + 1) * j->per_part : sv->slices;
    for (int64_t i = part * j->per_part; i < end; i++) {
        int L = sv->len[i / sv->per_b];
        if (L == 0) continue;
        int64_t so = i * N * dh, ro = i * N * N, eo = i * N * 2 * dh;
        const ag_real *er = sv->er + ro, *ep = sv->ep + eo, *zn = sv->zn + eo;
        for (int q = 0; q < L; q++) {
            const ag_real *g = j->G + so + (int64_t)q * dh, *h = j->OUT + so + (int64_t)q * dh;
            const ag_real *z = zn + (int64_t)q * 2 * dh;
            ag_real *dq = d + (int64_t)q * 2 * dh;
            for (int l = 0; l < dh; l++) {
                bool set_to_one = !(z[l] > 0);
                ag_real dnum = set_to_one ? g[l] : g[l] / z[l];
                dq[l] = set_to_one ? 0 : -dnum * h[l];
                dq[dh + l] = dnum;
            }
        }
        if (j->gr) {
            ag__gemm_serial(false, true, L, L, 2 * dh, 1, d, ep, 0, der);
            const ag_real *rr = j->r->data + ro;
            ag_real *g = j->gr + ro;
            mtsa_score_grad(g, der, er, rr, N, L, sv->score);
        }
        if (j->gs || j->gv) {
            ag__gemm_serial(true, false, L, 2 * dh, L, 1, er, d, 0, dep);
            for (int k = 0; k < L; k++) {
                const ag_real *row = ep + (int64_t)k * 2 * dh, *drow = dep + (int64_t)k * 2 * dh;
                const ag_real *vk = j->v->data + so + (int64_t)k * dh;
                for (int l = 0; l < dh; l++) {
                    ag_real es = row[l];
                    if (j->gs) j->gs[so + (int64_t)k * dh + l] += (drow[l] + drow[dh + l] * vk[l]) * es;
                    if (j->gv) j->gv[so + (int64_t)k * dh + l] += drow[dh + l] * es;
                }
            }
        }
    }
}

/* ---- the GPU (ops/cuda/mtsa.cu) ----
 * The same factorisation and the same saved arrays, but each slice's are
 * full blocks, ER [N,N] and [ES | v ⊙ ES], [Z | Num] [N,2dh], 0 on padded
 * queries and keys: one strided-batched GEMM then serves every length,
 * adding exact zeros where the CPU's products over L stop. */

static void mtsa_backward_cuda(ag_node *n) {
    const mtsa_saved *sv = n->saved;
    ag_tensor *r = n->in[0], *s = n->in[1], *v = n->in[2];
    int N = r->shape[r->ndim - 1], dh = s->shape[s->ndim - 1], S = sv->slices;
    bool identity = sv->score == AG_MTSA_IDENTITY;
    int64_t nn = (int64_t)N * N, n2 = (int64_t)N * 2 * dh;
    bool want_r = ag__wants(n, 0), want_s = ag__wants(n, 1), want_v = ag__wants(n, 2);
    bool fresh_r = false, fresh_s = false, fresh_v = false;
    ag_real *gr = want_r ? ag__grad_write(r, &fresh_r) : NULL;
    ag_real *gs = want_s ? ag__grad_write(s, &fresh_s) : NULL;
    ag_real *gv = want_v ? ag__grad_write(v, &fresh_v) : NULL;
    if (S == 0 || N == 0) return; /* nothing to write */
    ag_real *d = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
    ag__mtsa_d_cuda(n->out->grad, n->out->data, sv->zn, sv->len, sv->per_b, d, S, N, dh);
    if (gr) { /* dER = [dZ | dNum] [ES | v ⊙ ES]^T */
        ag_real *der = ag__cuda_arena_alloc((size_t)(S * nn + 1) * sizeof(ag_real));
        if (dh > 0)
            ag__cuda_gemm_batched(false, true, N, N, 2 * dh, d, 2 * dh, n2, sv->ep, 2 * dh, n2, 0, der, N, nn, S);
        else
            ag__cuda_zero(der, (size_t)(S * nn) * sizeof(ag_real));
        ag__mtsa_r_grad_cuda(der, sv->er, r->data, gr, S * nn, identity, fresh_r);
    }
    if ((gs || gv) && dh > 0) { /* [dES | d(v ⊙ ES)] = ER^T [dZ | dNum] */
        ag_real *dep = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
        ag__cuda_gemm_batched(true, false, N, 2 * dh, N, sv->er, N, nn, d, 2 * dh, n2, 0, dep, 2 * dh, n2, S);
        ag__mtsa_sv_grad_cuda(dep, sv->ep, v->data, sv->len, sv->per_b, gs, gv, S, N, dh, fresh_s, fresh_v);
    }
    ag__cuda_check_launch(n->op);
}

static void mtsa_backward(ag_node *n);

static ag_tensor *mtsa_cuda(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *mask, int mask_slices,
                            mtsa_saved sv) {
    int B = r->shape[0], N = r->shape[r->ndim - 1], dh = s->shape[s->ndim - 1], S = sv.slices;
    int64_t nn = (int64_t)N * N, n2 = (int64_t)N * 2 * dh;
    sv.len = ag__to_device_i32(sv.len, B);
    sv.er = ag__cuda_arena_alloc((size_t)(S * nn + 1) * sizeof(ag_real));
    sv.ep = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
    sv.zn = ag__cuda_arena_alloc((size_t)(S * n2 + 1) * sizeof(ag_real));
    ag_tensor *out = ag__empty_on(AG_CUDA, s->ndim, s->shape);
    ag__mtsa_er_cuda(r->data, mask ? mask->data : NULL, mask_slices, sv.len, sv.per_b, sv.er, S, N,
                     sv.score == AG_MTSA_IDENTITY);
    ag__mtsa_ep_cuda(s->data, v->data, sv.len, sv.per_b, sv.ep, S, N, dh);
    if (S > 0 && N > 0 && dh > 0) /* [Z | Num] = ER [ES | v ⊙ ES] */
        ag__cuda_gemm_batched(false, false, N, 2 * dh, N, sv.er, N, nn, sv.ep, 2 * dh, n2, 0, sv.zn, 2 * dh, n2, S);
    ag__mtsa_out_cuda(sv.zn, sv.len, sv.per_b, out->data, S, N, dh);
    ag__cuda_check_launch("ag_mtsa_attention");
    ag_node *n = ag__record("ag_mtsa_attention", mtsa_backward, out, 3, (ag_tensor *[]){r, s, v});
    if (n) {
        mtsa_saved *p = ag_arena_alloc(sizeof *p);
        *p = sv;
        n->saved = p;
    }
    return out;
}

static void mtsa_backward(ag_node *n) {
    if (n->out->device == AG_CUDA) {
        mtsa_backward_cuda(n);
        return;
    }
    const mtsa_saved *sv = n->saved;
    ag_tensor *r = n->in[0], *s = n->in[1], *v = n->in[2];
    int N = r->shape[r->ndim - 1], dh = s->shape[s->ndim - 1];
    mtsa_job j = {.sv = sv, .r = r, .s = s, .v = v, .N = N, .dh = dh, .G = n->out->grad, .OUT = n->out->data,
                  .gr = ag__wants(n, 0) ? ag__grad(r) : NULL, .gs = ag__wants(n, 1) ? ag__grad(s) : NULL,
                  .gv = ag__wants(n, 2) ? ag__grad(v) : NULL};
    mtsa_job_parts(&j, (int64_t)N * 4 * dh + (int64_t)N * N);
    ag__parallel(mtsa_parts(&j), mtsa_backward_part, &j);
}

/* The mask's shape must be a suffix of R's ([N,N], [h,N,N], ...), with
 * values 0 or 1 (an additive -inf mask passed by mistake is caught here;
 * on the GPU the values are not read: that would wait for the device,
 * and the kernels, like the CPU, treat any nonzero as allowed). */
static int check_mask(const ag_tensor *r, const ag_tensor *mask) {
    char sr[64], sm[64];
    ag_device dev = ag__check_same_device("ag_mtsa_attention", r, mask);
    bool ok = mask->ndim >= 2 && mask->ndim <= r->ndim;
    for (int j = 0; ok && j < mask->ndim; j++) ok = mask->shape[j] == r->shape[r->ndim - mask->ndim + j];
    if (!ok)
        ag__fatal("ag_mtsa_attention", "mask %s does not fit R %s (want a suffix of R's shape, e.g. [N,N])",
                  ag_shape_str(mask, sm, sizeof sm), ag_shape_str(r, sr, sizeof sr));
    for (int64_t k = 0; k < mask->size && dev == AG_CPU; k++)
        if (mask->data[k] != 0 && mask->data[k] != 1)
            ag__fatal("ag_mtsa_attention", "mask %s holds %g at %lld: want 0 or 1 (a multiplicative mask)",
                      ag_shape_str(mask, sm, sizeof sm), (double)mask->data[k], (long long)k);
    int64_t n = mask->size / ((int64_t)r->shape[r->ndim - 1] * r->shape[r->ndim - 1]);
    return (int)n;
}

static void check_shapes(const ag_tensor *r, const ag_tensor *s, const ag_tensor *v) {
    char sr[64], ss[64], svv[64];
    ag__check_same_device("ag_mtsa_attention", r, s);
    ag__check_same_device("ag_mtsa_attention", r, v);
    bool ok = (r->ndim == 3 || r->ndim == 4) && r->shape[r->ndim - 1] == r->shape[r->ndim - 2] &&
              s->ndim == r->ndim && ag_same_shape(s, v);
    for (int j = 0; ok && j < r->ndim - 1; j++) ok = s->shape[j] == r->shape[j];
    if (!ok)
        ag__fatal("ag_mtsa_attention", "R %s, S %s, v %s: want R [B,N,N] or [B,h,N,N] and S, v [...,N,dh]",
                  ag_shape_str(r, sr, sizeof sr), ag_shape_str(s, ss, sizeof ss), ag_shape_str(v, svv, sizeof svv));
}

static void mtsa_forward_part(void *ctx, int64_t part) {
    const mtsa_job *j = ctx;
    const mtsa_saved *sv = j->sv;
    int N = j->N, dh = j->dh;
    ag_real *colmax = j->scratch + part * j->scratch_per_part;
    int64_t end = (part + 1) * j->per_part < sv->slices ? (part + 1) * j->per_part : sv->slices;
    for (int64_t i = part * j->per_part; i < end; i++) {
        int L = sv->len[i / sv->per_b];
        int64_t so = i * N * dh, ro = i * N * N, eo = i * N * 2 * dh;
        ag_real *o = j->out + so;
        memset(o + (int64_t)L * dh, 0, (size_t)(N - L) * dh * sizeof *o); /* padded queries */
        if (L == 0) continue;
        const ag_real *m = j->mask ? j->mask + (int64_t)(i % j->mask_slices) * N * N : NULL;
        ag_real *er = sv->er + ro, *ep = sv->ep + eo, *zn = sv->zn + eo;
        slice_er(er, j->r->data + ro, m, N, L, sv->score);
        slice_ep(ep, j->s->data + so, j->v->data + so, L, dh, colmax);
        ag__gemm_serial(false, false, L, 2 * dh, L, 1, er, ep, 0, zn);
        for (int q = 0; q < L; q++) {
            const ag_real *z = zn + (int64_t)q * 2 * dh;
            for (int l = 0; l < dh; l++) o[(int64_t)q * dh + l] = z[l] > 0 ? z[dh + l] / z[l] : z[dh + l];
        }
    }
}

ag_tensor *ag_mtsa_attention(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *mask, const int32_t *len,
                             ag_mtsa_score score) {
    check_shapes(r, s, v);
    if (score != AG_MTSA_LOG_SIGMOID && score != AG_MTSA_IDENTITY)
        ag__fatal("ag_mtsa_attention", "unknown score function %d", (int)score);
    int B = r->shape[0], N = r->shape[r->ndim - 1], dh = s->shape[s->ndim - 1];
    int per_b = r->ndim == 4 ? r->shape[1] : 1;
    mtsa_saved sv = {.slices = B * per_b, .per_b = per_b, .score = score};
    int mask_slices = mask ? check_mask(r, mask) : 1; /* the mask repeats every mask_slices slices */
    sv.len = ag_arena_alloc((size_t)(B ? B : 1) * sizeof *sv.len);
    for (int b = 0; b < B; b++) {
        sv.len[b] = len ? len[b] : N;
        if (sv.len[b] < 0 || sv.len[b] > N)
            ag__fatal("ag_mtsa_attention", "len[%d] = %d is outside [0, %d]", b, (int)sv.len[b], N);
    }
    if (r->device == AG_CUDA) return mtsa_cuda(r, s, v, mask, mask_slices, sv);
    sv.er = ag_arena_alloc((size_t)sv.slices * N * N * sizeof(ag_real) + 1);
    sv.ep = ag_arena_alloc((size_t)sv.slices * N * 2 * dh * sizeof(ag_real) + 1);
    sv.zn = ag_arena_alloc((size_t)sv.slices * N * 2 * dh * sizeof(ag_real) + 1);
    ag_tensor *out = ag__empty(s->ndim, s->shape);
    mtsa_job j = {.sv = &sv, .r = r, .s = s, .v = v, .mask = mask ? mask->data : NULL, .mask_slices = mask_slices,
                  .N = N, .dh = dh, .out = out->data};
    mtsa_job_parts(&j, dh);
    ag__parallel(mtsa_parts(&j), mtsa_forward_part, &j);
    ag_node *n = ag__record("ag_mtsa_attention", mtsa_backward, out, 3, (ag_tensor *[]){r, s, v});
    if (n) {
        mtsa_saved *p = ag_arena_alloc(sizeof *p);
        *p = sv;
        n->saved = p;
    }
    return out;
}
