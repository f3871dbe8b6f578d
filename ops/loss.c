/* loss.c - cross-entropy (fused, stable log-softmax + NLL), KL divergence
 * to a soft target distribution, and mean squared error.  All return a 0-dim
 * scalar. */
#include "softmax_rows.h"
#include "dispatch.h"
#include "loss.h"
#include "../graph/device.h"

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
 * block summing the row losses in double in a fixed order.
 *
 * Step memory for n reals on dev (at least one: a kernel may be handed the
 * pointer with n = 0). */
static ag_real *step_reals(ag_device dev, int64_t n) {
    return ag__step_alloc_on(dev, (size_t)(n > 0 ? n : 1) * sizeof(ag_real));
}

typedef struct {
    const int32_t *labels; /* copy of the caller's labels (on the logits' device) */
    ag_real *row_max;   /* m per row (unset for ignored rows) */
    ag_real *row_lse;   /* s per row (unset for ignored rows) */
    int64_t rows;
    int classes, ignore_index;
    int64_t counted;    /* rows whose label is not ignore_index */
    ag_real eps;        /* label smoothing */
} ce_saved;

/* Rows run on the pool in ranges; a row's max and sum of exps use the
 * softmax kernels (SIMD: keyed max, exps in 8 lanes). */
typedef struct {
    const int32_t *labels;
    const ag_real *Z, *row_max, *row_lse;
    ag_real *GZ, *max_out, *lse_out, *row_loss;
    ag_real scale, eps;
    int C, ignore_index;
    bool fresh;          /* backward: GZ is new, store (0 on ignored rows) instead of add */
} ce_job;

AG_SIMD_CLONES static void ce_grad_rows(void *ctx, int64_t r0, int64_t r1) {
    const ce_job *j = ctx;
    int C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        int y = j->labels[r];
        ag_real *gz = j->GZ + r * C;
        if (y == j->ignore_index) {
            if (j->fresh) memset(gz, 0, (size_t)C * sizeof *gz);
            continue;
        }
        const ag_real *z = j->Z + r * C;
        ag_real m = j->row_max[r], s = j->row_lse[r];
        if (j->fresh)
            for (int c = 0; c < C; c++) gz[c] = j->scale * ag__vexp_nonpos((z[c] - m) - s);
        else
            for (int c = 0; c < C; c++) gz[c] += j->scale * ag__vexp_nonpos((z[c] - m) - s);
        if (j->eps == 0) {
            gz[y] -= j->scale;
            continue;
        }
        ag_real spread = j->scale * (j->eps / (ag_real)C); /* the target's eps / C on every class */
        for (int c = 0; c < C; c++) gz[c] -= spread;
        gz[y] -= j->scale * (1 - j->eps);
    }
}

static void ce_backward_cpu(const ag_real *z, const int32_t *labels, int ignore_index, ag_real eps,
                            const ag_real *row_max, const ag_real *row_lse, const ag_real *g, int64_t counted,
                            ag_real *gz, int64_t rows, int C, bool fresh) {
    ce_job j = {.labels = labels, .Z = z, .row_max = row_max, .row_lse = row_lse, .GZ = gz, .C = C,
                .ignore_index = ignore_index, .fresh = fresh, .scale = g[0] / (ag_real)counted, .eps = eps};
    ag__parallel_range(rows, ag__units_per_part(C), ce_grad_rows, &j);
}

static void cross_entropy_backward(ag_node *n) {
    const ce_saved *sv = n->saved;
    if (sv->counted == 0) { /* every row ignored: the loss is the constant 0 */
        ag__grad(n->in[0]);  /* allocated even when it stays zero */
        return;
    }
    /* dL/dloss stays on the logits' device: the kernel reads it */
    bool fresh;
    ag_real *gz = ag__grad_write(n->in[0], &fresh);
    ag__loss_on(n->op, n->in[0]->device)
        ->ce_backward(n->in[0]->data, sv->labels, sv->ignore_index, sv->eps, sv->row_max, sv->row_lse, n->out->grad,
                      sv->counted, gz, sv->rows, sv->classes, fresh);
}

