/* The process-wide PJRT client: init/shutdown, device info, eager mode.
 * (In-flight work and tpu_runtime_synchronize: stream.c.) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "background.h"
#include "check.h"
#include "device.h"
#include "pjrt/pjrt.h"

typedef struct client_state {
  tpu_plugin_t plugin;
  PJRT_Client* client;
  char* platform_name;
  char* platform_version;
  int num_devices;
  PJRT_Device* devices[TPU_MAX_DEVICES];
  char* device_kinds[TPU_MAX_DEVICES];
} client_state_t;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static client_state_t g_state;
/* Published with release after g_state is complete, so readers need no lock. */
static atomic_bool g_ready;
static atomic_int g_eager_mode = TPU_EAGER_STRICT;

static char* dup_n(const char* s, size_t n) {
  char* d = malloc(n + 1);
  if (!d) return NULL;
  if (n) memcpy(d, s, n);
  d[n] = '\0';
  return d;
}

static void state_clear(client_state_t* st) {
  if (st->client) {
    TPU_PJRT_ARGS(PJRT_Client_Destroy_Args, args, client);
    args.client = st->client;
    tpu_status_free(TPU_PJRT_CALL(st->plugin.api, Client_Destroy, &args));
  }
  free(st->platform_name);
  free(st->platform_version);
  for (int i = 0; i < st->num_devices; i++) free(st->device_kinds[i]);
  memset(st, 0, sizeof *st);
}

static tpu_status_t* client_create(client_state_t* st, int cpu_devices) {
  const PJRT_Api* api = st->plugin.api;
  TPU_PJRT_ARGS(PJRT_Client_Create_Args, args, kv_try_get_user_arg);
  PJRT_NamedValue option;
  memset(&option, 0, sizeof option);
  /* cpu_devices < 0 asks for a client without options. */
  if (cpu_devices >= 0) {
    option.struct_size = TPU_PJRT_SIZE(PJRT_NamedValue, value_size);
    option.name = "cpu_device_count";
    option.name_size = strlen(option.name);
    option.type = PJRT_NamedValue_Int64;
    option.int64_value = cpu_devices;
    option.value_size = 1;
    args.create_options = &option;
    args.num_options = 1;
  }
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, Client_Create, &args));
  st->client = args.client;
  return NULL;
}

static tpu_status_t* client_string(const PJRT_Api* api, PJRT_Client* client, bool version,
                                   char** out) {
  *out = NULL;
  TPU_PJRT_ARGS(PJRT_Client_String_Args, args, size);
  args.client = client;
  TPU_RETURN_IF_ERROR(version ? TPU_PJRT_CALL(api, Client_PlatformVersion, &args)
                              : TPU_PJRT_CALL(api, Client_PlatformName, &args));
  *out = dup_n(args.string ? args.string : "", args.string ? args.size : 0);
  return *out ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
}

static tpu_status_t* device_kind(const PJRT_Api* api, PJRT_Device* device, char** out) {
  *out = NULL;
  TPU_PJRT_ARGS(PJRT_Device_GetDescription_Args, desc, device_description);
  desc.device = device;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, Device_GetDescription, &desc));
  TPU_PJRT_ARGS(PJRT_DeviceDescription_Kind_Args, kind, device_kind_size);
  kind.device_description = desc.device_description;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, DeviceDescription_Kind, &kind));
  *out = dup_n(kind.device_kind ? kind.device_kind : "",
               kind.device_kind ? kind.device_kind_size : 0);
  return *out ? NULL : TPU_STATUS(TPU_RESOURCE_EXHAUSTED, "out of memory");
}

/* Everything after the plugin is loaded; on failure the caller clears `st`. */
static tpu_status_t* state_init(client_state_t* st, int cpu_devices) {
  const PJRT_Api* api = st->plugin.api;
  /* Only the CPU plugin takes cpu_device_count, and the platform is known only
   * once a client exists. Offering the option first and retrying without it
   * when refused (CUDA rejects unknown keys with INVALID_ARGUMENT) costs one
   * cheap failed call elsewhere instead of a second client on CPU. */
  tpu_status_t* status = client_create(st, cpu_devices > 0 ? cpu_devices : 1);
  if (tpu_status_code(status) == TPU_INVALID_ARGUMENT) {
    tpu_status_free(status);
    status = client_create(st, -1);
  }
  TPU_RETURN_IF_ERROR(status);
  TPU_RETURN_IF_ERROR(client_string(api, st->client, false, &st->platform_name));
  TPU_RETURN_IF_ERROR(client_string(api, st->client, true, &st->platform_version));

  TPU_PJRT_ARGS(PJRT_Client_AddressableDevices_Args, devs, num_devices);
  devs.client = st->client;
  TPU_RETURN_IF_ERROR(TPU_PJRT_CALL(api, Client_AddressableDevices, &devs));
  if (devs.num_devices == 0) return TPU_STATUS(TPU_UNAVAILABLE, "the PJRT plugin has no devices");
  st->num_devices = devs.num_devices > TPU_MAX_DEVICES ? TPU_MAX_DEVICES : (int)devs.num_devices;
  for (int i = 0; i < st->num_devices; i++) {
    st->devices[i] = devs.devices[i];
    TPU_RETURN_IF_ERROR(device_kind(api, st->devices[i], &st->device_kinds[i]));
  }
  return NULL;
}

