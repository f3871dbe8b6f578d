/* dist.h - data-parallel training across processes (MPI).
 *
 *   mpirun -np 4 attngrad train --model mtsa --data D ...
 *
 * Each of the N processes (ranks) holds the whole model and data; every
 * global batch (the model's batch size, the same sequence on every rank) is
 * split by rows, rank r taking a contiguous share (ag__dist_share).  A rank
 * runs forward and backward on its share, and ag__dist_reduce_grads sums
 * the gradients with one MPI_Allreduce over a flat buffer, each weighted
 * by the rank's share of the examples (LM: of the target tokens), so that
 * every rank then holds the gradient one process would have computed on
 * the whole batch and takes the same optimizer step.  Dropout is keyed by
 * global row (ag_set_dropout_row_base), so the ranks also drop what one
 * process would drop.  Rank 0 alone writes files and prints.
 *
 * Parameters on a GPU (--device cuda) are reduced on the GPU: a flat
 * device buffer, NCCL where the programs have it and every rank has a GPU
 * of its own, else copied to the host for MPI and back.  Rank r takes the
 * GPU of index r's local rank (among the ranks on its machine) modulo the
 * GPUs it sees, so either one GPU per rank by CUDA_VISIBLE_DEVICES or none
 * set on a machine of several GPUs works.
 *
 * Only programs link MPI: distributed/dist_mpi.c, built when meson finds MPI,
 * goes into the attngrad programs and the MPI tests, and ag__dist_init
 * starts it when the process was launched by mpirun (NCCL likewise:
 * distributed/dist_nccl.c).  Everywhere else -
 * no mpirun, a build without MPI, the installed libraries - these are the
 * one-process calls: rank 0 of 1, sums of one, nothing sent. */
#ifndef AG_DIST_H
#define AG_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "attngrad.h"

/* Starts MPI when this process is one of several launched by mpirun (Open
 * MPI's OMPI_COMM_WORLD_SIZE or MPICH's PMI_SIZE above 1); else nothing.
 * Unless AG_NUM_THREADS or OMP_NUM_THREADS says otherwise, the engine's
 * pool then takes the cores the launcher bound the rank to, or (unbound)
 * its share of the machine's cores among the ranks there.
 * Fails (err) when launched so by a program built without MPI, whose
 * processes would each train alone into the same folder. */
int ag__dist_init(char *err, size_t errlen);
/* MPI_Finalize after a run that went well (every rank gets here). */
void ag__dist_finalize(void);
int ag__dist_rank(void);
int ag__dist_size(void);
/* "rank 1 of 4: " for messages, "" in one process. */
const char *ag__dist_who(void);
/* After a rank printed why it cannot go on: ends every rank of the job
 * (MPI_Abort), since the others wait for it in a collective and would hang.
 * Returns in one process. */
void ag__dist_abort(int code);

/* Rows [*first, *first + *count) of a global batch of `rows` rows are this
 * rank's: contiguous, in rank order, rank 0 first and never empty while
 * rows > 0 (a rank past the rows of a small last batch gets none). */
void ag__dist_share(int64_t rows, int64_t *first, int64_t *count);
/* The same for rank r of the job, and for rank r of `size`. */
void ag__dist_share_of(int r, int64_t rows, int64_t *first, int64_t *count);
void ag__dist_split(int64_t rows, int r, int size, int64_t *first, int64_t *count);

/* x[0..n) summed over the ranks, in place, on every rank. */
void ag__dist_sum(double *x, int n);
/* 0 when every rank's `mine` is 0, else the largest nonzero one of any
 * rank (a stop request: its signal number, or -1 without one): one small
 * collective; in one process, mine. */
int ag__dist_any(int mine);
/* Rank 0's bytes to every rank. */
void ag__dist_bcast(void *buf, size_t bytes);
/* Rank 0's parameter values to every rank, so all start from the same. */
void ag__dist_bcast_params(ag_params *ps);
/* all[0..n): rank r has filled its share (ag__dist_share_of(r, n)); after
 * this every rank has every share. */
