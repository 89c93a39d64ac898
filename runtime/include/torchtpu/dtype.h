/* Element types. The order is ours; tables indexed by it are checked with
 * static_assert against TPU_DTYPE_COUNT. */
#ifndef TORCHTPU_DTYPE_H_
#define TORCHTPU_DTYPE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_dtype {
  TPU_BOOL = 0,
  TPU_U8,
  TPU_I8,
  TPU_I16,
  TPU_I32,
  TPU_I64,
  TPU_F16,
  TPU_BF16,
  TPU_F32,
  TPU_F64,
  TPU_C64,
  TPU_C128,
  TPU_U16, /* the shell unsigned types: bit patterns (RNG), few ops */
  TPU_U32,
  TPU_U64,
  TPU_DTYPE_COUNT
} tpu_dtype_t;

size_t tpu_dtype_size(tpu_dtype_t t);
/* MLIR element type spelling: "i1", "ui8", "f32", "complex<f32>" ... */
const char* tpu_dtype_mlir(tpu_dtype_t t);
/* PyTorch's name: "float32", "bool" ... */
const char* tpu_dtype_name(tpu_dtype_t t);
/* PyTorch's ScalarType name, as its dtype errors spell it: "Float", "Long" ... */
const char* tpu_dtype_scalar_type_name(tpu_dtype_t t);
bool tpu_dtype_is_float(tpu_dtype_t t);   /* f16 bf16 f32 f64 */
bool tpu_dtype_is_complex(tpu_dtype_t t);
bool tpu_dtype_is_int(tpu_dtype_t t);     /* integral, not bool */
bool tpu_dtype_is_signed(tpu_dtype_t t);
bool tpu_dtype_valid(int t);
/* PyTorch's promoteTypes lattice. */
tpu_dtype_t tpu_dtype_promote(tpu_dtype_t a, tpu_dtype_t b);
/* PyTorch's canCast: may a result of type `from` be written into `to`? */
bool tpu_dtype_can_cast(tpu_dtype_t from, tpu_dtype_t to);
/* For floating computation of an integral/bool input: float32. */
tpu_dtype_t tpu_dtype_to_float(tpu_dtype_t t);
/* PyTorch's opmath: f16/bf16 compute in f32. */
tpu_dtype_t tpu_dtype_opmath(tpu_dtype_t t);

#ifdef __cplusplus
}
#endif
#endif
