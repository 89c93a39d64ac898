/* Creation family: what the binding must pass beyond the functional arguments.
 *
 * Factory ops reach the runtime as their `*.out` variants (arange.start_out,
 * linspace.out, logspace.out, eye.m_out, range.out) with the out tensor stripped.
 * Their result dtype is the out tensor's dtype, which nothing else carries
 * (torch.eye(3, dtype=torch.int64) passes only n). For an op named here the
 * binding appends one trailing TPU_ARG_DTYPE argument: the out tensor's dtype.
 * Without it the lowerings fall back to PyTorch's default inference (float32, or
 * int64 for arange over integers). */
#ifndef TORCHTPU_SRC_OPS_CREATION_H_
#define TORCHTPU_SRC_OPS_CREATION_H_

#include "common.h"

/* True for ops (base names) that want the trailing out-dtype argument. */
bool tpu_creation_needs_out_dtype(const char* name);

#endif
