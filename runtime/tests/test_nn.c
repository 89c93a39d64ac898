/* nn family lowerings on the CPU plugin, without torch: layer norm and max pool
 * (forward and backward), group norm, batch norm running stats, and errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "test.h"

/* Reference layer norm over rows of length n. */
static void ref_layer_norm(const float* x, int rows, int n, const float* w, const float* bias, double eps, float* y,
                           float* mean, float* rstd) {
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < n; ++i) m += x[r * n + i];
    m /= n;
    for (int i = 0; i < n; ++i) v += (x[r * n + i] - m) * (x[r * n + i] - m);
    v /= n;
    double rs = 1.0 / sqrt(v + eps);
    mean[r] = (float)m;
    rstd[r] = (float)rs;
    for (int i = 0; i < n; ++i) y[r * n + i] = (float)((x[r * n + i] - m) * rs * w[i] + bias[i]);
  }
}

TEST(nn_layer_norm_forward_backward) {
  enum { R = 3, N = 4 };
  float x[R * N], w[N] = {1.0f, 0.5f, -2.0f, 3.0f}, bias[N] = {0.1f, 0.2f, 0.3f, 0.4f}, dy[R * N];
  for (int i = 0; i < R * N; ++i) x[i] = (float)sin(i * 1.7) * 3.0f, dy[i] = (float)cos(i * 0.9);
  tpu_tensor_t tx, tw, tb, tdy, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, w, &tw));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, bias, &tb));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, dy, &tdy));
  int64_t ns[1] = {N};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), kit_arg_ints(1, ns), kit_arg_tensor(&tw), kit_arg_tensor(&tb), kit_arg_float(1e-5)};
  int n = 0;
  ASSERT_OK(kit_run("native_layer_norm", "", args, 5, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 3);
  EXPECT_EQ_INT(out[1].rank, 2);
  EXPECT_EQ_INT(out[1].sizes[1], 1);
  float y[R * N], mean[R], rstd[R], ey[R * N], em[R], er[R];
  ref_layer_norm(x, R, N, w, bias, 1e-5, ey, em, er);
  ASSERT_OK(kit_read_f32(&out[0], y, R * N));
  ASSERT_OK(kit_read_f32(&out[1], mean, R));
  ASSERT_OK(kit_read_f32(&out[2], rstd, R));
  for (int i = 0; i < R * N; ++i) EXPECT_NEAR(y[i], ey[i], 1e-5);
  for (int r = 0; r < R; ++r) {
    EXPECT_NEAR(mean[r], em[r], 1e-5);
    EXPECT_NEAR(rstd[r], er[r], 1e-4);
  }

  /* Backward: compare with the analytic formula on the host. */
  bool mask[3] = {true, true, true};
  tpu_tensor_t stats[2] = {out[1], out[2]};
  tpu_arg_t bargs[8] = {kit_arg_tensor(&tdy), kit_arg_tensor(&tx), kit_arg_ints(1, ns), kit_arg_tensor(&stats[0]),
                        kit_arg_tensor(&stats[1]), kit_arg_tensor(&tw), kit_arg_tensor(&tb), kit_arg_bools(3, mask)};
  tpu_tensor_t g[KIT_MAX_OUTS];
  ASSERT_OK(kit_run("native_layer_norm_backward", "", bargs, 8, KIT_MAX_OUTS, g, &n));
  ASSERT_EQ_INT(n, 3);
  float dx[R * N], dw[N], db[N];
  ASSERT_OK(kit_read_f32(&g[0], dx, R * N));
  ASSERT_OK(kit_read_f32(&g[1], dw, N));
  ASSERT_OK(kit_read_f32(&g[2], db, N));
  float edw[N] = {0}, edb[N] = {0};
  for (int r = 0; r < R; ++r) {
    double xh[N], gg[N], mg = 0, mgx = 0;
    for (int i = 0; i < N; ++i) {
      xh[i] = (x[r * N + i] - em[r]) * er[r];
      gg[i] = dy[r * N + i] * w[i];
      mg += gg[i] / N;
      mgx += gg[i] * xh[i] / N;
      edw[i] += (float)(dy[r * N + i] * xh[i]);
      edb[i] += dy[r * N + i];
    }
    for (int i = 0; i < N; ++i) EXPECT_NEAR(dx[r * N + i], er[r] * (gg[i] - mg - xh[i] * mgx), 1e-4);
  }
  for (int i = 0; i < N; ++i) {
    EXPECT_NEAR(dw[i], edw[i], 1e-4);
    EXPECT_NEAR(db[i], edb[i], 1e-5);
  }
  kit_release_all(g, n);
  kit_release_all(out, 3);
  kit_release(&tx);
  kit_release(&tw);
  kit_release(&tb);
  kit_release(&tdy);
}

