/* replay.c - a main() for a harness without libFuzzer: runs
 * LLVMFuzzerTestOneInput once on every file given, or on every file of a
 * folder given, as `fuzz_x -runs=0 DIR` does.  So the seed corpus (and every
 * crash that became a corpus file) runs in every meson test of every build,
 * gcc ones and the sanitizer build included, where clang is not installed. */
#define _POSIX_C_SOURCE 200809L
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    if (!buf) abort();
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        DIR *d = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode) ? opendir(argv[i]) : NULL;
        if (!d) {
            bad += run_file(argv[i]), files++;
            continue;
        }
        for (struct dirent *e; (e = readdir(d));) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            bad += run_file(path), files++;
        }
        closedir(d);
    }
    ag_shutdown();
    printf("%s: %d passed, %d failed\n", argv[0], files - bad, bad);
    return bad ? 1 : 0;
}
