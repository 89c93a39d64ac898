/* Tests of the disk compile cache: SHA-256 against FIPS 180-4 / NIST vectors,
 * the entry format (every damaged byte, every truncation, a foreign key are
 * rejected), entry files, LRU eviction, keys, and the tier through
 * tpu_executable_compile. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "device.h"
#include "diskcache.h"
#include "sha256.h"
#include "test.h"
#include "torchtpu/runtime.h"

static void sha_hex(const void* data, size_t len, char* out) {
  uint8_t d[TPU_SHA256_BYTES];
  tpu_sha256(data, len, d);
  tpu_hex(d, sizeof d, out);
}

TEST(sha256_known_vectors) {
  char hex[65];
  sha_hex("", 0, hex);
  EXPECT_STREQ(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  sha_hex("abc", 3, hex);
  EXPECT_STREQ(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  /* 56 bytes: the length no longer fits the first block, padding takes two. */
  const char* two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  sha_hex(two, strlen(two), hex);
  EXPECT_STREQ(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const char* four = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopq"
                     "klmnopqrlmnopqrsmnopqrstnopqrstu";
  sha_hex(four, strlen(four), hex);
  EXPECT_STREQ(hex, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  /* One million 'a', fed in uneven pieces: exercises the streaming buffer. */
  tpu_sha256_t ctx;
  tpu_sha256_init(&ctx);
  char chunk[997];
  memset(chunk, 'a', sizeof chunk);
  size_t left = 1000000;
  for (size_t piece = 1; left > 0; piece = (piece * 7 + 13) % sizeof chunk + 1) {
    size_t n = piece < left ? piece : left;
    tpu_sha256_update(&ctx, chunk, n);
    left -= n;
  }
  uint8_t d[TPU_SHA256_BYTES];
  tpu_sha256_final(&ctx, d);
  tpu_hex(d, sizeof d, hex);
  EXPECT_STREQ(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(sha256_streaming_matches_one_shot) {
  uint8_t msg[300];
  for (size_t i = 0; i < sizeof msg; i++) msg[i] = (uint8_t)(i * 7 + 3);
  /* Every length across the block and padding boundaries, split at every third byte. */
  for (size_t len = 0; len <= 130; len++) {
    uint8_t one[TPU_SHA256_BYTES], streamed[TPU_SHA256_BYTES];
    tpu_sha256(msg, len, one);
    tpu_sha256_t ctx;
    tpu_sha256_init(&ctx);
    for (size_t i = 0; i < len; i += 3) tpu_sha256_update(&ctx, msg + i, len - i < 3 ? len - i : 3);
    tpu_sha256_final(&ctx, streamed);
    EXPECT(memcmp(one, streamed, sizeof one) == 0);
  }
}

/* ---- the entry format ---- */

static tpu_disk_key_t test_key(uint8_t seed) {
  tpu_disk_key_t k;
  for (int i = 0; i < TPU_SHA256_BYTES; i++) k.bytes[i] = (uint8_t)(seed * 31 + i);
  return k;
}

/* A whole entry (header + payload) in a malloc'd buffer. */
static uint8_t* make_entry(const tpu_disk_key_t* key, const uint8_t* payload, size_t len,
                           size_t* out_size) {
  uint8_t* e = malloc(TPU_DISK_HEADER_BYTES + len);
  tpu_disk_entry_header(key, payload, len, e);
  memcpy(e + TPU_DISK_HEADER_BYTES, payload, len);
  *out_size = TPU_DISK_HEADER_BYTES + len;
  return e;
}

TEST(disk_entry_parse_accepts_good) {
  uint8_t payload[100];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(i ^ 0x5a);
  tpu_disk_key_t key = test_key(1);
  size_t size = 0;
  uint8_t* e = make_entry(&key, payload, sizeof payload, &size);
  ASSERT(e != NULL);
  const uint8_t* p = NULL;
  size_t len = 0;
  EXPECT_OK(tpu_disk_entry_parse(e, size, &key, &p, &len));
  EXPECT_EQ_INT(len, sizeof payload);
  EXPECT(p == e + TPU_DISK_HEADER_BYTES);
  EXPECT(memcmp(e, "\x89TPUEXEC", 8) == 0);
  free(e);
}

TEST(disk_entry_parse_rejects_every_damaged_byte) {
  uint8_t payload[64];
  for (size_t i = 0; i < sizeof payload; i++) payload[i] = (uint8_t)(3 * i);
  tpu_disk_key_t key = test_key(2);
  size_t size = 0;
  uint8_t* e = make_entry(&key, payload, sizeof payload, &size);
  ASSERT(e != NULL);
  int accepted = 0;
  for (size_t i = 0; i < size; i++) {
    for (int bit = 0; bit < 8; bit += 3) {
      e[i] ^= (uint8_t)(1u << bit);
      const uint8_t* p = NULL;
      size_t len = 7;
      tpu_status_t* s = tpu_disk_entry_parse(e, size, &key, &p, &len);
      if (!s) accepted++;
      if (s) EXPECT(p == NULL && len == 0);
      tpu_status_free(s);
      e[i] ^= (uint8_t)(1u << bit);
    }
  }
  EXPECT_EQ_INT(accepted, 0);
  free(e);
}

TEST(disk_entry_parse_rejects_truncated_extended_foreign) {
  uint8_t payload[40] = {1, 2, 3};
  tpu_disk_key_t key = test_key(3), other = test_key(4);
  size_t size = 0;
  uint8_t* e = make_entry(&key, payload, sizeof payload, &size);
  ASSERT(e != NULL);
  const uint8_t* p = NULL;
  size_t len = 0;
  for (size_t cut = 0; cut < size; cut++) {
    tpu_status_t* s = tpu_disk_entry_parse(e, cut, &key, &p, &len);
    EXPECT(s != NULL);
    EXPECT(tpu_status_code(s) == TPU_DATA_LOSS);
    tpu_status_free(s);
  }
  uint8_t* longer = malloc(size + 1);
  memcpy(longer, e, size);
  longer[size] = 0;
  EXPECT_CODE(tpu_disk_entry_parse(longer, size + 1, &key, &p, &len), TPU_DATA_LOSS);
  free(longer);
  /* Another key's entry under our name: intact but foreign. */
  EXPECT_CODE(tpu_disk_entry_parse(e, size, &other, &p, &len), TPU_FAILED_PRECONDITION);
  e[8] = 2; /* a future format version */
  EXPECT_CODE(tpu_disk_entry_parse(e, size, &key, &p, &len), TPU_FAILED_PRECONDITION);
  free(e);
}

/* ---- entry files ---- */

static bool make_tmp_dir(char* buf, size_t cap) {
  snprintf(buf, cap, "/tmp/torchtpu-dctest-XXXXXX");
  return mkdtemp(buf) != NULL;
}

/* Removes `dir`, its fan-out directories and their files (two levels). */
static void remove_tree(const char* dir) {
  DIR* d = opendir(dir);
  char sub[1024], path[2048];
  for (struct dirent* e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    DIR* s = opendir(sub);
    for (struct dirent* f; s && (f = readdir(s));) {
      if (strcmp(f->d_name, ".") == 0 || strcmp(f->d_name, "..") == 0) continue;
      snprintf(path, sizeof path, "%s/%s", sub, f->d_name);
      unlink(path);
    }
    if (s) closedir(s);
    if (rmdir(sub) != 0) unlink(sub);
  }
  if (d) closedir(d);
  rmdir(dir);
}

static void entry_path(const char* dir, const tpu_disk_key_t* key, char* out, size_t cap) {
  char hex[TPU_DISK_NAME_CHARS];
  tpu_hex(key->bytes, TPU_SHA256_BYTES, hex);
  snprintf(out, cap, "%s/%.2s/%s", dir, hex, hex);
}

static bool exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

static void write_file(const char* path, const void* data, size_t len) {
  FILE* f = fopen(path, "wb");
  if (!f) return;
  if (len) fwrite(data, 1, len, f);
  fclose(f);
}

/* Reads the entry of `key` expecting `code`; frees what it gets. */
static void expect_read(const char* dir, const tpu_disk_key_t* key, tpu_status_code_t code) {
  uint8_t* data = NULL;
  size_t size = 0, len = 0;
  const uint8_t* p = NULL;
  tpu_status_t* s = tpu_disk_entry_read(dir, key, &data, &size, &p, &len);
  EXPECT_EQ_INT(tpu_status_code(s), code);
  if (s) EXPECT(data == NULL && p == NULL);
  tpu_status_free(s);
  free(data);
}

TEST(disk_entry_file_round_trip_and_damage) {
  char dir[64], path[256];
  ASSERT(make_tmp_dir(dir, sizeof dir));
  tpu_disk_key_t key = test_key(5);
  entry_path(dir, &key, path, sizeof path);
  const char payload[] = "serialized executable bytes";
  expect_read(dir, &key, TPU_NOT_FOUND);
  EXPECT_OK(tpu_disk_entry_write(dir, &key, payload, sizeof payload));
  uint8_t* data = NULL;
  size_t size = 0, len = 0;
  const uint8_t* p = NULL;
  EXPECT_OK(tpu_disk_entry_read(dir, &key, &data, &size, &p, &len));
  EXPECT_EQ_INT(len, sizeof payload);
  EXPECT(p && memcmp(p, payload, sizeof payload) == 0);
  EXPECT_EQ_INT(size, TPU_DISK_HEADER_BYTES + sizeof payload);

  /* A flipped payload byte on disk: rejected and the file removed. */
  data[size - 3] ^= 0x10;
  write_file(path, data, size);
  expect_read(dir, &key, TPU_DATA_LOSS);
  EXPECT(!exists(path));
  /* Truncated, and zero-length (a writer's crash without the temp-file dance). */
  data[size - 3] ^= 0x10;
  write_file(path, data, size - 10);
  expect_read(dir, &key, TPU_DATA_LOSS);
  EXPECT(!exists(path));
  write_file(path, data, 0);
  expect_read(dir, &key, TPU_DATA_LOSS);
  EXPECT(!exists(path));
  /* Another key's intact entry renamed to our name: foreign. */
  tpu_disk_key_t other = test_key(6);
  write_file(path, data, size);
  expect_read(dir, &key, TPU_OK);
  char other_path[256];
  entry_path(dir, &other, other_path, sizeof other_path);
  EXPECT_OK(tpu_disk_entry_write(dir, &other, payload, sizeof payload)); /* makes its fan-out dir */
  write_file(other_path, data, size);
  expect_read(dir, &other, TPU_FAILED_PRECONDITION);
  EXPECT(!exists(other_path));
  free(data);
  remove_tree(dir);
}

/* A file of `bytes` bytes with mtime `age` seconds ago. */
static void aged_file(const char* path, size_t bytes, int age) {
  char zeros[512] = {0};
  write_file(path, zeros, bytes);
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age;
  t[1] = t[0];
  utimensat(AT_FDCWD, path, t, 0);
}

TEST(disk_evict_oldest_first_and_stale_temp_files) {
  char dir[64], sub[128], path[3][256], tmp_old[256], tmp_new[256], other[256];
  ASSERT(make_tmp_dir(dir, sizeof dir));
  snprintf(sub, sizeof sub, "%s/ab", dir);
  ASSERT(mkdir(sub, 0777) == 0);
  for (int i = 0; i < 3; i++) {
    snprintf(path[i], sizeof path[i], "%s/ab%062d", sub, i);
    aged_file(path[i], 100, 300 - 100 * i); /* path[0] oldest */
  }
  snprintf(tmp_old, sizeof tmp_old, "%s/.tmp-1-1-1", sub);
  snprintf(tmp_new, sizeof tmp_new, "%s/.tmp-1-2-1", sub);
  snprintf(other, sizeof other, "%s/notes.txt", sub);
  aged_file(tmp_old, 50, 2 * 3600); /* a writer killed long ago */
  aged_file(tmp_new, 10, 0);        /* a live writer's */
  aged_file(other, 7, 99999);       /* not ours */

  int64_t total = 0;
  EXPECT_OK(tpu_disk_cache_evict(dir, 1000, &total)); /* under the limit: keeps entries */
  EXPECT_EQ_INT(total, 310);
  EXPECT(!exists(tmp_old));
  EXPECT(exists(tmp_new) && exists(other) && exists(path[0]));
  /* A hit touches the entry: path[0] becomes the youngest. */
  aged_file(path[0], 100, 0);
  EXPECT_OK(tpu_disk_cache_evict(dir, 250, &total));
  EXPECT_EQ_INT(total, 210);
  EXPECT(exists(path[0]) && !exists(path[1]) && exists(path[2]));
  EXPECT_OK(tpu_disk_cache_evict(dir, 0, &total)); /* what clear does */
  EXPECT_EQ_INT(total, 10);
  EXPECT(!exists(path[0]) && !exists(path[2]) && exists(tmp_new) && exists(other));
  /* A missing directory is an empty cache. */
  char missing[128];
  snprintf(missing, sizeof missing, "%s/none", dir);
  EXPECT_OK(tpu_disk_cache_evict(missing, 0, &total));
  EXPECT_EQ_INT(total, 0);
  remove_tree(dir);
}

/* ---- keys and the tier ---- */

TEST(disk_key_covers_program_and_options) {
  tpu_disk_key_t a, b, c, d;
  tpu_disk_cache_key("prog", 4, "\x01\x02", 2, &a);
  tpu_disk_cache_key("prog", 4, "\x01\x02", 2, &b);
  tpu_disk_cache_key("prog", 4, "\x01\x03", 2, &c);
  tpu_disk_cache_key("prof", 4, "\x01\x02", 2, &d);
  EXPECT(memcmp(&a, &b, sizeof a) == 0);
  EXPECT(memcmp(&a, &c, sizeof a) != 0);
  EXPECT(memcmp(&a, &d, sizeof a) != 0);
  /* Field boundaries are part of the key: ("prog" + "x") vs ("pro" + "gx"). */
  tpu_disk_cache_key("x", 1, "prog", 4, &c);
  tpu_disk_cache_key("gx", 2, "pro", 3, &d);
  EXPECT(memcmp(&c, &d, sizeof c) != 0);
}

static const char kNegModule[] =
    "module {\n"
    "  func.func @main(%a: tensor<3xf32>) -> tensor<3xf32> {\n"
    "    %0 = \"stablehlo.negate\"(%a) : (tensor<3xf32>) -> tensor<3xf32>\n"
    "    \"func.return\"(%0) : (tensor<3xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* Runs `exe` on {1, -2, 3} and checks it negates. */
static void expect_negates(tpu_executable_t* exe) {
  const float in[3] = {1, -2, 3};
  float out[3] = {0, 0, 0};
  tpu_aval_t aval;
  memset(&aval, 0, sizeof aval);
  aval.dtype = TPU_F32;
  aval.rank = 1;
  aval.dims[0] = 3;
  tpu_buffer_t *a = NULL, *r = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, in, &aval, &a));
  EXPECT_OK(tpu_executable_execute(exe, 0, 1, &a, 1, &aval, "neg", &r));
  if (r) EXPECT_OK(tpu_buffer_to_host(r, out, sizeof out));
  EXPECT(out[0] == -1 && out[1] == 2 && out[2] == -3);
  tpu_buffer_release(r);
  tpu_buffer_release(a);
}

/* Compiles kNegModule; checks how many real compiles, disk hits and errors it took. */
static void compile_expect(int compiles, int hits, int errors) {
  int64_t c0 = tpu_metric_get(TPU_METRIC_COMPILES), h0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS);
  int64_t e0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_ERRORS);
  tpu_executable_t* exe = NULL;
  ASSERT_OK(tpu_executable_compile(kNegModule, strlen(kNegModule), 1, &exe));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES) - c0, compiles);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DISK_CACHE_HITS) - h0, hits);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DISK_CACHE_ERRORS) - e0, errors);
  expect_negates(exe);
  tpu_executable_destroy(exe);
}

