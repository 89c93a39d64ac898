// The boxed PrivateUse1 fallback: every aten op without a direct kernel is turned
// into a C op descriptor (tpu_arg_t per schema argument) and run by the C runtime
// (tpu_op_run). Results are wrapped as tensors, or written into in-place / out=
// arguments. Optional CPU fallback (TORCHTPU_CPU_FALLBACK=1) for unsupported ops.
#include <algorithm>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

#include "common.h"

namespace torchtpu {
namespace {

bool cpu_fallback_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("TORCHTPU_CPU_FALLBACK");
    return e != nullptr && std::string(e) == "1";
  }();
  return on;
}

void run_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const std::string& full) {
  static std::mutex mu;
  static std::unordered_set<std::string> warned;
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = warned.insert(full).second;
  }
  if (first) {
    TORCH_WARN("tpu: operator '", full,
               "' has no tpu lowering; running it on the CPU because TORCHTPU_CPU_FALLBACK=1 "
               "(this copies its inputs to the host and its results back, and is slow).");
  }
  tpu_metric_add(TPU_METRIC_FALLBACKS, 1);
  at::native::cpu_fallback(op, stack);
}

// Bool/uint8 masks in an index list → one long index tensor per mask dim.
std::vector<at::Tensor> expand_masks(const std::vector<at::Tensor>& items, int device) {
  std::vector<at::Tensor> out;
  for (const at::Tensor& t : items) {
    if (t.defined() && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte)) {
      at::Tensor mask = t.device().type() == kTpu ? t : t.to(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
      at::Tensor nz = at::nonzero(mask);
      for (int64_t d = 0; d < mask.dim(); ++d) out.push_back(nz.select(1, d));
    } else {
      out.push_back(t);
    }
  }
  return out;
}

std::string dev_str(int index) { return "tpu:" + std::to_string(index); }

[[noreturn]] void device_mismatch(const std::string& a, const std::string& b) {
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but found at least two devices, ", a,
              " and ", b, "!");
  __builtin_unreachable();
}

// Releases the result storages that were not adopted by a tensor.
struct Results {
  std::vector<tpu_result_t> r;
  std::vector<bool> adopted;
  int n = 0;
  explicit Results(int cap) : r(cap), adopted(cap, false) { std::memset(r.data(), 0, sizeof(tpu_result_t) * cap); }
  ~Results() {
    for (int i = 0; i < n; ++i)
      if (!adopted[i]) tpu_storage_release(r[i].storage);
  }
};

c10::IntArrayRef result_sizes(const tpu_result_t& r) { return c10::IntArrayRef(r.sizes, r.rank); }

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

