/* Lowerings: small ops without a family of their own yet (shrinks, trace,
 * nextafter, frexp, renorm, isin, the async asserts). Move them when their
 * family grows.
 *
 * Numerics follow PyTorch's CPU kernels: f16/bf16 compute in f32 (opmath) and
 * round once. Scalar parameters (lambd, p, maxnorm) are runtime operands, so
 * their value-dependent branches (renorm's p = inf) are selects, not C ifs. */
#include "check.h"
#include "common.h"
#include "random.h"

#include <math.h>
#include <string.h>

/* ------------------------------------------------------- shorthands */

static tpu_val_t mc_bin(tpu_builder_t* b, const char* hlo, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, hlo, x, y); }
static tpu_val_t mc_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return mc_bin(b, "stablehlo.add", x, y); }
static tpu_val_t mc_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return mc_bin(b, "stablehlo.subtract", x, y); }
static tpu_val_t mc_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return mc_bin(b, "stablehlo.multiply", x, y); }
static tpu_val_t mc_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return mc_bin(b, "stablehlo.and", x, y); }
static tpu_val_t mc_or(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return mc_bin(b, "stablehlo.or", x, y); }
static tpu_val_t mc_c(tpu_builder_t* b, tpu_val_t like, double v) { return tpu_ops_like(b, like, v); }
static tpu_val_t mc_cmpc(tpu_builder_t* b, const char* dir, tpu_val_t x, double c) {
  return tpu_b_compare(b, dir, x, mc_c(b, x, c));
}
static tpu_val_t mc_isnan(tpu_builder_t* b, tpu_val_t x) { return tpu_b_compare(b, "NE", x, x); }

/* ATen's `"kernel" not implemented for 'Long'` for kernels dispatched on floats only. */
static bool mc_need_float(tpu_builder_t* b, const char* kernel, tpu_dtype_t t) {
  if (tpu_dtype_is_float(t)) return true;
  TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type_name(t));
  return false;
}

/* Sum of all elements of x (already in its accumulation dtype) as a 0-d value. */
static tpu_val_t mc_sum_all(tpu_builder_t* b, tpu_val_t x) {
  int64_t dims[TPU_MAX_RANK];
  int r = tpu_b_rank(b, x);
  for (int i = 0; i < r; i++) dims[i] = i;
  return tpu_b_reduce(b, x, tpu_b_const(b, tpu_b_dtype(b, x), 0), r, dims, "stablehlo.add");
}

/* ------------------------------------------------------------------ trace */

/* Sum of the main diagonal; integral inputs accumulate to int64 like sum(). */
static tpu_status_t* tpu_lower_trace(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.dtype == TPU_BOOL) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"trace\" not implemented for '%s'", tpu_dtype_scalar_type_name(in.dtype));
    return NULL;
  }
  if (in.rank != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "trace: expected a matrix, but got tensor with dim %d", in.rank);
    return NULL;
  }
  tpu_dtype_t out = tpu_dtype_is_float(in.dtype) || tpu_dtype_is_complex(in.dtype) ? in.dtype : TPU_I64;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(out));
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, in.dims);
  tpu_val_t diag = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, 0), tpu_b_iota(b, &ia, 1));
  tpu_val_t s = mc_sum_all(b, tpu_b_select(b, diag, x, mc_c(b, x, 0)));
  return tpu_ops_result1(tpu_b_convert(b, s, out), outs, nouts);
}

/* ---------------------------------------------------------------- shrinks */

/* The float input arg `i` in opmath and lambd (arg `li`) as a 0-d value of it. */
static bool mc_shrink_args(tpu_builder_t* b, tpu_op_t* op, int i, int li, const char* kernel, tpu_val_t* x,
                           tpu_val_t* l) {
  tpu_aval_t in = tpu_op_aval(op, i);
  if (!mc_need_float(b, kernel, in.dtype)) return false;
  *x = tpu_b_convert(b, tpu_op_tensor(b, op, i), tpu_dtype_opmath(in.dtype));
  tpu_val_t lv = tpu_ops_has_value(op, li) ? tpu_op_scalar(b, op, li, tpu_b_dtype(b, *x))
                                           : tpu_b_const(b, tpu_b_dtype(b, *x), 0.5);
  *l = lv;
  return true;
}

