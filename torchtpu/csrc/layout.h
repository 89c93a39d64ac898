// The memory layout of elementwise results (layout.cpp).
#pragma once
#include <ATen/core/Tensor.h>

#include <vector>

#include "common.h"

namespace torchtpu {

// The dimension order (outermost first, as permute takes it) in which an
// elementwise op's result is laid out, by TensorIterator's rule over these tensor
// operands; empty when it is the logical order (contiguous operands, the common
// case), or when the operands are not all tpu tensors that broadcast together.
std::vector<int64_t> pointwise_order(const std::vector<at::Tensor>& operands);
// An operand seen in that order: broadcast dimensions added in front, then
// permuted (a view). Scalars and non-tpu tensors are returned as they are.
at::Tensor in_order(const at::Tensor& t, const std::vector<int64_t>& order);
// A result computed in that order, permuted back to the logical one (a view).
at::Tensor back_from_order(const at::Tensor& r, const std::vector<int64_t>& order);

}  // namespace torchtpu
