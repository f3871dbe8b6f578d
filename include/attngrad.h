/* attngrad.h - the one public header of attngrad.
 *
 * attngrad is a define-by-run, tape-based reverse-mode autodiff library in C,
 * specialised for attention networks.  The whole model of use fits in five lines:
 *
 *     ag_tensor *W = ag_param(&params, "w", 2, (int[]){4, 3}); // persistent
 *     ag_tensor *x = ag_tensor_from(data, 2, (int[]){8, 4});   // per-step
 *     ag_tensor *loss = ag_cross_entropy(ag_matmul(x, W), labels, -1);
 *     ag_backward(loss);                                       // grads in W->grad
 *     ag_sgd_step(&opt); ag_step_end();                        // update, free the step
 *
 * Memory.  Parameters are persistent (malloc'd once).  Everything else made
 * during a step - activations, their gradients, tape nodes, scratch - comes
 * from one per-step arena, and ag_step_end() rewinds it.  After the first
 * couple of steps of a fixed-shape loop the arena has grown to its high-water
 * mark and a step performs no heap allocation at all.  A tensor from the arena
 * must not be used after ag_step_end().
 *
 * Precision.  `ag_real` is float, or double when compiled with
 * -DAG_REAL_DOUBLE.  The library is built twice from the same sources:
 * libattngrad_f32 for training, libattngrad_f64 for gradient checks.
 *
 * Errors.  Programmer errors (shape or device mismatch, bad axis) stop the
 * program with a message that names the op, the shapes and the caller's
 * file:line.  Functions that read user input (files, checkpoints, options)
 * return AG_OK or a negative ag_status and leave a message in ag_errmsg().
 *
 * Broadcasting (add, sub, mul, div, maximum): NumPy rules.  Shapes are
 * aligned at the right; each pair of dims must be equal or one of them 1;
 * missing leading dims count as 1.  So [B,N,d] + [d] adds a vector to every
 * row, [B,N,d] * [B,N,1] scales rows, [B,h,N,N] + [N,N] adds a mask to every
 * batch and head.  Gradients are summed back over broadcast dims.
 */
#ifndef ATTNGRAD_H
#define ATTNGRAD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef AG_REAL_DOUBLE
typedef double ag_real;
#else
typedef float ag_real;
#endif

#define AG_MAX_DIMS 4

/* ------------------------------------------------------------------------ */
/* Status codes and errors                                                   */
/* ------------------------------------------------------------------------ */

typedef enum {
    AG_OK = 0,
    AG_ERR_IO = -1,      /* cannot open, read or write a file */
    AG_ERR_FORMAT = -2,  /* malformed or corrupt content */
    AG_ERR_SHAPE = -3,   /* shapes do not match what was expected */
    AG_ERR_ARG = -4,     /* a bad option or argument value */
    AG_ERR_NOMEM = -5,
} ag_status;

/* Message of the last failed call on this thread ("" if none). */
const char *ag_errmsg(void);

/* What happens on a programmer error.  The default prints the message and
 * aborts; tests install a handler that longjmps out to assert the message. */
typedef void (*ag_fatal_handler)(const char *msg);
ag_fatal_handler ag_set_fatal_handler(ag_fatal_handler h);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

typedef enum { AG_CPU = 0, AG_CUDA = 1 } ag_device;

typedef struct ag_node ag_node;

typedef struct ag_tensor {
    int ndim;
    int shape[AG_MAX_DIMS];
    int64_t size;          /* product of the shape */
    ag_real *data;         /* contiguous, row-major */
    ag_real *grad;         /* NULL until a gradient reaches it */
    ag_device device;
    bool requires_grad;
    bool persistent;       /* a parameter: not freed by ag_step_end() */
    const char *name;      /* stable for parameters ("encoder.wq") */
    ag_node *node;         /* the tape entry that produced it, or NULL */
} ag_tensor;

/* Step-arena tensors: valid until the next ag_step_end(). */
ag_tensor *ag_tensor_new(int ndim, const int *shape);        /* zero-filled */
ag_tensor *ag_tensor_from(const ag_real *data, int ndim, const int *shape);
ag_tensor *ag_tensor_fill(ag_real value, int ndim, const int *shape);
ag_tensor *ag_scalar(ag_real value);
ag_tensor *ag_tensor_like(const ag_tensor *t);               /* zeros, same shape */

