/* Lowerings: the fused inference paths of nn.MultiheadAttention and
 * nn.TransformerEncoderLayer (taken in eval mode, batch_first, no grad):
 * _native_multi_head_attention and _transformer_encoder_layer_fwd.
 *
 * Both are written from the same pieces, in the op-math type: the packed input
 * projection (qkv_weight is [Wq; Wk; Wv], 3E x E), heads split as (B, H, L, D),
 * softmax((Q / sqrt(D)) K^T + mask) V, the output projection, and for the encoder
 * layer the two layer norms and the feed-forward block (relu or exact gelu),
 * pre- or post-norm. Masks follow ATen's masked softmax: mask_type 0 is an
 * (L, S) attention mask, 1 a (B, S) key padding mask, 2 a merged (B, H|1, L, S)
 * one; a bool mask marks what is left out, a float mask is added; a row with
 * every key left out is NaN, as on CPU. The standalone _masked_softmax (with
 * its backward) and _transform_bias_rescale_qkv, which ATen's own fast paths
 * call, are here too. */
#include <math.h>

#include <string.h>

#include "matmul.h"
#include "matrix.h"
#include "nn.h"

typedef struct tpu_tf {
  int64_t b, l, s, e, h, d; /* batch, query and key lengths, embed dim, heads, head dim */
  tpu_dtype_t dtype, ct;
} tpu_tf_t;

/* x (..., in) @ w^T (w: out x in) + bias, in ct. */
static tpu_val_t tpu_tf_linear(tpu_builder_t* b, const tpu_tf_t* t, tpu_val_t x, tpu_val_t w, tpu_val_t bias) {
  int r = tpu_b_rank(b, x);
  tpu_val_t y = tpu_b_convert(b, tpu_mm_dot(b, x, w, 0, r - 1, 1), t->ct);
  tpu_aval_t ya = *tpu_b_aval(b, y); /* a copy: the builder's avals move as it grows */
  int64_t last = r - 1;
  return tpu_nn_add(b, y, tpu_b_broadcast_in_dim(b, bias, ya.rank, ya.dims, &last));
}

/* Rows [k E, (k + 1) E) of the packed projection: weight (E, E) and bias (E). */
static void tpu_tf_qkv_part(tpu_builder_t* b, const tpu_tf_t* t, tpu_val_t w, tpu_val_t bias, int k, tpu_val_t* out_w,
                            tpu_val_t* out_b) {
  int64_t w0[2] = {k * t->e, 0}, w1[2] = {(k + 1) * t->e, t->e}, b0 = k * t->e, b1 = (k + 1) * t->e;
  *out_w = tpu_b_slice(b, w, w0, w1, NULL);
  *out_b = tpu_b_slice(b, bias, &b0, &b1, NULL);
}

/* (B, N, E) -> (B, H, N, D) */
static tpu_val_t tpu_tf_heads(tpu_builder_t* b, const tpu_tf_t* t, tpu_val_t x, int64_t n) {
  int64_t d4[4] = {t->b, n, t->h, t->d}, perm[4] = {0, 2, 1, 3};
  return tpu_b_transpose(b, tpu_b_reshape(b, x, 4, d4), perm);
}

/* scores (B, H, L, S) with the mask applied as ATen's masked softmax takes it. */
static tpu_val_t tpu_tf_mask(tpu_builder_t* b, const tpu_tf_t* t, tpu_val_t scores, tpu_val_t mask, int64_t type) {
  if (mask == TPU_NOVAL) return scores;
  tpu_aval_t sa = *tpu_b_aval(b, scores), ma = *tpu_b_aval(b, mask);
  int64_t map[4] = {0, 1, 2, 3};
  if (type == 1) { /* key padding (B, S) */
    map[0] = 0, map[1] = 3;
  } else if (ma.rank == 2) { /* (L, S) */
    map[0] = 2, map[1] = 3;
  } else if (ma.rank == 3 || ma.dims[1] == 1) { /* (B, L, S) or (B, 1, L, S): every head */
    int64_t d3[3] = {ma.dims[0], ma.dims[ma.rank - 2], ma.dims[ma.rank - 1]};
    mask = tpu_b_reshape(b, mask, 3, d3);
    map[0] = 0, map[1] = 2, map[2] = 3;
  }
  tpu_val_t m = tpu_b_broadcast_in_dim(b, mask, sa.rank, sa.dims, map);
  if (ma.dtype == TPU_BOOL) return tpu_b_select(b, m, tpu_ops_like(b, scores, -INFINITY), scores);
  return tpu_nn_add(b, scores, tpu_b_convert(b, m, t->ct));
}

