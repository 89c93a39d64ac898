/* Matmul-family lowerings on the CPU plugin: mm (incl. a transposed view and
 * bf16), bmm, addmm's beta = 0, a grouped conv2d and its error messages. */
#include <stdlib.h>

#include "kit.h"
#include "test.h"

/* Reference row-major [n,k] @ [k,m] from strided reads. */
static void ref_mm(const float* a, int64_t as0, int64_t as1, const float* c, int n, int k, int m, float* out) {
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j) {
      double s = 0;
      for (int p = 0; p < k; ++p) s += (double)a[i * as0 + p * as1] * c[p * m + j];
      out[i * m + j] = (float)s;
    }
}

TEST(matmul_mm_and_transposed_view) {
  float a[6] = {1, 2, 3, 4, 5, 6}, c[12];
  for (int i = 0; i < 12; ++i) c[i] = (float)(i % 5) - 2;
  tpu_tensor_t x, y, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, c, &y));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ASSERT_OK(kit_run1("mm", "", args, 2, &z));
  EXPECT_EQ_INT(z.rank, 2);
  EXPECT_EQ_INT(z.sizes[1], 4);
  float out[8], ref[8];
  ASSERT_OK(kit_read_f32(&z, out, 8));
  ref_mm(a, 3, 1, c, 2, 3, 4, ref);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[i], ref[i], 1e-5);
  kit_release(&z);
  /* x.t() (3x2, strides [1, 3]) @ [2, 4]: reuse y's first 8 values as [2, 4]. */
  tpu_tensor_t xt = kit_view(&x, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0);
  tpu_tensor_t y2;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 4}, c, &y2));
  args[0] = kit_arg_tensor(&xt);
  args[1] = kit_arg_tensor(&y2);
  ASSERT_OK(kit_run1("mm", "", args, 2, &z));
  float out2[12], ref2[12];
  ASSERT_OK(kit_read_f32(&z, out2, 12));
  ref_mm(a, 1, 3, c, 3, 2, 4, ref2);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(out2[i], ref2[i], 1e-5);
  kit_release(&z);
  kit_release(&y2);
  kit_release(&x);
  kit_release(&y);
}

TEST(matmul_mm_errors) {
  float a[12] = {0};
  tpu_tensor_t x, y, h, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){4, 3}, a, &y));
  ASSERT_OK(kit_tensor(TPU_BF16, 2, (int64_t[]){3, 4}, a, &h));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  tpu_status_t* st = kit_run1("mm", "", args, 2, &z);
  ASSERT(st != NULL);
  EXPECT_EQ_INT(tpu_status_code(st), TPU_INVALID_ARGUMENT);
  EXPECT(strstr(tpu_status_message(st), "mat1 and mat2 shapes cannot be multiplied (2x3 and 4x3)") != NULL);
  tpu_status_free(st);
  args[1] = kit_arg_tensor(&h);
  st = kit_run1("mm", "", args, 2, &z);
  ASSERT(st != NULL);
  EXPECT(strstr(tpu_status_message(st), "expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16") !=
         NULL);
  tpu_status_free(st);
  kit_release(&x);
  kit_release(&y);
  kit_release(&h);
}

TEST(matmul_mm_bf16_accumulates_in_f32) {
  /* 128 ones, then 128 terms of 2^-7: a bf16 accumulator stalls at 128 (its ulp
   * there is 1); an f32 one reaches 129, which bf16 holds exactly. */
  enum { K = 256 };
  uint16_t a[K], c[K]; /* bf16 bits */
  for (int i = 0; i < K; ++i) {
    a[i] = 0x3F80;                   /* 1.0 */
    c[i] = i < K / 2 ? 0x3F80 : 0x3C00; /* 1.0, then 2^-7 */
  }
  tpu_tensor_t x, y, z;
  ASSERT_OK(kit_tensor(TPU_BF16, 2, (int64_t[]){1, K}, a, &x));
  ASSERT_OK(kit_tensor(TPU_BF16, 2, (int64_t[]){K, 1}, c, &y));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ASSERT_OK(kit_run1("mm", "", args, 2, &z));
  EXPECT_EQ_INT(z.dtype, TPU_BF16);
  float out;
  ASSERT_OK(kit_read_f32(&z, &out, 1));
  EXPECT_NEAR(out, 129.0, 0.0);
  kit_release(&z);
  kit_release(&x);
  kit_release(&y);
}

TEST(matmul_bmm) {
  float a[12], c[24];
  for (int i = 0; i < 12; ++i) a[i] = (float)i * 0.5f - 1;
  for (int i = 0; i < 24; ++i) c[i] = (float)(i % 7) - 3;
  tpu_tensor_t x, y, z;
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 2, 3}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 3, 4}, c, &y));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
  ASSERT_OK(kit_run1("bmm", "", args, 2, &z));
  float out[16], ref[8];
  ASSERT_OK(kit_read_f32(&z, out, 16));
  for (int bt = 0; bt < 2; ++bt) {
    ref_mm(a + 6 * bt, 3, 1, c + 12 * bt, 2, 3, 4, ref);
    for (int i = 0; i < 8; ++i) EXPECT_NEAR(out[8 * bt + i], ref[i], 1e-5);
  }
  kit_release(&z);
  kit_release(&x);
  kit_release(&y);
}

