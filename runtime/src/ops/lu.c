/* Lowerings: LU-based linear algebra (factor, solve, inverse, determinants).
 *
 * Everything rests on one partial-pivot LU factorisation (LAPACK getrf's
 * algorithm, unblocked): a stablehlo.while over k in [0, n) whose body picks the
 * row p >= k with the largest |A[p, k]|, swaps rows k and p, scales the column
 * below the pivot and applies the rank-1 update to the trailing matrix. Shapes
 * stay static: the "trailing" parts are selected with iota masks over the full
 * (batch..., n, n) matrix, and row p (which differs per batch element) is read
 * with a one-hot masked sum.
 *
 * The factorisation yields LU (L unit-lower below the diagonal, U on and above),
 * ATen's 1-based int32 pivots, and the row permutation perm (P A = L U with
 * (P A)[i] = A[perm[i]]). Solves apply P as a one-hot matrix product and then
 * two stablehlo.triangular_solve calls.
 *
 * Like ATen (2.13), _linalg_det/_linalg_slogdet factor A^T when A is contiguous
 * (_linalg_solve_ex always factors A): the LU/pivots they return are visible and
 * autograd's formulas rely on that convention. */
#include "matrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- row exchanges */

/* v with entries k (0-d, the same for the whole batch) and p (per batch, i32 of
 * shape batch...) exchanged along dim `dim`. */
static tpu_val_t tpu_lu_swap(tpu_builder_t* b, tpu_val_t v, int dim, tpu_val_t k, tpu_val_t p) {
  tpu_aval_t pa = *tpu_b_aval(b, p); /* a copy: adding values may move the builder's avals */
  return tpu_mx_swap(b, v, dim, tpu_b_broadcast_in_dim(b, k, pa.rank, pa.dims, NULL), p);
}

/* ---------------------------------------------------------- factorisation */

/* Carry: A (batch..., n, n), pivots (batch..., n) i32 1-based, perm (batch..., n) i32. */
static void tpu_lu_factor_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t A = in[0], piv = in[1], perm = in[2];
  tpu_aval_t m = *tpu_b_aval(b, A);
  int r = m.rank;
  tpu_aval_t vec = tpu_mx_drop(&m, 1), ivec = tpu_mx_retype(&vec, TPU_I32), imat = tpu_mx_retype(&m, TPU_I32);
  tpu_aval_t rvec = tpu_mx_retype(&vec, m.dtype == TPU_C64 ? TPU_F32 : m.dtype == TPU_C128 ? TPU_F64 : m.dtype);
  tpu_val_t vidx = tpu_b_iota(b, &ivec, r - 2);
  tpu_val_t kv = tpu_b_broadcast_in_dim(b, k, ivec.rank, ivec.dims, NULL);

  /* p = argmax over rows >= k of |A[:, k]| (first on ties, NaN wins, like idamax) */
  tpu_val_t col = tpu_mx_take(b, A, r - 1, k);
  tpu_val_t mag = tpu_b_select(b, tpu_b_compare(b, "GE", vidx, kv), tpu_mx_cabs1(b, col),
                               tpu_b_full(b, &rvec, -INFINITY));
  tpu_val_t p64;
  tpu_b_argreduce(b, mag, r - 2, true, NULL, &p64);
  tpu_val_t p = tpu_b_convert(b, p64, TPU_I32);

  tpu_val_t A1 = tpu_lu_swap(b, A, r - 2, k, p);
  out[2] = tpu_lu_swap(b, perm, r - 2, k, p);
  tpu_val_t p1 = tpu_b_binary(b, "stablehlo.add", p, tpu_b_full(b, tpu_b_aval(b, p), 1));
  out[1] = tpu_b_select(b, tpu_b_compare(b, "EQ", vidx, kv), tpu_mx_bcast_batch(b, p1, &ivec), piv);

  /* Multipliers l = A1[:, k] / pivot; LAPACK leaves the column unscaled when the
   * pivot is 0 (then it is all zeros below anyway, and must not become NaN). */
  tpu_val_t rowk = tpu_mx_take(b, A1, r - 2, k);
  tpu_val_t pivot = tpu_mx_take(b, rowk, r - 2, k);
  tpu_val_t colk = tpu_mx_take(b, A1, r - 1, k);
  tpu_val_t pv = tpu_mx_bcast_batch(b, pivot, &vec);
  tpu_val_t l = tpu_b_select(b, tpu_b_compare(b, "EQ", pv, tpu_b_full(b, &vec, 0)), colk,
                             tpu_b_binary(b, "stablehlo.divide", colk, pv));

  tpu_val_t km = tpu_b_broadcast_in_dim(b, k, m.rank, m.dims, NULL);
  tpu_val_t below = tpu_b_compare(b, "GT", tpu_b_iota(b, &imat, r - 2), km);
  tpu_val_t ci = tpu_b_iota(b, &imat, r - 1);
  tpu_val_t right = tpu_b_compare(b, "GT", ci, km);
  tpu_val_t on_k = tpu_b_compare(b, "EQ", ci, km);
  tpu_val_t lm = tpu_mx_bcast_vec(b, l, &m, false);
  tpu_val_t upd = tpu_b_binary(b, "stablehlo.subtract", A1,
                               tpu_b_binary(b, "stablehlo.multiply", lm, tpu_mx_bcast_vec(b, rowk, &m, true)));
  tpu_val_t A2 = tpu_b_select(b, tpu_b_binary(b, "stablehlo.and", below, on_k), lm, A1);
  out[0] = tpu_b_select(b, tpu_b_binary(b, "stablehlo.and", below, right), upd, A2);
}

