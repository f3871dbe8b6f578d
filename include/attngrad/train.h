/* attngrad/train.h - the trainer: data setup, the training loop, evaluation, run
 * folders and checkpoints, reference dumps and model-level gradient checks.
 * The `attngrad` program (tools/attngrad.c) is a thin shell over this, and
 * tests and benches call it directly.
 *
 *   ag_train_opts o = ag_train_opts_default();
 *   ag_train_set(&o, "model", "mtsa", err, sizeof err);   // any CLI option
 *   ag_train_set(&o, "epochs", "3", err, sizeof err);
 *   ag_train_result r;
 *   if (ag_train(&o, &r, err, sizeof err)) puts(err);
 *
 * Every option is a row of one table (train/options.c): the CLI parses "--key value"
 * into ag_train_set, help text comes from the table, and the options a run
 * depends on are saved as "key=value" lines in every checkpoint's "config"
 * metadata, so `eval`, `predict` and `--resume` rebuild the same run.
 *
 * Errors in user input (files, options, checkpoints) return a negative
 * value with one line in `err`; nothing here exits or aborts on them. */
#ifndef AG_TRAIN_H
#define AG_TRAIN_H

#include <stdio.h>
#include <sys/types.h> /* ssize_t */

#include "model.h"

enum { AG_PATH_MAX = 1024 };
/* The longest line a command reads by default: ~200,000 words, far beyond
 * any sentence, so that a line of junk is refused before memory in
 * proportion to it (tokens, ids, a batch) is taken. */
#define AG_MAX_LINE_BYTES ((int64_t)1 << 20)
/* The most words of a sentence by default: a short line can hold many
 * words, and attention's memory grows in their square (MPSAN's step takes
 * 0.2 GB for 1000 words, all of a 24 GB machine for 20,000).  Far beyond
 * any sentence of the benchmarks; LM text is not limited (its windows are). */
#define AG_MAX_LINE_WORDS 1000

/* Everything a run is made of.  Model sizes left at -1 (keep, l2 < 0) take
 * the kind's defaults; on the generated data set the kind's sizes are cut
 * to at most 64 (see ag_train_resolve). */
