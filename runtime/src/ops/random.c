/* Lowerings: random family.
 *
 * Every random op draws from the device generator: tpu_op_rng_state gives this
 * execution's {seed, offset}, a fresh offset per execution. The offsets of two
 * executions differ by one, and rng_bit_generator's THREE_FRY state is a
 * (key, counter) pair whose counter advances per element, so {seed, offset} cannot
 * be used as the state directly: consecutive ops would get shifted copies of one
 * stream. The key is therefore a hash of (seed, offset), bijective in the offset
 * for a fixed seed, and the counter starts at 0.
 *
 * Values are built from bits the way PyTorch's CPU generator does (uniform with the
 * target dtype's precision, modulo for integer ranges, Box-Muller for normals), so
 * ranges and edge cases match PyTorch; the numbers themselves cannot. */
#include "random.h"

#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "common.h"
#include "matrix.h"

#define TPU_RAND_PI 3.14159265358979323846

/* ------------------------------------------------------------ dtype facts */

/* PyTorch's names for a dtype: ScalarType ("Long") and TypeMeta ("long int"), both
 * used in its messages; digits = std::numeric_limits<T>::digits for floats. */
typedef struct tpu_rand_type {
  const char* scalar;
  const char* meta;
  int digits;
  double lowest, max;
} tpu_rand_type_t;

static const tpu_rand_type_t tpu_rand_types[TPU_DTYPE_COUNT] = {
    [TPU_BOOL] = {"Bool", "bool", 1, 0, 1},
    [TPU_U8] = {"Byte", "unsigned char", 8, 0, 255},
    [TPU_I8] = {"Char", "signed char", 7, -128, 127},
    [TPU_I16] = {"Short", "short int", 15, -32768, 32767},
    [TPU_I32] = {"Int", "int", 31, -2147483648.0, 2147483647.0},
    [TPU_I64] = {"Long", "long int", 63, -9223372036854775808.0, 9223372036854775807.0},
    [TPU_F16] = {"Half", "c10::Half", 11, -65504.0, 65504.0},
    [TPU_BF16] = {"BFloat16", "c10::BFloat16", 8, -3.3895313892515355e38, 3.3895313892515355e38},
    [TPU_F32] = {"Float", "float", 24, -FLT_MAX, FLT_MAX},
    [TPU_F64] = {"Double", "double", 53, -DBL_MAX, DBL_MAX},
    [TPU_C64] = {"ComplexFloat", "c10::complex<float>", 24, -FLT_MAX, FLT_MAX},
    [TPU_C128] = {"ComplexDouble", "c10::complex<double>", 53, -DBL_MAX, DBL_MAX},
    [TPU_U16] = {"UInt16", "uint16_t", 16, 0, 65535.0},
    [TPU_U32] = {"UInt32", "uint32_t", 32, 0, 4294967295.0},
    [TPU_U64] = {"UInt64", "uint64_t", 64, 0, 18446744073709551615.0},
};
static_assert(TPU_DTYPE_COUNT == 15, "tpu_rand_types needs a row per dtype");

/* Integral max (bool: 1) as an exact integer; floats are not asked. */
static int64_t tpu_rand_int_max(tpu_dtype_t t) {
  return t == TPU_I64 ? INT64_MAX : (int64_t)tpu_rand_types[t].max;
}

static tpu_aval_t tpu_rand_retype(const tpu_aval_t* a, tpu_dtype_t t) {
  tpu_aval_t r = *a;
  r.dtype = t;
  return r;
}

/* Computation dtype of a float result: f64 stays, everything else uses f32. */
static tpu_dtype_t tpu_rand_compute(tpu_dtype_t t) { return t == TPU_F64 ? TPU_F64 : TPU_F32; }

/* A constant of any integer dtype broadcast to `shape`, exact for 64-bit values
 * (tpu_b_full goes through a double). */
static tpu_val_t tpu_rand_full_int(tpu_builder_t* b, tpu_dtype_t t, uint64_t v, const tpu_aval_t* shape) {
  tpu_val_t c;
  if (t == TPU_U64) {
    char attrs[96];
    snprintf(attrs, sizeof(attrs), "value = dense<%" PRIu64 "> : tensor<ui64>", v);
    tpu_aval_t a = tpu_aval_make(TPU_U64, 0, NULL);
    c = tpu_b_op1(b, "stablehlo.constant", 0, NULL, attrs, &a);
  } else {
    c = tpu_b_const_i(b, t, (int64_t)v);
  }
  return tpu_b_broadcast_in_dim(b, c, shape->rank, shape->dims, NULL);
}

/* A constant of like's shape and dtype. The aval is copied first: tpu_b_aval points
 * into the builder's value table, which the constant's emission may reallocate
 * (so tpu_ops_like / tpu_b_full(b, tpu_b_aval(...)) are unsafe). */
static tpu_val_t tpu_rand_fill(tpu_builder_t* b, tpu_val_t like, double v) {
  tpu_aval_t a = *tpu_b_aval(b, like);
  return tpu_b_full(b, &a, v);
}

/* A device-side check (check.h) that fails with ATen's `message` when some
 * element of x is not in [lo, hi] (NaN neither): a distribution parameter ATen's
 * kernel refuses, where the samples would be meaningless. */
