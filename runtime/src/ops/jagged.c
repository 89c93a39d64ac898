/* Lowerings: jagged family — the dense <-> jagged conversions of nested
 * tensors with layout=torch.jagged (NJT.to_padded_tensor,
 * nested_tensor_from_padded and the ops that pad internally):
 * _jagged_to_padded_dense_forward and _padded_dense_to_jagged_forward.
 *
 * A jagged tensor is values (total, *rest) with offsets (B + 1): batch entry b
 * is values[offsets[b] : offsets[b + 1]]. Both ops are one gather over the
 * rows. Only one jagged dim, as ATen's CPU kernels. The jagged result's length
 * is data-dependent without total_L (TPU_LOWER_DYNAMIC_SHAPE: padded to B * L
 * rows, then trimmed to offsets[B]). */
#include "index.h"
#include "nn.h"

/* The single offsets tensor (list arg i) as i64 (B + 1), or false. */
static bool tpu_jag_offsets(tpu_builder_t* b, tpu_op_t* op, int i, int64_t* out_batch, tpu_val_t* out) {
  const tpu_arg_t* a = tpu_op_arg(op, i);
  if (!a || a->kind != TPU_ARG_TENSOR_LIST || a->u.list.n != 1 || a->u.list.tensors[0].rank != 1 ||
      a->u.list.tensors[0].sizes[0] < 1 || tpu_dtype_is_float(a->u.list.tensors[0].dtype)) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "%s: expected one 1-D integer offsets tensor (a single jagged dim)",
               tpu_op_name(op));
    return false;
  }
  *out_batch = a->u.list.tensors[0].sizes[0] - 1;
  *out = tpu_b_convert(b, tpu_op_list_tensor(b, op, i, 0), TPU_I64);
  return true;
}

/* offsets[k + shift] for k in [0, B), broadcast over dim 0 of shape (B, L). */
static tpu_val_t tpu_jag_off_rows(tpu_builder_t* b, tpu_val_t off, int64_t batch, int64_t shift, const int64_t* bl) {
  tpu_val_t o = tpu_b_slice(b, off, (int64_t[]){shift}, (int64_t[]){batch + shift}, NULL);
  int64_t d0 = 0;
  return tpu_b_broadcast_in_dim(b, o, 2, bl, &d0);
}

/* _jagged_to_padded_dense_forward(values, offsets, max_lengths, padding_value=0)
 * -> (B, L, *rest): out[b, i] = values[offsets[b] + i] for i below the entry's
 * length (and L = max_lengths[0]), padding_value elsewhere. */
static tpu_status_t* tpu_lower__jagged_to_padded_dense_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                              tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t va = tpu_op_aval(op, 0);
  int64_t batch, len[TPU_MAX_RANK];
  tpu_val_t off;
  if (!tpu_jag_offsets(b, op, 1, &batch, &off)) return NULL;
  if (va.rank < 1 || tpu_op_ints(op, 2, len, TPU_MAX_RANK) != 1 || len[0] < 0) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_jagged_to_padded_dense_forward: expected values with a jagged dim 0 and "
                                        "one max length");
    return NULL;
  }
  int64_t total = va.dims[0], rest = 1, bl[2] = {batch, len[0]};
  for (int i = 1; i < va.rank; i++) rest *= va.dims[i];
  tpu_aval_t ia = tpu_aval_make(TPU_I64, 2, bl), oa = va;
  oa.rank = va.rank + 1;
  oa.dims[0] = batch, oa.dims[1] = len[0];
  for (int i = 1; i < va.rank; i++) oa.dims[i + 1] = va.dims[i];
  tpu_val_t pad = tpu_b_full(b, &oa, tpu_op_float(op, 3, 0.0));
  *nouts = 1;
  outs[0] = pad;
  if (total == 0 || batch == 0 || len[0] == 0 || rest == 0) return NULL;
  tpu_val_t i = tpu_b_iota(b, &ia, 1), start = tpu_jag_off_rows(b, off, batch, 0, bl);
  tpu_val_t src = tpu_nn_add(b, start, i);
  tpu_val_t valid = tpu_b_compare(b, "LT", src, tpu_jag_off_rows(b, off, batch, 1, bl));
  int64_t n = batch * len[0], tr[2] = {total, rest};
  src = tpu_b_select(b, valid, src, tpu_b_full(b, &ia, 0.0)); /* in range for the gather */
  tpu_val_t rows = tpu_idx_select(b, tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 2, tr), 0, tpu_b_reshape(b, src, 1, &n));
  int64_t d01[2] = {0, 1};
  tpu_val_t keep = tpu_b_broadcast_in_dim(b, valid, oa.rank, oa.dims, d01);
  outs[0] = tpu_b_select(b, keep, tpu_b_reshape(b, rows, oa.rank, oa.dims), pad);
  return NULL;
}

