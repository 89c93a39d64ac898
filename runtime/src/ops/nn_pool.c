/* Lowerings: nn family — pooling (max / avg / adaptive avg / adaptive max, 2-d and
 * 3-d; the 1-d modules reach the device as 2-d ops).
 *
 * Inputs are [N, C, *spatial] or [C, *spatial]; the leading dims are flattened to
 * planes, P, so every window op works on [P, *spatial]. Windows are explicit:
 * the input is padded (or cropped) with tpu_b_pad to exactly the extent PyTorch's
 * windows cover, then stablehlo.reduce_window runs without padding. Max-pool
 * indices are flat per plane (h * W + w), like PyTorch; their backward is a
 * scatter-add, which serves max_pool and adaptive_max_pool alike. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "index.h"
#include "nn.h"

#define TPU_POOL_MAX_SP 3

typedef struct tpu_pool {
  const char* name; /* for messages: "max_pool2d" ... */
  int nsp;          /* spatial dims: 2 or 3 */
  tpu_aval_t x;     /* input */
  int64_t planes;
  int64_t in[TPU_POOL_MAX_SP], out[TPU_POOL_MAX_SP];
  int64_t k[TPU_POOL_MAX_SP], s[TPU_POOL_MAX_SP], p[TPU_POOL_MAX_SP], d[TPU_POOL_MAX_SP];
  int64_t hi[TPU_POOL_MAX_SP]; /* trailing pad so the last window ends exactly (may be < 0: crop) */
} tpu_pool_t;

static int tpu_pool_nsp(const tpu_op_t* op) { return strstr(tpu_op_name(op), "3d") ? 3 : 2; }

/* Reads an int[nsp] argument: one value repeats; `dflt` (may be NULL) when empty. */
static bool tpu_pool_ints(tpu_builder_t* b, const tpu_op_t* op, int i, int nsp, const int64_t* dflt, int64_t fill,
                          const char* what, const char* name, int64_t* out) {
  int64_t v[TPU_MAX_RANK];
  int n = tpu_op_ints(op, i, v, TPU_MAX_RANK);
  if (n == 0 && dflt) {
    memcpy(out, dflt, sizeof(int64_t) * (size_t)nsp);
    return true;
  }
  if (n == 0 && tpu_op_kind(op, i) == TPU_ARG_NONE) n = 1, v[0] = fill;
  if (n != 1 && n != nsp) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s must either be a single int, or a tuple of %d ints", name, what, nsp);
    return false;
  }
  for (int k = 0; k < nsp; ++k) out[k] = v[n == 1 ? 0 : k];
  return true;
}

/* Which integer inputs a pool takes besides floating point, as PyTorch's CPU
 * kernels: the forward max pools every integer type, the forward average pools
 * int64 (the window sum divided with truncation toward zero), the rest none. */
typedef enum { TPU_POOL_FLOATS, TPU_POOL_INT64, TPU_POOL_INTS } tpu_pool_ints_t;

static bool tpu_pool_int_ok(tpu_dtype_t t, tpu_pool_ints_t ints) {
  return (ints == TPU_POOL_INTS && tpu_dtype_is_int(t)) || (ints == TPU_POOL_INT64 && t == TPU_I64);
}

/* Input shape checks shared by all pools: [C, *sp] or [N, C, *sp], and its dtype. */
static bool tpu_pool_input(tpu_builder_t* b, const tpu_op_t* op, int self, tpu_pool_ints_t ints, tpu_pool_t* g) {
  g->name = tpu_op_name(op);
  g->nsp = tpu_pool_nsp(op);
  g->x = tpu_op_aval(op, self);
  char s0[256];
  int lead = g->x.rank - g->nsp;
  if (lead != 1 && lead != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected %dD or %dD (batch mode) tensor for input, but got: %s", g->name,
               g->nsp + 1, g->nsp + 2, tpu_nn_fmt_shape(s0, sizeof(s0), g->x.rank, g->x.dims));
    return false;
  }
  for (int i = 0; i < g->nsp; ++i) {
    g->in[i] = g->x.dims[lead + i];
    if (g->in[i] <= 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected input to have non-zero size for non-batch dimensions, but got %s",
                 g->name, tpu_nn_fmt_shape(s0, sizeof(s0), g->x.rank, g->x.dims));
      return false;
    }
  }
  if (!tpu_dtype_is_float(g->x.dtype) && !tpu_pool_int_ok(g->x.dtype, ints)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", g->name, tpu_dtype_name(g->x.dtype));
    return false;
  }
  g->planes = 1;
  for (int i = 0; i < lead; ++i) g->planes *= g->x.dims[i];
  return true;
}

/* PyTorch's pooling_output_shape, with its checks. Args from `kernel`: kernel,
 * stride, padding, [dilation when dil >= 0], ceil_mode at `ceil_i`. */
