/* elementwise.cu - the CUDA side of ops/elementwise.c: binary ops with
 * broadcasting, the scalar affine op, and the unary table, whose
 * expressions are the CPU's own (ops/unary_table.h, ops/vecmath.h). */
#include "../../graph/prelude.cuh"
#include "../elementwise.h"
#include "../vecmath.h"
#include "../unary_table.h"

/* ---- unary: one kernel per table row ---- */

#define UNARY_KERNELS(NAME, FWD, DERIV)                                                           \
    __global__ void NAME##_forward_kernel(const ag_real *X, ag_real *Y, int64_t n) {             \
        AG_CUDA_FOR(i, n) {                                                                       \
            ag_real x = X[i];                                                                     \
            Y[i] = FWD;                                                                           \
        }                                                                                         \
    }                                                                                             \
    __global__ void NAME##_backward_kernel(const ag_real *X, const ag_real *Y, const ag_real *G,  \
                                           ag_real *GX, int64_t n, bool fresh) {                  \
        AG_CUDA_FOR(i, n) {                                                                       \
            [[maybe_unused]] ag_real x = X[i];                                                    \
            [[maybe_unused]] ag_real y = Y[i];                                                    \
            ag_real d = G[i] * (DERIV);                                                           \
            GX[i] = fresh ? d : GX[i] + d;                                                        \
        }                                                                                         \
    }
AG_UNARY_TABLE(UNARY_KERNELS)

typedef void (*unary_fwd)(const ag_real *, ag_real *, int64_t);
typedef void (*unary_bwd)(const ag_real *, const ag_real *, const ag_real *, ag_real *, int64_t, bool);
#define UNARY_FWD_ENTRY(NAME, FWD, DERIV) NAME##_forward_kernel,
#define UNARY_BWD_ENTRY(NAME, FWD, DERIV) NAME##_backward_kernel,
static const unary_fwd unary_forward_kernels[] = {AG_UNARY_TABLE(UNARY_FWD_ENTRY)};
static const unary_bwd unary_backward_kernels[] = {AG_UNARY_TABLE(UNARY_BWD_ENTRY)};

static void unary_forward(int op, const ag_real *x, ag_real *y, int64_t n) {
    if (n > 0) ag__launch(unary_forward_kernels[op], ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, y, n);
}

static void unary_backward(int op, const ag_real *x, const ag_real *y, const ag_real *g, ag_real *gx, int64_t n,
                           bool fresh) {
    if (n > 0) ag__launch(unary_backward_kernels[op], ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, y, g, gx, n, fresh);
}

/* ---- binary ops with broadcasting ---- */

/* op(a, b) and its two partial derivatives times g, as ops/elementwise.c's
 * BINARY_OP table writes them. */
__device__ static inline ag_real binary_value(int op, ag_real a, ag_real b) {
    switch (op) {
    case AG_BINARY_add: return a + b;
    case AG_BINARY_sub: return a - b;
    case AG_BINARY_mul: return a * b;
    case AG_BINARY_div: return a / b;
    default: return a > b ? a : b;
    }
}

__device__ static inline ag_real binary_grad(int op, int side, ag_real a, ag_real b, ag_real g) {
    switch (op) {
    case AG_BINARY_add: return g;
    case AG_BINARY_sub: return side == 0 ? g : -g;
    case AG_BINARY_mul: return side == 0 ? g * b : g * a;
    case AG_BINARY_div: return side == 0 ? g / b : -g * a / (b * b);
    default: return (a > b) == (side == 0) ? g : 0;
    }
}

__global__ void binary_forward_kernel(int op, ag__kbcast bc, const ag_real *A, const ag_real *B, ag_real *Y,
                                      int64_t n) {
    AG_CUDA_FOR(i, n) {
        int64_t ia, ib;
        ag__offsets4(i, bc.shape, bc.sa, bc.sb, &ia, &ib);
        Y[i] = binary_value(op, A[ia], B[ib]);
    }
}

static void binary_forward(int op, const ag__kbcast *bc, const ag_real *a, const ag_real *b, ag_real *y) {
    int64_t n = (int64_t)bc->shape[0] * bc->shape[1] * bc->shape[2] * bc->shape[3];
    if (n > 0) ag__launch(binary_forward_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, op, *bc, a, b, y, n);
}

/* Thread per element of the operand X (strides s): its coordinates in the
 * output's 4 dims are fixed where s[d] != 0 (or the dim is 1) and run over
 * the whole dim where X is repeated; the repeated coordinates are visited
 * in increasing output order, as the CPU's serial sum would. */
