/* Lowerings: the singular value decomposition (_linalg_svd), by one-sided
 * (Hestenes) Jacobi.
 *
 * For A (batch..., m, n) with m >= n (else A^T is decomposed and the factors
 * swapped), the columns of A are rotated in pairs until they are mutually
 * orthogonal: A V = W with V orthogonal, then S = the column norms of W, U =
 * W / S and Vh = V^T. Working on A itself (not on A^T A) keeps the relative
 * accuracy of small singular values: the condition number is not squared.
 * A tall A (m >= 2n) is first reduced by QR (qr.c) and Jacobi runs on R.
 *
 * Ordering: Brent-Luk's parallel round-robin. The n columns (one zero column
 * added when n is odd) are held as two halves, tops T and bottoms B, and pair i
 * is (T[i], B[i]): one step rotates all n/2 disjoint pairs at once with
 * vectorised 2x2 rotations (O(m n) work), then moves the columns one place
 * round a circle with T[0] fixed, a static permutation (slices and a concat).
 * n - 1 steps meet every pair once (a sweep) and bring the columns back to their
 * original places.
 *
 * Rotation: for a = ||a_p||^2, b = ||a_q||^2, g = a_p.a_q (Rutishauser's
 * formula) zeta = (b - a) / 2g, t = sign(zeta) / (|zeta| + sqrt(1 + zeta^2)),
 * c = 1 / sqrt(1 + t^2), s = c t. A pair is rotated only when
 * |g| > tol ||a_p|| ||a_q|| with tol = sqrt(m) eps (LAPACK gesvj's threshold:
 * the rounding floor of an m-term dot product). Sweeps run in a while loop until
 * every pair's |cos|, measured after the sweep by one product W W^T, is at most
 * 2 tol (a sweep that would rotate nothing is not run to find that out), at most
 * TPU_SVD_MAX_SWEEPS (Jacobi converges quadratically; random 128 x 128 matrices
 * need about 10 sweeps from the identity, a few from the preconditioned start).
 *
 * U: rows of W with S > eps^2 S_max are normalised; the others (exact rank
 * deficiency, the padding column) and, for full_matrices with m > n, the
 * missing m - n columns are completed to an orthonormal basis by Gram-Schmidt
 * against the coordinate vector least covered by the basis so far (run only
 * when some batch element needs it). A is scaled by 1 / max|A| first so that
 * squared norms cannot overflow. */
#include "svd.h"

#include <float.h>
#include <math.h>

#include "index.h"
#include "nn.h"
#include "qr.h"
#include "tridiag.h"

#define TPU_SVD_MAX_SWEEPS 20

/* max over every dim of x (0-d). */
static tpu_val_t sv_max_all(tpu_builder_t* b, tpu_val_t x) {
  int64_t d[TPU_MAX_RANK];
  int r = tpu_b_rank(b, x);
  for (int i = 0; i < r; i++) d[i] = i;
  return tpu_b_reduce(b, x, tpu_b_const(b, tpu_b_dtype(b, x), -INFINITY), r, d, "stablehlo.maximum");
}

typedef struct tpu_svd_ctx {
  double tol;  /* rotate pairs with |cos| above this */
  double stop; /* sweep while some |cos|, measured after a sweep, is above this */
  int64_t m;  /* rows hold a column of A in [0, m), then (if accumulated) V's */
} tpu_svd_ctx_t;

/* x's first m entries along the last dim: the columns of A without V's part. */
static tpu_val_t tpu_svd_head(tpu_builder_t* b, tpu_val_t x, int64_t m) {
  const tpu_aval_t* a = tpu_b_aval(b, x);
  return a->dims[a->rank - 1] == m ? x : tpu_mx_slice(b, x, a->rank - 1, 0, m);
}

/* Per pair (rows T[i], B[i], squared norms al[i], be[i]): the rotation
 * (c, s) that makes them orthogonal, (1, 0) when they already are to tol; t
 * (tan of the angle, for the norm update) and |cos| of their angle in *rel. */
