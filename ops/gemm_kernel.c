/* gemm_kernel.c - our own f32 GEMM for the products OpenBLAS is weak at.
 *
 * OpenBLAS packs both operands on every call.  That is free on a big
 * product, but two families here are not big:
 *
 *  - the LSTM's recurrent step, [32,400] x [400,1600] per timestep: the
 *    same 2.5 MB W_hh is repacked on each of the ~35 calls of a layer;
 *  - tiny per-example products (MPSAN's [30,30] x [30,300]), where the
 *    packing costs as much as the product.
 *
 * For the first, B is packed once (ag__pack_b) into panels of 16 columns, and every
 * product against it runs a 6x16 register-blocked FMA microkernel: twelve
 * ymm accumulators (6 rows x 2 vectors of 8), each k step loads 16 floats of
 * the panel and broadcasts one float of each of 6 rows of A, which is read
 * in place (a row of A is H floats, it stays in L1/L2 for all panels).  The
 * design is the textbook one (BLIS's haswell sgemm kernel is 6x16 too).
 * For the second (ag__gemm_small, further down) the same tiles read B in
 * place, and A B^T gets a dot-product tile.
 *
 * ag__gemm also sends the big products where this kernel measured faster
 * than OpenBLAS here (ops/matmul.c, packed_wins: A B and A B^T with up to
 * 1024 columns), packing op(B) per call.  For those A is megabytes, so the
 * rows of A go in blocks that stay in L2 while all panels pass
 * (block_rows_of).
 *
 * Determinism: every element of C is one FMA chain over k = 0..K-1 in
 * order, starting from 0, then C = alpha acc + beta C.  No K blocking, and
 * edge tiles do exactly the same arithmetic as full ones, so an element's
 * bits depend on nothing but its row of A and column of B: not on M, on how
 * the product is cut into parts, or on the thread count.  (The dot tile
 * keeps 8 lane chains per element, summed in a fixed tree: the same holds.)
 *
 * f32 on AVX2+FMA only, chosen at run time; the f64 build (gradient checks)
 * and older CPUs keep BLAS (ag__packed_gemm_ok() says which). */
#include "../graph/internal.h"

#include <stddef.h>

enum { MR = 6, NR = 16, MR512 = 12 };

#if !defined(AG_REAL_DOUBLE) && defined(__x86_64__) && defined(__GNUC__)
#define HAVE_KERNEL 1
#include <immintrin.h>
#define TARGET __attribute__((target("avx2,fma")))
#define TARGET512 __attribute__((target("avx512f,avx2,fma")))
#define INLINE static inline __attribute__((always_inline))
#else
#define HAVE_KERNEL 0
#endif

bool ag__packed_gemm_ok(void) {
#if HAVE_KERNEL
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); /* two loads of libgcc's cpu model */
#else
    return false;
#endif
}

/* The 512-bit tile where the CPU has AVX-512: a 16-column slice is one
 * vector, so a tile holds 12 rows (12 accumulators: enough FMAs in flight
 * for two FMA units of latency 4) where the 256-bit one holds 6 rows of
 * two vectors.  The same FMA chain per element: the same bits. */
static bool only_256; /* ag__gemm_kernel_256: the tests' way to the other tile */

void ag__gemm_kernel_256(bool on) { only_256 = on; }

#if HAVE_KERNEL
static bool use_512(void) {
    static int avx512 = -1;
    if (avx512 < 0) avx512 = __builtin_cpu_supports("avx512f") != 0;
    return avx512 && !only_256;
}

/* The tallest tile of the kernel this CPU runs. */
static int tile_height(void) { return use_512() ? MR512 : MR; }
#endif

static int panels_of(int N) { return (N + NR - 1) / NR; }

/* ---- packing ----
 *
 * Panel p holds columns [16p, 16p + 16) of op(B) for k = 0..K-1, one row of
 * 16 after the other (K x 16 floats, contiguous), zeros past column N: the
 * microkernel's B loads are then two aligned, consecutive vectors per k. */

#if HAVE_KERNEL
/* 8 rows of 8 floats (row r at src + r ld) transposed: column k of them
 * goes to dst + k dst_ld.  The textbook unpack / shuffle / permute. */
