/* Lowerings: Householder QR (geqrf, linalg_householder_product = orgqr, ormqr,
 * linalg_qr).
 *
 * The factorisation is blocked as LAPACK's dgeqrf (tpu_qr_geqrf): panels of 32
 * columns, each factored by the unblocked geqr2, a stablehlo.while over the
 * panel's columns, then applied to the columns right of it in WY form. Step j
 * of geqr2 builds the reflector H_j = I - tau_j v_j v_j^T that maps A[j:, j] to
 * (beta, 0, ...) with LAPACK dlarfg's convention (beta = -sign(alpha) * norm,
 * v_j[j] = 1, tau_j = 0 when the column below the diagonal is already zero), so
 * R's diagonal may be negative exactly where LAPACK's is, and applies H_j to the
 * panel's trailing columns as one rank-1 update (w = v^T A, A -= tau v w^T). Shapes stay
 * static: rows >= j and columns > j are iota masks over the full matrix, as in
 * lu.c. The result is LAPACK's compact form: R on and above the diagonal, v_j
 * below it in column j, and tau.
 *
 * Q = H_0 H_1 ... H_{k-1} (orgqr) and its application to another matrix
 * (ormqr) use the compact WY form Q = I - Y T Y^T: two matrix products and one
 * triangular solve instead of k dependent rank-1 updates. */
#include "qr.h"

#include <string.h>

/* ------------------------------------------------------------ reflectors */

/* v^T X over rows: v (batch..., m), X (batch..., m, n) -> (batch..., n). */
static tpu_val_t tpu_qr_vt_x(tpu_builder_t* b, tpu_val_t v, tpu_val_t X) {
  int r = tpu_b_rank(b, X);
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  int64_t c = r - 2;
  return tpu_b_dot_general(b, v, X, r - 2, bd, bd, 1, &c, &c, tpu_b_dtype(b, X));
}

/* H X = X - tau v (v^T X) with tau per batch (batch...). */
static tpu_val_t tpu_qr_reflect(tpu_builder_t* b, tpu_val_t X, tpu_val_t v, tpu_val_t tau) {
  tpu_aval_t m = *tpu_b_aval(b, X);
  tpu_val_t w = tpu_qr_vt_x(b, v, X);
  tpu_val_t outer = tpu_b_binary(b, "stablehlo.multiply", tpu_mx_bcast_vec(b, v, &m, false),
                                 tpu_mx_bcast_vec(b, w, &m, true));
  return tpu_b_binary(b, "stablehlo.subtract", X,
                      tpu_b_binary(b, "stablehlo.multiply", tpu_mx_bcast_batch(b, tau, &m), outer));
}

