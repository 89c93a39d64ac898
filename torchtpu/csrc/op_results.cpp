// Runtime results → tensors, or written into in-place and out= arguments (op_io.h).
#include <ATen/MemoryOverlap.h>
#include <ATen/native/Resize.h>

#include <algorithm>
#include <cstring>

#include "op_io.h"

namespace torchtpu {

Results::Results(int cap) : r(cap), adopted(cap, false) {}
Results::~Results() {
  for (int i = 0; i < n; ++i)
    if (!adopted[i]) tpu_storage_release(r[i].storage);
}

static c10::IntArrayRef result_sizes(const tpu_result_t& r) { return c10::IntArrayRef(r.sizes, r.rank); }

tpu_status_t* run_lowering(const char* name, const char* overload, int device, const tpu_arg_t* args, int nargs,
                           Results& rs, const std::string& full) {
  const int cap = static_cast<int>(rs.r.size());
  tpu_status_t* st = tpu_op_run(name, overload, device, args, nargs, cap, rs.r.data(), &rs.n);
  if (rs.n < 0 || rs.n > cap) rs.n = 0;
  if (st && tpu_status_code(st) == TPU_UNIMPLEMENTED) return st;
  if (st) throw_status(st, "tpu: " + full);
  return nullptr;
}

tpu_tensor_t describe_result(const tpu_result_t& r) {
  tpu_tensor_t d;
  std::memset(&d, 0, sizeof(d));
  d.storage = r.storage;
  d.dtype = r.dtype;
  d.rank = r.rank;
  int64_t stride = 1;
  for (int i = r.rank - 1; i >= 0; --i) {
    d.sizes[i] = r.sizes[i];
    d.strides[i] = stride;
    stride *= std::max<int64_t>(r.sizes[i], 1);
  }
  d.offset = 0;
  return d;
}

static void validate_result(const tpu_result_t& r, const std::string& full) {
  TORCH_CHECK(r.storage != nullptr && r.rank >= 0 && r.rank <= TPU_MAX_RANK && tpu_dtype_valid(r.dtype),
              "tpu: the runtime returned an invalid result for ", full);
}

at::Tensor wrap_result(Results& rs, int i, const std::string& full) {
  TORCH_CHECK(i < rs.n, "tpu: the runtime returned too few results for ", full);
  tpu_result_t& r = rs.r[i];
  validate_result(r, full);
  const c10::ScalarType st = scalar_type_of(r.dtype);
  int64_t numel = 1;
  for (int k = 0; k < r.rank; ++k) numel *= r.sizes[k];
  // Data-dependent results (nonzero …) keep their padded storage: size it from the runtime.
  const size_t nbytes = std::max(static_cast<size_t>(numel) * c10::elementSize(st), tpu_storage_nbytes(r.storage));
  const c10::DeviceIndex dev = static_cast<c10::DeviceIndex>(tpu_storage_device(r.storage));
  c10::DataPtr dp = make_data_ptr(r.storage, dev);
  rs.adopted[i] = true;
  auto impl = c10::make_intrusive<c10::StorageImpl>(c10::StorageImpl::use_byte_size_t(), nbytes,
                                                     std::move(dp), tpu_allocator(), /*resizable=*/true);
  at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(
      c10::Storage(std::move(impl)), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::scalarTypeToTypeMeta(st));
  t.unsafeGetTensorImpl()->set_sizes_contiguous(result_sizes(r));
  return t;
}

// Copies result i into a write argument (in-place self, out=, or a mutated buffer).
void write_result(Results& rs, int i, const at::Tensor& target, bool is_out, const std::string& full) {
  TORCH_CHECK(i < rs.n, "tpu: the runtime returned too few results for ", full);
  const tpu_result_t& r = rs.r[i];
  validate_result(r, full);
  TORCH_CHECK(target.defined(), "tpu: ", full, ": undefined output tensor");
  const c10::ScalarType rst = scalar_type_of(r.dtype);
  const tpu_dtype_t tdt = tpu_dtype_of(target.scalar_type());
  TORCH_CHECK(tpu_dtype_can_cast(r.dtype, tdt), "result type ", rst,
              " can't be cast to the desired output type ", target.scalar_type());
  if (!target.sizes().equals(result_sizes(r))) {
    if (is_out) {
      at::native::resize_output(target, result_sizes(r));
    } else {
      TORCH_CHECK(false, "output with shape ", shape_str(target.sizes()),
                  " doesn't match the broadcast shape ", shape_str(result_sizes(r)));
    }
  }
  if (target.numel() == 0) return;
  at::assert_no_internal_overlap(target);
  const tpu_tensor_t dst = describe(target);
  const tpu_tensor_t src = describe_result(r);
  check_status(tpu_tensor_copy(&dst, &src), "tpu: " + full + ": writing the result");
}

c10::IValue scalar_result(Results& rs, int i, const c10::TypePtr& type, const std::string& full) {
  TORCH_CHECK(i < rs.n, "tpu: the runtime returned too few results for ", full);
  const tpu_result_t& r = rs.r[i];
  validate_result(r, full);
  at::Tensor tmp = at::empty(result_sizes(r), at::TensorOptions().dtype(scalar_type_of(r.dtype)));
  TORCH_CHECK(tmp.numel() == 1, "tpu: ", full, ": expected a scalar result, got shape ",
              shape_str(result_sizes(r)));
  const tpu_tensor_t src = describe_result(r);
  check_status(tpu_tensor_download(&src, tmp.mutable_data_ptr(), tmp.nbytes()),
               "tpu: " + full + ": reading the result");
  switch (type->kind()) {
    case c10::TypeKind::BoolType:
      return c10::IValue(tmp.item<bool>());
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return c10::IValue(tmp.item<int64_t>());
    case c10::TypeKind::FloatType:
    case c10::TypeKind::SymFloatType:
      return c10::IValue(tmp.item<double>());
    default:
      return c10::IValue(tmp.item());
  }
}

}  // namespace torchtpu