TEST(matmul_addmm_beta_zero_ignores_nan) {
  float self[4] = {NAN, NAN, NAN, NAN}, a[4] = {1, 2, 3, 4}, c[4] = {1, 0, 0, 1};
  tpu_tensor_t s, x, y, z;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, self, &s));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, a, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, c, &y));
  tpu_arg_t args[5] = {kit_arg_tensor(&s), kit_arg_tensor(&x), kit_arg_tensor(&y), kit_arg_scalar_i(0),
                       kit_arg_scalar_f(2.0)};
  ASSERT_OK(kit_run1("addmm", "", args, 5, &z));
  float out[4];
  ASSERT_OK(kit_read_f32(&z, out, 4));
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], 2 * a[i], 0);
  kit_release(&z);
  /* beta = 1: NaN propagates (same executable, beta is a runtime operand). */
  args[3] = kit_arg_scalar_i(1);
  ASSERT_OK(kit_run1("addmm", "", args, 5, &z));
  ASSERT_OK(kit_read_f32(&z, out, 4));
  EXPECT(isnan(out[0]));
  kit_release(&z);
  kit_release(&s);
  kit_release(&x);
  kit_release(&y);
}

/* Direct NCHW grouped convolution with stride, padding and dilation. */
static float ref_conv(const float* x, const float* w, int C, int H, int W, int O, int K, int groups, int stride,
                      int pad, int dil, int n, int o, int i, int j) {
  int cg = C / groups, og = O / groups, g = o / og;
  double s = 0;
  for (int c = 0; c < cg; ++c)
    for (int p = 0; p < K; ++p)
      for (int q = 0; q < K; ++q) {
        int h = i * stride - pad + p * dil, v = j * stride - pad + q * dil;
        if (h < 0 || h >= H || v < 0 || v >= W) continue;
        s += (double)x[((n * C + g * cg + c) * H + h) * W + v] * w[((o * cg + c) * K + p) * K + q];
      }
  return (float)s;
}

TEST(matmul_conv2d_grouped_strided) {
  enum { N = 2, C = 4, H = 7, W = 6, O = 6, K = 3, G = 2 };
  const int stride = 2, pad = 1, dil = 1;
  float x[N * C * H * W], w[O * (C / G) * K * K], bias[O];
  for (int i = 0; i < N * C * H * W; ++i) x[i] = (float)((i * 7) % 11) * 0.25f - 1;
  for (int i = 0; i < O * (C / G) * K * K; ++i) w[i] = (float)((i * 5) % 9) * 0.125f - 0.5f;
  for (int i = 0; i < O; ++i) bias[i] = (float)i;
  tpu_tensor_t tx, tw, tb, z;
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){N, C, H, W}, x, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 4, (int64_t[]){O, C / G, K, K}, w, &tw));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){O}, bias, &tb));
  int64_t s2[2] = {stride, stride}, p2[2] = {pad, pad}, d2[2] = {dil, dil}, op2[2] = {0, 0};
  tpu_arg_t args[9] = {kit_arg_tensor(&tx), kit_arg_tensor(&tw), kit_arg_tensor(&tb), kit_arg_ints(2, s2),
                       kit_arg_ints(2, p2),      kit_arg_ints(2, d2),      kit_arg_bool(false),    kit_arg_ints(2, op2),
                       kit_arg_int(G)};
  ASSERT_OK(kit_run1("convolution_overrideable", "", args, 9, &z));
  const int OH = (H + 2 * pad - dil * (K - 1) - 1) / stride + 1, OW = (W + 2 * pad - dil * (K - 1) - 1) / stride + 1;
  ASSERT_EQ_INT(z.rank, 4);
  EXPECT_EQ_INT(z.sizes[1], O);
  EXPECT_EQ_INT(z.sizes[2], OH);
  EXPECT_EQ_INT(z.sizes[3], OW);
  float out[N * O * 4 * 3];
  ASSERT_OK(kit_read_f32(&z, out, N * O * OH * OW));
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < O; ++o)
      for (int i = 0; i < OH; ++i)
        for (int j = 0; j < OW; ++j)
          EXPECT_NEAR(out[((n * O + o) * OH + i) * OW + j],
                      ref_conv(x, w, C, H, W, O, K, G, stride, pad, dil, n, o, i, j) + bias[o], 1e-4);
  kit_release(&z);
  /* groups that do not divide the channels: PyTorch's message, no abort. */
  args[8] = kit_arg_int(3);
  EXPECT_CODE(kit_run1("convolution_overrideable", "", args, 9, &z), TPU_INVALID_ARGUMENT);
  kit_release(&tx);
  kit_release(&tw);
  kit_release(&tb);
}
