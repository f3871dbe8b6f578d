/* internal.h - what ops and the engine share, and users never see.
 *
 * An op is written as a forward function that computes its output and, when
 * gradients are wanted, records a node on the tape with ag__record(); its
 * backward function sits right next to it in the same file and reads the
 * node: n->out->grad is dL/d(out), and it accumulates into ag__grad(input). */
#ifndef AG_INTERNAL_H
#define AG_INTERNAL_H

#define AG_INTERNAL
#include "attngrad.h"

#include <stdarg.h>
#include <string.h>
#include <tgmath.h> /* exp/log/... follow ag_real: float or double */

#define AG_MAX_INPUTS 8

/* Hot loops are compiled twice, for baseline x86-64 (SSE2) and x86-64-v3
 * (AVX2), and the CPU picks one at load time.  -std=c11 implies
 * -ffp-contract=off (no FMA contraction), so both give bit-identical results.
 * Not under ThreadSanitizer: its instrumented resolver runs before its
 * runtime has started, and the program dies while loading. */
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_THREAD__)
#define AG_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define AG_SIMD_CLONES
#endif

typedef void (*ag__backward_fn)(ag_node *n);

struct ag_node {
    const char *op;             /* name, for messages */
    ag__backward_fn backward;
    ag_tensor *out;
    ag_tensor *in[AG_MAX_INPUTS];
    int n_in;
    int index;                  /* position on the tape */
    const char *file;           /* the caller's site (AG_AT), for the profiler */
    int line;
    void *saved;                /* op-specific state, from the arena */
    int iarg[8];
    double farg[4];
    bool spent;                 /* swept by a backward that did not retain the tape */
    uint32_t reach;             /* the last backward whose gradient could reach it (tape.c) */
};

/* ---- memory ---- */
void *ag__malloc(size_t bytes);          /* counted; aborts on failure */
void *ag__calloc(size_t n, size_t size);
void *ag__try_calloc(size_t n, size_t size); /* counted; NULL on failure */
void *ag__realloc(void *p, size_t bytes);
void ag__free(void *p);
char *ag__strdup(const char *s);
void *ag__arena_alloc(size_t bytes);     /* 64-byte aligned, uninitialised */
void *ag__arena_zalloc(size_t bytes);
/* The arena's position, and a return to it: what was taken after the mark
 * is free again (an op's scratch that must not outlive the op; ag_mark's
 * arena half, without the tape). */
void ag__arena_mark(size_t *pos, int *chunk_index);
void ag__arena_rewind(size_t pos, int chunk_index);
void ag__zero(void *p, size_t bytes);   /* memset 0, on the pool when large */
void ag__zero_many(void *const *p, const int64_t *bytes, int count); /* count arrays in one pass */

/* An uninitialised step tensor (the usual op output). */
ag_tensor *ag__empty(int ndim, const int *shape);
/* A step tensor over memory that is not its own (stored probabilities
 * handed out for heatmaps, an alias): no node, no gradient, made by op. */
ag_tensor *ag__view_of(ag_real *data, ag_device dev, int ndim, const int *shape, const char *op);

/* Records `out` as produced by op from inputs, if any input needs a
 * gradient and grad mode is on; returns the node (NULL when nothing was
 * recorded, in which case the op must not save anything).  Call it after
 * computing the output: the profiler takes it as the end of the op. */
ag_node *ag__record(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in,
                    ag_tensor *const *in);
/* The same whenever grad mode is on, whether or not an input needs a
 * gradient (graph/recompute.c: what f reads through its context may). */
ag_node *ag__record_always(const char *op, ag__backward_fn bw, ag_tensor *out, int n_in, ag_tensor *const *in);
/* A sweep of the nodes recorded since a mark (ag_mark_t.tape_len = first)
 * alone: out's gradient gets seed (out->size values on its device), then
 * the nodes from out's down to first run; nothing before first is touched. */
