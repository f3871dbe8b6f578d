/* nccl.h - the part of NCCL attngrad calls (distributed/dist_nccl.c), answered
 * by emulator/nccl.cpp for the emulated GPUs of emulator.cpp,
 * so that `mpirun ... --device cuda` with AG_DIST_REDUCE=nccl runs in CI.
 *
 * The emulated NCCL carries its collectives over MPI (every MPI rank joins
 * the communicator it makes), since the ranks are processes and there is
 * no GPU between them; the real one, which attngrad links on a GPU
 * machine, has its own transports and is bootstrapped the same way (rank
 * 0's ncclUniqueId, broadcast over MPI).  As NCCL does, it refuses two
 * ranks on one GPU and a rank or root outside the communicator; stricter
 * than NCCL (which checks pointers only with NCCL_CHECK_POINTERS=1, and
 * lengths never), it refuses buffers that are not count elements of
 * device memory, where a GPU would fail later, or not at all.
 *
 * Where it differs from NCCL, beyond speed and transports:
 *   - every MPI rank must call ncclCommInitRank (it gathers over
 *     MPI_COMM_WORLD), and a rank that returns early from it with a bad
 *     argument leaves the others waiting (NCCL's bootstrap waits too);
 *   - ncclCommDestroy frees an MPI communicator, which is collective;
 *   - a collective runs when it is issued (nccl.cpp says why), so the
 *     work queued before it runs then too;
 *   - over more than 2 ranks, MPI does not promise every rank the same
 *     bits of a float sum, as NCCL does.
 *
 * Values as NCCL's where a program might print or compare them.  C and
 * C++. */
#ifndef AG_CUDA_EMULATOR_NCCL_H
#define AG_CUDA_EMULATOR_NCCL_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
} ncclResult_t;

typedef enum {
    ncclInt8 = 0, ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2, ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6, ncclHalf = 6,
    ncclFloat32 = 7, ncclFloat = 7,
    ncclFloat64 = 8, ncclDouble = 8,
} ncclDataType_t;

typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ag__emu_nccl_comm *ncclComm_t;

ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
const char *ncclGetErrorString(ncclResult_t result);
const char *ncclGetLastError(ncclComm_t comm);

/* Not NCCL's: whether this MPI rank's NCCL library is missing, for the
 * programs' open of it (distributed/dist_nccl.c), which the emulator links
 * instead.  AG_CUDA_EMULATOR_NCCL_MISSING=r makes rank r's missing, so a
 * job where one rank cannot open NCCL is tested without a machine set up
 * so; why then says what a failed dlopen would. */
int ag__emu_nccl_missing(char *why, size_t n);

#ifdef __cplusplus
}
#endif

#endif
