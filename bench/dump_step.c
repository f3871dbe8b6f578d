/* dump_step.c - one forward/backward of a registered model at MODELS.md's
 * tiny sizes, written to safetensors in the layout of MODELS.md's
 * "Reference dump" (the same as `attngrad dump-step`), for
 * tests/torch_reference.py to replay in PyTorch:
 *
 *     dump_step models
 *     dump_step dump-step --model mpsan --out step.safetensors [--flags elu_score]
 *               [--attention positional|standard|none] [--task classify|pair|lm]
 *
 * Every parameter under its name (the build's real type: F32 from the f32
 * build, F64 from the f64 one), "grad.<name>", "loss" (mean cross-entropy,
 * dropout off, no L2 term) and "batch.*" as I64; metadata "model" and
 * "config" ("key=value" lines: flags, attention, task).  It stands in for
 * the CLI until that has dump-step, and lets the reference check run on a
 * tree without the CLI. */
#include "../models/models.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name;
    unsigned bit;
} flag_names[] = {
    {"elu_score", AG_FLAG_ELU_SCORE}, {"linear_dist", AG_FLAG_LINEAR_DIST}, {"no_bigram", AG_FLAG_NO_BIGRAM},
    {"softmax", AG_FLAG_SOFTMAX},     {"no_zeta", AG_FLAG_NO_ZETA},         {"text_only", AG_FLAG_TEXT_ONLY},
    {"no_dist", AG_FLAG_NO_DIST},     {"exp_score", AG_FLAG_EXP_SCORE},     {"strict", AG_FLAG_STRICT},
};
static const char *const attentions[] = {"positional", "standard", "none"};
static const char *const tasks[] = {"classify", "pair", "lm"};

/* "a,b" -> bits, or -1 naming the unknown flag on stderr */
static long parse_flags(const char *list) {
    unsigned bits = 0;
    for (const char *p = list; *p;) {
        size_t len = strcspn(p, ","), i = 0, n = sizeof flag_names / sizeof *flag_names;
        while (i < n && !(strlen(flag_names[i].name) == len && !strncmp(flag_names[i].name, p, len))) i++;
        if (i == n) {
            fprintf(stderr, "dump_step: unknown flag '%.*s'\n", (int)len, p);
            return -1;
        }
        bits |= flag_names[i].bit;
        p += len + (p[len] == ',');
    }
    return bits;
}

static int index_of(const char *v, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) return i;
    return -1;
}

/* A batch array [rows] or [rows, width] as I64 (kept until the write). */
static int64_t *add_ints(ag_st_writer *w, const char *name, const int32_t *src, int rows, int width) {
    int64_t n = (int64_t)rows * (width ? width : 1), *dst = malloc((size_t)n * sizeof *dst);
    for (int64_t i = 0; i < n; i++) dst[i] = src[i];
    ag_st_add(w, name, AG_I64, width ? 2 : 1, (int64_t[]){rows, width}, dst);
    return dst;
}

