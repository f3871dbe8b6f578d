/* test_train.c - the trainer library (include/attngrad/train.h): options and their
 * saved config, a short run on the generated task that must learn without
 * allocating per step, resuming bit for bit (at an epoch boundary and in
 * the middle of an epoch), eval of a checkpoint, reference dumps of every
 * registered model reloaded bit-exactly, clean errors for bad input, and the
 * relatedness task: its metrics, a run, its choice on pair data, and the
 * refusal of a task a model has no head for; on a GPU (or the emulator),
 * --log-steps adding no wait for the device.
 *
 * Helper modes for tests/test_cli.sh:
 *   test_train compare A.safetensors B.safetensors   same tensors, bit for bit
 *   test_train verify-dump FILE MODEL [FLAGS [TASK]]   FILE == a fresh dump-step */
#include "check.h"
#include "attngrad/train.h"
#include "../train/internal.h"
#include "../train/run_folder.h" /* the folder's lock */

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[256];
static char err[1024];

static void set(ag_train_opts *o, const char *key, const char *value) {
    int rc = ag_train_set(o, key, value, err, sizeof err);
    CHECK(rc == 0, "--%s %s: %s", key, value ? value : "", err);
}

/* A small, fast run on the generated order task. */
static ag_train_opts small_run(const char *name) {
    ag_train_opts o = ag_train_opts_default();
    char out[512];
    snprintf(out, sizeof out, "%s/%s", tmp, name);
    set(&o, "out", out);
    set(&o, "synth-n", "240");
    set(&o, "dim", "8");
    set(&o, "batch", "32");
    set(&o, "epochs", "2");
    set(&o, "progress", "none");
    set(&o, "quiet", NULL);
    return o;
}

/* Every tensor of a (or its parameters alone: not "optim.*") is in b with
 * the same dtype, shape and bytes. */
static int same_tensors_of(const char *a, const char *b, bool verbose, bool params_only) {
    ag_st_file fa, fb;
    if (ag_st_read(a, &fa)) {
        fprintf(stderr, "%s\n", ag_errmsg());
        return 0;
    }
    if (ag_st_read(b, &fb)) {
        fprintf(stderr, "%s\n", ag_errmsg());
        ag_st_close(&fa);
        return 0;
    }
    int same = params_only || fa.count == fb.count;
    for (int i = 0; i < fa.count && same; i++) {
        const ag_st_tensor *x = &fa.tensors[i], *y = ag_st_get(&fb, x->name);
        if (params_only && !strncmp(x->name, "optim.", 6)) continue;
        size_t bytes = (size_t)x->numel * (x->dtype == AG_F64 || x->dtype == AG_I64 ? 8 : 4);
        same = y && y->dtype == x->dtype && y->numel == x->numel && y->ndim == x->ndim &&
               !memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) && !memcmp(x->data, y->data, bytes);
        if (!same && verbose) fprintf(stderr, "tensor '%s' differs between %s and %s\n", x->name, a, b);
    }
    if (fa.count != fb.count && !params_only && verbose)
        fprintf(stderr, "%d tensors in %s, %d in %s\n", fa.count, a, fb.count, b);
    ag_st_close(&fa);
    ag_st_close(&fb);
    return same;
}

static int same_tensors(const char *a, const char *b, bool verbose) { return same_tensors_of(a, b, verbose, false); }

/* ---- options ---- */

