/* Trace hooks (torchtpu/trace.h). */
#include <stdatomic.h>
#include <string.h>

#include "tracing.h"

static const char* const k_names[] = {
    [TPU_TRACE_COMPILE] = "torchtpu::compile",
    [TPU_TRACE_CACHE_HIT] = "torchtpu::cache_hit",
    [TPU_TRACE_CACHE_MISS] = "torchtpu::cache_miss",
    [TPU_TRACE_DISK_LOOKUP] = "torchtpu::disk_cache_lookup",
    [TPU_TRACE_DISK_HIT] = "torchtpu::disk_cache_hit",
    [TPU_TRACE_H2D] = "torchtpu::copy_h2d",
    [TPU_TRACE_D2H] = "torchtpu::copy_d2h",
    [TPU_TRACE_SYNCHRONIZE] = "torchtpu::synchronize",
};
_Static_assert(sizeof k_names / sizeof k_names[0] == TPU_TRACE_KIND_COUNT,
               "a name for every trace kind");

static tpu_trace_hooks_t g_hooks;
static atomic_bool g_enabled;

const char* tpu_trace_kind_name(tpu_trace_kind_t kind) {
  return (unsigned)kind < TPU_TRACE_KIND_COUNT ? k_names[kind] : "torchtpu::unknown";
}

tpu_status_t* tpu_trace_set_hooks(const tpu_trace_hooks_t* hooks) {
  if (!hooks) {
    atomic_store(&g_enabled, false);
    memset(&g_hooks, 0, sizeof g_hooks);
    return NULL;
  }
  if (hooks->struct_size < offsetof(tpu_trace_hooks_t, end) + sizeof hooks->end) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "trace hooks: struct_size %zu is too small",
                      hooks->struct_size);
  }
  if (!hooks->begin || !hooks->end) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "trace hooks: begin and end are required");
  }
  atomic_store(&g_enabled, false);
  memset(&g_hooks, 0, sizeof g_hooks);
  memcpy(&g_hooks, hooks, hooks->struct_size < sizeof g_hooks ? hooks->struct_size : sizeof g_hooks);
  g_hooks.struct_size = sizeof g_hooks;
  atomic_store(&g_enabled, true);
  return NULL;
}

tpu_trace_range_t tpu_trace_begin(tpu_trace_kind_t kind, const char* detail) {
  tpu_trace_range_t r = {NULL, false};
  if (!atomic_load_explicit(&g_enabled, memory_order_acquire)) return r;
  r.handle = g_hooks.begin(g_hooks.user, kind, detail ? detail : "");
  r.open = true;
  return r;
}

void tpu_trace_mark(tpu_trace_kind_t kind, const char* detail) {
  tpu_trace_end(tpu_trace_begin(kind, detail));
}

void tpu_trace_end(tpu_trace_range_t range) {
  if (range.open && atomic_load_explicit(&g_enabled, memory_order_acquire)) {
    g_hooks.end(g_hooks.user, range.handle);
  }
}
