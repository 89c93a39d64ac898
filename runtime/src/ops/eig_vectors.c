/* The general eigendecomposition's Schur blocks and eigenvectors (eig.h),
 * LAPACK dgeev's last steps: dlanv2 on the real Schur form's 2 x 2 blocks
 * (equal diagonal entries for a complex pair, real pairs split), the complex
 * triangularisation of those blocks, back substitution for the eigenvectors
 * of a triangular Schur form (ztrevc), and their normalisation with dgeev's
 * and zgeev's conventions. See eig.c for the whole algorithm. */
#include <float.h>
#include <math.h>

#include "eig.h"

/* Fortran's SIGN(|x|, s): |x| with the sign of s (s = 0 counts as positive). */
static tpu_val_t tpu_eig_sign(tpu_builder_t* b, tpu_val_t x, tpu_val_t s) {
  tpu_val_t ax = tpu_eig_abs(b, x);
  return tpu_b_select(b, tpu_eig_cmp(b, "GE", s, tpu_ops_like(b, s, 0)), ax, tpu_b_unary(b, "stablehlo.negate", ax));
}
/* ------------------------------------------------ 3. standard 2 x 2 blocks */

/* dlanv2's general case when the eigenvalues are complex or nearly equal: a
 * rotation making the diagonal entries equal, then a real pair (off-diagonal
 * entries of one sign) made triangular, and b = 0 a swap. */
static void tpu_eig_lanv2_equal(tpu_builder_t* b, const tpu_val_t* blk, tpu_val_t* out, tpu_val_t* cs, tpu_val_t* sn) {
  tpu_val_t a = blk[0], bb = blk[1], cc = blk[2], dd = blk[3];
  tpu_val_t z0 = tpu_ops_like(b, a, 0), one = tpu_ops_like(b, a, 1);
  tpu_val_t temp = tpu_nn_sub(b, a, dd), p = tpu_nn_mulc(b, temp, 0.5);
  tpu_val_t sigma = tpu_nn_add(b, bb, cc), tau = tpu_eig_hypot(b, sigma, temp);
  tpu_val_t ccs = tpu_eig_sqrt(b, tpu_nn_mulc(b, tpu_nn_addc(b, tpu_eig_div(b, tpu_eig_abs(b, sigma), tau), 1), 0.5));
  tpu_val_t csn = tpu_nn_mul(b, tpu_b_unary(b, "stablehlo.negate", tpu_eig_div(b, p, tpu_nn_mul(b, tau, ccs))),
                             tpu_eig_sign(b, one, sigma));
  tpu_val_t aa = tpu_nn_add(b, tpu_nn_mul(b, a, ccs), tpu_nn_mul(b, bb, csn));
  tpu_val_t b1 = tpu_nn_sub(b, tpu_nn_mul(b, bb, ccs), tpu_nn_mul(b, a, csn));
  tpu_val_t c1 = tpu_nn_add(b, tpu_nn_mul(b, cc, ccs), tpu_nn_mul(b, dd, csn));
  tpu_val_t d1 = tpu_nn_sub(b, tpu_nn_mul(b, dd, ccs), tpu_nn_mul(b, cc, csn));
  tpu_val_t b2 = tpu_nn_add(b, tpu_nn_mul(b, b1, ccs), tpu_nn_mul(b, d1, csn));
  tpu_val_t c2 = tpu_nn_sub(b, tpu_nn_mul(b, c1, ccs), tpu_nn_mul(b, aa, csn));
  tpu_val_t mid = tpu_nn_mulc(b, tpu_nn_add(b, tpu_nn_add(b, tpu_nn_mul(b, aa, ccs), tpu_nn_mul(b, c1, csn)),
                                            tpu_nn_sub(b, tpu_nn_mul(b, d1, ccs), tpu_nn_mul(b, b1, csn))), 0.5);
  /* ... then a real pair (b2, c2 of one sign) becomes triangular, and b2 = 0 swaps */
  tpu_val_t c2z = tpu_eig_cmp(b, "EQ", c2, z0), b2z = tpu_eig_cmp(b, "EQ", b2, z0);
  tpu_val_t same = tpu_eig_and(b, tpu_eig_not(b, c2z), tpu_eig_and(b, tpu_eig_not(b, b2z),
                               tpu_eig_cmp(b, "EQ", tpu_eig_sign(b, one, b2), tpu_eig_sign(b, one, c2))));
  tpu_val_t swap = tpu_eig_and(b, tpu_eig_not(b, c2z), b2z);
  tpu_val_t sab = tpu_eig_sqrt(b, tpu_eig_abs(b, b2)), sac = tpu_eig_sqrt(b, tpu_eig_abs(b, c2));
  tpu_val_t pp = tpu_eig_sign(b, tpu_nn_mul(b, sab, sac), c2);
  tpu_val_t tau2 = tpu_eig_div(b, one, tpu_eig_sqrt(b, tpu_eig_abs(b, tpu_nn_add(b, b2, c2))));
  tpu_val_t cs1 = tpu_nn_mul(b, sab, tau2), sn1 = tpu_nn_mul(b, sac, tau2);
  tpu_val_t r[4] = {tpu_b_select(b, same, tpu_nn_add(b, mid, pp), mid),
                        tpu_b_select(b, same, tpu_nn_sub(b, b2, c2), tpu_b_select(b, swap, tpu_b_unary(b, "stablehlo.negate", c2), b2)),
                        tpu_b_select(b, tpu_eig_or(b, same, swap), z0, c2),
                        tpu_b_select(b, same, tpu_nn_sub(b, mid, pp), mid)};
  *cs = tpu_b_select(b, same, tpu_nn_sub(b, tpu_nn_mul(b, ccs, cs1), tpu_nn_mul(b, csn, sn1)),
                                tpu_b_select(b, swap, tpu_b_unary(b, "stablehlo.negate", csn), ccs));
  *sn = tpu_b_select(b, same, tpu_nn_add(b, tpu_nn_mul(b, ccs, sn1), tpu_nn_mul(b, csn, cs1)),
                                tpu_b_select(b, swap, ccs, csn));
  for (int j = 0; j < 4; j++) out[j] = r[j];
}

