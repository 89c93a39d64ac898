/* Graphs (graph.h) from C: whole programs of aten ops over values, run through
 * the executable cache; scalar inputs, view inputs, aliased (in-place) outputs,
 * random ops, _foreach_ ops, device-side checks, and the errors of building and
 * running one, each a status. */
#include <stdlib.h>
#include <string.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/graph.h"
#include "torchtpu/runtime.h"

/* ------------------------------------------------------------------ helpers */

static tpu_arg_t gv(int32_t v) {
  tpu_arg_t a = kit_arg_none();
  a.kind = TPU_ARG_VALUE;
  a.u.value = v;
  return a;
}

static tpu_arg_t gvs(int n, const int32_t* ids) {
  tpu_arg_t a = kit_arg_none();
  a.kind = TPU_ARG_VALUE_LIST;
  a.u.list.n = n;
  a.u.list.values = ids;
  return a;
}

/* A Scalar read from 0-d value `id`, promoting as a Python float. */
static tpu_arg_t gscalar(int32_t id) {
  tpu_arg_t a = kit_arg_none();
  a.kind = TPU_ARG_VALUE_SCALAR;
  a.u.scalar.dtype = TPU_F64;
  a.u.scalar.wrapped = true;
  a.u.scalar.i = id;
  return a;
}

static tpu_arg_t gfloats(int n, const double* v) {
  tpu_arg_t a = kit_arg_none();
  a.kind = TPU_ARG_FLOAT_LIST;
  a.u.list.n = n;
  a.u.list.floats = v;
  return a;
}

/* Result r as a dense tensor (owning r's storage). */
static tpu_tensor_t gt_dense(const tpu_result_t* r) { return tpu_tensor_dense(r->storage, r->dtype, r->rank, r->sizes); }

/* Runs g on device 0; its results as dense tensors (owned) in outs[0 .. *n). */
static tpu_status_t* gt_run(const tpu_graph_t* g, const tpu_arg_t* in, int nin, int max, tpu_tensor_t* outs, int* n) {
  tpu_result_t res[KIT_MAX_OUTS];
  *n = 0;
  if (max > KIT_MAX_OUTS) max = KIT_MAX_OUTS;
  TPU_RETURN_IF_ERROR(tpu_graph_run(g, 0, in, nin, max, res, n));
  for (int i = 0; i < *n; ++i) outs[i] = gt_dense(&res[i]);
  return NULL;
}

/* Checks that `st` has `code` and a message containing `a` and `b` (NULL: any); frees it. */
#define GT_ERROR(st, code, a, b) gt_error((st), (code), (a), (b), __FILE__, __LINE__)
static void gt_error(tpu_status_t* st, tpu_status_code_t code, const char* a, const char* b, const char* file,
                     int line) {
  if (!st) {
    tpu_test_fail(file, line, "expected %s, got OK", tpu_status_code_name(code));
    return;
  }
  const char* m = tpu_status_message(st);
  if (tpu_status_code(st) != code)
    tpu_test_fail(file, line, "code %s, expected %s: %s", tpu_status_code_name(tpu_status_code(st)),
                  tpu_status_code_name(code), m);
  if (a && !strstr(m, a)) tpu_test_fail(file, line, "message lacks \"%s\": %s", a, m);
  if (b && !strstr(m, b)) tpu_test_fail(file, line, "message lacks \"%s\": %s", b, m);
  tpu_status_free(st);
}

/* Building: the first error wins, later steps are skipped. */
#define GB(expr)              \
  do {                        \
    if (!err) err = (expr);   \
  } while (0)
/* Ends building: on an error, reports it, destroys the graph and returns. */
#define GB_DONE(g)                                                        \
  do {                                                                    \
    if (!tpu_test_check_ok(err, "building the graph", __FILE__, __LINE__)) { \
      tpu_graph_destroy(g);                                               \
      return;                                                             \
    }                                                                     \
  } while (0)

/* Downloads t (n floats) into out; false (and a failure) on an error. */
static bool gt_read(const tpu_tensor_t* t, float* out, int64_t n, const char* file, int line) {
  return tpu_test_check_ok(kit_read_f32(t, out, n), "reading a tensor", file, line);
}
#define GT_READ(t, out, n) gt_read((t), (out), (n), __FILE__, __LINE__)

/* ------------------------------------------------- arithmetic, cache, metrics */

/* a = x + 2y; b = a*a; c = b*s; d = c.sum(1) with c, d for x, y of `rows` x `cols`. */
static void gt_arith_want(int rows, int cols, const float* x, const float* y, double s, float* c, float* d) {
  for (int i = 0; i < rows; ++i) {
    d[i] = 0;
    for (int j = 0; j < cols; ++j) {
      float a = x[i * cols + j] + 2.0f * y[i * cols + j];
      c[i * cols + j] = (float)((double)(a * a) * s);
      d[i] += c[i * cols + j];
    }
  }
}

