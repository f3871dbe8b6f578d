/* internal.h - what train/ shares with the tools and the tests but does not
 * publish in include/attngrad/: the trainer's error convention, its option
 * table's helpers, and what a fatal error's message needs. */
#ifndef AG_TRAIN_INTERNAL_H
#define AG_TRAIN_INTERNAL_H

#include "../include/attngrad/train.h"
#include "../models/internal.h"

/* What the trainer was doing when a fatal error (ag__fatal: e.g. a batch
 * too big for memory) ended it, for the message: "" when nothing special. */
const char *ag__train_doing(void);

/* --profile K times the K training steps after the first AG_PROFILE_WARMUP
 * (those still fault in the arena's pages and warm the caches) and prints
 * the AG_PROFILE_TOP costliest op call sites. */
#define AG_PROFILE_WARMUP 3
#define AG_PROFILE_TOP 30

/* The error convention of the trainer: writes the message into err (errlen
 * bytes) and returns code. */
int ag__train_fail(char *err, size_t errlen, int code, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* --dataset with a file or without --data: refused (train/loop.c) */
int ag__train_check_dataset(const ag_train_opts *o, char *err, size_t errlen);

/* A --device value: -1 for cpu or cuda (the default GPU), N for cuda:N,
 * -2 for anything else. */
int ag__train_device_index(const char *device);

/* Whether the run of these options (its recorded config, where the data
 * need not be at hand: predict) trained on LM text cut into sentences:
 * --lm-split, else the data set --dataset or --data's folder names. */
int ag__train_lm_sentences(const ag_train_opts *o);
/* The benchmark --dataset, or else --data's last path part, names; NULL
 * for the user's own file. */
const ag_benchmark *ag__train_benchmark(const ag_train_opts *o);

/* ---- run.c: lines of text into a model (predict, generate) ---- */

/* Cuts the line end (LF, CRLF or CR).  A CR or LF before it is an error
 * (AG_ERR_FORMAT): cutting there would drop the words after it silently. */
int ag__cut_line_end(char *line, char *err, size_t errlen);
/* The line as a batch for m, tokenized and cut as the run's data were: one
 * row (pairs: both sentences), or for an LM trained on sentences a row a
 * sentence.  Free ds and b after an error too. */
int ag__line_examples(const ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_dataset *ds,
                      ag_batch *b, char *err, size_t errlen);
/* m's forward of b, gradients off, under ag_try: a batch too big for step
 * memory fails alone with err naming why, the engine as it was.  The
 * logits live until the caller's ag_step_end(). */
int ag__line_forward(ag_model *m, const ag_batch *b, ag_tensor **logits, char *err, size_t errlen);

/* generate.c: the word drawn from softmax(logits[0..V) / temperature) at u
 * in [0, 1) (the inverse of its distribution, in id order), never <pad>
 * or <unk>; temperature 0: the likeliest. */
int ag__draw_word(const ag_real *logits, int V, double temperature, double u);
/* The same among the top_k likeliest (0: all; ties: the lower id first)
 * and of those the fewest likeliest whose shares reach top_p of theirs (1:
 * all), u walking the kept words in id order; top_k 1: the likeliest.
 * order: room for V - 2 entries where top_k or top_p cut (NULL: no cut). */
typedef struct {
    ag_real logit;
    int32_t id;
} ag__ranked;
int ag__draw_word_top(const ag_real *logits, int V, double temperature, int top_k, double top_p, double u,
                      ag__ranked *order);

/* The options that are set (sizes > 0, flags, task, seed...) onto cfg. */
void ag__train_apply(const ag_train_opts *o, ag_model_config *cfg);
/* cfg's values into o, so that ag_train_opts_format saves them. */
void ag__train_record(ag_train_opts *o, const ag_model_config *cfg);

/* o->flags as bits of kind (its built-in and own names); AG_ERR_ARG with
 * "model K does not read flag F (its flags: ...)" in err for another's. */
int ag__train_flags(const ag_train_opts *o, const ag_model_kind *kind, unsigned *bits, char *err, size_t errlen);
/* --lr-steps' spec (over base, NULL: none), whose total may be "run": the
 * run's planned optimizer steps, which train/setup.c puts in place of
 * AG__LR_TOTAL_RUN; *run (may be NULL) says whether it stands there. */
enum { AG__LR_TOTAL_RUN = 2147483647 };
ag_status ag__lr_steps_read(const char *spec, const ag_lr_steps *base, ag_lr_steps *out, bool *run);

/* ---- dump.c: what a model's gradient check makes of each parameter ---- */

/* A model's f64 gradient check (attngrad gradcheck, test_models,
 * test_cuda_train) passes an element where |a - n| <= 1e-8 + 1e-6 |n|: at
 * most 1% of a gradient of AG__RESOLVED_GRAD or more, and under it any
 * value passes.  With every parameter drawn from U(-1, 1) a gradient under
 * AG__ZERO_GRAD would be zero by the model's structure (a bias added
 * before a softmax over positions), and that is verified, not trusted:
 * the analytic gradient is roundoff, at most AG__ZERO_ANALYTIC of the
 * model's largest (test_models' structural zeros, every variant: 6.5e-17
 * at most; a wrong 1e-10 is 1e-10 of a gradient of 1), and the loss stays
 * within AG__ZERO_MOVES of itself (measured: 4e-16 at most; a parameter
 * only locally zero moved it 1e-8 to 1e-3) when every element of the
 * parameter moves by up to AG__ZERO_SHIFT at once, either way
 * (ag_gradcheck_shift). */
#define AG__RESOLVED_GRAD 1e-6
#define AG__ZERO_GRAD 1e-9
#define AG__ZERO_ANALYTIC 1e-13
#define AG__ZERO_SHIFT 0.5
#define AG__ZERO_MOVES 1e-12

typedef enum {
    AG__GRAD_RESOLVED,   /* >= AG__RESOLVED_GRAD: the check compared it */
    AG__GRAD_WEAK,       /* between the two bounds: any value passed */
    AG__GRAD_ZERO,       /* zero by structure, verified: the loss ignores the parameter */
    /* under AG__ZERO_GRAD, but the loss moves when the parameter moves
     * far: zero only around these values (a ReLU dead on every row, a
     * score in a piece where it is linear) or tiny but not zero, so the
     * check compared nothing of it */
    AG__GRAD_ZERO_HERE,
    AG__GRAD_ZERO_WRONG, /* the loss ignores the parameter, yet its analytic gradient is not roundoff */
} ag__grad_class;

/* The class of p's gradient from its check r (one call of ag_gradcheck
 * with wrt = {p}, of the loss f(ctx)), where largest is the largest
 * max_grad of the model's parameters.  Moves p (and puts it back) where
 * its gradient is under AG__ZERO_GRAD; *moved (NULL: not wanted) is then
 * how far the loss moved, relative, else 0. */
ag__grad_class ag__grad_class_of(const ag_gradcheck_result *r, double largest, ag_forward_fn f, void *ctx,
                                 ag_tensor *p, double *moved);
/* Every parameter drawn from U(-1, 1) with the seed, on the host (the
 * initializers write host memory), then back on its device. */
void ag__params_draw_wide(ag_params *ps, uint64_t seed);

/* The run's own counters as --resume reads them from a checkpoint's config
 * ("state.step=..." lines): 0 when they all parse and are in range, else a
 * negative code with err naming `what` and the entry (for the fuzzing
 * harness of run configs). */
int ag__run_state_check(const char *config, const char *what, char *err, size_t errlen);

#endif
