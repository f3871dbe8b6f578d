/* loss.c - cross-entropy (fused, stable log-softmax + NLL) and mean squared
 * error.  Both return a 0-dim scalar. */
#include "../graph/internal.h"

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
 * activation of the step. */

typedef struct {
    int32_t *labels;    /* copy of the caller's labels */
    ag_real *row_max;   /* m per row (unset for ignored rows) */
    ag_real *row_lse;   /* s per row (unset for ignored rows) */
    int64_t rows;
    int classes, ignore_index;
    int64_t counted;    /* rows whose label is not ignore_index */
} ce_saved;

static void cross_entropy_backward(ag_node *n) {
    const ce_saved *sv = n->saved;
    ag_real *GZ = ag__grad(n->in[0]); /* allocated even when it stays zero */
    if (sv->counted == 0) return;     /* every row ignored: the loss is the constant 0 */
    const ag_real *Z = n->in[0]->data;
    ag_real scale = n->out->grad[0] / (ag_real)sv->counted;
    int C = sv->classes;
    for (int64_t r = 0; r < sv->rows; r++) {
        int y = sv->labels[r];
        if (y == sv->ignore_index) continue;
        const ag_real *z = Z + r * C;
        ag_real *gz = GZ + r * C, m = sv->row_max[r], s = sv->row_lse[r];
        for (int c = 0; c < C; c++) gz[c] += scale * exp((z[c] - m) - s);
        gz[y] -= scale;
    }
}

ag_tensor *ag_cross_entropy(ag_tensor *logits, const int32_t *labels, int ignore_index) {
    ag__check_device("ag_cross_entropy", logits, NULL);
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

    /* Recorded first so the forward pass can fill in what backward needs. */
    ag_tensor *out = ag__empty(0, NULL);
    ag_node *n = ag__record("ag_cross_entropy", cross_entropy_backward, out, 1, &logits);
    ce_saved *sv = NULL;
    if (n) {
        sv = ag_arena_alloc(sizeof *sv);
        *sv = (ce_saved){.rows = rows, .classes = C, .ignore_index = ignore_index, .counted = counted};
        sv->labels = ag_arena_alloc((size_t)rows * sizeof *sv->labels); /* the caller's may change */
        memcpy(sv->labels, labels, (size_t)rows * sizeof *sv->labels);
        sv->row_max = ag_arena_alloc((size_t)rows * sizeof(ag_real));
        sv->row_lse = ag_arena_alloc((size_t)rows * sizeof(ag_real));
        n->saved = sv;
    }

    double total = 0; /* in double: a mean over many rows in f32 drifts */
    for (int64_t r = 0; r < rows; r++) {
        int y = labels[r];
        if (y == ignore_index) continue;
        const ag_real *z = logits->data + r * C;
        ag_real m = z[0], sum = 0;
        for (int c = 1; c < C; c++) m = z[c] > m ? z[c] : m;
        for (int c = 0; c < C; c++) sum += exp(z[c] - m);
        ag_real s = log(sum);
        if (sv) {
            sv->row_max[r] = m;
            sv->row_lse[r] = s;
        }
        total += (double)(s - (z[y] - m));
    }
    out->data[0] = counted ? (ag_real)(total / (double)counted) : 0;
    return out;
}

/* ---- mean squared error: mean (p - t)^2, d/dp = 2 (p - t) / N = -d/dt ---- */

static void mse_backward(ag_node *n) {
    const ag_tensor *p = n->in[0], *t = n->in[1];
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
    ag__check_device("ag_mse", pred, target);
    ag__check_same_shape("ag_mse", pred, target);
    if (pred->size == 0) ag__fatal("ag_mse", "mean over empty tensors");
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
