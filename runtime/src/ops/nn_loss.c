/* Lowerings: nn family — losses with their own aten kernels (the rest, l1, kl_div,
 * cross_entropy, margin ranking, are composites of other families' ops).
 *
 * Pointwise losses are table-driven: a loss is (forward f(x, y, p), derivative
 * df/dx(x, y, p)) plus where its optional weight and float parameter sit; one
 * forward and one backward lowering apply the reduction. Compute in opmath. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "matrix.h"
#include "nn.h"

static tpu_val_t tpu_loss_select(tpu_builder_t* b, tpu_val_t p, tpu_val_t t, tpu_val_t f) {
  return tpu_b_select(b, p, t, f);
}

static tpu_val_t tpu_loss_cmp_c(tpu_builder_t* b, const char* dir, tpu_val_t x, double c) {
  return tpu_b_compare(b, dir, x, tpu_ops_like(b, x, c));
}

/* Applies PyTorch's reduction to an elementwise loss. */
static tpu_val_t tpu_loss_reduce(tpu_builder_t* b, tpu_val_t loss, int64_t reduction) {
  if (reduction == TPU_NN_REDUCTION_NONE) return loss;
  tpu_val_t s = tpu_nn_sum_all(b, loss);
  if (reduction == TPU_NN_REDUCTION_SUM) return s;
  tpu_aval_t a = *tpu_b_aval(b, loss);
  int64_t n = tpu_aval_numel(&a);
  return tpu_nn_mulc(b, s, n > 0 ? 1.0 / (double)n : NAN); /* mean of nothing is NaN */
}

static bool tpu_loss_check_reduction(tpu_builder_t* b, int64_t r) {
  if (r >= TPU_NN_REDUCTION_NONE && r <= TPU_NN_REDUCTION_SUM) return true;
  TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%" PRId64 " is not a valid value for reduction", r);
  return false;
}

/* ---------------------------------------------------------- pointwise losses */

typedef tpu_val_t (*tpu_loss_fn_t)(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p);

static tpu_val_t tpu_mse_f(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  tpu_val_t d = tpu_nn_sub(b, x, y);
  return tpu_nn_mul(b, d, d);
}
static tpu_val_t tpu_mse_g(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  return tpu_nn_mulc(b, tpu_nn_sub(b, x, y), 2.0);
}

/* smooth_l1: |d| < beta ? 0.5 d^2 / beta : |d| - beta / 2 (beta == 0: l1, as PyTorch). */
static tpu_val_t tpu_smooth_l1_f(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double beta) {
  tpu_val_t z = tpu_b_unary(b, "stablehlo.abs", tpu_nn_sub(b, x, y));
  if (beta == 0) return z;
  tpu_val_t quad = tpu_nn_mulc(b, tpu_nn_mul(b, z, z), 0.5 / beta);
  return tpu_loss_select(b, tpu_loss_cmp_c(b, "LT", z, beta), quad, tpu_nn_addc(b, z, -0.5 * beta));
}
/* PyTorch's kernel: d <= -beta → -1, d >= beta → 1, else d / beta. */
static tpu_val_t tpu_smooth_l1_g(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double beta) {
  tpu_val_t d = tpu_nn_sub(b, x, y);
  tpu_val_t mid = tpu_nn_div(b, d, tpu_ops_like(b, d, beta));
  tpu_val_t r = tpu_loss_select(b, tpu_loss_cmp_c(b, "GE", d, beta), tpu_ops_like(b, d, 1), mid);
  return tpu_loss_select(b, tpu_loss_cmp_c(b, "LE", d, -beta), tpu_ops_like(b, d, -1), r);
}

/* huber: |d| < delta ? 0.5 d^2 : delta (|d| - delta / 2). */
static tpu_val_t tpu_huber_f(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double delta) {
  tpu_val_t z = tpu_b_unary(b, "stablehlo.abs", tpu_nn_sub(b, x, y));
  tpu_val_t quad = tpu_nn_mulc(b, tpu_nn_mul(b, z, z), 0.5);
  tpu_val_t lin = tpu_nn_mulc(b, tpu_nn_addc(b, z, -0.5 * delta), delta);
  return tpu_loss_select(b, tpu_loss_cmp_c(b, "LT", z, delta), quad, lin);
}
static tpu_val_t tpu_huber_g(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double delta) {
  tpu_val_t d = tpu_nn_sub(b, x, y);
  tpu_val_t r = tpu_loss_select(b, tpu_loss_cmp_c(b, "GE", d, delta), tpu_ops_like(b, d, delta), d);
  return tpu_loss_select(b, tpu_loss_cmp_c(b, "LE", d, -delta), tpu_ops_like(b, d, -delta), r);
}