static void test_options(void) {
    ag_train_opts o = ag_train_opts_default(), back = ag_train_opts_default();
    set(&o, "model", "mpsan");
    set(&o, "optim", "adam:lr=3e-4");
    set(&o, "sched", "plateau:factor=0.5,patience=5");
    set(&o, "keep", "0.7");
    set(&o, "flags", "elu_score,linear_dist");
    set(&o, "max_steps", "12"); /* '_' and '-' alike */
    CHECK(o.max_steps == 12);
    char text[AG_CONFIG_MAX];
    CHECK(ag_train_opts_format(&o, text, sizeof text) == 0);
    CHECK(strstr(text, "keep=0.7\n") != NULL, "%s", text); /* shortest exact form */
    CHECK(ag_train_opts_parse(&back, text, "test", err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(back.optim, o.optim) && !strcmp(back.sched, o.sched) && back.keep == o.keep);
    CHECK(!strcmp(back.flags, o.flags) && back.dim == -1 && back.max_steps == 0); /* limits are not saved */

    struct {
        const char *key, *value, *want;
    } bad[] = {
        {"model", "nope", "unknown model"},      {"optim", "adam:lr=x", "lr"},
        {"optim", "sgdd", "unknown optimizer"},  {"sched", "plateau:factor=3", "factor"},
        {"dim", "0", "out of range"},            {"epochs", "2x", "not an integer"},
        {"keep", "1.5", "out of range"},         {"flags", "elu_score,bogus", "bogus"},
        {"attention", "sideways", "positional"}, {"bogus", "1", "unknown option --bogus"},
        {"resume", "yes", "takes no value"},     {"dataset", "imagenet", "unknown data set"},
        {"dim", " 5", "not an integer"},         {"keep", "0x1p-1", "not a decimal number"},
        {"keep", "1e-320", "out of range"},      {"epochs", "99999999999999999999", "out of range"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ag_train_opts t = ag_train_opts_default();
        int rc = ag_train_set(&t, bad[i].key, bad[i].value, err, sizeof err);
        CHECK(rc != 0 && strstr(err, bad[i].want), "--%s %s: '%s'", bad[i].key, bad[i].value, err);
    }
    CHECK(ag_train_opts_parse(&back, "dim=8\nnot a line\n", "ckpt", err, sizeof err) != 0 && strstr(err, "ckpt"));
    /* a bad entry's message says why, whatever the entry (an empty switch once printed an unset buffer) */
    const char *entries[][2] = {{"lowercase=\n", "0 or 1"}, {"bogus=1\n", "unknown key"}, {"dim=abc\n", "not an integer"}};
    for (int i = 0; i < 3; i++) {
        CHECK(ag_train_opts_parse(&back, entries[i][0], "ckpt", err, sizeof err) != 0 && strstr(err, "ckpt") &&
                  strstr(err, entries[i][1]), "'%s': %s", entries[i][0], err);
    }
    int takes;
    CHECK(ag_train_option_info("epochs", AG_CMD_TRAIN, &takes) && takes);
    CHECK(ag_train_option_info("resume", AG_CMD_TRAIN, &takes) && !takes);
    CHECK(!ag_train_option_info("epochs", AG_CMD_EVAL, NULL));
}

/* ---- training ---- */

/* A line too long for step memory (its attention would need 400 MB, and the
 * arena may take 64 MiB) fails alone, with the arena's message; the line
 * after it is predicted exactly as before. */
static void predict_survives_a_refused_line(ag_model *m, ag_vocab *vocab, ag_train_opts *lo) {
    char before[256] = "", after[256] = "";
    char line[] = "w1 A w2 w3 w4 w5 B", again[] = "w1 A w2 w3 w4 w5 B";
    FILE *f = fmemopen(before, sizeof before, "w");
    CHECK(ag_predict_line(m, vocab, lo, line, f, err, sizeof err) == 0, "%s", err);
    fclose(f);
    enum { WORDS = 10000 };
    char *long_line = malloc(3 * WORDS + 1);
    for (int i = 0; i < WORDS; i++) memcpy(long_line + 3 * i, "w1 ", 3);
    long_line[3 * WORDS] = 0;
    extern double ag__arena_bytes_limit; /* graph/internal.h: the memory the arena may still take */
    ag__arena_bytes_limit = 64.0 * (1 << 20);
    f = tmpfile();
    int rc = ag_predict_line(m, vocab, lo, long_line, f, err, sizeof err);
    CHECK(rc == AG_ERR_NOMEM && strstr(err, "arena: the step needs") && strncmp(err, "attngrad:", 9), "rc %d: %s", rc, err);
    CHECK(ftell(f) == 0, "nothing printed for the refused line");
    fclose(f);
    ag__arena_bytes_limit = 0;
    free(long_line);
    CHECK(ag_is_grad_enabled());
    f = fmemopen(after, sizeof after, "w");
    CHECK(ag_predict_line(m, vocab, lo, again, f, err, sizeof err) == 0, "%s", err);
    fclose(f);
    CHECK(before[0] && !strcmp(before, after), "'%s' then '%s'", before, after);
}

/* The generated task at a size where 5 epochs of `optim` learn it. */
static ag_train_opts learning_run(const char *name, const char *optim) {
    ag_train_opts o = small_run(name);
    set(&o, "synth-n", "800");
    set(&o, "dim", "24");
    set(&o, "epochs", "5");
    set(&o, "optim", optim);
    return o;
}

/* The generated task is learnable: the loss falls well below its start
 * (ln 4 for four balanced classes), and steps after warm-up allocate nothing. */

static void test_learns(void) {
    ag_train_opts o = learning_run("learn", "adam:lr=3e-3");
    ag_train_result r;
    int rc = ag_train(&o, &r, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    CHECK(!ag_flush_denormals_enabled(), "ag_train gives the caller back its subnormals setting");
    printf("  generated task: loss %.4f -> %.4f, dev acc %.1f%%, test acc %.1f%%, %lld steps, %.1f s\n", r.first_loss,
           r.last_loss, 100 * r.dev.accuracy, 100 * r.test.accuracy, (long long)r.steps, r.seconds);
    CHECK(r.last_loss < 0.6 * r.first_loss, "loss %.4f -> %.4f", r.first_loss, r.last_loss);
    CHECK(r.dev.accuracy > 0.5 && r.has_test, "dev accuracy %.3f (chance 0.25)", r.dev.accuracy);
    CHECK(r.step_allocs == 0, "%lld heap allocations in training steps", (long long)r.step_allocs);
    CHECK(r.steps == 5 * 25 && r.epochs == 5);

    /* eval of the best checkpoint gives the dev metrics the run reported */
    char ckpt[AG_PATH_MAX + 32];
    snprintf(ckpt, sizeof ckpt, "%s/best.safetensors", o.out);
    ag_train_opts lo;
    ag_model m;
    ag_vocab *vocab;
    rc = ag_load_run(ckpt, NULL, &lo, &m, &vocab, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    CHECK(lo.dim == 24 && !strcmp(lo.optim, "adam:lr=3e-3") && lo.synth_n == 800);
    ag_run_data d;
    rc = ag_run_data_open(&lo, 0, vocab, &d, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    ag_batch b;
    ag_batch_opts bo = {0};
    if (m.kind->batch_opts) m.kind->batch_opts(&m.cfg, &bo);
    bo.max_width = d.max_width;
    CHECK(ag_batch_alloc(&b, d.ds[AG_SPLIT_DEV], 32, &bo, err, sizeof err) == 0);
    ag_metrics x;
    int64_t allocs = ag_memstats().allocs;
    CHECK(ag_evaluate(&m, d.ds[AG_SPLIT_DEV], d.idx[AG_SPLIT_DEV], d.n[AG_SPLIT_DEV], &b, &x, err, sizeof err) == 0);
    CHECK(x.accuracy == r.dev.accuracy && x.loss == r.dev.loss, "eval %.6f %.6f, run %.6f %.6f", x.accuracy, x.loss,
          r.dev.accuracy, r.dev.loss);
    CHECK(ag_memstats().allocs - allocs <= 1, "evaluation allocated %lld times", (long long)(ag_memstats().allocs - allocs));
    CHECK(ag_is_grad_enabled());
    FILE *f = tmpfile();
    char line[] = "w1 A w2 w3 w4 w5 B";
    CHECK(ag_predict_line(&m, vocab, &lo, line, f, err, sizeof err) == 0, "%s", err);
    rewind(f);
    int label = -1;
    double p[4];
    CHECK(fscanf(f, "%d %lf %lf %lf %lf", &label, &p[0], &p[1], &p[2], &p[3]) == 5 && label >= 0 && label < 4);
    CHECK(fabs(p[0] + p[1] + p[2] + p[3] - 1) < 1e-3);
    fclose(f);
    predict_survives_a_refused_line(&m, vocab, &lo);
    f = tmpfile();
    char prompt[] = "w1 A";
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    CHECK(ag_generate_line(&m, vocab, &lo, prompt, &rng, f, err, sizeof err) == AG_ERR_ARG &&
              strstr(err, "generate continues text with a language model: model mpsan does classify"), "%s", err);
    rewind(f);
    CHECK(fgetc(f) == '\n' && fgetc(f) == EOF, "generate's output line for a classifier: one blank line");
    fclose(f);
    ag_batch_free(&b);
    ag_run_data_free(&d);
    ag_model_free(&m);
}

/* A run stopped (at an epoch boundary, or mid-epoch by --max-steps) and
 * resumed ends with exactly the parameters and state of an uninterrupted one. */
static void test_resume(void) {
    ag_train_opts full = small_run("full"), cut = small_run("cut"), cut2 = small_run("cut2");
    set(&full, "epochs", "3");
    ag_train_result r;
    CHECK(ag_train(&full, &r, err, sizeof err) == 0, "%s", err);

    set(&cut, "epochs", "1");
    CHECK(ag_train(&cut, &r, err, sizeof err) == 0, "%s", err);
    ag_train_opts again;
    CHECK(ag_run_config(cut.out, &again, err, sizeof err) == 0, "%s", err);
    set(&again, "out", cut.out);
    set(&again, "resume", NULL);
    set(&again, "epochs", "3");
    set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &r, err, sizeof err) == 0, "%s", err);

    set(&cut2, "epochs", "3");
    set(&cut2, "max-steps", "11"); /* 8 batches an epoch: stops in epoch 2 */
    CHECK(ag_train(&cut2, &r, err, sizeof err) == 0 && r.time_up && r.steps == 11, "%s", err);
    CHECK(ag_run_config(cut2.out, &again, err, sizeof err) == 0, "%s", err);
    set(&again, "out", cut2.out);
    set(&again, "resume", NULL);
    set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &r, err, sizeof err) == 0 && !r.time_up && r.steps == 24, "%s", err);

    char a[AG_PATH_MAX + 32], b[AG_PATH_MAX + 32], c[AG_PATH_MAX + 32];
    snprintf(a, sizeof a, "%s/last.safetensors", full.out);
    snprintf(b, sizeof b, "%s/last.safetensors", cut.out);
    snprintf(c, sizeof c, "%s/last.safetensors", cut2.out);
    CHECK(same_tensors(a, b, true), "resumed at an epoch boundary");
    CHECK(same_tensors(a, c, true), "resumed mid-epoch");
    snprintf(a, sizeof a, "%s/best.safetensors", full.out);
    snprintf(b, sizeof b, "%s/best.safetensors", cut.out);
    CHECK(same_tensors(a, b, true), "best checkpoint after resuming");

    /* a fresh run does not overwrite a run folder without --force */
    CHECK(ag_train(&full, &r, err, sizeof err) != 0 && strstr(err, "--force"), "%s", err);
}

/* --lr-steps scales each update's rate by its factor at the optimizer's
 * step, on top of --sched's rate, which checkpoints keep. */
static void test_lr_steps(void) {
    /* linear:total=2 gives factors 0.5 and 0: two steps at lr 0.1 are one
     * step at 0.05 (plain SGD: the second update adds 0 x g) */
    ag_train_opts a = small_run("lrs-a"), b = small_run("lrs-b");
    set(&a, "optim", "sgd:lr=0.1");
    set(&a, "lr-steps", "linear:total=2");
    set(&a, "max-steps", "2");
    set(&b, "optim", "sgd:lr=0.05");
    set(&b, "max-steps", "1");
    ag_train_result r;
    CHECK(ag_train(&a, &r, err, sizeof err) == 0 && r.steps == 2, "%s", err);
    CHECK(ag_train(&b, &r, err, sizeof err) == 0 && r.steps == 1, "%s", err);
    char pa[AG_PATH_MAX + 32], pb[AG_PATH_MAX + 32];
    snprintf(pa, sizeof pa, "%s/last.safetensors", a.out);
    snprintf(pb, sizeof pb, "%s/last.safetensors", b.out);
    CHECK(same_tensors_of(pa, pb, true, true), "factors 0.5 and 0 at lr 0.1: one step at 0.05");
    ag_st_file f;
    CHECK(ag_st_read(pa, &f) == AG_OK, "%s", ag_errmsg());
    const char *lr = ag_st_meta(&f, "optim.lr");
    CHECK(lr && atof(lr) == 0.1, "the checkpoint keeps --sched's rate, not a step's: %s", lr ? lr : "(none)");
    ag_st_close(&f);

    /* warm-up and cosine decay across a stop mid-epoch and a resume, with
     * Adam (whose bias correction counts the same steps) and a plateau
     * schedule below it: the same bits as a run that never stopped */
    ag_train_opts full = small_run("lrs-full"), cut = small_run("lrs-cut");
    for (ag_train_opts *o = &full; o; o = o == &full ? &cut : NULL) {
        set(o, "optim", "adam:lr=3e-3");
        set(o, "sched", "plateau:factor=0.5,patience=0");
        set(o, "lr-steps", "cosine:warmup=5,total=20,min_ratio=0.1");
        set(o, "epochs", "3");
    }
    set(&cut, "max-steps", "11");
    CHECK(ag_train(&full, &r, err, sizeof err) == 0 && r.steps == 24, "%s", err);
    CHECK(ag_train(&cut, &r, err, sizeof err) == 0 && r.time_up && r.steps == 11, "%s", err);
    ag_train_opts again;
    CHECK(ag_run_config(cut.out, &again, err, sizeof err) == 0, "%s", err);
    CHECK(!strcmp(again.lr_steps, "cosine:warmup=5,total=20,min_ratio=0.1"), "recorded: '%s'", again.lr_steps);
    set(&again, "out", cut.out);
    set(&again, "resume", NULL);
    set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &r, err, sizeof err) == 0 && r.steps == 24, "%s", err);
    snprintf(pa, sizeof pa, "%s/last.safetensors", full.out);
    snprintf(pb, sizeof pb, "%s/last.safetensors", cut.out);
    CHECK(same_tensors(pa, pb, true), "--lr-steps resumed mid-epoch");

    /* and the factors matter: without them the run ends elsewhere */
    ag_train_opts plain = small_run("lrs-plain");
    set(&plain, "optim", "adam:lr=3e-3");
    set(&plain, "sched", "plateau:factor=0.5,patience=0");
    set(&plain, "epochs", "3");
    CHECK(ag_train(&plain, &r, err, sizeof err) == 0, "%s", err);
    snprintf(pb, sizeof pb, "%s/last.safetensors", plain.out);
    CHECK(!same_tensors(pa, pb, false), "--lr-steps changed nothing");

    CHECK(ag_train_set(&plain, "lr-steps", "cosine:warmup=5", err, sizeof err) != 0 && strstr(err, "total"), "%s",
          err);
}

