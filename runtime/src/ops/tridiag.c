/* A fast orthogonal near-diagonaliser of symmetric matrices (tridiag.h).
 *
 * Jacobi from scratch (eigh.c) rotates the whole matrix n - 1 times per sweep
 * for about 8 sweeps; this costs O(n) passes over the matrix instead:
 *
 * 1. Householder tridiagonalisation, LAPACK dsytd2's algorithm: A = Q T Q^T.
 *    Step k reflects rows and columns > k (p = tau A v, w = p - tau/2 (p.v) v,
 *    A -= v w^T + w v^T) of the trailing block its panel starts at, with masks
 *    inside the panel, so shapes stay static. The reflectors are kept as rows
 *    (a contiguous update per step).
 * 2. The eigenvalues of T by bisection on Sturm counts, LAPACK dstebz/dlaebz's
 *    recurrence and pivmin guard: one lane per eigenvalue index j, all halving
 *    at once from the Gershgorin interval, a fixed number of times (mantissa
 *    bits + 3: the interval ends below the rounding of the count itself).
 * 3. Eigenvectors of T by inverse iteration, as dstein: (T - lambda_j) x = r
 *    solved by tridiagonal LU, two iterations from a pseudo-random start per
 *    lane, a pivot smaller than eps ||T|| replaced by that size (dlagtf's
 *    perturbation). A lane that overflows starts again from its start vector.
 * 4. Orthonormalisation: one Newton-Schulz step where the vectors are already
 *    nearly orthogonal; otherwise Householder QR in eigenvalue order. dstein
 *    runs Gram-Schmidt within clusters of close eigenvalues; QR does it for
 *    all, so V0 is orthogonal even where inverse iteration met a repeated
 *    eigenvalue (the columns it could not separate are completed orthogonally,
 *    which is the missing part of that eigenspace when the others are right).
 * 5. V0 = Q Z, Q applied in compact WY form (qr.c).
 *
 * The sequential recurrences of 2 and 3 (one step per row of T) run over all
 * lanes at once, several rows per iteration of a stablehlo.while (a chain of
 * elementwise ops that XLA fuses) rather than one loop iteration per row. T is
 * padded to a multiple of TPU_TD_UNROLL rows with decoupled diagonal entries
 * above every eigenvalue, which no recurrence counts or solves into. */
#include "tridiag.h"

#include <float.h>
#include <math.h>

#include "nn.h"
#include "qr.h"

/* Rows of T per loop iteration of a recurrence. */
#define TPU_TD_UNROLL 32

static double tpu_td_safmin(tpu_dtype_t t) { return t == TPU_F64 ? DBL_MIN : FLT_MIN; }

/* -------------------------------------------------------- tridiagonalisation */

/* One column of a panel. Carry: A (batch..., k, k) the trailing block, Yr
 * (batch..., w, k) the panel's reflectors as rows, tau and e (batch..., w): the
 * panel's taus and off-diagonal entries of T. */
