/* device.c - where tensors live: device names, the device that new step
 * tensors go to, copies between the CPU and the GPU (ag_to, with a
 * gradient), moving parameters, and reading values back to the host.  The
 * runtime underneath is graph/cuda.c. */
#include "device.h"


#include <stdio.h>

const char *ag_device_name(ag_device d) { return d == AG_CPU ? "cpu" : d == AG_CUDA ? "cuda" : "unknown"; }

bool ag_cuda_available(char *why, size_t n) { return ag__cuda_ready(why, n); }
bool ag_cuda_use(int index, char *why, size_t n) {
    return index < 0 ? ag__cuda_ready(why, n) : ag__cuda_use_device(index, why, n);
}

void ag__need_device(const char *op, ag_device d) {
    char why[256];
    if (d != AG_CPU && d != AG_CUDA) ag__fatal(op, "unknown device %d", (int)d);
    if (d == AG_CUDA && !ag__cuda_ready(why, sizeof why)) ag__fatal(op, "cuda: %s", why);
}

/* ---- the device of new step tensors ---- */

static ag_device current = AG_CPU;

void ag_set_device(ag_device d) {
    ag__need_device("ag_set_device", d);
    current = d;
}

ag_device ag_get_device(void) { return current; }

/* ag_tensor_new/_from/_fill on the current device: made on the host, then
 * copied once (user tensors are inputs: a copy per step is the H2D copy). */
ag_tensor *ag__on_current(ag_tensor *host) {
    if (current == AG_CPU) return host;
    ag_tensor *t = ag__empty_on(current, host->ndim, host->shape);
    ag__cuda_copy(t->data, t->device, host->data, AG_CPU, (size_t)host->size * sizeof(ag_real));
    ag__stamp(t, host->op);
    return t;
}

ag_device ag__check_same_device(const char *op, const ag_tensor *a, const ag_tensor *b) {
    if (!a) ag__fatal(op, "an input tensor is NULL (the result of a call that failed?)");
    ag__check_live(op, a);
    ag__check_live(op, b);
    if (b && a->device != b->device)
        ag__fatal(op, "tensors on different devices (%s and %s): move one with ag_to", ag_device_name(a->device),
                  ag_device_name(b->device));
    return a->device;
}

const int32_t *ag__to_device_i32(const int32_t *host, int64_t n) {
    return ag__cuda_upload_const(host, (size_t)(n > 0 ? n : 0) * sizeof(int32_t));
}

void *ag__step_alloc_on(ag_device dev, size_t bytes) {
    return dev == AG_CUDA ? ag__cuda_arena_alloc(bytes) : ag__arena_alloc(bytes);
}

const int32_t *ag__step_i32_on(ag_device dev, const int32_t *host, int64_t n) {
    if (dev == AG_CUDA) return ag__to_device_i32(host, n);
    int32_t *copy = ag__arena_alloc((size_t)(n > 0 ? n : 1) * sizeof *copy);
    if (n > 0) memcpy(copy, host, (size_t)n * sizeof *copy);
    return copy;
}

void *ag__step_dup_on(ag_device dev, const void *host, size_t bytes) {
    void *copy = ag__step_alloc_on(dev, bytes > 0 ? bytes : 1);
    if (dev == AG_CUDA) ag__cuda_copy(copy, AG_CUDA, host, AG_CPU, bytes);
    else if (bytes > 0) memcpy(copy, host, bytes);
    return copy;
}

void *ag__step_room_on(ag_device dev, void *room, size_t room_bytes, size_t bytes) {
    return dev != AG_CUDA && bytes <= room_bytes ? room : ag__step_alloc_on(dev, bytes);
}

const void *ag__step_copy_on(ag_device dev, const void *host, size_t bytes) {
    return dev == AG_CUDA ? ag__cuda_upload_const(host, bytes) : host;
}

const void *ag__cuda_step_upload(const void *host, size_t bytes) { return ag__cuda_upload_const(host, bytes); }

void ag__read_on(ag_device dev, void *host, const void *src, size_t bytes) {
    if (dev == AG_CUDA) ag__cuda_copy(host, AG_CPU, src, AG_CUDA, bytes);
    else memcpy(host, src, bytes);
}