/* -lambd <= x <= lambd: the dead zone (false for NaN, which passes through). */
static tpu_val_t mc_in_zone(tpu_builder_t* b, tpu_val_t x, tpu_val_t l) {
  tpu_aval_t xa = *tpu_b_aval(b, x); /* a copy: the builder's table may move */
  l = tpu_ops_bcast(b, l, &xa);
  tpu_val_t neg = tpu_b_unary(b, "stablehlo.negate", l);
  return mc_and(b, tpu_b_compare(b, "GE", x, neg), tpu_b_compare(b, "LE", x, l));
}

/* ATen: x > l ? x - l : (x < -l ? x + l : x * 0); x * 0 keeps NaN and -0. */
static tpu_status_t* tpu_lower_softshrink(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_val_t x, l;
  if (!mc_shrink_args(b, op, 0, 1, "softshrink_check", &x, &l)) return NULL;
  tpu_aval_t xa = *tpu_b_aval(b, x); /* a copy: the builder's table may move */
  l = tpu_ops_bcast(b, l, &xa);
  tpu_val_t neg = tpu_b_unary(b, "stablehlo.negate", l);
  tpu_val_t r = tpu_b_select(b, tpu_b_compare(b, "LT", x, neg), mc_add(b, x, l), mc_mul(b, x, mc_c(b, x, 0)));
  r = tpu_b_select(b, tpu_b_compare(b, "GT", x, l), mc_sub(b, x, l), r);
  return tpu_ops_result1(tpu_b_convert(b, r, tpu_op_aval(op, 0).dtype), outs, nouts);
}

/* ATen: (x >= -l && x <= l) ? 0 : x. */
static tpu_status_t* tpu_lower_hardshrink(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_val_t x, l;
  if (!mc_shrink_args(b, op, 0, 1, "hardshrink_cpu", &x, &l)) return NULL;
  tpu_val_t r = tpu_b_select(b, mc_in_zone(b, x, l), mc_c(b, x, 0), x);
  return tpu_ops_result1(tpu_b_convert(b, r, tpu_op_aval(op, 0).dtype), outs, nouts);
}

/* Both shrinks' backward (grad, self, lambd): zero in the dead zone, else grad. */
static tpu_status_t* tpu_lower_shrink_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_val_t x, l;
  if (!mc_shrink_args(b, op, 1, 2, tpu_op_name(op), &x, &l)) return NULL;
  tpu_aval_t ga = tpu_op_aval(op, 0);
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_b_dtype(b, x));
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, (const int[]){0, 1}, &shape)) return NULL;
  shape.dtype = tpu_b_dtype(b, x);
  g = tpu_ops_bcast(b, g, &shape);
  x = tpu_ops_bcast(b, x, &shape);
  tpu_val_t r = tpu_b_select(b, mc_in_zone(b, x, l), mc_c(b, g, 0), g);
  return tpu_ops_result1(tpu_b_convert(b, r, ga.dtype), outs, nouts);
}

/* ---------------------------------------------------- float bit twiddling */

/* x's bits as the signed integer of the same width (x's shape). */
static tpu_val_t mc_bits(tpu_builder_t* b, tpu_val_t x) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  size_t w = tpu_dtype_size(a.dtype);
  a.dtype = w == 2 ? TPU_I16 : w == 4 ? TPU_I32 : TPU_I64;
  return tpu_b_bitcast(b, x, &a);
}
static tpu_val_t mc_from_bits(tpu_builder_t* b, tpu_val_t bits, tpu_dtype_t t) {
  tpu_aval_t a = *tpu_b_aval(b, bits);
  a.dtype = t;
  return tpu_b_bitcast(b, bits, &a);
}

/* Float order as integers: sign-magnitude bits to two's complement, so ±0 map to
 * 0 and denormals keep their order (XLA:CPU compares floats with denormals as 0). */