TEST(graph_arith_scalar_input_compiles_once_per_layout) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, y, s, a, b, c, d;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &y));
  GB(tpu_graph_add_input(g, TPU_ARG_SCALAR, &s));
  tpu_arg_t a_args[3] = {gv(x), gv(y), kit_arg_scalar_i(2)};
  GB(tpu_graph_apply(g, "add", "Tensor", a_args, 3, 1, &a));
  tpu_arg_t b_args[2] = {gv(a), gv(a)};
  GB(tpu_graph_apply(g, "mul", "Tensor", b_args, 2, 1, &b));
  tpu_arg_t c_args[2] = {gv(b), gscalar(s)};
  GB(tpu_graph_apply(g, "mul", "Tensor", c_args, 2, 1, &c));
  int64_t dim[1] = {1};
  tpu_arg_t d_args[4] = {gv(c), kit_arg_ints(1, dim), kit_arg_bool(false), kit_arg_none()};
  GB(tpu_graph_apply(g, "sum", "dim_IntList", d_args, 4, 1, &d));
  dim[0] = 0; /* the graph holds its own copy of the list */
  int32_t outs[2] = {c, d};
  GB(tpu_graph_set_outputs(g, 2, outs));
  GB_DONE(g);
  EXPECT_EQ_INT(x, 0);
  EXPECT_EQ_INT(y, 1);
  EXPECT_EQ_INT(s, 2);
  EXPECT_EQ_INT(a, 3);
  EXPECT_EQ_INT(d, 6);
  EXPECT_EQ_INT(tpu_graph_num_inputs(g), 3);
  EXPECT_EQ_INT(tpu_graph_num_ops(g), 4);
  EXPECT_EQ_INT(tpu_graph_num_outputs(g), 2);

  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES), runs = tpu_metric_get(TPU_METRIC_GRAPH_RUNS);
  float xv[2][6] = {{1, 2, 3, 4, 5, 6}, {-3, 0.5f, 2, -1, 0, 7}};
  float yv[2][6] = {{0.5f, -1, 2, 0, 1.5f, -2}, {1, 1, -0.25f, 4, -2, 0.5f}};
  double sv[2] = {0.5, -3.0};
  for (int r = 0; r < 2; ++r) {
    tpu_tensor_t tx, ty, o[KIT_MAX_OUTS];
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, xv[r], &tx));
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, yv[r], &ty));
    tpu_arg_t in[3] = {kit_arg_tensor(&tx), kit_arg_tensor(&ty), kit_arg_scalar_f(sv[r])};
    int n = 0;
    tpu_status_t* st = gt_run(g, in, 3, 2, o, &n);
    kit_release(&tx);
    kit_release(&ty);
    if (tpu_test_check_ok(st, "tpu_graph_run", __FILE__, __LINE__)) {
      EXPECT_EQ_INT(n, 2);
      float wc[6], wd[2];
      gt_arith_want(2, 3, xv[r], yv[r], sv[r], wc, wd);
      if (n == 2) {
        KIT_CHECK("c", &o[0], TPU_F32, 2, (int64_t[]){2, 3}, wc, 6, 1e-5);
        KIT_CHECK("c.sum(1)", &o[1], TPU_F32, 1, (int64_t[]){2}, wd, 2, 1e-5);
      } else {
        kit_release_all(o, n);
      }
    }
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_RUNS) - runs, 2);

  /* Inputs of another shape: one more compile, then reused. */
  float x3[12], y3[12];
  for (int i = 0; i < 12; ++i) {
    x3[i] = (float)(i % 5) - 2.0f;
    y3[i] = 0.25f * (float)i;
  }
  for (int r = 0; r < 2; ++r) {
    tpu_tensor_t tx, ty, o[KIT_MAX_OUTS];
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, x3, &tx));
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, y3, &ty));
    tpu_arg_t in[3] = {kit_arg_tensor(&tx), kit_arg_tensor(&ty), kit_arg_scalar_f(r ? 1.5 : 2.0)};
    int n = 0;
    tpu_status_t* st = gt_run(g, in, 3, 2, o, &n);
    kit_release(&tx);
    kit_release(&ty);
    if (tpu_test_check_ok(st, "tpu_graph_run [3, 4]", __FILE__, __LINE__)) {
      float wc[12], wd[3];
      gt_arith_want(3, 4, x3, y3, r ? 1.5 : 2.0, wc, wd);
      if (n == 2) {
        KIT_CHECK("c [3, 4]", &o[0], TPU_F32, 2, (int64_t[]){3, 4}, wc, 12, 1e-5);
        KIT_CHECK("c.sum(1) [3]", &o[1], TPU_F32, 1, (int64_t[]){3}, wd, 3, 1e-5);
      } else {
        kit_release_all(o, n);
      }
    }
    EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 2);
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_RUNS) - runs, 4);

  /* A scalar of another kind (an int) is another layout: c = b * 3 still float. */
  {
    tpu_tensor_t tx, ty, o[KIT_MAX_OUTS];
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, xv[0], &tx));
    ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, yv[0], &ty));
    tpu_arg_t in[3] = {kit_arg_tensor(&tx), kit_arg_tensor(&ty), kit_arg_scalar_i(3)};
    int n = 0;
    tpu_status_t* st = gt_run(g, in, 3, 2, o, &n);
    kit_release(&tx);
    kit_release(&ty);
    if (tpu_test_check_ok(st, "tpu_graph_run int scalar", __FILE__, __LINE__)) {
      float wc[6], wd[2];
      gt_arith_want(2, 3, xv[0], yv[0], 3.0, wc, wd);
      if (n == 2) {
        KIT_CHECK("c (int s)", &o[0], TPU_F32, 2, (int64_t[]){2, 3}, wc, 6, 1e-5);
        KIT_CHECK("c.sum(1) (int s)", &o[1], TPU_F32, 1, (int64_t[]){2}, wd, 2, 1e-5);
      } else {
        kit_release_all(o, n);
      }
    }
    EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 3);
  }
  tpu_graph_destroy(g);
}

/* Two graphs recording the same ops are two programs: each compiles once. */
TEST(graph_identity_is_per_graph) {
  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  float xv[3] = {1, -2, 3};
  tpu_tensor_t tx;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, xv, &tx));
  for (int k = 0; k < 2; ++k) {
    tpu_graph_t* g = NULL;
    ASSERT_OK(tpu_graph_create(&g));
    int32_t x, y;
    tpu_status_t* err = NULL;
    GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
    tpu_arg_t args[2] = {gv(x), kit_arg_scalar_f(k ? 10.0 : 100.0)}; /* a constant of the program */
    GB(tpu_graph_apply(g, "mul", "Tensor", args, 2, 1, &y));
    GB(tpu_graph_set_outputs(g, 1, &y));
    GB_DONE(g);
    tpu_arg_t in[1] = {kit_arg_tensor(&tx)};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    if (tpu_test_check_ok(gt_run(g, in, 1, 1, o, &n), "run", __FILE__, __LINE__)) {
      float s = k ? 10.0f : 100.0f;
      KIT_CHECK("x * constant", &o[0], TPU_F32, 1, (int64_t[]){3}, ((float[]){s, -2 * s, 3 * s}), 3, 0);
    }
    tpu_graph_destroy(g);
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 2);
  kit_release(&tx);
}

/* ------------------------------------------------------------- view inputs */

