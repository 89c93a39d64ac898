/* Device memory accounting (torchtpu/memory.h): buffers are counted on their
 * device and pool when they come and go; peaks and totals reset as PyTorch's
 * allocator statistics do; bad arguments are statuses. */
#include <stdint.h>
#include <stdlib.h>

#include "kit.h"
#include "test.h"
#include "torchtpu/memory.h"

static tpu_memory_stats_t stats_of(int device) {
  tpu_memory_stats_t s = {.struct_size = sizeof s};
  EXPECT_OK(tpu_memory_stats(device, &s));
  return s;
}

TEST(memory_counts_buffers_by_pool) {
  EXPECT_OK(tpu_memory_reset_peak(0));
  EXPECT_OK(tpu_memory_reset_accumulated(0));
  const tpu_memory_stats_t before = stats_of(0);
  tpu_tensor_t small, large;
  ASSERT_OK(kit_tensor(TPU_F32, 1, (const int64_t[]){256}, NULL, &small));
  float zeros[256] = {0};
  ASSERT_OK(tpu_tensor_upload(&small, zeros, TPU_F32));
  /* 2 MiB: the large pool (more than TPU_MEMORY_SMALL_BYTES). */
  ASSERT_OK(kit_tensor(TPU_U8, 1, (const int64_t[]){2 << 20}, NULL, &large));
  uint8_t* bytes = calloc(2 << 20, 1);
  ASSERT(bytes != NULL);
  tpu_status_t* up = tpu_tensor_upload(&large, bytes, TPU_U8);
  free(bytes);
  ASSERT_OK(up);
  const tpu_memory_stats_t during = stats_of(0);
  EXPECT_EQ_INT(during.bytes[TPU_MEMORY_POOL_SMALL].current - before.bytes[TPU_MEMORY_POOL_SMALL].current, 1024);
  EXPECT_EQ_INT(during.bytes[TPU_MEMORY_POOL_LARGE].current - before.bytes[TPU_MEMORY_POOL_LARGE].current, 2 << 20);
  EXPECT_EQ_INT(during.bytes[TPU_MEMORY_POOL_ALL].current - before.bytes[TPU_MEMORY_POOL_ALL].current,
                1024 + (2 << 20));
  EXPECT(during.bytes[TPU_MEMORY_POOL_ALL].peak >= during.bytes[TPU_MEMORY_POOL_ALL].current);
  EXPECT(during.buffers[TPU_MEMORY_POOL_ALL].current - before.buffers[TPU_MEMORY_POOL_ALL].current >= 2);
  kit_release(&large);
  kit_release(&small);
  EXPECT_OK(tpu_runtime_synchronize()); /* in-flight work held the last buffer */
  const tpu_memory_stats_t after = stats_of(0);
  EXPECT_EQ_INT(after.bytes[TPU_MEMORY_POOL_ALL].current, before.bytes[TPU_MEMORY_POOL_ALL].current);
  /* The peak remembers the large buffer until a reset. */
  EXPECT(after.bytes[TPU_MEMORY_POOL_ALL].peak >= before.bytes[TPU_MEMORY_POOL_ALL].current + (2 << 20));
  EXPECT(after.bytes[TPU_MEMORY_POOL_ALL].allocated >= 1024 + (2 << 20));
  EXPECT(after.bytes[TPU_MEMORY_POOL_ALL].freed >= 1024 + (2 << 20));
  EXPECT_OK(tpu_memory_reset_peak(0));
  EXPECT_EQ_INT(stats_of(0).bytes[TPU_MEMORY_POOL_ALL].peak, stats_of(0).bytes[TPU_MEMORY_POOL_ALL].current);
  EXPECT_OK(tpu_memory_reset_accumulated(0));
  EXPECT_EQ_INT(stats_of(0).bytes[TPU_MEMORY_POOL_LARGE].allocated, 0);
  EXPECT_EQ_INT(stats_of(0).bytes[TPU_MEMORY_POOL_LARGE].freed, 0);
}

TEST(memory_info_is_host_memory_on_cpu) {
  int64_t free_bytes = 0, total = 0;
  ASSERT_OK(tpu_memory_info(0, &free_bytes, &total));
  EXPECT(total > 0);
  EXPECT(free_bytes >= 0 && free_bytes <= total);
}

TEST(memory_bad_arguments) {
  tpu_memory_stats_t s = {.struct_size = sizeof s};
  EXPECT_CODE(tpu_memory_stats(-1, &s), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_memory_stats(tpu_runtime_device_count(), &s), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_memory_stats(0, NULL), TPU_INVALID_ARGUMENT);
  s.struct_size = sizeof s - 1; /* an older, smaller struct */
  EXPECT_CODE(tpu_memory_stats(0, &s), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_memory_reset_peak(99999), TPU_INVALID_ARGUMENT);
  int64_t f, t;
  EXPECT_CODE(tpu_memory_info(-3, &f, &t), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_memory_info(0, NULL, &t), TPU_INVALID_ARGUMENT);
}
