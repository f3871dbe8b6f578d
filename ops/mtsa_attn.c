/* mtsa_attn.c - MTSA's multi-dim token2token attention (docs/models.md, MTSA,
 * its token2token steps) without the [N,N,dh] tensor.  The score of query q, key k, feature l
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
 * to 1, making H = 0 there with no gradient.  The maxima are taken apart,
 * though, so where an entry's best key is far below both (scores ~1e3, or
 * ~50 in f32) its Z underflows as well: such entries are computed directly
 * (ops/mtsa.h says how they are marked). */
#include "vecmath.h"
#include "dispatch.h"
#include "mtsa.h"
#include "../graph/device.h"

/* ops/mtsa.h: len, er, ep, zn in the device's memory and layout; on the
 * CPU slice i's ER is [L,L] at i*N*N, [ES | v ⊙ ES] and [Z | Num] = ER ep
 * [L,2dh] at i*N*2dh.  slices = product of R's leading dims. */
typedef ag__kmtsa mtsa_saved;

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

/* Slice i's mask (or NULL), as forward read it. */
static const ag_real *slice_mask(const ag_real *mask, int mask_slices, int mask_run, int64_t i, int N) {
    return mask ? mask + (i / mask_run % mask_slices) * N * N : NULL;
}

/* Entry (q, l) in its direct form: over the keys the row allows (mq: the
 * mask's row q, or NULL), a = sigma_t(R[q,k]) + S[k,l] less its max *mx,
 * *z = sum e^a and *num = sum e^a v[k,l].  False where no key is allowed. */
static bool direct_entry(const ag_real *rq, const ag_real *mq, const ag_real *s, const ag_real *v, int L, int dh,
                         int l, ag_mtsa_score score, ag_real *mx, ag_real *z, ag_real *num) {
    ag_real m = -INFINITY, zs = 0, ns = 0;
    for (int k = 0; k < L; k++) {
        if (mq && mq[k] == 0) continue;
        ag_real a = score_of(rq[k], score) + s[(int64_t)k * dh + l];
        m = a > m ? a : m;
    }
    if (m == -INFINITY) return false;
    for (int k = 0; k < L; k++) {
        if (mq && mq[k] == 0) continue;
        ag_real e = ag__vexp_nonpos(score_of(rq[k], score) + s[(int64_t)k * dh + l] - m);
        zs += e;
        ns += e * v[(int64_t)k * dh + l];
    }
    *mx = m, *z = zs, *num = ns;
    return true;
}

/* Slice i's entries whose Z underflowed, computed directly into o and
 * marked in zn ([Z | Num] = [-sum, max]: ops/mtsa.h). */
static void direct_forward(ag_real *o, ag_real *zn, const ag_real *r, const ag_real *mask, const ag_real *s,
                           const ag_real *v, int N, int L, int dh, ag_mtsa_score score) {
    for (int q = 0; q < L; q++) {
        ag_real *z = zn + (int64_t)q * 2 * dh, mx, sum, num;
        const ag_real *mq = mask ? mask + (int64_t)q * N : NULL;
        /* a row the mask allows no key (the first under a forward mask):
         * every Z is 0 and H 0, with nothing to compute directly; said once
         * for the row, not found again for each of its dh entries (L
         * sigma_t each: a third of MTSA's forward went there) */
        bool any_key = !mq;
        for (int k = 0; k < L && !any_key; k++) any_key = mq[k] != 0;
        if (!any_key) continue;
        for (int l = 0; l < dh; l++) {
            if (z[l] >= AG_KMTSA_Z_MIN) continue;
            if (!direct_entry(r + (int64_t)q * N, mq, s, v, L, dh, l, score, &mx, &sum, &num))
                continue; /* no allowed key: Z is 0, H 0 */
            o[(int64_t)q * dh + l] = num / sum;
            z[l] = -sum;
            z[dh + l] = mx;
        }
    }
}

/* The gradients of slice i's direct entries: with p_k = e^(a_k - max) / sum,
 * da_k = dH p_k (v[k,l] - H), to R through sigma_t', to S as it is, and
 * dv[k,l] = dH p_k. */