__global__ void binary_backward_kernel(int op, int side, ag__kbcast bc, const ag_real *A, const ag_real *B,
                                       const ag_real *G, ag_real *GX, int64_t gx_size, bool fresh) {
    const int64_t *s = side == 0 ? bc.sa : bc.sb;
    int xdim[4]; /* X's extent along each output dim */
    for (int d = 0; d < 4; d++) xdim[d] = s[d] || bc.shape[d] == 1 ? bc.shape[d] : 1;
    AG_CUDA_FOR(x, gx_size) {
        int fixed[4];
        int64_t rest = x;
        for (int d = 3; d >= 0; d--) {
            fixed[d] = (int)(rest % xdim[d]);
            rest /= xdim[d];
        }
        int lo[4], hi[4];
        for (int d = 0; d < 4; d++) {
            bool repeated = xdim[d] == 1 && bc.shape[d] > 1;
            lo[d] = repeated ? 0 : fixed[d];
            hi[d] = repeated ? bc.shape[d] : fixed[d] + 1;
        }
        ag_real acc = fresh ? 0 : GX[x];
        for (int i0 = lo[0]; i0 < hi[0]; i0++)
            for (int i1 = lo[1]; i1 < hi[1]; i1++)
                for (int i2 = lo[2]; i2 < hi[2]; i2++)
                    for (int i3 = lo[3]; i3 < hi[3]; i3++) {
                        int64_t o = ((((int64_t)i0 * bc.shape[1] + i1) * bc.shape[2] + i2) * bc.shape[3]) + i3;
                        int64_t ia = i0 * bc.sa[0] + i1 * bc.sa[1] + i2 * bc.sa[2] + i3 * bc.sa[3];
                        int64_t ib = i0 * bc.sb[0] + i1 * bc.sb[1] + i2 * bc.sb[2] + i3 * bc.sb[3];
                        acc += binary_grad(op, side, A[ia], B[ib], G[o]);
                    }
        GX[x] = acc;
    }
}

static void binary_backward(int op, int side, const ag__kbcast *bc, const ag_real *a, const ag_real *b, const ag_real *g,
                            ag_real *gx, int64_t gx_size, bool fresh) {
    if (gx_size > 0)
        ag__launch(binary_backward_kernel, ag__cuda_blocks(gx_size), AG_CUDA_THREADS, 0, op, side, *bc, a, b, g, gx,
                   gx_size, fresh);
}

/* ---- y = scale x + shift, fills, accumulation ---- */

__global__ void affine_kernel(const ag_real *X, ag_real *Y, ag_real scale, ag_real shift, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = scale * X[i] + shift;
}

__global__ void affine_grad_kernel(const ag_real *G, ag_real *GX, ag_real scale, int64_t n, bool fresh) {
    AG_CUDA_FOR(i, n) GX[i] = fresh ? scale * G[i] : GX[i] + scale * G[i];
}

__global__ void fill_kernel(ag_real *Y, ag_real value, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = value;
}

__global__ void add_into_kernel(ag_real *Y, const ag_real *X, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] += X[i];
}

static void affine_forward(const ag_real *x, ag_real *y, ag_real scale, ag_real shift, int64_t n) {
    if (n > 0) ag__launch(affine_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, y, scale, shift, n);
}

static void affine_backward(const ag_real *g, ag_real *gx, ag_real scale, int64_t n, bool fresh) {
    if (n > 0) ag__launch(affine_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, g, gx, scale, n, fresh);
}

static void fill_values(ag_real *y, ag_real value, int64_t n) {
    if (n > 0) ag__launch(fill_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, y, value, n);
}

static void add_into(ag_real *y, const ag_real *x, int64_t n) {
    if (n > 0) ag__launch(add_into_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, y, x, n);
}

/* ---- clamp: ops/elementwise.c's expressions ---- */

__global__ void clamp_kernel(const ag_real *X, ag_real *Y, ag_real lo, ag_real hi, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = X[i] < lo ? lo : X[i] > hi ? hi : X[i];
}

/* The gradient passes strictly inside (lo, hi); outside, a fresh buffer
 * gets 0 and an accumulated one is left as it is. */
__global__ void clamp_grad_kernel(const ag_real *X, const ag_real *G, ag_real *GX, ag_real lo, ag_real hi, int64_t n,
                                  bool fresh) {
    AG_CUDA_FOR(i, n) {
        if (X[i] > lo && X[i] < hi) GX[i] = fresh ? G[i] : GX[i] + G[i];
        else if (fresh) GX[i] = 0;
    }
}

static void clamp_forward(const ag_real *x, ag_real *y, ag_real lo, ag_real hi, int64_t n) {
    if (n > 0) ag__launch(clamp_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, y, lo, hi, n);
}

static void clamp_backward(const ag_real *x, const ag_real *g, ag_real *gx, ag_real lo, ag_real hi, int64_t n,
                           bool fresh) {
    if (n > 0) ag__launch(clamp_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, x, g, gx, lo, hi, n, fresh);
}

/* ---- lerp: ops/elementwise.c's expressions, in its order ---- */