/* Label smoothing: a row's mean z - m (its sum in double), and its loss
 * against the target (1 - eps) onehot + eps / C from s and z_y - m. */
static ag_real mean_shifted(const ag_real *z, int C, ag_real m) {
    double shifted = 0;
    for (int c = 0; c < C; c++) shifted += (double)(z[c] - m);
    return (ag_real)(shifted / C);
}

static ag_real smoothed_loss(ag_real s, ag_real zy, ag_real mean, ag_real eps) {
    return s - (1 - eps) * zy - eps * mean;
}

/* Per row: m = max z, s = log sum exp(z - m), and the row's loss (0 on an
 * ignored row, so that the mean adds every row). */
AG_SIMD_CLONES static void ce_rows(void *ctx, int64_t r0, int64_t r1) {
    const ce_job *j = ctx;
    int C = j->C;
    for (int64_t r = r0; r < r1; r++) {
        int y = j->labels[r];
        if (y == j->ignore_index) {
            j->row_loss[r] = 0;
            continue;
        }
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
        j->max_out[r] = m;
        j->lse_out[r] = s;
        j->row_loss[r] = j->eps == 0 ? s - (z[y] - m) : smoothed_loss(s, z[y] - m, mean_shifted(z, C, m), j->eps);
    }
}

static void ce_forward_cpu(const ag_real *z, const int32_t *labels, int ignore_index, ag_real eps, ag_real *row_max,
                           ag_real *row_lse, ag_real *row_loss, int64_t rows, int C) {
    ce_job j = {.labels = labels, .Z = z, .C = C, .ignore_index = ignore_index, .max_out = row_max,
                .lse_out = row_lse, .row_loss = row_loss, .eps = eps};
    ag__parallel_range(rows, ag__units_per_part(C), ce_rows, &j);
}

/* In double, in row order: a mean over many rows in f32 drifts.  A row
 * that adds 0 (an ignored row) leaves the sum's bits as they were. */
static void row_mean_cpu(const ag_real *row_loss, int64_t rows, int64_t n, ag_real *out) {
    double total = 0;
    for (int64_t r = 0; r < rows; r++) total += (double)row_loss[r];
    *out = n ? (ag_real)(total / (double)n) : 0;
}

static void row_mean_f64_cpu(const double *row_loss, int64_t rows, int64_t n, ag_real *out) {
    double total = 0;
    for (int64_t r = 0; r < rows; r++) total += row_loss[r];
    *out = n ? (ag_real)(total / (double)n) : 0;
}

/* Label smoothing eps in [0, 1]: refused by op name otherwise. */
int64_t ag__smoothed_losses;

static void check_smoothing(const char *op, double eps) {
    if (!(eps >= 0 && eps <= 1))
        ag__fatal(op, "label smoothing %g: want a share in [0, 1] of the target spread over the classes (0: none)",
                  eps);
    if (eps > 0) ag__smoothed_losses++;
}

static ag_tensor *cross_entropy(const char *op, ag_tensor *logits, const int32_t *labels, int ignore_index, double eps);

ag_tensor *ag_cross_entropy(ag_tensor *logits, const int32_t *labels, int ignore_index) {
    return cross_entropy("ag_cross_entropy", logits, labels, ignore_index, 0);
}

ag_tensor *ag_cross_entropy_smoothed(ag_tensor *logits, const int32_t *labels, int ignore_index, double smoothing) {
    check_smoothing("ag_cross_entropy_smoothed", smoothing);
    return cross_entropy("ag_cross_entropy_smoothed", logits, labels, ignore_index, smoothing);
}

