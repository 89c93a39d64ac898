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
tpu_arg_t kit_arg_float(double v);
tpu_arg_t kit_arg_bool(bool v);
tpu_arg_t kit_arg_dtype(tpu_dtype_t t);
/* An int list; an empty one (v NULL) still points at valid memory, as the binding's do. */
tpu_arg_t kit_arg_ints(int n, const int64_t* v);
tpu_arg_t kit_arg_bools(int n, const bool* v);
tpu_arg_t kit_arg_tensors(int n, const tpu_tensor_t* ts);
/* Runs an op with up to `max` results (at most KIT_MAX_OUTS); returns them as dense
 * tensors (owned storages) and their count in *n. */
#define KIT_MAX_OUTS 8
tpu_status_t* kit_run(const char* name, const char* overload, const tpu_arg_t* args, int nargs, int max,
                      tpu_tensor_t* outs, int* n);
/* Runs an op expecting one result; returns it as a dense tensor (owned storage). */
tpu_status_t* kit_run1(const char* name, const char* overload, const tpu_arg_t* args, int nargs, tpu_tensor_t* out);
/* Downloads a tensor into a float array (converting from its dtype). */
tpu_status_t* kit_read_f32(const tpu_tensor_t* t, float* out, int64_t n);
void kit_release(tpu_tensor_t* t);
/* Whether the plugin under test is the XLA CPU plugin: host memory as device
 * memory, lent host blocks and the quick compile tiers are its alone. */
bool kit_on_cpu_plugin(void);
void kit_release_all(tpu_tensor_t* t, int n);

/* Checks result r (dtype; shape unless rank < 0; values, NaN matching NaN, inf exactly,
 * else within tol * (1 + |want|)), records failures at file:line, and releases r. */
void kit_check(const char* file, int line, const char* what, tpu_tensor_t* r, tpu_dtype_t dtype, int rank,
               const int64_t* sizes, const float* want, int n, double tol);
/* KIT_CHECK(what, r, dtype, rank, sizes, want, n, tol): kit_check at the caller's line
 * (variadic so compound literals with commas pass through). */
#define KIT_CHECK(...) kit_check(__FILE__, __LINE__, __VA_ARGS__)

#endif
