/* Lowerings: nn_models family — CTC loss (_ctc_loss, _ctc_loss_backward), the
 * loss of CTC speech heads (wav2vec2, hubert, ...), following ATen's CPU kernel.
 *
 * The lengths are int lists, hence static: they join the cache key and every
 * per-sequence bound becomes a constant vector. Labels are extended with blanks
 * (l'[b, s], s < L = 2 * max_target_length + 1: blank at even s, target (s-1)/2 at
 * odd s) and the log-probabilities of those labels gathered once, lpe[t, b, s].
 * The alpha recursion (forward) and the beta recursion (backward) are
 * stablehlo.while loops over t carrying one [B, L] row; everything else is
 * vectorised. Log-space sums use ATen's form: m = max (0 when -inf), then
 * log(sum exp(x - m)) + m. The gradient is ATen's: exp(lp) - exp(lcab + nll - lp)
 * times the incoming gradient for t < input_length, 0 after, where lcab[t, b, c]
 * is the log of sum over s with l'[b, s] = c of alpha * beta; zero_infinity zeroes
 * the gradient of sequences whose loss is infinite. float32/float64 like ATen's CPU
 * kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn_models.h"

#define TPU_CTC_MAX_CARRY 8

typedef struct tpu_ctc {
  int64_t T, B, C, S, L; /* S: max target length, L = 2S + 1 */
  int64_t blank;
  tpu_dtype_t dt;
  int64_t* il; /* [B] input lengths, target lengths, offsets of each target in the flat targets */
  int64_t* tl;
  int64_t* off;
} tpu_ctc_t;

static void tpu_ctc_free(tpu_ctc_t* c) { free(c->il); }

/* Reads int list arg i of exactly B entries into out (non-negative). */
static bool tpu_ctc_lengths(tpu_builder_t* b, const tpu_op_t* op, int i, const char* what, tpu_ctc_t* c, int64_t* out) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || a->kind != TPU_ARG_INT_LIST) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: %s as a tensor is not supported on tpu (give a list of ints)",
               tpu_op_name(op), what);
    return false;
  }
  if (a->u.list.n != c->B || tpu_op_ints(op, i, out, (int)c->B) != c->B) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be of size batch_size", what);
    return false;
  }
  for (int64_t k = 0; k < c->B; ++k)
    if (out[k] < 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be non-negative, but got %" PRId64, what, out[k]);
      return false;
    }
  return true;
}

/* log_probs [T, B, C] float32/float64, integer targets, blank in range. */
static bool tpu_ctc_tensors(tpu_builder_t* b, const tpu_op_t* op, int ilp, int itg, int iblank, tpu_ctc_t* c) {
  tpu_aval_t lp = tpu_op_aval(op, ilp), tg = tpu_op_aval(op, itg);
  if (tpu_op_kind(op, ilp) != TPU_ARG_TENSOR || lp.rank != 3) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a 3-D log_probs tensor (T, N, C)", tpu_op_name(op));
    return false;
  }
  if (lp.dtype != TPU_F32 && lp.dtype != TPU_F64) {
    TPU_B_FAIL(b, tpu_dtype_is_float(lp.dtype) ? TPU_UNIMPLEMENTED : TPU_INVALID_ARGUMENT,
               "\"ctc_loss_cpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(lp.dtype));
    return false;
  }
  if (tpu_op_kind(op, itg) != TPU_ARG_TENSOR || (tg.dtype != TPU_I64 && tg.dtype != TPU_I32) || tg.rank < 1 ||
      tg.rank > 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: targets must be a 1-D or 2-D tensor of int32 or int64",
               tpu_op_name(op));
    return false;
  }
  c->T = lp.dims[0], c->B = lp.dims[1], c->C = lp.dims[2], c->dt = lp.dtype;
  c->blank = tpu_op_int(op, iblank, 0);
  if (c->blank < 0 || c->blank >= c->C) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "blank must be in label range");
    return false;
  }
  return true;
}

