/* Fused eager mode (fuse.c): executions are recorded, not launched; a download
 * runs the recording as one program whose results equal strict mode's; results
 * nobody holds are not returned; writes into views and device-side checks keep
 * their eager meaning; a repeated recording is a cache hit. */
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kit.h"
#include "test.h"

/* x -> ((x + 0.001) * 0.999) n times, in the current eager mode. */
static tpu_status_t* fz_chain(const tpu_tensor_t* x0, int n, tpu_tensor_t* out) {
  tpu_tensor_t x = *x0;
  tpu_storage_retain(x.storage);
  tpu_status_t* st = NULL;
  for (int i = 0; i < n && !st; ++i) {
    tpu_tensor_t y;
    if (i % 2 == 0) {
      tpu_arg_t args[3] = {kit_arg_tensor(&x), kit_arg_scalar_f(1e-3), kit_arg_scalar_f(1.0)};
      st = kit_run1("add", "Scalar", args, 3, &y);
    } else {
      tpu_arg_t args[2] = {kit_arg_tensor(&x), kit_arg_scalar_f(0.999)};
      st = kit_run1("mul", "Scalar", args, 2, &y);
    }
    kit_release(&x);
    if (!st) x = y;
  }
  if (st) return st;
  *out = x;
  return NULL;
}

static const float fz_data[8] = {0.5f, -1.0f, 2.0f, 3.5f, -0.25f, 8.0f, 1e-3f, 100.0f};

TEST(fuse_chain_is_one_execution_equal_to_strict) {
  tpu_tensor_t x, a, b;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){8}, fz_data, &x));
  ASSERT_OK(fz_chain(&x, 100, &a));
  float want[8], got[8];
  ASSERT_OK(kit_read_f32(&a, want, 8));
  kit_release(&a);

  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  int64_t execs = tpu_metric_get(TPU_METRIC_EXECUTIONS), ops = tpu_metric_get(TPU_METRIC_FUSED_OPS);
  int64_t flushes = tpu_metric_get(TPU_METRIC_FUSED_FLUSHES);
  tpu_status_t* st = fz_chain(&x, 100, &b);
  /* Nothing ran yet: 100 recorded executions. */
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_EXECUTIONS), execs);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_FUSED_OPS), ops + 100);
  if (!st) st = kit_read_f32(&b, got, 8);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_EXECUTIONS), execs + 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_FUSED_FLUSHES), flushes + 1);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + (want[i] < 0 ? -want[i] : want[i])));
  kit_release(&b);

  /* The same recording again is the same program: no new one is built. */
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  int64_t programs = tpu_metric_get(TPU_METRIC_FUSED_PROGRAMS);
  st = fz_chain(&x, 100, &b);
  if (!st) st = kit_read_f32(&b, got, 8);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_FUSED_PROGRAMS), programs);
  kit_release(&b);
  kit_release(&x);
}

TEST(fuse_dead_results_are_not_kept) {
  tpu_tensor_t x, b;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){8}, fz_data, &x));
  ASSERT_OK(tpu_runtime_synchronize());
  int64_t live = tpu_metric_get(TPU_METRIC_LIVE_BUFFERS);
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  tpu_status_t* st = fz_chain(&x, 50, &b);
  if (!st) st = tpu_runtime_synchronize();
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  /* Only the last result of the chain exists (plus cached scalar operands,
   * which strict mode made already). */
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BUFFERS), live + 1);
  kit_release(&b);
  kit_release(&x);
}

TEST(fuse_view_write_and_index_check_keep_eager_meaning) {
  static const float iota[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  tpu_tensor_t x, y;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, iota, &x));
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  /* x[1] *= 2 through a view, then y = x[2:] * 1 reads the storage after it. */
  tpu_tensor_t row = kit_view(&x, 1, (int64_t[]){4}, (int64_t[]){1}, 4);
  tpu_arg_t margs[2] = {kit_arg_tensor(&row), kit_arg_scalar_f(2.0)};
  tpu_tensor_t doubled;
  tpu_status_t* st = kit_run1("mul", "Scalar", margs, 2, &doubled);
  if (!st) st = tpu_tensor_copy(&row, &doubled);
  if (!st) kit_release(&doubled);
  tpu_tensor_t all = kit_view(&x, 1, (int64_t[]){12}, (int64_t[]){1}, 0);
  tpu_arg_t cargs[2] = {kit_arg_tensor(&all), kit_arg_scalar_f(1.0)};
  if (!st) st = kit_run1("mul", "Scalar", cargs, 2, &y);
  float got[12];
  if (!st) st = kit_read_f32(&y, got, 12);
  /* An out-of-range index is reported at the download, naming the op. */
  tpu_tensor_t idx, sel;
  int64_t bad[2] = {0, 7};
  if (!st) st = kit_tensor(TPU_I64, 1, (int64_t[]){2}, bad, &idx);
  tpu_arg_t sargs[3] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_tensor(&idx)};
  if (!st) st = kit_run1("index_select", "", sargs, 3, &sel);
  float o[8];
  tpu_status_t* err = st ? NULL : kit_read_f32(&sel, o, 8);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(got[i], (i >= 4 && i < 8) ? 2 * iota[i] : iota[i], 0);
  EXPECT(err != NULL);
  if (err) {
    EXPECT(strstr(tpu_status_message(err), "index_select") != NULL);
    tpu_status_free(err);
  }
  kit_release(&sel);
  kit_release(&idx);
  kit_release(&y);
  kit_release(&x);
}