static void tpu_rand_check_range(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, double lo, double hi,
                                 const char* message) {
  if (!tpu_b_ok(b) || tpu_aval_numel(tpu_b_aval(b, x)) == 0) return;
  tpu_op_check(b, op, tpu_mx_any_outside(b, x, lo, hi), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s", message);
}

/* ------------------------------------------------------------ the generator */

/* splitmix64's finaliser on a 0-d i64 (wrapping arithmetic = uint64 arithmetic). */
static tpu_val_t tpu_rng_mix(tpu_builder_t* b, tpu_val_t z) {
  static const struct { int shift; uint64_t mul; } steps[3] = {
      {30, UINT64_C(0xBF58476D1CE4E5B9)}, {27, UINT64_C(0x94D049BB133111EB)}, {31, 0}};
  z = tpu_b_binary(b, "stablehlo.add", z, tpu_b_const_i(b, TPU_I64, (int64_t)UINT64_C(0x9E3779B97F4A7C15)));
  for (int i = 0; i < 3; ++i) {
    tpu_val_t sh = tpu_b_binary(b, "stablehlo.shift_right_logical", z, tpu_b_const_i(b, TPU_I64, steps[i].shift));
    z = tpu_b_binary(b, "stablehlo.xor", z, sh);
    if (steps[i].mul) z = tpu_b_binary(b, "stablehlo.multiply", z, tpu_b_const_i(b, TPU_I64, (int64_t)steps[i].mul));
  }
  return z;
}

tpu_rng_t tpu_rng_open(tpu_builder_t* b, tpu_op_t* op) {
  tpu_rng_t g = {TPU_NOVAL};
  tpu_val_t st = tpu_op_rng_state(b, op);
  int64_t one = 1, two = 2;
  tpu_val_t part[2];
  for (int64_t i = 0; i < 2; ++i) {
    int64_t lo = i, hi = i + 1;
    part[i] = tpu_b_reshape(b, tpu_b_slice(b, st, &lo, &hi, NULL), 0, NULL);
  }
  /* key = mix(seed ^ mix(offset)): a bijection of the offset for a given seed. */
  tpu_val_t key = tpu_rng_mix(b, tpu_b_binary(b, "stablehlo.xor", part[0], tpu_rng_mix(b, part[1])));
  tpu_val_t pair[2] = {tpu_b_reshape(b, key, 1, &one), tpu_b_reshape(b, tpu_b_const_i(b, TPU_I64, 0), 1, &one)};
  tpu_aval_t u = tpu_aval_make(TPU_U64, 1, &two);
  g.state = tpu_b_bitcast(b, tpu_b_concat(b, 2, pair, 0), &u);
  return g;
}

tpu_val_t tpu_rng_bits(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t bits, const tpu_aval_t* shape) {
  tpu_aval_t out = tpu_rand_retype(shape, bits);
  int64_t n = tpu_aval_numel(&out);
  if (n == 0) return tpu_b_full(b, &out, 0); /* nothing to draw */
  int64_t two = 2;
  tpu_aval_t avals[2] = {tpu_aval_make(TPU_U64, 1, &two), tpu_aval_make(bits, 1, &n)};
  tpu_val_t res[2] = {TPU_NOVAL, TPU_NOVAL};
  tpu_b_op(b, "stablehlo.rng_bit_generator", 1, &g->state, 0, NULL,
           "rng_algorithm = #stablehlo<rng_algorithm THREE_FRY>", 2, avals, res);
  g->state = res[0];
  return tpu_b_reshape(b, res[1], out.rank, out.dims);
}

/* The top `keep` bits of fresh 32/64-bit words (32 for f32 compute, 64 for f64). */
static tpu_val_t tpu_rng_top_bits(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t ct, int keep, const tpu_aval_t* shape) {
  tpu_dtype_t ut = ct == TPU_F64 ? TPU_U64 : TPU_U32;
  int width = ct == TPU_F64 ? 64 : 32;
  tpu_val_t bits = tpu_rng_bits(b, g, ut, shape);
  return tpu_b_binary(b, "stablehlo.shift_right_logical", bits, tpu_rand_fill(b, bits, width - keep));
}

tpu_val_t tpu_rng_uniform(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape) {
  tpu_dtype_t t = tpu_dtype_is_float(shape->dtype) ? shape->dtype : TPU_F32;
  tpu_dtype_t ct = tpu_rand_compute(t);
  int d = tpu_rand_types[t].digits;
  /* k / 2^d with k < 2^d: exact in t, so never rounds up to 1 (PyTorch's uniform_real). */
  tpu_val_t k = tpu_b_convert(b, tpu_rng_top_bits(b, g, ct, d, shape), ct);
  return tpu_b_binary(b, "stablehlo.multiply", k, tpu_rand_fill(b, k, ldexp(1.0, -d)));
}

tpu_val_t tpu_rng_uniform_open(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t ct, const tpu_aval_t* shape) {
  int d = ct == TPU_F64 ? 52 : 23;
  /* (2k + 1) / 2^(d+1): odd multiples of half a step, exact, never 0 or 1. */
  tpu_val_t k = tpu_rng_top_bits(b, g, ct, d, shape);
  k = tpu_b_binary(b, "stablehlo.shift_left", k, tpu_rand_fill(b, k, 1));
  k = tpu_b_binary(b, "stablehlo.or", k, tpu_rand_fill(b, k, 1));
  tpu_val_t u = tpu_b_convert(b, k, ct);
  return tpu_b_binary(b, "stablehlo.multiply", u, tpu_rand_fill(b, u, ldexp(1.0, -(d + 1))));
}

tpu_val_t tpu_rng_normal(tpu_builder_t* b, tpu_rng_t* g, tpu_dtype_t ct, const tpu_aval_t* shape) {
  tpu_aval_t a = tpu_rand_retype(shape, ct);
  tpu_val_t u1 = tpu_rng_uniform_open(b, g, ct, &a), u2 = tpu_rng_uniform_open(b, g, ct, &a);
  /* Box-Muller: sqrt(-2 ln u1) * cos(2 pi u2). */
  tpu_val_t r = tpu_b_binary(b, "stablehlo.multiply", tpu_b_unary(b, "stablehlo.log", u1), tpu_rand_fill(b, u1, -2.0));
  r = tpu_b_unary(b, "stablehlo.sqrt", r);
  tpu_val_t th = tpu_b_binary(b, "stablehlo.multiply", u2, tpu_rand_fill(b, u2, 2.0 * TPU_RAND_PI));
  return tpu_b_binary(b, "stablehlo.multiply", r, tpu_b_unary(b, "stablehlo.cosine", th));
}

/* x * s + o with host constants, in x's dtype. */
static tpu_val_t tpu_rand_affine(tpu_builder_t* b, tpu_val_t x, double s, double o) {
  x = tpu_b_binary(b, "stablehlo.multiply", x, tpu_rand_fill(b, x, s));
  return tpu_b_binary(b, "stablehlo.add", x, tpu_rand_fill(b, x, o));
}

/* ------------------------------------------------ distributions over self */

/* A distribution that fills a tensor of self's shape and dtype (arg 0) from two
 * float parameters (args 1 and 2). sample() returns values of shape->dtype. */
typedef tpu_val_t (*tpu_dist_sample_fn)(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm);
typedef bool (*tpu_dist_check_fn)(tpu_builder_t* b, const double* prm, tpu_dtype_t t);

typedef struct tpu_dist {
  const char* name;         /* aten base name */
  double dflt[2];           /* defaults of args 1 and 2 */
  bool ints;                /* integral dtypes allowed (geometric) */
  const char* bad_dtype;    /* message for a dtype it does not take; %s = the dtype's name */
  bool meta_name;           /* the name is TypeMeta's ("long int"), not ScalarType's ("Long") */
  tpu_status_code_t bad_code;
  tpu_dist_check_fn check;
  tpu_dist_sample_fn sample;
  /* Complex self: ATen samples view_as_real(self) (normal with std / sqrt(2)). */
  bool complex_pairs;
  double complex_std_scale;
} tpu_dist_t;

static bool tpu_check_normal(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  (void)t;
  if (!(prm[1] >= 0.0)) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "normal expects std >= 0.0, but found std %g", prm[1]);
  return tpu_b_ok(b);
}

