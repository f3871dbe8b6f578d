/* matmul.c - matrix products on OpenBLAS (or, for the f32 shapes where it
 * measured faster, ops/gemm_kernel.c): batched matmul with optional
 * transposes, and the fused linear layer x W + b.  The products here are
 * the CPU's kernels (ops/matmul.h); CUDA's are in ops/cuda/matmul.c. */
#include "vecmath.h"
#include "dispatch.h"
#include "matmul.h"
#include "../graph/device.h"

#include <cblas.h>

#ifdef AG_REAL_DOUBLE
#define BLAS(name) cblas_d##name
#else
#define BLAS(name) cblas_s##name
#endif

static enum CBLAS_TRANSPOSE trans(bool t) { return t ? CblasTrans : CblasNoTrans; }

/* C = beta C, for the paths BLAS would otherwise skip or that only add. */
static void scale_c(int M, int N, ag_real beta, ag_real *C, int ldc) {
    if (beta == 1) return;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[(int64_t)i * ldc + j] = beta == 0 ? 0 : beta * C[(int64_t)i * ldc + j];
}

/* One BLAS call with explicit leading dimensions (row-major).  Products with
 * a side of 1 go to the level-2 routine that is that product: gemm would
 * pack a whole operand to use one lane of its kernel (a score vector h.u,
 * its gradient's outer product). */
