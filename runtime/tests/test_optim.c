/* optim family lowerings on the CPU plugin, without torch: the fused Adam(W), SGD and
 * Adagrad steps against the update rules written out in double, the found_inf skip,
 * the write-back layout (one result per element of each mutated list), long lists
 * and bad arguments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "test.h"

enum { N3 = 3 };
static const float P[N3] = {0.5f, -1.25f, 2.0f};
static const float G[N3] = {0.3f, -0.7f, 1.5f};
static const float M[N3] = {0.1f, 0.2f, -0.3f};
static const float V[N3] = {0.04f, 0.01f, 0.2f};
static const float VMAX[N3] = {0.05f, 0.001f, 0.3f};

/* A 0-d float32 tensor. */
static tpu_status_t* scalar_tensor(float v, tpu_tensor_t* out) { return kit_tensor(TPU_F32, 0, NULL, &v, out); }

/* One AdamW step with amsgrad, grad_scale and found_inf as given; 5 lists of one element. */
static tpu_status_t* run_adamw(float found, const float* grad, tpu_tensor_t* outs, int* n) {
  tpu_tensor_t t[6], gs, fi;
  const float* src[5] = {P, grad, M, V, VMAX};
  for (int i = 0; i < 5; ++i) TPU_RETURN_IF_ERROR(kit_tensor(TPU_F32, 1, (int64_t[]){N3}, src[i], &t[i]));
  TPU_RETURN_IF_ERROR(scalar_tensor(2.0f, &t[5]));
  TPU_RETURN_IF_ERROR(scalar_tensor(2.0f, &gs));
  TPU_RETURN_IF_ERROR(scalar_tensor(found, &fi));
  tpu_arg_t args[15];
  for (int i = 0; i < 6; ++i) args[i] = kit_arg_tensors(1, &t[i]);
  args[6] = kit_arg_float(0.1);
  args[7] = kit_arg_float(0.9);
  args[8] = kit_arg_float(0.999);
  args[9] = kit_arg_float(0.01);
  args[10] = kit_arg_float(1e-8);
  args[11] = kit_arg_bool(true);
  args[12] = kit_arg_bool(false);
  args[13] = kit_arg_tensor(&gs);
  args[14] = kit_arg_tensor(&fi);
  tpu_status_t* st = kit_run("_fused_adamw", "", args, 15, KIT_MAX_OUTS, outs, n);
  kit_release_all(t, 6);
  kit_release(&gs);
  kit_release(&fi);
  return st;
}

TEST(optim_fused_adamw_amsgrad_scaled_step) {
  tpu_tensor_t out[KIT_MAX_OUTS];
  int n = 0;
  ASSERT_OK(run_adamw(0.0f, G, out, &n));
  ASSERT_EQ_INT(n, 5);
  /* The update rule at step 2 (the optimizer has already counted this step). */
  float ep[N3], eg[N3], em[N3], ev[N3], evmax[N3];
  double lr = 0.1, b1 = 0.9, b2 = 0.999, wd = 0.01, eps = 1e-8, step = 2;
  for (int i = 0; i < N3; ++i) {
    double g = G[i] / 2.0, p = P[i] * (1 - lr * wd);
    double m = M[i] * b1 + g * (1 - b1), v = V[i] * b2 + g * g * (1 - b2);
    double vmax = fmax(VMAX[i], v);
    double denom = sqrt(vmax) / sqrt(1 - pow(b2, step)) + eps;
    ep[i] = (float)(p - lr / (1 - pow(b1, step)) * m / denom);
    eg[i] = (float)g, em[i] = (float)m, ev[i] = (float)v, evmax[i] = (float)vmax;
  }
  const int64_t s[1] = {N3};
  KIT_CHECK("param", &out[0], TPU_F32, 1, s, ep, N3, 1e-6);
  KIT_CHECK("grad (unscaled in place)", &out[1], TPU_F32, 1, s, eg, N3, 1e-6);
  KIT_CHECK("exp_avg", &out[2], TPU_F32, 1, s, em, N3, 1e-6);
  KIT_CHECK("exp_avg_sq", &out[3], TPU_F32, 1, s, ev, N3, 1e-6);
  KIT_CHECK("max_exp_avg_sq", &out[4], TPU_F32, 1, s, evmax, N3, 1e-6);
}

TEST(optim_found_inf_skips_everything) {
  /* An inf gradient with found_inf = 1: every list comes back unchanged, no NaN leaks. */
  const float ginf[N3] = {INFINITY, -0.7f, 1.5f};
  tpu_tensor_t out[KIT_MAX_OUTS];
  int n = 0;
  ASSERT_OK(run_adamw(1.0f, ginf, out, &n));
  ASSERT_EQ_INT(n, 5);
  const int64_t s[1] = {N3};
  const float* want[5] = {P, ginf, M, V, VMAX};
  for (int i = 0; i < 5; ++i) KIT_CHECK("unchanged", &out[i], TPU_F32, 1, s, want[i], N3, 0.0);
}

