/* feature.c - feature-wise (multi-dimensional) additive attention: DiSAN's
 * token2token attention (docs/layers.md, "Feature-wise attention"),
 *
 *     out[b,i,l] = sum_j softmax_j(c tanh((q[b,i,l] + k[b,j,l]) / c) + M[b,i,j]) v[b,j,l],
 *
 * without the [B,Nq,Nk,d] tensor a composition of ops builds (and keeps for
 * backward) several times over.  The tanh does not factorise as MTSA's
 * exp(R + S) does (ops/mtsa_attn.c), so the scores are computed, but one
 * query row [Nk,d] at a time in a scratch the cache holds, and never
 * stored: forward keeps lse = max + log sum e^(score - max) per (query,
 * feature), [B,Nq,d], and backward recomputes each score from q and k, as
 * flash attention does.  Keys the mask forbids (-inf) are skipped whole.
 *
 * Backward, with t = tanh((q + k) / c), p = e^(score - lse), g = dout:
 *     dv[j] += p g,   ds = p g (v[j] - out),   dq[i] += ds (1 - t^2),   dk[j] += ds (1 - t^2). */
#include "vecmath.h"
#include "dispatch.h"
#include "feature.h"
#include "softmax_rows.h" /* ag__mask_plan_on: the mask rules of ag_masked_softmax */
#include "../graph/device.h"

/* The mask row (offset) of score row r = b Nq + i. */
static inline int64_t mask_row(const ag__kmask *m, int64_t r) {
    int64_t i2 = r % m->rows3[2], i01 = r / m->rows3[2];
    return i01 / m->rows3[1] * m->stride3[0] + i01 % m->rows3[1] * m->stride3[1] + i2 * m->stride3[2];
}

static inline int valid_len(const ag__kfeat *p, int b, int n) { return p->len ? p->len[b] : n; }

/* Parts of rows (forward) or examples (backward) on the pool: at most
 * MAX_PARTS, fixed by the shape, with a scratch per thread. */
enum { MAX_PARTS = 64 };

typedef struct {
    const ag__kfeat *p;
    const ag_real *q, *k, *v, *mask, *out, *lse, *g;
    ag_real c;
    ag_real *y, *ylse, *gq, *gk, *gv;
    bool fresh_q, fresh_k, fresh_v;
    ag_real *scratch;
    int64_t per_part, units, scratch_per_part;
} feat_job;

/* fn over the units' parts, each thread with scratch_per_part reals. */
static void job_run(feat_job *j, int64_t units, int64_t scratch_per_part, ag__part_fn fn) {
    int64_t parts = units < MAX_PARTS ? units : MAX_PARTS;
    j->units = units;
    j->per_part = parts ? (units + parts - 1) / parts : 1;
    j->scratch_per_part = scratch_per_part;
    ag__parallel_scratch(parts ? (units + j->per_part - 1) / j->per_part : 0, fn, j, &j->scratch, scratch_per_part);
}

/* ---- forward: one query row at a time ---- */

/* Scores of the allowed keys of one row into s [Nk,d] and their maximum per
 * feature into mx; false when no key is allowed. */
AG_SIMD_CLONES
static bool row_scores(const ag_real *restrict q, const ag_real *restrict K, const ag_real *restrict m, int L, int d,
                       ag_real c, ag_real *restrict s, ag_real *restrict mx) {
    ag_real inv_c = 1 / c;
    bool any = false;
    for (int l = 0; l < d; l++) mx[l] = -INFINITY;
    for (int j = 0; j < L; j++) {
        ag_real mj = m ? m[j] : 0;
        if (mj == -INFINITY) continue;
        any = true;
        const ag_real *kj = K + (int64_t)j * d;
        ag_real *sj = s + (int64_t)j * d;
        for (int l = 0; l < d; l++) {
            sj[l] = c * ag__vtanh((q[l] + kj[l]) * inv_c) + mj;
            mx[l] = sj[l] > mx[l] ? sj[l] : mx[l];
        }
    }
    return any;
}

