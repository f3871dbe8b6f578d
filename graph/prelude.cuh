/* prelude.cuh - what a .cu file needs of the engine's headers: the real
 * type, the scalar helpers of graph/internal.h, and launch geometry.  The
 * .cu files are C++ and never include attngrad.h or internal.h. */
#ifndef AG_CUDA_PRELUDE_CUH
#define AG_CUDA_PRELUDE_CUH

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kreal.h"

#define AG_HD __host__ __device__
typedef ag__kreal ag_real;

/* As graph/internal.h's, for either real type. */
AG_HD static inline ag_real ag__sigmoid(ag_real x) {
    if (x >= 0) return 1 / (1 + exp(-x));
    ag_real e = exp(x);
    return e / (1 + e);
}
AG_HD static inline ag_real ag__softplus(ag_real x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }

/* One thread an element, grid-stride: any n with a bounded grid. */
enum { AG_CUDA_THREADS = 256 };
static inline unsigned ag__cuda_blocks(int64_t n) {
    int64_t b = (n + AG_CUDA_THREADS - 1) / AG_CUDA_THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}
#define AG_CUDA_FOR(i, n) \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

/* Flat element i of a row-major 4-dim shape, mapped through two sets of
 * strides (two operands, or a copy's source and destination): *ia and *ib
 * are its offsets. */
template <typename Dim>
__device__ static inline void ag__offsets4(int64_t i, const Dim *shape, const int64_t *sa, const int64_t *sb,
                                           int64_t *ia, int64_t *ib) {
    int64_t a = 0, b = 0;
    for (int d = 3; d >= 0; d--) {
        int64_t c = i % shape[d];
        i /= shape[d];
        a += c * sa[d];
        b += c * sb[d];
    }
    *ia = a;
    *ib = b;
}

/* A warp per row: blocks of 32 x AG_CUDA_WARP_ROWS threads, threadIdx.y the
 * row within the block.  The warp reductions combine lanes in a fixed
 * butterfly order (the same bits every run), for float or double. */
enum { AG_CUDA_WARP_ROWS = 8 };
static inline unsigned ag__cuda_row_blocks(int64_t rows) {
    return (unsigned)((rows + AG_CUDA_WARP_ROWS - 1) / AG_CUDA_WARP_ROWS);
}
#define AG_CUDA_WARP_ROW(r, rows)                                            \
    int64_t r = (int64_t)blockIdx.x * AG_CUDA_WARP_ROWS + threadIdx.y;       \
    if (r >= (rows)) return
#define AG_CUDA_LANE ((int)threadIdx.x)
#define AG_CUDA_WARP_ROWS_LAUNCH(rows) ag__cuda_row_blocks(rows), dim3(32, AG_CUDA_WARP_ROWS), 0
template <typename T> __device__ static inline T ag__warp_sum(T v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
template <typename T> __device__ static inline T ag__warp_max(T v) {
    for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The sum of each thread's v over a block of THREADS threads (a power of
 * two), in every thread: a tree through part[THREADS], the kernel's
 * __shared__ array, in the same order every run (no atomics: the same bits
 * each time, which losses and metrics need).  A second sum through the
 * same part[] needs a __syncthreads() first: threads may still be reading
 * part[0] when thread 0 writes it anew. */
template <int THREADS, typename T> __device__ static inline T ag__block_sum(T *part, T v) {
    static_assert((THREADS & (THREADS - 1)) == 0, "a tree over a power of two");
    part[threadIdx.x] = v;
    __syncthreads();
    for (int stride = THREADS / 2; stride > 0; stride /= 2) {
        if ((int)threadIdx.x < stride) part[threadIdx.x] += part[threadIdx.x + stride];
        __syncthreads();
    }
    return part[0];
}

/* The engine's one stream (graph/cuda.c). */
extern "C" cudaStream_t ag__cuda_stream(void);
/* A counter in device memory, zero between kernels (graph/cuda.c): the
 * finished blocks of a kernel whose last block sums what all wrote. */
extern "C" unsigned *ag__cuda_block_tickets(void);
/* bytes from the host in the device's step arena: a staged copy that
 * does not wait (graph/device.c), for a launcher's table of arrays. */
extern "C" const void *ag__cuda_step_upload(const void *host, size_t bytes);

/* ---- launches: now, or recorded for a CUDA graph ----
 * Every kernel goes through ag__launch(kernel, grid, block, shared bytes,
 * args...).  Eagerly it is kernel<<<...>>>(args) on the engine's stream.
 * With CUDA graphs on (graph/cuda_graph.cu) the launch is recorded instead:
 * the kernel, its geometry and its arguments by value, in zeroed memory so
 * that equal launches are equal bytes; a segment of records then runs as
 * the graph captured from an identical segment, or eagerly. */
extern "C" void *ag__record_begin(size_t bytes, int (*run)(const void *));

/* kernel<<<grid, block, shared, stream>>>(args) on the engine's stream.
 * Under emulator/ (-Dgpu_emulator=true) a C++ compiler builds
 * this file, and the launch is the emulator's function. */
#ifdef AG_CUDA_EMULATOR
#define AG__LAUNCH_NOW(kernel, grid, block, shared, ...) \
    ag__emu_launch(kernel, grid, block, shared, ag__cuda_stream(), __VA_ARGS__)
#else
#define AG__LAUNCH_NOW(kernel, grid, block, shared, ...) kernel<<<grid, block, shared, ag__cuda_stream()>>>(__VA_ARGS__)
#endif

template <typename... P> struct ag__kernel_record {
    void (*kernel)(P...);
    dim3 grid, block;
    size_t shared;
    std::tuple<P...> args;
};

/* Issues a recorded launch; 0, or the launch's error. */
template <typename... P> static int ag__run_kernel_record(const void *p) {
    const ag__kernel_record<P...> *r = (const ag__kernel_record<P...> *)p;
    std::apply([r](const P &...a) { AG__LAUNCH_NOW(r->kernel, r->grid, r->block, r->shared, a...); }, r->args);
    return (int)cudaPeekAtLastError();
}

/* A record's bytes are its identity, so an argument type must have no
 * padding: a struct's padding holds whatever the caller's stack held, and
 * equal launches would differ in it and never replay.  The compiler checks
 * scalars and structs of integers and pointers; a struct with real members
 * (whose bytes are not unique: -0.0) opts in with a specialisation beside
 * an assertion of its size. */
template <typename T>
struct ag__no_padding
    : std::integral_constant<bool, std::is_floating_point<T>::value || std::has_unique_object_representations<T>::value> {
};

template <typename... P, typename... A>
static inline void ag__launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t shared, A &&...args) {
    static_assert((ag__no_padding<P>::value && ...), "a kernel argument type has padding bytes (see ag__no_padding)");
    static_assert(alignof(ag__kernel_record<P...>) <= 16, "records are 16-byte aligned");
    void *space = ag__record_begin(sizeof(ag__kernel_record<P...>), ag__run_kernel_record<P...>);
    if (!space) {
        AG__LAUNCH_NOW(kernel, grid, block, shared, std::forward<A>(args)...);
        return;
    }
    new (space) ag__kernel_record<P...>{kernel, grid, block, shared, std::tuple<P...>(std::forward<A>(args)...)};
}

#endif
