/* Lowerings: nn.EmbeddingBag / F.embedding_bag — _embedding_bag,
 * _embedding_bag_forward_only, _embedding_bag_dense_backward and
 * _embedding_bag_per_sample_weights_backward.
 *
 * Bags are segments of the flat indices delimited by offsets. Each index's bag
 * (offset2bag) is a prefix sum of bag starts scattered onto the index
 * positions, so everything is O(N + B) gathers and scatters, never an N x B
 * table. Reductions over a bag are scatters into (B, D): add for sum and mean,
 * maximum for max (its argmax is the first index reaching the maximum, as the
 * CPU kernel's strict comparison picks). Indices equal to padding_idx take no
 * part (and count nowhere). The auxiliary results follow the CPU kernel's
 * conventions (bag_size and max_indices are zeros for sum; max_indices is
 * bag_size for mean) so that the backwards can read them. Bad indices and
 * offsets are device-side checks with ATen's messages. */
#include <math.h>

#include "check.h"
#include "index.h"
#include "nn.h"

enum { TPU_EB_SUM = 0, TPU_EB_MEAN = 1, TPU_EB_MAX = 2 };

typedef struct tpu_eb {
  int64_t n, b, d, rows; /* indices, bags, embedding dim, weight rows */
  int mode;
  int64_t padding_idx;   /* -1 (or any negative): none */
  tpu_dtype_t dtype, ct;
  tpu_val_t idx;         /* (n) i64 indices, clamped into [0, rows) */
  tpu_val_t valid;       /* (n) i1: not padding */
  tpu_val_t bag;         /* (n) i64: offset2bag */
} tpu_eb_t;

/* A 0-d bool: any element of the i1 vector v. */
static tpu_val_t tpu_eb_any(tpu_builder_t* b, tpu_val_t v) {
  int64_t d0 = 0;
  return tpu_b_reduce(b, v, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d0, "stablehlo.or");
}

/* The largest element of an i64 vector (INT64_MIN when empty) where mask. */
static tpu_val_t tpu_eb_max_where(tpu_builder_t* b, tpu_val_t v, tpu_val_t mask) {
  int64_t d0 = 0;
  tpu_val_t low = tpu_b_const_i(b, TPU_I64, INT64_MIN);
  tpu_val_t m = tpu_b_select(b, mask, v, tpu_nn_bcast0(b, low, v));
  return tpu_b_reduce(b, m, low, 1, &d0, "stablehlo.maximum");
}

/* Indices (arg i) checked against the weight's rows, clamped, and their validity. */
static void tpu_eb_indices(tpu_builder_t* b, tpu_op_t* op, int i, tpu_eb_t* e) {
  tpu_val_t idx = tpu_b_convert(b, tpu_op_tensor(b, op, i), TPU_I64);
  if (e->n > 0) {
    tpu_val_t out = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "LT", idx, tpu_ops_like(b, idx, 0)),
                                 tpu_b_compare(b, "GE", idx, tpu_ops_like(b, idx, (double)e->rows)));
    tpu_op_check(b, op, tpu_eb_any(b, out), tpu_eb_max_where(b, idx, out), TPU_INVALID_ARGUMENT,
                 "An index of input takes value {} which is not in the valid range [0, %" PRId64 ")", e->rows);
  }
  tpu_val_t ins[3] = {tpu_ops_like(b, idx, 0), idx, tpu_ops_like(b, idx, (double)(e->rows > 0 ? e->rows - 1 : 0))};
  e->idx = tpu_b_op1(b, "stablehlo.clamp", 3, ins, NULL, tpu_b_aval(b, idx));
  e->valid = e->padding_idx >= 0 ? tpu_b_compare(b, "NE", idx, tpu_ops_like(b, idx, (double)e->padding_idx))
                                 : tpu_b_compare(b, "EQ", idx, idx);
}

/* A 1-D slice [lo, hi) of v. */
static tpu_val_t tpu_eb_slice(tpu_builder_t* b, tpu_val_t v, int64_t lo, int64_t hi) {
  return tpu_b_slice(b, v, &lo, &hi, NULL);
}

