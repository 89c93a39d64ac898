/* Lowerings: torch.segment_reduce — segment_reduce and _segment_reduce_backward.
 *
 * data is viewed as (B, L, R): B the dims before `axis`, L the axis, R the dims
 * after. Segments come from lengths (B, S) or offsets (B, S + 1); segment s of
 * row b covers [start, start + len). Membership is the mask M (B, S, L), so the
 * sums are one batched product M @ data and max/min/prod reduce a masked
 * (B, S, L, R) view; there is no data-dependent shape. Semantics follow ATen's
 * CPU kernel: `initial` joins every reduction (sum adds it, prod multiplies,
 * max/min compare, mean adds it before dividing by the length) and is the value
 * of an empty segment (else 0, 1, -inf, +inf, NaN). The backward gives max/min
 * ties an equal share and handles prod's zeros exactly. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "index.h"
#include "matrix.h"
#include "nn.h"

typedef enum { TPU_SEG_SUM, TPU_SEG_MEAN, TPU_SEG_MAX, TPU_SEG_MIN, TPU_SEG_PROD } tpu_seg_kind_t;

typedef struct tpu_seg {
  tpu_seg_kind_t kind;
  int axis;
  int64_t nb, l, r, s; /* rows, axis length, inner size, segments */
  tpu_aval_t data;     /* as given */
  tpu_dtype_t ct;
  bool has_initial;
  tpu_val_t initial;   /* 0-d in ct, or NOVAL */
  tpu_val_t len;       /* (B, S) in ct */
  tpu_val_t mask;      /* (B, S, L) i1 */
} tpu_seg_t;

static bool tpu_seg_kind(tpu_builder_t* b, const char* name, tpu_seg_kind_t* out) {
  static const char* const names[] = {"sum", "mean", "max", "min", "prod"};
  for (int i = 0; i < 5; i++)
    if (strcmp(name, names[i]) == 0) {
      *out = (tpu_seg_kind_t)i;
      return true;
    }
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "segment_reduce: unsupported reduction %s", name);
  return false;
}

/* Starts and lengths (B, S) i64 from lengths (arg il) or offsets (arg io). */
static bool tpu_seg_bounds(tpu_builder_t* b, tpu_op_t* op, int il, int io, tpu_seg_t* g, tpu_val_t* start,
                           tpu_val_t* len) {
  bool by_len = tpu_op_kind(op, il) == TPU_ARG_TENSOR;
  if (!by_len && tpu_op_kind(op, io) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "segment_reduce(): Either lengths or offsets must be defined");
    return false;
  }
  int at = by_len ? il : io;
  tpu_aval_t la = tpu_op_aval(op, at);
  if (la.rank != g->axis + 1 || la.dims[la.rank - 1] < (by_len ? 0 : 1)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "segment_reduce(): Expected %s to have %d dims", by_len ? "lengths" : "offsets",
               g->axis + 1);
    return false;
  }
  g->s = la.dims[la.rank - 1] - (by_len ? 0 : 1);
  int64_t bs[2] = {g->nb, la.dims[la.rank - 1]};
  tpu_val_t v = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, at), TPU_I64), 2, bs);
  if (by_len) {
    *len = v;
    *start = tpu_nn_sub(b, tpu_idx_cumsum(b, v, 1), v);
  } else {
    *start = tpu_mx_slice(b, v, 1, 0, g->s);
    *len = tpu_nn_sub(b, tpu_mx_slice(b, v, 1, 1, g->s + 1), *start);
  }
  return true;
}

/* The unsafe=False checks: lengths >= 0, every row summing to L. */
static void tpu_seg_check(tpu_builder_t* b, tpu_op_t* op, const tpu_seg_t* g, tpu_val_t len) {
  int64_t both[2] = {0, 1}, d1 = 1;
  tpu_val_t neg = tpu_b_reduce(b, tpu_b_compare(b, "LT", len, tpu_ops_like(b, len, 0)), tpu_b_const_i(b, TPU_BOOL, 0),
                               2, both, "stablehlo.or");
  tpu_op_check(b, op, neg, TPU_NOVAL, TPU_INVALID_ARGUMENT, "lengths contains negative value!");
  tpu_val_t tot = tpu_b_reduce(b, len, tpu_b_const_i(b, TPU_I64, 0), 1, &d1, "stablehlo.add");
  tpu_val_t off = tpu_b_compare(b, "NE", tot, tpu_ops_like(b, tot, (double)g->l));
  int64_t d0 = 0;
  tpu_op_check(b, op, tpu_b_reduce(b, off, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d0, "stablehlo.or"), TPU_NOVAL,
               TPU_INVALID_ARGUMENT,
               "Expected all rows of lengths along axis to sum to data.size(lengths.dim()-1) when !unsafe.");
}

