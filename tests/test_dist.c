/* test_dist - distributed/dist.h in a program without the MPI backend: the
 * one-process case every library user gets, the row split every rank
 * count uses, and the refusal to run as one of several mpirun processes
 * without MPI.  The ranks themselves: tests/test_mpi.sh. */
#include "../distributed/dist.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>

/* Shares are contiguous, in rank order, cover the batch, differ by at most
 * one row, and rank 0's is never empty while the batch is not. */
static void test_split(void) {
    for (int size = 1; size <= 5; size++)
        for (int64_t rows = 0; rows <= 21; rows++) {
            int64_t next = 0, lo = rows, hi = 0, first0 = -1, count0 = 0;
            bool ok = true;
            for (int r = 0; r < size; r++) {
                int64_t first, count;
                ag__dist_split(rows, r, size, &first, &count);
                ok &= first == next && count >= 0;
                next = first + count;
                lo = count < lo ? count : lo, hi = count > hi ? count : hi;
                if (r == 0) first0 = first, count0 = count;
            }
            CHECK(ok && next == rows, "%d ranks, %lld rows: shares not contiguous or not covering", size, (long long)rows);
            CHECK(hi - lo <= 1, "%d ranks, %lld rows: shares %lld to %lld rows", size, (long long)rows, (long long)lo,
                  (long long)hi);
            CHECK(first0 == 0 && (rows == 0 || count0 > 0), "%d ranks, %lld rows: rank 0 has no rows", size,
                  (long long)rows);
        }
}

/* Without a backend: rank 0 of 1, the whole batch, and the reduction
 * neither touches the gradients nor allocates. */
static void test_one_process(void) {
    char err[256] = "";
    unsetenv("OMPI_COMM_WORLD_SIZE"), unsetenv("PMI_SIZE");
    CHECK(ag__dist_init(err, sizeof err) == 0, "init: %s", err);
    CHECK(ag__dist_rank() == 0 && ag__dist_size() == 1 && !strcmp(ag__dist_who(), ""));
    int64_t first, count;
    ag__dist_share(7, &first, &count);
    CHECK(first == 0 && count == 7);
    ag_params ps = {0};
    ag_tensor *w = ag_param(&ps, "w", 1, (int[]){3});
    for (int i = 0; i < 3; i++) w->grad[i] = i + 0.5;
    ag__dist_grads g = {0};
    double tokens = 12;
    int stop = 15;
    CHECK(ag__dist_reduce_grads(&g, &ps, 4, 0.25, NULL, &tokens, &stop) == 0.25 && tokens == 12 && stop == 15);
    CHECK(ag__dist_any(0) == 0 && ag__dist_any(-1) == -1 && ag__dist_any(2) == 2, "one process: its own request");
    CHECK(w->grad[0] == 0.5 && w->grad[2] == 2.5 && !g.flat, "one process: gradients as they were, no buffer");
    double x[2] = {1, 2};
    ag__dist_sum(x, 2);
    CHECK(x[0] == 1 && x[1] == 2);
    ag__dist_abort(1); /* returns in one process */
    ag__dist_grads_free(&g);
    ag_params_free(&ps);
    ag__dist_finalize();
}

/* Started by mpirun as one of 2, in a program without MPI: a clear refusal,
 * not two processes training alone into one folder. */
static void test_refuses_mpirun_without_mpi(void) {
    char err[256] = "";
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    CHECK(ag__dist_init(err, sizeof err) != 0 && strstr(err, "built without MPI") && strstr(err, "2 processes"),
          "got: '%s'", err);
    CHECK(ag__dist_size() == 1);
    unsetenv("OMPI_COMM_WORLD_SIZE");
}

int main(void) {
    test_split();
    test_one_process();
    test_refuses_mpirun_without_mpi();
    return check_summary("test_dist");
}
