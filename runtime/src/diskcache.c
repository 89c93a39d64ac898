/* The disk tier of the compile cache: keys, the entry format, atomic entry
 * files, LRU eviction by mtime, and the glue tpu_executable_compile calls.
 * diskcache.h describes the layout; docs/compile-cache.md the behaviour. */
#define _GNU_SOURCE /* dladdr: which file the plugin was loaded from */
#include "diskcache.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "env.h"
#include "torchtpu/runtime.h"

#define TPU_DISK_PATH_MAX 4096
#define TPU_DISK_DEFAULT_MAX_BYTES (2LL << 30)
/* A temporary file this old belongs to a writer that died: no live write takes
 * anywhere near this long. */
#define TPU_DISK_STALE_TMP_SECONDS 3600
static const uint8_t kMagic[8] = {0x89, 'T', 'P', 'U', 'E', 'X', 'E', 'C'};
static const char kTmpPrefix[] = ".tmp-";

/* ---- configuration ---- */

typedef struct disk_config {
  char* dir; /* NULL: the tier is off */
  int64_t max_bytes;
  bool blobs; /* TORCHTPU_TRACE_CACHE is not 0 */
} disk_config_t;

static pthread_once_t g_config_once = PTHREAD_ONCE_INIT;
static disk_config_t g_config;

static char* concat(const char* a, const char* b) {
  size_t n = strlen(a) + strlen(b) + 1;
  char* s = malloc(n);
  if (s) snprintf(s, n, "%s%s", a, b);
  return s;
}

/* $TORCHTPU_CACHE_DIR, else $XDG_CACHE_HOME/torchtpu (the XDG spec ignores a
 * relative value), else ~/.cache/torchtpu; NULL when none can be named. */
static char* configured_dir(void) {
  const char* dir = getenv("TORCHTPU_CACHE_DIR");
  if (dir && *dir) return strdup(dir);
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (xdg && xdg[0] == '/') return concat(xdg, "/torchtpu");
  const char* home = getenv("HOME");
  if (home && *home) return concat(home, "/.cache/torchtpu");
  return NULL;
}

static void config_init(void) {
  g_config.dir = tpu_env_off("TORCHTPU_DISK_CACHE") ? NULL : configured_dir();
  g_config.max_bytes = tpu_env_int("TORCHTPU_CACHE_MAX_BYTES", 1, INT64_MAX, TPU_DISK_DEFAULT_MAX_BYTES);
  g_config.blobs = !tpu_env_off("TORCHTPU_TRACE_CACHE");
}

static const disk_config_t* config(void) {
  pthread_once(&g_config_once, config_init);
  return &g_config;
}

/* Set when the loaded plugin fails to load an entry it wrote (it cannot
 * round-trip its executables), and when entries cannot be written (no
 * Executable_Serialize, an unwritable directory): the tier then stays out of
 * the way for the rest of the process. */
static _Atomic(const PJRT_Api*) g_load_off_api;
static atomic_bool g_store_off;
static atomic_bool g_warned;

bool tpu_disk_cache_enabled(void) {
  const PJRT_Api* api = tpu_client_api();
  return config()->dir && api && atomic_load(&g_load_off_api) != api;
}

const char* tpu_disk_cache_dir(void) {
  const char* dir = config()->dir;
  return dir ? dir : "";
}

/* One line on stderr per process at most: the tier's problems never fail an op,
 * but a cache that silently stopped working would go unnoticed. */
static void warn_once(const char* what, const tpu_status_t* status) {
  if (atomic_exchange(&g_warned, true)) return;
  fprintf(stderr, "torchtpu: compile cache %s: %s: %s (compiling without it; counted in "
          "metrics()[\"disk_cache_errors\"])\n", tpu_disk_cache_dir(), what,
          tpu_status_message(status));
}

/* ---- keys ---- */

/* Length-prefixed, so ("ab", "c") and ("a", "bc") hash differently. */
static void hash_field(tpu_sha256_t* h, const void* data, size_t len) {
  uint8_t n[8];
  for (int i = 0; i < 8; i++) n[i] = (uint8_t)((uint64_t)len >> (8 * i));
  tpu_sha256_update(h, n, sizeof n);
  if (len) tpu_sha256_update(h, data, len);
}

