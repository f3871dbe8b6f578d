/* data.h - the data pipeline's public header lives in include/attngrad/data.h;
 * this path stays for the in-tree sources that include it relatively. */
#include "../include/attngrad/data.h"
