/* Lowerings: factories and copies as graph nodes (for torch.compile graphs).
 *
 * In eager mode these never reach the op table (the binding allocates, and the
 * composite kernels call fill_/copy_), so they exist for functionalized FX graphs,
 * where full, zeros, new_ones, clone, _to_copy ... are ordinary nodes. Layout,
 * device, pin_memory and memory_format arrive absent and are ignored; strides are
 * ignored too (a graph value is logical: dtype and sizes). empty* values are
 * zeros: uninitialised memory may hold anything, zeros is deterministic.
 * Two reach it in eager mode through the boxed fallback (no binding kernel):
 * _efficientzerotensor, autograd's zero tangent, made as plain zeros, and
 * _make_dep_token. */
#include <string.h>

#include "common.h"
#include "random.h"

static tpu_status_t* tpu_factory_one(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  return tpu_ops_result1(v, outs, nouts);
}

/* Where a factory finds its pieces: argument indices, -1 for none. */
typedef struct tpu_factory {
  const char* name;
  int self;    /* template tensor (new_* and *_like), or -1 */
  int size;    /* INT_LIST of sizes; -1: self's sizes; -2: 0-dim */
  int fill;    /* Scalar fill value, or -1: `value` */
  double value;
  int dtype;   /* optional ScalarType */
} tpu_factory_t;

static const tpu_factory_t tpu_factories[] = {
    {"full", -1, 0, 1, 0, 2},
    {"zeros", -1, 0, -1, 0, 1},
    /* autograd's zero tangents (forward-over-reverse AD): plain zeros on tpu */
    {"_efficientzerotensor", -1, 0, -1, 0, 1},
    /* the 0-d token that orders torch.compile's effectful ops (_functional_assert_async) */
    {"_make_dep_token", -1, -2, -1, 0, 0},
    {"ones", -1, 0, -1, 1, 1},
    {"empty", -1, 0, -1, 0, 1},
    {"empty_strided", -1, 0, -1, 0, 2},
    {"scalar_tensor", -1, -2, 0, 0, 1},
    {"new_empty", 0, 1, -1, 0, 2},
    {"new_empty_strided", 0, 1, -1, 0, 3},
    {"new_zeros", 0, 1, -1, 0, 2},
    {"new_ones", 0, 1, -1, 1, 2},
    {"new_full", 0, 1, 2, 0, 3},
    {"zeros_like", 0, -1, -1, 0, 1},
    {"ones_like", 0, -1, -1, 1, 1},
    {"empty_like", 0, -1, -1, 0, 1},
    {"full_like", 0, -1, 1, 0, 2},
};

/* full's dtype when none is given: the fill value's kind (bool, int64, or the
 * default float32), as torch.full infers it. */
static tpu_dtype_t tpu_factory_infer(const tpu_op_t* op, int i) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a) return TPU_F32;
  switch (a->kind) {
    case TPU_ARG_BOOL: return TPU_BOOL;
    case TPU_ARG_INT: return TPU_I64;
    case TPU_ARG_SCALAR:
      if (a->u.scalar.dtype == TPU_BOOL) return TPU_BOOL;
      if (tpu_dtype_is_int(a->u.scalar.dtype)) return TPU_I64;
      if (tpu_dtype_is_complex(a->u.scalar.dtype)) return TPU_C64;
      return TPU_F32;
    default: return TPU_F32;
  }
}

/* The result aval of a factory: sizes from the list (checked) or self. */
static bool tpu_factory_shape(tpu_builder_t* b, const tpu_op_t* op, const tpu_factory_t* f, tpu_dtype_t dtype,
                              tpu_aval_t* out) {
  if (f->size == -2) {
    *out = tpu_aval_make(dtype, 0, NULL);
    return true;
  }
  if (f->size == -1) {
    *out = tpu_op_aval(op, f->self);
    out->dtype = dtype;
    return true;
  }
  int64_t dims[TPU_MAX_RANK];
  int n = tpu_op_ints(op, f->size, dims, TPU_MAX_RANK);
  for (int i = 0; i < n; ++i) {
    if (dims[i] < 0) {
      char s[256];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Trying to create tensor with negative dimension %" PRId64 ": %s", dims[i],
                 tpu_fmt_i64_list(s, sizeof(s), n, dims));
      return false;
    }
  }
  *out = tpu_aval_make(dtype, n, dims);
  return true;
}