/* Shape helpers, for messages and checks. */
bool ag_same_shape(const ag_tensor *a, const ag_tensor *b);
int ag_dim(const ag_tensor *t, int axis);                    /* axis may be negative */
const char *ag_shape_str(const ag_tensor *t, char *buf, size_t n); /* "[2,3,4]" */

/* Element access for tests and small programs (row-major flat index). */
static inline ag_real ag_item(const ag_tensor *t) { return t->data[0]; }

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

/* A model's named parameters.  Optimizers and checkpoints work on a list. */
typedef struct {
    ag_tensor **items;
    int count, cap;
} ag_params;

/* Creates a zero-filled persistent parameter (requires_grad, grad allocated,
 * name copied) and appends it to `ps`.  Names must be unique in `ps`. */
ag_tensor *ag_param(ag_params *ps, const char *name, int ndim, const int *shape);
ag_tensor *ag_params_find(const ag_params *ps, const char *name);
int64_t ag_params_numel(const ag_params *ps);
void ag_params_zero_grad(ag_params *ps);
void ag_params_free(ag_params *ps); /* frees every parameter and the list */

/* ------------------------------------------------------------------------ */
/* Tape, arena and backward                                                  */
/* ------------------------------------------------------------------------ */

/* Seeds d(loss)/d(loss) = 1 (loss must have one element) and replays the
 * tape in reverse, accumulating into every ->grad that requires it. */
void ag_backward(ag_tensor *loss);
/* Same for a tensor of any shape, with d(out) given (same shape as out). */
void ag_backward_seeded(ag_tensor *out, const ag_real *seed);

/* Ends a step: forgets the tape and rewinds the step arena.  Parameter
 * gradients are kept (zero them with ag_params_zero_grad). */
void ag_step_end(void);

/* Nested regions of a step: everything recorded after ag_mark() is forgotten
 * by ag_rewind(m) (gradient checks and evaluation loops use this). */
typedef struct {
    size_t arena_pos;
    int arena_chunk;
    int tape_len;
} ag_mark_t;
ag_mark_t ag_mark(void);
void ag_rewind(ag_mark_t m);

/* No-grad regions record nothing (evaluation).  Returns the previous mode. */
bool ag_set_grad_enabled(bool enabled);
bool ag_is_grad_enabled(void);

/* Heap allocations made by the library so far (all go through one
 * counting allocator); the steady-state test asserts this stops moving. */
typedef struct {
    int64_t allocs, frees;
    size_t arena_bytes;     /* capacity of the step arena */
    size_t arena_high;      /* most bytes a step has used */
} ag_mem_stats;
ag_mem_stats ag_memstats(void);

/* Frees the arena and all library state (for leak checkers). */
void ag_shutdown(void);

/* ------------------------------------------------------------------------ */
/* Random numbers (seeded, reproducible, saveable)                           */
/* ------------------------------------------------------------------------ */

typedef struct { uint64_t s[4]; } ag_rng;  /* xoshiro256** */

void ag_rng_seed(ag_rng *r, uint64_t seed);
uint64_t ag_rng_next(ag_rng *r);
double ag_rng_uniform(ag_rng *r);          /* [0, 1) */
double ag_rng_normal(ag_rng *r);           /* N(0, 1) */

/* ------------------------------------------------------------------------ */
/* Elementwise ops                                                           */
/* ------------------------------------------------------------------------ */

ag_tensor *ag_add(ag_tensor *a, ag_tensor *b);    /* broadcasting */
ag_tensor *ag_sub(ag_tensor *a, ag_tensor *b);
ag_tensor *ag_mul(ag_tensor *a, ag_tensor *b);
ag_tensor *ag_div(ag_tensor *a, ag_tensor *b);
ag_tensor *ag_maximum(ag_tensor *a, ag_tensor *b); /* ties send the gradient to b */
ag_tensor *ag_add_scalar(ag_tensor *a, double s);
ag_tensor *ag_mul_scalar(ag_tensor *a, double s);

