/* Lowering: torch.histogram — histogram.bin_ct (a bin count, the range given or
 * the data's min/max) and histogram.bins_tensor (the edges given).
 *
 * Edges for a bin count are ATen's linspace in the input's dtype, computed the
 * way its CPU kernel does (from both ends, so the last edge is exact); min == max
 * widens the range by 0.5 each way. An element's bin is the number of edges <= it,
 * minus one (the last edge closes the last bin), so ATen's "correct the linear
 * estimate against the edges" rule holds by construction. Elements outside the
 * edges and NaN count nowhere. weight and density as in PyTorch. */
#include <math.h>

#include "index.h"
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

/* The edges of histogram.bin_ct: from `range` (arg 2) or the data's min/max. */
static tpu_val_t tpu_hist_edges(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, int64_t bins) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t lo, hi;
  int64_t nx = tpu_aval_numel(tpu_b_aval(b, x)), d0 = 0;
  const tpu_arg_t* ra = tpu_op_arg(op, 2);
  if (ra && ra->kind == TPU_ARG_FLOAT_LIST && ra->u.list.n == 2) {
    lo = tpu_b_const(b, t, ra->u.list.floats[0]);
    hi = tpu_b_const(b, t, ra->u.list.floats[1]);
  } else if (nx == 0) {
    lo = tpu_b_const(b, t, 0);
    hi = tpu_b_const(b, t, 0);
  } else {
    tpu_val_t flat = tpu_b_reshape(b, x, 1, &nx);
    lo = tpu_b_reduce(b, flat, tpu_b_const(b, t, INFINITY), 1, &d0, "stablehlo.minimum");
    hi = tpu_b_reduce(b, flat, tpu_b_const(b, t, -INFINITY), 1, &d0, "stablehlo.maximum");
  }
  tpu_val_t same = tpu_b_compare(b, "EQ", lo, hi);
  tpu_val_t half = tpu_b_const(b, t, 0.5);
  lo = tpu_b_select(b, same, tpu_nn_sub(b, lo, half), lo);
  hi = tpu_b_select(b, same, tpu_nn_add(b, hi, half), hi);
  return tpu_hist_linspace(b, lo, hi, bins + 1);
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
  int64_t n = tpu_aval_numel(&xa), bins = by_edges ? tpu_op_aval(op, 1).dims[0] - 1 : tpu_op_int(op, 1, 100);
  if (bins < 1 || (by_edges && (tpu_op_aval(op, 1).rank != 1 || tpu_op_aval(op, 1).dtype != xa.dtype))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "torch.histogram(): bins must be > 0 (or 1-D edges of input's dtype)");
    return NULL;
  }
  tpu_val_t x = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &n);
  tpu_val_t edges = by_edges ? tpu_op_tensor(b, op, 1) : tpu_hist_edges(b, op, x, bins);
  int64_t ne = bins + 1, nb[2] = {n, ne}, d0 = 0, d1 = 1;
  tpu_aval_t ha = tpu_aval_make(xa.dtype, 1, &bins);
  tpu_val_t hist = tpu_b_full(b, &ha, 0);
  if (n > 0) {
    tpu_val_t xe = tpu_b_broadcast_in_dim(b, x, 2, nb, &d0), ee = tpu_b_broadcast_in_dim(b, edges, 2, nb, &d1);
    tpu_val_t le = tpu_b_convert(b, tpu_b_compare(b, "LE", ee, xe), TPU_I64);
    tpu_val_t pos = tpu_nn_addc(b, tpu_b_reduce(b, le, tpu_b_const_i(b, TPU_I64, 0), 1, &d1, "stablehlo.add"), -1);
    tpu_val_t top = tpu_b_reshape(b, tpu_b_slice(b, edges, (int64_t[]){bins}, (int64_t[]){ne}, NULL), 0, NULL);
    tpu_val_t last = tpu_b_compare(b, "EQ", x, tpu_b_broadcast_in_dim(b, top, 1, &n, NULL));
    pos = tpu_b_select(b, last, tpu_ops_like(b, pos, (double)(bins - 1)), pos);
    tpu_val_t inside = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", pos, tpu_ops_like(b, pos, 0)),
                                    tpu_b_compare(b, "LT", pos, tpu_ops_like(b, pos, (double)bins)));
    tpu_val_t w = tpu_op_kind(op, wi) == TPU_ARG_TENSOR ? tpu_b_reshape(b, tpu_op_tensor(b, op, wi), 1, &n)
                                                          : tpu_ops_like(b, x, 1);
    w = tpu_b_select(b, inside, tpu_b_convert(b, w, xa.dtype), tpu_ops_like(b, x, 0));
    tpu_val_t at = tpu_b_select(b, inside, pos, tpu_ops_like(b, pos, 0));
    hist = tpu_idx_put_along(b, hist, 0, at, w, "stablehlo.add");
  }
  if (tpu_op_bool(op, di, false)) { /* density: hist / (total * bin width) */
    tpu_val_t widths = tpu_nn_sub(b, tpu_b_slice(b, edges, (int64_t[]){1}, (int64_t[]){ne}, NULL),
                                  tpu_b_slice(b, edges, (int64_t[]){0}, (int64_t[]){bins}, NULL));
    tpu_val_t total = tpu_b_reduce(b, hist, tpu_b_const(b, xa.dtype, 0), 1, &d0, "stablehlo.add");
    hist = tpu_nn_div(b, hist, tpu_nn_mul(b, widths, tpu_b_broadcast_in_dim(b, total, 1, &bins, NULL)));
  }
  outs[0] = hist;
  outs[1] = edges;
  *nouts = 2;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_histogram[] = {
    {"histogram", tpu_lower_histogram},
    {NULL, NULL},
};
