/* A fast orthogonal near-diagonaliser of symmetric matrices (tridiag.c): the
 * first stage of eigh.c's decomposition for larger matrices. */
#ifndef TORCHTPU_SRC_OPS_TRIDIAG_H_
#define TORCHTPU_SRC_OPS_TRIDIAG_H_
#include "matrix.h"

/* An orthogonal V0 (batch..., n, n) whose columns approximate the eigenvectors
 * of the symmetric A (batch..., n, n), n >= 2, f32/f64, in ascending order of
 * their eigenvalues. A's entries must be small enough that their squares,
 * summed over a row, do not overflow (the callers scale A). V0 is orthogonal
 * to working precision whatever A is (repeated or clustered eigenvalues
 * included); how diagonal V0^T A V0 is depends on A, so the caller finishes
 * with Jacobi (eigh.c). */
tpu_val_t tpu_tridiag_eigvecs(tpu_builder_t* b, tpu_val_t A);
#endif
