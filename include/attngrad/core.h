/* core.h - attngrad's engine: status codes, tensors, parameters, devices,
 * the tape and its arena, random numbers, every op, custom ops, gradient
 * checks, and the call sites that let errors name the caller's line.
 * Part of attngrad.h (which includes it with optim.h, checkpoint.h and
 * layers.h); it stands alone. */
#ifndef ATTNGRAD_CORE_H
#define ATTNGRAD_CORE_H


#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifdef AG_REAL_DOUBLE
typedef double ag_real;
#else
typedef float ag_real;
#endif

/* A program compiled for one real type and linked with the other library
 * would read floats as doubles (a sum of 1, 2, 3, 4 gives 5.3e-315).  Each
 * library defines the symbol of its own type, and every file that includes
 * this header refers to the symbol of the type it was compiled for, so the
 * mismatch fails to link (a plugin: to load), with the library to use in the
 * message. */
#ifdef AG_REAL_DOUBLE
extern const char ag_link_with_attngrad_f64__compiled_with_AG_REAL_DOUBLE;
#define AG__REAL_BUILD ag_link_with_attngrad_f64__compiled_with_AG_REAL_DOUBLE
#else
extern const char ag_link_with_attngrad_f32__compiled_without_AG_REAL_DOUBLE;
#define AG__REAL_BUILD ag_link_with_attngrad_f32__compiled_without_AG_REAL_DOUBLE
#endif
static const char *const ag__real_build_check __attribute__((used, unused)) = &AG__REAL_BUILD;

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
    AG_ERR_NONFINITE = -6, /* a loss, gradient or parameter became inf or NaN */
} ag_status;

/* Message of the last failed call on this thread ("" if none). */
const char *ag_errmsg(void);
/* Sets that message (printf-style) and returns status: for code built on
 * attngrad that reports input errors the same way. */