static void blas_gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda,
                      const ag_real *B, int ldb, ag_real beta, ag_real *C, int ldc) {
    if (M == 0 || N == 0) return;
    ag__blas_setup(); /* its kernels and threads, before the first call */
    if (K == 0) { /* BLAS may leave C alone when K = 0; the math says C = beta C */
        scale_c(M, N, beta, C, ldc);
        return;
    }
    if (N == 1) { /* C[:,0] = op(A) b */
        BLAS(gemv)(CblasRowMajor, trans(ta), ta ? K : M, ta ? M : K, alpha, A, lda, B, tb ? 1 : ldb, beta, C, ldc);
    } else if (M == 1) { /* C[0,:] = op(B)^T a */
        BLAS(gemv)(CblasRowMajor, trans(!tb), tb ? N : K, tb ? K : N, alpha, B, ldb, A, ta ? lda : 1, beta, C, 1);
    } else if (K == 1) { /* C = beta C + alpha a b^T */
        scale_c(M, N, beta, C, ldc);
        BLAS(ger)(CblasRowMajor, M, N, alpha, A, ta ? 1 : lda, B, tb ? ldb : 1, C, ldc);
    } else {
        BLAS(gemm)(CblasRowMajor, trans(ta), trans(tb), M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    }
}

void ag__gemm_serial(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, const ag_real *B,
                     ag_real beta, ag_real *C) {
    blas_gemm(ta, tb, M, N, K, alpha, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

void ag__gemm_serial_ld(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda,
                        const ag_real *B, int ldb, ag_real beta, ag_real *C, int ldc) {
    blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* ---- large products in parts ----
 *
 * A product of more than GEMM_PART_FLOPS per part is cut into 2, 4 or 8
 * parts, chosen from M, N, K alone: rows of C (M), columns of C (N), or -
 * when K is the long side, as in a weight gradient X^T G summed over all
 * rows of a batch - the inner dimension K, each part's product going to
 * scratch and the parts added to C in a fixed order.  The pool runs the
 * parts; one thread runs the same parts in turn.  (OpenBLAS's result for an
 * element depends on how the product around it is cut, so cutting by the
 * thread count would make results depend on it.)  Every part repacks the
 * operand it shares with the others, so parts keep at least GEMM_MIN_SIDE
 * rows or columns: at 32 the packing share of an MPSAN step doubled (+6% of
 * its cycles on one thread), at 256 it is back to that of one call.  A
 * product with no side that long (TREC's batches of 160-480 rows by 300,
 * and their 300 x 300 weight gradients) would still run on one core, so it
 * gets two parts of at least GEMM_PAIR_SIDE: each repacks an operand of at
 * most K x 300 against 128 x 300 x K multiply-adds of its own. */
#define GEMM_PART_FLOPS 4e6
#define GEMM_MIN_SIDE 256 /* rows or columns per part: each part repacks the other operand */
#define GEMM_PAIR_SIDE 128 /* the same for a product cut in two that no longer side would cut */

typedef struct {
    int parts;
    char dim; /* 'm', 'n' or 'k' */
} gemm_split;

/* Which side to cut into `parts` of at least min_side, or 0 for none. */
static char cut_dim(int M, int N, int K, int parts, int min_side) {
    int side = M > N ? M : N;
    bool k_fits = parts <= 4 && K >= min_side * parts;
    if (K >= 2 * side && k_fits) return 'k'; /* K the long side: cut it */
    if (M >= N && M >= min_side * parts) return 'm';
    if (N >= min_side * parts) return 'n';
    if (M >= min_side * parts) return 'm';
    if (k_fits) return 'k'; /* e.g. 300x300 weights, K = 537 rows */
    return 0;
}

static gemm_split split_of(int M, int N, int K) {
    double flops = 2.0 * M * N * K;
    int parts = 1;
    while (parts < 8 && flops / (2 * parts) >= GEMM_PART_FLOPS) parts *= 2;
    if (parts == 1) return (gemm_split){1, 0};
    for (int p = parts; p > 1; p /= 2) {
        char dim = cut_dim(M, N, K, p, GEMM_MIN_SIDE);
        if (dim) return (gemm_split){p, dim};
    }
    char dim = cut_dim(M, N, K, 2, GEMM_PAIR_SIDE);
    return dim ? (gemm_split){2, dim} : (gemm_split){1, 0};
}

/* Part p of `parts` over [0, n): [n p / parts, n (p + 1) / parts). */
static inline int part_start(int n, int p, int parts) { return (int)((int64_t)n * p / parts); }

typedef struct {
    bool ta, tb;
    int M, N, K, lda, ldb;
    ag_real alpha, beta;
    const ag_real *A, *B;
    ag_real *C, *scratch;
    gemm_split sp;
} gemm_job;

static void gemm_part(void *ctx, int64_t part) {
    const gemm_job *j = ctx;
    int p = (int)part, parts = j->sp.parts;
    if (j->sp.dim == 'm') {
        int m0 = part_start(j->M, p, parts), m1 = part_start(j->M, p + 1, parts);
        const ag_real *A = j->ta ? j->A + m0 : j->A + (int64_t)m0 * j->lda;
        blas_gemm(j->ta, j->tb, m1 - m0, j->N, j->K, j->alpha, A, j->lda, j->B, j->ldb, j->beta,
                  j->C + (int64_t)m0 * j->N, j->N);
    } else if (j->sp.dim == 'n') {
        int n0 = part_start(j->N, p, parts), n1 = part_start(j->N, p + 1, parts);
        const ag_real *B = j->tb ? j->B + (int64_t)n0 * j->ldb : j->B + n0;
        blas_gemm(j->ta, j->tb, j->M, n1 - n0, j->K, j->alpha, j->A, j->lda, B, j->ldb, j->beta, j->C + n0, j->N);
    } else { /* part 0 into C with beta, the others into scratch */
        int k0 = part_start(j->K, p, parts), k1 = part_start(j->K, p + 1, parts);
        const ag_real *A = j->ta ? j->A + (int64_t)k0 * j->lda : j->A + k0;
        const ag_real *B = j->tb ? j->B + k0 : j->B + (int64_t)k0 * j->ldb;
        ag_real *C = p == 0 ? j->C : j->scratch + (int64_t)(p - 1) * j->M * j->N;
        blas_gemm(j->ta, j->tb, j->M, j->N, k1 - k0, j->alpha, A, j->lda, B, j->ldb, p == 0 ? j->beta : 0, C, j->N);
    }
}

enum { SUM_CHUNK = 16384 };

/* C += the K parts 1.. in order, over one chunk of C. */
static void gemm_sum_part(void *ctx, int64_t chunk) {
    const gemm_job *j = ctx;
    int64_t mn = (int64_t)j->M * j->N, begin = chunk * SUM_CHUNK;
    int64_t end = begin + SUM_CHUNK < mn ? begin + SUM_CHUNK : mn;
    for (int p = 1; p < j->sp.parts; p++) {
        const ag_real *S = j->scratch + (int64_t)(p - 1) * mn;
        for (int64_t i = begin; i < end; i++) j->C[i] += S[i];
    }
}

void ag__gemm_blas(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, const ag_real *B,
                   ag_real beta, ag_real *C) {
    gemm_job j = {.ta = ta, .tb = tb, .M = M, .N = N, .K = K, .lda = ta ? M : K, .ldb = tb ? K : N,
                  .alpha = alpha, .beta = beta, .A = A, .B = B, .C = C, .sp = split_of(M, N, K)};
    if (j.sp.parts == 1) {
        blas_gemm(ta, tb, M, N, K, alpha, A, j.lda, B, j.ldb, beta, C, N);
        return;
    }
    int64_t mn = (int64_t)M * N;
    if (j.sp.dim == 'k') j.scratch = ag__arena_alloc((size_t)(j.sp.parts - 1) * mn * sizeof(ag_real));
    ag__parallel(j.sp.parts, gemm_part, &j);
    if (j.sp.dim == 'k') ag__parallel((mn + SUM_CHUNK - 1) / SUM_CHUNK, gemm_sum_part, &j);
}

/* ---- our kernel where it beats OpenBLAS ----
 * ops/gemm_kernel.c, op(B) packed per call into the step arena, against
 * OpenBLAS one call at a time (bench/bench_gemm_kernel, 1 thread, packing
 * included, three interleaved runs), kernel / OpenBLAS:
 *  - A B^T wins from 64 rows: 1498x300x1500 1.08-1.10, 808x400x1600
 *    1.09-1.11, 1024x64x64 1.09, 64x64x128 1.08, 789x128x128 1.04,
 *    1498x300x300 1.04, 745x600x600 1.02-1.04, 745x300x300 1.02-1.05,
 *    128x128x64 1.03, 404x800x400 1.02, 745x1024x300 1.01-1.03,
 *    745x600x300 0.98-1.01;
 *  - A B wins with many rows or a long K: 1024x64x64 1.08, 404x400x800
 *    1.05, 480x300x600 1.04, 789x128x128 1.03-1.04, 1498x300x300 1.00-1.05,
 *    480x600x600 1.02-1.03, 745x300x300 1.00-1.02, 745x600x300 0.99-1.00;
 *    not with few rows and a short K: 480x300x300 0.99, 256^3 0.99,
 *    128x64x128 1.00, 64x128x64 0.89;
 *  - wide C or a long K loses: 808x10001x400 NT 0.83-0.85 (16 MB of
 *    panels), 1498x1500x300 NN 0.92-0.98, 808x400x10001 NN 0.91-1.00 (a
 *    640 KB panel per 16 columns);
 *  - A^T B (the weight gradients) loses, 0.55-0.85: op(A)'s rows are
 *    columns of A, so each k of a tile reads a new row of A, M floats on.
 * Each element's bits still depend only on its row and column, so the
 * thread count changes nothing where the kernel runs.
 * Against OpenBLAS's 512-bit kernels on a CPU with two 512-bit FMA units
 * (Intel's Emerald Rapids, 2026-12-05) the kernel's 256-bit vectors lose
 * all these shapes, 0.36-0.62 (85 against 150 GFLOP/s, 52 against 153 at
 * 10001x400x808): with ag__blas_wide() they all go to OpenBLAS (MS-SAN's
 * step 99-118 -> 73-77 ms, MTSA's 164-172 -> 123-135).  On Zen 4, whose
 * OpenBLAS runs the same kernels on 256-bit units, the two were even. */
static bool packed_wins(bool ta, bool tb, int M, int N, int K) {
    if (ta || N < 16 || N > 1024 || K < 16 || K > 2048 || ag__blas_wide()) return false;
    return tb ? M >= 64 : M >= 256 && (M >= 512 || K >= 512);
}

void ag__gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, const ag_real *B,
              ag_real beta, ag_real *C) {
    if (ag__packed_gemm_ok() && packed_wins(ta, tb, M, N, K)) {
        ag_mark_t m = ag_mark(); /* the panels live for this call only: the step's arena does not grow by them */
        ag__packed_b P = ag__pack_b(tb, K, N, B);
        ag__gemm_packed_op(ta, M, A, ta ? M : K, &P, alpha, beta, C, N);
        ag_rewind(m);
        return;
    }
    ag__gemm_blas(ta, tb, M, N, K, alpha, A, B, beta, C);
}

/* The geometry of one batched product, saved for backward. */
typedef struct {
    bool ta, tb;
    int M, N, K;
    int batch;          /* number of products */
    bool a_shared, b_shared; /* a 2-D operand used by every product */
    ag_device device;
} mm_plan;

static ag_tensor *mm_forward(const char *op, ag_tensor *a, bool ta, ag_tensor *b, bool tb, mm_plan *p) {
    ag__need(op, "the second operand", b);
    p->device = ag__check_same_device(op, a, b);
    char sa[64], sb[64];
    if (a->ndim < 2 || b->ndim < 2)
        ag__fatal(op, "operands need at least 2 dims, got %s and %s", ag_shape_str(a, sa, sizeof sa),
                  ag_shape_str(b, sb, sizeof sb));
    int ar = a->shape[a->ndim - 2], ac = a->shape[a->ndim - 1];
    int br = b->shape[b->ndim - 2], bc = b->shape[b->ndim - 1];
    p->ta = ta;
    p->tb = tb;
    p->M = ta ? ac : ar;
    p->K = ta ? ar : ac;
    p->N = tb ? br : bc;
    int kb = tb ? bc : br;
    if (kb != p->K)
        ag__fatal(op, "inner dims differ: %s%s @ %s%s", ag_shape_str(a, sa, sizeof sa), ta ? "^T" : "",
                  ag_shape_str(b, sb, sizeof sb), tb ? "^T" : "");
    p->a_shared = a->ndim == 2 && b->ndim > 2;
    p->b_shared = b->ndim == 2 && a->ndim > 2;
    const ag_tensor *batched = p->a_shared ? b : a;
    if (!p->a_shared && !p->b_shared) {
        bool same = a->ndim == b->ndim;
        for (int i = 0; same && i < a->ndim - 2; i++) same = a->shape[i] == b->shape[i];
        if (!same)
            ag__fatal(op, "batch dims differ: %s and %s", ag_shape_str(a, sa, sizeof sa),
                      ag_shape_str(b, sb, sizeof sb));
    }
    int shape[AG_MAX_DIMS];
    p->batch = 1;
    for (int i = 0; i < batched->ndim - 2; i++) {
        shape[i] = batched->shape[i];
        p->batch *= shape[i];
    }
    shape[batched->ndim - 2] = p->M;
    shape[batched->ndim - 1] = p->N;
    return ag__empty_on(p->device, batched->ndim, shape);
}

/* C_i = op(A_i) op(B_i) for every batch element, beta-accumulated. */
typedef struct {
    const ag_real *A, *B;
    ag_real *C;
    bool ta, tb;
    int64_t sa, sb, sc;
    int M, N, K;
    ag_real beta;
    int64_t batch, per_part;
} batch_job;

/* Small products on which our kernel (ops/gemm_kernel.c, B read in place)
 * beats one OpenBLAS call each, measured by bench/bench_gemm_kernel (64
 * products, GFLOP/s, 1 thread, CPU time): A B^T with a small output
 * (MPSAN's dS h^T, 30x30x300: 49 -> 74; at 64x64x128 and 128x128x64 BLAS
 * wins, 80 -> 66 and 88 -> 50); A B up to 128 on the inner sides (MPSAN's
 * p h, 30x300x30: 72 -> 76; dual-axial's 128x64x128: 86 -> 95); A^T B with
 * a short K (MPSAN's p^T dS, 30x300x30: 72 -> 76; at 128x64x128 a tie).
 * Against 512-bit OpenBLAS kernels these lose alone (109 against 67) but
 * not in a step: the kernel skips the masked parts of attention rows
 * (spans), which BLAS multiplies; sent to OpenBLAS, MPSAN's and MTSA's
 * steps were slower (2026-12-05), so they stay here. */
static bool small_kernel_wins(bool ta, bool tb, int M, int N, int K) {
    if (ta && tb) return false;
    if (tb) return M <= 32 && N <= 32;
    if (ta) return M <= 32 && K <= 32 && N <= 300;
    return M <= 128 && K <= 128 && N <= 300;
}

/* The live block of op(A) [M,K] stored with row stride lda: the rows
 * before its trailing all-zero rows (*m) and the columns before its
 * trailing all-zero columns (*k).  A padded example's attention weights
 * [N,N] are zero past its length both ways (masked queries, masked keys),
 * as is a gradient at its padded positions, so the product needs only that
 * block: the same sums without zero terms.  NaN counts as nonzero. */
AG_SIMD_CLONES static void live_block(const ag_real *A, bool ta, int M, int K, int lda, int *m, int *k) {
    int rows = ta ? K : M, cols = ta ? M : K, last_row = -1, last_col = -1;
    for (int r = 0; r < rows; r++) {
        const ag_real *a = A + (int64_t)r * lda;
        int c = cols - 1;
        while (c >= 0 && !(a[c] != 0)) c--; /* the row's last nonzero */
        if (c < 0) continue;
        last_row = r;
        if (c > last_col) last_col = c;
    }
    *m = (ta ? last_col : last_row) + 1;
    *k = (ta ? last_row : last_col) + 1;
}

/* The same refined per row of op(A): MPSAN's masks leave each query a
 * band of keys (1 <= |k - q| <= 2 or 3) or a triangle (k < q, k > q), so
 * its attention weights p are zero outside a span of k per row and, for
 * p^T in backward's dB = p^T dC, per column.  One pass over A gives every
 * span, and the live block with them.  NaN counts as nonzero. */
AG_SIMD_CLONES void ag__k_spans(const ag_real *A, bool ta, int M, int K, int lda, ag__k_span *spans, int *m, int *k) {
    if (!ta) {
        for (int i = 0; i < M; i++) { /* from both ends of the row to its first and last nonzero */
            const ag_real *a = A + (int64_t)i * lda;
            int hi = K;
            while (hi > 0 && !(a[hi - 1] != 0)) hi--;
            int lo = 0;
            while (lo < hi && !(a[lo] != 0)) lo++;
            spans[i] = (ag__k_span){lo, hi};
        }
    } else { /* op(A)'s rows are A's columns: A's rows in order, each marking the columns it is nonzero in */
        for (int i = 0; i < M; i++) spans[i] = (ag__k_span){K, 0};
        for (int r = 0; r < K; r++) {
            const ag_real *a = A + (int64_t)r * lda;
            for (int i = 0; i < M; i++) {
                bool nz = a[i] != 0;
                spans[i].lo = nz && spans[i].lo == K ? r : spans[i].lo;
                spans[i].hi = nz ? r + 1 : spans[i].hi;
            }
        }
        for (int i = 0; i < M; i++)
            if (spans[i].hi == 0) spans[i].lo = 0;
    }
    *m = *k = 0;
    for (int i = 0; i < M; i++) {
        if (spans[i].hi > spans[i].lo) *m = i + 1;
        if (spans[i].hi > *k) *k = spans[i].hi;
    }
}

static void batch_part(void *ctx, int64_t part) {
    const batch_job *j = ctx;
    int64_t end = (part + 1) * j->per_part < j->batch ? (part + 1) * j->per_part : j->batch;
    int lda = j->ta ? j->M : j->K, ldb = j->tb ? j->K : j->N;
    /* Per-row spans for op(A) B, where the small kernel can use them (f32
     * only: BLAS, and so the f64 build, takes the live block alone).  A
     * B^T's op(A) is a gradient dC: dense, nothing to trim. */
    ag__k_span spans[AG_SPAN_ROWS];
    bool use_spans = !j->tb && j->M <= AG_SPAN_ROWS;
    for (int64_t i = part * j->per_part; i < end; i++) {
        const ag_real *A = j->A + i * j->sa, *B = j->B + i * j->sb;
        ag_real *C = j->C + i * j->sc;
        int M, K;
        if (use_spans) ag__k_spans(A, j->ta, j->M, j->K, lda, spans, &M, &K);
        else live_block(A, j->ta, j->M, j->K, lda, &M, &K);
        if (j->beta == 0) /* rows past the live block: 0 (with beta 1 they stay) */
            memset(C + (int64_t)M * j->N, 0, (size_t)(j->M - M) * j->N * sizeof *C);
        if (M == 0) continue;
        if (!small_kernel_wins(j->ta, j->tb, M, j->N, K) ||
            !ag__gemm_small(j->ta, j->tb, M, j->N, K, 1, A, lda, B, ldb, j->beta, C, j->N, use_spans ? spans : NULL))
            blas_gemm(j->ta, j->tb, M, j->N, K, 1, A, lda, B, ldb, j->beta, C, j->N);
    }
}

static void batched_cpu(const ag__kmm *p) {
    int M = p->M, N = p->N, K = p->K;
    int64_t sa = p->a_shared ? 0 : (int64_t)p->a_rows * p->a_cols;
    int64_t sb = p->b_shared ? 0 : (int64_t)p->b_rows * p->b_cols;
    int64_t sc = p->c_shared ? 0 : (int64_t)M * N;
    /* A shared right operand and an untransposed left one: the whole batch
     * is one tall GEMM, which BLAS runs far better than many small ones. */
    if (p->b_shared && !p->a_shared && !p->c_shared && !p->ta) {
        ag__gemm(false, p->tb, p->batch * M, N, K, 1, p->A, p->B, p->beta, p->C);
        return;
    }
    if (p->c_shared || p->batch == 1) { /* one product, or all adding into one C (in batch order) */
        for (int i = 0; i < p->batch; i++)
            ag__gemm(p->ta, p->tb, M, N, K, 1, p->A + i * sa, p->B + i * sb, i > 0 ? 1 : p->beta, p->C);
        return;
    }
    /* Independent products: groups of ~1 MFLOP on the pool, one BLAS call each. */
    double flops = 2.0 * M * N * K;
    int64_t per_part = flops >= 1e6 ? 1 : (int64_t)(1e6 / (flops > 1 ? flops : 1));
    batch_job j = {p->A, p->B, p->C, p->ta, p->tb, sa, sb, sc, M, N, K, p->beta, p->batch, per_part};
    ag__parallel((p->batch + per_part - 1) / per_part, batch_part, &j);
}

/* One batched product of the plan's geometry on its device. */
static void mm_run(const ag__matmul_kernels *kern, const mm_plan *p, const ag_real *A, bool ta, bool a_shared,
                   int a_rows, int a_cols, const ag_real *B, bool tb, bool b_shared, int b_rows, int b_cols,
                   ag_real *C, bool c_shared, int M, int N, int K, ag_real beta) {
    ag__kmm k = {.A = A, .B = B, .C = C, .a_rows = a_rows, .a_cols = a_cols, .b_rows = b_rows, .b_cols = b_cols,
                .M = M, .N = N, .K = K, .batch = p->batch, .beta = beta, .ta = ta, .tb = tb, .a_shared = a_shared,
                .b_shared = b_shared, .c_shared = c_shared};
    kern->batched(&k);
}

/* ---- rows of a gradient that are all zero ----
 *
 * Padded positions get an all-zero gradient row in every model (they are
 * masked, or ignored by the loss, before anything reads them).  A product
 * whose gradient has such rows - x W in a linear layer, x E^T in the LM's
 * tied decoder - can skip them in both backward GEMMs: pack the other rows
 * of dY and of the input, multiply, add the input-gradient rows back.  The
 * same sums without zero terms (only the GEMMs' blocking, hence the last
 * bits, depends on how many rows are left; never on threads).  NaN counts
 * as nonzero.  Worth it from an eighth of the rows on. */

typedef struct {
    const ag_real *src;
    ag_real *dst;
    const int32_t *idx;
    int width;
    uint8_t *nonzero;
} rows_job;

/* Is any element of the row nonzero (NaN counts)?  Chunks of 16 tested
 * whole (vectorised), stopping at the first chunk with one: a real row
 * answers in its first chunk, only zero rows are read to the end. */
static inline __attribute__((always_inline)) bool row_nonzero(const ag_real *g, int n) {
    enum { CHUNK = 16 };
    int k = 0;
    for (; k + CHUNK <= n; k += CHUNK) {
        bool any = false;
        for (int l = 0; l < CHUNK; l++) any |= g[k + l] != 0;
        if (any) return true;
    }
    for (; k < n; k++)
        if (g[k] != 0) return true;
    return false;
}

AG_SIMD_CLONES static void scan_nonzero_rows(void *ctx, int64_t r0, int64_t r1) {
    const rows_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) j->nonzero[r] = row_nonzero(j->src + r * j->width, j->width);
}

/* Skipping zero rows pays when the rows feed real GEMMs: with a side under
 * 16 a product is a memory-bound sweep, and packing rows costs more than
 * the products it saves (MPSAN's score vectors h.u). */
static bool worth_packing(int rows, int in, int out) { return rows >= 64 && in >= 16 && out >= 16; }

/* The indices of the rows of G [rows, width] that are not all zero (their
 * count in *kept), or NULL when fewer than an eighth of the rows are zero. */
static int32_t *nonzero_rows(const ag_real *G, int rows, int width, int *kept) {
    if (rows < 64 || width <= 0) return NULL;
    rows_job j = {.src = G, .width = width, .nonzero = ag__arena_alloc((size_t)rows)};
    ag__parallel_range(rows, ag__units_per_part(width), scan_nonzero_rows, &j);
    int32_t *idx = ag__arena_alloc((size_t)rows * sizeof *idx);
    int k = 0;
    for (int r = 0; r < rows; r++)
        if (j.nonzero[r]) idx[k++] = r;
    *kept = k;
    return k > rows - rows / 8 ? NULL : idx;
}

static void gather_rows_range(void *ctx, int64_t i0, int64_t i1) {
    const rows_job *j = ctx;
    for (int64_t i = i0; i < i1; i++)
        memcpy(j->dst + i * j->width, j->src + (int64_t)j->idx[i] * j->width, (size_t)j->width * sizeof(ag_real));
}

AG_SIMD_CLONES static void scatter_add_rows_range(void *ctx, int64_t i0, int64_t i1) {
    const rows_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        ag_real *d = j->dst + (int64_t)j->idx[i] * j->width;
        const ag_real *s = j->src + i * j->width;
        for (int k = 0; k < j->width; k++) d[k] += s[k];
    }
}

ag_real *ag__gather_rows(const ag_real *src, int width, const int32_t *idx, int kept) {
    rows_job j = {.src = src, .dst = ag__arena_alloc((size_t)(kept ? kept : 1) * width * sizeof(ag_real)),
                  .idx = idx, .width = width};
    ag__parallel_range(kept, ag__units_per_part(width), gather_rows_range, &j);
    return j.dst;
}

static void scatter_add_rows(ag_real *dst, const ag_real *src, int width, const int32_t *idx, int kept) {
    rows_job j = {.src = src, .dst = dst, .idx = idx, .width = width};
    ag__parallel_range(kept, ag__units_per_part(width), scatter_add_rows_range, &j);
}

/* A shared right operand with an untransposed left one (x [.., K] op(B)):
 * the batch is one tall product of rows = batch * M rows; both gradients
 * on the nonzero rows of dY only.  False (nothing done) when too few rows
 * are zero. */
static bool tall_backward_packed(bool tb, int rows, int K, int N, const ag_real *G, const ag_real *A,
                                 const ag_real *B, ag_real *dA, ag_real *dB) {
    if (!worth_packing(rows, K, N)) return false;
    int kept;
    int32_t *idx = nonzero_rows(G, rows, N, &kept);
    if (!idx) return false;
    if (kept == 0) return true; /* nothing reaches either operand */
    ag_real *Gc = ag__gather_rows(G, N, idx, kept);
    if (dA) { /* dA rows = dY rows op(B)^T */
        ag_real *dAc = ag__arena_zalloc((size_t)kept * K * sizeof(ag_real));
        ag__gemm(false, !tb, kept, K, N, 1, Gc, B, 1, dAc);
        scatter_add_rows(dA, dAc, K, idx, kept);
    }
    if (dB) {
        ag_real *Ac = ag__gather_rows(A, K, idx, kept);
        if (!tb) ag__gemm(true, false, K, N, kept, 1, Ac, Gc, 1, dB); /* dB = A^T dY */
        else ag__gemm(true, false, N, K, kept, 1, Gc, Ac, 1, dB);     /* dB = dY^T A */
    }
    return true;
}

static void tall_backward_cpu(bool tb, int rows, int K, int N, const ag_real *G, const ag_real *A, const ag_real *B,
                              ag_real *dA, ag_real *dB) {
    if (tall_backward_packed(tb, rows, K, N, G, A, B, dA, dB)) return;
    /* the sums over the batch in one GEMM each: dB = A_flat^T G_flat (G_flat^T A_flat when tb) */
    if (dA) ag__gemm(false, !tb, rows, K, N, 1, G, B, 1, dA);
    if (dB && !tb) ag__gemm(true, false, K, N, rows, 1, A, G, 1, dB);
    if (dB && tb) ag__gemm(true, false, N, K, rows, 1, G, A, 1, dB);
}

static void matmul_backward(ag_node *n) {
    const mm_plan *p = n->saved;
    const ag__matmul_kernels *kern = ag__matmul_on(n->op, p->device);
    ag_tensor *a = n->in[0], *b = n->in[1];
    const ag_real *G = n->out->grad;
    int M = p->M, N = p->N, K = p->K;
    if (p->b_shared && !p->ta) { /* one tall product of batch * M rows */
        ag_real *GA = ag__wants(n, 0) ? ag__grad(a) : NULL;
        ag_real *GB = ag__wants(n, 1) ? ag__grad(b) : NULL;
        kern->tall_backward(p->tb, p->batch * M, K, N, G, a->data, b->data, GA, GB);
        return;
    }
    int arows = p->ta ? K : M, acols = p->ta ? M : K;
    int brows = p->tb ? N : K, bcols = p->tb ? K : N;
    /* A gradient the products write whole: stored (beta 0) where the input
     * had none yet, which saves zeroing it first (a fill launch on a GPU)
     * and reading the zeros back; added (beta 1) where it had one. */
    bool fresh;
    if (ag__wants(n, 0)) { /* dA = G op(B)^T, or its transpose when A was transposed */
        ag_real *GA = ag__grad_write(a, &fresh);
        if (!p->ta)
            mm_run(kern, p, G, false, false, M, N, b->data, !p->tb, p->b_shared, brows, bcols, GA, p->a_shared, M, K,
                   N, fresh ? 0 : 1);
        else
            mm_run(kern, p, b->data, p->tb, p->b_shared, brows, bcols, G, true, false, M, N, GA, p->a_shared, K, M,
                   N, fresh ? 0 : 1);
    }
    if (ag__wants(n, 1)) { /* dB = op(A)^T G, or its transpose when B was transposed */
        ag_real *GB = ag__grad_write(b, &fresh);
        if (!p->tb)
            mm_run(kern, p, a->data, !p->ta, p->a_shared, arows, acols, G, false, false, M, N, GB, p->b_shared, K, N,
                   M, fresh ? 0 : 1);
        else
            mm_run(kern, p, G, true, false, M, N, a->data, p->ta, p->a_shared, arows, acols, GB, p->b_shared, N, K,
                   M, fresh ? 0 : 1);
    }
}

ag_tensor *ag_matmul_t(ag_tensor *a, bool trans_a, ag_tensor *b, bool trans_b) {
    mm_plan p;
    ag_tensor *out = mm_forward("ag_matmul", a, trans_a, b, trans_b, &p);
    int arows = p.ta ? p.K : p.M, acols = p.ta ? p.M : p.K;
    int brows = p.tb ? p.N : p.K, bcols = p.tb ? p.K : p.N;
    mm_run(ag__matmul_on("ag_matmul", p.device), &p, a->data, p.ta, p.a_shared, arows, acols, b->data, p.tb,
           p.b_shared, brows, bcols, out->data, false, p.M, p.N, p.K, 0);
    ag_node *n = ag__record("ag_matmul", matmul_backward, out, 2, (ag_tensor *[]){a, b});
    if (n) {
        mm_plan *s = ag__arena_alloc(sizeof *s);
        *s = p;
        n->saved = s;
    }
    return out;
}

ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b) { return ag_matmul_t(a, false, b, false); }