static bool tpu_check_uniform(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  const tpu_rand_type_t* ty = &tpu_rand_types[t];
  const char* names[2] = {"from", "to"};
  for (int i = 0; i < 2; ++i)
    if (!(prm[i] >= ty->lowest && prm[i] <= ty->max)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s is out of bounds for %s", names[i], ty->meta);
      return false;
    }
  if (!(prm[0] <= prm[1]))
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "uniform_ expects to return a [from, to) range, but found from=%g > to=%g",
               prm[0], prm[1]);
  else if (!(prm[1] - prm[0] <= ty->max))
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "uniform_ expects to-from <= std::numeric_limits<%s>::max(), but found to=%g and from=%g which "
               "result in to-from to exceed the limit",
               ty->scalar, prm[1], prm[0]);
  return tpu_b_ok(b);
}

static bool tpu_check_exponential(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  (void)t;
  if (!(prm[0] > 0.0))
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g", prm[0]);
  return tpu_b_ok(b);
}

static bool tpu_check_geometric(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  (void)t;
  if (!(prm[0] > 0.0 && prm[0] < 1.0))
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "geometric_ expects p to be in (0, 1), but got p=%g", prm[0]);
  return tpu_b_ok(b);
}

static bool tpu_check_log_normal(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  (void)t;
  if (!(prm[1] > 0.0)) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "log_normal_ expects std > 0.0, but found std=%g", prm[1]);
  return tpu_b_ok(b);
}

static bool tpu_check_cauchy(tpu_builder_t* b, const double* prm, tpu_dtype_t t) {
  (void)t;
  if (!(prm[1] > 0.0)) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "cauchy_ expects sigma > 0.0, but found sigma=%g", prm[1]);
  return tpu_b_ok(b);
}

static tpu_val_t tpu_sample_normal(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  tpu_val_t z = tpu_rng_normal(b, g, tpu_rand_compute(shape->dtype), shape);
  return tpu_b_convert(b, tpu_rand_affine(b, z, prm[1], prm[0]), shape->dtype);
}

static tpu_val_t tpu_sample_uniform(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  tpu_dtype_t t = shape->dtype, ct = tpu_rand_compute(t);
  tpu_val_t u = tpu_rng_uniform(b, g, shape);
  /* PyTorch casts from and to to self's dtype first, then computes in opmath. */
  tpu_val_t from = tpu_ops_bcast(b, tpu_b_convert(b, tpu_b_const(b, t, prm[0]), ct), shape);
  tpu_val_t to = tpu_ops_bcast(b, tpu_b_convert(b, tpu_b_const(b, t, prm[1]), ct), shape);
  tpu_val_t v = tpu_b_binary(b, "stablehlo.multiply", u, tpu_b_binary(b, "stablehlo.subtract", to, from));
  v = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.add", v, from), t);
  /* from + (to - from) * u can round up to `to`; keep [from, to) as PyTorch's CUDA
   * kernel does, by mapping that value back to `from`. */
  return tpu_b_select(b, tpu_b_compare(b, "GE", v, tpu_b_convert(b, to, t)), tpu_b_convert(b, from, t), v);
}

static tpu_val_t tpu_sample_exponential(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  /* -ln(u) / lambda with u in (0, 1): strictly positive, finite. */
  tpu_val_t u = tpu_rng_uniform_open(b, g, tpu_rand_compute(shape->dtype), shape);
  tpu_val_t x = tpu_rand_affine(b, tpu_b_unary(b, "stablehlo.log", u), -1.0 / prm[0], 0.0);
  return tpu_b_convert(b, x, shape->dtype);
}

static tpu_val_t tpu_sample_geometric(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  /* ceil(ln(u) / ln(1 - p)) >= 1: the number of trials up to the first success. */
  tpu_val_t u = tpu_rng_uniform_open(b, g, tpu_rand_compute(shape->dtype), shape);
  tpu_val_t x = tpu_rand_affine(b, tpu_b_unary(b, "stablehlo.log", u), 1.0 / log1p(-prm[0]), 0.0);
  return tpu_b_convert(b, tpu_b_unary(b, "stablehlo.ceil", x), shape->dtype);
}

static tpu_val_t tpu_sample_log_normal(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  tpu_val_t z = tpu_rng_normal(b, g, tpu_rand_compute(shape->dtype), shape);
  return tpu_b_convert(b, tpu_b_unary(b, "stablehlo.exponential", tpu_rand_affine(b, z, prm[1], prm[0])), shape->dtype);
}

static tpu_val_t tpu_sample_cauchy(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, const double* prm) {
  /* median + sigma * tan(pi * (u - 1/2)) */
  tpu_val_t u = tpu_rng_uniform_open(b, g, tpu_rand_compute(shape->dtype), shape);
  tpu_val_t x = tpu_b_unary(b, "chlo.tan", tpu_rand_affine(b, u, TPU_RAND_PI, -0.5 * TPU_RAND_PI));
  return tpu_b_convert(b, tpu_rand_affine(b, x, prm[1], prm[0]), shape->dtype);
}

#define TPU_NOT_IMPL(kernel) "\"" kernel "\" not implemented for '%s'"
#define TPU_CONTINUOUS(dist) \
  dist " distribution is a continuous probability distribution. dtype must be a floating point but you specified %s"

