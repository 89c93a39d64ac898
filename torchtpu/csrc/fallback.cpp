// The boxed PrivateUse1 fallback: every aten op without a direct kernel is turned
// into a C op descriptor (tpu_arg_t per schema argument) and run by the C runtime
// (tpu_op_run). Results are wrapped as tensors, or written into in-place / out=
// arguments. Optional CPU fallback (TORCHTPU_CPU_FALLBACK=1) for unsupported ops.
#include <algorithm>
#include <atomic>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "layout.h"
#include "op_io.h"

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

// Deprecation warnings that ATen's kernels give and ours, replacing them, must
// give too: once per process like TORCH_WARN_ONCE (once per warning: the ops
// sharing an ATen kernel share its call site), every time under
// torch.set_warn_always(True).
struct OnceWarning {
  const char* message;
  std::atomic<bool> given;
};
// ATen's where_self_out (where.self runs it), word for word.
OnceWarning kWhereUint8{"where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                    "future version of PyTorch. Use a boolean condition instead.",
                    {false}};

struct Deprecation {
  const char* full;  // the op: "aten::where.self"
  size_t arg;        // the argument whose dtype is deprecated
  at::ScalarType dtype;
  OnceWarning* warning;
};
const Deprecation kDeprecations[] = {
    {"aten::where.self", 0, at::kByte, &kWhereUint8},
    {"aten::where.self_out", 0, at::kByte, &kWhereUint8},
};

const Deprecation* deprecation_of(const std::string& full) {
  for (const Deprecation& d : kDeprecations)
    if (full == d.full) return &d;
  return nullptr;
}

// What the fallback needs to know about one op schema, worked out on its first
// call and kept: names, argument kinds and return aliases do not change between
// calls, and building them per call (strings, TypePtr copies) cost more than
// the lowering's cache lookup.
struct ArgInfo {
  c10::TypePtr type;  // Optional[T] unwrapped to T
  bool write;         // Tensor(a!): in-place self, out=, mutated buffer
  bool out;           // a kwarg-only write: an out= argument
  bool tensor_list;   // Tensor[] or Tensor?[]
  bool index_list;    // Tensor?[] (index lists: cpu indices are uploaded)
};

struct OpInfo {
  std::string schema_name, overload;  // the key, checked on every hit
  std::string full;                   // "aten::add.Tensor", for messages
  std::string name;                   // the lowering's name: "add"
  std::vector<ArgInfo> args;
  std::vector<c10::TypePtr> ret_types;  // unwrapped
  std::vector<int> ret_alias;           // per return: the argument it aliases, -1 for none
  std::vector<bool> arg_returned;       // per argument: some return aliases it
  bool list_return = false;             // some return is a Tensor[]
  bool wants_out_dtype = false;
  bool supported = false;
  const Deprecation* deprecation = nullptr;  // a warning this op may owe (kDeprecations)
  // An elementwise op (aten's pointwise tag, not random) returning one new tensor
  // (no argument written), or writing one out= argument that it returns: a new
  // result, or an empty out=, takes the operands' layout (layout.h).
  bool pointwise = false;
  int pointwise_out = -1;  // the out= argument of such an op
  bool writes = false;     // some argument is written: in-place self, out=, a mutated buffer
};

std::vector<int> return_aliases(const c10::FunctionSchema& schema, std::vector<bool>* arg_returned);

// Arguments that an op mutates although its schema does not mark them (a!):
// SyncBatchNorm's kernels update running_mean / running_var in place, as the
// CPU and CUDA kernels do. Written back like marked ones (the lowering appends
// their new values after its returns).
bool mutated_unmarked(const std::string& schema_name, size_t i) {
  struct Entry {
    const char* name;
    size_t first, last;  // the mutated argument range
  };
  static const Entry kEntries[] = {
      {"aten::batch_norm_gather_stats", 3, 4},
      {"aten::batch_norm_gather_stats_with_counts", 3, 4},
      {"aten::batch_norm_update_stats", 1, 2},
  };
  for (const Entry& e : kEntries)
    if (schema_name == e.name) return i >= e.first && i <= e.last;
  return false;
}

