/* Lowerings: unique family — torch.unique and torch.unique_consecutive, over
 * the flattened input (_unique, _unique2, unique_consecutive) or over the slices
 * of a dim (unique_dim, unique_dim_consecutive, unique_consecutive(dim=)).
 *
 * Both are one algorithm on rows: the input as (n, R) rows (R = 1 flattened,
 * otherwise one row per slice), sorted when asked (slices lexicographically, as
 * the CPU kernel; always sorted for _unique/_unique2, a valid order for
 * sorted=False), then a new group starts at each row that differs from its
 * predecessor (NaNs never equal). The sizes depend on the data
 * (TPU_LOWER_DYNAMIC_SHAPE): results are computed padded to n and trimmed by
 * the lengths vector of index.h. */
#include <string.h>

#include "index.h"
#include "matrix.h"

typedef struct tpu_unique_groups {
  tpu_val_t values;  /* (n, R): the distinct rows first, in order */
  tpu_val_t inverse; /* (n) i64: the group of source row i */
  tpu_val_t counts;  /* (n) i64: rows per group, 0 past the last group */
  tpu_val_t count;   /* 0-d i64: the number of groups U */
} tpu_unique_groups_t;

static tpu_val_t tpu_unique_c64(tpu_builder_t* b, int64_t v) { return tpu_b_const_i(b, TPU_I64, v); }

/* Groups the (n >= 1, R) rows; pos[i] is row i's source row. */
static void tpu_unique_group(tpu_builder_t* b, tpu_val_t rows, tpu_val_t pos, bool want_inverse, bool want_counts,
                             tpu_unique_groups_t* g) {
  tpu_aval_t ra = *tpu_b_aval(b, rows);
  int64_t n = ra.dims[0], one = 1, d1 = 1, d0 = 0;
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t ne = tpu_b_compare(b, "NE", tpu_mx_slice(b, rows, 0, 1, n), tpu_mx_slice(b, rows, 0, 0, n - 1));
  tpu_val_t diff = tpu_b_reduce(b, ne, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d1, "stablehlo.or");
  tpu_val_t head[2] = {tpu_b_reshape(b, tpu_b_const_i(b, TPU_BOOL, 1), 1, &one), diff};
  tpu_val_t first = tpu_b_convert(b, tpu_b_concat(b, 2, head, 0), TPU_I64);
  tpu_val_t group = tpu_b_binary(b, "stablehlo.subtract", tpu_idx_cumsum(b, first, 0), tpu_b_full(b, &ia, 1.0));
  g->count = tpu_b_reduce(b, first, tpu_unique_c64(b, 0), 1, &d0, "stablehlo.add");
  g->values = tpu_idx_put_along(b, tpu_b_full(b, &ra, 0.0), 0, group, rows, NULL);
  g->inverse = tpu_b_full(b, &ia, 0.0);
  g->counts = tpu_b_full(b, &ia, 0.0);
  if (want_inverse) g->inverse = tpu_idx_put_along(b, g->inverse, 0, pos, group, NULL);
  if (want_counts) g->counts = tpu_idx_put_along(b, g->counts, 0, group, tpu_b_full(b, &ia, 1.0), "stablehlo.add");
}

/* values, inverse, counts (the first nres of them), then the lengths: values
 * sized U along values_dim, inverse kept or empty, counts U or empty. */
static tpu_status_t* tpu_unique_finish(tpu_builder_t* b, tpu_val_t values, int values_dim, tpu_val_t inverse,
                                       const tpu_unique_groups_t* g, bool want_inverse, bool want_counts, int nres,
                                       tpu_val_t* outs, int* nouts) {
  tpu_val_t zero = tpu_unique_c64(b, 0), keep = tpu_unique_c64(b, -1);
  tpu_val_t lens[3] = {g->count, want_inverse ? keep : zero, want_counts ? g->count : zero};
  int dims[3] = {values_dim, 0, 0};
  outs[0] = values;
  outs[1] = inverse;
  outs[2] = g->counts;
  outs[nres] = tpu_idx_lengths(b, nres, lens, dims);
  *nouts = nres + 1;
  return NULL;
}

/* No rows: values keep self's shape (`values`), inverse `inverse_shape`, counts empty. */
static tpu_status_t* tpu_unique_empty(tpu_builder_t* b, tpu_val_t values, const tpu_aval_t* inverse_shape, int nres,
                                      tpu_val_t* outs, int* nouts) {
  int64_t z = 0;
  tpu_aval_t ca = tpu_aval_make(TPU_I64, 1, &z), inv = *inverse_shape;
  inv.dtype = TPU_I64;
  outs[0] = values;
  outs[1] = tpu_b_full(b, &inv, 0.0);
  outs[2] = tpu_b_full(b, &ca, 0.0);
  tpu_val_t keep = tpu_unique_c64(b, -1), lens[3] = {keep, keep, keep};
  outs[nres] = tpu_idx_lengths(b, nres, lens, NULL);
  *nouts = nres + 1;
  return NULL;
}

