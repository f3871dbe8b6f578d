/* models.h - the application layer: models declared from attngrad's ops,
 * trained and evaluated on ag_batch'es from the data pipeline.
 *
 * A model is a kind (a small table of functions, one per file in models/)
 * plus an instance: its config, its named parameters and a dropout RNG.
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
 */
#ifndef AG_MODELS_H
#define AG_MODELS_H

#include "attngrad.h"
#include "../data/data.h"

/* Variant switches (MODELS.md's FLAGs); each model reads the ones it has. */
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

/* "elu_score,strict" -> bits: 0, or -1 with the unknown name in bad[n]. */
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

/* Relatedness (Tai et al. 2015, MODELS.md §1): the model's logits are over
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
} ag_model_config;

/* The positional LM's context (cfg.attention). */
enum { AG_LM_POSITIONAL = 0, AG_LM_STANDARD = 1, AG_LM_NONE = 2 };

typedef struct ag_model ag_model;

typedef struct {
    const char *name;
    /* Fills the paper's sizes and training settings. */
    void (*defaults)(ag_model_config *cfg);
    /* Shrinks cfg to MODELS.md's tiny gradient-check sizes. */
    void (*tiny)(ag_model_config *cfg);
    /* Creates every parameter in m->params under MODELS.md's names and
     * initialises it from m->rng; may allocate m->impl. */
    ag_status (*build)(ag_model *m); /* AG_ERR_ARG (ag_fail) for sizes it cannot take */
    /* Logits [B, K] (LM: [B, N, V]; relatedness: [B, 5]).  Dropout only
     * when training.  NULL when the batch holds bad input (e.g. a parse),
     * ag_errmsg() says why. */
    ag_tensor *(*forward)(ag_model *m, const ag_batch *b, bool training);
    /* The batch loss straight from the model, for a kind whose loss need not
     * build the logits (the LM fuses its decoder with the cross-entropy);
     * the same value as ag_model_loss_of(forward).  NULL: that is used. */
    ag_tensor *(*loss)(ag_model *m, const ag_batch *b, bool training);
    /* What the model needs in a batch (fixed length, bigrams, heads). */
    void (*batch_opts)(const ag_model_config *cfg, ag_batch_opts *o);
    void (*destroy)(ag_model *m); /* frees m->impl; may be NULL */
    unsigned tasks;               /* AG_TASK_BIT of every task it has a head for */
    /* The size options it reads besides --dim, and --max-len unless its rows
     * have a fixed length, comma-separated ("hidden,heads,max-len"): train
     * notes any other one given, which would be ignored silently. */
    const char *reads;
    unsigned flags; /* the AG_FLAG_* bits it reads: ag_model_init refuses any other */
} ag_model_kind;

enum { AG_MAX_MAPS = 8 };

/* What the rows and columns of an attention map index: the positions of the
 * batch's sentence (tokens), of the second sentence of a pair (tokens_b), or
 * features (dual-axial's feature axis). */
enum { AG_MAP_SENTENCE = 0, AG_MAP_SENTENCE_B = 1, AG_MAP_FEATURES = 2 };

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
};

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

const ag_model_kind *ag_model_find(const char *name); /* NULL if unknown */
const ag_model_kind *const *ag_model_kinds(void);   /* NULL-terminated */
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
ag_tensor *ag_model_forward(ag_model *m, const ag_batch *b, bool training);
void ag_model_free(ag_model *m);

/* A synthetic batch's storage: B rows at width N with every array any
 * model reads allocated and zeroed (tokens, lengths, labels, targets,
 * scores, the pair's second sentence, heads, bigrams) and the model's
 * batch options; ag_model_batch_free releases it.  For generated batches
 * (the gradient checks, dump-step, the benchmarks), not for data. */
void ag_model_batch_alloc(const ag_model *m, int B, int N, ag_batch *b);
void ag_model_batch_free(ag_batch *b);

/* The tiny gradient-check setup of MODELS.md: config of the kind at its
 * tiny sizes, and a batch B=2, lengths {5,3}, N=5 with fixed random tokens,
 * labels (and pairs, heads, bigrams, targets as the model needs), freed
 * with ag_model_batch_free. */
ag_model_config ag_model_tiny(const ag_model_kind *kind);
void ag_tiny_batch(const ag_model *m, ag_batch *b, uint64_t seed);
/* Loss of one batch: mean cross-entropy over examples (LM: over non-pad
 * targets; relatedness: mean KL from the target of each score), no L2
 * term; NULL where forward is. */
ag_tensor *ag_model_loss(ag_model *m, const ag_batch *b, bool training);
/* The same loss of logits already computed by ag_model_forward(m, b);
 * NULL (ag_errmsg says why) for a relatedness score outside [1, 5]. */
ag_tensor *ag_model_loss_of(const ag_model *m, const ag_batch *b, ag_tensor *logits);

/* Pretrained word vectors (models/embeddings.c).  The model's word
 * embedding: its parameter "embed.weight" [V, d], or NULL (ag_errmsg says
 * so) for a model without one. */
ag_tensor *ag_model_embedding(const ag_model *m);
/* Fills table [v->vocab, v->dim] from v: the rows of the words found are
 * their vectors, the others drawn from U(-0.05, 0.05) with rng (in id
 * order), row pad_id zero (pad_id < 0: none).  AG_ERR_SHAPE, naming both
 * shapes, when the table is not [v->vocab, v->dim]; then nothing changed. */
ag_status ag_embedding_from_vectors(ag_tensor *table, const ag_vectors *v, int pad_id, ag_rng *rng);

/* The positional LM's attention in its last forward, for heatmaps and
 * tests (step-arena tensors: valid until ag_step_end).  *mu [B,N] is the
 * Gaussian mean (NULL unless AG_LM_POSITIONAL); *weights [B,N(t),N(i)] the
 * weight of h_i in c_t (NULL for AG_LM_NONE).  Either pointer may be NULL. */
void ag_poslm_attention(const ag_model *m, ag_tensor **mu, ag_tensor **weights);

#endif
