/* No fixed caps on an op's operands or results, int lists longer than a
 * lowering reads fail cleanly, and the data-range pre-pass (bincount). */
#include <stdlib.h>

#include "kit.h"
#include "test.h"

/* 300 one-element strided views of one storage: 300 buffer + 300 offset operands. */
TEST(limits_cat_of_many_strided_views) {
  enum { N = 300 };
  float data[2 * N];
  for (int i = 0; i < 2 * N; ++i) data[i] = (float)i;
  tpu_tensor_t base, out;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2 * N}, data, &base));
  tpu_tensor_t* views = calloc(N, sizeof(*views));
  ASSERT(views != NULL);
  for (int i = 0; i < N; ++i) views[i] = kit_view(&base, 1, (int64_t[]){1}, (int64_t[]){2}, 2 * i + 1);
  tpu_arg_t args[2] = {kit_arg_tensors(N, views), kit_arg_int(0)};
  tpu_status_t* st = kit_run1("cat", "", args, 2, &out);
  free(views);
  if (!st) {
    float o[N];
    EXPECT(tpu_tensor_numel(&out) == N);
    ASSERT_OK(kit_read_f32(&out, o, N));
    for (int i = 0; i < N; ++i) EXPECT_NEAR(o[i], 2 * i + 1, 0);
    kit_release(&out);
  }
  EXPECT(st == NULL);
  tpu_status_free(st);
  kit_release(&base);
}

/* The gradient scaler's unscale over 300 tensors: 301 results. */
TEST(limits_amp_unscale_many_results) {
  enum { N = 300 };
  tpu_tensor_t* grads = calloc(N, sizeof(*grads));
  tpu_result_t* res = calloc(N + 1, sizeof(*res));
  ASSERT(grads && res);
  for (int i = 0; i < N; ++i) {
    float v[2] = {(float)i, i == 123 ? INFINITY : 1.0f};
    ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2}, v, &grads[i]));
  }
  float zero = 0, half = 0.5f;
  tpu_tensor_t found, inv;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, &zero, &found));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, &half, &inv));
  tpu_arg_t args[3] = {kit_arg_tensors(N, grads), kit_arg_tensor(&found), kit_arg_tensor(&inv)};
  int n = 0;
  /* too little room for the results: an error, nothing leaked */
  EXPECT_CODE(tpu_op_run("_amp_foreach_non_finite_check_and_unscale", "", 0, args, 3, 5, res, &n), TPU_INTERNAL);
  EXPECT_EQ_INT(n, 0);
  ASSERT_OK(tpu_op_run("_amp_foreach_non_finite_check_and_unscale", "", 0, args, 3, N + 1, res, &n));
  EXPECT_EQ_INT(n, N + 1);
  for (int i = 0; i < n; ++i) {
    tpu_tensor_t t;
    memset(&t, 0, sizeof(t));
    t.storage = res[i].storage;
    t.dtype = res[i].dtype;
    t.rank = res[i].rank;
    t.sizes[0] = res[i].sizes[0];
    t.strides[0] = 1;
    float o[2] = {0, 0};
    EXPECT(kit_read_f32(&t, o, i < N ? 2 : 1) == NULL);
    if (i < N) EXPECT_NEAR(o[0], 0.5f * (float)i, 0);
    else EXPECT_NEAR(o[0], 1.0f, 0); /* found_inf */
    tpu_storage_release(res[i].storage);
  }
  kit_release(&found);
  kit_release(&inv);
  kit_release_all(grads, N);
  free(grads);
  free(res);
}

/* An int list longer than a lowering's buffer (TPU_MAX_RANK) fails the op. */
TEST(limits_int_list_longer_than_max_rank) {
  float a[2] = {1, 2};
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2}, a, &x));
  int64_t dims[40] = {0}, shifts[40] = {0};
  tpu_arg_t flip[2] = {kit_arg_tensor(&x), kit_arg_ints(40, dims)};
  EXPECT_CODE(kit_run1("flip", "", flip, 2, &out), TPU_INVALID_ARGUMENT);
  tpu_arg_t roll[3] = {kit_arg_tensor(&x), kit_arg_ints(40, shifts), kit_arg_ints(40, dims)};
  EXPECT_CODE(kit_run1("roll", "", roll, 3, &out), TPU_INVALID_ARGUMENT);
  tpu_arg_t sum[3] = {kit_arg_tensor(&x), kit_arg_ints(TPU_MAX_RANK + 1, dims), kit_arg_bool(false)};
  EXPECT_CODE(kit_run1("sum", "dim_IntList", sum, 3, &out), TPU_INVALID_ARGUMENT);
  /* one dim: still fine */
  flip[1] = kit_arg_ints(1, dims);
  ASSERT_OK(kit_run1("flip", "", flip, 2, &out));
  KIT_CHECK("flip", &out, TPU_F32, 1, (int64_t[]){2}, (float[]){2, 1}, 2, 0);
  kit_release(&x);
}

TEST(limits_bincount_sized_by_data) {
  int32_t v[5] = {3, 1, 1, 7, 0};
  float w[5] = {0.5f, 1, 2, 4, 8};
  tpu_tensor_t x, wt, out;
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){5}, v, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, w, &wt));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_none(), kit_arg_int(0)};
  ASSERT_OK(kit_run1("bincount", "", args, 3, &out));
  KIT_CHECK("counts", &out, TPU_I64, 1, (int64_t[]){8}, (float[]){1, 2, 0, 1, 0, 0, 0, 1}, 8, 0);
  args[1] = kit_arg_tensor(&wt);
  args[2] = kit_arg_int(10);
  ASSERT_OK(kit_run1("bincount", "", args, 3, &out));
  KIT_CHECK("weighted", &out, TPU_F32, 1, (int64_t[]){10}, (float[]){8, 3, 0, 0.5f, 0, 0, 0, 4, 0, 0}, 10, 0);
  int32_t neg[2] = {1, -1};
  tpu_tensor_t y;
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){2}, neg, &y));
  tpu_arg_t bad[3] = {kit_arg_tensor(&y), kit_arg_none(), kit_arg_int(0)};
  EXPECT_CODE(kit_run1("bincount", "", bad, 3, &out), TPU_INVALID_ARGUMENT);
  kit_release(&y);
  kit_release(&wt);
  kit_release(&x);
}

TEST(limits_histc_integral_input) {
  int32_t v[6] = {0, 1, 1, 3, 4, 9};
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){6}, v, &x));
  /* bins of width 1 over [0, 4]: 4 is the last bin's upper end, 9 is outside */
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_int(4), kit_arg_scalar_i(0), kit_arg_scalar_i(4)};
  ASSERT_OK(kit_run1("histc", "", args, 4, &out));
  KIT_CHECK("histc", &out, TPU_I32, 1, (int64_t[]){4}, (float[]){1, 2, 0, 2}, 4, 0);
  kit_release(&x);
}
