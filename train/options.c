/* train_opts.c - the trainer's options: one table gives the CLI syntax,
 * the checks, the help text and the "key=value" config saved in checkpoints. */
#include "attngrad/train.h"
#include "internal.h"
#include "../optim/param_groups.h" /* ag__param_group_parse: --param-group's check */

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { O_INT, O_I64, O_REAL, O_STR, O_SWITCH } opt_type;

typedef struct {
    const char *name;
    opt_type type;
    size_t off, size;       /* field in ag_train_opts; size of a string field */
    double lo, hi;          /* numeric range */
    unsigned cmds;          /* AG_CMD_* the option applies to */
    bool saved;             /* part of the run's config (resume, eval) */
    const char *arg, *help;
    /* extra check of a string value; returns an error text or NULL */
    const char *(*check)(const char *value);
} opt_def;

static const char *check_model(const char *v);
static const char *check_task(const char *v);
static const char *check_flags(const char *v);
static const char *check_attention(const char *v);
static const char *check_optim(const char *v);
static const char *check_sched(const char *v);
static const char *check_lr_steps(const char *v);
static const char *check_param_group(const char *v);
static const char *check_dataset(const char *v);
static const char *check_format(const char *v);
static const char *check_lm_split(const char *v);
static const char *check_progress(const char *v);
static const char *check_fingerprint(const char *v);
static const char *check_device(const char *v);
static const char *check_input(const char *v);
static const char *check_long_lines(const char *v);
static const char *check_lengths(const char *v);
static const char *check_denormals(const char *v);

#define F(field) offsetof(ag_train_opts, field), sizeof(((ag_train_opts *)0)->field)
enum {
    TR = AG_CMD_TRAIN, EV = AG_CMD_EVAL, PR = AG_CMD_PREDICT, DU = AG_CMD_DUMP, GC = AG_CMD_GRADCHECK,
    HM = AG_CMD_HEATMAP, GE = AG_CMD_GENERATE,
    SIZE_CMDS = TR | DU | GC, DATA_CMDS = TR | EV,
};
#define BIG 2147483647.0
#define STR_(x) #x
#define STR(x) STR_(x) /* a macro's value in a help text */

