/* anomaly.c - anomaly mode (ag_anomaly), as PyTorch's detect_anomaly: every
 * op's output is checked as it is recorded, and in backward every gradient
 * an op's backward produced, and the first inf or NaN stops the program
 * (ag__fatal: a handler, or ag_try, sees it) naming the op, its shapes and
 * the model's line.  Off, ag__record and the sweep pay one branch each. */
#include "device.h"

bool ag__anomaly_on;

bool ag_anomaly(bool on) {
    bool old = ag__anomaly_on;
    ag__anomaly_on = on;
    return old;
}

bool ag_anomaly_enabled(void) { return ag__anomaly_on; }

/* The first inf or NaN of t's values (or gradient), or -1: a GPU tensor's
 * are read back, which is why anomaly mode is slow there. */
static int64_t first_nonfinite(const ag_tensor *t, bool grad, double *value) {
    return ag__first_nonfinite(grad ? t->grad : t->data, t->size, t->device, value);
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
    double v = 0, ignored;
    int64_t at = first_nonfinite(out, false, &v);
    if (at < 0) return;
    for (int i = 0; i < n_in; i++)
        if (in[i] && first_nonfinite(in[i], false, &ignored) >= 0) return;
    char so[64], si[256];
    input_shapes(in, n_in, si, sizeof si);
    ag__fatal(op, "anomaly mode: the output %s holds %g at element %lld, from finite inputs %s",
              ag_shape_str(out, so, sizeof so), v, (long long)at, si);
}

/* After node n's backward: the gradients it wrote into its inputs.  The
 * gradient it read (its output's) was checked when the op after it made
 * it (all but the seed), so a non-finite one here is n's own. */
void ag__anomaly_backward(const ag_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        const ag_tensor *x = n->in[i];
        if (!x || !x->requires_grad || !x->grad) continue;
        double v = 0;
        int64_t at = first_nonfinite(x, true, &v);
        if (at < 0) continue;
        char sx[64], si[256];
        input_shapes(n->in, n->n_in, si, sizeof si);
        ag_set_callsite(n->file, n->line); /* the op's line in the model, not the backward's caller */
        ag__fatal(n->op, "anomaly mode: backward made the gradient of input %d %s%s%s hold %g at element %lld "
                  "(inputs %s)", i + 1, ag_shape_str(x, sx, sizeof sx),
                  x->name ? ", parameter " : "", x->name ? x->name : "", v, (long long)at, si);
    }
}
