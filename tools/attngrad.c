/* attngrad.c - the command-line program.
 *
 *   attngrad train [--model mtsa] [--data DATA/trec] [options]
 *   attngrad eval --ckpt runs/x/best.safetensors [--data ...]
 *   attngrad predict --ckpt runs/x/best.safetensors < sentences.txt
 *   attngrad generate --ckpt runs/lm/best.safetensors --words 30 < prompts.txt
 *   attngrad heatmap --ckpt runs/x/best.safetensors --sentence "the cat sat" --out maps/
 *   attngrad gradcheck --model mpsan [--flags elu_score]
 *   attngrad dump-step --model mpsan --out step.safetensors
 *   attngrad models
 *   attngrad --plugin my_model.so train --model mine    (any command: kinds of a plugin)
 *   attngrad --plugin lion.so train --optim lion:lr=1e-4  (and its optimizer rules)
 *
 * The work is done by the trainer library (include/attngrad/train.h); this file reads
 * the command line and prints.  The program is built twice: `attngrad`
 * (float) and `attngrad-f64` (double), which `attngrad gradcheck` runs.
 * Exit status: 0 success, 1 failure (bad data, a failed check), 2 usage. */
#include "../distributed/dist.h"
#include "attngrad/train.h"
#include "../train/internal.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum { EXIT_USAGE = 2 };

typedef struct {
    const char *name;
    unsigned cmd;
    const char *usage, *what;
} command;

static const command commands[] = {
    {"train", AG_CMD_TRAIN, "train [options]", "train a model (no --data: a generated task, no download needed)"},
    {"eval", AG_CMD_EVAL, "eval --ckpt FILE [options]", "dev and test metrics of a checkpoint"},
    {"predict", AG_CMD_PREDICT, "predict --ckpt FILE < lines",
     "label and probabilities per input line (pairs: two sentences separated by a tab; relatedness: the score; "
     "a language model: the line's perplexity and the likeliest next word)"},
    {"generate", AG_CMD_GENERATE, "generate --ckpt FILE [--words N] [--temperature T] [--top-k K] [--top-p P] [--seed S] < prompts",
     "a language model's continuation of each prompt line, drawn word by word"},
    {"heatmap", AG_CMD_HEATMAP, "heatmap --ckpt FILE --sentence TEXT [--sentence-b TEXT] --out DIR_OR_PREFIX",
     "SVG heatmaps of the model's attention on a sentence, one per map and head"},
    {"gradcheck", AG_CMD_GRADCHECK, "gradcheck --model NAME [options]",
     "f64 gradient check of every parameter at the tiny sizes"},
    {"dump-step", AG_CMD_DUMP, "dump-step --model NAME --out FILE [options]",
     "one forward/backward (dropout off) to safetensors: parameters, grad.*, loss, batch.*"},
    {"models", 0, "models", "list the registered models and their defaults (and a plugin's optimizer rules)"},
};
enum { N_COMMANDS = sizeof commands / sizeof *commands };

static void usage(FILE *f) {
    fprintf(f, "usage: attngrad [--plugin FILE.so]... COMMAND [options]   (attngrad COMMAND --help for its options)\n\n");
    for (int i = 0; i < N_COMMANDS; i++) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].what);
    fprintf(f, "\n  --plugin FILE.so   load the model kinds and optimizer rules a shared object registers "
               "(docs/extending.md)\n");
}

static void command_help(const command *c) {
    printf("usage: attngrad %s\n%s\n", c->usage, c->what);
    if (c->cmd & (AG_CMD_EVAL | AG_CMD_PREDICT | AG_CMD_GENERATE | AG_CMD_HEATMAP))
        printf("  %-20s %s\n", "--ckpt FILE", "checkpoint of attngrad train");
    if (c->cmd & AG_CMD_HEATMAP) {
        printf("  %-20s %s\n", "--sentence TEXT", "the sentence, tokenized as the training data was");
        printf("  %-20s %s\n", "--sentence-b TEXT", "pair models: the second sentence");
        printf("  %-20s %s\n", "--out DIR_OR_PREFIX",
               "a folder (existing, or ending in /): DIR/<model>-<map>[-h<k>].svg; else PREFIX-<map>[-h<k>].svg");
    }
    ag_train_print_options(stdout, c->cmd);
}

/* The fatal handler: a programmer error (for example sizes a model cannot
 * take) ends the program with its message rather than with abort(). */
static void fatal_exit(const char *msg) {
    fprintf(stderr, "%s%s\n", ag__dist_who(), msg);
    if (ag__train_doing()[0]) fprintf(stderr, "attngrad: while %s\n", ag__train_doing());
    ag__dist_abort(1); /* under mpirun: the other ranks too */
    exit(1);
}

/* ---- the command line: "--key value", "--key=value", "--switch" ---- */

/* The options that are the command's own rather than the trainer's. */
typedef struct {
    const char *ckpt;
    const char *sentence, *sentence_b, *out; /* heatmap */
} cli_extra;

static const char **extra_option(const command *c, cli_extra *x, const char *key) {
    if (!strcmp(key, "ckpt") && (c->cmd & (AG_CMD_EVAL | AG_CMD_PREDICT | AG_CMD_GENERATE | AG_CMD_HEATMAP)))
        return &x->ckpt;
    if (!(c->cmd & AG_CMD_HEATMAP)) return NULL;
    if (!strcmp(key, "sentence")) return &x->sentence;
    if (!strcmp(key, "sentence-b") || !strcmp(key, "sentence_b")) return &x->sentence_b;
    if (!strcmp(key, "out")) return &x->out;
    return NULL;
}