std::unique_ptr<OpInfo> make_op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema& schema = op.schema();
  auto info = std::make_unique<OpInfo>();
  info->schema_name = schema.name();
  info->overload = schema.overload_name();
  info->full = schema.name() + (info->overload.empty() ? "" : "." + info->overload);
  info->name = aten_base_name(schema.name());
  for (const c10::Argument& a : schema.arguments()) {
    const bool write = is_write(a) || mutated_unmarked(info->schema_name, info->args.size());
    ArgInfo ai{unwrap_optional(a.real_type()), write, false, false, false};
    ai.out = ai.write && a.kwarg_only();
    ai.tensor_list = is_tensor_list_type(ai.type);
    ai.index_list = ai.tensor_list &&
                    ai.type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::OptionalType;
    info->args.push_back(std::move(ai));
  }
  for (const c10::Argument& r : schema.returns()) {
    info->ret_types.push_back(unwrap_optional(r.real_type()));
    info->list_return = info->list_return || is_tensor_list_type(info->ret_types.back());
  }
  info->ret_alias = return_aliases(schema, &info->arg_returned);
  info->wants_out_dtype = tpu_op_wants_out_dtype(info->name.c_str());
  info->supported = tpu_op_supported(info->name.c_str());
  info->deprecation = deprecation_of(info->full);
  int writes = 0, out = -1;
  for (size_t i = 0; i < info->args.size(); ++i)
    if (info->args[i].write) {
      ++writes;
      if (info->args[i].out && is_tensor_type(info->args[i].type)) out = static_cast<int>(i);
    }
  info->writes = writes > 0;
  const bool one_tensor = info->ret_types.size() == 1 && is_tensor_type(info->ret_types[0]);
  if (op.hasTag(at::Tag::pointwise) && !op.hasTag(at::Tag::nondeterministic_seeded) && one_tensor) {
    info->pointwise = writes == 0 && info->ret_alias[0] < 0;
    if (writes == 1 && out >= 0 && info->ret_alias[0] == out) {
      info->pointwise = true;
      info->pointwise_out = out;
    }
  }
  return info;
}

// Per thread, so the hot path takes no lock. A schema's address is stable while
// its operator is registered; the name check catches an address reused by a
// later registration.
const OpInfo& op_info(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> cache;
  const c10::FunctionSchema& schema = op.schema();
  auto& slot = cache[&schema];
  if (!slot || slot->schema_name != schema.name() || slot->overload != schema.overload_name() ||
      slot->args.size() != schema.arguments().size())
    slot = make_op_info(op);
  return *slot;
}

// One boxed call: the op's facts and the arguments on the stack.
struct Call {
  const OpInfo& info;
  const c10::FunctionSchema& schema;
  torch::jit::Stack* stack;
  size_t base;
  const std::string& full;  // "aten::add.Tensor", for messages
  const std::string& name;  // the lowering's name: "add" (no namespace, no in-place underscore)
  const c10::IValue& arg(size_t i) const { return (*stack)[base + i]; }
  size_t nargs() const { return info.args.size(); }
  const c10::Argument& schema_arg(size_t i) const { return schema.arguments()[i]; }
};

