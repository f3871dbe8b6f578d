/* report.c - what a run prints: its header, the progress of an epoch, an
 * epoch's line, and --profile's op table. */
#include "trainer.h"
#include "../optim/options.h" /* ag__optim_slot_numel: the state's size */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- progress output --------------------------------------------------------- */

void ag__progress_start(ag__progress *p, const char *mode, int epoch, int epochs, int64_t n_batches) {
    p->f = stderr;
    p->mode = !strcmp(mode, "none") ? 0 : !strcmp(mode, "lines") ? 1 : !strcmp(mode, "bar") ? 2 : isatty(2) ? 2 : 1;
    p->t_start = p->t_last = ag__seconds();
    p->tokens = p->steps = 0;
    p->loss_sum = 0;
    p->epoch = epoch;
    p->epochs = epochs;
    p->n_batches = n_batches;
    p->every = n_batches / 10 > 1 ? n_batches / 10 : 1;
}


void ag__progress_step(ag__progress *p, int64_t done, int64_t tokens, double loss) {
    p->tokens += tokens;
    p->steps++;
    p->loss_sum += loss;
    if (!p->mode) return;
    double t = ag__seconds(), rate = p->tokens / (t - p->t_start + 1e-9);
    if (p->mode == 2 && (t - p->t_last >= 0.1 || done == p->n_batches)) {
        enum { W = 24 };
        char bar[W + 1];
        int fill = (int)(W * done / p->n_batches);
        for (int i = 0; i < W; i++) bar[i] = i < fill ? '#' : '.';
        bar[W] = 0;
        fprintf(p->f, "\r\033[Kepoch %d/%d [%s] %lld/%lld  %.0f tok/s  loss %.4f", p->epoch, p->epochs, bar,
                (long long)done, (long long)p->n_batches, rate, p->loss_sum / p->steps);
        fflush(p->f);
        p->t_last = t;
    } else if (p->mode == 1 && (done % p->every == 0 || done == p->n_batches)) {
        fprintf(p->f, "epoch %d/%d  step %lld/%lld  %.0f tok/s  loss %.4f\n", p->epoch, p->epochs, (long long)done,
                (long long)p->n_batches, rate, p->loss_sum / p->steps);
        fflush(p->f);
    }
}

void ag__progress_end(ag__progress *p) {
    if (p->mode == 2) fprintf(p->f, "\r\033[K");
    fflush(p->f);
}

/* ---- --profile K: the op table of K training steps --------------------------- */

/* One per command, across folds.  Profiling starts before the command's
 * training step AG_PROFILE_WARMUP + 1 and reports once, after K steps or at
 * the end of the epoch under way, whichever comes first: the evaluation
 * that follows an epoch is not training. */
void ag__profile_step_begin(ag__step_profile *sp) {
    if (sp->want > 0 && sp->taken == AG_PROFILE_WARMUP) {
        ag_profile_start();
        sp->on = true;
    }
}

/* Stops the profiler and prints its table to stderr. */
static void profile_report(ag__step_profile *sp) {
    int steps = (int)(sp->taken - AG_PROFILE_WARMUP);
    ag_profile_stop();
    sp->on = false;
    fprintf(stderr, "\nop profile of training step%s %d", steps > 1 ? "s" : "", AG_PROFILE_WARMUP + 1);
    if (steps > 1) fprintf(stderr, "-%lld", (long long)sp->taken);
    if (steps < sp->want) fprintf(stderr, " (%d of the %d asked for: the epoch or the run ended first)", steps, sp->want);
    fprintf(stderr, "\n");
    ag_profile_report(stderr, steps, AG_PROFILE_TOP);
    fprintf(stderr, "\n");
    fflush(stderr);
}

void ag__profile_step_end(ag__step_profile *sp) {
    sp->taken++;
    if (sp->on && sp->taken == AG_PROFILE_WARMUP + sp->want) profile_report(sp);
}

void ag__profile_epoch_end(ag__step_profile *sp) {
    if (sp->on) profile_report(sp);
}

