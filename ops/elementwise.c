/* elementwise.c - binary ops with broadcasting, scalar ops and the unary
 * activations.  Each op's forward and backward sit together. */
#include "vecmath.h"

#include <stdio.h>

/* ---- broadcasting ---- */

/* Shapes right-aligned into 4 dims; a stride of 0 repeats an operand. */
typedef struct {
    int ndim;
    int shape[4];
    int64_t sa[4], sb[4];
} bcast;

static void strides_for(const ag_tensor *t, const int *out4, int64_t *s) {
    int pad = 4 - t->ndim;
    int64_t stride = 1;
    for (int d = 3; d >= 0; d--) {
        int dim = d < pad ? 1 : t->shape[d - pad];
        s[d] = (dim == 1 && out4[d] != 1) ? 0 : stride;
        stride *= dim;
    }
}

static bcast broadcast(const char *op, const ag_tensor *a, const ag_tensor *b) {
    ag__check_device(op, a, b);
    bcast bc;
    bc.ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < 4; d++) {
        int k = d - (4 - bc.ndim);
        int da = k - (bc.ndim - a->ndim), db = k - (bc.ndim - b->ndim);
        int x = (k >= 0 && da >= 0) ? a->shape[da] : 1;
        int y = (k >= 0 && db >= 0) ? b->shape[db] : 1;
        if (x != y && x != 1 && y != 1) {
            char sa[64], sb[64];
            ag__fatal(op, "shapes %s and %s do not broadcast", ag_shape_str(a, sa, sizeof sa),
                      ag_shape_str(b, sb, sizeof sb));
        }
        bc.shape[d] = x == 1 ? y : x;
    }
    strides_for(a, bc.shape, bc.sa);
    strides_for(b, bc.shape, bc.sb);
    return bc;
}

/* Runs BODY for every output element with ia, ib, io set. */
#define BCAST_FOR(bc, ...)                                                            \
    do {                                                                               \
        int64_t io = 0;                                                                \
        for (int i0 = 0; i0 < (bc).shape[0]; i0++)                                     \
            for (int i1 = 0; i1 < (bc).shape[1]; i1++)                                 \
                for (int i2 = 0; i2 < (bc).shape[2]; i2++) {                           \
                    int64_t ia = i0 * (bc).sa[0] + i1 * (bc).sa[1] + i2 * (bc).sa[2];  \
                    int64_t ib = i0 * (bc).sb[0] + i1 * (bc).sb[1] + i2 * (bc).sb[2];  \
                    for (int i3 = 0; i3 < (bc).shape[3];                               \
                         i3++, io++, ia += (bc).sa[3], ib += (bc).sb[3]) {             \
                        __VA_ARGS__;                                                   \
                    }                                                                  \
                }                                                                      \
    } while (0)

static ag_tensor *bcast_out(const bcast *bc) {
    return ag__empty(bc->ndim, bc->shape + (4 - bc->ndim));
}

/* Saves the broadcast plan so backward does not redo the shape logic. */
static void save_plan(ag_node *n, const bcast *bc) {
    if (!n) return;
    bcast *p = ag_arena_alloc(sizeof *p);
    *p = *bc;
    n->saved = p;
}

#define BINARY_OP(NAME, FWD, GRAD_A, GRAD_B)                                           \
    static void NAME##_backward(ag_node *n) {                                          \
        const bcast bc = *(const bcast *)n->saved;                                     \
        const ag_real *A = n->in[0]->data, *B = n->in[1]->data, *G = n->out->grad;     \
        (void)A; (void)B;                                                              \
        if (ag__wants(n, 0)) {                                                         \
            ag_real *GA = ag__grad(n->in[0]);                                          \
            BCAST_FOR(bc, { ag_real a = A[ia], b = B[ib], g = G[io]; (void)a; (void)b; \
                            GA[ia] += GRAD_A; });                                      \
        }                                                                              \
        if (ag__wants(n, 1)) {                                                         \
            ag_real *GB = ag__grad(n->in[1]);                                          \
            BCAST_FOR(bc, { ag_real a = A[ia], b = B[ib], g = G[io]; (void)a; (void)b; \
                            GB[ib] += GRAD_B; });                                      \
        }                                                                              \
    }                                                                                  \
    ag_tensor *ag_##NAME(ag_tensor *x, ag_tensor *y) {                                 \
        bcast bc = broadcast("ag_" #NAME, x, y);                                       \
        ag_tensor *out = bcast_out(&bc);                                               \
        const ag_real *A = x->data, *B = y->data;                                      \
        ag_real *O = out->data;                                                        \
        BCAST_FOR(bc, { ag_real a = A[ia], b = B[ib]; O[io] = FWD; });                 \
        save_plan(ag__record("ag_" #NAME, NAME##_backward, out, 2,                     \
                             (ag_tensor *[]){x, y}), &bc);                             \
        return out;                                                                    \
    }

/*        name     forward        d/da             d/db                   */
BINARY_OP(add,     a + b,         g,               g)
BINARY_OP(sub,     a - b,         g,               -g)
BINARY_OP(mul,     a * b,         g * b,           g * a)
BINARY_OP(div,     a / b,         g / b,           -g * a / (b * b))
BINARY_OP(maximum, a > b ? a : b, a > b ? g : 0,   a > b ? 0 : g)

/* ---- scalar ops: y = a*x + b folds both into one backward ---- */