/* softmax over `dim` (a slice of -inf gives NaN, as ATen's). */
static tpu_val_t tpu_tf_softmax(tpu_builder_t* b, tpu_val_t x, int dim) {
  tpu_aval_t a = *tpu_b_aval(b, x);
  int64_t d = dim, keep[TPU_MAX_RANK];
  for (int i = 0, k = 0; i < a.rank; i++)
    if (i != dim) keep[k++] = i;
  tpu_val_t mx = tpu_b_reduce(b, x, tpu_b_const(b, a.dtype, -INFINITY), 1, &d, "stablehlo.maximum");
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential", tpu_nn_sub(b, x, tpu_b_broadcast_in_dim(b, mx, a.rank, a.dims, keep)));
  tpu_val_t sum = tpu_b_reduce(b, e, tpu_b_const(b, a.dtype, 0), 1, &d, "stablehlo.add");
  return tpu_nn_div(b, e, tpu_b_broadcast_in_dim(b, sum, a.rank, a.dims, keep));
}

/* Multi-head attention of q (B, L, E) over k, v (B, S, E) in ct: the output
 * (B, L, E) and, if out_w, the weights (B, H, L, S). Args from `at`: qkv_weight,
 * qkv_bias, proj_weight, proj_bias, mask, mask_type (absent: -1). */
static tpu_val_t tpu_tf_attention(tpu_builder_t* b, tpu_op_t* op, const tpu_tf_t* t, tpu_val_t q, tpu_val_t k,
                                  tpu_val_t v, const int* at, tpu_val_t* out_w) {
  tpu_val_t qkv_w = tpu_b_convert(b, tpu_op_tensor(b, op, at[0]), t->ct);
  tpu_val_t qkv_b = tpu_b_convert(b, tpu_op_tensor(b, op, at[1]), t->ct);
  tpu_val_t w[3], bias[3];
  for (int i = 0; i < 3; i++) tpu_tf_qkv_part(b, t, qkv_w, qkv_b, i, &w[i], &bias[i]);
  tpu_val_t Q = tpu_tf_heads(b, t, tpu_tf_linear(b, t, q, w[0], bias[0]), t->l);
  tpu_val_t K = tpu_tf_heads(b, t, tpu_tf_linear(b, t, k, w[1], bias[1]), t->s);
  tpu_val_t V = tpu_tf_heads(b, t, tpu_tf_linear(b, t, v, w[2], bias[2]), t->s);
  Q = tpu_nn_mulc(b, Q, 1.0 / sqrt((double)t->d)); /* ATen scales q before the product */
  tpu_val_t scores = tpu_b_convert(b, tpu_mm_dot(b, Q, K, 2, 3, 3), t->ct); /* (B, H, L, S) */
  tpu_val_t mask = at[4] >= 0 && tpu_op_kind(op, at[4]) == TPU_ARG_TENSOR ? tpu_op_tensor(b, op, at[4]) : TPU_NOVAL;
  tpu_val_t p = tpu_tf_softmax(b, tpu_tf_mask(b, t, scores, mask, at[5] >= 0 ? tpu_op_int(op, at[5], -1) : -1), 3);
  if (out_w) *out_w = p;
  tpu_val_t o = tpu_b_convert(b, tpu_mm_dot(b, p, V, 2, 3, 2), t->ct); /* (B, H, L, D) */
  int64_t perm[4] = {0, 2, 1, 3}, d3[3] = {t->b, t->l, t->e};
  o = tpu_b_reshape(b, tpu_b_transpose(b, o, perm), 3, d3);
  return tpu_tf_linear(b, t, o, tpu_b_convert(b, tpu_op_tensor(b, op, at[2]), t->ct),
                       tpu_b_convert(b, tpu_op_tensor(b, op, at[3]), t->ct));
}

