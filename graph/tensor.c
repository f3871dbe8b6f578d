/* tensor.c - creating tensors and parameters, and shape helpers. */
#include "device.h"

#include <stdio.h>

/* The real type this library was built for: the symbol attngrad.h makes
 * every including file refer to (a program of the other type fails to link). */
const char AG__REAL_BUILD = 1;

static void set_shape(ag_tensor *t, int ndim, const int *shape) {
    if (ndim < 0 || ndim > AG_MAX_DIMS) ag__fatal("tensor", "%d dims (at most %d)", ndim, AG_MAX_DIMS);
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < AG_MAX_DIMS; i++) t->shape[i] = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) ag__fatal("tensor", "negative dim %d at axis %d", shape[i], i);
        if (shape[i] > 0 && t->size > INT64_MAX / shape[i] / (int64_t)sizeof(ag_real))
            ag__fatal("tensor", "%d dims up to axis %d hold more elements than memory can address", ndim, i);
        t->shape[i] = shape[i];
        t->size *= shape[i];
    }
}

/* Parameters live for the whole run with their gradients: a set bigger than
 * the machine's memory (a size option off by orders of magnitude) is
 * refused by name here, not left to an overcommitted calloc and the OOM
 * killer.  Named are the parameter that crosses the line and the largest. */
double ag__param_bytes_limit;

static const char *bytes_str(double bytes, char *buf, size_t n) {
    if (bytes >= (1 << 30)) snprintf(buf, n, "%.1f GiB", bytes / (1 << 30));
    else snprintf(buf, n, "%.1f MiB", bytes / (1 << 20));
    return buf;
}

static void check_fits_in_memory(const ag_params *ps, const char *name, const ag_tensor *t) {
    ag__mem_room room = ag__param_bytes_limit > 0 ? (ag__mem_room){.total = ag__param_bytes_limit,
                                                                   .total_what = "this machine's memory"}
                                                  : ag__memory_room(false);
    double have = room.total;
    if (have <= 0) return; /* unknown */
    double per_elem = 2.0 * sizeof(ag_real), own = (double)t->size * per_elem, need = own;
    const ag_tensor *largest = t;
    for (int i = 0; i < ps->count; i++) {
        need += (double)ps->items[i]->size * per_elem;
        if (ps->items[i]->size > largest->size) largest = ps->items[i];
    }
    if (need <= have) return;
    char s[64], ls[64], b1[32], b2[32], b3[32];
    if (own > have)
        ag__fatal("ag_param", "'%s' %s would take %s with its gradient, more than %s (%s)", name,
                  ag_shape_str(t, s, sizeof s), bytes_str(own, b1, sizeof b1), room.total_what,
                  bytes_str(have, b2, sizeof b2));
    ag__fatal("ag_param", "'%s' %s brings the %d parameters to %s with their gradients (the largest: '%s' %s, %s), "
              "more than %s (%s)", name, ag_shape_str(t, s, sizeof s), ps->count + 1, bytes_str(need, b1, sizeof b1),
              largest == t ? name : largest->name, ag_shape_str(largest, ls, sizeof ls),
              bytes_str((double)largest->size * per_elem, b2, sizeof b2), room.total_what, bytes_str(have, b3, sizeof b3));
}

ag_tensor *ag__empty(int ndim, const int *shape) {
    ag_tensor *t = ag__arena_zalloc(sizeof *t);
    set_shape(t, ndim, shape);
    t->data = ag__arena_alloc((size_t)t->size * sizeof(ag_real));
    ag__stamp(t, NULL);
    return t;
}

ag_tensor *ag__view_of(ag_real *data, ag_device dev, int ndim, const int *shape, const char *op) {
    ag_tensor *t = ag__arena_zalloc(sizeof *t);
    set_shape(t, ndim, shape);
    t->data = data;
    t->device = dev;
    ag__stamp(t, op);
    return t;
}

/* On the GPU the header stays in the host arena (ops read shapes on the
 * host) and the data goes to the device arena. */
