/* Balancing before the general eigendecomposition (eig.h): LAPACK dgebal's
 * job 'B', batched.
 *
 * 1. Rows with zeros off the diagonal (within the leading hi + 1 columns) are
 *    exchanged to the bottom, hi decreasing, in passes from row hi down until
 *    a pass exchanges nothing; then columns with zeros off the diagonal
 *    (within rows lo..hi) to the left, lo increasing. Their eigenvalues are
 *    isolated on the diagonal, which the QR iteration then finds at once.
 * 2. Each row and column i of [lo, hi] is scaled by a power of 2 when that
 *    brings the 2-norms of row and column i nearer (their sum down by 5%),
 *    in passes until none changes. A similarity by a diagonal matrix keeps
 *    the eigenvalues and makes a badly scaled matrix's easier to compute.
 *
 * Every matrix of the batch keeps its own lo, hi and exchanges: each pass is
 * a loop over all positions with per-matrix masks, and exchanges go through
 * tpu_mx_swap's per-batch indices. Full rows and columns are exchanged and
 * scaled: LAPACK's narrower ranges only leave out entries that are zero. */
#include "eig.h"

#include <float.h>
#include <math.h>

#include "nn.h"

/* The state S (B, 4) i32: lo, hi, the pass's start (hi or lo), and flags
 * (bit 0: this pass exchanged or scaled, bit 1: finished, hi reached 0). */
enum { TPU_BAL_LO, TPU_BAL_HI, TPU_BAL_START, TPU_BAL_FLAGS };

static tpu_val_t tpu_bal_flag(tpu_builder_t* b, tpu_val_t S, int bit) {
  tpu_val_t f = tpu_mx_column(b, S, TPU_BAL_FLAGS);
  tpu_val_t m = tpu_b_binary(b, "stablehlo.and", f, tpu_ops_like(b, f, bit));
  return tpu_b_compare(b, "NE", m, tpu_ops_like(b, m, 0));
}

static tpu_val_t tpu_bal_state(tpu_builder_t* b, tpu_val_t lo, tpu_val_t hi, tpu_val_t start, tpu_val_t changed,
                               tpu_val_t fin) {
  tpu_val_t flags = tpu_nn_add(b, tpu_b_convert(b, changed, TPU_I32),
                               tpu_nn_mulc(b, tpu_b_convert(b, fin, TPU_I32), 2));
  tpu_val_t v[4] = {lo, hi, start, flags};
  return tpu_mx_columns(b, 4, v);
}

/* Any true along dim 1 of m (B, n): (B). */
static tpu_val_t tpu_bal_any(tpu_builder_t* b, tpu_val_t m) {
  int64_t d = 1;
  return tpu_b_reduce(b, m, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d, "stablehlo.or");
}

/* ----------------------------------------------------- 1. exchanges */

