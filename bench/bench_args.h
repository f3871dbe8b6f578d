/* bench_args.h - the options of the one-file benchmarks: "--name N" into
 * an int, "--device cpu|cuda", and the SKIP where that device is missing.
 * Header-only, as bench_time.h. */
#ifndef AG_BENCH_ARGS_H
#define AG_BENCH_ARGS_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attngrad.h"

/* argv[*i] is name and a value follows: *out = it, *i past it, 1; else 0. */
static inline int bench_arg_int(int argc, char **argv, int *i, const char *name, int *out) {
    if (strcmp(argv[*i], name) || *i + 1 >= argc) return 0;
    *out = atoi(argv[++*i]);
    return 1;
}

/* "--device cpu|cuda" the same way. */
static inline int bench_arg_device(int argc, char **argv, int *i, ag_device *out) {
    if (strcmp(argv[*i], "--device") || *i + 1 >= argc) return 0;
    *out = !strcmp(argv[++*i], "cuda") ? AG_CUDA : AG_CPU;
    return 1;
}

/* --device cuda where this build or machine has none: says so with the
 * SKIP line the drivers and meson read, true (the caller exits 77). */
static inline bool bench_no_device(ag_device d) {
    char why[256];
    if (d != AG_CUDA || ag_cuda_available(why, sizeof why)) return false;
    printf("SKIP: --device cuda: %s\n", why);
    return true;
}

#endif