/* Every factory in tpu_factories: a tensor of the shape, filled with the value. */
static tpu_status_t* tpu_lower_factory(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const tpu_factory_t* f = NULL;
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_factories); ++i)
    if (strcmp(tpu_factories[i].name, tpu_op_name(op)) == 0) f = &tpu_factories[i];
  if (!f) return TPU_STATUS(TPU_INTERNAL, "%s: not a factory", tpu_op_name(op));
  if (f->self >= 0 && tpu_op_kind(op, f->self) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a tensor as self", f->name);
    return NULL;
  }
  tpu_dtype_t dflt = f->self >= 0 ? tpu_op_aval(op, f->self).dtype
                     : strcmp(f->name, "full") == 0 ? tpu_factory_infer(op, f->fill)
                                                    : TPU_F32;
  tpu_dtype_t dtype = tpu_op_dtype(op, f->dtype, dflt);
  tpu_aval_t shape;
  if (!tpu_factory_shape(b, op, f, dtype, &shape)) return NULL;
  if (f->fill < 0) return tpu_factory_one(tpu_b_full(b, &shape, f->value), outs, nouts);
  if (!tpu_ops_has_value(op, f->fill)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a fill value", f->name);
    return NULL;
  }
  return tpu_factory_one(tpu_ops_bcast(b, tpu_op_scalar(b, op, f->fill, dtype), &shape), outs, nouts);
}

/* rand_like / randn_like(self, dtype): self's shape, uniform [0, 1) or standard
 * normal, through the same generator stream as uniform_ / normal_. */
static tpu_status_t* tpu_lower_rand_like(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                         int* nouts) {
  (void)max_outs;
  bool normal = strcmp(tpu_op_name(op), "randn_like") == 0;
  tpu_aval_t shape = tpu_op_aval(op, 0);
  shape.dtype = tpu_op_dtype(op, 1, shape.dtype);
  if (!tpu_dtype_is_float(shape.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", normal ? "normal_kernel_cpu" : "check_uniform_bounds",
               tpu_dtype_scalar_type_name(shape.dtype));
    return NULL;
  }
  tpu_rng_t g = tpu_rng_open(b, op);
  tpu_dtype_t ct = shape.dtype == TPU_F64 ? TPU_F64 : TPU_F32;
  tpu_val_t v = normal ? tpu_rng_normal(b, &g, ct, &shape) : tpu_rng_uniform(b, &g, &shape);
  return tpu_factory_one(tpu_b_convert(b, v, shape.dtype), outs, nouts);
}

/* clone(self, memory_format) / lift_fresh_copy(self): the values. */
static tpu_status_t* tpu_lower_clone(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_factory_one(tpu_op_tensor(b, op, 0), outs, nouts);
}

/* _to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format):
 * a dtype conversion; the device and layout are the graph's business. */
static tpu_status_t* tpu_lower_to_copy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t in = tpu_op_aval(op, 0);
  tpu_dtype_t to = tpu_op_dtype(op, 1, in.dtype);
  return tpu_factory_one(tpu_b_convert(b, tpu_op_tensor(b, op, 0), to), outs, nouts);
}

/* copy(self, src, non_blocking): the functional copy_, src cast to self's dtype
 * and broadcast to self's shape. */
static tpu_status_t* tpu_lower_copy(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t self = tpu_op_aval(op, 0);
  tpu_val_t src;
  if (tpu_op_kind(op, 1) == TPU_ARG_TENSOR) {
    tpu_aval_t sa = tpu_op_aval(op, 1);
    if (sa.rank > self.rank) {
      char s0[256], s1[256];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expand: the shape of src %s cannot be broadcast to the shape of self %s",
                 tpu_fmt_i64_list(s0, sizeof(s0), sa.rank, sa.dims), tpu_fmt_i64_list(s1, sizeof(s1), self.rank, self.dims));
      return NULL;
    }
    src = tpu_b_convert(b, tpu_op_tensor(b, op, 1), self.dtype);
  } else if (tpu_op_kind(op, 1) == TPU_ARG_SCALAR) { /* a 0-dim cpu tensor */
    src = tpu_op_scalar(b, op, 1, self.dtype);
  } else {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "copy: expected a tensor as src");
    return NULL;
  }
  return tpu_factory_one(tpu_b_broadcast_to(b, src, self.rank, self.dims), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_factory[] = {
    {"full", tpu_lower_factory},
    {"zeros", tpu_lower_factory},
    {"_efficientzerotensor", tpu_lower_factory},
    {"_make_dep_token", tpu_lower_factory},
    {"ones", tpu_lower_factory},
    {"empty", tpu_lower_factory},
    {"empty_strided", tpu_lower_factory},
    {"scalar_tensor", tpu_lower_factory},
    {"new_empty", tpu_lower_factory},
    {"new_empty_strided", tpu_lower_factory},
    {"new_zeros", tpu_lower_factory},
    {"new_ones", tpu_lower_factory},
    {"new_full", tpu_lower_factory},
    {"zeros_like", tpu_lower_factory},
    {"ones_like", tpu_lower_factory},
    {"empty_like", tpu_lower_factory},
    {"full_like", tpu_lower_factory},
    {"rand_like", tpu_lower_rand_like},
    {"randn_like", tpu_lower_rand_like},
    {"clone", tpu_lower_clone},
    {"lift_fresh_copy", tpu_lower_clone},
    {"_to_copy", tpu_lower_to_copy},
    {"copy", tpu_lower_copy},
    {NULL, NULL},
};
