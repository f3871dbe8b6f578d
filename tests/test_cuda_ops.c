/* test_cuda_ops.c - every op case of the table (tests/opcase.h) on the CPU
 * and on the GPU from the same inputs, forward and backward compared
 * element by element, then (f64) gradchecked on the GPU: the table's
 * --device mode (tests/opcase_run.c, which explains the tolerance).  Exit
 * 77 without a GPU; AG_TEST_CUDA_ON_CPU=1 runs both sides on the CPU.
 * Cases are added to tests/cases_<family>.c, not here. */
#include "opcase.h"

int main(int argc, char **argv) { return opcase_main(argc, argv, OPCASE_DEVICE); }