static const opt_def opts[] = {
    {"model", O_STR, F(model), 0, 0, SIZE_CMDS, true, "NAME", "model kind (see `attngrad models`)", check_model},
    {"task", O_STR, F(task), 0, 0, SIZE_CMDS, true, "T", "classify, pair, relatedness or lm (default: from the model and the data)", check_task},
    {"vocab", O_INT, F(vocab), 3, BIG, DU | GC, true, "V", "vocabulary size (train: from the data)", NULL},
    /* no command takes it: train records it in the run's config */
    {"vocab-fp", O_STR, F(vocab_fp), 0, 0, 0, true, "HEX", "fingerprint of the vocabulary", check_fingerprint},
    {"classes", O_INT, F(classes), 2, 65536, DU | GC, true, "K", "classes (train: from the data)", NULL},
    {"dim", O_INT, F(dim), 1, 65536, SIZE_CMDS, true, "D", "model width d (embedding size)", NULL},
    {"hidden", O_INT, F(hidden), 1, 65536, SIZE_CMDS, true, "H", "second size (MTSA dh, LM hidden)", NULL},
    {"heads", O_INT, F(heads), 1, 1024, SIZE_CMDS, true, "N", "attention heads", NULL},
    {"layers", O_INT, F(layers), 0, 64, SIZE_CMDS, true, "N", "LSTM layers (poslm 0: the paper's count)", NULL},
    {"fixed-len", O_INT, F(fixed_len), 1, 1 << 20, SIZE_CMDS, true, "L", "dual-axial fixed length", NULL},
    {"bigrams", O_INT, F(bigrams), 0, BIG, SIZE_CMDS, true, "N", "dual-axial bigram buckets (0: none)", NULL},
    {"keep", O_REAL, F(keep), 1e-9, 1, TR, true, "P", "dropout keep probability (1 = off)", NULL},
    {"l2", O_REAL, F(l2), 0, 1e9, TR, true, "G", "L2 weight of 1/2 |W|^2 over weight matrices", NULL},
    {"hparams", O_STR, F(hparams), 0, 0, SIZE_CMDS, true, "LIST",
     "the model's own settings, name=value,... (a plugin's; `attngrad models` lists them)", NULL},
    {"flags", O_STR, F(flags), 0, 0, SIZE_CMDS, true, "LIST",
     "variants: elu_score, linear_dist, no_bigram, softmax, no_zeta, text_only, no_dist, exp_score, strict",
     check_flags},
    {"attention", O_STR, F(attention), 0, 0, SIZE_CMDS, true, "A", "poslm attention: positional, standard, none",
     check_attention},
    {"optim", O_STR, F(optim), 0, 0, TR, true, "SPEC", "optimizer: sgd, adam, adamw, adadelta, adagrad, rmsprop, muon, adafactor or a "
     "plugin's rule, e.g. adadelta:lr=0.5,rho=0.95; any with ema=D or swa=S keeps an average of the parameters, which "
     "is evaluated and saved as best, and with lookahead=K steps back to slow weights every K updates (default: the "
     "model's; on --resume, the keys given change the run's own)",
     check_optim},
    {"sched", O_STR, F(sched), 0, 0, TR, true, "SPEC",
     "LR schedule per epoch, e.g. plateau:factor=0.5,patience=5 (default: the model's)", check_sched},
    {"lr-steps", O_STR, F(lr_steps), 0, 0, TR, true, "SPEC",
     "per-step warm-up and decay of --sched's rate: cosine:warmup=500,total=20000, linear:total=N, "
     "inv_sqrt:warmup=4000, constant:warmup=100, cosine_restarts:period=1000,mult=2 (SGDR) (total, warmup and period "
     "in optimizer steps; total=run: the steps the run "
     "plans, --epochs x batches or --max-steps where fewer; default: the model's, constant: none)", check_lr_steps},
    {"param-group", O_STR, F(param_groups), 0, 0, TR, true, "GROUP",
     "per-parameter settings, PATTERN:SET, repeatable, a later group winning where two set the same: PATTERN a "
     "glob over parameter names (embed.*, *.bias) or @bias_norm, @matrices; SET lr_scale=S (the rate times S), "
     "weight_decay=W, freeze=1, muon=0 (--optim muon: its AdamW part, not Muon's step, for those matrices; "
     "muon=1 the other way), e.g. 'embed.*:lr_scale=0.1' '@bias_norm:weight_decay=0' 'cls.out.*:muon=0' (on "
     "--resume added after the run's own; '' clears those before it)", check_param_group},
    {"data", O_STR, F(data), 0, 0, DATA_CMDS, true, "PATH", "benchmark folder or labeled file (none: generated task)",
     NULL},
    {"dataset", O_STR, F(dataset), 0, 0, DATA_CMDS, true, "NAME",
     "trec, sst5, sst2, mr, subj, cr, mpqa, sick, ptb, wikitext2: the data set of a --data folder (default: the "
     "folder's name; refused with a file, or without --data)", check_dataset},
    {"format", O_STR, F(format), 0, 0, DATA_CMDS, true, "F", "format of a single file: labeled, sick, conllu, lm",
     check_format},
    {"lm-split", O_STR, F(lm_split), 0, 0, DATA_CMDS, true, "U",
     "LM text: line or sentence (cut after a lone . ? or !); default: sentence for wikitext2, else line", check_lm_split},
    {"phrases", O_SWITCH, F(phrases), 0, 1, DATA_CMDS, true, NULL,
     "SST-5/SST-2: train on every labelled phrase of SST's trees (trees/train.txt); dev and test stay sentences "
     "(eval scores those sentences either way)",
     NULL},
    {"parses", O_STR, F(parses), 0, 0, DATA_CMDS | DU | GC, true, "DIR",
     "dependency parses (CoNLL-U, FILE.conllu per data file) for models that read them; none: the chain "
     "(default: a conllu/ folder beside the data). dump-step, gradcheck: a CoNLL-U FILE whose sentences make the batch",
     NULL},
    /* no command takes these: train records them */
    {"labels", O_STR, F(labels), 0, 0, 0, true, "LIST", "the data set's class names by id", NULL},
    {"parse-source", O_STR, F(parse_source), 0, 0, 0, true, "DIR", "the parses the run used, or chain", NULL},
    {"lowercase", O_SWITCH, F(lowercase), 0, 1, DATA_CMDS, true, NULL, "lower-case ASCII letters of every token", NULL},
    {"max-len", O_INT, F(max_len), 0, 1 << 20, TR, true, "N",
     "cut longer sentences to their first N tokens (0: no limit, but LM sentences are always cut to 35 targets); eval and predict cut as the run did", NULL},
    {"min-count", O_INT, F(min_count), 1, BIG, TR, true, "N", "keep words seen at least N times (default 1)", NULL},
    {"embeddings", O_STR, F(embeddings), 0, 0, TR, true, "PATH",
     "pretrained word vectors (GloVe, word2vec text or binary) for the word embedding; its size sets --dim", NULL},
    {"embeddings-exact", O_SWITCH, F(embeddings_exact), 0, 1, TR, true, NULL,
     "look tokens up in --embeddings as they are only (default: then also lower-cased)", NULL},
    {"freeze-embeddings", O_SWITCH, F(freeze_embeddings), 0, 1, TR, true, NULL,
     "keep the word embedding fixed: no gradient, no optimizer state", NULL},
    {"folds", O_INT, F(folds), 2, 100, DATA_CMDS, true, "K", "cross-validation folds (MR, SUBJ, CR, MPQA; default 10)", NULL},
    {"fold", O_INT, F(fold), -1, 99, DATA_CMDS, true, "I", "run one CV fold only (-1: all)", NULL},
    {"dev-frac", O_REAL, F(dev_frac), 0.001, 0.9, DATA_CMDS, true, "F", "dev share split off when there is no dev file (default 0.1)",
     NULL},
    {"synth-n", O_INT, F(synth_n), 8, 1 << 24, DATA_CMDS, true, "N", "generated training examples (default 4000)", NULL},
    {"input", O_STR, F(input), 0, 0, PR, false, "KIND",
     "lines (default: a sentence a line, pairs split by a tab) or conllu (CoNLL-U sentences, blank-line separated, "
     "read with their parse)", check_input},
    {"max-line-bytes", O_I64, F(max_line_bytes), 1, 1099511627776.0, TR | EV | PR | GE, false, "N",
     "longest input line, in bytes (default 1 MiB): a longer one is refused before memory in proportion to it is "
     "taken (predict: see --long-lines)", NULL},
    {"max-line-words", O_I64, F(max_line_words), 0, 1e6, TR | EV | PR | HM | GE, false, "N",
     "most words in a sentence, a pair's two together (default 1000; 0: no limit): a longer one is refused naming "
     "its line before it takes memory, as attention's grows in their square (not LM text; not with --max-len N "
     "<= it, which cuts; predict: see --long-lines)", NULL},
    {"long-lines", O_STR, F(long_lines), 0, 0, PR, false, "HOW",
     "refuse (default: that line is an error) or cut (predict its first --max-line-bytes, at a word boundary)",
     check_long_lines},
    {"words", O_INT, F(words), 1, 100000, GE, false, "N", "most words drawn after each prompt (default 50)", NULL},
    {"temperature", O_REAL, F(temperature), 0, 1e6, GE, false, "T",
     "draw each word from softmax(logits / T) (default 1; 0: always the likeliest)", NULL},
    {"top-k", O_INT, F(top_k), 0, 1000000000, GE, false, "K",
     "draw among the K likeliest words alone (default 0: all; 1: always the likeliest)", NULL},
    {"top-p", O_REAL, F(top_p), 1e-9, 1, GE, false, "P",
     "draw among the fewest likeliest words whose probability reaches P (nucleus sampling, after --top-k; default 1: "
     "all)", NULL},
    {"len", O_INT, F(len), 1, 4096, DU | GC, false, "N",
     "width of a random batch for the dump or the check, its rows of random lengths (default: the tiny batch)", NULL},
    {"lengths", O_STR, F(lengths), 0, 0, DU | GC, false, "L,L,...",
     "a random batch of rows of these lengths, e.g. 5,1,3 (a one-word sentence; width: the longest, or --len)",
     check_lengths},
    {"lengths-b", O_STR, F(lengths_b), 0, 0, DU | GC, false, "L,L,...",
     "with --lengths, a pair's second sentences' lengths, one a row (default: drawn)", check_lengths},
    {"strict", O_SWITCH, F(strict), 0, 1, GC, false, NULL,
     "fail where a parameter's gradients stay too small to check with the parameters drawn wide (|g| < 1e-6)", NULL},
    {"epochs", O_INT, F(epochs), 1, 1 << 20, TR, true, "N", "training epochs (default 10)", NULL},
    {"batch", O_INT, F(batch), 1, 1 << 20, TR | EV | DU | GC, true, "B",
     "batch size (default: the model's; dump-step, gradcheck: rows of a random batch, default the tiny batch)", NULL},
    {"micro-batch", O_INT, F(micro_batch), 0, 1 << 20, TR, false, "M",
     "run each batch (under mpirun, each rank's share) in parts of at most M rows, summing their gradients: the same "
     "update as the whole batch, to rounding, with the activation memory of M rows (0, the default: whole batches; "
     "a --resume may change it)", NULL},
    {"seed", O_I64, F(seed), 0, 9e15, TR | DU | GC | GE, true, "S",
     "seed of initialisation, data order and dropout (default 1; generate: of its draws, default: the run's)", NULL},
    {"clip", O_REAL, F(clip), 0, 1e30, TR, true, "NORM", "clip the global gradient norm (0: off; default: the model's)",
     NULL},
    {"label-smoothing", O_REAL, F(label_smoothing), 0, 1, TR, true, "EPS",
     "train against (1 - EPS) on the label and EPS / C on every class (classification and LM; dev and test score "
     "the plain loss; 0, the default: none)", NULL},
    {"patience", O_INT, F(patience), 0, 1 << 20, TR, true, "N", "stop after N epochs without a better dev score (0, the default: never)", NULL},
    {"max-steps", O_I64, F(max_steps), 0, 9e15, TR, false, "N", "stop once the run has taken N optimizer steps, those before a --resume included (CV: per fold; 0, the default: no limit)", NULL},
    {"max-minutes", O_REAL, F(max_minutes), 0, 1e9, TR, false, "M", "stop training M minutes after the command started (a --resume: its own time only), then evaluate and save (0, the default: no limit)", NULL},
    /* saved: a --resume evaluates as the run did */
    {"eval-every", O_INT, F(eval_every), 0, BIG, TR, true, "N",
     "also evaluate every N optimizer steps between the epochs' evaluations: a metrics row (partial), the best "
     "checkpoint kept from them too and the last one saved; the schedule and --patience still count epochs (0, the "
     "default: after each epoch only)", NULL},
    /* saved: a --resume goes on logging as the run did, and its file stays one curve */
    {"log-steps", O_INT, F(log_steps), 0, BIG, TR, true, "N",
     "write <out>/steps.csv, a row every N optimizer steps: step, epoch, lr, loss, grad_norm (before clipping), "
     "examples, tokens, seconds (0, the default: none; a --resume goes on with the run's N)", NULL},
    {"threads", O_INT, F(threads), 0, 1024, TR | EV | PR | GC | DU | GE, false, "N",
     "the engine's threads; OpenBLAS runs one in each (0: one per core; 1 on the generated task)", NULL},
    {"denormals", O_STR, F(denormals), 0, 0, TR | EV | PR | GC | DU | HM | GE, false, "HOW",
     "flush (default: subnormal floats computed as 0, as TensorFlow does; x86 is 10-100x slower on them) or keep",
     check_denormals},
    {"device", O_STR, F(device), 0, 0, TR | EV | PR | DU | GC | HM | GE, false, "D",
     "where the steps run: cpu (default; train --resume: the device the run trained on) or cuda (the first GPU; a "
     "build with CUDA)", check_device},
    {"cuda-graphs", O_SWITCH, F(cuda_graphs), 0, 1, TR, false, NULL,
     "with --device cuda: replay each repeated stretch of a step as one CUDA graph (the same results)", NULL},
    {"out", O_STR, F(out), 0, 0, TR | DU, false, "DIR", "run folder (dump-step: the file)", NULL},
    {"init", O_STR, F(init), 0, 0, TR, false, "FILE",
     "start from the parameters of a safetensors file (same names and shapes; F16/BF16/F64 converted)", NULL},
    {"resume", O_SWITCH, F(resume), 0, 1, TR, false, NULL, "continue the run in --out from last.safetensors", NULL},
    {"force", O_SWITCH, F(force), 0, 1, TR, false, NULL, "overwrite a run already in --out", NULL},
    {"progress", O_STR, F(progress), 0, 0, TR, false, "MODE", "auto, bar, lines or none", check_progress},
    {"quiet", O_SWITCH, F(quiet), 0, 1, TR, false, NULL, "print the summary only", NULL},
    {"profile", O_INT, F(profile), 0, 1000000, TR, false, "K",
     "time every op over K training steps after the first " STR(AG_PROFILE_WARMUP) "; the top " STR(AG_PROFILE_TOP)
     " to stderr", NULL},
    {"detect-anomaly", O_SWITCH, F(detect_anomaly), 0, 1, TR, false, NULL,
     "check every op's output and gradients: the first inf or NaN stops the run naming the op, its shapes and line",
     NULL},
};
enum { N_OPTS = sizeof opts / sizeof *opts };

