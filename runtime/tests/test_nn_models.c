/* nn_models family lowerings on the CPU plugin, without torch: weight norm forward
 * and backward against the formulas on the host, and a bad g shape. */
#include <math.h>

#include "kit.h"
#include "test.h"

enum { WN_R = 3, WN_C = 4 }; /* v: [R, C], norm over dim 1 (dim = 0 keeps rows) */

static void wn_data(float* v, float* g, float* gw) {
  for (int i = 0; i < WN_R * WN_C; ++i) v[i] = (float)sin(i * 1.3) * 2.0f, gw[i] = (float)cos(i * 0.7);
  for (int r = 0; r < WN_R; ++r) g[r] = 0.5f + (float)r;
}

TEST(nn_models_weight_norm_forward_backward) {
  float v[WN_R * WN_C], g[WN_R], gw[WN_R * WN_C];
  wn_data(v, g, gw);
  tpu_tensor_t tv, tg, tgw, out[KIT_MAX_OUTS], grads[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){WN_R, WN_C}, v, &tv));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){WN_R, 1}, g, &tg));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){WN_R, WN_C}, gw, &tgw));
  tpu_arg_t args[3] = {kit_arg_tensor(&tv), kit_arg_tensor(&tg), kit_arg_int(0)};
  int n = 0;
  ASSERT_OK(kit_run("_weight_norm_interface", "", args, 3, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 2);
  float ew[WN_R * WN_C], en[WN_R], egv[WN_R * WN_C], egg[WN_R];
  for (int r = 0; r < WN_R; ++r) {
    double s = 0, d = 0;
    for (int c = 0; c < WN_C; ++c) s += (double)v[r * WN_C + c] * v[r * WN_C + c];
    for (int c = 0; c < WN_C; ++c) d += (double)gw[r * WN_C + c] * v[r * WN_C + c];
    double norm = sqrt(s);
    en[r] = (float)norm;
    egg[r] = (float)(d / norm);
    for (int c = 0; c < WN_C; ++c) {
      ew[r * WN_C + c] = (float)(v[r * WN_C + c] * g[r] / norm);
      egv[r * WN_C + c] = (float)(g[r] / norm * (gw[r * WN_C + c] - v[r * WN_C + c] * d / (norm * norm)));
    }
  }
  tpu_tensor_t norms = out[1];
  tpu_arg_t bargs[5] = {kit_arg_tensor(&tgw), kit_arg_tensor(&tv), kit_arg_tensor(&tg), kit_arg_tensor(&norms),
                        kit_arg_int(0)};
  int nb = 0;
  ASSERT_OK(kit_run("_weight_norm_interface_backward", "", bargs, 5, KIT_MAX_OUTS, grads, &nb));
  ASSERT_EQ_INT(nb, 2);
  KIT_CHECK("w", &out[0], TPU_F32, 2, (int64_t[]){WN_R, WN_C}, ew, WN_R * WN_C, 1e-5);
  KIT_CHECK("norms", &out[1], TPU_F32, 2, (int64_t[]){WN_R, 1}, en, WN_R, 1e-5);
  KIT_CHECK("grad_v", &grads[0], TPU_F32, 2, (int64_t[]){WN_R, WN_C}, egv, WN_R * WN_C, 1e-5);
  KIT_CHECK("grad_g", &grads[1], TPU_F32, 2, (int64_t[]){WN_R, 1}, egg, WN_R, 1e-5);
  kit_release(&tv);
  kit_release(&tg);
  kit_release(&tgw);
}

TEST(nn_models_weight_norm_bad_g_is_an_error) {
  float v[WN_R * WN_C] = {0}, g[WN_C] = {0};
  tpu_tensor_t tv, tg, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){WN_R, WN_C}, v, &tv));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){1, WN_C}, g, &tg));
  tpu_arg_t args[3] = {kit_arg_tensor(&tv), kit_arg_tensor(&tg), kit_arg_int(0)};
  int n = 0;
  EXPECT_CODE(kit_run("_weight_norm_interface", "", args, 3, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(kit_run("_weight_norm_interface", "", (tpu_arg_t[]){args[0], args[1], kit_arg_int(5)}, 3,
                      KIT_MAX_OUTS, out, &n), TPU_OUT_OF_RANGE);
  kit_release(&tv);
  kit_release(&tg);
}

/* CTC: T = 2 steps, labels {blank 0, 1}, target "1": the paths 11, 01, 10 collapse to it. */
TEST(nn_models_ctc_loss_two_steps) {
  float y[2][2] = {{0.3f, 0.7f}, {0.6f, 0.4f}}; /* probabilities per step: blank, 1 */
  float lp[4];
  for (int i = 0; i < 4; ++i) lp[i] = logf(y[i / 2][i % 2]);
  int64_t tg[1] = {1};
  tpu_tensor_t tlp, ttg, out[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 3, (int64_t[]){2, 1, 2}, lp, &tlp));
  ASSERT_OK(kit_tensor(TPU_I64, 2, (int64_t[]){1, 1}, tg, &ttg));
  int64_t il[1] = {2}, tl[1] = {1};
  tpu_arg_t args[6] = {kit_arg_tensor(&tlp), kit_arg_tensor(&ttg), kit_arg_ints(1, il), kit_arg_ints(1, tl),
                       kit_arg_int(0), kit_arg_bool(false)};
  int n = 0;
  ASSERT_OK(kit_run("_ctc_loss", "", args, 6, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 2);
  double p = (double)y[0][1] * y[1][1] + (double)y[0][0] * y[1][1] + (double)y[0][1] * y[1][0];
  float want = (float)-log(p);
  KIT_CHECK("nll", &out[0], TPU_F32, 1, (int64_t[]){1}, &want, 1, 1e-5);
  EXPECT_EQ_INT(out[1].rank, 3);
  EXPECT_EQ_INT(out[1].sizes[2], 3); /* 2 * max target length + 1 */
  kit_release(&out[1]);
  args[4] = kit_arg_int(2); /* blank outside the 2 labels */
  EXPECT_CODE(kit_run("_ctc_loss", "", args, 6, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  kit_release(&tlp);
  kit_release(&ttg);
}
