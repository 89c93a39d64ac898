/* Tests of the PJRT layer against the live plugin: loading, our struct sizes,
 * buffers, compile / execute, errors, and the status/dtype/metrics/rng basics. */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kit.h"
#include "pjrt/pjrt.h"
#include "test.h"
#include "torchtpu/dtype.h"
#include "torchtpu/runtime.h"

static const char kAddModule[] =
    "module {\n"
    "  func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = \"stablehlo.add\"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>\n"
    "    \"func.return\"(%0) : (tensor<4xf32>) -> ()\n"
    "  }\n"
    "}\n";

/* Two outputs, one of them bool: exercises PRED and multi-output lists. */
static const char kCompareModule[] =
    "module {\n"
    "  func.func @main(%a: tensor<3xi32>, %b: tensor<3xi32>) -> (tensor<3xi1>, tensor<3xi32>) {\n"
    "    %0 = \"stablehlo.compare\"(%a, %b) {comparison_direction = "
    "#stablehlo<comparison_direction LT>} : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi1>\n"
    "    %1 = \"stablehlo.maximum\"(%a, %b) : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>\n"
    "    \"func.return\"(%0, %1) : (tensor<3xi1>, tensor<3xi32>) -> ()\n"
    "  }\n"
    "}\n";

static tpu_aval_t aval1(tpu_dtype_t dtype, int64_t n) {
  tpu_aval_t a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.rank = 1;
  a.dims[0] = n;
  return a;
}

static tpu_status_t* compile(const char* text, int nouts, tpu_executable_t** out_exe) {
  return tpu_executable_compile(text, strlen(text), nouts, out_exe);
}

/* ---- basics without the device ---- */

TEST(status_make_annotate_free) {
  tpu_status_t* s = TPU_STATUS(TPU_NOT_FOUND, "no %s here", "thing");
  EXPECT_EQ_INT(tpu_status_code(s), TPU_NOT_FOUND);
  EXPECT_STREQ(tpu_status_message(s), "no thing here");
  EXPECT(strstr(tpu_status_file(s), "test_pjrt.c") != NULL);
  EXPECT(tpu_status_line(s) > 0);
  s = tpu_status_annotate(s, "op %d", 7);
  EXPECT_STREQ(tpu_status_message(s), "op 7: no thing here");
  EXPECT_EQ_INT(tpu_status_code(s), TPU_NOT_FOUND);
  tpu_status_free(s);
  tpu_status_free(NULL);
  EXPECT(tpu_status_annotate(NULL, "x") == NULL);
  EXPECT_EQ_INT(tpu_status_code(NULL), TPU_OK);
  EXPECT_STREQ(tpu_status_code_name(TPU_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(tpu_status_code_name(TPU_UNAUTHENTICATED), "UNAUTHENTICATED");
  EXPECT_STREQ(tpu_status_code_name(TPU_LINALG_ERROR), "LINALG_ERROR");
  EXPECT_STREQ(tpu_status_code_name((tpu_status_code_t)(TPU_LINALG_ERROR + 1)), "UNKNOWN_CODE");
  /* A message longer than the formatting fast path. */
  char big[1000];
  memset(big, 'x', sizeof big - 1);
  big[sizeof big - 1] = '\0';
  s = TPU_STATUS(TPU_INTERNAL, "%s", big);
  EXPECT_EQ_INT(strlen(tpu_status_message(s)), sizeof big - 1);
  tpu_status_free(s);
}

TEST(dtype_promotion_matches_pytorch) {
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_U8, TPU_I8), TPU_I16);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_BF16, TPU_F16), TPU_F32);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_I64, TPU_F16), TPU_F16);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_BOOL, TPU_U8), TPU_U8);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_BOOL, TPU_BOOL), TPU_BOOL);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_C64, TPU_F64), TPU_C128);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_C64, TPU_F32), TPU_C64);
  EXPECT_EQ_INT(tpu_dtype_promote(TPU_I32, TPU_I16), TPU_I32);
  for (int a = 0; a < TPU_DTYPE_COUNT; a++) {
    EXPECT_EQ_INT(tpu_dtype_promote((tpu_dtype_t)a, (tpu_dtype_t)a), a);
    EXPECT_EQ_INT(tpu_dtype_promote(TPU_BOOL, (tpu_dtype_t)a), a);
    for (int b = 0; b < TPU_DTYPE_COUNT; b++) {
      EXPECT_EQ_INT(tpu_dtype_promote((tpu_dtype_t)a, (tpu_dtype_t)b),
                    tpu_dtype_promote((tpu_dtype_t)b, (tpu_dtype_t)a));
    }
  }
}