typedef struct tpu_lu {
  tpu_val_t LU, pivots, perm;
} tpu_lu_t;

/* LU factorisation of the square matrices A (batch..., n, n). */
static tpu_lu_t tpu_lu_factor(tpu_builder_t* b, tpu_val_t A) {
  tpu_lu_t f = {TPU_NOVAL, TPU_NOVAL, TPU_NOVAL};
  if (!tpu_b_ok(b)) return f;
  tpu_aval_t m = *tpu_b_aval(b, A);
  int64_t rows = m.dims[m.rank - 2], cols = m.dims[m.rank - 1], k = rows < cols ? rows : cols;
  tpu_aval_t ivec = tpu_mx_retype(&m, TPU_I32); /* (batch..., rows) */
  ivec.rank--;
  tpu_val_t perm = tpu_b_iota(b, &ivec, ivec.rank - 1);
  tpu_val_t init[3] = {A, tpu_b_full(b, &ivec, 0), perm}, res[3];
  tpu_mx_for(b, k, 3, init, tpu_lu_factor_step, NULL, res);
  f.LU = res[0];
  f.pivots = res[1];
  f.perm = res[2];
  if (k < rows) { /* min(rows, cols) pivots */
    int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
    for (int i = 0; i < ivec.rank; i++) limit[i] = ivec.dims[i];
    limit[ivec.rank - 1] = k;
    f.pivots = tpu_b_slice(b, f.pivots, start, limit, NULL);
  }
  return f;
}


/* getrf's info: the 1-based index of the first zero on U's diagonal, else 0. */
static tpu_val_t tpu_lu_info(tpu_builder_t* b, tpu_val_t LU) {
  tpu_val_t d = tpu_mx_diag(b, LU);
  tpu_aval_t v = *tpu_b_aval(b, d), iv = tpu_mx_retype(&v, TPU_I32);
  tpu_val_t one_based = tpu_b_binary(b, "stablehlo.add", tpu_b_iota(b, &iv, v.rank - 1), tpu_b_full(b, &iv, 1));
  tpu_val_t cand = tpu_b_select(b, tpu_b_compare(b, "EQ", d, tpu_b_full(b, &v, 0)), one_based,
                                tpu_b_full(b, &iv, INT32_MAX));
  int64_t last = v.rank - 1;
  tpu_val_t first = tpu_b_reduce(b, cand, tpu_b_const_i(b, TPU_I32, INT32_MAX), 1, &last, "stablehlo.minimum");
  tpu_aval_t bv = tpu_mx_drop(&iv, 1);
  return tpu_b_select(b, tpu_b_compare(b, "EQ", first, tpu_b_full(b, &bv, INT32_MAX)), tpu_b_full(b, &bv, 0), first);
}

