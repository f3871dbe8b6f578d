/* dist_nccl.c - dist.h's collectives on device buffers, on NCCL: the
 * gradient allreduce and the parameters' broadcast of `--device cuda`
 * training, one GPU per rank, enqueued on the engine's one stream so that
 * they run in order with the kernels around them.  Linked into the
 * programs beside dist_mpi.c when meson finds NCCL's header (with MPI and
 * CUDA); the communicator is bootstrapped over MPI, rank 0's ncclUniqueId
 * broadcast to the others. */
#include "dist.h"
#include "../graph/device.h" /* ag__cuda_open_library */

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>

cudaStream_t ag__cuda_stream(void); /* graph/cuda.c: the engine's stream */

/* ---- NCCL, opened at the first collective on GPU buffers ----
 * Linked, a CUDA build with MPI started only where libnccl is installed,
 * a CPU run's and a one-GPU run's too.  Opened here, such a build runs
 * everywhere the CUDA runtime is, and where a rank has no NCCL the ranks
 * reduce through host memory instead (dist.c asks every rank first).  The
 * calls' types come from nccl.h, so their signatures are checked at
 * compile time.  The emulator (emulator/nccl.cpp) is linked in. */
#define NCCL_CALLS(X)                                                                                  \
    X(get_last_error, ncclGetLastError) X(get_error_string, ncclGetErrorString)                        \
    X(all_reduce, ncclAllReduce) X(broadcast, ncclBroadcast) X(comm_destroy, ncclCommDestroy)          \
    X(get_unique_id, ncclGetUniqueId) X(comm_init_rank, ncclCommInitRank)

static struct {
#define FIELD(field, fn) __typeof__(fn) *field;
    NCCL_CALLS(FIELD)
#undef FIELD
} nc;

#ifdef AG_NCCL_EMULATED
bool ag__dist_nccl_loadable(char *why, size_t n) {
    if (ag__emu_nccl_missing(why, n)) return false;
#define TAKE(field, fn) nc.field = fn;
    NCCL_CALLS(TAKE)
#undef TAKE
    return true;
}
#else
#include <dlfcn.h>
#define STR_(x) #x
#define STR(x) STR_(x)

bool ag__dist_nccl_loadable(char *why, size_t n) {
    static void *lib;
    if (!lib && !(lib = ag__cuda_open_library("libnccl.so." STR(NCCL_MAJOR), "NCCL", why, n))) return false;
#define LOAD(field, fn)                                                                                \
    if (!(*(void **)&nc.field = dlsym(lib, #fn))) {                                                    \
        snprintf(why, n, "NCCL has no %s: not the NCCL %d this build compiled against", #fn, NCCL_MAJOR); \
        return false;                                                                                  \
    }
    NCCL_CALLS(LOAD)
#undef LOAD
    return true;
}
#endif

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
    const char *last = nc.get_last_error(comm); /* NULL comm: the last error of any */
    char more[512];
    snprintf(more, sizeof more, "%s%s (NCCL_DEBUG=WARN says more)", last && *last ? ": " : "", last ? last : "");
    fail(call, nc.get_error_string(r), more);
}

static void check_cuda(cudaError_t e, const char *call) {
    if (e == cudaSuccess) return;
    fail(call, cudaGetErrorString(e), "");
}

static void sum(void *dev, int64_t n, int elem_bytes) {
    ag__graph_flush();
    cudaStream_t s = ag__cuda_stream();
    check_cuda(cudaEventRecord(began, s), "cudaEventRecord");
    check(nc.all_reduce(dev, dev, (size_t)n, elem_bytes == 8 ? ncclFloat64 : ncclFloat32, ncclSum, comm, s),
          "ncclAllReduce");
    check_cuda(cudaEventRecord(ended, s), "cudaEventRecord");
}

static void bcast(void *dev, int64_t bytes) {
    ag__graph_flush();
    check(nc.broadcast(dev, dev, (size_t)bytes, ncclUint8, 0, comm, ag__cuda_stream()), "ncclBroadcast");
}

static double last_seconds(void) {
    float ms = 0;
    check_cuda(cudaEventSynchronize(ended), "cudaEventSynchronize");
    check_cuda(cudaEventElapsedTime(&ms, began, ended), "cudaEventElapsedTime");
    return 1e-3 * ms;
}

static void finalize(void) {
    check(nc.comm_destroy(comm), "ncclCommDestroy");
    cudaEventDestroy(began);
    cudaEventDestroy(ended);
    comm = NULL;
}

static const ag__dist_device device = {.sum = sum, .bcast = bcast, .last_seconds = last_seconds, .finalize = finalize};

const ag__dist_device *ag__dist_nccl_start(const ag__dist_backend *over) {
    mpi = over;
    ncclUniqueId id;
    if (mpi->rank == 0) check(nc.get_unique_id(&id), "ncclGetUniqueId");
    mpi->bcast(&id, sizeof id);
    check(nc.comm_init_rank(&comm, mpi->size, id, mpi->rank), "ncclCommInitRank");
    check_cuda(cudaEventCreate(&began), "cudaEventCreate");
    check_cuda(cudaEventCreate(&ended), "cudaEventCreate");
    return &device;
}
