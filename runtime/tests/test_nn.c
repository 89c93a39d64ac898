/* nn family lowerings on the CPU plugin, without torch: layer norm and max pool
 * (forward and backward), group norm, batch norm running stats, and errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "test.h"

#define NN_MAX_OUTS 8

static tpu_arg_t nn_ints(int n, const int64_t* v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_INT_LIST;
  a.u.list.n = n;
  a.u.list.ints = v;
  return a;
}

static tpu_arg_t nn_bools(int n, const bool* v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_BOOL_LIST;
  a.u.list.n = n;
  a.u.list.bools = v;
  return a;
}

static tpu_arg_t nn_float(double v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_FLOAT;
  a.u.f = v;
  return a;
}

static tpu_arg_t nn_bool(bool v) {
  tpu_arg_t a;
  memset(&a, 0, sizeof(a));
  a.kind = TPU_ARG_BOOL;
  a.u.b = v;
  return a;
}

/* Runs an op and returns its results as dense tensors (owned storages). */
static tpu_status_t* nn_run(const char* name, const char* overload, const tpu_arg_t* args, int nargs,
                            tpu_tensor_t* outs, int* nouts) {
  tpu_result_t r[NN_MAX_OUTS];
  int n = 0;
  TPU_RETURN_IF_ERROR(tpu_op_run(name, overload, 0, args, nargs, NN_MAX_OUTS, r, &n));
  for (int i = 0; i < n; ++i) {
    memset(&outs[i], 0, sizeof(outs[i]));
    outs[i].storage = r[i].storage;
    outs[i].dtype = r[i].dtype;
    outs[i].rank = r[i].rank;
    int64_t st = 1;
    for (int d = r[i].rank - 1; d >= 0; --d) {
      outs[i].sizes[d] = r[i].sizes[d];
      outs[i].strides[d] = st;
      st *= r[i].sizes[d] ? r[i].sizes[d] : 1;
    }
  }
  *nouts = n;
  return NULL;
}

static void nn_release_all(tpu_tensor_t* t, int n) {
  for (int i = 0; i < n; ++i) kit_release(&t[i]);
}

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
  tpu_tensor_t tx, tw, tb, tdy, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, w, &tw));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, bias, &tb));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){R, N}, dy, &tdy));
  int64_t ns[1] = {N};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), nn_ints(1, ns), kit_arg_tensor(&tw), kit_arg_tensor(&tb), nn_float(1e-5)};
  int n = 0;
  ASSERT_OK(nn_run("native_layer_norm", "", args, 5, out, &n));
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
  tpu_arg_t bargs[8] = {kit_arg_tensor(&tdy), kit_arg_tensor(&tx), nn_ints(1, ns), kit_arg_tensor(&stats[0]),
                        kit_arg_tensor(&stats[1]), kit_arg_tensor(&tw), kit_arg_tensor(&tb), nn_bools(3, mask)};
  tpu_tensor_t g[NN_MAX_OUTS];
  ASSERT_OK(nn_run("native_layer_norm_backward", "", bargs, 8, g, &n));
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
  nn_release_all(g, n);
  nn_release_all(out, 3);
  kit_release(&tx);
  kit_release(&tw);
  kit_release(&tb);
  kit_release(&tdy);
}

TEST(nn_layer_norm_bad_shape_is_an_error) {
  float x[6] = {0};
  tpu_tensor_t tx, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, x, &tx));
  int64_t ns[1] = {4};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), nn_ints(1, ns), kit_arg_none(), kit_arg_none(), nn_float(1e-5)};
  int n = 0;
  EXPECT_CODE(nn_run("native_layer_norm", "", args, 5, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
}

TEST(nn_group_norm_stats) {
  /* N=1, C=4, HxW=2, 2 groups: group 0 = x[0:4], group 1 = x[4:8]. */
  float x[8] = {1, 2, 3, 4, 10, 10, 14, 14};
  tpu_tensor_t tx, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){1, 4, 2}, x, &tx));
  tpu_arg_t args[8] = {kit_arg_tensor(&tx), kit_arg_none(), kit_arg_none(), kit_arg_int(1),
                       kit_arg_int(4),       kit_arg_int(2), kit_arg_int(2), nn_float(0)};
  int n = 0;
  ASSERT_OK(nn_run("native_group_norm", "", args, 8, out, &n));
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
  nn_release_all(out, n);
  kit_release(&tx);
}

