/* Lowerings: index family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_index[] = {
    {NULL, NULL},
};
