/* Lowerings: linalg family — Cholesky factorisation and triangular solves on
 * StableHLO's own stablehlo.cholesky / stablehlo.triangular_solve.
 *
 * Matrices are [*batch, n, n]; both ops take leading batch dims, so batched
 * inputs only need their batch dims broadcast to a common shape. The triangle
 * of stablehlo.cholesky's result that is not the factor is unspecified, so it
 * is masked to zeros as PyTorch returns it. float32, float64, complex64 and
 * complex128 (PyTorch's CPU linalg dtypes); for complex matrices the factor's
 * partner is the conjugate transpose (A = L L^H) and "upper" is U = L^H. */
#include <stdio.h>
#include <string.h>

#include "matrix.h"

/* Arg i must be a batch of matrices ([*, m, n]; square when `square`) of
 * float32/float64/complex64/complex128. */
static bool tpu_la_check(tpu_builder_t* b, const tpu_op_t* op, int i, bool square, const char* name) {
  tpu_aval_t a = tpu_op_aval(op, i);
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR || a.rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: The input tensor %s must have at least 2 dimensions.", name,
               i == 0 ? "A" : "B");
    return false;
  }
  if (square && a.dims[a.rank - 1] != a.dims[a.rank - 2]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: A must be batches of square matrices, but they are %" PRId64 " by %" PRId64
               " matrices", name, a.dims[a.rank - 2], a.dims[a.rank - 1]);
    return false;
  }
  if (a.dtype == TPU_F32 || a.dtype == TPU_F64 || tpu_dtype_is_complex(a.dtype)) return true;
  if (tpu_dtype_is_float(a.dtype))
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", name, tpu_dtype_scalar_type_name(a.dtype));
  else
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected a floating point or complex tensor as input. Got %s", name,
               tpu_dtype_scalar_type_name(a.dtype));
  return false;
}

/* x with the other triangle zeroed (tril / triu). */
static tpu_val_t tpu_la_tri(tpu_builder_t* b, tpu_val_t x, bool lower) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t a = *tpu_b_aval(b, x);
  return tpu_b_select(b, tpu_mx_tri_pred(b, &a, lower), x, tpu_b_full(b, &a, 0.0));
}

/* Both args broadcast to their common batch dims (the last two dims kept). */
static bool tpu_la_bcast_batch(tpu_builder_t* b, tpu_val_t* x, tpu_val_t* y) {
  if (!tpu_b_ok(b)) return false;
  tpu_aval_t xa = *tpu_b_aval(b, *x), ya = *tpu_b_aval(b, *y);
  int nb = (xa.rank > ya.rank ? xa.rank : ya.rank) - 2;
  int64_t batch[TPU_MAX_RANK];
  for (int i = 0; i < nb; ++i) {
    int xi = i - (nb - (xa.rank - 2)), yi = i - (nb - (ya.rank - 2));
    int64_t xd = xi >= 0 ? xa.dims[xi] : 1, yd = yi >= 0 ? ya.dims[yi] : 1;
    if (xd != yd && xd != 1 && yd != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                 ") at non-singleton dimension %d", xd, yd, i);
      return false;
    }
    batch[i] = xd == 1 ? yd : xd;
  }
  int64_t dims[TPU_MAX_RANK];
  memcpy(dims, batch, sizeof(int64_t) * (size_t)nb);
  dims[nb] = xa.dims[xa.rank - 2], dims[nb + 1] = xa.dims[xa.rank - 1];
  *x = tpu_b_broadcast_to(b, *x, nb + 2, dims);
  dims[nb] = ya.dims[ya.rank - 2], dims[nb + 1] = ya.dims[ya.rank - 1];
  *y = tpu_b_broadcast_to(b, *y, nb + 2, dims);
  return tpu_b_ok(b);
}

/* The Cholesky factor of arg 0: L (lower, tril) or U = L^H (upper, triu). */
static tpu_val_t tpu_la_cholesky(tpu_builder_t* b, tpu_op_t* op, bool upper) {
  tpu_aval_t a = tpu_op_aval(op, 0);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (tpu_aval_numel(&a) == 0) return x;
  tpu_val_t l = tpu_la_tri(b, tpu_b_op1(b, "stablehlo.cholesky", 1, &x, "lower = true", &a), true);
  return upper ? tpu_ops_conj(b, tpu_mx_mT(b, l)) : l;
}

/* linalg_cholesky_ex(self, *, upper=False, check_errors=False) -> (L, info).
 * info is zeros: a matrix that is not positive definite gives NaNs in L
 * instead of an info code (known gap; check_errors cannot raise). */
static tpu_status_t* tpu_lower_linalg_cholesky_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                  int* nouts) {
  (void)max_outs;
  if (!tpu_la_check(b, op, 0, true, "linalg.cholesky")) return NULL;
  tpu_aval_t a = tpu_op_aval(op, 0);
  outs[0] = tpu_la_cholesky(b, op, tpu_op_bool(op, 1, false));
  tpu_aval_t ia = tpu_aval_make(TPU_I32, a.rank - 2, a.dims);
  outs[1] = tpu_b_full(b, &ia, 0.0);
  *nouts = 2;
  return NULL;
}

/* cholesky(self, upper=False) */
static tpu_status_t* tpu_lower_cholesky(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  if (!tpu_la_check(b, op, 0, true, "cholesky")) return NULL;
  return tpu_ops_result1(tpu_la_cholesky(b, op, tpu_op_bool(op, 1, false)), outs, nouts);
}