tpu_status_t* tpu_runtime_init(const char* plugin_path, int cpu_devices) {
  if (atomic_load_explicit(&g_ready, memory_order_acquire)) return NULL;
  pthread_mutex_lock(&g_mu);
  tpu_status_t* status = NULL;
  if (!atomic_load_explicit(&g_ready, memory_order_relaxed)) {
    client_state_t st;
    memset(&st, 0, sizeof st);
    status = tpu_plugin_load(plugin_path, &st.plugin);
    if (!status) status = state_init(&st, cpu_devices);
    if (status) {
      state_clear(&st);
    } else {
      g_state = st;
      atomic_store_explicit(&g_ready, true, memory_order_release);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return status;
}

bool tpu_runtime_initialized(void) { return atomic_load_explicit(&g_ready, memory_order_acquire); }

void tpu_runtime_shutdown(void) {
  pthread_mutex_lock(&g_mu);
  if (atomic_load_explicit(&g_ready, memory_order_relaxed)) {
    /* Work still running would touch the client we are about to destroy. */
    tpu_background_drain();
    tpu_status_free(tpu_runtime_synchronize());
    tpu_check_release_all();
    atomic_store_explicit(&g_ready, false, memory_order_release);
    state_clear(&g_state);
  }
  pthread_mutex_unlock(&g_mu);
}

static const client_state_t* state(void) {
  return atomic_load_explicit(&g_ready, memory_order_acquire) ? &g_state : NULL;
}

int tpu_runtime_device_count(void) {
  const client_state_t* st = state();
  return st ? st->num_devices : 0;
}
const char* tpu_runtime_platform_name(void) {
  const client_state_t* st = state();
  return st ? st->platform_name : "";
}
bool tpu_runtime_platform_is_cpu(void) { return strcmp(tpu_runtime_platform_name(), "cpu") == 0; }
const char* tpu_runtime_platform_version(void) {
  const client_state_t* st = state();
  return st ? st->platform_version : "";
}
const char* tpu_runtime_device_kind(int device) {
  const client_state_t* st = state();
  return st && device >= 0 && device < st->num_devices ? st->device_kinds[device] : "";
}
void tpu_runtime_api_version(int* out_major, int* out_minor) {
  const client_state_t* st = state();
  if (out_major) *out_major = st ? st->plugin.api_major : 0;
  if (out_minor) *out_minor = st ? st->plugin.api_minor : 0;
}

const PJRT_Api* tpu_client_api(void) {
  const client_state_t* st = state();
  return st ? st->plugin.api : NULL;
}
PJRT_Client* tpu_client_pjrt(void) {
  const client_state_t* st = state();
  return st ? st->client : NULL;
}
PJRT_Device* tpu_client_device(int device) {
  const client_state_t* st = state();
  return st && device >= 0 && device < st->num_devices ? st->devices[device] : NULL;
}
const tpu_plugin_t* tpu_client_plugin(void) {
  const client_state_t* st = state();
  return st ? &st->plugin : NULL;
}

tpu_status_t* tpu_runtime_check_device(int device) {
  const int n = tpu_runtime_device_count();
  if (device >= 0 && device < n) return NULL;
  return TPU_STATUS(TPU_INVALID_ARGUMENT, "tpu:%d is not a device (%d device(s))", device, n);
}

void tpu_runtime_set_eager_mode(tpu_eager_mode_t mode) {
  if (mode != TPU_EAGER_DEBUG && mode != TPU_EAGER_STRICT && mode != TPU_EAGER_FUSED) return;
  int old = atomic_exchange(&g_eager_mode, (int)mode);
  /* What fused mode recorded runs now; a failure stays with its results. */
  if (old == TPU_EAGER_FUSED && mode != TPU_EAGER_FUSED) tpu_status_free(tpu_buffer_flush_pending(-1));
}
tpu_eager_mode_t tpu_runtime_eager_mode(void) {
  return (tpu_eager_mode_t)atomic_load(&g_eager_mode);
}

