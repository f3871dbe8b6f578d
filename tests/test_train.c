/* test_train.c - the trainer library (models/train.h): options and their
 * saved config, a short run on the generated task that must learn without
 * allocating per step, resuming bit for bit (at an epoch boundary and in
 * the middle of an epoch), eval of a checkpoint, reference dumps of every
 * registered model reloaded bit-exactly, and clean errors for bad input.
 *
 * Helper modes for tests/test_cli.sh:
 *   test_train compare A.safetensors B.safetensors   same tensors, bit for bit
 *   test_train verify-dump FILE MODEL [FLAGS]          FILE == a fresh dump-step */
#include "check.h"
#include "../models/train.h"

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

/* Every tensor of a is in b with the same dtype, shape and bytes. */
static int same_tensors(const char *a, const char *b, bool verbose) {
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
    int same = fa.count == fb.count;
    for (int i = 0; i < fa.count && same; i++) {
        const ag_st_tensor *x = &fa.tensors[i], *y = ag_st_get(&fb, x->name);
        size_t bytes = (size_t)x->numel * (x->dtype == AG_F64 || x->dtype == AG_I64 ? 8 : 4);
        same = y && y->dtype == x->dtype && y->numel == x->numel && y->ndim == x->ndim &&
               !memcmp(x->shape, y->shape, sizeof x->shape[0] * (size_t)x->ndim) && !memcmp(x->data, y->data, bytes);
        if (!same && verbose) fprintf(stderr, "tensor '%s' differs between %s and %s\n", x->name, a, b);
    }
    if (fa.count != fb.count && verbose) fprintf(stderr, "%d tensors in %s, %d in %s\n", fa.count, a, fb.count, b);
    ag_st_close(&fa);
    ag_st_close(&fb);
    return same;
}

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
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ag_train_opts t = ag_train_opts_default();
        int rc = ag_train_set(&t, bad[i].key, bad[i].value, err, sizeof err);
        CHECK(rc != 0 && strstr(err, bad[i].want), "--%s %s: '%s'", bad[i].key, bad[i].value, err);
    }
    CHECK(ag_train_opts_parse(&back, "dim=8\nnot a line\n", "ckpt", err, sizeof err) != 0 && strstr(err, "ckpt"));
    int takes;
    CHECK(ag_train_option_info("epochs", AG_CMD_TRAIN, &takes) && takes);
    CHECK(ag_train_option_info("resume", AG_CMD_TRAIN, &takes) && !takes);
    CHECK(!ag_train_option_info("epochs", AG_CMD_EVAL, NULL));
}

/* ---- training ---- */

/* The generated task is learnable: the loss falls well below its start
 * (ln 4 for four balanced classes), and steps after warm-up allocate nothing. */
static void test_learns(void) {
    ag_train_opts o = small_run("learn");
    set(&o, "synth-n", "800");
    set(&o, "dim", "24");
    set(&o, "epochs", "5");
    set(&o, "optim", "adam:lr=3e-3");
    ag_train_result r;
    int rc = ag_train(&o, &r, err, sizeof err);
    CHECK(rc == 0, "%s", err);
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
static int verify_dump(const char *path, const char *model, const char *flags) {
    ag_train_opts o = ag_train_opts_default();
    set(&o, "model", model);
    if (flags) set(&o, "flags", flags);
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
    const char *y = m.cfg.task == AG_TASK_LM ? "batch.targets" : "batch.labels";
    CHECK(ag_st_get(&f, y) != NULL, "%s: no %s", path, y);
    failed += !tl || !batch_ok;
    ag_step_end();
    ag_st_close(&f);
    ag_tiny_batch_free(&b);
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
        verify_dump(path, (*k)->name, NULL);
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
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "compare")) return same_tensors(argv[2], argv[3], true) ? 0 : 1;
    if ((argc == 4 || argc == 5) && !strcmp(argv[1], "verify-dump")) {
        int failed = verify_dump(argv[2], argv[3], argc == 5 ? argv[4] : NULL);
        ag_shutdown();
        return failed || check_summary("verify-dump");
    }
    snprintf(tmp, sizeof tmp, "%s/test_train.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmp)) return 1;
    test_options();
    test_bad_data();
    test_dumps();
    test_resume();
    test_learns();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    ag_shutdown();
    return check_summary("test_train");
}
