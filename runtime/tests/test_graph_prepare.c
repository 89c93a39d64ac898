/* tpu_graph_prepare (graph.h): a graph's program compiled on the background
 * threads before its first run, described by placeholder storages (never
 * written); the run that matches it compiles nothing, one that does not builds
 * its own; and the background queue drains. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "background.h"
#include "kit.h"
#include "test.h"
#include "torchtpu/graph.h"
#include "torchtpu/runtime.h"

/* z = x + 10 * y over [3, 2] tensors. */
static tpu_status_t* gp_build(tpu_graph_t** out_graph) {
  TPU_RETURN_IF_ERROR(tpu_graph_create(out_graph));
  int32_t x, y, z;
  tpu_status_t* st = tpu_graph_add_input(*out_graph, TPU_ARG_TENSOR, &x);
  if (!st) st = tpu_graph_add_input(*out_graph, TPU_ARG_TENSOR, &y);
  tpu_arg_t args[3] = {kit_arg_none(), kit_arg_none(), kit_arg_scalar_i(10)};
  args[0].kind = args[1].kind = TPU_ARG_VALUE;
  args[0].u.value = x;
  args[1].u.value = y;
  if (!st) st = tpu_graph_apply(*out_graph, "add", "Tensor", args, 3, 1, &z);
  if (!st) st = tpu_graph_set_outputs(*out_graph, 1, &z);
  if (st) {
    tpu_graph_destroy(*out_graph);
    *out_graph = NULL;
  }
  return st;
}

/* Prepares g for x dense [3, 2] and y a transposed [3, 2] view of a [2, 3]
 * result, described by storages never written. */
static tpu_status_t* gp_prepare(const tpu_graph_t* g) {
  tpu_storage_t *sx = NULL, *sy = NULL;
  TPU_RETURN_IF_ERROR(tpu_storage_create(0, 6 * sizeof(float), &sx));
  tpu_status_t* st = tpu_storage_create(0, 6 * sizeof(float), &sy);
  if (!st) {
    tpu_tensor_t x = tpu_tensor_dense(sx, TPU_F32, 2, (int64_t[]){3, 2});
    tpu_tensor_t y = x;
    y.storage = sy;
    y.strides[0] = 1;
    y.strides[1] = 3;
    tpu_arg_t in[2] = {kit_arg_tensor(&x), kit_arg_tensor(&y)};
    st = tpu_graph_prepare(g, 0, in, 2);
  }
  tpu_storage_release(sx);
  tpu_storage_release(sy);
  return st;
}

/* Runs g on x and y; checks z = x + 10 y against the host values. */
static void gp_run(const tpu_graph_t* g, const tpu_tensor_t* x, const float* xv, const tpu_tensor_t* y,
                   const float* yv, const char* what) {
  tpu_arg_t in[2] = {kit_arg_tensor(x), kit_arg_tensor(y)};
  tpu_result_t r;
  int n = 0;
  if (!tpu_test_check_ok(tpu_graph_run(g, 0, in, 2, 1, &r, &n), what, __FILE__, __LINE__)) return;
  float want[6];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) want[i * 2 + j] = xv[i * 2 + j] + 10.0f * yv[i * y->strides[0] + j * y->strides[1]];
  tpu_tensor_t z = tpu_tensor_dense(r.storage, r.dtype, r.rank, r.sizes);
  KIT_CHECK(what, &z, TPU_F32, 2, (int64_t[]){3, 2}, want, 6, 0);
}