static tpu_val_t mc_order_key(tpu_builder_t* b, tpu_val_t bits) {
  double mag = (double)((UINT64_C(1) << (tpu_dtype_size(tpu_b_dtype(b, bits)) * 8 - 1)) - 1);
  tpu_val_t m = mc_and(b, bits, mc_c(b, bits, mag));
  return tpu_b_select(b, mc_cmpc(b, "LT", bits, 0.0), tpu_b_unary(b, "stablehlo.negate", m), m);
}

/* std::nextafter on the bit pattern: no float arithmetic or float compares, so
 * denormals survive XLA's flush-to-zero. Works for any float width. */
static tpu_status_t* tpu_lower_nextafter(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const int args[2] = {0, 1};
  tpu_dtype_t t = tpu_ops_result_type(op, 2, args);
  if (!mc_need_float(b, "nextafter_cpu", t)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  shape.dtype = t;
  tpu_val_t x = tpu_ops_operand(b, op, 0, t, &shape);
  tpu_val_t y = tpu_ops_operand(b, op, 1, t, &shape);
  tpu_val_t bx = mc_bits(b, x), by = mc_bits(b, y);
  tpu_val_t kx = mc_order_key(b, bx), ky = mc_order_key(b, by);
  /* Away from zero when moving up from a positive x or down from a negative one. */
  tpu_val_t away = tpu_b_compare(b, "EQ", tpu_b_compare(b, "LT", kx, ky), mc_cmpc(b, "GT", kx, 0.0));
  tpu_val_t step = tpu_b_select(b, away, mc_c(b, bx, 1), mc_c(b, bx, -1));
  tpu_val_t r = mc_from_bits(b, mc_add(b, bx, step), t);
  /* From ±0: the smallest denormal with y's sign. */
  tpu_val_t sign = mc_and(b, by, tpu_b_binary(b, "stablehlo.shift_left", mc_c(b, by, 1),
                                              mc_c(b, by, (double)(tpu_dtype_size(t) * 8 - 1))));
  tpu_val_t tiny = mc_from_bits(b, mc_or(b, sign, mc_c(b, by, 1)), t);
  r = tpu_b_select(b, mc_cmpc(b, "EQ", kx, 0.0), tiny, r);
  r = tpu_b_select(b, tpu_b_compare(b, "EQ", kx, ky), y, r);
  r = tpu_b_select(b, mc_or(b, mc_isnan(b, x), mc_isnan(b, y)), mc_add(b, x, y), r);
  return tpu_ops_result1(r, outs, nouts);
}

/* frexp: x = mantissa * 2^exponent with |mantissa| in [0.5, 1), exponent int32;
 * 0, inf and NaN give (x, 0) like glibc. Computed on the f32 bit pattern (f16 and
 * bf16 widen exactly; the mantissa narrows back exactly); denormals are normalised
 * with count_leading_zeros instead of a scaling multiply that XLA could flush. */
static tpu_status_t* tpu_lower_frexp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  if (!tpu_dtype_is_float(t)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.frexp() only supports floating-point dtypes");
    return NULL;
  }
  if (t == TPU_F64) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "frexp: float64 is not supported on tpu");
    return NULL;
  }
  if (max_outs < 2) {
    TPU_B_FAIL(b, TPU_INTERNAL, "frexp: expected 2 outputs");
    return NULL;
  }
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_F32);
  tpu_val_t bits = mc_bits(b, x);
  tpu_val_t sign = mc_and(b, bits, mc_c(b, bits, (double)INT32_MIN));
  tpu_val_t frac = mc_and(b, bits, mc_c(b, bits, 0x7fffff));
  tpu_val_t ebits = mc_and(b, tpu_b_binary(b, "stablehlo.shift_right_logical", bits, mc_c(b, bits, 23)),
                           mc_c(b, bits, 0xff));
  /* Denormal: value = frac * 2^-149 with the top bit of frac at 31 - clz. */
  tpu_val_t clz = tpu_b_unary(b, "stablehlo.count_leading_zeros", frac);
  tpu_val_t dfrac = mc_and(b, tpu_b_binary(b, "stablehlo.shift_left", frac, mc_sub(b, clz, mc_c(b, clz, 8))),
                           mc_c(b, bits, 0x7fffff));
  tpu_val_t denorm = mc_cmpc(b, "EQ", ebits, 0.0);
  tpu_val_t e = tpu_b_select(b, denorm, mc_sub(b, mc_c(b, clz, -117), clz), mc_sub(b, ebits, mc_c(b, ebits, 126)));
  tpu_val_t f = tpu_b_select(b, denorm, dfrac, frac);
  tpu_val_t m = mc_from_bits(b, mc_or(b, mc_or(b, sign, f), mc_c(b, bits, 126 << 23)), TPU_F32);
  /* 0, inf, NaN: (x, 0). */
  tpu_val_t special = mc_or(b, mc_cmpc(b, "EQ", mc_or(b, ebits, frac), 0.0), mc_cmpc(b, "EQ", ebits, 0xff));
  m = tpu_b_select(b, special, x, m); /* x's own bits: select does not flush */
  e = tpu_b_select(b, special, mc_c(b, e, 0), e);
  outs[0] = tpu_b_convert(b, m, t);
  outs[1] = e;
  *nouts = 2;
  return NULL;
}