ag_train_opts ag_train_opts_default(void) {
    return (ag_train_opts){
        .model = "mpsan", .vocab = -1, .classes = -1, .dim = -1, .hidden = -1, .heads = -1, .layers = -1,
        .fixed_len = -1, .bigrams = -1, .keep = -1, .l2 = -1, .min_count = 1, .folds = 10, .fold = -1,
        .dev_frac = 0.1, .synth_n = 4000, .epochs = 10, .batch = -1, .seed = 1, .clip = -1, .progress = "auto",
        .max_line_words = AG_MAX_LINE_WORDS, .words = 50, .temperature = 1, .top_p = 1,
    };
}

/* ---- checks of string values ---- */

static const char *one_of(const char *v, const char *const *names, const char *msg) {
    for (int i = 0; names[i]; i++)
        if (!strcmp(v, names[i])) return NULL;
    return msg;
}

static const char *check_model(const char *v) {
    static char msg[AG_MODEL_MAX_KINDS * 40];
    if (ag_model_find(v)) return NULL;
    size_t k = (size_t)snprintf(msg, sizeof msg, "unknown model (registered:");
    for (const ag_model_kind *const *kind = ag_model_kinds(); *kind && k < sizeof msg; kind++)
        k += (size_t)snprintf(msg + k, sizeof msg - k, " %s", (*kind)->name);
    /* a kind from a plugin is known only where the plugin is loaded again (eval, predict, resume) */
    if (k < sizeof msg) snprintf(msg + k, sizeof msg - k, "; a plugin's model needs --plugin FILE before the command)");
    return msg;
}

