/* fuzz_options.c - option values as the command line gives them: the
 * input is "key=value" (or a key alone, a switch) for ag_train_set, and
 * the whole input is also an optimizer and a schedule spec; a spec that
 * parses is formatted and parsed again. */
#include "fuzz.h"
#include "attngrad/train.h"
#include "../../train/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_cstring(data, size), err[1024], buf[512];
    ag_train_opts o = ag_train_opts_default();
    char *eq = strchr(text, '=');
    if (eq) *eq = 0;
    ag_train_set(&o, text, eq ? eq + 1 : NULL, err, sizeof err);
    if (eq) *eq = '=';
    ag_optim_config oc;
    if (ag_optim_parse(text, &oc) == AG_OK) ag_optim_parse(ag_optim_format(&oc, buf, sizeof buf), &oc);
    ag_sched_config sc;
    if (ag_sched_parse(text, &sc) == AG_OK) ag_sched_parse(ag_sched_format(&sc, buf, sizeof buf), &sc);
    free(text);
    return 0;
}
