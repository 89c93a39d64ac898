/* The complex QR iteration's own parts (eig.h): LAPACK zlahqr's single-shift
 * algorithm on a complex upper Hessenberg matrix with a real subdiagonal. The
 * iteration itself is eig.c's (every matrix its own window and counters, one
 * outer iteration deflates or chases one bulge in each, the chase with 2-row
 * reflectors); this file gives it the shift, the sweep's start and the
 * realignment of the subdiagonal after a sweep.
 *
 * zlahqr's deflation test, Wilkinson shift (with its exceptional shifts after
 * 10 and 20 iterations without a deflation), search for two consecutive small
 * subdiagonal entries and 2-element reflectors. One change: zlahqr keeps the
 * subdiagonal real inside a sweep with its special scaling; here a sweep runs
 * with general reflectors, and a diagonal unitary similarity then makes the
 * subdiagonal real and non-negative again (its phases' running sums as one
 * product with a triangular matrix), which the next iteration's tests need. */
#include "eig.h"

#include <math.h>

/* zlahqr's shift t (B) complex for window [l, i] after kdefl iterations
 * without a deflation. */
static tpu_val_t tpu_eigc_shift(tpu_builder_t* b, tpu_val_t d, tpu_val_t sub, tpu_val_t sup, tpu_val_t i, tpu_val_t l,
                                tpu_val_t kdefl) {
  tpu_val_t one = tpu_ops_like(b, i, 1);
  tpu_val_t di = tpu_eig_at(b, d, i), si = tpu_eig_at(b, sub, i), dm = tpu_eig_at(b, d, tpu_nn_sub(b, i, one));
  tpu_val_t rz = tpu_eig_abs(b, si), r0 = tpu_ops_like(b, rz, 0), r1 = tpu_ops_like(b, rz, 1);
  tpu_val_t rem20 = tpu_b_binary(b, "stablehlo.remainder", kdefl, tpu_ops_like(b, kdefl, 20));
  tpu_val_t rem10 = tpu_b_binary(b, "stablehlo.remainder", kdefl, tpu_ops_like(b, kdefl, 10));
  tpu_val_t at_i = tpu_eig_cmp(b, "EQ", rem20, tpu_ops_like(b, rem20, 0));
  tpu_val_t exc = tpu_eig_cmp(b, "EQ", rem10, tpu_ops_like(b, rem10, 0));
  /* exceptional: 3/4 |re H(i, i-1)| + H(i, i), or the same at l */
  tpu_val_t se = tpu_b_select(b, at_i, tpu_eig_abs(b, tpu_ops_part(b, si, false)),
                              tpu_eig_abs(b, tpu_ops_part(b, tpu_eig_at(b, sub, tpu_nn_add(b, l, one)), false)));
  tpu_val_t te = tpu_nn_add(b, tpu_ops_complex(b, tpu_nn_mulc(b, se, 0.75), r0), tpu_b_select(b, at_i, di, tpu_eig_at(b, d, l)));
  /* Wilkinson: the eigenvalue of the trailing 2 x 2 block nearer H(i, i) */
  tpu_val_t u = tpu_nn_mul(b, tpu_eig_sqrt(b, tpu_eig_at(b, sup, i)), tpu_eig_sqrt(b, si));
  tpu_val_t su = tpu_mx_cabs1(b, u);
  tpu_val_t x = tpu_nn_mulc(b, tpu_nn_sub(b, dm, di), 0.5);
  tpu_val_t sx = tpu_mx_cabs1(b, x), s = tpu_eig_max(b, su, sx);
  tpu_val_t sc = tpu_ops_complex(b, tpu_b_select(b, tpu_eig_cmp(b, "EQ", s, r0), r1, s), r0);
  tpu_val_t xs = tpu_nn_div(b, x, sc), us = tpu_nn_div(b, u, sc);
  tpu_val_t y = tpu_nn_mul(b, sc, tpu_eig_sqrt(b, tpu_nn_add(b, tpu_nn_mul(b, xs, xs), tpu_nn_mul(b, us, us))));
  tpu_val_t xu = tpu_nn_div(b, x, tpu_ops_complex(b, tpu_b_select(b, tpu_eig_cmp(b, "GT", sx, r0), sx, r1), r0));
  tpu_val_t dot = tpu_nn_add(b, tpu_nn_mul(b, tpu_ops_part(b, xu, false), tpu_ops_part(b, y, false)),
                             tpu_nn_mul(b, tpu_ops_part(b, xu, true), tpu_ops_part(b, y, true)));
  y = tpu_b_select(b, tpu_eig_and(b, tpu_eig_cmp(b, "GT", sx, r0), tpu_eig_cmp(b, "LT", dot, r0)),
                   tpu_b_unary(b, "stablehlo.negate", y), y);
  tpu_val_t xy = tpu_nn_add(b, x, y);
  tpu_val_t xyz = tpu_eig_cmp(b, "EQ", tpu_mx_cabs1(b, xy), r0);
  tpu_val_t tw = tpu_nn_sub(b, di, tpu_nn_mul(b, u, tpu_nn_div(b, u, tpu_b_select(b, xyz, tpu_ops_complex(b, r1, r0), xy))));
  tw = tpu_b_select(b, tpu_eig_or(b, tpu_eig_cmp(b, "EQ", su, r0), xyz), di, tw);
  return tpu_b_select(b, exc, te, tw);
}

