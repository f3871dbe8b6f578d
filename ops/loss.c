/* loss.c - cross-entropy (fused, stable log-softmax + NLL), KL divergence
 * to a soft target distribution, and mean squared error.  All return a 0-dim
 * scalar. */
#include "softmax_rows.h"
#include "../graph/device.h"
#include "cuda/kernels.h"

/* ---- cross-entropy ----
 *
 * For a row z of C logits with label y, with m = max z and
 * s = log sum_c exp(z_c - m):
 *     loss = s - (z_y - m),        d loss / d z_c = softmax_c - [c == y].
 * s and z - m are kept apart and never folded into logsumexp = m + s: at
 * |z| ~ 1e4 in f32 the sum m + s would lose the fractional digits that the
 * loss is made of.  Backward recomputes softmax_c = exp((z_c - m) - s) from
 * the logits rather than keeping a [rows, C] copy of the probabilities: for
 * a language model's vocabulary that copy would double the biggest
 * activation of the step.
 *
 * On the GPU (ops/cuda/loss.cu) the same: the labels are copied to the
 * device once, m, s and the row losses live there, and the mean is one
 * block summing the row losses in double in a fixed order. */

typedef struct {
    int32_t *labels;    /* copy of the caller's labels (on the logits' device) */
    ag_real *row_max;   /* m per row (unset for ignored rows) */
    ag_real *row_lse;   /* s per row (unset for ignored rows) */
    int64_t rows;
    int classes, ignore_index;
    int64_t counted;    /* rows whose label is not ignore_index */
} ce_saved;

/* Rows run on the pool in ranges; a row's max and sum of exps use the
 * softmax kernels (SIMD: keyed max, exps in 8 lanes). */
typedef struct {
    const ce_saved *sv;
    const int32_t *labels;
    const ag_real *Z;
    ag_real *GZ, *row_max, *row_lse, *row_loss;
    ag_real scale;
    int C, ignore_index;
    bool fresh;          /* backward: GZ is new, store (0 on ignored rows) instead of add */
} ce_job;

AG_SIMD_CLONES static void ce_grad_rows(void *ctx, int64_t r0, int64_t r1) {
    const ce_job *j = ctx;
    const ce_saved *sv = j->sv;
    int C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        int y = sv->labels[r];
        ag_real *gz = j->GZ + r * C;
        if (y == sv->ignore_index) {
            if (j->fresh) memset(gz, 0, (size_t)C * sizeof *gz);
            continue;
        }
        const ag_real *z = j->Z + r * C;
        ag_real m = sv->row_max[r], s = sv->row_lse[r];
        if (j->fresh)
            for (int c = 0; c < C; c++) gz[c] = j->scale * ag__vexp_nonpos((z[c] - m) - s);
        else
            for (int c = 0; c < C; c++) gz[c] += j->scale * ag__vexp_nonpos((z[c] - m) - s);
        gz[y] -= j->scale;
    }
}

static void cross_entropy_backward(ag_node *n) {
    const ce_saved *sv = n->saved;
    if (sv->counted == 0) { /* every row ignored: the loss is the constant 0 */
        ag__grad(n->in[0]);  /* allocated even when it stays zero */
        return;
    }
    if (n->in[0]->device == AG_CUDA) { /* dL/dloss stays on the device: the kernel reads it */
        bool fresh;
        ag_real *gz = ag__grad_write(n->in[0], &fresh);
        ag__cross_entropy_backward_cuda(n->in[0]->data, sv->labels, sv->ignore_index, sv->row_max, sv->row_lse,
                                        n->out->grad, sv->counted, gz, sv->rows, sv->classes, fresh);
        ag__cuda_check_launch(n->op);
        return;
    }
    ce_job j = {.sv = sv, .Z = n->in[0]->data, .C = sv->classes,
                .scale = n->out->grad[0] / (ag_real)sv->counted};
    j.GZ = ag__grad_write(n->in[0], &j.fresh);
    ag__parallel_range(sv->rows, ag__units_per_part(sv->classes), ce_grad_rows, &j);
}

