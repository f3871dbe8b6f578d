/* test_ops.c - the op case table (tests/opcase.h): an f64 gradient check of
 * every case by default; --dump, --device, --time for its other modes
 * (tests/opcase_run.c).  An argument that is not an option filters the
 * cases by substring: `test_ops_f64 softmax`, `test_ops_f32 --time lstm`. */
#include "opcase.h"

int main(int argc, char **argv) { return opcase_main(argc, argv, OPCASE_GRADCHECK); }
