/* rope.c - rotary position embeddings (RoFormer, Su et al. 2021, eq. 34):
 * each pair (x_2i, x_2i+1) of a head's features at position m is turned
 * by the angle m theta_i, theta_i = base^(-2i / head_dim):
 *
 *     y_2i   = x_2i cos(m theta_i) - x_2i+1 sin(m theta_i)
 *     y_2i+1 = x_2i sin(m theta_i) + x_2i+1 cos(m theta_i)
 *
 * so that q_m . k_n depends on m - n alone.  A rotation is orthogonal: the
 * gradient is the same turn backwards, one kernel both ways.  The angles'
 * table ([N, head_dim/2] cos and sin) is made once per op and kept for
 * backward.  The loops here are the CPU's kernels (ops/rope.h); CUDA's,
 * a thread a pair, are in ops/cuda/rope.cu. */
#include "dispatch.h"
#include "rope.h"
#include "../graph/device.h"

typedef struct {
    const ag_real *x, *cs;
    ag_real *y;
    int N, D, head_dim, sign;
    bool fresh;
} rope_job;

static void angles_cpu(ag_real *cs, int N, int head_dim, int pos0, double base) {
    for (int i = 0; i < head_dim / 2; i++) {
        double inv_freq = pow(base, -(double)(2 * i) / head_dim);
        for (int t = 0; t < N; t++) {
            double a = (double)(pos0 + t) * inv_freq;
            cs[((int64_t)t * (head_dim / 2) + i) * 2] = (ag_real)cos(a);
            cs[((int64_t)t * (head_dim / 2) + i) * 2 + 1] = (ag_real)sin(a);
        }
    }
}

AG_SIMD_CLONES static void rotate_rows(void *ctx, int64_t r0, int64_t r1) {
    const rope_job *j = ctx;
    int D = j->D, half = j->head_dim / 2;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *x = j->x + r * D, *cs = j->cs + (r % j->N) * 2 * half;
        ag_real *y = j->y + r * D;
        for (int c = 0; c < D; c += j->head_dim)
            for (int i = 0; i < half; i++) {
                ag_real co = cs[2 * i], si = j->sign * cs[2 * i + 1];
                ag_real a = x[c + 2 * i], b = x[c + 2 * i + 1];
                ag_real ya = a * co - b * si, yb = a * si + b * co;
                if (j->fresh) y[c + 2 * i] = ya, y[c + 2 * i + 1] = yb;
                else y[c + 2 * i] += ya, y[c + 2 * i + 1] += yb;
            }
    }
}

static void rotate_cpu(const ag_real *x, const ag_real *cs, ag_real *y, int64_t rows, int N, int D, int head_dim,
                       int sign, bool fresh) {
    rope_job j = {.x = x, .cs = cs, .y = y, .N = N, .D = D, .head_dim = head_dim, .sign = sign, .fresh = fresh};
    ag__parallel_range(rows, ag__units_per_part(D), rotate_rows, &j);
}

/* n->saved: the angles' table, in the output's device memory. */
static void rope_backward(ag_node *n) {
    ag_tensor *x = n->in[0];
    if (!ag__wants(n, 0)) return;
    int D = x->shape[x->ndim - 1], N = x->shape[x->ndim - 2], head_dim = n->iarg[0];
    bool fresh;
    ag_real *gx = ag__grad_write(x, &fresh);
    ag__rope_on(n->op, x->device)->rotate(n->out->grad, n->saved, gx, D ? x->size / D : 0, N, D, head_dim, -1, fresh);
}

ag_tensor *ag_rope(ag_tensor *x, int head_dim, int pos0, double base) {
    const char *op = "ag_rope";
    char sx[64];
    ag_device dev = ag__check_same_device(op, x, NULL);
    if (x->ndim < 2) ag__fatal(op, "x %s: want [..., N, D], positions then features", ag_shape_str(x, sx, sizeof sx));
    int N = x->shape[x->ndim - 2], D = x->shape[x->ndim - 1];
    if (head_dim < 2 || head_dim % 2 || D % head_dim)
        ag__fatal(op, "head_dim %d for x %s: want an even width >= 2 dividing the last axis (%d)", head_dim,
                  ag_shape_str(x, sx, sizeof sx), D);
    if (pos0 < 0 || pos0 > INT32_MAX - N)
        ag__fatal(op, "pos0 %d for %d positions: want 0 <= pos0 and pos0 + N within int", pos0, N);
    if (!(base > 0) || !isfinite(base)) ag__fatal(op, "base %g: want a finite number > 0", base);

    const ag__rope_kernels *k = ag__rope_on(op, dev);
    ag_real *cs = ag__step_alloc_on(dev, (size_t)((int64_t)N * head_dim + 1) * sizeof(ag_real));
    k->angles(cs, N, head_dim, pos0, base);
    ag_tensor *out = ag__empty_on(dev, x->ndim, x->shape);
    k->rotate(x->data, cs, out->data, D ? x->size / D : 0, N, D, head_dim, +1, true);
    ag_node *n = ag__record(op, rope_backward, out, 1, (ag_tensor *[]){x});
    if (n) {
        n->saved = cs;
        n->iarg[0] = head_dim;
    }
    return out;
}

/* ---- the CPU's table (ops/rope.h; CUDA's is in ops/cuda/rope.cu) ---- */

static const ag__rope_kernels rope_cpu = {
    .angles = angles_cpu,
    .rotate = rotate_cpu,
};
AG_DISPATCH(rope, rope_cpu)
