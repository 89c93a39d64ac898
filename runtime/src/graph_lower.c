/* Lowering a recorded graph (graph.c) into one program, and running it.
 *
 * The program is one "op" for the executor: its arguments are the graph's
 * inputs, so they get the eager view prologue, operand plan and cache. Each
 * recorded op is lowered by its ordinary lowering through an op context whose
 * tensor arguments are values already in the builder (tpu_op_t.parent). */
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "graph_internal.h"

/* Lowers recorded op `n`, storing its results' values in vals[n->first ...]. */
static tpu_status_t* tpu_node_lower(tpu_builder_t* b, tpu_op_t* root, const tpu_graph_node_t* n, tpu_val_t* vals) {
  int nouts = 0;
  tpu_val_t* outs = malloc(sizeof(tpu_val_t) * (size_t)(n->nresults + 1));
  if (!outs) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  tpu_status_t* st = tpu_op_lower_values(b, root, n->fn, n->name, n->overload, n->args, n->nargs, vals,
                                         n->nresults + 1, outs, &nouts);
  if (!st && nouts != n->nresults)
    st = TPU_STATUS(TPU_INTERNAL, "the lowering gave %d results, the graph expects %d", nouts, n->nresults);
  for (int k = 0; !st && k < nouts; ++k) vals[n->first + k] = outs[k];
  free(outs);
  return st;
}

/* The value of input i: its view read from its storage, or its scalar. */
static tpu_val_t tpu_graph_input(tpu_builder_t* b, tpu_op_t* op, int i) {
  if (tpu_op_kind(op, i) == TPU_ARG_TENSOR) return tpu_op_tensor(b, op, i);
  const tpu_scalar_t* sc = &tpu_op_arg(op, i)->u.scalar;
  /* Numbers are carried like eager scalars (f32 / i64 / bool); a float64 cpu tensor keeps f64. */
  tpu_dtype_t as = sc->dtype;
  if (tpu_dtype_is_float(as) && !(as == TPU_F64 && !sc->wrapped)) as = TPU_F32;
  else if (tpu_dtype_is_complex(as) && !(as == TPU_C128 && !sc->wrapped)) as = TPU_C64;
  else if (tpu_dtype_is_int(as)) as = TPU_I64;
  return tpu_op_scalar(b, op, i, as);
}

/* An in-place output may take its input's buffer (PJRT donation) when the
 * input is read whole (a FULL view: its buffer as one parameter, as is) and has
 * the output's type: the write-back then adopts the output's buffer and never
 * reads the input again (tpu_tensor_copy). Whether a run donates is decided at
 * launch (exec.c), when nothing else holds the buffer. */
static void tpu_graph_mark_donations(tpu_builder_t* b, tpu_op_t* op, const tpu_graph_t* g, const tpu_val_t* outs) {
  for (int k = 0; k < g->noutputs; ++k) {
    int in = g->alias_input[k], r = g->result_of[k];
    int vi = in < 0 ? -1 : tpu_op_view_index(op, in, -1);
    if (vi < 0 || op->views[vi].mode != TPU_VIEW_FULL || op->buffer_vals[vi] == TPU_NOVAL) continue;
    tpu_aval_t ia = tpu_op_aval(op, in), oa = *tpu_b_aval(b, outs[r]);
    if (!tpu_aval_equal(&ia, &oa) || !tpu_aval_equal(&op->views[vi].buffer_aval, &oa)) continue;
    bool taken = false; /* one parameter per result (two inputs written with one value) */
    for (int p = 0; p < op->nparams && !taken; ++p) taken = op->params[p].donate_to == r + 1;
    for (int p = 0; p < op->nparams && !taken; ++p) {
      tpu_param_src_t* src = &op->params[p];
      if (src->kind == TPU_PARAM_BUFFER && src->arg == in && src->item < 0 && src->donate_to == 0) {
        src->donate_to = r + 1;
        tpu_b_param_alias(b, p, r);
        taken = true;
      }
    }
  }
}

static tpu_status_t* tpu_graph_lower(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                     int* out_nouts) {
  const tpu_graph_t* g = op->program;
  *out_nouts = 0;
  if (g->nresults > max_outs) return TPU_STATUS(TPU_INTERNAL, "graph: %d results, room for %d", g->nresults, max_outs);
  tpu_val_t* vals = malloc(sizeof(tpu_val_t) * (size_t)(g->nvalues ? g->nvalues : 1));
  if (!vals) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  for (int32_t v = 0; v < g->nvalues; ++v) vals[v] = TPU_NOVAL;
  tpu_status_t* st = NULL;
  for (int i = 0; i < g->ninputs && tpu_b_ok(b); ++i) vals[i] = tpu_graph_input(b, op, i);
  if (!tpu_b_ok(b)) st = tpu_status_annotate(tpu_b_take_error(b), "graph input");
  for (int k = 0; k < g->nnodes && !st; ++k) {
    const tpu_graph_node_t* n = &g->nodes[k];
    st = tpu_node_lower(b, op, n, vals);
    if (st) st = tpu_status_annotate(st, "op %d of the graph, aten::%s%s%s", k, n->name, *n->overload ? "." : "",
                                     n->overload);
  }
  for (int k = 0; k < g->noutputs && !st; ++k) outs[g->result_of[k]] = vals[g->outputs[k]];
  if (!st) tpu_graph_mark_donations(b, op, g, outs);
  if (!st) *out_nouts = g->nresults;
  free(vals);
  return st;
}

/* ------------------------------------------------------------- running */