ag_status ag_fail(ag_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* What happens on a programmer error.  The default prints the message and
 * aborts; tests install a handler that longjmps out to assert the message. */
typedef void (*ag_fatal_handler)(const char *msg);
ag_fatal_handler ag_set_fatal_handler(ag_fatal_handler h);
/* Runs fn(ctx); a programmer error inside it does not end the program but
 * returns here: AG_ERR_NOMEM when the step did not fit in memory (the
 * arena refused it), AG_ERR_ARG for any other, with the message in
 * ag_errmsg().  The tape and the step arena are rewound to where they were
 * at the call and grad mode is restored, so the caller can go on (predict
 * fails one line that is too long, not the stream).  Whatever fn allocates
 * outside the step arena is lost on such a return: allocate it before.
 * AG_OK when fn returned.  Nests; per thread. */
ag_status ag_try(void (*fn)(void *ctx), void *ctx);

/* Stops with "attngrad: <op>: <message> (at file:line)" as the library's
 * own ops do: for code built on attngrad (layers, custom ops) that refuses
 * a programmer error. */
void ag_fatal(const char *op, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

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
    int8_t stack;          /* ag_param_stack: G on a stack's first member (it holds the G
                            * members' memory), -1 on the others, 0 on any other tensor */
    const char *name;      /* stable for parameters ("encoder.wq") */
    ag_node *node;         /* the tape entry that produced it, or NULL */
    const char *op;        /* the op or constructor that made it ("ag_matmul"), for messages */
    uint32_t step;         /* the step that made a step-memory tensor (ag_step_end counts
                            * them, from 1); 0: not step memory (a parameter, a cached
                            * mask, a struct of the caller's), alive as long as its data */
    uint32_t seal;         /* internal: tells op and step from memory written over them */
} ag_tensor;

/* Step-arena tensors: valid until the next ag_step_end(). */
ag_tensor *ag_tensor_new(int ndim, const int *shape);        /* zero-filled */
ag_tensor *ag_tensor_from(const ag_real *data, int ndim, const int *shape);
ag_tensor *ag_tensor_fill(ag_real value, int ndim, const int *shape);
ag_tensor *ag_scalar(ag_real value);
ag_tensor *ag_tensor_like(const ag_tensor *t);               /* zeros, same shape */
/* Zeros on the CPU whatever the current device: a constant to fill element
 * by element (a mask, weights), then put where the step runs with
 * ag_to(t, ag_get_device()). */
ag_tensor *ag_tensor_new_host(int ndim, const int *shape);

/* Shape helpers, for messages and checks. */
bool ag_same_shape(const ag_tensor *a, const ag_tensor *b);
int ag_dim(const ag_tensor *t, int axis);                    /* axis may be negative */
const char *ag_shape_str(const ag_tensor *t, char *buf, size_t n); /* "[2,3,4]" */

/* The first element of t as a number (a loss, a scalar), on either device.
 * A tensor of a finished step is refused, naming the caller's file:line: its
 * memory may hold another step's values by now.  (t->data itself is only
 * good until ag_step_end: read a step's values within it, or copy them out
 * with ag_tensor_read, which checks the same.) */
ag_real ag__item_at(const ag_tensor *t, const char *file, int line);
#define ag_item(t) ag__item_at((t), __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

/* A model's named parameters.  Optimizers and checkpoints work on a list. */
typedef struct {
    ag_tensor **items;
    int count, cap;
    /* Set before building: ag_param records names and shapes only (data and
     * grad NULL, initializers skip them), as PyTorch's "meta" device does, so
     * that a model can be compared with a file before its memory is taken. */
    bool shapes_only;
} ag_params;

/* Creates a zero-filled persistent parameter (requires_grad, grad allocated,
 * name copied) and appends it to `ps`.  Names must be unique in `ps`. */
ag_tensor *ag_param(ag_params *ps, const char *name, int ndim, const int *shape);
/* G parameters of one shape stored one after another in one block (2 <= G
 * <= 64), named printf-style by name_fmt with each index ("unit%d.u":
 * "unit0.u", ...; scopes apply) and returned in members[0..G-1].  Each is
 * a parameter of its own - name, shape, optimizer state, checkpoint entry,
 * L2 and gradient clipping - and together they are one [G, ...] tensor to
 * ops that run G layers at once (ag_dense with a [G, in, out] weight):
 * ag_param_stack_view.  Moved between devices as one block. */
void ag_param_stack(ag_params *ps, const char *name_fmt, int G, int ndim, const int *shape, ag_tensor **members);
/* The [G, ...] tensor of the stack whose first member is `first`, for this
 * step: its values and gradient are the members' (an op's gradient to it
 * is added to theirs).  Make it in each forward: it is not valid after
 * ag_step_end or ag_params_to. */
ag_tensor *ag_param_stack_view(ag_tensor *first);
/* Name scopes, as torch's module paths: between ag_scope_push("layer0") and
 * ag_scope_pop(), ag_param(ps, "wq", ...) is named "layer0.wq"; scopes nest
 * ("enc.layer0.wq", at most 16 deep).  The name is printf-style, for a
 * stack of layers: ag_scope_push("layer%d", l).  ag_params_find takes full
 * names. */
void ag_scope_push(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void ag_scope_pop(void);
const char *ag_scope(void);   /* the current prefix, "enc.layer0." or "" */
ag_tensor *ag_params_find(const ag_params *ps, const char *name);
int64_t ag_params_numel(const ag_params *ps);
void ag_params_zero_grad(ag_params *ps);
/* Freezes a parameter (pretrained embeddings kept fixed): requires_grad
 * false, so no op records a gradient for it; optimizers initialised after
 * this keep no state for it and never change it; the L2 term and gradient
 * clipping skip it.  Its ->grad buffer stays allocated, at zero. */
void ag_param_freeze(ag_tensor *p);
void ag_params_free(ag_params *ps); /* frees every parameter and the list */

/* ------------------------------------------------------------------------ */
/* Devices                                                                   */
/* ------------------------------------------------------------------------ */

/* A tensor on AG_CUDA holds data and grad in GPU memory (a build with the
 * CUDA backend, docs/design.md "Devices"); an op runs where its inputs are,
 * and inputs on different devices are an error naming both.  Ops without a
 * CUDA implementation yet refuse CUDA tensors by name. */
const char *ag_device_name(ag_device d);                 /* "cpu", "cuda" */
/* true when CUDA tensors can be used; else false and why (built without
 * CUDA, no device found, with the driver and runtime versions). */
bool ag_cuda_available(char *why, size_t n);
/* The same, on GPU `index` of those visible (cuda:index): false and why
 * when there is no such GPU, or this process already uses another (one GPU
 * per process).  -1: the default, GPU 0, or under mpirun the rank's. */
bool ag_cuda_use(int index, char *why, size_t n);
/* The device that ag_tensor_new/_from/_fill/ag_scalar/ag_tensor_like put
 * new tensors on (default AG_CPU): set once, and a model's inputs follow. */
void ag_set_device(ag_device d);
ag_device ag_get_device(void);
/* A copy of t on d (t itself if it is there), with a gradient: backward
 * copies the gradient back and adds it to t's. */
ag_tensor *ag_to(ag_tensor *t, ag_device d);
/* Moves every parameter (values and gradient buffers) to d, before the
 * optimizer is made. */
void ag_params_to(ag_params *ps, ag_device d);
/* Waits until the GPU has done all the work queued so far (nothing on the
 * CPU): ops return as soon as their kernels are queued, so time a step
 * with a sync at its end. */
void ag_sync(void);
/* CUDA graphs (default off): the host still runs each step's code, but
 * records the GPU work instead of launching it, and each stretch between
 * two reads of GPU values runs as one graph captured from an identical
 * earlier stretch (the same kernels, arguments and addresses), else
 * eagerly.  Results are the eager ones to the bit.  No effect without a GPU. */
void ag_cuda_graphs(bool on);
bool ag_cuda_graphs_on(void);
/* t's values into host memory (t->size elements), from any device. */
void ag_tensor_read(const ag_tensor *t, ag_real *host);

/* ------------------------------------------------------------------------ */
/* Buffers: state kept between steps                                         */
/* ------------------------------------------------------------------------ */

/* Memory on a device that outlives the steps, for what a model keeps
 * between calls: an LM's state while it generates, a Transformer's keys
 * and values (ag_kv_cache, layers.h).  A step reads it through views and
 * puts op results into it with ag_buffer_write; neither is on the tape (no
 * gradient flows through a buffer).  On the GPU both stay there, in stream
 * order: a write waits for nothing. */
typedef struct ag_buffer ag_buffer;
/* n zeroed reals on d, named for messages; NULL with ag_fail (AG_ERR_NOMEM)
 * where d has no room. */
ag_buffer *ag_buffer_new(ag_device d, int64_t n, const char *name);
void ag_buffer_free(ag_buffer *b); /* NULL: nothing */
int64_t ag_buffer_size(const ag_buffer *b);
ag_device ag_buffer_device(const ag_buffer *b);
/* Elements [at, at + prod(shape)) as a tensor of shape, without gradient,
 * valid until ag_step_end.  A range past the end is refused by name. */
ag_tensor *ag_buffer_view(ag_buffer *b, int64_t at, int ndim, const int *shape);
/* src's values into elements [at, at + src->size), on the buffer's device
 * (src must be there, and must not overlap that range); returns those
 * elements as a view of src's shape. */
ag_tensor *ag_buffer_write(ag_buffer *b, int64_t at, const ag_tensor *src);

/* ------------------------------------------------------------------------ */
/* Tape, arena and backward                                                  */
/* ------------------------------------------------------------------------ */

/* Seeds d(loss)/d(loss) = 1 (loss must have one element) and replays the
 * tape in reverse, accumulating into every ->grad that requires it.  The
 * part of the tape it swept is then spent: a second backward through any of
 * it is refused (as PyTorch without retain_graph), unless the earlier
 * backward was ag_backward_retain. */
void ag_backward(ag_tensor *loss);
/* Same, keeping the tape for another backward through it; that one adds
 * its gradients to the leaves' and parameters' (intermediate results'
 * gradients are rebuilt by each sweep). */
void ag_backward_retain(ag_tensor *loss);
/* Same for a tensor of any shape, with d(out) given (same shape as out). */
void ag_backward_seeded(ag_tensor *out, const ag_real *seed);
void ag_backward_seeded_retain(ag_tensor *out, const ag_real *seed);
/* Same with d(out) a tensor of out's shape on out's device, used where it
 * is: a GPU seed made once is not copied over at every backward (as the
 * host array of ag_backward_seeded is). */
void ag_backward_seeded_tensor(ag_tensor *out, const ag_tensor *seed);

/* Ends a step: forgets the tape and rewinds the step arena.  Parameter
 * gradients are kept (zero them with ag_params_zero_grad). */
void ag_step_end(void);

/* Nested regions of a step: everything recorded after ag_mark() is forgotten
 * by ag_rewind(m) (gradient checks and evaluation loops use this). */
typedef struct {
    size_t arena_pos;
    int arena_chunk;
    int tape_len;
    size_t device_pos; /* the device arena's (CUDA) */
    int device_chunk;
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
    size_t device_arena_high; /* the same for the GPU's step arena (CUDA) */
    int64_t device_waits;     /* times the host waited for the GPU: value reads, ag_sync (CUDA) */
    int64_t device_launches;  /* kernels, cuBLAS calls, copies and fills put on the GPU's stream (CUDA;
                                 with ag_cuda_graphs, those replayed inside a graph launch too) */
    int64_t graph_launches, graph_captures, eager_segments; /* ag_cuda_graphs: stretches run each way */
    int64_t device_kept_uploads; /* small uploads whose bytes were still on the GPU: no copy (CUDA) */
    int64_t short_segments;      /* of the eager stretches, those too short to pay for a graph launch */
} ag_mem_stats;
ag_mem_stats ag_memstats(void);
/* arena_high and device_arena_high start again from the step memory in
 * use now: to measure one model's or one size's peak after another's in
 * the same process (call it between steps, after ag_step_end). */
void ag_memstats_reset_high(void);

/* Frees the arena and all library state (for leak checkers). */
void ag_shutdown(void);

/* Threads of the engine's parallel loops, the caller included.  Default:
 * AG_NUM_THREADS or OMP_NUM_THREADS from the environment, else one per
 * core.  OpenBLAS runs single-threaded under it (the engine splits large
 * GEMMs itself), so this one number sets both levels.  Results are bitwise
 * the same for every count.  Not from inside a running op. */
void ag_set_num_threads(int n);   /* n >= 1 */
int ag_get_num_threads(void);
/* The BLAS the CPU's products run on, e.g. "OpenBLAS 0.3.21, Cooperlake
 * kernels".  An OpenBLAS that took kernels without AVX2 on a CPU it does
 * not know (0.3.21 on Intel's Emerald Rapids: Prescott's, 5x slower) is
 * moved to the ones it names for the CPU, unless OPENBLAS_CORETYPE is
 * set; the text then says so.  Sets the BLAS up if nothing has yet. */
const char *ag_blas_info(void);

/* Subnormal floats (below 1.2e-38) flushed to zero on the CPU, as
 * TensorFlow and XLA do: a subnormal input reads as 0, a subnormal result
 * becomes 0.  x86 computes with them 10-100x slower, and Adam with L2
 * leaves weights there (docs/performance.md, "Subnormal weights").  Sets
 * the calling thread and the engine's; another thread that runs ops takes
 * it at its next parallel loop (nearly every op's kernel is one), so the
 * results stay the same for every thread count.  Off in the
 * library until asked (the caller's own arithmetic is its business); on in
 * ag_train and the attngrad commands (--denormals keep turns it off).  A
 * no-op where the CPU has no such mode (ag_flush_denormals_supported).
 * Returns the previous setting. */
bool ag_flush_denormals(bool on);
bool ag_flush_denormals_enabled(void);
bool ag_flush_denormals_supported(void);

/* Anomaly mode, as PyTorch's detect_anomaly: every op checks its output and,
 * in backward, the gradients it produced for its inputs; the first inf or
 * NaN an op makes from finite inputs stops the program as a programmer
 * error does (the fatal handler, or ag_try), naming the op, its shapes, the
 * element and the model's line (AG_AT).  Values that come in non-finite
 * (a mask's -inf) are passed on unreported.  For debugging: every op then
 * reads its output once more.  Off (the default) it costs a branch per op.
 * Returns the previous mode. */
bool ag_anomaly(bool on);
bool ag_anomaly_enabled(void);

/* Op profiler: time per op and call site (file:line of the AG_AT macro),
 * forward and backward apart, like torch.profiler's table.  Start it after
 * the warm-up steps, run K steps, then report per step; top <= 0 lists
 * every site.  The optimizer and other work outside ops show as the rest.
 * Times are wall clock on the calling thread (parallel parts included).
 * On a GPU it also counts each site's launches (kernels, cuBLAS calls,
 * copies, fills): what to fuse next when launches, not flops, bound a step. */
void ag_profile_start(void);
void ag_profile_stop(void);
void ag_profile_report(FILE *f, int steps, int top);

/* ------------------------------------------------------------------------ */
/* Random numbers (seeded, reproducible, saveable)                           */
/* ------------------------------------------------------------------------ */

typedef struct { uint64_t s[4]; } ag_rng;  /* xoshiro256** */

void ag_rng_seed(ag_rng *r, uint64_t seed);
uint64_t ag_rng_next(ag_rng *r);
double ag_rng_uniform(ag_rng *r);          /* [0, 1) */
double ag_rng_normal(ag_rng *r);           /* N(0, 1) */

/* ------------------------------------------------------------------------ */
/* Recomputation                                                             */
/* ------------------------------------------------------------------------ */

/* Recomputation (activation checkpointing, as torch.utils.checkpoint):
 * y = f(ctx, in) without keeping what f makes on the way.  The forward
 * runs f with gradients off and keeps y alone; backward runs f again on the
 * same inputs with gradients on, sweeps through that run and forgets it.
 * A region's step memory is then its output, for one more forward of f in
 * backward: wrap each layer of a deep stack and the stack keeps one
 * layer's intermediate results at a time.  Gradients reach in[] and every
 * parameter f reads through ctx as without it.  ctx_bytes > 0: ctx is
 * copied (a struct on the caller's stack will do; what it points to must
 * last until backward); 0: ctx itself is kept and must last.  f must
 * compute the same function both times: if it draws from rng (dropout),
 * pass rng, which is put back for the second run (the same masks) and then
 * left where the first run left it; rng too must last until backward (a
 * model's own, not a local of the function that calls the region).  At most 8 inputs (more through ctx,
 * as constants); regions may nest.  With gradients off it is f(ctx, in). */
typedef ag_tensor *(*ag_recompute_fn)(void *ctx, ag_tensor *const *in);
ag_tensor *ag_recompute(ag_recompute_fn f, void *ctx, size_t ctx_bytes, int n, ag_tensor *const *in, ag_rng *rng);

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
/* a + w (b - a), a, b and w of one shape: a fusion gate w b + (1 - w) a in
 * one op (torch.lerp with a tensor weight).  The same values and gradients
 * as ag_add(a, ag_mul(w, ag_sub(b, a))), to the bit unless a is used again
 * after the gate (its gradient's terms are then summed in another order). */
ag_tensor *ag_lerp(ag_tensor *a, ag_tensor *b, ag_tensor *w);

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
ag_tensor *ag_gelu(ag_tensor *x);          /* x Phi(x), the exact (erf) GELU, as PyTorch's default */
ag_tensor *ag_silu(ag_tensor *x);          /* x sigmoid(x) (swish) */
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
/* x[..., in] @ W[in, out] + bias[out] (bias may be NULL): one GEMM.
 * Grouped, G independent layers in one op: W[G, in, out], x[G, ..., in],
 * bias [G, out] or NULL -> y[G, ..., out], y[g] = ag_linear(x[g], W[g],
 * bias[g]).  On the CPU each group's values and gradients are those of
 * the G separate calls, bit for bit; on the GPU the G layers take the
 * launches of one (batched products). */
ag_tensor *ag_linear(ag_tensor *x, ag_tensor *w, ag_tensor *bias);
/* x[..., in] W^T + bias with W stored [out, in] (PyTorch's layout): a
 * decoder tied to an embedding table [V, d] is ag_linear_t(h, table, b).
 * Grouped as ag_linear: W[G, out, in], x[G, ..., in], bias [G, out]. */
ag_tensor *ag_linear_t(ag_tensor *x, ag_tensor *w, ag_tensor *bias);
/* A dense layer act(x W + b), W [in,out], b [out] (may be NULL): one op,
 * the activation fused into the linear's passes (no pre-activation kept);
 * GELU and SiLU, whose derivatives need the pre-activation, are the
 * linear then ag_gelu / ag_silu.  Grouped as ag_linear (W[G, in, out],
 * x[G, ..., in], b [G, out]): G layers of one activation in one op. */
typedef enum { AG_ACT_NONE = 0, AG_ACT_RELU, AG_ACT_ELU, AG_ACT_TANH, AG_ACT_SIGMOID, AG_ACT_GELU, AG_ACT_SILU } ag_act;
ag_tensor *ag_dense(ag_tensor *x, ag_tensor *w, ag_tensor *b, ag_act act);
/* The gated linear unit over x [..., 2F], the gate's F features then the
 * value's: act(gate) * value [..., F] in one op (Dauphin et al. 2017's GLU
 * with AG_ACT_SIGMOID; Shazeer 2020's SwiGLU with AG_ACT_SILU, GEGLU with
 * AG_ACT_GELU, ReGLU with AG_ACT_RELU; AG_ACT_NONE: bilinear, the two
 * halves multiplied).  Keeps nothing but x: backward makes act(gate) again. */
ag_tensor *ag_glu(ag_tensor *x, ag_act act);

/* ------------------------------------------------------------------------ */
/* Shape ops                                                                 */
/* ------------------------------------------------------------------------ */

/* Zero-copy view with a new shape of the same size; one dim may be -1. */
ag_tensor *ag_reshape(ag_tensor *x, int ndim, const int *shape);
/* Output dim i is input dim perm[i] (a copy; perm lists every dim once). */
ag_tensor *ag_permute(ag_tensor *x, const int *perm);
/* Swaps two dims (negative axes count from the end). */
ag_tensor *ag_transpose(ag_tensor *x, int axis0, int axis1);
/* Joins n >= 1 tensors along axis; their shapes may differ only there. */
ag_tensor *ag_concat(ag_tensor **xs, int n, int axis);
/* Elements start..end-1 (end exclusive) along axis; 0 <= start <= end <= dim.
 * A zero-copy view when every dim before axis is 1. */
ag_tensor *ag_slice(ag_tensor *x, int axis, int start, int end);
/* out[..., i, ...] = x[..., index[i], ...] along axis, i < n; indices may
 * repeat (their gradients add up).  The index array is copied. */
ag_tensor *ag_index_select(ag_tensor *x, int axis, const int32_t *index, int n);
/* x [B, N, ...] with each example's first lengths[b] positions in reverse
 * order and its padding in place (lengths NULL: all N): what a recurrence
 * running right to left reads (ag_lstm_opts.reverse).  Its own inverse;
 * the gradient is reversed alike. */
ag_tensor *ag_reverse_padded(ag_tensor *x, const int32_t *lengths);
/* table[V, d] looked up with ids of shape [shape...] (ndim <= 3, each id in
 * [0, V)) -> [shape..., d].  The ids are copied. */
ag_tensor *ag_embedding(ag_tensor *table, const int32_t *ids, int ndim, const int *shape);

/* ------------------------------------------------------------------------ */
/* Losses and regularisation                                                 */
/* ------------------------------------------------------------------------ */

/* Mean over the rows of logits[..., C] whose label is not ignore_index of
 * -log softmax(logits)[label] (fused, stable) -> scalar.  Labels: one per
 * row, each in [0, C) or ignore_index; if every row is ignored the loss is 0
 * with a zero gradient. */
ag_tensor *ag_cross_entropy(ag_tensor *logits, const int32_t *labels, int ignore_index);
/* ag_cross_entropy(ag_linear(x, w, bias), labels, ignore_index) in one op,
 * for a classifier over many classes (an LM's vocabulary): only the counted
 * rows are multiplied, and the [rows, C] logits never leave the op (their
 * gradient is formed in the same pass as the loss).  w [in, C]; bias [C] or
 * NULL.  ag_linear_t_cross_entropy takes w [C, in], as a tied decoder. */
ag_tensor *ag_linear_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                   int ignore_index);
ag_tensor *ag_linear_t_cross_entropy(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                     int ignore_index);
/* The same three against a smoothed target (label smoothing, Szegedy et
 * al. 2016; torch's cross_entropy(..., label_smoothing=eps)): (1 - eps) on
 * the label and eps / C on every class, so a row's loss is
 * logsumexp(z) - (1 - eps) z_y - eps mean(z).  smoothing in [0, 1]; 0 is
 * the plain loss to the bit. */
ag_tensor *ag_cross_entropy_smoothed(ag_tensor *logits, const int32_t *labels, int ignore_index, double smoothing);
ag_tensor *ag_linear_cross_entropy_smoothed(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                            int ignore_index, double smoothing);
ag_tensor *ag_linear_t_cross_entropy_smoothed(ag_tensor *x, ag_tensor *w, ag_tensor *bias, const int32_t *labels,
                                              int ignore_index, double smoothing);
/* mean((pred - target)^2) over all elements -> scalar; same shapes. */
ag_tensor *ag_mse(ag_tensor *pred, ag_tensor *target);
/* Mean over the rows of logits[..., C] of KL(t || softmax(logits)) =
 * sum_c t_c (log t_c - log p_c), entries t_c = 0 adding 0 (fused, stable)
 * -> scalar.  target_probs holds rows*C probabilities, each row summing to
 * 1; it is copied (no gradient flows to it).  Gradient: p - t, as for the
 * soft cross-entropy, which differs from KL by the constant H(t). */
ag_tensor *ag_kl_div_soft(ag_tensor *logits, const ag_real *target_probs);

/* Inverted dropout keeping each unit with probability keep in (0, 1] and
 * scaling it by 1/keep; the mask comes from rng.  When !training or
 * keep == 1 it returns x itself and records nothing. */
ag_tensor *ag_dropout(ag_tensor *x, double keep, bool training, ag_rng *rng);
/* Dropout masks are keyed by example: x's first dim is the batch (a vector
 * is one row), and its row r is example row_base + r of the global batch.  A data-parallel rank
 * holding rows [base, base + n) of it sets base here, so that its rows are
 * dropped as one process would drop them; 0 (the default) in one process.
 * Returns the previous value. */
int64_t ag_set_dropout_row_base(int64_t base);

/* ------------------------------------------------------------------------ */
/* Attention ops: softmax family, masks, heads, fused attention              */
/* ------------------------------------------------------------------------ */

/* Softmax along the last axis (max-subtracted). */
ag_tensor *ag_softmax(ag_tensor *x);
/* softmax(scale * x + mask) along the last axis.  mask (may be NULL) is a
 * constant of additive entries - 0, -INFINITY or finite penalties - whose
 * last dim equals x's and whose other dims broadcast to x's (NumPy rules,
 * right-aligned): for scores [B,h,Nq,Nk] a mask [Nq,Nk], [1,h,Nq,Nk],
 * [B,1,Nq,Nk], [B,1,1,Nk] or [B,h,Nq,Nk].  A mask whose broadcast is
 * ambiguous - fewer dims than the scores, with a dim that would pair with
 * the heads while the batch has the same size ([B,1,Nk] or [h,Nq,Nk] when
 * B == h) - is refused with the 4-D shapes to pass instead.  A row with no
 * allowed entry (e.g. the first query under AG_MASK_PAST) gives zeros and
 * no gradient. */
ag_tensor *ag_masked_softmax(ag_tensor *x, ag_tensor *mask, double scale);
/* log softmax along the last axis (finite logits). */
ag_tensor *ag_log_softmax(ag_tensor *x);
/* Softmax along `axis` over the positions t < lengths[b], where b indexes
 * dim 0 (so axis >= 1), separately for every other index; positions
 * t >= lengths[b] get weight 0 (all of them when lengths[b] = 0).  lengths
 * NULL: over the whole axis.  Source2token pooling: x[B,N,d], axis 1. */
ag_tensor *ag_softmax_axis_len(ag_tensor *x, int axis, const int32_t *lengths);
/* softmax(scale * x + mask) along any axis, without a transposed copy.
 * Along the last axis it is ag_masked_softmax, mask rules included; along
 * another axis the mask (a constant, or NULL) has x's dims, x's size along
 * the axis and every other dim equal to x's or 1 - e.g. softmax over the
 * keys j of per-feature scores S[B,Nq,Nk,d] (axis 2) under a direction mask
 * [Nq,Nk] passed as [1,Nq,Nk,1].  A slice with no allowed entry gives
 * zeros and no gradient. */
ag_tensor *ag_masked_softmax_axis(ag_tensor *x, int axis, ag_tensor *mask, double scale);
/* A softmax gate over n sources (1..8), per feature: out[..., l] =
 * sum_g softmax_g(z[..., g*d + l]) S_g[..., l], z [..., n*d] (or
 * [..., n, d]), every S_g [..., d].  MPSAN's position fusion in one pass. */
ag_tensor *ag_softmax_mix(ag_tensor *z, ag_tensor *const *sources, int n);
/* The same over sources [B, N, d] whose positions t >= lengths[b] are
 * padding: there out is 0 and nothing flows back (= ag_zero_padding of
 * ag_softmax_mix, without computing the gate of padded positions). */
ag_tensor *ag_softmax_mix_len(ag_tensor *z, ag_tensor *const *sources, int n, const int32_t *lengths);
/* The gate with the last source as the reference: z [..., (n-1)*d] (or
 * [..., n-1, d]) holds the other sources' logits and the last one's is 0
 * (n >= 2; lengths as ag_softmax_mix_len, or NULL).  A softmax sees only
 * differences of logits, so a gate z = x W + b equals this one on
 * x (W_g - W_last) + (b_g - b_last): a fifth fewer products for MPSAN. */
ag_tensor *ag_softmax_mix_ref(ag_tensor *z, ag_tensor *const *sources, int n, const int32_t *lengths);

/* Heads: [N, h*d] -> [h, N, d] and [B, N, h*d] -> [B, h, N, d].  This permute
 * has no zero-copy view in contiguous storage: it is one tight copy (and
 * backward the inverse copy). */
ag_tensor *ag_split_heads(ag_tensor *x, int h);
/* h heads of width d from columns [col, col + h d) of x [N, C] or [B, N, C]
 * -> [h, N, d] or [B, h, N, d]: a fused projection's q, k and v taken
 * apart without slicing (ag_mha_forward); the gradient adds into those
 * columns. */
ag_tensor *ag_split_heads_at(ag_tensor *x, int col, int h, int d);
/* The inverse: [h, N, d] -> [N, h*d], [B, h, N, d] -> [B, N, h*d]. */
ag_tensor *ag_merge_heads(ag_tensor *x);

/* Fused attention softmax(Q K^T * scale + mask) V over every leading slice:
 * Q [B,h,Nq,d], K [B,h,Nk,d], V [B,h,Nk,dv] -> [B,h,Nq,dv] (or with fewer
 * leading dims, equal in all three).  Grouped-query attention: K and V may
 * have kv heads (their dim -3) where kv divides Q's h, each key-value head
 * serving the h/kv query heads of its group (heads i*h/kv .. (i+1)*h/kv - 1),
 * without copies; its gradient sums over the group.  mask as in ag_masked_softmax against
 * the scores [B,h,Nq,Nk]; fully masked rows give 0.  Backward stores only
 * the probabilities; if probs is not NULL it receives them ([B,h,Nq,Nk],
 * read-only, no gradient, valid until ag_step_end) for heatmaps.  On the
 * CPU the products skip the keys a mask rules out for a whole block of
 * query rows (a causal mask's future, a window's far past, padding). */
ag_tensor *ag_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale,
                        ag_tensor **probs);
