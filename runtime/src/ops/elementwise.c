/* Lowerings: the elementwise family — arithmetic, math functions, comparisons,
 * logical and bitwise ops, activations and the backward ops autograd emits for
 * them.
 *
 * Most ops are rows of two tables (ggml style):
 *   - maps: one input tensor (plus, for backward ops, the incoming gradient) and
 *     any number of static or Scalar parameters;
 *   - binaries: two operands (tensors or Scalars) with PyTorch's type promotion.
 * A row names the aten op, its StableHLO op or a small formula function, its dtype
 * rules (EW_* flags) and PyTorch's kernel name for "not implemented for" errors.
 * Ops with other signatures (alpha, rounding modes, optional bounds, several
 * results) have their own lowerings after the tables.
 *
 * Numerics follow PyTorch's CPU kernels: f16/bf16 compute in f32 (opmath) and
 * round once; integral inputs of float functions give float32; NaN handling and
 * integer rounding as in ATen. Deliberate difference: integer division, remainder
 * and fmod by zero return XLA's defined values (x / 0 = -1, x % 0 = x) instead of
 * raising ZeroDivisionError like the CPU: raising would need a device sync, so we
 * do what CUDA does and return a value. Likewise integer pow with a negative
 * Scalar exponent computes ATen's powi values (1, ±1 or 0) instead of raising:
 * the exponent is a runtime operand. */
#include "elementwise.h"

#include "matmul.h"
#include "matrix.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* <math.h> defines these only for XSI/GNU sources. */
#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#ifndef M_LN2
#define M_LN2 0.69314718055994530942
#endif
#ifndef M_LN10
#define M_LN10 2.30258509299404568402
#endif
#ifndef M_SQRT2
#define M_SQRT2 1.41421356237309504880
#endif
#ifndef M_SQRT1_2
#define M_SQRT1_2 0.70710678118654752440
#endif
#ifndef M_2_SQRTPI
#define M_2_SQRTPI 1.12837916709551257390
#endif

/* ------------------------------------------------------------------ dtypes */

enum {
  EW_FLOAT = 1u << 0,       /* integral/bool inputs compute in and return float32 */
  EW_PRED = 1u << 1,        /* map: result is bool; fn sees the input in its own dtype */
  EW_INT_SAME = 1u << 2,    /* map: integral inputs are returned unchanged (floor ...) */
  EW_NO_BOOL = 1u << 3,     /* bool raises NotImplementedError naming `kernel` */
  EW_NO_INT = 1u << 4,      /* integral raises NotImplementedError */
  EW_NO_FLOAT = 1u << 5,    /* floating raises NotImplementedError */
  EW_BOOL_MSG = 1u << 6,    /* bool raises RuntimeError with `kernel` as the message */
  EW_GRAD = 1u << 7,        /* map: arg 0 is the incoming gradient (a backward op) */
  EW_CMP = 1u << 8,         /* binary: compare in the common dtype; result bool */
  EW_LOGICAL = 1u << 9,     /* binary: operands as bool; result bool */
  EW_SAME_DTYPE = 1u << 10, /* binary: tensor operands must share a dtype */
  EW_COMPLEX = 1u << 11,    /* complex inputs are supported (others raise) */
  EW_CUT = 1u << 12,        /* map, complex: a branch cut on an axis, taken as C99 does (below) */
  EW_ODD = 1u << 13,        /* with EW_CUT: f(-z) = -f(z), so the cut on the imaginary axis too */
};
#define EW_FLOAT_ONLY (EW_NO_INT | EW_NO_BOOL)

/* PyTorch's dtype checks for a kernel that dispatches on dtype `t`. */
static bool tpu_ew_check_dtype(tpu_builder_t* b, const char* name, unsigned flags, const char* kernel,
                               tpu_dtype_t t) {
  if (tpu_dtype_is_complex(t) && !(flags & EW_COMPLEX)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: complex tensors are not supported on tpu", name);
    return false;
  }
  if (t == TPU_BOOL && (flags & EW_BOOL_MSG)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s", kernel);
    return false;
  }
  bool bad = (t == TPU_BOOL && (flags & EW_NO_BOOL)) || (tpu_dtype_is_int(t) && (flags & EW_NO_INT)) ||
             (tpu_dtype_is_float(t) && (flags & EW_NO_FLOAT));
  if (bad) TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel ? kernel : name, tpu_dtype_scalar_type_name(t));
  return !bad;
}

/* The dtype that decides promotion for arg i: a tensor's, or a Scalar's kind. */
static tpu_dtype_t tpu_ew_arg_dtype(const tpu_op_t* op, int i) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  switch (a ? a->kind : TPU_ARG_NONE) {
    case TPU_ARG_TENSOR: return a->u.tensor.dtype;
    case TPU_ARG_SCALAR: return a->u.scalar.dtype;
    case TPU_ARG_INT: return TPU_I64;
    case TPU_ARG_FLOAT: return TPU_F64;
    case TPU_ARG_BOOL: return TPU_BOOL;
    default: return TPU_DTYPE_COUNT;
  }
}

/* ------------------------------------------------------- builder shorthands */

static tpu_val_t ew_c(tpu_builder_t* b, tpu_val_t like, double v) { return tpu_ops_like(b, like, v); }
static tpu_val_t ew_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.add", x, y); }
static tpu_val_t ew_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.subtract", x, y); }
static tpu_val_t ew_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.multiply", x, y); }
static tpu_val_t ew_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.divide", x, y); }
static tpu_val_t ew_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.and", x, y); }
static tpu_val_t ew_or(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.or", x, y); }
static tpu_val_t ew_not(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.not", x); }
static tpu_val_t ew_un(tpu_builder_t* b, const char* hlo, tpu_val_t x) { return tpu_b_unary(b, hlo, x); }
static tpu_val_t ew_sel(tpu_builder_t* b, tpu_val_t p, tpu_val_t t, tpu_val_t f) { return tpu_b_select(b, p, t, f); }
static tpu_val_t ew_cmp(tpu_builder_t* b, const char* dir, tpu_val_t x, tpu_val_t y) { return tpu_b_compare(b, dir, x, y); }
/* x <dir> constant */
static tpu_val_t ew_cmpc(tpu_builder_t* b, const char* dir, tpu_val_t x, double c) {
  return tpu_b_compare(b, dir, x, ew_c(b, x, c));
}
static tpu_val_t ew_sigmoid(tpu_builder_t* b, tpu_val_t x) { return ew_un(b, "stablehlo.logistic", x); }
/* 1 - x */
static tpu_val_t ew_one_minus(tpu_builder_t* b, tpu_val_t x) { return ew_sub(b, ew_c(b, x, 1.0), x); }

static tpu_val_t ew_isnan(tpu_builder_t* b, tpu_val_t x) { return ew_cmp(b, "NE", x, x); }

/* max/min propagating a NaN from either operand, as PyTorch does (XLA:CPU's
 * maximum/minimum drop a NaN in the second operand); or/and on bool. */
static tpu_val_t ew_maxmin(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, bool is_max) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (t == TPU_BOOL) return is_max ? ew_or(b, x, y) : ew_and(b, x, y);
  tpu_val_t m = tpu_b_binary(b, is_max ? "stablehlo.maximum" : "stablehlo.minimum", x, y);
  if (!tpu_dtype_is_float(t)) return m;
  return ew_sel(b, ew_isnan(b, x), x, ew_sel(b, ew_isnan(b, y), y, m));
}
static tpu_val_t ew_max(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_maxmin(b, x, y, true); }
static tpu_val_t ew_min(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_maxmin(b, x, y, false); }

/* The sign bit of a float (true for -0.0 and negative NaNs), via a same-width bitcast. */
static tpu_val_t ew_signbit_float(tpu_builder_t* b, tpu_val_t x) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  size_t w = tpu_dtype_size(a.dtype);
  a.dtype = w == 2 ? TPU_I16 : w == 4 ? TPU_I32 : TPU_I64;
  return ew_cmpc(b, "LT", tpu_b_bitcast(b, x, &a), 0.0);
}

/* A scalar parameter i as a value like `like` (dtype and shape); `dflt` when absent. */
static tpu_val_t tpu_ew_param(tpu_builder_t* b, tpu_op_t* op, int i, tpu_val_t like, double dflt) {
  tpu_aval_t shape = *tpu_b_aval(b, like);
  tpu_val_t v = tpu_ops_has_value(op, i) ? tpu_op_scalar(b, op, i, shape.dtype) : tpu_b_const(b, shape.dtype, dflt);
  return tpu_ops_bcast(b, v, &shape);
}

/* Arg i broadcast to `shape` in the compute type ct. Tensors are cast to the
 * common dtype first, as TensorIterator does; Scalars go straight to ct, as ATen
 * reads a CPU scalar in opmath precision. */
static tpu_val_t tpu_ew_operand(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t common, tpu_dtype_t ct,
                                const tpu_aval_t* shape) {
  tpu_val_t v = tpu_op_kind(op, i) == TPU_ARG_TENSOR
                    ? tpu_b_convert(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), common), ct)
                    : tpu_op_scalar(b, op, i, ct);
  return tpu_ops_bcast(b, v, shape);
}

/* The string argument i, or `dflt` when absent. */
static const char* tpu_ew_str(const tpu_op_t* op, int i, const char* dflt) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  return a && a->kind == TPU_ARG_STRING && a->u.str ? a->u.str : dflt;
}

/* --------------------------------------------------------- math functions */
/* Formula helpers take values already in the compute type. */

/* |z| of a complex z is real (the builder types it). */
static tpu_val_t ew_abs(tpu_builder_t* b, tpu_val_t x) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  return tpu_dtype_is_signed(t) || tpu_dtype_is_complex(t) ? ew_un(b, "stablehlo.abs", x) : x;
}

/* (x > 0) - (x < 0): sign(NaN) = 0 and sign(-0.0) = +0, like ATen's CPU kernel. */
static tpu_val_t ew_sign(tpu_builder_t* b, tpu_val_t x) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (t == TPU_BOOL) return x;
  if (!tpu_dtype_is_signed(t)) return tpu_b_convert(b, ew_cmpc(b, "NE", x, 0.0), t);
  if (!tpu_dtype_is_float(t)) return ew_un(b, "stablehlo.sign", x);
  return ew_sel(b, ew_cmpc(b, "GT", x, 0.0), ew_c(b, x, 1.0),
                ew_sel(b, ew_cmpc(b, "LT", x, 0.0), ew_c(b, x, -1.0), ew_c(b, x, 0.0)));
}

static tpu_val_t ew_trunc(tpu_builder_t* b, tpu_val_t x) {
  return ew_sel(b, ew_cmpc(b, "LT", x, 0.0), ew_un(b, "stablehlo.ceil", x), ew_un(b, "stablehlo.floor", x));
}

static tpu_val_t ew_softplus_raw(tpu_builder_t* b, tpu_val_t x) {
  return ew_un(b, "stablehlo.log_plus_one", ew_un(b, "stablehlo.exponential", x));
}

/* min(max(x + 3, 0), 6) */
static tpu_val_t ew_relu6_shift3(tpu_builder_t* b, tpu_val_t x) {
  return ew_min(b, ew_max(b, ew_add(b, x, ew_c(b, x, 3.0)), ew_c(b, x, 0.0)), ew_c(b, x, 6.0));
}

/* Map formulas: (builder, op for parameters, input x, gradient g or TPU_NOVAL). */
typedef tpu_val_t (*tpu_ew_map_fn_t)(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, tpu_val_t g);

/* ------------------------------------------------------ complex functions */

static tpu_val_t ew_neg(tpu_builder_t* b, tpu_val_t x) { return ew_un(b, "stablehlo.negate", x); }