/* out and lse of one row from its scores. */
AG_SIMD_CLONES
static void row_mix(const ag_real *restrict s, const ag_real *restrict V, const ag_real *restrict m, int L, int d,
                    const ag_real *restrict mx, ag_real *restrict sum, ag_real *restrict out, ag_real *restrict lse) {
    for (int l = 0; l < d; l++) sum[l] = 0, out[l] = 0;
    for (int j = 0; j < L; j++) {
        if (m && m[j] == -INFINITY) continue;
        const ag_real *sj = s + (int64_t)j * d, *vj = V + (int64_t)j * d;
        for (int l = 0; l < d; l++) {
            ag_real e = ag__vexp_nonpos(sj[l] - mx[l]);
            sum[l] += e;
            out[l] += e * vj[l];
        }
    }
    for (int l = 0; l < d; l++) { /* sum >= 1: the max entry contributes e^0 */
        out[l] /= sum[l];
        lse[l] = mx[l] + log(sum[l]);
    }
}

static void forward_part(void *ctx, int64_t part) {
    const feat_job *j = ctx;
    const ag__kfeat *p = j->p;
    int d = p->d, Nq = p->Nq, Nk = p->Nk;
    ag_real *s = j->scratch + ag__worker() * j->scratch_per_part, *mx = s + (int64_t)Nk * d, *sum = mx + d;
    int64_t end = (part + 1) * j->per_part < j->units ? (part + 1) * j->per_part : j->units;
    for (int64_t r = part * j->per_part; r < end; r++) {
        int b = (int)(r / Nq), i = (int)(r % Nq), L = valid_len(p, b, Nk);
        const ag_real *m = j->mask ? j->mask + mask_row(&p->mask, r) : NULL;
        ag_real *out = j->y + r * d, *lse = j->ylse + r * d;
        const ag_real *K = j->k + (int64_t)b * Nk * d;
        if ((p->len && i >= L) || !row_scores(j->q + r * d, K, m, L, d, j->c, s, mx)) {
            memset(out, 0, (size_t)d * sizeof *out); /* a padded query, or no key allowed */
            memset(lse, 0, (size_t)d * sizeof *lse);
            continue;
        }
        row_mix(s, j->v + (int64_t)b * Nk * d, m, L, d, mx, sum, out, lse);
    }
}

static void forward_cpu(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *v, const ag_real *mask,
                        ag_real c, ag_real *out, ag_real *lse) {
    feat_job j = {.p = p, .q = q, .k = k, .v = v, .mask = mask, .c = c, .y = out, .ylse = lse};
    job_run(&j, (int64_t)p->B * p->Nq, (int64_t)(p->Nk + 2) * p->d, forward_part);
}

/* ---- the weights, for heatmaps ---- */

static void weights_part(void *ctx, int64_t part) {
    const feat_job *j = ctx;
    const ag__kfeat *p = j->p;
    int d = p->d, Nq = p->Nq, Nk = p->Nk;
    ag_real inv_c = 1 / j->c;
    int64_t end = (part + 1) * j->per_part < j->units ? (part + 1) * j->per_part : j->units;
    for (int64_t r = part * j->per_part; r < end; r++) {
        int b = (int)(r / Nq), i = (int)(r % Nq), L = valid_len(p, b, Nk);
        const ag_real *m = j->mask ? j->mask + mask_row(&p->mask, r) : NULL, *q = j->q + r * d, *lse = j->lse + r * d;
        ag_real *w = j->y + r * Nk * d;
        memset(w, 0, (size_t)Nk * d * sizeof *w);
        if (p->len && i >= L) continue;
        for (int jj = 0; jj < L; jj++) {
            if (m && m[jj] == -INFINITY) continue;
            const ag_real *kj = j->k + ((int64_t)b * Nk + jj) * d;
            for (int l = 0; l < d; l++)
                w[(int64_t)jj * d + l] = ag__vexp_nonpos(j->c * ag__vtanh((q[l] + kj[l]) * inv_c) + (m ? m[jj] : 0) - lse[l]);
        }
    }
}

static void weights_cpu(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *mask, ag_real c,
                        const ag_real *lse, ag_real *w) {
    feat_job j = {.p = p, .q = q, .k = k, .mask = mask, .c = c, .lse = lse, .y = w};
    job_run(&j, (int64_t)p->B * p->Nq, 0, weights_part);
}

/* ---- backward: one example at a time (its keys' gradients sum over its queries) ---- */

/* Query row i's contributions: dq (+)= into gq, dk and dv into gk, gv
 * (restrict: three distinct gradient buffers, which the loop over features
 * may then keep in vector registers; without it GCC left it scalar, 7x
 * slower). */
