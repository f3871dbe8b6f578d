/* param_groups.h - a parameter group as `attngrad train --param-group`
 * gives it (optim/spec.c parses and matches it; train/ applies it
 * with ag_param_freeze, ag_optim_set_lr_scale and ag_optim_set_weight_decay). */
#ifndef AG_PARAM_GROUPS_H
#define AG_PARAM_GROUPS_H

#include "attngrad/optim.h"

/* A parameter group of `attngrad train --param-group`: "PATTERN:key=value,..."
 * where PATTERN is a shell glob over parameter names (fnmatch: "embed.*",
 * "*.bias") or a named set ("@bias_norm": ag_param_is_bias_or_norm,
 * "@matrices": ag_is_weight_matrix), and the keys lr_scale, weight_decay
 * (finite, >= 0), freeze and muon (0 or 1: ag_optim_set_muon) say what it
 * sets; a key left out is NAN (freeze, muon -1).  AG_ERR_ARG names the
 * group and the bad part. */
typedef struct {
    char pattern[128];
    double lr_scale, weight_decay;
    int freeze, muon;
} ag__param_group;
ag_status ag__param_group_parse(const char *spec, ag__param_group *g);
/* Whether p is one of g's parameters (an ag_param_pred: ctx is the group). */
bool ag__param_group_match(const ag_tensor *p, void *group);
/* The named sets, "@bias_norm, @matrices", for messages. */
extern const char *const ag__param_sets;

#endif
