/* Lowerings: nn family — normalisation layers (layer, batch and group norm, forward
 * and backward) and the family's op table. Losses are in nn_loss.c, pooling in
 * nn_pool.c (declared in nn.h).
 *
 * The three norms are one computation on a canonical 4-d layout [P, G, K, S]:
 * statistics reduce some of the dims, the affine weight has shape [G, K]:
 *   layer norm  [prefix, 1, normalized, 1]  stats over {1, 2, 3}  → [P]
 *   group norm  [N, groups, C/groups, HxW]  stats over {2, 3}     → [N, G]
 *   batch norm  [N, C, 1, HxW]              stats over {0, 2, 3}  → [C]
 * Statistics are computed in opmath (f32 for f16/bf16) like PyTorch's CPU kernels,
 * and every reduction (statistics, backward sums, parameter gradients) is an
 * accurate sum (reduce.h): XLA's plain f32 reduce loses more than the CPU kernels'
 * cascade/Welford sums, and layer norm's gradients (through attention) amplify it. */
#include "nn.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reduce.h"

/* ------------------------------------------------------------ shared helpers */

tpu_val_t tpu_nn_mulc(tpu_builder_t* b, tpu_val_t x, double c) {
  return tpu_b_binary(b, "stablehlo.multiply", x, tpu_ops_like(b, x, c));
}
tpu_val_t tpu_nn_addc(tpu_builder_t* b, tpu_val_t x, double c) {
  return tpu_b_binary(b, "stablehlo.add", x, tpu_ops_like(b, x, c));
}
tpu_val_t tpu_nn_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.add", x, y); }
tpu_val_t tpu_nn_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.subtract", x, y); }
tpu_val_t tpu_nn_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.multiply", x, y); }
tpu_val_t tpu_nn_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) { return tpu_b_binary(b, "stablehlo.divide", x, y); }

/* Accurate for f32 (compensated, reduce.h): the losses' means and sums too. */
tpu_val_t tpu_nn_sum(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims) {
  if (ndims == 0) return x;
  return tpu_red_sum_accurate(b, x, ndims, dims);
}

tpu_val_t tpu_nn_sum_all(tpu_builder_t* b, tpu_val_t x) {
  int64_t dims[TPU_MAX_RANK];
  int rank = tpu_b_rank(b, x);
  for (int i = 0; i < rank; ++i) dims[i] = i;
  return tpu_nn_sum(b, x, rank, dims);
}

tpu_val_t tpu_nn_bcast0(tpu_builder_t* b, tpu_val_t s, tpu_val_t like) {
  tpu_aval_t a = *tpu_b_aval(b, like); /* copied: new values may move the table */
  return tpu_b_broadcast_to(b, s, a.rank, a.dims);
}

const char* tpu_nn_fmt_shape(char* buf, size_t cap, int n, const int64_t* dims) {
  return tpu_fmt_i64_list(buf, cap, n, dims);
}

/* output_mask[k] of a bool[3] argument (absent: all true). */
static bool tpu_nn_mask(const tpu_op_t* op, int i, int k) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || a->kind != TPU_ARG_BOOL_LIST || k >= a->u.list.n) return true;
  return a->u.list.bools[k];
}

tpu_val_t tpu_nn_zeros(tpu_builder_t* b, tpu_dtype_t dtype, int rank, const int64_t* dims) {
  tpu_aval_t a = tpu_aval_make(dtype, rank, dims);
  return tpu_b_full(b, &a, 0);
}

static int64_t tpu_nn_prod(int n, const int64_t* dims) {
  int64_t p = 1;
  for (int i = 0; i < n; ++i) p *= dims[i];
  return p;
}

/* ------------------------------------------------------- the canonical norm */

static tpu_norm_t tpu_norm_make(int64_t p, int64_t g, int64_t k, int64_t s, unsigned red_mask, tpu_dtype_t in) {
  tpu_norm_t L;
  memset(&L, 0, sizeof(L));
  int64_t d[4] = {p, g, k, s};
  memcpy(L.dims, d, sizeof(d));
  for (int i = 0; i < 4; ++i) {
    if (red_mask & (1u << i)) L.red[L.nred++] = i;
    else L.keep[L.nkeep++] = i;
  }
  L.ct = tpu_dtype_opmath(in);
  return L;
}

int64_t tpu_norm_count(const tpu_norm_t* L) {
  int64_t n = 1;
  for (int i = 0; i < L->nred; ++i) n *= L->dims[L->red[i]];
  return n;
}