/* The same attention, keeping nothing of the scores: backward makes the
 * probabilities again from q, k and mask, a block of query rows at a time
 * (flash attention's trade: about one more Q K^T product and softmax for
 * no [B,h,Nq,Nk] tensor, so memory linear in the sequence).  The same
 * values and gradients as ag_attention, to rounding; the mask must be
 * unchanged until backward. */
ag_tensor *ag_attention_recompute(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, double scale);

/* Positional masks M[q,k], q = query (row), k = key (column).  Direction:
 * PAST allows k < q, FUTURE k > q, PAST_INCL k <= q, FUTURE_INCL k >= q. */
typedef enum {
    AG_MASK_NONE = 0, AG_MASK_PAST, AG_MASK_FUTURE, AG_MASK_PAST_INCL, AG_MASK_FUTURE_INCL
} ag_mask_dir;
/* Distance penalty added where allowed: WORD -|q-k|; LOG -ln|q-k|, taken as
 * 0 on the diagonal (as at distance 1); TREE -dependency distance. */
typedef enum { AG_DIST_NONE = 0, AG_DIST_WORD, AG_DIST_LOG, AG_DIST_TREE } ag_mask_dist;
typedef struct {
    ag_mask_dir dir;
    int faraway;        /* m > 0: allowed only where 1 <= |k-q| <= m */
    ag_mask_dist dist;
    double weight;      /* multiplies the penalty (MS-SAN: 1.5); 0 reads as 1 */
    int window;         /* w > 0: allowed only where |k-q| < w, the word itself included (a sliding window:
                           with AG_MASK_PAST_INCL each position reads itself and the w - 1 before it) */
} ag_mask_spec;

