/* The op context seen by lowerings: argument access and lazily emitted
 * parameters (each records where its buffer comes from at execution time). */
#include <stdlib.h>
#include <string.h>

#include "exec.h"

const char* tpu_op_name(const tpu_op_t* op) { return op->name; }
const char* tpu_op_overload(const tpu_op_t* op) { return op->overload; }
int tpu_op_nargs(const tpu_op_t* op) { return op->nargs; }

const tpu_arg_t* tpu_op_arg(const tpu_op_t* op, int i) {
  return (i >= 0 && i < op->nargs) ? &op->args[i] : NULL;
}

tpu_arg_kind_t tpu_op_kind(const tpu_op_t* op, int i) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  return a ? a->kind : TPU_ARG_NONE;
}

static const tpu_tensor_t* tpu_op_tensor_desc(const tpu_op_t* op, int i, int j) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a) return NULL;
  if (a->kind == TPU_ARG_TENSOR && j < 0) return &a->u.tensor;
  if (a->kind == TPU_ARG_TENSOR_LIST && j >= 0 && j < a->u.list.n) return &a->u.list.tensors[j];
  return NULL;
}

tpu_aval_t tpu_op_aval(const tpu_op_t* op, int i) {
  const tpu_tensor_t* t = tpu_op_tensor_desc(op, i, -1);
  tpu_aval_t a;
  memset(&a, 0, sizeof(a));
  if (t) a = tpu_aval_make(t->dtype, t->rank, t->sizes);
  return a;
}

tpu_aval_t tpu_op_list_aval(const tpu_op_t* op, int i, int j) {
  const tpu_tensor_t* t = tpu_op_tensor_desc(op, i, j);
  tpu_aval_t a;
  memset(&a, 0, sizeof(a));
  if (t) a = tpu_aval_make(t->dtype, t->rank, t->sizes);
  return a;
}

int tpu_op_list_len(const tpu_op_t* op, int i) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a) return 0;
  switch (a->kind) {
    case TPU_ARG_TENSOR_LIST:
    case TPU_ARG_INT_LIST:
    case TPU_ARG_FLOAT_LIST:
    case TPU_ARG_BOOL_LIST: return a->u.list.n;
    default: return 0;
  }
}

bool tpu_op_is_runtime(const tpu_op_t* op, int i) {
  return op->arg_vals && i >= 0 && i < op->nargs && op->arg_vals[i] != TPU_NOVAL;
}

/* A static read of a runtime value: the lowering would see a placeholder. */
static bool tpu_op_static_read(const tpu_op_t* op, int i) {
  if (!tpu_op_is_runtime(op, i)) return false;
  if (op->list_error && op->list_error->runtime_arg < 0) op->list_error->runtime_arg = i;
  return true;
}

tpu_val_t tpu_op_index(tpu_builder_t* b, tpu_op_t* op, int i) {
  if (tpu_op_is_runtime(op, i)) return tpu_b_convert(b, op->arg_vals[i], TPU_I64);
  return tpu_b_const_i(b, TPU_I64, tpu_op_int(op, i, 0));
}

/* A host-side read of a complex scalar sees its real part only: recorded, so
 * the op fails instead of dropping the imaginary part. */
static void tpu_op_note_real_read(const tpu_op_t* op, int i, const tpu_arg_t* a) {
  if (a->kind != TPU_ARG_SCALAR || a->u.scalar.imag == 0.0 || !op->list_error) return;
  if (op->list_error->complex_arg < 0) op->list_error->complex_arg = i;
}

tpu_status_t* tpu_scalar_real_status(const tpu_scalar_t* sc, tpu_dtype_t as) {
  if (sc->imag == 0.0 || tpu_dtype_is_complex(as)) return NULL;
  return TPU_STATUS(TPU_INVALID_ARGUMENT, "value cannot be converted to type %s without overflow", tpu_dtype_name(as));
}

tpu_status_t* tpu_op_complex_read_status(const tpu_op_list_error_t* e, const char* name) {
  if (e->complex_arg < 0) return NULL;
  return TPU_STATUS(TPU_UNIMPLEMENTED, "aten::%s: argument %d is a complex number with an imaginary part, which "
                    "this op takes as a real number on tpu", name, e->complex_arg);
}

