/* test_models.c - every registered model at docs/models.md's tiny sizes, in f64:
 * a gradient check of every parameter, at the tiny init and drawn wide
 * (every gradient resolved or zero), padding invariance (extra pad
 * columns change nothing) and finiteness, for each variant in the tables
 * below and for any other registered kind at its defaults; the gradient
 * check again on a batch with a one-word sentence, and in training mode,
 * dropout on with fixed masks.  Optional argument: a model name. */
#include "model_util.h" /* verify_small_gradients */

#include <stdlib.h>
#include <string.h>

typedef struct {
    ag_model *m;
    ag_batch *b;
    bool training; /* dropout on, every call drawing its masks from rng */
    ag_rng rng;
} loss_ctx;

static ag_tensor *tiny_loss(void *p) {
    loss_ctx *c = p;
    if (c->training) c->m->rng = c->rng; /* the same masks at every evaluation */
    return ag_model_loss(c->m, c->b, c->training);
}

/* Every parameter's gradient against central differences of c's loss.
 * wide: every parameter drawn from U(-1, 1) first.  At the tiny init
 * (weights ~0.1, embeddings U(-0.05, 0.05)) many gradients are 1e-9 to
 * 1e-11 (MPSAN's query vectors v and scalars b reach a softmax over keys
 * only through the tanh's curvature; the LM's positional LSTM), where any
 * value passes; drawn wide, every gradient is either resolved (>= 1e-6)
 * or zero by the model's structure (a bias added before a softmax over
 * positions), verified (verify_small_gradients in model_util.h: its
 * analytic gradient roundoff, the loss unmoved when it moves far), and
 * the check requires it.  A gradient zero only around the draw is
 * checked again at a second, where it must resolve. */
static void check_params(loss_ctx *c, const char *label, bool wide) {
    ag_params *ps = &c->m->params;
    if (wide) ag__params_draw_wide(ps, 11);
    double worst = 0, smallest = INFINITY;
    ag_gradcheck_result *res = calloc((size_t)ps->count + 1, sizeof *res);
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        o.max_checks = 64;
        ag_gradcheck_result r = res[i] = ag_gradcheck(tiny_loss, c, &p, 1, &o);
        worst = check_worst(worst, r.max_rel_err);
        if (getenv("VERBOSE"))
            printf("    %-24s rel %.2e abs %.2e |g| %.2e (a %.3e n %.3e)\n", p->name, r.max_rel_err, r.max_abs_err,
                   r.max_grad, r.analytic, r.numeric);
        CHECK(r.ok, "%s%s %s: element %lld analytic %.12g numeric %.12g", label, wide ? " (wide)" : "", p->name,
              (long long)r.worst_index, r.analytic, r.numeric);
        if (r.max_grad > AG__ZERO_GRAD) smallest = fmin(smallest, r.max_grad);
        ag_step_end();
    }
    if (wide) {
        zero_classes z;
        verify_small_gradients(ps, tiny_loss, c, res, 64, label, &z);
        printf("  %-28s %3d params  worst rel err %.2e  drawn wide: smallest gradient %.1e, zero (invariant):%s%s%s\n",
               label, ps->count, worst, smallest, *z.zero ? z.zero : " none",
               *z.redrawn ? "; zero at this draw only, resolved at a second:" : "", z.redrawn);
    } else {
        printf("  %-28s %3d params  worst rel err %.2e\n", label, ps->count, worst);
    }
    free(res);
}

static bool in_table(const char *name);

/* A model of cfg on the tiny batch: every parameter's gradient; in
 * training mode with dropout on, after checking that the saved rng state
 * does repeat the masks and that they act on the loss. */