static void tpu_svd_rotation(tpu_builder_t* b, tpu_val_t T, tpu_val_t B, tpu_val_t al, tpu_val_t be, double tol,
                             tpu_val_t* c, tpu_val_t* s, tpu_val_t* t, tpu_val_t* rel) {
  int last = tpu_b_rank(b, T) - 1;
  tpu_val_t ga = tpu_mx_sum(b, tpu_nn_mul(b, T, B), last);
  tpu_val_t norm = tpu_nn_mul(b, tpu_b_unary(b, "stablehlo.sqrt", al), tpu_b_unary(b, "stablehlo.sqrt", be));
  tpu_val_t aga = tpu_b_unary(b, "stablehlo.abs", ga);
  tpu_val_t rot = tpu_b_compare(b, "GT", aga, tpu_nn_mul(b, tpu_ops_like(b, norm, tol), norm));
  tpu_val_t pos = tpu_b_compare(b, "GT", norm, tpu_ops_like(b, norm, 0));
  *rel = tpu_b_select(b, pos, tpu_nn_div(b, aga, tpu_b_select(b, pos, norm, tpu_ops_like(b, norm, 1))), tpu_ops_like(b, norm, 0));
  /* Unrotated pairs may divide by g = 0 here; select drops those lanes. */
  tpu_val_t zeta = tpu_nn_div(b, tpu_nn_sub(b, be, al), tpu_nn_mul(b, tpu_ops_like(b, ga, 2), ga));
  tpu_val_t root = tpu_b_unary(b, "stablehlo.sqrt", tpu_nn_add(b, tpu_ops_like(b, zeta, 1), tpu_nn_mul(b, zeta, zeta)));
  tpu_val_t tt = tpu_nn_div(b, tpu_b_unary(b, "stablehlo.sign", zeta),
                        tpu_nn_add(b, tpu_b_unary(b, "stablehlo.abs", zeta), root));
  tt = tpu_b_select(b, tpu_b_compare(b, "EQ", zeta, tpu_ops_like(b, zeta, 0)), tpu_ops_like(b, tt, 1), tt);
  tpu_val_t cc = tpu_b_unary(b, "stablehlo.rsqrt", tpu_nn_add(b, tpu_ops_like(b, tt, 1), tpu_nn_mul(b, tt, tt)));
  *c = tpu_b_select(b, rot, cc, tpu_ops_like(b, cc, 1));
  *s = tpu_b_select(b, rot, tpu_nn_mul(b, cc, tt), tpu_ops_like(b, cc, 0));
  *t = tpu_nn_mul(b, tpu_b_select(b, rot, tt, tpu_ops_like(b, tt, 0)), ga); /* t g: the norms' change */
}

/* (T, B) <- (c T - s B, s T + c B), row i by (c[i], s[i]). */
static void tpu_svd_rotate(tpu_builder_t* b, tpu_val_t c, tpu_val_t s, tpu_val_t* T, tpu_val_t* B) {
  tpu_aval_t a = *tpu_b_aval(b, *T);
  tpu_val_t cm = tpu_mx_bcast_vec(b, c, &a, false), sm = tpu_mx_bcast_vec(b, s, &a, false);
  tpu_val_t t2 = tpu_nn_sub(b, tpu_nn_mul(b, cm, *T), tpu_nn_mul(b, sm, *B));
  *B = tpu_nn_add(b, tpu_nn_mul(b, sm, *T), tpu_nn_mul(b, cm, *B));
  *T = t2;
}

/* The round-robin move along dim `d`: T = [T0, B0, T1 .. T(h-2)],
 * B = [B1 .. B(h-1), T(h-1)]. */
