/* optim.h - optimizers (SGD, Adam/AdamW, Adadelta, Adagrad, RMSprop, Muon,
 * as torch.optim documents them, and update rules registered at run time),
 * learning-rate schedules and initializers.  Part of attngrad.h; it
 * stands alone. */
#ifndef ATTNGRAD_OPTIM_H
#define ATTNGRAD_OPTIM_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Optimizers, schedules, initializers                                      */
/* ------------------------------------------------------------------------ */

/* Update rules, option names and defaults are PyTorch's (torch.optim.SGD,
 * Adam, AdamW, Adadelta, Adagrad, RMSprop, Muon).  An optimizer updates
 * every parameter of its list from ->grad at every step; t counts steps
 * from 1; wd is weight_decay.
 *   sgd       g += wd θ;  b = (t == 1) ? g : momentum b + (1 - dampening) g;
 *             g = nesterov ? g + momentum b : b  (when momentum != 0);  θ -= lr g
 *   adam      g += wd θ  (adamw instead decays θ -= lr wd θ, decoupled);
 *             m = β1 m + (1-β1) g;  v = β2 v + (1-β2) g²;  vmax = max(vmax, v);
 *             θ -= lr/(1-β1^t) · m / (sqrt(amsgrad ? vmax : v)/sqrt(1-β2^t) + eps)
 *   adadelta  g += wd θ;  v = ρ v + (1-ρ) g²;  Δ = sqrt(u + eps)/sqrt(v + eps) g;
 *             u = ρ u + (1-ρ) Δ²;  θ -= lr Δ
 *   adagrad   g += wd θ;  s += g²;  θ -= lr/(1 + (t-1) lr_decay) · g / (sqrt(s) + eps),
 *             s starting at initial_accumulator_value
 *   rmsprop   g += wd θ;  v = α v + (1-α) g²;  centered: a = a + (1-α)(g - a), v̂ = v - a²;
 *             d = sqrt(centered ? v̂ : v) + eps;  momentum: b = momentum b + g / d, θ -= lr b;
 *             else θ -= lr g / d
 *   muon      2-D weight matrices (ag_is_weight_matrix, ndim 2; or as ag_optim_set_muon routes) [r, c]:
 *             M = lerp(M, g, 1-momentum);  u = nesterov ? lerp(g, M, momentum) : M;
 *             X = u / max(||u||_F, eps);  ns_steps times, with (a, b, c) =
 *             (3.4445, -4.7750, 2.0315) and A = X X^T (r <= c) or X^T X:
 *             X = a X + (b A + c A²) X  (r <= c)  or  a X + X (b A + c A²);
 *             θ = (1 - lr wd) θ - lr s X,  s = match_rms_adamw ? 0.2 sqrt(max(r, c))
 *             : sqrt(max(1, c / r))  (torch's max(1, A/B) for its [out, in]
 *             weights; attngrad's are [in, out]).  Every other parameter
 *             (embeddings, biases, norms, 3-D and more, matrices routed off
 *             Muon): adamw with beta1,
 *             beta2, adam_eps, the same lr and wd.
 *   adafactor (Shazeer and Stern 2018, as torch.optim.Adafactor: no first
 *             moment, relative steps) with w = t^beta2_decay,
 *             rho = min(lr, 1/sqrt(t)), alpha = max(eps2, RMS(θ)) rho from
 *             θ before the decay:  θ *= 1 - lr wd;  a parameter of 2 or
 *             more dims [..., r, c] factors its second moment over the
 *             last two: R = lerp(R, mean_c g², w) [..., r, 1],
 *             C = lerp(C, mean_r g², w) [..., 1, c],  V̂ = R C / max(mean_r R,
 *             eps1); a vector: V = lerp(V, g², w), V̂ = V;
 *             u = g / sqrt(max(V̂, eps1²));  θ -= alpha / max(1, RMS(u) / d) u.
 *             Two switches of Hugging Face's Adafactor, for recipes written
 *             for it (T5's fine-tuning: scale_parameter=False,
 *             relative_step=False, lr=1e-3): scale_parameter 0 takes
 *             alpha = rho (no RMS(θ) factor), relative_step 0 takes rho = lr
 *             (no 1/sqrt(t) cap); beta1 B > 0 keeps HF's first moment,
 *             m = B m + (1 - B) alpha u / max(1, RMS(u) / d), θ -= m
 *             (slot exp_avg).  The rest of HF's rule differs from
 *             torch's and is not reproduced (docs/optim.md).
 * Defaults: sgd lr 1e-3; adam/adamw lr 1e-3, betas (0.9, 0.999), eps 1e-8,
 * weight_decay 0 (adamw 1e-2); adadelta lr 1.0, rho 0.9, eps 1e-6; adagrad
 * lr 1e-2, lr_decay 0, initial_accumulator_value 0, eps 1e-10; rmsprop lr
 * 1e-2, alpha 0.99, eps 1e-8, momentum 0, centered 0; adafactor lr 1e-2,
 * beta2_decay -0.8, eps 0 (eps1: 0 is the real type's epsilon, torch's
 * None), eps2 1e-3, d 1, weight_decay 0, scale_parameter 1, relative_step 1, beta1 0; muon lr 1e-3,
 * momentum 0.95, nesterov 1, ns_steps 5, eps 1e-7, weight_decay 0.1,
 * match_rms_adamw 1 (torch's default is the other scale: then the matrices
 * want a rate ~20 times the AdamW part's), betas (0.9, 0.999), adam_eps 1e-8.  (The
 * MPSAN/MTSA papers use adadelta lr 0.5, rho 0.95: say so explicitly.)
 * lazy (any kind, "adam:lazy=1"): a row (the slice along a parameter's
 * last dim; a vector is one row) whose gradient is all zero is skipped:
 * its values and state stay as they are, weight decay included, where the
 * rule above would still move them (Adam's moments decay, and m moves θ).
 * TensorFlow's LazyAdam, for embedding tables, whose rows a batch does not
 * touch cost the dense rule a full pass each step; a different optimizer,
 * not a faster Adam (docs/optim.md).  Plain SGD without weight decay gives
 * the same result either way, and so does adagrad (a zero adds nothing to
 * its sum).  Adadelta, and rmsprop without momentum or centering, keep the
 * dense rule's decay: a skipped row's state is multiplied by rho (alpha)
 * once for each step it missed when it is next live, or when the state is
 * read (a checkpoint, ag_optim_state); without weight decay that is the
 * dense rule to the bit, only faster. */