/* Per row: m = max z, s = log sum exp(z - m), and the row's loss. */
AG_SIMD_CLONES static void ce_rows(void *ctx, int64_t r0, int64_t r1) {
    const ce_job *j = ctx;
    int C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        int y = j->labels[r];
        if (y == j->ignore_index) continue;
        const ag_real *z = j->Z + r * C;
        ag_real m = ag__max_row(z, C);
        ag_real acc[AG_LANES] = {0};
        int c = 0;
        for (; c + AG_LANES <= C; c += AG_LANES)
            for (int l = 0; l < AG_LANES; l++) acc[l] += ag__vexp_nonpos(z[c + l] - m);
        for (; c < C; c++) acc[c % AG_LANES] += ag__vexp_nonpos(z[c] - m);
        ag_real sum = 0;
        for (int l = 0; l < AG_LANES; l++) sum += acc[l];
        ag_real s = log(sum);
        j->row_max[r] = m;
        j->row_lse[r] = s;
        j->row_loss[r] = s - (z[y] - m);
    }
}

/* Device memory for n reals of the step (at least one: a kernel may be
 * handed the pointer with n = 0). */
static ag_real *device_reals(int64_t n) { return ag__cuda_arena_alloc((size_t)(n > 0 ? n : 1) * sizeof(ag_real)); }

static ag_tensor *cross_entropy_cuda(ag_tensor *logits, const int32_t *labels, int ignore_index, int64_t rows, int C,
                                     int64_t counted) {
    ce_saved *sv = ag_arena_alloc(sizeof *sv);
    *sv = (ce_saved){.labels = ag__to_device_i32(labels, rows), .row_max = device_reals(rows),
                     .row_lse = device_reals(rows), .rows = rows, .classes = C, .ignore_index = ignore_index,
                     .counted = counted};
    ag_real *row_loss = device_reals(rows);
    ag_tensor *out = ag__empty_on(AG_CUDA, 0, NULL);
    ag__cross_entropy_forward_cuda(logits->data, sv->labels, ignore_index, sv->row_max, sv->row_lse, row_loss, rows, C);
    ag__row_loss_mean_cuda(row_loss, rows, counted, out->data);
    ag__cuda_check_launch("ag_cross_entropy");
    ag_node *n = ag__record("ag_cross_entropy", cross_entropy_backward, out, 1, &logits);
    if (n) n->saved = sv;
    return out;
}

ag_tensor *ag_cross_entropy(ag_tensor *logits, const int32_t *labels, int ignore_index) {
    ag_device dev = ag__check_same_device("ag_cross_entropy", logits, NULL);
    char sl[64];
    if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1)
        ag__fatal("ag_cross_entropy", "logits must be [..., C] with C >= 1, got %s",
                  ag_shape_str(logits, sl, sizeof sl));
    int C = logits->shape[logits->ndim - 1];
    int64_t rows = logits->size / C, counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (labels[r] == ignore_index) continue;
        if (labels[r] < 0 || labels[r] >= C)
            ag__fatal("ag_cross_entropy", "label %d at row %lld out of range [0, %d) for logits %s (ignore_index %d)",
                      labels[r], (long long)r, C, ag_shape_str(logits, sl, sizeof sl), ignore_index);
        counted++;
    }
    if (dev == AG_CUDA) return cross_entropy_cuda(logits, labels, ignore_index, rows, C, counted);

    ce_saved *sv = ag_arena_alloc(sizeof *sv);
    *sv = (ce_saved){.rows = rows, .classes = C, .ignore_index = ignore_index, .counted = counted};
    sv->row_max = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof(ag_real));
    sv->row_lse = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof(ag_real));
    ce_job j = {.labels = labels, .Z = logits->data, .C = C, .ignore_index = ignore_index,
                .row_max = sv->row_max, .row_lse = sv->row_lse,
                .row_loss = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof(ag_real))};
    ag__parallel_range(rows, ag__units_per_part(C), ce_rows, &j);
    double total = 0; /* in double, in row order: a mean over many rows in f32 drifts */
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore_index) total += (double)j.row_loss[r];
    ag_tensor *out = ag__empty(0, NULL);
    out->data[0] = counted ? (ag_real)(total / (double)counted) : 0;

    ag_node *n = ag__record("ag_cross_entropy", cross_entropy_backward, out, 1, &logits);
    if (n) {
        sv->labels = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof *sv->labels); /* the caller's may change */
        memcpy(sv->labels, labels, (size_t)rows * sizeof *sv->labels);
        n->saved = sv;
    }
    return out;
}