tpu_qr_reflector_t tpu_qr_larfg(tpu_builder_t* b, tpu_val_t x, tpu_val_t at, tpu_val_t below) {
  tpu_aval_t vec = *tpu_b_aval(b, x), bat = tpu_mx_drop(&vec, 1);
  int last = vec.rank - 1;
  tpu_val_t zero = tpu_b_full(b, &vec, 0), bzero = tpu_b_full(b, &bat, 0);
  tpu_val_t xb = tpu_b_select(b, below, x, zero);
  tpu_val_t alpha = tpu_mx_pick(b, at, x, last);
  tpu_val_t xn2 = tpu_mx_sum(b, tpu_b_binary(b, "stablehlo.multiply", xb, xb), last);
  /* beta = -sign(alpha) * ||(alpha, x)||, sign(0) = +. */
  tpu_val_t norm = tpu_b_unary(b, "stablehlo.sqrt",
                               tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.multiply", alpha, alpha), xn2));
  tpu_val_t beta = tpu_b_select(b, tpu_b_compare(b, "GE", alpha, bzero), tpu_b_unary(b, "stablehlo.negate", norm), norm);
  tpu_qr_reflector_t h;
  h.live = tpu_b_compare(b, "GT", xn2, bzero);
  h.tau = tpu_b_select(
      b, h.live, tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.subtract", beta, alpha), beta), bzero);
  tpu_val_t denom = tpu_b_select(b, h.live, tpu_b_binary(b, "stablehlo.subtract", alpha, beta), tpu_b_full(b, &bat, 1));
  tpu_val_t vb = tpu_b_binary(b, "stablehlo.divide", xb, tpu_mx_bcast_batch(b, denom, &vec));
  h.v = tpu_b_select(b, at, tpu_b_full(b, &vec, 1), vb);
  h.beta = tpu_b_select(b, h.live, beta, alpha);
  return h;
}

/* Carry: A (batch..., m, n) in compact form so far, tau (batch..., k). */
static void tpu_qr_geqrf_step(tpu_builder_t* b, void* ctx, tpu_val_t j, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t A = in[0];
  tpu_aval_t m = *tpu_b_aval(b, A);
  int r = m.rank;
  tpu_aval_t vec = tpu_mx_drop(&m, 1), ivec = tpu_mx_retype(&vec, TPU_I32);
  tpu_val_t idx = tpu_b_iota(b, &ivec, r - 2), jv = tpu_b_broadcast_in_dim(b, j, ivec.rank, ivec.dims, NULL);
  tpu_val_t below = tpu_b_compare(b, "GT", idx, jv), at = tpu_b_compare(b, "EQ", idx, jv);
  tpu_val_t x = tpu_mx_take(b, A, r - 1, j);
  tpu_qr_reflector_t h = tpu_qr_larfg(b, x, at, below);
  /* Column j becomes (R part above, beta, v below); columns > j get H_j. */
  tpu_val_t colj = tpu_b_select(b, at, tpu_mx_bcast_batch(b, h.beta, &vec), tpu_b_select(b, below, h.v, x));
  tpu_aval_t imat = tpu_mx_retype(&m, TPU_I32);
  tpu_val_t ci = tpu_b_iota(b, &imat, r - 1), jm = tpu_b_broadcast_in_dim(b, j, m.rank, m.dims, NULL);
  tpu_val_t A1 = tpu_b_select(b, tpu_b_compare(b, "GT", ci, jm), tpu_qr_reflect(b, A, h.v, h.tau), A);
  out[0] = tpu_b_select(b, tpu_b_compare(b, "EQ", ci, jm), tpu_mx_bcast_vec(b, colj, &m, false), A1);
  out[1] = tpu_mx_put(b, in[1], j, h.tau);
}

/* geqr2 (unblocked) of A (batch..., m, n): the compact matrix and tau (batch..., min(m, n)). */
void tpu_qr_geqr2(tpu_builder_t* b, tpu_val_t A, tpu_val_t* out_a, tpu_val_t* out_tau) {
  tpu_aval_t m = *tpu_b_aval(b, A);
  int64_t k = m.dims[m.rank - 2] < m.dims[m.rank - 1] ? m.dims[m.rank - 2] : m.dims[m.rank - 1];
  tpu_aval_t ta = tpu_mx_drop(&m, 1);
  ta.dims[ta.rank - 1] = k;
  tpu_val_t init[2] = {A, tpu_b_full(b, &ta, 0)}, res[2];
  tpu_mx_for(b, k, 2, init, tpu_qr_geqrf_step, NULL, res);
  *out_a = res[0];
  *out_tau = res[1];
}

/* The compact WY form of H_0 H_1 ... H_{k-1} = I - Y T Y^T (LAPACK dlarft) for
 * reflectors Y (batch..., m, k) and tau (batch..., k). Instead of T, *out_u is
 * its inverse U = triu(Y^T Y, 1) + diag(1/tau): inverting dlarft's recurrence
 * T_j = [T, -tau_j T Y^T y_j; 0, tau_j] column by column gives exactly that, so
 * no step depends on another and applying T is one triangular solve. A
 * reflector with tau = 0 is the identity: its column of Y must be zero, and its
 * U diagonal is 1. */
static tpu_val_t tpu_qr_wy_inverse(tpu_builder_t* b, tpu_val_t Y, tpu_val_t tau) {
  tpu_aval_t ta = *tpu_b_aval(b, tau);
  tpu_val_t live = tpu_b_compare(b, "NE", tau, tpu_b_full(b, &ta, 0));
  tpu_val_t S = tpu_mx_matmul(b, tpu_mx_mT(b, Y), Y);
  tpu_aval_t sa = *tpu_b_aval(b, S);
  tpu_val_t d = tpu_b_select(b, live, tpu_b_binary(b, "stablehlo.divide", tpu_b_full(b, &ta, 1), tau),
                             tpu_b_full(b, &ta, 1));
  /* only U's upper triangle is read by the solve: the diagonal replaces S's */
  return tpu_b_select(b, tpu_mx_tri_pred(b, &sa, true), tpu_mx_bcast_vec(b, d, &sa, true), S);
}

/* The reflectors of a compact form V as unit lower trapezoidal columns Y
 * (batch..., m, k), k = tau's last dim; a reflector with tau = 0 (dlarfg's
 * untouched column) gets a zero column. */
static tpu_val_t tpu_qr_reflectors(tpu_builder_t* b, tpu_val_t V, tpu_val_t tau) {
  tpu_aval_t ta = *tpu_b_aval(b, tau);
  int r = ta.rank + 1;
  int64_t k = ta.dims[ta.rank - 1];
  tpu_val_t Vk = tpu_mx_slice(b, V, r - 1, 0, k);
  tpu_aval_t ya = *tpu_b_aval(b, Vk), ia = tpu_mx_retype(&ya, TPU_I32);
  tpu_val_t row = tpu_b_iota(b, &ia, r - 2), col = tpu_b_iota(b, &ia, r - 1);
  tpu_val_t zeros = tpu_b_full(b, &ya, 0);
  tpu_val_t live = tpu_b_compare(b, "NE", tau, tpu_b_full(b, &ta, 0));
  tpu_val_t Y = tpu_b_select(b, tpu_b_compare(b, "GT", row, col), Vk,
                             tpu_b_select(b, tpu_b_compare(b, "EQ", row, col), tpu_b_full(b, &ya, 1), zeros));
  return tpu_b_select(b, tpu_mx_bcast_vec(b, live, &ya, true), Y, zeros);
}

tpu_val_t tpu_qr_apply_reflectors(tpu_builder_t* b, tpu_val_t X, tpu_val_t Y, tpu_val_t tau, bool forward) {
  tpu_aval_t ta = *tpu_b_aval(b, tau), xa = *tpu_b_aval(b, X);
  if (ta.dims[ta.rank - 1] == 0 || tpu_aval_numel(&xa) == 0) return X;
  tpu_val_t U = tpu_qr_wy_inverse(b, Y, tau);
  tpu_val_t Z = tpu_mx_trisolve(b, U, tpu_mx_matmul(b, tpu_mx_mT(b, Y), X), true, false, false,
                               forward ? TPU_MX_T : TPU_MX_N);
  return tpu_b_binary(b, "stablehlo.subtract", X, tpu_mx_matmul(b, Y, Z));
}

/* Q^T X (forward: H_0 applied first) or Q X (H_{k-1} first) for the k = tau's
 * last dim reflectors of the compact form V. */
static tpu_val_t tpu_qr_apply(tpu_builder_t* b, tpu_val_t X, tpu_val_t V, tpu_val_t tau, bool forward) {
  tpu_aval_t ta = *tpu_b_aval(b, tau), xa = *tpu_b_aval(b, X);
  if (ta.dims[ta.rank - 1] == 0 || tpu_aval_numel(&xa) == 0) return X;
  return tpu_qr_apply_reflectors(b, X, tpu_qr_reflectors(b, V, tau), tau, forward);
}

/* x with its block at rows r0.., columns c0.. replaced by blk. */
static tpu_val_t tpu_qr_put(tpu_builder_t* b, tpu_val_t x, tpu_val_t blk, int64_t r0, int64_t c0) {
  int r = tpu_b_rank(b, x);
  tpu_val_t starts[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) starts[i] = tpu_b_const_i(b, TPU_I32, i == r - 2 ? r0 : i == r - 1 ? c0 : 0);
  return tpu_b_dynamic_update_slice(b, x, blk, starts);
}

/* x[..., r0:, c0:c1] */
static tpu_val_t tpu_qr_block(tpu_builder_t* b, tpu_val_t x, int64_t r0, int64_t c0, int64_t c1) {
  int r = tpu_b_rank(b, x);
  tpu_aval_t a = *tpu_b_aval(b, x);
  return tpu_mx_slice(b, tpu_mx_slice(b, x, r - 2, r0, a.dims[r - 2]), r - 1, c0, c1);
}

/* Columns per panel of the blocked factorisation (LAPACK's usual block size). */
#define TPU_QR_PANEL 32

/* geqrf of A (batch..., m, n), blocked as LAPACK's dgeqrf: each panel of
 * TPU_QR_PANEL columns is factored by geqr2 on its rows at and below the
 * diagonal, and its reflectors then reach the columns right of it in WY form
 * (two products and a triangular solve) rather than as one rank-1 update of the
 * whole trailing matrix per column. The compact matrix and tau (batch..., min(m, n)). */
void tpu_qr_geqrf(tpu_builder_t* b, tpu_val_t A, tpu_val_t* out_a, tpu_val_t* out_tau) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  int r = a.rank;
  int64_t m = a.dims[r - 2], n = a.dims[r - 1], k = m < n ? m : n;
  tpu_aval_t ta = tpu_mx_drop(&a, 1);
  ta.dims[ta.rank - 1] = k;
  tpu_val_t tau = tpu_b_full(b, &ta, 0);
  for (int64_t p0 = 0; p0 < k && tpu_b_ok(b); p0 += TPU_QR_PANEL) {
    int64_t w = k - p0 < TPU_QR_PANEL ? k - p0 : TPU_QR_PANEL;
    tpu_val_t V, tp;
    tpu_qr_geqr2(b, tpu_qr_block(b, A, p0, p0, p0 + w), &V, &tp);
    A = tpu_qr_put(b, A, V, p0, p0);
    if (p0 + w < n) A = tpu_qr_put(b, A, tpu_qr_apply(b, tpu_qr_block(b, A, p0, p0 + w, n), V, tp, true), p0, p0 + w);
    int64_t tr = ta.rank;
    tpu_val_t starts[TPU_MAX_RANK];
    for (int i = 0; i < tr; i++) starts[i] = tpu_b_const_i(b, TPU_I32, i == tr - 1 ? p0 : 0);
    tau = tpu_b_dynamic_update_slice(b, tau, tp, starts);
  }
  *out_a = A;
  *out_tau = tau;
}

/* The first `cols` columns of Q = H_0 ... H_{k-1} (m x m), as orgqr. */
tpu_val_t tpu_qr_orgqr(tpu_builder_t* b, tpu_val_t V, tpu_val_t tau, int64_t cols) {
  tpu_aval_t q = *tpu_b_aval(b, V);
  q.dims[q.rank - 1] = cols;
  return tpu_qr_apply(b, tpu_mx_eye(b, &q), V, tau, false);
}

/* ------------------------------------------------------------------ checks */

/* Tensor arg i: at least 2-d, float32/float64; ATen's messages for `api`. */
static bool tpu_qr_check(tpu_builder_t* b, const tpu_op_t* op, int i, const char* api, const char* kernel) {
  tpu_aval_t a = tpu_op_aval(op, i);
  if (a.dtype != TPU_F32 && a.dtype != TPU_F64) {
    if (tpu_dtype_is_complex(a.dtype))
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: complex inputs are not supported on tpu yet", api);
    else if (tpu_dtype_is_float(a.dtype))
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", kernel, tpu_dtype_scalar_type_name(a.dtype));
    else
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected a floating point or complex tensor as input. Got %s", api,
                 tpu_dtype_scalar_type_name(a.dtype));
    return false;
  }
  if (a.rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: input must have at least 2 dimensions.", api);
    return false;
  }
  return true;
}