void ag__sweep_segment(ag_tensor *out, const ag_real *seed, int first);
/* Gradient buffer of t, allocated zero-filled on first use. */
ag_real *ag__grad(ag_tensor *t);
/* For a backward that writes every element of t's gradient: the buffer,
 * and *fresh = true when t had none yet - then it is uninitialised and the
 * backward stores (=) instead of adding (+=), which saves zeroing it and
 * reading the zeros back.  Padded positions must then be written too. */
ag_real *ag__grad_write(ag_tensor *t, bool *fresh);
/* Should backward compute input i's gradient? */
static inline bool ag__wants(const ag_node *n, int i) { return n->in[i]->requires_grad; }

/* Dropout's keep mask (ops/dropout.c) over `rows` rows of row_len: kept[i]
 * is 1 with probability keep; takes one draw from rng whatever the size; a
 * function of that draw, the global row (ag_set_dropout_row_base + row) and
 * the index within the row only - the same for any threads or row split. */
void ag__dropout_mask(uint8_t *kept, int64_t rows, int64_t row_len, double keep, ag_rng *rng);
/* The same mask drawn on the GPU into device memory kept (ops/dropout_mask.h). */
void ag__dropout_mask_device(uint8_t *kept, int64_t rows, int64_t row_len, double keep, ag_rng *rng);

/* What this process may use (graph/memory.c): at most `total` bytes, of
 * which `free` are still to be had (with_free; -1: unknown), each with what bounds it,
 * for messages ("this machine's memory", "its cgroup's memory limit").  The
 * tighter of the machine (physical memory, MemAvailable) and the cgroup's
 * limit (v2 or v1, the cgroup and its ancestors).  Reads /proc and /sys. */
typedef struct {
    double total, free;
    const char *total_what, *free_what;
} ag__mem_room;
ag__mem_room ag__memory_room(bool with_free);
/* Test hook: read the cgroup limit from this one folder (memory.max and
 * memory.current, or v1's memory.limit_in_bytes and memory.usage_in_bytes)
 * instead of /proc/self/cgroup's. */
extern const char *ag__cgroup_dir;
/* What the parameters with their gradients may take in all, in bytes:
 * ag_param refuses one that crosses it.  0 (the default): the room's
 * total; tests set a smaller one. */
extern double ag__param_bytes_limit;
/* The same for the step arena's growth: 0 (the default) reads the room's
 * free bytes when the arena must grow past 256 MiB. */
extern double ag__arena_bytes_limit;

/* release() runs at ag_shutdown, before the engine's own memory goes: how
 * a layer above the engine frees what it keeps across steps (once per
 * function, however often registered). */
void ag__at_shutdown(void (*release)(void));

/* ---- profiler (graph/profile.c) ---- */
extern bool ag__prof_on;
/* Monotonic seconds from an arbitrary origin (CLOCK_MONOTONIC): for
 * intervals, never for dates. */
double ag__seconds(void);
void ag__prof_site(void);
void ag__prof_forward(const char *op, const char *file, int line);
void ag__prof_untaped(const char *op);
void ag__prof_backward(const ag_node *n, double seconds, int64_t launches);
/* The last call site stamped by AG_AT (file NULL when none). */
const char *ag__callsite(int *line);

/* ---- anomaly mode (graph/anomaly.c) ---- */
extern bool ag__anomaly_on;
/* ag__record: op's output is finite, or one of its inputs was not. */
void ag__anomaly_forward(const char *op, const ag_tensor *out, int n_in, ag_tensor *const *in);
/* The sweep, after n's backward: the input gradients it produced are finite. */
void ag__anomaly_backward(const ag_node *n);

