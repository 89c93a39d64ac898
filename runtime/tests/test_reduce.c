/* The reduce family on the CPU plugin: one test per lowering kind (plain
 * reductions, arg reductions, moments, norms, scans, softmax), PyTorch's dtype
 * rules, NaN and tie semantics and its errors. The op x dtype x dims comparison
 * with PyTorch lives in tests/test_ops_reduce.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/runtime.h"

TEST(reduce_sum_dims_keepdim_and_int_promotion) {
  float a[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  int64_t d1[1] = {-1};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_ints(1, d1), kit_arg_bool(true), kit_arg_none()};
  ASSERT_OK(kit_run1("sum", "dim_IntList", args, 4, &z));
  KIT_CHECK("sum(-1, keepdim)", &z, TPU_F32, 2, (int64_t[]){2, 1}, (float[]){6, 15}, 2, 1e-6);
  /* dim=[] reduces everything; full form (self, dtype) too */
  args[1] = kit_arg_ints(0, NULL);
  args[2] = kit_arg_bool(false);
  ASSERT_OK(kit_run1("sum", "dim_IntList", args, 4, &z));
  KIT_CHECK("sum([])", &z, TPU_F32, 0, NULL, (float[]){21}, 1, 1e-6);
  tpu_arg_t full[2] = {kit_arg_tensor(&x), kit_arg_dtype(TPU_F64)};
  ASSERT_OK(kit_run1("sum", "", full, 2, &z));
  KIT_CHECK("sum(dtype=f64)", &z, TPU_F64, 0, NULL, (float[]){21}, 1, 1e-9);
  kit_release(&x);
  /* int8 and bool sum to int64 */
  int8_t i8[4] = {100, 100, 100, -1};
  ASSERT_OK(kit_tensor(TPU_I8, 1, (int64_t[]){4}, i8, &x));
  full[0] = kit_arg_tensor(&x);
  full[1] = kit_arg_none();
  ASSERT_OK(kit_run1("sum", "", full, 2, &z));
  KIT_CHECK("sum(int8)", &z, TPU_I64, 0, NULL, (float[]){299}, 1, 0);
  ASSERT_OK(kit_run1("prod", "", full, 2, &z));
  KIT_CHECK("prod(int8)", &z, TPU_I64, 0, NULL, (float[]){-1e6}, 1, 0);
  kit_release(&x);
}

