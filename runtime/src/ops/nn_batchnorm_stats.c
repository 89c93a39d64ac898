/* Lowerings: nn family — the kernels torch.nn.SyncBatchNorm runs on the device
 * (torch/nn/modules/_functions.py), and batch_norm_update_stats:
 *
 *   forward:  batch_norm_stats (local mean / invstd) → all_gather →
 *             batch_norm_gather_stats_with_counts (global mean / invstd, running
 *             stats) → batch_norm_elemt (normalise)
 *   backward: batch_norm_backward_reduce (local sums, weight / bias grads) →
 *             all_reduce → batch_norm_backward_elemt (grad_input)
 *
 * ATen has these only for CUDA (Normalization.cuh) except batch_norm_update_stats;
 * the semantics, dtypes included, are the CUDA kernels': statistics are opmath (f32
 * for f16/bf16 inputs), invstd = 1 / sqrt(var + eps). Everything reuses nn.c's
 * batch-norm layout ([N, C, 1, HxW], statistics over {0, 2, 3}) and its accurate
 * sums, so SyncBatchNorm over ranks matches BatchNorm on the whole batch.
 *
 * Running stats are not marked (a!) in these schemas but the kernels update them:
 * the new values are appended after the returns (README), one per defined one,
 * and the binding writes them back (torchtpu/csrc/fallback.cpp,
 * mutated_unmarked). */
#include "nn.h"

#include <math.h>

/* Input arg i as batch-norm layout L; floating dtypes only, like the CUDA kernels. */
static bool tpu_bnst_begin(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_aval_t* x, tpu_norm_t* L) {
  *x = tpu_op_aval(op, i);
  if (!tpu_dtype_is_float(x->dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", tpu_op_name(op),
               tpu_dtype_scalar_type_name(x->dtype));
    return false;
  }
  return tpu_bn_layout(b, x, L);
}

/* ATen's InvStd: 1 / sqrt(var + eps), and 0 where var and eps are both 0. */
static tpu_val_t tpu_bnst_invstd(tpu_builder_t* b, tpu_val_t var, double eps) {
  tpu_val_t r = tpu_norm_rstd(b, var, eps);
  if (eps != 0.0) return r;
  tpu_val_t zero = tpu_ops_like(b, var, 0.0);
  return tpu_b_select(b, tpu_b_compare(b, "EQ", var, zero), zero, r);
}

/* A value of L's kept shape [C] from a per-channel statistic or parameter
 * (arg i), after checking it has C elements. */
static tpu_val_t tpu_bnst_channel(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_norm_t* L, const char* what) {
  if (!tpu_norm_check_numel(b, op, i, L->dims[1], what)) return TPU_NOVAL;
  return tpu_norm_stat_in(b, tpu_op_tensor(b, op, i), L);
}

/* Appends the running stats at args rm, rm + 1 updated with mean / unbiased var
 * (those that are defined). Their schemas do not mark them (a!): eager's binding
 * makes room for them (max_outs) and writes them back, a compiled graph's node
 * (functionalized by that schema) does not; there the update would be lost, so
 * the op fails instead of training silently without running stats. */
static void tpu_bnst_append_running(tpu_builder_t* b, tpu_op_t* op, int rm, tpu_val_t mean, tpu_val_t unbiased,
                                    double momentum, const tpu_norm_t* L, int max_outs, tpu_val_t* outs, int* n) {
  bool has_rm = tpu_op_kind(op, rm) == TPU_ARG_TENSOR, has_rv = tpu_op_kind(op, rm + 1) == TPU_ARG_TENSOR;
  if (*n + has_rm + has_rv > max_outs) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED,
               "%s: updating running_mean / running_var in place is not supported in a compiled graph (the schema "
               "does not mark them mutated); run the op eagerly or pass them as None",
               tpu_op_name(op));
    return;
  }
  if (has_rm) outs[(*n)++] = tpu_bn_update(b, op, rm, mean, momentum, L);
  if (has_rv) outs[(*n)++] = tpu_bn_update(b, op, rm + 1, unbiased, momentum, L);
}

/* batch_norm_stats(input, eps) -> (mean, invstd): this rank's biased statistics. */
static tpu_status_t* tpu_lower_batch_norm_stats(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t x;
  tpu_norm_t L;
  if (!tpu_bnst_begin(b, op, 0, &x, &L)) return NULL;
  tpu_val_t mean, var;
  tpu_norm_stats(b, tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L), &L, &mean, &var);
  outs[0] = mean;
  outs[1] = tpu_bnst_invstd(b, var, tpu_op_float(op, 1, 1e-5));
  *nouts = 2;
  return NULL;
}

