/* View-family and factory lowerings (ops/views.c, ops/factory.c) on the CPU
 * plugin: value semantics of views, their scatters, factories and copies, with
 * negative dims, -1 sizes, steps, empty results, and errors (statuses, never
 * crashes). Eager never reaches these lowerings; the tests call them directly. */
#include <stdint.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/graph.h"

/* A float32 tensor holding 0, 1, 2, ... */
static tpu_status_t* iota_f32(int rank, const int64_t* sizes, tpu_tensor_t* t) {
  float v[256];
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= sizes[i];
  for (int64_t i = 0; i < n && i < 256; ++i) v[i] = (float)i;
  return kit_tensor(TPU_F32, rank, sizes, v, t);
}

/* A tensor of `dtype` holding `data` given as floats (converted on upload). */
static tpu_status_t* tensor_f(tpu_dtype_t dtype, int rank, const int64_t* sizes, const float* data, tpu_tensor_t* t) {
  TPU_RETURN_IF_ERROR(kit_tensor(dtype, rank, sizes, NULL, t));
  tpu_status_t* st = data ? tpu_tensor_upload(t, data, TPU_F32) : NULL;
  if (st) kit_release(t);
  return st;
}

/* Runs op `name` expecting one result of (dtype, rank, sizes) with values want. */
#define RUN1(name, ov, args, nargs, dt, rank, sizes, want, n)                                   \
  do {                                                                                         \
    tpu_tensor_t r_;                                                                           \
    if (tpu_test_check_ok(kit_run1((name), (ov), (args), (nargs), &r_), name, __FILE__, __LINE__)) \
      kit_check(__FILE__, __LINE__, name, &r_, (dt), (rank), (sizes), (want), (n), 0);          \
  } while (0)

#define SZ(...) ((const int64_t[]){__VA_ARGS__})
#define VF(...) ((const float[]){__VA_ARGS__})
#define I64S(...) kit_arg_ints((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (const int64_t[]){__VA_ARGS__})

/* ------------------------------------------------------------ view family */

