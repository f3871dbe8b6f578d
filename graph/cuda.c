/* cuda.c - the CUDA runtime and cuBLAS, called from C: device memory, the
 * step's device arena, copies, matrix products, and whether a GPU is there.
 * Built without CUDA (no nvcc/cuBLAS at configure time, or -Dcuda=disabled)
 * the same functions say so. */
#include "device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef AG_HAVE_CUDA

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

/* ---- cuBLAS, opened at the first GPU use ----
 * Linked, its libraries' constructors (libcublasLt's) took 0.3 s at every
 * program start, a CPU run's too, and a CUDA build started only where
 * cuBLAS is installed.  Opened here, by start(), a build runs on the CPU
 * wherever the CUDA runtime is, and a GPU without cuBLAS is said in words.
 * The emulator (emulator/cublas_v2.h) is linked in. */
#ifdef AG_REAL_DOUBLE
#define GEMM cublasDgemm
#define GEMM_BATCHED cublasDgemmStridedBatched
#else
#define GEMM cublasSgemm
#define GEMM_BATCHED cublasSgemmStridedBatched
#endif

#define CUBLAS_CALLS(X)                                                                                \
    X(create, cublasCreate) X(destroy, cublasDestroy) X(set_stream, cublasSetStream)                   \
    X(set_math_mode, cublasSetMathMode) X(set_workspace, cublasSetWorkspace)                           \
    X(set_pointer_mode, cublasSetPointerMode) X(gemm, GEMM) X(gemm_batched, GEMM_BATCHED)

static struct {
#define FIELD(field, fn) __typeof__(fn) *field;
    CUBLAS_CALLS(FIELD)
#undef FIELD
} cb;

#ifdef AG_CUBLAS_EMULATED
static bool load_cublas(char *why, size_t n) {
    (void)why, (void)n;
#define TAKE(field, fn) cb.field = fn;
    CUBLAS_CALLS(TAKE)
#undef TAKE
    return true;
}
#else
#include <dlfcn.h>
#define STR_(x) #x
#define STR(x) STR_(x) /* the name after macros: cublasCreate is cublasCreate_v2 */

void *ag__cuda_open_library(const char *name, const char *what, char *why, size_t n) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) return lib;
    snprintf(why, n, "%s could not be loaded: %s", what, dlerror());
    Dl_info at;
    const char *slash;
    if (dladdr((void *)(uintptr_t)cudaGetDeviceCount, &at) && at.dli_fname &&
        (slash = strrchr(at.dli_fname, '/'))) {
        char path[4096];
        snprintf(path, sizeof path, "%.*s/%s", (int)(slash - at.dli_fname), at.dli_fname, name);
        if ((lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) return lib;
    }
    size_t len = strlen(why);
    snprintf(why + len, n - len, " (%s, not on the loader's path nor beside the CUDA runtime: LD_LIBRARY_PATH or "
             "ldconfig)", name);
    return NULL;
}

static bool load_cublas(char *why, size_t n) {
    static void *lib;
    if (!lib && !(lib = ag__cuda_open_library("libcublas.so." STR(CUBLAS_VER_MAJOR), "cuBLAS", why, n))) return false;
#define LOAD(field, fn)                                                                                \
    if (!(*(void **)&cb.field = dlsym(lib, STR(fn)))) {                                                \
        snprintf(why, n, "cuBLAS has no %s: not the cuBLAS %d this build compiled against", STR(fn),  \
                 CUBLAS_VER_MAJOR);                                                                    \
        return false;                                                                                  \
    }
    CUBLAS_CALLS(LOAD)
#undef LOAD
    return true;
}
#endif

bool ag__cuda_cublas_loadable(char *why, size_t n) { return load_cublas(why, n); }

#define CUDA_OK(call)                                                                                  \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess) ag__fatal("cuda", "%s failed: %s", #call, cudaGetErrorString(e_));      \
    } while (0)

/* One stream for every kernel and copy: ops run in order without a hidden
 * synchronisation, and a step can be captured as a CUDA graph. */