static int parse_args(const command *c, int argc, char **argv, ag_train_opts *o, cli_extra *x) {
    for (int i = 2; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "attngrad %s: unexpected argument '%s' (options start with --)\n", c->name, arg);
            return EXIT_USAGE;
        }
        char key[64];
        const char *eq = strchr(arg, '='), *value = eq ? eq + 1 : NULL;
        snprintf(key, sizeof key, "%.*s", (int)(eq ? (size_t)(eq - arg - 2) : strlen(arg + 2)), arg + 2);
        if (!strcmp(key, "help") || !strcmp(key, "h")) {
            command_help(c);
            exit(0);
        }
        int takes_value = 1;
        const char **extra = extra_option(c, x, key);
        if (!strcmp(key, "plugin")) { /* loaded before the command: its kinds are needed to check --model */
            fprintf(stderr, "attngrad %s: --plugin comes before the command: attngrad --plugin FILE %s ...\n", c->name,
                    c->name);
            return EXIT_USAGE;
        }
        if (!extra && !ag_train_option_info(key, c->cmd, &takes_value)) {
            bool elsewhere = ag_train_option_info(key, ~0u, NULL);
            fprintf(stderr, "attngrad %s: %s option --%s (see attngrad %s --help)\n", c->name,
                    elsewhere ? "this command takes no" : "unknown", key, c->name);
            return EXIT_USAGE;
        }
        if (takes_value && !value) {
            if (i + 1 >= argc || !strncmp(argv[i + 1], "--", 2)) {
                fprintf(stderr, "attngrad %s: option --%s needs a value\n", c->name, key);
                return EXIT_USAGE;
            }
            value = argv[++i];
        }
        char err[512];
        if (extra) *extra = value;
        else if (ag_train_set(o, key, value, err, sizeof err)) {
            fprintf(stderr, "attngrad %s: %s\n", c->name, err);
            return EXIT_USAGE;
        }
    }
    return 0;
}

/* --threads sets the engine's pool, which also keeps OpenBLAS at one
 * thread (docs/performance.md); 0 keeps the default (one per core).
 * --denormals: subnormal floats flushed to zero unless "keep". */
static void set_engine(int threads, const ag_train_opts *o) {
    if (threads > 0) ag_set_num_threads(threads);
    ag_flush_denormals(strcmp(o->denormals, "keep") != 0);
}

/* ---- train ---- */

/* "r 0.8012, rho 0.7410, mse 0.3521" of relatedness metrics */
static void print_relatedness(const char *split, const ag_metrics *x) {
    printf("%s pearson r %.4f, spearman rho %.4f, mse %.4f", split, x->pearson, x->spearman, x->mse);
}

static void print_summary(const ag_train_opts *o, const ag_train_result *r) {
    bool lm = !strcmp(o->task, "lm"), rel = !strcmp(o->task, "relatedness");
    printf("\n%s in %.1f s: %d epochs, %lld steps", r->time_up ? "stopped" : "done", r->seconds, r->epochs,
           (long long)r->steps);
    if (isfinite(r->first_loss)) printf(", training loss %.4f -> %.4f", r->first_loss, r->last_loss);
    if (r->step_bytes) printf(", step memory %.1f MiB", r->step_bytes / 1048576.0);
    printf("\n");
    if (r->folds == 0) {
        printf("no evaluation yet: the limit came before the first step\n");
        return;
    }
    const char *what = r->folds > 1 ? "mean over folds, best dev checkpoints" : "best dev checkpoint";
    if (rel) {
        print_relatedness("dev", &r->dev);
        if (r->has_test) printf("; "), print_relatedness("test", &r->test);
    } else {
        if (lm) printf("dev perplexity %.2f", r->dev.perplexity);
        else printf("dev accuracy %.2f%%", 100 * r->dev.accuracy);
        if (r->has_test && lm) printf(", test perplexity %.2f", r->test.perplexity);
        if (r->has_test && !lm) printf(", test accuracy %.2f%%", 100 * r->test.accuracy);
    }
    if (r->folds > 1) printf(" (+- %.2f over %d folds)", 100 * r->test_std, r->folds);
    printf("  (%s)\nrun folder: %s\n", what, r->out);
    if (o->cuda_graphs) { /* whether the graphs replayed, or every stretch differed */
        ag_mem_stats m = ag_memstats();
        printf("cuda graphs: %lld stretches replayed from %lld captured graphs, %lld run eagerly\n",
               (long long)m.graph_launches, (long long)m.graph_captures, (long long)m.eager_segments);
    }
    if (r->time_up && !ag_train_stop_requested())
        printf("limit reached (--max-steps / --max-minutes): continue with --resume --out %s\n", r->out);
}

/* The value of --name (as "--name V" or "--name=V") on a command line, or
 * NULL; a bare switch gives "".  Only what must be known before the
 * options are read in full: --resume and its --out.  The last one given,
 * as parse_args keeps the last: with the first, `--resume --out A --out B`
 * resumed B's checkpoint under A's options (its L2, its optimizer). */
static const char *arg_of(int argc, char **argv, const char *name) {
    size_t n = strlen(name);
    const char *value = NULL;
    for (int i = 2; i < argc; i++)
        if (!strncmp(argv[i], name, n) && (argv[i][n] == '=' || !argv[i][n]))
            value = argv[i][n] ? argv[i] + n + 1 : i + 1 < argc && strncmp(argv[i + 1], "--", 2) ? argv[i + 1] : "";
    return value;
}

/* The first option that shapes the model (its sizes, variant, task) and
 * differs between a run's formatted options and this command's, as
 * "--dim: 32, but the run has 64"; false when none does. */
static bool model_option_changed(const char *run, const char *now, char *what, size_t n) {
    static const char *const keys[] = {"task", "dim", "hidden", "heads", "layers", "fixed-len", "bigrams",
                                       "attention", "flags", "hparams"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++) {
        char at[40];
        snprintf(at, sizeof at, "\n%s=", keys[k]);
        const char *a = strstr(run, at), *b = strstr(now, at);
        int la = a ? (int)strcspn(a + strlen(at), "\n") : 0, lb = b ? (int)strcspn(b + strlen(at), "\n") : 0;
        if (la == lb && (!la || !strncmp(a + strlen(at), b + strlen(at), (size_t)la))) continue;
        snprintf(what, n, "--%s: '%.*s', but the run has '%.*s'", keys[k], lb, b ? b + strlen(at) : "", la,
                 a ? a + strlen(at) : "");
        return true;
    }
    return false;
}