static const char *check_task(const char *v) {
    ag_task t;
    return !*v || ag_task_parse(v, &t) == 0 ? NULL : "expected classify, pair, relatedness or lm";
}

/* Each name a built-in model's or a registered kind's own: which kind's is
 * known only once --model is (ag__train_flags, when the run is resolved). */
static const char *check_flags(const char *v) {
    static char msg[128];
    for (const char *p = v; *p; p += strcspn(p, ","), p += *p == ',') {
        char name[48];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(p, ","), p);
        unsigned bits;
        bool known = !ag_flags_parse(name, &bits, NULL, 0);
        for (const ag_model_kind *const *k = ag_model_kinds(); *k && !known; k++)
            known = !ag_model_flags_parse(*k, name, &bits, NULL, 0);
        if (!known) {
            snprintf(msg, sizeof msg, "unknown flag '%s'", name);
            return msg;
        }
    }
    return NULL;
}

static const char *check_long_lines(const char *v) {
    return one_of(v, (const char *[]){"", "refuse", "cut", NULL}, "expected refuse or cut");
}

/* "5,1,3": 1 to 64 lengths, each in [1, 4096], digits only ("" = none given). */
static const char *check_lengths(const char *v) {
    static const char want[] = "expected 1 to 64 lengths in [1, 4096], comma-separated (\"5,1,3\")";
    if (!*v) return NULL;
    for (int n = 0;; n++) {
        char *end;
        long x = *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : 0;
        if (x < 1 || x > 4096 || n == 64 || (*end && *end != ',')) return want;
        if (!*end) return NULL;
        v = end + 1;
    }
}

static const char *check_denormals(const char *v) {
    return one_of(v, (const char *[]){"", "flush", "keep", NULL}, "expected flush or keep");
}

static const char *check_input(const char *v) {
    return one_of(v, (const char *[]){"", "lines", "conllu", NULL}, "expected lines or conllu");
}

static const char *check_attention(const char *v) {
    return one_of(v, (const char *[]){"", "positional", "standard", "none", NULL},
                  "expected positional, standard or none");
}

static const char *check_optim(const char *v) {
    static char msg[400];
    ag_optim_config c;
    if (!*v) return NULL; /* the model's default */
    if (ag_optim_parse(v, &c) == AG_OK && ag_optim_check(&c) == AG_OK) return NULL;
    size_t k = (size_t)snprintf(msg, sizeof msg, "%s", ag_errmsg());
    /* a rule from a plugin is known only where the plugin is loaded again (as a model kind) */
    if (!strncmp(msg, "unknown optimizer '", 19) && k < sizeof msg)
        snprintf(msg + k, sizeof msg - k, "; a plugin's rule needs --plugin FILE before the command");
    return msg;
}

static const char *check_sched(const char *v) {
    static char msg[400];
    ag_sched_config c;
    if (!*v) return NULL;
    if (ag_sched_parse(v, &c) == AG_OK && ag_sched_check(&c) == AG_OK) return NULL;
    snprintf(msg, sizeof msg, "%s", ag_errmsg());
    return msg;
}

static const char *check_dataset(const char *v) {
    if (!*v || !strcmp(v, "synth") || ag_benchmark_find(v)) return NULL;
    return "unknown data set (trec, sst5, sst2, mr, subj, cr, mpqa, sick, ptb, wikitext2)";
}

static const char *check_format(const char *v) {
    ag_format f;
    if (!*v || ag_format_parse(v, &f) == 0) return NULL;
    return "expected labeled, sick, conllu or lm";
}

