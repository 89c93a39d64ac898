"""Creation family vs PyTorch on CPU: fill/zero (and the factories built on them),
ranges (arange, range, linspace, logspace), eye, tril/triu and their indices,
and composites (diag, diag_embed, one_hot, meshgrid)."""
import warnings

import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_raises_like, assert_same, check

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool]
NUMERIC = [d for d in DTYPES if d != torch.bool]


def _both(fn, scale=1.0):
    """fn(device) on CPU and on tpu, compared."""
    assert_same(fn("tpu"), fn("cpu"), scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_zero_factories(dtype):
    x = torch.arange(12).reshape(3, 4).to(dtype)
    check(lambda t: t.clone().fill_(3), x)
    check(lambda t: t.clone().fill_(2.75), x)
    check(lambda t: t.clone().zero_(), x)
    check(lambda t: t.clone().t().fill_(1), x)  # non-contiguous self
    check(lambda t: t.clone()[:, 1].fill_(5) if dtype != torch.bool else t.clone()[:, 1].fill_(True), x)
    _both(lambda d: torch.full((2, 3), 7, dtype=dtype, device=d))
    _both(lambda d: torch.ones(2, 3, dtype=dtype, device=d))
    _both(lambda d: torch.zeros(4, dtype=dtype, device=d))
    _both(lambda d: torch.scalar_tensor(1, dtype=dtype, device=d))
    check(lambda t: torch.full_like(t, 1), x)
    check(lambda t: t.new_full((2,), 1), x)
    check(lambda t: torch.zeros_like(t), x)
    e = torch.empty_like(x.to("tpu"))
    assert e.shape == x.shape and e.dtype == dtype and e.device.type == "tpu"


def test_fill_tensor_value():
    x = torch.randn(3, 4)
    check(lambda t, v: t.clone().fill_(v), x, torch.tensor(2.5))  # 0-d tpu tensor
    check(lambda t: t.clone().fill_(torch.tensor(-1.5)), x)  # 0-d cpu tensor
    check(lambda t, v: t.clone().fill_(v), x.long(), torch.tensor(2.5))  # cast to self's dtype
    with pytest.raises(RuntimeError, match="fill_ only supports 0-dimension value tensor"):
        torch.zeros(2, device="tpu").fill_(torch.ones(2, device="tpu"))


def test_fill_new_value_reuses_executable():
    import torchtpu

    x = torch.zeros(5, device="tpu")
    x.fill_(1.0)
    x.cpu()  # the transfer's executable, if any, is compiled here too
    before = torchtpu.metrics()
    for v in (2.0, 3.0, -4.0):
        x.fill_(v)
        assert x.cpu().tolist() == [v] * 5
    after = torchtpu.metrics()
    assert after["cache_misses"] == before["cache_misses"]
    assert after["ops_executed"] > before["ops_executed"]  # the fills did run on the device


ARANGES = [(5,), (1, 7), (1, 7, 2), (0, 1, 0.25), (5, -3, -1.5), (-2.5, 3.7), (0, 10, 3), (10, 0, -3), (0, 0), (0, 1e-3, 1)]


@pytest.mark.parametrize("args", ARANGES)
def test_arange_default_dtype(args):
    _both(lambda d: torch.arange(*args, device=d))


@pytest.mark.parametrize("dtype", NUMERIC)
def test_arange_dtypes(dtype):
    _both(lambda d: torch.arange(0, 5, dtype=dtype, device=d))
    _both(lambda d: torch.arange(1, 11, 3, dtype=dtype, device=d))
    _both(lambda d: torch.arange(0.5, 5.2, 1.5, dtype=dtype, device=d))  # truncated start/step for ints
    if dtype != torch.uint8:
        _both(lambda d: torch.arange(3, -4, -2, dtype=dtype, device=d))


def test_arange_out():
    def fn(d):
        t = torch.empty(0, dtype=torch.int32, device=d)
        torch.arange(5, out=t)
        u = torch.empty(2, dtype=torch.float64, device=d)
        torch.arange(1, 2, 0.25, out=u)
        return t, u

    _both(fn)


def test_arange_lengths_are_not_cached_across_values():
    for n in (3, 7, 2, 7):
        assert torch.arange(n, device="tpu").shape == (n,)
        assert torch.arange(0.0, n * 0.5, 0.5, device="tpu").shape == (n,)


def test_arange_errors():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        torch.arange(0, 5, 0, device="tpu")
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent with step sign"):
        torch.arange(5, 0, 1, device="tpu")
    with pytest.raises(RuntimeError, match="unsupported range"):
        torch.arange(0, float("inf"), device="tpu")
    # the CPU's dtype error, not a missing lowering
    with pytest.raises(NotImplementedError) as cpu:
        torch.arange(3, dtype=torch.bool)
    assert_raises_like(cpu.value, lambda: torch.arange(3, dtype=torch.bool, device="tpu"))


def test_range_deprecated():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _both(lambda d: torch.range(0, 5, 0.7, device=d))
        _both(lambda d: torch.range(1, 4, device=d))
        _both(lambda d: torch.range(1, 4, dtype=torch.int64, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64,
                                   torch.int32, torch.uint8])
def test_linspace_logspace(dtype):
    # PyTorch's CPU kernel does f16/bf16 linspace in half arithmetic (several
    # roundings); ours rounds once from f32, so allow a few ulps there
    sc = 4.0 if dtype in (torch.bfloat16, torch.float16) else 1.0
    _both(lambda d: torch.linspace(0, 10, 7, dtype=dtype, device=d), sc)
    _both(lambda d: torch.linspace(3, 3, 1, dtype=dtype, device=d))
    _both(lambda d: torch.linspace(0, 1, 0, dtype=dtype, device=d))
    if dtype != torch.uint8:
        _both(lambda d: torch.linspace(-3.7, 10.2, 9, dtype=dtype, device=d), sc)
        _both(lambda d: torch.linspace(5, -5, 6, dtype=dtype, device=d), sc)
    _both(lambda d: torch.logspace(0, 2, 3, dtype=dtype, device=d), sc)
    _both(lambda d: torch.logspace(0, 3, 4, base=2, dtype=dtype, device=d), sc)
    if dtype.is_floating_point:
        _both(lambda d: torch.logspace(-1, 1, 5, dtype=dtype, device=d), sc)


def test_linspace_float_default_and_errors():
    _both(lambda d: torch.linspace(-1, 1, 101, device=d))
    _both(lambda d: torch.logspace(-2, 2, 17, device=d))
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        torch.linspace(0, 1, -1, device="tpu")


@pytest.mark.parametrize("dtype", DTYPES)
def test_eye(dtype):
    _both(lambda d: torch.eye(3, dtype=dtype, device=d))
    _both(lambda d: torch.eye(2, 5, dtype=dtype, device=d))
    _both(lambda d: torch.eye(0, dtype=dtype, device=d))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [0, 1, -2, 5])