static void tpu_td_reduce_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t A = in[0];
  tpu_aval_t m = *tpu_b_aval(b, A);
  int r = m.rank;
  tpu_aval_t vec = tpu_mx_drop(&m, 1), ivec = tpu_mx_retype(&vec, TPU_I32);
  tpu_val_t idx = tpu_b_iota(b, &ivec, r - 2), kv = tpu_b_broadcast_in_dim(b, k, ivec.rank, ivec.dims, NULL);
  tpu_val_t k1 = tpu_nn_add(b, kv, tpu_b_full(b, &ivec, 1));
  tpu_val_t below = tpu_b_compare(b, "GT", idx, k1), at = tpu_b_compare(b, "EQ", idx, k1);
  tpu_val_t x = tpu_mx_take(b, A, r - 2, k); /* row k = column k: A stays exactly symmetric */
  tpu_val_t zero = tpu_b_full(b, &vec, 0);
  /* H x = (.., beta at k + 1, 0 below); tau = 0 when x is already so */
  tpu_qr_reflector_t h = tpu_qr_larfg(b, x, at, below);
  tpu_val_t v = h.v, tau = h.tau;
  /* p = tau A v; w = p - tau/2 (p.v) v, rows <= k masked (A's finished rows are stale). */
  int64_t bd[TPU_MAX_RANK], ca = r - 1, cv = r - 2;
  for (int i = 0; i < r - 2; i++) bd[i] = i;
  tpu_val_t Av = tpu_b_dot_general(b, A, v, r - 2, bd, bd, 1, &ca, &cv, m.dtype);
  tpu_val_t p = tpu_nn_mul(b, tpu_mx_bcast_batch(b, tau, &vec), Av);
  tpu_val_t half = tpu_nn_mul(b, tpu_nn_mulc(b, tau, 0.5), tpu_mx_sum(b, tpu_nn_mul(b, p, v), r - 2));
  tpu_val_t w = tpu_nn_sub(b, p, tpu_nn_mul(b, tpu_mx_bcast_batch(b, half, &vec), v));
  w = tpu_b_select(b, tpu_b_compare(b, "GT", idx, kv), w, zero);
  tpu_val_t vw = tpu_nn_mul(b, tpu_mx_bcast_vec(b, v, &m, false), tpu_mx_bcast_vec(b, w, &m, true));
  tpu_val_t wv = tpu_nn_mul(b, tpu_mx_bcast_vec(b, w, &m, false), tpu_mx_bcast_vec(b, v, &m, true));
  out[0] = tpu_nn_sub(b, A, tpu_nn_add(b, vw, wv));
  /* a reflector with tau = 0 is stored as a zero row (tpu_qr_apply_reflectors) */
  tpu_val_t vlive = tpu_b_select(b, tpu_mx_bcast_batch(b, h.live, &ivec), v, zero);
  int64_t rowd[TPU_MAX_RANK];
  tpu_val_t starts[TPU_MAX_RANK];
  for (int i = 0; i < r; i++) {
    rowd[i] = i == r - 2 ? 1 : m.dims[i];
    starts[i] = i == r - 2 ? k : tpu_b_const_i(b, TPU_I32, 0);
  }
  out[1] = tpu_b_dynamic_update_slice(b, in[1], tpu_b_reshape(b, vlive, r, rowd), starts);
  out[2] = tpu_mx_put(b, in[2], k, tau);
  out[3] = tpu_mx_put(b, in[3], k, h.beta);
}

/* Columns per panel of the reduction. A panel's steps run on the trailing
 * block it starts at (a static slice), so later panels touch less of A; each
 * panel is a loop of its own to compile (64 x 128 x 128: 64 ran as fast as 32
 * and compiled 0.25 s sooner). */
#define TPU_TD_PANEL 64
/* At most this many panels (wider ones past 8 * 64 rows), for the same reason. */
#define TPU_TD_MAX_PANELS 8

/* x (batch..., k) and y (batch..., l) joined along the last dim; x may be TPU_NOVAL. */
static tpu_val_t tpu_td_join(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, int dim) {
  if (x == TPU_NOVAL) return y;
  tpu_val_t both[2] = {x, y};
  return tpu_b_concat(b, 2, both, dim);
}

/* T's diagonal *d (batch..., n) and off-diagonal *e (batch..., n - 1), and the
 * reflectors of Q as columns *Y (batch..., n, n - 2) with *tau. n >= 2. */
static void tpu_td_reduce(tpu_builder_t* b, tpu_val_t A, tpu_val_t* d, tpu_val_t* e, tpu_val_t* Y, tpu_val_t* tau) {
  tpu_aval_t m = *tpu_b_aval(b, A);
  int r = m.rank;
  int64_t n = m.dims[r - 1], p0 = 0;
  int64_t pw = (n - 2 + TPU_TD_MAX_PANELS - 1) / TPU_TD_MAX_PANELS;
  if (pw < TPU_TD_PANEL) pw = TPU_TD_PANEL;
  tpu_val_t S = A, dd = TPU_NOVAL, ee = TPU_NOVAL, yy = TPU_NOVAL, tt = TPU_NOVAL;
  while (n - p0 > 2 && tpu_b_ok(b)) {
    int64_t k = n - p0, w = k - 2 < pw ? k - 2 : pw;
    tpu_aval_t sa = *tpu_b_aval(b, S), ya = sa, ta = tpu_mx_drop(&sa, 1);
    ya.dims[r - 2] = w;
    ta.dims[r - 2] = w;
    tpu_val_t init[4] = {S, tpu_b_full(b, &ya, 0), tpu_b_full(b, &ta, 0), tpu_b_full(b, &ta, 0)}, res[4];
    tpu_mx_for(b, w, 4, init, tpu_td_reduce_step, NULL, res);
    int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
    lo[r - 1] = p0; /* the panel's reflectors are zero above its rows */
    yy = tpu_td_join(b, yy, tpu_b_pad(b, res[1], tpu_b_const(b, m.dtype, 0), lo, hi, NULL), r - 2);
    tt = tpu_td_join(b, tt, res[2], r - 2);
    ee = tpu_td_join(b, ee, res[3], r - 2);
    dd = tpu_td_join(b, dd, tpu_mx_slice(b, tpu_mx_diag(b, res[0]), r - 2, 0, w), r - 2);
    S = tpu_mx_slice(b, tpu_mx_slice(b, res[0], r - 2, w, k), r - 1, w, k);
    p0 += w;
  }
  /* the trailing 2 x 2 block: no reflector; its off-diagonal entry is T's last */
  tpu_val_t last = tpu_mx_take(b, tpu_mx_take(b, S, r - 2, tpu_b_const_i(b, TPU_I32, 1)), r - 2,
                               tpu_b_const_i(b, TPU_I32, 0));
  tpu_aval_t la = *tpu_b_aval(b, last);
  int64_t one[TPU_MAX_RANK];
  for (int i = 0; i < la.rank; i++) one[i] = la.dims[i];
  one[la.rank] = 1;
  *e = tpu_td_join(b, ee, tpu_b_reshape(b, last, la.rank + 1, one), r - 2);
  *d = tpu_td_join(b, dd, tpu_mx_diag(b, S), r - 2);
  if (yy == TPU_NOVAL) { /* n = 2: no reflectors */
    tpu_aval_t ya = m, ta = tpu_mx_drop(&m, 1);
    ya.dims[r - 1] = 0;
    ta.dims[r - 2] = 0;
    *Y = tpu_b_full(b, &ya, 0);
    *tau = tpu_b_full(b, &ta, 0);
    return;
  }
  *Y = tpu_mx_mT(b, yy);
  *tau = tt;
}