// The device the op runs on; raises PyTorch's error for mixed devices.
int op_device(const Call& c) {
  int device = -1;
  bool has_cpu_tensor = false;  // non-scalar cpu tensor in a tensor position
  std::string other_device;
  auto see = [&](const at::Tensor& t, bool index_list, bool write) {
    if (!t.defined()) return;
    if (t.device().type() == kTpu) {
      const int d = t.device().index();
      if (device < 0) device = d;
      else if (d != device) device_mismatch(dev_str(device), dev_str(d));
    } else if (t.device().is_cpu()) {
      if (index_list || !(write || t.dim() != 0)) return;
      has_cpu_tensor = true;
      other_device = "cpu";
    } else {
      has_cpu_tensor = true;
      other_device = t.device().str();
    }
  };
  int device_arg = -1;
  for (size_t i = 0; i < c.nargs(); ++i) {
    const c10::IValue& v = c.arg(i);
    const ArgInfo& ai = c.info.args[i];
    if (v.isNone()) continue;
    if (v.isTensor()) {
      see(v.toTensor(), false, ai.write);
    } else if (ai.tensor_list) {
      for (const c10::IValue& e : v.toListRef())
        if (e.isTensor()) see(e.toTensor(), ai.index_list, ai.write);
    } else if (v.isDevice() && v.toDevice().type() == kTpu && device_arg < 0) {
      device_arg = v.toDevice().has_index() ? v.toDevice().index() : current_device();
    }
  }
  if (device < 0) device = device_arg >= 0 ? device_arg : current_device();
  if (has_cpu_tensor) device_mismatch(dev_str(device), other_device);
  return device;
}

// A Tensor[] / Tensor?[] argument: index tensors may live on the cpu (uploaded,
// as PyTorch does for CUDA) and a bool mask in x[mask] becomes the index
// tensors of its nonzero positions, like PyTorch's expandTensors (one sync).
tpu_arg_t marshal_tensor_list(const Call& c, const ArgInfo& ai, const c10::IValue& v, int device, ArgStore& store) {
  const bool optional_elems = ai.index_list;
  std::vector<at::Tensor> items;
  for (const c10::IValue& e : v.toListRef()) items.push_back(e.isTensor() ? e.toTensor() : at::Tensor());
  if (c.name == "index" && optional_elems) {
    items = expand_masks(items, device);
    store.keep_alive.insert(store.keep_alive.end(), items.begin(), items.end());
  }
  const int m = static_cast<int>(items.size());
  auto& vec = store.tensors.emplace_back(m);
  for (int k = 0; k < m; ++k) {
    std::memset(&vec[k], 0, sizeof(tpu_tensor_t));
    if (!items[k].defined()) continue;
    at::Tensor e = items[k];
    if (e.device().type() != kTpu) {
      if (!optional_elems) device_mismatch(dev_str(device), e.device().str());
      e = e.to(c10::Device(kTpu, static_cast<c10::DeviceIndex>(device)));
      store.keep_alive.push_back(e);
    }
    vec[k] = describe(e);
  }
  tpu_arg_t arg;
  std::memset(&arg, 0, sizeof(arg));
  arg.kind = TPU_ARG_TENSOR_LIST;
  arg.u.list.n = m;
  arg.u.list.tensors = vec.data();
  return arg;
}

// tpu_arg_t's in schema order, out= arguments removed; *list_elems counts the
// tensor- and int-list elements (they bound list-valued results).
using ArgList = c10::SmallVector<tpu_arg_t, 6>;

