/* dist_mpi.c - dist.h's backend on MPI (Open MPI or MPICH), linked into the
 * programs that train across processes when meson finds MPI.  Every call is
 * on MPI_COMM_WORLD, whose default error handler (MPI_ERRORS_ARE_FATAL)
 * ends the whole job when a peer dies or a transfer fails: no rank waits
 * forever on one that is gone. */
#include "dist.h"

#include <limits.h>
#include <mpi.h>

/* MPI counts are int: long buffers go in pieces. */
enum { PIECE = INT_MAX / 8 * 8 };

static void sum(void *buf, int64_t n, int elem_bytes) {
    MPI_Datatype type = elem_bytes == 8 ? MPI_DOUBLE : MPI_FLOAT;
    for (int64_t i = 0; i < n; i += PIECE) {
        int64_t k = n - i < PIECE ? n - i : PIECE;
        MPI_Allreduce(MPI_IN_PLACE, (char *)buf + i * elem_bytes, (int)k, type, MPI_SUM, MPI_COMM_WORLD);
    }
}

static void bcast(void *buf, int64_t bytes) {
    for (int64_t i = 0; i < bytes; i += PIECE) {
        int64_t k = bytes - i < PIECE ? bytes - i : PIECE;
        MPI_Bcast((char *)buf + i, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
}

static void gather_doubles(double *all, const int *counts, const int *displs) {
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, counts, displs, MPI_DOUBLE, MPI_COMM_WORLD);
}

static void allgather(void *all, int64_t bytes_each) {
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, (int)bytes_each, MPI_BYTE, MPI_COMM_WORLD);
}

static void dist_abort(int code) { MPI_Abort(MPI_COMM_WORLD, code); }

static void finalize(void) { MPI_Finalize(); }

static ag__dist_backend mpi = {.sum = sum, .bcast = bcast, .gather_doubles = gather_doubles, .allgather = allgather,
                              .abort = dist_abort, .finalize = finalize};

const ag__dist_backend *ag__dist_mpi_start(void) {
    MPI_Init(NULL, NULL);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi.size);
    MPI_Comm local; /* the ranks sharing this machine's memory */
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &mpi.local_rank);
    MPI_Comm_size(local, &mpi.local_size);
    MPI_Comm_free(&local);
    return &mpi;
}