static void hash_str(tpu_sha256_t* h, const char* s) { hash_field(h, s ? s : "", s ? strlen(s) : 0); }

/* Size and mtime of the plugin library: the CPU plugin reports its version as
 * just "cpu", so an upgraded library would otherwise share keys with the old. */
static void hash_plugin_file(tpu_sha256_t* h, const PJRT_Api* api) {
  Dl_info info;
  struct stat st;
  int64_t id[3] = {0, 0, 0};
  if (dladdr((const void*)api, &info) && info.dli_fname && stat(info.dli_fname, &st) == 0) {
    id[0] = (int64_t)st.st_size;
    id[1] = (int64_t)st.st_mtim.tv_sec;
    id[2] = (int64_t)st.st_mtim.tv_nsec;
  }
  hash_field(h, id, sizeof id);
}

/* Everything but the program and its options: the torchtpu version (a changed
 * lowering must not hit old entries), the format, and the plugin's identity. */
/* What every key starts with: its kind of entry, the torchtpu version and the format. */
static void hash_head(tpu_sha256_t* h, const char* kind) {
  tpu_sha256_init(h);
  hash_str(h, kind);
  hash_str(h, TORCHTPU_VERSION);
  uint32_t format = TPU_DISK_FORMAT_VERSION;
  hash_field(h, &format, sizeof format);
}

static void hash_prefix(tpu_sha256_t* h, const PJRT_Api* api) {
  hash_head(h, "torchtpu compile cache");
  hash_str(h, tpu_runtime_platform_name());
  hash_str(h, tpu_runtime_platform_version());
  int version[2] = {0, 0};
  tpu_runtime_api_version(&version[0], &version[1]);
  hash_field(h, version, sizeof version);
  const tpu_plugin_t* plugin = tpu_client_plugin();
  int64_t shlo[3] = {0, 0, 0};
  if (plugin && plugin->has_stablehlo_version) memcpy(shlo, plugin->stablehlo_version, sizeof shlo);
  hash_field(h, shlo, sizeof shlo);
  hash_str(h, tpu_runtime_device_kind(0)); /* a GPU model decides the generated code */
  hash_plugin_file(h, api);
  /* The flags XLA plugins read from the environment change the code they compile
   * (XLA_FLAGS for every XLA plugin, LIBTPU_INIT_ARGS for libtpu) without changing
   * our options: an entry compiled under other flags is another program. The
   * plugins read them once, when the client is made, as this prefix is. */
  static const char* const kFlagVars[] = {"XLA_FLAGS", "LIBTPU_INIT_ARGS"};
  for (size_t i = 0; i < sizeof kFlagVars / sizeof kFlagVars[0]; i++) hash_str(h, getenv(kFlagVars[i]));
}

/* The prefix is computed once per plugin: it costs a dladdr and a stat. */
static pthread_mutex_t g_prefix_mu = PTHREAD_MUTEX_INITIALIZER;
static const PJRT_Api* g_prefix_api;
static tpu_sha256_t g_prefix;

void tpu_disk_cache_key(const char* mlir, size_t len, const void* options, size_t options_len,
                        tpu_disk_key_t* out_key) {
  const PJRT_Api* api = tpu_client_api();
  tpu_sha256_t h;
  pthread_mutex_lock(&g_prefix_mu);
  if (g_prefix_api != api || !api) {
    hash_prefix(&g_prefix, api);
    g_prefix_api = api;
  }
  h = g_prefix;
  pthread_mutex_unlock(&g_prefix_mu);
  hash_field(&h, options, options_len);
  hash_field(&h, mlir, len);
  tpu_sha256_final(&h, out_key->bytes);
}

/* ---- the entry format ---- */

static void put_le(uint8_t* p, uint64_t v, int n) {
  for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
  return v;
}

void tpu_disk_entry_header(const tpu_disk_key_t* key, const void* payload, size_t len,
                           uint8_t* out_header) {
  memcpy(out_header, kMagic, sizeof kMagic);
  put_le(out_header + 8, TPU_DISK_FORMAT_VERSION, 4);
  put_le(out_header + 12, TPU_DISK_HEADER_BYTES, 4);
  put_le(out_header + 16, len, 8);
  memcpy(out_header + 24, key->bytes, TPU_SHA256_BYTES);
  tpu_sha256(payload, len, out_header + 56);
}