int64_t tpu_op_int(const tpu_op_t* op, int i, int64_t dflt) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || tpu_op_static_read(op, i)) return dflt;
  tpu_op_note_real_read(op, i, a);
  switch (a->kind) {
    case TPU_ARG_INT: return a->u.i;
    case TPU_ARG_BOOL: return a->u.b;
    case TPU_ARG_SCALAR:
      return tpu_dtype_is_float(a->u.scalar.dtype) || tpu_dtype_is_complex(a->u.scalar.dtype) ? (int64_t)a->u.scalar.f
                                                                                              : a->u.scalar.i;
    case TPU_ARG_INT_LIST: return a->u.list.n == 1 ? a->u.list.ints[0] : dflt;
    default: return dflt;
  }
}

double tpu_scalar_to_double(const tpu_scalar_t* sc) {
  if (tpu_dtype_is_float(sc->dtype) || tpu_dtype_is_complex(sc->dtype)) return sc->f;
  return sc->dtype == TPU_U64 ? (double)(uint64_t)sc->i : (double)sc->i;
}

double tpu_op_float(const tpu_op_t* op, int i, double dflt) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || tpu_op_static_read(op, i)) return dflt;
  tpu_op_note_real_read(op, i, a);
  switch (a->kind) {
    case TPU_ARG_FLOAT: return a->u.f;
    case TPU_ARG_INT: return (double)a->u.i;
    case TPU_ARG_BOOL: return a->u.b;
    case TPU_ARG_SCALAR: return tpu_scalar_to_double(&a->u.scalar);
    default: return dflt;
  }
}

void tpu_op_complex(const tpu_op_t* op, int i, double dflt, double* out_re, double* out_im) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  *out_im = 0.0;
  if (!a || a->kind != TPU_ARG_SCALAR || tpu_op_is_runtime(op, i)) {
    *out_re = tpu_op_float(op, i, dflt); /* not a Scalar, absent, or a runtime value (fails the op) */
    return;
  }
  *out_re = tpu_scalar_to_double(&a->u.scalar);
  *out_im = a->u.scalar.imag;
}

bool tpu_op_bool(const tpu_op_t* op, int i, bool dflt) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || tpu_op_static_read(op, i)) return dflt;
  if (a->kind == TPU_ARG_BOOL) return a->u.b;
  if (a->kind == TPU_ARG_INT) return a->u.i != 0;
  return dflt;
}

tpu_dtype_t tpu_op_dtype(const tpu_op_t* op, int i, tpu_dtype_t dflt) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  return (a && a->kind == TPU_ARG_DTYPE) ? a->u.dtype : dflt;
}

int tpu_op_ints(const tpu_op_t* op, int i, int64_t* out, int cap) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a) return 0;
  if (a->kind == TPU_ARG_INT) {
    if (cap > 0) out[0] = a->u.i;
    return 1;
  }
  if (a->kind != TPU_ARG_INT_LIST) return 0;
  int n = a->u.list.n < cap ? a->u.list.n : cap;
  for (int k = 0; k < n; ++k) out[k] = a->u.list.ints[k];
  /* A longer list than the reader can hold: return what was copied, so no caller
   * reads past `out`, and record it; the executor fails the op with it. */
  if (a->u.list.n > n && op->list_error && op->list_error->arg < 0) {
    op->list_error->arg = i;
    op->list_error->len = a->u.list.n;
    op->list_error->cap = cap;
  }
  return n;
}

int tpu_op_view_index(const tpu_op_t* op, int arg, int item) {
  if (arg < 0 || arg >= op->nargs) return -1;
  const tpu_arg_t* a = &op->args[arg];
  if (a->kind == TPU_ARG_TENSOR) return item < 0 ? op->view_base[arg] : -1;
  if (a->kind == TPU_ARG_TENSOR_LIST && item >= 0 && item < a->u.list.n) return op->view_base[arg] + item;
  return -1;
}