/* zlahqr's start of the single-shift sweep: the largest m in [l, i-1] past
 * two consecutive small subdiagonal entries (m = l at the latest), and the
 * sweep's first column *v (B, 2). */
static tpu_val_t tpu_eigc_start(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub, tpu_val_t i,
                                tpu_val_t l, tpu_val_t t, tpu_val_t* v) {
  tpu_aval_t va = *tpu_b_aval(b, d);
  tpu_val_t h11 = d, h22 = tpu_eig_shift(b, d, 1);
  tpu_val_t h11s = tpu_nn_sub(b, h11, tpu_mx_bcast_batch(b, t, &va));
  tpu_val_t h21r = tpu_ops_part(b, tpu_eig_shift(b, sub, 1), false), h21 = tpu_eig_abs(b, h21r);
  tpu_val_t s = tpu_nn_add(b, tpu_mx_cabs1(b, h11s), h21);
  tpu_val_t r0 = tpu_ops_like(b, s, 0);
  tpu_val_t s1 = tpu_b_select(b, tpu_eig_cmp(b, "EQ", s, r0), tpu_ops_like(b, s, 1), s);
  tpu_val_t v1 = tpu_nn_div(b, h11s, tpu_ops_complex(b, s1, r0)), v2 = tpu_nn_div(b, h21r, s1);
  tpu_val_t h10 = tpu_eig_abs(b, tpu_ops_part(b, sub, false));
  tpu_val_t lhs = tpu_nn_mul(b, h10, tpu_eig_abs(b, v2));
  tpu_val_t rhs = tpu_nn_mulc(b, tpu_nn_mul(b, tpu_mx_cabs1(b, v1), tpu_nn_add(b, tpu_mx_cabs1(b, h11), tpu_mx_cabs1(b, h22))), c->ulp);
  tpu_val_t idx = tpu_eig_iota(b, d, 1);
  tpu_aval_t ia = *tpu_b_aval(b, idx);
  tpu_val_t lv = tpu_mx_bcast_batch(b, l, &ia), i1 = tpu_nn_sub(b, tpu_mx_bcast_batch(b, i, &ia), tpu_b_full(b, &ia, 1));
  tpu_val_t stop = tpu_eig_or(b, tpu_eig_cmp(b, "EQ", idx, lv), tpu_eig_cmp(b, "LE", lhs, rhs));
  tpu_val_t ok = tpu_eig_and(b, stop, tpu_eig_and(b, tpu_eig_cmp(b, "GE", idx, lv), tpu_eig_cmp(b, "LE", idx, i1)));
  int64_t last = 1;
  tpu_val_t m = tpu_b_reduce(b, tpu_b_select(b, ok, idx, tpu_b_full(b, &ia, -1)), tpu_b_const_i(b, TPU_I32, -1), 1, &last,
                             "stablehlo.maximum");
  tpu_val_t v2c = tpu_ops_complex(b, v2, tpu_ops_like(b, v2, 0));
  tpu_val_t vm[2] = {tpu_eig_at(b, v1, m), tpu_eig_at(b, v2c, m)};
  *v = tpu_mx_columns(b, 2, vm);
  return m;
}

