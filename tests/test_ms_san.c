/* test_ms_san.c - MS-SAN (docs/models.md, MS-SAN) beyond its gradient check: its
 * logits against a naive loop transcription of the equations (single
 * sentences and pairs, with and without distance priors), how far the tiny
 * gradient-check inputs sit from the ReLU/max/abs kinks, independence of an
 * example from the rest of the batch and from anything beyond its length,
 * bad parses, and training steps that allocate nothing. */
#include "model_util.h"

#include <math.h>

enum { MAXN = 8, MAXD = 16, HEADS = 6 };

typedef struct {
    const ag_model *m;
    double min_relu;  /* smallest |pre-activation| of a ReLU whose output is used */
    double min_max;   /* smallest gap between the two largest values of a max */
    double min_abs;   /* smallest |r_p - r_h| */
} ref;

static const double *P(const ref *r, const char *name) { return ag_params_find(&r->m->params, name)->data; }

static double relu(ref *r, double x) {
    r->min_relu = fmin(r->min_relu, fabs(x));
    return x > 0 ? x : 0;
}

/* y[n][out] = act(x[n][in] W + b); W [in,out], b may be NULL. */
static void dense(ref *r, int n, int in, int out, const double x[][MAXD], const char *w, const char *b, bool use_relu,
                  double y[][MAXD]) {
    for (int t = 0; t < n; t++)
        for (int j = 0; j < out; j++) {
            double z = b ? P(r, b)[j] : 0;
            for (int l = 0; l < in; l++) z += x[t][l] * P(r, w)[l * out + j];
            y[t][j] = use_relu ? relu(r, z) : z;
        }
}

/* The sentence representation [r_att ; r_max] (2d) of row i. */
static void encode(ref *r, const int32_t *tokens, const int32_t *heads, int len, double *out) {
    const ag_model_config *c = &r->m->cfg;
    int d = c->dim, H = c->hidden, dk = d / HEADS;
    double e[MAXN][MAXD], q[MAXN][MAXD], k[MAXN][MAXD], v[MAXN][MAXD], att[MAXN][MAXD] = {{0}};
    for (int t = 0; t < len; t++)
        for (int j = 0; j < d; j++) e[t][j] = P(r, "embed.weight")[tokens[t] * d + j];
    dense(r, len, d, d, e, "attn.wq", NULL, false, q);
    dense(r, len, d, d, e, "attn.wk", NULL, false, k);
    dense(r, len, d, d, e, "attn.wv", NULL, false, v);
    int32_t tree[MAXN * MAXN];
    CHECK(ag_tree_distance(heads, len, tree) == AG_OK);
    for (int h = 0; h < HEADS; h++)
        for (int a = 0; a < len; a++) {
            double s[MAXN], mx = -INFINITY, z = 0;
            for (int b = 0; b < len; b++) {
                bool allowed = h < 3 ? b <= a : b >= a;
                int prior = (c->flags & AG_FLAG_NO_DIST) ? 2 : h % 3; /* word, tree, none */
                double dist = prior == 0 ? abs(a - b) : prior == 1 ? tree[a * len + b] : 0;
                s[b] = -INFINITY;
                if (!allowed) continue;
                s[b] = -1.5 * dist;
                for (int j = 0; j < dk; j++) s[b] += q[a][h * dk + j] * k[b][h * dk + j] / sqrt(dk);
                mx = fmax(mx, s[b]);
            }
            for (int b = 0; b < len; b++) z += exp(s[b] - mx);
            for (int b = 0; b < len; b++)
                for (int j = 0; j < dk; j++) att[a][h * dk + j] += exp(s[b] - mx) / z * v[b][h * dk + j];
        }
    double o[MAXN][MAXD], ei[MAXN][MAXD], oo[MAXN][MAXD], f1[MAXN][MAXD], f2[MAXN][MAXD], g[MAXN][MAXD];
    dense(r, len, d, d, att, "attn.wo", NULL, false, o);
    dense(r, len, d, d, e, "gate.wi", NULL, false, ei);
    dense(r, len, d, d, o, "gate.wo", NULL, false, oo);
    dense(r, len, d, d, ei, "gate.w1", NULL, false, f1);
    dense(r, len, d, d, oo, "gate.w2", "gate.b", false, f2);
    for (int t = 0; t < len; t++)
        for (int j = 0; j < d; j++) {
            double f = 1 / (1 + exp(-(f1[t][j] + f2[t][j])));
            g[t][j] = f * ei[t][j] + (1 - f) * oo[t][j];
        }
    double inner[MAXN][MAXD], ffn[MAXN][MAXD], u[MAXN][MAXD], a1[MAXN][MAXD], a2[MAXN][MAXD];
    dense(r, len, d, H, g, "ffn.w1", "ffn.b1", true, inner);
    dense(r, len, H, d, inner, "ffn.w2", "ffn.b2", false, ffn);
    for (int t = 0; t < len; t++) {
        double mean = 0, var = 0;
        for (int j = 0; j < d; j++) mean += (g[t][j] + ffn[t][j]) / d;
        for (int j = 0; j < d; j++) var += pow(g[t][j] + ffn[t][j] - mean, 2) / d;
        for (int j = 0; j < d; j++)
            u[t][j] = (g[t][j] + ffn[t][j] - mean) / sqrt(var + 1e-6) * P(r, "ln.gamma")[j] + P(r, "ln.beta")[j];
    }
    dense(r, len, d, d, u, "pool.w1", "pool.b1", true, a1);
    dense(r, len, d, d, a1, "pool.w2", "pool.b2", false, a2);
    for (int j = 0; j < d; j++) {
        double mx = -INFINITY, second = -INFINITY, z = 0, s = 0;
        for (int t = 0; t < len; t++) mx = fmax(mx, a2[t][j]);
        for (int t = 0; t < len; t++) z += exp(a2[t][j] - mx), s += exp(a2[t][j] - mx) * u[t][j];
        out[j] = s / z;
        mx = -INFINITY;
        for (int t = 0; t < len; t++) {
            if (u[t][j] > mx) second = mx, mx = u[t][j];
            else second = fmax(second, u[t][j]);
        }
        if (len > 1) r->min_max = fmin(r->min_max, mx - second);
        out[d + j] = mx;
    }
}