static void direct_backward(const ag_real *zn, const ag_real *r, const ag_real *mask, const ag_real *s,
                            const ag_real *v, const ag_real *g, const ag_real *out, ag_real *gr, ag_real *gs, ag_real *gv,
                            int N, int L, int dh, ag_mtsa_score score) {
    for (int q = 0; q < L; q++) {
        const ag_real *z = zn + (int64_t)q * 2 * dh, *rq = r + (int64_t)q * N;
        const ag_real *mq = mask ? mask + (int64_t)q * N : NULL;
        for (int l = 0; l < dh; l++) {
            if (!(z[l] < 0)) continue;
            ag_real sum = -z[l], mx = z[dh + l], dh_ = g[(int64_t)q * dh + l], h = out[(int64_t)q * dh + l];
            for (int k = 0; k < L; k++) {
                if (mq && mq[k] == 0) continue;
                int64_t kl = (int64_t)k * dh + l;
                ag_real p = ag__vexp_nonpos(score_of(rq[k], score) + s[kl] - mx) / sum, da = dh_ * p * (v[kl] - h);
                if (gr) gr[(int64_t)q * N + k] += score == AG_MTSA_IDENTITY ? da : da * ag__vsigmoid(-rq[k]);
                if (gs) gs[kl] += da;
                if (gv) gv[kl] += dh_ * p;
            }
        }
    }
}

/* With Z = ER ES, Num = ER (v ⊙ ES), H = Num / Z:
 *   dNum = dH / Z, dZ = -dH H / Z   (dNum = dH, dZ = 0 where Z was set to 1)
 *   [dER] = [dZ | dNum] [ES | v ⊙ ES]^T,   [dES | d(v ⊙ ES)] = ER^T [dZ | dNum]
 *   dS = (dES + d(v ⊙ ES) ⊙ v) ⊙ ES,   dv = d(v ⊙ ES) ⊙ ES
 *   dR = dER ⊙ ER ⊙ sigma_t'(R),   sigma_t' = sigmoid(-R) or 1. */
/* Slices run on the pool, in at most MAX_PARTS groups (fixed by the
 * shape), with a scratch per thread; a slice is computed whole by one
 * thread with single-threaded GEMMs. */
enum { MAX_PARTS = 32 };

typedef struct {
    const mtsa_saved *sv;
    const ag_real *r, *s, *v;
    const ag_real *mask;
    ag_mtsa_score score;
    int mask_slices, mask_run, N, dh; /* slice i's mask: (i / mask_run) % mask_slices */
    const ag_real *G, *OUT;
    ag_real *out, *gr, *gs, *gv;
    ag_real *scratch;        /* per thread: forward colmax [dh]; backward d, dep [N,2dh] and der [N,N] */
    int64_t scratch_per_part, per_part;
} mtsa_job;

/* fn over the slices' parts, each thread with scratch_per_part reals. */
static void mtsa_run(mtsa_job *j, ag__part_fn fn, int64_t scratch_per_part) {
    int64_t parts = j->sv->slices < MAX_PARTS ? j->sv->slices : MAX_PARTS;
    j->per_part = parts ? (j->sv->slices + parts - 1) / parts : 1;
    j->scratch_per_part = scratch_per_part;
    ag__parallel_scratch((j->sv->slices + j->per_part - 1) / j->per_part, fn, j, &j->scratch, scratch_per_part);
}

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
    ag_real *d = j->scratch + ag__worker() * j->scratch_per_part;
    ag_real *dep = d + (int64_t)N * 2 * dh, *der = dep + (int64_t)N * 2 * dh;
    int64_t end = (part + 1) * j->per_part < sv->slices ? (part + 1) * j->per_part : sv->slices;
    for (int64_t i = part * j->per_part; i < end; i++) {
        int L = sv->len[i / sv->per_b];
        if (L == 0) continue;
        int64_t so = i * N * dh, ro = i * N * N, eo = i * N * 2 * dh;
        const ag_real *er = sv->er + ro, *ep = sv->ep + eo, *zn = sv->zn + eo;
        bool direct = false; /* entries computed directly: no part in the products */
        for (int q = 0; q < L; q++) {
            const ag_real *g = j->G + so + (int64_t)q * dh, *h = j->OUT + so + (int64_t)q * dh;
            const ag_real *z = zn + (int64_t)q * 2 * dh;
            ag_real *dq = d + (int64_t)q * 2 * dh;
            for (int l = 0; l < dh; l++) {
                bool set_to_one = !(z[l] > 0), marked = z[l] < 0;
                ag_real dnum = set_to_one ? g[l] : g[l] / z[l];
                dq[l] = set_to_one ? 0 : -dnum * h[l];
                dq[dh + l] = marked ? 0 : dnum;
                direct |= marked;
            }
        }
        if (j->gr) {
            ag__gemm_serial(false, true, L, L, 2 * dh, 1, d, ep, 0, der);
            const ag_real *rr = j->r + ro;
            ag_real *g = j->gr + ro;
            mtsa_score_grad(g, der, er, rr, N, L, j->score);
        }
        if (j->gs || j->gv) {
            ag__gemm_serial(true, false, L, 2 * dh, L, 1, er, d, 0, dep);
            for (int k = 0; k < L; k++) {
                const ag_real *row = ep + (int64_t)k * 2 * dh, *drow = dep + (int64_t)k * 2 * dh;
                const ag_real *vk = j->v + so + (int64_t)k * dh;
                for (int l = 0; l < dh; l++) {
                    ag_real es = row[l];
                    if (j->gs) j->gs[so + (int64_t)k * dh + l] += (drow[l] + drow[dh + l] * vk[l]) * es;
                    if (j->gv) j->gv[so + (int64_t)k * dh + l] += drow[dh + l] * es;
                }
            }
        }
        if (direct)
            direct_backward(zn, j->r + ro, slice_mask(sv->mask, sv->mask_slices, sv->mask_run, i, N), j->s + so,
                            j->v + so, j->G + so, j->OUT + so, j->gr ? j->gr + ro : NULL, j->gs ? j->gs + so : NULL,
                            j->gv ? j->gv + so : NULL, N, L, dh, j->score);
    }
}