/* (-1)^(number of row exchanges), per batch, of dtype t. */
static tpu_val_t tpu_lu_perm_sign(tpu_builder_t* b, tpu_val_t pivots, tpu_dtype_t t) {
  tpu_aval_t iv = *tpu_b_aval(b, pivots);
  tpu_val_t one_based = tpu_b_binary(b, "stablehlo.add", tpu_b_iota(b, &iv, iv.rank - 1), tpu_b_full(b, &iv, 1));
  tpu_val_t swapped = tpu_b_convert(b, tpu_b_compare(b, "NE", pivots, one_based), TPU_I32);
  int64_t last = iv.rank - 1;
  tpu_val_t count = tpu_b_reduce(b, swapped, tpu_b_const_i(b, TPU_I32, 0), 1, &last, "stablehlo.add");
  tpu_aval_t bv = tpu_mx_drop(&iv, 1);
  tpu_val_t odd = tpu_b_compare(b, "EQ", tpu_b_binary(b, "stablehlo.and", count, tpu_b_full(b, &bv, 1)),
                                tpu_b_full(b, &bv, 1));
  tpu_aval_t fv = tpu_mx_retype(&bv, t);
  return tpu_b_select(b, odd, tpu_b_full(b, &fv, -1), tpu_b_full(b, &fv, 1));
}

/* Carry: perm (batch..., n) i32, pivots (batch..., n) i32 (unchanged). */
static void tpu_lu_perm_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t v = *tpu_b_aval(b, in[1]);
  tpu_val_t pk = tpu_mx_take(b, in[1], v.rank - 1, k);
  tpu_val_t p = tpu_b_binary(b, "stablehlo.subtract", pk, tpu_b_full(b, tpu_b_aval(b, pk), 1));
  out[0] = tpu_lu_swap(b, in[0], v.rank - 1, k, p);
  out[1] = in[1];
}

/* The row permutation (of `rows` rows) that ATen's sequential 1-based pivots describe. */
static tpu_val_t tpu_lu_perm_of_pivots(tpu_builder_t* b, tpu_val_t pivots, int64_t rows) {
  tpu_aval_t v = *tpu_b_aval(b, pivots), rv = v;
  rv.dims[rv.rank - 1] = rows;
  tpu_val_t init[2] = {tpu_b_iota(b, &rv, rv.rank - 1), pivots}, res[2];
  tpu_mx_for(b, v.dims[v.rank - 1], 2, init, tpu_lu_perm_step, NULL, res);
  return res[0];
}

/* ----------------------------------------------------------------- solves */

/* The permutation matrix P (P[i, j] = perm[i] == j) of dtype t. */
static tpu_val_t tpu_lu_perm_matrix(tpu_builder_t* b, tpu_val_t perm, tpu_dtype_t t) {
  tpu_aval_t v = *tpu_b_aval(b, perm), m = v;
  m.dims[m.rank++] = v.dims[v.rank - 1];
  tpu_val_t pm = tpu_mx_bcast_vec(b, perm, &m, false);
  tpu_val_t hit = tpu_b_compare(b, "EQ", pm, tpu_b_iota(b, &m, m.rank - 1));
  return tpu_b_convert(b, hit, t);
}

/* P @ x (transpose_p: P^T @ x), batched over the leading dims. */
static tpu_val_t tpu_lu_apply_perm(tpu_builder_t* b, tpu_val_t P, tpu_val_t x, bool transpose_p) {
  int r = tpu_b_rank(b, x);
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  int64_t pc = transpose_p ? r - 2 : r - 1, xc = r - 2;
  return tpu_b_dot_general(b, P, x, r - 2, bd, bd, 1, &pc, &xc, tpu_b_dtype(b, x));
}