TEST(dtype_can_cast_and_properties) {
  EXPECT(!tpu_dtype_can_cast(TPU_F32, TPU_I64));
  EXPECT(!tpu_dtype_can_cast(TPU_C64, TPU_F64));
  EXPECT(!tpu_dtype_can_cast(TPU_I32, TPU_BOOL));
  EXPECT(!tpu_dtype_can_cast(TPU_F16, TPU_BOOL));
  EXPECT(tpu_dtype_can_cast(TPU_BOOL, TPU_BOOL));
  EXPECT(tpu_dtype_can_cast(TPU_I64, TPU_F16));
  EXPECT(tpu_dtype_can_cast(TPU_F64, TPU_C64));
  EXPECT(tpu_dtype_can_cast(TPU_I64, TPU_U8));
  EXPECT_EQ_INT(tpu_dtype_size(TPU_BOOL), 1);
  EXPECT_EQ_INT(tpu_dtype_size(TPU_BF16), 2);
  EXPECT_EQ_INT(tpu_dtype_size(TPU_C128), 16);
  EXPECT_STREQ(tpu_dtype_mlir(TPU_BOOL), "i1");
  EXPECT_STREQ(tpu_dtype_mlir(TPU_U8), "ui8");
  EXPECT_STREQ(tpu_dtype_mlir(TPU_C64), "complex<f32>");
  EXPECT_STREQ(tpu_dtype_name(TPU_BF16), "bfloat16");
  EXPECT(tpu_dtype_is_float(TPU_BF16) && !tpu_dtype_is_float(TPU_C64));
  EXPECT(tpu_dtype_is_int(TPU_U8) && !tpu_dtype_is_int(TPU_BOOL));
  EXPECT(!tpu_dtype_is_signed(TPU_U8) && tpu_dtype_is_signed(TPU_I8));
  EXPECT(!tpu_dtype_valid(-1) && !tpu_dtype_valid(TPU_DTYPE_COUNT) && tpu_dtype_valid(TPU_BOOL));
  EXPECT_EQ_INT(tpu_dtype_to_float(TPU_I64), TPU_F32);
  EXPECT_EQ_INT(tpu_dtype_to_float(TPU_F64), TPU_F64);
  EXPECT_EQ_INT(tpu_dtype_opmath(TPU_BF16), TPU_F32);
  EXPECT_EQ_INT(tpu_dtype_opmath(TPU_F64), TPU_F64);
  for (int t = 0; t < TPU_DTYPE_COUNT; t++) {
    EXPECT(tpu_dtype_to_pjrt((tpu_dtype_t)t) != PJRT_Buffer_Type_INVALID);
  }
  EXPECT_EQ_INT(tpu_dtype_to_pjrt(TPU_BOOL), PJRT_Buffer_Type_PRED);
  EXPECT_EQ_INT(tpu_dtype_to_pjrt(TPU_DTYPE_COUNT), PJRT_Buffer_Type_INVALID);
}

TEST(metrics_names_and_reset) {
  EXPECT_STREQ(tpu_metric_name(TPU_METRIC_COMPILE_NS), "compile_ns");
  EXPECT_STREQ(tpu_metric_name(TPU_METRIC_OPS_EXECUTED), "ops_executed");
  EXPECT_STREQ(tpu_metric_name(TPU_METRIC_COUNT), "unknown");
  int64_t live = tpu_metric_get(TPU_METRIC_LIVE_BUFFERS);
  tpu_metric_add(TPU_METRIC_FALLBACKS, 3);
  EXPECT(tpu_metric_get(TPU_METRIC_FALLBACKS) >= 3);
  tpu_metrics_reset();
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_FALLBACKS), 0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BUFFERS), live); /* gauges survive */
}

TEST(rng_state) {
  tpu_generator_t* d = tpu_generator_default(0);
  ASSERT(d != NULL);
  EXPECT(tpu_generator_default(0) == d);
  EXPECT(tpu_generator_default(-1) == NULL);
  uint64_t seed0, off0;
  tpu_generator_get_state(d, &seed0, &off0);
  tpu_generator_set_seed(d, 42);
  EXPECT_EQ_INT(tpu_generator_seed(d), 42);
  uint64_t seed, first;
  tpu_generator_next(d, 10, &seed, &first);
  EXPECT_EQ_INT(seed, 42);
  EXPECT_EQ_INT(first, 0);
  tpu_generator_next(d, 5, &seed, &first);
  EXPECT_EQ_INT(first, 10);
  uint64_t off;
  tpu_generator_get_state(d, &seed, &off);
  EXPECT_EQ_INT(off, 15);
  /* A generator of its own never moves the default one. */
  tpu_generator_t* g = NULL;
  ASSERT_OK(tpu_generator_create(7, &g));
  tpu_generator_set_state(g, 7, 100);
  tpu_generator_next(g, 1, &seed, &first);
  EXPECT_EQ_INT(first, 100);
  tpu_generator_get_state(d, &seed, &off);
  EXPECT_EQ_INT(off, 15);
  tpu_generator_destroy(g);
  tpu_generator_destroy(NULL);
  tpu_generator_set_state(d, seed0, off0);
}

/* ---- plugin and client ---- */

TEST(runtime_reports_plugin) {
  ASSERT(tpu_runtime_initialized());
  /* Idempotent: a second init is OK and changes nothing. */
  EXPECT_OK(tpu_runtime_init("/nonexistent.so", 4));
  int major = -1, minor = -1;
  tpu_runtime_api_version(&major, &minor);
  EXPECT_EQ_INT(major, 0);
  EXPECT(minor >= 81);
  if (kit_on_cpu_plugin()) {
    EXPECT_EQ_INT(minor, 81); /* xla-cpu-pjrt 0.0.1 */
    EXPECT_EQ_INT(tpu_runtime_device_count(), 1); /* cpu_device_count = 1 was honoured */
  }
  EXPECT(tpu_runtime_device_count() >= 1);
  EXPECT(strlen(tpu_runtime_device_kind(0)) > 0);
  EXPECT_STREQ(tpu_runtime_device_kind(-1), "");
  EXPECT(tpu_runtime_platform_version() != NULL);
  const tpu_plugin_t* plugin = tpu_client_plugin();
  ASSERT(plugin != NULL);
  EXPECT(plugin->has_stablehlo_version);
  EXPECT(plugin->stablehlo_version[0] >= 1);
  EXPECT_EQ_INT(tpu_runtime_eager_mode(), TPU_EAGER_STRICT);
}

TEST(runtime_platform_is_cpu) {
  const char* path = getenv("TORCHTPU_PJRT_PLUGIN");
  if (!path || !strstr(path, "xla_cpu")) return; /* another plugin under test */
  EXPECT_STREQ(tpu_runtime_platform_name(), "cpu");
  EXPECT_STREQ(tpu_runtime_device_kind(0), "cpu");
}

