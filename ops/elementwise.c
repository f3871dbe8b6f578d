/* elementwise.c - binary ops with broadcasting, scalar ops and the unary
 * activations.  Each op's forward and backward sit together; the loops
 * below are the CPU's kernels (ops/elementwise.h), CUDA's are in
 * ops/cuda/elementwise.cu. */
#include "vecmath.h"
#include "unary_table.h"
#include "dispatch.h"
#include "elementwise.h"
#include "../graph/device.h"

#include <stdio.h>

/* ---- broadcasting ---- */

/* Shapes right-aligned into 4 dims (ops/elementwise.h's plan, the same on
 * every device); a stride of 0 repeats an operand. */
typedef ag__kbcast bcast;

static void strides_for(const ag_tensor *t, const int *out4, int64_t *s) {
    int pad = 4 - t->ndim;
    int64_t stride = 1;
    for (int d = 3; d >= 0; d--) {
        int dim = d < pad ? 1 : t->shape[d - pad];
        s[d] = (dim == 1 && out4[d] != 1) ? 0 : stride;
        stride *= dim;
    }
}

/* The plan of a op b, and the output's rank in *ndim. */
static bcast broadcast(const char *op, const ag_tensor *a, const ag_tensor *b, int *ndim) {
    ag__check_same_device(op, a, b);
    bcast bc;
    *ndim = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int d = 0; d < 4; d++) {
        int k = d - (4 - *ndim);
        int da = k - (*ndim - a->ndim), db = k - (*ndim - b->ndim);
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

static ag_tensor *bcast_out(const bcast *bc, int ndim, ag_device dev) {
    return ag__empty_on(dev, ndim, bc->shape + (4 - ndim));
}

/* ---- the loops ----
 *
 * The output is seen as rows of shape[3] elements; a row's operands start
 * at ia and ib and step by sa[3], sb[3] (1, or 0 for a broadcast last dim).
 * The inner loop is written once per stride pattern - same shape, a row
 * vector like a bias [.., d] + [d], a column like [B,N,d] * [B,N,1] - so
 * each compiles to a plain SIMD loop; rows are split over the pool.
 *
 * Gradients: an operand with the output's shape gets its gradient row by
 * row like the forward.  A broadcast operand X gathers, for each of its
 * elements, the terms of every output position that read it; those
 * positions are visited in increasing order (as a serial loop over the
 * output would add them), so the sums are the same for any thread count.
 * The work is split over X's rows and, within a row, over column ranges. */

typedef struct {
    bcast bc;
    const ag_real *a, *b, *g;
    ag_real *out;          /* forward: the output; backward: the gradient written */
    int64_t rows, cols;    /* of the output */
    int64_t col_grain;     /* backward of a broadcast operand: columns per part */
    bool fresh;            /* backward: the gradient buffer is new, store instead of add */
} bin_job;

static inline void row_offsets(const bcast *bc, int64_t r, int64_t *ia, int64_t *ib) {
    int64_t i2 = r % bc->shape[2], i01 = r / bc->shape[2];
    int64_t i1 = i01 % bc->shape[1], i0 = i01 / bc->shape[1];
    *ia = i0 * bc->sa[0] + i1 * bc->sa[1] + i2 * bc->sa[2];
    *ib = i0 * bc->sb[0] + i1 * bc->sb[1] + i2 * bc->sb[2];
}

/* Runs the body for k < n, with x = X[k * sx] and y = Y[k * sy] for
 * strides sx, sy in {0, 1}, one loop per pattern. */
#define STRIDED_LOOP(n, X, sx, Y, sy, ...)                                            \
    do {                                                                               \
        if ((sx) && (sy))                                                              \
            for (int64_t k = 0; k < (n); k++) {                                        \
                ag_real x = (X)[k], y = (Y)[k];                                        \
                __VA_ARGS__;                                                                  \
            }                                                                          \
        else if (sx) {                                                                 \
            const ag_real y = (Y)[0];                                                  \
            for (int64_t k = 0; k < (n); k++) {                                        \
                ag_real x = (X)[k];                                                    \
                __VA_ARGS__;                                                                  \
            }                                                                          \
        } else if (sy) {                                                               \
            const ag_real x = (X)[0];                                                  \
            for (int64_t k = 0; k < (n); k++) {                                        \
                ag_real y = (Y)[k];                                                    \
                __VA_ARGS__;                                                                  \
            }                                                                          \
        } else {                                                                       \
            const ag_real x = (X)[0], y = (Y)[0];                                      \
            for (int64_t k = 0; k < (n); k++) __VA_ARGS__;                                    \
        }                                                                              \
    } while (0)

/* Saves the broadcast plan so backward does not redo the shape logic. */
static void save_plan(ag_node *n, const bcast *bc) {
    if (!n) return;
    bcast *p = ag__arena_alloc(sizeof *p);
    *p = *bc;
    n->saved = p;
}

static bool is_broadcast(const int64_t *s, const bcast *bc) {
    for (int d = 0; d < 4; d++)
        if (s[d] == 0 && bc->shape[d] != 1) return true;
    return false;
}

/* The output rows that read row xr of a broadcast operand with strides s,
 * in increasing order: for each dim the operand repeats along (stride 0),
 * every index; for the others, the operand's own index. */
#define FOR_ROWS_READING(bc, s, xr, r, ...)                                           \
    do {                                                                               \
        int64_t x_dim[3], rem = (xr);                                                  \
        for (int d = 2; d >= 0; d--) {                                                 \
            int64_t size = (s)[d] ? (bc).shape[d] : 1;                                 \
            x_dim[d] = rem % size;                                                     \
            rem /= size;                                                               \
        }                                                                              \
        for (int64_t i0 = (s)[0] ? x_dim[0] : 0; i0 < ((s)[0] ? x_dim[0] + 1 : (bc).shape[0]); i0++)          \
            for (int64_t i1 = (s)[1] ? x_dim[1] : 0; i1 < ((s)[1] ? x_dim[1] + 1 : (bc).shape[1]); i1++)      \
                for (int64_t i2 = (s)[2] ? x_dim[2] : 0; i2 < ((s)[2] ? x_dim[2] + 1 : (bc).shape[2]); i2++) { \
                    int64_t r = (i0 * (bc).shape[1] + i1) * (bc).shape[2] + i2;                               \
                    __VA_ARGS__;                                                              \
                }                                                                      \
    } while (0)

#define BINARY_OP(NAME, FWD, GRAD_A, GRAD_B)                                                         \
    AG_SIMD_CLONES static void NAME##_rows(void *ctx, int64_t r0, int64_t r1) {                     \
        const bin_job *j = ctx;                                                                      \
        for (int64_t r = r0; r < r1; r++) {                                                          \
            int64_t ia, ib;                                                                          \
            row_offsets(&j->bc, r, &ia, &ib);                                                        \
            ag_real *O = j->out + r * j->cols;                                                       \
            STRIDED_LOOP(j->cols, j->a + ia, j->bc.sa[3], j->b + ib, j->bc.sb[3], {                  \
                ag_real a = x, b = y;                                                                \
                O[k] = FWD;                                                                          \
            });                                                                                      \
        }                                                                                            \
    }                                                                                                \
    /* d/da (side 0) or d/db (side 1) of an operand with the output's shape,                       \
     * stored into a fresh gradient buffer or added to an existing one. */                          \
    AG_SIMD_CLONES static void NAME##_grad_rows(void *ctx, int64_t r0, int64_t r1, int side) {      \
        const bin_job *j = ctx;                                                                      \
        for (int64_t r = r0; r < r1; r++) {                                                          \
            int64_t ia, ib;                                                                          \
            row_offsets(&j->bc, r, &ia, &ib);                                                        \
            const ag_real *G = j->g + r * j->cols;                                                   \
            ag_real *GX = j->out + r * j->cols;                                                      \
            if (side == 0 && j->fresh)                                                               \
                STRIDED_LOOP(j->cols, j->a + ia, 1, j->b + ib, j->bc.sb[3], {                        \
                    ag_real a = x, b = y, g = G[k];                                                  \
                    (void)a; (void)b;                                                                \
                    GX[k] = GRAD_A;                                                                  \
                });                                                                                  \
            else if (side == 0)                                                                      \
                STRIDED_LOOP(j->cols, j->a + ia, 1, j->b + ib, j->bc.sb[3], {                        \
                    ag_real a = x, b = y, g = G[k];                                                  \
                    (void)a; (void)b;                                                                \
                    GX[k] += GRAD_A;                                                                 \
                });                                                                                  \
            else if (j->fresh)                                                                       \
                STRIDED_LOOP(j->cols, j->a + ia, j->bc.sa[3], j->b + ib, 1, {                        \
                    ag_real a = x, b = y, g = G[k];                                                  \
                    (void)a; (void)b;                                                                \
                    GX[k] = GRAD_B;                                                                  \
                });                                                                                  \
            else                                                                                     \
                STRIDED_LOOP(j->cols, j->a + ia, j->bc.sa[3], j->b + ib, 1, {                        \
                    ag_real a = x, b = y, g = G[k];                                                  \
                    (void)a; (void)b;                                                                \
                    GX[k] += GRAD_B;                                                                 \
                });                                                                                  \
        }                                                                                            \
    }                                                                                                \
    static void NAME##_grad_a_rows(void *ctx, int64_t r0, int64_t r1) { NAME##_grad_rows(ctx, r0, r1, 0); } \
    static void NAME##_grad_b_rows(void *ctx, int64_t r0, int64_t r1) { NAME##_grad_rows(ctx, r0, r1, 1); } \
    /* d/da or d/db of a broadcast operand: part = (its row, a column range). */                    \
    AG_SIMD_CLONES static void NAME##_grad_reduce(void *ctx, int64_t part, int side) {              \
        const bin_job *j = ctx;                                                                      \
        const int64_t *s = side == 0 ? j->bc.sa : j->bc.sb;                                          \
        int64_t xcols = s[3] ? j->cols : 1;                                                          \
        int64_t chunks = (xcols + j->col_grain - 1) / j->col_grain;                                  \
        int64_t xr = part / chunks, c0 = part % chunks * j->col_grain;                               \
        int64_t c1 = c0 + j->col_grain < xcols ? c0 + j->col_grain : xcols;                          \
        ag_real *GX = j->out + xr * xcols;                                                           \
        if (j->fresh) /* a new buffer: the sums start from 0, as in a zeroed one */                  \
            memset(GX + c0, 0, (size_t)(c1 - c0) * sizeof *GX);                                      \
        FOR_ROWS_READING(j->bc, s, xr, r, {                                                          \
            int64_t ia, ib;                                                                          \
            row_offsets(&j->bc, r, &ia, &ib);                                                        \
            const ag_real *G = j->g + r * j->cols;                                                   \
            if (s[3]) { /* a row: column k of the output reads element k */                          \
                if (side == 0)                                                                       \
                    STRIDED_LOOP(c1 - c0, j->a + ia + c0, 1, j->b + ib + c0 * j->bc.sb[3],           \
                                 j->bc.sb[3], {                                                      \
                        ag_real a = x, b = y, g = G[c0 + k];                                         \
                        (void)a; (void)b;                                                            \
                        GX[c0 + k] += GRAD_A;                                                        \
                    });                                                                              \
                else                                                                                 \
                    STRIDED_LOOP(c1 - c0, j->a + ia + c0 * j->bc.sa[3], j->bc.sa[3],                 \
                                 j->b + ib + c0, 1, {                                                \
                        ag_real a = x, b = y, g = G[c0 + k];                                         \
                        (void)a; (void)b;                                                            \
                        GX[c0 + k] += GRAD_B;                                                        \
                    });                                                                              \
            } else { /* one element, read by the whole output row: a sum in order */                 \
                ag_real acc = GX[0];                                                                 \
                if (side == 0)                                                                       \
                    STRIDED_LOOP(j->cols, j->a + ia, 0, j->b + ib, j->bc.sb[3], {                    \
                        ag_real a = x, b = y, g = G[k];                                              \
                        (void)a; (void)b;                                                            \
                        acc += GRAD_A;                                                               \
                    });                                                                              \
                else                                                                                 \
                    STRIDED_LOOP(j->cols, j->a + ia, j->bc.sa[3], j->b + ib, 0, {                    \
                        ag_real a = x, b = y, g = G[k];                                              \
                        (void)a; (void)b;                                                            \
                        acc += GRAD_B;                                                               \
                    });                                                                              \
                GX[0] = acc;                                                                         \
            }                                                                                        \
        });                                                                                          \
    }                                                                                                \
    static void NAME##_grad_a_reduce(void *ctx, int64_t part) { NAME##_grad_reduce(ctx, part, 0); } \
    static void NAME##_grad_b_reduce(void *ctx, int64_t part) { NAME##_grad_reduce(ctx, part, 1); }