typedef enum { AG_SGD, AG_ADAM, AG_ADAMW, AG_ADADELTA, AG_ADAGRAD, AG_RMSPROP, AG_MUON, AG_ADAFACTOR } ag_optim_kind;

/* The kind of a registered rule (ag_optim_register, below) is
 * AG_OPTIM_RULE_FIRST + its place in this process's registry, so the
 * number means nothing in another process (save the spec, ag_optim_format,
 * not the kind).  Not an enumerator of ag_optim_kind: a switch over the
 * built-in kinds stays complete.  At most AG_OPTIM_MAX_HPARAMS
 * hyperparameters of a rule, read from the spec into ag_optim_config.hparam. */
#define AG_OPTIM_RULE_FIRST 64
enum { AG_OPTIM_MAX_HPARAMS = 8 };

typedef struct {
    ag_optim_kind kind;
    double lr;
    double weight_decay;                 /* all: L2 added to g; adamw: decoupled */
    double momentum;                     /* sgd, rmsprop, muon */
    double dampening;                    /* sgd */
    bool nesterov;                       /* sgd, muon */
    double beta1, beta2;                 /* adam, adamw; muon's AdamW part; adafactor's beta1 */
    bool amsgrad;                        /* adam, adamw */
    double rho;                          /* adadelta */
    double lr_decay, initial_accumulator_value; /* adagrad */
    double alpha;                        /* rmsprop: the square average's decay */
    bool centered;                       /* rmsprop: divide by the gradient's variance, not its mean square */
    double eps;                          /* adam, adamw, adadelta, adagrad, rmsprop; muon: its norm's floor */
    bool lazy;                           /* all: rows with an all-zero gradient are left alone */
    /* A registered rule's own hyperparameters, in the order of its
     * .hparams (AG_OPTIM_RULE_FIRST kinds only; 0 for the built-in ones).
     * Appended with optimizer rule API 1: the fields above keep their places. */
    double hparam[AG_OPTIM_MAX_HPARAMS];
    /* An average of the parameters, kept beside them after each update
     * (any kind; appended after hparam): ema = D, an exponential moving
     * average avg = D avg + (1 - D) θ; swa = S, the uniform average of the
     * parameters after updates S, S+1, ... (stochastic weight averaging,
     * Polyak-Ruppert); 0 for none.  The first update averaged copies θ;
     * then avg = lerp(avg, θ, w) with w = 1 - D, or 1/(n+1) after n, as
     * torch.optim.swa_utils.AveragedModel (get_ema_multi_avg_fn,
     * get_swa_multi_avg_fn).  ag_optim_swap_average evaluates on it. */
    double ema;
    int swa;
    /* Lookahead (Zhang et al. 2019, "k steps forward, 1 step back"; any
     * kind): slow weights φ beside the parameters θ; every `lookahead` = k
     * updates φ = φ + α (θ - φ) and θ = φ, α = lookahead_alpha (0.5); the
     * rule's own state goes on as it is.  φ starts as θ before the first
     * update; 0: none.  ag_optim_swap_average evaluates on φ (where there
     * is no average). */
    int lookahead;
    double lookahead_alpha;
    /* Muon (appended after lookahead): Newton-Schulz steps, the scale of
     * its step (true: 0.2 sqrt(max(r, c)), an AdamW-like RMS, so one lr
     * serves both parts; false: torch's "original"), the AdamW part's eps. */
    int ns_steps;
    bool match_rms_adamw;
    double adam_eps;
    /* Adafactor (appended after Muon's): 1 - beta2 at step t is
     * t^beta2_decay; eps (above) is its eps1, eps2 the floor of a
     * parameter's RMS, d the threshold its update's RMS is clipped to. */
    double beta2_decay, eps2, d;
    /* Adafactor's step size from RMS(θ), and capped at 1/sqrt(t): true in
     * ag_optim_defaults, as torch's (appended after d). */
    bool scale_parameter, relative_step;
} ag_optim_config;