/* The constant mask [N,N] of spec: -inf where disallowed, else the penalty.
 * Built on first use and cached (freed by ag_shutdown): do not modify it.
 * The cache holds 64 MiB; a mask past that (very long sequences) is built in
 * step memory on every call instead, valid until ag_step_end.
 * Not for AG_DIST_TREE, which differs per sentence (see ag_mask_batch). */
ag_tensor *ag_mask(const ag_mask_spec *spec, int N);
/* Per-head constant masks [h,N,N], head i from specs[i]; cached likewise.
 * Against batched scores [B,h,N,N] view it as [1,h,N,N] (ag_reshape):
 * [h,N,N] there is refused as ambiguous when B == h. */
ag_tensor *ag_mask_heads(const ag_mask_spec *specs, int h, int N);
/* Dual-axial attenuation factor [N,N] = 1 / ln(w|q-k| + c), to multiply
 * (docs/models.md, dual-axial: w = c = e); needs w >= 0, c > 1; cached likewise. */
ag_tensor *ag_mask_attenuation(double w, double c, int N);
/* Padding mask from lengths (step arena): -inf for keys k >= lengths[b]
 * and, with queries, for whole rows q >= lengths[b].  ndim 3 gives [B,1,N]
 * ([B,N,N] with queries) for scores [B,N,N]; ndim 4 gives [B,1,1,N]
 * ([B,1,N,N]) for scores [B,h,N,N]. */