typedef struct {
    /* model */
    char model[AG_MODEL_NAME_MAX];
    char task[16];          /* "", classify, pair, lm, relatedness: "" follows the model and the data */
    int vocab, classes;     /* filled from the data (set them for dump-step) */
    char vocab_fp[17];      /* ag_vocab_fingerprint in hex, set by train: ties vocab.txt to the checkpoint */
    int dim, hidden, heads, layers, fixed_len, bigrams;
    double keep, l2;
    char flags[160];        /* "elu_score,linear_dist" */
    char hparams[160];      /* the model's own settings, "penalty=0.3" (ag_model_kind.hparams) */
    char attention[16];     /* "", positional, standard, none (poslm) */
    char optim[160], sched[160];
    char lr_steps[96];      /* per-step factor on sched's rate: "cosine:warmup=500,total=20000" ("" = the
                               model's cfg.lr_steps, if any); total=run: the run's planned steps */
    char param_groups[512]; /* --param-group: "PATTERN:key=value,..." a line each, later ones winning ("" = none) */
    /* data */
    char data[AG_PATH_MAX]; /* "" = the generated task */
    char dataset[16];       /* benchmark name; "" = inferred from the folder */
    char format[16];        /* a single file: labeled, sick, conllu, lm */
    char lm_split[12];      /* LM text: "line", "sentence" or "" (the data set's: sentence for WikiText-2) */
    int phrases;            /* SST: train on every labelled phrase of trees/train.txt */
    char parses[AG_PATH_MAX]; /* "" = a conllu/ folder beside the data if there is one; "none"; or a folder */
    char parse_source[AG_PATH_MAX]; /* set by train: the parses' folder the run used, or "chain" */
    char labels[256];       /* set by train: the data set's class names by id, "DESC,ENTY,..." ("": none) */
    int max_len;            /* > 0: sentences cut to their first max_len tokens (train, eval, predict; an LM's
                               lines in predict and generate to their last); the model's cfg.max_len */
    int lowercase;
    int min_count;
    char embeddings[AG_PATH_MAX]; /* pretrained word vectors for the embedding ("" = random) */
    int embeddings_exact;   /* look tokens up as they are only, not also lower-cased */
    int freeze_embeddings;  /* keep the word embedding fixed */
    int folds, fold;        /* CV: folds, and fold (-1 = all of them) */
    double dev_frac;        /* dev share split off when there is no dev file */
    int synth_n;            /* generated training examples */
    int len;                /* dump-step: batch width (0 = tiny batch) */
    char lengths[128];      /* dump-step, gradcheck: "5,1,3", a batch of rows of these lengths ("" = drawn) */
    char lengths_b[128];    /* the same for a pair's second sentences (one per row of lengths) */
    int strict;             /* gradcheck: a parameter still weak drawn wide fails the check */
    char input[8];          /* predict: "" or lines (a sentence a line), conllu (CoNLL-U sentences with their parse) */
    int64_t max_line_bytes; /* longest input line (data files, predict's stdin); 0 = AG_MAX_LINE_BYTES */
    char long_lines[8];     /* predict: "" or refuse (a longer line is an error), cut (its first max_line_bytes) */
    int words;              /* generate: most words drawn after a prompt */
    double temperature;     /* generate: words drawn from softmax(logits / temperature); 0 = the likeliest */
    int top_k;              /* generate: drawn among the top_k likeliest words only; 0 = all */
    double top_p;           /* generate: ... and among the fewest likeliest whose probability reaches top_p (nucleus
                               sampling, after top_k); 1 = all */
    int64_t max_line_words; /* most words of a sentence (a pair's two together) in data files, predict's
                               stdin and heatmap's sentence; 0 = no limit, nor with 0 < max_len <= it */
    /* loop */
    int epochs, batch;
    int micro_batch;        /* most rows of one forward and backward: a longer batch (a rank's share of it) runs
                               in parts, their gradients summed, for the same update in less memory; 0 = whole */
    int64_t seed;
    double clip;            /* global gradient norm; 0 = off, -1 = the model's */
    double label_smoothing; /* training's cross-entropy target (1 - eps) onehot + eps / C; 0 = none */
    int patience;           /* early stopping; 0 = off */
    int64_t max_steps;      /* 0 = no limit */
    double max_minutes;     /* 0 = no limit */
    int log_steps;          /* > 0: <out>/steps.csv gets a row every log_steps optimizer steps; 0 = none */
    int eval_every;         /* > 0: also evaluate, keep the best and save the last every eval_every steps */
    int threads;            /* the engine's threads (ag_set_num_threads); 0 = one per core */
    char denormals[8];      /* "flush" (or "") or "keep": ag_flush_denormals while the command runs */
    char device[16];        /* where the step runs: "cpu" (or "") or "cuda" / "cuda:0" */
    int cuda_graphs;        /* with device cuda: ag_cuda_graphs(true) */
    char out[AG_PATH_MAX];  /* run folder; "" = runs/<model>-<data>-<time> */
    char init[AG_PATH_MAX]; /* safetensors file the parameters start from; "" = the model's initialisation */
    int resume, force;
    char progress[8];       /* auto (bar on a terminal), bar, lines, none */
    int quiet;              /* no epoch lines either */
    int profile;            /* op table of this many training steps to stderr; 0 = off */
    int detect_anomaly;     /* ag_anomaly(true) while training: the first op making an inf or NaN stops it */
} ag_train_opts;

ag_train_opts ag_train_opts_default(void);

/* Commands, for options that apply to some of them only. */
enum {
    AG_CMD_TRAIN = 1, AG_CMD_EVAL = 2, AG_CMD_PREDICT = 4, AG_CMD_DUMP = 8, AG_CMD_GRADCHECK = 16, AG_CMD_HEATMAP = 32,
    AG_CMD_GENERATE = 64
};

/* Sets option `key` (the CLI name without "--", '-' or '_' alike) from its
 * text; value NULL for a switch.  Checks the value (ranges, known names,
 * parsable optimizer and schedule specs) and names key and value on error. */
int ag_train_set(ag_train_opts *o, const char *key, const char *value, char *err, size_t errlen);
/* Does option `key` exist for command cmd, and does it take a value? */
int ag_train_option_info(const char *key, unsigned cmd, int *takes_value);
/* "--key ARG  help" for every option of command cmd. */
void ag_train_print_options(FILE *f, unsigned cmd);
/* The options a run depends on as "key=value\n" lines, and back. */
int ag_train_opts_format(const ag_train_opts *o, char *buf, size_t n);
int ag_train_opts_parse(ag_train_opts *o, const char *text, const char *what, char *err, size_t errlen);

/* Fills cfg from the kind's defaults and the options (vocab and classes as
 * set), and writes the resolved values back into o (ag__train_record). */
