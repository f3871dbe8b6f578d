/* attngrad/model.h - the model API: a model kind is a struct of callbacks
 * (ag_model_kind) registered at run time; every workflow of the trainer
 * (include/attngrad/train.h) and of the `attngrad` program then works for
 * it: train, eval, predict, generate, gradcheck, heatmap, dump-step, and the
 * optimizer comparison.  The five built-in models (models/mpsan.c and the
 * others) register through the same call, so each is an example of it.
 *
 *   static const ag_model_kind my_kind = {
 *       .abi = AG_MODEL_ABI, .name = "mine", .tasks = AG_TASK_BIT(AG_TASK_CLASSIFY),
 *       .defaults = my_defaults, .tiny = my_tiny, .build = my_build, .forward = my_forward,
 *   };
 *   if (ag_model_register(&my_kind)) puts(ag_errmsg());   // in main, or in ag_plugin_init
 *
 * An instance of a kind holds its config, its named parameters and a
 * dropout RNG:
 *
 *   ag_model m;
 *   ag_model_config cfg = ag_model_defaults(ag_model_find("mtsa"));
 *   cfg.vocab = V; cfg.classes = K;
 *   ag_model_init(&m, kind, &cfg);                // params created, initialised
 *   ag_tensor *logits = ag_model_forward(&m, &batch, true);
 *   ag_tensor *loss = ag_cross_entropy(logits, batch.labels, -1);
 *
 * A kind lists the tasks it has a head for (ag_model_kind.tasks); forward
 * refuses (NULL, ag_errmsg) a cfg.task the kind does not support.
 * docs/extending.md walks through writing, registering and checking one.
 */
#ifndef AG_MODEL_H
#define AG_MODEL_H

#include "../attngrad.h"
#include "data.h"

/* Variant switches (docs/models.md's FLAGs); each model reads the ones it has. */
enum {
    AG_FLAG_ELU_SCORE = 1 << 0,   /* MPSAN: ELU((..)/c) instead of c*tanh((..)/c) */
    AG_FLAG_LINEAR_DIST = 1 << 1, /* MPSAN: -|k-q| instead of -ln|k-q| */
    AG_FLAG_NO_BIGRAM = 1 << 2,   /* dual-axial: unigrams only */
    AG_FLAG_SOFTMAX = 1 << 3,     /* dual-axial: softmax instead of softplus */
    AG_FLAG_NO_ZETA = 1 << 4,     /* dual-axial: no attenuation factor */
    AG_FLAG_TEXT_ONLY = 1 << 5,   /* dual-axial: text-axial branch only */
    AG_FLAG_NO_DIST = 1 << 6,     /* MS-SAN: no distance term */
    AG_FLAG_EXP_SCORE = 1 << 7,   /* MTSA: sigma_t = identity (exp(R)) */
    AG_FLAG_STRICT = 1 << 8,      /* positional LM: window i <= t-1 */
};
/* A kind's own switches: the i-th name of ag_model_kind.flag_names is
 * AG_FLAG_OWN(i), i < AG_FLAG_OWN_MAX; their meaning is the kind's. */
enum { AG_FLAG_OWN_FIRST = 16, AG_FLAG_OWN_MAX = 16 };
#define AG_FLAG_OWN(i) (1u << (AG_FLAG_OWN_FIRST + (i)))

/* "elu_score,strict" -> bits: 0, or -1 with the unknown name in bad[n].
 * These know the built-in models' names only; ag_model_flags_parse and
 * ag_model_flags_str (below) also a kind's own. */
int ag_flags_parse(const char *list, unsigned *bits, char *bad, size_t n);
const char *ag_flags_str(unsigned bits, char *buf, size_t n); /* bits -> "no_zeta,text_only" */

