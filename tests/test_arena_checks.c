/* test_arena_checks.c - the step arena tells AddressSanitizer, or valgrind's
 * memcheck, which of its bytes are live tensors (graph/memory.c), so a
 * write past a tensor or into a finished step is reported where it
 * happens.  tests/test_arena_checks.sh runs each mode and expects the
 * checker's report for the two faults and none for the access in bounds.
 *
 *     test_arena_checks inside | past-end | after-step | checker */
#include "attngrad.h"

#include <stdio.h>
#include <string.h>

/* The checker the library was built for, as graph/internal.h decides it
 * (the same compiler and headers build this test). */
static const char *checker(void) {
#if defined(__SANITIZE_ADDRESS__)
    return "asan";
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return "asan";
#endif
#endif
#if defined(__SANITIZE_THREAD__)
    return "none"; /* valgrind cannot run a ThreadSanitizer build */
#endif
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
    return "valgrind";
#endif
#endif
    return "none";
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "checker")) return puts(checker()) < 0;
    ag_tensor *t = ag_tensor_new(1, (int[]){5});
    ag_tensor *next = ag_tensor_new(1, (int[]){5}); /* a neighbour: the fault must not land in it unseen */
    volatile ag_real *p = t->data;
    if (!strcmp(mode, "inside")) {
        p[4] = 1;
        next->data[0] = p[4];
    } else if (!strcmp(mode, "past-end")) {
        p[5] = 1; /* one element past the end: reported here */
    } else if (!strcmp(mode, "after-step")) {
        ag_step_end();
        p[0] = 1; /* the finished step's memory */
    } else {
        fprintf(stderr, "usage: %s inside|past-end|after-step|checker\n", argv[0]);
        return 2;
    }
    printf("no report: %s\n", mode);
    ag_step_end();
    ag_shutdown();
    return 0;
}