/* Any tensor in the canonical 4-d shape, in the compute dtype. */
tpu_val_t tpu_norm_x4(tpu_builder_t* b, tpu_val_t v, const tpu_norm_t* L) {
  return tpu_b_reshape(b, tpu_b_convert(b, v, L->ct), 4, L->dims);
}

/* A statistic (kept dims only) as a compute-dtype value of the kept shape. */
tpu_val_t tpu_norm_stat_in(tpu_builder_t* b, tpu_val_t v, const tpu_norm_t* L) {
  int64_t kd[4];
  for (int i = 0; i < L->nkeep; ++i) kd[i] = L->dims[L->keep[i]];
  return tpu_b_reshape(b, tpu_b_convert(b, v, L->ct), L->nkeep, kd);
}

tpu_val_t tpu_norm_expand(tpu_builder_t* b, tpu_val_t kept, const tpu_norm_t* L) {
  return tpu_b_broadcast_in_dim(b, kept, 4, L->dims, L->keep);
}

/* Affine parameter arg i ([G*K] elements) broadcast to 4-d; TPU_NOVAL if absent. */
tpu_val_t tpu_norm_param(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_norm_t* L) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR) return TPU_NOVAL;
  int64_t gk[2] = {L->dims[1], L->dims[2]}, bd[2] = {1, 2};
  tpu_val_t v = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), L->ct), 2, gk);
  return tpu_b_broadcast_in_dim(b, v, 4, L->dims, bd);
}

/* Mean over the statistic dims: an accurate sum, divided with one rounding. */
static tpu_val_t tpu_norm_mean(tpu_builder_t* b, tpu_val_t x4, const tpu_norm_t* L) {
  tpu_val_t hi, lo;
  tpu_red_sum_hilo(b, x4, L->nred, L->red, &hi, &lo);
  return tpu_red_div_hilo(b, hi, lo, tpu_ops_like(b, hi, (double)tpu_norm_count(L)));
}

tpu_val_t tpu_norm_rstd(tpu_builder_t* b, tpu_val_t var, double eps) {
  return tpu_b_unary(b, "stablehlo.rsqrt", tpu_nn_addc(b, var, eps));
}

/* y = (x - mean) * rstd * w + bias, with w4 / b4 optional (TPU_NOVAL). */
tpu_val_t tpu_norm_apply(tpu_builder_t* b, tpu_val_t x4, tpu_val_t mean, tpu_val_t rstd, tpu_val_t w4,
                         tpu_val_t b4, const tpu_norm_t* L) {
  tpu_val_t y = tpu_nn_mul(b, tpu_nn_sub(b, x4, tpu_norm_expand(b, mean, L)), tpu_norm_expand(b, rstd, L));
  if (w4 != TPU_NOVAL) y = tpu_nn_mul(b, y, w4);
  if (b4 != TPU_NOVAL) y = tpu_nn_add(b, y, b4);
  return y;
}

/* Batch statistics: mean and biased variance in the kept shape, as accurate as
 * double accumulation (corrected two-pass over compensated sums, reduce.h). */
void tpu_norm_stats(tpu_builder_t* b, tpu_val_t x4, const tpu_norm_t* L, tpu_val_t* mean, tpu_val_t* var) {
  tpu_val_t ss, ss_lo;
  tpu_red_moments(b, x4, L->nred, L->red, mean, &ss, &ss_lo);
  *var = tpu_red_div_hilo(b, ss, ss_lo, tpu_ops_like(b, ss, (double)tpu_norm_count(L)));
}

/* dx of y = xhat * w + bias. With batch statistics the mean and variance depend on
 * x: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; with fixed
 * statistics (batch norm in eval) dx = g * rstd. */
static tpu_val_t tpu_norm_dx(tpu_builder_t* b, tpu_val_t dy4, tpu_val_t xhat, tpu_val_t w4, tpu_val_t rstd,
                             const tpu_norm_t* L, bool batch_stats) {
  tpu_val_t g = w4 != TPU_NOVAL ? tpu_nn_mul(b, dy4, w4) : dy4;
  tpu_val_t r4 = tpu_norm_expand(b, rstd, L);
  if (!batch_stats) return tpu_nn_mul(b, g, r4);
  tpu_val_t mg = tpu_norm_expand(b, tpu_norm_mean(b, g, L), L);
  tpu_val_t mgx = tpu_norm_expand(b, tpu_norm_mean(b, tpu_nn_mul(b, g, xhat), L), L);
  return tpu_nn_mul(b, r4, tpu_nn_sub(b, tpu_nn_sub(b, g, mg), tpu_nn_mul(b, xhat, mgx)));
}

