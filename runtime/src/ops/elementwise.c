/* Lowerings: elementwise family (arithmetic with PyTorch's broadcasting and
 * type promotion; float math runs in f32 for f16/bf16 like PyTorch's opmath). */
#include "common.h"

#include <string.h>

/* result = x op (alpha * y), computed in the opmath type of the result type. */
static tpu_status_t* tpu_lower_add_like(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* outs, int* nouts,
                                        const char* hlo, bool alpha) {
  int args[2] = {0, 1};
  tpu_dtype_t rt = tpu_ops_result_type(op, 2, args);
  tpu_aval_t shape;
  if (!tpu_ops_broadcast_shape(b, op, 2, args, &shape)) return NULL;
  tpu_dtype_t ct = tpu_dtype_opmath(rt);
  tpu_val_t x = tpu_ops_operand(b, op, 0, ct, &shape);
  tpu_val_t y = tpu_ops_operand(b, op, 1, ct, &shape);
  if (alpha && tpu_ops_has_value(op, 2)) y = tpu_b_binary(b, "stablehlo.multiply", y, tpu_ops_operand(b, op, 2, ct, &shape));
  if (rt == TPU_BOOL && strcmp(hlo, "stablehlo.add") == 0) hlo = "stablehlo.or";
  outs[0] = tpu_b_convert(b, tpu_b_binary(b, hlo, x, y), rt);
  *nouts = 1;
  return NULL;
}

static tpu_status_t* tpu_lower_add(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  return tpu_lower_add_like(b, op, outs, nouts, "stablehlo.add", true);
}

static tpu_status_t* tpu_lower_mul(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  int args[2] = {0, 1};
  if (tpu_ops_result_type(op, 2, args) == TPU_BOOL)
    return tpu_lower_add_like(b, op, outs, nouts, "stablehlo.and", false);
  return tpu_lower_add_like(b, op, outs, nouts, "stablehlo.multiply", false);
}

const tpu_lowering_t tpu_lowerings_elementwise[] = {
    {"add", tpu_lower_add},
    {"mul", tpu_lower_mul},
    {NULL, NULL},
};