/* Lines of a text file (0 when it cannot be read). */
static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0;
    for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
    if (f) fclose(f);
    return n;
}

/* --log-steps 1 on the GPU: the rows cost no wait for the device (the step
 * reads its loss and norm in the one wait it has anyway), so a run that
 * logs every step waits as often as one that logs none, and writes its
 * header and a row a step.  Both after a first run, which sets the device
 * up.  Without a GPU (or the emulator) the part says so and passes. */
static void test_step_log_waits(void) {
    char why[256];
    if (!ag_cuda_available(why, sizeof why)) {
        printf("step log on the GPU: skipped (%s)\n", why);
        return;
    }
    int64_t waits[3];
    ag_train_result r;
    for (int i = 0; i < 3; i++) { /* off (setting the device up), on, off */
        char name[32];
        snprintf(name, sizeof name, "gpu-log%d", i);
        ag_train_opts o = small_run(name);
        set(&o, "device", "cuda");
        if (i == 1) set(&o, "log-steps", "1");
        int64_t w0 = ag_memstats().device_waits;
        CHECK(ag_train(&o, &r, err, sizeof err) == 0, "%s", err);
        waits[i] = ag_memstats().device_waits - w0;
        char path[AG_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/steps.csv", o.out);
        if (i == 1)
            CHECK(count_lines(path) == r.steps + 1, "--log-steps 1 on the GPU: %d lines in steps.csv after %lld steps",
                  count_lines(path), (long long)r.steps);
    }
    CHECK(waits[1] == waits[2], "a run logging every step on the GPU waited %lld times, one logging none %lld",
          (long long)waits[1], (long long)waits[2]);
    printf("step log on the GPU: %lld host waits in a run of %lld steps, logging every step or none\n",
           (long long)waits[1], (long long)r.steps);
}

/* A lazy optimizer in a run: it learns, and its live-row flags come from
 * the step arena, so steps after warm-up still allocate nothing. */
static void test_lazy_run(void) {
    ag_train_opts o = learning_run("lazy", "adam:lr=3e-3,lazy=1");
    ag_train_result r;
    CHECK(ag_train(&o, &r, err, sizeof err) == 0, "%s", err);
    CHECK(r.last_loss < 0.6 * r.first_loss, "lazy: loss %.4f -> %.4f", r.first_loss, r.last_loss);
    CHECK(r.step_allocs == 0, "lazy: %lld heap allocations in training steps", (long long)r.step_allocs);
}

/* --micro-batch on each device there is: a batch of 32 in parts of 8
 * takes the step memory of 8 rows (well under half the whole batch's),
 * allocates nothing once warmed up, waits for the GPU once a step as a
 * whole batch does, and gives the whole batch's losses
 * (f32: to rounding; test_micro_batch.sh checks f64 runs to 1e-9).  Every
 * model kind weighs its parts by rows but the LM, by targets: both. */
static bool gpu_only; /* test_train device */

static void test_micro_batch_run(void) {
    char why[256];
    /* test_train device: the GPU first, then the CPU in the same process,
     * whose steps must not wait for the GPU the runs before used (a step's
     * end waited for the other staging arena's copies, even with none) */
    for (int k = 0; k < 2; k++) {
        int d = gpu_only ? 1 - k : k;
        const char *device = d ? "cuda" : "cpu";
        if (d && !ag_cuda_available(why, sizeof why)) {
            printf("micro-batches on the GPU: skipped (%s)\n", why);
            continue;
        }
        for (int lm = 0; lm < 2; lm++) {
            ag_train_result r[2];
            int64_t waits[2];
            for (int parts = 0; parts < 2; parts++) {
                char name[48];
                snprintf(name, sizeof name, "micro-%s-%s-%d", device, lm ? "lm" : "cls", parts);
                ag_train_opts o = small_run(name);
                set(&o, "device", device);
                set(&o, "max-steps", "6");
                if (lm) set(&o, "model", "poslm"), set(&o, "hidden", "8");
                if (parts) set(&o, "micro-batch", "8");
                int64_t w0 = ag_memstats().device_waits;
                CHECK(ag_train(&o, &r[parts], err, sizeof err) == 0, "%s", err);
                waits[parts] = ag_memstats().device_waits - w0;
                CHECK(r[parts].step_allocs == 0, "%s, %s: %lld heap allocations in training steps", device, name,
                      (long long)r[parts].step_allocs);
                /* parts or not, a step reads its values once: the parts' losses are summed on the device */
                CHECK(r[parts].step_waits == (d ? r[parts].steps : 0), "%s, %s: %lld waits for the GPU in %lld steps",
                      device, name, (long long)r[parts].step_waits, (long long)r[parts].steps);
            }
            const char *what = lm ? "poslm" : "mpsan";
            CHECK(r[1].step_bytes > 0 && r[1].step_bytes < 0.45 * r[0].step_bytes,
                  "%s on the %s: step memory %zu bytes in parts of 8 rows, %zu whole", what, device, r[1].step_bytes,
                  r[0].step_bytes);
            CHECK(fabs(r[1].initial_loss - r[0].initial_loss) <= 1e-5 * fabs(r[0].initial_loss) &&
                      fabs(r[1].last_loss - r[0].last_loss) <= 1e-4 * fabs(r[0].last_loss),
                  "%s on the %s: losses %.9g -> %.9g in parts, %.9g -> %.9g whole", what, device, r[1].initial_loss,
                  r[1].last_loss, r[0].initial_loss, r[0].last_loss);
            printf("micro-batches on the %s, %s: step memory %.2f MiB in parts of 8, %.2f MiB whole; host waits %lld "
                   "and %lld (in steps: %lld and %lld)\n", device, what, r[1].step_bytes / 1048576.0,
                   r[0].step_bytes / 1048576.0, (long long)waits[1], (long long)waits[0], (long long)r[1].step_waits,
                   (long long)r[0].step_waits);
        }
    }
}

/* After one epoch, best.safetensors's parameters are last's optimizer slot
 * `slot` (Adam's) and not last's values; says which differ. */
static void best_is_last_slot(const char *out, const char *slot) {
    char last[AG_PATH_MAX + 32], best[AG_PATH_MAX + 32];
    snprintf(last, sizeof last, "%s/last.safetensors", out);
    snprintf(best, sizeof best, "%s/best.safetensors", out);
    ag_st_file fl, fb;
    CHECK(ag_st_read(last, &fl) == 0 && ag_st_read(best, &fb) == 0, "%s", ag_errmsg());
    int params = 0, differ = 0;
    for (int i = 0; i < fb.count; i++) {
        const ag_st_tensor *t = &fb.tensors[i];
        if (!strncmp(t->name, "optim.", 6) || !strcmp(t->name, "sched.state")) continue;
        char name[256];
        snprintf(name, sizeof name, "optim.adam.%s.%s", slot, t->name);
        const ag_st_tensor *a = ag_st_get(&fl, name), *v = ag_st_get(&fl, t->name);
        size_t bytes = (size_t)t->numel * (t->dtype == AG_F64 ? 8 : 4);
        CHECK(a && v && a->numel == t->numel && !memcmp(a->data, t->data, bytes), "best's %s is last's %s", t->name,
              slot);
        differ += v && memcmp(v->data, t->data, bytes) != 0;
        params++;
    }
    CHECK(params > 0 && differ > 0, "%s: %d parameters in best, %d differ from last's values", slot, params, differ);
    ag_st_close(&fl);
    ag_st_close(&fb);
}

/* An optimizer with an average (--optim ...,ema=D): training is the same
 * to the bit (the average is beside it), what is evaluated and saved as
 * best is the average (best.safetensors's parameters are last's
 * "average" slot after one epoch), and a run stopped mid-epoch and
 * resumed ends on the uninterrupted run's bits, average included.
 * Lookahead without an average: what is evaluated and saved as best is
 * the slow weights (an epoch that ends mid-cycle). */
static void test_average_run(void) {
    ag_train_result plain, avg;
    ag_train_opts o = small_run("avg-plain");
    set(&o, "optim", "adam:lr=0.01");
    set(&o, "epochs", "1");
    CHECK(ag_train(&o, &plain, err, sizeof err) == 0, "%s", err);
    o = small_run("avg-ema");
    set(&o, "optim", "adam:lr=0.01,ema=0.8");
    set(&o, "epochs", "1");
    CHECK(ag_train(&o, &avg, err, sizeof err) == 0, "%s", err);
    CHECK(avg.first_loss == plain.first_loss && avg.last_loss == plain.last_loss,
          "training losses with an average %.17g -> %.17g, without %.17g -> %.17g", avg.first_loss, avg.last_loss,
          plain.first_loss, plain.last_loss);
    CHECK(avg.dev.loss != plain.dev.loss, "the dev loss of the average %.9g, of the values %.9g: the average is "
          "evaluated", avg.dev.loss, plain.dev.loss);
    best_is_last_slot(o.out, "average");

    ag_train_result la;
    char spec[64];
    snprintf(spec, sizeof spec, "adam:lr=0.01,lookahead=%d", (int)(plain.steps > 2 ? plain.steps - 1 : 2));
    o = small_run("avg-lookahead");
    set(&o, "optim", spec);
    set(&o, "epochs", "1");
    CHECK(plain.steps > 2 && ag_train(&o, &la, err, sizeof err) == 0, "%lld steps; %s", (long long)plain.steps, err);
    best_is_last_slot(o.out, "slow"); /* the epoch ends one update after a step back */

    ag_train_opts full = small_run("avg-full"), cut = small_run("avg-cut");
    set(&full, "optim", "sgd:lr=0.1,momentum=0.9,swa=4"), set(&cut, "optim", "sgd:lr=0.1,momentum=0.9,swa=4");
    set(&cut, "max-steps", "11");
    CHECK(ag_train(&full, &avg, err, sizeof err) == 0, "%s", err);
    CHECK(ag_train(&cut, &avg, err, sizeof err) == 0 && avg.steps == 11, "%s", err);
    ag_train_opts again;
    CHECK(ag_run_config(cut.out, &again, err, sizeof err) == 0, "%s", err);
    set(&again, "out", cut.out), set(&again, "resume", NULL), set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &avg, err, sizeof err) == 0, "%s", err);
    char a[AG_PATH_MAX + 32], b[AG_PATH_MAX + 32];
    snprintf(a, sizeof a, "%s/last.safetensors", full.out);
    snprintf(b, sizeof b, "%s/last.safetensors", cut.out);
    CHECK(same_tensors(a, b, true), "swa: resumed mid-epoch, the average's bits");
    snprintf(a, sizeof a, "%s/best.safetensors", full.out);
    snprintf(b, sizeof b, "%s/best.safetensors", cut.out);
    CHECK(same_tensors(a, b, true), "swa: the best checkpoint, an average, after resuming");
}

