/* Lowerings: the int8 matmuls (_int_mm, _weight_int8pack_mm),
 * _compute_linear_combination and addr, products outside the mm family's
 * dtype rules.
 *
 * Checks and messages are ATen's CPU kernels' (int_mm_out_cpu,
 * _weight_int8pack_mm_cpu), in their order. */
#include "matmul.h"

#include <string.h>

/* ------------------------------------------------------------ _int_mm */

static bool tpu_int_mm_check(tpu_builder_t* b, const tpu_aval_t* x, const tpu_aval_t* w) {
  const char* f = "int_mm_out_cpu";
  if (x->rank != 2 || w->rank != 2) {
    bool self = x->rank != 2;
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected %s to be of dimension 2 but got %d", f, self ? "self" : "mat2",
               self ? x->rank : w->rank);
    return false;
  }
  if (x->dims[1] != w->dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: self.size(1) needs to match mat2.size(0) but got %" PRId64 " and %" PRId64,
               f, x->dims[1], w->dims[0]);
    return false;
  }
  if (x->dtype != TPU_U8 && x->dtype != TPU_I8) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected self dtype to be int8 or uint8 but got %s", f,
               tpu_mm_cpp_name(x->dtype));
    return false;
  }
  if (w->dtype != TPU_I8) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected mat2 dtype to be of type int8 but got %s", f,
               tpu_mm_cpp_name(w->dtype));
    return false;
  }
  return true;
}

/* _int_mm(self, mat2): int8 (or uint8) x int8 → int32, exact (products and
 * sums in int32, as the CPU kernel). */
static tpu_status_t* tpu_lower_int_mm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), w = tpu_op_aval(op, 1);
  if (!tpu_int_mm_check(b, &x, &w)) return NULL;
  tpu_val_t xi = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_I32);
  tpu_val_t wi = tpu_b_convert(b, tpu_op_tensor(b, op, 1), TPU_I32);
  return tpu_ops_result1(tpu_mm_dot(b, xi, wi, 0, 1, 0), outs, nouts);
}

/* --------------------------------------------------- _weight_int8pack_mm */

static bool tpu_int8pack_fail(tpu_builder_t* b, const char* what) {
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_weight_int8pack_mm_cpu : %s", what);
  return false;
}

/* ATen reads A.size(1), B.size(0) before any check: a lower rank is an IndexError. */
static bool tpu_int8pack_dims(tpu_builder_t* b, const tpu_aval_t* a, int need) {
  if (a->rank >= need) return true;
  if (a->rank == 0)
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension specified as %d but tensor has no dimensions", need - 1);
  else
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension out of range (expected to be in range of [%d, %d], but got %d)",
               -a->rank, a->rank - 1, need - 1);
  return false;
}

static bool tpu_int8pack_check(tpu_builder_t* b, const tpu_op_t* op, const tpu_aval_t* x, const tpu_aval_t* w,
                               const tpu_aval_t* s) {
  if (!tpu_int8pack_dims(b, x, 2) || !tpu_int8pack_dims(b, w, 1)) return false;
  if (x->dtype != TPU_F32 && x->dtype != TPU_F16 && x->dtype != TPU_BF16)
    return tpu_int8pack_fail(b, "expect A to be either 32-bit or 16-bit float tensor.");
  const tpu_arg_t* xa = tpu_op_arg(op, 0);
  if (xa && xa->kind == TPU_ARG_TENSOR && x->rank == 2 && x->dims[1] > 1 && xa->u.tensor.strides[1] != 1)
    return tpu_int8pack_fail(b, "A must be contiguous on the last dimension.");
  if (x->rank != 2) return tpu_int8pack_fail(b, "expect A to be 2D tensor.");
  if (w->dtype != TPU_I8) return tpu_int8pack_fail(b, "expect B to be int8 tensor.");
  const tpu_arg_t* wa = tpu_op_arg(op, 1);
  if (wa && wa->kind == TPU_ARG_TENSOR && !tpu_tensor_is_contiguous(&wa->u.tensor))
    return tpu_int8pack_fail(b, "expect B to be contiguous.");
  if (!tpu_int8pack_dims(b, w, 2)) return false;
  if (w->dims[1] != x->dims[1] || w->rank != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_weight_int8pack_mm_cpu : expect B.size(1) == %" PRId64, x->dims[1]);
    return false;
  }
  if (s->rank != 1 || s->dims[0] != w->dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_weight_int8pack_mm_cpu : expect scales to be 1d tensor with size %" PRId64,
               w->dims[0]);
    return false;
  }
  if (s->dtype != x->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected scalar type %s but found %s", tpu_dtype_scalar_type_name(x->dtype),
               tpu_dtype_scalar_type_name(s->dtype));
    return false;
  }
  return true;
}

