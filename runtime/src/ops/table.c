/* The op table: family tables merged into one hash map on first use. A name in
 * two families is a bug, reported by tpu_lowering_table_check (a C test). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "families.h"

#define TPU_TABLE_SLOTS 2048 /* a power of two, well above the op count */

static const tpu_lowering_t* const tpu_families[] = {
    tpu_lowerings_creation,
    tpu_lowerings_elementwise,
    tpu_lowerings_reduce,
    tpu_lowerings_segment,
    tpu_lowerings_histogram,
    tpu_lowerings_matmul,
    tpu_lowerings_mm_extra,
    tpu_lowerings_conv_legacy,
    tpu_lowerings_nn,
    tpu_lowerings_nn_margin,
    tpu_lowerings_nn_batchnorm_stats,
    tpu_lowerings_fractional_pool,
    tpu_lowerings_nn_transformer,
    tpu_lowerings_nn_varlen,
    tpu_lowerings_index,
    tpu_lowerings_unique,
    tpu_lowerings_jagged,
    tpu_lowerings_embedding_bag,
    tpu_lowerings_shape,
    tpu_lowerings_grid_sample,
    tpu_lowerings_random,
    tpu_lowerings_sampling,
    tpu_lowerings_amp,
    tpu_lowerings_fft,
    tpu_lowerings_special,
    tpu_lowerings_polynomial,
    tpu_lowerings_bessel,
    tpu_lowerings_linalg,
    tpu_lowerings_lu,
    tpu_lowerings_ldl,
    tpu_lowerings_qr,
    tpu_lowerings_eigh,
    tpu_lowerings_eig,
    tpu_lowerings_svd,
    tpu_lowerings_matfn,
    tpu_lowerings_distance,
    tpu_lowerings_misc,
    tpu_lowerings_nn_models,
    tpu_lowerings_optim,
    tpu_lowerings_views,
    tpu_lowerings_factory,
    tpu_lowerings_foreach,
};

static const tpu_lowering_t* tpu_table[TPU_TABLE_SLOTS];
/* Per slot, what an op needs besides its function, computed once: a dispatch
 * costs one hash lookup, no string lists. */
static tpu_lowering_info_t tpu_infos[TPU_TABLE_SLOTS];
static int tpu_table_duplicates;
static pthread_once_t tpu_table_once = PTHREAD_ONCE_INIT;

static uint32_t tpu_name_hash(const char* s) {
  uint32_t h = 2166136261u;
  while (*s) h = (h ^ (uint8_t)*s++) * 16777619u;
  return h;
}

static unsigned tpu_flags_of(const char* name);
static int tpu_runtime_float_of(const char* name);

static void tpu_table_build(void) {
  for (size_t f = 0; f < sizeof(tpu_families) / sizeof(tpu_families[0]); ++f) {
    for (const tpu_lowering_t* l = tpu_families[f]; l->name; ++l) {
      uint32_t i = tpu_name_hash(l->name) & (TPU_TABLE_SLOTS - 1);
      while (tpu_table[i] && strcmp(tpu_table[i]->name, l->name) != 0) i = (i + 1) & (TPU_TABLE_SLOTS - 1);
      if (tpu_table[i]) {
        tpu_table_duplicates++;
      } else {
        tpu_table[i] = l;
        tpu_infos[i].fn = l->fn;
        tpu_infos[i].flags = tpu_flags_of(l->name);
        tpu_infos[i].runtime_float = tpu_runtime_float_of(l->name);
      }
    }
  }
}

/* Ops whose output shape depends on Scalar values: those values join the key. */
static const char* const tpu_static_scalar_ops[] = {"arange", "linspace", "logspace", "range"};

/* Ops with data-dependent output shapes (see TPU_LOWER_DYNAMIC_SHAPE). */
static const char* const tpu_dynamic_shape_ops[] = {"nonzero",    "masked_select",      "_unique",
                                                    "_unique2",   "unique_consecutive", "unique_dim",
                                                    "unique_dim_consecutive", "_padded_dense_to_jagged_forward"};

/* Ops sized by their input's values (see TPU_LOWER_DATA_RANGE). */
static const char* const tpu_data_range_ops[] = {"bincount"};

