/* models.h - the in-tree view of the model layer: the public model API
 * (include/attngrad/model.h) and the declarations models/ shares with the
 * trainer and tools but does not publish (models/internal.h). */
#include "../include/attngrad/model.h"
#include "internal.h"
