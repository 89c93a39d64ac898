/* Lowerings: the symmetric indefinite factorisation (linalg_ldl_factor_ex) and
 * its solve (linalg_ldl_solve), LAPACK sytrf/sytrs's results for UPLO = 'L'.
 *
 * Factor: Bunch-Kaufman diagonal pivoting, the unblocked algorithm of LAPACK
 * sytf2, so that LD, pivots and info are CPU's (sytrf's blocked panels make the
 * same pivot choices). Step k looks at column k of the trailing symmetric
 * matrix W: with alpha = (1 + sqrt(17)) / 8, colmax = max_{i>k} |W[i,k]| at
 * row imax, and rowmax the largest off-diagonal |W[imax, j]| for j >= k,
 *   - |W[k,k]| >= alpha colmax, or >= alpha colmax^2 / rowmax: a 1x1 pivot at k;
 *   - else |W[imax,imax]| >= alpha rowmax: a 1x1 pivot, rows/columns k, imax
 *     exchanged;
 *   - else a 2x2 pivot on k, k+1, rows/columns k+1, imax exchanged;
 *   - colmax = |W[k,k]| = 0 (or NaN): no pivot, info = k+1 if first.
 * The exchanges touch the trailing matrix only: L is LAPACK's product form
 * P1 L1 P2 L2 ..., which is what sytrs expects. Pivots are 1-based; both rows of
 * a 2x2 block hold -(exchanged row + 1).
 *
 * Static shapes: a loop over k in [0, n) for the whole batch; a batch element
 * whose previous step took a 2x2 block skips step k (a per-batch flag), and all
 * per-batch choices are selects. Each step is O(n^2) elementwise work (the
 * symmetric rank-1 or rank-2 update of W), n steps in all. W is kept as a full
 * symmetric matrix (its lower triangle mirrored), so an exchange is a row and a
 * column swap.
 *
 * Solve: sytrs's two passes over the same blocks (forward: exchange, eliminate
 * below, divide by D; backward: eliminate with L^T, exchange back), again one
 * loop step per index with the 2x2 steps flagged. */
#include <math.h>

#include "check.h"
#include "matrix.h"
#include "nn.h"

/* Entry idx (per batch, i32 of shape batch...) of vectors v (batch..., n). */
static tpu_val_t tpu_ldl_entry(tpu_builder_t* b, tpu_val_t v, tpu_val_t idx) {
  tpu_aval_t a = *tpu_b_aval(b, v), ia = tpu_mx_retype(&a, TPU_I32);
  tpu_val_t hit = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, a.rank - 1), tpu_mx_bcast_batch(b, idx, &ia));
  return tpu_mx_pick(b, hit, v, a.rank - 1);
}

/* A 0-d i32 value broadcast to shape a (which must be i32). */
static tpu_val_t tpu_ldl_splat(tpu_builder_t* b, tpu_val_t k, const tpu_aval_t* a) {
  return tpu_b_broadcast_in_dim(b, k, a->rank, a->dims, NULL);
}