ag_tensor *ag_neg(ag_tensor *x);
ag_tensor *ag_exp(ag_tensor *x);
ag_tensor *ag_log(ag_tensor *x);
ag_tensor *ag_sqrt(ag_tensor *x);
ag_tensor *ag_square(ag_tensor *x);
ag_tensor *ag_abs(ag_tensor *x);           /* gradient 0 at 0 */
ag_tensor *ag_tanh(ag_tensor *x);
ag_tensor *ag_sigmoid(ag_tensor *x);
ag_tensor *ag_relu(ag_tensor *x);          /* gradient 0 at 0 */
ag_tensor *ag_elu(ag_tensor *x);           /* alpha = 1 */
ag_tensor *ag_softplus(ag_tensor *x);      /* log(1+e^x), stable for any x */
ag_tensor *ag_log_sigmoid(ag_tensor *x);   /* -softplus(-x), stable */
ag_tensor *ag_clamp(ag_tensor *x, double lo, double hi); /* gradient 0 outside */

/* ------------------------------------------------------------------------ */
/* Reductions (axis may be negative; keepdim keeps a size-1 dim)             */
/* ------------------------------------------------------------------------ */

ag_tensor *ag_sum(ag_tensor *x);                               /* -> scalar */
ag_tensor *ag_mean(ag_tensor *x);                              /* -> scalar */
ag_tensor *ag_sum_axis(ag_tensor *x, int axis, bool keepdim);
ag_tensor *ag_mean_axis(ag_tensor *x, int axis, bool keepdim);
/* Max along an axis; the gradient goes to the first maximal element. */
ag_tensor *ag_max_axis(ag_tensor *x, int axis, bool keepdim);

/* ------------------------------------------------------------------------ */
/* Matrix products (OpenBLAS underneath)                                     */
/* ------------------------------------------------------------------------ */

/* a[..., M, K] @ b[..., K, N].  Batch dims (all but the last two) must be
 * equal, or one operand is 2-D and is shared across the other's batch. */
ag_tensor *ag_matmul(ag_tensor *a, ag_tensor *b);
/* Same with either operand transposed in its last two dims. */
ag_tensor *ag_matmul_t(ag_tensor *a, bool trans_a, ag_tensor *b, bool trans_b);
/* x[..., in] @ W[in, out] + bias[out] (bias may be NULL): one GEMM. */
ag_tensor *ag_linear(ag_tensor *x, ag_tensor *w, ag_tensor *bias);

/* ------------------------------------------------------------------------ */
/* Shape ops                                                                 */
/* ------------------------------------------------------------------------ */

/* Zero-copy view with a new shape of the same size; one dim may be -1. */
ag_tensor *ag_reshape(ag_tensor *x, int ndim, const int *shape);
/* Output dim i is input dim perm[i]. */
ag_tensor *ag_permute(ag_tensor *x, const int *perm);
ag_tensor *ag_transpose(ag_tensor *x, int axis0, int axis1);
ag_tensor *ag_concat(ag_tensor **xs, int n, int axis);
/* Elements start..end-1 (end exclusive) along axis. */
ag_tensor *ag_slice(ag_tensor *x, int axis, int start, int end);
/* out[..., i, ...] = x[..., index[i], ...] along axis; backward scatter-adds. */
ag_tensor *ag_index_select(ag_tensor *x, int axis, const int32_t *index, int n);
/* table[V, d] looked up with ids of any shape -> [ids shape..., d]. */
ag_tensor *ag_embedding(ag_tensor *table, const int32_t *ids, int ndim, const int *shape);

/* ------------------------------------------------------------------------ */
/* Losses and regularisation                                                 */
/* ------------------------------------------------------------------------ */

/* Mean over the rows of logits[..., C] whose label is not ignore_index of
 * -log softmax(logits)[label] (fused, stable).  Labels: one per row. */
ag_tensor *ag_cross_entropy(ag_tensor *logits, const int32_t *labels, int ignore_index);
ag_tensor *ag_mse(ag_tensor *pred, ag_tensor *target);   /* mean squared error */

/* Inverted dropout keeping each unit with probability keep (scaled by
 * 1/keep).  Identity when !training or keep == 1. */
ag_tensor *ag_dropout(ag_tensor *x, double keep, bool training, ag_rng *rng);

/* ------------------------------------------------------------------------ */
/* Attention ops: softmax family, masks, heads, fused attention              */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Sequence ops: Gaussian positional scoring, layer norm, LSTM               */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Optimizers, schedules, initializers                                      */
/* ------------------------------------------------------------------------ */