/* The logits of row i, straight from docs/models.md, MS-SAN. */
static void reference_logits(ref *r, const ag_batch *b, int i, double *logits) {
    const ag_model_config *c = &r->m->cfg;
    int d = c->dim, H = c->hidden, K = c->classes, n = 2 * d;
    double feat[1][MAXD * 8], hidden[1][MAXD];
    encode(r, b->tokens + i * b->width, b->heads + i * b->width, b->lengths[i], feat[0]);
    if (c->task == AG_TASK_PAIR) {
        double rh[2 * MAXD];
        encode(r, b->tokens_b + i * b->width_b, b->heads_b + i * b->width_b, b->lengths_b[i], rh);
        for (int j = 0; j < n; j++) {
            double rp = feat[0][j];
            feat[0][n + j] = rh[j];
            feat[0][2 * n + j] = rp * rh[j];
            feat[0][3 * n + j] = fabs(rp - rh[j]);
            r->min_abs = fmin(r->min_abs, fabs(rp - rh[j]));
        }
        n *= 4;
    }
    for (int j = 0; j < H; j++) { /* dense() holds rows of at most MAXD: the features are wider */
        double z = P(r, "cls.hidden.bias")[j];
        for (int l = 0; l < n; l++) z += feat[0][l] * P(r, "cls.hidden.weight")[l * H + j];
        hidden[0][j] = relu(r, z);
    }
    for (int k = 0; k < K; k++) {
        logits[k] = P(r, "cls.out.bias")[k];
        for (int l = 0; l < H; l++) logits[k] += hidden[0][l] * P(r, "cls.out.weight")[l * K + k];
    }
}

static ag_model tiny_model(unsigned flags, ag_task task) {
    const ag_model_kind *kind = ag_model_find("ms_san");
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.flags |= flags;
    cfg.task = task;
    ag_model m;
    ag_model_init(&m, kind, &cfg);
    return m;
}

