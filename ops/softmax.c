/* softmax.c - (being written) */
#include "../graph/internal.h"