/* Update rules, option names and defaults are PyTorch's (torch.optim.SGD,
 * Adam, AdamW, Adadelta).  An optimizer updates every parameter of its list
 * from ->grad at every step; t counts steps from 1; wd is weight_decay.
 *   sgd       g += wd θ;  b = (t == 1) ? g : momentum b + (1 - dampening) g;
 *             g = nesterov ? g + momentum b : b  (when momentum != 0);  θ -= lr g
 *   adam      g += wd θ  (adamw instead decays θ -= lr wd θ, decoupled);
 *             m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;  vmax = max(vmax, v);
 *             θ -= lr/(1-β1^t) · m / (sqrt(amsgrad ? vmax : v)/sqrt(1-β2^t) + eps)
 *   adadelta  g += wd θ;  v = ρ v + (1-ρ) g²;  Δ = sqrt(u + eps)/sqrt(v + eps) g;
 *             u = ρ u + (1-ρ) Δ²;  θ -= lr Δ
 * Defaults: sgd lr 1e-3; adam/adamw lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0 (adamw 1e-2); adadelta lr 1.0, rho 0.9, eps 1e-6.  (The
 * MPSAN/MTSA papers use adadelta lr 0.5, rho 0.95: say so explicitly.) */
typedef enum { AG_SGD, AG_ADAM, AG_ADAMW, AG_ADADELTA } ag_optim_kind;

typedef struct {
    ag_optim_kind kind;
    double lr;
    double weight_decay;                 /* all: L2 added to g; adamw: decoupled */
    double momentum, dampening;          /* sgd */
    bool nesterov;                       /* sgd */
    double beta1, beta2;                 /* adam, adamw */
    bool amsgrad;                        /* adam, adamw */
    double rho;                          /* adadelta */
    double eps;                          /* adam, adamw, adadelta */
} ag_optim_config;

ag_optim_config ag_optim_defaults(ag_optim_kind kind);
/* Parses "sgd:lr=0.1,momentum=0.9", "adam:lr=1e-3,beta2=0.98,amsgrad=1",
 * "adamw:weight_decay=0.01", "adadelta:lr=0.5,rho=0.95"; keys left out keep
 * their defaults.  AG_ERR_ARG names the bad key or value in ag_errmsg(). */
ag_status ag_optim_parse(const char *spec, ag_optim_config *out);
/* Every hyperparameter as a spec that parses back to the same config. */
const char *ag_optim_format(const ag_optim_config *c, char *buf, size_t n);
ag_status ag_optim_check(const ag_optim_config *c); /* ranges, as PyTorch */

/* An optimizer and its state.  State buffers ("slots") are allocated once,
 * one per parameter and slot, same size as the parameter, and named
 * sgd: "momentum" (when momentum != 0); adam/adamw: "m", "v", "vmax" (when
 * amsgrad); adadelta: "v" (square avg), "u" (accumulated delta). */
typedef struct {
    ag_optim_config cfg;
    double lr;           /* current rate: cfg.lr at first, schedules change it */
    int64_t step;        /* updates made so far */
    ag_params *params;   /* updated in place; not owned; must not grow */
    int n_params;        /* params->count at init */
    int n_slots;
    ag_real *state;      /* every slot, one allocation, zero at first */
    ag_real **slot;      /* slot[s * n_params + i]: slot s of parameter i */
} ag_optimizer;

ag_status ag_optim_init(ag_optimizer *opt, ag_params *ps, const ag_optim_config *cfg);
/* One update of every parameter from its gradient; allocates nothing. */
void ag_optim_step(ag_optimizer *opt);
void ag_optim_free(ag_optimizer *opt);
const char *ag_optim_name(ag_optim_kind kind);                /* "sgd", ... */
const char *ag_optim_slot_name(const ag_optimizer *opt, int s);
/* The state buffer of a parameter by names, or NULL. */
ag_real *ag_optim_state(const ag_optimizer *opt, const char *param, const char *slot);

/* Global-norm clipping, as torch.nn.utils.clip_grad_norm_: when the L2 norm
 * of all gradients together exceeds max_norm, scales them all by
 * max_norm / (norm + 1e-6).  Returns the norm before clipping. */