/* Shapes, kind, initial, lengths and the mask. Args from `data`: data, reduce,
 * then (by name) lengths il, offsets io, axis ia, initial ii; unsafe iu (-1: none). */
static bool tpu_seg_begin(tpu_builder_t* b, tpu_op_t* op, int data, int reduce, const int* at, tpu_seg_t* g) {
  memset(g, 0, sizeof(*g));
  g->data = tpu_op_aval(op, data);
  const tpu_arg_t* ra = tpu_op_arg(op, reduce);
  if (!ra || ra->kind != TPU_ARG_STRING || !tpu_seg_kind(b, ra->u.str, &g->kind)) {
    if (tpu_b_ok(b)) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "segment_reduce: reduce must be a string");
    return false;
  }
  if (!tpu_dtype_is_float(g->data.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "segment_reduce: dtype %s is not supported", tpu_dtype_name(g->data.dtype));
    return false;
  }
  g->axis = tpu_ops_dim(b, tpu_op_int(op, at[2], 0), g->data.rank);
  if (!tpu_b_ok(b)) return false;
  g->nb = g->r = 1;
  for (int i = 0; i < g->data.rank; i++) {
    if (i < g->axis) g->nb *= g->data.dims[i];
    if (i > g->axis) g->r *= g->data.dims[i];
  }
  g->l = g->data.dims[g->axis];
  g->ct = tpu_dtype_opmath(g->data.dtype);
  g->has_initial = tpu_ops_has_value(op, at[3]);
  g->initial = g->has_initial ? tpu_op_scalar(b, op, at[3], g->ct) : TPU_NOVAL;
  tpu_val_t start, len;
  if (!tpu_seg_bounds(b, op, at[0], at[1], g, &start, &len)) return false;
  if (at[4] >= 0 && !tpu_op_bool(op, at[4], false)) tpu_seg_check(b, op, g, len);
  int64_t bsl[3] = {g->nb, g->s, g->l}, d01[2] = {0, 1};
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 3, bsl);
  tpu_val_t pos = tpu_b_iota(b, &ia, 2);
  tpu_val_t lo = tpu_b_broadcast_in_dim(b, start, 3, bsl, d01);
  tpu_val_t hi = tpu_b_broadcast_in_dim(b, tpu_nn_add(b, start, len), 3, bsl, d01);
  g->mask = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GE", pos, lo), tpu_b_compare(b, "LT", pos, hi));
  g->len = tpu_b_convert(b, len, g->ct);
  return tpu_b_ok(b);
}

/* Arg i (data's shape) as (B, L, R) in ct. */
static tpu_val_t tpu_seg_rows(tpu_builder_t* b, tpu_op_t* op, int i, const tpu_seg_t* g) {
  int64_t blr[3] = {g->nb, g->l, g->r};
  return tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), g->ct), 3, blr);
}

/* A (B, S, R) value back to data's shape with the axis of size S. */
static tpu_val_t tpu_seg_out_shape(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t v) {
  tpu_aval_t oa = g->data;
  oa.dims[g->axis] = g->s;
  return tpu_b_convert(b, tpu_b_reshape(b, v, oa.rank, oa.dims), g->data.dtype);
}

/* (B, S, L) -> (B, S, L, R) and (B, L, R) -> (B, S, L, R). */
static tpu_val_t tpu_seg_4d(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t v, bool is_mask) {
  int64_t d4[4] = {g->nb, g->s, g->l, g->r}, m[3] = {0, 1, 2}, x[3] = {0, 2, 3};
  return tpu_b_broadcast_in_dim(b, v, 4, d4, is_mask ? m : x);
}

/* A (B, S) value broadcast over R: (B, S, R). */
static tpu_val_t tpu_seg_over_r(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t v) {
  int64_t d3[3] = {g->nb, g->s, g->r}, d01[2] = {0, 1};
  return tpu_b_broadcast_in_dim(b, v, 3, d3, d01);
}