/* batch_norm_elemt(input, weight?, bias?, mean, invstd, eps): (x - mean) * invstd * w + b. */
static tpu_status_t* tpu_lower_batch_norm_elemt(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  tpu_aval_t x;
  tpu_norm_t L;
  if (!tpu_bnst_begin(b, op, 0, &x, &L)) return NULL;
  if (!tpu_norm_check_numel(b, op, 1, L.dims[1], "weight") || !tpu_norm_check_numel(b, op, 2, L.dims[1], "bias"))
    return NULL;
  tpu_val_t mean = tpu_bnst_channel(b, op, 3, &L, "mean"), invstd = tpu_bnst_channel(b, op, 4, &L, "invstd");
  tpu_val_t y = tpu_norm_apply(b, tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L), mean, invstd,
                               tpu_norm_param(b, op, 1, &L), tpu_norm_param(b, op, 2, &L), &L);
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, y, x.rank, x.dims), x.dtype), outs, nouts);
}

/* The ranks' counts (arg 7) as [W] in ct: the counts tensor, or the one int
 * `count` of batch_norm_gather_stats for every rank. */
static tpu_val_t tpu_bnst_counts(tpu_builder_t* b, tpu_op_t* op, int64_t w, tpu_dtype_t ct) {
  if (tpu_op_kind(op, 7) != TPU_ARG_TENSOR) {
    tpu_aval_t a = tpu_aval_make(ct, 1, &w);
    return tpu_b_full(b, &a, (double)tpu_op_int(op, 7, 0));
  }
  if (!tpu_norm_check_numel(b, op, 7, w, "counts")) return TPU_NOVAL;
  return tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 7), ct), 1, &w);
}

/* The per-rank statistics (args 1, 2: [W, C]) in ct; W through *w. */
static bool tpu_bnst_gathered(tpu_builder_t* b, tpu_op_t* op, const tpu_norm_t* L, int64_t* w, tpu_val_t* mean,
                              tpu_val_t* var, double eps) {
  tpu_aval_t ma = tpu_op_aval(op, 1), ia = tpu_op_aval(op, 2);
  if (ma.rank != 2 || ma.dims[1] != L->dims[1] || ia.rank != 2 || ia.dims[0] != ma.dims[0] ||
      ia.dims[1] != ma.dims[1]) {
    char s0[256], s1[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "%s: expected mean and invstd of shape [world_size, %" PRId64 "], but got %s and %s",
               tpu_op_name(op), L->dims[1], tpu_nn_fmt_shape(s0, sizeof(s0), ma.rank, ma.dims),
               tpu_nn_fmt_shape(s1, sizeof(s1), ia.rank, ia.dims));
    return false;
  }
  *w = ma.dims[0];
  *mean = tpu_b_convert(b, tpu_op_tensor(b, op, 1), L->ct);
  /* Each rank's biased variance back from its invstd, as ATen does. */
  tpu_val_t sd = tpu_nn_div(b, tpu_ops_like(b, *mean, 1.0), tpu_b_convert(b, tpu_op_tensor(b, op, 2), L->ct));
  *var = tpu_nn_addc(b, tpu_nn_mul(b, sd, sd), -eps);
  return tpu_b_ok(b);
}

/* batch_norm_gather_stats(input, mean, invstd, running_mean?, running_var?, momentum,
 *   eps, int count) and _with_counts(..., Tensor counts) -> (mean, invstd): the
 * ranks' statistics combined by count. ATen folds them in one rank at a time
 * (Chan et al.); this is the same total in closed form, with accurate sums:
 *   mean = sum n_i m_i / n,  var * n = sum n_i v_i + sum n_i (m_i - mean)^2. */