ag_tensor *ag_mask_padding(const int32_t *lengths, int B, int N, int ndim, bool queries);
/* Undirected dependency-tree distances of one sentence, dist[q*n + k], from
 * heads[i] in {-1 (root), 0..n-1}; two trees of a forest are n apart.  A
 * head out of range, pointing to itself or on a cycle is AG_ERR_FORMAT
 * with a message naming the position. */
ag_status ag_tree_distance(const int32_t *heads, int n, int32_t *dist);
/* The masks of one batch, [B,h,N,N] in the step arena: head i from
 * specs[i] (AG_DIST_TREE from heads[b*N + t], t < lengths[b]; heads may be
 * NULL if no spec uses it), -inf for padded keys and padded query rows.
 * Bad heads: AG_ERR_FORMAT naming the sentence and position, *out = NULL. */
ag_status ag_mask_batch(const ag_mask_spec *specs, int h, int B, int N, const int32_t *lengths,
                        const int32_t *heads, ag_tensor **out);

/* ------------------------------------------------------------------------ */
/* Sequence ops: Gaussian positional scoring, layer norm, LSTM               */
/* ------------------------------------------------------------------------ */

/* Layer norm over the last axis with the biased variance:
 * (x - mean) / sqrt(var + eps) * gamma + beta.  x[..., D]; gamma, beta [D]
 * (either may be NULL: no scale, no shift). */
ag_tensor *ag_layernorm(ag_tensor *x, ag_tensor *gamma, ag_tensor *beta, double eps);
/* RMS norm over the last axis (LLaMA's, torch's rms_norm): not centred,
 * x / sqrt(mean(x^2) + eps) * gamma.  gamma [D] or NULL. */
ag_tensor *ag_rmsnorm(ag_tensor *x, ag_tensor *gamma, double eps);
/* Rotary positions (RoFormer, eq. 34): x [..., N, D], the row at position
 * t (its index on axis -2, plus pos0) cut into D / head_dim heads, and
 * each head's pair (2i, 2i+1) turned by the angle (pos0 + t) theta_i,
 * theta_i = base^(-2i / head_dim) (base 10000 in the paper).  Applied to
 * queries and keys, q_m . k_n then depends on m - n alone.  Works on
 * split heads [B, h, N, dh] (head_dim = dh) as on [B, N, h dh] rows.  The
 * pairs are adjacent features (the paper's; GPT-NeoX's and Hugging Face's
 * LLaMA pair feature i with i + head_dim/2: the same rotation up to a
 * permutation of each head's features). */
