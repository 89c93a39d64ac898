/* Lowerings: shape family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_shape[] = {
    {NULL, NULL},
};