TEST(reduce_mean_and_errors) {
  float a[4] = {1, 2, 3, 4};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, a, &x));
  int64_t d0[1] = {0};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_ints(1, d0), kit_arg_bool(false), kit_arg_none()};
  ASSERT_OK(kit_run1("mean", "dim", args, 4, &z));
  KIT_CHECK("mean(0)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){2, 3}, 2, 1e-6);
  kit_release(&x);
  int64_t iv[2] = {1, 2};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, iv, &x));
  tpu_arg_t full[2] = {kit_arg_tensor(&x), kit_arg_none()};
  EXPECT_CODE(kit_run1("mean", "", full, 2, &z), TPU_INVALID_ARGUMENT);
  full[1] = kit_arg_dtype(TPU_F32);
  ASSERT_OK(kit_run1("mean", "", full, 2, &z));
  KIT_CHECK("mean(int, dtype=f32)", &z, TPU_F32, 0, NULL, (float[]){1.5f}, 1, 1e-6);
  kit_release(&x);
  /* empty: sum 0, prod 1, mean NaN; amax over the empty dim is an IndexError */
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 0}, NULL, &x));
  int64_t d1[1] = {1};
  tpu_arg_t e[4] = {kit_arg_tensor(&x), kit_arg_ints(1, d1), kit_arg_bool(false), kit_arg_none()};
  ASSERT_OK(kit_run1("sum", "dim_IntList", e, 4, &z));
  KIT_CHECK("sum(empty)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){0, 0}, 2, 0);
  ASSERT_OK(kit_run1("mean", "dim", e, 4, &z));
  KIT_CHECK("mean(empty)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){NAN, NAN}, 2, 0);
  e[1] = kit_arg_int(1);
  ASSERT_OK(kit_run1("prod", "dim_int", e, 4, &z));
  KIT_CHECK("prod(empty)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){1, 1}, 2, 0);
  e[1] = kit_arg_ints(1, d1);
  EXPECT_CODE(kit_run1("amax", "", e, 3, &z), TPU_OUT_OF_RANGE);
  e[1] = kit_arg_ints(1, d0);
  ASSERT_OK(kit_run1("amax", "", e, 3, &z));
  KIT_CHECK("amax(empty, 0)", &z, TPU_F32, 1, (int64_t[]){0}, NULL, 0, 0);
  tpu_arg_t one[1] = {kit_arg_tensor(&x)};
  EXPECT_CODE(kit_run1("max", "", one, 1, &z), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

TEST(reduce_max_nan_and_first_index) {
  float a[8] = {1, NAN, 3, 3, /* row 1: */ 5, 7, 7, -1};
  tpu_tensor_t x, z, o[4];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 4}, a, &x));
  int64_t d1[1] = {1};
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_ints(1, d1), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("amax", "", args, 3, &z));
  KIT_CHECK("amax", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){NAN, 7}, 2, 0);
  ASSERT_OK(kit_run1("amin", "", args, 3, &z));
  KIT_CHECK("amin", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){NAN, -1}, 2, 0);
  args[1] = kit_arg_int(-1);
  args[2] = kit_arg_bool(true);
  int n = 0;
  ASSERT_OK(kit_run("max", "dim", args, 3, 4, o, &n));
  ASSERT_EQ_INT(n, 2);
  KIT_CHECK("max.dim values", &o[0], TPU_F32, 2, (int64_t[]){2, 1}, (float[]){NAN, 7}, 2, 0);
  KIT_CHECK("max.dim indices", &o[1], TPU_I64, 2, (int64_t[]){2, 1}, (float[]){1, 1}, 2, 0);
  /* argmax over the flattened input (dim None): the first of the maxima */
  float c[5] = {2, 9, 1, 9, 0};
  tpu_tensor_t y;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, c, &y));
  tpu_arg_t am[3] = {kit_arg_tensor(&y), kit_arg_none(), kit_arg_bool(true)};
  ASSERT_OK(kit_run1("argmax", "", am, 3, &z));
  KIT_CHECK("argmax", &z, TPU_I64, 1, (int64_t[]){1}, (float[]){1}, 1, 0);
  ASSERT_OK(kit_run1("argmin", "", am, 3, &z));
  KIT_CHECK("argmin", &z, TPU_I64, 1, (int64_t[]){1}, (float[]){4}, 1, 0);
  tpu_arg_t one[1] = {kit_arg_tensor(&x)};
  ASSERT_OK(kit_run1("max", "", one, 1, &z));
  KIT_CHECK("max()", &z, TPU_F32, 0, NULL, (float[]){NAN}, 1, 0);
  /* max.other is elementwise maximum with promotion and NaN propagation */
  float c2[5] = {3, NAN, 0, 9, NAN};
  tpu_tensor_t y2;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, c2, &y2));
  tpu_arg_t mo[2] = {kit_arg_tensor(&y), kit_arg_tensor(&y2)};
  ASSERT_OK(kit_run1("max", "other", mo, 2, &z));
  KIT_CHECK("max.other", &z, TPU_F32, 1, (int64_t[]){5}, (float[]){3, NAN, 1, 9, NAN}, 5, 0);
  mo[0] = kit_arg_tensor(&y2);
  mo[1] = kit_arg_tensor(&y);
  ASSERT_OK(kit_run1("min", "other", mo, 2, &z));
  KIT_CHECK("min.other", &z, TPU_F32, 1, (int64_t[]){5}, (float[]){2, NAN, 0, 9, NAN}, 5, 0);
  kit_release(&y2);
  kit_release(&y);
  kit_release(&x);
}

/* Unsigned dtypes: the identities of max/min are 0 and the all-ones pattern, and
 * comparisons are unsigned, so the top half of uint64's range is not negative. */
TEST(reduce_unsigned_extremes) {
  uint64_t a[4] = {5, UINT64_MAX - 1, 0, UINT64_C(1) << 63};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_U64, 1, (int64_t[]){4}, a, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_ints(0, NULL), kit_arg_bool(false)};
  uint64_t got = 0;
  ASSERT_OK(kit_run1("amax", "", args, 3, &z));
  ASSERT_OK(tpu_tensor_download(&z, &got, sizeof(got)));
  ASSERT(z.dtype == TPU_U64 && got == UINT64_MAX - 1);
  kit_release(&z);
  ASSERT_OK(kit_run1("amin", "", args, 3, &z));
  ASSERT_OK(tpu_tensor_download(&z, &got, sizeof(got)));
  ASSERT(got == 0);
  kit_release(&z);
  tpu_arg_t am[3] = {kit_arg_tensor(&x), kit_arg_none(), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("argmax", "", am, 3, &z));
  KIT_CHECK("argmax(u64)", &z, TPU_I64, 0, NULL, (float[]){1}, 1, 0);
  ASSERT_OK(kit_run1("argmin", "", am, 3, &z));
  KIT_CHECK("argmin(u64)", &z, TPU_I64, 0, NULL, (float[]){2}, 1, 0);
  /* a scalar past INT64_MAX (its bit pattern in an int64) fills a uint64 tensor */
  tpu_arg_t fill[2] = {kit_arg_tensor(&x), kit_arg_scalar_i((int64_t)UINT64_MAX)};
  ASSERT_OK(kit_run1("fill", "Scalar", fill, 2, &z));
  uint64_t f[4] = {0};
  ASSERT_OK(tpu_tensor_download(&z, f, sizeof(f)));
  ASSERT(f[0] == UINT64_MAX && f[3] == UINT64_MAX);
  kit_release(&z);
  kit_release(&x);
  uint32_t b32[3] = {7, UINT32_MAX, 0};
  ASSERT_OK(kit_tensor(TPU_U32, 1, (int64_t[]){3}, b32, &x));
  args[0] = kit_arg_tensor(&x);
  uint32_t got32 = 0;
  ASSERT_OK(kit_run1("amax", "", args, 3, &z));
  ASSERT_OK(tpu_tensor_download(&z, &got32, sizeof(got32)));
  ASSERT(z.dtype == TPU_U32 && got32 == UINT32_MAX);
  kit_release(&z);
  kit_release(&x);
}

