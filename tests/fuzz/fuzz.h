/* fuzz.h - what the libFuzzer harnesses share.  Each harness feeds the
 * bytes libFuzzer makes to one of the project's real parsers, through an
 * entry point that takes memory, and checks only that it returns (an error
 * is a fine answer to garbage): ASan and UBSan report the rest.  Built by
 * tools/fuzz.sh in a clang build dir (meson -Dfuzz=true) as libFuzzer
 * targets, and in every build with replay.c's main to run the corpus. */
#ifndef AG_FUZZ_H
#define AG_FUZZ_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "attngrad.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* data as a C string (a NUL inside ends it, as for a C caller); free it. */
static inline char *fuzz_cstring(const uint8_t *data, size_t size) {
    char *s = malloc(size + 1);
    if (!s) abort();
    memcpy(s, data, size);
    s[size] = 0;
    return s;
}

#endif