/* Parameter gradients: sums over the non-parameter dims {0, 3} → [G, K], then
 * shaped as `rank`/`dims` in `dtype`. `mask` false gives zeros (PyTorch gives an
 * undefined tensor, which the runtime cannot return; autograd ignores it). */
tpu_val_t tpu_norm_param_grad(tpu_builder_t* b, tpu_val_t v4, bool mask, tpu_dtype_t dtype, int rank,
                              const int64_t* dims) {
  if (!mask) return tpu_nn_zeros(b, dtype, rank, dims);
  static const int64_t pd[2] = {0, 3};
  return tpu_b_convert(b, tpu_b_reshape(b, tpu_red_sum_accurate(b, v4, 2, pd), rank, dims), dtype);
}

/* Dtype of mean/rstd outputs: f32 when a reduced-float input meets an f32
 * parameter (PyTorch's "mixed type"), otherwise the input's dtype. */
tpu_dtype_t tpu_norm_stat_dtype(const tpu_op_t* op, tpu_dtype_t in, int n, const int* params) {
  if (in != TPU_F16 && in != TPU_BF16) return in;
  for (int k = 0; k < n; ++k)
    if (tpu_op_kind(op, params[k]) == TPU_ARG_TENSOR && tpu_op_aval(op, params[k]).dtype == TPU_F32) return TPU_F32;
  return in;
}

tpu_dtype_t tpu_norm_param_dtype(const tpu_op_t* op, int w, tpu_dtype_t dflt) {
  return tpu_op_kind(op, w) == TPU_ARG_TENSOR ? tpu_op_aval(op, w).dtype : dflt;
}

/* A norm backward's inputs in L's layout: grad_out (arg 0), input (arg 1), and the
 * saved statistics mean / rstd (args `mean_i` / `rstd_i`, kept shape). */
static void tpu_norm_backward_in(tpu_builder_t* b, tpu_op_t* op, const tpu_norm_t* L, int mean_i, int rstd_i,
                                 tpu_val_t* dy4, tpu_val_t* x4, tpu_val_t* mean, tpu_val_t* rstd) {
  *dy4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 0), L);
  *x4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 1), L);
  *mean = tpu_norm_stat_in(b, tpu_op_tensor(b, op, mean_i), L);
  *rstd = tpu_norm_stat_in(b, tpu_op_tensor(b, op, rstd_i), L);
}

/* A norm backward's (grad_input, grad_weight, grad_bias) under the output_mask at
 * arg `mask`: dx in x's shape and dtype; the parameter grads shaped `prank`/`pdims`
 * in `wd` / `bd`. */
static void tpu_norm_backward_outs(tpu_builder_t* b, const tpu_op_t* op, int mask, const tpu_aval_t* x,
                                   tpu_val_t dy4, tpu_val_t xhat, tpu_val_t dx, tpu_dtype_t wd, tpu_dtype_t bd,
                                   int prank, const int64_t* pdims, tpu_val_t* outs) {
  outs[0] = tpu_nn_mask(op, mask, 0) ? tpu_b_convert(b, tpu_b_reshape(b, dx, x->rank, x->dims), x->dtype)
                                     : tpu_nn_zeros(b, x->dtype, x->rank, x->dims);
  outs[1] = tpu_norm_param_grad(b, tpu_nn_mul(b, dy4, xhat), tpu_nn_mask(op, mask, 1), wd, prank, pdims);
  outs[2] = tpu_norm_param_grad(b, dy4, tpu_nn_mask(op, mask, 2), bd, prank, pdims);
}

/* Checks that optional tensor arg i has exactly `numel` elements. */
bool tpu_norm_check_numel(tpu_builder_t* b, const tpu_op_t* op, int i, int64_t numel, const char* what) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR) return true;
  tpu_aval_t a = tpu_op_aval(op, i);
  if (tpu_aval_numel(&a) == numel) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s should contain %" PRId64 " elements not %" PRId64, what, numel,
             tpu_aval_numel(&a));
  return false;
}

/* ---------------------------------------------------------------- layer norm */

