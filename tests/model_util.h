/* model_util.h - helpers of the model tests (test_<model>.c, test_models,
 * test_cuda_train): batch views and copies, catching fatal errors, and
 * verifying the zero class of a gradient check. */
#ifndef AG_MODEL_UTIL_H
#define AG_MODEL_UTIL_H

#include "check.h"
#include "fatal.h"
#include "attngrad/model.h"
#include "../train/internal.h"

#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* Row i of b as a batch of one row (a view: no copies). */
static inline ag_batch batch_row(const ag_batch *b, int i) {
    ag_batch r = *b;
    int N = b->width, Nb = b->width_b;
    r.rows = 1;
    r.tokens += i * N;
    r.lengths += i;
    r.labels += i;
    if (r.scores) r.scores += i;
    if (r.heads) r.heads += i * N;
    if (r.bigrams) r.bigrams += i * N;
    if (r.targets) r.targets += i * N;
    if (r.tokens_b) r.tokens_b += i * Nb, r.lengths_b += i;
    if (r.heads_b) r.heads_b += i * Nb;
    if (r.bigrams_b) r.bigrams_b += i * Nb;
    return r;
}

/* Fills every padded position of the token and bigram rows with arbitrary
 * in-range ids, and padded heads with arbitrary valid-looking parents: a
 * model must ignore all of them. */
static inline void fill_padding_with_junk(ag_batch *b, int vocab, int n_bigram, uint64_t seed) {
    ag_rng r;
    ag_rng_seed(&r, seed);
    for (int second = 0; second < 2; second++) {
        int N = second ? b->width_b : b->width;
        const int32_t *len = second ? b->lengths_b : b->lengths;
        int32_t *tok = second ? b->tokens_b : b->tokens, *bi = second ? b->bigrams_b : b->bigrams;
        int32_t *heads = second ? b->heads_b : b->heads;
        if (!tok) continue;
        for (int i = 0; i < b->rows; i++)
            for (int t = len[i]; t < N; t++) {
                tok[i * N + t] = 1 + (int32_t)(ag_rng_next(&r) % (uint64_t)(vocab - 1));
                if (bi && n_bigram > 1) bi[i * N + t] = 1 + (int32_t)(ag_rng_next(&r) % (uint64_t)(n_bigram - 1));
                if (heads) heads[i * N + t] = 0;
            }
    }
}

/* The logits of b, copied out of the step (out must hold rows * classes). */
static inline void model_logits(ag_model *m, const ag_batch *b, double *out) {
    bool was = ag_set_grad_enabled(false);
    ag_tensor *logits = ag_model_forward(m, b, false);
    for (int64_t i = 0; i < logits->size; i++) out[i] = logits->data[i];
    ag_set_grad_enabled(was);
    ag_step_end();
}

/* An example's logits depend on nothing but its own tokens up to its
 * length: the tiny batch (3 classes, seed 13) row by row gives its logits,
 * and so does the batch with junk in every padded position. */
static inline void check_independence(ag_model *m, int n_bigram) {
    ag_batch b;
    ag_tiny_batch(m, &b, 13);
    double both[6], alone[3], junk[6];
    model_logits(m, &b, both);
    for (int i = 0; i < b.rows; i++) {
        ag_batch row = batch_row(&b, i);
        model_logits(m, &row, alone);
        for (int k = 0; k < 3; k++) CHECK_NEAR(alone[k], both[i * 3 + k], 1e-13, 1e-12);
    }
    fill_padding_with_junk(&b, m->cfg.vocab, n_bigram, 99);
    model_logits(m, &b, junk);
    for (int k = 0; k < 6; k++) CHECK_NEAR(junk[k], both[k], 1e-13, 1e-12);
    ag_model_batch_free(&b);
}

/* Training steps on b (forward, backward, optimizer) after a short warm-up
 * make no heap allocation at all: everything comes from the step arena and
 * the cached masks. */
static inline void check_steady_state(ag_model *m, const ag_batch *b) {
    ag_optim_config oc;
    ag_optimizer opt;
    CHECK(ag_optim_parse(m->cfg.optim, &oc) == AG_OK && ag_optim_init(&opt, &m->params, &oc) == AG_OK, "%s",
          ag_errmsg());
    int64_t allocs = 0;
    for (int step = 0; step < 8; step++) {
        if (step == 3) allocs = ag_memstats().allocs;
        ag_params_zero_grad(&m->params);
        ag_backward(ag_model_loss(m, b, true));
        ag_optim_step(&opt);
        ag_step_end();
    }
    CHECK(ag_memstats().allocs == allocs, "%s: %lld allocations in 5 steady steps", m->kind->name,
          (long long)(ag_memstats().allocs - allocs));
    ag_optim_free(&opt);
}

