/* test_cuda_emulator.cpp - the emulator of emulator/ checked on
 * its own (built with -Dgpu_emulator=true only): the GPU tests that run on
 * it are worth what it catches, so each thing it claims to catch is done
 * here on purpose and must be caught, and each thing it must get right
 * (barriers, shuffles, stream order, graphs, products) is checked against
 * a value worked out by hand.  The fatal cases run in a child process. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "check.h"

#define LAUNCH(kernel, grid, block, ...) ag__emu_launch(kernel, grid, block, 0, stream, __VA_ARGS__)

static cudaStream_t stream;

/* ---- kernels ---- */

__global__ void fill_kernel(float *x, float v, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = v + i;
}

/* A block's tree sum through shared memory: wrong without its barriers. */
__global__ void block_sum_kernel(const float *x, float *out) {
    __shared__ float part[256];
    part[threadIdx.x] = x[threadIdx.x];
    __syncthreads();
    for (int s = 128; s > 0; s /= 2) {
        if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *out = part[0];
}

/* Each warp's sum by butterfly shuffles, in every lane; threadIdx.y picks the warp. */
__global__ void warp_sum_kernel(const double *x, double *out) {
    int i = threadIdx.y * 32 + threadIdx.x;
    double v = x[i];
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    out[i] = v;
}

__global__ void write_past_end_kernel(float *x, int n) {
    if (threadIdx.x == 0) x[n + 512] = 1; /* 2 KiB past the end: in the guard page */
}

__global__ void exit_before_barrier_kernel(float *x) {
    if (threadIdx.x == 3) return;
    __syncthreads();
    x[threadIdx.x] = 1;
}

__global__ void partial_warp_shuffle_kernel(float *x) {
    x[threadIdx.x] = __shfl_xor_sync(0xffffffffu, x[threadIdx.x], 1);
}

__global__ void read_kernel(const float *x, float *y) { y[0] = x[0]; }

/* Each thread reads its left neighbour's write with no barrier between:
 * right when the threads run in index order, stale in reverse. */
__global__ void racy_shift_kernel(const float *x, float *y) {
    __shared__ float part[64];
    part[threadIdx.x] = x[threadIdx.x];
    /* the __syncthreads this needs is missing */
    y[threadIdx.x] = threadIdx.x ? part[threadIdx.x - 1] : 0;
}

/* Block b reads what block b - 1 wrote: no launch orders blocks. */
__global__ void racy_blocks_kernel(float *x) {
    if (threadIdx.x == 0) x[blockIdx.x + 1] = x[blockIdx.x] + 1;
}

/* Half a warp at __syncthreads, half at a shuffle: neither barrier can open. */
__global__ void deadlock_kernel(float *x) {
    if (threadIdx.x < 16) __syncthreads();
    else x[threadIdx.x - 16] = __shfl_xor_sync(0xffffffffu, (float)threadIdx.x, 1);
}

/* ---- helpers ---- */

template <typename T> static T *device(size_t n) {
    void *p = nullptr;
    cudaMalloc(&p, n * sizeof(T));
    return (T *)p;
}

/* Runs f in a child; true if the child died of a signal and its stderr
 * holds `says`. */
template <typename F> static bool dies_saying(F f, const char *says, std::string *what) {
    int fds[2];
    if (pipe(fds) != 0) return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        f();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(fds[1]);
    char buf[4096];
    ssize_t n;
    what->clear();
    while ((n = read(fds[0], buf, sizeof buf)) > 0) what->append(buf, (size_t)n);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return (WIFSIGNALED(status) || (WIFEXITED(status) && WEXITSTATUS(status) != 0)) &&
           what->find(says) != std::string::npos;
}

/* ---- checks ---- */

static void barriers_and_shuffles() {
    std::vector<float> h(256);
    for (int i = 0; i < 256; i++) h[i] = (float)(i % 7);
    float *x = device<float>(256), *out = device<float>(1), sum = 0;
    cudaMemcpy(x, h.data(), 256 * sizeof(float), cudaMemcpyHostToDevice);
    LAUNCH(block_sum_kernel, 1, 256, x, out);
    cudaMemcpy(&sum, out, sizeof sum, cudaMemcpyDeviceToHost);
    float want = 0;
    for (float v : h) want += v;
    CHECK(sum == want, "block sum with __syncthreads: %g, want %g", sum, want);

    std::vector<double> hd(256), got(256);
    for (int i = 0; i < 256; i++) hd[i] = i;
    double *xd = device<double>(256), *od = device<double>(256);
    cudaMemcpy(xd, hd.data(), 256 * sizeof(double), cudaMemcpyHostToDevice);
    LAUNCH(warp_sum_kernel, 1, dim3(32, 8), xd, od);
    cudaMemcpy(got.data(), od, 256 * sizeof(double), cudaMemcpyDeviceToHost);
    bool ok = true;
    for (int w = 0; w < 8; w++)
        for (int l = 0; l < 32; l++) ok &= got[w * 32 + l] == 32.0 * (32 * w) + 496; /* sum of 32w .. 32w+31 */
    CHECK(ok, "warp sums by __shfl_xor_sync");
    cudaFree(x), cudaFree(out), cudaFree(xd), cudaFree(od);
}

/* AG_CUDA_EMULATOR_ORDER: a race the forward order hides, reverse shows
 * (it is read when a kernel runs, so each case waits before it changes). */
static void run_orders() {
    std::vector<float> h(64), got(64);
    float *x = device<float>(64), *y = device<float>(64);
    int stale[2] = {0, 0}, chain[2] = {0, 0};
    for (int order = 0; order < 2; order++) {
        setenv("AG_CUDA_EMULATOR_ORDER", order ? "reverse" : "forward", 1);
        for (int i = 0; i < 64; i++) h[i] = (float)(i + 1 + 100 * order); /* not what the last run left in part[] */
        cudaMemcpy(x, h.data(), 64 * sizeof(float), cudaMemcpyHostToDevice);
        LAUNCH(racy_shift_kernel, 1, 64, x, y);
        cudaMemcpy(got.data(), y, 64 * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 1; i < 64; i++) stale[order] += got[i] != h[i - 1];
        float zero = 0;
        cudaMemcpy(x, &zero, sizeof zero, cudaMemcpyHostToDevice);
        LAUNCH(racy_blocks_kernel, 63, 32, x);
        cudaMemcpy(got.data(), x, 64 * sizeof(float), cudaMemcpyDeviceToHost);
        for (int i = 0; i < 64; i++) chain[order] += got[i] == (float)i;
    }
    unsetenv("AG_CUDA_EMULATOR_ORDER");
    CHECK(stale[0] == 0 && stale[1] == 63, "a missing __syncthreads: %d stale reads forward, %d in reverse (want 0, 63)",
          stale[0], stale[1]);
    CHECK(chain[0] == 64 && chain[1] < 64, "blocks depending on each other: %d of 64 forward, %d in reverse", chain[0],
          chain[1]);
    std::string said;
    CHECK(dies_saying([]() { setenv("AG_CUDA_EMULATOR_ORDER", "random", 1), LAUNCH(read_kernel, 1, 1, nullptr, nullptr); },
                      "AG_CUDA_EMULATOR_ORDER=random: expected forward or reverse", &said),
          "a run order not known: %s", said.c_str());
    cudaFree(x), cudaFree(y);
}

static void stream_order_and_fresh_memory() {
    float *x = device<float>(4), *pinned = nullptr;
    cudaMallocHost((void **)&pinned, 4 * sizeof(float));
    cudaMemcpy(pinned, x, 4 * sizeof(float), cudaMemcpyDeviceToHost); /* x never written */
    CHECK(std::isnan(pinned[0]) && std::isnan(pinned[3]), "fresh device memory reads as NaN: %g", pinned[0]);
    for (int i = 0; i < 4; i++) pinned[i] = -1;
    LAUNCH(fill_kernel, 1, 32, x, 10.0f, 4);
    cudaMemcpyAsync(pinned, x, 4 * sizeof(float), cudaMemcpyDeviceToHost, stream);
    CHECK(pinned[2] == -1, "work ran before the host waited: %g", pinned[2]);
    cudaStreamSynchronize(stream);
    CHECK(pinned[2] == 12, "after the wait: %g, want 12", pinned[2]);

    /* pinned staging is read when the copy runs, pageable when it is queued */
    pinned[0] = 1;
    cudaMemcpyAsync(x, pinned, sizeof(float), cudaMemcpyHostToDevice, stream);
    pinned[0] = 2; /* the host changed it before the copy ran: a bug the emulator must show */
    float pageable = 5;
    cudaMemcpyAsync(x + 1, &pageable, sizeof(float), cudaMemcpyHostToDevice, stream);
    pageable = 6;
    float back[2];
    cudaMemcpy(back, x, sizeof back, cudaMemcpyDeviceToHost);
    CHECK(back[0] == 2 && back[1] == 5, "pinned read late (%g, want 2), pageable staged at once (%g, want 5)", back[0],
          back[1]);

    cudaEvent_t a, b;
    cudaEventCreate(&a), cudaEventCreate(&b);
    cudaEventRecord(a, stream);
    LAUNCH(fill_kernel, 1, 32, x, 0.0f, 4);
    cudaEventRecord(b, stream);
    CHECK(cudaEventQuery(b) == cudaErrorNotReady, "an event queued behind work is not ready at once");
    CHECK(cudaEventQuery(b) == cudaErrorNotReady, "nor when asked again: asking is not waiting");
    CHECK(cudaEventSynchronize(b) == cudaSuccess && cudaEventQuery(b) == cudaSuccess, "then it is");
    float ms = -1;
    CHECK(cudaEventElapsedTime(&ms, a, b) == cudaSuccess && ms >= 0, "elapsed time %g", ms);
    cudaEventDestroy(a), cudaEventDestroy(b);
    cudaFreeHost(pinned);
    cudaFree(x);
}

static void errors() {
    float *x = device<float>(16);
    cudaGetLastError();
    LAUNCH(fill_kernel, 1, 2048, x, 0.0f, 16);
    CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration, "2048 threads a block refused");
    CHECK(cudaGetLastError() == cudaSuccess, "the launch error is not sticky");
    float h[32];
    CHECK(cudaMemcpy(h, x, 32 * sizeof(float), cudaMemcpyDeviceToHost) == cudaErrorInvalidValue,
          "a copy past the allocation refused");
    CHECK(cudaMemcpy(x, h, 4, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue, "a copy of the wrong kind refused");
    CHECK(cudaMemsetAsync(x + 8, 0, 9 * sizeof(float), stream) == cudaErrorInvalidValue, "a memset past the end");
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    void *huge = nullptr;
    CHECK(cudaMalloc(&huge, total + 1) == cudaErrorMemoryAllocation, "more than the device holds refused");
    cudaGetLastError();
    cudaFree(x);
}

static void graphs() {
    float *x = device<float>(4), h[4];
    LAUNCH(fill_kernel, 1, 32, x, 0.0f, 4);
    cudaStreamSynchronize(stream);
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess, "capture begins");
    LAUNCH(fill_kernel, 1, 32, x, 100.0f, 4);
    CHECK(cudaMemsetAsync(x + 3, 0, sizeof(float), stream) == cudaSuccess, "a memset is captured");
    cudaGraph_t g = nullptr;
    CHECK(cudaStreamEndCapture(stream, &g) == cudaSuccess && g, "capture ends");
    cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[1] == 1, "captured work does not run: %g", h[1]);
    cudaGraphExec_t exec = nullptr;
    cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    cudaGraphLaunch(exec, stream);
    cudaMemcpy(h, x, sizeof h, cudaMemcpyDeviceToHost);
    CHECK(h[1] == 101 && h[3] == 0, "a graph launch runs it: %g %g", h[1], h[3]);
    cudaGraphExecDestroy(exec);

    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    CHECK(cudaStreamSynchronize(stream) == cudaErrorStreamCaptureUnsupported, "a wait inside a capture refused");
    void *p = nullptr;
    CHECK(cudaMalloc(&p, 16) == cudaErrorStreamCaptureUnsupported, "cudaMalloc inside a capture refused");
    CHECK(cudaMemcpyAsync(x, h, sizeof h, cudaMemcpyHostToDevice, stream) == cudaErrorStreamCaptureUnsupported,
          "a copy from pageable memory inside a capture refused");
    CHECK(cudaStreamEndCapture(stream, &g) == cudaErrorStreamCaptureInvalidated && !g, "the capture is invalidated");
    cudaGetLastError();
    cudaFree(x);
}