/* ---- linear: y = act(x W + bias), with x of any rank ----
 *
 * The activation (ag_dense) rides on passes the linear makes anyway:
 * forward applies it where the bias is added, backward multiplies dY by
 * its derivative - a function of the output y - where it scans dY. */

/* y = act(y) over a row; the derivative from the output: relu y > 0, elu
 * y + 1 below 0 (elu keeps the sign), tanh 1 - y^2, sigmoid y (1 - y). */
static inline void act_row(ag_act act, ag_real *y, int n) {
    switch (act) {
    case AG_ACT_RELU: for (int k = 0; k < n; k++) y[k] = y[k] > 0 ? y[k] : 0; break;
    case AG_ACT_ELU: for (int k = 0; k < n; k++) y[k] = y[k] > 0 ? y[k] : ag__vexpm1(y[k]); break;
    case AG_ACT_TANH: for (int k = 0; k < n; k++) y[k] = ag__vtanh(y[k]); break;
    case AG_ACT_SIGMOID: for (int k = 0; k < n; k++) y[k] = ag__vsigmoid(y[k]); break;
    case AG_ACT_NONE: break;
    case AG_ACT_GELU: case AG_ACT_SILU: break; /* never fused: ag_dense applies them after the linear */
    }
}

/* g = dy * act'(z) written from dy and the output y. */
static inline void act_grad_row(ag_act act, const ag_real *dy, const ag_real *y, ag_real *g, int n) {
    switch (act) {
    case AG_ACT_RELU: for (int k = 0; k < n; k++) g[k] = y[k] > 0 ? dy[k] : 0; break;
    case AG_ACT_ELU: for (int k = 0; k < n; k++) g[k] = y[k] > 0 ? dy[k] : dy[k] * (y[k] + 1); break;
    case AG_ACT_TANH: for (int k = 0; k < n; k++) g[k] = dy[k] * (1 - y[k] * y[k]); break;
    case AG_ACT_SIGMOID: for (int k = 0; k < n; k++) g[k] = dy[k] * (y[k] * (1 - y[k])); break;
    case AG_ACT_NONE: case AG_ACT_GELU: case AG_ACT_SILU: memcpy(g, dy, (size_t)n * sizeof *g); break;
    }
}

