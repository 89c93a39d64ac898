/* Lowerings: the symmetric eigendecomposition (_linalg_eigh, and through it
 * torch.linalg.eigh / eigvalsh).
 *
 * Cyclic Jacobi with the parallel round-robin ("tournament", Brent–Luk)
 * ordering. The matrix (read from the UPLO triangle, scaled by its largest
 * |entry|, padded to even N with one decoupled zero index when n is odd) is
 * kept in a layout where position i < h = N/2 is paired with position h + i.
 * One step rotates all h pairs at once: per pair the 2x2 symmetric Schur
 * rotation (Golub & Van Loan's sym.schur2, smaller angle), applied to the top
 * and bottom halves of the rows, then of the columns, in Rutishauser's form
 * (x - s (y + tau x), tau = s / (1 + c)), which keeps float32 orthogonality
 * close to LAPACK's; the rotated pair entries are set to their exact values
 * (0 off the diagonal, a_pp - t a_pq and a_qq + t a_pq on it). That is O(N^2)
 * elementwise work per step, no matrix product. A static permutation of rows and
 * columns (one index fixed, the other N - 1 cycled) then brings the next
 * pairing; N - 1 steps are a sweep, in which every pair meets once and after
 * which the layout is the identity again. Eigenvectors accumulate as V <- V J,
 * carried as V^T so that its rotations and moves act on contiguous rows.
 *
 * Sweeps run in a stablehlo.while while some batch element has an off-diagonal
 * Frobenius norm above eps(dtype) * ||A||_F, at most TPU_EIGH_MAX_SWEEPS. Then
 * the eigenvalues (the diagonal, scaled back) are sorted ascending with a stable
 * sort and the eigenvector columns gathered in that order.
 *
 * From TPU_EIGH_TRIDIAG_MIN rows the sweeps do not start from A but from
 * V0^T A V0, V0 from tridiag.c (Householder tridiagonalisation, bisection,
 * inverse iteration): nearly diagonal, so usually no sweep runs, and where V0 is
 * further off (hard spectra) the sweeps polish it. */
#include "index.h"
#include "matrix.h"
#include "tridiag.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Jacobi converges quadratically: 128 x 128 random matrices take 8 sweeps in
 * float32 and about 10 in float64; the cap only bounds pathological inputs. */
#define TPU_EIGH_MAX_SWEEPS 20

/* From this many rows the sweeps start from tridiag.c's near-diagonalisation
 * (64 matrices of 12 rows: as fast as Jacobi alone; of 16 rows 1.3 ms against
 * 2.2, of 32 rows 3.2 ms against 31). */
#define TPU_EIGH_TRIDIAG_MIN 16

/* The rotation of the halves (L, R) of a matrix along dim (rows: dim r-2,
 * columns: r-1) by the per-pair (batch..., h) s and tau, in Rutishauser's form:
 * L - s (R + tau L), R + s (L - tau R). */
static void tpu_eigh_rotate(tpu_builder_t* b, tpu_val_t* L, tpu_val_t* R, int dim, tpu_val_t s, tpu_val_t tau) {
  tpu_aval_t half = *tpu_b_aval(b, *L);
  bool as_row = dim == half.rank - 1;
  tpu_val_t sm = tpu_mx_bcast_vec(b, s, &half, as_row), tm = tpu_mx_bcast_vec(b, tau, &half, as_row);
  tpu_val_t nl = tpu_b_binary(
      b, "stablehlo.subtract", *L,
      tpu_b_binary(b, "stablehlo.multiply", sm,
                   tpu_b_binary(b, "stablehlo.add", *R, tpu_b_binary(b, "stablehlo.multiply", tm, *L))));
  tpu_val_t nr = tpu_b_binary(
      b, "stablehlo.add", *R,
      tpu_b_binary(b, "stablehlo.multiply", sm,
                   tpu_b_binary(b, "stablehlo.subtract", *L, tpu_b_binary(b, "stablehlo.multiply", tm, *R))));
  *L = nl;
  *R = nr;
}

/* The round-robin move of halves (lo, hi) along dim: the concatenation of the
 * pieces [t_0, b_0, t_1..t_{h-2}, b_1..b_{h-1}, t_{h-1}] (t_0 stays, the rest cycle). */
