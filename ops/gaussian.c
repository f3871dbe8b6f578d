/* gaussian.c - the positional attention of the positional attentive LM
 * (docs/models.md, positional LM):
 *
 *   ag_gaussian_mu       mu_t = max(m_t . [mu_{t-1}, 1/len, (t+1)/len], t/len)
 *   ag_gaussian_context  gamma[t,i] = exp(-(i/len - mu_t)^2 / (2 sigma_t^2 + eps))
 *                        over the causal window, L1-normalised, c_t = sum_i gamma h_i
 *
 * The context is a product of a [N,N] weight matrix with h, so it runs as one
 * GEMM per example; the weights themselves cost N^2 exps, a small fraction.
 * Positions t >= len[b] are padding: they lie in no window, and their
 * outputs are 0. */
#include "vecmath.h"
#include "dispatch.h"
#include "gaussian.h"
#include "gaussian_rows.h" /* the recurrence's rows, as CUDA runs them */
#include "../graph/device.h"

#define GAUSS_SUM_FLOOR ((ag_real)1e-12) /* gamma / max(sum, floor): never 0/0 */

/* len[b] checked against N, or N for every example when len is NULL, on
 * the host (the device's copy is made from it). */
static int32_t *lengths(const char *op, const int32_t *len, int B, int N) {
    int32_t *L = ag__arena_alloc((size_t)(B ? B : 1) * sizeof *L);
    for (int b = 0; b < B; b++) {
        L[b] = len ? len[b] : N;
        if (L[b] < 0 || L[b] > N) ag__fatal(op, "len[%d] = %d is outside [0, %d]", b, (int)L[b], N);
    }
    return L;
}

/* ---- the mean recurrence ---- */

typedef struct {
    const int32_t *len;
    uint8_t *above; /* 1 where mu_t took m_t . b_t, 0 where it sat on the floor t/len */
} mu_saved; /* both arrays in the device's memory */

static void mu_backward_cpu(const ag_real *M, const ag_real *MU, const ag_real *G, const int32_t *len,
                            const uint8_t *above, ag_real *GM, int B, int N, bool fresh) {
    for (int b = 0; b < B; b++) {
        int64_t row = (int64_t)b * N;
        ag__gaussian_mu_grad_row(M + row * 3, MU + row, G + row, len[b], above + row, GM + row * 3, N, fresh);
    }
}

static void gaussian_mu_backward(ag_node *n) {
    const mu_saved *s = n->saved;
    ag_tensor *m = n->in[0];
    bool fresh;
    ag_real *gm = ag__grad_write(m, &fresh);
    ag__gaussian_on(n->op, m->device)
        ->mu_backward(m->data, n->out->data, n->out->grad, s->len, s->above, gm, m->shape[0], m->shape[1], fresh);
}

static void mu_forward_cpu(const ag_real *M, const int32_t *len, ag_real *MU, uint8_t *above, int B, int N) {
    for (int b = 0; b < B; b++) {
        int64_t row = (int64_t)b * N;
        ag__gaussian_mu_row(M + row * 3, len[b], MU + row, above + row, N);
    }
}

ag_tensor *ag_gaussian_mu(ag_tensor *m, const int32_t *len) {
    char sm[64];
    ag_device dev = ag__check_same_device("ag_gaussian_mu", m, NULL);
    if (m->ndim != 3 || m->shape[2] != 3)
        ag__fatal("ag_gaussian_mu", "m %s must be [B,N,3]", ag_shape_str(m, sm, sizeof sm));
    int B = m->shape[0], N = m->shape[1];
    /* the recurrence runs one example per thread on the GPU (ops/cuda/gaussian.cu) */
    mu_saved s = {ag__step_i32_on(dev, lengths("ag_gaussian_mu", len, B, N), B),
                  ag__step_alloc_on(dev, (size_t)B * N + 1)};
    ag_tensor *out = ag__empty_on(dev, 2, (int[]){B, N});
    ag__gaussian_on("ag_gaussian_mu", dev)->mu_forward(m->data, s.len, out->data, s.above, B, N);
    ag_node *n = ag__record("ag_gaussian_mu", gaussian_mu_backward, out, 1, &m);
    if (n) {
        mu_saved *p = ag__arena_alloc(sizeof *p);
        *p = s;
        n->saved = p;
    }
    return out;
}

/* ---- the Gaussian context ---- */

typedef ag__kgauss gauss_saved; /* ops/gaussian.h: w's layout is the device's */

/* Window of query t: i in [0, end). */
static inline int window_end(int t, bool strict) { return strict ? t : t + 1; }

/* Fills the [L,L] weights of one example (row t, column i; 0 outside the
 * window) and the window sums.  Padded rows and columns are not stored:
 * the GEMMs then skip them too. */