/* Rows that are all zero - the padded positions of a batch - are skipped:
 *  - forward: a zero row of x gives y = bias whatever W is;
 *  - backward: a zero row of dY adds nothing to dX or dW.
 * When at least an eighth of the rows are zero, the others are packed and
 * only they go through the GEMMs: exactly the same sums without the zero
 * terms (only the blocking, hence the last bits, depends on how many rows
 * are left; never on threads).  Forward keeps its packed x for backward,
 * which reuses it when dY's zero rows are x's (the usual case: padding).
 * NaN rows count as nonzero.
 *
 * One pass over dY finds its zero rows and sums the bias gradient: blocks
 * of BIAS_BLOCK rows, each summed in row order into its own partial row,
 * the partials then added in block order (fixed by the shape). */
enum { BIAS_BLOCK = 64 };

/* The packed rows of one side: idx[i] is the row of packed row i, pos[r]
 * the packed row of row r or -1 (ops/matmul.h: forward's, kept for
 * backward). */
typedef ag__krow_pack row_pack;

/* Packs the rows marked nonzero, or returns false (pack untouched) when
 * fewer than an eighth of them are zero. */
static bool pack_of(const uint8_t *nonzero, int rows, row_pack *pk) {
    int kept = 0;
    for (int r = 0; r < rows; r++) kept += nonzero[r];
    if (kept > rows - rows / 8) return false;
    pk->idx = ag__arena_alloc((size_t)(kept ? kept : 1) * sizeof *pk->idx);
    pk->pos = ag__arena_alloc((size_t)rows * sizeof *pk->pos);
    pk->kept = 0;
    for (int r = 0; r < rows; r++) {
        pk->pos[r] = nonzero[r] ? pk->kept : -1;
        if (nonzero[r]) pk->idx[pk->kept++] = r;
    }
    return true;
}

