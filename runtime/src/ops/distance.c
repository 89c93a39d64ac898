/* Lowerings: distance. */
#include "matrix.h"

const tpu_lowering_t tpu_lowerings_distance[] = {
    {NULL, NULL},
};