/* offsets' own checks (arg i: B or B + 1 entries), with ATen's messages. */
static void tpu_eb_check_offsets(tpu_builder_t* b, tpu_op_t* op, tpu_val_t off, int64_t no, int64_t n) {
  if (no == 0) return;
  tpu_val_t first = tpu_b_reshape(b, tpu_eb_slice(b, off, 0, 1), 0, NULL);
  tpu_op_check(b, op, tpu_b_compare(b, "NE", first, tpu_b_const_i(b, TPU_I64, 0)), first, TPU_INVALID_ARGUMENT,
               "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from position 0. "
               "However, got {}");
  tpu_val_t last = tpu_b_reshape(b, tpu_eb_slice(b, off, no - 1, no), 0, NULL);
  tpu_op_check(b, op, tpu_b_compare(b, "GT", last, tpu_b_const_i(b, TPU_I64, n)), last, TPU_INVALID_ARGUMENT,
               "offsets[-1] can not be greater than input's length %" PRId64 " but got offsets[-1] of {}", n);
  if (no > 1) /* overlapping bags */
    tpu_op_check(b, op, tpu_eb_any(b, tpu_b_compare(b, "LT", tpu_eb_slice(b, off, 1, no), tpu_eb_slice(b, off, 0, no - 1))),
                 TPU_NOVAL, TPU_INVALID_ARGUMENT, "embedding_bag: offsets must be non-decreasing");
}

/* offset2bag (n, i64) from the offsets (arg i): +1 at each later bag start
 * (starts at n mark nothing), then a prefix sum. */
static tpu_val_t tpu_eb_offset2bag(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_eb_t* e) {
  int64_t n = e->n, no = tpu_op_aval(op, i).dims[0], n1 = n + 1;
  tpu_val_t off = tpu_b_convert(b, tpu_op_tensor(b, op, i), TPU_I64);
  tpu_eb_check_offsets(b, op, off, no, n);
  tpu_aval_t ma = tpu_aval_make(TPU_I64, 1, &n1);
  tpu_val_t marks = tpu_b_full(b, &ma, 0);
  if (no > 1) {
    tpu_val_t starts = tpu_eb_slice(b, off, 1, no);
    tpu_val_t ins[3] = {tpu_ops_like(b, starts, 0), starts, tpu_ops_like(b, starts, (double)n)};
    tpu_val_t s = tpu_b_op1(b, "stablehlo.clamp", 3, ins, NULL, tpu_b_aval(b, starts));
    marks = tpu_idx_put_along(b, marks, 0, s, tpu_ops_like(b, s, 1), "stablehlo.add");
  }
  return n == 0 ? tpu_eb_slice(b, marks, 0, 0) : tpu_idx_cumsum(b, tpu_eb_slice(b, marks, 0, n), 0);
}

/* Reads weight (arg 0) shapes and the static args; NULL-safe on failure. */
static bool tpu_eb_begin(tpu_builder_t* b, tpu_op_t* op, tpu_eb_t* e) {
  tpu_aval_t w = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1), oa = tpu_op_aval(op, 2);
  if (w.rank != 2 || ia.rank != 1 || oa.rank != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "embedding_bag: expected a 2-D weight and 1-D indices and offsets");
    return false;
  }
  if (!tpu_dtype_is_float(w.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "embedding_bag: weight dtype %s is not supported", tpu_dtype_name(w.dtype));
    return false;
  }
  e->rows = w.dims[0];
  e->d = w.dims[1];
  e->n = ia.dims[0];
  e->mode = (int)tpu_op_int(op, 4, TPU_EB_SUM);
  bool include_last = tpu_op_bool(op, 7, false);
  e->b = include_last ? (oa.dims[0] > 0 ? oa.dims[0] - 1 : 0) : oa.dims[0];
  e->padding_idx = tpu_op_int(op, 8, -1);
  if (e->padding_idx < -1 || e->padding_idx >= e->rows) e->padding_idx = -1;
  e->dtype = w.dtype;
  e->ct = tpu_dtype_opmath(w.dtype);
  if (e->mode < 0 || e->mode > 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "embedding_bag: unknown mode %d", e->mode);
    return false;
  }
  if (tpu_op_kind(op, 6) == TPU_ARG_TENSOR && e->mode != TPU_EB_SUM) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "embedding_bag: per_sample_weights was not None. per_sample_weights is only supported for mode='sum'");
    return false;
  }
  return true;
}

