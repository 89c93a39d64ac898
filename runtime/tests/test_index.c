/* Index-family lowerings on the CPU plugin: gather/scatter, advanced indexing,
 * masks, sort, and the dynamic-shape ops (nonzero, unique). */
#include <stdlib.h>

#include "kit.h"
#include "test.h"

static float ix_iota[24] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23};

TEST(index_select_and_gather) {
  tpu_tensor_t x, idx, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, ix_iota, &x));
  int64_t iv[2] = {2, 0}; /* negative indices are out of range for index_select (test_check.c) */
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, iv, &idx));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_int(1), kit_arg_tensor(&idx)};
  ASSERT_OK(kit_run1("index_select", "", args, 3, &out));
  ASSERT_EQ_INT(out.sizes[1], 2);
  float o[6];
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(o[i * 2], 4 * i + 2, 0);
    EXPECT_NEAR(o[i * 2 + 1], 4 * i, 0);
  }
  kit_release(&out);
  kit_release(&idx);
  /* gather dim 1 with a [3, 2] index */
  int64_t gv[6] = {3, 0, 1, 1, 0, 2};
  ASSERT_OK(kit_tensor(TPU_I64, 2, (int64_t[]){3, 2}, gv, &idx));
  args[2] = kit_arg_tensor(&idx);
  ASSERT_OK(kit_run1("gather", "out", args, 3, &out));
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], 4 * (i / 2) + gv[i], 0);
  kit_release(&out);
  /* an int16 index to gather is an error (PyTorch accepts int32 and int64) */
  int16_t g32[6] = {0};
  tpu_tensor_t idx32;
  ASSERT_OK(kit_tensor(TPU_I16, 2, (int64_t[]){3, 2}, g32, &idx32));
  args[2] = kit_arg_tensor(&idx32);
  EXPECT_CODE(kit_run1("gather", "out", args, 3, &out), TPU_INVALID_ARGUMENT);
  kit_release(&idx32);
  kit_release(&idx);
  kit_release(&x);
}

TEST(index_scatter_add_duplicates) {
  float z[5] = {0};
  tpu_tensor_t x, idx, src, out;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, z, &x));
  int64_t iv[4] = {1, 1, 4, 1};
  float sv[4] = {1, 2, 3, 4};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){4}, iv, &idx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, sv, &src));
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_tensor(&idx), kit_arg_tensor(&src)};
  ASSERT_OK(kit_run1("scatter_add", "out", args, 4, &out));
  float o[5];
  ASSERT_OK(kit_read_f32(&out, o, 5));
  float want[5] = {0, 7, 0, 0, 3};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(o[i], want[i], 0);
  kit_release(&out);
  kit_release(&src);
  kit_release(&idx);
  kit_release(&x);
}

TEST(index_advanced_non_adjacent) {
  /* x [2, 3, 4]; x[i0, :, i2] with i0, i2 of shape [2] → result [2, 3] */
  tpu_tensor_t x, i0, i2, out;
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 3, 4}, ix_iota, &x));
  int64_t a[2] = {1, 0}, c[2] = {3, -1};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, a, &i0));
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, c, &i2));
  tpu_tensor_t list[3] = {i0, {0}, i2};
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensors(3, list)};
  ASSERT_OK(kit_run1("index", "Tensor", args, 2, &out));
  ASSERT_EQ_INT(out.rank, 2);
  ASSERT_EQ_INT(out.sizes[0], 2);
  ASSERT_EQ_INT(out.sizes[1], 3);
  float o[6];
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int k = 0; k < 2; ++k)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(o[k * 3 + j], a[k] * 12 + j * 4 + (c[k] + 4) % 4, 0);
  kit_release(&out);
  /* adjacent: x[:, i0, i0] → [2, 2] (dims stay in place) */
  tpu_tensor_t list2[3] = {{0}, i0, i0};
  args[1] = kit_arg_tensors(3, list2);
  ASSERT_OK(kit_run1("index", "Tensor", args, 2, &out));
  ASSERT_EQ_INT(out.sizes[0], 2);
  ASSERT_EQ_INT(out.sizes[1], 2);
  float o2[4];
  ASSERT_OK(kit_read_f32(&out, o2, 4));
  for (int p = 0; p < 2; ++p)
    for (int k = 0; k < 2; ++k) EXPECT_NEAR(o2[p * 2 + k], p * 12 + a[k] * 4 + a[k], 0);
  kit_release(&out);
  kit_release(&i0);
  kit_release(&i2);
  kit_release(&x);
}

