/* Lowerings: the eigendecomposition of general matrices, linalg_eig and
 * _linalg_eigvals (torch.linalg.eig / eigvals).
 *
 * LAPACK dgeev's path:
 * 0. Balancing (dgebal, eig_balance.c), undone on the eigenvectors at the end.
 * 1. Householder reduction to upper Hessenberg form, H = Q^T A Q (dgehd2); Z = Q.
 * 2. dlahqr's Francis double-shift QR iteration on H, Z accumulated, down to
 *    the real Schur form T = Z^T A Z (1 x 1 and 2 x 2 diagonal blocks): its
 *    deflation test (Ahues & Tisseur), its shifts, its exceptional shifts after
 *    10 and 20 iterations without a deflation, its limit of 30 max(10, n)
 *    iterations per eigenvalue (past which the op fails, as LAPACK's info > 0
 *    makes ATen fail). Batched: each matrix keeps its own window [l, i] and
 *    counters. One iteration of the outer stablehlo.while deflates or chases
 *    one bulge in every matrix; the chase is an inner loop over the union of
 *    the windows, where a matrix outside its own applies the identity. H is
 *    padded by two zero rows and columns so the 3-row slices of the chase
 *    always fit.
 * 3. dlanv2 on each remaining 2 x 2 block (eig_vectors.c): equal diagonal
 *    entries for a complex pair (wr +- i wi), two 1 x 1 blocks for real
 *    ones. The eigenvalues come in the order of T's diagonal, as LAPACK's do
 *    (for n <= 75 dhseqr is dlahqr): real ones exactly real, pairs exactly
 *    conjugate, positive imaginary first.
 * 4. Eigenvectors (linalg_eig, eig_vectors.c): each 2 x 2 block is made
 *    triangular by a complex rotation, the complex triangular T is solved by
 *    back substitution for all eigenvalues at once (ztrevc: a pivot below
 *    eps |lambda| is raised to it, a column is scaled down before it would
 *    overflow), V = Z X unbalanced, with columns of norm 1. As in dgeev, the
 *    vector of a real eigenvalue is real, those of a pair are conjugate, and
 *    a complex one is turned so that its largest component is real.
 *
 * Complex input takes zgeev's path: the same balancing and Hessenberg form
 * (zlarfg's reflectors leave a real subdiagonal), then zlahqr's single-shift
 * iteration (eig_complex.c) straight to a triangular Schur form, whose
 * diagonal holds the eigenvalues; eigenvectors as in 4. */
#include <float.h>
#include <math.h>

#include "check.h"
#include "eig.h"
#include "nn.h"

/* ------------------------------------------------------------- small helpers */

