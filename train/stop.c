/* stop.c - stopping a run on a signal, as at --max-steps (it saves where it
 * is), after the same step on every rank: a signal handler's flag and what
 * the ranks agreed, read by the step (step.c, whose allreduce carries a
 * request) and the loop (loop.c, between epochs). */
#include "trainer.h"
#include "../distributed/dist.h"

#include <signal.h>

/* Set from a signal handler (ag_train_request_stop): the run stops after
 * the step in progress, as at --max-steps, and saves where it is.  Under
 * mpirun a signal reaches one rank, or each at another step, so a rank's
 * own request is not when it stops: every rank stops after the same step,
 * the first whose gradient allreduce carried any rank's request
 * (ag__train_step), or before an epoch's first step when they agreed
 * there (ag__train_stop_agree).  stop_agreed keeps what they agreed on. */
static volatile sig_atomic_t stop_signal;
static int stop_agreed;
void ag_train_request_stop(int signo) { stop_signal = signo ? signo : -1; }
int ag_train_stop_requested(void) { return ag__dist_size() > 1 ? stop_agreed : stop_signal; }
int ag__train_stop_mine(void) { return stop_signal; }
void ag__train_stop_agreed(int stop) {
    if (stop) stop_agreed = stop;
}
int ag__train_stop_agree(void) {
    if (ag__dist_size() > 1 && !stop_agreed) stop_agreed = ag__dist_any(stop_signal); /* every rank, or none, calls it */
    return ag_train_stop_requested();
}