int ag_train_resolve(ag_train_opts *o, ag_model_config *cfg, char *err, size_t errlen);
/* The size options set in o that o's model does not read (ag_model_kind.reads),
 * as "--hidden, --heads" into buf; returns how many. */
int ag_train_unread_options(const ag_train_opts *o, char *buf, size_t n);

/* ---- data of one run: splits of up to three datasets, one vocabulary ---- */

enum { AG_SPLIT_TRAIN, AG_SPLIT_DEV, AG_SPLIT_TEST, AG_SPLITS };

typedef struct {
    ag_dataset sets[AG_SPLITS];   /* what was loaded (a CV run uses sets[0] only) */
    const ag_dataset *ds[AG_SPLITS]; /* the dataset of each split, NULL if none */
    int64_t *idx[AG_SPLITS], n[AG_SPLITS]; /* its examples */
    ag_vocab *vocab;
    ag_task task;
    int classes;                  /* label count (0 for LM) */
    int32_t max_width;            /* widest batch row over all splits */
    int lowercase;                /* tokens were lower-cased (option or benchmark) */
    char name[64];                /* "trec", "synth-order", a file name */
    char parses[AG_PATH_MAX];     /* the folder whose parses the sentences carry; "" = none (the chain) */
    const char *label_names;      /* the benchmark's class names by id, comma-separated; NULL: unknown */
} ag_run_data;

/* Loads (or generates) the data of o for CV fold `fold` (ignored unless the
 * data set is a CV one), builds the vocabulary from the training split or
 * uses `vocab` (then owned by d), and encodes every split. */
int ag_run_data_open(const ag_train_opts *o, int fold, ag_vocab *vocab, ag_run_data *d, char *err, size_t errlen);
void ag_run_data_free(ag_run_data *d);
/* Folds of o's data set when it is a CV benchmark (o->folds), else 0; -1
 * with err set when o->data is a folder but not a benchmark found there. */
int ag_run_data_folds(const ag_train_opts *o, char *err, size_t errlen);

/* ---- evaluation and training -------------------------------------------- */

typedef struct {
    double loss;        /* mean per example (LM: per target token) */
    double accuracy;    /* classification and pairs */
    double perplexity;  /* LM: exp(loss) */
    /* relatedness: the predicted score sum_i i p_i against the gold score */
    double pearson, spearman, mse;
    int64_t examples, tokens;
} ag_metrics;

/* Agreement of n predictions x with gold values y: Pearson's r, Spearman's
 * rho (Pearson's r of the ranks, tied values sharing their average rank)
 * and the mean squared error.  r and rho are NaN when n < 2, when either
 * side is constant (undefined) or holds a NaN, or (rho) when out of memory. */
double ag_pearson(const double *x, const double *y, int64_t n);
double ag_spearman(const double *x, const double *y, int64_t n);
double ag_mean_sq_error(const double *x, const double *y, int64_t n);

/* Metrics of `m` on examples idx[0..n) of ds, in batches of b (allocated for
 * ds), with gradients off and dropout off. */
int ag_evaluate(ag_model *m, const ag_dataset *ds, const int64_t *idx, int64_t n, ag_batch *b, ag_metrics *out,
                char *err, size_t errlen);

typedef struct {
    int folds;              /* CV folds run (1 without CV) */
    ag_metrics dev, test;   /* of the best checkpoint; CV: mean over folds */
    double test_std;        /* CV: std of the fold accuracies */
    bool has_test;
    double first_loss;      /* mean training loss of the first 10 steps */
    double initial_loss;    /* training loss of the first step: the model as the command found it */
    double last_loss;       /* ... and of the last epoch's steps */
    int64_t steps;
    int epochs;
    double seconds;
    int64_t step_allocs;    /* heap allocations inside training steps after warm-up */
    int64_t step_waits;     /* times training steps waited for the GPU: one a step (--device cuda), 0 on the CPU */
    size_t step_bytes;      /* the step memory (on the step's device) of the largest step: its activations,
                               the tape, its gradients' temporaries; what --micro-batch cuts */
    bool stopped_early, time_up;
    char out[AG_PATH_MAX];
} ag_train_result;

/* Moves the model's parameters to o->device and makes it the current
 * device (ag_set_device), before the optimizer is made; "cuda" where no
 * GPU can run fails with the reason (no device, driver and runtime
 * versions) in err. */