/* Carry: A, perm, S. ctx: non-NULL for the column search. */
static void tpu_bal_swap_step(tpu_builder_t* b, void* ctx, tpu_val_t c, const tpu_val_t* in, tpu_val_t* out) {
  bool cols = ctx != NULL;
  tpu_val_t A = in[0], perm = in[1], S = in[2];
  int64_t n = tpu_b_aval(b, A)->dims[1];
  tpu_val_t lo = tpu_mx_column(b, S, TPU_BAL_LO), hi = tpu_mx_column(b, S, TPU_BAL_HI);
  tpu_val_t start = tpu_mx_column(b, S, TPU_BAL_START), fin = tpu_bal_flag(b, S, 2);
  tpu_val_t one = tpu_ops_like(b, lo, 1);
  /* rows: from hi (at the pass's start) down; columns: from lo (at its start) up to hi */
  tpu_val_t p = cols ? c : tpu_nn_sub(b, tpu_b_const_i(b, TPU_I32, (int32_t)n - 1), c);
  tpu_val_t pb = tpu_b_broadcast_in_dim(b, p, 1, tpu_b_aval(b, lo)->dims, NULL);
  tpu_val_t act = cols ? tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", pb, start), tpu_b_compare(b, "LE", pb, hi))
                       : tpu_b_compare(b, "LE", pb, start);
  act = tpu_b_binary(b, "stablehlo.and", act, tpu_b_unary(b, "stablehlo.not", fin));
  tpu_val_t line = tpu_mx_take(b, A, cols ? 2 : 1, p); /* (B, n) */
  tpu_aval_t la = *tpu_b_aval(b, line), ia = tpu_mx_retype(&la, TPU_I32);
  tpu_val_t idx = tpu_b_iota(b, &ia, 1);
  tpu_val_t in_range = tpu_b_compare(b, "LE", idx, tpu_mx_bcast_batch(b, hi, &ia));
  if (cols) in_range = tpu_b_binary(b, "stablehlo.and", in_range, tpu_b_compare(b, "GE", idx, tpu_mx_bcast_batch(b, lo, &ia)));
  tpu_val_t off = tpu_b_binary(b, "stablehlo.and", in_range, tpu_b_compare(b, "NE", idx, tpu_mx_bcast_batch(b, pb, &ia)));
  tpu_val_t nz = tpu_b_binary(b, "stablehlo.and", off, tpu_b_compare(b, "NE", line, tpu_b_full(b, &la, 0)));
  tpu_val_t swap = tpu_b_binary(b, "stablehlo.and", act, tpu_b_unary(b, "stablehlo.not", tpu_bal_any(b, nz)));
  tpu_val_t to = cols ? lo : hi; /* the position p goes to */
  tpu_val_t q = tpu_b_select(b, swap, to, pb);
  A = tpu_mx_swap(b, tpu_mx_swap(b, A, 2, pb, q), 1, pb, q);
  out[0] = A;
  out[1] = tpu_b_select(b, tpu_b_compare(b, "EQ", idx, tpu_mx_bcast_batch(b, to, &ia)),
                        tpu_b_select(b, tpu_mx_bcast_batch(b, swap, &ia), tpu_mx_bcast_batch(b, pb, &ia), perm), perm);
  tpu_val_t changed = tpu_b_binary(b, "stablehlo.or", tpu_bal_flag(b, S, 1), swap);
  if (cols) {
    out[2] = tpu_bal_state(b, tpu_b_select(b, swap, tpu_nn_add(b, lo, one), lo), hi, start, changed, fin);
  } else { /* LAPACK stops when the last row left is isolated: lo = hi = 0 */
    tpu_val_t last = tpu_b_binary(b, "stablehlo.and", swap, tpu_b_compare(b, "EQ", hi, tpu_ops_like(b, hi, 0)));
    tpu_val_t hi1 = tpu_b_select(b, tpu_b_binary(b, "stablehlo.and", swap, tpu_b_unary(b, "stablehlo.not", last)),
                                 tpu_nn_sub(b, hi, one), hi);
    out[2] = tpu_bal_state(b, lo, hi1, start, changed, tpu_b_binary(b, "stablehlo.or", fin, last));
  }
}

/* A pass: reset the start and the flag, then every position. */
static void tpu_bal_swap_pass(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  tpu_val_t S = in[2];
  tpu_val_t lo = tpu_mx_column(b, S, TPU_BAL_LO), hi = tpu_mx_column(b, S, TPU_BAL_HI);
  tpu_val_t no = tpu_b_compare(b, "NE", lo, lo);
  tpu_val_t init[3] = {in[0], in[1], tpu_bal_state(b, lo, hi, ctx ? lo : hi, no, tpu_bal_flag(b, S, 2))};
  tpu_mx_for(b, tpu_b_aval(b, in[0])->dims[1], 3, init, tpu_bal_swap_step, ctx, out);
}

static tpu_val_t tpu_bal_changed(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)ctx;
  (void)k;
  return tpu_mx_any(b, tpu_bal_flag(b, in[2], 1));
}

/* ------------------------------------------------------------ 2. scaling */

typedef struct tpu_bal_ctx {
  double sfmin1, sfmax1, sfmin2, sfmax2;
} tpu_bal_ctx_t;

/* dgebal's two power-of-2 searches for the factor f of row/column i. Carry:
 * V (B, 7) = f, c, ca, r, g, ra, live (1.0 while the lane's loop runs);
 * ctx != NULL: the second search (f down). */
enum { TPU_BAL_F, TPU_BAL_C, TPU_BAL_CA, TPU_BAL_R, TPU_BAL_G, TPU_BAL_RA, TPU_BAL_LIVE };