/* After the command: the profiler off (an error may have cut a profiled
 * step short), and a word when the run was too short to profile. */
void ag__profile_close(ag__step_profile *sp, int rc) {
    if (sp->on) ag_profile_stop();
    else if (sp->want > 0 && sp->taken <= AG_PROFILE_WARMUP && !rc)
        fprintf(stderr, "--profile: no op table: the run ended after %lld training steps, and profiling starts after %d\n",
                (long long)sp->taken, AG_PROFILE_WARMUP);
}

/* ---- an epoch's line ---------------------------------------------------------- */

static void print_metrics(FILE *f, const char *name, ag_task task, const ag_metrics *x) {
    if (task == AG_TASK_LM) fprintf(f, "%s ppl %.2f", name, x->perplexity);
    else if (task == AG_TASK_RELATEDNESS)
        fprintf(f, "%s r %.4f rho %.4f mse %.4f (loss %.4f)", name, x->pearson, x->spearman, x->mse, x->loss);
    else fprintf(f, "%s acc %.2f%% (loss %.4f)", name, 100 * x->accuracy, x->loss);
}

void ag__print_epoch(const ag__epoch_row *e, int epochs, ag_task task) {
    printf("epoch %d/%d%s  loss %.4f  ", e->epoch, epochs, e->partial ? " (mid-epoch)" : "", e->train_loss);
    print_metrics(stdout, "dev", task, &e->dev);
    if (e->has_test) {
        printf("  ");
        print_metrics(stdout, "test", task, &e->test);
    }
    printf("  lr %.3g  %.1fs%s\n", e->lr, e->seconds, e->best ? "  *" : "");
    fflush(stdout);
}

/* ---- the run's header ---------------------------------------------------------- */

static void print_vectors(const ag__trainer *t, const ag_train_opts *o) {
    const ag_vectors *v = &t->vec;
    if (!v->dim) {
        if (o->embeddings[0] && o->resume) printf("  embeddings: from the checkpoint%s\n", o->freeze_embeddings ? " (frozen)" : "");
        else if (o->freeze_embeddings) printf("  embeddings: random, frozen\n");
        return;
    }
    int32_t words = v->vocab - 2, found = v->n_exact + v->n_lower; /* all but <pad> and <unk> */
    printf("  embeddings %s (%s, %dd%s): %d of %d words found", o->embeddings, ag_vec_format_name(v->format), v->dim,
           o->freeze_embeddings ? ", frozen" : "", found, words);
    if (v->n_lower) printf(" (%d lower-cased)", v->n_lower);
    printf(", %.1f%% of %lld training tokens; the other %d words from U(-0.05, 0.05)\n",
           t->vec_tokens ? 100.0 * (double)t->vec_covered / (double)t->vec_tokens : 0.0, (long long)t->vec_tokens,
           words - found);
    if (v->duplicates) /* each keeps its first vector, as gensim */
        printf("  note: %s repeats %lld word%s of the vocabulary, the first vector kept: %s\n", o->embeddings,
               (long long)v->duplicates, v->duplicates == 1 ? "" : "s", v->first_warning);
    if (v->spaced) /* "at name@domain.com" in glove.840B: no token can be that */
        printf("  note: %lld vector%s skipped: a word with spaces\n", (long long)v->spaced, v->spaced == 1 ? "" : "s");
}

/* A class no training example has: a file labelled 1..K (0 unused), or one
 * stray label far above the rest (a 65535 typed for a 5: 65536 outputs),
 * trains outputs that never occur, which the class count alone does not
 * show.  Said, not refused: a small split can lack a class by chance. */
