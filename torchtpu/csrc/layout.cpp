// Elementwise results keep their inputs' memory layout, as PyTorch's TensorIterator
// lays them out: `q * 2` of a transposed q is transposed, `relu` of a channels_last
// tensor is channels_last. Code written against CPU or CUDA relies on it (a `.view`
// after transposing an elementwise result back).
//
// How, without a copy: the op runs on its tensor operands permuted so that the
// layout's dimension order is the logical one (views that read the same memory), so
// its result comes out contiguous in that order, and the returned tensor is that
// result permuted back: its strides are the ones TensorIterator would allocate.
#include "layout.h"

#include <algorithm>

namespace torchtpu {
namespace {

// Strides of one operand over the result's `rank` dims, TensorIterator's way: a
// broadcast dimension (missing, or of size 1 where the result is not) counts 0.
std::vector<int64_t> aligned_strides(const at::Tensor& t, at::IntArrayRef shape) {
  const int64_t rank = static_cast<int64_t>(shape.size()), offset = rank - t.dim();
  std::vector<int64_t> s(static_cast<size_t>(rank), 0);
  for (int64_t i = 0; i < t.dim(); ++i)
    s[offset + i] = (t.size(i) == 1 && shape[offset + i] != 1) ? 0 : t.stride(i);
  return s;
}

// TensorIterator's dimension order (reorder_dimensions): innermost first, by the
// operands' strides in argument order; a broadcast stride decides nothing, equal
// strides put the smaller dimension inside.
std::vector<int64_t> innermost_first(const std::vector<std::vector<int64_t>>& strides, at::IntArrayRef shape) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> perm(static_cast<size_t>(rank));
  for (int64_t i = 0; i < rank; ++i) perm[i] = rank - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const std::vector<int64_t>& s : strides) {
      if (s[d0] == 0 || s[d1] == 0) continue;
      if (s[d0] < s[d1]) return -1;
      if (s[d0] > s[d1]) return 1;
      if (shape[d0] > shape[d1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < rank; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      const int cmp = should_swap(perm[d0], perm[d1]);
      if (cmp > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (cmp < 0) {
        break;
      }
    }
  }
  return perm;
}

}  // namespace

// The caller has seen a non-contiguous operand (its scan is the common case's only
// cost); contiguous operands would come out in the logical order here too.
std::vector<int64_t> pointwise_order(const std::vector<at::Tensor>& operands) {
  int64_t rank = 0;
  for (const at::Tensor& t : operands) {
    if (t.dim() == 0) continue;  // scalars take no part in the layout
    if (t.device().type() != kTpu) return {};  // the op's own path reports it
    rank = std::max<int64_t>(rank, t.dim());
  }
  if (rank < 2) return {};
  std::vector<int64_t> shape(static_cast<size_t>(rank), 1);  // the broadcast shape
  for (const at::Tensor& t : operands) {
    const int64_t offset = rank - t.dim();
    for (int64_t i = 0; i < t.dim(); ++i) {
      int64_t& d = shape[offset + i];
      if (t.size(i) != 1 && d != 1 && t.size(i) != d) return {};  // the op reports it
      if (t.size(i) != 1) d = t.size(i);
    }
  }
  std::vector<std::vector<int64_t>> strides;
  for (const at::Tensor& t : operands)
    if (t.dim() > 0) strides.push_back(aligned_strides(t, shape));
  std::vector<int64_t> order = innermost_first(strides, shape);
  std::reverse(order.begin(), order.end());  // outermost first: a permute's argument
  for (int64_t i = 0; i < rank; ++i)
    if (order[i] != i) return order;
  return {};
}

at::Tensor in_order(const at::Tensor& t, const std::vector<int64_t>& order) {
  const int64_t rank = static_cast<int64_t>(order.size());
  if (t.dim() == 0) return t;  // pointwise_order saw every other operand on tpu
  at::Tensor full = t;
  while (full.dim() < rank) full = full.unsqueeze(0);
  return full.permute(order);
}

at::Tensor back_from_order(const at::Tensor& r, const std::vector<int64_t>& order) {
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return r.permute(inverse);
}

}  // namespace torchtpu