TARGET INLINE void transpose8(const float *src, ptrdiff_t ld, float *dst, ptrdiff_t dst_ld) {
    __m256 r[8], t[8], u[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src + i * ld);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(dst + k * dst_ld, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(dst + (k + 4) * dst_ld, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}

/* A full panel of B^T (16 rows of B, row stride ldb): 8x8 transposes along
 * k, the last K % 8 one float at a time.  The scalar gather it replaces
 * cost 3-5% of a routed NT product (404x800x400). */
TARGET static void pack_panel_t(int K, const float *B, int ldb, float *dst) {
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int h = 0; h < NR; h += 8) transpose8(B + (ptrdiff_t)h * ldb + k, ldb, dst + (ptrdiff_t)k * NR + h, NR);
    for (; k < K; k++)
        for (int j = 0; j < NR; j++) dst[(ptrdiff_t)k * NR + j] = B[(ptrdiff_t)j * ldb + k];
}
#endif

typedef struct {
    bool tb;
    int K, N;
    const ag_real *B;
    ag_real *panels;
} pack_job;

/* Panels [begin, end) of op(B), zero-padded to 16 columns. */
static void pack_panels(void *ctx, int64_t begin, int64_t end) {
    const pack_job *j = ctx;
    int K = j->K, N = j->N, ldb = j->tb ? K : N; /* B is [K,N], or [N,K] when transposed */
#if HAVE_KERNEL
    bool vector_t = j->tb && ag__packed_gemm_ok();
#endif
    for (int p = (int)begin; p < end; p++) {
        int j0 = p * NR, nr = N - j0 < NR ? N - j0 : NR;
        ag_real *dst = j->panels + (int64_t)p * K * NR;
#if HAVE_KERNEL
        if (vector_t && nr == NR) {
            pack_panel_t(K, j->B + (int64_t)j0 * ldb, ldb, dst);
            continue;
        }
#endif
        for (int k = 0; k < K; k++, dst += NR) {
            if (j->tb)
                for (int c = 0; c < nr; c++) dst[c] = j->B[(int64_t)(j0 + c) * ldb + k];
            else
                memcpy(dst, j->B + (int64_t)k * ldb + j0, (size_t)nr * sizeof *dst);
            for (int c = nr; c < NR; c++) dst[c] = 0;
        }
    }
}

/* Packing is a copy, so cutting it changes no bits; on the pool it no
 * longer runs on one core while the product after it runs on all (MTSA's
 * 300 x 300 weights at TREC's batches: 4% of a 2-thread step). */
ag__packed_b ag__pack_b(bool tb, int K, int N, const ag_real *B) {
    int panels = panels_of(N);
    ag__packed_b P = {.K = K, .N = N};
    P.panels = ag__arena_alloc(((size_t)panels * K * NR + 1) * sizeof(ag_real));
    pack_job j = {.tb = tb, .K = K, .N = N, .B = B, .panels = P.panels};
    ag__parallel_range(panels, ag__units_per_part((int64_t)K * NR), pack_panels, &j);
    return P;
}

#if HAVE_KERNEL

/* Lane masks for the last, narrower panel: lanes [0, n) of 8 set. */
TARGET INLINE __m256i lanes_below(int n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
}

/* A 16-column slice of op(B) as the tile reads it: row k at B + k ldb,
 * either a packed panel (ldb = 16, zero-padded) or B in place, whose last
 * slice is narrower: `masked` loads only its nr columns (the others read as
 * 0, as a panel's padding does, so the arithmetic is the same). */
TARGET INLINE void load_b(const float *b, bool masked, __m256i m0, __m256i m1, __m256 *b0, __m256 *b1) {
    if (masked) {
        *b0 = _mm256_maskload_ps(b, m0);
        *b1 = _mm256_maskload_ps(b + 8, m1);
    } else {
        *b0 = _mm256_loadu_ps(b);
        *b1 = _mm256_loadu_ps(b + 8);
    }
}

/* One tile: C[0..mr, 0..nr) = alpha op(A)[0..mr, :] B + beta C, with
 * op(A)(i,k) at A[i a_rs + k a_cs] (rows of A, or its columns when
 * transposed).  mr and masked are constants at every call site, so the
 * accumulators live in registers and the row loop unrolls.  The nr < 16
 * tile stores through lane masks; its arithmetic is the full tile's. */
TARGET INLINE void tile(const int mr, const bool masked, int nr, int K, const float *A, ptrdiff_t a_rs,
                        ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float alpha, float beta, float *C, int ldc) {
    __m256 acc[MR][2];
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
    __m256i m0 = lanes_below(nr), m1 = lanes_below(nr - 8);
    for (int k = 0; k < K; k++, A += a_cs, B += ldb) {
        __m256 b0, b1;
        load_b(B, masked, m0, m1, &b0, &b1);
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++) {
            __m256 ai = _mm256_broadcast_ss(A + i * a_rs);
            acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
            acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
        }
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
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

/* The tile above with 512-bit vectors, up to 12 rows: one accumulator a
 * row; B's masked slice and C's last nr < 16 columns through a lane mask. */
TARGET512 INLINE void tile512(const int mr, const bool masked, int nr, int K, const float *A, ptrdiff_t a_rs,
                              ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float alpha, float beta, float *C, int ldc) {
    __m512 acc[MR512];
    for (int i = 0; i < mr; i++) acc[i] = _mm512_setzero_ps();
    __mmask16 m = (__mmask16)((1u << nr) - 1); /* C's columns (a panel's padding is not C) */
    for (int k = 0; k < K; k++, A += a_cs, B += ldb) {
        __m512 b = masked ? _mm512_maskz_loadu_ps(m, B) : _mm512_loadu_ps(B);
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(A[i * a_rs]), b, acc[i]);
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++) {
        float *c = C + (ptrdiff_t)i * ldc;
        __m512 r = alpha == 1 ? acc[i] : _mm512_mul_ps(va, acc[i]);
        if (beta != 0) { /* beta 0 must not read C: it may be uninitialised */
            __m512 c0 = nr == NR ? _mm512_loadu_ps(c) : _mm512_maskz_loadu_ps(m, c);
            r = _mm512_add_ps(beta == 1 ? c0 : _mm512_mul_ps(vb, c0), r);
        }
        if (nr == NR) _mm512_storeu_ps(c, r);
        else _mm512_mask_storeu_ps(c, m, r);
    }
}

/* A tile of any height 1..6 (1..12 with AVX-512), each height (and B's
 * last, masked slice) its own unrolled copy: `tile_fn` at height h. */
#define TILE_CASE(tile_fn, h, masked)                                                               \
    case h: tile_fn(h, masked, nr, K, A, a_rs, a_cs, B, ldb, alpha, beta, C, ldc); break;
#define TILE_CASES_6(tile_fn, masked)                                                               \
    TILE_CASE(tile_fn, 6, masked) TILE_CASE(tile_fn, 5, masked) TILE_CASE(tile_fn, 4, masked)       \
    TILE_CASE(tile_fn, 3, masked) TILE_CASE(tile_fn, 2, masked) TILE_CASE(tile_fn, 1, masked)
#define TILE_CASES_12(tile_fn, masked)                                                              \
    TILE_CASE(tile_fn, 12, masked) TILE_CASE(tile_fn, 11, masked) TILE_CASE(tile_fn, 10, masked)    \
    TILE_CASE(tile_fn, 9, masked) TILE_CASE(tile_fn, 8, masked) TILE_CASE(tile_fn, 7, masked)       \
    TILE_CASES_6(tile_fn, masked)

TARGET512 static void tile_rows512(int mr, bool masked, int nr, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                                   const float *B, ptrdiff_t ldb, float alpha, float beta, float *C, int ldc) {
    if (masked) switch (mr) { TILE_CASES_12(tile512, true) }
    else switch (mr) { TILE_CASES_12(tile512, false) }
}

TARGET static void tile_rows(int mr, bool masked, int nr, int K, const float *A, ptrdiff_t a_rs, ptrdiff_t a_cs,
                             const float *B, ptrdiff_t ldb, float alpha, float beta, float *C, int ldc) {
    if (use_512()) tile_rows512(mr, masked, nr, K, A, a_rs, a_cs, B, ldb, alpha, beta, C, ldc);
    else if (masked) switch (mr) { TILE_CASES_6(tile, true) }
    else switch (mr) { TILE_CASES_6(tile, false) }
}
#undef TILE_CASES_12
#undef TILE_CASES_6
#undef TILE_CASE

/* Rows [0, M) of C against one 16-column slice of B, cut into as few
 * tiles as the tile height allows (6, or 12 with AVX-512), of even height
 * (32 rows: 6,6,5,5,5,5 rather than 6,6,6,6,6,2, whose last tile would
 * spend a whole pass over the slice on two rows). */
TARGET static void rows_against_slice(int M, bool masked, int nr, int K, const float *A, ptrdiff_t a_rs,
                                      ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float alpha, float beta,
                                      float *C, int ldc) {
    int tiles = (M + tile_height() - 1) / tile_height();
    for (int t = 0, i0 = 0; t < tiles; t++) {
        int mr = M / tiles + (t < M % tiles);
        tile_rows(mr, masked, nr, K, A + i0 * a_rs, a_rs, a_cs, B, ldb, alpha, beta, C + (ptrdiff_t)i0 * ldc, ldc);
        i0 += mr;
    }
}

typedef struct {
    int M, ldc, block_rows, blocks, panels_per_part, groups;
    ptrdiff_t a_rs, a_cs; /* op(A)(i,k) at A[i a_rs + k a_cs] */
    const float *A;
    const ag__packed_b *B;
    float alpha, beta;
    float *C;
} packed_job;

/* Part = (block of rows of A, range of panels).  Each panel (16 columns x
 * K, 19 KB at K = 300) is read once per block and stays in L1 while every
 * row tile of the block runs over it; the block (block_rows x K of A) stays
 * in L2 while the panels stream past, instead of all of A streaming from
 * L3 for every panel. */
TARGET static void packed_part(void *ctx, int64_t part) {
    const packed_job *j = ctx;
    int N = j->B->N, K = j->B->K, panels = panels_of(N);
    int blk = (int)(part / j->groups), grp = (int)(part % j->groups);
    int i0 = blk * j->block_rows, mb = j->M - i0 < j->block_rows ? j->M - i0 : j->block_rows;
    int p0 = grp * j->panels_per_part, p1 = p0 + j->panels_per_part < panels ? p0 + j->panels_per_part : panels;
    for (int p = p0; p < p1; p++) {
        int j0 = p * NR, nr = N - j0 < NR ? N - j0 : NR;
        rows_against_slice(mb, false, nr, K, j->A + i0 * j->a_rs, j->a_rs, j->a_cs, j->B->panels + (int64_t)p * K * NR,
                           NR, j->alpha, j->beta, j->C + (ptrdiff_t)i0 * j->ldc + j0, j->ldc);
    }
}

/* ---- small products, B read in place ----
 *
 * For one small product (MPSAN's per-example [30,30] x [30,300]) packing
 * costs as much as multiplying, so B is read where it lies: op(B) = B
 * feeds the 6x16 tiles directly (row k of a slice at B + k ldb), and
 * A B^T, whose B slices would be strided, runs on a dot-product tile that
 * reads rows of both operands. */

enum { DR = 3, DC = 4 }; /* the dot tile: 3 rows of A x 4 rows of B, 12 accumulators */

/* Lanes [0, 8) as 4 sums in a fixed tree: ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7))
 * of each of the 4 vectors. */
TARGET INLINE __m128 sum_lanes4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(v0, v1), _mm256_hadd_ps(v2, v3));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

