/* Device memory accounting (torchtpu/memory.h): buffers are counted on their
 * device and pool when they come and go; peaks and totals reset as PyTorch's
 * allocator statistics do; bad arguments are statuses. And the host block pool
 * behind large CPU-plugin uploads (hostpool.h). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <assert.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "codemaps.h"
#include "hostpool.h"
#include "kit.h"
#include "test.h"
#include "torchtpu/memory.h"

static tpu_memory_stats_t stats_of(int device) {
  tpu_memory_stats_t s = {.struct_size = sizeof s};
  EXPECT_OK(tpu_memory_stats(device, &s));
  return s;
}

/* A device tensor of `n` zero bytes. */
static tpu_status_t* zero_bytes(int64_t n, tpu_tensor_t* out) {
  TPU_RETURN_IF_ERROR(kit_tensor(TPU_U8, 1, (const int64_t[]){n}, NULL, out));
  uint8_t* bytes = calloc((size_t)n, 1);
  if (!bytes) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of host memory");
  tpu_status_t* up = tpu_tensor_upload(out, bytes, TPU_U8);
  free(bytes);
  return up;
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
  ASSERT_OK(zero_bytes(2 << 20, &large));
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

/* The CPU plugin's device memory is the host's; other plugins report their
 * allocator's limit and use (PJRT_Device_MemoryStats). */
TEST(memory_info_is_the_plugins) {
  int64_t free_bytes = 0, total = 0;
  ASSERT_OK(tpu_memory_info(0, &free_bytes, &total));
  EXPECT(total > 0);
  EXPECT(free_bytes >= 0 && free_bytes <= total);
  if (kit_on_cpu_plugin()) return;
  /* 64 MiB more in use leaves at least that much less free. */
  tpu_tensor_t big;
  ASSERT_OK(zero_bytes(64 << 20, &big));
  EXPECT_OK(tpu_runtime_synchronize());
  int64_t free_after = 0, total_after = 0;
  ASSERT_OK(tpu_memory_info(0, &free_after, &total_after));
  EXPECT_EQ_INT(total_after, total);
  EXPECT(free_after <= free_bytes - (64 << 20));
  kit_release(&big);
}

TEST(storage_larger_than_the_device_fails_at_create) {
  /* As CUDA at allocation: not at the first write. One that fits stays lazy. */
  int64_t free_bytes = 0, total = 0;
  ASSERT_OK(tpu_memory_info(0, &free_bytes, &total));
  tpu_storage_t* s = NULL;
  tpu_status_t* st = tpu_storage_create(0, (size_t)total + 1, &s);
  EXPECT(s == NULL);
  EXPECT(st && strstr(tpu_status_message(st), "tpu:0 has") != NULL);
  EXPECT_CODE(st, TPU_RESOURCE_EXHAUSTED);
  ASSERT_OK(tpu_storage_create(0, (size_t)1 << 30, &s)); /* checked, fits: no device memory yet */
  EXPECT_EQ_INT((int64_t)tpu_storage_nbytes(s), (int64_t)1 << 30);
  tpu_storage_release(s);
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

TEST(hostpool_reuses_blocks_and_trims) {
  tpu_hostpool_trim();
  void *a = NULL, *b = NULL, *c = NULL;
  ASSERT_OK(tpu_host_block_acquire(3 << 20, &a));
  EXPECT((uintptr_t)a % TPU_HOSTPOOL_ALIGN == 0);
  memset(a, 7, 3 << 20); /* the whole size is usable */
  tpu_host_block_release(a);
  EXPECT_EQ_INT((int64_t)tpu_hostpool_cached_bytes(), 3 << 20);
  ASSERT_OK(tpu_host_block_acquire((3 << 20) - 100, &b)); /* same page-rounded size: the same block */
  EXPECT(b == a);
  EXPECT_EQ_INT((int64_t)tpu_hostpool_cached_bytes(), 0);
  ASSERT_OK(tpu_host_block_acquire(1 << 20, &c)); /* another size: a new block */
  EXPECT(c != b);
  tpu_host_block_release(b);
  tpu_host_block_release(c);
  tpu_host_block_release(NULL);
  EXPECT_EQ_INT((int64_t)tpu_hostpool_cached_bytes(), (3 << 20) + (1 << 20));
  tpu_memory_empty_cache(); /* frees every cached block */
  EXPECT_EQ_INT((int64_t)tpu_hostpool_cached_bytes(), 0);
}

TEST(hostpool_caps_what_it_keeps) {
  tpu_hostpool_trim();
  void* big = NULL;
  ASSERT_OK(tpu_host_block_acquire(TPU_HOSTPOOL_CACHE_BYTES + 4096, &big));
  tpu_host_block_release(big); /* over the cap: freed, not kept */
  EXPECT_EQ_INT((int64_t)tpu_hostpool_cached_bytes(), 0);
  void* p = NULL;
  EXPECT_CODE(tpu_host_block_acquire(SIZE_MAX - 10, &p), TPU_RESOURCE_EXHAUSTED);
  EXPECT(p == NULL);
}

TEST(upload_of_a_large_tensor_lends_a_block_on_cpu) {
  const int64_t n = 1 << 20; /* 4 MiB of f32 */
  float* host = malloc((size_t)n * sizeof(float));
  ASSERT(host != NULL);
  int64_t lent0 = tpu_metric_get(TPU_METRIC_H2D_LENT);
  for (int round = 0; round < 3; ++round) { /* later rounds reuse the first block */
    for (int64_t i = 0; i < n; ++i) host[i] = (float)(i % 1000) + (float)round;
    tpu_tensor_t t;
    ASSERT_OK(kit_tensor(TPU_F32, 1, &n, NULL, &t));
    ASSERT_OK(tpu_tensor_upload(&t, host, TPU_F32));
    memset(host, 0, (size_t)n * sizeof(float)); /* the device copy is independent of `host` */
    ASSERT_OK(tpu_tensor_download(&t, host, (size_t)n * sizeof(float)));
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += host[i] != (float)(i % 1000) + (float)round;
    EXPECT_EQ_INT(bad, 0);
    kit_release(&t);
    EXPECT_OK(tpu_runtime_synchronize());
  }
  free(host);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_H2D_LENT) - lent0, kit_on_cpu_plugin() ? 3 : 0);
}

