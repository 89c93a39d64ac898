/* Compiling StableHLO text into loaded executables and running them. */
#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "background.h"
#include "codemaps.h"
#include "device.h"
#include "diskcache.h"
#include "donation.h"
#include "env.h"
#include "tracing.h"
#include "pjrt/pjrt.h"

struct tpu_executable {
  atomic_int refs;
  uint64_t id;
  /* NULL until compiled: a lazy executable (tpu_executable_create_lazy) compiles
   * at its first launch or tpu_executable_load. Written once, under load_mu, so
   * it compiles once; other executables compile meanwhile. */
  _Atomic(PJRT_LoadedExecutable*) loaded;
  pthread_mutex_t load_mu;
  int nouts;
  char* text; /* the StableHLO it came from (fuse.c inlines it) */
  size_t text_len;
  /* Some parameter may give its buffer to an output (builder.h's
   * tpu_b_param_alias). PJRT donates such buffers unless told not to, so every
   * launch lists the ones its caller did not offer. */
  bool aliases;
  bool standalone; /* a whole program: fused eager mode launches it, never records it */
  atomic_int maps; /* memory mappings its code added to the process (codemaps.h); 0 until compiled */
};

static atomic_uint_fast64_t g_next_exe_id = 1;
static atomic_uint_fast64_t g_loads; /* executables compiled or loaded from disk so far */

/* Serialized xla.CompileOptionsProto: compile_portable_executable = true (so
 * execute_device may pick any device), then executable_build_options {
 * num_replicas = 1, num_partitions = 1 }. Empty options abort the CPU plugin.
 * A client with one device sends the options without their leading portable
 * flag: each launch of a portable executable names its device, and the plugin
 * answers that by copying the executable's compile options and building a
 * device assignment per call (about 8 % of a small op's dispatch on the CPU
 * plugin). */
#define TPU_PORTABLE "\x20\x01"
#define TPU_PORTABLE_LEN (sizeof TPU_PORTABLE - 1)
#define TPU_OPTIONS_BASE TPU_PORTABLE "\x1a\x04\x20\x01\x28\x01"

/* env_option_overrides entries (field 7, map<string, OptionOverrideProto>, an
 * OptionOverrideProto being bool_field = 2 or int_field = 3). They change one
 * option each and keep the plugin's other defaults (a debug_options message
 * would reset them all). Sent to the CPU plugin only.
 *
 * xla_cpu_use_xnnpack = false: the plugin's XNNPACK dot path reuses the
 * right-hand operand it prepared on an earlier call when the new operand sits at
 * the address of a destroyed one: a fresh weight buffer that malloc places where
 * an old one was yields x @ W_old. Addresses depend on when buffers are freed, so
 * strict mode trained to different weights run to run (tests/test_determinism.py).
 * Eigen then does the dots. */
#define TPU_XNN_KEY "xla_cpu_use_xnnpack"
#define TPU_XNN_OFF "\x3a\x19\x0a\x13" TPU_XNN_KEY "\x12\x02\x10\x00"
/* The quick tier (below): LLVM at -O1; the tiny tier: -O0. */
#define TPU_LLVM_KEY "xla_backend_optimization_level"
#define TPU_LLVM_AT(level) "\x3a\x24\x0a\x1e" TPU_LLVM_KEY "\x12\x02\x18" level
#define TPU_LLVM_O1 TPU_LLVM_AT("\x01")
#define TPU_LLVM_O0 TPU_LLVM_AT("\x00")
static_assert(sizeof TPU_XNN_KEY - 1 == 0x13 && sizeof TPU_LLVM_KEY - 1 == 0x1e,
              "override entries encode their key lengths");

/* The overrides a compile can send, appended to TPU_OPTIONS_BASE in this order;
 * those of a tier are in kTierOverrides (below). One list: X(name, bytes, key),
 * where key is the option it sets (a plugin that refuses it names it). The enum,
 * the table and the size bound below all expand it. */