/* Shapes from q (arg iq, (B, L, E)), k (arg ik) and the head count. */
static bool tpu_tf_begin(tpu_builder_t* b, tpu_op_t* op, int iq, int ik, int64_t e, int64_t h, tpu_tf_t* t) {
  tpu_aval_t qa = tpu_op_aval(op, iq), ka = tpu_op_aval(op, ik);
  if (qa.rank != 3 || ka.rank != 3 || qa.dims[2] != e || ka.dims[2] != e || h <= 0 || e % h != 0 ||
      ka.dims[0] != qa.dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected (batch, length, %" PRId64 ") inputs and heads dividing it",
               tpu_op_name(op), e);
    return false;
  }
  if (!tpu_dtype_is_float(qa.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: dtype %s is not supported", tpu_op_name(op), tpu_dtype_name(qa.dtype));
    return false;
  }
  *t = (tpu_tf_t){.b = qa.dims[0], .l = qa.dims[1], .s = ka.dims[1], .e = e, .h = h, .d = e / h,
                  .dtype = qa.dtype, .ct = tpu_dtype_opmath(qa.dtype)};
  return true;
}

/* _native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight,
 * qkv_bias, proj_weight, proj_bias, mask, need_weights, average_attn_weights,
 * mask_type) -> (output, weights) */
static tpu_status_t* tpu_lower__native_multi_head_attention(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                            tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_tf_t t;
  if (!tpu_tf_begin(b, op, 0, 1, tpu_op_int(op, 3, 0), tpu_op_int(op, 4, 1), &t)) return tpu_b_take_error(b);
  static const int at[6] = {5, 6, 7, 8, 9, 12};
  tpu_val_t q = tpu_b_convert(b, tpu_op_tensor(b, op, 0), t.ct), k = tpu_b_convert(b, tpu_op_tensor(b, op, 1), t.ct);
  tpu_val_t v = tpu_b_convert(b, tpu_op_tensor(b, op, 2), t.ct), w;
  outs[0] = tpu_b_convert(b, tpu_tf_attention(b, op, &t, q, k, v, at, &w), t.dtype);
  int64_t zero = 0, d1 = 1;
  tpu_aval_t ea = tpu_aval_make(t.dtype, 1, &zero);
  if (!tpu_op_bool(op, 10, true)) {
    outs[1] = tpu_b_full(b, &ea, 0); /* ATen returns no weights (an undefined tensor) */
  } else if (tpu_op_bool(op, 11, true)) { /* the heads' mean: (B, L, S) */
    outs[1] = tpu_b_convert(b, tpu_nn_mulc(b, tpu_nn_sum(b, w, 1, &d1), 1.0 / (double)t.h), t.dtype);
  } else {
    outs[1] = tpu_b_convert(b, w, t.dtype);
  }
  *nouts = 2;
  return tpu_b_take_error(b);
}