tpu_status_t* tpu_disk_entry_parse(const uint8_t* data, size_t size, const tpu_disk_key_t* key,
                                   const uint8_t** out_payload, size_t* out_len) {
  *out_payload = NULL;
  *out_len = 0;
  if (size < TPU_DISK_HEADER_BYTES) {
    return TPU_STATUS(TPU_DATA_LOSS, "entry is truncated (%zu bytes, header is %u)", size,
                      TPU_DISK_HEADER_BYTES);
  }
  if (memcmp(data, kMagic, sizeof kMagic) != 0) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "not a torchtpu cache entry (bad magic)");
  }
  uint64_t format = get_le(data + 8, 4), header = get_le(data + 12, 4), len = get_le(data + 16, 8);
  if (format != TPU_DISK_FORMAT_VERSION || header != TPU_DISK_HEADER_BYTES) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "entry format %llu (header %llu), expected %u",
                      (unsigned long long)format, (unsigned long long)header,
                      TPU_DISK_FORMAT_VERSION);
  }
  if (memcmp(data + 24, key->bytes, TPU_SHA256_BYTES) != 0) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "entry belongs to another key");
  }
  if (len != size - TPU_DISK_HEADER_BYTES) {
    return TPU_STATUS(TPU_DATA_LOSS, "entry holds %zu payload bytes, header says %llu",
                      size - TPU_DISK_HEADER_BYTES, (unsigned long long)len);
  }
  uint8_t digest[TPU_SHA256_BYTES];
  tpu_sha256(data + TPU_DISK_HEADER_BYTES, (size_t)len, digest);
  if (memcmp(digest, data + 56, TPU_SHA256_BYTES) != 0) {
    return TPU_STATUS(TPU_DATA_LOSS, "entry payload checksum mismatch");
  }
  *out_payload = data + TPU_DISK_HEADER_BYTES;
  *out_len = (size_t)len;
  return NULL;
}

/* ---- entry files ---- */

static tpu_status_t* io_status(int err, const char* what, const char* path) {
  tpu_status_code_t code = TPU_UNAVAILABLE;
  if (err == EACCES || err == EPERM || err == EROFS) code = TPU_PERMISSION_DENIED;
  if (err == ENOSPC || err == EDQUOT) code = TPU_RESOURCE_EXHAUSTED;
  if (err == ENOENT || err == ENOTDIR) code = TPU_NOT_FOUND;
  return TPU_STATUS(code, "%s %s: %s", what, path, strerror(err));
}

/* "<dir>/ab" and "<dir>/ab/ab…" for `key`; false when they do not fit. */
static bool entry_paths(const char* dir, const tpu_disk_key_t* key, char* out_sub, char* out_path) {
  char hex[TPU_DISK_NAME_CHARS];
  tpu_hex(key->bytes, TPU_SHA256_BYTES, hex);
  int a = snprintf(out_sub, TPU_DISK_PATH_MAX, "%s/%.2s", dir, hex);
  int b = snprintf(out_path, TPU_DISK_PATH_MAX, "%s/%s", out_sub, hex);
  return a > 0 && a < TPU_DISK_PATH_MAX && b > 0 && b < TPU_DISK_PATH_MAX;
}

/* mkdir -p; returns 0 or the errno of the last directory. */
static int make_dirs(char* path) {
  for (char* p = path + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    (void)mkdir(path, 0777); /* failures show up at the last component */
    *p = '/';
  }
  return mkdir(path, 0777) == 0 || errno == EEXIST ? 0 : errno;
}