typedef struct {
    const ag_real *G, *X, *bias;
    const ag_real *dY, *Yout; /* backward with an activation: G = dY act'(.) from the output */
    ag_real *Y, *Gc, *Xc, *Yc, *dXc, *gb, *Gact;
    ag_act act;
    ag_real *partial;     /* [blocks, out]: the column sums of each block of rows */
    int64_t rows, blocks;
    int in, out;
    row_pack pk;
    uint8_t *nonzero;     /* per row, or NULL: not looked for */
    bool fresh;           /* dX is a new buffer: store, and 0 on the zero rows */
    bool act_packed;      /* the scan writes dY act'(y) straight into Gc's rows */
} linear_job;

/* Forward keeps these for backward (arena). */
typedef struct {
    bool tw;              /* W stored [out, in] (ag_linear_t) */
    ag_act act;           /* ag_dense's activation, applied to the output */
    int groups, rows;     /* ag__klinear's: layers (W [G, in, out]), and the rows of one */
    row_pack pk;          /* x's packed rows, or kept = -1: not packed */
    const ag_real *Xc;
    const ag__kgroup_pack *group_packs; /* the same per group, when grouped */
} linear_saved;

AG_SIMD_CLONES static void scan_block(void *ctx, int64_t block) {
    const linear_job *j = ctx;
    int64_t r0 = block * BIAS_BLOCK, r1 = r0 + BIAS_BLOCK < j->rows ? r0 + BIAS_BLOCK : j->rows;
    ag_real *sum = j->partial ? j->partial + block * j->out : NULL;
    if (sum)
        for (int k = 0; k < j->out; k++) sum[k] = 0;
    for (int64_t r = r0; r < r1; r++) {
        const ag_real *g = j->G + r * j->out;
        if (j->dY) { /* G = dY act'(y), into the packed rows when they are known */
            if (j->act_packed && j->pk.pos[r] < 0) continue; /* a zero row of dY adds nothing */
            ag_real *gr = j->act_packed ? j->Gc + (int64_t)j->pk.pos[r] * j->out : j->Gact + r * j->out;
            act_grad_row(j->act, j->dY + r * j->out, j->Yout + r * j->out, gr, j->out);
            g = gr;
        }
        if (j->nonzero) j->nonzero[r] = row_nonzero(g, j->out);
        if (sum)
            for (int k = 0; k < j->out; k++) sum[k] += g[k];
    }
}

