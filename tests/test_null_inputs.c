/* test_null_inputs.c - a NULL where an op wants a tensor (a failed call's
 * result passed on, say) or an array (lengths, labels, a shape) is refused
 * with a message naming the op, never a crash: every public function that
 * returns a tensor is called once for each of its pointer parameters, that
 * one NULL (tests/null_calls.py lists the calls from the headers at build
 * time).  Each call runs in a child
 * process under ag_try, so one crash names its call and the others still
 * run; a NULL the op allows (an optional bias or mask) may succeed. */
#include "attngrad.h"
#include "attngrad/layers.h"
#include "check.h"

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static ag_tensor *X, *XS[3];
static int32_t IDS[16] = {1, 0, 1, 1, 0, 1, 1, 0};
static int SHAPE[4] = {2, 2, 2, 1};
static ag_real REALS[64];
static ag_rng RNG;

typedef struct {
    const char *fn, *param;
} call_name;

static const call_name calls[] = {
#define CALL(fn, param, expr) {fn, param},
#include "null_calls.inc"
#undef CALL
};
enum { N_CALLS = sizeof calls / sizeof *calls };

static int chosen;

static void run_chosen(void *ctx) {
    (void)ctx;
    int k = 0;
#define CALL(fn, param, expr)                                                                                        \
    if (k++ == chosen) {                                                                                              \
        (void)(expr);                                                                                                 \
        return;                                                                                                       \
    }
#include "null_calls.inc"
#undef CALL
}

/* In the child: 0 the op returned or refused by name, 1 it refused with a
 * message that names no op. */
static int child(void) {
    ag_rng_seed(&RNG, 1);
    X = ag_tensor_fill(0.5, 3, (int[]){2, 2, 2});
    X->requires_grad = true;
    XS[0] = XS[1] = XS[2] = X;
    if (ag_try(run_chosen, NULL) == AG_OK) return 0;
    return strstr(ag_errmsg(), "ag_") || strstr(ag_errmsg(), "backward") ? 0 : 1;
}

int main(void) {
    CHECK(N_CALLS > 140, "only %d calls listed: the headers' prototypes changed form?", (int)N_CALLS);
    int crashed = 0, unnamed = 0;
    for (chosen = 0; chosen < N_CALLS; chosen++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) _exit(child());
        int status = 0;
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork or wait failed");
        bool died = WIFSIGNALED(status), anonymous = WIFEXITED(status) && WEXITSTATUS(status) == 1;
        CHECK(!died, "%s with %s NULL: killed by signal %d", calls[chosen].fn, calls[chosen].param,
              died ? WTERMSIG(status) : 0);
        CHECK(!anonymous, "%s with %s NULL: refused without naming an op", calls[chosen].fn, calls[chosen].param);
        crashed += died, unnamed += anonymous;
    }
    printf("%d calls with a NULL argument: %d crashed, %d refused without a name\n", (int)N_CALLS, crashed, unnamed);
    return check_summary("test_null_inputs");
}
