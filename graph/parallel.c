/* parallel.c - the engine's threads: one small pool, and OpenBLAS kept
 * single-threaded beside it.
 *
 * A parallel loop is cut into parts fixed by the data's shape (attention's
 * (batch, head) slices, row blocks of a softmax, parts of a large GEMM,
 * chunks of an elementwise op), never by the thread count; threads claim
 * parts one at a time from a shared counter, so any thread may run any part
 * and the result is bitwise the same for every count, 1 included.  A BLAS
 * call inside a part is single-threaded: Debian's OpenBLAS is the pthreads
 * build, whose own pool, called from several threads at once or running
 * next to ours, oversubscribes the cores, so it is set to one thread.
 *
 * Why a pool of our own rather than OpenMP: on a machine shared with other
 * work (the normal case on 2 cores), OpenMP's default of spinning idle
 * workers and handing out fixed iteration ranges measured twice as slow as
 * its passive policy, which in turn costs a futex wake per loop on an idle
 * machine; both are chosen by environment variables a library cannot set.
 * Here workers spin briefly and then sleep, and parts are claimed
 * dynamically, so a preempted thread delays nobody: the caller takes over
 * the parts it has not started.
 *
 * The protocol.  A job (fn, ctx, parts) is published in one of two slots
 * under a generation number; the claim ticket packs (generation, next part)
 * into one 64-bit atomic, so claiming is a compare-and-swap that fails once
 * the job is over.  A worker that wakes late reads the slot of the
 * generation it saw; if that job has ended its claim fails and it touches
 * nothing.  The caller runs parts too and returns when every claimed part
 * is done, after which its slot may be reused two generations later. */
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

enum {
    PART_BITS = 24,               /* at most 2^24 parts per job */
    WORKER_SPIN = 1 << 10,        /* pause loops (~10 us) before a worker sleeps */
    CALLER_SPIN = 1 << 10,        /* pause loops between yields while waiting for parts */
    MAX_THREADS = 256,
};

typedef struct {
    _Atomic(ag__part_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t parts;
    atomic_int_fast64_t done;     /* parts finished */
} job_slot;

static struct {
    int team;                     /* threads including the caller; 0 until first asked */
    int workers;                  /* threads started (team - 1 once started) */
    pthread_t thread[MAX_THREADS];
    atomic_uint_fast64_t ticket;  /* generation << PART_BITS | next part */
    atomic_uint_fast64_t generation;
    job_slot slot[2];
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int sleepers;                 /* under lock */
    atomic_bool stop;
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static _Thread_local bool inside_job; /* nested loops run inline */
static _Thread_local int worker_index;  /* 0 the caller, 1.. the pool's workers */

/* ---- subnormal numbers: flushed to zero, or kept ----
 *
 * Why: on x86 a float operation whose input or result is subnormal (below
 * 1.2e-38) takes a microcode assist of ~100 cycles.  Adam with coupled L2
 * drives the weights of an input that no longer reaches the loss through
 * the subnormal range, where the rounding of lr*m/sqrt(v) holds them:
 * MTSA's pooling weights were 26% subnormal after 40 epochs of SUBJ, and
 * every product with them ran 10x slower (docs/performance.md).  Flushing
 * (FTZ: subnormal results become 0; DAZ: subnormal inputs read as 0) is
 * the MXCSR's (x86) or FPCR's (Arm) business, a per-thread register: the
 * mode is one number here, and every thread that runs a parallel loop (the
 * caller and the pool's workers) takes it before its first part, so the
 * results stay bitwise the same for every thread count. */
static _Atomic int flush_mode = -1;            /* 1 flush, 0 keep, -1 never set: registers left alone */
static _Thread_local int thread_mode = -1;     /* the mode this thread's register holds; -1 unknown */

static bool fp_register_flush(bool on) { /* this thread's register; false where the CPU has no such mode */
#if defined(__x86_64__) || defined(__i386__)
    unsigned csr = _mm_getcsr(), bits = 0x8000 | 0x0040; /* FTZ | DAZ */
    _mm_setcsr(on ? csr | bits : csr & ~bits);
    return true;
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    fpcr = on ? fpcr | (1u << 24) : fpcr & ~(uint64_t)(1u << 24); /* FZ */
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr));
    return true;
#else
    (void)on;
    return false;
#endif
}

/* This thread takes the engine's mode (a load and a compare when it has). */
static inline void fp_follow(void) {
    int want = atomic_load_explicit(&flush_mode, memory_order_relaxed);
    if (want >= 0 && thread_mode != want) {
        fp_register_flush(want);
        thread_mode = want;
    }
}