/* ----------------------------------------------------------------- renorm */

/* renorm(self, p, dim, maxnorm): each slice along dim whose p-norm exceeds
 * maxnorm is scaled by maxnorm / (norm + 1e-7), as ATen's renorm_scale_factor.
 * p is a runtime Scalar, so p = inf (max |x|) and p = 2 (exact sqrt of squares)
 * are selected at run time over the general sum(|x|^p)^(1/p). */
static tpu_status_t* tpu_lower_renorm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  bool complex = tpu_dtype_is_complex(in.dtype);
  if (!tpu_dtype_is_float(in.dtype) && !complex) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "linalg.vector_norm: Expected a floating point or complex tensor as input. Got %s",
               tpu_dtype_scalar_type_name(in.dtype));
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, 0), in.rank);
  if (!tpu_b_ok(b)) return NULL;
  /* Norms, p and maxnorm are real (a complex input's magnitudes). */
  tpu_dtype_t rt = in.dtype == TPU_C128 ? TPU_F64 : in.dtype == TPU_C64 ? TPU_F32 : in.dtype;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), complex ? in.dtype : ct);
  tpu_val_t p = tpu_op_scalar(b, op, 1, ct);
  tpu_val_t maxnorm = tpu_op_scalar(b, op, 3, ct);
  int64_t rdims[TPU_MAX_RANK];
  int nr = 0;
  for (int i = 0; i < in.rank; i++)
    if (i != dim) rdims[nr++] = i;
  tpu_val_t ax = tpu_b_unary(b, "stablehlo.abs", x);
  tpu_aval_t xa = *tpu_b_aval(b, ax);
  tpu_val_t pb = tpu_ops_bcast(b, p, &xa);
  tpu_val_t zero = tpu_b_const(b, ct, 0);
  tpu_val_t gen = tpu_b_reduce(b, tpu_b_binary(b, "stablehlo.power", ax, pb), zero, nr, rdims, "stablehlo.add");
  tpu_aval_t na = *tpu_b_aval(b, gen);
  tpu_val_t inv_p = tpu_b_binary(b, "stablehlo.divide", tpu_b_const(b, ct, 1), p);
  gen = tpu_b_binary(b, "stablehlo.power", gen, tpu_ops_bcast(b, inv_p, &na));
  tpu_val_t l2 = tpu_b_unary(b, "stablehlo.sqrt", tpu_b_reduce(b, mc_mul(b, ax, ax), zero, nr, rdims, "stablehlo.add"));
  tpu_val_t linf = tpu_b_reduce(b, ax, zero, nr, rdims, "stablehlo.maximum");
  tpu_val_t l1 = tpu_b_reduce(b, ax, zero, nr, rdims, "stablehlo.add");
  tpu_val_t pn = tpu_ops_bcast(b, p, &na);
  tpu_val_t norm = tpu_b_select(b, mc_cmpc(b, "EQ", pn, 2.0), l2, gen);
  norm = tpu_b_select(b, mc_cmpc(b, "EQ", pn, 1.0), l1, norm);
  norm = tpu_b_select(b, mc_cmpc(b, "EQ", pn, INFINITY), linf, norm);
  tpu_val_t mn = tpu_ops_bcast(b, maxnorm, &na);
  tpu_val_t scaled = tpu_b_binary(b, "stablehlo.divide", mn, mc_add(b, norm, mc_c(b, norm, 1e-7)));
  tpu_val_t factor = tpu_b_select(b, tpu_b_compare(b, "GT", norm, mn), scaled, mc_c(b, norm, 1.0));
  /* ATen rounds the factor to self's (value) dtype before multiplying. */
  factor = tpu_b_convert(b, tpu_b_convert(b, factor, rt), ct);
  int64_t bdims[1] = {dim};
  tpu_val_t fb = tpu_b_broadcast_in_dim(b, factor, in.rank, in.dims, bdims);
  if (complex) fb = tpu_ops_complex(b, fb, mc_c(b, fb, 0.0));
  return tpu_ops_result1(tpu_b_convert(b, mc_mul(b, x, fb), in.dtype), outs, nouts);
}