static void note_empty_classes(const ag_run_data *d, int classes) {
    const ag_dataset *ds = d->ds[AG_SPLIT_TRAIN];
    if (classes <= 0 || !ds || (d->task != AG_TASK_CLASSIFY && d->task != AG_TASK_PAIR)) return;
    bool *seen = calloc((size_t)classes, sizeof *seen);
    if (!seen) return;
    for (int64_t k = 0; k < d->n[AG_SPLIT_TRAIN]; k++) {
        int32_t label = ds->ex[d->idx[AG_SPLIT_TRAIN] ? d->idx[AG_SPLIT_TRAIN][k] : k].label;
        if (label >= 0 && label < classes) seen[label] = true;
    }
    int empty = 0, first = -1;
    for (int c = 0; c < classes; c++)
        if (!seen[c]) empty++, first = first < 0 ? c : first;
    free(seen);
    if (empty)
        printf("  note: %d of the %d classes ha%s no training example (the first: label %d): labels number the "
               "classes from 0, and the largest label sets how many there are\n", empty, classes, empty == 1 ? "s" : "ve",
               first);
}

/* Each --param-group and what it matched: how many parameters and values,
 * the first few by name. */
static void print_groups(const ag__trainer *t, const ag_train_opts *o) {
    ag__train_group g[AG__MAX_PARAM_GROUPS];
    int n = ag__train_groups(o, g);
    const ag_params *ps = &t->model.params;
    for (int k = 0; k < n; k++) {
        int count = 0;
        int64_t values = 0;
        char names[160] = "";
        size_t at = 0;
        for (int i = 0; i < ps->count; i++) {
            if (!ag__param_group_match(ps->items[i], &g[k].g)) continue;
            if (count < 4 && at < sizeof names)
                at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", count ? ", " : "", ps->items[i]->name);
            else if (count == 4 && at < sizeof names)
                at += (size_t)snprintf(names + at, sizeof names - at, ", ...");
            count++, values += ps->items[i]->size;
        }
        printf("  param group '%.*s': %d parameter%s, %lld values (%s)\n", g[k].len, g[k].spec, count,
               count == 1 ? "" : "s", (long long)values, names);
    }
}

/* The optimizer's state: its slots by name and their values in all (an
 * optimizer's memory is a reason to pick one: Adafactor keeps a row and a
 * column where Adam keeps two matrices). */
static void print_state_size(const ag__trainer *t) {
    const ag_optimizer *opt = &t->opt;
    int64_t values = 0;
    char names[160] = "";
    size_t at = 0;
    for (int s = 0; s < opt->n_slots; s++) {
        for (int i = 0; i < opt->n_params; i++) values += ag__optim_slot_numel(opt, i, s);
        if (at < sizeof names)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", s ? ", " : "", ag_optim_slot_name(opt, s));
    }
    double kib = (double)values * sizeof(ag_real) / 1024;
    if (opt->n_slots == 0) printf("  optimizer state: none\n");
    else
        printf("  optimizer state: %s, %lld values (%.1f %s)\n", names, (long long)values,
               kib < 1024 ? kib : kib / 1024, kib < 1024 ? "KiB" : "MiB");
}

/* Muon: which trained parameters take its step and which its AdamW part
 * (a Muon matrix keeps no "v"), the first matrices by name. */
static void print_muon_sides(const ag__trainer *t) {
    const ag_optimizer *opt = &t->opt;
    if (opt->cfg.kind != AG_MUON) return;
    int count[2] = {0};
    int64_t values[2] = {0};
    char names[160] = "";
    size_t at = 0;
    for (int i = 0; i < opt->n_params; i++) {
        const ag_tensor *p = opt->params->items[i];
        if (!p->requires_grad) continue;
        int side = opt->slot[opt->n_params + i] != NULL; /* 0: Muon's step, 1: the AdamW part */
        if (side == 0 && count[0] < 4 && at < sizeof names)
            at += (size_t)snprintf(names + at, sizeof names - at, "%s%s", count[0] ? ", " : "", p->name);
        else if (side == 0 && count[0] == 4 && at < sizeof names)
            at += (size_t)snprintf(names + at, sizeof names - at, ", ...");
        count[side]++, values[side] += p->size;
    }
    printf("  muon: %d matri%s, %lld values, take its step (%s); %d parameter%s, %lld values, its AdamW part\n",
           count[0], count[0] == 1 ? "x" : "ces", (long long)values[0], names, count[1], count[1] == 1 ? "" : "s",
           (long long)values[1]);
}

