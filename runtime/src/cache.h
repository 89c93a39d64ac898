/* Internal: the in-memory executable cache (an LRU keyed by op bytes). */
#ifndef TORCHTPU_SRC_CACHE_H_
#define TORCHTPU_SRC_CACHE_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "exec.h"

typedef struct tpu_cache_entry tpu_cache_entry_t;

/* The compiled form of one op signature. Immutable once inserted. */
typedef struct tpu_compiled {
  tpu_executable_t* exe;
  int nparams;
  tpu_param_src_t* params;
  int nouts;             /* results the op returns */
  tpu_aval_t* out_avals; /* nouts entries, one more when checked */
  bool checked;          /* check.h: the executable also returns the error word */
  bool donates;          /* some parameter has donate_to (graphs' in-place outputs) */
} tpu_compiled_t;

/* Returns a referenced entry or NULL. */
tpu_cache_entry_t* tpu_cache_lookup(const uint8_t* key, size_t len, uint64_t hash);
/* Inserts (taking ownership of `compiled`'s contents) and returns a referenced
 * entry, evicting least recently used ones while the total weight exceeds the
 * capacity (TORCHTPU_CACHE_CAPACITY); when another thread inserted the same key first, that one is returned
 * and `compiled` is destroyed. */
tpu_status_t* tpu_cache_insert(const uint8_t* key, size_t len, uint64_t hash, tpu_compiled_t* compiled,
                               tpu_cache_entry_t** out_entry);
const tpu_compiled_t* tpu_cache_entry_compiled(const tpu_cache_entry_t* e);
/* An entry inserted ahead of its first run (tpu_exec_prepare_program) is marked
 * prepared; the first lookup that finds it takes the mark (true once). */
void tpu_cache_entry_mark_prepared(tpu_cache_entry_t* e);
bool tpu_cache_entry_take_prepared(tpu_cache_entry_t* e);
void tpu_cache_entry_release(tpu_cache_entry_t* e);
void tpu_compiled_destroy(tpu_compiled_t* c);
uint64_t tpu_hash_bytes(const uint8_t* data, size_t len);
/* Drops every entry (tests, shutdown). */
void tpu_cache_clear(void);
size_t tpu_cache_size(void);

#endif