static int cmd_train(const command *c, int argc, char **argv) {
    ag_train_opts o = ag_train_opts_default();
    cli_extra x = {0};
    char err[1024], unread[128];
    const char *resume = arg_of(argc, argv, "--resume"), *out = arg_of(argc, argv, "--out");
    char run_model[sizeof o.model] = ""; /* the resumed run's own */
    /* --resume: the run's own options, then this command line over them, so
     * that a spec (--optim sgd:lr=0.01) is read as the keys it changes */
    if (resume && (!*resume || !strcmp(resume, "1"))) {
        if (!out || !*out) {
            fprintf(stderr, "attngrad train: --resume needs --out (the run folder)\n");
            return EXIT_USAGE;
        }
        if (ag_run_config(out, &o, err, sizeof err)) {
            fprintf(stderr, "attngrad train: %s%s\n", ag__dist_who(), err);
            return 1;
        }
        snprintf(run_model, sizeof run_model, "%s", o.model);
    }
    /* ag_run_config took the device the run trained on: a resume goes on
     * where it ran, unless --device says otherwise */
    bool run_device = run_model[0] && o.device[0] && !arg_of(argc, argv, "--device");
    static char run_opts[AG_CONFIG_MAX + 1], now_opts[AG_CONFIG_MAX + 1]; /* "\n" + the options, off the stack */
    if (run_model[0]) run_opts[0] = '\n', ag_train_opts_format(&o, run_opts + 1, sizeof run_opts - 1);
    int rc = parse_args(c, argc, argv, &o, &x);
    if (rc) return rc;
    /* Another model cannot go on from a run's weights; said as such, not as
     * the new model's check of sizes it never chose (mtsa: "heads = 1"). */
    if (o.resume && run_model[0] && strcmp(o.model, run_model)) {
        fprintf(stderr, "attngrad train: option --model: '%s', but the run in %s is %s: --resume goes on with its own "
                "model (a new run in another folder trains another)\n", o.model, out, run_model);
        return EXIT_USAGE;
    }
    /* ... nor another size or variant of it: the checkpoint's tensors would
     * not fit ("missing: 'pos.lstm...'"), or the sizes' own check fails */
    char changed[256];
    if (o.resume && run_model[0]) {
        now_opts[0] = '\n', ag_train_opts_format(&o, now_opts + 1, sizeof now_opts - 1);
        if (model_option_changed(run_opts, now_opts, changed, sizeof changed)) {
            fprintf(stderr, "attngrad train: option %s in %s: --resume goes on with the run's own model (a new run in "
                    "another folder trains another)\n", changed, out);
            return EXIT_USAGE;
        }
    }
    /* ... and where that device is not here, the run is not moved to the
     * CPU unasked: its steps would no longer be the GPU's to the bit */
    char why[256];
    if (o.resume && run_device && !ag_cuda_available(why, sizeof why)) {
        fprintf(stderr, "attngrad train: --resume: the run in %s trained on %s, where it goes on, but %s: give "
                "--device cpu to continue it on the CPU (its steps then match the GPU's within rounding, not bit for "
                "bit)\n", out, o.device, why);
        return 1;
    }
    if (!o.resume && ag_train_unread_options(&o, unread, sizeof unread)) /* a resumed config records every size */
        fprintf(stderr, "attngrad train: note: model %s does not read %s: ignored\n", o.model, unread);
    /* --folds cuts a cross-validation set (MR, SUBJ, CR, MPQA); with a file
     * of one's own or another set it would do nothing unsaid (--fold is
     * refused there: it names one fold to run) */
    if (!o.resume && arg_of(argc, argv, "--folds") && o.fold < 0 && ag_run_data_folds(&o, err, sizeof err) == 0)
        fprintf(stderr, "attngrad train: note: %s is not a cross-validation set (mr, subj, cr, mpqa): --folds "
                "ignored\n", o.data[0] ? o.data : "the generated task");
    /* the generated task's matrices are small: one BLAS thread is faster than two that wait on each other */
    set_engine(o.threads > 0 ? o.threads : o.data[0] ? 0 : 1, &o);
    /* SIGTERM, Ctrl-C or SIGUSR1: finish the step, save it, say how to go
     * on (a second one ends the process at once).  Under mpirun the ranks
     * agree, so a signal to any of them stops all after the same step;
     * SIGUSR1 is the one Open MPI's mpirun forwards to every rank (its
     * SIGTERM and SIGINT end the job at once), and a scheduler's choice
     * for a warning before preemption. */
    struct sigaction sa = {.sa_handler = ag_train_request_stop, .sa_flags = SA_RESETHAND};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGUSR1, &sa, NULL);
    ag_train_result r;
    if (ag_train(&o, &r, err, sizeof err)) {
        fprintf(stderr, "attngrad train: %s%s\n", ag__dist_who(), err);
        ag__dist_abort(1); /* under mpirun the other ranks wait for this one: end them */
        return 1;
    }
    if (ag__dist_rank() == 0) print_summary(&o, &r);
    int signo = ag_train_stop_requested(); /* under mpirun the ranks': every rank ends alike */
    if (signo > 0) {
        char ranks[48] = "";
        if (ag__dist_size() > 1) snprintf(ranks, sizeof ranks, " on all %d ranks", ag__dist_size());
        const char *sig = signo == SIGTERM ? "SIGTERM" : signo == SIGINT ? "SIGINT" : signo == SIGUSR1 ? "SIGUSR1"
                                                                                                    : "a signal";
        char last[PATH_MAX];
        snprintf(last, sizeof last, "%s/last.safetensors", r.out);
        if (ag__dist_rank() == 0 && access(last, F_OK) != 0) /* stopped before a first step of a fresh run */
            fprintf(stderr, "attngrad train: stopped by %s before its first step%s: nothing to resume, %s holds no "
                    "checkpoint; run it again\n", sig, ranks, r.out);
        else if (ag__dist_rank() == 0)
            fprintf(stderr, "attngrad train: stopped by %s after step %lld%s, which the last checkpoint holds: continue "
                    "with --resume --out %s\n", sig, (long long)r.steps, ranks, r.out);
        return 128 + signo;
    }
    /* Diverged with every value finite (Adam at lr 1e6: a training loss of
     * 8e26, dev at chance): nothing above stopped it, so say it here.  A
     * loss that ends ten times above where it started was made worse by
     * every epoch; no schedule or regulariser does that to a working run. */
    if (isfinite(r.initial_loss) && r.last_loss > 10 * r.initial_loss && r.last_loss > r.initial_loss + 1) {
        if (ag__dist_rank() == 0)
            fprintf(stderr, "attngrad train: the run diverged: its training loss ended at %.4g, %.3g times its first "
                    "step's (%.4f); lower the learning rate (--optim %s) or clip the gradient norm (--clip).  Its "
                    "best dev checkpoint is kept, from before it went wrong or not\n", r.last_loss,
                    r.last_loss / r.initial_loss, r.initial_loss, o.optim);
        return 1;
    }
    return 0;
}

