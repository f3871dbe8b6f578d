/* test_dual_axial.c - the dual-axial model (docs/models.md, dual-axial) beyond its
 * gradient check: its logits against a naive loop transcription of the
 * equations (every FLAG), independence of an example's logits from the
 * rest of the batch and from anything beyond its length, the bigram row 0
 * that must stay zero through training, --bigrams 0 as no bigram embedding,
 * a batch of the wrong width, a batch too big for memory, training steps
 * that allocate nothing, and a step that never holds an [L,L,d] tensor. */
#include "model_util.h"
#include "attngrad/train.h"
#include "../train/internal.h"

#include <math.h>
#include <unistd.h>

enum { MAXL = 8, MAXD = 8 };

static double softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }
static double sigmoid(double x) { return 1 / (1 + exp(-x)); }
static const double *P(const ag_model *m, const char *name) { return ag_params_find(&m->params, name)->data; }

/* rows[n][m] -> out[n][m] of the light multi-dimensional self-attention:
 * a[q,k] = softplus(Q_q.K_k) (or softmax over k < n_keys) * weight(q,k),
 * out = softplus(sum_k a[q,k] V_k) * rows.  W* are [m,m]. */
static void axial(int n, int m, const double rows[MAXD][MAXD], const double *wq, const double *wk,
                  const double *wv, bool softmax, int n_keys, double (*weight)(int q, int k, int n_keys),
                  double out[MAXD][MAXD]) {
    double Q[MAXD][MAXD] = {{0}}, K[MAXD][MAXD] = {{0}}, V[MAXD][MAXD] = {{0}};
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++)
            for (int l = 0; l < m; l++) {
                Q[i][j] += rows[i][l] * wq[l * m + j];
                K[i][j] += rows[i][l] * wk[l * m + j];
                V[i][j] += rows[i][l] * wv[l * m + j];
            }
    for (int q = 0; q < n; q++) {
        double s[MAXD], a[MAXD], mx = -INFINITY, z = 0;
        for (int k = 0; k < n; k++) {
            s[k] = 0;
            for (int j = 0; j < m; j++) s[k] += Q[q][j] * K[k][j];
            if (k < n_keys && s[k] > mx) mx = s[k];
        }
        for (int k = 0; k < n; k++) z += k < n_keys ? exp(s[k] - mx) : 0;
        for (int k = 0; k < n; k++) a[k] = (softmax ? (k < n_keys ? exp(s[k] - mx) / z : 0) : softplus(s[k])) *
                                           weight(q, k, n_keys);
        for (int j = 0; j < m; j++) {
            double w = 0;
            for (int k = 0; k < n; k++) w += a[k] * V[k][j];
            out[q][j] = softplus(w) * rows[q][j];
        }
    }
}

static double zeta_valid(int q, int k, int len) { return k < len ? 1 / log(M_E * abs(q - k) + M_E) : 0; }
static double valid_only(int q, int k, int len) { return (void)q, k < len ? 1 : 0; }
static double every_key(int q, int k, int len) { return (void)q, (void)k, (void)len, 1; }