/* LU's unit-lower (lower) or upper triangle solved against x, or its adjoint's. */
static tpu_val_t tpu_lu_trsm(tpu_builder_t* b, tpu_val_t a, tpu_val_t x, bool lower, bool unit, bool adjoint) {
  return tpu_mx_trisolve(b, a, x, true, lower, unit, adjoint ? TPU_MX_H : TPU_MX_N);
}

/* x^H (x^T for real x). */
static tpu_val_t tpu_lu_mH(tpu_builder_t* b, tpu_val_t x) { return tpu_ops_conj(b, tpu_mx_mT(b, x)); }

/* linalg_lu_solve's semantics for M factored as P M = L U, batch dims of LU/perm
 * and X equal: left: M X = X0 (adjoint: M^H X = X0); right: X M = X0 (X M^H). */
static tpu_val_t tpu_lu_solve(tpu_builder_t* b, tpu_val_t LU, tpu_val_t perm, tpu_val_t X, bool left, bool adjoint) {
  if (!left) /* X M = B  <=>  M^H X^H = B^H */
    return tpu_lu_mH(b, tpu_lu_solve(b, LU, perm, tpu_lu_mH(b, X), true, !adjoint));
  tpu_val_t P = tpu_lu_perm_matrix(b, perm, tpu_b_dtype(b, X));
  if (!adjoint) { /* X = U^-1 L^-1 P B */
    tpu_val_t y = tpu_lu_trsm(b, LU, tpu_lu_apply_perm(b, P, X, false), true, true, false);
    return tpu_lu_trsm(b, LU, y, false, false, false);
  }
  /* M^H = U^H L^H P:  X = P^T L^-H U^-H B */
  tpu_val_t y = tpu_lu_trsm(b, LU, X, false, false, true);
  return tpu_lu_apply_perm(b, P, tpu_lu_trsm(b, LU, y, true, true, true), true);
}

/* --------------------------------------------------------------- checks */

/* f32/f64/c64/c128 input of at least 2 dims (square when `square`); ATen's messages. */
static bool tpu_lu_check_any(tpu_builder_t* b, const tpu_aval_t* a, const char* api, bool square) {
  tpu_aval_t r = *a; /* complex passes as its real type: the factorisation and solves take both */
  if (tpu_dtype_is_complex(r.dtype)) r.dtype = r.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  return tpu_mx_check_input(b, &r, api, NULL, square);
}

/* tpu_lu_check_any for square matrices (solves, inverses, determinants). */
static bool tpu_lu_check(tpu_builder_t* b, const tpu_aval_t* a, const char* api) {
  return tpu_lu_check_any(b, a, api, true);
}

/* ATen factors A^T for contiguous real A in det/slogdet (see the top). */
static bool tpu_lu_use_transpose(const tpu_op_t* op, int i) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  return a && a->kind == TPU_ARG_TENSOR && tpu_tensor_is_contiguous(&a->u.tensor) &&
         !tpu_dtype_is_complex(a->u.tensor.dtype);
}

/* ------------------------------------------------------------- lowerings */

/* linalg_lu_factor_ex(A, *, pivot=True, check_errors=False) -> (LU, pivots, info) */
static tpu_status_t* tpu_lower_linalg_lu_factor_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                   int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_lu_check_any(b, &a, "torch.linalg.lu_factor_ex", false)) return NULL;
  if (!tpu_op_bool(op, 1, true))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "linalg.lu_factor: LU without pivoting is not implemented on tpu");
  tpu_lu_t f = tpu_lu_factor(b, tpu_op_tensor(b, op, 0));
  outs[0] = f.LU;
  outs[1] = f.pivots;
  outs[2] = tpu_lu_info(b, f.LU);
  if (tpu_op_bool(op, 2, false)) /* ATen's TORCH_CHECK: a RuntimeError, not a LinAlgError */
    tpu_mx_check_info(b, op, outs[2], TPU_INVALID_ARGUMENT,
                      "torch.linalg.lu_factor_ex: U[{},{}] is zero and using it on lu_solve would result in a division "
                      "by zero. If you still want to perform the factorization, consider calling linalg.lu(A, pivot) "
                      "or linalg.lu_factor_ex(A, pivot)");
  *nouts = 3;
  return NULL;
}

