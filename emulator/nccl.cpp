/* nccl.cpp - nccl.h's calls for the emulated GPUs, carried over MPI.
 *
 * A collective runs when it is issued, after the work queued on the
 * emulated GPU before it, not when the host next waits as other queued
 * work does.  Why: the ranks are processes that wait at different places
 * (rank 0 alone writes checkpoints), so a collective left in one rank's
 * queue could meet the other rank already inside a host collective (an
 * MPI call of attngrad's own) and both would wait for ever, where a GPU
 * runs the collective on its own.  Run at issue, every rank meets the
 * collectives in program order, which is one order a GPU may run them in.
 *
 * What it costs: the emulated GPU catches up at every collective, so a
 * missing wait after one goes unseen in mpi_nccl (the other GPU tests,
 * which have no collectives, keep seeing it).  And two ranks that issue
 * an NCCL collective and an MPI one of their own in different orders
 * deadlock here, where NCCL would not; attngrad's ranks issue both kinds
 * in the same order.
 *
 * As NCCL: a communicator has one rank per GPU ("Duplicate GPU
 * detected"), and a failed call returns its error, with ncclGetLastError
 * saying what went wrong; stricter than NCCL, the buffers must be device
 * memory.  Not emulated (refused, said): half floats, ncclAvg, a
 * collective inside a stream capture. */
#include "nccl.h"

#include <mpi.h>

#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <unistd.h>
#include <vector>

/* emulator.cpp's */
cudaError_t ag__emu_run_now(cudaStream_t s, std::function<void()> f);
bool ag__emu_is_device_range(const void *p, size_t bytes);
void ag__emu_open_range(const void *p, size_t bytes);

struct ag__emu_nccl_comm {
    MPI_Comm mpi; /* the members, ordered by NCCL rank */
    int rank, nranks;
};