ArgList marshal_args(const Call& c, int device, ArgStore& store, int* list_elems) {
  const auto& sargs = c.info.args;
  ArgList args;
  for (size_t i = 0; i < c.nargs(); ++i) {
    const ArgInfo& ai = sargs[i];
    if (ai.out) continue;  // out= argument
    const c10::IValue& v = c.arg(i);
    tpu_arg_t arg;
    std::memset(&arg, 0, sizeof(arg));
    arg.kind = TPU_ARG_NONE;
    if (v.isNone() || marshal_static(c.schema_arg(i), ai.type, v, store, c.full, &arg, list_elems)) {
      args.push_back(arg);
    } else if (ai.type->kind() == c10::TypeKind::TensorType) {
      const at::Tensor& ten = v.toTensor();
      if (ten.defined() && ten.device().type() == kTpu) {
        arg.kind = TPU_ARG_TENSOR;
        // PyTorch's Conjugate and Negative fallbacks let a few ops through with
        // the view bit still set (mm, addmm, bmm, dot, vdot, mv ...: CPU's BLAS
        // reads it); lowerings read storages, so such an input is materialised.
        if ((ten.is_conj() || ten.is_neg()) && !ai.write) {
          store.keep_alive.push_back(ten.resolve_conj().resolve_neg());
          arg.u.tensor = describe(store.keep_alive.back());
        } else {
          arg.u.tensor = describe(ten);
        }
      } else if (ten.defined()) {
        arg.kind = TPU_ARG_SCALAR;  // 0-dim cpu tensor (checked by op_device)
        arg.u.scalar = scalar_from_cpu_tensor(ten);
      }
      args.push_back(arg);
    } else {
      args.push_back(marshal_tensor_list(c, ai, v, device, store));
      *list_elems += args.back().u.list.n;
    }
  }
  // Factories reached through out= take their dtype from the out tensor.
  if (c.info.wants_out_dtype) {
    for (size_t i = 0; i < c.nargs(); ++i) {
      if (!sargs[i].out || !c.arg(i).isTensor()) continue;
      tpu_arg_t arg;
      std::memset(&arg, 0, sizeof(arg));
      arg.kind = TPU_ARG_DTYPE;
      arg.u.dtype = tpu_dtype_of(c.arg(i).toTensor().scalar_type());
      args.push_back(arg);
    }
  }
  return args;
}

// Tensors written by the op (in-place self, out=, mutated buffers).
int count_writes(const Call& c, const std::vector<bool>* skip) {
  int n = 0;
  for (size_t i = 0; i < c.nargs(); ++i) {
    if (!c.info.args[i].write || (skip && (*skip)[i]) || c.arg(i).isNone()) continue;
    n += c.arg(i).isTensorList() ? static_cast<int>(c.arg(i).toListRef().size()) : 1;
  }
  return n;
}

// Which argument each return aliases (matched by alias set: Tensor(a!) ...), -1 for none.
std::vector<int> return_aliases(const c10::FunctionSchema& schema, std::vector<bool>* arg_returned) {
  const auto& sargs = schema.arguments();
  const auto& rets = schema.returns();
  std::vector<int> ret_alias(rets.size(), -1);
  arg_returned->assign(sargs.size(), false);
  for (size_t j = 0; j < rets.size(); ++j) {
    const c10::AliasInfo* ra = rets[j].alias_info();
    if (ra == nullptr || !ra->isWrite()) continue;
    for (size_t i = 0; i < sargs.size(); ++i) {
      const c10::AliasInfo* aa = sargs[i].alias_info();
      if (aa != nullptr && aa->isWrite() && !(*arg_returned)[i] && aa->beforeSets() == ra->beforeSets()) {
        ret_alias[j] = static_cast<int>(i);
        (*arg_returned)[i] = true;
        break;
      }
    }
  }
  return ret_alias;
}