/* Targets layout: padded [B, >= S] or the B targets concatenated [sum(tl)]. */
static bool tpu_ctc_layout(tpu_builder_t* b, const tpu_op_t* op, int itg, tpu_ctc_t* c) {
  tpu_aval_t tg = tpu_op_aval(op, itg);
  int64_t pos = 0;
  c->S = 0;
  for (int64_t k = 0; k < c->B; ++k) {
    if (c->il[k] > c->T) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected input_lengths to have value at most %" PRId64 ", but got value %"
                 PRId64 " (while checking arguments for ctc_loss_cpu)", c->T, c->il[k]);
      return false;
    }
    c->S = c->tl[k] > c->S ? c->tl[k] : c->S;
    c->off[k] = tg.rank == 2 ? k * tg.dims[1] : pos;
    pos += c->tl[k];
  }
  c->L = 2 * c->S + 1;
  if (tg.rank == 2 && (tg.dims[0] != c->B || tg.dims[1] < c->S)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected tensor to have size at least %" PRId64 " at dimension 1, but got "
               "size %" PRId64 " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)", c->S,
               tg.dims[1]);
    return false;
  }
  if (tg.rank == 1 && tg.dims[0] != pos) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected tensor to have size %" PRId64 " at dimension 0, but got size %"
               PRId64 " for argument #2 'targets' (while checking arguments for ctc_loss_cpu)", pos, tg.dims[0]);
    return false;
  }
  return true;
}

/* Parses and checks the arguments shared by forward and backward. */
static bool tpu_ctc_parse(tpu_builder_t* b, const tpu_op_t* op, int ilp, int itg, int iil, int iblank, tpu_ctc_t* c) {
  memset(c, 0, sizeof(*c));
  if (!tpu_ctc_tensors(b, op, ilp, itg, iblank, c)) return false;
  c->il = calloc((size_t)(3 * c->B + 1), sizeof(int64_t));
  if (!c->il) {
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "%s: out of host memory", tpu_op_name(op));
    return false;
  }
  c->tl = c->il + c->B, c->off = c->tl + c->B;
  return tpu_ctc_lengths(b, op, iil, "input_lengths", c, c->il) &&
         tpu_ctc_lengths(b, op, iil + 1, "target_lengths", c, c->tl) && tpu_ctc_layout(b, op, itg, c);
}

/* ------------------------------------------------------------------ values */

/* A [n] i64 constant (n >= 1). */
static tpu_val_t tpu_ctc_vec(tpu_builder_t* b, int64_t n, const int64_t* v) {
  size_t cap = (size_t)n * 24 + 96;
  char* attrs = malloc(cap);
  if (!attrs) {
    TPU_B_FAIL(b, TPU_RESOURCE_EXHAUSTED, "ctc_loss: out of host memory");
    return TPU_NOVAL;
  }
  int w = snprintf(attrs, cap, "value = dense<[");
  for (int64_t k = 0; k < n; ++k) w += snprintf(attrs + w, cap - (size_t)w, "%s%" PRId64, k ? ", " : "", v[k]);
  snprintf(attrs + w, cap - (size_t)w, "]> : tensor<%" PRId64 "xi64>", n);
  tpu_aval_t a = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t r = tpu_b_op1(b, "stablehlo.constant", 0, NULL, attrs, &a);
  free(attrs);
  return r;
}

/* A per-sequence constant v[B] broadcast to [B, L] (scale * v + add). */
static tpu_val_t tpu_ctc_rows(tpu_builder_t* b, const tpu_ctc_t* c, const int64_t* v, int64_t scale, int64_t add) {
  tpu_aval_t bl = tpu_aval_make(TPU_I64, 2, (int64_t[]){c->B, c->L});
  tpu_val_t x = tpu_b_broadcast_in_dim(b, tpu_ctc_vec(b, c->B, v), 2, bl.dims, (int64_t[]){0});
  x = tpu_b_binary(b, "stablehlo.multiply", x, tpu_b_full(b, &bl, (double)scale));
  return tpu_b_binary(b, "stablehlo.add", x, tpu_b_full(b, &bl, (double)add));
}

static tpu_val_t tpu_ctc_s(tpu_builder_t* b, const tpu_ctc_t* c) {
  tpu_aval_t bl = tpu_aval_make(TPU_I64, 2, (int64_t[]){c->B, c->L});
  return tpu_b_iota(b, &bl, 1);
}

static tpu_val_t tpu_ctc_ninf(tpu_builder_t* b, tpu_val_t like) { return tpu_ops_like(b, like, -INFINITY); }

