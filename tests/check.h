/* check.h - the tiny test harness every test program uses.
 *
 * A test program calls CHECK(...) / CHECK_NEAR(...) any number of times and
 * ends main with `return check_summary("name");`, which prints the plain
 * closing line "name: N passed, M failed" and returns non-zero on failure. */
#ifndef AG_CHECK_H
#define AG_CHECK_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check_passed_, check_failed_;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (cond) {                                                            \
            check_passed_++;                                                   \
        } else {                                                               \
            check_failed_++;                                                   \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__,   \
                    #cond);                                                    \
            fprintf(stderr, " " __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

/* |got - want| <= atol + rtol * |want| */
#define CHECK_NEAR(got, want, atol, rtol)                                      \
    do {                                                                       \
        double g_ = (double)(got), w_ = (double)(want);                        \
        CHECK(fabs(g_ - w_) <= (atol) + (rtol) * fabs(w_) && !isnan(g_),       \
              "%s = %.17g, want %.17g", #got, g_, w_);                         \
    } while (0)

/* A running worst error updated with a new one, where NaN counts as
 * infinite: fmax and `>` would both pass over it, and a sweep whose every
 * result is NaN would report a worst error of 0. */
static inline double check_worst(double worst, double err) { return isnan(err) ? INFINITY : err > worst ? err : worst; }

/* An environment switch of the tests: on when set to "1". */
static inline bool check_env_on(const char *name) {
    const char *v = getenv(name);
    return v && v[0] == '1' && !v[1];
}

/* Whether `name` is one of the comma-separated names of `list`. */
static inline bool check_listed(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, name, n)) return true;
        p += len;
        if (!*p) return false;
    }
}

static inline int check_summary(const char *name) {
    printf("%s: %d passed, %d failed\n", name, check_passed_, check_failed_);
    return check_failed_ ? 1 : 0;
}

#endif