ag_optim_config ag_optim_defaults(ag_optim_kind kind);
/* Parses "sgd:lr=0.1,momentum=0.9", "adam:lr=1e-3,beta2=0.98,amsgrad=1",
 * "adamw:weight_decay=0.01", "adadelta:lr=0.5,rho=0.95", "adagrad:lr=0.05",
 * "rmsprop:lr=1e-3,momentum=0.9,centered=1", and a registered rule's
 * ("lion:lr=1e-4,beta2=0.98", ag_optim_register below); keys left out keep
 * their defaults.  AG_ERR_ARG names the bad key or value in ag_errmsg(). */
ag_status ag_optim_parse(const char *spec, ag_optim_config *out);
/* The same over base: when spec names base's kind, the keys it leaves out
 * keep base's values ("sgd:lr=0.01" over sgd momentum 0.9 keeps the
 * momentum); another kind starts from its defaults.  base NULL: defaults.
 * How `attngrad train --resume --optim ...` changes a run's settings. */
ag_status ag_optim_parse_over(const char *spec, const ag_optim_config *base, ag_optim_config *out);
/* Every hyperparameter as a spec that parses back to the same config. */
const char *ag_optim_format(const ag_optim_config *c, char *buf, size_t n);
ag_status ag_optim_check(const ag_optim_config *c); /* ranges, as PyTorch; a rule's, as it declares them */

/* An optimizer and its state.  State buffers ("slots") are allocated once,
 * one per parameter and slot, the parameter's size (but Adafactor's
 * factors, below), and named
 * sgd: "momentum" (when momentum != 0); adam/adamw: "m", "v", "vmax" (when
 * amsgrad); adadelta: "v" (square avg), "u" (accumulated delta); adagrad:
 * "sum"; rmsprop: "square_avg", "momentum_buffer" (when momentum != 0),
 * "grad_avg" (when centered); a registered rule: its .slots; after them,
 * with lookahead, "slow" (the slow weights), and with ema or swa,
 * "average" (the parameters' average).  A
 * parameter frozen before init (ag_param_freeze) has none: its slot
 * pointers are NULL, a step skips it and checkpoints hold no state for it.
 * Muon: "m" (a matrix's momentum buffer, the AdamW part's first moment),
 * "v" (the AdamW part's only: a Muon matrix's v is NULL).  Adafactor, as
 * torch names and shapes them: a parameter [..., r, c] of 2 or more dims
 * "row_var" [..., r, 1] and "col_var" [..., 1, c], a vector "variance"
 * (ag_optim_state_shape says which a parameter has, and their shapes). */
