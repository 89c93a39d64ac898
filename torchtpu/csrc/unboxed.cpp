// Unboxed kernels for the hottest elementwise ops: add, sub, mul and div
// (.Tensor, functional and in place).
//
// Why not the boxed fallback: boxing copies each tensor argument into an IValue
// stack. A tensor whose Python object is alive takes the GIL when its C++
// reference count goes from 1 to 2 and back (PyTorch's incref_pyobject /
// decref_pyobject), so `y = x.add(1e-3)` paid three GIL round trips in the
// boxed path on top of the stack itself. These kernels take their arguments by
// reference and make the same runtime call the fallback makes (same lowering,
// same operands, same result handling in op_results.cpp).
//
// Anything else goes to the boxed fallback, so its checks and messages stay in
// one place: a non-contiguous operand of a functional op (its result's layout), a
// CPU tensor that is not a 0-dim scalar, operands on two tpus, a
// CPU `self`, and a lowering that answers UNIMPLEMENTED (a dtype it lacks;
// TORCHTPU_CPU_FALLBACK applies there).
#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstring>
#include <optional>
#include <string>

#include "common.h"
#include "op_io.h"

namespace torchtpu {
namespace {

struct HotOp {
  const char* name;      // the lowering
  const char* schema;    // the aten schema name
  bool in_place;
};

enum HotOpId { ADD, ADD_, SUB, SUB_, MUL, MUL_, DIV, DIV_, HOT_COUNT };

constexpr HotOp kHot[] = {
    {"add", "aten::add", false}, {"add", "aten::add_", true}, {"sub", "aten::sub", false},
    {"sub", "aten::sub_", true}, {"mul", "aten::mul", false}, {"mul", "aten::mul_", true},
    {"div", "aten::div", false}, {"div", "aten::div_", true},
};
static_assert(sizeof(kHot) / sizeof(kHot[0]) == HOT_COUNT, "one kHot row per HotOpId");

const std::string& full_name(int op) {
  // Built once: "aten::add.Tensor" is past std::string's inline capacity.
  static const auto* names = [] {
    auto* v = new std::string[HOT_COUNT];
    for (int i = 0; i < HOT_COUNT; ++i) v[i] = std::string(kHot[i].schema) + ".Tensor";
    return v;
  }();
  return names[op];
}

// The boxed fallback with these arguments; returns the op's result.
at::Tensor boxed(int op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(kHot[op].schema, "Tensor");
  torch::jit::Stack stack{self, other};
  if (alpha) stack.emplace_back(*alpha);
  run_boxed_fallback(handle, &stack);
  return stack.at(0).toTensor();
}

// Runs op `op`, or returns nothing when the boxed path must run it instead.
std::optional<at::Tensor> run(int op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha) {
  const HotOp& h = kHot[op];
  // A result that must keep a non-contiguous operand's layout: the boxed path lays it out (layout.h).
  if (!h.in_place && ((self.dim() > 0 && !self.is_contiguous()) || (other.dim() > 0 && !other.is_contiguous())))
    return std::nullopt;
  const std::string& full = full_name(op);
  tpu_arg_t args[3];
  int device = -1;
  if ((h.in_place && self.device().type() != kTpu) || !tensor_operand(self, &device, full, &args[0]) ||
      !tensor_operand(other, &device, full, &args[1]) || device < 0)
    return std::nullopt;
  if (h.in_place) at::assert_no_partial_overlap(self, other);  // as the fallback (check_no_partial_overlap)
  int nargs = 2;
  if (alpha) {
    std::memset(&args[2], 0, sizeof(args[2]));
    args[2].kind = TPU_ARG_SCALAR;
    args[2].u.scalar = scalar_from(*alpha, full);
    nargs = 3;
  }
  Results rs(h.in_place ? 2 : 1);  // the return, and the written self
  if (tpu_status_t* unimplemented = run_lowering(h.name, "Tensor", device, args, nargs, rs, full)) {
    tpu_status_free(unimplemented);
    return std::nullopt;
  }
  if (!h.in_place) return wrap_result(rs, 0, full);
  write_result(rs, 0, self, /*is_out=*/false, full);
  return self;
}

template <int Op>
at::Tensor functional(const at::Tensor& self, const at::Tensor& other) {
  std::optional<at::Tensor> r = run(Op, self, other, nullptr);
  return r ? *std::move(r) : boxed(Op, self, other, nullptr);
}

template <int Op>
at::Tensor functional_alpha(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  std::optional<at::Tensor> r = run(Op, self, other, &alpha);
  return r ? *std::move(r) : boxed(Op, self, other, &alpha);
}

template <int Op>
at::Tensor& in_place(at::Tensor& self, const at::Tensor& other) {
  if (!run(Op, self, other, nullptr)) boxed(Op, self, other, nullptr);
  return self;
}

template <int Op>
at::Tensor& in_place_alpha(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  if (!run(Op, self, other, &alpha)) boxed(Op, self, other, &alpha);
  return self;
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(functional_alpha<ADD>));
  m.impl("add_.Tensor", TORCH_FN(in_place_alpha<ADD_>));
  m.impl("sub.Tensor", TORCH_FN(functional_alpha<SUB>));
  m.impl("sub_.Tensor", TORCH_FN(in_place_alpha<SUB_>));
  m.impl("mul.Tensor", TORCH_FN(functional<MUL>));
  m.impl("mul_.Tensor", TORCH_FN(in_place<MUL_>));
  m.impl("div.Tensor", TORCH_FN(functional<DIV>));
  m.impl("div_.Tensor", TORCH_FN(in_place<DIV_>));
}

}  // namespace torchtpu
