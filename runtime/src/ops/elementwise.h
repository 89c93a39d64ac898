/* Elementwise formulas other families reuse (fused epilogues such as
 * _addmm_activation): values in, values out, in the value's own dtype (callers
 * convert f16/bf16 to f32 first, as the op would). */
#ifndef TORCHTPU_SRC_OPS_ELEMENTWISE_H_
#define TORCHTPU_SRC_OPS_ELEMENTWISE_H_
#include "common.h"

/* max(x, 0), NaN propagating (relu). */
tpu_val_t tpu_ew_relu(tpu_builder_t* b, tpu_val_t x);
/* gelu(x), exact (erf) or with the tanh approximation. */
tpu_val_t tpu_ew_gelu(tpu_builder_t* b, tpu_val_t x, bool tanh_approx);
#endif
