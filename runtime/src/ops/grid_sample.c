/* Lowerings: grid sampling (F.grid_sample) — grid_sampler_2d / grid_sampler_3d
 * and their backwards, for bilinear (trilinear in 3-D) and nearest
 * interpolation with zeros, border and reflection padding.
 *
 * One code path serves both ranks: the input is read channels-last (N, *S, C),
 * every output point's source coordinate is computed per spatial dim with
 * ATen's unnormalize-then-pad rule (grid_sampler_compute_source_index), and the
 * 2^D corners (one for nearest) are gathered with their weights, out-of-bounds
 * corners weighing 0. The backward scatters grad * weight back to the corners
 * (grad_input) and differentiates the weights through the padding rule
 * (grad_grid), as ATen's *_set_grad helpers do, so both gradients match the
 * CPU kernels. Bicubic (2-D only in PyTorch) is not lowered yet. */
#include <string.h>

#include "nn.h"

enum { TPU_GS_BILINEAR = 0, TPU_GS_NEAREST = 1, TPU_GS_BICUBIC = 2 };
enum { TPU_GS_ZEROS = 0, TPU_GS_BORDER = 1, TPU_GS_REFLECTION = 2 };

typedef struct tpu_gs {
  int nd;             /* spatial dims: 2 or 3 */
  int64_t n, c;       /* batch, channels */
  int64_t size[3];    /* input spatial sizes, in input order ((D,) H, W) */
  int64_t out[3];     /* output spatial sizes (the grid's) */
  int mode, padding;
  bool align;
  tpu_dtype_t dtype, ct;
  tpu_aval_t pts;     /* (N, *out) in ct: one value per output point */
  tpu_val_t src[3];   /* source coordinate per spatial dim */
  tpu_val_t dsrc[3];  /* d src / d grid component */
} tpu_gs_t;

static tpu_val_t tpu_gs_c(tpu_builder_t* b, const tpu_gs_t* g, double v) { return tpu_b_full(b, &g->pts, v); }

/* clip_coordinates(_set_grad): x clamped to [0, size - 1]; *grad (may be NULL)
 * multiplied by 0 where it clamped (at the bounds included, as ATen). */
static tpu_val_t tpu_gs_clip(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t x, int64_t size, tpu_val_t* grad) {
  tpu_val_t lo = tpu_gs_c(b, g, 0), hi = tpu_gs_c(b, g, (double)(size - 1));
  if (grad) {
    tpu_val_t inside = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GT", x, lo), tpu_b_compare(b, "LT", x, hi));
    *grad = tpu_b_select(b, inside, *grad, lo);
  }
  tpu_val_t ins[3] = {lo, x, hi};
  return tpu_b_op1(b, "stablehlo.clamp", 3, ins, NULL, &g->pts);
}

/* reflect_coordinates(_set_grad) over [twice_low / 2, twice_high / 2]. */
static tpu_val_t tpu_gs_reflect(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t x, int64_t twice_low,
                                int64_t twice_high, tpu_val_t* grad) {
  if (twice_low == twice_high) {
    if (grad) *grad = tpu_gs_c(b, g, 0);
    return tpu_gs_c(b, g, 0);
  }
  double mn = twice_low / 2.0, span = (twice_high - twice_low) / 2.0;
  tpu_val_t in = tpu_nn_sub(b, x, tpu_gs_c(b, g, mn));
  tpu_val_t neg = tpu_b_compare(b, "LT", in, tpu_gs_c(b, g, 0));
  tpu_val_t v = tpu_b_unary(b, "stablehlo.abs", in);
  tpu_val_t sp = tpu_gs_c(b, g, span);
  tpu_val_t extra = tpu_b_binary(b, "stablehlo.remainder", v, sp);
  tpu_val_t flips = tpu_b_unary(b, "stablehlo.floor", tpu_nn_div(b, v, sp));
  tpu_val_t half = tpu_b_unary(b, "stablehlo.floor", tpu_nn_mulc(b, flips, 0.5));
  tpu_val_t odd = tpu_b_compare(b, "NE", flips, tpu_nn_mulc(b, half, 2.0));
  if (grad) { /* +-1: the sign of (x - min), flipped on odd reflections */
    tpu_val_t s = tpu_b_select(b, neg, tpu_gs_c(b, g, -1), tpu_gs_c(b, g, 1));
    *grad = tpu_nn_mul(b, *grad, tpu_b_select(b, odd, tpu_b_unary(b, "stablehlo.negate", s), s));
  }
  tpu_val_t even_v = tpu_nn_addc(b, extra, mn);
  tpu_val_t odd_v = tpu_nn_addc(b, tpu_nn_sub(b, sp, extra), mn);
  return tpu_b_select(b, odd, odd_v, even_v);
}