/*        name     forward        d/da             d/db                   */
BINARY_OP(add,     a + b,         g,               g)
BINARY_OP(sub,     a - b,         g,               -g)
BINARY_OP(mul,     a * b,         g * b,           g * a)
BINARY_OP(div,     a / b,         g / b,           -g * a / (b * b))
BINARY_OP(maximum, a > b ? a : b, a > b ? g : 0,   a > b ? 0 : g)

/* The loops of each op, by its code (AG_BINARY_<name>). */
typedef struct {
    ag__range_fn rows, grad_rows[2]; /* forward; an operand with the output's shape (side 0, 1) */
    ag__part_fn grad_reduce[2];      /* a broadcast operand */
} binary_loops;
#define BINARY_LOOPS(NAME)                                                                                         \
    [AG_BINARY_##NAME] = {NAME##_rows,                                                                             \
                          {NAME##_grad_a_rows, NAME##_grad_b_rows},                                                \
                          {NAME##_grad_a_reduce, NAME##_grad_b_reduce}}
static const binary_loops binary_cpu_loops[AG_BINARY_COUNT] = {
    BINARY_LOOPS(add), BINARY_LOOPS(sub), BINARY_LOOPS(mul), BINARY_LOOPS(div), BINARY_LOOPS(maximum),
};

static void binary_forward_cpu(int op, const ag__kbcast *bc, const ag_real *a, const ag_real *b, ag_real *y) {
    bin_job j = {.bc = *bc, .a = a, .b = b, .out = y};
    j.cols = bc->shape[3];
    j.rows = (int64_t)bc->shape[0] * bc->shape[1] * bc->shape[2];
    if (j.rows * j.cols > 0) ag__parallel_range(j.rows, ag__units_per_part(j.cols), binary_cpu_loops[op].rows, &j);
}

static void binary_backward_cpu(int op, int side, const ag__kbcast *bc, const ag_real *a, const ag_real *b,
                                const ag_real *g, ag_real *gx, int64_t gx_size, bool fresh) {
    bin_job j = {.bc = *bc, .a = a, .b = b, .g = g, .out = gx, .fresh = fresh};
    j.cols = bc->shape[3];
    j.rows = (int64_t)bc->shape[0] * bc->shape[1] * bc->shape[2];
    j.col_grain = AG_GRAIN_ELEMENTWISE;
    int64_t readers = j.rows > 0 ? j.rows : 1; /* a bias row is read by every output row */
    if (readers > 64) { /* ~a grain of work per part, never under 256 columns (nor 0) */
        int64_t per_part = (AG_GRAIN_ELEMENTWISE / readers + 255) / 256 * 256;
        j.col_grain = per_part > 256 ? per_part : 256;
    }
    const int64_t *s = side == 0 ? bc->sa : bc->sb;
    if (!is_broadcast(s, bc)) {
        ag__parallel_range(j.rows, ag__units_per_part(j.cols), binary_cpu_loops[op].grad_rows[side], &j);
    } else if (gx_size > 0) {
        int64_t xcols = s[3] ? j.cols : 1; /* > 0: the operand has elements */
        int64_t chunks = (xcols + j.col_grain - 1) / j.col_grain;
        ag__parallel(gx_size / xcols * chunks, binary_cpu_loops[op].grad_reduce[side], &j);
    }
}

/* ---- the binary ops, on any device ---- */

/* n->iarg[0]: the op's code; n->saved: the plan. */
static void binary_backward(ag_node *n) {
    const ag__elementwise_kernels *k = ag__elementwise_on(n->op, n->out->device);
    for (int side = 0; side < 2; side++) {
        if (!ag__wants(n, side)) continue;
        bool fresh;
        ag_real *gx = ag__grad_write(n->in[side], &fresh);
        k->binary_backward(n->iarg[0], side, n->saved, n->in[0]->data, n->in[1]->data, n->out->grad, gx,
                           n->in[side]->size, fresh);
    }
}

static ag_tensor *binary(const char *op, int code, ag_tensor *x, ag_tensor *y) {
    ag__need(op, "the second input", y);
    int ndim;
    bcast bc = broadcast(op, x, y, &ndim);
    ag_tensor *out = bcast_out(&bc, ndim, x->device);
    ag__elementwise_on(op, x->device)->binary_forward(code, &bc, x->data, y->data, out->data);
    ag_node *n = ag__record(op, binary_backward, out, 2, (ag_tensor *[]){x, y});
    if (n) { /* the plan, so backward does not redo the shape logic */
        n->iarg[0] = code;
        save_plan(n, &bc);
    }
    return out;
}

ag_tensor *ag_add(ag_tensor *x, ag_tensor *y) { return binary("ag_add", AG_BINARY_add, x, y); }
ag_tensor *ag_sub(ag_tensor *x, ag_tensor *y) { return binary("ag_sub", AG_BINARY_sub, x, y); }
ag_tensor *ag_mul(ag_tensor *x, ag_tensor *y) { return binary("ag_mul", AG_BINARY_mul, x, y); }
ag_tensor *ag_div(ag_tensor *x, ag_tensor *y) { return binary("ag_div", AG_BINARY_div, x, y); }
ag_tensor *ag_maximum(ag_tensor *x, ag_tensor *y) { return binary("ag_maximum", AG_BINARY_maximum, x, y); }

/* ---- scalar ops: y = a*x + b folds both into one backward ---- */

typedef struct {
    const ag_real *x;
    ag_real *y;
    ag_real scale, shift;
    bool fresh;
} affine_job;

AG_SIMD_CLONES static void affine_range(void *ctx, int64_t i0, int64_t i1) {
    const affine_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] = j->scale * j->x[i] + j->shift;
}

/* Backward accumulates scale * g: the same loop with y = gx, x = g, shift 0
 * would round differently (gx + s g is one rounding, s g + gx another);
 * kept as its own loop. */
AG_SIMD_CLONES static void affine_grad_range(void *ctx, int64_t i0, int64_t i1) {
    const affine_job *j = ctx;
    if (j->fresh)
        for (int64_t i = i0; i < i1; i++) j->y[i] = j->scale * j->x[i];
    else
        for (int64_t i = i0; i < i1; i++) j->y[i] += j->scale * j->x[i];
}

static void affine_forward_cpu(const ag_real *x, ag_real *y, ag_real scale, ag_real shift, int64_t n) {
    affine_job j = {x, y, scale, shift, false};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, affine_range, &j);
}

static void affine_backward_cpu(const ag_real *g, ag_real *gx, ag_real scale, int64_t n, bool fresh) {
    affine_job j = {g, gx, scale, 0, fresh};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, affine_grad_range, &j);
}