/* ---------------------------------------------------------------- lowerings */

/* geqrf(self) -> (a, tau) */
static tpu_status_t* tpu_lower_geqrf(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  if (!tpu_qr_check(b, op, 0, "torch.geqrf", "geqrf_cpu")) return NULL;
  tpu_qr_geqrf(b, tpu_op_tensor(b, op, 0), &outs[0], &outs[1]);
  *nouts = 2;
  return NULL;
}

/* The checks orgqr and ormqr share: tau's dtype and batch dims. */
static bool tpu_qr_check_tau(tpu_builder_t* b, const tpu_aval_t* a, const tpu_aval_t* t, const char* api) {
  if (t->dtype != a->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: tau dtype %s does not match input dtype %s", api,
               tpu_dtype_scalar_type_name(t->dtype), tpu_dtype_scalar_type_name(a->dtype));
    return false;
  }
  if (t->rank != a->rank - 1 || memcmp(t->dims, a->dims, sizeof(int64_t) * (a->rank - 2)) != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected batch dimensions of tau to be equal to input.shape[:-2]", api);
    return false;
  }
  return true;
}

/* linalg_householder_product(input, tau) -> Tensor (orgqr) */
static tpu_status_t* tpu_lower_linalg_householder_product(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* api = "torch.linalg.householder_product";
  if (!tpu_qr_check(b, op, 0, api, "orgqr_cpu")) return NULL;
  tpu_aval_t a = tpu_op_aval(op, 0), t = tpu_op_aval(op, 1);
  int64_t m = a.dims[a.rank - 2], n = a.dims[a.rank - 1];
  if (m < n)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: input.shape[-2] must be greater than or equal to input.shape[-1]",
                      api);
  if (t.rank < 1 || n < t.dims[t.rank - 1])
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: input.shape[-1] must be greater than or equal to tau.shape[-1]", api);
  if (!tpu_qr_check_tau(b, &a, &t, api)) return NULL;
  tpu_val_t V = tpu_op_tensor(b, op, 0), tau = tpu_op_tensor(b, op, 1);
  return tpu_ops_result1(tpu_qr_orgqr(b, V, tau, n), outs, nouts);
}

