/* rope.cu - the CUDA side of ops/rope.c: the angles' table a thread an
 * entry, the rotation a thread a pair.  The angles are taken in double
 * from the same expression as the CPU's, then rounded once. */
#include "../../graph/prelude.cuh"
#include "../rope.h"

__global__ void rope_angles_kernel(ag_real *cs, int N, int head_dim, int pos0, double base) {
    int half = head_dim / 2;
    AG_CUDA_FOR(e, (int64_t)N * half) {
        int t = (int)(e / half), i = (int)(e % half);
        double a = (double)(pos0 + t) * pow(base, -(double)(2 * i) / head_dim);
        cs[2 * e] = (ag_real)cos(a);
        cs[2 * e + 1] = (ag_real)sin(a);
    }
}

__global__ void rope_rotate_kernel(const ag_real *X, const ag_real *CS, ag_real *Y, int64_t rows, int N, int D,
                                   int head_dim, int sign, bool fresh) {
    int half = head_dim / 2, pairs = D / 2;
    AG_CUDA_FOR(p, rows * pairs) {
        int64_t r = p / pairs;
        int col = (int)(p % pairs) * 2, i = (col % head_dim) / 2;
        const ag_real *cs = CS + (r % N) * 2 * half + 2 * i;
        ag_real co = cs[0], si = sign * cs[1];
        ag_real a = X[r * D + col], b = X[r * D + col + 1];
        ag_real ya = a * co - b * si, yb = a * si + b * co;
        ag_real *y = Y + r * D + col;
        y[0] = fresh ? ya : y[0] + ya;
        y[1] = fresh ? yb : y[1] + yb;
    }
}

static void angles(ag_real *cs, int N, int head_dim, int pos0, double base) {
    if (N > 0) ag__launch(rope_angles_kernel, ag__cuda_blocks((int64_t)N * (head_dim / 2)), AG_CUDA_THREADS, 0, cs, N,
                          head_dim, pos0, base);
}

static void rotate(const ag_real *x, const ag_real *cs, ag_real *y, int64_t rows, int N, int D, int head_dim, int sign,
                   bool fresh) {
    if (rows > 0 && D > 0)
        ag__launch(rope_rotate_kernel, ag__cuda_blocks(rows * (D / 2)), AG_CUDA_THREADS, 0, x, cs, y, rows, N, D,
                   head_dim, sign, fresh);
}

extern "C" const ag__rope_kernels ag__rope_cuda = {angles, rotate};
