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

#include "check.h"
#include "matrix.h"
#include "nn.h"

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

/* ------------------------------------------------- Cholesky's info */

/* XLA's factor of a matrix that is not positive definite is unspecified, so
 * LAPACK's info comes from the unblocked algorithm (potf2) run on the matrices
 * whose factor is not finite with a positive diagonal: step k takes the pivot
 * d = W[k,k] (info = k + 1 at the first one that is not > 0, NaN included) and
 * subtracts l l^H, l = W[:, k] / sqrt(d) below row k. The loop stops at once
 * when every factor is good, so a positive definite input pays for two
 * reductions only. Carry: W (batch..., n, n), info (batch...) i32, todo
 * (batch...) i1: failed and no info yet. */
static void tpu_la_potf2_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t W = in[0];
  tpu_aval_t m = *tpu_b_aval(b, W);
  int r = m.rank;
  tpu_aval_t bat = *tpu_b_aval(b, in[1]);
  tpu_val_t c = tpu_mx_take(b, W, r - 1, k); /* (batch..., n) */
  tpu_val_t d = tpu_mx_take(b, c, r - 2, k);  /* (batch...) */
  if (tpu_dtype_is_complex(m.dtype)) d = tpu_ops_part(b, d, false);
  tpu_aval_t da = *tpu_b_aval(b, d);
  tpu_val_t bad = tpu_b_unary(b, "stablehlo.not", tpu_b_compare(b, "GT", d, tpu_b_full(b, &da, 0.0)));
  tpu_val_t first = tpu_b_binary(b, "stablehlo.and", bad, in[2]);
  tpu_val_t k1 = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.add", k, tpu_b_const_i(b, TPU_I32, 1)), TPU_I32);
  out[1] = tpu_b_select(b, first, tpu_b_broadcast_in_dim(b, k1, bat.rank, bat.dims, NULL), in[1]);
  out[2] = tpu_b_binary(b, "stablehlo.and", in[2], tpu_b_unary(b, "stablehlo.not", bad));
  tpu_val_t root = tpu_b_unary(b, "stablehlo.sqrt", d);
  if (tpu_dtype_is_complex(m.dtype)) root = tpu_ops_complex(b, root, tpu_b_full(b, &da, 0.0));
  tpu_aval_t va = *tpu_b_aval(b, c), iv = tpu_mx_retype(&va, TPU_I32);
  tpu_val_t below = tpu_b_compare(b, "GT", tpu_b_iota(b, &iv, r - 2), tpu_b_broadcast_in_dim(b, k, iv.rank, iv.dims, NULL));
  tpu_val_t l = tpu_b_select(b, below, tpu_nn_div(b, c, tpu_mx_bcast_batch(b, root, &va)), tpu_b_full(b, &va, 0.0));
  tpu_val_t outer = tpu_nn_mul(b, tpu_mx_bcast_vec(b, l, &m, false), tpu_mx_bcast_vec(b, tpu_ops_conj(b, l), &m, true));
  out[0] = tpu_nn_sub(b, W, outer);
}

static tpu_val_t tpu_la_potf2_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx;
  (void)k;
  return tpu_mx_any(b, in[2]);
}

/* info for the input x and XLA's masked factor l (both batch..., n, n). */
static tpu_val_t tpu_la_cholesky_info(tpu_builder_t* b, tpu_val_t x, tpu_val_t l) {
  tpu_aval_t m = *tpu_b_aval(b, l);
  int r = m.rank;
  int64_t n = m.dims[r - 1];
  const bool cplx = tpu_dtype_is_complex(m.dtype);
  tpu_val_t lr = cplx ? tpu_ops_part(b, l, false) : l;
  tpu_aval_t ra = *tpu_b_aval(b, lr);
  /* good entries are finite; a good diagonal is > 0 */
  tpu_val_t finite = tpu_b_unary(b, "stablehlo.is_finite", lr);
  if (cplx)
    finite = tpu_b_binary(b, "stablehlo.and", finite, tpu_b_unary(b, "stablehlo.is_finite", tpu_ops_part(b, l, true)));
  tpu_aval_t ia = tpu_mx_retype(&ra, TPU_I32);
  tpu_val_t diag = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, r - 2), tpu_b_iota(b, &ia, r - 1));
  tpu_val_t pos = tpu_b_compare(b, "GT", lr, tpu_b_full(b, &ra, 0.0));
  tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", finite,
                              tpu_b_binary(b, "stablehlo.or", tpu_b_unary(b, "stablehlo.not", diag), pos));
  int64_t last2[2] = {r - 2, r - 1};
  tpu_val_t all_ok = tpu_b_reduce(b, ok, tpu_b_const_i(b, TPU_BOOL, 1), 2, last2, "stablehlo.and");
  tpu_aval_t bat = tpu_mx_drop(&m, 2), ibat = tpu_mx_retype(&bat, TPU_I32);
  tpu_val_t init[3] = {x, tpu_b_full(b, &ibat, 0.0), tpu_b_unary(b, "stablehlo.not", all_ok)};
  tpu_val_t res[3];
  tpu_mx_while(b, n, 3, init, tpu_la_potf2_cond, tpu_la_potf2_step, NULL, res, NULL);
  return res[1];
}

