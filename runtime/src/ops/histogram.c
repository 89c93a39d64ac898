/* Lowerings: torch.histogram — histogram.bin_ct (a bin count, the range given or
 * the data's min/max) and histogram.bins_tensor (the edges given) — and
 * torch.histogramdd's three kernels, the same rules per coordinate.
 *
 * Edges for a bin count are ATen's linspace in the input's dtype, computed the
 * way its CPU kernel does (from both ends, so the last edge is exact); min == max
 * widens the range by 0.5 each way. An element's bin is the number of edges <= it,
 * minus one (the last edge closes the last bin), so ATen's "correct the linear
 * estimate against the edges" rule holds by construction. Elements outside the
 * edges and NaN count nowhere. weight and density as in PyTorch. */
#include <math.h>

#include "check.h"
#include "index.h"
#include "matrix.h"
#include "nn.h"

/* ATen's linspace(lo, hi, n) for 0-d lo/hi of dtype t: lo + i*step for the first
 * half, hi - (n-1-i)*step for the second. */
static tpu_val_t tpu_hist_linspace(tpu_builder_t* b, tpu_val_t lo, tpu_val_t hi, int64_t n) {
  tpu_aval_t ea = tpu_aval_make(tpu_b_dtype(b, lo), 1, &n), ia = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t i = tpu_b_convert(b, tpu_b_iota(b, &ia, 0), ea.dtype);
  tpu_val_t l = tpu_b_broadcast_in_dim(b, lo, 1, &n, NULL), h = tpu_b_broadcast_in_dim(b, hi, 1, &n, NULL);
  tpu_val_t step = tpu_nn_div(b, tpu_nn_sub(b, h, l), tpu_b_full(b, &ea, (double)(n > 1 ? n - 1 : 1)));
  tpu_val_t up = tpu_nn_add(b, l, tpu_nn_mul(b, step, i));
  tpu_val_t down = tpu_nn_sub(b, h, tpu_nn_mul(b, step, tpu_nn_sub(b, tpu_b_full(b, &ea, (double)(n - 1)), i)));
  tpu_val_t first_half = tpu_b_compare(b, "LT", i, tpu_b_full(b, &ea, (double)(n / 2)));
  return tpu_b_select(b, first_half, up, down);
}

/* bins + 1 edges for the values x (n) of dimension `dim`: over range[0..1] when
 * given, else the data's min and max (0 and 1 without data; a device-side check
 * that they are finite, as ATen raises for NaN or inf data); an empty range is
 * widened by 0.5 each way, as ATen does. */
static tpu_val_t tpu_hist_edges(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, int64_t dim, int64_t bins,
                                const double* range) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t lo, hi;
  int64_t nx = tpu_aval_numel(tpu_b_aval(b, x)), d0 = 0;
  if (range) {
    lo = tpu_b_const(b, t, range[0]);
    hi = tpu_b_const(b, t, range[1]);
  } else if (nx == 0) {
    lo = tpu_b_const(b, t, 0);
    hi = tpu_b_const(b, t, 1);
  } else {
    tpu_val_t flat = tpu_b_reshape(b, x, 1, &nx);
    lo = tpu_b_reduce(b, flat, tpu_b_const(b, t, INFINITY), 1, &d0, "stablehlo.minimum");
    hi = tpu_b_reduce(b, flat, tpu_b_const(b, t, -INFINITY), 1, &d0, "stablehlo.maximum");
    /* min / max may skip NaN: look for it too */
    tpu_val_t bad = tpu_b_unary(b, "stablehlo.not", tpu_b_unary(b, "stablehlo.is_finite", tpu_nn_sub(b, hi, lo)));
    bad = tpu_b_binary(b, "stablehlo.or", bad, tpu_mx_any(b, tpu_b_compare(b, "NE", flat, flat)));
    tpu_op_check(b, op, bad, TPU_NOVAL, TPU_INVALID_ARGUMENT,
                 "torch.histogramdd: dimension %" PRId64 "'s range is not finite", dim);
  }
  tpu_val_t same = tpu_b_compare(b, "EQ", lo, hi);
  tpu_val_t half = tpu_b_const(b, t, 0.5);
  lo = tpu_b_select(b, same, tpu_nn_sub(b, lo, half), lo);
  hi = tpu_b_select(b, same, tpu_nn_add(b, hi, half), hi);
  return tpu_hist_linspace(b, lo, hi, bins + 1);
}

