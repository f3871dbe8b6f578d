/* bench_seq2seq.c - the Transformer encoder-decoder example (examples/transformer_seq2seq.c, included as is) at a
 * given size, on its reversal task with sources of 1 to --len digits:
 *   train         one training step on a batch (forward, backward with label smoothing and dropout, Adam);
 *   decode_cache  greedy decoding of the batch, a word at a time from the decoder layers' key-value caches and
 *                 the memory's keys and values projected once (greedy_decode);
 *   decode_full   the same with the whole decoder run over each prefix, what a decoder without a cache does
 *                 (nn.TransformerDecoder's way).
 * bench/bench_seq2seq.py runs this and PyTorch's same model (nn.TransformerEncoder/Decoder) and prints ratios.
 *
 *     ./build/bench/bench_seq2seq [--dim D] [--heads H] [--layers L] [--hidden F] [--batch B] [--len N]
 *                                 [--reps R] [--threads T] [--device cpu|cuda]
 *
 * --device cuda: the weights, the optimizer and the caches live on the GPU; a timed step ends with ag_sync()
 * (a decoding reads each step's logits, so it waits anyway).  SKIP (77) where this build or machine has no GPU.
 *
 * Prints one line "result: key=value ..." per way: ms (median of R) and, for the decodings, the checksum of the
 * words chosen, which must be the same both ways (the same model, logits equal to roundoff): else it says so
 * and exits 1. */
#define TSEQ_NO_MAIN
#pragma GCC diagnostic ignored "-Wunused-function" /* the example's beam search and alignment, not timed here */
#include "../examples/transformer_seq2seq.c"
#include "bench_args.h"
#include "bench_time.h"

typedef struct {
    int dim, heads, layers, hidden, batch, len, reps, threads;
    ag_device device;
} s2s_opts;

/* Greedy decoding of the batch with the full decoder over each prefix: words [B, Nt]. */
static void decode_full(const tseq *m, const reversal *d, int B, int32_t *words) {
    int Nt = d->Nt;
    int32_t *in = malloc(sizeof(int32_t) * B * Nt);
    ag_real *last = malloc(sizeof(ag_real) * B * VOCAB);
    bool grad = ag_set_grad_enabled(false);
    ag_tensor *memory = tseq_encode(m, d->src, d->len, B, d->Ns, false, NULL);
    for (int t = 0; t < Nt; t++) {
        for (int b = 0; b < B; b++) /* [B, t + 1]: BOS, then the words chosen so far */
            for (int j = 0; j <= t; j++) in[b * (t + 1) + j] = j ? words[b * Nt + j - 1] : BOS;
        ag_tensor *logits = tseq_decode(m, memory, d->len, in, NULL, B, t + 1, false, NULL, NULL); /* [B, t + 1, V] */
        ag_tensor_read(ag_slice(logits, 1, t, t + 1), last);
        for (int b = 0; b < B; b++) {
            int32_t ok = 1;
            words[b * Nt + t] = reversal_pick(d, b, t, last + b * VOCAB, &ok);
        }
    }
    ag_step_end();
    ag_set_grad_enabled(grad);
    free(in), free(last);
}

static unsigned long long checksum(const int32_t *words, int n) { /* wraps, as unsigned arithmetic may */
    unsigned long long sum = 0;
    for (int i = 0; i < n; i++) sum = sum * 31 + (unsigned)words[i];
    return sum;
}