/* linalg_inv_ex(A, *, check_errors=False) -> (inverse, info) */
static tpu_status_t* tpu_lower_linalg_inv_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_lu_check(b, &a, "linalg.inv")) return NULL;
  tpu_val_t A = tpu_op_tensor(b, op, 0);
  tpu_aval_t im = tpu_mx_retype(&a, TPU_I32);
  tpu_val_t eye = tpu_b_convert(
      b, tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, a.rank - 2), tpu_b_iota(b, &im, a.rank - 1)), a.dtype);
  tpu_lu_t f = tpu_lu_factor(b, A);
  outs[0] = tpu_lu_solve(b, f.LU, f.perm, eye, true, false);
  outs[1] = tpu_lu_info(b, f.LU);
  if (tpu_op_bool(op, 1, false))
    tpu_mx_check_info(b, op, outs[1], TPU_LINALG_ERROR,
                      "linalg.inv_ex: The diagonal element {} is zero, the inversion could not be completed because the "
                      "input matrix is singular.");
  *nouts = 2;
  return NULL;
}

/* Broadcast batch shape of a (batch..., x, y) and B's batch dims (B_rank - nb_core trailing dims). */
static bool tpu_lu_batch_shape(tpu_builder_t* b, const tpu_aval_t* a, const tpu_aval_t* bb, int b_core,
                               tpu_aval_t* out) {
  int ra = a->rank - 2, rb = bb->rank - b_core, r = ra > rb ? ra : rb;
  out->rank = r;
  for (int i = 0; i < r; i++) {
    int64_t da = i - (r - ra) >= 0 ? a->dims[i - (r - ra)] : 1;
    int64_t db = i - (r - rb) >= 0 ? bb->dims[i - (r - rb)] : 1;
    if (da != db && da != 1 && db != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                 ") at non-singleton dimension %d",
                 da, db, i);
      return false;
    }
    out->dims[i] = da == 1 ? db : da;
  }
  return true;
}

/* x broadcast to batch shape `batch` followed by x's trailing `core` dims. */
static tpu_val_t tpu_lu_to_batch(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* batch, int core) {
  tpu_aval_t xa = *tpu_b_aval(b, x);
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < batch->rank; i++) dims[i] = batch->dims[i];
  for (int i = 0; i < core; i++) dims[batch->rank + i] = xa.dims[xa.rank - core + i];
  return tpu_b_broadcast_to(b, x, batch->rank + core, dims);
}