static void tpu_svd_move(tpu_builder_t* b, tpu_val_t* T, tpu_val_t* B, int d) {
  tpu_aval_t a = *tpu_b_aval(b, *T);
  int64_t h = a.dims[d];
  if (h < 2) return;
  tpu_val_t t[3] = {tpu_mx_slice(b, *T, d, 0, 1), tpu_mx_slice(b, *B, d, 0, 1), tpu_mx_slice(b, *T, d, 1, h - 1)};
  tpu_val_t u[2] = {tpu_mx_slice(b, *B, d, 1, h), tpu_mx_slice(b, *T, d, h - 1, h)};
  *T = tpu_b_concat(b, h > 2 ? 3 : 2, t, d);
  *B = tpu_b_concat(b, 2, u, d);
}
/* The move of rows (columns of A, or of V). */
static void tpu_svd_next_pairs(tpu_builder_t* b, tpu_val_t* T, tpu_val_t* B) {
  tpu_svd_move(b, T, B, tpu_b_rank(b, *T) - 2);
}

/* One step. Carry: T, B (batch..., h, m [+ n2]: columns of A, then of V when
 * accumulated), off (0-d: the largest |cos| seen this sweep), TN, BN
 * (batch..., h: squared norms, updated as ||a_p||^2 - t g and ||a_q||^2 + t g
 * rather than recomputed: one dot product per pair, not three). */
static void tpu_svd_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_svd_ctx_t* cx = ctx;
  tpu_val_t c, s, tg, rel;
  tpu_svd_rotation(b, tpu_svd_head(b, in[0], cx->m), tpu_svd_head(b, in[1], cx->m), in[3], in[4], cx->tol, &c, &s,
                   &tg, &rel);
  out[2] = tpu_b_binary(b, "stablehlo.maximum", in[2], sv_max_all(b, rel));
  out[0] = in[0];
  out[1] = in[1];
  tpu_svd_rotate(b, c, s, &out[0], &out[1]);
  tpu_svd_next_pairs(b, &out[0], &out[1]);
  out[3] = tpu_b_binary(b, "stablehlo.maximum", tpu_nn_sub(b, in[3], tg), tpu_ops_like(b, tg, 0));
  out[4] = tpu_nn_add(b, in[4], tg);
  tpu_svd_move(b, &out[3], &out[4], tpu_b_rank(b, out[3]) - 1);
}

/* The largest |cos| between two of the rows T, B (batch..., h, m): the
 * rotation test of every pair at once, one product W W^T instead of a sweep
 * that would only find nothing left to rotate. */
static tpu_val_t tpu_svd_off(tpu_builder_t* b, tpu_val_t T, tpu_val_t B) {
  int r = tpu_b_rank(b, T);
  tpu_val_t tb[2] = {T, B};
  tpu_val_t W = tpu_b_concat(b, 2, tb, r - 2);
  int64_t bd[TPU_MAX_RANK], c = r - 1;
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  tpu_val_t G = tpu_b_dot_general(b, W, W, r - 2, bd, bd, 1, &c, &c, tpu_b_dtype(b, W));
  tpu_aval_t ga = *tpu_b_aval(b, G);
  tpu_val_t nd = tpu_b_unary(b, "stablehlo.sqrt", tpu_mx_diag(b, G));
  tpu_val_t nn = tpu_nn_mul(b, tpu_mx_bcast_vec(b, nd, &ga, false), tpu_mx_bcast_vec(b, nd, &ga, true));
  tpu_aval_t ia = tpu_mx_retype(&ga, TPU_I32);
  tpu_val_t off = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "NE", tpu_b_iota(b, &ia, r - 2), tpu_b_iota(b, &ia, r - 1)),
                               tpu_b_compare(b, "GT", nn, tpu_ops_like(b, nn, 0)));
  tpu_val_t rel = tpu_b_select(b, off, tpu_nn_div(b, tpu_b_unary(b, "stablehlo.abs", G), tpu_b_select(b, off, nn, tpu_ops_like(b, nn, 1))),
                               tpu_ops_like(b, G, 0));
  return sv_max_all(b, rel);
}