/* dlanv2 on the blocks [[a, bb], [cc, dd]] (B each): the standardised block
 * (out[0..3]), the rotation (cs, sn) and the imaginary part rti >= 0. */
static void tpu_eig_lanv2(tpu_builder_t* b, const tpu_eig_ctx_t* c, const tpu_val_t* blk, tpu_val_t* out,
                          tpu_val_t* cs, tpu_val_t* sn, tpu_val_t* rti) {
  tpu_val_t a = blk[0], bb = blk[1], cc = blk[2], dd = blk[3];
  tpu_val_t z0 = tpu_ops_like(b, a, 0), one = tpu_ops_like(b, a, 1);
  tpu_val_t c0 = tpu_eig_cmp(b, "EQ", cc, z0), b0 = tpu_eig_cmp(b, "EQ", bb, z0);
  tpu_val_t sgn_differ = tpu_eig_cmp(b, "NE", tpu_eig_sign(b, one, bb), tpu_eig_sign(b, one, cc));
  tpu_val_t std = tpu_eig_and(b, tpu_eig_cmp(b, "EQ", tpu_nn_sub(b, a, dd), z0), sgn_differ);
  /* the general case */
  tpu_val_t temp = tpu_nn_sub(b, a, dd), p = tpu_nn_mulc(b, temp, 0.5);
  tpu_val_t bcmax = tpu_eig_max(b, tpu_eig_abs(b, bb), tpu_eig_abs(b, cc));
  tpu_val_t bcmis = tpu_nn_mul(b, tpu_nn_mul(b, tpu_eig_min(b, tpu_eig_abs(b, bb), tpu_eig_abs(b, cc)), tpu_eig_sign(b, one, bb)),
                               tpu_eig_sign(b, one, cc));
  tpu_val_t scale = tpu_eig_max(b, tpu_eig_abs(b, p), bcmax);
  tpu_val_t z = tpu_nn_add(b, tpu_nn_mul(b, tpu_eig_div(b, p, scale), p), tpu_nn_mul(b, tpu_eig_div(b, bcmax, scale), bcmis));
  tpu_val_t real = tpu_eig_cmp(b, "GE", z, tpu_ops_like(b, z, 4 * c->ulp));
  /* real eigenvalues: an upper triangular block */
  tpu_val_t zr = tpu_nn_add(b, p, tpu_eig_sign(b, tpu_nn_mul(b, tpu_eig_sqrt(b, scale), tpu_eig_sqrt(b, tpu_eig_abs(b, z))), p));
  tpu_val_t tau_r = tpu_eig_hypot(b, cc, zr);
  tpu_val_t r_out[4] = {tpu_nn_add(b, dd, zr), tpu_nn_sub(b, bb, cc), z0,
                        tpu_nn_sub(b, dd, tpu_nn_mul(b, tpu_eig_div(b, bcmax, zr), bcmis))};
  tpu_val_t r_cs = tpu_eig_div(b, zr, tau_r), r_sn = tpu_eig_div(b, cc, tau_r);
  tpu_val_t x_out[4], x_cs, x_sn;
  tpu_eig_lanv2_equal(b, blk, x_out, &x_cs, &x_sn);
  /* the cases in dlanv2's order: c = 0, b = 0, already standard, real, complex */
  tpu_val_t keep = tpu_eig_or(b, c0, std);
  tpu_val_t swap0 = tpu_eig_and(b, tpu_eig_not(b, c0), b0);
  tpu_val_t in_swap[4] = {dd, tpu_b_unary(b, "stablehlo.negate", cc), z0, a};
  for (int j = 0; j < 4; j++)
    out[j] = tpu_b_select(b, keep, blk[j], tpu_b_select(b, swap0, in_swap[j], tpu_b_select(b, real, r_out[j], x_out[j])));
  *cs = tpu_b_select(b, keep, one, tpu_b_select(b, swap0, z0, tpu_b_select(b, real, r_cs, x_cs)));
  *sn = tpu_b_select(b, keep, z0, tpu_b_select(b, swap0, one, tpu_b_select(b, real, r_sn, x_sn)));
  tpu_val_t cz = tpu_eig_cmp(b, "EQ", out[2], z0);
  *rti = tpu_b_select(b, cz, z0, tpu_nn_mul(b, tpu_eig_sqrt(b, tpu_eig_abs(b, out[1])), tpu_eig_sqrt(b, tpu_eig_abs(b, out[2]))));
}