tpu_val_t tpu_eig_abs(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.abs", x); }
tpu_val_t tpu_eig_max(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_binary(b, "stablehlo.maximum", x, y);
}
tpu_val_t tpu_eig_min(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_binary(b, "stablehlo.minimum", x, y);
}
tpu_val_t tpu_eig_sqrt(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.sqrt", x); }
tpu_val_t tpu_eig_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.and", x, y); }
tpu_val_t tpu_eig_or(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.or", x, y); }
tpu_val_t tpu_eig_not(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.not", x); }
tpu_val_t tpu_eig_cmp(tpu_builder_t* b, const char* dir, tpu_val_t x, tpu_val_t y) {
  return tpu_b_compare(b, dir, x, y);
}
/* sqrt(x^2 + y^2) without overflow (dlapy2). */
tpu_val_t tpu_eig_hypot(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t ax = tpu_eig_abs(b, x), ay = tpu_eig_abs(b, y);
  tpu_val_t w = tpu_eig_max(b, ax, ay), z = tpu_eig_min(b, ax, ay);
  tpu_val_t zero = tpu_eig_cmp(b, "EQ", w, tpu_ops_like(b, w, 0));
  tpu_val_t q = tpu_nn_div(b, z, tpu_b_select(b, zero, tpu_ops_like(b, w, 1), w));
  return tpu_nn_mul(b, w, tpu_eig_sqrt(b, tpu_nn_addc(b, tpu_nn_mul(b, q, q), 1)));
}
/* x / y where y != 0, else x / 1 (the lane is masked later). */
tpu_val_t tpu_eig_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  tpu_val_t zero = tpu_eig_cmp(b, "EQ", y, tpu_ops_like(b, y, 0));
  return tpu_nn_div(b, x, tpu_b_select(b, zero, tpu_ops_like(b, y, 1), y));
}
/* A per-batch i32 value (B) broadcast like k (0-d). */
tpu_val_t tpu_eig_bk(tpu_builder_t* b, tpu_val_t k, int64_t B) {
  return tpu_b_broadcast_in_dim(b, k, 1, &B, NULL);
}
/* i32 iota along dim of shape like x. */
tpu_val_t tpu_eig_iota(tpu_builder_t* b, tpu_val_t x, int dim) {
  tpu_aval_t a = tpu_mx_retype(tpu_b_aval(b, x), TPU_I32);
  return tpu_b_iota(b, &a, dim);
}
/* x (B, N) at a per-batch index (B) i32; 0 where the index is outside [0, N). */
tpu_val_t tpu_eig_at(tpu_builder_t* b, tpu_val_t x, tpu_val_t idx) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t hit = tpu_eig_cmp(b, "EQ", tpu_eig_iota(b, x, 1), tpu_mx_bcast_batch(b, idx, &a));
  return tpu_mx_pick(b, hit, x, 1);
}
/* y[k] = x[k + s] along dim 1 of x (B, N), 0 past the ends. */
tpu_val_t tpu_eig_shift(tpu_builder_t* b, tpu_val_t x, int64_t s) {
  int64_t N = tpu_b_aval(b, x)->dims[1], lo[2] = {0, 0}, hi[2] = {0, 0};
  tpu_val_t y = tpu_mx_slice(b, x, 1, s > 0 ? s : 0, s > 0 ? N : N + s);
  (s > 0 ? hi : lo)[1] = s > 0 ? s : -s;
  return tpu_b_pad(b, y, tpu_b_const(b, tpu_b_dtype(b, x), 0), lo, hi, NULL);
}
/* H's diagonal d[k] = H(k, k), sub[k] = H(k, k-1) and sup[k] = H(k-1, k) (0 at k = 0), each (B, N). */
void tpu_eig_diagonals(tpu_builder_t* b, tpu_val_t H, tpu_val_t* d, tpu_val_t* sub, tpu_val_t* sup) {
  int64_t N = tpu_b_aval(b, H)->dims[1], lo[2] = {0, 1}, hi[2] = {0, 0};
  tpu_val_t z = tpu_b_const(b, tpu_b_dtype(b, H), 0);
  *d = tpu_mx_diag(b, H);
  *sub = tpu_b_pad(b, tpu_mx_diag(b, tpu_mx_slice(b, tpu_mx_slice(b, H, 1, 1, N), 2, 0, N - 1)), z, lo, hi, NULL);
  *sup = tpu_b_pad(b, tpu_mx_diag(b, tpu_mx_slice(b, tpu_mx_slice(b, H, 1, 0, N - 1), 2, 1, N)), z, lo, hi, NULL);
}
tpu_val_t tpu_eig_reflect(tpu_builder_t* b, tpu_val_t x, tpu_val_t v, tpu_val_t tau, int dim) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t bd = 0, cx = dim, cv = 1;
  tpu_val_t vc = tpu_ops_conj(b, v);
  /* rows: s = v^H x (B, C); columns: s = x v (B, R) */
  tpu_val_t s = tpu_b_dot_general(b, x, dim == 1 ? vc : v, 1, &bd, &bd, 1, &cx, &cv, a.dtype);
  tpu_aval_t va = *tpu_b_aval(b, v);
  tpu_val_t tv = tpu_nn_mul(b, dim == 1 ? v : vc, tpu_mx_bcast_batch(b, tau, &va));
  tpu_val_t outer = dim == 1 ? tpu_nn_mul(b, tpu_mx_bcast_vec(b, tv, &a, false), tpu_mx_bcast_vec(b, s, &a, true))
                             : tpu_nn_mul(b, tpu_mx_bcast_vec(b, s, &a, false), tpu_mx_bcast_vec(b, tv, &a, true));
  return tpu_nn_sub(b, x, outer);
}

tpu_qr_reflector_t tpu_eig_larfg(tpu_builder_t* b, tpu_val_t x, tpu_val_t at, tpu_val_t below) {
  if (!tpu_dtype_is_complex(tpu_b_dtype(b, x))) return tpu_qr_larfg(b, x, at, below);
  tpu_aval_t vec = *tpu_b_aval(b, x);
  tpu_val_t zero = tpu_b_full(b, &vec, 0);
  tpu_val_t xb = tpu_b_select(b, below, x, zero), alpha = tpu_mx_pick(b, at, x, 1);
  tpu_val_t ax = tpu_eig_abs(b, xb), ar = tpu_ops_part(b, alpha, false), ai = tpu_ops_part(b, alpha, true);
  tpu_val_t xn2 = tpu_mx_sum(b, tpu_nn_mul(b, ax, ax), 1);
  tpu_val_t rz = tpu_ops_like(b, ar, 0);
  /* beta = -sign(alphr) ||(alpha, x)||, real; tau = ((beta - alphr) - i alphi) / beta */
  tpu_val_t norm = tpu_eig_sqrt(b, tpu_nn_add(b, tpu_nn_add(b, tpu_nn_mul(b, ar, ar), tpu_nn_mul(b, ai, ai)), xn2));
  tpu_val_t beta = tpu_b_select(b, tpu_eig_cmp(b, "GE", ar, rz), tpu_b_unary(b, "stablehlo.negate", norm), norm);
  tpu_qr_reflector_t h;
  h.live = tpu_eig_or(b, tpu_eig_cmp(b, "GT", xn2, rz), tpu_eig_cmp(b, "NE", ai, rz));
  tpu_val_t bs = tpu_b_select(b, h.live, beta, tpu_ops_like(b, beta, 1));
  tpu_val_t tau = tpu_ops_complex(b, tpu_nn_div(b, tpu_nn_sub(b, bs, ar), bs), tpu_nn_div(b, tpu_b_unary(b, "stablehlo.negate", ai), bs));
  tpu_val_t cz = tpu_ops_complex(b, rz, rz);
  h.tau = tpu_b_select(b, h.live, tau, cz);
  tpu_val_t den = tpu_b_select(b, h.live, tpu_nn_sub(b, alpha, tpu_ops_complex(b, bs, rz)), tpu_ops_complex(b, tpu_ops_like(b, ar, 1), rz));
  h.v = tpu_b_select(b, at, tpu_b_full(b, &vec, 1), tpu_nn_div(b, xb, tpu_mx_bcast_batch(b, den, &vec)));
  h.beta = tpu_b_select(b, h.live, tpu_ops_complex(b, beta, rz), alpha);
  return h;
}

/* ------------------------------------------------------ 1. Hessenberg form */

/* Step k of dgehd2. Carry: H (B, N, N), Z (B, n, N). */
static void tpu_eig_hess_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_eig_ctx_t* c = ctx;
  tpu_val_t H = in[0];
  tpu_aval_t m = *tpu_b_aval(b, H);
  tpu_val_t x = tpu_mx_take(b, H, 2, k); /* column k, (B, N) */
  tpu_val_t idx = tpu_eig_iota(b, x, 1), k1 = tpu_eig_bk(b, tpu_nn_add(b, k, tpu_b_const_i(b, TPU_I32, 1)), m.dims[0]);
  tpu_aval_t xa = *tpu_b_aval(b, x);
  k1 = tpu_mx_bcast_batch(b, k1, &xa);
  tpu_val_t at = tpu_eig_cmp(b, "EQ", idx, k1), below = tpu_eig_cmp(b, "GT", idx, k1);
  tpu_qr_reflector_t h = tpu_eig_larfg(b, x, at, below);
  H = tpu_eig_reflect(b, H, h.v, tpu_ops_conj(b, h.tau), 1); /* H^H from the left, H from the right */
  H = tpu_eig_reflect(b, H, h.v, h.tau, 2);
  /* column k is exactly (.., beta, 0, ..) below the diagonal */
  tpu_val_t ri = tpu_eig_iota(b, H, 1), ci = tpu_eig_iota(b, H, 2);
  tpu_val_t oncol = tpu_eig_cmp(b, "EQ", ci, tpu_b_broadcast_in_dim(b, k, m.rank, m.dims, NULL));
  tpu_val_t k1m = tpu_mx_bcast_vec(b, k1, &m, false);
  tpu_val_t col = tpu_b_select(b, tpu_eig_cmp(b, "EQ", ri, k1m), tpu_mx_bcast_batch(b, h.beta, &m), tpu_b_full(b, &m, 0));
  out[0] = tpu_b_select(b, tpu_eig_and(b, oncol, tpu_eig_cmp(b, "GE", ri, k1m)), col, H);
  out[1] = c->vectors ? tpu_eig_reflect(b, in[1], h.v, h.tau, 2) : in[1];
}

