/* Loading a PJRT plugin and turning PJRT errors into statuses. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "pjrt/pjrt.h"

tpu_pjrt_fn_t tpu_pjrt_slot(const PJRT_Api* api, int slot) {
  if (!api || slot < 0) return NULL;
  /* A plugin older than our declarations has a shorter table: the slot must lie
   * inside the struct the plugin says it has. */
  size_t end = sizeof(PJRT_Api) + sizeof(tpu_pjrt_fn_t) * ((size_t)slot + 1);
  if (end > api->struct_size) return NULL;
  tpu_pjrt_fn_t fn;
  memcpy(&fn, (const char*)api + sizeof(PJRT_Api) + sizeof(tpu_pjrt_fn_t) * (size_t)slot,
         sizeof fn);
  return fn;
}

static void error_destroy(const PJRT_Api* api, PJRT_Error* err) {
  PJRT_Error_Destroy_Fn* destroy = TPU_PJRT_FN(api, Error_Destroy);
  if (!destroy || !err) return;
  TPU_PJRT_ARGS(PJRT_Error_Destroy_Args, args, error);
  args.error = err;
  destroy(&args);
}

tpu_status_t* tpu_pjrt_status(const PJRT_Api* api, PJRT_Error* err, const char* file,
                              int line) {
  if (!err) return NULL;
  int code = TPU_UNKNOWN;
  PJRT_Error_GetCode_Fn* get_code = TPU_PJRT_FN(api, Error_GetCode);
  if (get_code) {
    TPU_PJRT_ARGS(PJRT_Error_GetCode_Args, args, code);
    args.error = err;
    PJRT_Error* code_err = get_code(&args);
    if (code_err) {
      error_destroy(api, code_err);
    } else if (args.code > TPU_OK && args.code <= TPU_UNAUTHENTICATED) {
      code = args.code;
    }
  }
  tpu_status_t* status;
  PJRT_Error_Message_Fn* message = TPU_PJRT_FN(api, Error_Message);
  if (message) {
    TPU_PJRT_ARGS(PJRT_Error_Message_Args, args, message_size);
    args.error = err;
    message(&args);
    /* The message belongs to the error: copy it before destroying the error. */
    int len = args.message_size > 65536 ? 65536 : (int)args.message_size;
    status = tpu_status_make((tpu_status_code_t)code, file, line, "%.*s", len,
                             args.message ? args.message : "");
  } else {
    status = tpu_status_make((tpu_status_code_t)code, file, line, "PJRT error (no message)");
  }
  error_destroy(api, err);
  return status;
}

tpu_status_t* tpu_pjrt_missing(const char* name, const char* file, int line) {
  return tpu_status_make(TPU_UNIMPLEMENTED, file, line, "the PJRT plugin does not provide %s",
                         name);
}

void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event) {
  if (!event) return;
  TPU_PJRT_ARGS(PJRT_Event_Destroy_Args, args, event);
  args.event = event;
  tpu_status_free(TPU_PJRT_CALL(api, Event_Destroy, &args));
}

void tpu_pjrt_buffer_destroy(const PJRT_Api* api, PJRT_Buffer* buffer) {
  if (!api || !buffer) return;
  TPU_PJRT_ARGS(PJRT_Buffer_Destroy_Args, args, buffer);
  args.buffer = buffer;
  tpu_status_free(TPU_PJRT_CALL(api, Buffer_Destroy, &args));
}

tpu_status_t* tpu_pjrt_event_await(const PJRT_Api* api, PJRT_Event* event) {
  if (!event) return NULL;
  TPU_PJRT_ARGS(PJRT_Event_Await_Args, args, event);
  args.event = event;
  tpu_status_t* status = TPU_PJRT_CALL(api, Event_Await, &args);
  tpu_pjrt_event_destroy(api, event);
  return status;
}

/* Plugin_Initialize must run once per plugin per process; a later init after a
 * shutdown reuses the same (still loaded) plugin. */
static pthread_mutex_t g_init_mu = PTHREAD_MUTEX_INITIALIZER;
#define TPU_MAX_PLUGINS 4
static const PJRT_Api* g_initialized[TPU_MAX_PLUGINS];