/* _linalg_solve_ex(A, B, *, left=True, check_errors=False) -> (result, LU, pivots, info) */
static tpu_status_t* tpu_lower__linalg_solve_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0), bb = tpu_op_aval(op, 1);
  if (!tpu_lu_check(b, &a, "linalg.solve")) return NULL;
  if (bb.dtype != a.dtype)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.solve: Expected A and B to have the same dtype, but found A of type "
                      "%s and B of type %s instead", tpu_dtype_name(a.dtype), tpu_dtype_name(bb.dtype));
  bool left = tpu_op_bool(op, 2, true);
  int64_t n = a.dims[a.rank - 1];
  /* ATen's linalg_solve_is_vector_rhs: B is a (batch of) vector(s). */
  bool vec = bb.rank == 1 || (bb.rank == a.rank - 1 && memcmp(bb.dims, a.dims, sizeof(int64_t) * bb.rank) == 0);
  int64_t bn = vec ? bb.dims[bb.rank - 1] : bb.dims[bb.rank - (left ? 2 : 1)];
  if (bb.rank < 1 || bn != n)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.solve: Incompatible shapes of A and B for the equation %s "
                      "(%" PRId64 "x%" PRId64 " and %" PRId64 "x%" PRId64 ")",
                      left ? "AX = B" : "XA = B", n, n, bb.rank >= 2 ? bb.dims[bb.rank - 2] : bn,
                      bb.rank >= 2 ? bb.dims[bb.rank - 1] : 1);
  tpu_aval_t batch;
  if (!tpu_lu_batch_shape(b, &a, &bb, vec ? 1 : 2, &batch)) return NULL;
  /* ATen factors A with its own batch shape (LU/pivots/info keep it), then
   * broadcasts the factors against B's batch. */
  tpu_lu_t f = tpu_lu_factor(b, tpu_op_tensor(b, op, 0));
  tpu_val_t B = tpu_lu_to_batch(b, tpu_op_tensor(b, op, 1), &batch, vec ? 1 : 2);
  if (vec) { /* a column (left) or row (right) of the matrix equation */
    tpu_aval_t ba = *tpu_b_aval(b, B);
    ba.dims[ba.rank] = 1;
    if (!left) {
      ba.dims[ba.rank] = ba.dims[ba.rank - 1];
      ba.dims[ba.rank - 1] = 1;
    }
    ba.rank++;
    B = tpu_b_reshape(b, B, ba.rank, ba.dims);
  }
  tpu_val_t X = tpu_lu_solve(b, tpu_lu_to_batch(b, f.LU, &batch, 2), tpu_lu_to_batch(b, f.perm, &batch, 1), B, left,
                             false);
  if (vec) {
    tpu_aval_t xa = *tpu_b_aval(b, B);
    xa.rank--;
    if (!left) xa.dims[xa.rank - 1] = n;
    X = tpu_b_reshape(b, X, xa.rank, xa.dims);
  }
  outs[0] = X;
  outs[1] = f.LU;
  outs[2] = f.pivots;
  outs[3] = tpu_lu_info(b, f.LU);
  if (tpu_op_bool(op, 3, false))
    tpu_mx_check_info(b, op, outs[3], TPU_LINALG_ERROR,
                      "torch.linalg.solve_ex: The solver failed because the input matrix is singular.");
  *nouts = 4;
  return NULL;
}

/* Factors A for det/slogdet the way ATen does; returns diag(U) in *diag. */
static tpu_lu_t tpu_lu_for_det(tpu_builder_t* b, tpu_op_t* op, const char* api, tpu_val_t* diag) {
  tpu_lu_t f = {TPU_NOVAL, TPU_NOVAL, TPU_NOVAL};
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_lu_check(b, &a, api)) return f;
  tpu_val_t A = tpu_op_tensor(b, op, 0);
  f = tpu_lu_factor(b, tpu_lu_use_transpose(op, 0) ? tpu_mx_mT(b, A) : A);
  *diag = tpu_mx_diag(b, f.LU);
  return f;
}

/* _linalg_det(A) -> (result, LU, pivots): det = sign(P) * prod(diag(U)). */
static tpu_status_t* tpu_lower__linalg_det(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_val_t d = TPU_NOVAL;
  tpu_lu_t f = tpu_lu_for_det(b, op, "linalg.det", &d);
  if (!tpu_b_ok(b)) return NULL;
  tpu_dtype_t t = tpu_b_dtype(b, d);
  int64_t last = tpu_b_rank(b, d) - 1;
  tpu_val_t prod = tpu_b_reduce(b, d, tpu_b_const(b, t, 1), 1, &last, "stablehlo.multiply");
  outs[0] = tpu_b_binary(b, "stablehlo.multiply", tpu_lu_perm_sign(b, f.pivots, t), prod);
  outs[1] = f.LU;
  outs[2] = f.pivots;
  *nouts = 3;
  return NULL;
}