TEST(graph_strided_view_inputs) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, y, z;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &y));
  tpu_arg_t args[3] = {gv(x), gv(y), kit_arg_scalar_i(10)};
  GB(tpu_graph_apply(g, "add", "Tensor", args, 3, 1, &z));
  GB(tpu_graph_set_outputs(g, 1, &z));
  GB_DONE(g);
  float base[24];
  for (int i = 0; i < 24; ++i) base[i] = (float)i;
  tpu_tensor_t big;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){4, 6}, base, &big));
  float zeros[6] = {0};
  tpu_tensor_t zero;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 2}, zeros, &zero));
  struct {
    const char* what;
    tpu_tensor_t view;
  } cases[] = {
      /* big[1:4, 2:4]: offset 8, row stride 6 */
      {"offset window", kit_view(&big, 2, (int64_t[]){3, 2}, (int64_t[]){6, 1}, 8)},
      /* big[:2, :3].t(): transposed */
      {"transpose", kit_view(&big, 2, (int64_t[]){3, 2}, (int64_t[]){1, 6}, 0)},
      /* rows 7 apart, every other column, from offset 1 (a gather-like window) */
      {"diagonal-ish", kit_view(&big, 2, (int64_t[]){3, 2}, (int64_t[]){7, 2}, 1)},
      /* an expanded row: stride 0 */
      {"expanded", kit_view(&big, 2, (int64_t[]){3, 2}, (int64_t[]){0, 1}, 20)},
  };
  for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); ++k) {
    const tpu_tensor_t* v = &cases[k].view;
    float want[6];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) want[i * 2 + j] = base[v->offset + i * v->strides[0] + j * v->strides[1]] * 10.0f;
    /* z = zero + 10 * view */
    tpu_arg_t in[2] = {kit_arg_tensor(&zero), kit_arg_tensor(v)};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    if (tpu_test_check_ok(gt_run(g, in, 2, 1, o, &n), cases[k].what, __FILE__, __LINE__))
      KIT_CHECK(cases[k].what, &o[0], TPU_F32, 2, (int64_t[]){3, 2}, want, 6, 0);
  }
  /* Rows at different offsets of the same layout: values of each. */
  for (int r = 0; r < 3; ++r) {
    tpu_tensor_t row = kit_view(&big, 2, (int64_t[]){3, 2}, (int64_t[]){6, 1}, 2 + 6 * (r % 2) + r);
    tpu_arg_t in[2] = {kit_arg_tensor(&zero), kit_arg_tensor(&row)};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    float want[6];
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 2; ++j) want[i * 2 + j] = base[row.offset + i * 6 + j] * 10.0f;
    if (tpu_test_check_ok(gt_run(g, in, 2, 1, o, &n), "offset rows", __FILE__, __LINE__))
      KIT_CHECK("offset rows", &o[0], TPU_F32, 2, (int64_t[]){3, 2}, want, 6, 0);
  }
  /* The view's storage is unchanged by the run. */
  float back[24];
  if (GT_READ(&big, back, 24))
    for (int i = 0; i < 24; ++i) EXPECT_NEAR(back[i], base[i], 0);
  kit_release(&zero);
  kit_release(&big);
  tpu_graph_destroy(g);
}

/* ------------------------------------------- outputs that are inputs, no ops */

TEST(graph_outputs_that_are_inputs) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, y, s, z;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &y));
  GB(tpu_graph_add_input(g, TPU_ARG_SCALAR, &s));
  tpu_arg_t args[3] = {gv(x), gv(y), gscalar(s)};
  GB(tpu_graph_apply(g, "add", "Tensor", args, 3, 1, &z));
  int32_t outs[4] = {y, z, x, y};
  GB(tpu_graph_set_outputs(g, 4, outs));
  GB_DONE(g);
  float xv[4] = {1, 2, 3, 4}, yv[6] = {10, 20, 30, 40, 50, 60};
  tpu_tensor_t tx, ty;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, xv, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){6}, yv, &ty));
  tpu_tensor_t yview = kit_view(&ty, 1, (int64_t[]){4}, (int64_t[]){1}, 2); /* y[2:] */
  tpu_arg_t in[3] = {kit_arg_tensor(&tx), kit_arg_tensor(&yview), kit_arg_scalar_f(0.5)};
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  if (tpu_test_check_ok(gt_run(g, in, 3, 4, o, &n), "run", __FILE__, __LINE__)) {
    ASSERT_EQ_INT(n, 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT(o[i].storage != tx.storage);
      EXPECT(o[i].storage != ty.storage);
    }
    EXPECT(o[0].storage != o[3].storage);
    KIT_CHECK("y", &o[0], TPU_F32, 1, (int64_t[]){4}, ((float[]){30, 40, 50, 60}), 4, 0);
    KIT_CHECK("x + 0.5 y", &o[1], TPU_F32, 1, (int64_t[]){4}, ((float[]){16, 22, 28, 34}), 4, 0);
    KIT_CHECK("x", &o[2], TPU_F32, 1, (int64_t[]){4}, xv, 4, 0);
    KIT_CHECK("y again", &o[3], TPU_F32, 1, (int64_t[]){4}, ((float[]){30, 40, 50, 60}), 4, 0);
  }
  kit_release(&tx);
  kit_release(&ty);
  tpu_graph_destroy(g);
}

TEST(graph_with_zero_ops) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_set_outputs(g, 1, &x));
  GB_DONE(g);
  EXPECT_EQ_INT(tpu_graph_num_ops(g), 0);
  EXPECT_EQ_INT(tpu_graph_num_outputs(g), 1);
  float v[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor_t t;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, v, &t));
  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  for (int r = 0; r < 2; ++r) {
    tpu_arg_t in[1] = {kit_arg_tensor(&t)};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    if (tpu_test_check_ok(gt_run(g, in, 1, 1, o, &n), "identity", __FILE__, __LINE__)) {
      EXPECT_EQ_INT(n, 1);
      KIT_CHECK("identity", &o[0], TPU_F32, 2, (int64_t[]){2, 3}, v, 6, 0);
    }
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 1);
  /* The transposed view: its logical values, densely. */
  tpu_tensor_t tt = kit_view(&t, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0);
  tpu_arg_t in[1] = {kit_arg_tensor(&tt)};
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  if (tpu_test_check_ok(gt_run(g, in, 1, 1, o, &n), "identity of a transpose", __FILE__, __LINE__))
    KIT_CHECK("identity of a transpose", &o[0], TPU_F32, 2, (int64_t[]){3, 2}, ((float[]){1, 4, 2, 5, 3, 6}), 6, 0);
  /* An int64 input keeps its dtype. */
  int64_t iv[3] = {7, -8, 9};
  tpu_tensor_t ti;
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){3}, iv, &ti));
  in[0] = kit_arg_tensor(&ti);
  if (tpu_test_check_ok(gt_run(g, in, 1, 1, o, &n), "identity i64", __FILE__, __LINE__))
    KIT_CHECK("identity i64", &o[0], TPU_I64, 1, (int64_t[]){3}, ((float[]){7, -8, 9}), 3, 0);
  kit_release(&ti);
  kit_release(&t);
  tpu_graph_destroy(g);

  /* No inputs, no ops, no outputs: runs and returns nothing. */
  ASSERT_OK(tpu_graph_create(&g));
  err = NULL;
  GB(tpu_graph_set_outputs(g, 0, NULL));
  GB_DONE(g);
  tpu_result_t res[1];
  n = -1;
  EXPECT_OK(tpu_graph_run(g, 0, NULL, 0, 0, res, &n));
  EXPECT_EQ_INT(n, 0);
  tpu_graph_destroy(g);
}

/* ----------------------------------------------------------------- aliases */

/* p <- p + lr * g, written back into p after each run. */
static tpu_graph_t* gt_sgd_graph(tpu_status_t** out_err) {
  tpu_graph_t* g = NULL;
  tpu_status_t* err = tpu_graph_create(&g);
  int32_t p, grad, lr, upd;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &p));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &grad));
  GB(tpu_graph_add_input(g, TPU_ARG_SCALAR, &lr));
  tpu_arg_t args[3] = {gv(p), gv(grad), gscalar(lr)};
  GB(tpu_graph_apply(g, "add", "Tensor", args, 3, 1, &upd));
  /* Aliasing before the outputs are set is refused. */
  if (!err) GT_ERROR(tpu_graph_alias(g, 0, 0), TPU_FAILED_PRECONDITION, NULL, NULL);
  GB(tpu_graph_set_outputs(g, 1, &upd));
  GB(tpu_graph_alias(g, 0, 0));
  *out_err = err;
  return g;
}

