/* test_esim_pairs.c - examples/esim.c (ESIM, Chen et al. 2017) on pair batches the CLI's gradcheck does not make:
 * a length-1 sentence on either side of a pair (a of length 1 against a longer b, and the reverse), sentence b
 * narrower than a and wider.  For each: an f64 gradient check of every parameter at the init and with every
 * parameter drawn from U(-1, 1), each parameter's own check seeing a gradient >= 1e-6 (not a PASS that checked
 * nothing), and logits that do not change when the padded tokens of either sentence do. */
#include "attngrad/train.h"
#include <math.h>
#include <stdio.h>
#include "../examples/esim.c"

enum { ROWS = 3 };
static ag_model M;
static ag_batch Bt;

static ag_tensor *loss_of_batch(void *ctx) { (void)ctx; return ag_model_loss(&M, &Bt, true); }

/* Rows of lengths la (width wa) and lb (width wb), tokens from 2..9, `pad` at padding. */
static void fill(const int *la, int wa, const int *lb, int wb, int32_t pad) {
    Bt.rows = ROWS, Bt.width = wa, Bt.width_b = wb;
    for (int r = 0; r < ROWS; r++) {
        Bt.lengths[r] = la[r], Bt.lengths_b[r] = lb[r], Bt.labels[r] = r;
        for (int t = 0; t < wa; t++) Bt.tokens[r * wa + t] = t < la[r] ? 2 + (3 * r + 5 * t) % 8 : pad;
        for (int t = 0; t < wb; t++) Bt.tokens_b[r * wb + t] = t < lb[r] ? 2 + (7 * r + 3 * t + 1) % 8 : pad;
    }
}

/* Each parameter checked on its own (ag_gradcheck's max_grad is over all of wrt): 1 on a failure or a gradient
 * under 1e-6, a PASS that checked nothing (a dead ReLU layer gives every parameter before it 0). */
static int check(const char *what) {
    int failed = 0;
    double worst = 0, least = INFINITY;
    for (int p = 0; p < M.params.count; p++) {
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        ag_gradcheck_result r = ag_gradcheck(loss_of_batch, NULL, &M.params.items[p], 1, &o);
        worst = fmax(worst, r.max_rel_err), least = fmin(least, r.max_grad);
        if (!r.ok || r.max_grad < 1e-6) {
            printf("  %s: %s rel %.2e |g| %.2e: FAIL\n", what, M.params.items[p]->name, r.max_rel_err, r.max_grad);
            failed = 1;
        }
    }
    printf("  %s: worst relative error %.2e, smallest |g| %.2e: %s\n", what, worst, least, failed ? "FAIL" : "PASS");
    return failed;
}

int main(void) {
    ag_model_config cfg = ag_model_tiny(&esim_kind);
    cfg.task = AG_TASK_PAIR;
    if (ag_model_init(&M, &esim_kind, &cfg)) { fprintf(stderr, "%s\n", ag_errmsg()); return 1; }
    ag_model_batch_alloc(&M, ROWS, 6, &Bt);
    /* {a's lengths, b's lengths}: b narrower with a length-1 b and a length-1 a; b wider, a of length 1 twice */
    static const int lens[2][2][ROWS] = {{{5, 1, 3}, {1, 4, 2}}, {{1, 2, 1}, {6, 1, 5}}};
    static const int widths[2][2] = {{5, 4}, {2, 6}};
    int failed = 0;
    for (int wide = 0; wide < 2; wide++) {
        if (wide) { /* every parameter from U(-1, 1): attention scores far apart, gradients wide of the tolerance */
            ag_rng g;
            ag_rng_seed(&g, 11);
            for (int p = 0; p < M.params.count; p++) ag_init_uniform(M.params.items[p], -1, 1, &g);
        }
        for (int s = 0; s < 2; s++) {
            const int *la = lens[s][0], *lb = lens[s][1], wa = widths[s][0], wb = widths[s][1];
            printf("widths %d and %d, %s:\n", wa, wb, wide ? "parameters from U(-1, 1)" : "at the init");
            fill(la, wa, lb, wb, AG_PAD_ID);
            failed += check("gradcheck");
            /* padding is masked on both sides: other tokens there leave the logits as they are */
            ag_real before[ROWS * 3], most = 0;
            ag_tensor *lg = ag_model_forward(&M, &Bt, false);
            for (int i = 0; i < ROWS * 3; i++) before[i] = lg->data[i];
            ag_step_end();
            fill(la, wa, lb, wb, 9);
            lg = ag_model_forward(&M, &Bt, false);
            for (int i = 0; i < ROWS * 3; i++) most = fmax(most, fabs(lg->data[i] - before[i]));
            ag_step_end();
            printf("  logits moved by %.1e when the padded tokens changed: %s\n", most, most == 0 ? "PASS" : "FAIL");
            failed += most != 0;
        }
    }
    ag_model_batch_free(&Bt);
    ag_model_free(&M);
    ag_shutdown();
    return failed != 0;
}
