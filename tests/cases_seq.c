/* cases_seq.c - (being written) */
#include "opcase.h"

const op_case seq_cases[] = {
    {NULL, NULL, NULL, 0, 0},
};