TEST(views_view_reshape_infer) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  tpu_arg_t a[2] = {kit_arg_tensor(&x), I64S(3, -1)};
  RUN1("view", "", a, 2, TPU_F32, 2, SZ(3, 2), VF(0, 1, 2, 3, 4, 5), 6);
  RUN1("_unsafe_view", "", a, 2, TPU_F32, 2, SZ(3, 2), VF(0, 1, 2, 3, 4, 5), 6);
  RUN1("view_copy", "", a, 2, TPU_F32, 2, SZ(3, 2), VF(0, 1, 2, 3, 4, 5), 6);
  a[1] = I64S(-1);
  RUN1("reshape", "", a, 2, TPU_F32, 1, SZ(6), VF(0, 1, 2, 3, 4, 5), 6);
  a[1] = kit_arg_ints(0, NULL);
  EXPECT_CODE(kit_run1("view", "", a, 2, &r), TPU_INVALID_ARGUMENT); /* 6 elements into [] */
  a[1] = I64S(-1, -1);
  EXPECT_CODE(kit_run1("view", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = I64S(4);
  EXPECT_CODE(kit_run1("view", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = I64S(-2, 3);
  EXPECT_CODE(kit_run1("view", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = I64S(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 6); /* 17 dims: more than any tensor has */
  EXPECT_CODE(kit_run1("view", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  /* 0 elements: -1 is ambiguous */
  tpu_tensor_t e;
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(0, 3), NULL, &e));
  tpu_arg_t b[2] = {kit_arg_tensor(&e), I64S(-1, 0)};
  EXPECT_CODE(kit_run1("view", "", b, 2, &r), TPU_INVALID_ARGUMENT);
  b[1] = I64S(3, 0, -1);
  EXPECT_CODE(kit_run1("view", "", b, 2, &r), TPU_INVALID_ARGUMENT);
  b[1] = I64S(3, 0);
  RUN1("view", "", b, 2, TPU_F32, 2, SZ(3, 0), VF(0), 0);
  kit_release(&e);
}

TEST(views_view_dtype_bitcasts) {
  tpu_tensor_t x, r;
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(2), VF(1.0f, -2.0f), &x));
  tpu_arg_t a[2] = {kit_arg_tensor(&x), kit_arg_dtype(TPU_I32)};
  /* same itemsize: the bits of 1.0f and -2.0f */
  RUN1("view", "dtype", a, 2, TPU_I32, 1, SZ(2), VF(1065353216.0f, -1073741824.0f), 2);
  /* smaller itemsize: each float32 splits into two bfloat16 (little-endian) */
  a[1] = kit_arg_dtype(TPU_BF16);
  RUN1("view", "dtype", a, 2, TPU_BF16, 1, SZ(4), VF(0, 1, 0, -2), 4);
  kit_release(&x);
  /* larger itemsize: pairs of bfloat16 back into float32; the last dim must divide */
  tpu_tensor_t h;
  ASSERT_OK(tensor_f(TPU_BF16, 2, SZ(1, 4), VF(0, 1, 0, -2), &h));
  tpu_arg_t c[2] = {kit_arg_tensor(&h), kit_arg_dtype(TPU_F32)};
  RUN1("view_copy", "dtype", c, 2, TPU_F32, 2, SZ(1, 2), VF(1, -2), 2);
  kit_release(&h);
  ASSERT_OK(tensor_f(TPU_BF16, 1, SZ(3), VF(0, 1, 0), &h));
  c[0] = kit_arg_tensor(&h);
  EXPECT_CODE(kit_run1("view", "dtype", c, 2, &r), TPU_INVALID_ARGUMENT);
  kit_release(&h);
  /* a 0-dim tensor cannot change itemsize */
  tpu_tensor_t s;
  ASSERT_OK(kit_tensor(TPU_F32, 0, SZ(0), VF(1), &s));
  tpu_arg_t d[2] = {kit_arg_tensor(&s), kit_arg_dtype(TPU_BF16)};
  EXPECT_CODE(kit_run1("view", "dtype", d, 2, &r), TPU_INVALID_ARGUMENT);
  kit_release(&s);
  /* bool travels as bytes */
  tpu_tensor_t u;
  ASSERT_OK(tensor_f(TPU_U8, 1, SZ(3), VF(0, 1, 2), &u));
  tpu_arg_t e[2] = {kit_arg_tensor(&u), kit_arg_dtype(TPU_BOOL)};
  RUN1("view", "dtype", e, 2, TPU_BOOL, 1, SZ(3), VF(0, 1, 1), 3);
  kit_release(&u);
}

TEST(views_alias_detach_identity) {
  tpu_tensor_t x;
  ASSERT_OK(iota_f32(2, SZ(2, 2), &x));
  tpu_arg_t a[1] = {kit_arg_tensor(&x)};
  const char* names[] = {"alias", "alias_copy", "detach", "detach_copy", "clone", "lift_fresh_copy"};
  for (int i = 0; i < 6; ++i) RUN1(names[i], "", a, 1, TPU_F32, 2, SZ(2, 2), VF(0, 1, 2, 3), 4);
  tpu_arg_t c[2] = {kit_arg_tensor(&x), kit_arg_none()}; /* clone(memory_format=None) */
  RUN1("clone", "", c, 2, TPU_F32, 2, SZ(2, 2), VF(0, 1, 2, 3), 4);
  kit_release(&x);
}

TEST(views_permute_transpose_t) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(3, SZ(2, 3, 4), &x));
  tpu_arg_t a[3] = {kit_arg_tensor(&x), I64S(2, 0, -2)};
  RUN1("permute", "", a, 2, TPU_F32, 3, SZ(4, 2, 3),
       VF(0, 4, 8, 12, 16, 20, 1, 5, 9, 13, 17, 21, 2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23), 24);
  a[1] = I64S(0, 0, 1);
  EXPECT_CODE(kit_run1("permute", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = I64S(0, 1);
  EXPECT_CODE(kit_run1("permute_copy", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = I64S(0, 1, 3);
  EXPECT_CODE(kit_run1("permute", "", a, 2, &r), TPU_OUT_OF_RANGE);
  /* t() of a 3-D tensor is an error */
  EXPECT_CODE(kit_run1("t", "", a, 1, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  tpu_arg_t b[3] = {kit_arg_tensor(&x), kit_arg_int(-1), kit_arg_int(0)};
  RUN1("transpose", "int", b, 3, TPU_F32, 2, SZ(3, 2), VF(0, 3, 1, 4, 2, 5), 6);
  RUN1("t", "", b, 1, TPU_F32, 2, SZ(3, 2), VF(0, 3, 1, 4, 2, 5), 6);
  RUN1("t_copy", "", b, 1, TPU_F32, 2, SZ(3, 2), VF(0, 3, 1, 4, 2, 5), 6);
  b[2] = kit_arg_int(2);
  EXPECT_CODE(kit_run1("transpose_copy", "int", b, 3, &r), TPU_OUT_OF_RANGE);
  kit_release(&x);
  ASSERT_OK(iota_f32(1, SZ(3), &x));
  tpu_arg_t c[1] = {kit_arg_tensor(&x)};
  RUN1("t", "", c, 1, TPU_F32, 1, SZ(3), VF(0, 1, 2), 3); /* 1-D: itself */
  kit_release(&x);
}

TEST(views_expand) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(3, 1), &x));
  tpu_arg_t a[3] = {kit_arg_tensor(&x), I64S(2, -1, 2), kit_arg_bool(false)};
  RUN1("expand", "", a, 3, TPU_F32, 3, SZ(2, 3, 2), VF(0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2), 12);
  RUN1("expand_copy", "", a, 2, TPU_F32, 3, SZ(2, 3, 2), VF(0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2), 12);
  a[1] = I64S(3, 0); /* a size-1 dim may expand to 0 */
  RUN1("expand", "", a, 2, TPU_F32, 2, SZ(3, 0), VF(0), 0);
  a[1] = I64S(-1, 3, 1);
  EXPECT_CODE(kit_run1("expand", "", a, 2, &r), TPU_INVALID_ARGUMENT); /* -1 in a new leading dim */
  a[1] = I64S(4, 1);
  EXPECT_CODE(kit_run1("expand", "", a, 2, &r), TPU_INVALID_ARGUMENT); /* 3 is not 1 */
  a[1] = I64S(3);
  EXPECT_CODE(kit_run1("expand", "", a, 2, &r), TPU_INVALID_ARGUMENT); /* fewer sizes than dims */
  a[1] = I64S(3, -2);
  EXPECT_CODE(kit_run1("expand", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

TEST(views_slice_steps_and_clamps) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(2, 5), &x));
  tpu_arg_t a[5] = {kit_arg_tensor(&x), kit_arg_int(-1), kit_arg_int(1), kit_arg_none(), kit_arg_int(2)};
  RUN1("slice", "Tensor", a, 5, TPU_F32, 2, SZ(2, 2), VF(1, 3, 6, 8), 4);
  /* start -3, end INT64_MAX (clamped) */
  a[2] = kit_arg_int(-3);
  a[3] = kit_arg_int(INT64_MAX);
  a[4] = kit_arg_int(1);
  RUN1("slice_copy", "Tensor", a, 5, TPU_F32, 2, SZ(2, 3), VF(2, 3, 4, 7, 8, 9), 6);
  /* far out of range both ways, step 3 */
  a[2] = kit_arg_int(-100);
  a[3] = kit_arg_int(100);
  a[4] = kit_arg_int(3);
  RUN1("slice", "Tensor", a, 5, TPU_F32, 2, SZ(2, 2), VF(0, 3, 5, 8), 4);
  /* empty: start after end */
  a[2] = kit_arg_int(4);
  a[3] = kit_arg_int(2);
  a[4] = kit_arg_int(1);
  RUN1("slice", "Tensor", a, 5, TPU_F32, 2, SZ(2, 0), VF(0), 0);
  /* defaults: dim 0, whole range */
  tpu_arg_t d[1] = {kit_arg_tensor(&x)};
  RUN1("slice", "Tensor", d, 1, TPU_F32, 2, SZ(2, 5), VF(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 10);
  a[4] = kit_arg_int(0);
  EXPECT_CODE(kit_run1("slice", "Tensor", a, 5, &r), TPU_INVALID_ARGUMENT);
  a[4] = kit_arg_int(1);
  a[1] = kit_arg_int(2);
  EXPECT_CODE(kit_run1("slice", "Tensor", a, 5, &r), TPU_OUT_OF_RANGE);
  kit_release(&x);
  tpu_tensor_t s;
  ASSERT_OK(kit_tensor(TPU_F32, 0, SZ(0), VF(1), &s));
  tpu_arg_t z[1] = {kit_arg_tensor(&s)};
  EXPECT_CODE(kit_run1("slice", "Tensor", z, 1, &r), TPU_OUT_OF_RANGE);
  kit_release(&s);
}

TEST(views_select_narrow) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_int(-1)};
  RUN1("select", "int", a, 3, TPU_F32, 1, SZ(3), VF(3, 4, 5), 3);
  a[1] = kit_arg_int(-1);
  a[2] = kit_arg_int(1);
  RUN1("select_copy", "int", a, 3, TPU_F32, 1, SZ(2), VF(1, 4), 2);
  a[2] = kit_arg_int(3);
  EXPECT_CODE(kit_run1("select", "int", a, 3, &r), TPU_OUT_OF_RANGE);
  a[2] = kit_arg_int(-4);
  EXPECT_CODE(kit_run1("select", "int", a, 3, &r), TPU_OUT_OF_RANGE);
  /* narrow(dim=1, start=-2, length=2) */
  a[1] = kit_arg_int(1);
  a[2] = kit_arg_int(-2);
  a[3] = kit_arg_int(2);
  RUN1("narrow", "", a, 4, TPU_F32, 2, SZ(2, 2), VF(1, 2, 4, 5), 4);
  a[3] = kit_arg_int(0);
  RUN1("narrow", "", a, 4, TPU_F32, 2, SZ(2, 0), VF(0), 0);
  a[2] = kit_arg_int(2);
  a[3] = kit_arg_int(2);
  EXPECT_CODE(kit_run1("narrow", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = kit_arg_int(4);
  a[3] = kit_arg_int(0);
  EXPECT_CODE(kit_run1("narrow", "", a, 4, &r), TPU_OUT_OF_RANGE);
  a[2] = kit_arg_int(1);
  a[3] = kit_arg_int(INT64_MAX); /* start + length overflows: still an error */
  EXPECT_CODE(kit_run1("narrow", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  /* narrow.Tensor: the start read at run time */
  a[2] = kit_arg_scalar_i(-2);
  a[3] = kit_arg_int(1);
  RUN1("narrow", "Tensor", a, 4, TPU_F32, 2, SZ(2, 1), VF(1, 4), 2);
  kit_release(&x);
}

TEST(views_squeeze_unsqueeze) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(3, SZ(1, 3, 1), &x));
  tpu_arg_t a[2] = {kit_arg_tensor(&x), kit_arg_none()};
  RUN1("squeeze", "", a, 1, TPU_F32, 1, SZ(3), VF(0, 1, 2), 3);
  a[1] = kit_arg_int(-1);
  RUN1("squeeze", "dim", a, 2, TPU_F32, 2, SZ(1, 3), VF(0, 1, 2), 3);
  a[1] = I64S(0, 1); /* dim 1 has size 3: kept */
  RUN1("squeeze_copy", "dims", a, 2, TPU_F32, 2, SZ(3, 1), VF(0, 1, 2), 3);
  a[1] = I64S(0, -3);
  EXPECT_CODE(kit_run1("squeeze", "dims", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_int(3);
  EXPECT_CODE(kit_run1("squeeze", "dim", a, 2, &r), TPU_OUT_OF_RANGE);
  a[1] = kit_arg_int(-1);
  RUN1("unsqueeze", "", a, 2, TPU_F32, 4, SZ(1, 3, 1, 1), VF(0, 1, 2), 3);
  a[1] = kit_arg_int(1);
  RUN1("unsqueeze_copy", "", a, 2, TPU_F32, 4, SZ(1, 1, 3, 1), VF(0, 1, 2), 3);
  a[1] = kit_arg_int(4);
  EXPECT_CODE(kit_run1("unsqueeze", "", a, 2, &r), TPU_OUT_OF_RANGE);
  kit_release(&x);
  /* 0-dim: squeeze(0) and unsqueeze(-1) */
  tpu_tensor_t s;
  ASSERT_OK(kit_tensor(TPU_F32, 0, SZ(0), VF(7), &s));
  tpu_arg_t z[2] = {kit_arg_tensor(&s), kit_arg_int(0)};
  RUN1("squeeze", "dim", z, 2, TPU_F32, 0, SZ(0), VF(7), 1);
  z[1] = kit_arg_int(-1);
  RUN1("unsqueeze", "", z, 2, TPU_F32, 1, SZ(1), VF(7), 1);
  kit_release(&s);
}

TEST(views_diagonal) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(3, 4), &x));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), kit_arg_int(1)};
  RUN1("diagonal", "", a, 2, TPU_F32, 1, SZ(3), VF(1, 6, 11), 3);
  a[1] = kit_arg_int(-1);
  RUN1("diagonal_copy", "", a, 2, TPU_F32, 1, SZ(2), VF(4, 9), 2);
  a[1] = kit_arg_int(0);
  a[2] = kit_arg_int(1); /* dims swapped: the same diagonal */
  a[3] = kit_arg_int(0);
  RUN1("diagonal", "", a, 4, TPU_F32, 1, SZ(3), VF(0, 5, 10), 3);
  a[1] = kit_arg_int(5); /* off the matrix: empty */
  RUN1("diagonal", "", a, 4, TPU_F32, 1, SZ(0), VF(0), 0);
  a[1] = kit_arg_int(0);
  a[3] = kit_arg_int(-1);
  EXPECT_CODE(kit_run1("diagonal", "", a, 4, &r), TPU_INVALID_ARGUMENT); /* dims identical */
  kit_release(&x);
  /* 3-D: dims (-1, 0), offset 1: the rest [3], then the diagonal (length 1) */
  ASSERT_OK(iota_f32(3, SZ(2, 3, 4), &x));
  tpu_arg_t b[4] = {kit_arg_tensor(&x), kit_arg_int(1), kit_arg_int(-1), kit_arg_int(0)};
  RUN1("diagonal", "", b, 4, TPU_F32, 2, SZ(3, 1), VF(12, 16, 20), 3);
  kit_release(&x);
}

TEST(views_unfold) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(1, SZ(7), &x));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_int(3), kit_arg_int(2)};
  RUN1("unfold", "", a, 4, TPU_F32, 2, SZ(3, 3), VF(0, 1, 2, 2, 3, 4, 4, 5, 6), 9);
  a[2] = kit_arg_int(8);
  EXPECT_CODE(kit_run1("unfold", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = kit_arg_int(2);
  a[3] = kit_arg_int(0);
  EXPECT_CODE(kit_run1("unfold", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = kit_arg_int(-1);
  a[3] = kit_arg_int(1);
  EXPECT_CODE(kit_run1("unfold", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  ASSERT_OK(iota_f32(2, SZ(2, 5), &x));
  tpu_arg_t b[4] = {kit_arg_tensor(&x), kit_arg_int(-1), kit_arg_int(2), kit_arg_int(3)};
  RUN1("unfold", "", b, 4, TPU_F32, 3, SZ(2, 2, 2), VF(0, 1, 3, 4, 5, 6, 8, 9), 8);
  kit_release(&x);
  ASSERT_OK(iota_f32(2, SZ(4, 2), &x));
  tpu_arg_t c[4] = {kit_arg_tensor(&x), kit_arg_int(0), kit_arg_int(2), kit_arg_int(1)};
  RUN1("unfold_copy", "", c, 4, TPU_F32, 3, SZ(3, 2, 2), VF(0, 2, 1, 3, 2, 4, 3, 5, 4, 6, 5, 7), 12);
  kit_release(&x);
  tpu_tensor_t s;
  ASSERT_OK(kit_tensor(TPU_F32, 0, SZ(0), VF(5), &s));
  tpu_arg_t z[4] = {kit_arg_tensor(&s), kit_arg_int(0), kit_arg_int(1), kit_arg_int(1)};
  RUN1("unfold", "", z, 4, TPU_F32, 1, SZ(1), VF(5), 1);
  kit_release(&s);
}

TEST(views_split_unbind) {
  tpu_tensor_t x, outs[KIT_MAX_OUTS];
  int n = 0;
  ASSERT_OK(iota_f32(1, SZ(5), &x));
  tpu_arg_t a[3] = {kit_arg_tensor(&x), kit_arg_int(2), kit_arg_int(-1)};
  ASSERT_OK(kit_run("split", "Tensor", a, 3, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 3);
  KIT_CHECK("split0", &outs[0], TPU_F32, 1, SZ(2), VF(0, 1), 2, 0);
  KIT_CHECK("split1", &outs[1], TPU_F32, 1, SZ(2), VF(2, 3), 2, 0);
  KIT_CHECK("split2", &outs[2], TPU_F32, 1, SZ(1), VF(4), 1, 0);
  a[1] = I64S(1, 0, 4);
  ASSERT_OK(kit_run("split_with_sizes", "", a, 3, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 3);
  KIT_CHECK("sws0", &outs[0], TPU_F32, 1, SZ(1), VF(0), 1, 0);
  KIT_CHECK("sws1", &outs[1], TPU_F32, 1, SZ(0), VF(0), 0, 0);
  KIT_CHECK("sws2", &outs[2], TPU_F32, 1, SZ(4), VF(1, 2, 3, 4), 4, 0);
  ASSERT_OK(kit_run("split_copy", "sizes", a, 3, KIT_MAX_OUTS, outs, &n)); /* split.sizes form */
  ASSERT_EQ_INT(n, 3);
  kit_release_all(outs, n);
  a[1] = I64S(1, 1);
  EXPECT_CODE(kit_run("split_with_sizes_copy", "", a, 3, KIT_MAX_OUTS, outs, &n), TPU_INVALID_ARGUMENT);
  a[1] = I64S(6, -1);
  EXPECT_CODE(kit_run("split_with_sizes", "", a, 3, KIT_MAX_OUTS, outs, &n), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_int(0);
  EXPECT_CODE(kit_run("split", "Tensor", a, 3, KIT_MAX_OUTS, outs, &n), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_int(-1);
  EXPECT_CODE(kit_run("split", "Tensor", a, 3, KIT_MAX_OUTS, outs, &n), TPU_INVALID_ARGUMENT);
  a[1] = I64S(INT64_MAX, INT64_MAX, 7); /* the sum overflows: still a mismatch */
  EXPECT_CODE(kit_run("split_with_sizes", "", a, 3, KIT_MAX_OUTS, outs, &n), TPU_INVALID_ARGUMENT);
  a[1] = kit_arg_int(INT64_MAX); /* one piece */
  ASSERT_OK(kit_run("split", "Tensor", a, 3, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 1);
  KIT_CHECK("split_big", &outs[0], TPU_F32, 1, SZ(5), VF(0, 1, 2, 3, 4), 5, 0);
  a[1] = kit_arg_int(1); /* 5 pieces, room for 2: an error, not an overrun */
  EXPECT_CODE(kit_run("split", "Tensor", a, 3, 2, outs, &n), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  /* an empty dim splits into one empty piece */
  tpu_tensor_t e;
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(0, 2), NULL, &e));
  tpu_arg_t b[3] = {kit_arg_tensor(&e), kit_arg_int(0)};
  ASSERT_OK(kit_run("split", "Tensor", b, 2, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 1);
  KIT_CHECK("split_empty", &outs[0], TPU_F32, 2, SZ(0, 2), VF(0), 0, 0);
  kit_release(&e);
  /* unbind along the last dim */
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  tpu_arg_t c[2] = {kit_arg_tensor(&x), kit_arg_int(-1)};
  ASSERT_OK(kit_run("unbind", "int", c, 2, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 3);
  KIT_CHECK("unbind0", &outs[0], TPU_F32, 1, SZ(2), VF(0, 3), 2, 0);
  KIT_CHECK("unbind1", &outs[1], TPU_F32, 1, SZ(2), VF(1, 4), 2, 0);
  KIT_CHECK("unbind2", &outs[2], TPU_F32, 1, SZ(2), VF(2, 5), 2, 0);
  c[1] = kit_arg_int(0);
  ASSERT_OK(kit_run("unbind_copy", "int", c, 2, KIT_MAX_OUTS, outs, &n));
  ASSERT_EQ_INT(n, 2);
  KIT_CHECK("unbindc1", &outs[1], TPU_F32, 1, SZ(3), VF(3, 4, 5), 3, 0);
  kit_release(&outs[0]);
  c[1] = kit_arg_int(2);
  EXPECT_CODE(kit_run("unbind", "int", c, 2, KIT_MAX_OUTS, outs, &n), TPU_OUT_OF_RANGE);
  kit_release(&x);
  tpu_tensor_t s;
  ASSERT_OK(kit_tensor(TPU_F32, 0, SZ(0), VF(1), &s));
  tpu_arg_t z[2] = {kit_arg_tensor(&s), kit_arg_int(0)};
  EXPECT_CODE(kit_run("unbind", "int", z, 2, KIT_MAX_OUTS, outs, &n), TPU_OUT_OF_RANGE);
  kit_release(&s);
}

TEST(views_stack) {
  tpu_tensor_t x, y, r;
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(2), VF(0.5f, 1.5f), &x));
  ASSERT_OK(tensor_f(TPU_I32, 1, SZ(2), VF(7, 8), &y));
  tpu_tensor_t ts[2] = {x, y};
  tpu_arg_t a[2] = {kit_arg_tensors(2, ts), kit_arg_int(-1)};
  RUN1("stack", "", a, 2, TPU_F32, 2, SZ(2, 2), VF(0.5f, 7, 1.5f, 8), 4); /* promoted to float32 */
  a[1] = kit_arg_none();
  RUN1("stack", "", a, 1, TPU_F32, 2, SZ(2, 2), VF(0.5f, 1.5f, 7, 8), 4);
  a[1] = kit_arg_int(2);
  EXPECT_CODE(kit_run1("stack", "", a, 2, &r), TPU_OUT_OF_RANGE);
  kit_release(&y);
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(3), VF(1, 2, 3), &y));
  ts[1] = y;
  a[1] = kit_arg_int(0);
  EXPECT_CODE(kit_run1("stack", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  a[0] = kit_arg_tensors(0, ts);
  EXPECT_CODE(kit_run1("stack", "", a, 2, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  kit_release(&y);
}

TEST(views_as_strided) {
  tpu_tensor_t x, r;
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), I64S(2, 2), I64S(1, 2), kit_arg_int(1)};
  RUN1("as_strided", "", a, 4, TPU_F32, 2, SZ(2, 2), VF(1, 3, 2, 4), 4);
  a[3] = kit_arg_none(); /* offset 0 */
  RUN1("as_strided_copy", "", a, 4, TPU_F32, 2, SZ(2, 2), VF(0, 2, 1, 3), 4);
  a[1] = I64S(3, 2); /* overlapping windows: a stride of 0 repeats */
  a[2] = I64S(2, 0);
  RUN1("as_strided", "", a, 4, TPU_F32, 2, SZ(3, 2), VF(0, 0, 2, 2, 4, 4), 6);
  a[1] = kit_arg_ints(0, NULL);
  a[2] = kit_arg_ints(0, NULL);
  a[3] = kit_arg_int(5);
  RUN1("as_strided", "", a, 4, TPU_F32, 0, SZ(0), VF(5), 1);
  a[1] = I64S(0, 4); /* empty: bounds are not checked */
  a[2] = I64S(100, 100);
  RUN1("as_strided", "", a, 4, TPU_F32, 2, SZ(0, 4), VF(0), 0);
  a[1] = I64S(2, 2);
  a[2] = I64S(1, 3);
  a[3] = kit_arg_int(3); /* reads element 7 of 6 */
  EXPECT_CODE(kit_run1("as_strided", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = I64S(1, INT64_MAX); /* overflow is out of bounds, not a wrap */
  EXPECT_CODE(kit_run1("as_strided", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = I64S(1, -1);
  a[3] = kit_arg_int(1);
  EXPECT_CODE(kit_run1("as_strided", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = I64S(1);
  EXPECT_CODE(kit_run1("as_strided", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  a[2] = I64S(1, 1);
  a[3] = kit_arg_int(-1);
  EXPECT_CODE(kit_run1("as_strided", "", a, 4, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
}

/* --------------------------------------------------------------- scatters */

TEST(views_slice_scatter) {
  tpu_tensor_t x, s, r;
  ASSERT_OK(iota_f32(2, SZ(2, 5), &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(2, 2), VF(-1, -2, -3, -4), &s));
  tpu_arg_t a[6] = {kit_arg_tensor(&x), kit_arg_tensor(&s), kit_arg_int(-1), kit_arg_int(0), kit_arg_none(),
                    kit_arg_int(3)};
  RUN1("slice_scatter", "", a, 6, TPU_F32, 2, SZ(2, 5), VF(-1, 1, 2, -2, 4, -3, 6, 7, -4, 9), 10);
  a[3] = kit_arg_int(-2); /* step 1: columns 3, 4 */
  a[4] = kit_arg_int(INT64_MAX);
  a[5] = kit_arg_int(1);
  RUN1("slice_scatter", "", a, 6, TPU_F32, 2, SZ(2, 5), VF(0, 1, 2, -1, -2, 5, 6, 7, -3, -4), 10);
  a[3] = kit_arg_int(0);
  EXPECT_CODE(kit_run1("slice_scatter", "", a, 6, &r), TPU_INVALID_ARGUMENT); /* src [2,2], slice [2,5] */
  kit_release(&s);
  /* an empty slice: self unchanged */
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(2, 0), NULL, &s));
  a[1] = kit_arg_tensor(&s);
  a[3] = kit_arg_int(3);
  a[4] = kit_arg_int(1);
  RUN1("slice_scatter", "", a, 6, TPU_F32, 2, SZ(2, 5), VF(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), 10);
  kit_release(&s);
  /* along dim 0 with an int src (cast to self's dtype) */
  ASSERT_OK(tensor_f(TPU_I32, 2, SZ(1, 5), VF(9, 9, 9, 9, 9), &s));
  tpu_arg_t b[6] = {kit_arg_tensor(&x), kit_arg_tensor(&s), kit_arg_int(0), kit_arg_int(1), kit_arg_int(2)};
  RUN1("slice_scatter", "", b, 5, TPU_F32, 2, SZ(2, 5), VF(0, 1, 2, 3, 4, 9, 9, 9, 9, 9), 10);
  kit_release(&s);
  kit_release(&x);
}

TEST(views_select_scatter) {
  tpu_tensor_t x, s, r;
  ASSERT_OK(iota_f32(2, SZ(2, 3), &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(3), VF(9, 8, 7), &s));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), kit_arg_tensor(&s), kit_arg_int(0), kit_arg_int(-1)};
  RUN1("select_scatter", "", a, 4, TPU_F32, 2, SZ(2, 3), VF(0, 1, 2, 9, 8, 7), 6);
  a[2] = kit_arg_int(-1);
  a[3] = kit_arg_int(1);
  EXPECT_CODE(kit_run1("select_scatter", "", a, 4, &r), TPU_INVALID_ARGUMENT); /* src [3], slice [2] */
  kit_release(&s);
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(2), VF(9, 8), &s));
  a[1] = kit_arg_tensor(&s);
  RUN1("select_scatter", "", a, 4, TPU_F32, 2, SZ(2, 3), VF(0, 9, 2, 3, 8, 5), 6);
  a[3] = kit_arg_int(3);
  EXPECT_CODE(kit_run1("select_scatter", "", a, 4, &r), TPU_OUT_OF_RANGE);
  kit_release(&s);
  kit_release(&x);
}

TEST(views_diagonal_scatter) {
  tpu_tensor_t x, s, r;
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(3, 4), NULL, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(3), VF(1, 2, 3), &s));
  tpu_arg_t a[5] = {kit_arg_tensor(&x), kit_arg_tensor(&s), kit_arg_int(1)};
  RUN1("diagonal_scatter", "", a, 3, TPU_F32, 2, SZ(3, 4), VF(0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3), 12);
  a[2] = kit_arg_int(-1);
  EXPECT_CODE(kit_run1("diagonal_scatter", "", a, 3, &r), TPU_INVALID_ARGUMENT); /* diagonal -1 has 2 */
  kit_release(&s);
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(2), VF(7, 8), &s));
  a[1] = kit_arg_tensor(&s);
  RUN1("diagonal_scatter", "", a, 3, TPU_F32, 2, SZ(3, 4), VF(0, 0, 0, 0, 7, 0, 0, 0, 0, 8, 0, 0), 12);
  kit_release(&s);
  kit_release(&x);
  /* 3-D, dims (-1, 0), offset 1 */
  ASSERT_OK(kit_tensor(TPU_F32, 3, SZ(2, 3, 4), NULL, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(3, 1), VF(1, 2, 3), &s));
  tpu_arg_t b[5] = {kit_arg_tensor(&x), kit_arg_tensor(&s), kit_arg_int(1), kit_arg_int(-1), kit_arg_int(0)};
  float want[24] = {0};
  want[12] = 1;
  want[16] = 2;
  want[20] = 3;
  RUN1("diagonal_scatter", "", b, 5, TPU_F32, 3, SZ(2, 3, 4), want, 24);
  kit_release(&s);
  kit_release(&x);
}

TEST(views_as_strided_scatter) {
  tpu_tensor_t x, s, r;
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(2, 3), NULL, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, SZ(2, 2), VF(1, 2, 3, 4), &s));
  tpu_arg_t a[5] = {kit_arg_tensor(&x), kit_arg_tensor(&s), I64S(2, 2), I64S(1, 2), kit_arg_int(1)};
  RUN1("as_strided_scatter", "", a, 5, TPU_F32, 2, SZ(2, 3), VF(0, 1, 3, 2, 4, 0), 6);
  a[2] = I64S(4);
  a[3] = I64S(1);
  EXPECT_CODE(kit_run1("as_strided_scatter", "", a, 5, &r), TPU_INVALID_ARGUMENT); /* src [2,2], view [4] */
  a[2] = I64S(2, 2);
  a[3] = I64S(1, 3);
  a[4] = kit_arg_int(3);
  EXPECT_CODE(kit_run1("as_strided_scatter", "", a, 5, &r), TPU_INVALID_ARGUMENT); /* out of bounds */
  kit_release(&s);
  kit_release(&x);
}

/* -------------------------------------------------------------- factories */

TEST(views_factories_full_zeros_ones) {
  tpu_tensor_t r;
  /* full: dtype inferred from the fill value, or given */
  tpu_arg_t a[6] = {I64S(2, 2), kit_arg_scalar_f(2.5), kit_arg_none(), kit_arg_none(), kit_arg_none(),
                    kit_arg_none()};
  RUN1("full", "", a, 6, TPU_F32, 2, SZ(2, 2), VF(2.5f, 2.5f, 2.5f, 2.5f), 4);
  a[1] = kit_arg_scalar_i(3);
  RUN1("full", "", a, 2, TPU_I64, 2, SZ(2, 2), VF(3, 3, 3, 3), 4);
  a[1] = kit_arg_scalar_f(7.9);
  a[2] = kit_arg_dtype(TPU_I32);
  RUN1("full", "", a, 3, TPU_I32, 2, SZ(2, 2), VF(7, 7, 7, 7), 4);
  a[0] = I64S(2, -1);
  EXPECT_CODE(kit_run1("full", "", a, 3, &r), TPU_INVALID_ARGUMENT);
  a[0] = kit_arg_ints(0, NULL);
  RUN1("full", "", a, 3, TPU_I32, 0, SZ(0), VF(7), 1);
  /* zeros / ones / empty (zeros) / empty_strided */
  tpu_arg_t z[5] = {I64S(3), kit_arg_none(), kit_arg_none(), kit_arg_none(), kit_arg_none()};
  RUN1("zeros", "", z, 5, TPU_F32, 1, SZ(3), VF(0, 0, 0), 3);
  RUN1("empty", "memory_format", z, 5, TPU_F32, 1, SZ(3), VF(0, 0, 0), 3);
  z[1] = kit_arg_dtype(TPU_BOOL);
  RUN1("ones", "", z, 2, TPU_BOOL, 1, SZ(3), VF(1, 1, 1), 3);
  z[0] = I64S(0, 2);
  RUN1("zeros", "", z, 2, TPU_BOOL, 2, SZ(0, 2), VF(0), 0);
  tpu_arg_t e[3] = {I64S(2, 3), I64S(1, 2), kit_arg_dtype(TPU_I64)};
  RUN1("empty_strided", "", e, 3, TPU_I64, 2, SZ(2, 3), VF(0, 0, 0, 0, 0, 0), 6);
  /* scalar_tensor: float32 unless told */
  tpu_arg_t s[2] = {kit_arg_scalar_i(3), kit_arg_none()};
  RUN1("scalar_tensor", "", s, 2, TPU_F32, 0, SZ(0), VF(3), 1);
  s[1] = kit_arg_dtype(TPU_I64);
  RUN1("scalar_tensor", "", s, 2, TPU_I64, 0, SZ(0), VF(3), 1);
}

TEST(views_factories_new_and_like) {
  tpu_tensor_t x;
  ASSERT_OK(tensor_f(TPU_I32, 2, SZ(1, 2), VF(4, 5), &x));
  tpu_arg_t a[4] = {kit_arg_tensor(&x), I64S(3), kit_arg_none(), kit_arg_none()};
  RUN1("new_zeros", "", a, 3, TPU_I32, 1, SZ(3), VF(0, 0, 0), 3);
  RUN1("new_ones", "", a, 3, TPU_I32, 1, SZ(3), VF(1, 1, 1), 3);
  RUN1("new_empty", "", a, 3, TPU_I32, 1, SZ(3), VF(0, 0, 0), 3);
  a[2] = I64S(1);
  RUN1("new_empty_strided", "", a, 3, TPU_I32, 1, SZ(3), VF(0, 0, 0), 3);
  a[2] = kit_arg_scalar_f(1.5); /* new_full: self's dtype (truncates) unless told */
  RUN1("new_full", "", a, 4, TPU_I32, 1, SZ(3), VF(1, 1, 1), 3);
  a[3] = kit_arg_dtype(TPU_F32);
  RUN1("new_full", "", a, 4, TPU_F32, 1, SZ(3), VF(1.5f, 1.5f, 1.5f), 3);
  tpu_arg_t l[3] = {kit_arg_tensor(&x), kit_arg_none(), kit_arg_none()};
  RUN1("zeros_like", "", l, 2, TPU_I32, 2, SZ(1, 2), VF(0, 0), 2);
  RUN1("empty_like", "", l, 2, TPU_I32, 2, SZ(1, 2), VF(0, 0), 2);
  l[1] = kit_arg_dtype(TPU_F32);
  RUN1("ones_like", "", l, 2, TPU_F32, 2, SZ(1, 2), VF(1, 1), 2);
  l[1] = kit_arg_scalar_f(-2.5);
  RUN1("full_like", "", l, 3, TPU_I32, 2, SZ(1, 2), VF(-2, -2), 2);
  l[2] = kit_arg_dtype(TPU_F64);
  RUN1("full_like", "", l, 3, TPU_F64, 2, SZ(1, 2), VF(-2.5f, -2.5f), 2);
  kit_release(&x);
}

TEST(views_rand_like) {
  tpu_tensor_t x, r;
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(4096), NULL, &x));
  tpu_arg_t a[2] = {kit_arg_tensor(&x), kit_arg_none()};
  static float v[4096];
  ASSERT_OK(kit_run1("rand_like", "", a, 2, &r));
  EXPECT_EQ_INT(r.dtype, TPU_F32);
  ASSERT_OK(kit_read_f32(&r, v, 4096));
  double sum = 0, sq = 0;
  bool in_range = true;
  for (int i = 0; i < 4096; ++i) {
    in_range = in_range && v[i] >= 0 && v[i] < 1;
    sum += v[i];
  }
  EXPECT(in_range);
  EXPECT_NEAR(sum / 4096, 0.5, 0.05);
  kit_release(&r);
  a[1] = kit_arg_dtype(TPU_BF16);
  ASSERT_OK(kit_run1("randn_like", "", a, 2, &r));
  EXPECT_EQ_INT(r.dtype, TPU_BF16);
  ASSERT_OK(kit_read_f32(&r, v, 4096));
  sum = 0;
  for (int i = 0; i < 4096; ++i) {
    sum += v[i];
    sq += (double)v[i] * v[i];
  }
  EXPECT_NEAR(sum / 4096, 0.0, 0.1);
  EXPECT_NEAR(sq / 4096, 1.0, 0.15);
  kit_release(&r);
  a[1] = kit_arg_dtype(TPU_I64);
  EXPECT_CODE(kit_run1("rand_like", "", a, 2, &r), TPU_UNIMPLEMENTED);
  kit_release(&x);
}

TEST(views_to_copy_and_copy) {
  tpu_tensor_t x, self, r;
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(3), VF(1.5f, -2.5f, 3.25f), &x));
  tpu_arg_t a[2] = {kit_arg_tensor(&x), kit_arg_dtype(TPU_I32)};
  RUN1("_to_copy", "", a, 2, TPU_I32, 1, SZ(3), VF(1, -2, 3), 3);
  a[1] = kit_arg_none();
  RUN1("_to_copy", "", a, 2, TPU_F32, 1, SZ(3), VF(1.5f, -2.5f, 3.25f), 3);
  /* copy(self, src): src broadcast to self's shape and cast to its dtype */
  ASSERT_OK(tensor_f(TPU_I32, 2, SZ(2, 3), NULL, &self));
  tpu_arg_t c[3] = {kit_arg_tensor(&self), kit_arg_tensor(&x), kit_arg_bool(false)};
  RUN1("copy", "", c, 3, TPU_I32, 2, SZ(2, 3), VF(1, -2, 3, 1, -2, 3), 6);
  c[1] = kit_arg_scalar_f(4.0); /* a 0-dim cpu tensor */
  RUN1("copy", "", c, 3, TPU_I32, 2, SZ(2, 3), VF(4, 4, 4, 4, 4, 4), 6);
  kit_release(&x);
  ASSERT_OK(kit_tensor(TPU_F32, 1, SZ(2), VF(1, 2), &x));
  c[1] = kit_arg_tensor(&x);
  EXPECT_CODE(kit_run1("copy", "", c, 3, &r), TPU_INVALID_ARGUMENT);
  kit_release(&x);
  kit_release(&self);
}

/* ------------------------------------------------------ inside one graph */

static tpu_arg_t gval(int32_t v) {
  tpu_arg_t a = kit_arg_none();
  a.kind = TPU_ARG_VALUE;
  a.u.value = v;
  return a;
}

/* The graph path binds tensor arguments to values already in the builder: views
 * chain as values (view -> t -> slice -> slice_scatter -> split -> stack), a
 * factory feeds a scatter, and as_strided reads the input's logical values. */
TEST(views_chain_in_one_graph) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, v1, v2, z, s, sc, parts, st, as;
  tpu_status_t* err = tpu_graph_add_input(g, TPU_ARG_TENSOR, &x);
  tpu_arg_t a1[2] = {gval(x), I64S(3, -1)};
  if (!err) err = tpu_graph_apply(g, "view", "", a1, 2, 1, &v1);
  tpu_arg_t a2[1] = {gval(v1)};
  if (!err) err = tpu_graph_apply(g, "t", "", a2, 1, 1, &v2);
  tpu_arg_t a3[3] = {I64S(2, 3), kit_arg_scalar_f(0.0), kit_arg_dtype(TPU_F32)};
  if (!err) err = tpu_graph_apply(g, "full", "", a3, 3, 1, &z);
  tpu_arg_t a4[5] = {gval(v2), kit_arg_int(1), kit_arg_int(0), kit_arg_none(), kit_arg_int(2)};
  if (!err) err = tpu_graph_apply(g, "slice", "Tensor", a4, 5, 1, &s);
  tpu_arg_t a5[6] = {gval(z), gval(s), kit_arg_int(1), kit_arg_int(0), kit_arg_none(), kit_arg_int(2)};
  if (!err) err = tpu_graph_apply(g, "slice_scatter", "", a5, 6, 1, &sc);
  tpu_arg_t a6[3] = {gval(sc), kit_arg_int(1), kit_arg_int(0)};
  if (!err) err = tpu_graph_apply(g, "split", "Tensor", a6, 3, 2, &parts);
  int32_t pair[2] = {parts + 1, parts};
  tpu_arg_t a7[2] = {kit_arg_none(), kit_arg_int(0)};
  a7[0].kind = TPU_ARG_VALUE_LIST;
  a7[0].u.list.n = 2;
  a7[0].u.list.values = pair;
  if (!err) err = tpu_graph_apply(g, "stack", "", a7, 2, 1, &st);
  tpu_arg_t a8[4] = {gval(x), I64S(2), I64S(2), kit_arg_int(1)};
  if (!err) err = tpu_graph_apply(g, "as_strided", "", a8, 4, 1, &as);
  int32_t outs[2] = {st, as};
  if (!err) err = tpu_graph_set_outputs(g, 2, outs);
  if (!tpu_test_check_ok(err, "building the graph", __FILE__, __LINE__)) {
    tpu_graph_destroy(g);
    return;
  }
  tpu_tensor_t in;
  tpu_status_t* st_in = iota_f32(2, SZ(2, 3), &in);
  if (!tpu_test_check_ok(st_in, "input", __FILE__, __LINE__)) {
    tpu_graph_destroy(g);
    return;
  }
  tpu_arg_t inputs[1] = {kit_arg_tensor(&in)};
  tpu_result_t res[2];
  int n = 0;
  err = tpu_graph_run(g, 0, inputs, 1, 2, res, &n);
  if (tpu_test_check_ok(err, "tpu_graph_run", __FILE__, __LINE__) && n == 2) {
    tpu_tensor_t r0 = tpu_tensor_dense(res[0].storage, res[0].dtype, res[0].rank, res[0].sizes);
    tpu_tensor_t r1 = tpu_tensor_dense(res[1].storage, res[1].dtype, res[1].rank, res[1].sizes);
    /* x = [[0,1,2],[3,4,5]] -> view [3,2] -> t -> [[0,2,4],[1,3,5]]; columns 0, 2 into zeros;
     * rows swapped by split + stack */
    KIT_CHECK("graph stack", &r0, TPU_F32, 3, SZ(2, 1, 3), VF(1, 0, 5, 0, 0, 4), 6, 0);
    KIT_CHECK("graph as_strided", &r1, TPU_F32, 1, SZ(2), VF(1, 3), 2, 0);
  } else {
    EXPECT_EQ_INT(n, 2);
    for (int i = 0; i < n; ++i) tpu_storage_release(res[i].storage);
  }
  kit_release(&in);
  tpu_graph_destroy(g);
}