#define TPU_OVERRIDES(X)                           \
  X(TPU_OVERRIDE_XNN_OFF, TPU_XNN_OFF, TPU_XNN_KEY) \
  X(TPU_OVERRIDE_LLVM_O1, TPU_LLVM_O1, TPU_LLVM_KEY) \
  X(TPU_OVERRIDE_LLVM_O0, TPU_LLVM_O0, TPU_LLVM_KEY)
#define TPU_OVERRIDE_NAME(name, text, key) name,
typedef enum { TPU_OVERRIDES(TPU_OVERRIDE_NAME) TPU_OVERRIDE_COUNT } tpu_override_t;
#define TPU_OVERRIDE_BIT(o) (1u << (o))
#define TPU_OVERRIDE_ROW(name, text, key) [name] = {(text), sizeof(text) - 1, (key)},
static const struct {
  const char* bytes;
  size_t len;
  const char* key;
} kOverrides[] = {TPU_OVERRIDES(TPU_OVERRIDE_ROW)};
/* A compile with one of these is counted in compiles_quick. */
#define TPU_QUICK_OVERRIDES (TPU_OVERRIDE_BIT(TPU_OVERRIDE_LLVM_O1) | TPU_OVERRIDE_BIT(TPU_OVERRIDE_LLVM_O0))

/* The serialized options of one compile: the base and the overrides in `overrides`.
 * The bound concatenates the base and every override's bytes. */
#define TPU_OPTIONS_CAP 128
#define TPU_OVERRIDE_TEXT(name, text, key) text
static_assert(sizeof(TPU_OPTIONS_BASE TPU_OVERRIDES(TPU_OVERRIDE_TEXT)) <= TPU_OPTIONS_CAP,
              "the base and every override fit");
typedef struct {
  char bytes[TPU_OPTIONS_CAP];
  size_t len;
  unsigned overrides; /* TPU_OVERRIDE_BIT()s */
} tpu_options_t;

/* Compile tiers. XLA's CPU compile of one small eager op costs 50-90 ms here,
 * most of it the MLIR fusion emitters and LLVM, while the op then runs in
 * microseconds whatever the code quality. So a program whose every array holds
 * at most quick_max_elements elements is compiled with LLVM at -O1
 * (docs/compile-cache.md); a program with a loop only up to
 * TPU_QUICK_LOOP_MAX_ELEMENTS, since a loop runs its code many times: at 128x128
 * an SVD, eigh, QR or LU runs as fast at -O1 as with the defaults (within this
 * machine's noise) and compiles 10-25% sooner; at 256x256 the SVD runs 13% slower.
 * The classic fusion emitters (xla_cpu_use_fusion_emitters=false) were part of
 * this tier until a full fused-mode run found a fused forward+backward program
 * with tied weights that they compiled to wrong gradients (the same program is
 * right with the defaults or -O1 alone: test_module_semantics.py). Everything
 * else gets the CPU defaults; programs for other plugins the plain options
 * (TPU_TIER_OTHER_PLUGIN). A loop-free program of at most TPU_TINY_MAX_ELEMENTS
 * per array compiles with LLVM at -O0 (the tiny tier): a chain of 500 dependent
 * mul+sin ops of 16 to 256 elements ran at the same us/op as at -O1 (at 1024 it
 * ran 47% slower). The op tests' programs are mostly this small:
 * tests/test_ops_shape.py and test_ops_reduce.py (1018 programs) compiled in
 * 71.1 s with this tier against 91.6 s with -O1 (57.9 s with -O0 for every
 * program, which larger arrays pay for at run time). */
#define TPU_QUICK_MAX_ELEMENTS_DEFAULT 65536
#define TPU_QUICK_LOOP_MAX_ELEMENTS 16384
#define TPU_TINY_MAX_ELEMENTS 256