static cudaStream_t stream;
static cublasHandle_t blas;
static int ready = -1; /* -1 not asked yet, 0 no, 1 yes */
static char why_not[256];
static void wait_stream(void); /* cudaStreamSynchronize, counted */
static int preferred, ordinal; /* ag__cuda_prefer_device's wish; the device in use */
static bool preferred_exactly;  /* ag__cuda_use_device's: that index or none, never modulo the count */
static void *cublas_workspace; /* cuBLAS's (start) */
static unsigned *block_tickets; /* ag__cuda_block_tickets (start) */
enum { CUBLAS_WORKSPACE = 32 << 20 }; /* the size cuBLAS recommends for Hopper */

static void versions(char *buf, size_t n) {
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    snprintf(buf, n, "driver supports CUDA %d.%d, runtime %d.%d", drv / 1000, drv % 1000 / 10, rt / 1000,
             rt % 1000 / 10);
}

/* Starts the runtime once: the preferred device (modulo those visible), the
 * stream, cuBLAS.  false, with the reason in why_not, when any of it is
 * missing. */
static bool start(void) {
    char v[96];
    versions(v, sizeof v);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        snprintf(why_not, sizeof why_not, "no CUDA device found (%s; %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices", v);
        return false;
    }
    if (preferred_exactly && preferred >= count) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        snprintf(why_not, sizeof why_not, "no cuda:%d here: %d CUDA device%s visible, cuda:0%s (CUDA_VISIBLE_DEVICES %s%s)",
                 preferred, count, count == 1 ? "" : "s", count == 1 ? "" : " and up", visible ? "is " : "unset",
                 visible ? visible : "");
        return false;
    }
    ordinal = preferred % count;
    e = cudaSetDevice(ordinal);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(why_not, sizeof why_not, "the CUDA device cannot be used: %s (%s)", cudaGetErrorString(e), v);
        return false;
    }
    if (!load_cublas(why_not, sizeof why_not)) return false;
    if (cb.create(&blas) != CUBLAS_STATUS_SUCCESS || cb.set_stream(blas, stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why_not, sizeof why_not, "cuBLAS could not start on the CUDA device (%s)", v);
        return false;
    }
    /* no TF32: f32 products as the CPU computes them, to ~1e-6 */
    cb.set_math_mode(blas, CUBLAS_DEFAULT_MATH);
    /* cuBLAS's workspace is ours from the start, not its pool: a product
     * captured into a CUDA graph allocates nothing, and picks the kernel the
     * same product picks eagerly, whether graphs were ever on or not (the
     * choice may follow the workspace's size).  cublasSetStream would reset
     * it: the stream is set once, above. */
    if (cudaMalloc(&cublas_workspace, CUBLAS_WORKSPACE) != cudaSuccess ||
        cb.set_workspace(blas, cublas_workspace, CUBLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        cudaGetLastError();
        snprintf(why_not, sizeof why_not, "cuBLAS's %d MiB workspace could not be set on the CUDA device (%s)",
                 CUBLAS_WORKSPACE >> 20, v);
        return false;
    }
    if (cudaMalloc((void **)&block_tickets, sizeof *block_tickets) != cudaSuccess ||
        cudaMemset(block_tickets, 0, sizeof *block_tickets) != cudaSuccess) {
        cudaGetLastError();
        snprintf(why_not, sizeof why_not, "no device memory for the block counter (%s)", v);
        return false;
    }
    return true;
}


static bool init(void) {
    if (ready < 0) ready = start();
    return ready == 1;
}

bool ag__cuda_ready(char *why, size_t n) {
    bool ok = init();
    if (!ok && why) snprintf(why, n, "%s", why_not);
    return ok;
}

cudaStream_t ag__cuda_stream(void) { return stream; }

void ag__cuda_prefer_device(int index) {
    if (ready < 0) preferred = index > 0 ? index : 0;
}