/* The logits match the reference, on the very inputs test_models
 * gradchecks (batch seed 3), and those inputs keep clear of every kink: a
 * central difference of step 1e-6 moves a pre-activation by at most a few
 * 1e-6 (its inputs are O(1)), so a margin of 1e-5 keeps both sides of every
 * difference on the same branch and the check exact. */
static void against_reference(unsigned flags, ag_task task, const char *label) {
    ag_model m = tiny_model(flags, task);
    ag_batch b;
    ag_tiny_batch(&m, &b, 3);
    double got[2 * 3], want[3], worst = 0;
    ref r = {&m, INFINITY, INFINITY, INFINITY};
    model_logits(&m, &b, got);
    for (int i = 0; i < b.rows; i++) {
        reference_logits(&r, &b, i, want);
        for (int k = 0; k < 3; k++) {
            CHECK_NEAR(got[i * 3 + k], want[k], 1e-12, 1e-10);
            worst = check_worst(worst, fabs(got[i * 3 + k] - want[k]));
        }
    }
    CHECK(r.min_relu > 1e-5 && r.min_max > 1e-5 && r.min_abs > 1e-5, "%s: too close to a kink", label);
    printf("  reference %-8s max |logit diff| %.1e; kink margins: relu %.1e, max %.1e, abs %.1e\n", label, worst,
           r.min_relu, r.min_max, task == AG_TASK_PAIR ? r.min_abs : NAN);
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

/* An example's logits depend on nothing but its own tokens (and parse) up to
 * its length. */
static void independence(ag_task task) {
    ag_model m = tiny_model(0, task);
    check_independence(&m, 0);
    ag_model_free(&m);
}

/* A bad parse is an input error: no logits, a message naming the sentence
 * and the position.  Without distance priors the parse is not even read. */
static void bad_parse(void) {
    ag_model m = tiny_model(0, AG_TASK_CLASSIFY);
    ag_batch b;
    ag_tiny_batch(&m, &b, 5);
    b.heads[1 * b.width + 1] = 1; /* sentence 1, position 1 points to itself */
    CHECK(ag_model_forward(&m, &b, false) == NULL);
    CHECK(strstr(ag_errmsg(), "sentence 1") && strstr(ag_errmsg(), "position 1"), "message: %s", ag_errmsg());
    CHECK(ag_model_loss(&m, &b, false) == NULL);
    ag_step_end();
    b.heads[1 * b.width + 1] = 7; /* out of range */
    CHECK(ag_model_forward(&m, &b, false) == NULL);
    CHECK(strstr(ag_errmsg(), "sentence 1") && strstr(ag_errmsg(), "head 7"), "message: %s", ag_errmsg());
    ag_step_end();
    ag_batch_opts o = {0};
    m.kind->batch_opts(&m.cfg, &o);
    CHECK(o.heads == 1 && o.fixed_len == 0 && o.n_bigram == 0);
    ag_model_free(&m);

    m = tiny_model(AG_FLAG_NO_DIST, AG_TASK_CLASSIFY);
    CHECK(ag_model_forward(&m, &b, false) != NULL);
    ag_step_end();
    ag_model_batch_free(&b);
    ag_model_free(&m);
}

int main(void) {
    against_reference(0, AG_TASK_CLASSIFY, "default");
    against_reference(AG_FLAG_NO_DIST, AG_TASK_CLASSIFY, "no_dist");
    against_reference(0, AG_TASK_PAIR, "pair");
    independence(AG_TASK_CLASSIFY);
    independence(AG_TASK_PAIR);
    bad_parse();
    for (int task = AG_TASK_CLASSIFY; task <= AG_TASK_PAIR; task++) {
        ag_model m = tiny_model(0, (ag_task)task);
        m.cfg.keep = 0.9; /* the paper's dropout, as in training */
        ag_batch b;
        ag_tiny_batch(&m, &b, 23);
        check_steady_state(&m, &b);
        ag_model_batch_free(&b);
        ag_model_free(&m);
    }
    ag_shutdown();
    return check_summary("test_ms_san");
}
