/* Lowerings: nn family — the multi-class margin losses with their own aten
 * kernels: multi_margin_loss (nn.MultiMarginLoss) and
 * multilabel_margin_loss_forward (nn.MultiLabelMarginLoss), forward and backward.
 *
 * Both work on x viewed as (N, C) (a 1-D or 0-d input is one row) in opmath,
 * with ATen's semantics: per row, a sum of hinge terms over the classes divided
 * by C, then the reduction. p and margin are Scalars, so they are runtime
 * operands (a new margin does not recompile): p = 1 or 2 is chosen with a
 * select (torch.nn.functional rejects other p before the op). Targets are
 * checked on the device with ATen's messages. */
#include "check.h"
#include "index.h"
#include "nn.h"

typedef struct tpu_margin {
  tpu_aval_t x;     /* self as given */
  int64_t n, c;     /* rows, classes */
  tpu_dtype_t ct;   /* opmath dtype */
  int64_t reduction;
  tpu_val_t xs;     /* self as (n, c) in ct */
} tpu_margin_t;

/* self (arg `i`) as rows; ATen's shape check for both losses. */
static bool tpu_margin_begin(tpu_builder_t* b, tpu_op_t* op, int i, tpu_margin_t* m) {
  m->x = tpu_op_aval(op, i);
  if (!tpu_dtype_is_float(m->x.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: not implemented for %s", tpu_op_name(op), tpu_dtype_name(m->x.dtype));
    return false;
  }
  bool ok = (m->x.rank == 2 && m->x.dims[1] != 0) || (m->x.rank == 1 && m->x.dims[0] != 0) || m->x.rank == 0;
  if (!ok) {
    char s[96];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected non-empty vector or matrix with optional 0-dim batch size, but got: %s",
               tpu_nn_fmt_shape(s, sizeof(s), m->x.rank, m->x.dims));
    return false;
  }
  m->n = m->x.rank == 2 ? m->x.dims[0] : 1;
  m->c = m->x.rank == 0 ? 1 : m->x.dims[m->x.rank - 1];
  m->ct = tpu_ops_compute_float(m->x.dtype);
  int64_t nc[2] = {m->n, m->c};
  m->xs = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, i), m->ct), 2, nc);
  return tpu_b_ok(b);
}

/* A (n) per-row value broadcast along the classes (n, c). */
static tpu_val_t tpu_margin_rows(tpu_builder_t* b, const tpu_margin_t* m, tpu_val_t v) {
  int64_t nc[2] = {m->n, m->c}, d0 = 0;
  return tpu_b_broadcast_in_dim(b, v, 2, nc, &d0);
}

/* Sum over the classes of (n, c) (or of (n, t, c)'s last dim). */
static tpu_val_t tpu_margin_sum_last(tpu_builder_t* b, tpu_val_t v) {
  int64_t last = tpu_b_rank(b, v) - 1;
  return tpu_nn_sum(b, v, 1, &last);
}

/* The per-row losses (n) reduced as PyTorch does; `none_shape` is the shape of a
 * reduction='none' result. Cast back to self's dtype. */
static tpu_val_t tpu_margin_reduce(tpu_builder_t* b, const tpu_margin_t* m, tpu_val_t per_row, int rank,
                                   const int64_t* none_shape) {
  tpu_val_t r;
  if (m->reduction == TPU_NN_REDUCTION_NONE) {
    r = tpu_b_reshape(b, per_row, rank, none_shape);
  } else {
    r = tpu_nn_sum_all(b, per_row);
    if (m->reduction == TPU_NN_REDUCTION_MEAN) r = tpu_nn_mulc(b, r, 1.0 / (double)m->n);
  }
  return tpu_b_convert(b, r, m->x.dtype);
}

