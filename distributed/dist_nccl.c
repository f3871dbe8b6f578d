/* dist_nccl.c - dist.h's collectives on device buffers, on NCCL: the
 * gradient allreduce and the parameters' broadcast of `--device cuda`
 * training, one GPU per rank, enqueued on the engine's one stream so that
 * they run in order with the kernels around them.  Linked into the
 * programs beside dist_mpi.c when meson finds NCCL (with MPI and CUDA);
 * the communicator is bootstrapped over MPI, rank 0's ncclUniqueId
 * broadcast to the others. */
#include "dist.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

cudaStream_t ag__cuda_stream(void); /* graph/cuda.c: the engine's stream */
void ag__graph_flush(void);         /* graph/cuda_graph.cu: recorded launches run before a collective */

static ncclComm_t comm;
static cudaEvent_t began, ended; /* around the last sum: its time on the GPU */
/* The MPI backend this was started over: its abort ends the job, and its
 * rank and size name this rank in messages (dist.c's calls are not used
 * here, so that dist.c alone knows of this file, through a weak reference). */
static const ag__dist_backend *mpi;

static void fail(const char *call, const char *what, const char *more) {
    fprintf(stderr, "attngrad: rank %d of %d: %s failed: %s%s\n", mpi->rank, mpi->size, call, what, more);
    mpi->abort(1);
}

/* A failed call ends the job: the other ranks would wait for this one. */
static void check(ncclResult_t r, const char *call) {
    if (r == ncclSuccess) return;
    const char *last = ncclGetLastError(comm); /* NULL comm: the last error of any */
    char more[512];
    snprintf(more, sizeof more, "%s%s (NCCL_DEBUG=WARN says more)", last && *last ? ": " : "", last ? last : "");
    fail(call, ncclGetErrorString(r), more);
}

static void check_cuda(cudaError_t e, const char *call) {
    if (e == cudaSuccess) return;
    fail(call, cudaGetErrorString(e), "");
}

static void sum(void *dev, int64_t n, int elem_bytes) {
    ag__graph_flush();
    cudaStream_t s = ag__cuda_stream();
    check_cuda(cudaEventRecord(began, s), "cudaEventRecord");
    check(ncclAllReduce(dev, dev, (size_t)n, elem_bytes == 8 ? ncclFloat64 : ncclFloat32, ncclSum, comm, s),
          "ncclAllReduce");
    check_cuda(cudaEventRecord(ended, s), "cudaEventRecord");
}

static void bcast(void *dev, int64_t bytes) {
    ag__graph_flush();
    check(ncclBroadcast(dev, dev, (size_t)bytes, ncclUint8, 0, comm, ag__cuda_stream()), "ncclBroadcast");
}

static double last_seconds(void) {
    float ms = 0;
    check_cuda(cudaEventSynchronize(ended), "cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, began, ended), "cudaEventElapsedTime");
    return 1e-3 * ms;
}

static void finalize(void) {
    check(ncclCommDestroy(comm), "ncclCommDestroy");
    cudaEventDestroy(began);
    cudaEventDestroy(ended);
    comm = NULL;
}

static const ag__dist_device device = {.sum = sum, .bcast = bcast, .last_seconds = last_seconds, .finalize = finalize};

const ag__dist_device *ag__dist_nccl_start(const ag__dist_backend *over) {
    mpi = over;
    ncclUniqueId id;
    if (mpi->rank == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    mpi->bcast(&id, sizeof id);
    check(ncclCommInitRank(&comm, mpi->size, id, mpi->rank), "ncclCommInitRank");
    check_cuda(cudaEventCreate(&began), "cudaEventCreate");
    check_cuda(cudaEventCreate(&ended), "cudaEventCreate");
    return &device;
}