/* z with both parts multiplied by the real c: a complex product would turn an
 * infinite part times the constant's zero imaginary part into NaN. */
static tpu_val_t ew_complex_scale(tpu_builder_t* b, tpu_val_t z, double c) {
  tpu_val_t re = tpu_ops_part(b, z, false), im = tpu_ops_part(b, z, true);
  return tpu_ops_complex(b, ew_mul(b, re, ew_c(b, re, c)), ew_mul(b, im, ew_c(b, im, c)));
}

/* hlo(z) for a function with a branch cut along an axis, on the side C99 (and
 * PyTorch) take from the sign of a zero part: sqrt(-1 - 0i) = -i. XLA evaluates
 * at +0 whatever the sign. Every such function here is real on the real axis off
 * its cut, so f(conj z) = conj f(z): evaluate at |im| and conjugate where im's
 * sign bit is set. An odd function (f(-z) = -f(z)) also has its cuts on the
 * imaginary axis taken from the sign of re the same way. */
static tpu_val_t ew_complex_cut(tpu_builder_t* b, const char* hlo, tpu_val_t z, bool odd) {
  tpu_val_t re = tpu_ops_part(b, z, false), im = tpu_ops_part(b, z, true);
  tpu_val_t neg_re = ew_signbit_float(b, re), conj = ew_signbit_float(b, im);
  if (odd) {
    conj = ew_sel(b, neg_re, ew_not(b, conj), conj); /* f(z) = -f(|re| - i im) for re < 0 */
    re = ew_abs(b, re);
  }
  tpu_val_t w = ew_un(b, hlo, tpu_ops_complex(b, re, ew_abs(b, im)));
  tpu_val_t wr = tpu_ops_part(b, w, false), wi = tpu_ops_part(b, w, true);
  wi = ew_sel(b, conj, ew_neg(b, wi), wi);
  if (odd) {
    wr = ew_sel(b, neg_re, ew_neg(b, wr), wr);
    wi = ew_sel(b, neg_re, ew_neg(b, wi), wi);
  }
  return tpu_ops_complex(b, wr, wi);
}

/* f * g where an exact zero factor wins over an infinite other one (keeping the
 * zero's sign times the other's): sinh(0 + i y) has the real part 0, not NaN. */
static tpu_val_t ew_mul_zero_wins(tpu_builder_t* b, tpu_val_t f, tpu_val_t g) {
  tpu_val_t fz = ew_cmpc(b, "EQ", f, 0.0), gz = ew_cmpc(b, "EQ", g, 0.0);
  tpu_val_t p = ew_sel(b, gz, ew_mul(b, g, ew_sign(b, f)), ew_mul(b, f, g));
  return ew_sel(b, fz, ew_mul(b, f, ew_sign(b, g)), p);
}

/* Complex sinh or cosh from the real functions of the parts. XLA's complex forms
 * lose the relative accuracy of small parts (sinh(1e-6 i) 2-5% off in
 * complex64); these keep it, as C's csinh/ccosh do. */
static tpu_val_t ew_complex_sinh_cosh(tpu_builder_t* b, tpu_val_t z, bool cosh) {
  tpu_val_t a = tpu_ops_part(b, z, false), c = tpu_ops_part(b, z, true);
  tpu_val_t sh = ew_un(b, "chlo.sinh", a), ch = ew_un(b, "chlo.cosh", a);
  tpu_val_t co = ew_un(b, "stablehlo.cosine", c), si = ew_un(b, "stablehlo.sine", c);
  return tpu_ops_complex(b, ew_mul_zero_wins(b, cosh ? ch : sh, co), ew_mul_zero_wins(b, cosh ? sh : ch, si));
}

/* sin, cos, sinh or cosh; complex ones as above (sin z = -i sinh(iz), cos z = cosh(iz)). */
static tpu_val_t ew_trig(tpu_builder_t* b, tpu_val_t x, bool hyperbolic, bool cosine) {
  static const char* const hlo[2][2] = {{"stablehlo.sine", "stablehlo.cosine"}, {"chlo.sinh", "chlo.cosh"}};
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return ew_un(b, hlo[hyperbolic][cosine], x);
  if (hyperbolic) return ew_complex_sinh_cosh(b, x, cosine);
  tpu_val_t re = tpu_ops_part(b, x, false), im = tpu_ops_part(b, x, true);
  tpu_val_t w = ew_complex_sinh_cosh(b, tpu_ops_complex(b, ew_neg(b, im), re), cosine);
  if (cosine) return w;
  return tpu_ops_complex(b, tpu_ops_part(b, w, true), ew_neg(b, tpu_ops_part(b, w, false)));
}

/* A map row's single op on x: for complex x through the branch-cut rule. */
static tpu_val_t ew_map_hlo(tpu_builder_t* b, const char* hlo, unsigned flags, tpu_val_t x) {
  if ((flags & EW_CUT) && tpu_dtype_is_complex(tpu_b_dtype(b, x))) return ew_complex_cut(b, hlo, x, flags & EW_ODD);
  return ew_un(b, hlo, x);
}

#define EW_MAP_FN(name) static tpu_val_t name(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, tpu_val_t g)
#define EW_UNUSED (void)op, (void)g

EW_MAP_FN(map_abs) { EW_UNUSED; return ew_abs(b, x); }
EW_MAP_FN(map_sign) { EW_UNUSED; return ew_sign(b, x); }
/* sgn: z / |z| for complex z (0 at 0), sign for real x. */
EW_MAP_FN(map_sgn) {
  EW_UNUSED;
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return ew_sign(b, x);
  tpu_val_t r = ew_abs(b, x);
  tpu_val_t zero = ew_cmpc(b, "EQ", r, 0.0);
  tpu_val_t q = ew_div(b, x, tpu_ops_complex(b, ew_sel(b, zero, ew_c(b, r, 1.0), r), ew_c(b, r, 0.0)));
  return ew_sel(b, zero, ew_c(b, x, 0.0), q);
}
/* Complex exp2, log2 and log10 scale the parts (ew_complex_scale); atan(z) is
 * -i atanh(iz), whose cuts follow ew_complex_cut. */
EW_MAP_FN(map_exp2) {
  EW_UNUSED;
  if (tpu_dtype_is_complex(tpu_b_dtype(b, x))) return ew_un(b, "stablehlo.exponential", ew_complex_scale(b, x, M_LN2));
  return tpu_b_binary(b, "stablehlo.power", ew_c(b, x, 2.0), x);
}
static tpu_val_t ew_log_base(tpu_builder_t* b, tpu_val_t x, double ln_base) {
  tpu_val_t l = ew_map_hlo(b, "stablehlo.log", EW_CUT, x);
  return tpu_dtype_is_complex(tpu_b_dtype(b, x)) ? ew_complex_scale(b, l, 1.0 / ln_base) : ew_div(b, l, ew_c(b, x, ln_base));
}
EW_MAP_FN(map_log2) { EW_UNUSED; return ew_log_base(b, x, M_LN2); }
EW_MAP_FN(map_log10) { EW_UNUSED; return ew_log_base(b, x, M_LN10); }
EW_MAP_FN(map_reciprocal) { EW_UNUSED; return ew_div(b, ew_c(b, x, 1.0), x); }
EW_MAP_FN(map_atan) {
  EW_UNUSED;
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return tpu_b_binary(b, "stablehlo.atan2", x, ew_c(b, x, 1.0));
  tpu_val_t re = tpu_ops_part(b, x, false), im = tpu_ops_part(b, x, true);
  tpu_val_t w = ew_complex_cut(b, "chlo.atanh", tpu_ops_complex(b, ew_neg(b, im), re), true); /* atanh(iz) */
  return tpu_ops_complex(b, tpu_ops_part(b, w, true), ew_neg(b, tpu_ops_part(b, w, false)));
}
EW_MAP_FN(map_sin) { EW_UNUSED; return ew_trig(b, x, false, false); }
EW_MAP_FN(map_cos) { EW_UNUSED; return ew_trig(b, x, false, true); }
EW_MAP_FN(map_sinh) { EW_UNUSED; return ew_trig(b, x, true, false); }
EW_MAP_FN(map_cosh) { EW_UNUSED; return ew_trig(b, x, true, true); }
EW_MAP_FN(map_deg2rad) { EW_UNUSED; return ew_mul(b, x, ew_c(b, x, M_PI / 180.0)); }
EW_MAP_FN(map_rad2deg) { EW_UNUSED; return ew_mul(b, x, ew_c(b, x, 180.0 / M_PI)); }
EW_MAP_FN(map_trunc) { EW_UNUSED; return ew_trunc(b, x); }
EW_MAP_FN(map_frac) { EW_UNUSED; return ew_sub(b, x, ew_trunc(b, x)); }
/* sin(pi x) / (pi x), 1 at 0 */
EW_MAP_FN(map_sinc) {
  EW_UNUSED;
  tpu_val_t px = ew_mul(b, x, ew_c(b, x, M_PI));
  return ew_sel(b, ew_cmpc(b, "EQ", x, 0.0), ew_c(b, x, 1.0), ew_div(b, ew_trig(b, px, false, false), px));
}
tpu_val_t tpu_ew_relu(tpu_builder_t* b, tpu_val_t x) { return ew_max(b, x, ew_c(b, x, 0.0)); }
EW_MAP_FN(map_relu) { EW_UNUSED; return tpu_ew_relu(b, x); }
/* x * f(x) with f(-inf) = 0 (silu, mish, gelu, hardswish) is -inf * 0 = NaN at
 * -inf by the formula, but the function's limit there is 0 (-0.0, the sign of
 * x * 0 for every finite negative x): the defined value. (The CPU's answers at
 * +-inf are no reference: float32 gelu(+inf) is NaN with oneDNN's AVX-512 kernel
 * and +inf with its AVX2 one.) */
static tpu_val_t ew_limit_at_neg_inf(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return ew_sel(b, ew_cmpc(b, "EQ", x, -INFINITY), ew_c(b, x, -0.0), y);
}
EW_MAP_FN(map_silu) {
  EW_UNUSED;
  if (tpu_dtype_is_complex(tpu_b_dtype(b, x))) /* ATen's complex kernel: x / (1 + exp(-x)) */
    return ew_div(b, x, ew_add(b, ew_c(b, x, 1.0), ew_un(b, "stablehlo.exponential", ew_neg(b, x))));
  return ew_limit_at_neg_inf(b, x, ew_mul(b, x, ew_sigmoid(b, x)));
}
EW_MAP_FN(map_mish) {
  EW_UNUSED;
  return ew_limit_at_neg_inf(b, x, ew_mul(b, x, ew_un(b, "stablehlo.tanh", ew_softplus_raw(b, x))));
}
EW_MAP_FN(map_hardswish) {
  EW_UNUSED;
  return ew_limit_at_neg_inf(b, x, ew_div(b, ew_mul(b, x, ew_relu6_shift3(b, x)), ew_c(b, x, 6.0)));
}
EW_MAP_FN(map_hardsigmoid) { EW_UNUSED; return ew_div(b, ew_relu6_shift3(b, x), ew_c(b, x, 6.0)); }