TEST(graph_prepare_compiles_before_the_run_that_matches) {
  tpu_graph_t* g = NULL;
  ASSERT_OK(gp_build(&g));
  int64_t compiles = tpu_metric_get(TPU_METRIC_COMPILES) + tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS);
  int64_t prepared = tpu_metric_get(TPU_METRIC_PREPARED_PROGRAMS), hits = tpu_metric_get(TPU_METRIC_PREPARED_HITS);
  int64_t graph_compiles = tpu_metric_get(TPU_METRIC_GRAPH_COMPILES);
  int64_t recompiles = tpu_metric_get(TPU_METRIC_GRAPH_RECOMPILES);
  ASSERT_OK(gp_prepare(g));
  tpu_background_wait();
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_PROGRAMS) - prepared, 1);
  /* compiled (or loaded from the disk tier) on the background thread, not counted as the graph's yet */
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES) + tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS) - compiles, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - graph_compiles, 0);
  /* Preparing the same layouts again finds the program. */
  ASSERT_OK(gp_prepare(g));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_PROGRAMS) - prepared, 1);

  float xv[6] = {1, 2, 3, 4, 5, 6}, bv[6] = {0.5f, -1, 2, 0, 1.5f, -2};
  tpu_tensor_t x, base;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 2}, xv, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, bv, &base));
  tpu_tensor_t yt = kit_view(&base, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0); /* base.t() */
  for (int k = 0; k < 2; ++k) gp_run(g, &x, xv, &yt, bv, "the prepared layout");
  tpu_background_wait();
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES) + tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS) - compiles, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_HITS) - hits, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - graph_compiles, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_RECOMPILES) - recompiles, 0);

  /* Another layout (y dense): the run builds its own program, as unprepared. */
  tpu_tensor_t yd;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 2}, bv, &yd));
  gp_run(g, &x, xv, &yd, bv, "another layout");
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES) + tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS) - compiles, 2);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_HITS) - hits, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_COMPILES) - graph_compiles, 2);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_GRAPH_RECOMPILES) - recompiles, 1);
  kit_release(&x);
  kit_release(&base);
  kit_release(&yd);
  tpu_graph_destroy(g);
}

TEST(graph_prepare_outlives_its_graph_and_drains) {
  /* Graphs destroyed right after preparing: the background threads compile
   * their programs' text, not the graphs. A drain drops what is still queued. */
  int64_t prepared = tpu_metric_get(TPU_METRIC_PREPARED_PROGRAMS);
  for (int k = 0; k < 4; ++k) {
    tpu_graph_t* g = NULL;
    ASSERT_OK(gp_build(&g));
    ASSERT_OK(gp_prepare(g));
    tpu_graph_destroy(g);
  }
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_PROGRAMS) - prepared, 4); /* each graph is its own program */
  tpu_background_drain();
  tpu_background_wait();
  /* The threads start again for the next job. */
  tpu_graph_t* g = NULL;
  ASSERT_OK(gp_build(&g));
  ASSERT_OK(gp_prepare(g));
  tpu_background_wait();
  float xv[6] = {0, 1, 0, 1, 0, 1}, bv[6] = {1, 2, 3, 4, 5, 6};
  tpu_tensor_t x, base;
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){3, 2}, xv, &x));
  ASSERT_OK(kit_tensor(TPU_F32, 2, (int64_t[]){2, 3}, bv, &base));
  tpu_tensor_t yt = kit_view(&base, 2, (int64_t[]){3, 2}, (int64_t[]){1, 3}, 0);
  int64_t hits = tpu_metric_get(TPU_METRIC_PREPARED_HITS);
  gp_run(g, &x, xv, &yt, bv, "after a drain");
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_PREPARED_HITS) - hits, 1);
  kit_release(&x);
  kit_release(&base);
  tpu_graph_destroy(g);
}

TEST(graph_prepare_forked_child_has_no_threads_to_wait_for) {
  /* fork() copies the thread counts, not the threads: a child's drain (its
   * exit) must return at once. The child gets 20 s before SIGALRM ends it. */
  tpu_graph_t* g = NULL;
  ASSERT_OK(gp_build(&g));
  ASSERT_OK(gp_prepare(g)); /* the threads exist now */
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    tpu_background_drain();
    _exit(0);
  }
  ASSERT(pid > 0);
  int status = 0;
  EXPECT(waitpid(pid, &status, 0) == pid);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  tpu_background_wait();
  tpu_graph_destroy(g);
}
