/* buffer.c - memory a model keeps between steps (ag_buffer, core.h): an
 * LM's state while it generates, a Transformer's keys and values.  A
 * buffer is plain device memory; a step reads it through views (tensors
 * of the step whose data points into it) and writes op results into it
 * with a copy on the buffer's device, in stream order on the GPU, so a
 * word fed to a generating model waits for nothing and crosses no bus. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ag_buffer {
    ag_real *data;
    int64_t size;
    ag_device device;
    char name[64];
};

ag_buffer *ag_buffer_new(ag_device d, int64_t n, const char *name) {
    const char *op = "ag_buffer_new";
    ag__need_device(op, d);
    if (n < 1 || n > INT64_MAX / (int64_t)sizeof(ag_real)) ag__fatal(op, "%lld elements: want at least 1", (long long)n);
    ag_buffer *b = calloc(1, sizeof *b);
    if (!b) {
        ag_fail(AG_ERR_NOMEM, "%s: no memory for the buffer '%s'", op, name ? name : "");
        return NULL;
    }
    snprintf(b->name, sizeof b->name, "%s", name ? name : "buffer");
    b->size = n;
    b->device = d;
    b->data = ag__try_zeros_kept_on(d, (size_t)n * sizeof(ag_real), b->name);
    if (!b->data) {
        ag_fail(AG_ERR_NOMEM, "%s: no room on the %s for '%s', %lld reals", op, ag_device_name(d), b->name,
                (long long)n);
        free(b);
        return NULL;
    }
    return b;
}

void ag_buffer_free(ag_buffer *b) {
    if (!b) return;
    ag__free_kept_on(b->device, b->data);
    free(b);
}

int64_t ag_buffer_size(const ag_buffer *b) { return b ? b->size : 0; }
ag_device ag_buffer_device(const ag_buffer *b) { return b ? b->device : AG_CPU; }

/* [at, at + n) inside b, else a fatal error naming the buffer and the range. */
static void check_range(const char *op, const ag_buffer *b, int64_t at, int64_t n) {
    if (!b) ag__fatal(op, "the buffer is NULL (ag_buffer_new failed?)");
    if (at < 0 || n < 0 || at > b->size || n > b->size - at)
        ag__fatal(op, "elements [%lld, %lld) of '%s', which holds %lld", (long long)at, (long long)(at + n), b->name,
                  (long long)b->size);
}

ag_tensor *ag_buffer_view(ag_buffer *b, int64_t at, int ndim, const int *shape) {
    const char *op = "ag_buffer_view";
    if (ndim < 0 || ndim > AG_MAX_DIMS) ag__fatal(op, "%d dims (at most %d)", ndim, AG_MAX_DIMS);
    if (ndim > 0) ag__need_array(op, "the shape", shape);
    ag_tensor *t = ag__arena_zalloc(sizeof *t);
    t->ndim = ndim;
    t->size = 1;
    for (int i = 0; i < AG_MAX_DIMS; i++) t->shape[i] = i < ndim ? shape[i] : 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) ag__fatal(op, "negative dim %d at axis %d", shape[i], i);
        if (shape[i] > 0 && t->size > INT64_MAX / shape[i]) t->size = INT64_MAX; /* refused just below */
        else t->size *= shape[i];
    }
    check_range(op, b, at, t->size);
    t->data = b->data + at;
    t->device = b->device;
    t->name = b->name;
    ag__stamp(t, op); /* of this step: refused once the step has ended, as any step tensor */
    return t;
}

ag_tensor *ag_buffer_write(ag_buffer *b, int64_t at, const ag_tensor *src) {
    const char *op = "ag_buffer_write";
    ag__need(op, "src", src);
    ag__check_live(op, src);
    check_range(op, b, at, src->size);
    if (src->device != b->device)
        ag__fatal(op, "src is on the %s, the buffer '%s' on the %s", ag_device_name(src->device), b->name,
                  ag_device_name(b->device));
    size_t bytes = (size_t)src->size * sizeof(ag_real);
    ag_tensor *written = ag_buffer_view(b, at, src->ndim, src->shape);
    if (bytes == 0 || src->data == written->data) return written;
    /* a view of the same buffer over the elements written: the GPU's copy
     * has no defined order inside one range, so neither has the CPU's */
    if (src->data < b->data + at + src->size && b->data + at < src->data + src->size)
        ag__fatal(op, "src overlaps elements [%lld, %lld) of '%s', where it is to be written", (long long)at,
                  (long long)(at + src->size), b->name);
    if (b->device == AG_CUDA) ag__cuda_copy(b->data + at, AG_CUDA, src->data, AG_CUDA, bytes); /* no wait */
    else memcpy(b->data + at, src->data, bytes);
    return written;
}

void ag__buffer_write_rows(ag_buffer *b, int64_t at, int64_t stride, const ag_tensor *src) {
    const char *op = "ag_buffer_write";
    ag__need(op, "src", src);
    ag__check_live(op, src);
    int64_t rows = src->ndim ? src->shape[0] : 1, width = rows ? src->size / rows : 0;
    if (rows == 0 || width == 0) return;
    if (stride < width) ag__fatal(op, "rows of %lld reals %lld apart: they would overlap", (long long)width, (long long)stride);
    if (rows > 1 && stride > (INT64_MAX - width) / (rows - 1)) ag__fatal(op, "%lld rows %lld apart", (long long)rows, (long long)stride);
    check_range(op, b, at, (rows - 1) * stride + width);
    if (src->device != b->device)
        ag__fatal(op, "src is on the %s, the buffer '%s' on the %s", ag_device_name(src->device), b->name,
                  ag_device_name(b->device));
    ag_real *dst = b->data + at;
    if (src->data < dst + (rows - 1) * stride + width && dst < src->data + src->size)
        ag__fatal(op, "src overlaps the rows of '%s' it is to be written to", b->name);
    size_t row_bytes = (size_t)width * sizeof(ag_real);
    if (b->device == AG_CUDA) /* one 2-D copy: a launch, not one a row */
        ag__cuda_copy_rows(dst, (size_t)stride * sizeof(ag_real), src->data, row_bytes, row_bytes, (size_t)rows);
    else
        for (int64_t r = 0; r < rows; r++) memcpy(dst + r * stride, src->data + r * width, row_bytes);
}