static tpu_val_t tpu_ldl_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_binary(b, "stablehlo.and", x, y);
}
static tpu_val_t tpu_ldl_not(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.not", x); }

/* The outer product u v^T (u over the rows, v over the columns) of shape m. */
static tpu_val_t tpu_ldl_outer(tpu_builder_t* b, tpu_val_t u, tpu_val_t v, const tpu_aval_t* m) {
  return tpu_nn_mul(b, tpu_mx_bcast_vec(b, u, m, false), tpu_mx_bcast_vec(b, v, m, true));
}

/* k + 1 clamped to n - 1 (0-d i32): the second index of a 2x2 block, in range
 * also at the last step (where no 2x2 block can start). */
static tpu_val_t tpu_ldl_next(tpu_builder_t* b, tpu_val_t k, int64_t n) {
  tpu_val_t k1 = tpu_b_binary(b, "stablehlo.add", k, tpu_b_const_i(b, TPU_I32, 1));
  return tpu_b_binary(b, "stablehlo.minimum", k1, tpu_b_const_i(b, TPU_I32, n - 1));
}

/* ------------------------------------------------------------ factorisation */

/* The pivot decision of step k on W (see the top). Per batch: kp (the row
 * exchanged with kk = k + two), two (a 2x2 block), zero (no pivot). */
typedef struct tpu_ldl_pivot {
  tpu_val_t kp, kk, two, zero;
} tpu_ldl_pivot_t;

static tpu_ldl_pivot_t tpu_ldl_choose(tpu_builder_t* b, tpu_val_t W, tpu_val_t k) {
  tpu_aval_t m = *tpu_b_aval(b, W), vec = tpu_mx_drop(&m, 1), ivec = tpu_mx_retype(&vec, TPU_I32);
  tpu_aval_t bat = tpu_mx_drop(&m, 2), ibat = tpu_mx_retype(&bat, TPU_I32);
  int vd = vec.rank - 1;
  tpu_val_t vidx = tpu_b_iota(b, &ivec, vd), kv = tpu_ldl_splat(b, k, &ivec), kb = tpu_ldl_splat(b, k, &ibat);
  tpu_val_t ck = tpu_mx_take(b, W, m.rank - 1, k);
  tpu_val_t absakk = tpu_b_unary(b, "stablehlo.abs", tpu_mx_take(b, ck, vd, k));
  tpu_val_t ninf = tpu_b_full(b, &vec, -INFINITY);
  tpu_val_t colmax, imax;
  tpu_b_argreduce(b, tpu_b_select(b, tpu_b_compare(b, "GT", vidx, kv), tpu_b_unary(b, "stablehlo.abs", ck), ninf),
                  vd, true, &colmax, &imax);
  colmax = tpu_b_binary(b, "stablehlo.maximum", colmax, tpu_b_full(b, &bat, 0)); /* -inf at the last step */
  imax = tpu_b_convert(b, imax, TPU_I32);
  /* row imax of the trailing matrix, off the diagonal */
  tpu_val_t row = tpu_ldl_entry(b, tpu_mx_mT(b, W), imax);
  tpu_val_t ajj = tpu_b_unary(b, "stablehlo.abs", tpu_ldl_entry(b, row, imax));
  tpu_val_t in_row = tpu_ldl_and(b, tpu_b_compare(b, "GE", vidx, kv),
                                 tpu_b_compare(b, "NE", vidx, tpu_mx_bcast_batch(b, imax, &ivec)));
  int64_t last = vd;
  tpu_val_t rowmax = tpu_b_reduce(b, tpu_b_select(b, in_row, tpu_b_unary(b, "stablehlo.abs", row), ninf),
                                  tpu_b_const(b, m.dtype, -INFINITY), 1, &last, "stablehlo.maximum");
  tpu_val_t alpha = tpu_b_full(b, &bat, (1.0 + sqrt(17.0)) / 8.0);
  tpu_val_t acol = tpu_nn_mul(b, alpha, colmax);
  tpu_ldl_pivot_t p;
  tpu_val_t both = tpu_b_binary(b, "stablehlo.maximum", absakk, colmax);
  p.zero = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "EQ", both, tpu_b_full(b, &bat, 0)),
                        tpu_b_compare(b, "NE", absakk, absakk));
  tpu_val_t keep = tpu_b_binary(b, "stablehlo.or", p.zero, tpu_b_compare(b, "GE", absakk, acol));
  keep = tpu_b_binary(b, "stablehlo.or", keep,
                      tpu_b_compare(b, "GE", absakk, tpu_nn_mul(b, acol, tpu_nn_div(b, colmax, rowmax))));
  tpu_val_t big_jj = tpu_b_compare(b, "GE", ajj, tpu_nn_mul(b, alpha, rowmax));
  p.two = tpu_ldl_and(b, tpu_ldl_not(b, keep), tpu_ldl_not(b, big_jj));
  p.kp = tpu_b_select(b, keep, kb, imax);
  p.kk = tpu_b_binary(b, "stablehlo.add", kb, tpu_b_convert(b, p.two, TPU_I32));
  return p;
}