/* (p, q) <- (m0 p + m1 q, m2 p + m3 q) for the rows (dim 1) or columns (dim 2)
 * k, k+1 of x, per-batch coefficients m (B each): dlanv2's rotations (drot:
 * cs, sn, -sn, cs) and the complex triangularisation's unitary transforms. */
static tpu_val_t tpu_eig_mix(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t k, const tpu_val_t* m) {
  tpu_val_t band = tpu_eig_band(b, x, dim, k, 2);
  tpu_val_t p = tpu_mx_slice(b, band, dim, 0, 1), q = tpu_mx_slice(b, band, dim, 1, 2);
  tpu_aval_t pa = *tpu_b_aval(b, p);
  tpu_val_t mb[4];
  for (int j = 0; j < 4; j++) mb[j] = tpu_mx_bcast_batch(b, m[j], &pa);
  tpu_val_t np[2] = {tpu_nn_add(b, tpu_nn_mul(b, mb[0], p), tpu_nn_mul(b, mb[1], q)),
                     tpu_nn_add(b, tpu_nn_mul(b, mb[2], p), tpu_nn_mul(b, mb[3], q))};
  return tpu_eig_put_band(b, x, tpu_b_concat(b, 2, np, dim), dim, k);
}

/* Step k of the standardisation pass. Carry: H, Z, wi (B, N). */
static void tpu_eig_std_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_eig_ctx_t* c = ctx;
  tpu_val_t H = in[0];
  int64_t B = tpu_b_aval(b, H)->dims[0], d2[3] = {B, 2, 2};
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0), st[3] = {z, k, k};
  tpu_val_t blk4 = tpu_b_dynamic_slice(b, H, st, d2);
  tpu_val_t blk[4], nb[4], cs, sn, rti;
  int64_t f4[2] = {B, 4};
  tpu_val_t flat = tpu_b_reshape(b, blk4, 2, f4);
  for (int j = 0; j < 4; j++) blk[j] = tpu_mx_column(b, flat, j);
  tpu_eig_lanv2(b, c, blk, nb, &cs, &sn, &rti);
  tpu_val_t rot[4] = {cs, sn, tpu_b_unary(b, "stablehlo.negate", sn), cs};
  H = tpu_eig_mix(b, tpu_eig_mix(b, H, 1, k, rot), 2, k, rot);
  out[0] = tpu_b_dynamic_update_slice(b, H, tpu_b_reshape(b, tpu_mx_columns(b, 4, nb), 3, d2), st);
  out[1] = c->vectors ? tpu_eig_mix(b, in[1], 2, k, rot) : in[1];
  tpu_val_t blkw = tpu_eig_cmp(b, "NE", blk[2], tpu_ops_like(b, blk[2], 0));
  tpu_val_t k1 = tpu_nn_add(b, k, tpu_b_const_i(b, TPU_I32, 1));
  tpu_val_t wi = tpu_mx_put(b, in[2], k, tpu_b_select(b, blkw, rti, tpu_mx_take(b, in[2], 1, k)));
  out[2] = tpu_mx_put(b, wi, k1, tpu_b_select(b, blkw, tpu_b_unary(b, "stablehlo.negate", rti), tpu_mx_take(b, wi, 1, k1)));
}