static tpu_val_t tpu_eigh_merge(tpu_builder_t* b, tpu_val_t top, tpu_val_t bot, int dim) {
  int64_t h = tpu_b_aval(b, top)->dims[dim];
  if (h < 2) {
    tpu_val_t both[2] = {top, bot};
    return tpu_b_concat(b, 2, both, dim);
  }
  const tpu_val_t src[5] = {top, bot, top, bot, top};
  int64_t lo[5] = {0, 0, 1, 1, h - 1}, hi[5] = {1, 1, h - 1, h, h};
  tpu_val_t parts[5];
  int np = 0;
  for (int i = 0; i < 5; i++)
    if (hi[i] > lo[i]) parts[np++] = tpu_mx_slice(b, src[i], dim, lo[i], hi[i]);
  return tpu_b_concat(b, np, parts, dim);
}

/* The Jacobi rotations of the pairs: t (tangent), s, tau (batch..., h) from the
 * pair entries app, aqq, apq; t = 0 (no rotation) where apq = 0. */
static void tpu_eigh_angles(tpu_builder_t* b, tpu_val_t app, tpu_val_t aqq, tpu_val_t apq, tpu_val_t* t,
                            tpu_val_t* s, tpu_val_t* tau) {
  tpu_aval_t v = *tpu_b_aval(b, app);
  tpu_val_t zero = tpu_b_full(b, &v, 0), one = tpu_b_full(b, &v, 1);
  tpu_val_t theta = tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.subtract", aqq, app),
                                 tpu_b_binary(b, "stablehlo.multiply", tpu_b_full(b, &v, 2), apq));
  /* t = sign(theta) / (|theta| + sqrt(1 + theta^2)), sign(0) = +1; |theta| = inf gives 0. */
  tpu_val_t at = tpu_b_unary(b, "stablehlo.abs", theta);
  tpu_val_t root = tpu_b_unary(
      b, "stablehlo.sqrt", tpu_b_binary(b, "stablehlo.add", one, tpu_b_binary(b, "stablehlo.multiply", at, at)));
  tpu_val_t mag = tpu_b_binary(b, "stablehlo.divide", one, tpu_b_binary(b, "stablehlo.add", at, root));
  tpu_val_t signed_t = tpu_b_select(b, tpu_b_compare(b, "GE", theta, zero), mag, tpu_b_unary(b, "stablehlo.negate", mag));
  *t = tpu_b_select(b, tpu_b_compare(b, "EQ", apq, zero), zero, signed_t);
  tpu_val_t c = tpu_b_unary(
      b, "stablehlo.rsqrt", tpu_b_binary(b, "stablehlo.add", one, tpu_b_binary(b, "stablehlo.multiply", *t, *t)));
  *s = tpu_b_binary(b, "stablehlo.multiply", *t, c);
  *tau = tpu_b_binary(b, "stablehlo.divide", *s, tpu_b_binary(b, "stablehlo.add", one, c));
}

typedef struct tpu_eigh_ctx {
  int64_t h;      /* pairs per step */
  bool vectors;   /* V is carried */
  tpu_dtype_t t;  /* compute dtype */
} tpu_eigh_ctx_t;

/* An h x h block with its diagonal set to 0: the rotated pair entries (i, h+i)
 * and (h+i, i) are exactly 0, and later steps rotate them as ordinary
 * off-diagonal entries. (M's own diagonal is left stale: the carried d holds it,
 * and no other entry depends on it.) */
static tpu_val_t tpu_eigh_zero_diag(tpu_builder_t* b, tpu_val_t X) {
  tpu_aval_t m = *tpu_b_aval(b, X), im = tpu_mx_retype(&m, TPU_I32);
  tpu_val_t eq = tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, m.rank - 2), tpu_b_iota(b, &im, m.rank - 1));
  return tpu_b_select(b, eq, tpu_b_full(b, &m, 0), X);
}

/* One parallel step. Carry: M (batch..., N, N), d (batch..., N) its diagonal
 * [, V (batch..., N, N)]. */