/* Entries past the last bag (after the last offset, with include_last_offset)
 * belong to no bag: the CPU kernel ignores them. */
static void tpu_eb_in_bags(tpu_builder_t* b, tpu_eb_t* e, tpu_val_t bag) {
  e->valid = tpu_b_binary(b, "stablehlo.and", e->valid, tpu_b_compare(b, "LT", bag, tpu_ops_like(b, bag, (double)e->b)));
}

/* A per-bag value (bags) broadcast over the embedding dim (bags, d). */
static tpu_val_t tpu_eb_rows_bcast(tpu_builder_t* b, tpu_val_t v, int64_t rows, int64_t d) {
  int64_t dims[2] = {rows, d}, d0 = 0;
  return tpu_b_broadcast_in_dim(b, v, 2, dims, &d0);
}

/* Count of valid indices per bag (b, i64). */
static tpu_val_t tpu_eb_bag_size(tpu_builder_t* b, const tpu_eb_t* e) {
  tpu_aval_t ca = tpu_aval_make(TPU_I64, 1, &e->b);
  return tpu_idx_put_along(b, tpu_b_full(b, &ca, 0), 0, e->bag, tpu_b_convert(b, e->valid, TPU_I64), "stablehlo.add");
}

/* mode max: the bag maxima (b, d) and, per entry, the weight row reaching it first. */
static tpu_val_t tpu_eb_max(tpu_builder_t* b, const tpu_eb_t* e, tpu_val_t rows, tpu_val_t size,
                            tpu_val_t* out_argmax) {
  int64_t bd[2] = {e->b, e->d}, nd[2] = {e->n, e->d};
  tpu_aval_t ba = tpu_aval_make(e->ct, 2, bd), bi = tpu_aval_make(TPU_I64, 2, bd), ni = tpu_aval_make(TPU_I64, 2, nd);
  tpu_val_t vmask = tpu_eb_rows_bcast(b, e->valid, e->n, e->d);
  tpu_val_t cand = tpu_b_select(b, vmask, rows, tpu_ops_like(b, rows, -INFINITY));
  tpu_val_t mx = tpu_idx_put_along(b, tpu_b_full(b, &ba, -INFINITY), 0, e->bag, cand, "stablehlo.maximum");
  /* first position reaching its bag's maximum: a scatter-min of positions */
  tpu_val_t bag_c = tpu_b_binary(b, "stablehlo.minimum", e->bag, tpu_ops_like(b, e->bag, (double)(e->b - 1)));
  tpu_val_t hit = tpu_b_binary(b, "stablehlo.and", vmask, tpu_b_compare(b, "EQ", rows, tpu_idx_select(b, mx, 0, bag_c)));
  tpu_val_t pos = tpu_b_select(b, hit, tpu_b_iota(b, &ni, 0), tpu_b_full(b, &ni, (double)e->n));
  tpu_val_t first = tpu_idx_put_along(b, tpu_b_full(b, &bi, (double)e->n), 0, e->bag, pos, "stablehlo.minimum");
  tpu_val_t fc = tpu_b_binary(b, "stablehlo.minimum", first, tpu_ops_like(b, first, (double)(e->n - 1)));
  int64_t flat = e->b * e->d;
  tpu_val_t arg = tpu_b_reshape(b, tpu_idx_select(b, e->idx, 0, tpu_b_reshape(b, fc, 1, &flat)), 2, bd);
  tpu_val_t nonempty = tpu_eb_rows_bcast(b, tpu_b_compare(b, "GT", size, tpu_ops_like(b, size, 0)), e->b, e->d);
  *out_argmax = tpu_b_select(b, nonempty, arg, tpu_b_full(b, &bi, 0));
  return tpu_b_select(b, nonempty, mx, tpu_b_full(b, &ba, 0));
}

/* _embedding_bag[_forward_only](weight, indices, offsets, scale_grad_by_freq, mode,
 * sparse, per_sample_weights, include_last_offset, padding_idx)
 * -> (output, offset2bag, bag_size, max_indices) */