static void affine_backward(ag_node *n) {
    ag_real scale = (ag_real)n->farg[0];
    ag_real *gx = ag__grad(n->in[0]);
    const ag_real *g = n->out->grad;
    for (int64_t i = 0; i < n->out->size; i++) gx[i] += scale * g[i];
}

static ag_tensor *affine(const char *op, ag_tensor *x, double scale, double shift) {
    ag__check_device(op, x, NULL);
    ag_tensor *out = ag__empty(x->ndim, x->shape);
    ag_real s = (ag_real)scale, b = (ag_real)shift;
    for (int64_t i = 0; i < x->size; i++) out->data[i] = s * x->data[i] + b;
    ag_node *n = ag__record(op, affine_backward, out, 1, &x);
    if (n) n->farg[0] = scale;
    return out;
}

ag_tensor *ag_add_scalar(ag_tensor *x, double s) { return affine("ag_add_scalar", x, 1.0, s); }
ag_tensor *ag_mul_scalar(ag_tensor *x, double s) { return affine("ag_mul_scalar", x, s, 0.0); }
ag_tensor *ag_neg(ag_tensor *x) { return affine("ag_neg", x, -1.0, 0.0); }

/* ---- unary ops: the derivative is written in terms of x and y = f(x) ----
 *
 * The loops run on branch-free f32 kernels (vecmath.h: a few ulp, SIMD) and
 * are compiled for SSE2 and AVX2; the f64 build calls libm. */

#define UNARY_OP(NAME, FWD, DERIV)                                                     \
    AG_SIMD_CLONES static void NAME##_forward_loop(const ag_real *restrict X,          \
                                                   ag_real *restrict Y, int64_t n) {   \
        for (int64_t i = 0; i < n; i++) {                                              \
            ag_real x = X[i];                                                          \
            Y[i] = FWD;                                                                \
        }                                                                              \
    }                                                                                  \
    AG_SIMD_CLONES static void NAME##_backward_loop(const ag_real *restrict X,         \
                                                    const ag_real *restrict Y,         \
                                                    const ag_real *restrict G,         \
                                                    ag_real *restrict GX, int64_t n) { \
        for (int64_t i = 0; i < n; i++) {                                              \
            ag_real x = X[i], y = Y[i];                                                \
            (void)x; (void)y;                                                          \
            GX[i] += G[i] * (DERIV);                                                   \
        }                                                                              \
    }                                                                                  \
    static void NAME##_backward(ag_node *n) {                                          \
        NAME##_backward_loop(n->in[0]->data, n->out->data, n->out->grad,               \
                             ag__grad(n->in[0]), n->out->size);                        \
    }                                                                                  \
    ag_tensor *ag_##NAME(ag_tensor *in) {                                              \
        ag__check_device("ag_" #NAME, in, NULL);                                       \
        ag_tensor *out = ag__empty(in->ndim, in->shape);                               \
        NAME##_forward_loop(in->data, out->data, in->size);                            \
        ag__record("ag_" #NAME, NAME##_backward, out, 1, &in);                         \
        return out;                                                                    \
    }

static inline ag_real elu(ag_real x) { return x > 0 ? x : ag__vexpm1(x); }

/*       name          forward              derivative                      */
UNARY_OP(exp,          ag__vexp_full(x),    y)
UNARY_OP(log,          ag__vlog(x),         1 / x)
UNARY_OP(sqrt,         sqrt(x),             (ag_real)0.5 / y)
UNARY_OP(square,       x * x,               2 * x)
UNARY_OP(abs,          fabs(x),             (x > 0) - (x < 0))
UNARY_OP(tanh,         ag__vtanh(x),        1 - y * y)
UNARY_OP(sigmoid,      ag__vsigmoid(x),     y * (1 - y))
UNARY_OP(relu,         x > 0 ? x : 0,       x > 0)
UNARY_OP(elu,          elu(x),              x > 0 ? 1 : y + 1)
UNARY_OP(softplus,     ag__vsoftplus(x),    ag__vsigmoid(x))
UNARY_OP(log_sigmoid,  ag__vlog_sigmoid(x), ag__vsigmoid(-x))

/* ---- clamp: the gradient passes only strictly inside [lo, hi] ---- */

static void clamp_backward(ag_node *n) {
    ag_real lo = (ag_real)n->farg[0], hi = (ag_real)n->farg[1];
    const ag_real *X = n->in[0]->data, *G = n->out->grad;
    ag_real *GX = ag__grad(n->in[0]);
    for (int64_t i = 0; i < n->out->size; i++)
        if (X[i] > lo && X[i] < hi) GX[i] += G[i];
}

ag_tensor *ag_clamp(ag_tensor *x, double lo, double hi) {
    ag__check_device("ag_clamp", x, NULL);
    if (!(lo <= hi)) ag__fatal("ag_clamp", "empty range [%g, %g]", lo, hi);
    ag_tensor *out = ag__empty(x->ndim, x->shape);
    ag_real l = (ag_real)lo, h = (ag_real)hi;
    for (int64_t i = 0; i < x->size; i++) out->data[i] = x->data[i] < l ? l : x->data[i] > h ? h : x->data[i];
    ag_node *n = ag__record("ag_clamp", clamp_backward, out, 1, &x);
    if (n) {
        n->farg[0] = lo;
        n->farg[1] = hi;
    }
    return out;
}