static ag_tensor *cross_entropy(const char *op, ag_tensor *logits, const int32_t *labels, int ignore_index, double eps) {
    ag_device dev = ag__check_same_device(op, logits, NULL);
    ag__need_array(op, "the labels array", labels);
    char sl[64];
    if (logits->ndim < 1 || logits->shape[logits->ndim - 1] < 1)
        ag__fatal(op, "logits must be [..., C] with C >= 1, got %s", ag_shape_str(logits, sl, sizeof sl));
    int C = logits->shape[logits->ndim - 1];
    int64_t rows = logits->size / C, counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (labels[r] == ignore_index) continue;
        if (labels[r] < 0 || labels[r] >= C)
            ag__fatal(op, "label %d at row %lld out of range [0, %d) for logits %s (ignore_index %d)",
                      labels[r], (long long)r, C, ag_shape_str(logits, sl, sizeof sl), ignore_index);
        counted++;
    }
    ce_saved *sv = ag__arena_alloc(sizeof *sv);
    *sv = (ce_saved){.labels = ag__step_i32_on(dev, labels, rows), /* the caller's may change */
                     .row_max = step_reals(dev, rows), .row_lse = step_reals(dev, rows), .rows = rows, .classes = C,
                     .ignore_index = ignore_index, .counted = counted, .eps = (ag_real)eps};
    ag_real *row_loss = step_reals(dev, rows);
    ag_tensor *out = ag__empty_on(dev, 0, NULL);
    const ag__loss_kernels *k = ag__loss_on(op, dev);
    k->ce_forward(logits->data, sv->labels, ignore_index, sv->eps, sv->row_max, sv->row_lse, row_loss, rows, C);
    k->row_mean(row_loss, rows, counted, out->data);
    ag_node *n = ag__record(op, cross_entropy_backward, out, 1, &logits);
    if (n) n->saved = sv;
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

typedef ag__klce lce_saved; /* ops/loss.h: kept, pos, X, P on x's device */

typedef struct {
    ag_real *Z;         /* [n, C]: logits in, gradients out when to_grad */
    ag_real *X;         /* [n, in]: the counted rows of x */
    const ag_real *x, *bias;
    const int32_t *kept, *labels;
    ag_real *loss;      /* per row */
    ag_real eps;        /* label smoothing */
    int C, in;
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
        ag_real mean = j->eps == 0 ? 0 : mean_shifted(z, C, m); /* before z becomes the gradient */
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
        /* plain: the difference in double, as before smoothing existed (CUDA's too) */
        j->loss[r] = j->eps == 0 ? (ag_real)(log(sum) - zy) : smoothed_loss((ag_real)log(sum), zy, mean, j->eps);
        if (j->to_grad) {
            ag_real inv = 1 / sum; /* sum >= 1: the max contributes e^0 */
            for (c = 0; c < C; c++) z[c] *= inv;
            if (j->eps == 0) {
                z[y] -= 1;
                continue;
            }
            ag_real spread = j->eps / (ag_real)C;
            for (c = 0; c < C; c++) z[c] -= spread;
            z[y] -= 1 - j->eps;
        }
    }
}

/* X rows = the counted rows of x; Z rows = the bias (or 0), before the
 * GEMM adds X op(W). */
static void lce_fill(void *ctx, int64_t i0, int64_t i1) {
    const lce_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        memcpy(j->X + i * j->in, j->x + (int64_t)j->kept[i] * j->in, (size_t)j->in * sizeof(ag_real));
        if (j->bias) memcpy(j->Z + i * j->C, j->bias, (size_t)j->C * sizeof(ag_real));
        else memset(j->Z + i * j->C, 0, (size_t)j->C * sizeof(ag_real));
    }
}

static void lce_forward_cpu(const ag__klce *p, const ag_real *x, const ag_real *w, const ag_real *bias,
                            const int32_t *labels, ag_real *loss, bool to_grad) {
    /* Z = bias + X op(W) over the counted rows: the bias rows first, so the
     * GEMM adds (beta 1) instead of zeroing Z in a pass of its own. */
    lce_job j = {.Z = p->P, .X = p->X, .x = x, .bias = bias, .kept = p->kept, .labels = labels, .loss = loss,
                 .C = p->C, .in = p->in, .to_grad = to_grad, .eps = p->eps};
    int N = (int)p->n;
    ag__parallel_range(N, ag__units_per_part(p->C), lce_fill, &j);
    ag__gemm(false, p->tw, N, p->C, p->in, 1, p->X, w, 1, p->P);
    ag__parallel_range(N, ag__units_per_part(p->C), lce_rows, &j);
}