/* _weight_int8pack_mm(A (M, K), B (N, K) int8, scales (N)) = (A @ B^T) * scales,
 * accumulated in f32 and rounded once to A's dtype, as the CPU kernel. */
static tpu_status_t* tpu_lower_weight_int8pack_mm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                  int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), w = tpu_op_aval(op, 1), s = tpu_op_aval(op, 2);
  if (!tpu_int8pack_check(b, op, &x, &w, &s)) return NULL;
  tpu_val_t xf = tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_F32);
  tpu_val_t wf = tpu_b_convert(b, tpu_op_tensor(b, op, 1), TPU_F32);
  tpu_val_t p = tpu_mm_dot(b, xf, wf, 0, 1, 1); /* (M, N) */
  int64_t bdim = 1;
  const tpu_aval_t pa = *tpu_b_aval(b, p); /* a copy: new values move the table */
  tpu_val_t sc = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 2), TPU_F32), 2, pa.dims, &bdim);
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_binary(b, "stablehlo.multiply", p, sc), x.dtype), outs, nouts);
}

/* ------------------------------------------- _compute_linear_combination */

/* coefficients (N, K, ...) as the (N, K) matrix ATen's restriding reads: its
 * first two dims at index 0 of the rest. */
static tpu_val_t tpu_lincomb_coeffs(tpu_builder_t* b, tpu_val_t c, const tpu_aval_t* ca) {
  if (ca->rank == 2) return c;
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  for (int i = 0; i < ca->rank; ++i) limit[i] = i < 2 ? ca->dims[i] : 1;
  return tpu_b_reshape(b, tpu_b_slice(b, c, start, limit, NULL), 2, ca->dims);
}

/* _compute_linear_combination(input, coefficients): out[i] = sum_j
 * coefficients[i, j] * input[j], in input's dtype (coefficients cast to it, as
 * the CPU kernel reads them); f16/bf16 accumulate in f32, bool as or-of-ands. */
static tpu_status_t* tpu_lower_compute_linear_combination(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), c = tpu_op_aval(op, 1);
  if (c.rank < 2 || x.rank < 1) {
    tpu_aval_t bad = c.rank < 2 ? c : x;
    int want = c.rank < 2 ? 1 : 0;
    if (bad.rank == 0)
      TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension specified as %d but tensor has no dimensions", want);
    else
      TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension out of range (expected to be in range of [-1, 0], but got %d)", want);
    return NULL;
  }
  if (tpu_dtype_is_complex(x.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "_compute_linear_combination: complex tensors are not supported on tpu");
    return NULL;
  }
  /* ATen's restriding reads input rows 0..K-1 without a check (out of bounds past
   * input.size(0)); here that is an error. */
  if (c.dims[1] > x.dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "_compute_linear_combination: coefficients.size(1) (%" PRId64 ") exceeds input.size(0) (%" PRId64 ")",
               c.dims[1], x.dims[0]);
    return NULL;
  }
  tpu_dtype_t ct = x.dtype == TPU_BOOL ? TPU_I32 : x.dtype;
  tpu_val_t cv = tpu_lincomb_coeffs(b, tpu_op_tensor(b, op, 1), &c);
  cv = tpu_b_convert(b, tpu_b_convert(b, cv, x.dtype), ct);
  int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
  memcpy(limit, x.dims, sizeof(int64_t) * (size_t)x.rank);
  limit[0] = c.dims[1];
  tpu_val_t xv = tpu_b_convert(b, tpu_b_slice(b, tpu_op_tensor(b, op, 0), start, limit, NULL), ct);
  return tpu_ops_result1(tpu_b_convert(b, tpu_mm_dot(b, cv, xv, 0, 1, 0), x.dtype), outs, nouts);
}

