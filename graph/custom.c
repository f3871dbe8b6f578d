/* custom.c - ops written by the user (torch.autograd.Function): a forward
 * and a backward on plain arrays, recorded on the tape like any built-in
 * op.  The engine does for them what it does for its own ops: checks the
 * inputs (alive, on the CPU), allocates the output and the input gradients
 * from the step arena, keeps the user's saved state until backward, and
 * names the op in errors and in the profiler. */
#include "internal.h"

/* What the node keeps: the functions and the caller's parameters are
 * copied, so neither has to outlive the call. */
typedef struct {
    ag_custom_fn fn;
    void *saved;
    void *params;
} custom_node;

/* The user's code runs with recording off: it may use ops for scratch
 * values (step memory), and none of them lands on the tape. */
static void run_user(void (*f)(ag_custom_call *), ag_custom_call *c) {
    bool was = ag_set_grad_enabled(false);
    f(c);
    ag_set_grad_enabled(was);
}

static void custom_backward(ag_node *n) {
    custom_node *s = n->saved;
    ag_real *grad_in[AG_MAX_INPUTS] = {0};
    for (int i = 0; i < n->n_in; i++)
        if (ag__wants(n, i)) grad_in[i] = ag__grad(n->in[i]);
    ag_custom_call c = {.name = s->fn.name, .in = n->in, .n_in = n->n_in, .out = n->out, .grad_out = n->out->grad,
                        .grad_in = grad_in, .saved = s->saved, .params = s->params};
    run_user(s->fn.backward, &c);
}

ag_tensor *ag_custom_op(const ag_custom_fn *fn, ag_tensor *const *in, int n, int out_ndim, const int *out_shape,
                        const void *params, size_t params_bytes) {
    const char *op = fn && fn->name ? fn->name : "ag_custom_op";
    if (!fn || !fn->forward) ag__fatal(op, "a custom op needs a forward function");
    if (n < 1 || n > AG_MAX_INPUTS) ag__fatal(op, "%d inputs: a custom op takes 1 to %d", n, AG_MAX_INPUTS);
    for (int i = 0; i < n; i++) {
        if (!in[i]) ag__fatal(op, "input %d is NULL", i);
        ag__check_device(op, in[i], NULL);
    }
    ag_tensor *out = ag_tensor_new(out_ndim, out_shape);
    custom_node *s = ag__arena_zalloc(sizeof *s);
    s->fn = *fn;
    s->saved = fn->saved_bytes ? ag__arena_zalloc(fn->saved_bytes) : NULL;
    if (params_bytes) {
        s->params = ag__arena_alloc(params_bytes);
        memcpy(s->params, params, params_bytes);
    }
    ag_custom_call c = {.name = op, .in = in, .n_in = n, .out = out, .saved = s->saved, .params = s->params};
    run_user(fn->forward, &c);
    s->saved = c.saved; /* forward may have pointed it at step memory of its own */
    bool any = false;
    for (int i = 0; i < n; i++) any |= in[i]->requires_grad;
    if (any && ag_is_grad_enabled() && !fn->backward)
        ag__fatal(op, "an input requires grad, but the op has no backward function (record it under "
                  "ag_set_grad_enabled(false), or give it one)");
    ag_node *node = ag__record(op, custom_backward, out, n, in);
    if (node) node->saved = s;
    return out;
}