/* ---- a classifier's linear layer fused with its cross-entropy ----
 *
 * cross_entropy(x op(W) + b, labels) in one op, for a large C (an LM's
 * vocabulary) where the logits are the step's biggest tensor:
 *  - only the rows with a counted label are multiplied: an LM's padding
 *    positions cost nothing, and nothing has to look for them;
 *  - the pass that takes a row's max and sum of exps also turns the row into
 *    softmax - onehot, the gradient up to the factor dL/dloss / counted,
 *    which backward folds into its GEMMs' alpha.  Backward never recomputes
 *    the softmax and no [rows, C] buffer is zeroed, scanned or copied.
 * The gradient is written over the logits only when backward will run.
 * llm.c's fused classifier does the same.
 *
 * On the GPU the same steps: the counted rows' indices, positions and
 * labels are copied once, the rows gathered and the product run on cuBLAS,
 * and backward's factor dL/dloss / counted - on the device - is the GEMMs'
 * alpha in cuBLAS's device pointer mode (nothing read back to the host). */

typedef struct {
    int32_t *kept;      /* the counted rows of x, in order */
    int32_t *pos;       /* per row of x: its index in kept, or -1 (on x's device) */
    ag_real *X;         /* those rows of x [n, in] */
    ag_real *P;         /* softmax - onehot [n, C] */
    int64_t rows, n;
    int in, C;
    bool tw;            /* W stored [C, in] */
} lce_saved;

typedef struct {
    ag_real *Z;         /* [n, C]: logits in, gradients out when to_grad */
    const ag_real *bias;
    const int32_t *labels;
    ag_real *loss;      /* per row */
    int C;
    bool to_grad;
} lce_job;

/* One row's loss s - (z_y - m) with m = max z and s = log sum exp(z - m);
 * with to_grad the row becomes softmax - onehot (exps stored on the way,
 * then scaled by 1 / sum: one exp per logit). */
AG_SIMD_CLONES static void lce_rows(void *ctx, int64_t r0, int64_t r1) {
    const lce_job *j = ctx;
    int C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        ag_real *z = j->Z + r * C;
        int y = j->labels[r];
        ag_real m = ag__max_row(z, C), zy = z[y] - m;
        ag_real acc[AG_LANES] = {0};
        int c = 0;
        if (j->to_grad) {
            for (; c + AG_LANES <= C; c += AG_LANES)
                for (int l = 0; l < AG_LANES; l++) {
                    ag_real e = ag__vexp_nonpos(z[c + l] - m);
                    z[c + l] = e;
                    acc[l] += e;
                }
            for (; c < C; c++) {
                z[c] = ag__vexp_nonpos(z[c] - m);
                acc[c % AG_LANES] += z[c];
            }
        } else {
            for (; c + AG_LANES <= C; c += AG_LANES)
                for (int l = 0; l < AG_LANES; l++) acc[l] += ag__vexp_nonpos(z[c + l] - m);
            for (; c < C; c++) acc[c % AG_LANES] += ag__vexp_nonpos(z[c] - m);
        }
        ag_real sum = 0;
        for (int l = 0; l < AG_LANES; l++) sum += acc[l];
        j->loss[r] = log(sum) - zy;
        if (j->to_grad) {
            ag_real inv = 1 / sum; /* sum >= 1: the max contributes e^0 */
            for (c = 0; c < C; c++) z[c] *= inv;
            z[y] -= 1;
        }
    }
}

/* Z rows = the bias (or 0), before the GEMM adds X op(W). */
static void lce_fill(void *ctx, int64_t i0, int64_t i1) {
    const lce_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        if (j->bias) memcpy(j->Z + i * j->C, j->bias, (size_t)j->C * sizeof(ag_real));
        else memset(j->Z + i * j->C, 0, (size_t)j->C * sizeof(ag_real));
    }
}