static void affine_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__elementwise_on(n->op, n->out->device)
        ->affine_backward(n->out->grad, gx, (ag_real)n->farg[0], n->out->size, fresh);
}

static ag_tensor *affine(const char *op, ag_tensor *x, double scale, double shift) {
    ag_device dev = ag__check_same_device(op, x, NULL);
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__elementwise_on(op, dev)->affine_forward(x->data, out->data, (ag_real)scale, (ag_real)shift, x->size);
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

typedef struct {
    const ag_real *x;
    ag_real *y;           /* forward: written */
    const ag_real *fy;    /* backward: the forward's output */
    const ag_real *g;
    ag_real *gx;
    bool fresh;           /* backward: gx is new, store instead of add */
} unary_job;

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
                                                    ag_real *restrict GX, int64_t n,   \
                                                    bool fresh) {                      \
        if (fresh)                                                                     \
            for (int64_t i = 0; i < n; i++) {                                          \
                ag_real x = X[i], y = Y[i];                                            \
                (void)x; (void)y;                                                      \
                GX[i] = G[i] * (DERIV);                                                \
            }                                                                          \
        else                                                                           \
            for (int64_t i = 0; i < n; i++) {                                          \
                ag_real x = X[i], y = Y[i];                                            \
                (void)x; (void)y;                                                      \
                GX[i] += G[i] * (DERIV);                                               \
            }                                                                          \
    }                                                                                  \
    static void NAME##_forward_range(void *ctx, int64_t i0, int64_t i1) {              \
        const unary_job *j = ctx;                                                      \
        NAME##_forward_loop(j->x + i0, j->y + i0, i1 - i0);                            \
    }                                                                                  \
    static void NAME##_backward_range(void *ctx, int64_t i0, int64_t i1) {             \
        const unary_job *j = ctx;                                                      \
        NAME##_backward_loop(j->x + i0, j->fy + i0, j->g + i0, j->gx + i0, i1 - i0,    \
                             j->fresh);                                                \
    }

