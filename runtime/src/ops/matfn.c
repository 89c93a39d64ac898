/* Lowerings: matfn. */
#include "matrix.h"

const tpu_lowering_t tpu_lowerings_matfn[] = {
    {NULL, NULL},
};