static void lce_backward_cpu(const ag__klce *sv, const ag_real *w, const ag_real *G, ag_real *dx, bool fresh_x,
                             ag_real *dw, ag_real *db) {
    int64_t N = sv->n;
    int in = sv->in, C = sv->C;
    ag_real g = G[0] / (ag_real)N; /* d loss / d z = g P */
    if (dx) { /* dx = g P op(W)^T on the counted rows, 0 elsewhere */
        ag_real *dXc = ag__arena_alloc((size_t)N * in * sizeof(ag_real));
        ag__gemm(false, !sv->tw, (int)N, in, C, g, sv->P, w, 0, dXc);
        ag__unpack_rows(dx, dXc, in, sv->pos, sv->rows, fresh_x);
    }
    if (dw) { /* dW += g X^T P, or g P^T X stored [C, in] */
        if (sv->tw) ag__gemm(true, false, C, in, (int)N, g, sv->P, sv->X, 1, dw);
        else ag__gemm(true, false, in, C, (int)N, g, sv->X, sv->P, 1, dw);
    }
    if (db) { /* db += g 1^T P: a matrix-vector product */
        ag_real *ones = ag__arena_alloc((size_t)N * sizeof(ag_real));
        for (int64_t i = 0; i < N; i++) ones[i] = 1;
        ag__gemm(false, false, 1, C, (int)N, g, ones, sv->P, 1, db);
    }
}

static void linear_ce_backward(ag_node *n) {
    const lce_saved *sv = n->saved;
    ag_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    if (sv->n == 0) { /* every row ignored: the loss is the constant 0 */
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && ag__wants(n, i)) ag__grad(n->in[i]);
        return;
    }
    /* dL/dloss stays on the device: the kernels read it */
    bool fresh = false;
    ag_real *dx = ag__wants(n, 0) ? ag__grad_write(x, &fresh) : NULL;
    ag_real *dw = ag__wants(n, 1) ? ag__grad(w) : NULL;
    ag_real *db = bias && ag__wants(n, 2) ? ag__grad(bias) : NULL;
    ag__loss_on(n->op, x->device)->lce_backward(sv, w->data, n->out->grad, dx, fresh, dw, db);
}

static ag_tensor *linear_ce(const char *op, ag_tensor *x, ag_tensor *w, bool tw, ag_tensor *bias,
                            const int32_t *labels, int ignore_index, double eps) {
    char sx[64], sw[64], sb[64];
    ag__need(op, "the weight", w);
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
    lce_saved *sv = ag__arena_alloc(sizeof *sv);
    *sv = (lce_saved){.rows = rows, .in = in, .C = C, .tw = tw, .eps = (ag_real)eps};
    /* the counted rows, found on the host, then sent in one array (one
     * upload) of every byte set: each row's place among them (-1: ignored),
     * their labels, their rows */
    int32_t *pos = ag__arena_alloc((size_t)(rows ? 3 * rows : 1) * sizeof *pos), *ys = pos + rows, *kept = ys + rows;
    for (int64_t r = 0; r < rows; r++) {
        pos[r] = -1;
        if (labels[r] == ignore_index) continue;
        if (labels[r] < 0 || labels[r] >= C)
            ag__fatal(op, "label %d at row %lld out of range [0, %d) for x %s, weight %s (ignore_index %d)", labels[r],
                      (long long)r, C, ag_shape_str(x, sx, sizeof sx), ag_shape_str(w, sw, sizeof sw), ignore_index);
        pos[r] = (int32_t)sv->n;
        ys[sv->n] = labels[r];
        kept[sv->n++] = (int32_t)r;
    }
    int64_t N = sv->n;
    bool grad = ag_is_grad_enabled() && (x->requires_grad || w->requires_grad || (bias && bias->requires_grad));
    /* The counted rows' index in x's memory, X and Z = P there too. */
    memmove(ys + N, kept, (size_t)N * sizeof *kept);
    sv->pos = ag__step_i32_on(dev, pos, rows + 2 * N);
    const int32_t *labels_on = sv->pos + rows;
    sv->kept = labels_on + N;
    sv->X = step_reals(dev, N * in);
    sv->P = step_reals(dev, N * C);
    ag_real *loss = step_reals(dev, N);
    ag_tensor *out = ag__empty_on(dev, 0, NULL);
    const ag__loss_kernels *k = ag__loss_on(op, dev);
    k->lce_forward(sv, x->data, w->data, bias ? bias->data : NULL, labels_on, loss, grad);
    k->row_mean(loss, N, N, out->data);
    ag_node *n = ag__record(op, linear_ce_backward, out, 3, (ag_tensor *[]){x, w, bias});
    if (n) n->saved = sv;
    return out;
}