TEST(optim_fused_sgd_nesterov_mixed_shapes_tensor_lr) {
  /* Two params (2x2 and 0-d), momentum buffers, lr as a runtime scalar (.tensor_lr). */
  float p0[4] = {1, 2, 3, 4}, g0[4] = {0.5f, -0.5f, 0.25f, 1}, b0[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  float p1 = -2, g1 = 0.75f, b1 = -0.5f;
  tpu_tensor_t p[2], g[2], b[2];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, p0, &p[0]));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, g0, &g[0]));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 2}, b0, &b[0]));
  ASSERT_OK(scalar_tensor(p1, &p[1]));
  ASSERT_OK(scalar_tensor(g1, &g[1]));
  ASSERT_OK(scalar_tensor(b1, &b[1]));
  double wd = 0.1, mom = 0.9, lr = 0.05, damp = 0.2;
  tpu_arg_t args[12] = {kit_arg_tensors(2, p),   kit_arg_tensors(2, g),   kit_arg_tensors(2, b),
                        kit_arg_float(wd),       kit_arg_float(mom),      kit_arg_scalar_f(lr),
                        kit_arg_float(damp),     kit_arg_bool(true),      kit_arg_bool(true),
                        kit_arg_bool(false),     kit_arg_none(),          kit_arg_none()};
  tpu_tensor_t out[KIT_MAX_OUTS];
  int n = 0;
  ASSERT_OK(kit_run("_fused_sgd", "tensor_lr", args, 12, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, 6);
  float ep[5], eb[5];
  const float* pp[5] = {&p0[0], &p0[1], &p0[2], &p0[3], &p1};
  const float* gg[5] = {&g0[0], &g0[1], &g0[2], &g0[3], &g1};
  const float* bb[5] = {&b0[0], &b0[1], &b0[2], &b0[3], &b1};
  for (int i = 0; i < 5; ++i) {
    double gr = -*gg[i] + *pp[i] * wd; /* maximize, then weight decay */
    double buf = *bb[i] * mom + gr * (1 - damp);
    eb[i] = (float)buf;
    ep[i] = (float)(*pp[i] - (gr + buf * mom) * lr);
  }
  KIT_CHECK("param0", &out[0], TPU_F32, 2, (int64_t[]){2, 2}, ep, 4, 1e-6);
  KIT_CHECK("param1", &out[1], TPU_F32, 0, NULL, &ep[4], 1, 1e-6);
  KIT_CHECK("grad0", &out[2], TPU_F32, 2, (int64_t[]){2, 2}, g0, 4, 0.0);
  KIT_CHECK("grad1", &out[3], TPU_F32, 0, NULL, &g1, 1, 0.0);
  KIT_CHECK("buf0", &out[4], TPU_F32, 2, (int64_t[]){2, 2}, eb, 4, 1e-6);
  KIT_CHECK("buf1", &out[5], TPU_F32, 0, NULL, &eb[4], 1, 1e-6);
  kit_release_all(p, 2);
  kit_release_all(g, 2);
  kit_release_all(b, 2);
}

/* Adagrad at step 3 with lr_decay; `overload` decides whether state_steps is written. */
static void check_adagrad(const char* overload, int want_n) {
  tpu_tensor_t p, g, s, st;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N3}, P, &p));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N3}, G, &g));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N3}, V, &s));
  ASSERT_OK(scalar_tensor(3.0f, &st));
  double lr = 0.1, decay = 0.05, eps = 1e-10;
  tpu_arg_t args[11] = {kit_arg_tensors(1, &p),
                        kit_arg_tensors(1, &g),
                        kit_arg_tensors(1, &s),
                        kit_arg_tensors(1, &st),
                        strcmp(overload, "tensor_lr") == 0 ? kit_arg_scalar_f(lr) : kit_arg_float(lr),
                        kit_arg_float(decay),
                        kit_arg_float(0.0),
                        kit_arg_float(eps),
                        kit_arg_bool(false),
                        kit_arg_none(),
                        kit_arg_none()};
  tpu_tensor_t out[KIT_MAX_OUTS];
  int n = 0;
  ASSERT_OK(kit_run("_fused_adagrad", overload, args, 11, KIT_MAX_OUTS, out, &n));
  ASSERT_EQ_INT(n, want_n);
  float ep[N3], es[N3];
  double clr = lr / (1 + (3 - 1) * decay);
  for (int i = 0; i < N3; ++i) {
    double sum = V[i] + (double)G[i] * G[i];
    es[i] = (float)sum;
    ep[i] = (float)(P[i] - clr * G[i] / (sqrt(sum) + eps));
  }
  const int64_t sz[1] = {N3};
  KIT_CHECK("param", &out[0], TPU_F32, 1, sz, ep, N3, 1e-6);
  KIT_CHECK("grad", &out[1], TPU_F32, 1, sz, G, N3, 0.0);
  KIT_CHECK("sum", &out[2], TPU_F32, 1, sz, es, N3, 1e-6);
  if (want_n == 4) KIT_CHECK("state_steps (unchanged)", &out[3], TPU_F32, 0, NULL, (float[]){3.0f}, 1, 0.0);
  kit_release(&p);
  kit_release(&g);
  kit_release(&s);
  kit_release(&st);
}