/* _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots). */
static tpu_status_t* tpu_lower__linalg_slogdet(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_val_t d = TPU_NOVAL;
  tpu_lu_t f = tpu_lu_for_det(b, op, "linalg.slogdet", &d);
  if (!tpu_b_ok(b)) return NULL;
  tpu_dtype_t t = tpu_b_dtype(b, d);
  int64_t last = tpu_b_rank(b, d) - 1;
  /* sign: the product of d / |d| (stablehlo.sign of a complex value; 0 at 0), logabsdet real */
  tpu_val_t ad = tpu_b_unary(b, "stablehlo.abs", d);
  tpu_val_t sgn = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.sign", d), tpu_b_const(b, t, 1), 1, &last,
                               "stablehlo.multiply");
  tpu_val_t logs = tpu_b_unary(b, "stablehlo.log", ad);
  outs[0] = tpu_b_binary(b, "stablehlo.multiply", tpu_lu_perm_sign(b, f.pivots, t), sgn);
  outs[1] = tpu_b_reduce(b, logs, tpu_b_const(b, tpu_b_dtype(b, ad), 0), 1, &last, "stablehlo.add");
  outs[2] = f.LU;
  outs[3] = f.pivots;
  *nouts = 4;
  return NULL;
}

/* linalg_lu_solve(LU, pivots, B, *, left=True, adjoint=False) -> Tensor */
static tpu_status_t* tpu_lower_linalg_lu_solve(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0), pa = tpu_op_aval(op, 1), bb = tpu_op_aval(op, 2);
  if (!tpu_lu_check(b, &a, "linalg.lu_solve")) return NULL;
  bool left = tpu_op_bool(op, 3, true), adjoint = tpu_op_bool(op, 4, false);
  int64_t n = a.dims[a.rank - 1];
  if (pa.dtype != TPU_I32)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.lu_solve: Expected pivots to be int32, got %s",
                      tpu_dtype_name(pa.dtype));
  if (bb.dtype != a.dtype)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.lu_solve: Expected LU and B to have the same dtype, but found LU "
                      "of type %s and B of type %s instead", tpu_dtype_name(a.dtype), tpu_dtype_name(bb.dtype));
  if (bb.rank < 2 || bb.dims[bb.rank - (left ? 2 : 1)] != n)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.lu_solve: Incompatible shapes of A and B for the equation %s",
                      left ? "AX = B" : "XA = B");
  if (pa.rank != a.rank - 1 || pa.dims[pa.rank - 1] != n)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.lu_solve: Expected pivots of shape batch x %" PRId64, n);
  tpu_aval_t batch;
  if (!tpu_lu_batch_shape(b, &a, &bb, 2, &batch)) return NULL;
  tpu_val_t LU = tpu_lu_to_batch(b, tpu_op_tensor(b, op, 0), &batch, 2);
  tpu_val_t piv = tpu_lu_to_batch(b, tpu_op_tensor(b, op, 1), &batch, 1);
  tpu_val_t B = tpu_lu_to_batch(b, tpu_op_tensor(b, op, 2), &batch, 2);
  return tpu_ops_result1(tpu_lu_solve(b, LU, tpu_lu_perm_of_pivots(b, piv, n), B, left, adjoint), outs, nouts);
}

/* ------------------------------------------------------------ unpacking */

/* (P, L, U) with A = P L U from a factorisation (LU: batch..., m, n; 1-based
 * pivots: batch..., k): L (m, k) unit lower, U (k, n) upper, P (m, m). A part
 * not asked for is an empty tensor, as ATen returns. */
