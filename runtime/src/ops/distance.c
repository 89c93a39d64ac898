/* Lowerings: pairwise distances — _cdist_forward / _cdist_backward (torch.cdist
 * when it does not take the matmul route) and _pdist_forward / _pdist_backward
 * (torch.pdist).
 *
 * Both are written over the differences d = a - b of the pairs, reduced along
 * the feature dim M with the p-norm; p is a static float (part of the cache
 * key), so each program handles one norm. Gradients follow ATen's CPU kernels
 * (Distance.cpp), including their zero-distance and p < 1 conventions.
 *
 * pdist's pairs (i < j, row-major) are computed on the device from the flat
 * index k: i from the triangular-number formula (an f32 estimate corrected
 * exactly in i64, good far past any realistic N), so the program stays O(N^2 M)
 * work with no per-pair constants in its text. */
#include <math.h>

#include "index.h"
#include "nn.h"

/* ------------------------------------------------------------ the norms */

/* |x|, sign(x) and x^e elementwise (x of a float dtype). */
static tpu_val_t tpu_dist_abs(tpu_builder_t* b, tpu_val_t x) { return tpu_b_unary(b, "stablehlo.abs", x); }
static tpu_val_t tpu_dist_pow(tpu_builder_t* b, tpu_val_t x, double e) {
  return tpu_b_binary(b, "stablehlo.power", x, tpu_ops_like(b, x, e));
}

/* The p-norm of the differences d along their last dim. */
static tpu_val_t tpu_dist_norm(tpu_builder_t* b, tpu_val_t d, double p) {
  int64_t last = tpu_b_rank(b, d) - 1;
  tpu_dtype_t t = tpu_b_dtype(b, d);
  tpu_val_t zero = tpu_b_const(b, t, 0);
  if (p == 0) {
    tpu_val_t nz = tpu_b_convert(b, tpu_b_compare(b, "NE", d, tpu_ops_like(b, d, 0)), t);
    return tpu_b_reduce(b, nz, zero, 1, &last, "stablehlo.add");
  }
  tpu_val_t a = tpu_dist_abs(b, d);
  if (isinf(p)) return tpu_b_reduce(b, a, zero, 1, &last, "stablehlo.maximum");
  if (p == 1) return tpu_b_reduce(b, a, zero, 1, &last, "stablehlo.add");
  if (p == 2) return tpu_b_unary(b, "stablehlo.sqrt", tpu_b_reduce(b, tpu_nn_mul(b, d, d), zero, 1, &last, "stablehlo.add"));
  tpu_val_t s = tpu_b_reduce(b, tpu_dist_pow(b, a, p), zero, 1, &last, "stablehlo.add");
  return tpu_dist_pow(b, s, 1.0 / p);
}

/* d(dist)/d(a) * g for the differences d (..., M), their distance D and the
 * incoming gradient g (both broadcast to d's shape), as ATen's CPU kernel. */
static tpu_val_t tpu_dist_grad_term(tpu_builder_t* b, tpu_val_t d, tpu_val_t D, tpu_val_t g, double p) {
  tpu_val_t zero = tpu_ops_like(b, d, 0);
  if (p == 0) return zero;
  tpu_val_t sign = tpu_b_unary(b, "stablehlo.sign", d);
  if (p == 1) return tpu_nn_mul(b, g, sign);
  tpu_val_t a = tpu_dist_abs(b, d);
  if (isinf(p)) return tpu_b_select(b, tpu_b_compare(b, "EQ", a, D), tpu_nn_mul(b, g, sign), zero);
  tpu_val_t D0 = tpu_b_compare(b, "EQ", D, zero);
  tpu_val_t r;
  if (p == 2) {
    r = tpu_nn_div(b, tpu_nn_mul(b, g, d), D);
  } else if (p < 2) {
    r = tpu_nn_div(b, tpu_nn_mul(b, tpu_nn_mul(b, sign, tpu_dist_pow(b, a, p - 1)), g), tpu_dist_pow(b, D, p - 1));
    if (p < 1) D0 = tpu_b_binary(b, "stablehlo.or", D0, tpu_b_compare(b, "EQ", d, zero));
  } else {
    r = tpu_nn_div(b, tpu_nn_mul(b, tpu_nn_mul(b, d, tpu_dist_pow(b, a, p - 2)), g), tpu_dist_pow(b, D, p - 1));
  }
  return tpu_b_select(b, D0, zero, r);
}