/* As below, with g = scal[0] on the device: dx, dW, db in turn. */
static void linear_ce_backward_cuda(ag_node *n) {
    const lce_saved *sv = n->saved;
    ag_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int N = (int)sv->n, in = sv->in, C = sv->C;
    ag_real *scal = ag__cuda_arena_alloc(3 * sizeof(ag_real)); /* g, 0, 1 */
    ag__lce_scale_cuda(n->out->grad, N, scal);
    if (ag__wants(n, 0)) {
        ag_real *dXc = device_reals((int64_t)N * in);
        /* zeroed: with beta read from the device, not leaning on cuBLAS
         * to skip C for beta 0 (a NaN left in the arena by an earlier
         * step would survive 0 * NaN if it did not) */
        ag__cuda_zero(dXc, (size_t)N * in * sizeof(ag_real));
        ag__cuda_gemm_rows_dev(false, !sv->tw, N, in, C, scal, sv->P, w->data, scal + 1, dXc);
        bool fresh;
        ag_real *dx = ag__grad_write(x, &fresh);
        ag__unpack_rows_cuda(dx, dXc, in, sv->pos, sv->rows, fresh);
    }
    if (ag__wants(n, 1)) {
        if (sv->tw) ag__cuda_gemm_rows_dev(true, false, C, in, N, scal, sv->P, sv->X, scal + 2, ag__grad(w));
        else ag__cuda_gemm_rows_dev(true, false, in, C, N, scal, sv->X, sv->P, scal + 2, ag__grad(w));
    }
    if (bias && ag__wants(n, 2))
        ag__matmul_on(n->op, AG_CUDA)->col_sums(sv->P, N, C, scal, device_reals(ag__col_blocks(N) * C), ag__grad(bias));
    ag__cuda_check_launch(n->op);
}

static void linear_ce_backward(ag_node *n) {
    const lce_saved *sv = n->saved;
    ag_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    int64_t N = sv->n;
    int in = sv->in, C = sv->C;
    if (N == 0) { /* every row ignored: the loss is the constant 0 */
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && ag__wants(n, i)) ag__grad(n->in[i]);
        return;
    }
    if (x->device == AG_CUDA) {
        linear_ce_backward_cuda(n);
        return;
    }
    ag_real g = n->out->grad[0] / (ag_real)N; /* d loss / d z = g P */
    if (ag__wants(n, 0)) { /* dx = g P op(W)^T on the counted rows, 0 elsewhere */
        ag_real *dXc = ag_arena_alloc((size_t)N * in * sizeof(ag_real));
        ag__gemm(false, !sv->tw, (int)N, in, C, g, sv->P, w->data, 0, dXc);
        bool fresh;
        ag_real *dx = ag__grad_write(x, &fresh);
        ag__unpack_rows(dx, dXc, in, sv->pos, sv->rows, fresh);
    }
    if (ag__wants(n, 1)) { /* dW += g X^T P, or g P^T X stored [C, in] */
        if (sv->tw) ag__gemm(true, false, C, in, (int)N, g, sv->P, sv->X, 1, ag__grad(w));
        else ag__gemm(true, false, in, C, (int)N, g, sv->X, sv->P, 1, ag__grad(w));
    }
    if (bias && ag__wants(n, 2)) { /* db += g 1^T P: a matrix-vector product */
        ag_real *ones = ag_arena_alloc((size_t)N * sizeof(ag_real));
        for (int64_t i = 0; i < N; i++) ones[i] = 1;
        ag__gemm(false, false, 1, C, (int)N, g, ones, sv->P, 1, ag__grad(bias));
    }
}

/* The forward on the GPU, from the counted rows found on the host (sv's
 * kept and pos, their labels ys). */
static ag_tensor *linear_ce_cuda(const char *op, ag_tensor *x, ag_tensor *w, ag_tensor *bias, lce_saved *sv,
                                 const int32_t *ys, bool grad) {
    int64_t N = sv->n;
    int in = sv->in, C = sv->C;
    int32_t *kept = ag__to_device_i32(sv->kept, N), *labels = ag__to_device_i32(ys, N);
    sv->pos = ag__to_device_i32(sv->pos, sv->rows);
    sv->X = device_reals(N * in);
    ag__gather_rows_cuda(x->data, in, kept, N, sv->X);
    ag_real *Z = device_reals(N * C), *loss = device_reals(N);
    ag__matmul_on(op, AG_CUDA)->bias_rows(bias ? bias->data : NULL, Z, N, C);
    if (N > 0) ag__cuda_gemm_rows(false, sv->tw, (int)N, C, in, 1, sv->X, w->data, 1, Z);
    ag__lce_rows_cuda(Z, labels, loss, N, C, grad);
    ag_tensor *out = ag__empty_on(AG_CUDA, 0, NULL);
    ag__row_loss_mean_cuda(loss, N, N, out->data);
    ag__cuda_check_launch(op);
    ag_node *n = ag__record(op, linear_ce_backward, out, 3, (ag_tensor *[]){x, w, bias});
    if (n) {
        sv->P = Z;
        n->saved = sv;
    }
    return out;
}

