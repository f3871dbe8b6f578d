/* test_arena_checks.c - the step arena tells AddressSanitizer, or valgrind's
 * memcheck, which of its bytes are live tensors (graph/memory.c), so a
 * write past a tensor or into a finished step is reported where it
 * happens, and a write in bounds is not.
 *
 * One run checks all three, asking the checker itself rather than reading
 * its report: under ASan whether each address is poisoned (the writes
 * would abort the run), under valgrind how many errors memcheck has
 * counted after each write (the writes are made; memcheck reports them
 * and goes on).  tests/test_arena_checks.sh picks the run.
 *
 *     test_arena_checks checker    the checker this build has: asan, valgrind or none
 *     test_arena_checks check      the checks; exit 0 when every one holds */
#include "attngrad.h"

#include <stdio.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define CHECKER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHECKER_ASAN 1
#endif
#endif
/* the choice graph/internal.h makes for the library (same compiler, same headers) */
#if !defined(CHECKER_ASAN) && !defined(__SANITIZE_THREAD__) && defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#define CHECKER_VALGRIND 1
#endif
#endif

#if defined(CHECKER_ASAN)
#include <sanitizer/asan_interface.h>
#elif defined(CHECKER_VALGRIND)
#include <valgrind/valgrind.h>
#endif

static int failures;

static void expect(bool ok, const char *what) {
    printf("%s: %s\n", ok ? "ok" : "FAIL", what);
    failures += !ok;
}

#if defined(CHECKER_ASAN)
static const char *checker = "asan";

static bool poisoned(volatile ag_real *p) { return __asan_address_is_poisoned((const void *)p); }

static void check(volatile ag_real *p, const ag_tensor *next) {
    expect(!poisoned(p) && !poisoned(p + 4), "a tensor's elements are addressable");
    expect(poisoned(p + 5), "the element past its end is poisoned");
    expect(!poisoned(next->data), "its neighbour's first element is addressable");
    ag_step_end();
    expect(poisoned(p), "a finished step's tensor is poisoned");
}
#elif defined(CHECKER_VALGRIND)
static const char *checker = "valgrind";

/* memcheck's count of the errors it has reported so far (suppressed ones,
 * the loader's under cuBLAS in a CUDA build, are not counted) */
static unsigned errors(void) { return VALGRIND_COUNT_ERRORS; }

static void check(volatile ag_real *p, ag_tensor *next) {
    if (!RUNNING_ON_VALGRIND) {
        expect(false, "running under valgrind (run: valgrind test_arena_checks check)");
        return;
    }
    expect(errors() == 0, "no error before the checks");
    p[4] = 1;
    next->data[0] = p[4];
    expect(errors() == 0, "a write and a read in bounds: no error");
    p[5] = 1;
    expect(errors() == 1, "a write one element past the end: one error, at the write");
    ag_step_end();
    p[0] = 1;
    expect(errors() == 2, "a write into a finished step's tensor: one error, at the write");
}
#else
static const char *checker = "none";
static void check(volatile ag_real *p, ag_tensor *next) {
    (void)p, (void)next;
    expect(false, "a build with ASan or valgrind's header (this one has neither: the arena marks nothing)");
}
#endif

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "checker")) return puts(checker) < 0;
    if (strcmp(mode, "check")) {
        fprintf(stderr, "usage: %s checker|check\n", argv[0]);
        return 2;
    }
    ag_tensor *t = ag_tensor_new(1, (int[]){5});
    ag_tensor *next = ag_tensor_new(1, (int[]){5}); /* a neighbour: the fault must not land in it unseen */
    check(t->data, next);
    ag_step_end();
    ag_shutdown();
    return failures != 0;
}