/* One sweep: n - 1 steps, norms recomputed (no drift); then off, the largest
 * |cos| left, so that the loop stops as soon as nothing is left to rotate. */
static void tpu_svd_sweep(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_svd_ctx_t* cx = ctx;
  int last = tpu_b_rank(b, in[0]) - 1;
  tpu_val_t t = tpu_svd_head(b, in[0], cx->m), u = tpu_svd_head(b, in[1], cx->m);
  tpu_val_t init[5] = {in[0], in[1], tpu_b_const(b, tpu_b_dtype(b, in[2]), 0), tpu_mx_sum(b, tpu_nn_mul(b, t, t), last),
                       tpu_mx_sum(b, tpu_nn_mul(b, u, u), last)};
  const tpu_aval_t* a = tpu_b_aval(b, in[0]);
  tpu_val_t res[5];
  tpu_mx_for(b, 2 * a->dims[a->rank - 2] - 1, 5, init, tpu_svd_step, ctx, res);
  out[0] = res[0];
  out[1] = res[1];
  out[2] = tpu_svd_off(b, tpu_svd_head(b, res[0], cx->m), tpu_svd_head(b, res[1], cx->m));
}

static tpu_val_t tpu_svd_unconverged(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)k;
  const tpu_svd_ctx_t* cx = ctx;
  return tpu_b_compare(b, "GT", in[2], tpu_b_const(b, tpu_b_dtype(b, in[2]), cx->stop));
}

/* From this many columns Jacobi starts from A V0, V0 the eigenvectors of A^T A
 * from tridiag.c: its columns are then nearly orthogonal, and the sweeps drop
 * from about 10 to a few. The product A V0
 * perturbs each column by eps ||A||, so small singular values keep an absolute
 * accuracy of eps ||A|| (as LAPACK's gesdd) rather than Jacobi's relative one. */
#define TPU_SVD_PRECOND_MIN 32

/* *X = (A V0)^T (batch..., n, m) and *V0T = V0^T for the scaled A (batch..., m, n). */
static void tpu_svd_precondition(tpu_builder_t* b, tpu_val_t A, tpu_val_t* X, tpu_val_t* V0T) {
  tpu_val_t G = tpu_mx_matmul(b, tpu_mx_mT(b, A), A);
  tpu_val_t V0 = tpu_tridiag_eigvecs(b, G); /* |G| <= m: A is scaled to max |A| <= 1 */
  *V0T = tpu_mx_mT(b, V0);
  *X = tpu_mx_matmul(b, *V0T, tpu_mx_mT(b, A));
}

/* Jacobi on A (batch..., m, n), m >= n >= 1: rows W (batch..., n2, m) with
 * W = (A V)^T, and (with_v) Vr = V^T (batch..., n2, n2); n2 = n rounded up to
 * even, the extra row of W zero. V^T's rows ride along with W's (one row
 * [column of A | column of V] per column), rotated and moved together. */