__global__ void lerp_kernel(const ag_real *A, const ag_real *B, const ag_real *W, ag_real *Y, int64_t n) {
    AG_CUDA_FOR(i, n) Y[i] = A[i] + W[i] * (B[i] - A[i]);
}

__device__ static inline void lerp_grad_store(ag_real *GX, bool fresh, int64_t i, ag_real v) {
    GX[i] = fresh ? v : GX[i] + v;
}

__global__ void lerp_grad_kernel(const ag_real *A, const ag_real *B, const ag_real *W, const ag_real *G, ag_real *GA,
                                 bool fresh_a, ag_real *GB, bool fresh_b, ag_real *GW, bool fresh_w, int64_t n) {
    AG_CUDA_FOR(i, n) {
        ag_real g = G[i], gw = g * W[i];
        if (GA) lerp_grad_store(GA, fresh_a, i, g - gw);
        if (GB) lerp_grad_store(GB, fresh_b, i, gw);
        if (GW) lerp_grad_store(GW, fresh_w, i, g * (B[i] - A[i]));
    }
}

static void lerp_forward(const ag_real *a, const ag_real *b, const ag_real *w, ag_real *y, int64_t n) {
    if (n > 0) ag__launch(lerp_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, a, b, w, y, n);
}

static void lerp_backward(const ag_real *a, const ag_real *b, const ag_real *w, const ag_real *g, ag_real *ga,
                          bool fresh_a, ag_real *gb, bool fresh_b, ag_real *gw, bool fresh_w, int64_t n) {
    if (n > 0)
        ag__launch(lerp_grad_kernel, ag__cuda_blocks(n), AG_CUDA_THREADS, 0, a, b, w, g, ga, fresh_a, gb, fresh_b, gw,
                   fresh_w, n);
}

/* ---- the gated linear unit: a thread an output element, f(a) made again in backward ---- */

#define GLU_KERNELS(NAME, FWD, DERIV)                                                                    \
    __global__ void NAME##_glu_forward_kernel(const ag_real *X, ag_real *Y, int64_t rows, int F) {        \
        AG_CUDA_FOR(e, rows * F) {                                                                        \
            int64_t r = e / F, i = e % F;                                                                 \
            ag_real x = X[r * 2 * F + i];                                                                 \
            Y[e] = (FWD) * X[r * 2 * F + F + i];                                                          \
        }                                                                                                 \
    }                                                                                                     \
    __global__ void NAME##_glu_backward_kernel(const ag_real *X, const ag_real *G, ag_real *GX, int64_t rows, \
                                               int F, bool fresh) {                                       \
        AG_CUDA_FOR(e, rows * F) {                                                                        \
            int64_t r = e / F, i = e % F, a = r * 2 * F + i;                                              \
            ag_real x = X[a], y = FWD, v = X[a + F];                                                      \
            ag_real ga = G[e] * v * (DERIV), gv = G[e] * y;                                               \
            GX[a] = fresh ? ga : GX[a] + ga;                                                              \
            GX[a + F] = fresh ? gv : GX[a + F] + gv;                                                      \
        }                                                                                                 \
    }
AG_UNARY_TABLE(GLU_KERNELS)

typedef void (*glu_fwd)(const ag_real *, ag_real *, int64_t, int);
typedef void (*glu_bwd)(const ag_real *, const ag_real *, ag_real *, int64_t, int, bool);
#define GLU_FWD_ENTRY(NAME, FWD, DERIV) NAME##_glu_forward_kernel,
#define GLU_BWD_ENTRY(NAME, FWD, DERIV) NAME##_glu_backward_kernel,
static const glu_fwd glu_forward_kernels[] = {AG_UNARY_TABLE(GLU_FWD_ENTRY)};
static const glu_bwd glu_backward_kernels[] = {AG_UNARY_TABLE(GLU_BWD_ENTRY)};

static void glu_forward(int op, const ag_real *x, ag_real *y, int64_t rows, int F) {
    if (rows > 0 && F > 0)
        ag__launch(glu_forward_kernels[op], ag__cuda_blocks(rows * F), AG_CUDA_THREADS, 0, x, y, rows, F);
}

static void glu_backward(int op, const ag_real *x, const ag_real *g, ag_real *gx, int64_t rows, int F, bool fresh) {
    if (rows > 0 && F > 0)
        ag__launch(glu_backward_kernels[op], ag__cuda_blocks(rows * F), AG_CUDA_THREADS, 0, x, g, gx, rows, F, fresh);
}

extern "C" const ag__elementwise_kernels ag__elementwise_cuda = {
    unary_forward,  unary_backward, binary_forward, binary_backward, affine_forward, affine_backward,
    clamp_forward,  clamp_backward, lerp_forward,   lerp_backward,   fill_values,    add_into,
    glu_forward,    glu_backward,
};
