// Direct PrivateUse1 kernels for metadata and memory ops: allocation, views,
// resize_/set_, host<->device copies and .item(). Numeric ops go through the
// boxed fallback (fallback.cpp) to the C runtime.
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include "common.h"

namespace torchtpu {
namespace {

// Runs `fn` with the current device set to `device` (when it names one).
struct MaybeDeviceGuard {
  c10::DeviceIndex saved;
  bool active = false;
  explicit MaybeDeviceGuard(std::optional<c10::Device> device) : saved(current_device()) {
    if (device && device->has_index()) {
      TORCH_CHECK(device->type() == kTpu, "tpu: expected a tpu device, got ", *device);
      set_current_device(device->index());
      active = true;
    }
  }
  ~MaybeDeviceGuard() {
    if (active) {
      try {
        set_current_device(saved);
      } catch (...) {
      }
    }
  }
};

void check_factory(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!layout || *layout == at::kStrided, "tpu: only strided tensors are supported, got layout ",
              *layout);
  TORCH_CHECK(!pin_memory || !*pin_memory, "Only dense CPU tensors can be pinned");
}

at::Tensor tpu_empty(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                     std::optional<at::Layout> layout, std::optional<at::Device> device,
                     std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_factory(layout, pin_memory);
  MaybeDeviceGuard g(device);
  const auto st = c10::dtype_or_default(dtype);
  tpu_dtype_of(st);  // reject dtypes the runtime cannot hold
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), tpu_allocator(),
                                   c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st,
                                   memory_format);
}

at::Tensor tpu_empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                             std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                             std::optional<at::Device> device, std::optional<bool> pin_memory) {
  check_factory(layout, pin_memory);
  MaybeDeviceGuard g(device);
  const auto st = c10::dtype_or_default(dtype);
  tpu_dtype_of(st);
  return at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), tpu_allocator(),
                                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), st);
}

// ---- views (metadata only) ----

at::Tensor tpu_as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                          std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> off;
  if (storage_offset) off = storage_offset->guard_int(__FILE__, __LINE__);
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor tpu_view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor tpu_reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor tpu_unfold(const at::Tensor& self, int64_t dim, int64_t size, int64_t step) {
  return at::native::unfold(self, dim, size, step);
}

at::Tensor tpu_view_as_real(const at::Tensor& self) { return at::native::view_as_real(self); }
at::Tensor tpu_view_as_complex(const at::Tensor& self) { return at::native::view_as_complex(self); }

// ---- resize_ / set_ ----

// Makes sure `self`'s storage holds its current view (grows it on the device).
void ensure_storage_fits(const at::Tensor& self) {
  if (self.numel() == 0) return;
  const size_t itemsize = self.dtype().itemsize();
  const size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(), itemsize,
                                                       self.storage_offset());
  if (need > self.storage().nbytes()) resize_storage_bytes(self.storage(), need);
}