AG_SIMD_CLONES
static void row_grad(const ag_real *restrict q, const ag_real *restrict K, const ag_real *restrict V,
                     const ag_real *restrict m, int L, int d, ag_real c, const ag_real *restrict out,
                     const ag_real *restrict lse, const ag_real *restrict g, ag_real *restrict gq, ag_real *restrict gk,
                     ag_real *restrict gv) {
    ag_real inv_c = 1 / c;
    for (int j = 0; j < L; j++) {
        ag_real mj = m ? m[j] : 0;
        if (mj == -INFINITY) continue;
        const ag_real *kj = K + (int64_t)j * d, *vj = V + (int64_t)j * d;
        ag_real *gkj = gk + (int64_t)j * d, *gvj = gv + (int64_t)j * d;
        for (int l = 0; l < d; l++) {
            ag_real t = ag__vtanh((q[l] + kj[l]) * inv_c);
            ag_real pg = ag__vexp_nonpos(c * t + mj - lse[l]) * g[l];
            ag_real dpre = pg * (vj[l] - out[l]) * (1 - t * t);
            gvj[l] += pg;
            gq[l] += dpre;
            gkj[l] += dpre;
        }
    }
}

static void zero_block(ag_real *g, bool fresh, int64_t n) {
    if (fresh) memset(g, 0, (size_t)n * sizeof *g);
}

static void backward_part(void *ctx, int64_t part) {
    const feat_job *j = ctx;
    const ag__kfeat *p = j->p;
    int d = p->d, Nq = p->Nq, Nk = p->Nk;
    int64_t qd = (int64_t)Nq * d, kd = (int64_t)Nk * d;
    /* an unwanted gradient goes to the thread's scratch */
    ag_real *sq = j->scratch + ag__worker() * j->scratch_per_part, *sk = sq + qd, *sv = sk + kd;
    int64_t end = (part + 1) * j->per_part < j->units ? (part + 1) * j->per_part : j->units;
    for (int64_t b = part * j->per_part; b < end; b++) {
        ag_real *gq = j->gq ? j->gq + b * qd : sq, *gk = j->gk ? j->gk + b * kd : sk, *gv = j->gv ? j->gv + b * kd : sv;
        zero_block(gq, !j->gq || j->fresh_q, qd);
        zero_block(gk, !j->gk || j->fresh_k, kd);
        zero_block(gv, !j->gv || j->fresh_v, kd);
        int L = valid_len(p, (int)b, Nk), rows = p->len ? (L < Nq ? L : Nq) : Nq;
        for (int i = 0; i < rows; i++) {
            int64_t r = b * Nq + i;
            row_grad(j->q + r * d, j->k + b * kd, j->v + b * kd, j->mask ? j->mask + mask_row(&p->mask, r) : NULL, L,
                     d, j->c, j->out + r * d, j->lse + r * d, j->g + r * d, gq + (int64_t)i * d, gk, gv);
        }
    }
}

static void backward_cpu(const ag__kfeat *p, const ag_real *q, const ag_real *k, const ag_real *v, const ag_real *mask,
                         ag_real c, const ag_real *out, const ag_real *lse, const ag_real *g, ag_real *gq,
                         bool fresh_q, ag_real *gk, bool fresh_k, ag_real *gv, bool fresh_v) {
    feat_job j = {.p = p, .q = q, .k = k, .v = v, .mask = mask, .c = c, .out = out, .lse = lse, .g = g, .gq = gq,
                  .gk = gk, .gv = gv, .fresh_q = fresh_q, .fresh_k = fresh_k, .fresh_v = fresh_v};
    bool scratch = !gq || !gk || !gv;
    job_run(&j, p->B, scratch ? (int64_t)(p->Nq + 2 * p->Nk) * p->d : 0, backward_part);
}

/* ---- the op ---- */

typedef struct {
    ag__kfeat plan;
    ag_real *lse;
} feat_saved;

