/* Lowerings: _flash_attention_forward and _flash_attention_backward, the ops
 * behind torch.nn.attention.varlen.varlen_attn (and TorchTitan's "varlen"
 * attention), which CUDA runs with FlashAttention.
 *
 * Two forms, as in ATen: variable-length, where cum_seq_q / cum_seq_k (B + 1
 * offsets, int32) pack B sequences along dim 0 of q (Tq, H, D), k and v
 * (Tk, Hk, D); and batched, with no offsets, q (B, Lq, H, D). Both are computed
 * densely here, as one (Tq x Tk) score matrix per head whose entries outside a
 * query's own sequence are masked: the segment of every row comes from the
 * offsets on the device, so one program serves every packing of the same
 * totals. Grouped-query attention (Hk dividing H) maps query head h to kv head
 * h / (H / Hk), as FlashAttention does.
 *
 * Masking follows FlashAttention: is_causal and the sliding window are aligned
 * to the bottom right of each (lq x lk) block, i.e. key j of a sequence is
 * visible to query i when d = j - (i + lk - lq) lies in [-window_left,
 * window_right] (a negative window is unbounded; causal means window_right 0).
 * A query that sees no key gets a zero output and logsumexp +inf, so the
 * backward's exp(s - lse) is 0 for it.
 *
 * The softmax is computed in float32 (the op-math type) and the logsumexp,
 * (H, Tq) or (B, H, Lq), is float32, as FlashAttention returns it. dropout_p > 0
 * (FlashAttention's Philox dropout), the inference-only arguments (seqused_k,
 * block_table, alibi_slopes) and the FP8 overload (.quantized) are refused. */
#include <math.h>
#include <string.h>

#include "nn.h"

/* The static shape of one call: q viewed as (B, Lq, Hk, G, D), k and v as
 * (B, Lk, Hk, D); varlen calls have B = 1 and L = the packed totals. */
typedef struct tpu_va {
  bool varlen;
  int64_t b, lq, lk, h, hk, g, d;
  double scale;
  int64_t wl, wr; /* window; -1 is unbounded */
  int cu;          /* arg index of cum_seq_q (cum_seq_k follows) */
  tpu_dtype_t dtype;
} tpu_va_t;

/* Where the two ops keep their arguments: q (k and v follow), cum_seq_q
 * (cum_seq_k follows), dropout_p, is_causal, scale, window_size_left (right
 * follows). */
typedef struct tpu_va_args {
  int q, cu, dropout, causal, scale, wl;
} tpu_va_args_t;
static const tpu_va_args_t tpu_va_fwd = {0, 3, 7, 8, 10, 11};
static const tpu_va_args_t tpu_va_bwd = {1, 6, 10, 11, 14, 15};

/* Reads and checks the shapes and static arguments. */
static bool tpu_va_setup(tpu_builder_t* b, tpu_op_t* op, const tpu_va_args_t* a, tpu_va_t* out) {
  const char* name = tpu_op_name(op);
  tpu_aval_t q = tpu_op_aval(op, a->q), k = tpu_op_aval(op, a->q + 1), v = tpu_op_aval(op, a->q + 2);
  tpu_va_t t = {.varlen = tpu_op_kind(op, a->cu) == TPU_ARG_TENSOR, .cu = a->cu, .dtype = q.dtype};
  int r = t.varlen ? 3 : 4;
  if (q.rank != r || k.rank != r || v.rank != r || k.dtype != q.dtype || v.dtype != q.dtype) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected q, k, v of one dtype, shaped %s", name,
               t.varlen ? "(total, heads, head_dim) with cum_seq_q/cum_seq_k" : "(batch, seqlen, heads, head_dim)");
    return false;
  }
  if (!tpu_dtype_is_float(q.dtype) || q.dtype == TPU_F64) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: not implemented for %s (FlashAttention takes float32, float16, bfloat16)",
               name, tpu_dtype_name(q.dtype));
    return false;
  }
  int o = t.varlen ? 0 : 1;
  t.b = t.varlen ? 1 : q.dims[0];
  t.lq = q.dims[o], t.lk = k.dims[o], t.h = q.dims[o + 1], t.hk = k.dims[o + 1], t.d = q.dims[o + 2];
  bool same_kv = v.dims[o] == t.lk && v.dims[o + 1] == t.hk && v.dims[o + 2] == t.d && k.dims[o + 2] == t.d;
  if (!same_kv || (!t.varlen && (k.dims[0] != t.b || v.dims[0] != t.b)) || t.hk <= 0 || t.h % t.hk != 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: k and v must match, with a head count dividing q's (%lld)", name,
               (long long)t.h);
    return false;
  }
  tpu_aval_t cq = tpu_op_aval(op, a->cu), ck = t.varlen ? tpu_op_aval(op, a->cu + 1) : cq;
  if (t.varlen && (tpu_op_kind(op, a->cu + 1) != TPU_ARG_TENSOR || cq.rank != 1 || ck.rank != 1 ||
                   cq.dims[0] < 1 || ck.dims[0] != cq.dims[0] || !tpu_dtype_is_int(cq.dtype) ||
                   !tpu_dtype_is_int(ck.dtype))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: cum_seq_q and cum_seq_k must both be (batch + 1) integer offsets", name);
    return false;
  }
  if (tpu_op_float(op, a->dropout, 0.0) != 0.0) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: dropout_p > 0 is not supported on tpu", name);
    return false;
  }
  t.g = t.h / t.hk;
  t.scale = tpu_op_float(op, a->scale, 1.0 / sqrt((double)t.d));
  t.wl = tpu_op_int(op, a->wl, -1);
  t.wr = tpu_op_bool(op, a->causal, false) ? 0 : tpu_op_int(op, a->wl + 1, -1);
  *out = t;
  return true;
}

