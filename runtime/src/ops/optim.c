/* Lowerings: optim family (PyTorch's fused optimizer steps, fused=True).
 *
 *   _fused_adam_ / _fused_adamw_ (Tensor(a!)[] self, Tensor(b!)[] grads, Tensor(c!)[] exp_avgs,
 *       Tensor(d!)[] exp_avg_sqs, Tensor(e!)[] max_exp_avg_sqs, Tensor[] state_steps, *,
 *       float|Tensor lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad,
 *       bool maximize, Tensor? grad_scale, Tensor? found_inf) -> ()
 *   _fused_sgd_ (self, grads, momentum_buffer_list, *, float weight_decay, float momentum,
 *       float|Tensor lr, float dampening, bool nesterov, bool maximize, bool is_first_step,
 *       Tensor? grad_scale, Tensor? found_inf) -> ()
 *   _fused_adagrad_ (self, grads, state_sums, state_steps, *, float|Tensor lr, float lr_decay,
 *       float weight_decay, float eps, bool maximize, Tensor? grad_scale, Tensor? found_inf) -> ()
 *
 * They return nothing and mutate their lists; like every lowering they compute the
 * new values and the binding writes them back (ops/README.md): one result per
 * element of each mutated list, lists in argument order. That includes the grads
 * (the kernels store the unscaled gradient when grad_scale is given) and, for
 * _fused_adagrad_ with a float lr, state_steps (annotated (d!) but never changed).
 *
 * Semantics follow ATen's CPU kernels (FusedAdam/FusedSGD/FusedAdagrad): the step
 * counts are read, not incremented (the optimizer adds 1 before the call); a step
 * is skipped, grads included, when found_inf == 1 (the kernels' test, also CUDA's);
 * f16/bf16 compute in f32 and store the state rounded. The step count is a device
 * value, so the bias corrections 1 - beta^step are computed on device, as
 * -expm1(step * log(beta)): exact to f32 rounding even for beta2 near 1, where
 * 1 - pow(beta2, step) would cancel. */
#include <math.h>
#include <string.h>

#include "common.h"

/* What every fused step shares: its list length and the gradient
 * scaler's two optional tensors as 0-d values (TPU_NOVAL when absent). */
typedef struct tpu_optim {
  int n;
  tpu_val_t skip;       /* bool: found_inf == 1 */
  tpu_val_t grad_scale; /* f32 */
  bool maximize;
  double weight_decay;
} tpu_optim_t;

/* ---------------------------------------------------------------- checks */

/* Arg i is a list of n floating tensors shaped like the params (arg 0). */
static bool tpu_optim_check_list(tpu_builder_t* b, const tpu_op_t* op, const char* fn, int i, int n,
                                 const char* what) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR_LIST) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s must be a list of tensors", fn, what);
    return false;
  }
  if (tpu_op_list_len(op, i) != n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s has %d tensors, expected %d (one per param)", fn, what,
               tpu_op_list_len(op, i), n);
    return false;
  }
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, i, j), p = tpu_op_list_aval(op, 0, j);
    if (!tpu_dtype_is_float(a.dtype)) {
      TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: not implemented for '%s' (%s[%d])", fn, tpu_dtype_name(a.dtype), what,
                 j);
      return false;
    }
    a.dtype = p.dtype;
    if (i != 0 && !tpu_aval_equal(&a, &p)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s[%d] does not have the shape of param %d", fn, what, j, j);
      return false;
    }
  }
  return true;
}

/* Arg i, when present, is a one-element tensor (any rank) or a 0-dim cpu tensor;
 * f32 only when `f32` (the kernels read grad_scale and found_inf as float*). */
static bool tpu_optim_check_one(tpu_builder_t* b, const tpu_op_t* op, const char* fn, int i, bool f32,
                                const char* what) {
  tpu_arg_kind_t k = tpu_op_kind(op, i);
  if (k == TPU_ARG_NONE || k == TPU_ARG_SCALAR || k == TPU_ARG_FLOAT) return true;
  if (k != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s must be a tensor", fn, what);
    return false;
  }
  tpu_aval_t a = tpu_op_aval(op, i);
  if (tpu_aval_numel(&a) != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: %s must be a 1-element tensor", fn, what);
    return false;
  }
  if (f32 ? a.dtype != TPU_F32 : !(tpu_dtype_is_float(a.dtype) || tpu_dtype_is_int(a.dtype))) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected scalar type Float but found %s for %s", fn,
               tpu_dtype_name(a.dtype), what);
    return false;
  }
  return true;
}

