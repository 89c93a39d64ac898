"""torch.segment_reduce on tpu vs PyTorch on CPU: the five reductions, lengths and
offsets, initial, empty segments, a zero in prod, max/min ties, axis > 0,
gradients, and the unsafe=False check (float32 tolerances)."""
import pytest
import torch

from tpu_testing import assert_raises_like, check_grad

DATA = torch.tensor([1.0, 2.0, 0.0, 4.0, 5.0, 3.0, 3.0])  # a zero (prod) and a tie (max/min)
LENGTHS = torch.tensor([2, 0, 3, 2])                      # segment 1 is empty
OFFSETS = torch.tensor([0, 2, 2, 5, 7])


@pytest.mark.parametrize("initial", [None, 2.0])
@pytest.mark.parametrize("by", ["lengths", "offsets"])
@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce(reduce, by, initial):
    bounds = LENGTHS if by == "lengths" else OFFSETS
    check_grad(lambda x, s: torch.segment_reduce(x, reduce, initial=initial, **{by: s}), DATA, bounds)


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "prod"])
def test_segment_reduce_axis1(reduce):
    x = torch.randn(2, 5, 3, generator=torch.Generator().manual_seed(0))
    check_grad(lambda t, s: torch.segment_reduce(t, reduce, lengths=s, axis=1), x, torch.tensor([[2, 3], [1, 4]]))


def test_segment_reduce_bad_lengths():
    fn = lambda x, s: torch.segment_reduce(x, "sum", lengths=s)  # noqa: E731
    with pytest.raises(RuntimeError) as cpu:
        fn(DATA, torch.tensor([2, 2]))
    assert_raises_like(cpu.value, fn, DATA, torch.tensor([2, 2]))