static const char *check_lm_split(const char *v) {
    return !*v || !strcmp(v, "line") || !strcmp(v, "sentence") ? NULL : "expected line or sentence";
}

/* --lr-steps' total=run, the run's planned steps (known once its data is:
 * train/setup.c), stands in the spec as total=AG__LR_TOTAL_RUN while it is
 * read, checked and merged, and is written back as "run", so a saved run
 * keeps asking for its own count. */
#define RUN_TOTAL "2147483647" /* AG__LR_TOTAL_RUN */
static bool run_total_at(const char *spec, const char *p) {
    return !strncmp(p, "total=run", 9) && (p[9] == ',' || !p[9]) && p > spec && (p[-1] == ':' || p[-1] == ',');
}

ag_status ag__lr_steps_read(const char *spec, const ag_lr_steps *base, ag_lr_steps *out, bool *run) {
    char text[AG_CONFIG_MAX];
    size_t k = 0;
    for (const char *p = spec; *p && k + sizeof RUN_TOTAL + 8 < sizeof text; p++)
        if (run_total_at(spec, p)) {
            k += (size_t)snprintf(text + k, sizeof text - k, "total=" RUN_TOTAL);
            p += 8;
        } else {
            text[k++] = *p;
        }
    text[k] = 0;
    ag_status st = ag_lr_steps_parse_over(text, base, out);
    if (run) *run = !st && (out->decay == AG_LR_LINEAR || out->decay == AG_LR_COSINE) && out->total == AG__LR_TOTAL_RUN;
    return st;
}

/* The spec s written out, its total "run" where it stands for the run's. */
static void lr_steps_write(const ag_lr_steps *s, char *out, size_t n) {
    char text[AG_CONFIG_MAX];
    ag_lr_steps_format(s, text, sizeof text);
    char *at = strstr(text, "total=" RUN_TOTAL);
    if (!at) snprintf(out, n, "%s", text);
    else snprintf(out, n, "%.*stotal=run%s", (int)(at - text), text, at + strlen("total=" RUN_TOTAL));
}

static const char *check_lr_steps(const char *v) {
    static char msg[400];
    ag_lr_steps s;
    if (!*v || ag__lr_steps_read(v, NULL, &s, NULL) == AG_OK) return NULL;
    snprintf(msg, sizeof msg, "%s", ag_errmsg());
    return msg;
}

/* Which parameters a group matches is known once the model is made
 * (train/setup.c): here its syntax and values. */
static const char *check_param_group(const char *v) {
    static char msg[400];
    ag__param_group g;
    if (!*v || ag__param_group_parse(v, &g) == AG_OK) return NULL;
    snprintf(msg, sizeof msg, "%s", ag_errmsg());
    return msg;
}

/* Drops the lines of field (groups a line each) equal to line. */
static void drop_group_line(char *field, const char *line) {
    size_t len = strlen(line);
    for (char *p = field; *p;) {
        size_t n = strcspn(p, "\n");
        if (n == len && !strncmp(p, line, len)) {
            char *next = p + n + (p[n] == '\n');
            memmove(p, next, strlen(next) + 1);
            if (!*p && p > field) p[-1] = 0; /* the last line went: no trailing newline */
        } else
            p += n + (p[n] == '\n');
    }
}

/* --param-group adds a group after those set before it (an earlier
 * --param-group, a resumed run's own: a later group wins where two set the
 * same), a line each; '' clears them.  The same group given again moves to
 * the end instead of being added twice, so a run resumed with the command
 * line it started with keeps its groups as they were.  0, or an error into
 * err. */
static int add_param_group(const opt_def *d, char *field, const char *v, char *err, size_t n) {
    const char *why = check_param_group(v);
    if (why) return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.80s': %s", d->name, v, why);
    if (*v) drop_group_line(field, v);
    size_t have = strlen(field);
    if (!*v) field[0] = 0;
    else if (have + 1 + strlen(v) >= d->size)
        return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.60s': the groups take more than %zu bytes", d->name,
                              v, d->size - 1);
    else snprintf(field + have, d->size - have, "%s%s", have ? "\n" : "", v);
    return 0;
}

/* A spec given over one already set (a resumed run's own, or an earlier
 * --optim on the same line): when both name the same kind, only the keys
 * it gives change, so `--resume --optim sgd:lr=0.01` keeps the run's
 * momentum instead of silently resetting it; the result is written in
 * full.  Another kind replaces the old spec. */
static const char *spec_error(void) {
    static char msg[400];
    snprintf(msg, sizeof msg, "%s", ag_errmsg());
    return msg;
}

static const char *optim_over(const char *old, const char *v, char *out, size_t n) {
    ag_optim_config base, c;
    if (ag_optim_parse(old, &base) || ag_optim_parse_over(v, &base, &c)) return spec_error();
    ag_optim_format(&c, out, n);
    return NULL;
}

static const char *sched_over(const char *old, const char *v, char *out, size_t n) {
    ag_sched_config base, c;
    if (ag_sched_parse(old, &base) || ag_sched_parse_over(v, &base, &c)) return spec_error();
    ag_sched_format(&c, out, n);
    return NULL;
}

static const char *lr_steps_over(const char *old, const char *v, char *out, size_t n) {
    ag_lr_steps base, c;
    if (ag__lr_steps_read(old, NULL, &base, NULL) || ag__lr_steps_read(v, &base, &c, NULL)) return spec_error();
    lr_steps_write(&c, out, n);
    return NULL;
}

typedef const char *(*spec_over_fn)(const char *old, const char *value, char *out, size_t n);

