/* Balancing for the general eigendecomposition (eig_balance.c, used by eig.c):
 * LAPACK dgebal's job 'B' on A (B, n, n) real, and dgebak's undoing on the
 * right eigenvectors. */
#ifndef TORCHTPU_SRC_OPS_EIG_H_
#define TORCHTPU_SRC_OPS_EIG_H_
#include "matrix.h"

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
#endif
