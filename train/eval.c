/* eval.c - a model's metrics on a split (ag_evaluate), across the ranks
 * of a data-parallel job, and the dev score that picks the best checkpoint. */
#include "trainer.h"
#include "../distributed/dist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int argmax(const ag_real *row, int n) {
    int best = 0;
    for (int c = 1; c < n; c++)
        if (row[c] > row[best]) best = c;
    return best;
}

int ag_evaluate(ag_model *m, const ag_dataset *ds, const int64_t *idx, int64_t n, ag_batch *b, ag_metrics *out,
                char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    bool rel = m->cfg.task == AG_TASK_RELATEDNESS;
    /* relatedness: every predicted and gold score, for the correlations */
    double *pred = rel ? malloc(((size_t)n + 1) * sizeof *pred) : NULL, *gold = rel ? malloc(((size_t)n + 1) * sizeof *gold) : NULL;
    if (rel && (!pred || !gold)) {
        free(pred);
        free(gold);
        return ag__train_fail(err, errlen, AG_ERR_NOMEM, "out of memory for %lld scores", (long long)n);
    }
    bool was = ag_set_grad_enabled(false);
    double loss_sum = 0;
    int64_t correct = 0, count = 0, first, mine; /* this rank's share of the examples (all in one process) */
    ag__dist_share(n, &first, &mine);
    int rc = 0;
    for (int64_t start = 0; start < mine && !rc; start += b->max_rows) {
        int32_t rows = (int32_t)(mine - start < b->max_rows ? mine - start : b->max_rows);
        if ((rc = ag_batch_fill(b, ds, idx + first + start, rows, err, errlen))) break;
        bool lm = m->cfg.task == AG_TASK_LM; /* its metrics need the loss alone */
        ag_tensor *logits = lm ? NULL : ag__train_forward(m, b, false, err, errlen);
        ag_tensor *loss_t = lm ? ag__train_batch_loss(m, b, false, err, errlen) : logits ? ag__train_loss_of(m, b, logits, err, errlen) : NULL;
        if (!loss_t) {
            rc = AG_ERR_FORMAT;
            break;
        }
        double loss = ag_item(loss_t);
        if (m->cfg.task == AG_TASK_LM) {
            int64_t tokens = ag__count_targets(b);
            loss_sum += loss * (double)tokens;
            count += tokens;
        } else if (rel) {
            const ag_real *values = ag_host_values(logits);
            for (int r = 0; r < rows; r++) {
                pred[first + count + r] = ag_relatedness_score(values + (int64_t)r * AG_RELATEDNESS_BINS);
                gold[first + count + r] = b->scores[r];
            }
            loss_sum += loss * rows;
            count += rows;
        } else {
            int K = logits->shape[1];
            const ag_real *values = ag_host_values(logits);
            for (int r = 0; r < rows; r++) correct += argmax(values + (int64_t)r * K, K) == b->labels[r];
            loss_sum += loss * rows;
            count += rows;
        }
        ag_step_end();
    }
    ag_step_end();
    ag_set_grad_enabled(was);
    if (rc) { /* with other ranks: the caller ends the job (ag__dist_abort) */
        free(pred);
        free(gold);
        return rc;
    }
    /* the shares' sums, and every prediction for the correlations */
    double sums[3] = {loss_sum, (double)correct, (double)count};
    ag__dist_sum(sums, 3);
    loss_sum = sums[0], correct = (int64_t)sums[1], count = (int64_t)sums[2];
    if (rel) ag__dist_gather_shares(pred, n), ag__dist_gather_shares(gold, n);
    out->examples = n;
    out->tokens = m->cfg.task == AG_TASK_LM ? count : 0;
    out->loss = count ? loss_sum / (double)count : 0;
    out->accuracy = m->cfg.task == AG_TASK_LM || rel || !count ? 0 : (double)correct / (double)count;
    out->perplexity = m->cfg.task == AG_TASK_LM ? exp(out->loss) : 0;
    if (rel) {
        out->pearson = ag_pearson(pred, gold, count);
        out->spearman = ag_spearman(pred, gold, count);
        out->mse = ag_mean_sq_error(pred, gold, count);
    }
    free(pred);
    free(gold);
    return rc;
}

/* Higher is better: accuracy, minus the perplexity of an LM, or the Pearson
 * r of relatedness (as Tai et al. select), where a constant prediction's
 * undefined r counts as the worst, -1. */
double ag__train_score(const ag_model *m, const ag_metrics *x) {
    if (m->cfg.task == AG_TASK_LM) return -x->perplexity;
    if (m->cfg.task == AG_TASK_RELATEDNESS) return isnan(x->pearson) ? -1 : x->pearson;
    return x->accuracy;
}

/* Metrics of a model that diverged in a way the steps did not show (the
 * LM's perplexity overflows to inf from a finite loss past 709) end the
 * run as a non-finite step does.  A relatedness r that is NaN is not one:
 * a constant prediction has no correlation. */
int ag__train_check_metrics(const ag__trainer *t, const ag_metrics *x, const char *split, int epoch, char *err,
                         size_t errlen) {
    char what[128];
    if (t->model.cfg.task == AG_TASK_LM && !isfinite(x->perplexity))
        snprintf(what, sizeof what, "the %s perplexity is %g (loss %g)", split, x->perplexity, x->loss);
    else if (!isfinite(x->loss))
        snprintf(what, sizeof what, "the %s loss is %g", split, x->loss);
    else
        return 0;
    return ag__train_diverged(t, -1, epoch, what, false, err, errlen);
}