/* The bin (i64) of each of the n values x among the bins + 1 sorted edges: the
 * number of edges <= x minus one, the last edge closing the last bin.
 * *inside: the bin is one of [0, bins) (NaN and values outside are not). */
static tpu_val_t tpu_hist_bin(tpu_builder_t* b, tpu_val_t x, tpu_val_t edges, int64_t bins, tpu_val_t* inside) {
  int64_t n = tpu_aval_numel(tpu_b_aval(b, x)), ne = bins + 1, nb[2] = {n, ne}, d0 = 0, d1 = 1;
  tpu_val_t xe = tpu_b_broadcast_in_dim(b, x, 2, nb, &d0), ee = tpu_b_broadcast_in_dim(b, edges, 2, nb, &d1);
  tpu_val_t le = tpu_b_convert(b, tpu_b_compare(b, "LE", ee, xe), TPU_I64);
  tpu_val_t pos = tpu_nn_addc(b, tpu_b_reduce(b, le, tpu_b_const_i(b, TPU_I64, 0), 1, &d1, "stablehlo.add"), -1);
  tpu_val_t top = tpu_b_reshape(b, tpu_b_slice(b, edges, (int64_t[]){bins}, (int64_t[]){ne}, NULL), 0, NULL);
  tpu_val_t last = tpu_b_compare(b, "EQ", x, tpu_b_broadcast_in_dim(b, top, 1, &n, NULL));
  pos = tpu_b_select(b, last, tpu_ops_like(b, pos, (double)(bins - 1)), pos);
  *inside = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", pos, tpu_ops_like(b, pos, 0)),
                         tpu_b_compare(b, "LT", pos, tpu_ops_like(b, pos, (double)bins)));
  return pos;
}

/* The bin widths (bins) of edges (bins + 1). */
static tpu_val_t tpu_hist_widths(tpu_builder_t* b, tpu_val_t edges, int64_t bins) {
  return tpu_nn_sub(b, tpu_b_slice(b, edges, (int64_t[]){1}, (int64_t[]){bins + 1}, NULL),
                    tpu_b_slice(b, edges, (int64_t[]){0}, (int64_t[]){bins}, NULL));
}

/* The n weights (arg wi, or ones) of the values that count (`inside`), 0 for the others. */
static tpu_val_t tpu_hist_weights(tpu_builder_t* b, tpu_op_t* op, int wi, tpu_val_t inside, tpu_dtype_t t, int64_t n) {
  tpu_aval_t wa = tpu_aval_make(t, 1, &n);
  tpu_val_t w = tpu_op_kind(op, wi) == TPU_ARG_TENSOR ? tpu_b_reshape(b, tpu_op_tensor(b, op, wi), 1, &n)
                                                        : tpu_b_full(b, &wa, 1.0);
  return tpu_b_select(b, inside, tpu_b_convert(b, w, t), tpu_b_full(b, &wa, 0.0));
}

/* histogram.bin_ct(self, bins, *, range, weight, density) and
 * histogram.bins_tensor(self, bins, *, weight, density) -> (hist, bin_edges) */
static tpu_status_t* tpu_lower_histogram(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t xa = tpu_op_aval(op, 0);
  bool by_edges = tpu_op_kind(op, 1) == TPU_ARG_TENSOR;
  int wi = by_edges ? 2 : 3, di = wi + 1;
  if (xa.dtype != TPU_F32 && xa.dtype != TPU_F64) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"histogram_cpu\" not implemented for '%s'", tpu_dtype_scalar_type_name(xa.dtype));
    return NULL;
  }
  int64_t n = tpu_aval_numel(&xa), bins = by_edges ? tpu_op_aval(op, 1).dims[0] - 1 : tpu_op_int(op, 1, 100), d0 = 0;
  if (bins < 1 || (by_edges && (tpu_op_aval(op, 1).rank != 1 || tpu_op_aval(op, 1).dtype != xa.dtype))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0 (or 1-D edges of input's dtype)");
    return NULL;
  }
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &n);
  const tpu_arg_t* ra = tpu_op_arg(op, 2);
  const double* range = !by_edges && ra && ra->kind == TPU_ARG_FLOAT_LIST && ra->u.list.n == 2 ? ra->u.list.floats : NULL;
  tpu_val_t edges = by_edges ? tpu_op_tensor(b, op, 1) : tpu_hist_edges(b, op, x, 0, bins, range);
  tpu_aval_t ha = tpu_aval_make(xa.dtype, 1, &bins);
  tpu_val_t hist = tpu_b_full(b, &ha, 0);
  if (n > 0) {
    tpu_val_t inside, pos = tpu_hist_bin(b, x, edges, bins, &inside);
    tpu_val_t at = tpu_b_select(b, inside, pos, tpu_ops_like(b, pos, 0));
    hist = tpu_idx_put_along(b, hist, 0, at, tpu_hist_weights(b, op, wi, inside, xa.dtype, n), "stablehlo.add");
  }
  if (tpu_op_bool(op, di, false)) { /* density: hist / (total * bin width) */
    tpu_val_t total = tpu_b_reduce(b, hist, tpu_b_const(b, xa.dtype, 0), 1, &d0, "stablehlo.add");
    hist = tpu_nn_div(b, hist, tpu_nn_mul(b, tpu_hist_widths(b, edges, bins), tpu_b_broadcast_in_dim(b, total, 1, &bins, NULL)));
  }
  outs[0] = hist;
  outs[1] = edges;
  *nouts = 2;
  return NULL;
}