/* Each step count is a one-element real tensor. */
static bool tpu_optim_check_steps(tpu_builder_t* b, const tpu_op_t* op, const char* fn, int i, int n) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR_LIST || tpu_op_list_len(op, i) != n) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: state_steps must be a list of %d tensors (one per param)", fn, n);
    return false;
  }
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, i, j);
    if (tpu_aval_numel(&a) != 1 || !(tpu_dtype_is_float(a.dtype) || tpu_dtype_is_int(a.dtype))) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: state_steps[%d] must be a 1-element real tensor", fn, j);
      return false;
    }
  }
  return true;
}

/* ---------------------------------------------------------------- values */

/* Arg i (float, cpu scalar or one-element tensor) as a 0-d value of `as`. */
static tpu_val_t tpu_optim_scalar(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t as) {
  if (tpu_op_kind(op, i) != TPU_ARG_TENSOR) return tpu_op_scalar(b, op, i, as);
  return tpu_b_convert(b, tpu_b_reshape(b, tpu_op_tensor(b, op, i), 0, NULL), as);
}

static tpu_val_t tpu_optim_step(tpu_builder_t* b, tpu_op_t* op, int i, int j, tpu_dtype_t as) {
  return tpu_b_convert(b, tpu_b_reshape(b, tpu_op_list_tensor(b, op, i, j), 0, NULL), as);
}

/* x <op> y where either may be 0-d (it is broadcast to the other's shape). */
static tpu_val_t tpu_optim_bin(tpu_builder_t* b, const char* name, tpu_val_t x, tpu_val_t y) {
  if (!tpu_b_ok(b)) return TPU_NOVAL;
  tpu_aval_t ax = *tpu_b_aval(b, x), ay = *tpu_b_aval(b, y);
  if (ax.rank == 0 && ay.rank > 0) x = tpu_b_broadcast_to(b, x, ay.rank, ay.dims);
  else if (ay.rank == 0 && ax.rank > 0) y = tpu_b_broadcast_to(b, y, ax.rank, ax.dims);
  return tpu_b_binary(b, name, x, y);
}
static tpu_val_t tpu_optim_add(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_optim_bin(b, "stablehlo.add", x, y);
}
static tpu_val_t tpu_optim_sub(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_optim_bin(b, "stablehlo.subtract", x, y);
}
static tpu_val_t tpu_optim_mul(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_optim_bin(b, "stablehlo.multiply", x, y);
}
static tpu_val_t tpu_optim_div(tpu_builder_t* b, tpu_val_t x, tpu_val_t y) {
  return tpu_optim_bin(b, "stablehlo.divide", x, y);
}
/* x * c for a static c (computed in double, rounded once to x's dtype as the kernels do). */
static tpu_val_t tpu_optim_mulc(tpu_builder_t* b, tpu_val_t x, double c) {
  return tpu_optim_mul(b, x, tpu_b_const(b, tpu_b_dtype(b, x), c));
}

/* The scaler's arguments: skip (found_inf == 1) and grad_scale, 0-d, or TPU_NOVAL. */
static void tpu_optim_scaler(tpu_builder_t* b, tpu_op_t* op, int gs, int fi, tpu_optim_t* o) {
  o->skip = o->grad_scale = TPU_NOVAL;
  if (tpu_op_kind(op, gs) != TPU_ARG_NONE) o->grad_scale = tpu_optim_scalar(b, op, gs, TPU_F32);
  if (tpu_op_kind(op, fi) != TPU_ARG_NONE)
    o->skip = tpu_b_compare(b, "EQ", tpu_optim_scalar(b, op, fi, TPU_F32), tpu_b_const(b, TPU_F32, 1.0));
}