TEST(plugin_load_again_and_errors) {
  tpu_plugin_t plugin;
  EXPECT_OK(tpu_plugin_load(getenv("TORCHTPU_PJRT_PLUGIN"), &plugin));
  EXPECT(plugin.api == tpu_client_api()); /* same library, same table */
  EXPECT_EQ_INT(plugin.api_major, 0);
  EXPECT_CODE(tpu_plugin_load("/nonexistent/plugin.so", &plugin), TPU_NOT_FOUND);
  EXPECT(plugin.api == NULL);
  EXPECT_CODE(tpu_plugin_load("", &plugin), TPU_INVALID_ARGUMENT);
  /* A real library that is not a plugin. */
  EXPECT_CODE(tpu_plugin_load("libm.so.6", &plugin), TPU_NOT_FOUND);
}

TEST(pjrt_slot_bounds) {
  const PJRT_Api* api = tpu_client_api();
  ASSERT(api != NULL);
  int nslots = (int)((api->struct_size - sizeof(PJRT_Api)) / sizeof(tpu_pjrt_fn_t));
  EXPECT(tpu_pjrt_slot(api, nslots - 1) != NULL);
  EXPECT(tpu_pjrt_slot(api, nslots) == NULL);
  EXPECT(tpu_pjrt_slot(api, -1) == NULL);
  EXPECT(tpu_pjrt_slot(NULL, 0) == NULL);
  if (api->pjrt_api_version.minor_version == 81) {
    EXPECT_EQ_INT(api->struct_size, 40 + 8 * 118); /* 118 slots at 0.81 */
    EXPECT(tpu_pjrt_slot(api, 117) != NULL);
    EXPECT(tpu_pjrt_slot(api, 118) == NULL);
  }
}

/* Sends args with struct_size 16 (header only) and reads the plugin's own size
 * from "Unexpected <name> size: expected N, got 16". */
static long plugin_struct_size(tpu_status_t* status) {
  long expected = -1;
  const char* m = strstr(tpu_status_message(status), ": expected ");
  if (tpu_status_code(status) == TPU_INVALID_ARGUMENT && m) expected = strtol(m + 11, NULL, 10);
  if (expected < 0) {
    printf("    unexpected answer: %s: %s\n", tpu_status_code_name(tpu_status_code(status)),
           tpu_status_message(status));
  }
  tpu_status_free(status);
  return expected;
}

#define PROBE_SIZE(api, Name, last, doc_size)                                              \
  do {                                                                                     \
    union {                                                                                \
      PJRT_##Name##_Args args;                                                             \
      unsigned char raw[256];                                                              \
    } u;                                                                                   \
    memset(&u, 0, sizeof u);                                                               \
    u.args.struct_size = 16;                                                               \
    long plugin_size = plugin_struct_size(TPU_PJRT_CALL((api), Name, &u.args));             \
    size_t ours = TPU_PJRT_SIZE(PJRT_##Name##_Args, last);                                 \
    EXPECT_EQ_INT(plugin_size, (doc_size));                                                \
    EXPECT((long)ours >= plugin_size);                                                     \
  } while (0)

TEST(pjrt_struct_sizes_match_plugin) {
  const PJRT_Api* api = tpu_client_api();
  ASSERT(api != NULL);
  if (api->pjrt_api_version.minor_version != 81) return; /* sizes below are 0.81's */
  PROBE_SIZE(api, Plugin_Attributes, num_attributes, 32);
  PROBE_SIZE(api, Event_IsReady, is_ready, 25);
  PROBE_SIZE(api, Event_Await, event, 24);
  PROBE_SIZE(api, Event_Error, event, 24);
  PROBE_SIZE(api, Event_Destroy, event, 24);
  PROBE_SIZE(api, Client_Create, kv_try_get_user_arg, 88);
  PROBE_SIZE(api, Client_PlatformName, size, 40);
  PROBE_SIZE(api, Client_PlatformVersion, size, 40);
  PROBE_SIZE(api, Client_AddressableDevices, num_devices, 40);
  PROBE_SIZE(api, Client_Compile, executable, 56);
  PROBE_SIZE(api, Client_BufferFromHostBuffer, buffer, 120);
  PROBE_SIZE(api, Device_GetDescription, device_description, 32);
  PROBE_SIZE(api, DeviceDescription_Kind, device_kind_size, 40);
  PROBE_SIZE(api, Device_DefaultMemory, memory, 32);
  PROBE_SIZE(api, Device_MemoryStats, peak_pool_bytes_is_set, 185); /* ours: 201 (newer) */
  PROBE_SIZE(api, Executable_NumOutputs, num_outputs, 32);
  PROBE_SIZE(api, Executable_Destroy, executable, 24);
  PROBE_SIZE(api, Executable_Serialize, serialized_executable_deleter, 56);
  PROBE_SIZE(api, Executable_DeserializeAndLoad, load_options, 64); /* ours: 72 (newer) */
  PROBE_SIZE(api, Executable_OutputElementTypes, num_output_types, 40);
  PROBE_SIZE(api, Executable_OutputDimensions, dim_sizes, 48);
  PROBE_SIZE(api, LoadedExecutable_Destroy, executable, 24);
  PROBE_SIZE(api, LoadedExecutable_GetExecutable, executable, 32);
  PROBE_SIZE(api, LoadedExecutable_Execute, execute_device, 80);
  PROBE_SIZE(api, Buffer_Destroy, buffer, 24);
  PROBE_SIZE(api, Buffer_ElementType, type, 28);
  PROBE_SIZE(api, Buffer_Dimensions, num_dims, 40);
  PROBE_SIZE(api, Buffer_OnDeviceSizeInBytes, on_device_size_in_bytes, 32);
  PROBE_SIZE(api, Buffer_ToHostBuffer, event, 56);
  PROBE_SIZE(api, Buffer_ReadyEvent, event, 32);
}

/* ExecuteOptions is nested: probe it through a real Execute call. */
TEST(pjrt_execute_options_size) {
  const PJRT_Api* api = tpu_client_api();
  ASSERT(api != NULL);
  /* tpu_executable_t is private to executable.c: compile a PJRT one here. */
  TPU_PJRT_ARGS(PJRT_Program, program, format_size);
  program.code = (char*)kAddModule;
  program.code_size = strlen(kAddModule);
  program.format = "mlir";
  program.format_size = 4;
  static const char opts[] = {0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};
  TPU_PJRT_ARGS(PJRT_Client_Compile_Args, c, executable);
  c.client = tpu_client_pjrt();
  c.program = &program;
  c.compile_options = opts;
  c.compile_options_size = sizeof opts;
  ASSERT_OK(TPU_PJRT_CALL(api, Client_Compile, &c));

  TPU_PJRT_ARGS(PJRT_ExecuteOptions, options, num_custom_options);
  options.struct_size = 16;
  PJRT_Buffer* outs[1] = {NULL};
  PJRT_Buffer** const out_lists[1] = {outs};
  PJRT_Buffer* const* arg_lists[1] = {NULL};
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Execute_Args, e, execute_device);
  e.executable = c.executable;
  e.options = &options;
  e.argument_lists = arg_lists;
  e.num_devices = 1;
  e.output_lists = out_lists;
  long size = plugin_struct_size(TPU_PJRT_CALL(api, LoadedExecutable_Execute, &e));
  if (api->pjrt_api_version.minor_version == 81) EXPECT_EQ_INT(size, 112);
  EXPECT(size > 0 && (size_t)size <= TPU_PJRT_SIZE(PJRT_ExecuteOptions, num_custom_options));

  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, d, executable);
  d.executable = c.executable;
  EXPECT_OK(TPU_PJRT_CALL(api, LoadedExecutable_Destroy, &d));
}

