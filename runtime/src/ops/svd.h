/* The SVD as a building block (svd.c) and what is built on it elsewhere
 * (lstsq.c), listed in svd.c's table. */
#ifndef TORCHTPU_SRC_OPS_SVD_H_
#define TORCHTPU_SRC_OPS_SVD_H_
#include "matrix.h"

typedef struct tpu_svd {
  tpu_val_t U, S, Vh;
} tpu_svd_t;

/* The SVD of A (batch..., m, n), any shape (one-sided Jacobi, see svd.c): S
 * descending (batch..., min(m, n)); with uv, U (m, full ? m : k) and Vh
 * (full ? n : k, n). Non-finite A fails op's device-side check. */
tpu_svd_t tpu_svd_factor(tpu_builder_t* b, tpu_op_t* op, tpu_val_t A, bool uv, bool full);

/* linalg_lstsq (lstsq.c). */
tpu_status_t* tpu_lower_linalg_lstsq(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts);
#endif