/* grid_sampler_compute_source_index(_set_grad) for normalised coordinates c. */
static tpu_val_t tpu_gs_source(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t c, int64_t size, tpu_val_t* grad) {
  /* align: (c + 1) / 2 * (size - 1); else ((c + 1) * size - 1) / 2 */
  double scale = g->align ? (double)(size - 1) / 2.0 : (double)size / 2.0;
  tpu_val_t x = g->align ? tpu_nn_mulc(b, tpu_nn_addc(b, c, 1.0), scale)
                         : tpu_nn_mulc(b, tpu_nn_addc(b, tpu_nn_mulc(b, tpu_nn_addc(b, c, 1.0), (double)size), -1.0), 0.5);
  *grad = tpu_gs_c(b, g, scale);
  if (g->padding == TPU_GS_BORDER) x = tpu_gs_clip(b, g, x, size, grad);
  if (g->padding == TPU_GS_REFLECTION) {
    x = g->align ? tpu_gs_reflect(b, g, x, 0, 2 * (size - 1), grad) : tpu_gs_reflect(b, g, x, -1, 2 * size - 1, grad);
    x = tpu_gs_clip(b, g, x, size, grad);
  }
  return x;
}

/* Checks and shapes from input (arg i) and grid (arg i + 1) and the three
 * static args after them; the source coordinates. */
static bool tpu_gs_begin(tpu_builder_t* b, tpu_op_t* op, int i, int nd, tpu_gs_t* g) {
  memset(g, 0, sizeof(*g));
  tpu_aval_t in = tpu_op_aval(op, i), ga = tpu_op_aval(op, i + 1);
  g->nd = nd;
  g->mode = (int)tpu_op_int(op, i + 2, 0);
  g->padding = (int)tpu_op_int(op, i + 3, 0);
  g->align = tpu_op_bool(op, i + 4, false);
  if (in.rank != nd + 2 || ga.rank != nd + 2 || ga.dims[nd + 1] != nd || ga.dims[0] != in.dims[0]) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "grid_sampler(): expected %dD input and grid with same batch size and grid to have size %d in last "
               "dimension", nd + 2, nd);
    return false;
  }
  if (g->mode < 0 || g->mode > 2 || g->padding < 0 || g->padding > 2) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "grid_sampler(): unknown interpolation mode %d or padding mode %d", g->mode,
               g->padding);
    return false;
  }
  if (g->mode == TPU_GS_BICUBIC) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: bicubic interpolation is not supported on tpu yet", tpu_op_name(op));
    return false;
  }
  if (!tpu_dtype_is_float(in.dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "grid_sampler(): expected input to have floating point dtype");
    return false;
  }
  g->n = in.dims[0];
  g->c = in.dims[1];
  g->dtype = in.dtype;
  g->ct = tpu_dtype_opmath(in.dtype);
  int64_t pd[TPU_MAX_RANK] = {g->n};
  for (int k = 0; k < nd; k++) {
    g->size[k] = in.dims[2 + k];
    g->out[k] = ga.dims[1 + k];
    pd[1 + k] = g->out[k];
  }
  g->pts = tpu_aval_make(g->ct, nd + 1, pd);
  /* grid[..., j] holds the coordinate of spatial dim nd - 1 - j (x is the last dim). */
  tpu_val_t grid = tpu_b_convert(b, tpu_op_tensor(b, op, i + 1), g->ct);
  for (int k = 0; k < nd; k++) {
    int64_t start[TPU_MAX_RANK] = {0}, limit[TPU_MAX_RANK];
    for (int d = 0; d < nd + 1; d++) limit[d] = pd[d];
    start[nd + 1] = nd - 1 - k;
    limit[nd + 1] = nd - k;
    tpu_val_t comp = tpu_b_reshape(b, tpu_b_slice(b, grid, start, limit, NULL), nd + 1, pd);
    g->src[k] = tpu_gs_source(b, g, comp, g->size[k], &g->dsrc[k]);
  }
  return tpu_b_ok(b);
}