/* Gradient j in compute dtype ct: divided by grad_scale (that value is also the
 * new grads[j], *out_grad, in the grad's dtype), then negated for maximize. */
static tpu_val_t tpu_optim_grad(tpu_builder_t* b, tpu_op_t* op, const tpu_optim_t* o, int j, tpu_dtype_t ct,
                                tpu_val_t* out_grad) {
  tpu_val_t raw = tpu_op_list_tensor(b, op, 1, j);
  tpu_dtype_t gt = tpu_op_list_aval(op, 1, j).dtype;
  tpu_val_t g = tpu_b_convert(b, raw, ct);
  *out_grad = raw;
  if (o->grad_scale != TPU_NOVAL) {
    g = tpu_optim_div(b, g, tpu_b_convert(b, o->grad_scale, ct));
    *out_grad = tpu_b_convert(b, g, gt);
  }
  if (o->maximize) g = tpu_b_unary(b, "stablehlo.negate", g);
  return g;
}

/* The value written back into list i, element j: `val` cast to its dtype, or the
 * old value when the step is skipped. */
static tpu_val_t tpu_optim_result(tpu_builder_t* b, tpu_op_t* op, const tpu_optim_t* o, int i, int j,
                                  tpu_val_t val) {
  val = tpu_b_convert(b, val, tpu_op_list_aval(op, i, j).dtype);
  if (o->skip == TPU_NOVAL) return val;
  return tpu_b_select(b, o->skip, tpu_op_list_tensor(b, op, i, j), val);
}

/* 1 - beta^step as -expm1(step * log(beta)); step is a 0-d value of ct. */
static tpu_val_t tpu_optim_bias_correction(tpu_builder_t* b, tpu_val_t step, double beta) {
  tpu_val_t e = tpu_optim_mulc(b, step, log(beta));
  return tpu_b_unary(b, "stablehlo.negate", tpu_b_unary(b, "stablehlo.exponential_minus_one", e));
}

static bool tpu_optim_room(tpu_builder_t* b, const char* fn, int need, int max_outs) {
  /* The binding sizes the results by the lists (any length); this guards the contract. */
  if (need <= max_outs) return true;
  TPU_B_FAIL(b, TPU_INTERNAL, "%s: room for %d results, %d needed", fn, max_outs, need);
  return false;
}

/* ------------------------------------------------------------ adam/adamw */

typedef struct tpu_adam_hp {
  double beta1, beta2, eps;
  bool amsgrad, decoupled;
} tpu_adam_hp_t;