/* --eval-every N evaluates between the epochs' evaluations without
 * touching training (the last checkpoint's bits are those of a run
 * without it), adds a partial metrics row each time (the best checkpoint
 * may come from one), and a run stopped between two and resumed ends on
 * the uninterrupted run's bits, best checkpoint included. */
static void test_eval_every(void) {
    ag_train_opts every = small_run("eval-every"), plain = small_run("eval-plain"), cut = small_run("eval-cut");
    set(&every, "eval-every", "3"), set(&cut, "eval-every", "3");
    ag_train_result r, rp;
    CHECK(ag_train(&every, &r, err, sizeof err) == 0, "%s", err);
    CHECK(ag_train(&plain, &rp, err, sizeof err) == 0, "%s", err);
    char a[AG_PATH_MAX + 32], b[AG_PATH_MAX + 32];
    snprintf(a, sizeof a, "%s/last.safetensors", every.out);
    snprintf(b, sizeof b, "%s/last.safetensors", plain.out);
    CHECK(r.steps == rp.steps && same_tensors(a, b, true), "evaluations between epochs leave training as it was");
    int evals = (int)(r.steps / 3) - (r.steps % 3 == 0); /* the last step's is the epoch's own */
    for (int64_t per = r.steps / r.epochs, e = 1; e < r.epochs; e++) evals -= per * e % 3 == 0; /* at an epoch's end */
    snprintf(a, sizeof a, "%s/metrics.csv", every.out);
    CHECK(count_lines(a) == 1 + r.epochs + evals, "metrics.csv: %d lines after %lld steps in %d epochs, every 3 steps",
          count_lines(a), (long long)r.steps, r.epochs);
    set(&cut, "max-steps", "7");
    CHECK(ag_train(&cut, &r, err, sizeof err) == 0 && r.steps == 7, "%s", err);
    ag_train_opts again;
    CHECK(ag_run_config(cut.out, &again, err, sizeof err) == 0 && again.eval_every == 3, "%s", err);
    set(&again, "out", cut.out), set(&again, "resume", NULL), set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &r, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 2; i++) {
        const char *name = i ? "best.safetensors" : "last.safetensors";
        snprintf(a, sizeof a, "%s/%s", every.out, name);
        snprintf(b, sizeof b, "%s/%s", cut.out, name);
        CHECK(same_tensors(a, b, true), "--eval-every 3, stopped at step 7 and resumed: %s", name);
    }
}

/* A run told to stop evaluates for minutes before its last checkpoint;
 * if its folder was removed and made anew by another run meanwhile, it
 * must not write into the new one (the lock it holds is on the old file). */
static void test_folder_taken(void) {
    char out[512], cmd[1100];
    snprintf(out, sizeof out, "%s/taken", tmp);
    int lock = -1;
    CHECK(ag__run_folder_make(out, true, &lock, err, sizeof err) == 0 && lock >= 0, "%s", err);
    CHECK(ag__run_folder_still_ours(out, lock, err, sizeof err) == 0, "%s", err);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out);
    CHECK(system(cmd) == 0);
    int other = -1; /* another run makes the folder again, with its own lock */
    CHECK(ag__run_folder_make(out, true, &other, err, sizeof err) == 0 && other >= 0, "%s", err);
    CHECK(ag__run_folder_still_ours(out, lock, err, sizeof err) == AG_ERR_IO && strstr(err, "made anew"), "%s", err);
    CHECK(ag__run_folder_still_ours(out, other, err, sizeof err) == 0, "%s", err);
    ag__run_folder_unlock(other);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", out); /* removed and not made again */
    CHECK(system(cmd) == 0);
    CHECK(ag__run_folder_still_ours(out, lock, err, sizeof err) == AG_ERR_IO, "a removed folder");
    CHECK(ag__run_folder_still_ours(out, -1, err, sizeof err) == 0, "no lock held: nothing to check");
    ag__run_folder_unlock(lock);
}

/* last.safetensors again with one "state.KEY=" line of its config replaced. */
static void set_state_entry(const char *run, const char *key, const char *value) {
    char path[AG_PATH_MAX + 32], config[AG_CONFIG_MAX + 64];
    snprintf(path, sizeof path, "%s/last.safetensors", run);
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK, "%s", ag_errmsg());
    const char *old = ag_st_meta(&f, "config"), *at = strstr(old, key);
    CHECK(at != NULL, "no %s in the config", key);
    size_t head = (size_t)(at - old);
    snprintf(config, sizeof config, "%.*s%s=%s%s", (int)head, old, key, value, strchr(at, '\n'));
    ag_st_writer w = {0};
    for (int i = 0; i < f.count; i++) {
        const ag_st_tensor *t = &f.tensors[i];
        ag_st_add(&w, t->name, t->dtype, t->ndim, t->shape, t->data);
    }
    for (int i = 0; i < f.n_meta; i++)
        ag_st_set_meta(&w, f.meta[2 * i], strcmp(f.meta[2 * i], "config") ? f.meta[2 * i + 1] : config);
    CHECK(ag_st_write(&w, path) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&w);
    ag_st_close(&f);
}

/* A run folder whose saved counters are out of range or not plain integers
 * is refused on --resume, naming the entry (3e9 epochs once wrapped to a
 * negative epoch and trained for 2^31 epochs). */
static void test_resume_bad_state(void) {
    ag_train_opts o = small_run("bad_state");
    set(&o, "max-steps", "3");
    ag_train_result r;
    CHECK(ag_train(&o, &r, err, sizeof err) == 0, "%s", err);
    const char *cases[][2] = {{"state.epoch", "3000000000"}, {"state.step", "0x10"}, {"state.stopped", "2"},
                              {"state.bad_epochs", "-1"},    {"state.seconds", "inf"}, {"state.best", "0x1p3"}};
    for (int i = 0; i < 6; i++) {
        set_state_entry(o.out, cases[i][0], cases[i][1]);
        ag_train_opts again;
        CHECK(ag_run_config(o.out, &again, err, sizeof err) == 0, "%s", err);
        set(&again, "out", o.out);
        set(&again, "resume", NULL);
        set(&again, "quiet", NULL);
        CHECK(ag_train(&again, &r, err, sizeof err) != 0 && strstr(err, cases[i][0]) && strstr(err, "last.safetensors"),
              "%s=%s: '%s'", cases[i][0], cases[i][1], err);
        set_state_entry(o.out, cases[i][0], strcmp(cases[i][0], "state.best") ? "0" : "-inf"); /* back to valid */
    }

    /* vocab.txt with two words swapped: same size, other ids */
    char path[AG_PATH_MAX + 32], words[2][256];
    snprintf(path, sizeof path, "%s/vocab.txt", o.out);
    FILE *f = fopen(path, "r");
    char text[1 << 16];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *third = strchr(strchr(text, '\n') + 1, '\n') + 1, *fourth = strchr(third, '\n') + 1;
    CHECK(sscanf(third, "%255s", words[0]) == 1 && sscanf(fourth, "%255s", words[1]) == 1);
    f = fopen(path, "w");
    fprintf(f, "%.*s%s\n%s\n%s", (int)(third - text), text, words[1], words[0], strchr(fourth, '\n') + 1);
    fclose(f);
    ag_train_opts again;
    CHECK(ag_run_config(o.out, &again, err, sizeof err) == 0, "%s", err);
    set(&again, "out", o.out);
    set(&again, "resume", NULL);
    set(&again, "quiet", NULL);
    CHECK(ag_train(&again, &r, err, sizeof err) != 0 && strstr(err, "vocab.txt is not the vocabulary"), "%s", err);
}