/* ------------------------------------------------------------------- isin */

/* isin(elements, test_elements): every element against every test element
 * (an [elements..., N] compare reduced with or). Either side may be a Scalar. */
static tpu_status_t* tpu_lower_isin(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const int args[2] = {0, 1};
  tpu_dtype_t t = tpu_ops_result_type(op, 2, args);
  if (tpu_dtype_is_complex(t)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "isin: complex tensors are not supported on tpu");
    return NULL;
  }
  bool invert = tpu_op_bool(op, 3, false);
  tpu_aval_t ea = tpu_op_kind(op, 0) == TPU_ARG_TENSOR ? tpu_op_aval(op, 0) : tpu_aval_make(t, 0, NULL);
  tpu_aval_t ta = tpu_op_kind(op, 1) == TPU_ARG_TENSOR ? tpu_op_aval(op, 1) : tpu_aval_make(t, 0, NULL);
  ea.dtype = t;
  ta.dtype = t;
  tpu_val_t e = tpu_ops_operand(b, op, 0, t, &ea);
  tpu_val_t te = tpu_ops_operand(b, op, 1, t, &ta);
  int64_t n = tpu_aval_numel(&ta);
  te = tpu_b_reshape(b, te, 1, &n);
  int64_t dims[TPU_MAX_RANK + 1], emap[TPU_MAX_RANK];
  for (int i = 0; i < ea.rank; i++) dims[i] = ea.dims[i], emap[i] = i;
  dims[ea.rank] = n;
  int64_t tmap[1] = {ea.rank};
  tpu_val_t eq = tpu_b_compare(b, "EQ", tpu_b_broadcast_in_dim(b, e, ea.rank + 1, dims, emap),
                               tpu_b_broadcast_in_dim(b, te, ea.rank + 1, dims, tmap));
  int64_t last[1] = {ea.rank};
  tpu_val_t r = tpu_b_reduce(b, eq, tpu_b_const_i(b, TPU_BOOL, 0), 1, last, "stablehlo.or");
  if (invert) r = tpu_b_unary(b, "stablehlo.not", r);
  return tpu_ops_result1(r, outs, nouts);
}

/* ------------------------------------------------------------------- mode */

/* mode(self, dim, keepdim): the most frequent value along dim (the smallest on
 * ties) and the index of its last occurrence, as ATen's sort-based CPU kernel.
 * Counts come from an all-pairs equality [..., n, n], so NaNs count 0 and never
 * win unless every value is NaN. */