void ag__dist_gather_shares(double *all, int64_t n);

/* The flat gradient buffer, allocated on first use and kept, in the
 * memory of the parameters' device and followed there by the table of the
 * gradients it packs; for MPI's sum of a GPU's buffer, a host copy. */
typedef struct {
    ag_real *flat, *host;
    ag_device device;
    void *slots; /* distributed/dist_kernels.h's ag__kgrad_slot[count] */
    int count;
    int64_t largest;
} ag__dist_grads;

/* Makes every parameter's gradient the mean over the global batch: this
 * rank's grad (of its loss, a mean over its n_local examples or target
 * tokens) weighted by n_local / N, summed over the ranks, N being the sum of
 * n_local.  Returns the global mean loss from this rank's mean loss_local;
 * *tokens (may be NULL), this rank's input tokens, becomes the global
 * batch's (for tokens/s).  *stop (may be NULL), this rank's request to
 * stop (nonzero), becomes every rank's verdict, as ag__dist_any's: it
 * rides in the same allreduce, and only a step where some rank asked pays
 * the small collective that says which signal.  One MPI_Allreduce; in one
 * process it returns loss_local and touches nothing.  n_local 0 (a rank
 * without rows) contributes zeros.  loss_there (not NULL): the mean loss
 * is one real in the parameters' device memory instead (loss_local
 * unread), weighted there, so the rank need not wait for it before the
 * allreduce. */
double ag__dist_reduce_grads(ag__dist_grads *g, ag_params *ps, double n_local, double loss_local,
                             const ag_real *loss_there, double *tokens, int *stop);
void ag__dist_grads_free(ag__dist_grads *g);
/* Seconds this process spent in ag__dist_reduce_grads' allreduce, waiting
 * for slower ranks included, and in how many calls (*calls may be NULL). */
double ag__dist_reduce_seconds(int64_t *calls);
/* How the gradients travel: "" in one process, "MPI", "NCCL" (device
 * buffers, one GPU per rank) or "MPI through host memory" (device buffers
 * copied to the host and back). */
const char *ag__dist_reduce_path(void);

/* ---- the backend: what dist_mpi.c provides -------------------------------- */

typedef struct {
    int rank, size;
    int local_rank, local_size; /* among the ranks on this machine */
    void (*sum)(void *buf, int64_t n, int elem_bytes); /* in place; 4: float, 8: double */
    void (*bcast)(void *buf, int64_t bytes);           /* from rank 0 */
    /* in place: counts[r] doubles of rank r at displs[r] */
    void (*gather_doubles)(double *all, const int *counts, const int *displs);
    /* in place: rank r's bytes_each bytes at all + r bytes_each */
    void (*allgather)(void *all, int64_t bytes_each);
    void (*abort)(int code);
    void (*finalize)(void);
} ag__dist_backend;

/* MPI_Init and the backend; defined by dist_mpi.c when it is linked in. */
const ag__dist_backend *ag__dist_mpi_start(void);

/* Collectives on device buffers, enqueued on the engine's stream: NCCL,
 * from dist_nccl.c, which the programs link when meson finds NCCL beside
 * MPI and CUDA.  A failed call prints why and ends the job. */
typedef struct {
    void (*sum)(void *dev, int64_t n, int elem_bytes); /* in place; 4: float, 8: double */
    void (*bcast)(void *dev, int64_t bytes);           /* from rank 0 */
    double (*last_seconds)(void); /* the last sum's time on the GPU, waits for peers included (waits for it) */
    void (*finalize)(void);
} ag__dist_device;

/* ncclCommInitRank on this rank's GPU (the engine's, already started),
 * with rank 0's ncclUniqueId broadcast over mpi; collective.  Only after
 * ag__dist_nccl_loadable said true. */
const ag__dist_device *ag__dist_nccl_start(const ag__dist_backend *mpi);
/* NCCL's library, which the programs open rather than link, can be opened
 * on this rank and has every call they make; false with why, else. */
bool ag__dist_nccl_loadable(char *why, size_t n);

#endif