/* ---- eval and predict ---- */

/* A finished run as eval, predict, generate and heatmap use it: the model
 * and vocabulary of the checkpoint --ckpt names, and the run's options with
 * the command line's on top. */
typedef struct {
    ag_train_opts o;
    ag_model m;
    ag_vocab *vocab; /* NULL once handed on (eval's data owns it) */
    const char *ckpt;
    bool new_data;   /* --data, --dataset or --format given: not the run's own data */
} loaded_run;

static void loaded_run_free(loaded_run *r) {
    ag_vocab_free(r->vocab);
    ag_model_free(&r->m);
}

static int load_checkpoint(const command *c, int argc, char **argv, loaded_run *r) {
    ag_train_opts first = ag_train_opts_default(), *o = &r->o;
    ag_model *m = &r->m;
    cli_extra x = {0};
    int rc = parse_args(c, argc, argv, &first, &x);
    if (rc) return rc;
    if (!x.ckpt) {
        fprintf(stderr, "attngrad %s: --ckpt FILE is required\n", c->name);
        return EXIT_USAGE;
    }
    r->ckpt = x.ckpt;
    char err[1024];
    if (ag_load_run(x.ckpt, NULL, o, m, &r->vocab, err, sizeof err)) {
        fprintf(stderr, "attngrad %s: %s\n", c->name, err);
        return 1;
    }
    const char *data_keys[] = {"--data", "--dataset", "--format"};
    bool run_sentences = !strcmp(o->task, "lm") && ag__train_lm_sentences(o), new_data = false;
    for (int i = 2; i < argc; i++) /* new data: the old data's name and format no longer apply */
        for (int k = 0; k < 3; k++)
            if (!strncmp(argv[i], data_keys[k], strlen(data_keys[k]))) o->dataset[0] = o->format[0] = 0, new_data = true;
    set_engine(first.threads, &first);
    char run_data[AG_PATH_MAX]; /* the run's own: named again, it is no file of the user's */
    snprintf(run_data, sizeof run_data, "%s", o->data);
    rc = parse_args(c, argc, argv, o, &x);
    char a[PATH_MAX], b[PATH_MAX];
    r->new_data = new_data && !(realpath(run_data, a) && realpath(o->data, b) && !strcmp(a, b));
    /* a --dataset of the command line's with a file of the user's would be ignored */
    if (!rc && new_data && ag__train_check_dataset(o, err, sizeof err)) {
        fprintf(stderr, "attngrad %s: %s\n", c->name, err);
        rc = EXIT_USAGE;
    }
    /* an LM run reads a file of the user's as LM text unless told otherwise
     * (read as labelled data it failed on its first word: "label 'no'") */
    if (!rc && new_data && !strcmp(o->task, "lm") && !o->format[0]) snprintf(o->format, sizeof o->format, "lm");
    /* LM text of the user's, which has no way of its own: cut as the run's
     * text was (a data set such as wikitext2 keeps its own; --lm-split rules) */
    if (!rc && new_data && run_sentences && !o->lm_split[0] && !ag__train_benchmark(o))
        snprintf(o->lm_split, sizeof o->lm_split, "sentence");
    /* the device is not part of the run's options: ag_load_run took the
     * CPU, and the command line's --device moves the model */
    if (!rc && ag_train_use_device(o, &m->params, err, sizeof err)) {
        fprintf(stderr, "attngrad %s: %s\n", c->name, err);
        rc = 1;
    }
    if (rc) loaded_run_free(r);
    return rc;
}

