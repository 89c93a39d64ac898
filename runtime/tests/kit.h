/* Helpers for runtime tests: host arrays in, ops run, host arrays out. */
#ifndef TORCHTPU_TESTS_KIT_H_
#define TORCHTPU_TESTS_KIT_H_

#include "torchtpu/tensor.h"

/* A dense tensor on device 0 holding `data` (dtype `dtype`, row-major). */
tpu_status_t* kit_tensor(tpu_dtype_t dtype, int rank, const int64_t* sizes, const void* data, tpu_tensor_t* out);
/* A view of an existing tensor's storage. */
tpu_tensor_t kit_view(const tpu_tensor_t* base, int rank, const int64_t* sizes, const int64_t* strides,
                      int64_t offset);
tpu_arg_t kit_arg_tensor(const tpu_tensor_t* t);
tpu_arg_t kit_arg_scalar_f(double v);
tpu_arg_t kit_arg_scalar_i(int64_t v);
tpu_arg_t kit_arg_int(int64_t v);
tpu_arg_t kit_arg_none(void);
/* Runs an op expecting one result; returns it as a dense tensor (owned storage). */
tpu_status_t* kit_run1(const char* name, const char* overload, const tpu_arg_t* args, int nargs, tpu_tensor_t* out);
/* Downloads a tensor into a float array (converting from its dtype). */
tpu_status_t* kit_read_f32(const tpu_tensor_t* t, float* out, int64_t n);
void kit_release(tpu_tensor_t* t);

#endif
