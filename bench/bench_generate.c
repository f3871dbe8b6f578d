/* bench_generate.c - generation a word at a time from the Transformer LM
 * example (examples/transformer_lm.c, included as is), what `generate`
 * does per word: feed the prompt, then draw the likeliest word, read its
 * logits to the host and feed it back.  Two ways:
 *   cache    the kind's lm_feed: each layer's keys and values kept
 *            (ag_kv_cache), a word costs one position;
 *   forward  a forward over the whole text so far for each word
 *            (last_logits), what generate did before the cache.
 * bench/bench_generate.py runs this and PyTorch's same model with its own
 * key-value cache, and prints the ratio.
 *
 *     ./build/bench/bench_generate [--words W] [--prompt P] [--threads T] [--dim D] [--heads H] [--kv-heads K]
 *                                  [--layers L] [--hidden F] [--vocab V] [--reps R] [--device cpu|cuda]
 *
 * --kv-heads K: grouped-query attention, K key-value heads (1: multi-query;
 * 0, the default: one a head); attngrad's alone (bench_generate.py's
 * PyTorch model has one a head).
 *
 * Prints one line "result: key=value ..." per way: ms per word (median of
 * R repetitions of the whole continuation), and the words drawn's
 * checksum, which must be the same both ways (the same model and the
 * same logits to roundoff): else it says so and exits 1. */
#include "../examples/transformer_lm.c"
#include "bench_args.h"
#include "bench_time.h"

#include <string.h>

typedef struct {
    int words, prompt, threads, dim, heads, kv_heads, layers, hidden, vocab, reps;
    ag_device device;
} gen_opts;

/* The next word: the likeliest, from logits [1,1,V] or [1,n,V] (its last row). */
static int32_t likeliest(ag_tensor *logits, int V) {
    const int rows = logits->shape[1];
    ag_real *host = malloc((size_t)logits->size * sizeof *host);
    ag_tensor_read(logits, host);
    const ag_real *row = host + (int64_t)(rows - 1) * V;
    int32_t best = 0;
    for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
    free(host);
    return best;
}

/* One continuation: ms per drawn word; *sum gets the words' checksum. */
static double continue_text(ag_model *m, const gen_opts *o, bool cached, long long *sum) {
    int total = o->prompt + o->words, V = m->cfg.vocab;
    int32_t *ids = malloc((size_t)total * sizeof *ids);
    for (int i = 0; i < o->prompt; i++) ids[i] = 2 + (int32_t)((i * 7919) % (V - 2));
    void *state = cached ? m->kind->lm_state_new(m, total) : NULL;
    ag_batch b = {0};
    if (!cached) ag_model_batch_alloc(m, 1, total, &b);
    bool was = ag_set_grad_enabled(false);
    double t0 = bench_wall_ms();
    int n = o->prompt, fed = 0;
    *sum = 0;
    for (int k = 0; k < o->words; k++) {
        ag_tensor *logits;
        if (cached) {
            logits = m->kind->lm_feed(m, state, ids + fed, n - fed);
            fed = n;
        } else {
            memcpy(b.tokens, ids, (size_t)n * sizeof *ids);
            b.lengths[0] = b.width = n;
            m->last_logits = true;
            logits = ag_model_forward(m, &b, false);
            m->last_logits = false;
        }
        if (!logits) ag_fatal("bench_generate", "%s", ag_errmsg());
        ids[n] = likeliest(logits, V);
        *sum = *sum * 31 + ids[n++];
        ag_step_end();
    }
    double ms = (bench_wall_ms() - t0) / o->words;
    ag_set_grad_enabled(was);
    if (state) m->kind->lm_state_free(state);
    if (!cached) ag_model_batch_free(&b);
    free(ids);
    return ms;
}

int main(int argc, char **argv) {
    gen_opts o = {.words = 200, .prompt = 20, .threads = 1, .dim = 128, .heads = 4, .layers = 2, .hidden = 512,
                  .vocab = 10001, .reps = 3, .device = AG_CPU};
    for (int i = 1; i < argc; i++) {
        if (bench_arg_int(argc, argv, &i, "--words", &o.words) || bench_arg_int(argc, argv, &i, "--prompt", &o.prompt) ||
            bench_arg_int(argc, argv, &i, "--threads", &o.threads) || bench_arg_int(argc, argv, &i, "--dim", &o.dim) ||
            bench_arg_int(argc, argv, &i, "--heads", &o.heads) || bench_arg_int(argc, argv, &i, "--layers", &o.layers) ||
            bench_arg_int(argc, argv, &i, "--hidden", &o.hidden) || bench_arg_int(argc, argv, &i, "--vocab", &o.vocab) ||
            bench_arg_int(argc, argv, &i, "--reps", &o.reps) || bench_arg_int(argc, argv, &i, "--kv-heads", &o.kv_heads))
            continue;
        if (bench_arg_device(argc, argv, &i, &o.device)) continue;
        fprintf(stderr, "bench_generate: unknown option %s (see the file's header)\n", argv[i]);
        return 2;
    }
    if (o.words < 1 || o.prompt < 1 || o.reps < 1) {
        fprintf(stderr, "bench_generate: --words, --prompt and --reps must be at least 1\n");
        return 2;
    }
    if (bench_no_device(o.device)) return 77;
    ag_set_num_threads(o.threads);
    if (ag_plugin_init() != AG_OK) ag_fatal("bench_generate", "%s", ag_errmsg());
    const ag_model_kind *kind = ag_model_find("tlm");
    ag_model_config c = ag_model_defaults(kind);
    char hp[64];
    snprintf(hp, sizeof hp, "ctx=%d,kv_heads=%d", o.prompt + o.words, o.kv_heads);
    c.dim = o.dim, c.heads = o.heads, c.layers = o.layers, c.hidden = o.hidden, c.vocab = o.vocab, c.seed = 1;
    c.hparams = hp;
    ag_model m;
    if (ag_model_init(&m, kind, &c) != AG_OK) ag_fatal("bench_generate", "%s", ag_errmsg());
    ag_params_to(&m.params, o.device);
    ag_set_device(o.device);
    long long sums[2] = {0, 0};
    for (int way = 0; way < 2; way++) {
        bool cached = way == 0;
        double ms[64];
        long long sum = 0;
        int reps = o.reps < 64 ? o.reps : 64;
        (void)continue_text(&m, &(gen_opts){.words = 2, .prompt = o.prompt}, cached, &sum); /* warm-up */
        for (int r = 0; r < reps; r++) ms[r] = continue_text(&m, &o, cached, &sum);
        double median = bench_median(ms, reps); /* sorts: ms[0] is the fastest after */
        printf("result: way=%s device=%s ms_per_word=%.4f fastest=%.4f words=%d prompt=%d threads=%d dim=%d heads=%d "
               "kv_heads=%d layers=%d hidden=%d vocab=%d checksum=%lld\n", cached ? "cache" : "forward",
               ag_device_name(o.device), median, ms[0], o.words, o.prompt, o.threads, o.dim, o.heads,
               o.kv_heads ? o.kv_heads : o.heads, o.layers, o.hidden, o.vocab, sum);
        sums[way] = sum;
    }
    if (sums[0] != sums[1]) /* the same model, logits equal to roundoff: the same words */
        fprintf(stderr, "bench_generate: the cache and the forward drew different words\n");
    ag_set_device(AG_CPU);
    ag_model_free(&m);
    ag_shutdown();
    return sums[0] == sums[1] ? 0 : 1;
}
