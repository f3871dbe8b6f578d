/* tape.c - define-by-run recording and the reverse sweep.
 *
 * The tape is the list of nodes in the order the forward pass created them,
 * which is a topological order, so backward simply walks it from the loss
 * down.  The list itself is a persistent array that only grows (to the
 * longest step seen); the nodes live in the step arena. */
#include "device.h"

void ag__arena_reset(void);
void ag__arena_shutdown(void);
void ag__parallel_shutdown(void); /* graph/parallel.c: joins the pool's threads */
void ag__profile_shutdown(void);  /* graph/profile.c */

static ag_node **tape;
static int tape_len, tape_cap;
static bool grad_enabled = true;
uint32_t ag__step_now = 1;

bool ag_set_grad_enabled(bool enabled) {
    bool old = grad_enabled;
    grad_enabled = enabled;
    return old;
}

bool ag_is_grad_enabled(void) { return grad_enabled; }

/* Inside a backward sweep: an op a node's backward runs is that node's
 * time, which the sweep charges, not a forward op's. */
static bool sweeping;

static ag_node *record(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in, ag_tensor *const *in,
                       bool always);

ag_node *ag__record(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in, ag_tensor *const *in) {
    return record(op, bw, out, n_in, in, false);
}

ag_node *ag__record_always(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in, ag_tensor *const *in) {
    return record(op, bw, out, n_in, in, true);
}

/* always: recorded whenever gradients are on, whether or not an input
 * requires grad (ag_recompute: what f reads through its context may). */
static ag_node *record(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in, ag_tensor *const *in,
                       bool always) {
    int line;
    const char *file = ag__callsite(&line);
    if (ag__prof_on && !sweeping) ag__prof_forward(op, file, line);
    ag__stamp(out, op); /* views are made here, not by ag__empty */
    /* The op's kernels were launched (ops/dispatch.h): a launch error is a
     * programmer error naming it. */
    if (out->device == AG_CUDA) ag__cuda_check_launch(op);
    if (ag__anomaly_on) ag__anomaly_forward(op, out, n_in, in);
    if (!grad_enabled) return NULL;
    bool any = false;
    for (int i = 0; i < n_in; i++) {
        ag__check_live(op, in[i]); /* ops check their inputs first; this catches one that did not */
        any |= in[i] && in[i]->requires_grad;
    }
    if (!grad_enabled || !(any || always)) return NULL;
    if (n_in > AG_MAX_INPUTS) ag__fatal(op, "%d inputs (at most %d)", n_in, AG_MAX_INPUTS);
    ag_node *n = ag__arena_zalloc(sizeof *n);
    n->op = op;
    n->backward = bw;
    n->out = out;
    n->file = file;
    n->line = line;
    n->n_in = n_in;
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    if (tape_len == tape_cap) {
        tape_cap = tape_cap ? 2 * tape_cap : 256;
        tape = ag__realloc(tape, (size_t)tape_cap * sizeof *tape);
    }
    n->index = tape_len;
    tape[tape_len++] = n;
    out->requires_grad = true;
    out->node = n;
    return n;
}

/* A gradient lives on its tensor's device, in that device's step arena. */
ag_real *ag__grad(ag_tensor *t) {
    if (t->grad) return t->grad;
    size_t bytes = (size_t)t->size * sizeof(ag_real);
    if (t->device == AG_CUDA) {
        t->grad = ag__cuda_arena_alloc(bytes);
        ag__cuda_zero(t->grad, bytes);
    } else {
        t->grad = ag__arena_zalloc(bytes);
    }
    return t->grad;
}

ag_real *ag__grad_write(ag_tensor *t, bool *fresh) {
    *fresh = !t->grad;
    if (!t->grad) {
        size_t bytes = (size_t)t->size * sizeof(ag_real);
        t->grad = t->device == AG_CUDA ? ag__cuda_arena_alloc(bytes) : ag__arena_alloc(bytes);
    }
    return t->grad;
}

/* Gradients of intermediate results are rebuilt on every sweep, so a second
 * backward over a retained tape gives the same answer for them (leaves and
 * parameters accumulate, as in PyTorch). */
