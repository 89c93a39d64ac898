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
    check(lambda t: tuple(torch.histogram(t, 2)), torch.zeros(0, dtype=dtype))  # no data: edges over [0, 1]


def _dd(t, *args, **kwargs):
    h = torch.histogramdd(t, *args, **kwargs)
    return (h.hist, *h.bin_edges)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogramdd(dtype):
    x, w = torch.randn(500, 3, generator=G).to(dtype), torch.rand(500, generator=G).to(dtype)
    check(lambda t: _dd(t, bins=[3, 4, 2]), x)
    check(lambda t: _dd(t, bins=4), x)  # one count for every dimension
    check(lambda t: _dd(t, bins=[2, 3, 4], range=[-1.0, 1.0, -2.0, 0.5, 0.0, 0.0]), x)  # an empty range widens
    check(lambda t, ww: _dd(t, bins=[3, 2, 2], weight=ww, density=True), x, w)
    edges = [torch.tensor(e, dtype=dtype) for e in ([-1.0, 0.0, 2.0], [-3.0, 0.0, 0.5, 3.0], [-0.5, 0.5])]
    check(lambda t, a, b, c: _dd(t, bins=[a, b, c]), x, *edges)
    check(lambda t, a, b, c: _dd(t, bins=[a, b, c], density=True), x, *edges)
    check(lambda t: _dd(t, bins=[2, 2]), torch.randn(4, 5, 2, generator=G).to(dtype))  # (..., D) points
    check(lambda t: _dd(t, bins=[2, 2]), torch.zeros(0, 2, dtype=dtype))
    on_edges = torch.tensor([[0.0, 1.0], [2.0, 2.0], [float("nan"), 0.0], [1.0, 3.0]], dtype=dtype)
    check(lambda t: _dd(t, bins=[2, 3], range=[0.0, 2.0, 1.0, 3.0]), on_edges)  # the NaN point counts nowhere


def test_histogramdd_errors():
    import torchtpu
    from tpu_testing import check_like_cpu
    x = torch.randn(10, 2, generator=G)
    for kwargs in (dict(bins=[3]), dict(bins=[3, 4], range=[0.0, 1.0]), dict(bins=[0, 4]),
                   dict(bins=[3, 4], range=[1.0, 0.0, 0.0, 1.0])):
        check_like_cpu(lambda t: _dd(t, **kwargs), x)
    check_like_cpu(lambda t: _dd(t, bins=[2, 2]), torch.ones(3, 2, dtype=torch.int64))
    # NaN or inf data without a range: a device-side check, raised at the next sync
    for bad in (torch.tensor([1.0, float("nan")]), torch.tensor([[1.0, float("inf")]])):
        with pytest.raises(RuntimeError, match="range is not finite"):
            r = torch.histogram(bad.to("tpu"), 3) if bad.dim() == 1 else torch.histogramdd(bad.to("tpu"), [2, 2])
            r[0].cpu()
    assert all(torchtpu._C.op_supported(n) for n in
               ("_histogramdd_bin_edges", "_histogramdd_from_bin_cts", "_histogramdd_from_bin_tensors"))
