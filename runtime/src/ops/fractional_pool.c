/* Lowerings: fractional max pooling (nn.FractionalMaxPool2d/3d) —
 * fractional_max_pool{2,3}d and their backwards.
 *
 * Each (batch, channel) plane draws its window starts from its random samples
 * u (given: the op is deterministic in them) with ATen's generate_intervals:
 * start[i] = int((i + u) * alpha) - int(u * alpha), alpha = (in - k) / (out - 1),
 * the last window ending at the input's end; in the input's float type, as the
 * CPU kernel computes it. The starts are data, so the windows are read with
 * per-plane gathers, one per kernel offset; the max keeps the first maximum and
 * lets NaN win, and its index is the flat position in the plane. The backward
 * scatter-adds the gradient at those indices. */
#include <math.h>
#include <string.h>

#include "index.h"
#include "nn.h"

typedef struct tpu_fmp {
  int nd;               /* 2 or 3 spatial dims */
  bool batched;         /* input has a batch dim */
  int64_t n, c;
  int64_t in[3], out[3], k[3];
  int64_t plane_in, plane_out; /* products of in / out */
  tpu_dtype_t dtype, ct;
} tpu_fmp_t;

/* Shapes and checks for input (arg x) with kernel_size/output_size at args ks, os. */
static bool tpu_fmp_begin(tpu_builder_t* b, tpu_op_t* op, int x, int ks, int os, tpu_fmp_t* f) {
  memset(f, 0, sizeof(*f));
  f->nd = strstr(tpu_op_name(op), "3d") ? 3 : 2;
  tpu_aval_t a = tpu_op_aval(op, x);
  const char* name = f->nd == 3 ? "fractional_max_pool3d()" : "fractional_max_pool2d()";
  if (a.rank != f->nd + 1 && a.rank != f->nd + 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected %dD or %dD tensor, but got: %dD", name, f->nd + 1, f->nd + 2,
               a.rank);
    return false;
  }
  if (tpu_op_ints(op, ks, f->k, 3) != f->nd || tpu_op_ints(op, os, f->out, 3) != f->nd) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: kernel_size and output_size must have %d entries", name, f->nd);
    return false;
  }
  if (!tpu_dtype_is_float(a.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: dtype %s is not supported", name, tpu_dtype_name(a.dtype));
    return false;
  }
  f->batched = a.rank == f->nd + 2;
  int s0 = f->batched ? 2 : 1;
  f->n = f->batched ? a.dims[0] : 1;
  f->c = a.dims[s0 - 1];
  f->plane_in = f->plane_out = 1;
  static const char* const dim_names[3] = {"time", "height", "width"};
  for (int d = 0; d < f->nd; d++) {
    f->in[d] = a.dims[s0 + d];
    /* ATen: the 2-D check allows the window to end at the input's end, the 3-D one not */
    int64_t reach = f->out[d] + f->k[d] - 1;
    if ((f->nd == 2 ? reach > f->in[d] : reach >= f->in[d]) || f->k[d] <= 0) {
      const char* dn = dim_names[d + 3 - f->nd];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: pool %s %" PRId64 " too large relative to input %s %" PRId64, name,
                 dn, f->k[d], dn, f->in[d]);
      return false;
    }
    f->plane_in *= f->in[d];
    f->plane_out *= f->out[d];
  }
  f->dtype = a.dtype;
  f->ct = tpu_dtype_opmath(a.dtype);
  return true;
}

/* The window starts (N, C, out[d]) i64 of spatial dim d from samples (N, C, nd). */
static tpu_val_t tpu_fmp_starts(tpu_builder_t* b, const tpu_fmp_t* f, tpu_val_t samples, int d) {
  /* 2-D samples are (w, h); 3-D ones (t, h, w): ATen's order */
  int at = f->nd == 2 ? 1 - d : d;
  int64_t start[3] = {0, 0, at}, limit[3] = {f->n, f->c, at + 1}, nc[2] = {f->n, f->c};
  tpu_val_t u = tpu_b_reshape(b, tpu_b_slice(b, samples, start, limit, NULL), 2, nc);
  int64_t o = f->out[d], dims[3] = {f->n, f->c, o}, d01[2] = {0, 1};
  tpu_dtype_t st = tpu_b_dtype(b, u);
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 3, dims), fa = tpu_aval_make(st, 3, dims);
  tpu_val_t last = tpu_b_full(b, &ia, (double)(f->in[d] - f->k[d]));
  if (o <= 1) return last;
  double alpha_d = (double)(f->in[d] - f->k[d]) / (double)(o - 1);
  tpu_val_t alpha = tpu_b_full(b, &fa, st == TPU_F64 ? alpha_d : (double)(float)alpha_d);
  tpu_val_t u3 = tpu_b_broadcast_in_dim(b, u, 3, dims, d01);
  tpu_val_t i = tpu_b_convert(b, tpu_b_iota(b, &ia, 2), st);
  tpu_val_t a = tpu_b_convert(b, tpu_nn_mul(b, tpu_nn_add(b, i, u3), alpha), TPU_I64);
  tpu_val_t s = tpu_nn_sub(b, a, tpu_b_convert(b, tpu_nn_mul(b, u3, alpha), TPU_I64));
  return tpu_b_select(b, tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, 2), tpu_b_full(b, &ia, (double)(o - 1))), last, s);
}