/* rows > t and columns > t (t per batch, i32), of matrices shaped m. */
static tpu_val_t tpu_ldl_trailing(tpu_builder_t* b, const tpu_aval_t* m, tpu_val_t t) {
  tpu_aval_t im = tpu_mx_retype(m, TPU_I32);
  tpu_val_t tm = tpu_mx_bcast_batch(b, t, &im);
  return tpu_ldl_and(b, tpu_b_compare(b, "GT", tpu_b_iota(b, &im, m->rank - 2), tm),
                     tpu_b_compare(b, "GT", tpu_b_iota(b, &im, m->rank - 1), tm));
}

/* Column `col` (0-d i32) of LD, rows >= `col`, set to v (batch..., n) where `on` (per batch). */
static tpu_val_t tpu_ldl_set_column(tpu_builder_t* b, tpu_val_t LD, tpu_val_t col, tpu_val_t v, tpu_val_t on) {
  tpu_aval_t m = *tpu_b_aval(b, LD), im = tpu_mx_retype(&m, TPU_I32), pm = tpu_mx_retype(&m, TPU_BOOL);
  tpu_val_t cm = tpu_ldl_splat(b, col, &im);
  tpu_val_t at = tpu_ldl_and(b, tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, m.rank - 1), cm),
                             tpu_b_compare(b, "GE", tpu_b_iota(b, &im, m.rank - 2), cm));
  at = tpu_ldl_and(b, at, tpu_mx_bcast_batch(b, on, &pm));
  return tpu_b_select(b, at, tpu_mx_bcast_vec(b, v, &m, false), LD);
}

/* Entry k of the i32 vectors v set to x (per batch) where `on`. */
static tpu_val_t tpu_ldl_set_entry(tpu_builder_t* b, tpu_val_t v, tpu_val_t k, tpu_val_t x, tpu_val_t on) {
  tpu_aval_t a = *tpu_b_aval(b, v), pa = tpu_mx_retype(&a, TPU_BOOL);
  tpu_val_t at = tpu_b_compare(b, "EQ", tpu_b_iota(b, &a, a.rank - 1), tpu_ldl_splat(b, k, &a));
  at = tpu_ldl_and(b, at, tpu_mx_bcast_batch(b, on, &pa));
  return tpu_b_select(b, at, tpu_mx_bcast_batch(b, x, &a), v);
}

/* Carry: W, LD (batch..., n, n), pivots (batch..., n) i32, skip (batch...) i1,
 * info (batch...) i32. */