/* A block the caller filled becomes the buffer itself (no copy) when the view
 * covers its storage; a partial view gets a copy and its neighbours keep theirs. */
TEST(upload_block_lends_a_filled_block) {
  const int64_t n = 4096;
  const int lent = kit_on_cpu_plugin(); /* other plugins copy the block */
  int64_t lent0 = tpu_metric_get(TPU_METRIC_H2D_LENT);
  void* block = NULL;
  ASSERT_OK(tpu_host_block_acquire((size_t)n * sizeof(float), &block));
  for (int64_t i = 0; i < n; ++i) ((float*)block)[i] = (float)i;
  tpu_tensor_t t;
  ASSERT_OK(kit_tensor(TPU_F32, 1, &n, NULL, &t));
  ASSERT_OK(tpu_tensor_upload_block(&t, block, TPU_F32)); /* the block is the buffer's now */
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_H2D_LENT) - lent0, lent);
  float* host = malloc((size_t)n * sizeof(float));
  ASSERT(host != NULL);
  ASSERT_OK(tpu_tensor_download(&t, host, (size_t)n * sizeof(float)));
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += host[i] != (float)i;
  EXPECT_EQ_INT(bad, 0);

  /* elements [8, 12) of t from a block: a copy into the view */
  ASSERT_OK(tpu_host_block_acquire(4 * sizeof(float), &block));
  for (int i = 0; i < 4; ++i) ((float*)block)[i] = -1.0f;
  tpu_tensor_t part = kit_view(&t, 1, (const int64_t[]){4}, (const int64_t[]){1}, 8);
  ASSERT_OK(tpu_tensor_upload_block(&part, block, TPU_F32));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_H2D_LENT) - lent0, lent);
  ASSERT_OK(tpu_tensor_download(&t, host, (size_t)n * sizeof(float)));
  bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += host[i] != (i >= 8 && i < 12 ? -1.0f : (float)i);
  EXPECT_EQ_INT(bad, 0);
  free(host);
  EXPECT_CODE(tpu_tensor_upload_block(&part, NULL, TPU_F32), TPU_INVALID_ARGUMENT);
  kit_release(&t);
  EXPECT_OK(tpu_runtime_synchronize());
}

static_assert(TPU_CODEMAPS_EXACT % TPU_CODEMAPS_EVERY == 0, "the test below counts on it");

/* Code mappings (codemaps.h): the first compiles of a kind are counted, later
 * ones mostly weigh the mean. Kind TPU_CODEMAPS_KINDS - 1 is no compile tier's;
 * each "compile" here maps 10 pages of alternating protection (10 mappings). */
static int codemaps_probe(bool map_pages) {
  tpu_codemaps_probe_t probe;
  tpu_codemaps_begin(TPU_CODEMAPS_KINDS - 1, &probe);
  long page = sysconf(_SC_PAGESIZE);
  int fd = map_pages ? open("/dev/zero", O_RDWR) : -1;
  char* p = fd >= 0 ? mmap(NULL, (size_t)(10 * page), PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0) : MAP_FAILED;
  if (fd >= 0) close(fd);
  if (p != MAP_FAILED)
    for (int i = 1; i < 10; i += 2) mprotect(p + i * page, (size_t)page, PROT_READ);
  int added = tpu_codemaps_end(&probe);
  if (p != MAP_FAILED) munmap(p, (size_t)(10 * page));
  return added;
}

TEST(codemaps_counts_first_then_estimates) {
  /* TPU_CODEMAPS_EXACT is a multiple of TPU_CODEMAPS_EVERY: the one after them is counted too. */
  for (int i = 0; i <= TPU_CODEMAPS_EXACT; ++i) {
    int added = codemaps_probe(true);
    EXPECT(added >= 8 && added <= 20); /* 10, less any merged with a neighbour, plus other threads' */
  }
  /* Not counted: the mean of the counted ones, though nothing was mapped. */
  int estimated = codemaps_probe(false);
  EXPECT(estimated >= 8 && estimated <= 20);
  /* Every TPU_CODEMAPS_EVERY-th is counted again: nothing mapped, weight 1. */
  int counted = 0;
  for (int i = 1; i < TPU_CODEMAPS_EVERY; ++i) counted += codemaps_probe(false) == 1;
  EXPECT_EQ_INT(counted, 1);
}