TEST(graph_alias_writes_output_into_input) {
  tpu_status_t* err = NULL;
  tpu_graph_t* g = gt_sgd_graph(&err);
  GB_DONE(g);
  /* Bad aliases: an output or input out of range, a scalar input. */
  GT_ERROR(tpu_graph_alias(g, 1, 0), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_alias(g, -1, 0), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_alias(g, 0, 3), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_alias(g, 0, 2), TPU_INVALID_ARGUMENT, NULL, NULL);
  float pv[4] = {1, 2, 3, 4}, gvv[4] = {2, -2, 4, 8};
  tpu_tensor_t tp, tg;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, pv, &tp));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, gvv, &tg));
  double lrs[2] = {-0.5, 0.25};
  float want[4];
  memcpy(want, pv, sizeof want);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 4; ++i) want[i] += (float)lrs[r] * gvv[i];
    tpu_arg_t in[3] = {kit_arg_tensor(&tp), kit_arg_tensor(&tg), kit_arg_scalar_f(lrs[r])};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    if (!tpu_test_check_ok(gt_run(g, in, 3, 1, o, &n), "sgd step", __FILE__, __LINE__)) break;
    KIT_CHECK("sgd result", &o[0], TPU_F32, 1, (int64_t[]){4}, want, 4, 1e-6);
    /* p's storage holds the result (the next step starts from it). */
    float got[4];
    if (GT_READ(&tp, got, 4))
      for (int i = 0; i < 4; ++i) EXPECT_NEAR(got[i], want[i], 1e-6);
  }
  float gback[4];
  if (GT_READ(&tg, gback, 4))
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(gback[i], gvv[i], 0);
  kit_release(&tp);
  kit_release(&tg);

  /* p a view inside a bigger storage (a row, then a column): only the view changes. */
  float base[12];
  for (int i = 0; i < 12; ++i) base[i] = (float)i;
  tpu_tensor_t big, g3;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, base, &big));
  float g3v[4] = {1, 1, 1, 1};
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){4}, g3v, &g3));
  tpu_tensor_t row = kit_view(&big, 1, (int64_t[]){4}, (int64_t[]){1}, 4);
  tpu_arg_t in[3] = {kit_arg_tensor(&row), kit_arg_tensor(&g3), kit_arg_scalar_f(100.0)};
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  if (tpu_test_check_ok(gt_run(g, in, 3, 1, o, &n), "row step", __FILE__, __LINE__)) {
    kit_release_all(o, n);
    float got[12];
    if (GT_READ(&big, got, 12))
      for (int i = 0; i < 12; ++i) EXPECT_NEAR(got[i], base[i] + (i >= 4 && i < 8 ? 100 : 0), 0);
  }
  tpu_tensor_t col3 = kit_view(&big, 1, (int64_t[]){3}, (int64_t[]){4}, 1); /* big[:, 1] */
  tpu_tensor_t g3short = kit_view(&g3, 1, (int64_t[]){3}, (int64_t[]){1}, 0);
  tpu_arg_t in2[3] = {kit_arg_tensor(&col3), kit_arg_tensor(&g3short), kit_arg_scalar_f(-1.0)};
  if (tpu_test_check_ok(gt_run(g, in2, 3, 1, o, &n), "column step", __FILE__, __LINE__)) {
    kit_release_all(o, n);
    float got[12];
    if (GT_READ(&big, got, 12))
      for (int i = 0; i < 12; ++i)
        EXPECT_NEAR(got[i], base[i] + (i >= 4 && i < 8 ? 100 : 0) - (i % 4 == 1 ? 1 : 0), 0);
  }
  kit_release(&g3);
  kit_release(&big);
  tpu_graph_destroy(g);
}

/* One SGD step of gt_sgd_graph on p (n floats, all 1) with grad 1 and lr -1;
 * the results are released, so p's storage is the only holder of the output. */
static bool gt_sgd_step(const tpu_graph_t* g, tpu_tensor_t* p, tpu_tensor_t* grad, const char* what) {
  tpu_arg_t in[3] = {kit_arg_tensor(p), kit_arg_tensor(grad), kit_arg_scalar_f(-1.0)};
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  if (!tpu_test_check_ok(gt_run(g, in, 3, 1, o, &n), what, __FILE__, __LINE__)) return false;
  kit_release_all(o, n);
  return true;
}

TEST(graph_alias_donates_the_input_buffer) {
  tpu_status_t* err = NULL;
  tpu_graph_t* g = gt_sgd_graph(&err);
  GB_DONE(g);
  /* 2^18 floats = 1 MiB: the upload is a lent host block on the CPU plugin. */
  enum { N = 1 << 18 };
  float* ones = malloc(sizeof(float) * N);
  float* got = malloc(sizeof(float) * N);
  ASSERT(ones && got);
  for (int i = 0; i < N; ++i) ones[i] = 1;
  tpu_tensor_t tp, tg, keep;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, ones, &tp));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, ones, &tg));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, ones, &keep));
  int64_t d0 = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  /* Step 1 reads the upload (p = 0); step 2 reuses step 1's output buffer (p = -1). */
  if (gt_sgd_step(g, &tp, &tg, "step 1") && gt_sgd_step(g, &tp, &tg, "step 2")) {
    bool lent = kit_on_cpu_plugin();
    EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DONATED_BUFFERS) - d0, (lent ? 1 : 2));
    if (GT_READ(&tp, got, N)) EXPECT_NEAR(got[N - 1], -1, 0);
  }
  /* A tensor sharing p's buffer (a copy adopts it) keeps its values: no donation. */
  ASSERT_OK(tpu_tensor_copy(&keep, &tp));
  int64_t d1 = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
  if (gt_sgd_step(g, &tp, &tg, "step 3")) {
    EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DONATED_BUFFERS) - d1, 0);
    if (GT_READ(&tp, got, N)) EXPECT_NEAR(got[0], -2, 0);
    if (GT_READ(&keep, got, N)) EXPECT_NEAR(got[0], -1, 0);
  }
  /* Once the copy is gone, the next step donates again. */
  kit_release(&keep);
  if (gt_sgd_step(g, &tp, &tg, "step 4")) {
    EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DONATED_BUFFERS) - d1, 1);
    if (GT_READ(&tp, got, N)) EXPECT_NEAR(got[N / 2], -3, 0);
  }
  if (GT_READ(&tg, got, N)) EXPECT_NEAR(got[7], 1, 0);
  free(ones);
  free(got);
  kit_release(&tp);
  kit_release(&tg);
  tpu_graph_destroy(g);
}

