/* The nn family: normalisation (nn.c), losses (nn_loss.c), pooling (nn_pool.c).
 *
 * One op table, tpu_lowerings_nn[] in nn.c; the split files expose their
 * lowerings here. Small value helpers shared by the three files live in nn.c. */
#ifndef TORCHTPU_SRC_OPS_NN_H_
#define TORCHTPU_SRC_OPS_NN_H_

#include "common.h"

#define TPU_NN_LOWERING(name) \
  tpu_status_t* tpu_lower_##name(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts)

/* PyTorch's at::Reduction enum (the `int reduction` argument of losses). */
enum { TPU_NN_REDUCTION_NONE = 0, TPU_NN_REDUCTION_MEAN = 1, TPU_NN_REDUCTION_SUM = 2 };

/* x * c and x + c for a constant c of x's dtype. */
tpu_val_t tpu_nn_mulc(tpu_builder_t* b, tpu_val_t x, double c);
tpu_val_t tpu_nn_addc(tpu_builder_t* b, tpu_val_t x, double c);
/* Named elementwise helpers (same shapes and dtypes). */
tpu_val_t tpu_nn_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_nn_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_nn_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_nn_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y);
/* Sum of x over `dims` (removed from the shape). */
tpu_val_t tpu_nn_sum(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims);
/* Sum over every dim: a 0-d value. */
tpu_val_t tpu_nn_sum_all(tpu_builder_t* b, tpu_val_t x);
/* A 0-d value broadcast to x's shape. */
tpu_val_t tpu_nn_bcast0(tpu_builder_t* b, tpu_val_t s, tpu_val_t like);
/* Formats sizes as PyTorch prints them in messages: "[2, 3]". */
const char* tpu_nn_fmt_shape(char* buf, size_t cap, int n, const int64_t* dims);

/* ---- losses (nn_loss.c) ---- */
TPU_NN_LOWERING(nll_loss_forward);
TPU_NN_LOWERING(nll_loss_backward);
TPU_NN_LOWERING(mse_loss);
TPU_NN_LOWERING(mse_loss_backward);
TPU_NN_LOWERING(smooth_l1_loss);
TPU_NN_LOWERING(smooth_l1_loss_backward);
TPU_NN_LOWERING(huber_loss);
TPU_NN_LOWERING(huber_loss_backward);
TPU_NN_LOWERING(soft_margin_loss);
TPU_NN_LOWERING(soft_margin_loss_backward);
TPU_NN_LOWERING(binary_cross_entropy);
TPU_NN_LOWERING(binary_cross_entropy_backward);
TPU_NN_LOWERING(binary_cross_entropy_with_logits);

/* ---- pooling (nn_pool.c) ---- */
TPU_NN_LOWERING(max_pool_with_indices);
TPU_NN_LOWERING(max_pool_with_indices_backward);
TPU_NN_LOWERING(max_pool_backward);
TPU_NN_LOWERING(avg_pool);
TPU_NN_LOWERING(avg_pool_backward);
TPU_NN_LOWERING(adaptive_avg_pool);
TPU_NN_LOWERING(adaptive_avg_pool_backward);
TPU_NN_LOWERING(adaptive_max_pool);
TPU_NN_LOWERING(adaptive_max_pool_backward);
TPU_NN_LOWERING(max_unpool);

#endif
