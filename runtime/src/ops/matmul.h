/* Matmul-family building blocks shared with other families (attention, linear
 * layers in nn, fused graphs). */
#ifndef TORCHTPU_SRC_OPS_MATMUL_H_
#define TORCHTPU_SRC_OPS_MATMUL_H_

#include "common.h"

/* The C++ type name of dtype t, as PyTorch's TypeMeta prints it in messages
 * ("float", "c10::BFloat16"). */
const char* tpu_mm_cpp_name(tpu_dtype_t t);
/* The accumulate dtype of a product of `t`s: f32 for f16/bf16, else t. */
tpu_dtype_t tpu_mm_acc_dtype(tpu_dtype_t t);
/* x @ y contracting x's dim x_contract with y's y_contract, batched over the
 * first nbatch dims of both; the result (batch, x free, y free) is in
 * tpu_mm_acc_dtype (convert it back to the input dtype when done). */
tpu_val_t tpu_mm_dot(tpu_builder_t* b, tpu_val_t x, tpu_val_t y, int nbatch, int64_t x_contract,
                     int64_t y_contract);

/* ---- convolution, shared with the legacy conv overloads (conv_legacy.c) ---- */

/* The static parameters of a PyTorch convolution. */
typedef struct tpu_conv_params {
  int nsp;
  int64_t stride[TPU_MAX_RANK], padding[TPU_MAX_RANK], dilation[TPU_MAX_RANK], output_padding[TPU_MAX_RANK];
  bool transposed;
  int64_t groups;
} tpu_conv_params_t;

/* INT_LIST arg i as nsp conv parameters (one value repeats for every spatial dim). */
bool tpu_conv_param_list(tpu_builder_t* b, const tpu_op_t* op, int i, const char* name, int nsp, int64_t* out);
/* Checks filled-in params against x [N, C, S...] and w as PyTorch's _convolution does. */
bool tpu_conv_check(tpu_builder_t* b, const tpu_aval_t* x, const tpu_aval_t* w, const tpu_conv_params_t* p);
/* conv (or conv_transpose when p->transposed) of x and w, in the accumulate dtype. */
tpu_val_t tpu_conv_apply(tpu_builder_t* b, tpu_val_t x, tpu_val_t w, const tpu_conv_params_t* p);
/* y + bias (tensor arg i, absent: y unchanged) along dim 1. */
tpu_val_t tpu_conv_add_bias(tpu_builder_t* b, tpu_op_t* op, int i, tpu_val_t y);
/* The bool[3] output_mask at arg i; absent (an out= overload): all true. */
void tpu_conv_mask(const tpu_op_t* op, int i, bool mask[3]);
/* (grad_input, grad_weight, grad_bias) of the conv given grad_output (arg 0),
 * input (arg 1, aval xa) and weight (arg 2, read as wa's shape), in xa's dtype.
 * Masked-off gradients are zeros of their shape. */
void tpu_conv_grads(tpu_builder_t* b, tpu_op_t* op, const tpu_conv_params_t* p, const bool mask[3],
                    const tpu_aval_t* xa, const tpu_aval_t* wa, tpu_val_t* outs);

#endif