static tpu_status_t* tpu_graph_check_inputs(const tpu_graph_t* g, const tpu_arg_t* inputs, int ninputs) {
  if (!g->sealed) return TPU_STATUS(TPU_FAILED_PRECONDITION, "graph: set the outputs before running it");
  if (ninputs != g->ninputs)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: %d inputs given, it takes %d", ninputs, g->ninputs);
  for (int i = 0; i < ninputs; ++i)
    if (inputs[i].kind != g->input_kinds[i])
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: input %d is a %s, it takes a %s", i,
                        inputs[i].kind == TPU_ARG_TENSOR ? "tensor" : "non-tensor",
                        g->input_kinds[i] == TPU_ARG_TENSOR ? "tensor" : "scalar");
  return NULL;
}

/* Spreads the program's results rs[0, nresults) over the graph's outputs. An
 * output repeating an earlier one's value is its own storage sharing that
 * buffer, as a clone would be. On failure every storage is released. */
static tpu_status_t* tpu_graph_spread_results(const tpu_graph_t* g, int device, tpu_result_t* rs) {
  if (g->nresults == g->noutputs) return NULL; /* result_of is the identity */
  tpu_result_t* out = malloc(sizeof(*out) * (size_t)g->noutputs);
  tpu_status_t* st = out ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  int k = 0;
  for (; k < g->noutputs && !st; ++k) {
    out[k] = rs[g->result_of[k]];
    if (!g->repeats[k]) continue;
    st = tpu_storage_create(device, tpu_storage_nbytes(out[k].storage), &out[k].storage);
    if (!st) tpu_storage_assign(out[k].storage, rs[g->result_of[k]].storage);
  }
  if (st) {
    for (int j = 0; out && j < k - 1; ++j)
      if (g->repeats[j]) tpu_storage_release(out[j].storage);
    for (int r = 0; r < g->nresults; ++r) tpu_storage_release(rs[r].storage);
  } else {
    memcpy(rs, out, sizeof(*out) * (size_t)g->noutputs);
  }
  free(out);
  return st;
}

/* Writes aliased outputs into their inputs (the in-place updates). */
static tpu_status_t* tpu_graph_write_back(const tpu_graph_t* g, const tpu_arg_t* inputs, const tpu_result_t* rs) {
  for (int k = 0; k < g->noutputs; ++k) {
    int in = g->alias_input[k];
    if (in < 0) continue;
    tpu_tensor_t src = tpu_tensor_dense(rs[k].storage, rs[k].dtype, rs[k].rank, rs[k].sizes);
    TPU_RETURN_IF_ERROR(tpu_tensor_copy(&inputs[in].u.tensor, &src));
  }
  return NULL;
}

/* The graph as the executor's program: its id joins the cache key. */
#define TPU_GRAPH_KEY_BYTES 16
static tpu_exec_program_t tpu_graph_program(const tpu_graph_t* g, uint8_t key[TPU_GRAPH_KEY_BYTES]) {
  memcpy(key, "graph\0\0\0", 8);
  memcpy(key + 8, &g->id, sizeof(g->id));
  return (tpu_exec_program_t){g, key, TPU_GRAPH_KEY_BYTES};
}

tpu_status_t* tpu_graph_prepare(const tpu_graph_t* g, int device, const tpu_arg_t* inputs, int ninputs) {
  TPU_RETURN_IF_ERROR(tpu_graph_check_inputs(g, inputs, ninputs));
  uint8_t key[TPU_GRAPH_KEY_BYTES];
  tpu_exec_program_t program = tpu_graph_program(g, key);
  return tpu_exec_prepare_program("tpu.graph", tpu_graph_lower, &program, device, inputs, ninputs, g->noutputs);
}

tpu_status_t* tpu_graph_run(const tpu_graph_t* g, int device, const tpu_arg_t* inputs, int ninputs,
                            int max_results, tpu_result_t* out_results, int* out_nresults) {
  *out_nresults = 0;
  TPU_RETURN_IF_ERROR(tpu_graph_check_inputs(g, inputs, ninputs));
  if (max_results < g->noutputs)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: room for %d results, it has %d", max_results, g->noutputs);
  uint8_t key[TPU_GRAPH_KEY_BYTES];
  tpu_exec_program_t program = tpu_graph_program(g, key);
  tpu_buffer_t** bufs = calloc((size_t)(g->noutputs ? g->noutputs : 1), sizeof(*bufs));
  if (!bufs) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  int n = 0;
  bool fresh = false;
  tpu_status_t* st = tpu_exec_run_program("tpu.graph", tpu_graph_lower, &program, device, inputs, ninputs,
                                          g->noutputs, bufs, &n, &fresh);
  if (fresh) { /* built now or prepared for this run: a program of this graph */
    tpu_graph_t* counted = (tpu_graph_t*)g; /* graphs are created mutable; runs hold them const */
    tpu_metric_add(TPU_METRIC_GRAPH_COMPILES, 1);
    if (counted->nprograms++ > 0) tpu_metric_add(TPU_METRIC_GRAPH_RECOMPILES, 1);
  }
  if (!st) st = tpu_op_results(device, 0, bufs, n, NULL, out_results); /* releases them itself on error */
  free(bufs);
  if (!st) st = tpu_graph_spread_results(g, device, out_results);
  if (!st && (st = tpu_graph_write_back(g, inputs, out_results)) != NULL)
    for (int k = 0; k < g->noutputs; ++k) tpu_storage_release(out_results[k].storage);
  if (!st) *out_nresults = g->noutputs;
  tpu_metric_add(TPU_METRIC_GRAPH_RUNS, 1);
  return st;
}
