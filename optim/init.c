/* init.c - parameter initializers.  Values are drawn in double from the
 * generator, one draw per element in row-major order, then rounded to
 * ag_real: the same seed gives the same numbers in the f32 and f64 builds
 * (up to that rounding), and a model initialised in a different order of
 * calls gets different, but still reproducible, values. */
#include "../graph/internal.h"

#include <stdio.h>

/* The initializers write host memory: a tensor on a GPU is refused by
 * name, where writing through its device pointer would crash (or, in the
 * emulator, pass unnoticed).  Initialise on the CPU, then ag_params_to. */
static void need_host(const char *op, const ag_tensor *t) {
    if (t->device != AG_CPU && t->data)
        ag__fatal(op, "%s is on the %s: initializers write host memory; initialise it on the CPU, then move it "
                  "(ag_params_to)", t->name ? t->name : "the tensor", ag_device_name(t->device));
}

/* A parameter of a shapes-only list (ag_params.shapes_only) has no data:
 * the initializers leave it alone (the model is only being measured). */
void ag_init_zeros(ag_tensor *t) {
    need_host("ag_init_zeros", t);
    if (t->data) memset(t->data, 0, (size_t)t->size * sizeof(ag_real));
}

void ag_init_constant(ag_tensor *t, double value) {
    need_host("ag_init_constant", t);
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)value;
}

static void fill_uniform(ag_tensor *t, double a, double b, ag_rng *rng) {
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(a + (b - a) * ag_rng_uniform(rng));
}

static void fill_normal(ag_tensor *t, double mean, double std, ag_rng *rng) {
    if (!t->data) return;
    for (int64_t i = 0; i < t->size; i++) t->data[i] = (ag_real)(mean + std * ag_rng_normal(rng));
}

void ag_init_uniform(ag_tensor *t, double a, double b, ag_rng *rng) {
    need_host("ag_init_uniform", t);
    if (!(a <= b)) ag__fatal("ag_init_uniform", "empty range U(%g, %g)", a, b);
    fill_uniform(t, a, b, rng);
}

void ag_init_normal(ag_tensor *t, double mean, double std, ag_rng *rng) {
    need_host("ag_init_normal", t);
    if (!(std >= 0)) ag__fatal("ag_init_normal", "std %g must be >= 0", std);
    fill_normal(t, mean, std, rng);
}

/* fan_in + fan_out of a weight stored [in, out]: the last two dims. */
static double glorot_fans(const char *op, const ag_tensor *t) {
    if (t->ndim < 2) {
        char s[64];
        ag__fatal(op, "needs a weight of at least 2 dims [in, out], got %s%s%s", ag_shape_str(t, s, sizeof s),
                  t->name ? " for " : "", t->name ? t->name : "");
    }
    return (double)t->shape[t->ndim - 2] + (double)t->shape[t->ndim - 1];
}

void ag_init_glorot_uniform(ag_tensor *t, double gain, ag_rng *rng) {
    need_host("ag_init_glorot_uniform", t);
    double fans = glorot_fans("ag_init_glorot_uniform", t);
    double bound = fans > 0 ? gain * sqrt(6.0 / fans) : 0;
    fill_uniform(t, -bound, bound, rng);
}

void ag_init_glorot_normal(ag_tensor *t, double gain, ag_rng *rng) {
    need_host("ag_init_glorot_normal", t);
    double fans = glorot_fans("ag_init_glorot_normal", t);
    fill_normal(t, 0, fans > 0 ? gain * sqrt(2.0 / fans) : 0, rng);
}

/* One [r, c] matrix: Q of the QR of a normal draw (in double), the signs of
 * R's diagonal moved into Q, times gain: nn.init.orthogonal_ for a weight
 * stored [in, out].  M [r, c] is drawn row-major; A is M or M^T, whichever
 * is tall (m x n, m >= n); Householder QR gives A's thin Q (m x n) with
 * orthonormal columns; W = Q or Q^T, so W W^T = I when r <= c and
 * W^T W = I when r >= c.  work: 3 m n + n doubles. */
