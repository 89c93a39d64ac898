/* Creation-family lowerings on the CPU plugin: fill with a runtime scalar,
 * arange lengths from static scalars (and the out dtype argument), tril. */
#include "kit.h"
#include "test.h"
#include "torchtpu/runtime.h"

TEST(creation_fill_scalar_is_a_runtime_operand) {
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_I32, 2, (int64_t[]){2, 3}, NULL, &x));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_scalar_f(2.75)};
  int64_t misses = tpu_metric_get(TPU_METRIC_CACHE_MISSES);
  ASSERT_OK(kit_run1("fill", "Scalar", args, 2, &z));
  EXPECT_EQ_INT(z.dtype, TPU_I32);
  float out[6];
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], 2, 0); /* truncated like PyTorch */
  kit_release(&z);
  args[1] = kit_arg_scalar_f(-7.0);
  ASSERT_OK(kit_run1("fill", "Scalar", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], -7, 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CACHE_MISSES) - misses, 1);
  kit_release(&z);
  kit_release(&x);
}

TEST(creation_arange_lengths_and_dtypes) {
  /* arange(1, 7, 2) over ints: [1, 3, 5] in int64. */
  tpu_arg_t args[4] = {kit_arg_scalar_i(1), kit_arg_scalar_i(7), kit_arg_scalar_i(2), kit_arg_dtype(TPU_I64)};
  tpu_tensor_t z;
  ASSERT_OK(kit_run1("arange", "start_out", args, 3, &z));
  EXPECT_EQ_INT(z.dtype, TPU_I64);
  ASSERT_EQ_INT(z.sizes[0], 3);
  float out[8];
  ASSERT_OK(kit_read_f32(&z, out, 3));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], 1 + 2 * i, 0);
  kit_release(&z);
  /* A different end is a different length: static scalars, a new executable. */
  args[1] = kit_arg_scalar_i(12);
  ASSERT_OK(kit_run1("arange", "start_out", args, 3, &z));
  ASSERT_EQ_INT(z.sizes[0], 6);
  kit_release(&z);
  /* arange(0, 1, 0.25) into a float64 out: 4 values in float64. */
  args[0] = kit_arg_scalar_i(0);
  args[1] = kit_arg_scalar_i(1);
  args[2] = kit_arg_scalar_f(0.25);
  args[3] = kit_arg_dtype(TPU_F64);
  ASSERT_OK(kit_run1("arange", "start_out", args, 4, &z));
  EXPECT_EQ_INT(z.dtype, TPU_F64);
  ASSERT_EQ_INT(z.sizes[0], 4);
  ASSERT_OK(kit_read_f32(&z, out, 4));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], 0.25 * i, 0);
  kit_release(&z);
  /* step 0 and inconsistent bounds are errors, not aborts. */
  args[2] = kit_arg_scalar_i(0);
  EXPECT_CODE(kit_run1("arange", "start_out", args, 3, &z), TPU_INVALID_ARGUMENT);
  args[2] = kit_arg_scalar_i(-1);
  EXPECT_CODE(kit_run1("arange", "start_out", args, 3, &z), TPU_INVALID_ARGUMENT);
}

TEST(creation_tril_triu) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = (float)(i + 1);
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, a, &x));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_int(1)};
  float out[12];
  ASSERT_OK(kit_run1("tril", "", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 12));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(out[i * 4 + j], j - i <= 1 ? a[i * 4 + j] : 0, 0);
  kit_release(&z);
  args[1] = kit_arg_int(-1);
  ASSERT_OK(kit_run1("triu", "", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 12));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(out[i * 4 + j], j - i >= -1 ? a[i * 4 + j] : 0, 0);
  kit_release(&z);
  kit_release(&x);
}