ag_tensor *ag_rope(ag_tensor *x, int head_dim, int pos0, double base);

/* The positional LM's mean recurrence (docs/models.md, positional LM, step 3): m[B,N,3] ->
 * mu[B,N], mu_t = max(m_t . [mu_{t-1}, 1/len, (t+1)/len], t/len), mu_{-1} = 0.
 * The gradient flows through the recurrence; on a tie it goes to the floor
 * t/len, i.e. nowhere.  0 at padded t.  len[B], or NULL: all N. */
ag_tensor *ag_gaussian_mu(ag_tensor *m, const int32_t *len);

/* Gaussian positional context (docs/models.md, positional LM, steps 4-5), per example of length len:
 *   gamma[t,i] = exp(-(i/len - mu_t)^2 / (2 sigma_t^2 + eps)) over the window
 *   i <= t (strict: i < t, so c_0 = 0), divided by max(sum over the window, 1e-12);
 *   c_t = sum_i gamma[t,i] h_i.
 * h[B,N,H], mu and sigma [B,N] or [B,N,1], len[B] or NULL -> c[B,N,H], 0 at
 * padded t.  Gradients to h, mu and sigma.  If weights is not NULL it
 * receives gamma as [B,N(t),N(i)] (a plain tensor, for heatmaps). */
ag_tensor *ag_gaussian_context(ag_tensor *h, ag_tensor *mu, ag_tensor *sigma, const int32_t *len, bool strict,
                               double eps, ag_tensor **weights);

/* One recurrent layer's parameters: w_ih [in,GH], w_hh [H,GH], b_ih and
 * b_hh [GH] (a bias may be NULL), G gates along the columns: an LSTM's
 * i,f,g,o (G = 4), a GRU's r,z,n (G = 3, PyTorch's order). */
typedef struct {
    ag_tensor *w_ih, *w_hh, *b_ih, *b_hh;
} ag_rnn_layer;
typedef ag_rnn_layer ag_lstm_layer;
typedef ag_rnn_layer ag_gru_layer;

/* Options of ag_lstm; a zeroed struct (or NULL) means: full lengths, zero
 * initial state, no dropout. */
typedef struct {
    const int32_t *len;  /* [B] true lengths, or NULL: all N */
    ag_tensor *h0, *c0;  /* [layers,B,H] initial states (may require grad), or NULL: zeros */
    double keep;         /* inverted-dropout keep prob between layers; 0 means 1 (none) */
    bool training;       /* dropout only when training */
    ag_rng *rng;         /* needed when training with keep < 1 */
    ag_tensor **h_n, **c_n; /* if set: receive the final states [layers,B,H] (gradients flow back) */
    bool reverse;        /* right to left over each example's valid positions (the backward half of a
                          * bidirectional LSTM): the output stays in the input's order, the final state
                          * is the one after position 0 */
} ag_lstm_opts;

/* Multi-layer LSTM over whole sequences: x[B,N,in] -> the top layer's
 * h[B,N,H]; layer l > 0 reads layer l-1's output.  At t >= len[b] the state
 * is frozen and the output is 0, so the final state of example b is its
 * state after step len[b]-1 (its initial state when len[b] = 0), as
 * PyTorch's packed sequences give it: pass it on as the next batch's h0/c0
 * (truncated BPTT) or use it as a sentence encoding. */
ag_tensor *ag_lstm(ag_tensor *x, const ag_lstm_layer *layers, int num_layers, const ag_lstm_opts *opts);

/* Options of ag_gru: ag_lstm_opts' without a cell state. */
typedef struct {
    const int32_t *len;  /* [B] true lengths, or NULL: all N */
    ag_tensor *h0;       /* [layers,B,H] initial state (may require grad), or NULL: zeros */
    double keep;         /* inverted-dropout keep prob between layers; 0 means 1 (none) */
    bool training;       /* dropout only when training */
    ag_rng *rng;         /* needed when training with keep < 1 */
    ag_tensor **h_n;     /* if set: receives the final states [layers,B,H] (gradients flow back) */
    bool reverse;        /* right to left over each example's valid positions */
} ag_gru_opts;

/* Multi-layer GRU (PyTorch's nn.GRU, the reset gate on the recurrent part
 * after its bias):  r = sigmoid(x W_ir + b_ir + h W_hr + b_hr),
 * z likewise, n = tanh(x W_in + b_in + r (h W_hn + b_hn)),
 * h' = (1 - z) n + z h.  x[B,N,in] -> h[B,N,H], with ag_lstm's lengths,
 * padding, dropout, final states and direction. */
ag_tensor *ag_gru(ag_tensor *x, const ag_gru_layer *layers, int num_layers, const ag_gru_opts *opts);

/* MTSA's sigma_t: log-sigmoid (the paper: ER = M ⊙ sigmoid(R)) or identity (FLAG: ER = M ⊙ exp(R)). */
typedef enum { AG_MTSA_LOG_SIGMOID = 0, AG_MTSA_IDENTITY = 1 } ag_mtsa_score;

/* MTSA multi-dim token2token attention (docs/models.md, MTSA, steps 2-4), without
 * forming [N,N,dh]:  H[q,l] = sum_k softmax_k(sigma_t(R[q,k]) + S[k,l] + log M[q,k]) v[k,l],
 * 0 on rows with no allowed key.  R[B,N,N] or [B,h,N,N] (query rows, key
 * columns), S and v [B,(h,)N,dh] -> H like v.  M = mask ∧ valid(q) ∧ valid(k),
 * with mask {0,1} shaped like a suffix of R ([N,N], [h,N,N], ...) or NULL
 * (all allowed), and len[B] or NULL.  Gradients to R, S and v.  Exact at
 * any magnitude of the scores (an entry whose factorised denominator
 * underflows is summed directly). */
ag_tensor *ag_mtsa_attention(ag_tensor *r, ag_tensor *s, ag_tensor *v, const ag_tensor *mask, const int32_t *len,
                             ag_mtsa_score score);

/* Feature-wise (multi-dimensional) additive attention, DiSAN's
 * token2token form, without the [B,Nq,Nk,d] tensor of scores:
 *   out[b,i,l] = sum_j softmax_j(c tanh((q[b,i,l] + k[b,j,l]) / c) + mask[b,i,j]) v[b,j,l]
 * q [B,Nq,d] (the query's projection W2 x_i + bias), k and v [B,Nk,d] ->
 * [B,Nq,d]; c > 0 (DiSAN: 5).  mask: additive constant (0, -inf, finite
 * penalties) broadcast against the scores [B,Nq,Nk] as in ag_masked_softmax
 * ([Nq,Nk] direction masks from ag_mask, [B,1,Nk], [B,Nq,Nk]), or NULL.
 * lengths (or NULL; self-attention, Nq == Nk) masks keys j >= lengths[b]
 * and gives 0 at query rows i >= lengths[b].  A row with no allowed key
 * gives 0 and no gradient.  Gradients to q, k and v.  If weights is not
 * NULL it receives the weights [B,Nq,Nk,d] (read-only, no gradient, valid
 * until ag_step_end; built only when asked: heatmaps).  Any other score
 * tensor S[B,Nq,Nk,d]: ag_masked_softmax_axis(S, 2, mask, 1) (docs/layers.md). */
