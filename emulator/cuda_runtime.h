/* cuda_runtime.h - what a .cu file sees of CUDA under the emulator
 * (cuda_runtime_api.h says what that is): the runtime API, and in C++ the
 * device side.  A kernel is an ordinary function run once per thread;
 * threadIdx and friends are set for each thread; __syncthreads, __syncwarp
 * and the shuffles are barriers between the threads of a block, which run
 * as fibers on one core (emulator.cpp).  __shared__ memory is a function's
 * static: one copy, and blocks run one at a time. */
#ifndef AG_CUDA_EMULATOR_RUNTIME_H
#define AG_CUDA_EMULATOR_RUNTIME_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus

#include <cmath>
#include <cstring>
#include <functional>
#include <math.h> /* libstdc++'s: the float overloads of exp, fmax... in the global namespace, as CUDA's */
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static
#define __launch_bounds__(...) /* registers: the GPU's concern */

struct uint3 {
    unsigned x, y, z;
};

/* The running thread's coordinates (emulator.cpp sets them per fiber). */
extern uint3 threadIdx, blockIdx;
extern dim3 blockDim, gridDim;

/* Barriers among the running block's threads, and a lane's exchange slot
 * in its warp (8 bytes). */
void ag__emu_syncthreads(void);
void ag__emu_syncwarp(unsigned mask);
void *ag__emu_warp_slot(int lane);
int ag__emu_lane(void);

inline void __syncthreads() { ag__emu_syncthreads(); }
/* Blocks run one at a time, and a block's threads one at a time between
 * barriers: an atomic is a plain read-modify-write, and a write is seen
 * by every later thread and block as it is made. */
inline unsigned atomicAdd(unsigned *p, unsigned v) {
    unsigned old = *p;
    *p = old + v;
    return old;
}
inline void __threadfence() {}
template <typename T> inline T __ldcg(const T *p) { return *p; } /* a load past L1: there is none here */
inline void __syncwarp(unsigned mask = 0xffffffffu) { ag__emu_syncwarp(mask); }

/* Every lane writes its value, all meet, each reads its partner's, all meet
 * again before a slot can be written anew. */
template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8, "the emulator's shuffle moves up to 8 bytes");
    (void)width; /* the emulator's syncwarp refuses a partial mask; width < 32 is not used */
    int lane = ag__emu_lane();
    std::memcpy(ag__emu_warp_slot(lane), &v, sizeof v);
    ag__emu_syncwarp(mask);
    T r;
    std::memcpy(&r, ag__emu_warp_slot(lane ^ lane_mask), sizeof r);
    ag__emu_syncwarp(mask);
    return r;
}

/* kernel<<<grid, block, shared, stream>>>(args): the arguments converted to
 * the kernel's parameter types and kept by value until the launch runs
 * (launches run in stream order, when the host waits for them). */
void ag__emu_enqueue_kernel(cudaStream_t stream, const void *kernel, dim3 grid, dim3 block, size_t shared,
                           std::function<void()> thread_body);

/* A pointer argument must be null, device memory, or pinned host memory
 * (which the device reaches): a GPU faults on pageable host memory, which
 * a kernel here could read without complaint.  (Pointers inside struct
 * arguments are not seen.) */
void ag__emu_check_pointer_argument(const void *kernel, int index, const void *p);

template <typename T> inline void ag__emu_check_argument(const void *kernel, int index, const T &v) {
    if constexpr (std::is_pointer<T>::value) ag__emu_check_pointer_argument(kernel, index, (const void *)v);
}

template <typename Tuple, size_t... I>
inline void ag__emu_check_arguments(const void *kernel, const Tuple &t, std::index_sequence<I...>) {
    (ag__emu_check_argument(kernel, (int)I, std::get<I>(t)), ...);
}

template <typename... P, typename... A> inline void ag__emu_launch(void (*kernel)(P...), dim3 grid, dim3 block,
                                                                  size_t shared, cudaStream_t stream, A &&...args) {
    std::tuple<P...> kept(std::forward<A>(args)...);
    ag__emu_check_arguments((const void *)kernel, kept, std::index_sequence_for<P...>{});
    ag__emu_enqueue_kernel(stream, (const void *)kernel, grid, block, shared,
                          [kernel, kept]() { std::apply(kernel, kept); });
}

#endif /* __cplusplus */

#endif