/* Serialize + DeserializeAndLoad with our (newer, larger) struct sizes. */
TEST(pjrt_serialize_round_trip) {
  const PJRT_Api* api = tpu_client_api();
  ASSERT(api != NULL);
  TPU_PJRT_ARGS(PJRT_Program, program, format_size);
  program.code = (char*)kAddModule;
  program.code_size = strlen(kAddModule);
  program.format = "mlir";
  program.format_size = 4;
  static const char opts[] = {0x20, 0x01, 0x1a, 0x04, 0x20, 0x01, 0x28, 0x01};
  TPU_PJRT_ARGS(PJRT_Client_Compile_Args, c, executable);
  c.client = tpu_client_pjrt();
  c.program = &program;
  c.compile_options = opts;
  c.compile_options_size = sizeof opts;
  ASSERT_OK(TPU_PJRT_CALL(api, Client_Compile, &c));
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_GetExecutable_Args, g, executable);
  g.loaded_executable = c.executable;
  EXPECT_OK(TPU_PJRT_CALL(api, LoadedExecutable_GetExecutable, &g));
  TPU_PJRT_ARGS(PJRT_Executable_Serialize_Args, s, serialized_executable_deleter);
  s.executable = g.executable;
  EXPECT_OK(TPU_PJRT_CALL(api, Executable_Serialize, &s));
  EXPECT(s.serialized_bytes_size > 0);
  TPU_PJRT_ARGS(PJRT_Executable_DeserializeAndLoad_Args, dl, load_options);
  dl.client = tpu_client_pjrt();
  dl.serialized_executable = s.serialized_bytes;
  dl.serialized_executable_size = s.serialized_bytes_size;
  EXPECT_OK(TPU_PJRT_CALL(api, Executable_DeserializeAndLoad, &dl));
  EXPECT(dl.loaded_executable != NULL);
  if (s.serialized_executable_deleter) s.serialized_executable_deleter(s.serialized_executable);

  TPU_PJRT_ARGS(PJRT_Executable_Destroy_Args, ed, executable);
  ed.executable = g.executable;
  EXPECT_OK(TPU_PJRT_CALL(api, Executable_Destroy, &ed));
  TPU_PJRT_ARGS(PJRT_LoadedExecutable_Destroy_Args, d, executable);
  d.executable = c.executable;
  EXPECT_OK(TPU_PJRT_CALL(api, LoadedExecutable_Destroy, &d));
  d.executable = dl.loaded_executable;
  if (dl.loaded_executable) EXPECT_OK(TPU_PJRT_CALL(api, LoadedExecutable_Destroy, &d));
}

/* ---- buffers ---- */

static void round_trip(tpu_dtype_t dtype, const void* data, int64_t n) {
  tpu_aval_t aval = aval1(dtype, n);
  tpu_buffer_t* buf = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, data, &aval, &buf));
  size_t nbytes = (size_t)n * tpu_dtype_size(dtype);
  EXPECT_EQ_INT(tpu_buffer_nbytes(buf), nbytes);
  EXPECT_EQ_INT(tpu_buffer_device(buf), 0);
  EXPECT(tpu_buffer_aval(buf)->dtype == dtype);
  /* The plugin agrees on type and shape. */
  const PJRT_Api* api = tpu_client_api();
  PJRT_Buffer* pjrt = NULL;
  ASSERT_OK(tpu_buffer_materialize(buf, &pjrt));
  TPU_PJRT_ARGS(PJRT_Buffer_ElementType_Args, et, type);
  et.buffer = pjrt;
  EXPECT_OK(TPU_PJRT_CALL(api, Buffer_ElementType, &et));
  EXPECT_EQ_INT(et.type, tpu_dtype_to_pjrt(dtype));
  TPU_PJRT_ARGS(PJRT_Buffer_Dimensions_Args, dims, num_dims);
  dims.buffer = pjrt;
  EXPECT_OK(TPU_PJRT_CALL(api, Buffer_Dimensions, &dims));
  EXPECT_EQ_INT(dims.num_dims, 1);
  if (dims.num_dims == 1) EXPECT_EQ_INT(dims.dims[0], n);

  unsigned char out[256];
  memset(out, 0xAB, sizeof out);
  EXPECT_OK(tpu_buffer_to_host(buf, out, nbytes));
  EXPECT(memcmp(out, data, nbytes) == 0);
  EXPECT_OK(tpu_buffer_await(buf));
  tpu_buffer_release(buf);
}