static tpu_val_t tpu_bal_go(tpu_builder_t* b, const tpu_bal_ctx_t* x, bool down, const tpu_val_t* v) {
  tpu_val_t lt = down ? tpu_b_compare(b, "GE", v[TPU_BAL_G], v[TPU_BAL_R]) : tpu_b_compare(b, "LT", v[TPU_BAL_C], v[TPU_BAL_G]);
  tpu_val_t mx = down ? tpu_b_binary(b, "stablehlo.maximum", v[TPU_BAL_R], v[TPU_BAL_RA])
                      : tpu_b_binary(b, "stablehlo.maximum", v[TPU_BAL_F], tpu_b_binary(b, "stablehlo.maximum", v[TPU_BAL_C], v[TPU_BAL_CA]));
  tpu_val_t mn = down ? tpu_b_binary(b, "stablehlo.minimum", tpu_b_binary(b, "stablehlo.minimum", v[TPU_BAL_F], v[TPU_BAL_C]),
                                     tpu_b_binary(b, "stablehlo.minimum", v[TPU_BAL_G], v[TPU_BAL_CA]))
                      : tpu_b_binary(b, "stablehlo.minimum", v[TPU_BAL_R], tpu_b_binary(b, "stablehlo.minimum", v[TPU_BAL_G], v[TPU_BAL_RA]));
  tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "LT", mx, tpu_ops_like(b, mx, x->sfmax2)),
                              tpu_b_compare(b, "GT", mn, tpu_ops_like(b, mn, x->sfmin2)));
  tpu_val_t live = tpu_b_compare(b, "NE", v[TPU_BAL_LIVE], tpu_ops_like(b, v[TPU_BAL_LIVE], 0));
  return tpu_b_binary(b, "stablehlo.and", live, tpu_b_binary(b, "stablehlo.and", lt, ok));
}

static void tpu_bal_unpack(tpu_builder_t* b, tpu_val_t V, tpu_val_t* v) {
  for (int j = 0; j < 7; j++) v[j] = tpu_mx_column(b, V, j);
}

static tpu_val_t tpu_bal_search_cond(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)k;
  const tpu_bal_ctx_t* x = ctx;
  tpu_val_t v[7];
  tpu_bal_unpack(b, in[0], v);
  tpu_val_t down = tpu_b_compare(b, "NE", in[1], tpu_ops_like(b, in[1], 0));
  tpu_val_t go = tpu_b_select(b, tpu_b_broadcast_in_dim(b, down, 1, tpu_b_aval(b, v[0])->dims, NULL),
                              tpu_bal_go(b, x, true, v), tpu_bal_go(b, x, false, v));
  return tpu_mx_any(b, go);
}

/* Carry: V, down (0-d i32). Lanes whose condition holds take one step. */
static void tpu_bal_search_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_bal_ctx_t* x = ctx;
  tpu_val_t v[7], w[7];
  tpu_bal_unpack(b, in[0], v);
  tpu_val_t downb = tpu_b_broadcast_in_dim(b, tpu_b_compare(b, "NE", in[1], tpu_ops_like(b, in[1], 0)), 1,
                                           tpu_b_aval(b, v[0])->dims, NULL);
  tpu_val_t go = tpu_b_select(b, downb, tpu_bal_go(b, x, true, v), tpu_bal_go(b, x, false, v));
  /* up: f, c, ca times 2 and r, g, ra halved; down: the other way round */
  static const bool grows[6] = {true, true, true, false, false, false};
  for (int j = 0; j < 6; j++) {
    tpu_val_t twice = tpu_nn_mulc(b, v[j], 2.0), half = tpu_nn_mulc(b, v[j], 0.5);
    tpu_val_t up = grows[j] ? twice : half, dn = grows[j] ? half : twice;
    w[j] = tpu_b_select(b, go, tpu_b_select(b, downb, dn, up), v[j]);
  }
  w[TPU_BAL_LIVE] = v[TPU_BAL_LIVE];
  out[0] = tpu_mx_columns(b, 7, w);
  out[1] = in[1];
}

/* The factor for one row/column: c, r its column and row 2-norms over [lo, hi],
 * ca, ra their largest entries; live lanes only. */