/* Predicates see x in its own dtype. */
EW_MAP_FN(map_logical_not) { EW_UNUSED; return ew_not(b, tpu_b_convert(b, x, TPU_BOOL)); }
static tpu_val_t ew_pred_const(tpu_builder_t* b, tpu_val_t x, bool v) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  a.dtype = TPU_BOOL;
  return tpu_b_full(b, &a, v ? 1.0 : 0.0);
}
EW_MAP_FN(map_isnan) {
  EW_UNUSED;
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (tpu_dtype_is_complex(t)) return ew_or(b, ew_isnan(b, tpu_ops_part(b, x, false)), ew_isnan(b, tpu_ops_part(b, x, true)));
  return tpu_dtype_is_float(t) ? ew_isnan(b, x) : ew_pred_const(b, x, false);
}
EW_MAP_FN(map_isinf) {
  EW_UNUSED;
  return tpu_dtype_is_float(tpu_b_dtype(b, x)) ? ew_cmpc(b, "EQ", ew_un(b, "stablehlo.abs", x), INFINITY)
                                               : ew_pred_const(b, x, false);
}
EW_MAP_FN(map_isposinf) {
  EW_UNUSED;
  return tpu_dtype_is_float(tpu_b_dtype(b, x)) ? ew_cmpc(b, "EQ", x, INFINITY) : ew_pred_const(b, x, false);
}
EW_MAP_FN(map_isneginf) {
  EW_UNUSED;
  return tpu_dtype_is_float(tpu_b_dtype(b, x)) ? ew_cmpc(b, "EQ", x, -INFINITY) : ew_pred_const(b, x, false);
}
EW_MAP_FN(map_isfinite) {
  EW_UNUSED;
  return tpu_dtype_is_float(tpu_b_dtype(b, x)) ? ew_un(b, "stablehlo.is_finite", x) : ew_pred_const(b, x, true);
}
EW_MAP_FN(map_signbit) {
  EW_UNUSED;
  tpu_dtype_t t = tpu_b_dtype(b, x);
  if (tpu_dtype_is_float(t)) return ew_signbit_float(b, x);
  return tpu_dtype_is_signed(t) ? ew_cmpc(b, "LT", x, 0.0) : ew_pred_const(b, x, false);
}

/* ------------------------------------------------------------ activations */

/* gelu's `approximate`: 0 none, 1 tanh, -1 invalid (failed). */
static int tpu_ew_gelu_mode(tpu_builder_t* b, const tpu_op_t* op, int i) {
  const char* s = tpu_ew_str(op, i, "none");
  if (strcmp(s, "none") == 0) return 0;
  if (strcmp(s, "tanh") == 0) return 1;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "approximate argument must be either none or tanh.");
  return -1;
}

#define GELU_BETA (M_SQRT2 * M_2_SQRTPI * 0.5) /* sqrt(2 / pi) */
#define GELU_KAPPA 0.044715

/* sqrt(2/pi) * (x + kappa x^3) */
static tpu_val_t ew_gelu_inner(tpu_builder_t* b, tpu_val_t x) {
  tpu_val_t x3 = ew_mul(b, ew_mul(b, x, x), x);
  return ew_mul(b, ew_c(b, x, GELU_BETA), ew_add(b, x, ew_mul(b, ew_c(b, x, GELU_KAPPA), x3)));
}

/* Phi(x) = erfc(-x / sqrt2) / 2: accurate in the lower tail. */
static tpu_val_t ew_normal_cdf(tpu_builder_t* b, tpu_val_t x) {
  return ew_mul(b, ew_c(b, x, 0.5), ew_un(b, "chlo.erfc", ew_mul(b, x, ew_c(b, x, -M_SQRT1_2))));
}

tpu_val_t tpu_ew_gelu(tpu_builder_t* b, tpu_val_t x, bool tanh_approx) {
  if (!tanh_approx) return ew_limit_at_neg_inf(b, x, ew_mul(b, x, ew_normal_cdf(b, x)));
  tpu_val_t t = ew_un(b, "stablehlo.tanh", ew_gelu_inner(b, x));
  return ew_limit_at_neg_inf(b, x, ew_mul(b, ew_mul(b, x, ew_c(b, x, 0.5)), ew_add(b, ew_c(b, x, 1.0), t)));
}

EW_MAP_FN(map_gelu) {
  (void)g;
  int mode = tpu_ew_gelu_mode(b, op, 1);
  return mode < 0 ? TPU_NOVAL : tpu_ew_gelu(b, x, mode == 1);
}

EW_MAP_FN(map_gelu_backward) {
  int mode = tpu_ew_gelu_mode(b, op, 2);
  if (mode < 0) return TPU_NOVAL;
  if (mode == 0) {
    /* cdf + x pdf */
    tpu_val_t cdf = ew_normal_cdf(b, x);
    tpu_val_t pdf = ew_mul(b, ew_c(b, x, M_2_SQRTPI * M_SQRT1_2 * 0.5),
                           ew_un(b, "stablehlo.exponential", ew_mul(b, ew_c(b, x, -0.5), ew_mul(b, x, x))));
    return ew_mul(b, g, ew_add(b, cdf, ew_mul(b, x, pdf)));
  }
  tpu_val_t x2 = ew_mul(b, x, x);
  tpu_val_t th = ew_un(b, "stablehlo.tanh", ew_gelu_inner(b, x));
  tpu_val_t left = ew_mul(b, ew_c(b, x, 0.5), x);
  tpu_val_t left_d = ew_mul(b, ew_c(b, x, 0.5), ew_add(b, ew_c(b, x, 1.0), th));
  tpu_val_t inner_d = ew_mul(b, ew_c(b, x, GELU_BETA), ew_add(b, ew_c(b, x, 1.0), ew_mul(b, ew_c(b, x, 3.0 * GELU_KAPPA), x2)));
  tpu_val_t right_d = ew_mul(b, ew_mul(b, left, ew_one_minus(b, ew_mul(b, th, th))), inner_d);
  return ew_mul(b, g, ew_add(b, left_d, right_d));
}

/* softplus(x, beta, threshold): x where x*beta > threshold, else log1p(exp(x*beta))/beta */
EW_MAP_FN(map_softplus) {
  (void)g;
  tpu_val_t beta = tpu_ew_param(b, op, 1, x, 1.0), thr = tpu_ew_param(b, op, 2, x, 20.0);
  tpu_val_t z = ew_mul(b, x, beta);
  return ew_sel(b, ew_cmp(b, "GT", z, thr), x, ew_div(b, ew_softplus_raw(b, z), beta));
}

EW_MAP_FN(map_softplus_backward) {
  tpu_val_t beta = tpu_ew_param(b, op, 2, x, 1.0), thr = tpu_ew_param(b, op, 3, x, 20.0);
  tpu_val_t zb = ew_mul(b, x, beta);
  tpu_val_t z = ew_un(b, "stablehlo.exponential", zb);
  return ew_sel(b, ew_cmp(b, "GT", zb, thr), g, ew_div(b, ew_mul(b, g, z), ew_add(b, z, ew_c(b, x, 1.0))));
}

/* elu: x <= 0 ? expm1(x * input_scale) * alpha * scale : x * scale */
static tpu_val_t ew_elu(tpu_builder_t* b, tpu_val_t x, tpu_val_t alpha, tpu_val_t scale, tpu_val_t in_scale) {
  tpu_val_t neg = ew_mul(b, ew_un(b, "stablehlo.exponential_minus_one", ew_mul(b, x, in_scale)), ew_mul(b, alpha, scale));
  return ew_sel(b, ew_cmpc(b, "LE", x, 0.0), neg, ew_mul(b, x, scale));
}
EW_MAP_FN(map_elu) {
  (void)g;
  return ew_elu(b, x, tpu_ew_param(b, op, 1, x, 1.0), tpu_ew_param(b, op, 2, x, 1.0), tpu_ew_param(b, op, 3, x, 1.0));
}
/* celu(x, alpha) = elu(x, alpha, 1, 1/alpha) */
EW_MAP_FN(map_celu) {
  (void)g;
  tpu_val_t alpha = tpu_ew_param(b, op, 1, x, 1.0), one = ew_c(b, x, 1.0);
  return ew_elu(b, x, alpha, one, ew_div(b, one, alpha));
}
/* elu_backward(grad, alpha, scale, input_scale, is_result, self_or_result) */
EW_MAP_FN(map_elu_backward) {
  tpu_val_t alpha = tpu_ew_param(b, op, 1, x, 1.0), scale = tpu_ew_param(b, op, 2, x, 1.0);
  tpu_val_t in_scale = tpu_ew_param(b, op, 3, x, 1.0);
  tpu_val_t negcoef = ew_mul(b, alpha, scale);
  tpu_val_t neg = tpu_op_bool(op, 4, false)
                      ? ew_mul(b, ew_mul(b, g, in_scale), ew_add(b, x, negcoef)) /* x is the result */
                      : ew_mul(b, ew_mul(b, ew_mul(b, g, in_scale), negcoef),
                               ew_un(b, "stablehlo.exponential", ew_mul(b, x, in_scale)));
  return ew_sel(b, ew_cmpc(b, "LE", x, 0.0), neg, ew_mul(b, g, scale));
}

EW_MAP_FN(map_leaky_relu) {
  (void)g;
  tpu_val_t slope = tpu_ew_param(b, op, 1, x, 0.01);
  return ew_sel(b, ew_cmpc(b, "GT", x, 0.0), x, ew_mul(b, x, slope));
}
EW_MAP_FN(map_leaky_relu_backward) {
  tpu_val_t slope = tpu_ew_param(b, op, 2, x, 0.01);
  return ew_sel(b, ew_cmpc(b, "GT", x, 0.0), g, ew_mul(b, g, slope));
}

/* hardtanh = clamp(x, min_val, max_val) with the bounds cast to x's dtype. */
EW_MAP_FN(map_hardtanh) {
  (void)g;
  return ew_min(b, ew_max(b, x, tpu_ew_param(b, op, 1, x, -1.0)), tpu_ew_param(b, op, 2, x, 1.0));
}
EW_MAP_FN(map_hardtanh_backward) {
  tpu_val_t lo = tpu_ew_param(b, op, 2, x, -1.0), hi = tpu_ew_param(b, op, 3, x, 1.0);
  tpu_val_t out = ew_or(b, ew_cmp(b, "LE", x, lo), ew_cmp(b, "GE", x, hi));
  return ew_sel(b, out, ew_c(b, g, 0.0), g);
}

EW_MAP_FN(map_threshold) {
  (void)g;
  tpu_val_t thr = tpu_ew_param(b, op, 1, x, 0.0), value = tpu_ew_param(b, op, 2, x, 0.0);
  return ew_sel(b, ew_cmp(b, "LE", x, thr), value, x);
}
EW_MAP_FN(map_threshold_backward) {
  tpu_val_t thr = tpu_ew_param(b, op, 2, x, 0.0);
  return ew_sel(b, ew_cmp(b, "LE", x, thr), ew_c(b, g, 0.0), g);
}