void ag__write_on(ag_device dev, void *dst, const void *host, size_t bytes) {
    if (dev == AG_CUDA) ag__cuda_copy(dst, AG_CUDA, host, AG_CPU, bytes);
    else memcpy(dst, host, bytes);
}

void *ag__zeros_kept_on(ag_device dev, size_t bytes, const char *what) {
    if (dev != AG_CUDA) return ag__calloc(bytes, 1);
    void *p = ag__cuda_malloc(bytes, what);
    ag__cuda_zero(p, bytes);
    return p;
}

void *ag__try_zeros_kept_on(ag_device dev, size_t bytes, const char *what) {
    if (dev != AG_CUDA) return ag__try_calloc(bytes, 1);
    void *p = ag__cuda_try_malloc(bytes, what);
    if (p) ag__cuda_zero(p, bytes);
    return p;
}

void ag__free_kept_on(ag_device dev, void *p) {
    if (dev == AG_CUDA) ag__cuda_free(p);
    else ag__free(p);
}

void ag__kernels_done(const char *op, ag_device dev) {
    if (dev == AG_CUDA) ag__cuda_check_launch(op);
}

int64_t ag__first_nonfinite(const ag_real *x, int64_t n, ag_device dev, double *value) {
    ag_real *host = NULL;
    if (dev == AG_CUDA && n > 0) {
        host = ag__malloc((size_t)n * sizeof(ag_real));
        ag__cuda_copy(host, AG_CPU, x, AG_CUDA, (size_t)n * sizeof(ag_real));
        x = host;
    }
    int64_t at = -1;
    for (int64_t j = 0; x && j < n && at < 0; j++)
        if (!isfinite(x[j])) at = j, *value = isnan(x[j]) ? NAN : (double)x[j]; /* "nan", not "-nan" */
    ag__free(host);
    return at;
}

/* ---- parameters: data, gradient (and the optimizer's state, which lives
 * with the optimizer) move once, before training ---- */

static ag_real *moved(ag_real *p, int64_t size, ag_device from, ag_device to, const char *name) {
    size_t bytes = (size_t)size * sizeof(ag_real);
    ag_real *q = to == AG_CUDA ? ag__cuda_malloc(bytes, name) : ag__malloc(bytes ? bytes : 1);
    ag__cuda_copy(q, to, p, from, bytes);
    if (from == AG_CUDA) ag__cuda_free(p);
    else ag__free(p);
    return q;
}

void ag_params_to(ag_params *ps, ag_device d) {
    ag__need_device("ag_params_to", d);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *t = ps->items[i];
        if (t->device == d || t->stack < 0) continue; /* a stack's planes move with its first member */
        int G = t->stack > 0 ? t->stack : 1;
        ag_device from = t->device;
        ag_real *data = moved(t->data, G * t->size, from, d, t->name), *grad = moved(t->grad, G * t->size, from, d, t->name);
        for (int g = 0; g < G; g++) {
            ag_tensor *m = ps->items[i + g];
            m->data = data + g * t->size;
            m->grad = grad + g * t->size;
            m->device = d;
        }
    }
}

/* ---- reading values on the host ---- */

void ag_tensor_read(const ag_tensor *t, ag_real *host) {
    ag__check_live("ag_tensor_read", t);
    size_t bytes = (size_t)t->size * sizeof(ag_real);
    if (t->device == AG_CPU) memcpy(host, t->data, bytes);
    else ag__cuda_copy(host, AG_CPU, t->data, t->device, bytes);
}

ag_real ag__item_at(const ag_tensor *t, const char *file, int line) {
    ag_callsite_push(file, line);
    if (!t) ag__fatal("ag_item", "a NULL tensor (an op that failed, or one never made?)");
    ag__check_live("ag_item", t);
    ag_real v;
    if (t->device == AG_CPU) v = t->data[0];
    else ag__cuda_copy(&v, AG_CPU, t->data, t->device, sizeof v);
    ag_callsite_pop(NULL);
    return v;
}
