/* The StableHLO builder: writes one MLIR module (generic op syntax) from calls.
 *
 * Lowerings call these functions; eager mode builds one module per op, and the
 * same functions serve fused traces and torch.compile graphs later.
 *
 * Errors are sticky: the first failing call records a status in the builder and
 * returns TPU_NOVAL; every later call that receives TPU_NOVAL returns TPU_NOVAL
 * without emitting anything. Lowerings check tpu_b_ok() where they branch on
 * results and otherwise just return; the caller collects tpu_b_error(). */
#ifndef TORCHTPU_BUILDER_H_
#define TORCHTPU_BUILDER_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "torchtpu/dtype.h"
#include "torchtpu/runtime.h"
#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tpu_builder tpu_builder_t;
typedef int32_t tpu_val_t;
#define TPU_NOVAL ((tpu_val_t)-1)

typedef struct tpu_aval {
  tpu_dtype_t dtype;
  int32_t rank;
  int64_t dims[TPU_MAX_RANK];
} tpu_aval_t;

tpu_aval_t tpu_aval_make(tpu_dtype_t dtype, int rank, const int64_t* dims);
int64_t tpu_aval_numel(const tpu_aval_t* a);
bool tpu_aval_equal(const tpu_aval_t* a, const tpu_aval_t* b);

tpu_status_t* tpu_builder_create(tpu_builder_t** out_builder);
void tpu_builder_destroy(tpu_builder_t* b);
/* The compiler the module is for, where the builder emits around a known weakness
 * of it (tpu_b_dot_general). Set before lowering; the default targets none. */
typedef enum tpu_builder_target {
  TPU_BUILDER_TARGET_ANY = 0,
  TPU_BUILDER_TARGET_XLA_CPU,
} tpu_builder_target_t;
void tpu_builder_set_target(tpu_builder_t* b, tpu_builder_target_t target);
/* Function parameters are numbered in the order of these calls. */
tpu_val_t tpu_b_param(tpu_builder_t* b, const tpu_aval_t* aval);
int tpu_builder_num_params(const tpu_builder_t* b);
/* Parameter `param` may give its buffer to result `result` (same type): an
 * in-place update. Whether it does is the launch's choice (PJRT donation). */
void tpu_b_param_alias(tpu_builder_t* b, int param, int result);
/* The MLIR argument attribute that carries it (XLA's input/output alias). */
#define TPU_B_ALIAS_ATTR "tf.aliasing_output"

/* Writes the module returning `results`; *out_text is owned (free()). */
tpu_status_t* tpu_builder_finish(tpu_builder_t* b, int nresults, const tpu_val_t* results,
                                 char** out_text);

/* Sticky errors. tpu_b_fail takes ownership of `status` (keeps the first). */
void tpu_b_fail(tpu_builder_t* b, tpu_status_t* status);
bool tpu_b_ok(const tpu_builder_t* b);
const tpu_status_t* tpu_b_error(const tpu_builder_t* b);
tpu_status_t* tpu_b_take_error(tpu_builder_t* b);
#define TPU_B_FAIL(b, code, ...) tpu_b_fail((b), TPU_STATUS((code), __VA_ARGS__))

/* Abstract value of `v` (dtype, rank, dims); a zeroed aval for TPU_NOVAL. The
 * pointer is valid until the next value is created (the table grows by realloc):
 * a caller that builds more values first copies it (`tpu_aval_t a = *tpu_b_aval(..)`). */
const tpu_aval_t* tpu_b_aval(const tpu_builder_t* b, tpu_val_t v);
tpu_dtype_t tpu_b_dtype(const tpu_builder_t* b, tpu_val_t v);
int tpu_b_rank(const tpu_builder_t* b, tpu_val_t v);

