/* Accurate float32 reductions (reduce.h) on the CPU plugin, without torch: sums
 * that a plain f32 reduce gets wrong, var/std and layer-norm statistics of
 * large-mean data against double, and special values. The comparison of every
 * op's error with PyTorch's CPU kernels lives in tests/test_numerics.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kit.h"
#include "test.h"

/* Deterministic data: 1000 + a bounded wiggle (exactly representable floats). */
static void large_mean_rows(float* x, int rows, int n) {
  for (int i = 0; i < rows * n; ++i) x[i] = 1000.0f + (float)sin(i * 0.37) * 3.0f;
}

TEST(numerics_sum_cancellation_exact) {
  /* 1e8, 56 ones, -1e8 (each big term padded by zeros to its own run of 4, the
   * plain pre-summed unit at this size: reduce.h): the exact sum is 56. A plain
   * f32 reduce adds ones to the running 1e8 in some lane and loses them (ulp 8).
   * Row and column forms, and cumsum. */
  enum { N = 64 };
  float a[N] = {1e8f, 0, 0, 0};
  for (int i = 4; i < N - 4; ++i) a[i] = 1.0f;
  a[N - 4] = -1e8f;
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){1, N}, a, &x));
  int64_t d1[1] = {1};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_ints(1, d1), kit_arg_bool(false), kit_arg_none()};
  ASSERT_OK(kit_run1("sum", "dim_IntList", args, 4, &z));
  KIT_CHECK("sum row", &z, TPU_F32, 1, (int64_t[]){1}, (float[]){N - 8}, 1, 0);
  kit_release(&x);
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){N, 1}, a, &x));
  int64_t d0[1] = {0};
  args[0] = kit_arg_tensor(&x);
  args[1] = kit_arg_ints(1, d0);
  ASSERT_OK(kit_run1("sum", "dim_IntList", args, 4, &z));
  KIT_CHECK("sum column", &z, TPU_F32, 1, (int64_t[]){1}, (float[]){N - 8}, 1, 0);
  tpu_arg_t cargs[3] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_none()};
  ASSERT_OK(kit_run1("cumsum", "", cargs, 3, &z));
  float c[N];
  ASSERT_OK(kit_read_f32(&z, c, N));
  EXPECT_NEAR(c[N - 1], N - 8, 0);
  kit_release(&z);
  kit_release(&x);
}

TEST(numerics_var_std_large_mean_as_double) {
  /* var/std of 1000 + wiggle: the double two-pass result rounded to f32. */
  enum { R = 4, N = 1000 };
  float* x = malloc(sizeof(float) * R * N);
  large_mean_rows(x, R, N);
  float want_var[R], want_std[R];
  for (int r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < N; ++i) m += x[r * N + i];
    m /= N;
    for (int i = 0; i < N; ++i) v += (x[r * N + i] - m) * (x[r * N + i] - m);
    want_var[r] = (float)(v / (N - 1));
    want_std[r] = (float)sqrt(v / (N - 1));
  }
  tpu_tensor_t tx, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, x, &tx));
  int64_t d1[1] = {1};
  tpu_arg_t args[4] = {kit_arg_tensor(&tx), kit_arg_ints(1, d1), kit_arg_none(), kit_arg_bool(false)};
  /* within 1 ulp (2^-23 relative) of the correctly rounded value */
  ASSERT_OK(kit_run1("var", "correction", args, 4, &z));
  KIT_CHECK("var", &z, TPU_F32, 1, (int64_t[]){R}, want_var, R, 1.2e-7);
  ASSERT_OK(kit_run1("std", "correction", args, 4, &z));
  KIT_CHECK("std", &z, TPU_F32, 1, (int64_t[]){R}, want_std, R, 1.2e-7);
  kit_release(&tx);
  free(x);
}

TEST(numerics_layer_norm_large_mean_stats) {
  /* The saved mean is the double mean rounded once; the output is within 1e-5
   * of the double layer norm (a plain f32 mean of 1000-sized values is ~1e-4 off). */
  enum { R = 4, N = 768 };
  float* x = malloc(sizeof(float) * R * N);
  large_mean_rows(x, R, N);
  tpu_tensor_t tx, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, x, &tx));
  int64_t ns[1] = {N};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), kit_arg_ints(1, ns), kit_arg_none(), kit_arg_none(), kit_arg_float(1e-5)};
  int n = 0;
  ASSERT_OK(kit_run("native_layer_norm", "", args, 5, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 3);
  float* y = malloc(sizeof(float) * R * N);
  float mean[R];
  ASSERT_OK(kit_read_f32(&out[0], y, R * N));
  ASSERT_OK(kit_read_f32(&out[1], mean, R));
  double worst = 0;
  for (int r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < N; ++i) m += x[r * N + i];
    m /= N;
    for (int i = 0; i < N; ++i) v += (x[r * N + i] - m) * (x[r * N + i] - m);
    double rs = 1.0 / sqrt(v / N + 1e-5);
    EXPECT_NEAR(mean[r], (float)m, 0);
    for (int i = 0; i < N; ++i) worst = fmax(worst, fabs(y[r * N + i] - (x[r * N + i] - m) * rs));
  }
  EXPECT_NEAR(worst, 0, 1e-5);
  kit_release_all(out, n);
  kit_release(&tx);
  free(y);
  free(x);
}

TEST(numerics_accurate_sum_special_values) {
  /* inf stays inf (the compensation term would be inf - inf), inf - inf and NaN
   * give NaN, overflow gives inf, all -0 terms give +0 (PyTorch starts at +0). */
  float cases[5][3] = {{INFINITY, 1, 2}, {INFINITY, -INFINITY, 2}, {NAN, 1, 2}, {3e38f, 3e38f, 1}, {-0.0f, -0.0f, -0.0f}};
  float want[5] = {INFINITY, NAN, NAN, INFINITY, 0.0f};
  for (int k = 0; k < 5; ++k) {
    tpu_tensor_t x, z;
    ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, cases[k], &x));
    tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_none()};
    ASSERT_OK(kit_run1("sum", "", args, 2, &z));
    float got;
    ASSERT_OK(kit_read_f32(&z, &got, 1));
    if (isnan(want[k])) EXPECT(isnan(got));
    else EXPECT(got == want[k] && signbit(got) == signbit(want[k]));
    kit_release(&z);
    kit_release(&x);
  }
}
