#include "common.h"

#include <string.h>

static int tpu_category(tpu_dtype_t t) {
  if (t == TPU_BOOL) return 0;
  if (tpu_dtype_is_complex(t)) return 3;
  if (tpu_dtype_is_float(t)) return 2;
  return 1;
}

#define TPU_UNDEF ((int)TPU_DTYPE_COUNT)

static int tpu_promote_or(int a, tpu_dtype_t b) {
  return a == TPU_UNDEF ? (int)b : (int)tpu_dtype_promote((tpu_dtype_t)a, b);
}

static int tpu_combine(int higher, int lower) {
  if (higher == TPU_UNDEF) return lower;
  if (lower == TPU_UNDEF) return higher;
  tpu_dtype_t h = (tpu_dtype_t)higher, l = (tpu_dtype_t)lower;
  if (h != TPU_BOOL && tpu_category(h) >= tpu_category(l)) return higher;
  if (tpu_category(l) == 3 && tpu_category(h) == 2) return h == TPU_F64 ? TPU_C128 : TPU_C64;
  return (int)tpu_dtype_promote(h, l);
}

tpu_dtype_t tpu_ops_result_type(const tpu_op_t* op, int n, const int* args) {
  int dim = TPU_UNDEF, zero = TPU_UNDEF, wrapped = TPU_UNDEF;
  for (int k = 0; k < n; ++k) {
    const tpu_arg_t* a = tpu_op_arg(op, args[k]);
    if (!a) continue;
    if (a->kind == TPU_ARG_TENSOR) {
      if (a->u.tensor.rank > 0) dim = tpu_promote_or(dim, a->u.tensor.dtype);
      else zero = tpu_promote_or(zero, a->u.tensor.dtype);
    } else if (a->kind == TPU_ARG_SCALAR) {
      tpu_dtype_t t = a->u.scalar.dtype;
      if (a->u.scalar.wrapped) {
        if (tpu_dtype_is_float(t)) t = TPU_F32;
        else if (tpu_dtype_is_complex(t)) t = TPU_C64;
        wrapped = tpu_promote_or(wrapped, t);
      } else {
        zero = tpu_promote_or(zero, t);
      }
    } else if (a->kind == TPU_ARG_INT) {
      wrapped = tpu_promote_or(wrapped, TPU_I64);
    } else if (a->kind == TPU_ARG_FLOAT) {
      wrapped = tpu_promote_or(wrapped, TPU_F32);
    } else if (a->kind == TPU_ARG_BOOL) {
      wrapped = tpu_promote_or(wrapped, TPU_BOOL);
    }
  }
  int r = tpu_combine(dim, tpu_combine(zero, wrapped));
  return r == TPU_UNDEF ? TPU_F32 : (tpu_dtype_t)r;
}

bool tpu_ops_broadcast_shape(tpu_builder_t* b, const tpu_op_t* op, int n, const int* args, tpu_aval_t* out) {
  memset(out, 0, sizeof(*out));
  for (int k = 0; k < n; ++k) {
    if (tpu_op_kind(op, args[k]) != TPU_ARG_TENSOR) continue;
    tpu_aval_t a = tpu_op_aval(op, args[k]);
    int rank = a.rank > out->rank ? a.rank : out->rank;
    int64_t dims[TPU_MAX_RANK];
    for (int i = 0; i < rank; ++i) {
      int ia = i - (rank - a.rank), io = i - (rank - out->rank);
      int64_t da = ia >= 0 ? a.dims[ia] : 1, dout = io >= 0 ? out->dims[io] : 1;
      if (da != dout && da != 1 && dout != 1) {
        TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                   "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                   ") at non-singleton dimension %d",
                   dout, da, i);
        return false;
      }
      dims[i] = da == 1 ? dout : da;
    }
    out->rank = rank;
    memcpy(out->dims, dims, sizeof(int64_t) * (size_t)rank);
  }
  return true;
}

tpu_val_t tpu_ops_bcast(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* shape) {
  return tpu_b_broadcast_to(b, v, shape->rank, shape->dims);
}

tpu_val_t tpu_ops_operand(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t dtype, const tpu_aval_t* shape) {
  tpu_arg_kind_t k = tpu_op_kind(op, i);
  tpu_val_t v = k == TPU_ARG_TENSOR ? tpu_b_convert(b, tpu_op_tensor(b, op, i), dtype) : tpu_op_scalar(b, op, i, dtype);
  return shape ? tpu_ops_bcast(b, v, shape) : v;
}