/* -------------------------------------------------- 2. the QR iteration */

/* dlahqr's search for a negligible subdiagonal entry H(k, k-1), 1 <= k <= i:
 * the largest such k, else 0 (the window's top l). */
tpu_val_t tpu_eig_deflation_point(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub,
                                         tpu_val_t sup, tpu_val_t i) {
  tpu_val_t h = tpu_mx_cabs1(b, sub), dm1 = tpu_eig_shift(b, d, -1), ad = tpu_mx_cabs1(b, d);
  tpu_val_t tst = tpu_nn_add(b, tpu_mx_cabs1(b, dm1), ad);
  tpu_val_t around = tpu_nn_add(b, tpu_mx_cabs1(b, tpu_eig_shift(b, sub, -1)), tpu_mx_cabs1(b, tpu_eig_shift(b, sub, 1)));
  tst = tpu_b_select(b, tpu_eig_cmp(b, "EQ", tst, tpu_ops_like(b, tst, 0)), tpu_nn_add(b, tst, around), tst);
  tpu_val_t asup = tpu_mx_cabs1(b, sup), ab = tpu_eig_max(b, h, asup), ba = tpu_eig_min(b, h, asup);
  tpu_val_t diff = tpu_mx_cabs1(b, tpu_nn_sub(b, dm1, d));
  tpu_val_t aa = tpu_eig_max(b, ad, diff), bb = tpu_eig_min(b, ad, diff), s = tpu_nn_add(b, aa, ab);
  tpu_val_t lhs = tpu_nn_mul(b, ba, tpu_eig_div(b, ab, s));
  tpu_val_t rhs = tpu_eig_max(b, tpu_ops_like(b, s, c->smlnum), tpu_nn_mulc(b, tpu_nn_mul(b, bb, tpu_eig_div(b, aa, s)), c->ulp));
  tpu_val_t small = tpu_eig_or(b, tpu_eig_cmp(b, "LE", h, tpu_ops_like(b, h, c->smlnum)),
                               tpu_eig_and(b, tpu_eig_cmp(b, "LE", h, tpu_nn_mulc(b, tst, c->ulp)),
                                           tpu_eig_cmp(b, "LE", lhs, rhs)));
  tpu_val_t idx = tpu_eig_iota(b, d, 1);
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  tpu_val_t valid = tpu_eig_and(b, tpu_eig_cmp(b, "GE", idx, tpu_b_full(b, &ia, 1)),
                                tpu_eig_cmp(b, "LE", idx, tpu_mx_bcast_batch(b, i, &ia)));
  int64_t last = 1;
  return tpu_b_reduce(b, tpu_b_select(b, tpu_eig_and(b, small, valid), idx, tpu_b_full(b, &ia, 0)),
                      tpu_b_const_i(b, TPU_I32, 0), 1, &last, "stablehlo.maximum");
}

/* dlahqr's shifts for window [l, i] after kdefl iterations without a
 * deflation: the double shift is rtr +- i rti (a real double shift repeats the
 * eigenvalue of the trailing 2 x 2 block nearer its last entry). */