static int cmd_eval(const command *c, int argc, char **argv) {
    loaded_run r;
    int rc = load_checkpoint(c, argc, argv, &r);
    if (rc) return rc;
    ag_train_opts *o = &r.o;
    char err[2 * AG_PATH_MAX + 128]; /* room for the data's and the checkpoint's paths */
    o->phrases = 0; /* SST's phrases are training data: eval scores dev and test, whole sentences */
    ag_run_data d;
    ag_batch b = {0};
    int fold = o->fold >= 0 ? o->fold : 0;
    rc = ag_run_data_open(o, fold, r.vocab, &d, err, sizeof err);
    r.vocab = NULL; /* d owns it now */
    if (!rc && d.task != AG_TASK_LM && d.classes > r.m.cfg.classes) {
        snprintf(err, sizeof err, "data %s has %d classes, but the model in %s knows %d", o->data[0] ? o->data : d.name,
                 d.classes, r.ckpt, r.m.cfg.classes);
        rc = 1;
    }
    ag_batch_opts bo = ag_run_batch_opts(&r.m, o, d.max_width); /* cut as the run was trained */
    if (!rc) rc = ag_batch_alloc(&b, d.ds[AG_SPLIT_DEV], o->batch, &bo, err, sizeof err);
    const char *names[] = {"train", "dev", "test"};
    if (!rc) printf("%s%s%s on %s\n", o->model, o->flags[0] ? "/" : "", o->flags, d.name);
    /* A file of the user's is scored whole: the dev share a run would split
     * off it is the run's business, not this command's.  The run's own
     * file, named again, keeps the run's dev split. */
    struct stat st;
    bool whole = !rc && r.new_data && stat(o->data, &st) == 0 && S_ISREG(st.st_mode) && !d.ds[AG_SPLIT_TEST];
    int64_t *all = NULL;
    if (whole) {
        int64_t n = d.ds[AG_SPLIT_TRAIN]->n;
        all = malloc(((size_t)n + 1) * sizeof *all);
        if (!all) rc = 1, snprintf(err, sizeof err, "out of memory for %lld examples", (long long)n);
        for (int64_t i = 0; all && i < n; i++) all[i] = i;
    }
    for (int s = AG_SPLIT_DEV; s <= AG_SPLIT_TEST && !rc; s++) {
        if (!d.ds[s] && !(whole && s == AG_SPLIT_TEST)) continue;
        if (whole && s == AG_SPLIT_DEV) continue; /* the whole file below, once */
        const ag_dataset *ds = whole ? d.ds[AG_SPLIT_TRAIN] : d.ds[s];
        ag_metrics x;
        if ((rc = ag_evaluate(&r.m, ds, whole ? all : d.idx[s], whole ? ds->n : d.n[s], &b, &x, err, sizeof err))) break;
        if (whole) names[s] = "file";
        if (d.task == AG_TASK_LM)
            printf("%-5s perplexity %.3f  loss %.4f  (%lld tokens)\n", names[s], x.perplexity, x.loss, (long long)x.tokens);
        else if (d.task == AG_TASK_RELATEDNESS)
            printf("%-5s pearson %.4f  spearman %.4f  mse %.4f  loss %.4f  (%lld examples)\n", names[s], x.pearson,
                   x.spearman, x.mse, x.loss, (long long)x.examples);
        else
            printf("%-5s accuracy %.2f%%  loss %.4f  (%lld examples)\n", names[s], 100 * x.accuracy, x.loss,
                   (long long)x.examples);
    }
    if (rc) fprintf(stderr, "attngrad eval: %s\n", err);
    free(all);
    ag_batch_free(&b);
    ag_run_data_free(&d);
    loaded_run_free(&r);
    return rc ? 1 : 0;
}

/* Text is bytes (docs/data.md): a line that is not UTF-8 is read as the
 * data was, and said once, since its words miss UTF-8 pretrained vectors. */
static void note_not_utf8(const char *cmd, const char *line, size_t n, int64_t lineno, bool *said) {
    long at = *said || ag_data_find_junk(line, n) >= 0 ? -1 : ag_utf8_error_at(line, n);
    if (at < 0) return;
    fprintf(stderr, "attngrad %s: stdin:%lld: note: not UTF-8 (byte 0x%02x at column %ld), read as bytes; later "
            "lines like it are not reported\n", cmd, (long long)lineno, (unsigned char)line[at], at + 1);
    *said = true;
}

/* A UTF-8 byte order mark before stdin's first line is dropped, as the data
 * loaders drop it (data/text.c): editors on Windows write one, and kept, it
 * would silently make the first word another one (<unk>, or a CoNLL-U ID
 * that is no number). */
static void drop_bom(char *line, ssize_t *n, int64_t lineno) {
    if (lineno != 1 || *n < 3 || memcmp(line, "\xEF\xBB\xBF", 3)) return;
    memmove(line, line + 3, (size_t)*n - 2); /* with the NUL */
    *n -= 3;
}

/* predict --input conllu: one line of output for each CoNLL-U sentence of
 * stdin (blank-line separated), the parse given to the model. */
static int predict_conllu(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o) {
    char *line = NULL, *text = NULL, err[1024];
    size_t cap = 0, len = 0, text_cap = 0, words = 0; /* words: token lines of the sentence */
    bool said_utf8 = false;
    size_t max_words = ag_line_word_limit(o) > 0 ? (size_t)ag_line_word_limit(o) : SIZE_MAX;
    int64_t lineno = 0, first = 0, errors = 0;
    ssize_t n;
    bool more = true;
    size_t max = (size_t)(o->max_line_bytes > 0 ? o->max_line_bytes : AG_MAX_LINE_BYTES), dropped;
    while (more) {
        more = (n = ag_read_line(stdin, &line, &cap, max, &dropped)) >= 0;
        if (more) drop_bom(line, &n, ++lineno);
        if (more && dropped) { /* a CoNLL-U line is one token: its sentence is no parse */
            fprintf(stderr, "attngrad predict: stdin:%lld: line longer than %zu bytes: not CoNLL-U (--max-line-bytes)\n",
                    (long long)lineno, max);
            errors++;
            if (!first) first = lineno;
            len = SIZE_MAX; /* the sentence is refused: read on to its blank line */
            continue;
        }
        bool blank = !more || ag_tokenize(line, (size_t)n, 0, NULL, 0) == 0;
        if (!blank) { /* one more line of the sentence (the loader refuses control bytes, naming the line) */
            if (!first) first = lineno;
            if (len == SIZE_MAX) continue; /* refused already */
            words += line[0] != '#';
            note_not_utf8("predict", line, (size_t)n, lineno, &said_utf8);
            if (words > max_words) { /* no cut: its parse would lose heads */
                fprintf(stderr, "attngrad predict: stdin:%lld: a CoNLL-U sentence of more than %zu words: refused "
                        "(--max-line-words N takes longer ones)\n", (long long)first, max_words);
                errors++;
                len = SIZE_MAX;
                continue;
            }
            if (len + (size_t)n > 16 * max) { /* more than 16 lines of the limit: refused, not held */
                fprintf(stderr, "attngrad predict: stdin:%lld: a CoNLL-U sentence of more than %zu bytes: refused "
                        "(--max-line-bytes sets a sixteenth of the limit)\n", (long long)first, 16 * max);
                errors++;
                len = SIZE_MAX;
                continue;
            }
            if (len + (size_t)n + 1 > text_cap) {
                text_cap = 2 * (len + (size_t)n + 1);
                char *grown = realloc(text, text_cap);
                if (!grown) {
                    fprintf(stderr, "attngrad predict: stdin:%lld: out of memory\n", (long long)lineno);
                    errors++;
                    break;
                }
                text = grown;
            }
            memcpy(text + len, line, (size_t)n);
            len += (size_t)n;
            continue;
        }
        if (!first) continue; /* blank lines between sentences */
        if (len == SIZE_MAX) { /* refused above: its output line stays empty */
            fputc('\n', stdout);
        } else if (ag_predict_conllu(m, vocab, o, "stdin", first, text, len, stdout, err, sizeof err)) {
            fprintf(stderr, "attngrad predict: %s\n", err);
            fputc('\n', stdout);
            errors++;
        }
        fflush(stdout);
        first = 0;
        len = words = 0;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "attngrad predict: stdin: read error after line %lld: %s\n", (long long)lineno, strerror(errno));
        errors++;
    }
    free(line);
    free(text);
    return errors ? 1 : 0;
}