static tpu_val_t tpu_bal_factor(tpu_builder_t* b, const tpu_bal_ctx_t* x, tpu_val_t c, tpu_val_t ca, tpu_val_t r,
                                tpu_val_t ra, tpu_val_t live) {
  tpu_val_t one = tpu_ops_like(b, c, 1);
  tpu_val_t v[7] = {one, c, ca, r, tpu_nn_mulc(b, r, 0.5), ra, tpu_b_convert(b, live, tpu_b_dtype(b, c))}, res[2];
  tpu_val_t init[2] = {tpu_mx_columns(b, 7, v), tpu_b_const_i(b, TPU_I32, 0)};
  int64_t cap = tpu_b_dtype(b, c) == TPU_F64 ? 2200 : 300; /* the exponent range: no more steps possible */
  tpu_mx_while(b, cap, 2, init, tpu_bal_search_cond, tpu_bal_search_step, (void*)x, res, NULL);
  tpu_bal_unpack(b, res[0], v);
  v[TPU_BAL_G] = tpu_nn_mulc(b, v[TPU_BAL_C], 0.5);
  init[0] = tpu_mx_columns(b, 7, v);
  init[1] = tpu_b_const_i(b, TPU_I32, 1);
  tpu_mx_while(b, cap, 2, init, tpu_bal_search_cond, tpu_bal_search_step, (void*)x, res, NULL);
  tpu_bal_unpack(b, res[0], v);
  tpu_val_t f = v[TPU_BAL_F];
  /* only when the norms' sum drops by 5% */
  tpu_val_t s = tpu_nn_add(b, c, r);
  tpu_val_t gain = tpu_b_compare(b, "LT", tpu_nn_add(b, v[TPU_BAL_C], v[TPU_BAL_R]), tpu_nn_mulc(b, s, 0.95));
  return tpu_b_select(b, gain, f, one);
}