static const tpu_dist_t tpu_dists[] = {
    {"normal", {0.0, 1.0}, false, TPU_NOT_IMPL("normal_kernel_cpu"), false, TPU_UNIMPLEMENTED, tpu_check_normal,
     tpu_sample_normal, true, 0.70710678118654752440 /* 1/sqrt(2) */},
    {"normal_functional", {0.0, 1.0}, false, TPU_NOT_IMPL("normal_kernel_cpu"), false, TPU_UNIMPLEMENTED,
     tpu_check_normal, tpu_sample_normal, true, 0.70710678118654752440 /* 1/sqrt(2) */},
    {"uniform", {0.0, 1.0}, false, TPU_NOT_IMPL("check_uniform_bounds"), false, TPU_UNIMPLEMENTED, tpu_check_uniform,
     tpu_sample_uniform, true, 1.0},
    {"exponential", {1.0, 0.0}, false, TPU_CONTINUOUS("Exponential"), false, TPU_INVALID_ARGUMENT,
     tpu_check_exponential, tpu_sample_exponential, false, 1.0},
    {"geometric", {NAN, 0.0}, true, TPU_NOT_IMPL("geometric_cpu"), false, TPU_UNIMPLEMENTED, tpu_check_geometric,
     tpu_sample_geometric, false, 1.0},
    {"log_normal", {1.0, 2.0}, false, TPU_NOT_IMPL("log_normal_cpu"), false, TPU_UNIMPLEMENTED, tpu_check_log_normal,
     tpu_sample_log_normal, false, 1.0},
    {"cauchy", {0.0, 1.0}, false, TPU_CONTINUOUS("Cauchy"), true, TPU_INVALID_ARGUMENT, tpu_check_cauchy,
     tpu_sample_cauchy, false, 1.0},
};

static const tpu_dist_t* tpu_dist_find(const char* name) {
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_dists); ++i)
    if (strcmp(tpu_dists[i].name, name) == 0) return &tpu_dists[i];
  return NULL;
}

static bool tpu_dist_dtype_ok(const tpu_dist_t* d, tpu_dtype_t t) {
  return tpu_dtype_is_float(t) || (d->ints && tpu_dtype_is_int(t) && t < TPU_U16) ||
         (d->complex_pairs && tpu_dtype_is_complex(t));
}

/* A complex self's samples: the real pairs on a trailing dim of 2, as complex. */
static tpu_val_t tpu_dist_complex(tpu_builder_t* b, const tpu_dist_t* d, tpu_rng_t* g, const tpu_aval_t* shape,
                                  const double* prm) {
  tpu_aval_t pairs = *shape;
  pairs.dtype = shape->dtype == TPU_C128 ? TPU_F64 : TPU_F32;
  pairs.dims[pairs.rank++] = 2;
  const double scaled[2] = {prm[0], prm[1] * d->complex_std_scale};
  return tpu_b_bitcast(b, d->sample(b, g, &pairs, scaled), shape);
}

/* normal_, uniform_, exponential_, geometric_, log_normal_, cauchy_ and their
 * functional / out= forms: a tensor of self's shape and dtype. */
static tpu_status_t* tpu_lower_dist(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const tpu_dist_t* d = tpu_dist_find(tpu_op_name(op));
  if (!d) return TPU_STATUS(TPU_INTERNAL, "%s: not a distribution", tpu_op_name(op));
  if (tpu_op_kind(op, 0) != TPU_ARG_TENSOR)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: expected a tensor as self", d->name);
  tpu_aval_t shape = tpu_op_aval(op, 0);
  if (!tpu_dist_dtype_ok(d, shape.dtype)) {
    const tpu_rand_type_t* ty = &tpu_rand_types[shape.dtype];
    return TPU_STATUS(d->bad_code, d->bad_dtype, d->meta_name ? ty->meta : ty->scalar);
  }
  double prm[2] = {tpu_op_float(op, 1, d->dflt[0]), tpu_op_float(op, 2, d->dflt[1])};
  if (!d->check(b, prm, shape.dtype)) return NULL;
  tpu_rng_t g = tpu_rng_open(b, op);
  if (tpu_dtype_is_complex(shape.dtype)) {
    if (shape.rank >= TPU_MAX_RANK)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: a complex tensor of rank %d is past the tpu limit of %d dims for "
                        "its real pairs", d->name, shape.rank, TPU_MAX_RANK - 1);
    return tpu_ops_result1(tpu_dist_complex(b, d, &g, &shape, prm), outs, nouts);
  }
  return tpu_ops_result1(d->sample(b, &g, &shape, prm), outs, nouts);
}

/* ------------------------------------------------------------------ normal */

static bool tpu_rand_prefix(const char* s, const char* prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

/* normal.Tensor_float / float_Tensor / Tensor_Tensor / float_float (and _out):
 * mean + std * z over the broadcast shape of the tensor arguments. The result has
 * mean's dtype (std's for float_Tensor), as in PyTorch. */
static tpu_status_t* tpu_lower_normal(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  const char* ov = tpu_op_overload(op);
  bool tensor_mean = tpu_rand_prefix(ov, "Tensor_"), float_mean = tpu_rand_prefix(ov, "float_");
  if (!tensor_mean && !float_mean) return tpu_lower_dist(b, op, max_outs, outs, nouts);
  int args[2] = {0, 1};
  tpu_aval_t shape;
  tpu_dtype_t t = TPU_F32;
  if (tpu_rand_prefix(ov, "float_float")) {
    int64_t dims[TPU_MAX_RANK];
    int rank = tpu_op_ints(op, 2, dims, TPU_MAX_RANK);
    for (int i = 0; i < rank; ++i)
      if (dims[i] < 0)
        return TPU_STATUS(TPU_INVALID_ARGUMENT, "Trying to create tensor with negative dimension %" PRId64, dims[i]);
    for (int i = 3; i < tpu_op_nargs(op); ++i)
      if (tpu_op_kind(op, i) == TPU_ARG_DTYPE) t = tpu_op_dtype(op, i, TPU_F32);
    shape = tpu_aval_make(t, rank, dims);
  } else {
    if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
    t = tpu_op_aval(op, tensor_mean ? 0 : 1).dtype;
    shape.dtype = t;
  }
  if (!tpu_dtype_is_float(t))
    return TPU_STATUS(TPU_UNIMPLEMENTED, TPU_NOT_IMPL("normal_kernel_cpu"), tpu_rand_types[t].scalar);
  if (tpu_op_kind(op, 1) == TPU_ARG_FLOAT && !(tpu_op_float(op, 1, 1.0) >= 0.0))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "normal expects std >= 0.0, but found std %g", tpu_op_float(op, 1, 1.0));
  tpu_dtype_t ct = tpu_rand_compute(t);
  tpu_aval_t cshape = tpu_rand_retype(&shape, ct);
  tpu_val_t mean = tpu_ops_operand(b, op, 0, ct, &cshape);
  tpu_val_t std = tpu_op_kind(op, 1) == TPU_ARG_NONE ? tpu_b_full(b, &cshape, 1.0) : tpu_ops_operand(b, op, 1, ct, &cshape);
  if (tpu_op_kind(op, 1) == TPU_ARG_TENSOR)
    tpu_rand_check_range(b, op, std, 0.0, INFINITY, "normal expects all elements of std >= 0.0");
  tpu_rng_t g = tpu_rng_open(b, op);
  tpu_val_t z = tpu_rng_normal(b, &g, ct, &cshape);
  z = tpu_b_binary(b, "stablehlo.add", mean, tpu_b_binary(b, "stablehlo.multiply", std, z));
  return tpu_ops_result1(tpu_b_convert(b, z, t), outs, nouts);
}