static tpu_status_t* tpu_lower__embedding_bag(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  tpu_eb_t e;
  if (!tpu_eb_begin(b, op, &e)) return tpu_b_take_error(b);
  tpu_eb_indices(b, op, 1, &e);
  e.bag = tpu_eb_offset2bag(b, op, 2, &e);
  if (e.n > 0) tpu_eb_in_bags(b, &e, e.bag);
  int64_t bd[2] = {e.b, e.d};
  tpu_aval_t oa = tpu_aval_make(e.ct, 2, bd), ca = tpu_aval_make(TPU_I64, 1, &e.b);
  tpu_aval_t ma = e.mode == TPU_EB_MAX ? tpu_aval_make(TPU_I64, 2, bd) : ca;
  *nouts = 4;
  /* The CPU kernel's fast path (sum, no padding_idx) leaves offset2bag empty; the
   * backwards rebuild it from the offsets then, as ATen's do. */
  int64_t none = 0;
  tpu_aval_t empty = tpu_aval_make(TPU_I64, 1, &none);
  outs[1] = e.mode == TPU_EB_SUM && e.padding_idx < 0 ? tpu_b_full(b, &empty, 0) : e.bag;
  if (e.n == 0 || e.b == 0) {
    outs[0] = tpu_b_convert(b, tpu_b_full(b, &oa, 0), e.dtype);
    outs[2] = tpu_b_full(b, &ca, 0);
    outs[3] = tpu_b_full(b, &ma, 0);
    return tpu_b_take_error(b);
  }
  tpu_val_t rows = tpu_idx_select(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), e.ct), 0, e.idx);
  tpu_val_t size = tpu_eb_bag_size(b, &e), r;
  if (e.mode == TPU_EB_MAX) {
    r = tpu_eb_max(b, &e, rows, size, &outs[3]);
  } else {
    if (tpu_op_kind(op, 6) == TPU_ARG_TENSOR) {
      tpu_val_t psw = tpu_b_convert(b, tpu_op_tensor(b, op, 6), e.ct);
      rows = tpu_nn_mul(b, rows, tpu_eb_rows_bcast(b, psw, e.n, e.d));
    }
    rows = tpu_b_select(b, tpu_eb_rows_bcast(b, e.valid, e.n, e.d), rows, tpu_ops_like(b, rows, 0));
    r = tpu_idx_put_along(b, tpu_b_full(b, &oa, 0), 0, e.bag, rows, "stablehlo.add");
    if (e.mode == TPU_EB_MEAN) {
      tpu_val_t div = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.maximum", size, tpu_ops_like(b, size, 1)), e.ct);
      r = tpu_nn_div(b, r, tpu_eb_rows_bcast(b, div, e.b, e.d));
    }
    outs[3] = e.mode == TPU_EB_MEAN ? size : tpu_b_full(b, &ca, 0);
  }
  outs[0] = tpu_b_convert(b, r, e.dtype);
  outs[2] = e.mode == TPU_EB_SUM ? tpu_b_full(b, &ca, 0) : size;
  return tpu_b_take_error(b);
}

/* Each index's bag: offset2bag (arg `at`) as given, or rebuilt from the offsets
 * (arg `offsets`, -1: none) when the forward left it empty. */
static tpu_val_t tpu_eb_bags(tpu_builder_t* b, tpu_op_t* op, int at, int offsets, const tpu_eb_t* e) {
  if (tpu_op_aval(op, at).dims[0] == e->n) return tpu_b_convert(b, tpu_op_tensor(b, op, at), TPU_I64);
  if (offsets < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: offset2bag has %" PRId64 " entries for %" PRId64 " indices",
               tpu_op_name(op), tpu_op_aval(op, at).dims[0], e->n);
    return TPU_NOVAL;
  }
  return tpu_eb_offset2bag(b, op, offsets, e);
}

/* Where the weight backward's arguments sit: _embedding_bag_backward has offsets
 * and sparse besides _embedding_bag_dense_backward's. */
typedef struct tpu_eb_bwd_args {
  int grad, indices, offsets, offset2bag, bag_size, max_indices, num_weights, by_freq, mode, sparse, psw, padding;
} tpu_eb_bwd_args_t;

static const tpu_eb_bwd_args_t tpu_eb_dense_args = {0, 1, -1, 2, 3, 4, 5, 6, 7, -1, 8, 9};
static const tpu_eb_bwd_args_t tpu_eb_backward_args = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};