static void gauss_weights(ag_real *w, ag_real *sum, const ag_real *mu, const ag_real *sigma, int L, bool strict,
                          ag_real eps) {
    memset(w, 0, (size_t)L * L * sizeof *w);
    ag_real inv_len = 1 / (ag_real)L;
    for (int t = 0; t < L; t++) {
        ag_real *row = w + (int64_t)t * L;
        ag_real m = mu[t], inv_d = 1 / (2 * sigma[t] * sigma[t] + eps), s = 0;
        int end = window_end(t, strict);
        for (int i = 0; i < end; i++) {
            ag_real z = (ag_real)i * inv_len - m;
            row[i] = ag__vexp_nonpos(-z * z * inv_d);
            s += row[i];
        }
        sum[t] = s;
        ag_real inv = 1 / (s > GAUSS_SUM_FLOOR ? s : GAUSS_SUM_FLOOR);
        for (int i = 0; i < end; i++) row[i] *= inv;
    }
}

/* Through c = W h: dW = dC h^T and dh = W^T dC (one GEMM each per example).
 * Through the normalisation w = g / S: dg_i = (dw_i - sum_j dw_j w_j) / S, or
 * dw_i / floor where the floor was taken.  Through g = exp(-z^2 / D),
 * z = p_i - mu, D = 2 sigma^2 + eps: dg/dmu = g 2z/D, dg/dD = g z^2/D^2. */
typedef struct {
    const gauss_saved *s;
    const ag_real *h, *mu, *sigma;
    const ag_real *G;
    ag_real *out, *gh, *gmu, *gsigma;
    ag_real *dw;             /* backward: [N,N] scratch per example */
    int N;
} gauss_job;

/* One example per part, on the pool; its GEMMs single-threaded. */
static void gaussian_context_backward_part(void *ctx, int64_t b) {
    const gauss_job *j = ctx;
    const gauss_saved *s = j->s;
    int N = j->N, H = s->H, L = s->len[b];
    if (L == 0) return;
    int64_t ho = b * N * H;
    const ag_real *w = s->w + b * N * N, *gc = j->G + ho;
    if (j->gh) ag__gemm_serial(true, false, L, H, L, 1, w, gc, 1, j->gh + ho);
    if (!j->dw) return;
    ag_real *dw = j->dw + b * N * N;
    ag__gemm_serial(false, true, L, L, H, 1, gc, j->h + ho, 0, dw);
    ag_real inv_len = 1 / (ag_real)L;
    for (int t = 0; t < L; t++) {
        int64_t bt = b * N + t;
        int end = window_end(t, s->strict);
        const ag_real *wr = w + (int64_t)t * L, *dwr = dw + (int64_t)t * L;
        /* where the floor was taken, S is a constant: no dot term */
        bool floored = !(s->sum[bt] > GAUSS_SUM_FLOOR);
        ag_real dot = 0;
        if (!floored)
            for (int i = 0; i < end; i++) dot += dwr[i] * wr[i];
        ag_real m = j->mu[bt], sg = j->sigma[bt];
        ag_real inv_d = 1 / (2 * sg * sg + s->eps);
        ag_real dmu = 0, dD = 0;
        for (int i = 0; i < end; i++) {
            ag_real dg_g = (dwr[i] - dot) * wr[i]; /* dg * g, with g = w * denom */
            ag_real z = (ag_real)i * inv_len - m;
            dmu += dg_g * 2 * z * inv_d;
            dD += dg_g * z * z * inv_d * inv_d;
        }
        if (j->gmu) j->gmu[bt] += dmu;
        if (j->gsigma) j->gsigma[bt] += dD * 4 * sg;
    }
}

/* A fresh gradient is zeroed first: the parts add where a window reaches. */
static void zero_if_fresh(ag_real *g, bool fresh, int64_t n) {
    if (g && fresh) memset(g, 0, (size_t)n * sizeof *g);
}

static void context_backward_cpu(const gauss_saved *s, const ag_real *h, const ag_real *mu, const ag_real *sigma,
                                 const ag_real *g, ag_real *gh, bool fresh_h, ag_real *gmu, bool fresh_mu,
                                 ag_real *gsigma, bool fresh_sigma) {
    int B = s->B, N = s->N;
    zero_if_fresh(gh, fresh_h, (int64_t)B * N * s->H);
    zero_if_fresh(gmu, fresh_mu, (int64_t)B * N);
    zero_if_fresh(gsigma, fresh_sigma, (int64_t)B * N);
    gauss_job j = {.s = s, .h = h, .mu = mu, .sigma = sigma, .G = g, .N = N, .gh = gh, .gmu = gmu, .gsigma = gsigma};
    if (gmu || gsigma) j.dw = ag__arena_alloc((size_t)B * N * N * sizeof(ag_real) + 1);
    ag__parallel(B, gaussian_context_backward_part, &j);
}

static void gaussian_context_backward(ag_node *n) {
    const gauss_saved *s = n->saved;
    ag_tensor *h = n->in[0], *mu = n->in[1], *sigma = n->in[2];
    bool fresh_h = false, fresh_mu = false, fresh_sigma = false;
    ag_real *gh = ag__wants(n, 0) ? ag__grad_write(h, &fresh_h) : NULL;
    ag_real *gmu = ag__wants(n, 1) ? ag__grad_write(mu, &fresh_mu) : NULL;
    ag_real *gsigma = ag__wants(n, 2) ? ag__grad_write(sigma, &fresh_sigma) : NULL;
    ag__gaussian_on(n->op, h->device)
        ->context_backward(s, h->data, mu->data, sigma->data, n->out->grad, gh, fresh_h, gmu, fresh_mu, gsigma,
                           fresh_sigma);
}

