/* gemm_kernel.c - our own f32 GEMM for the products OpenBLAS is weak at.
 *
 * OpenBLAS packs both operands on every call.  That is free on a big
 * product, but two families here are not big:
 *
 *  - the LSTM's recurrent step, [32,400] x [400,1600] per timestep: the
 *    same 2.5 MB W_hh is repacked on each of the ~35 calls of a layer;
 *  - (room for) tiny per-example products, where packing is the product.
 *
 * So B is packed once (ag__pack_b) into panels of 16 columns, and every
 * product against it runs a 6x16 register-blocked FMA microkernel: twelve
 * ymm accumulators (6 rows x 2 vectors of 8), each k step loads 16 floats of
 * the panel and broadcasts one float of each of 6 rows of A, which is read
 * in place (a row of A is H floats, it stays in L1/L2 for all panels).  The
 * design is the textbook one (BLIS's haswell sgemm kernel is 6x16 too).
 *
 * Determinism: every element of C is one FMA chain over k = 0..K-1 in
 * order, starting from 0, then C = alpha acc + beta C.  No K blocking, and
 * edge tiles do exactly the same arithmetic as full ones, so an element's
 * bits depend on nothing but its row of A and column of B: not on M, on how
 * the product is cut into parts, or on the thread count.
 *
 * f32 on AVX2+FMA only, chosen at run time; the f64 build (gradient checks)
 * and older CPUs keep BLAS (ag__packed_gemm_ok() says which). */
#include "../graph/internal.h"

#include <stddef.h>

enum { MR = 6, NR = 16 };

#if !defined(AG_REAL_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#define HAVE_KERNEL 1
#include <immintrin.h>
#define TARGET __attribute__((target("avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#else
#define HAVE_KERNEL 0
#endif

bool ag__packed_gemm_ok(void) {
#if HAVE_KERNEL
    static int ok = -1; /* benign race: every thread computes the same value */
    if (ok < 0) ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return ok;
#else
    return false;
#endif
}

static int panels_of(int N) { return (N + NR - 1) / NR; }

/* ---- packing ----
 *
 * Panel p holds columns [16p, 16p + 16) of op(B) for k = 0..K-1, one row of
 * 16 after the other (K x 16 floats, contiguous), zeros past column N: the
 * microkernel's B loads are then two aligned, consecutive vectors per k. */
ag__packed_b ag__pack_b(bool tb, int K, int N, const ag_real *B) {
    int panels = panels_of(N);
    ag__packed_b P = {.K = K, .N = N};
    P.panels = ag_arena_alloc(((size_t)panels * K * NR + 1) * sizeof(ag_real));
    int ldb = tb ? K : N; /* B is [K,N], or [N,K] when transposed */
    for (int p = 0; p < panels; p++) {
        int j0 = p * NR, nr = N - j0 < NR ? N - j0 : NR;
        ag_real *dst = P.panels + (int64_t)p * K * NR;
        for (int k = 0; k < K; k++, dst += NR) {
            if (tb)
                for (int j = 0; j < nr; j++) dst[j] = B[(int64_t)(j0 + j) * ldb + k];
            else
                memcpy(dst, B + (int64_t)k * ldb + j0, (size_t)nr * sizeof *dst);
            for (int j = nr; j < NR; j++) dst[j] = 0;
        }
    }
    return P;
}

#if HAVE_KERNEL

/* Lane masks for the last, narrower panel: lanes [0, n) of 8 set. */
TARGET INLINE __m256i lanes_below(int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
}

/* One tile: C[0..mr, 0..nr) = alpha A[0..mr, :] Bp + beta C, with A(i,k) at
 * A[i lda + k] and Bp one packed panel.  mr is a constant at every call
 * site, so the accumulator array lives in registers and the row loop
 * unrolls.  The nr < 16 tile stores through lane masks (the panel's zero
 * padding made its products 0); its arithmetic is the full tile's. */