/* What a model is trained to do, i.e. which head and loss it uses. */
typedef enum {
    AG_TASK_CLASSIFY = 0, /* one sentence -> class (cross-entropy on labels) */
    AG_TASK_PAIR,         /* two sentences -> class, e.g. SICK entailment */
    AG_TASK_LM,           /* next word at every position */
    AG_TASK_RELATEDNESS,  /* two sentences -> score in [1, 5] (batch scores, SICK relatedness) */
    AG_TASK_COUNT
} ag_task;
#define AG_TASK_BIT(t) (1u << (t)) /* for ag_model_kind.tasks */

const char *ag_task_name(ag_task t);                /* "classify", "pair", "lm", "relatedness" */
int ag_task_parse(const char *name, ag_task *t);    /* 0, or -1 for an unknown name */

/* Relatedness (Tai et al. 2015; docs/models.md, MPSAN): the model's logits are over
 * the AG_RELATEDNESS_BINS scores 1..5; the predicted score is sum_i i p_i
 * and the target of a score y puts y - floor y on floor y + 1 and the rest
 * on floor y. */
enum { AG_RELATEDNESS_BINS = 5 };
/* target [rows, 5] from scores y in [1, 5]; AG_ERR_ARG (ag_errmsg names the
 * row) for a score outside that range. */
ag_status ag_relatedness_target(const float *scores, int rows, ag_real *target);
/* sum_i i softmax(logits)_i over i = 1..5, for one row of 5 logits. */
double ag_relatedness_score(const ag_real *logits);

typedef struct {
    int vocab;          /* V, including <pad> and <unk> */
    int classes;        /* K */
    int dim;            /* d (embedding = hidden size unless a model says otherwise) */
    int hidden;         /* second size where a model has one (MTSA dh, LM H) */
    int heads;
    int layers;         /* LSTM layers (LM: 0 = the paper's count for `attention`) */
    int fixed_len;      /* dual-axial L */
    int n_bigram;       /* dual-axial bigram buckets */
    int attention;      /* LM: AG_LM_POSITIONAL, AG_LM_STANDARD or AG_LM_NONE */
    int pos_hidden;     /* LM: units P of the position generator LSTM */
    double pos_mu_bias; /* LM: added to pos.b_mu at init (the tiny check lifts mu_t off its floor) */
    double keep;        /* dropout keep probability (1 = off) */
    double keep_layers; /* LM: dropout keep between LSTM layers (1 = off) */
    double l2;          /* gamma of the L2 term over weight matrices */
    double bias_init;   /* MTSA: biases from U(-b, b), not 0 (tiny: ReLU inputs off their kinks) */
    unsigned flags;     /* AG_FLAG_* */
    ag_task task;
    uint64_t seed;      /* initialisation and dropout */
    const char *optim;  /* the paper's optimizer, "adadelta:lr=0.5,rho=0.95" */
    int batch;          /* the paper's batch size */
    double clip;        /* the paper's global gradient-norm clip (0 = none) */
    const char *sched;  /* the paper's schedule, "plateau:mode=min,factor=0.5,patience=5" (NULL = constant) */
    const char *hparams; /* the kind's own numeric settings given, "penalty=0.3,da=350" (NULL: none); read
                          * with ag_model_hparam, checked against ag_model_kind.hparams */
    /* Since API 4 (a kind built before it neither reads nor sets these): */
    int max_len;         /* the run's --max-len: no batch is wider (0: no limit given), so a table per
                          * position can be sized by it; generate and predict of an LM feed it the
                          * last max_len words of a longer text.  A kind whose table has a size of
                          * its own may set m->cfg.max_len to it in build: generate keeps to it */
    const char *lr_steps; /* the paper's per-step schedule, "cosine:warmup=500,total=run" (NULL: none),
                           * used where --lr-steps is not given; total=run: the run's planned steps */
    /* Since API 5: */
    double label_smoothing; /* training's cross-entropy against (1 - eps) onehot + eps / C (classification and
                             * LM tasks; evaluation scores the plain loss); a kind with a loss of its own
                             * applies it through ag_model_objective_of or the _smoothed ops (ag_model_loss
                             * refuses a training loss that made none) */
} ag_model_config;

