/* Lowerings: random family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_random[] = {
    {NULL, NULL},
};