/* Layout of a layer norm over the trailing `normalized_shape` (arg ns) of x. */
static bool tpu_ln_layout(tpu_builder_t* b, const tpu_op_t* op, const tpu_aval_t* x, int ns, int w, int bias,
                          tpu_norm_t* L, int* axis) {
  int64_t shape[TPU_MAX_RANK];
  int n = tpu_op_ints(op, ns, shape, TPU_MAX_RANK);
  char s0[256], s1[256];
  if (n < 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one element, "
               "but got normalized_shape = []");
    return false;
  }
  bool ok = x->rank >= n;
  for (int i = 0; ok && i < n; ++i) ok = x->dims[x->rank - n + i] == shape[i];
  if (!ok) {
    char s2[256];
    tpu_nn_fmt_shape(s0, sizeof(s0), n, shape);
    /* "[*, 4, 5]": the normalized shape without its opening bracket */
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Given normalized_shape=%s, expected input with shape [*, %s, but got input of size%s",
               s0, s0 + 1, tpu_nn_fmt_shape(s2, sizeof(s2), x->rank, x->dims));
    return false;
  }
  for (int k = 0; k < 2; ++k) {
    int i = k ? bias : w;
    if (i < 0 || tpu_op_kind(op, i) != TPU_ARG_TENSOR) continue;
    tpu_aval_t p = tpu_op_aval(op, i);
    bool same = p.rank == n;
    for (int d = 0; same && d < n; ++d) same = p.dims[d] == shape[d];
    if (!same) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Expected %s to be of same shape as normalized_shape, but got %s of shape %s and normalized_shape = %s",
                 k ? "bias" : "weight", k ? "bias" : "weight", tpu_nn_fmt_shape(s0, sizeof(s0), p.rank, p.dims),
                 tpu_nn_fmt_shape(s1, sizeof(s1), n, shape));
      return false;
    }
  }
  *axis = x->rank - n;
  *L = tpu_norm_make(tpu_nn_prod(*axis, x->dims), 1, tpu_nn_prod(n, shape), 1, 0xEu, x->dtype);
  return true;
}

/* mean/rstd shape: the prefix dims followed by ones. */
static tpu_val_t tpu_ln_stat_out(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* x, int axis, tpu_dtype_t dt) {
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < x->rank; ++i) dims[i] = i < axis ? x->dims[i] : 1;
  return tpu_b_convert(b, tpu_b_reshape(b, v, x->rank, dims), dt);
}

/* native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd) */
static tpu_status_t* tpu_lower_native_layer_norm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0);
  tpu_norm_t L;
  int axis;
  if (!tpu_ln_layout(b, op, &x, 1, 2, 3, &L, &axis)) return NULL;
  const int params[2] = {2, 3};
  tpu_dtype_t sd = tpu_norm_stat_dtype(op, x.dtype, 2, params);
  tpu_val_t x4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L);
  tpu_val_t w4 = tpu_norm_param(b, op, 2, &L), b4 = tpu_norm_param(b, op, 3, &L);
  tpu_val_t mean, var;
  tpu_norm_stats(b, x4, &L, &mean, &var);
  tpu_val_t rstd = tpu_norm_rstd(b, var, tpu_op_float(op, 4, 1e-5));
  tpu_val_t y = tpu_norm_apply(b, x4, mean, rstd, w4, b4, &L);
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, y, x.rank, x.dims), x.dtype);
  outs[1] = tpu_ln_stat_out(b, mean, &x, axis, sd);
  outs[2] = tpu_ln_stat_out(b, rstd, &x, axis, sd);
  *nouts = 3;
  return NULL;
}

/* native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask) */
static tpu_status_t* tpu_lower_native_layer_norm_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 1);
  tpu_norm_t L;
  int axis;
  if (!tpu_ln_layout(b, op, &x, 2, 5, 6, &L, &axis)) return NULL;
  tpu_val_t dy4, x4, mean, rstd;
  tpu_norm_backward_in(b, op, &L, 3, 4, &dy4, &x4, &mean, &rstd);
  tpu_val_t w4 = tpu_norm_param(b, op, 5, &L);
  tpu_val_t xhat = tpu_norm_apply(b, x4, mean, rstd, TPU_NOVAL, TPU_NOVAL, &L);
  tpu_val_t dx = tpu_norm_dx(b, dy4, xhat, w4, rstd, &L, true);
  tpu_norm_backward_outs(b, op, 7, &x, dy4, xhat, dx, tpu_norm_param_dtype(op, 5, x.dtype),
                         tpu_norm_param_dtype(op, 6, x.dtype), x.rank - axis, x.dims + axis, outs);
  *nouts = 3;
  return NULL;
}

/* ---------------------------------------------------------------- group norm */