static void tpu_svd_jacobi(tpu_builder_t* b, tpu_val_t A, bool with_v, tpu_val_t* W, tpu_val_t* Vr) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  int r = a.rank;
  int64_t m = a.dims[r - 2], n = a.dims[r - 1], n2 = n + n % 2, h = n2 / 2;
  tpu_val_t X = tpu_mx_mT(b, A);
  tpu_val_t V0T = TPU_NOVAL;
  if (n >= TPU_SVD_PRECOND_MIN) tpu_svd_precondition(b, A, &X, &V0T);
  if (n2 != n) {
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    hi[r - 2] = 1;
    X = tpu_b_pad(b, X, tpu_b_const(b, a.dtype, 0), lo, hi, NULL);
  }
  if (with_v) {
    tpu_aval_t va = a;
    va.dims[r - 2] = va.dims[r - 1] = n2;
    /* V0^T, or I; with the padding column's own unit vector */
    tpu_val_t V = V0T == TPU_NOVAL ? tpu_mx_eye(b, &va) : n2 != n ? tpu_mx_pad1(b, V0T, true) : V0T;
    tpu_val_t xv[2] = {X, V};
    X = tpu_b_concat(b, 2, xv, r - 1);
  }
  /* tol is the rounding floor of an m-term dot product, so the product W W^T
   * measures |cos| only to about tol itself: stopping at 2 tol keeps a sweep
   * from running on for pairs whose measured |cos| is that noise */
  double tol = sqrt((double)m) * tpu_mx_eps(a.dtype);
  tpu_svd_ctx_t cx = {tol, 2 * tol, m};
  tpu_val_t init[3] = {tpu_mx_slice(b, X, r - 2, 0, h), tpu_mx_slice(b, X, r - 2, h, n2), tpu_b_const(b, a.dtype, 1)};
  tpu_val_t res[3];
  tpu_mx_while(b, TPU_SVD_MAX_SWEEPS, 3, init, tpu_svd_unconverged, tpu_svd_sweep, &cx, res, NULL);
  X = tpu_b_concat(b, 2, res, r - 2);
  *W = tpu_svd_head(b, X, m);
  if (with_v) *Vr = tpu_mx_slice(b, X, r - 1, m, m + n2);
}

/* ---------------------------------------------------------- completion of U */

/* Q^T (Q v) for rows Q (batch..., k, m) and vectors v (batch..., m). */
static tpu_val_t tpu_svd_project(tpu_builder_t* b, tpu_val_t Q, tpu_val_t v) {
  int r = tpu_b_rank(b, Q);
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  int64_t qc = r - 1, vc = r - 2, qk = r - 2;
  tpu_dtype_t t = tpu_b_dtype(b, Q);
  tpu_val_t qv = tpu_b_dot_general(b, Q, v, r - 2, bd, bd, 1, &qc, &vc, t);
  return tpu_b_dot_general(b, qv, Q, r - 2, bd, bd, 1, &vc, &qk, t);
}

/* Row k of Q, if marked bad, becomes the unit vector orthogonal to every row of
 * Q built from e_i, i the coordinate least covered by Q's rows (||(I - Q^T Q) e_i||^2
 * = 1 - sum_j Q[j, i]^2 >= 1 - rank/m > 0). Carry: Q, bad (batch..., k) i1. */
static void tpu_svd_complete_row(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t Q = in[0], bad = in[1];
  tpu_aval_t qa = *tpu_b_aval(b, Q);
  int r = qa.rank;
  tpu_val_t cover = tpu_mx_sum(b, tpu_nn_mul(b, Q, Q), r - 2);
  tpu_val_t i;
  tpu_b_argreduce(b, cover, r - 2, false, NULL, &i);
  tpu_aval_t va = *tpu_b_aval(b, cover), iva = tpu_mx_retype(&va, TPU_I64);
  tpu_val_t e = tpu_b_convert(b, tpu_b_compare(b, "EQ", tpu_b_iota(b, &iva, r - 2), tpu_mx_bcast_batch(b, i, &iva)),
                              qa.dtype);
  tpu_val_t v = tpu_nn_sub(b, e, tpu_svd_project(b, Q, e));
  v = tpu_nn_sub(b, v, tpu_svd_project(b, Q, v)); /* twice is enough (Kahan-Parlett) */
  v = tpu_nn_mul(b, v, tpu_mx_bcast_batch(b, tpu_b_unary(b, "stablehlo.rsqrt", tpu_mx_sum(b, tpu_nn_mul(b, v, v), r - 2)),
                                      &va));
  tpu_aval_t ia = tpu_mx_retype(&qa, TPU_I32);
  tpu_val_t at_k = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, r - 2), tpu_b_broadcast_in_dim(b, k, r, qa.dims, NULL));
  tpu_aval_t pa = tpu_mx_retype(&qa, TPU_BOOL);
  tpu_val_t here = tpu_b_binary(b, "stablehlo.and", at_k, tpu_mx_bcast_batch(b, tpu_mx_take(b, bad, r - 2, k), &pa));
  out[0] = tpu_b_select(b, here, tpu_mx_bcast_vec(b, v, &qa, true), Q);
  out[1] = bad;
}