const at::Tensor& tpu_resize_(const at::Tensor& self, c10::SymIntArrayRef size_sym,
                              std::optional<at::MemoryFormat> memory_format) {
  const auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  auto* impl = self.unsafeGetTensorImpl();
  at::native::resize_impl_cpu_(impl, size, std::nullopt, /*resize_storage=*/false);
  ensure_storage_fits(self);
  if (memory_format) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format",
                *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_storage_impl(at::Tensor& self, c10::Storage source, int64_t offset, at::IntArrayRef size,
                             at::IntArrayRef stride) {
  TORCH_CHECK(source.device().type() == kTpu, "tpu: set_ expects a tpu storage, got one on ",
              source.device());
  const bool has_stride = !(stride.empty() && !size.empty()) && stride.data() != nullptr;
  at::IntArrayRef st = has_stride ? stride : at::IntArrayRef();
  at::native::checkSetStorage(self, std::move(source), offset, size, st);
  self.unsafeGetTensorImpl()->set_storage_offset(offset);
  at::OptionalIntArrayRef st_opt = has_stride ? at::OptionalIntArrayRef(stride) : std::nullopt;
  at::native::resize_impl_cpu_(self.unsafeGetTensorImpl(), size, st_opt, /*resize_storage=*/false);
  ensure_storage_fits(self);
  return self;
}

at::Tensor& tpu_set_storage_offset(at::Tensor& self, c10::Storage source, c10::SymInt offset,
                                   c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return set_storage_impl(self, std::move(source), offset.guard_int(__FILE__, __LINE__),
                          C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

at::Tensor& tpu_set_storage(at::Tensor& self, c10::Storage source) {
  const size_t itemsize = self.dtype().itemsize();
  TORCH_CHECK(source.nbytes() % itemsize == 0, "tpu: set_: storage of ", source.nbytes(),
              " bytes is not a multiple of the element size ", itemsize);
  const int64_t n = static_cast<int64_t>(source.nbytes() / itemsize);
  return set_storage_impl(self, std::move(source), 0, {n}, {});
}

at::Tensor& tpu_set_tensor(at::Tensor& self, const at::Tensor& source) {
  TORCH_CHECK(self.dtype() == source.dtype(), "Could not set tensor of type ", source.dtype(),
              " to a tensor of type ", self.dtype());
  if (self.unsafeGetTensorImpl() != source.unsafeGetTensorImpl()) {
    set_storage_impl(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
  }
  return self;
}

at::Tensor& tpu_set_empty(at::Tensor& self) {
  MaybeDeviceGuard g(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), /*resizable=*/true);
  return set_storage_impl(self, std::move(storage), 0, {0}, {});
}

bool tpu_is_set_to(const at::Tensor& self, const at::Tensor& other) {
  return self.storage().is_alias_of(other.storage()) &&
         self.storage_offset() == other.storage_offset() && self.sizes().equals(other.sizes()) &&
         self.strides().equals(other.strides());
}

// ---- copies ----

// src's values in a tensor without conj/neg bits (conj_physical and neg are real ops).
at::Tensor resolved(const at::Tensor& src) {
  at::Tensor v = src;
  if (v.is_conj()) v = at::conj_physical(v.conj());
  if (v.is_neg()) v = at::neg(v._neg_view());
  return v;
}

// A tensor without conj/neg bits holding what dst's memory must hold for dst to
// read src's values through its own bits. Works on either device.
at::Tensor stored_for(const at::Tensor& src, const at::Tensor& dst) {
  at::Tensor v = resolved(src);
  if (dst.is_conj()) v = at::conj_physical(v);
  if (dst.is_neg()) v = at::neg(v);
  return v;
}

at::Tensor tpu_copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  // `self` is the source (at::_copy_from(src, dst)).
  TORCH_CHECK(self.defined() && dst.defined(), "tpu: copy_ of an undefined tensor");
  if (dst.numel() == 0) return dst;
  const bool src_tpu = self.device().type() == kTpu;
  const bool dst_tpu = dst.device().type() == kTpu;
  at::assert_no_internal_overlap(dst);
  at::assert_no_partial_overlap(dst, self);  // x[1:].copy_(x[:-1]): refused, as CPU's TensorIterator does
  if (!src_tpu && dst_tpu) {
    TORCH_CHECK(self.device().is_cpu(), "tpu: copies from ", self.device(), " to tpu are not supported");
    at::Tensor host = stored_for(self.expand(dst.sizes()), dst);
    tpu_dtype_t hd;
    if (!to_tpu_dtype(host.scalar_type(), &hd)) {
      host = host.to(dst.scalar_type());
      hd = tpu_dtype_of(dst.scalar_type());
    }
    host = host.contiguous();
    const tpu_tensor_t d = describe(dst);
    check_status(tpu_tensor_upload(&d, host.const_data_ptr(), hd), "tpu: copy cpu -> tpu");
  } else if (src_tpu && !dst_tpu) {
    TORCH_CHECK(dst.device().is_cpu(), "tpu: copies from tpu to ", dst.device(), " are not supported");
    // Straight into `dst` when it has the source's dense layout (`.cpu()`, `.to("cpu")`):
    // one host copy instead of two.
    const bool direct = dst.is_contiguous() && dst.scalar_type() == self.scalar_type() &&
                        dst.sizes().equals(self.sizes()) && !self.is_conj() && !self.is_neg() &&
                        !dst.is_conj() && !dst.is_neg();
    at::Tensor tmp = direct ? dst : at::empty(self.sizes(), self.options().device(at::kCPU));
    if (tmp.numel() > 0) {
      const tpu_tensor_t s = describe(self);
      check_status(tpu_tensor_download(&s, tmp.mutable_data_ptr(), tmp.nbytes()), "tpu: copy tpu -> cpu");
    }
    if (direct) return dst;
    if (self.is_conj()) tmp = tmp.conj();
    if (self.is_neg()) tmp = tmp._neg_view();
    dst.copy_(tmp);
  } else {
    TORCH_CHECK(src_tpu && dst_tpu, "tpu: unsupported copy from ", self.device(), " to ", dst.device());
    if (self.is_same(dst)) return dst;
    if (self.numel() == 0) return dst;
    // Memory is copied as it is, so it must already be what dst's bits read back.
    const at::Tensor src = self.is_conj() == dst.is_conj() && self.is_neg() == dst.is_neg()
                               ? self
                               : stored_for(self, dst);
    const tpu_tensor_t d = describe(dst);
    const tpu_tensor_t s = describe(src);
    check_status(tpu_tensor_copy(&d, &s), "tpu: copy tpu -> tpu");
  }
  return dst;
}

// A conj/neg-bit tensor would reach _copy_from through PyTorch's Conjugate/Negative
// fallback, which materialises it with clone → copy_ → _copy_from again: endless
// recursion. Every tpu copy handles the bits itself (stored_for: real ops, no bits).
at::Tensor tpu_copy_from_resolving_bits(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  if (self.device().type() == kTpu || dst.device().type() == kTpu) return tpu_copy_from(self, dst, non_blocking);
  TORCH_CHECK(!dst.is_conj() && !dst.is_neg(), "tpu: copy into a conjugate or negative view is not supported");
  return at::_copy_from(resolved(self), dst, non_blocking);
}

at::Tensor tpu_copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (!dst.sizes().equals(self.sizes())) dst.resize_(self.sizes());
  return tpu_copy_from(self, dst, false);
}

at::Scalar tpu_local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(),
              " elements cannot be converted to Scalar");
  at::Tensor tmp = at::empty({}, self.options().device(at::kCPU));
  const tpu_tensor_t s = describe(self);
  check_status(tpu_tensor_download(&s, tmp.mutable_data_ptr(), tmp.nbytes()), "tpu: .item()");
  if (self.is_conj()) tmp = tmp.conj().resolve_conj();
  if (self.is_neg()) tmp = tmp.neg();
  return tmp.item();
}

