/* options.h - "name:key=value,key=value" specs, the one syntax for choosing
 * an optimizer or a schedule on a command line, and their canonical form. */
#ifndef AG_OPTIONS_H
#define AG_OPTIONS_H

#include "../graph/internal.h"

typedef enum { OPT_REAL, OPT_INT, OPT_BOOL, OPT_CHOICE } opt_type;

/* One key a spec may set.  OPT_CHOICE stores into a bool: false for
 * choices[0] ("min"), true for choices[1] ("max"). */
typedef struct {
    const char *key;
    opt_type type;
    void *dst; /* double*, int*, bool* */
    const char *choices[2];
} opt_field;

/* Splits spec at ':' into the name (copied into name[n]) and the key=value
 * list after it (*rest; "" when there is no ':'). `what` ("optimizer")
 * prefixes messages. */
ag_status ag__spec_split(const char *what, const char *spec, char *name, size_t n, const char **rest);
/* The same, then name looked up in names[0..n_names): *kind its index, or
 * AG_ERR_ARG "unknown <what> 'x' (known: a, b, ...)". */
ag_status ag__spec_kind(const char *what, const char *spec, const char *const *names, int n_names, char *name,
                        size_t n, const char **rest, int *kind);
/* Applies "key=value,..." to the fields; unknown keys, repeated keys, bad
 * numbers and bad choices fail with AG_ERR_ARG and a message naming the key. */
ag_status ag__spec_apply(const char *what, const char *name, const char *list, const opt_field *fields,
                         int n_fields);
/* Writes "name:key=value,..." for every field, numbers in their shortest
 * form that reads back exactly. */
const char *ag__spec_format(const char *name, const opt_field *fields, int n_fields, char *buf, size_t n);
/* Shortest "%g" form of x that strtod reads back to the same double. */
const char *ag__fmt_real(double x, char *buf, size_t n);

/* Slot s of an optimizer of this config ("momentum", "m", ...), or NULL
 * past its last; and whether it keeps a slot of that name. */
const char *ag__optim_slot(const ag_optim_config *c, int s);
/* Slot s of parameter i of opt: its shape into shape[], its dims; -1
 * where the parameter has none (frozen, a Muon matrix's v, Adafactor's
 * other form).  The parameter's shape but for Adafactor's row_var
 * [..., r, 1] and col_var [..., 1, c]. */
int ag__optim_slot_shape(const ag_optimizer *o, int i, int s, int shape[AG_MAX_DIMS]);
int64_t ag__optim_slot_numel(const ag_optimizer *o, int i, int s); /* its elements; 0 where none */
bool ag__optim_keeps(const ag_optim_config *c, const char *slot);
/* Lazy adadelta, rmsprop (no momentum, not centered): every row's state
 * brought up to date (the steps it missed), as the dense rule has it;
 * before the state is read (a checkpoint, ag_optim_state).
 * ag__optim_missed_reset: the counts 0, for a state just loaded.  Nothing
 * to do for other optimizers. */
void ag__optim_catch_up(ag_optimizer *opt);
void ag__optim_missed_reset(ag_optimizer *opt);
/* Slot s's value at ag_optim_init: 0, Adagrad's initial_accumulator_value,
 * a registered rule's ag_optim_slot.init. */
double ag__optim_slot_init(const ag_optim_config *c, int s);
/* A registered rule with what the registry counted of it (optim/spec.c):
 * its hyperparameters and slots (their arrays end at a NULL name) and
 * its sums. */
typedef struct {
    const ag_optim_rule *rule;
    int n_hparams, n_slots;
    int n_sums;          /* 0 for a rule of API 1, whose struct ends before .n_sums */
    ag_optim_sum_fn sum;
} ag__registered_rule;
/* kind's rule, or NULL for a built-in or unknown kind. */
const ag__registered_rule *ag__optim_registered(ag_optim_kind kind);
/* How many rules ag_optim_register took (a plugin that registered one
 * must stay loaded: models/registry.c). */
int ag__optim_rule_count(void);

#endif