typedef enum {
  TPU_TIER_OTHER_PLUGIN,
  TPU_TIER_DEFAULT,
  TPU_TIER_QUICK,
  TPU_TIER_TINY,
  TPU_TIER_COUNT
} tpu_tier_t;
/* The overrides each tier sends; other plugins get the base alone. */
static const unsigned kTierOverrides[] = {
    [TPU_TIER_OTHER_PLUGIN] = 0,
    [TPU_TIER_DEFAULT] = TPU_OVERRIDE_BIT(TPU_OVERRIDE_XNN_OFF),
    [TPU_TIER_QUICK] = TPU_OVERRIDE_BIT(TPU_OVERRIDE_XNN_OFF) | TPU_OVERRIDE_BIT(TPU_OVERRIDE_LLVM_O1),
    [TPU_TIER_TINY] = TPU_OVERRIDE_BIT(TPU_OVERRIDE_XNN_OFF) | TPU_OVERRIDE_BIT(TPU_OVERRIDE_LLVM_O0),
};
static_assert(sizeof kTierOverrides / sizeof kTierOverrides[0] == TPU_TIER_COUNT, "one row per tier");
/* The tier, and whether the program loops, are the kind its code mappings are
 * estimated by (codemaps.h): a default-tier loop maps 30-90, a large loop-free
 * program about 3, so a mean over both would weigh neither. */
static_assert(2 * TPU_TIER_COUNT <= TPU_CODEMAPS_KINDS, "a code-mapping kind per tier and loop");

/* The overrides whose option a plugin refused (it has no such option): later
 * compiles leave them out. */
static atomic_uint g_refused;

/* TORCHTPU_QUICK_COMPILE_MAX_ELEMENTS, read once (0 turns the quick tiers off). */
static int64_t quick_max_elements(void) {
  static atomic_llong cached = -1;
  long long v = atomic_load_explicit(&cached, memory_order_relaxed);
  if (v >= 0) return v;
  v = tpu_env_int("TORCHTPU_QUICK_COMPILE_MAX_ELEMENTS", 0, INT64_MAX, TPU_QUICK_MAX_ELEMENTS_DEFAULT);
  atomic_store_explicit(&cached, v, memory_order_relaxed);
  return v;
}

/* Whether a stablehlo.while is in the module text. */
static bool program_has_loop(const char* text, size_t len) {
  static const char kWhile[] = "stablehlo.while";
  const size_t nw = sizeof kWhile - 1;
  for (size_t i = 0; i + nw <= len; i++)
    if (text[i] == 's' && memcmp(text + i, kWhile, nw) == 0) return true;
  return false;
}

/* The most elements of any tensor<...> type in the module text, counted up to
 * `limit` (limit + 1 means more, or a dynamic dim). */
static int64_t program_max_elements(const char* text, size_t len, int64_t limit) {
  static const char kTensor[] = "tensor<";
  const size_t nt = sizeof kTensor - 1;
  int64_t most = 0;
  for (size_t i = 0; i < len && most <= limit; i++) {
    if (text[i] != 't' || len - i < nt || memcmp(text + i, kTensor, nt) != 0) continue;
    int64_t elems = 1;
    size_t j = i + nt;
    for (;;) {
      if (j < len && text[j] == '?') return limit + 1;
      if (j >= len || text[j] < '0' || text[j] > '9') break;
      int64_t dim = 0;
      while (j < len && text[j] >= '0' && text[j] <= '9' && dim <= limit) dim = dim * 10 + (text[j++] - '0');
      if (dim > limit || (dim && elems > limit / dim)) return limit + 1;
      elems *= dim;
      if (j >= len || text[j] != 'x') break; /* a malformed type: the compile reports it */
      j++;
    }
    if (elems > most) most = elems;
    i = j;
  }
  return most;
}

/* The program's tier (decided once per program; the options follow from it) and
 * whether it has a loop (CPU plugin only: the other plugins' code is not mapped
 * per kernel). */
static tpu_tier_t program_tier(const char* mlir, size_t len, bool* out_loop) {
  *out_loop = false;
  if (!tpu_runtime_platform_is_cpu()) return TPU_TIER_OTHER_PLUGIN;
  *out_loop = program_has_loop(mlir, len);
  int64_t limit = quick_max_elements();
  if (*out_loop && limit > TPU_QUICK_LOOP_MAX_ELEMENTS) limit = TPU_QUICK_LOOP_MAX_ELEMENTS;
  if (limit <= 0) return TPU_TIER_DEFAULT;
  int64_t most = program_max_elements(mlir, len, limit);
  if (most > limit) return TPU_TIER_DEFAULT;
  return !*out_loop && most <= TPU_TINY_MAX_ELEMENTS ? TPU_TIER_TINY : TPU_TIER_QUICK;
}