/* Layer norm over the last dim with weight (arg iw) and bias (arg ib). */
static tpu_val_t tpu_tf_layer_norm(tpu_builder_t* b, tpu_op_t* op, const tpu_tf_t* t, tpu_val_t x, int iw, int ib,
                                   double eps) {
  tpu_aval_t av = *tpu_b_aval(b, x);
  const tpu_aval_t* a = &av;
  int64_t last = a->rank - 1, keep[2] = {0, 1};
  double inv = 1.0 / (double)a->dims[last];
  tpu_val_t mean = tpu_b_broadcast_in_dim(b, tpu_nn_mulc(b, tpu_nn_sum(b, x, 1, &last), inv), a->rank, a->dims, keep);
  tpu_val_t c = tpu_nn_sub(b, x, mean);
  tpu_val_t var = tpu_nn_mulc(b, tpu_nn_sum(b, tpu_nn_mul(b, c, c), 1, &last), inv);
  tpu_val_t rstd = tpu_b_unary(b, "stablehlo.rsqrt", tpu_nn_addc(b, var, eps));
  tpu_val_t y = tpu_nn_mul(b, c, tpu_b_broadcast_in_dim(b, rstd, a->rank, a->dims, keep));
  tpu_val_t w = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, iw), t->ct), a->rank, a->dims, &last);
  tpu_val_t bb = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, ib), t->ct), a->rank, a->dims, &last);
  return tpu_nn_add(b, tpu_nn_mul(b, y, w), bb);
}

/* The feed-forward block: linear2(act(linear1(x))), act relu or exact gelu. */
static tpu_val_t tpu_tf_ffn(tpu_builder_t* b, tpu_op_t* op, const tpu_tf_t* t, tpu_val_t x, bool gelu) {
  tpu_val_t h = tpu_tf_linear(b, t, x, tpu_b_convert(b, tpu_op_tensor(b, op, 14), t->ct),
                              tpu_b_convert(b, tpu_op_tensor(b, op, 15), t->ct));
  if (gelu) { /* x * (1 + erf(x / sqrt 2)) / 2 */
    tpu_val_t erf = tpu_b_unary(b, "chlo.erf", tpu_nn_mulc(b, h, 0.70710678118654752440));
    h = tpu_nn_mul(b, tpu_nn_mulc(b, h, 0.5), tpu_nn_addc(b, erf, 1.0));
  } else {
    h = tpu_b_binary(b, "stablehlo.maximum", h, tpu_ops_like(b, h, 0));
  }
  return tpu_tf_linear(b, t, h, tpu_b_convert(b, tpu_op_tensor(b, op, 16), t->ct),
                       tpu_b_convert(b, tpu_op_tensor(b, op, 17), t->ct));
}

/* _transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias,
 * proj_weight, proj_bias, use_gelu, norm_first, eps, norm_weight_1, norm_bias_1,
 * norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
 * mask, mask_type) */
static tpu_status_t* tpu_lower__transformer_encoder_layer_fwd(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                              tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_tf_t t;
  if (!tpu_tf_begin(b, op, 0, 0, tpu_op_int(op, 1, 0), tpu_op_int(op, 2, 1), &t)) return tpu_b_take_error(b);
  static const int at[6] = {3, 4, 5, 6, 18, 19};
  bool gelu = tpu_op_bool(op, 7, false), norm_first = tpu_op_bool(op, 8, false);
  double eps = tpu_op_float(op, 9, 1e-5);
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), t.ct);
  if (norm_first) {
    tpu_val_t n1 = tpu_tf_layer_norm(b, op, &t, x, 10, 11, eps);
    x = tpu_nn_add(b, x, tpu_tf_attention(b, op, &t, n1, n1, n1, at, NULL));
    x = tpu_nn_add(b, x, tpu_tf_ffn(b, op, &t, tpu_tf_layer_norm(b, op, &t, x, 12, 13, eps), gelu));
  } else {
    x = tpu_tf_layer_norm(b, op, &t, tpu_nn_add(b, x, tpu_tf_attention(b, op, &t, x, x, x, at, NULL)), 10, 11, eps);
    x = tpu_tf_layer_norm(b, op, &t, tpu_nn_add(b, x, tpu_tf_ffn(b, op, &t, x, gelu)), 12, 13, eps);
  }
  outs[0] = tpu_b_convert(b, x, t.dtype);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* ------------------------------------------ _masked_softmax and friends */

/* The mask (arg 1) of _masked_softmax(self, mask, dim, mask_type) broadcast to
 * self's shape x, with ATen's rules: mask_type 0 is an (L, L) attention mask
 * and 1 a (B, L) padding mask (both only for a 2-D mask and a 4-D input, over
 * the last two dims / dims 0 and 3), anything else (2, absent) self's shape. */