/* gb += the partial sums, in block order, over a range of columns. */
AG_SIMD_CLONES static void add_partials(void *ctx, int64_t k0, int64_t k1) {
    const linear_job *j = ctx;
    for (int64_t b = 0; b < j->blocks; b++) {
        const ag_real *p = j->partial + b * j->out;
        for (int64_t k = k0; k < k1; k++) j->gb[k] += p[k];
    }
}

static void pack_rows(void *ctx, int64_t i0, int64_t i1) {
    const linear_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) {
        int64_t r = j->pk.idx[i];
        if (j->Gc && !j->act_packed) memcpy(j->Gc + i * j->out, j->G + r * j->out, (size_t)j->out * sizeof(ag_real));
        if (j->Xc) memcpy(j->Xc + i * j->in, j->X + r * j->in, (size_t)j->in * sizeof(ag_real));
    }
}

/* The rows of a packed product put back: row r of dst [rows, width] gets
 * packed row pos[r] of src (pos -1: a zero row), stored into a fresh
 * buffer (0 on the zero rows) or added. */
typedef struct {
    ag_real *dst;
    const ag_real *src;
    const int32_t *pos;
    int width;
    bool fresh;
} unpack_job;

AG_SIMD_CLONES static void unpack_rows_range(void *ctx, int64_t r0, int64_t r1) {
    const unpack_job *j = ctx;
    int w = j->width;
    for (int64_t r = r0; r < r1; r++) {
        ag_real *d = j->dst + r * w;
        const ag_real *s = j->pos[r] >= 0 ? j->src + (int64_t)j->pos[r] * w : NULL;
        if (j->fresh && s) memcpy(d, s, (size_t)w * sizeof *d);
        else if (j->fresh) memset(d, 0, (size_t)w * sizeof *d);
        else if (s)
            for (int k = 0; k < w; k++) d[k] += s[k];
    }
}

void ag__unpack_rows(ag_real *dst, const ag_real *src, int width, const int32_t *pos, int64_t rows, bool fresh) {
    unpack_job j = {dst, src, pos, width, fresh};
    ag__parallel_range(rows, ag__units_per_part(width), unpack_rows_range, &j);
}

/* y rows from the packed product: Yc + bias, or bias (0) on the zero rows. */
AG_SIMD_CLONES static void unpack_y_rows(void *ctx, int64_t r0, int64_t r1) {
    const linear_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) {
        ag_real *y = j->Y + r * j->out;
        int32_t i = j->pk.pos[r];
        const ag_real *src = i >= 0 ? j->Yc + (int64_t)i * j->out : NULL;
        if (src && j->bias)
            for (int k = 0; k < j->out; k++) y[k] = src[k] + j->bias[k];
        else if (src) memcpy(y, src, (size_t)j->out * sizeof(ag_real));
        else if (j->bias) memcpy(y, j->bias, (size_t)j->out * sizeof(ag_real));
        else memset(y, 0, (size_t)j->out * sizeof(ag_real));
        act_row(j->act, y, j->out);
    }
}

/* dX = dY W^T and dW = X^T dY; with W stored transposed ([out, in],
 * ag_linear_t) dX = dY W and dW = dY^T X.  dx_beta 0 stores dX. */
static void linear_products(bool tw, int rows, int in, int out, const ag_real *G, const ag_real *X, const ag_real *W,
                            ag_real *dX, ag_real dx_beta, ag_real *dW) {
    if (dX) ag__gemm(false, !tw, rows, in, out, 1, G, W, dx_beta, dX);
    if (dW && !tw) ag__gemm(true, false, in, out, rows, 1, X, G, 1, dW);
    if (dW && tw) ag__gemm(true, false, out, in, rows, 1, G, X, 1, dW);
}

static bool same_pack(const row_pack *a, const row_pack *b) {
    return a->kept == b->kept && !memcmp(a->idx, b->idx, (size_t)a->kept * sizeof *a->idx);
}