/* One corner: integer coordinates (float-valued, per spatial dim) and weight. */
typedef struct tpu_gs_corner {
  tpu_val_t at[3];
  tpu_val_t w;         /* 0 where the corner is out of bounds */
  tpu_val_t dw[3];     /* d w / d src[k] (bilinear only) */
} tpu_gs_corner_t;

/* Corner `bits` (bit k: the upper neighbour along dim k) of the bilinear cell,
 * or the nearest point. */
static void tpu_gs_corner(tpu_builder_t* b, const tpu_gs_t* g, unsigned bits, tpu_gs_corner_t* cr) {
  tpu_val_t wk[3], inb = TPU_NOVAL;
  for (int k = 0; k < g->nd; k++) {
    if (g->mode == TPU_GS_NEAREST) { /* round half to even, like nearbyint */
      cr->at[k] = tpu_b_unary(b, "stablehlo.round_nearest_even", g->src[k]);
      wk[k] = tpu_gs_c(b, g, 1);
    } else {
      tpu_val_t lo = tpu_b_unary(b, "stablehlo.floor", g->src[k]);
      bool up = (bits >> k) & 1;
      cr->at[k] = up ? tpu_nn_addc(b, lo, 1) : lo;
      /* upper: src - lo; lower: lo + 1 - src */
      wk[k] = up ? tpu_nn_sub(b, g->src[k], lo) : tpu_nn_sub(b, tpu_nn_addc(b, lo, 1), g->src[k]);
    }
    tpu_val_t ok = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", cr->at[k], tpu_gs_c(b, g, 0)),
                                tpu_b_compare(b, "LE", cr->at[k], tpu_gs_c(b, g, (double)(g->size[k] - 1))));
    inb = k == 0 ? ok : tpu_b_binary(b, "stablehlo.and", inb, ok);
  }
  tpu_val_t zero = tpu_gs_c(b, g, 0);
  tpu_val_t w = wk[0];
  for (int k = 1; k < g->nd; k++) w = tpu_nn_mul(b, w, wk[k]);
  cr->w = tpu_b_select(b, inb, w, zero);
  for (int k = 0; k < g->nd && g->mode == TPU_GS_BILINEAR; k++) {
    tpu_val_t d = tpu_gs_c(b, g, ((bits >> k) & 1) ? 1.0 : -1.0);
    for (int j = 0; j < g->nd; j++)
      if (j != k) d = tpu_nn_mul(b, d, wk[j]);
    cr->dw[k] = tpu_b_select(b, inb, d, zero);
  }
}

/* The gather/scatter indices (N, *out, 1 + nd) of a corner: [n, at...] clamped in range. */
static tpu_val_t tpu_gs_index(tpu_builder_t* b, const tpu_gs_t* g, const tpu_gs_corner_t* cr) {
  int r = g->nd + 1;
  int64_t d1[TPU_MAX_RANK];
  memcpy(d1, g->pts.dims, sizeof(int64_t) * (size_t)r);
  d1[r] = 1;
  tpu_aval_t ia = g->pts;
  ia.dtype = TPU_I64;
  tpu_val_t parts[4];
  parts[0] = tpu_b_reshape(b, tpu_b_iota(b, &ia, 0), r + 1, d1);
  for (int k = 0; k < g->nd; k++) {
    tpu_val_t lo = tpu_gs_c(b, g, 0), hi = tpu_gs_c(b, g, (double)(g->size[k] - 1));
    tpu_val_t ins[3] = {lo, cr->at[k], hi};
    tpu_val_t cl = tpu_b_op1(b, "stablehlo.clamp", 3, ins, NULL, &g->pts);
    parts[1 + k] = tpu_b_reshape(b, tpu_b_convert(b, cl, TPU_I64), r + 1, d1);
  }
  return tpu_b_concat(b, 1 + g->nd, parts, r);
}