/* Whether executables are compiled for the client's one device (see
 * TPU_OPTIONS_BASE); fixed once the client exists. */
static bool single_device(void) { return tpu_runtime_device_count() == 1; }

/* The options for a program of that tier on this client, less the overrides
 * the plugin refused. */
static void compile_options(tpu_tier_t tier, tpu_options_t* out) {
  out->overrides = kTierOverrides[tier] & ~atomic_load_explicit(&g_refused, memory_order_relaxed);
  const size_t skip = single_device() ? TPU_PORTABLE_LEN : 0;
  out->len = sizeof TPU_OPTIONS_BASE - 1 - skip;
  memcpy(out->bytes, TPU_OPTIONS_BASE + skip, out->len);
  for (int o = 0; o < TPU_OVERRIDE_COUNT; o++) {
    if (!(out->overrides & TPU_OVERRIDE_BIT(o))) continue;
    memcpy(out->bytes + out->len, kOverrides[o].bytes, kOverrides[o].len);
    out->len += kOverrides[o].len;
  }
}

/* After a failed compile: whether the plugin refused an option one of the sent
 * overrides sets. Then every override of an option the message names (O1 and O0
 * share one) is left out from now on, and the compile is worth another try. */
static bool drop_refused_override(unsigned sent, const char* msg) {
  unsigned named = 0;
  for (int o = 0; msg && o < TPU_OVERRIDE_COUNT; o++)
    if (strstr(msg, kOverrides[o].key)) named |= TPU_OVERRIDE_BIT(o);
  if (!(named & sent)) return false;
  atomic_fetch_or_explicit(&g_refused, named, memory_order_relaxed);
  return true;
}

/* Compiles with *options, which compile_options() made for the tier, asking
 * again without an override the plugin refuses. *options is then those of the
 * successful compile (the disk cache keys on them). */
static tpu_status_t* compile_program(const PJRT_Api* api, PJRT_Program* program, tpu_tier_t tier,
                                     tpu_options_t* options, PJRT_LoadedExecutable** out_loaded) {
  *out_loaded = NULL;
  /* Each refusal leaves out at least one override. */
  for (int attempt = 0;; attempt++) {
    TPU_PJRT_ARGS(PJRT_Client_Compile_Args, args, executable);
    args.client = tpu_client_pjrt();
    args.program = program;
    args.compile_options = options->bytes;
    args.compile_options_size = options->len;
    tpu_status_t* status = TPU_PJRT_CALL(api, Client_Compile, &args);
    if (!status) {
      *out_loaded = args.executable;
      return NULL;
    }
    if (attempt == TPU_OVERRIDE_COUNT || !drop_refused_override(options->overrides, tpu_status_message(status)))
      return status;
    tpu_status_free(status);
    compile_options(tier, options);
  }
}

/* Arrays up to this size live on the stack: most ops have a handful. */
#define TPU_SMALL_ARITY 16

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void loaded_destroy(const PJRT_Api* api, PJRT_LoadedExecutable* loaded) {
  if (!api || !loaded) return;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, args, executable);
  args.executable = loaded;
  tpu_status_free(TPU_PJRT_CALL(api, LoadedExecutable_Destroy, &args));
}

static tpu_status_t* num_outputs(const PJRT_Api* api, PJRT_LoadedExecutable* loaded,
                                 size_t* out_n) {
  *out_n = 0;
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, get, executable);
  get.loaded_executable = loaded;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, LoadedExecutable_GetExecutable, &get));
  TPU_PJRT_ARGS(PJRT_Executable_NumOutputs_Args, num, num_outputs);
  num.executable = get.executable;
  tpu_status_t* status = TPU_PJRT_CALL(api, Executable_NumOutputs, &num);
  TPU_PJRT_ARGS(PJRT_Executable_Destroy_Args, destroy, executable);
  destroy.executable = get.executable;
  tpu_status_free(TPU_PJRT_CALL(api, Executable_Destroy, &destroy));
  if (!status) *out_n = num.num_outputs;
  return status;
}