double ag_clip_grad_norm(ag_params *ps, double max_norm);
/* The weight matrices of MODELS.md's L2 term: parameters with 2 or more
 * dims, except embedding tables (names starting with "embed" or "bigram").
 * Biases, gains, vectors and embeddings are not weight matrices. */
bool ag_is_weight_matrix(const ag_tensor *p);
/* Adds the gradient of gamma * sum ½‖W‖² over the weight matrices (gamma W)
 * to their ->grad and returns the penalty's value (to log it with the loss). */
double ag_l2_penalty(ag_params *ps, double gamma);

/* Learning-rate schedules, as torch.optim.lr_scheduler (StepLR,
 * ExponentialLR, ReduceLROnPlateau), stepped once per epoch. */
typedef enum { AG_SCHED_CONSTANT, AG_SCHED_STEP, AG_SCHED_EXPONENTIAL, AG_SCHED_PLATEAU } ag_sched_kind;

typedef struct {
    ag_sched_kind kind;
    int step_size;          /* step: lr *= gamma every step_size epochs (required) */
    double gamma;           /* step (default 0.1), exponential: every epoch (required) */
    bool mode_max;          /* plateau: "min" (default) or "max" */
    double factor;          /* plateau: new lr = max(lr * factor, min_lr); 0.1 */
    int patience;           /* plateau: bad epochs tolerated; 10 */
    double threshold;       /* plateau: significant improvement; 1e-4 */
    bool threshold_abs;     /* plateau: "rel" (default) or "abs" */
    int cooldown;           /* plateau: epochs to wait after a cut; 0 */
    double min_lr;          /* plateau: 0 */
    double eps;             /* plateau: cuts smaller than eps are skipped; 1e-8 */
} ag_sched_config;

ag_sched_config ag_sched_defaults(ag_sched_kind kind);
/* "constant", "step:step_size=30,gamma=0.1", "exponential:gamma=0.95",
 * "plateau:mode=min,factor=0.5,patience=5,threshold_mode=abs,cooldown=2". */
ag_status ag_sched_parse(const char *spec, ag_sched_config *out);
const char *ag_sched_format(const ag_sched_config *c, char *buf, size_t n);
ag_status ag_sched_check(const ag_sched_config *c);

typedef struct {
    ag_sched_config cfg;
    int64_t last_epoch;     /* ag_sched_step calls so far */
    double best;            /* plateau: best metric (+-inf at first) */
    int num_bad_epochs, cooldown_counter;
} ag_scheduler;

ag_status ag_sched_init(ag_scheduler *s, const ag_sched_config *cfg);
/* End of an epoch: updates opt->lr (plateau reads metric, the others ignore
 * it) and returns the new rate. */
double ag_sched_step(ag_scheduler *s, ag_optimizer *opt, double metric);

/* Initializers, drawing from a seeded generator in a fixed order (same seed,
 * same values, f32 and f64 alike up to rounding). */
void ag_init_zeros(ag_tensor *t);
void ag_init_constant(ag_tensor *t, double value);
void ag_init_uniform(ag_tensor *t, double a, double b, ag_rng *rng);       /* U(a, b) */
void ag_init_normal(ag_tensor *t, double mean, double std, ag_rng *rng);
/* Glorot/Xavier for weights stored [in, out] (the last two dims; leading
 * dims stack independent matrices): bound gain * sqrt(6 / (in + out)) for
 * uniform, std gain * sqrt(2 / (in + out)) for normal. */
void ag_init_glorot_uniform(ag_tensor *t, double gain, ag_rng *rng);
void ag_init_glorot_normal(ag_tensor *t, double gain, ag_rng *rng);

/* ------------------------------------------------------------------------ */
/* Checkpoints (safetensors)                                                 */
/* ------------------------------------------------------------------------ */

/* The safetensors format: an 8-byte little-endian header length N, N bytes
 * of JSON {"name": {"data_offsets": [begin, end], "dtype": "F32", "shape":
 * [2, 3]}, ..., "__metadata__": {"key": "value"}}, then the tensors' bytes.
 * We write keys sorted at every level, no spaces, the header padded with
 * spaces to a multiple of 8, and the data of 8-byte dtypes before 4-byte
 * ones (every tensor aligned).  We read any file that follows the spec and
 * uses our dtypes, and refuse anything else with a message naming the file
 * and the problem. */