/* The logits of row i, straight from docs/models.md, dual-axial. */
static void reference_logits(const ag_model *m, const ag_batch *b, int i, double *logits) {
    const ag_model_config *c = &m->cfg;
    int d = c->dim, L = c->fixed_len, K = c->classes, len = b->lengths[i];
    bool softmax = c->flags & AG_FLAG_SOFTMAX;
    double x[MAXD][MAXD] = {{0}}, y[MAXD][MAXD] = {{0}}, ht[MAXD][MAXD], hfT[MAXD][MAXD];
    for (int t = 0; t < len; t++) {
        int w = b->tokens[i * L + t], bi = (c->flags & AG_FLAG_NO_BIGRAM) ? 0 : b->bigrams[i * L + t];
        for (int j = 0; j < d; j++)
            x[t][j] = P(m, "embed.weight")[w * d + j] + (bi ? P(m, "bigram.weight")[bi * d + j] : 0);
    }
    axial(L, d, x, P(m, "text.wq"), P(m, "text.wk"), P(m, "text.wv"), softmax, len,
          (c->flags & AG_FLAG_NO_ZETA) ? valid_only : zeta_valid, ht);
    double sum[MAXD] = {0};
    if (c->flags & AG_FLAG_TEXT_ONLY) {
        for (int q = 0; q < len; q++)
            for (int j = 0; j < d; j++) sum[j] += ht[q][j] / len;
    } else {
        for (int t = 0; t < L; t++)
            for (int j = 0; j < d; j++) y[j][t] = x[t][j];
        axial(d, L, y, P(m, "feat.wq"), P(m, "feat.wk"), P(m, "feat.wv"), softmax, d, every_key, hfT);
        for (int q = 0; q < len; q++)
            for (int j = 0; j < d; j++) {
                double z = P(m, "gate.b")[j], htq = ht[q][j] / len;
                for (int l = 0; l < d; l++)
                    z += hfT[l][q] * P(m, "gate.wf")[l * d + j] + ht[q][l] / len * P(m, "gate.wt")[l * d + j];
                double f = sigmoid(z);
                sum[j] += f * htq + (1 - f) * hfT[j][q];
            }
    }
    double hidden[MAXD];
    for (int j = 0; j < d; j++) {
        double z = P(m, "cls.hidden.bias")[j];
        for (int l = 0; l < d; l++) z += tanh(sum[l]) * P(m, "cls.hidden.weight")[l * d + j];
        hidden[j] = sigmoid(z);
    }
    for (int k = 0; k < K; k++) {
        logits[k] = P(m, "cls.out.bias")[k];
        for (int l = 0; l < d; l++) logits[k] += hidden[l] * P(m, "cls.out.weight")[l * K + k];
    }
}

static ag_model tiny_model(unsigned flags) {
    const ag_model_kind *kind = ag_model_find("dual_axial");
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.flags |= flags; /* d 4 != L 5: a transposed feature axis cannot pass by luck */
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    return m;
}

