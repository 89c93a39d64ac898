/* Our own declarations of the PJRT C API subset the runtime uses.
 *
 * Written from the ABI facts in docs/pjrt-abi.md, not copied from upstream's
 * pjrt_c_api.h. Rules that make one set of declarations work with every plugin
 * we meet (CPU 0.81, CUDA ~0.115, libtpu):
 *  - every args struct is declared in its NEWEST known layout, zero-filled and
 *    sent with struct_size = end of its last field (no tail padding); plugins
 *    reject a smaller struct and read the prefix of a larger one;
 *  - function slot i is called only when 40 + 8*(i+1) <= api->struct_size and
 *    the pointer is non-NULL (tpu_pjrt_slot);
 *  - every PJRT_Error* is converted to a tpu_status_t and destroyed
 *    (tpu_pjrt_status).
 * The static_asserts below pin each offset the doc gives (x86-64 / LP64), and
 * tests/test_pjrt.c checks the sizes against the live plugin.
 *
 * Program syntax verified against the CPU plugin (xla-cpu-pjrt 0.0.1, API 0.81),
 * format "mlir", StableHLO text in the generic op syntax:
 *   module {
 *     func.func @main(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
 *       %0 = "stablehlo.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
 *       "func.return"(%0) : (tensor<4xf32>) -> ()
 *     }
 *   }
 * compiles as written (func.func keeps its custom syntax; the body ops are
 * generic). Bad MLIR comes back as an error status (the CPU plugin says
 * UNKNOWN, "Failed to parse using StableHLO v1.13.3"), not an abort. */
#ifndef TORCHTPU_SRC_PJRT_PJRT_H_
#define TORCHTPU_SRC_PJRT_PJRT_H_

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "torchtpu/builder.h"
#include "torchtpu/status.h"

/* ---- opaque handles ---- */
typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_SerializedExecutable PJRT_SerializedExecutable;
typedef struct PJRT_Extension_Base PJRT_Extension_Base;
typedef struct PJRT_Buffer_MemoryLayout PJRT_Buffer_MemoryLayout;

/* Offsets of the two fields every args struct starts with. */
#define TPU_PJRT_ARGS_HEADER    \
  size_t struct_size;           \
  PJRT_Extension_Base* extension_start

/* struct_size to send: end of the last field (no tail padding). */
#define TPU_PJRT_SIZE(type, last) (offsetof(type, last) + sizeof(((type*)0)->last))
/* Zero-fills an args struct and sets its newest struct_size. */
#define TPU_PJRT_ARGS(type, var, last) \
  type var;                           \
  memset(&var, 0, sizeof var);        \
  var.struct_size = TPU_PJRT_SIZE(type, last)

/* ---- enums ---- */
enum {
  PJRT_Buffer_Type_INVALID = 0, /* aborts the CPU plugin: never send it */
  PJRT_Buffer_Type_PRED = 1,
  PJRT_Buffer_Type_S8 = 2,
  PJRT_Buffer_Type_S16 = 3,
  PJRT_Buffer_Type_S32 = 4,
  PJRT_Buffer_Type_S64 = 5,
  PJRT_Buffer_Type_U8 = 6,
  PJRT_Buffer_Type_U16 = 7,
  PJRT_Buffer_Type_U32 = 8,
  PJRT_Buffer_Type_U64 = 9,
  PJRT_Buffer_Type_F16 = 10,
  PJRT_Buffer_Type_F32 = 11,
  PJRT_Buffer_Type_F64 = 12,
  PJRT_Buffer_Type_BF16 = 13,
  PJRT_Buffer_Type_C64 = 14,
  PJRT_Buffer_Type_C128 = 15,
};

enum {
  PJRT_HostBufferSemantics_ImmutableOnlyDuringCall = 0,
  PJRT_HostBufferSemantics_ImmutableUntilTransferCompletes = 1,
  PJRT_HostBufferSemantics_ImmutableZeroCopy = 2,
  PJRT_HostBufferSemantics_MutableZeroCopy = 3,
};