/* Over the flattened input: _unique2(self, sorted, return_inverse,
 * return_counts), _unique(self, sorted, return_inverse) (sorted), and
 * unique_consecutive(self, return_inverse, return_counts) (not sorted). */
static tpu_status_t* tpu_unique_flat(tpu_builder_t* b, tpu_op_t* op, bool sorted, bool want_inverse,
                                     bool want_counts, int nres, tpu_val_t* outs, int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  int64_t n = tpu_aval_numel(&in), n1[2] = {n, 1};
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 1, &n), va = tpu_aval_make(in.dtype, 1, &n);
  if (n == 0) return tpu_unique_empty(b, tpu_b_full(b, &va, 0.0), &in, nres, outs, nouts);
  tpu_val_t v = tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 1, &n), pos = tpu_b_iota(b, &ia, 0);
  if (sorted) tpu_idx_sort(b, v, 0, false, &v, &pos);
  tpu_unique_groups_t g;
  tpu_unique_group(b, tpu_b_reshape(b, v, 2, n1), pos, want_inverse, want_counts, &g);
  tpu_val_t inverse = want_inverse ? tpu_b_reshape(b, g.inverse, in.rank, in.dims) : g.inverse;
  return tpu_unique_finish(b, tpu_b_reshape(b, g.values, 1, &n), 0, inverse, &g, want_inverse, want_counts, nres,
                           outs, nouts);
}

/* ------------------------------------------------------------ over a dim */

/* self's slices along dim as rows (n, R): row i holds self[p, i, q] at column
 * p * post + q (pre, post: the products of the dims before and after dim). */
static tpu_val_t tpu_unique_rows(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* in, int dim) {
  int64_t perm[TPU_MAX_RANK], n = in->dims[dim], nr[2] = {n, tpu_aval_numel(in) / n};
  int k = 0;
  perm[k++] = dim;
  for (int i = 0; i < in->rank; i++)
    if (i != dim) perm[k++] = i;
  return tpu_b_reshape(b, tpu_b_transpose(b, x, perm), 2, nr);
}

/* One pass of a least-significant-column-first sort: the row order in[0]
 * stable-sorted by column R-1-k of the rows in[1]. */
static void tpu_unique_lsd_pass(tpu_builder_t* b, void* ctx, tpu_val_t k, const tpu_val_t* in, tpu_val_t* out) {
  int64_t r = *(const int64_t*)ctx;
  tpu_val_t col = tpu_b_binary(b, "stablehlo.subtract", tpu_b_const_i(b, TPU_I32, r - 1), k);
  tpu_val_t key = tpu_idx_select(b, tpu_mx_take(b, in[1], 1, col), 0, in[0]);
  tpu_val_t sorted, order;
  tpu_idx_sort(b, key, 0, false, &sorted, &order);
  out[0] = tpu_idx_select(b, in[0], 0, order);
  out[1] = in[1];
}

/* The row order that sorts rows (n, R) lexicographically (i64 [n]). */
static tpu_val_t tpu_unique_lex_order(tpu_builder_t* b, tpu_val_t rows) {
  tpu_aval_t ra = *tpu_b_aval(b, rows);
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 1, &ra.dims[0]);
  tpu_val_t init[2] = {tpu_b_iota(b, &ia, 0), rows}, res[2];
  int64_t r = ra.dims[1];
  tpu_mx_for(b, r, 2, init, tpu_unique_lsd_pass, &r, res);
  return res[0];
}

/* The distinct rows (n, R) as self's slices (pre, U, post), contiguous at the
 * start of a buffer of self's shape (the runtime trims dim to U): flat
 * position f holds row (f / post) % U, column (f / (U * post)) * post + f % post. */
