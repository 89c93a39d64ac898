/* Random-number helpers for lowerings (ops/random.c), for any family that needs
 * random values (dropout-like ops, rrelu ...).
 *
 * A tpu_rng_t is the stream of one op execution: tpu_rng_open derives it from the
 * device generator's (seed, offset) operand, and every draw advances it, so draws
 * within an op are independent and the same seed replays them. */
#ifndef TORCHTPU_SRC_OPS_RANDOM_H_
#define TORCHTPU_SRC_OPS_RANDOM_H_

#include "torchtpu/lowering.h"

typedef struct tpu_rng {
  tpu_val_t state; /* tensor<2xui64>, the rng_bit_generator state */
} tpu_rng_t;

tpu_rng_t tpu_rng_open(tpu_builder_t* b, tpu_op_t* op);
/* Random bits of `shape` as TPU_U32 or TPU_U64. */
tpu_val_t tpu_rng_bits(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t bits, const tpu_aval_t* shape);
/* Uniform [0, 1) of `shape`, built with the precision of shape->dtype (PyTorch's
 * uniform_real: 8 bits for bfloat16, 24 for float32 ...) so that it stays below 1
 * in that dtype; the value is returned in the compute dtype (f32, or f64 for f64). */
tpu_val_t tpu_rng_uniform(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape);
/* Uniform on the open interval (0, 1) in compute dtype `ct` (f32 or f64): safe for log. */
tpu_val_t tpu_rng_uniform_open(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t ct, const tpu_aval_t* shape);
/* Standard normal in compute dtype `ct` (Box-Muller). */
tpu_val_t tpu_rng_normal(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t ct, const tpu_aval_t* shape);

#endif
