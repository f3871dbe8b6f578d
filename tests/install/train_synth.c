/* train_synth.c - a program outside the tree that uses the installed
 * trainer (<attngrad/train.h>): MS-SAN on the generated task for two
 * epochs, into a scratch run folder given as argv[1].  Exit 0 iff training
 * ran and the model beats chance on the test split. */
#include <attngrad/train.h>

#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: train_synth OUT_FOLDER\n");
        return 2;
    }
    ag_train_opts o = ag_train_opts_default();
    char err[512];
    if (ag_train_set(&o, "model", "ms_san", err, sizeof err) || ag_train_set(&o, "epochs", "2", err, sizeof err) ||
        ag_train_set(&o, "out", argv[1], err, sizeof err) || ag_train_set(&o, "progress", "none", err, sizeof err)) {
        fprintf(stderr, "train_synth: %s\n", err);
        return 1;
    }
    ag_train_result r;
    if (ag_train(&o, &r, err, sizeof err)) {
        fprintf(stderr, "train_synth: %s\n", err);
        return 1;
    }
    printf("train_synth: %lld steps, test accuracy %.1f%% (chance 25%%)\n", (long long)r.steps,
           100 * r.test.accuracy);
    return r.has_test && r.test.accuracy > 0.3 ? 0 : 1;
}
