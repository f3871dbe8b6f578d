/* opcase.h - one table of op test cases, each written once, run in four
 * modes (tests/opcase_run.c; the way of ggml's test-backend-ops and
 * PyTorch's OpInfo):
 *   test_ops_f64                 f64 gradient check of every case (CPU)
 *   test_ops_f{32,64} --dump     forward values, compared across the two
 *                                builds by f32_vs_f64
 *   test_cuda_ops_f{32,64}       the device against the CPU, forward and
 *   (= test_ops --device)        backward, then (f64) a gradient check on
 *                                the device; exit 77 without one
 *   test_ops_f32 --time          forward and forward+backward time per case
 * A case makes its inputs (those that require grad are checked) and builds
 * the op's output from them.  Add cases to the file of the op family
 * (tests/cases_<family>.c); a new file is registered in OPCASE_SETS below
 * and in tests/meson.build.
 *
 * The same forward runs on the CPU and on the device: its inputs arrive on
 * one device, the current device (ag_set_device) is set to theirs, so the
 * library's masks (ag_mask, ag_mask_padding, ...) come from that device's
 * cache as in a model; a constant the forward fills by hand (a mask,
 * a target) is made on the host and put beside its inputs with
 * tc_const_like or tc_to_device_of.  Host arrays an op takes as such
 * (labels, indices, lengths, soft targets) need nothing. */
#ifndef AG_OPCASE_H
#define AG_OPCASE_H

#include "attngrad.h"

#define OPCASE_MAX_INPUTS 8
#define OPCASE_MAX_UNIFORM 3 /* inputs of a uniform case */

/* A shape written in a table: DIMS(3, 5, 37). */
typedef struct {
    int ndim;
    int dims[4];
} tc_shape;
#define DIMS(...) {(int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), {__VA_ARGS__}}

/* Inputs described rather than made: n inputs of the given shapes, every
 * one requiring grad, uniform in [lo, hi) and rounded to float (so the f32
 * and f64 builds see the same numbers, large ones included); a divisor's
 * input 1 is +-[0.5, 2) instead.  For cases sized for the device's kernels
 * (widths 33 and 37 off multiples of 32, logits to 1e3): their gradient
 * checks take inputs clamped to [-4, 4], 64 elements per input, and skip
 * outputs over OPCASE_GRADCHECK_OUT_MAX (tests/opcase_run.c says why). */
typedef struct {
    double lo, hi;
    int n;
    tc_shape shape[OPCASE_MAX_UNIFORM];
    bool divisor;
} tc_uniform_inputs;

enum {
    /* The device run's output is on the CPU (an ag_to inside the case). */
    OPCASE_ENDS_ON_CPU = 1u << 0,
    /* The output is the difference of two computations of one function,
     * 0 up to roundoff (or such differences plus a known term, made with
     * tc_difference): the device comparison measures it against the terms'
     * scale, 1, not against its own, and on the CPU the differences
     * themselves must be 0 (tests/opcase_run.c). */
    OPCASE_DIFFERENCE = 1u << 1,
};

/* A difference case's output: diff, two computations of one function
 * subtracted, plus term (NULL: none), a known function of the inputs that
 * gives the output gradients worth checking.  Each call records diff for
 * the runner, which checks on the CPU that every recorded diff is 0. */
ag_tensor *tc_difference(ag_tensor *diff, ag_tensor *term);
enum { TC_MAX_DIFFERENCES = 8 };
extern ag_tensor *tc_differences[TC_MAX_DIFFERENCES];
extern int tc_n_differences;

typedef struct {
    const char *name;
    /* Creates the inputs into in[] and returns how many (on the CPU: the
     * runner moves them).  NULL: `uniform` describes them. */
    int (*setup)(ag_tensor **in, ag_rng *rng);
    ag_tensor *(*forward)(ag_tensor **in);
    double atol, rtol; /* 0: the gradcheck defaults (1e-8, 1e-6 in f64) */
    /* Optional: a table entry may end at any field above (the case files
     * are built with -Wno-missing-field-initializers). */
    tc_uniform_inputs uniform;
    unsigned flags; /* OPCASE_* */
} op_case;

/* A case whose inputs are uniform (see tc_uniform_inputs), in one line:
 *   UNIFORM_CASE("softmax [6,300] logits to 1e3", f_softmax, -1000, 1000, DIMS(6, 300)) */
#define UNIFORM_INPUTS(DIVISOR, LO, HI, ...)                                                                      \
    {(LO), (HI), (int)(sizeof((tc_shape[]){__VA_ARGS__}) / sizeof(tc_shape)), {__VA_ARGS__}, (DIVISOR)}
#define UNIFORM_CASE(NAME, FORWARD, LO, HI, ...) \
    {.name = (NAME), .forward = (FORWARD), .uniform = UNIFORM_INPUTS(false, LO, HI, __VA_ARGS__)}
/* The same with input 1 a divisor, +-[0.5, 2). */
#define DIVISOR_CASE(NAME, FORWARD, LO, HI, ...) \
    {.name = (NAME), .forward = (FORWARD), .uniform = UNIFORM_INPUTS(true, LO, HI, __VA_ARGS__)}

/* Uniform values in [lo, hi), generated in double so f32 and f64 builds see
 * the same numbers; requires_grad as asked. */
ag_tensor *tc_uniform(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape);
/* Uniform in [lo, hi) with a random sign: keeps values away from 0 (kinks). */
ag_tensor *tc_away(ag_rng *rng, double lo, double hi, bool grad, int ndim, const int *shape);

/* A constant of the given shape and host values, on ref's device. */
ag_tensor *tc_const_like(const ag_tensor *ref, int ndim, const int *shape, const ag_real *values);
/* A constant filled in place on the host (ag_tensor_new_host), put on
 * ref's device. */
ag_tensor *tc_to_device_of(const ag_tensor *ref, ag_tensor *host);

#define SHAPE(...) (int)(sizeof((int[]){__VA_ARGS__}) / sizeof(int)), (int[]){__VA_ARGS__}

/* The case sets, in the order they run: tests/cases_<set>.c defines
 * <set>_cases[], a table that ends with an entry whose name is NULL.  A new
 * file adds X(<set>) here and its name to opcase_case_files in
 * tests/meson.build. */
#define OPCASE_SETS(X)                                                                                          \
    X(core)      /* elementwise, reductions, matmul, linear, dense, to */                                      \
    X(shape)     /* shape ops, gathers, embedding, losses, dropout */                                         \
    X(attention) /* softmax family, masks, fused attention, heads */                                          \
    X(seq)       /* gaussian scoring, layernorm, LSTM, MTSA attention */                                      \
    X(feature)   /* softmax along any axis, feature-wise attention, MPSAN's unit */

#define OPCASE_DECLARE_SET(set) extern const op_case set##_cases[];
OPCASE_SETS(OPCASE_DECLARE_SET)

/* ---- the runner (tests/opcase_run.c) ---- */
typedef enum { OPCASE_GRADCHECK, OPCASE_DUMP, OPCASE_DEVICE, OPCASE_TIME } opcase_mode;
/* Parses [--gradcheck | --dump | --device | --time [--cuda] [--reps N]]
 * [FILTER] (a substring of the case names), runs the mode (default_mode
 * without one) and returns the exit status. */
int opcase_main(int argc, char **argv, opcase_mode default_mode);

#endif