static void orthogonal_matrix(ag_real *w, int r, int c, int ldw, double gain, ag_rng *rng, double *work) {
    bool tall = r >= c;
    int m = tall ? r : c, n = tall ? c : r;
    double *A = work, *Q = A + (size_t)m * n, *V = Q + (size_t)m * n; /* V: the n reflectors, m each */
    double *sign = V + (size_t)n * m;
    for (int i = 0; i < r; i++)
        for (int j = 0; j < c; j++) {
            double z = ag_rng_normal(rng);
            if (tall) A[(size_t)i * n + j] = z;
            else A[(size_t)j * n + i] = z;
        }
    for (int k = 0; k < n; k++) {
        double norm = 0;
        for (int i = k; i < m; i++) norm += A[(size_t)i * n + k] * A[(size_t)i * n + k];
        norm = sqrt(norm);
        double x0 = A[(size_t)k * n + k], alpha = x0 >= 0 ? -norm : norm; /* R_kk, the stable sign */
        double *vk = V + (size_t)k * m;
        for (int i = 0; i < m; i++) vk[i] = i < k ? 0 : A[(size_t)i * n + k];
        vk[k] -= alpha;
        double vn = 0;
        for (int i = k; i < m; i++) vn += vk[i] * vk[i];
        if (vn > 0) { /* A[k:, k:] -= 2 v (v^T A[k:, k:]) / (v^T v) */
            for (int j = k; j < n; j++) {
                double s = 0;
                for (int i = k; i < m; i++) s += vk[i] * A[(size_t)i * n + j];
                s *= 2 / vn;
                for (int i = k; i < m; i++) A[(size_t)i * n + j] -= s * vk[i];
            }
            for (int i = k; i < m; i++) vk[i] /= sqrt(vn);
        } else {
            for (int i = 0; i < m; i++) vk[i] = 0; /* a zero column: no reflection */
        }
        sign[k] = A[(size_t)k * n + k] < 0 ? -1 : 1; /* torch's d.sign(), with +1 for an exact 0 */
    }
    /* Q = H_0 ... H_{n-1} I[:, :n], applied right to left */
    for (size_t i = 0; i < (size_t)m * n; i++) Q[i] = 0;
    for (int j = 0; j < n; j++) Q[(size_t)j * n + j] = 1;
    for (int k = n - 1; k >= 0; k--) {
        const double *vk = V + (size_t)k * m;
        for (int j = 0; j < n; j++) {
            double s = 0;
            for (int i = k; i < m; i++) s += vk[i] * Q[(size_t)i * n + j];
            for (int i = k; i < m; i++) Q[(size_t)i * n + j] -= 2 * s * vk[i];
        }
    }
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double q = gain * sign[j] * Q[(size_t)i * n + j];
            if (tall) w[(size_t)i * ldw + j] = (ag_real)q;
            else w[(size_t)j * ldw + i] = (ag_real)q;
        }
}

void ag_init_orthogonal(ag_tensor *t, double gain, ag_rng *rng) { ag_init_orthogonal_chunks(t, 1, gain, rng); }

void ag_init_orthogonal_chunks(ag_tensor *t, int chunks, double gain, ag_rng *rng) {
    const char *fn = chunks == 1 ? "ag_init_orthogonal" : "ag_init_orthogonal_chunks";
    need_host(fn, t);
    (void)glorot_fans(fn, t); /* at least 2 dims, named as Glorot's */
    int r = t->shape[t->ndim - 2], c = t->shape[t->ndim - 1];
    if (chunks < 1 || c % chunks)
        ag__fatal(fn, "%s: %d chunks of its last dim %d: want a count that divides it", t->name ? t->name : "tensor",
                  chunks, c);
    if (!t->data || t->size == 0) return;
    int cb = c / chunks, m = r > cb ? r : cb, n = r > cb ? cb : r;
    int64_t per = (int64_t)r * c, count = t->size / per;
    double *work = ag__malloc(((size_t)3 * m * n + (size_t)n) * sizeof *work);
    for (int64_t s = 0; s < count; s++)
        for (int k = 0; k < chunks; k++) orthogonal_matrix(t->data + s * per + (int64_t)k * cb, r, cb, c, gain, rng, work);
    ag__free(work);
}
