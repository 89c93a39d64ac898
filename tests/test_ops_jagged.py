"""Nested tensors with layout=torch.jagged on tpu: the dense <-> jagged
conversions (_jagged_to_padded_dense_forward, _padded_dense_to_jagged_forward)
vs PyTorch on CPU — empty entries, truncation to max_lengths, padding values,
1-D values, total_L given or read from the offsets — and
NJT.to_padded_tensor, which reaches them."""
import pytest
import torch

from tpu_testing import assert_same, check

G = torch.Generator().manual_seed(0)
V = torch.randn(7, 3, generator=G)
OFF = torch.tensor([0, 2, 2, 7])  # an empty entry in the middle


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
@pytest.mark.parametrize("max_len", [0, 2, 5, 6])
def test_jagged_to_padded_dense(dtype, max_len):
    v = (V * 10).to(dtype)
    for pad in (0.0, -1.5 if dtype.is_floating_point else -1.0):
        check(lambda v, o: torch.ops.aten._jagged_to_padded_dense_forward(v, [o], [max_len], pad), v, OFF)
    check(lambda v, o: torch.ops.aten._jagged_to_padded_dense_forward(v[:, 0], [o], [max_len]), v, OFF)  # 1-D values


@pytest.mark.parametrize("total_l", [None, 7])
def test_padded_dense_to_jagged(total_l):
    dense = torch.randn(3, 5, 3, generator=G)
    check(lambda d, o: torch.ops.aten._padded_dense_to_jagged_forward(d, [o], total_l), dense, OFF)
    check(lambda d, o: torch.ops.aten._padded_dense_to_jagged_forward(d, [o.int()], total_l), dense[..., 0], OFF)


def test_nested_tensors_to_padded():
    nt_c = torch.nested.nested_tensor_from_jagged(V, OFF)
    nt_t = torch.nested.nested_tensor_from_jagged(V.to("tpu"), OFF.to("tpu"))
    assert_same(nt_t.to_padded_tensor(0.0), nt_c.to_padded_tensor(0.0))
    assert_same(nt_t.to_padded_tensor(-2.0), nt_c.to_padded_tensor(-2.0))
    import torchtpu
    assert torchtpu._C.op_supported("_jagged_to_padded_dense_forward")
    assert torchtpu._C.op_supported("_padded_dense_to_jagged_forward")