int ag_train_use_device(const ag_train_opts *o, ag_params *ps, char *err, size_t errlen);
/* t's values on the host: t->data on the CPU, else a copy in the step arena
 * (valid until ag_step_end), for metrics and printing. */
const ag_real *ag_host_values(const ag_tensor *t);

/* Runs a whole training as the `train` command does: every fold of a CV
 * data set (or one), with checkpoints, metrics and progress output.  It
 * holds a lock on the run folder it writes (docs/cli.md, "One writer per
 * folder"): a second ag_train into the same folder fails, naming the first. */
int ag_train(ag_train_opts *o, ag_train_result *r, char *err, size_t errlen);

/* The options of the run in folder `out` (from its last.safetensors, or
 * fold0/last.safetensors of a cross-validation run), for --resume: the
 * command line is applied on top of them.  o->device is the device the
 * run's steps last ran on ("cuda", or "" for the CPU), so that a resume
 * goes on there unless told otherwise. */
int ag_run_config(const char *out, ag_train_opts *o, char *err, size_t errlen);

/* Every parameter of ps (names and shapes: a shapes-only list will do)
 * against the tensors of f: each one missing from the file, of another
 * shape or of no float dtype, and with strict each tensor of the file that
 * is no parameter (besides attngrad's own optim.*, sched.*, grad.*,
 * batch.*, loss), gets a line of its own on `report`, and err sums them up
 * (AG_ERR_SHAPE).  Float tensors of another type than the build's are
 * converted on load: one note line on `report` says so. */
int ag_params_match(const ag_st_file *f, const ag_params *ps, bool strict, FILE *report, char *err, size_t errlen);
/* The same for the file at path and the model kind/cfg would build, from
 * its names and shapes alone (ag_model_shapes): nothing of the model's size
 * is allocated, so a file's size bounds what a refused load costs.  With
 * note, a file whose tensors lack checksums gets a note on stderr. */
int ag_checkpoint_fits(const char *path, const ag_model_kind *kind, const ag_model_config *cfg, bool strict, bool note,
                       char *err, size_t errlen);

/* A trained model from a checkpoint: its options from the metadata (config),
 * the vocabulary from vocab.txt next to it (or vocab_path), the parameters. */
int ag_load_run(const char *ckpt, const char *vocab_path, ag_train_opts *o, ag_model *m, ag_vocab **vocab,
                char *err, size_t errlen);

/* The batch options of m's run: the model's own, and o->max_len's cut;
 * max_width (0: from the data) never above that cut. */
ag_batch_opts ag_run_batch_opts(const ag_model *m, const ag_train_opts *o, int32_t max_width);

/* One input line ("a sentence", pairs "sentence_a<TAB>sentence_b") as a
 * one-row batch for m: tokenized as its training data was (o->lowercase),
 * encoded with vocab (unknown words -> <unk>; LM: <eos> appended, so the
 * targets are the following words), with what the model's batches hold.
 * ds keeps the words (ag_dataset_word); free both with ag_dataset_free and
 * ag_batch_free, also after an error. */
int ag_line_batch(const ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_dataset *ds,
                  ag_batch *b, char *err, size_t errlen);

/* The next line of `in` into *buf (NUL-terminated, its '\n' kept; *buf
 * and *cap as getline's), at most `max` bytes of it: the rest of a longer
 * line is read and dropped, never held, and *dropped says how many bytes
 * went (0: the whole line).  Returns the length kept, or -1 at the end. */
ssize_t ag_read_line(FILE *in, char **buf, size_t *cap, size_t max, size_t *dropped);
/* A line ag_read_line cut short (dropped > 0) under o->long_lines: refused
 * (1, err says why and what to do), or "cut": line[0..*n) shortened to
 * its last whole word (0). */
int ag_long_line(const ag_train_opts *o, char *line, ssize_t *n, size_t dropped, char *err, size_t errlen);
/* The most words of a sentence the run takes, o->max_line_words; 0 for no
 * limit: where it is 0, or where 0 < o->max_len <= it (the run cuts every
 * sentence to max_len words, in training, eval and predict). */
int64_t ag_line_word_limit(const ag_train_opts *o);
/* A line of more words than ag_line_word_limit: refused (1, err
 * says why and what to do), or under o->long_lines "cut" line[0..*n) cut
 * after its last allowed word (0).  *words gets the line's count (counting
 * takes no memory); 0 and *words at most the limit for a line within it. */
int ag_many_words(const ag_train_opts *o, char *line, ssize_t *n, size_t *words, char *err, size_t errlen);