/* v[b] == 0 for a per-sequence constant, as [B] i1. */
static tpu_val_t tpu_ctc_is_zero(tpu_builder_t* b, const tpu_ctc_t* c, const int64_t* v) {
  tpu_val_t x = tpu_ctc_vec(b, c->B, v);
  return tpu_b_compare(b, "EQ", x, tpu_ops_like(b, x, 0.0));
}

/* Extended labels l'[b, s] ([B, L] i64) from targets arg itg. */
static tpu_val_t tpu_ctc_ext(tpu_builder_t* b, tpu_op_t* op, int itg, const tpu_ctc_t* c) {
  tpu_aval_t bl = tpu_aval_make(TPU_I64, 2, (int64_t[]){c->B, c->L});
  tpu_val_t blank = tpu_b_full(b, &bl, (double)c->blank);
  tpu_val_t tg = tpu_b_convert(b, tpu_op_tensor(b, op, itg), TPU_I64);
  if (c->S == 0) return blank;
  tpu_aval_t ta = *tpu_b_aval(b, tg);
  int64_t n = tpu_aval_numel(&ta);
  tg = tpu_b_reshape(b, tg, 1, &n);
  tpu_val_t s = tpu_ctc_s(b, c), one = tpu_b_full(b, &bl, 1.0), two = tpu_b_full(b, &bl, 2.0);
  tpu_val_t j = tpu_b_binary(b, "stablehlo.divide", tpu_b_binary(b, "stablehlo.subtract", s, one), two);
  tpu_val_t odd = tpu_b_compare(b, "EQ", tpu_b_binary(b, "stablehlo.remainder", s, two), one);
  tpu_val_t lab = tpu_b_binary(b, "stablehlo.and", odd, tpu_b_compare(b, "LT", j, tpu_ctc_rows(b, c, c->tl, 1, 0)));
  tpu_val_t pos = tpu_b_binary(b, "stablehlo.add", tpu_ctc_rows(b, c, c->off, 1, 0), j);
  pos = tpu_b_select(b, lab, pos, tpu_b_full(b, &bl, 0.0));
  int64_t idims[3] = {c->B, c->L, 1};
  tpu_gather_dims_t gd = {0, NULL, 1, (int64_t[]){0}, 1, (int64_t[]){0}, 2, (int64_t[]){1}};
  tpu_val_t got = tpu_b_gather(b, tg, tpu_b_reshape(b, pos, 3, idims), &gd, &bl);
  return tpu_b_select(b, lab, got, blank);
}

/* lpe[t, b, s] = log_probs[t, b, l'[b, s]] as [T, B, L]. */
static tpu_val_t tpu_ctc_lpe(tpu_builder_t* b, tpu_val_t lp, tpu_val_t ext, const tpu_ctc_t* c) {
  tpu_aval_t bl1 = tpu_aval_make(TPU_I64, 3, (int64_t[]){c->B, c->L, 1});
  tpu_val_t idx[2] = {tpu_b_iota(b, &bl1, 0), tpu_b_reshape(b, ext, 3, bl1.dims)};
  tpu_val_t ind = tpu_b_concat(b, 2, idx, 2);
  tpu_gather_dims_t gd = {1, (int64_t[]){2}, 2, (int64_t[]){1, 2}, 2, (int64_t[]){1, 2}, 2,
                          (int64_t[]){c->T, 1, 1}};
  tpu_aval_t out = tpu_aval_make(c->dt, 3, (int64_t[]){c->B, c->L, c->T});
  tpu_val_t g = tpu_b_gather(b, lp, ind, &gd, &out);
  return tpu_b_transpose(b, g, (int64_t[]){2, 0, 1});
}

/* x shifted along dim 1 by k (out[s] = x[s - k]), `fill` entering. */
static tpu_val_t tpu_ctc_shift(tpu_builder_t* b, tpu_val_t x, int64_t k, double fill) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  int64_t lo[2] = {0, k}, hi[2] = {0, -k};
  return tpu_b_pad(b, x, tpu_b_const(b, t, fill), lo, hi, NULL);
}