/* ormqr(self, input2 = tau, input3 = C, left=True, transpose=False) -> Tensor:
 * op(Q) C (left) or C op(Q) (right), Q m x m from the reflectors in self. */
static tpu_status_t* tpu_lower_ormqr(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* api = "torch.ormqr";
  if (!tpu_qr_check(b, op, 0, api, "ormqr_cpu")) return NULL;
  tpu_aval_t a = tpu_op_aval(op, 0), t = tpu_op_aval(op, 1), c = tpu_op_aval(op, 2);
  bool left = tpu_op_bool(op, 3, true), transpose = tpu_op_bool(op, 4, false);
  int64_t m = a.dims[a.rank - 2];
  if (c.rank != a.rank || memcmp(c.dims, a.dims, sizeof(int64_t) * (a.rank - 2)) != 0)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: Expected batch dimensions of other to be equal to input.shape[:-2]",
                      api);
  if (c.dtype != a.dtype)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: Expected input and other to have the same dtype", api);
  if (c.dims[c.rank - (left ? 2 : 1)] != m)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: other.shape[%d] must be equal to input.shape[-2]", api,
                      left ? -2 : -1);
  if (t.rank < 1 || t.dims[t.rank - 1] > a.dims[a.rank - 1] || t.dims[t.rank - 1] > m)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "%s: input.shape[-1] must be greater than or equal to tau.shape[-1]", api);
  if (!tpu_qr_check_tau(b, &a, &t, api)) return NULL;
  tpu_val_t V = tpu_op_tensor(b, op, 0), tau = tpu_op_tensor(b, op, 1), C = tpu_op_tensor(b, op, 2);
  /* Q C: H_{k-1} first; Q^T C: H_0 first; C Q = (Q^T C^T)^T; C Q^T = (Q C^T)^T. */
  if (left)
    outs[0] = tpu_qr_apply(b, C, V, tau, transpose);
  else
    outs[0] = tpu_mx_mT(b, tpu_qr_apply(b, tpu_mx_mT(b, C), V, tau, !transpose));
  *nouts = 1;
  return NULL;
}