/* M @ x over L, batched over B: (B, S, L) x (B, L, R) -> (B, S, R). */
static tpu_val_t tpu_seg_sum(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t x) {
  int64_t bd = 0, mc = 2, xc = 1;
  return tpu_b_dot_general(b, tpu_b_convert(b, g->mask, g->ct), x, 1, &bd, &bd, 1, &mc, &xc, g->ct);
}

/* max/min/prod: the masked reduction over L with its identity, then initial. */
static tpu_val_t tpu_seg_fold(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t x) {
  static const char* const body[] = {NULL, NULL, "stablehlo.maximum", "stablehlo.minimum", "stablehlo.multiply"};
  double id = g->kind == TPU_SEG_MAX ? -INFINITY : g->kind == TPU_SEG_MIN ? INFINITY : 1.0;
  tpu_val_t x4 = tpu_seg_4d(b, g, x, false);
  tpu_val_t m = tpu_b_select(b, tpu_seg_4d(b, g, g->mask, true), x4, tpu_ops_like(b, x4, id));
  int64_t d2 = 2;
  tpu_val_t r = tpu_b_reduce(b, m, tpu_b_const(b, g->ct, id), 1, &d2, body[g->kind]);
  if (g->has_initial) r = tpu_b_binary(b, body[g->kind], r, tpu_nn_bcast0(b, g->initial, r));
  return r;
}