/* soft_margin: log1p(exp(-y x)); d/dx = -y e / (1 + e), e = exp(-y x). */
static tpu_val_t tpu_soft_margin_e(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_b_unary(b, "stablehlo.exponential", tpu_b_unary(b, "stablehlo.negate", tpu_nn_mul(b, x, y)));
}
static tpu_val_t tpu_soft_margin_f(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  return tpu_b_unary(b, "stablehlo.log_plus_one", tpu_soft_margin_e(b, x, y));
}
static tpu_val_t tpu_soft_margin_g(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  tpu_val_t e = tpu_soft_margin_e(b, x, y);
  tpu_val_t r = tpu_nn_div(b, tpu_nn_mul(b, y, e), tpu_nn_addc(b, e, 1.0));
  return tpu_b_unary(b, "stablehlo.negate", r);
}

/* bce: (y - 1) max(log1p(-x), -100) - y max(log x, -100), PyTorch's clamped logs. */
static tpu_val_t tpu_bce_f(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  tpu_val_t lo = tpu_ops_like(b, x, -100.0);
  tpu_val_t l1 = tpu_b_binary(b, "stablehlo.maximum",
                              tpu_b_unary(b, "stablehlo.log_plus_one", tpu_b_unary(b, "stablehlo.negate", x)), lo);
  tpu_val_t l0 = tpu_b_binary(b, "stablehlo.maximum", tpu_b_unary(b, "stablehlo.log", x), lo);
  return tpu_nn_sub(b, tpu_nn_mul(b, tpu_nn_addc(b, y, -1.0), l1), tpu_nn_mul(b, y, l0));
}
/* (x - y) / max((1 - x) x, 1e-12) */
static tpu_val_t tpu_bce_g(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, double p) {
  (void)p;
  tpu_val_t den = tpu_nn_mul(b, tpu_nn_addc(b, tpu_b_unary(b, "stablehlo.negate", x), 1.0), x);
  den = tpu_b_binary(b, "stablehlo.maximum", den, tpu_ops_like(b, den, 1e-12));
  return tpu_nn_div(b, tpu_nn_sub(b, x, y), den);
}

/* ATen's forward kernel refuses probabilities outside [0, 1] (a missing
 * sigmoid): device-side checks with its texts, instead of NaN or a wrong loss. */
static void tpu_bce_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, tpu_val_t y) {
  tpu_op_check(b, op, tpu_mx_any_outside(b, x, 0.0, 1.0), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
               "all elements of input should be between 0 and 1");
  tpu_op_check(b, op, tpu_mx_any_outside(b, y, 0.0, 1.0), TPU_NOVAL, TPU_INVALID_ARGUMENT, "%s",
               "all elements of target should be between 0 and 1");
}

typedef void (*tpu_loss_check_fn_t)(tpu_builder_t* b, tpu_op_t* op, tpu_val_t x, tpu_val_t y);

typedef struct tpu_loss_form {
  const char* name; /* forward aten name; the backward is name + "_backward" */
  tpu_loss_fn_t fwd, grad;
  tpu_loss_check_fn_t check; /* the forward's checks of the data, or NULL */
  int8_t weight;    /* forward arg index of an optional weight, -1: none */
  int8_t reduction; /* forward arg index */
  int8_t param;     /* forward arg index of a float parameter, -1: none */
  double param_default;
} tpu_loss_form_t;

static const tpu_loss_form_t tpu_loss_forms[] = {
    {"mse_loss", tpu_mse_f, tpu_mse_g, NULL, -1, 2, -1, 0},
    {"smooth_l1_loss", tpu_smooth_l1_f, tpu_smooth_l1_g, NULL, -1, 2, 3, 1.0},
    {"huber_loss", tpu_huber_f, tpu_huber_g, NULL, -1, 2, 3, 1.0},
    {"soft_margin_loss", tpu_soft_margin_f, tpu_soft_margin_g, NULL, -1, 2, -1, 0},
    {"binary_cross_entropy", tpu_bce_f, tpu_bce_g, tpu_bce_check, 2, 3, -1, 0},
};