static void tpu_svd_complete_all(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_aval_t* a = tpu_b_aval(b, in[0]);
  tpu_mx_for(b, a->dims[a->rank - 2], 2, in, tpu_svd_complete_row, ctx, out);
}

static tpu_val_t tpu_svd_any_bad(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx;
  (void)k;
  tpu_val_t n = sv_max_all(b, tpu_b_convert(b, in[1], TPU_I32));
  return tpu_b_compare(b, "GT", n, tpu_b_const_i(b, TPU_I32, 0));
}

/* Rows Q (batch..., k, m), orthonormal where !bad and zero where bad, completed
 * to k orthonormal rows (only if some batch element has a bad row). */
static tpu_val_t tpu_svd_complete(tpu_builder_t* b, tpu_val_t Q, tpu_val_t bad) {
  tpu_val_t init[2] = {Q, bad}, res[2];
  tpu_mx_while(b, 1, 2, init, tpu_svd_any_bad, tpu_svd_complete_all, NULL, res, NULL);
  return res[0];
}

/* ------------------------------------------------------------- assembly */

/* P @ x for the permutation matrix P[k, j] = (idx[k] == j), idx (batch..., n) i64. */
static tpu_val_t tpu_svd_permute_rows(tpu_builder_t* b, tpu_val_t idx, tpu_val_t x) {
  tpu_aval_t ia = *tpu_b_aval(b, idx), pa = ia;
  pa.dims[pa.rank++] = ia.dims[ia.rank - 1];
  tpu_val_t hit = tpu_b_compare(b, "EQ", tpu_mx_bcast_vec(b, idx, &pa, false), tpu_b_iota(b, &pa, pa.rank - 1));
  return tpu_mx_matmul(b, tpu_b_convert(b, hit, tpu_b_dtype(b, x)), x);
}

static tpu_svd_t tpu_svd_tall(tpu_builder_t* b, tpu_val_t A, bool with_uv, bool full);

/* Rows per column from which a tall A is first reduced by QR (LAPACK's gesvd
 * does the same from about 1.6): Jacobi then rotates n x n columns, not m x n. */
#define TPU_SVD_QR_RATIO 2

/* The SVD of the scaled tall As (batch..., m, n), m >= 2n, through As = Q R and
 * R = U_R S Vh: U = Q U_R (Drmac-Veselic's preconditioning; QR is backward
 * stable, so the singular values keep Jacobi's accuracy). With full, U's last
 * m - n columns are Q's complement. S is scaled back by `scale`. */
static tpu_svd_t tpu_svd_through_qr(tpu_builder_t* b, tpu_val_t As, tpu_val_t scale, bool with_uv, bool full) {
  tpu_aval_t a = *tpu_b_aval(b, As);
  int r = a.rank;
  int64_t m = a.dims[r - 2], n = a.dims[r - 1];
  tpu_val_t V, tau;
  tpu_qr_geqrf(b, As, &V, &tau);
  tpu_val_t Rb = tpu_mx_block(b, V, n, n);
  tpu_aval_t ra = *tpu_b_aval(b, Rb);
  tpu_svd_t f = tpu_svd_tall(b, tpu_b_select(b, tpu_mx_tri_pred(b, &ra, false), Rb, tpu_b_full(b, &ra, 0)),
                             with_uv, false);
  tpu_aval_t sa = *tpu_b_aval(b, f.S);
  f.S = tpu_nn_mul(b, f.S, tpu_mx_bcast_batch(b, scale, &sa));
  if (!with_uv || !tpu_b_ok(b)) return f;
  tpu_val_t Q = tpu_qr_orgqr(b, V, tau, full ? m : n);
  tpu_val_t U = tpu_mx_matmul(b, tpu_mx_slice(b, Q, r - 1, 0, n), f.U);
  if (full) {
    tpu_val_t parts[2] = {U, tpu_mx_slice(b, Q, r - 1, n, m)};
    U = tpu_b_concat(b, 2, parts, r - 1);
  }
  f.U = U;
  return f;
}

