/* Lowerings: orthogonal polynomials (special_*_polynomial_*). */
#include "common.h"

const tpu_lowering_t tpu_lowerings_polynomial[] = {
    {NULL, NULL},
};
