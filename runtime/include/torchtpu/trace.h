/* Trace hooks: named host-time ranges around the runtime's own work (compiles,
 * compile-cache look-ups, transfers) for a profiler to show.
 *
 * The runtime calls `begin` when a range opens and `end` with what `begin`
 * returned when it closes, on the same thread; a marker is a range that closes
 * at once. Without hooks a range costs one
 * atomic load. The binding installs hooks that turn ranges into PyTorch
 * profiler events (torch.profiler shows them next to the aten ops).
 *
 * tpu_trace_set_hooks copies `hooks` (NULL removes them); it must not race with
 * work in flight on other threads: install hooks once, at start-up. */
#ifndef TORCHTPU_TRACE_H_
#define TORCHTPU_TRACE_H_

#include <stddef.h>

#include "torchtpu/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tpu_trace_kind {
  TPU_TRACE_COMPILE = 0,   /* StableHLO -> executable by the plugin */
  TPU_TRACE_CACHE_HIT,     /* marker: the executable was in memory; detail: the op or graph */
  TPU_TRACE_CACHE_MISS,    /* lowering + disk look-up + compile; detail: the op or graph */
  TPU_TRACE_DISK_LOOKUP,   /* a look-up in the disk tier */
  TPU_TRACE_DISK_HIT,      /* marker: the disk tier had it (no compile follows) */
  TPU_TRACE_H2D,           /* host -> device copy */
  TPU_TRACE_D2H,           /* device -> host copy (includes the wait for its producer) */
  TPU_TRACE_SYNCHRONIZE,   /* waiting for in-flight work */
  TPU_TRACE_KIND_COUNT,
} tpu_trace_kind_t;

/* "torchtpu::compile", ...: stable names, for profilers and tests. */
const char* tpu_trace_kind_name(tpu_trace_kind_t kind);

typedef struct tpu_trace_hooks {
  size_t struct_size; /* sizeof(tpu_trace_hooks_t) as the caller knows it */
  void* user;
  /* Returns a handle for `end` (NULL is fine). `detail` is borrowed for the call. */
  void* (*begin)(void* user, tpu_trace_kind_t kind, const char* detail);
  void (*end)(void* user, void* range);
} tpu_trace_hooks_t;

tpu_status_t* tpu_trace_set_hooks(const tpu_trace_hooks_t* hooks);

#ifdef __cplusplus
}
#endif
#endif