tpu_val_t tpu_op_add_param(tpu_builder_t* b, tpu_op_t* op, tpu_param_src_t src, const tpu_aval_t* aval) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  /* An op inside a program: its operands are the program's. */
  if (op->parent) return tpu_op_add_param(b, op->parent, src, aval);
  if (op->nparams == op->params_cap) {
    int cap = op->params_cap ? op->params_cap * 2 : 32;
    tpu_param_src_t* p = realloc(op->params, sizeof(*p) * (size_t)cap);
    if (!p) {
      TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "%s: out of host memory for %d operands", op->name, cap);
      return TPU_NOVAL;
    }
    op->params = p;
    op->params_cap = cap;
  }
  op->params[op->nparams++] = src;
  return tpu_b_param(b, aval);
}

tpu_val_t tpu_op_buffer(tpu_builder_t* b, tpu_op_t* op, int arg, int item) {
  int vi = tpu_op_view_index(op, arg, item);
  if (vi < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is not a tensor", op->name, arg);
    return TPU_NOVAL;
  }
  if (op->buffer_vals[vi] != TPU_NOVAL) return op->buffer_vals[vi];
  const tpu_view_arg_t* v = &op->views[vi];
  tpu_val_t val;
  if (v->mode == TPU_VIEW_ZEROS) {
    const tpu_tensor_t* t = tpu_op_tensor_desc(op, arg, item);
    tpu_aval_t a = tpu_aval_make(t->dtype, 1, &v->storage_elems);
    val = tpu_b_full(b, &a, 0.0);
  } else if (v->mode == TPU_VIEW_ABSENT) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is None", op->name, arg);
    return TPU_NOVAL;
  } else {
    tpu_param_src_t src = {TPU_PARAM_BUFFER, arg, item, TPU_F32, 0};
    val = tpu_op_add_param(b, op, src, &v->buffer_aval);
  }
  op->buffer_vals[vi] = val;
  return val;
}

static tpu_val_t tpu_op_offset(tpu_builder_t* b, tpu_op_t* op, int arg, int item) {
  tpu_param_src_t src = {TPU_PARAM_OFFSET, arg, item, TPU_I64, 0};
  tpu_aval_t a = tpu_aval_make(TPU_I64, 0, NULL);
  return tpu_op_add_param(b, op, src, &a);
}

static tpu_val_t tpu_op_view_value(tpu_builder_t* b, tpu_op_t* op, int arg, int item) {
  int vi = tpu_op_view_index(op, arg, item);
  if (vi < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is not a tensor", op->name, arg);
    return TPU_NOVAL;
  }
  if (op->view_vals[vi] != TPU_NOVAL) return op->view_vals[vi];
  const tpu_tensor_t* t = tpu_op_tensor_desc(op, arg, item);
  const tpu_view_arg_t* v = &op->views[vi];
  tpu_aval_t out = tpu_aval_make(t->dtype, t->rank, t->sizes);
  tpu_val_t val;
  switch (v->mode) {
    case TPU_VIEW_ZEROS: val = tpu_b_full(b, &out, 0.0); break;
    case TPU_VIEW_FULL: val = tpu_b_reshape(b, tpu_op_buffer(b, op, arg, item), out.rank, out.dims); break;
    case TPU_VIEW_DYNAMIC:
    case TPU_VIEW_STATIC: {
      tpu_val_t flat = tpu_view_flatten(b, tpu_op_buffer(b, op, arg, item), t->dtype);
      tpu_val_t off = v->mode == TPU_VIEW_DYNAMIC ? tpu_op_offset(b, op, arg, item) : TPU_NOVAL;
      val = tpu_view_read(b, flat, t, off);
      break;
    }
    default:
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is None", op->name, arg);
      return TPU_NOVAL;
  }
  op->view_vals[vi] = val;
  return val;
}

tpu_val_t tpu_op_tensor(tpu_builder_t* b, tpu_op_t* op, int i) { return tpu_op_view_value(b, op, i, -1); }
tpu_val_t tpu_op_list_tensor(tpu_builder_t* b, tpu_op_t* op, int i, int j) {
  return tpu_op_view_value(b, op, i, j);
}

/* The dtype a scalar operand is carried in: wide enough, and never f64 unless
 * asked (accelerators may lack it); the lowering's dtype is reached in-graph. */