/* What predict and generate do with one line of stdin: print its output
 * line and return 0, or return an error with err saying why. */
typedef int (*line_action)(void *ctx, char *line, char *err, size_t errlen);

/* Reads stdin a line at a time under the run's limits (--max-line-bytes,
 * --long-lines, --max-line-words; binary data refused) and hands each line
 * to act; a line that fails is named on stderr and the next one goes on,
 * its output line blank (unless act prints one on error too).  1 when any
 * line failed or stdin could not be read. */
static int each_stdin_line(const command *c, const ag_train_opts *o, line_action act, void *ctx, bool prints_on_error) {
    char *line = NULL, err[1024];
    size_t cap = 0;
    int64_t lineno = 0, errors = 0;
    ssize_t n;
    size_t max = (size_t)(o->max_line_bytes > 0 ? o->max_line_bytes : AG_MAX_LINE_BYTES), dropped;
    bool said_utf8 = false;
    size_t words;
    while ((n = ag_read_line(stdin, &line, &cap, max, &dropped)) >= 0) {
        drop_bom(line, &n, ++lineno);
        if (dropped && ag_long_line(o, line, &n, dropped, err, sizeof err)) {
            fprintf(stderr, "attngrad %s: stdin:%lld: %s\n", c->name, (long long)lineno, err);
            fputc('\n', stdout);
            errors++;
            continue;
        }
        if (dropped)
            fprintf(stderr, "attngrad %s: stdin:%lld: note: a line of more than %zu bytes, cut to its first %zd "
                    "(--long-lines cut)\n", c->name, (long long)lineno, max, n);
        /* control bytes, as the data loaders refuse them (the model reads a
         * C string: a NUL would even end the line there unseen) */
        long junk = ag_data_find_junk(line, (size_t)n);
        note_not_utf8(c->name, line, (size_t)n, lineno, &said_utf8);
        bool refused = junk >= 0;
        if (refused)
            snprintf(err, sizeof err, "binary data (byte 0x%02x at column %ld)", (unsigned char)line[junk], junk + 1);
        else if (!(refused = ag_many_words(o, line, &n, &words, err, sizeof err)) && ag_line_word_limit(o) > 0 &&
                 words > (size_t)ag_line_word_limit(o))
            fprintf(stderr, "attngrad %s: stdin:%lld: note: a line of %zu words, cut to its first %lld (--long-lines "
                    "cut)\n", c->name, (long long)lineno, words, (long long)ag_line_word_limit(o));
        bool failed = !refused && act(ctx, line, err, sizeof err);
        if (refused || failed) {
            fprintf(stderr, "attngrad %s: stdin:%lld: %s\n", c->name, (long long)lineno, err);
            if (refused || !prints_on_error) fputc('\n', stdout);
            errors++;
        }
        fflush(stdout);
    }
    if (ferror(stdin)) { /* not the end of the input: the lines after it were never read */
        fprintf(stderr, "attngrad %s: stdin: read error after line %lld: %s\n", c->name, (long long)lineno,
                strerror(errno));
        errors++;
    }
    free(line);
    return errors ? 1 : 0;
}

typedef struct {
    ag_model *m;
    const ag_vocab *vocab;
    const ag_train_opts *o;
    ag_rng rng; /* generate's draws */
} line_job;

static int predict_one(void *ctx, char *line, char *err, size_t errlen) {
    line_job *j = ctx;
    return ag_predict_line(j->m, j->vocab, j->o, line, stdout, err, errlen);
}

static int generate_one(void *ctx, char *line, char *err, size_t errlen) {
    line_job *j = ctx;
    return ag_generate_line(j->m, j->vocab, j->o, line, &j->rng, stdout, err, errlen);
}

static int cmd_predict(const command *c, int argc, char **argv) {
    loaded_run r;
    int rc = load_checkpoint(c, argc, argv, &r);
    if (rc) return rc;
    if (!strcmp(r.o.input, "conllu")) {
        rc = predict_conllu(&r.m, r.vocab, &r.o);
    } else {
        line_job job = {&r.m, r.vocab, &r.o, {{0}}};
        rc = each_stdin_line(c, &r.o, predict_one, &job, false);
    }
    loaded_run_free(&r);
    return rc;
}

/* generate: one line of drawn words for each prompt line; the draws are
 * the seed's (--seed, else the run's), in the order of the lines. */
static int cmd_generate(const command *c, int argc, char **argv) {
    loaded_run r;
    int rc = load_checkpoint(c, argc, argv, &r);
    if (rc) return rc;
    if (r.m.cfg.task != AG_TASK_LM) {
        fprintf(stderr, "attngrad generate: %s holds model %s, which does %s: generate continues text with a language "
                "model\n", r.ckpt, r.m.kind->name, ag_task_name(r.m.cfg.task));
        rc = 1;
    } else {
        line_job job = {&r.m, r.vocab, &r.o, {{0}}};
        ag_rng_seed(&job.rng, (uint64_t)r.o.seed);
        rc = each_stdin_line(c, &r.o, generate_one, &job, true);
    }
    loaded_run_free(&r);
    return rc;
}