/* Group norm layout from the explicit (N, C, HxW, group) arguments at `first`. */
static bool tpu_gn_layout(tpu_builder_t* b, const tpu_op_t* op, const tpu_aval_t* x, int first, int w,
                          tpu_norm_t* L) {
  int64_t n = tpu_op_int(op, first, 0), c = tpu_op_int(op, first + 1, 0), hxw = tpu_op_int(op, first + 2, 0);
  int64_t g = tpu_op_int(op, first + 3, 1);
  char s0[256], s1[256];
  if (g <= 0 || c % g != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "Expected number of channels in input to be divisible by num_groups, but got input of shape %s and "
               "num_groups=%" PRId64,
               tpu_nn_fmt_shape(s0, sizeof(s0), x->rank, x->dims), g);
    return false;
  }
  if (n * c * hxw != tpu_aval_numel(x) || (x->rank >= 2 && x->dims[1] != c)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected input of shape [N, C, *] with N=%" PRId64 ", C=%" PRId64
               ", HxW=%" PRId64 ", but got input of shape %s", n, c, hxw, tpu_nn_fmt_shape(s0, sizeof(s0), x->rank, x->dims));
    return false;
  }
  if (w >= 0 && tpu_op_kind(op, w) == TPU_ARG_TENSOR) {
    tpu_aval_t p = tpu_op_aval(op, w);
    if (p.rank != 1 || p.dims[0] != c) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "Expected weight to be a vector of size equal to the number of channels in input, but got weight "
                 "of shape %s and input of shape %s",
                 tpu_nn_fmt_shape(s0, sizeof(s0), p.rank, p.dims), tpu_nn_fmt_shape(s1, sizeof(s1), x->rank, x->dims));
      return false;
    }
  }
  *L = tpu_norm_make(n, g, c / g, hxw, 0xCu, x->dtype);
  return true;
}

/* native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N, G], rstd [N, G]) */
static tpu_status_t* tpu_lower_native_group_norm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0);
  tpu_norm_t L;
  if (!tpu_gn_layout(b, op, &x, 3, 1, &L)) return NULL;
  if (!tpu_norm_check_numel(b, op, 2, L.dims[1] * L.dims[2], "bias")) return NULL;
  const int params[2] = {1, 2};
  tpu_dtype_t sd = tpu_norm_stat_dtype(op, x.dtype, 2, params);
  tpu_val_t x4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L);
  tpu_val_t mean, var;
  tpu_norm_stats(b, x4, &L, &mean, &var);
  tpu_val_t rstd = tpu_norm_rstd(b, var, tpu_op_float(op, 7, 1e-5));
  tpu_val_t y = tpu_norm_apply(b, x4, mean, rstd, tpu_norm_param(b, op, 1, &L), tpu_norm_param(b, op, 2, &L), &L);
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, y, x.rank, x.dims), x.dtype);
  outs[1] = tpu_b_convert(b, mean, sd);
  outs[2] = tpu_b_convert(b, rstd, sd);
  *nouts = 3;
  return NULL;
}

/* native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask) */
static tpu_status_t* tpu_lower_native_group_norm_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 1);
  tpu_norm_t L;
  if (!tpu_gn_layout(b, op, &x, 5, 4, &L)) return NULL;
  tpu_val_t dy4, x4, mean, rstd;
  tpu_norm_backward_in(b, op, &L, 2, 3, &dy4, &x4, &mean, &rstd);
  tpu_val_t xhat = tpu_norm_apply(b, x4, mean, rstd, TPU_NOVAL, TPU_NOVAL, &L);
  tpu_val_t dx = tpu_norm_dx(b, dy4, xhat, tpu_norm_param(b, op, 4, &L), rstd, &L, true);
  int64_t c = L.dims[1] * L.dims[2];
  tpu_dtype_t pd = tpu_norm_param_dtype(op, 4, x.dtype);
  tpu_norm_backward_outs(b, op, 9, &x, dy4, xhat, dx, pd, pd, 1, &c, outs);
  *nouts = 3;
  return NULL;
}

/* ---------------------------------------------------------------- batch norm */

/* The batch norm entry points differ only in where their arguments are and what
 * they return; one lowering reads this table. */
enum {
  TPU_BN_RESERVE = 1u << 0,      /* returns a 4th, empty uint8 "reserve" tensor */
  TPU_BN_RET_STATS = 1u << 1,    /* functional: returns the new running stats */
  TPU_BN_APPEND_ALWAYS = 1u << 2, /* running stats are (a!) args: appended after the returns */
  TPU_BN_APPEND_TRAIN = 1u << 3, /* legacy native_batch_norm: mutates them only in training */
};