/* The positional LM's context (cfg.attention). */
enum { AG_LM_POSITIONAL = 0, AG_LM_STANDARD = 1, AG_LM_NONE = 2 };

typedef struct ag_model ag_model;

/* The version of ag_model_kind and of the calls it is handed.  A kind
 * records the version and the real type it was compiled against in .abi
 * (AG_MODEL_ABI), so ag_model_register refuses one built against another
 * header, or a float plugin loaded into the double program, instead of
 * calling it with the wrong layout.  Version 2 appended the lm_* fields,
 * version 3 hparams (to both structs), version 4 ag_model_config's max_len
 * and lr_steps, version 5 its label_smoothing, version 6 the layers'
 * recompute_attention and window (ag_mha, ag_encoder_config: a kind keeps
 * such layers in its own structs) and ag_mask_spec's window, version 7
 * ag_mha's cross-attention projection and alibi, ag_encoder_config's
 * alibi and ag_kv_cache's batch.  ag_model holds an ag_model_config, so versions 3 to
 * 5 moved the fields after it (params, rng, impl) that a kind's build and
 * forward read, and versions 6 and 7 the layers' sizes: a kind built before
 * AG_MODEL_API_OLDEST is refused, to be rebuilt from its source (which
 * compiles unchanged). */
#define AG_MODEL_API_VERSION 7
#define AG_MODEL_API_OLDEST 7
#define AG_MODEL_ABI (AG_MODEL_API_VERSION * 100 + (int)sizeof(ag_real))

typedef struct {
    int abi;          /* AG_MODEL_ABI: always the first field */
    const char *name; /* --model NAME: letters, digits, '_' and '-', at most 31 bytes */
    /* Fills the paper's sizes and training settings over the generic ones
     * (vocab, classes, keep 1, batch 32, adam:lr=1e-3, no lr_steps;
     * cfg->task preset).  May be NULL: the generic ones stay. */
    void (*defaults)(ag_model_config *cfg);
    /* Shrinks cfg to small gradient-check sizes (vocab 10, classes 3 are
     * preset; keep dropout off).  May be NULL: the defaults are checked. */
    void (*tiny)(ag_model_config *cfg);
    /* Required.  Creates every parameter in m->params under stable names
     * (checkpoints find them by name) and initialises it from m->rng; may
     * allocate m->impl. */
    ag_status (*build)(ag_model *m); /* AG_ERR_ARG (ag_fail) for sizes it cannot take */
    /* Required.  Logits [B, K] (LM: [B, N, V]; relatedness: [B, 5]).
     * Dropout only when training.  Calls ag_model_capture for each attention
     * distribution it computes (heatmaps).  NULL when the batch holds bad
     * input (e.g. a parse), ag_errmsg() says why. */
    ag_tensor *(*forward)(ag_model *m, const ag_batch *b, bool training);
    /* The training objective of a batch, what ag_model_loss returns and so
     * what train, gradcheck, dump-step and optim_experiments minimise: a
     * fused form of ag_model_loss_of(forward) (the LM never builds its
     * logits), or that loss plus terms of the model's own (a penalty on its
     * attention, an auxiliary loss).  Evaluation (dev and test loss,
     * accuracy) reads forward's logits: the data loss, without such terms.
     * NULL: ag_model_loss_of(forward). */
    ag_tensor *(*loss)(ag_model *m, const ag_batch *b, bool training);
    /* What the model needs in a batch (fixed length, bigrams, heads); NULL:
     * plain padded rows. */
    void (*batch_opts)(const ag_model_config *cfg, ag_batch_opts *o);
    void (*destroy)(ag_model *m); /* frees m->impl; may be NULL */
    unsigned tasks;               /* required: AG_TASK_BIT of every task it has a head for */
    /* The size options it reads besides --dim, and --max-len unless its rows
     * have a fixed length, comma-separated ("hidden,heads,max-len"): train
     * notes any other one given, which would be ignored silently.  NULL:
     * no note.  (--max-len's value reaches every kind as cfg.max_len.) */
    const char *reads;
    unsigned flags; /* the built-in AG_FLAG_* bits it reads: ag_model_init refuses any other */
    /* Its own variant switches for --flags, comma-separated ("no_pos,mean_pool"):
     * the i-th sets AG_FLAG_OWN(i) in cfg.flags.  NULL: none. */
    const char *flag_names;
    /* Since API 2; optional, all three or none.  Generation word by word
     * (ag_generate_line) for an LM that can keep what it has read, so a
     * drawn word costs one step of it, not a forward over the text so far.
     * lm_state_new: a state with room for `capacity` positions (NULL when
     * it cannot make one: each word is then a forward with last_logits).
     * lm_feed: reads ids[0..n) after the positions fed before, in
     * evaluation mode with gradients off, and returns the next word's
     * logits [1, 1, V] in step memory, forward's at the last position to
     * roundoff; NULL with ag_fail when it cannot.  lm_state_free frees a
     * state (NULL: nothing). */
    void *(*lm_state_new)(const ag_model *m, int capacity);
    ag_tensor *(*lm_feed)(ag_model *m, void *state, const int32_t *ids, int n);
    void (*lm_state_free)(void *state);
    /* Since API 3; optional.  Its own numeric settings, comma-separated
     * ("penalty,da"): train --hparams penalty=0.3 sets one for a run (saved
     * with it, so eval and --resume build the same model), and the kind
     * reads it with ag_model_hparam(m, "penalty", its default).  Names as
     * flag_names'; a name not listed is refused when the model is made.
     * defaults or tiny may set cfg.hparams too; --hparams given replaces
     * that list. */
    const char *hparams;
} ag_model_kind;