static void tpu_eigh_step(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_eigh_ctx_t* c = ctx;
  tpu_val_t M = in[0], d = in[1];
  int r = tpu_b_rank(b, M), last = r - 1;
  int64_t h = c->h;
  tpu_val_t app = tpu_mx_slice(b, d, last - 1, 0, h), aqq = tpu_mx_slice(b, d, last - 1, h, 2 * h);
  tpu_val_t apq = tpu_mx_diag(b, tpu_mx_slice(b, tpu_mx_slice(b, M, r - 2, 0, h), last, h, 2 * h));
  tpu_val_t t, s, tau;
  tpu_eigh_angles(b, app, aqq, apq, &t, &s, &tau);
  tpu_val_t tq = tpu_b_binary(b, "stablehlo.multiply", t, apq);
  tpu_val_t nd[2] = {tpu_b_binary(b, "stablehlo.subtract", app, tq), tpu_b_binary(b, "stablehlo.add", aqq, tq)};
  /* Rows, then columns of each row half, as four h x h blocks Xab; then the
   * round-robin move of rows and columns, assembled in one concatenation per dim. */
  tpu_val_t T = tpu_mx_slice(b, M, r - 2, 0, h), B = tpu_mx_slice(b, M, r - 2, h, 2 * h);
  tpu_eigh_rotate(b, &T, &B, r - 2, s, tau);
  tpu_val_t TT = tpu_mx_slice(b, T, last, 0, h), TB = tpu_mx_slice(b, T, last, h, 2 * h);
  tpu_val_t BT = tpu_mx_slice(b, B, last, 0, h), BB = tpu_mx_slice(b, B, last, h, 2 * h);
  tpu_eigh_rotate(b, &TT, &TB, last, s, tau);
  tpu_eigh_rotate(b, &BT, &BB, last, s, tau);
  tpu_val_t top = tpu_eigh_merge(b, TT, tpu_eigh_zero_diag(b, TB), last);
  tpu_val_t bot = tpu_eigh_merge(b, tpu_eigh_zero_diag(b, BT), BB, last);
  out[0] = tpu_eigh_merge(b, top, bot, r - 2);
  out[1] = tpu_eigh_merge(b, nd[0], nd[1], last - 1);
  if (c->vectors) {
    /* V^T is carried (rows rotate and move: contiguous, unlike columns). */
    tpu_val_t VT = tpu_mx_slice(b, in[2], r - 2, 0, h), VB = tpu_mx_slice(b, in[2], r - 2, h, 2 * h);
    tpu_eigh_rotate(b, &VT, &VB, r - 2, s, tau);
    out[2] = tpu_eigh_merge(b, VT, VB, r - 2);
  }
}

/* Per batch: sum of squares of M off its diagonal. */
static tpu_val_t tpu_eigh_off2(tpu_builder_t* b, tpu_val_t M) {
  tpu_aval_t m = *tpu_b_aval(b, M), im = tpu_mx_retype(&m, TPU_I32);
  tpu_val_t eq = tpu_b_compare(b, "EQ", tpu_b_iota(b, &im, m.rank - 2), tpu_b_iota(b, &im, m.rank - 1));
  tpu_val_t off = tpu_b_select(b, eq, tpu_b_full(b, &m, 0), M);
  int64_t dims[2] = {m.rank - 2, m.rank - 1};
  return tpu_b_reduce(b, tpu_b_binary(b, "stablehlo.multiply", off, off), tpu_b_const(b, m.dtype, 0), 2, dims,
                      "stablehlo.add");
}

/* Sweep loop: carry M, d [, V], thr2 (batch...): the squared off-norm to reach. */
static tpu_val_t tpu_eigh_not_done(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in) {
  (void)k;
  const tpu_eigh_ctx_t* c = ctx;
  tpu_val_t thr2 = in[c->vectors ? 3 : 2];
  tpu_val_t gap = tpu_b_binary(b, "stablehlo.subtract", tpu_eigh_off2(b, in[0]), thr2);
  int nb = tpu_b_rank(b, gap);
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < nb; i++) dims[i] = i;
  tpu_val_t worst = nb ? tpu_b_reduce(b, gap, tpu_b_const(b, c->t, -INFINITY), nb, dims, "stablehlo.maximum") : gap;
  return tpu_b_compare(b, "GT", worst, tpu_b_const(b, c->t, 0));
}