/* ---------------------------------------------------------------- addr */

/* addr's Scalar checks (arg i named `name`): a float Scalar for an integral
 * result, a bool one for a non-bool result. */
static bool tpu_addr_scalar_ok(tpu_builder_t* b, const tpu_op_t* op, int i, const char* name, tpu_dtype_t t) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || a->kind != TPU_ARG_SCALAR) return true;
  tpu_dtype_t k = a->u.scalar.dtype;
  if (t != TPU_BOOL && k == TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Boolean %s only supported for Boolean results.", name);
    return false;
  }
  if ((tpu_dtype_is_int(t) || t == TPU_BOOL) && (tpu_dtype_is_float(k) || tpu_dtype_is_complex(k))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "For integral input tensors, argument %s must not be a floating point number.",
               name);
    return false;
  }
  return true;
}

/* addr(self, vec1, vec2, *, beta=1, alpha=1) = beta self + alpha vec1 vec2^T,
 * in op math with one rounding (ATen's CPU kernel rounds after each
 * operation); beta == 0 ignores self (NaN in it does not propagate). For bool:
 * (beta and self) or (alpha and vec1 and vec2). */
static tpu_status_t* tpu_lower_addr(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t v1 = tpu_op_aval(op, 1), v2 = tpu_op_aval(op, 2);
  for (int i = 0; i < 2; i++) {
    const tpu_aval_t* v = i ? &v2 : &v1;
    if (v->rank != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "addr: Expected 1-D argument vec%d, but got %d-D", i + 1, v->rank);
      return NULL;
    }
  }
  int args[3] = {0, 1, 2};
  tpu_dtype_t t = tpu_ops_result_type(op, 3, args);
  if (!tpu_addr_scalar_ok(b, op, 3, "beta", t) || !tpu_addr_scalar_ok(b, op, 4, "alpha", t)) return NULL;
  int64_t nm[2] = {v1.dims[0], v2.dims[0]}, d0 = 0, d1 = 1;
  tpu_aval_t shape = tpu_aval_make(t, 2, nm), self = tpu_op_aval(op, 0);
  bool fits = self.rank <= 2;
  for (int i = 0; fits && i < self.rank; i++) {
    int64_t d = self.dims[self.rank - 1 - i];
    fits = d == 1 || d == nm[1 - i];
  }
  if (!fits) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "The expanded size of self does not match the outer product of vec1 and vec2");
    return NULL;
  }
  tpu_dtype_t ct = t == TPU_BOOL ? TPU_BOOL : tpu_dtype_opmath(t);
  tpu_val_t s = tpu_ops_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), &shape);
  tpu_val_t a = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct), 2, nm, &d0);
  tpu_val_t c = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 2), ct), 2, nm, &d1);
  tpu_val_t beta = tpu_b_broadcast_in_dim(b, tpu_op_scalar(b, op, 3, ct), 2, nm, NULL);
  tpu_val_t alpha = tpu_b_broadcast_in_dim(b, tpu_op_scalar(b, op, 4, ct), 2, nm, NULL);
  const char* mul = ct == TPU_BOOL ? "stablehlo.and" : "stablehlo.multiply";
  tpu_val_t outer = tpu_b_binary(b, mul, alpha, tpu_b_binary(b, mul, a, c));
  tpu_val_t scaled = tpu_b_binary(b, mul, beta, s);
  tpu_val_t r = tpu_b_binary(b, ct == TPU_BOOL ? "stablehlo.or" : "stablehlo.add", scaled, outer);
  if (ct != TPU_BOOL) r = tpu_b_select(b, tpu_b_compare(b, "EQ", beta, tpu_ops_like(b, beta, 0.0)), outer, r);
  return tpu_ops_result1(tpu_b_convert(b, r, t), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_mm_extra[] = {
    {"_int_mm", tpu_lower_int_mm},
    {"_weight_int8pack_mm", tpu_lower_weight_int8pack_mm},
    {"_compute_linear_combination", tpu_lower_compute_linear_combination},
    {"addr", tpu_lower_addr},
    {NULL, NULL},
};