/* The merge of the spec options; NULL for every other. */
static spec_over_fn spec_over(const opt_def *d) {
    if (d->off == offsetof(ag_train_opts, optim)) return optim_over;
    if (d->off == offsetof(ag_train_opts, sched)) return sched_over;
    if (d->off == offsetof(ag_train_opts, lr_steps)) return lr_steps_over;
    return NULL;
}

static const char *check_fingerprint(const char *v) {
    size_t n = strspn(v, "0123456789abcdef");
    return !*v || (n == 16 && !v[n]) ? NULL : "expected 16 lower-case hex digits";
}

/* cpu, cuda (GPU 0, or under mpirun the rank's own) or cuda:N (GPU N of
 * those visible).  One GPU per process: several GPUs are several MPI ranks. */
int ag__train_device_index(const char *device) {
    if (!*device || !strcmp(device, "cpu") || !strcmp(device, "cuda")) return -1;
    size_t n = strlen(device);
    if (strncmp(device, "cuda:", 5) || n < 6 || n > 9 || strspn(device + 5, "0123456789") != n - 5) return -2;
    return atoi(device + 5);
}

static const char *check_device(const char *v) {
    return ag__train_device_index(v) >= -1 ? NULL : "expected cpu, cuda or cuda:N (N a GPU's index)";
}

static const char *check_progress(const char *v) {
    return one_of(v, (const char *[]){"auto", "bar", "lines", "none", NULL}, "expected auto, bar, lines or none");
}

/* ---- set, look up, print ---- */

static bool same_key(const char *key, const char *name) { /* '-' and '_' alike */
    for (; *key && *name; key++, name++)
        if (*key != *name && !((*key == '-' || *key == '_') && (*name == '-' || *name == '_'))) return false;
    return !*key && !*name;
}

static const opt_def *find_opt(const char *key) {
    for (int i = 0; i < N_OPTS; i++)
        if (same_key(key, opts[i].name)) return &opts[i];
    return NULL;
}

int ag_train_option_info(const char *key, unsigned cmd, int *takes_value) {
    const opt_def *d = find_opt(key);
    if (!d || !(d->cmds & cmd)) return 0;
    if (takes_value) *takes_value = d->type != O_SWITCH;
    return 1;
}

int ag__train_fail(char *err, size_t n, int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return code;
}

static int set_number(const opt_def *d, void *field, const char *v, char *err, size_t n) {
    char *end;
    errno = 0;
    double x = d->type == O_REAL ? strtod(v, &end) : (double)strtoll(v, &end, 10);
    bool plain = *v && !isspace((unsigned char)*v) && !strpbrk(v, "xX"); /* strto* skip spaces and read hex */
    if (plain && !*end && errno == ERANGE)
        return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.40s' is out of range", d->name, v);
    if (!plain || *end || errno || !isfinite(x))
        return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.40s' is not %s", d->name, v,
                             d->type == O_REAL ? "a decimal number" : "an integer");
    if (x < d->lo || x > d->hi) {
        return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: %s is out of range [%g, %g]", d->name, v, d->lo, d->hi);
    }
    if (d->type == O_INT) *(int *)field = (int)x;
    else if (d->type == O_I64) *(int64_t *)field = strtoll(v, NULL, 10);
    else *(double *)field = x;
    return 0;
}

int ag_train_set(ag_train_opts *o, const char *key, const char *value, char *err, size_t n) {
    const opt_def *d = find_opt(key);
    if (!d) return ag__train_fail(err, n, AG_ERR_ARG, "unknown option --%s", key);
    void *field = (char *)o + d->off;
    if (d->type == O_SWITCH) {
        if (value && strcmp(value, "1") && strcmp(value, "0"))
            return ag__train_fail(err, n, AG_ERR_ARG, "option --%s takes no value (got '%s')", d->name, value);
        *(int *)field = !value || !strcmp(value, "1");
        return 0;
    }
    if (!value) return ag__train_fail(err, n, AG_ERR_ARG, "option --%s needs a value (%s)", d->name, d->arg);
    if (d->type != O_STR) return set_number(d, field, value, err, n);
    if (strlen(value) >= d->size) return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.60s' is too long", d->name, value);
    if (strchr(value, '\n')) return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: the value holds a line break", d->name);
    if (d->off == offsetof(ag_train_opts, param_groups)) return add_param_group(d, field, value, err, n);
    spec_over_fn over = spec_over(d);
    if (over && *(char *)field && *value) { /* checked as what it makes of the spec it goes over */
        char merged[AG_CONFIG_MAX];
        const char *why = over(field, value, merged, sizeof merged);
        if (why)
            return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.80s' over '%.80s': %s", d->name, value,
                                  (char *)field, why);
        if (strlen(merged) >= d->size)
            return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.60s' is too long", d->name, merged);
        strcpy(field, merged);
        return 0;
    }
    const char *why = d->check ? d->check(value) : NULL;
    if (why) return ag__train_fail(err, n, AG_ERR_ARG, "option --%s: '%.80s': %s", d->name, value, why);
    strcpy(field, value);
    return 0;
}

void ag_train_print_options(FILE *f, unsigned cmd) {
    for (int i = 0; i < N_OPTS; i++) {
        if (!(opts[i].cmds & cmd)) continue;
        char head[40];
        snprintf(head, sizeof head, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "", opts[i].arg ? opts[i].arg : "");
        fprintf(f, "  %-20s %s", head, opts[i].help);
        if (!strcmp(opts[i].name, "flags")) /* the switches of the kinds a plugin registered, by model */
            for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++)
                if ((*k)->flag_names && (*k)->flag_names[0]) fprintf(f, "; %s: %s", (*k)->name, (*k)->flag_names);
        fputc('\n', f);
    }
}

/* ---- the config text saved in checkpoints ---- */

/* The shortest "%g" form that reads back to the same double. */
static const char *real_str(double x, char *buf, size_t n) {
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, x);
        if (strtod(buf, NULL) == x) break;
    }
    return buf;
}