static const tpu_loss_form_t* tpu_loss_form(const char* name, bool backward) {
  for (size_t i = 0; i < TPU_ARRAY_LEN(tpu_loss_forms); ++i) {
    size_t n = strlen(tpu_loss_forms[i].name);
    if (strncmp(name, tpu_loss_forms[i].name, n) == 0 && strcmp(name + n, backward ? "_backward" : "") == 0)
      return &tpu_loss_forms[i];
  }
  return NULL;
}

/* Forward args: (self, target, [weight], reduction, [param]); backward args are
 * (grad_output, <forward args>). */
static tpu_status_t* tpu_loss_pointwise(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts, bool backward) {
  const tpu_loss_form_t* f = tpu_loss_form(tpu_op_name(op), backward);
  if (!f) return TPU_STATUS(TPU_INTERNAL, "no loss form for %s", tpu_op_name(op));
  const int o = backward ? 1 : 0;
  bool has_w = f->weight >= 0 && tpu_op_kind(op, f->weight + o) == TPU_ARG_TENSOR;
  int args[3] = {o, o + 1, f->weight + o};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  if (!tpu_dtype_is_float(rt)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"%s\" not implemented for '%s'", f->name, tpu_dtype_name(rt));
    return NULL;
  }
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, has_w ? 3 : 2, args, &shape)) return NULL;
  int64_t red = tpu_op_int(op, f->reduction + o, TPU_NN_REDUCTION_MEAN);
  if (!tpu_loss_check_reduction(b, red)) return NULL;
  double p = f->param >= 0 ? tpu_op_float(op, f->param + o, f->param_default) : 0;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ops_operand(b, op, o, ct, &shape), y = tpu_ops_operand(b, op, o + 1, ct, &shape);
  if (!backward && f->check && tpu_aval_numel(&shape) > 0) f->check(b, op, x, y);
  tpu_val_t v = backward ? f->grad(b, x, y, p) : f->fwd(b, x, y, p);
  if (has_w) v = tpu_nn_mul(b, v, tpu_ops_operand(b, op, f->weight + o, ct, &shape));
  if (!backward) {
    outs[0] = tpu_b_convert(b, tpu_loss_reduce(b, v, red), rt);
  } else {
    tpu_val_t g = tpu_ops_operand(b, op, 0, ct, &shape);
    int64_t n = tpu_aval_numel(&shape);
    if (red == TPU_NN_REDUCTION_MEAN) g = tpu_nn_mulc(b, g, n > 0 ? 1.0 / (double)n : NAN);
    outs[0] = tpu_b_convert(b, tpu_nn_mul(b, v, g), rt);
  }
  *nouts = 1;
  return NULL;
}

static tpu_status_t* tpu_loss_fwd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_loss_pointwise(b, op, outs, nouts, false);
}
static tpu_status_t* tpu_loss_bwd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_loss_pointwise(b, op, outs, nouts, true);
}