static void tpu_eig_shifts(tpu_builder_t* b, tpu_val_t d, tpu_val_t sub, tpu_val_t sup, tpu_val_t i, tpu_val_t l,
                           tpu_val_t kdefl, tpu_val_t* rtr, tpu_val_t* rti) {
  tpu_val_t one = tpu_ops_like(b, i, 1), two = tpu_nn_add(b, one, one);
  tpu_val_t im1 = tpu_nn_sub(b, i, one), l1 = tpu_nn_add(b, l, one), l2 = tpu_nn_add(b, l, two);
  tpu_val_t di = tpu_eig_at(b, d, i), si = tpu_eig_at(b, sub, i);
  tpu_val_t rem20 = tpu_b_binary(b, "stablehlo.remainder", kdefl, tpu_ops_like(b, kdefl, 20));
  tpu_val_t rem10 = tpu_b_binary(b, "stablehlo.remainder", kdefl, tpu_ops_like(b, kdefl, 10));
  tpu_val_t at_i = tpu_eig_cmp(b, "EQ", rem20, tpu_ops_like(b, rem20, 0));
  tpu_val_t exc = tpu_eig_cmp(b, "EQ", rem10, tpu_ops_like(b, rem10, 0));
  /* exceptional: h11 = h22 = 3/4 s + H(i,i) (or H(l,l)), h12 = -0.4375 s, h21 = s */
  tpu_val_t se = tpu_b_select(b, at_i, tpu_nn_add(b, tpu_eig_abs(b, si), tpu_eig_abs(b, tpu_eig_at(b, sub, im1))),
                              tpu_nn_add(b, tpu_eig_abs(b, tpu_eig_at(b, sub, l1)), tpu_eig_abs(b, tpu_eig_at(b, sub, l2))));
  tpu_val_t ex11 = tpu_nn_add(b, tpu_nn_mulc(b, se, 0.75), tpu_b_select(b, at_i, di, tpu_eig_at(b, d, l)));
  tpu_val_t h11 = tpu_b_select(b, exc, ex11, tpu_eig_at(b, d, im1));
  tpu_val_t h12 = tpu_b_select(b, exc, tpu_nn_mulc(b, se, -0.4375), tpu_eig_at(b, sup, i));
  tpu_val_t h21 = tpu_b_select(b, exc, se, si), h22 = tpu_b_select(b, exc, ex11, di);
  tpu_val_t s = tpu_nn_add(b, tpu_nn_add(b, tpu_eig_abs(b, h11), tpu_eig_abs(b, h12)),
                           tpu_nn_add(b, tpu_eig_abs(b, h21), tpu_eig_abs(b, h22)));
  tpu_val_t s1 = tpu_b_select(b, tpu_eig_cmp(b, "EQ", s, tpu_ops_like(b, s, 0)), tpu_ops_like(b, s, 1), s);
  h11 = tpu_nn_div(b, h11, s1);
  h12 = tpu_nn_div(b, h12, s1);
  h21 = tpu_nn_div(b, h21, s1);
  h22 = tpu_nn_div(b, h22, s1);
  tpu_val_t tr = tpu_nn_mulc(b, tpu_nn_add(b, h11, h22), 0.5);
  tpu_val_t det = tpu_nn_sub(b, tpu_nn_mul(b, tpu_nn_sub(b, h11, tr), tpu_nn_sub(b, h22, tr)), tpu_nn_mul(b, h12, h21));
  tpu_val_t rtd = tpu_eig_sqrt(b, tpu_eig_abs(b, det));
  tpu_val_t cplx = tpu_eig_cmp(b, "GE", det, tpu_ops_like(b, det, 0));
  tpu_val_t a1 = tpu_nn_add(b, tr, rtd), a2 = tpu_nn_sub(b, tr, rtd);
  tpu_val_t near = tpu_b_select(b, tpu_eig_cmp(b, "LE", tpu_eig_abs(b, tpu_nn_sub(b, a1, h22)),
                                               tpu_eig_abs(b, tpu_nn_sub(b, a2, h22))), a1, a2);
  *rtr = tpu_nn_mul(b, tpu_b_select(b, cplx, tr, near), s);
  *rti = tpu_b_select(b, cplx, tpu_nn_mul(b, rtd, s), tpu_ops_like(b, s, 0));
}

/* dlahqr's search for two consecutive small subdiagonal entries: the largest m
 * in [l, i-2] where the double-shift bulge can start (m = l at the latest),
 * and the bulge's first column *v (B, 3). */