typedef struct {
    ag_optim_config cfg;
    double lr;           /* current rate: cfg.lr at first, schedules change it */
    int64_t step;        /* updates made so far */
    ag_params *params;   /* updated in place; not owned; must not grow */
    int n_params;        /* params->count at init */
    int n_slots;
    ag_real *state;      /* every slot, one allocation, zero at first (adagrad's sum, a rule's slots: their initial values) */
    ag_real **slot;      /* slot[s * n_params + i]: slot s of parameter i, or NULL (frozen; a Muon matrix's v) */
    double *weight_decay; /* per parameter (ag_optim_set_weight_decay), or NULL: cfg's for all */
    ag_device device;     /* where the state lives: the parameters' device at init */
    double *lr_scale;     /* per parameter (ag_optim_set_lr_scale), or NULL: 1 for all */
    int64_t averaged;     /* cfg.ema, cfg.swa: updates in the average so far (its slot "average"); 0: none yet */
    bool swapped;         /* ag_optim_swap_average: the parameters hold the average, the slot the trained values */
    bool slow_set;        /* cfg.lookahead: the slot "slow" holds the slow weights (not before the first update) */
    int32_t **missed;     /* lazy adadelta, rmsprop (no momentum, not centered): missed[i][r], the steps row r of
                           * parameter i skipped since its state was last brought up to date (on the state's
                           * device; NULL for a frozen parameter) */
    unsigned char *muon;  /* muon: per parameter, 1 where it takes Muon's step (ag_optim_set_muon), or NULL: the
                           * 2-D weight matrices (ag_is_weight_matrix) do */
} ag_optimizer;

/* AG_ERR_ARG (opt then holds nothing to free) for a config ag_optim_check
 * refuses, and for a registered rule's when the parameters are on a GPU:
 * its update runs on the CPU only. */
ag_status ag_optim_init(ag_optimizer *opt, ag_params *ps, const ag_optim_config *cfg);
/* One update of every parameter from its gradient; allocates nothing. */
void ag_optim_step(ag_optimizer *opt);
void ag_optim_free(ag_optimizer *opt);
const char *ag_optim_name(ag_optim_kind kind);                /* "sgd", ..., a registered rule's name */
/* Parameter groups (torch's param_groups, for the options that differ in
 * practice): every parameter p of the optimizer's list with match(p, ctx)
 * gets this weight decay instead of cfg.weight_decay, or its rate scaled;
 * each returns how many matched, and a later call wins where two match.
 * Transformers decay no bias and no LayerNorm gain or shift:
 *   ag_optim_set_weight_decay(&opt, ag_param_is_bias_or_norm, NULL, 0);
 * ag_optim_set_lr_scale: the parameter's rate is opt->lr * scale (one
 * product in double), so schedules, which change opt->lr, move every group
 * alike, as torch's schedulers scale each group's lr, and scale s updates
 * the parameter to the bit as the same optimizer at lr * s would: every
 * use of lr is scaled (AdamW's decoupled decay lr wd θ, Adagrad's lr_decay,
 * a registered rule's ag_optim_args.lr); the state moves as it would at
 * that rate.  Scale 0 keeps the values as they are (the state still
 * follows the gradient; ag_param_freeze before ag_optim_init keeps none).
 * A scale or weight decay that is negative, NaN or infinite stops the
 * program as a misuse does (the fatal handler, or ag_try).  Neither is
 * saved in checkpoints (like cfg, it is the caller's setup: `attngrad
 * train --param-group` rebuilds both from the run's config). */