TEST(nn_batch_norm_appends_running_stats) {
  /* [N=2, C=1, 2]: mean 2.5, biased var 1.25, unbiased 5/3. */
  float x[4] = {1, 2, 3, 4}, rm[1] = {1}, rv[1] = {1};
  tpu_tensor_t tx, trm, trv, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 1, 2}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, rm, &trm));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, rv, &trv));
  tpu_arg_t args[8] = {kit_arg_tensor(&tx),  kit_arg_none(), kit_arg_none(), kit_arg_tensor(&trm),
                       kit_arg_tensor(&trv), nn_bool(true),  nn_float(0.5),  nn_float(0)};
  int n = 0;
  ASSERT_OK(nn_run("_native_batch_norm_legit", "", args, 8, out, &n));
  ASSERT_EQ_INT(n, 5);
  float m, v;
  ASSERT_OK(kit_read_f32(&out[3], &m, 1));
  ASSERT_OK(kit_read_f32(&out[4], &v, 1));
  EXPECT_NEAR(m, 0.5 * 1 + 0.5 * 2.5, 1e-6);
  EXPECT_NEAR(v, 0.5 * 1 + 0.5 * 5.0 / 3.0, 1e-6);
  nn_release_all(out, n);
  /* Eval mode without running stats is PyTorch's error. */
  args[3] = kit_arg_none();
  args[4] = kit_arg_none();
  args[5] = nn_bool(false);
  EXPECT_CODE(nn_run("native_batch_norm", "", args, 8, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
  kit_release(&trm);
  kit_release(&trv);
}

TEST(nn_max_pool2d_values_indices_backward) {
  /* 1x1x4x6 input, kernel 2, stride 2, padding 1, ceil_mode: output 3x4. */
  enum { H = 4, W = 6 };
  float x[H * W];
  for (int i = 0; i < H * W; ++i) x[i] = (float)((i * 7) % 11) - (i == 12 ? 20.0f : 0.0f);
  tpu_tensor_t tx, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){1, 1, H, W}, x, &tx));
  int64_t k[2] = {2, 2}, s[2] = {2, 2}, p[2] = {1, 1}, d[2] = {1, 1};
  tpu_arg_t args[6] = {kit_arg_tensor(&tx), nn_ints(2, k), nn_ints(2, s), nn_ints(2, p), nn_ints(2, d), nn_bool(true)};
  int n = 0;
  ASSERT_OK(nn_run("max_pool2d_with_indices", "", args, 6, out, &n));
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
  tpu_tensor_t tg, gi[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){1, 1, 3, 4}, ones, &tg));
  tpu_arg_t bargs[8] = {kit_arg_tensor(&tg), kit_arg_tensor(&tx), nn_ints(2, k), nn_ints(2, s),
                        nn_ints(2, p),       nn_ints(2, d),       nn_bool(true), kit_arg_tensor(&out[1])};
  int nb = 0;
  ASSERT_OK(nn_run("max_pool2d_with_indices_backward", "", bargs, 8, gi, &nb));
  float gx[H * W], expect[H * W] = {0};
  for (int i = 0; i < 12; ++i) expect[(int)idx[i]] += 1;
  ASSERT_OK(kit_read_f32(&gi[0], gx, H * W));
  for (int i = 0; i < H * W; ++i) EXPECT_NEAR(gx[i], expect[i], 0);
  nn_release_all(gi, nb);
  nn_release_all(out, n);
  kit_release(&tg);
  kit_release(&tx);
}

TEST(nn_max_pool2d_bad_padding_is_an_error) {
  float x[16] = {0};
  tpu_tensor_t tx, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){1, 4, 4}, x, &tx));
  int64_t k[1] = {2}, p[1] = {2};
  tpu_arg_t args[6] = {kit_arg_tensor(&tx), nn_ints(1, k), nn_ints(0, k) /* empty stride: defaults to the kernel */, nn_ints(1, p), nn_ints(1, k),
                       nn_bool(false)};
  int n = 0;
  EXPECT_CODE(nn_run("max_pool2d_with_indices", "", args, 6, out, &n), TPU_INVALID_ARGUMENT);
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
  tpu_tensor_t tx, tw, out[NN_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_BF16, 2, (int64_t[]){2, 4}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, w, &tw));
  int64_t ns[1] = {4};
  tpu_arg_t args[5] = {kit_arg_tensor(&tx), nn_ints(1, ns), kit_arg_tensor(&tw), kit_arg_none(), nn_float(1e-5)};
  int n = 0;
  ASSERT_OK(nn_run("native_layer_norm", "", args, 5, out, &n));
  EXPECT_EQ_INT(out[0].dtype, TPU_BF16);
  EXPECT_EQ_INT(out[1].dtype, TPU_F32);
  EXPECT_EQ_INT(out[2].dtype, TPU_F32);
  float mean[2];
  ASSERT_OK(kit_read_f32(&out[1], mean, 2));
  EXPECT_NEAR(mean[0], 1.5, 1e-6);
  EXPECT_NEAR(mean[1], 5.5, 1e-6);
  nn_release_all(out, n);
  args[2] = kit_arg_none();
  ASSERT_OK(nn_run("native_layer_norm", "", args, 5, out, &n));
  EXPECT_EQ_INT(out[1].dtype, TPU_BF16);
  nn_release_all(out, n);
  kit_release(&tx);
  kit_release(&tw);
}