static tpu_val_t tpu_eig_bulge_start(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub, tpu_val_t sup,
                                     tpu_val_t i, tpu_val_t l, tpu_val_t rtr, tpu_val_t rti, tpu_val_t* v) {
  tpu_aval_t va = *tpu_b_aval(b, d);
  tpu_val_t r = tpu_mx_bcast_batch(b, rtr, &va), ri = tpu_mx_bcast_batch(b, rti, &va);
  tpu_val_t hmm = d, h11 = tpu_eig_shift(b, d, 1), h01 = tpu_eig_shift(b, sup, 1), h10 = tpu_eig_shift(b, sub, 1);
  tpu_val_t dm = tpu_nn_sub(b, hmm, r);
  tpu_val_t s = tpu_nn_add(b, tpu_nn_add(b, tpu_eig_abs(b, dm), tpu_eig_abs(b, ri)), tpu_eig_abs(b, h10));
  tpu_val_t h21s = tpu_eig_div(b, h10, s);
  tpu_val_t v1 = tpu_nn_add(b, tpu_nn_add(b, tpu_nn_mul(b, h21s, h01), tpu_nn_mul(b, dm, tpu_eig_div(b, dm, s))),
                            tpu_nn_mul(b, ri, tpu_eig_div(b, ri, s)));
  tpu_val_t v2 = tpu_nn_mul(b, h21s, tpu_nn_sub(b, tpu_nn_add(b, hmm, h11), tpu_nn_add(b, r, r)));
  tpu_val_t v3 = tpu_nn_mul(b, h21s, tpu_eig_shift(b, sub, 2));
  tpu_val_t s2 = tpu_nn_add(b, tpu_nn_add(b, tpu_eig_abs(b, v1), tpu_eig_abs(b, v2)), tpu_eig_abs(b, v3));
  v1 = tpu_eig_div(b, v1, s2);
  v2 = tpu_eig_div(b, v2, s2);
  v3 = tpu_eig_div(b, v3, s2);
  tpu_val_t h00 = tpu_nn_mul(b, tpu_eig_abs(b, sub), tpu_nn_add(b, tpu_eig_abs(b, v2), tpu_eig_abs(b, v3)));
  tpu_val_t around = tpu_nn_add(b, tpu_nn_add(b, tpu_eig_abs(b, tpu_eig_shift(b, d, -1)), tpu_eig_abs(b, hmm)),
                                tpu_eig_abs(b, h11));
  tpu_val_t h0 = tpu_nn_mul(b, tpu_eig_abs(b, v1), around);
  tpu_val_t idx = tpu_eig_iota(b, d, 1);
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  tpu_val_t lv = tpu_mx_bcast_batch(b, l, &ia), i2 = tpu_nn_sub(b, tpu_mx_bcast_batch(b, i, &ia), tpu_b_full(b, &ia, 2));
  tpu_val_t stop = tpu_eig_or(b, tpu_eig_cmp(b, "EQ", idx, lv), tpu_eig_cmp(b, "LE", h00, tpu_nn_mulc(b, h0, c->ulp)));
  tpu_val_t ok = tpu_eig_and(b, stop, tpu_eig_and(b, tpu_eig_cmp(b, "GE", idx, lv), tpu_eig_cmp(b, "LE", idx, i2)));
  int64_t last = 1;
  tpu_val_t m = tpu_b_reduce(b, tpu_b_select(b, ok, idx, tpu_b_full(b, &ia, -1)), tpu_b_const_i(b, TPU_I32, -1), 1, &last,
                             "stablehlo.maximum");
  tpu_val_t vm[3] = {tpu_eig_at(b, v1, m), tpu_eig_at(b, v2, m), tpu_eig_at(b, v3, m)};
  *v = tpu_mx_columns(b, 3, vm);
  return m;
}

/* The slice of x (B, R, C) of `size` rows (dim 1) or columns (dim 2) from k (0-d). */
tpu_val_t tpu_eig_band(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t k, int64_t size) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0), starts[3] = {z, dim == 1 ? k : z, dim == 2 ? k : z};
  a.dims[dim] = size;
  return tpu_b_dynamic_slice(b, x, starts, a.dims);
}
tpu_val_t tpu_eig_put_band(tpu_builder_t* b, tpu_val_t x, tpu_val_t band, int dim, tpu_val_t k) {
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0), starts[3] = {z, dim == 1 ? k : z, dim == 2 ? k : z};
  return tpu_b_dynamic_update_slice(b, x, band, starts);
}

/* One step of the bulge chase at row k = ks + counter (dlahqr's loop 130 with
 * 3-row reflectors, or zlahqr's loop 120 with 2-row ones: the width of V), for
 * every matrix whose window has m <= k <= i - 1. Carry: H, Z, P (B, 4) i32 =
 * (m, i, l, sweeping), V (B, w) the bulge's first column, ks, ke. */