/* ------------------------------------------------------ recurrences over T */

/* One row's step of a recurrence: col are the inputs' entries for this row,
 * per lane (batch..., L); carry is updated in place; out gets the row's outputs. */
typedef void (*tpu_td_step_fn)(tpu_builder_t* b, const void* ctx, const tpu_val_t* col, tpu_val_t* carry,
                               tpu_val_t* out);

/* A recurrence over the N rows of T (forward or reversed), vectorised over L
 * lanes. Inputs are per batch (batch..., N) or per lane (N, batch..., L): rows
 * first, so that a row is one contiguous block; carries (batch..., L); outputs
 * (N, batch..., L). Loop values: carries, outputs, inputs (at most
 * TPU_MX_MAX_CARRY together). */
typedef struct tpu_td_scan {
  tpu_td_step_fn step;
  const void* ctx;
  int nin, ncarry, nout;
  bool reverse;
  int64_t rows, lanes; /* N (a multiple of TPU_TD_UNROLL or at most it), L */
} tpu_td_scan_t;

static int64_t tpu_td_unroll(int64_t rows) { return rows < TPU_TD_UNROLL ? rows : TPU_TD_UNROLL; }

/* Rows per iteration of a scan. A scan with outputs takes few: every row's
 * output is its own fusion in XLA, which inlines the chain of rows before it
 * within the iteration, so U rows cost U (U + 1) / 2 row steps (measured on
 * 64 x 128 x 128: 4 rows per iteration beat 1 and 32). */
static int64_t tpu_td_scan_unroll(const tpu_td_scan_t* s) {
  if (!s->nout) return tpu_td_unroll(s->rows);
  return s->rows % 4 == 0 ? 4 : s->rows % 2 == 0 ? 2 : 1;
}

/* x[c0 : c0 + U] along dim (c0 a 0-d i32). */
static tpu_val_t tpu_td_rows(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t c0, int64_t U) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  tpu_val_t starts[TPU_MAX_RANK];
  int64_t sizes[TPU_MAX_RANK];
  for (int d = 0; d < a.rank; d++) {
    starts[d] = d == dim ? c0 : tpu_b_const_i(b, TPU_I32, 0);
    sizes[d] = d == dim ? U : a.dims[d];
  }
  return tpu_b_dynamic_slice(b, x, starts, sizes);
}