TEST(buffer_round_trip_dtypes) {
  const bool b[5] = {true, false, true, true, false};
  const uint8_t u8[3] = {0, 200, 255};
  const int8_t i8[3] = {-128, 0, 127};
  const int16_t i16[3] = {-30000, 1, 30000};
  const int32_t i32[3] = {INT32_MIN, 0, INT32_MAX};
  const int64_t i64[3] = {INT64_MIN, -1, INT64_MAX};
  const uint16_t f16[3] = {0x3C00, 0xC000, 0x7BFF};  /* 1, -2, 65504 */
  const uint16_t bf16[3] = {0x3F80, 0xC000, 0x7F7F}; /* 1, -2, max */
  const float f32[4] = {1.5f, -2.25f, 3.0e30f, 0.0f};
  const double f64[2] = {1e-300, -3.5};
  const float c64[4] = {1, 2, 3, 4};
  const double c128[4] = {-1, 0.5, 7, 8};
  round_trip(TPU_BOOL, b, 5);
  round_trip(TPU_U8, u8, 3);
  round_trip(TPU_I8, i8, 3);
  round_trip(TPU_I16, i16, 3);
  round_trip(TPU_I32, i32, 3);
  round_trip(TPU_I64, i64, 3);
  round_trip(TPU_F16, f16, 3);
  round_trip(TPU_BF16, bf16, 3);
  round_trip(TPU_F32, f32, 4);
  round_trip(TPU_F64, f64, 2);
  round_trip(TPU_C64, c64, 2);
  round_trip(TPU_C128, c128, 2);
}

TEST(buffer_scalar_empty_and_metrics) {
  int64_t live0 = tpu_metric_get(TPU_METRIC_LIVE_BUFFERS);
  int64_t live_bytes0 = tpu_metric_get(TPU_METRIC_LIVE_BYTES);
  int64_t h2d0 = tpu_metric_get(TPU_METRIC_H2D_BYTES);
  tpu_aval_t scalar;
  memset(&scalar, 0, sizeof scalar);
  scalar.dtype = TPU_F64;
  double v = 2.5, out = 0;
  tpu_buffer_t* s = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, &v, &scalar, &s));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BUFFERS), live0 + 1);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BYTES), live_bytes0 + 8);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_H2D_BYTES), h2d0 + 8);
  EXPECT_OK(tpu_buffer_to_host(s, &out, sizeof out));
  EXPECT_NEAR(out, 2.5, 0);
  tpu_buffer_t* again = tpu_buffer_retain(s);
  tpu_buffer_release(s);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BUFFERS), live0 + 1); /* still referenced */
  tpu_buffer_release(again);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BUFFERS), live0);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_LIVE_BYTES), live_bytes0);

  int64_t dims[2] = {0, 3};
  tpu_aval_t empty;
  memset(&empty, 0, sizeof empty);
  empty.dtype = TPU_F32;
  empty.rank = 2;
  memcpy(empty.dims, dims, sizeof dims);
  tpu_buffer_t* e = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, NULL, &empty, &e));
  EXPECT_EQ_INT(tpu_buffer_nbytes(e), 0);
  EXPECT_OK(tpu_buffer_to_host(e, NULL, 0));
  tpu_buffer_release(e);
  tpu_buffer_release(NULL);
}

TEST(buffer_rejects_bad_input) {
  float data[4] = {0};
  tpu_buffer_t* buf = (tpu_buffer_t*)&data; /* must be cleared on entry */
  tpu_aval_t aval = aval1(TPU_F32, 4);
  EXPECT_CODE(tpu_buffer_from_host(5, data, &aval, &buf), TPU_INVALID_ARGUMENT);
  EXPECT(buf == NULL);
  EXPECT_CODE(tpu_buffer_from_host(-1, data, &aval, &buf), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_buffer_from_host(0, NULL, &aval, &buf), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_buffer_from_host(0, data, NULL, &buf), TPU_INVALID_ARGUMENT);
  tpu_aval_t bad = aval;
  bad.dtype = (tpu_dtype_t)TPU_DTYPE_COUNT; /* would be PJRT INVALID: must never reach it */
  EXPECT_CODE(tpu_buffer_from_host(0, data, &bad, &buf), TPU_INVALID_ARGUMENT);
  bad = aval;
  bad.dims[0] = -4;
  EXPECT_CODE(tpu_buffer_from_host(0, data, &bad, &buf), TPU_INVALID_ARGUMENT);
  bad = aval;
  bad.rank = TPU_MAX_RANK + 1;
  EXPECT_CODE(tpu_buffer_from_host(0, data, &bad, &buf), TPU_INVALID_ARGUMENT);
  EXPECT(buf == NULL);

  ASSERT_OK(tpu_buffer_from_host(0, data, &aval, &buf));
  float small[2];
  EXPECT_CODE(tpu_buffer_to_host(buf, small, sizeof small), TPU_INVALID_ARGUMENT);
  tpu_buffer_release(buf);
}

/* ---- compile and execute ---- */

/* Runs exe on float32 vectors a and b of n elements; got <- its one float32
 * output (left as is when the run fails). */