/* The weight's gradient (num_weights, d). */
static tpu_status_t* tpu_eb_weight_grad(tpu_builder_t* b, tpu_op_t* op, const tpu_eb_bwd_args_t* at, tpu_val_t* outs,
                                        int* nouts) {
  if (at->sparse >= 0 && tpu_op_bool(op, at->sparse, false)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "embedding_bag: sparse gradients are not supported on tpu (use sparse=False)");
    return tpu_b_take_error(b);
  }
  tpu_aval_t ga = tpu_op_aval(op, at->grad), ia = tpu_op_aval(op, at->indices);
  tpu_eb_t e = {.n = ia.dims[0], .b = ga.dims[0], .d = ga.dims[1], .rows = tpu_op_int(op, at->num_weights, 0),
                .mode = (int)tpu_op_int(op, at->mode, TPU_EB_SUM), .padding_idx = tpu_op_int(op, at->padding, -1),
                .dtype = ga.dtype, .ct = tpu_dtype_opmath(ga.dtype)};
  if (e.padding_idx >= e.rows) e.padding_idx = -1;
  int64_t wd[2] = {e.rows, e.d};
  tpu_aval_t wa = tpu_aval_make(e.ct, 2, wd);
  *nouts = 1;
  if (e.n == 0 || e.b == 0 || e.rows == 0) {
    outs[0] = tpu_b_convert(b, tpu_b_full(b, &wa, 0), e.dtype);
    return tpu_b_take_error(b);
  }
  tpu_eb_indices(b, op, at->indices, &e);
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, at->grad), e.ct), r;
  tpu_val_t size = tpu_b_convert(b, tpu_op_tensor(b, op, at->bag_size), TPU_I64);
  if (e.mode == TPU_EB_MAX) { /* each (bag, d) sends its gradient to its argmax row */
    int64_t flat = e.b * e.d, wflat = e.rows * e.d, bd[2] = {e.b, e.d};
    tpu_aval_t bi = tpu_aval_make(TPU_I64, 2, bd), wf = tpu_aval_make(e.ct, 1, &wflat);
    tpu_val_t arg = tpu_b_convert(b, tpu_op_tensor(b, op, at->max_indices), TPU_I64);
    tpu_val_t at = tpu_nn_add(b, tpu_nn_mulc(b, arg, (double)e.d), tpu_b_iota(b, &bi, 1));
    tpu_val_t nonempty = tpu_eb_rows_bcast(b, tpu_b_compare(b, "GT", size, tpu_ops_like(b, size, 0)), e.b, e.d);
    tpu_val_t gm = tpu_b_select(b, nonempty, g, tpu_ops_like(b, g, 0));
    r = tpu_idx_put_along(b, tpu_b_full(b, &wf, 0), 0, tpu_b_reshape(b, at, 1, &flat), tpu_b_reshape(b, gm, 1, &flat),
                          "stablehlo.add");
    r = tpu_b_reshape(b, r, 2, wd);
  } else {
    tpu_val_t bag = tpu_eb_bags(b, op, at->offset2bag, at->offsets, &e);
    if (!tpu_b_ok(b)) return tpu_b_take_error(b);
    tpu_eb_in_bags(b, &e, bag);
    tpu_val_t bag_c = tpu_b_binary(b, "stablehlo.minimum", bag, tpu_ops_like(b, bag, (double)(e.b - 1)));
    tpu_val_t c = tpu_idx_select(b, g, 0, bag_c); /* (n, d) */
    tpu_val_t scale = tpu_b_select(b, e.valid, tpu_ops_like(b, bag, 1), tpu_ops_like(b, bag, 0));
    tpu_val_t s = tpu_b_convert(b, scale, e.ct);
    if (e.mode == TPU_EB_MEAN) {
      tpu_val_t n = tpu_idx_select(b, tpu_b_binary(b, "stablehlo.maximum", size, tpu_ops_like(b, size, 1)), 0, bag_c);
      s = tpu_nn_div(b, s, tpu_b_convert(b, n, e.ct));
    }
    if (tpu_op_kind(op, at->psw) == TPU_ARG_TENSOR)
      s = tpu_nn_mul(b, s, tpu_b_convert(b, tpu_op_tensor(b, op, at->psw), e.ct));
    if (tpu_op_bool(op, at->by_freq, false)) { /* scale_grad_by_freq: divide by each row's count in the batch */
      tpu_aval_t fa = tpu_aval_make(TPU_I64, 1, &e.rows);
      tpu_val_t freq = tpu_idx_put_along(b, tpu_b_full(b, &fa, 0), 0, e.idx, tpu_ops_like(b, e.idx, 1), "stablehlo.add");
      s = tpu_nn_div(b, s, tpu_b_convert(b, tpu_idx_select(b, freq, 0, e.idx), e.ct));
    }
    c = tpu_nn_mul(b, c, tpu_eb_rows_bcast(b, s, e.n, e.d));
    r = tpu_idx_put_along(b, tpu_b_full(b, &wa, 0), 0, e.idx, c, "stablehlo.add");
  }
  outs[0] = tpu_b_convert(b, r, e.dtype);
  return tpu_b_take_error(b);
}