def test_tril_triu(dtype, k):
    x = torch.arange(2 * 4 * 5).reshape(2, 4, 5).to(dtype)
    check(lambda t: torch.tril(t, k), x)
    check(lambda t: torch.triu(t, k), x)
    check(lambda t: t.clone().tril_(k), x[0])
    check(lambda t: t.transpose(-1, -2).triu(k), x)


def test_tril_triu_errors():
    with pytest.raises(RuntimeError, match="tril: input tensor must have at least 2 dimensions"):
        torch.tril(torch.ones(3, device="tpu"))


@pytest.mark.parametrize("args", [(3, 3), (4, 3, 1), (3, 5, -1), (0, 3), (5, 2, 10)])
def test_tri_indices(args):
    _both(lambda d: torch.tril_indices(*args, device=d))
    _both(lambda d: torch.triu_indices(*args, device=d))
    _both(lambda d: torch.tril_indices(*args, dtype=torch.int32, device=d))


def test_diagonals():
    v, m = torch.randn(4), torch.randn(4, 5)
    check(torch.diag, v)
    check(lambda t: torch.diag(t, 2), v)
    check(lambda t: torch.diag(t, -1), m)
    check(torch.diag_embed, torch.randn(2, 3))
    check(lambda t: torch.diag_embed(t, offset=1, dim1=0, dim2=2), torch.randn(2, 3))
    check(lambda t: torch.diagonal(t, 1), m)


def test_one_hot_meshgrid():
    idx = torch.tensor([0, 3, 1, 1])
    check(lambda t: F.one_hot(t, 5), idx)
    check(lambda t: F.one_hot(t), idx)  # num_classes=-1 syncs for the max
    a, b = torch.arange(3.0), torch.arange(4.0)
    check(lambda x, y: torch.meshgrid(x, y, indexing="ij"), a, b)
    check(lambda x, y: torch.meshgrid(x, y, indexing="xy"), a, b)
