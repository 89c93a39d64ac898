/* Device memory statistics and controls (torchtpu/memory.h) over the counters
 * of memcount.c; the device's size is meminfo.c's. */
#include "torchtpu/memory.h"

#include "device.h"
#include "exec.h"
#include "hostpool.h"

tpu_status_t* tpu_memory_stats(int device, tpu_memory_stats_t* out_stats) {
  if (!out_stats) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_stats is NULL");
  if (out_stats->struct_size < sizeof(tpu_memory_stats_t)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu_memory_stats_t of %zu bytes, need %zu",
                      out_stats->struct_size, sizeof(tpu_memory_stats_t));
  }
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  tpu_runtime_retire_inflight();
  tpu_memory_counters_read(device, out_stats);
  return NULL;
}

tpu_status_t* tpu_memory_reset_peak(int device) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  tpu_runtime_retire_inflight();
  tpu_memory_counters_reset(device, true);
  return NULL;
}

tpu_status_t* tpu_memory_reset_accumulated(int device) {
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  tpu_memory_counters_reset(device, false);
  return NULL;
}

void tpu_memory_empty_cache(void) {
  tpu_runtime_retire_inflight();
  tpu_scalar_cache_clear();
  tpu_hostpool_trim();
}
