/* Lowerings: fft family. */
#include "common.h"

const tpu_lowering_t tpu_lowerings_fft[] = {
    {NULL, NULL},
};
