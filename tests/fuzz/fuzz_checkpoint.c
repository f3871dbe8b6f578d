/* fuzz_checkpoint.c - a safetensors checkpoint: parsed from memory
 * (ag_st_parse, every check of the format), then loaded into a tiny MPSAN
 * with an optimizer and a schedule, as --resume does.  ag_checkpoint_load
 * reads a path, so the bytes go to an in-memory file (memfd). */
#include "fuzz.h"
#include "attngrad/train.h"
#include "../../train/internal.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static ag_model model;
static ag_optimizer opt;
static ag_scheduler sched;

static void setup(void) {
    ag_set_num_threads(1);
    ag_model_config cfg = ag_model_tiny(ag_model_find("mpsan"));
    if (ag_model_init(&model, ag_model_find("mpsan"), &cfg)) abort();
    ag_optim_config oc;
    ag_sched_config sc;
    if (ag_optim_parse("adam", &oc) || ag_optim_init(&opt, &model.params, &oc)) abort();
    if (ag_sched_parse("plateau", &sc) || ag_sched_init(&sched, &sc)) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!model.kind) setup();
    ag_st_file f;
    if (ag_st_parse("fuzz.safetensors", data, size, &f) == AG_OK) {
        const char *config = ag_st_meta(&f, "config");
        char err[1024];
        ag_train_opts o = ag_train_opts_default();
        if (config) ag_train_opts_parse(&o, config, "fuzz.safetensors", err, sizeof err);
        ag_st_close(&f);
    } else {
        return 0; /* the load would refuse it the same way */
    }
    int fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) abort();
    if (size && write(fd, data, size) != (ssize_t)size) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ag_train_state st;
    ag_checkpoint_load(path, &model.params, &opt, &sched, &st);
    ag_checkpoint_load(path, &model.params, NULL, NULL, NULL);
    close(fd);
    return 0;
}
