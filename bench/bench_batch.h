/* bench_batch.h - the one synthetic workload every model benchmark runs
 * (bench_models, profile_step), so their figures describe the same step.
 *
 * A model at its paper's defaults, the classifiers with a 20000-word
 * vocabulary and 5 classes (their corpora's size; the LM keeps its own
 * 10001), and a batch of B rows at the model's width (its fixed length,
 * the LM 35, the others 30): the first row full, the other lengths uniform
 * in [ceil(N/2), N], tokens uniform over the vocabulary, each word's head
 * a random earlier word, all drawn from one seed; ag_model_batch_free
 * releases it. */
#ifndef AG_BENCH_BATCH_H
#define AG_BENCH_BATCH_H

#include "attngrad.h"
#include "attngrad/model.h"
#include "../train/internal.h"

ag_model_config bench_config(const ag_model_kind *kind);
int bench_width(const ag_model_config *c);
void bench_batch_make(const ag_model *m, int B, int N, uint64_t seed, ag_batch *b);

#endif