/* The table (name, forward, derivative) is ops/unary_table.h, shared with
 * the CUDA kernels of ops/cuda/elementwise.cu. */
AG_UNARY_TABLE(UNARY_OP)

/* The loops of each op, by its index (AG_UNARY_<NAME>). */
#define UNARY_FORWARD_RANGE(NAME, FWD, DERIV) [AG_UNARY_##NAME] = NAME##_forward_range,
#define UNARY_BACKWARD_RANGE(NAME, FWD, DERIV) [AG_UNARY_##NAME] = NAME##_backward_range,
static const ag__range_fn unary_forward_ranges[AG_UNARY_COUNT] = {AG_UNARY_TABLE(UNARY_FORWARD_RANGE)};
static const ag__range_fn unary_backward_ranges[AG_UNARY_COUNT] = {AG_UNARY_TABLE(UNARY_BACKWARD_RANGE)};

static void unary_forward_cpu(int op, const ag_real *x, ag_real *y, int64_t n) {
    unary_job j = {.x = x, .y = y};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, unary_forward_ranges[op], &j);
}

static void unary_backward_cpu(int op, const ag_real *x, const ag_real *y, const ag_real *g, ag_real *gx, int64_t n,
                               bool fresh) {
    unary_job j = {.x = x, .fy = y, .g = g, .gx = gx, .fresh = fresh};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, unary_backward_ranges[op], &j);
}