/* Float dtype and p >= 0 checks with ATen's messages ("cdist" or "pdist"). */
static bool tpu_dist_check(tpu_builder_t* b, const char* api, const char* what, tpu_dtype_t t, double p) {
  if (!tpu_dtype_is_float(t)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s only supports floating-point dtypes, %s got: %s", api, what,
               tpu_dtype_name(t));
    return false;
  }
  if (t == TPU_F16 || t == TPU_BF16) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", api, t == TPU_F16 ? "Half" : "BFloat16");
    return false;
  }
  if (p < 0 || isnan(p)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s only supports non-negative p values", api);
    return false;
  }
  return true;
}

/* ---------------------------------------------------------------- cdist */

typedef struct tpu_cdist {
  tpu_aval_t x1, x2;
  tpu_aval_t pairs; /* (batch..., P, R, M): the broadcast difference shape */
  int nb;           /* batch rank of the result */
} tpu_cdist_t;

/* Shapes of x1 (…, P, M) and x2 (…, R, M) with batch dims broadcast; ATen's checks. */
static bool tpu_cdist_shapes(tpu_builder_t* b, const tpu_op_t* op, double p, tpu_cdist_t* c) {
  c->x1 = tpu_op_aval(op, 0);
  c->x2 = tpu_op_aval(op, 1);
  if (!tpu_dist_check(b, "cdist", "X1", c->x1.dtype, p) || !tpu_dist_check(b, "cdist", "X2", c->x2.dtype, p))
    return false;
  for (int k = 0; k < 2; k++) {
    const tpu_aval_t* x = k ? &c->x2 : &c->x1;
    if (x->rank < 2) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "cdist only supports at least 2D tensors, X%d got: %dD", k + 1, x->rank);
      return false;
    }
  }
  int64_t m1 = c->x1.dims[c->x1.rank - 1], m2 = c->x2.dims[c->x2.rank - 1];
  if (m1 != m2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "X1 and X2 must have the same number of columns. X1: %" PRId64 " X2: %" PRId64,
               m1, m2);
    return false;
  }
  tpu_aval_t b1 = tpu_aval_make(c->x1.dtype, c->x1.rank - 2, c->x1.dims), b2 = tpu_aval_make(c->x2.dtype, c->x2.rank - 2, c->x2.dims);
  c->nb = b1.rank > b2.rank ? b1.rank : b2.rank;
  c->pairs = tpu_aval_make(c->x1.dtype, 0, NULL);
  for (int i = 0; i < c->nb; i++) {
    int i1 = i - (c->nb - b1.rank), i2 = i - (c->nb - b2.rank);
    int64_t d1 = i1 >= 0 ? b1.dims[i1] : 1, d2 = i2 >= 0 ? b2.dims[i2] : 1;
    if (d1 != d2 && d1 != 1 && d2 != 1) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
                 "The size of tensor a (%" PRId64 ") must match the size of tensor b (%" PRId64
                 ") at non-singleton dimension %d",
                 d1, d2, i);
      return false;
    }
    c->pairs.dims[i] = d1 == 1 ? d2 : d1;
  }
  if (c->nb + 3 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "cdist: %d batch dims are more than tpu supports", c->nb);
    return false;
  }
  c->pairs.dims[c->nb] = c->x1.dims[c->x1.rank - 2];
  c->pairs.dims[c->nb + 1] = c->x2.dims[c->x2.rank - 2];
  c->pairs.dims[c->nb + 2] = m1;
  c->pairs.rank = c->nb + 3;
  return true;
}

/* x (batch…, rows, M) broadcast to the pair shape, its rows on pair dim `row_dim`. */
static tpu_val_t tpu_cdist_spread(tpu_builder_t* b, tpu_val_t x, const tpu_cdist_t* c, int row_dim) {
  int r = tpu_b_rank(b, x);
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < r - 2; i++) bd[i] = c->nb - (r - 2) + i;
  bd[r - 2] = row_dim;
  bd[r - 1] = c->nb + 2;
  return tpu_b_broadcast_in_dim(b, x, c->pairs.rank, c->pairs.dims, bd);
}

/* x1[..., :, None, :] - x2[..., None, :, :] in the pair shape. */
static tpu_val_t tpu_cdist_diff(tpu_builder_t* b, tpu_op_t* op, const tpu_cdist_t* c) {
  tpu_val_t a = tpu_cdist_spread(b, tpu_op_tensor(b, op, 0), c, c->nb);
  tpu_val_t d = tpu_cdist_spread(b, tpu_op_tensor(b, op, 1), c, c->nb + 1);
  return tpu_nn_sub(b, a, d);
}

/* _cdist_forward(x1, x2, p, compute_mode) */
static tpu_status_t* tpu_lower__cdist_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  double p = tpu_op_float(op, 2, 2.0);
  tpu_cdist_t c;
  if (!tpu_cdist_shapes(b, op, p, &c)) return tpu_b_take_error(b);
  outs[0] = tpu_dist_norm(b, tpu_cdist_diff(b, op, &c), p);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* A (batch…, P, R) value broadcast over the pair shape's feature dim. */