/* The rows [c0, c0 + U) of a scan: v = carries, outputs, inputs (updated). */
static void tpu_td_chunk(tpu_builder_t* b, const tpu_td_scan_t* s, tpu_val_t c0, tpu_val_t* v) {
  int64_t U = tpu_td_scan_unroll(s);
  tpu_val_t* carry = v;
  tpu_val_t* outs = v + s->ncarry;
  const tpu_val_t* ins = v + s->ncarry + s->nout;
  tpu_aval_t lane = *tpu_b_aval(b, carry[0]);
  int nb = lane.rank - 1;
  tpu_val_t blk[TPU_MX_MAX_CARRY], ocols[TPU_MX_MAX_CARRY][TPU_TD_UNROLL];
  for (int i = 0; i < s->nin; i++) {
    bool per_batch = tpu_b_rank(b, ins[i]) == nb + 1;
    blk[i] = tpu_td_rows(b, ins[i], per_batch ? nb : 0, c0, U);
  }
  for (int64_t t = 0; t < U; t++) {
    int64_t u = s->reverse ? U - 1 - t : t;
    tpu_val_t col[TPU_MX_MAX_CARRY], oc[TPU_MX_MAX_CARRY];
    tpu_val_t ui = tpu_b_const_i(b, TPU_I32, u);
    for (int i = 0; i < s->nin; i++)
      col[i] = tpu_b_rank(b, blk[i]) == nb + 1 ? tpu_mx_bcast_batch(b, tpu_mx_take(b, blk[i], nb, ui), &lane)
                                                : tpu_mx_take(b, blk[i], 0, ui);
    s->step(b, s->ctx, col, carry, oc);
    for (int o = 0; o < s->nout; o++) ocols[o][u] = oc[o];
  }
  for (int o = 0; o < s->nout; o++) {
    int64_t cd[TPU_MAX_RANK];
    cd[0] = 1;
    for (int d = 0; d <= nb; d++) cd[d + 1] = lane.dims[d];
    for (int64_t u = 0; u < U; u++) ocols[o][u] = tpu_b_reshape(b, ocols[o][u], nb + 2, cd);
    tpu_val_t starts[TPU_MAX_RANK];
    for (int d = 0; d < nb + 2; d++) starts[d] = d == 0 ? c0 : tpu_b_const_i(b, TPU_I32, 0);
    outs[o] = tpu_b_dynamic_update_slice(b, outs[o], tpu_b_concat(b, (int)U, ocols[o], 0), starts);
  }
}

static void tpu_td_scan_body(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_td_scan_t* s = ctx;
  int nv = s->ncarry + s->nout + s->nin;
  int64_t U = tpu_td_scan_unroll(s), nchunks = s->rows / U;
  for (int i = 0; i < nv; i++) out[i] = in[i];
  tpu_val_t c = s->reverse ? tpu_nn_sub(b, tpu_b_const_i(b, TPU_I32, nchunks - 1), k) : k;
  tpu_td_chunk(b, s, tpu_nn_mul(b, c, tpu_b_const_i(b, TPU_I32, U)), out);
}

/* Runs the scan: v = carries (in: initial, out: final), outputs (in: zeros of
 * their shape, out: filled), inputs. */
static void tpu_td_scan_run(tpu_builder_t* b, const tpu_td_scan_t* s, tpu_val_t* v) {
  int nv = s->ncarry + s->nout + s->nin;
  int64_t nchunks = s->rows / tpu_td_scan_unroll(s);
  if (nchunks == 1) {
    tpu_td_chunk(b, s, tpu_b_const_i(b, TPU_I32, 0), v);
    return;
  }
  tpu_val_t res[TPU_MX_MAX_CARRY];
  tpu_mx_for(b, nchunks, nv, v, tpu_td_scan_body, (void*)s, res);
  for (int i = 0; i < nv; i++) v[i] = res[i];
}

/* ---------------------------------------------------------------- bisection */

/* T padded to N rows, per batch: D diagonal, E[i] = e_{i-1} and E2 = E^2
 * (E[0] = 0), En[i] = e_i (0 at the end); lo, hi the Gershgorin interval,
 * tnorm = max(|lo|, |hi|), pivmin (dstebz's). */
typedef struct tpu_td_tri {
  tpu_val_t D, E, E2, En, lo, hi, tnorm, pivmin;
  int64_t n, N;
  tpu_dtype_t t;
} tpu_td_tri_t;

/* Sturm count step: q = D - x - E2 / q_prev, |q| < pivmin -> -pivmin; count q <= 0.
 * carry: q, count, x, pivmin. */
static void tpu_td_sturm_step(tpu_builder_t* b, const void* ctx, const tpu_val_t* col, tpu_val_t* c, tpu_val_t* out) {
  (void)ctx;
  (void)out;
  tpu_aval_t a = *tpu_b_aval(b, c[0]);
  tpu_val_t q = tpu_nn_sub(b, tpu_nn_sub(b, col[0], c[2]), tpu_nn_div(b, col[1], c[0]));
  tpu_val_t small = tpu_b_compare(b, "LT", tpu_b_unary(b, "stablehlo.abs", q), c[3]);
  q = tpu_b_select(b, small, tpu_b_unary(b, "stablehlo.negate", c[3]), q);
  tpu_val_t neg = tpu_b_compare(b, "LE", q, tpu_b_full(b, &a, 0));
  c[1] = tpu_nn_add(b, c[1], tpu_b_select(b, neg, tpu_b_full(b, &a, 1), tpu_b_full(b, &a, 0)));
  c[0] = q;
}