/* One parameter's Adam step; results go to outs[k * n + j] for list k. */
static void tpu_optim_adam_one(tpu_builder_t* b, tpu_op_t* op, const tpu_optim_t* o, const tpu_adam_hp_t* hp,
                               int j, tpu_val_t* outs) {
  int n = o->n;
  tpu_dtype_t ct = tpu_dtype_opmath(tpu_op_list_aval(op, 0, j).dtype);
  tpu_val_t lr = tpu_optim_scalar(b, op, 6, ct);
  tpu_val_t step = tpu_optim_step(b, op, 5, j, ct);
  tpu_val_t p = tpu_b_convert(b, tpu_op_list_tensor(b, op, 0, j), ct);
  tpu_val_t m = tpu_b_convert(b, tpu_op_list_tensor(b, op, 2, j), ct);
  tpu_val_t v = tpu_b_convert(b, tpu_op_list_tensor(b, op, 3, j), ct);
  tpu_val_t g = tpu_optim_grad(b, op, o, j, ct, &outs[n + j]);
  if (o->weight_decay != 0.0) {
    if (hp->decoupled) /* AdamW: p *= 1 - lr * wd */
      p = tpu_optim_mul(b, p, tpu_b_binary(b, "stablehlo.subtract", tpu_b_const(b, ct, 1.0),
                                           tpu_optim_mulc(b, lr, o->weight_decay)));
    else
      g = tpu_optim_add(b, g, tpu_optim_mulc(b, p, o->weight_decay));
  }
  m = tpu_optim_add(b, tpu_optim_mulc(b, m, hp->beta1), tpu_optim_mulc(b, g, 1.0 - hp->beta1));
  v = tpu_optim_add(b, tpu_optim_mulc(b, v, hp->beta2), tpu_optim_mulc(b, tpu_optim_mul(b, g, g), 1.0 - hp->beta2));
  tpu_val_t vhat = v;
  if (hp->amsgrad) {
    tpu_val_t vmax = tpu_b_convert(b, tpu_op_list_tensor(b, op, 4, j), ct);
    vhat = tpu_b_binary(b, "stablehlo.maximum", vmax, v);
    outs[4 * n + j] = tpu_optim_result(b, op, o, 4, j, vhat);
  }
  tpu_val_t step_size = tpu_b_binary(b, "stablehlo.divide", lr, tpu_optim_bias_correction(b, step, hp->beta1));
  tpu_val_t bc2_sqrt = tpu_b_unary(b, "stablehlo.sqrt", tpu_optim_bias_correction(b, step, hp->beta2));
  tpu_val_t denom = tpu_optim_div(b, tpu_b_unary(b, "stablehlo.sqrt", vhat), bc2_sqrt);
  denom = tpu_optim_add(b, denom, tpu_b_const(b, ct, hp->eps));
  p = tpu_optim_sub(b, p, tpu_optim_div(b, tpu_optim_mul(b, m, step_size), denom));
  outs[j] = tpu_optim_result(b, op, o, 0, j, p);
  if (o->skip != TPU_NOVAL) outs[n + j] = tpu_b_select(b, o->skip, tpu_op_list_tensor(b, op, 1, j), outs[n + j]);
  outs[2 * n + j] = tpu_optim_result(b, op, o, 2, j, m);
  outs[3 * n + j] = tpu_optim_result(b, op, o, 3, j, v);
}

static tpu_status_t* tpu_lower_adam_common(tpu_builder_t* b, tpu_op_t* op, const char* fn, bool decoupled,
                                           int max_outs, tpu_val_t* outs, int* nouts) {
  int n = tpu_op_kind(op, 0) == TPU_ARG_TENSOR_LIST ? tpu_op_list_len(op, 0) : 0;
  tpu_adam_hp_t hp = {tpu_op_float(op, 7, 0.9), tpu_op_float(op, 8, 0.999), tpu_op_float(op, 10, 1e-8),
                      tpu_op_bool(op, 11, false), decoupled};
  if (!tpu_optim_check_list(b, op, fn, 0, n, "params") || !tpu_optim_check_list(b, op, fn, 1, n, "grads") ||
      !tpu_optim_check_list(b, op, fn, 2, n, "exp_avgs") || !tpu_optim_check_list(b, op, fn, 3, n, "exp_avg_sqs") ||
      !tpu_optim_check_list(b, op, fn, 4, hp.amsgrad ? n : 0, "max_exp_avg_sqs") ||
      !tpu_optim_check_steps(b, op, fn, 5, n) || !tpu_optim_check_one(b, op, fn, 6, false, "lr") ||
      !tpu_optim_check_one(b, op, fn, 13, true, "grad_scale") ||
      !tpu_optim_check_one(b, op, fn, 14, true, "found_inf"))
    return NULL;
  int nres = (hp.amsgrad ? 5 : 4) * n;
  if (!tpu_optim_room(b, fn, nres, max_outs)) return NULL;
  tpu_optim_t o = {n, TPU_NOVAL, TPU_NOVAL, tpu_op_bool(op, 12, false), tpu_op_float(op, 9, 0.0)};
  tpu_optim_scaler(b, op, 13, 14, &o);
  for (int j = 0; j < n && tpu_b_ok(b); ++j) tpu_optim_adam_one(b, op, &o, &hp, j, outs);
  *nouts = nres;
  return NULL;
}

static tpu_status_t* tpu_lower_fused_adam(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts) {
  return tpu_lower_adam_common(b, op, "_fused_adam_", false, max_outs, outs, nouts);
}

static tpu_status_t* tpu_lower_fused_adamw(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  return tpu_lower_adam_common(b, op, "_fused_adamw_", true, max_outs, outs, nouts);
}

