/* The elementwise family on the CPU plugin: a representative op from each table
 * row kind, PyTorch's promotion and rounding rules, special values and errors.
 * The exhaustive op x dtype comparison with PyTorch lives in
 * tests/test_ops_elementwise.py. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/lowering.h"

static tpu_arg_t ew_arg_str(const char* s) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_STRING;
  a.u.str = s;
  return a;
}

static tpu_arg_t ew_arg_scalar_b(bool v) {
  tpu_arg_t a = kit_arg_scalar_i(v);
  a.u.scalar.dtype = TPU_BOOL;
  return a;
}

/* Runs `name` on the given args; checks the result's dtype and values. */
static void ew_expect(const char* name, const char* overload, const tpu_arg_t* args, int nargs, tpu_dtype_t dtype,
                      const float* want, int n, double tol) {
  tpu_tensor_t z;
  if (!tpu_test_check_ok(kit_run1(name, overload, args, nargs, &z), name, __FILE__, __LINE__)) return;
  kit_check(__FILE__, __LINE__, name, &z, dtype, -1, NULL, want, n, tol);
}

TEST(ew_table_has_no_duplicates) { EXPECT_EQ_INT(tpu_lowering_table_duplicates(), 0); }

TEST(ew_unary_float_functions) {
  float a[6] = {-2.5f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f};
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){6}, a, &x));
  tpu_arg_t args[1] = {kit_arg_tensor(&x)};
  struct { const char* name; double (*ref)(double); } cases[] = {
      {"exp", exp}, {"exp2", exp2}, {"expm1", expm1}, {"sin", sin}, {"cos", cos}, {"tan", tan}, {"atan", atan},
      {"sinh", sinh}, {"cosh", cosh}, {"tanh", tanh}, {"asinh", asinh}, {"erf", erf}, {"erfc", erfc},
      {"floor", floor}, {"ceil", ceil}, {"trunc", trunc}, {"round", nearbyint},
  };
  for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); ++c) {
    float want[6];
    for (int i = 0; i < 6; ++i) want[i] = (float)cases[c].ref(a[i]);
    ew_expect(cases[c].name, "", args, 1, TPU_F32, want, 6, 1e-5);
  }
  float in01[3] = {0.1f, 0.5f, 0.9f};
  tpu_tensor_t p;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, in01, &p));
  args[0] = kit_arg_tensor(&p);
  struct { const char* name; double (*ref)(double); } unit[] = {
      {"asin", asin}, {"acos", acos}, {"atanh", atanh}, {"log", log}, {"log2", log2}, {"log10", log10},
      {"log1p", log1p}, {"sqrt", sqrt},
  };
  for (size_t c = 0; c < sizeof(unit) / sizeof(unit[0]); ++c) {
    float want[3];
    for (int i = 0; i < 3; ++i) want[i] = (float)unit[c].ref(in01[i]);
    ew_expect(unit[c].name, "", args, 1, TPU_F32, want, 3, 1e-5);
  }
  float want_erfinv[3] = {0.088855990f, 0.476936276f, 1.163087154f};
  ew_expect("erfinv", "", args, 1, TPU_F32, want_erfinv, 3, 1e-5);
  kit_release(&p);
  kit_release(&x);
}

TEST(ew_int_inputs_of_float_functions_give_float32) {
  int64_t a[3] = {0, 1, 4};
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){3}, a, &x));
  tpu_arg_t args[1] = {kit_arg_tensor(&x)};
  float want_sqrt[3] = {0, 1, 2}, want_sig[3] = {0.5f, 0.7310586f, 0.9820138f};
  ew_expect("sqrt", "", args, 1, TPU_F32, want_sqrt, 3, 1e-6);
  ew_expect("sigmoid", "", args, 1, TPU_F32, want_sig, 3, 1e-6);
  /* abs/neg/floor keep the integer dtype */
  float want_neg[3] = {0, -1, -4};
  ew_expect("neg", "", args, 1, TPU_I64, want_neg, 3, 0);
  ew_expect("floor", "", args, 1, TPU_I64, (float[]){0, 1, 4}, 3, 0);
  kit_release(&x);
}

