/* test_dropout_mask.c - the CPU's dropout mask (ops/dropout.c: eight
 * generator streams in vector lanes, on the pool) against the definition
 * one stream at a time (ops/dropout_mask.h), which is the code the GPU runs
 * to draw the same mask on the device.  Runs on the CPU, so a machine
 * without a GPU checks the source the GPU compiles; the CUDA op tests then
 * check the GPU's mask against the CPU's on a GPU.  Also: the share kept is
 * keep, and the mask does not depend on the thread count. */
#include "../graph/internal.h"
#include "../ops/dropout_mask.h"
#include "check.h"

#include <stdlib.h>

/* The mask from the definition: every block's streams in turn. */
static void reference_mask(uint8_t *kept, int64_t rows, int64_t row_len, int64_t row_base, uint64_t seed,
                           double keep) {
    int64_t blocks = (row_len + AG_MASK_BLOCK - 1) / AG_MASK_BLOCK, below = ag__mask_below(keep);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t b = 0; b < blocks; b++) {
            int64_t first = b * AG_MASK_BLOCK, n = row_len - first < AG_MASK_BLOCK ? row_len - first : AG_MASK_BLOCK;
            for (int s = 0; s < AG_MASK_STREAMS; s++)
                ag__mask_stream(kept + r * row_len + first, n, ag__mask_block_key(seed, row_base + r, b), s, below);
        }
}

static void one_shape(int64_t rows, int64_t row_len, double keep, int64_t row_base) {
    size_t n = (size_t)(rows * row_len);
    uint8_t *cpu = malloc(n + 1), *ref = malloc(n + 1);
    memset(ref, 2, n + 1); /* 2: never written */
    ag_rng rng, copy;
    ag_rng_seed(&rng, 1234 + (uint64_t)row_len);
    copy = rng;
    int64_t old = ag_set_dropout_row_base(row_base);
    ag__dropout_mask(cpu, rows, row_len, keep, &rng);
    ag_set_dropout_row_base(old);
    reference_mask(ref, rows, row_len, row_base, ag_rng_next(&copy), keep);
    int64_t differ = 0, unwritten = 0, kept = 0;
    for (size_t i = 0; i < n; i++) {
        differ += cpu[i] != ref[i];
        unwritten += ref[i] > 1;
        kept += cpu[i];
    }
    CHECK(differ == 0 && unwritten == 0, "[%lld,%lld] keep %g row base %lld: %lld elements differ, %lld not drawn",
          (long long)rows, (long long)row_len, keep, (long long)row_base, (long long)differ, (long long)unwritten);
    CHECK(ref[n] == 2, "[%lld,%lld]: the definition wrote past the mask", (long long)rows, (long long)row_len);
    CHECK(memcmp(&rng, &copy, sizeof rng) == 0, "the mask takes exactly one draw");
    if (n >= 20000) { /* the share kept: within 5 standard deviations */
        double share = (double)kept / (double)n, sd = sqrt(keep * (1 - keep) / (double)n);
        CHECK(fabs(share - keep) <= 5 * sd + 1e-12, "[%lld,%lld] keeps %.4f of the units, want %.4f", (long long)rows,
              (long long)row_len, share, keep);
    }
    free(cpu);
    free(ref);
}

/* The same mask on one thread and on several. */
static void thread_count(void) {
    int64_t rows = 7, row_len = 3 * AG_MASK_BLOCK + 5;
    uint8_t *a = malloc((size_t)(rows * row_len)), *b = malloc((size_t)(rows * row_len));
    ag_rng r1, r2;
    ag_rng_seed(&r1, 99);
    r2 = r1;
    ag_set_num_threads(1);
    ag__dropout_mask(a, rows, row_len, 0.7, &r1);
    ag_set_num_threads(4);
    ag__dropout_mask(b, rows, row_len, 0.7, &r2);
    ag_set_num_threads(1);
    CHECK(memcmp(a, b, (size_t)(rows * row_len)) == 0, "the mask changed with the thread count");
    free(a);
    free(b);
}

int main(void) {
    /* lengths around the 16-element step and the 4096-element block, keeps
     * at the ends of (0, 1], a data-parallel rank's row base */
    const int64_t lens[] = {1, 7, 15, 16, 17, 300, 4095, 4096, 4097, 2 * 4096 + 9, 50 * 300};
    const double keeps[] = {0.5, 0.9, 0.13, 1e-9, 1};
    for (size_t i = 0; i < sizeof lens / sizeof *lens; i++)
        for (size_t k = 0; k < sizeof keeps / sizeof *keeps; k++) one_shape(3, lens[i], keeps[k], 0);
    one_shape(5, 4097, 0.5, 8);
    one_shape(64, 300, 0.8, 1 << 20);
    one_shape(1, 100003, 0.55, 0);
    CHECK(ag__mask_below(0.5) == 2147483648LL && ag__mask_below(1) == 4294967296LL && ag__mask_below(1e-12) == 1,
          "keep 2^32, rounded up");
    thread_count();
    return check_summary("dropout_mask");
}