/* Outputs naming one value are one program result: the run returns separate
 * storages sharing its buffer, and of two inputs written with it one donates. */
TEST(graph_repeated_outputs_share_one_result) {
  tpu_graph_t* g = NULL;
  tpu_status_t* err = tpu_graph_create(&g);
  int32_t p, q, v;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &p));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &q));
  tpu_arg_t args[3] = {gv(p), gv(q), kit_arg_scalar_f(1.0)};
  GB(tpu_graph_apply(g, "add", "Tensor", args, 3, 1, &v));
  GB(tpu_graph_set_outputs(g, 4, (int32_t[]){v, p, v, v}));
  GB(tpu_graph_alias(g, 2, 0)); /* p <- v */
  GB(tpu_graph_alias(g, 3, 1)); /* q <- v */
  GB_DONE(g);
  enum { N = 1024 };
  float a[N], b[N], got[N];
  for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = 1;
  tpu_tensor_t tp, tq, o[KIT_MAX_OUTS];
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, a, &tp));
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, b, &tq));
  for (int step = 1; step <= 2; ++step) {
    int64_t d0 = tpu_metric_get(TPU_METRIC_DONATED_BUFFERS);
    tpu_arg_t in[2] = {kit_arg_tensor(&tp), kit_arg_tensor(&tq)};
    int n = 0;
    if (!tpu_test_check_ok(gt_run(g, in, 2, 4, o, &n), "run", __FILE__, __LINE__)) break;
    EXPECT_EQ_INT(n, 4);
    /* step 1: v = i + 1; step 2: v = 2 (i + 1), as p = q = i + 1 after step 1 */
    float want0 = step == 1 ? 1 : 2;
    if (GT_READ(&o[0], got, N)) EXPECT_NEAR(got[5], want0 * 6, 0);
    if (GT_READ(&o[1], got, N)) EXPECT_NEAR(got[5], step == 1 ? 5 : 6, 0); /* p before the run */
    if (GT_READ(&tp, got, N)) EXPECT_NEAR(got[5], want0 * 6, 0);
    if (GT_READ(&tq, got, N)) EXPECT_NEAR(got[5], want0 * 6, 0);
    EXPECT(o[0].storage != o[2].storage && o[2].storage != o[3].storage);
    /* A write to one output leaves the others (and the inputs) as they were. */
    ASSERT_OK(tpu_tensor_copy(&o[0], &o[1]));
    if (GT_READ(&o[2], got, N)) EXPECT_NEAR(got[5], want0 * 6, 0);
    if (GT_READ(&tp, got, N)) EXPECT_NEAR(got[5], want0 * 6, 0);
    kit_release_all(o, n);
    /* The outputs shared the buffer during the run: at most p's or q's donates, never both. */
    EXPECT(tpu_metric_get(TPU_METRIC_DONATED_BUFFERS) - d0 <= 1);
  }
  kit_release(&tp);
  kit_release(&tq);
  tpu_graph_destroy(g);
}

/* ------------------------------------------------------------------ random */

static int gt_count_equal(const float* a, const float* b, int n) {
  int k = 0;
  for (int i = 0; i < n; ++i) k += a[i] == b[i];
  return k;
}

TEST(graph_random_ops_draw_fresh_numbers_each_run) {
  enum { N = 512 };
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, r1, r2, u;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  tpu_arg_t rl[6] = {gv(x), kit_arg_none(), kit_arg_none(), kit_arg_none(), kit_arg_none(), kit_arg_none()};
  GB(tpu_graph_apply(g, "rand_like", "", rl, 6, 1, &r1));
  GB(tpu_graph_apply(g, "rand_like", "", rl, 6, 1, &r2));
  /* uniform(self, from, to, generator) */
  tpu_arg_t un[4] = {gv(x), kit_arg_float(2.0), kit_arg_float(5.0), kit_arg_none()};
  GB(tpu_graph_apply(g, "uniform", "", un, 4, 1, &u));
  int32_t outs[3] = {r1, r2, u};
  GB(tpu_graph_set_outputs(g, 3, outs));
  GB_DONE(g);
  tpu_tensor_t tx;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){N}, NULL, &tx));
  tpu_generator_t* gen = tpu_generator_default(0);
  ASSERT(gen != NULL);
  uint64_t seed0, off0;
  tpu_generator_get_state(gen, &seed0, &off0);
  static float v[3][3][N]; /* run, output, element */
  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  for (int r = 0; r < 3; ++r) {
    if (r == 2) tpu_generator_set_state(gen, seed0, off0); /* replays run 0 */
    tpu_arg_t in[1] = {kit_arg_tensor(&tx)};
    tpu_tensor_t o[KIT_MAX_OUTS];
    int n = 0;
    if (!tpu_test_check_ok(gt_run(g, in, 1, 3, o, &n), "random run", __FILE__, __LINE__)) {
      kit_release(&tx);
      tpu_graph_destroy(g);
      return;
    }
    ASSERT_EQ_INT(n, 3);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ_INT(o[k].dtype, TPU_F32);
      EXPECT_EQ_INT(tpu_tensor_numel(&o[k]), N);
      EXPECT_OK(kit_read_f32(&o[k], v[r][k], N));
    }
    kit_release_all(o, n);
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - compiles, 1);
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < N; ++i) {
      EXPECT(v[r][0][i] >= 0.0f && v[r][0][i] < 1.0f);
      EXPECT(v[r][1][i] >= 0.0f && v[r][1][i] < 1.0f);
      EXPECT(v[r][2][i] >= 2.0f && v[r][2][i] < 5.0f);
    }
  /* Fresh numbers on each run, and for each op of one run. */
  for (int k = 0; k < 3; ++k) EXPECT(gt_count_equal(v[0][k], v[1][k], N) < 4);
  EXPECT(gt_count_equal(v[0][0], v[0][1], N) < 4);
  /* Means: about 0.5 and 3.5. */
  double m0 = 0, m2 = 0;
  for (int i = 0; i < N; ++i) {
    m0 += v[1][0][i];
    m2 += v[1][2][i];
  }
  EXPECT_NEAR(m0 / N, 0.5, 0.1);
  EXPECT_NEAR(m2 / N, 3.5, 0.3);
  /* The same generator state replays the same numbers. */
  for (int k = 0; k < 3; ++k) EXPECT_EQ_INT(gt_count_equal(v[0][k], v[2][k], N), N);
  kit_release(&tx);
  tpu_graph_destroy(g);
}

/* ----------------------------------------------------------------- foreach */