/* Predicts one input line ("a sentence", pairs "sentence_a<TAB>sentence_b")
 * and prints "label<TAB>probabilities" (the label by name where the run
 * knows the data set's, o->labels; LM: perplexity and next word;
 * relatedness: "score<TAB>probabilities of 1..5"). */
int ag_predict_line(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, FILE *out, char *err,
                    size_t errlen);
/* Continues the prompt `line` with an LM: up to o->words words, each drawn
 * with rng from softmax(logits / o->temperature) after the words so far
 * (temperature 0: the likeliest word), among the o->top_k likeliest and the
 * o->top_p nucleus of those where they cut, never <pad> or <unk>, ending at
 * <eos>; prints them space-separated and a newline, one line for every
 * prompt line: blank for a blank prompt, and after an error the words
 * drawn before it.  A run trained on sentences continues the prompt's last
 * sentence (ag_predict_line's cut). */
int ag_generate_line(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, char *line, ag_rng *rng, FILE *out,
                     char *err, size_t errlen);
/* The same for one CoNLL-U sentence text[0..n) (comments, token lines),
 * whose parse the model reads (MS-SAN's tree distances); name and
 * first_line place it in messages ("stdin", the sentence's first line).
 * Classification only: a pair has two sentences. */
int ag_predict_conllu(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *name, int64_t first_line,
                      const char *text, size_t n, FILE *out, char *err, size_t errlen);

/* Asks a training run in progress to stop after its current step and save
 * what it has, as --max-steps does (the last checkpoint holds that step;
 * --resume goes on from it): async-signal-safe, for a SIGTERM, SIGINT or
 * SIGUSR1 handler (the attngrad program installs one).  signo is kept for
 * ag_train_stop_requested.  Under mpirun a request to any rank stops every
 * rank after the same step (docs/distributed.md). */
void ag_train_request_stop(int signo);
/* The signal asked for, -1 without one, or 0; under mpirun the ranks'
 * verdict (the largest signal any rank got), once they have agreed on it. */
int ag_train_stop_requested(void);

/* ---- reference dumps and gradient checks at small sizes ----------------- */

/* The model of o at docs/models.md's tiny sizes (sizes set in o override them)
 * and its batch: the tiny batch, or with o->batch / o->len set a random one
 * of that many rows and that width.  Free with ag_model_free and
 * ag_model_batch_free. */
int ag_dump_setup(const ag_train_opts *o, ag_model *m, ag_batch *b, char *err, size_t errlen);
/* One forward/backward (dropout off) of ag_dump_setup's model and batch,
 * written to path: parameters, grad.<name>, loss and batch.* tensors. */
int ag_dump_step(const ag_train_opts *o, const char *path, char *err, size_t errlen);
/* f64 gradient check of every parameter at the tiny sizes; prints the
 * worst relative error per parameter and returns 1 if all pass, 0 if not,
 * negative on bad options. */
int ag_model_gradcheck(const ag_train_opts *o, FILE *out, char *err, size_t errlen);
/* The same check of a model and batch of the program's own (a one-word
 * sentence, a pair's own lengths): every parameter at its values, then
 * drawn from U(-1, 1) where the init's gradients are too small to resolve
 * (docs/cli.md, "gradcheck"), printed to out; true when both pass.  The
 * parameters get their values back.  In a double build (AG_REAL_DOUBLE). */
bool ag_model_gradcheck_batch(ag_model *m, const ag_batch *b, FILE *out);

/* ---- attention heatmaps of a trained model ------------------------------ */

/* One forward of m (eval mode, no gradients, capture_maps on) on one
 * sentence (pairs: and sentence_b), tokenized as ag_line_batch does, and an
 * SVG heatmap (ag_heatmap_svg) of every attention map it records, one per
 * head of a [B,h,Nq,Nk] map, cut to the sentence's length, with the words
 * as axis labels (unknown ones as "<unk>(word)"); LM rows are the targets
 * (the next word at each position), columns the inputs.  Files go to
 * out/<model>-<map>[-h<k>].svg when out is a folder (existing, or ending in
 * '/': then created), else to out-<map>[-h<k>].svg; each path written is
 * printed on a line of `paths` (may be NULL).  Errors: an empty sentence, a
 * sentence longer than a fixed-length model's L, a model without maps. */
int ag_sentence_heatmaps(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *sentence,
                         const char *sentence_b, const char *out, FILE *paths, char *err, size_t errlen);

#endif