static bool tpu_pool_geom(tpu_builder_t* b, const tpu_op_t* op, int self, int kernel, int dil, int ceil_i,
                          tpu_pool_ints_t ints, tpu_pool_t* g) {
  if (!tpu_pool_input(b, op, self, ints, g)) return false;
  int n = g->nsp;
  if (!tpu_pool_ints(b, op, kernel, n, NULL, 1, "kernel_size", g->name, g->k) ||
      !tpu_pool_ints(b, op, kernel + 1, n, g->k, 1, "stride", g->name, g->s) ||
      !tpu_pool_ints(b, op, kernel + 2, n, NULL, 0, "padding", g->name, g->p))
    return false;
  if (dil >= 0) {
    if (!tpu_pool_ints(b, op, dil, n, NULL, 1, "dilation", g->name, g->d)) return false;
  } else {
    for (int i = 0; i < n; ++i) g->d[i] = 1;
  }
  bool ceil = tpu_op_bool(op, ceil_i, false);
  for (int i = 0; i < n; ++i) {
    if (g->k[i] <= 0 || g->s[i] <= 0 || g->d[i] <= 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: kernel size, stride and dilation should be greater than zero, but got "
                 "kernel_size=%" PRId64 " stride=%" PRId64 " dilation=%" PRId64, g->name, g->k[i], g->s[i], g->d[i]);
      return false;
    }
    if (g->p[i] < 0 || g->p[i] > g->k[i] / 2) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "pad should be at most half of effective kernel size, but got pad=%" PRId64
                 ", kernel_size=%" PRId64 " and dilation=%" PRId64, g->p[i], g->k[i], g->d[i]);
      return false;
    }
    int64_t ek = g->d[i] * (g->k[i] - 1) + 1;
    int64_t num = g->in[i] + 2 * g->p[i] - ek + (ceil ? g->s[i] - 1 : 0);
    int64_t o = (num >= 0 ? num / g->s[i] : -((-num + g->s[i] - 1) / g->s[i])) + 1;
    if (ceil && (o - 1) * g->s[i] >= g->in[i] + g->p[i]) --o;
    if (o < 1) {
      char s0[256];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Given input size %s, calculated output size is too small (%" PRId64 ")",
                 g->name, tpu_nn_fmt_shape(s0, sizeof(s0), g->x.rank, g->x.dims), o);
      return false;
    }
    g->out[i] = o;
    g->hi[i] = (o - 1) * g->s[i] + ek - g->in[i] - g->p[i];
  }
  return true;
}

/* Shapes: [P, *sp] of a pool (sp = in or out). */
static void tpu_pool_shape(const tpu_pool_t* g, const int64_t* sp, int64_t* dims) {
  dims[0] = g->planes;
  memcpy(dims + 1, sp, sizeof(int64_t) * (size_t)g->nsp);
}

/* The output shape of the op: the input's leading dims, then `sp`. */
static tpu_val_t tpu_pool_unplane(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, const int64_t* sp) {
  int64_t dims[TPU_MAX_RANK];
  int lead = g->x.rank - g->nsp;
  memcpy(dims, g->x.dims, sizeof(int64_t) * (size_t)lead);
  memcpy(dims + lead, sp, sizeof(int64_t) * (size_t)g->nsp);
  return tpu_b_reshape(b, v, g->x.rank, dims);
}

static tpu_val_t tpu_pool_planes(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, const int64_t* sp) {
  int64_t dims[TPU_MAX_RANK];
  tpu_pool_shape(g, sp, dims);
  return tpu_b_reshape(b, v, g->nsp + 1, dims);
}

/* Pads [P, *in] (or [*in] when `lead` is 0) to the windows' extent with `value`. */
static tpu_val_t tpu_pool_pad(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, int lead, tpu_val_t value) {
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0};
  for (int i = 0; i < g->nsp; ++i) lo[lead + i] = g->p[i], hi[lead + i] = g->hi[i];
  return tpu_b_pad(b, v, value, lo, hi, NULL);
}

/* stablehlo.reduce_window over already padded operands: ins = operands then inits. */
static void tpu_pool_window(tpu_builder_t* b, int nin, const tpu_val_t* ins, char* region, int lead,
                            const tpu_pool_t* g, const int64_t* k, const int64_t* s, const int64_t* d,
                            tpu_val_t* outs) {
  int64_t win[TPU_MAX_RANK], str[TPU_MAX_RANK], dil[TPU_MAX_RANK];
  tpu_aval_t av[2];
  for (int j = 0; j < nin; ++j) av[j] = *tpu_b_aval(b, ins[j]);
  for (int i = 0; i < lead + g->nsp; ++i) {
    bool sp = i >= lead;
    win[i] = sp ? k[i - lead] : 1;
    str[i] = sp ? s[i - lead] : 1;
    dil[i] = sp ? d[i - lead] : 1;
    for (int j = 0; j < nin; ++j) av[j].dims[i] = (av[j].dims[i] - (dil[i] * (win[i] - 1) + 1)) / str[i] + 1;
  }
  char attrs[1024], s0[256], s1[256], s2[256];
  int r = lead + g->nsp;
  snprintf(attrs, sizeof(attrs), "window_dimensions = %s, window_strides = %s, window_dilations = %s",
           tpu_fmt_i64_array(s0, sizeof(s0), r, win), tpu_fmt_i64_array(s1, sizeof(s1), r, str),
           tpu_fmt_i64_array(s2, sizeof(s2), r, dil));
  tpu_b_op(b, "stablehlo.reduce_window", 2 * nin, ins, 1, &region, attrs, nin, av, outs);
}