enum {
  PJRT_NamedValue_String = 0,
  PJRT_NamedValue_Int64 = 1,
  PJRT_NamedValue_Int64List = 2,
  PJRT_NamedValue_Float = 3,
  PJRT_NamedValue_Bool = 4,
};

/* PJRT_Error_Code uses abseil's numbering, the same as tpu_status_code_t. */

/* ---- PJRT_Api: a header, then function pointer i at byte 40 + 8*i ---- */
typedef struct PJRT_Api_Version {
  TPU_PJRT_ARGS_HEADER;
  int major_version;
  int minor_version;
} PJRT_Api_Version;

typedef struct PJRT_Api {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Api_Version pjrt_api_version;
  /* function pointers follow; read them with tpu_pjrt_slot() */
} PJRT_Api;

static_assert(offsetof(PJRT_Api, pjrt_api_version) == 16, "PJRT_Api.pjrt_api_version");
static_assert(offsetof(PJRT_Api, pjrt_api_version.major_version) == 32, "major @32");
static_assert(offsetof(PJRT_Api, pjrt_api_version.minor_version) == 36, "minor @36");
static_assert(sizeof(PJRT_Api_Version) == 24, "PJRT_Api_Version is 24 bytes");
static_assert(sizeof(PJRT_Api) == 40, "function table starts at byte 40");

/* ---- named values (create options, plugin attributes) ---- */
typedef struct PJRT_NamedValue {
  TPU_PJRT_ARGS_HEADER;
  const char* name;
  size_t name_size;
  int type;
  union {
    const char* string_value;
    int64_t int64_value;
    const int64_t* int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size; /* elements for strings and lists, 1 for scalars */
} PJRT_NamedValue;
static_assert(offsetof(PJRT_NamedValue, name) == 16, "NamedValue.name");
static_assert(offsetof(PJRT_NamedValue, type) == 32, "NamedValue.type");
static_assert(offsetof(PJRT_NamedValue, int64_value) == 40, "NamedValue.value");
static_assert(TPU_PJRT_SIZE(PJRT_NamedValue, value_size) == 56, "NamedValue size");

/* ---- errors ---- */
typedef struct PJRT_Error_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Error* error;
} PJRT_Error_Destroy_Args;
typedef struct PJRT_Error_Message_Args {
  TPU_PJRT_ARGS_HEADER;
  const PJRT_Error* error;
  const char* message; /* out, owned by the error */
  size_t message_size; /* out */
} PJRT_Error_Message_Args;
typedef struct PJRT_Error_GetCode_Args {
  TPU_PJRT_ARGS_HEADER;
  const PJRT_Error* error;
  int code; /* out */
} PJRT_Error_GetCode_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Error_Destroy_Args, error) == 24, "Error_Destroy");
static_assert(TPU_PJRT_SIZE(PJRT_Error_Message_Args, message_size) == 40, "Error_Message");
static_assert(TPU_PJRT_SIZE(PJRT_Error_GetCode_Args, code) == 28, "Error_GetCode");

/* ---- plugin ---- */
typedef struct PJRT_Plugin_Initialize_Args {
  TPU_PJRT_ARGS_HEADER;
} PJRT_Plugin_Initialize_Args;
typedef struct PJRT_Plugin_Attributes_Args {
  TPU_PJRT_ARGS_HEADER;
  const PJRT_NamedValue* attributes; /* out, owned by the plugin */
  size_t num_attributes;             /* out */
} PJRT_Plugin_Attributes_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Plugin_Attributes_Args, num_attributes) == 32,
              "Plugin_Attributes");

/* ---- events ---- */
typedef struct PJRT_Event_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Event* event;
} PJRT_Event_Destroy_Args;
typedef struct PJRT_Event_IsReady_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Event* event;
  bool is_ready; /* out */
} PJRT_Event_IsReady_Args;
typedef PJRT_Event_Destroy_Args PJRT_Event_Error_Args; /* same layout: handle @16 */
typedef PJRT_Event_Destroy_Args PJRT_Event_Await_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Event_Destroy_Args, event) == 24, "Event_Destroy");
static_assert(TPU_PJRT_SIZE(PJRT_Event_IsReady_Args, is_ready) == 25, "Event_IsReady");
/* Called once when the event is ready, possibly on a plugin thread (at once
 * when it already is); owns `error` (NULL on success). */
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error* error, void* user_arg);
typedef struct PJRT_Event_OnReady_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Event* event;
  PJRT_Event_OnReadyCallback callback;
  void* user_arg;
} PJRT_Event_OnReady_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Event_OnReady_Args, user_arg) == 40, "Event_OnReady");