/* log(exp(x) + exp(y) + exp(z)) in ATen's form (z may be TPU_NOVAL: two terms). */
static tpu_val_t tpu_ctc_lse(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, tpu_val_t z) {
  tpu_val_t m = tpu_b_binary(b, "stablehlo.maximum", x, y);
  if (z != TPU_NOVAL) m = tpu_b_binary(b, "stablehlo.maximum", m, z);
  m = tpu_b_select(b, tpu_b_compare(b, "EQ", m, tpu_ctc_ninf(b, m)), tpu_ops_like(b, m, 0.0), m);
  tpu_val_t e = tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.exponential",
                                                              tpu_b_binary(b, "stablehlo.subtract", x, m)),
                             tpu_b_unary(b, "stablehlo.exponential", tpu_b_binary(b, "stablehlo.subtract", y, m)));
  if (z != TPU_NOVAL)
    e = tpu_b_binary(b, "stablehlo.add", e,
                     tpu_b_unary(b, "stablehlo.exponential", tpu_b_binary(b, "stablehlo.subtract", z, m)));
  return tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.log", e), m);
}

/* Row t of a [T, B, L] value as [B, L] (t: 0-d i32). */
static tpu_val_t tpu_ctc_row(tpu_builder_t* b, tpu_val_t x, tpu_val_t t, const tpu_ctc_t* c) {
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0);
  tpu_val_t st[3] = {t, z, z};
  return tpu_b_reshape(b, tpu_b_dynamic_slice(b, x, st, (int64_t[]){1, c->B, c->L}), 2, (int64_t[]){c->B, c->L});
}

static tpu_val_t tpu_ctc_put_row(tpu_builder_t* b, tpu_val_t x, tpu_val_t row, tpu_val_t t, const tpu_ctc_t* c) {
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0);
  tpu_val_t st[3] = {t, z, z};
  return tpu_b_dynamic_update_slice(b, x, tpu_b_reshape(b, row, 3, (int64_t[]){1, c->B, c->L}), st);
}

/* t (0-d i32) broadcast to [B, L] i64, to compare with per-sequence bounds. */
static tpu_val_t tpu_ctc_t_rows(tpu_builder_t* b, tpu_val_t t, const tpu_ctc_t* c) {
  tpu_val_t t64 = tpu_b_convert(b, t, TPU_I64);
  return tpu_b_broadcast_in_dim(b, t64, 2, (int64_t[]){c->B, c->L}, NULL);
}

/* ------------------------------------------------------------------- loops */

/* The body of a loop over t: reads the carry `in`, writes `out` (same avals). */
typedef void (*tpu_ctc_body_fn)(tpu_builder_t* b, const tpu_ctc_t* c, tpu_val_t t, const tpu_val_t* in,
                                tpu_val_t* out);

/* for k in [0, n): t = first + step * k; carry = body(t, carry). */
static void tpu_ctc_loop(tpu_builder_t* b, const tpu_ctc_t* c, int64_t first, int64_t step, int64_t n, int nc,
                         const tpu_val_t* init, tpu_ctc_body_fn body, tpu_val_t* outs) {
  for (int i = 0; i < nc; i++) outs[i] = init[i];
  if (!tpu_b_ok(b) || n <= 0) return;
  tpu_aval_t av[TPU_CTC_MAX_CARRY + 1];
  tpu_val_t ins[TPU_CTC_MAX_CARRY + 1], args[TPU_CTC_MAX_CARRY + 1], next[TPU_CTC_MAX_CARRY + 1];
  tpu_val_t res[TPU_CTC_MAX_CARRY + 1];
  av[0] = tpu_aval_make(TPU_I32, 0, NULL);
  ins[0] = tpu_b_const_i(b, TPU_I32, 0);
  for (int i = 0; i < nc; i++) av[i + 1] = *tpu_b_aval(b, init[i]), ins[i + 1] = init[i];
  char* regions[2];
  tpu_b_region_begin(b, nc + 1, av, args);
  tpu_val_t go = tpu_b_compare(b, "LT", args[0], tpu_b_const_i(b, TPU_I32, n));
  regions[0] = tpu_b_region_end(b, 1, &go);
  tpu_b_region_begin(b, nc + 1, av, args);
  next[0] = tpu_b_binary(b, "stablehlo.add", args[0], tpu_b_const_i(b, TPU_I32, 1));
  tpu_val_t t = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.multiply", args[0],
                                                               tpu_b_const_i(b, TPU_I32, step)),
                             tpu_b_const_i(b, TPU_I32, first));
  body(b, c, t, args + 1, next + 1);
  regions[1] = tpu_b_region_end(b, nc + 1, next);
  if (!regions[0] || !regions[1]) {
    free(regions[0]);
    free(regions[1]);
    if (tpu_b_ok(b)) TPU_B_FAIL(b, TPU_INTERNAL, "ctc_loss: while region failed");
    return;
  }
  tpu_b_op(b, "stablehlo.while", nc + 1, ins, 2, regions, NULL, nc + 1, av, res);
  for (int i = 0; i < nc; i++) outs[i] = res[i + 1];
}

