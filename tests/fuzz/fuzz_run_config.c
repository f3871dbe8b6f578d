/* fuzz_run_config.c - a checkpoint's "config" metadata: the run's options
 * ("key=value" lines, as eval, predict and --resume rebuild a run from
 * them) and its counters ("state.step=..." lines, as --resume reads them). */
#include "fuzz.h"
#include "attngrad/train.h"
#include "../../train/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstring(data, size), err[1024];
    ag_train_opts o = ag_train_opts_default();
    if (ag_train_opts_parse(&o, text, "fuzz", err, sizeof err) == 0) {
        char back[8192];
        ag_train_opts_format(&o, back, sizeof back); /* what a checkpoint of this run would hold */
    }
    ag__run_state_check(text, "fuzz", err, sizeof err);
    free(text);
    return 0;
}