/* ---- bad input ---- */

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, n, f);
    fclose(f);
}

static void test_bad_data(void) {
    struct {
        const char *text;
        size_t n;
        const char *want;
    } cases[] = {
        {"0 a fine line\nno label here\n", 0, ":2: label 'no' is not an integer"},
        {"0 a fine line\n1\n", 0, ":2: empty sentence"},
        {"0 fine\n1 bin\x01\x02ary\n", 0, ":2: binary data"},
        {"\n\n\n", 0, "no examples"},
        {"0 one\n\0\0\0\xff", 10, "binary data"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[512];
        snprintf(path, sizeof path, "%s/bad%zu.txt", tmp, i);
        write_file(path, cases[i].text, cases[i].n ? cases[i].n : strlen(cases[i].text));
        ag_train_opts o = small_run("bad");
        set(&o, "data", path);
        set(&o, "force", NULL);
        ag_train_result r;
        int rc = ag_train(&o, &r, err, sizeof err);
        CHECK(rc != 0 && strstr(err, cases[i].want) && strstr(err, "bad"), "case %zu: '%s'", i, err);
    }
    ag_train_opts o = small_run("bad");
    set(&o, "data", "/nonexistent/file.txt");
    ag_train_result r;
    CHECK(ag_train(&o, &r, err, sizeof err) != 0 && strstr(err, "/nonexistent/file.txt"), "%s", err);

    /* a corrupt checkpoint is refused with its name */
    char path[512];
    snprintf(path, sizeof path, "%s/junk.safetensors", tmp);
    write_file(path, "\x10\0\0\0\0\0\0\0{\"a\":1}", 15);
    ag_train_opts lo;
    ag_model m;
    ag_vocab *v;
    CHECK(ag_load_run(path, NULL, &lo, &m, &v, err, sizeof err) != 0 && strstr(err, "junk.safetensors"), "%s", err);
}

/* ---- reference dumps ---- */

/* The dump in `path` holds what a fresh forward/backward of the same setup
 * computes here, bit for bit: parameters, gradients, loss and the batch. */
static int verify_dump(const char *path, const char *model, const char *flags, const char *task) {
    ag_train_opts o = ag_train_opts_default();
    set(&o, "model", model);
    if (flags) set(&o, "flags", flags);
    if (task) set(&o, "task", task);
    ag_model m;
    ag_batch b;
    ag_st_file f;
    if (ag_dump_setup(&o, &m, &b, err, sizeof err) || ag_st_read(path, &f)) {
        CHECK(0, "%s: %s %s", path, err, ag_errmsg());
        return 1;
    }
    int failed = 0;
    ag_params_zero_grad(&m.params);
    ag_tensor *loss = ag_model_loss(&m, &b, false);
    ag_backward(loss);
    for (int i = 0; i < m.params.count; i++) {
        ag_tensor *p = m.params.items[i];
        char name[256];
        snprintf(name, sizeof name, "grad.%s", p->name);
        const ag_st_tensor *tp = ag_st_get(&f, p->name), *tg = ag_st_get(&f, name);
        ag_real *buf = malloc((size_t)p->size * sizeof *buf);
        bool ok = tp && tg && tp->numel == p->size && tg->numel == p->size;
        if (ok) ag_st_to_real(tp, buf), ok = !memcmp(buf, p->data, (size_t)p->size * sizeof *buf);
        if (ok) ag_st_to_real(tg, buf), ok = !memcmp(buf, p->grad, (size_t)p->size * sizeof *buf);
        CHECK(ok, "%s: parameter or gradient '%s' differs", path, p->name);
        failed += !ok;
        free(buf);
    }
    const ag_st_tensor *tl = ag_st_get(&f, "loss");
    ag_real l = 0;
    if (tl && tl->numel == 1) ag_st_to_real(tl, &l);
    CHECK(tl && tl->ndim == 0 && l == ag_item(loss), "%s: loss", path);
    const ag_st_tensor *tt = ag_st_get(&f, "batch.tokens"), *tn = ag_st_get(&f, "batch.lengths");
    bool batch_ok = tt && tn && tt->dtype == AG_I64 && tt->numel == (int64_t)b.rows * b.width && tn->numel == b.rows;
    for (int64_t i = 0; batch_ok && i < tt->numel; i++) batch_ok = ((const int64_t *)tt->data)[i] == b.tokens[i];
    CHECK(batch_ok, "%s: batch.tokens", path);
    const char *y = m.cfg.task == AG_TASK_LM ? "batch.targets" : m.cfg.task == AG_TASK_RELATEDNESS ? "batch.scores" : "batch.labels";
    const ag_st_tensor *ty = ag_st_get(&f, y);
    CHECK(ty != NULL, "%s: no %s", path, y);
    if (ty && m.cfg.task == AG_TASK_RELATEDNESS) /* the scores the target was made of, as F32 [B] */
        CHECK(ty->dtype == AG_F32 && ty->ndim == 1 && ty->numel == b.rows && !memcmp(ty->data, b.scores, 4 * (size_t)b.rows),
              "%s: batch.scores", path);
    if (m.cfg.task == AG_TASK_RELATEDNESS) CHECK(ag_st_get(&f, "batch.tokens_b") && !ag_st_get(&f, "batch.labels"));
    failed += !tl || !batch_ok;
    ag_step_end();
    ag_st_close(&f);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return failed;
}

static void test_dumps(void) {
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/dump-%s.safetensors", tmp, (*k)->name);
        ag_train_opts o = ag_train_opts_default();
        set(&o, "model", (*k)->name);
        CHECK(ag_dump_step(&o, path, err, sizeof err) == 0, "%s", err);
        verify_dump(path, (*k)->name, NULL, NULL);
        /* size options: a wider random batch */
        set(&o, "batch", "3");
        set(&o, "len", "7");
        CHECK(ag_dump_step(&o, path, err, sizeof err) == 0, "%s", err);
        ag_st_file f;
        CHECK(ag_st_read(path, &f) == 0);
        const ag_st_tensor *t = ag_st_get(&f, "batch.tokens");
        CHECK(t && t->shape[0] == 3 && (t->shape[1] == 7 || ag_model_tiny(*k).fixed_len > 0));
        ag_st_close(&f);
    }
    /* relatedness: the KL loss of Tai et al.'s targets, batch.scores in place of batch.labels */
    char path[512];
    snprintf(path, sizeof path, "%s/dump-mpsan-relatedness.safetensors", tmp);
    ag_train_opts o = ag_train_opts_default();
    set(&o, "task", "relatedness");
    CHECK(ag_dump_step(&o, path, err, sizeof err) == 0, "%s", err);
    verify_dump(path, "mpsan", NULL, "relatedness");
    set(&o, "batch", "3");
    set(&o, "len", "6");
    CHECK(ag_dump_step(&o, path, err, sizeof err) == 0, "%s", err);
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == 0);
    const ag_st_tensor *sc = ag_st_get(&f, "batch.scores");
    bool in_range = sc && sc->numel == 3;
    for (int i = 0; in_range && i < 3; i++) in_range = ((const float *)sc->data)[i] >= 1 && ((const float *)sc->data)[i] <= 5;
    CHECK(in_range, "random batch: scores in [1, 5]");
    ag_st_close(&f);
    set(&o, "task", "pair"); /* mpsan has no pair head */
    CHECK(ag_dump_step(&o, path, err, sizeof err) != 0 && strstr(err, "no head for the pair task"), "%s", err);
}

/* ---- relatedness ---- */

/* Against values worked out by hand: x = 1..5, y = (2,4,5,4,5) have means 3
 * and 4, centred cross sum 6, squares 10 and 6: r = 6/sqrt(60).  Ranks of
 * y, ties averaged: (1, 2.5, 4.5, 2.5, 4.5): rho = 7/sqrt(90).  MSE: (1 +
 * 4 + 4) / 5.  Ties on both sides: x = (3.5,1,2,2,7,2) ranks (5,1,3,3,6,3),
 * y = (10,0,1,3,3,2) ranks (6,1,2,4.5,4.5,3): centred sums 13, 15.5, 17. */