/* The input (arg i) channels-last, (N, *S, C) in ct. */
static tpu_val_t tpu_gs_channels_last(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_gs_t* g) {
  int64_t perm[TPU_MAX_RANK];
  perm[0] = 0;
  for (int k = 0; k < g->nd; k++) perm[1 + k] = 2 + k;
  perm[g->nd + 1] = 1;
  return tpu_b_transpose(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), g->ct), perm);
}

/* (N, *X, C) back to (N, C, *X) in the input dtype. */
static tpu_val_t tpu_gs_channels_first(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t x) {
  int64_t perm[TPU_MAX_RANK];
  perm[0] = 0;
  perm[1] = g->nd + 1;
  for (int k = 0; k < g->nd; k++) perm[2 + k] = 1 + k;
  return tpu_b_convert(b, tpu_b_transpose(b, x, perm), g->dtype);
}

/* A per-point value (N, *out) broadcast over the channels (N, *out, C). */
static tpu_val_t tpu_gs_over_c(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t v) {
  int r = g->nd + 1;
  int64_t dims[TPU_MAX_RANK], bd[TPU_MAX_RANK];
  for (int d = 0; d < r; d++) dims[d] = g->pts.dims[d], bd[d] = d;
  dims[r] = g->c;
  return tpu_b_broadcast_in_dim(b, v, r + 1, dims, bd);
}

/* The values (N, *out, C) of the channels-last input at a corner's index. */
static tpu_val_t tpu_gs_gather(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t cl, tpu_val_t idx) {
  int r = g->nd + 1;
  int64_t off = r, coll[4], slice[TPU_MAX_RANK], dims[TPU_MAX_RANK];
  for (int d = 0; d < r; d++) coll[d] = d, slice[d] = 1, dims[d] = g->pts.dims[d];
  slice[r] = g->c;
  dims[r] = g->c;
  tpu_gather_dims_t gd = {1, &off, r, coll, r, coll, r, slice};
  tpu_aval_t oa = tpu_aval_make(g->ct, r + 1, dims);
  return tpu_b_gather(b, cl, idx, &gd, &oa);
}

/* 2 or 3 spatial dims, from the op's name. */
static int tpu_gs_rank(const tpu_op_t* op) { return strstr(tpu_op_name(op), "_3d") ? 3 : 2; }

static int tpu_gs_ncorners(const tpu_gs_t* g) { return g->mode == TPU_GS_NEAREST ? 1 : 1 << g->nd; }

/* An empty input or output: nothing to gather (zeros of the right shapes). */
static bool tpu_gs_empty(const tpu_gs_t* g) {
  int64_t n = g->n * g->c;
  for (int k = 0; k < g->nd; k++) n *= g->size[k] * g->out[k];
  return n == 0;
}

/* grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners) */
static tpu_status_t* tpu_lower_grid_sampler(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                            int* nouts) {
  (void)max_outs;
  tpu_gs_t g;
  if (!tpu_gs_begin(b, op, 0, tpu_gs_rank(op), &g)) return tpu_b_take_error(b);
  int64_t od[TPU_MAX_RANK] = {g.n, g.c};
  for (int k = 0; k < g.nd; k++) od[2 + k] = g.out[k];
  tpu_aval_t oa = tpu_aval_make(g.dtype, g.nd + 2, od);
  *nouts = 1;
  if (tpu_gs_empty(&g)) {
    outs[0] = tpu_b_full(b, &oa, 0);
    return tpu_b_take_error(b);
  }
  tpu_val_t cl = tpu_gs_channels_last(b, op, 0, &g), acc = TPU_NOVAL;
  for (int cix = 0; cix < tpu_gs_ncorners(&g); cix++) {
    tpu_gs_corner_t cr;
    tpu_gs_corner(b, &g, (unsigned)cix, &cr);
    tpu_val_t v = tpu_nn_mul(b, tpu_gs_gather(b, &g, cl, tpu_gs_index(b, &g, &cr)), tpu_gs_over_c(b, &g, cr.w));
    acc = cix == 0 ? v : tpu_nn_add(b, acc, v);
  }
  outs[0] = tpu_gs_channels_first(b, &g, acc);
  return tpu_b_take_error(b);
}

/* The output_mask (arg i, bool[2]); both true when absent. */
static void tpu_gs_mask(const tpu_op_t* op, int i, bool mask[2]) {
  mask[0] = mask[1] = true;
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (a && a->kind == TPU_ARG_BOOL_LIST)
    for (int k = 0; k < 2 && k < a->u.list.n; k++) mask[k] = a->u.list.bools[k];
}