static void tpu_ldl_factor_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t W = in[0];
  tpu_aval_t m = *tpu_b_aval(b, W), bat = tpu_mx_drop(&m, 2), ibat = tpu_mx_retype(&bat, TPU_I32);
  int r = m.rank;
  tpu_val_t k1 = tpu_ldl_next(b, k, m.dims[r - 1]);
  tpu_val_t act = tpu_ldl_not(b, in[3]);
  tpu_ldl_pivot_t p = tpu_ldl_choose(b, W, k);
  tpu_val_t kp = tpu_b_select(b, act, p.kp, p.kk); /* skipped: no exchange */
  tpu_val_t W1 = tpu_mx_swap(b, tpu_mx_swap(b, W, r - 2, p.kk, kp), r - 1, p.kk, kp);
  /* columns k and k+1 after the exchange; D's entries */
  tpu_val_t c0 = tpu_mx_take(b, W1, r - 1, k), c1 = tpu_mx_take(b, W1, r - 1, k1);
  tpu_val_t d = tpu_mx_take(b, c0, r - 2, k), d21 = tpu_mx_take(b, c0, r - 2, k1), dk1 = tpu_mx_take(b, c1, r - 2, k1);
  tpu_aval_t vec = *tpu_b_aval(b, c0);
  /* 1x1: l = c0 / d; W -= c0 (c0 / d)^T (sytf2: d11 = 1 / d, a rank-1 update by -d11) */
  tpu_val_t rinv = tpu_nn_div(b, tpu_b_full(b, &bat, 1), d);
  tpu_val_t l1 = tpu_nn_mul(b, c0, tpu_mx_bcast_batch(b, rinv, &vec));
  tpu_val_t upd1 = tpu_nn_sub(b, W1, tpu_ldl_outer(b, c0, l1, &m));
  /* 2x2: sytf2's scaled inverse of D applied to columns k and k+1 */
  tpu_val_t e11 = tpu_nn_div(b, dk1, d21), e22 = tpu_nn_div(b, d, d21);
  tpu_val_t t = tpu_nn_div(b, tpu_b_full(b, &bat, 1), tpu_nn_sub(b, tpu_nn_mul(b, e11, e22), tpu_b_full(b, &bat, 1)));
  tpu_val_t f = tpu_mx_bcast_batch(b, tpu_nn_div(b, t, d21), &vec);
  tpu_val_t wk = tpu_nn_mul(b, f, tpu_nn_sub(b, tpu_nn_mul(b, tpu_mx_bcast_batch(b, e11, &vec), c0), c1));
  tpu_val_t wk1 = tpu_nn_mul(b, f, tpu_nn_sub(b, tpu_nn_mul(b, tpu_mx_bcast_batch(b, e22, &vec), c1), c0));
  tpu_val_t upd2 = tpu_nn_sub(b, tpu_nn_sub(b, W1, tpu_ldl_outer(b, c0, wk, &m)), tpu_ldl_outer(b, c1, wk1, &m));
  tpu_aval_t pm = tpu_mx_retype(&m, TPU_BOOL), pv = tpu_mx_retype(&vec, TPU_BOOL);
  tpu_val_t t0 = tpu_b_binary(b, "stablehlo.add", tpu_ldl_splat(b, k, &ibat), tpu_b_convert(b, p.two, TPU_I32));
  tpu_val_t upd_on = tpu_ldl_and(b, tpu_ldl_trailing(b, &m, t0),
                                 tpu_mx_bcast_batch(b, tpu_ldl_and(b, act, tpu_ldl_not(b, p.zero)), &pm));
  out[0] = tpu_b_select(b, upd_on, tpu_b_select(b, tpu_mx_bcast_batch(b, p.two, &pm), upd2, upd1), W1);
  /* LD: column k below t0 holds L (c0 itself when there is no pivot), D above */
  tpu_aval_t iv = tpu_mx_retype(&vec, TPU_I32);
  tpu_val_t below = tpu_b_compare(b, "GT", tpu_b_iota(b, &iv, r - 2), tpu_mx_bcast_batch(b, t0, &iv));
  tpu_val_t lk = tpu_b_select(b, tpu_mx_bcast_batch(b, p.two, &pv), wk,
                              tpu_b_select(b, tpu_mx_bcast_batch(b, p.zero, &pv), c0, l1));
  tpu_val_t LD = tpu_ldl_set_column(b, in[1], k, tpu_b_select(b, below, lk, c0), act);
  out[1] = tpu_ldl_set_column(b, LD, k1, tpu_b_select(b, below, wk1, c1), tpu_ldl_and(b, act, p.two));
  /* pivots: kp + 1, negated for both rows of a 2x2 block */
  tpu_val_t kp1 = tpu_b_binary(b, "stablehlo.add", kp, tpu_b_full(b, &ibat, 1));
  tpu_val_t pv1 = tpu_b_select(b, p.two, tpu_b_unary(b, "stablehlo.negate", kp1), kp1);
  out[2] = tpu_ldl_set_entry(b, tpu_ldl_set_entry(b, in[2], k, pv1, act), k1, pv1, tpu_ldl_and(b, act, p.two));
  out[3] = tpu_ldl_and(b, act, p.two);
  tpu_val_t first = tpu_ldl_and(b, tpu_ldl_and(b, act, p.zero), tpu_b_compare(b, "EQ", in[4], tpu_b_full(b, &ibat, 0)));
  out[4] = tpu_b_select(b, first, tpu_b_binary(b, "stablehlo.add", tpu_ldl_splat(b, k, &ibat), tpu_b_full(b, &ibat, 1)),
                        in[4]);
}

/* ------------------------------------------------------------------ solve */