static void execute_binary_f32(tpu_executable_t* exe, const float* a, const float* b, int64_t n, const char* name,
                               float* got) {
  tpu_aval_t aval = aval1(TPU_F32, n);
  tpu_buffer_t *ba = NULL, *bb = NULL, *out = NULL;
  EXPECT_OK(tpu_buffer_from_host(0, a, &aval, &ba));
  EXPECT_OK(tpu_buffer_from_host(0, b, &aval, &bb));
  tpu_buffer_t* args[2] = {ba, bb};
  EXPECT_OK(tpu_executable_execute(exe, 0, 2, args, 1, &aval, name, &out));
  if (out) {
    EXPECT(tpu_buffer_aval(out)->dtype == TPU_F32);
    EXPECT_OK(tpu_buffer_to_host(out, got, (size_t)n * sizeof(float)));
  }
  tpu_buffer_release(out);
  tpu_buffer_release(ba);
  tpu_buffer_release(bb);
}

TEST(compile_and_execute_add) {
  int64_t compiles0 = tpu_metric_get(TPU_METRIC_COMPILES);
  int64_t compile_ns0 = tpu_metric_get(TPU_METRIC_COMPILE_NS);
  int64_t execs0 = tpu_metric_get(TPU_METRIC_EXECUTIONS);
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kAddModule, 1, &exe));
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES), compiles0 + 1);
  EXPECT(tpu_metric_get(TPU_METRIC_COMPILE_NS) > compile_ns0);

  const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
  float got[4] = {0};
  execute_binary_f32(exe, a, b, 4, "aten::add", got);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_EXECUTIONS), execs0 + 1);
  for (int i = 0; i < 4; i++) EXPECT_NEAR(got[i], a[i] + b[i], 0);
  EXPECT_OK(tpu_runtime_synchronize());
  tpu_executable_destroy(exe);
  tpu_executable_destroy(NULL);
}

/* Small programs compile with the CPU plugin's quick options (executable.c):
 * counted in compiles_quick, and they compute the same. Large arrays (over 65536
 * elements, the default bound; over 16384 in a program with a while loop) and
 * dynamic dims get the default options. */
static int64_t compile_tier_quick(const char* text, int nouts) {
  int64_t quick0 = tpu_metric_get(TPU_METRIC_QUICK_COMPILES), compiles0 = tpu_metric_get(TPU_METRIC_COMPILES);
  tpu_executable_t* exe = NULL;
  EXPECT_OK(compile(text, nouts, &exe));
  tpu_executable_destroy(exe);
  EXPECT_EQ_INT(tpu_metric_get(TPU_METRIC_COMPILES), compiles0 + 1);
  return tpu_metric_get(TPU_METRIC_QUICK_COMPILES) - quick0;
}

/* A counting loop next to a negation of an array of n elements. */
static int64_t compile_tier_quick_loop(int64_t n) {
  char text[2048];
  snprintf(text, sizeof text,
           "module {\n  func.func @main(%%a: tensor<i32>, %%b: tensor<%lldxf32>) -> (tensor<i32>, tensor<%lldxf32>) {\n"
           "    %%0 = \"stablehlo.while\"(%%a) ({\n    ^bb0(%%x: tensor<i32>):\n"
           "      %%c = \"stablehlo.constant\"() {value = dense<10> : tensor<i32>} : () -> tensor<i32>\n"
           "      %%p = \"stablehlo.compare\"(%%x, %%c) {comparison_direction = #stablehlo<comparison_direction LT>}"
           " : (tensor<i32>, tensor<i32>) -> tensor<i1>\n"
           "      \"stablehlo.return\"(%%p) : (tensor<i1>) -> ()\n    }, {\n    ^bb0(%%x: tensor<i32>):\n"
           "      %%o = \"stablehlo.constant\"() {value = dense<1> : tensor<i32>} : () -> tensor<i32>\n"
           "      %%s = \"stablehlo.add\"(%%x, %%o) : (tensor<i32>, tensor<i32>) -> tensor<i32>\n"
           "      \"stablehlo.return\"(%%s) : (tensor<i32>) -> ()\n    }) : (tensor<i32>) -> tensor<i32>\n"
           "    %%1 = \"stablehlo.negate\"(%%b) : (tensor<%lldxf32>) -> tensor<%lldxf32>\n"
           "    \"func.return\"(%%0, %%1) : (tensor<i32>, tensor<%lldxf32>) -> ()\n  }\n}\n",
           (long long)n, (long long)n, (long long)n, (long long)n, (long long)n);
  return compile_tier_quick(text, 2);
}