/* Sum of windows over padded `v` (zeros padding). */
static tpu_val_t tpu_pool_sum(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, int lead, const int64_t* k,
                              const int64_t* s) {
  tpu_dtype_t t = tpu_b_dtype(b, v);
  tpu_aval_t sc = tpu_aval_make(t, 0, NULL);
  tpu_aval_t rav[2] = {sc, sc};
  tpu_val_t init = tpu_b_const(b, t, 0), r[2];
  tpu_b_region_begin(b, 2, rav, r);
  tpu_val_t sum = tpu_nn_add(b, r[0], r[1]);
  char* region = tpu_b_region_end(b, 1, &sum);
  static const int64_t ones[TPU_POOL_MAX_SP] = {1, 1, 1};
  tpu_val_t ins[2] = {v, init}, out;
  tpu_pool_window(b, 1, ins, region, lead, g, k, s, ones, &out);
  return out;
}

/* (value, index) pairs: the larger value wins, NaN wins, ties go to the first index. */
static char* tpu_pool_argmax_region(tpu_builder_t* b, tpu_dtype_t t) {
  tpu_aval_t sv = tpu_aval_make(t, 0, NULL), si = tpu_aval_make(TPU_I64, 0, NULL);
  tpu_aval_t rav[4] = {sv, si, sv, si};
  tpu_val_t r[4];
  tpu_b_region_begin(b, 4, rav, r);
  tpu_val_t a_nan = tpu_b_compare(b, "NE", r[0], r[0]), b_nan = tpu_b_compare(b, "NE", r[2], r[2]);
  tpu_val_t first = tpu_b_compare(b, "LT", r[1], r[3]);
  tpu_val_t gt = tpu_b_compare(b, "GT", r[0], r[2]);
  tpu_val_t tie = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "EQ", r[0], r[2]), first);
  tpu_val_t both_nan = tpu_b_binary(b, "stablehlo.and", a_nan, b_nan);
  tpu_val_t pick = tpu_b_binary(b, "stablehlo.or", gt, tie);
  pick = tpu_b_binary(b, "stablehlo.or", pick, tpu_b_binary(b, "stablehlo.and", a_nan, tpu_b_unary(b, "stablehlo.not", b_nan)));
  pick = tpu_b_binary(b, "stablehlo.or", pick, tpu_b_binary(b, "stablehlo.and", both_nan, first));
  tpu_val_t rets[2] = {tpu_b_select(b, pick, r[0], r[2]), tpu_b_select(b, pick, r[1], r[3])};
  return tpu_b_region_end(b, 2, rets);
}

/* ------------------------------------------------------------------ max pool */

/* (max, argmax) of each window of arg `self` (geometry g): the values and the
 * flat per-plane indices, both [P, *out]. */
static void tpu_pool_argmax(tpu_builder_t* b, tpu_op_t* op, int self, const tpu_pool_t* g, tpu_val_t* res) {
  tpu_dtype_t t = g->x.dtype;
  int64_t flat[2] = {g->planes, 1};
  for (int i = 0; i < g->nsp; ++i) flat[1] *= g->in[i];
  tpu_val_t x = tpu_pool_planes(b, g, tpu_op_tensor(b, op, self), g->in);
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, flat);
  tpu_val_t idx = tpu_pool_planes(b, g, tpu_b_iota(b, &ia, 1), g->in);
  /* Padding never wins: -inf (an integer type's minimum) loses to every value or
   * ties it, and on ties the largest index loses. */
  tpu_val_t lowest = tpu_b_const_extreme(b, t, true), past = tpu_b_const_i(b, TPU_I64, INT64_MAX);
  tpu_val_t ins[4] = {tpu_pool_pad(b, g, x, 1, lowest), tpu_pool_pad(b, g, idx, 1, past), lowest, past};
  tpu_pool_window(b, 2, ins, tpu_pool_argmax_region(b, t), 1, g, g->k, g->s, g->d, res);
}

/* max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices) */
TPU_NN_LOWERING(max_pool_with_indices) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_pool_geom(b, op, 0, 1, 4, 5, TPU_POOL_INTS, &g)) return NULL;
  tpu_val_t res[2];
  tpu_pool_argmax(b, op, 0, &g, res);
  outs[0] = tpu_pool_unplane(b, &g, res[0], g.out);
  outs[1] = tpu_pool_unplane(b, &g, res[1], g.out);
  *nouts = 2;
  return NULL;
}

/* zeros[planes, plane] with zeros[p, idx[p, j]] (combined by `body`, NULL:
 * replaced) = upd[p, j]; upd and idx hold planes * m elements in any shape.
 * Out-of-range indices are dropped (stablehlo.scatter semantics). */
static tpu_val_t tpu_pool_scatter_planes(tpu_builder_t* b, tpu_val_t upd, tpu_val_t idx, int64_t planes, int64_t m,
                                         int64_t plane, const char* body) {
  int64_t pm[2] = {planes, m}, pm1[3] = {planes, m, 1}, pl[2] = {planes, plane};
  upd = tpu_b_reshape(b, upd, 2, pm);
  idx = tpu_b_reshape(b, tpu_b_convert(b, idx, TPU_I64), 3, pm1);
  tpu_aval_t pa = tpu_aval_make(TPU_I64, 3, pm1);
  tpu_val_t pairs[2] = {tpu_b_iota(b, &pa, 0), idx};
  tpu_val_t coords = tpu_b_concat(b, 2, pairs, 2);
  tpu_aval_t za = tpu_aval_make(tpu_b_dtype(b, upd), 2, pl);
  static const int64_t ins_dims[2] = {0, 1};
  tpu_scatter_dims_t sd = {0, NULL, 2, ins_dims, 2, ins_dims, 2};
  return tpu_b_scatter(b, tpu_b_full(b, &za, 0), coords, upd, &sd, body);
}