static void tpu_lu_unpack(tpu_builder_t* b, tpu_val_t LU, tpu_val_t pivots, bool data, bool perm, tpu_val_t* outs) {
  tpu_aval_t a = *tpu_b_aval(b, LU);
  int64_t m = a.dims[a.rank - 2], n = a.dims[a.rank - 1], k = m < n ? m : n, zero = 0;
  tpu_aval_t empty = tpu_aval_make(a.dtype, 1, &zero);
  outs[0] = outs[1] = outs[2] = tpu_b_full(b, &empty, 0);
  if (perm) { /* A = P (L U) with (P^T A)[i] = A[perm[i]] */
    tpu_val_t p = tpu_lu_perm_of_pivots(b, tpu_b_convert(b, pivots, TPU_I32), m);
    outs[0] = tpu_mx_mT(b, tpu_lu_perm_matrix(b, p, a.dtype));
  }
  if (data) {
    tpu_val_t l = tpu_mx_block(b, LU, m, k), u = tpu_mx_block(b, LU, k, n);
    tpu_aval_t la = *tpu_b_aval(b, l), ua = *tpu_b_aval(b, u);
    tpu_val_t strict = tpu_b_binary(b, "stablehlo.and", tpu_mx_tri_pred(b, &la, true),
                                    tpu_b_unary(b, "stablehlo.not", tpu_mx_tri_pred(b, &la, false)));
    tpu_val_t diag = tpu_b_binary(b, "stablehlo.and", tpu_mx_tri_pred(b, &la, true), tpu_mx_tri_pred(b, &la, false));
    outs[1] = tpu_b_select(b, strict, l, tpu_b_select(b, diag, tpu_b_full(b, &la, 1), tpu_b_full(b, &la, 0)));
    outs[2] = tpu_b_select(b, tpu_mx_tri_pred(b, &ua, false), u, tpu_b_full(b, &ua, 0));
  }
}

/* lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U) */
static tpu_status_t* tpu_lower_lu_unpack(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0), p = tpu_op_aval(op, 1);
  if (a.rank < 2 || !(tpu_dtype_is_float(a.dtype) || tpu_dtype_is_complex(a.dtype)))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "torch.lu_unpack: LU_data must be a batch of float matrices");
  int64_t k = a.dims[a.rank - 2] < a.dims[a.rank - 1] ? a.dims[a.rank - 2] : a.dims[a.rank - 1];
  if (p.rank != a.rank - 1 || p.dims[p.rank - 1] != k)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "torch.lu_unpack: LU_pivots.size(-1) must equal min(LU_data.size(-2), "
                      "LU_data.size(-1)), but got %" PRId64 " and %" PRId64, p.rank ? p.dims[p.rank - 1] : 0, k);
  if (p.dtype != TPU_I32)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "torch.lu_unpack: LU_pivots is expected to be a contiguous tensor of "
                      "torch.int32 dtype. Note: this function is intended to be used with the output produced by "
                      "torch.linalg.lu_factor");
  tpu_lu_unpack(b, tpu_op_tensor(b, op, 0), tpu_op_tensor(b, op, 1), tpu_op_bool(op, 2, true),
                tpu_op_bool(op, 3, true), outs);
  *nouts = 3;
  return NULL;
}

/* linalg_lu(A, pivot) -> (P, L, U) */
static tpu_status_t* tpu_lower_linalg_lu(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_lu_check_any(b, &a, "linalg.lu", false)) return NULL;
  if (!tpu_op_bool(op, 1, true))
    return TPU_STATUS(TPU_UNIMPLEMENTED, "linalg.lu: LU without pivoting is not implemented on tpu");
  tpu_lu_t f = tpu_lu_factor(b, tpu_op_tensor(b, op, 0));
  tpu_lu_unpack(b, f.LU, f.pivots, true, true, outs);
  *nouts = 3;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_lu[] = {
    {"lu_unpack", tpu_lower_lu_unpack},
    {"linalg_lu", tpu_lower_linalg_lu},
    {"linalg_lu_factor_ex", tpu_lower_linalg_lu_factor_ex},
    {"linalg_inv_ex", tpu_lower_linalg_inv_ex},
    {"_linalg_solve_ex", tpu_lower__linalg_solve_ex},
    {"_linalg_det", tpu_lower__linalg_det},
    {"_linalg_slogdet", tpu_lower__linalg_slogdet},
    {"linalg_lu_solve", tpu_lower_linalg_lu_solve},
    {NULL, NULL},
};