TEST(nn_layer_norm_bad_shape_is_an_error) {
  float x[6] = {0};
  tpu_tensor_t tx, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, x, &tx));
  int64_t ns[1] = {4};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), kit_arg_ints(1, ns), kit_arg_none(), kit_arg_none(), kit_arg_float(1e-5)};
  int n = 0;
  EXPECT_CODE(kit_run("native_layer_norm", "", args, 5, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
}

TEST(nn_group_norm_stats) {
  /* N=1, C=4, HxW=2, 2 groups: group 0 = x[0:4], group 1 = x[4:8]. */
  float x[8] = {1, 2, 3, 4, 10, 10, 14, 14};
  tpu_tensor_t tx, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){1, 4, 2}, x, &tx));
  tpu_arg_t args[8] = {kit_arg_tensor(&tx), kit_arg_none(), kit_arg_none(), kit_arg_int(1),
                       kit_arg_int(4),       kit_arg_int(2), kit_arg_int(2), kit_arg_float(0)};
  int n = 0;
  ASSERT_OK(kit_run("native_group_norm", "", args, 8, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 3);
  float y[8], mean[2], rstd[2];
  ASSERT_OK(kit_read_f32(&out[0], y, 8));
  ASSERT_OK(kit_read_f32(&out[1], mean, 2));
  ASSERT_OK(kit_read_f32(&out[2], rstd, 2));
  EXPECT_NEAR(mean[0], 2.5, 1e-6);
  EXPECT_NEAR(mean[1], 12, 1e-6);
  EXPECT_NEAR(rstd[0], 1 / sqrt(1.25), 1e-5);
  EXPECT_NEAR(rstd[1], 0.5, 1e-6);
  EXPECT_NEAR(y[4], -1, 1e-6);
  EXPECT_NEAR(y[7], 1, 1e-6);
  kit_release_all(out, n);
  kit_release(&tx);
}

TEST(nn_batch_norm_appends_running_stats) {
  /* [N=2, C=1, 2]: mean 2.5, biased var 1.25, unbiased 5/3. */
  float x[4] = {1, 2, 3, 4}, rm[1] = {1}, rv[1] = {1};
  tpu_tensor_t tx, trm, trv, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 1, 2}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, rm, &trm));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, rv, &trv));
  tpu_arg_t args[8] = {kit_arg_tensor(&tx),  kit_arg_none(), kit_arg_none(), kit_arg_tensor(&trm),
                       kit_arg_tensor(&trv), kit_arg_bool(true),  kit_arg_float(0.5),  kit_arg_float(0)};
  int n = 0;
  ASSERT_OK(kit_run("_native_batch_norm_legit", "", args, 8, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 5);
  float m, v;
  ASSERT_OK(kit_read_f32(&out[3], &m, 1));
  ASSERT_OK(kit_read_f32(&out[4], &v, 1));
  EXPECT_NEAR(m, 0.5 * 1 + 0.5 * 2.5, 1e-6);
  EXPECT_NEAR(v, 0.5 * 1 + 0.5 * 5.0 / 3.0, 1e-6);
  kit_release_all(out, n);
  /* Eval mode without running stats is PyTorch's error. */
  args[3] = kit_arg_none();
  args[4] = kit_arg_none();
  args[5] = kit_arg_bool(false);
  EXPECT_CODE(kit_run("native_batch_norm", "", args, 8, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
  kit_release(&trm);
  kit_release(&trv);
}

TEST(nn_max_pool2d_values_indices_backward) {
  /* 1x1x4x6 input, kernel 2, stride 2, padding 1, ceil_mode: output 3x4. */
  enum { H = 4, W = 6 };
  float x[H * W];
  for (int i = 0; i < H * W; ++i) x[i] = (float)((i * 7) % 11) - (i == 12 ? 20.0f : 0.0f);
  tpu_tensor_t tx, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){1, 1, H, W}, x, &tx));
  int64_t k[2] = {2, 2}, s[2] = {2, 2}, p[2] = {1, 1}, d[2] = {1, 1};
  tpu_arg_t args[6] = {kit_arg_tensor(&tx), kit_arg_ints(2, k), kit_arg_ints(2, s), kit_arg_ints(2, p), kit_arg_ints(2, d), kit_arg_bool(true)};
  int n = 0;
  ASSERT_OK(kit_run("max_pool2d_with_indices", "", args, 6, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 2);
  ASSERT_EQ_INT(out[0].sizes[2], 3);
  ASSERT_EQ_INT(out[0].sizes[3], 4);
  EXPECT_EQ_INT(out[1].dtype, TPU_I64);
  float y[12], idx[12];
  ASSERT_OK(kit_read_f32(&out[0], y, 12));
  ASSERT_OK(kit_read_f32(&out[1], idx, 12));
  for (int oh = 0; oh < 3; ++oh) {
    for (int ow = 0; ow < 4; ++ow) {
      float best = -INFINITY;
      int bi = -1;
      for (int h = oh * 2 - 1; h < oh * 2 + 1; ++h)
        for (int w = ow * 2 - 1; w < ow * 2 + 1; ++w)
          if (h >= 0 && h < H && w >= 0 && w < W && x[h * W + w] > best) best = x[h * W + w], bi = h * W + w;
      EXPECT_NEAR(y[oh * 4 + ow], best, 0);
      EXPECT_NEAR(idx[oh * 4 + ow], bi, 0);
    }
  }
  /* Backward: ones scattered to the argmax positions. */
  float ones[12];
  for (int i = 0; i < 12; ++i) ones[i] = 1;
  tpu_tensor_t tg, gi[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){1, 1, 3, 4}, ones, &tg));
  tpu_arg_t bargs[8] = {kit_arg_tensor(&tg), kit_arg_tensor(&tx), kit_arg_ints(2, k), kit_arg_ints(2, s),
                        kit_arg_ints(2, p),       kit_arg_ints(2, d),       kit_arg_bool(true), kit_arg_tensor(&out[1])};
  int nb = 0;
  ASSERT_OK(kit_run("max_pool2d_with_indices_backward", "", bargs, 8, KIT_MAX_OUTS, gi, &nb));
  float gx[H * W], expect[H * W] = {0};
  for (int i = 0; i < 12; ++i) expect[(int)idx[i]] += 1;
  ASSERT_OK(kit_read_f32(&gi[0], gx, H * W));
  for (int i = 0; i < H * W; ++i) EXPECT_NEAR(gx[i], expect[i], 0);
  kit_release_all(gi, nb);
  kit_release_all(out, n);
  kit_release(&tg);
  kit_release(&tx);
}