ag_tensor *ag_linear_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                   int ignore_index) {
    return linear_ce("ag_linear_cross_entropy", x, w, false, bias, labels, ignore_index, 0);
}

ag_tensor *ag_linear_t_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                     int ignore_index) {
    return linear_ce("ag_linear_t_cross_entropy", x, w, true, bias, labels, ignore_index, 0);
}

ag_tensor *ag_linear_cross_entropy_smoothed(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                            int ignore_index, double smoothing) {
    check_smoothing("ag_linear_cross_entropy_smoothed", smoothing);
    return linear_ce("ag_linear_cross_entropy_smoothed", x, w, false, bias, labels, ignore_index, smoothing);
}

ag_tensor *ag_linear_t_cross_entropy_smoothed(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                              int ignore_index, double smoothing) {
    check_smoothing("ag_linear_t_cross_entropy_smoothed", smoothing);
    return linear_ce("ag_linear_t_cross_entropy_smoothed", x, w, true, bias, labels, ignore_index, smoothing);
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

static void kl_backward_cpu(const ag_real *Z, const ag_real *T, const ag_real *row_max, const ag_real *row_lse,
                            const ag_real *row_mass, const ag_real *g, ag_real *GZ, int64_t rows, int C) {
    ag_real scale = g[0] / (ag_real)rows;
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *z = Z + r * C, *t = T + r * C;
        ag_real *gz = GZ + r * C, m = row_max[r], s = row_lse[r], mass = row_mass[r];
        for (int c = 0; c < C; c++) gz[c] += scale * (mass * exp((z[c] - m) - s) - t[c]);
    }
}