/* _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices,
 * num_weights, scale_grad_by_freq, mode, per_sample_weights, padding_idx) */
static tpu_status_t* tpu_lower__embedding_bag_dense_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                             tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_eb_weight_grad(b, op, &tpu_eb_dense_args, outs, nouts);
}

/* _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
 * num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx) */
static tpu_status_t* tpu_lower__embedding_bag_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                       int* nouts) {
  (void)max_outs;
  return tpu_eb_weight_grad(b, op, &tpu_eb_backward_args, outs, nouts);
}

/* _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets,
 * offset2bag, mode, padding_idx) -> (n): grad[bag] . weight[index] */
static tpu_status_t* tpu_lower__embedding_bag_per_sample_weights_backward(tpu_builder_t* b, tpu_op_t* op,
                                                                          int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t ga = tpu_op_aval(op, 0), wa = tpu_op_aval(op, 1), ia = tpu_op_aval(op, 2);
  tpu_eb_t e = {.n = ia.dims[0], .b = ga.dims[0], .d = ga.dims[1], .rows = wa.dims[0],
                .mode = (int)tpu_op_int(op, 5, TPU_EB_SUM), .padding_idx = tpu_op_int(op, 6, -1),
                .dtype = ga.dtype, .ct = tpu_dtype_opmath(ga.dtype)};
  if (e.mode != TPU_EB_SUM) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
    return tpu_b_take_error(b);
  }
  if (e.padding_idx >= e.rows) e.padding_idx = -1;
  tpu_aval_t na = tpu_aval_make(e.dtype, 1, &e.n);
  *nouts = 1;
  if (e.n == 0 || e.b == 0 || e.rows == 0) {
    outs[0] = tpu_b_full(b, &na, 0);
    return tpu_b_take_error(b);
  }
  tpu_eb_indices(b, op, 2, &e);
  tpu_val_t bag = tpu_eb_bags(b, op, 4, 3, &e);
  if (!tpu_b_ok(b)) return tpu_b_take_error(b);
  tpu_eb_in_bags(b, &e, bag);
  tpu_val_t bag_c = tpu_b_binary(b, "stablehlo.minimum", bag, tpu_ops_like(b, bag, (double)(e.b - 1)));
  tpu_val_t gr = tpu_idx_select(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), e.ct), 0, bag_c);
  tpu_val_t wr = tpu_idx_select(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), e.ct), 0, e.idx);
  int64_t d1 = 1;
  tpu_val_t dot = tpu_nn_sum(b, tpu_nn_mul(b, gr, wr), 1, &d1);
  outs[0] = tpu_b_convert(b, tpu_b_select(b, e.valid, dot, tpu_ops_like(b, dot, 0)), e.dtype);
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_embedding_bag[] = {
    {"_embedding_bag", tpu_lower__embedding_bag},
    {"_embedding_bag_forward_only", tpu_lower__embedding_bag},
    {"_embedding_bag_backward", tpu_lower__embedding_bag_backward},
    {"_embedding_bag_dense_backward", tpu_lower__embedding_bag_dense_backward},
    {"_embedding_bag_per_sample_weights_backward", tpu_lower__embedding_bag_per_sample_weights_backward},
    {NULL, NULL},
};
