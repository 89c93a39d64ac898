/* Device-side checks (check.h): an out-of-range index is recorded on the device
 * and raised at the next sync (strict) or at the op (debug), first error wins,
 * the device stays usable, and the cache key ignores the message. */
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "test.h"

static float ck_iota[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

/* Checks that `st` has `code` and a message containing `a` and `b` (NULL: any). */
#define EXPECT_ERROR(st, code, a, b) ck_expect_error((st), (code), (a), (b), __FILE__, __LINE__)
static void ck_expect_error(tpu_status_t* st, tpu_status_code_t code, const char* a, const char* b, const char* file,
                            int line) {
  if (!st) {
    tpu_test_fail(file, line, "expected %s, got OK", tpu_status_code_name(code));
    return;
  }
  const char* m = tpu_status_message(st);
  if (tpu_status_code(st) != code) tpu_test_fail(file, line, "code %s, expected %s: %s",
                                                 tpu_status_code_name(tpu_status_code(st)),
                                                 tpu_status_code_name(code), m);
  if (a && !strstr(m, a)) tpu_test_fail(file, line, "message lacks \"%s\": %s", a, m);
  if (b && !strstr(m, b)) tpu_test_fail(file, line, "message lacks \"%s\": %s", b, m);
  tpu_status_free(st);
}

/* x.index_select(0, idx) for a [3, 4] x and a 1-D index of n values. */
static tpu_status_t* ck_index_select(const tpu_tensor_t* x, int n, const int64_t* iv, tpu_tensor_t* out) {
  tpu_tensor_t idx;
  TPU_RETURN_IF_ERROR(kit_tensor(TPU_I64, 1, (int64_t[]){n}, iv, &idx));
  tpu_arg_t args[3] = {kit_arg_tensor(x), kit_arg_int(0), kit_arg_tensor(&idx)};
  tpu_status_t* st = kit_run1("index_select", "", args, 3, out);
  kit_release(&idx);
  return st;
}

TEST(check_strict_raises_at_next_download_and_recovers) {
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, ck_iota, &x));
  int64_t checked = tpu_metric_get(TPU_METRIC_CHECKED_OPS);
  /* The op itself succeeds: nothing waits for the device. */
  ASSERT_OK(ck_index_select(&x, 2, (int64_t[]){0, 5}, &out));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CHECKED_OPS), checked + 1);
  float o[8];
  EXPECT_ERROR(kit_read_f32(&out, o, 8), TPU_OUT_OF_RANGE, "aten::index_select: index out of range in self",
               "raised at the next synchronisation");
  kit_release(&out);
  /* Reported once: the next op and download are clean. */
  ASSERT_OK(ck_index_select(&x, 2, (int64_t[]){2, 0}, &out));
  ASSERT_OK(kit_read_f32(&out, o, 8));
  for (int j = 0; j < 4; ++j) {
    EXPECT_NEAR(o[j], 8 + j, 0);
    EXPECT_NEAR(o[4 + j], j, 0);
  }
  kit_release(&out);
  ASSERT_OK(tpu_runtime_synchronize());
  kit_release(&x);
}

TEST(check_synchronize_reports_value_and_first_error_wins) {
  tpu_tensor_t x, idx, out, out2;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, ck_iota, &x));
  /* gather: PyTorch's RuntimeError text with the offending index. */
  int64_t gv[3] = {0, 7, 1};
  ASSERT_OK(kit_tensor(TPU_I64, 2, (int64_t[]){3, 1}, gv, &idx));
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_int(1), kit_arg_tensor(&idx)};
  ASSERT_OK(kit_run1("gather", "", args, 3, &out));
  kit_release(&idx);
  /* A second failing op: the gather's error is the one reported. */
  ASSERT_OK(ck_index_select(&x, 1, (int64_t[]){9}, &out2));
  EXPECT_ERROR(tpu_runtime_synchronize(), TPU_INVALID_ARGUMENT, "aten::gather",
               "index 7 is out of bounds for dimension 1 with size 4");
  ASSERT_OK(tpu_runtime_synchronize());
  kit_release(&out);
  kit_release(&out2);
  kit_release(&x);
}

