/* Graphs (graph.h): recording aten ops over values, and lowering the whole
 * recording into one program through the executor (exec.c), so a graph gets the
 * same cache, view prologues, RNG and device-side checks as one eager op. */
#include "torchtpu/graph.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "graph_internal.h"

static atomic_uint_fast64_t g_next_graph_id = 1;

/* ------------------------------------------------------------ building */

tpu_status_t* tpu_graph_create(tpu_graph_t** out_graph) {
  *out_graph = NULL;
  tpu_graph_t* g = calloc(1, sizeof(*g));
  if (!g) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  g->id = atomic_fetch_add(&g_next_graph_id, 1);
  *out_graph = g;
  return NULL;
}

static void tpu_graph_node_free(tpu_graph_node_t* n) {
  for (int i = 0; i < n->nargs; ++i) {
    tpu_arg_t* a = &n->args[i];
    if (a->kind == TPU_ARG_STRING) free((void*)a->u.str);
    if (a->kind == TPU_ARG_INT_LIST) free((void*)a->u.list.ints);
    if (a->kind == TPU_ARG_FLOAT_LIST) free((void*)a->u.list.floats);
    if (a->kind == TPU_ARG_BOOL_LIST) free((void*)a->u.list.bools);
    if (a->kind == TPU_ARG_VALUE_LIST) free((void*)a->u.list.values);
  }
  free(n->args);
  free(n->name);
  free(n->overload);
}

void tpu_graph_destroy(tpu_graph_t* g) {
  if (!g) return;
  for (int i = 0; i < g->nnodes; ++i) tpu_graph_node_free(&g->nodes[i]);
  free(g->nodes);
  free(g->input_kinds);
  free(g->outputs);
  free(g->alias_input);
  free(g->result_of);
  free(g->repeats);
  free(g);
}

int tpu_graph_num_inputs(const tpu_graph_t* g) { return g->ninputs; }
int tpu_graph_num_outputs(const tpu_graph_t* g) { return g->noutputs; }
int tpu_graph_num_ops(const tpu_graph_t* g) { return g->nnodes; }

/* Grows *arr (of *cap elements of `size` bytes) to hold n + 1. */
static bool tpu_graph_grow(void** arr, int* cap, int n, size_t size) {
  if (n < *cap) return true;
  int c = *cap ? *cap * 2 : 16;
  void* p = realloc(*arr, size * (size_t)c);
  if (!p) return false;
  *arr = p;
  *cap = c;
  return true;
}

tpu_status_t* tpu_graph_add_input(tpu_graph_t* g, tpu_arg_kind_t kind, int32_t* out_value) {
  *out_value = -1;
  if (g->sealed || g->nnodes > 0)
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "graph: inputs must be added before any op");
  if (kind != TPU_ARG_TENSOR && kind != TPU_ARG_SCALAR)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: an input is a tensor or a scalar (kind %d)", (int)kind);
  if (!tpu_graph_grow((void**)&g->input_kinds, &g->inputs_cap, g->ninputs, sizeof(*g->input_kinds)))
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  g->input_kinds[g->ninputs++] = kind;
  *out_value = g->nvalues++;
  return NULL;
}

/* Copies `n` items of `size` bytes (NULL for none). */
static tpu_status_t* tpu_graph_dup(const void* src, int n, size_t size, const void** out) {
  *out = NULL;
  if (n <= 0) return NULL;
  void* p = malloc(size * (size_t)n);
  if (!p) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  memcpy(p, src, size * (size_t)n);
  *out = p;
  return NULL;
}

/* A checked deep copy of one argument into `dst` (zeroed by the caller). */
static tpu_status_t* tpu_graph_copy_arg(const tpu_graph_t* g, const tpu_arg_t* a, tpu_arg_t* dst) {
  *dst = *a;
  int n = a->u.list.n;
  switch (a->kind) {
    case TPU_ARG_TENSOR:
    case TPU_ARG_TENSOR_LIST:
    case TPU_ARG_GENERATOR:
      dst->kind = TPU_ARG_NONE;
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "tensors and generators enter a graph as inputs, not as op arguments");
    case TPU_ARG_VALUE:
      if (a->u.value < 0 || a->u.value >= g->nvalues) break;
      return NULL;
    case TPU_ARG_VALUE_SCALAR:
      if (a->u.scalar.i < 0 || a->u.scalar.i >= g->nvalues) break;
      return NULL;
    case TPU_ARG_VALUE_LIST:
      if (n < 0) break;
      for (int j = 0; j < n; ++j)
        if (a->u.list.values[j] < -1 || a->u.list.values[j] >= g->nvalues) goto bad_value;
      return tpu_graph_dup(a->u.list.values, n, sizeof(int32_t), (const void**)&dst->u.list.values);
    case TPU_ARG_INT_LIST: return n < 0 ? NULL : tpu_graph_dup(a->u.list.ints, n, sizeof(int64_t), (const void**)&dst->u.list.ints);
    case TPU_ARG_FLOAT_LIST: return n < 0 ? NULL : tpu_graph_dup(a->u.list.floats, n, sizeof(double), (const void**)&dst->u.list.floats);
    case TPU_ARG_BOOL_LIST: return n < 0 ? NULL : tpu_graph_dup(a->u.list.bools, n, sizeof(bool), (const void**)&dst->u.list.bools);
    case TPU_ARG_STRING: {
      const char* s = a->u.str ? a->u.str : "";
      return tpu_graph_dup(s, (int)strlen(s) + 1, 1, (const void**)&dst->u.str);
    }
    default: return NULL;
  }
