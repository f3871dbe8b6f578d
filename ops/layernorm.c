/* layernorm.c - layer normalisation over the last axis (MS-SAN's FFN block):
 *
 *     y = (x - mean) / sqrt(var + eps) * gamma + beta,   var biased (/D).
 *
 * Each row is normalised on its own; forward saves the row's mean and
 * 1/std so backward needs one pass over x and no second reduction of it.
 * On the GPU (ops/cuda/layernorm.cu) a warp takes a row, and gamma's and
 * beta's gradients are column sums over the rows in order, as here. */
#include "../graph/device.h"
#include "cuda/kernels.h"

typedef struct {
    ag_real *mean, *rstd; /* one per row */
} ln_saved;

typedef struct {
    const ln_saved *s;
    const ag_real *x, *G, *gamma, *beta;
    ag_real *y, *gx, *ggamma, *gbeta;
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
        ag_real mean = j->s->mean[r], rstd = j->s->rstd[r];
        ag_real sum_dxhat = 0, sum_dxhat_xhat = 0;
        for (int k = 0; k < D; k++) {
            ag_real xhat = (xr[k] - mean) * rstd;
            ag_real dxhat = g ? dy[k] * g[k] : dy[k];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * xhat;
        }
        ag_real m1 = sum_dxhat / (ag_real)D, m2 = sum_dxhat_xhat / (ag_real)D;
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
        ag_real mean = j->s->mean[r], rstd = j->s->rstd[r];
        if (j->ggamma)
            for (int64_t k = c0; k < c1; k++) j->ggamma[k] += dy[k] * ((xr[k] - mean) * rstd);
        if (j->gbeta)
            for (int64_t k = c0; k < c1; k++) j->gbeta[k] += dy[k];
    }
}

static void layernorm_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    int D = x->shape[x->ndim - 1];
    ln_job j = {.s = n->saved, .x = x->data, .G = n->out->grad, .gamma = gamma ? gamma->data : NULL, .D = D,
                .rows = D ? x->size / D : 0};
    j.ggamma = gamma && ag__wants(n, 1) ? ag__grad(gamma) : NULL;
    j.gbeta = beta && ag__wants(n, 2) ? ag__grad(beta) : NULL;
    if (x->device == AG_CUDA) {
        if (ag__wants(n, 0)) {
            j.gx = ag__grad_write(x, &j.fresh);
            ag__layernorm_grad_rows_cuda(j.x, j.G, j.gamma, j.s->mean, j.s->rstd, j.gx, j.rows, D, j.fresh);
        }
        ag__layernorm_grad_affine_cuda(j.x, j.G, j.s->mean, j.s->rstd, j.ggamma, j.gbeta, j.rows, D);
        ag__cuda_check_launch(n->op);
        return;
    }
    if (ag__wants(n, 0)) {
        j.gx = ag__grad_write(x, &j.fresh);
        ag__parallel_range(j.rows, ag__units_per_part(D), layernorm_grad_rows, &j);
    }
    if (j.ggamma || j.gbeta) ag__parallel_range(D, 64, layernorm_grad_affine, &j);
}

AG_SIMD_CLONES static void layernorm_rows(void *ctx, int64_t r0, int64_t r1) {
    const ln_job *j = ctx;
    int D = j->D;
    const ag_real *g = j->gamma, *b = j->beta;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *xr = j->x + r * D;
        ag_real *y = j->y + r * D;
        ag_real mean = 0, var = 0;
        for (int k = 0; k < D; k++) mean += xr[k];
        mean /= (ag_real)D;
        for (int k = 0; k < D; k++) var += (xr[k] - mean) * (xr[k] - mean); /* two passes: no cancellation */
        var /= (ag_real)D;
        ag_real rstd = 1 / sqrt(var + j->eps);
        for (int k = 0; k < D; k++) {
            ag_real xhat = (xr[k] - mean) * rstd;
            y[k] = (g ? xhat * g[k] : xhat) + (b ? b[k] : 0);
        }
        j->s->mean[r] = mean;
        j->s->rstd[r] = rstd;
    }
}

static void check_affine(const char *what, const ag_tensor *x, const ag_tensor *p) {
    if (!p) return;
    ag__check_same_device("ag_layernorm", x, p);
    int D = x->shape[x->ndim - 1];
    if (p->ndim != 1 || p->shape[0] != D) {
        char sx[64], sp[64];
        ag__fatal("ag_layernorm", "%s %s does not fit x %s (want [%d])", what, ag_shape_str(p, sp, sizeof sp),
                  ag_shape_str(x, sx, sizeof sx), D);
    }
}

ag_tensor *ag_layernorm(ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps) {
    char sx[64];
    ag_device dev = ag__check_same_device("ag_layernorm", x, NULL);
    if (x->ndim < 1 || x->shape[x->ndim - 1] == 0)
        ag__fatal("ag_layernorm", "x %s has no last axis to normalise", ag_shape_str(x, sx, sizeof sx));
    if (!(eps >= 0)) ag__fatal("ag_layernorm", "eps %g must be >= 0", eps);
    check_affine("gamma", x, gamma);
    check_affine("beta", x, beta);

    int D = x->shape[x->ndim - 1];
    int64_t rows = x->size / D;
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ln_saved s;
    ln_job j = {.s = &s, .x = x->data, .y = out->data, .gamma = gamma ? gamma->data : NULL,
                .beta = beta ? beta->data : NULL, .eps = (ag_real)eps, .D = D, .rows = rows};
    if (dev == AG_CUDA) {
        size_t bytes = (size_t)(rows > 0 ? rows : 1) * sizeof(ag_real);
        s = (ln_saved){ag__cuda_arena_alloc(bytes), ag__cuda_arena_alloc(bytes)};
        ag__layernorm_rows_cuda(j.x, j.gamma, j.beta, j.eps, j.y, s.mean, s.rstd, rows, D);
        ag__cuda_check_launch("ag_layernorm");
    } else {
        s = (ln_saved){ag_arena_alloc((size_t)rows * sizeof(ag_real)), ag_arena_alloc((size_t)rows * sizeof(ag_real))};
        ag__parallel_range(rows, ag__units_per_part(D), layernorm_rows, &j);
    }
    ag_node *n = ag__record("ag_layernorm", layernorm_backward, out, 3, (ag_tensor *[]){x, gamma, beta});
    if (n) {
        ln_saved *p = ag_arena_alloc(sizeof *p);
        *p = s;
        n->saved = p;
    }
    return out;
}