/* x = the forward's result; a complex derivative is conjugated, as ATen's kernels do. */
EW_MAP_FN(map_sigmoid_backward) { (void)op; return ew_mul(b, g, tpu_ops_conj(b, ew_mul(b, ew_one_minus(b, x), x))); }
EW_MAP_FN(map_tanh_backward) { (void)op; return ew_mul(b, g, tpu_ops_conj(b, ew_one_minus(b, ew_mul(b, x, x)))); }
EW_MAP_FN(map_silu_backward) {
  (void)op;
  tpu_val_t s = ew_sigmoid(b, x);
  return ew_mul(b, ew_mul(b, g, s), ew_add(b, ew_c(b, x, 1.0), ew_mul(b, x, ew_one_minus(b, s))));
}
EW_MAP_FN(map_mish_backward) {
  (void)op;
  tpu_val_t s = ew_sigmoid(b, x), t = ew_un(b, "stablehlo.tanh", ew_softplus_raw(b, x));
  return ew_mul(b, g, ew_add(b, t, ew_mul(b, ew_mul(b, x, s), ew_one_minus(b, ew_mul(b, t, t)))));
}
/* x < -3: 0; x <= 3: g (x/3 + 1/2); else g */
EW_MAP_FN(map_hardswish_backward) {
  (void)op;
  tpu_val_t mid = ew_mul(b, g, ew_add(b, ew_div(b, x, ew_c(b, x, 3.0)), ew_c(b, x, 0.5)));
  return ew_sel(b, ew_cmpc(b, "LT", x, -3.0), ew_c(b, x, 0.0), ew_sel(b, ew_cmpc(b, "LE", x, 3.0), mid, g));
}
EW_MAP_FN(map_hardsigmoid_backward) {
  (void)op;
  tpu_val_t in = ew_and(b, ew_cmpc(b, "GT", x, -3.0), ew_cmpc(b, "LT", x, 3.0));
  return ew_sel(b, in, ew_div(b, g, ew_c(b, x, 6.0)), ew_c(b, x, 0.0));
}
/* d/dx log(sigmoid(x)) = 1 - sigmoid(x), in ATen's stable form via z = exp(-|x|). */
EW_MAP_FN(map_log_sigmoid_backward) {
  (void)op;
  tpu_val_t neg = ew_cmpc(b, "LT", x, 0.0);
  tpu_val_t z = ew_un(b, "stablehlo.exponential", ew_un(b, "stablehlo.negate", ew_un(b, "stablehlo.abs", x)));
  tpu_val_t q = ew_div(b, z, ew_add(b, ew_c(b, x, 1.0), z));
  return ew_mul(b, g, ew_sel(b, neg, ew_one_minus(b, q), q));
}

/* logit(x, eps): log(x / (1 - x)), x clamped to [eps, 1 - eps] when eps is given. */
EW_MAP_FN(map_logit) {
  (void)g;
  if (tpu_op_kind(op, 1) == TPU_ARG_FLOAT) {
    double eps = tpu_op_float(op, 1, -1.0);
    if (eps >= 0) {
      tpu_val_t lo = ew_c(b, x, eps), hi = ew_c(b, x, 1.0 - eps);
      x = ew_sel(b, ew_cmp(b, "LT", x, lo), lo, ew_sel(b, ew_cmp(b, "GT", x, hi), hi, x));
    }
  }
  return ew_un(b, "stablehlo.log", ew_div(b, x, ew_one_minus(b, x)));
}
/* eps given: 0 outside [eps, 1 - eps]; none: NaN outside [0, 1]. */
EW_MAP_FN(map_logit_backward) {
  double eps = tpu_op_kind(op, 2) == TPU_ARG_FLOAT ? tpu_op_float(op, 2, -1.0) : -1.0;
  tpu_val_t d = ew_div(b, g, ew_mul(b, x, ew_one_minus(b, x)));
  double lo = eps < 0 ? 0.0 : eps, hi = eps < 0 ? 1.0 : 1.0 - eps;
  tpu_val_t out = ew_or(b, ew_cmpc(b, "LT", x, lo), ew_cmpc(b, "GT", x, hi));
  return ew_sel(b, out, ew_c(b, x, eps < 0 ? NAN : 0.0), d);
}

/* ------------------------------------------------------------- map table */

typedef struct tpu_ew_map {
  const char* name;
  const char* hlo;    /* one StableHLO/CHLO op on x, or NULL: fn computes the value */
  tpu_ew_map_fn_t fn;
  unsigned flags;     /* EW_* */
  const char* kernel; /* PyTorch's kernel name for dtype errors (or the bool message) */
  int x_arg;          /* the input tensor's argument index */
} tpu_ew_map_t;

#define TPU_EW_NEG_BOOL_MSG                                                                            \
  "Negation, the `-` operator, on a bool tensor is not supported. If you are trying to invert a mask, " \
  "use the `~` or `logical_not()` operator instead."