/* ---- constants ---- */
tpu_val_t tpu_b_const(tpu_builder_t* b, tpu_dtype_t dtype, double value);     /* 0-d */
tpu_val_t tpu_b_const_i(tpu_builder_t* b, tpu_dtype_t dtype, int64_t value);  /* 0-d */
/* 0-d complex (TPU_C64/TPU_C128) re + im*i. */
tpu_val_t tpu_b_const_complex(tpu_builder_t* b, tpu_dtype_t dtype, double re, double im);
/* 0-d: dtype's lowest (or highest) value, -inf/+inf for floats: the identity of max (min). */
tpu_val_t tpu_b_const_extreme(tpu_builder_t* b, tpu_dtype_t dtype, bool lowest);
/* A 0-d constant broadcast to `aval`. */
tpu_val_t tpu_b_full(tpu_builder_t* b, const tpu_aval_t* aval, double value);
tpu_val_t tpu_b_iota(tpu_builder_t* b, const tpu_aval_t* aval, int dim);

/* ---- elementwise (operands of equal shape; binary ops of equal dtype) ---- */
/* `op` is a full op name: "stablehlo.exponential", "chlo.erf" ... */
tpu_val_t tpu_b_unary(tpu_builder_t* b, const char* op, tpu_val_t x);
tpu_val_t tpu_b_binary(tpu_builder_t* b, const char* op, tpu_val_t x, tpu_val_t y);
/* dir: "EQ" "NE" "LT" "LE" "GT" "GE"; compare type follows the dtype. Result i1. */
tpu_val_t tpu_b_compare(tpu_builder_t* b, const char* dir, tpu_val_t x, tpu_val_t y);
tpu_val_t tpu_b_select(tpu_builder_t* b, tpu_val_t pred, tpu_val_t on_true, tpu_val_t on_false);
tpu_val_t tpu_b_convert(tpu_builder_t* b, tpu_val_t x, tpu_dtype_t dtype); /* no-op if same */
/* Same-width bitcast, or to/from a trailing dimension when widths differ. */
tpu_val_t tpu_b_bitcast(tpu_builder_t* b, tpu_val_t x, const tpu_aval_t* out);

/* ---- shapes ---- */
tpu_val_t tpu_b_reshape(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims);
/* stablehlo.broadcast_in_dim: operand dim i goes to result dim bdims[i]. */
tpu_val_t tpu_b_broadcast_in_dim(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims,
                                 const int64_t* bdims);
/* PyTorch/numpy broadcasting of x to `dims` (trailing alignment). */
tpu_val_t tpu_b_broadcast_to(tpu_builder_t* b, tpu_val_t x, int rank, const int64_t* dims);
tpu_val_t tpu_b_transpose(tpu_builder_t* b, tpu_val_t x, const int64_t* perm);
/* strides may be NULL (all 1). */
tpu_val_t tpu_b_slice(tpu_builder_t* b, tpu_val_t x, const int64_t* start, const int64_t* limit,
                      const int64_t* strides);
/* Starts are 0-d integer values, one per dim. */
tpu_val_t tpu_b_dynamic_slice(tpu_builder_t* b, tpu_val_t x, const tpu_val_t* starts,
                              const int64_t* sizes);
tpu_val_t tpu_b_dynamic_update_slice(tpu_builder_t* b, tpu_val_t x, tpu_val_t update,
                                     const tpu_val_t* starts);
tpu_val_t tpu_b_concat(tpu_builder_t* b, int n, const tpu_val_t* xs, int dim);
/* pad_value is 0-d of x's dtype; negative lo/hi crop. interior may be NULL. */
tpu_val_t tpu_b_pad(tpu_builder_t* b, tpu_val_t x, tpu_val_t pad_value, const int64_t* lo,
                    const int64_t* hi, const int64_t* interior);
tpu_val_t tpu_b_reverse(tpu_builder_t* b, tpu_val_t x, int ndims, const int64_t* dims);

/* ---- reductions ---- */
/* Reduces `dims` with the binary op `body` ("stablehlo.add", "stablehlo.maximum",
 * "stablehlo.and" ...); init is 0-d of x's dtype. */