/* What a model's gradient check drawn wide made of its small gradients:
 * the parameters' names, each after a space. */
typedef struct {
    char zero[256];    /* zero by structure, verified (ag__grad_class_of) */
    char redrawn[256]; /* zero only at the first draw, resolved at a second */
} zero_classes;

static inline void name_append(char *list, size_t n, const char *name) {
    snprintf(list + strlen(list), n - strlen(list), " %s", name);
}

/* res[i] is parameter i's own check (ag_gradcheck of f with wrt = {it},
 * max_checks elements) with every parameter drawn from U(-1, 1); checked
 * 0: not checked.  A gradient too small to resolve and not under
 * AG__ZERO_GRAD fails; one under it must be zero by structure, verified:
 * its analytic gradient roundoff, and the loss unmoved when it moves far
 * (ag__grad_class_of; invariant with a gradient above roundoff fails).
 * A gradient under it that moves the loss when moved far is zero only
 * around this draw: MTSA with dropout on has three of head 0's four
 * hidden ReLU units dead on every row there, the fourth's bias a shift of
 * every key's score; MPSAN with elu_score on the length-1 batch has every
 * score of unit 3 in the ELU's linear piece, where its v and b shift a
 * query's scores alike.  The check compared nothing of such a gradient,
 * so every parameter is drawn anew (seed 12), and there it must resolve
 * and pass.  The parameters keep the second draw where there was one. */
static inline void verify_small_gradients(ag_params *ps, ag_forward_fn f, void *ctx, const ag_gradcheck_result *res,
                                          int64_t max_checks, const char *label, zero_classes *z) {
    z->zero[0] = z->redrawn[0] = 0;
    double largest = 0;
    for (int i = 0; i < ps->count; i++) largest = fmax(largest, res[i].max_grad);
    bool *here = calloc((size_t)ps->count + 1, sizeof *here), any_here = false;
    for (int i = 0; i < ps->count; i++) {
        ag_tensor *p = ps->items[i];
        const ag_gradcheck_result *r = &res[i];
        if (!r->checked) continue;
        double moved = 0;
        ag__grad_class c = ag__grad_class_of(r, largest, f, ctx, p, &moved);
        if (getenv("VERBOSE") && r->max_grad <= AG__ZERO_GRAD)
            printf("    %-24s max |a| %.2e of a largest %.2e; moved, the loss moves %.2e: %s\n", p->name,
                   r->max_analytic, largest, moved,
                   c == AG__GRAD_ZERO ? "zero (invariant)" : c == AG__GRAD_ZERO_HERE ? "zero here only" : "wrong");
        CHECK(c != AG__GRAD_WEAK, "%s (wide) %s: largest gradient %.3g, too small for the check to resolve and not "
              "zero", label, p->name, r->max_grad);
        CHECK(c != AG__GRAD_ZERO_WRONG, "%s (wide) %s: the loss ignores it (moved by up to %g it moves %.3g), yet its "
              "analytic gradient reaches %.3g, %.3g of the largest: a true zero is roundoff", label, p->name,
              AG__ZERO_SHIFT, moved, r->max_analytic, r->max_analytic / largest);
        if (c == AG__GRAD_ZERO) name_append(z->zero, sizeof z->zero, p->name);
        if (c == AG__GRAD_ZERO_HERE) here[i] = any_here = true;
    }
    if (any_here) ag__params_draw_wide(ps, 12);
    for (int i = 0; i < ps->count; i++) {
        if (!here[i]) continue;
        ag_tensor *p = ps->items[i];
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        o.max_checks = max_checks;
        ag_gradcheck_result r = ag_gradcheck(f, ctx, &p, 1, &o);
        CHECK(r.ok && r.max_grad >= AG__RESOLVED_GRAD, "%s (wide) %s: its gradient was zero only around the first "
              "draw, and at a second it is %s: element %lld analytic %.12g numeric %.12g, largest %.3g", label,
              p->name, r.ok ? "too small to resolve" : "wrong", (long long)r.worst_index, r.analytic, r.numeric,
              r.max_grad);
        if (getenv("VERBOSE"))
            printf("    %-24s at a second draw: rel %.2e |g| %.2e\n", p->name, r.max_rel_err, r.max_grad);
        name_append(z->redrawn, sizeof z->redrawn, p->name);
        ag_step_end();
    }
    free(here);
}

#endif