/* X(name, hlo, fn, flags, kernel, x_arg) */
#define TPU_EW_MAPS(X)                                                                                               \
  X("neg", "stablehlo.negate", NULL, EW_BOOL_MSG | EW_COMPLEX, TPU_EW_NEG_BOOL_MSG, 0)                               \
  X("abs", NULL, map_abs, EW_NO_BOOL | EW_COMPLEX, "abs_cpu", 0)                                                     \
  X("sign", NULL, map_sign, 0, "sign_cpu", 0)                                                                        \
  X("sgn", NULL, map_sgn, EW_COMPLEX, "sgn_cpu", 0)                                                                  \
  X("exp", "stablehlo.exponential", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                            \
  X("exp2", NULL, map_exp2, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("log", "stablehlo.log", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT, NULL, 0)                                           \
  X("log2", NULL, map_log2, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("log10", NULL, map_log10, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                        \
  X("log1p", "stablehlo.log_plus_one", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                         \
  X("expm1", "stablehlo.exponential_minus_one", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                \
  X("sqrt", "stablehlo.sqrt", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT, NULL, 0)                                         \
  X("rsqrt", "stablehlo.rsqrt", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT, NULL, 0)                                       \
  X("reciprocal", NULL, map_reciprocal, EW_FLOAT | EW_COMPLEX, NULL, 0)                                              \
  X("sin", NULL, map_sin, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                            \
  X("cos", NULL, map_cos, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                            \
  X("tan", "chlo.tan", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                         \
  X("asin", "chlo.asin", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT | EW_ODD, NULL, 0)                                     \
  X("acos", "chlo.acos", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT, NULL, 0)                                              \
  X("atan", NULL, map_atan, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("sinh", NULL, map_sinh, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("cosh", NULL, map_cosh, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("tanh", "stablehlo.tanh", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                  \
  X("asinh", "chlo.asinh", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT | EW_ODD, NULL, 0)                                   \
  X("acosh", "chlo.acosh", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT, NULL, 0)                                            \
  X("atanh", "chlo.atanh", NULL, EW_FLOAT | EW_COMPLEX | EW_CUT | EW_ODD, NULL, 0)                                   \
  X("sigmoid", "stablehlo.logistic", NULL, EW_FLOAT | EW_COMPLEX, NULL, 0)                                           \
  X("erf", "chlo.erf", NULL, EW_FLOAT, NULL, 0)                                                                      \
  X("erfc", "chlo.erfc", NULL, EW_FLOAT, NULL, 0)                                                                    \
  X("erfinv", "chlo.erf_inv", NULL, EW_FLOAT, NULL, 0)                                                               \
  X("sinc", NULL, map_sinc, EW_FLOAT | EW_COMPLEX, NULL, 0)                                                          \
  X("deg2rad", NULL, map_deg2rad, EW_FLOAT, NULL, 0)                                                                 \
  X("rad2deg", NULL, map_rad2deg, EW_FLOAT, NULL, 0)                                                                 \
  X("floor", "stablehlo.floor", NULL, EW_INT_SAME | EW_NO_BOOL, "floor_vml_cpu", 0)                                  \
  X("ceil", "stablehlo.ceil", NULL, EW_INT_SAME | EW_NO_BOOL, "ceil_vml_cpu", 0)                                     \
  X("trunc", NULL, map_trunc, EW_INT_SAME | EW_NO_BOOL, "trunc_vml_cpu", 0)                                          \
  X("frac", NULL, map_frac, EW_FLOAT_ONLY, "frac_cpu", 0)                                                            \
  X("bitwise_not", "stablehlo.not", NULL, EW_NO_FLOAT, "bitwise_not_cpu", 0)                                         \
  X("logical_not", NULL, map_logical_not, EW_PRED | EW_COMPLEX, NULL, 0)                                             \
  X("isnan", NULL, map_isnan, EW_PRED | EW_COMPLEX, NULL, 0)                                                         \
  X("isinf", NULL, map_isinf, EW_PRED, NULL, 0)                                                                      \
  X("isposinf", NULL, map_isposinf, EW_PRED, NULL, 0)                                                                \
  X("isneginf", NULL, map_isneginf, EW_PRED, NULL, 0)                                                                \
  X("isfinite", NULL, map_isfinite, EW_PRED, NULL, 0)                                                                \
  X("signbit", NULL, map_signbit, EW_PRED, NULL, 0)                                                                  \
  X("relu", NULL, map_relu, EW_BOOL_MSG, "Boolean inputs not supported for relu", 0)                                 \
  X("gelu", NULL, map_gelu, EW_FLOAT_ONLY, "GeluKernelImpl", 0)                                                      \
  X("silu", NULL, map_silu, EW_FLOAT_ONLY | EW_COMPLEX, "silu_cpu", 0)                                               \
  X("mish", NULL, map_mish, EW_FLOAT_ONLY, "mish_cpu", 0)                                                            \
  X("hardswish", NULL, map_hardswish, EW_FLOAT_ONLY, "hardswish_cpu", 0)                                             \
  X("hardsigmoid", NULL, map_hardsigmoid, EW_FLOAT_ONLY, "hardsigmoid_cpu", 0)                                       \
  X("softplus", NULL, map_softplus, EW_FLOAT_ONLY, "softplus_cpu", 0)                                                \
  X("elu", NULL, map_elu, EW_FLOAT_ONLY, "elu_cpu", 0)                                                               \
  X("celu", NULL, map_celu, EW_FLOAT_ONLY, "elu_cpu", 0)                                                             \
  X("leaky_relu", NULL, map_leaky_relu, EW_FLOAT_ONLY, "leaky_relu_cpu", 0)                                          \
  X("hardtanh", NULL, map_hardtanh, EW_BOOL_MSG, "Bool inputs not supported for hardtanh", 0)                        \
  X("threshold", NULL, map_threshold, EW_NO_BOOL, "threshold_cpu", 0)                                                \
  X("logit", NULL, map_logit, EW_FLOAT, "logit_cpu", 0)                                                              \
  X("sigmoid_backward", NULL, map_sigmoid_backward, EW_GRAD | EW_FLOAT_ONLY | EW_COMPLEX, "sigmoid_backward_cpu", 1) \
  X("tanh_backward", NULL, map_tanh_backward, EW_GRAD | EW_FLOAT_ONLY | EW_COMPLEX, "tanh_backward_cpu", 1)          \
  X("gelu_backward", NULL, map_gelu_backward, EW_GRAD | EW_FLOAT_ONLY, "GeluBackwardCPUKernelImpl", 1)               \
  X("silu_backward", NULL, map_silu_backward, EW_GRAD | EW_FLOAT_ONLY, "silu_backward_cpu", 1)                       \
  X("mish_backward", NULL, map_mish_backward, EW_GRAD | EW_FLOAT_ONLY, "mish_backward_cpu", 1)                       \
  X("hardswish_backward", NULL, map_hardswish_backward, EW_GRAD | EW_FLOAT_ONLY, "hardswish_backward_cpu", 1)        \
  X("hardsigmoid_backward", NULL, map_hardsigmoid_backward, EW_GRAD | EW_FLOAT_ONLY, "hardsigmoid_backward", 1)      \
  X("softplus_backward", NULL, map_softplus_backward, EW_GRAD | EW_FLOAT_ONLY, "softplus_backward_cpu", 1)           \
  X("elu_backward", NULL, map_elu_backward, EW_GRAD | EW_FLOAT_ONLY, "elu_backward_cpu", 5)                          \
  X("leaky_relu_backward", NULL, map_leaky_relu_backward, EW_GRAD | EW_FLOAT_ONLY, "leaky_relu_backward_cpu", 1)     \
  X("hardtanh_backward", NULL, map_hardtanh_backward, EW_GRAD | EW_FLOAT_ONLY, "hardtanh_backward_cpu", 1)           \
  X("threshold_backward", NULL, map_threshold_backward, EW_GRAD | EW_NO_BOOL, "threshold_cpu", 1)                    \
  X("logit_backward", NULL, map_logit_backward, EW_GRAD | EW_FLOAT_ONLY, "logit_backward_cpu", 1)                    \
  X("log_sigmoid_backward", NULL, map_log_sigmoid_backward, EW_GRAD | EW_FLOAT_ONLY, "log_sigmoid_backward_cpu", 1)

#define TPU_EW_MAP_ROW(name, hlo, fn, flags, kernel, x_arg) {name, hlo, fn, flags, kernel, x_arg},
static const tpu_ew_map_t tpu_ew_maps[] = {TPU_EW_MAPS(TPU_EW_MAP_ROW)};

static const tpu_ew_map_t* tpu_ew_find_map(const char* name) {
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_ew_maps); ++i)
    if (strcmp(tpu_ew_maps[i].name, name) == 0) return &tpu_ew_maps[i];
  return NULL;
}

static tpu_status_t* tpu_ew_run_map(tpu_builder_t* b, tpu_op_t* op, const tpu_ew_map_t* d, tpu_val_t* outs,
                                    int* nouts) {
  int xi = d->x_arg;
  if (tpu_op_kind(op, xi) != TPU_ARG_TENSOR || ((d->flags & EW_GRAD) && tpu_op_kind(op, 0) != TPU_ARG_TENSOR)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a tensor argument", d->name);
    return NULL;
  }
  int args[2] = {0, xi};
  int nargs = (d->flags & EW_GRAD) ? 2 : 1;
  tpu_dtype_t in = nargs == 2 ? tpu_ops_result_type(op, 2, args) : tpu_op_aval(op, xi).dtype;
  if (!tpu_ew_check_dtype(b, d->name, d->flags, d->kernel, in)) return NULL;
  if (d->flags & EW_PRED) return tpu_ops_result1(d->fn(b, op, tpu_op_tensor(b, op, xi), TPU_NOVAL), outs, nouts);
  if ((d->flags & EW_INT_SAME) && !tpu_dtype_is_float(in))
    return tpu_ops_result1(tpu_op_tensor(b, op, xi), outs, nouts);
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, nargs, nargs == 2 ? args : &args[1], &shape)) return NULL;
  tpu_dtype_t rt = (d->flags & EW_FLOAT) ? tpu_dtype_to_float(in) : in;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ew_operand(b, op, xi, rt, ct, &shape);
  tpu_val_t g = nargs == 2 ? tpu_ew_operand(b, op, 0, rt, ct, &shape) : TPU_NOVAL;
  tpu_val_t y = d->hlo ? ew_map_hlo(b, d->hlo, d->flags, x) : d->fn(b, op, x, g);
  /* A real result of a complex input (abs) keeps its real dtype. */
  if (tpu_dtype_is_complex(rt) && !tpu_dtype_is_complex(tpu_b_dtype(b, y))) return tpu_ops_result1(y, outs, nouts);
  return tpu_ops_result1(tpu_b_convert(b, y, rt), outs, nouts);
}

static tpu_status_t* tpu_lower_map(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const tpu_ew_map_t* d = tpu_ew_find_map(tpu_op_name(op));
  if (!d) return TPU_STATUS(TPU_INTERNAL, "elementwise: no map row for %s", tpu_op_name(op));
  return tpu_ew_run_map(b, op, d, outs, nouts);
}

/* ---------------------------------------------------------- binary formulas */

typedef tpu_val_t (*tpu_ew_bin_fn_t)(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);

static bool ew_is_signed_int(tpu_builder_t* b, tpu_val_t x) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  return tpu_dtype_is_int(t) && tpu_dtype_is_signed(t);
}

static tpu_val_t bin_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_dtype(b, x) == TPU_BOOL ? ew_and(b, x, y) : ew_mul(b, x, y);
}
static tpu_val_t bin_max(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_max(b, x, y); }
static tpu_val_t bin_min(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_min(b, x, y); }

/* fmax/fmin ignore a NaN operand (NaN only when both are). */
static tpu_val_t ew_fmaxmin(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, bool is_max) {
  tpu_val_t m = is_max ? ew_max(b, x, y) : ew_min(b, x, y);
  if (!tpu_dtype_is_float(tpu_b_dtype(b, x))) return m;
  return ew_sel(b, ew_isnan(b, x), y, ew_sel(b, ew_isnan(b, y), x, m));
}
static tpu_val_t bin_fmax(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_fmaxmin(b, x, y, true); }
static tpu_val_t bin_fmin(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_fmaxmin(b, x, y, false); }

/* Truncating division: integer divide, or trunc(x / y) for floats. */
static tpu_val_t bin_div_trunc(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t q = ew_div(b, x, y);
  return tpu_dtype_is_float(tpu_b_dtype(b, x)) ? ew_trunc(b, q) : q;
}

/* Python's floor division, as ATen's div_floor_integer / div_floor_floating. */
static tpu_val_t bin_div_floor(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t mod = tpu_b_binary(b, "stablehlo.remainder", x, y);
  tpu_val_t zero = ew_c(b, x, 0.0), one = ew_c(b, x, 1.0);
  tpu_val_t signs_differ = ew_cmp(b, "NE", ew_cmp(b, "LT", y, zero), ew_cmp(b, "LT", mod, zero));
  tpu_val_t adjust = ew_and(b, ew_cmp(b, "NE", mod, zero), signs_differ);
  if (!tpu_dtype_is_float(t)) {
    tpu_val_t q = ew_div(b, x, y);
    return tpu_dtype_is_signed(t) ? ew_sel(b, adjust, ew_sub(b, q, one), q) : q;
  }
  tpu_val_t div = ew_div(b, ew_sub(b, x, mod), y);
  div = ew_sel(b, adjust, ew_sub(b, div, one), div);
  tpu_val_t fl = ew_un(b, "stablehlo.floor", div);
  fl = ew_sel(b, ew_cmp(b, "GT", ew_sub(b, div, fl), ew_c(b, x, 0.5)), ew_add(b, fl, one), fl);
  tpu_val_t q = ew_div(b, x, y);
  /* a zero quotient keeps the sign of x / y; y == 0 gives the IEEE quotient */
  tpu_val_t signed_zero = ew_sel(b, ew_signbit_float(b, q), ew_c(b, x, -0.0), zero);
  tpu_val_t r = ew_sel(b, ew_cmp(b, "NE", div, zero), fl, signed_zero);
  return ew_sel(b, ew_cmp(b, "EQ", y, zero), q, r);
}

/* Python's remainder: the result takes the divisor's sign. */
static tpu_val_t bin_remainder(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t mod = tpu_b_binary(b, "stablehlo.remainder", x, y);
  if (!tpu_dtype_is_signed(t)) return mod;
  tpu_val_t zero = ew_c(b, x, 0.0);
  tpu_val_t adjust = ew_and(b, ew_cmp(b, "NE", mod, zero),
                            ew_cmp(b, "NE", ew_cmp(b, "LT", y, zero), ew_cmp(b, "LT", mod, zero)));
  return ew_sel(b, adjust, ew_add(b, mod, y), mod);
}

/* Complex pow as ATen's kernel: exponents 2, 3 and -2 as products, 0.5, -0.5
 * and -1 as sqrt, rsqrt and reciprocal (their branch cuts as C99's), others
 * exp(y log x). The exponent is a runtime value, so every form is computed and
 * selected. */
static tpu_val_t ew_pow_complex(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t sq = ew_mul(b, x, x), one = ew_c(b, x, 1.0);
  static const double special[6] = {2.0, 3.0, -2.0, 0.5, -0.5, -1.0};
  const tpu_val_t forms[6] = {sq, ew_mul(b, sq, x), ew_div(b, one, sq), ew_complex_cut(b, "stablehlo.sqrt", x, false),
                              ew_complex_cut(b, "stablehlo.rsqrt", x, false), ew_div(b, one, x)};
  tpu_val_t v = tpu_b_binary(b, "stablehlo.power", x, y);
  for (int i = 0; i < 6; ++i) v = ew_sel(b, ew_cmp(b, "EQ", y, ew_c(b, y, special[i])), forms[i], v);
  return v;
}

/* Signed integer pow with a negative exponent follows ATen's powi: 1 for base 1,
 * ±1 for base -1, otherwise 0. Other lanes use stablehlo.power. */
static tpu_val_t bin_pow(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  if (tpu_dtype_is_complex(tpu_b_dtype(b, x))) return ew_pow_complex(b, x, y);
  if (!ew_is_signed_int(b, x)) return tpu_b_binary(b, "stablehlo.power", x, y);
  tpu_val_t zero = ew_c(b, y, 0.0), one = ew_c(b, x, 1.0), mone = ew_c(b, x, -1.0);
  tpu_val_t neg = ew_cmp(b, "LT", y, zero);
  tpu_val_t p = tpu_b_binary(b, "stablehlo.power", x, ew_sel(b, neg, zero, y));
  tpu_val_t odd = ew_cmp(b, "NE", ew_and(b, y, ew_c(b, y, 1.0)), zero);
  tpu_val_t special = ew_sel(b, ew_cmp(b, "EQ", x, one), one,
                             ew_sel(b, ew_cmp(b, "EQ", x, mone), ew_sel(b, odd, mone, one), ew_c(b, x, 0.0)));
  return ew_sel(b, neg, special, p);
}

/* hypot without overflow: m sqrt(1 + (n/m)^2) with m = max(|x|,|y|); inf wins over NaN. */
static tpu_val_t bin_hypot(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t ax = ew_un(b, "stablehlo.abs", x), ay = ew_un(b, "stablehlo.abs", y);
  tpu_val_t m = ew_max(b, ax, ay), n = ew_min(b, ax, ay);
  tpu_val_t r = ew_div(b, n, m);
  tpu_val_t h = ew_mul(b, m, ew_un(b, "stablehlo.sqrt", ew_add(b, ew_c(b, x, 1.0), ew_mul(b, r, r))));
  h = ew_sel(b, ew_cmpc(b, "EQ", m, 0.0), ew_c(b, x, 0.0), h);
  tpu_val_t inf = ew_or(b, ew_cmpc(b, "EQ", ax, INFINITY), ew_cmpc(b, "EQ", ay, INFINITY));
  return ew_sel(b, inf, ew_c(b, x, INFINITY), h);
}

/* Shifts as ATen: a left shift by < 0 or >= bits gives 0; a right shift by an
 * out-of-range amount shifts by the maximum (sign fill for signed types). */
static tpu_val_t ew_shift(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, bool left) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  bool sgn = tpu_dtype_is_signed(t);
  double max_shift = 8.0 * (double)tpu_dtype_size(t) - (left ? 0 : sgn);
  tpu_val_t bad = ew_cmpc(b, "GE", y, max_shift);
  if (sgn) bad = ew_or(b, bad, ew_cmpc(b, "LT", y, 0.0));
  if (left) return ew_sel(b, bad, ew_c(b, x, 0.0), tpu_b_binary(b, "stablehlo.shift_left", x, y));
  tpu_val_t amount = ew_sel(b, bad, ew_c(b, y, max_shift), y);
  if (!sgn) return ew_sel(b, bad, ew_c(b, x, 0.0), tpu_b_binary(b, "stablehlo.shift_right_logical", x, amount));
  return tpu_b_binary(b, "stablehlo.shift_right_arithmetic", x, amount);
}
static tpu_val_t bin_lshift(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_shift(b, x, y, true); }
static tpu_val_t bin_rshift(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return ew_shift(b, x, y, false); }

/* x * log(y), 0 where x == 0, NaN where y is NaN. */
static tpu_val_t bin_xlogy(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t v = ew_mul(b, x, ew_un(b, "stablehlo.log", y));
  v = ew_sel(b, ew_cmpc(b, "EQ", x, 0.0), ew_c(b, x, 0.0), v);
  return ew_sel(b, ew_isnan(b, y), ew_c(b, x, NAN), v);
}

/* heaviside(x, values): values where x == 0, else x > 0. */
static tpu_val_t bin_heaviside(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t pos = tpu_b_convert(b, ew_cmpc(b, "GT", x, 0.0), tpu_b_dtype(b, x));
  return ew_sel(b, ew_cmpc(b, "EQ", x, 0.0), y, pos);
}

static tpu_val_t bin_copysign(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t ax = ew_un(b, "stablehlo.abs", x);
  return ew_sel(b, ew_signbit_float(b, y), ew_un(b, "stablehlo.negate", ax), ax);
}

/* _prelu_kernel(x, weight): x > 0 ? x : weight * x */
static tpu_val_t bin_prelu(tpu_builder_t* b, tpu_val_t x, tpu_val_t w) {
  return ew_sel(b, ew_cmpc(b, "GT", x, 0.0), x, ew_mul(b, w, x));
}

/* ATen's calc_gcd: Euclid on |x|, |y| (abs wraps at the minimum, so gcd can be
 * negative only there, as on the CPU). A device loop while any element has a
 * nonzero divisor; Euclid takes fewer steps than the Fibonacci index of the
 * largest operand, under 100 for 64 bits. Carry: the divisor u and dividend v. */
#define EW_GCD_MAX_STEPS 100

static tpu_val_t ew_gcd_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx, (void)k;
  return tpu_mx_any(b, ew_cmpc(b, "NE", in[0], 0.0));
}

static void ew_gcd_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx, (void)k;
  tpu_val_t u = in[0], v = in[1], live = ew_cmpc(b, "NE", u, 0.0);
  out[0] = ew_sel(b, live, tpu_b_binary(b, "stablehlo.remainder", v, u), u);
  out[1] = ew_sel(b, live, u, v);
}

static tpu_val_t bin_gcd(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t init[2] = {ew_abs(b, x), ew_abs(b, y)}, res[2];
  tpu_mx_while(b, EW_GCD_MAX_STEPS, 2, init, ew_gcd_cond, ew_gcd_body, NULL, res, NULL);
  return res[1];
}

/* ATen's calc_lcm: g == 0 ? 0 : |x / g * y|. C computes that in int for the
 * narrower types (abs before the truncation: int8 lcm(-30, 7) = (int8)210 =
 * -46), in the dtype (wrapping) for int32/int64. */
static tpu_val_t bin_lcm(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_dtype_t t = tpu_b_dtype(b, x), wt = tpu_dtype_size(t) < 4 ? TPU_I32 : t;
  tpu_val_t g = tpu_b_convert(b, bin_gcd(b, x, y), wt);
  x = tpu_b_convert(b, x, wt);
  y = tpu_b_convert(b, y, wt);
  tpu_val_t zero = ew_c(b, x, 0.0), is0 = ew_cmp(b, "EQ", g, zero);
  tpu_val_t l = ew_abs(b, ew_mul(b, ew_div(b, x, ew_sel(b, is0, ew_c(b, x, 1.0), g)), y));
  return tpu_b_convert(b, ew_sel(b, is0, zero, l), t);
}

/* ----------------------------------------------------------- binary table */

typedef struct tpu_ew_binary {
  const char* name;
  const char* hlo;    /* StableHLO op, or the comparison direction for EW_CMP; NULL: fn */
  tpu_ew_bin_fn_t fn;
  unsigned flags;     /* EW_* */
  const char* kernel; /* PyTorch's kernel name for dtype errors */
} tpu_ew_binary_t;

/* X(name, hlo, fn, flags, kernel) */
#define TPU_EW_BINARIES(X)                                                           \
  X("mul", NULL, bin_mul, EW_COMPLEX, "mul_cpu")                                     \
  X("floor_divide", NULL, bin_div_floor, EW_NO_BOOL, "div_floor_cpu")                \
  X("remainder", NULL, bin_remainder, EW_NO_BOOL, "remainder_cpu")                   \
  X("fmod", "stablehlo.remainder", NULL, EW_NO_BOOL, "fmod_cpu")                     \
  X("pow", NULL, bin_pow, EW_NO_BOOL | EW_COMPLEX, "pow")                            \
  X("atan2", "stablehlo.atan2", NULL, EW_FLOAT, "atan2_cpu")                         \
  X("hypot", NULL, bin_hypot, EW_FLOAT_ONLY, "hypot_cpu")                            \
  X("maximum", NULL, bin_max, 0, "maximum_cpu")                                      \
  X("minimum", NULL, bin_min, 0, "minimum_cpu")                                      \
  X("fmax", NULL, bin_fmax, 0, "fmax_cpu")                                           \
  X("fmin", NULL, bin_fmin, 0, "fmin_cpu")                                           \
  X("eq", "EQ", NULL, EW_CMP | EW_COMPLEX, NULL)                                     \
  X("ne", "NE", NULL, EW_CMP | EW_COMPLEX, NULL)                                     \
  X("lt", "LT", NULL, EW_CMP, NULL)                                                  \
  X("le", "LE", NULL, EW_CMP, NULL)                                                  \
  X("gt", "GT", NULL, EW_CMP, NULL)                                                  \
  X("ge", "GE", NULL, EW_CMP, NULL)                                                  \
  X("logical_and", "stablehlo.and", NULL, EW_LOGICAL | EW_COMPLEX, NULL)             \
  X("logical_or", "stablehlo.or", NULL, EW_LOGICAL | EW_COMPLEX, NULL)               \
  X("logical_xor", "stablehlo.xor", NULL, EW_LOGICAL | EW_COMPLEX, NULL)             \
  X("bitwise_and", "stablehlo.and", NULL, EW_NO_FLOAT, "bitwise_and_cpu")            \
  X("bitwise_or", "stablehlo.or", NULL, EW_NO_FLOAT, "bitwise_or_cpu")               \
  X("bitwise_xor", "stablehlo.xor", NULL, EW_NO_FLOAT, "bitwise_xor_cpu")            \
  X("bitwise_left_shift", NULL, bin_lshift, EW_NO_FLOAT | EW_NO_BOOL, "lshift_cpu")  \
  X("__lshift__", NULL, bin_lshift, EW_NO_FLOAT | EW_NO_BOOL, "lshift_cpu")          \
  X("__ilshift__", NULL, bin_lshift, EW_NO_FLOAT | EW_NO_BOOL, "lshift_cpu")         \
  X("bitwise_right_shift", NULL, bin_rshift, EW_NO_FLOAT | EW_NO_BOOL, "rshift_cpu") \
  X("__rshift__", NULL, bin_rshift, EW_NO_FLOAT | EW_NO_BOOL, "rshift_cpu")          \
  X("__irshift__", NULL, bin_rshift, EW_NO_FLOAT | EW_NO_BOOL, "rshift_cpu")         \
  X("xlogy", NULL, bin_xlogy, EW_FLOAT, "xlogy_cpu")                                 \
  X("heaviside", NULL, bin_heaviside, EW_SAME_DTYPE, "heaviside_cpu")                \
  X("copysign", NULL, bin_copysign, EW_FLOAT, "copysign_cpu")                        \
  X("_prelu_kernel", NULL, bin_prelu, EW_FLOAT_ONLY, "prelu_cpu")                    \
  X("gcd", NULL, bin_gcd, EW_NO_FLOAT | EW_NO_BOOL, "gcd_cpu")                       \
  X("lcm", NULL, bin_lcm, EW_NO_FLOAT | EW_NO_BOOL, "lcm_cpu")

#define TPU_EW_BINARY_ROW(name, hlo, fn, flags, kernel) {name, hlo, fn, flags, kernel},
static const tpu_ew_binary_t tpu_ew_binaries[] = {TPU_EW_BINARIES(TPU_EW_BINARY_ROW)};

static const tpu_ew_binary_t* tpu_ew_find_binary(const char* name) {
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_ew_binaries); ++i)
    if (strcmp(tpu_ew_binaries[i].name, name) == 0) return &tpu_ew_binaries[i];
  return NULL;
}

/* Args 0 and 1 (tensors or Scalars) promoted, broadcast and combined by d. */
static tpu_status_t* tpu_ew_run_binary(tpu_builder_t* b, tpu_op_t* op, const tpu_ew_binary_t* d, tpu_val_t* outs,
                                       int* nouts) {
  int args[2] = {0, 1};
  tpu_dtype_t common = tpu_ops_result_type(op, 2, args);
  if (!tpu_ew_check_dtype(b, d->name, d->flags, d->kernel, common)) return NULL;
  if ((d->flags & EW_SAME_DTYPE) && tpu_ew_arg_dtype(op, 0) != tpu_ew_arg_dtype(op, 1)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s is not yet implemented for tensors with different dtypes.", d->name);
    return NULL;
  }
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t rt, ct;
  if (d->flags & EW_LOGICAL) {
    common = ct = rt = TPU_BOOL;
  } else if (d->flags & EW_CMP) {
    ct = common;
    rt = TPU_BOOL;
  } else {
    rt = (d->flags & EW_FLOAT) ? tpu_dtype_to_float(common) : common;
    ct = tpu_dtype_opmath(rt);
  }
  tpu_val_t x = tpu_ew_operand(b, op, 0, common, ct, &shape);
  tpu_val_t y = tpu_ew_operand(b, op, 1, common, ct, &shape);
  tpu_val_t v = (d->flags & EW_CMP) ? ew_cmp(b, d->hlo, x, y) : d->hlo ? tpu_b_binary(b, d->hlo, x, y) : d->fn(b, x, y);
  return tpu_ops_result1(tpu_b_convert(b, v, rt), outs, nouts);
}

static tpu_status_t* tpu_lower_binary(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const tpu_ew_binary_t* d = tpu_ew_find_binary(tpu_op_name(op));
  if (!d) return TPU_STATUS(TPU_INTERNAL, "elementwise: no binary row for %s", tpu_op_name(op));
  return tpu_ew_run_binary(b, op, d, outs, nouts);
}

/* ---------------------------------------------------------- add, sub, rsub */

/* ATen's alpha_check for result dtype rt. */
static bool tpu_ew_alpha_check(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_dtype_t rt) {
  if (!tpu_ops_has_value(op, i)) return true;
  tpu_dtype_t a = tpu_ew_arg_dtype(op, i);
  if (a == TPU_BOOL && rt != TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Boolean alpha only supported for Boolean results.");
    return false;
  }
  if ((tpu_dtype_is_float(a) || tpu_dtype_is_complex(a)) && !tpu_dtype_is_float(rt) && !tpu_dtype_is_complex(rt)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "For integral input tensors, argument alpha must not be a floating point number.");
    return false;
  }
  return true;
}

/* ATen's sub_check: no bool operands. */
static bool tpu_ew_sub_check(tpu_builder_t* b, const tpu_op_t* op) {
  bool b0 = tpu_ew_arg_dtype(op, 0) == TPU_BOOL, b1 = tpu_ew_arg_dtype(op, 1) == TPU_BOOL;
  if (b0 && b1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Subtraction, the `-` operator, with two bool tensors is not supported. "
               "Use the `^` or `logical_xor()` operator instead.");
    return false;
  }
  if (b0 || b1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Subtraction, the `-` operator, with a bool tensor is not supported. "
               "If you are trying to invert a mask, use the `~` or `logical_not()` operator instead.");
    return false;
  }
  return true;
}

