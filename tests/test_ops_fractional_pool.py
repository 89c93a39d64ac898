"""nn.functional.fractional_max_pool2d/3d on tpu vs PyTorch on CPU, with the
random samples given (the op is deterministic in them): values and indices
exactly (a max and its position), gradients, batched and unbatched inputs,
ties (first maximum wins)."""
import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_same, check

CASES = [(2, (2, 3, 9, 11), (2, 3), (4, 5)), (2, (3, 9, 11), 2, (4, 4)), (2, (1, 2, 7, 7), 3, (5, 3)),
         (3, (2, 2, 6, 7, 8), (2, 3, 2), (3, 4, 5)), (3, (2, 5, 5, 6), 2, (2, 3, 4))]


@pytest.mark.parametrize("nd,shape,kernel,out", CASES, ids=str)
def test_fractional_max_pool(nd, shape, kernel, out):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=g)
    x[..., 0] = x[..., 1]  # ties: the first maximum's index is returned
    n = shape[0] if len(shape) == nd + 2 else 1
    samples = torch.rand(n, shape[-nd - 1], nd, generator=g)
    pool = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d

    def fn(t, s):
        return pool(t, kernel, output_size=out, _random_samples=s, return_indices=True)
    check(fn, x, samples)  # values and int64 indices
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    yc, yt = fn(xc, samples)[0], fn(xt, samples.to("tpu"))[0]
    grad = torch.randn(yc.shape, generator=g)
    yc.backward(grad)
    yt.backward(grad.to("tpu"))
    assert_same(xt.grad, xc.grad)