/* linalg_qr(A, mode="reduced") -> (Q, R) */
static tpu_status_t* tpu_lower_linalg_qr(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  const char* mode = tpu_op_kind(op, 1) == TPU_ARG_STRING ? tpu_op_arg(op, 1)->u.str : "reduced";
  bool complete = strcmp(mode, "complete") == 0, r_only = strcmp(mode, "r") == 0;
  if (!complete && !r_only && strcmp(mode, "reduced") != 0)
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "qr received unrecognized mode '%s' but expected one of 'reduced' (default), 'r', or 'complete'",
                      mode);
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (a.rank < 2 && (a.dtype == TPU_F32 || a.dtype == TPU_F64))
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "linalg.qr: The input tensor A must have at least 2 dimensions.");
  if (!tpu_qr_check(b, op, 0, "linalg.qr", "linalg_qr_cpu")) return NULL;
  int64_t m = a.dims[a.rank - 2], n = a.dims[a.rank - 1], k = m < n ? m : n;
  tpu_val_t V, tau;
  tpu_qr_geqrf(b, tpu_op_tensor(b, op, 0), &V, &tau);
  /* R: the upper triangle of the compact form, k rows (m when complete). */
  int64_t rrows = complete ? m : k;
  tpu_val_t Rb = tpu_mx_block(b, V, rrows, n);
  tpu_aval_t ra = *tpu_b_aval(b, Rb);
  outs[1] = tpu_b_select(b, tpu_mx_tri_pred(b, &ra, false), Rb, tpu_b_full(b, &ra, 0));
  if (r_only) {
    int64_t zero = 0;
    tpu_aval_t e = tpu_aval_make(a.dtype, 1, &zero);
    outs[0] = tpu_b_full(b, &e, 0);
  } else {
    outs[0] = tpu_qr_orgqr(b, V, tau, complete ? m : k);
  }
  *nouts = 2;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_qr[] = {
    {"geqrf", tpu_lower_geqrf},
    {"linalg_householder_product", tpu_lower_linalg_householder_product},
    {"ormqr", tpu_lower_ormqr},
    {"linalg_qr", tpu_lower_linalg_qr},
    {NULL, NULL},
};
