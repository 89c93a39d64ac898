/* Lowerings: reduce family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_reduce[] = {
    {NULL, NULL},
};
