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

#endif