static ag_tensor *linear_ce(const char *op, ag_tensor *x, ag_tensor *w, bool tw, ag_tensor *bias,
                            const int32_t *labels, int ignore_index) {
    char sx[64], sw[64], sb[64];
    ag_device dev = ag__check_same_device(op, x, w);
    if (bias) ag__check_same_device(op, x, bias);
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[tw] || w->shape[!tw] < 1)
        ag__fatal(op, "x %s does not fit weight %s (want x[..., in], W[%s] with C >= 1)", ag_shape_str(x, sx, sizeof sx),
                  ag_shape_str(w, sw, sizeof sw), tw ? "C, in" : "in, C");
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[!tw]))
        ag__fatal(op, "bias %s does not fit weight %s (want [C])", ag_shape_str(bias, sb, sizeof sb),
                  ag_shape_str(w, sw, sizeof sw));
    int in = w->shape[tw], C = w->shape[!tw];
    int64_t rows = in ? x->size / in : 0;
    lce_saved *sv = ag_arena_alloc(sizeof *sv);
    *sv = (lce_saved){.rows = rows, .in = in, .C = C, .tw = tw};
    sv->kept = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof *sv->kept);
    sv->pos = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof *sv->pos);
    int32_t *ys = ag_arena_alloc((size_t)(rows ? rows : 1) * sizeof *ys);
    for (int64_t r = 0; r < rows; r++) {
        sv->pos[r] = -1;
        if (labels[r] == ignore_index) continue;
        if (labels[r] < 0 || labels[r] >= C)
            ag__fatal(op, "label %d at row %lld out of range [0, %d) for x %s, weight %s (ignore_index %d)", labels[r],
                      (long long)r, C, ag_shape_str(x, sx, sizeof sx), ag_shape_str(w, sw, sizeof sw), ignore_index);
        sv->pos[r] = (int32_t)sv->n;
        ys[sv->n] = labels[r];
        sv->kept[sv->n++] = (int32_t)r;
    }
    int64_t N = sv->n;
    bool grad = ag_is_grad_enabled() && (x->requires_grad || w->requires_grad || (bias && bias->requires_grad));
    if (dev == AG_CUDA) return linear_ce_cuda(op, x, w, bias, sv, ys, grad);

    /* Z = bias + X op(W) over the counted rows: the bias rows first, so the
     * GEMM adds (beta 1) instead of zeroing Z in a pass of its own. */
    lce_job j = {.bias = bias ? bias->data : NULL, .labels = ys, .C = C, .to_grad = grad};
    sv->X = ag__gather_rows(x->data, in, sv->kept, (int)N);
    j.Z = ag_arena_alloc((size_t)(N ? N : 1) * C * sizeof(ag_real));
    ag__parallel_range(N, ag__units_per_part(C), lce_fill, &j);
    ag__gemm(false, tw, (int)N, C, in, 1, sv->X, w->data, 1, j.Z);
    j.loss = ag_arena_alloc((size_t)(N ? N : 1) * sizeof(ag_real));
    ag__parallel_range(N, ag__units_per_part(C), lce_rows, &j);
    double total = 0; /* in double, in row order */
    for (int64_t i = 0; i < N; i++) total += (double)j.loss[i];
    ag_tensor *out = ag__empty(0, NULL);
    out->data[0] = N ? (ag_real)(total / (double)N) : 0;

    ag_node *n = ag__record(op, linear_ce_backward, out, 3, (ag_tensor *[]){x, w, bias});
    if (n) {
        sv->P = j.Z;
        n->saved = sv;
    }
    return out;
}

ag_tensor *ag_linear_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                   int ignore_index) {
    return linear_ce("ag_linear_cross_entropy", x, w, false, bias, labels, ignore_index);
}

ag_tensor *ag_linear_t_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                     int ignore_index) {
    return linear_ce("ag_linear_t_cross_entropy", x, w, true, bias, labels, ignore_index);
}

/* ---- KL divergence from a soft target ----
 *
 * For a row z of C logits and a target distribution t (t_c >= 0, sum 1),
 * with m = max z, s = log sum_c exp(z_c - m), log p_c = (z_c - m) - s:
 *     loss = sum_{c: t_c > 0} t_c (log t_c - log p_c)      (0 log 0 = 0)
 *     d loss / d z_c = (sum_k t_k) p_c - t_c = p_c - t_c.
 * KL = CE(t, p) - H(t): the entropy term is a constant of the target, so the
 * gradient is the soft cross-entropy's.  The exact row sum of t (1 up to
 * rounding) is kept in the gradient so that it is the derivative of the
 * loss as computed.  Same stable form as cross-entropy above: m and s kept
 * apart, softmax recomputed in backward from the logits. */