typedef bool (*ag_param_pred)(const ag_tensor *p, void *ctx);
int ag_optim_set_weight_decay(ag_optimizer *opt, ag_param_pred match, void *ctx, double weight_decay);
int ag_optim_set_lr_scale(ag_optimizer *opt, ag_param_pred match, void *ctx, double scale);
/* Muon only: whether the matching 2-D parameters take Muon's step (muon
 * true, embedding tables too where they match) or its AdamW part (false).
 * By default the 2-D weight matrices (ag_is_weight_matrix) take Muon's
 * step, classifier heads included; Keller Jordan's and Moonlight's recipes
 * keep the output layer on AdamW, as
 *   ag_optim_set_muon(&opt, is_head, NULL, false);
 * does.  A match that is not 2-D stays on the AdamW part.  Before the
 * first step (the state is laid out again: a matrix on the AdamW part
 * keeps "v" too); returns how many parameters it set.  Another optimizer,
 * or a call after a step, stops the program as a misuse does.  Not saved
 * in checkpoints (`attngrad train --param-group 'cls.out.*:muon=0'`
 * rebuilds it from the run's config; a checkpoint whose state says the
 * other side is refused on load). */
int ag_optim_set_muon(ag_optimizer *opt, ag_param_pred match, void *ctx, bool muon);
/* Biases, gains and shifts: parameters of at most one dim. */
bool ag_param_is_bias_or_norm(const ag_tensor *p, void *ctx);
const char *ag_optim_slot_name(const ag_optimizer *opt, int s);
/* The state buffer of a parameter by names, or NULL (no such parameter or
 * slot, a frozen parameter, a Muon matrix's "v"); on opt->device (a GPU
 * one is read back with the checkpoint functions).  Lazy adadelta's and
 * rmsprop's rows are brought up to date first (the steps they missed), so
 * it reads as the dense rule's state until the next step. */
ag_real *ag_optim_state(const ag_optimizer *opt, const char *param, const char *slot);
/* Its shape into shape[] and its number of dims (the parameter's, but for
 * Adafactor's factored row_var and col_var), or -1 where ag_optim_state
 * is NULL. */
int ag_optim_state_shape(const ag_optimizer *opt, const char *param, const char *slot, int shape[AG_MAX_DIMS]);
/* With cfg.ema or cfg.swa: the parameters' values and their average trade
 * places (every trained parameter, on its device), to evaluate or save the
 * averaged model; a second call trades them back.  Without an average but
 * with cfg.lookahead, the slow weights take the average's part (what
 * Lookahead returns, and what its authors evaluate).  Steps refuse to run
 * while swapped.  False, and nothing done, when opt keeps neither or has
 * made none yet (no update, or swa's start ahead): the parameters are
 * then what to evaluate. */
bool ag_optim_swap_average(ag_optimizer *opt);

/* Update rules of one's own (docs/optim.md, "Your own update rule";
 * examples/lion.c, examples/lamb.c).  A rule is a struct registered at run
 * time; from then on its name is an optimizer like the built-in ones: ag_optim_parse reads
 * "lion:lr=1e-4,beta1=0.9,beta2=0.99,weight_decay=0.1" (the keys: lr, the
 * rule's hyperparameters, weight_decay, lazy, ema, swa, lookahead,
 * lookahead_alpha), ag_optim_format writes it back, its state lives in
 * named slots (ag_optim_state, checkpoints as optim.<rule>.<slot>.<param>),
 * and per-parameter weight decay, lazy rows, averages, lookahead, clipping,
 * schedules and the parallel step apply as for the others.
 * `attngrad --plugin FILE.so train --optim lion:...` and optim_experiments
 * take a plugin's: its ag_plugin_init may register rules as well as model
 * kinds (attngrad/model.h).
 *
 * The update is a CPU function over one contiguous piece of one parameter:
 * value[j], grad[j] and slot[s][j] for j < n, each element on its own.  A
 * step calls it on pieces of every parameter from the thread pool, several
 * at once, and on the live rows alone with lazy=1, so it must treat every
 * element alike whatever the piece (no state of its own): then any cut
 * gives the same bits, at any thread count.  A rule that needs sums over
 * the whole parameter (LAMB's and LARS's trust ratio: examples/lamb.c)
 * gives a second function, .sum, that a step runs first over every piece:
 * the library adds the pieces' sums, always cut the same way and added in
 * the same order, and hands the parameter's totals to the update
 * (ag_optim_args.sums).
 * It runs on the CPU only: ag_optim_init refuses a rule for parameters on
 * a GPU (the built-in optimizers have CUDA kernels; a host function cannot run
 * there). */

