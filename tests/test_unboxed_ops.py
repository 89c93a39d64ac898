"""add / sub / mul / div (.Tensor) run through unboxed kernels (torchtpu/csrc/unboxed.cpp)
that hand what they do not handle to the boxed fallback. test_ops_elementwise.py
covers the ops themselves (dtypes, promotion, broadcasting, views, out=); this file
covers the hand-offs, each compared with PyTorch on CPU (exact: small integers and
dyadic floats):
- a 0-dim CPU tensor as `self` (the boxed path turns it into a scalar operand);
- a CPU tensor that is not 0-dim, and an in-place op whose `self` is on the CPU:
  PyTorch's mixed-device error;
- the in-place forms on views, aliasing and autograd through them."""
import pytest
import torch

import torchtpu  # noqa: F401

OPS = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div}


def exact(a, b):
    assert a.device.type == "tpu"
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert torch.equal(a.cpu(), b), (a.cpu(), b)


@pytest.mark.parametrize("name", list(OPS))
def test_cpu_scalar_self_is_a_scalar_operand(name):
    op = OPS[name]
    x = torch.tensor([1.0, 2.0, 4.0, -8.0])
    for s in (torch.tensor(2.0), torch.tensor(3), torch.tensor(True)):
        if name == "sub" and s.dtype == torch.bool:
            continue
        exact(op(s, x.to("tpu")), op(s, x))


@pytest.mark.parametrize("name", list(OPS))
def test_a_cpu_tensor_that_is_not_a_scalar_raises_pytorchs_device_error(name):
    op = OPS[name]
    t = torch.ones(3, device="tpu")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(t, torch.ones(3))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        getattr(torch.ones(3), name + "_")(t)


@pytest.mark.parametrize("name", list(OPS))
def test_in_place_on_a_strided_view_and_on_itself(name):
    base = torch.arange(1.0, 13.0).reshape(3, 4)
    tb = base.to("tpu")
    other = torch.tensor([2.0, 4.0, 0.5])
    getattr(tb.t()[1], name + "_")(other.to("tpu"))
    getattr(base.t()[1], name + "_")(other)
    exact(tb, base)
    y = torch.tensor([1.0, 2.0, 8.0])
    ty = y.to("tpu")
    getattr(ty, name + "_")(ty)
    getattr(y, name + "_")(y)
    exact(ty, y)


def test_alpha_and_zero_dim_tpu_operands():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    b = torch.tensor(0.5)
    exact(torch.add(a.to("tpu"), b.to("tpu"), alpha=4), torch.add(a, b, alpha=4))
    exact(torch.sub(a.to("tpu"), b.to("tpu"), alpha=-2), torch.sub(a, b, alpha=-2))
    i = torch.tensor([1, 2, 3])
    exact(torch.add(i.to("tpu"), i.to("tpu"), alpha=3), torch.add(i, i, alpha=3))
    with pytest.raises(RuntimeError, match="alpha must not be a floating point number"):
        torch.add(i.to("tpu"), i.to("tpu"), alpha=0.5)


def test_gradients_through_the_functional_and_in_place_forms():
    torch.manual_seed(0)
    a, b = torch.randn(4, 3), torch.randn(3)
    results = []
    for dev in ("cpu", "tpu"):
        x = a.clone().to(dev).detach().requires_grad_()
        y = b.clone().to(dev).detach().requires_grad_()
        z = (x * y + x / (y.abs() + 1.0) - 2.0 * y).clone()
        z.mul_(0.5).add_(x, alpha=3.0).sub_(y).div_(2.0)
        z.sum().backward()
        results.append((z.detach().cpu(), x.grad.cpu(), y.grad.cpu()))
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