static tpu_status_t* plugin_initialize_once(const PJRT_Api* api) {
  tpu_status_t* status = NULL;
  pthread_mutex_lock(&g_init_mu);
  int i = 0;
  for (; i < TPU_MAX_PLUGINS && g_initialized[i]; i++) {
    if (g_initialized[i] == api) break;
  }
  if (i == TPU_MAX_PLUGINS || g_initialized[i] != api) {
    if (TPU_PJRT_FN(api, Plugin_Initialize)) {
      TPU_PJRT_ARGS(PJRT_Plugin_Initialize_Args, args, extension_start);
      status = TPU_PJRT_CALL(api, Plugin_Initialize, &args);
    }
    if (!status && i < TPU_MAX_PLUGINS) g_initialized[i] = api;
  }
  pthread_mutex_unlock(&g_init_mu);
  return status;
}

static void read_attributes(tpu_plugin_t* plugin) {
  TPU_PJRT_ARGS(PJRT_Plugin_Attributes_Args, args, num_attributes);
  tpu_status_t* status = TPU_PJRT_CALL(plugin->api, Plugin_Attributes, &args);
  if (status) {
    /* Attributes are informative (cache keys, logs); a plugin without them works. */
    tpu_status_free(status);
    return;
  }
  static const char kName[] = "stablehlo_current_version";
  for (size_t i = 0; i < args.num_attributes; i++) {
    const PJRT_NamedValue* nv = &args.attributes[i];
    if (nv->name_size != sizeof kName - 1 || memcmp(nv->name, kName, sizeof kName - 1) != 0) {
      continue;
    }
    if (nv->type == PJRT_NamedValue_Int64List && nv->value_size == 3 && nv->int64_array_value) {
      memcpy(plugin->stablehlo_version, nv->int64_array_value, sizeof plugin->stablehlo_version);
      plugin->has_stablehlo_version = true;
    }
  }
}

tpu_status_t* tpu_plugin_load(const char* path, tpu_plugin_t* out_plugin) {
  if (!out_plugin) return TPU_STATUS(TPU_INVALID_ARGUMENT, "out_plugin is NULL");
  memset(out_plugin, 0, sizeof *out_plugin);
  if (!path || !*path) return TPU_STATUS(TPU_INVALID_ARGUMENT, "no PJRT plugin path given");

  /* RTLD_LOCAL keeps the plugin's (huge) symbol set out of everyone's way. The
   * handle is never closed: plugins start threads and register atexit work that
   * would run on unmapped code. */
  void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* err = dlerror();
    return TPU_STATUS(TPU_NOT_FOUND, "cannot load PJRT plugin %s: %s", path, err ? err : "?");
  }
  typedef const PJRT_Api* get_api_fn_t(void);
  get_api_fn_t* get_api;
  void* sym = dlsym(handle, "GetPjrtApi");
  if (!sym) {
    return TPU_STATUS(TPU_NOT_FOUND, "%s does not export GetPjrtApi (not a PJRT plugin)", path);
  }
  /* POSIX guarantees a data pointer from dlsym converts to a function pointer. */
  memcpy(&get_api, &sym, sizeof get_api);
  const PJRT_Api* api = get_api();
  if (!api) return TPU_STATUS(TPU_INTERNAL, "%s: GetPjrtApi returned NULL", path);
  if (api->struct_size < sizeof(PJRT_Api)) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION, "%s: PJRT_Api is too small (%zu bytes)", path,
                      api->struct_size);
  }
  int major = api->pjrt_api_version.major_version;
  int minor = api->pjrt_api_version.minor_version;
  if (major != 0) {
    return TPU_STATUS(TPU_FAILED_PRECONDITION,
                      "%s: PJRT API version %d.%d is not supported (need major 0)", path, major,
                      minor);
  }
  TPU_RETURN_IF_ERROR(plugin_initialize_once(api));

  out_plugin->handle = handle;
  out_plugin->api = api;
  out_plugin->api_major = major;
  out_plugin->api_minor = minor;
  read_attributes(out_plugin);
  return NULL;
}