static bool write_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len > 0) {
    ssize_t n = write(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

/* Writes header + payload to a new temporary file in `sub`. Its name (pid,
 * counter, clock) is unique per process and call, and O_EXCL makes sure, so
 * concurrent writers never share one. */
static tpu_status_t* write_tmp(const char* sub, const uint8_t* header, const void* payload,
                               size_t len, char* out_tmp) {
  static atomic_uint counter;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  int n = snprintf(out_tmp, TPU_DISK_PATH_MAX, "%s/%s%ld-%u-%ld", sub, kTmpPrefix, (long)getpid(),
                   atomic_fetch_add(&counter, 1), (long)ts.tv_nsec);
  if (n <= 0 || n >= TPU_DISK_PATH_MAX) return TPU_STATUS(TPU_INVALID_ARGUMENT, "path too long");
  int fd = open(out_tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return io_status(errno, "cannot create", out_tmp);
  bool ok = write_all(fd, header, TPU_DISK_HEADER_BYTES) && write_all(fd, payload, len);
  int err = errno;
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok) return NULL;
  unlink(out_tmp);
  return io_status(err, "cannot write", out_tmp);
}

tpu_status_t* tpu_disk_entry_write(const char* dir, const tpu_disk_key_t* key, const void* payload,
                                   size_t len) {
  char sub[TPU_DISK_PATH_MAX], path[TPU_DISK_PATH_MAX], tmp[TPU_DISK_PATH_MAX];
  if (!entry_paths(dir, key, sub, path)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "cache directory path too long: %s", dir);
  }
  int err = make_dirs(sub);
  if (err) return io_status(err, "cannot create directory", sub);
  uint8_t header[TPU_DISK_HEADER_BYTES];
  tpu_disk_entry_header(key, payload, len, header);
  TPU_RETURN_IF_ERROR(write_tmp(sub, header, payload, len, tmp));
  /* rename() replaces atomically: readers see the old file or the new, whole. */
  if (rename(tmp, path) != 0) {
    err = errno;
    unlink(tmp);
    return io_status(err, "cannot rename into", path);
  }
  return NULL;
}

static bool read_all(int fd, uint8_t* buf, size_t len, size_t* out_got) {
  *out_got = 0;
  while (*out_got < len) {
    ssize_t n = read(fd, buf + *out_got, len - *out_got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) break;
    *out_got += (size_t)n;
  }
  return true;
}

/* Unlinks `path` if it is still the file we read (`st`): a writer may have
 * renamed a good entry over it meanwhile, which must survive. */
static void discard(const char* path, const struct stat* st) {
  struct stat now;
  if (stat(path, &now) == 0 && now.st_dev == st->st_dev && now.st_ino == st->st_ino) unlink(path);
}

tpu_status_t* tpu_disk_entry_read(const char* dir, const tpu_disk_key_t* key, uint8_t** out_data,
                                  size_t* out_size, const uint8_t** out_payload, size_t* out_len) {
  *out_data = NULL;
  *out_size = 0;
  *out_payload = NULL;
  *out_len = 0;
  char sub[TPU_DISK_PATH_MAX], path[TPU_DISK_PATH_MAX];
  if (!entry_paths(dir, key, sub, path)) return TPU_STATUS(TPU_NOT_FOUND, "path too long");
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_status(errno, "cannot open", path);
  struct stat st;
  uint8_t* data = NULL;
  size_t got = 0;
  tpu_status_t* status = NULL;
  if (fstat(fd, &st) != 0 || st.st_size < 0) {
    status = io_status(errno, "cannot stat", path);
  } else if (!(data = malloc((size_t)st.st_size + 1))) {
    status = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory reading %s", path);
  } else if (!read_all(fd, data, (size_t)st.st_size, &got)) {
    status = io_status(errno, "cannot read", path);
  } else {
    status = tpu_disk_entry_parse(data, got, key, out_payload, out_len);
    if (status) discard(path, &st);
    if (!status) (void)futimens(fd, NULL); /* LRU: a hit makes the entry young */
  }
  close(fd);
  if (status) {
    free(data);
    return tpu_status_annotate(status, "%s", path);
  }
  *out_data = data;
  *out_size = got;
  return NULL;
}

/* ---- eviction ---- */

typedef struct disk_file {
  char* path;
  int64_t bytes;
  struct timespec mtime;
} disk_file_t;

typedef struct disk_scan {
  disk_file_t* files; /* entries only: what eviction may remove */
  size_t count, cap;
  int64_t total; /* entries plus live temporary files */
} disk_scan_t;

static bool is_hex(const char* s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
  }
  return s[n] == '\0';
}

static bool scan_add(disk_scan_t* scan, const char* path, const struct stat* st) {
  if (scan->count == scan->cap) {
    size_t cap = scan->cap ? 2 * scan->cap : 64;
    disk_file_t* files = realloc(scan->files, cap * sizeof *files);
    if (!files) return false;
    scan->files = files;
    scan->cap = cap;
  }
  char* copy = strdup(path);
  if (!copy) return false;
  scan->files[scan->count++] = (disk_file_t){copy, (int64_t)st->st_size, st->st_mtim};
  return true;
}

