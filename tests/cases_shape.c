/* cases_shape.c - (being written) */
#include "opcase.h"

const op_case shape_cases[] = {
    {NULL, NULL, NULL, 0, 0},
};
