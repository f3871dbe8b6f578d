/* test_blas.c - attngrad's BLAS setup (graph/blas.c) moves an OpenBLAS that
 * took kernels without AVX2 to the ones it names for the CPU, and leaves a
 * choice the user made alone.
 *
 * The run starts with OPENBLAS_CORETYPE=Prescott, so that OpenBLAS loads
 * its SSE3 kernels on any x86-64 CPU, as 0.3.21 does by itself on one it
 * does not know:
 *   test_blas choose   unsets the variable before attngrad's first product:
 *                      the setup must find Prescott and move it to vector
 *                      kernels, and the products must stay right
 *   test_blas kept     keeps it: the setup must leave Prescott alone
 * Exit 77 (skipped) where there is nothing to test: another BLAS, an
 * OpenBLAS built for one target (it ignores the variable), a CPU without
 * AVX2 and FMA. */
#include "attngrad.h"
#include "check.h"

#include <dirent.h>
#include <string.h>

char *openblas_get_corename(void) __attribute__((weak));

static const char *core(void) { return openblas_get_corename ? openblas_get_corename() : NULL; }

/* The process's threads (Linux: /proc/self/task), or -1. */
static int threads_now(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* A [M,K] x [K,N] product through attngrad against a double loop. */
static void check_products(void) {
    enum { M = 37, K = 301, N = 129 };
    static ag_real a[M * K], b[K * N];
    for (int i = 0; i < M * K; i++) a[i] = (ag_real)(((int64_t)i * 7919 % 1000) / 500.0 - 1);
    for (int i = 0; i < K * N; i++) b[i] = (ag_real)(((int64_t)i * 104729 % 1000) / 500.0 - 1);
    ag_tensor *c = ag_matmul(ag_tensor_from(a, 2, (int[]){M, K}), ag_tensor_from(b, 2, (int[]){K, N}));
    double worst = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double want = 0;
            for (int k = 0; k < K; k++) want += (double)a[i * K + k] * b[k * N + j];
            worst = check_worst(worst, fabs(c->data[i * N + j] - want) / (1 + fabs(want)));
        }
    CHECK(worst < 1e-5, "the product after the setup is off by %g", worst);
    ag_step_end();
}

int main(int argc, char **argv) {
    bool choose = argc > 1 && !strcmp(argv[1], "choose");
    const char *at_load = core();
    if (!at_load || strcasecmp(at_load, "Prescott")) {
        printf("test_blas: %s at load (not a DYNAMIC_ARCH OpenBLAS run with OPENBLAS_CORETYPE=Prescott): skipped\n",
               at_load ? at_load : "no OpenBLAS");
        return 77;
    }
#ifdef __x86_64__ /* Prescott is an x86 kernel set: elsewhere core() has skipped above */
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        printf("test_blas: the CPU has no AVX2 and FMA: Prescott's kernels are its own; skipped\n");
        return 77;
    }
#endif
    if (choose) unsetenv("OPENBLAS_CORETYPE"); /* as a process OpenBLAS left on Prescott by itself */
    int before = threads_now();
    const char *info = ag_blas_info();
    int after = threads_now();
    printf("test_blas %s: %s\n", choose ? "choose" : "kept", info);
    if (choose) {
        CHECK(strcasecmp(core(), "Prescott") && strstr(info, "chosen by attngrad: OpenBLAS took Prescott"),
              "still on %s: %s", core(), info);
        CHECK(strstr(info, core()), "the text names other kernels than OpenBLAS runs (%s): %s", core(), info);
        CHECK(!getenv("OPENBLAS_CORETYPE"), "the setup left OPENBLAS_CORETYPE set for the process's children");
        /* OpenBLAS's server threads (started at load) stopped before its
         * kernel table was set again: one starting inside that window
         * stored its own choice over ours, NULL for a moment (a crash) */
        CHECK(after == 1 || after < 0, "%d threads after the move (%d before): OpenBLAS's were left running", after,
              before);
    } else {
        CHECK(!strcasecmp(core(), "Prescott") && !strstr(info, "chosen"), "OPENBLAS_CORETYPE=Prescott was overruled: %s",
              info);
    }
    CHECK(!strcmp(ag_blas_info(), info), "a second call changed the text");
    check_products();
    ag_shutdown();
    return check_summary(choose ? "test_blas choose" : "test_blas kept");
}
