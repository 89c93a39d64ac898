/* Lowerings: nn_models family — ops that Hugging Face models reach and no other
 * family lowers (found by the model suite, tests/models/). CTC loss lives in
 * nn_ctc.c.
 *
 * polar and complex build complex numbers (from magnitude and angle, or parts).
 *
 * Weight normalisation (_weight_norm_interface and its backward): w = v * g / ||v||
 * with the norm over every dim but `dim`, as torch.nn.utils.parametrizations.
 * weight_norm calls it (wav2vec2-style convolutional position embeddings). The
 * math runs in the op-math type (f32 for f16/bf16), like ATen's CPU kernel; the
 * norms keep g's dtype except bfloat16 ones, which stay float32 (ATen does the same
 * "to align with CUDA"). */
#include <string.h>

#include "nn_models.h"

/* Every dim of a rank-`rank` tensor except `dim` (dim -1: all dims; checked by
 * tpu_wn_check): the dims the norm reduces. Returns their count. */
static int tpu_wn_dims(int64_t dim, int rank, int64_t* out) {
  int n = 0;
  for (int i = 0; i < rank; ++i)
    if (i != dim) out[n++] = i;
  return n;
}

/* sum(x, dims) reshaped to `shape` (the norms' shape: g's). */
static tpu_val_t tpu_wn_sum(tpu_builder_t* b, tpu_val_t x, int nd, const int64_t* dims, const tpu_aval_t* shape) {
  tpu_dtype_t t = tpu_b_dtype(b, x);
  tpu_val_t s = tpu_b_reduce(b, x, tpu_b_const(b, t, 0.0), nd, dims, "stablehlo.add");
  return tpu_b_reshape(b, s, shape->rank, shape->dims);
}

/* v and g must share rank and g must be 1 on every reduced dim: g broadcasts to v. */
static bool tpu_wn_check(tpu_builder_t* b, const tpu_op_t* op, int iv, int ig, int64_t dim) {
  tpu_aval_t v = tpu_op_aval(op, iv), g = tpu_op_aval(op, ig);
  if (dim < -1 || dim >= v.rank) {
    TPU_B_FAIL(b, TPU_OUT_OF_RANGE, "%s: dim %" PRId64 " out of range for a %d-d weight", tpu_op_name(op), dim,
               v.rank);
    return false;
  }
  if (tpu_op_kind(op, iv) != TPU_ARG_TENSOR || tpu_op_kind(op, ig) != TPU_ARG_TENSOR ||
      !tpu_dtype_is_float(v.dtype) || !tpu_dtype_is_float(g.dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected floating-point tensors v and g", tpu_op_name(op));
    return false;
  }
  bool ok = g.rank == v.rank;
  for (int i = 0; ok && i < v.rank; ++i) ok = g.dims[i] == (i == dim ? v.dims[i] : 1) || (dim == -1 && g.dims[i] == 1);
  if (!ok) TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: g must have v's size along dim %" PRId64 " and 1 elsewhere",
                      tpu_op_name(op), dim);
  return ok;
}

static tpu_dtype_t tpu_wn_norm_dtype(tpu_dtype_t g) { return g == TPU_BF16 ? TPU_F32 : g; }

/* _weight_norm_interface(Tensor v, Tensor g, int dim=0) -> (Tensor w, Tensor norms) */
static tpu_status_t* tpu_lower_weight_norm_interface(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                                     int* nouts) {
  (void)max_outs;
  int64_t dim = tpu_op_int(op, 2, 0);
  if (!tpu_wn_check(b, op, 0, 1, dim)) return NULL;
  tpu_aval_t va = tpu_op_aval(op, 0), ga = tpu_op_aval(op, 1);
  int64_t dims[TPU_MAX_RANK];
  int nd = tpu_wn_dims(dim, va.rank, dims);
  tpu_dtype_t ct = tpu_ops_compute_float(va.dtype);
  tpu_val_t v = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct);
  tpu_val_t norms = tpu_b_unary(b, "stablehlo.sqrt", tpu_wn_sum(b, tpu_b_binary(b, "stablehlo.multiply", v, v), nd,
                                                                 dims, &ga));
  tpu_val_t scale = tpu_ops_bcast(b, tpu_b_binary(b, "stablehlo.divide", g, norms), &va);
  outs[0] = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.multiply", v, scale), va.dtype);
  outs[1] = tpu_b_convert(b, norms, tpu_wn_norm_dtype(ga.dtype));
  *nouts = 2;
  return NULL;
}

/* _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim) -> (grad_v, grad_g):
 *   s = sum(grad_w * v) over the reduced dims, grad_g = s / norms,
 *   grad_v = (g / norms) * (grad_w - v * s / norms^2). */