static tpu_val_t tpu_cdist_over_m(tpu_builder_t* b, tpu_val_t v, const tpu_cdist_t* c) {
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0; i < c->nb + 2; i++) bd[i] = i;
  return tpu_b_broadcast_in_dim(b, v, c->pairs.rank, c->pairs.dims, bd);
}

/* _cdist_backward(grad, x1, x2, p, cdist) -> grad_x1 (x1's shape; broadcast batch
 * dims summed back). */
static tpu_status_t* tpu_lower__cdist_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  double p = tpu_op_float(op, 3, 2.0);
  /* The pair shape is grad's (batch…, P, R) plus x1's feature dim. */
  tpu_cdist_t c;
  c.x1 = tpu_op_aval(op, 1);
  c.x2 = tpu_op_aval(op, 2);
  tpu_aval_t gx = tpu_op_aval(op, 0);
  if (!tpu_dist_check(b, "cdist", "X1", c.x1.dtype, p)) return tpu_b_take_error(b);
  c.nb = gx.rank - 2;
  if (c.nb < 0 || gx.rank + 1 > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_cdist_backward: unexpected grad of rank %d", gx.rank);
    return tpu_b_take_error(b);
  }
  c.pairs = tpu_aval_make(c.x1.dtype, c.nb + 3, gx.dims);
  c.pairs.dims[c.nb + 2] = c.x1.dims[c.x1.rank - 1];
  tpu_val_t a = tpu_cdist_spread(b, tpu_op_tensor(b, op, 1), &c, c.nb);
  tpu_val_t d = tpu_nn_sub(b, a, tpu_cdist_spread(b, tpu_op_tensor(b, op, 2), &c, c.nb + 1));
  tpu_val_t g = tpu_cdist_over_m(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), c.x1.dtype), &c);
  tpu_val_t D = tpu_cdist_over_m(b, tpu_b_convert(b, tpu_op_tensor(b, op, 4), c.x1.dtype), &c);
  tpu_val_t t = tpu_dist_grad_term(b, d, D, g, p);
  /* Sum over the x2 rows, then over batch dims x1 was broadcast along. */
  int64_t sum_dims[TPU_MAX_RANK];
  int ns = 0, lead = c.nb - (c.x1.rank - 2);
  for (int i = 0; i < c.nb; i++)
    if (i < lead || c.x1.dims[i - lead] == 1) sum_dims[ns++] = i;
  sum_dims[ns++] = c.nb + 1;
  tpu_val_t s = tpu_nn_sum(b, t, ns, sum_dims);
  outs[0] = tpu_b_reshape(b, s, c.x1.rank, c.x1.dims);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* ---------------------------------------------------------------- pdist */

/* The pair rows (i, j), i < j, of flat pair indices k = iota(T) for n rows (i64). */
static void tpu_pdist_pairs(tpu_builder_t* b, int64_t n, int64_t T, tpu_val_t* out_i, tpu_val_t* out_j) {
  tpu_aval_t ka = tpu_aval_make(TPU_I64, 1, &T);
  tpu_aval_t fa = tpu_aval_make(TPU_F32, 1, &T);
  tpu_val_t k = tpu_b_iota(b, &ka, 0);
  tpu_val_t two_n1 = tpu_b_full(b, &ka, (double)(2 * n - 1));
  /* i = floor(((2n-1) - sqrt((2n-1)^2 - 8k)) / 2), q computed exactly in i64. */
  tpu_val_t q = tpu_nn_sub(b, tpu_nn_mul(b, two_n1, two_n1), tpu_nn_mulc(b, k, 8));
  tpu_val_t root = tpu_b_unary(b, "stablehlo.sqrt", tpu_b_convert(b, q, TPU_F32));
  tpu_val_t est = tpu_b_unary(b, "stablehlo.floor",
                              tpu_nn_mulc(b, tpu_nn_sub(b, tpu_b_full(b, &fa, (double)(2 * n - 1)), root), 0.5));
  tpu_val_t i = tpu_b_convert(b, est, TPU_I64);
  /* start(r) = r (2n - r - 1) / 2: the flat index of pair (r, r + 1). */
  for (int step = 0; step < 2; step++) { /* the estimate is off by at most one either way */
    tpu_val_t si = tpu_b_binary(b, "stablehlo.divide", tpu_nn_mul(b, i, tpu_nn_sub(b, two_n1, i)), tpu_b_full(b, &ka, 2));
    tpu_val_t i1 = tpu_nn_addc(b, i, 1);
    tpu_val_t s1 = tpu_b_binary(b, "stablehlo.divide", tpu_nn_mul(b, i1, tpu_nn_sub(b, two_n1, i1)), tpu_b_full(b, &ka, 2));
    i = tpu_b_select(b, tpu_b_compare(b, "LT", k, si), tpu_nn_addc(b, i, -1), i);
    i = tpu_b_select(b, tpu_b_compare(b, "GE", k, s1), tpu_nn_addc(b, i, 1), i);
  }
  tpu_val_t si = tpu_b_binary(b, "stablehlo.divide", tpu_nn_mul(b, i, tpu_nn_sub(b, two_n1, i)), tpu_b_full(b, &ka, 2));
  *out_i = i;
  *out_j = tpu_nn_addc(b, tpu_nn_add(b, tpu_nn_sub(b, k, si), i), 1);
}