/* ------------------------------------------------------------- histogramdd */

/* self (..., D) as N points of D coordinates, and ATen's checks of the bins
 * (arg 1: D counts or D edge tensors) and of range (2 D floats, arg 2). */
typedef struct tpu_histdd {
  int64_t n, d, bins[TPU_MAX_RANK];
  const double* range; /* 2 D values, or NULL */
  tpu_val_t x;         /* (N, D) */
  tpu_dtype_t t;
} tpu_histdd_t;

static bool tpu_histdd_begin(tpu_builder_t* b, tpu_op_t* op, bool by_edges, tpu_histdd_t* h) {
  tpu_aval_t xa = tpu_op_aval(op, 0);
  if (xa.dtype != TPU_F32 && xa.dtype != TPU_F64) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"histogramdd\" not implemented for '%s'", tpu_dtype_scalar_type_name(xa.dtype));
    return false;
  }
  h->t = xa.dtype;
  h->d = xa.rank ? xa.dims[xa.rank - 1] : 1;
  int nb = tpu_op_list_len(op, 1);
  if (xa.rank < 1 || nb != h->d || h->d > TPU_MAX_RANK) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "histogramdd: The size of bins must be equal to the innermost dimension of the input.");
    return false;
  }
  int64_t counts[TPU_MAX_RANK];
  if (!by_edges) tpu_op_ints(op, 1, counts, TPU_MAX_RANK);
  for (int64_t i = 0; i < h->d; i++) {
    h->bins[i] = by_edges ? tpu_op_arg(op, 1)->u.list.tensors[i].sizes[0] - 1 : counts[i];
    if (h->bins[i] <= 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0, but got %" PRId64 " for dimension %" PRId64,
                 h->bins[i], i);
      return false;
    }
  }
  const tpu_arg_t* ra = by_edges ? NULL : tpu_op_arg(op, 2);
  h->range = ra && ra->kind == TPU_ARG_FLOAT_LIST ? ra->u.list.floats : NULL;
  if (h->range && ra->u.list.n != 2 * h->d) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogramdd: for a %" PRId64 "-dimensional histogram range should have %" PRId64 " elements, but got %d",
               h->d, 2 * h->d, ra->u.list.n);
    return false;
  }
  for (int64_t i = 0; h->range && i < h->d; i++)
    if (h->range[2 * i] > h->range[2 * i + 1]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogramdd: min should not exceed max, but got min %g max %g for dimension %" PRId64,
                 h->range[2 * i], h->range[2 * i + 1], i);
      return false;
    }
  h->n = tpu_aval_numel(&xa) / (h->d ? h->d : 1);
  int64_t nd[2] = {h->n, h->d};
  h->x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 2, nd);
  return true;
}

/* Coordinate i of the N points (N). */
static tpu_val_t tpu_histdd_col(tpu_builder_t* b, const tpu_histdd_t* h, int64_t i) {
  return tpu_b_reshape(b, tpu_mx_slice(b, h->x, 1, i, i + 1), 1, &h->n);
}

static tpu_val_t tpu_histdd_edges(tpu_builder_t* b, tpu_op_t* op, const tpu_histdd_t* h, int64_t i) {
  return tpu_hist_edges(b, op, tpu_histdd_col(b, h, i), i, h->bins[i], h->range ? h->range + 2 * i : NULL);
}

