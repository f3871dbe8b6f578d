/* test_relatedness.c - SICK relatedness (docs/models.md, MPSAN) beyond the gradient
 * check of mpsan/relatedness in test_models: Tai et al.'s target and the
 * predicted score, MPSAN's relatedness head against a transcription of its
 * equations, symmetry in the two sentences, the loss as a KL divergence,
 * the tasks each model kind declares and the refusal of the others, and
 * training steps that allocate nothing. */
#include "model_util.h"

#include <math.h>

enum { K = AG_RELATEDNESS_BINS, MAXD = 16 };

/* ---- target and score ---- */

static void test_target(void) {
    const float y[] = {3.6f, 1.0f, 5.0f, 4.75f, 2.0f, 1.25f};
    const double want[][K] = {
        {0, 0, 0.4, 0.6, 0}, {1, 0, 0, 0, 0}, {0, 0, 0, 0, 1}, /* y = 5: one-hot on the last bin */
        {0, 0, 0, 0.25, 0.75}, {0, 1, 0, 0, 0}, {0.75, 0.25, 0, 0, 0},
    };
    ag_real t[6 * K];
    CHECK(ag_relatedness_target(y, 6, t) == AG_OK, "%s", ag_errmsg());
    for (int r = 0; r < 6; r++) {
        double mean = 0, mass = 0;
        for (int i = 0; i < K; i++) {
            CHECK_NEAR(t[r * K + i], want[r][i], 1e-6, 0); /* the scores are floats: 3.6f is not 3.6 */
            mean += (i + 1) * t[r * K + i], mass += t[r * K + i];
        }
        CHECK_NEAR(mean, y[r], 1e-12, 1e-12); /* the target's expected score is y itself */
        CHECK_NEAR(mass, 1, 1e-15, 0);
    }
    const float bad[][2] = {{3, 0.5f}, {3, 5.5f}, {3, NAN}};
    const char *text[] = {"0.5", "5.5", "nan"};
    for (int k = 0; k < 3; k++) {
        CHECK(ag_relatedness_target(bad[k], 2, t) == AG_ERR_ARG);
        CHECK(strstr(ag_errmsg(), text[k]) && strstr(ag_errmsg(), "row 1") && strstr(ag_errmsg(), "[1, 5]"), "%s",
              ag_errmsg());
    }
}

static void test_score(void) {
    CHECK_NEAR(ag_relatedness_score((ag_real[]){0, 0, 0, 0, 0}), 3, 1e-15, 0);
    CHECK_NEAR(ag_relatedness_score((ag_real[]){0, log(2.0), 0, 0, 0}), 17.0 / 6, 1e-15, 1e-15); /* p = (1,2,1,1,1)/6 */
    CHECK(ag_relatedness_score((ag_real[]){-1e4, -1e4, 0, 1e4, 1e4}) == 4.5, "two saturated bins");
    CHECK(ag_relatedness_score((ag_real[]){1e4, -1e4, -1e4, -1e4, -1e4}) == 1, "all mass on bin 1");
}

static void test_task_names(void) {
    for (int t = 0; t < AG_TASK_COUNT; t++) {
        ag_task back;
        CHECK(ag_task_parse(ag_task_name((ag_task)t), &back) == 0 && back == (ag_task)t, "%d", t);
    }
    ag_task t;
    CHECK(ag_task_parse("regression", &t) == -1);
    CHECK(!strcmp(ag_task_name(AG_TASK_RELATEDNESS), "relatedness"));
}

/* ---- the head against its equations ---- */

/* MPSAN's sentence vectors u [B, d] of b's first sentences (second: the
 * B sentences): a classifier with the relatedness model's encoder and an
 * identity head gives ELU(u), which is inverted here. */
static void sentence_vectors(ag_model *cls, const ag_batch *b, bool second, double u[][MAXD]) {
    ag_batch view = *b;
    if (second) view.tokens = b->tokens_b, view.lengths = b->lengths_b, view.width = b->width_b;
    int d = cls->cfg.dim;
    double y[2 * MAXD];
    model_logits(cls, &view, y);
    for (int r = 0; r < b->rows; r++)
        for (int j = 0; j < d; j++) {
            double v = y[r * d + j];
            u[r][j] = v > 0 ? v : log1p(v); /* ELU^-1 */
        }
}