static void clear_intermediate_grads(int upto) {
    for (int i = 0; i <= upto; i++)
        if (!tape[i]->out->persistent) tape[i]->out->grad = NULL;
}

/* The nodes the sweep from out will run are those its gradient can reach:
 * its own and, from each reached node, its inputs' nodes.  One spent by an
 * earlier backward is refused before anything is added, so a refused
 * backward leaves every gradient as it was.  One pass over the tape. */
static void check_not_spent(const ag_tensor *out) {
    static uint32_t pass;
    if (++pass == 0) pass = 1; /* 0 is a new node's */
    out->node->reach = pass;
    for (int i = out->node->index; i >= 0; i--) {
        ag_node *n = tape[i];
        if (n->reach != pass) continue;
        if (n->spent)
            ag__fatal("backward", "a second backward through the tape: %s (recorded at %s:%d) was swept by an earlier "
                      "backward of this step; use ag_backward_retain for every backward but the last over a shared "
                      "graph, or rebuild the graph", n->op, n->file ? n->file : "?", n->line);
        for (int k = 0; k < n->n_in; k++)
            if (n->in[k] && n->in[k]->node) n->in[k]->node->reach = pass;
    }
}

/* The profiler's account of the nodes swept so far, which a node that
 * sweeps nodes of its own subtracts from its time. */
static double nested_seconds;
static int64_t nested_launches;

/* The nodes from out's down to first (0: the whole tape). */
static void sweep(ag_tensor *out, bool retain, int first) {
    if (!out->node) return; /* a leaf: nothing to propagate */
    bool was = sweeping;
    sweeping = true;
    for (int i = out->node->index; i >= first; i--) {
        ag_node *n = tape[i];
        if (!n->out->grad) continue;
        n->spent = n->spent || !retain;
        if (ag__prof_on) { /* a node's own time: a sweep inside it (ag_recompute) charges its nodes itself */
            double t0 = ag__seconds(), inner0 = nested_seconds;
            int64_t l0 = ag__cuda_launches(), inner_l0 = nested_launches;
            n->backward(n);
            double dt = ag__seconds() - t0;
            int64_t dl = ag__cuda_launches() - l0;
            ag__prof_backward(n, dt - (nested_seconds - inner0), dl - (nested_launches - inner_l0));
            nested_seconds = inner0 + dt, nested_launches = inner_l0 + dl;
        } else {
            n->backward(n);
        }
        if (n->out->device == AG_CUDA) ag__cuda_check_launch(n->op);
        if (ag__anomaly_on) ag__anomaly_backward(n);
    }
    sweeping = was;
    if (ag__prof_on) ag__prof_site(); /* the sweep is charged node by node: no forward op's time */
}

/* bytes between any two places, host or GPU. */
static void copy_any(void *dst, ag_device dst_dev, const void *src, ag_device src_dev, size_t bytes) {
    if (dst_dev == AG_CPU && src_dev == AG_CPU) memcpy(dst, src, bytes);
    else ag__cuda_copy(dst, dst_dev, src, src_dev, bytes);
}

/* out's gradient += the seed.  Its buffer is new but for an output that
 * keeps its gradient (persistent): then the sum is made on the host, a
 * wait that only such a backward pays. */
static void add_seed(ag_tensor *out, const ag_real *seed, ag_device seed_dev) {
    size_t bytes = (size_t)out->size * sizeof(ag_real);
    bool fresh;
    ag_real *g = ag__grad_write(out, &fresh);
    if (fresh || !bytes) {
        copy_any(g, out->device, seed, seed_dev, bytes);
        return;
    }
    ag_real *sum = ag__arena_alloc(bytes), *add = ag__arena_alloc(bytes);
    copy_any(sum, AG_CPU, g, out->device, bytes);
    copy_any(add, AG_CPU, seed, seed_dev, bytes);
    for (int64_t i = 0; i < out->size; i++) sum[i] += add[i];
    copy_any(g, out->device, sum, AG_CPU, bytes);
}