bool ag_flush_denormals(bool on) {
    int was = atomic_exchange(&flush_mode, on);
    fp_register_flush(on);
    thread_mode = on;
    return was == 1;
}

bool ag_flush_denormals_enabled(void) { return atomic_load(&flush_mode) == 1; }

bool ag_flush_denormals_supported(void) {
#if defined(__x86_64__) || defined(__i386__) || defined(__aarch64__)
    return true;
#else
    return false;
#endif
}

/* Claims and runs parts of generation gen until none is left or the job is
 * over. */
static void run_parts(uint64_t gen) {
    job_slot *s = &pool.slot[gen & 1];
    /* Acquire: had a later job rewritten the slot, the ticket read below is
     * then of that job's generation or later, and nothing is claimed. */
    ag__part_fn fn = atomic_load_explicit(&s->fn, memory_order_acquire);
    void *ctx = atomic_load_explicit(&s->ctx, memory_order_acquire);
    int64_t parts = atomic_load_explicit(&s->parts, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    for (;;) {
        if (t >> PART_BITS != gen) return;            /* a later job: ours is over */
        uint64_t p = t & (((uint64_t)1 << PART_BITS) - 1);
        if ((int64_t)p >= parts) return;
        if (!atomic_compare_exchange_weak_explicit(&pool.ticket, &t, t + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;                                 /* t reloaded: try again */
        /* The claim succeeded while gen was current, so fn, ctx and parts
         * were this job's (the slot is rewritten only two jobs later). */
        fn(ctx, (int64_t)p);
        atomic_fetch_add_explicit(&s->done, 1, memory_order_release);
        t = atomic_load_explicit(&pool.ticket, memory_order_acquire);
    }
}

static void *worker_main(void *arg) {
    worker_index = (int)(intptr_t)arg;
    inside_job = true;
    uint64_t seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
    for (;;) {
        uint64_t g = seen;
        for (int i = 0; i < WORKER_SPIN && g == seen; i++) {
            cpu_relax();
            g = atomic_load_explicit(&pool.generation, memory_order_acquire);
        }
        if (g == seen) { /* nothing came: sleep until a job or stop */
            pthread_mutex_lock(&pool.lock);
            while ((g = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen &&
                   !atomic_load(&pool.stop)) {
                pool.sleepers++;
                pthread_cond_wait(&pool.wake, &pool.lock);
                pool.sleepers--;
            }
            pthread_mutex_unlock(&pool.lock);
        }
        if (atomic_load(&pool.stop)) return NULL;
        seen = g;
        fp_follow();
        run_parts(g);
    }
}

static void pool_stop(void) {
    if (!pool.workers) return;
    pthread_mutex_lock(&pool.lock);
    atomic_store(&pool.stop, true);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    for (int i = 0; i < pool.workers; i++) pthread_join(pool.thread[i], NULL);
    pool.workers = 0;
    atomic_store(&pool.stop, false);
}

/* A forked child has only the thread that forked: it starts its own
 * workers at its first parallel loop. */
static void forget_workers_in_child(void) {
    pool.workers = 0;
    pool.sleepers = 0;
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.wake, NULL);
}

static void pool_start(void) {
    static bool atfork_set;
    if (!atfork_set) pthread_atfork(NULL, NULL, forget_workers_in_child);
    atfork_set = true;
    int want = pool.team - 1;
    for (int i = 0; i < want; i++) {
        if (pthread_create(&pool.thread[i], NULL, worker_main, (void *)(intptr_t)(i + 1)) != 0)
            break; /* fewer threads: still correct */
        pool.workers++;
    }
}


static int default_team(void) {
    const char *env = getenv("AG_NUM_THREADS");
    if (!env) env = getenv("OMP_NUM_THREADS");
    int n = env ? atoi(env) : 0;
    if (n < 1) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
}

bool ag__in_parallel(void) { return inside_job; }

int ag__worker(void) { return worker_index; }

void ag_set_num_threads(int n) {
    if (n < 1) ag__fatal("ag_set_num_threads", "thread count %d must be >= 1", n);
    if (inside_job) ag__fatal("ag_set_num_threads", "called from inside a parallel loop");
    if (n > MAX_THREADS) n = MAX_THREADS;
    ag__blas_setup(); /* OpenBLAS single-threaded (graph/blas.c) */
    if (n == pool.team) return;
    pool_stop(); /* started again, at the new size, by the next parallel loop */
    pool.team = n;
}

int ag_get_num_threads(void) {
    if (!pool.team) {
        pool.team = default_team();
        ag__blas_setup(); /* OpenBLAS single-threaded (graph/blas.c) */
    }
    return pool.team;
}

void ag__parallel(int64_t parts, ag__part_fn fn, void *ctx) {
    if (parts <= 0) return;
    fp_follow();
    if (parts == 1 || inside_job || ag_get_num_threads() == 1) {
        bool was = inside_job;
        inside_job = true; /* the same rules as on the pool, whatever the thread count */
        for (int64_t p = 0; p < parts; p++) fn(ctx, p);
        inside_job = was;
        return;
    }
    if (parts >= ((int64_t)1 << PART_BITS)) ag__fatal("parallel", "%lld parts (at most 2^%d)", (long long)parts, PART_BITS);
    if (!pool.workers) pool_start();
    uint64_t gen = atomic_load_explicit(&pool.generation, memory_order_relaxed) + 1;
    job_slot *s = &pool.slot[gen & 1];
    atomic_store_explicit(&s->fn, fn, memory_order_release);
    atomic_store_explicit(&s->ctx, ctx, memory_order_release);
    atomic_store_explicit(&s->parts, parts, memory_order_release);
    atomic_store_explicit(&s->done, 0, memory_order_relaxed);
    atomic_store_explicit(&pool.ticket, gen << PART_BITS, memory_order_release);
    atomic_store_explicit(&pool.generation, gen, memory_order_release);
    pthread_mutex_lock(&pool.lock);
    if (pool.sleepers) pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);

    inside_job = true;
    run_parts(gen);
    inside_job = false;
    /* Parts other threads claimed may still be running. */
    for (int i = 0; atomic_load_explicit(&s->done, memory_order_acquire) < parts; i++) {
        cpu_relax();
        if (i % CALLER_SPIN == CALLER_SPIN - 1) sched_yield(); /* a preempted worker needs the core */
    }
    /* End the job: a worker that wakes late finds the ticket of a finished
     * generation with no part left and claims nothing. */
}

void ag__parallel_scratch(int64_t parts, ag__part_fn fn, void *ctx, ag_real **scratch, int64_t per_thread) {
    size_t pos;
    int chunk;
    /* one part runs on the caller (ag__worker() 0); more may run on any thread */
    int64_t threads = parts == 1 && !inside_job ? 1 : ag_get_num_threads();
    ag__arena_mark(&pos, &chunk);
    *scratch = ag__arena_alloc((size_t)(per_thread > 0 ? threads * per_thread : 1) * sizeof(ag_real));
    ag__parallel(parts, fn, ctx);
    ag__arena_rewind(pos, chunk);
}

typedef struct {
    int64_t n, grain;
    ag__range_fn fn;
    void *ctx;
} range_job;

static void range_part(void *ctx, int64_t part) {
    const range_job *j = ctx;
    int64_t begin = part * j->grain, end = begin + j->grain < j->n ? begin + j->grain : j->n;
    j->fn(j->ctx, begin, end);
}

void ag__parallel_range(int64_t n, int64_t grain, ag__range_fn fn, void *ctx) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain) {
        fp_follow();
        fn(ctx, 0, n);
        return;
    }
    range_job j = {n, grain, fn, ctx};
    ag__parallel((n + grain - 1) / grain, range_part, &j);
}

