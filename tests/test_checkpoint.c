/* test_checkpoint.c - checkpoints of a training run: what is saved comes
 * back bit for bit; N steps, save, resume, M steps equals N + M steps
 * uninterrupted, bit for bit, for every optimizer; the same seed trains to
 * the same losses; and every bad file is refused with the model untouched. */
#include "optim_util.h"
#include "../optim/options.h" /* ag__optim_slot_numel */

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char dir[64];

static const char *path_of(const char *name) {
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* One training step per minibatch; an "epoch" is 3 steps, after which the
 * schedule sees the last loss. */
static void train(tiny_mlp *m, ag_optimizer *o, ag_scheduler *s, ag_train_state *ts, int steps, double *losses) {
    int idx[MLP_BATCH];
    for (int k = 0; k < steps; k++) {
        tiny_mlp_batch(&ts->rng, idx);
        ag_tensor *loss = tiny_mlp_loss(m, idx);
        ag_params_zero_grad(&m->ps);
        ag_backward(loss);
        ag_l2_penalty(&m->ps, 1e-3);
        ag_clip_grad_norm(&m->ps, 1.0);
        ag_optim_step(o);
        losses[k] = ag_item(loss);
        ag_step_end();
        if (++ts->step % 3 == 0) {
            ts->epoch++;
            if (s) ag_sched_step(s, o, losses[k]);
        }
    }
}

static bool same_params(const ag_params *a, const ag_params *b) {
    if (a->count != b->count) return false;
    for (int i = 0; i < a->count; i++)
        if (memcmp(a->items[i]->data, b->items[i]->data, (size_t)a->items[i]->size * sizeof(ag_real))) return false;
    return true;
}

/* A copy of the parameter values, to prove a failed load changed nothing. */
typedef struct {
    ag_real v[1024];
    int64_t n;
} snapshot;

static void snap(const ag_params *ps, snapshot *s) {
    s->n = 0;
    for (int i = 0; i < ps->count; i++) {
        memcpy(s->v + s->n, ps->items[i]->data, (size_t)ps->items[i]->size * sizeof(ag_real));
        s->n += ps->items[i]->size;
    }
}

static bool unchanged(const ag_params *ps, const snapshot *s) {
    int64_t at = 0;
    for (int i = 0; i < ps->count; i++) {
        if (memcmp(s->v + at, ps->items[i]->data, (size_t)ps->items[i]->size * sizeof(ag_real))) return false;
        at += ps->items[i]->size;
    }
    return at == s->n;
}

/* ---- resume equals uninterrupted, bit for bit ---- */

static void resume_case(const char *optim_spec, const char *sched_spec) {
    enum { N = 9, M = 12 };
    ag_optim_config oc;
    ag_sched_config sc;
    CHECK(ag_optim_parse(optim_spec, &oc) == AG_OK && ag_sched_parse(sched_spec, &sc) == AG_OK);
    const char *path = path_of("resume.safetensors");
    double la[N + M], lb[M];

    /* run A: N steps, save, M more */
    tiny_mlp a;
    tiny_mlp_init(&a, 1);
    ag_optimizer oa;
    ag_scheduler sa;
    ag_optim_init(&oa, &a.ps, &oc);
    ag_sched_init(&sa, &sc);
    ag_train_state ta = {0};
    ag_rng_seed(&ta.rng, 77);
    snprintf(ta.config, sizeof ta.config, "optim=%s sched=%s", optim_spec, sched_spec);
    train(&a, &oa, &sa, &ta, N, la);
    CHECK(ag_checkpoint_save(path, &a.ps, &oa, &sa, &ta) == AG_OK, "%s", ag_errmsg());
    train(&a, &oa, &sa, &ta, M, la + N);

    /* run B: a fresh process's view: other initial values, fresh state */
    tiny_mlp b;
    tiny_mlp_init(&b, 1);
    ag_rng other;
    ag_rng_seed(&other, 999);
    for (int i = 0; i < b.ps.count; i++) ag_init_uniform(b.ps.items[i], -3, 3, &other);
    ag_optimizer ob;
    ag_scheduler sb;
    ag_optim_init(&ob, &b.ps, &oc);
    ag_sched_init(&sb, &sc);
    ag_train_state tb = {0};
    CHECK(ag_checkpoint_load(path, &b.ps, &ob, &sb, &tb) == AG_OK, "%s", ag_errmsg());
    CHECK(tb.step == N && tb.epoch == N / 3 && ob.step == N && !strcmp(tb.config, ta.config));
    train(&b, &ob, &sb, &tb, M, lb);

    CHECK(memcmp(la + N, lb, sizeof lb) == 0, "%s: resumed losses differ", optim_spec);
    CHECK(same_params(&a.ps, &b.ps), "%s: resumed parameters differ", optim_spec);
    CHECK(oa.lr == ob.lr && oa.step == ob.step && sa.best == sb.best && sa.num_bad_epochs == sb.num_bad_epochs);
    CHECK(memcmp(&ta.rng, &tb.rng, sizeof ta.rng) == 0);
    for (int s = 0; s < oa.n_slots; s++)
        for (int i = 0; i < oa.n_params; i++) {
            const ag_real *x = oa.slot[s * oa.n_params + i], *y = ob.slot[s * ob.n_params + i];
            int64_t n = ag__optim_slot_numel(&oa, i, s); /* muon: no v; adafactor: factors */
            CHECK(!x == !y && (!x || !memcmp(x, y, (size_t)n * sizeof(ag_real))));
        }
    printf("  resume %-40s %-36s %d + %d steps: identical (lr %g, loss %.6f)\n", optim_spec, sched_spec, N, M, ob.lr,
           lb[M - 1]);
    ag_optim_free(&oa), ag_optim_free(&ob);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
}

static void test_resume(void) {
    resume_case("sgd:lr=0.3,momentum=0.9,nesterov=1,weight_decay=1e-4", "step:step_size=2,gamma=0.5");
    resume_case("adam:lr=0.01,amsgrad=1", "plateau:factor=0.5,patience=0,threshold=0.5");
    resume_case("adamw:lr=0.01,weight_decay=0.1", "exponential:gamma=0.9");
    resume_case("adadelta:lr=0.5,rho=0.95", "constant");
    resume_case("adagrad:lr=0.1,lr_decay=0.01,initial_accumulator_value=0.1", "constant"); /* lr_decay reads the step */
    resume_case("rmsprop:lr=0.01,momentum=0.9,centered=1", "step:step_size=2,gamma=0.5");
    resume_case("muon:lr=0.02,weight_decay=0.01", "exponential:gamma=0.9"); /* the weights' m alone, the biases' m, v */
    resume_case("adafactor:lr=0.05,weight_decay=0.01", "step:step_size=2,gamma=0.5"); /* row_var, col_var; variance */
    resume_case("adafactor:lr=0.05,beta1=0.9,scale_parameter=0", "constant");         /* and exp_avg */
}

/* ---- resumed with other settings ---- */

static bool all_zero(const ag_real *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (x[i] != 0) return false;
    return true;
}

/* A file saved by `from`, loaded into an optimizer of `to` (same kind)
 * that has already stepped, so a slot left unloaded would show: the slots
 * both keep come back, a slot only `to` keeps starts at zero, and the
 * rate is the file's current one unless `to` changed cfg.lr. */
static void changed_case(const char *from, const char *to) {
    ag_optim_config fc, tc;
    CHECK(ag_optim_parse(from, &fc) == AG_OK && ag_optim_parse(to, &tc) == AG_OK);
    ag_sched_config sc;
    ag_sched_parse("step:step_size=1,gamma=0.5", &sc); /* the current rate is not cfg.lr */
    const char *path = path_of("changed.safetensors");
    tiny_mlp a, b;
    tiny_mlp_init(&a, 3);
    tiny_mlp_init(&b, 4);
    ag_optimizer oa, ob;
    ag_scheduler sa, sb;
    ag_optim_init(&oa, &a.ps, &fc), ag_optim_init(&ob, &b.ps, &tc);
    ag_sched_init(&sa, &sc), ag_sched_init(&sb, &sc);
    ag_train_state ta = {0}, tb = {0};
    ag_rng_seed(&ta.rng, 5), ag_rng_seed(&tb.rng, 6);
    double l[7];
    train(&a, &oa, &sa, &ta, 7, l);
    train(&b, &ob, &sb, &tb, 4, l); /* b's own state: nonzero everywhere */
    CHECK(ag_checkpoint_save(path, &a.ps, &oa, &sa, &ta) == AG_OK, "%s", ag_errmsg());
    CHECK(ag_checkpoint_load(path, &b.ps, &ob, &sb, &tb) == AG_OK, "%s -> %s: %s", from, to, ag_errmsg());
    CHECK(same_params(&a.ps, &b.ps) && ob.step == oa.step && sb.last_epoch == sa.last_epoch);
    CHECK(ob.lr == (fc.lr == tc.lr ? oa.lr : tc.lr), "%s -> %s: lr %g (the file's %g)", from, to, ob.lr, oa.lr);
    int kept = 0, fresh = 0;
    for (int s = 0; s < ob.n_slots; s++) {
        const ag_real *from_a = ag_optim_state(&oa, a.ps.items[0]->name, ag_optim_slot_name(&ob, s));
        for (int i = 0; i < ob.n_params; i++) {
            const ag_real *got = ob.slot[s * ob.n_params + i], *want = ag_optim_state(&oa, a.ps.items[i]->name,
                                                                                      ag_optim_slot_name(&ob, s));
            int64_t n = b.ps.items[i]->size;
            if (from_a) CHECK(!memcmp(got, want, (size_t)n * sizeof(ag_real)), "%s -> %s: slot %s differs", from, to,
                              ag_optim_slot_name(&ob, s));
            else CHECK(all_zero(got, n), "%s -> %s: slot %s does not start at zero", from, to, ag_optim_slot_name(&ob, s));
        }
        from_a ? kept++ : fresh++;
    }
    printf("  %-34s -> %-40s %d slots loaded, %d from zero, lr %g\n", from, to, kept, fresh, ob.lr);
    ag_optim_free(&oa), ag_optim_free(&ob);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
}

static void test_changed_settings(void) {
    changed_case("sgd:lr=0.1,momentum=0.9", "sgd:lr=0.1");                     /* momentum off: not loaded */
    changed_case("sgd:lr=0.1", "sgd:lr=0.1,momentum=0.9,dampening=0.1");       /* on: from zero */
    changed_case("sgd:lr=0.1,momentum=0.9", "sgd:lr=0.02,momentum=0.9");       /* a new rate stands */
    changed_case("adam:lr=0.01", "adam:lr=0.01,amsgrad=1");                    /* vmax from zero, m and v loaded */
    changed_case("adam:lr=0.01,amsgrad=1", "adam:lr=0.01,beta2=0.99");         /* vmax dropped */
    changed_case("rmsprop:lr=0.01,momentum=0.9", "rmsprop:lr=0.01,centered=1"); /* one slot swapped for another */
    changed_case("adadelta:lr=0.5,rho=0.95", "adadelta:lr=0.5,rho=0.9");       /* the same slots, other settings */

    /* a slot the saved optimizer kept must be there for every parameter */
    tiny_mlp a;
    tiny_mlp_init(&a, 3);
    ag_optim_config oc;
    ag_optim_parse("sgd:lr=0.1,momentum=0.9", &oc);
    ag_optimizer o;
    ag_optim_init(&o, &a.ps, &oc);
    const char *full = path_of("momentum.safetensors"), *part = path_of("part.safetensors");
    CHECK(ag_checkpoint_save(full, &a.ps, &o, NULL, NULL) == AG_OK);
    ag_st_file f;
    CHECK(ag_st_read(full, &f) == AG_OK, "%s", ag_errmsg());
    char dropped[256];
    snprintf(dropped, sizeof dropped, "optim.sgd.momentum.%s", a.ps.items[1]->name);
    ag_st_writer w = {0};
    for (int i = 0; i < f.count; i++) /* every tensor but one parameter's momentum */
        if (strcmp(f.tensors[i].name, dropped))
            ag_st_add(&w, f.tensors[i].name, f.tensors[i].dtype, f.tensors[i].ndim, f.tensors[i].shape, f.tensors[i].data);
    for (int i = 0; i < f.n_meta; i++) /* the checksums are made anew */
        if (strncmp(f.meta[2 * i], AG_ST_CRC_PREFIX, strlen(AG_ST_CRC_PREFIX)) && strncmp(f.meta[2 * i], "attngrad.", 9))
            ag_st_set_meta(&w, f.meta[2 * i], f.meta[2 * i + 1]);
    ag_st_set_meta(&w, "attngrad.real", ag_st_meta(&f, "attngrad.real"));
    ag_st_set_checksums(&w);
    CHECK(ag_st_write(&w, part) == AG_OK, "%s", ag_errmsg());
    ag_st_writer_free(&w);
    ag_st_close(&f);
    ag_optimizer fresh;
    ag_optim_init(&fresh, &a.ps, &oc);
    CHECK(ag_checkpoint_load(part, &a.ps, &fresh, NULL, NULL) != AG_OK && strstr(ag_errmsg(), dropped),
          "a file missing one parameter's momentum loaded (%s)", ag_errmsg());
    printf("  a file without %s: %s\n", dropped, ag_errmsg());
    ag_optim_free(&o), ag_optim_free(&fresh);
    ag_params_free(&a.ps);
}

/* ---- determinism ---- */

static void test_determinism(void) {
    double l1[40], l2[40], l3[40];
    ag_optim_config oc;
    ag_optim_parse("adam:lr=0.01", &oc);
    tiny_mlp m[3];
    for (int r = 0; r < 3; r++) {
        tiny_mlp_init(&m[r], r < 2 ? 5 : 6);
        ag_optimizer o;
        ag_optim_init(&o, &m[r].ps, &oc);
        ag_train_state ts = {0};
        ag_rng_seed(&ts.rng, r < 2 ? 5 : 6);
        train(&m[r], &o, NULL, &ts, 40, r == 0 ? l1 : r == 1 ? l2 : l3);
        ag_optim_free(&o);
    }
    CHECK(memcmp(l1, l2, sizeof l1) == 0, "same seed, different losses");
    CHECK(same_params(&m[0].ps, &m[1].ps));
    CHECK(memcmp(l1, l3, sizeof l1) != 0, "another seed gives another run");
    CHECK(l1[39] < l1[0], "it trains: loss %g -> %g", l1[0], l1[39]);
    printf("  two runs with seed 5: 40 losses bitwise equal (%.6f -> %.6f)\n", l1[0], l1[39]);
    for (int r = 0; r < 3; r++) ag_params_free(&m[r].ps);
}

/* ---- everything saved comes back ---- */

static void test_round_trip(void) {
    tiny_mlp a, b;
    tiny_mlp_init(&a, 3);
    tiny_mlp_init(&b, 4);
    const char *path = path_of("params.safetensors");
    CHECK(ag_checkpoint_save(path, &a.ps, NULL, NULL, NULL) == AG_OK);
    CHECK(ag_checkpoint_load(path, &b.ps, NULL, NULL, NULL) == AG_OK, "%s", ag_errmsg());
    CHECK(same_params(&a.ps, &b.ps));
    /* the file is plain safetensors with the parameters under their names */
    ag_st_file f;
    CHECK(ag_st_read(path, &f) == AG_OK);
    CHECK(f.count == 4 && ag_st_get(&f, "l1.weight") && ag_st_get(&f, "l1.weight")->shape[1] == MLP_HIDDEN);
    CHECK(!strcmp(ag_st_meta(&f, "attngrad.real"), IS_F64 ? "f64" : "f32") && !ag_st_meta(&f, "optim"));
    ag_st_close(&f);

    /* optimizer state by name, as documented */
    ag_optim_config oc;
    ag_optim_parse("adam:lr=0.02,amsgrad=1", &oc);
    ag_optimizer o;
    ag_optim_init(&o, &a.ps, &oc);
    ag_scheduler s;
    ag_sched_config sc;
    ag_sched_parse("plateau:mode=max", &sc);
    ag_sched_init(&s, &sc);
    ag_train_state ts = {.step = 6, .epoch = 2};
    ag_rng_seed(&ts.rng, 8);
    strcpy(ts.config, "model=mlp \"quoted\"\nsecond line");
    train(&a, &o, &s, &ts, 6, (double[6]){0});
    o.lr = 1.0 / 3; /* a rate that needs all 17 digits */
    CHECK(ag_checkpoint_save(path, &a.ps, &o, &s, &ts) == AG_OK);
    CHECK(ag_st_read(path, &f) == AG_OK);
    const ag_st_tensor *m = ag_st_get(&f, "optim.adam.m.l2.bias"), *vmax = ag_st_get(&f, "optim.adam.vmax.l1.weight");
    const ag_st_tensor *step = ag_st_get(&f, "optim.step");
    CHECK(m && m->ndim == 1 && m->shape[0] == MLP_CLASSES && vmax && vmax->shape[0] == MLP_IN);
    int64_t sv;
    CHECK(step && step->dtype == AG_I64);
    ag_st_to_i64(step, &sv);
    CHECK(sv == 6);
    CHECK(!strcmp(ag_st_meta(&f, "optim"), "adam:lr=0.02,beta1=0.9,beta2=0.999,eps=1e-08,amsgrad=1,weight_decay=0"),
          "%s", ag_st_meta(&f, "optim"));
    CHECK(!strcmp(ag_st_meta(&f, "step"), "12") && !strcmp(ag_st_meta(&f, "epoch"), "4"));
    CHECK(strlen(ag_st_meta(&f, "rng")) == 67, "%s", ag_st_meta(&f, "rng"));
    ag_st_close(&f);

    ag_optimizer o2;
    ag_optim_init(&o2, &b.ps, &oc);
    ag_scheduler s2;
    ag_sched_init(&s2, &sc);
    ag_train_state t2;
    CHECK(ag_checkpoint_load(path, &b.ps, &o2, &s2, &t2) == AG_OK, "%s", ag_errmsg());
    CHECK(same_params(&a.ps, &b.ps) && o2.step == o.step && o2.lr == 1.0 / 3);
    CHECK(memcmp(o.state, o2.state, (size_t)ag_params_numel(&a.ps) * 3 * sizeof(ag_real)) == 0);
    CHECK(s2.last_epoch == s.last_epoch && s2.best == s.best && s2.num_bad_epochs == s.num_bad_epochs &&
          s2.cooldown_counter == s.cooldown_counter);
    CHECK(t2.step == ts.step && t2.epoch == ts.epoch && !memcmp(&t2.rng, &ts.rng, sizeof ts.rng) &&
          !strcmp(t2.config, ts.config));
    /* a fresh plateau's best is infinite: it survives the trip */
    ag_sched_init(&s, &sc);
    CHECK(ag_checkpoint_save(path, &a.ps, NULL, &s, NULL) == AG_OK);
    s2.best = 0;
    CHECK(ag_checkpoint_load(path, &b.ps, NULL, &s2, NULL) == AG_OK && s2.best == -INFINITY);
    ag_optim_free(&o), ag_optim_free(&o2);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
}

/* A file written by hand: a params-only checkpoint of the tiny MLP in the
 * other real type (F64 in the f32 build and F32 in the f64 build), plus the
 * extra tensors a reference dump carries, which loading ignores. */
static void test_other_real_type(void) {
    tiny_mlp a;
    tiny_mlp_init(&a, 2);
    ag_st_writer w = {0};
    static double d[4][256];
    static float fl[4][256];
    for (int i = 0; i < a.ps.count; i++) {
        ag_tensor *t = a.ps.items[i];
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        for (int64_t j = 0; j < t->size; j++) d[i][j] = 0.1 * (double)(j + 1) + i, fl[i][j] = (float)d[i][j];
        ag_st_add(&w, t->name, IS_F64 ? AG_F32 : AG_F64, t->ndim, shape, IS_F64 ? (void *)fl[i] : (void *)d[i]);
    }
    ag_st_add(&w, "batch.tokens", AG_I64, 2, (int64_t[]){1, 2}, (int64_t[]){4, 5});
    ag_st_add(&w, "grad.l1.weight", AG_F32, 1, (int64_t[]){1}, (float[]){0});
    const char *path = path_of("other.safetensors");
    CHECK(ag_st_write(&w, path) == AG_OK);
    ag_st_writer_free(&w);
    CHECK(ag_checkpoint_load(path, &a.ps, NULL, NULL, NULL) == AG_OK, "%s", ag_errmsg());
    for (int i = 0; i < a.ps.count; i++)
        for (int64_t j = 0; j < a.ps.items[i]->size; j++)
            CHECK(a.ps.items[i]->data[j] == (IS_F64 ? (ag_real)fl[i][j] : (ag_real)d[i][j]));
    ag_params_free(&a.ps);
}

/* ---- refusals: a message naming the file and the problem, nothing changed ---- */

static void expect_refused(const char *path, ag_params *ps, ag_optimizer *o, ag_scheduler *s, ag_train_state *t,
                           ag_status status, const char *what) {
    snapshot before;
    snap(ps, &before);
    ag_optimizer o_before = o ? *o : (ag_optimizer){0};
    ag_real *state_copy = NULL;
    int64_t n_state = o ? ag_params_numel(o->params) * o->n_slots : 0;
    if (o && n_state) {
        state_copy = malloc((size_t)n_state * sizeof(ag_real));
        memcpy(state_copy, o->state, (size_t)n_state * sizeof(ag_real));
    }
    ag_status st = ag_checkpoint_load(path, ps, o, s, t);
    CHECK(st == status, "load returned %d, want %d: %s", st, status, ag_errmsg());
    CHECK(strstr(ag_errmsg(), path) && strstr(ag_errmsg(), what), "message '%s' lacks '%s'", ag_errmsg(), what);
    CHECK(unchanged(ps, &before), "a failed load changed the parameters (%s)", what);
    if (o) CHECK(o->step == o_before.step && o->lr == o_before.lr &&
                 (!n_state || !memcmp(state_copy, o->state, (size_t)n_state * sizeof(ag_real))));
    free(state_copy);
}

static void test_refusals(void) {
    tiny_mlp a;
    tiny_mlp_init(&a, 10);
    ag_optim_config adam, sgd;
    ag_optim_parse("adam", &adam);
    ag_optim_parse("sgd:momentum=0.9", &sgd);
    ag_optimizer o;
    ag_optim_init(&o, &a.ps, &adam);
    ag_sched_config sc;
    ag_sched_parse("step:step_size=2", &sc);
    ag_scheduler s;
    ag_sched_init(&s, &sc);
    ag_train_state ts = {.step = 3};
    ag_rng_seed(&ts.rng, 1);
    train(&a, &o, &s, &ts, 3, (double[3]){0});
    char full[256], bare[256]; /* kept: path_of's buffers get reused */
    strcpy(full, path_of("full.safetensors"));
    strcpy(bare, path_of("bare.safetensors"));
    CHECK(ag_checkpoint_save(full, &a.ps, &o, &s, &ts) == AG_OK);
    CHECK(ag_checkpoint_save(bare, &a.ps, NULL, NULL, NULL) == AG_OK);

    /* the model the files are loaded into: other values, so a partial load shows */
    tiny_mlp b;
    tiny_mlp_init(&b, 11);
    ag_optimizer ob;
    ag_optim_init(&ob, &b.ps, &adam);
    ob.step = 42;
    ob.lr = 0.5;
    ag_scheduler sb;
    ag_sched_init(&sb, &sc);
    ag_train_state tb = {0};

    /* what the file lacks */
    expect_refused(bare, &b.ps, &ob, NULL, NULL, AG_ERR_FORMAT, "'optim'");
    expect_refused(bare, &b.ps, NULL, &sb, NULL, AG_ERR_FORMAT, "'sched'");
    expect_refused(bare, &b.ps, NULL, NULL, &tb, AG_ERR_FORMAT, "'step'");
    ag_param(&b.ps, "l3.weight", 2, (int[]){2, 2}); /* a parameter the file does not have */
    expect_refused(full, &b.ps, NULL, NULL, NULL, AG_ERR_SHAPE, "'l3.weight'");
    ag_params_free(&b.ps);
    ag_optim_free(&ob);

    /* parameters of another shape */
    ag_params c = {0};
    ag_param(&c, "l1.weight", 2, (int[]){MLP_HIDDEN, MLP_IN}); /* transposed */
    ag_param(&c, "l1.bias", 1, (int[]){MLP_HIDDEN});
    expect_refused(full, &c, NULL, NULL, NULL, AG_ERR_SHAPE, "[5,8] in the file");
    ag_params_free(&c);
    ag_param(&c, "l1.bias", 1, (int[]){MLP_HIDDEN});
    ag_param(&c, "l2.bias", 2, (int[]){1, MLP_CLASSES}); /* same size, other rank */
    expect_refused(full, &c, NULL, NULL, NULL, AG_ERR_SHAPE, "'l2.bias'");
    ag_params_free(&c);

    /* the right parameters but another optimizer or schedule: nothing is
     * copied, not even the parameters that matched */
    tiny_mlp_init(&b, 11);
    ag_optimizer os;
    ag_optim_init(&os, &b.ps, &sgd);
    expect_refused(full, &b.ps, &os, NULL, NULL, AG_ERR_ARG, "'adam' optimizer state, this run uses 'sgd'");
    ag_optim_free(&os); /* (amsgrad switched on is no refusal: its vmax starts at zero, test_changed_settings) */
    ag_sched_config pc;
    ag_sched_parse("plateau", &pc);
    ag_scheduler sp;
    ag_sched_init(&sp, &pc);
    expect_refused(full, &b.ps, NULL, &sp, NULL, AG_ERR_ARG, "schedule 'step:step_size=2,gamma=0.1'");

    /* damaged files: truncated, a parameter stored as integers, bad metadata */
    size_t n;
    FILE *fp = fopen(full, "rb");
    fseek(fp, 0, SEEK_END);
    n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *bytes = malloc(n);
    CHECK(fread(bytes, 1, n, fp) == n);
    fclose(fp);
    const char *cut = path_of("cut.safetensors");
    fp = fopen(cut, "wb");
    fwrite(bytes, 1, n - 1, fp);
    fclose(fp);
    ag_optim_init(&ob, &b.ps, &adam);
    expect_refused(cut, &b.ps, &ob, &sb, &tb, AG_ERR_FORMAT, "truncated");
    free(bytes);

    ag_st_writer w = {0};
    int64_t ints[MLP_HIDDEN] = {0};
    for (int i = 0; i < b.ps.count; i++) {
        ag_tensor *t = b.ps.items[i];
        int64_t shape[2] = {t->shape[0], t->ndim > 1 ? t->shape[1] : 0};
        if (!strcmp(t->name, "l1.bias")) ag_st_add(&w, t->name, AG_I64, 1, shape, ints);
        else ag_st_add_tensor(&w, t->name, a.ps.items[i]);
    }
    const char *intp = path_of("int.safetensors");
    CHECK(ag_st_write(&w, intp) == AG_OK);
    expect_refused(intp, &b.ps, NULL, NULL, NULL, AG_ERR_FORMAT, "'l1.bias' is I64");
    ag_st_writer_free(&w);

    const char *metas[][2] = {{"rng", "12,34"}, {"rng", "zz"}, {"step", "-4"}, {"step", "12x"}, {"epoch", ""},
                              {"step", " 5"}, {"step", "+5"},
                              {"rng", "0x00000000000001,0000000000000002,0000000000000003,0000000000000004"},
                              {"rng", "0000000000000001,0000000000000002,0000000000000003,00000000000000045"},
                              {"rng", "0000000000000000,0000000000000000,0000000000000000,0000000000000000"}};
    for (int k = 0; k < 10; k++) {
        for (int i = 0; i < a.ps.count; i++) ag_st_add_tensor(&w, a.ps.items[i]->name, a.ps.items[i]);
        ag_st_set_meta(&w, "step", "1");
        ag_st_set_meta(&w, "epoch", "0");
        ag_st_set_meta(&w, "rng", "0000000000000001,0000000000000002,0000000000000003,0000000000000004");
        ag_st_set_meta(&w, metas[k][0], metas[k][1]);
        const char *mp = path_of("meta.safetensors");
        CHECK(ag_st_write(&w, mp) == AG_OK);
        char what[64];
        snprintf(what, sizeof what, "'%s'", metas[k][0]);
        expect_refused(mp, &b.ps, NULL, NULL, &tb, AG_ERR_FORMAT, what);
        ag_st_writer_free(&w);
    }
    /* a parameter that is not finite (a diverged run), and in the f32 build an
     * F64 value beyond float's range */
    double l1_bias[MLP_HIDDEN] = {0}, big = IS_F64 ? INFINITY : 1e300;
    l1_bias[2] = NAN;
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < a.ps.count; i++) {
            ag_tensor *t = a.ps.items[i];
            if (strcmp(t->name, "l1.bias")) ag_st_add_tensor(&w, t->name, t);
            else ag_st_add(&w, t->name, AG_F64, 1, (int64_t[]){MLP_HIDDEN}, l1_bias);
        }
        const char *np = path_of("nonfinite.safetensors");
        CHECK(ag_st_write(&w, np) == AG_OK);
        expect_refused(np, &b.ps, NULL, NULL, NULL, AG_ERR_FORMAT, "'l1.bias' (model's parameter) holds");
        ag_st_writer_free(&w);
        l1_bias[2] = big;
    }
    /* an optimizer or schedule spec that does not parse: the message wraps the
     * parser's own reason (ag_fail formats aside, so wrapping ag_errmsg() works) */
    const char *specs[][3] = {{"optim", "!!!", "metadata 'optim': unknown optimizer '!!!'"},
                              {"sched", "sideways", "metadata 'sched': unknown schedule 'sideways'"}};
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < a.ps.count; i++) ag_st_add_tensor(&w, a.ps.items[i]->name, a.ps.items[i]);
        ag_st_set_meta(&w, specs[k][0], specs[k][1]);
        const char *sp = path_of("spec.safetensors");
        CHECK(ag_st_write(&w, sp) == AG_OK);
        expect_refused(sp, &b.ps, k ? NULL : &ob, k ? &sb : NULL, NULL, AG_ERR_FORMAT, specs[k][2]);
        ag_st_writer_free(&w);
    }
    /* the good file still loads into the same objects afterwards */
    CHECK(ag_checkpoint_load(full, &b.ps, &ob, &sb, &tb) == AG_OK, "%s", ag_errmsg());
    CHECK(same_params(&a.ps, &b.ps) && ob.step == 3 && tb.step == 6);
    expect_refused(path_of("absent.safetensors"), &b.ps, NULL, NULL, NULL, AG_ERR_IO, "cannot open");

    ag_optim_free(&o), ag_optim_free(&ob);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
}

