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
// one place: a CPU tensor that is not a 0-dim scalar, operands on two tpus, a
// CPU `self`, and a lowering that answers UNIMPLEMENTED (a dtype it lacks;
// TORCHTPU_CPU_FALLBACK applies there).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <cstring>
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

// The runtime operand of a tensor argument; false when the boxed path must take it.
bool operand(const at::Tensor& t, bool write, int op, int* device, tpu_arg_t* out) {
  std::memset(out, 0, sizeof(*out));
  if (t.device().type() == kTpu) {
    const int d = t.device().index();
    if (*device >= 0 && *device != d) return false;
    *device = d;
    out->kind = TPU_ARG_TENSOR;
    out->u.tensor = describe(t);
    return true;
  }
  if (write || !t.device().is_cpu() || t.dim() != 0) return false;
  out->kind = TPU_ARG_SCALAR;
  out->u.scalar = scalar_from_cpu_tensor(t, full_name(op));
  return true;
}

// The boxed fallback with these arguments; returns the op's result.
at::Tensor boxed(int op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha) {
  const c10::OperatorHandle handle = c10::Dispatcher::singleton().findSchemaOrThrow(kHot[op].schema, "Tensor");
  torch::jit::Stack stack{self, other};
  if (alpha) stack.emplace_back(*alpha);
  run_boxed_fallback(handle, &stack);
  return stack.at(0).toTensor();
}

// Runs op `op`; *out_done is false when the boxed path must run it instead.
at::Tensor run(int op, const at::Tensor& self, const at::Tensor& other, const c10::Scalar* alpha, bool* out_done) {
  *out_done = false;
  const HotOp& h = kHot[op];
  tpu_arg_t args[3];
  int device = -1;
  if (!operand(self, h.in_place, op, &device, &args[0]) || !operand(other, false, op, &device, &args[1]) ||
      device < 0)
    return at::Tensor();
  int nargs = 2;
  if (alpha) {
    std::memset(&args[2], 0, sizeof(args[2]));
    args[2].kind = TPU_ARG_SCALAR;
    args[2].u.scalar = scalar_from(*alpha, full_name(op));
    nargs = 3;
  }
  const int cap = h.in_place ? 2 : 1;  // the return, and the written self
  Results rs(cap);
  tpu_status_t* st = tpu_op_run(h.name, "Tensor", device, args, nargs, cap, rs.r.data(), &rs.n);
  if (rs.n < 0 || rs.n > cap) rs.n = 0;
  if (st && tpu_status_code(st) == TPU_UNIMPLEMENTED) {
    tpu_status_free(st);
    return at::Tensor();
  }
  if (st) throw_status(st, "tpu: " + full_name(op));
  *out_done = true;
  if (!h.in_place) return wrap_result(rs, 0, full_name(op));
  write_result(rs, 0, self, /*is_out=*/false, full_name(op));
  return self;
}

template <int Op>
at::Tensor functional(const at::Tensor& self, const at::Tensor& other) {
  bool done = false;
  at::Tensor r = run(Op, self, other, nullptr, &done);
  return done ? r : boxed(Op, self, other, nullptr);
}

template <int Op>
at::Tensor functional_alpha(const at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  bool done = false;
  at::Tensor r = run(Op, self, other, &alpha, &done);
  return done ? r : boxed(Op, self, other, &alpha);
}

template <int Op>
at::Tensor& in_place(at::Tensor& self, const at::Tensor& other) {
  bool done = false;
  run(Op, self, other, nullptr, &done);
  if (!done) boxed(Op, self, other, nullptr);
  return self;
}

template <int Op>
at::Tensor& in_place_alpha(at::Tensor& self, const at::Tensor& other, const c10::Scalar& alpha) {
  bool done = false;
  run(Op, self, other, &alpha, &done);
  if (!done) boxed(Op, self, other, &alpha);
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