TEST(check_debug_mode_raises_at_the_op) {
  tpu_tensor_t x, idx, out;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){12}, ck_iota, &x));
  int64_t tv[2] = {-12, 12}; /* take wraps -12, 12 is past the end */
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, tv, &idx));
  tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_tensor(&idx)};
  tpu_runtime_set_eager_mode(TPU_EAGER_DEBUG);
  tpu_status_t* st = kit_run1("take", "", args, 2, &out);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  /* At the op: the binding names the op, so the message is PyTorch's alone. */
  EXPECT_ERROR(st, TPU_OUT_OF_RANGE, "out of range: tried to access index 12 on a tensor of 12 elements.", NULL);
  kit_release(&idx);
  ASSERT_OK(tpu_runtime_synchronize());
  kit_release(&x);
}

TEST(check_message_is_not_in_the_cache_key) {
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, ck_iota, &x));
  ASSERT_OK(ck_index_select(&x, 2, (int64_t[]){1, 2}, &out));
  kit_release(&out);
  ASSERT_OK(tpu_runtime_synchronize());
  int64_t compiles = tpu_metric_get(TPU_METRIC_COMPILES);
  /* Same signature, bad then good values: no recompile either way. */
  ASSERT_OK(ck_index_select(&x, 2, (int64_t[]){1, -1}, &out));
  kit_release(&out);
  EXPECT_ERROR(tpu_runtime_synchronize(), TPU_OUT_OF_RANGE, "index out of range in self", NULL);
  ASSERT_OK(ck_index_select(&x, 2, (int64_t[]){0, 2}, &out));
  kit_release(&out);
  ASSERT_OK(tpu_runtime_synchronize());
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES), compiles);
  kit_release(&x);
}

TEST(check_unchecked_ops_do_not_read_the_word) {
  tpu_tensor_t x, out;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){12}, ck_iota, &x));
  ASSERT_OK(tpu_runtime_synchronize());
  int64_t reads = tpu_metric_get(TPU_METRIC_CHECK_READS);
  int64_t checked = tpu_metric_get(TPU_METRIC_CHECKED_OPS);
  tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_tensor(&x), kit_arg_scalar_i(1)};
  ASSERT_OK(kit_run1("add", "Tensor", args, 3, &out));
  float o[12];
  ASSERT_OK(kit_read_f32(&out, o, 12));
  ASSERT_OK(tpu_runtime_synchronize());
  EXPECT_NEAR(o[11], 22, 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CHECK_READS), reads);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CHECKED_OPS), checked);
  kit_release(&out);
  kit_release(&x);
}

TEST(check_nll_loss_targets_and_ignore_index) {
  float logp[6] = {-1, -2, -3, -4, -5, -6};
  tpu_tensor_t x, t, outs[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, logp, &x));
  int64_t tv[2] = {2, -100}; /* the second target is ignored */
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, tv, &t));
  tpu_arg_t args[5] = {kit_arg_tensor(&x), kit_arg_tensor(&t), kit_arg_none(), kit_arg_int(2), kit_arg_int(-100)};
  int n = 0;
  ASSERT_OK(kit_run("nll_loss_forward", "", args, 5, KIT_MAX_OUTS, outs, &n));
  float v;
  ASSERT_OK(kit_read_f32(&outs[0], &v, 1));
  EXPECT_NEAR(v, 3, 0);
  kit_release_all(outs, n);
  kit_release(&t);
  int64_t bad[2] = {3, 0};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, bad, &t));
  args[1] = kit_arg_tensor(&t);
  ASSERT_OK(kit_run("nll_loss_forward", "", args, 5, KIT_MAX_OUTS, outs, &n));
  EXPECT_ERROR(kit_read_f32(&outs[0], &v, 1), TPU_OUT_OF_RANGE, "aten::nll_loss_forward", "Target 3 is out of bounds.");
  kit_release_all(outs, n);
  kit_release(&t);
  kit_release(&x);
}
