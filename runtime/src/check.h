/* Device-side checks (issue 7): data-dependent errors such as an index out of
 * range, raised at the next synchronisation without a host sync per op.
 *
 * Each device keeps one "error word" on the device: an i64[2] buffer
 * {id, value}, id 0 meaning no error. A lowering whose inputs can be invalid in
 * a way only the data shows computes a 0-d bool `bad` and calls tpu_op_check.
 * The executor then gives that op the device's current word as an extra operand
 * and takes a new word as an extra result:
 *
 *   word' = word.id != 0 ? word : (bad ? {id, value} : {0, 0})   (first error wins)
 *
 * `id` is a runtime operand (not a constant in the program), so the program text
 * and the cache key are those of the same op without the message; it indexes a
 * host-side table of (status code, op, message) entries interned when the op is
 * lowered. Ops without checks are untouched: no operand, no result, no lock.
 *
 * Sync points (tpu_tensor_download, tpu_runtime_synchronize, the read-back of a
 * dynamic-shape op) call tpu_check_sync: when a checked op ran on the device
 * since the last read, it downloads the word (16 bytes), and a recorded error is
 * cleared and returned. In debug eager mode every checked op reads its word at
 * once, so the error surfaces on the op's own line. */
#ifndef TORCHTPU_SRC_CHECK_H_
#define TORCHTPU_SRC_CHECK_H_

#include "cache.h"

/* ---- for lowerings ---- */

/* Records a check of `op`: when the 0-d bool `bad` is true at run time, the
 * device's error word records it (unless an earlier error is pending) and the
 * next sync fails with `code` (TPU_OUT_OF_RANGE → IndexError, TPU_LINALG_ERROR →
 * torch.linalg.LinAlgError, others → RuntimeError) and the printf-formatted
 * message. Each "{}" in the formatted message is replaced by `value` (a 0-d
 * integer value, e.g. the offending index, or TPU_NOVAL) when the error is
 * raised. Several checks of one op combine; the first failing one (in call
 * order) is reported. */
void tpu_op_check(tpu_builder_t* b, tpu_op_t* op, tpu_val_t bad, tpu_val_t value, tpu_status_code_t code,
                  const char* fmt, ...) TPU_PRINTF_ATTR(6, 7);

/* ---- for the executor (exec.c) ---- */

/* After the lowering: when the op recorded checks, adds the error-word operand
 * and returns the new word in *out_word (to be the last result); else TPU_NOVAL. */
tpu_status_t* tpu_check_lower(tpu_builder_t* b, tpu_op_t* op, tpu_val_t* out_word);
/* Executes a compiled op that has checks (c->nouts results plus the word): fills
 * the word and message-id operands of `params` (the caller releases them as
 * usual), swaps the device's word, returns the c->nouts results. `donate` as
 * tpu_executable_launch_donating's (NULL: none). In debug mode reads the word at
 * once and fails with the op's own error. */
tpu_status_t* tpu_check_execute(const tpu_compiled_t* c, int device, tpu_buffer_t** params, const bool* donate,
                                const char* name, tpu_buffer_t** out_buffers);

/* ---- sync points ---- */

/* Reads the error word of `device` (every device when device < 0) if a checked
 * op ran there since the last read; returns the recorded error (and clears it),
 * or NULL. */
tpu_status_t* tpu_check_sync(int device);
/* Drops every device's word (before the client goes away). Pending errors are lost. */
void tpu_check_release_all(void);

#endif