/* ------------------------------------------------------- 4. eigenvectors */

/* Step k of the complex triangularisation: a block with wi[k] > 0, standard
 * [[a, bb], [cc, a]], has the eigenvector (bb, i s) for a + i s (s = wi[k]);
 * G = [[c, i g], [i g, c]] (c = bb / r, g = s / r) is unitary with it as
 * first column, and G^H T G is triangular there. Carry: T, Z (B, n, n)
 * complex, wi (B, n). */
static void tpu_eig_cschur_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t T = in[0], wi = in[2];
  int64_t B = tpu_b_aval(b, T)->dims[0], d2[3] = {B, 2, 2};
  tpu_val_t s = tpu_mx_take(b, wi, 1, k), z0 = tpu_ops_like(b, s, 0);
  tpu_val_t blkw = tpu_eig_cmp(b, "GT", s, z0);
  tpu_val_t zi = tpu_b_const_i(b, TPU_I32, 0), st[3] = {zi, k, k};
  int64_t f4[2] = {B, 4};
  tpu_val_t flat = tpu_b_reshape(b, tpu_b_dynamic_slice(b, T, st, d2), 2, f4);
  tpu_val_t a = tpu_ops_part(b, tpu_mx_column(b, flat, 0), false), bb = tpu_ops_part(b, tpu_mx_column(b, flat, 1), false);
  tpu_val_t r = tpu_eig_hypot(b, bb, s);
  tpu_val_t cr = tpu_b_select(b, blkw, tpu_eig_div(b, bb, r), tpu_ops_like(b, s, 1));
  tpu_val_t g = tpu_b_select(b, blkw, tpu_eig_div(b, s, r), z0);
  tpu_val_t cc = tpu_ops_complex(b, cr, z0), ig = tpu_ops_complex(b, z0, g), mig = tpu_ops_complex(b, z0, tpu_b_unary(b, "stablehlo.negate", g));
  /* rows by G^H = [[c, -i g], [-i g, c]]; columns (of T and Z) by G */
  tpu_val_t rows[4] = {cc, mig, mig, cc}, cols[4] = {cc, ig, ig, cc};
  out[0] = tpu_eig_mix(b, tpu_eig_mix(b, T, 1, k, rows), 2, k, cols);
  out[1] = tpu_eig_mix(b, in[1], 2, k, cols);
  tpu_val_t lam[4] = {tpu_ops_complex(b, a, s), tpu_mx_column(b, flat, 1), tpu_ops_complex(b, z0, z0),
                      tpu_ops_complex(b, a, tpu_b_unary(b, "stablehlo.negate", s))};
  tpu_val_t blk = tpu_eig_band(b, tpu_eig_band(b, out[0], 1, k, 2), 2, k, 2);
  tpu_val_t fixed = tpu_b_reshape(b, tpu_mx_columns(b, 4, lam), 3, d2);
  tpu_aval_t ba = *tpu_b_aval(b, blk);
  /* the new (k, k+1) entry is what the rotation made it; the rest are exact */
  tpu_val_t ri = tpu_eig_iota(b, blk, 1), ci = tpu_eig_iota(b, blk, 2);
  tpu_val_t upper = tpu_eig_and(b, tpu_eig_cmp(b, "EQ", ri, tpu_b_full(b, tpu_b_aval(b, ri), 0)),
                                tpu_eig_cmp(b, "EQ", ci, tpu_b_full(b, tpu_b_aval(b, ci), 1)));
  fixed = tpu_b_select(b, upper, blk, fixed);
  blk = tpu_b_select(b, tpu_mx_bcast_batch(b, blkw, &ba), fixed, blk);
  out[0] = tpu_b_dynamic_update_slice(b, out[0], blk, st);
  out[2] = wi;
}