TEST(graph_foreach_add_list_and_addcdiv_scalarlist) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t a[3], b[3], c[3], sum0, acd0;
  tpu_status_t* err = NULL;
  for (int i = 0; i < 3; ++i) GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &a[i]));
  for (int i = 0; i < 3; ++i) GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &b[i]));
  /* _foreach_add.List(self, other, alpha=2) */
  tpu_arg_t add_args[3] = {gvs(3, a), gvs(3, b), kit_arg_scalar_i(2)};
  GB(tpu_graph_apply(g, "_foreach_add", "List", add_args, 3, 3, &sum0));
  for (int i = 0; i < 3; ++i) c[i] = sum0 + i;
  /* _foreach_addcdiv.ScalarList(self=a, tensor1=b, tensor2=c, scalars) */
  double scal[3] = {0.5, -1.0, 2.0};
  tpu_arg_t acd_args[4] = {gvs(3, a), gvs(3, b), gvs(3, c), gfloats(3, scal)};
  GB(tpu_graph_apply(g, "_foreach_addcdiv", "ScalarList", acd_args, 4, 3, &acd0));
  scal[0] = 99.0; /* copied at apply */
  int32_t outs[6] = {sum0, sum0 + 1, sum0 + 2, acd0, acd0 + 1, acd0 + 2};
  GB(tpu_graph_set_outputs(g, 6, outs));
  GB_DONE(g);
  const double want_scal[3] = {0.5, -1.0, 2.0};
  /* shapes [2], [2, 3], [4] */
  const int64_t sizes[3][2] = {{2, 0}, {2, 3}, {4, 0}};
  const int ranks[3] = {1, 2, 1}, numels[3] = {2, 6, 4};
  float av[3][6] = {{1, 2}, {1, 2, 3, 4, 5, 6}, {-1, 0, 1, 2}};
  float bv[3][6] = {{3, -1}, {0.5f, 0.5f, 1, -1, 2, 3}, {1, 2, 3, 4}};
  tpu_tensor_t ta[3], tb[3];
  tpu_arg_t in[6];
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(kit_tensor(TPU_F32, ranks[i], sizes[i], av[i], &ta[i]));
    ASSERT_OK(kit_tensor(TPU_F32, ranks[i], sizes[i], bv[i], &tb[i]));
    in[i] = kit_arg_tensor(&ta[i]);
    in[3 + i] = kit_arg_tensor(&tb[i]);
  }
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  if (tpu_test_check_ok(gt_run(g, in, 6, 6, o, &n), "foreach run", __FILE__, __LINE__)) {
    ASSERT_EQ_INT(n, 6);
    for (int i = 0; i < 3; ++i) {
      float ws[6], wa[6];
      for (int k = 0; k < numels[i]; ++k) {
        ws[k] = av[i][k] + 2 * bv[i][k];
        wa[k] = av[i][k] + (float)want_scal[i] * bv[i][k] / ws[k];
      }
      KIT_CHECK("_foreach_add.List", &o[i], TPU_F32, ranks[i], sizes[i], ws, numels[i], 1e-6);
      KIT_CHECK("_foreach_addcdiv.ScalarList", &o[3 + i], TPU_F32, ranks[i], sizes[i], wa, numels[i], 1e-6);
    }
  }
  for (int i = 0; i < 3; ++i) {
    kit_release(&ta[i]);
    kit_release(&tb[i]);
  }
  tpu_graph_destroy(g);
}

/* Lists of different lengths: an error at lowering naming the op. */
TEST(graph_foreach_list_length_mismatch) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t a[2], r;
  tpu_status_t* err = NULL;
  for (int i = 0; i < 2; ++i) GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &a[i]));
  tpu_arg_t args[3] = {gvs(2, a), gvs(1, a), kit_arg_scalar_i(1)};
  GB(tpu_graph_apply(g, "_foreach_add", "List", args, 3, 2, &r));
  int32_t outs[2] = {r, r + 1};
  GB(tpu_graph_set_outputs(g, 2, outs));
  GB_DONE(g);
  float v[2] = {1, 2};
  tpu_tensor_t t;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2}, v, &t));
  tpu_arg_t in[2] = {kit_arg_tensor(&t), kit_arg_tensor(&t)};
  tpu_result_t res[2];
  int n = -1;
  GT_ERROR(tpu_graph_run(g, 0, in, 2, 2, res, &n), TPU_INVALID_ARGUMENT, "aten::_foreach_add", "same length");
  EXPECT_EQ_INT(n, 0);
  kit_release(&t);
  tpu_graph_destroy(g);
}

/* ----------------------------------------------------- device-side checks */

TEST(graph_device_check_raises_at_next_sync) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, idx, sel, y;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &idx));
  tpu_arg_t s_args[3] = {gv(x), kit_arg_int(0), gv(idx)};
  GB(tpu_graph_apply(g, "index_select", "", s_args, 3, 1, &sel));
  tpu_arg_t n_args[1] = {gv(sel)};
  GB(tpu_graph_apply(g, "neg", "", n_args, 1, 1, &y));
  GB(tpu_graph_set_outputs(g, 1, &y));
  GB_DONE(g);
  float xv[12];
  for (int i = 0; i < 12; ++i) xv[i] = (float)i;
  tpu_tensor_t tx, ti;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 4}, xv, &tx));
  ASSERT_OK(tpu_runtime_synchronize());
  int64_t checked = tpu_metric_get(TPU_METRIC_CHECKED_OPS);
  /* Out of range: the run itself succeeds; the next sync reports it. */
  int64_t bad[2] = {0, 5};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, bad, &ti));
  tpu_arg_t in[2] = {kit_arg_tensor(&tx), kit_arg_tensor(&ti)};
  tpu_tensor_t o[KIT_MAX_OUTS];
  int n = 0;
  EXPECT_OK(gt_run(g, in, 2, 1, o, &n));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_CHECKED_OPS), checked + 1);
  GT_ERROR(tpu_runtime_synchronize(), TPU_OUT_OF_RANGE, "aten::index_select", "index out of range in self");
  ASSERT_OK(tpu_runtime_synchronize()); /* reported once */
  kit_release_all(o, n);
  kit_release(&ti);
  /* Reported by a download too; then good indices give values, with no recompile. */
  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  int64_t bad2[2] = {-4, 1};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, bad2, &ti));
  in[1] = kit_arg_tensor(&ti);
  if (tpu_test_check_ok(gt_run(g, in, 2, 1, o, &n), "run", __FILE__, __LINE__)) {
    float got[8];
    GT_ERROR(kit_read_f32(&o[0], got, 8), TPU_OUT_OF_RANGE, "aten::index_select", NULL);
    kit_release_all(o, n);
  }
  kit_release(&ti);
  int64_t good[2] = {2, 0};
  ASSERT_OK(kit_tensor(TPU_I64, 1, (int64_t[]){2}, good, &ti));
  in[1] = kit_arg_tensor(&ti);
  if (tpu_test_check_ok(gt_run(g, in, 2, 1, o, &n), "good run", __FILE__, __LINE__))
    KIT_CHECK("-x[[2, 0]]", &o[0], TPU_F32, 2, (int64_t[]){2, 4}, ((float[]){-8, -9, -10, -11, 0, -1, -2, -3}), 8,
              0);
  EXPECT_OK(tpu_runtime_synchronize());
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES), compiles);
  kit_release(&ti);
  kit_release(&tx);
  tpu_graph_destroy(g);
}