TEST(reduce_var_std_correction_is_runtime) {
  float a[6] = {1, 2, 3, 4, 6, 8};
  tpu_tensor_t x, z, o[4];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  int64_t d1[1] = {1};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_ints(1, d1), kit_arg_none(), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("var", "correction", args, 4, &z));
  KIT_CHECK("var", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){1, 4}, 2, 1e-6);
  int64_t misses = tpu_metric_get(TPU_METRIC_CACHE_MISSES);
  args[2] = kit_arg_scalar_i(0);
  ASSERT_OK(kit_run1("var", "correction", args, 4, &z));
  KIT_CHECK("var(c=0)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){2.f / 3, 8.f / 3}, 2, 1e-6);
  args[2] = kit_arg_scalar_i(2);
  ASSERT_OK(kit_run1("var", "correction", args, 4, &z));
  KIT_CHECK("var(c=2)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){2, 8}, 2, 1e-6);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CACHE_MISSES) - misses, 1);
  args[2] = kit_arg_scalar_i(5); /* dof <= 0: x / 0 */
  ASSERT_OK(kit_run1("std", "correction", args, 4, &z));
  KIT_CHECK("std(c=5)", &z, TPU_F32, 1, (int64_t[]){2}, (float[]){INFINITY, INFINITY}, 2, 0);
  args[2] = kit_arg_none();
  int n = 0;
  ASSERT_OK(kit_run("std_mean", "correction", args, 4, 4, o, &n));
  ASSERT_EQ_INT(n, 2);
  KIT_CHECK("std_mean std", &o[0], TPU_F32, 1, (int64_t[]){2}, (float[]){1, 2}, 2, 1e-6);
  KIT_CHECK("std_mean mean", &o[1], TPU_F32, 1, (int64_t[]){2}, (float[]){2, 6}, 2, 1e-6);
  kit_release(&x);
}

TEST(reduce_norm_ord_is_runtime) {
  float a[4] = {3, -4, 0, 0};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, a, &x));
  const double ords[] = {2, 1, INFINITY, -INFINITY, 0, 3, -1};
  const float want[] = {5, 7, 4, 0, 2, 4.4979414f, 0};
  int64_t misses = tpu_metric_get(TPU_METRIC_CACHE_MISSES);
  for (size_t i = 0; i < sizeof(ords) / sizeof(ords[0]); ++i) {
    tpu_arg_t args[5] = {kit_arg_tensor(&x), kit_arg_scalar_f(ords[i]), kit_arg_none(), kit_arg_bool(false), kit_arg_none()};
    ASSERT_OK(kit_run1("linalg_vector_norm", "", args, 5, &z));
    KIT_CHECK("vector_norm", &z, TPU_F32, 0, NULL, &want[i], 1, 1e-5);
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CACHE_MISSES) - misses, 1);
  kit_release(&x);
  int64_t iv[2] = {3, 4};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, iv, &x));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_scalar_f(2)};
  EXPECT_CODE(kit_run1("norm", "Scalar", args, 2, &z), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

TEST(reduce_any_all_count_logsumexp) {
  uint8_t u[4] = {0, 2, 1, 1};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_U8, 2, (int64_t[]){2, 2}, u, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_int(1), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("all", "dim", args, 3, &z));
  KIT_CHECK("all(uint8)", &z, TPU_U8, 1, (int64_t[]){2}, (float[]){0, 1}, 2, 0);
  ASSERT_OK(kit_run1("any", "dim", args, 3, &z));
  KIT_CHECK("any(uint8)", &z, TPU_U8, 1, (int64_t[]){2}, (float[]){1, 1}, 2, 0);
  /* any.dims with [] reduces nothing */
  args[1] = kit_arg_ints(0, NULL);
  ASSERT_OK(kit_run1("any", "dims", args, 3, &z));
  KIT_CHECK("any([])", &z, TPU_U8, 2, (int64_t[]){2, 2}, (float[]){0, 1, 1, 1}, 4, 0);
  tpu_arg_t cn[2] = {kit_arg_tensor(&x), kit_arg_none()};
  ASSERT_OK(kit_run1("count_nonzero", "", cn, 2, &z));
  KIT_CHECK("count_nonzero", &z, TPU_I64, 0, NULL, (float[]){3}, 1, 0);
  kit_release(&x);
  float a[3] = {-INFINITY, -INFINITY, 0};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, a, &x));
  int64_t d0[1] = {0};
  tpu_arg_t ls[3] = {kit_arg_tensor(&x), kit_arg_ints(1, d0), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("logsumexp", "", ls, 3, &z));
  KIT_CHECK("logsumexp", &z, TPU_F32, 0, NULL, (float[]){0}, 1, 1e-6);
  kit_release(&x);
}

