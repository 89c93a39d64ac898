/* Lowerings: matmul family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_matmul[] = {
    {NULL, NULL},
};
