/* bench_gemm_kernel.c - the packed f32 GEMM kernel (ops/gemm_kernel.c)
 * against OpenBLAS on the shapes it is meant for, 1 thread, GFLOP/s (best
 * of several rounds: the machine is shared).
 *
 *     taskset -c 1 ./build/bench/bench_gemm_kernel [rounds]
 *
 * "blas" is ag__gemm_blas (what the ops ran before: OpenBLAS, cut into parts by
 * shape), "packed" is ag__gemm_packed against a B packed once, and
 * "packed+pack" adds the packing spread over one LSTM layer's 35 steps. */
#include "../graph/internal.h"
#include "bench_time.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Every time below is this thread's CPU time: the machine is shared. */

typedef struct {
    const char *name;
    bool tb;
    int M, N, K;
} shape;

#ifndef AG_REAL_DOUBLE
/* Batched small products (64 independent ones, as a batched ag_matmul
 * runs them): one OpenBLAS call each against ag__gemm_small. */
static void small_products(int rounds) {
    typedef struct {
        const char *name;
        bool ta, tb;
        int M, N, K;
    } small;
    const small shapes[] = {
        {"MPSAN NN p h     30x300x30", false, false, 30, 300, 30},
        {"MPSAN NT dS h^T  30x30x300", false, true, 30, 30, 300},
        {"MPSAN TN p^T dS  30x300x30", true, false, 30, 300, 30},
        {"dual  NN        128x64x128", false, false, 128, 64, 128},
        {"dual  NT        128x128x64", false, true, 128, 128, 64},
        {"dual  TN        128x64x128", true, false, 128, 64, 128},
        {"dual  NT        64x64x128 ", false, true, 64, 64, 128},
    };
    enum { BATCH = 64 };
    printf("\n%-27s %9s %9s   (%d products, GFLOP/s)\n", "batched shape", "blas", "small", BATCH);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const small *sh = &shapes[s];
        int M = sh->M, N = sh->N, K = sh->K;
        int64_t sa = (int64_t)M * K, sb = (int64_t)K * N, sc = (int64_t)M * N;
        float *A = malloc(sizeof(float) * BATCH * sa), *B = malloc(sizeof(float) * BATCH * sb);
        float *C = malloc(sizeof(float) * BATCH * sc);
        for (int64_t i = 0; i < BATCH * sa; i++) A[i] = (float)(i % 17) * 0.01f;
        for (int64_t i = 0; i < BATCH * sb; i++) B[i] = (float)(i % 13) * 0.01f;
        for (int64_t i = 0; i < BATCH * sc; i++) C[i] = 0;
        int lda = sh->ta ? M : K, ldb = sh->tb ? K : N;
        double flops = 2.0 * M * N * K * BATCH * 10, best_blas = 1e30, best_small = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            for (int rep = 0; rep < 10; rep++)
                for (int i = 0; i < BATCH; i++)
                    ag__gemm_serial(sh->ta, sh->tb, M, N, K, 1, A + i * sa, B + i * sb, 1, C + i * sc);
            double t1 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            for (int rep = 0; rep < 10; rep++)
                for (int i = 0; i < BATCH; i++)
                    ag__gemm_small(sh->ta, sh->tb, M, N, K, 1, A + i * sa, lda, B + i * sb, ldb, 1, C + i * sc, N, NULL);
            double t2 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            if (t1 - t0 < best_blas) best_blas = t1 - t0;
            if (t2 - t1 < best_small) best_small = t2 - t1;
        }
        printf("%-27s %9.1f %9.1f\n", sh->name, flops / best_blas * 1e-9, flops / best_small * 1e-9);
        free(A), free(B), free(C);
    }
}
#endif

/* The models' big products, one call each as ag__gemm runs them: OpenBLAS
 * (ag__gemm_blas) against packing op(B) and the blocked kernel, the
 * packing counted ("kernel") and not ("no pack"). */