/* grad_input[plane, indices[plane, j]] += grad_output[plane, j], for the
 * max-pool family: (grad_output at `go`, self at `self`, the indices `ind`). */
static tpu_status_t* tpu_pool_scatter_grad(tpu_builder_t* b, tpu_op_t* op, int go, int self, tpu_val_t ind,
                                           tpu_val_t* outs, int* nouts) {
  if (!tpu_b_ok(b)) return NULL;
  tpu_aval_t x = tpu_op_aval(op, self), ga = tpu_op_aval(op, go), ia = *tpu_b_aval(b, ind);
  int nsp = tpu_pool_nsp(op), lead = x.rank - nsp;
  if (lead != 1 && lead != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: Expected %dD or %dD (batch mode) tensor for input", tpu_op_name(op),
               nsp + 1, nsp + 2);
    return NULL;
  }
  int64_t planes = 1, plane = 1;
  for (int i = 0; i < x.rank; ++i) *(i < lead ? &planes : &plane) *= x.dims[i];
  int64_t m = planes ? tpu_aval_numel(&ga) / planes : 0;
  if (tpu_aval_numel(&ga) != tpu_aval_numel(&ia) || m * planes != tpu_aval_numel(&ga)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: grad_output and indices must have the same shape", tpu_op_name(op));
    return NULL;
  }
  tpu_dtype_t ct = tpu_dtype_opmath(x.dtype);
  tpu_val_t gi = tpu_pool_scatter_planes(b, tpu_b_convert(b, tpu_op_tensor(b, op, go), ct), ind, planes, m, plane,
                                         "stablehlo.add");
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, gi, x.rank, x.dims), x.dtype), outs, nouts);
}

/* max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
 * ceil_mode, indices) */
TPU_NN_LOWERING(max_pool_with_indices_backward) {
  (void)max_outs;
  return tpu_pool_scatter_grad(b, op, 0, 1, tpu_op_tensor(b, op, 7), outs, nouts);
}

/* max_pool2d_backward(grad_output, self, kernel_size, stride, padding, dilation,
 * ceil_mode): no indices are given, so the argmax is recomputed from self the
 * way max_pool2d_with_indices finds it (first maximum, NaN wins). */
TPU_NN_LOWERING(max_pool_backward) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_pool_geom(b, op, 1, 2, 5, 6, TPU_POOL_FLOATS, &g)) return NULL;
  tpu_aval_t ga = tpu_op_aval(op, 0);
  int64_t want[TPU_MAX_RANK];
  int lead = g.x.rank - g.nsp;
  memcpy(want, g.x.dims, sizeof(int64_t) * (size_t)lead);
  memcpy(want + lead, g.out, sizeof(int64_t) * (size_t)g.nsp);
  if (ga.rank != g.x.rank || memcmp(ga.dims, want, sizeof(int64_t) * (size_t)ga.rank) != 0) {
    char s0[256], s1[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected grad_output of size %s, but got %s", g.name,
               tpu_nn_fmt_shape(s0, sizeof(s0), g.x.rank, want), tpu_nn_fmt_shape(s1, sizeof(s1), ga.rank, ga.dims));
    return NULL;
  }
  tpu_val_t res[2];
  tpu_pool_argmax(b, op, 1, &g, res);
  return tpu_pool_scatter_grad(b, op, 0, 1, res[1], outs, nouts);
}

/* ------------------------------------------------------------------ avg pool */

/* The divisor of each output window, [*out] in `ct`: divisor_override, or the
 * window's size clipped to the padded input (count_include_pad), or the number of
 * real input elements in it. */
static tpu_val_t tpu_avg_divisor(tpu_builder_t* b, const tpu_op_t* op, const tpu_pool_t* g, int cip, int dov,
                                 tpu_dtype_t ct) {
  if (tpu_op_kind(op, dov) == TPU_ARG_INT) {
    tpu_aval_t oa = tpu_aval_make(ct, g->nsp, g->out);
    return tpu_b_full(b, &oa, (double)tpu_op_int(op, dov, 1));
  }
  tpu_aval_t ia = tpu_aval_make(ct, g->nsp, g->in);
  tpu_val_t ones = tpu_b_full(b, &ia, 1);
  if (tpu_op_bool(op, cip, true)) {
    /* Padding counts, the ceil_mode overhang past it does not. */
    int64_t p[TPU_MAX_RANK], z[TPU_MAX_RANK] = {0}, h[TPU_MAX_RANK];
    for (int i = 0; i < g->nsp; ++i) p[i] = g->p[i], h[i] = g->hi[i] - g->p[i];
    ones = tpu_b_pad(b, ones, tpu_b_const(b, ct, 1), p, p, NULL);
    ones = tpu_b_pad(b, ones, tpu_b_const(b, ct, 0), z, h, NULL);
  } else {
    ones = tpu_pool_pad(b, g, ones, 0, tpu_b_const(b, ct, 0));
  }
  return tpu_pool_sum(b, g, ones, 0, g->k, g->s);
}

