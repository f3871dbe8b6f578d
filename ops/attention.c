/* attention.c - (being written) */
#include "../graph/internal.h"
