/* bench_args.h - the options of the one-file benchmarks: "--name N" into
 * an int, "--device cpu|cuda".  Header-only, as bench_time.h. */
#ifndef AG_BENCH_ARGS_H
#define AG_BENCH_ARGS_H

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

#endif
