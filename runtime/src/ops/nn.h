/* The nn family: normalisation (nn.c, and SyncBatchNorm's kernels in
 * nn_batchnorm_stats.c), losses (nn_loss.c), pooling (nn_pool.c).
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

/* Zeros of the given dtype and sizes. */
tpu_val_t tpu_nn_zeros(tpu_builder_t* b, tpu_dtype_t dtype, int rank, const int64_t* dims);

/* ---- the canonical norm (nn.c), shared with the SyncBatchNorm kernels ----
 * A norm works on x as [P, G, K, S]; statistics reduce the `red` dims and keep
 * the `keep` dims (batch norm: [N, C, 1, HxW], keeps {1}); ct is opmath. */
typedef struct tpu_norm {
  int64_t dims[4]; /* [P, G, K, S] */
  int nred, nkeep;
  int64_t red[4], keep[4];
  tpu_dtype_t ct; /* compute dtype */
} tpu_norm_t;

/* Elements each statistic reduces. */
int64_t tpu_norm_count(const tpu_norm_t* L);
/* Any tensor in the canonical 4-d shape, in the compute dtype. */
tpu_val_t tpu_norm_x4(tpu_builder_t* b, tpu_val_t v, const tpu_norm_t* L);
/* A statistic (kept dims only) as a compute-dtype value of the kept shape. */
tpu_val_t tpu_norm_stat_in(tpu_builder_t* b, tpu_val_t v, const tpu_norm_t* L);
/* A kept-shape statistic broadcast to 4-d. */
tpu_val_t tpu_norm_expand(tpu_builder_t* b, tpu_val_t kept, const tpu_norm_t* L);
/* Affine parameter arg i broadcast to 4-d; TPU_NOVAL if absent. */
tpu_val_t tpu_norm_param(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_norm_t* L);
/* rsqrt(var + eps). */
tpu_val_t tpu_norm_rstd(tpu_builder_t* b, tpu_val_t var, double eps);
/* (x - mean) * rstd * w + bias, with w4 / b4 optional (TPU_NOVAL). */
tpu_val_t tpu_norm_apply(tpu_builder_t* b, tpu_val_t x4, tpu_val_t mean, tpu_val_t rstd, tpu_val_t w4,
                         tpu_val_t b4, const tpu_norm_t* L);
/* Batch mean and biased variance in the kept shape (accurate sums). */
void tpu_norm_stats(tpu_builder_t* b, tpu_val_t x4, const tpu_norm_t* L, tpu_val_t* mean, tpu_val_t* var);
/* Sum of v4 over the non-parameter dims {0, 3} shaped rank/dims in dtype; zeros
 * when !mask (the binding cannot return an undefined tensor). */
tpu_val_t tpu_norm_param_grad(tpu_builder_t* b, tpu_val_t v4, bool mask, tpu_dtype_t dtype, int rank,
                              const int64_t* dims);
/* Statistic dtype: f32 when a reduced-float input meets an f32 tensor among the
 * args `params`, otherwise the input's. */
tpu_dtype_t tpu_norm_stat_dtype(const tpu_op_t* op, tpu_dtype_t in, int n, const int* params);
/* Dtype of tensor arg w, or dflt when it is absent. */
tpu_dtype_t tpu_norm_param_dtype(const tpu_op_t* op, int w, tpu_dtype_t dflt);
/* Optional tensor arg i has `numel` elements, else PyTorch's message naming `what`. */
bool tpu_norm_check_numel(tpu_builder_t* b, const tpu_op_t* op, int i, int64_t numel, const char* what);
/* Batch norm's layout of x ([N, C, 1, HxW]); fails for rank < 2. */
bool tpu_bn_layout(tpu_builder_t* b, const tpu_aval_t* x, tpu_norm_t* L);
/* (1 - momentum) * running (arg i) + momentum * stat, in the running tensor's dtype. */
tpu_val_t tpu_bn_update(tpu_builder_t* b, tpu_op_t* op, int i, tpu_val_t stat, double momentum, const tpu_norm_t* L);

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