/* segment_reduce(data, reduce, *, lengths, indices, offsets, axis, unsafe, initial) */
static tpu_status_t* tpu_lower_segment_reduce(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                              int* nouts) {
  (void)max_outs;
  if (tpu_op_kind(op, 3) == TPU_ARG_TENSOR)
    return TPU_STATUS(TPU_UNIMPLEMENTED, "segment_reduce(): indices based reduction is not supported yet.");
  static const int at[5] = {2, 4, 5, 7, 6}; /* lengths, offsets, axis, initial, unsafe */
  tpu_seg_t g;
  if (!tpu_seg_begin(b, op, 0, 1, at, &g)) return tpu_b_take_error(b);
  tpu_val_t x = tpu_seg_rows(b, op, 0, &g), r;
  if (g.kind == TPU_SEG_SUM || g.kind == TPU_SEG_MEAN) {
    r = tpu_seg_sum(b, &g, x);
    if (g.has_initial) r = tpu_nn_add(b, r, tpu_nn_bcast0(b, g.initial, r));
    if (g.kind == TPU_SEG_MEAN) {
      tpu_val_t len = tpu_seg_over_r(b, &g, g.len);
      tpu_val_t mean = tpu_nn_div(b, r, len); /* empty: 0/0 = NaN, as without initial */
      r = g.has_initial ? tpu_b_select(b, tpu_b_compare(b, "EQ", len, tpu_ops_like(b, len, 0)), r, mean) : mean;
    }
  } else {
    r = tpu_seg_fold(b, &g, x);
  }
  outs[0] = tpu_seg_out_shape(b, &g, r);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* Sums a (B, S, L, R) value over S: each position is in at most one segment. */
static tpu_val_t tpu_seg_to_rows(tpu_builder_t* b, tpu_val_t v4) {
  int64_t d1 = 1;
  return tpu_nn_sum(b, v4, 1, &d1);
}

/* prod's gradient per element: out / x where the segment has no zero; where it
 * has exactly one, the zero element gets the product of the others (and
 * initial), the others 0; with more zeros everything is 0. */
static tpu_val_t tpu_seg_prod_grad(tpu_builder_t* b, const tpu_seg_t* g, tpu_val_t x4, tpu_val_t m4, tpu_val_t out4) {
  tpu_val_t zero = tpu_ops_like(b, x4, 0), one = tpu_ops_like(b, x4, 1);
  tpu_val_t is0 = tpu_b_compare(b, "EQ", x4, zero);
  int64_t d2 = 2;
  tpu_val_t zeros = tpu_b_reduce(b, tpu_b_convert(b, tpu_b_binary(b, "stablehlo.and", m4, is0), g->ct),
                                 tpu_b_const(b, g->ct, 0), 1, &d2, "stablehlo.add");
  tpu_val_t others = tpu_b_reduce(b, tpu_b_select(b, tpu_b_binary(b, "stablehlo.and", m4, tpu_b_unary(b, "stablehlo.not", is0)), x4, one),
                                  tpu_b_const(b, g->ct, 1), 1, &d2, "stablehlo.multiply");
  if (g->has_initial) others = tpu_nn_mul(b, others, tpu_nn_bcast0(b, g->initial, others));
  int64_t d4[4] = {g->nb, g->s, g->l, g->r}, d013[3] = {0, 1, 3};
  tpu_val_t z4 = tpu_b_broadcast_in_dim(b, zeros, 4, d4, d013), o4 = tpu_b_broadcast_in_dim(b, others, 4, d4, d013);
  tpu_val_t none = tpu_b_compare(b, "EQ", z4, zero), single = tpu_b_compare(b, "EQ", z4, one);
  tpu_val_t safe = tpu_b_select(b, is0, one, x4);
  tpu_val_t r = tpu_b_select(b, none, tpu_nn_div(b, out4, safe), zero);
  return tpu_b_select(b, tpu_b_binary(b, "stablehlo.and", single, is0), o4, r);
}

/* _segment_reduce_backward(grad, output, data, reduce, *, lengths, offsets, axis, initial) */
static tpu_status_t* tpu_lower__segment_reduce_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                        tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  static const int at[5] = {4, 5, 6, 7, -1};
  tpu_seg_t g;
  if (!tpu_seg_begin(b, op, 2, 3, at, &g)) return tpu_b_take_error(b);
  int64_t bsr[3] = {g.nb, g.s, g.r};
  tpu_val_t gr = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 0), g.ct), 3, bsr);
  tpu_val_t r;
  if (g.kind == TPU_SEG_SUM || g.kind == TPU_SEG_MEAN) {
    if (g.kind == TPU_SEG_MEAN) {
      tpu_val_t len = tpu_seg_over_r(b, &g, g.len);
      gr = tpu_nn_div(b, gr, tpu_b_select(b, tpu_b_compare(b, "EQ", len, tpu_ops_like(b, len, 0)),
                                          tpu_ops_like(b, len, 1), len));
    }
    int64_t bd = 0, mc = 1, gc = 1; /* M^T @ grad: (B, L, S) x (B, S, R) */
    r = tpu_b_dot_general(b, tpu_b_convert(b, g.mask, g.ct), gr, 1, &bd, &bd, 1, &mc, &gc, g.ct);
  } else {
    tpu_val_t x4 = tpu_seg_4d(b, &g, tpu_seg_rows(b, op, 2, &g), false), m4 = tpu_seg_4d(b, &g, g.mask, true);
    int64_t d4[4] = {g.nb, g.s, g.l, g.r}, d013[3] = {0, 1, 3};
    tpu_val_t out = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 1), g.ct), 3, bsr);
    tpu_val_t out4 = tpu_b_broadcast_in_dim(b, out, 4, d4, d013), g4 = tpu_b_broadcast_in_dim(b, gr, 4, d4, d013);
    tpu_val_t zero = tpu_ops_like(b, x4, 0);
    if (g.kind == TPU_SEG_PROD) {
      r = tpu_seg_to_rows(b, tpu_b_select(b, m4, tpu_nn_mul(b, g4, tpu_seg_prod_grad(b, &g, x4, m4, out4)), zero));
    } else { /* the elements equal to the result share its gradient */
      tpu_val_t hit = tpu_b_binary(b, "stablehlo.and", m4, tpu_b_compare(b, "EQ", x4, out4));
      int64_t d2 = 2;
      tpu_val_t cnt = tpu_b_reduce(b, tpu_b_convert(b, hit, g.ct), tpu_b_const(b, g.ct, 0), 1, &d2, "stablehlo.add");
      tpu_val_t c4 = tpu_b_broadcast_in_dim(b, cnt, 4, d4, d013);
      tpu_val_t share = tpu_nn_div(b, g4, tpu_b_select(b, tpu_b_compare(b, "EQ", c4, zero), tpu_ops_like(b, c4, 1), c4));
      r = tpu_seg_to_rows(b, tpu_b_select(b, hit, share, zero));
    }
  }
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, r, g.data.rank, g.data.dims), g.data.dtype);
  *nouts = 1;
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_segment[] = {
    {"segment_reduce", tpu_lower_segment_reduce},
    {"_segment_reduce_backward", tpu_lower__segment_reduce_backward},
    {NULL, NULL},
};