/* n->iarg[0]: the op's index in the table. */
static void unary_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__elementwise_on(n->op, n->out->device)
        ->unary_backward(n->iarg[0], n->in[0]->data, n->out->data, n->out->grad, gx, n->out->size, fresh);
}

static ag_tensor *unary(const char *op, int code, ag_tensor *in) {
    ag_device dev = ag__check_same_device(op, in, NULL);
    ag_tensor *out = ag__empty_on(dev, in->ndim, in->shape);
    ag__elementwise_on(op, dev)->unary_forward(code, in->data, out->data, in->size);
    ag_node *n = ag__record(op, unary_backward, out, 1, &in);
    if (n) n->iarg[0] = code;
    return out;
}

#define UNARY_ENTRY(NAME, FWD, DERIV) \
    ag_tensor *ag_##NAME(ag_tensor *in) { return unary("ag_" #NAME, AG_UNARY_##NAME, in); }
AG_UNARY_TABLE(UNARY_ENTRY)

/* ---- the gated linear unit: act(a) * b over [a | b], the table's act ---- */

typedef struct {
    const ag_real *x, *g;
    ag_real *y, *gx;
    int F;
    bool fresh;
} glu_job;

#define GLU_OP(NAME, FWD, DERIV)                                                                            \
    AG_SIMD_CLONES static void NAME##_glu_forward_loop(const ag_real *restrict A, const ag_real *restrict V,    \
                                                      ag_real *restrict Y, int n) {                          \
        for (int i = 0; i < n; i++) {                                                                        \
            ag_real x = A[i];                                                                                \
            Y[i] = (FWD) * V[i];                                                                             \
        }                                                                                                    \
    }                                                                                                        \
    AG_SIMD_CLONES static void NAME##_glu_backward_loop(const ag_real *restrict A, const ag_real *restrict V,   \
                                                       const ag_real *restrict G, ag_real *restrict GA,      \
                                                       ag_real *restrict GV, int n, bool fresh) {            \
        for (int i = 0; i < n; i++) {                                                                        \
            ag_real x = A[i], y = FWD;                                                                       \
            ag_real ga = G[i] * V[i] * (DERIV), gv = G[i] * y;                                               \
            GA[i] = fresh ? ga : GA[i] + ga;                                                                 \
            GV[i] = fresh ? gv : GV[i] + gv;                                                                 \
        }                                                                                                    \
    }                                                                                                        \
    static void NAME##_glu_forward_rows(void *ctx, int64_t r0, int64_t r1) {                                 \
        const glu_job *j = ctx;                                                                              \
        for (int64_t r = r0; r < r1; r++)                                                                    \
            NAME##_glu_forward_loop(j->x + r * 2 * j->F, j->x + r * 2 * j->F + j->F, j->y + r * j->F, j->F); \
    }                                                                                                        \
    static void NAME##_glu_backward_rows(void *ctx, int64_t r0, int64_t r1) {                                \
        const glu_job *j = ctx;                                                                              \
        for (int64_t r = r0; r < r1; r++) {                                                                  \
            const ag_real *a = j->x + r * 2 * j->F;                                                          \
            ag_real *ga = j->gx + r * 2 * j->F;                                                              \
            NAME##_glu_backward_loop(a, a + j->F, j->g + r * j->F, ga, ga + j->F, j->F, j->fresh);           \
        }                                                                                                    \
    }