/* The histogram (bins...) of the points over edges[0..D) (weight: arg wi). */
static tpu_val_t tpu_histdd_count(tpu_builder_t* b, tpu_op_t* op, const tpu_histdd_t* h, const tpu_val_t* edges,
                                  int wi, bool density) {
  int64_t cells = 1, d0 = 0;
  for (int64_t i = 0; i < h->d; i++) cells *= h->bins[i];
  tpu_aval_t ca = tpu_aval_make(h->t, 1, &cells), ha = tpu_aval_make(h->t, (int)h->d, h->bins);
  tpu_val_t hist = tpu_b_full(b, &ca, 0);
  if (h->n > 0) {
    tpu_val_t at = TPU_NOVAL, inside = TPU_NOVAL;
    for (int64_t i = 0; i < h->d; i++) { /* row-major cell index, all coordinates inside */
      tpu_val_t in_i, pos = tpu_hist_bin(b, tpu_histdd_col(b, h, i), edges[i], h->bins[i], &in_i);
      at = i == 0 ? pos : tpu_nn_add(b, tpu_nn_mul(b, at, tpu_ops_like(b, pos, (double)h->bins[i])), pos);
      inside = i == 0 ? in_i : tpu_b_binary(b, "stablehlo.and", inside, in_i);
    }
    at = tpu_b_select(b, inside, at, tpu_ops_like(b, at, 0));
    hist = tpu_idx_put_along(b, hist, 0, at, tpu_hist_weights(b, op, wi, inside, h->t, h->n), "stablehlo.add");
  }
  if (density) { /* hist / (total * the cell's volume) */
    tpu_val_t total = tpu_b_reduce(b, hist, tpu_b_const(b, h->t, 0), 1, &d0, "stablehlo.add");
    hist = tpu_nn_div(b, hist, tpu_b_broadcast_in_dim(b, total, 1, &cells, NULL));
    hist = tpu_b_reshape(b, hist, (int)h->d, h->bins);
    for (int64_t i = 0; i < h->d; i++)
      hist = tpu_nn_div(b, hist, tpu_b_broadcast_in_dim(b, tpu_hist_widths(b, edges[i], h->bins[i]), (int)h->d, h->bins, &i));
  }
  return tpu_b_reshape(b, hist, ha.rank, ha.dims);
}

/* _histogramdd_bin_edges(self, bins, *, range, weight, density) -> D edge tensors */
static tpu_status_t* tpu_lower__histogramdd_bin_edges(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                      int* nouts) {
  tpu_histdd_t h;
  if (!tpu_histdd_begin(b, op, false, &h)) return NULL;
  if (h.d > max_outs) return TPU_STATUS(TPU_INTERNAL, "_histogramdd_bin_edges: room for %d results", max_outs);
  for (int64_t i = 0; i < h.d; i++) outs[i] = tpu_histdd_edges(b, op, &h, i);
  *nouts = (int)h.d;
  return NULL;
}

/* _histogramdd_from_bin_cts(self, bins, *, range, weight, density) and
 * _histogramdd_from_bin_tensors(self, bins, *, weight, density) -> hist */
static tpu_status_t* tpu_lower__histogramdd_from_bins(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                      int* nouts) {
  (void)max_outs;
  bool by_edges = tpu_op_kind(op, 1) == TPU_ARG_TENSOR_LIST;
  tpu_histdd_t h;
  if (!tpu_histdd_begin(b, op, by_edges, &h)) return NULL;
  tpu_val_t edges[TPU_MAX_RANK];
  for (int64_t i = 0; i < h.d; i++) {
    if (!by_edges) {
      edges[i] = tpu_histdd_edges(b, op, &h, i);
      continue;
    }
    const tpu_tensor_t* e = &tpu_op_arg(op, 1)->u.list.tensors[i];
    if (e->rank != 1 || e->dtype != h.t) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogramdd: bins tensors must be 1-D, of the input's dtype");
      return NULL;
    }
    edges[i] = tpu_op_list_tensor(b, op, 1, (int)i);
  }
  int wi = by_edges ? 2 : 3;
  return tpu_ops_result1(tpu_histdd_count(b, op, &h, edges, wi, tpu_op_bool(op, wi + 1, false)), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_histogram[] = {
    {"histogram", tpu_lower_histogram},
    {"_histogramdd_bin_edges", tpu_lower__histogramdd_bin_edges},
    {"_histogramdd_from_bin_cts", tpu_lower__histogramdd_from_bins},
    {"_histogramdd_from_bin_tensors", tpu_lower__histogramdd_from_bins},
    {NULL, NULL},
};