typedef struct tpu_td_bisect_ctx {
  int64_t N, L;
} tpu_td_bisect_ctx_t;

/* Carry: lo, hi (batch..., L), D, E2 (batch..., N), pivmin (batch..., L).
 * Lane j keeps count(lo) <= j < count(hi). */
static void tpu_td_bisect_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_td_bisect_ctx_t* c = ctx;
  tpu_aval_t lane = *tpu_b_aval(b, in[0]), ilane = tpu_mx_retype(&lane, TPU_I32);
  tpu_val_t mid = tpu_nn_mul(b, tpu_nn_add(b, in[0], in[1]), tpu_b_full(b, &lane, 0.5));
  tpu_td_scan_t s = {tpu_td_sturm_step, NULL, 2, 4, 0, false, c->N, c->L};
  tpu_val_t v[6] = {tpu_b_full(b, &lane, 1), tpu_b_full(b, &lane, 0), mid, in[4], in[2], in[3]};
  tpu_td_scan_run(b, &s, v);
  tpu_val_t j = tpu_b_convert(b, tpu_b_iota(b, &ilane, lane.rank - 1), lane.dtype);
  tpu_val_t above = tpu_b_compare(b, "GT", v[1], j); /* more than j eigenvalues below mid */
  out[0] = tpu_b_select(b, above, in[0], mid);
  out[1] = tpu_b_select(b, above, mid, in[1]);
  for (int i = 2; i < 5; i++) out[i] = in[i];
}

/* The n eigenvalues of T, ascending (batch..., n). */
static tpu_val_t tpu_td_bisect(tpu_builder_t* b, const tpu_td_tri_t* T) {
  tpu_aval_t bat = *tpu_b_aval(b, T->lo), lane = bat;
  lane.dims[lane.rank++] = T->n;
  tpu_td_bisect_ctx_t c = {T->N, T->n};
  tpu_val_t init[5] = {tpu_mx_bcast_batch(b, T->lo, &lane), tpu_mx_bcast_batch(b, T->hi, &lane), T->D, T->E2,
                       tpu_mx_bcast_batch(b, T->pivmin, &lane)};
  tpu_val_t res[5];
  int iters = (T->t == TPU_F64 ? DBL_MANT_DIG : FLT_MANT_DIG) + 3;
  tpu_mx_for(b, iters, 5, init, tpu_td_bisect_step, &c, res);
  return tpu_nn_mul(b, tpu_nn_add(b, res[0], res[1]), tpu_b_full(b, &lane, 0.5));
}

/* ---------------------------------------------------------- inverse iteration */

/* LU of T - lambda without pivoting: l = E / u_prev, u = D - lambda - l E, a
 * pivot below delta in size set to +-delta. carry: u_prev, lambda, delta; out: l, u. */
static void tpu_td_lu_step(tpu_builder_t* b, const void* ctx, const tpu_val_t* col, tpu_val_t* c, tpu_val_t* out) {
  (void)ctx;
  tpu_aval_t a = *tpu_b_aval(b, c[0]);
  tpu_val_t l = tpu_nn_div(b, col[1], c[0]);
  tpu_val_t u = tpu_nn_sub(b, tpu_nn_sub(b, col[0], c[1]), tpu_nn_mul(b, l, col[1]));
  tpu_val_t small = tpu_b_compare(b, "LT", tpu_b_unary(b, "stablehlo.abs", u), c[2]);
  tpu_val_t sgn = tpu_b_select(b, tpu_b_compare(b, "LT", u, tpu_b_full(b, &a, 0)),
                               tpu_b_unary(b, "stablehlo.negate", c[2]), c[2]);
  u = tpu_b_select(b, small, sgn, u);
  out[0] = l;
  out[1] = u;
  c[0] = u;
}

/* Forward substitution y = r - l y_prev. carry: y_prev; in: r, l; out: y. */
static void tpu_td_fwd_step(tpu_builder_t* b, const void* ctx, const tpu_val_t* col, tpu_val_t* c, tpu_val_t* out) {
  (void)ctx;
  c[0] = out[0] = tpu_nn_sub(b, col[0], tpu_nn_mul(b, col[1], c[0]));
}