/* Checks self (N, M) for pdist; writes n and T = N (N - 1) / 2. */
static bool tpu_pdist_check(tpu_builder_t* b, const tpu_aval_t* x, double p, int64_t* n, int64_t* T) {
  if (x->rank != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "pdist only supports 2D tensors, got: %dD", x->rank);
    return false;
  }
  if (!tpu_dist_check(b, "pdist", "", x->dtype, p)) return false;
  *n = x->dims[0];
  *T = *n > 1 ? *n * (*n - 1) / 2 : 0;
  return true;
}

/* The differences x[i] - x[j] (T, M) of every pair, or NOVAL when T == 0. */
static tpu_val_t tpu_pdist_diff(tpu_builder_t* b, tpu_val_t x, int64_t n, int64_t T, tpu_val_t* out_i,
                                tpu_val_t* out_j) {
  tpu_pdist_pairs(b, n, T, out_i, out_j);
  return tpu_nn_sub(b, tpu_idx_select(b, x, 0, *out_i), tpu_idx_select(b, x, 0, *out_j));
}

/* _pdist_forward(self, p) */
static tpu_status_t* tpu_lower__pdist_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  double p = tpu_op_float(op, 1, 2.0);
  tpu_aval_t x = tpu_op_aval(op, 0);
  int64_t n, T;
  if (!tpu_pdist_check(b, &x, p, &n, &T)) return tpu_b_take_error(b);
  tpu_val_t xv = tpu_op_tensor(b, op, 0);
  *nouts = 1;
  if (T == 0) {
    int64_t none = 0;
    tpu_aval_t empty = tpu_aval_make(x.dtype, 1, &none);
    outs[0] = tpu_b_full(b, &empty, 0);
    return tpu_b_take_error(b);
  }
  tpu_val_t i, j;
  outs[0] = tpu_dist_norm(b, tpu_pdist_diff(b, xv, n, T, &i, &j), p);
  return tpu_b_take_error(b);
}

/* _pdist_backward(grad, self, p, pdist) -> grad_self: each pair's term added to
 * row i and subtracted from row j. */
static tpu_status_t* tpu_lower__pdist_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                               int* nouts) {
  (void)max_outs;
  double p = tpu_op_float(op, 2, 2.0);
  tpu_aval_t x = tpu_op_aval(op, 1);
  int64_t n, T;
  if (!tpu_pdist_check(b, &x, p, &n, &T)) return tpu_b_take_error(b);
  tpu_val_t zeros = tpu_b_full(b, &x, 0);
  *nouts = 1;
  if (T == 0 || p == 0) {
    outs[0] = zeros;
    return tpu_b_take_error(b);
  }
  tpu_val_t i, j;
  tpu_val_t d = tpu_pdist_diff(b, tpu_op_tensor(b, op, 1), n, T, &i, &j);
  tpu_aval_t da = *tpu_b_aval(b, d); /* a copy: the builder's avals move as it grows */
  int64_t bd0 = 0;
  tpu_val_t g = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), x.dtype), 2, da.dims, &bd0);
  tpu_val_t D = tpu_b_broadcast_in_dim(b, tpu_b_convert(b, tpu_op_tensor(b, op, 3), x.dtype), 2, da.dims, &bd0);
  tpu_val_t t = tpu_dist_grad_term(b, d, D, g, p);
  tpu_val_t acc = tpu_idx_put_along(b, zeros, 0, i, t, "stablehlo.add");
  outs[0] = tpu_idx_put_along(b, acc, 0, j, tpu_b_unary(b, "stablehlo.negate", t), "stablehlo.add");
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_distance[] = {
    {"_cdist_forward", tpu_lower__cdist_forward},
    {"_cdist_backward", tpu_lower__cdist_backward},
    {"_pdist_forward", tpu_lower__pdist_forward},
    {"_pdist_backward", tpu_lower__pdist_backward},
    {NULL, NULL},
};
