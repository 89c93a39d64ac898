/* Device memory counters per device and pool (device.h), updated when
 * buffer.c wraps or releases a device buffer. A leaf: it calls nothing else in
 * the runtime, so buffer.c can call it without a cycle through memory.c. */
#include <stdatomic.h>

#include "device.h"
#include "torchtpu/memory.h"

typedef struct counter {
  _Atomic int64_t current, peak, allocated, freed;
} counter_t;

typedef struct device_counters {
  counter_t bytes[TPU_MEMORY_POOL_COUNT];
  counter_t buffers[TPU_MEMORY_POOL_COUNT];
} device_counters_t;

static device_counters_t g_devices[TPU_MAX_DEVICES];

static void counter_add(counter_t* c, int64_t delta) {
  int64_t now = atomic_fetch_add_explicit(&c->current, delta, memory_order_relaxed) + delta;
  if (delta > 0) {
    atomic_fetch_add_explicit(&c->allocated, delta, memory_order_relaxed);
    int64_t peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
    while (now > peak &&
           !atomic_compare_exchange_weak_explicit(&c->peak, &peak, now, memory_order_relaxed,
                                                  memory_order_relaxed)) {
    }
  } else {
    atomic_fetch_add_explicit(&c->freed, -delta, memory_order_relaxed);
  }
}

static void note(int device, size_t nbytes, int sign) {
  if (device < 0 || device >= TPU_MAX_DEVICES) return;
  device_counters_t* d = &g_devices[device];
  int pool = (int64_t)nbytes <= TPU_MEMORY_SMALL_BYTES ? TPU_MEMORY_POOL_SMALL : TPU_MEMORY_POOL_LARGE;
  const int pools[2] = {TPU_MEMORY_POOL_ALL, pool};
  for (int i = 0; i < 2; ++i) {
    counter_add(&d->bytes[pools[i]], sign * (int64_t)nbytes);
    counter_add(&d->buffers[pools[i]], sign);
  }
}

void tpu_memory_note_alloc(int device, size_t nbytes) { note(device, nbytes, 1); }
void tpu_memory_note_free(int device, size_t nbytes) { note(device, nbytes, -1); }

int64_t tpu_memory_live_total(bool bytes) {
  int64_t total = 0;
  for (int i = 0; i < TPU_MAX_DEVICES; ++i) {
    counter_t* c = bytes ? &g_devices[i].bytes[TPU_MEMORY_POOL_ALL] : &g_devices[i].buffers[TPU_MEMORY_POOL_ALL];
    total += atomic_load_explicit(&c->current, memory_order_relaxed);
  }
  return total;
}

static tpu_memory_stat_t read_counter(counter_t* c) {
  tpu_memory_stat_t s;
  s.current = atomic_load_explicit(&c->current, memory_order_relaxed);
  s.peak = atomic_load_explicit(&c->peak, memory_order_relaxed);
  s.allocated = atomic_load_explicit(&c->allocated, memory_order_relaxed);
  s.freed = atomic_load_explicit(&c->freed, memory_order_relaxed);
  return s;
}

void tpu_memory_counters_read(int device, tpu_memory_stats_t* out_stats) {
  device_counters_t* d = &g_devices[device];
  for (int p = 0; p < TPU_MEMORY_POOL_COUNT; ++p) {
    out_stats->bytes[p] = read_counter(&d->bytes[p]);
    out_stats->buffers[p] = read_counter(&d->buffers[p]);
  }
}

static void reset_peak(counter_t* c) {
  atomic_store_explicit(&c->peak, atomic_load_explicit(&c->current, memory_order_relaxed),
                        memory_order_relaxed);
}

static void reset_totals(counter_t* c) {
  atomic_store_explicit(&c->allocated, 0, memory_order_relaxed);
  atomic_store_explicit(&c->freed, 0, memory_order_relaxed);
}

void tpu_memory_counters_reset(int device, bool peak) {
  device_counters_t* d = &g_devices[device];
  for (int p = 0; p < TPU_MEMORY_POOL_COUNT; ++p) {
    (peak ? reset_peak : reset_totals)(&d->bytes[p]);
    (peak ? reset_peak : reset_totals)(&d->buffers[p]);
  }
}
