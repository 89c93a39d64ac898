/* Ops lowered inside another lowering (graphs, _foreach_* ops): the inner op's
 * tensor arguments are values already in the builder, given by reference
 * (TPU_ARG_VALUE / VALUE_LIST / VALUE_SCALAR ids into `vals`); it sees them as
 * dense tensors, and its operands (RNG state, device-side checks) are the
 * parent's (tpu_op_t.parent). */
#include <stdlib.h>
#include <string.h>

#include "exec.h"

/* The op to lower: what a graph records per op. */
typedef struct tpu_sub {
  const char* name;
  const char* overload;
  const tpu_arg_t* args;
  int nargs;
} tpu_sub_t;

/* A value seen by a lowering as a tensor argument: its storage is this sentinel
 * (lowerings only test storage for NULL, meaning an absent entry). */
static char g_value_storage;
#define TPU_VALUE_STORAGE ((tpu_storage_t*)(void*)&g_value_storage)

/* What a recorded op's lowering sees: placeholder tensors and their values. */
typedef struct tpu_node_ctx {
  tpu_op_t op;
  tpu_arg_t* args;
  tpu_tensor_t* tensors; /* one per tensor slot (value or list entry) */
  tpu_view_arg_t* views;
  int* view_base;
  tpu_val_t* vals; /* view_vals | buffer_vals | scalar_vals | arg_vals */
  tpu_op_list_error_t list_error;
} tpu_node_ctx_t;

static void tpu_node_ctx_free(tpu_node_ctx_t* c) {
  free(c->args);
  free(c->tensors);
  free(c->views);
  free(c->view_base);
  free(c->vals);
}

static int tpu_node_slots(const tpu_sub_t* n) {
  int slots = 0;
  for (int i = 0; i < n->nargs; ++i)
    slots += n->args[i].kind == TPU_ARG_VALUE ? 1 : n->args[i].kind == TPU_ARG_VALUE_LIST ? n->args[i].u.list.n : 0;
  return slots;
}

/* Tensor slot `vi` holds value v (TPU_NOVAL: an absent list entry). */
static void tpu_node_bind(tpu_builder_t* b, tpu_node_ctx_t* c, int vi, tpu_val_t v) {
  tpu_tensor_t* t = &c->tensors[vi];
  memset(t, 0, sizeof(*t));
  if (v == TPU_NOVAL) return; /* storage NULL, view ABSENT: an absent entry */
  const tpu_aval_t* a = tpu_b_aval(b, v);
  *t = tpu_tensor_dense(TPU_VALUE_STORAGE, a->dtype, a->rank, a->dims);
  c->views[vi].mode = TPU_VIEW_FULL;
  c->views[vi].buffer_aval = *a;
  c->views[vi].storage_elems = tpu_aval_numel(a);
  c->op.view_vals[vi] = v;
  c->op.buffer_vals[vi] = v;
}

/* Turns the recorded arguments into ordinary ones over the builder's values. */
static void tpu_node_args(tpu_builder_t* b, tpu_node_ctx_t* c, const tpu_sub_t* n, const tpu_val_t* vals) {
  tpu_val_t* arg_vals = (tpu_val_t*)c->op.arg_vals;
  int vi = 0;
  for (int i = 0; i < n->nargs; ++i) {
    tpu_arg_t* a = &c->args[i];
    *a = n->args[i];
    arg_vals[i] = TPU_NOVAL;
    c->view_base[i] = vi;
    if (a->kind == TPU_ARG_VALUE) {
      tpu_node_bind(b, c, vi, vals[n->args[i].u.value]);
      a->kind = TPU_ARG_TENSOR;
      a->u.tensor = c->tensors[vi++];
    } else if (a->kind == TPU_ARG_VALUE_LIST) {
      int len = n->args[i].u.list.n;
      for (int j = 0; j < len; ++j) {
        int32_t id = n->args[i].u.list.values[j];
        tpu_node_bind(b, c, vi + j, id < 0 ? TPU_NOVAL : vals[id]);
      }
      a->kind = TPU_ARG_TENSOR_LIST;
      a->u.list.n = len;
      a->u.list.tensors = &c->tensors[vi];
      vi += len;
    } else if (a->kind == TPU_ARG_VALUE_SCALAR) {
      tpu_val_t v = vals[n->args[i].u.scalar.i];
      arg_vals[i] = tpu_b_reshape(b, v, 0, NULL); /* a one-element value read as a Scalar */
      a->kind = TPU_ARG_SCALAR;
      a->u.scalar.i = 0;
    }
  }
}