/* The SVD of A (batch..., m, n), m >= n >= 1; with_uv: U has m columns if
 * full, else n. */
static tpu_svd_t tpu_svd_tall(tpu_builder_t* b, tpu_val_t A, bool with_uv, bool full) {
  tpu_svd_t f = {TPU_NOVAL, TPU_NOVAL, TPU_NOVAL};
  tpu_aval_t a = *tpu_b_aval(b, A);
  int r = a.rank;
  int64_t m = a.dims[r - 2], n = a.dims[r - 1];
  tpu_aval_t ba = tpu_mx_drop(&a, 2);
  /* scale = max|A| (1 for zero matrices): squared column norms cannot overflow */
  int64_t md[2] = {r - 2, r - 1};
  tpu_val_t mx = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.abs", A), tpu_b_const(b, a.dtype, 0), 2, md,
                              "stablehlo.maximum");
  tpu_val_t scale = tpu_b_select(b, tpu_b_compare(b, "GT", mx, tpu_b_full(b, &ba, 0)), mx, tpu_b_full(b, &ba, 1));
  tpu_val_t As = tpu_nn_div(b, A, tpu_mx_bcast_batch(b, scale, &a));
  if (m >= TPU_SVD_QR_RATIO * n) return tpu_svd_through_qr(b, As, scale, with_uv, full);
  tpu_val_t W, Vr = TPU_NOVAL;
  tpu_svd_jacobi(b, As, with_uv, &W, &Vr);
  tpu_val_t S = tpu_b_unary(b, "stablehlo.sqrt", tpu_mx_sum(b, tpu_nn_mul(b, W, W), r - 1));
  tpu_val_t Ss, idx;
  /* stable: the padding column (last, S = 0) stays behind any other zero */
  tpu_idx_sort(b, S, r - 2, true, &Ss, &idx);
  tpu_val_t S1 = tpu_mx_slice(b, Ss, r - 2, 0, n);
  tpu_aval_t va = *tpu_b_aval(b, S1);
  f.S = tpu_nn_mul(b, S1, tpu_mx_bcast_batch(b, scale, &va));
  if (!with_uv || !tpu_b_ok(b)) return f;
  tpu_val_t Vs = tpu_svd_permute_rows(b, idx, Vr);
  f.Vh = tpu_mx_slice(b, tpu_mx_slice(b, Vs, r - 2, 0, n), r - 1, 0, n);
  tpu_val_t Ws = tpu_mx_slice(b, tpu_svd_permute_rows(b, idx, W), r - 2, 0, n);
  /* rows with S <= eps^2 S_max (exact zeros: rank deficiency) are rebuilt */
  tpu_val_t smax = tpu_mx_take(b, S1, r - 2, tpu_b_const_i(b, TPU_I32, 0));
  double e2 = tpu_mx_eps(a.dtype) * tpu_mx_eps(a.dtype);
  tpu_val_t bad = tpu_b_compare(b, "LE", S1, tpu_nn_mul(b, tpu_mx_bcast_batch(b, smax, &va), tpu_b_full(b, &va, e2)));
  tpu_val_t den = tpu_b_select(b, bad, tpu_b_full(b, &va, 1), S1);
  tpu_aval_t wa = *tpu_b_aval(b, Ws), pa = tpu_mx_retype(&wa, TPU_BOOL);
  tpu_val_t Q = tpu_b_select(b, tpu_mx_bcast_vec(b, bad, &pa, false),
                             tpu_b_full(b, &wa, 0), tpu_nn_div(b, Ws, tpu_mx_bcast_vec(b, den, &wa, false)));
  if (full && m > n) { /* the complement: m - n more rows, all to be built */
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    hi[r - 2] = m - n;
    Q = tpu_b_pad(b, Q, tpu_b_const(b, a.dtype, 0), lo, hi, NULL);
    bad = tpu_b_pad(b, bad, tpu_b_const_i(b, TPU_BOOL, 1), lo, hi, NULL); /* (batch..., n): dim r-2 too */
  }
  f.U = tpu_mx_mT(b, tpu_svd_complete(b, Q, bad));
  return f;
}