AG_UNARY_TABLE(GLU_OP)

#define GLU_FORWARD_ROWS(NAME, FWD, DERIV) [AG_UNARY_##NAME] = NAME##_glu_forward_rows,
#define GLU_BACKWARD_ROWS(NAME, FWD, DERIV) [AG_UNARY_##NAME] = NAME##_glu_backward_rows,
static const ag__range_fn glu_forward_rows[AG_UNARY_COUNT] = {AG_UNARY_TABLE(GLU_FORWARD_ROWS)};
static const ag__range_fn glu_backward_rows[AG_UNARY_COUNT] = {AG_UNARY_TABLE(GLU_BACKWARD_ROWS)};

static void glu_forward_cpu(int op, const ag_real *x, ag_real *y, int64_t rows, int F) {
    glu_job j = {.x = x, .y = y, .F = F};
    ag__parallel_range(rows, ag__units_per_part(3 * (int64_t)F), glu_forward_rows[op], &j);
}

static void glu_backward_cpu(int op, const ag_real *x, const ag_real *g, ag_real *gx, int64_t rows, int F, bool fresh) {
    glu_job j = {.x = x, .g = g, .gx = gx, .F = F, .fresh = fresh};
    ag__parallel_range(rows, ag__units_per_part(5 * (int64_t)F), glu_backward_rows[op], &j);
}