TEST(fuse_many_inputs_and_results_in_one_recording) {
  /* Every op brings a new input (a distinct scalar) and a result, so the
   * recording's tables grow past several capacities (the sanitizer build checks
   * every write). */
  tpu_tensor_t x, a, b;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){8}, fz_data, &x));
  float want[8], got[8];
  for (int mode = 0; mode < 2; ++mode) {
    tpu_runtime_set_eager_mode(mode ? TPU_EAGER_FUSED : TPU_EAGER_STRICT);
    tpu_tensor_t t = x;
    tpu_storage_retain(t.storage);
    tpu_status_t* st = NULL;
    for (int i = 0; i < 700 && !st; ++i) {
      tpu_arg_t args[3] = {kit_arg_tensor(&t), kit_arg_scalar_f(1e-4 * i), kit_arg_scalar_f(1.0)};
      tpu_tensor_t y;
      st = kit_run1("add", "Scalar", args, 3, &y);
      kit_release(&t);
      if (!st) t = y;
    }
    if (!st) st = kit_read_f32(&t, mode ? got : want, 8);
    tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
    ASSERT_OK(st);
    if (mode) b = t; else a = t;
  }
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-4 * (1 + (want[i] < 0 ? -want[i] : want[i])));
  kit_release(&a);
  kit_release(&b);
  kit_release(&x);
}

/* n in-place updates of x (fz_chain's first one or two ops, written back into
 * x's storage: each result takes its input's place), in the current eager mode. */
static tpu_status_t* fz_chain_in_place(const tpu_tensor_t* x, int n) {
  tpu_status_t* st = NULL;
  for (int i = 0; i < n && !st; ++i) {
    tpu_tensor_t y;
    st = fz_chain(x, 1 + i % 2, &y);
    if (!st) st = tpu_tensor_copy(x, &y);
    if (!st) kit_release(&y);
  }
  return st;
}

/* With donation on (TORCHTPU_FUSED_DONATE=1), a buffer the recording holds
 * alone (its storage was overwritten while recording: an optimizer step's
 * parameters and state) is donated to the value that replaced it; one something
 * else still holds is not. Off (the default), nothing is. Results equal strict's. */
TEST(fuse_buffers_held_only_by_the_recording_are_donated) {
  float want[8], got[8];
  tpu_tensor_t x;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){8}, fz_data, &x));
  ASSERT_OK(fz_chain_in_place(&x, 30));
  ASSERT_OK(kit_read_f32(&x, want, 8));
  kit_release(&x);

  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){8}, fz_data, &x));
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  tpu_fuse_set_donation(false);
  tpu_status_t* st = fz_chain_in_place(&x, 10); /* from an upload, which is never donated */
  if (!st) st = kit_read_f32(&x, got, 8);
  const int64_t before = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  if (!st) st = fz_chain_in_place(&x, 4); /* only the recording holds the old buffer, but off */
  if (!st) st = kit_read_f32(&x, got, 8);
  const int64_t off = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  tpu_fuse_set_donation(true);
  tpu_storage_t* clone = NULL; /* shares x's device-made buffer, as a tensor's clone does */
  if (!st) st = tpu_storage_create(0, 32, &clone);
  if (!st) tpu_storage_assign(clone, x.storage);
  const int64_t donated = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  if (!st) st = fz_chain_in_place(&x, 6); /* the clone still reads the old buffer: kept */
  if (!st) st = kit_read_f32(&x, got, 8);
  const int64_t held = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  tpu_storage_release(clone);
  if (!st) st = fz_chain_in_place(&x, 10); /* now only the recording holds the old buffer */
  if (!st) st = kit_read_f32(&x, got, 8);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  tpu_fuse_set_donation(false);
  ASSERT_OK(st);
  EXPECT_EQ_INT(off, before);
  EXPECT_EQ_INT(held, donated);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DONATED_BUFFERS), donated + 1);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + (want[i] < 0 ? -want[i] : want[i])));
  /* The result is a real buffer that works as one. */
  float again[8];
  ASSERT_OK(kit_read_f32(&x, again, 8));
  for (int i = 0; i < 8; ++i) EXPECT_EQ_INT(again[i] == got[i], 1);
  kit_release(&x);
}