static void tpu_eigh_sweep(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  (void)k;
  const tpu_eigh_ctx_t* c = ctx;
  int nm = c->vectors ? 3 : 2;
  tpu_mx_for(b, 2 * c->h - 1, nm, in, tpu_eigh_step, ctx, out);
  out[nm] = in[nm];
}

/* A (batch..., n, n), n >= 1, scaled by its largest |entry| (per batch) so that
 * squares neither overflow nor underflow; *scale gets that factor. */
static tpu_val_t tpu_eigh_scaled(tpu_builder_t* b, tpu_val_t A, tpu_val_t* scale) {
  tpu_aval_t m = *tpu_b_aval(b, A), bat = tpu_mx_drop(&m, 2);
  int64_t dims[2] = {m.rank - 2, m.rank - 1};
  tpu_val_t amax = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.abs", A), tpu_b_const(b, m.dtype, 0), 2, dims,
                                "stablehlo.maximum");
  *scale = tpu_b_select(b, tpu_b_compare(b, "GT", amax, tpu_b_full(b, &bat, 0)), amax, tpu_b_full(b, &bat, 1));
  return tpu_b_binary(b, "stablehlo.divide", A, tpu_mx_bcast_batch(b, *scale, &m));
}

/* Eigenvalues ascending (*w) and, if vectors, eigenvectors (*V, columns) of the
 * symmetric A (batch..., n, n), n >= 1. From TPU_EIGH_TRIDIAG_MIN rows the
 * Jacobi sweeps start from V0^T A V0, V0 from tridiag.c: nearly diagonal, so
 * few sweeps (often none) remain, and they polish V0 to Jacobi's accuracy. */
static void tpu_eigh_jacobi(tpu_builder_t* b, tpu_val_t A, bool vectors, tpu_val_t* w, tpu_val_t* V) {
  tpu_aval_t m = *tpu_b_aval(b, A);
  int r = m.rank;
  int64_t n = m.dims[r - 1], N = n + n % 2;
  tpu_eigh_ctx_t c = {N / 2, vectors, m.dtype};
  tpu_val_t scale, M = tpu_eigh_scaled(b, A, &scale), VT = TPU_NOVAL;
  int64_t dims[2] = {r - 2, r - 1};
  tpu_val_t fro2 = tpu_b_reduce(b, tpu_b_binary(b, "stablehlo.multiply", M, M), tpu_b_const(b, m.dtype, 0), 2, dims,
                                "stablehlo.add");
  if (n >= TPU_EIGH_TRIDIAG_MIN) {
    tpu_val_t V0 = tpu_tridiag_eigvecs(b, M);
    VT = tpu_mx_mT(b, V0);
    M = tpu_mx_matmul(b, VT, tpu_mx_matmul(b, M, V0));
    M = tpu_b_binary(b, "stablehlo.multiply", tpu_b_binary(b, "stablehlo.add", M, tpu_mx_mT(b, M)),
                     tpu_b_full(b, &m, 0.5));
  }
  if (N != n) { /* a zero row and column: a decoupled eigenpair (0, e_n) that no rotation touches */
    M = tpu_mx_pad1(b, M, false);
    if (VT != TPU_NOVAL) VT = tpu_mx_pad1(b, VT, true);
  }
  tpu_aval_t big = *tpu_b_aval(b, M);
  /* From scratch, sweeps run to off(M) <= eps ||A||_F. After tridiag.c, to
   * 4 sqrt(n) eps ||A||_F: its result for a matrix without close eigenvalues
   * lands at about sqrt(n) eps ||A||_F (LAPACK's at 0.7 sqrt(n) eps ||A||_F,
   * measured on random 32..128-row matrices), and a sweep would only polish
   * rounding; where it left more (repeated, clustered or graded spectra),
   * sweeps run as from scratch. */
  double eps = tpu_mx_eps(m.dtype);
  double tol = VT != TPU_NOVAL ? 4.0 * sqrt((double)n) * eps : eps;
  tpu_val_t thr2 = tpu_b_binary(b, "stablehlo.multiply", fro2, tpu_b_full(b, tpu_b_aval(b, fro2), tol * tol));
  tpu_val_t init[4], res[4];
  int nc = 0;
  init[nc++] = M;
  init[nc++] = tpu_mx_diag(b, M);
  if (vectors) init[nc++] = VT != TPU_NOVAL ? VT : tpu_mx_eye(b, &big);
  init[nc++] = thr2;
  tpu_mx_while(b, TPU_EIGH_MAX_SWEEPS, nc, init, tpu_eigh_not_done, tpu_eigh_sweep, &c, res, NULL);
  tpu_val_t d = tpu_mx_slice(b, res[1], r - 2, 0, n);
  tpu_aval_t dv = *tpu_b_aval(b, d);
  d = tpu_b_binary(b, "stablehlo.multiply", d, tpu_mx_bcast_batch(b, scale, &dv));
  tpu_val_t idx;
  tpu_idx_sort(b, d, r - 2, false, w, &idx);
  if (!vectors) return;
  tpu_val_t Vn = tpu_mx_mT(b, tpu_mx_slice(b, tpu_mx_slice(b, res[2], r - 2, 0, n), r - 1, 0, n));
  tpu_aval_t ia = tpu_mx_retype(&m, TPU_I64);
  *V = tpu_idx_gather_dim(b, Vn, r - 1, tpu_mx_bcast_vec(b, idx, &ia, true));
}