/* Row idx (0-d i32) of X (batch..., n, q) set to v (batch..., q) where `on` (per batch). */
static tpu_val_t tpu_ldl_set_row(tpu_builder_t* b, tpu_val_t X, tpu_val_t idx, tpu_val_t v, tpu_val_t on) {
  tpu_aval_t xa = *tpu_b_aval(b, X), ia = tpu_mx_retype(&xa, TPU_I32), pa = tpu_mx_retype(&xa, TPU_BOOL);
  tpu_val_t at = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, xa.rank - 2), tpu_ldl_splat(b, idx, &ia));
  at = tpu_ldl_and(b, at, tpu_mx_bcast_batch(b, on, &pa));
  return tpu_b_select(b, at, tpu_mx_bcast_vec(b, v, &xa, true), X);
}

/* The block at step k, from pivots (batch..., n): *one (1x1) or *two (2x2, not
 * when skipped) and the 0-based row exchanged, `self` when neither. */
static void tpu_ldl_block(tpu_builder_t* b, const tpu_val_t* in, tpu_val_t k, tpu_val_t self, tpu_val_t* one,
                          tpu_val_t* two, tpu_val_t* target) {
  tpu_val_t pk = tpu_mx_take(b, in[3], tpu_b_rank(b, in[3]) - 1, k);
  tpu_aval_t ia = *tpu_b_aval(b, pk);
  tpu_val_t act = tpu_ldl_not(b, in[1]), pos = tpu_b_compare(b, "GT", pk, tpu_b_full(b, &ia, 0));
  *one = tpu_ldl_and(b, act, pos);
  *two = tpu_ldl_and(b, act, tpu_ldl_not(b, pos));
  tpu_val_t up = tpu_b_binary(b, "stablehlo.subtract", pk, tpu_b_full(b, &ia, 1));
  tpu_val_t down = tpu_b_binary(b, "stablehlo.subtract", tpu_b_unary(b, "stablehlo.negate", pk), tpu_b_full(b, &ia, 1));
  *target = tpu_b_select(b, act, tpu_b_select(b, pos, up, down), self);
}

/* sytrs forward (P, L, then D) at step k. Carry: X (batch..., n, q), skip,
 * LD, pivots. */
static void tpu_ldl_forward_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t xa = *tpu_b_aval(b, in[0]), bat = tpu_mx_drop(&xa, 2), ibat = tpu_mx_retype(&bat, TPU_I32);
  int r = xa.rank;
  tpu_val_t k1 = tpu_ldl_next(b, k, xa.dims[r - 2]), one, two, target;
  tpu_val_t s = tpu_ldl_splat(b, k, &ibat);
  tpu_ldl_block(b, in, k, s, &one, &two, &target);
  s = tpu_b_select(b, two, tpu_ldl_splat(b, k1, &ibat), s); /* a 2x2 block exchanged its second row */
  tpu_val_t X = tpu_mx_swap(b, in[0], r - 2, s, tpu_b_select(b, tpu_b_binary(b, "stablehlo.or", one, two), target, s));
  tpu_val_t ck = tpu_mx_take(b, in[2], r - 1, k), ck1 = tpu_mx_take(b, in[2], r - 1, k1);
  tpu_val_t xk = tpu_mx_take(b, X, r - 2, k), xk1 = tpu_mx_take(b, X, r - 2, k1);
  tpu_val_t upd1 = tpu_nn_sub(b, X, tpu_ldl_outer(b, ck, xk, &xa));
  tpu_val_t upd2 = tpu_nn_sub(b, upd1, tpu_ldl_outer(b, ck1, xk1, &xa));
  tpu_aval_t pa = tpu_mx_retype(&xa, TPU_BOOL), ia = tpu_mx_retype(&xa, TPU_I32);
  tpu_val_t t0 = tpu_b_binary(b, "stablehlo.add", tpu_ldl_splat(b, k, &ibat), tpu_b_convert(b, two, TPU_I32));
  tpu_val_t below = tpu_b_compare(b, "GT", tpu_b_iota(b, &ia, r - 2), tpu_mx_bcast_batch(b, t0, &ia));
  below = tpu_ldl_and(b, below, tpu_mx_bcast_batch(b, tpu_b_binary(b, "stablehlo.or", one, two), &pa));
  X = tpu_b_select(b, below, tpu_b_select(b, tpu_mx_bcast_batch(b, two, &pa), upd2, upd1), X);
  /* D's block: 1x1 a division, 2x2 sytrs's scaled Cramer solve */
  tpu_aval_t ra = *tpu_b_aval(b, xk);
  tpu_val_t dkk = tpu_mx_bcast_batch(b, tpu_mx_take(b, ck, r - 2, k), &ra);
  tpu_val_t a21 = tpu_mx_bcast_batch(b, tpu_mx_take(b, ck, r - 2, k1), &ra);
  tpu_val_t dk1 = tpu_mx_bcast_batch(b, tpu_mx_take(b, ck1, r - 2, k1), &ra);
  tpu_val_t akm1 = tpu_nn_div(b, dkk, a21), ak = tpu_nn_div(b, dk1, a21);
  tpu_val_t den = tpu_nn_sub(b, tpu_nn_mul(b, akm1, ak), tpu_b_full(b, &ra, 1));
  tpu_val_t bkm1 = tpu_nn_div(b, xk, a21), bk = tpu_nn_div(b, xk1, a21);
  tpu_val_t nk = tpu_nn_div(b, tpu_nn_sub(b, tpu_nn_mul(b, ak, bkm1), bk), den);
  tpu_val_t nk1 = tpu_nn_div(b, tpu_nn_sub(b, tpu_nn_mul(b, akm1, bk), bkm1), den);
  tpu_aval_t rp = tpu_mx_retype(&ra, TPU_BOOL);
  tpu_val_t rowk = tpu_b_select(b, tpu_mx_bcast_batch(b, two, &rp), nk, tpu_nn_div(b, xk, dkk));
  X = tpu_ldl_set_row(b, X, k, rowk, tpu_b_binary(b, "stablehlo.or", one, two));
  out[0] = tpu_ldl_set_row(b, X, k1, nk1, two);
  out[1] = two;
  out[2] = in[2];
  out[3] = in[3];
}