// aten::native_batch_norm's schema does not mark running_mean/var as mutated,
// so the boxed fallback could not write the updated statistics back. Route it
// to _native_batch_norm_legit, whose schema does (Tensor(a!) running_mean).
std::tuple<at::Tensor, at::Tensor, at::Tensor> tpu_native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& running_mean,
    const std::optional<at::Tensor>& running_var, bool training, double momentum, double eps) {
  if (running_mean && running_mean->defined() && running_var && running_var->defined()) {
    at::Tensor rm = *running_mean;
    at::Tensor rv = *running_var;
    return at::_native_batch_norm_legit(input, weight, bias, rm, rv, training, momentum, eps);
  }
  return at::_native_batch_norm_legit(input, weight, bias, training, momentum, eps);
}

// Module._apply and `param.data = t` keep a parameter's identity only when this
// holds; c10's own list of dense backends leaves out PrivateUse1, so without it
// `model.to("tpu")` replaces parameters and unties shared weights (GPT-2's
// lm_head/wte), and FSDP2's `param.data = ...` raises. Dense strided tensors of
// any dense backend (ours included) are compatible, exactly as CPU and CUDA are.
bool tpu_has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    constexpr auto backends = c10::DispatchKeySet(
        {c10::BackendComponent::CPUBit, c10::BackendComponent::CUDABit, c10::BackendComponent::MPSBit,
         c10::BackendComponent::HIPBit, c10::BackendComponent::XPUBit, c10::BackendComponent::HPUBit,
         c10::BackendComponent::MTIABit, c10::BackendComponent::PrivateUse1Bit});
    const c10::DispatchKeySet ks = t.key_set();
    return t.layout() == at::kStrided && ks.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) &&
           ks.has_any(backends);
  };
  if (dense(self) && dense(from)) return true;
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set());
}

// Tensor.record_stream: a device buffer is reference-counted and PJRT frees it
// only after every execution reading it has finished, so memory a stream still
// uses is never reused (docs/streams.md); what is left is checking the call.
void tpu_record_stream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == kTpu, "record_stream: expected a tpu stream, got ", stream);
  TORCH_CHECK(stream.device_index() == self.device().index(), "record_stream: the stream is on ",
              stream.device(), ", the tensor on ", self.device());
  TORCH_CHECK(storage_of(self) != nullptr, "record_stream: the tensor has no tpu storage");
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(tpu_has_compatible_shallow_copy_type));
  m.impl("empty.memory_format", TORCH_FN(tpu_empty));
  m.impl("empty_strided", TORCH_FN(tpu_empty_strided));
  m.impl("as_strided", TORCH_FN(tpu_as_strided));
  m.impl("view", TORCH_FN(tpu_view));
  m.impl("_reshape_alias", TORCH_FN(tpu_reshape_alias));
  m.impl("unfold", TORCH_FN(tpu_unfold));
  m.impl("view_as_real", TORCH_FN(tpu_view_as_real));
  m.impl("view_as_complex", TORCH_FN(tpu_view_as_complex));
  m.impl("resize_", TORCH_FN(tpu_resize_));
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(tpu_set_storage_offset));
  m.impl("set_.source_Storage", TORCH_FN(tpu_set_storage));
  m.impl("set_.source_Tensor", TORCH_FN(tpu_set_tensor));
  m.impl("set_", TORCH_FN(tpu_set_empty));
  m.impl("is_set_to", TORCH_FN(tpu_is_set_to));
  m.impl("_copy_from", TORCH_FN(tpu_copy_from));
  m.impl("_copy_from_and_resize", TORCH_FN(tpu_copy_from_and_resize));
  m.impl("_local_scalar_dense", TORCH_FN(tpu_local_scalar_dense));
  m.impl("record_stream", TORCH_FN(tpu_record_stream));
  m.impl("native_batch_norm", TORCH_FN(tpu_native_batch_norm));
}

// Only tpu uses _copy_from (CPU copies never reach it), so these keys are safe to claim.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) { m.impl("_copy_from", TORCH_FN(tpu_copy_from_resolving_bits)); }
TORCH_LIBRARY_IMPL(aten, Negative, m) { m.impl("_copy_from", TORCH_FN(tpu_copy_from_resolving_bits)); }

}  // namespace torchtpu