static tpu_status_t* tpu_lower_mode(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (max_outs < 2 || tpu_dtype_is_complex(in.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "mode: complex tensors are not supported on tpu");
    return NULL;
  }
  int rank = in.rank ? in.rank : 1;
  int dim = tpu_ops_dim(b, tpu_op_int(op, 1, -1), rank);
  bool keep = tpu_op_bool(op, 2, false);
  if (!tpu_b_ok(b)) return NULL;
  int64_t n = in.rank ? in.dims[dim] : 1;
  if (n == 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "mode(): Expected reduction dim %d to have non-zero size.", dim);
    return NULL;
  }
  tpu_dtype_t vt = in.dtype == TPU_BOOL ? TPU_U8 : in.dtype;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), vt);
  if (in.rank == 0) x = tpu_b_reshape(b, x, 1, &n);
  /* Move dim last: [rest..., n]. */
  int64_t perm[TPU_MAX_RANK], rest[TPU_MAX_RANK + 1];
  int nr = 0;
  for (int i = 0; i < rank; i++)
    if (i != dim) perm[nr] = i, rest[nr] = in.rank ? in.dims[i] : 1, nr++;
  perm[nr] = dim;
  x = tpu_b_transpose(b, x, perm);
  /* eq[..., i, j] = x_i == x_j; cnt_i = sum_j eq. */
  int64_t pd[TPU_MAX_RANK + 1], mi[TPU_MAX_RANK], mj[TPU_MAX_RANK];
  for (int i = 0; i < nr; i++) pd[i] = rest[i], mi[i] = i, mj[i] = i;
  pd[nr] = n, pd[nr + 1] = n;
  mi[nr] = nr, mj[nr] = nr + 1;
  tpu_val_t eq = tpu_b_compare(b, "EQ", tpu_b_broadcast_in_dim(b, x, nr + 2, pd, mi),
                               tpu_b_broadcast_in_dim(b, x, nr + 2, pd, mj));
  int64_t lastj[1] = {nr + 1}, lasti[1] = {nr};
  tpu_val_t cnt = tpu_b_reduce(b, tpu_b_convert(b, eq, TPU_I32), tpu_b_const(b, TPU_I32, 0), 1, lastj,
                               "stablehlo.add");
  tpu_val_t best = tpu_b_reduce(b, cnt, tpu_b_const(b, TPU_I32, 0), 1, lasti, "stablehlo.maximum");
  tpu_aval_t xa = *tpu_b_aval(b, x);
  tpu_val_t cand = tpu_b_compare(b, "EQ", cnt, tpu_b_broadcast_in_dim(b, best, nr + 1, xa.dims, mi));
  /* Non-candidates become a value no candidate beats: +inf, or the row's max for ints. */
  tpu_val_t filler;
  if (tpu_dtype_is_float(vt)) {
    filler = mc_c(b, x, INFINITY);
  } else {
    tpu_val_t rowmax;
    tpu_b_argreduce(b, x, nr, true, &rowmax, NULL);
    filler = tpu_b_broadcast_in_dim(b, rowmax, nr + 1, xa.dims, mi);
  }
  tpu_val_t value;
  tpu_b_argreduce(b, tpu_b_select(b, cand, x, filler), nr, false, &value, NULL);
  /* Last index holding the value. */
  tpu_aval_t ia = tpu_aval_make(TPU_I64, nr + 1, xa.dims);
  tpu_val_t iota = tpu_b_iota(b, &ia, nr);
  tpu_val_t hit = tpu_b_compare(b, "EQ", x, tpu_b_broadcast_in_dim(b, value, nr + 1, xa.dims, mi));
  tpu_val_t idx = tpu_b_reduce(b, tpu_b_select(b, hit, iota, mc_c(b, iota, 0)), tpu_b_const_i(b, TPU_I64, 0), 1,
                               lasti, "stablehlo.maximum");
  value = tpu_b_convert(b, value, in.dtype);
  if (keep && in.rank) {
    int64_t kd[TPU_MAX_RANK];
    for (int i = 0; i < in.rank; i++) kd[i] = i == dim ? 1 : in.dims[i];
    value = tpu_b_reshape(b, value, in.rank, kd);
    idx = tpu_b_reshape(b, idx, in.rank, kd);
  }
  outs[0] = value;
  outs[1] = idx;
  *nouts = 2;
  return NULL;
}