static void gradcheck_config(const ag_model_kind *kind, const ag_model_config *cfg, bool training, const char *label) {
    ag_model m;
    if (ag_model_init(&m, kind, cfg) != AG_OK) {
        CHECK(false, "%s: init: %s", label, ag_errmsg());
        return;
    }
    ag_batch b;
    ag_tiny_batch(&m, &b, 3);
    loss_ctx c = {&m, &b, training, m.rng};
    if (training) {
        double once = ag_item(tiny_loss(&c));
        ag_step_end();
        double again = ag_item(tiny_loss(&c));
        ag_step_end();
        double eval = ag_item(ag_model_loss(&m, &b, false));
        ag_step_end();
        CHECK(once == again, "%s: two evaluations from one rng state drew different masks (loss %.17g then %.17g): "
              "the training-mode gradcheck needs them equal", label, once, again);
        /* every model in the tables has dropout; a new kind may have none */
        CHECK(once != eval || !in_table(kind->name), "%s: dropout at keep %g left the loss at its eval value %.17g",
              label, cfg->keep, eval);
    }
    check_params(&c, label, false);
    check_params(&c, label, true);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* The edge cases the tiny batch lacks: a one-word sentence between a full
 * and a padded one (a pair's second sentences too, at other lengths), with
 * random words, chain heads, bigrams, labels, targets and scores. */
static void edge_batch(const ag_model *m, ag_batch *b) {
    enum { B = 3, N = 5 };
    static const int32_t lengths[B] = {5, 1, 3}, lengths_b[B] = {2, 4, 1};
    static const float scores[B] = {3.6f, 1.0f, 4.2f};
    ag_rng r;
    ag_rng_seed(&r, 5);
    ag_model_batch_alloc(m, B, N, b);
    int V = m->cfg.vocab;
    for (int i = 0; i < B; i++) {
        b->lengths[i] = lengths[i], b->lengths_b[i] = lengths_b[i], b->scores[i] = scores[i];
        b->labels[i] = (int32_t)(ag_rng_next(&r) % (uint64_t)m->cfg.classes);
        for (int t = 0; t < N; t++) {
            int k = i * N + t, n = lengths[i], nb = lengths_b[i];
            b->tokens[k] = t < n ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->tokens_b[k] = t < nb ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->targets[k] = t < n ? 2 + (int32_t)(ag_rng_next(&r) % (uint64_t)(V - 2)) : 0;
            b->heads[k] = t >= n ? AG_HEAD_PAD : t + 1 < n ? t + 1 : AG_HEAD_ROOT;
            b->heads_b[k] = t >= nb ? AG_HEAD_PAD : t + 1 < nb ? t + 1 : AG_HEAD_ROOT;
        }
        for (int t = 0; t + 1 < N; t++) {
            int k = i * N + t;
            if (t + 1 < lengths[i]) b->bigrams[k] = ag_bigram_id(b->tokens[k], b->tokens[k + 1], m->cfg.n_bigram);
            if (t + 1 < lengths_b[i])
                b->bigrams_b[k] = ag_bigram_id(b->tokens_b[k], b->tokens_b[k + 1], m->cfg.n_bigram);
        }
    }
}

/* Every gradient, drawn wide, on the edge batch: a one-word sentence's
 * rows (masks with one key or none, a pooling over one position, an LM
 * with one target) and padding beside it. */
static void gradcheck_edges(const ag_model_kind *kind, const ag_model_config *cfg, const char *label) {
    ag_model m;
    if (ag_model_init(&m, kind, cfg) != AG_OK) {
        CHECK(false, "%s: init: %s", label, ag_errmsg());
        return;
    }
    ag_batch b;
    edge_batch(&m, &b);
    loss_ctx c = {&m, &b, false, m.rng};
    double loss = ag_item(tiny_loss(&c));
    ag_step_end();
    CHECK(isfinite(loss), "%s: loss %g on a batch with a one-word sentence", label, loss);
    char name[64];
    snprintf(name, sizeof name, "%s (length 1)", label);
    check_params(&c, name, true);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

static void gradcheck_model(const ag_model_kind *kind, unsigned flags, ag_task task, int attention,
                            const char *label) {
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.flags |= flags;
    if (task) cfg.task = task;
    cfg.attention = attention;
    gradcheck_config(kind, &cfg, false, label);
    gradcheck_edges(kind, &cfg, label);
}

/* The training step's gradients, dropout on (keep 0.6; the LM's 0.7 between
 * LSTM layers too), each evaluation drawing the same masks from a saved
 * rng state.  The reference check against PyTorch runs with dropout off,
 * so this is what covers where the masks apply and how they scale the
 * gradients. */
static void gradcheck_training(const ag_model_kind *kind, int attention, const char *label) {
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.attention = attention;
    cfg.keep = 0.6;
    cfg.keep_layers = 0.7;
    char name[64];
    snprintf(name, sizeof name, "%s (dropout on)", label);
    gradcheck_config(kind, &cfg, true, name);
}

/* cfg.label_smoothing (train --label-smoothing): the training objective is
 * the cross-entropy of forward's logits against the smoothed target (the
 * LM's fused decoder included), evaluation's the plain loss, and its
 * gradient checks in training mode (dropout off: only the target moves). */
static void label_smoothing(const ag_model_kind *kind, const char *label) {
    ag_model_config cfg = ag_model_tiny(kind);
    if (cfg.task == AG_TASK_RELATEDNESS) return;
    cfg.keep = cfg.keep_layers = 1;
    cfg.label_smoothing = 0.1;
    ag_model m;
    if (ag_model_init(&m, kind, &cfg) != AG_OK) {
        CHECK(false, "%s: init: %s", label, ag_errmsg());
        return;
    }
    ag_batch b;
    ag_tiny_batch(&m, &b, 3);
    bool lm = cfg.task == AG_TASK_LM;
    double trained = ag_item(ag_model_loss(&m, &b, true)), plain = ag_item(ag_model_loss(&m, &b, false));
    ag_tensor *logits = ag_model_forward(&m, &b, false);
    double want = ag_item(ag_cross_entropy_smoothed(logits, lm ? b.targets : b.labels, lm ? 0 : -1, 0.1));
    double unsmoothed = ag_item(ag_model_loss_of(&m, &b, logits));
    ag_step_end();
    CHECK(fabs(trained - want) <= 1e-12 * fabs(want) && plain == unsmoothed && trained != plain,
          "%s, label smoothing 0.1: the training loss %.17g, of the logits %.17g; evaluation %.17g, plain %.17g", label,
          trained, want, plain, unsmoothed);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    char name[80];
    snprintf(name, sizeof name, "%s (label smoothing 0.1)", label);
    gradcheck_config(kind, &cfg, true, name);
}

/* The same examples padded to a wider batch give the same loss. */
static void padding_invariance(const ag_model_kind *kind, ag_task task, int attention) {
    ag_model_config cfg = ag_model_tiny(kind);
    if (task) cfg.task = task;
    cfg.attention = attention;
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    if (m.kind->batch_opts) {
        ag_batch_opts o = {0};
        m.kind->batch_opts(&m.cfg, &o);
        if (o.fixed_len) { /* a fixed-length model has no wider batch to compare with */
            ag_model_free(&m);
            return;
        }
    }
    ag_batch b, wide;
    ag_tiny_batch(&m, &b, 5);
    ag_tiny_batch(&m, &wide, 5);
    /* widen by 3 pad columns, copying every row */
    enum { W = 8 };
    int N = b.width;
    int32_t *arrays[][2] = {{b.tokens, NULL}, {b.tokens_b, NULL}, {b.targets, NULL}, {b.heads, NULL},
                            {b.heads_b, NULL}, {b.bigrams, NULL}, {b.bigrams_b, NULL}};
    int32_t **wide_arrays[] = {&wide.tokens, &wide.tokens_b, &wide.targets, &wide.heads,
                               &wide.heads_b, &wide.bigrams, &wide.bigrams_b};
    for (size_t a = 0; a < sizeof arrays / sizeof *arrays; a++) {
        int32_t *w = calloc((size_t)b.rows * W, sizeof *w);
        bool heads = a == 3 || a == 4;
        for (int r = 0; r < b.rows; r++)
            for (int t = 0; t < W; t++) w[r * W + t] = t < N ? arrays[a][0][r * N + t] : heads ? AG_HEAD_PAD : 0;
        free(*wide_arrays[a]);
        *wide_arrays[a] = w;
    }
    wide.width = wide.width_b = wide.max_width = W;
    double l1 = ag_item(ag_model_loss(&m, &b, false));
    ag_step_end();
    double l2 = ag_item(ag_model_loss(&m, &wide, false));
    ag_step_end();
    CHECK(isfinite(l1), "%s: loss %g", kind->name, l1);
    CHECK_NEAR(l2, l1, 1e-12, 1e-10);
    ag_model_batch_free(&b);
    ag_model_batch_free(&wide);
    ag_model_free(&m);
}

/* Parameter names are unique and every one of them gets a gradient path;
 * ag_model_shapes gives the same names and shapes, without data. */
static void names(const ag_model_kind *kind, ag_task task, int attention) {
    ag_model_config cfg = ag_model_tiny(kind);
    if (task) cfg.task = task;
    cfg.attention = attention;
    ag_model m, shapes;
    ag_model_init(&m, kind, &cfg);
    CHECK(m.params.count > 0);
    for (int i = 0; i < m.params.count; i++)
        for (int j = i + 1; j < m.params.count; j++)
            CHECK(strcmp(m.params.items[i]->name, m.params.items[j]->name) != 0);
    CHECK(ag_model_shapes(&shapes, kind, &cfg) == AG_OK && shapes.params.count == m.params.count, "%s", kind->name);
    for (int i = 0; i < m.params.count && i < shapes.params.count; i++) {
        const ag_tensor *a = m.params.items[i], *b = shapes.params.items[i];
        CHECK(!strcmp(a->name, b->name) && ag_same_shape(a, b) && !b->data && !b->grad, "%s: %s", kind->name, a->name);
    }
    ag_model_free(&shapes);
    ag_model_free(&m);
}

typedef struct {
    const char *model;
    unsigned flags;
    const char *label;
    int attention; /* LM: cfg.attention */
} variant;

static const variant variants[] = {
    {"mpsan", 0, "mpsan", 0},
    {"mpsan", AG_FLAG_ELU_SCORE, "mpsan/elu_score", 0},
    {"mpsan", AG_FLAG_LINEAR_DIST, "mpsan/linear_dist", 0},
    {"dual_axial", 0, "dual_axial", 0},
    {"dual_axial", AG_FLAG_NO_BIGRAM, "dual_axial/no_bigram", 0},
    {"dual_axial", AG_FLAG_SOFTMAX, "dual_axial/softmax", 0},
    {"dual_axial", AG_FLAG_NO_ZETA, "dual_axial/no_zeta", 0},
    {"dual_axial", AG_FLAG_TEXT_ONLY, "dual_axial/text_only", 0},
    {"ms_san", 0, "ms_san", 0},
    {"ms_san", AG_FLAG_NO_DIST, "ms_san/no_dist", 0},
    {"mtsa", 0, "mtsa", 0},
    {"mtsa", AG_FLAG_EXP_SCORE, "mtsa/exp_score", 0},
    {"poslm", 0, "poslm", 0},
    {"poslm", AG_FLAG_STRICT, "poslm/strict", 0},
    {"poslm", 0, "poslm/standard", AG_LM_STANDARD},
    {"poslm", 0, "poslm/none", AG_LM_NONE},
};

/* Variants that change the task (and with it the head) rather than a flag. */
static const struct {
    const char *model;
    ag_task task;
    const char *label;
} task_variants[] = {
    {"ms_san", AG_TASK_PAIR, "ms_san/pair"},
    {"mpsan", AG_TASK_RELATEDNESS, "mpsan/relatedness"},
};

static bool in_table(const char *name) {
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++)
        if (!strcmp(variants[i].model, name)) return true;
    return false;
}

/* A flag of another model is refused by name, never ignored; every flag the
 * kind lists builds. */
static void foreign_flags(const ag_model_kind *kind) {
    for (unsigned bit = 1; bit <= AG_FLAG_STRICT; bit <<= 1) {
        ag_model_config cfg = ag_model_tiny(kind);
        cfg.flags = bit;
        ag_model m;
        ag_status st = ag_model_init(&m, kind, &cfg);
        char name[32];
        ag_flags_str(bit, name, sizeof name);
        if (kind->flags & bit) {
            CHECK(st == AG_OK, "%s with its flag %s: %s", kind->name, name, ag_errmsg());
            if (st == AG_OK) ag_model_free(&m);
        } else {
            CHECK(st == AG_ERR_ARG && strstr(ag_errmsg(), kind->name) && strstr(ag_errmsg(), name),
                  "%s with flag %s: status %d, '%s'", kind->name, name, st, ag_errmsg());
        }
    }
}

int main(int argc, char **argv) {
    const char *only = argc > 1 ? argv[1] : NULL;
    /* A registered kind the table does not know yet (a new model) is still
     * checked, at its default flags: no model goes without a gradcheck. */
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) {
        if (in_table((*k)->name) || (only && strcmp(only, (*k)->name))) continue;
        gradcheck_model(*k, 0, 0, 0, (*k)->name);
        gradcheck_training(*k, 0, (*k)->name);
        padding_invariance(*k, 0, 0);
        names(*k, 0, 0);
    }
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++)
        if (!only || !strcmp(only, (*k)->name)) foreign_flags(*k), label_smoothing(*k, (*k)->name);
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        const ag_model_kind *kind = ag_model_find(variants[i].model);
        if (!kind || (only && strcmp(only, variants[i].model))) continue;
        gradcheck_model(kind, variants[i].flags, 0, variants[i].attention, variants[i].label);
        if (variants[i].flags == 0) {
            gradcheck_training(kind, variants[i].attention, variants[i].label);
            padding_invariance(kind, 0, variants[i].attention);
            names(kind, 0, variants[i].attention);
        }
    }
    for (size_t i = 0; i < sizeof task_variants / sizeof *task_variants; i++) {
        const ag_model_kind *kind = ag_model_find(task_variants[i].model);
        if (!kind || (only && strcmp(only, task_variants[i].model))) continue;
        gradcheck_model(kind, 0, task_variants[i].task, 0, task_variants[i].label);
        padding_invariance(kind, task_variants[i].task, 0);
        names(kind, task_variants[i].task, 0);
    }
    ag_shutdown();
    return check_summary("test_models");
}