static bool tpu_avg_check_divisor(tpu_builder_t* b, const tpu_op_t* op, int dov) {
  if (tpu_op_kind(op, dov) != TPU_ARG_INT || tpu_op_int(op, dov, 1) != 0) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "divisor must be not zero");
  return false;
}

static tpu_val_t tpu_pool_bcast_planes(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, const int64_t* sp) {
  int64_t dims[TPU_MAX_RANK], bd[TPU_POOL_MAX_SP];
  tpu_pool_shape(g, sp, dims);
  for (int i = 0; i < g->nsp; ++i) bd[i] = i + 1;
  return tpu_b_broadcast_in_dim(b, v, g->nsp + 1, dims, bd);
}

/* Argument 0 (self or grad_output) converted to `ct`, as planes of spatial shape `sp`. */
static tpu_val_t tpu_pool_arg0_planes(tpu_builder_t* b, tpu_op_t* op, const tpu_pool_t* g, tpu_dtype_t ct,
                                      const int64_t* sp) {
  return tpu_pool_planes(b, g, tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct), sp);
}

/* Planes `v` of the output's spatial shape divided by the per-window `div` ([*out]). */
static tpu_val_t tpu_pool_div_planes(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, tpu_val_t div) {
  return tpu_nn_div(b, v, tpu_pool_bcast_planes(b, g, div, g->out));
}

/* avg_pool's geometry for self at `self` (kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override? follow it), with the divisor checked. */
static bool tpu_avg_geom(tpu_builder_t* b, const tpu_op_t* op, int self, tpu_pool_ints_t ints, tpu_pool_t* g) {
  return tpu_pool_geom(b, op, self, self + 1, -1, self + 4, ints, g) && tpu_avg_check_divisor(b, op, self + 6);
}

/* avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?) */
TPU_NN_LOWERING(avg_pool) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_avg_geom(b, op, 0, TPU_POOL_INT64, &g)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(g.x.dtype);
  tpu_val_t x = tpu_pool_arg0_planes(b, op, &g, ct, g.in);
  tpu_val_t sum = tpu_pool_sum(b, &g, tpu_pool_pad(b, &g, x, 1, tpu_b_const(b, ct, 0)), 1, g.k, g.s);
  tpu_val_t avg = tpu_pool_div_planes(b, &g, sum, tpu_avg_divisor(b, op, &g, 5, 6, ct));
  return tpu_ops_result1(tpu_b_convert(b, tpu_pool_unplane(b, &g, avg, g.out), g.x.dtype), outs, nouts);
}

/* avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode,
 * count_include_pad, divisor_override?): the transpose of the window sum — spread
 * grad / divisor back with an interior-dilated pad and a stride-1 window sum. */
TPU_NN_LOWERING(avg_pool_backward) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_avg_geom(b, op, 1, TPU_POOL_FLOATS, &g)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(g.x.dtype);
  tpu_val_t go = tpu_pool_arg0_planes(b, op, &g, ct, g.out);
  go = tpu_pool_div_planes(b, &g, go, tpu_avg_divisor(b, op, &g, 6, 7, ct));
  int64_t lo[TPU_MAX_RANK] = {0}, hi[TPU_MAX_RANK] = {0}, inner[TPU_MAX_RANK] = {0}, ones[TPU_POOL_MAX_SP];
  for (int i = 0; i < g.nsp; ++i) {
    lo[i + 1] = hi[i + 1] = g.k[i] - 1;
    inner[i + 1] = g.s[i] - 1;
    ones[i] = 1;
  }
  tpu_val_t zero = tpu_b_const(b, ct, 0);
  /* Gradient of the padded input, length (out - 1) * s + k = p + in + hi per dim. */
  tpu_val_t gp = tpu_pool_sum(b, &g, tpu_b_pad(b, go, zero, lo, hi, inner), 1, g.k, ones);
  /* Drop the padding, restore any cropped tail (its gradient is 0). */
  for (int i = 0; i < g.nsp; ++i) lo[i + 1] = -g.p[i], hi[i + 1] = -g.hi[i], inner[i + 1] = 0;
  gp = tpu_b_pad(b, gp, zero, lo, hi, NULL);
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, gp, g.x.rank, g.x.dims), g.x.dtype), outs, nouts);
}

/* ------------------------------------------------------------- adaptive pools */

/* Output sizes of an adaptive pool (arg `os`). */
static bool tpu_adaptive_geom(tpu_builder_t* b, const tpu_op_t* op, int self, int os, tpu_pool_t* g) {
  if (!tpu_pool_input(b, op, self, TPU_POOL_FLOATS, g)) return false;
  int64_t v[TPU_MAX_RANK];
  int n = tpu_op_ints(op, os, v, TPU_MAX_RANK);
  if (n != g->nsp) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: output_size must be %d", g->name, g->nsp);
    return false;
  }
  for (int i = 0; i < n; ++i) {
    if (v[i] < 0) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: elements of output_size must be greater than or equal to 0 but received %" PRId64,
                 g->name, v[i]);
      return false;
    }
    g->out[i] = v[i];
  }
  return true;
}

