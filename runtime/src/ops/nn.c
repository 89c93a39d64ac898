/* Lowerings: nn family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_nn[] = {
    {NULL, NULL},
};