static void against_reference(unsigned flags, const char *label) {
    ag_model m = tiny_model(flags);
    ag_batch b;
    ag_tiny_batch(&m, &b, 11);
    double got[2 * 3], want[3];
    model_logits(&m, &b, got);
    double worst = 0;
    for (int i = 0; i < b.rows; i++) {
        reference_logits(&m, &b, i, want);
        for (int k = 0; k < m.cfg.classes; k++) {
            CHECK_NEAR(got[i * m.cfg.classes + k], want[k], 1e-12, 1e-10);
            worst = check_worst(worst, fabs(got[i * m.cfg.classes + k] - want[k]));
        }
    }
    printf("  reference %-12s max |logit diff| %.1e\n", label, worst);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* An example's logits depend on nothing but its own tokens up to its length. */
static void independence(unsigned flags) {
    ag_model m = tiny_model(flags);
    check_independence(&m, m.cfg.n_bigram);
    ag_model_free(&m);
}

/* Bigram id 0 ("no bigram") gets no gradient, so its row stays exactly zero
 * through Adam steps while the other rows learn. */
static void bigram_row_zero(void) {
    ag_model m = tiny_model(0);
    ag_batch b;
    ag_tiny_batch(&m, &b, 17);
    ag_tensor *table = ag_params_find(&m.params, "bigram.weight");
    ag_optim_config oc;
    CHECK(ag_optim_parse(m.cfg.optim, &oc) == AG_OK, "%s", ag_errmsg());
    ag_optimizer opt;
    CHECK(ag_optim_init(&opt, &m.params, &oc) == AG_OK);
    int used = b.bigrams[0], d = table->shape[1]; /* a bigram of a valid position */
    CHECK(used != 0);
    double before = table->data[used * d];
    for (int step = 0; step < 3; step++) {
        ag_params_zero_grad(&m.params);
        ag_backward(ag_model_loss(&m, &b, true));
        for (int j = 0; j < d; j++) CHECK(table->grad[j] == 0, "grad of row 0 [%d] = %g", j, table->grad[j]);
        ag_optim_step(&opt);
        ag_step_end();
    }
    for (int j = 0; j < d; j++) CHECK(table->data[j] == 0, "row 0 [%d] = %g", j, table->data[j]);
    CHECK(table->data[used * d] != before, "a used row learns, so the test is not vacuous");
    CHECK(m.cfg.optim && strstr(m.cfg.optim, "adam") && oc.lr == 1e-3 && oc.beta1 == 0.9 && oc.beta2 == 0.999);
    ag_optim_free(&opt);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* Bytes of step arena for one forward and backward, B = 1, L = d = n, the
 * whole width valid (the arena's high-water mark only grows: call with
 * growing n, before larger steps). */
static size_t step_bytes(int n) {
    const ag_model_kind *kind = ag_model_find("dual_axial");
    ag_model_config c = ag_model_defaults(kind);
    c.vocab = 50, c.classes = 3, c.n_bigram = 64;
    c.dim = c.fixed_len = n;
    ag_model m;
    CHECK(ag_model_init(&m, kind, &c) == AG_OK, "%s", ag_errmsg());
    ag_batch b;
    ag_model_batch_alloc(&m, 1, n, &b);
    b.lengths[0] = n;
    for (int t = 0; t < n; t++) b.tokens[t] = 2 + t % (c.vocab - 2);
    for (int t = 0; t + 1 < n; t++) b.bigrams[t] = ag_bigram_id(b.tokens[t], b.tokens[t + 1], c.n_bigram);
    ag_backward(ag_model_loss(&m, &b, true));
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
    return ag_memstats().arena_high;
}

/* A step holds [L,L], [L,d] and [d,d] tensors, never [L,L,d] or [L,d,d]
 * (docs/models.md: one score per pair along each axis): doubling L and d
 * together multiplies its memory by about 4.  One such cube would add
 * 8 c - 4 c = 4 c over that, c being its size at n/2; the check allows half
 * of it, as test_mtsa's does. */
static void no_cube(void) {
    size_t prev = 0, prev_cube = 0;
    for (int n = 16; n <= 128; n *= 2) {
        size_t used = step_bytes(n), cube = (size_t)n * n * n * sizeof(ag_real);
        printf("  L = d = %3d: arena %9zu bytes, one [L,L,d] tensor %9zu\n", n, used, cube);
        if (prev)
            CHECK(used <= 4 * prev + 2 * prev_cube, "L = d = %d: %zu bytes after %zu at n/2 (one cube there: %zu)", n,
                  used, prev, prev_cube);
        prev = used, prev_cube = cube;
    }
}

/* A batch wider than fixed_len cannot fit the feature axis' [L,L] maps. */
static void wrong_width(void) {
    ag_model m = tiny_model(0);
    ag_batch_opts o = {0};
    m.kind->batch_opts(&m.cfg, &o);
    CHECK(o.fixed_len == 5 && o.n_bigram == 10);
    ag_batch b;
    ag_tiny_batch(&m, &b, 19);
    enum { W = 4 }; /* narrower: the first W columns of every row */
    for (int i = 0; i < b.rows; i++) {
        memmove(b.tokens + i * W, b.tokens + i * b.width, W * sizeof *b.tokens);
        memmove(b.bigrams + i * W, b.bigrams + i * b.width, W * sizeof *b.bigrams);
        if (b.lengths[i] > W) b.lengths[i] = W;
    }
    b.width = W;
    EXPECT_FATAL(ag_model_forward(&m, &b, false), "ag_linear", "[2,4,4]", "[5,5]");
    ag_model_batch_free(&b);
    ag_model_free(&m);

    m = tiny_model(AG_FLAG_NO_BIGRAM);
    m.kind->batch_opts(&m.cfg, &o);
    CHECK(o.n_bigram == 0 && !ag_params_find(&m.params, "bigram.weight"));
    ag_model_free(&m);
}

/* --bigrams 0 means no bigram embedding, as the no_bigram flag: no table, a
 * batch without ids, the same draws and logits, and gradcheck and dump-step
 * work (they ended in "id 0 out of range [0, 0)").  One bucket would hold only
 * row 0 ("no bigram"): refused with a message naming the option. */
static void zero_bigram_buckets(void) {
    const ag_model_kind *kind = ag_model_find("dual_axial");
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.n_bigram = 0;
    ag_model m, flagged = tiny_model(AG_FLAG_NO_BIGRAM);
    CHECK(ag_model_init(&m, kind, &cfg) == AG_OK, "%s", ag_errmsg());
    ag_batch_opts o = {0};
    m.kind->batch_opts(&m.cfg, &o);
    CHECK(o.n_bigram == 0 && !ag_params_find(&m.params, "bigram.weight"));
    ag_batch b;
    ag_tiny_batch(&m, &b, 29);
    double got[2 * 3], want[2 * 3];
    model_logits(&m, &b, got);
    model_logits(&flagged, &b, want);
    for (int i = 0; i < 2 * 3; i++) CHECK(got[i] == want[i], "logit %d: %g, with no_bigram %g", i, got[i], want[i]);
    ag_model_batch_free(&b);
    ag_model_free(&m);
    ag_model_free(&flagged);

    cfg.n_bigram = 1;
    CHECK(ag_model_init(&m, kind, &cfg) == AG_ERR_ARG && strstr(ag_errmsg(), "--bigrams 1"), "%s", ag_errmsg());

    char err[512], path[] = "/tmp/ag_dual_axial_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    FILE *devnull = fopen("/dev/null", "w");
    ag_train_opts opts = ag_train_opts_default();
    CHECK(ag_train_set(&opts, "model", "dual_axial", err, sizeof err) == 0, "%s", err);
    CHECK(ag_train_set(&opts, "bigrams", "0", err, sizeof err) == 0, "%s", err);
    CHECK(ag_model_gradcheck(&opts, devnull, err, sizeof err) == 1, "gradcheck --bigrams 0: %s", err);
    CHECK(ag_dump_step(&opts, path, err, sizeof err) == 0, "dump-step --bigrams 0: %s", err);
    CHECK(ag_train_set(&opts, "bigrams", "1", err, sizeof err) == 0, "%s", err);
    err[0] = 0;
    CHECK(ag_model_gradcheck(&opts, devnull, err, sizeof err) < 0 && strstr(err, "--bigrams 1"), "%s", err);
    fclose(devnull);
    unlink(path);
}

/* A batch that cannot be had ends in the fatal handler with a message, not
 * with NULL arrays a forward then dereferences.  (ASan's allocator reports
 * such a size itself instead of returning NULL.) */
static void batch_too_big(void) {
#if !defined(__SANITIZE_ADDRESS__) && !defined(__has_feature)
    ag_model m = tiny_model(0);
    ag_batch b;
    EXPECT_FATAL(ag_model_batch_alloc(&m, 1 << 24, 1 << 30, &b), "out of memory", "16777216 rows");
    ag_model_free(&m);
#endif
}

int main(void) {
    static const struct { unsigned flags; const char *label; } variants[] = {
        {0, "default"},
        {AG_FLAG_NO_BIGRAM, "no_bigram"},
        {AG_FLAG_SOFTMAX, "softmax"},
        {AG_FLAG_NO_ZETA, "no_zeta"},
        {AG_FLAG_TEXT_ONLY, "text_only"},
        {AG_FLAG_SOFTMAX | AG_FLAG_NO_ZETA | AG_FLAG_TEXT_ONLY, "all"},
    };
    no_cube(); /* first: it reads the arena's high-water mark */
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        against_reference(variants[i].flags, variants[i].label);
        independence(variants[i].flags);
    }
    bigram_row_zero();
    zero_bigram_buckets();
    wrong_width();
    batch_too_big();
    for (size_t i = 0; i < sizeof variants / sizeof *variants; i++) {
        ag_model m = tiny_model(variants[i].flags);
        m.cfg.keep = 0.8; /* exercise the optional classifier dropout too */
        ag_batch b;
        ag_tiny_batch(&m, &b, 23);
        check_steady_state(&m, &b);
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
    ag_shutdown();
    return check_summary("test_dual_axial");
}