enum { AG_MAX_MAPS = 8 };

/* What the rows and columns of an attention map index: the positions of the
 * batch's sentence (tokens), of the second sentence of a pair (tokens_b),
 * features (dual-axial's feature axis), slots over the sentence (rows any
 * number of learnt queries: hops, memory slots, labels; columns the
 * sentence's positions: [B, r, N], Lin et al.'s attention hops), or one
 * sentence of a pair over the other (rows sentence a's positions, columns
 * sentence b's: [B, Na, Nb], cross-attention). */
enum { AG_MAP_SENTENCE = 0, AG_MAP_SENTENCE_B = 1, AG_MAP_FEATURES = 2, AG_MAP_SLOTS = 3, AG_MAP_CROSS = 4 };

/* An attention distribution of the last forward, [B, Nq, Nk] or [B, h, Nq, Nk]
 * (rows: queries or targets, columns: attended positions), in step memory. */
typedef struct {
    char name[40];
    ag_tensor *w;
    int axes; /* AG_MAP_* */
} ag_attn_map;

struct ag_model {
    const ag_model_kind *kind;
    ag_model_config cfg;
    ag_params params;
    ag_rng rng;
    void *impl;
    /* Heatmaps: with capture_maps set, forward records its attention
     * distributions here (ag_model_capture); valid until ag_step_end. */
    bool capture_maps;
    int n_maps;
    ag_attn_map maps[AG_MAX_MAPS];
    /* Generation (ag_generate_line): with last_logits set, an LM's forward
     * may return [B, 1, V], the logits of each row's last position
     * (lengths[r] - 1) alone, and skip the decoder everywhere else.  A
     * kind may ignore it and return [B, N, V] as always. */
    bool last_logits;
};

/* Setting `name` of the kind's hparams as given in m->cfg.hparams, else
 * fallback (the kind's default).  A name the kind does not list is a
 * programmer error. */
double ag_model_hparam(const ag_model *m, const char *name, double fallback);