typedef struct tpu_bn_form {
  const char* name;
  const char* overload_prefix; /* NULL: any overload */
  int8_t rm;                   /* running_mean arg (running_var follows), -1: none */
  int8_t train;                /* training bool arg, -1: fixed_train */
  int8_t fixed_train;
  int8_t momentum; /* eps follows */
  uint8_t flags;
} tpu_bn_form_t;

static const tpu_bn_form_t tpu_bn_forms[] = {
    {"native_batch_norm", NULL, 3, 5, 0, 6, TPU_BN_APPEND_TRAIN},
    {"_native_batch_norm_legit", "no_stats", -1, 3, 0, 4, 0},
    {"_native_batch_norm_legit", NULL, 3, 5, 0, 6, TPU_BN_APPEND_ALWAYS},
    {"_native_batch_norm_legit_no_training", NULL, 3, -1, 0, 5, 0},
    {"_native_batch_norm_legit_functional", NULL, 3, 5, 0, 6, TPU_BN_RET_STATS},
    {"_batch_norm_with_update", NULL, 3, -1, 1, 5, TPU_BN_RESERVE | TPU_BN_APPEND_ALWAYS},
    {"_batch_norm_with_update_functional", NULL, 3, -1, 1, 5, TPU_BN_RESERVE | TPU_BN_RET_STATS},
    {"_batch_norm_no_update", NULL, 3, -1, 0, 5, TPU_BN_RESERVE},
};

static const tpu_bn_form_t* tpu_bn_form(const tpu_op_t* op) {
  const char* ov = tpu_op_overload(op);
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_bn_forms); ++i) {
    const tpu_bn_form_t* f = &tpu_bn_forms[i];
    if (strcmp(f->name, tpu_op_name(op)) != 0) continue;
    if (f->overload_prefix && (!ov || strncmp(ov, f->overload_prefix, strlen(f->overload_prefix)) != 0)) continue;
    return f;
  }
  return NULL;
}

bool tpu_bn_layout(tpu_builder_t* b, const tpu_aval_t* x, tpu_norm_t* L) {
  if (x->rank < 2) {
    char s0[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "batch_norm: expected 2D or higher input, but got input of shape %s",
               tpu_nn_fmt_shape(s0, sizeof(s0), x->rank, x->dims));
    return false;
  }
  *L = tpu_norm_make(x->dims[0], x->dims[1], 1, tpu_nn_prod(x->rank - 2, x->dims + 2), 0xDu, x->dtype);
  return true;
}

/* running = (1 - momentum) * running + momentum * stat, in the running tensor's dtype. */
tpu_val_t tpu_bn_update(tpu_builder_t* b, tpu_op_t* op, int i, tpu_val_t stat, double momentum,
                        const tpu_norm_t* L) {
  tpu_val_t r = tpu_norm_stat_in(b, tpu_op_tensor(b, op, i), L);
  tpu_val_t v = tpu_nn_add(b, tpu_nn_mulc(b, r, 1.0 - momentum), tpu_nn_mulc(b, stat, momentum));
  return tpu_b_convert(b, v, tpu_op_aval(op, i).dtype);
}

