/* The device's free and total memory (torchtpu/memory.h's tpu_memory_info): the
 * plugin's allocator, or the host's memory for the CPU plugin. A leaf of the
 * runtime (the client and PJRT only), so storages can check a request against
 * it without a call cycle. */
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "pjrt/pjrt.h"
#include "torchtpu/memory.h"

/* "MemTotal:  16315508 kB" → bytes; -1 when the line is missing. */
static int64_t meminfo_bytes(const char* text, const char* key) {
  const char* p = strstr(text, key);
  long long kb = -1;
  if (!p || sscanf(p + strlen(key), " %lld kB", &kb) != 1) return -1;
  return (int64_t)kb * 1024;
}

/* The plugin's allocator: what it may hand out (bytes_limit) and what is in use.
 * A plugin that pools memory (the CUDA plugin preallocates most of the GPU) counts
 * its pool, not the whole device. */
static tpu_status_t* plugin_memory_info(int device, int64_t* out_free, int64_t* out_total) {
  const PJRT_Api* api = tpu_client_api();
  PJRT_Device* pjrt_device = tpu_client_device(device);
  if (!api || !pjrt_device) return TPU_STATUS(TPU_FAILED_PRECONDITION, "no PJRT client");
  TPU_PJRT_ARGS(PJRT_Device_MemoryStats_Args, args, newer_is_set);
  args.device = pjrt_device;
  tpu_status_t* st = TPU_PJRT_CALL(api, Device_MemoryStats, &args);
  if (st) return tpu_status_annotate(st, "reading device %d's memory statistics", device);
  if (!args.bytes_limit_is_set) {
    return TPU_STATUS(TPU_UNIMPLEMENTED, "the %s plugin does not report a memory limit for device %d",
                      tpu_runtime_platform_name(), device);
  }
  *out_total = args.bytes_limit;
  *out_free = args.bytes_limit > args.bytes_in_use ? args.bytes_limit - args.bytes_in_use : 0;
  return NULL;
}

tpu_status_t* tpu_memory_info(int device, int64_t* out_free, int64_t* out_total) {
  if (!out_free || !out_total) return TPU_STATUS(TPU_INVALID_ARGUMENT, "output is NULL");
  *out_free = *out_total = -1;
  TPU_RETURN_IF_ERROR(tpu_runtime_check_device(device));
  if (!tpu_runtime_platform_is_cpu()) return plugin_memory_info(device, out_free, out_total);
  FILE* f = fopen("/proc/meminfo", "r");
  if (!f) return TPU_STATUS(TPU_UNAVAILABLE, "cannot read /proc/meminfo for the host's memory");
  char text[4096];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = '\0';
  int64_t total = meminfo_bytes(text, "MemTotal:");
  int64_t avail = meminfo_bytes(text, "MemAvailable:");
  if (total < 0 || avail < 0) return TPU_STATUS(TPU_UNAVAILABLE, "/proc/meminfo has no MemTotal/MemAvailable");
  *out_free = avail;
  *out_total = total;
  return NULL;
}