/* _padded_dense_to_jagged_forward(dense, offsets, total_L=None) -> (total, *rest):
 * row j is dense[b, j - offsets[b]] for the entry b holding j (rows past the
 * padded length L are 0). total is total_L, else offsets[B] (read back). */
static tpu_status_t* tpu_lower__padded_dense_to_jagged_forward(tpu_builder_t* b, tpu_op_t* op, int max_outs,
                                                              tpu_val_t* outs, int* nouts) {
  (void)max_outs;
  tpu_aval_t da = tpu_op_aval(op, 0);
  int64_t batch;
  tpu_val_t off;
  if (!tpu_jag_offsets(b, op, 1, &batch, &off)) return NULL;
  if (da.rank < 2 || da.dims[0] != batch) {
    TPU_B_FAIL(b, TPU_INVALID_ARGUMENT, "_padded_dense_to_jagged_forward: expected dense (B, L, ...) with B = "
                                        "len(offsets) - 1");
    return NULL;
  }
  bool given = tpu_op_kind(op, 2) == TPU_ARG_INT;
  int64_t l = da.dims[1], n = given ? tpu_op_int(op, 2, 0) : batch * l, rest = 1;
  for (int i = 2; i < da.rank; i++) rest *= da.dims[i];
  tpu_aval_t oa = da;
  oa.rank = da.rank - 1;
  oa.dims[0] = n;
  for (int i = 1; i < oa.rank; i++) oa.dims[i] = da.dims[i + 1];
  tpu_val_t count = given ? tpu_b_const_i(b, TPU_I64, -1)
                          : tpu_b_reshape(b, tpu_b_slice(b, off, (int64_t[]){batch}, (int64_t[]){batch + 1}, NULL), 0, NULL);
  if (n == 0 || batch == 0 || l == 0 || rest == 0) {
    outs[0] = tpu_b_full(b, &oa, 0.0);
    outs[1] = tpu_idx_lengths(b, 1, &count, NULL);
    *nouts = 2;
    return NULL;
  }
  /* entry of row j: how many of offsets[1..B] are <= j (clamped to B - 1) */
  int64_t nb[2] = {n, batch}, d1 = 1, d0 = 0;
  tpu_aval_t ja = tpu_aval_make(TPU_I64, 1, &n);
  tpu_val_t j = tpu_b_iota(b, &ja, 0);
  tpu_val_t ends = tpu_b_broadcast_in_dim(b, tpu_b_slice(b, off, (int64_t[]){1}, (int64_t[]){batch + 1}, NULL), 2, nb, &d1);
  tpu_val_t le = tpu_b_convert(b, tpu_b_compare(b, "LE", ends, tpu_b_broadcast_in_dim(b, j, 2, nb, &d0)), TPU_I64);
  tpu_val_t e = tpu_b_reduce(b, le, tpu_b_const_i(b, TPU_I64, 0), 1, &d1, "stablehlo.add");
  e = tpu_b_binary(b, "stablehlo.minimum", e, tpu_b_full(b, &ja, (double)(batch - 1)));
  tpu_val_t i = tpu_nn_sub(b, j, tpu_idx_select(b, off, 0, e));
  tpu_val_t valid = tpu_b_binary(b, "stablehlo.and", tpu_b_compare(b, "LT", i, tpu_b_full(b, &ja, (double)l)),
                                 tpu_b_compare(b, "GE", i, tpu_b_full(b, &ja, 0.0)));
  tpu_val_t src = tpu_b_select(b, valid, tpu_nn_add(b, tpu_nn_mulc(b, e, (double)l), i), tpu_b_full(b, &ja, 0.0));
  int64_t blr[2] = {batch * l, rest};
  tpu_val_t rows = tpu_idx_select(b, tpu_b_reshape(b, tpu_op_tensor(b, op, 0), 2, blr), 0, src);
  int64_t nr[2] = {n, rest};
  tpu_aval_t ra = tpu_aval_make(da.dtype, 2, nr);
  rows = tpu_b_select(b, tpu_b_broadcast_in_dim(b, valid, 2, nr, &d0), rows, tpu_b_full(b, &ra, 0.0));
  outs[0] = tpu_b_reshape(b, rows, oa.rank, oa.dims);
  outs[1] = tpu_idx_lengths(b, 1, &count, NULL);
  *nouts = 2;
  return NULL;
}

const tpu_lowering_t tpu_lowerings_jagged[] = {
    {"_jagged_to_padded_dense_forward", tpu_lower__jagged_to_padded_dense_forward},
    {"_padded_dense_to_jagged_forward", tpu_lower__padded_dense_to_jagged_forward},
    {NULL, NULL},
};