static tpu_status_t* tpu_lower_batch_norm_gather_stats(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                       tpu_val_t* outs, int* nouts) {
  tpu_aval_t x;
  tpu_norm_t L;
  if (!tpu_bnst_begin(b, op, 0, &x, &L)) return NULL;
  int64_t c = L.dims[1], w;
  double momentum = tpu_op_float(op, 5, 0.1), eps = tpu_op_float(op, 6, 1e-5);
  tpu_val_t m, v;
  if (!tpu_norm_check_numel(b, op, 3, c, "running_mean") || !tpu_norm_check_numel(b, op, 4, c, "running_var") ||
      !tpu_bnst_gathered(b, op, &L, &w, &m, &v, eps))
    return NULL;
  int64_t wc[2] = {w, c}, d0 = 0, d1 = 1;
  tpu_val_t counts = tpu_bnst_counts(b, op, w, L.ct);
  tpu_val_t cnt = tpu_b_broadcast_in_dim(b, counts, 2, wc, &d0);
  tpu_val_t n = tpu_b_broadcast_in_dim(b, tpu_nn_sum_all(b, counts), 1, &c, NULL);
  tpu_val_t mean = tpu_nn_div(b, tpu_nn_sum(b, tpu_nn_mul(b, cnt, m), 1, &d0), n);
  tpu_val_t dev = tpu_nn_sub(b, m, tpu_b_broadcast_in_dim(b, mean, 2, wc, &d1));
  tpu_val_t var_n = tpu_nn_add(b, tpu_nn_sum(b, tpu_nn_mul(b, cnt, v), 1, &d0),
                               tpu_nn_sum(b, tpu_nn_mul(b, cnt, tpu_nn_mul(b, dev, dev)), 1, &d0));
  tpu_dtype_t out = tpu_dtype_opmath(tpu_op_aval(op, 1).dtype);
  int k = 0;
  outs[k++] = tpu_b_convert(b, mean, out);
  outs[k++] = tpu_b_convert(b, tpu_norm_rstd(b, tpu_nn_div(b, var_n, n), eps), out);
  tpu_val_t unbiased = tpu_nn_div(b, var_n, tpu_nn_addc(b, n, -1.0));
  tpu_bnst_append_running(b, op, 3, mean, unbiased, momentum, &L, max_outs, outs, &k);
  *nouts = k;
  return NULL;
}

/* Backward's common inputs (grad_out arg 0, input arg 1, mean arg 2, invstd arg 3,
 * weight? arg 4, checked):
 * dy and x - mean in L's layout. */
static bool tpu_bnst_backward_in(tpu_builder_t* b, tpu_op_t* op, tpu_aval_t* x, tpu_norm_t* L, tpu_val_t* dy4,
                                 tpu_val_t* xmu4, tpu_val_t* invstd) {
  if (!tpu_bnst_begin(b, op, 1, x, L)) return false;
  tpu_aval_t g = tpu_op_aval(op, 0);
  if (tpu_aval_numel(&g) != tpu_aval_numel(x)) {
    char s0[256], s1[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: grad_out of shape %s does not match input of shape %s", tpu_op_name(op),
               tpu_nn_fmt_shape(s0, sizeof(s0), g.rank, g.dims), tpu_nn_fmt_shape(s1, sizeof(s1), x->rank, x->dims));
    return false;
  }
  if (!tpu_norm_check_numel(b, op, 4, L->dims[1], "weight")) return false;
  tpu_val_t mean = tpu_bnst_channel(b, op, 2, L, "mean");
  *invstd = tpu_bnst_channel(b, op, 3, L, "invstd");
  *dy4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 0), L);
  *xmu4 = tpu_nn_sub(b, tpu_norm_x4(b, tpu_op_tensor(b, op, 1), L), tpu_norm_expand(b, mean, L));
  return tpu_b_ok(b);
}

/* batch_norm_backward_reduce(grad_out, input, mean, invstd, weight?, input_g, weight_g,
 *   bias_g) -> (sum_dy, sum_dy_xmu, grad_weight, grad_bias), per channel:
 * sum(dy), sum(dy * (x - mean)), sum_dy_xmu * invstd and sum_dy. The sums are in
 * mean's dtype, the grads in weight's. ATen leaves an output undefined when its
 * flag is false; the binding cannot return one, so it is zeros (SyncBatchNorm
 * drops it either way). */
static tpu_status_t* tpu_lower_batch_norm_backward_reduce(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x;
  tpu_norm_t L;
  tpu_val_t dy4, xmu4, invstd;
  if (!tpu_bnst_backward_in(b, op, &x, &L, &dy4, &xmu4, &invstd)) return NULL;
  int64_t c = L.dims[1];
  bool input_g = tpu_op_bool(op, 5, true), weight_g = tpu_op_bool(op, 6, true), bias_g = tpu_op_bool(op, 7, true);
  tpu_val_t sum_dy = tpu_norm_param_grad(b, dy4, true, L.ct, 1, &c);
  tpu_val_t sum_dy_xmu = tpu_norm_param_grad(b, tpu_nn_mul(b, dy4, xmu4), true, L.ct, 1, &c);
  tpu_dtype_t sd = tpu_op_aval(op, 2).dtype, wd = tpu_norm_param_dtype(op, 4, sd);
  outs[0] = input_g ? tpu_b_convert(b, sum_dy, sd) : tpu_nn_zeros(b, sd, 1, &c);
  outs[1] = input_g ? tpu_b_convert(b, sum_dy_xmu, sd) : tpu_nn_zeros(b, sd, 1, &c);
  outs[2] = weight_g ? tpu_b_convert(b, tpu_nn_mul(b, sum_dy_xmu, invstd), wd) : tpu_nn_zeros(b, wd, 1, &c);
  outs[3] = bias_g ? tpu_b_convert(b, sum_dy, wd) : tpu_nn_zeros(b, wd, 1, &c);
  *nouts = 4;
  return NULL;
}