typedef enum { AG_F32, AG_F64, AG_I32, AG_I64 } ag_dtype;
#define AG_ST_MAX_DIMS 8

typedef struct {
    const char *name;
    ag_dtype dtype;
    int ndim;
    int64_t shape[AG_ST_MAX_DIMS];
    int64_t numel;
    const void *data;   /* little-endian elements; may be unaligned when read */
} ag_st_tensor;

/* Tensors and metadata to write.  Names are copied; data is borrowed until
 * ag_st_write returns. */
typedef struct {
    ag_st_tensor *tensors;
    int count, cap;
    char **meta;        /* key, value, key, value, ... */
    int n_meta, meta_cap;
} ag_st_writer;

void ag_st_add(ag_st_writer *w, const char *name, ag_dtype dtype, int ndim, const int64_t *shape,
               const void *data);
/* A tensor as the build's real type (F32, or F64 in the f64 build). */
void ag_st_add_tensor(ag_st_writer *w, const char *name, const ag_tensor *t);
void ag_st_set_meta(ag_st_writer *w, const char *key, const char *value);
/* Writes atomically: a temporary file in the same folder, fsync, rename,
 * fsync of the folder.  A failed or interrupted write leaves `path` as it
 * was.  AG_ERR_IO with the reason on failure. */
ag_status ag_st_write(const ag_st_writer *w, const char *path);
void ag_st_writer_free(ag_st_writer *w);

/* A file read and validated in full: header length, strict JSON, known
 * dtypes, shapes matching byte sizes, offsets inside the data, contiguous
 * (no gap, no overlap), no duplicate names. */
typedef struct {
    char *path;
    unsigned char *bytes;
    size_t size;
    ag_st_tensor *tensors;   /* sorted by name */
    int count;
    char **meta;             /* key, value, ... sorted by key */
    int n_meta;
} ag_st_file;

ag_status ag_st_read(const char *path, ag_st_file *f);
/* The same from bytes in memory (copied); `what` names them in messages. */
ag_status ag_st_parse(const char *what, const void *bytes, size_t size, ag_st_file *f);
const ag_st_tensor *ag_st_get(const ag_st_file *f, const char *name);
const char *ag_st_meta(const ag_st_file *f, const char *key);  /* NULL if absent */
void ag_st_close(ag_st_file *f);
/* Element copies with conversion: F32/F64 to ag_real, I32/I64 to int64. */
void ag_st_to_real(const ag_st_tensor *t, ag_real *dst);
void ag_st_to_i64(const ag_st_tensor *t, int64_t *dst);
const char *ag_dtype_name(ag_dtype dt);                       /* "F32", ... */

/* What a training loop needs, besides tensors, to resume exactly. */
#define AG_CONFIG_MAX 2048
typedef struct {
    int64_t step, epoch;
    ag_rng rng;                  /* the loop's generator: data order, dropout */
    char config[AG_CONFIG_MAX];  /* free-form, e.g. the model's options */
} ag_train_state;

/* A checkpoint: every parameter under its name (the build's real type);
 * with an optimizer, its slots as "optim.<kind>.<slot>.<param>", its step
 * as "optim.step" (I64) and its config and current lr in the metadata;
 * with a scheduler, its config and state; with a train state, "step",
 * "epoch", "rng" and "config".  opt, sched and st may be NULL. */
ag_status ag_checkpoint_save(const char *path, const ag_params *ps, const ag_optimizer *opt,
                             const ag_scheduler *sched, const ag_train_state *st);
/* Loads what save wrote into existing parameters (and opt/sched/st when not
 * NULL; the file must then hold them, for the same optimizer and schedule
 * kinds; of the optimizer's config only the current lr and the step are
 * restored, the rest stays the caller's).  F32 and F64 are both accepted.
 * Every parameter must be present with its shape; other tensors in the file
 * are ignored.  Everything is checked before anything is copied: on failure
 * nothing has changed. */
ag_status ag_checkpoint_load(const char *path, ag_params *ps, ag_optimizer *opt, ag_scheduler *sched,
                             ag_train_state *st);

