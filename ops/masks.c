/* masks.c - (being written) */
#include "../graph/internal.h"