/* One fan-out directory: lists entries, removes stale temporary files. */
static bool scan_fanout(const char* sub, time_t now, disk_scan_t* scan) {
  DIR* d = opendir(sub);
  if (!d) return true; /* vanished meanwhile: nothing to count */
  bool ok = true;
  char path[TPU_DISK_PATH_MAX];
  struct stat st;
  for (struct dirent* e; ok && (e = readdir(d));) {
    bool entry = strlen(e->d_name) == 2 * TPU_SHA256_BYTES && is_hex(e->d_name, 2 * TPU_SHA256_BYTES);
    bool tmp = strncmp(e->d_name, kTmpPrefix, sizeof kTmpPrefix - 1) == 0;
    if (!entry && !tmp) continue; /* not ours: never touched */
    int n = snprintf(path, sizeof path, "%s/%s", sub, e->d_name);
    if (n <= 0 || n >= (int)sizeof path || lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (tmp && now - st.st_mtim.tv_sec > TPU_DISK_STALE_TMP_SECONDS) {
      unlink(path); /* its writer was killed before the rename */
      continue;
    }
    scan->total += (int64_t)st.st_size;
    if (entry) ok = scan_add(scan, path, &st);
  }
  closedir(d);
  return ok;
}

static tpu_status_t* scan_dir(const char* dir, disk_scan_t* scan) {
  DIR* d = opendir(dir);
  if (!d) return errno == ENOENT ? NULL : io_status(errno, "cannot list", dir);
  time_t now = time(NULL);
  char sub[TPU_DISK_PATH_MAX];
  bool ok = true;
  for (struct dirent* e; ok && (e = readdir(d));) {
    if (!is_hex(e->d_name, 2)) continue;
    int n = snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    if (n > 0 && n < (int)sizeof sub) ok = scan_fanout(sub, now, scan);
  }
  closedir(d);
  return ok ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory scanning %s", dir);
}

static int older_first(const void* a, const void* b) {
  const struct timespec* x = &((const disk_file_t*)a)->mtime;
  const struct timespec* y = &((const disk_file_t*)b)->mtime;
  if (x->tv_sec != y->tv_sec) return x->tv_sec < y->tv_sec ? -1 : 1;
  return x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec;
}

tpu_status_t* tpu_disk_cache_evict(const char* dir, int64_t target_bytes, int64_t* out_total) {
  *out_total = 0;
  disk_scan_t scan = {NULL, 0, 0, 0};
  tpu_status_t* status = scan_dir(dir, &scan);
  if (!status && scan.total > target_bytes) {
    qsort(scan.files, scan.count, sizeof *scan.files, older_first);
    for (size_t i = 0; i < scan.count && scan.total > target_bytes; i++) {
      /* Already gone (another process evicted it) counts as removed too. */
      if (unlink(scan.files[i].path) == 0 || errno == ENOENT) scan.total -= scan.files[i].bytes;
    }
  }
  for (size_t i = 0; i < scan.count; i++) free(scan.files[i].path);
  free(scan.files);
  *out_total = scan.total;
  return status;
}

/* This process' idea of the directory's size: scanned at its first store, then
 * grown by what it writes; past the cap a rescan (which also sees other
 * processes' entries) evicts down to 90% so the next stores do not rescan. */
static pthread_mutex_t g_size_mu = PTHREAD_MUTEX_INITIALIZER;
static int64_t g_size = -1;

static void account_store(const disk_config_t* cfg, int64_t added) {
  pthread_mutex_lock(&g_size_mu);
  if (g_size >= 0 && g_size + added <= cfg->max_bytes) {
    g_size += added;
  } else {
    int64_t total = 0;
    int64_t limit = g_size < 0 ? cfg->max_bytes : cfg->max_bytes - cfg->max_bytes / 10;
    tpu_status_t* status = tpu_disk_cache_evict(cfg->dir, limit, &total);
    if (status) tpu_metric_add(TPU_METRIC_DISK_CACHE_ERRORS, 1);
    tpu_status_free(status);
    g_size = status ? -1 : total; /* after a failed scan, scan again next time */
  }
  pthread_mutex_unlock(&g_size_mu);
}

tpu_status_t* tpu_disk_cache_clear(void) {
  const disk_config_t* cfg = config();
  if (!cfg->dir) return NULL;
  int64_t total = 0;
  pthread_mutex_lock(&g_size_mu);
  tpu_status_t* status = tpu_disk_cache_evict(cfg->dir, 0, &total);
  g_size = status ? -1 : total;
  pthread_mutex_unlock(&g_size_mu);
  return status;
}

/* ---- the tier ---- */

static tpu_status_t* deserialize(const PJRT_Api* api, const uint8_t* payload, size_t len,
                                 PJRT_LoadedExecutable** out_loaded) {
  *out_loaded = NULL;
  TPU_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, args, load_options);
  args.client = tpu_client_pjrt();
  args.serialized_executable = (const char*)payload;
  args.serialized_executable_size = len;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, Executable_DeserializeAndLoad, &args));
  if (!args.loaded_executable) {
    return TPU_STATUS(TPU_INTERNAL, "DeserializeAndLoad returned no executable");
  }
  *out_loaded = args.loaded_executable;
  return NULL;
}

