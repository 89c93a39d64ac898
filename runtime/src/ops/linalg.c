/* Lowerings: linalg family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_linalg[] = {
    {NULL, NULL},
};