/* Row and column i (counter) scaled by f: A[i, :] / f, A[:, i] * f. Carry: A, D (B, n), S. */
static void tpu_bal_scale_step(tpu_builder_t* b, void* ctx, tpu_val_t i, const tpu_val_t* in, tpu_val_t* out) {
  const tpu_bal_ctx_t* x = ctx;
  tpu_val_t A = in[0], D = in[1], S = in[2];
  tpu_val_t lo = tpu_mx_column(b, S, TPU_BAL_LO), hi = tpu_mx_column(b, S, TPU_BAL_HI), fin = tpu_bal_flag(b, S, 2);
  tpu_val_t ib = tpu_b_broadcast_in_dim(b, i, 1, tpu_b_aval(b, lo)->dims, NULL);
  tpu_val_t act = tpu_b_binary(b, "stablehlo.and", tpu_b_unary(b, "stablehlo.not", fin),
                               tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", ib, lo), tpu_b_compare(b, "LE", ib, hi)));
  /* |entries| (complex: the modulus) of column and row i */
  tpu_val_t col = tpu_b_unary(b, "stablehlo.abs", tpu_mx_take(b, A, 2, i));
  tpu_val_t row = tpu_b_unary(b, "stablehlo.abs", tpu_mx_take(b, A, 1, i));
  tpu_aval_t la = *tpu_b_aval(b, col), ia = tpu_mx_retype(&la, TPU_I32);
  tpu_val_t idx = tpu_b_iota(b, &ia, 1), zero = tpu_b_full(b, &la, 0);
  tpu_val_t ge_lo = tpu_b_compare(b, "GE", idx, tpu_mx_bcast_batch(b, lo, &ia));
  tpu_val_t le_hi = tpu_b_compare(b, "LE", idx, tpu_mx_bcast_batch(b, hi, &ia));
  tpu_val_t inr = tpu_b_binary(b, "stablehlo.and", ge_lo, le_hi);
  tpu_val_t c = tpu_b_unary(b, "stablehlo.sqrt", tpu_mx_sum(b, tpu_b_select(b, inr, tpu_nn_mul(b, col, col), zero), 1));
  tpu_val_t r = tpu_b_unary(b, "stablehlo.sqrt", tpu_mx_sum(b, tpu_b_select(b, inr, tpu_nn_mul(b, row, row), zero), 1));
  int64_t d1 = 1;
  tpu_val_t ca = tpu_b_reduce(b, tpu_b_select(b, le_hi, col, zero), tpu_b_const(b, la.dtype, 0), 1, &d1,
                              "stablehlo.maximum");
  tpu_val_t ra = tpu_b_reduce(b, tpu_b_select(b, ge_lo, row, zero), tpu_b_const(b, la.dtype, 0), 1, &d1,
                              "stablehlo.maximum");
  tpu_val_t z = tpu_ops_like(b, c, 0), one = tpu_ops_like(b, c, 1);
  tpu_val_t live = tpu_b_binary(b, "stablehlo.and", act, tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "NE", c, z),
                                                                     tpu_b_compare(b, "NE", r, z)));
  tpu_val_t f = tpu_bal_factor(b, x, c, ca, r, ra, live);
  tpu_val_t di = tpu_mx_take(b, D, 1, i);
  /* dgebal's guards: the accumulated factor stays inside the safe range */
  tpu_val_t g1 = tpu_b_binary(b, "stablehlo.and", tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "LT", f, one), tpu_b_compare(b, "LT", di, one)),
                              tpu_b_compare(b, "LE", tpu_nn_mul(b, f, di), tpu_ops_like(b, f, x->sfmin1)));
  tpu_val_t g2 = tpu_b_binary(b, "stablehlo.and", tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GT", f, one), tpu_b_compare(b, "GT", di, one)),
                              tpu_b_compare(b, "GE", di, tpu_nn_div(b, tpu_ops_like(b, f, x->sfmax1), f)));
  tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", live, tpu_b_compare(b, "NE", f, one));
  ok = tpu_b_binary(b, "stablehlo.and", ok, tpu_b_unary(b, "stablehlo.not", tpu_b_binary(b, "stablehlo.or", g1, g2)));
  f = tpu_b_select(b, ok, f, one);
  tpu_val_t s = tpu_b_select(b, tpu_b_compare(b, "EQ", idx, tpu_b_broadcast_in_dim(b, i, ia.rank, ia.dims, NULL)),
                             tpu_mx_bcast_batch(b, f, &la), tpu_b_full(b, &la, 1));
  tpu_aval_t ma = *tpu_b_aval(b, A);
  if (tpu_dtype_is_complex(ma.dtype)) s = tpu_ops_complex(b, s, tpu_b_full(b, &la, 0));
  out[0] = tpu_nn_div(b, tpu_nn_mul(b, A, tpu_mx_bcast_vec(b, s, &ma, true)), tpu_mx_bcast_vec(b, s, &ma, false));
  out[1] = tpu_mx_put(b, D, i, tpu_nn_mul(b, di, f));
  out[2] = tpu_bal_state(b, lo, hi, lo, tpu_b_binary(b, "stablehlo.or", tpu_bal_flag(b, S, 1), ok), fin);
}

static void tpu_bal_scale_pass(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  tpu_val_t S = in[2];
  tpu_val_t lo = tpu_mx_column(b, S, TPU_BAL_LO), hi = tpu_mx_column(b, S, TPU_BAL_HI);
  tpu_val_t init[3] = {in[0], in[1], tpu_bal_state(b, lo, hi, lo, tpu_b_compare(b, "NE", lo, lo), tpu_bal_flag(b, S, 2))};
  tpu_mx_for(b, tpu_b_aval(b, in[0])->dims[1], 3, init, tpu_bal_scale_step, ctx, out);
}

/* S with the "changed" flag set, so that the next loop's first pass runs. */
static tpu_val_t tpu_bal_rearm(tpu_builder_t* b, tpu_val_t S) {
  tpu_val_t lo = tpu_mx_column(b, S, TPU_BAL_LO);
  return tpu_bal_state(b, lo, tpu_mx_column(b, S, TPU_BAL_HI), lo, tpu_b_compare(b, "EQ", lo, lo),
                       tpu_bal_flag(b, S, 2));
}