/* result = arg[xi] ± alpha * arg[yi] (alpha is arg 2), in opmath of the result type. */
static tpu_status_t* tpu_ew_add_sub(tpu_builder_t* b, tpu_op_t* op, int xi, int yi, bool subtract, tpu_val_t* outs,
                                    int* nouts) {
  int args[2] = {0, 1};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  if (!tpu_ew_check_dtype(b, tpu_op_name(op), EW_COMPLEX, NULL, rt)) return NULL;
  if (subtract && !tpu_ew_sub_check(b, op)) return NULL;
  if (!tpu_ew_alpha_check(b, op, 2, rt)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ew_operand(b, op, xi, rt, ct, &shape);
  tpu_val_t y = tpu_ew_operand(b, op, yi, rt, ct, &shape);
  if (tpu_ops_has_value(op, 2)) y = bin_mul(b, y, tpu_ew_param(b, op, 2, y, 1.0));
  tpu_val_t v = rt == TPU_BOOL ? ew_or(b, x, y) : subtract ? ew_sub(b, x, y) : ew_add(b, x, y);
  return tpu_ops_result1(tpu_b_convert(b, v, rt), outs, nouts);
}

static tpu_status_t* tpu_lower_add(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_add_sub(b, op, 0, 1, false, outs, nouts);
}

static tpu_status_t* tpu_lower_sub(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_add_sub(b, op, 0, 1, true, outs, nouts);
}

/* rsub(self, other, alpha) = other - alpha * self */
static tpu_status_t* tpu_lower_rsub(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_add_sub(b, op, 1, 0, true, outs, nouts);
}

/* _add_relu(self, other, alpha) = relu(self + alpha * other). ATen's add_relu
 * takes self of int8..int64, float32 or float64 only (an internal assert on the
 * CPU for the rest: RuntimeError). */
static tpu_status_t* tpu_lower_add_relu(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  if (!((tpu_dtype_is_int(t) && tpu_dtype_is_signed(t)) || t == TPU_F32 || t == TPU_F64)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Unsupported datatype for add_relu:%s", tpu_mm_cpp_name(t));
    return NULL;
  }
  tpu_status_t* st = tpu_ew_add_sub(b, op, 0, 1, false, outs, nouts);
  if (st || !tpu_b_ok(b)) return st;
  outs[0] = tpu_ew_relu(b, outs[0]);
  return NULL;
}

/* div(self, other, rounding_mode=None|"trunc"|"floor") */
static tpu_status_t* tpu_lower_div(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  static const tpu_ew_binary_t true_div = {"div", "stablehlo.divide", NULL, EW_FLOAT | EW_COMPLEX, "div_true_cpu"};
  static const tpu_ew_binary_t trunc_div = {"div", NULL, bin_div_trunc, EW_NO_BOOL, "div_trunc_cpu"};
  static const tpu_ew_binary_t floor_div = {"div", NULL, bin_div_floor, EW_NO_BOOL, "div_floor_cpu"};
  const char* mode = tpu_ew_str(op, 2, NULL);
  if (!mode) return tpu_ew_run_binary(b, op, &true_div, outs, nouts);
  if (strcmp(mode, "trunc") == 0) return tpu_ew_run_binary(b, op, &trunc_div, outs, nouts);
  if (strcmp(mode, "floor") == 0) return tpu_ew_run_binary(b, op, &floor_div, outs, nouts);
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
             "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '%s'", mode);
  return NULL;
}