/* The incoming gradient per row (n): grad_output scaled by the reduction, / C. */
static tpu_val_t tpu_margin_grad_rows(tpu_builder_t* b, tpu_op_t* op, const tpu_margin_t* m) {
  tpu_val_t go = tpu_b_convert(b, tpu_op_tensor(b, op, 0), m->ct);
  int64_t n = m->n;
  tpu_aval_t rows = tpu_aval_make(m->ct, 1, &n);
  if (m->reduction == TPU_NN_REDUCTION_NONE) {
    go = tpu_b_reshape(b, go, 1, &n);
  } else {
    go = tpu_b_broadcast_in_dim(b, tpu_b_reshape(b, go, 0, NULL), 1, &n, NULL);
    if (m->reduction == TPU_NN_REDUCTION_MEAN) go = tpu_nn_mulc(b, go, 1.0 / (double)m->n);
  }
  return tpu_nn_mul(b, go, tpu_b_full(b, &rows, 1.0 / (double)m->c));
}

/* ---------------------------------------------------------- multi_margin_loss */

typedef struct tpu_mm_terms {
  tpu_val_t onehot; /* (n, c) i1: the target class */
  tpu_val_t z;      /* (n, c): margin - x[y] + x */
  tpu_val_t active; /* (n, c) i1: z > 0 and not the target class */
  tpu_val_t p1;     /* (n, c) i1: p == 1 */
  tpu_val_t w;      /* (n, c): weight[y], or 1 */
} tpu_mm_terms_t;

/* Args from `self` on: self, target, p, margin, weight. */
static void tpu_mm_terms(tpu_builder_t* b, tpu_op_t* op, int self, const tpu_margin_t* m, tpu_mm_terms_t* t) {
  int64_t n = m->n, nc[2] = {m->n, m->c};
  tpu_aval_t ta = tpu_op_aval(op, self + 1);
  if (tpu_aval_numel(&ta) != n) {
    char s[96], xs[96];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT,
               "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch "
               "size). Expected target size [%" PRId64 "], but got %s. Input has shape %s.",
               n, tpu_nn_fmt_shape(s, sizeof(s), ta.rank, ta.dims), tpu_nn_fmt_shape(xs, sizeof(xs), m->x.rank, m->x.dims));
    return;
  }
  tpu_val_t y = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, self + 1), TPU_I64), 1, &n);
  tpu_op_check(b, op, tpu_idx_out_of_range(b, y, m->c), TPU_NOVAL, TPU_INVALID_ARGUMENT, "target out of range");
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, nc), fa = tpu_aval_make(m->ct, 2, nc);
  int64_t d0 = 0;
  t->onehot = tpu_b_compare(b, "EQ", tpu_b_iota(b, &ia, 1), tpu_b_broadcast_in_dim(b, y, 2, nc, &d0));
  tpu_val_t zero = tpu_b_full(b, &fa, 0);
  tpu_val_t xy = tpu_margin_sum_last(b, tpu_b_select(b, t->onehot, m->xs, zero));
  tpu_val_t margin = tpu_b_broadcast_in_dim(b, tpu_op_scalar(b, op, self + 3, m->ct), 2, nc, NULL);
  t->z = tpu_nn_add(b, tpu_nn_sub(b, margin, tpu_margin_rows(b, m, xy)), m->xs);
  t->active = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "GT", t->z, zero),
                           tpu_b_unary(b, "stablehlo.not", t->onehot));
  tpu_val_t p = tpu_b_broadcast_in_dim(b, tpu_op_scalar(b, op, self + 2, m->ct), 2, nc, NULL);
  t->p1 = tpu_b_compare(b, "EQ", p, tpu_b_full(b, &fa, 1));
  t->w = tpu_b_full(b, &fa, 1);
  if (tpu_op_kind(op, self + 4) == TPU_ARG_TENSOR) {
    tpu_aval_t wa = tpu_op_aval(op, self + 4);
    if (wa.rank > 1 || tpu_aval_numel(&wa) != m->c) {
      char s[96];
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "inconsistent weight size, expected %" PRId64 " but got %s", m->c,
                 tpu_nn_fmt_shape(s, sizeof(s), wa.rank, wa.dims));
      return;
    }
    int64_t c = m->c, d1 = 1;
    tpu_val_t w = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, self + 4), m->ct), 1, &c);
    tpu_val_t wy = tpu_margin_sum_last(b, tpu_b_select(b, t->onehot, tpu_b_broadcast_in_dim(b, w, 2, nc, &d1), zero));
    t->w = tpu_margin_rows(b, m, wy);
  }
}