static ag_mtsa_score score_of_plan(const mtsa_saved *p) {
    return p->identity ? AG_MTSA_IDENTITY : AG_MTSA_LOG_SIGMOID;
}

/* A fresh gradient is zeroed first: the slices add within their lengths. */
static void zero_if_fresh(ag_real *g, bool fresh, int64_t n) {
    if (g && fresh) memset(g, 0, (size_t)n * sizeof *g);
}

static void mtsa_backward_cpu(const mtsa_saved *sv, const ag_real *r, const ag_real *s, const ag_real *v,
                              const ag_real *g, const ag_real *out, ag_real *gr, bool fresh_r, ag_real *gs, bool fresh_s,
                              ag_real *gv, bool fresh_v) {
    int N = sv->N, dh = sv->dh;
    zero_if_fresh(gr, fresh_r, (int64_t)sv->slices * N * N);
    zero_if_fresh(gs, fresh_s, (int64_t)sv->slices * N * dh);
    zero_if_fresh(gv, fresh_v, (int64_t)sv->slices * N * dh);
    mtsa_job j = {.sv = sv, .r = r, .s = s, .v = v, .score = score_of_plan(sv), .N = N, .dh = dh, .G = g, .OUT = out,
                  .gr = gr, .gs = gs, .gv = gv};
    mtsa_run(&j, mtsa_backward_part, (int64_t)N * 4 * dh + (int64_t)N * N);
}

static void mtsa_backward(ag_node *n) {
    const mtsa_saved *sv = n->saved;
    ag_tensor *r = n->in[0], *s = n->in[1], *v = n->in[2];
    bool fresh_r = false, fresh_s = false, fresh_v = false;
    ag_real *gr = ag__wants(n, 0) ? ag__grad_write(r, &fresh_r) : NULL;
    ag_real *gs = ag__wants(n, 1) ? ag__grad_write(s, &fresh_s) : NULL;
    ag_real *gv = ag__wants(n, 2) ? ag__grad_write(v, &fresh_v) : NULL;
    ag__mtsa_on(n->op, n->out->device)
        ->backward(sv, r->data, s->data, v->data, n->out->grad, n->out->data, gr, fresh_r, gs, fresh_s, gv, fresh_v);
}

/* A mask's values must be 0 or 1 (an additive -inf mask passed by mistake
 * is caught here; on the GPU the values are not read: that would wait for
 * the device, and the kernels, like the CPU, treat any nonzero as allowed). */
static void check_mask_values(const char *op, const ag_tensor *mask) {
    char sm[64];
    if (mask->requires_grad) /* it would get none, silently */
        ag__fatal(op, "the mask %s requires grad, but masks are constants", ag_shape_str(mask, sm, sizeof sm));
    for (int64_t k = 0; k < mask->size && mask->device == AG_CPU; k++)
        if (mask->data[k] != 0 && mask->data[k] != 1)
            ag__fatal(op, "mask %s holds %g at %lld: want 0 or 1 (a multiplicative mask)",
                      ag_shape_str(mask, sm, sizeof sm), (double)mask->data[k], (long long)k);
}