/* ------------------------------------------------------ selection, clamping */

/* where(condition, self, other): condition bool (or deprecated uint8). */
static tpu_status_t* tpu_lower_where(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  if (tpu_op_kind(op, 0) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "where: expected a condition tensor");
    return NULL;
  }
  tpu_dtype_t cd = tpu_op_aval(op, 0).dtype;
  if (cd != TPU_BOOL && cd != TPU_U8) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "where expected condition to be a boolean tensor, but got a tensor with dtype %s",
               tpu_dtype_scalar_type_name(cd));
    return NULL;
  }
  int vals[2] = {1, 2}, all[3] = {0, 1, 2};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, vals);
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 3, all, &shape)) return NULL;
  tpu_val_t cond = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_BOOL), &shape);
  tpu_val_t x = tpu_ew_operand(b, op, 1, rt, rt, &shape), y = tpu_ew_operand(b, op, 2, rt, rt, &shape);
  return tpu_ops_result1(ew_sel(b, cond, x, y), outs, nouts);
}

/* min(max(self, lo), hi) over the present bounds (args lo_i / hi_i, -1 for none),
 * promoted together like ATen's clamp; NaN in any operand propagates. */
static tpu_status_t* tpu_ew_clamp(tpu_builder_t* b, tpu_op_t* op, int lo_i, int hi_i, tpu_val_t* outs, int* nouts) {
  bool has_lo = lo_i >= 0 && tpu_ops_has_value(op, lo_i), has_hi = hi_i >= 0 && tpu_ops_has_value(op, hi_i);
  if (!has_lo && !has_hi) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.clamp: At least one of 'min' or 'max' must not be None");
    return NULL;
  }
  int args[3] = {0, has_lo ? lo_i : hi_i, has_hi ? hi_i : lo_i};
  tpu_dtype_t rt = tpu_ops_result_type(op, 3, args);
  /* ATen's Scalar-bound kernels have no bool version (the Tensor-bound ones do). */
  bool scalar_bounds = tpu_op_kind(op, args[1]) != TPU_ARG_TENSOR && tpu_op_kind(op, args[2]) != TPU_ARG_TENSOR;
  const char* kernel = has_lo && has_hi ? "clamp_scalar_cpu" : has_lo ? "clamp_min_scalar_cpu" : "clamp_max_scalar_cpu";
  if (!tpu_ew_check_dtype(b, "clamp", scalar_bounds ? EW_NO_BOOL : 0, kernel, rt)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 3, args, &shape)) return NULL;
  tpu_val_t v = tpu_ew_operand(b, op, 0, rt, rt, &shape);
  if (has_lo) v = ew_max(b, v, tpu_ew_operand(b, op, lo_i, rt, rt, &shape));
  if (has_hi) v = ew_min(b, v, tpu_ew_operand(b, op, hi_i, rt, rt, &shape));
  return tpu_ops_result1(v, outs, nouts);
}

static tpu_status_t* tpu_lower_clamp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_clamp(b, op, 1, 2, outs, nouts);
}
static tpu_status_t* tpu_lower_clamp_min(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_clamp(b, op, 1, -1, outs, nouts);
}
static tpu_status_t* tpu_lower_clamp_max(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_clamp(b, op, -1, 1, outs, nouts);
}

/* --------------------------------------------------------- ternary formulas */

/* lerp(self, end, weight): ATen's two-sided formula, exact at both ends. */
static tpu_status_t* tpu_lower_lerp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  static const char* const names[3] = {"self", "end", "weight"};
  for (int i = 1; i < 3; ++i) {
    if (tpu_op_kind(op, i) == TPU_ARG_TENSOR && tpu_op_aval(op, i).dtype != t) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected dtype %s for `%s` but got dtype %s", tpu_dtype_name(t), names[i],
                 tpu_dtype_name(tpu_op_aval(op, i).dtype));
      return NULL;
    }
  }
  bool tensor_w = tpu_op_kind(op, 2) == TPU_ARG_TENSOR;
  if (!tpu_ew_check_dtype(b, "lerp", EW_FLOAT_ONLY | EW_COMPLEX, tensor_w ? "lerp_kernel_tensor" : "lerp_kernel_scalar", t))
    return NULL;
  int all[3] = {0, 1, 2};
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 3, all, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(t);
  tpu_val_t x = tpu_ew_operand(b, op, 0, t, ct, &shape), e = tpu_ew_operand(b, op, 1, t, ct, &shape);
  tpu_val_t w = tpu_ew_operand(b, op, 2, t, ct, &shape);
  tpu_val_t diff = ew_sub(b, e, x);
  tpu_val_t small = ew_cmpc(b, "LT", ew_un(b, "stablehlo.abs", w), 0.5);
  tpu_val_t v = ew_sel(b, small, ew_add(b, x, ew_mul(b, w, diff)), ew_sub(b, e, ew_mul(b, diff, ew_one_minus(b, w))));
  return tpu_ops_result1(tpu_b_convert(b, v, t), outs, nouts);
}

/* addcmul / addcdiv(self, tensor1, tensor2, value): self + value * (t1 op t2) */
static tpu_status_t* tpu_ew_addc(tpu_builder_t* b, tpu_op_t* op, bool divide, tpu_val_t* outs, int* nouts) {
  if (divide && !tpu_dtype_is_float(tpu_ew_arg_dtype(op, 1)) && !tpu_dtype_is_float(tpu_ew_arg_dtype(op, 2)) &&
      !tpu_dtype_is_complex(tpu_ew_arg_dtype(op, 1)) && !tpu_dtype_is_complex(tpu_ew_arg_dtype(op, 2))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform "
               "a true division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + "
               "value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * "
               "tensor1 / tensor2) for float inputs. The future addcdiv behavior is just the latter implementation: "
               "(input + value * tensor1 / tensor2), for all dtypes.");
    return NULL;
  }
  int all[3] = {0, 1, 2};
  tpu_dtype_t rt = tpu_ops_result_type(op, 3, all);
  if (!tpu_ew_check_dtype(b, tpu_op_name(op), EW_NO_BOOL | EW_COMPLEX, divide ? "addcdiv_cpu_out" : "addcmul_cpu_out", rt))
    return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 3, all, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ew_operand(b, op, 0, rt, ct, &shape);
  tpu_val_t t1 = tpu_ew_operand(b, op, 1, rt, ct, &shape), t2 = tpu_ew_operand(b, op, 2, rt, ct, &shape);
  tpu_val_t value = tpu_ew_param(b, op, 3, x, 1.0);
  tpu_val_t v = divide ? ew_div(b, ew_mul(b, value, t1), t2) : ew_mul(b, ew_mul(b, value, t1), t2);
  return tpu_ops_result1(tpu_b_convert(b, ew_add(b, x, v), rt), outs, nouts);
}

static tpu_status_t* tpu_lower_addcmul(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_addc(b, op, false, outs, nouts);
}
static tpu_status_t* tpu_lower_addcdiv(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_ew_addc(b, op, true, outs, nouts);
}

/* ------------------------------------------------------ rounding, cleanup */

/* round(self) and round.decimals(self, *, decimals): half to even like nearbyint. */
static tpu_status_t* tpu_lower_round(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  static const tpu_ew_map_t plain = {"round", "stablehlo.round_nearest_even", NULL, EW_INT_SAME | EW_NO_BOOL,
                                     "round_vml_cpu", 0};
  if (tpu_op_kind(op, 1) != TPU_ARG_INT) return tpu_ew_run_map(b, op, &plain, outs, nouts);
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  if (!tpu_ew_check_dtype(b, "round", EW_FLOAT_ONLY, "round_cpu", t)) return NULL;
  int64_t decimals = tpu_op_int(op, 1, 0);
  double ten_pow = pow(10.0, (double)(decimals < 0 ? -decimals : decimals));
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(t));
  tpu_val_t p = ew_c(b, x, ten_pow);
  tpu_val_t v = decimals < 0 ? ew_mul(b, ew_un(b, "stablehlo.round_nearest_even", ew_div(b, x, p)), p)
                             : ew_div(b, ew_un(b, "stablehlo.round_nearest_even", ew_mul(b, x, p)), p);
  return tpu_ops_result1(tpu_b_convert(b, v, t), outs, nouts);
}

/* The largest finite value of a float dtype. */
static double tpu_ew_float_max(tpu_dtype_t t) {
  switch (t) {
    case TPU_F16: return 65504.0;
    case TPU_BF16: return 3.3895313892515355e38;
    case TPU_F64: return DBL_MAX;
    default: return FLT_MAX;
  }
}