static void linear_backward_layer(const ag__klinear *kl) {
    bool tw = kl->tw;
    int in = kl->in, out = kl->out, rows = kl->rows;
    bool want_x = kl->dx, want_w = kl->dw, want_b = kl->db;
    linear_job j = {.G = kl->dy, .X = kl->x, .rows = rows, .blocks = (rows + BIAS_BLOCK - 1) / BIAS_BLOCK, .in = in,
                    .out = out, .act = (ag_act)kl->act, .fresh = kl->fresh_x};
    bool look = worth_packing(rows, in, out) && (want_x || want_w), packed = false;
    if (j.act != AG_ACT_NONE) { /* dY through the activation, in the scan */
        j.dY = kl->dy;
        j.Yout = kl->y;
        /* A zero row of dY is one of G = dY act'(y): found first, the rows
         * are packed before the scan, which then writes G's rows straight
         * into the packed buffer (no [rows, out] G to write and copy). */
        if (look) {
            rows_job zs = {.src = j.dY, .width = out, .nonzero = ag__arena_alloc((size_t)rows)};
            ag__parallel_range(rows, ag__units_per_part(out), scan_nonzero_rows, &zs);
            packed = j.act_packed = pack_of(zs.nonzero, rows, &j.pk);
            look = false;
        }
        if (packed) j.Gc = ag__arena_alloc((size_t)(j.pk.kept ? j.pk.kept : 1) * out * sizeof(ag_real));
        else j.G = j.Gact = ag__arena_alloc((size_t)((int64_t)rows * out + 1) * sizeof(ag_real));
    }
    if (look) j.nonzero = ag__arena_alloc((size_t)rows);
    if (want_b) j.partial = ag__arena_alloc((size_t)(j.blocks * out > 0 ? j.blocks * out : 1) * sizeof(ag_real));
    if (look || want_b || j.dY) ag__parallel(j.blocks, scan_block, &j);
    if (want_b) {
        j.gb = kl->db;
        ag__parallel_range(out, 256, add_partials, &j);
    }
    ag_real *dX = kl->dx;
    if (look) packed = pack_of(j.nonzero, rows, &j.pk);
    if (!packed) { /* (almost) no zero rows: the plain products */
        linear_products(tw, rows, in, out, j.G, kl->x, kl->w, dX, j.fresh ? 0 : 1, kl->dw);
        return;
    }
    int kept = j.pk.kept;
    bool reuse_x = want_w && kl->pack.kept >= 0 && same_pack(&kl->pack, &j.pk);
    if (!j.act_packed) j.Gc = ag__arena_alloc((size_t)(kept ? kept : 1) * out * sizeof(ag_real));
    j.Xc = want_w && !reuse_x ? ag__arena_alloc((size_t)(kept ? kept : 1) * in * sizeof(ag_real)) : NULL;
    ag__parallel_range(kept, ag__units_per_part(in + out), pack_rows, &j);
    if (want_x) j.dXc = ag__arena_alloc((size_t)(kept ? kept : 1) * in * sizeof(ag_real));
    linear_products(tw, kept, in, out, j.Gc, reuse_x ? kl->xc : j.Xc, kl->w, j.dXc, 0, kl->dw);
    if (want_x) ag__unpack_rows(dX, j.dXc, in, j.pk.pos, rows, j.fresh);
}

/* y = x op(W) + bias on the rows of x that are not all zero, kept in
 * kl->pack and kl->xc for backward; false (nothing done) when fewer than
 * an eighth of them are zero. */
static bool linear_packed(ag__klinear *kl) {
    int rows = kl->rows, in = kl->in, out_dim = kl->out;
    if (!worth_packing(rows, in, out_dim)) return false;
    rows_job scan = {.src = kl->x, .width = in, .nonzero = ag__arena_alloc((size_t)rows)};
    ag__parallel_range(rows, ag__units_per_part(in), scan_nonzero_rows, &scan);
    linear_job j = {.X = kl->x, .bias = kl->bias, .Y = kl->y, .in = in, .out = out_dim, .act = (ag_act)kl->act};
    if (!pack_of(scan.nonzero, rows, &j.pk)) return false;
    int kept = j.pk.kept;
    j.Xc = ag__arena_alloc((size_t)(kept ? kept : 1) * in * sizeof(ag_real));
    j.Yc = ag__arena_alloc((size_t)(kept ? kept : 1) * out_dim * sizeof(ag_real));
    ag__parallel_range(kept, ag__units_per_part(in), pack_rows, &j);
    ag__gemm(false, kl->tw, kept, out_dim, in, 1, j.Xc, kl->w, 0, j.Yc);
    ag__parallel_range(rows, ag__units_per_part(out_dim), unpack_y_rows, &j);
    kl->pack = j.pk;
    kl->xc = j.Xc;
    return true;
}

/* Unpacked forward: the activation in place, by ranges of rows. */
typedef struct {
    ag_real *Y;
    int out;
    ag_act act;
} act_job;

AG_SIMD_CLONES static void act_rows(void *ctx, int64_t r0, int64_t r1) {
    const act_job *j = ctx;
    for (int64_t r = r0; r < r1; r++) act_row(j->act, j->Y + r * j->out, j->out);
}

typedef struct {
    const ag_real *bias;
    ag_real *y;
    int cols;
} bias_job;

static void bias_rows_range(void *ctx, int64_t r0, int64_t r1) {
    const bias_job *j = ctx;
    for (int64_t r = r0; r < r1; r++)
        if (j->bias) memcpy(j->y + r * j->cols, j->bias, (size_t)j->cols * sizeof(ag_real));
        else memset(j->y + r * j->cols, 0, (size_t)j->cols * sizeof(ag_real));
}

/* y's rows = bias (or 0), on the pool: the product after it runs there. */
static void bias_rows_cpu(const ag_real *bias, ag_real *y, int64_t rows, int cols) {
    bias_job j = {bias, y, cols};
    ag__parallel_range(rows, ag__units_per_part(cols), bias_rows_range, &j);
}

static void linear_forward_layer(ag__klinear *kl) {
    if (linear_packed(kl)) return;
    if (kl->bias) bias_rows_cpu(kl->bias, kl->y, kl->rows, kl->out);
    ag__gemm(false, kl->tw, kl->rows, kl->out, kl->in, 1, kl->x, kl->w, kl->bias ? 1 : 0, kl->y);
    if (kl->act != AG_ACT_NONE) {
        act_job aj = {kl->y, kl->out, (ag_act)kl->act};
        ag__parallel_range(kl->rows, ag__units_per_part(kl->out), act_rows, &aj);
    }
}

/* ---- grouped layers (W [G, in, out]): one layer after another ----
 * Each group runs the one-layer kernels above on its own planes, so its
 * values and gradients are those of a layer of its own to the bit (its
 * rows packed or not by themselves, its bias summed in its own blocks).
 * The planes are disjoint, so dX's fresh flag holds for each. */

#define GROUP_AT(p, off) ((p) ? (p) + (off) : (p)) /* an absent array stays NULL */

/* Group g of kl as a layer of its own, with forward's pack when kept. */
static ag__klinear group_layer(const ag__klinear *kl, int g) {
    int64_t xs = (int64_t)g * kl->rows * kl->in, ys = (int64_t)g * kl->rows * kl->out;
    int64_t ws = (int64_t)g * kl->in * kl->out, bs = (int64_t)g * kl->out;
    ag__klinear j = *kl;
    j.groups = 1;
    j.x = GROUP_AT(kl->x, xs), j.dx = GROUP_AT(kl->dx, xs);
    j.y = GROUP_AT(kl->y, ys), j.dy = GROUP_AT(kl->dy, ys);
    j.w = GROUP_AT(kl->w, ws), j.dw = GROUP_AT(kl->dw, ws);
    j.bias = GROUP_AT(kl->bias, bs), j.db = GROUP_AT(kl->db, bs);
    j.pack = kl->group_packs ? kl->group_packs[g].pack : (row_pack){.kept = -1};
    j.xc = kl->group_packs ? kl->group_packs[g].xc : NULL;
    j.group_packs = NULL;
    return j;
}

static void linear_forward_cpu(ag__klinear *kl) {
    int groups = ag__klinear_groups(kl);
    if (groups == 1) {
        linear_forward_layer(kl);
        return;
    }
    ag__kgroup_pack *packs = ag__arena_alloc((size_t)groups * sizeof *packs);
    kl->group_packs = NULL; /* none yet: each group packs its own rows */
    for (int g = 0; g < groups; g++) {
        ag__klinear j = group_layer(kl, g);
        linear_forward_layer(&j);
        packs[g] = (ag__kgroup_pack){j.pack, j.xc};
    }
    kl->group_packs = packs;
}

static void linear_backward_cpu(const ag__klinear *kl) {
    int groups = ag__klinear_groups(kl);
    if (groups == 1) {
        linear_backward_layer(kl);
        return;
    }
    for (int g = 0; g < groups; g++) {
        ag__klinear j = group_layer(kl, g);
        linear_backward_layer(&j);
    }
}