static int dump(const ag_model_kind *kind, const char *flags, int attention, int task, const char *path) {
    long bits = parse_flags(flags);
    if (bits < 0) return 2;
    ag_model_config cfg = ag_model_tiny(kind);
    cfg.flags = (unsigned)bits;
    if (attention >= 0) cfg.attention = attention;
    if (task >= 0) cfg.task = (ag_task)task;
    ag_model m;
    ag_batch b;
    ag_model_init(&m, kind, &cfg);
    ag_tiny_batch(&m, &b, 3);
    ag_params_zero_grad(&m.params);
    ag_tensor *loss = ag_model_loss(&m, &b, false);
    if (!loss) {
        fprintf(stderr, "dump_step: %s refused the batch: %s\n", kind->name, ag_errmsg());
        return 1;
    }
    ag_backward(loss);

    ag_st_writer w = {0};
    char name[256];
    for (int i = 0; i < m.params.count; i++) {
        ag_tensor *p = m.params.items[i], g = *p;
        ag_st_add_tensor(&w, p->name, p);
        snprintf(name, sizeof name, "grad.%s", p->name);
        g.data = p->grad;
        ag_st_add_tensor(&w, name, &g);
    }
    ag_st_add_tensor(&w, "loss", &(ag_tensor){.ndim = 0, .size = 1, .data = loss->data});
    int B = b.rows, N = b.width, nb = 0;
    int64_t *bufs[10];
    bool lm = m.cfg.task == AG_TASK_LM, pair = m.cfg.task == AG_TASK_PAIR;
    bufs[nb++] = add_ints(&w, "batch.tokens", b.tokens, B, N);
    bufs[nb++] = add_ints(&w, "batch.lengths", b.lengths, B, 0);
    bufs[nb++] = lm ? add_ints(&w, "batch.targets", b.targets, B, N) : add_ints(&w, "batch.labels", b.labels, B, 0);
    if (b.opts.n_bigram > 1) bufs[nb++] = add_ints(&w, "batch.bigrams", b.bigrams, B, N);
    if (b.opts.heads) bufs[nb++] = add_ints(&w, "batch.heads", b.heads, B, N);
    if (pair) {
        bufs[nb++] = add_ints(&w, "batch.tokens_b", b.tokens_b, B, b.width_b);
        bufs[nb++] = add_ints(&w, "batch.lengths_b", b.lengths_b, B, 0);
        if (b.opts.heads) bufs[nb++] = add_ints(&w, "batch.heads_b", b.heads_b, B, b.width_b);
        if (b.opts.n_bigram > 1) bufs[nb++] = add_ints(&w, "batch.bigrams_b", b.bigrams_b, B, b.width_b);
    }
    char config[512];
    snprintf(config, sizeof config, "model=%s\nflags=%s\nattention=%s\ntask=%s\n", kind->name, flags,
             attentions[m.cfg.attention >= 0 && m.cfg.attention < 3 ? m.cfg.attention : 0], tasks[m.cfg.task]);
    ag_st_set_meta(&w, "config", config);
    ag_st_set_meta(&w, "model", kind->name);
    int rc = 0;
    if (ag_st_write(&w, path) != AG_OK) {
        fprintf(stderr, "dump_step: %s\n", ag_errmsg());
        rc = 1;
    }
    ag_st_writer_free(&w);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    ag_step_end();
    ag_tiny_batch_free(&b);
    ag_model_free(&m);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: dump_step models\n"
                    "       dump_step dump-step --model NAME --out FILE [--flags LIST] [--attention A] [--task T]\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "models")) {
        printf("model\n");
        for (const ag_model_kind *const *k = ag_model_kinds(); *k; k++) printf("%s\n", (*k)->name);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "dump-step")) return usage();
    const char *model = NULL, *out = NULL, *flags = "";
    int attention = -1, task = -1;
    for (int i = 2; i < argc; i++) {
        const char *key = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) return usage();
        if (!strcmp(key, "--model")) model = val;
        else if (!strcmp(key, "--out")) out = val;
        else if (!strcmp(key, "--flags")) flags = val;
        else if (!strcmp(key, "--attention")) attention = index_of(val, attentions, 3);
        else if (!strcmp(key, "--task")) task = index_of(val, tasks, 3);
        else return usage();
        if ((!strcmp(key, "--attention") && attention < 0) || (!strcmp(key, "--task") && task < 0)) {
            fprintf(stderr, "dump_step: bad value '%s' for %s\n", val, key);
            return 2;
        }
        i++;
    }
    const ag_model_kind *kind = model ? ag_model_find(model) : NULL;
    if (!kind || !out) {
        fprintf(stderr, "dump_step: %s\n", !out ? "--out FILE is required" : "unknown or missing --model");
        return 2;
    }
    int rc = dump(kind, flags, attention, task, out);
    ag_shutdown();
    return rc;
}