/* Bin o of dim i covers [floor(o * I / O), ceil((o + 1) * I / O)). As i64 values of
 * `shape` where dim `dim` indexes the bin. */
static void tpu_adaptive_bins(tpu_builder_t* b, const tpu_aval_t* shape, int dim, int64_t in, int64_t out,
                              tpu_val_t* start, tpu_val_t* end) {
  tpu_aval_t a = *shape;
  a.dtype = TPU_I64;
  tpu_val_t o = tpu_b_iota(b, &a, dim);
  tpu_val_t I = tpu_b_full(b, &a, (double)in), O = tpu_b_full(b, &a, (double)out);
  *start = tpu_nn_div(b, tpu_nn_mul(b, o, I), O);
  tpu_val_t o1 = tpu_nn_add(b, o, tpu_b_full(b, &a, 1));
  *end = tpu_nn_div(b, tpu_nn_add(b, tpu_nn_mul(b, o1, I), tpu_nn_sub(b, O, tpu_b_full(b, &a, 1))), O);
}

static bool tpu_adaptive_uniform(const tpu_pool_t* g) {
  for (int i = 0; i < g->nsp; ++i)
    if (g->out[i] == 0 || g->in[i] % g->out[i] != 0) return false;
  return true;
}

/* The 0/1 membership matrix [O, I] of dim i's bins, in ct. */
static tpu_val_t tpu_adaptive_matrix(tpu_builder_t* b, const tpu_pool_t* g, int i, tpu_dtype_t ct) {
  int64_t oi[2] = {g->out[i], g->in[i]};
  tpu_aval_t a = tpu_aval_make(TPU_I64, 2, oi);
  tpu_val_t start, end;
  tpu_adaptive_bins(b, &a, 0, g->in[i], g->out[i], &start, &end);
  tpu_val_t h = tpu_b_iota(b, &a, 1);
  tpu_val_t in_bin = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", h, start), tpu_b_compare(b, "LT", h, end));
  tpu_aval_t m = tpu_aval_make(ct, 2, oi);
  return tpu_b_select(b, in_bin, tpu_b_full(b, &m, 1), tpu_b_full(b, &m, 0));
}

/* Number of input elements of each output bin, [*out] in ct (product of the
 * per-dim bin sizes). */
static tpu_val_t tpu_adaptive_count(tpu_builder_t* b, const tpu_pool_t* g, tpu_dtype_t ct) {
  tpu_aval_t oa = tpu_aval_make(TPU_I64, g->nsp, g->out);
  tpu_val_t cnt = TPU_NOVAL;
  for (int i = 0; i < g->nsp; ++i) {
    tpu_val_t start, end;
    tpu_adaptive_bins(b, &oa, i, g->in[i], g->out[i], &start, &end);
    tpu_val_t c = tpu_b_convert(b, tpu_nn_sub(b, end, start), ct);
    cnt = i == 0 ? c : tpu_nn_mul(b, cnt, c);
  }
  return cnt;
}

/* Contracts each spatial dim of v ([P, *sp]) with its bin matrix: forward maps
 * in → out (contract the matrix's dim 1), backward out → in (dim 0). The
 * contracted dim moves to the end, so dim 1 is always the next one. */
static tpu_val_t tpu_adaptive_contract(tpu_builder_t* b, const tpu_pool_t* g, tpu_val_t v, tpu_dtype_t ct,
                                       bool backward) {
  for (int i = 0; i < g->nsp; ++i) {
    int64_t lc = 1, rc = backward ? 0 : 1;
    v = tpu_b_dot_general(b, v, tpu_adaptive_matrix(b, g, i, ct), 0, NULL, NULL, 1, &lc, &rc, ct);
  }
  return v;
}

/* _adaptive_avg_pool{2,3}d(self, output_size): a plain avg pool when the sizes
 * divide (exact window sums), else bin-matrix contractions. */
TPU_NN_LOWERING(adaptive_avg_pool) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_adaptive_geom(b, op, 0, 1, &g)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(g.x.dtype);
  tpu_val_t x = tpu_pool_arg0_planes(b, op, &g, ct, g.in);
  tpu_val_t y;
  if (tpu_adaptive_uniform(&g)) {
    int64_t k[TPU_POOL_MAX_SP];
    double n = 1;
    for (int i = 0; i < g.nsp; ++i) k[i] = g.in[i] / g.out[i], n *= (double)k[i];
    y = tpu_nn_mulc(b, tpu_pool_sum(b, &g, x, 1, k, k), 1.0 / n);
  } else {
    y = tpu_adaptive_contract(b, &g, x, ct, false);
    y = tpu_pool_div_planes(b, &g, y, tpu_adaptive_count(b, &g, ct));
  }
  return tpu_ops_result1(tpu_b_convert(b, tpu_pool_unplane(b, &g, y, g.out), g.x.dtype), outs, nouts);
}