/* The bias gradient's column sums of ops/matmul.h, as the GPU adds them
 * (the linear layer's own backward fuses them into its scan). */
static void col_sums_cpu(const ag_real *x, int64_t rows, int cols, const ag_real *scale, ag_real *partial,
                         ag_real *out) {
    int64_t blocks = ag__col_blocks(rows);
    for (int64_t b = 0; b < blocks; b++) {
        ag_real *p = partial + b * cols;
        int64_t r1 = (b + 1) * AG_KCOL_ROWS < rows ? (b + 1) * AG_KCOL_ROWS : rows;
        for (int k = 0; k < cols; k++) p[k] = 0;
        for (int64_t r = b * AG_KCOL_ROWS; r < r1; r++)
            for (int k = 0; k < cols; k++) p[k] += x[r * cols + k];
    }
    for (int k = 0; k < cols; k++) {
        ag_real acc = scale ? 0 : out[k];
        for (int64_t b = 0; b < blocks; b++) acc += partial[b * cols + k];
        out[k] = scale ? out[k] + *scale * acc : acc;
    }
}

/* n->saved: the linear_saved. */
static void linear_backward(ag_node *n) {
    ag_tensor *x = n->in[0], *w = n->in[1], *bias = n->in[2];
    const linear_saved *sv = n->saved;
    int lead = w->ndim - 2; /* 1: grouped, W [G, in, out] */
    int in = w->shape[lead + sv->tw], out = w->shape[lead + !sv->tw];
    ag__klinear j = {.x = x->data, .w = w->data, .y = n->out->data, .dy = n->out->grad, .rows = sv->rows, .in = in,
                    .out = out, .act = (int)sv->act, .groups = sv->groups, .tw = sv->tw, .pack = sv->pk, .xc = sv->Xc,
                    .group_packs = sv->group_packs};
    j.db = bias && ag__wants(n, 2) ? ag__grad(bias) : NULL;
    j.dx = ag__wants(n, 0) ? ag__grad_write(x, &j.fresh_x) : NULL;
    j.dw = ag__wants(n, 1) ? ag__grad(w) : NULL;
    ag__matmul_on(n->op, x->device)->linear_backward(&j);
}

/* x [..., in] and W [in, out] ([out, in] when tw), or G layers: x [G, ...,
 * in] and W [G, in, out]; bias [out], [G, out] for G layers.  Fatal, naming
 * op and the shapes, where they do not fit. */
static void linear_check(const char *op, const ag_tensor *x, const ag_tensor *w, bool tw, const ag_tensor *bias) {
    char sx[64], sw[64], sb[64];
    bool grouped = w->ndim == 3;
    int lead = grouped; /* W's dims before [in, out] */
    bool x_fits = (w->ndim == 2 || (grouped && x->ndim >= 2 && x->shape[0] == w->shape[0])) && x->ndim >= 1 &&
                  x->shape[x->ndim - 1] == w->shape[lead + tw];
    if (!x_fits) {
        const char *io = tw ? "out, in" : "in, out";
        ag__fatal(op, "x %s does not fit weight %s (want x[..., in], W[%s] or W[G, %s] with x[G, ..., in])",
                  ag_shape_str(x, sx, sizeof sx), ag_shape_str(w, sw, sizeof sw), io, io);
    }
    int out = w->shape[lead + !tw];
    bool bias_fits = !bias || (grouped ? bias->ndim == 2 && bias->shape[0] == w->shape[0] && bias->shape[1] == out
                                       : bias->ndim == 1 && bias->shape[0] == out);
    if (!bias_fits)
        ag__fatal(op, "bias %s does not fit weight %s (want [%s])", ag_shape_str(bias, sb, sizeof sb),
                  ag_shape_str(w, sw, sizeof sw), grouped ? "G, out" : "out");
}

static ag_tensor *linear(const char *op, ag_tensor *x, ag_tensor *w, bool tw, ag_tensor *bias, ag_act act) {
    ag__need(op, "the weight", w);
    ag_device dev = ag__check_same_device(op, x, w);
    if (bias) ag__check_same_device(op, x, bias); /* alive before its shape is read */
    linear_check(op, x, w, tw, bias);
    if (act < AG_ACT_NONE || act > AG_ACT_SIGMOID) ag__fatal(op, "unknown activation %d", (int)act);
    int lead = w->ndim - 2, groups = lead ? w->shape[0] : 1;
    int in = w->shape[lead + tw], out_dim = w->shape[lead + !tw];
    int64_t rows = 1; /* of one group: x's dims between G and in */
    for (int d = lead; d < x->ndim - 1; d++) rows *= x->shape[d];
    if (groups == 0) rows = 0; /* no layer: nothing to read or write */
    int shape[AG_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    shape[x->ndim - 1] = out_dim;
    ag_tensor *out = ag__empty_on(dev, x->ndim, shape);
    ag__klinear j = {.x = x->data, .w = w->data, .bias = bias ? bias->data : NULL, .y = out->data, .rows = (int)rows,
                    .in = in, .out = out_dim, .act = (int)act, .groups = groups, .tw = tw, .pack = {.kept = -1}};
    ag__matmul_on(op, dev)->linear_forward(&j);
    ag_node *n = ag__record(op, linear_backward, out, 3, (ag_tensor *[]){x, w, bias});
    if (n) {
        linear_saved *keep = ag__arena_alloc(sizeof *keep);
        *keep = (linear_saved){.tw = tw, .act = act, .groups = groups, .rows = (int)rows, .pk = j.pack, .Xc = j.xc,
                               .group_packs = j.group_packs};
        n->saved = keep;
    }
    return out;
}

ag_tensor *ag_linear(ag_tensor *x, ag_tensor *w, ag_tensor *bias) {
    return linear("ag_linear", x, w, false, bias, AG_ACT_NONE);
}

ag_tensor *ag_linear_t(ag_tensor *x, ag_tensor *w, ag_tensor *bias) {
    return linear("ag_linear_t", x, w, true, bias, AG_ACT_NONE);
}

ag_tensor *ag_dense(ag_tensor *x, ag_tensor *w, ag_tensor *b, ag_act act) {
    if (act == AG_ACT_GELU) return ag_gelu(linear("ag_dense", x, w, false, b, AG_ACT_NONE));
    if (act == AG_ACT_SILU) return ag_silu(linear("ag_dense", x, w, false, b, AG_ACT_NONE));
    return linear("ag_dense", x, w, false, b, act);
}

/* ---- the CPU's table (ops/matmul.h; CUDA's is in ops/cuda/matmul.c) ---- */

_Static_assert((int)AG_KCOL_ROWS == (int)BIAS_BLOCK, "the GPU's bias gradient sums the CPU's blocks of rows");
_Static_assert(AG_KACT_NONE == (int)AG_ACT_NONE && AG_KACT_RELU == (int)AG_ACT_RELU &&
                   AG_KACT_ELU == (int)AG_ACT_ELU && AG_KACT_TANH == (int)AG_ACT_TANH &&
                   AG_KACT_SIGMOID == (int)AG_ACT_SIGMOID,
               "ops/matmul.h's AG_KACT_ follow ag_act");

static const ag__matmul_kernels matmul_cpu = {
    .batched = batched_cpu,
    .tall_backward = tall_backward_cpu,
    .linear_forward = linear_forward_cpu,
    .linear_backward = linear_backward_cpu,
    .bias_rows = bias_rows_cpu,
    .col_sums = col_sums_cpu,
};
AG_DISPATCH(matmul, matmul_cpu)