/* seed: out->size values of d(out) in seed_dev's memory. */
static void backward(ag_tensor *out, const ag_real *seed, ag_device seed_dev, bool retain) {
    ag__need("backward", "the output", out);
    ag__check_live("backward", out);
    if (!out->requires_grad)
        ag__fatal("backward", "the output does not require grad (no parameter or input with requires_grad reached it)");
    if (out->node) {
        check_not_spent(out);
        clear_intermediate_grads(out->node->index);
    }
    add_seed(out, seed, seed_dev);
    sweep(out, retain, 0);
}

void ag__sweep_segment(ag_tensor *out, const ag_real *seed, int first) {
    add_seed(out, seed, out->device);
    sweep(out, false, first);
}

void ag_backward_seeded(ag_tensor *out, const ag_real *seed) { backward(out, seed, AG_CPU, false); }
void ag_backward_seeded_retain(ag_tensor *out, const ag_real *seed) { backward(out, seed, AG_CPU, true); }

void ag_backward_seeded_tensor(ag_tensor *out, const ag_tensor *seed) {
    ag__check_same_device("backward", out, seed);
    if (!ag_same_shape(out, seed)) {
        char so[64], ss[64];
        ag__fatal("backward", "the seed's shape %s differs from the output's %s", ag_shape_str(seed, ss, sizeof ss),
                  ag_shape_str(out, so, sizeof so));
    }
    backward(out, seed->data, seed->device, false);
}

static void backward_scalar(ag_tensor *loss, bool retain) {
    ag__need("backward", "the loss", loss);
    ag__check_live("backward", loss);
    if (loss->size != 1) {
        char s[64];
        ag__fatal("backward", "loss must have one element, got shape %s (use ag_backward_seeded)",
                  ag_shape_str(loss, s, sizeof s));
    }
    ag_real one = 1;
    backward(loss, &one, AG_CPU, retain);
}

void ag_backward(ag_tensor *loss) { backward_scalar(loss, false); }
void ag_backward_retain(ag_tensor *loss) { backward_scalar(loss, true); }

void ag_step_end(void) {
    if (ag__prof_on) ag__prof_site(); /* a new step: no op's forward runs from the last one's */
    sweeping = false;                  /* a fatal error caught inside a sweep left it set */
    tape_len = 0;
    if (++ag__step_now == 0) ag__step_now = 1; /* 0 marks tensors that are not step memory */
    ag__arena_reset();
    ag__cuda_arena_reset();
}

ag_mark_t ag_mark(void) {
    ag_mark_t m;
    ag__arena_mark(&m.arena_pos, &m.arena_chunk);
    ag__cuda_arena_mark(&m.device_pos, &m.device_chunk);
    m.tape_len = tape_len;
    return m;
}

void ag_rewind(ag_mark_t m) {
    tape_len = m.tape_len;
    ag__arena_rewind(m.arena_pos, m.arena_chunk);
    ag__cuda_arena_rewind(m.device_pos, m.device_chunk);
}

/* What layers above the engine hold until ag_shutdown (ops/masks.c's cache
 * of constant masks): released first, the last registered first. */
enum { MAX_AT_SHUTDOWN = 8 };
static void (*at_shutdown[MAX_AT_SHUTDOWN])(void);
static int n_at_shutdown;

void ag__at_shutdown(void (*release)(void)) {
    for (int i = 0; i < n_at_shutdown; i++)
        if (at_shutdown[i] == release) return;
    if (n_at_shutdown == MAX_AT_SHUTDOWN) ag__fatal("ag__at_shutdown", "more than %d releases", MAX_AT_SHUTDOWN);
    at_shutdown[n_at_shutdown++] = release;
}

void ag_shutdown(void) {
    ag__free(tape);
    tape = NULL;
    tape_len = tape_cap = 0;
    while (n_at_shutdown > 0) at_shutdown[--n_at_shutdown]();
    ag__parallel_shutdown();
    ag__profile_shutdown();
    ag__arena_shutdown();
    ag__cuda_shutdown();
}
