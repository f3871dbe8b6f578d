/* cases_attention.c - (being written) */
#include "opcase.h"

const op_case attention_cases[] = {
    {NULL, NULL, NULL, 0, 0},
};