/* grad_grid (N, *out, nd) from per-dim point gradients d[k] (source coordinates). */
static tpu_val_t tpu_gs_grid_grad(tpu_builder_t* b, const tpu_gs_t* g, tpu_val_t* d) {
  int r = g->nd + 1;
  int64_t d1[TPU_MAX_RANK];
  memcpy(d1, g->pts.dims, sizeof(int64_t) * (size_t)r);
  d1[r] = 1;
  tpu_val_t parts[3];
  for (int j = 0; j < g->nd; j++) { /* component j is spatial dim nd - 1 - j */
    int k = g->nd - 1 - j;
    parts[j] = tpu_b_reshape(b, tpu_nn_mul(b, d[k], g->dsrc[k]), r + 1, d1);
  }
  return tpu_b_convert(b, tpu_b_concat(b, g->nd, parts, r), g->dtype);
}

/* grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode,
 * padding_mode, align_corners, output_mask) -> (grad_input, grad_grid) */
static tpu_status_t* tpu_lower_grid_sampler_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                     int* nouts) {
  (void)max_outs;
  tpu_gs_t g;
  if (!tpu_gs_begin(b, op, 1, tpu_gs_rank(op), &g)) return tpu_b_take_error(b);
  bool mask[2];
  tpu_gs_mask(op, 6, mask);
  tpu_aval_t in = tpu_op_aval(op, 1), ga = tpu_op_aval(op, 2);
  ga.dtype = g.dtype;
  *nouts = 2;
  outs[0] = tpu_b_full(b, &in, 0);
  outs[1] = tpu_b_full(b, &ga, 0);
  if (tpu_gs_empty(&g)) return tpu_b_take_error(b);
  tpu_val_t go = tpu_gs_channels_last(b, op, 0, &g), cl = tpu_gs_channels_last(b, op, 1, &g);
  int64_t sd[TPU_MAX_RANK] = {g.n};
  for (int k = 0; k < g.nd; k++) sd[1 + k] = g.size[k];
  sd[g.nd + 1] = g.c;
  tpu_aval_t sa = tpu_aval_make(g.ct, g.nd + 2, sd);
  tpu_val_t gin = tpu_b_full(b, &sa, 0), dpt[3];
  bool want_grid = mask[1] && g.mode == TPU_GS_BILINEAR;
  for (int cix = 0; cix < tpu_gs_ncorners(&g); cix++) {
    tpu_gs_corner_t cr;
    tpu_gs_corner(b, &g, (unsigned)cix, &cr);
    tpu_val_t idx = tpu_gs_index(b, &g, &cr);
    if (mask[0]) {
      int r = g.nd + 1;
      int64_t win = r, ins[4];
      for (int d = 0; d < r; d++) ins[d] = d;
      tpu_scatter_dims_t sdim = {1, &win, r, ins, r, ins, r};
      gin = tpu_b_scatter(b, gin, idx, tpu_nn_mul(b, go, tpu_gs_over_c(b, &g, cr.w)), &sdim, "stablehlo.add");
    }
    if (want_grid) { /* sum over C of grad * value, times d w / d src */
      int64_t last = g.nd + 1;
      tpu_val_t gv = tpu_nn_sum(b, tpu_nn_mul(b, go, tpu_gs_gather(b, &g, cl, idx)), 1, &last);
      for (int k = 0; k < g.nd; k++) {
        tpu_val_t t = tpu_nn_mul(b, gv, cr.dw[k]);
        dpt[k] = cix == 0 ? t : tpu_nn_add(b, dpt[k], t);
      }
    }
  }
  if (mask[0]) outs[0] = tpu_gs_channels_first(b, &g, gin);
  if (want_grid) outs[1] = tpu_gs_grid_grad(b, &g, dpt);
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_grid_sample[] = {
    {"grid_sampler_2d", tpu_lower_grid_sampler},
    {"grid_sampler_3d", tpu_lower_grid_sampler},
    {"grid_sampler_2d_backward", tpu_lower_grid_sampler_backward},
    {"grid_sampler_3d_backward", tpu_lower_grid_sampler_backward},
    {NULL, NULL},
};
