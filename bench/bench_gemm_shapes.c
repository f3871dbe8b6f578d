/* bench_gemm_shapes.c - a step's matrix products one at a time, on one
 * thread, against the BLAS this program is linked with: to compare BLAS
 * libraries (or our packed kernel) on the shapes the models really run.
 *
 *     build/bench/bench_models --model mpsan --threads 1 --gemm-shapes \
 *         | build/bench/bench_gemm_shapes
 *
 * Input: the product lines of `bench_models --gemm-shapes` ("NN attngrad
 * 1498 300 300 11.0 ..."; other lines are skipped): transposes, who ran
 * the product (OpenBLAS, or attngrad's packed kernel), M, N, K and calls
 * per step.  Those are the calls as they reached the BLAS or the kernel:
 * a product ag__gemm cut into parts is listed part by part.  Output, per
 * shape, GFLOP/s of
 *   - blas: one cblas_sgemm call of the linked BLAS;
 *   - ours: ag__gemm (our packed kernel, its packing included), for the
 *     shapes the step ran on it ("-" for the others, which ag__gemm would
 *     cut again);
 * and at the end the products' time per step at those rates: as the step
 * runs them (ours where it ran ours), and on the BLAS alone.
 *
 * Built with -DBENCH_BLAS_ONLY it needs no attngrad and no OpenBLAS, so the
 * same source links against another BLAS (BLIS: bench/README.md, "Other
 * BLAS libraries") and prints that library's column.  Times are this
 * thread's CPU time, the second fastest of 7 runs of at least 20 ms each:
 * a loaded machine slows them less than wall time, but not for nothing
 * (caches, memory bandwidth), so compare runs interleaved in one window. */
#ifndef BENCH_BLAS_ONLY
#include "../graph/internal.h"
#endif
#include "bench_time.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if !defined(BENCH_BLAS_ONLY) && defined(AG_HAVE_OPENBLAS_THREADS)
void openblas_set_num_threads(int num_threads);
#endif

typedef struct {
    bool ta, tb;
    int M, N, K;
    const float *A, *B;
    float *C;
} product;

static void run_blas(const product *p) {
    cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans, p->M, p->N, p->K,
                1.0f, p->A, p->ta ? p->M : p->K, p->B, p->tb ? p->K : p->N, 0.0f, p->C, p->N);
}

#ifndef BENCH_BLAS_ONLY
static void run_ours(const product *p) { ag__gemm(p->ta, p->tb, p->M, p->N, p->K, 1, p->A, p->B, 0, p->C); }
#endif

/* GFLOP/s of run(p): the second fastest of 7 timed runs, each repeating the
 * product for at least 20 ms of this thread's CPU time. */
static double gflops(void (*run)(const product *), const product *p) {
    enum { RUNS = 7 };
    double per_call[RUNS];
    run(p); /* warm: pages touched, panels allocated */
    for (int r = 0; r < RUNS; r++) {
        int calls = 0;
        double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID), t;
        do {
            run(p);
            calls++;
        } while ((t = bench_seconds(CLOCK_THREAD_CPUTIME_ID) - t0) < 0.02);
        per_call[r] = t / calls;
    }
    bench_median(per_call, RUNS); /* sorts */
    return 2.0 * p->M * p->N * p->K / per_call[1] / 1e9;
}

static float *filled(int64_t n, int mod) {
    float *x = malloc((size_t)n * sizeof *x);
    if (!x) {
        fprintf(stderr, "bench_gemm_shapes: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++) x[i] = (float)(i % mod) / (float)mod - 0.5f;
    return x;
}

int main(void) {
#ifndef BENCH_BLAS_ONLY
    ag_set_num_threads(1);
#ifdef AG_HAVE_OPENBLAS_THREADS
    openblas_set_num_threads(1);
#endif
#endif
    printf("%-3s %-8s %6s %6s %6s %7s %8s %8s\n", "op", "by", "M", "N", "K", "calls", "blas", "ours");
    char line[512];
    double ms_blas = 0, ms_step = 0;
    while (fgets(line, sizeof line, stdin)) {
        char op[3], by[16];
        product p;
        double calls;
        if (sscanf(line, " %2s %15s %d %d %d %lf", op, by, &p.M, &p.N, &p.K, &calls) != 6) continue;
        if (strspn(op, "NT") != 2 || (strcmp(by, "openblas") && strcmp(by, "attngrad"))) continue;
        if (p.M < 1 || p.N < 1 || p.K < 1 || calls <= 0) continue;
        p.ta = op[0] == 'T', p.tb = op[1] == 'T';
        float *A = filled((int64_t)p.M * p.K, 13), *B = filled((int64_t)p.K * p.N, 11), *C = filled((int64_t)p.M * p.N, 7);
        p.A = A, p.B = B, p.C = C;
        double flop = 2.0 * p.M * p.N * p.K * calls, blas = gflops(run_blas, &p), step = blas;
        printf("%-3s %-8s %6d %6d %6d %7.1f %8.1f", op, by, p.M, p.N, p.K, calls, blas);
#ifndef BENCH_BLAS_ONLY
        if (!strcmp(by, "attngrad")) {
            step = gflops(run_ours, &p);
            printf(" %8.1f", step);
        } else {
            printf(" %8s", "-");
        }
#endif
        printf("\n");
        fflush(stdout);
        ms_blas += flop / blas / 1e6;
        ms_step += flop / step / 1e6;
        free(A), free(B), free(C);
    }
#ifndef BENCH_BLAS_ONLY
    printf("products per step at these rates: %.1f ms as the step runs them, %.1f ms on the BLAS alone\n", ms_step,
           ms_blas);
#else
    (void)ms_step;
    printf("products per step at these rates: %.1f ms on the BLAS alone\n", ms_blas);
#endif
    return 0;
}