typedef struct {
    ag_real *target;    /* copy of the caller's [rows, C] target (on the logits' device) */
    ag_real *row_max;   /* m per row */
    ag_real *row_lse;   /* s per row */
    ag_real *row_mass;  /* sum_c t_c per row */
    int64_t rows;
    int classes;
} kl_saved;

static void kl_div_soft_backward(ag_node *n) {
    const kl_saved *sv = n->saved;
    const ag_real *Z = n->in[0]->data;
    ag_real *GZ = ag__grad(n->in[0]);
    if (n->in[0]->device == AG_CUDA) {
        ag__kl_div_soft_backward_cuda(Z, sv->target, sv->row_max, sv->row_lse, sv->row_mass, n->out->grad, GZ,
                                      sv->rows, sv->classes);
        ag__cuda_check_launch(n->op);
        return;
    }
    ag_real scale = n->out->grad[0] / (ag_real)sv->rows;
    int C = sv->classes;
    for (int64_t r = 0; r < sv->rows; r++) {
        const ag_real *z = Z + r * C, *t = sv->target + r * C;
        ag_real *gz = GZ + r * C, m = sv->row_max[r], s = sv->row_lse[r], mass = sv->row_mass[r];
        for (int c = 0; c < C; c++) gz[c] += scale * (mass * exp((z[c] - m) - s) - t[c]);
    }
}

/* Every target entry finite and >= 0, every row summing to 1 (to 1e-4: a
 * target computed in float rounds); a row that does not is a caller's bug. */
static void kl_check_target(const ag_tensor *logits, const ag_real *t, int64_t rows, int C) {
    char sl[64];
    for (int64_t r = 0; r < rows; r++) {
        double mass = 0;
        for (int c = 0; c < C; c++) {
            ag_real v = t[r * C + c];
            if (!(v >= 0) || !isfinite(v))
                ag__fatal("ag_kl_div_soft", "target[%lld, %d] = %g is not a probability (logits %s)", (long long)r, c,
                          (double)v, ag_shape_str(logits, sl, sizeof sl));
            mass += (double)v;
        }
        if (fabs(mass - 1) > 1e-4)
            ag__fatal("ag_kl_div_soft", "target row %lld sums to %.9g, not 1 (logits %s)", (long long)r, mass,
                      ag_shape_str(logits, sl, sizeof sl));
    }
}

/* On the GPU: the target copied once (checked on the host first), a warp
 * per row, the row losses in double. */
static ag_tensor *kl_div_soft_cuda(ag_tensor *logits, const ag_real *target_probs, int64_t rows, int C) {
    kl_saved *sv = ag_arena_alloc(sizeof *sv);
    size_t cells = (size_t)rows * (size_t)C * sizeof(ag_real);
    *sv = (kl_saved){.target = ag__cuda_arena_alloc(cells), .row_max = device_reals(rows),
                     .row_lse = device_reals(rows), .row_mass = device_reals(rows), .rows = rows, .classes = C};
    ag__cuda_copy(sv->target, AG_CUDA, target_probs, AG_CPU, cells);
    double *row_loss = ag__cuda_arena_alloc((size_t)rows * sizeof(double));
    ag_tensor *out = ag__empty_on(AG_CUDA, 0, NULL);
    ag__kl_div_soft_forward_cuda(logits->data, sv->target, sv->row_max, sv->row_lse, sv->row_mass, row_loss, rows, C);
    ag__row_loss_mean_f64_cuda(row_loss, rows, rows, out->data);
    ag__cuda_check_launch("ag_kl_div_soft");
    ag_node *n = ag__record("ag_kl_div_soft", kl_div_soft_backward, out, 1, &logits);
    if (n) n->saved = sv;
    return out;
}