/* The version of ag_optim_rule and of ag_optim_args, and the real type a
 * rule was compiled against, as AG_MODEL_ABI (attngrad/model.h): a later
 * version appends fields to the structs; a rule of an earlier one is still
 * taken, and read no further than its struct went. */
#define AG_OPTIM_RULE_API_VERSION 2 /* 2: .n_sums, .sum and ag_optim_args.sums */
#define AG_OPTIM_RULE_ABI (AG_OPTIM_RULE_API_VERSION * 100 + (int)sizeof(ag_real))
enum { AG_OPTIM_MAX_SLOTS = 4, AG_OPTIM_MAX_SUMS = 4, AG_OPTIM_MAX_RULES = 32, AG_OPTIM_NAME_MAX = 32 };

/* ag_optim_hparam.flags: an open bound (min < x, x < max), an integer. */
enum { AG_HPARAM_MIN_OPEN = 1, AG_HPARAM_MAX_OPEN = 2, AG_HPARAM_INT = 4 };
typedef struct {
    const char *name;  /* the spec's key: lower-case letters, digits, '_'; not a key every optimizer has (lr,
                          weight_decay, lazy, ema, swa, lookahead, lookahead_alpha) */
    double value;      /* the default */
    double min, max;   /* the values it takes, bounds included unless flags say otherwise; -HUGE_VAL, HUGE_VAL: no bound */
    unsigned flags;    /* AG_HPARAM_* */
} ag_optim_hparam;

typedef struct {
    const char *name;  /* lower-case letters, digits, '_' (checkpoints: optim.<rule>.<name>.<param>) */
    double init;       /* every element's value at ag_optim_init */
} ag_optim_slot;

/* What a step hands the update besides the arrays. */
typedef struct {
    int64_t t;            /* the step being made, counted from 1 (ag_optimizer.step) */
    double lr;            /* its learning rate, schedules applied (ag_optimizer.lr), times this parameter's
                             ag_optim_set_lr_scale */
    double weight_decay;  /* this parameter's: ag_optim_set_weight_decay's, else cfg.weight_decay */
    const double *hparam; /* the rule's hyperparameters, in the order of its .hparams */
    /* Appended with rule API 2.  In the update of a rule with .n_sums > 0: this parameter's totals of its .sum
     * pass this step, sums[k] for k < n_sums, in double; NULL in the .sum pass itself and for other rules. */
    const double *sums;
} ag_optim_args;

/* value, grad and slot[s] point at the same element of one parameter; the
 * update changes value and the slots in place. */
typedef void (*ag_optim_update_fn)(ag_real *value, const ag_real *grad, ag_real *const *slot, int64_t n,
                                   const ag_optim_args *a);
/* The first pass of a rule with sums: adds its n elements' terms to
 * sums[k], k < .n_sums (the library zeroes them for each piece).  It may
 * change the slots (a moment the update then reads), not the value; each
 * element goes through .sum once and then through .update once a step. */
typedef void (*ag_optim_sum_fn)(const ag_real *value, const ag_real *grad, ag_real *const *slot, int64_t n,
                                const ag_optim_args *a, double *sums);

typedef struct {
    int abi;                        /* AG_OPTIM_RULE_ABI: always the first field */
    const char *name;               /* the spec's name: 1-31 letters, digits, '_', '-' */
    double lr, weight_decay;        /* their defaults (finite, >= 0) */
    const ag_optim_hparam *hparams; /* ends at the first entry whose name is NULL; NULL: none (at most 8) */
    const ag_optim_slot *slots;     /* the state, ended the same way; NULL: none (at most AG_OPTIM_MAX_SLOTS) */
    ag_optim_update_fn update;      /* required */
    /* Rule API 2: sums over the whole parameter, 1 to AG_OPTIM_MAX_SUMS of them, from .sum (both or neither);
     * such a rule takes no lazy=1 (its sums would leave out the rows a lazy step skips). */
    int n_sums;
    ag_optim_sum_fn sum;
} ag_optim_rule;

