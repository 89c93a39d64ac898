"""Elementwise results keep their operands' memory layout, as on CPU (TensorIterator's
rule): the same strides as PyTorch on the CPU for transposed, channels_last, expanded
and mixed operands, the same values, and the code that relies on it (a `.view` after
transposing an elementwise result back) runs as it does on CPU and CUDA.

Float32 results: arithmetic is exact (the same op on the same numbers); transcendental
functions (gelu's erf) get torch.testing's float32 defaults (rtol 1.3e-6, atol 1e-5)."""
import pytest
import torch
import torch.nn.functional as F

torch.manual_seed(0)
_T = torch.randn(2, 3, 4, 5)
_CL = torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)

# name -> (function, operands); every operand is moved to the device as it is laid out
CASES = {
    "transposed_mul_scalar": (lambda a: a * 2.0, [_T.transpose(1, 2)]),
    "transposed_2d_add": (lambda a: a + 1, [torch.randn(4, 6).t()]),
    "channels_last_relu": (torch.relu, [_CL]),
    "channels_last_plus_bias": (lambda a, b: a + b, [_CL, torch.randn(5)]),
    "channels_last_times_contiguous": (lambda a, b: a * b, [_CL, _T]),
    "contiguous_times_channels_last": (lambda a, b: a * b, [_T, _CL]),
    "channels_last_where": (lambda a: torch.where(a > 0, a, 0.0), [_CL]),
    "expanded_add": (lambda a: a + 1, [torch.randn(1, 5).expand(3, 5)]),
    "permuted_gelu": (F.gelu, [_T.permute(3, 1, 0, 2)]),
    "transposed_sub_broadcast_row": (lambda a, b: a - b, [torch.randn(5, 4).t(), torch.randn(1, 5)]),
    "transposed_pow_compare": (lambda a: (a.abs() ** 1.5) > 0.5, [_T.transpose(0, 3)]),
    "sliced_step_add": (lambda a: a + 1, [_T[:, :, ::2]]),
    "transposed_abs_neg": (lambda a: -a.abs(), [_T.transpose(0, 3)]),  # composites through out=
}


@pytest.mark.parametrize("name", list(CASES))
def test_elementwise_result_strides_match_cpu(name):
    fn, operands = CASES[name]
    want = fn(*operands)
    got = fn(*[t.to("tpu") for t in operands])
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.stride() == want.stride(), (got.stride(), want.stride())
    torch.testing.assert_close(got.cpu(), want)


def test_view_after_transposing_an_elementwise_result_back():
    """The attention idiom: heads split by a transposed view, scaled, merged back with
    .view(). CPU and CUDA keep q's layout through the multiply, so the view is legal."""
    B, T, H, D = 2, 3, 4, 5
    x = torch.randn(B, T, H * D)
    outs = []
    for dev in ("cpu", "tpu"):
        q = x.to(dev).view(B, T, H, D).transpose(1, 2)
        outs.append((q * 0.5).transpose(1, 2).view(B, T, H * D).cpu())
    torch.testing.assert_close(outs[1], outs[0], rtol=0, atol=0)


def test_gradients_through_laid_out_results():
    """Backward of elementwise ops on transposed inputs: same gradients as CPU, and the
    gradient of a transposed leaf keeps CPU's layout."""
    base = torch.randn(4, 6)
    grads = []
    for dev in ("cpu", "tpu"):
        leaf = base.to(dev).t().detach().requires_grad_()
        (torch.tanh(leaf * 3.0) * leaf).sum().backward()
        grads.append(leaf.grad)
    assert grads[1].stride() == grads[0].stride()
    torch.testing.assert_close(grads[1].cpu(), grads[0])  # tanh: the float32 defaults (docstring)


def test_in_place_and_out_keep_their_own_layout():
    """In-place ops and out= write into the given tensor whatever its layout."""
    a = _CL.clone()
    t = _CL.to("tpu")
    t.mul_(2.0)
    a.mul_(2.0)
    assert t.stride() == a.stride()
    torch.testing.assert_close(t.cpu(), a, rtol=0, atol=0)
    out = torch.empty(2, 3, 4, 5, device="tpu")
    torch.add(_CL.to("tpu"), 1.0, out=out)
    assert out.is_contiguous()
    torch.testing.assert_close(out.cpu(), _CL + 1.0, rtol=0, atol=0)