static tpu_dtype_t tpu_scalar_carrier(tpu_dtype_t as) {
  if (as == TPU_F64 || as == TPU_BOOL) return as;
  if (tpu_dtype_is_float(as)) return TPU_F32;
  if (tpu_dtype_is_complex(as)) return as;
  return TPU_I64;
}

/* A scalar argument of an op inside a program: a value the program computed or
 * read, or else a constant (the program is compiled for these values). */
static tpu_val_t tpu_op_program_scalar(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_dtype_t as) {
  if (op->arg_vals && op->arg_vals[i] != TPU_NOVAL) return tpu_b_convert(b, op->arg_vals[i], as);
  const tpu_scalar_t* sc = &op->args[i].u.scalar;
  bool is_f = tpu_dtype_is_float(sc->dtype) || tpu_dtype_is_complex(sc->dtype);
  if (tpu_dtype_is_complex(as)) return tpu_b_const_complex(b, as, tpu_scalar_to_double(sc), sc->imag);
  tpu_status_t* not_real = tpu_scalar_real_status(sc, as);
  if (not_real) {
    tpu_b_fail(b, not_real);
    return TPU_NOVAL;
  }
  if (is_f || tpu_dtype_is_float(as)) return tpu_b_const(b, as, tpu_scalar_to_double(sc));
  return tpu_b_const_i(b, as, sc->i);
}

tpu_val_t tpu_op_scalar(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t as) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: missing scalar argument %d", op->name, i);
    return TPU_NOVAL;
  }
  switch (a->kind) {
    case TPU_ARG_INT: return tpu_b_const_i(b, as, a->u.i);
    case TPU_ARG_BOOL: return tpu_b_const_i(b, as, a->u.b);
    case TPU_ARG_FLOAT: return tpu_b_const(b, as, a->u.f);
    case TPU_ARG_SCALAR: break;
    default:
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is not a scalar", op->name, i);
      return TPU_NOVAL;
  }
  tpu_val_t* cached = &op->scalar_vals[i * TPU_DTYPE_COUNT + (int)as];
  if (*cached != TPU_NOVAL) return *cached;
  if (op->parent) return *cached = tpu_op_program_scalar(b, op, i, as);
  tpu_dtype_t carrier = tpu_scalar_carrier(as);
  tpu_param_src_t src = {TPU_PARAM_SCALAR, i, -1, carrier, 0};
  tpu_aval_t av = tpu_aval_make(carrier, 0, NULL);
  tpu_val_t v = tpu_op_add_param(b, op, src, &av);
  *cached = tpu_b_convert(b, v, as);
  return *cached;
}

tpu_val_t tpu_op_rng_state(tpu_builder_t* b, tpu_op_t* op) {
  tpu_param_src_t src = {TPU_PARAM_RNG, -1, -1, TPU_I64, 0};
  int64_t two = 2;
  tpu_aval_t a = tpu_aval_make(TPU_I64, 1, &two);
  return tpu_op_add_param(b, op, src, &a);
}

tpu_val_t tpu_op_write_view(tpu_builder_t* b, tpu_op_t* op, int arg, tpu_val_t value) {
  int vi = tpu_op_view_index(op, arg, -1);
  if (vi < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: argument %d is not a tensor", op->name, arg);
    return TPU_NOVAL;
  }
  const tpu_tensor_t* t = &op->args[arg].u.tensor;
  const tpu_view_arg_t* v = &op->views[vi];
  tpu_aval_t out = tpu_aval_make(t->dtype, t->rank, t->sizes);
  value = tpu_b_reshape(b, value, out.rank, out.dims);
  /* A write covering the whole buffer produces a buffer of the writer's shape. */
  if (v->mode == TPU_VIEW_FULL) return value;
  tpu_val_t flat = tpu_view_flatten(b, tpu_op_buffer(b, op, arg, -1), t->dtype);
  tpu_val_t off = v->mode == TPU_VIEW_DYNAMIC ? tpu_op_offset(b, op, arg, -1) : TPU_NOVAL;
  flat = tpu_view_write(b, flat, t, off, value);
  if (v->mode == TPU_VIEW_ZEROS) return flat;
  return tpu_view_unflatten(b, flat, &v->buffer_aval);
}