bad_value:
  dst->kind = TPU_ARG_NONE; /* nothing owned to free */
  return TPU_STATUS(TPU_INVALID_ARGUMENT, "refers to a value the graph does not have yet");
}

static char* tpu_graph_strdup(const char* s) {
  const void* p = NULL;
  tpu_status_t* st = tpu_graph_dup(s ? s : "", (int)strlen(s ? s : "") + 1, 1, &p);
  tpu_status_free(st);
  return (char*)p;
}

/* Why op `name` cannot be recorded, or NULL. */
static tpu_status_t* tpu_graph_check_op(const char* name, const char* overload, tpu_lower_fn_t fn) {
  if (!fn)
    return TPU_STATUS(TPU_UNIMPLEMENTED, "no lowering for aten::%s%s%s", name, *overload ? "." : "", overload);
  unsigned flags = tpu_lowering_flags(name);
  if (flags & (TPU_LOWER_DYNAMIC_SHAPE | TPU_LOWER_DATA_RANGE))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "aten::%s has a data-dependent result shape; a compiled graph cannot hold it",
                      name);
  return NULL;
}

tpu_status_t* tpu_graph_apply(tpu_graph_t* g, const char* name, const char* overload, const tpu_arg_t* args,
                              int nargs, int nresults, int32_t* out_first) {
  *out_first = -1;
  if (!overload) overload = "";
  if (g->sealed) return TPU_STATUS(TPU_FAILED_PRECONDITION, "graph: no ops after the outputs are set");
  if (nargs < 0 || nresults < 0 || (nargs > 0 && !args) || nresults > INT32_MAX - g->nvalues)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: aten::%s: bad argument or result count", name);
  tpu_lower_fn_t fn = tpu_lowering_find(name);
  TPU_RETURN_IF_ERROR(tpu_graph_check_op(name, overload, fn));
  if (!tpu_graph_grow((void**)&g->nodes, &g->nodes_cap, g->nnodes, sizeof(*g->nodes)))
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  tpu_graph_node_t* n = &g->nodes[g->nnodes];
  memset(n, 0, sizeof(*n));
  n->name = tpu_graph_strdup(name);
  n->overload = tpu_graph_strdup(overload);
  n->args = calloc((size_t)(nargs ? nargs : 1), sizeof(*n->args));
  tpu_status_t* st = n->name && n->overload && n->args ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  for (int i = 0; i < nargs && !st; ++i) {
    st = tpu_graph_copy_arg(g, &args[i], &n->args[i]);
    n->nargs = i + 1;
    if (st) st = tpu_status_annotate(st, "graph: aten::%s argument %d", name, i);
  }
  if (st) {
    tpu_graph_node_free(n);
    return st;
  }
  n->fn = fn;
  n->first = g->nvalues;
  n->nresults = nresults;
  g->nvalues += nresults;
  g->nnodes++;
  *out_first = n->first;
  return NULL;
}

tpu_status_t* tpu_graph_set_outputs(tpu_graph_t* g, int n, const int32_t* values) {
  if (g->sealed) return TPU_STATUS(TPU_FAILED_PRECONDITION, "graph: outputs are already set");
  if (n < 0 || (n > 0 && !values)) return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: bad output count %d", n);
  for (int i = 0; i < n; ++i)
    if (values[i] < 0 || values[i] >= g->nvalues)
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: output %d refers to value %d, which does not exist", i,
                        values[i]);
  g->outputs = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
  g->alias_input = malloc(sizeof(int) * (size_t)(n ? n : 1));
  g->result_of = malloc(sizeof(int) * (size_t)(n ? n : 1));
  g->repeats = malloc(sizeof(bool) * (size_t)(n ? n : 1));
  if (!g->outputs || !g->alias_input || !g->result_of || !g->repeats)
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "graph: out of host memory");
  if (n) memcpy(g->outputs, values, sizeof(int32_t) * (size_t)n);
  g->nresults = 0;
  for (int i = 0; i < n; ++i) {
    g->alias_input[i] = -1;
    int same = 0;
    while (same < i && values[same] != values[i]) ++same; /* quadratic, over outputs only */
    g->repeats[i] = same < i;
    g->result_of[i] = same < i ? g->result_of[same] : g->nresults++;
  }
  g->noutputs = n;
  g->sealed = true;
  return NULL;
}

tpu_status_t* tpu_graph_alias(tpu_graph_t* g, int output, int input) {
  if (!g->sealed) return TPU_STATUS(TPU_FAILED_PRECONDITION, "graph: set the outputs before aliasing them");
  if (output < 0 || output >= g->noutputs || input < 0 || input >= g->ninputs ||
      g->input_kinds[input] != TPU_ARG_TENSOR)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "graph: cannot alias output %d to input %d", output, input);
  g->alias_input[output] = input;
  return NULL;
}