TEST(nn_max_pool2d_bad_padding_is_an_error) {
  float x[16] = {0};
  tpu_tensor_t tx, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){1, 4, 4}, x, &tx));
  int64_t k[1] = {2}, p[1] = {2};
  tpu_arg_t args[6] = {kit_arg_tensor(&tx), kit_arg_ints(1, k), kit_arg_ints(0, k) /* empty stride: defaults to the kernel */, kit_arg_ints(1, p), kit_arg_ints(1, k),
                       kit_arg_bool(false)};
  int n = 0;
  EXPECT_CODE(kit_run("max_pool2d_with_indices", "", args, 6, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
}

TEST(nn_layer_norm_mixed_dtypes) {
  /* bf16 input, f32 weight: out bf16, mean/rstd f32 (PyTorch's mixed type);
   * all-bf16: mean/rstd bf16. */
  uint16_t x[8];
  for (int i = 0; i < 8; ++i) {
    float f = (float)i;
    uint32_t u;
    memcpy(&u, &f, 4);
    x[i] = (uint16_t)(u >> 16);
  }
  float w[4] = {1, 1, 1, 1};
  tpu_tensor_t tx, tw, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_BF16, 2, (int64_t[]){2, 4}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, w, &tw));
  int64_t ns[1] = {4};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), kit_arg_ints(1, ns), kit_arg_tensor(&tw), kit_arg_none(), kit_arg_float(1e-5)};
  int n = 0;
  ASSERT_OK(kit_run("native_layer_norm", "", args, 5, KIT_MAX_OUTS, out, &n));
  EXPECT_EQ_INT(out[0].dtype, TPU_BF16);
  EXPECT_EQ_INT(out[1].dtype, TPU_F32);
  EXPECT_EQ_INT(out[2].dtype, TPU_F32);
  float mean[2];
  ASSERT_OK(kit_read_f32(&out[1], mean, 2));
  EXPECT_NEAR(mean[0], 1.5, 1e-6);
  EXPECT_NEAR(mean[1], 5.5, 1e-6);
  kit_release_all(out, n);
  args[2] = kit_arg_none();
  ASSERT_OK(kit_run("native_layer_norm", "", args, 5, KIT_MAX_OUTS, out, &n));
  EXPECT_EQ_INT(out[1].dtype, TPU_BF16);
  kit_release_all(out, n);
  kit_release(&tx);
  kit_release(&tw);
}