/* Arg 0 of _linalg_eigh: a float32/float64 batch of square matrices; ATen's messages. */
static bool tpu_eigh_check(tpu_builder_t* b, const tpu_aval_t* a) {
  if (a->rank < 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "linalg.eigh: The input tensor A must have at least 2 dimensions.");
    return false;
  }
  if (a->dims[a->rank - 1] != a->dims[a->rank - 2]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "linalg.eigh: A must be batches of square matrices, but they are %" PRId64
               " by %" PRId64 " matrices", a->dims[a->rank - 2], a->dims[a->rank - 1]);
    return false;
  }
  if (a->dtype == TPU_F32 || a->dtype == TPU_F64) return true;
  if (tpu_dtype_is_complex(a->dtype))
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "linalg.eigh: complex inputs are not supported on tpu yet");
  else
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"linalg_eigh_cpu\" not implemented for '%s'",
               tpu_dtype_scalar_type_name(a->dtype));
  return false;
}

/* _linalg_eigh(A, UPLO="L", compute_v=True) -> (eigenvalues, eigenvectors) */
static tpu_status_t* tpu_lower__linalg_eigh(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  const char* uplo = tpu_op_kind(op, 1) == TPU_ARG_STRING ? tpu_op_arg(op, 1)->u.str : "L";
  bool vectors = tpu_op_bool(op, 2, true);
  if (strcmp(uplo, "L") != 0 && strcmp(uplo, "U") != 0)
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "Expected UPLO argument to be 'L' or 'U', but got %s", uplo);
  tpu_aval_t a = tpu_op_aval(op, 0);
  if (!tpu_eigh_check(b, &a)) return NULL;
  tpu_aval_t wa = tpu_mx_drop(&a, 1);
  int64_t zero = 0;
  tpu_aval_t none = tpu_aval_make(a.dtype, 1, &zero);
  *nouts = 2;
  outs[1] = tpu_b_full(b, vectors ? &a : &none, 0);
  if (a.dims[a.rank - 1] == 0 || tpu_aval_numel(&a) == 0) {
    outs[0] = tpu_b_full(b, &wa, 0);
    return NULL;
  }
  /* Only the UPLO triangle is read: the other one mirrors it. */
  tpu_val_t A = tpu_op_tensor(b, op, 0);
  tpu_val_t S = tpu_b_select(b, tpu_mx_tri_pred(b, &a, uplo[0] == 'L'), A, tpu_mx_mT(b, A));
  tpu_mx_check_finite(b, op, S, "linalg.eigh");
  tpu_eigh_jacobi(b, S, vectors, &outs[0], &outs[1]);
  return NULL;
}

const tpu_lowering_t tpu_lowerings_eigh[] = {
    {"_linalg_eigh", tpu_lower__linalg_eigh},
    {NULL, NULL},
};
