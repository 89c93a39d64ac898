// Turning aten arguments into tpu_arg_t's and runtime results into tensors:
// shared by the boxed fallback (eager ops) and compiled graphs (graph.cpp).
#pragma once
#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <list>
#include <memory>
#include <string>
#include <vector>

#include "common.h"

namespace c10 {
class OperatorHandle;
}

namespace torchtpu {

// Owns what the tpu_arg_t's of one call point into (lists, strings, tensors
// created on the way); it must outlive the call.
struct ArgStore {
  std::list<std::vector<int64_t>> ints;  // lists, not deques: a deque allocates when built, and most calls use none
  std::list<std::vector<double>> floats;
  std::list<std::unique_ptr<bool[]>> bools;
  std::list<std::vector<tpu_tensor_t>> tensors;
  std::list<std::vector<int32_t>> values;
  std::list<std::string> strings;
  std::vector<at::Tensor> keep_alive;
};

c10::TypePtr unwrap_optional(const c10::TypePtr& t);
bool is_tensor_type(const c10::TypePtr& t);
bool is_tensor_list_type(const c10::TypePtr& t);
bool is_write(const c10::Argument& a);
tpu_scalar_t scalar_from(const c10::Scalar& s, const std::string& full);
// A 0-dim cpu tensor passed where a tpu tensor is expected: a runtime scalar operand.
tpu_scalar_t scalar_from_cpu_tensor(const at::Tensor& t);
// A tensor argument as a runtime operand: a tpu tensor on *device (the first
// one sets it; -1: none yet) or a 0-dim cpu tensor as a scalar. False, leaving
// *out unset, for anything else (another tpu, a cpu tensor with dimensions):
// the caller raises or takes another path.
bool tensor_operand(const at::Tensor& t, int* device, const std::string& full, tpu_arg_t* out);
int64_t int_of(const c10::IValue& v);
// The lowering name of an aten op: "aten::add_" → "add" (namespace and in-place underscore dropped).
std::string aten_base_name(const std::string& schema_name);

// Converts argument `a` (type t, optional unwrapped) with a non-None value v
// into *out. Returns false, leaving *out untouched, for tensor and tensor-list
// types: those depend on the caller (eager storages or graph values).
// *list_elems grows by the length of an int list (it bounds list results).
bool marshal_static(const c10::Argument& a, const c10::TypePtr& t, const c10::IValue& v, ArgStore& store,
                    const std::string& full, tpu_arg_t* out, int* list_elems);

// The boxed fallback (fallback.cpp) on an op's arguments: the way out of the
// unboxed kernels (unboxed.cpp) for what they do not handle themselves.
void run_boxed_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Result storages of one call; those not adopted by a tensor are released.
// Inline room for the common case: a heap block per op showed in profiles.
struct Results {
  c10::SmallVector<tpu_result_t, 4> r;
  c10::SmallVector<bool, 4> adopted;
  int n = 0;
  explicit Results(int cap);
  ~Results();
};

// Runs lowering `name` (`overload`) into rs, which is sized for its results.
// Raises every error but UNIMPLEMENTED, which is returned (owned) for the
// caller to handle; NULL when the lowering ran.
tpu_status_t* run_lowering(const char* name, const char* overload, int device, const tpu_arg_t* args, int nargs,
                           Results& rs, const std::string& full);

tpu_tensor_t describe_result(const tpu_result_t& r);
// Result i as a new tensor (adopts its storage).
at::Tensor wrap_result(Results& rs, int i, const std::string& full);
// Copies result i into a write argument (in-place self, out=, or a mutated buffer).
void write_result(Results& rs, int i, const at::Tensor& target, bool is_out, const std::string& full);
// Result i read back as a Python-level scalar of `type`.
c10::IValue scalar_result(Results& rs, int i, const c10::TypePtr& type, const std::string& full);

}  // namespace torchtpu
