/* Householder QR as a building block (qr.c) for other decompositions (svd.c). */
#ifndef TORCHTPU_SRC_OPS_QR_H_
#define TORCHTPU_SRC_OPS_QR_H_
#include "matrix.h"

/* A Householder reflector H = I - tau v v^T, LAPACK dlarfg's: for vectors x
 * (batch..., m), the pivot entry `at` and the entries `below` it (i1 masks of
 * x's shape), H maps x's pivot and below part to (beta, 0, ...); v is 1 at the
 * pivot, 0 outside pivot and below. beta = -sign(alpha) ||.||; where x is zero
 * below the pivot, tau = 0 (!live) and beta is the pivot entry itself. */
typedef struct tpu_qr_reflector {
  tpu_val_t v;    /* (batch..., m) */
  tpu_val_t tau;  /* (batch...) */
  tpu_val_t beta; /* (batch...): the pivot entry of H x */
  tpu_val_t live; /* (batch...) i1: tau != 0 */
} tpu_qr_reflector_t;
tpu_qr_reflector_t tpu_qr_larfg(tpu_builder_t* b, tpu_val_t x, tpu_val_t at, tpu_val_t below);
/* geqrf of A (batch..., m, n), f32/f64: LAPACK's compact form (R on and above
 * the diagonal, reflectors below) and tau (batch..., min(m, n)). */
void tpu_qr_geqrf(tpu_builder_t* b, tpu_val_t A, tpu_val_t* out_a, tpu_val_t* out_tau);
/* geqr2 (unblocked: one loop over the columns, each a rank-1 update of the
 * whole matrix), the same result as tpu_qr_geqrf; fewer ops to compile, for
 * paths that rarely run. */
void tpu_qr_geqr2(tpu_builder_t* b, tpu_val_t A, tpu_val_t* out_a, tpu_val_t* out_tau);
/* The first `cols` columns of Q = H_0 ... H_{k-1} (m x m) of a compact form (orgqr). */
tpu_val_t tpu_qr_orgqr(tpu_builder_t* b, tpu_val_t V, tpu_val_t tau, int64_t cols);
/* Q^T X (forward: H_0 first) or Q X (H_{k-1} first) for Q = H_0 ... H_{k-1},
 * H_j = I - tau_j y_j y_j^T, given the reflectors as the columns of Y
 * (batch..., m, k) and tau (batch..., k); a column whose tau is 0 must be zero.
 * Compact WY form: two matrix products and one triangular solve. */
tpu_val_t tpu_qr_apply_reflectors(tpu_builder_t* b, tpu_val_t X, tpu_val_t Y, tpu_val_t tau, bool forward);
#endif