static void feature_attention_backward(ag_node *n) {
    const feat_saved *sv = n->saved;
    ag_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2], *mask = n->iarg[0] ? n->in[3] : NULL;
    bool fq = false, fk = false, fv = false;
    ag_real *gq = ag__wants(n, 0) ? ag__grad_write(q, &fq) : NULL;
    ag_real *gk = ag__wants(n, 1) ? ag__grad_write(k, &fk) : NULL;
    ag_real *gv = ag__wants(n, 2) ? ag__grad_write(v, &fv) : NULL;
    ag__feature_on(n->op, n->out->device)
        ->backward(&sv->plan, q->data, k->data, v->data, mask ? mask->data : NULL, (ag_real)n->farg[0], n->out->data,
                   sv->lse, n->out->grad, gq, fq, gk, fk, gv, fv);
}

static void check_shapes(const char *op, const ag_tensor *q, const ag_tensor *k, const ag_tensor *v, double c) {
    char sq[64], sk[64], sv[64];
    ag__check_same_device(op, q, k);
    ag__check_same_device(op, q, v);
    bool ok = q->ndim == 3 && k->ndim == 3 && ag_same_shape(k, v) && k->shape[0] == q->shape[0] &&
              k->shape[2] == q->shape[2];
    if (!ok)
        ag__fatal(op, "q %s, k %s, v %s: want q [B,Nq,d] and k, v [B,Nk,d]", ag_shape_str(q, sq, sizeof sq),
                  ag_shape_str(k, sk, sizeof sk), ag_shape_str(v, sv, sizeof sv));
    if (!(c > 0) || !isfinite(c)) ag__fatal(op, "c = %g: want a finite c > 0 (the scores are c tanh(x / c))", c);
}

ag_tensor *ag_feature_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, const int32_t *lengths,
                                double c, ag_tensor **weights) {
    const char *op = "ag_feature_attention";
    ag__need(op, "q", q), ag__need(op, "k", k), ag__need(op, "v", v);
    check_shapes(op, q, k, v, c);
    ag_device dev = q->device;
    int B = q->shape[0], Nq = q->shape[1], Nk = k->shape[1], d = q->shape[2];
    ag__kfeat plan = {.B = B, .Nq = Nq, .Nk = Nk, .d = d};
    plan.mask = ag__mask_plan_on(op, 3, (int[]){B, Nq, Nk}, dev, mask); /* the rules of ag_masked_softmax */
    if (lengths) {
        char sq[64], sk[64];
        if (Nq != Nk)
            ag__fatal(op, "lengths are for self-attention, but q %s and k %s have %d and %d positions",
                      ag_shape_str(q, sq, sizeof sq), ag_shape_str(k, sk, sizeof sk), Nq, Nk);
        for (int b = 0; b < B; b++)
            if (lengths[b] < 0 || lengths[b] > Nk)
                ag__fatal(op, "lengths[%d] = %d is outside [0, %d] (k %s)", b, (int)lengths[b], Nk,
                          ag_shape_str(k, sk, sizeof sk));
        plan.len = ag__step_i32_on(dev, lengths, B); /* the caller's may change before backward */
    }
    int64_t rows_d = (int64_t)B * Nq * d;
    ag_tensor *out = ag__empty_on(dev, 3, q->shape);
    ag_real *lse = ag__step_alloc_on(dev, (size_t)(rows_d + 1) * sizeof(ag_real));
    const ag__feature_kernels *kern = ag__feature_on(op, dev);
    const ag_real *mdata = mask ? mask->data : NULL;
    kern->forward(&plan, q->data, k->data, v->data, mdata, (ag_real)c, out->data, lse);
    if (weights) {
        *weights = ag__empty_on(dev, 4, (int[]){B, Nq, Nk, d});
        kern->weights(&plan, q->data, k->data, mdata, (ag_real)c, lse, (*weights)->data);
    }
    /* the mask rides along as a fourth input (it needs no gradient) so that
     * backward reads the same constant */
    ag_tensor *in[4] = {q, k, v, mask};
    ag_node *n = ag__record(op, feature_attention_backward, out, mask ? 4 : 3, in);
    if (n) {
        feat_saved *sv = ag__arena_alloc(sizeof *sv);
        *sv = (feat_saved){.plan = plan, .lse = lse};
        n->saved = sv;
        n->farg[0] = c;
        n->iarg[0] = mask != NULL;
    }
    return out;
}

/* ---- the CPU's table (ops/feature.h; CUDA's is in ops/cuda/feature.cu) ---- */

static const ag__feature_kernels feature_cpu = {
    .forward = forward_cpu,
    .weights = weights_cpu,
    .backward = backward_cpu,
};
AG_DISPATCH(feature, feature_cpu)