ag_tensor *ag_kl_div_soft(ag_tensor *logits, const ag_real *target_probs) {
    ag_device dev = ag__check_same_device("ag_kl_div_soft", logits, NULL);
    char sl[64];
    if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1 || logits->size == 0)
        ag__fatal("ag_kl_div_soft", "logits must be [..., C] with C >= 1 and at least one row, got %s",
                  ag_shape_str(logits, sl, sizeof sl));
    if (!target_probs) ag__fatal("ag_kl_div_soft", "no target for logits %s", ag_shape_str(logits, sl, sizeof sl));
    int C = logits->shape[logits->ndim - 1];
    int64_t rows = logits->size / C;
    kl_check_target(logits, target_probs, rows, C);
    if (dev == AG_CUDA) return kl_div_soft_cuda(logits, target_probs, rows, C);

    kl_saved *sv = ag_arena_alloc(sizeof *sv);
    *sv = (kl_saved){.rows = rows, .classes = C};
    sv->row_max = ag_arena_alloc((size_t)rows * sizeof(ag_real));
    sv->row_lse = ag_arena_alloc((size_t)rows * sizeof(ag_real));
    sv->row_mass = ag_arena_alloc((size_t)rows * sizeof(ag_real));
    double total = 0;
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *z = logits->data + r * C, *t = target_probs + r * C;
        ag_real m = z[0], sum = 0, mass = 0;
        for (int c = 1; c < C; c++) m = z[c] > m ? z[c] : m;
        for (int c = 0; c < C; c++) sum += exp(z[c] - m);
        ag_real s = log(sum);
        double row = 0;
        for (int c = 0; c < C; c++) {
            mass += t[c];
            if (t[c] > 0) row += (double)(t[c] * (log(t[c]) - ((z[c] - m) - s)));
        }
        sv->row_max[r] = m;
        sv->row_lse[r] = s;
        sv->row_mass[r] = mass;
        total += row;
    }
    ag_tensor *out = ag__empty(0, NULL);
    out->data[0] = (ag_real)(total / (double)rows);

    ag_node *n = ag__record("ag_kl_div_soft", kl_div_soft_backward, out, 1, &logits);
    if (n) {
        size_t cells = (size_t)rows * (size_t)C * sizeof(ag_real);
        sv->target = ag_arena_alloc(cells); /* the caller's may change before backward */
        memcpy(sv->target, target_probs, cells);
        n->saved = sv;
    }
    return out;
}

/* ---- mean squared error: mean (p - t)^2, d/dp = 2 (p - t) / N = -d/dt ---- */

static void mse_backward(ag_node *n) {
    const ag_tensor *p = n->in[0], *t = n->in[1];
    if (p->device == AG_CUDA) {
        ag__mse_backward_cuda(p->data, t->data, n->out->grad, ag__wants(n, 0) ? ag__grad(n->in[0]) : NULL,
                              ag__wants(n, 1) ? ag__grad(n->in[1]) : NULL, p->size);
        ag__cuda_check_launch(n->op);
        return;
    }
    ag_real scale = 2 * n->out->grad[0] / (ag_real)p->size;
    if (ag__wants(n, 0)) {
        ag_real *gp = ag__grad(n->in[0]);
        for (int64_t i = 0; i < p->size; i++) gp[i] += scale * (p->data[i] - t->data[i]);
    }
    if (ag__wants(n, 1)) {
        ag_real *gt = ag__grad(n->in[1]);
        for (int64_t i = 0; i < p->size; i++) gt[i] -= scale * (p->data[i] - t->data[i]);
    }
}

ag_tensor *ag_mse(ag_tensor *pred, ag_tensor *target) {
    ag_device dev = ag__check_same_device("ag_mse", pred, target);
    ag__check_same_shape("ag_mse", pred, target);
    if (pred->size == 0) ag__fatal("ag_mse", "mean over empty tensors");
    if (dev == AG_CUDA) { /* one block sums the squares in double in a fixed order */
        ag_tensor *out = ag__empty_on(AG_CUDA, 0, NULL);
        ag__mse_forward_cuda(pred->data, target->data, out->data, pred->size);
        ag__cuda_check_launch("ag_mse");
        ag__record("ag_mse", mse_backward, out, 2, (ag_tensor *[]){pred, target});
        return out;
    }
    double total = 0;
    for (int64_t i = 0; i < pred->size; i++) {
        ag_real d = pred->data[i] - target->data[i];
        total += (double)(d * d);
    }
    ag_tensor *out = ag__empty(0, NULL);
    out->data[0] = (ag_real)(total / (double)pred->size);
    ag__record("ag_mse", mse_backward, out, 2, (ag_tensor *[]){pred, target});
    return out;
}