static tpu_val_t tpu_tf_softmax_mask(tpu_builder_t* b, tpu_op_t* op, const tpu_aval_t* x) {
  tpu_aval_t m = tpu_op_aval(op, 1);
  int64_t type = tpu_op_int(op, 3, 2), map[TPU_MAX_RANK];
  if (m.rank != 2 || x->rank != 4) type = 2;
  for (int i = 0; i < m.rank; i++) map[i] = i;
  bool ok = true;
  if (type == 1) {
    ok = x->dims[0] == m.dims[0] && x->dims[2] == m.dims[1] && x->dims[3] == m.dims[1];
    map[0] = 0, map[1] = 3;
    if (!ok) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "For mask_type == 1 mask shape should be (B, L)");
  } else if (type == 0) {
    ok = m.dims[0] == x->dims[2] && m.dims[1] == x->dims[2] && x->dims[3] == x->dims[2];
    map[0] = 2, map[1] = 3;
    if (!ok) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "For mask_type == 0 mask shape should be (L, L)");
  } else {
    ok = m.rank == x->rank && memcmp(m.dims, x->dims, sizeof(int64_t) * (size_t)x->rank) == 0;
    if (!ok) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "For mask_type == 2 mask shape should match input shape");
  }
  if (!ok) return TPU_NOVAL;
  return tpu_b_broadcast_in_dim(b, tpu_op_tensor(b, op, 1), x->rank, x->dims, map);
}

/* Float self (arg 0) and a bool mask (arg imask), as ATen's masked softmax checks them. */
static bool tpu_tf_softmax_check(tpu_builder_t* b, tpu_op_t* op, int imask) {
  if (tpu_op_aval(op, imask).dtype != TPU_BOOL) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Mask should be a boolean tensor");
    return false;
  }
  tpu_dtype_t t = tpu_op_aval(op, 0).dtype;
  if (!tpu_dtype_is_float(t) || tpu_dtype_is_complex(t)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: not implemented for %s", tpu_op_name(op), tpu_dtype_name(t));
    return false;
  }
  return true;
}

/* A 0-d value as (1), so that it has a dim to reduce (ATen views it so too). */
static tpu_val_t tpu_tf_at_least_1d(tpu_builder_t* b, tpu_val_t v) {
  int64_t one = 1;
  return tpu_b_rank(b, v) == 0 ? tpu_b_reshape(b, v, 1, &one) : v;
}

/* _masked_softmax(self, mask, dim=None, mask_type=None): softmax over dim (default
 * the last) of self with the masked (true) entries left out; a slice with every
 * entry masked is NaN, as on CPU. */
static tpu_status_t* tpu_lower__masked_softmax(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  if (!tpu_tf_softmax_check(b, op, 1)) return tpu_b_take_error(b);
  tpu_aval_t x = tpu_op_aval(op, 0);
  int dim = tpu_ops_dim(b, tpu_op_int(op, 2, x.rank - 1), x.rank);
  tpu_val_t mask = tpu_tf_softmax_mask(b, op, &x);
  if (!tpu_b_ok(b)) return tpu_b_take_error(b);
  tpu_val_t v = tpu_tf_at_least_1d(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), tpu_dtype_opmath(x.dtype)));
  v = tpu_b_select(b, tpu_tf_at_least_1d(b, mask), tpu_ops_like(b, v, -INFINITY), v);
  outs[0] = tpu_b_reshape(b, tpu_b_convert(b, tpu_tf_softmax(b, v, dim), x.dtype), x.rank, x.dims);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* _masked_softmax_backward(grad_output, output, mask, dim=None):
 * output * (grad - sum over dim of grad * output), 0 where masked. */