static void products() {
    /* column-major: A 2x3, B 3x2, C = A B */
    float ha[6] = {1, 4, 2, 5, 3, 6}, hb[6] = {7, 9, 11, 8, 10, 12}, hc[4];
    float *a = device<float>(6), *b = device<float>(6), *c = device<float>(4);
    cudaMemcpy(a, ha, sizeof ha, cudaMemcpyHostToDevice);
    cudaMemcpy(b, hb, sizeof hb, cudaMemcpyHostToDevice);
    cublasHandle_t h;
    cublasCreate(&h);
    cublasSetStream(h, stream);
    float one = 1, zero = 0;
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &one, a, 2, b, 3, &zero, c, 2) == CUBLAS_STATUS_SUCCESS,
          "sgemm queued");
    cudaMemcpy(hc, c, sizeof hc, cudaMemcpyDeviceToHost);
    CHECK(hc[0] == 58 && hc[1] == 139 && hc[2] == 64 && hc[3] == 154, "sgemm: %g %g %g %g", hc[0], hc[1], hc[2], hc[3]);
    CHECK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 3, 3, &one, a, 2, b, 3, &zero, c, 2) ==
              CUBLAS_STATUS_INVALID_VALUE,
          "a product past its allocations refused");
    cublasDestroy(h);
    cudaFree(a), cudaFree(b), cudaFree(c);

    /* a product large enough for the BLAS's threads, into fresh (NaN) memory:
     * pages opened by one thread while another writes would lose writes */
    enum { K = 384 };
    std::vector<float> ones(K * K, 1.0f), out(K * K);
    float *x = device<float>(K * K), *y = device<float>(K * K), *z = device<float>(K * K);
    cudaMemcpy(x, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(y, ones.data(), ones.size() * sizeof(float), cudaMemcpyHostToDevice);
    cublasCreate(&h);
    cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_T, K, K, K, &one, x, K, y, K, &zero, z, K);
    cudaMemcpy(out.data(), z, out.size() * sizeof(float), cudaMemcpyDeviceToHost);
    int wrong = 0;
    for (float v : out) wrong += v != (float)K;
    CHECK(!wrong, "a %dx%dx%d product into fresh memory: %d of %d entries wrong", K, K, K, wrong, K * K);
    cublasDestroy(h);
    cudaFree(x), cudaFree(y), cudaFree(z);
}

