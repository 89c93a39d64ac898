/* The nn_models family: one op table, tpu_lowerings_nn_models[] in nn_models.c;
 * the split files (nn_ctc.c) expose their lowerings here. */
#ifndef TORCHTPU_SRC_OPS_NN_MODELS_H_
#define TORCHTPU_SRC_OPS_NN_MODELS_H_

#include "common.h"

tpu_status_t* tpu_lower_ctc_loss(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs, int* nouts);
tpu_status_t* tpu_lower_ctc_loss_backward(tpu_builder_t* b, tpu_op_t* op, int max_outs, tpu_val_t* outs,
                                          int* nouts);

#endif