int main(int argc, char **argv) {
    s2s_opts o = {.dim = 256, .heads = 4, .layers = 3, .hidden = 1024, .batch = 32, .len = 30, .reps = 5, .threads = 1};
    for (int i = 1; i < argc; i++) {
        if (bench_arg_int(argc, argv, &i, "--dim", &o.dim) || bench_arg_int(argc, argv, &i, "--heads", &o.heads) ||
            bench_arg_int(argc, argv, &i, "--layers", &o.layers) || bench_arg_int(argc, argv, &i, "--hidden", &o.hidden) ||
            bench_arg_int(argc, argv, &i, "--batch", &o.batch) || bench_arg_int(argc, argv, &i, "--len", &o.len) ||
            bench_arg_int(argc, argv, &i, "--reps", &o.reps) || bench_arg_int(argc, argv, &i, "--threads", &o.threads) ||
            bench_arg_device(argc, argv, &i, &o.device))
            continue;
        fprintf(stderr, "bench_seq2seq: unknown option %s (see the file's header)\n", argv[i]);
        return 2;
    }
    if (o.reps < 1 || o.reps > 64 || o.batch < 1 || o.batch > 256 || o.len < 1 || o.layers < 1 || o.layers > MAX_LAYERS) {
        fprintf(stderr, "bench_seq2seq: want --reps 1-64, --batch 1-256, --len >= 1, --layers 1-%d\n", MAX_LAYERS);
        return 2;
    }
    if (bench_no_device(o.device)) return 77;
    ag_set_num_threads(o.threads);
    ag_rng rng;
    ag_rng_seed(&rng, 1);
    reversal d = reversal_make(o.batch, o.len, &rng);
    tseq m;
    tseq_build(&m, &(ag_encoder_config){.d_model = o.dim, .heads = o.heads, .d_ff = o.hidden, .keep = 0.9}, o.layers, &rng);
    ag_params_to(&m.ps, o.device);
    ag_set_device(o.device);
    ag_optimizer opt;
    ag_optim_config cfg = ag_optim_defaults(AG_ADAM);
    cfg.beta2 = 0.98, cfg.eps = 1e-9, cfg.lr = 1e-4;
    if (ag_optim_init(&opt, &m.ps, &cfg) != AG_OK) ag_fatal("bench_seq2seq", "%s", ag_errmsg());
    const char *shape = "device=%s dim=%d heads=%d layers=%d hidden=%d batch=%d len=%d threads=%d";
    char sizes[192];
    snprintf(sizes, sizeof sizes, shape, ag_device_name(o.device), o.dim, o.heads, o.layers, o.hidden, o.batch, o.len,
             o.threads);

    double ms[64];
    for (int r = -2; r < o.reps; r++) { /* two warm-up steps: the arena grows, then no step allocates */
        double t0 = bench_wall_ms();
        ag_tensor *loss = tseq_loss(&m, &d, 0, o.batch, 0.1, true, &rng);
        ag_params_zero_grad(&m.ps);
        ag_backward(loss);
        ag_optim_step(&opt);
        (void)ag_item(loss);
        ag_sync(); /* the update's kernels, queued after the loss was read */
        ag_step_end();
        if (r >= 0) ms[r] = bench_wall_ms() - t0;
    }
    double med = bench_median(ms, o.reps);
    printf("result: way=train ms=%.3f fastest=%.3f %s\n", med, ms[0], sizes);

    int n = o.batch * d.Nt;
    int32_t *words[2] = {malloc(sizeof(int32_t) * n), malloc(sizeof(int32_t) * n)};
    for (int way = 0; way < 2; way++) {
        for (int r = -1; r < o.reps; r++) {
            double t0 = bench_wall_ms();
            if (way == 0 && greedy_decode(&m, &d, 0, o.batch, words[0], NULL) < 0) ag_fatal("bench_seq2seq", "%s", ag_errmsg());
            if (way == 1) decode_full(&m, &d, o.batch, words[1]);
            if (r >= 0) ms[r] = bench_wall_ms() - t0;
        }
        med = bench_median(ms, o.reps);
        printf("result: way=%s ms=%.3f fastest=%.3f words=%d checksum=%llu %s\n", way ? "decode_full" : "decode_cache",
               med, ms[0], d.Nt, checksum(words[way], n), sizes);
    }
    int same = !memcmp(words[0], words[1], sizeof(int32_t) * n);
    if (!same) fprintf(stderr, "bench_seq2seq: the cached and the full decoding chose different words\n");
    free(words[0]), free(words[1]);
    ag_set_device(AG_CPU);
    ag_optim_free(&opt), ag_params_free(&m.ps), reversal_free(&d), ag_shutdown();
    return same ? 0 : 1;
}
