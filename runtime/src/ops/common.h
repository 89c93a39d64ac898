/* Shared helpers for lowerings: PyTorch's type promotion and broadcasting, dim
 * normalisation, and operand access that treats tensors and scalars alike. */
#ifndef TORCHTPU_SRC_OPS_COMMON_H_
#define TORCHTPU_SRC_OPS_COMMON_H_

#include <inttypes.h>

#include "families.h"
#include "torchtpu/lowering.h"

#define TPU_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* PyTorch's result_type over args (tensors, 0-dim tensors, wrapped scalars). */
tpu_dtype_t tpu_ops_result_type(const tpu_op_t* op, int n, const int* args);
/* Broadcast shape of the tensor args among `args` (scalars broadcast freely). */
bool tpu_ops_broadcast_shape(tpu_builder_t* b, const tpu_op_t* op, int n, const int* args, tpu_aval_t* out);
/* Arg i (tensor or scalar) converted to `dtype` and broadcast to `shape`. */
tpu_val_t tpu_ops_operand(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t dtype, const tpu_aval_t* shape);
/* A value broadcast (numpy rules) to shape. */
tpu_val_t tpu_ops_bcast(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* shape);
/* Wraps a possibly negative dim; records an IndexError-style failure if out of range. */
int tpu_ops_dim(tpu_builder_t* b, int64_t dim, int rank);
/* The dims of INT_LIST arg i (wrapped) as a set: out_seen[d] for each; a dim
 * given twice records the failure PyTorch raises. Returns false on failure. */
bool tpu_ops_dim_set(tpu_builder_t* b, const tpu_op_t* op, int i, int rank, bool out_seen[TPU_MAX_RANK]);
/* Reduction dims from INT_LIST/INT arg i; absent or empty → all dims. Sorted, unique. */
int tpu_ops_reduce_dims(tpu_builder_t* b, const tpu_op_t* op, int i, int rank, int64_t* out);
/* A 0-d constant broadcast to v's shape, of v's dtype. */
tpu_val_t tpu_ops_like(tpu_builder_t* b, tpu_val_t v, double value);
/* The op's float compute dtype for input dtype t (f16/bf16 → f32, ints → f32). */
tpu_dtype_t tpu_ops_compute_float(tpu_dtype_t t);
/* Is arg i a tensor or scalar (something with a value)? */
bool tpu_ops_has_value(const tpu_op_t* op, int i);
/* Shape of `v` with `dims` (sorted) reinserted as size 1 (keepdim). */
tpu_val_t tpu_ops_keepdim(tpu_builder_t* b, tpu_val_t v, const tpu_aval_t* in, int ndims, const int64_t* dims);
/* Complex values by parts: z's real or imaginary part (in the real dtype),
 * re + i im (f32 parts give c64, f64 c128), and conj(z), the identity for a
 * real z. */
tpu_val_t tpu_ops_part(tpu_builder_t* b, tpu_val_t z, bool imag);
tpu_val_t tpu_ops_complex(tpu_builder_t* b, tpu_val_t re, tpu_val_t im);
tpu_val_t tpu_ops_conj(tpu_builder_t* b, tpu_val_t z);
/* A lowering's single result: outs[0] = v, *nouts = 1; returns NULL (OK). */
tpu_status_t* tpu_ops_result1(tpu_val_t v, tpu_val_t* outs, int* nouts);

#endif