/* The disk tier first: a hit loads the serialized executable instead of
 * compiling; a real compile is then stored. The lookup keys on the options
 * the compile tries first; a store keys on those it compiled with (they differ
 * only in the one call where a CPU plugin refuses an override). */
static tpu_status_t* load_or_compile(const PJRT_Api* api, const char* mlir, size_t len, tpu_tier_t tier,
                                     PJRT_LoadedExecutable** out_loaded) {
  *out_loaded = NULL;
  bool disk = tpu_disk_cache_enabled();
  tpu_disk_key_t key;
  tpu_options_t options;
  compile_options(tier, &options);
  if (disk) {
    tpu_disk_cache_key(mlir, len, options.bytes, options.len, &key);
    tpu_trace_range_t lookup = tpu_trace_begin(TPU_TRACE_DISK_LOOKUP, NULL);
    *out_loaded = tpu_disk_cache_load(api, &key);
    tpu_trace_end(lookup);
    if (*out_loaded) {
      tpu_trace_mark(TPU_TRACE_DISK_HIT, NULL);
      return NULL;
    }
  }
  TPU_PJRT_ARGS(PJRT_Program, program, format_size);
  program.code = (char*)mlir; /* the plugin only reads it */
  program.code_size = len;
  program.format = "mlir";
  program.format_size = 4;
  const unsigned looked_up = options.overrides;
  int64_t t0 = now_ns();
  tpu_trace_range_t range = tpu_trace_begin(TPU_TRACE_COMPILE, NULL);
  tpu_status_t* status = compile_program(api, &program, tier, &options, out_loaded);
  tpu_trace_end(range);
  tpu_metric_add(TPU_METRIC_COMPILES, 1);
  tpu_metric_add(TPU_METRIC_COMPILE_NS, now_ns() - t0);
  TPU_RETURN_IF_ERROR(status);
  if (options.overrides & TPU_QUICK_OVERRIDES) tpu_metric_add(TPU_METRIC_QUICK_COMPILES, 1);
  if (disk) {
    if (options.overrides != looked_up) tpu_disk_cache_key(mlir, len, options.bytes, options.len, &key);
    tpu_disk_cache_store(api, &key, *out_loaded);
  }
  return NULL;
}

/* Compiles (or loads from the disk tier) a program that must have `nouts`
 * outputs; out_maps: the memory mappings its code added. */
static tpu_status_t* compile_text(const PJRT_Api* api, const char* mlir, size_t len, int nouts,
                                  PJRT_LoadedExecutable** out_loaded, int* out_maps) {
  *out_loaded = NULL;
  *out_maps = 0;
  PJRT_LoadedExecutable* loaded = NULL;
  bool loop = false;
  tpu_tier_t tier = program_tier(mlir, len, &loop);
  tpu_codemaps_probe_t probe;
  tpu_codemaps_begin((int)tier + (loop ? TPU_TIER_COUNT : 0), &probe);
  tpu_status_t* status = load_or_compile(api, mlir, len, tier, &loaded);
  if (status) return tpu_status_annotate(status, "compile");
  int maps = tpu_codemaps_end(&probe);
  size_t n = 0;
  status = num_outputs(api, loaded, &n);
  if (!status && n != (size_t)nouts) {
    status = TPU_STATUS(TPU_INTERNAL, "compiled program has %zu outputs, expected %d", n, nouts);
  }
  if (status) {
    loaded_destroy(api, loaded);
    return status;
  }
  *out_loaded = loaded;
  *out_maps = maps;
  return NULL;
}