/* ------------------------------------------------------------------- sgd */

typedef struct tpu_sgd_hp {
  double momentum, dampening;
  bool nesterov, first_step;
} tpu_sgd_hp_t;

static void tpu_optim_sgd_one(tpu_builder_t* b, tpu_op_t* op, const tpu_optim_t* o, const tpu_sgd_hp_t* hp, int j,
                              tpu_val_t* outs) {
  int n = o->n;
  tpu_dtype_t ct = tpu_dtype_opmath(tpu_op_list_aval(op, 0, j).dtype);
  tpu_val_t lr = tpu_optim_scalar(b, op, 5, ct);
  tpu_val_t p = tpu_b_convert(b, tpu_op_list_tensor(b, op, 0, j), ct);
  tpu_val_t g = tpu_optim_grad(b, op, o, j, ct, &outs[n + j]);
  if (o->weight_decay != 0.0) g = tpu_optim_add(b, g, tpu_optim_mulc(b, p, o->weight_decay));
  if (hp->momentum != 0.0) {
    /* On the first step the buffer is uninitialised memory (empty_like): never read it. */
    tpu_val_t buf = g;
    if (!hp->first_step) {
      tpu_val_t old = tpu_b_convert(b, tpu_op_list_tensor(b, op, 2, j), ct);
      buf = tpu_optim_add(b, tpu_optim_mulc(b, old, hp->momentum), tpu_optim_mulc(b, g, 1.0 - hp->dampening));
    }
    outs[2 * n + j] = tpu_optim_result(b, op, o, 2, j, buf);
    g = hp->nesterov ? tpu_optim_add(b, g, tpu_optim_mulc(b, buf, hp->momentum)) : buf;
  }
  p = tpu_optim_sub(b, p, tpu_optim_mul(b, g, lr));
  outs[j] = tpu_optim_result(b, op, o, 0, j, p);
  if (o->skip != TPU_NOVAL) outs[n + j] = tpu_b_select(b, o->skip, tpu_op_list_tensor(b, op, 1, j), outs[n + j]);
}

static tpu_status_t* tpu_lower_fused_sgd(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                         int* nouts) {
  const char* fn = "_fused_sgd_";
  int n = tpu_op_kind(op, 0) == TPU_ARG_TENSOR_LIST ? tpu_op_list_len(op, 0) : 0;
  tpu_sgd_hp_t hp = {tpu_op_float(op, 4, 0.0), tpu_op_float(op, 6, 0.0), tpu_op_bool(op, 7, false),
                     tpu_op_bool(op, 9, false)};
  /* Like the kernels: no momentum, no buffers (an empty list); else one per param. */
  if (!tpu_optim_check_list(b, op, fn, 0, n, "params") || !tpu_optim_check_list(b, op, fn, 1, n, "grads") ||
      !tpu_optim_check_list(b, op, fn, 2, hp.momentum != 0.0 ? n : 0, "momentum_buffer_list") ||
      !tpu_optim_check_one(b, op, fn, 5, false, "lr") || !tpu_optim_check_one(b, op, fn, 10, true, "grad_scale") ||
      !tpu_optim_check_one(b, op, fn, 11, true, "found_inf"))
    return NULL;
  int nres = (hp.momentum != 0.0 ? 3 : 2) * n;
  if (!tpu_optim_room(b, fn, nres, max_outs)) return NULL;
  tpu_optim_t o = {n, TPU_NOVAL, TPU_NOVAL, tpu_op_bool(op, 8, false), tpu_op_float(op, 3, 0.0)};
  tpu_optim_scaler(b, op, 10, 11, &o);
  for (int j = 0; j < n && tpu_b_ok(b); ++j) tpu_optim_sgd_one(b, op, &o, &hp, j, outs);
  *nouts = nres;
  return NULL;
}

/* --------------------------------------------------------------- adagrad */