/* Per row i of a packed axis of length n, from the (B + 1) offsets cu: the
 * number of its sequence (B for rows past the last offset) and that sequence's
 * start and length, as i32 values of shape (n). */
static void tpu_va_rows(tpu_builder_t* b, tpu_val_t cu, int64_t n, tpu_val_t* out_seq, tpu_val_t* out_start,
                        tpu_val_t* out_len) {
  int64_t nb = tpu_b_aval(b, cu)->dims[0], dims[2] = {n, nb}, col = 1;
  tpu_aval_t ia = {.dtype = TPU_I32, .rank = 2, .dims = {n, nb}};
  tpu_val_t c = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, cu, TPU_I32), 2, dims, &col);
  tpu_val_t le = tpu_b_compare(b, "LE", c, tpu_b_iota(b, &ia, 0));
  tpu_val_t zero = tpu_b_const_i(b, TPU_I32, 0), big = tpu_b_const_i(b, TPU_I32, INT32_MAX);
  tpu_val_t one = tpu_ops_like(b, c, 1.0), zeros = tpu_ops_like(b, c, 0.0), bigs = tpu_ops_like(b, c, INT32_MAX);
  tpu_val_t count = tpu_b_reduce(b, tpu_b_select(b, le, one, zeros), zero, 1, &col, "stablehlo.add");
  *out_seq = tpu_b_binary(b, "stablehlo.subtract", count, tpu_ops_like(b, count, 1.0));
  *out_start = tpu_b_reduce(b, tpu_b_select(b, le, c, zeros), zero, 1, &col, "stablehlo.maximum");
  tpu_val_t end = tpu_b_reduce(b, tpu_b_select(b, le, bigs, c), big, 1, &col, "stablehlo.minimum");
  *out_len = tpu_b_binary(b, "stablehlo.subtract", end, *out_start);
}

static tpu_val_t tpu_va_and(tpu_builder_t* b, tpu_val_t m, tpu_val_t c) {
  return m == TPU_NOVAL ? c : tpu_b_binary(b, "stablehlo.and", m, c);
}