TEST(ew_special_values) {
  float a[5] = {NAN, INFINITY, -INFINITY, -0.0f, 2.0f};
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, a, &x));
  tpu_arg_t args[2] = {kit_arg_tensor(&x)};
  ew_expect("isnan", "", args, 1, TPU_BOOL, (float[]){1, 0, 0, 0, 0}, 5, 0);
  ew_expect("isinf", "", args, 1, TPU_BOOL, (float[]){0, 1, 1, 0, 0}, 5, 0);
  ew_expect("isfinite", "", args, 1, TPU_BOOL, (float[]){0, 0, 0, 1, 1}, 5, 0);
  ew_expect("signbit", "", args, 1, TPU_BOOL, (float[]){0, 0, 1, 1, 0}, 5, 0);
  /* ATen's CPU sign: NaN -> 0, -0.0 -> 0 */
  ew_expect("sign", "", args, 1, TPU_F32, (float[]){0, 1, -1, 0, 1}, 5, 0);
  /* relu and clamp propagate NaN */
  ew_expect("relu", "", args, 1, TPU_F32, (float[]){NAN, INFINITY, 0, 0, 2}, 5, 0);
  args[1] = kit_arg_scalar_f(1.0);
  ew_expect("clamp_max", "", args, 2, TPU_F32, (float[]){NAN, 1, -INFINITY, -0.0f, 1}, 5, 0);
  ew_expect("nan_to_num", "", args, 1, TPU_F32, (float[]){0, FLT_MAX, -FLT_MAX, 0, 2}, 5, 0);
  kit_release(&x);
}

TEST(ew_add_sub_promotion_alpha_and_bool) {
  int32_t ia[3] = {1, -2, 3};
  tpu_tensor_t xi;
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){3}, ia, &xi));
  /* int32 tensor + Python int stays int32; + Python float becomes float32 */
  tpu_arg_t args[3] = {kit_arg_tensor(&xi), kit_arg_scalar_i(5), kit_arg_scalar_i(2)};
  ew_expect("add", "Scalar", args, 3, TPU_I32, (float[]){11, 8, 13}, 3, 0);
  args[1] = kit_arg_scalar_f(0.5);
  ew_expect("add", "Scalar", args, 2, TPU_F32, (float[]){1.5f, -1.5f, 3.5f}, 3, 0);
  ew_expect("rsub", "Scalar", args, 2, TPU_F32, (float[]){-0.5f, 2.5f, -2.5f}, 3, 0);
  /* a float alpha with integral inputs is an error */
  args[1] = kit_arg_scalar_i(1);
  args[2] = kit_arg_scalar_f(0.5);
  tpu_tensor_t z;
  EXPECT_CODE(kit_run1("add", "Scalar", args, 3, &z), TPU_INVALID_ARGUMENT);
  /* bools: add is or, sub raises */
  bool ba[2] = {true, false}, bb[2] = {false, false};
  tpu_tensor_t xb, yb;
  ASSERT_OK(kit_tensor(TPU_BOOL, 1, (int64_t[]){2}, ba, &xb));
  ASSERT_OK(kit_tensor(TPU_BOOL, 1, (int64_t[]){2}, bb, &yb));
  tpu_arg_t bargs[2] = {kit_arg_tensor(&yb), kit_arg_tensor(&xb)};
  ew_expect("add", "Tensor", bargs, 2, TPU_BOOL, (float[]){1, 0}, 2, 0);
  ew_expect("mul", "Tensor", bargs, 2, TPU_BOOL, (float[]){0, 0}, 2, 0);
  EXPECT_CODE(kit_run1("sub", "Tensor", bargs, 2, &z), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(kit_run1("neg", "", bargs, 1, &z), TPU_INVALID_ARGUMENT);
  /* a bool alpha needs a bool result */
  tpu_arg_t aargs[3] = {kit_arg_tensor(&xi), kit_arg_tensor(&xi), ew_arg_scalar_b(true)};
  EXPECT_CODE(kit_run1("add", "Tensor", aargs, 3, &z), TPU_INVALID_ARGUMENT);
  kit_release(&xb);
  kit_release(&yb);
  kit_release(&xi);
}