/* Ops sized by their input's sum (see TPU_LOWER_DATA_SUM). */
static const char* const tpu_data_sum_ops[] = {"repeat_interleave"};

/* Factories whose dtype is the out tensor's (see TPU_LOWER_OUT_DTYPE). */
static const char* const tpu_out_dtype_ops[] = {"arange", "range", "linspace", "logspace", "eye"};

/* Float arguments that change every step (a scheduled learning rate): passed as a
 * runtime operand, never baked into the program or the key, so a schedule never
 * recompiles. The lowering must read them only through tpu_op_scalar. */
typedef struct tpu_runtime_float {
  const char* name;
  int arg;
} tpu_runtime_float_t;
static const tpu_runtime_float_t tpu_runtime_floats[] = {
    {"_fused_adam", 6}, {"_fused_adamw", 6}, {"_fused_sgd", 5}, {"_fused_adagrad", 4}};

static int tpu_runtime_float_of(const char* name) {
  for (size_t i = 0; i < sizeof(tpu_runtime_floats) / sizeof(tpu_runtime_floats[0]); ++i)
    if (strcmp(name, tpu_runtime_floats[i].name) == 0) return tpu_runtime_floats[i].arg;
  return -1;
}

static bool tpu_name_in(const char* name, const char* const* list, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (strcmp(name, list[i]) == 0) return true;
  return false;
}

/* The flags of `name` from the lists above (once per name, at table build). */
static unsigned tpu_flags_of(const char* name) {
  unsigned flags = 0;
  if (tpu_name_in(name, tpu_static_scalar_ops, sizeof(tpu_static_scalar_ops) / sizeof(tpu_static_scalar_ops[0])))
    flags |= TPU_LOWER_STATIC_SCALARS;
  if (tpu_name_in(name, tpu_dynamic_shape_ops, sizeof(tpu_dynamic_shape_ops) / sizeof(tpu_dynamic_shape_ops[0])))
    flags |= TPU_LOWER_DYNAMIC_SHAPE;
  if (tpu_name_in(name, tpu_out_dtype_ops, sizeof(tpu_out_dtype_ops) / sizeof(tpu_out_dtype_ops[0])))
    flags |= TPU_LOWER_OUT_DTYPE;
  if (tpu_name_in(name, tpu_data_range_ops, sizeof(tpu_data_range_ops) / sizeof(tpu_data_range_ops[0])))
    flags |= TPU_LOWER_DATA_RANGE;
  if (tpu_name_in(name, tpu_data_sum_ops, sizeof(tpu_data_sum_ops) / sizeof(tpu_data_sum_ops[0])))
    flags |= TPU_LOWER_DATA_SUM;
  return flags;
}

const tpu_lowering_info_t* tpu_lowering_info(const char* name) {
  if (!name) return NULL;
  pthread_once(&tpu_table_once, tpu_table_build);
  uint32_t i = tpu_name_hash(name) & (TPU_TABLE_SLOTS - 1);
  while (tpu_table[i]) {
    if (strcmp(tpu_table[i]->name, name) == 0) return &tpu_infos[i];
    i = (i + 1) & (TPU_TABLE_SLOTS - 1);
  }
  return NULL;
}

tpu_lower_fn_t tpu_lowering_find(const char* name) {
  const tpu_lowering_info_t* l = tpu_lowering_info(name);
  return l ? l->fn : NULL;
}

unsigned tpu_lowering_flags(const char* name) {
  const tpu_lowering_info_t* l = tpu_lowering_info(name);
  return l ? l->flags : 0;
}

int tpu_lowering_runtime_float(const char* name) {
  const tpu_lowering_info_t* l = tpu_lowering_info(name);
  return l ? l->runtime_float : -1;
}

int tpu_lowering_table_duplicates(void) {
  pthread_once(&tpu_table_once, tpu_table_build);
  return tpu_table_duplicates;
}

int tpu_lowering_count(void) {
  pthread_once(&tpu_table_once, tpu_table_build);
  int n = 0;
  for (int i = 0; i < TPU_TABLE_SLOTS; ++i) n += tpu_table[i] != NULL;
  return n;
}