/* An op program recorded in fused mode compiles only if it runs on its own:
 * the recording inlines its text into the fused program, the one compile. A
 * strict run of the same ops then compiles each op's program at its first launch. */
TEST(fuse_op_programs_compile_only_when_run_alone) {
  static const float data[21] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21};
  tpu_tensor_t x, a, b;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 7}, data, &x)); /* a shape no other test uses */
  float want[21], got[21];
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  int64_t compiles = tpu_metric_get(TPU_METRIC_COMPILES);
  tpu_status_t* st = fz_chain(&x, 6, &a);
  if (!st) st = kit_read_f32(&a, got, 21);
  const int64_t fused_compiles = tpu_metric_get(TPU_METRIC_COMPILES) - compiles;
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  EXPECT_EQ_INT(fused_compiles, 1);
  compiles = tpu_metric_get(TPU_METRIC_COMPILES);
  ASSERT_OK(fz_chain(&x, 6, &b)); /* add and mul, each compiled at its first launch */
  ASSERT_OK(kit_read_f32(&b, want, 21));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES) - compiles, 2);
  for (int i = 0; i < 21; ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * (1 + (want[i] < 0 ? -want[i] : want[i])));
  kit_release(&a);
  kit_release(&b);
  kit_release(&x);
}

static const char kFzNeg[] =
    "module {\n"
    "  func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
    "    %0 = \"stablehlo.negate\"(%a) : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    \"func.return\"(%0) : (tensor<3xf32>) -> ()\n"
    "  }\n"
    "}\n";
static const char kFzBroken[] =
    "module {\n"
    "  func.func public @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
    "    %0 = \"stablehlo.no_such_op\"(%a) : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    \"func.return\"(%0) : (tensor<3xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* A fused program that does not compile names the op whose own program does
 * not (op programs are compiled lazily, so the flush compiles them to find it). */
TEST(fuse_a_program_that_does_not_compile_names_its_op) {
  tpu_executable_t *neg = NULL, *broken = NULL;
  ASSERT_OK(tpu_executable_create_lazy(kFzNeg, strlen(kFzNeg), 1, &neg));
  ASSERT_OK(tpu_executable_create_lazy(kFzBroken, strlen(kFzBroken), 1, &broken));
  const float in[3] = {1, -2, 3};
  float out[3];
  tpu_aval_t aval = tpu_aval_make(TPU_F32, 1, (int64_t[]){3});
  tpu_buffer_t *a = NULL, *r1 = NULL, *r2 = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, in, &aval, &a));
  tpu_runtime_set_eager_mode(TPU_EAGER_FUSED);
  tpu_status_t* st = tpu_executable_execute(neg, 0, 1, &a, 1, &aval, "neg_op", &r1);
  if (!st) st = tpu_executable_execute(broken, 0, 1, &r1, 1, &aval, "broken_op", &r2);
  tpu_status_t* err = st ? NULL : tpu_buffer_to_host(r2, out, sizeof out);
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  ASSERT_OK(st);
  EXPECT(err != NULL);
  if (err) {
    EXPECT(strstr(tpu_status_message(err), "broken_op") != NULL);
    tpu_status_free(err);
  }
  /* The op that compiles still runs, alone. */
  tpu_buffer_t* r3 = NULL;
  EXPECT_OK(tpu_executable_execute(neg, 0, 1, &a, 1, &aval, "neg_op", &r3));
  if (r3) EXPECT_OK(tpu_buffer_to_host(r3, out, sizeof out));
  EXPECT(out[0] == -1 && out[1] == 2 && out[2] == -3);
  tpu_buffer_release(r3);
  tpu_buffer_release(r2);
  tpu_buffer_release(r1);
  tpu_buffer_release(a);
  tpu_executable_destroy(broken);
  tpu_executable_destroy(neg);
}
