/* test_arena_asan.c - under AddressSanitizer the step arena tells ASan
 * which of its bytes are live tensors (graph/memory.c), so an op that
 * writes past its output or reads a tensor of a finished step is reported
 * where it happens.  tests/test_arena_asan.sh runs each mode and expects
 * ASan's report for the two faults, and none for the access in bounds;
 * built only in a sanitizer build (tests/meson.build).
 *
 *     test_arena_asan inside | past-end | after-step */
#include "attngrad.h"

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    ag_tensor *t = ag_tensor_new(1, (int[]){5});
    ag_tensor *next = ag_tensor_new(1, (int[]){5}); /* a neighbour: the fault must not land in it unseen */
    volatile ag_real *p = t->data;
    if (!strcmp(mode, "inside")) {
        p[4] = 1;
        next->data[0] = p[4];
    } else if (!strcmp(mode, "past-end")) {
        p[5] = 1; /* one element past the end: ASan reports here */
    } else if (!strcmp(mode, "after-step")) {
        ag_step_end();
        p[0] = 1; /* the finished step's memory */
    } else {
        fprintf(stderr, "usage: %s inside|past-end|after-step\n", argv[0]);
        return 2;
    }
    printf("no report: %s\n", mode);
    ag_step_end();
    ag_shutdown();
    return 0;
}