/* Alpha step. Carry: alpha [B, L], la [T, B, L], lpe, skip (i1), valid (i1), il rows. */
static void tpu_ctc_alpha_step(tpu_builder_t* b, const tpu_ctc_t* c, tpu_val_t t, const tpu_val_t* in,
                               tpu_val_t* out) {
  tpu_val_t alpha = in[0], ninf = tpu_ctc_ninf(b, alpha);
  tpu_val_t a1 = tpu_ctc_shift(b, alpha, 1, -INFINITY);
  tpu_val_t a2 = tpu_b_select(b, in[3], tpu_ctc_shift(b, alpha, 2, -INFINITY), ninf);
  tpu_val_t nw = tpu_b_binary(b, "stablehlo.add", tpu_ctc_lse(b, alpha, a1, a2), tpu_ctc_row(b, in[2], t, c));
  nw = tpu_b_select(b, in[4], nw, ninf);
  tpu_val_t live = tpu_b_compare(b, "LT", tpu_ctc_t_rows(b, t, c), in[5]);
  out[0] = tpu_b_select(b, live, nw, alpha);
  out[1] = tpu_ctc_put_row(b, in[1], nw, t, c);
  for (int i = 2; i < 6; i++) out[i] = in[i];
}

/* Beta step (t descending). Carry: beta, lb [T, B, L], lpe, skip2, valid, ends (i1), il rows. */
static void tpu_ctc_beta_step(tpu_builder_t* b, const tpu_ctc_t* c, tpu_val_t t, const tpu_val_t* in,
                              tpu_val_t* out) {
  tpu_val_t beta = in[0], ninf = tpu_ctc_ninf(b, beta), lpe_t = tpu_ctc_row(b, in[2], t, c);
  tpu_val_t b1 = tpu_ctc_shift(b, beta, -1, -INFINITY);
  tpu_val_t b2 = tpu_b_select(b, in[3], tpu_ctc_shift(b, beta, -2, -INFINITY), ninf);
  tpu_val_t rec = tpu_b_select(b, in[4], tpu_b_binary(b, "stablehlo.add", tpu_ctc_lse(b, beta, b1, b2), lpe_t), ninf);
  tpu_val_t init = tpu_b_select(b, in[5], lpe_t, ninf);
  tpu_val_t tt = tpu_ctc_t_rows(b, t, c);
  tpu_val_t last = tpu_b_binary(b, "stablehlo.subtract", in[6], tpu_ops_like(b, in[6], 1.0));
  tpu_val_t nw = tpu_b_select(b, tpu_b_compare(b, "EQ", tt, last), init,
                              tpu_b_select(b, tpu_b_compare(b, "LT", tt, last), rec, ninf));
  out[0] = nw;
  out[1] = tpu_ctc_put_row(b, in[1], nw, t, c);
  for (int i = 2; i < 7; i++) out[i] = in[i];
}

/* --------------------------------------------------------------- lowerings */

/* s < 2 * tl + 1 (the extended label exists), as [B, L] i1. */
static tpu_val_t tpu_ctc_valid(tpu_builder_t* b, const tpu_ctc_t* c) {
  return tpu_b_compare(b, "LT", tpu_ctc_s(b, c), tpu_ctc_rows(b, c, c->tl, 2, 1));
}

/* s is 2 * tl or 2 * tl - 1: where the paths end. */
static tpu_val_t tpu_ctc_ends(tpu_builder_t* b, const tpu_ctc_t* c) {
  tpu_val_t s = tpu_ctc_s(b, c);
  return tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "EQ", s, tpu_ctc_rows(b, c, c->tl, 2, 0)),
                      tpu_b_compare(b, "EQ", s, tpu_ctc_rows(b, c, c->tl, 2, -1)));
}