TARGET INLINE void tile(const int mr, int nr, int K, const float *A, int lda, const float *Bp, float alpha,
                        float beta, float *C, int ldc) {
    __m256 acc[MR][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    const float *a[MR];
    for (int i = 0; i < mr; i++) a[i] = A + (ptrdiff_t)i * lda;
    for (int k = 0; k < K; k++, Bp += NR) {
        __m256 b0 = _mm256_load_ps(Bp), b1 = _mm256_load_ps(Bp + 8);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m256 ai = _mm256_broadcast_ss(a[i] + k);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    __m256i m0 = lanes_below(nr), m1 = lanes_below(nr - 8);
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++) {
        float *c = C + (ptrdiff_t)i * ldc;
        __m256 r0 = alpha == 1 ? acc[i][0] : _mm256_mul_ps(va, acc[i][0]);
        __m256 r1 = alpha == 1 ? acc[i][1] : _mm256_mul_ps(va, acc[i][1]);
        if (nr == NR) {
            if (beta != 0) { /* beta 0 must not read C: it may be uninitialised */
                r0 = _mm256_add_ps(beta == 1 ? _mm256_loadu_ps(c) : _mm256_mul_ps(vb, _mm256_loadu_ps(c)), r0);
                r1 = _mm256_add_ps(beta == 1 ? _mm256_loadu_ps(c + 8) : _mm256_mul_ps(vb, _mm256_loadu_ps(c + 8)), r1);
            }
            _mm256_storeu_ps(c, r0);
            _mm256_storeu_ps(c + 8, r1);
        } else {
            if (beta != 0) {
                __m256 c0 = _mm256_maskload_ps(c, m0), c1 = _mm256_maskload_ps(c + 8, m1);
                r0 = _mm256_add_ps(beta == 1 ? c0 : _mm256_mul_ps(vb, c0), r0);
                r1 = _mm256_add_ps(beta == 1 ? c1 : _mm256_mul_ps(vb, c1), r1);
            }
            _mm256_maskstore_ps(c, m0, r0);
            _mm256_maskstore_ps(c + 8, m1, r1);
        }
    }
}

/* A tile of any height 1..6, each height its own unrolled copy. */
TARGET static void tile_rows(int mr, int nr, int K, const float *A, int lda, const float *Bp, float alpha,
                             float beta, float *C, int ldc) {
    switch (mr) {
    case 6: tile(6, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    case 5: tile(5, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    case 4: tile(4, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    case 3: tile(3, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    case 2: tile(2, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    case 1: tile(1, nr, K, A, lda, Bp, alpha, beta, C, ldc); break;
    }
}

typedef struct {
    int M, lda, ldc, panels_per_part;
    const float *A;
    const ag__packed_b *B;
    float alpha, beta;
    float *C;
} packed_job;

/* Panels [p0, p1): each panel (16 columns x K, 25.6 KB at K = 400) is read
 * from memory once and stays in L1 while every row tile of A runs over it.
 * The rows are cut into as few tiles as the 6-row kernel allows, of even
 * height (32 rows: 6,6,5,5,5,5 rather than 6,6,6,6,6,2, whose last tile
 * would spend a whole pass over the panel on two rows). */
TARGET static void packed_part(void *ctx, int64_t part) {
    const packed_job *j = ctx;
    int N = j->B->N, K = j->B->K, panels = panels_of(N);
    int p0 = (int)part * j->panels_per_part, p1 = p0 + j->panels_per_part < panels ? p0 + j->panels_per_part : panels;
    int tiles = (j->M + MR - 1) / MR;
    for (int p = p0; p < p1; p++) {
        int j0 = p * NR, nr = N - j0 < NR ? N - j0 : NR;
        const float *Bp = j->B->panels + (int64_t)p * K * NR;
        for (int t = 0, i0 = 0; t < tiles; t++) {
            int mr = j->M / tiles + (t < j->M % tiles);
            tile_rows(mr, nr, K, j->A + (int64_t)i0 * j->lda, j->lda, Bp, j->alpha, j->beta,
                      j->C + (int64_t)i0 * j->ldc + j0, j->ldc);
            i0 += mr;
        }
    }
}

/* Parts of at least ~2 MFLOP (~20 us), whole panels each; how many does not
 * change any result (see the top of the file). */
static int panels_per_part(int M, int N, int K) {
    int panels = panels_of(N);
    double panel_flops = 2.0 * M * K * NR;
    int per = (int)(2e6 / (panel_flops > 1 ? panel_flops : 1)) + 1;
    return per < panels ? per : panels;
}

#endif

void ag__gemm_packed(int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta, ag_real *C,
                     int ldc) {
#if HAVE_KERNEL
    if (M <= 0 || B->N <= 0) return;
    packed_job j = {.M = M, .lda = lda, .ldc = ldc, .A = A, .B = B, .alpha = alpha, .beta = beta, .C = C,
                    .panels_per_part = panels_per_part(M, B->N, B->K)};
    int per = j.panels_per_part;
    ag__parallel((panels_of(B->N) + per - 1) / per, packed_part, &j);
#else
    (void)M, (void)A, (void)lda, (void)B, (void)alpha, (void)beta, (void)C, (void)ldc;
    ag__fatal("ag__gemm_packed", "no packed GEMM kernel in this build (check ag__packed_gemm_ok)");
#endif
}