TPU_NN_LOWERING(mse_loss) { return tpu_loss_fwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(mse_loss_backward) { return tpu_loss_bwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(smooth_l1_loss) { return tpu_loss_fwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(smooth_l1_loss_backward) { return tpu_loss_bwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(huber_loss) { return tpu_loss_fwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(huber_loss_backward) { return tpu_loss_bwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(soft_margin_loss) { return tpu_loss_fwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(soft_margin_loss_backward) { return tpu_loss_bwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(binary_cross_entropy) { return tpu_loss_fwd(b, op, max_outs, outs, nouts); }
TPU_NN_LOWERING(binary_cross_entropy_backward) { return tpu_loss_bwd(b, op, max_outs, outs, nouts); }

/* binary_cross_entropy_with_logits(self, target, weight?, pos_weight?, reduction):
 *   log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|))
 *   loss = (1 - y) x - log_sigmoid(x) * (1 + (pos_weight - 1) y), times weight.
 * Its backward is a composite of elementwise ops. */
TPU_NN_LOWERING(binary_cross_entropy_with_logits) {
  (void)max_outs;
  int args[4] = {0, 1, 2, 3};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  if (!tpu_dtype_is_float(rt)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"binary_cross_entropy_with_logits\" not implemented for '%s'",
               tpu_dtype_name(rt));
    return NULL;
  }
  int idx[4], n = 0;
  for (int i = 0; i < 4; ++i)
    if (tpu_op_kind(op, i) == TPU_ARG_TENSOR) idx[n++] = i;
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, n, idx, &shape)) return NULL;
  int64_t red = tpu_op_int(op, 4, TPU_NN_REDUCTION_MEAN);
  if (!tpu_loss_check_reduction(b, red)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ops_operand(b, op, 0, ct, &shape), y = tpu_ops_operand(b, op, 1, ct, &shape);
  tpu_val_t ax = tpu_b_unary(b, "stablehlo.abs", x);
  tpu_val_t sp = tpu_b_unary(b, "stablehlo.log_plus_one",
                             tpu_b_unary(b, "stablehlo.exponential", tpu_b_unary(b, "stablehlo.negate", ax)));
  tpu_val_t ls = tpu_nn_sub(b, tpu_b_binary(b, "stablehlo.minimum", x, tpu_ops_like(b, x, 0)), sp);
  if (tpu_op_kind(op, 3) == TPU_ARG_TENSOR) {
    tpu_val_t pw = tpu_ops_operand(b, op, 3, ct, &shape);
    ls = tpu_nn_mul(b, ls, tpu_nn_addc(b, tpu_nn_mul(b, tpu_nn_addc(b, pw, -1.0), y), 1.0));
  }
  tpu_val_t one_minus_y = tpu_nn_addc(b, tpu_b_unary(b, "stablehlo.negate", y), 1.0);
  tpu_val_t loss = tpu_nn_sub(b, tpu_nn_mul(b, one_minus_y, x), ls);
  if (tpu_op_kind(op, 2) == TPU_ARG_TENSOR) loss = tpu_nn_mul(b, loss, tpu_ops_operand(b, op, 2, ct, &shape));
  return tpu_ops_result1(tpu_b_convert(b, tpu_loss_reduce(b, loss, red), rt), outs, nouts);
}

/* ---------------------------------------------------------------- nll loss */

/* What nll_loss{,2d}_{forward,backward} share: the input's class dim (1, or 0 for
 * a 1-d input), the one-hot mask of each target over the classes, the per-target
 * weight (0 where the target is ignore_index) and the target shape. Targets
 * outside [0, C) that are not ignore_index select nothing here and are a
 * device-side check (check.h): the next sync raises PyTorch's IndexError "Target
 * N is out of bounds.". */
typedef struct tpu_nll {
  tpu_aval_t x;      /* input */
  tpu_aval_t t;      /* target shape (input without the class dim) */
  int cd;            /* class dim */
  tpu_dtype_t ct;
  tpu_val_t onehot;  /* i1, input shape: class == target and target valid */
  tpu_val_t w;       /* ct, target shape */
} tpu_nll_t;

static bool tpu_nll_check(tpu_builder_t* b, const tpu_op_t* op, int self, tpu_nll_t* n) {
  n->x = tpu_op_aval(op, self);
  tpu_aval_t t = tpu_op_aval(op, self + 1);
  char s0[256], s1[256];
  if (!tpu_dtype_is_float(n->x.dtype)) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "\"nll_loss\" not implemented for '%s'", tpu_dtype_name(n->x.dtype));
    return false;
  }
  if (t.dtype != TPU_I64 && t.dtype != TPU_U8) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected target dtype to be Long or Byte, but got %s", tpu_dtype_name(t.dtype));
    return false;
  }
  if (n->x.rank < 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "input tensor should be 1D or 2D");
    return false;
  }
  n->cd = n->x.rank == 1 ? 0 : 1;
  bool ok = t.rank == n->x.rank - 1;
  for (int i = 0, j = 0; ok && i < n->x.rank; ++i)
    if (i != n->cd) ok = t.dims[j++] == n->x.dims[i];
  if (!ok) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "size mismatch (got input: %s, target: %s)",
               tpu_nn_fmt_shape(s0, sizeof(s0), n->x.rank, n->x.dims), tpu_nn_fmt_shape(s1, sizeof(s1), t.rank, t.dims));
    return false;
  }
  int w = self + 2;
  if (tpu_op_kind(op, w) == TPU_ARG_TENSOR) {
    tpu_aval_t wa = tpu_op_aval(op, w);
    if (tpu_aval_numel(&wa) != n->x.dims[n->cd]) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "weight tensor should be defined either for all %" PRId64
                 " classes or no classes but got weight tensor of shape: %s", n->x.dims[n->cd],
                 tpu_nn_fmt_shape(s0, sizeof(s0), wa.rank, wa.dims));
      return false;
    }
    if (wa.dtype != n->x.dtype) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "expected scalar type %s but found %s", tpu_dtype_name(n->x.dtype),
                 tpu_dtype_name(wa.dtype));
      return false;
    }
  }
  n->t = t;
  n->t.dtype = TPU_I64;
  n->ct = tpu_dtype_opmath(n->x.dtype);
  return true;
}