/* ---- integrity: every single flipped bit in a tensor is refused ---- */

/* A full checkpoint (Adam state, schedule, train state); each tensor's data
 * gets single bits flipped (its first, a middle and its last byte, a
 * different bit each) and the load must name that tensor and change
 * nothing.  CRC-32C detects every 1-bit error, so no flip may slip through. */
static void test_bit_flips(void) {
    tiny_mlp a, b;
    tiny_mlp_init(&a, 20);
    tiny_mlp_init(&b, 21);
    ag_optim_config adam;
    ag_optim_parse("adam", &adam);
    ag_optimizer o, ob;
    ag_optim_init(&o, &a.ps, &adam);
    ag_optim_init(&ob, &b.ps, &adam);
    ag_sched_config sc;
    ag_sched_parse("step:step_size=2", &sc);
    ag_scheduler s, sb;
    ag_sched_init(&s, &sc);
    ag_sched_init(&sb, &sc);
    ag_train_state ts = {0}, tb;
    ag_rng_seed(&ts.rng, 5);
    train(&a, &o, &s, &ts, 4, (double[4]){0});
    char good[256], bad[256];
    strcpy(good, path_of("intact.safetensors"));
    strcpy(bad, path_of("flipped.safetensors"));
    CHECK(ag_checkpoint_save(good, &a.ps, &o, &s, &ts) == AG_OK, "%s", ag_errmsg());
    ag_st_file f;
    CHECK(ag_st_read(good, &f) == AG_OK && f.unchecked == 0, "%s (unchecked %d)", ag_errmsg(), f.unchecked);
    int flips = 0, params = 0, slots = 0;
    for (int i = 0; i < f.count; i++) {
        const ag_st_tensor *t = &f.tensors[i];
        size_t at = (size_t)((const unsigned char *)t->data - f.bytes), n = (size_t)t->numel * (t->dtype == AG_F64 || t->dtype == AG_I64 ? 8 : 4);
        params += ag_params_find(&a.ps, t->name) != NULL;
        slots += !strncmp(t->name, "optim.adam.", 11);
        size_t where[3] = {0, n / 2, n - 1};
        for (int k = 0; k < 3 && n; k++) {
            f.bytes[at + where[k]] ^= (unsigned char)(1u << (3 * k + i) % 8);
            FILE *out = fopen(bad, "wb");
            fwrite(f.bytes, 1, f.size, out);
            fclose(out);
            f.bytes[at + where[k]] ^= (unsigned char)(1u << (3 * k + i) % 8);
            char what[160];
            snprintf(what, sizeof what, "tensor '%s' (", t->name);
            expect_refused(bad, &b.ps, &ob, &sb, &tb, AG_ERR_FORMAT, what);
            CHECK(strstr(ag_errmsg(), "is damaged"), "%s", ag_errmsg());
            flips++;
        }
    }
    CHECK(params == a.ps.count && slots == 2 * a.ps.count && flips >= 3 * (3 * a.ps.count + 2),
          "%d params, %d slots, %d flips", params, slots, flips);
    /* a flipped bit in a checksum itself, or a checksum of no tensor: refused too */
    const char *ck = strstr((const char *)f.bytes + 8, "\"crc32c.l1.weight\":\"");
    CHECK(ck != NULL);
    if (ck) {
        size_t at = (size_t)((const unsigned char *)ck - f.bytes) + strlen("\"crc32c.l1.weight\":\"");
        for (int k = 0; k < 2; k++) {
            unsigned char was = f.bytes[at];
            f.bytes[at] = k ? 'G' : (was == '0' ? '1' : '0'); /* another digit, then no hex digit */
            FILE *out = fopen(bad, "wb");
            fwrite(f.bytes, 1, f.size, out);
            fclose(out);
            f.bytes[at] = was;
            expect_refused(bad, &b.ps, NULL, NULL, NULL, AG_ERR_FORMAT, k ? "is not a CRC-32C" : "tensor 'l1.weight' (");
        }
        f.bytes[at - 4] = 'X'; /* "crc32c.l1.weighX": the checksum of a tensor the file lacks */
        FILE *out = fopen(bad, "wb");
        fwrite(f.bytes, 1, f.size, out);
        fclose(out);
        expect_refused(bad, &b.ps, NULL, NULL, NULL, AG_ERR_FORMAT, "a tensor the file does not hold");
    }
    ag_st_close(&f);
    CHECK(ag_checkpoint_load(good, &b.ps, &ob, &sb, &tb) == AG_OK && same_params(&a.ps, &b.ps), "%s", ag_errmsg());
    ag_optim_free(&o), ag_optim_free(&ob);
    ag_params_free(&a.ps), ag_params_free(&b.ps);
}