static tpu_status_t* tpu_lower_weight_norm_interface_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                              tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int64_t dim = tpu_op_int(op, 4, 0);
  if (!tpu_wn_check(b, op, 1, 2, dim)) return NULL;
  tpu_aval_t va = tpu_op_aval(op, 1), ga = tpu_op_aval(op, 2);
  int64_t dims[TPU_MAX_RANK];
  int nd = tpu_wn_dims(dim, va.rank, dims);
  tpu_dtype_t ct = tpu_ops_compute_float(va.dtype);
  tpu_val_t gw = tpu_b_convert(b, tpu_op_tensor(b, op, 0), ct);
  tpu_val_t v = tpu_b_convert(b, tpu_op_tensor(b, op, 1), ct);
  tpu_val_t g = tpu_b_convert(b, tpu_op_tensor(b, op, 2), ct);
  tpu_val_t norms = tpu_b_reshape(b, tpu_b_convert(b, tpu_op_tensor(b, op, 3), ct), ga.rank, ga.dims);
  tpu_val_t s = tpu_wn_sum(b, tpu_b_binary(b, "stablehlo.multiply", gw, v), nd, dims, &ga);
  tpu_val_t grad_g = tpu_b_binary(b, "stablehlo.divide", s, norms);
  tpu_val_t coef = tpu_b_binary(b, "stablehlo.divide", grad_g, norms); /* s / norms^2 */
  tpu_val_t inner = tpu_b_binary(b, "stablehlo.subtract", gw,
                                 tpu_b_binary(b, "stablehlo.multiply", v, tpu_ops_bcast(b, coef, &va)));
  tpu_val_t scale = tpu_ops_bcast(b, tpu_b_binary(b, "stablehlo.divide", g, norms), &va);
  outs[0] = tpu_b_convert(b, tpu_b_binary(b, "stablehlo.multiply", scale, inner), va.dtype);
  outs[1] = tpu_b_convert(b, grad_g, ga.dtype);
  *nouts = 2;
  return NULL;
}

/* The (real, imaginary) parts of a complex result from two float tensors (args 0
 * and 1, same dtype, broadcast); ATen's messages. f16 (complex32) is not supported. */
static bool tpu_complex_operands(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* out_x, tpu_val_t* out_y,
                                 tpu_aval_t* out_shape) {
  tpu_aval_t a = tpu_op_aval(op, 0), t = tpu_op_aval(op, 1);
  if (tpu_op_kind(op, 0) != TPU_ARG_TENSOR || tpu_op_kind(op, 1) != TPU_ARG_TENSOR) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected two tensors", tpu_op_name(op));
    return false;
  }
  if (a.dtype != t.dtype && tpu_dtype_is_float(a.dtype) && tpu_dtype_is_float(t.dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected object of scalar type %s but got scalar type %s for second argument",
               tpu_dtype_scalar_type_name(a.dtype), tpu_dtype_scalar_type_name(t.dtype));
    return false;
  }
  if (a.dtype != t.dtype || (a.dtype != TPU_F32 && a.dtype != TPU_F64 && a.dtype != TPU_F16)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "Expected both inputs to be Half, Float or Double tensors but got %s and %s",
               tpu_dtype_scalar_type_name(a.dtype), tpu_dtype_scalar_type_name(t.dtype));
    return false;
  }
  if (a.dtype == TPU_F16) {
    TPU_B_FAIL(b, TPU_UNIMPLEMENTED, "%s: complex32 (ComplexHalf) results are not supported on tpu", tpu_op_name(op));
    return false;
  }
  if (!tpu_ops_broadcast_shape(b, op, 2, (int[]){0, 1}, out_shape)) return false;
  *out_x = tpu_ops_operand(b, op, 0, a.dtype, out_shape);
  *out_y = tpu_ops_operand(b, op, 1, a.dtype, out_shape);
  out_shape->dtype = a.dtype == TPU_F32 ? TPU_C64 : TPU_C128;
  return tpu_b_ok(b);
}

/* polar(abs, angle) -> abs * (cos(angle) + i sin(angle)): float32 -> complex64,
 * float64 -> complex128 (Llama 4's rotary embedding builds its frequencies so). */
static tpu_status_t* tpu_lower_polar(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t shape;
  tpu_val_t r, th;
  if (!tpu_complex_operands(b, op, &r, &th, &shape)) return NULL;
  tpu_val_t parts[2] = {tpu_b_binary(b, "stablehlo.multiply", r, tpu_b_unary(b, "stablehlo.cosine", th)),
                        tpu_b_binary(b, "stablehlo.multiply", r, tpu_b_unary(b, "stablehlo.sine", th))};
  return tpu_ops_result1(tpu_b_op1(b, "stablehlo.complex", 2, parts, NULL, &shape), outs, nouts);
}

/* complex(real, imag) */
static tpu_status_t* tpu_lower_complex(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t shape;
  tpu_val_t parts[2];
  if (!tpu_complex_operands(b, op, &parts[0], &parts[1], &shape)) return NULL;
  return tpu_ops_result1(tpu_b_op1(b, "stablehlo.complex", 2, parts, NULL, &shape), outs, nouts);
}

const tpu_lowering_t tpu_lowerings_nn_models[] = {
    {"polar", tpu_lower_polar},
    {"complex", tpu_lower_complex},
    {"_weight_norm_interface", tpu_lower_weight_norm_interface},
    {"_weight_norm_interface_backward", tpu_lower_weight_norm_interface_backward},
    {"_ctc_loss", tpu_lower_ctc_loss},
    {"_ctc_loss_backward", tpu_lower_ctc_loss_backward},
    {NULL, NULL},
};