/* n->iarg[0]: the activation's index in the unary table. */
static void glu_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    int F = x->shape[x->ndim - 1] / 2;
    bool fresh;
    ag_real *gx = ag__grad_write(x, &fresh);
    ag__elementwise_on(n->op, x->device)->glu_backward(n->iarg[0], x->data, n->out->grad, gx, F ? x->size / (2 * F) : 0,
                                                       F, fresh);
}

ag_tensor *ag_glu(ag_tensor *x, ag_act act) {
    const char *op = "ag_glu";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim < 1 || x->shape[x->ndim - 1] % 2)
        ag__fatal(op, "x %s: want [..., 2F], the gate's F features then the value's", ag_shape_str(x, sx, sizeof sx));
    int F = x->shape[x->ndim - 1] / 2, last = x->ndim - 1;
    int code;
    switch (act) {
    case AG_ACT_NONE: return ag_mul(ag_slice(x, last, 0, F), ag_slice(x, last, F, 2 * F)); /* bilinear */
    case AG_ACT_RELU: code = AG_UNARY_relu; break;
    case AG_ACT_ELU: code = AG_UNARY_elu; break;
    case AG_ACT_TANH: code = AG_UNARY_tanh; break;
    case AG_ACT_SIGMOID: code = AG_UNARY_sigmoid; break;
    case AG_ACT_GELU: code = AG_UNARY_gelu; break;
    case AG_ACT_SILU: code = AG_UNARY_silu; break;
    default: ag__fatal(op, "activation %d is not an ag_act", (int)act);
    }
    int shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[last] = F;
    ag_tensor *out = ag__empty_on(dev, x->ndim, shape);
    ag__elementwise_on(op, dev)->glu_forward(code, x->data, out->data, F ? x->size / (2 * F) : 0, F);
    ag_node *n = ag__record(op, glu_backward, out, 1, &x);
    if (n) n->iarg[0] = code;
    return out;
}

/* ---- clamp: the gradient passes only strictly inside [lo, hi] ---- */

static void clamp_forward_cpu(const ag_real *x, ag_real *y, ag_real lo, ag_real hi, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = x[i] < lo ? lo : x[i] > hi ? hi : x[i];
}

/* Outside (lo, hi) a fresh buffer gets 0 and an accumulated one is left as
 * it is. */
static void clamp_backward_cpu(const ag_real *x, const ag_real *g, ag_real *gx, ag_real lo, ag_real hi, int64_t n,
                               bool fresh) {
    for (int64_t i = 0; i < n; i++) {
        if (x[i] > lo && x[i] < hi) gx[i] = fresh ? g[i] : gx[i] + g[i];
        else if (fresh) gx[i] = 0;
    }
}

/* n->farg: lo, hi. */
static void clamp_backward(ag_node *n) {
    bool fresh;
    ag_real *gx = ag__grad_write(n->in[0], &fresh);
    ag__elementwise_on(n->op, n->out->device)
        ->clamp_backward(n->in[0]->data, n->out->grad, gx, (ag_real)n->farg[0], (ag_real)n->farg[1], n->out->size,
                         fresh);
}

ag_tensor *ag_clamp(ag_tensor *x, double lo, double hi) {
    ag_device dev = ag__check_same_device("ag_clamp", x, NULL);
    if (!(lo <= hi)) ag__fatal("ag_clamp", "empty range [%g, %g]", lo, hi);
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    ag__elementwise_on("ag_clamp", dev)->clamp_forward(x->data, out->data, (ag_real)lo, (ag_real)hi, x->size);
    ag_node *n = ag__record("ag_clamp", clamp_backward, out, 1, &x);
    if (n) {
        n->farg[0] = lo;
        n->farg[1] = hi;
    }
    return out;
}

/* ---- lerp: a fusion gate's a + w (b - a) in one pass each way ----
 *
 * The same operations in the same order as ag_add(a, ag_mul(w, ag_sub(b,
 * a))), forward and backward (a's gradient g - g w is the add's g plus the
 * sub's -(g w)), so a model that writes its gate either way computes the
 * same bits - unless a also takes gradient from ops after the gate: the
 * composition adds g to that first and -(g w) after, lerp their sum, one
 * rounding apart.  One pass each way where the composition took three
 * kernels forward and up to six backward (a binary op's two sides). */

typedef struct {
    const ag_real *a, *b, *w, *g;
    ag_real *y, *ga, *gb, *gw;
    bool fresh_a, fresh_b, fresh_w;
} lerp_job;