/* ---- client ---- */
typedef struct PJRT_Client_Create_Args {
  TPU_PJRT_ARGS_HEADER;
  const PJRT_NamedValue* create_options;
  size_t num_options;
  void* kv_get_callback;
  void* kv_get_user_arg;
  void* kv_put_callback;
  void* kv_put_user_arg;
  PJRT_Client* client; /* out */
  void* kv_try_get_callback;
  void* kv_try_get_user_arg;
} PJRT_Client_Create_Args;
static_assert(offsetof(PJRT_Client_Create_Args, client) == 64, "Client_Create.client");
static_assert(TPU_PJRT_SIZE(PJRT_Client_Create_Args, kv_try_get_user_arg) == 88,
              "Client_Create");

typedef struct PJRT_Client_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
} PJRT_Client_Destroy_Args;

/* Client_PlatformName and Client_PlatformVersion share this layout. */
typedef struct PJRT_Client_String_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const char* string; /* out, owned by the client */
  size_t size;        /* out */
} PJRT_Client_String_Args;
typedef PJRT_Client_String_Args PJRT_Client_PlatformName_Args;
typedef PJRT_Client_String_Args PJRT_Client_PlatformVersion_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Client_String_Args, size) == 40, "Client_PlatformName");

typedef struct PJRT_Client_AddressableDevices_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  PJRT_Device* const* devices; /* out, owned by the client */
  size_t num_devices;          /* out */
} PJRT_Client_AddressableDevices_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Client_AddressableDevices_Args, num_devices) == 40,
              "Client_AddressableDevices");

typedef struct PJRT_Program {
  TPU_PJRT_ARGS_HEADER;
  char* code; /* not modified by the plugin */
  size_t code_size;
  const char* format; /* "mlir" or "hlo" */
  size_t format_size;
} PJRT_Program;
static_assert(TPU_PJRT_SIZE(PJRT_Program, format_size) == 48, "Program");

typedef struct PJRT_Client_Compile_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const PJRT_Program* program;
  const char* compile_options; /* serialized xla.CompileOptionsProto, never empty */
  size_t compile_options_size;
  PJRT_LoadedExecutable* executable; /* out */
} PJRT_Client_Compile_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Client_Compile_Args, executable) == 56, "Client_Compile");

typedef struct PJRT_Client_BufferFromHostBuffer_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const void* data;
  int type;
  const int64_t* dims;
  size_t num_dims;
  const int64_t* byte_strides; /* NULL: dense row-major */
  size_t num_byte_strides;
  int host_buffer_semantics;
  PJRT_Device* device;
  PJRT_Memory* memory;
  PJRT_Buffer_MemoryLayout* device_layout;
  PJRT_Event* done_with_host_buffer; /* out */
  PJRT_Buffer* buffer;               /* out */
} PJRT_Client_BufferFromHostBuffer_Args;
static_assert(offsetof(PJRT_Client_BufferFromHostBuffer_Args, type) == 32, "BFHB.type");
static_assert(offsetof(PJRT_Client_BufferFromHostBuffer_Args, host_buffer_semantics) == 72,
              "BFHB.semantics");
static_assert(offsetof(PJRT_Client_BufferFromHostBuffer_Args, device) == 80, "BFHB.device");
static_assert(TPU_PJRT_SIZE(PJRT_Client_BufferFromHostBuffer_Args, buffer) == 120,
              "Client_BufferFromHostBuffer");

/* ---- devices ---- */
typedef struct PJRT_Device_GetDescription_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Device* device;
  PJRT_DeviceDescription* device_description; /* out */
} PJRT_Device_GetDescription_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Device_GetDescription_Args, device_description) == 32,
              "Device_GetDescription");

