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

/* Layer norm over the last axis with the biased variance:
 * (x - mean) / sqrt(var + eps) * gamma + beta.  x[..., D]; gamma, beta [D]
 * (either may be NULL: no scale, no shift). */
ag_tensor *ag_layernorm(ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps);

/* The positional LM's mean recurrence (MODELS.md §3 step 3): m[B,N,3] ->
 * mu[B,N], mu_t = max(m_t . [mu_{t-1}, 1/len, (t+1)/len], t/len), mu_{-1} = 0.
 * The gradient flows through the recurrence; on a tie it goes to the floor
 * t/len, i.e. nowhere.  0 at padded t.  len[B], or NULL: all N. */
ag_tensor *ag_gaussian_mu(ag_tensor *m, const int32_t *len);

/* Gaussian positional context (MODELS.md §3 steps 4-5), per example of length len:
 *   gamma[t,i] = exp(-(i/len - mu_t)^2 / (2 sigma_t^2 + eps)) over the window
 *   i <= t (strict: i < t, so c_0 = 0), divided by max(sum over the window, 1e-12);
 *   c_t = sum_i gamma[t,i] h_i.
 * h[B,N,H], mu and sigma [B,N] or [B,N,1], len[B] or NULL -> c[B,N,H], 0 at
 * padded t.  Gradients to h, mu and sigma.  If weights is not NULL it
 * receives gamma as [B,N(t),N(i)] (a plain tensor, for heatmaps). */
ag_tensor *ag_gaussian_context(ag_tensor *h, ag_tensor *mu, ag_tensor *sigma, const int32_t *len, bool strict,
                               double eps, ag_tensor **weights);

/* One LSTM layer's parameters, gates i,f,g,o along the 4H columns:
 * w_ih [in,4H], w_hh [H,4H], b_ih and b_hh [4H] (a bias may be NULL). */
typedef struct {
    ag_tensor *w_ih, *w_hh, *b_ih, *b_hh;
} ag_lstm_layer;

/* Options of ag_lstm; a zeroed struct (or NULL) means: full lengths, zero
 * initial state, no dropout. */
typedef struct {
    const int32_t *len;  /* [B] true lengths, or NULL: all N */
    ag_tensor *h0, *c0;  /* [layers,B,H] initial states (may require grad), or NULL: zeros */
    double keep;         /* inverted-dropout keep prob between layers; 0 means 1 (none) */
    bool training;       /* dropout only when training */
    ag_rng *rng;         /* needed when training with keep < 1 */
} ag_lstm_opts;

/* Multi-layer LSTM over whole sequences: x[B,N,in] -> the top layer's
 * h[B,N,H]; layer l > 0 reads layer l-1's output.  At t >= len[b] the state
 * is frozen and the output is 0. */
ag_tensor *ag_lstm(ag_tensor *x, const ag_lstm_layer *layers, int num_layers, const ag_lstm_opts *opts);

/* MTSA's sigma_t: log-sigmoid (the paper: ER = M ⊙ sigmoid(R)) or identity (FLAG: ER = M ⊙ exp(R)). */
typedef enum { AG_MTSA_LOG_SIGMOID = 0, AG_MTSA_IDENTITY = 1 } ag_mtsa_score;

/* MTSA multi-dim token2token attention (MODELS.md §5 steps 2-4), without
 * forming [N,N,dh]:  H[q,l] = sum_k softmax_k(sigma_t(R[q,k]) + S[k,l] + log M[q,k]) v[k,l],
 * 0 on rows with no allowed key.  R[B,N,N] or [B,h,N,N] (query rows, key
 * columns), S and v [B,(h,)N,dh] -> H like v.  M = mask ∧ valid(q) ∧ valid(k),
 * with mask {0,1} shaped like a suffix of R ([N,N], [h,N,N], ...) or NULL
 * (all allowed), and len[B] or NULL.  Gradients to R, S and v. */
ag_tensor *ag_mtsa_attention(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *mask, const int32_t *len,
                             ag_mtsa_score score);

/* ------------------------------------------------------------------------ */
/* Optimizers, schedules, initializers                                      */
/* ------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------ */
/* Checkpoints (safetensors)                                                 */
/* ------------------------------------------------------------------------ */

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
#define ag_layernorm(...) AG_AT(ag_layernorm, __VA_ARGS__)
#define ag_gaussian_mu(...) AG_AT(ag_gaussian_mu, __VA_ARGS__)
#define ag_gaussian_context(...) AG_AT(ag_gaussian_context, __VA_ARGS__)
#define ag_lstm(...) AG_AT(ag_lstm, __VA_ARGS__)
#define ag_mtsa_attention(...) AG_AT(ag_mtsa_attention, __VA_ARGS__)

#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTNGRAD_H */