/* ---- errors ---- */
/* Programmer error inside op: prints "attngrad: <op>: <msg> (at file:line)". */
void ag__fatal(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* User-input error: sets ag_errmsg() and returns status (the public ag_fail). */
#define ag__fail ag_fail
/* The step now (graph/tape.c): ag__empty and ag__record stamp it on step
 * tensors, ag_step_end advances it. */
extern uint32_t ag__step_now;
/* Sets t's op and step (the current one; parameters keep 0) and the seal
 * that lets a message trust them later. */
static inline uint32_t ag__seal_of(const ag_tensor *t) {
    return (t->step * 2654435761u) ^ (uint32_t)((uintptr_t)t->op >> 3) ^ 0x5ea1ed;
}
static inline void ag__stamp(ag_tensor *t, const char *op) {
    t->op = op;
    if (!t->persistent) t->step = ag__step_now;
    t->seal = ag__seal_of(t);
}
/* Built with AddressSanitizer: the arena then poisons the memory of a
 * finished step (graph/memory.c), and the two functions below, which read
 * a finished step's tensor on purpose to refuse it by name, are exempt. */
#if defined(__SANITIZE_ADDRESS__)
#define AG_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define AG_ASAN 1
#endif
#endif
#ifdef AG_ASAN
#define AG_NO_ASAN __attribute__((no_sanitize_address))
#else
#define AG_NO_ASAN
#endif
/* valgrind's memcheck, where its header is: the arena marks its blocks
 * for it too, and the same reads are exempt (no-ops outside valgrind). */
#if !defined(AG_ASAN) && defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define AG_VALGRIND 1
#endif
#endif
#ifdef AG_VALGRIND
#define AG_QUIET_VALGRIND(stmt) \
    do { \
        VALGRIND_DISABLE_ERROR_REPORTING; \
        stmt; \
        VALGRIND_ENABLE_ERROR_REPORTING; \
    } while (0)
#else
#define AG_QUIET_VALGRIND(stmt) stmt
#endif
/* While a model's kind builds it: every ag_param appended to a list other
 * than `ps` is counted (a parameter the model's optimizer, gradient check
 * and checkpoints would never see); ag__params_strays ends the watch and
 * says how many, the first one's name and shape in `first`. */
void ag__params_watch(const ag_params *ps);
int ag__params_strays(char *first, size_t n);

/* Stops with the message for a tensor of a finished step used by op. */
void ag__stale(const char *op, const ag_tensor *t) __attribute__((noreturn));
/* A tensor of a finished step points into memory the arena has handed out
 * again: refused, for two compares. */
AG_NO_ASAN static inline void ag__check_live(const char *op, const ag_tensor *t) {
    uint32_t step = 0;
    if (t) AG_QUIET_VALGRIND(step = t->step);
    if (step && step != ag__step_now) ag__stale(op, t);
}
/* A name that options, specs, run folders and checkpoints carry (a model
 * kind's, an optimizer rule's): 1 to max - 1 letters, digits, '_' and '-',
 * so it reads back from "key=value" and "kind:key=value,...". */
static inline bool ag__is_name(const char *name, size_t max) {
    size_t n = strlen(name);
    if (n == 0 || n >= max) return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* A tensor an op cannot do without (a weight, a second operand): NULL is
 * refused by name, as ag__check_same_device refuses a NULL first input,
 * before anything reads it. */
static inline void ag__need(const char *op, const char *what, const ag_tensor *t) {
    if (!t) ag__fatal(op, "%s is NULL (the result of a call that failed?)", what);
}
/* The same for an array the op reads (lengths, labels, a shape). */
static inline void ag__need_array(const char *op, const char *what, const void *p) {
    if (!p) ag__fatal(op, "%s is NULL", what);
}
/* The common check of an op's tensor inputs, a and b (b may be NULL):
 * alive (ag__check_live) and on the CPU.  Every op passes each of its
 * tensors through it before reading them. */
void ag__check_device(const char *op, const ag_tensor *a, const ag_tensor *b);
void ag__check_same_shape(const char *op, const ag_tensor *a, const ag_tensor *b);
int ag__axis(const char *op, const ag_tensor *t, int axis); /* normalise a negative axis */

/* ---- threads (graph/parallel.c) ----
 * ag__parallel runs fn(ctx, p) for every part p in [0, parts) on the pool
 * and returns when all are done; any thread may run any part, so parts must
 * be independent and fixed by the data's shape (then results do not depend
 * on the thread count).  Parts should be worth ~10 us or more.  Inside a
 * part, or with one thread, it runs the parts in order on the caller. */
typedef void (*ag__part_fn)(void *ctx, int64_t part);
void ag__parallel(int64_t parts, ag__part_fn fn, void *ctx);
bool ag__in_parallel(void); /* inside a part: the arena and the tape are off limits */
/* The thread running this part: 0 the caller, 1 .. ag_get_num_threads() - 1
 * the pool's workers.  A loop's scratch can then be one per thread, not one
 * per part, where no result depends on which scratch a part used. */
int ag__worker(void);
/* ag__parallel with `per_thread` reals of scratch for each thread that may
 * run a part, in the step arena from *scratch (a part's own at *scratch +
 * ag__worker() * per_thread), rewound when the loop returns: for scratch
 * a part fully writes before it reads.  Main thread only. */
void ag__parallel_scratch(int64_t parts, ag__part_fn fn, void *ctx, ag_real **scratch, int64_t per_thread);
/* fn(ctx, begin, end) over [0, n) cut into ranges of `grain` (the last one
 * shorter), on the pool: for loops whose iterations are independent. */
typedef void (*ag__range_fn)(void *ctx, int64_t begin, int64_t end);
void ag__parallel_range(int64_t n, int64_t grain, ag__range_fn fn, void *ctx);
/* Once, before attngrad's first BLAS call: OpenBLAS single-threaded and on
 * kernels that fit the CPU (graph/blas.c).  Thread-safe, cheap after. */
void ag__blas_setup(void);
/* Whether the BLAS runs 512-bit kernels (OpenBLAS's SkylakeX, Cooperlake,
 * SapphireRapids): twice our kernel's 256-bit vectors (ops/gemm_kernel.c),
 * which then wins only where it does less work, not where it is faster. */
bool ag__blas_wide(void);
/* fn(ctx, s, begin, end) over [0, lens[s]) of count arrays, each cut into
 * ranges of `grain` of its own, all in one parallel loop: one pass over
 * many arrays (every parameter) that wakes the pool once.  A range never
 * straddles two arrays, and the cut depends on the lengths alone. */
typedef void (*ag__span_fn)(void *ctx, int s, int64_t begin, int64_t end);
void ag__parallel_spans(int count, const int64_t *lens, int64_t grain, ag__span_fn fn, void *ctx);
/* A grain for elementwise loops: 16K elements (64 KB of floats), about
 * 5-20 us of work, well above the cost of handing a range to a thread. */
#define AG_GRAIN_ELEMENTWISE ((int64_t)1 << 14)
/* The grain for units (rows, slices) of unit_size elements each: as many
 * as make ~AG_GRAIN_ELEMENTWISE elements, at least one. */
static inline int64_t ag__units_per_part(int64_t unit_size) {
    int64_t k = AG_GRAIN_ELEMENTWISE / (unit_size > 0 ? unit_size : 1);
    return k < 1 ? 1 : k;
}

/* Rows idx[0..n) of src [*, width] copied into a new arena buffer [n, width]
 * (on the pool): the packing of a padded batch's real rows. */
ag_real *ag__gather_rows(const ag_real *src, int width, const int32_t *idx, int n);
/* Its inverse for gradients: row r of dst [rows, width] gets packed row
 * pos[r] of src (pos -1: a zero row), stored when fresh (0 on the zero
 * rows, see ag__grad_write) or added. */
void ag__unpack_rows(ag_real *dst, const ag_real *src, int width, const int32_t *pos, int64_t rows, bool fresh);

/* ---- GEMM in the library's real type (row-major, C = alpha op(A) op(B) + beta C) ----
 * OpenBLAS, or for the f32 shapes where it measured faster the packed
 * kernel below (ops/matmul.c, packed_wins). */
void ag__gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A,
              const ag_real *B, ag_real beta, ag_real *C);
/* ag__gemm on OpenBLAS only, whatever the shape (for the benches). */
void ag__gemm_blas(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, const ag_real *B,
                   ag_real beta, ag_real *C);
/* The same as one BLAS call on this thread, for products inside a parallel
 * part.  ag__gemm itself cuts a large product into parts fixed by its shape
 * and runs them on the pool, taking scratch from the step arena: call it
 * from the main thread only. */
void ag__gemm_serial(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A,
                     const ag_real *B, ag_real beta, ag_real *C);
/* The same on blocks of larger matrices: rows lda, ldb and ldc apart. */
void ag__gemm_serial_ld(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda,
                        const ag_real *B, int ldb, ag_real beta, ag_real *C, int ldc);

/* ---- our own GEMM kernel (ops/gemm_kernel.c), f32 on AVX2+FMA ----
 * For many products against one B: pack op(B) [K,N] once (arena; main
 * thread), then C = alpha A op(B) + beta C for any A [M,K] (row stride lda)
 * on the pool.  Each element is one in-order FMA chain over k, so its bits
 * depend on its row and column only (not on M, parts or threads).  Only
 * where ag__packed_gemm_ok(): false in the f64 build and without AVX2+FMA. */
typedef struct {
    int K, N;
    ag_real *panels; /* 16-column panels, K x 16 each, zero-padded */
} ag__packed_b;
bool ag__packed_gemm_ok(void);
/* The 256-bit tile even where the CPU has AVX-512 (tests: both tiles give
 * the same bits); not while a product runs. */
void ag__gemm_kernel_256(bool on);
ag__packed_b ag__pack_b(bool tb, int K, int N, const ag_real *B);
void ag__gemm_packed(int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta, ag_real *C,
                     int ldc);
/* The same with op(A) = A^T when ta (A stored [K,M], row stride lda). */
void ag__gemm_packed_op(bool ta, int M, const ag_real *A, int lda, const ag__packed_b *B, ag_real alpha, ag_real beta,
                        ag_real *C, int ldc);
/* The k range [lo, hi) of one row of op(A) outside which the row is all
 * zero (lo = hi = 0: the whole row is).  NaN counts as nonzero. */
typedef struct {
    int32_t lo, hi;
} ag__k_span;
enum { AG_SPAN_ROWS = 128 }; /* the most rows of op(A) ag__k_spans takes (a stack array's bound) */
/* The span of each of op(A)'s M rows (M <= AG_SPAN_ROWS; A [M,K], or [K,M]
 * when ta, row stride lda) in one pass over A, and the live block: *m the
 * rows before op(A)'s trailing all-zero rows, *k the largest hi. */
void ag__k_spans(const ag_real *A, bool ta, int M, int K, int lda, ag__k_span *spans, int *m, int *k);
/* One small product C = alpha op(A) op(B) + beta C on this thread (safe
 * inside parts), B read in place: op(A) B and A B^T.  Returns false, having
 * done nothing, where the kernel is not available or for A^T B^T.  Each
 * element's bits depend on its row of op(A), column of op(B) and K only.
 * spans (op(A) B only; NULL: none): op(A)'s row spans (ag__k_spans, within
 * [0, K]); each tile of rows then multiplies over the union of its rows'
 * spans only.  The terms skipped are 0 b: the same sums, unless B holds an
 * inf or NaN there (0 inf would have made the sum NaN). */
bool ag__gemm_small(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda, const ag_real *B,
                    int ldb, ag_real beta, ag_real *C, int ldc, const ag__k_span *spans);

/* xoshiro256**'s step, inlined where a loop draws one number per element
 * (ag_rng_next is this on the generator's state). */
#include "xoshiro.h"

/* Numerically stable scalar helpers shared by several ops. */
static inline ag_real ag__sigmoid(ag_real x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    ag_real e = exp(x);
    return e / (1 + e);
}
static inline ag_real ag__softplus(ag_real x) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

#endif
