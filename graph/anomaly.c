/* anomaly.c - anomaly mode (ag_anomaly), as PyTorch's detect_anomaly: every
 * op's output is checked as it is recorded, and in backward every gradient
 * an op's backward produced, and the first inf or NaN stops the program
 * (ag__fatal: a handler, or ag_try, sees it) naming the op, its shapes and
 * the model's line.  Off, ag__record and the sweep pay one branch each. */
#include "internal.h"

bool ag__anomaly_on;

bool ag_anomaly(bool on) {
    bool old = ag__anomaly_on;
    ag__anomaly_on = on;
    return old;
}

bool ag_anomaly_enabled(void) { return ag__anomaly_on; }

/* The first element of x[0..n) that is inf or NaN, or -1. */
static int64_t first_nonfinite(const ag_real *x, int64_t n) {
    for (int64_t i = 0; x && i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* "[2,3] and [3]" for an op's inputs. */
static void input_shapes(ag_tensor *const *in, int n_in, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n_in && k < n; i++) {
        char s[64];
        if (!in[i]) continue;
        k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? (i + 1 == n_in ? " and " : ", ") : "",
                              ag_shape_str(in[i], s, sizeof s));
    }
}

/* An output that is not finite from inputs that all are: the op made the
 * inf or NaN.  When an input already holds one, the value came from outside
 * the checked ops (a constant mask's -inf, the caller's data) and passing
 * it on is not this op's anomaly. */
void ag__anomaly_forward(const char *op, const ag_tensor *out, int n_in, ag_tensor *const *in) {
    if (out->device != AG_CPU) return; /* the GPU's values stay there: anomaly mode checks CPU ops so far */
    int64_t at = first_nonfinite(out->data, out->size);
    if (at < 0) return;
    for (int i = 0; i < n_in; i++)
        if (in[i] && (in[i]->device != AG_CPU || first_nonfinite(in[i]->data, in[i]->size) >= 0)) return;
    char so[64], si[256];
    input_shapes(in, n_in, si, sizeof si);
    ag__fatal(op, "anomaly mode: the output %s holds %g at element %lld, from finite inputs %s",
              ag_shape_str(out, so, sizeof so), isnan(out->data[at]) ? NAN : (double)out->data[at], (long long)at, si);
}

/* After node n's backward: the gradients it wrote into its inputs.  The
 * gradient it read (its output's) was checked when the op after it made
 * it (all but the seed), so a non-finite one here is n's own. */
void ag__anomaly_backward(const ag_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        const ag_tensor *x = n->in[i];
        if (!x || !x->requires_grad || !x->grad || x->device != AG_CPU) continue;
        int64_t at = first_nonfinite(x->grad, x->size);
        if (at < 0) continue;
        char sx[64], si[256];
        input_shapes(n->in, n->n_in, si, sizeof si);
        ag_set_callsite(n->file, n->line); /* the op's line in the model, not the backward's caller */
        ag__fatal(n->op, "anomaly mode: backward made the gradient of input %d %s%s%s hold %g at element %lld "
                  "(inputs %s)", i + 1, ag_shape_str(x, sx, sizeof sx),
                  x->name ? ", parameter " : "", x->name ? x->name : "", isnan(x->grad[at]) ? NAN : (double)x->grad[at],
                  (long long)at, si);
    }
}
