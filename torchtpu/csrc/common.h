// Shared helpers of the torchtpu C++ binding: dtype mapping, status → exception,
// storage access, tensor descriptors. No lowering logic lives in C++.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/Device.h>

#include <string>

#include "torchtpu/dtype.h"
#include "torchtpu/runtime.h"
#include "torchtpu/status.h"
#include "torchtpu/tensor.h"

namespace torchtpu {

constexpr c10::DeviceType kTpu = c10::DeviceType::PrivateUse1;

// ---- device.cpp ----
c10::Allocator* tpu_allocator();
c10::DeviceIndex current_device();
void set_current_device(c10::DeviceIndex index);
void set_current_device_unchecked(c10::DeviceIndex index) noexcept;
int device_count();  // 0 when the runtime is not initialised
// Wraps an owned tpu storage (the reference is adopted) as a c10 DataPtr.
c10::DataPtr make_data_ptr(tpu_storage_t* storage, c10::DeviceIndex device);
// Grows/shrinks a storage's bytes on the device (keeps the common prefix).
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);
// The runtime generator behind a tpu torch.Generator (borrowed).
tpu_generator_t* generator_state(const at::Generator& gen);

// ---- helpers (inline) ----

// Throws the PyTorch exception that matches a tpu status, after freeing it.
// `what` names the operation (e.g. "aten::add.Tensor") for the message.
[[noreturn]] void throw_status(tpu_status_t* status, const std::string& what);

inline void check_status(tpu_status_t* status, const std::string& what) {
  if (status) throw_status(status, what);
}

inline bool to_tpu_dtype(c10::ScalarType t, tpu_dtype_t* out) {
  switch (t) {
    case c10::ScalarType::Bool: *out = TPU_BOOL; return true;
    case c10::ScalarType::Byte: *out = TPU_U8; return true;
    case c10::ScalarType::Char: *out = TPU_I8; return true;
    case c10::ScalarType::Short: *out = TPU_I16; return true;
    case c10::ScalarType::Int: *out = TPU_I32; return true;
    case c10::ScalarType::Long: *out = TPU_I64; return true;
    case c10::ScalarType::Half: *out = TPU_F16; return true;
    case c10::ScalarType::BFloat16: *out = TPU_BF16; return true;
    case c10::ScalarType::Float: *out = TPU_F32; return true;
    case c10::ScalarType::Double: *out = TPU_F64; return true;
    case c10::ScalarType::ComplexFloat: *out = TPU_C64; return true;
    case c10::ScalarType::ComplexDouble: *out = TPU_C128; return true;
    case c10::ScalarType::UInt16: *out = TPU_U16; return true;
    case c10::ScalarType::UInt32: *out = TPU_U32; return true;
    case c10::ScalarType::UInt64: *out = TPU_U64; return true;
    default: return false;
  }
}

inline tpu_dtype_t tpu_dtype_of(c10::ScalarType t) {
  tpu_dtype_t d;
  TORCH_CHECK_NOT_IMPLEMENTED(to_tpu_dtype(t, &d), "tpu: dtype ", t, " is not supported on the tpu device");
  return d;
}

inline c10::ScalarType scalar_type_of(tpu_dtype_t d) {
  switch (d) {
    case TPU_BOOL: return c10::ScalarType::Bool;
    case TPU_U8: return c10::ScalarType::Byte;
    case TPU_I8: return c10::ScalarType::Char;
    case TPU_I16: return c10::ScalarType::Short;
    case TPU_I32: return c10::ScalarType::Int;
    case TPU_I64: return c10::ScalarType::Long;
    case TPU_F16: return c10::ScalarType::Half;
    case TPU_BF16: return c10::ScalarType::BFloat16;
    case TPU_F32: return c10::ScalarType::Float;
    case TPU_F64: return c10::ScalarType::Double;
    case TPU_C64: return c10::ScalarType::ComplexFloat;
    case TPU_C128: return c10::ScalarType::ComplexDouble;
    case TPU_U16: return c10::ScalarType::UInt16;
    case TPU_U32: return c10::ScalarType::UInt32;
    case TPU_U64: return c10::ScalarType::UInt64;
    default: break;
  }
  TORCH_CHECK(false, "tpu: runtime returned an invalid dtype ", static_cast<int>(d));
}

// The deleter of every DataPtr our allocator makes (its context is the storage).
void release_storage(void* ctx);
// storage_of's slow path: NULL for an empty DataPtr; raises for memory that
// torchtpu did not allocate (whose context is not a tpu storage).
tpu_storage_t* foreign_storage(const c10::DataPtr& p);
// The tpu storage behind a tensor's storage (borrowed). NULL for a storage
// without memory (never produced by our allocator).
inline tpu_storage_t* storage_of(const c10::Storage& storage) {
  const c10::DataPtr& p = storage.data_ptr();
  if (C10_UNLIKELY(p.get_deleter() != &release_storage)) return foreign_storage(p);
  return static_cast<tpu_storage_t*>(p.get_context());
}
inline tpu_storage_t* storage_of(const at::TensorBase& t) {
  return storage_of(t.storage());
}

// A borrowed descriptor of a tpu tensor's view.
inline tpu_tensor_t describe(const at::TensorBase& t) {
  tpu_tensor_t d;
  std::memset(&d, 0, sizeof(d));
  TORCH_CHECK(t.dim() <= TPU_MAX_RANK, "tpu: tensors of rank ", t.dim(),
              " are not supported (at most ", TPU_MAX_RANK, ")");
  d.storage = storage_of(t);
  TORCH_CHECK(d.storage != nullptr, "tpu: tensor has no device storage");
  d.dtype = tpu_dtype_of(t.scalar_type());
  d.rank = static_cast<int32_t>(t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) {
    d.sizes[i] = t.size(i);
    d.strides[i] = t.stride(i);
  }
  d.offset = t.storage_offset();
  return d;
}

std::string shape_str(c10::IntArrayRef sizes);

}  // namespace torchtpu