static void test_head_reference(void) {
    const ag_model_kind *kind = ag_model_find("mpsan");
    ag_model_config c = ag_model_tiny(kind);
    c.task = AG_TASK_RELATEDNESS;
    ag_model m, cls;
    ag_model_init(&m, kind, &c);
    int d = c.dim;
    c.task = AG_TASK_CLASSIFY;
    c.classes = d;
    ag_model_init(&cls, kind, &c);
    for (int i = 0; i < cls.params.count; i++) { /* the encoder's, by name; the identity head */
        ag_tensor *p = cls.params.items[i], *q = ag_params_find(&m.params, p->name);
        bool head = !strncmp(p->name, "cls.", 4), weight = strstr(p->name, ".weight") != NULL;
        CHECK(head || q, "%s: no such parameter in the relatedness model", p->name);
        for (int64_t k = 0; k < p->size; k++)
            p->data[k] = !head ? q->data[k] : weight && k / d == k % d ? 1 : 0;
    }
    ag_batch b;
    ag_tiny_batch(&m, &b, 3);
    double ua[2][MAXD], ub[2][MAXD], logits[2 * K];
    sentence_vectors(&cls, &b, false, ua);
    sentence_vectors(&cls, &b, true, ub);
    model_logits(&m, &b, logits);
    const ag_real *w1 = ag_params_find(&m.params, "rel.hidden.weight")->data;
    const ag_real *b1 = ag_params_find(&m.params, "rel.hidden.bias")->data;
    const ag_real *w2 = ag_params_find(&m.params, "rel.out.weight")->data;
    const ag_real *b2 = ag_params_find(&m.params, "rel.out.bias")->data;
    for (int r = 0; r < b.rows; r++) {
        double f[2 * MAXD], h[MAXD];
        for (int j = 0; j < d; j++) f[j] = ua[r][j] * ub[r][j], f[d + j] = fabs(ua[r][j] - ub[r][j]);
        for (int j = 0; j < d; j++) {
            double z = b1[j];
            for (int l = 0; l < 2 * d; l++) z += f[l] * w1[l * d + j];
            h[j] = 1 / (1 + exp(-z));
        }
        for (int i = 0; i < K; i++) {
            double z = b2[i];
            for (int j = 0; j < d; j++) z += h[j] * w2[j * K + i];
            CHECK_NEAR(logits[r * K + i], z, 1e-12, 1e-10);
        }
    }
    ag_model_batch_free(&b);
    ag_model_free(&cls);
    ag_model_free(&m);
}

/* Parameters: the rel.* head replaces cls.*; sizes as docs/models.md's head. */
static void test_params(void) {
    ag_model_config c = ag_model_tiny(ag_model_find("mpsan"));
    c.task = AG_TASK_RELATEDNESS;
    ag_model m;
    ag_model_init(&m, ag_model_find("mpsan"), &c);
    int d = c.dim;
    struct {
        const char *name;
        int rows, cols;
    } want[] = {{"rel.hidden.weight", 2 * d, d}, {"rel.hidden.bias", d, 0}, {"rel.out.weight", d, K}, {"rel.out.bias", K, 0}};
    for (int i = 0; i < 4; i++) {
        ag_tensor *p = ag_params_find(&m.params, want[i].name);
        CHECK(p && p->shape[0] == want[i].rows && (want[i].cols ? p->ndim == 2 && p->shape[1] == want[i].cols : p->ndim == 1),
              "%s", want[i].name);
    }
    for (int i = 0; i < m.params.count; i++)
        CHECK(strncmp(m.params.items[i]->name, "cls.", 4), "%s in a relatedness model", m.params.items[i]->name);
    ag_model_free(&m);
}

/* ---- loss, symmetry, errors ---- */

static void test_loss_and_symmetry(void) {
    const ag_model_kind *kind = ag_model_find("mpsan");
    ag_model_config c = ag_model_tiny(kind);
    c.task = AG_TASK_RELATEDNESS;
    ag_model m;
    ag_model_init(&m, kind, &c);
    ag_batch b, swapped;
    ag_tiny_batch(&m, &b, 3);
    double logits[2 * K], logits_swapped[2 * K];
    model_logits(&m, &b, logits);
    swapped = b;
    swapped.tokens = b.tokens_b, swapped.lengths = b.lengths_b;
    swapped.tokens_b = b.tokens, swapped.lengths_b = b.lengths;
    model_logits(&m, &swapped, logits_swapped);
    for (int i = 0; i < 2 * K; i++) CHECK_NEAR(logits_swapped[i], logits[i], 1e-14, 1e-13); /* the features are symmetric */

    /* the loss: the mean over rows of KL(target(y) || softmax(logits)) */
    double kl = 0;
    for (int r = 0; r < 2; r++) {
        ag_real t[K];
        CHECK(ag_relatedness_target(&b.scores[r], 1, t) == AG_OK);
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < K; i++) mx = fmax(mx, logits[r * K + i]);
        for (int i = 0; i < K; i++) s += exp(logits[r * K + i] - mx);
        for (int i = 0; i < K; i++)
            if (t[i] > 0) kl += t[i] * (log(t[i]) - (logits[r * K + i] - mx - log(s))) / 2;
    }
    CHECK_NEAR(ag_item(ag_model_loss(&m, &b, false)), kl, 1e-14, 1e-12);
    ag_step_end();

    /* a score outside [1, 5]: no loss, a message */
    b.scores[1] = 7;
    CHECK(ag_model_loss(&m, &b, false) == NULL && strstr(ag_errmsg(), "score 7"), "%s", ag_errmsg());
    ag_step_end();
    b.scores[1] = 1.7f;

    check_steady_state(&m, &b);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* Every kind says which tasks it has a head for, and forward refuses the rest. */
