"""torch.histogram on tpu vs PyTorch on CPU: a bin count (range given or taken
from the data, min == max), given edges, weights, density, NaN and out-of-range
elements, values on the edges (the last edge closes the last bin)."""
import pytest
import torch

from tpu_testing import check

G = torch.Generator().manual_seed(0)
X = torch.randn(1000, generator=G)
W = torch.rand(1000, generator=G)
ON_EDGES = torch.tensor([0.0, 1.0, 2.0, 3.0, 9.0, float("nan"), -1.0, 10.0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram(dtype):
    x, w = X.to(dtype), W.to(dtype)
    check(lambda t: tuple(torch.histogram(t, 10)), x)
    check(lambda t: tuple(torch.histogram(t, 7, range=(-1.0, 2.0))), x)
    check(lambda t, e: tuple(torch.histogram(t, e)), x, torch.tensor([-2.0, -0.5, 0.0, 3.0], dtype=dtype))
    check(lambda t, ww: tuple(torch.histogram(t, 5, weight=ww, density=True)), x, w)
    check(lambda t: tuple(torch.histogram(t, 4)), torch.full((3,), 2.0, dtype=dtype))  # min == max
    check(lambda t, e: tuple(torch.histogram(t, e)), ON_EDGES.to(dtype), torch.tensor([0.0, 2.0, 5.0, 9.0], dtype=dtype))
    check(lambda t: tuple(torch.histogram(t, 3, range=(0.0, 9.0))), ON_EDGES.to(dtype))
    check(lambda t: tuple(torch.histogram(t, 7)), torch.rand(10000, generator=G).to(dtype) * 7)
