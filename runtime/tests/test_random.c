/* Random family: the lowerings compile and give numbers with the right ranges and
 * statistics; the generator is reproducible from a seed and advances per call. */
#include <stdlib.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/runtime.h"

/* An uninitialised f32 / other tensor of n elements (the `self` of an in-place op). */
static tpu_status_t* rnd_empty(tpu_dtype_t t, int64_t n, tpu_tensor_t* out) { return kit_tensor(t, 1, &n, NULL, out); }

/* Runs op on `self` and reads the result back as floats (malloc'd, n elements). */
static float* rnd_run(const char* name, const char* overload, const tpu_arg_t* args, int nargs, int64_t n) {
  tpu_tensor_t z;
  float* out = malloc((size_t)n * sizeof(float));
  if (!tpu_test_check_ok(kit_run1(name, overload, args, nargs, &z), name, __FILE__, __LINE__)) {
    free(out);
    return NULL;
  }
  bool ok = tpu_test_check_ok(kit_read_f32(&z, out, n), "read", __FILE__, __LINE__);
  kit_release(&z);
  if (!ok) {
    free(out);
    return NULL;
  }
  return out;
}

static void rnd_moments(const float* v, int64_t n, double* mean, double* var) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) s += v[i];
  *mean = s / (double)n;
  for (int64_t i = 0; i < n; ++i) s2 += (v[i] - *mean) * (v[i] - *mean);
  *var = s2 / (double)n;
}

#define RND_N 20000

TEST(random_uniform_range_and_moments) {
  tpu_tensor_t self;
  ASSERT_OK(rnd_empty(TPU_F32, RND_N, &self));
  tpu_arg_t args[3] = {kit_arg_tensor(&self), kit_arg_float(2.0), kit_arg_float(5.0)};
  float* v = rnd_run("uniform", "", args, 3, RND_N);
  ASSERT(v != NULL);
  float lo = v[0], hi = v[0];
  for (int i = 0; i < RND_N; ++i) {
    lo = fminf(lo, v[i]);
    hi = fmaxf(hi, v[i]);
  }
  EXPECT(lo >= 2.0f && hi < 5.0f);
  double mean, var;
  rnd_moments(v, RND_N, &mean, &var);
  /* U(2, 5): mean 3.5, variance 0.75; 6 standard errors. */
  EXPECT_NEAR(mean, 3.5, 6 * sqrt(0.75 / RND_N));
  EXPECT_NEAR(var, 0.75, 0.05);
  free(v);
  kit_release(&self);
}

TEST(random_normal_seed_replays) {
  tpu_tensor_t self;
  ASSERT_OK(rnd_empty(TPU_F32, RND_N, &self));
  tpu_arg_t args[3] = {kit_arg_tensor(&self), kit_arg_float(1.0), kit_arg_float(2.0)};
  tpu_generator_set_seed(tpu_generator_default(0), 1234);
  float* a = rnd_run("normal", "", args, 3, RND_N);
  float* b = rnd_run("normal", "", args, 3, RND_N);
  tpu_generator_set_seed(tpu_generator_default(0), 1234);
  float* c = rnd_run("normal", "", args, 3, RND_N);
  ASSERT(a && b && c);
  EXPECT(memcmp(a, c, RND_N * sizeof(float)) == 0);
  int same = 0;
  for (int i = 0; i < RND_N; ++i) same += a[i] == b[i];
  EXPECT(same < 10);
  /* The next call is not the previous one shifted by an element either. */
  int shifted = 0;
  for (int i = 0; i + 1 < RND_N; ++i) shifted += a[i + 1] == b[i];
  EXPECT(shifted < 10);
  double mean, var;
  rnd_moments(a, RND_N, &mean, &var);
  EXPECT_NEAR(mean, 1.0, 6 * 2.0 / sqrt(RND_N));
  EXPECT_NEAR(var, 4.0, 0.3);
  free(a);
  free(b);
  free(c);
  kit_release(&self);
}

TEST(random_random_from_to_int32) {
  tpu_tensor_t self;
  ASSERT_OK(rnd_empty(TPU_I32, RND_N, &self));
  tpu_arg_t args[3] = {kit_arg_tensor(&self), kit_arg_int(-3), kit_arg_int(4)};
  float* v = rnd_run("random", "from", args, 3, RND_N);
  ASSERT(v != NULL);
  int hits[7] = {0};
  bool in_range = true;
  for (int i = 0; i < RND_N; ++i) {
    int k = (int)v[i] + 3;
    in_range = in_range && k >= 0 && k < 7 && (float)(k - 3) == v[i];
    if (k >= 0 && k < 7) hits[k]++;
  }
  EXPECT(in_range);
  for (int k = 0; k < 7; ++k) EXPECT(abs(hits[k] - RND_N / 7) < 6 * 110); /* sd ~ 107 */
  free(v);
  tpu_arg_t bad[3] = {kit_arg_tensor(&self), kit_arg_int(4), kit_arg_int(4)};
  tpu_tensor_t z;
  EXPECT_CODE(kit_run1("random", "from", bad, 3, &z), TPU_INVALID_ARGUMENT);
  kit_release(&self);
}

