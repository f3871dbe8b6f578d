/* train.h - the in-tree view of the trainer: its public header
 * (include/attngrad/train.h) and models/internal.h. */
#include "../include/attngrad/train.h"
#include "internal.h"