/* The (Lq, Lk) bool mask of the keys each query sees. */
static tpu_val_t tpu_va_mask(tpu_builder_t* b, tpu_op_t* op, const tpu_va_t* t) {
  int64_t dims[2] = {t->lq, t->lk}, d0 = 0, d1 = 1;
  tpu_aval_t ma = {.dtype = TPU_I32, .rank = 2, .dims = {t->lq, t->lk}};
  tpu_val_t i = tpu_b_iota(b, &ma, 0), j = tpu_b_iota(b, &ma, 1), m = TPU_NOVAL, d;
  if (t->varlen) {
    tpu_val_t cq = tpu_op_tensor(b, op, t->cu), ck = tpu_op_tensor(b, op, t->cu + 1);
    int64_t nseq = tpu_b_aval(b, cq)->dims[0] - 1;
    tpu_val_t sq, qs, ql, sk, ks, kl;
    tpu_va_rows(b, cq, t->lq, &sq, &qs, &ql);
    tpu_va_rows(b, ck, t->lk, &sk, &ks, &kl);
    sq = tpu_b_broadcast_in_dim(b, sq, 2, dims, &d0);
    m = tpu_b_compare(b, "EQ", sq, tpu_b_broadcast_in_dim(b, sk, 2, dims, &d1));
    m = tpu_va_and(b, m, tpu_b_compare(b, "LT", sq, tpu_ops_like(b, sq, (double)nseq)));
    tpu_val_t pq = tpu_b_binary(b, "stablehlo.subtract", i, tpu_b_broadcast_in_dim(b, qs, 2, dims, &d0));
    tpu_val_t pk = tpu_b_binary(b, "stablehlo.subtract", j, tpu_b_broadcast_in_dim(b, ks, 2, dims, &d1));
    tpu_val_t shift = tpu_b_binary(b, "stablehlo.subtract", tpu_b_broadcast_in_dim(b, kl, 2, dims, &d1),
                                   tpu_b_broadcast_in_dim(b, ql, 2, dims, &d0));
    d = tpu_b_binary(b, "stablehlo.subtract", pk, tpu_b_binary(b, "stablehlo.add", pq, shift));
  } else {
    tpu_val_t shifted = tpu_b_binary(b, "stablehlo.add", i, tpu_ops_like(b, i, (double)(t->lk - t->lq)));
    d = tpu_b_binary(b, "stablehlo.subtract", j, shifted);
  }
  if (t->wl >= 0) m = tpu_va_and(b, m, tpu_b_compare(b, "GE", d, tpu_ops_like(b, d, (double)-t->wl)));
  if (t->wr >= 0) m = tpu_va_and(b, m, tpu_b_compare(b, "LE", d, tpu_ops_like(b, d, (double)t->wr)));
  return m == TPU_NOVAL ? tpu_b_compare(b, "EQ", i, i) : m;
}

/* q as (B, Lq, Hk, G, D) and k or v as (B, Lk, Hk, D), in float32. */
static tpu_val_t tpu_va_q5(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_va_t* t) {
  int64_t d5[5] = {t->b, t->lq, t->hk, t->g, t->d};
  return tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), TPU_F32), 5, d5);
}
static tpu_val_t tpu_va_kv4(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_va_t* t) {
  int64_t d4[4] = {t->b, t->lk, t->hk, t->d};
  return tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), TPU_F32), 4, d4);
}

/* scale * q k^T as (B, Hk, Lq, G, Lk), and the mask broadcast to it. */
static tpu_val_t tpu_va_scores(tpu_builder_t* b, tpu_val_t q5, tpu_val_t k4, const tpu_va_t* t, tpu_val_t mask,
                               tpu_val_t* out_mask) {
  int64_t qb[2] = {0, 2}, kb[2] = {0, 2}, qc = 4, kc = 3, md[2] = {2, 4};
  tpu_val_t s = tpu_b_dot_general(b, q5, k4, 2, qb, kb, 1, &qc, &kc, TPU_F32);
  const tpu_aval_t* sa = tpu_b_aval(b, s);
  int64_t dims[5] = {sa->dims[0], sa->dims[1], sa->dims[2], sa->dims[3], sa->dims[4]};
  *out_mask = tpu_b_broadcast_in_dim(b, mask, 5, dims, md);
  return tpu_nn_mulc(b, s, t->scale);
}

/* A (B, Hk, Lq, G) value as logsumexp's layout: (B, H, Lq), or (H, Tq) for varlen. */
static tpu_val_t tpu_va_lse_out(tpu_builder_t* b, tpu_val_t x, const tpu_va_t* t) {
  int64_t perm[4] = {0, 1, 3, 2}, d3[3] = {t->b, t->h, t->lq}, d2[2] = {t->h, t->lq};
  tpu_val_t y = tpu_b_transpose(b, x, perm);
  return t->varlen ? tpu_b_reshape(b, y, 2, d2) : tpu_b_reshape(b, y, 3, d3);
}

/* logsumexp (arg i, its layout) back to (B, Hk, Lq, G, Lk) for the scores. */
static tpu_val_t tpu_va_lse_in(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_va_t* t) {
  int64_t d4[4] = {t->b, t->hk, t->g, t->lq}, d5[5] = {t->b, t->hk, t->lq, t->g, t->lk}, map[4] = {0, 1, 3, 2};
  tpu_val_t l = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), TPU_F32), 4, d4);
  return tpu_b_broadcast_in_dim(b, l, 5, d5, map);
}