// Replaces the arguments on the stack with the op's returns.
void push_results(const Call& c, Results& rs) {
  const std::vector<bool>& arg_returned = c.info.arg_returned;
  const std::vector<int>& ret_alias = c.info.ret_alias;
  const int extra_writes = count_writes(c, &arg_returned);
  int ri = 0;
  auto write_arg = [&](size_t i) {
    const c10::IValue& v = c.arg(i);
    const bool is_out = c.info.args[i].out;
    if (v.isTensorList()) {
      for (const c10::IValue& e : v.toListRef()) write_result(rs, ri++, e.toTensor(), is_out, c.full);
    } else if (v.isTensor()) {
      write_result(rs, ri++, v.toTensor(), is_out, c.full);
    }
  };
  std::vector<c10::IValue> outs;
  outs.reserve(ret_alias.size());
  for (size_t j = 0; j < ret_alias.size(); ++j) {
    const c10::TypePtr& rt = c.info.ret_types[j];
    if (ret_alias[j] >= 0) {
      write_arg(static_cast<size_t>(ret_alias[j]));
      outs.push_back(c.arg(static_cast<size_t>(ret_alias[j])));
    } else if (is_tensor_type(rt)) {
      outs.emplace_back(wrap_result(rs, ri++, c.full));
    } else if (is_tensor_list_type(rt)) {
      const int count = rs.n - ri - extra_writes;
      TORCH_CHECK(count >= 0, "tpu: the runtime returned too few results for ", c.full);
      c10::List<at::Tensor> list;
      list.reserve(count);
      for (int k = 0; k < count; ++k) list.push_back(wrap_result(rs, ri++, c.full));
      outs.emplace_back(std::move(list));
    } else {
      outs.push_back(scalar_result(rs, ri++, rt, c.full));
    }
  }
  // Mutated arguments that the schema does not return (e.g. running_mean).
  for (size_t i = 0; i < c.nargs(); ++i)
    if (c.info.args[i].write && !arg_returned[i]) write_arg(i);
  torch::jit::drop(*c.stack, c.nargs());
  for (auto& o : outs) torch::jit::push(*c.stack, std::move(o));
}

void tpu_fallback_as_laid_out(const c10::OperatorHandle& op, const Call& c);

// A pointwise op on operands laid out otherwise than contiguously (a transposed or
// channels_last tensor) runs on them in their layout's order, and its result is
// permuted back: it keeps their layout, as on CPU and CUDA (layout.cpp). False:
// the logical order is the layout's (the common case), nothing was run.
// An empty out= (what aten's composite unary ops pass: abs, neg, ...) is resized by
// the run to the result in that order, then given the logical shape's strides.
bool run_in_layout_order(const c10::OperatorHandle& op, torch::jit::Stack* stack, const Call& c) {
  const int out = c.info.pointwise_out;
  if (out >= 0 && c.arg(static_cast<size_t>(out)).toTensor().numel() != 0) return false;  // keeps its own layout
  bool laid_out = false;  // some operand is not contiguous: the common case stops here, allocating nothing
  for (size_t i = 0; i < c.nargs() && !laid_out; ++i)
    laid_out = c.arg(i).isTensor() && static_cast<int>(i) != out && !c.arg(i).toTensor().is_contiguous();
  if (!laid_out) return false;
  std::vector<at::Tensor> operands;
  for (size_t i = 0; i < c.nargs(); ++i)
    if (c.arg(i).isTensor() && static_cast<int>(i) != out) operands.push_back(c.arg(i).toTensor());
  const std::vector<int64_t> order = pointwise_order(operands);
  if (order.empty()) return false;
  for (size_t i = 0; i < c.nargs(); ++i) {
    c10::IValue& v = (*stack)[c.base + i];
    if (v.isTensor() && static_cast<int>(i) != out) v = in_order(v.toTensor(), order);
  }
  tpu_fallback_as_laid_out(op, c);  // c sees the permuted operands: the stack is the same
  at::Tensor r = back_from_order(stack->back().toTensor(), order);
  if (out < 0) {
    stack->back() = r;
  } else {
    stack->back().toTensor().as_strided_(r.sizes(), r.strides(), r.storage_offset());
  }
  return true;
}

void warn_if_deprecated(const Call& c, const Deprecation& d) {
  const c10::IValue& v = c.arg(d.arg);
  if (!v.isTensor() || v.toTensor().scalar_type() != d.dtype) return;
  if (c10::WarningUtils::get_warnAlways() || !d.warning->given.exchange(true)) TORCH_WARN(d.warning->message);
}

void tpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  TORCH_INTERNAL_ASSERT(stack->size() >= schema.arguments().size());
  const OpInfo& info = op_info(op);
  Call c{info, schema, stack, stack->size() - schema.arguments().size(), info.full, info.name};
  if (info.deprecation) warn_if_deprecated(c, *info.deprecation);
  if (info.pointwise && run_in_layout_order(op, stack, c)) return;
  tpu_fallback_as_laid_out(op, c);
}