static void test_metrics(void) {
    const double x[] = {1, 2, 3, 4, 5}, y[] = {2, 4, 5, 4, 5};
    CHECK_NEAR(ag_pearson(x, y, 5), 0.7745966692414834, 1e-15, 1e-15);
    CHECK_NEAR(ag_spearman(x, y, 5), 0.7378647873726218, 1e-15, 1e-15);
    CHECK_NEAR(ag_mean_sq_error(x, y, 5), 1.8, 1e-15, 1e-15);
    const double a[] = {3.5, 1, 2, 2, 7, 2}, b[] = {10, 0, 1, 3, 3, 2};
    CHECK_NEAR(ag_spearman(a, b, 6), 13 / sqrt(15.5 * 17), 1e-15, 1e-15);
    CHECK_NEAR(ag_pearson(a, b, 6), 0.32951764459339133, 1e-15, 1e-14);
    CHECK_NEAR(ag_mean_sq_error(a, b, 6), 10.208333333333334, 1e-15, 1e-15);
    CHECK_NEAR(ag_spearman(b, a, 6), ag_spearman(a, b, 6), 0, 1e-15);

    const double cube[] = {1, 8, 27, 64}, lin[] = {1, 2, 3, 4}, down[] = {9, 7, 5, 1};
    CHECK(ag_spearman(lin, cube, 4) == 1 && ag_pearson(lin, cube, 4) < 0.99, "monotone: rho 1, r < 1");
    CHECK(ag_spearman(lin, down, 4) == -1, "reversed: rho -1");
    CHECK_NEAR(ag_pearson(lin, lin, 4), 1, 0, 1e-15);
    /* r = 1 on large close values: two passes, no cancellation */
    const double big[] = {1e9 + 1, 1e9 + 2, 1e9 + 3};
    CHECK_NEAR(ag_pearson(big, lin, 3), 1, 0, 1e-12);

    const double flat[] = {3, 3, 3, 3}, with_nan[] = {1, NAN, 3, 4};
    CHECK(isnan(ag_pearson(lin, flat, 4)) && isnan(ag_spearman(flat, lin, 4)), "constant: undefined");
    CHECK(isnan(ag_pearson(lin, lin, 1)) && isnan(ag_spearman(lin, lin, 1)), "one pair: undefined");
    CHECK(isnan(ag_spearman(lin, with_nan, 4)) && isnan(ag_pearson(with_nan, lin, 4)));
    CHECK(ag_mean_sq_error(lin, lin, 4) == 0 && isnan(ag_mean_sq_error(lin, lin, 0)));
}

/* MPSAN on the generated pairs' scores: runs with the paper's SICK settings,
 * allocates nothing per step, writes the three metrics, and eval and
 * predict of its checkpoint agree with it. */