/* A (B, Hk, Lq, G, D) product back to q's layout and dtype. */
static tpu_val_t tpu_va_q_out(tpu_builder_t* b, tpu_val_t x, const tpu_va_t* t) {
  int64_t perm[5] = {0, 2, 1, 3, 4}, d4[4] = {t->b, t->lq, t->h, t->d}, d3[3] = {t->lq, t->h, t->d};
  tpu_val_t y = tpu_b_transpose(b, x, perm);
  y = t->varlen ? tpu_b_reshape(b, y, 3, d3) : tpu_b_reshape(b, y, 4, d4);
  return tpu_b_convert(b, y, t->dtype);
}

/* A (B, Hk, Lk, D) product back to k's layout and dtype. */
static tpu_val_t tpu_va_kv_out(tpu_builder_t* b, tpu_val_t x, const tpu_va_t* t) {
  int64_t perm[4] = {0, 2, 1, 3}, d3[3] = {t->lk, t->hk, t->d};
  tpu_val_t y = tpu_b_transpose(b, x, perm);
  if (t->varlen) y = tpu_b_reshape(b, y, 3, d3);
  return tpu_b_convert(b, y, t->dtype);
}

static tpu_val_t tpu_va_empty(tpu_builder_t* b, tpu_dtype_t dtype) {
  int64_t zero = 0;
  return tpu_nn_zeros(b, dtype, 1, &zero);
}

/* _flash_attention_forward(q, k, v, cum_seq_q?, cum_seq_k?, max_q, max_k,
 * dropout_p, is_causal, return_debug_mask, *, scale?, window_size_left?,
 * window_size_right?, seqused_k?, alibi_slopes?, block_table?, num_splits?)
 * -> (output, softmax_logsumexp, rng_state, unused, debug_attn_mask) */
static tpu_status_t* tpu_lower__flash_attention_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                        int* nouts) {
  (void)max_outs;
  if (strcmp(tpu_op_overload(op), "quantized") == 0) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "_flash_attention_forward.quantized (FP8 with descale factors) is not "
                                     "supported on tpu");
    return tpu_b_take_error(b);
  }
  tpu_va_t t;
  if (!tpu_va_setup(b, op, &tpu_va_fwd, &t)) return tpu_b_take_error(b);
  for (int i = 13; i <= 15; i++)
    if (tpu_op_kind(op, i) != TPU_ARG_NONE) {
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "_flash_attention_forward: seqused_k, alibi_slopes and block_table are not "
                                       "supported on tpu");
      return tpu_b_take_error(b);
    }
  if (tpu_op_bool(op, 9, false)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "_flash_attention_forward: return_debug_mask is not supported on tpu");
    return tpu_b_take_error(b);
  }
  tpu_val_t mask, q5 = tpu_va_q5(b, op, 0, &t), k4 = tpu_va_kv4(b, op, 1, &t), v4 = tpu_va_kv4(b, op, 2, &t);
  tpu_val_t s = tpu_va_scores(b, q5, k4, &t, tpu_va_mask(b, op, &t), &mask);
  tpu_val_t ninf = tpu_ops_like(b, s, -INFINITY);
  s = tpu_b_select(b, mask, s, ninf);
  const tpu_aval_t sa = *tpu_b_aval(b, s);
  int64_t last = 4, keep[4] = {0, 1, 2, 3};
  tpu_val_t mx = tpu_b_reduce(b, s, tpu_b_const(b, TPU_F32, -INFINITY), 1, &last, "stablehlo.maximum");
  tpu_val_t finite = tpu_b_compare(b, "GT", mx, tpu_ops_like(b, mx, -INFINITY));
  mx = tpu_b_select(b, finite, mx, tpu_ops_like(b, mx, 0.0)); /* a row that sees nothing */
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential",
                            tpu_nn_sub(b, s, tpu_b_broadcast_in_dim(b, mx, 5, sa.dims, keep)));
  tpu_val_t sum = tpu_nn_sum(b, e, 1, &last);
  tpu_val_t lse = tpu_nn_add(b, tpu_b_unary(b, "stablehlo.log", sum), mx);
  lse = tpu_b_select(b, finite, lse, tpu_ops_like(b, lse, INFINITY));
  tpu_val_t safe = tpu_b_select(b, finite, sum, tpu_ops_like(b, sum, 1.0));
  tpu_val_t p = tpu_nn_div(b, e, tpu_b_broadcast_in_dim(b, safe, 5, sa.dims, keep));
  int64_t pb[2] = {0, 1}, vb[2] = {0, 2}, pc = 4, vc = 1;
  tpu_val_t o = tpu_b_dot_general(b, p, v4, 2, pb, vb, 1, &pc, &vc, TPU_F32); /* (B, Hk, Lq, G, D) */
  outs[0] = tpu_va_q_out(b, o, &t);
  outs[1] = tpu_va_lse_out(b, lse, &t);
  int64_t two = 2;
  outs[2] = tpu_nn_zeros(b, TPU_U64, 1, &two);
  outs[3] = tpu_va_empty(b, TPU_U64);
  outs[4] = tpu_va_empty(b, t.dtype);
  *nouts = 5;
  return tpu_b_take_error(b);
}