static tpu_status_t* tpu_node_ctx_init(tpu_builder_t* b, tpu_node_ctx_t* c, tpu_op_t* root, const tpu_sub_t* n,
                                       const tpu_val_t* vals) {
  memset(c, 0, sizeof(*c));
  int slots = tpu_node_slots(n), ns = slots ? slots : 1, na = n->nargs ? n->nargs : 1;
  size_t nvals = (size_t)(2 * ns) + (size_t)na * (TPU_DTYPE_COUNT + 1);
  c->args = calloc((size_t)na, sizeof(*c->args));
  c->tensors = calloc((size_t)ns, sizeof(*c->tensors));
  c->views = calloc((size_t)ns, sizeof(*c->views));
  c->view_base = calloc((size_t)na, sizeof(int));
  c->vals = malloc(sizeof(tpu_val_t) * nvals);
  if (!c->args || !c->tensors || !c->views || !c->view_base || !c->vals)
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  for (size_t i = 0; i < nvals; ++i) c->vals[i] = TPU_NOVAL;
  tpu_op_t* op = &c->op;
  op->name = n->name;
  op->overload = n->overload;
  op->args = c->args;
  op->nargs = n->nargs;
  op->parent = root;
  op->views = c->views;
  op->nviews = slots;
  op->view_base = c->view_base;
  op->view_vals = c->vals;
  op->buffer_vals = c->vals + ns;
  op->scalar_vals = c->vals + 2 * ns;
  op->arg_vals = c->vals + 2 * ns + (size_t)na * TPU_DTYPE_COUNT;
  c->list_error.arg = -1;
  c->list_error.runtime_arg = -1;
  c->list_error.complex_arg = -1;
  op->list_error = &c->list_error;
  tpu_node_args(b, c, n, vals);
  return NULL;
}

tpu_status_t* tpu_op_lower_values(tpu_builder_t* b, tpu_op_t* parent, tpu_lower_fn_t fn, const char* name,
                                  const char* overload, const tpu_arg_t* args, int nargs, const tpu_val_t* vals,
                                  int max_outs, tpu_val_t* outs, int* out_nouts) {
  *out_nouts = 0;
  const tpu_sub_t n = {name, overload ? overload : "", args, nargs};
  tpu_node_ctx_t c;
  tpu_status_t* st = tpu_node_ctx_init(b, &c, parent, &n, vals);
  int nouts = 0;
  if (!st) st = fn(b, &c.op, max_outs, outs, &nouts);
  if (c.list_error.arg >= 0) {
    tpu_status_free(st);
    st = TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d is a list of %d values, more than the %d this op takes",
                    c.list_error.arg, c.list_error.len, c.list_error.cap);
  }
  if (c.list_error.runtime_arg >= 0) { /* whatever it concluded, it saw a placeholder */
    tpu_status_free(st);
    if (!tpu_b_ok(b)) tpu_status_free(tpu_b_take_error(b));
    st = TPU_STATUS(TPU_UNIMPLEMENTED, "argument %d is a runtime value; aten::%s needs it static here",
                    c.list_error.runtime_arg, name);
  }
  tpu_status_t* real_read = st ? NULL : tpu_op_complex_read_status(&c.list_error, name);
  if (real_read) st = real_read;
  if (!st && !tpu_b_ok(b)) st = tpu_b_take_error(b);
  if (!st && (nouts < 0 || nouts > max_outs)) st = TPU_STATUS(TPU_INTERNAL, "%s: lowering returned %d results", name, nouts);
  if (!st) *out_nouts = nouts;
  tpu_node_ctx_free(&c);
  return st;
}