/* Counts a read of an entry in `hit` or `miss` (an absent entry is a plain miss;
 * a corrupt, foreign or unreadable one an error too) and frees `status`.
 * Returns whether it was a hit. */
static bool count_read(tpu_status_t* status, size_t size, tpu_metric_t hit, tpu_metric_t miss) {
  if (status) {
    if (tpu_status_code(status) != TPU_NOT_FOUND) tpu_metric_add(TPU_METRIC_DISK_CACHE_ERRORS, 1);
    tpu_status_free(status);
    tpu_metric_add(miss, 1);
    return false;
  }
  tpu_metric_add(hit, 1);
  tpu_metric_add(TPU_METRIC_DISK_CACHE_BYTES_READ, (int64_t)size);
  return true;
}

PJRT_LoadedExecutable* tpu_disk_cache_load(const PJRT_Api* api, const tpu_disk_key_t* key) {
  const disk_config_t* cfg = config();
  if (!cfg->dir || !api || atomic_load(&g_load_off_api) == api) return NULL;
  uint8_t* data = NULL;
  size_t size = 0, len = 0;
  const uint8_t* payload = NULL;
  tpu_status_t* status = tpu_disk_entry_read(cfg->dir, key, &data, &size, &payload, &len);
  PJRT_LoadedExecutable* loaded = NULL;
  if (!status) {
    status = deserialize(api, payload, len, &loaded);
    if (status) {
      /* The entry verified, so this plugin cannot load what it serializes:
       * stop using the tier with it rather than fail every lookup. */
      atomic_store(&g_load_off_api, api);
      atomic_store(&g_store_off, true);
      warn_once("the plugin cannot load its serialized executables", status);
    }
  }
  free(data);
  return count_read(status, size, TPU_METRIC_DISK_CACHE_HITS, TPU_METRIC_DISK_CACHE_MISSES) ? loaded : NULL;
}

typedef struct serialized {
  PJRT_Executable* exe;
  const char* bytes;
  size_t size;
  PJRT_SerializedExecutable* holder;
  void (*deleter)(PJRT_SerializedExecutable* holder);
} serialized_t;

static void serialized_free(const PJRT_Api* api, serialized_t* s) {
  if (s->deleter && s->holder) s->deleter(s->holder);
  if (s->exe) {
    TPU_PJRT_ARGS(PJRT_Executable_Destroy_Args, destroy, executable);
    destroy.executable = s->exe;
    tpu_status_free(TPU_PJRT_CALL(api, Executable_Destroy, &destroy));
  }
  memset(s, 0, sizeof *s);
}

static tpu_status_t* serialize(const PJRT_Api* api, PJRT_LoadedExecutable* loaded,
                               serialized_t* out) {
  memset(out, 0, sizeof *out);
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get, executable);
  get.loaded_executable = loaded;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, LoadedExecutable_GetExecutable, &get));
  out->exe = get.executable;
  TPU_PJRT_ARGS(PJRT_Executable_Serialize_Args, args, serialized_executable_deleter);
  args.executable = get.executable;
  tpu_status_t* status = TPU_PJRT_CALL(api, Executable_Serialize, &args);
  out->holder = args.serialized_executable;
  out->deleter = args.serialized_executable_deleter;
  out->bytes = args.serialized_bytes;
  out->size = args.serialized_bytes_size;
  if (!status && (!out->bytes || out->size == 0)) {
    status = TPU_STATUS(TPU_UNIMPLEMENTED, "Executable_Serialize returned no bytes");
  }
  if (status) serialized_free(api, out);
  return status;
}