static tpu_status_t* tpu_lower__masked_softmax_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                        tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t g = tpu_op_aval(op, 0), m = tpu_op_aval(op, 2);
  if (m.rank != g.rank || memcmp(m.dims, g.dims, sizeof(int64_t) * (size_t)g.rank) != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Mask shape should match grad shape");
    return tpu_b_take_error(b);
  }
  if (!tpu_tf_softmax_check(b, op, 2)) return tpu_b_take_error(b);
  int64_t dim = tpu_ops_dim(b, tpu_op_int(op, 3, g.rank - 1), g.rank);
  tpu_dtype_t ct = tpu_dtype_opmath(g.dtype);
  tpu_val_t gv = tpu_tf_at_least_1d(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct));
  tpu_val_t out = tpu_tf_at_least_1d(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct));
  tpu_val_t mask = tpu_tf_at_least_1d(b, tpu_op_tensor(b, op, 2));
  tpu_val_t zero = tpu_ops_like(b, gv, 0.0);
  tpu_val_t go = tpu_b_select(b, mask, zero, tpu_nn_mul(b, gv, out));
  tpu_aval_t a = *tpu_b_aval(b, gv);
  int64_t keep[TPU_MAX_RANK];
  for (int i = 0, k = 0; i < a.rank; i++)
    if (i != dim) keep[k++] = i;
  tpu_val_t sum = tpu_b_broadcast_in_dim(b, tpu_nn_sum(b, go, 1, &dim), a.rank, a.dims, keep);
  tpu_val_t gi = tpu_b_select(b, mask, zero, tpu_nn_mul(b, out, tpu_nn_sub(b, gv, sum)));
  outs[0] = tpu_b_reshape(b, tpu_b_convert(b, gi, g.dtype), g.rank, g.dims);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* _transform_bias_rescale_qkv(qkv (B, T, 3D), qkv_bias (3D), num_heads) ->
 * q, k, v (B, H, T, D / H): qkv + bias split into three and into heads, q
 * scaled by 1 / sqrt(D / H), in the op-math type. */
static tpu_status_t* tpu_lower__transform_bias_rescale_qkv(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                           tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t a = tpu_op_aval(op, 0), ba = tpu_op_aval(op, 1);
  int64_t h = tpu_op_int(op, 2, 1), d = a.rank == 3 ? a.dims[2] / 3 : 0;
  if (a.rank != 3 || ba.rank != 1 || ba.dims[0] != a.dims[2] || a.dims[2] % 3 != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_transform_bias_rescale_qkv: expected qkv (B, T, 3 * D) and qkv_bias (3 * D)");
    return tpu_b_take_error(b);
  }
  if (h <= 0 || d % h != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected D %% num_head == 0 to be true, but got false.");
    return tpu_b_take_error(b);
  }
  if (!tpu_dtype_is_float(a.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "_transform_bias_rescale_qkv: not implemented for %s", tpu_dtype_name(a.dtype));
    return tpu_b_take_error(b);
  }
  tpu_tf_t t = {.b = a.dims[0], .e = d, .h = h, .d = d / h, .dtype = a.dtype, .ct = tpu_dtype_opmath(a.dtype)};
  int64_t last = 2;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), t.ct);
  x = tpu_nn_add(b, x, tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), t.ct), 3, a.dims, &last));
  for (int i = 0; i < 3; i++) {
    tpu_val_t part = tpu_tf_heads(b, &t, tpu_mx_slice(b, x, 2, i * d, (i + 1) * d), a.dims[1]);
    if (i == 0) part = tpu_nn_mulc(b, part, 1.0 / sqrt((double)t.d));
    outs[i] = tpu_b_convert(b, part, a.dtype);
  }
  *nouts = 3;
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_nn_transformer[] = {
    {"_masked_softmax", tpu_lower__masked_softmax},
    {"_masked_softmax_backward", tpu_lower__masked_softmax_backward},
    {"_transform_bias_rescale_qkv", tpu_lower__transform_bias_rescale_qkv},
    {"_native_multi_head_attention", tpu_lower__native_multi_head_attention},
    {"_transformer_encoder_layer_fwd", tpu_lower__transformer_encoder_layer_fwd},
    {NULL, NULL},
};