// A written tensor sharing part of its memory with an input (x[1:] += x[:-1]): CPU
// and CUDA refuse it ("some elements of the input tensor and the written-to tensor
// refer to a single memory location"); the lowering, reading a snapshot of the
// input, would give a result neither of them gives.
void check_no_partial_overlap(const Call& c) {
  for (size_t i = 0; i < c.nargs(); ++i) {
    if (!c.info.args[i].write || !c.arg(i).isTensor()) continue;
    const at::Tensor& written = c.arg(i).toTensor();
    for (size_t j = 0; j < c.nargs(); ++j)
      if (!c.info.args[j].write && c.arg(j).isTensor()) at::assert_no_partial_overlap(written, c.arg(j).toTensor());
  }
}

// The fallback with the operands as they are.
void tpu_fallback_as_laid_out(const c10::OperatorHandle& op, const Call& c) {
  const OpInfo& info = c.info;
  const c10::FunctionSchema& schema = c.schema;
  torch::jit::Stack* stack = c.stack;
  const std::string& overload = info.overload;
  if (cpu_fallback_enabled() && !info.supported) {
    run_cpu_fallback(op, stack, c.full);
    return;
  }
  const int device = op_device(c);
  if (info.writes) check_no_partial_overlap(c);
  ArgStore store;
  int list_elems = 0;
  ArgList args = marshal_args(c, device, store, &list_elems);
  // An upper bound on the results, sized by this call's arguments (no fixed cap):
  // one per return and per written tensor, and list-valued returns are at most as
  // long as the lists the op was given (split_with_sizes, _foreach_*), plus slack.
  // A lowering returning more fails cleanly in tpu_op_run.
  const int cap = static_cast<int>(schema.returns().size()) + count_writes(c, nullptr) +
                  (info.list_return ? list_elems + 16 : 0);
  Results rs(cap);
  tpu_status_t* st = run_lowering(c.name.c_str(), overload.c_str(), device, args.data(),
                                  static_cast<int>(args.size()), rs, c.full);
  if (st) {  // UNIMPLEMENTED
    const char* m = tpu_status_message(st);
    const std::string msg = m ? m : "";
    tpu_status_free(st);
    if (cpu_fallback_enabled()) {
      store.keep_alive.clear();
      run_cpu_fallback(op, stack, c.full);
      return;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(false, "Could not run '", c.full, "' on the tpu device: ", msg);
  }
  push_results(c, rs);
}

}  // namespace

void run_boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) { tpu_fallback(op, stack); }

// Ops whose composite kernel would run instead of the fallback (a composite
// kernel outranks a backend fallback). Each has its own derivative formula, so
// taking the backend slot keeps autograd intact.
// - The convolution pair only throws; the norms decompose into many ops or call
//   CPU kernels directly (CompositeExplicitAutograd).
// - (add, sub, mul and div .Tensor take the same slot with unboxed kernels,
//   unboxed.cpp: the generated kernel's meta function, output allocation and
//   out= detour only cost time, and so did boxing.)
// - addr: its composite rounds after each of its four ops in bf16/f16; the
//   lowering rounds once (and checks the Scalars as ATen's kernel).
// - _linalg_solve_ex (torch.linalg.solve): its structured composite fails an
//   internal assert for a right-hand side on the CPU; the fallback gives
//   PyTorch's "Expected all tensors to be on the same device".
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"convolution_overrideable", "convolution_backward_overrideable", "native_layer_norm",
                         "native_group_norm", "_native_batch_norm_legit_no_training",
                         "_native_batch_norm_legit_functional", "_batch_norm_with_update_functional",
                         "_batch_norm_no_update", "binary_cross_entropy_with_logits", "addr", "addr_",
                         "_linalg_solve_ex"})
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&tpu_fallback>());
}

}  // namespace torchtpu
