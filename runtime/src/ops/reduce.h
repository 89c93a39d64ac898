/* Reduce family helpers shared with other families (nn.c's normalisation layers
 * and losses): accurate float32 sums and the pieces built on them.
 *
 * XLA reduces f32 in whatever order the backend picks (the CPU plugin: a few
 * running accumulators per row), so an f32 sum of n terms errs by up to ~n ulp,
 * while PyTorch's CPU kernels sum pairwise ("cascade") or in double (var/std,
 * batch norm statistics, cumsum). Here f32 sums are computed as plain sums of
 * short runs followed by a pairwise tree whose additions carry their exact
 * rounding errors (TwoSum): within ~1 ulp of the exact sum on the data the tests
 * measure, in a fixed order on every backend, at about the cost of a plain reduce.
 * Measured against float64 in tests/test_numerics.py and runtime/tests/test_numerics.c. */
#ifndef TORCHTPU_SRC_OPS_REDUCE_H_
#define TORCHTPU_SRC_OPS_REDUCE_H_

#include "common.h"

/* Sum of x over `dims` (sorted, removed from the shape), in x's dtype. f32 values
 * get the accurate sum; other dtypes (f64 already accurate, integers exact,
 * f16/bf16 which callers widen to f32 first) a plain reduce. Empty dims give 0. */
tpu_val_t tpu_red_sum_accurate(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims);

/* The same sum with its low-order part: *out_hi is the f32 sum, *out_lo what its
 * rounding dropped (0 for other dtypes, and where the sum is inf or NaN). */
void tpu_red_sum_hilo(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims, tpu_val_t* out_hi,
                      tpu_val_t* out_lo);

/* (hi + lo) / d for f32 with one rounding error at most (~0.5 ulp instead of the
 * 1 ulp of two roundings), as a double accumulator would give; plain hi / d for
 * other dtypes. All operands of one shape. */
tpu_val_t tpu_red_div_hilo(tpu_builder_t* b, tpu_val_t hi, tpu_val_t lo, tpu_val_t d);

/* The rounding error of the f32 product p = x * y (x * y - p exactly, Dekker). */
tpu_val_t tpu_red_two_prod_err(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, tpu_val_t p);

/* Moments of x over `dims` (sorted) as accurate as PyTorch's CPU kernels, which
 * accumulate var/std in double: *out_mean (x's dtype, rounded once) and the sum
 * of squared deviations from it as *out_ss + *out_ss_lo (divide with
 * tpu_red_div_hilo). f32 gets the accurate path; complex x gives real squares. */
void tpu_red_moments(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims, tpu_val_t* out_mean,
                     tpu_val_t* out_ss, tpu_val_t* out_ss_lo);

/* The p-norm of `a` (|x|, already in its compute dtype) over `dims` (sorted,
 * removed): sum(a^p)^(1/p), max (p = inf), min (p = -inf) or the count of nonzeros
 * (p = 0); p is a 0-d value of a's dtype. torch.linalg.vector_norm's definition. */
tpu_val_t tpu_red_pnorm(tpu_builder_t* b, tpu_val_t a, tpu_val_t p, int ndims, const int64_t* dims);

#endif