/* --------------------------------------------------------------- bernoulli */

static tpu_status_t* tpu_rand_bad_p(double p) {
  return TPU_STATUS(TPU_INVALID_ARGUMENT, "bernoulli_ expects p to be in [0, 1], but got p=%g", p);
}

/* Does `from` expand to `to` (at::expand's rules)? */
static tpu_status_t* tpu_rand_check_expand(const tpu_aval_t* from, const tpu_aval_t* to) {
  if (from->rank > to->rank)
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "expand: the number of sizes provided (%d) must be greater or equal to the number of "
                      "dimensions in the tensor (%d)",
                      to->rank, from->rank);
  for (int i = 0; i < from->rank; ++i) {
    int j = i + to->rank - from->rank;
    if (from->dims[i] != 1 && from->dims[i] != to->dims[j]) {
      char ts[256], fs[256];
      return TPU_STATUS(TPU_INVALID_ARGUMENT,
                        "The expanded size of the tensor (%" PRId64 ") must match the existing size (%" PRId64
                        ") at non-singleton dimension %d.  Target sizes: %s.  Tensor sizes: %s",
                        to->dims[j], from->dims[i], j, tpu_fmt_i64_list(ts, sizeof(ts), to->rank, to->dims),
                        tpu_fmt_i64_list(fs, sizeof(fs), from->rank, from->dims));
    }
  }
  return NULL;
}

/* u < p with u uniform in [0, 1), in p's precision (f32 or f64), p broadcast to
 * `shape`: P(true) = p; p = 0 never, p = 1 always. */
static tpu_val_t tpu_rand_coin(tpu_builder_t* b, tpu_rng_t* g, tpu_val_t p, const tpu_aval_t* shape) {
  tpu_aval_t a = tpu_rand_retype(shape, tpu_b_dtype(b, p));
  tpu_val_t u = tpu_rng_uniform(b, g, &a);
  return tpu_b_compare(b, "LT", u, tpu_ops_bcast(b, tpu_b_convert(b, p, tpu_b_dtype(b, u)), shape));
}

/* bernoulli(self) (self = probabilities), bernoulli.p / bernoulli_.float (a float
 * p), bernoulli.Tensor / bernoulli_.Tensor (p expanded to self): self's shape and dtype. */
static tpu_status_t* tpu_lower_bernoulli(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t shape = tpu_op_aval(op, 0);
  const char* ov = tpu_op_overload(op);
  /* Overloads: "" / "out" (self holds p), "p" / "float" / "float_out", "Tensor" / "Tensor_out". */
  bool scalar_p = tpu_rand_prefix(ov, "p") || tpu_rand_prefix(ov, "float");
  int p_arg = tpu_rand_prefix(ov, "Tensor") ? 1 : 0;
  tpu_val_t p;
  if (scalar_p) {
    double pv = tpu_op_float(op, 1, 0.5);
    if (!(pv >= 0.0 && pv <= 1.0)) return tpu_rand_bad_p(pv);
    p = tpu_b_full(b, &(tpu_aval_t){TPU_F32, 0, {0}}, pv);
  } else {
    tpu_aval_t pa = tpu_op_aval(op, p_arg);
    if (!tpu_dtype_is_float(pa.dtype))
      return TPU_STATUS(TPU_UNIMPLEMENTED, TPU_NOT_IMPL("bernoulli_tensor_cpu_p_"), tpu_rand_types[pa.dtype].scalar);
    tpu_status_t* st = tpu_rand_check_expand(&pa, &shape);
    if (st) return st;
    p = tpu_op_tensor(b, op, p_arg);
    if (tpu_b_dtype(b, p) != TPU_F64) p = tpu_b_convert(b, p, TPU_F32);
    tpu_rand_check_range(b, op, p, 0.0, 1.0,
                         "Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                         "improved?  If so, please report an enhancement request to PyTorch.)");
  }
  tpu_rng_t g = tpu_rng_open(b, op);
  return tpu_ops_result1(tpu_b_convert(b, tpu_rand_coin(b, &g, p, &shape), shape.dtype), outs, nouts);
}

/* ----------------------------------------------------------------- random_ */

/* int64 -> a float dtype with `digits` significand bits -> int64, rounding to
 * nearest even like the C++ casts PyTorch does (x86's INT64_MIN on overflow). */
static int64_t tpu_rand_round_digits(int64_t x, int digits) {
  uint64_t m = x < 0 ? (uint64_t)0 - (uint64_t)x : (uint64_t)x;
  int n = 0;
  for (uint64_t v = m; v >>= 1;) ++n;
  if (n < digits) return x;
  int shift = n - digits + 1;
  uint64_t q = m >> shift, rem = m & ((UINT64_C(1) << shift) - 1), half = UINT64_C(1) << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  if (q >> (64 - shift)) return INT64_MIN;
  uint64_t r = q << shift;
  if (x >= 0) return r > (uint64_t)INT64_MAX ? INT64_MIN : (int64_t)r;
  return r > (uint64_t)INT64_MAX ? INT64_MIN : -(int64_t)r;
}

static int tpu_rand_log2(uint64_t v) {
  int n = 0;
  while (v >>= 1) ++n;
  return n;
}

/* PyTorch's update_from / update_to: move a bound that the float dtype rounds across. */
static int64_t tpu_rand_update_from(int64_t from, int digits) {
  int64_t fp1 = tpu_rand_round_digits((int64_t)((uint64_t)from + 1), digits);
  if (fp1 < from) {
    int64_t f = (int64_t)((uint64_t)from + 1);
    from = fp1 + ((int64_t)1 << (tpu_rand_log2(f < 0 ? (uint64_t)0 - (uint64_t)f : (uint64_t)f) - digits + 1));
  }
  return from;
}