TEST(random_randperm_is_permutation) {
  const int64_t n = 1000;
  tpu_arg_t args[1] = {kit_arg_int(n)};
  float* v = rnd_run("randperm", "out", args, 1, n);
  ASSERT(v != NULL);
  char seen[1000] = {0};
  int fixed = 0;
  for (int64_t i = 0; i < n; ++i) {
    int k = (int)v[i];
    ASSERT(k >= 0 && k < n && !seen[k]);
    seen[k] = 1;
    fixed += k == i;
  }
  EXPECT(fixed < 10); /* a random permutation has ~1 fixed point */
  free(v);
}

TEST(random_multinomial_without_replacement) {
  float p[2][8] = {{1, 1, 1, 1, 1, 1, 1, 1}, {0, 0, 1, 0, 2, 0, 3, 0}};
  tpu_tensor_t probs;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 8}, p, &probs));
  tpu_arg_t args[3] = {kit_arg_tensor(&probs), kit_arg_int(3), kit_arg_bool(false)};
  for (int rep = 0; rep < 5; ++rep) {
    float* v = rnd_run("multinomial", "", args, 3, 6);
    ASSERT(v != NULL);
    /* Row 0: three distinct categories; row 1: exactly the three non-zero ones. */
    EXPECT(v[0] != v[1] && v[1] != v[2] && v[0] != v[2]);
    for (int j = 3; j < 6; ++j) EXPECT(v[j] == 2 || v[j] == 4 || v[j] == 6);
    EXPECT(v[3] + v[4] + v[5] == 12);
    free(v);
  }
  tpu_tensor_t z;
  args[1] = kit_arg_int(9);
  EXPECT_CODE(kit_run1("multinomial", "", args, 3, &z), TPU_INVALID_ARGUMENT);
  kit_release(&probs);
}

TEST(random_native_dropout_mask_and_scale) {
  float ones[RND_N];
  for (int i = 0; i < RND_N; ++i) ones[i] = 1.0f;
  tpu_tensor_t x;
  int64_t n = RND_N;
  ASSERT_OK(kit_tensor(TPU_F32, 1, &n, ones, &x));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_float(0.25), kit_arg_bool(true)};
  tpu_result_t r[2];
  int nr = 0;
  ASSERT_OK(tpu_op_run("native_dropout", "", 0, args, 3, 2, r, &nr));
  ASSERT_EQ_INT(nr, 2);
  EXPECT_EQ_INT(r[1].dtype, TPU_BOOL);
  tpu_tensor_t out = {r[0].storage, r[0].dtype, 1, {RND_N}, {1}, 0};
  tpu_tensor_t mask = {r[1].storage, r[1].dtype, 1, {RND_N}, {1}, 0};
  static float yv[RND_N], mv[RND_N];
  ASSERT_OK(kit_read_f32(&out, yv, RND_N));
  ASSERT_OK(kit_read_f32(&mask, mv, RND_N));
  int zeros = 0;
  bool consistent = true;
  for (int i = 0; i < RND_N; ++i) {
    zeros += mv[i] == 0;
    consistent = consistent && fabsf(yv[i] - mv[i] / 0.75f) < 1e-6f;
  }
  EXPECT(consistent);
  /* Binomial(n, 0.25): sd = sqrt(n * 0.1875) ~ 61. */
  EXPECT(abs(zeros - RND_N / 4) < 6 * 62);
  tpu_storage_release(r[0].storage);
  tpu_storage_release(r[1].storage);
  args[1] = kit_arg_float(1.5);
  EXPECT_CODE(tpu_op_run("native_dropout", "", 0, args, 3, 2, r, &nr), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

TEST(random_rejects_bad_parameters) {
  tpu_tensor_t f, i;
  ASSERT_OK(rnd_empty(TPU_F32, 4, &f));
  ASSERT_OK(rnd_empty(TPU_I64, 4, &i));
  tpu_tensor_t z;
  tpu_arg_t a[3] = {kit_arg_tensor(&f), kit_arg_float(0.0), kit_arg_float(-1.0)};
  EXPECT_CODE(kit_run1("normal", "", a, 3, &z), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_float(1.0);
  a[2] = kit_arg_float(0.0);
  EXPECT_CODE(kit_run1("uniform", "", a, 3, &z), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_float(0.0);
  EXPECT_CODE(kit_run1("exponential", "", a, 2, &z), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(kit_run1("geometric", "", a, 2, &z), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_float(1.5);
  EXPECT_CODE(kit_run1("bernoulli", "float", a, 2, &z), TPU_INVALID_ARGUMENT);
  a[0] = kit_arg_tensor(&i);
  EXPECT_CODE(kit_run1("normal", "", a, 1, &z), TPU_UNIMPLEMENTED);
  EXPECT_CODE(kit_run1("exponential", "", a, 1, &z), TPU_INVALID_ARGUMENT);
  kit_release(&f);
  kit_release(&i);
}