/* _flash_attention_backward(grad_out, q, k, v, out, logsumexp, cum_seq_q,
 * cum_seq_k, max_q, max_k, dropout_p, is_causal, rng_state, unused, *, scale?,
 * window_size_left?, window_size_right?) -> (grad_q, grad_k, grad_v).
 * With P = exp(s - lse) (masked), dV = P^T dO, dP = dO V^T,
 * dS = P * (dP - rowsum(dO * O)) * scale, dQ = dS K, dK = dS^T Q. */
static tpu_status_t* tpu_lower__flash_attention_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                         tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_va_t t;
  if (!tpu_va_setup(b, op, &tpu_va_bwd, &t)) return tpu_b_take_error(b);
  tpu_val_t mask, q5 = tpu_va_q5(b, op, 1, &t), k4 = tpu_va_kv4(b, op, 2, &t), v4 = tpu_va_kv4(b, op, 3, &t);
  tpu_val_t s = tpu_va_scores(b, q5, k4, &t, tpu_va_mask(b, op, &t), &mask);
  tpu_val_t p = tpu_b_unary(b, "stablehlo.exponential", tpu_nn_sub(b, s, tpu_va_lse_in(b, op, 5, &t)));
  p = tpu_b_select(b, mask, p, tpu_ops_like(b, p, 0.0));
  int64_t d5[5] = {t.b, t.lq, t.hk, t.g, t.d};
  tpu_val_t g5 = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), TPU_F32), 5, d5);
  tpu_val_t o5 = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 4), TPU_F32), 5, d5);
  /* dV (B, Hk, Lk, D): contract P's (Lq, G) with dO's */
  int64_t pb[2] = {0, 1}, gb[2] = {0, 2}, pc[2] = {2, 3}, gc[2] = {1, 3};
  tpu_val_t dv = tpu_b_dot_general(b, p, g5, 2, pb, gb, 2, pc, gc, TPU_F32);
  /* dP (B, Hk, Lq, G, Lk) */
  int64_t g5b[2] = {0, 2}, vb[2] = {0, 2}, g5c = 4, vc = 3;
  tpu_val_t dp = tpu_b_dot_general(b, g5, v4, 2, g5b, vb, 1, &g5c, &vc, TPU_F32);
  int64_t last = 4, map[4] = {0, 2, 1, 3};
  tpu_val_t rows = tpu_nn_sum(b, tpu_nn_mul(b, g5, o5), 1, &last); /* (B, Lq, Hk, G) */
  const tpu_aval_t sa = *tpu_b_aval(b, dp);
  tpu_val_t ds = tpu_nn_mul(b, p, tpu_nn_sub(b, dp, tpu_b_broadcast_in_dim(b, rows, 5, sa.dims, map)));
  ds = tpu_nn_mulc(b, ds, t.scale);
  /* dQ (B, Hk, Lq, G, D): contract dS's Lk with K's */
  int64_t db[2] = {0, 1}, kb[2] = {0, 2}, dc = 4, kc = 1;
  tpu_val_t dq = tpu_b_dot_general(b, ds, k4, 2, db, kb, 1, &dc, &kc, TPU_F32);
  /* dK (B, Hk, Lk, D): contract dS's (Lq, G) with Q's */
  int64_t qb[2] = {0, 2}, dsc[2] = {2, 3}, qc[2] = {1, 3};
  tpu_val_t dk = tpu_b_dot_general(b, ds, q5, 2, db, qb, 2, dsc, qc, TPU_F32);
  outs[0] = tpu_va_q_out(b, dq, &t);
  outs[1] = tpu_va_kv_out(b, dk, &t);
  outs[2] = tpu_va_kv_out(b, dv, &t);
  *nouts = 3;
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_nn_varlen[] = {
    {"_flash_attention_forward", tpu_lower__flash_attention_forward},
    {"_flash_attention_backward", tpu_lower__flash_attention_backward},
    {NULL, NULL},
};
