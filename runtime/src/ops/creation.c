/* Lowerings: creation family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_creation[] = {
    {NULL, NULL},
};