static void tpu_eig_chase_step(tpu_builder_t* b, void* ctx, tpu_val_t cnt, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_eig_ctx_t* c = ctx;
  tpu_val_t H = in[0], P = in[2], V0 = in[3], ks = in[4];
  int64_t B = tpu_b_aval(b, H)->dims[0], w = tpu_b_aval(b, V0)->dims[1];
  tpu_val_t k = tpu_nn_add(b, ks, cnt), kb = tpu_eig_bk(b, k, B), one = tpu_ops_like(b, kb, 1);
  tpu_val_t m = tpu_mx_column(b, P, 0), i = tpu_mx_column(b, P, 1), l = tpu_mx_column(b, P, 2);
  tpu_val_t im1 = tpu_nn_sub(b, i, one);
  tpu_val_t act = tpu_eig_and(b, tpu_eig_cmp(b, "NE", tpu_mx_column(b, P, 3), tpu_ops_like(b, kb, 0)),
                              tpu_eig_and(b, tpu_eig_cmp(b, "LE", m, kb), tpu_eig_cmp(b, "LE", kb, im1)));
  tpu_val_t first = tpu_eig_cmp(b, "EQ", kb, m);
  tpu_val_t R = tpu_eig_band(b, H, 1, k, w); /* rows k..k+w-1, (B, w, N) */
  tpu_aval_t ra = *tpu_b_aval(b, R);
  tpu_val_t ci = tpu_eig_iota(b, R, 2), kr = tpu_b_broadcast_in_dim(b, k, 3, ra.dims, NULL);
  tpu_val_t on_prev = tpu_eig_cmp(b, "EQ", ci, tpu_nn_sub(b, kr, tpu_ops_like(b, kr, 1)));
  tpu_val_t xprev = tpu_mx_pick(b, on_prev, R, 2); /* H(k..k+w-1, k-1), (B, w) */
  tpu_aval_t xa = *tpu_b_aval(b, xprev);
  tpu_val_t x = tpu_b_select(b, tpu_mx_bcast_batch(b, first, &xa), V0, xprev);
  tpu_val_t ri = tpu_eig_iota(b, x, 1);
  if (w == 3) { /* the last step (k = i - 1) of a double shift reflects 2 rows */
    tpu_val_t drop3 = tpu_eig_and(b, tpu_eig_cmp(b, "EQ", ri, tpu_b_full(b, tpu_b_aval(b, ri), 2)),
                                  tpu_eig_not(b, tpu_mx_bcast_batch(b, tpu_eig_cmp(b, "LT", kb, im1), &xa)));
    x = tpu_b_select(b, drop3, tpu_b_full(b, &xa, 0), x);
  }
  tpu_val_t top = tpu_eig_cmp(b, "EQ", ri, tpu_b_full(b, tpu_b_aval(b, ri), 0));
  tpu_qr_reflector_t h = tpu_eig_larfg(b, x, top, tpu_eig_not(b, top));
  tpu_aval_t ba = *tpu_b_aval(b, h.tau);
  tpu_val_t tau = tpu_b_select(b, act, h.tau, tpu_b_full(b, &ba, 0)), ctau = tpu_ops_conj(b, tau);
  /* rows by G^H on columns >= k (left of k the rows are zero but for column k - 1) */
  tpu_val_t Rn = tpu_b_select(b, tpu_eig_cmp(b, "GE", ci, kr), tpu_eig_reflect(b, R, h.v, ctau, 1), R);
  /* column k - 1: (beta, 0, ..) after the first step; at a start m > l the small
   * H(m, m-1) takes G^H's factor 1 - conj(tau), as dlahqr does */
  tpu_val_t put = tpu_eig_and(b, act, tpu_eig_not(b, first));
  tpu_val_t scale = tpu_eig_and(b, tpu_eig_and(b, act, first), tpu_eig_cmp(b, "GT", m, l));
  tpu_val_t f = tpu_nn_sub(b, tpu_ops_like(b, ctau, 1), ctau);
  tpu_val_t scaled = tpu_b_select(b, top, tpu_nn_mul(b, xprev, tpu_mx_bcast_batch(b, f, &xa)), xprev);
  tpu_val_t beta0 = tpu_b_select(b, top, tpu_mx_bcast_batch(b, h.beta, &xa), tpu_b_full(b, &xa, 0));
  tpu_val_t colv = tpu_b_select(b, tpu_mx_bcast_batch(b, put, &xa), beta0,
                                tpu_b_select(b, tpu_mx_bcast_batch(b, scale, &xa), scaled, xprev));
  Rn = tpu_b_select(b, on_prev, tpu_mx_bcast_vec(b, colv, &ra, false), Rn);
  H = tpu_eig_put_band(b, H, Rn, 1, k);
  /* columns k..k+w-1 by G, every row (rows past min(k + w, i) are zero there) */
  H = tpu_eig_put_band(b, H, tpu_eig_reflect(b, tpu_eig_band(b, H, 2, k, w), h.v, tau, 2), 2, k);
  out[0] = H;
  out[1] = c->vectors ? tpu_eig_put_band(b, in[1], tpu_eig_reflect(b, tpu_eig_band(b, in[1], 2, k, w), h.v, tau, 2), 2, k)
                      : in[1];
  for (int j = 2; j < 6; j++) out[j] = in[j];
}

static tpu_val_t tpu_eig_chase_cond(tpu_builder_t* b, void* ctx, tpu_val_t cnt, const tpu_val_t* in) {
  (void)ctx;
  return tpu_eig_cmp(b, "LE", tpu_nn_add(b, in[4], cnt), in[5]);
}

/* The chase for every sweeping matrix, k over [min m, max i - 1] of those. */
void tpu_eig_chase(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t* H, tpu_val_t* Z, tpu_val_t sweep,
                   tpu_val_t m, tpu_val_t i, tpu_val_t l, tpu_val_t v) {
  tpu_val_t sw = tpu_b_convert(b, sweep, TPU_I32), cols[4] = {m, i, l, sw};
  tpu_aval_t ia = *tpu_b_aval(b, m);
  int64_t last = 0;
  tpu_val_t big = tpu_b_full(b, &ia, (double)c->N);
  tpu_val_t ks = tpu_b_reduce(b, tpu_b_select(b, sweep, m, big), tpu_b_const_i(b, TPU_I32, (int64_t)c->N), 1, &last,
                              "stablehlo.minimum");
  tpu_val_t ke = tpu_b_reduce(b, tpu_b_select(b, sweep, tpu_nn_sub(b, i, tpu_ops_like(b, i, 1)), tpu_b_full(b, &ia, -1)),
                              tpu_b_const_i(b, TPU_I32, -1), 1, &last, "stablehlo.maximum");
  tpu_val_t init[6] = {*H, *Z, tpu_mx_columns(b, 4, cols), v, ks, ke}, res[6];
  tpu_mx_while(b, c->n, 6, init, tpu_eig_chase_cond, tpu_eig_chase_step, (void*)c, res, NULL);
  *H = res[0];
  *Z = res[1];
}

/* One iteration of dlahqr (zlahqr for complex H) for every matrix still
 * running: deflate at the bottom of its window, or chase one bulge. Carry: H,
 * Z, S (B, 4) i32 = (i, its, kdefl, failed at: i + 1 or 0); i = -1 when done. */
