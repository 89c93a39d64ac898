/* A PJRT plugin for tests: the plugin at TORCHTPU_TEST_WRAPPED_PLUGIN, except
 * that it refuses every compile whose options name TORCHTPU_TEST_REFUSED_OPTION,
 * with INVALID_ARGUMENT and the option's name in the message, as a plugin that
 * lacks the option does. The CPU plugin has every override torchtpu sends
 * (runtime/src/executable.c), so without this plugin the path that leaves a
 * refused override out and compiles again never runs
 * (tests/test_compile_cache.py). torchtpu_test_refusals() counts the refusals. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pjrt/pjrt.h"

static const PJRT_Api* g_wrapped;
static const char* g_option;
static char g_message[256];
static atomic_int g_refusals;
/* The one error this plugin makes; only its address matters. */
static char g_refusal;
#define REFUSAL ((PJRT_Error*)(void*)&g_refusal)

int torchtpu_test_refusals(void);
int torchtpu_test_refusals(void) { return atomic_load(&g_refusals); }

/* The function table follows the PJRT_Api header (pjrt.h). */
static tpu_pjrt_fn_t slot(const PJRT_Api* api, int i) {
  tpu_pjrt_fn_t fn;
  memcpy(&fn, (const char*)api + sizeof(PJRT_Api) + sizeof fn * (size_t)i, sizeof fn);
  return fn;
}
static void slot_set(PJRT_Api* api, int i, tpu_pjrt_fn_t fn) {
  memcpy((char*)api + sizeof(PJRT_Api) + sizeof fn * (size_t)i, &fn, sizeof fn);
}

static bool names_option(const char* bytes, size_t len) {
  const size_t n = strlen(g_option);
  for (size_t i = 0; i + n <= len; i++)
    if (memcmp(bytes + i, g_option, n) == 0) return true;
  return false;
}

static PJRT_Error* compile(PJRT_Client_Compile_Args* args) {
  if (names_option(args->compile_options, args->compile_options_size)) {
    atomic_fetch_add(&g_refusals, 1);
    return REFUSAL;
  }
  return ((PJRT_Client_Compile_Fn*)slot(g_wrapped, TPU_PJRT_SLOT_Client_Compile))(args);
}

static void error_destroy(PJRT_Error_Destroy_Args* args) {
  if (args->error != REFUSAL) ((PJRT_Error_Destroy_Fn*)slot(g_wrapped, TPU_PJRT_SLOT_Error_Destroy))(args);
}

static void error_message(PJRT_Error_Message_Args* args) {
  if (args->error != REFUSAL) {
    ((PJRT_Error_Message_Fn*)slot(g_wrapped, TPU_PJRT_SLOT_Error_Message))(args);
    return;
  }
  args->message = g_message;
  args->message_size = strlen(g_message);
}

static PJRT_Error* error_code(PJRT_Error_GetCode_Args* args) {
  if (args->error != REFUSAL) return ((PJRT_Error_GetCode_Fn*)slot(g_wrapped, TPU_PJRT_SLOT_Error_GetCode))(args);
  args->code = TPU_INVALID_ARGUMENT;
  return NULL;
}

const PJRT_Api* GetPjrtApi(void);
const PJRT_Api* GetPjrtApi(void) {
  static PJRT_Api* api;
  if (api) return api;
  const char* path = getenv("TORCHTPU_TEST_WRAPPED_PLUGIN");
  g_option = getenv("TORCHTPU_TEST_REFUSED_OPTION");
  void* handle = path && g_option && *g_option ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
  void* sym = handle ? dlsym(handle, "GetPjrtApi") : NULL;
  if (!sym) return NULL; /* torchtpu reports "GetPjrtApi returned NULL" */
  const PJRT_Api* (*get)(void);
  memcpy(&get, &sym, sizeof get);
  g_wrapped = get();
  if (!g_wrapped || g_wrapped->struct_size < sizeof(PJRT_Api) + sizeof(tpu_pjrt_fn_t) * (TPU_PJRT_SLOT_Client_Compile + 1))
    return NULL;
  snprintf(g_message, sizeof g_message, "No such compile option: '%s' (refused by the test plugin)", g_option);
  PJRT_Api* copy = malloc(g_wrapped->struct_size);
  if (!copy) return NULL;
  memcpy(copy, g_wrapped, g_wrapped->struct_size);
  slot_set(copy, TPU_PJRT_SLOT_Error_Destroy, (tpu_pjrt_fn_t)error_destroy);
  slot_set(copy, TPU_PJRT_SLOT_Error_Message, (tpu_pjrt_fn_t)error_message);
  slot_set(copy, TPU_PJRT_SLOT_Error_GetCode, (tpu_pjrt_fn_t)error_code);
  slot_set(copy, TPU_PJRT_SLOT_Client_Compile, (tpu_pjrt_fn_t)compile);
  api = copy;
  return api;
}
