/* Lowerings: amp family (the gradient scaler's two kernels).
 *
 * Both ops only mutate their arguments; like every lowering they compute the new
 * values functionally and the binding writes them back (ops/README.md):
 *
 *   _amp_foreach_non_finite_check_and_unscale_(Tensor(a!)[] self, Tensor(b!) found_inf,
 *                                              Tensor inv_scale) -> ()
 *     results: the unscaled self[0..n-1], then the new found_inf.
 *   _amp_update_scale_(Tensor(a!) self, Tensor(b!) growth_tracker, Tensor found_inf,
 *                      float scale_growth_factor, float scale_backoff_factor,
 *                      int growth_interval) -> Tensor(a!)
 *     results: the new scale (the return, aliasing self), then the new growth_tracker.
 *
 * Semantics follow ATen's CPU kernels (AmpGradScalerKernels.cpp). */
#include "common.h"

/* A one-element float32 tensor (any rank) or a 0-dim cpu tensor (a runtime scalar),
 * as a 0-d f32 value. `what` names the argument in PyTorch's messages. */
static bool tpu_amp_check_one(tpu_builder_t* b, const tpu_op_t* op, int i, tpu_dtype_t want, const char* what) {
  tpu_arg_kind_t k = tpu_op_kind(op, i);
  if (k == TPU_ARG_SCALAR) return true;
  if (k != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be a tensor.", what);
    return false;
  }
  tpu_aval_t a = tpu_op_aval(op, i);
  if (tpu_aval_numel(&a) != 1) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be a 1-element tensor.", what);
    return false;
  }
  if (a.dtype != want) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s must be a%s tensor.", what, want == TPU_I32 ? "n int" : " float");
    return false;
  }
  return true;
}

static tpu_val_t tpu_amp_scalar(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t as) {
  if (tpu_op_kind(op, i) == TPU_ARG_SCALAR) return tpu_op_scalar(b, op, i, as);
  return tpu_b_convert(b, tpu_b_reshape(b, tpu_op_tensor(b, op, i), 0, NULL), as);
}

/* A 0-d value reshaped to `like`'s rank-and-dims (one element). */
static tpu_val_t tpu_amp_like(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* like) {
  return tpu_b_reshape(b, v, like->rank, like->dims);
}

static tpu_status_t* tpu_lower_amp_unscale(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                           int* nouts) {
  const char* fn = "_amp_foreach_non_finite_check_and_unscale_";
  if (tpu_op_kind(op, 0) != TPU_ARG_TENSOR_LIST) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected a list of tensors", fn);
    return NULL;
  }
  int n = tpu_op_list_len(op, 0);
  /* The caller sizes the results by the list (any length); this only guards the contract. */
  if (n + 1 > max_outs) {
    TPU_B_FAIL(b, TPU_INTERNAL, "%s: room for %d results, %d needed", fn, max_outs, n + 1);
    return NULL;
  }
  if (!tpu_amp_check_one(b, op, 1, TPU_F32, "found_inf") || !tpu_amp_check_one(b, op, 2, TPU_F32, "inv_scale"))
    return NULL;
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, 0, j);
    if (!tpu_dtype_is_float(a.dtype)) {
      TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected floating point gradients, got %s", fn,
                 tpu_dtype_name(a.dtype));
      return NULL;
    }
  }
  /* Fetch every operand before building. */
  tpu_val_t found = tpu_amp_scalar(b, op, 1, TPU_F32);
  tpu_val_t inv = tpu_amp_scalar(b, op, 2, TPU_F32);
  tpu_val_t all_finite = tpu_b_const_i(b, TPU_BOOL, 1);
  for (int j = 0; j < n; ++j) {
    tpu_aval_t a = tpu_op_list_aval(op, 0, j);
    tpu_val_t g = tpu_op_list_tensor(b, op, 0, j);
    tpu_dtype_t ct = tpu_dtype_opmath(a.dtype);
    tpu_val_t gc = tpu_b_convert(b, g, ct);
    if (a.rank > 0 && tpu_aval_numel(&a) > 0) {
      int64_t dims[TPU_MAX_RANK];
      for (int d = 0; d < a.rank; ++d) dims[d] = d;
      tpu_val_t fin = tpu_b_reduce(b, tpu_b_unary(b, "stablehlo.is_finite", gc), tpu_b_const_i(b, TPU_BOOL, 1),
                                   a.rank, dims, "stablehlo.and");
      all_finite = tpu_b_binary(b, "stablehlo.and", all_finite, fin);
    } else if (a.rank == 0) {
      all_finite = tpu_b_binary(b, "stablehlo.and", all_finite, tpu_b_unary(b, "stablehlo.is_finite", gc));
    }
    /* val * inv_scale in the op math type (inv_scale == 1 leaves val unchanged either way). */
    tpu_val_t s = tpu_b_broadcast_to(b, tpu_b_convert(b, inv, ct), a.rank, a.dims);
    outs[j] = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.multiply", gc, s), a.dtype);
  }
  tpu_val_t new_found = tpu_b_select(b, all_finite, found, tpu_b_const(b, TPU_F32, 1.0));
  if (tpu_op_kind(op, 1) == TPU_ARG_TENSOR) {
    tpu_aval_t fa = tpu_op_aval(op, 1);
    new_found = tpu_amp_like(b, new_found, &fa);
  }
  outs[n] = new_found;
  *nouts = n + 1;
  return NULL;
}