static tpu_status_t* tpu_lower_batch_norm(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  const tpu_bn_form_t* f = tpu_bn_form(op);
  if (!f) return TPU_STATUS(TPU_UNIMPLEMENTED, "batch norm variant %s.%s", tpu_op_name(op), tpu_op_overload(op));
  tpu_aval_t x = tpu_op_aval(op, 0);
  tpu_norm_t L;
  if (!tpu_bn_layout(b, &x, &L)) return NULL;
  const int rm = f->rm, rv = f->rm + 1;
  bool train = f->train >= 0 ? tpu_op_bool(op, f->train, false) : f->fixed_train;
  bool stats = rm >= 0 && tpu_op_kind(op, rm) == TPU_ARG_TENSOR && tpu_op_kind(op, rv) == TPU_ARG_TENSOR;
  if (!train && !stats) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "running_mean must be defined in evaluation mode");
    return NULL;
  }
  int64_t c = x.dims[1];
  if (!tpu_norm_check_numel(b, op, 1, c, "weight") || !tpu_norm_check_numel(b, op, 2, c, "bias")) return NULL;
  if (rm >= 0 && (!tpu_norm_check_numel(b, op, rm, c, "running_mean") ||
                  !tpu_norm_check_numel(b, op, rv, c, "running_var")))
    return NULL;
  double momentum = tpu_op_float(op, f->momentum, 0.1), eps = tpu_op_float(op, f->momentum + 1, 1e-5);
  const int params[4] = {1, 2, rm, rv};
  tpu_dtype_t sd = tpu_norm_stat_dtype(op, x.dtype, rm >= 0 ? 4 : 2, params);

  tpu_val_t x4 = tpu_norm_x4(b, tpu_op_tensor(b, op, 0), &L);
  tpu_val_t w4 = tpu_norm_param(b, op, 1, &L), b4 = tpu_norm_param(b, op, 2, &L);
  tpu_val_t mean, var, rstd, new_rm = TPU_NOVAL, new_rv = TPU_NOVAL;
  if (train) {
    tpu_norm_stats(b, x4, &L, &mean, &var);
    rstd = tpu_norm_rstd(b, var, eps);
    if (stats) {
      int64_t n = tpu_norm_count(&L);
      /* The running variance is unbiased (n / (n - 1)); n == 1 gives NaN like PyTorch. */
      tpu_val_t unbiased = tpu_nn_mulc(b, var, n > 1 ? (double)n / (double)(n - 1) : NAN);
      new_rm = tpu_bn_update(b, op, rm, mean, momentum, &L);
      new_rv = tpu_bn_update(b, op, rv, unbiased, momentum, &L);
    }
  } else {
    mean = tpu_norm_stat_in(b, tpu_op_tensor(b, op, rm), &L);
    rstd = tpu_norm_rstd(b, tpu_norm_stat_in(b, tpu_op_tensor(b, op, rv), &L), eps);
  }
  tpu_val_t y = tpu_norm_apply(b, x4, mean, rstd, w4, b4, &L);
  int n = 0;
  outs[n++] = tpu_b_convert(b, tpu_b_reshape(b, y, x.rank, x.dims), x.dtype);
  /* Eval mode saves nothing: PyTorch returns empty save_mean / save_invstd. */
  int64_t zero = 0;
  outs[n++] = train ? tpu_b_convert(b, mean, sd) : tpu_nn_zeros(b, sd, 1, &zero);
  outs[n++] = train ? tpu_b_convert(b, rstd, sd) : tpu_nn_zeros(b, sd, 1, &zero);
  if (f->flags & TPU_BN_RESERVE) outs[n++] = tpu_nn_zeros(b, TPU_U8, 1, &zero);
  bool append = (f->flags & (TPU_BN_RET_STATS | TPU_BN_APPEND_ALWAYS)) ||
                ((f->flags & TPU_BN_APPEND_TRAIN) && train && stats);
  if (append && stats) {
    outs[n++] = new_rm != TPU_NOVAL ? new_rm : tpu_op_tensor(b, op, rm);
    outs[n++] = new_rv != TPU_NOVAL ? new_rv : tpu_op_tensor(b, op, rv);
  }
  *nouts = n;
  return NULL;
}

/* native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?,
 *   save_invstd?, train, eps, output_mask) and batch_norm_backward(..., reserve): same layout. */
static tpu_status_t* tpu_lower_batch_norm_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                   int* nouts) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 1);
  tpu_norm_t L;
  if (!tpu_bn_layout(b, &x, &L)) return NULL;
  bool train = tpu_op_bool(op, 7, true);
  int ms = train ? 5 : 3, rs = train ? 6 : 4;
  if (tpu_op_kind(op, ms) != TPU_ARG_TENSOR || tpu_op_kind(op, rs) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "batch_norm_backward: %s must be defined",
               train ? "save_mean and save_invstd" : "running_mean and running_var");
    return NULL;
  }
  tpu_val_t dy4, x4, mean, rstd;
  tpu_norm_backward_in(b, op, &L, ms, rs, &dy4, &x4, &mean, &rstd);
  if (!train) rstd = tpu_norm_rstd(b, rstd, tpu_op_float(op, 8, 1e-5));
  tpu_val_t xhat = tpu_norm_apply(b, x4, mean, rstd, TPU_NOVAL, TPU_NOVAL, &L);
  tpu_val_t dx = tpu_norm_dx(b, dy4, xhat, tpu_norm_param(b, op, 2, &L), rstd, &L, train);
  int64_t c = x.dims[1];
  tpu_dtype_t pd = tpu_norm_param_dtype(op, 2, x.dtype);
  tpu_norm_backward_outs(b, op, 9, &x, dy4, xhat, dx, pd, pd, 1, &c, outs);
  *nouts = 3;
  return NULL;
}