ag_tensor *ag__empty_on(ag_device dev, int ndim, const int *shape) {
    if (dev == AG_CPU) return ag__empty(ndim, shape);
    ag_tensor *t = ag__arena_zalloc(sizeof *t);
    set_shape(t, ndim, shape);
    t->data = ag__cuda_arena_alloc((size_t)t->size * sizeof(ag_real));
    t->device = dev;
    ag__stamp(t, NULL);
    return t;
}

ag_tensor *ag__zeros(int ndim, const int *shape) {
    ag_tensor *t = ag__empty(ndim, shape);
    ag__zero(t->data, (size_t)t->size * sizeof(ag_real));
    ag__stamp(t, "ag_tensor_new");
    return t;
}

ag_tensor *ag_tensor_new_host(int ndim, const int *shape) { return ag__zeros(ndim, shape); }

/* The user's tensors go to the current device (ag_set_device). */
ag_tensor *ag_tensor_new(int ndim, const int *shape) {
    ag_tensor *t = ag__zeros(ndim, shape);
    ag__stamp(t, "ag_tensor_new");
    return ag__on_current(t);
}

ag_tensor *ag_tensor_from(const ag_real *data, int ndim, const int *shape) {
    ag_tensor *t = ag__empty(ndim, shape);
    memcpy(t->data, data, (size_t)t->size * sizeof(ag_real));
    ag__stamp(t, "ag_tensor_from");
    return ag__on_current(t);
}

ag_tensor *ag_tensor_fill(ag_real value, int ndim, const int *shape) {
    ag_tensor *t = ag__empty(ndim, shape);
    for (int64_t i = 0; i < t->size; i++) t->data[i] = value;
    ag__stamp(t, "ag_tensor_fill");
    return ag__on_current(t);
}

ag_tensor *ag_scalar(ag_real value) { return ag_tensor_fill(value, 0, NULL); }

ag_tensor *ag_tensor_like(const ag_tensor *t) {
    ag__need("ag_tensor_like", "the tensor", t);
    ag__check_live("ag_tensor_like", t);
    return ag_tensor_new(t->ndim, t->shape);
}

bool ag_same_shape(const ag_tensor *a, const ag_tensor *b) {
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return false;
    return true;
}

int ag_dim(const ag_tensor *t, int axis) { return t->shape[ag__axis("dim", t, axis)]; }

const char *ag_shape_str(const ag_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, i ? ",%d" : "%d", t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* ---- name scopes: "layer0." + "attn." + name ---- */

enum { SCOPE_DEPTH = 16, SCOPE_CHARS = 256 };
static char scope_buf[SCOPE_CHARS]; /* the joined prefix, each scope followed by '.' */
static int scope_end[SCOPE_DEPTH + 1], scope_depth;

void ag_scope_push(const char *fmt, ...) {
    char name[SCOPE_CHARS] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(name, sizeof name, fmt, ap);
        va_end(ap);
    }
    if (!*name || strchr(name, '.'))
        ag__fatal("ag_scope_push", "scope name '%s': want a non-empty name without '.'", name);
    size_t at = (size_t)scope_end[scope_depth], n = strlen(name);
    if (scope_depth == SCOPE_DEPTH || at + n + 2 > SCOPE_CHARS)
        ag__fatal("ag_scope_push", "'%s' inside '%s': scopes nest at most %d deep in %d characters", name, scope_buf,
                  SCOPE_DEPTH, SCOPE_CHARS - 1);
    memcpy(scope_buf + at, name, n);
    scope_buf[at + n] = '.';
    scope_buf[at + n + 1] = 0;
    scope_end[++scope_depth] = (int)(at + n + 1);
}

void ag_scope_pop(void) {
    if (scope_depth == 0) ag__fatal("ag_scope_pop", "no scope to pop (more pops than ag_scope_push calls)");
    scope_buf[scope_end[--scope_depth]] = 0;
}

const char *ag_scope(void) { return scope_buf; }

/* ---- parameters: persistent storage, gradient allocated up front ---- */