/* sytrs backward (L^T, then P^T) at step j, on row k = n - 1 - j. Carry as forward. */
static void tpu_ldl_backward_step(tpu_builder_t* b, void* ctx, tpu_val_t j, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t xa = *tpu_b_aval(b, in[0]), bat = tpu_mx_drop(&xa, 2), ibat = tpu_mx_retype(&bat, TPU_I32);
  int r = xa.rank;
  tpu_val_t k = tpu_b_binary(b, "stablehlo.subtract", tpu_b_const_i(b, TPU_I32, xa.dims[r - 2] - 1), j);
  tpu_val_t km1 = tpu_b_binary(b, "stablehlo.subtract", k, tpu_b_const_i(b, TPU_I32, 1));
  km1 = tpu_b_binary(b, "stablehlo.maximum", km1, tpu_b_const_i(b, TPU_I32, 0));
  tpu_val_t one, two, target, kb = tpu_ldl_splat(b, k, &ibat);
  tpu_ldl_block(b, in, k, kb, &one, &two, &target);
  tpu_aval_t ia = tpu_mx_retype(&xa, TPU_I32);
  tpu_val_t below = tpu_b_compare(b, "GT", tpu_b_iota(b, &ia, r - 2), tpu_ldl_splat(b, k, &ia));
  tpu_val_t zero = tpu_b_full(b, &xa, 0), X = in[0];
  tpu_val_t ck = tpu_mx_bcast_vec(b, tpu_mx_take(b, in[2], r - 1, k), &xa, false);
  tpu_val_t ckm1 = tpu_mx_bcast_vec(b, tpu_mx_take(b, in[2], r - 1, km1), &xa, false);
  tpu_val_t dk = tpu_mx_sum(b, tpu_b_select(b, below, tpu_nn_mul(b, ck, X), zero), r - 2);
  tpu_val_t dkm1 = tpu_mx_sum(b, tpu_b_select(b, below, tpu_nn_mul(b, ckm1, X), zero), r - 2);
  tpu_val_t act = tpu_b_binary(b, "stablehlo.or", one, two);
  X = tpu_ldl_set_row(b, X, k, tpu_nn_sub(b, tpu_mx_take(b, X, r - 2, k), dk), act);
  X = tpu_ldl_set_row(b, X, km1, tpu_nn_sub(b, tpu_mx_take(b, X, r - 2, km1), dkm1), two);
  out[0] = tpu_mx_swap(b, X, r - 2, kb, target);
  out[1] = two;
  out[2] = in[2];
  out[3] = in[3];
}

