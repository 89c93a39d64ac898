/* Internal: storages, the op context lowerings see, the view prologue/epilogue
 * and the cached executor shared by ops, copies, uploads and resizes. */
#ifndef TORCHTPU_SRC_EXEC_H_
#define TORCHTPU_SRC_EXEC_H_

#include "device.h"
#include "torchtpu/lowering.h"
#include "torchtpu/tensor.h"

/* ---- storage slots ---- */
/* Retains and returns the current buffer (NULL: never written, reads as zeros). */
tpu_buffer_t* tpu_storage_buffer(tpu_storage_t* s);
/* Swaps in `buf` (retained by the slot); the old buffer is released. */
void tpu_storage_set_buffer(tpu_storage_t* s, tpu_buffer_t* buf, size_t nbytes);

/* ---- how a tensor argument reaches the executable ---- */
typedef enum tpu_view_mode {
  TPU_VIEW_ABSENT = 0,  /* no storage (None entry) */
  TPU_VIEW_ZEROS,       /* storage never written: a constant zero, no parameter */
  TPU_VIEW_FULL,        /* the whole buffer, same dtype and element count: reshape only */
  TPU_VIEW_DYNAMIC,     /* strided window whose offset is a runtime operand */
  TPU_VIEW_STATIC,      /* strided window or gather with the offset baked in */
} tpu_view_mode_t;

typedef struct tpu_view_arg {
  tpu_view_mode_t mode;
  tpu_buffer_t* buffer; /* retained snapshot of the storage's buffer, or NULL */
  tpu_aval_t buffer_aval;
  int64_t storage_elems; /* storage bytes / view itemsize, for ZEROS */
} tpu_view_arg_t;

tpu_view_mode_t tpu_view_classify(const tpu_tensor_t* t, const tpu_buffer_t* buffer);
/* The same for a buffer of aval `ba` (NULL: never written). */
tpu_view_mode_t tpu_view_classify_aval(const tpu_tensor_t* t, const tpu_aval_t* ba);

/* ---- parameter plan of a compiled op ---- */
typedef enum tpu_param_kind {
  TPU_PARAM_BUFFER = 0, /* the storage buffer of tensor (arg, item) */
  TPU_PARAM_OFFSET,     /* i64 storage offset of tensor (arg, item) */
  TPU_PARAM_SCALAR,     /* scalar arg converted to dtype */
  TPU_PARAM_RNG,        /* u64[2] = {seed, offset} drawn at execution */
  TPU_PARAM_CHECK_WORD, /* check.h: the device's i64[2] error word */
  TPU_PARAM_CHECK_CODE, /* check.h: i64 message id, held in `arg` */
} tpu_param_kind_t;

typedef struct tpu_param_src {
  tpu_param_kind_t kind;
  int32_t arg, item; /* item: list index, -1 for a plain tensor (lists may be long) */
  tpu_dtype_t dtype; /* SCALAR: the parameter's dtype */
  /* BUFFER: 1 + the result this buffer may be donated to (tpu_b_param_alias,
   * graphs' in-place outputs); 0: never donated. */
  int32_t donate_to;
} tpu_param_src_t;

/* The first int list a lowering read into a buffer too small for it
 * (tpu_op_ints): the executor turns it into an error naming the op. */
typedef struct tpu_op_list_error {
  int arg;      /* -1: none */
  int len, cap; /* the list's length and the reader's buffer */
  /* The first runtime-valued argument (a symbolic size inside a program) a
   * lowering read as a static value (tpu_op_int/float/bool); -1: none. */
  int runtime_arg;
  /* The first complex scalar with an imaginary part a lowering read as a real
   * number (tpu_op_int/float); -1: none. */
  int complex_arg;
} tpu_op_list_error_t;

/* INVALID_ARGUMENT, as c10's checked conversion, when `sc` has an imaginary
 * part and `as` is not complex; else NULL. */
tpu_status_t* tpu_scalar_real_status(const tpu_scalar_t* sc, tpu_dtype_t as);
/* UNIMPLEMENTED when a lowering of `name` read a complex scalar as a real
 * number (e->complex_arg), else NULL. */
tpu_status_t* tpu_op_complex_read_status(const tpu_op_list_error_t* e, const char* name);

struct tpu_op {
  const char* name;
  const char* overload;
  const tpu_arg_t* args;
  int nargs;
  /* A whole program's own data (graph.c), NULL for an aten op. */
  const void* program;
  /* An op inside a program (graph.c): its tensor arguments are values of the
   * program's builder (view_vals preset), its operands (RNG state, checks) are
   * the root program's, and arg_vals[i] holds the value of a TPU_ARG_SCALAR
   * argument read from the program (TPU_NOVAL: a constant). NULL in eager. */
  tpu_op_t* parent;
  const tpu_val_t* arg_vals;
  /* Per tensor (arg, item): the snapshot and, once emitted, its value. */
  tpu_view_arg_t* views;   /* indexed by tpu_op_view_index */
  tpu_val_t* view_vals;    /* materialised values */
  tpu_val_t* buffer_vals;  /* raw buffer parameters */
  int nviews;
  int* view_base;          /* first view index of each arg */
  tpu_val_t* scalar_vals;  /* per arg, per dtype cache: [arg * TPU_DTYPE_COUNT + dtype] */
  tpu_param_src_t* params; /* grown on demand: an op takes any number of operands */
  int nparams, params_cap;
  /* Written through from const accessors (tpu_op_ints), hence a pointer. */
  tpu_op_list_error_t* list_error;
  /* check.h: device-side checks recorded so far (tpu_op_check): whether any
   * (false in the zeroed op), did one fail (0-d bool), the first failing one's
   * i64[2] {id, value}. */
  bool checked;
  tpu_val_t check_bad, check_acc;
};