/* ---- parameters made outside the list being built (ag__params_watch) ---- */

static _Thread_local const ag_params *watched; /* a model's list while its kind builds it */
static _Thread_local int strays;
static _Thread_local char first_stray[160];

void ag__params_watch(const ag_params *ps) {
    watched = ps;
    strays = 0;
    first_stray[0] = 0;
}

int ag__params_strays(char *first, size_t n) {
    watched = NULL;
    if (first && n) snprintf(first, n, "%s", first_stray);
    return strays;
}

/* A trainable parameter appended to another list while a model builds: no
 * optimizer, gradient check or checkpoint of the model would ever see it. */
static void note_stray(const ag_params *ps, const ag_tensor *t) {
    if (!watched || ps == watched) return;
    char s[64];
    if (strays++ == 0) snprintf(first_stray, sizeof first_stray, "'%s' %s", t->name, ag_shape_str(t, s, sizeof s));
}

ag_tensor *ag_param(ag_params *ps, const char *name, int ndim, const int *shape) {
    if (!name || !*name) ag__fatal("param", "a parameter needs a name");
    char scoped[SCOPE_CHARS + 256];
    if (scope_depth) { /* the full name is what checkpoints and messages see */
        if ((size_t)snprintf(scoped, sizeof scoped, "%s%s", scope_buf, name) >= sizeof scoped)
            ag__fatal("param", "name '%s%s' is too long", scope_buf, name);
        name = scoped;
    }
    if (ag_params_find(ps, name)) ag__fatal("param", "duplicate parameter name '%s'", name);
    ag_tensor shaped = {0};
    set_shape(&shaped, ndim, shape);
    if (!ps->shapes_only) check_fits_in_memory(ps, name, &shaped); /* before anything is allocated: a test's fatal handler returns */
    ag_tensor *t = ag__calloc(1, sizeof *t);
    *t = shaped;
    t->data = ps->shapes_only ? NULL : ag__calloc((size_t)t->size, sizeof(ag_real));
    t->grad = ps->shapes_only ? NULL : ag__calloc((size_t)t->size, sizeof(ag_real));
    t->requires_grad = true;
    t->persistent = true;
    t->name = ag__strdup(name);
    ag__stamp(t, "ag_param");
    if (ps->count == ps->cap) {
        ps->cap = ps->cap ? 2 * ps->cap : 16;
        ps->items = ag__realloc(ps->items, (size_t)ps->cap * sizeof *ps->items);
    }
    ps->items[ps->count++] = t;
    note_stray(ps, t);
    return t;
}

/* The members are made by ag_param, then rehomed: one block of G planes
 * for their values and one for their gradients, held by the first member
 * (stack = G), the others marking themselves planes of it (stack = -1);
 * ag_params_to moves and ag_params_free frees the blocks whole. */
void ag_param_stack(ag_params *ps, const char *name_fmt, int G, int ndim, const int *shape, ag_tensor **members) {
    if (G < 2 || G > 64) ag__fatal("ag_param_stack", "%d members (want 2 to 64)", G);
    char name[256];
    for (int g = 0; g < G; g++) {
        if ((size_t)snprintf(name, sizeof name, name_fmt, g) >= sizeof name)
            ag__fatal("ag_param_stack", "name '%s' is too long", name_fmt);
        members[g] = ag_param(ps, name, ndim, shape);
    }
    if (ps->shapes_only) return; /* names and shapes only: no memory to share */
    int64_t n = members[0]->size;
    ag_real *data = ag__calloc((size_t)(G * n > 0 ? G * n : 1), sizeof(ag_real));
    ag_real *grad = ag__calloc((size_t)(G * n > 0 ? G * n : 1), sizeof(ag_real));
    for (int g = 0; g < G; g++) {
        ag__free(members[g]->data);
        ag__free(members[g]->grad);
        members[g]->data = data + g * n;
        members[g]->grad = grad + g * n;
        members[g]->stack = g == 0 ? (int8_t)G : -1;
    }
}