/* X (batch..., n, q) solved in place of A X = X for A = LD's factorisation. */
static tpu_val_t tpu_ldl_solve(tpu_builder_t* b, tpu_val_t LD, tpu_val_t piv, tpu_val_t X) {
  tpu_aval_t xa = *tpu_b_aval(b, X), bat = tpu_mx_retype(&xa, TPU_BOOL);
  bat.rank -= 2;
  int64_t n = xa.dims[xa.rank - 2];
  tpu_val_t init[4] = {X, tpu_b_full(b, &bat, 0), LD, piv}, res[4];
  tpu_mx_for(b, n, 4, init, tpu_ldl_forward_step, NULL, res);
  init[0] = res[0];
  tpu_mx_for(b, n, 4, init, tpu_ldl_backward_step, NULL, res);
  return res[0];
}

/* ------------------------------------------------------------- lowerings */

/* linalg_ldl_factor_ex(self, *, hermitian=False, check_errors=False) -> (LD, pivots, info).
 * hermitian only matters for complex input. */
static tpu_status_t* tpu_lower_linalg_ldl_factor_ex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                    int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_mx_check_input(b, &a, "torch.linalg.ldl_factor_ex", "ldl_factor_kernel_tpu", true)) return NULL;
  tpu_aval_t pa = tpu_mx_retype(&a, TPU_I32), ia = pa, fa = tpu_mx_retype(&a, TPU_BOOL);
  pa.rank -= 1;
  ia.rank -= 2;
  fa.rank -= 2;
  tpu_val_t A = tpu_op_tensor(b, op, 0);
  /* the lower triangle, mirrored: sytrf('L') reads nothing else */
  tpu_val_t W = tpu_b_select(b, tpu_mx_tri_pred(b, &a, true), A, tpu_mx_mT(b, A));
  tpu_val_t init[5] = {W, tpu_b_full(b, &a, 0), tpu_b_full(b, &pa, 0), tpu_b_full(b, &fa, 0), tpu_b_full(b, &ia, 0)};
  tpu_val_t res[5] = {W, A, init[2], init[3], init[4]}; /* n = 0: nothing to factor */
  if (a.dims[a.rank - 1] > 0) tpu_mx_for(b, a.dims[a.rank - 1], 5, init, tpu_ldl_factor_step, NULL, res);
  if (tpu_op_bool(op, 2, false)) {
    int64_t all[TPU_MAX_RANK];
    for (int i = 0; i < ia.rank; i++) all[i] = i;
    tpu_val_t worst = tpu_b_reduce(b, res[4], tpu_b_const_i(b, TPU_I32, 0), ia.rank, all, "stablehlo.maximum");
    worst = tpu_b_convert(b, worst, TPU_I64);
    tpu_op_check(b, op, tpu_b_compare(b, "GT", worst, tpu_b_const_i(b, TPU_I64, 0)), worst, TPU_INVALID_ARGUMENT,
                 "torch.linalg.ldl_factor_ex: The factorization could not be completed because the block diagonal "
                 "matrix D is singular: pivot {} is zero.");
  }
  outs[0] = res[1];
  outs[1] = res[2];
  outs[2] = res[4];
  *nouts = 3;
  return NULL;
}

/* x (batch..., last `keep` dims) broadcast to batch dims bd (nb of them). */
static tpu_val_t tpu_ldl_bcast(tpu_builder_t* b, tpu_val_t x, int nb, const int64_t* bd, int keep) {
  tpu_aval_t xa = *tpu_b_aval(b, x);
  int64_t dims[TPU_MAX_RANK], map[TPU_MAX_RANK];
  for (int i = 0; i < nb; i++) dims[i] = bd[i];
  for (int i = 0; i < keep; i++) dims[nb + i] = xa.dims[xa.rank - keep + i];
  for (int i = 0; i < xa.rank; i++) map[i] = nb + keep - xa.rank + i;
  return tpu_b_broadcast_in_dim(b, x, nb + keep, dims, map);
}