void validate_result(const tpu_result_t& r, const std::string& full) {
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

c10::TypePtr unwrap_optional(const c10::TypePtr& t) {
  if (t->kind() == c10::TypeKind::OptionalType) return t->castRaw<c10::OptionalType>()->getElementType();
  return t;
}

bool is_tensor_type(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

bool is_tensor_list_type(const c10::TypePtr& t) {
  if (t->kind() != c10::TypeKind::ListType) return false;
  return unwrap_optional(t->castRaw<c10::ListType>()->getElementType())->kind() == c10::TypeKind::TensorType;
}

bool is_write(const c10::Argument& a) { return a.alias_info() != nullptr && a.alias_info()->isWrite(); }

tpu_scalar_t scalar_from(const c10::Scalar& s, const std::string& full) {
  tpu_scalar_t v;
  std::memset(&v, 0, sizeof(v));
  v.wrapped = true;
  if (s.isBoolean()) {
    v.dtype = TPU_BOOL;
    v.i = s.toBool() ? 1 : 0;
  } else if (s.isIntegral(false)) {
    v.dtype = TPU_I64;
    v.i = s.toLong();
  } else if (s.isFloatingPoint()) {
    v.dtype = TPU_F64;
    v.f = s.toDouble();
  } else {
    TORCH_CHECK(false, "tpu: ", full, ": complex scalars are not supported");
  }
  return v;
}

// A 0-dim cpu tensor passed where a tpu tensor is expected: a runtime scalar operand.
tpu_scalar_t scalar_from_cpu_tensor(const at::Tensor& t, const std::string& full) {
  tpu_scalar_t v;
  std::memset(&v, 0, sizeof(v));
  v.dtype = tpu_dtype_of(t.scalar_type());
  v.wrapped = t.unsafeGetTensorImpl()->is_wrapped_number();
  TORCH_CHECK(!t.is_complex(), "tpu: ", full, ": complex scalars are not supported");
  if (t.is_floating_point()) {
    v.f = t.item<double>();
  } else {
    v.i = t.item<int64_t>();
  }
  return v;
}

int64_t int_of(const c10::IValue& v) {
  if (v.isSymInt()) return v.toSymInt().guard_int(__FILE__, __LINE__);
  return v.toInt();
}

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const auto& sargs = schema.arguments();
  const auto& rets = schema.returns();
  const size_t nargs = sargs.size();
  TORCH_INTERNAL_ASSERT(stack->size() >= nargs);
  const size_t base = stack->size() - nargs;
  auto arg_at = [&](size_t i) -> const c10::IValue& { return (*stack)[base + i]; };

  const std::string& overload = schema.overload_name();
  const std::string full = schema.name() + (overload.empty() ? "" : "." + overload);
  std::string name = schema.name();
  if (name.rfind("aten::", 0) == 0) name = name.substr(6);
  if (name.size() >= 2 && name.back() == '_' && name[name.size() - 2] != '_') name.pop_back();

  if (cpu_fallback_enabled() && !tpu_op_supported(name.c_str())) {
    run_cpu_fallback(op, stack, full);
    return;
  }

  // ---- pass 1: the device of the op and device consistency ----
  int device = -1;
  bool has_cpu_tensor = false;  // non-scalar cpu tensor in a tensor position
  std::string other_device;
  auto see = [&](const at::Tensor& t, bool index_list, bool write) {
    if (!t.defined()) return;
    if (t.device().type() == kTpu) {
      const int d = t.device().index();
      if (device < 0) {
        device = d;
      } else if (d != device) {
        device_mismatch(dev_str(device), dev_str(d));
      }
    } else if (t.device().is_cpu()) {
      if (index_list) return;
      if (write || t.dim() != 0) {
        has_cpu_tensor = true;
        other_device = "cpu";
      }
    } else {
      has_cpu_tensor = true;
      other_device = t.device().str();
    }
  };
  int device_arg = -1;
  for (size_t i = 0; i < nargs; ++i) {
    const c10::IValue& v = arg_at(i);
    const c10::TypePtr t = unwrap_optional(sargs[i].real_type());
    if (v.isNone()) continue;
    if (v.isTensor()) {
      see(v.toTensor(), false, is_write(sargs[i]));
    } else if (is_tensor_list_type(t)) {
      const bool index_list =
          t->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType;
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) see(e.toTensor(), index_list, is_write(sargs[i]));
    } else if (v.isDevice() && v.toDevice().type() == kTpu && device_arg < 0) {
      device_arg = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  if (device < 0) device = device_arg >= 0 ? device_arg : current_device();
  if (has_cpu_tensor) device_mismatch(dev_str(device), other_device);

  // ---- pass 2: tpu_arg_t's in schema order (out= arguments removed) ----
  std::vector<tpu_arg_t> args;
  args.reserve(nargs);
  std::deque<std::vector<int64_t>> int_lists;
  std::deque<std::vector<double>> float_lists;
  std::deque<std::unique_ptr<bool[]>> bool_lists;
  std::deque<std::vector<tpu_tensor_t>> tensor_lists;
  std::deque<std::string> strings;
  std::vector<at::Tensor> keep_alive;
  int list_elems = 0;  // tensor- and int-list elements: they bound list-valued results

  for (size_t i = 0; i < nargs; ++i) {
    const c10::Argument& a = sargs[i];
    if (is_write(a) && a.kwarg_only()) continue;  // out= argument
    const c10::IValue& v = arg_at(i);
    const c10::TypePtr t = unwrap_optional(a.real_type());
    tpu_arg_t arg;
    std::memset(&arg, 0, sizeof(arg));
    arg.kind = TPU_ARG_NONE;
    if (v.isNone()) {
      args.push_back(arg);
      continue;
    }
    switch (t->kind()) {
      case c10::TypeKind::TensorType: {
        const at::Tensor& ten = v.toTensor();
        if (!ten.defined()) break;
        if (ten.device().type() == kTpu) {
          arg.kind = TPU_ARG_TENSOR;
          arg.u.tensor = describe(ten);
        } else {
          arg.kind = TPU_ARG_SCALAR;  // 0-dim cpu tensor (checked in pass 1)
          arg.u.scalar = scalar_from_cpu_tensor(ten, full);
        }
        break;
      }
      case c10::TypeKind::ListType: {
        const c10::TypePtr et = t->castRaw<c10::ListType>()->getElementType();
        const auto elems = v.toListRef();
        const int n = static_cast<int>(elems.size());
        switch (unwrap_optional(et)->kind()) {
          case c10::TypeKind::TensorType: {
            std::vector<at::Tensor> items;
            for (int k = 0; k < n; ++k)
              items.push_back(elems[k].isTensor() ? elems[k].toTensor() : at::Tensor());
            // Reading x[mask]: like PyTorch's expandTensors, a bool mask becomes the
            // index tensors of its nonzero positions (the one sync this needs).
            if (name == "index" && et->kind() == c10::TypeKind::OptionalType) {
              items = expand_masks(items, device);
              keep_alive.insert(keep_alive.end(), items.begin(), items.end());
            }
            const int m = static_cast<int>(items.size());
            auto& vec = tensor_lists.emplace_back(m);
            for (int k = 0; k < m; ++k) {
              std::memset(&vec[k], 0, sizeof(tpu_tensor_t));
              if (!items[k].defined()) continue;
              at::Tensor e = items[k];
              if (e.device().type() != kTpu) {
                if (et->kind() == c10::TypeKind::OptionalType) {
                  // index tensors may live on the cpu: upload them, as PyTorch does for CUDA
                  e = e.to(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
                  keep_alive.push_back(e);
                } else {
                  device_mismatch(dev_str(device), e.device().str());
                }
              }
              vec[k] = describe(e);
            }
            arg.kind = TPU_ARG_TENSOR_LIST;
            arg.u.list.n = m;
            arg.u.list.tensors = vec.data();
            list_elems += m;
            break;
          }
          case c10::TypeKind::IntType:
          case c10::TypeKind::SymIntType: {
            auto& vec = int_lists.emplace_back(n);
            for (int k = 0; k < n; ++k) vec[k] = int_of(elems[k]);
            arg.kind = TPU_ARG_INT_LIST;
            arg.u.list.n = n;
            arg.u.list.ints = vec.data();
            list_elems += n;
            break;
          }
          case c10::TypeKind::FloatType: {
            auto& vec = float_lists.emplace_back(n);
            for (int k = 0; k < n; ++k) vec[k] = elems[k].toDouble();
            arg.kind = TPU_ARG_FLOAT_LIST;
            arg.u.list.n = n;
            arg.u.list.floats = vec.data();
            break;
          }
          case c10::TypeKind::BoolType: {
            auto& vec = bool_lists.emplace_back(new bool[n > 0 ? n : 1]);
            for (int k = 0; k < n; ++k) vec[k] = elems[k].toBool();
            arg.kind = TPU_ARG_BOOL_LIST;
            arg.u.list.n = n;
            arg.u.list.bools = vec.get();
            break;
          }
          default:
            TORCH_CHECK(false, "tpu: ", full, ": argument '", a.name(), "' of type ", *a.type(),
                        " is not supported");
        }
        break;
      }
      case c10::TypeKind::IntType:
      case c10::TypeKind::SymIntType:
        arg.kind = TPU_ARG_INT;
        arg.u.i = int_of(v);
        break;
      case c10::TypeKind::FloatType:
      case c10::TypeKind::SymFloatType:
        arg.kind = TPU_ARG_FLOAT;
        arg.u.f = v.isSymFloat() ? v.toSymFloat().guard_float(__FILE__, __LINE__) : v.toDouble();
        break;
      case c10::TypeKind::BoolType:
      case c10::TypeKind::SymBoolType:
        if (a.name() == "pin_memory") break;
        arg.kind = TPU_ARG_BOOL;
        arg.u.b = v.isSymBool() ? v.toSymBool().guard_bool(__FILE__, __LINE__) : v.toBool();
        break;
      case c10::TypeKind::NumberType:
        arg.kind = TPU_ARG_SCALAR;
        arg.u.scalar = scalar_from(v.toScalar(), full);
        break;
      case c10::TypeKind::ScalarTypeType:
        arg.kind = TPU_ARG_DTYPE;
        arg.u.dtype = tpu_dtype_of(v.toScalarType());
        break;
      case c10::TypeKind::LayoutType:
      case c10::TypeKind::MemoryFormatType:
      case c10::TypeKind::DeviceObjType:
        break;
      case c10::TypeKind::StringType:
        arg.kind = TPU_ARG_STRING;
        arg.u.str = strings.emplace_back(v.toStringRef()).c_str();
        break;
      case c10::TypeKind::GeneratorType:
        arg.kind = TPU_ARG_GENERATOR;
        arg.u.generator = generator_state(v.toGenerator());
        break;
      default:
        TORCH_CHECK(false, "tpu: ", full, ": argument '", a.name(), "' of type ", *a.type(),
                    " is not supported");
    }
    args.push_back(arg);
  }

  // Factories reached through out= take their dtype from the out tensor.
  if (tpu_op_wants_out_dtype(name.c_str())) {
    for (size_t i = 0; i < nargs; ++i) {
      if (!(is_write(sargs[i]) && sargs[i].kwarg_only()) || !arg_at(i).isTensor()) continue;
      tpu_arg_t arg;
      std::memset(&arg, 0, sizeof(arg));
      arg.kind = TPU_ARG_DTYPE;
      arg.u.dtype = tpu_dtype_of(arg_at(i).toTensor().scalar_type());
      args.push_back(arg);
    }
  }
  // ---- run ----
  int nwrite = 0;
  for (size_t i = 0; i < nargs; ++i) {
    if (!is_write(sargs[i])) continue;
    const c10::IValue& v = arg_at(i);
    nwrite += v.isTensorList() ? static_cast<int>(v.toListRef().size()) : 1;
  }
  // An upper bound on the results, sized by this call's arguments (no fixed cap):
  // one per return and per written tensor, and list-valued returns are at most as
  // long as the lists the op was given (split_with_sizes, _foreach_*), plus slack.
  const int cap = static_cast<int>(rets.size()) + nwrite + list_elems + 16;
  Results rs(cap);
  tpu_status_t* st = tpu_op_run(name.c_str(), overload.c_str(), device, args.data(),
                                static_cast<int>(args.size()), cap, rs.r.data(), &rs.n);
  if (rs.n < 0 || rs.n > cap) rs.n = 0;
  if (st) {
    const tpu_status_code_t code = tpu_status_code(st);
    if (code == TPU_UNIMPLEMENTED) {
      const char* m = tpu_status_message(st);
      const std::string msg = m ? m : "";
      tpu_status_free(st);
      if (cpu_fallback_enabled()) {
        keep_alive.clear();
        run_cpu_fallback(op, stack, full);
        return;
      }
      TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", full, "' on the tpu device: ", msg);
    }
    throw_status(st, "tpu: " + full);
  }

  // ---- results ----
  // Which arguments do the returns alias? (matched by alias set: Tensor(a!) ...)
  std::vector<int> ret_alias(rets.size(), -1);
  std::vector<bool> arg_returned(nargs, false);
  for (size_t j = 0; j < rets.size(); ++j) {
    const c10::AliasInfo* ra = rets[j].alias_info();
    if (ra == nullptr || !ra->isWrite()) continue;
    for (size_t i = 0; i < nargs; ++i) {
      const c10::AliasInfo* aa = sargs[i].alias_info();
      if (aa != nullptr && aa->isWrite() && !arg_returned[i] && aa->beforeSets() == ra->beforeSets()) {
        ret_alias[j] = static_cast<int>(i);
        arg_returned[i] = true;
        break;
      }
    }
  }
  int extra_writes = 0;
  for (size_t i = 0; i < nargs; ++i) {
    if (!is_write(sargs[i]) || arg_returned[i]) continue;
    const c10::IValue& v = arg_at(i);
    if (v.isNone()) continue;
    extra_writes += v.isTensorList() ? static_cast<int>(v.toListRef().size()) : 1;
  }

  auto write_arg = [&](size_t i, int& ri) {
    const c10::IValue& v = arg_at(i);
    const bool is_out = sargs[i].kwarg_only();
    if (v.isTensorList()) {
      for (const c10::IValue& e : v.toListRef()) write_result(rs, ri++, e.toTensor(), is_out, full);
    } else if (v.isTensor()) {
      write_result(rs, ri++, v.toTensor(), is_out, full);
    }
  };

  std::vector<c10::IValue> outs;
  outs.reserve(rets.size());
  int ri = 0;
  for (size_t j = 0; j < rets.size(); ++j) {
    const c10::TypePtr rt = unwrap_optional(rets[j].real_type());
    if (ret_alias[j] >= 0) {
      write_arg(static_cast<size_t>(ret_alias[j]), ri);
      outs.push_back(arg_at(static_cast<size_t>(ret_alias[j])));
    } else if (is_tensor_type(rt)) {
      outs.emplace_back(wrap_result(rs, ri++, full));
    } else if (is_tensor_list_type(rt)) {
      const int count = rs.n - ri - extra_writes;
      TORCH_CHECK(count >= 0, "tpu: the runtime returned too few results for ", full);
      c10::List<at::Tensor> list;
      list.reserve(count);
      for (int k = 0; k < count; ++k) list.push_back(wrap_result(rs, ri++, full));
      outs.emplace_back(std::move(list));
    } else {
      outs.push_back(scalar_result(rs, ri++, rt, full));
    }
  }
  // Mutated arguments that the schema does not return (e.g. running_mean).
  for (size_t i = 0; i < nargs; ++i) {
    if (is_write(sargs[i]) && !arg_returned[i]) write_arg(i, ri);
  }

  torch::jit::drop(*stack, nargs);
  for (auto& o : outs) torch::jit::push(*stack, std::move(o));
}

}  // namespace

// Ops whose CompositeExplicitAutograd kernel would run instead of the fallback
// (a composite kernel outranks a backend fallback). The convolution pair only
// throws; the norms decompose into many ops or call CPU kernels directly. Each has
// its own derivative formula, so taking the backend slot keeps autograd intact.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"convolution_overrideable", "convolution_backward_overrideable", "native_layer_norm",
                         "native_group_norm", "_native_batch_norm_legit_no_training",
                         "_native_batch_norm_legit_functional", "_batch_norm_with_update_functional",
                         "_batch_norm_no_update", "binary_cross_entropy_with_logits"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

}  // namespace torchtpu