/* A string option's line; --param-group's groups a line each (read back
 * in order, each added after the one before), none when there are none. */
static int format_string(const opt_def *d, const char *field, char *buf, size_t n) {
    if (d->off != offsetof(ag_train_opts, param_groups)) return snprintf(buf, n, "%s=%s\n", d->name, field);
    size_t k = 0;
    for (const char *p = field; *p; p += strcspn(p, "\n"), p += *p == '\n') {
        int w = snprintf(buf + k, n - k, "%s=%.*s\n", d->name, (int)strcspn(p, "\n"), p);
        if (w < 0 || (size_t)w >= n - k) return w < 0 ? w : (int)(n - k);
        k += (size_t)w;
    }
    if (n) buf[k] = 0;
    return (int)k;
}

int ag_train_opts_format(const ag_train_opts *o, char *buf, size_t n) {
    size_t k = 0;
    for (int i = 0; i < N_OPTS; i++) {
        const opt_def *d = &opts[i];
        const void *field = (const char *)o + d->off;
        if (!d->saved) continue;
        if ((d->type == O_INT && *(const int *)field == -1) || (d->type == O_REAL && *(const double *)field == -1))
            continue; /* -1: the kind's default, nothing to save */
        int w;
        char real[32];
        switch (d->type) {
        case O_INT:
        case O_SWITCH: w = snprintf(buf + k, n - k, "%s=%d\n", d->name, *(const int *)field); break;
        case O_I64: w = snprintf(buf + k, n - k, "%s=%lld\n", d->name, (long long)*(const int64_t *)field); break;
        case O_REAL: w = snprintf(buf + k, n - k, "%s=%s\n", d->name, real_str(*(const double *)field, real, sizeof real)); break;
        default: w = format_string(d, field, buf + k, n - k); break;
        }
        if (w < 0 || (size_t)w >= n - k) return AG_ERR_ARG;
        k += (size_t)w;
    }
    return 0;
}

/* Parses "key=value" lines; lines whose key starts with "state." are left
 * for the caller (the training loop's own counters). */
int ag_train_opts_parse(ag_train_opts *o, const char *text, const char *what, char *err, size_t errlen) {
    char line[AG_PATH_MAX + 64];
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        if (len >= sizeof line) {
            snprintf(err, errlen, "%s: config line too long", what);
            return AG_ERR_FORMAT;
        }
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (p[len] == '\n');
        if (!len || !strncmp(line, "state.", 6)) continue;
        char *eq = strchr(line, '=');
        if (!eq) {
            snprintf(err, errlen, "%s: config line '%.80s' is not key=value", what, line);
            return AG_ERR_FORMAT;
        }
        *eq = 0;
        char why[400] = "";
        const opt_def *d = find_opt(line);
        const char *reason = why;
        if (!d) reason = "unknown key";
        else if (d->type == O_SWITCH && !eq[1]) reason = "a switch is saved as 0 or 1, not empty";
        else if (!ag_train_set(o, line, eq + 1, why, sizeof why)) continue;
        snprintf(err, errlen, "%s: bad config entry '%.40s': %s", what, line, reason);
        return AG_ERR_FORMAT;
    }
    return 0;
}

/* ---- resolution: kind defaults + options -> model config ---- */

void ag__train_apply(const ag_train_opts *o, ag_model_config *c) {
    if (o->vocab > 0) c->vocab = o->vocab;
    if (o->classes > 0) c->classes = o->classes;
    if (o->dim > 0) c->dim = o->dim;
    if (o->hidden > 0) c->hidden = o->hidden;
    if (o->heads > 0) c->heads = o->heads;
    if (o->layers >= 0) c->layers = o->layers;
    if (o->fixed_len > 0) c->fixed_len = o->fixed_len;
    if (o->bigrams >= 0) c->n_bigram = o->bigrams;
    if (o->keep > 0) c->keep = o->keep;
    if (o->l2 >= 0) c->l2 = o->l2;
    if (o->batch > 0) c->batch = o->batch;
    if (ag__train_flags(o, ag_model_find(o->model), &c->flags, NULL, 0)) c->flags = 0; /* checked when resolved */
    if (o->hparams[0]) c->hparams = o->hparams; /* checked when the model is made; else the kind's defaults' (or tiny's) */
    c->max_len = o->max_len; /* a table per position is sized by the run's widest batch */
    if (!strcmp(o->attention, "positional")) c->attention = 0;
    if (!strcmp(o->attention, "standard")) c->attention = 1;
    if (!strcmp(o->attention, "none")) c->attention = 2;
    if (o->task[0]) ag_task_parse(o->task, &c->task);
    c->seed = (uint64_t)o->seed;
}

int ag__train_flags(const ag_train_opts *o, const ag_model_kind *kind, unsigned *bits, char *err, size_t errlen) {
    char bad[160], own[256];
    int rc = ag_model_flags_parse(kind, o->flags, bits, bad, sizeof bad);
    if (!rc && (!kind || !(*bits & ~ag_model_flags_read(kind)))) return 0;
    if (!kind) return ag__train_fail(err, errlen, AG_ERR_ARG, "option --flags: unknown flag '%s'", bad);
    if (!rc) ag_model_flags_str(kind, *bits & ~ag_model_flags_read(kind), bad, sizeof bad); /* another model's built-in ones */
    ag_model_flags_str(kind, ag_model_flags_read(kind), own, sizeof own);
    return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s does not read flag %s (its flags: %s)", kind->name, bad,
                         own[0] ? own : "none");
}

static bool in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || !p[n])) return true;
    return false;
}