static void test_relatedness_run(void) {
    ag_train_opts o = small_run("relatedness");
    set(&o, "task", "relatedness");
    ag_train_result r;
    int rc = ag_train(&o, &r, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    printf("  relatedness: loss %.4f -> %.4f, dev r %.3f rho %.3f mse %.3f\n", r.first_loss, r.last_loss,
           r.dev.pearson, r.dev.spearman, r.dev.mse);
    CHECK(r.step_allocs == 0, "%lld heap allocations in training steps", (long long)r.step_allocs);
    CHECK(isfinite(r.dev.pearson) && isfinite(r.dev.spearman) && r.dev.mse > 0 && r.has_test);
    CHECK(!strcmp(o.optim, "adadelta:lr=0.7,rho=0.95,eps=1e-6") && o.keep == 0.55 && o.l2 == 5e-4, "%s %g %g",
          o.optim, o.keep, o.l2);

    char path[AG_PATH_MAX + 32], line[512] = "";
    snprintf(path, sizeof path, "%s/metrics.csv", o.out);
    FILE *f = fopen(path, "r");
    CHECK(f && fgets(line, sizeof line, f), "%s", path);
    CHECK(strstr(line, "dev_loss,dev_pearson,dev_spearman,dev_mse,test_loss,test_pearson,test_spearman,test_mse,"),
          "%s", line);
    if (f) fclose(f);
    snprintf(path, sizeof path, "%s/metrics.jsonl", o.out);
    f = fopen(path, "r");
    CHECK(f && fgets(line, sizeof line, f) && strstr(line, "\"dev\":{\"loss\":") && strstr(line, "\"spearman\":"),
          "%s", line);
    if (f) fclose(f);

    snprintf(path, sizeof path, "%s/best.safetensors", o.out);
    ag_train_opts lo;
    ag_model m;
    ag_vocab *vocab;
    rc = ag_load_run(path, NULL, &lo, &m, &vocab, err, sizeof err);
    CHECK(rc == 0 && m.cfg.task == AG_TASK_RELATEDNESS && !strcmp(lo.task, "relatedness"), "%s", err);
    if (rc) return;
    ag_run_data d;
    CHECK(ag_run_data_open(&lo, 0, vocab, &d, err, sizeof err) == 0, "%s", err);
    ag_batch b;
    ag_batch_opts bo = {.max_width = d.max_width};
    CHECK(ag_batch_alloc(&b, d.ds[AG_SPLIT_DEV], 32, &bo, err, sizeof err) == 0, "%s", err);
    ag_metrics x;
    CHECK(ag_evaluate(&m, d.ds[AG_SPLIT_DEV], d.idx[AG_SPLIT_DEV], d.n[AG_SPLIT_DEV], &b, &x, err, sizeof err) == 0);
    CHECK(x.pearson == r.dev.pearson && x.spearman == r.dev.spearman && x.mse == r.dev.mse && x.loss == r.dev.loss,
          "eval r %.6f, run r %.6f", x.pearson, r.dev.pearson);

    FILE *out = tmpfile();
    char pair[] = "w1 w2 w3 w4\tw2 w3";
    CHECK(ag_predict_line(&m, vocab, &lo, pair, out, err, sizeof err) == 0, "%s", err);
    rewind(out);
    double score, p[5];
    CHECK(fscanf(out, "%lf %lf %lf %lf %lf %lf", &score, &p[0], &p[1], &p[2], &p[3], &p[4]) == 6);
    CHECK(score >= 1 && score <= 5 && fabs(p[0] + p[1] + p[2] + p[3] + p[4] - 1) < 1e-3, "score %g", score);
    CHECK_NEAR(score, p[0] + 2 * p[1] + 3 * p[2] + 4 * p[3] + 5 * p[4], 1e-3, 0); /* p printed to 4 digits: 15 x 5e-5 */
    fclose(out);
    char single[] = "w1 w2 w3";
    CHECK(ag_predict_line(&m, vocab, &lo, single, stdout, err, sizeof err) != 0 && strstr(err, "tab"), "%s", err);
    ag_batch_free(&b);
    ag_run_data_free(&d);
    ag_model_free(&m);
}

/* Whether a run's recorded options say its LM text was cut into sentences:
 * --lm-split, else the data set (WikiText-2), never a user's file. */
static void test_lm_sentences_of_a_run(void) {
    static const struct {
        const char *data, *dataset, *format, *lm_split;
        int want;
    } cases[] = {
        {"/d/wikitext2", "", "", "", 1},   {"/d/wt2", "wikitext2", "", "", 1},     {"/d/wikitext2/", "", "", "", 1},
        {"/d/ptb", "", "", "", 0},         {"/d/wikitext2", "", "", "line", 0},    {"/d/p.txt", "", "lm", "", 0},
        {"/d/p.txt", "", "lm", "sentence", 1}, {"", "", "", "", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ag_train_opts o = ag_train_opts_default();
        snprintf(o.data, sizeof o.data, "%s", cases[i].data);
        snprintf(o.dataset, sizeof o.dataset, "%s", cases[i].dataset);
        snprintf(o.format, sizeof o.format, "%s", cases[i].format);
        snprintf(o.lm_split, sizeof o.lm_split, "%s", cases[i].lm_split);
        CHECK(ag__train_lm_sentences(&o) == cases[i].want, "data '%s' dataset '%s' format '%s' lm-split '%s'",
              cases[i].data, cases[i].dataset, cases[i].format, cases[i].lm_split);
    }
}

/* predict's "ppl P\tnext W" of line, read back. */
static double predict_lm(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *line, char *next) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", line);
    FILE *f = tmpfile();
    double ppl = NAN;
    CHECK(ag_predict_line(m, vocab, o, copy, f, err, sizeof err) == 0, "%s: %s", line, err);
    rewind(f);
    CHECK(fscanf(f, "ppl %lf next %63s", &ppl, next) == 2, "%s", line);
    fclose(f);
    return ppl;
}

/* The word drawn at u is the inverse of softmax(logits / T) over ids 2..:
 * each id from its running share's start to its end, <pad> and <unk>
 * never, the likeliest at T 0. */
static void test_draw_word(void) {
    /* <pad>, <unk> likeliest of all; then shares 1/6, 2/6, 3/6 */
    const ag_real logits[] = {9, 9, 0, (ag_real)log(2.0), (ag_real)log(3.0)};
    const struct {
        double u;
        int want;
    } at[] = {{0, 2}, {0.16, 2}, {0.17, 3}, {0.49, 3}, {0.51, 4}, {0.999999, 4}};
    for (size_t i = 0; i < sizeof at / sizeof *at; i++)
        CHECK(ag__draw_word(logits, 5, 1.0, at[i].u) == at[i].want, "u %g: %d, want %d", at[i].u,
              ag__draw_word(logits, 5, 1.0, at[i].u), at[i].want);
    CHECK(ag__draw_word(logits, 5, 0, 0.1) == 4 && ag__draw_word(logits, 5, 0, 0.9) == 4, "T 0: the likeliest");
    /* T 2 flattens: shares 1, sqrt 2, sqrt 3 */
    double first = 1 / (1 + sqrt(2.0) + sqrt(3.0));
    CHECK(ag__draw_word(logits, 5, 2.0, first - 1e-6) == 2 && ag__draw_word(logits, 5, 2.0, first + 1e-6) == 3);
    /* a small T and large logits: no overflow, the likeliest; ties: the first */
    const ag_real big[] = {0, 0, 3e4f, 2e4f, 3e4f};
    CHECK(ag__draw_word(big, 5, 1e-3, 0.3) == 2 && ag__draw_word(big, 5, 1e-3, 0.7) == 4);
    CHECK(ag__draw_word(big, 5, 0, 0.7) == 2);
    /* a vocabulary of one word besides <pad> and <unk> */
    CHECK(ag__draw_word(logits, 3, 1.0, 0.5) == 2);

    /* top-k and top-p: the same walk over the words they keep, renormalised */
    ag__ranked order[5];
    for (int k = 0; k < 6; k++) /* T 0 or top_k 1: the likeliest at any u */
        CHECK(ag__draw_word_top(logits, 5, 1.0, 1, 1, k / 5.0, order) == 4 &&
              ag__draw_word_top(logits, 5, 0, 2, 0.5, k / 5.0, order) == 4, "top_k 1 or T 0 at u %g", k / 5.0);
    /* top_k 2 keeps ids 3 and 4, shares 2/5 and 3/5; a top_p of 0.6 keeps the same two (3/6 < 0.6 <= 5/6) */
    const struct {
        double u;
        int want;
    } top2[] = {{0, 3}, {0.39, 3}, {0.41, 4}, {0.999999, 4}};
    for (size_t i = 0; i < sizeof top2 / sizeof *top2; i++) {
        CHECK(ag__draw_word_top(logits, 5, 1.0, 2, 1, top2[i].u, order) == top2[i].want, "top_k 2, u %g", top2[i].u);
        CHECK(ag__draw_word_top(logits, 5, 1.0, 0, 0.6, top2[i].u, order) == top2[i].want, "top_p 0.6, u %g",
              top2[i].u);
        CHECK(ag__draw_word_top(logits, 5, 1.0, 2, 0.9, top2[i].u, order) == top2[i].want, "top_k 2 then top_p 0.9");
    }
    /* a nucleus the likeliest fills alone (3/6 >= 0.5); top_k 2 then top_p 0.5 of what it kept: 3/5 >= 0.5 */
    CHECK(ag__draw_word_top(logits, 5, 1.0, 0, 0.5, 0.1, order) == 4 && ag__draw_word_top(logits, 5, 1.0, 2, 0.5, 0.1,
                                                                                          order) == 4);
    /* no cut (top_k at least the words, top_p 1): ag__draw_word's words at every u */
    for (int k = 0; k <= 100; k++)
        CHECK(ag__draw_word_top(logits, 5, 2.0, 3, 1, k / 100.5, order) == ag__draw_word(logits, 5, 2.0, k / 100.5) &&
              ag__draw_word_top(logits, 5, 2.0, 7, 1, k / 100.5, order) == ag__draw_word(logits, 5, 2.0, k / 100.5),
              "top_k >= the words at u %g", k / 100.5);
    /* ties: the lower ids are the likeliest k; id 4 never drawn */
    const ag_real flat[] = {9, 9, 1, 1, 1};
    CHECK(ag__draw_word_top(flat, 5, 1.0, 2, 1, 0.49, order) == 2 && ag__draw_word_top(flat, 5, 1.0, 2, 1, 0.51, order) == 3 &&
          ag__draw_word_top(flat, 5, 1.0, 2, 1, 0.999999, order) == 3, "top_k 2 among ties: ids 2 and 3");
}

/* generate's output line for prompt, drawn with a generator seeded `seed`. */
static void generate(ag_model *m, const ag_vocab *vocab, const ag_train_opts *o, const char *prompt, uint64_t seed,
                     char *got, size_t n) {
    char copy[256];
    snprintf(copy, sizeof copy, "%s", prompt);
    ag_rng rng;
    ag_rng_seed(&rng, seed);
    FILE *f = tmpfile();
    CHECK(ag_generate_line(m, vocab, o, copy, &rng, f, err, sizeof err) == 0, "%s: %s", prompt, err);
    rewind(f);
    got[0] = 0;
    CHECK(fgets(got, (int)n, f) && got[strlen(got) - 1] == '\n' && fgetc(f) == EOF, "%s: not one line", prompt);
    got[strcspn(got, "\n")] = 0;
    fclose(f);
}

/* A continuation drawn at T 0 is predict's next word, again and again; draws
 * repeat with the seed; a run on sentences continues the last sentence. */
static void test_generate(ag_model *m, const ag_vocab *vocab, ag_train_opts *o) {
    char got[512], again[512], other[512], next[64];
    o->words = 6;
    o->temperature = 0;
    snprintf(o->lm_split, sizeof o->lm_split, "line"); /* predict reads the growing prompt as one example */
    generate(m, vocab, o, "w1 saw", 1, got, sizeof got);
    char prompt[512] = "w1 saw", *word = got, *end;
    int words = 0;
    for (; *word; word = *end ? end + 1 : end, words++) {
        end = word + strcspn(word, " ");
        predict_lm(m, vocab, o, prompt, next);
        CHECK((size_t)(end - word) == strlen(next) && !strncmp(word, next, strlen(next)),
              "after '%s': drew '%.*s', predict's next is '%s'", prompt, (int)(end - word), word, next);
        snprintf(prompt + strlen(prompt), sizeof prompt - strlen(prompt), " %.*s", (int)(end - word), word);
    }
    CHECK(words >= 1 && words <= 6, "%d words drawn (--words 6): '%s'", words, got);
    printf("  generate: 'w1 saw' + '%s'\n", got);
    snprintf(o->lm_split, sizeof o->lm_split, "sentence"); /* the run's */
    o->temperature = 1;
    o->words = 20;
    generate(m, vocab, o, "then w2", 7, got, sizeof got);
    generate(m, vocab, o, "then w2", 7, again, sizeof again);
    CHECK(!strcmp(got, again), "seed 7 drew '%s', then '%s'", got, again);
    generate(m, vocab, o, "w1 saw w0 . then w2", 7, other, sizeof other);
    CHECK(!strcmp(got, other), "the prompt's last sentence: '%s', the whole line: '%s'", got, other);
    generate(m, vocab, o, "  ", 7, got, sizeof got);
    CHECK(!got[0], "a blank prompt drew '%s'", got);
    o->temperature = -1; /* an API caller's options, past the CLI's checks */
    char prompt_b[] = "then w2";
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    FILE *f = tmpfile();
    CHECK(ag_generate_line(m, vocab, o, prompt_b, &rng, f, err, sizeof err) == AG_ERR_ARG && strstr(err, "temperature -1"),
          "%s", err);
    fclose(f);
    o->temperature = 1;
}

/* An LM trained on sentences (--lm-split sentence) is asked of a line the
 * way it was trained: each sentence scored alone, the line's perplexity
 * over all their words, the next word after the last one. */
static void test_lm_predict_by_sentence(void) {
    char data[512];
    snprintf(data, sizeof data, "%s/paras.txt", tmp);
    FILE *f = fopen(data, "w");
    for (int i = 0; i < 40 && f; i++) fprintf(f, "w%d saw w%d . then w%d left !\n", i % 5, i % 3, i % 4);
    CHECK(f && fclose(f) == 0, "%s", data);
    ag_train_opts o = small_run("lm-sentences");
    set(&o, "model", "poslm");
    set(&o, "data", data);
    set(&o, "format", "lm");
    set(&o, "lm-split", "sentence");
    set(&o, "hidden", "8");
    set(&o, "optim", "adam:lr=3e-2");
    set(&o, "keep", "1");
    set(&o, "epochs", "40"); /* the patterns learnt: what it draws depends on the words before */
    ag_train_result r;
    int rc = ag_train(&o, &r, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    char ckpt[AG_PATH_MAX + 32], next[64], next_b[64], next_line[64];
    snprintf(ckpt, sizeof ckpt, "%s/best.safetensors", o.out);
    ag_train_opts lo;
    ag_model m;
    ag_vocab *vocab;
    rc = ag_load_run(ckpt, NULL, &lo, &m, &vocab, err, sizeof err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    double a = predict_lm(&m, vocab, &lo, "w1 saw w2 .", next);       /* 3 words and <eos> */
    double b = predict_lm(&m, vocab, &lo, "then w3 left ! ?", next_b); /* 4 words and <eos> */
    double both = predict_lm(&m, vocab, &lo, "w1 saw w2 . then w3 left ! ?", next);
    CHECK_NEAR(log(both), (4 * log(a) + 5 * log(b)) / 9, 2e-4, 0); /* each printed to 3 decimals */
    CHECK(!strcmp(next, next_b), "next '%s' after the line, '%s' after its last sentence", next, next_b);
    snprintf(lo.lm_split, sizeof lo.lm_split, "line"); /* the whole line as one example: other contexts */
    double whole = predict_lm(&m, vocab, &lo, "w1 saw w2 . then w3 left ! ?", next_line);
    CHECK(fabs(whole - both) > 1e-3, "the line scored whole (%.4f) as by sentence (%.4f)", whole, both);
    snprintf(lo.lm_split, sizeof lo.lm_split, "sentence"); /* the run's */
    test_generate(&m, vocab, &lo);
    ag_vocab_free(vocab);
    ag_model_free(&m);
}

/* Which task a run gets from the model and the data, and the refusals. */
static void test_task_choice(void) {
    char sick[512], labeled[512], bad[512];
    snprintf(sick, sizeof sick, "%s/pairs.tsv", tmp);
    snprintf(labeled, sizeof labeled, "%s/labeled.txt", tmp);
    snprintf(bad, sizeof bad, "%s/bad_score.tsv", tmp);
    const char *head = "pair_ID\tsentence_A\tsentence_B\trelatedness_score\tentailment_judgment\n";
    char text[1024];
    int k = snprintf(text, sizeof text, "%s", head);
    for (int i = 0; i < 20; i++)
        k += snprintf(text + k, sizeof text - (size_t)k, "%d\ta b c\tb c d\t%.1f\t%s\n", i, 1 + 0.2 * i,
                      i % 3 ? "NEUTRAL" : "ENTAILMENT");
    write_file(sick, text, (size_t)k);
    write_file(labeled, "0 a b\n1 c d\n0 a c\n1 b d\n0 a d\n1 c b\n0 a b c\n1 d c b\n0 a a\n1 d d\n", 58);
    k = snprintf(text, sizeof text, "%s", head);
    for (int i = 0; i < 20; i++) /* line 3 has a score beyond 5 */
        k += snprintf(text + k, sizeof text - (size_t)k, "%d\ta b\tb c\t%g\tNEUTRAL\n", i, i == 1 ? 6 : 3.5);
    write_file(bad, text, (size_t)k);

    struct {
        const char *model, *task, *data;
        ag_task want;     /* when it works */
        const char *error; /* else */
    } cases[] = {
        {"mpsan", "", sick, AG_TASK_RELATEDNESS, NULL},    /* mpsan on pairs: relatedness */
        {"ms_san", "", sick, AG_TASK_PAIR, NULL},          /* ms_san on pairs: entailment */
        {"mpsan", "relatedness", "", AG_TASK_RELATEDNESS, NULL}, /* generated pairs */
        {"mpsan", "", "", AG_TASK_CLASSIFY, NULL},
        {"mpsan", "pair", sick, 0, "model mpsan has no head for the pair task (it does: classify, relatedness)"},
        {"mpsan", "pair", "", 0, "model mpsan has no head for the pair task"},
        {"ms_san", "relatedness", sick, 0, "model ms_san has no head for the relatedness task (it does: classify, pair)"},
        {"mtsa", "", sick, 0, "pairs.tsv holds sentence pairs, but model mtsa does classification only"},
        {"dual_axial", "relatedness", "", 0, "model dual_axial has no head for the relatedness task"},
        {"mpsan", "relatedness", labeled, 0, "--task relatedness does not fit labeled.txt"},
        {"mpsan", "relatedness", bad, 0, "bad_score.tsv:3: relatedness score 6 is outside [1, 5]"},
        {"poslm", "", sick, 0, "model poslm is a language model"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ag_train_opts o = ag_train_opts_default();
        set(&o, "model", cases[i].model);
        set(&o, "task", cases[i].task);
        set(&o, "data", cases[i].data);
        if (strstr(cases[i].data, ".tsv")) set(&o, "format", "sick");
        set(&o, "synth-n", "40");
        ag_run_data d;
        int rc = ag_run_data_open(&o, -1, NULL, &d, err, sizeof err);
        if (cases[i].error) {
            CHECK(rc != 0 && strstr(err, cases[i].error), "case %zu: '%s'", i, rc ? err : "no error");
        } else {
            CHECK(rc == 0 && d.task == cases[i].want, "case %zu: %s (task %d)", i, err, rc ? -1 : (int)d.task);
            if (rc == 0 && d.task == AG_TASK_RELATEDNESS) CHECK(d.classes == AG_RELATEDNESS_BINS);
        }
        if (rc == 0) ag_run_data_free(&d);
    }

    /* the whole command refuses too, before it creates anything */
    ag_train_opts o = small_run("refused");
    set(&o, "task", "pair");
    ag_train_result r;
    CHECK(ag_train(&o, &r, err, sizeof err) != 0 && strstr(err, "no head for the pair task"), "%s", err);
}

/* A run that diverges stops at the first non-finite value with the step,
 * what was not finite (by name) and a hint, and writes no checkpoint of
 * that state: a loss (adadelta at lr 1e20, issue 20's case), a parameter
 * made infinite by the update while the loss was still finite, and an LM
 * whose dev perplexity overflows (poslm at sgd lr 1e8, issue 20's case). */
static void test_diverged_runs(void) {
    static const struct {
        const char *model, *optim, *want;
    } cases[] = {
        {"mpsan", "adadelta:lr=1e20", "training diverged at step 2: the training loss is nan; lower the learning rate "
                                      "(now 1e+20, --optim adadelta) or clip the gradient norm (--clip, now off)"},
        {"mpsan", "sgd:lr=1e300", "training diverged at step 1: the global parameter norm is nan: parameter "},
        {"poslm", "sgd:lr=1e8", "training diverged at the evaluation after epoch 1: the dev perplexity is inf (loss "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[32];
        snprintf(name, sizeof name, "diverged%zu", i);
        ag_train_opts o = small_run(name);
        set(&o, "model", cases[i].model);
        set(&o, "optim", cases[i].optim);
        set(&o, "clip", "0");
        ag_train_result r;
        err[0] = 0;
        int rc = ag_train(&o, &r, err, sizeof err);
        CHECK(rc == AG_ERR_NONFINITE && strstr(err, cases[i].want), "%s %s: rc %d: %s", cases[i].model, cases[i].optim,
              rc, err);
        /* anomaly mode would name the op that made a NaN loss, not an update's */
        CHECK(!strstr(err, "--detect-anomaly names the op") == (i != 0), "%s", err);
        char path[AG_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/best.safetensors", o.out);
        CHECK(access(path, F_OK) != 0, "%s: a checkpoint of a diverged run", path);
        snprintf(path, sizeof path, "%s/last.safetensors", o.out);
        CHECK(access(path, F_OK) != 0, "%s: a checkpoint of a diverged run", path);
    }
}

/* --detect-anomaly reports nothing on a healthy run of any model: the masks'
 * -inf entries and the ops that take them are not anomalies.  And it is
 * off again after the run. */
static void test_anomaly_quiet_on_healthy_runs(void) {
    for (const ag_model_kind *const *kind = ag_model_kinds(); *kind; kind++) {
        char name[64];
        snprintf(name, sizeof name, "anomaly-%s", (*kind)->name);
        ag_train_opts o = small_run(name);
        set(&o, "model", (*kind)->name);
        set(&o, "dim", "12");
        set(&o, "epochs", "1");
        set(&o, "detect-anomaly", NULL);
        ag_train_result r;
        int rc = ag_train(&o, &r, err, sizeof err);
        CHECK(rc == 0 && r.steps > 0, "%s: %s", (*kind)->name, err);
        CHECK(!ag_anomaly_enabled());
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "compare")) return same_tensors(argv[2], argv[3], true) ? 0 : 1;
    if (argc >= 4 && argc <= 6 && !strcmp(argv[1], "verify-dump")) {
        int failed = verify_dump(argv[2], argv[3], argc >= 5 && argv[4][0] ? argv[4] : NULL, argc == 6 ? argv[5] : NULL);
        ag_shutdown();
        return failed || check_summary("verify-dump");
    }
    /* test_train device: the GPU's parts, then a run on the CPU in the same
     * process (which once made its masks on the GPU the run before had
     * left current); 77 without a GPU (tests/meson.build's train_device) */
    bool device_only = argc == 2 && !strcmp(argv[1], "device");
    char why[256];
    if (device_only && !ag_cuda_available(why, sizeof why)) {
        printf("SKIP: %s\n", why);
        return 77;
    }
    if (device_only) setenv("AG_TEST_ONLY", "step_log_waits,lazy_run,micro_batch_run", 1);
    gpu_only = device_only;
    snprintf(tmp, sizeof tmp, "%s/test_train.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) return 1;
    /* AG_TEST_ONLY=a,b: those parts alone (ThreadSanitizer's CI run takes
     * the ones that train on the pool; the rest is single-threaded logic) */
    static const struct {
        const char *name;
        void (*run)(void);
    } parts[] = {
        {"options", test_options},
        {"bad_data", test_bad_data},
        {"dumps", test_dumps},
        {"resume", test_resume},
        {"lr_steps", test_lr_steps},
        {"step_log_waits", test_step_log_waits},
        {"folder_taken", test_folder_taken},
        {"lazy_run", test_lazy_run},
        {"micro_batch_run", test_micro_batch_run},
        {"average_run", test_average_run},
        {"eval_every", test_eval_every},
        {"resume_bad_state", test_resume_bad_state},
        {"learns", test_learns},
        {"metrics", test_metrics},
        {"relatedness_run", test_relatedness_run},
        {"task_choice", test_task_choice},
        {"lm_sentences_of_a_run", test_lm_sentences_of_a_run},
        {"lm_predict_by_sentence", test_lm_predict_by_sentence},
        {"draw_word", test_draw_word},
        {"diverged_runs", test_diverged_runs},
        {"anomaly_quiet_on_healthy_runs", test_anomaly_quiet_on_healthy_runs},
    };
    const char *only = getenv("AG_TEST_ONLY");
    int ran = 0;
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++)
        if (!only || check_listed(only, parts[i].name)) parts[i].run(), ran++;
    if (only) { /* a name of no part would pass with nothing run */
        int names = 1;
        for (const char *c = only; *c; c++) names += *c == ',';
        CHECK(ran == names, "AG_TEST_ONLY=%s: %d of its %d names are parts", only, ran, names);
    }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    ag_shutdown();
    return check_summary("test_train");
}