int tpu_op_view_index(const tpu_op_t* op, int arg, int item);
/* Appends a parameter fed from `src` at execution time (check.c adds its own kinds). */
tpu_val_t tpu_op_add_param(tpu_builder_t* b, tpu_op_t* op, tpu_param_src_t src, const tpu_aval_t* aval);
/* The raw storage buffer of tensor (arg, item) as a value (a parameter). */
tpu_val_t tpu_op_buffer(tpu_builder_t* b, tpu_op_t* op, int arg, int item);
/* New storage buffer for tensor arg `arg` after writing `value` into its view. */
tpu_val_t tpu_op_write_view(tpu_builder_t* b, tpu_op_t* op, int arg, tpu_val_t value);

/* View prologue: the value of view `t` read from the flat storage value `flat`
 * (N elements of t->dtype); offset_val is a 0-d i64 runtime offset or TPU_NOVAL. */
tpu_val_t tpu_view_read(tpu_builder_t* b, tpu_val_t flat, const tpu_tensor_t* t, tpu_val_t offset_val);
/* View epilogue: flat with `value` written into view `t`. */
tpu_val_t tpu_view_write(tpu_builder_t* b, tpu_val_t flat, const tpu_tensor_t* t, tpu_val_t offset_val,
                         tpu_val_t value);
/* The storage buffer value as a flat vector of `dtype` (bitcasting if needed). */
tpu_val_t tpu_view_flatten(tpu_builder_t* b, tpu_val_t buffer, tpu_dtype_t dtype);
/* Inverse of tpu_view_flatten: back to the buffer's own aval. */
tpu_val_t tpu_view_unflatten(tpu_builder_t* b, tpu_val_t flat, const tpu_aval_t* buffer_aval);

/* Lowers op `name` (lowering fn) inside `parent`'s lowering: its arguments are
 * as tpu_op_run's, with tensors given as values of this builder by reference
 * (TPU_ARG_VALUE / VALUE_LIST / VALUE_SCALAR: ids into `vals`). The op's
 * operands (RNG state, device-side checks) become the parent's. */
tpu_status_t* tpu_op_lower_values(tpu_builder_t* b, tpu_op_t* parent, tpu_lower_fn_t fn, const char* name,
                                  const char* overload, const tpu_arg_t* args, int nargs, const tpu_val_t* vals,
                                  int max_outs, tpu_val_t* outs, int* out_nouts);

/* Runs lowering `fn` for op `name` through the cache; returns raw output buffers
 * (owned) and their count. */

tpu_status_t* tpu_exec_run(const char* name, const char* overload, tpu_lower_fn_t fn, unsigned flags,
                           int device, const tpu_arg_t* args, int nargs, int max_outs,
                           tpu_buffer_t** out_buffers, int* out_nouts);

/* A whole program (graph.c): `program` is handed to its lowering as
 * op->program, `key` (its identity, key_len bytes) joins the cache key. */
typedef struct tpu_exec_program {
  const void* program;
  const uint8_t* key;
  size_t key_len;
} tpu_exec_program_t;
/* Runs a program through the same cache and launch path as an op; `args` are
 * its inputs, `fn` lowers it (on a miss) with op->program set. out_fresh: this
 * run built the program, or is the first to run one prepared for it. */
tpu_status_t* tpu_exec_run_program(const char* name, tpu_lower_fn_t fn, const tpu_exec_program_t* program,
                                   int device, const tpu_arg_t* args, int nargs, int max_outs,
                                   tpu_buffer_t** out_buffers, int* out_nouts, bool* out_fresh);
/* Lowers the program a later tpu_exec_run_program with these arguments would
 * run, puts it in the cache and compiles it on the background thread, and
 * returns (a no-op when the cache has it, or TORCHTPU_BACKGROUND_COMPILE=0).
 * Tensor arguments whose storage was never written stand for storages that will
 * hold an op's result (tpu_guess_buffer_aval in exec.c): when the real inputs
 * differ, the run misses and builds its own program. */
tpu_status_t* tpu_exec_prepare_program(const char* name, tpu_lower_fn_t fn, const tpu_exec_program_t* program,
                                       int device, const tpu_arg_t* args, int nargs, int max_outs);

/* Wraps output buffers (all consumed, also on error) as result storages on
 * `device`; a TPU_LOWER_DYNAMIC_SHAPE op's results are trimmed by `lengths`
 * (i64[2n]: sizes, then the dim each one sizes). */
tpu_status_t* tpu_op_results(int device, unsigned flags, tpu_buffer_t** bufs, int n, const int64_t* lengths,
                             tpu_result_t* out_results);

/* A scalar's value as a double: its float, or its integer read with its
 * dtype's sign (a uint64 past INT64_MAX travels as its bit pattern). */
double tpu_scalar_to_double(const tpu_scalar_t* sc);

/* Scalar buffers are cached by (device, dtype, bits). Owned reference. */
tpu_status_t* tpu_scalar_buffer(int device, tpu_dtype_t dtype, const void* bytes,
                                tpu_buffer_t** out_buffer);
/* Drops cached scalar buffers (shutdown, tests). */
void tpu_scalar_cache_clear(void);
#endif