static void test_kind_tasks(void) {
    struct {
        const char *model;
        unsigned tasks;
    } want[] = {
        {"mpsan", AG_TASK_BIT(AG_TASK_CLASSIFY) | AG_TASK_BIT(AG_TASK_RELATEDNESS)},
        {"ms_san", AG_TASK_BIT(AG_TASK_CLASSIFY) | AG_TASK_BIT(AG_TASK_PAIR)},
        {"dual_axial", AG_TASK_BIT(AG_TASK_CLASSIFY)},
        {"mtsa", AG_TASK_BIT(AG_TASK_CLASSIFY)},
        {"poslm", AG_TASK_BIT(AG_TASK_LM)},
    };
    int n = 0;
    for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++, n++) CHECK((*k)->tasks != 0, "%s", (*k)->name);
    CHECK(n == 5, "%d kinds: add the new one here", n);
    for (int i = 0; i < 5; i++) {
        const ag_model_kind *kind = ag_model_find(want[i].model);
        CHECK(kind && kind->tasks == want[i].tasks, "%s: tasks %#x", want[i].model, kind ? kind->tasks : 0);
        CHECK(ag_model_supports(kind, ag_model_defaults(kind).task), "%s: its own task", want[i].model);
    }
    char buf[64];
    CHECK(!strcmp(ag_model_tasks_str(ag_model_find("mpsan"), buf, sizeof buf), "classify, relatedness"), "%s", buf);

    /* mpsan given pairs to classify: refused, not sentence A alone */
    const ag_model_kind *mpsan = ag_model_find("mpsan");
    ag_model_config c = ag_model_tiny(mpsan);
    c.task = AG_TASK_PAIR;
    ag_model m;
    ag_model_init(&m, mpsan, &c);
    ag_batch b;
    ag_tiny_batch(&m, &b, 3);
    CHECK(ag_model_forward(&m, &b, false) == NULL);
    CHECK(strstr(ag_errmsg(), "mpsan") && strstr(ag_errmsg(), "pair") && strstr(ag_errmsg(), "classify, relatedness"),
          "%s", ag_errmsg());
    CHECK(ag_model_loss(&m, &b, false) == NULL);
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);

    const ag_model_kind *mtsa = ag_model_find("mtsa");
    c = ag_model_tiny(mtsa);
    c.task = AG_TASK_RELATEDNESS;
    ag_model_init(&m, mtsa, &c);
    ag_tiny_batch(&m, &b, 3);
    CHECK(ag_model_forward(&m, &b, false) == NULL && strstr(ag_errmsg(), "mtsa has no head for the relatedness task"),
          "%s", ag_errmsg());
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* docs/models.md's SICK settings as the defaults of the task. */
static void test_defaults(void) {
    ag_model_config c = ag_model_task_defaults(ag_model_find("mpsan"), AG_TASK_RELATEDNESS);
    CHECK(c.task == AG_TASK_RELATEDNESS && c.keep == 0.55 && c.l2 == 5e-4);
    CHECK(!strcmp(c.optim, "adadelta:lr=0.7,rho=0.95,eps=1e-6"), "%s", c.optim);
    c = ag_model_defaults(ag_model_find("mpsan"));
    CHECK(c.task == AG_TASK_CLASSIFY && c.keep == 0.7 && c.l2 == 1e-7);
}

int main(void) {
    test_target();
    test_score();
    test_task_names();
    test_head_reference();
    test_params();
    test_loss_and_symmetry();
    test_kind_tasks();
    test_defaults();
    ag_shutdown();
    return check_summary("test_relatedness");
}
