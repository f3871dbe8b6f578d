/* layernorm.c - layer normalisation over the last axis (MS-SAN's FFN block):
 *
 *     y = (x - mean) / sqrt(var + eps) * gamma + beta,   var biased (/D),
 *
 * and its uncentred sibling, RMS normalisation (Zhang & Sennrich 2019):
 *
 *     y = x / sqrt(mean(x^2) + eps) * gamma,
 *
 * which is the same computation with the mean taken as 0 - the kernels
 * read a NULL mean array so (ops/layernorm.h).
 * Each row is normalised on its own; forward saves the row's mean and
 * 1/std so backward needs one pass over x and no second reduction of it.
 * The loops here are the CPU's kernels (ops/layernorm.h).  On the GPU
 * (ops/cuda/layernorm.cu) a warp takes a row, and gamma's and beta's
 * gradients are column sums over the rows in order, as here. */
#include "dispatch.h"
#include "layernorm.h"
#include "../graph/device.h"

typedef struct {
    ag_real *mean, *rstd; /* one per row */
} ln_saved;

typedef struct {
    const ag_real *x, *G, *gamma, *beta;
    const ag_real *mean, *rstd;  /* backward: the rows' */
    ag_real *y, *gx, *ggamma, *gbeta;
    ag_real *row_mean, *row_rstd; /* forward: written */
    ag_real eps;
    int D;
    int64_t rows;
    bool fresh;               /* backward: gx is new, store instead of add */
} ln_job;

/* With xhat = (x - mean) * rstd and dxhat = dy * gamma, the gradient of a
 * row is rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)):
 * the two means are what the row's own mean and variance take back.
 * Rows are split over the pool for dx; gamma's and beta's gradients sum
 * over rows, so they are split by columns, each summing its rows in order. */
AG_SIMD_CLONES static void layernorm_grad_rows(void *ctx, int64_t r0, int64_t r1) {
    const ln_job *j = ctx;
    int D = j->D;
    const ag_real *g = j->gamma;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *xr = j->x + r * D, *dy = j->G + r * D;
        ag_real mean = j->mean ? j->mean[r] : 0, rstd = j->rstd[r];
        ag_real sum_dxhat = 0, sum_dxhat_xhat = 0;
        for (int k = 0; k < D; k++) {
            ag_real xhat = (xr[k] - mean) * rstd;
            ag_real dxhat = g ? dy[k] * g[k] : dy[k];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * xhat;
        }
        /* uncentred (RMS): no mean to take the gradient back */
        ag_real m1 = j->mean ? sum_dxhat / (ag_real)D : 0, m2 = sum_dxhat_xhat / (ag_real)D;
        ag_real *dx = j->gx + r * D;
        if (j->fresh)
            for (int k = 0; k < D; k++) {
                ag_real xhat = (xr[k] - mean) * rstd;
                ag_real dxhat = g ? dy[k] * g[k] : dy[k];
                dx[k] = rstd * (dxhat - m1 - xhat * m2);
            }
        else
            for (int k = 0; k < D; k++) {
                ag_real xhat = (xr[k] - mean) * rstd;
                ag_real dxhat = g ? dy[k] * g[k] : dy[k];
                dx[k] += rstd * (dxhat - m1 - xhat * m2);
            }
    }
}

AG_SIMD_CLONES static void layernorm_grad_affine(void *ctx, int64_t c0, int64_t c1) {
    const ln_job *j = ctx;
    int D = j->D;
    for (int64_t r = 0; r < j->rows; r++) {
        const ag_real *xr = j->x + r * D, *dy = j->G + r * D;
        ag_real mean = j->mean ? j->mean[r] : 0, rstd = j->rstd[r];
        if (j->ggamma)
            for (int64_t k = c0; k < c1; k++) j->ggamma[k] += dy[k] * ((xr[k] - mean) * rstd);
        if (j->gbeta)
            for (int64_t k = c0; k < c1; k++) j->gbeta[k] += dy[k];
    }
}

static void rows_backward_cpu(const ag_real *x, const ag_real *g, const ag_real *gamma, const ag_real *mean,
                              const ag_real *rstd, ag_real *gx, int64_t rows, int D, bool fresh) {
    ln_job j = {.x = x, .G = g, .gamma = gamma, .mean = mean, .rstd = rstd, .gx = gx, .D = D, .rows = rows,
                .fresh = fresh};
    ag__parallel_range(rows, ag__units_per_part(D), layernorm_grad_rows, &j);
}

static void affine_backward_cpu(const ag_real *x, const ag_real *g, const ag_real *mean, const ag_real *rstd,
                                ag_real *ggamma, ag_real *gbeta, int64_t rows, int D) {
    ln_job j = {.x = x, .G = g, .mean = mean, .rstd = rstd, .ggamma = ggamma, .gbeta = gbeta, .D = D, .rows = rows};
    if (ggamma || gbeta) ag__parallel_range(D, 64, layernorm_grad_affine, &j);
}

/* n->saved: the rows' mean (NULL: RMS) and rstd, in the output's device
 * memory. */