typedef struct PJRT_DeviceDescription_Kind_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_DeviceDescription* device_description;
  const char* device_kind; /* out */
  size_t device_kind_size; /* out */
} PJRT_DeviceDescription_Kind_Args;
static_assert(TPU_PJRT_SIZE(PJRT_DeviceDescription_Kind_Args, device_kind_size) == 40,
              "DeviceDescription_Kind");

typedef struct PJRT_Device_DefaultMemory_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Device* device;
  PJRT_Memory* memory; /* out */
} PJRT_Device_DefaultMemory_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Device_DefaultMemory_Args, memory) == 32,
              "Device_DefaultMemory");

/* Allocator statistics: each int64 but bytes_in_use comes with a bool saying the
 * plugin set it. 185 bytes up to peak_pool_bytes_is_set (API 0.81); newer plugins
 * append one more pair (201 bytes), declared here as `newer` so the struct sent
 * is never smaller than the plugin's. */
typedef struct PJRT_Device_MemoryStats_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Device* device;
  int64_t bytes_in_use; /* out, always set */
  int64_t peak_bytes_in_use;
  bool peak_bytes_in_use_is_set;
  int64_t num_allocs;
  bool num_allocs_is_set;
  int64_t largest_alloc_size;
  bool largest_alloc_size_is_set;
  int64_t bytes_limit; /* what the allocator may hand out */
  bool bytes_limit_is_set;
  int64_t bytes_reserved;
  bool bytes_reserved_is_set;
  int64_t peak_bytes_reserved;
  bool peak_bytes_reserved_is_set;
  int64_t bytes_reservable_limit;
  bool bytes_reservable_limit_is_set;
  int64_t largest_free_block_bytes;
  bool largest_free_block_bytes_is_set;
  int64_t pool_bytes;
  bool pool_bytes_is_set;
  int64_t peak_pool_bytes;
  bool peak_pool_bytes_is_set;
  int64_t newer;
  bool newer_is_set;
} PJRT_Device_MemoryStats_Args;
static_assert(offsetof(PJRT_Device_MemoryStats_Args, bytes_in_use) == 24, "Device_MemoryStats");
static_assert(offsetof(PJRT_Device_MemoryStats_Args, bytes_limit) == 80, "Device_MemoryStats");
static_assert(offsetof(PJRT_Device_MemoryStats_Args, bytes_limit_is_set) == 88, "Device_MemoryStats");
static_assert(TPU_PJRT_SIZE(PJRT_Device_MemoryStats_Args, peak_pool_bytes_is_set) == 185,
              "Device_MemoryStats");
static_assert(TPU_PJRT_SIZE(PJRT_Device_MemoryStats_Args, newer_is_set) == 201, "Device_MemoryStats");

/* ---- executables ---- */
typedef struct PJRT_Executable_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Executable* executable;
} PJRT_Executable_Destroy_Args;
typedef struct PJRT_Executable_NumOutputs_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Executable* executable;
  size_t num_outputs; /* out */
} PJRT_Executable_NumOutputs_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Executable_NumOutputs_Args, num_outputs) == 32,
              "Executable_NumOutputs");

typedef struct PJRT_Executable_OutputElementTypes_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Executable* executable;
  int* output_types;       /* out */
  size_t num_output_types; /* out */
} PJRT_Executable_OutputElementTypes_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Executable_OutputElementTypes_Args, num_output_types) == 40,
              "Executable_OutputElementTypes");

typedef struct PJRT_Executable_OutputDimensions_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Executable* executable;
  size_t num_outputs;     /* out */
  const int64_t* dims;    /* out: all outputs' dims, flattened */
  const size_t* dim_sizes; /* out: each output's rank */
} PJRT_Executable_OutputDimensions_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Executable_OutputDimensions_Args, dim_sizes) == 48,
              "Executable_OutputDimensions");