TEST(disk_tier_serves_compiles) {
  const char* dir = tpu_disk_cache_dir();
  if (!dir[0]) return; /* TORCHTPU_DISK_CACHE=0 */
  ASSERT(tpu_disk_cache_enabled());
  EXPECT_OK(tpu_disk_cache_clear());
  int64_t w0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_WRITTEN);
  int64_t r0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_READ);
  compile_expect(1, 0, 0); /* miss: compiled and stored */
  int64_t written = tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_WRITTEN) - w0;
  EXPECT(written > (int64_t)TPU_DISK_HEADER_BYTES);
  compile_expect(0, 1, 0); /* hit: no compile */
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_READ) - r0, written);

  /* Damage the stored entry: detected, recompiled, rewritten, then served again. */
  char hex_path[4400];
  DIR* d = opendir(dir);
  int damaged = 0;
  for (struct dirent* e; d && (e = readdir(d));) {
    if (strlen(e->d_name) != 2 || e->d_name[0] == '.') continue;
    char sub[4100];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    DIR* s = opendir(sub);
    for (struct dirent* f; s && (f = readdir(s));) {
      if (strlen(f->d_name) != 64) continue;
      snprintf(hex_path, sizeof hex_path, "%s/%s", sub, f->d_name);
      int fd = open(hex_path, O_RDWR);
      unsigned char byte = 0;
      off_t at = TPU_DISK_HEADER_BYTES + 5;
      if (fd >= 0 && pread(fd, &byte, 1, at) == 1) {
        byte ^= 0xff;
        if (pwrite(fd, &byte, 1, at) == 1) damaged++;
      }
      if (fd >= 0) close(fd);
    }
    if (s) closedir(s);
  }
  if (d) closedir(d);
  EXPECT_EQ_INT(damaged, 1);
  compile_expect(1, 0, 1);
  compile_expect(0, 1, 0);
  EXPECT_OK(tpu_disk_cache_clear());
  compile_expect(1, 0, 0);
}

