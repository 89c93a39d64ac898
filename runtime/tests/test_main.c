/* The C test runner: registry, checks, and main.
 *
 * Usage: rt_tests [substring]   runs the tests whose name contains substring.
 * The PJRT plugin comes from TORCHTPU_PJRT_PLUGIN; the runtime is initialised
 * once (one CPU device) for all tests and shut down at the end so sanitizer
 * runs see every buffer released. */
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test.h"
#include "torchtpu/runtime.h"

#define TPU_MAX_TESTS 4096

typedef struct test_entry {
  const char* name;
  const char* file;
  tpu_test_fn_t fn;
  int seq;
} test_entry_t;

static test_entry_t g_tests[TPU_MAX_TESTS];
static int g_num_tests;
static int g_current_failures;

void tpu_test_register(const char* name, const char* file, tpu_test_fn_t fn) {
  if (g_num_tests == TPU_MAX_TESTS) {
    fprintf(stderr, "too many tests (raise TPU_MAX_TESTS)\n");
    exit(2);
  }
  g_tests[g_num_tests] = (test_entry_t){name, file, fn, g_num_tests};
  g_num_tests++;
}

void tpu_test_fail(const char* file, int line, const char* fmt, ...) {
  g_current_failures++;
  fprintf(stdout, "    %s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stdout, fmt, ap);
  va_end(ap);
  fputc('\n', stdout);
  fflush(stdout);
}

bool tpu_test_check_ok(tpu_status_t* status, const char* expr, const char* file, int line) {
  if (!status) return true;
  tpu_test_fail(file, line, "%s failed: %s: %s (%s:%d)", expr,
                tpu_status_code_name(tpu_status_code(status)), tpu_status_message(status),
                tpu_status_file(status), tpu_status_line(status));
  tpu_status_free(status);
  return false;
}

bool tpu_test_check_code(tpu_status_t* status, tpu_status_code_t code, const char* expr,
                         const char* file, int line) {
  tpu_status_code_t got = tpu_status_code(status);
  bool ok = got == code;
  if (!ok) {
    tpu_test_fail(file, line, "%s: expected %s, got %s: %s", expr, tpu_status_code_name(code),
                  tpu_status_code_name(got), tpu_status_message(status));
  }
  tpu_status_free(status);
  return ok;
}

/* Constructors run in link order, which differs between toolchains: sort. */
static int entry_cmp(const void* a, const void* b) {
  const test_entry_t* x = a;
  const test_entry_t* y = b;
  int c = strcmp(x->file, y->file);
  return c ? c : x->seq - y->seq;
}

/* The disk compile cache goes to a fresh directory of this run, removed at the
 * end, unless TORCHTPU_CACHE_DIR names one: tests never fill ~/.cache, and
 * every compile of the run goes through the tier. */
static char g_cache_dir[64];

static void cache_dir_setup(void) {
  const char* set = getenv("TORCHTPU_CACHE_DIR");
  if (set && *set) return;
  snprintf(g_cache_dir, sizeof g_cache_dir, "/tmp/torchtpu-ctest-XXXXXX");
  if (mkdtemp(g_cache_dir)) {
    setenv("TORCHTPU_CACHE_DIR", g_cache_dir, 1);
  } else {
    g_cache_dir[0] = '\0';
  }
}

static void cache_dir_remove(void) {
  if (!g_cache_dir[0]) return;
  tpu_status_free(tpu_disk_cache_clear()); /* the entries; then the empty fan-out dirs */
  DIR* d = opendir(g_cache_dir);
  char path[sizeof g_cache_dir + 260];
  for (struct dirent* e; d && (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(path, sizeof path, "%s/%s", g_cache_dir, e->d_name);
    rmdir(path);
  }
  if (d) closedir(d);
  rmdir(g_cache_dir);
}

int main(int argc, char** argv) {
  const char* filter = argc > 1 ? argv[1] : NULL;
  const char* plugin = getenv("TORCHTPU_PJRT_PLUGIN");
  if (!plugin || !*plugin) {
    fprintf(stderr, "TORCHTPU_PJRT_PLUGIN is not set (path to a PJRT plugin .so)\n");
    printf("0 passed, 1 failed\n");
    return 1;
  }
  cache_dir_setup();
  tpu_status_t* status = tpu_runtime_init(plugin, 1);
  if (status) {
    fprintf(stderr, "tpu_runtime_init(%s): %s: %s\n", plugin,
            tpu_status_code_name(tpu_status_code(status)), tpu_status_message(status));
    tpu_status_free(status);
    printf("0 passed, 1 failed\n");
    return 1;
  }

  qsort(g_tests, (size_t)g_num_tests, sizeof g_tests[0], entry_cmp);
  int passed = 0, failed = 0;
  for (int i = 0; i < g_num_tests; i++) {
    if (filter && !strstr(g_tests[i].name, filter)) continue;
    printf("[ RUN  ] %s\n", g_tests[i].name);
    fflush(stdout);
    g_current_failures = 0;
    g_tests[i].fn();
    if (g_current_failures) {
      printf("[ FAIL ] %s\n", g_tests[i].name);
      failed++;
    } else {
      printf("[  OK  ] %s\n", g_tests[i].name);
      passed++;
    }
    fflush(stdout);
  }

  tpu_runtime_shutdown();
  cache_dir_remove();
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
