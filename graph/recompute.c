/* recompute.c - activation checkpointing (torch.utils.checkpoint's idea):
 * a region of the forward whose intermediate results are not kept.
 *
 * ag_recompute runs f with gradients off, keeps its output and rewinds the
 * step memory f took (ag_mark/ag_rewind), so of the region only y stays.
 * Its one node on the tape, when swept, marks the tape and the arenas,
 * runs f again with gradients on over aliases of the same inputs, sweeps
 * the nodes that run recorded (ag__sweep_segment: nothing recorded before
 * the mark) and rewinds again.  The aliases' gradients are the inputs'
 * own buffers, taken before the mark, so the second run's sweep adds into
 * them as the ops would have without the region; parameters f reads
 * through its context are leaves with their gradients allocated up front,
 * and get theirs the same way.  A nested region inside f is a node of
 * that second run, recomputed in its turn. */
#include "device.h"

typedef struct {
    ag_recompute_fn f;
    void *ctx;
    ag_rng *rng;         /* the generator f draws from, or NULL */
    ag_rng rng_at_start; /* where it stood when the first run began */
} recompute_saved;

/* y's values between the first run and their place after the rewind: a
 * buffer a device, kept and grown to the largest y (no allocation in a
 * steady state). */
static void *kept[2];
static size_t kept_bytes[2];

static void release_kept(void) {
    for (int d = 0; d < 2; d++) {
        if (kept[d]) ag__free_kept_on((ag_device)d, kept[d]);
        kept[d] = NULL, kept_bytes[d] = 0;
    }
}

static void *kept_for(ag_device d, size_t bytes) {
    if (bytes > kept_bytes[d]) {
        if (kept[d]) ag__free_kept_on(d, kept[d]);
        kept[d] = ag__zeros_kept_on(d, bytes, "ag_recompute's copy of its output");
        kept_bytes[d] = bytes;
        ag__at_shutdown(release_kept);
    }
    return kept[d];
}

static void copy_on(ag_device d, void *dst, const void *src, size_t bytes) {
    if (!bytes) return;
    if (d == AG_CPU) memcpy(dst, src, bytes);
    else ag__cuda_copy(dst, d, src, d, bytes);
}

/* A leaf with t's values: what the second run reads, gradient t's own. */
static ag_tensor *alias_of(ag_tensor *t, bool grad) {
    ag_tensor *a = ag__view_of(t->data, t->device, t->ndim, t->shape, "ag_recompute");
    a->requires_grad = grad;
    a->grad = grad ? ag__grad(t) : NULL;
    return a;
}

static void need_same_output(const ag_tensor *first, const ag_tensor *again) {
    if (!again) ag__fatal("ag_recompute", "f returned NULL when run again for backward");
    ag__check_live("ag_recompute", again);
    if (!ag_same_shape(first, again) || first->device != again->device) {
        char a[64], b[64];
        ag__fatal("ag_recompute", "f gave %s on the %s, run again for backward %s on the %s: it must compute the "
                  "same function both times (dropout: pass its rng)", ag_shape_str(first, a, sizeof a),
                  ag_device_name(first->device), ag_shape_str(again, b, sizeof b), ag_device_name(again->device));
    }
}

static void recompute_backward(ag_node *n) {
    const recompute_saved *s = n->saved;
    ag_tensor *alias[AG_MAX_INPUTS];
    for (int i = 0; i < n->n_in; i++) alias[i] = alias_of(n->in[i], ag__wants(n, i));
    ag_mark_t m = ag_mark(); /* the inputs' gradients are above it: the rewind keeps them */
    ag_rng now;
    if (s->rng) now = *s->rng, *s->rng = s->rng_at_start;
    bool was = ag_set_grad_enabled(true);
    ag_callsite_push(n->file, n->line); /* the second run's ops and messages name the region's line */
    ag_tensor *y = ag_callsite_pop(s->f(s->ctx, alias));
    ag_set_grad_enabled(was);
    if (s->rng) *s->rng = now;
    need_same_output(n->out, y);
    if (y->requires_grad) ag__sweep_segment(y, n->out->grad, m.tape_len);
    ag_rewind(m);
}

ag_tensor *ag_recompute(ag_recompute_fn f, void *ctx, size_t ctx_bytes, int n, ag_tensor *const *in, ag_rng *rng) {
    const char *op = "ag_recompute";
    if (!f) ag__fatal(op, "f is NULL");
    if (n < 0 || n > AG_MAX_INPUTS) ag__fatal(op, "%d inputs: want 0 to %d (pass more through ctx)", n, AG_MAX_INPUTS);
    if (n > 0) ag__need_array(op, "the inputs", in);
    for (int i = 0; i < n; i++) {
        char what[32];
        snprintf(what, sizeof what, "in[%d]", i);
        ag__need(op, what, in[i]);
    }
    if (!ag_is_grad_enabled()) return f(ctx, in); /* nothing to keep or forget */

    if (ctx_bytes) { /* the caller's struct may be gone by backward: its bytes, in step memory (below the mark) */
        ag__need_array(op, "ctx", ctx);
        ctx = memcpy(ag__arena_alloc(ctx_bytes), ctx, ctx_bytes);
    }
    recompute_saved s = {f, ctx, rng, rng ? *rng : (ag_rng){{0}}};
    ag_mark_t m = ag_mark();
    ag_set_grad_enabled(false);
    ag_tensor *y = f(ctx, in);
    ag_set_grad_enabled(true);
    if (!y) ag__fatal(op, "f returned NULL");
    ag__check_live(op, y);
    int ndim = y->ndim, shape[AG_MAX_DIMS];
    memcpy(shape, y->shape, sizeof shape);
    ag_device dev = y->device;
    size_t bytes = (size_t)y->size * sizeof(ag_real);
    void *keep = kept_for(dev, bytes ? bytes : 1);
    copy_on(dev, keep, y->data, bytes);
    ag_rewind(m); /* everything f made, y too */
    ag_tensor *out = ag__empty_on(dev, ndim, shape);
    copy_on(dev, out->data, keep, bytes);
    ag_node *node = ag__record_always(op, recompute_backward, out, n, in);
    if (node) {
        recompute_saved *p = ag__arena_alloc(sizeof *p);
        *p = s;
        node->saved = p;
    }
    return out;
}