static void kl_div_soft_backward(ag_node *n) {
    const kl_saved *sv = n->saved;
    ag_real *gz = ag__grad(n->in[0]);
    ag__loss_on(n->op, n->in[0]->device)
        ->kl_backward(n->in[0]->data, sv->target, sv->row_max, sv->row_lse, sv->row_mass, n->out->grad, gz, sv->rows,
                      sv->classes);
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

/* Per row: m, s, the target's mass and the row's loss in double. */
static void kl_forward_cpu(const ag_real *Z, const ag_real *T, ag_real *row_max, ag_real *row_lse, ag_real *row_mass,
                           double *row_loss, int64_t rows, int C) {
    for (int64_t r = 0; r < rows; r++) {
        const ag_real *z = Z + r * C, *t = T + r * C;
        ag_real m = z[0], sum = 0, mass = 0;
        for (int c = 1; c < C; c++) m = z[c] > m ? z[c] : m;
        for (int c = 0; c < C; c++) sum += exp(z[c] - m);
        ag_real s = log(sum);
        double row = 0;
        for (int c = 0; c < C; c++) {
            mass += t[c];
            if (t[c] > 0) row += (double)(t[c] * (log(t[c]) - ((z[c] - m) - s)));
        }
        row_max[r] = m;
        row_lse[r] = s;
        row_mass[r] = mass;
        row_loss[r] = row;
    }
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
    /* the target copied once (checked on the host first): the caller's may
     * change before backward */
    kl_saved *sv = ag__arena_alloc(sizeof *sv);
    *sv = (kl_saved){.target = ag__step_dup_on(dev, target_probs, (size_t)rows * (size_t)C * sizeof(ag_real)),
                     .row_max = step_reals(dev, rows), .row_lse = step_reals(dev, rows),
                     .row_mass = step_reals(dev, rows), .rows = rows, .classes = C};
    double *row_loss = ag__step_alloc_on(dev, (size_t)rows * sizeof(double));
    ag_tensor *out = ag__empty_on(dev, 0, NULL);
    const ag__loss_kernels *k = ag__loss_on("ag_kl_div_soft", dev);
    k->kl_forward(logits->data, sv->target, sv->row_max, sv->row_lse, sv->row_mass, row_loss, rows, C);
    k->row_mean_f64(row_loss, rows, rows, out->data);
    ag_node *n = ag__record("ag_kl_div_soft", kl_div_soft_backward, out, 1, &logits);
    if (n) n->saved = sv;
    return out;
}

/* ---- mean squared error: mean (p - t)^2, d/dp = 2 (p - t) / N = -d/dt ---- */

static void mse_forward_cpu(const ag_real *p, const ag_real *t, ag_real *out, int64_t n) {
    double total = 0;
    for (int64_t i = 0; i < n; i++) {
        ag_real d = p[i] - t[i];
        total += (double)(d * d);
    }
    *out = (ag_real)(total / (double)n);
}

static void mse_backward_cpu(const ag_real *p, const ag_real *t, const ag_real *g, ag_real *gp, ag_real *gt,
                             int64_t n) {
    ag_real scale = 2 * g[0] / (ag_real)n;
    if (gp)
        for (int64_t i = 0; i < n; i++) gp[i] += scale * (p[i] - t[i]);
    if (gt)
        for (int64_t i = 0; i < n; i++) gt[i] -= scale * (p[i] - t[i]);
}

static void mse_backward(ag_node *n) {
    const ag_tensor *p = n->in[0], *t = n->in[1];
    ag_real *gp = ag__wants(n, 0) ? ag__grad(n->in[0]) : NULL, *gt = ag__wants(n, 1) ? ag__grad(n->in[1]) : NULL;
    ag__loss_on(n->op, p->device)->mse_backward(p->data, t->data, n->out->grad, gp, gt, p->size);
}

ag_tensor *ag_mse(ag_tensor *pred, ag_tensor *target) {
    ag__need("ag_mse", "the target", target);
    ag_device dev = ag__check_same_device("ag_mse", pred, target);
    ag__check_same_shape("ag_mse", pred, target);
    if (pred->size == 0) ag__fatal("ag_mse", "mean over empty tensors");
    /* in double, in a fixed order (CUDA: one block) */
    ag_tensor *out = ag__empty_on(dev, 0, NULL);
    ag__loss_on("ag_mse", dev)->mse_forward(pred->data, target->data, out->data, pred->size);
    ag__record("ag_mse", mse_backward, out, 2, (ag_tensor *[]){pred, target});
    return out;
}

/* ---- the CPU's table (ops/loss.h; CUDA's is in ops/cuda/loss.c) ---- */

static const ag__loss_kernels loss_cpu = {
    .ce_forward = ce_forward_cpu,
    .ce_backward = ce_backward_cpu,
    .row_mean = row_mean_cpu,
    .row_mean_f64 = row_mean_f64_cpu,
    .lce_forward = lce_forward_cpu,
    .lce_backward = lce_backward_cpu,
    .kl_forward = kl_forward_cpu,
    .kl_backward = kl_backward_cpu,
    .mse_forward = mse_forward_cpu,
    .mse_backward = mse_backward_cpu,
};
AG_DISPATCH(loss, loss_cpu)