typedef struct PJRT_Executable_Serialize_Args {
  TPU_PJRT_ARGS_HEADER;
  const PJRT_Executable* executable;
  const char* serialized_bytes;                 /* out, lives as long as the holder */
  size_t serialized_bytes_size;                 /* out */
  PJRT_SerializedExecutable* serialized_executable; /* out: the holder */
  void (*serialized_executable_deleter)(PJRT_SerializedExecutable* holder); /* out */
} PJRT_Executable_Serialize_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Executable_Serialize_Args, serialized_executable_deleter) ==
                  56,
              "Executable_Serialize");

typedef struct PJRT_Executable_DeserializeAndLoad_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Client* client;
  const char* serialized_executable;
  size_t serialized_executable_size;
  PJRT_LoadedExecutable* loaded_executable; /* out */
  const char* overridden_serialized_compile_options;
  size_t overridden_serialized_compile_options_size;
  const void* load_options; /* newer than 0.81 */
} PJRT_Executable_DeserializeAndLoad_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Executable_DeserializeAndLoad_Args, load_options) == 72,
              "Executable_DeserializeAndLoad");

typedef struct PJRT_LoadedExecutable_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* executable;
} PJRT_LoadedExecutable_Destroy_Args;
typedef struct PJRT_LoadedExecutable_GetExecutable_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* loaded_executable;
  PJRT_Executable* executable; /* out: destroy after use */
} PJRT_LoadedExecutable_GetExecutable_Args;
static_assert(TPU_PJRT_SIZE(PJRT_LoadedExecutable_GetExecutable_Args, executable) == 32,
              "LoadedExecutable_GetExecutable");

typedef struct PJRT_ExecuteOptions {
  TPU_PJRT_ARGS_HEADER;
  void** send_callbacks;
  void** recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t* non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
  void* context;
  const char* call_location;
  size_t num_tasks;
  int* task_ids;
  int64_t* incarnation_ids; /* end of the 0.81 layout (112) */
  void* multi_slice_config;
  bool use_major_to_minor_data_layout_for_callbacks;
  void* hlo_output_callbacks;
  size_t num_hlo_output_callbacks; /* end at 144 */
  const void* custom_options;      /* 0.115 / 0.116 */
  size_t num_custom_options;       /* end at 160 */
} PJRT_ExecuteOptions;
static_assert(offsetof(PJRT_ExecuteOptions, launch_id) == 48, "ExecuteOptions.launch_id");
static_assert(offsetof(PJRT_ExecuteOptions, incarnation_ids) == 104, "ExecuteOptions@104");
static_assert(offsetof(PJRT_ExecuteOptions, use_major_to_minor_data_layout_for_callbacks) ==
                  120,
              "ExecuteOptions@120");
static_assert(offsetof(PJRT_ExecuteOptions, custom_options) == 144, "ExecuteOptions@144");
static_assert(TPU_PJRT_SIZE(PJRT_ExecuteOptions, num_custom_options) == 160, "ExecuteOptions");

typedef struct PJRT_LoadedExecutable_Execute_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_LoadedExecutable* executable;
  PJRT_ExecuteOptions* options; /* must be non-NULL */
  PJRT_Buffer* const* const* argument_lists; /* [device][arg] */
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer** const* output_lists; /* [device][output], caller allocates */
  PJRT_Event** device_complete_events; /* optional out */
  PJRT_Device* execute_device;        /* non-NULL requires num_devices == 1 */
} PJRT_LoadedExecutable_Execute_Args;
static_assert(offsetof(PJRT_LoadedExecutable_Execute_Args, output_lists) == 56, "Execute@56");
static_assert(TPU_PJRT_SIZE(PJRT_LoadedExecutable_Execute_Args, execute_device) == 80,
              "LoadedExecutable_Execute");