int ag_train_unread_options(const ag_train_opts *o, char *buf, size_t n) {
    const ag_model_kind *kind = ag_model_find(o->model);
    const struct {
        const char *name;
        bool set;
    } sizes[] = {{"hidden", o->hidden > 0},       {"heads", o->heads > 0},     {"layers", o->layers >= 0},
                 {"fixed-len", o->fixed_len > 0}, {"bigrams", o->bigrams >= 0}, {"attention", o->attention[0] != 0},
                 {"max-len", o->max_len > 0}};
    int count = 0;
    size_t k = 0;
    if (n) buf[0] = 0;
    for (size_t i = 0; kind && kind->reads && i < sizeof sizes / sizeof *sizes; i++) {
        if (!sizes[i].set || in_list(kind->reads, sizes[i].name)) continue;
        int w = snprintf(buf + k, k < n ? n - k : 0, "%s--%s", count ? ", " : "", sizes[i].name);
        if (w > 0 && k + (size_t)w < n) k += (size_t)w;
        count++;
    }
    return count;
}

void ag__train_record(ag_train_opts *o, const ag_model_config *c) {
    static const char *const attentions[] = {"positional", "standard", "none"};
    o->vocab = c->vocab, o->classes = c->classes, o->dim = c->dim, o->heads = c->heads, o->layers = c->layers;
    o->hidden = c->hidden > 0 ? c->hidden : -1; /* -1: "none", not written */
    o->fixed_len = c->fixed_len > 0 ? c->fixed_len : -1;
    o->bigrams = c->n_bigram, o->keep = c->keep, o->l2 = c->l2, o->batch = c->batch;
    snprintf(o->task, sizeof o->task, "%s", ag_task_name(c->task));
    if ((unsigned)c->attention < 3) strcpy(o->attention, attentions[c->attention]);
}

/* Is the kind's optimizer plain SGD (poslm's lr 30 recipe), which the
 * generated LM task replaces? */
static bool lm_sgd_recipe(const char *optim) {
    ag_optim_config oc;
    return optim && ag_optim_parse(optim, &oc) == AG_OK && oc.kind == AG_SGD;
}

int ag_train_resolve(ag_train_opts *o, ag_model_config *c, char *err, size_t errlen) {
    const ag_model_kind *kind = ag_model_find(o->model);
    if (!kind) return ag__train_fail(err, errlen, AG_ERR_ARG, "option --model: '%s': %s", o->model, check_model(o->model));
    ag_task task = ag_model_defaults(kind).task; /* the kind's own, unless --task says otherwise */
    if (o->task[0]) ag_task_parse(o->task, &task);
    if (!ag_model_supports(kind, task)) {
        char tasks[64];
        return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s has no head for the %s task (it does: %s)", kind->name,
                    ag_task_name(task), ag_model_tasks_str(kind, tasks, sizeof tasks));
    }
    unsigned flags;
    if (ag__train_flags(o, kind, &flags, err, errlen)) return AG_ERR_ARG; /* another kind's own switch */
    *c = ag_model_task_defaults(kind, task);
    if (!o->data[0]) { /* the generated tasks are small: so is the model, unless told otherwise */
        if (c->dim > 64) c->dim = 64;
        if (c->hidden > 64) c->hidden = 64;
        if (c->heads > 1 && o->heads < 0 && o->dim < 0) c->dim -= c->dim % c->heads;
    }
    ag__train_apply(o, c);
    if (!o->data[0]) {
        if (c->n_bigram > 1024 && o->bigrams < 0) c->n_bigram = 1024; /* a vocab of a few dozen words */
        /* poslm's SGD at lr 30 is tuned to PTB: it diverges on the lookup
         * task.  An LM kind whose own optimizer is adaptive (a plugin's
         * Adam, AdamW) keeps its recipe: it was chosen for that kind. */
        if (c->task == AG_TASK_LM && lm_sgd_recipe(c->optim)) {
            c->optim = "adam:lr=3e-3"; /* the whole recipe: its schedules and clip were for that SGD */
            c->sched = NULL;
            c->lr_steps = NULL;
            c->clip = 0;
        }
    }
    if (!o->optim[0]) snprintf(o->optim, sizeof o->optim, "%s", c->optim);
    c->optim = o->optim;
    if (!o->sched[0]) snprintf(o->sched, sizeof o->sched, "%s", c->sched ? c->sched : "constant");
    c->sched = o->sched;
    if (o->clip < 0) o->clip = c->clip;
    c->clip = o->clip;
    c->label_smoothing = o->label_smoothing;
    if (c->label_smoothing > 0 && c->task == AG_TASK_RELATEDNESS)
        return ag__train_fail(err, errlen, AG_ERR_ARG, "option --label-smoothing: the relatedness task trains on a "
                              "soft target over the scores already (Tai et al.'s); it smooths cross-entropy's "
                              "one-hot targets (classification, pair and lm tasks)");
    /* the kind's warm-up where --lr-steps gives none; recorded, so a
     * --resume, and the saved config, keep it */
    if (!o->lr_steps[0] && c->lr_steps && c->lr_steps[0]) {
        ag_lr_steps ls;
        if (ag__lr_steps_read(c->lr_steps, NULL, &ls, NULL) || strlen(c->lr_steps) >= sizeof o->lr_steps)
            return ag__train_fail(err, errlen, AG_ERR_ARG, "model %s's default per-step schedule '%.80s' (its "
                                  "defaults' lr_steps): %s", kind->name, c->lr_steps,
                                  strlen(c->lr_steps) >= sizeof o->lr_steps ? "too long" : ag_errmsg());
        snprintf(o->lr_steps, sizeof o->lr_steps, "%s", c->lr_steps);
    }
    c->lr_steps = o->lr_steps[0] ? o->lr_steps : NULL;
    ag__train_record(o, c);
    return 0;
}