ag_tensor *ag_feature_attention(ag_tensor *q, ag_tensor *k, ag_tensor *v, ag_tensor *mask, const int32_t *lengths,
                                double c, ag_tensor **weights);

/* ------------------------------------------------------------------------ */
/* Custom ops (as torch.autograd.Function)                                   */
/* ------------------------------------------------------------------------ */

/* An op written by the user: a forward that fills out->data from the
 * inputs' data, and a backward that adds dL/d(in[i]) into grad_in[i] from
 * dL/d(out) = grad_out.  ag_custom_op checks the inputs, allocates the
 * output (zero-filled, step memory), runs forward, and records the op on
 * the tape; ag_backward calls backward like any op's, and ag_gradcheck
 * checks it like any op (examples/custom_op.c: cosine similarity). */
typedef struct {
    const char *name;               /* in messages and the profiler ("cosine_sim") */
    ag_tensor *const *in;           /* the inputs, in call order (read them; do not write) */
    int n_in;
    ag_tensor *out;                 /* forward: write out->data */
    const ag_real *grad_out;        /* backward: dL/d(out), out->size elements */
    ag_real *const *grad_in;        /* backward: add (+=) dL/d(in[i]) here; NULL when in[i]
                                     * needs no gradient */
    void *saved;                    /* what forward keeps for backward (norms, masks, ...):
                                     * saved_bytes of zeroed step memory, or forward points it
                                     * at step memory of its own (ag_tensor_new(...)) */
    const void *params;             /* a copy of the call's params (constants), or NULL */
} ag_custom_call;

typedef struct {
    const char *name;               /* must outlive the step (a string literal) */
    void (*forward)(ag_custom_call *c);
    void (*backward)(ag_custom_call *c); /* may be NULL for an op no gradient goes through */
    size_t saved_bytes;             /* 0: none */
} ag_custom_fn;

/* Records fn on the inputs in[0..n) (1 <= n <= 8) with an output of shape
 * out_shape; params (params_bytes, copied) reach both functions.  The
 * functions run with recording off: they may use ops for scratch values.
 * Gradients are wanted for the inputs with requires_grad; the output
 * requires grad when any input does. */
ag_tensor *ag_custom_op(const ag_custom_fn *fn, ag_tensor *const *in, int n, int out_ndim, const int *out_shape,
                        const void *params, size_t params_bytes);

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
    /* Optional (NULL: none): n entries, set to each input's largest
     * max(|a|, |n|) checked, as max_grad below is over all of them: an
     * input whose gradients all sit under ~10 atol passed without being
     * checked, even where another input's are large. */
    double *input_max_grad;
} ag_gradcheck_opts;

typedef struct {
    bool ok;
    double max_rel_err;     /* max |a - n| / max(|a|, |n|, atol / rtol) */
    double max_abs_err;
    int worst_input;        /* index into wrt */
    int64_t worst_index;    /* flat element index */
    double analytic, numeric; /* at the worst element */
    int64_t checked;
    /* max |a - n| / max(|a|, |n|) (0 where both are 0): the true relative
     * error, without max_rel_err's floor, so it is large where a gradient
     * too small for finite differences to resolve disagrees with them */
    double max_true_rel_err;
    /* max(|a|, |n|) over the checked elements: the largest gradient the
     * check saw.  Under about 10 atol every gradient passes whatever it is
     * (a wrong one as well): such a PASS checked nothing. */
    double max_grad;
    /* max |a| over every element of wrt, checked or not (backward gives
     * them all): the analytic gradient alone, which max_grad mixes with
     * finite differences' ~1e-10 noise.  A gradient zero by structure is
     * exactly 0 or roundoff (1e-16 of the others); a wrong one of 1e-10
     * shows here, where |a - n| and max_grad both pass it. */
    double max_analytic;
} ag_gradcheck_result;

ag_gradcheck_opts ag_gradcheck_defaults(void);
/* Compares analytic gradients of every tensor in wrt with central
 * differences.  f is called many times; wrt must outlive the check. */
ag_gradcheck_result ag_gradcheck(ag_forward_fn f, void *ctx, ag_tensor **wrt, int n,
                                 const ag_gradcheck_opts *opts);
/* How far f's output moves when every element of t moves at once, each
 * by a distance in [shift/2, shift) of either sign, drawn from seed (no
 * two alike, so that the moves cannot cancel in a dependence alike on
 * every element), and when they all move the opposite way: the larger
 * max |f'(x) - f(x)| over the output's elements, relative to max |f(x)|
 * (absolute where that is 0); t gets its values back.  The test of a zero
 * gradient that finite differences cannot make: a parameter zero by
 * structure (a bias added before a softmax over positions: every score
 * shifts alike) leaves the output at roundoff (~1e-16) however far it
 * moves; one whose gradient is only locally zero (a ReLU dead around x,
 * on one side or both) or tiny but not zero moves it. */
double ag_gradcheck_shift(ag_forward_fn f, void *ctx, ag_tensor *t, double shift, uint64_t seed);

/* ------------------------------------------------------------------------ */
/* ------------------------------------------------------------------------ */
/* Call sites                                                                */
/* ------------------------------------------------------------------------ */

/* Every op records the caller's file:line before it runs, so an error (and
 * the profiler) names the line in the user's model.  Sites nest: in
 * ag_dense(helper(x), w, b, act) the ops inside helper() stamp their own
 * lines and, returning, give the dense its line back; the outermost call's
 * return leaves no site, so a call without one names none.  The library
 * itself defines AG_INTERNAL.  Calls that return no tensor (ag_mask_batch's
 * status, initialisers, the optimizer, ag_backward) stamp their line while
 * they run and give the enclosing site back. */
void ag_set_callsite(const char *file, int line);
void ag_callsite_push(const char *file, int line);
ag_tensor *ag_callsite_pop(ag_tensor *result);
void ag_callsite_end(void);
ag_status ag_callsite_end_status(ag_status status);
#define AG_AT(fn, ...) (ag_callsite_push(__FILE__, __LINE__), ag_callsite_pop(fn(__VA_ARGS__)))
#define AG_AT_STMT(fn, ...) (ag_set_callsite(__FILE__, __LINE__), fn(__VA_ARGS__), ag_callsite_end())
#define AG_AT_STATUS(fn, ...) ag_callsite_end_status((ag_set_callsite(__FILE__, __LINE__), fn(__VA_ARGS__)))