/* multi_margin_loss(self, target, p, margin, weight, reduction) */
static tpu_status_t* tpu_lower_multi_margin_loss(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                 int* nouts) {
  (void)max_outs;
  tpu_margin_t m;
  if (!tpu_margin_begin(b, op, 0, &m)) return tpu_b_take_error(b);
  m.reduction = tpu_op_int(op, 5, TPU_NN_REDUCTION_MEAN);
  tpu_mm_terms_t t;
  tpu_mm_terms(b, op, 0, &m, &t);
  if (!tpu_b_ok(b)) return tpu_b_take_error(b);
  tpu_val_t zero = tpu_ops_like(b, t.z, 0);
  tpu_val_t h = tpu_b_select(b, t.p1, t.z, tpu_nn_mul(b, t.z, t.z));
  h = tpu_b_select(b, t.active, tpu_nn_mul(b, h, t.w), zero);
  tpu_val_t per_row = tpu_nn_mulc(b, tpu_margin_sum_last(b, h), 1.0 / (double)m.c);
  tpu_aval_t ta = tpu_op_aval(op, 1);
  outs[0] = tpu_margin_reduce(b, &m, per_row, ta.rank, ta.dims);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction) */
static tpu_status_t* tpu_lower_multi_margin_loss_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                          tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_margin_t m;
  if (!tpu_margin_begin(b, op, 1, &m)) return tpu_b_take_error(b);
  m.reduction = tpu_op_int(op, 6, TPU_NN_REDUCTION_MEAN);
  tpu_mm_terms_t t;
  tpu_mm_terms(b, op, 1, &m, &t);
  if (!tpu_b_ok(b)) return tpu_b_take_error(b);
  tpu_val_t zero = tpu_ops_like(b, t.z, 0);
  tpu_val_t dh = tpu_b_select(b, t.p1, tpu_ops_like(b, t.z, 1), tpu_nn_mulc(b, t.z, 2));
  tpu_val_t g = tpu_nn_mul(b, tpu_nn_mul(b, dh, t.w), tpu_margin_rows(b, &m, tpu_margin_grad_rows(b, op, &m)));
  g = tpu_b_select(b, t.active, g, zero);
  /* The target class gets minus the sum of the others. */
  tpu_val_t at_y = tpu_margin_rows(b, &m, tpu_margin_sum_last(b, g));
  g = tpu_b_select(b, t.onehot, tpu_b_unary(b, "stablehlo.negate", at_y), g);
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, g, m.x.rank, m.x.dims), m.x.dtype);
  *nouts = 1;
  return tpu_b_take_error(b);
}

/* ----------------------------------------------------- multilabel_margin_loss */

typedef struct tpu_ml_terms {
  tpu_val_t y;        /* (n, c) i64 targets, clamped to >= 0 */
  tpu_val_t valid;    /* (n, c) i1: before the first negative target */
  tpu_val_t is_t;     /* (n, c) in ct: class c is a target of row n */
  tpu_val_t active;   /* (n, t, c) in ct: valid target t, non-target c, 1 - x[y_t] + x[c] > 0 */
  tpu_val_t onehot_t; /* (n, t, c) i1: y_t == c */
} tpu_ml_terms_t;