/* Dropout at the model's rate (cfg.keep) from its own stream (m->rng), in
 * training; x itself otherwise: ag_dropout(x, m->cfg.keep, training, &m->rng). */
ag_tensor *ag_model_dropout(ag_model *m, ag_tensor *x, bool training);

/* Called by a model's forward for each attention distribution it computes;
 * a no-op unless m->capture_maps.  ag_model_capture is for maps over the
 * positions of the (first) sentence; ag_model_capture_axes says what the
 * axes are (AG_MAP_*), for the second sentence of a pair or for features. */
void ag_model_capture(ag_model *m, const char *name, ag_tensor *w);
void ag_model_capture_axes(ag_model *m, const char *name, ag_tensor *w, int axes);

/* Writes a heatmap of w [rows, cols] (row-major, row stride cols) as an SVG
 * file a browser opens: one cell per entry, darker = larger (0 to the
 * largest entry, shown in a legend), with the labels (NULL: indices; cut
 * at 24 characters) along the axes; the title may have several lines
 * ('\n').  The picture grows with the labels; cells shrink above 50 rows or
 * columns.  AG_ERR_IO naming the path; AG_ERR_ARG for a label holding a
 * control byte (an SVG cannot show it). */
ag_status ag_heatmap_svg(const char *path, const char *title, const ag_real *w, int rows, int cols,
                         const char *const *row_labels, const char *const *col_labels);

/* ---- the registry ---- */

/* A kind's name is at most AG_MODEL_NAME_MAX - 1 bytes (ag_train_opts.model). */
enum { AG_MODEL_MAX_KINDS = 64, AG_MODEL_NAME_MAX = 32 };

/* Adds a kind, which must outlive every use (a static const struct).  The
 * built-in kinds are registered first, on the first call of any of these
 * four functions.  Not thread-safe: register before training starts.
 * AG_ERR_ARG with ag_errmsg() for a NULL kind, an .abi other than this
 * header's AG_MODEL_ABI or an earlier API's (another API version or real type), a
 * missing or malformed name, a missing build or forward callback, no
 * tasks, a bad flag_names list (a malformed or built-in name, a repeat,
 * more than AG_FLAG_OWN_MAX), one or two of the three lm_* callbacks, a
 * name already registered, or a full registry. */
ag_status ag_model_register(const ag_model_kind *kind);
const ag_model_kind *ag_model_find(const char *name); /* NULL if unknown */
const ag_model_kind *const *ag_model_kinds(void);   /* NULL-terminated, in registration order */
/* Loads a plugin: a shared object exporting
 *     ag_status ag_plugin_init(void);
 * which registers its kinds (and optimizer rules, ag_optim_register).  The program must export the library's
 * symbols to it (the attngrad programs do); the object stays loaded until
 * exit.  In a double program (attngrad-f64, which runs gradcheck), PATH.so
 * is loaded as PATH-f64.so when that file exists: the plugin compiled with
 * -DAG_REAL_DOUBLE (docs/extending.md).  AG_ERR_IO with dlerror()'s text
 * when it cannot be loaded, AG_ERR_ARG when it has no ag_plugin_init or
 * that fails (its message, naming the plugin). */
ag_status ag_model_load_plugin(const char *path);

/* --flags text <-> bits for a kind: the built-in names and the kind's own
 * (kind NULL: the built-in ones).  Parse: 0, or -1 with the unknown name
 * in bad[n]. */
int ag_model_flags_parse(const ag_model_kind *kind, const char *list, unsigned *bits, char *bad, size_t n);
const char *ag_model_flags_str(const ag_model_kind *kind, unsigned bits, char *buf, size_t n);
/* Every bit kind reads: its flags and one AG_FLAG_OWN per own name. */
unsigned ag_model_flags_read(const ag_model_kind *kind);

/* The defaults for the kind's own task: the first it has a head for
 * (classify, pair, lm, relatedness) unless its defaults set another. */
