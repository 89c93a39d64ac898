/* Index-family building blocks shared with other families (shape: pads and
 * upsampling are static gathers; reduce/nn may want sort and prefix sums).
 *
 * Index values are always i64 inside the graph. These building blocks do not
 * check ranges: gathers clamp (stablehlo semantics) and scatters drop
 * out-of-bounds updates. The index family's own lowerings check user indices on
 * the device (check.h, tpu_op_check); tpu_idx_out_of_range gives the 0-d bool
 * such a check needs. */
#ifndef TORCHTPU_SRC_OPS_INDEX_H_
#define TORCHTPU_SRC_OPS_INDEX_H_

#include "common.h"

/* idx converted to i64 with negative values wrapped by `size` (idx + size). */
tpu_val_t tpu_idx_wrap(tpu_builder_t* b, tpu_val_t idx, int64_t size);
/* 0-d bool: any element of idx (already i64) outside [0, size). */
tpu_val_t tpu_idx_out_of_range(tpu_builder_t* b, tpu_val_t idx, int64_t size);
/* x.index_select(dim, idx): idx is 1-D i64 in range. */
tpu_val_t tpu_idx_select(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t idx);
/* base.index_add/copy along dim: src has base's shape with dim of size len(idx).
 * body combines ("stablehlo.add" ...) or NULL replaces. */
tpu_val_t tpu_idx_put_along(tpu_builder_t* b, tpu_val_t base, int dim, tpu_val_t idx, tpu_val_t src,
                            const char* body);
/* torch.gather: out[p] = x[p with p[dim] = idx[p]]; idx (i64) of x's rank. */
tpu_val_t tpu_idx_gather_dim(tpu_builder_t* b, tpu_val_t x, int dim, tpu_val_t idx);
/* torch.scatter: base[p with p[dim] = idx[p]] (body)= src[p] for p in idx's shape. */
tpu_val_t tpu_idx_scatter_dim(tpu_builder_t* b, tpu_val_t base, int dim, tpu_val_t idx, tpu_val_t src,
                              const char* body);
/* Inclusive prefix sum along dim (log-step scan, exact for integers). */
tpu_val_t tpu_idx_cumsum(tpu_builder_t* b, tpu_val_t x, int dim);
/* Stable sort along dim, NaN largest (PyTorch's order); indices i64. */
void tpu_idx_sort(tpu_builder_t* b, tpu_val_t x, int dim, bool descending, tpu_val_t* values,
                  tpu_val_t* indices);
/* Flat positions of the true elements of a 1-D bool mask first (in order),
 * then the others: a stable sort on !mask. Returns i64 [n]; *count (0-d i64). */
tpu_val_t tpu_idx_compact(tpu_builder_t* b, tpu_val_t flat_mask, tpu_val_t* count);
/* The trailing lengths vector of a dynamic-shape op (TPU_LOWER_DYNAMIC_SHAPE),
 * i64[2n]: result i's true size along dim dims[i] (dim 0 when dims is NULL) is
 * lens[i] (a 0-d integer value), or -1 to keep its static size. The runtime
 * shrinks that dim of the result's sizes, so the buffer must hold the trimmed
 * tensor contiguously at its start. */
tpu_val_t tpu_idx_lengths(tpu_builder_t* b, int n, const tpu_val_t* lens, const int* dims);
/* A 1-D constant from host data (exact bits): dtype i64, i32, f32 or f64. */
tpu_val_t tpu_idx_const_vec(tpu_builder_t* b, tpu_dtype_t dtype, int64_t n, const void* data);

#endif