TEST(ew_division_and_remainder_rounding) {
  int64_t a[6] = {7, -7, 7, -7, 5, 0}, d[6] = {2, 2, -2, -2, 0, 3};
  tpu_tensor_t x, y;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){6}, a, &x));
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){6}, d, &y));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_tensor(&y), kit_arg_none()};
  /* true division of ints gives float (5/0 = inf) */
  ew_expect("div", "Tensor", args, 2, TPU_F32, (float[]){3.5f, -3.5f, -3.5f, 3.5f, INFINITY, 0}, 6, 1e-6);
  /* integer division by zero must not abort: compare the other lanes only */
  args[2] = ew_arg_str("floor");
  tpu_tensor_t z;
  float got[6];
  ASSERT_OK(kit_run1("div", "Tensor_mode", args, 3, &z));
  EXPECT_EQ_INT(z.dtype, TPU_I64);
  ASSERT_OK(kit_read_f32(&z, got, 6));
  float want_floor[6] = {3, -4, -4, 3, 0, 0};
  for (int i = 0; i < 6; ++i)
    if (i != 4) EXPECT_NEAR(got[i], want_floor[i], 0);
  kit_release(&z);
  args[2] = ew_arg_str("trunc");
  ASSERT_OK(kit_run1("div", "Tensor_mode", args, 3, &z));
  ASSERT_OK(kit_read_f32(&z, got, 6));
  float want_trunc[6] = {3, -3, -3, 3, 0, 0};
  for (int i = 0; i < 6; ++i)
    if (i != 4) EXPECT_NEAR(got[i], want_trunc[i], 0);
  kit_release(&z);
  ASSERT_OK(kit_run1("remainder", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, got, 6));
  float want_rem[6] = {1, 1, -1, -1, 0, 0};
  for (int i = 0; i < 6; ++i)
    if (i != 4) EXPECT_NEAR(got[i], want_rem[i], 0);
  kit_release(&z);
  args[2] = ew_arg_str("round");
  EXPECT_CODE(kit_run1("div", "Tensor_mode", args, 3, &z), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  kit_release(&y);

  /* floats: Python floor division and remainder, fmod keeps the dividend's sign */
  float fa[4] = {7.5f, -7.5f, 7.5f, -7.5f}, fd[4] = {2, 2, -2, -2};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, fa, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, fd, &y));
  tpu_arg_t fargs[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ew_expect("floor_divide", "", fargs, 2, TPU_F32, (float[]){3, -4, -4, 3}, 4, 0);
  ew_expect("remainder", "Tensor", fargs, 2, TPU_F32, (float[]){1.5f, 0.5f, -0.5f, -1.5f}, 4, 0);
  ew_expect("fmod", "Tensor", fargs, 2, TPU_F32, (float[]){1.5f, -1.5f, 1.5f, -1.5f}, 4, 0);
  kit_release(&x);
  kit_release(&y);
}

TEST(ew_pow_integer_negative_exponents) {
  int64_t base[5] = {2, 1, -1, -1, 3}, ex[5] = {-1, -3, -3, -2, 3};
  tpu_tensor_t x, y;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){5}, base, &x));
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){5}, ex, &y));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ew_expect("pow", "Tensor_Tensor", args, 2, TPU_I64, (float[]){0, 1, -1, 1, 27}, 5, 0);
  /* a float Scalar exponent promotes to float32 */
  args[1] = kit_arg_scalar_f(0.5);
  ew_expect("pow", "Tensor_Scalar", args, 2, TPU_F32, (float[]){1.4142135f, 1, NAN, NAN, 1.7320508f}, 5, 1e-6);
  kit_release(&x);
  kit_release(&y);
}