TEST(compile_tier_follows_program_size) {
  const int64_t quick = kit_on_cpu_plugin(); /* the tiers are the CPU plugin's */
  /* 256 x 256 = 65536 elements: the largest quick array; 65537 is not. */
  EXPECT_EQ_INT(compile_tier_quick("module {\n  func.func @main(%a: tensor<256x256xf32>) -> tensor<256x256xf32> {\n"
                                   "    %0 = \"stablehlo.negate\"(%a) : (tensor<256x256xf32>) -> tensor<256x256xf32>\n"
                                   "    \"func.return\"(%0) : (tensor<256x256xf32>) -> ()\n  }\n}\n", 1),
                quick);
  EXPECT_EQ_INT(compile_tier_quick("module {\n  func.func @main(%a: tensor<65537xf32>) -> tensor<65537xf32> {\n"
                                   "    %0 = \"stablehlo.negate\"(%a) : (tensor<65537xf32>) -> tensor<65537xf32>\n"
                                   "    \"func.return\"(%0) : (tensor<65537xf32>) -> ()\n  }\n}\n", 1),
                0);
  /* A small result of a large intermediate counts the intermediate. */
  EXPECT_EQ_INT(compile_tier_quick(
                    "module {\n  func.func @main(%a: tensor<f32>) -> tensor<f32> {\n"
                    "    %0 = \"stablehlo.broadcast_in_dim\"(%a) {broadcast_dimensions = array<i64>} : (tensor<f32>) -> "
                    "tensor<1000x1000xf32>\n"
                    "    %z = \"stablehlo.constant\"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>\n"
                    "    %1 = \"stablehlo.reduce\"(%0, %z) ({\n    ^bb0(%x: tensor<f32>, %y: tensor<f32>):\n"
                    "      %s = \"stablehlo.add\"(%x, %y) : (tensor<f32>, tensor<f32>) -> tensor<f32>\n"
                    "      \"stablehlo.return\"(%s) : (tensor<f32>) -> ()\n"
                    "    }) {dimensions = array<i64: 0, 1>} : (tensor<1000x1000xf32>, tensor<f32>) -> tensor<f32>\n"
                    "    \"func.return\"(%1) : (tensor<f32>) -> ()\n  }\n}\n",
                    1),
                0);
  /* A loop runs its code many times: quick only up to 16384 elements. */
  EXPECT_EQ_INT(compile_tier_quick_loop(16384), quick);
  EXPECT_EQ_INT(compile_tier_quick_loop(16385), 0);
  /* The quick executable computes what the default one does. */
  static const char kSub[] =
      "module {\n  func.func @main(%a: tensor<5xf32>, %b: tensor<5xf32>) -> tensor<5xf32> {\n"
      "    %0 = \"stablehlo.subtract\"(%a, %b) : (tensor<5xf32>, tensor<5xf32>) -> tensor<5xf32>\n"
      "    %1 = \"stablehlo.exponential\"(%0) : (tensor<5xf32>) -> tensor<5xf32>\n"
      "    \"func.return\"(%1) : (tensor<5xf32>) -> ()\n  }\n}\n";
  EXPECT_EQ_INT(compile_tier_quick(kSub, 1), quick);
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kSub, 1, &exe)); /* the in-process executable cache is above this layer: a disk hit */
  const float a[5] = {0, 1, 2, -3, 0.5f}, b[5] = {1, 1, 0, 1, -0.25f};
  float got[5] = {0};
  execute_binary_f32(exe, a, b, 5, "exp_sub", got);
  for (int i = 0; i < 5; i++) EXPECT(fabsf(got[i] - expf(a[i] - b[i])) <= 1e-6f * expf(a[i] - b[i]));
  tpu_executable_destroy(exe);
}

TEST(execute_two_outputs_with_bool) {
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kCompareModule, 2, &exe));
  const int32_t a[3] = {1, 5, -3}, b[3] = {2, 5, -4};
  tpu_aval_t in = aval1(TPU_I32, 3);
  tpu_aval_t outs_aval[2] = {aval1(TPU_BOOL, 3), aval1(TPU_I32, 3)};
  tpu_buffer_t *ba = NULL, *bb = NULL, *outs[2] = {NULL, NULL};
  EXPECT_OK(tpu_buffer_from_host(0, a, &in, &ba));
  EXPECT_OK(tpu_buffer_from_host(0, b, &in, &bb));
  tpu_buffer_t* args[2] = {ba, bb};
  EXPECT_OK(tpu_executable_execute(exe, 0, 2, args, 2, outs_aval, "aten::lt", outs));
  bool lt[3] = {false, false, false};
  int32_t mx[3] = {0};
  if (outs[0] && outs[1]) {
    EXPECT_OK(tpu_buffer_to_host(outs[0], lt, sizeof lt));
    EXPECT_OK(tpu_buffer_to_host(outs[1], mx, sizeof mx));
  }
  EXPECT(lt[0] && !lt[1] && !lt[2]);
  EXPECT(mx[0] == 2 && mx[1] == 5 && mx[2] == -3);
  tpu_buffer_release(outs[0]);
  tpu_buffer_release(outs[1]);
  tpu_buffer_release(ba);
  tpu_buffer_release(bb);
  tpu_executable_destroy(exe);
}

TEST(compile_errors_are_statuses) {
  tpu_executable_t* exe = (tpu_executable_t*)&exe;
  const char* bad = "module { this is not mlir }";
  tpu_status_t* s = tpu_executable_compile(bad, strlen(bad), 1, &exe);
  ASSERT(s != NULL);
  EXPECT(exe == NULL);
  /* The CPU plugin reports parse failures as UNKNOWN; others may say INVALID_ARGUMENT. */
  EXPECT(tpu_status_code(s) == TPU_INVALID_ARGUMENT || tpu_status_code(s) == TPU_UNKNOWN);
  EXPECT(strstr(tpu_status_message(s), "error") != NULL);
  tpu_status_free(s);
  /* A type error in valid syntax. */
  const char* typed =
      "module { func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
      "  %0 = \"stablehlo.add\"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<5xf32>\n"
      "  \"func.return\"(%0) : (tensor<5xf32>) -> () } }";
  s = tpu_executable_compile(typed, strlen(typed), 1, &exe);
  EXPECT(s != NULL);
  tpu_status_free(s);
  EXPECT_CODE(tpu_executable_compile("", 0, 1, &exe), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_executable_compile(NULL, 5, 1, &exe), TPU_INVALID_ARGUMENT);
  /* Output count mismatch is caught at compile time. */
  s = compile(kAddModule, 2, &exe);
  EXPECT(s != NULL);
  tpu_status_free(s);
  EXPECT(exe == NULL);
}

