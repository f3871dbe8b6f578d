/* bench_time.h - the clocks and the median of every timing program: the
 * benchmarks here and the op table's --time mode (tests/opcase_run.c).
 * Header-only, so a one-file program needs no extra source.
 *
 * The clocks: CLOCK_MONOTONIC is wall time; CLOCK_PROCESS_CPUTIME_ID the
 * CPU time of all the process's threads and CLOCK_THREAD_CPUTIME_ID this
 * thread's, which leave out time spent preempted and so stay meaningful
 * on a loaded machine. */
#ifndef AG_BENCH_TIME_H
#define AG_BENCH_TIME_H

#include <stdlib.h>
#include <time.h>

static inline double bench_seconds(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline double bench_wall_ms(void) { return 1e3 * bench_seconds(CLOCK_MONOTONIC); }
static inline double bench_cpu_ms(void) { return 1e3 * bench_seconds(CLOCK_PROCESS_CPUTIME_ID); }

static inline int bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n), n >= 1, sorting v in place: v[0] is the
 * fastest after. */
static inline double bench_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