TEST(ew_comparisons_logical_bitwise) {
  float a[4] = {1, NAN, 3, -1};
  int32_t ia[4] = {6, -8, 255, 1};
  tpu_tensor_t x, xi;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, a, &x));
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){4}, ia, &xi));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_scalar_i(1)};
  ew_expect("eq", "Scalar", args, 2, TPU_BOOL, (float[]){1, 0, 0, 0}, 4, 0);
  ew_expect("ne", "Scalar", args, 2, TPU_BOOL, (float[]){0, 1, 1, 1}, 4, 0);
  ew_expect("ge", "Scalar", args, 2, TPU_BOOL, (float[]){1, 0, 1, 0}, 4, 0);
  ew_expect("logical_and", "", args, 2, TPU_BOOL, (float[]){1, 1, 1, 1}, 4, 0);
  /* NaN propagates from either operand of maximum / minimum; fmax ignores it */
  float ones[4] = {1, 1, 1, 1};
  tpu_tensor_t o;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, ones, &o));
  tpu_arg_t mm[2] = {kit_arg_tensor(&o), kit_arg_tensor(&x)};
  ew_expect("maximum", "", mm, 2, TPU_F32, (float[]){1, NAN, 3, 1}, 4, 0);
  ew_expect("minimum", "", mm, 2, TPU_F32, (float[]){1, NAN, 1, -1}, 4, 0);
  ew_expect("fmax", "", mm, 2, TPU_F32, (float[]){1, 1, 3, 1}, 4, 0);
  kit_release(&o);
  tpu_tensor_t z;
  EXPECT_CODE(kit_run1("bitwise_and", "Scalar", args, 2, &z), TPU_UNIMPLEMENTED);
  args[0] = kit_arg_tensor(&xi);
  args[1] = kit_arg_scalar_i(3);
  ew_expect("bitwise_and", "Scalar", args, 2, TPU_I32, (float[]){2, 0, 3, 1}, 4, 0);
  ew_expect("bitwise_xor", "Scalar", args, 2, TPU_I32, (float[]){5, -5, 252, 2}, 4, 0);
  ew_expect("__lshift__", "Scalar", args, 2, TPU_I32, (float[]){48, -64, 2040, 8}, 4, 0);
  ew_expect("__rshift__", "Scalar", args, 2, TPU_I32, (float[]){0, -1, 31, 0}, 4, 0);
  /* out-of-range shift amounts: left gives 0, right shifts by the maximum */
  args[1] = kit_arg_scalar_i(40);
  ew_expect("bitwise_left_shift", "Tensor_Scalar", args, 2, TPU_I32, (float[]){0, 0, 0, 0}, 4, 0);
  ew_expect("bitwise_right_shift", "Tensor_Scalar", args, 2, TPU_I32, (float[]){0, -1, 0, 0}, 4, 0);
  kit_release(&x);
  kit_release(&xi);
}

TEST(ew_where_clamp_lerp) {
  bool c[4] = {true, false, true, false};
  float a[4] = {1, 2, 3, 4}, e[4] = {10, 20, 30, 40};
  tpu_tensor_t cond, x, y;
  ASSERT_OK(kit_tensor(TPU_BOOL, 1, (int64_t[]){4}, c, &cond));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, e, &y));
  tpu_arg_t args[3] = {kit_arg_tensor(&cond), kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ew_expect("where", "self", args, 3, TPU_F32, (float[]){1, 20, 3, 40}, 4, 0);
  /* a non-bool condition is an error */
  args[0] = kit_arg_tensor(&x);
  tpu_tensor_t z;
  EXPECT_CODE(kit_run1("where", "self", args, 3, &z), TPU_INVALID_ARGUMENT);
  /* clamp with a Tensor min and no max; with neither bound it fails */
  args[1] = kit_arg_tensor(&y);
  args[2] = kit_arg_none();
  ew_expect("clamp", "Tensor", args, 3, TPU_F32, (float[]){10, 20, 30, 40}, 4, 0);
  args[1] = kit_arg_none();
  EXPECT_CODE(kit_run1("clamp", "", args, 3, &z), TPU_INVALID_ARGUMENT);
  args[1] = kit_arg_tensor(&y);
  args[2] = kit_arg_scalar_f(0.25);
  ew_expect("lerp", "Scalar", args, 3, TPU_F32, (float[]){3.25f, 6.5f, 9.75f, 13}, 4, 1e-6);
  kit_release(&cond);
  kit_release(&x);
  kit_release(&y);
}