static int cmd_heatmap(const command *c, int argc, char **argv) {
    cli_extra x = {0};
    ag_train_opts o = ag_train_opts_default();
    int rc = parse_args(c, argc, argv, &o, &x); /* the required options before loading anything */
    if (rc) return rc;
    const char *missing = !x.sentence ? "--sentence TEXT" : !x.out ? "--out DIR_OR_PREFIX" : NULL;
    if (missing || !x.ckpt) {
        fprintf(stderr, "attngrad heatmap: %s is required\n", missing ? missing : "--ckpt FILE");
        return EXIT_USAGE;
    }
    const char *sentences[2][2] = {{"--sentence", x.sentence}, {"--sentence-b", x.sentence_b}};
    for (int i = 0; i < 2; i++) { /* as predict refuses such lines: the maps would label words nobody can read */
        long junk = sentences[i][1] ? ag_data_find_junk(sentences[i][1], strlen(sentences[i][1])) : -1;
        if (junk >= 0) {
            fprintf(stderr, "attngrad heatmap: %s: binary data (byte 0x%02x at column %ld)\n", sentences[i][0],
                    (unsigned char)sentences[i][1][junk], junk + 1);
            return EXIT_USAGE;
        }
    }
    loaded_run r;
    if ((rc = load_checkpoint(c, argc, argv, &r))) return rc;
    char err[1024];
    size_t max_words = ag_line_word_limit(&r.o) > 0 ? (size_t)ag_line_word_limit(&r.o) : SIZE_MAX, words = 0;
    for (int i = 0; i < 2 && max_words != SIZE_MAX; i++) /* as predict's lines: maps in the square of the words */
        words += sentences[i][1] ? ag_tokenize((char *)sentences[i][1], strlen(sentences[i][1]), 0, NULL, 0) : 0;
    if (words > max_words) {
        fprintf(stderr, "attngrad heatmap: --sentence: %zu words, more than --max-line-words %zu (a pair's two "
                "sentences count together)\n", words, max_words);
        loaded_run_free(&r);
        return EXIT_USAGE;
    }
    rc = ag_sentence_heatmaps(&r.m, r.vocab, &r.o, x.sentence, x.sentence_b, x.out, stdout, err, sizeof err);
    if (rc) fprintf(stderr, "attngrad heatmap: %s\n", err);
    loaded_run_free(&r);
    return rc ? 1 : 0;
}

/* ---- gradcheck, dump-step, models ---- */

/* gradcheck needs doubles: the float program hands over to attngrad-f64,
 * built next to it, with the whole command line (its --plugin options
 * included: that program loads each plugin's -f64.so build). */
static char **full_argv;

static int exec_f64(void) {
    char **argv = full_argv;
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 16);
    char *slash = n > 0 ? (self[n] = 0, strrchr(self, '/')) : NULL;
    if (!slash) {
        fprintf(stderr, "attngrad gradcheck: cannot find my own folder: run attngrad-f64 gradcheck\n");
        return 1;
    }
    strcpy(slash + 1, "attngrad-f64");
    argv[0] = self;
    execv(self, argv);
    fprintf(stderr, "attngrad gradcheck: cannot run %s (%s): it is built next to attngrad\n", self, strerror(errno));
    return 1;
}

static int cmd_gradcheck(const command *c, int argc, char **argv) {
    if (sizeof(ag_real) != sizeof(double)) return exec_f64();
    ag_train_opts o = ag_train_opts_default();
    cli_extra x = {0};
    int rc = parse_args(c, argc, argv, &o, &x);
    if (rc) return rc;
    set_engine(o.threads, &o); /* the result does not depend on it: a check at any thread count */
    char err[1024];
    rc = ag_model_gradcheck(&o, stdout, err, sizeof err);
    if (rc < 0) fprintf(stderr, "attngrad gradcheck: %s\n", err);
    return rc == 1 ? 0 : 1;
}

static int cmd_dump(const command *c, int argc, char **argv) {
    ag_train_opts o = ag_train_opts_default();
    cli_extra x = {0};
    int rc = parse_args(c, argc, argv, &o, &x);
    if (rc) return rc;
    if (!o.out[0]) {
        fprintf(stderr, "attngrad dump-step: --out FILE is required\n");
        return EXIT_USAGE;
    }
    set_engine(o.threads, &o);
    char err[1024];
    if (ag_dump_step(&o, o.out, err, sizeof err)) {
        fprintf(stderr, "attngrad dump-step: %s\n", err);
        return 1;
    }
    printf("wrote %s\n", o.out);
    return 0;
}