/* Back substitution x = (y - En x_next) / u. carry: x_next; in: y, u, En; out: x. */
static void tpu_td_back_step(tpu_builder_t* b, const void* ctx, const tpu_val_t* col, tpu_val_t* c, tpu_val_t* out) {
  (void)ctx;
  c[0] = out[0] = tpu_nn_div(b, tpu_nn_sub(b, col[0], tpu_nn_mul(b, col[2], c[0])), col[1]);
}

/* A lane value (batch..., L) broadcast over rows to la (N, batch..., L). */
static tpu_val_t tpu_td_bcast_rows(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* la) {
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < la->rank - 1; i++) bd[i] = i + 1;
  return tpu_b_broadcast_in_dim(b, x, la->rank, la->dims, bd);
}

/* x (N, batch..., L) with each lane scaled to unit 2-norm; a lane that is not
 * finite (or zero) is replaced by the same lane of fallback. */
static tpu_val_t tpu_td_normalize(tpu_builder_t* b, tpu_val_t x, tpu_val_t fallback) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t d0 = 0;
  tpu_val_t amax = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.abs", x), tpu_b_const(b, a.dtype, 0), 1, &d0,
                                "stablehlo.maximum");
  tpu_aval_t lane = *tpu_b_aval(b, amax);
  tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.is_finite", amax),
                              tpu_b_compare(b, "GT", amax, tpu_b_full(b, &lane, 0)));
  tpu_val_t y = tpu_b_select(b, tpu_td_bcast_rows(b, ok, &a), x, fallback);
  /* scaled by max |x| before squaring; a fallback lane (entries in [-1, 1)) as it is */
  tpu_val_t ymax = tpu_b_select(b, ok, amax, tpu_b_full(b, &lane, 1));
  y = tpu_nn_div(b, y, tpu_td_bcast_rows(b, ymax, &a));
  tpu_val_t nrm = tpu_b_unary(b, "stablehlo.sqrt", tpu_mx_sum(b, tpu_nn_mul(b, y, y), 0));
  return tpu_nn_div(b, y, tpu_td_bcast_rows(b, nrm, &a));
}

/* A pseudo-random start per row and lane in [-1, 1) (dstein starts from random
 * vectors): distinct lanes of a repeated eigenvalue converge to different
 * vectors of its eigenspace. Rows past n are 0, so padding stays out. */
static tpu_val_t tpu_td_start(tpu_builder_t* b, const tpu_aval_t* la, int64_t n) {
  int r = la->rank;
  tpu_aval_t ia = tpu_mx_retype(la, TPU_I32);
  tpu_val_t row = tpu_b_convert(b, tpu_b_iota(b, &ia, 0), la->dtype);
  tpu_val_t lane = tpu_b_convert(b, tpu_b_iota(b, &ia, r - 1), la->dtype);
  tpu_val_t arg = tpu_nn_add(b, tpu_nn_mulc(b, row, 12.9898), tpu_nn_mulc(b, lane, 78.233));
  tpu_val_t h = tpu_nn_mul(b, tpu_b_unary(b, "stablehlo.sine", arg), tpu_b_full(b, la, 43758.5453));
  tpu_val_t frac = tpu_nn_sub(b, h, tpu_b_unary(b, "stablehlo.floor", h));
  tpu_val_t x = tpu_nn_sub(b, tpu_nn_mul(b, frac, tpu_b_full(b, la, 2)), tpu_b_full(b, la, 1));
  tpu_val_t live = tpu_b_compare(b, "LT", tpu_b_iota(b, &ia, 0), tpu_b_full(b, &ia, (double)n));
  return tpu_b_select(b, live, x, tpu_b_full(b, la, 0));
}

