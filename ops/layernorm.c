/* layernorm.c - layer normalisation over the last axis (MS-SAN's FFN block):
 *
 *     y = (x - mean) / sqrt(var + eps) * gamma + beta,   var biased (/D).
 *
 * Each row is normalised on its own; forward saves the row's mean and
 * 1/std so backward needs one pass over x and no second reduction of it. */
#include "../graph/internal.h"

typedef struct {
    ag_real *mean, *rstd; /* one per row */
} ln_saved;

/* With xhat = (x - mean) * rstd and dxhat = dy * gamma, the gradient of a
 * row is rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)):
 * the two means are what the row's own mean and variance take back. */
static void layernorm_backward(ag_node *n) {
    const ln_saved *s = n->saved;
    ag_tensor *x = n->in[0], *gamma = n->in[1], *beta = n->in[2];
    int D = x->shape[x->ndim - 1];
    int64_t rows = D ? x->size / D : 0;
    const ag_real *G = n->out->grad, *g = gamma ? gamma->data : NULL;
    ag_real *gx = ag__wants(n, 0) ? ag__grad(x) : NULL;
    ag_real *ggamma = gamma && ag__wants(n, 1) ? ag__grad(gamma) : NULL;
    ag_real *gbeta = beta && ag__wants(n, 2) ? ag__grad(beta) : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *xr = x->data + r * D, *dy = G + r * D;
        ag_real mean = s->mean[r], rstd = s->rstd[r];
        ag_real sum_dxhat = 0, sum_dxhat_xhat = 0;
        for (int j = 0; j < D; j++) {
            ag_real xhat = (xr[j] - mean) * rstd;
            ag_real dxhat = g ? dy[j] * g[j] : dy[j];
            sum_dxhat += dxhat;
            sum_dxhat_xhat += dxhat * xhat;
            if (ggamma) ggamma[j] += dy[j] * xhat;
            if (gbeta) gbeta[j] += dy[j];
        }
        if (!gx) continue;
        ag_real m1 = sum_dxhat / (ag_real)D, m2 = sum_dxhat_xhat / (ag_real)D;
        ag_real *dx = gx + r * D;
        for (int j = 0; j < D; j++) {
            ag_real xhat = (xr[j] - mean) * rstd;
            ag_real dxhat = g ? dy[j] * g[j] : dy[j];
            dx[j] += rstd * (dxhat - m1 - xhat * m2);
        }
    }
}

static void check_affine(const char *what, const ag_tensor *x, const ag_tensor *p) {
    if (!p) return;
    ag__check_device("ag_layernorm", x, p);
    int D = x->shape[x->ndim - 1];
    if (p->ndim != 1 || p->shape[0] != D) {
        char sx[64], sp[64];
        ag__fatal("ag_layernorm", "%s %s does not fit x %s (want [%d])", what, ag_shape_str(p, sp, sizeof sp),
                  ag_shape_str(x, sx, sizeof sx), D);
    }
}

ag_tensor *ag_layernorm(ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps) {
    char sx[64];
    ag__check_device("ag_layernorm", x, NULL);
    if (x->ndim < 1 || x->shape[x->ndim - 1] == 0)
        ag__fatal("ag_layernorm", "x %s has no last axis to normalise", ag_shape_str(x, sx, sizeof sx));
    if (!(eps >= 0)) ag__fatal("ag_layernorm", "eps %g must be >= 0", eps);
    check_affine("gamma", x, gamma);
    check_affine("beta", x, beta);

    int D = x->shape[x->ndim - 1];
    int64_t rows = x->size / D;
    ag_tensor *out = ag__empty(x->ndim, x->shape);
    ln_saved s = {ag_arena_alloc((size_t)rows * sizeof(ag_real)), ag_arena_alloc((size_t)rows * sizeof(ag_real))};
    const ag_real *g = gamma ? gamma->data : NULL, *b = beta ? beta->data : NULL;
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *xr = x->data + r * D;
        ag_real *y = out->data + r * D;
        ag_real mean = 0, var = 0;
        for (int j = 0; j < D; j++) mean += xr[j];
        mean /= (ag_real)D;
        for (int j = 0; j < D; j++) var += (xr[j] - mean) * (xr[j] - mean); /* two passes: no cancellation */
        var /= (ag_real)D;
        ag_real rstd = 1 / sqrt(var + (ag_real)eps);
        for (int j = 0; j < D; j++) {
            ag_real xhat = (xr[j] - mean) * rstd;
            y[j] = (g ? xhat * g[j] : xhat) + (b ? b[j] : 0);
        }
        s.mean[r] = mean;
        s.rstd[r] = rstd;
    }
    ag_node *n = ag__record("ag_layernorm", layernorm_backward, out, 3, (ag_tensor *[]){x, gamma, beta});
    if (n) {
        ln_saved *p = ag_arena_alloc(sizeof *p);
        *p = s;
        n->saved = p;
    }
    return out;
}