/* nll[b] from the final alphas; a sequence of input length 0 has loss 0 (empty
 * target) or +inf. */
static tpu_val_t tpu_ctc_nll(tpu_builder_t* b, tpu_val_t alpha, const tpu_ctc_t* c) {
  tpu_val_t x = tpu_b_select(b, tpu_ctc_ends(b, c), alpha, tpu_ctc_ninf(b, alpha));
  int64_t d1 = 1;
  tpu_val_t m = tpu_b_reduce(b, x, tpu_b_const(b, c->dt, -INFINITY), 1, &d1, "stablehlo.maximum");
  m = tpu_b_select(b, tpu_b_compare(b, "EQ", m, tpu_ctc_ninf(b, m)), tpu_ops_like(b, m, 0.0), m);
  tpu_val_t mb = tpu_b_broadcast_in_dim(b, m, 2, (int64_t[]){c->B, c->L}, (int64_t[]){0});
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential", tpu_b_binary(b, "stablehlo.subtract", x, mb));
  tpu_val_t s = tpu_b_reduce(b, e, tpu_b_const(b, c->dt, 0.0), 1, &d1, "stablehlo.add");
  tpu_val_t nll = tpu_b_unary(b, "stablehlo.negate",
                              tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.log", s), m));
  tpu_val_t zero = tpu_ops_like(b, nll, 0.0);
  tpu_val_t empty = tpu_b_select(b, tpu_ctc_is_zero(b, c, c->tl), zero, tpu_ops_like(b, nll, INFINITY));
  return tpu_b_select(b, tpu_ctc_is_zero(b, c, c->il), empty, nll);
}

/* The alphas of every step, [T, B, L], and the final row per sequence. */
static void tpu_ctc_alphas(tpu_builder_t* b, tpu_val_t lpe, tpu_val_t ext, const tpu_ctc_t* c, tpu_val_t* out_la,
                           tpu_val_t* out_alpha) {
  tpu_val_t valid = tpu_ctc_valid(b, c), s = tpu_ctc_s(b, c);
  tpu_val_t z = tpu_b_const_i(b, TPU_I32, 0);
  tpu_val_t first = tpu_ctc_row(b, lpe, z, c), ninf = tpu_ctc_ninf(b, first);
  tpu_val_t start = tpu_b_binary(b, "stablehlo.and", valid, tpu_b_compare(b, "LT", s, tpu_ops_like(b, s, 2.0)));
  tpu_val_t alpha0 = tpu_b_select(b, start, first, ninf);
  tpu_aval_t tbl = tpu_aval_make(c->dt, 3, (int64_t[]){c->T, c->B, c->L});
  tpu_val_t la = tpu_ctc_put_row(b, tpu_b_full(b, &tbl, -INFINITY), alpha0, z, c);
  /* skip s-2 -> s when both are labels and differ (blanks never differ from blanks) */
  tpu_val_t skip = tpu_b_compare(b, "NE", tpu_ctc_shift(b, ext, 2, (double)c->blank), ext);
  tpu_val_t carry[6] = {alpha0, la, lpe, skip, valid, tpu_ctc_rows(b, c, c->il, 1, 0)}, res[6];
  tpu_ctc_loop(b, c, 1, 1, c->T - 1, 6, carry, tpu_ctc_alpha_step, res);
  *out_la = res[1];
  *out_alpha = res[0];
}

/* _ctc_loss(log_probs, targets, int[] input_lengths, int[] target_lengths, int blank=0,
 *           bool zero_infinity=False) -> (neg_log_likelihood [B], log_alpha [B, T, L]) */
tpu_status_t* tpu_lower_ctc_loss(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_ctc_t c;
  if (!tpu_ctc_parse(b, op, 0, 1, 2, 4, &c)) return tpu_ctc_free(&c), NULL;
  tpu_val_t lp = tpu_op_tensor(b, op, 0);
  tpu_aval_t nl = tpu_aval_make(c.dt, 1, &c.B), la_av = tpu_aval_make(c.dt, 3, (int64_t[]){c.B, c.T, c.L});
  if (c.B == 0 || c.T == 0) { /* no steps: every loss is 0 (empty target) or +inf */
    outs[0] = tpu_b_full(b, &nl, 0.0);
    if (c.B > 0)
      outs[0] = tpu_b_select(b, tpu_ctc_is_zero(b, &c, c.tl), outs[0], tpu_b_full(b, &nl, INFINITY));
    outs[1] = tpu_b_full(b, &la_av, -INFINITY);
  } else {
    tpu_val_t ext = tpu_ctc_ext(b, op, 1, &c), la, alpha;
    tpu_ctc_alphas(b, tpu_ctc_lpe(b, lp, ext, &c), ext, &c, &la, &alpha);
    outs[0] = tpu_ctc_nll(b, alpha, &c);
    outs[1] = tpu_b_transpose(b, la, (int64_t[]){1, 0, 2});
  }
  *nouts = 2;
  tpu_ctc_free(&c);
  return NULL;
}

/* lcab[t, b, c] = log sum over s with l'[b, s] = c of exp(la + lb), as [T, B, C]:
 * a one-hot contraction of exp(la + lb - m) with the per-(t, b) max m added back. */
static tpu_val_t tpu_ctc_lcab(tpu_builder_t* b, tpu_val_t la, tpu_val_t lb, tpu_val_t ext, const tpu_ctc_t* c) {
  tpu_val_t ab = tpu_b_binary(b, "stablehlo.add", la, lb);
  int64_t d2 = 2;
  tpu_val_t m = tpu_b_reduce(b, ab, tpu_b_const(b, c->dt, -INFINITY), 1, &d2, "stablehlo.maximum");
  m = tpu_b_select(b, tpu_b_compare(b, "EQ", m, tpu_ctc_ninf(b, m)), tpu_ops_like(b, m, 0.0), m);
  tpu_val_t e = tpu_b_unary(b, "stablehlo.exponential",
                            tpu_b_binary(b, "stablehlo.subtract", ab,
                                         tpu_b_broadcast_in_dim(b, m, 3, (int64_t[]){c->T, c->B, c->L},
                                                                (int64_t[]){0, 1})));
  tpu_aval_t blc = tpu_aval_make(TPU_I64, 3, (int64_t[]){c->B, c->L, c->C});
  tpu_val_t cls = tpu_b_iota(b, &blc, 2);
  tpu_val_t ext3 = tpu_b_broadcast_in_dim(b, ext, 3, blc.dims, (int64_t[]){0, 1});
  blc.dtype = c->dt;
  tpu_val_t onehot = tpu_b_select(b, tpu_b_compare(b, "EQ", cls, ext3), tpu_b_full(b, &blc, 1.0),
                                  tpu_b_full(b, &blc, 0.0));
  /* [T, B, L] x [B, L, C] batched over B -> [B, T, C] */
  tpu_val_t sums = tpu_b_dot_general(b, e, onehot, 1, (int64_t[]){1}, (int64_t[]){0}, 1, (int64_t[]){2},
                                     (int64_t[]){1}, c->dt);
  sums = tpu_b_transpose(b, sums, (int64_t[]){1, 0, 2});
  tpu_val_t mc = tpu_b_broadcast_in_dim(b, m, 3, (int64_t[]){c->T, c->B, c->C}, (int64_t[]){0, 1});
  return tpu_b_binary(b, "stablehlo.add", tpu_b_unary(b, "stablehlo.log", sums), mc);
}

/* The betas of every step, [T, B, L]. */
static tpu_val_t tpu_ctc_betas(tpu_builder_t* b, tpu_val_t lpe, tpu_val_t ext, const tpu_ctc_t* c) {
  tpu_aval_t bl = tpu_aval_make(c->dt, 2, (int64_t[]){c->B, c->L});
  tpu_aval_t tbl = tpu_aval_make(c->dt, 3, (int64_t[]){c->T, c->B, c->L});
  tpu_val_t ends = tpu_b_binary(b, "stablehlo.and", tpu_ctc_ends(b, c), tpu_ctc_valid(b, c));
  tpu_val_t skip2 = tpu_b_compare(b, "NE", tpu_ctc_shift(b, ext, -2, (double)c->blank), ext);
  tpu_val_t carry[7] = {tpu_b_full(b, &bl, -INFINITY), tpu_b_full(b, &tbl, -INFINITY), lpe, skip2,
                        tpu_ctc_valid(b, c), ends, tpu_ctc_rows(b, c, c->il, 1, 0)};
  tpu_val_t res[7];
  tpu_ctc_loop(b, c, c->T - 1, -1, c->T, 7, carry, tpu_ctc_beta_step, res);
  return res[1];
}

/* grad = (exp(lp) - exp(lcab + nll - lp)) * grad_out for t < input_length, else 0;
 * 0 for the whole sequence when zero_infinity and its loss is infinite. */
static tpu_val_t tpu_ctc_grad(tpu_builder_t* b, tpu_op_t* op, tpu_val_t lp, tpu_val_t lcab, const tpu_ctc_t* c,
                              bool zero_inf) {
  int64_t tbc[3] = {c->T, c->B, c->C};
  tpu_val_t gout = tpu_b_convert(b, tpu_op_tensor(b, op, 0), c->dt);
  tpu_val_t nll = tpu_b_convert(b, tpu_op_tensor(b, op, 5), c->dt);
  tpu_val_t nll3 = tpu_b_broadcast_in_dim(b, nll, 3, tbc, (int64_t[]){1});
  tpu_val_t occ = tpu_b_unary(b, "stablehlo.exponential",
                              tpu_b_binary(b, "stablehlo.subtract", tpu_b_binary(b, "stablehlo.add", lcab, nll3), lp));
  tpu_val_t g = tpu_b_binary(b, "stablehlo.subtract", tpu_b_unary(b, "stablehlo.exponential", lp), occ);
  g = tpu_b_binary(b, "stablehlo.multiply", g, tpu_b_broadcast_in_dim(b, gout, 3, tbc, (int64_t[]){1}));
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 3, tbc);
  tpu_val_t il3 = tpu_b_broadcast_in_dim(b, tpu_ctc_vec(b, c->B, c->il), 3, tbc, (int64_t[]){1});
  tpu_val_t keep = tpu_b_compare(b, "LT", tpu_b_iota(b, &ia, 0), il3);
  if (zero_inf) {
    tpu_val_t fin = tpu_b_compare(b, "NE", nll3, tpu_ops_like(b, nll3, INFINITY));
    keep = tpu_b_binary(b, "stablehlo.and", keep, fin);
  }
  return tpu_b_select(b, keep, g, tpu_ops_like(b, g, 0.0));
}