static void tpu_optim_adagrad_one(tpu_builder_t* b, tpu_op_t* op, const tpu_optim_t* o, double lr_decay,
                                  double eps, int j, tpu_val_t* outs) {
  int n = o->n;
  tpu_dtype_t ct = tpu_dtype_opmath(tpu_op_list_aval(op, 0, j).dtype);
  tpu_val_t lr = tpu_optim_scalar(b, op, 4, ct);
  tpu_val_t step = tpu_optim_step(b, op, 3, j, ct);
  /* clr = lr / (1 + (step - 1) * lr_decay) */
  tpu_val_t decay = tpu_optim_mulc(b, tpu_b_binary(b, "stablehlo.subtract", step, tpu_b_const(b, ct, 1.0)), lr_decay);
  tpu_val_t clr = tpu_b_binary(b, "stablehlo.divide", lr,
                               tpu_b_binary(b, "stablehlo.add", tpu_b_const(b, ct, 1.0), decay));
  tpu_val_t p = tpu_b_convert(b, tpu_op_list_tensor(b, op, 0, j), ct);
  tpu_val_t sum = tpu_b_convert(b, tpu_op_list_tensor(b, op, 2, j), ct);
  tpu_val_t g = tpu_optim_grad(b, op, o, j, ct, &outs[n + j]);
  if (o->weight_decay != 0.0) g = tpu_optim_add(b, g, tpu_optim_mulc(b, p, o->weight_decay));
  sum = tpu_optim_add(b, sum, tpu_optim_mul(b, g, g));
  tpu_val_t std = tpu_optim_add(b, tpu_b_unary(b, "stablehlo.sqrt", sum), tpu_b_const(b, ct, eps));
  p = tpu_optim_sub(b, p, tpu_optim_div(b, tpu_optim_mul(b, g, clr), std));
  outs[j] = tpu_optim_result(b, op, o, 0, j, p);
  if (o->skip != TPU_NOVAL) outs[n + j] = tpu_b_select(b, o->skip, tpu_op_list_tensor(b, op, 1, j), outs[n + j]);
  outs[2 * n + j] = tpu_optim_result(b, op, o, 2, j, sum);
}

static tpu_status_t* tpu_lower_fused_adagrad(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                             int* nouts) {
  const char* fn = "_fused_adagrad_";
  int n = tpu_op_kind(op, 0) == TPU_ARG_TENSOR_LIST ? tpu_op_list_len(op, 0) : 0;
  if (!tpu_optim_check_list(b, op, fn, 0, n, "params") || !tpu_optim_check_list(b, op, fn, 1, n, "grads") ||
      !tpu_optim_check_list(b, op, fn, 2, n, "state_sums") || !tpu_optim_check_steps(b, op, fn, 3, n) ||
      !tpu_optim_check_one(b, op, fn, 4, false, "lr") || !tpu_optim_check_one(b, op, fn, 9, true, "grad_scale") ||
      !tpu_optim_check_one(b, op, fn, 10, true, "found_inf"))
    return NULL;
  /* The float-lr overload annotates state_steps as written (d!): it gets its own
   * values back; the tensor_lr overload does not write it. */
  const char* overload = tpu_op_overload(op);
  bool steps_written = !(overload && strcmp(overload, "tensor_lr") == 0);
  int nres = (steps_written ? 4 : 3) * n;
  if (!tpu_optim_room(b, fn, nres, max_outs)) return NULL;
  tpu_optim_t o = {n, TPU_NOVAL, TPU_NOVAL, tpu_op_bool(op, 8, false), tpu_op_float(op, 6, 0.0)};
  tpu_optim_scaler(b, op, 9, 10, &o);
  double lr_decay = tpu_op_float(op, 5, 0.0), eps = tpu_op_float(op, 7, 1e-10);
  for (int j = 0; j < n && tpu_b_ok(b); ++j) {
    tpu_optim_adagrad_one(b, op, &o, lr_decay, eps, j, outs);
    if (steps_written) outs[3 * n + j] = tpu_op_list_tensor(b, op, 3, j);
  }
  *nouts = nres;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_optim[] = {
    {"_fused_adam", tpu_lower_fused_adam},
    {"_fused_adamw", tpu_lower_fused_adamw},
    {"_fused_sgd", tpu_lower_fused_sgd},
    {"_fused_adagrad", tpu_lower_fused_adagrad},
    {NULL, NULL},
};