/* The Cholesky factor of arg 0: L (lower, tril) or U = L^H (upper, triu), and
 * when out_info is not NULL LAPACK's info (batch...) i32: 0, or the order of the
 * first leading minor that is not positive definite. */
static tpu_val_t tpu_la_cholesky(tpu_builder_t* b, tpu_op_t* op, bool upper, tpu_val_t* out_info) {
  tpu_aval_t a = tpu_op_aval(op, 0);
  tpu_val_t x = tpu_op_tensor(b, op, 0);
  if (out_info) {
    tpu_aval_t ia = tpu_aval_make(TPU_I32, a.rank - 2, a.dims);
    *out_info = tpu_b_full(b, &ia, 0.0);
  }
  if (tpu_aval_numel(&a) == 0) return x;
  tpu_val_t l = tpu_la_tri(b, tpu_b_op1(b, "stablehlo.cholesky", 1, &x, "lower = true", &a), true);
  if (out_info) *out_info = tpu_la_cholesky_info(b, x, l);
  return upper ? tpu_ops_conj(b, tpu_mx_mT(b, l)) : l;
}

/* The message ATen gives for info > 0 (without its batch element), "{}" the order. */
#define TPU_LA_NOT_PD(api)                                                                                  \
  api ": The factorization could not be completed because the input is not positive-definite (the leading " \
      "minor of order {} is not positive-definite)."

/* linalg_cholesky_ex(self, *, upper=False, check_errors=False) -> (L, info).
 * A matrix that is not positive definite gives NaNs in L (XLA leaves them
 * unspecified) and LAPACK's info. */
static tpu_status_t* tpu_lower_linalg_cholesky_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                  int* nouts) {
  (void)max_outs;
  if (!tpu_la_check(b, op, 0, true, "linalg.cholesky")) return NULL;
  outs[0] = tpu_la_cholesky(b, op, tpu_op_bool(op, 1, false), &outs[1]);
  if (tpu_op_bool(op, 2, false))
    tpu_mx_check_info(b, op, outs[1], TPU_LINALG_ERROR, TPU_LA_NOT_PD("linalg.cholesky_ex"));
  *nouts = 2;
  return NULL;
}

/* cholesky(self, upper=False): ATen's deprecated op checks its info. */
static tpu_status_t* tpu_lower_cholesky(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  if (!tpu_la_check(b, op, 0, true, "cholesky")) return NULL;
  tpu_val_t info = TPU_NOVAL;
  tpu_val_t l = tpu_la_cholesky(b, op, tpu_op_bool(op, 1, false), &info);
  tpu_mx_check_info(b, op, info, TPU_LINALG_ERROR, TPU_LA_NOT_PD("cholesky"));
  return tpu_ops_result1(l, outs, nouts);
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
  tpu_val_t factor = tpu_op_tensor(b, op, 0);
  if (tpu_aval_numel(&a) > 0) { /* ATen's info: the first zero on the factor's diagonal (1-based) */
    tpu_aval_t i32 = tpu_mx_retype(&a, TPU_I32);
    tpu_val_t rows = tpu_b_iota(b, &i32, a.rank - 2);
    tpu_val_t zero = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "EQ", rows, tpu_b_iota(b, &i32, a.rank - 1)),
                                  tpu_b_compare(b, "EQ", factor, tpu_b_full(b, &a, 0.0)));
    int64_t n = a.dims[a.rank - 1], last2[2] = {a.rank - 2, a.rank - 1};
    tpu_val_t at = tpu_b_select(b, zero, tpu_nn_add(b, rows, tpu_b_full(b, &i32, 1.0)), tpu_b_full(b, &i32, (double)n + 1));
    tpu_val_t first = tpu_b_reduce(b, at, tpu_b_const_i(b, TPU_I32, n + 1), 2, last2, "stablehlo.minimum");
    tpu_aval_t fa = *tpu_b_aval(b, first);
    tpu_val_t info = tpu_b_select(b, tpu_b_compare(b, "GT", first, tpu_b_full(b, &fa, (double)n)), tpu_b_full(b, &fa, 0.0), first);
    tpu_mx_check_info(b, op, info, TPU_LINALG_ERROR,
                      "cholesky_inverse: The diagonal element {} is zero, the inversion could not be completed because "
                      "the input matrix is singular.");
  }
  tpu_val_t inv = tpu_la_cholesky_solve(b, factor, eye, tpu_op_bool(op, 1, false));
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