TEST(execute_errors_are_statuses) {
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kAddModule, 1, &exe));
  const float a[4] = {1, 2, 3, 4};
  tpu_aval_t aval = aval1(TPU_F32, 4);
  tpu_buffer_t* ba = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, a, &aval, &ba));
  tpu_buffer_t* out = (tpu_buffer_t*)&out;
  tpu_buffer_t* args[3] = {ba, ba, ba};
  /* Too few and too many arguments: the plugin refuses, nothing aborts. */
  tpu_status_t* s = tpu_executable_execute(exe, 0, 1, args, 1, &aval, "aten::add", &out);
  EXPECT(s != NULL);
  EXPECT(strstr(tpu_status_message(s), "aten::add: ") == tpu_status_message(s));
  tpu_status_free(s);
  EXPECT(out == NULL);
  s = tpu_executable_execute(exe, 0, 3, args, 1, &aval, "aten::add", &out);
  EXPECT(s != NULL);
  tpu_status_free(s);
  tpu_buffer_t* two_outs[2];
  tpu_aval_t two_avals[2] = {aval, aval};
  EXPECT_CODE(tpu_executable_execute(exe, 0, 2, args, 2, two_avals, "x", two_outs),
              TPU_INVALID_ARGUMENT);
  EXPECT(two_outs[0] == NULL && two_outs[1] == NULL);
  EXPECT_CODE(tpu_executable_execute(exe, 3, 2, args, 1, &aval, "x", &out), TPU_INVALID_ARGUMENT);
  EXPECT_CODE(tpu_executable_execute(NULL, 0, 2, args, 1, &aval, "x", &out),
              TPU_INVALID_ARGUMENT);
  tpu_buffer_t* nulls[2] = {ba, NULL};
  EXPECT_CODE(tpu_executable_execute(exe, 0, 2, nulls, 1, &aval, "x", &out), TPU_INVALID_ARGUMENT);
  EXPECT(out == NULL);
  /* Nothing failed asynchronously. */
  EXPECT_OK(tpu_runtime_synchronize());
  tpu_buffer_release(ba);
  tpu_executable_destroy(exe);
}

TEST(debug_eager_mode_waits) {
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kAddModule, 1, &exe));
  const float a[4] = {1, 2, 3, 4};
  tpu_aval_t aval = aval1(TPU_F32, 4);
  tpu_buffer_t *ba = NULL, *out = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, a, &aval, &ba));
  tpu_buffer_t* args[2] = {ba, ba};
  tpu_runtime_set_eager_mode(TPU_EAGER_DEBUG);
  EXPECT_EQ_INT(tpu_runtime_eager_mode(), TPU_EAGER_DEBUG);
  EXPECT_OK(tpu_executable_execute(exe, 0, 2, args, 1, &aval, "aten::add", &out));
  tpu_runtime_set_eager_mode(TPU_EAGER_STRICT);
  float got[4] = {0};
  if (out) EXPECT_OK(tpu_buffer_to_host(out, got, sizeof got));
  EXPECT_NEAR(got[3], 8, 0);
  tpu_buffer_release(out);
  tpu_buffer_release(ba);
  tpu_executable_destroy(exe);
}

/* Chains more executions than the in-flight list holds, then synchronizes. */
TEST(inflight_chain_and_synchronize) {
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kAddModule, 1, &exe));
  const float one[4] = {1, 1, 1, 1};
  tpu_aval_t aval = aval1(TPU_F32, 4);
  tpu_buffer_t *inc = NULL, *acc = NULL;
  ASSERT_OK(tpu_buffer_from_host(0, one, &aval, &inc));
  ASSERT_OK(tpu_buffer_from_host(0, one, &aval, &acc));
  for (int i = 0; i < 200; i++) {
    tpu_buffer_t* args[2] = {acc, inc};
    tpu_buffer_t* next = NULL;
    tpu_status_t* s = tpu_executable_execute(exe, 0, 2, args, 1, &aval, "aten::add", &next);
    tpu_buffer_release(acc);
    acc = next;
    if (s) {
      EXPECT_OK(s);
      break;
    }
  }
  EXPECT_OK(tpu_runtime_synchronize());
  float got[4] = {0};
  if (acc) EXPECT_OK(tpu_buffer_to_host(acc, got, sizeof got));
  EXPECT_NEAR(got[0], 201, 0);
  tpu_buffer_release(acc);
  tpu_buffer_release(inc);
  tpu_executable_destroy(exe);
}

typedef struct thread_job {
  tpu_executable_t* exe;
  int seed;
  int failures;
} thread_job_t;

static void* thread_main(void* arg) {
  thread_job_t* job = arg;
  tpu_aval_t aval = aval1(TPU_F32, 4);
  for (int i = 0; i < 50; i++) {
    float a[4], b[4], got[4];
    for (int k = 0; k < 4; k++) {
      a[k] = (float)(job->seed * 1000 + i);
      b[k] = (float)k;
    }
    tpu_buffer_t *ba = NULL, *bb = NULL, *out = NULL;
    tpu_status_t* s = tpu_buffer_from_host(0, a, &aval, &ba);
    if (!s) s = tpu_buffer_from_host(0, b, &aval, &bb);
    tpu_buffer_t* args[2] = {ba, bb};
    if (!s) s = tpu_executable_execute(job->exe, 0, 2, args, 1, &aval, "aten::add", &out);
    if (!s) s = tpu_buffer_to_host(out, got, sizeof got);
    if (s || got[3] != a[3] + 3) job->failures++;
    tpu_status_free(s);
    tpu_buffer_release(out);
    tpu_buffer_release(ba);
    tpu_buffer_release(bb);
    if (i % 10 == 0) tpu_status_free(tpu_runtime_synchronize());
  }
  return NULL;
}

TEST(threads_share_the_client) {
  tpu_executable_t* exe = NULL;
  ASSERT_OK(compile(kAddModule, 1, &exe));
  enum { kThreads = 4 };
  pthread_t threads[kThreads];
  thread_job_t jobs[kThreads];
  for (int t = 0; t < kThreads; t++) {
    jobs[t] = (thread_job_t){exe, t, 0};
    ASSERT_EQ_INT(pthread_create(&threads[t], NULL, thread_main, &jobs[t]), 0);
  }
  for (int t = 0; t < kThreads; t++) {
    pthread_join(threads[t], NULL);
    EXPECT_EQ_INT(jobs[t].failures, 0);
  }
  EXPECT_OK(tpu_runtime_synchronize());
  tpu_executable_destroy(exe);
}