/* nan_to_num of a real float value x (its dtype's largest value by default). */
static tpu_val_t ew_nan_to_num(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x) {
  double big = tpu_ew_float_max(tpu_b_dtype(b, x));
  tpu_val_t nan_v = ew_c(b, x, tpu_op_float(op, 1, 0.0));
  tpu_val_t pos_v = ew_c(b, x, tpu_op_float(op, 2, big)), neg_v = ew_c(b, x, tpu_op_float(op, 3, -big));
  tpu_val_t v = ew_sel(b, ew_isnan(b, x), nan_v, x);
  v = ew_sel(b, ew_cmpc(b, "EQ", x, INFINITY), pos_v, v);
  return ew_sel(b, ew_cmpc(b, "EQ", x, -INFINITY), neg_v, v);
}

/* nan_to_num(self, nan=None, posinf=None, neginf=None): integral inputs
 * unchanged; complex ones part by part, as ATen. */
static tpu_status_t* tpu_lower_nan_to_num(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  if (!tpu_ew_check_dtype(b, "nan_to_num", EW_COMPLEX, NULL, t)) return NULL;
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (tpu_dtype_is_complex(t))
    return tpu_ops_result1(tpu_ops_complex(b, ew_nan_to_num(b, op, tpu_ops_part(b, x, false)),
                                           ew_nan_to_num(b, op, tpu_ops_part(b, x, true))), outs, nouts);
  if (!tpu_dtype_is_float(t)) return tpu_ops_result1(x, outs, nouts);
  return tpu_ops_result1(ew_nan_to_num(b, op, x), outs, nouts);
}

/* ------------------------------------------- multi-result and shaped ops */

/* log_sigmoid_forward(self) -> (output, buffer): buffer = exp(-|x|) as on the CPU. */
static tpu_status_t* tpu_lower_log_sigmoid_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                   int* nouts) {
  if (max_outs < 2) return TPU_STATUS(TPU_INTERNAL, "log_sigmoid_forward: needs 2 results");
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  if (!tpu_ew_check_dtype(b, "log_sigmoid_forward", EW_FLOAT_ONLY, "log_sigmoid_cpu", t)) return NULL;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(t));
  tpu_val_t z = ew_un(b, "stablehlo.exponential", ew_un(b, "stablehlo.negate", ew_un(b, "stablehlo.abs", x)));
  tpu_val_t v = ew_sub(b, ew_min(b, x, ew_c(b, x, 0.0)), ew_un(b, "stablehlo.log_plus_one", z));
  outs[0] = tpu_b_convert(b, v, t);
  outs[1] = tpu_b_convert(b, z, t);
  *nouts = 2;
  return NULL;
}

/* The two halves of x along `dim` (glu's split); false after recording an error. */
static bool tpu_ew_halves(tpu_builder_t* b, tpu_val_t x, int64_t dim_arg, int* out_dim, tpu_val_t* a,
                          tpu_val_t* c) {
  tpu_aval_t in = *tpu_b_aval(b, x);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "glu does not support scalars because halving size must be even");
    return false;
  }
  int dim = tpu_ops_dim(b, dim_arg, in.rank);
  if (!tpu_b_ok(b)) return false;
  if (in.dims[dim] % 2 != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Halving dimension must be even, but dimension %d is size %" PRId64, dim,
               in.dims[dim]);
    return false;
  }
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  memcpy(limit, in.dims, sizeof(int64_t) * (size_t)in.rank);
  limit[dim] = in.dims[dim] / 2;
  *a = tpu_b_slice(b, x, start, limit, NULL);
  start[dim] = in.dims[dim] / 2;
  limit[dim] = in.dims[dim];
  *c = tpu_b_slice(b, x, start, limit, NULL);
  *out_dim = dim;
  return true;
}

/* glu(self, dim=-1) = a * sigmoid(b) for the halves a, b of self. */
static tpu_status_t* tpu_lower_glu(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_dtype_t t = tpu_ew_arg_dtype(op, 0);
  if (!tpu_ew_check_dtype(b, "glu", EW_FLOAT_ONLY, "glu_cpu", t)) return NULL;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(t)), a, c;
  int dim;
  if (!tpu_ew_halves(b, x, tpu_op_int(op, 1, -1), &dim, &a, &c)) return NULL;
  return tpu_ops_result1(tpu_b_convert(b, ew_mul(b, a, ew_sigmoid(b, c)), t), outs, nouts);
}

/* glu_backward(grad_output, self, dim): [g s(b), g a s(b)(1 - s(b))] along dim. */
static tpu_status_t* tpu_lower_glu_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int args[2] = {0, 1};
  tpu_dtype_t t = tpu_ops_result_type(op, 2, args);
  if (!tpu_ew_check_dtype(b, "glu_backward", EW_FLOAT_ONLY, "glu_backward_cpu", t)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(t);
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct), a, c;
  int dim;
  if (!tpu_ew_halves(b, x, tpu_op_int(op, 2, -1), &dim, &a, &c)) return NULL;
  if (!tpu_aval_equal(tpu_b_aval(b, g), tpu_b_aval(b, a))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "glu_backward: grad_output does not have half of self's shape");
    return NULL;
  }
  tpu_val_t s = ew_sigmoid(b, c);
  tpu_val_t ga = ew_mul(b, g, s);
  tpu_val_t gc = ew_mul(b, ew_mul(b, ga, a), ew_one_minus(b, s));
  tpu_val_t parts[2] = {ga, gc};
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_concat(b, 2, parts, dim), t), outs, nouts);
}

/* The float result type of args[0..n) and their op-math type, or false (the
 * dtype error of `name`). */
static bool tpu_ew_float_args(tpu_builder_t* b, tpu_op_t* op, int n, const int* args, const char* name,
                              tpu_dtype_t* t, tpu_dtype_t* ct) {
  *t = tpu_ops_result_type(op, n, args);
  *ct = tpu_dtype_opmath(*t);
  return tpu_ew_check_dtype(b, name, EW_FLOAT_ONLY, name, *t);
}

/* glu_jvp(glu, x, dx, dim): forward-mode derivative of glu,
 * da s(b) + glu (1 - s(b)) db for the halves of x and dx. */
static tpu_status_t* tpu_lower_glu_jvp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int args[3] = {0, 1, 2}, dim;
  tpu_dtype_t t, ct;
  if (!tpu_ew_float_args(b, op, 3, args, "glu_jvp", &t, &ct)) return NULL;
  tpu_val_t glu = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), a, c, da, dc;
  if (!tpu_ew_halves(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct), tpu_op_int(op, 3, -1), &dim, &a, &c) ||
      !tpu_ew_halves(b, tpu_b_convert(b, tpu_op_tensor(b, op, 2), ct), tpu_op_int(op, 3, -1), &dim, &da, &dc))
    return NULL;
  tpu_val_t s = ew_sigmoid(b, c);
  tpu_val_t r = ew_add(b, ew_mul(b, da, s), ew_mul(b, glu, ew_mul(b, ew_one_minus(b, s), dc)));
  return tpu_ops_result1(tpu_b_convert(b, r, t), outs, nouts);
}

/* glu_backward_jvp(grad_x, grad_glu, x, dgrad_glu, dx, dim): forward-mode
 * derivative of glu_backward. With s = s(b), g_a = grad_x's first half
 * (grad_glu s) and db' = db (1 - s): the halves
 * dg_a = dgrad_glu s + g_a db' and dg_a (a - glu) + g_a (da (1 - s) - glu db'). */
static tpu_status_t* tpu_lower_glu_backward_jvp(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  int args[5] = {0, 1, 2, 3, 4}, dim;
  tpu_dtype_t t, ct;
  if (!tpu_ew_float_args(b, op, 5, args, "glu_backward_jvp", &t, &ct)) return NULL;
  int64_t d = tpu_op_int(op, 5, -1);
  tpu_val_t ga, gb, a, c, da, dc; /* gb (grad_x's second half) is not needed */
  if (!tpu_ew_halves(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), d, &dim, &ga, &gb) ||
      !tpu_ew_halves(b, tpu_b_convert(b, tpu_op_tensor(b, op, 2), ct), d, &dim, &a, &c) ||
      !tpu_ew_halves(b, tpu_b_convert(b, tpu_op_tensor(b, op, 4), ct), d, &dim, &da, &dc))
    return NULL;
  tpu_val_t dgrad = tpu_b_convert(b, tpu_op_tensor(b, op, 3), ct);
  tpu_val_t s = ew_sigmoid(b, c), one_s = ew_one_minus(b, s), glu = ew_mul(b, a, s);
  tpu_val_t dcs = ew_mul(b, dc, one_s);
  tpu_val_t dga = ew_add(b, ew_mul(b, dgrad, s), ew_mul(b, ga, dcs));
  tpu_val_t rest = ew_sub(b, ew_mul(b, da, one_s), ew_mul(b, glu, dcs));
  tpu_val_t dgb = ew_add(b, ew_mul(b, dga, ew_sub(b, a, glu)), ew_mul(b, ga, rest));
  tpu_val_t parts[2] = {dga, dgb};
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_concat(b, 2, parts, dim), t), outs, nouts);
}

/* _prelu_kernel_backward(grad, self, weight) -> (grad_self, grad_weight), both in
 * the broadcast shape (autograd sums grad_weight down to weight's shape). */
static tpu_status_t* tpu_lower_prelu_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  if (max_outs < 2) return TPU_STATUS(TPU_INTERNAL, "_prelu_kernel_backward: needs 2 results");
  int all[3] = {0, 1, 2};
  tpu_dtype_t t = tpu_ops_result_type(op, 3, all);
  if (!tpu_ew_check_dtype(b, "_prelu_kernel_backward", EW_FLOAT_ONLY, "prelu_backward_cpu", t)) return NULL;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 3, all, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(t);
  tpu_val_t g = tpu_ew_operand(b, op, 0, t, ct, &shape), x = tpu_ew_operand(b, op, 1, t, ct, &shape);
  tpu_val_t w = tpu_ew_operand(b, op, 2, t, ct, &shape);
  tpu_val_t pos = ew_cmpc(b, "GT", x, 0.0);
  outs[0] = tpu_b_convert(b, ew_sel(b, pos, g, ew_mul(b, w, g)), tpu_op_aval(op, 1).dtype);
  outs[1] = tpu_b_convert(b, ew_sel(b, pos, ew_c(b, x, 0.0), ew_mul(b, x, g)), tpu_op_aval(op, 2).dtype);
  *nouts = 2;
  return NULL;
}

/* ------------------------------------------------------------------- table */

#define TPU_EW_MAP_LOWERING(name, ...) {name, tpu_lower_map},
#define TPU_EW_BINARY_LOWERING(name, ...) {name, tpu_lower_binary},

const tpu_lowering_t tpu_lowerings_elementwise[] = {
    TPU_EW_MAPS(TPU_EW_MAP_LOWERING)
    TPU_EW_BINARIES(TPU_EW_BINARY_LOWERING)
    {"add", tpu_lower_add},
    {"sub", tpu_lower_sub},
    {"rsub", tpu_lower_rsub},
    {"_add_relu", tpu_lower_add_relu},
    {"div", tpu_lower_div},
    {"where", tpu_lower_where},
    {"clamp", tpu_lower_clamp},
    {"clamp_min", tpu_lower_clamp_min},
    {"clamp_max", tpu_lower_clamp_max},
    {"lerp", tpu_lower_lerp},
    {"addcmul", tpu_lower_addcmul},
    {"addcdiv", tpu_lower_addcdiv},
    {"round", tpu_lower_round},
    {"nan_to_num", tpu_lower_nan_to_num},
    {"log_sigmoid_forward", tpu_lower_log_sigmoid_forward},
    {"glu", tpu_lower_glu},
    {"glu_backward", tpu_lower_glu_backward},
    {"glu_jvp", tpu_lower_glu_jvp},
    {"glu_backward_jvp", tpu_lower_glu_backward_jvp},
    {"_prelu_kernel_backward", tpu_lower_prelu_backward},
    {NULL, NULL},
};