typedef struct {
    const int64_t *lens, *first; /* array s has ranges [first[s], first[s+1]) */
    int64_t grain;
    int count;
    ag__span_fn fn;
    void *ctx;
} spans_job;

/* Range `part` over all arrays: the array is the last whose first range is
 * at or before it (empty arrays have none, so never the one found). */
static void spans_part(void *ctx, int64_t part) {
    const spans_job *j = ctx;
    int lo = 0, hi = j->count - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (j->first[mid] <= part) lo = mid;
        else hi = mid - 1;
    }
    int64_t begin = (part - j->first[lo]) * j->grain, n = j->lens[lo];
    j->fn(j->ctx, lo, begin, begin + j->grain < n ? begin + j->grain : n);
}

void ag__parallel_spans(int count, const int64_t *lens, int64_t grain, ag__span_fn fn, void *ctx) {
    if (count <= 0) return;
    if (grain < 1) grain = 1;
    int64_t room[65];
    int64_t *first = (size_t)count + 1 <= sizeof room / sizeof *room ? room
                                                                       : ag__arena_alloc(((size_t)count + 1) * sizeof *first);
    first[0] = 0;
    for (int s = 0; s < count; s++) first[s + 1] = first[s] + (lens[s] > 0 ? (lens[s] + grain - 1) / grain : 0);
    spans_job j = {lens, first, grain, count, fn, ctx};
    ag__parallel(first[count], spans_part, &j);
}

void ag__parallel_shutdown(void) {
    pool_stop();
}