/* ------------------------------------------------------------------ errors */

TEST(graph_build_errors) {
  tpu_graph_destroy(NULL);
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, s, y, r = 123;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_SCALAR, &s));
  GB_DONE(g);
  /* Only tensors and scalars are inputs. */
  GT_ERROR(tpu_graph_add_input(g, TPU_ARG_INT, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  EXPECT_EQ_INT(r, -1);
  GT_ERROR(tpu_graph_add_input(g, TPU_ARG_VALUE, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  EXPECT_EQ_INT(tpu_graph_num_inputs(g), 2);

  /* Value ids out of range, in each kind of reference. */
  tpu_arg_t a1[3] = {gv(x), gv(2), kit_arg_scalar_i(1)}; /* value 2 does not exist yet */
  GT_ERROR(tpu_graph_apply(g, "add", "Tensor", a1, 3, 1, &r), TPU_INVALID_ARGUMENT, "aten::add", "argument 1");
  EXPECT_EQ_INT(r, -1);
  a1[1] = gv(-1);
  GT_ERROR(tpu_graph_apply(g, "add", "Tensor", a1, 3, 1, &r), TPU_INVALID_ARGUMENT, "aten::add", NULL);
  a1[1] = gv(x);
  a1[2] = gscalar(7);
  GT_ERROR(tpu_graph_apply(g, "add", "Tensor", a1, 3, 1, &r), TPU_INVALID_ARGUMENT, "aten::add", "argument 2");
  int32_t bad_list[2] = {x, 9};
  tpu_arg_t a2[2] = {gvs(2, bad_list), kit_arg_int(0)};
  GT_ERROR(tpu_graph_apply(g, "cat", "", a2, 2, 1, &r), TPU_INVALID_ARGUMENT, "aten::cat", "argument 0");
  bad_list[1] = -2;
  GT_ERROR(tpu_graph_apply(g, "cat", "", a2, 2, 1, &r), TPU_INVALID_ARGUMENT, "aten::cat", NULL);
  /* A tensor is not an op argument (it enters as an input). */
  float one = 1;
  tpu_tensor_t t1;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){1}, &one, &t1));
  tpu_arg_t a3[3] = {gv(x), kit_arg_tensor(&t1), kit_arg_scalar_i(1)};
  GT_ERROR(tpu_graph_apply(g, "add", "Tensor", a3, 3, 1, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  kit_release(&t1);
  /* A failure after earlier arguments were copied (an int list, a string): nothing recorded. */
  int64_t dims[1] = {0};
  tpu_arg_t a4[4] = {gv(x), kit_arg_ints(1, dims), kit_arg_bool(false), gv(42)};
  GT_ERROR(tpu_graph_apply(g, "sum", "dim_IntList", a4, 4, 1, &r), TPU_INVALID_ARGUMENT, NULL, "argument 3");
  tpu_arg_t a5[3] = {gv(x), kit_arg_none(), gv(42)};
  a5[1].kind = TPU_ARG_STRING;
  a5[1].u.str = "tanh";
  GT_ERROR(tpu_graph_apply(g, "gelu", "", a5, 3, 1, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  /* Bad counts. */
  GT_ERROR(tpu_graph_apply(g, "neg", "", NULL, 1, 1, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  tpu_arg_t a6[1] = {gv(x)};
  GT_ERROR(tpu_graph_apply(g, "neg", "", a6, -1, 1, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_apply(g, "neg", "", a6, 1, -1, &r), TPU_INVALID_ARGUMENT, NULL, NULL);
  /* No lowering; data-dependent shapes. */
  GT_ERROR(tpu_graph_apply(g, "no_such_op", "", a6, 1, 1, &r), TPU_UNIMPLEMENTED, "aten::no_such_op", NULL);
  GT_ERROR(tpu_graph_apply(g, "nonzero", "", a6, 1, 1, &r), TPU_UNIMPLEMENTED, "aten::nonzero", "data-dependent");
  tpu_arg_t a7[3] = {gv(x), kit_arg_none(), kit_arg_int(0)};
  GT_ERROR(tpu_graph_apply(g, "bincount", "", a7, 3, 1, &r), TPU_UNIMPLEMENTED, "aten::bincount", NULL);
  EXPECT_EQ_INT(tpu_graph_num_ops(g), 0);

  /* A good op; then inputs are closed. */
  GB(tpu_graph_apply(g, "neg", "", a6, 1, 1, &y));
  GB_DONE(g);
  EXPECT_EQ_INT(y, 2); /* the failed applies took no ids */
  EXPECT_EQ_INT(tpu_graph_num_ops(g), 1);
  GT_ERROR(tpu_graph_add_input(g, TPU_ARG_TENSOR, &r), TPU_FAILED_PRECONDITION, NULL, NULL);
  EXPECT_EQ_INT(r, -1);

  /* Not runnable (nor aliasable) before the outputs are set. */
  float xv[2] = {1, -2};
  tpu_tensor_t tx;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){2}, xv, &tx));
  tpu_arg_t in[2] = {kit_arg_tensor(&tx), kit_arg_scalar_f(1.0)};
  tpu_result_t res[4];
  int n = -1;
  GT_ERROR(tpu_graph_run(g, 0, in, 2, 4, res, &n), TPU_FAILED_PRECONDITION, NULL, NULL);
  EXPECT_EQ_INT(n, 0);
  GT_ERROR(tpu_graph_alias(g, 0, 0), TPU_FAILED_PRECONDITION, NULL, NULL);

  /* Outputs out of range are refused and leave the graph open. */
  int32_t bad_out[2] = {y, 3};
  GT_ERROR(tpu_graph_set_outputs(g, 2, bad_out), TPU_INVALID_ARGUMENT, NULL, NULL);
  bad_out[1] = -1;
  GT_ERROR(tpu_graph_set_outputs(g, 2, bad_out), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_set_outputs(g, -1, bad_out), TPU_INVALID_ARGUMENT, NULL, NULL);
  GT_ERROR(tpu_graph_set_outputs(g, 1, NULL), TPU_INVALID_ARGUMENT, NULL, NULL);
  int32_t outs[2] = {y, x};
  ASSERT_OK(tpu_graph_set_outputs(g, 2, outs));
  /* Sealed: no more ops, outputs set once. */
  GT_ERROR(tpu_graph_apply(g, "neg", "", a6, 1, 1, &r), TPU_FAILED_PRECONDITION, NULL, NULL);
  EXPECT_EQ_INT(r, -1);
  GT_ERROR(tpu_graph_set_outputs(g, 1, outs), TPU_FAILED_PRECONDITION, NULL, NULL);
  GT_ERROR(tpu_graph_add_input(g, TPU_ARG_SCALAR, &r), TPU_FAILED_PRECONDITION, NULL, NULL);
  EXPECT_EQ_INT(tpu_graph_num_ops(g), 1);
  EXPECT_EQ_INT(tpu_graph_num_outputs(g), 2);

  /* Run errors: input count, input kinds, room for results. */
  int64_t runs = tpu_metric_get(TPU_METRIC_GRAPH_RUNS);
  n = -1;
  GT_ERROR(tpu_graph_run(g, 0, in, 1, 4, res, &n), TPU_INVALID_ARGUMENT, "1 inputs given", NULL);
  EXPECT_EQ_INT(n, 0);
  tpu_arg_t in3[3] = {in[0], in[1], in[1]};
  GT_ERROR(tpu_graph_run(g, 0, in3, 3, 4, res, &n), TPU_INVALID_ARGUMENT, NULL, NULL);
  tpu_arg_t swapped[2] = {in[1], in[0]};
  GT_ERROR(tpu_graph_run(g, 0, swapped, 2, 4, res, &n), TPU_INVALID_ARGUMENT, "input 0", NULL);
  tpu_arg_t as_int[2] = {in[0], kit_arg_int(1)};
  GT_ERROR(tpu_graph_run(g, 0, as_int, 2, 4, res, &n), TPU_INVALID_ARGUMENT, "input 1", NULL);
  GT_ERROR(tpu_graph_run(g, 0, in, 2, 1, res, &n), TPU_INVALID_ARGUMENT, "room for 1", NULL);
  EXPECT_EQ_INT(n, 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_RUNS), runs);
  /* And it still runs. */
  tpu_tensor_t o[KIT_MAX_OUTS];
  if (tpu_test_check_ok(gt_run(g, in, 2, 2, o, &n), "run", __FILE__, __LINE__)) {
    ASSERT_EQ_INT(n, 2);
    KIT_CHECK("-x", &o[0], TPU_F32, 1, (int64_t[]){2}, ((float[]){-1, 2}), 2, 0);
    KIT_CHECK("x", &o[1], TPU_F32, 1, (int64_t[]){2}, xv, 2, 0);
  }
  kit_release(&tx);
  tpu_graph_destroy(g);
}

/* A lowering that fails (mm of mismatched shapes): an error at run naming the
 * op and its index; the same graph runs with fitting shapes afterwards. */
TEST(graph_lowering_error_names_op_and_index) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, y, nx, m;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &y));
  tpu_arg_t n_args[1] = {gv(x)};
  GB(tpu_graph_apply(g, "neg", "", n_args, 1, 1, &nx));
  tpu_arg_t m_args[2] = {gv(nx), gv(y)};
  GB(tpu_graph_apply(g, "mm", "", m_args, 2, 1, &m));
  GB(tpu_graph_set_outputs(g, 1, &m));
  GB_DONE(g);
  float xv[6] = {1, 2, 3, 4, 5, 6}, yv[6] = {1, 0, 0, 1, 1, 1};
  tpu_tensor_t tx, ty;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, xv, &tx));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, yv, &ty));
  tpu_arg_t in[2] = {kit_arg_tensor(&tx), kit_arg_tensor(&ty)};
  tpu_result_t res[2];
  int n = -1;
  int64_t compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  GT_ERROR(tpu_graph_run(g, 0, in, 2, 2, res, &n), TPU_INVALID_ARGUMENT, "op 1 of the graph, aten::mm",
           "cannot be multiplied (2x3 and 2x3)");
  EXPECT_EQ_INT(n, 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES), compiles);
  /* Still no program for that layout: the same error again, not a stale entry. */
  GT_ERROR(tpu_graph_run(g, 0, in, 2, 2, res, &n), TPU_INVALID_ARGUMENT, "aten::mm", "op 1");
  /* A fitting y: [3, 2]. */
  tpu_tensor_t yt = kit_view(&ty, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0); /* y.t() */
  in[1] = kit_arg_tensor(&yt);
  tpu_tensor_t o[KIT_MAX_OUTS];
  if (tpu_test_check_ok(gt_run(g, in, 2, 1, o, &n), "mm run", __FILE__, __LINE__)) {
    /* -x @ y.t() with y = [[1,0,0],[1,1,1]]: rows (-1, -6), (-4, -15) */
    KIT_CHECK("-x @ y.t()", &o[0], TPU_F32, 2, (int64_t[]){2, 2}, ((float[]){-1, -6, -4, -15}), 4, 1e-6);
  }
  kit_release(&tx);
  kit_release(&ty);
  tpu_graph_destroy(g);
}