/* Adds a rule, which must outlive every use (a static const struct and
 * arrays).  Not thread-safe: register before training starts.  AG_ERR_ARG
 * with ag_errmsg() naming the rule for a NULL rule, an .abi of a later API
 * or the other real type, a missing or malformed name, a name of a
 * built-in optimizer or of a rule already registered, no update, .n_sums
 * out of [0, AG_OPTIM_MAX_SUMS] or without its .sum (or the other way), a default
 * lr or weight_decay that is not finite and >= 0, a malformed, reserved
 * or repeated hyperparameter or slot name, a range that is empty or
 * leaves out its default, too many hyperparameters or slots, a full
 * registry. */
ag_status ag_optim_register(const ag_optim_rule *rule);
/* The kind named name, built-in or registered, into *kind; false if none
 * (then *kind is left as it was).  ag_optim_defaults(*kind) is a rule's
 * defaults as it is a built-in's. */
bool ag_optim_find(const char *name, ag_optim_kind *kind);
/* The rule of a registered kind; NULL for a built-in or unknown one. */
const ag_optim_rule *ag_optim_rule_of(ag_optim_kind kind);

/* Global-norm clipping, as torch.nn.utils.clip_grad_norm_: when the L2 norm
 * of all gradients together exceeds max_norm, scales them all by
 * max_norm / (norm + 1e-6).  Returns the norm before clipping. */
double ag_clip_grad_norm(ag_params *ps, double max_norm);
/* The L2 norm of all gradients together, as ag_clip_grad_norm measures it,
 * without clipping; and the same over the parameters' values. */
double ag_grad_norm(const ag_params *ps);
double ag_params_norm(const ag_params *ps);
/* Finite checks of a training step that cost one norm: AG_OK when the
 * global gradient norm (from ag_clip_grad_norm or ag_grad_norm) is finite,
 * else AG_ERR_NONFINITE with a message naming the first gradient that holds
 * an inf or NaN, its shape, value and element (a scan, only then).  After
 * the optimizer step, the same for the parameters' values (their norm into
 * *norm when not NULL): a diverged update shows there even when the loss
 * still looks finite (a ReLU or a max turns NaN into 0). */
ag_status ag_check_grads_finite(const ag_params *ps, double norm);
ag_status ag_check_params_finite(const ag_params *ps, double *norm);
/* The first parameter whose values (grads false) or gradient (true) hold an
 * inf or NaN, and the element's flat index in *at; NULL when all are finite. */
ag_tensor *ag_params_find_nonfinite(const ag_params *ps, bool grads, int64_t *at);
/* The weight matrices of docs/models.md's L2 term: parameters with 2 or more
 * dims, except embedding tables (names starting with "embed" or "bigram").
 * Biases, gains, vectors and embeddings are not weight matrices. */
bool ag_is_weight_matrix(const ag_tensor *p);
/* Adds the gradient of gamma * sum ½‖W‖² over the weight matrices (gamma W)
 * to their ->grad and returns the penalty's value (to log it with the loss).
 * ag_l2_grad adds the gradient only: on a GPU the value costs a wait. */
double ag_l2_penalty(ag_params *ps, double gamma);
void ag_l2_grad(ag_params *ps, double gamma);

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
ag_status ag_sched_parse_over(const char *spec, const ag_sched_config *base, ag_sched_config *out); /* as ag_optim_parse_over */
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

/* Per-step schedules, beside the per-epoch ones above: the rate of step t
 * (counted from 1, as ag_optimizer's step) is base * factor(t), with a
 * linear warm-up factor t / warmup while t < warmup, then
 *   constant  1
 *   linear    min_ratio + (1 - min_ratio)(1 - p)
 *   cosine    min_ratio + (1 - min_ratio)(1 + cos(pi p)) / 2
 *   inv_sqrt  sqrt(warmup / t)  (1 / sqrt(t) without warm-up; the
 *             Transformer's rate d^-0.5 min(t^-0.5, t warmup^-1.5) is
 *             inv_sqrt with base d^-0.5 warmup^-0.5)
 *   cosine_restarts  SGDR (Loshchilov and Hutter 2017; torch's
 *             CosineAnnealingWarmRestarts at epoch t - warmup): the cosine
 *             over cycles of period, period mult, period mult^2, ... steps
 *             after the warm-up, each starting again at 1:
 *             min_ratio + (1 - min_ratio)(1 + cos(pi u / T_i)) / 2, u the
 *             steps into cycle i of T_i
 * where p = (t - warmup) / (total - warmup), at most 1.  Specs:
 * "cosine:warmup=500,total=20000,min_ratio=0.1", "inv_sqrt:warmup=4000",
 * "linear:total=1000", "constant:warmup=100",
 * "cosine_restarts:period=1000,mult=2". */