/* ---- buffers ---- */
typedef struct PJRT_Buffer_Destroy_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
} PJRT_Buffer_Destroy_Args;
typedef struct PJRT_Buffer_ElementType_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  int type; /* out */
} PJRT_Buffer_ElementType_Args;
typedef struct PJRT_Buffer_Dimensions_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  const int64_t* dims; /* out, owned by the buffer */
  size_t num_dims;     /* out */
} PJRT_Buffer_Dimensions_Args;
typedef struct PJRT_Buffer_OnDeviceSizeInBytes_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  size_t on_device_size_in_bytes; /* out */
} PJRT_Buffer_OnDeviceSizeInBytes_Args;
typedef struct PJRT_Buffer_ToHostBuffer_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* src;
  PJRT_Buffer_MemoryLayout* host_layout; /* NULL: dense row-major */
  void* dst;                             /* NULL asks the size */
  size_t dst_size;
  PJRT_Event* event; /* out */
} PJRT_Buffer_ToHostBuffer_Args;
typedef struct PJRT_Buffer_ReadyEvent_Args {
  TPU_PJRT_ARGS_HEADER;
  PJRT_Buffer* buffer;
  PJRT_Event* event; /* out */
} PJRT_Buffer_ReadyEvent_Args;
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_Destroy_Args, buffer) == 24, "Buffer_Destroy");
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_ElementType_Args, type) == 28, "Buffer_ElementType");
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_Dimensions_Args, num_dims) == 40, "Buffer_Dimensions");
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_OnDeviceSizeInBytes_Args, on_device_size_in_bytes) ==
                  32,
              "Buffer_OnDeviceSizeInBytes");
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_ToHostBuffer_Args, event) == 56, "Buffer_ToHostBuffer");
static_assert(TPU_PJRT_SIZE(PJRT_Buffer_ReadyEvent_Args, event) == 32, "Buffer_ReadyEvent");

/* ---- the function table ----
 * X(slot, Name): function `Name` takes PJRT_<Name>_Args* and returns PJRT_Error*.
 * Error_Destroy (0) and Error_Message (1) return void and are declared apart. */
#define TPU_PJRT_FUNCTIONS(X)               \
  X(2, Error_GetCode)                       \
  X(3, Plugin_Initialize)                   \
  X(4, Plugin_Attributes)                   \
  X(5, Event_Destroy)                       \
  X(6, Event_IsReady)                       \
  X(7, Event_Error)                         \
  X(8, Event_Await)                         \
  X(9, Event_OnReady)                       \
  X(10, Client_Create)                      \
  X(11, Client_Destroy)                     \
  X(12, Client_PlatformName)                \
  X(14, Client_PlatformVersion)             \
  X(16, Client_AddressableDevices)          \
  X(20, Client_Compile)                     \
  X(22, Client_BufferFromHostBuffer)        \
  X(26, DeviceDescription_Kind)             \
  X(29, Device_GetDescription)              \
  X(33, Device_DefaultMemory)               \
  X(34, Device_MemoryStats)                 \
  X(40, Executable_Destroy)                 \
  X(44, Executable_NumOutputs)              \
  X(49, Executable_Serialize)               \
  X(50, LoadedExecutable_Destroy)           \
  X(51, LoadedExecutable_GetExecutable)     \
  X(55, LoadedExecutable_Execute)           \
  X(56, Executable_DeserializeAndLoad)      \
  X(58, Buffer_Destroy)                     \
  X(59, Buffer_ElementType)                 \
  X(60, Buffer_Dimensions)                  \
  X(64, Buffer_OnDeviceSizeInBytes)         \
  X(70, Buffer_ToHostBuffer)                \
  X(72, Buffer_ReadyEvent)                  \
  X(90, Executable_OutputElementTypes)      \
  X(91, Executable_OutputDimensions)

enum { TPU_PJRT_SLOT_Error_Destroy = 0, TPU_PJRT_SLOT_Error_Message = 1 };
typedef void PJRT_Error_Destroy_Fn(PJRT_Error_Destroy_Args* args);
typedef void PJRT_Error_Message_Fn(PJRT_Error_Message_Args* args);