static void caught() {
    std::string said;
    float *x = device<float>(16);
    CHECK(dies_saying([&] { printf("%g", *(volatile float *)x); }, "the host touched device memory", &said),
          "a host read of device memory: %s", said.c_str());
    CHECK(dies_saying([&] { LAUNCH(write_past_end_kernel, 1, 32, x, 16); }, "ran past the end", &said),
          "a kernel writing past its allocation: %s", said.c_str());
    CHECK(dies_saying([&] { LAUNCH(exit_before_barrier_kernel, 1, 32, x); }, "have exited", &said),
          "a thread exiting before __syncthreads: %s", said.c_str());
    CHECK(dies_saying([&] { LAUNCH(partial_warp_shuffle_kernel, 1, 16, x); }, "undefined on a GPU", &said),
          "a full-mask shuffle in a 16-thread block: %s", said.c_str());
    CHECK(dies_saying([&] { LAUNCH(deadlock_kernel, 1, 32, x); }, "deadlock", &said),
          "threads waiting at different barriers: %s", said.c_str());
    float host[4];
    CHECK(dies_saying([&] { LAUNCH(read_kernel, 1, 1, host, x); }, "neither a live device allocation", &said),
          "a kernel given a pointer to host memory: %s", said.c_str());
    float *y = device<float>(1);
    cudaFree(x);
    CHECK(dies_saying([&] { LAUNCH(read_kernel, 1, 1, x, y); }, "neither a live device allocation", &said),
          "a kernel given freed memory: %s", said.c_str());
    cudaFree(y);
}

int main() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1 || cudaSetDevice(0) != cudaSuccess) {
        printf("no emulated device\n");
        return 1;
    }
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    barriers_and_shuffles();
    run_orders();
    stream_order_and_fresh_memory();
    errors();
    graphs();
    products();
    caught();
    cudaStreamDestroy(stream);
    return check_summary("test_cuda_emulator");
}