/* 1 / (the total element count per channel over the ranks): the sum of the count
 * tensor (arg 7) in i64, like ATen, then in ct. */
static tpu_val_t tpu_bnst_inv_total(tpu_builder_t* b, tpu_op_t* op, const tpu_norm_t* L) {
  tpu_val_t total = tpu_nn_sum_all(b, tpu_b_convert(b, tpu_op_tensor(b, op, 7), TPU_I64));
  total = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, total, L->ct), 1, &L->dims[1], NULL);
  return tpu_nn_div(b, tpu_ops_like(b, total, 1.0), total);
}

/* batch_norm_backward_elemt(grad_out, input, mean, invstd, weight?, sum_dy, sum_dy_xmu,
 *   count) -> grad_input with the global sums of every rank:
 *   (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight. */
static tpu_status_t* tpu_lower_batch_norm_backward_elemt(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                         tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x;
  tpu_norm_t L;
  tpu_val_t dy4, xmu4, invstd;
  if (!tpu_bnst_backward_in(b, op, &x, &L, &dy4, &xmu4, &invstd)) return NULL;
  tpu_val_t inv_n = tpu_bnst_inv_total(b, op, &L);
  tpu_val_t mean_dy = tpu_nn_mul(b, tpu_bnst_channel(b, op, 5, &L, "sum_dy"), inv_n);
  tpu_val_t f1 = tpu_nn_mul(b, tpu_nn_mul(b, invstd, invstd),
                            tpu_nn_mul(b, tpu_bnst_channel(b, op, 6, &L, "sum_dy_xmu"), inv_n));
  tpu_val_t f2 = invstd;
  if (tpu_op_kind(op, 4) == TPU_ARG_TENSOR) f2 = tpu_nn_mul(b, f2, tpu_norm_stat_in(b, tpu_op_tensor(b, op, 4), &L));
  tpu_val_t g = tpu_nn_sub(b, tpu_nn_sub(b, dy4, tpu_norm_expand(b, mean_dy, &L)),
                           tpu_nn_mul(b, xmu4, tpu_norm_expand(b, f1, &L)));
  g = tpu_nn_mul(b, g, tpu_norm_expand(b, f2, &L));
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, g, x.rank, x.dims), x.dtype), outs, nouts);
}

/* batch_norm_update_stats(input, running_mean?, running_var?, momentum) -> (mean, var):
 * batch statistics (biased var) as ATen's CPU kernel gives them, running stats
 * updated with the unbiased var (n == 1 gives NaN, like PyTorch). */
static tpu_status_t* tpu_lower_batch_norm_update_stats(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                       tpu_val_t* outs, int* nouts) {
  tpu_aval_t x;
  tpu_norm_t L;
  if (!tpu_bnst_begin(b, op, 0, &x, &L)) return NULL;
  int64_t c = L.dims[1], n = tpu_norm_count(&L);
  if (!tpu_norm_check_numel(b, op, 1, c, "running_mean") || !tpu_norm_check_numel(b, op, 2, c, "running_var"))
    return NULL;
  const int params[2] = {1, 2};
  tpu_dtype_t sd = tpu_norm_stat_dtype(op, x.dtype, 2, params);
  tpu_val_t mean, var;
  tpu_norm_stats(b, tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L), &L, &mean, &var);
  int k = 0;
  outs[k++] = tpu_b_convert(b, mean, sd);
  outs[k++] = tpu_b_convert(b, var, sd);
  tpu_val_t unbiased = tpu_nn_mulc(b, var, n > 1 ? (double)n / (double)(n - 1) : NAN);
  tpu_bnst_append_running(b, op, 1, mean, unbiased, tpu_op_float(op, 3, 0.1), &L, max_outs, outs, &k);
  *nouts = k;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_nn_batchnorm_stats[] = {
    {"batch_norm_stats", tpu_lower_batch_norm_stats},
    {"batch_norm_elemt", tpu_lower_batch_norm_elemt},
    {"batch_norm_gather_stats", tpu_lower_batch_norm_gather_stats},
    {"batch_norm_gather_stats_with_counts", tpu_lower_batch_norm_gather_stats},
    {"batch_norm_backward_reduce", tpu_lower_batch_norm_backward_reduce},
    {"batch_norm_backward_elemt", tpu_lower_batch_norm_backward_elemt},
    {"batch_norm_update_stats", tpu_lower_batch_norm_update_stats},
    {NULL, NULL},
};