static void step_products(int rounds) {
    typedef struct {
        const char *name;
        bool ta, tb;
        int M, N, K;
    } big;
    const big shapes[] = {
        {"MPSAN NN 1498x300x300  ", false, false, 1498, 300, 300},
        {"MPSAN NN 1498x1500x300 ", false, false, 1498, 1500, 300},
        {"MPSAN NT 1498x300x1500 ", false, true, 1498, 300, 1500},
        {"MPSAN NT 1498x300x300  ", false, true, 1498, 300, 300},
        {"MPSAN TN 300x300x1498  ", true, false, 300, 300, 1498},
        {"MPSAN TN 300x1500x1498 ", true, false, 300, 1500, 1498},
        {"MPSAN TN 1500x300x1498 ", true, false, 1500, 300, 1498},
        {"LM    NT 808x10001x400 ", false, true, 808, 10001, 400},
        {"LM    NN 808x400x10001 ", false, false, 808, 400, 10001},
        {"LM    TN 10001x400x808 ", true, false, 10001, 400, 808},
        {"LM    NN 808x1600x400  ", false, false, 808, 1600, 400},
        {"LM    NT 808x400x1600  ", false, true, 808, 400, 1600},
        {"LM    TN 400x1600x808  ", true, false, 400, 1600, 808},
        {"LM    TN 1600x400x808  ", true, false, 1600, 400, 808},
        {"LM    NT 404x800x400   ", false, true, 404, 800, 400},
        {"LM    NN 404x400x800   ", false, false, 404, 400, 800},
        {"MSSAN NT 745x300x300   ", false, true, 745, 300, 300},
        {"MSSAN NN 745x300x300   ", false, false, 745, 300, 300},
        {"MSSAN TN 300x300x745   ", true, false, 300, 300, 745},
        {"MTSA  NN 480x300x300   ", false, false, 480, 300, 300},
        {"MTSA  NN 480x300x600   ", false, false, 480, 300, 600},
        {"MTSA  NN 480x600x600   ", false, false, 480, 600, 600},
        {"MTSA  NT 745x600x600   ", false, true, 745, 600, 600},
        {"MTSA  NT 745x600x300   ", false, true, 745, 600, 300},
        {"DUAL  NN 789x128x128   ", false, false, 789, 128, 128},
        {"DUAL  NT 789x128x128   ", false, true, 789, 128, 128},
        {"DUAL  NN 1024x64x64    ", false, false, 1024, 64, 64},
        {"DUAL  NT 1024x64x64    ", false, true, 1024, 64, 64},
        {"DUAL  NT 128x128x64    ", false, true, 128, 128, 64},
        {"DUAL  NT 64x64x128     ", false, true, 64, 64, 128},
        {"DUAL  NN 128x64x128    ", false, false, 128, 64, 128},
        {"DUAL  NN 64x128x64     ", false, false, 64, 128, 64},
        {"      NN 256x256x256   ", false, false, 256, 256, 256},
        {"      NT 256x256x256   ", false, true, 256, 256, 256},
        {"      NN 745x600x300   ", false, false, 745, 600, 300},
        {"      NN 745x1024x300  ", false, false, 745, 1024, 300},
        {"      NT 745x1024x300  ", false, true, 745, 1024, 300},
    };
    printf("\n%-24s %9s %9s %9s   (one call, GFLOP/s)\n", "step shape", "blas", "kernel", "no pack");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const big *sh = &shapes[s];
        int M = sh->M, N = sh->N, K = sh->K;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C = malloc(sizeof(float) * (size_t)M * N);
        for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = (float)(i % 17) * 0.01f;
        for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = (float)(i % 13) * 0.01f;
        for (int64_t i = 0; i < (int64_t)M * N; i++) C[i] = 0;
        double flops = 2.0 * M * N * K, best_blas = 1e30, best_kernel = 1e30, best_nopack = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag__gemm_blas(sh->ta, sh->tb, M, N, K, 1, A, B, 1, C);
            double t1 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag__packed_b P = ag__pack_b(sh->tb, K, N, B);
            double t2 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag__gemm_packed_op(sh->ta, M, A, sh->ta ? M : K, &P, 1, 1, C, N);
            double t3 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag_step_end();
            if (t1 - t0 < best_blas) best_blas = t1 - t0;
            if (t3 - t1 < best_kernel) best_kernel = t3 - t1;
            if (t3 - t2 < best_nopack) best_nopack = t3 - t2;
        }
        printf("%s %9.1f %9.1f %9.1f\n", sh->name, flops / best_blas * 1e-9, flops / best_kernel * 1e-9,
               flops / best_nopack * 1e-9);
        free(A), free(B), free(C);
    }
}

int main(int argc, char **argv) {
#ifdef AG_REAL_DOUBLE
    (void)argc, (void)argv;
    return 0;
#else
    int rounds = argc > 1 ? atoi(argv[1]) : 5;
    ag_set_num_threads(1);
    if (!ag__packed_gemm_ok()) {
        puts("no AVX2+FMA: nothing to compare");
        return 0;
    }
    const shape shapes[] = {
        {"LSTM fwd  h W_hh       ", false, 32, 1600, 400},
        {"LSTM fwd  h W_hh (20)  ", false, 20, 1600, 400},
        {"LSTM bwd  dG W_hh^T    ", true, 32, 400, 1600},
        {"LSTM bwd  dG W_hh^T(20)", true, 20, 400, 1600},
    };
    enum { STEPS = 35 };
    printf("%-24s %9s %9s %12s\n", "shape (GFLOP/s)", "blas", "packed", "packed+pack");
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const shape *sh = &shapes[s];
        int M = sh->M, N = sh->N, K = sh->K;
        float *A = malloc(sizeof(float) * (size_t)M * K), *B = malloc(sizeof(float) * (size_t)K * N);
        float *C = malloc(sizeof(float) * (size_t)M * N);
        for (int64_t i = 0; i < (int64_t)M * K; i++) A[i] = (float)(i % 17) * 0.01f;
        for (int64_t i = 0; i < (int64_t)K * N; i++) B[i] = (float)(i % 13) * 0.01f;
        for (int64_t i = 0; i < (int64_t)M * N; i++) C[i] = 0;
        double flops = 2.0 * M * N * K * STEPS, best_blas = 1e30, best_packed = 1e30, best_pack = 1e30;
        for (int r = 0; r < rounds; r++) {
            double t0 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            for (int i = 0; i < STEPS; i++) ag__gemm_blas(false, sh->tb, M, N, K, 1, A, B, 1, C);
            double t1 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag__packed_b P = ag__pack_b(sh->tb, K, N, B);
            double t2 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            for (int i = 0; i < STEPS; i++) ag__gemm_packed(M, A, K, &P, 1, 1, C, N);
            double t3 = bench_seconds(CLOCK_THREAD_CPUTIME_ID);
            ag_step_end();
            if (t1 - t0 < best_blas) best_blas = t1 - t0;
            if (t3 - t2 < best_packed) best_packed = t3 - t2;
            if (t3 - t1 < best_pack) best_pack = t3 - t1;
        }
        printf("%s %9.1f %9.1f %12.1f\n", sh->name, flops / best_blas * 1e-9, flops / best_packed * 1e-9,
               flops / best_pack * 1e-9);
        free(A), free(B), free(C);
    }
    small_products(rounds);
    step_products(rounds);
    ag_shutdown();
    return 0;
#endif
}