/* Blobs: stored and loaded by name, counted, kept apart by name, dropped by clear. */
TEST(disk_blobs_round_trip_by_name) {
  if (!tpu_disk_cache_dir()[0]) return; /* TORCHTPU_DISK_CACHE=0 */
  EXPECT_OK(tpu_disk_cache_clear());
  static const char kName[] = "test blob", kOther[] = "test blob 2";
  static const uint8_t kData[] = {0x80, 1, 2, 3, 0, 255, 7};
  int64_t h0 = tpu_metric_get(TPU_METRIC_TRACE_CACHE_HITS), m0 = tpu_metric_get(TPU_METRIC_TRACE_CACHE_MISSES);
  uint8_t* data = NULL;
  size_t len = 0;
  tpu_status_t* status = tpu_disk_blob_load(kName, strlen(kName), &data, &len);
  EXPECT(status && tpu_status_code(status) == TPU_NOT_FOUND && !data && len == 0);
  tpu_status_free(status);
  int64_t w0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_WRITTEN);
  int64_t r0 = tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_READ);
  tpu_disk_blob_store(kName, strlen(kName), kData, sizeof kData);
  ASSERT_OK(tpu_disk_blob_load(kName, strlen(kName), &data, &len));
  EXPECT(len == sizeof kData && memcmp(data, kData, len) == 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_WRITTEN) - w0, TPU_DISK_HEADER_BYTES + sizeof kData);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_DISK_CACHE_BYTES_READ) - r0, TPU_DISK_HEADER_BYTES + sizeof kData);
  free(data);
  status = tpu_disk_blob_load(kOther, strlen(kOther), &data, &len);
  EXPECT(status && tpu_status_code(status) == TPU_NOT_FOUND);
  tpu_status_free(status);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_TRACE_CACHE_HITS) - h0, 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_TRACE_CACHE_MISSES) - m0, 2);
  EXPECT_OK(tpu_disk_cache_clear());
  status = tpu_disk_blob_load(kName, strlen(kName), &data, &len);
  EXPECT(status && tpu_status_code(status) == TPU_NOT_FOUND);
  tpu_status_free(status);
}