TEST(reduce_scans) {
  int32_t iv[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor_t x, z, o[4];
  ASSERT_OK(kit_tensor(TPU_I32, 2, (int64_t[]){2, 3}, iv, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_int(1), kit_arg_none()};
  ASSERT_OK(kit_run1("cumsum", "", args, 3, &z));
  KIT_CHECK("cumsum", &z, TPU_I64, 2, (int64_t[]){2, 3}, (float[]){1, 3, 6, 4, 9, 15}, 6, 0);
  args[1] = kit_arg_int(0);
  ASSERT_OK(kit_run1("cumprod", "", args, 3, &z));
  KIT_CHECK("cumprod", &z, TPU_I64, 2, (int64_t[]){2, 3}, (float[]){1, 2, 3, 4, 10, 18}, 6, 0);
  kit_release(&x);
  /* cummax: NaN sticks (index of the latest NaN), ties move to the latest index */
  float a[7] = {1, 1, NAN, 2, NAN, 3, 0};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){7}, a, &x));
  tpu_arg_t cm[2] = {kit_arg_tensor(&x), kit_arg_int(0)};
  int n = 0;
  ASSERT_OK(kit_run("cummax", "", cm, 2, 4, o, &n));
  ASSERT_EQ_INT(n, 2);
  KIT_CHECK("cummax values", &o[0], TPU_F32, 1, (int64_t[]){7}, (float[]){1, 1, NAN, NAN, NAN, NAN, NAN}, 7, 0);
  KIT_CHECK("cummax indices", &o[1], TPU_I64, 1, (int64_t[]){7}, (float[]){0, 1, 2, 2, 4, 4, 4}, 7, 0);
  kit_release(&x);
  float l[5] = {0, 0, 0, 0, 0};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, l, &x));
  cm[0] = kit_arg_tensor(&x);
  ASSERT_OK(kit_run1("logcumsumexp", "", cm, 2, &z));
  float want[5];
  for (int i = 0; i < 5; ++i) want[i] = logf((float)(i + 1));
  KIT_CHECK("logcumsumexp", &z, TPU_F32, 1, (int64_t[]){5}, want, 5, 1e-6);
  kit_release(&x);
}

TEST(reduce_softmax_and_backward) {
  float a[6] = {1, 2, 3, 0, 0, -INFINITY};
  tpu_tensor_t x, y, g, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_int(-1), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("_softmax", "", args, 3, &y));
  float e = expf(1), s = 1 + e + e * e;
  float want[6] = {1 / s, e / s, e * e / s, 0.5f, 0.5f, 0};
  float got[6];
  ASSERT_OK(kit_read_f32(&y, got, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
  /* d softmax with grad = one-hot(0) per row: y0 * (δ − y) */
  float go[6] = {1, 0, 0, 1, 0, 0};
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, go, &g));
  tpu_arg_t bw[4] = {kit_arg_tensor(&g), kit_arg_tensor(&y), kit_arg_int(1), kit_arg_dtype(TPU_F32)};
  ASSERT_OK(kit_run1("_softmax_backward_data", "", bw, 4, &z));
  float wb[6];
  for (int i = 0; i < 6; ++i) wb[i] = want[(i / 3) * 3] * ((i % 3 == 0) - want[i]);
  KIT_CHECK("softmax bwd", &z, TPU_F32, 2, (int64_t[]){2, 3}, wb, 6, 1e-6);
  ASSERT_OK(kit_run1("_log_softmax", "", args, 3, &z));
  float wl[6];
  for (int i = 0; i < 6; ++i) wl[i] = logf(want[i]);
  KIT_CHECK("log_softmax", &z, TPU_F32, 2, (int64_t[]){2, 3}, wl, 6, 1e-5);
  kit_release(&g);
  kit_release(&y);
  kit_release(&x);
}