void ag__print_header(const ag__trainer *t, const ag_train_opts *o, const char *out) {
    const ag_run_data *d = &t->data;
    printf("%s on %s: %lld train / %lld dev / %lld test examples, vocab %d", o->model, d->name,
           (long long)d->n[AG_SPLIT_TRAIN], (long long)d->n[AG_SPLIT_DEV], (long long)d->n[AG_SPLIT_TEST],
           ag_vocab_size(d->vocab));
    if (d->task == AG_TASK_RELATEDNESS) printf(", relatedness scores 1-%d", AG_RELATEDNESS_BINS);
    else if (d->task != AG_TASK_LM) printf(", %d classes", o->classes);
    char clip[32] = "no clipping"; /* the paper's clip is part of the recipe: said as the rest is */
    if (o->clip > 0) snprintf(clip, sizeof clip, "clip %g", o->clip);
    char planned[48] = ""; /* total=run: the count it stands for */
    if (t->lr_steps_run) snprintf(planned, sizeof planned, " (total %d steps)", t->lr_steps.total);
    char parts[48] = ""; /* --micro-batch: the rows of one forward, where fewer than a batch's */
    if (o->micro_batch > 0 && o->micro_batch < o->batch)
        snprintf(parts, sizeof parts, " in parts of %d rows", (int)t->batch.max_rows);
    printf("\n  %lld parameters (d=%d), %s, batch %d%s, keep %g, l2 %g, %s, schedule %s%s%s%s\n  run folder %s\n",
           (long long)ag_params_numel(&t->model.params), o->dim, o->optim, o->batch, parts, o->keep, o->l2, clip,
           o->sched, o->lr_steps[0] ? ", per step " : "", o->lr_steps, planned, out);
    if (o->log_steps == 1) printf("  steps.csv: a row every step\n");
    else if (o->log_steps > 1) printf("  steps.csv: a row every %d steps\n", o->log_steps);
    print_groups(t, o);
    print_state_size(t);
    print_muon_sides(t);
    print_vectors(t, o);
    note_empty_classes(d, o->classes);
    if (strstr(ag_blas_info(), "chosen by attngrad")) /* a BLAS that would have run 5x slower, said once */
        printf("  BLAS: %s\n", ag_blas_info());
    if (d->sets[0].stats.skipped)
        printf("  note: %lld malformed lines skipped (%s)\n", (long long)d->sets[0].stats.skipped,
               d->sets[0].stats.first_warning);
    for (int s = 0; s < AG_SPLITS; s++) /* each file once: a CV run's splits share sets[0] */
        if (d->sets[s].stats.not_utf8)
            printf("  note: %lld line%s not UTF-8, read as bytes (the first: %s): such words miss UTF-8 pretrained "
                   "vectors\n", (long long)d->sets[s].stats.not_utf8, d->sets[s].stats.not_utf8 == 1 ? " is" : "s are",
                   d->sets[s].stats.first_not_utf8);
    if (!t->batch.opts.heads && o->parses[0] && strcmp(o->parses, "none"))
        printf("  note: model %s reads no parse: --parses %s ignored\n", o->model, o->parses);
    if (t->batch.opts.heads)
        printf(d->parses[0] ? "  parses: %s\n"
                            : "  note: %s reads a dependency parse, but the data has none (no conllu/ folder beside it, "
                              "or --parses none): the chain i -> i+1 stands in\n",
               d->parses[0] ? d->parses : o->model);
    int split;
    int64_t i, cut = ag__longest_sentence(d, o->max_len, &split, &i, &(int32_t){0});
    if (cut && !t->batch.opts.fixed_len)
        printf("  note: --max-len %d cuts %lld sentences of train, dev and test (the longest as read: %d tokens)\n",
               o->max_len, (long long)cut, ag__example_len(d, split, i));
    fflush(stdout);
}