TEST(optim_fused_adagrad_float_lr_writes_steps) { check_adagrad("", 4); }
TEST(optim_fused_adagrad_tensor_lr) { check_adagrad("tensor_lr", 3); }

TEST(optim_long_lists_have_no_cap) {
  /* 300 params in one call: 600 results (params and grads), past any small cap. */
  enum { K = 300 };
  tpu_tensor_t* p = calloc(K, sizeof(*p));
  tpu_tensor_t* g = calloc(K, sizeof(*g));
  tpu_result_t* r = calloc(2 * K, sizeof(*r));
  ASSERT(p && g && r);
  for (int k = 0; k < K; ++k) {
    float pv = (float)k, gv = (float)(k % 7);
    ASSERT_OK(scalar_tensor(pv, &p[k]));
    ASSERT_OK(scalar_tensor(gv, &g[k]));
  }
  tpu_arg_t args[12] = {kit_arg_tensors(K, p), kit_arg_tensors(K, g), kit_arg_tensors(0, NULL), kit_arg_float(0),
                        kit_arg_float(0),      kit_arg_float(0.5),    kit_arg_float(0),         kit_arg_bool(false),
                        kit_arg_bool(false),   kit_arg_bool(false),   kit_arg_none(),           kit_arg_none()};
  int n = 0;
  EXPECT_OK(tpu_op_run("_fused_sgd", "", 0, args, 12, 2 * K, r, &n));
  EXPECT_EQ_INT(n, 2 * K);
  for (int k = 0; k < n; ++k) {
    tpu_tensor_t t = {.storage = r[k].storage, .dtype = r[k].dtype, .rank = r[k].rank};
    float got = 0, want = k < K ? (float)k - 0.5f * (float)(k % 7) : (float)((k - K) % 7);
    if (k == 0 || k == K - 1 || k == K || k == n - 1) {
      EXPECT_OK(kit_read_f32(&t, &got, 1));
      EXPECT_NEAR(got, want, 1e-6);
    }
    tpu_storage_release(r[k].storage);
  }
  kit_release_all(p, K);
  kit_release_all(g, K);
  free(p);
  free(g);
  free(r);
}

TEST(optim_bad_arguments) {
  tpu_tensor_t a, b, i;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N3}, P, &a));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2}, G, &b));
  int32_t iv[N3] = {1, 2, 3};
  ASSERT_OK(kit_tensor(TPU_I32, 1, (int64_t[]){N3}, iv, &i));
  tpu_tensor_t pair[2] = {a, a}, out[KIT_MAX_OUTS];
  int n = 0;
  tpu_arg_t args[12] = {kit_arg_tensors(1, &a), kit_arg_tensors(2, pair), kit_arg_tensors(0, NULL),
                        kit_arg_float(0),       kit_arg_float(0),         kit_arg_float(0.5),
                        kit_arg_float(0),       kit_arg_bool(false),      kit_arg_bool(false),
                        kit_arg_bool(false),    kit_arg_none(),           kit_arg_none()};
  /* grads longer than params */
  EXPECT_CODE(kit_run("_fused_sgd", "", args, 12, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  /* a grad of another shape */
  args[1] = kit_arg_tensors(1, &b);
  EXPECT_CODE(kit_run("_fused_sgd", "", args, 12, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  /* momentum without buffers */
  args[1] = kit_arg_tensors(1, &a);
  args[4] = kit_arg_float(0.9);
  EXPECT_CODE(kit_run("_fused_sgd", "", args, 12, KIT_MAX_OUTS, out, &n), TPU_INVALID_ARGUMENT);
  /* integer params: not implemented, as in PyTorch's kernels */
  args[4] = kit_arg_float(0);
  args[0] = kit_arg_tensors(1, &i);
  args[1] = kit_arg_tensors(1, &i);
  EXPECT_CODE(kit_run("_fused_sgd", "", args, 12, KIT_MAX_OUTS, out, &n), TPU_UNIMPLEMENTED);
  kit_release(&a);
  kit_release(&b);
  kit_release(&i);
}
