/* fuzz_vocab.c - a run's vocab.txt, as eval, predict and --resume read it. */
#include "fuzz.h"
#include "attngrad/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char err[512];
    ag_vocab *v;
    if (ag_vocab_load_mem("vocab.txt", data, size, &v, err, sizeof err)) return 0;
    (void)ag_vocab_fingerprint(v);
    for (int32_t id = 0; id < ag_vocab_size(v); id++) (void)ag_vocab_token(v, id);
    ag_vocab_free(v);
    return 0;
}