bool ag__cuda_use_device(int index, char *why, size_t n) {
    if (ready < 0) preferred = index, preferred_exactly = true;
    if (!ag__cuda_ready(why, n)) return false;
    if (ordinal == index) return true;
    if (why) snprintf(why, n, "the CUDA runtime of this process already runs on cuda:%d (one GPU per process)", ordinal);
    return false;
}

static void need_device(const char *op) {
    if (!init()) ag__fatal(op, "%s", why_not);
}
/* One counter of device memory, zero between kernels: a kernel that
 * ends with its last block summing what all blocks wrote counts its
 * finished blocks there and leaves it at zero (ops/cuda/linear.cu). */
unsigned *ag__cuda_block_tickets(void) {
    need_device("block tickets");
    return block_tickets;
}

int ag__cuda_device(unsigned char uuid[16]) {
    need_device("device");
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, ordinal));
    memcpy(uuid, prop.uuid.bytes, 16);
    return ordinal;
}

static const char *mib(double bytes, char *buf, size_t n) {
    snprintf(buf, n, bytes >= (1 << 30) ? "%.1f GiB" : "%.1f MiB", bytes / (bytes >= (1 << 30) ? 1 << 30 : 1 << 20));
    return buf;
}

void *ag__cuda_try_malloc(size_t bytes, const char *what) {
    need_device(what);
    void *p = NULL;
    if (cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess) return p;
    cudaGetLastError(); /* clear it */
    return NULL;
}

void *ag__cuda_malloc(size_t bytes, const char *what) {
    void *p = ag__cuda_try_malloc(bytes, what);
    if (!p) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        char a[32], b[32], c[32];
        ag__fatal(what, "needs %s of device memory, but %s of %s is free on cuda:%d", mib((double)bytes, a, sizeof a),
                  mib((double)free_b, b, sizeof b), mib((double)total_b, c, sizeof c), ordinal);
    }
    return p;
}

/* A cached graph never outlives memory it names: the records it was
 * captured from only ever name live memory, and a graph that survived a
 * free could replay (its bytes equal again) onto a new allocation at the
 * old address, which the driver may have resolved at instantiation.  So
 * freeing device or pinned memory lets every graph go; that happens when
 * the run ends or an arena grows (coalesces), never in a steady step. */
void ag__cuda_free(void *p) {
    if (!p || ready != 1) return;
    ag__graph_release(); /* runs what was recorded first: a recorded launch may still name it */
    cudaFree(p);
}

/* ---- the step's device arena ---- */