static void gaussian_context_part(void *ctx, int64_t b) {
    const gauss_job *j = ctx;
    const gauss_saved *s = j->s;
    int N = j->N, H = s->H, L = s->len[b];
    int64_t ho = b * N * H;
    if (L > 0) {
        ag_real *w = s->w + b * N * N;
        gauss_weights(w, s->sum + b * N, j->mu + b * N, j->sigma + b * N, L, s->strict, s->eps);
        ag__gemm_serial(false, false, L, H, L, 1, w, j->h + ho, 0, j->out + ho);
    }
    memset(j->out + ho + (int64_t)L * H, 0, (size_t)(N - L) * H * sizeof(ag_real));
}

static void context_forward_cpu(const gauss_saved *s, const ag_real *h, const ag_real *mu, const ag_real *sigma,
                                ag_real *out) {
    gauss_job j = {.s = s, .h = h, .mu = mu, .sigma = sigma, .out = out, .N = s->N};
    ag__parallel(s->B, gaussian_context_part, &j);
}

static void check_per_query(const char *what, const ag_tensor *h, const ag_tensor *p) {
    ag__check_same_device("ag_gaussian_context", h, p);
    int B = h->shape[0], N = h->shape[1];
    bool ok = (p->ndim == 2 || (p->ndim == 3 && p->shape[2] == 1)) && p->shape[0] == B && p->shape[1] == N;
    if (!ok) {
        char sh[64], sp[64];
        ag__fatal("ag_gaussian_context", "%s %s does not fit h %s (want [%d,%d] or [%d,%d,1])", what,
                  ag_shape_str(p, sp, sizeof sp), ag_shape_str(h, sh, sizeof sh), B, N, B, N);
    }
}

/* The weights as [B,N,N] (row t, column i) for heatmaps. */
static void expand_weights_cpu(const gauss_saved *s, ag_real *out) {
    int B = s->B, N = s->N;
    memset(out, 0, (size_t)B * N * N * sizeof *out);
    for (int b = 0; b < B; b++) {
        int L = s->len[b];
        for (int t = 0; t < L; t++)
            memcpy(out + ((int64_t)b * N + t) * N, s->w + (int64_t)b * N * N + (int64_t)t * L,
                   (size_t)L * sizeof(ag_real));
    }
}

ag_tensor *ag_gaussian_context(ag_tensor *h, ag_tensor *mu, ag_tensor *sigma, const int32_t *len, bool strict,
                               double eps, ag_tensor **weights) {
    char sh[64];
    ag__need("ag_gaussian_context", "mu", mu), ag__need("ag_gaussian_context", "sigma", sigma);
    ag_device dev = ag__check_same_device("ag_gaussian_context", h, NULL);
    if (h->ndim != 3) ag__fatal("ag_gaussian_context", "h %s must be [B,N,H]", ag_shape_str(h, sh, sizeof sh));
    check_per_query("mu", h, mu);
    check_per_query("sigma", h, sigma);
    if (!(eps >= 0)) ag__fatal("ag_gaussian_context", "eps %g must be >= 0", eps);
    int B = h->shape[0], N = h->shape[1], H = h->shape[2];
    gauss_saved s = {
        .len = ag__step_i32_on(dev, lengths("ag_gaussian_context", len, B, N), B),
        .w = ag__step_alloc_on(dev, (size_t)B * N * N * sizeof(ag_real) + 1),
        .sum = ag__step_alloc_on(dev, (size_t)B * N * sizeof(ag_real) + 1),
        .B = B,
        .N = N,
        .H = H,
        .strict = strict,
        .eps = (ag_real)eps,
    };
    ag_tensor *out = ag__empty_on(dev, 3, h->shape);
    const ag__gaussian_kernels *k = ag__gaussian_on("ag_gaussian_context", dev);
    k->context_forward(&s, h->data, mu->data, sigma->data, out->data);
    if (weights) { /* a copy: the caller may write to it */
        *weights = ag__empty_on(dev, 3, (int[]){B, N, N});
        k->weights(&s, (*weights)->data);
    }
    ag_node *n = ag__record("ag_gaussian_context", gaussian_context_backward, out, 3, (ag_tensor *[]){h, mu, sigma});
    if (n) {
        gauss_saved *p = ag__arena_alloc(sizeof *p);
        *p = s;
        n->saved = p;
    }
    return out;
}

/* ---- the CPU's table (ops/gaussian.h; CUDA's is in ops/cuda/gaussian.c) ---- */

static const ag__gaussian_kernels gaussian_cpu = {
    .mu_forward = mu_forward_cpu,
    .mu_backward = mu_backward_cpu,
    .context_forward = context_forward_cpu,
    .context_backward = context_backward_cpu,
    .weights = expand_weights_cpu,
};
AG_DISPATCH(gaussian, gaussian_cpu)