#define TPU_PJRT_DECLARE_FN_(slot, Name)                       \
  enum { TPU_PJRT_SLOT_##Name = (slot) };                      \
  typedef PJRT_Error* PJRT_##Name##_Fn(PJRT_##Name##_Args* args);
TPU_PJRT_FUNCTIONS(TPU_PJRT_DECLARE_FN_)
#undef TPU_PJRT_DECLARE_FN_

/* A generic function pointer: converted back to the slot's real type before use. */
typedef void (*tpu_pjrt_fn_t)(void);
/* Function pointer number `slot`, or NULL when the table is too short or the
 * plugin leaves it empty. */
tpu_pjrt_fn_t tpu_pjrt_slot(const PJRT_Api* api, int slot);
#define TPU_PJRT_FN(api, Name) ((PJRT_##Name##_Fn*)tpu_pjrt_slot((api), TPU_PJRT_SLOT_##Name))

/* Converts `err` (NULL = OK) into a status with the PJRT code and message, and
 * destroys it. */
tpu_status_t* tpu_pjrt_status(const PJRT_Api* api, PJRT_Error* err, const char* file, int line);
/* UNIMPLEMENTED status for a slot the plugin does not provide. */
tpu_status_t* tpu_pjrt_missing(const char* name, const char* file, int line);

/* Calls PJRT function `Name` with `args` (a pointer) and yields a status. */
#define TPU_PJRT_CALL(api, Name, args)                                                     \
  (TPU_PJRT_FN((api), Name)                                                                \
       ? tpu_pjrt_status((api), TPU_PJRT_FN((api), Name)(args), __FILE__, __LINE__)        \
       : tpu_pjrt_missing("PJRT_" #Name, __FILE__, __LINE__))

/* Destroys an event; NULL is fine. */
void tpu_pjrt_event_destroy(const PJRT_Api* api, PJRT_Event* event);
/* Destroys a buffer handle; a NULL handle or api (after a shutdown) is fine. */
void tpu_pjrt_buffer_destroy(const PJRT_Api* api, PJRT_Buffer* buffer);
/* Waits for `event`, destroys it, and returns its error. */
tpu_status_t* tpu_pjrt_event_await(const PJRT_Api* api, PJRT_Event* event);

/* ---- the loaded plugin (plugin.c) ---- */
typedef struct tpu_plugin {
  void* handle; /* dlopen handle; kept open for the process' lifetime */
  const PJRT_Api* api;
  int api_major;
  int api_minor;
  bool has_stablehlo_version;
  int64_t stablehlo_version[3]; /* attribute stablehlo_current_version */
} tpu_plugin_t;

/* dlopen + GetPjrtApi + version check (major 0) + Plugin_Initialize (once per
 * process and plugin) + attributes. */
tpu_status_t* tpu_plugin_load(const char* path, tpu_plugin_t* out_plugin);

/* ---- the process-wide client (client.c) ----
 * Valid between tpu_runtime_init and tpu_runtime_shutdown; NULL otherwise. */
const PJRT_Api* tpu_client_api(void);
PJRT_Client* tpu_client_pjrt(void);
PJRT_Device* tpu_client_device(int device); /* NULL when out of range */
const tpu_plugin_t* tpu_client_plugin(void);

/* ---- runtime glue over PJRT (buffer.c) ---- */
typedef struct tpu_buffer tpu_buffer_t;
/* PJRT_Buffer_Type of a dtype; never INVALID for a valid dtype (checked). */
int tpu_dtype_to_pjrt(tpu_dtype_t t);
/* Wraps a PJRT buffer (ownership moves in, also on failure). */
tpu_status_t* tpu_buffer_wrap(PJRT_Buffer* pjrt, int device, const tpu_aval_t* aval,
                              const char* producer, tpu_buffer_t** out_buffer);
/* The PJRT buffer behind `buf` (borrowed); a fused-program placeholder
 * (device.h) has its program run first, and reports why when it failed. */
tpu_status_t* tpu_buffer_materialize(tpu_buffer_t* buf, PJRT_Buffer** out_pjrt);
/* Asks whether the buffer's producer has finished; with `wait` blocks until it
 * has. Returns its asynchronous error, annotated with the producer. Does not
 * count as a user-visible sync. */
tpu_status_t* tpu_buffer_check(tpu_buffer_t* buf, bool wait, bool* out_ready);

#endif