/* C[i0.., j0..] (up to 3 x 4 of it) = alpha A B^T + beta C, each element
 * 8 lane chains over k then sum_lanes4, the tail of K through a lane mask:
 * the same arithmetic in every tile.  Rows or columns past the edge are
 * computed on a repeated valid row and not stored. */
TARGET static void dot_tile(int mr, int nr, int K, const float *A, int lda, const float *B, int ldb, float alpha,
                            float beta, float *C, int ldc) {
    const float *a[DR], *b[DC];
    for (int i = 0; i < DR; i++) a[i] = A + (ptrdiff_t)(i < mr ? i : mr - 1) * lda;
    for (int j = 0; j < DC; j++) b[j] = B + (ptrdiff_t)(j < nr ? j : nr - 1) * ldb;
    __m256 acc[DR][DC];
    for (int i = 0; i < DR; i++)
        for (int j = 0; j < DC; j++) acc[i][j] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 av[DR];
        for (int i = 0; i < DR; i++) av[i] = _mm256_loadu_ps(a[i] + k);
        for (int j = 0; j < DC; j++) {
            __m256 bj = _mm256_loadu_ps(b[j] + k);
            for (int i = 0; i < DR; i++) acc[i][j] = _mm256_fmadd_ps(av[i], bj, acc[i][j]);
        }
    }
    if (k < K) {
        __m256i m = lanes_below(K - k);
        __m256 av[DR];
        for (int i = 0; i < DR; i++) av[i] = _mm256_maskload_ps(a[i] + k, m);
        for (int j = 0; j < DC; j++) {
            __m256 bj = _mm256_maskload_ps(b[j] + k, m);
            for (int i = 0; i < DR; i++) acc[i][j] = _mm256_fmadd_ps(av[i], bj, acc[i][j]);
        }
    }
    for (int i = 0; i < mr; i++) {
        float sum[DC];
        _mm_storeu_ps(sum, sum_lanes4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
        float *c = C + (ptrdiff_t)i * ldc;
        for (int j = 0; j < nr; j++) {
            float r = alpha == 1 ? sum[j] : alpha * sum[j];
            c[j] = beta == 0 ? r : (beta == 1 ? c[j] : beta * c[j]) + r;
        }
    }
}