/* H <- D^H H D, Z <- Z D for the sweeping matrices, D diagonal unitary with
 * d_k = exp(i (arg H(1,0) + ... + arg H(k,k-1))): the subdiagonal becomes
 * |H(k, k-1)|, exactly. */
void tpu_eig_complex_realify(tpu_builder_t* b, tpu_val_t* H, tpu_val_t* Z, tpu_val_t sweep, bool vectors) {
  tpu_val_t d, sub, sup;
  tpu_eig_diagonals(b, *H, &d, &sub, &sup);
  tpu_val_t re = tpu_ops_part(b, sub, false), im = tpu_ops_part(b, sub, true);
  tpu_aval_t va = *tpu_b_aval(b, re), m = *tpu_b_aval(b, *H);
  tpu_val_t th = tpu_b_select(b, tpu_mx_bcast_batch(b, sweep, &va), tpu_b_binary(b, "stablehlo.atan2", im, re),
                              tpu_b_full(b, &va, 0));
  int64_t N = va.dims[1], nn[2] = {N, N}, bd = 0, c1 = 1, c0 = 0;
  (void)bd;
  tpu_aval_t sq = tpu_aval_make(TPU_I32, 2, nn), rq = tpu_aval_make(va.dtype, 2, nn);
  tpu_val_t upper = tpu_b_select(b, tpu_eig_cmp(b, "LE", tpu_b_iota(b, &sq, 0), tpu_b_iota(b, &sq, 1)), tpu_b_full(b, &rq, 1),
                                 tpu_b_full(b, &rq, 0));
  tpu_val_t phi = tpu_b_dot_general(b, th, upper, 0, NULL, NULL, 1, &c1, &c0, va.dtype); /* running sums */
  tpu_val_t dv = tpu_ops_complex(b, tpu_b_unary(b, "stablehlo.cosine", phi), tpu_b_unary(b, "stablehlo.sine", phi));
  tpu_val_t Hn = tpu_nn_mul(b, tpu_nn_mul(b, *H, tpu_mx_bcast_vec(b, tpu_ops_conj(b, dv), &m, false)),
                            tpu_mx_bcast_vec(b, dv, &m, true));
  /* the subdiagonal exactly |H(k, k-1)| */
  tpu_val_t ri = tpu_eig_iota(b, *H, 1), ci = tpu_eig_iota(b, *H, 2);
  tpu_val_t on_sub = tpu_eig_cmp(b, "EQ", ri, tpu_nn_add(b, ci, tpu_ops_like(b, ci, 1)));
  tpu_val_t asub = tpu_ops_complex(b, tpu_eig_abs(b, sub), tpu_b_full(b, &va, 0));
  tpu_val_t subm = tpu_mx_bcast_vec(b, asub, &m, false); /* row k holds |H(k, k-1)| */
  Hn = tpu_b_select(b, tpu_eig_and(b, on_sub, tpu_mx_bcast_batch(b, sweep, &m)), subm, Hn);
  *H = Hn;
  if (vectors) {
    tpu_aval_t za = *tpu_b_aval(b, *Z);
    *Z = tpu_nn_mul(b, *Z, tpu_mx_bcast_vec(b, dv, &za, true));
  }
}

tpu_val_t tpu_eig_complex_start(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub, tpu_val_t sup,
                                tpu_val_t i, tpu_val_t l, tpu_val_t kdefl, tpu_val_t* v) {
  return tpu_eigc_start(b, c, d, sub, i, l, tpu_eigc_shift(b, d, sub, sup, i, l, kdefl), v);
}
