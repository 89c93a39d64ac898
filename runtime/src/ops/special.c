/* Lowerings: special family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_special[] = {
    {NULL, NULL},
};