/* Row j = n - 1 - cnt of X, the eigenvectors of the upper triangular T (all
 * eigenvalues w at once, X upper triangular with unit diagonal): X[j, i] =
 * -(T[j, j+1:] X[j+1:, i]) / (T[j, j] - w[i]) for i > j. A pivot below smin
 * is raised to it; a column whose entry would pass `big` is scaled down first
 * (its direction is all that matters). Carry: T, X (B, n, n), w (B, n). */
static void tpu_eig_trevc_step(tpu_builder_t* b, void* ctx, tpu_val_t cnt, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_eig_ctx_t* c = ctx;
  tpu_val_t T = in[0], X = in[1], w = in[2];
  tpu_aval_t m = *tpu_b_aval(b, X), v = tpu_mx_drop(&m, 1), rv = tpu_mx_retype(&v, c->t);
  tpu_val_t j = tpu_nn_sub(b, tpu_b_const_i(b, TPU_I32, (int32_t)c->n - 1), cnt);
  tpu_val_t row = tpu_mx_take(b, T, 1, j), ci = tpu_eig_iota(b, row, 1);
  tpu_aval_t ia = *tpu_b_aval(b, ci);
  tpu_val_t jv = tpu_b_broadcast_in_dim(b, j, ia.rank, ia.dims, NULL);
  tpu_val_t right = tpu_eig_cmp(b, "GT", ci, jv);
  tpu_val_t tm = tpu_b_select(b, right, row, tpu_b_full(b, &v, 0));
  int64_t bd = 0, ct = 1, cx = 1;
  tpu_val_t r = tpu_b_dot_general(b, tm, X, 1, &bd, &bd, 1, &ct, &cx, m.dtype); /* (B, n) */
  tpu_val_t dv = tpu_nn_sub(b, tpu_mx_bcast_batch(b, tpu_mx_take(b, row, 1, j), &v), w);
  tpu_val_t wa = tpu_nn_add(b, tpu_eig_abs(b, tpu_ops_part(b, w, false)), tpu_eig_abs(b, tpu_ops_part(b, w, true)));
  tpu_val_t smin = tpu_eig_max(b, tpu_nn_mulc(b, wa, c->ulp), tpu_b_full(b, &rv, c->smlnum));
  tpu_val_t ad = tpu_eig_abs(b, dv);
  tpu_val_t tiny = tpu_eig_cmp(b, "LT", ad, smin);
  dv = tpu_b_select(b, tiny, tpu_ops_complex(b, smin, tpu_b_full(b, &rv, 0)), dv);
  ad = tpu_eig_max(b, ad, smin);
  /* |r| / |d| > big: scale the column (and r) by big |d| / |r| */
  double big = c->t == TPU_F64 ? 1e150 : 1e18;
  tpu_val_t ar = tpu_eig_abs(b, r), lim = tpu_nn_mulc(b, ad, big);
  tpu_val_t over = tpu_eig_and(b, right, tpu_eig_cmp(b, "GT", ar, lim));
  tpu_val_t f = tpu_b_select(b, over, tpu_eig_div(b, lim, ar), tpu_b_full(b, &rv, 1));
  tpu_val_t fc = tpu_ops_complex(b, f, tpu_b_full(b, &rv, 0));
  X = tpu_nn_mul(b, X, tpu_mx_bcast_vec(b, fc, &m, true));
  tpu_val_t x = tpu_b_unary(b, "stablehlo.negate", tpu_nn_div(b, tpu_nn_mul(b, r, fc), dv));
  tpu_val_t on = tpu_eig_cmp(b, "EQ", ci, jv);
  x = tpu_b_select(b, right, x, tpu_b_select(b, on, tpu_b_full(b, &v, 1), tpu_b_full(b, &v, 0)));
  int64_t rd[3] = {m.dims[0], 1, m.dims[2]};
  tpu_val_t zi = tpu_b_const_i(b, TPU_I32, 0), st[3] = {zi, j, zi};
  out[0] = T;
  out[1] = tpu_b_dynamic_update_slice(b, X, tpu_b_reshape(b, x, 3, rd), st);
  out[2] = w;
}