/* The mask's shape must be a suffix of R's ([N,N], [h,N,N], ...). */
static int check_mask(const ag_tensor *r, const ag_tensor *mask) {
    char sr[64], sm[64];
    ag__check_same_device("ag_mtsa_attention", r, mask);
    bool ok = mask->ndim >= 2 && mask->ndim <= r->ndim;
    for (int j = 0; ok && j < mask->ndim; j++) ok = mask->shape[j] == r->shape[r->ndim - mask->ndim + j];
    if (!ok)
        ag__fatal("ag_mtsa_attention", "mask %s does not fit R %s (want a suffix of R's shape, e.g. [N,N])",
                  ag_shape_str(mask, sm, sizeof sm), ag_shape_str(r, sr, sizeof sr));
    check_mask_values("ag_mtsa_attention", mask);
    int64_t nn = (int64_t)r->shape[r->ndim - 1] * r->shape[r->ndim - 1];
    return nn ? (int)(mask->size / nn) : 1; /* N = 0: no slice reads a mask */
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
    ag_real *colmax = j->scratch + ag__worker() * j->scratch_per_part;
    int64_t end = (part + 1) * j->per_part < sv->slices ? (part + 1) * j->per_part : sv->slices;
    for (int64_t i = part * j->per_part; i < end; i++) {
        int L = sv->len[i / sv->per_b];
        int64_t so = i * N * dh, ro = i * N * N, eo = i * N * 2 * dh;
        ag_real *o = j->out + so;
        memset(o + (int64_t)L * dh, 0, (size_t)(N - L) * dh * sizeof *o); /* padded queries */
        if (L == 0) continue;
        const ag_real *m = slice_mask(j->mask, j->mask_slices, j->mask_run, i, N);
        ag_real *er = sv->er + ro, *ep = sv->ep + eo, *zn = sv->zn + eo;
        slice_er(er, j->r + ro, m, N, L, j->score);
        slice_ep(ep, j->s + so, j->v + so, L, dh, colmax);
        ag__gemm_serial(false, false, L, 2 * dh, L, 1, er, ep, 0, zn);
        for (int q = 0; q < L; q++) {
            const ag_real *z = zn + (int64_t)q * 2 * dh;
            for (int l = 0; l < dh; l++) o[(int64_t)q * dh + l] = z[l] > 0 ? z[dh + l] / z[l] : z[dh + l];
        }
        direct_forward(o, zn, j->r + ro, m, j->s + so, j->v + so, N, L, dh, j->score);
    }
}

static void mtsa_forward_cpu(const mtsa_saved *sv, const ag_real *r, const ag_real *s, const ag_real *v,
                             const ag_real *mask, int mask_slices, int mask_run, ag_real *out) {
    mtsa_job j = {.sv = sv, .r = r, .s = s, .v = v, .mask = mask, .score = score_of_plan(sv),
                  .mask_slices = mask_slices, .mask_run = mask_run, .N = sv->N, .dh = sv->dh, .out = out};
    mtsa_run(&j, mtsa_forward_part, sv->dh);
}

static void check_score(const char *op, ag_mtsa_score score) {
    if (score != AG_MTSA_LOG_SIGMOID && score != AG_MTSA_IDENTITY) ag__fatal(op, "unknown score function %d", (int)score);
}

/* len[B] (NULL: all N) on the host, written `copies` times over: the
 * plan's lengths, one per example of the slices (ops/mtsa.h). */
static const int32_t *host_lengths(const char *op, const int32_t *len, int B, int N, int copies) {
    int32_t *host = ag__arena_alloc((size_t)(B * copies > 0 ? B * copies : 1) * sizeof *host);
    for (int b = 0; b < B; b++) {
        host[b] = len ? len[b] : N;
        if (host[b] < 0 || host[b] > N) ag__fatal(op, "len[%d] = %d is outside [0, %d]", b, (int)host[b], N);
    }
    for (int c = 1; c < copies; c++) memcpy(host + (int64_t)c * B, host, (size_t)B * sizeof *host);
    return host;
}

/* The op over slices = examples * per_b slices of r, s and v, after its
 * checks: lens[examples] on the host, the mask (or NULL) read as the
 * kernels' forward says (ops/mtsa.h). */