/* Later stores would fail the same way (no Executable_Serialize, an unwritable
 * directory): `off` stops them (lookups go on, so a read-only, pre-filled
 * directory still serves). Counted and warned once. */
static void stop_storing(atomic_bool* off, const char* what, tpu_status_t* status) {
  atomic_store(off, true);
  tpu_metric_add(TPU_METRIC_DISK_CACHE_ERRORS, 1);
  warn_once(what, status);
  tpu_status_free(status);
}

/* Writes the entry of `key` and accounts for its bytes. */
static void store_entry(const disk_config_t* cfg, const tpu_disk_key_t* key, const void* data, size_t len,
                        atomic_bool* off) {
  tpu_status_t* status = tpu_disk_entry_write(cfg->dir, key, data, len);
  if (status) {
    stop_storing(off, "cannot write entries", status);
    return;
  }
  const int64_t written = (int64_t)(len + TPU_DISK_HEADER_BYTES);
  tpu_metric_add(TPU_METRIC_DISK_CACHE_BYTES_WRITTEN, written);
  account_store(cfg, written);
}

void tpu_disk_cache_store(const PJRT_Api* api, const tpu_disk_key_t* key,
                          PJRT_LoadedExecutable* loaded) {
  const disk_config_t* cfg = config();
  if (!cfg->dir || !api || !loaded || atomic_load(&g_store_off)) return;
  serialized_t s;
  tpu_status_t* status = serialize(api, loaded, &s);
  if (status) {
    stop_storing(&g_store_off, "the plugin cannot serialize executables", status);
    return;
  }
  store_entry(cfg, key, s.bytes, s.size, &g_store_off);
  serialized_free(api, &s);
}

/* ---- blobs: entries the Python side fills (traced graphs) ---- */

/* Apart from g_store_off: a plugin that cannot serialize executables does not
 * stop blobs. */
static atomic_bool g_blob_store_off;

/* Not keyed by the plugin: a traced graph does not depend on it (the programs
 * built from it are keyed as usual). "blob" keeps blob and executable keys apart. */
static void blob_key(const char* name, size_t name_len, tpu_disk_key_t* out_key) {
  tpu_sha256_t h;
  hash_head(&h, "torchtpu compile cache blob");
  hash_field(&h, name, name_len);
  tpu_sha256_final(&h, out_key->bytes);
}

bool tpu_disk_blob_enabled(void) {
  const disk_config_t* cfg = config();
  return cfg->dir && cfg->blobs;
}

tpu_status_t* tpu_disk_blob_load(const char* name, size_t name_len, uint8_t** out_data,
                                 size_t* out_len) {
  *out_data = NULL;
  *out_len = 0;
  const disk_config_t* cfg = config();
  if (!cfg->dir || !cfg->blobs) return TPU_STATUS(TPU_NOT_FOUND, "blobs are off");
  tpu_disk_key_t key;
  blob_key(name, name_len, &key);
  uint8_t* data = NULL;
  size_t size = 0, len = 0;
  const uint8_t* payload = NULL;
  tpu_status_t* status = tpu_disk_entry_read(cfg->dir, &key, &data, &size, &payload, &len);
  if (!count_read(status, size, TPU_METRIC_TRACE_CACHE_HITS, TPU_METRIC_TRACE_CACHE_MISSES))
    return TPU_STATUS(TPU_NOT_FOUND, "no entry");
  memmove(data, payload, len); /* the caller owns one block: the payload at its start */
  *out_data = data;
  *out_len = len;
  return NULL;
}

void tpu_disk_blob_store(const char* name, size_t name_len, const void* data, size_t len) {
  const disk_config_t* cfg = config();
  if (!cfg->dir || !cfg->blobs || atomic_load(&g_blob_store_off)) return;
  tpu_disk_key_t key;
  blob_key(name, name_len, &key);
  store_entry(cfg, &key, data, len, &g_blob_store_off);
}