/* Eigenvectors of T for the eigenvalues w (batch..., n), as columns (batch..., n, n). */
static tpu_val_t tpu_td_invit(tpu_builder_t* b, const tpu_td_tri_t* T, tpu_val_t w) {
  tpu_aval_t lane = *tpu_b_aval(b, w), la;
  la.dtype = lane.dtype;
  la.rank = lane.rank + 1;
  la.dims[0] = T->N;
  for (int i = 0; i < lane.rank; i++) la.dims[i + 1] = lane.dims[i];
  tpu_val_t zeros = tpu_b_full(b, &la, 0);
  tpu_val_t delta = tpu_nn_mul(b, T->tnorm, tpu_b_full(b, tpu_b_aval(b, T->tnorm), tpu_mx_eps(T->t)));
  tpu_td_scan_t lu = {tpu_td_lu_step, NULL, 2, 3, 2, false, T->N, T->n};
  tpu_val_t v[7] = {tpu_b_full(b, &lane, 1), w, tpu_mx_bcast_batch(b, delta, &lane), zeros, zeros, T->D, T->E};
  tpu_td_scan_run(b, &lu, v);
  tpu_val_t Lm = v[3], Um = v[4];
  tpu_val_t start = tpu_td_start(b, &la, T->n), x = start;
  for (int it = 0; it < 2; it++) {
    tpu_td_scan_t fw = {tpu_td_fwd_step, NULL, 2, 1, 1, false, T->N, T->n};
    tpu_val_t f[4] = {tpu_b_full(b, &lane, 0), zeros, x, Lm};
    tpu_td_scan_run(b, &fw, f);
    tpu_td_scan_t bk = {tpu_td_back_step, NULL, 3, 1, 1, true, T->N, T->n};
    tpu_val_t g[5] = {tpu_b_full(b, &lane, 0), zeros, f[1], Um, T->En};
    tpu_td_scan_run(b, &bk, g);
    x = tpu_td_normalize(b, g[1], start);
  }
  /* (N, batch..., L) -> (batch..., N, L), the first n rows */
  int64_t perm[TPU_MAX_RANK];
  for (int i = 0; i < la.rank - 2; i++) perm[i] = i + 1;
  perm[la.rank - 2] = 0;
  perm[la.rank - 1] = la.rank - 1;
  return tpu_mx_slice(b, tpu_b_transpose(b, x, perm), la.rank - 2, 0, T->n);
}

/* ------------------------------------------------------------------ driver */

/* T from d, e (batch..., n), (batch..., n - 1): padded, with its bounds. */
static tpu_td_tri_t tpu_td_tri(tpu_builder_t* b, tpu_val_t d, tpu_val_t e) {
  tpu_aval_t da = *tpu_b_aval(b, d), bat = tpu_mx_drop(&da, 1);
  int r = da.rank;
  int64_t n = da.dims[r - 1], U = tpu_td_unroll(n), N = (n + U - 1) / U * U;
  tpu_td_tri_t T = {.n = n, .N = N, .t = da.dtype};
  tpu_val_t zero = tpu_b_const(b, da.dtype, 0);
  int64_t lo1[TPU_MAX_RANK] = {0}, hi1[TPU_MAX_RANK] = {0};
  lo1[r - 1] = hi1[r - 1] = 1;
  tpu_val_t ae = tpu_b_pad(b, tpu_b_unary(b, "stablehlo.abs", e), zero, lo1, hi1, NULL); /* (n + 1) */
  tpu_val_t rad = tpu_nn_add(b, tpu_mx_slice(b, ae, r - 1, 0, n), tpu_mx_slice(b, ae, r - 1, 1, n + 1));
  int64_t last = r - 1;
  T.lo = tpu_b_reduce(b, tpu_nn_sub(b, d, rad), tpu_b_const(b, da.dtype, INFINITY), 1, &last, "stablehlo.minimum");
  T.hi = tpu_b_reduce(b, tpu_nn_add(b, d, rad), tpu_b_const(b, da.dtype, -INFINITY), 1, &last, "stablehlo.maximum");
  T.tnorm = tpu_b_binary(b, "stablehlo.maximum", tpu_b_unary(b, "stablehlo.abs", T.lo),
                         tpu_b_unary(b, "stablehlo.abs", T.hi));
  tpu_val_t e2max = tpu_b_reduce(b, tpu_nn_mul(b, ae, ae), zero, 1, &last, "stablehlo.maximum");
  T.pivmin = tpu_nn_mul(b, tpu_b_binary(b, "stablehlo.maximum", e2max, tpu_b_full(b, &bat, 1)),
                    tpu_b_full(b, &bat, tpu_td_safmin(da.dtype)));
  /* dstebz's widening: the count's rounding may put an eigenvalue just outside */
  tpu_val_t fudge = tpu_nn_add(b, tpu_nn_mul(b, T.tnorm, tpu_b_full(b, &bat, 2.0 * (double)n * tpu_mx_eps(da.dtype))),
                           tpu_nn_mul(b, T.pivmin, tpu_b_full(b, &bat, 2)));
  T.lo = tpu_nn_sub(b, T.lo, fudge);
  T.hi = tpu_nn_add(b, T.hi, fudge);
  /* padding rows: decoupled, above hi, so no count or solve reaches them */
  int64_t hiN[TPU_MAX_RANK] = {0}, z[TPU_MAX_RANK] = {0};
  hiN[r - 1] = N - n;
  tpu_aval_t pa = da;
  pa.dims[r - 1] = N;
  tpu_val_t Dp = tpu_b_pad(b, d, zero, z, hiN, NULL);
  tpu_aval_t ipa = tpu_mx_retype(&pa, TPU_I32);
  tpu_val_t pad = tpu_b_compare(b, "GE", tpu_b_iota(b, &ipa, r - 1), tpu_b_full(b, &ipa, (double)n));
  tpu_val_t above = tpu_nn_add(b, tpu_mx_bcast_batch(b, T.hi, &pa), tpu_b_full(b, &pa, 1));
  T.D = tpu_b_select(b, pad, above, Dp);
  tpu_val_t es = tpu_b_pad(b, e, zero, lo1, z, NULL); /* (n): E[i] = e_{i-1}, E[0] = 0 */
  T.E = tpu_b_pad(b, es, zero, z, hiN, NULL);
  T.E2 = tpu_nn_mul(b, T.E, T.E);
  hiN[r - 1] = N - (n - 1);
  T.En = tpu_b_pad(b, e, zero, z, hiN, NULL);
  return T;
}