/* The eigenvectors V (B, n, n) complex with columns of norm 1, the vector of
 * a real eigenvalue real, a pair's second vector the conjugate of its first,
 * whose largest component is made real and positive; wi (B, n). For complex
 * input (wi TPU_NOVAL), as zgeev: every vector's largest component real. */
static tpu_val_t tpu_eig_assemble(tpu_builder_t* b, tpu_val_t V, tpu_val_t wi) {
  tpu_aval_t m = *tpu_b_aval(b, V), wa = tpu_mx_drop(&m, 1);
  wa.dtype = m.dtype == TPU_C64 ? TPU_F32 : TPU_F64;
  int64_t rows = 1;
  tpu_val_t rz = tpu_b_full(b, &wa, 0), ro = tpu_b_full(b, &wa, 1);
  /* scale by the largest |entry| first: the sum of squares cannot overflow */
  tpu_val_t cm = tpu_b_reduce(b, tpu_eig_abs(b, V), tpu_b_const(b, wa.dtype, 0), 1, &rows, "stablehlo.maximum");
  V = tpu_nn_mul(b, V, tpu_mx_bcast_vec(b, tpu_ops_complex(b, tpu_eig_div(b, ro, cm), rz), &m, true));
  tpu_val_t av = tpu_eig_abs(b, V);
  tpu_val_t nrm = tpu_eig_sqrt(b, tpu_mx_sum(b, tpu_nn_mul(b, av, av), 1));
  V = tpu_nn_mul(b, V, tpu_mx_bcast_vec(b, tpu_ops_complex(b, tpu_eig_div(b, ro, nrm), rz), &m, true));
  /* the phase of a complex pair's first vector */
  av = tpu_eig_abs(b, V);
  tpu_val_t top;
  tpu_b_argreduce(b, av, 1, true, NULL, &top);
  tpu_aval_t ia = tpu_mx_retype(&m, tpu_b_dtype(b, top));
  tpu_val_t hit = tpu_eig_cmp(b, "EQ", tpu_b_iota(b, &ia, 1), tpu_mx_bcast_vec(b, top, &ia, true));
  tpu_val_t p = tpu_mx_pick(b, hit, V, 1), ap = tpu_eig_abs(b, p);
  tpu_val_t turn = tpu_eig_cmp(b, "GT", ap, rz); /* complex input: every vector */
  if (wi != TPU_NOVAL) turn = tpu_eig_and(b, tpu_eig_cmp(b, "GT", wi, rz), turn);
  tpu_val_t ph = tpu_b_select(b, turn, tpu_nn_div(b, tpu_ops_conj(b, p), tpu_ops_complex(b, tpu_b_select(b, turn, ap, ro), rz)),
                    tpu_ops_complex(b, ro, rz));
  V = tpu_nn_mul(b, V, tpu_mx_bcast_vec(b, ph, &m, true));
  /* that component exactly real, as LAPACK sets it */
  tpu_aval_t rm = tpu_mx_retype(&m, wa.dtype);
  tpu_val_t top_real = tpu_eig_and(b, hit, tpu_mx_bcast_vec(b, turn, &ia, true));
  V = tpu_b_select(b, top_real, tpu_ops_complex(b, tpu_ops_part(b, V, false), tpu_b_full(b, &rm, 0)), V);
  if (wi == TPU_NOVAL) return V;
  /* second of a pair: conj of the column before; real eigenvalue: real vector */
  int64_t lo[3] = {0, 0, 1}, hi[3] = {0, 0, 0};
  tpu_val_t prev = tpu_b_pad(b, tpu_mx_slice(b, V, 2, 0, m.dims[2] - 1), tpu_b_const(b, m.dtype, 0), lo, hi, NULL);
  V = tpu_b_select(b, tpu_mx_bcast_vec(b, tpu_eig_cmp(b, "LT", wi, rz), &ia, true), tpu_ops_conj(b, prev), V);
  tpu_val_t realv = tpu_ops_complex(b, tpu_ops_part(b, V, false), tpu_b_full(b, &rm, 0));
  return tpu_b_select(b, tpu_mx_bcast_vec(b, tpu_eig_cmp(b, "EQ", wi, rz), &ia, true), realv, V);
}