tpu_eig_balance_t tpu_eig_balance(tpu_builder_t* b, tpu_val_t A) {
  static const int cols = 1;
  tpu_aval_t m = *tpu_b_aval(b, A);
  int64_t n = m.dims[1];
  tpu_dtype_t rt = m.dtype == TPU_C64 ? TPU_F32 : m.dtype == TPU_C128 ? TPU_F64 : m.dtype;
  tpu_aval_t va = tpu_mx_drop(&m, 1), ia = tpu_mx_retype(&va, TPU_I32), ba = tpu_mx_drop(&ia, 1);
  va.dtype = rt; /* the scale factors are real */
  tpu_val_t zero = tpu_b_full(b, &ba, 0);
  tpu_val_t S = tpu_bal_rearm(b, tpu_bal_state(b, zero, tpu_b_full(b, &ba, (double)(n - 1)), zero,
                                               tpu_b_compare(b, "NE", zero, zero), tpu_b_compare(b, "NE", zero, zero)));
  tpu_val_t st[3] = {A, tpu_b_iota(b, &ia, 1), S}, res[3];
  tpu_mx_while(b, n + 1, 3, st, tpu_bal_changed, tpu_bal_swap_pass, NULL, res, NULL);
  st[0] = res[0];
  st[1] = res[1];
  st[2] = tpu_bal_rearm(b, res[2]);
  tpu_mx_while(b, n + 1, 3, st, tpu_bal_changed, tpu_bal_swap_pass, (void*)&cols, res, NULL);
  tpu_eig_balance_t bal = {TPU_NOVAL, res[1], TPU_NOVAL, TPU_NOVAL};
  double ulp = rt == TPU_F64 ? DBL_EPSILON : FLT_EPSILON, safmin = rt == TPU_F64 ? DBL_MIN : FLT_MIN;
  tpu_bal_ctx_t x = {safmin / ulp, ulp / safmin, 2 * safmin / ulp, ulp / (2 * safmin)};
  tpu_val_t sc[3] = {res[0], tpu_b_full(b, &va, 1), tpu_bal_rearm(b, res[2])};
  /* each pass moves some norm sum down by 5%: a few passes; the cap only bounds the loop */
  tpu_mx_while(b, 100, 3, sc, tpu_bal_changed, tpu_bal_scale_pass, &x, res, NULL);
  bal.A = res[0];
  bal.D = res[1];
  bal.S = res[2];
  return bal;
}

/* Step ii of dgebak's backward permutation. Carry: V, perm, S. */
static void tpu_bal_unperm_step(tpu_builder_t* b, void* ctx, tpu_val_t ii, const tpu_val_t* in, tpu_val_t* out) {
  (void)ctx;
  tpu_val_t S = in[2], lo = tpu_mx_column(b, S, TPU_BAL_LO), hi = tpu_mx_column(b, S, TPU_BAL_HI);
  tpu_val_t iib = tpu_b_broadcast_in_dim(b, ii, 1, tpu_b_aval(b, lo)->dims, NULL), one = tpu_ops_like(b, lo, 1);
  /* positions below lo in reverse order of their exchanges, then those above hi */
  tpu_val_t i = tpu_b_select(b, tpu_b_compare(b, "LT", iib, lo), tpu_nn_sub(b, tpu_nn_sub(b, lo, one), iib), iib);
  tpu_val_t skip = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", i, lo), tpu_b_compare(b, "LE", i, hi));
  tpu_aval_t pa = *tpu_b_aval(b, in[1]);
  tpu_val_t at = tpu_b_compare(b, "EQ", tpu_b_iota(b, &pa, 1), tpu_mx_bcast_batch(b, i, &pa));
  tpu_val_t k = tpu_mx_pick(b, at, in[1], 1);
  out[0] = tpu_mx_swap(b, in[0], 1, i, tpu_b_select(b, skip, i, k));
  out[1] = in[1];
  out[2] = S;
}

tpu_val_t tpu_eig_unbalance(tpu_builder_t* b, const tpu_eig_balance_t* bal, tpu_val_t V) {
  tpu_aval_t va = *tpu_b_aval(b, V), da = *tpu_b_aval(b, bal->D);
  tpu_val_t d = tpu_ops_complex(b, bal->D, tpu_b_full(b, &da, 0));
  V = tpu_nn_mul(b, V, tpu_mx_bcast_vec(b, d, &va, false));
  tpu_val_t init[3] = {V, bal->perm, bal->S}, res[3];
  tpu_mx_for(b, va.dims[1], 3, init, tpu_bal_unperm_step, NULL, res);
  return res[0];
}
