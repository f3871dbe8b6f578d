/* test_nccl_emulator.cpp - the emulated NCCL of emulator/ checked
 * on its own, on 2 ranks (tests/test_mpi.sh's nccl_emulator mode runs it
 * under mpirun, with 2 emulated GPUs): the sums and broadcasts against
 * values worked out by hand, in stream order with the work queued before
 * them, and each refusal nccl.h promises (two ranks on one GPU, host
 * buffers, types and reductions not emulated, a bad root, a capture). */
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "check.h"

static int rank_, size_;
static cudaStream_t stream;

template <typename T> static T *device_copy(const std::vector<T> &host) {
    T *d = nullptr;
    cudaMalloc((void **)&d, host.size() * sizeof(T));
    cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
    return d;
}

template <typename T> static std::vector<T> host_copy(const T *d, size_t n) {
    std::vector<T> host(n);
    cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
}

static ncclComm_t make_comm(ncclResult_t *r) {
    ncclUniqueId id;
    if (rank_ == 0) ncclGetUniqueId(&id);
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    ncclComm_t comm = nullptr;
    *r = ncclCommInitRank(&comm, size_, id, rank_);
    return comm;
}

/* Rank r holds r + 1 + i/8 at i: the sum over ranks is worked out below. */
static void sums(ncclComm_t comm) {
    const size_t n = 1000;
    std::vector<double> x(n);
    std::vector<float> y(n);
    for (size_t i = 0; i < n; i++) x[i] = rank_ + 1 + i / 8.0, y[i] = (float)x[i];
    double *dx = device_copy(x);
    float *dy = device_copy(y), *dout = device_copy(std::vector<float>(n));
    CHECK(ncclAllReduce(dx, dx, n, ncclFloat64, ncclSum, comm, stream) == ncclSuccess, "in place, f64");
    CHECK(ncclAllReduce(dy, dout, n, ncclFloat32, ncclSum, comm, stream) == ncclSuccess, "out of place, f32");
    std::vector<double> gx = host_copy(dx, n);
    std::vector<float> gy = host_copy(dy, n), gout = host_copy(dout, n);
    double ranks = size_ * (size_ + 1) / 2.0; /* 1 + 2 + ... + size */
    int wrong = 0;
    for (size_t i = 0; i < n; i++) {
        double want = ranks + size_ * (i / 8.0);
        wrong += gx[i] != want || gout[i] != (float)want || gy[i] != y[i];
    }
    CHECK(wrong == 0, "%d of %zu sums wrong (or the out-of-place input changed)", wrong, n);

    /* stream order: the memset queued before the sum is in it, the copy
     * queued after sees it */
    cudaMemsetAsync(dx, 0, n * sizeof(double), stream);
    CHECK(ncclAllReduce(dx, dx, n, ncclFloat64, ncclMax, comm, stream) == ncclSuccess, "max");
    gx = host_copy(dx, n);
    CHECK(gx[0] == 0 && gx[n - 1] == 0, "the sum ran before the memset queued ahead of it: %g", gx[n - 1]);
    cudaFree(dx), cudaFree(dy), cudaFree(dout);
}

/* From the last rank, into another buffer than the root's own. */
static void broadcast(ncclComm_t comm) {
    const size_t n = 300;
    std::vector<unsigned char> mine(n), none(n, 7);
    for (size_t i = 0; i < n; i++) mine[i] = (unsigned char)(rank_ * 31 + i);
    unsigned char *src = device_copy(mine), *dst = device_copy(none);
    int root = size_ - 1;
    CHECK(ncclBroadcast(src, dst, n, ncclUint8, root, comm, stream) == ncclSuccess, "broadcast");
    std::vector<unsigned char> got = host_copy(dst, n);
    int wrong = 0;
    for (size_t i = 0; i < n; i++) wrong += got[i] != (unsigned char)(root * 31 + i);
    CHECK(wrong == 0, "rank %d: %d of %zu bytes not the root's", rank_, wrong, n);
    cudaFree(src), cudaFree(dst);
}

static void refusals(ncclComm_t comm) {
    double *d = device_copy(std::vector<double>(4, 1.0)), host[4] = {0};
    CHECK(ncclAllReduce(host, host, 4, ncclFloat64, ncclSum, comm, stream) == ncclInvalidArgument, "host memory");
    CHECK(strstr(ncclGetLastError(comm), "not 32 bytes of device memory"), "said: %s", ncclGetLastError(comm));
    CHECK(ncclAllReduce(d, d, 5, ncclFloat64, ncclSum, comm, stream) == ncclInvalidArgument, "past the end");
    CHECK(ncclAllReduce(d, d, 4, ncclFloat16, ncclSum, comm, stream) == ncclInvalidArgument, "half floats");
    CHECK(ncclAllReduce(d, d, 4, ncclFloat64, ncclAvg, comm, stream) == ncclInvalidArgument, "ncclAvg");
    CHECK(ncclBroadcast(d, d, 4, ncclFloat64, size_, comm, stream) == ncclInvalidArgument, "root out of range");
    CHECK(ncclAllReduce(d, d, 4, ncclFloat64, ncclSum, nullptr, stream) == ncclInvalidArgument, "no communicator");
    cudaGraph_t graph;
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal);
    CHECK(ncclAllReduce(d, d, 4, ncclFloat64, ncclSum, comm, stream) == ncclInvalidUsage, "in a capture");
    cudaStreamEndCapture(stream, &graph);
    cudaGraphDestroy(graph);
    cudaGetLastError();
    CHECK(host_copy(d, 4)[3] == 1.0, "a refused call changed the buffer");
    cudaFree(d);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    int devices = 0;
    cudaGetDeviceCount(&devices);
    if (size_ < 2 || devices < size_) {
        if (rank_ == 0) printf("SKIP: needs 2 ranks or more, each with an emulated GPU of its own\n");
        MPI_Finalize();
        return 77;
    }
    cudaStreamCreate(&stream);

    /* two ranks on one GPU: refused on every rank, as NCCL does */
    ncclResult_t r;
    cudaSetDevice(0);
    ncclComm_t shared = make_comm(&r);
    CHECK(r == ncclInvalidUsage && !shared, "two ranks on device 0: result %d", (int)r);
    CHECK(strstr(ncclGetLastError(nullptr), "Duplicate GPU detected"), "said: %s", ncclGetLastError(nullptr));

    cudaSetDevice(rank_);
    ncclComm_t comm = make_comm(&r);
    CHECK(r == ncclSuccess && comm, "a GPU per rank: %s", ncclGetLastError(nullptr));
    if (comm) {
        sums(comm);
        broadcast(comm);
        refusals(comm);
        CHECK(ncclCommDestroy(comm) == ncclSuccess, "destroy");
    }
    cudaStreamDestroy(stream);
    /* every rank's verdict: a failure on rank 1 fails the test */
    int failed = check_failed_, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    int rc = check_summary(rank_ == 0 ? "nccl_emulator rank 0" : "nccl_emulator rank 1");
    return any ? 1 : rc;
}
