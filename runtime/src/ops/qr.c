/* Lowerings: qr. */
#include "matrix.h"

const tpu_lowering_t tpu_lowerings_qr[] = {
    {NULL, NULL},
};