TEST(ew_activations_and_backward) {
  float a[4] = {-2, -0.5f, 0.5f, 3};
  uint16_t hb[4];
  tpu_tensor_t x, g, xb;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, a, &x));
  float ones[4] = {1, 1, 1, 1};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, ones, &g));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), ew_arg_str("none")};
  float want[4];
  for (int i = 0; i < 4; ++i) want[i] = (float)(0.5 * a[i] * (1 + erf(a[i] / sqrt(2.0))));
  ew_expect("gelu", "", args, 2, TPU_F32, want, 4, 1e-6);
  args[1] = ew_arg_str("tanh");
  for (int i = 0; i < 4; ++i)
    want[i] = (float)(0.5 * a[i] * (1 + tanh(sqrt(2 / 3.14159265358979323846) * (a[i] + 0.044715 * a[i] * a[i] * a[i]))));
  ew_expect("gelu", "", args, 2, TPU_F32, want, 4, 1e-6);
  args[1] = ew_arg_str("exact");
  tpu_tensor_t z;
  EXPECT_CODE(kit_run1("gelu", "", args, 2, &z), TPU_INVALID_ARGUMENT);
  for (int i = 0; i < 4; ++i) want[i] = a[i] > 0 ? a[i] : expm1f(a[i]);
  ew_expect("elu", "", args, 1, TPU_F32, want, 4, 1e-6);
  /* silu'(x) = s (1 + x (1 - s)) */
  tpu_arg_t gargs[2] = {kit_arg_tensor(&g), kit_arg_tensor(&x)};
  for (int i = 0; i < 4; ++i) {
    double s = 1 / (1 + exp(-a[i]));
    want[i] = (float)(s * (1 + a[i] * (1 - s)));
  }
  ew_expect("silu_backward", "", gargs, 2, TPU_F32, want, 4, 1e-6);
  /* threshold_backward(g, x, 0) is relu's backward */
  tpu_arg_t targs[3] = {kit_arg_tensor(&g), kit_arg_tensor(&x), kit_arg_scalar_i(0)};
  ew_expect("threshold_backward", "", targs, 3, TPU_F32, (float[]){0, 0, 1, 1}, 4, 0);
  /* bf16 in, bf16 out, computed in f32 */
  for (int i = 0; i < 4; ++i) {
    uint32_t bits;
    memcpy(&bits, &a[i], 4);
    hb[i] = (uint16_t)(bits >> 16);
  }
  ASSERT_OK(kit_tensor(TPU_BF16, 1, (int64_t[]){4}, hb, &xb));
  args[0] = kit_arg_tensor(&xb);
  for (int i = 0; i < 4; ++i) want[i] = (float)(a[i] / (1 + exp(-a[i])));
  ew_expect("silu", "", args, 1, TPU_BF16, want, 4, 1e-2);
  /* float-only activations reject integers with PyTorch's NotImplementedError */
  int64_t ia[2] = {1, 2};
  tpu_tensor_t xi;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, ia, &xi));
  args[0] = kit_arg_tensor(&xi);
  EXPECT_CODE(kit_run1("silu", "", args, 1, &z), TPU_UNIMPLEMENTED);
  kit_release(&xi);
  kit_release(&xb);
  kit_release(&g);
  kit_release(&x);
}

TEST(ew_multi_result_ops) {
  float a[4] = {-1, 2, 0.5f, -3};
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, a, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x)};
  tpu_result_t r[2];
  int n = 0;
  ASSERT_OK(tpu_op_run("log_sigmoid_forward", "", 0, args, 1, 2, r, &n));
  ASSERT_EQ_INT(n, 2);
  tpu_tensor_t out = {.storage = r[0].storage, .dtype = r[0].dtype, .rank = 2, .sizes = {2, 2}, .strides = {2, 1}};
  float got[4];
  ASSERT_OK(kit_read_f32(&out, got, 4));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], -log1p(exp(-a[i])), 1e-6);
  tpu_storage_release(r[0].storage);
  tpu_storage_release(r[1].storage);
  /* glu along dim 0: x[0] * sigmoid(x[1]); an odd dim is an error */
  args[1] = kit_arg_int(0);
  float want[2];
  for (int j = 0; j < 2; ++j) want[j] = (float)(a[j] / (1 + exp(-a[2 + j])));
  ew_expect("glu", "", args, 2, TPU_F32, want, 2, 1e-6);
  tpu_tensor_t row = kit_view(&x, 1, (int64_t[]){3}, (int64_t[]){1}, 0), z;
  args[0] = kit_arg_tensor(&row);
  args[1] = kit_arg_int(-1);
  EXPECT_CODE(kit_run1("glu", "", args, 2, &z), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}
