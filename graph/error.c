/* error.c - the two kinds of errors: programmer misuse stops with a message
 * that names the op and the caller's line; bad user input returns a status
 * and leaves the message in ag_errmsg(). */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>

static _Thread_local const char *callsite_file;
static _Thread_local int callsite_line;

/* The sites of the op calls in progress, outermost first (AG_AT): an op's
 * arguments may be op calls of their own, which stamp over the site before
 * the op itself runs; each gives the enclosing one back when it returns.
 * Deeper than SITE_DEPTH, sites are only stamped. */
enum { SITE_DEPTH = 64 };
static _Thread_local struct {
    const char *file;
    int line;
} site_stack[SITE_DEPTH];
static _Thread_local int site_depth;
static _Thread_local char errmsg[1024];

void ag_set_callsite(const char *file, int line) {
    callsite_file = file;
    callsite_line = line;
    if (ag__prof_on) ag__prof_site();
}

void ag_callsite_push(const char *file, int line) {
    if (site_depth < SITE_DEPTH) {
        site_stack[site_depth].file = file;
        site_stack[site_depth].line = line;
    }
    site_depth++;
    ag_set_callsite(file, line);
}

ag_tensor *ag_callsite_pop(ag_tensor *result) {
    if (site_depth > 0) site_depth--;
    if (site_depth > 0 && site_depth <= SITE_DEPTH) {
        callsite_file = site_stack[site_depth - 1].file;
        callsite_line = site_stack[site_depth - 1].line;
    }
    return result;
}

/* A fatal error leaves through the handler (abort, or a test's longjmp):
 * the calls in progress will not return. */
static void forget_sites(void) { site_depth = 0; }

const char *ag__callsite(int *line) {
    *line = callsite_line;
    return callsite_file;
}

const char *ag_errmsg(void) { return errmsg; }

static void default_fatal(const char *msg) {
    fprintf(stderr, "%s\n", msg);
    fflush(stderr);
    abort();
}

static ag_fatal_handler fatal_handler = default_fatal;

ag_fatal_handler ag_set_fatal_handler(ag_fatal_handler h) {
    ag_fatal_handler old = fatal_handler;
    fatal_handler = h ? h : default_fatal;
    return old;
}

void ag__fatal(const char *op, const char *fmt, ...) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "attngrad: %s: ", op);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap);
    va_end(ap);
    if (callsite_file && n < (int)sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, " (at %s:%d)", callsite_file, callsite_line);
    forget_sites();
    fatal_handler(msg);
    abort(); /* a handler that returns would continue with a broken state */
}

/* Formatted aside first: a caller may wrap the previous error, passing
 * ag_errmsg() itself as an argument ("%s: %s", path, ag_errmsg()). */
ag_status ag_fail(ag_status status, const char *fmt, ...) {
    char msg[sizeof errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(errmsg, msg, sizeof errmsg);
    return status;
}

/* For ops that run on the CPU only (so far): a CUDA input is refused by
 * name, mixed devices name both. */
void ag__check_device(const char *op, const ag_tensor *a, const ag_tensor *b) {
    if (b && b->device != a->device)
        ag__fatal(op, "tensors on different devices (%s and %s): move one with ag_to", ag_device_name(a->device),
                  ag_device_name(b->device));
    if (a->device != AG_CPU)
        ag__fatal(op, "has no %s implementation yet: move its inputs to the cpu with ag_to",
                  ag_device_name(a->device));
}

void ag__check_same_shape(const char *op, const ag_tensor *a, const ag_tensor *b) {
    if (!ag_same_shape(a, b)) {
        char sa[64], sb[64];
        ag__fatal(op, "shapes %s and %s differ", ag_shape_str(a, sa, sizeof sa),
                  ag_shape_str(b, sb, sizeof sb));
    }
}

int ag__axis(const char *op, const ag_tensor *t, int axis) {
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        char s[64];
        ag__fatal(op, "axis %d out of range for shape %s", axis, ag_shape_str(t, s, sizeof s));
    }
    return a;
}
