/* Householder QR as a building block (qr.c) for other decompositions (svd.c). */
#ifndef TORCHTPU_SRC_OPS_QR_H_
#define TORCHTPU_SRC_OPS_QR_H_
#include "matrix.h"

/* geqrf of A (batch..., m, n), f32/f64: LAPACK's compact form (R on and above
 * the diagonal, reflectors below) and tau (batch..., min(m, n)). */
void tpu_qr_geqrf(tpu_builder_t* b, tpu_val_t A, tpu_val_t* out_a, tpu_val_t* out_tau);
/* The first `cols` columns of Q = H_0 ... H_{k-1} (m x m) of a compact form (orgqr). */
tpu_val_t tpu_qr_orgqr(tpu_builder_t* b, tpu_val_t V, tpu_val_t tau, int64_t cols);
#endif
