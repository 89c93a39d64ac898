/* Shared by the special-function families (special.c, polynomial.c, bessel.c):
 * builder shorthands for elementwise formulas, PyTorch's dtype rules for the
 * special_* kernels, and the modified Bessel functions I0/I1 that K0/K1 need. */
#ifndef TORCHTPU_SRC_OPS_SPECIAL_H_
#define TORCHTPU_SRC_OPS_SPECIAL_H_
#include "common.h"

#include <math.h>

/* Builder shorthands. */
static inline tpu_val_t sp_c(tpu_builder_t* b, tpu_val_t like, double v) { return tpu_ops_like(b, like, v); }
static inline tpu_val_t sp_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.add", x, y); }
static inline tpu_val_t sp_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.subtract", x, y); }
static inline tpu_val_t sp_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.multiply", x, y); }
static inline tpu_val_t sp_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.divide", x, y); }
static inline tpu_val_t sp_un(tpu_builder_t* b, const char* hlo, tpu_val_t x) { return tpu_b_unary(b, hlo, x); }
static inline tpu_val_t sp_sel(tpu_builder_t* b, tpu_val_t p, tpu_val_t t, tpu_val_t f) { return tpu_b_select(b, p, t, f); }
static inline tpu_val_t sp_or(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.or", x, y); }
static inline tpu_val_t sp_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.and", x, y); }
/* x <dir> constant */
static inline tpu_val_t sp_cmpc(tpu_builder_t* b, const char* dir, tpu_val_t x, double c) {
  return tpu_b_compare(b, dir, x, sp_c(b, x, c));
}
static inline tpu_val_t sp_isnan(tpu_builder_t* b, tpu_val_t x) { return tpu_b_compare(b, "NE", x, x); }
static inline tpu_val_t sp_abs(tpu_builder_t* b, tpu_val_t x) { return sp_un(b, "stablehlo.abs", x); }
static inline tpu_val_t sp_neg(tpu_builder_t* b, tpu_val_t x) { return sp_un(b, "stablehlo.negate", x); }
static inline tpu_val_t sp_log(tpu_builder_t* b, tpu_val_t x) { return sp_un(b, "stablehlo.log", x); }
static inline tpu_val_t sp_exp(tpu_builder_t* b, tpu_val_t x) { return sp_un(b, "stablehlo.exponential", x); }
/* x is an integer (floor(x) == x; false for inf and NaN). */
static inline tpu_val_t sp_is_int(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t fin = sp_cmpc(b, "LT", sp_abs(b, x), INFINITY);
  return sp_and(b, fin, tpu_b_compare(b, "EQ", sp_un(b, "stablehlo.floor", x), x));
}

/* Dtype flags of a special_* kernel. */
enum {
  SP_NO_HALF = 1u << 0, /* f16/bf16 raise NotImplementedError naming the kernel */
  SP_NO_INT = 1u << 1,  /* integral/bool raise NotImplementedError */
  SP_COMPLEX = 1u << 2, /* complex inputs are supported (others raise) */
};

/* PyTorch's dtype checks for kernel `kernel` dispatched on dtype t (complex:
 * unimplemented unless SP_COMPLEX; SP_* flags). Fails the builder and returns false if rejected. */
bool tpu_special_check_dtype(tpu_builder_t* b, const char* name, unsigned flags, const char* kernel,
                             tpu_dtype_t t);
/* Tensor arg i in its float result dtype *rt and compute dtype (returned). */
tpu_val_t tpu_special_float_input(tpu_builder_t* b, tpu_op_t* op, int i, const char* name, unsigned flags,
                                  const char* kernel, tpu_dtype_t* rt);
/* Arg i (tensor or Scalar) broadcast to `shape` in compute type ct, tensors cast
 * to the common dtype first. */
tpu_val_t tpu_special_operand(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t common, tpu_dtype_t ct,
                              const tpu_aval_t* shape);
/* Cephes chbevl: the Clenshaw sum 0.5 (b0 - b2) of the Chebyshev series c[0..n) at y. */
tpu_val_t tpu_special_chbevl(tpu_builder_t* b, tpu_val_t y, const double* c, size_t n);
/* I0(x) and I1(x) (Cephes Chebyshev expansions, as ATen's Math.h). */
tpu_val_t tpu_special_i0(tpu_builder_t* b, tpu_val_t x);
tpu_val_t tpu_special_i1(tpu_builder_t* b, tpu_val_t x);
/* The regularized incomplete gamma P(a, x), or Q(a, x) = 1 - P when upper
 * (igamma.c), elementwise over a and x of one shape and float dtype. */
tpu_val_t tpu_special_igamma(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, bool upper);
#endif