ag_tensor *ag_param_stack_view(ag_tensor *first) {
    const char *op = "ag_param_stack_view";
    if (!first || first->stack < 2)
        ag__fatal(op, "'%s' is not the first member of a stack (ag_param_stack)", first && first->name ? first->name : "?");
    if (!first->data) ag__fatal(op, "'%s' has no memory (a shapes-only model)", first->name);
    int G = first->stack;
    ag_tensor *t = ag__arena_zalloc(sizeof *t);
    t->ndim = first->ndim + 1;
    if (t->ndim > AG_MAX_DIMS) ag__fatal(op, "'%s' has %d dims: a view would have more than %d", first->name, first->ndim, AG_MAX_DIMS);
    t->shape[0] = G;
    for (int i = 1; i < AG_MAX_DIMS; i++) t->shape[i] = i < t->ndim ? first->shape[i - 1] : 1;
    t->size = G * first->size;
    t->data = first->data;
    t->grad = first->grad;
    t->device = first->device;
    t->requires_grad = first->requires_grad;
    /* persistent: an op adds its gradient into the members' (ag__grad_write
     * sees a gradient); of this step: refused once the step has ended */
    t->persistent = true;
    t->name = first->name;
    t->step = ag__step_now;
    ag__stamp(t, op);
    return t;
}

ag_tensor *ag_params_find(const ag_params *ps, const char *name) {
    for (int i = 0; i < ps->count; i++)
        if (strcmp(ps->items[i]->name, name) == 0) return ps->items[i];
    return NULL;
}

int64_t ag_params_numel(const ag_params *ps) {
    int64_t n = 0;
    for (int i = 0; i < ps->count; i++) n += ps->items[i]->size;
    return n;
}

/* The host's gradients in one parallel pass, the GPU's in one launch, up
 * to ZERO_BATCH at a time (frame-sized lists: zeroing takes no step memory
 * on the host). */
enum { ZERO_BATCH = 64 };

void ag_params_zero_grad(ag_params *ps) {
    void *grad[ZERO_BATCH];
    int64_t bytes[ZERO_BATCH];
    ag_real *dev_grad[ZERO_BATCH];
    int64_t dev_n[ZERO_BATCH];
    int n = 0, on_dev = 0;
    bool any_dev = false;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        if (t->device == AG_CUDA) {
            any_dev = true;
            dev_grad[on_dev] = t->grad, dev_n[on_dev++] = t->size;
            if (on_dev == ZERO_BATCH) ag__cuda_zero_reals(dev_grad, dev_n, on_dev), on_dev = 0;
            continue;
        }
        grad[n] = t->grad, bytes[n++] = t->size * (int64_t)sizeof(ag_real);
        if (n == ZERO_BATCH) ag__zero_many(grad, bytes, n), n = 0;
    }
    if (n) ag__zero_many(grad, bytes, n);
    if (on_dev) ag__cuda_zero_reals(dev_grad, dev_n, on_dev);
    if (any_dev) ag__kernels_done("ag_params_zero_grad", AG_CUDA);
}

void ag_param_freeze(ag_tensor *p) {
    if (!p->persistent) ag__fatal("ag_param_freeze", "'%s' is not a parameter", p->name ? p->name : "(unnamed)");
    p->requires_grad = false;
    if (p->device == AG_CUDA) ag__cuda_zero(p->grad, (size_t)p->size * sizeof(ag_real)); /* not a host memset */
    else ag__zero(p->grad, (size_t)p->size * sizeof(ag_real));
}

void ag_params_free(ag_params *ps) {
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        if (t->stack < 0) { /* a plane of the stack before it, freed with it */
        } else if (t->device == AG_CUDA) {
            ag__cuda_free(t->data);
            ag__cuda_free(t->grad);
        } else {
            ag__free(t->data);
            ag__free(t->grad);
        }
        ag__free((char *)t->name);
        ag__free(t);
    }
    ag__free(ps->items);
    *ps = (ag_params){0};
}