static tpu_status_t* tpu_lower_amp_update_scale(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                int* nouts) {
  (void)max_outs;
  if (tpu_op_kind(op, 0) != TPU_ARG_TENSOR || tpu_op_kind(op, 1) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_amp_update_scale_: current_scale and growth_tracker must be tensors");
    return NULL;
  }
  if (!tpu_amp_check_one(b, op, 1, TPU_I32, "growth_tracker") ||
      !tpu_amp_check_one(b, op, 0, TPU_F32, "current_scale") || !tpu_amp_check_one(b, op, 2, TPU_F32, "found_inf"))
    return NULL;
  double growth = tpu_op_float(op, 3, 2.0), backoff = tpu_op_float(op, 4, 0.5);
  int64_t interval = tpu_op_int(op, 5, 2000);
  tpu_aval_t sa = tpu_op_aval(op, 0), ga = tpu_op_aval(op, 1);

  tpu_val_t scale = tpu_amp_scalar(b, op, 0, TPU_F32);
  tpu_val_t tracker = tpu_amp_scalar(b, op, 1, TPU_I32);
  tpu_val_t found = tpu_amp_scalar(b, op, 2, TPU_F32);

  tpu_val_t has_inf = tpu_b_compare(b, "NE", found, tpu_b_const(b, TPU_F32, 0.0));
  tpu_val_t backed_off = tpu_b_binary(b, "stablehlo.multiply", scale, tpu_b_const(b, TPU_F32, backoff));
  tpu_val_t successful = tpu_b_binary(b, "stablehlo.add", tracker, tpu_b_const_i(b, TPU_I32, 1));
  tpu_val_t grow = tpu_b_compare(b, "EQ", successful, tpu_b_const_i(b, TPU_I32, interval));
  tpu_val_t grown = tpu_b_binary(b, "stablehlo.multiply", scale, tpu_b_const(b, TPU_F32, growth));
  /* A growth that overflows keeps the old scale. */
  grown = tpu_b_select(b, tpu_b_unary(b, "stablehlo.is_finite", grown), grown, scale);
  tpu_val_t zero = tpu_b_const_i(b, TPU_I32, 0);

  tpu_val_t new_scale = tpu_b_select(b, has_inf, backed_off, tpu_b_select(b, grow, grown, scale));
  tpu_val_t new_tracker = tpu_b_select(b, has_inf, zero, tpu_b_select(b, grow, zero, successful));
  outs[0] = tpu_amp_like(b, new_scale, &sa);
  outs[1] = tpu_amp_like(b, new_tracker, &ga);
  *nouts = 2;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_amp[] = {
    {"_amp_foreach_non_finite_check_and_unscale", tpu_lower_amp_unscale},
    {"_amp_update_scale", tpu_lower_amp_update_scale},
    {NULL, NULL},
};