tpu_status_t* tpu_executable_create_lazy(const char* mlir, size_t len, int nouts, tpu_executable_t** out_exe) {
  if (!out_exe) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_exe is NULL");
  *out_exe = NULL;
  if (!mlir || len == 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "empty program");
  if (nouts < 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "negative output count %d", nouts);
  tpu_executable_t* exe = calloc(1, sizeof *exe);
  char* text = malloc(len + 1);
  if (!exe || !text) {
    free(exe);
    free(text);
    return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
  }
  memcpy(text, mlir, len);
  text[len] = '\0';
  atomic_init(&exe->refs, 1);
  atomic_init(&exe->loaded, NULL);
  pthread_mutex_init(&exe->load_mu, NULL);
  atomic_init(&exe->maps, 0);
  exe->id = atomic_fetch_add(&g_next_exe_id, 1);
  exe->nouts = nouts;
  exe->text = text;
  exe->text_len = len;
  exe->aliases = strstr(text, TPU_B_ALIAS_ATTR) != NULL;
  *out_exe = exe;
  return NULL;
}

/* The compiled form, compiling it first if the executable is lazy. */
static tpu_status_t* executable_loaded(tpu_executable_t* exe, PJRT_LoadedExecutable** out_loaded) {
  *out_loaded = atomic_load_explicit(&exe->loaded, memory_order_acquire);
  if (*out_loaded) return NULL;
  const PJRT_Api* api = tpu_client_api();
  if (!api) return TPU_STATUS(TPU_FAILED_PRECONDITION, "the torchtpu runtime is not initialised");
  pthread_mutex_lock(&exe->load_mu);
  PJRT_LoadedExecutable* loaded = atomic_load_explicit(&exe->loaded, memory_order_relaxed);
  tpu_status_t* status = NULL;
  if (!loaded) {
    int maps = 0;
    status = compile_text(api, exe->text, exe->text_len, exe->nouts, &loaded, &maps);
    if (!status) {
      atomic_store_explicit(&exe->maps, maps, memory_order_relaxed);
      atomic_store_explicit(&exe->loaded, loaded, memory_order_release);
      atomic_fetch_add_explicit(&g_loads, 1, memory_order_release);
    }
  }
  pthread_mutex_unlock(&exe->load_mu);
  *out_loaded = loaded;
  return status;
}

tpu_status_t* tpu_executable_load(tpu_executable_t* exe) {
  if (!exe) return TPU_STATUS(TPU_INVALID_ARGUMENT, "executable is NULL");
  PJRT_LoadedExecutable* loaded = NULL;
  return executable_loaded(exe, &loaded);
}

static void load_quietly(void* exe) { tpu_status_free(tpu_executable_load(exe)); }
static void release(void* exe) { tpu_executable_destroy(exe); }

tpu_status_t* tpu_executable_load_async(tpu_executable_t* exe) {
  if (!exe) return TPU_STATUS(TPU_INVALID_ARGUMENT, "executable is NULL");
  tpu_status_t* st = tpu_background_submit(load_quietly, release, tpu_executable_retain(exe));
  if (st) tpu_executable_destroy(exe); /* the job's reference */
  return st;
}

tpu_status_t* tpu_executable_compile(const char* mlir, size_t len, int nouts,
                                     tpu_executable_t** out_exe) {
  TPU_RETURN_IF_ERROR(tpu_executable_create_lazy(mlir, len, nouts, out_exe));
  tpu_status_t* status = tpu_executable_load(*out_exe);
  if (status) {
    tpu_executable_destroy(*out_exe);
    *out_exe = NULL;
  }
  return status;
}

tpu_executable_t* tpu_executable_retain(tpu_executable_t* exe) {
  if (exe) atomic_fetch_add_explicit(&exe->refs, 1, memory_order_relaxed);
  return exe;
}

void tpu_executable_destroy(tpu_executable_t* exe) {
  if (!exe || atomic_fetch_sub_explicit(&exe->refs, 1, memory_order_acq_rel) != 1) return;
  loaded_destroy(tpu_client_api(), atomic_load_explicit(&exe->loaded, memory_order_acquire));
  pthread_mutex_destroy(&exe->load_mu);
  free(exe->text);
  free(exe);
}

uint64_t tpu_executable_id(const tpu_executable_t* exe) { return exe->id; }

uint64_t tpu_executable_loads(void) { return atomic_load_explicit(&g_loads, memory_order_acquire); }

void tpu_executable_set_standalone(tpu_executable_t* exe) { exe->standalone = true; }