/* Records the device-side check "every target that is not ignored lies in
 * [0, C)"; the reported value is the largest offending target. */
static void tpu_nll_check_targets(tpu_builder_t* b, tpu_op_t* op, tpu_val_t tgt, tpu_val_t valid, int64_t classes) {
  if (!tpu_b_ok(b)) return;
  tpu_aval_t ta = *tpu_b_aval(b, tgt);
  if (tpu_aval_numel(&ta) == 0) return;
  tpu_val_t out = tpu_b_binary(b, "stablehlo.or", tpu_b_compare(b, "LT", tgt, tpu_ops_like(b, tgt, 0)),
                               tpu_b_compare(b, "GE", tgt, tpu_nn_bcast0(b, tpu_b_const_i(b, TPU_I64, classes), tgt)));
  tpu_val_t m = tpu_b_binary(b, "stablehlo.and", out, valid);
  tpu_val_t bad = m, value = tgt;
  if (ta.rank > 0) {
    int64_t dims[TPU_MAX_RANK];
    for (int i = 0; i < ta.rank; ++i) dims[i] = i;
    bad = tpu_b_reduce(b, m, tpu_b_const_i(b, TPU_BOOL, 0), ta.rank, dims, "stablehlo.or");
    tpu_val_t low = tpu_b_const_i(b, TPU_I64, INT64_MIN);
    tpu_val_t only_bad = tpu_b_select(b, m, tgt, tpu_nn_bcast0(b, low, tgt));
    value = tpu_b_reduce(b, only_bad, low, ta.rank, dims, "stablehlo.maximum");
  }
  tpu_op_check(b, op, bad, value, TPU_OUT_OF_RANGE, "Target {} is out of bounds.");
}

/* Builds the mask and weights from args (self, target, weight, ..., ignore_index at `ign`). */
static void tpu_nll_build(tpu_builder_t* b, tpu_op_t* op, int self, int ign, tpu_nll_t* n) {
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0, j = 0; i < n->x.rank; ++i)
    if (i != n->cd) bd[j++] = i;
  tpu_val_t tgt = tpu_b_convert(b, tpu_op_tensor(b, op, self + 1), TPU_I64);
  tpu_val_t valid = tpu_b_compare(b, "NE", tgt, tpu_nn_bcast0(b, tpu_b_const_i(b, TPU_I64, tpu_op_int(op, ign, -100)), tgt));
  tpu_nll_check_targets(b, op, tgt, valid, n->x.dims[n->cd]);
  tpu_aval_t xi = n->x;
  xi.dtype = TPU_I64;
  tpu_val_t cls = tpu_b_iota(b, &xi, n->cd);
  tpu_val_t hit = tpu_b_compare(b, "EQ", cls, tpu_b_broadcast_in_dim(b, tgt, xi.rank, xi.dims, bd));
  n->onehot = tpu_b_binary(b, "stablehlo.and", hit, tpu_b_broadcast_in_dim(b, valid, xi.rank, xi.dims, bd));
  tpu_aval_t xc = n->x;
  xc.dtype = n->ct;
  tpu_val_t zeros = tpu_b_full(b, &xc, 0);
  if (tpu_op_kind(op, self + 2) == TPU_ARG_TENSOR) {
    int64_t c = n->x.dims[n->cd], cdim = n->cd;
    tpu_val_t w = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, self + 2), n->ct), 1, &c);
    w = tpu_b_broadcast_in_dim(b, w, xc.rank, xc.dims, &cdim);
    n->w = tpu_nn_sum(b, tpu_b_select(b, n->onehot, w, zeros), 1, &cdim);
  } else {
    tpu_aval_t ta = n->t;
    ta.dtype = n->ct;
    n->w = tpu_b_select(b, valid, tpu_b_full(b, &ta, 1), tpu_b_full(b, &ta, 0));
  }
}

