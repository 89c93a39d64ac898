/* Lowerings: eigh. */
#include "matrix.h"

const tpu_lowering_t tpu_lowerings_eigh[] = {
    {NULL, NULL},
};
