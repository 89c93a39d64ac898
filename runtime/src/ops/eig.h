/* The general eigendecomposition's parts, internal to eig.c, eig_balance.c,
 * eig_complex.c and eig_vectors.c: the loop context, balancing (LAPACK
 * dgebal's job 'B' on A (B, n, n), real or complex, and dgebak's undoing on
 * the right eigenvectors), the complex QR iteration's parts, the Schur
 * blocks and eigenvectors, and the small helpers they share. */
#ifndef TORCHTPU_SRC_OPS_EIG_H_
#define TORCHTPU_SRC_OPS_EIG_H_
#include "matrix.h"
#include "nn.h"
#include "qr.h"

/* What every loop body needs: sizes, dtype and dlahqr's constants. */
typedef struct tpu_eig_ctx {
  int64_t n, N; /* rows, padded rows (n + 2) */
  tpu_dtype_t t; /* the real dtype (of the parts, for complex input) */
  double ulp, smlnum;
  int64_t itmax;
  bool vectors; /* accumulate Z */
} tpu_eig_ctx_t;

typedef struct tpu_eig_balance {
  tpu_val_t A;    /* (B, n, n): D^-1 P^T A P D */
  tpu_val_t perm; /* (B, n) i32: the row/column position i was exchanged with (i itself inside [lo, hi]) */
  tpu_val_t D;    /* (B, n): the scale factors (1 outside [lo, hi]) */
  tpu_val_t S;    /* (B, 4) i32: lo, hi (0-based, inclusive) and dgebal's internal flags */
} tpu_eig_balance_t;

/* Permutes rows and columns to isolate eigenvalues (rows, then columns, with
 * zeros off the diagonal pushed out of [lo, hi]), then scales rows and
 * columns of [lo, hi] by powers of 2 until their 2-norms are within 5% of
 * each other's balance, as dgebal does. */
tpu_eig_balance_t tpu_eig_balance(tpu_builder_t* b, tpu_val_t A);
/* P D V for eigenvectors V (B, n, m) of the balanced matrix (dgebak 'B', 'R'). */
tpu_val_t tpu_eig_unbalance(tpu_builder_t* b, const tpu_eig_balance_t* bal, tpu_val_t V);

/* ---- shared by eig.c and eig_complex.c (values are (B, ...) batches) ---- */
tpu_val_t tpu_eig_abs(tpu_builder_t* b, tpu_val_t x);
tpu_val_t tpu_eig_max(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_eig_min(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_eig_sqrt(tpu_builder_t* b, tpu_val_t x);
tpu_val_t tpu_eig_and(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_eig_or(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_eig_not(tpu_builder_t* b, tpu_val_t x);
tpu_val_t tpu_eig_cmp(tpu_builder_t* b, const char* dir, tpu_val_t x, tpu_val_t y);
/* sqrt(x^2 + y^2) without overflow (dlapy2), real x, y. */
tpu_val_t tpu_eig_hypot(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
/* x / y where y != 0, else x / 1 (the lane is masked later). */
tpu_val_t tpu_eig_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
/* A per-batch i32 value (B) of the 0-d k. */
tpu_val_t tpu_eig_bk(tpu_builder_t* b, tpu_val_t k, int64_t B);
/* i32 iota along dim of x's shape. */
tpu_val_t tpu_eig_iota(tpu_builder_t* b, tpu_val_t x, int dim);
/* x (B, N) at a per-batch index (B) i32; 0 outside [0, N). */
tpu_val_t tpu_eig_at(tpu_builder_t* b, tpu_val_t x, tpu_val_t idx);
/* y[k] = x[k + s] along dim 1 of x (B, N), 0 past the ends. */
tpu_val_t tpu_eig_shift(tpu_builder_t* b, tpu_val_t x, int64_t s);
/* H's diagonal d[k] = H(k, k), sub[k] = H(k, k-1), sup[k] = H(k-1, k) (0 at k = 0), each (B, N). */
void tpu_eig_diagonals(tpu_builder_t* b, tpu_val_t H, tpu_val_t* d, tpu_val_t* sub, tpu_val_t* sup);
/* x (B, R, C) times the reflector I - tau v v^H (v (B, R) or (B, C), tau (B)) from
 * the left (dim 1: x - tau v (v^H x)) or the right (dim 2: x - tau (x v) v^H). */
tpu_val_t tpu_eig_reflect(tpu_builder_t* b, tpu_val_t x, tpu_val_t v, tpu_val_t tau, int dim);
/* LAPACK's dlarfg, or zlarfg for complex x (beta real, tau complex: also a
 * lone complex pivot is made real), over x's last dim (see tpu_qr_larfg). */
tpu_qr_reflector_t tpu_eig_larfg(tpu_builder_t* b, tpu_val_t x, tpu_val_t at, tpu_val_t below);
/* `size` rows (dim 1) or columns (dim 2) of x (B, R, C) from the 0-d k, and back. */
tpu_val_t tpu_eig_band(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t k, int64_t size);
tpu_val_t tpu_eig_put_band(tpu_builder_t* b, tpu_val_t x, tpu_val_t band, int dim, tpu_val_t k);
/* dlahqr's / zlahqr's search for a negligible subdiagonal entry H(k, k-1),
 * 1 <= k <= i: the largest such k, else 0 (the window's top l). */
tpu_val_t tpu_eig_deflation_point(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub,
                                  tpu_val_t sup, tpu_val_t i);
/* The bulge chase of one QR sweep for every `sweep`ing matrix (B) i32 m, i, l:
 * rows k in [min m, max i - 1] of those, reflectors as wide as v (B, 3: the
 * real double shift's first column, B, 2: the complex single shift's). */
void tpu_eig_chase(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t* H, tpu_val_t* Z, tpu_val_t sweep, tpu_val_t m,
                   tpu_val_t i, tpu_val_t l, tpu_val_t v);
/* zlahqr's shift for window [l, i] after kdefl iterations without a deflation,
 * and where its sweep starts (the returned m) with the first column *v (B, 2). */
tpu_val_t tpu_eig_complex_start(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t d, tpu_val_t sub, tpu_val_t sup,
                                tpu_val_t i, tpu_val_t l, tpu_val_t kdefl, tpu_val_t* v);
/* H <- D^H H D and Z <- Z D (vectors) for the `sweep`ing matrices, D diagonal
 * unitary: the subdiagonal real and non-negative again after a complex sweep. */
void tpu_eig_complex_realify(tpu_builder_t* b, tpu_val_t* H, tpu_val_t* Z, tpu_val_t sweep, bool vectors);
/* dlanv2 on the real Schur form H, Z (eig_vectors.c): the eigenvalues wr + i
 * wi (returned complex, *wi (B, n) real), pairs exactly conjugate; with
 * c->vectors also the complex triangular *T and its *Zc (B, n, n). */
tpu_val_t tpu_eig_real_blocks(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t H, tpu_val_t Z, tpu_val_t* wi,
                              tpu_val_t* T, tpu_val_t* Zc);
/* The eigenvectors (B, n, n) of the triangular complex Schur form T with
 * vectors Zc and eigenvalues w, the balancing undone; wi as in
 * tpu_eig_real_blocks for real input, TPU_NOVAL for complex input. */
tpu_val_t tpu_eig_vectors(tpu_builder_t* b, const tpu_eig_ctx_t* c, tpu_val_t T, tpu_val_t Zc, tpu_val_t w,
                          tpu_val_t wi, const tpu_eig_balance_t* bal);
#endif