/* ------------------------------------------------------------------------ */
/* Gradient checking                                                         */
/* ------------------------------------------------------------------------ */

/* Builds the function to check, from tensors it reads; any output shape.
 * The check projects the output on a fixed random direction. */
typedef ag_tensor *(*ag_forward_fn)(void *ctx);

typedef struct {
    double eps;         /* central-difference step (default 1e-6 in f64) */
    double atol, rtol;  /* pass iff |a - n| <= atol + rtol * |n| per element */
    int64_t max_checks; /* elements checked per input, spread evenly; 0 = all */
    uint64_t seed;      /* of the projection direction */
} ag_gradcheck_opts;

typedef struct {
    bool ok;
    double max_rel_err;     /* max |a - n| / max(|a|, |n|, atol) */
    double max_abs_err;
    int worst_input;        /* index into wrt */
    int64_t worst_index;    /* flat element index */
    double analytic, numeric; /* at the worst element */
    int64_t checked;
} ag_gradcheck_result;

ag_gradcheck_opts ag_gradcheck_defaults(void);
/* Compares analytic gradients of every tensor in wrt with central
 * differences.  f is called many times; wrt must outlive the check. */
ag_gradcheck_result ag_gradcheck(ag_forward_fn f, void *ctx, ag_tensor **wrt, int n,
                                 const ag_gradcheck_opts *opts);

/* ------------------------------------------------------------------------ */
/* Call sites                                                                */
/* ------------------------------------------------------------------------ */

/* Every op records the caller's file:line before it runs, so an error names
 * the line in the user's model.  The library itself defines AG_INTERNAL. */
void ag_set_callsite(const char *file, int line);
#define AG_AT(fn, ...) (ag_set_callsite(__FILE__, __LINE__), fn(__VA_ARGS__))

#ifndef AG_INTERNAL
#define ag_add(...) AG_AT(ag_add, __VA_ARGS__)
#define ag_sub(...) AG_AT(ag_sub, __VA_ARGS__)
#define ag_mul(...) AG_AT(ag_mul, __VA_ARGS__)
#define ag_div(...) AG_AT(ag_div, __VA_ARGS__)
#define ag_maximum(...) AG_AT(ag_maximum, __VA_ARGS__)
#define ag_matmul(...) AG_AT(ag_matmul, __VA_ARGS__)
#define ag_matmul_t(...) AG_AT(ag_matmul_t, __VA_ARGS__)
#define ag_linear(...) AG_AT(ag_linear, __VA_ARGS__)
#define ag_reshape(...) AG_AT(ag_reshape, __VA_ARGS__)
#define ag_permute(...) AG_AT(ag_permute, __VA_ARGS__)
#define ag_transpose(...) AG_AT(ag_transpose, __VA_ARGS__)
#define ag_concat(...) AG_AT(ag_concat, __VA_ARGS__)
#define ag_slice(...) AG_AT(ag_slice, __VA_ARGS__)
#define ag_index_select(...) AG_AT(ag_index_select, __VA_ARGS__)
#define ag_embedding(...) AG_AT(ag_embedding, __VA_ARGS__)
#define ag_sum_axis(...) AG_AT(ag_sum_axis, __VA_ARGS__)
#define ag_mean_axis(...) AG_AT(ag_mean_axis, __VA_ARGS__)
#define ag_max_axis(...) AG_AT(ag_max_axis, __VA_ARGS__)
#define ag_cross_entropy(...) AG_AT(ag_cross_entropy, __VA_ARGS__)
#define ag_mse(...) AG_AT(ag_mse, __VA_ARGS__)
/* attention ops */

/* sequence ops */

/* optimizers, initializers, checkpoints */
#define ag_optim_step(...) AG_AT(ag_optim_step, __VA_ARGS__)
#define ag_init_uniform(...) AG_AT(ag_init_uniform, __VA_ARGS__)
#define ag_init_normal(...) AG_AT(ag_init_normal, __VA_ARGS__)
#define ag_init_glorot_uniform(...) AG_AT(ag_init_glorot_uniform, __VA_ARGS__)
#define ag_init_glorot_normal(...) AG_AT(ag_init_glorot_normal, __VA_ARGS__)
#define ag_st_add(...) AG_AT(ag_st_add, __VA_ARGS__)

#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTNGRAD_H */