int tpu_ops_dim(tpu_builder_t* b, int64_t dim, int rank) {
  int r = rank > 0 ? rank : 1;
  if (dim < -r || dim >= r) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension out of range (expected to be in range of [%d, %d], but got %" PRId64 ")",
               -r, r - 1, dim);
    return 0;
  }
  return (int)(dim < 0 ? dim + r : dim);
}

bool tpu_ops_dim_set(tpu_builder_t* b, const tpu_op_t* op, int i, int rank, bool out_seen[TPU_MAX_RANK]) {
  int64_t raw[TPU_MAX_RANK];
  int n = tpu_op_ints(op, i, raw, TPU_MAX_RANK);
  for (int d = 0; d < TPU_MAX_RANK; ++d) out_seen[d] = false;
  for (int k = 0; k < n && k < TPU_MAX_RANK; ++k) {
    int d = tpu_ops_dim(b, raw[k], rank);
    if (!tpu_b_ok(b)) return false;
    if (out_seen[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "dim %d appears multiple times in the list of dims", d);
      return false;
    }
    out_seen[d] = true;
  }
  return true;
}

int tpu_ops_reduce_dims(tpu_builder_t* b, const tpu_op_t* op, int i, int rank, int64_t* out) {
  int64_t raw[TPU_MAX_RANK];
  int n = tpu_op_ints(op, i, raw, TPU_MAX_RANK);
  if (n == 0) {
    for (int d = 0; d < rank; ++d) out[d] = d;
    return rank;
  }
  bool seen[TPU_MAX_RANK] = {false};
  for (int k = 0; k < n && k < TPU_MAX_RANK; ++k) {
    int d = tpu_ops_dim(b, raw[k], rank);
    if (rank == 0) continue;
    if (seen[d]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "dim %d appears multiple times in the list of dims", d);
      return 0;
    }
    seen[d] = true;
  }
  int m = 0;
  for (int d = 0; d < rank; ++d)
    if (seen[d]) out[m++] = d;
  return m;
}

tpu_val_t tpu_ops_like(tpu_builder_t* b, tpu_val_t v, double value) {
  return tpu_b_full(b, tpu_b_aval(b, v), value);
}

tpu_val_t tpu_ops_part(tpu_builder_t* b, tpu_val_t z, bool imag) {
  tpu_aval_t a = *tpu_b_aval(b, z);
  a.dtype = a.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  return tpu_b_op1(b, imag ? "stablehlo.imag" : "stablehlo.real", 1, &z, NULL, &a);
}

tpu_val_t tpu_ops_complex(tpu_builder_t* b, tpu_val_t re, tpu_val_t im) {
  tpu_aval_t a = *tpu_b_aval(b, re);
  a.dtype = a.dtype == TPU_F32 ? TPU_C64 : TPU_C128;
  tpu_val_t ins[2] = {re, im};
  return tpu_b_op1(b, "stablehlo.complex", 2, ins, NULL, &a);
}

tpu_val_t tpu_ops_conj(tpu_builder_t* b, tpu_val_t z) {
  if (!tpu_b_ok(b) || !tpu_dtype_is_complex(tpu_b_dtype(b, z))) return z;
  return tpu_ops_complex(b, tpu_ops_part(b, z, false), tpu_b_unary(b, "stablehlo.negate", tpu_ops_part(b, z, true)));
}

tpu_dtype_t tpu_ops_compute_float(tpu_dtype_t t) {
  if (t == TPU_F64 || tpu_dtype_is_complex(t)) return t;
  return TPU_F32;
}

bool tpu_ops_has_value(const tpu_op_t* op, int i) {
  tpu_arg_kind_t k = tpu_op_kind(op, i);
  return k == TPU_ARG_TENSOR || k == TPU_ARG_SCALAR || k == TPU_ARG_INT || k == TPU_ARG_FLOAT || k == TPU_ARG_BOOL;
}

tpu_val_t tpu_ops_keepdim(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* in, int ndims, const int64_t* dims) {
  int64_t shape[TPU_MAX_RANK];
  for (int i = 0; i < in->rank; ++i) {
    bool reduced = false;
    for (int k = 0; k < ndims; ++k) reduced = reduced || dims[k] == i;
    shape[i] = reduced ? 1 : in->dims[i];
  }
  return tpu_b_reshape(b, v, in->rank, shape);
}

tpu_status_t* tpu_ops_result1(tpu_val_t v, tpu_val_t* outs, int* nouts) {
  outs[0] = v;
  *nouts = 1;
  return NULL;
}