/* Targets of self's shape (arg `self + 1`), validated; writes y, valid, is_t. */
static bool tpu_ml_targets(tpu_builder_t* b, tpu_op_t* op, int self, const tpu_margin_t* m, tpu_ml_terms_t* t) {
  int64_t nc[2] = {m->n, m->c};
  tpu_aval_t ta = tpu_op_aval(op, self + 1);
  bool ok = m->x.rank <= 1 ? ta.rank <= 1 && tpu_aval_numel(&ta) == m->c
                           : ta.rank == 2 && ta.dims[0] == m->n && ta.dims[1] == m->c;
  if (!ok) {
    char s[96], xs[96];
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "inconsistent target size: %s for input of size: %s",
               tpu_nn_fmt_shape(s, sizeof(s), ta.rank, ta.dims), tpu_nn_fmt_shape(xs, sizeof(xs), m->x.rank, m->x.dims));
    return false;
  }
  tpu_val_t y = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, self + 1), TPU_I64), 2, nc);
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, nc);
  tpu_val_t bad = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "LT", y, tpu_b_full(b, &ia, -1)),
                               tpu_b_compare(b, "GE", y, tpu_b_full(b, &ia, (double)m->c)));
  int64_t both[2] = {0, 1};
  bad = tpu_b_reduce(b, bad, tpu_b_const_i(b, TPU_BOOL, 0), 2, both, "stablehlo.or");
  tpu_op_check(b, op, bad, TPU_NOVAL, TPU_INVALID_ARGUMENT, "argument #2 'target' is out of range");
  /* A row's targets end at its first negative entry. */
  tpu_val_t pos = tpu_b_iota(b, &ia, 1);
  tpu_val_t neg = tpu_b_compare(b, "LT", y, tpu_b_full(b, &ia, 0));
  int64_t last = 1;
  tpu_val_t first = tpu_b_reduce(b, tpu_b_select(b, neg, pos, tpu_b_full(b, &ia, (double)m->c)),
                                 tpu_b_const_i(b, TPU_I64, m->c), 1, &last, "stablehlo.minimum");
  t->valid = tpu_b_compare(b, "LT", pos, tpu_margin_rows(b, m, first));
  t->y = tpu_b_select(b, neg, tpu_b_full(b, &ia, 0), y);
  /* is_target[n, c] = any valid t with y_t == c: over (n, t, c). */
  int64_t ntc[3] = {m->n, m->c, m->c}, d01[2] = {0, 1};
  tpu_aval_t i3 = tpu_aval_make(TPU_I64, 3, ntc);
  t->onehot_t = tpu_b_compare(b, "EQ", tpu_b_broadcast_in_dim(b, t->y, 3, ntc, d01), tpu_b_iota(b, &i3, 2));
  tpu_val_t hit = tpu_b_binary(b, "stablehlo.and", t->onehot_t, tpu_b_broadcast_in_dim(b, t->valid, 3, ntc, d01));
  int64_t d1 = 1;
  tpu_val_t any = tpu_b_reduce(b, hit, tpu_b_const_i(b, TPU_BOOL, 0), 1, &d1, "stablehlo.or");
  t->is_t = tpu_b_convert(b, any, m->ct);
  return tpu_b_ok(b);
}

/* The active hinge terms (n, t, c) given is_target (n, c) in ct. */
static tpu_val_t tpu_ml_active(tpu_builder_t* b, const tpu_margin_t* m, const tpu_ml_terms_t* t, tpu_val_t is_t,
                               tpu_val_t* out_z) {
  int64_t ntc[3] = {m->n, m->c, m->c}, d01[2] = {0, 1}, d02[2] = {0, 2};
  tpu_val_t xy = tpu_idx_gather_dim(b, m->xs, 1, t->y); /* (n, t) */
  tpu_val_t z = tpu_nn_add(b, tpu_b_broadcast_in_dim(b, tpu_nn_sub(b, tpu_ops_like(b, xy, 1), xy), 3, ntc, d01),
                           tpu_b_broadcast_in_dim(b, m->xs, 3, ntc, d02));
  tpu_val_t on = tpu_b_compare(b, "GT", z, tpu_ops_like(b, z, 0));
  on = tpu_b_binary(b, "stablehlo.and", on, tpu_b_broadcast_in_dim(b, t->valid, 3, ntc, d01));
  tpu_val_t non_target = tpu_b_compare(b, "EQ", is_t, tpu_ops_like(b, is_t, 0));
  on = tpu_b_binary(b, "stablehlo.and", on, tpu_b_broadcast_in_dim(b, non_target, 3, ntc, d02));
  *out_z = z;
  return on;
}

/* multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target) */
static tpu_status_t* tpu_lower_multilabel_margin_loss_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                              tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_margin_t m;
  if (!tpu_margin_begin(b, op, 0, &m)) return tpu_b_take_error(b);
  m.reduction = tpu_op_int(op, 2, TPU_NN_REDUCTION_MEAN);
  tpu_ml_terms_t t;
  if (!tpu_ml_targets(b, op, 0, &m, &t)) return tpu_b_take_error(b);
  tpu_val_t z;
  tpu_val_t on = tpu_ml_active(b, &m, &t, t.is_t, &z);
  tpu_val_t h = tpu_b_select(b, on, z, tpu_ops_like(b, z, 0));
  int64_t tc[2] = {1, 2};
  tpu_val_t per_row = tpu_nn_mulc(b, tpu_nn_sum(b, h, 2, tc), 1.0 / (double)m.c);
  /* reduction='none' keeps one loss per row only for a batched (2-D) input. */
  outs[0] = tpu_margin_reduce(b, &m, per_row, m.x.rank == 2 ? 1 : 0, &m.n);
  tpu_aval_t ta = tpu_op_aval(op, 1);
  outs[1] = tpu_b_convert(b, tpu_b_reshape(b, t.is_t, ta.rank, ta.dims), m.x.dtype);
  *nouts = 2;
  return tpu_b_take_error(b);
}

/* multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target) */
static tpu_status_t* tpu_lower_multilabel_margin_loss_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                               tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_margin_t m;
  if (!tpu_margin_begin(b, op, 1, &m)) return tpu_b_take_error(b);
  m.reduction = tpu_op_int(op, 3, TPU_NN_REDUCTION_MEAN);
  tpu_ml_terms_t t;
  if (!tpu_ml_targets(b, op, 1, &m, &t)) return tpu_b_take_error(b);
  int64_t nc[2] = {m.n, m.c};
  tpu_val_t is_t = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 4), m.ct), 2, nc);
  tpu_val_t z;
  tpu_val_t on = tpu_b_convert(b, tpu_ml_active(b, &m, &t, is_t, &z), m.ct); /* (n, t, c) */
  /* +1 for each active (t, c) at c, -count_t at the target class y_t. */
  int64_t d1 = 1;
  tpu_val_t plus = tpu_nn_sum(b, on, 1, &d1);
  int64_t ntc[3] = {m.n, m.c, m.c}, d01[2] = {0, 1};
  tpu_val_t count = tpu_b_broadcast_in_dim(b, tpu_margin_sum_last(b, on), 3, ntc, d01);
  tpu_val_t minus = tpu_nn_sum(b, tpu_b_select(b, t.onehot_t, count, tpu_ops_like(b, count, 0)), 1, &d1);
  tpu_val_t g = tpu_nn_mul(b, tpu_nn_sub(b, plus, minus), tpu_margin_rows(b, &m, tpu_margin_grad_rows(b, op, &m)));
  outs[0] = tpu_b_convert(b, tpu_b_reshape(b, g, m.x.rank, m.x.dims), m.x.dtype);
  *nouts = 1;
  return tpu_b_take_error(b);
}

const tpu_lowering_t tpu_lowerings_nn_margin[] = {
    {"multi_margin_loss", tpu_lower_multi_margin_loss},
    {"multi_margin_loss_backward", tpu_lower_multi_margin_loss_backward},
    {"multilabel_margin_loss_forward", tpu_lower_multilabel_margin_loss_forward},
    {"multilabel_margin_loss_backward", tpu_lower_multilabel_margin_loss_backward},
    {NULL, NULL},
};