TEST(index_put_mask_and_accumulate) {
  float xv[6] = {1, -2, 3, -4, 5, -6};
  bool mv[6] = {false, true, false, true, false, true};
  float vv[3] = {10, 20, 30};
  tpu_tensor_t x, m, v, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, xv, &x));
  ASSERT_OK(kit_tensor(TPU_BOOL, 2, (int64_t[]){2, 3}, mv, &m));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, vv, &v));
  tpu_tensor_t list[1] = {m};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_tensors(1, list), kit_arg_tensor(&v), kit_arg_bool(false)};
  ASSERT_OK(kit_run1("_index_put_impl", "", args, 4, &out));
  float o[6];
  ASSERT_OK(kit_read_f32(&out, o, 6));
  float want[6] = {1, 10, 3, 20, 5, 30};
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], want[i], 0);
  kit_release(&out);
  kit_release(&v);
  /* x[[0, 0, 1]] += [[1,1,1]] (duplicates accumulate) */
  int64_t iv[3] = {0, 0, 1};
  tpu_tensor_t idx;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){3}, iv, &idx));
  float one[3] = {1, 1, 1};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, one, &v));
  tpu_tensor_t list2[1] = {idx};
  args[1] = kit_arg_tensors(1, list2);
  args[2] = kit_arg_tensor(&v);
  args[3] = kit_arg_bool(true);
  ASSERT_OK(kit_run1("_index_put_impl", "", args, 4, &out));
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], xv[i] + (i < 3 ? 2 : 1), 0);
  kit_release(&out);
  kit_release(&idx);
  kit_release(&v);
  kit_release(&m);
  kit_release(&x);
}

TEST(index_sort_nonzero_unique) {
  float xv[5] = {3, NAN, -1, 3, 0};
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){5}, xv, &x));
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_bool(true), kit_arg_int(0), kit_arg_bool(true)};
  tpu_tensor_t r[4];
  int n = 0;
  ASSERT_OK(kit_run("sort", "", args, 4, 4, r, &n));
  ASSERT_EQ_INT(n, 2);
  tpu_tensor_t v = r[0], i = r[1];
  float ov[5], oi[5];
  ASSERT_OK(kit_read_f32(&v, ov, 5));
  ASSERT_OK(kit_read_f32(&i, oi, 5));
  EXPECT(isnan(ov[0]));
  float wv[4] = {3, 3, 0, -1}, wi[5] = {1, 0, 3, 4, 2};
  for (int k = 1; k < 5; ++k) EXPECT_NEAR(ov[k], wv[k - 1], 0);
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(oi[k], wi[k], 0);
  kit_release(&v);
  kit_release(&i);
  /* nonzero: a dynamic shape, trimmed by the runtime to the count */
  ASSERT_OK(kit_run("nonzero", "", args, 1, 4, r, &n));
  ASSERT_EQ_INT(n, 1);
  tpu_tensor_t c = r[0];
  ASSERT_EQ_INT(c.sizes[0], 4);
  ASSERT_EQ_INT(c.sizes[1], 1);
  float oc[4], wc[4] = {0, 1, 2, 3};
  ASSERT_OK(kit_read_f32(&c, oc, 4));
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(oc[k], wc[k], 0);
  kit_release(&c);
  /* _unique2 with counts: values 3, NaN(self-distinct), -1, 3, 0 → -1, 0, 3, NaN */
  tpu_arg_t uargs[4] = {kit_arg_tensor(&x), kit_arg_bool(true), kit_arg_bool(true), kit_arg_bool(true)};
  ASSERT_OK(kit_run("_unique2", "", uargs, 4, 4, r, &n));
  ASSERT_EQ_INT(n, 3);
  tpu_tensor_t u = r[0], inv = r[1], cnt = r[2];
  ASSERT_EQ_INT(u.sizes[0], 4);
  ASSERT_EQ_INT(inv.sizes[0], 5);
  ASSERT_EQ_INT(cnt.sizes[0], 4);
  float ou[4], oinv[5], ocnt[4];
  ASSERT_OK(kit_read_f32(&u, ou, 4));
  ASSERT_OK(kit_read_f32(&inv, oinv, 5));
  ASSERT_OK(kit_read_f32(&cnt, ocnt, 4));
  float wu[3] = {-1, 0, 3}, winv[5] = {2, 3, 0, 2, 1}, wcnt[4] = {1, 1, 2, 1};
  for (int k = 0; k < 3; ++k) EXPECT_NEAR(ou[k], wu[k], 0);
  EXPECT(isnan(ou[3]));
  for (int k = 0; k < 5; ++k) EXPECT_NEAR(oinv[k], winv[k], 0);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(ocnt[k], wcnt[k], 0);
  kit_release(&u);
  kit_release(&inv);
  kit_release(&cnt);
  kit_release(&x);
}