static int cmd_models(void) {
    printf("%-12s %-11s %5s %6s %5s %5s %5s %8s  %s\n", "model", "task", "d", "hidden", "heads", "batch", "keep", "l2",
           "optimizer");
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        ag_task own = ag_model_defaults(*k).task;
        for (int i = -1; i < AG_TASK_COUNT; i++) { /* its own task first, then the others it has a head for */
            ag_task t = i < 0 ? own : (ag_task)i;
            if ((i >= 0 && t == own) || !ag_model_supports(*k, t)) continue;
            ag_model_config c = ag_model_task_defaults(*k, t);
            printf("%-12s %-11s %5d %6d %5d %5d %5g %8g  %s\n", (*k)->name, ag_task_name(t), c.dim, c.hidden, c.heads,
                   c.batch, c.keep, c.l2, c.optim);
        }
    }
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) { /* a kind's own switches and settings */
        const char *flags = (*k)->flag_names, *hparams = (*k)->abi / 100 >= 3 ? (*k)->hparams : NULL;
        if (flags || hparams)
            printf("(%s: %s%s%s%s%s)\n", (*k)->name, flags ? "--flags " : "", flags ? flags : "",
                   flags && hparams ? "; " : "", hparams ? "--hparams " : "", hparams ? hparams : "");
    }
    for (int k = 0; strcmp(ag_optim_name((ag_optim_kind)k), "?"); k++) { /* the built-in optimizers, every key */
        char spec[AG_CONFIG_MAX];
        ag_optim_config c = ag_optim_defaults((ag_optim_kind)k);
        printf("(optimizer %s: --optim %s)\n", ag_optim_name((ag_optim_kind)k), ag_optim_format(&c, spec, sizeof spec));
    }
    printf("(any optimizer also takes lazy=1, ema=D, swa=S, lookahead=K, lookahead_alpha=A: docs/optim.md)\n");
    for (ag_optim_kind k = AG_OPTIM_RULE_FIRST; ag_optim_rule_of(k); k++) { /* a plugin's optimizer rules */
        char spec[AG_CONFIG_MAX];
        ag_optim_config c = ag_optim_defaults(k);
        printf("(optimizer rule %s: --optim %s)\n", ag_optim_name(k), ag_optim_format(&c, spec, sizeof spec));
    }
    /* said of tasks, not of named models: a plugin's kinds are listed here too */
    printf("(a model's first row is its default task; on SICK pairs a model takes its first pair head: the\n"
           " pair classes before relatedness scores)\n");
    printf("(without --data, train uses a generated task: d and hidden at most 64, bigram buckets at most 1024,\n"
           " and the LM trains with adam:lr=3e-3, no clipping and a constant rate, as SGD at lr 30 is tuned to PTB)\n");
    return 0;
}

/* The --plugin FILE options before the command, loaded in order; *used
 * gets how many arguments they took.  EXIT_USAGE or 1 on failure. */
static int load_plugins(int argc, char **argv, bool load, int *used) {
    int i = 1;
    for (; i < argc && !strncmp(argv[i], "--plugin", 8) && (!argv[i][8] || argv[i][8] == '='); i++) {
        const char *path = argv[i][8] == '=' ? argv[i] + 9 : i + 1 < argc ? argv[++i] : NULL;
        if (!path || !*path) {
            fprintf(stderr, "attngrad: --plugin needs a file (a shared object that registers model kinds or "
                    "optimizer rules)\n");
            return EXIT_USAGE;
        }
        if (load && ag_model_load_plugin(path)) {
            fprintf(stderr, "attngrad: %s\n", ag_errmsg());
            return 1;
        }
    }
    *used = i - 1;
    return 0;
}

int main(int argc, char **argv) {
    full_argv = calloc((size_t)argc + 1, sizeof *full_argv); /* before argv is shifted over the plugins */
    if (!full_argv) return 1;
    memcpy(full_argv, argv, (size_t)argc * sizeof *argv);
    ag_set_fatal_handler(fatal_exit);
    int used = 0;
    /* the float program's gradcheck loads nothing: attngrad-f64 loads the plugins' double builds */
    bool float_gradcheck = sizeof(ag_real) != sizeof(double);
    int rc = load_plugins(argc, argv, false, &used);
    if (rc) return rc;
    float_gradcheck = float_gradcheck && used + 1 < argc && !strcmp(argv[used + 1], "gradcheck");
    if (used && (rc = load_plugins(argc, argv, !float_gradcheck, &used))) return rc;
    argv[used] = argv[0]; /* the command and its options as if no --plugin came before */
    argv += used, argc -= used;
    if (argc < 2 || !strcmp(argv[1], "help") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? EXIT_USAGE : 0;
    }
    const command *c = NULL;
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(argv[1], commands[i].name)) c = &commands[i];
    bool refused = false; /* a command mpirun cannot run: every rank says no alike */
    char err[256];
    if (ag__dist_init(err, sizeof err)) { /* under mpirun: MPI */
        fprintf(stderr, "attngrad: %s\n", err);
        return 1;
    }
    if (ag__dist_size() > 1 && (!c || strcmp(c->name, "train"))) {
        if (ag__dist_rank() == 0) fprintf(stderr, "attngrad %s: only train runs across processes: run it without mpirun\n", argv[1]);
        rc = EXIT_USAGE, refused = true;
    } else if (!c) {
        fprintf(stderr, "attngrad: unknown command '%s'\n\n", argv[1]);
        usage(stderr);
        rc = EXIT_USAGE;
    } else if (!strcmp(c->name, "train")) {
        rc = cmd_train(c, argc, argv);
    } else if (!strcmp(c->name, "eval")) {
        rc = cmd_eval(c, argc, argv);
    } else if (!strcmp(c->name, "predict")) {
        rc = cmd_predict(c, argc, argv);
    } else if (!strcmp(c->name, "generate")) {
        rc = cmd_generate(c, argc, argv);
    } else if (!strcmp(c->name, "heatmap")) {
        rc = cmd_heatmap(c, argc, argv);
    } else if (!strcmp(c->name, "gradcheck")) {
        rc = cmd_gradcheck(c, argc, argv);
    } else if (!strcmp(c->name, "dump-step")) {
        rc = cmd_dump(c, argc, argv);
    } else if (argc == 3 && (!strcmp(argv[2], "--help") || !strcmp(argv[2], "-h"))) {
        printf("usage: attngrad models\n  the registered models, one row per task, with their paper defaults, and the "
               "optimizer rules plugins registered, with theirs\n");
        rc = 0;
    } else if (argc > 2) { /* models takes nothing: a typo must not pass for a listing */
        fprintf(stderr, "attngrad models: takes no arguments (got '%s')\n", argv[2]);
        rc = EXIT_USAGE;
    } else {
        rc = cmd_models();
    }
    /* a rank that failed alone (say, its copy of the run folder is missing)
     * must not wait in MPI_Finalize for ranks that wait for it; a stop on a
     * signal is every rank's (they agreed), so all finalize */
    if (rc && !refused && ag_train_stop_requested() <= 0) ag__dist_abort(rc);
    ag__dist_finalize();
    ag_shutdown();
    free(full_argv);
    return rc;
}