/* The batch dims of LD (batch..., n, n) and B (batch..., n, q) broadcast
 * together into bd; false (and a failure) when they do not broadcast. */
static bool tpu_ldl_batch(tpu_builder_t* b, const tpu_aval_t* la, const tpu_aval_t* xa, int* nb, int64_t* bd) {
  int lb = la->rank - 2, xb = xa->rank - 2;
  *nb = lb > xb ? lb : xb;
  for (int i = 0; i < *nb; i++) {
    int il = i - (*nb - lb), ix = i - (*nb - xb);
    int64_t l = il >= 0 ? la->dims[il] : 1, x = ix >= 0 ? xa->dims[ix] : 1;
    if (l != x && l != 1 && x != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                 ") at non-singleton dimension %d", l, x, i);
      return false;
    }
    bd[i] = l == 1 ? x : l;
  }
  return true;
}

/* ATen's checks of ldl_solve's pivots and B against LD (la). */
static bool tpu_ldl_solve_check(tpu_builder_t* b, const tpu_aval_t* la, const tpu_aval_t* pa, const tpu_aval_t* xa) {
  const char* api = "torch.linalg.ldl_solve";
  if (!tpu_mx_check_input(b, la, api, "ldl_solve_tpu", true)) return false;
  bool same = pa->rank == la->rank - 1;
  for (int i = 0; same && i < pa->rank; i++) same = pa->dims[i] == la->dims[i];
  char buf[160];
  if (!same || tpu_dtype_is_float(pa->dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected LD.shape[:-1] and pivots.shape to be the same, but got pivots "
               "with shape %s instead", api, tpu_nn_fmt_shape(buf, sizeof buf, pa->rank, pa->dims));
    return false;
  }
  if (xa->rank < 2) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension out of range (expected to be in range of [-1, 0], but got -2)");
    return false;
  }
  if (xa->dtype != la->dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected b and A to have the same dtype, but found b of type %s and A of "
               "type %s instead.", tpu_dtype_scalar_type_name(xa->dtype), tpu_dtype_scalar_type_name(la->dtype));
    return false;
  }
  int64_t n = la->dims[la->rank - 1];
  if (xa->dims[xa->rank - 2] != n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Incompatible matrix sizes for %s: each A matrix is %" PRId64 " by %" PRId64
               " but each b matrix is %" PRId64 " by %" PRId64, api, n, n, xa->dims[xa->rank - 2],
               xa->dims[xa->rank - 1]);
    return false;
  }
  return true;
}

/* linalg_ldl_solve(LD, pivots, B, *, hermitian=False) -> Tensor */
static tpu_status_t* tpu_lower_linalg_ldl_solve(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t la = tpu_op_aval(op, 0), pa = tpu_op_aval(op, 1), xa = tpu_op_aval(op, 2);
  int nb;
  int64_t bd[TPU_MAX_RANK];
  if (!tpu_ldl_solve_check(b, &la, &pa, &xa) || !tpu_ldl_batch(b, &la, &xa, &nb, bd)) return NULL;
  tpu_val_t X = tpu_ldl_bcast(b, tpu_op_tensor(b, op, 2), nb, bd, 2);
  if (la.dims[la.rank - 1] == 0) return tpu_ops_result1(X, outs, nouts);
  tpu_val_t LD = tpu_ldl_bcast(b, tpu_op_tensor(b, op, 0), nb, bd, 2);
  tpu_val_t piv = tpu_ldl_bcast(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), TPU_I32), nb, bd, 1);
  return tpu_ops_result1(tpu_ldl_solve(b, LD, piv, X), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_ldl[] = {
    {"linalg_ldl_factor_ex", tpu_lower_linalg_ldl_factor_ex},
    {"linalg_ldl_solve", tpu_lower_linalg_ldl_solve},
    {NULL, NULL},
};