/* rrelu_with_noise(self, noise!, lower, upper, training, generator) -> out, then
 * the new noise (a mutated argument). Training: negative inputs are scaled by a
 * uniform slope in [lower, upper], recorded in noise (1 elsewhere). Eval: a leaky
 * relu with slope (lower + upper) / 2 and noise unchanged, as ATen does. */
static tpu_status_t* tpu_lower_rrelu_with_noise(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_dtype_is_float(a.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"rrelu_with_noise\" not implemented for '%s'", tpu_dtype_name(a.dtype));
    return NULL;
  }
  tpu_dtype_t ct = tpu_dtype_opmath(a.dtype);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t noise = tpu_op_tensor(b, op, 1);
  tpu_aval_t sh = a;
  sh.dtype = ct;
  tpu_val_t lo = tpu_ops_bcast(b, tpu_op_scalar(b, op, 2, ct), &sh);
  tpu_val_t hi = tpu_ops_bcast(b, tpu_op_scalar(b, op, 3, ct), &sh);
  tpu_val_t neg = tpu_b_compare(b, "LT", x, tpu_b_full(b, &sh, 0.0));
  tpu_val_t slope;
  if (tpu_op_bool(op, 4, false)) {
    tpu_rng_t g = tpu_rng_open(b, op);
    tpu_val_t u = tpu_rng_uniform(b, &g, &a);
    slope = tpu_b_binary(b, "stablehlo.add", lo, tpu_b_binary(b, "stablehlo.multiply", u,
                                                                tpu_b_binary(b, "stablehlo.subtract", hi, lo)));
    slope = tpu_b_select(b, neg, slope, tpu_b_full(b, &sh, 1.0));
    noise = tpu_b_convert(b, slope, tpu_op_aval(op, 1).dtype);
  } else {
    slope = tpu_b_binary(b, "stablehlo.multiply", tpu_b_binary(b, "stablehlo.add", lo, hi), tpu_b_full(b, &sh, 0.5));
  }
  outs[0] = tpu_b_convert(b, tpu_b_select(b, neg, tpu_b_binary(b, "stablehlo.multiply", x, slope), x), a.dtype);
  outs[1] = noise;
  *nouts = 2;
  return NULL;
}

/* ----------------------------------------------------------- asserts */

/* _assert_async(self), _assert_async.msg(self, assert_msg) and
 * _functional_assert_async.msg(self, assert_msg, dep_token) -> dep_token: the
 * one-element self being zero is a device-side check (check.h), raised at the
 * next sync with the message, so a compiled or eager assert never syncs. */
static tpu_status_t* tpu_lower_assert_async(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  int64_t n = tpu_aval_numel(&a);
  if (n != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Boolean value of Tensor with %s is ambiguous",
               n == 0 ? "no values" : "more than one value");
    return NULL;
  }
  const tpu_arg_t* m = tpu_op_arg(op, 1);
  const char* msg = m && m->kind == TPU_ARG_STRING && m->u.str ? m->u.str
                                                             : "Expected Tensor with single nonzero value, but got zero";
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 0, NULL);
  tpu_op_check(b, op, tpu_b_compare(b, "EQ", x, mc_c(b, x, 0.0)), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s", msg);
  *nouts = 0;
  if (strcmp(tpu_op_name(op), "_functional_assert_async") == 0)
    return tpu_ops_result1(tpu_op_tensor(b, op, 2), outs, nouts);
  return NULL;
}

const tpu_lowering_t tpu_lowerings_misc[] = {
    {"rrelu_with_noise", tpu_lower_rrelu_with_noise},
    {"trace", tpu_lower_trace},
    {"_assert_async", tpu_lower_assert_async},
    {"_functional_assert_async", tpu_lower_assert_async},
    {"softshrink", tpu_lower_softshrink},
    {"softshrink_backward", tpu_lower_shrink_backward},
    {"hardshrink", tpu_lower_hardshrink},
    {"hardshrink_backward", tpu_lower_shrink_backward},
    {"nextafter", tpu_lower_nextafter},
    {"frexp", tpu_lower_frexp},
    {"renorm", tpu_lower_renorm},
    {"isin", tpu_lower_isin},
    {"mode", tpu_lower_mode},
    {NULL, NULL},
};