static int64_t tpu_rand_update_to(int64_t to, int digits) {
  int64_t tm1 = tpu_rand_round_digits((int64_t)((uint64_t)to - 1), digits);
  if (tm1 >= to) {
    int64_t t = (int64_t)((uint64_t)to - 1);
    to = tm1 - ((int64_t)1 << (tpu_rand_log2(t < 0 ? (uint64_t)0 - (uint64_t)t : (uint64_t)t) - digits + 1));
  }
  return to;
}

/* PyTorch's check_from_to_in_range. */
static tpu_status_t* tpu_rand_check_bounds(int64_t from, int64_t to_inc, tpu_dtype_t t) {
  const tpu_rand_type_t* ty = &tpu_rand_types[t];
  bool fl = tpu_dtype_is_float(t);
  const char* names[2] = {"from", "to - 1"};
  int64_t v[2] = {from, to_inc};
  for (int i = 0; i < 2; ++i) {
    bool ok = fl ? ((double)v[i] >= ty->lowest && (double)v[i] <= ty->max)
                 : (v[i] >= (int64_t)ty->lowest && v[i] <= tpu_rand_int_max(t));
    if (!ok) return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s is out of bounds for %s", names[i], ty->meta);
  }
  return NULL;
}

/* The integer range [base, base + range) of random_'s three forms (range 0 = all
 * 2^64 values), as PyTorch computes it. */
static tpu_status_t* tpu_rand_int_range(tpu_op_t* op, tpu_dtype_t t, uint64_t* range, int64_t* base) {
  const char* ov = tpu_op_overload(op);
  bool fl = tpu_dtype_is_float(t);
  int digits = tpu_rand_types[t].digits;
  *base = 0;
  if (!tpu_rand_prefix(ov, "to") && !tpu_rand_prefix(ov, "from")) {
    /* random_(): [0, 2^digits] for floats, [0, max] for integers, {0, 1} for bool. */
    *range = fl ? (UINT64_C(1) << digits) + 1 : (uint64_t)tpu_rand_int_max(t) + 1;
    return NULL;
  }
  bool has_to = tpu_rand_prefix(ov, "to") || tpu_op_kind(op, 2) == TPU_ARG_INT;
  int64_t from = tpu_rand_prefix(ov, "to") ? 0 : tpu_op_int(op, 1, 0);
  if (has_to) {
    int64_t to = tpu_op_int(op, tpu_rand_prefix(ov, "to") ? 1 : 2, 0);
    if (from >= to)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "random_ expects 'from' to be less than 'to', but got from=%" PRId64
                        " >= to=%" PRId64, from, to);
    if (fl) {
      from = tpu_rand_update_from(from, digits);
      to = tpu_rand_update_to(to, digits);
      if (from >= to)
        return TPU_STATUS(TPU_INVALID_ARGUMENT,
                          "random_ expects 'from' casted to dtype to be less than 'to' casted to dtype, but got "
                          "from=%" PRId64 " >= to=%" PRId64, from, to);
    }
    tpu_status_t* st = tpu_rand_check_bounds(from, to - 1, t);
    if (st) return st;
    *range = (uint64_t)to - (uint64_t)from;
  } else if (from != INT64_MIN) {
    int64_t to_inc = fl ? (digits >= 63 ? INT64_MAX : (int64_t)1 << digits) : tpu_rand_int_max(t);
    if (fl) {
      from = tpu_rand_update_from(from, digits);
      if (from >= to_inc)
        return TPU_STATUS(TPU_INVALID_ARGUMENT,
                          "random_ expects 'from' casted to dtype to be less than or equal to 'to_inc' casted to "
                          "dtype, but got from=%" PRId64 " > to_inc=%" PRId64, from, to_inc);
    }
    tpu_status_t* st = tpu_rand_check_bounds(from, to_inc, t);
    if (st) return st;
    *range = (uint64_t)to_inc - (uint64_t)from + 1;
  } else {
    *range = 0;
  }
  *base = from;
  return NULL;
}

/* base + bits % range (32-bit words when the range fits, like PyTorch's random()
 * vs random64()), wrapped to int64 and converted to shape->dtype. */
static tpu_val_t tpu_rand_ints(tpu_builder_t* b, tpu_rng_t* g, const tpu_aval_t* shape, uint64_t range, int64_t base) {
  tpu_aval_t i64 = tpu_rand_retype(shape, TPU_I64);
  tpu_val_t v;
  if (range == 0) {
    v = tpu_b_bitcast(b, tpu_rng_bits(b, g, TPU_U64, shape), &i64);
  } else {
    tpu_dtype_t ut = range >= (UINT64_C(1) << 32) ? TPU_U64 : TPU_U32;
    tpu_aval_t ua = tpu_rand_retype(shape, ut);
    tpu_val_t r = tpu_b_binary(b, "stablehlo.remainder", tpu_rng_bits(b, g, ut, shape), tpu_rand_full_int(b, ut, range, &ua));
    r = ut == TPU_U64 ? tpu_b_bitcast(b, r, &i64) : tpu_b_convert(b, r, TPU_I64);
    v = tpu_b_binary(b, "stablehlo.add", r, tpu_rand_full_int(b, TPU_I64, (uint64_t)base, &i64));
  }
  return tpu_b_convert(b, v, shape->dtype);
}

/* random_(), random_(to), random_(from, to?): integers in PyTorch's ranges, in self's dtype. */
static tpu_status_t* tpu_lower_random(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t shape = tpu_op_aval(op, 0);
  if (shape.dtype >= TPU_C64 || shape.dtype == TPU_U16 || shape.dtype == TPU_U32)
    return TPU_STATUS(TPU_UNIMPLEMENTED, TPU_NOT_IMPL("random_from_to_kernel_cpu"), tpu_rand_types[shape.dtype].scalar);
  uint64_t range = 0;
  int64_t base = 0;
  tpu_status_t* st = tpu_rand_int_range(op, shape.dtype, &range, &base);
  if (st) return st;
  tpu_rng_t g = tpu_rng_open(b, op);
  return tpu_ops_result1(tpu_rand_ints(b, &g, &shape, range, base), outs, nouts);
}

/* ------------------------------------------------ randperm and multinomial */

