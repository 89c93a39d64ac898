/* Lowerings: svd. */
#include "matrix.h"

const tpu_lowering_t tpu_lowerings_svd[] = {
    {NULL, NULL},
};
