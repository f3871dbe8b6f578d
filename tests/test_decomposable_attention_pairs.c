/* test_decomposable_attention_pairs.c - examples/decomposable_attention.c (Parikh et al. 2016) on pair batches whose
 * two sentences differ in lengths and width, which `attngrad gradcheck --task pair` cannot make (its tiny and its
 * --batch/--len batches give sentence b the lengths and width of sentence a, so a model that masks b with a's
 * lengths passes there): an f64 gradient check of every parameter with b narrower than a and wider than a, and
 * logits that do not change when the padded tokens of either sentence do. */
#include "attngrad/train.h"
#include <math.h>
#include <stdio.h>
#include "../examples/decomposable_attention.c"

static ag_model M;
static ag_batch Bt;

static ag_tensor *loss_of_batch(void *ctx) { (void)ctx; return ag_model_loss(&M, &Bt, true); }

/* Rows of lengths la (width wa) and lb (width wb), tokens from 2..9, `pad` at padding. */
static void fill(const int *la, int wa, const int *lb, int wb, int32_t pad) {
    Bt.rows = 3, Bt.width = wa, Bt.width_b = wb;
    for (int r = 0; r < 3; r++) {
        Bt.lengths[r] = la[r], Bt.lengths_b[r] = lb[r], Bt.labels[r] = r;
        for (int t = 0; t < wa; t++) Bt.tokens[r * wa + t] = t < la[r] ? 2 + (3 * r + 5 * t) % 8 : pad;
        for (int t = 0; t < wb; t++) Bt.tokens_b[r * wb + t] = t < lb[r] ? 2 + (7 * r + 3 * t + 1) % 8 : pad;
    }
}

int main(void) {
    ag_model_config cfg = ag_model_tiny(&dam_kind);
    cfg.task = AG_TASK_PAIR;
    if (ag_model_init(&M, &dam_kind, &cfg)) { fprintf(stderr, "%s\n", ag_errmsg()); return 1; }
    ag_model_batch_alloc(&M, 3, 6, &Bt);
    static const int shapes[2][2][3] = {{{6, 2, 4}, {3, 1, 2}}, {{2, 1, 2}, {6, 3, 5}}}; /* b narrower; b wider */
    static const int widths[2][2] = {{6, 3}, {2, 6}};
    int failed = 0;
    for (int s = 0; s < 2; s++) {
        fill(shapes[s][0], widths[s][0], shapes[s][1], widths[s][1], AG_PAD_ID);
        ag_gradcheck_opts o = ag_gradcheck_defaults();
        ag_gradcheck_result r = ag_gradcheck(loss_of_batch, NULL, M.params.items, M.params.count, &o);
        printf("widths %d and %d: worst relative error %.2e (true %.2e) in %s: %s\n", widths[s][0], widths[s][1],
               r.max_rel_err, r.max_true_rel_err, M.params.items[r.worst_input]->name, r.ok ? "PASS" : "FAIL");
        failed += !r.ok;
        /* padding is masked on both sides: other tokens there leave the logits as they are */
        ag_real before[9], most = 0;
        ag_tensor *lg = ag_model_forward(&M, &Bt, false);
        for (int i = 0; i < 9; i++) before[i] = lg->data[i];
        ag_step_end();
        fill(shapes[s][0], widths[s][0], shapes[s][1], widths[s][1], 9);
        lg = ag_model_forward(&M, &Bt, false);
        for (int i = 0; i < 9; i++) most = fmax(most, fabs(lg->data[i] - before[i]));
        ag_step_end();
        printf("  logits moved by %.1e when the padded tokens changed: %s\n", most, most == 0 ? "PASS" : "FAIL");
        failed += most != 0;
    }
    ag_model_batch_free(&Bt);
    ag_model_free(&M);
    ag_shutdown();
    return failed != 0;
}