/* ---- integrity: every single flipped bit of the header is refused ---- */

/* The whole file is sealed (AG_ST_FILE_CRC), so the header - its length,
 * the JSON, the config, a metrics history, every key and checksum - is
 * covered too: each of its bits flipped alone must make the file unreadable
 * (a parse error or a failed checksum), never load with another config, a
 * changed history or an unverified tensor. */
static void test_header_bit_flips(void) {
    tiny_mlp a;
    tiny_mlp_init(&a, 22);
    ag_optim_config sgd;
    ag_optim_parse("sgd:lr=0.1", &sgd);
    ag_optimizer o;
    ag_optim_init(&o, &a.ps, &sgd);
    ag_train_state ts = {.step = 7, .epoch = 2};
    ag_rng_seed(&ts.rng, 9);
    snprintf(ts.config, sizeof ts.config, "model=mpsan dim=8 l2=1e-07 keep=0.7");
    const char *meta[] = {"metrics.jsonl", "{\"epoch\":1,\"train\":{\"loss\":1.25}}\n", NULL};
    ts.meta = meta;
    const char *good = path_of("header.safetensors");
    CHECK(ag_checkpoint_save(good, &a.ps, &o, NULL, &ts) == AG_OK, "%s", ag_errmsg());
    ag_st_file f;
    if (ag_st_read(good, &f) != AG_OK) {
        CHECK(0, "%s", ag_errmsg());
        return;
    }
    CHECK(ag_st_meta(&f, AG_ST_FILE_CRC) && ag_st_meta(&f, "metrics.jsonl") && ag_st_meta(&f, "config"));
    size_t header = 8;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | f.bytes[i];
    header += (size_t)n;
    int flips = 0, loaded = 0;
    for (size_t at = 0; at < header; at++)
        for (int bit = 0; bit < 8; bit++) {
            f.bytes[at] ^= (unsigned char)(1u << bit);
            ag_st_file g;
            if (ag_st_parse("flipped", f.bytes, f.size, &g) == AG_OK) {
                if (loaded++ < 5) CHECK(0, "byte %zu bit %d of the %zu-byte header: loaded", at, bit, header);
                ag_st_close(&g);
            }
            f.bytes[at] ^= (unsigned char)(1u << bit);
            flips++;
        }
    CHECK(loaded == 0 && flips == 8 * (int)header, "%d of %d flips loaded", loaded, flips);
    ag_st_close(&f);
    ag_optim_free(&o);
    ag_params_free(&a.ps);
}

int main(void) {
    strcpy(dir, "/tmp/ag_checkpoint.XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_other_real_type();
    test_determinism();
    test_resume();
    test_changed_settings();
    test_refusals();
    test_bit_flips();
    test_header_bit_flips();
    DIR *d = opendir(dir);
    char p[512];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') snprintf(p, sizeof p, "%s/%s", dir, e->d_name), unlink(p);
    if (d) closedir(d);
    rmdir(dir);
    ag_shutdown();
    return check_summary(IS_F64 ? "test_checkpoint_f64" : "test_checkpoint_f32");
}