/* Orthonormalisation. Inverse iteration's vectors are orthogonal to about
 * eps / (relative gap): for most matrices |Z^T Z - I| stays below sqrt(eps),
 * and one Newton-Schulz step Z (3 I - Z^T Z) / 2 (two products) squares that
 * error away. Where some batch element's vectors are further apart (repeated or
 * clustered eigenvalues), Householder QR of Z (in eigenvalue order) replaces
 * them for the whole batch: a loop of at most one iteration, run only then.
 * Carry: Z (QR'd by the iteration: a loop-variant operand, so that XLA cannot
 * hoist the QR out of the loop and run it always), far (0-d i1). */
static tpu_val_t tpu_td_far(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)b;
  (void)ctx;
  (void)k;
  return in[1];
}

static void tpu_td_qr_all(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  (void)k;
  tpu_aval_t z = *tpu_b_aval(b, in[0]);
  tpu_val_t C, ctau;
  tpu_qr_geqr2(b, in[0], &C, &ctau); /* unblocked: this rarely runs, but always compiles */
  out[0] = tpu_qr_orgqr(b, C, ctau, z.dims[z.rank - 1]);
  out[1] = in[1];
}

static tpu_val_t tpu_td_orthonormalize(tpu_builder_t* b, tpu_val_t Z) {
  tpu_aval_t z = *tpu_b_aval(b, Z);
  tpu_val_t G = tpu_mx_matmul(b, tpu_mx_mT(b, Z), Z);
  tpu_val_t I = tpu_mx_eye(b, &z);
  int64_t all[TPU_MAX_RANK];
  for (int i = 0; i < z.rank; i++) all[i] = i;
  tpu_val_t dev = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.abs", tpu_nn_sub(b, G, I)), tpu_b_const(b, z.dtype, 0),
                               z.rank, all, "stablehlo.maximum");
  tpu_val_t far = tpu_b_unary(b, "stablehlo.not",
                              tpu_b_compare(b, "LE", dev, tpu_b_const(b, z.dtype, sqrt(tpu_mx_eps(z.dtype)))));
  tpu_val_t X = tpu_mx_matmul(b, Z, tpu_nn_mulc(b, tpu_nn_sub(b, tpu_nn_mulc(b, I, 3), G), 0.5));
  tpu_val_t init[2] = {Z, far}, res[2];
  tpu_mx_while(b, 1, 2, init, tpu_td_far, tpu_td_qr_all, NULL, res, NULL);
  return tpu_b_select(b, tpu_b_broadcast_in_dim(b, far, z.rank, z.dims, NULL), res[0], X);
}

tpu_val_t tpu_tridiag_eigvecs(tpu_builder_t* b, tpu_val_t A) {
  tpu_val_t d, e, Y, tau;
  tpu_td_reduce(b, A, &d, &e, &Y, &tau);
  tpu_td_tri_t T = tpu_td_tri(b, d, e);
  tpu_val_t w = tpu_td_bisect(b, &T);
  tpu_val_t Z = tpu_td_invit(b, &T, w); /* columns: eigenvectors of T */
  tpu_val_t Qz = tpu_td_orthonormalize(b, Z);
  return tpu_qr_apply_reflectors(b, Qz, Y, tau, false);
}
