/* Process-wide metrics: relaxed atomic counters, read by torchtpu.metrics(). */
#include <assert.h>
#include <stdatomic.h>

#include "device.h"
#include "torchtpu/runtime.h"

static const char* const kNames[] = {
    [TPU_METRIC_OPS_EXECUTED] = "ops_executed",
    [TPU_METRIC_EXECUTIONS] = "executions",
    [TPU_METRIC_COMPILES] = "compiles",
    [TPU_METRIC_COMPILE_NS] = "compile_ns",
    [TPU_METRIC_CACHE_HITS] = "cache_hits",
    [TPU_METRIC_CACHE_MISSES] = "cache_misses",
    [TPU_METRIC_DISK_CACHE_HITS] = "disk_cache_hits",
    [TPU_METRIC_DISK_CACHE_MISSES] = "disk_cache_misses",
    [TPU_METRIC_DISK_CACHE_BYTES_READ] = "disk_cache_bytes_read",
    [TPU_METRIC_DISK_CACHE_BYTES_WRITTEN] = "disk_cache_bytes_written",
    [TPU_METRIC_DISK_CACHE_ERRORS] = "disk_cache_errors",
    [TPU_METRIC_GRAPH_COMPILES] = "graph_compiles",
    [TPU_METRIC_GRAPH_RUNS] = "graph_runs",
    [TPU_METRIC_H2D_TRANSFERS] = "h2d_transfers",
    [TPU_METRIC_H2D_BYTES] = "h2d_bytes",
    [TPU_METRIC_D2H_TRANSFERS] = "d2h_transfers",
    [TPU_METRIC_D2H_BYTES] = "d2h_bytes",
    [TPU_METRIC_FALLBACKS] = "fallbacks",
    [TPU_METRIC_LIVE_BUFFERS] = "live_buffers",
    [TPU_METRIC_LIVE_BYTES] = "live_bytes",
    [TPU_METRIC_SYNCS] = "syncs",
    [TPU_METRIC_SLOT_SWAPS] = "slot_swaps",
    [TPU_METRIC_CHECKED_OPS] = "index_checks",
    [TPU_METRIC_CHECK_READS] = "check_reads",
    [TPU_METRIC_GRAPH_RECOMPILES] = "graph_recompiles",
    [TPU_METRIC_GRAPH_FALLBACKS] = "graph_fallbacks",
    [TPU_METRIC_FUSED_OPS] = "fused_ops",
    [TPU_METRIC_FUSED_FLUSHES] = "fused_flushes",
    [TPU_METRIC_FUSED_PROGRAMS] = "fused_programs",
    [TPU_METRIC_H2D_LENT] = "h2d_lent",
    [TPU_METRIC_DONATED_BUFFERS] = "donated_buffers",
    [TPU_METRIC_QUICK_COMPILES] = "compiles_quick",
    [TPU_METRIC_FUSED_UNFUSED] = "fused_unfused_runs",
    [TPU_METRIC_INFLIGHT_QUERIES] = "inflight_queries",
    [TPU_METRIC_DEFERRED_DESTROYS] = "donations_deferred",
    [TPU_METRIC_TRACE_CACHE_HITS] = "trace_cache_hits",
    [TPU_METRIC_TRACE_CACHE_MISSES] = "trace_cache_misses",
    [TPU_METRIC_PREPARED_PROGRAMS] = "prepared_programs",
    [TPU_METRIC_PREPARED_HITS] = "prepared_hits",
};
static_assert(sizeof kNames / sizeof kNames[0] == TPU_METRIC_COUNT, "one name per metric");

static _Atomic int64_t g_metrics[TPU_METRIC_COUNT];

static int valid(tpu_metric_t m) { return (int)m >= 0 && m < TPU_METRIC_COUNT; }

const char* tpu_metric_name(tpu_metric_t m) { return valid(m) ? kNames[m] : "unknown"; }

/* The live_* gauges are read from the memory counters (memcount.c) that every
 * buffer already updates, not kept a second time; a reset leaves them alone. */
int64_t tpu_metric_get(tpu_metric_t m) {
  if (m == TPU_METRIC_LIVE_BUFFERS) return tpu_memory_live_total(false);
  if (m == TPU_METRIC_LIVE_BYTES) return tpu_memory_live_total(true);
  return valid(m) ? atomic_load_explicit(&g_metrics[m], memory_order_relaxed) : 0;
}

void tpu_metric_add(tpu_metric_t m, int64_t delta) {
  if (valid(m)) atomic_fetch_add_explicit(&g_metrics[m], delta, memory_order_relaxed);
}

void tpu_metrics_reset(void) {
  for (int m = 0; m < TPU_METRIC_COUNT; m++) atomic_store_explicit(&g_metrics[m], 0, memory_order_relaxed);
}
