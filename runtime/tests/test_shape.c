/* Shape-family lowerings on the CPU plugin: cat's rules, padding, upsampling. */
#include "kit.h"
#include "test.h"

TEST(shape_cat_promotes_and_skips_empty) {
  float a[4] = {1, 2, 3, 4};
  int64_t c[2] = {5, 6};
  tpu_tensor_t x, y, e, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, a, &x));
  ASSERT_OK(kit_tensor(TPU_I64, 2, (int64_t[]){2, 1}, c, &y));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){0}, NULL, &e));
  tpu_tensor_t list[3] = {x, e, y};
  tpu_arg_t args[2] = {kit_arg_tensors(3, list), kit_arg_int(-1)};
  ASSERT_OK(kit_run1("cat", "", args, 2, &out));
  ASSERT_EQ_INT(out.dtype, TPU_F32);
  ASSERT_EQ_INT(out.sizes[0], 2);
  ASSERT_EQ_INT(out.sizes[1], 3);
  float o[6], want[6] = {1, 2, 5, 3, 4, 6};
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], want[i], 0);
  kit_release(&out);
  /* mismatched sizes: PyTorch's message */
  tpu_tensor_t bad;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 1}, NULL, &bad));
  tpu_tensor_t list2[2] = {x, bad};
  args[0] = kit_arg_tensors(2, list2);
  EXPECT_CODE(kit_run1("cat", "", args, 2, &out), TPU_INVALID_ARGUMENT);
  kit_release(&bad);
  kit_release(&e);
  kit_release(&y);
  kit_release(&x);
}

TEST(shape_reflection_and_replication_pad) {
  float a[4] = {1, 2, 3, 4};
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){1, 4}, a, &x));
  int64_t pad[2] = {2, 3};
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_ints(2, pad)};
  float o[9];
  ASSERT_OK(kit_run1("reflection_pad1d", "", args, 2, &out));
  ASSERT_OK(kit_read_f32(&out, o, 9));
  float refl[9] = {3, 2, 1, 2, 3, 4, 3, 2, 1};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(o[i], refl[i], 0);
  kit_release(&out);
  ASSERT_OK(kit_run1("replication_pad1d", "", args, 2, &out));
  ASSERT_OK(kit_read_f32(&out, o, 9));
  float repl[9] = {1, 1, 1, 2, 3, 4, 4, 4, 4};
  for (int i = 0; i < 9; ++i) EXPECT_NEAR(o[i], repl[i], 0);
  /* backward of the replication pad: edge elements collect the padded grads */
  tpu_tensor_t g = out;
  tpu_arg_t bargs[3] = {kit_arg_tensor(&g), kit_arg_tensor(&x), kit_arg_ints(2, pad)};
  tpu_tensor_t gi;
  ASSERT_OK(kit_run1("replication_pad1d_backward", "", bargs, 3, &gi));
  float og[4];
  ASSERT_OK(kit_read_f32(&gi, og, 4));
  float wg[4] = {3, 2, 3, 16};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(og[i], wg[i], 0);
  kit_release(&gi);
  kit_release(&out);
  /* reflection padding as large as the input is an error */
  int64_t big[2] = {4, 0};
  args[1] = kit_arg_ints(2, big);
  EXPECT_CODE(kit_run1("reflection_pad1d", "", args, 2, &out), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

TEST(shape_upsample_nearest_and_linear) {
  float a[3] = {0, 10, 20};
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){1, 1, 3}, a, &x));
  int64_t osz[1] = {6};
  tpu_arg_t args[4] = {kit_arg_tensor(&x), kit_arg_ints(1, osz), kit_arg_none(), kit_arg_none()};
  float o[6];
  ASSERT_OK(kit_run1("upsample_nearest1d", "", args, 3, &out));
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], a[i / 2], 0);
  kit_release(&out);
  /* linear, align_corners=True: 0, 4, 8, 12, 16, 20 */
  tpu_arg_t al;
  memset(&al, 0, sizeof(al));
  al.kind = TPU_ARG_BOOL;
  al.u.b = true;
  args[2] = al;
  ASSERT_OK(kit_run1("upsample_linear1d", "", args, 4, &out));
  ASSERT_OK(kit_read_f32(&out, o, 6));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(o[i], 4 * i, 1e-5);
  kit_release(&out);
  kit_release(&x);
}
