/* The executor: ops through the cache, views read and written, copies. */
#include <string.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/runtime.h"

TEST(exec_add_broadcast_and_cache) {
  float a[6] = {1, 2, 3, 4, 5, 6}, c[3] = {10, 20, 30};
  tpu_tensor_t x, y, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, c, &y));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_tensor(&y), kit_arg_scalar_f(2.0)};
  int64_t misses = tpu_metric_get(TPU_METRIC_CACHE_MISSES), hits = tpu_metric_get(TPU_METRIC_CACHE_HITS);
  ASSERT_OK(kit_run1("add", "Tensor", args, 3, &z));
  float out[6];
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], a[i] + 2 * c[i % 3], 1e-6);
  kit_release(&z);
  /* A different alpha is a runtime operand: same executable. */
  args[2] = kit_arg_scalar_f(-1.0);
  ASSERT_OK(kit_run1("add", "Tensor", args, 3, &z));
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(out[i], a[i] - c[i % 3], 1e-6);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CACHE_MISSES) - misses, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CACHE_HITS) - hits, 1);
  kit_release(&z);
  kit_release(&x);
  kit_release(&y);
}

TEST(exec_views_read) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = (float)i;
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, a, &x));
  float out[12];
  /* transpose (4x3) */
  tpu_tensor_t t = kit_view(&x, 2, (int64_t[]){4, 3}, (int64_t[]){1, 4}, 0);
  tpu_arg_t args[2] = {kit_arg_tensor(&t), kit_arg_scalar_f(0.0)};
  ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 12));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(out[i * 3 + j], a[j * 4 + i], 0);
  kit_release(&z);
  /* x[:, 1:3] (offset 1, needs padding or dynamic slice) */
  t = kit_view(&x, 2, (int64_t[]){3, 2}, (int64_t[]){4, 1}, 1);
  args[0] = kit_arg_tensor(&t);
  ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(out[i * 2 + j], a[i * 4 + 1 + j], 0);
  kit_release(&z);
  /* x[1] (offset 4) then x[2] (offset 8): the same executable */
  int64_t misses = tpu_metric_get(TPU_METRIC_CACHE_MISSES);
  for (int r = 1; r < 3; ++r) {
    t = kit_view(&x, 1, (int64_t[]){4}, (int64_t[]){1}, 4 * r);
    args[0] = kit_arg_tensor(&t);
    ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
    ASSERT_OK(kit_read_f32(&z, out, 4));
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(out[j], a[r * 4 + j], 0);
    kit_release(&z);
  }
  EXPECT(tpu_metric_get(TPU_METRIC_CACHE_MISSES) - misses <= 1);
  /* diagonal: stride 5 on 3x4 → gather or padded window */
  t = kit_view(&x, 1, (int64_t[]){3}, (int64_t[]){5}, 0);
  args[0] = kit_arg_tensor(&t);
  ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 3));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(out[j], a[j * 5], 0);
  kit_release(&z);
  /* expand: [3] broadcast along a new leading dim (stride 0) */
  t = kit_view(&x, 2, (int64_t[]){2, 4}, (int64_t[]){0, 1}, 4);
  args[0] = kit_arg_tensor(&t);
  ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 8));
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(out[j], a[4 + j % 4], 0);
  kit_release(&z);
  /* overlapping (unfold-like): sizes [3, 2] strides [1, 1] → gather */
  t = kit_view(&x, 2, (int64_t[]){3, 2}, (int64_t[]){1, 1}, 2);
  args[0] = kit_arg_tensor(&t);
  ASSERT_OK(kit_run1("add", "Tensor", args, 2, &z));
  ASSERT_OK(kit_read_f32(&z, out, 6));
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_NEAR(out[i * 2 + j], a[2 + i + j], 0);
  kit_release(&z);
  kit_release(&x);
}

TEST(exec_views_write) {
  float a[12];
  for (int i = 0; i < 12; ++i) a[i] = (float)i;
  tpu_tensor_t x, src;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, a, &x));
  float v[3] = {100, 200, 300};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, v, &src));
  /* x[:, 1] = v */
  tpu_tensor_t col = kit_view(&x, 1, (int64_t[]){3}, (int64_t[]){4}, 1);
  ASSERT_OK(tpu_tensor_copy(&col, &src));
  float out[12];
  ASSERT_OK(kit_read_f32(&x, out, 12));
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(out[i], (i % 4 == 1) ? v[i / 4] : a[i], 0);
  /* x.t()[3] = v  (column 3 via the transposed view) */
  tpu_tensor_t row = kit_view(&x, 1, (int64_t[]){3}, (int64_t[]){4}, 3);
  ASSERT_OK(tpu_tensor_copy(&row, &src));
  ASSERT_OK(kit_read_f32(&x, out, 12));
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i * 4 + 3], v[i], 0);
  /* a scalar broadcast into x[2, 1:3] */
  float s = -1;
  tpu_tensor_t one;
  ASSERT_OK(kit_tensor(TPU_F32, 0, NULL, &s, &one));
  tpu_tensor_t seg = kit_view(&x, 1, (int64_t[]){2}, (int64_t[]){1}, 9);
  ASSERT_OK(tpu_tensor_copy(&seg, &one));
  ASSERT_OK(kit_read_f32(&x, out, 12));
  EXPECT_NEAR(out[9], -1, 0);
  EXPECT_NEAR(out[10], -1, 0);
  EXPECT_NEAR(out[8], 8, 0);
  kit_release(&one);
  kit_release(&src);
  kit_release(&x);
}

TEST(exec_copy_casts_and_zeros) {
  int64_t ints[4] = {1, -2, 3, 4};
  tpu_tensor_t x, f;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){4}, ints, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, NULL, &f));
  float out[4];
  ASSERT_OK(kit_read_f32(&f, out, 4)); /* never written: zeros */
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], 0, 0);
  ASSERT_OK(tpu_tensor_copy(&f, &x));
  ASSERT_OK(kit_read_f32(&f, out, 4));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], (float)ints[i], 0);
  kit_release(&f);
  kit_release(&x);
}

TEST(exec_unknown_op_is_unimplemented) {
  tpu_result_t r[1];
  int n = 0;
  EXPECT_CODE(tpu_op_run("definitely_not_an_op", "", 0, NULL, 0, 1, r, &n), TPU_UNIMPLEMENTED);
}

/* List lengths come from the caller: a negative one is an error, not an allocation size. */
TEST(exec_negative_list_length_is_an_error) {
  float a[6] = {0};
  tpu_tensor_t x, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  const int64_t dims[1] = {0};
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_ints(1, dims), kit_arg_bool(false)};
  args[1].u.list.n = -1;
  tpu_status_t* st = kit_run1("sum", "dim_IntList", args, 3, &z);
  EXPECT(st && strstr(tpu_status_message(st), "argument 1: negative list length -1") != NULL);
  tpu_status_free(st);
  tpu_arg_t lists[1] = {kit_arg_tensors(1, &x)};
  lists[0].u.list.n = -5;
  st = kit_run1("cat", "default", lists, 1, &z);
  EXPECT(st && strstr(tpu_status_message(st), "argument 0: negative list length -5") != NULL);
  tpu_status_free(st);
  kit_release(&x);
}

TEST(exec_shape_mismatch_is_an_error) {
  float a[6] = {0}, c[4] = {0};
  tpu_tensor_t x, y, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, c, &y));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  EXPECT_CODE(kit_run1("add", "Tensor", args, 2, &z), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  kit_release(&y);
}
