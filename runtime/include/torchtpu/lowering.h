/* The op table and the API lowerings are written against.
 *
 * A lowering is a small pure function: it reads the op's arguments (avals and
 * static values), emits StableHLO through the builder and returns its results.
 * It runs only on a cache miss; the cache key is the op, each tensor's
 * (dtype, sizes, strides) and every static argument. Scalars (TPU_ARG_SCALAR)
 * are runtime operands, so their values never enter the key.
 *
 * Fetch every operand value (tpu_op_tensor / tpu_op_scalar) before opening a
 * region: they emit the parameter and its view prologue at the current point. */
#ifndef TORCHTPU_LOWERING_H_
#define TORCHTPU_LOWERING_H_

#include "torchtpu/builder.h"
#include "torchtpu/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_op tpu_op_t;

const char* tpu_op_name(const tpu_op_t* op);
const char* tpu_op_overload(const tpu_op_t* op);
int tpu_op_nargs(const tpu_op_t* op);
/* Kind of argument i; TPU_ARG_NONE when i >= nargs (so trailing defaults read as absent). */
tpu_arg_kind_t tpu_op_kind(const tpu_op_t* op, int i);
/* Borrowed; NULL when i >= nargs. */
const tpu_arg_t* tpu_op_arg(const tpu_op_t* op, int i);
/* The aval of tensor argument i (its view's dtype and sizes). */
tpu_aval_t tpu_op_aval(const tpu_op_t* op, int i);
tpu_aval_t tpu_op_list_aval(const tpu_op_t* op, int i, int j);
int tpu_op_list_len(const tpu_op_t* op, int i);

/* Inside a compiled program an int argument may be a runtime value (a symbolic
 * size such as a decode position). Lowerings that can take one test for it and
 * read it as a 0-d i64 value; a static read (tpu_op_int ...) of a runtime value
 * fails the op instead of returning a placeholder. */
bool tpu_op_is_runtime(const tpu_op_t* op, int i);
/* Int argument i as a 0-d i64 value: the runtime value, or a constant. */
tpu_val_t tpu_op_index(tpu_builder_t* b, tpu_op_t* op, int i);

/* Static values with defaults for absent (NONE / missing) arguments. */
int64_t tpu_op_int(const tpu_op_t* op, int i, int64_t dflt);
double tpu_op_float(const tpu_op_t* op, int i, double dflt);
/* A complex static value: real and imaginary parts (0 for a real value). A
 * lowering that handles complex numbers reads them here; tpu_op_float on a
 * value with an imaginary part fails the op instead. */
void tpu_op_complex(const tpu_op_t* op, int i, double dflt, double* out_re, double* out_im);
bool tpu_op_bool(const tpu_op_t* op, int i, bool dflt);
tpu_dtype_t tpu_op_dtype(const tpu_op_t* op, int i, tpu_dtype_t dflt);
/* INT_LIST values (also accepts a single INT as a list of one). Returns the
 * number copied, at most cap: a longer list fails the op (TPU_INVALID_ARGUMENT
 * naming it) once the lowering returns, so callers never read past `out`. */
int tpu_op_ints(const tpu_op_t* op, int i, int64_t* out, int cap);

/* The value of tensor argument i (or list element j), materialised from its
 * storage through the view prologue. Emits a parameter on first use. */
tpu_val_t tpu_op_tensor(tpu_builder_t* b, tpu_op_t* op, int i);
tpu_val_t tpu_op_list_tensor(tpu_builder_t* b, tpu_op_t* op, int i, int j);
/* Scalar argument i as a 0-d value of dtype `as`: a runtime operand for
 * TPU_ARG_SCALAR; a constant for TPU_ARG_INT / FLOAT / BOOL. */
tpu_val_t tpu_op_scalar(tpu_builder_t* b, tpu_op_t* op, int i, tpu_dtype_t as);
/* The device generator's state for this execution: a tensor<2xi64> operand
 * {seed, offset}, the offset reserved fresh on every execution. */
tpu_val_t tpu_op_rng_state(tpu_builder_t* b, tpu_op_t* op);

typedef tpu_status_t* (*tpu_lower_fn_t)(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                         tpu_val_t* outs, int* out_nouts);
/* Lowering flags. */
enum {
  /* Scalar values are static: part of the cache key, readable with tpu_op_float /
   * tpu_op_int. For ops whose output shape depends on them (arange, linspace). */
  TPU_LOWER_STATIC_SCALARS = 1u << 0,
  /* Data-dependent output shapes (nonzero, masked_select, unique): the lowering
   * returns its results padded to an upper bound, then one more value, a 1-D i64
   * vector with the true dim-0 length of each result (-1: keep). The runtime reads
   * it (a sync point) and trims the results' sizes; storages stay padded. */
  TPU_LOWER_DYNAMIC_SHAPE = 1u << 1,
  /* Factories reached through their out= variant (arange.start_out, eye.m_out):
   * the binding appends the out tensor's dtype as a trailing TPU_ARG_DTYPE. */
  TPU_LOWER_OUT_DTYPE = 1u << 2,
  /* Output sizes that depend on the data's range (bincount): the runtime first
   * reads min and max of tensor argument 0 (a sync; integer tensors only) and
   * appends them as two trailing TPU_ARG_INTs, 0 and -1 when it is empty. They
   * join the cache key like any static argument. */
  TPU_LOWER_DATA_RANGE = 1u << 3,
  /* Output sizes that are the data's sum (repeat_interleave without output_size):
   * when argument 1 is absent, the runtime first reads min and sum of tensor
   * argument 0 (a sync) and appends them as two trailing TPU_ARG_INTs (0 and 0
   * when it is empty); they join the cache key. With argument 1 given, the op
   * runs as it is (and can be recorded in a graph). */
  TPU_LOWER_DATA_SUM = 1u << 4,
};

typedef struct tpu_lowering {
  const char* name; /* aten base name: "add", "_softmax", "max" */
  tpu_lower_fn_t fn;
} tpu_lowering_t;

/* The family tables (one per ops/<family>.c) are private to the runtime:
 * ops/families.h. */

tpu_lower_fn_t tpu_lowering_find(const char* name);
/* Everything the runtime needs about op `name` (borrowed, static), or NULL. */
typedef struct tpu_lowering_info {
  tpu_lower_fn_t fn;
  unsigned flags;    /* TPU_LOWER_* */
  int runtime_float; /* see tpu_lowering_runtime_float */
} tpu_lowering_info_t;
const tpu_lowering_info_t* tpu_lowering_info(const char* name);
/* TPU_LOWER_* flags of an op (listed in ops/table.c). */
unsigned tpu_lowering_flags(const char* name);
/* The index of op `name`'s float argument that is a runtime operand (ops/table.c),
 * or -1. tpu_op_run passes it to the lowering as a TPU_ARG_SCALAR. */
int tpu_lowering_runtime_float(const char* name);
/* Number of distinct lowered names, and of names defined twice (must be 0). */
int tpu_lowering_count(void);
int tpu_lowering_table_duplicates(void);

#ifdef __cplusplus
}
#endif
#endif