/* The flat in-plane index (N, C, plane_out) of kernel offset `off` (one per dim). */
static tpu_val_t tpu_fmp_index(tpu_builder_t* b, const tpu_fmp_t* f, tpu_val_t* starts, const int64_t* off) {
  int64_t dims[2 + 3] = {f->n, f->c}, stride = 1;
  for (int d = 0; d < f->nd; d++) dims[2 + d] = f->out[d];
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2 + f->nd, dims);
  tpu_val_t idx = tpu_b_full(b, &ia, 0);
  for (int d = f->nd - 1; d >= 0; d--) {
    int64_t bd[3] = {0, 1, 2 + d};
    tpu_val_t pos = tpu_b_broadcast_in_dim(b, tpu_nn_addc(b, starts[d], (double)off[d]), 2 + f->nd, dims, bd);
    idx = tpu_nn_add(b, idx, tpu_nn_mulc(b, pos, (double)stride));
    stride *= f->in[d];
  }
  int64_t flat[3] = {f->n, f->c, f->plane_out};
  return tpu_b_reshape(b, idx, 3, flat);
}

/* fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples) -> (output, indices) */
static tpu_status_t* tpu_lower_fractional_max_pool(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                   int* nouts) {
  (void)max_outs;
  tpu_fmp_t f;
  if (!tpu_fmp_begin(b, op, 0, 1, 2, &f)) return tpu_b_take_error(b);
  tpu_val_t samples = tpu_op_tensor(b, op, 3), starts[3];
  for (int d = 0; d < f.nd; d++) starts[d] = tpu_fmp_starts(b, &f, samples, d);
  int64_t pin[3] = {f.n, f.c, f.plane_in};
  tpu_val_t x = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), f.ct), 3, pin);
  tpu_val_t best = TPU_NOVAL, arg = TPU_NOVAL;
  int64_t off[3] = {0, 0, 0};
  for (;;) { /* every kernel offset, the last dim fastest (ATen's scan order) */
    tpu_val_t idx = tpu_fmp_index(b, &f, starts, off);
    tpu_val_t v = tpu_idx_gather_dim(b, x, 2, idx);
    if (best == TPU_NOVAL) {
      best = v, arg = idx;
    } else { /* strictly greater, or NaN: ATen's `val > maxVal || isnan(val)` */
      tpu_val_t take = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "GT", v, best), tpu_b_compare(b, "NE", v, v));
      best = tpu_b_select(b, take, v, best);
      arg = tpu_b_select(b, take, idx, arg);
    }
    int d = f.nd - 1;
    while (d >= 0 && ++off[d] == f.k[d]) off[d--] = 0;
    if (d < 0 || !tpu_b_ok(b)) break;
  }
  tpu_aval_t oa = tpu_op_aval(op, 0);
  for (int d = 0; d < f.nd; d++) oa.dims[oa.rank - f.nd + d] = f.out[d];
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, best, oa.rank, oa.dims), f.dtype);
  outs[1] = tpu_b_reshape(b, arg, oa.rank, oa.dims);
  *nouts = 2;
  return tpu_b_take_error(b);
}

/* fractional_max_pool{2,3}d_backward(grad_output, self, kernel_size, output_size, indices) */
static tpu_status_t* tpu_lower_fractional_max_pool_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                            tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_fmp_t f;
  if (!tpu_fmp_begin(b, op, 1, 2, 3, &f)) return tpu_b_take_error(b);
  int64_t pin[3] = {f.n, f.c, f.plane_in}, pout[3] = {f.n, f.c, f.plane_out};
  tpu_aval_t za = tpu_aval_make(f.ct, 3, pin);
  tpu_val_t g = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), f.ct), 3, pout);
  tpu_val_t idx = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 4), TPU_I64), 3, pout);
  tpu_val_t r = tpu_idx_scatter_dim(b, tpu_b_full(b, &za, 0), 2, idx, g, "stablehlo.add");
  tpu_aval_t ia = tpu_op_aval(op, 1);
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, r, ia.rank, ia.dims), f.dtype);
  *nouts = 1;
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_fractional_pool[] = {
    {"fractional_max_pool2d", tpu_lower_fractional_max_pool},
    {"fractional_max_pool3d", tpu_lower_fractional_max_pool},
    {"fractional_max_pool2d_backward", tpu_lower_fractional_max_pool_backward},
    {"fractional_max_pool3d_backward", tpu_lower_fractional_max_pool_backward},
    {NULL, NULL},
};