TARGET static void gemm_small_nt(int M, int N, int K, float alpha, const float *A, int lda, const float *B, int ldb,
                                 float beta, float *C, int ldc) {
    for (int i0 = 0; i0 < M; i0 += DR)
        for (int j0 = 0; j0 < N; j0 += DC)
            dot_tile(M - i0 < DR ? M - i0 : DR, N - j0 < DC ? N - j0 : DC, K, A + (ptrdiff_t)i0 * lda, lda,
                     B + (ptrdiff_t)j0 * ldb, ldb, alpha, beta, C + (ptrdiff_t)i0 * ldc + j0, ldc);
}

/* The k range [*lo, *hi) where at least one of the tile's mr rows is
 * nonzero: the union of their spans (empty: 0, 0). */
static void tile_span(const ag__k_span *rows, int mr, int *lo, int *hi) {
    *lo = INT32_MAX, *hi = 0;
    for (int i = 0; i < mr; i++) {
        if (rows[i].hi <= rows[i].lo) continue;
        if (rows[i].lo < *lo) *lo = rows[i].lo;
        if (rows[i].hi > *hi) *hi = rows[i].hi;
    }
    if (*hi == 0) *lo = 0;
}

/* rows_against_slice for a sparse op(A) - MPSAN's masked attention
 * weights, a band |k - q| <= 3 or a triangle k < q: each tile (the same
 * cut) runs its FMA chain over its span only.  Outside it every term of
 * the tile's rows is 0 b, which leaves a chain's sum as it was (starting
 * from +0 it stays +0; later, acc + 0 = acc up to the sign of a zero acc),
 * so a band of 30 keys costs a tile 10 steps of k instead of 30.  An empty
 * span still stores beta C (0 with beta 0). */