static void layernorm_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    const ln_saved *s = n->saved;
    int D = x->shape[x->ndim - 1];
    int64_t rows = D ? x->size / D : 0;
    const ag__layernorm_kernels *k = ag__layernorm_on(n->op, x->device);
    ag_real *ggamma = gamma && ag__wants(n, 1) ? ag__grad(gamma) : NULL;
    ag_real *gbeta = beta && ag__wants(n, 2) ? ag__grad(beta) : NULL;
    if (ag__wants(n, 0)) {
        bool fresh;
        ag_real *gx = ag__grad_write(x, &fresh);
        k->rows_backward(x->data, n->out->grad, gamma ? gamma->data : NULL, s->mean, s->rstd, gx, rows, D, fresh);
    }
    k->affine_backward(x->data, n->out->grad, s->mean, s->rstd, ggamma, gbeta, rows, D);
}

AG_SIMD_CLONES static void layernorm_rows(void *ctx, int64_t r0, int64_t r1) {
    const ln_job *j = ctx;
    int D = j->D;
    const ag_real *g = j->gamma, *b = j->beta;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *xr = j->x + r * D;
        ag_real *y = j->y + r * D;
        ag_real mean = 0, var = 0;
        if (j->row_mean) { /* centred (layer norm); RMS's mean stays 0 */
            for (int k = 0; k < D; k++) mean += xr[k];
            mean /= (ag_real)D;
        }
        for (int k = 0; k < D; k++) var += (xr[k] - mean) * (xr[k] - mean); /* two passes: no cancellation */
        var /= (ag_real)D;
        ag_real rstd = 1 / sqrt(var + j->eps);
        for (int k = 0; k < D; k++) {
            ag_real xhat = (xr[k] - mean) * rstd;
            y[k] = (g ? xhat * g[k] : xhat) + (b ? b[k] : 0);
        }
        if (j->row_mean) j->row_mean[r] = mean;
        j->row_rstd[r] = rstd;
    }
}

static void rows_forward_cpu(const ag_real *x, const ag_real *gamma, const ag_real *beta, ag_real eps, ag_real *y,
                             ag_real *mean, ag_real *rstd, int64_t rows, int D) {
    ln_job j = {.x = x, .gamma = gamma, .beta = beta, .y = y, .row_mean = mean, .row_rstd = rstd, .eps = eps, .D = D,
                .rows = rows};
    ag__parallel_range(rows, ag__units_per_part(D), layernorm_rows, &j);
}

static void check_affine(const char *op, const char *what, const ag_tensor *x, const ag_tensor *p) {
    if (!p) return;
    ag__check_same_device(op, x, p);
    int D = x->shape[x->ndim - 1];
    if (p->ndim != 1 || p->shape[0] != D) {
        char sx[64], sp[64];
        ag__fatal(op, "%s %s does not fit x %s (want [%d])", what, ag_shape_str(p, sp, sizeof sp),
                  ag_shape_str(x, sx, sizeof sx), D);
    }
}

/* ag_layernorm (centre) and ag_rmsnorm (beta NULL, no mean saved): one op
 * body, one backward. */
static ag_tensor *normalise_rows(const char *op, ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps,
                                 bool centre) {
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim < 1 || x->shape[x->ndim - 1] == 0)
        ag__fatal(op, "x %s has no last axis to normalise", ag_shape_str(x, sx, sizeof sx));
    if (!(eps >= 0)) ag__fatal(op, "eps %g must be >= 0", eps);
    check_affine(op, "gamma", x, gamma);
    check_affine(op, "beta", x, beta);

    int D = x->shape[x->ndim - 1];
    int64_t rows = x->size / D;
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    size_t bytes = (size_t)(rows > 0 ? rows : 1) * sizeof(ag_real);
    ln_saved s = {centre ? ag__step_alloc_on(dev, bytes) : NULL, ag__step_alloc_on(dev, bytes)};
    ag__layernorm_on(op, dev)->rows_forward(x->data, gamma ? gamma->data : NULL, beta ? beta->data : NULL,
                                            (ag_real)eps, out->data, s.mean, s.rstd, rows, D);
    ag_node *n = ag__record(op, layernorm_backward, out, 3, (ag_tensor *[]){x, gamma, beta});
    if (n) {
        ln_saved *p = ag__arena_alloc(sizeof *p);
        *p = s;
        n->saved = p;
    }
    return out;
}

ag_tensor *ag_layernorm(ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps) {
    return normalise_rows("ag_layernorm", x, gamma, beta, eps, true);
}

ag_tensor *ag_rmsnorm(ag_tensor *x, ag_tensor *gamma, double eps) {
    return normalise_rows("ag_rmsnorm", x, gamma, NULL, eps, false);
}

/* ---- the CPU's table (ops/layernorm.h; CUDA's is in ops/cuda/layernorm.cu) ---- */

static const ag__layernorm_kernels layernorm_cpu = {
    .rows_forward = rows_forward_cpu,
    .rows_backward = rows_backward_cpu,
    .affine_backward = affine_backward_cpu,
};
AG_DISPATCH(layernorm, layernorm_cpu)