static void tpu_eig_qr_step(tpu_builder_t* b, void* ctx, tpu_val_t cnt, const tpu_val_t* in, tpu_val_t* out) {
  (void)cnt;
  const tpu_eig_ctx_t* c = ctx;
  tpu_val_t H = in[0], Z = in[1], S = in[2];
  tpu_val_t i = tpu_mx_column(b, S, 0), its = tpu_mx_column(b, S, 1), kdefl = tpu_mx_column(b, S, 2);
  tpu_val_t fail = tpu_mx_column(b, S, 3);
  tpu_val_t zero = tpu_ops_like(b, i, 0), one = tpu_ops_like(b, i, 1);
  tpu_val_t d, sub, sup;
  tpu_eig_diagonals(b, H, &d, &sub, &sup);
  tpu_val_t active = tpu_eig_cmp(b, "GE", i, zero);
  tpu_val_t l = tpu_eig_deflation_point(b, c, d, sub, sup, i);
  /* H(l, l-1) = 0 */
  tpu_aval_t m = *tpu_b_aval(b, H);
  tpu_val_t lm = tpu_mx_bcast_batch(b, l, &m);
  tpu_val_t cut = tpu_eig_and(b, tpu_eig_and(b, tpu_eig_cmp(b, "EQ", tpu_eig_iota(b, H, 1), lm),
                                             tpu_eig_cmp(b, "EQ", tpu_eig_iota(b, H, 2), tpu_nn_sub(b, lm, tpu_ops_like(b, lm, 1)))),
                              tpu_mx_bcast_batch(b, active, &m));
  H = tpu_b_select(b, cut, tpu_b_full(b, &m, 0), H);
  /* a 1 x 1 block, or (real) a 2 x 2 one, has split off */
  bool cplx = tpu_dtype_is_complex(m.dtype);
  tpu_val_t conv = tpu_eig_and(b, active, tpu_eig_cmp(b, "GE", l, cplx ? i : tpu_nn_sub(b, i, one)));
  tpu_val_t sweep = tpu_eig_and(b, active, tpu_eig_not(b, conv));
  tpu_val_t its1 = tpu_b_select(b, sweep, tpu_nn_add(b, its, one), zero);
  tpu_val_t kdefl1 = tpu_b_select(b, sweep, tpu_nn_add(b, kdefl, one), zero);
  tpu_val_t failed = tpu_eig_and(b, sweep, tpu_eig_cmp(b, "GT", its1, tpu_ops_like(b, its1, (double)c->itmax)));
  sweep = tpu_eig_and(b, sweep, tpu_eig_not(b, failed));
  tpu_val_t i1 = tpu_b_select(b, conv, tpu_nn_sub(b, l, one), tpu_b_select(b, failed, tpu_ops_like(b, i, -1), i));
  tpu_val_t fail1 = tpu_b_select(b, failed, tpu_nn_add(b, i, one), fail);
  tpu_val_t rtr, rti, v, mstart;
  if (cplx) {
    mstart = tpu_eig_complex_start(b, c, d, sub, sup, i, l, kdefl1, &v);
  } else {
    tpu_eig_shifts(b, d, sub, sup, i, l, kdefl1, &rtr, &rti);
    mstart = tpu_eig_bulge_start(b, c, d, sub, sup, i, l, rtr, rti, &v);
  }
  tpu_eig_chase(b, c, &H, &Z, sweep, mstart, i, l, v);
  if (cplx) tpu_eig_complex_realify(b, &H, &Z, sweep, c->vectors);
  tpu_val_t st[4] = {i1, its1, kdefl1, fail1};
  out[0] = H;
  out[1] = Z;
  out[2] = tpu_mx_columns(b, 4, st);
}

static tpu_val_t tpu_eig_qr_cond(tpu_builder_t* b, void* ctx, tpu_val_t cnt, const tpu_val_t* in) {
  (void)ctx;
  (void)cnt;
  tpu_val_t i = tpu_mx_column(b, in[2], 0);
  return tpu_mx_any(b, tpu_eig_cmp(b, "GE", i, tpu_ops_like(b, i, 0)));
}

/* ------------------------------------------------------------- the driver */

/* Balancing, Hessenberg form and the QR iteration (real: dlahqr, complex:
 * zlahqr) of A (B, n, n): the (quasi-)triangular Schur form *H (B, N, N) and
 * *Z (B, n, N); an op that does not converge fails at the next sync. */
static void tpu_eig_schur(tpu_builder_t* b, tpu_op_t* op, const tpu_eig_ctx_t* c, tpu_val_t A, tpu_eig_balance_t* bal,
                          tpu_val_t* H, tpu_val_t* Z) {
  tpu_aval_t a = *tpu_b_aval(b, A);
  bool cplx = tpu_dtype_is_complex(a.dtype);
  int64_t B = a.dims[0], n = c->n, lo[3] = {0, 0, 0}, hi[3] = {0, 2, 2};
  tpu_val_t zero = tpu_b_const(b, a.dtype, 0);
  *bal = tpu_eig_balance(b, A);
  tpu_val_t res[3], hz[2] = {tpu_b_pad(b, bal->A, zero, lo, hi, NULL), TPU_NOVAL};
  hi[1] = 0;
  hz[1] = tpu_b_pad(b, tpu_mx_eye(b, &a), zero, lo, hi, NULL); /* (B, n, N) */
  /* complex: one more (1-element) reflector makes the last subdiagonal entry real */
  tpu_mx_for(b, cplx ? n - 1 : n - 2, 2, hz, tpu_eig_hess_step, (void*)c, res);
  int64_t s4[2] = {B, 4};
  tpu_aval_t sa = tpu_aval_make(TPU_I32, 2, s4);
  tpu_val_t S = tpu_b_select(b, tpu_eig_cmp(b, "EQ", tpu_b_iota(b, &sa, 1), tpu_b_full(b, &sa, 0)),
                             tpu_b_full(b, &sa, (double)(n - 1)), tpu_b_full(b, &sa, 0));
  *H = res[0];
  *Z = res[1];
  tpu_val_t init[3] = {res[0], res[1], S};
  tpu_mx_while(b, n * (c->itmax + 1), 3, init, tpu_eig_qr_cond, tpu_eig_qr_step, (void*)c, res, NULL);
  *H = res[0];
  *Z = res[1];
  S = res[2];
  int64_t last = 0;
  tpu_val_t failed = tpu_b_reduce(b, tpu_mx_column(b, S, 3), tpu_b_const_i(b, TPU_I32, 0), 1, &last,
                                  "stablehlo.maximum");
  tpu_op_check(b, op, tpu_eig_cmp(b, "GT", failed, tpu_b_const_i(b, TPU_I32, 0)), tpu_b_convert(b, failed, TPU_I64),
               TPU_LINALG_ERROR,
               "torch.linalg.eig: The algorithm failed to converge because the input matrix is ill-conditioned or "
               "has too many repeated eigenvalues (error code: {}).");
}