/* ------------------------------------------------------------------- table */

const tpu_lowering_t tpu_lowerings_nn[] = {
    {"native_layer_norm", tpu_lower_native_layer_norm},
    {"native_layer_norm_backward", tpu_lower_native_layer_norm_backward},
    {"native_group_norm", tpu_lower_native_group_norm},
    {"native_group_norm_backward", tpu_lower_native_group_norm_backward},
    {"native_batch_norm", tpu_lower_batch_norm},
    {"_native_batch_norm_legit", tpu_lower_batch_norm},
    {"_native_batch_norm_legit_no_training", tpu_lower_batch_norm},
    {"_native_batch_norm_legit_functional", tpu_lower_batch_norm},
    {"_batch_norm_with_update", tpu_lower_batch_norm},
    {"_batch_norm_with_update_functional", tpu_lower_batch_norm},
    {"_batch_norm_no_update", tpu_lower_batch_norm},
    {"native_batch_norm_backward", tpu_lower_batch_norm_backward},
    {"batch_norm_backward", tpu_lower_batch_norm_backward},
    /* losses (nn_loss.c) */
    {"nll_loss_forward", tpu_lower_nll_loss_forward},
    {"nll_loss2d_forward", tpu_lower_nll_loss_forward},
    {"nll_loss_backward", tpu_lower_nll_loss_backward},
    {"nll_loss2d_backward", tpu_lower_nll_loss_backward},
    {"mse_loss", tpu_lower_mse_loss},
    {"mse_loss_backward", tpu_lower_mse_loss_backward},
    {"smooth_l1_loss", tpu_lower_smooth_l1_loss},
    {"smooth_l1_loss_backward", tpu_lower_smooth_l1_loss_backward},
    {"huber_loss", tpu_lower_huber_loss},
    {"huber_loss_backward", tpu_lower_huber_loss_backward},
    {"soft_margin_loss", tpu_lower_soft_margin_loss},
    {"soft_margin_loss_backward", tpu_lower_soft_margin_loss_backward},
    {"binary_cross_entropy", tpu_lower_binary_cross_entropy},
    {"binary_cross_entropy_backward", tpu_lower_binary_cross_entropy_backward},
    {"binary_cross_entropy_with_logits", tpu_lower_binary_cross_entropy_with_logits},
    /* pooling (nn_pool.c) */
    {"max_pool2d_with_indices", tpu_lower_max_pool_with_indices},
    {"max_pool3d_with_indices", tpu_lower_max_pool_with_indices},
    {"max_pool2d_with_indices_backward", tpu_lower_max_pool_with_indices_backward},
    {"max_pool3d_with_indices_backward", tpu_lower_max_pool_with_indices_backward},
    {"max_pool2d_backward", tpu_lower_max_pool_backward},
    {"avg_pool2d", tpu_lower_avg_pool},
    {"avg_pool3d", tpu_lower_avg_pool},
    {"avg_pool2d_backward", tpu_lower_avg_pool_backward},
    {"avg_pool3d_backward", tpu_lower_avg_pool_backward},
    {"_adaptive_avg_pool2d", tpu_lower_adaptive_avg_pool},
    {"_adaptive_avg_pool3d", tpu_lower_adaptive_avg_pool},
    {"_adaptive_avg_pool2d_backward", tpu_lower_adaptive_avg_pool_backward},
    {"_adaptive_avg_pool3d_backward", tpu_lower_adaptive_avg_pool_backward},
    /* Same arguments as the underscored ops; reached through their out= overloads
     * (the functional ones are composite and call the underscored ops). */
    {"adaptive_avg_pool2d", tpu_lower_adaptive_avg_pool},
    {"adaptive_avg_pool3d", tpu_lower_adaptive_avg_pool},
    {"adaptive_avg_pool3d_backward", tpu_lower_adaptive_avg_pool_backward},
    {"adaptive_max_pool2d", tpu_lower_adaptive_max_pool},
    {"adaptive_max_pool3d", tpu_lower_adaptive_max_pool},
    {"adaptive_max_pool2d_backward", tpu_lower_adaptive_max_pool_backward},
    {"adaptive_max_pool3d_backward", tpu_lower_adaptive_max_pool_backward},
    {"max_unpool2d", tpu_lower_max_unpool},
    {"max_unpool3d", tpu_lower_max_unpool},
    {NULL, NULL},
};