/* Indices that sort `keys` along `dim` (descending when `desc`), as i64. */
static tpu_val_t tpu_rand_argsort(tpu_builder_t* b, tpu_val_t keys, int dim, bool desc) {
  tpu_aval_t ka = *tpu_b_aval(b, keys), ia = tpu_rand_retype(&ka, TPU_I64);
  tpu_val_t ins[2] = {keys, tpu_b_iota(b, &ia, dim)};
  tpu_aval_t sa[4] = {tpu_aval_make(ka.dtype, 0, NULL), tpu_aval_make(ka.dtype, 0, NULL),
                      tpu_aval_make(TPU_I64, 0, NULL), tpu_aval_make(TPU_I64, 0, NULL)};
  tpu_val_t args[4];
  tpu_b_region_begin(b, 4, sa, args);
  tpu_val_t lt = tpu_b_compare(b, desc ? "GT" : "LT", args[0], args[1]);
  char* region = tpu_b_region_end(b, 1, &lt);
  char attrs[64];
  snprintf(attrs, sizeof(attrs), "dimension = %d : i64, is_stable = false", dim);
  tpu_aval_t oa[2] = {ka, ia};
  tpu_val_t res[2] = {TPU_NOVAL, TPU_NOVAL};
  tpu_b_op(b, "stablehlo.sort", 2, ins, region ? 1 : 0, region ? &region : NULL, attrs, 2, oa, res);
  return res[1];
}

/* randperm(n) (every overload; out= gets the int64 result cast by the binding). */
static tpu_status_t* tpu_lower_randperm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int64_t n = tpu_op_int(op, 0, 0);
  if (n < 0)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "Trying to create tensor with negative dimension %" PRId64 ": [%" PRId64 "]",
                      n, n);
  tpu_dtype_t t = TPU_I64;
  for (int i = 1; i < tpu_op_nargs(op); ++i)
    if (tpu_op_kind(op, i) == TPU_ARG_DTYPE) t = tpu_op_dtype(op, i, TPU_I64);
  tpu_aval_t shape = tpu_aval_make(TPU_U64, 1, &n);
  if (n == 0) {
    outs[0] = tpu_b_full(b, &(tpu_aval_t){t, 1, {0}}, 0);
  } else {
    /* A uniformly random order: sort 64-bit random keys (ties have probability ~n^2/2^65). */
    tpu_rng_t g = tpu_rng_open(b, op);
    outs[0] = tpu_b_convert(b, tpu_rand_argsort(b, tpu_rng_bits(b, &g, TPU_U64, &shape), 0, false), t);
  }
  *nouts = 1;
  return NULL;
}

/* Inclusive prefix sum along the last dim (Hillis-Steele: log2(k) shifted adds). */
static tpu_val_t tpu_rand_cumsum_last(tpu_builder_t* b, tpu_val_t x) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  int last = a.rank - 1;
  tpu_val_t zero = tpu_b_const(b, a.dtype, 0.0);
  for (int64_t s = 1; s < a.dims[last]; s *= 2) {
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    lo[last] = s;
    hi[last] = -s;
    x = tpu_b_binary(b, "stablehlo.add", x, tpu_b_pad(b, x, zero, lo, hi, NULL));
  }
  return x;
}

/* With replacement: inverse CDF. For u in [0, total), the sample is the number of
 * categories whose inclusive cumulative sum is <= u (zero-probability categories
 * are never chosen). probs [r, k] -> [r, s]. */
static tpu_val_t tpu_rand_multinomial_replace(tpu_builder_t* b, tpu_rng_t* g, tpu_val_t probs, int64_t s) {
  tpu_aval_t pa = *tpu_b_aval(b, probs);
  int64_t r = pa.dims[0], k = pa.dims[1];
  tpu_val_t cdf = tpu_rand_cumsum_last(b, probs);
  int64_t lo[2] = {0, k - 1}, hi[2] = {r, k};
  tpu_val_t total = tpu_b_slice(b, cdf, lo, hi, NULL); /* [r, 1] */
  tpu_aval_t ua = tpu_aval_make(pa.dtype, 2, (int64_t[]){r, s});
  tpu_val_t u = tpu_b_binary(b, "stablehlo.multiply", tpu_rng_uniform(b, g, &ua),
                             tpu_b_broadcast_to(b, total, 2, ua.dims));
  int64_t big[3] = {r, s, k};
  tpu_val_t c3 = tpu_b_broadcast_in_dim(b, cdf, 3, big, (int64_t[]){0, 2});
  tpu_val_t u3 = tpu_b_broadcast_in_dim(b, u, 3, big, (int64_t[]){0, 1});
  tpu_val_t below = tpu_b_convert(b, tpu_b_compare(b, "LE", c3, u3), TPU_I64);
  int64_t last = 2;
  tpu_val_t idx = tpu_b_reduce(b, below, tpu_b_const_i(b, TPU_I64, 0), 1, &last, "stablehlo.add");
  /* u rounding up to total would count all k categories. */
  return tpu_b_binary(b, "stablehlo.minimum", idx, tpu_rand_fill(b, idx, (double)(k - 1)));
}

/* Without replacement (and for one sample): PyTorch's exponential race, the s
 * largest p / q with q ~ Exp(1). probs [r, k] -> [r, s]. */
static tpu_val_t tpu_rand_multinomial_race(tpu_builder_t* b, tpu_rng_t* g, tpu_val_t probs, int64_t s) {
  tpu_aval_t pa = *tpu_b_aval(b, probs);
  tpu_val_t q = tpu_b_unary(b, "stablehlo.negate", tpu_b_unary(b, "stablehlo.log", tpu_rng_uniform_open(b, g, pa.dtype, &pa)));
  tpu_val_t idx = tpu_rand_argsort(b, tpu_b_binary(b, "stablehlo.divide", probs, q), 1, true);
  int64_t lo[2] = {0, 0}, hi[2] = {pa.dims[0], s};
  return tpu_b_slice(b, idx, lo, hi, NULL);
}


/* ATen's checks of the distributions probs [r, k], in its order and with its
 * messages (its kernel for several samples with replacement has its own), as
 * device-side checks (check.h): CPU and CUDA refuse them, the samples would be
 * meaningless. */