/* The real Schur form's eigenvalues wr + i wi (dlanv2 on its 2 x 2 blocks) as
 * *wi and the complex w; with vectors, the complex triangular form *T and *Zc. */
tpu_val_t tpu_eig_real_blocks(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t H, tpu_val_t Z, tpu_val_t* wi,
                                     tpu_val_t* T, tpu_val_t* Zc) {
  int64_t n = c->n, wd[2] = {tpu_b_aval(b, H)->dims[0], c->N};
  tpu_aval_t wa = tpu_aval_make(c->t, 2, wd);
  tpu_val_t std[3] = {H, Z, tpu_b_full(b, &wa, 0)}, res[3];
  tpu_mx_for(b, n - 1, 3, std, tpu_eig_std_step, (void*)c, res);
  tpu_val_t wr = tpu_mx_slice(b, tpu_mx_diag(b, res[0]), 1, 0, n);
  *wi = tpu_mx_slice(b, res[2], 1, 0, n);
  /* a pair's second member from its first: XLA may evaluate one expression in
   * two fusions (with and without FMA contraction), so exact conjugates are
   * made here, not trusted to the block's two equal entries */
  tpu_val_t second = tpu_eig_cmp(b, "LT", *wi, tpu_ops_like(b, *wi, 0));
  wr = tpu_b_select(b, second, tpu_eig_shift(b, wr, -1), wr);
  *wi = tpu_b_select(b, second, tpu_b_unary(b, "stablehlo.negate", tpu_eig_shift(b, *wi, -1)), *wi);
  if (c->vectors) {
    tpu_val_t Tr = tpu_mx_slice(b, tpu_mx_slice(b, res[0], 1, 0, n), 2, 0, n);
    tpu_val_t rz = tpu_ops_like(b, Tr, 0);
    tpu_val_t cs[3] = {tpu_ops_complex(b, Tr, rz), tpu_ops_complex(b, tpu_mx_slice(b, res[1], 2, 0, n), rz), *wi};
    tpu_mx_for(b, n - 1, 3, cs, tpu_eig_cschur_step, (void*)c, res);
    *T = res[0];
    *Zc = res[1];
  }
  return tpu_ops_complex(b, wr, *wi);
}

tpu_val_t tpu_eig_vectors(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t T, tpu_val_t Zc, tpu_val_t w,
                          tpu_val_t wi, const tpu_eig_balance_t* bal) {
  tpu_aval_t ta = tpu_mx_retype(tpu_b_aval(b, T), c->t);
  tpu_val_t rz = tpu_b_full(b, &ta, 0), res[3];
  tpu_val_t tv[3] = {T, tpu_ops_complex(b, tpu_mx_eye(b, &ta), rz), w};
  tpu_mx_for(b, c->n, 3, tv, tpu_eig_trevc_step, (void*)c, res);
  return tpu_eig_assemble(b, tpu_eig_unbalance(b, bal, tpu_mx_matmul(b, Zc, res[1])), wi);
}