/* Both tensor args checked as matrices of one dtype (A square). */
static bool tpu_la_check_pair(tpu_builder_t* b, const tpu_op_t* op, int ia, int ib, const char* name) {
  if (!tpu_la_check(b, op, ia, true, name) || !tpu_la_check(b, op, ib, false, name)) return false;
  tpu_dtype_t ta = tpu_op_aval(op, ia).dtype, tb = tpu_op_aval(op, ib).dtype;
  if (ta != tb) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected A and B to have the same dtype, but found A of type %s and B of "
               "type %s instead", name, tpu_dtype_scalar_type_name(ta), tpu_dtype_scalar_type_name(tb));
    return false;
  }
  return true;
}

/* linalg_solve_triangular(A, B, *, upper, left=True, unitriangular=False) */
static tpu_status_t* tpu_lower_linalg_solve_triangular(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                       tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* name = "linalg.solve_triangular";
  if (!tpu_la_check_pair(b, op, 0, 1, name)) return NULL;
  bool upper = tpu_op_bool(op, 2, false), left = tpu_op_bool(op, 3, true), unit = tpu_op_bool(op, 4, false);
  tpu_aval_t aa = tpu_op_aval(op, 0), ba = tpu_op_aval(op, 1);
  int64_t n = aa.dims[aa.rank - 1], bn = ba.dims[ba.rank - (left ? 2 : 1)];
  if (n != bn) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Incompatible shapes of A and B for the equation %s (%" PRId64 "x%" PRId64
               " and %" PRId64 "x%" PRId64 ")", name, left ? "AX = B" : "XA = B", n, n, ba.dims[ba.rank - 2],
               ba.dims[ba.rank - 1]);
    return NULL;
  }
  tpu_val_t a = tpu_op_tensor(b, op, 0), rhs = tpu_op_tensor(b, op, 1);
  if (!tpu_la_bcast_batch(b, &a, &rhs)) return NULL;
  return tpu_ops_result1(tpu_mx_trisolve(b, a, rhs, left, !upper, unit, TPU_MX_N), outs, nouts);
}

/* triangular_solve(self=B, A, upper=True, transpose=False, unitriangular=False)
 * -> (solution, cloned_coefficient): op(A) X = B, left side only; `transpose`
 * is A^T, not conjugated, for complex A too (LAPACK's trans = 'T', as ATen). */
static tpu_status_t* tpu_lower_triangular_solve(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  if (!tpu_la_check_pair(b, op, 1, 0, "triangular_solve")) return NULL;
  bool upper = tpu_op_bool(op, 2, true), trans = tpu_op_bool(op, 3, false), unit = tpu_op_bool(op, 4, false);
  tpu_val_t a = tpu_op_tensor(b, op, 1), rhs = tpu_op_tensor(b, op, 0);
  if (!tpu_la_bcast_batch(b, &a, &rhs)) return NULL;
  outs[0] = tpu_mx_trisolve(b, a, rhs, true, !upper, unit, trans ? TPU_MX_T : TPU_MX_N);
  outs[1] = a;
  *nouts = 2;
  return NULL;
}

/* X with (L L^H) X = rhs (upper: (U^H U) X = rhs) given the factor; shared
 * batch dims. */
static tpu_val_t tpu_la_cholesky_solve(tpu_builder_t* b, tpu_val_t factor, tpu_val_t rhs, bool upper) {
  bool lower = !upper;
  /* lower: L y = rhs, then L^H x = y; upper: U^H y = rhs, then U x = y. */
  tpu_val_t y = tpu_mx_trisolve(b, factor, rhs, true, lower, false, upper ? TPU_MX_H : TPU_MX_N);
  return tpu_mx_trisolve(b, factor, y, true, lower, false, lower ? TPU_MX_H : TPU_MX_N);
}

/* _cholesky_solve_helper(self=B, A=factor, upper) */
static tpu_status_t* tpu_lower_cholesky_solve_helper(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                     int* nouts) {
  (void)max_outs;
  if (!tpu_la_check_pair(b, op, 1, 0, "cholesky_solve")) return NULL;
  tpu_val_t a = tpu_op_tensor(b, op, 1), rhs = tpu_op_tensor(b, op, 0);
  if (!tpu_la_bcast_batch(b, &a, &rhs)) return NULL;
  return tpu_ops_result1(tpu_la_cholesky_solve(b, a, rhs, tpu_op_bool(op, 2, false)), outs, nouts);
}

/* cholesky_inverse(self=factor, upper=False): (L L^T)^-1 as a solve against I. */
static tpu_status_t* tpu_lower_cholesky_inverse(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  if (!tpu_la_check(b, op, 0, true, "cholesky_inverse")) return NULL;
  tpu_aval_t a = tpu_op_aval(op, 0);
  tpu_aval_t ia = a;
  ia.dtype = TPU_I64;
  tpu_val_t eye = tpu_b_convert(
      b, tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, a.rank - 2), tpu_b_iota(b, &ia, a.rank - 1)), a.dtype);
  tpu_val_t inv = tpu_la_cholesky_solve(b, tpu_op_tensor(b, op, 0), eye, tpu_op_bool(op, 1, false));
  return tpu_ops_result1(inv, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_linalg[] = {
    {"linalg_cholesky_ex", tpu_lower_linalg_cholesky_ex},
    {"cholesky", tpu_lower_cholesky},
    {"linalg_solve_triangular", tpu_lower_linalg_solve_triangular},
    {"triangular_solve", tpu_lower_triangular_solve},
    {"_cholesky_solve_helper", tpu_lower_cholesky_solve_helper},
    {"cholesky_inverse", tpu_lower_cholesky_inverse},
    {NULL, NULL},
};
