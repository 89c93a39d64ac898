/* Lowerings: Bessel and Airy functions (special_bessel_*, special_*_bessel_*, special_airy_ai). */
#include "common.h"

const tpu_lowering_t tpu_lowerings_bessel[] = {
    {NULL, NULL},
};