static void tpu_rand_multinomial_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t probs, bool several_replaced) {
  tpu_val_t negative = tpu_mx_any_outside(b, probs, 0.0, INFINITY); /* NaN is "negative" */
  tpu_val_t infinite = tpu_mx_any(b, tpu_b_compare(b, "EQ", probs, tpu_rand_fill(b, probs, INFINITY)));
  if (several_replaced) {
    tpu_op_check(b, op, negative, TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
                 "invalid multinomial distribution (encountering probability entry < 0)");
    tpu_op_check(b, op, infinite, TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
                 "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
  } else {
    tpu_op_check(b, op, tpu_b_binary(b, "stablehlo.or", negative, infinite), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
                 "probability tensor contains either `inf`, `nan` or element < 0");
  }
  tpu_aval_t pa = *tpu_b_aval(b, probs);
  int64_t last = 1;
  tpu_val_t sums = tpu_b_reduce(b, probs, tpu_b_const(b, pa.dtype, 0.0), 1, &last, "stablehlo.add");
  tpu_val_t empty = tpu_b_reshape(b, tpu_b_compare(b, "LE", sums, tpu_rand_fill(b, sums, 0.0)), 2,
                                  (int64_t[]){pa.dims[0], 1});
  tpu_op_check(b, op, tpu_mx_any(b, empty), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
               "invalid multinomial distribution (sum of probabilities <= 0)");
}

static tpu_status_t* tpu_lower_multinomial(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t pa = tpu_op_aval(op, 0);
  int64_t s = tpu_op_int(op, 1, 0);
  bool replace = tpu_op_bool(op, 2, false);
  if (pa.rank < 1 || pa.rank > 2) return TPU_STATUS(TPU_INVALID_ARGUMENT, "prob_dist must be 1 or 2 dim");
  if (!tpu_dtype_is_float(pa.dtype))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "multinomial only supports floating-point dtypes for input, got: %s",
                      tpu_rand_types[pa.dtype].scalar);
  if (s <= 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "cannot sample n_sample <= 0 samples");
  int64_t k = pa.dims[pa.rank - 1], r = pa.rank == 2 ? pa.dims[0] : 1;
  if (!replace && s > k)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  if (k > (INT64_C(1) << 24)) return TPU_STATUS(TPU_INVALID_ARGUMENT, "number of categories cannot exceed 2^24");
  int64_t odims[2] = {r, s};
  tpu_aval_t out = pa.rank == 2 ? tpu_aval_make(TPU_I64, 2, odims) : tpu_aval_make(TPU_I64, 1, &s);
  if (r * k == 0) {
    /* PyTorch returns the (uninitialised) result unchanged; zeros here. */
    outs[0] = tpu_b_full(b, &out, 0);
  } else {
    tpu_dtype_t ct = tpu_rand_compute(pa.dtype);
    tpu_val_t probs = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), 2, (int64_t[]){r, k});
    tpu_rand_multinomial_check(b, op, probs, replace && s > 1);
    tpu_rng_t g = tpu_rng_open(b, op);
    tpu_val_t idx = replace && s > 1 ? tpu_rand_multinomial_replace(b, &g, probs, s) : tpu_rand_multinomial_race(b, &g, probs, s);
    outs[0] = tpu_b_reshape(b, idx, out.rank, out.dims);
  }
  *nouts = 1;
  return NULL;
}

/* ----------------------------------------------------------------- dropout */

/* native_dropout(input, p, train?) -> (input * mask / (1 - p), mask bool); in eval
 * (train = false) the input and an all-true mask. */
static tpu_status_t* tpu_lower_native_dropout(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  if (max_outs < 2) return TPU_STATUS(TPU_INTERNAL, "native_dropout: room for 2 results needed");
  tpu_aval_t shape = tpu_op_aval(op, 0);
  tpu_aval_t mshape = tpu_rand_retype(&shape, TPU_BOOL);
  double p = tpu_op_float(op, 1, 0.5);
  bool train = tpu_op_bool(op, 2, true);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  *nouts = 2;
  if (tpu_aval_numel(&shape) == 0 || !train) {
    outs[0] = x;
    outs[1] = tpu_b_full(b, &mshape, train ? 0 : 1);
    return NULL;
  }
  if (!tpu_dtype_is_float(shape.dtype))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "result type Float can't be cast to the desired output type %s",
                      tpu_rand_types[shape.dtype].scalar);
  double keep = 1.0 - p;
  if (!(keep >= 0.0 && keep <= 1.0)) return tpu_rand_bad_p(keep);
  tpu_dtype_t ct = tpu_rand_compute(shape.dtype);
  tpu_rng_t g = tpu_rng_open(b, op);
  /* The keep probability in f32 (f64 for f64 input), not in the input's precision. */
  tpu_val_t mask = tpu_rand_coin(b, &g, tpu_b_full(b, &(tpu_aval_t){ct, 0, {0}}, keep), &shape);
  /* x * mask * scale (not a select): NaN inputs stay NaN, as in PyTorch. */
  tpu_val_t xc = tpu_b_convert(b, x, ct);
  tpu_val_t y = tpu_b_binary(b, "stablehlo.multiply", xc, tpu_b_convert(b, mask, ct));
  y = tpu_b_binary(b, "stablehlo.multiply", y, tpu_rand_fill(b, y, keep == 0.0 ? 0.0 : 1.0 / keep));
  outs[0] = tpu_b_convert(b, y, shape.dtype);
  outs[1] = mask;
  return NULL;
}

/* native_dropout_backward(grad, mask, scale) = grad * mask * scale. */
static tpu_status_t* tpu_lower_native_dropout_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                       int* nouts) {
  (void)max_outs;
  int args[2] = {0, 1};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  /* The float `scale` is a wrapped number: integral/bool grads promote to float32. */
  if (!tpu_dtype_is_float(rt) && !tpu_dtype_is_complex(rt)) rt = TPU_F32;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  shape.dtype = ct;
  tpu_val_t y = tpu_b_binary(b, "stablehlo.multiply", tpu_ops_operand(b, op, 0, ct, &shape),
                             tpu_ops_operand(b, op, 1, ct, &shape));
  y = tpu_b_binary(b, "stablehlo.multiply", y, tpu_rand_fill(b, y, tpu_op_float(op, 2, 1.0)));
  return tpu_ops_result1(tpu_b_convert(b, y, rt), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_random[] = {
    {"normal", tpu_lower_normal},
    {"normal_functional", tpu_lower_dist},
    {"uniform", tpu_lower_dist},
    {"exponential", tpu_lower_dist},
    {"geometric", tpu_lower_dist},
    {"log_normal", tpu_lower_dist},
    {"cauchy", tpu_lower_dist},
    {"bernoulli", tpu_lower_bernoulli},
    {"random", tpu_lower_random},
    {"randperm", tpu_lower_randperm},
    {"multinomial", tpu_lower_multinomial},
    {"native_dropout", tpu_lower_native_dropout},
    {"native_dropout_backward", tpu_lower_native_dropout_backward},
    {NULL, NULL},
};
