/* device.h - device memory as the engine sees it: the CUDA runtime and
 * cuBLAS (graph/cuda.c), the step's device arena, and the chunked bump
 * allocator both arenas are made of (graph/bump.c).  In a build without
 * CUDA every function exists: ag__cuda_ready() says why there is no GPU
 * and the rest are never reached, so no caller needs an #ifdef. */
#ifndef AG_DEVICE_H
#define AG_DEVICE_H

#include "internal.h"

/* ---- a chunked bump allocator over any memory (graph/bump.c) ----
 * Allocations are aligned bumps in the current chunk; a step that does not
 * fit spills into a new chunk, and the reset at the step's end replaces
 * several chunks by one of their combined size, so the next step of the
 * same shapes fits in one chunk and allocates nothing.  alloc returns NULL
 * on failure (the caller reports it). */
enum { AG_BUMP_MAX_CHUNKS = 64 };
typedef struct {
    void *(*alloc)(size_t bytes, void *ctx);
    void (*release)(void *p, void *ctx);
    void *ctx;
    size_t align, min_chunk;
    struct {
        char *base;
        size_t cap, used;
    } chunk[AG_BUMP_MAX_CHUNKS];
    int n, cur;
    size_t step_used, high, reserved; /* this step's bytes, the most any step took, all chunks' bytes */
    int64_t allocs, releases;          /* calls of alloc and release, for tests and the memory report */
} ag__bump;

void *ag__bump_alloc(ag__bump *a, size_t bytes); /* NULL when alloc failed */
void ag__bump_reset(ag__bump *a);                /* end of step: rewind, coalesce */
void ag__bump_release_all(ag__bump *a);
/* ag_mark/ag_rewind for a bump arena: back to where mark was. */
void ag__bump_mark(const ag__bump *a, size_t *pos, int *chunk);
void ag__bump_rewind(ag__bump *a, size_t pos, int chunk);

/* ---- the CUDA runtime ---- */
/* true when a CUDA device can run kernels; else false, why says what is
 * missing ("built without CUDA", "no CUDA device", driver/runtime versions). */
bool ag__cuda_ready(char *why, size_t n);
/* cuBLAS, which a CUDA build opens at the first GPU use, can be opened and has
 * every call the build makes (no GPU needed); false with why, else. */
bool ag__cuda_cublas_loadable(char *why, size_t n);
/* dlopen of a CUDA library the build does not link (cuBLAS, NCCL), `name`
 * with its major version ("libcublas.so.13"): on the loader's path, else
 * beside the CUDA runtime this program was linked to (found through its
 * runpath, say, where the library is not through the loader's).  NULL with
 * why ("<what> could not be loaded: ...") where neither has it.  Only in a
 * build with the real CUDA runtime, not the emulator, which links both. */
void *ag__cuda_open_library(const char *name, const char *what, char *why, size_t n);
/* The device to start on: this index modulo the devices visible (a rank's
 * local index under mpirun, distributed/dist.c); 0 unless said.  Only before the
 * runtime starts: afterwards the device in use stays. */
void ag__cuda_prefer_device(int index);
/* Starts the runtime on device `index` of those visible, exactly (no
 * modulo): false with why when there is no such device, or the runtime
 * already runs on another. */
bool ag__cuda_use_device(int index, char *why, size_t n);
/* The device in use (its index among those visible) and its UUID, which
 * tells ranks whether they share one. */
int ag__cuda_device(unsigned char uuid[16]);
/* Device memory for parameters (persistent); fatal naming what and the
 * sizes when the device is full. */
void *ag__cuda_malloc(size_t bytes, const char *what);
void *ag__cuda_try_malloc(size_t bytes, const char *what); /* NULL where the device has no room */
unsigned *ag__cuda_block_tickets(void); /* graph/prelude.cuh */
void ag__cuda_free(void *p);
/* The step's device arena: 256-byte aligned, rewound by ag_step_end(). */
void *ag__cuda_arena_alloc(size_t bytes);
void ag__cuda_arena_reset(void);
size_t ag__cuda_arena_high(void); /* the most bytes a step has taken */
void ag__cuda_arena_reset_high(void); /* that most from what the step holds now */
int64_t ag__cuda_host_waits(void); /* times the host waited for the GPU (reads, ag_sync, a staging arena) */
int64_t ag__cuda_launches(void);   /* kernels, cuBLAS calls, copies and fills put on the stream */
int64_t ag__cuda_kept_uploads(void); /* uploads that found their bytes kept on the GPU (no copy) */
void ag__cuda_graph_counts(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager_segments,
                           int64_t *short_segments);