ag_model_config ag_model_defaults(const ag_model_kind *kind);
/* The defaults for a task (cfg.task preset, so a kind may set its paper's
 * settings for that task, as MPSAN does for SICK relatedness). */
ag_model_config ag_model_task_defaults(const ag_model_kind *kind, ag_task task);
bool ag_model_supports(const ag_model_kind *kind, ag_task task);
/* The kind's tasks as "classify, relatedness" into buf. */
const char *ag_model_tasks_str(const ag_model_kind *kind, char *buf, size_t n);
/* AG_ERR_ARG with ag_errmsg() when the config does not fit the kind; then m
 * holds nothing to free. */
ag_status ag_model_init(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg);
/* The same model with its parameters' names and shapes only (no data, no
 * memory to speak of: ag_params.shapes_only), to compare with a checkpoint
 * before the real one is allocated; free with ag_model_free, never run it. */
ag_status ag_model_shapes(ag_model *m, const ag_model_kind *kind, const ag_model_config *cfg);
ag_tensor *ag_model_forward(ag_model *m, const ag_batch *b, bool training);
void ag_model_free(ag_model *m);

/* A synthetic batch's storage: B rows at width N with every array any
 * model reads allocated and zeroed (tokens, lengths, labels, targets,
 * scores, the pair's second sentence, heads, bigrams) and the model's
 * batch options; ag_model_batch_free releases it.  For generated batches
 * (the gradient checks, dump-step, the benchmarks), not for data. */
void ag_model_batch_alloc(const ag_model *m, int B, int N, ag_batch *b);
void ag_model_batch_free(ag_batch *b);

/* The tiny gradient-check setup of docs/models.md: config of the kind at its
 * tiny sizes, and a batch B=2, lengths {5,3}, N=5 with fixed random tokens,
 * labels (and a second sentence of lengths {2,4}, heads, bigrams, targets
 * as the model needs), freed with ag_model_batch_free. */
ag_model_config ag_model_tiny(const ag_model_kind *kind);
void ag_tiny_batch(const ag_model *m, ag_batch *b, uint64_t seed);
/* Loss of one batch: mean cross-entropy over examples (LM: over non-pad
 * targets; relatedness: mean KL from the target of each score), no L2
 * term; NULL where forward is. */
ag_tensor *ag_model_loss(ag_model *m, const ag_batch *b, bool training);
/* The same loss of logits already computed by ag_model_forward(m, b);
 * NULL (ag_errmsg says why) for a relatedness score outside [1, 5]. */
ag_tensor *ag_model_loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits);
/* What training minimizes of those logits: ag_model_loss_of's loss, its
 * cross-entropy against the smoothed target when training with
 * cfg.label_smoothing (a kind's own loss builds on this, not on
 * ag_model_loss_of, to honour --label-smoothing). */
ag_tensor *ag_model_objective_of(const ag_model *m, const ag_batch *b, ag_tensor *logits, bool training);

/* Pretrained word vectors (models/embeddings.c; the trainer's --embeddings).
 * The model's word embedding: its parameter "embed.weight" [V, d], or NULL
 * (ag_errmsg says so) for a model without one.  A registered kind that
 * names its word table so, d = cfg.dim, gets --embeddings and
 * --freeze-embeddings like the built-in ones. */
ag_tensor *ag_model_embedding(const ag_model *m);
/* Fills table [v->vocab, d] (d >= v->dim) from v: the rows of the words
 * found are their vectors, the others drawn from U(-0.05, 0.05) with rng
 * (in id order), row pad_id zero (pad_id < 0: none).  A table wider than
 * v->dim takes each vector in its first v->dim columns and draws the rest
 * of the row from the same U(-0.05, 0.05).  AG_ERR_SHAPE, naming both
 * shapes, when the table is not [v->vocab, >= v->dim]; then nothing
 * changed. */
ag_status ag_embedding_from_vectors(ag_tensor *table, const ag_vectors *v, int pad_id, ag_rng *rng);

#endif
