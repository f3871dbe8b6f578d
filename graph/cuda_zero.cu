/* cuda_zero.cu - many device arrays zeroed in one launch: a step's
 * ag_params_zero_grad was one memset per parameter (20-30 launches a step
 * for the models here), now one copy of the arrays' table and one kernel
 * for up to ZERO_TABLE of them. */
#include "prelude.cuh"

enum { ZERO_TABLE = 64 };

typedef struct {
    ag_real *x;
    int64_t n;
} zero_entry;

/* blockIdx.y the array; the x blocks stride over the largest one's
 * elements, those past a smaller array's end doing nothing. */
__global__ void zero_reals_kernel(const zero_entry *table) {
    const zero_entry a = table[blockIdx.y];
    AG_CUDA_FOR(i, a.n) a.x[i] = 0;
}

extern "C" void ag__cuda_zero_reals(ag_real *const *x, const int64_t *n, int count) {
    for (int at = 0; at < count; at += ZERO_TABLE) {
        zero_entry table[ZERO_TABLE];
        int used = 0;
        int64_t most = 0;
        for (int a = at; a < count && a < at + ZERO_TABLE; a++)
            if (n[a] > 0) {
                table[used++] = {x[a], n[a]};
                most = n[a] > most ? n[a] : most;
            }
        if (!used) continue;
        const zero_entry *there = (const zero_entry *)ag__cuda_step_upload(table, (size_t)used * sizeof *table);
        ag__launch(zero_reals_kernel, dim3(ag__cuda_blocks(most), (unsigned)used), AG_CUDA_THREADS, 0, there);
    }
}