static tpu_val_t tpu_unique_layout(tpu_builder_t* b, tpu_val_t rows, const tpu_aval_t* in, int dim, tpu_val_t u) {
  int64_t pre = 1, post = 1, n = in->dims[dim];
  for (int i = 0; i < in->rank; i++) {
    if (i < dim) pre *= in->dims[i];
    if (i > dim) post *= in->dims[i];
  }
  int64_t total = pre * n * post, r = pre * post;
  tpu_aval_t fa = tpu_aval_make(TPU_I64, 1, &total);
  tpu_val_t f = tpu_b_iota(b, &fa, 0), uv = tpu_b_broadcast_in_dim(b, u, 1, &total, NULL);
  tpu_val_t postv = tpu_b_full(b, &fa, (double)post);
  tpu_val_t t = tpu_b_binary(b, "stablehlo.divide", f, postv);
  tpu_val_t q = tpu_b_binary(b, "stablehlo.remainder", f, postv);
  tpu_val_t row = tpu_b_binary(b, "stablehlo.remainder", t, uv);
  tpu_val_t p = tpu_b_binary(b, "stablehlo.divide", t, uv);
  tpu_val_t src = tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.multiply", row, tpu_b_full(b, &fa, (double)r)),
                               tpu_b_binary(b, "stablehlo.add", tpu_b_binary(b, "stablehlo.multiply", p, postv), q));
  /* Past the U slices (p >= pre) the buffer is padding: read row 0. */
  src = tpu_b_select(b, tpu_b_compare(b, "LT", p, tpu_b_full(b, &fa, (double)pre)), src, tpu_b_full(b, &fa, 0.0));
  int64_t nr = n * r;
  tpu_val_t flat = tpu_idx_select(b, tpu_b_reshape(b, rows, 1, &nr), 0, src);
  return tpu_b_reshape(b, flat, in->rank, in->dims);
}

/* Over the slices of dim `dim` (arg dim_arg): CPU's checks, then rows. The
 * inverse and the counts are always returned, whatever the flags, as the CPU
 * kernels do. */
static tpu_status_t* tpu_unique_slices(tpu_builder_t* b, tpu_op_t* op, int dim_arg, bool sorted, tpu_val_t* outs,
                                       int* nouts) {
  tpu_aval_t in = tpu_op_aval(op, 0);
  if (in.rank == 0) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "Dimension specified as %" PRId64 " but tensor has no dimensions",
               tpu_op_int(op, dim_arg, 0));
    return NULL;
  }
  int dim = tpu_ops_dim(b, tpu_op_int(op, dim_arg, 0), in.rank);
  for (int i = 0; i < in.rank && tpu_b_ok(b); i++)
    if (i != dim && in.dims[i] == 0)
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "There are 0 sized dimensions, and they aren't selected, so unique cannot be applied");
  if (!tpu_b_ok(b)) return NULL;
  int64_t n = in.dims[dim];
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 1, &n);
  if (n == 0) return tpu_unique_empty(b, tpu_op_tensor(b, op, 0), &ia, 3, outs, nouts);
  tpu_val_t rows = tpu_unique_rows(b, tpu_op_tensor(b, op, 0), &in, dim), pos = tpu_b_iota(b, &ia, 0);
  if (sorted) {
    pos = tpu_unique_lex_order(b, rows);
    rows = tpu_idx_select(b, rows, 0, pos);
  }
  tpu_unique_groups_t g;
  tpu_unique_group(b, rows, pos, true, true, &g);
  tpu_val_t values = tpu_unique_layout(b, g.values, &in, dim, g.count);
  return tpu_unique_finish(b, values, dim, g.inverse, &g, true, true, 3, outs, nouts);
}

/* ------------------------------------------------------------- lowerings */

/* _unique2(self, sorted, return_inverse, return_counts), _unique(self, sorted, return_inverse). */
static tpu_status_t* tpu_lower_unique(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  bool two = strcmp(tpu_op_name(op), "_unique2") == 0;
  return tpu_unique_flat(b, op, true, tpu_op_bool(op, 2, false), two && tpu_op_bool(op, 3, false), two ? 3 : 2,
                         outs, nouts);
}

/* unique_consecutive(self, return_inverse, return_counts, dim=None) */
static tpu_status_t* tpu_lower_unique_consecutive(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                  int* nouts) {
  (void)max_outs;
  if (tpu_op_kind(op, 3) == TPU_ARG_INT) return tpu_unique_slices(b, op, 3, false, outs, nouts);
  return tpu_unique_flat(b, op, false, tpu_op_bool(op, 1, false), tpu_op_bool(op, 2, false), 3, outs, nouts);
}

/* unique_dim(self, dim, sorted, return_inverse, return_counts): always sorted,
 * as the CPU kernel. */
static tpu_status_t* tpu_lower_unique_dim(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  (void)max_outs;
  return tpu_unique_slices(b, op, 1, true, outs, nouts);
}

/* unique_dim_consecutive(self, dim, return_inverse, return_counts) */
static tpu_status_t* tpu_lower_unique_dim_consecutive(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                      int* nouts) {
  (void)max_outs;
  return tpu_unique_slices(b, op, 1, false, outs, nouts);
}

const tpu_lowering_t tpu_lowerings_unique[] = {
    {"_unique", tpu_lower_unique},
    {"_unique2", tpu_lower_unique},
    {"unique_consecutive", tpu_lower_unique_consecutive},
    {"unique_dim", tpu_lower_unique_dim},
    {"unique_dim_consecutive", tpu_lower_unique_dim_consecutive},
    {NULL, NULL},
};