/* _adaptive_avg_pool{2,3}d_backward(grad_output, self) */
TPU_NN_LOWERING(adaptive_avg_pool_backward) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_pool_input(b, op, 1, TPU_POOL_FLOATS, &g)) return NULL;
  tpu_aval_t ga = tpu_op_aval(op, 0);
  if (ga.rank != g.x.rank) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: grad_output and self must have the same rank", g.name);
    return NULL;
  }
  for (int i = 0; i < g.nsp; ++i) g.out[i] = ga.dims[ga.rank - g.nsp + i];
  tpu_dtype_t ct = tpu_dtype_opmath(g.x.dtype);
  tpu_val_t go = tpu_pool_arg0_planes(b, op, &g, ct, g.out);
  go = tpu_pool_div_planes(b, &g, go, tpu_adaptive_count(b, &g, ct));
  tpu_val_t gi = tpu_adaptive_contract(b, &g, go, ct, true);
  return tpu_ops_result1(tpu_b_convert(b, tpu_b_reshape(b, gi, g.x.rank, g.x.dims), g.x.dtype), outs, nouts);
}

/* adaptive_max_pool{2,3}d(self, output_size) -> (out, indices). Each bin is read
 * through a gather of its kmax = max bin size positions per dim (clamped to the
 * bin's last element, a duplicate that never changes the max nor the first
 * index), then an argmax over the kmax^nsp window. */
TPU_NN_LOWERING(adaptive_max_pool) {
  (void)max_outs;
  tpu_pool_t g;
  if (!tpu_adaptive_geom(b, op, 0, 1, &g)) return NULL;
  int n = g.nsp;
  int64_t km[TPU_POOL_MAX_SP];
  for (int i = 0; i < n; ++i) {
    if (g.out[i] == 0) {
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: output_size 0 is not supported", g.name);
      return NULL;
    }
    km[i] = 0;
    for (int64_t o = 0; o < g.out[i]; ++o) {
      int64_t s = o * g.in[i] / g.out[i], e = ((o + 1) * g.in[i] + g.out[i] - 1) / g.out[i];
      if (e - s > km[i]) km[i] = e - s;
    }
  }
  tpu_val_t v = tpu_pool_planes(b, &g, tpu_op_tensor(b, op, 0), g.in);
  /* Gather dim i+1: positions [O * kmax] = min(start_o + j, end_o - 1). */
  for (int i = 0; i < n; ++i) {
    int64_t ok[2] = {g.out[i], km[i]};
    tpu_aval_t a = tpu_aval_make(TPU_I64, 2, ok);
    tpu_val_t start, end;
    tpu_adaptive_bins(b, &a, 0, g.in[i], g.out[i], &start, &end);
    tpu_val_t pos = tpu_b_binary(b, "stablehlo.minimum", tpu_nn_add(b, start, tpu_b_iota(b, &a, 1)),
                                 tpu_nn_sub(b, end, tpu_b_full(b, &a, 1)));
    int64_t m1[2] = {g.out[i] * km[i], 1};
    pos = tpu_b_reshape(b, pos, 2, m1);
    tpu_aval_t cur = *tpu_b_aval(b, v), oa = cur;
    oa.dims[i + 1] = m1[0];
    int64_t offs[TPU_MAX_RANK], sizes[TPU_MAX_RANK], no = 0, dim = i + 1;
    for (int d = 0; d < cur.rank; ++d) {
      sizes[d] = d == dim ? 1 : cur.dims[d];
      if (d != dim) offs[no++] = d;
    }
    tpu_gather_dims_t gd = {(int)no, offs, 1, &dim, 1, &dim, 1, sizes};
    v = tpu_b_gather(b, v, pos, &gd, &oa);
  }
  /* [P, O1*k1, ...] → [P, O1, ..., k1, ...] → [P, O1, ..., K] */
  int64_t split[TPU_MAX_RANK], perm[TPU_MAX_RANK], win[TPU_MAX_RANK];
  split[0] = g.planes;
  perm[0] = 0;
  int64_t kk = 1;
  for (int i = 0; i < n; ++i) {
    split[1 + 2 * i] = g.out[i];
    split[2 + 2 * i] = km[i];
    perm[1 + i] = 1 + 2 * i;
    perm[1 + n + i] = 2 + 2 * i;
    kk *= km[i];
  }
  v = tpu_b_transpose(b, tpu_b_reshape(b, v, 1 + 2 * n, split), perm);
  tpu_pool_shape(&g, g.out, win);
  win[1 + n] = kk;
  tpu_val_t val, j;
  tpu_b_argreduce(b, tpu_b_reshape(b, v, 2 + n, win), 1 + n, true, &val, &j);
  /* window index j → input coordinates → flat index within the plane */
  int64_t od[TPU_MAX_RANK];
  tpu_pool_shape(&g, g.out, od);
  tpu_aval_t oa = tpu_aval_make(TPU_I64, 1 + n, od);
  tpu_val_t flat = tpu_b_full(b, &oa, 0);
  int64_t inner = kk;
  for (int i = 0; i < n; ++i) {
    inner /= km[i];
    tpu_val_t ji = tpu_nn_div(b, j, tpu_b_full(b, &oa, (double)inner));
    ji = tpu_b_binary(b, "stablehlo.remainder", ji, tpu_b_full(b, &oa, (double)km[i]));
    tpu_val_t start, end;
    tpu_adaptive_bins(b, &oa, 1 + i, g.in[i], g.out[i], &start, &end);
    tpu_val_t h = tpu_b_binary(b, "stablehlo.minimum", tpu_nn_add(b, start, ji), tpu_nn_sub(b, end, tpu_b_full(b, &oa, 1)));
    flat = tpu_nn_add(b, tpu_nn_mul(b, flat, tpu_b_full(b, &oa, (double)g.in[i])), h);
  }
  outs[0] = tpu_pool_unplane(b, &g, val, g.out);
  outs[1] = tpu_pool_unplane(b, &g, flat, g.out);
  *nouts = 2;
  return NULL;
}