/* f32/f64 input of at least 2 dims; ATen's messages. */
static bool tpu_svd_check(tpu_builder_t* b, const tpu_aval_t* a) {
  return tpu_mx_check_input(b, a, "linalg.svd", "linalg_svd_tpu", false);
}

/* U and Vh when min(m, n) = 0: ATen's identity (full) or empty factors. */
static void tpu_svd_empty(tpu_builder_t* b, const tpu_aval_t* a, bool full, tpu_svd_t* f) {
  int r = a->rank;
  int64_t m = a->dims[r - 2], n = a->dims[r - 1];
  tpu_aval_t ua = *a, va = *a, sa = tpu_mx_drop(a, 1);
  ua.dims[r - 1] = full ? m : 0;
  va.dims[r - 2] = full ? n : 0;
  sa.dims[r - 2] = 0;
  f->S = tpu_b_full(b, &sa, 0);
  f->U = full ? tpu_mx_eye(b, &ua) : tpu_b_full(b, &ua, 0);
  f->Vh = full ? tpu_mx_eye(b, &va) : tpu_b_full(b, &va, 0);
}

tpu_svd_t tpu_svd_factor(tpu_builder_t* b, tpu_op_t* op, tpu_val_t A, bool uv, bool full) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  int64_t m = a.dims[a.rank - 2], n = a.dims[a.rank - 1];
  tpu_svd_t f;
  if (m == 0 || n == 0) {
    tpu_svd_empty(b, &a, full, &f);
    return f;
  }
  tpu_mx_check_finite(b, op, A, "linalg.svd");
  if (m >= n) return tpu_svd_tall(b, A, uv, full);
  /* A^T = U' S Vh'  =>  A = Vh'^T S U'^T */
  tpu_svd_t t = tpu_svd_tall(b, tpu_mx_mT(b, A), uv, full);
  f.S = t.S;
  f.U = uv ? tpu_mx_mT(b, t.Vh) : TPU_NOVAL;
  f.Vh = uv ? tpu_mx_mT(b, t.U) : TPU_NOVAL;
  return f;
}

/* _linalg_svd(A, full_matrices=False, compute_uv=True, *, driver=None) -> (U, S, Vh) */
static tpu_status_t* tpu_lower__linalg_svd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_svd_check(b, &a)) return NULL;
  if (tpu_op_kind(op, 3) != TPU_ARG_NONE)
    return TPU_STATUS(TPU_INVALID_ARGUMENT,
                      "torch.linalg.svd: keyword argument `driver=` is only supported on CUDA inputs with cuSOLVER "
                      "backend.");
  bool full = tpu_op_bool(op, 1, false), uv = tpu_op_bool(op, 2, true);
  tpu_svd_t f = tpu_svd_factor(b, op, tpu_op_tensor(b, op, 0), uv, full);
  if (!uv) { /* ATen returns empty U and Vh */
    int64_t zero = 0;
    tpu_aval_t ea = tpu_aval_make(a.dtype, 1, &zero);
    f.U = tpu_b_full(b, &ea, 0);
    f.Vh = tpu_b_full(b, &ea, 0);
  }
  outs[0] = f.U;
  outs[1] = f.S;
  outs[2] = f.Vh;
  *nouts = 3;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_svd[] = {
    {"_linalg_svd", tpu_lower__linalg_svd},
    {"linalg_lstsq", tpu_lower_linalg_lstsq},
    {NULL, NULL},
};
