/* error.c - the two kinds of errors: programmer misuse stops with a message
 * that names the op and the caller's line; bad user input returns a status
 * and leaves the message in ag_errmsg(). */
#include "device.h"

#include <setjmp.h>
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

/* The site of the op call in progress around this point, or none outside
 * every AG_AT: an op called later without a site of its own (a
 * library-internal ag__ op called directly) names none, rather than a line
 * it was not called from. */
static void enclosing_site(void) {
    if (site_depth > 0 && site_depth <= SITE_DEPTH) {
        callsite_file = site_stack[site_depth - 1].file;
        callsite_line = site_stack[site_depth - 1].line;
    } else if (site_depth == 0) {
        callsite_file = NULL;
        callsite_line = 0;
    }
}

ag_tensor *ag_callsite_pop(ag_tensor *result) {
    if (site_depth > 0) site_depth--;
    enclosing_site();
    return result;
}

/* A statement's return (AG_AT_STMT, AG_AT_STATUS) gives the site back as
 * an op's does. */
void ag_callsite_end(void) { enclosing_site(); }

ag_status ag_callsite_end_status(ag_status status) {
    enclosing_site();
    return status;
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

/* Where ag__fatal jumps to instead of the handler: the innermost ag_try of
 * this thread, or NULL. */
static _Thread_local jmp_buf *catch_point;
static _Thread_local ag_status catch_status;

ag_fatal_handler ag_set_fatal_handler(ag_fatal_handler h) {
    ag_fatal_handler old = fatal_handler;
    fatal_handler = h ? h : default_fatal;
    return old;
}

static void vfatal(const char *op, const char *fmt, va_list ap) __attribute__((noreturn));

void ag__fatal(const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfatal(op, fmt, ap);
}

void ag_fatal(const char *op, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfatal(op, fmt, ap);
}

static void vfatal(const char *op, const char *fmt, va_list ap) {
    char msg[1024];
    int n = snprintf(msg, sizeof msg, "attngrad: %s: ", op);
    n += vsnprintf(msg + n, sizeof msg - (size_t)n, fmt, ap); /* no va_end: the callers never return */
    if (callsite_file && n < (int)sizeof msg)
        snprintf(msg + n, sizeof msg - (size_t)n, " (at %s:%d)", callsite_file, callsite_line);
    forget_sites();
    if (catch_point) {
        memcpy(errmsg, msg, sizeof errmsg);
        bool memory = !strcmp(op, "arena") || !strcmp(op, "alloc");
        catch_status = memory ? AG_ERR_NOMEM : AG_ERR_ARG;
        longjmp(*catch_point, 1);
    }
    fatal_handler(msg);
    abort(); /* a handler that returns would continue with a broken state */
}

/* The step's tape and arena go back to the mark, so what the interrupted
 * op had recorded or allocated is forgotten; memory outside the arena that
 * fn took before the jump is the caller's to own (see the header). */
ag_status ag_try(void (*fn)(void *ctx), void *ctx) {
    jmp_buf here, *outer = catch_point;
    ag_mark_t mark = ag_mark();
    bool grad = ag_is_grad_enabled();
    if (setjmp(here)) {
        catch_point = outer;
        ag_rewind(mark);
        ag_set_grad_enabled(grad);
        return catch_status;
    }
    catch_point = &here;
    fn(ctx);
    catch_point = outer;
    return AG_OK;
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

/* A stale tensor's memory may since have been handed out again and written
 * over: its op and step are named only when its seal still matches them
 * (and its shape only when it is one). */
AG_NO_ASAN void ag__stale(const char *op, const ag_tensor *t) {
    /* its header copied byte by byte, past ASan (which sees a finished
     * step's memory poisoned): the later calls read the copy */
    ag_tensor copy;
    unsigned char *to = (unsigned char *)&copy;
    const volatile unsigned char *from = (const volatile unsigned char *)t;
    AG_QUIET_VALGRIND({
        for (size_t i = 0; i < sizeof copy; i++) to[i] = from[i];
    });
#ifdef AG_VALGRIND
    VALGRIND_MAKE_MEM_DEFINED(&copy, sizeof copy); /* what a dead step left there, to print */
#endif
    t = &copy;
    char s[64];
    if (t->seal != ag__seal_of(t) || t->step > ag__step_now || t->ndim < 0 || t->ndim > AG_MAX_DIMS)
        ag__fatal(op, "a tensor is not alive (step stamp %u, now step %u): one of a finished step, whose memory the "
                  "arena has handed out again? Step tensors die at ag_step_end()", t->step, ag__step_now);
    ag__fatal(op, "the tensor %s made by %s in step %u is from a finished step (now step %u): step tensors die at "
              "ag_step_end(); make it again in this step, or keep what must outlive a step in a parameter",
              ag_shape_str(t, s, sizeof s), t->op ? t->op : "an op", t->step, ag__step_now);
}

/* For ops that run on the CPU only (so far): the inputs alive, a CUDA
 * input refused by name, mixed devices naming both. */
void ag__check_device(const char *op, const ag_tensor *a, const ag_tensor *b) {
    if (ag__check_same_device(op, a, b) != AG_CPU)
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
    ag__need(op, "the input", t);
    int a = axis < 0 ? axis + t->ndim : axis;
    if (a < 0 || a >= t->ndim) {
        char s[64];
        ag__fatal(op, "axis %d out of range for shape %s", axis, ag_shape_str(t, s, sizeof s));
    }
    return a;
}