static ag_tensor *mtsa_op(const char *op, ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_real *mask,
                          int mask_slices, int mask_run, const int32_t *lens, int examples, int per_b,
                          ag_mtsa_score score) {
    ag_device dev = r->device; /* checked: all three on it */
    int N = r->shape[r->ndim - 1], dh = s->shape[s->ndim - 1];
    mtsa_saved sv = {.mask = mask, .mask_slices = mask_slices, .mask_run = mask_run, .slices = examples * per_b,
                     .per_b = per_b, .N = N, .dh = dh, .identity = score == AG_MTSA_IDENTITY};
    int64_t nn = (int64_t)N * N, n2 = (int64_t)N * 2 * dh;
    sv.len = ag__step_i32_on(dev, lens, examples);
    sv.er = ag__step_alloc_on(dev, (size_t)(sv.slices * nn + 1) * sizeof(ag_real));
    sv.ep = ag__step_alloc_on(dev, (size_t)(sv.slices * n2 + 1) * sizeof(ag_real));
    sv.zn = ag__step_alloc_on(dev, (size_t)(sv.slices * n2 + 1) * sizeof(ag_real));
    ag_tensor *out = ag__empty_on(dev, s->ndim, s->shape);
    ag__mtsa_on(op, dev)->forward(&sv, r->data, s->data, v->data, mask, mask_slices, mask_run, out->data);
    ag_node *n = ag__record(op, mtsa_backward, out, 3, (ag_tensor *[]){r, s, v});
    if (n) {
        mtsa_saved *p = ag__arena_alloc(sizeof *p);
        *p = sv;
        n->saved = p;
    }
    return out;
}

ag_tensor *ag_mtsa_attention(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *mask, const int32_t *len,
                             ag_mtsa_score score) {
    const char *op = "ag_mtsa_attention";
    ag__need(op, "r", r), ag__need(op, "s", s), ag__need(op, "v", v);
    check_shapes(r, s, v);
    check_score(op, score);
    int B = r->shape[0], N = r->shape[r->ndim - 1], per_b = r->ndim == 4 ? r->shape[1] : 1;
    int mask_slices = mask ? check_mask(r, mask) : 1; /* the mask repeats every mask_slices slices: run 1 */
    return mtsa_op(op, r, s, v, mask ? mask->data : NULL, mask_slices, 1, host_lengths(op, len, B, N, 1), B, per_b,
                   score);
}

/* r [G,B,N,N], s and v [G,B,N,dh], masks [G,N,N], [N,N] or NULL. */
static void check_groups(const char *op, const ag_tensor *r, const ag_tensor *s, const ag_tensor *v,
                         const ag_tensor *masks) {
    char sr[64], ss[64], svv[64], sm[64] = "NULL";
    ag__check_same_device(op, r, s);
    ag__check_same_device(op, r, v);
    if (masks) ag__check_same_device(op, r, masks);
    bool ok = r->ndim == 4 && r->shape[2] == r->shape[3] && s->ndim == 4 && ag_same_shape(s, v);
    for (int j = 0; ok && j < 3; j++) ok = s->shape[j] == r->shape[j];
    if (ok && masks) {
        int m = masks->ndim;
        ok = (m == 2 || (m == 3 && masks->shape[0] == r->shape[0])) && masks->shape[m - 2] == r->shape[2] &&
             masks->shape[m - 1] == r->shape[3];
    }
    if (masks) ag_shape_str(masks, sm, sizeof sm);
    if (!ok)
        ag__fatal(op, "r %s, s %s, v %s, masks %s: want r [G,B,N,N], s and v [G,B,N,dh], masks [G,N,N], [N,N] or NULL",
                  ag_shape_str(r, sr, sizeof sr), ag_shape_str(s, ss, sizeof ss), ag_shape_str(v, svv, sizeof svv), sm);
    if (masks) check_mask_values(op, masks);
}

/* Head g's B examples are slices g*B .. g*B + B - 1: G*B examples of one
 * call, len copied per head and mask g shared by a run of B slices. */
ag_tensor *ag__mtsa_attention_groups(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *masks,
                                     const int32_t *len, ag_mtsa_score score) {
    const char *op = "ag__mtsa_attention_groups";
    check_groups(op, r, s, v, masks);
    check_score(op, score);
    int G = r->shape[0], B = r->shape[1], N = r->shape[2];
    int mask_slices = masks && masks->ndim == 3 ? G : 1, mask_run = B > 0 ? B : 1;
    return mtsa_op(op, r, s, v, masks ? masks->data : NULL, mask_slices, mask_run, host_lengths(op, len, B, N, G),
                   G * B, 1, score);
}

/* ---- the CPU's table (ops/mtsa.h; CUDA's is in ops/cuda/mtsa.c) ---- */

static const ag__mtsa_kernels mtsa_cpu = {
    .forward = mtsa_forward_cpu,
    .backward = mtsa_backward_cpu,
};
AG_DISPATCH(mtsa, mtsa_cpu)