/* adaptive_max_pool{2,3}d_backward(grad_output, self, indices) */
TPU_NN_LOWERING(adaptive_max_pool_backward) {
  (void)max_outs;
  return tpu_pool_scatter_grad(b, op, 0, 1, tpu_op_tensor(b, op, 2), outs, nouts);
}

/* ---------------------------------------------------------------- max unpool */

/* An index outside its output plane fails at the next sync with ATen's message
 * (naming the largest such index): CPU and CUDA refuse it, and the scatter would
 * drop the value without a word. */
static void tpu_unpool_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t idx, int64_t plane, int nsp,
                             const int64_t* osz) {
  tpu_aval_t a = *tpu_b_aval(b, idx);
  if (!tpu_b_ok(b) || tpu_aval_numel(&a) == 0) return;
  int64_t dims[TPU_MAX_RANK];
  for (int i = 0; i < a.rank; ++i) dims[i] = i;
  /* the largest index outside [0, plane), INT64_MIN when there is none */
  tpu_val_t low = tpu_b_const_i(b, TPU_I64, INT64_MIN);
  tpu_val_t inside = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", idx, tpu_b_full(b, &a, 0.0)),
                                  tpu_b_compare(b, "LT", idx, tpu_b_full(b, &a, (double)plane)));
  tpu_val_t only_bad = tpu_b_select(b, inside, tpu_b_broadcast_in_dim(b, low, a.rank, a.dims, NULL), idx);
  tpu_val_t value = tpu_b_reduce(b, only_bad, low, a.rank, dims, "stablehlo.maximum");
  tpu_val_t bad = tpu_idx_out_of_range(b, idx, plane);
  if (nsp == 2)
    tpu_op_check(b, op, bad, value, TPU_INVALID_ARGUMENT,
                 "Found an invalid max index: {} (output volumes are of size %" PRId64 "x%" PRId64 ")", osz[0], osz[1]);
  else
    tpu_op_check(b, op, bad, value, TPU_INVALID_ARGUMENT,
                 "Found an invalid max index: {} (output volumes are of size %" PRId64 "x%" PRId64 "x%" PRId64 ")",
                 osz[0], osz[1], osz[2]);
}

/* max_unpool2d(self, indices, output_size) and max_unpool3d(self, indices,
 * output_size, stride, padding): zeros of [*lead, *output_size] with each plane's
 * value put at its flat per-plane index (the inverse of max_pool's indices). */
TPU_NN_LOWERING(max_unpool) {
  (void)max_outs;
  tpu_aval_t x = tpu_op_aval(op, 0), ia = tpu_op_aval(op, 1);
  int nsp = tpu_pool_nsp(op), lead = x.rank - nsp;
  const char* name = tpu_op_name(op);
  int64_t osz[TPU_MAX_RANK];
  int n = tpu_op_ints(op, 2, osz, TPU_MAX_RANK);
  if (ia.dtype != TPU_I64) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "elements in indices should be type int64 but got: %s", tpu_dtype_name(ia.dtype));
    return NULL;
  }
  if (n != nsp) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "There should be exactly %d elements (height, width) in output_size, but got %d elements.",
               nsp, n);
    return NULL;
  }
  if (lead != 1 && lead != 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Input to %s should be a %dd or %dd Tensor, but got a tensor with %d dimensions.",
               name, nsp + 1, nsp + 2, x.rank);
    return NULL;
  }
  if (ia.rank != x.rank || memcmp(x.dims, ia.dims, sizeof(int64_t) * (size_t)x.rank) != 0) {
    char s0[256], s1[256];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected shape of indices to be same as that of the input tensor (%s) but got indices tensor with shape: %s",
               tpu_nn_fmt_shape(s0, sizeof(s0), x.rank, x.dims), tpu_nn_fmt_shape(s1, sizeof(s1), ia.rank, ia.dims));
    return NULL;
  }
  int64_t planes = 1, m = 1, plane = 1, dims[TPU_MAX_RANK];
  for (int i = 0; i < x.rank; ++i) *(i < lead ? &planes : &m) *= x.dims[i];
  for (int i = 0; i < nsp; ++i) plane *= osz[i];
  memcpy(dims, x.dims, sizeof(int64_t) * (size_t)lead);
  memcpy(dims + lead, osz, sizeof(int64_t) * (size_t)nsp);
  tpu_unpool_check(b, op, tpu_op_tensor(b, op, 1), plane, nsp, osz);
  tpu_val_t y = tpu_pool_scatter_planes(b, tpu_op_tensor(b, op, 0), tpu_op_tensor(b, op, 1), planes, m, plane, NULL);
  return tpu_ops_result1(tpu_b_reshape(b, y, x.rank, dims), outs, nouts);
}
