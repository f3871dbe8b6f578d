/* bad_plugin.c - two plugins `attngrad --plugin` must refuse with a clear
 * message (tests/test_plugin.sh): bad_plugin.so registers a kind whose .abi
 * was never set, no_init_plugin.so (-DNO_INIT) has no ag_plugin_init. */
#include "attngrad/model.h"

#ifdef NO_INIT
int ag_plugin_inti(void); /* the typo a user makes */
int ag_plugin_inti(void) { return 0; }
#else
static ag_tensor *forward(ag_model *m, const ag_batch *b, bool training) {
    (void)m, (void)b, (void)training;
    return NULL;
}

static ag_status build(ag_model *m) {
    (void)m;
    return AG_OK;
}

static const ag_model_kind no_abi = {.name = "no_abi", .build = build, .forward = forward,
                                     .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY)};

ag_status ag_plugin_init(void);
ag_status ag_plugin_init(void) { return ag_model_register(&no_abi); }
#endif