/* _ctc_loss_backward(grad, log_probs, targets, int[] input_lengths, int[] target_lengths,
 *                    neg_log_likelihood, log_alpha, int blank, bool zero_infinity=False) */
tpu_status_t* tpu_lower_ctc_loss_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  tpu_ctc_t c;
  if (!tpu_ctc_parse(b, op, 1, 2, 3, 7, &c)) return tpu_ctc_free(&c), NULL;
  tpu_aval_t la_av = tpu_op_aval(op, 6);
  if (la_av.rank != 3 || la_av.dims[0] != c.B || la_av.dims[1] != c.T || la_av.dims[2] != c.L) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_ctc_loss_backward: log_alpha must be [N, T, 2 * max_target_length + 1]");
    return tpu_ctc_free(&c), NULL;
  }
  tpu_val_t lp = tpu_op_tensor(b, op, 1);
  tpu_aval_t lpa = tpu_op_aval(op, 1);
  if (c.B == 0 || c.T == 0) {
    outs[0] = tpu_b_full(b, &lpa, 0.0);
  } else {
    tpu_val_t ext = tpu_ctc_ext(b, op, 2, &c);
    tpu_val_t la = tpu_b_transpose(b, tpu_b_convert(b, tpu_op_tensor(b, op, 6), c.dt), (int64_t[]){1, 0, 2});
    tpu_val_t lpe = tpu_ctc_lpe(b, lp, ext, &c);
    tpu_val_t lcab = tpu_ctc_lcab(b, la, tpu_ctc_betas(b, lpe, ext, &c), ext, &c);
    outs[0] = tpu_ctc_grad(b, op, lp, lcab, &c, tpu_op_bool(op, 8, false));
  }
  *nouts = 1;
  tpu_ctc_free(&c);
  return NULL;
}