typedef enum { AG_LR_CONSTANT, AG_LR_LINEAR, AG_LR_COSINE, AG_LR_INV_SQRT, AG_LR_COSINE_RESTARTS } ag_lr_decay;
typedef struct {
    ag_lr_decay decay;
    int warmup;         /* warm-up steps (0: none) */
    int total;          /* linear, cosine: the step where the decay ends (required, > warmup) */
    double min_ratio;   /* linear, cosine, cosine_restarts: the rate at a cycle's end over the base; 0 */
    int period;         /* cosine_restarts: the first cycle's steps (required, >= 1) */
    int mult;           /* cosine_restarts: each cycle's steps over the last's (1, the default: all alike) */
} ag_lr_steps;
ag_status ag_lr_steps_parse(const char *spec, ag_lr_steps *out);
ag_status ag_lr_steps_parse_over(const char *spec, const ag_lr_steps *base, ag_lr_steps *out); /* as ag_optim_parse_over */
const char *ag_lr_steps_format(const ag_lr_steps *s, char *buf, size_t n);
ag_status ag_lr_steps_check(const ag_lr_steps *s);
double ag_lr_steps_factor(const ag_lr_steps *s, int64_t t);
/* Before each ag_optim_step: opt->lr = base_lr * factor(opt->step + 1), the
 * coming step's rate; returns it.  With a per-epoch schedule too, pass the
 * rate it set as base_lr. */
double ag_lr_steps_apply(const ag_lr_steps *s, ag_optimizer *opt, double base_lr);

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
/* Orthogonal, as PyTorch's nn.init.orthogonal_, for weights stored [in, out]
 * (the last two dims; leading dims stack independent matrices, drawn one
 * after another): gain * Q from the QR of a matrix of N(0, 1) draws (in
 * double, row-major), the signs of R's diagonal folded into Q so that Q is
 * unique.  W W^T = gain^2 I when in <= out (orthonormal rows), W^T W =
 * gain^2 I when in >= out. */
void ag_init_orthogonal(ag_tensor *t, double gain, ag_rng *rng);
/* The same for each of `chunks` equal column blocks of the last dim, drawn
 * left to right: an LSTM's w_hh [H, 4H] with chunks 4 has each gate's
 * [H, H] orthogonal (torch: orthogonal_ on each of weight_hh.chunk(4)), as
 * its authors initialise ESIM.  chunks must divide the last dim. */
void ag_init_orthogonal_chunks(ag_tensor *t, int chunks, double gain, ag_rng *rng);

/* ------------------------------------------------------------------------ */

#ifndef AG_INTERNAL

/* optimizers, initializers, checkpoints */
#define ag_optim_step(...) AG_AT_STMT(ag_optim_step, __VA_ARGS__)

/* optimizers, initializers, checkpoints */
#define ag_init_uniform(...) AG_AT_STMT(ag_init_uniform, __VA_ARGS__)

/* optimizers, initializers, checkpoints */
#define ag_init_normal(...) AG_AT_STMT(ag_init_normal, __VA_ARGS__)

/* optimizers, initializers, checkpoints */
#define ag_init_glorot_uniform(...) AG_AT_STMT(ag_init_glorot_uniform, __VA_ARGS__)

/* optimizers, initializers, checkpoints */
#define ag_init_glorot_normal(...) AG_AT_STMT(ag_init_glorot_normal, __VA_ARGS__)

/* optimizers, initializers, checkpoints */
#define ag_init_orthogonal(...) AG_AT_STMT(ag_init_orthogonal, __VA_ARGS__)
#define ag_init_orthogonal_chunks(...) AG_AT_STMT(ag_init_orthogonal_chunks, __VA_ARGS__)
#endif

#ifdef __cplusplus
}
#endif
#endif /* ATTNGRAD_OPTIM_H */