bool tpu_executable_standalone(const tpu_executable_t* exe) { return exe->standalone; }

int tpu_executable_maps(const tpu_executable_t* exe) {
  return exe ? atomic_load_explicit(&exe->maps, memory_order_relaxed) : 0;
}

const char* tpu_executable_text(const tpu_executable_t* exe, size_t* out_len) {
  *out_len = exe->text_len;
  return exe->text;
}

static tpu_status_t* validate_execute(const tpu_executable_t* exe, int device, int nargs,
                                      tpu_buffer_t* const* args, int nouts,
                                      const tpu_aval_t* out_avals) {
  if (!exe) return TPU_STATUS(TPU_INVALID_ARGUMENT, "executable is NULL");
  if (!tpu_client_device(device)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "device %d out of range [0, %d)", device,
                      tpu_runtime_device_count());
  }
  if (nargs < 0 || (nargs > 0 && !args)) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "bad argument list (%d arguments)", nargs);
  }
  for (int i = 0; i < nargs; i++) {
    if (!args[i]) return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d is NULL", i);
    if (tpu_buffer_device(args[i]) != device) {
      return TPU_STATUS(TPU_INVALID_ARGUMENT, "argument %d is on device %d, executing on %d", i,
                        tpu_buffer_device(args[i]), device);
    }
  }
  if (nouts != exe->nouts) {
    return TPU_STATUS(TPU_INVALID_ARGUMENT, "executable has %d outputs, %d requested", exe->nouts,
                      nouts);
  }
  if (nouts > 0 && !out_avals) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_avals is NULL");
  return NULL;
}

/* Wraps the PJRT outputs; on failure every output not yet wrapped is destroyed. */
static tpu_status_t* wrap_outputs(const PJRT_Api* api, int device, int nouts,
                                  PJRT_Buffer** outs, const tpu_aval_t* out_avals,
                                  const char* producer, tpu_buffer_t** out_buffers) {
  tpu_status_t* status = NULL;
  for (int i = 0; i < nouts; i++) {
    if (status) {
      tpu_pjrt_buffer_destroy(api, outs[i]);
      continue;
    }
    status = tpu_buffer_wrap(outs[i], device, &out_avals[i], producer, &out_buffers[i]);
  }
  return status;
}

static void release_all(int n, tpu_buffer_t** bufs) {
  for (int i = 0; i < n; i++) {
    tpu_buffer_release(bufs[i]);
    bufs[i] = NULL;
  }
}

/* PJRT's non-donatable list: every argument not offered in `donate` (NULL:
 * none), when the executable aliases any. *out_list is owned; NULL when empty. */
static tpu_status_t* keep_list(const tpu_executable_t* exe, int nargs, const bool* donate, int64_t** out_list,
                               size_t* out_n) {
  *out_list = NULL;
  *out_n = 0;
  if (!exe->aliases || nargs == 0) return NULL;
  int64_t* keep = malloc(sizeof(int64_t) * (size_t)nargs);
  if (!keep) return TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
  for (int i = 0; i < nargs; i++)
    if (!donate || !donate[i]) keep[(*out_n)++] = i;
  *out_list = keep;
  return NULL;
}

/* The plugin owns what was donated now (even if the run fails later); their
 * handles go once this execution, whose output is `fed`, finished. Before the
 * outputs are counted, so that a donation never shows as two buffers' bytes. */
static void note_donations(const tpu_executable_t* exe, int nargs, tpu_buffer_t* const* args, const bool* donate,
                           PJRT_Buffer* fed) {
  bool any = false;
  for (int i = 0; exe->aliases && donate && i < nargs; i++) any |= donate[i];
  if (!any) return;
  tpu_donation_t* donation = tpu_donation_create(fed);
  tpu_buffer_note_donations(nargs, args, donate, donation);
  tpu_donation_release(donation);
}

tpu_status_t* tpu_executable_launch(tpu_executable_t* exe, int device, int nargs, tpu_buffer_t* const* args,
                                    int nouts, const tpu_aval_t* out_avals, const char* producer,
                                    tpu_buffer_t** out_buffers) {
  return tpu_executable_launch_donating(exe, device, nargs, args, NULL, nouts, out_avals, producer, out_buffers);
}