AG_SIMD_CLONES static void lerp_range(void *ctx, int64_t i0, int64_t i1) {
    const lerp_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->y[i] = j->a[i] + j->w[i] * (j->b[i] - j->a[i]);
}

static inline void lerp_grad_store(ag_real *gx, bool fresh, int64_t i, ag_real v) { gx[i] = fresh ? v : gx[i] + v; }

static void lerp_grad_range(void *ctx, int64_t i0, int64_t i1) {
    const lerp_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        ag_real g = j->g[i], gw = g * j->w[i];
        if (j->ga) lerp_grad_store(j->ga, j->fresh_a, i, g - gw);
        if (j->gb) lerp_grad_store(j->gb, j->fresh_b, i, gw);
        if (j->gw) lerp_grad_store(j->gw, j->fresh_w, i, g * (j->b[i] - j->a[i]));
    }
}

static void lerp_forward_cpu(const ag_real *a, const ag_real *b, const ag_real *w, ag_real *y, int64_t n) {
    lerp_job j = {.a = a, .b = b, .w = w, .y = y};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, lerp_range, &j);
}

static void lerp_backward_cpu(const ag_real *a, const ag_real *b, const ag_real *w, const ag_real *g, ag_real *ga,
                              bool fresh_a, ag_real *gb, bool fresh_b, ag_real *gw, bool fresh_w, int64_t n) {
    lerp_job j = {.a = a, .b = b, .w = w, .g = g, .ga = ga, .gb = gb, .gw = gw,
                  .fresh_a = fresh_a, .fresh_b = fresh_b, .fresh_w = fresh_w};
    ag__parallel_range(n, AG_GRAIN_ELEMENTWISE, lerp_grad_range, &j);
}

static void lerp_backward(ag_node *n) {
    bool fa = false, fb = false, fw = false;
    ag_real *ga = ag__wants(n, 0) ? ag__grad_write(n->in[0], &fa) : NULL;
    ag_real *gb = ag__wants(n, 1) ? ag__grad_write(n->in[1], &fb) : NULL;
    ag_real *gw = ag__wants(n, 2) ? ag__grad_write(n->in[2], &fw) : NULL;
    ag__elementwise_on(n->op, n->out->device)
        ->lerp_backward(n->in[0]->data, n->in[1]->data, n->in[2]->data, n->out->grad, ga, fa, gb, fb, gw, fw,
                        n->out->size);
}

ag_tensor *ag_lerp(ag_tensor *a, ag_tensor *b, ag_tensor *w) {
    ag__need("ag_lerp", "b", b);
    ag__need("ag_lerp", "the weight w", w);
    ag_device dev = ag__check_same_device("ag_lerp", a, b);
    ag__check_same_device("ag_lerp", a, w);
    if (!ag_same_shape(a, b) || !ag_same_shape(a, w)) {
        char sa[64], sb[64], sw[64];
        ag__fatal("ag_lerp", "a %s, b %s and w %s: lerp takes three tensors of one shape (for broadcasting, "
                  "compose ag_add, ag_mul and ag_sub)", ag_shape_str(a, sa, sizeof sa), ag_shape_str(b, sb, sizeof sb),
                  ag_shape_str(w, sw, sizeof sw));
    }
    ag_tensor *out = ag__empty_on(dev, a->ndim, a->shape);
    ag__elementwise_on("ag_lerp", dev)->lerp_forward(a->data, b->data, w->data, out->data, a->size);
    ag__record("ag_lerp", lerp_backward, out, 3, (ag_tensor *[]){a, b, w});
    return out;
}

/* ---- fills and accumulation, for the engine and other families ---- */

static void fill_cpu(ag_real *y, ag_real value, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = value;
}

static void add_into_cpu(ag_real *y, const ag_real *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

/* ---- the CPU's table (ops/elementwise.h; CUDA's is in ops/cuda/elementwise.cu) ---- */

static const ag__elementwise_kernels elementwise_cpu = {
    .unary_forward = unary_forward_cpu,
    .unary_backward = unary_backward_cpu,
    .binary_forward = binary_forward_cpu,
    .binary_backward = binary_backward_cpu,
    .affine_forward = affine_forward_cpu,
    .affine_backward = affine_backward_cpu,
    .clamp_forward = clamp_forward_cpu,
    .clamp_backward = clamp_backward_cpu,
    .lerp_forward = lerp_forward_cpu,
    .lerp_backward = lerp_backward_cpu,
    .fill = fill_cpu,
    .add_into = add_into_cpu,
    .glu_forward = glu_forward_cpu,
    .glu_backward = glu_backward_cpu,
};
AG_DISPATCH(elementwise, elementwise_cpu)