TARGET static void span_rows_against_slice(int M, bool masked, int nr, const ag__k_span *spans, const float *A,
                                           ptrdiff_t a_rs, ptrdiff_t a_cs, const float *B, ptrdiff_t ldb, float alpha,
                                           float beta, float *C, int ldc) {
    int tiles = (M + tile_height() - 1) / tile_height();
    for (int t = 0, i0 = 0; t < tiles; t++) {
        int mr = M / tiles + (t < M % tiles), lo, hi;
        tile_span(spans + i0, mr, &lo, &hi);
        tile_rows(mr, masked, nr, hi - lo, A + i0 * a_rs + lo * a_cs, a_rs, a_cs, B + (ptrdiff_t)lo * ldb, ldb, alpha,
                  beta, C + (ptrdiff_t)i0 * ldc, ldc);
        i0 += mr;
    }
}

/* op(A) B: A's rows (or, transposed, its columns) broadcast against
 * 16-column slices of B in place, the last one masked; with spans, each
 * row tile over its own k range only. */
TARGET static void gemm_small_xn(bool ta, int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                                 int ldb, float beta, float *C, int ldc, const ag__k_span *spans) {
    ptrdiff_t a_rs = ta ? 1 : lda, a_cs = ta ? lda : 1;
    for (int j0 = 0; j0 < N; j0 += NR) {
        int nr = N - j0 < NR ? N - j0 : NR;
        if (spans) span_rows_against_slice(M, nr < NR, nr, spans, A, a_rs, a_cs, B + j0, ldb, alpha, beta, C + j0, ldc);
        else rows_against_slice(M, nr < NR, nr, K, A, a_rs, a_cs, B + j0, ldb, alpha, beta, C + j0, ldc);
    }
}