namespace {

char last_error[512]; /* of the last failed call, whatever its communicator (as NCCL's) */

ncclResult_t failed(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
ncclResult_t failed(ncclResult_t r, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return r;
}

/* The MPI type of an NCCL one, or MPI_DATATYPE_NULL where not emulated. */
MPI_Datatype mpi_type(ncclDataType_t t, size_t *bytes) {
    switch (t) {
    case ncclInt8: return *bytes = 1, MPI_INT8_T;
    case ncclUint8: return *bytes = 1, MPI_UINT8_T;
    case ncclInt32: return *bytes = 4, MPI_INT32_T;
    case ncclUint32: return *bytes = 4, MPI_UINT32_T;
    case ncclInt64: return *bytes = 8, MPI_INT64_T;
    case ncclUint64: return *bytes = 8, MPI_UINT64_T;
    case ncclFloat32: return *bytes = 4, MPI_FLOAT;
    case ncclFloat64: return *bytes = 8, MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

MPI_Op mpi_op(ncclRedOp_t op) {
    switch (op) {
    case ncclSum: return MPI_SUM;
    case ncclProd: return MPI_PROD;
    case ncclMax: return MPI_MAX;
    case ncclMin: return MPI_MIN;
    default: return MPI_OP_NULL;
    }
}

/* What each process tells the others when a communicator is made. */
struct member {
    ncclUniqueId id;
    int nranks, rank, device;
    char host[64];
};

/* Checks what a call's arguments share: the communicator, the type, each
 * buffer (count elements of device memory). */
ncclResult_t check_call(const char *call, ncclComm_t comm, ncclDataType_t t, size_t count, size_t *bytes,
                        MPI_Datatype *type, const void *send, const void *recv) {
    if (!comm) return failed(ncclInvalidArgument, "%s: the communicator is null", call);
    *type = mpi_type(t, bytes);
    if (*type == MPI_DATATYPE_NULL)
        return failed(ncclInvalidArgument, "%s: data type %d is not emulated (half floats are not)", call, (int)t);
    if (count > SIZE_MAX / *bytes) return failed(ncclInvalidArgument, "%s: count %zu overflows", call, count);
    const void *buffers[2] = {send, recv};
    const char *names[2] = {"sendbuff", "recvbuff"};
    for (int k = 0; k < 2 && count; k++)
        if (buffers[k] && !ag__emu_is_device_range(buffers[k], count * *bytes))
            return failed(ncclInvalidArgument,
                          "%s: %s %p is not %zu bytes of device memory (host memory, freed, or too short)", call,
                          names[k], buffers[k], count * *bytes);
    return ncclSuccess;
}

/* MPI counts are ints: a long buffer goes in pieces. */
template <typename F> void in_pieces(char *p, size_t count, size_t elem, F each) {
    const size_t most = INT_MAX / 8;
    for (size_t done = 0; done < count; done += most) {
        size_t n = count - done < most ? count - done : most;
        each(p + done * elem, (int)n);
    }
}

ncclResult_t run(const char *call, cudaStream_t stream, std::function<void()> f) {
    if (ag__emu_run_now(stream, std::move(f)) != cudaSuccess)
        return failed(ncclInvalidUsage, "%s in a stream capture is not emulated", call);
    return ncclSuccess;
}

} // namespace

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return failed(ncclInvalidArgument, "ncclGetUniqueId: id is null");
    memset(id, 0, sizeof *id);
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    snprintf(id->internal, sizeof id->internal, "agemu-nccl %s %ld %ld", host, (long)getpid(), (long)random());
    return ncclSuccess;
}

/* Every MPI rank calls it (attngrad's all do): the members are the ranks
 * that pass the same id. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    int mpi_up = 0;
    MPI_Initialized(&mpi_up);
    if (!mpi_up)
        return failed(ncclInvalidUsage,
                      "ncclCommInitRank: the emulated NCCL runs over MPI, and MPI is not initialized");
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return failed(ncclInvalidArgument, "ncclCommInitRank: rank %d of %d", rank, nranks);
    member me = {};
    me.id = id, me.nranks = nranks, me.rank = rank;
    if (cudaGetDevice(&me.device) != cudaSuccess)
        return failed(ncclUnhandledCudaError, "ncclCommInitRank: no current device");
    gethostname(me.host, sizeof me.host - 1);
    int world_size, world_rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    std::vector<member> all((size_t)world_size);
    MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all.data(), (int)sizeof me, MPI_BYTE, MPI_COMM_WORLD);
    /* the members: the world ranks with my id; the first of them names the group */
    int color = -1, count = 0;
    std::vector<int> by_rank((size_t)nranks, -1);
    ncclResult_t result = ncclSuccess;
    for (int w = 0; w < world_size; w++) {
        const member &m = all[(size_t)w];
        if (memcmp(&m.id, &id, sizeof id)) continue;
        if (color < 0) color = w;
        count++;
        if (m.nranks != nranks || m.rank < 0 || m.rank >= nranks || by_rank[(size_t)m.rank] >= 0) {
            result = failed(ncclInvalidArgument,
                            "ncclCommInitRank: MPI rank %d joins as rank %d of %d, which does not fit the others", w,
                            m.rank, m.nranks);
            continue;
        }
        by_rank[(size_t)m.rank] = w;
        for (int r = 0; r < nranks && result == ncclSuccess; r++) {
            int o = by_rank[(size_t)r];
            if (o >= 0 && o != w && all[(size_t)o].device == m.device && !strcmp(all[(size_t)o].host, m.host))
                result = failed(ncclInvalidUsage,
                                "Duplicate GPU detected : rank %d and rank %d both on CUDA device %d of %s", m.rank, r,
                                m.device, m.host);
        }
    }
    if (result == ncclSuccess && count != nranks)
        result = failed(ncclInvalidUsage, "ncclCommInitRank: %d ranks of %d joined", count, nranks);
    MPI_Comm mpi;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &mpi); /* collective: also on failure */
    if (result != ncclSuccess) {
        MPI_Comm_free(&mpi);
        return result;
    }
    ncclComm_t c = (ncclComm_t)calloc(1, sizeof *c);
    if (!c) return failed(ncclSystemError, "ncclCommInitRank: out of memory");
    c->mpi = mpi, c->rank = rank, c->nranks = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    cudaDeviceSynchronize(); /* its collectives have run (they all have: they run at issue) */
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm->mpi);
    free(comm);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
    size_t elem = 0;
    MPI_Datatype type;
    ncclResult_t r = check_call("ncclAllReduce", comm, datatype, count, &elem, &type, sendbuff, recvbuff);
    if (r != ncclSuccess) return r;
    MPI_Op mop = mpi_op(op);
    if (mop == MPI_OP_NULL)
        return failed(ncclInvalidArgument, "ncclAllReduce: reduction %d is not emulated (ncclAvg is not)", (int)op);
    if (!count) return ncclSuccess;
    return run("ncclAllReduce", stream, [=]() {
        ag__emu_open_range(sendbuff, count * elem);
        ag__emu_open_range(recvbuff, count * elem);
        bool in_place = sendbuff == recvbuff;
        char *send = (char *)sendbuff, *recv = (char *)recvbuff;
        in_pieces(recv, count, elem, [&](char *piece, int n) {
            const void *from = in_place ? MPI_IN_PLACE : send + (piece - recv);
            MPI_Allreduce(from, piece, n, type, mop, comm->mpi);
        });
    });
}

ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
    size_t elem = 0;
    MPI_Datatype type;
    bool at_root = comm && comm->rank == root;
    ncclResult_t r = check_call("ncclBroadcast", comm, datatype, count, &elem, &type, at_root ? sendbuff : nullptr,
                                recvbuff);
    if (r != ncclSuccess) return r;
    if (root < 0 || root >= comm->nranks)
        return failed(ncclInvalidArgument, "ncclBroadcast: root %d of %d ranks", root, comm->nranks);
    if (!count) return ncclSuccess;
    return run("ncclBroadcast", stream, [=]() {
        ag__emu_open_range(recvbuff, count * elem);
        if (at_root && sendbuff != recvbuff) {
            ag__emu_open_range(sendbuff, count * elem);
            memmove(recvbuff, sendbuff, count * elem);
        }
        in_pieces((char *)recvbuff, count, elem, [&](char *piece, int n) { MPI_Bcast(piece, n, type, root, comm->mpi); });
    });
}

const char *ncclGetErrorString(ncclResult_t result) {
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    default: return "unknown result code";
    }
}

/* NCCL's comm argument is unused: one last error for the process. */
int ag__emu_nccl_missing(char *why, size_t n) {
    const char *e = getenv("AG_CUDA_EMULATOR_NCCL_MISSING");
    if (!e || !*e) return 0;
    char *end = nullptr;
    long r = strtol(e, &end, 10);
    if (*end || r < 0) {
        fprintf(stderr, "AG_CUDA_EMULATOR_NCCL_MISSING=%s: expected an MPI rank\n", e);
        exit(2);
    }
    int me = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    if (me != r) return 0;
    snprintf(why, n, "NCCL could not be loaded: libnccl.so.2: cannot open shared object file (emulated: "
             "AG_CUDA_EMULATOR_NCCL_MISSING=%ld)", r);
    return 1;
}

const char *ncclGetLastError(ncclComm_t comm) {
    (void)comm;
    return last_error;
}

} // extern "C"
