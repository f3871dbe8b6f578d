/* opcase.h - one table of op test cases, run three ways:
 *   test_ops (f64)        : f64 gradient check of every case
 *   test_ops --dump (f32/f64): forward values, compared by f32_vs_f64
 * A case makes its inputs (those that require grad are checked) and builds
 * the op's output from them.  Add cases to the file of the op family. */
#ifndef AG_OPCASE_H
#define AG_OPCASE_H

#include "attngrad.h"

#define OPCASE_MAX_INPUTS 8

typedef struct {
    const char *name;
    /* Creates the inputs into in[] and returns how many. */
    int (*setup)(ag_tensor **in, ag_rng *rng);
    ag_tensor *(*forward)(ag_tensor **in);
    double atol, rtol; /* 0: the gradcheck defaults (1e-8, 1e-6 in f64) */
} op_case;

/* Uniform values in [lo, hi), generated in double so f32 and f64 builds see
 * the same numbers; requires_grad as asked. */
ag_tensor *tc_uniform(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape);
/* Uniform in [lo, hi) with a random sign: keeps values away from 0 (kinks). */
ag_tensor *tc_away(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape);

#define SHAPE(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

/* Every family's table ends with an entry whose name is NULL. */
extern const op_case core_cases[];     /* elementwise, reductions, matmul */
extern const op_case shape_cases[];    /* shape ops, embedding, losses, dropout */
extern const op_case attention_cases[]; /* softmax family, masks, fused attention, heads */
extern const op_case seq_cases[];      /* gaussian scoring, layernorm, LSTM, MTSA attention */
extern const op_case feature_cases[];  /* softmax along any axis, feature-wise attention */

#endif
