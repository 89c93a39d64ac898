/* Storages, tensor views and the op entry points used by the binding.
 *
 * A storage is a mutable slot over an immutable device buffer (DESIGN.md §3).
 * A tensor is a borrowed view: (storage, dtype, sizes, strides, offset), all in
 * elements, exactly as in PyTorch. Ops never mutate: tpu_op_run returns fresh
 * storages; writes go through tpu_tensor_copy, which swaps the slot. */
#ifndef TORCHTPU_TENSOR_H_
#define TORCHTPU_TENSOR_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchtpu/dtype.h"
#include "torchtpu/runtime.h"
#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_storage tpu_storage_t;

/* An uninitialised storage of `nbytes` on `device`: reading it yields zeros. */
tpu_status_t* tpu_storage_create(int device, size_t nbytes, tpu_storage_t** out_storage);
tpu_storage_t* tpu_storage_retain(tpu_storage_t* s);
void tpu_storage_release(tpu_storage_t* s);
size_t tpu_storage_nbytes(const tpu_storage_t* s);
int tpu_storage_device(const tpu_storage_t* s);
/* Grows or shrinks the storage, keeping the common prefix of its bytes. */
tpu_status_t* tpu_storage_resize(tpu_storage_t* s, size_t nbytes);
/* Makes `dst` share `src`'s current buffer and size (used by set_ and swaps). */
void tpu_storage_assign(tpu_storage_t* dst, tpu_storage_t* src);

typedef struct tpu_tensor {
  tpu_storage_t* storage; /* borrowed */
  tpu_dtype_t dtype;
  int32_t rank;
  int64_t sizes[TPU_MAX_RANK];
  int64_t strides[TPU_MAX_RANK];
  int64_t offset;
} tpu_tensor_t;

int64_t tpu_tensor_numel(const tpu_tensor_t* t);
/* A dense row-major view of storage `s` at offset 0 (s is borrowed). */
tpu_tensor_t tpu_tensor_dense(tpu_storage_t* s, tpu_dtype_t dtype, int rank, const int64_t* sizes);
bool tpu_tensor_is_contiguous(const tpu_tensor_t* t);

/* Host (cpu) → device: `host` holds a dense row-major array of dst's sizes in
 * `host_dtype`; it is converted to dst->dtype and written into the view. */
tpu_status_t* tpu_tensor_upload(const tpu_tensor_t* dst, const void* host,
                                tpu_dtype_t host_dtype);
/* Host staging memory for transfers: a block of at least `nbytes` from the
 * runtime's host pool (aligned, reused, its pages already touched). Owned by the
 * caller until tpu_host_block_release or tpu_tensor_upload_block takes it. */
tpu_status_t* tpu_host_block_acquire(size_t nbytes, void** out_block);
void tpu_host_block_release(void* block); /* NULL is ignored; any thread */
/* tpu_tensor_upload from a block of tpu_host_block_acquire, which it consumes
 * (on failure too). Where dst covers its whole storage in `host_dtype` and the
 * plugin reads host memory (the CPU plugin), the block becomes the storage's
 * device buffer, with no copy; the caller must not write it afterwards. */
tpu_status_t* tpu_tensor_upload_block(const tpu_tensor_t* dst, void* block, tpu_dtype_t host_dtype);
/* Device → host: writes src as a dense row-major array of src's dtype. Waits. */
tpu_status_t* tpu_tensor_download(const tpu_tensor_t* src, void* host, size_t host_nbytes);
/* dst ← cast(broadcast(src)) (PyTorch's copy_). dst must not be an expanded view. */
tpu_status_t* tpu_tensor_copy(const tpu_tensor_t* dst, const tpu_tensor_t* src);

/* ---- op arguments (one per schema argument, in schema order) ---- */
typedef enum tpu_arg_kind {
  TPU_ARG_NONE = 0,     /* an absent optional */
  TPU_ARG_TENSOR,
  TPU_ARG_TENSOR_LIST,  /* Tensor[] and Tensor?[] (absent entries: storage NULL) */
  TPU_ARG_SCALAR,       /* Scalar, or a 0-dim cpu tensor: runtime operand */
  TPU_ARG_INT,
  TPU_ARG_INT_LIST,
  TPU_ARG_FLOAT,
  TPU_ARG_FLOAT_LIST,
  TPU_ARG_BOOL,
  TPU_ARG_BOOL_LIST,
  TPU_ARG_DTYPE,        /* ScalarType */
  TPU_ARG_STRING,
  TPU_ARG_GENERATOR,    /* u.generator: a generator, NULL for the device's default */
  /* Graphs only (graph.h): references to values of the graph being built. */
  TPU_ARG_VALUE,        /* a tensor: u.value */
  TPU_ARG_VALUE_LIST,   /* a tensor list: u.list.values, -1 for an absent entry */
  TPU_ARG_VALUE_SCALAR, /* a Scalar read from value u.scalar.i (0-d), kind of u.scalar.dtype */
  TPU_ARG_KIND_COUNT
} tpu_arg_kind_t;

/* A scalar's kind decides type promotion, its value is not part of the cache key. */
typedef struct tpu_scalar {
  tpu_dtype_t dtype; /* TPU_BOOL, TPU_I64, TPU_F64 for Python numbers; the tensor's for 0-dim cpu tensors */
  bool wrapped;      /* a Python number (PyTorch's wrapped number) */
  double f;          /* value when float/complex real part */
  int64_t i;         /* value when integral or bool */
  double imag;       /* imaginary part when complex (TPU_C64/TPU_C128), else 0 */
} tpu_scalar_t;

typedef struct tpu_arg {
  tpu_arg_kind_t kind;
  union {
    tpu_tensor_t tensor;
    tpu_scalar_t scalar;
    int64_t i;
    double f;
    bool b;
    tpu_dtype_t dtype;
    const char* str;
    tpu_generator_t* generator; /* borrowed */
    int32_t value;              /* VALUE */
    struct {
      int32_t n;
      const int64_t* ints;       /* INT_LIST */
      const double* floats;      /* FLOAT_LIST */
      const bool* bools;         /* BOOL_LIST */
      const tpu_tensor_t* tensors; /* TENSOR_LIST */
      const int32_t* values;       /* VALUE_LIST */
    } list;
  } u;
} tpu_arg_t;

typedef struct tpu_result {
  tpu_storage_t* storage; /* owned: the caller releases it */
  tpu_dtype_t dtype;
  int32_t rank;
  int64_t sizes[TPU_MAX_RANK];
} tpu_result_t;

/* Runs aten op `name` (without the "aten::" prefix and without a trailing
 * in-place underscore, e.g. "add") with overload `overload` ("Tensor", "" ...).
 * `args` are the functional arguments (out= arguments removed). Results are new
 * dense tensors on `device`. Unknown ops give TPU_UNIMPLEMENTED. */
tpu_status_t* tpu_op_run(const char* name, const char* overload, int device,
                         const tpu_arg_t* args, int nargs, int max_results,
                         tpu_result_t* out_results, int* out_nresults);
/* True when the runtime has a lowering for `name`. */
bool tpu_op_supported(const char* name);
/* True for factories that want the out tensor's dtype appended as a trailing
 * TPU_ARG_DTYPE argument (they reach the runtime through their out= variant). */
bool tpu_op_wants_out_dtype(const char* name);

#ifdef __cplusplus
}
#endif
#endif