static void *arena_chunk(size_t bytes, void *ctx) {
    (void)ctx;
    void *p = NULL;
    if (cudaMalloc(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void arena_release(void *p, void *ctx) {
    (void)ctx;
    ag__graph_release(); /* as ag__cuda_free */
    cudaFree(p);
}

static ag__bump arena = {.alloc = arena_chunk, .release = arena_release, .align = 256, .min_chunk = (size_t)16 << 20};

/* AG_CUDA_EXACT_ALLOC=1 (tools/gpu-check.sh --memcheck): every arena
 * allocation is a cudaMalloc of its own, freed when its step ends, so
 * compute-sanitizer's memcheck knows each tensor's bounds.  Inside an arena
 * chunk it knows only the chunk's: a kernel writing past its output into
 * the next tensor would go unreported (the host arena tells ASan the same
 * way, graph/memory.c).  Slow, since a cudaFree waits for the GPU, and no
 * CUDA graph replays (each step's addresses differ); for checking only. */
static int exact_mode = -1;
static struct {
    struct {
        void *p;
        size_t bytes;
    } *at;
    size_t n, cap, bytes; /* allocations live, room for, bytes live */
} exact;

static bool exact_on(void) {
    if (exact_mode < 0) {
        const char *e = getenv("AG_CUDA_EXACT_ALLOC");
        exact_mode = e && *e == '1';
    }
    return exact_mode;
}

bool ag__cuda_exact_alloc(void) { return exact_on(); }

static void *exact_alloc(size_t bytes) {
    if (exact.n == exact.cap) { /* grows while the first steps run, then stays */
        size_t cap = exact.cap ? 2 * exact.cap : 1024;
        void *grown = realloc(exact.at, cap * sizeof *exact.at);
        if (!grown) return NULL;
        exact.at = grown, exact.cap = cap;
    }
    void *p = arena_chunk(bytes ? bytes : 1, NULL);
    if (!p) return NULL;
    exact.at[exact.n].p = p, exact.at[exact.n++].bytes = bytes;
    exact.bytes += bytes;
    if (exact.bytes > arena.high) arena.high = exact.bytes;
    return p;
}

/* Frees the allocations from the k-th on (a rewind; 0 at the step's end). */
static void exact_free_from(size_t k) {
    if (k >= exact.n) return;
    ag__graph_release(); /* as arena_release: a record may name them */
    for (size_t i = k; i < exact.n; i++) {
        cudaFree(exact.at[i].p);
        exact.bytes -= exact.at[i].bytes;
    }
    exact.n = k;
}

void *ag__cuda_arena_alloc(size_t bytes) {
    need_device("arena");
    void *p = exact_on() ? exact_alloc(bytes) : ag__bump_alloc(&arena, bytes);
    if (!p) {
        size_t free_b = 0, total_b = 0;
        cudaMemGetInfo(&free_b, &total_b);
        char a[32], b[32], c[32], d[32];
        ag__fatal("arena", "the step needs %s more device memory (it holds %s already), but %s of %s is free on "
                  "cuda:%d: the batch is too large for this GPU (fewer or shorter sequences per batch)",
                  mib((double)bytes, a, sizeof a),
                  mib((double)(exact_on() ? exact.bytes : arena.step_used), b, sizeof b),
                  mib((double)free_b, c, sizeof c), mib((double)total_b, d, sizeof d), ordinal);
    }
    return p;
}

size_t ag__cuda_arena_high(void) { return arena.high; }
void ag__cuda_arena_reset_high(void) { arena.high = exact_on() ? exact.bytes : arena.step_used; }

void ag_sync(void) {
    if (stream) wait_stream();
}

/* ---- uploads through pinned staging: a copy to the GPU never waits ----
 * The host may change a buffer as soon as a copy of it returns.  Waiting
 * for the stream to make that safe (a pageable cudaMemcpyAsync does so in
 * effect) stops the host at every upload of ids, lengths or a mask until
 * the GPU has run everything queued before it, so the host's launches never
 * overlap the GPU's work.  Uploads up to STAGED_MAX bytes go instead through
 * pinned staging memory: copied there on the host, read by the DMA later,
 * in stream order.  Two staging arenas alternate by step; before one is
 * reused the host waits for the event recorded at the end of the step that
 * last filled it, two steps back, so the GPU may run up to a step behind.
 * Larger copies (parameters, checkpoints) wait as before.
 * AG_CUDA_SYNC_UPLOADS=1 makes every upload wait, to measure the
 * difference. */
enum { STAGED_MAX = 4 << 20 };

static void *pinned_chunk(size_t bytes, void *ctx) {
    (void)ctx;
    void *p = NULL;
    if (cudaMallocHost(&p, bytes) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return p;
}

static void pinned_release(void *p, void *ctx) {
    (void)ctx;
    ag__graph_release(); /* as ag__cuda_free: a memcpy node names its staging */
    cudaFreeHost(p);
}

static ag__bump staging[2] = {
    {.alloc = pinned_chunk, .release = pinned_release, .align = 64, .min_chunk = (size_t)1 << 20},
    {.alloc = pinned_chunk, .release = pinned_release, .align = 64, .min_chunk = (size_t)1 << 20},
};
static cudaEvent_t staging_done[2];
static int staging_cur, sync_uploads = -1;
static int64_t host_waits; /* the host stopped until the GPU caught up */

int64_t ag__cuda_host_waits(void) { return host_waits; }
int64_t ag__cuda_launches(void) { return ag__launches(); }

void ag__cuda_graph_counts(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager_segments,
                           int64_t *short_segments) {
    ag__graph_stats(graph_launches, graph_captures, eager_segments, short_segments);
}

static void wait_stream(void) {
    ag__graph_flush(); /* what was recorded runs first */
    host_waits++;
    CUDA_OK(cudaStreamSynchronize(stream));
}

/* ---- what graph/cuda_graph.cu records besides kernels ----
 * With CUDA graphs on, copies, memsets and cuBLAS calls are recorded like
 * kernel launches: their arguments by value, and a function that issues
 * them when the segment runs eagerly or is captured. */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
    int64_t kind; /* 64 bits: no padding, whose bytes a record's comparison would see */
} copy_record;

static int run_copy(const void *p) {
    const copy_record *r = p;
    return (int)cudaMemcpyAsync(r->dst, r->src, r->bytes, (enum cudaMemcpyKind)r->kind, stream);
}

/* Issues the copy now, or records it. */
static void async_copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    copy_record *r = ag__record_begin(sizeof *r, run_copy);
    if (r) *r = (copy_record){dst, src, bytes, (int64_t)kind};
    else CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
}

typedef struct {
    void *dst;
    const void *src;
    int64_t dst_pitch, src_pitch, width, height; /* bytes, bytes, bytes, rows */
} copy_rows_record;

static int run_copy_rows(const void *p) {
    const copy_rows_record *r = p;
    return (int)cudaMemcpy2DAsync(r->dst, (size_t)r->dst_pitch, r->src, (size_t)r->src_pitch, (size_t)r->width,
                                  (size_t)r->height, cudaMemcpyDeviceToDevice, stream);
}

/* false: not staged (too large, switched off, or no pinned memory): the
 * caller copies and waits. */
static bool stage_upload(void *dst, const void *src, size_t bytes) {
    if (sync_uploads < 0) {
        const char *e = getenv("AG_CUDA_SYNC_UPLOADS");
        sync_uploads = e && *e == '1';
    }
    if (sync_uploads || bytes > STAGED_MAX) return false;
    void *p = ag__bump_alloc(&staging[staging_cur], bytes);
    if (!p) return false;
    memcpy(p, src, bytes);
    async_copy(dst, p, bytes, cudaMemcpyHostToDevice); /* the pinned bytes stay until the step after next */
    return true;
}


/* The step's end: this step's staging is done with once the GPU reaches
 * here; the other arena's copies were queued a step earlier.  An arena
 * that staged nothing (a CPU step in a process that used the GPU before)
 * has no bytes to wait for, so the host does not stop for the GPU there. */
static void next_staging(void) {
    ag__graph_flush(); /* the step's last segment, before its end is marked */
    if (!staging_done[0]) {
        CUDA_OK(cudaEventCreateWithFlags(&staging_done[0], cudaEventDisableTiming));
        CUDA_OK(cudaEventCreateWithFlags(&staging_done[1], cudaEventDisableTiming));
    }
    CUDA_OK(cudaEventRecord(staging_done[staging_cur], stream));
    staging_cur ^= 1;
    if (staging[staging_cur].step_used) {
        if (cudaEventQuery(staging_done[staging_cur]) == cudaErrorNotReady) host_waits++;
        CUDA_OK(cudaEventSynchronize(staging_done[staging_cur]));
        ag__bump_reset(&staging[staging_cur]);
    }
}

void ag__cuda_arena_reset(void) {
    ag__graph_flush(); /* before the reset may free a chunk a record names */
    if (arena.n) ag__bump_reset(&arena);
    if (exact.n) exact_free_from(0);
    ag__cuda_uploads_step_end();
    if (ready == 1) next_staging();
}

void ag__cuda_arena_mark(size_t *pos, int *chunk) {
    if (exact_on()) *pos = exact.n, *chunk = -1; /* the allocations so far */
    else ag__bump_mark(&arena, pos, chunk);
}

void ag__cuda_arena_rewind(size_t pos, int chunk) {
    ag__cuda_uploads_rewound(); /* the memo's copies may lie past pos */
    if (chunk < 0) exact_free_from(pos);
    else ag__bump_rewind(&arena, pos, chunk);
}

void ag__cuda_shutdown(void) {
    if (ready != 1) return;
    ag__graph_release();
    ag__graph_enable(false); /* a runtime started again starts eager */
    cudaStreamSynchronize(stream);
    if (cublas_workspace) cudaFree(cublas_workspace);
    cublas_workspace = NULL;
    if (block_tickets) cudaFree(block_tickets);
    block_tickets = NULL;
    ag__bump_release_all(&arena);
    exact_free_from(0);
    free(exact.at);
    exact.at = NULL, exact.cap = 0;
    ag__bump_release_all(&staging[0]);
    ag__bump_release_all(&staging[1]);
    ag__cuda_uploads_release();
    if (staging_done[0]) cudaEventDestroy(staging_done[0]), cudaEventDestroy(staging_done[1]);
    staging_done[0] = staging_done[1] = NULL;
    cb.destroy(blas);
    cudaStreamDestroy(stream);
    ready = -1;
}

/* ---- copies ---- */

void ag__cuda_copy(void *dst, ag_device dst_dev, const void *src, ag_device src_dev, size_t bytes) {
    if (!bytes) return;
    need_device("copy");
    enum cudaMemcpyKind kind = dst_dev == AG_CUDA
                                   ? (src_dev == AG_CUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                   : (src_dev == AG_CUDA ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
    if (kind == cudaMemcpyHostToDevice && stage_upload(dst, src, bytes)) return;
    if (kind == cudaMemcpyDeviceToDevice) { /* in stream order: nothing to wait for */
        async_copy(dst, src, bytes, kind);
        return;
    }
    /* The host reads or reuses its buffer right after: wait for this copy
     * (and, with graphs on, for what was recorded before it). */
    ag__graph_flush();
    ag__count_launch();
    CUDA_OK(cudaMemcpyAsync(dst, src, bytes, kind, stream));
    if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToDevice) wait_stream();
}

void ag__cuda_copy_rows(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows) {
    if (!width || !rows) return;
    need_device("copy");
    copy_rows_record *r = ag__record_begin(sizeof *r, run_copy_rows);
    copy_rows_record now = {dst, src, (int64_t)dst_pitch, (int64_t)src_pitch, (int64_t)width, (int64_t)rows};
    if (r) *r = now;
    else CUDA_OK(run_copy_rows(&now));
}

typedef struct {
    void *p;
    size_t bytes;
} zero_record;

static int run_zero(const void *p) {
    const zero_record *r = p;
    return (int)cudaMemsetAsync(r->p, 0, r->bytes, stream);
}

void ag__cuda_zero(void *p, size_t bytes) {
    if (!bytes) return;
    zero_record *r = ag__record_begin(sizeof *r, run_zero);
    if (r) *r = (zero_record){p, bytes};
    else CUDA_OK(cudaMemsetAsync(p, 0, bytes, stream));
}

void ag__cuda_check_launch(const char *op) {
    if (ag__graph_enabled()) { /* recorded: a failure shows when the segment runs, named by op */
        ag__record_label(op);
        return;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) ag__fatal(op, "CUDA kernel launch failed: %s", cudaGetErrorString(e));
}

/* ---- CUDA graphs (graph/cuda_graph.cu) ---- */

void ag_cuda_graphs(bool on) {
    if (on && !init()) return; /* no GPU: nothing to record */
    if (ready == 1) ag__graph_enable(on);
}

bool ag_cuda_graphs_on(void) { return ready == 1 && ag__graph_enabled(); }

/* ---- cuBLAS: row-major products as column-major ones, C^T = op(B)^T op(A)^T ---- */

/* One record serves the three kinds of product; eagerly it is issued at
 * once.  Scalars by value, or (dev_scalars) pointers to device ones. */
typedef struct {
    const ag_real *A, *B;
    ag_real *C;
    const ag_real *alpha_dev, *beta_dev;
    int64_t sa, sb, sc;
    ag_real alpha, beta;
    int ta, tb, M, N, K, lda, ldb, ldc, batch, dev_scalars, unused[2]; /* 12 ints: no padding */
} gemm_record;
/* A record's bytes are its identity: padding, whatever the stack held there,
 * would make equal products differ (and their segment never replay). */
_Static_assert(sizeof(gemm_record) == 5 * sizeof(void *) + 3 * sizeof(int64_t) + 2 * sizeof(ag_real) + 12 * sizeof(int),
               "gemm_record has no padding");
_Static_assert(sizeof(copy_record) == 2 * sizeof(void *) + sizeof(size_t) + sizeof(int64_t), "copy_record: no padding");

static cublasStatus_t issue_gemm(const gemm_record *g) {
    cublasOperation_t opa = g->ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = g->tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (g->dev_scalars) {
        cublasStatus_t s = cb.set_pointer_mode(blas, CUBLAS_POINTER_MODE_DEVICE);
        if (s == CUBLAS_STATUS_SUCCESS)
            s = cb.gemm(blas, opb, opa, g->N, g->M, g->K, g->alpha_dev, g->B, g->ldb, g->A, g->lda, g->beta_dev, g->C,
                     g->ldc);
        cb.set_pointer_mode(blas, CUBLAS_POINTER_MODE_HOST); /* every other call passes host scalars */
        return s;
    }
    if (g->batch > 0)
        return cb.gemm_batched(blas, opb, opa, g->N, g->M, g->K, &g->alpha, g->B, g->ldb, g->sb, g->A, g->lda, g->sa,
                            &g->beta, g->C, g->ldc, g->sc, g->batch);
    return cb.gemm(blas, opb, opa, g->N, g->M, g->K, &g->alpha, g->B, g->ldb, g->A, g->lda, &g->beta, g->C, g->ldc);
}

static int run_gemm(const void *p) { return (int)issue_gemm(p); }

static void gemm(const gemm_record *g) {
    need_device("gemm");
    gemm_record *r = ag__record_begin(sizeof *r, run_gemm);
    if (r) {
        *r = *g;
        return;
    }
    cublasStatus_t s = issue_gemm(g);
    if (s != CUBLAS_STATUS_SUCCESS) ag__fatal("cublas", "gemm failed: status %d", (int)s);
}

void ag__cuda_gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda, const ag_real *B,
                   int ldb, ag_real beta, ag_real *C, int ldc) {
    gemm(&(gemm_record){.A = A, .B = B, .C = C, .alpha = alpha, .beta = beta, .ta = ta, .tb = tb, .M = M, .N = N,
                        .K = K, .lda = lda, .ldb = ldb, .ldc = ldc});
}

void ag__cuda_gemm_batched(bool ta, bool tb, int M, int N, int K, const ag_real *A, int lda, int64_t sa,
                           const ag_real *B, int ldb, int64_t sb, ag_real beta, ag_real *C, int ldc, int64_t sc,
                           int batch) {
    if (batch <= 0) return;
    gemm(&(gemm_record){.A = A, .B = B, .C = C, .sa = sa, .sb = sb, .sc = sc, .alpha = 1, .beta = beta, .ta = ta,
                        .tb = tb, .M = M, .N = N, .K = K, .lda = lda, .ldb = ldb, .ldc = ldc, .batch = batch});
}

void ag__cuda_gemm_rows_dev(bool ta, bool tb, int M, int N, int K, const ag_real *alpha, const ag_real *A,
                            const ag_real *B, const ag_real *beta, ag_real *C) {
    gemm(&(gemm_record){.A = A, .B = B, .C = C, .alpha_dev = alpha, .beta_dev = beta, .ta = ta, .tb = tb, .M = M,
                        .N = N, .K = K, .lda = ag__cuda_ld(ta ? M : K), .ldb = ag__cuda_ld(tb ? K : N),
                        .ldc = ag__cuda_ld(N), .dev_scalars = 1});
}

#else /* no CUDA in this build */

#define NO_CUDA "this attngrad was built without CUDA (configure found no nvcc and cuBLAS, or -Dcuda=disabled)"

bool ag__cuda_ready(char *why, size_t n) {
    if (why) snprintf(why, n, "%s", NO_CUDA);
    return false;
}
bool ag__cuda_cublas_loadable(char *why, size_t n) { return ag__cuda_ready(why, n); }
void *ag__cuda_malloc(size_t bytes, const char *what) {
    (void)bytes;
    ag__fatal(what, "%s", NO_CUDA);
}
void *ag__cuda_try_malloc(size_t bytes, const char *what) { return ag__cuda_malloc(bytes, what); }
void ag__cuda_free(void *p) { (void)p; }
void ag__cuda_prefer_device(int index) { (void)index; }
bool ag__cuda_use_device(int index, char *why, size_t n) {
    (void)index;
    return ag__cuda_ready(why, n);
}
int ag__cuda_device(unsigned char uuid[16]) {
    (void)uuid;
    ag__fatal("device", "%s", NO_CUDA);
}
void *ag__cuda_arena_alloc(size_t bytes) {
    (void)bytes;
    ag__fatal("arena", "%s", NO_CUDA);
}
void ag__cuda_arena_reset(void) {}
size_t ag__cuda_arena_high(void) { return 0; }
void ag__cuda_arena_reset_high(void) {}
int64_t ag__cuda_host_waits(void) { return 0; }
int64_t ag__cuda_launches(void) { return 0; }

void ag__cuda_graph_counts(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager_segments,
                           int64_t *short_segments) {
    *graph_launches = *graph_captures = *eager_segments = *short_segments = 0;
}
void ag_sync(void) {}
void ag_cuda_graphs(bool on) { (void)on; }
bool ag_cuda_graphs_on(void) { return false; }
void ag__cuda_arena_mark(size_t *pos, int *chunk) { *pos = 0, *chunk = 0; }
void ag__cuda_arena_rewind(size_t pos, int chunk) { (void)pos, (void)chunk; }
void ag__cuda_shutdown(void) {}
void ag__cuda_copy(void *dst, ag_device dst_dev, const void *src, ag_device src_dev, size_t bytes) {
    (void)dst, (void)dst_dev, (void)src, (void)src_dev, (void)bytes;
    ag__fatal("copy", "%s", NO_CUDA);
}
void ag__cuda_copy_rows(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows) {
    (void)dst, (void)dst_pitch, (void)src, (void)src_pitch, (void)width, (void)rows;
    ag__fatal("copy", "%s", NO_CUDA);
}
void ag__cuda_zero(void *p, size_t bytes) {
    (void)p, (void)bytes;
    ag__fatal("zero", "%s", NO_CUDA);
}
void ag__cuda_zero_reals(ag_real *const *x, const int64_t *n, int count) {
    (void)x, (void)n;
    if (count > 0) ag__fatal("zero", "%s", NO_CUDA);
}
void ag__cuda_check_launch(const char *op) { (void)op; }
void ag__cuda_gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda, const ag_real *B,
                   int ldb, ag_real beta, ag_real *C, int ldc) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)lda, (void)B, (void)ldb, (void)beta,
        (void)C, (void)ldc;
    ag__fatal("gemm", "%s", NO_CUDA);
}
void ag__cuda_gemm_batched(bool ta, bool tb, int M, int N, int K, const ag_real *A, int lda, int64_t sa,
                           const ag_real *B, int ldb, int64_t sb, ag_real beta, ag_real *C, int ldc, int64_t sc,
                           int batch) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)A, (void)lda, (void)sa, (void)B, (void)ldb, (void)sb,
        (void)beta, (void)C, (void)ldc, (void)sc, (void)batch;
    ag__fatal("gemm", "%s", NO_CUDA);
}

void ag__cuda_gemm_rows_dev(bool ta, bool tb, int M, int N, int K, const ag_real *alpha, const ag_real *A,
                            const ag_real *B, const ag_real *beta, ag_real *C) {
    (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)B, (void)beta, (void)C;
    ag__fatal("gemm", "%s", NO_CUDA);
}

#endif