/* The nll_loss forward/backward prologue for self at `self` (target, weight?,
 * reduction, ignore_index follow it): checks, the reduction in *red, and n built. */
static bool tpu_nll_begin(tpu_builder_t* b, tpu_op_t* op, int self, tpu_nll_t* n, int64_t* red) {
  if (!tpu_nll_check(b, op, self, n)) return false;
  *red = tpu_op_int(op, self + 3, TPU_NN_REDUCTION_MEAN);
  if (!tpu_loss_check_reduction(b, *red)) return false;
  tpu_nll_build(b, op, self, self + 4, n);
  return true;
}

/* nll_loss{,2d}_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight) */
TPU_NN_LOWERING(nll_loss_forward) {
  (void)max_outs;
  tpu_nll_t n;
  int64_t red;
  if (!tpu_nll_begin(b, op, 0, &n, &red)) return NULL;
  tpu_val_t x = tpu_b_convert(b, tpu_op_tensor(b, op, 0), n.ct);
  int64_t cdim = n.cd;
  tpu_val_t picked = tpu_nn_sum(b, tpu_b_select(b, n.onehot, x, tpu_ops_like(b, x, 0)), 1, &cdim);
  tpu_val_t loss = tpu_b_unary(b, "stablehlo.negate", tpu_nn_mul(b, picked, n.w));
  tpu_val_t tw = tpu_nn_sum_all(b, n.w);
  tpu_val_t out;
  if (red == TPU_NN_REDUCTION_NONE) {
    out = loss;
    if (n.x.rank > 1) tw = tpu_b_const(b, n.ct, 0); /* CPU leaves total_weight 0 here */
  } else {
    out = tpu_nn_sum_all(b, loss);
    if (red == TPU_NN_REDUCTION_MEAN) out = tpu_nn_div(b, out, tw);
  }
  outs[0] = tpu_b_convert(b, out, n.x.dtype);
  outs[1] = tpu_b_convert(b, tw, n.x.dtype);
  *nouts = 2;
  return NULL;
}

/* nll_loss{,2d}_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight):
 * grad_input = -w[target] * grad (/ total_weight for mean) at the target class. */
TPU_NN_LOWERING(nll_loss_backward) {
  (void)max_outs;
  tpu_nll_t n;
  int64_t red;
  if (!tpu_nll_begin(b, op, 1, &n, &red)) return NULL;
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 0), n.ct);
  if (red == TPU_NN_REDUCTION_NONE) {
    tpu_aval_t ga = *tpu_b_aval(b, g);
    if (tpu_aval_numel(&ga) != tpu_aval_numel(&n.t)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected a tensor of dimension %d and tensor.size[0] == %" PRId64,
                 n.t.rank, n.t.rank ? n.t.dims[0] : 1);
      return NULL;
    }
    g = tpu_b_reshape(b, g, n.t.rank, n.t.dims);
  } else {
    g = tpu_b_reshape(b, g, 0, NULL);
    if (red == TPU_NN_REDUCTION_MEAN)
      g = tpu_nn_div(b, g, tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 6), n.ct), 0, NULL));
    g = tpu_nn_bcast0(b, g, n.w);
  }
  int64_t bd[TPU_MAX_RANK];
  for (int i = 0, j = 0; i < n.x.rank; ++i)
    if (i != n.cd) bd[j++] = i;
  tpu_val_t v = tpu_b_unary(b, "stablehlo.negate", tpu_nn_mul(b, g, n.w));
  tpu_aval_t xc = n.x;
  xc.dtype = n.ct;
  v = tpu_b_broadcast_in_dim(b, v, xc.rank, xc.dims, bd);
  tpu_val_t y = tpu_b_convert(b, tpu_b_select(b, n.onehot, v, tpu_b_full(b, &xc, 0)), n.x.dtype);
  return tpu_ops_result1(y, outs, nouts);
}