void ag__cuda_arena_mark(size_t *pos, int *chunk);
void ag__cuda_arena_rewind(size_t pos, int chunk);
void ag__cuda_shutdown(void);
/* Copies between host and device memory on the engine's stream; a copy to
 * the host waits for it (the only synchronisation, where values are read). */
void ag__cuda_copy(void *dst, ag_device dst_dev, const void *src, ag_device src_dev, size_t bytes);
/* rows blocks of width bytes, each from src + i src_pitch to dst + i
 * dst_pitch, device to device in stream order (one cudaMemcpy2DAsync:
 * a batch's rows into a buffer's strided slots, ag__buffer_write_rows). */
void ag__cuda_copy_rows(void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width, size_t rows);
/* ag_buffer_write for a batch: src [R, ...] (contiguous) as R rows of
 * size / R reals, row r into elements [at + r stride, ... + size / R) of b;
 * one copy on the GPU.  Misuse is named as ag_buffer_write's. */
void ag__buffer_write_rows(ag_buffer *b, int64_t at, int64_t stride, const ag_tensor *src);
void ag__cuda_zero(void *p, size_t bytes);
/* count device arrays of n[i] reals zeroed in one launch (graph/cuda_zero.cu);
 * the pointer and length arrays in host memory. */
void ag__cuda_zero_reals(ag_real *const *x, const int64_t *n, int count);
/* C = alpha op(A) op(B) + beta C on cuBLAS, row-major as ag__gemm. */
void ag__cuda_gemm(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A, int lda, const ag_real *B,
                   int ldb, ag_real beta, ag_real *C, int ldc);
/* Strided-batched form: batch products at A + i sa, B + i sb, C + i sc. */
void ag__cuda_gemm_batched(bool ta, bool tb, int M, int N, int K, const ag_real *A, int lda, int64_t sa,
                           const ag_real *B, int ldb, int64_t sb, ag_real beta, ag_real *C, int ldc, int64_t sc,
                           int batch);
/* ag__cuda_gemm on contiguous row-major operands, leading dims as ag__gemm
 * takes them (A [M, K], or [K, M] when ta; B [K, N], or [N, K] when tb). */
static inline int ag__cuda_ld(int n) { return n > 0 ? n : 1; } /* cuBLAS wants >= 1 even for empty operands */
static inline void ag__cuda_gemm_rows(bool ta, bool tb, int M, int N, int K, ag_real alpha, const ag_real *A,
                                      const ag_real *B, ag_real beta, ag_real *C) {
    ag__cuda_gemm(ta, tb, M, N, K, alpha, A, ag__cuda_ld(ta ? M : K), B, ag__cuda_ld(tb ? K : N), beta, C,
                  ag__cuda_ld(N));
}
/* The same with alpha and beta in device memory: a factor that a kernel
 * computed (dL/dloss / rows) scales the product with no copy to the host. */
void ag__cuda_gemm_rows_dev(bool ta, bool tb, int M, int N, int K, const ag_real *alpha, const ag_real *A,
                            const ag_real *B, const ag_real *beta, ag_real *C);
/* After launching kernels from op: a launch error is a programmer error
 * naming the op (kernels report no other errors). */
void ag__cuda_check_launch(const char *op);

/* ---- CUDA graphs (graph/cuda_graph.cu; ag_cuda_graphs) ----
 * record_begin: zeroed room for a launch's arguments, which run issues
 * when the segment runs (never failing the process: a capture may be under
 * way), or NULL when graphs are off (issue it now);
 * record_label: the op of the launches just recorded; graph_flush: run
 * what was recorded, as a cached graph or eagerly (before any wait, read
 * or step end). */
void *ag__record_begin(size_t bytes, int (*run)(const void *)); /* run: 0, or an error code */
void ag__record_label(const char *op);
void ag__graph_flush(void);
void ag__graph_enable(bool on);
bool ag__graph_enabled(void);
void ag__graph_stats(int64_t *graph_launches, int64_t *graph_captures, int64_t *eager_segments,
                     int64_t *short_segments);
/* Operations put on the stream so far (ag__record_begin counts them; a copy
 * the host waits for, which is not recorded, says so with count_launch). */
void ag__count_launch(void);
int64_t ag__launches(void);
void ag__graph_release(void);
size_t ag__graph_take(char *out, size_t cap); /* tests: the recorded bytes, dropped unrun */

