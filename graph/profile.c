/* profile.c - where a step's time goes, per op and per call site.
 *
 * Forward: every public op call goes through AG_AT, which stamps the
 * caller's file:line (ag_set_callsite); the op computes its output, then
 * records it (ag__record: ops record last, for this), so the time from the
 * stamp or the previous record, whichever is later, is the op's forward,
 * charged to (op, file:line).  Nested calls split right: in f(g(x)), f's
 * stamp comes first, g runs and records, then f's own work runs until f
 * records.  Composite layers charge the innermost call site that records.
 * An op called without a stamp (a library-internal ag__ op) is charged from
 * the previous record, a backward sweep's end or the step's start, so a
 * step's first op never takes the time of the step before.
 * Backward: the sweep times each
 * node's backward and charges it to the site the node was recorded at.
 * Whatever lies outside ops (optimizer, loss glue, data) shows as the rest
 * of the wall time.  Off by default; when off it costs one branch per op. */
#include "device.h"
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    const char *op, *file;
    int line;
    long calls, bwd_calls;
    double fwd, bwd;                  /* seconds */
    int64_t fwd_launches, bwd_launches; /* put on the GPU's stream (device.h) */
} prof_entry;

bool ag__prof_on;
static double mark, started; /* mark: the last stamp or record */
static int64_t mark_launches, started_launches; /* the same points, counted in GPU launches */
static prof_entry *entries;
static int n_entries, cap_entries;

double ag__seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void ag_profile_start(void) {
    n_entries = 0;
    ag__prof_on = true;
    started = mark = ag__seconds();
    started_launches = mark_launches = ag__cuda_launches();
}

/* The report covers start to stop, whatever runs between stop and report. */
static double stopped;
static int64_t stopped_launches;

void ag_profile_stop(void) {
    if (!ag__prof_on) return;
    ag__prof_on = false;
    stopped = ag__seconds();
    stopped_launches = ag__cuda_launches();
}

void ag__prof_site(void) {
    mark = ag__seconds();
    mark_launches = ag__cuda_launches();
}

/* A linear scan: a model has a few hundred sites, and this runs only while
 * profiling (the counting allocator stays out of the steady state). */
static prof_entry *entry(const char *op, const char *file, int line) {
    for (int i = n_entries - 1; i >= 0; i--) {
        prof_entry *e = &entries[i];
        if (e->op == op && e->line == line && e->file == file) return e;
    }
    if (n_entries == cap_entries) {
        cap_entries = cap_entries ? 2 * cap_entries : 256;
        entries = realloc(entries, (size_t)cap_entries * sizeof *entries);
        if (!entries) ag__fatal("ag_profile", "out of memory");
    }
    entries[n_entries] = (prof_entry){.op = op, .file = file, .line = line};
    return &entries[n_entries++];
}

void ag__prof_forward(const char *op, const char *file, int line) {
    double t = ag__seconds();
    int64_t launched = ag__cuda_launches();
    prof_entry *e = entry(op, file, line);
    e->calls++;
    e->fwd += t - mark;
    e->fwd_launches += launched - mark_launches;
    mark = t;
    mark_launches = launched;
}

/* Work that records no node (ag_mask_batch's kernel and uploads): charged
 * to its own call site under op, not to the next op the model records. */
void ag__prof_untaped(const char *op) {
    int line;
    const char *file = ag__callsite(&line);
    ag__prof_forward(op, file, line);
}

void ag__prof_backward(const ag_node *n, double seconds, int64_t launches) {
    prof_entry *e = entry(n->op, n->file, n->line);
    e->bwd_calls++;
    e->bwd += seconds;
    e->bwd_launches += launches;
}


static int by_total(const void *a, const void *b) {
    const prof_entry *x = a, *y = b;
    double tx = x->fwd + x->bwd, ty = y->fwd + y->bwd;
    return (tx < ty) - (tx > ty);
}

static const char *base_name(const char *path) {
    const char *slash = path ? strrchr(path, '/') : NULL;
    return slash ? slash + 1 : path ? path : "?";
}

/* On a GPU a small model's step costs its launches more than its flops, so
 * the table counts them too (a column only when the step launched any):
 * what each site's ops put on the stream, forward and backward. */
void ag_profile_report(FILE *f, int steps, int top) {
    double wall = (ag__prof_on ? ag__seconds() : stopped) - started, fwd = 0, bwd = 0;
    int64_t launched = (ag__prof_on ? ag__cuda_launches() : stopped_launches) - started_launches, in_ops = 0;
    if (steps < 1) steps = 1;
    qsort(entries, (size_t)n_entries, sizeof *entries, by_total);
    for (int i = 0; i < n_entries; i++) {
        fwd += entries[i].fwd, bwd += entries[i].bwd;
        in_ops += entries[i].fwd_launches + entries[i].bwd_launches;
    }
    double ms = 1e3 / steps;
    fprintf(f, "ops per step (%d steps, %.1f ms wall each): forward %.1f ms, backward %.1f ms, outside ops %.1f ms\n",
            steps, wall * ms, fwd * ms, bwd * ms, (wall - fwd - bwd) * ms);
    if (launched > 0)
        fprintf(f, "GPU launches per step: %.1f, %.1f by ops, %.1f outside ops (optimizer, gradient zeroing, copies)\n",
                (double)launched / steps, (double)in_ops / steps, (double)(launched - in_ops) / steps);
    fprintf(f, "  %-24s %-26s %6s %9s %9s %9s %6s", "op", "called at", "calls", "fwd ms", "bwd ms", "total ms",
            "%wall");
    fprintf(f, launched > 0 ? " %13s\n" : "\n", "launches f+b");
    for (int i = 0; i < n_entries && (top <= 0 || i < top); i++) {
        const prof_entry *e = &entries[i];
        char site[64];
        snprintf(site, sizeof site, "%s:%d", base_name(e->file), e->line);
        fprintf(f, "  %-24s %-26s %6.1f %9.2f %9.2f %9.2f %5.1f%%", e->op, site, (double)e->calls / steps,
                e->fwd * ms, e->bwd * ms, (e->fwd + e->bwd) * ms, 100 * (e->fwd + e->bwd) / wall);
        if (launched > 0)
            fprintf(f, " %6.1f+%-6.1f", (double)e->fwd_launches / steps, (double)e->bwd_launches / steps);
        fputc('\n', f);
    }
}

void ag__profile_shutdown(void) {
    free(entries);
    entries = NULL;
    n_entries = cap_entries = 0;
    ag__prof_on = false;
}