tpu_val_t tpu_b_reduce(tpu_builder_t* b, tpu_val_t x, tpu_val_t init, int ndims,
                       const int64_t* dims, const char* body);
/* Max/min with index along one dim, PyTorch semantics (NaN wins, first index on
 * ties). index dtype i64. Either output pointer may be NULL. */
void tpu_b_argreduce(tpu_builder_t* b, tpu_val_t x, int dim, bool is_max, tpu_val_t* out_values,
                     tpu_val_t* out_indices);

/* ---- contraction ---- */
/* stablehlo.dot_general with HIGHEST precision; result dims: batch, lhs free, rhs free. */
tpu_val_t tpu_b_dot_general(tpu_builder_t* b, tpu_val_t lhs, tpu_val_t rhs, int nbatch,
                            const int64_t* lhs_batch, const int64_t* rhs_batch, int ncontract,
                            const int64_t* lhs_contract, const int64_t* rhs_contract,
                            tpu_dtype_t out_dtype);

/* ---- gather / scatter (stablehlo semantics) ---- */
typedef struct tpu_gather_dims {
  int n_offset;     const int64_t* offset_dims;
  int n_collapsed;  const int64_t* collapsed_slice_dims;
  int n_start_map;  const int64_t* start_index_map;
  int64_t index_vector_dim;
  const int64_t* slice_sizes; /* operand rank entries */
} tpu_gather_dims_t;
tpu_val_t tpu_b_gather(tpu_builder_t* b, tpu_val_t operand, tpu_val_t indices,
                       const tpu_gather_dims_t* dims, const tpu_aval_t* out);
typedef struct tpu_scatter_dims {
  int n_update_window;   const int64_t* update_window_dims;
  int n_inserted_window; const int64_t* inserted_window_dims;
  int n_to_operand;      const int64_t* scatter_dims_to_operand_dims;
  int64_t index_vector_dim;
} tpu_scatter_dims_t;
/* body: a binary op name to combine (e.g. "stablehlo.add"), or NULL to replace. */
tpu_val_t tpu_b_scatter(tpu_builder_t* b, tpu_val_t operand, tpu_val_t indices, tpu_val_t updates,
                        const tpu_scatter_dims_t* dims, const char* body);

/* ---- generic ops and regions (for everything not wrapped above) ---- */
/* Opens a region with block arguments of the given avals (written to out_args).
 * Ops built until tpu_b_region_end go into the region. Regions nest. */
void tpu_b_region_begin(tpu_builder_t* b, int nargs, const tpu_aval_t* arg_avals,
                        tpu_val_t* out_args);
/* Closes the region with `stablehlo.return`; returns its text (owned) or NULL. */
char* tpu_b_region_end(tpu_builder_t* b, int nrets, const tpu_val_t* rets);
/* Emits `"op"(ins) ({regions}) {attrs} : (types) -> (types)`; `attrs` is the text
 * inside the braces or NULL. Takes ownership of the region strings. */
void tpu_b_op(tpu_builder_t* b, const char* op, int nin, const tpu_val_t* ins, int nregions,
              char** regions, const char* attrs, int nout, const tpu_aval_t* out_avals,
              tpu_val_t* outs);
/* One-result convenience over tpu_b_op without regions. */
tpu_val_t tpu_b_op1(tpu_builder_t* b, const char* op, int nin, const tpu_val_t* ins,
                    const char* attrs, const tpu_aval_t* out_aval);

/* Formats "array<i64: 1, 2>" into buf; returns buf. */
char* tpu_fmt_i64_array(char* buf, size_t cap, int n, const int64_t* v);
/* Formats "[1, 2]" into buf; returns buf. */
char* tpu_fmt_i64_list(char* buf, size_t cap, int n, const int64_t* v);
/* Writes "tensor<2x3xf32>" into buf; returns buf. */
char* tpu_fmt_type(char* buf, size_t cap, const tpu_aval_t* a);

#ifdef __cplusplus
}
#endif
#endif