/* w (B, n) and, when c->vectors, V (B, n, n), complex, of A (B, n, n), real or
 * complex; n >= 1. */
static void tpu_eig_run(tpu_builder_t* b, tpu_op_t* op, const tpu_eig_ctx_t* c, tpu_val_t A, tpu_val_t* out_w,
                        tpu_val_t* out_v) {
  bool cplx = tpu_dtype_is_complex(tpu_b_dtype(b, A));
  int64_t n = c->n;
  tpu_eig_balance_t bal;
  tpu_val_t H, Z, T = TPU_NOVAL, Zc = TPU_NOVAL, wi = TPU_NOVAL;
  tpu_eig_schur(b, op, c, A, &bal, &H, &Z);
  if (cplx) { /* triangular: the eigenvalues are the diagonal */
    *out_w = tpu_mx_slice(b, tpu_mx_diag(b, H), 1, 0, n);
    T = tpu_mx_slice(b, tpu_mx_slice(b, H, 1, 0, n), 2, 0, n);
    Zc = tpu_mx_slice(b, Z, 2, 0, n);
  } else {
    *out_w = tpu_eig_real_blocks(b, c, H, Z, &wi, &T, &Zc);
  }
  if (!c->vectors) return;
  *out_v = tpu_eig_vectors(b, c, T, Zc, *out_w, wi, &bal);
}

/* ATen's checks: f32/f64/c64/c128, square, at least 2 dims. */
static bool tpu_eig_check(tpu_builder_t* b, const tpu_aval_t* a) {
  tpu_aval_t r = *a; /* complex passes as its real type */
  if (tpu_dtype_is_complex(r.dtype)) r.dtype = r.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  return tpu_mx_check_input(b, &r, "linalg.eig", "linalg_eig_out_tpu", true);
}

/* linalg_eig (vectors) and _linalg_eigvals / linalg_eigvals.out. */
static tpu_status_t* tpu_eig_lower(tpu_builder_t* b, tpu_op_t* op, bool vectors, tpu_val_t* outs, int* nouts) {
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_eig_check(b, &a)) return NULL;
  int r = a.rank;
  int64_t n = a.dims[r - 1], B = tpu_aval_numel(&a) / (n > 0 ? n * n : 1);
  tpu_dtype_t ct = a.dtype == TPU_F32 || a.dtype == TPU_C64 ? TPU_C64 : TPU_C128;
  tpu_dtype_t rt = ct == TPU_C64 ? TPU_F32 : TPU_F64;
  tpu_aval_t wa = tpu_mx_retype(&a, ct), va = wa;
  wa.rank--;
  *nouts = vectors ? 2 : 1;
  if (n == 0 || tpu_aval_numel(&a) == 0) {
    outs[0] = tpu_b_full(b, &wa, 0);
    if (vectors) outs[1] = tpu_b_full(b, &va, 0);
    return NULL;
  }
  tpu_val_t A = tpu_op_tensor(b, op, 0);
  tpu_val_t bad = tpu_eig_not(b, tpu_mx_all_finite(b, A));
  tpu_op_check(b, op, bad, TPU_NOVAL, TPU_INVALID_ARGUMENT, "torch.linalg.eig: input tensor should not contain infs or NaNs.");
  int64_t d3[3] = {B, n, n};
  tpu_eig_ctx_t c = {n, n + 2, rt, rt == TPU_F64 ? DBL_EPSILON : FLT_EPSILON, 0, 30 * (n > 10 ? n : 10), vectors};
  c.smlnum = (rt == TPU_F64 ? DBL_MIN : FLT_MIN) * ((double)n / c.ulp);
  /* a non-finite A would spin until the iteration limit: run on zeros instead (the check fails the op) */
  tpu_val_t A3 = tpu_b_reshape(b, A, 3, d3);
  tpu_aval_t a3 = *tpu_b_aval(b, A3);
  A3 = tpu_b_select(b, tpu_b_broadcast_in_dim(b, bad, 3, a3.dims, NULL), tpu_b_full(b, &a3, 0), A3);
  tpu_val_t w, V = TPU_NOVAL;
  tpu_eig_run(b, op, &c, A3, &w, vectors ? &V : NULL);
  outs[0] = tpu_b_reshape(b, w, wa.rank, wa.dims);
  if (vectors) outs[1] = tpu_b_reshape(b, V, va.rank, va.dims);
  return NULL;
}

/* linalg_eig(A) -> (eigenvalues, eigenvectors) */
static tpu_status_t* tpu_lower_linalg_eig(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_eig_lower(b, op, true, outs, nouts);
}

/* _linalg_eigvals(A) -> eigenvalues (and linalg_eigvals.out, which reaches the op table under this name) */
static tpu_status_t* tpu_lower_linalg_eigvals(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  return tpu_eig_lower(b, op, false, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_eig[] = {
    {"linalg_eig", tpu_lower_linalg_eig},
    {"_linalg_eigvals", tpu_lower_linalg_eigvals},
    {"linalg_eigvals", tpu_lower_linalg_eigvals},
    {NULL, NULL},
};