tpu_status_t* tpu_executable_launch_donating(tpu_executable_t* exe, int device, int nargs,
                                             tpu_buffer_t* const* args, const bool* donate, int nouts,
                                             const tpu_aval_t* out_avals, const char* producer,
                                             tpu_buffer_t** out_buffers) {
  if (!out_buffers && nouts > 0) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_buffers is NULL");
  for (int i = 0; i < nouts; i++) out_buffers[i] = NULL;
  const PJRT_Api* api = tpu_client_api();
  if (!api) return TPU_STATUS(TPU_FAILED_PRECONDITION, "the torchtpu runtime is not initialised");
  TPU_RETURN_IF_ERROR(validate_execute(exe, device, nargs, args, nouts, out_avals));
  if (!producer) producer = "";

  PJRT_Buffer* arg_small[TPU_SMALL_ARITY];
  PJRT_Buffer* out_small[TPU_SMALL_ARITY];
  PJRT_Buffer** arg_list =
      nargs <= TPU_SMALL_ARITY ? arg_small : calloc((size_t)nargs, sizeof(PJRT_Buffer*));
  PJRT_Buffer** out_list =
      nouts <= TPU_SMALL_ARITY ? out_small : calloc((size_t)nouts, sizeof(PJRT_Buffer*));
  int64_t* keep = NULL;
  size_t nkeep = 0;
  tpu_status_t* status = keep_list(exe, nargs, donate, &keep, &nkeep);
  if (status) goto done;
  if (!arg_list || !out_list) {
    status = TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
    goto done;
  }
  for (int i = 0; i < nouts; i++) out_list[i] = NULL;
  /* A placeholder argument runs its fused program here (fuse.c). */
  for (int i = 0; i < nargs && !status; i++) status = tpu_buffer_materialize(args[i], &arg_list[i]);
  if (status) goto done;

  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options, num_custom_options);
  options.non_donatable_input_indices = keep;
  options.num_non_donatable_input_indices = nkeep;
  PJRT_Buffer* const* arg_lists[1] = {arg_list};
  PJRT_Buffer** const out_lists[1] = {out_list};
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, call, execute_device);
  status = executable_loaded(exe, &call.executable);
  if (status) {
    status = tpu_status_annotate(status, "%s", producer);
    goto done;
  }
  call.options = &options;
  call.argument_lists = arg_lists;
  call.num_devices = 1;
  call.num_args = (size_t)nargs;
  call.output_lists = out_lists;
  call.execute_device = single_device() ? NULL : tpu_client_device(device);
  status = TPU_PJRT_CALL(api, LoadedExecutable_Execute, &call);
  tpu_metric_add(TPU_METRIC_EXECUTIONS, 1);
  if (status) {
    /* Nothing is returned on failure; destroy anything a plugin left anyway. */
    for (int i = 0; i < nouts; i++) tpu_pjrt_buffer_destroy(api, out_list[i]);
    if (producer[0]) status = tpu_status_annotate(status, "%s", producer);
    goto done;
  }
  note_donations(exe, nargs, args, donate, nouts > 0 ? out_list[0] : NULL);
  status = wrap_outputs(api, device, nouts, out_list, out_avals, producer, out_buffers);
  if (status) {
    release_all(nouts, out_buffers);
    goto done;
  }

  if (tpu_runtime_eager_mode() == TPU_EAGER_DEBUG) {
    /* Debug mode: the error surfaces on the op that caused it. */
    tpu_metric_add(TPU_METRIC_SYNCS, 1);
    for (int i = 0; i < nouts && !status; i++) {
      bool ready = false;
      status = tpu_buffer_check(out_buffers[i], true, &ready);
    }
    if (status) release_all(nouts, out_buffers);
  } else if (nouts > 0) {
    /* All outputs of one execution become ready together: tracking one is enough. */
    tpu_runtime_track_inflight(out_buffers[0], nargs, args);
  }

done:
  free(keep);
  if (arg_list != arg_small) free(arg_list);
  if (out_list != out_small) free(out_list);
  return status;
}
