// Autocast (torch.autocast("tpu", ...)) policies for the AutocastPrivateUse1 key.
//
// PyTorch ships no policies for PrivateUse1: a backend registers them. We use the
// op lists PyTorch itself uses for CUDA (ATen/autocast_mode.h exposes them for other
// backends): matmul-like ops run in the autocast dtype, numerically sensitive ops
// (reductions, softmax, norms, losses, exp/log/pow ...) in float32, mixed-dtype ops
// promote to the widest input type. Every other op falls through to the next key.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace torchtpu {
namespace {

using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

at::Tensor binary_cross_entropy_banned(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                                       int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
              "safe to autocast.");
}

// Ops without a policy run unchanged.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // lower_precision_fp: inputs cast to the autocast dtype.
#define TPU_KERNEL_LOW_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(TPU_KERNEL_LOW_PRECISION_FP)
#undef TPU_KERNEL_LOW_PRECISION_FP

  // fp32: inputs cast to float32.
#define TPU_KERNEL_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(TPU_KERNEL_FP32)
#undef TPU_KERNEL_FP32

  // fp32_set_opt_dtype: softmax, sum, cumsum ... get dtype=float32 unless one is given.
#define TPU_KERNEL_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(TPU_KERNEL_FP32_SET_OPT_DTYPE)
#undef TPU_KERNEL_FP32_SET_OPT_DTYPE

  // fp32_append_dtype: norm redispatched with dtype=float32.
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)

  // promote: run in the widest floating type among the inputs.
#define TPU_KERNEL_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(TPU_KERNEL_PROMOTE)
#undef TPU_KERNEL_PROMOTE

  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace
}  // namespace torchtpu
