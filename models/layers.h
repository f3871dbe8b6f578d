/* layers.h - the in-tree path of the public attention layers header
 * (include/attngrad/layers.h, installed as <attngrad/layers.h>). */
#include "../include/attngrad/layers.h"