/* A Scalar read from a value that is not one element: an error naming the op. */
TEST(graph_value_scalar_of_a_tensor_is_an_error) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(tpu_graph_create(&g));
  int32_t x, y;
  tpu_status_t* err = NULL;
  GB(tpu_graph_add_input(g, TPU_ARG_TENSOR, &x));
  tpu_arg_t args[2] = {gv(x), gscalar(x)};
  GB(tpu_graph_apply(g, "mul", "Tensor", args, 2, 1, &y));
  GB(tpu_graph_set_outputs(g, 1, &y));
  GB_DONE(g);
  float v[3] = {1, 2, 3};
  tpu_tensor_t t;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (int64_t[]){3}, v, &t));
  tpu_arg_t in[1] = {kit_arg_tensor(&t)};
  tpu_result_t res[1];
  int n = -1;
  tpu_status_t* st = tpu_graph_run(g, 0, in, 1, 1, res, &n);
  ASSERT(st != NULL);
  EXPECT(strstr(tpu_status_message(st), "aten::mul") != NULL);
  EXPECT(strstr(tpu_status_message(st), "op 0") != NULL);
  tpu_status_free(st);
  EXPECT_EQ_INT(n, 0);
  kit_release(&t);
  /* One element (a 0-d tensor input): it is the scalar. */
  float four = 4;
  ASSERT_OK(kit_tensor(TPU_F32, 0, NULL, &four, &t));
  in[0] = kit_arg_tensor(&t);
  tpu_tensor_t o[KIT_MAX_OUTS];
  if (tpu_test_check_ok(gt_run(g, in, 1, 1, o, &n), "0-d run", __FILE__, __LINE__))
    KIT_CHECK("x * x (0-d)", &o[0], TPU_F32, 0, NULL, ((float[]){16}), 1, 0);
  kit_release(&t);
  tpu_graph_destroy(g);
}