#ifndef AG_INTERNAL
/* tensor ops */
#define ag_add(...) AG_AT(ag_add, __VA_ARGS__)
#define ag_sub(...) AG_AT(ag_sub, __VA_ARGS__)
#define ag_mul(...) AG_AT(ag_mul, __VA_ARGS__)
#define ag_div(...) AG_AT(ag_div, __VA_ARGS__)
#define ag_maximum(...) AG_AT(ag_maximum, __VA_ARGS__)
#define ag_add_scalar(...) AG_AT(ag_add_scalar, __VA_ARGS__)
#define ag_lerp(...) AG_AT(ag_lerp, __VA_ARGS__)
#define ag_mul_scalar(...) AG_AT(ag_mul_scalar, __VA_ARGS__)
#define ag_neg(...) AG_AT(ag_neg, __VA_ARGS__)
#define ag_exp(...) AG_AT(ag_exp, __VA_ARGS__)
#define ag_log(...) AG_AT(ag_log, __VA_ARGS__)
#define ag_sqrt(...) AG_AT(ag_sqrt, __VA_ARGS__)
#define ag_square(...) AG_AT(ag_square, __VA_ARGS__)
#define ag_abs(...) AG_AT(ag_abs, __VA_ARGS__)
#define ag_tanh(...) AG_AT(ag_tanh, __VA_ARGS__)
#define ag_sigmoid(...) AG_AT(ag_sigmoid, __VA_ARGS__)
#define ag_relu(...) AG_AT(ag_relu, __VA_ARGS__)
#define ag_elu(...) AG_AT(ag_elu, __VA_ARGS__)
#define ag_softplus(...) AG_AT(ag_softplus, __VA_ARGS__)
#define ag_log_sigmoid(...) AG_AT(ag_log_sigmoid, __VA_ARGS__)
#define ag_gelu(...) AG_AT(ag_gelu, __VA_ARGS__)
#define ag_silu(...) AG_AT(ag_silu, __VA_ARGS__)
#define ag_clamp(...) AG_AT(ag_clamp, __VA_ARGS__)
#define ag_sum(...) AG_AT(ag_sum, __VA_ARGS__)
#define ag_mean(...) AG_AT(ag_mean, __VA_ARGS__)
#define ag_matmul(...) AG_AT(ag_matmul, __VA_ARGS__)
#define ag_matmul_t(...) AG_AT(ag_matmul_t, __VA_ARGS__)
#define ag_linear(...) AG_AT(ag_linear, __VA_ARGS__)
#define ag_linear_t(...) AG_AT(ag_linear_t, __VA_ARGS__)
#define ag_dense(...) AG_AT(ag_dense, __VA_ARGS__)
#define ag_reshape(...) AG_AT(ag_reshape, __VA_ARGS__)
#define ag_permute(...) AG_AT(ag_permute, __VA_ARGS__)
#define ag_transpose(...) AG_AT(ag_transpose, __VA_ARGS__)
#define ag_concat(...) AG_AT(ag_concat, __VA_ARGS__)
#define ag_slice(...) AG_AT(ag_slice, __VA_ARGS__)
#define ag_index_select(...) AG_AT(ag_index_select, __VA_ARGS__)
#define ag_reverse_padded(...) AG_AT(ag_reverse_padded, __VA_ARGS__)
#define ag_to(...) AG_AT(ag_to, __VA_ARGS__)
#define ag_buffer_view(...) AG_AT(ag_buffer_view, __VA_ARGS__)
#define ag_buffer_write(...) AG_AT(ag_buffer_write, __VA_ARGS__)
#define ag_embedding(...) AG_AT(ag_embedding, __VA_ARGS__)
#define ag_sum_axis(...) AG_AT(ag_sum_axis, __VA_ARGS__)
#define ag_mean_axis(...) AG_AT(ag_mean_axis, __VA_ARGS__)
#define ag_max_axis(...) AG_AT(ag_max_axis, __VA_ARGS__)
#define ag_cross_entropy(...) AG_AT(ag_cross_entropy, __VA_ARGS__)
#define ag_linear_cross_entropy(...) AG_AT(ag_linear_cross_entropy, __VA_ARGS__)
#define ag_linear_t_cross_entropy(...) AG_AT(ag_linear_t_cross_entropy, __VA_ARGS__)
#define ag_cross_entropy_smoothed(...) AG_AT(ag_cross_entropy_smoothed, __VA_ARGS__)
#define ag_linear_cross_entropy_smoothed(...) AG_AT(ag_linear_cross_entropy_smoothed, __VA_ARGS__)
#define ag_linear_t_cross_entropy_smoothed(...) AG_AT(ag_linear_t_cross_entropy_smoothed, __VA_ARGS__)
#define ag_mse(...) AG_AT(ag_mse, __VA_ARGS__)
#define ag_kl_div_soft(...) AG_AT(ag_kl_div_soft, __VA_ARGS__)
#define ag_dropout(...) AG_AT(ag_dropout, __VA_ARGS__)
#define ag_custom_op(...) AG_AT(ag_custom_op, __VA_ARGS__)
/* attention ops */
#define ag_softmax(...) AG_AT(ag_softmax, __VA_ARGS__)
#define ag_masked_softmax(...) AG_AT(ag_masked_softmax, __VA_ARGS__)
#define ag_log_softmax(...) AG_AT(ag_log_softmax, __VA_ARGS__)
#define ag_softmax_axis_len(...) AG_AT(ag_softmax_axis_len, __VA_ARGS__)
#define ag_masked_softmax_axis(...) AG_AT(ag_masked_softmax_axis, __VA_ARGS__)
#define ag_softmax_mix(...) AG_AT(ag_softmax_mix, __VA_ARGS__)
#define ag_softmax_mix_len(...) AG_AT(ag_softmax_mix_len, __VA_ARGS__)
#define ag_softmax_mix_ref(...) AG_AT(ag_softmax_mix_ref, __VA_ARGS__)
#define ag_split_heads(...) AG_AT(ag_split_heads, __VA_ARGS__)
#define ag_split_heads_at(...) AG_AT(ag_split_heads_at, __VA_ARGS__)
#define ag_merge_heads(...) AG_AT(ag_merge_heads, __VA_ARGS__)
#define ag_attention(...) AG_AT(ag_attention, __VA_ARGS__)
#define ag_attention_recompute(...) AG_AT(ag_attention_recompute, __VA_ARGS__)
#define ag_mask(...) AG_AT(ag_mask, __VA_ARGS__)
#define ag_mask_heads(...) AG_AT(ag_mask_heads, __VA_ARGS__)
#define ag_mask_attenuation(...) AG_AT(ag_mask_attenuation, __VA_ARGS__)
#define ag_mask_padding(...) AG_AT(ag_mask_padding, __VA_ARGS__)
#define ag_mask_batch(...) AG_AT_STATUS(ag_mask_batch, __VA_ARGS__)
/* sequence ops */
#define ag_layernorm(...) AG_AT(ag_layernorm, __VA_ARGS__)
#define ag_rmsnorm(...) AG_AT(ag_rmsnorm, __VA_ARGS__)
#define ag_rope(...) AG_AT(ag_rope, __VA_ARGS__)
#define ag_glu(...) AG_AT(ag_glu, __VA_ARGS__)
#define ag_recompute(...) AG_AT(ag_recompute, __VA_ARGS__)
#define ag_gaussian_mu(...) AG_AT(ag_gaussian_mu, __VA_ARGS__)
#define ag_gaussian_context(...) AG_AT(ag_gaussian_context, __VA_ARGS__)
#define ag_lstm(...) AG_AT(ag_lstm, __VA_ARGS__)
#define ag_gru(...) AG_AT(ag_gru, __VA_ARGS__)
#define ag_mtsa_attention(...) AG_AT(ag_mtsa_attention, __VA_ARGS__)
#define ag_feature_attention(...) AG_AT(ag_feature_attention, __VA_ARGS__)
/* backward: errors (a finished step, a spent tape) name the caller's line */
#define ag_backward(...) AG_AT_STMT(ag_backward, __VA_ARGS__)
#define ag_backward_retain(...) AG_AT_STMT(ag_backward_retain, __VA_ARGS__)
#define ag_backward_seeded(...) AG_AT_STMT(ag_backward_seeded, __VA_ARGS__)
#define ag_backward_seeded_retain(...) AG_AT_STMT(ag_backward_seeded_retain, __VA_ARGS__)
#define ag_backward_seeded_tensor(...) AG_AT_STMT(ag_backward_seeded_tensor, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTNGRAD_CORE_H */