#endif

bool ag__gemm_small(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda, const ag_real *B,
                    int ldb, ag_real beta, ag_real *C, int ldc, const ag__k_span *spans) {
#if HAVE_KERNEL
    if (!ag__packed_gemm_ok() || (ta && tb)) return false;
    if (M <= 0 || N <= 0) return true;
    /* A B^T takes no spans: its op(A) is a gradient dC (dA = dC h^T), dense */
    if (tb) gemm_small_nt(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else gemm_small_xn(ta, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, spans);
    return true;
#else
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta;
    (void)C, (void)ldc, (void)spans;
    return false;
#endif
}

#if HAVE_KERNEL
/* Parts of at least ~2 MFLOP (~20 us), whole panels each; how many does not
 * change any result (see the top of the file). */
static int panels_per_part(int M, int N, int K) {
    int panels = panels_of(N);
    double panel_flops = 2.0 * M * K * NR;
    int per = (int)(2e6 / (panel_flops > 1 ? panel_flops : 1)) + 1;
    return per < panels ? per : panels;
}

/* Rows of A per block: as many whole 6-row tiles as fit BLOCK_BYTES of the
 * 512 KB L2 (the panels and C pass through it too), at least one tile.
 * Measured on 1498x1500x300 (A 1.8 MB): unblocked 81 GFLOP/s, 256 KB
 * blocks 89, 160 KB (132 rows at K = 300) 91-101 against OpenBLAS's 94-99. */
enum { BLOCK_BYTES = 160 << 10 };
static int block_rows_of(int M, int K) {
    int mr = tile_height(), rows = BLOCK_BYTES / (K * (int)sizeof(float)) / mr * mr;
    if (rows < mr) rows = mr;
    return rows < M ? rows : M;
}

#endif

void ag__gemm_packed_op(bool ta, int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta,
                        ag_real *C, int ldc) {
#if HAVE_KERNEL
    if (M <= 0 || B->N <= 0) return;
    int rows = block_rows_of(M, B->K), per = panels_per_part(rows, B->N, B->K);
    packed_job j = {.M = M, .ldc = ldc, .block_rows = rows, .blocks = (M + rows - 1) / rows, .panels_per_part = per,
                    .groups = (panels_of(B->N) + per - 1) / per, .a_rs = ta ? 1 : lda, .a_cs = ta ? lda : 1, .A = A,
                    .B = B, .alpha = alpha, .beta = beta, .C = C};
    ag__parallel((int64_t)j.blocks * j.groups, packed_part, &j);
#else
    (void)ta, (void)M, (void)A, (void)lda, (void)B, (void)alpha, (void)beta, (void)C, (void)ldc;
    ag__fatal("ag__gemm_packed", "no packed GEMM kernel in this build (check ag__packed_gemm_ok)");
#endif
}

void ag__gemm_packed(int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta, ag_real *C,
                     int ldc) {
    ag__gemm_packed_op(false, M, A, lda, B, alpha, beta, C, ldc);
}