/* ---- tensors on a device (graph/device.c, graph/tensor.c) ---- */
/* d is a device this process can use; fatal, naming op and why, if not. */
void ag__need_device(const char *op, ag_device d);
/* A zero-filled step tensor on the CPU, whatever the current device. */
ag_tensor *ag__zeros(int ndim, const int *shape);
/* A host tensor moved to the current device (itself when that is the CPU). */
ag_tensor *ag__on_current(ag_tensor *host);
/* An uninitialised step tensor on dev (ag__empty for the CPU). */
ag_tensor *ag__empty_on(ag_device dev, int ndim, const int *shape);
/* n int32 values from the host (ids, labels, lengths) in the device step
 * arena, for an op's kernels; the host array may change once this returns
 * (a pageable copy is staged before cudaMemcpyAsync returns). */
const int32_t *ag__to_device_i32(const int32_t *host, int64_t n);
/* Memory on a device for ops and optimizers, whatever the device: */
/* Step memory on a device (the step arena of the CPU or of the GPU), and n
 * int32 values from the host copied into it: an op's lengths or labels,
 * kept for its backward (the caller's array may change before it runs). */
void *ag__step_alloc_on(ag_device dev, size_t bytes);
const int32_t *ag__step_i32_on(ag_device dev, const int32_t *host, int64_t n);
/* The same, but the caller's room (room_bytes of host memory) where dev is
 * the CPU and it fits: a small scratch that leaves the arena alone. */
void *ag__step_room_on(ag_device dev, void *room, size_t room_bytes, size_t bytes);
/* bytes from the host in the device's step memory (the host's own on the
 * CPU): a staged copy that does not wait for the GPU. */
const void *ag__step_copy_on(ag_device dev, const void *host, size_t bytes);
/* ag__step_copy_on(AG_CUDA, ...), for a CUDA table's launcher that sends
 * its own small table (graph/prelude.cuh declares it for the .cu files). */
const void *ag__cuda_step_upload(const void *host, size_t bytes);
/* Bytes from the host that the GPU only reads, at least until the step
 * ends: a kept copy when the same bytes went up before and are still kept
 * (no copy at all), else a staged copy (graph/cuda.c says why that is
 * safe).  Small tables, lengths, ids: what repeats within or across steps. */
const void *ag__cuda_upload_const(const void *host, size_t bytes);
/* graph/cuda_uploads.c's part in graph/cuda.c's step: the step's end (its
 * slots and memo let go), the arena rewound, the runtime shut down; and
 * whether AG_CUDA_EXACT_ALLOC gives every allocation its own (then every
 * upload is its own too). */
void ag__cuda_uploads_step_end(void);
void ag__cuda_uploads_rewound(void);
void ag__cuda_uploads_release(void);
bool ag__cuda_exact_alloc(void);
/* A copy of bytes from the host in the device's step memory on every
 * device (at least one byte): what an op keeps for its backward. */
void *ag__step_dup_on(ag_device dev, const void *host, size_t bytes);

/* bytes at src on dev into host memory (a copy that waits on the GPU), and
 * host bytes to dst on dev. */
void ag__read_on(ag_device dev, void *host, const void *src, size_t bytes);
void ag__write_on(ag_device dev, void *dst, const void *host, size_t bytes);

/* Zeroed memory that outlives the step (an optimizer's state) on a
 * device, `what` naming it when the device is full; and its release. */
void *ag__zeros_kept_on(ag_device dev, size_t bytes, const char *what);
void *ag__try_zeros_kept_on(ag_device dev, size_t bytes, const char *what); /* NULL where there is no room */
void ag__free_kept_on(ag_device dev, void *p);

/* After kernels that no op records (the optimizers' updates): a launch
 * error is a programmer error naming op (ops record theirs in ag__record). */
void ag__kernels_done(const char *op, ag_device dev);

/* ag_st_add of n reals at data on dev: a GPU array is copied to the host,
 * and the copy freed with the writer (io/safetensors.c). */
void ag__st_add_real(ag_st_writer *w, const char *name, int ndim, const int *shape, const ag_real *data,
                     ag_device dev);
/* The first element of x[0..n) on dev that is inf or NaN (its value in
 * *value), or -1.  A GPU array is scanned in a host copy: for error paths
 * and anomaly mode, not steady-state steps. */
int64_t ag__first_nonfinite(const ag_real *x, int64_t n, ag_device dev, double *value);
/* For ops that have a CUDA implementation: a and b (may be NULL) on the
 * same device, which is returned; mixing is fatal, naming both devices. */
ag_device ag__check_same_device(const char *op, const ag_tensor *a, const ag_tensor *b);

#endif
