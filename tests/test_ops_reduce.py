"""The reduce family compared with PyTorch on CPU: reductions, arg reductions,
moments, norms, scans and softmax, over dtypes x dims x keepdim, plus NaN,
ties, empty, 0-d and non-contiguous inputs, errors and gradients."""
import math

import pytest
import torch

from tpu_testing import assert_raises_like, assert_same, assert_special, check, check_grad

ALL = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]
FLOATS = [torch.float32, torch.bfloat16, torch.float16]


def make(shape, dtype, lo=-3, hi=4):
    """Random values of `dtype`; small integer ranges give ties on purpose."""
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    if dtype == torch.uint8:
        lo = 0
    return torch.randint(lo, hi, shape, dtype=dtype)


def same_or_raises(fn, *args, scale=1.0, **kwargs):
    """check(), or when PyTorch's CPU raises, exactly the same exception class on
    tpu (a missing lowering's NotImplementedError is no match for a RuntimeError)
    and the same first line (a NotImplementedError's names the CPU kernel: there
    assert_raises_like compares the dtype error)."""
    try:
        fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - any PyTorch error is the expectation
        tpu = assert_raises_like(e, fn, *args, **kwargs)
        if not isinstance(e, NotImplementedError):
            assert str(e).split("\n")[0] in str(tpu), f"{tpu!r} vs {e!r}"
        return
    check(fn, *args, scale=scale, **kwargs)


def dim_kw(dim, keepdim):
    return {} if dim is None else {"dim": dim, "keepdim": keepdim}


# Reductions taking (dim: int | list, keepdim); name -> fn(x, **kw).
LIST_REDUCTIONS = {
    "sum": torch.sum,
    "nansum": torch.nansum,
    "mean": torch.mean,
    "amax": lambda x, **kw: torch.amax(x, **({"dim": ()} | kw)),
    "amin": lambda x, **kw: torch.amin(x, **({"dim": ()} | kw)),
    "any": torch.any,
    "all": torch.all,
    "count_nonzero": lambda x, dim=None, keepdim=False: torch.count_nonzero(x, dim=dim),
    "logsumexp": lambda x, dim=None, keepdim=False: torch.logsumexp(x, dim=tuple(range(x.dim())) if dim is None else dim,
                                                                     keepdim=keepdim),
    "var": torch.var,
    "std": torch.std,
    "norm": lambda x, **kw: torch.linalg.vector_norm(x, **kw),
}


@pytest.mark.parametrize("dtype", ALL, ids=str)
@pytest.mark.parametrize("name", list(LIST_REDUCTIONS))
def test_list_reductions_dtypes(name, dtype):
    x = make((3, 4, 5), dtype)
    # bf16/f16: both sides accumulate the 20 elements in float32 but in different orders,
    # and the final rounding to the half type can land one ulp apart (0.8 x TOL);
    # seed 0's worst is 0.61 x TOL (nansum). float32: within TOL either way.
    same_or_raises(LIST_REDUCTIONS[name], x, scale=2, dim=(0, 2), keepdim=True)


@pytest.mark.parametrize("dim,keepdim", [(None, False), (-1, True), ((0, 2), False)], ids=str)
@pytest.mark.parametrize("name", list(LIST_REDUCTIONS))
def test_list_reductions_dims(name, dim, keepdim):
    check(LIST_REDUCTIONS[name], make((3, 4, 5), torch.float32), **dim_kw(dim, keepdim))


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_prod(dtype):
    x = make((3, 4), dtype)
    same_or_raises(torch.prod, x)
    same_or_raises(torch.prod, x, 1, keepdim=True)
    same_or_raises(torch.prod, x, -2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8, torch.bool], ids=str)
def test_sum_dtype_argument(dtype):
    x = make((4, 5), dtype)
    check(torch.sum, x, dtype=torch.float64)
    check(torch.sum, x, 1, dtype=torch.int32)
    check(torch.prod, x, 0, dtype=torch.float32)
    same_or_raises(torch.mean, x, dtype=torch.float32)
    same_or_raises(torch.mean, x, dtype=torch.int64)
    check(torch.cumsum, x, 1, dtype=torch.float32)


def test_sum_empty_list_means_all_and_any_empty_list_means_none():
    x = make((3, 4), torch.float32)
    check(lambda v: torch.sum(v, dim=[]), x)
    check(lambda v: torch.mean(v, dim=[]), x)
    check(lambda v: torch.any(v, dim=()), x)
    check(lambda v: torch.all((v.abs() * 2).to(torch.uint8), dim=()), x)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_max_min_dim_values_and_first_indices(dtype):
    x = make((4, 6), dtype)  # small integer range: ties everywhere
    for fn in (torch.max, torch.min):
        same_or_raises(lambda v: tuple(fn(v, 1)), x)
        same_or_raises(lambda v: tuple(fn(v, 0, keepdim=True)), x)
        same_or_raises(lambda v: fn(v), x)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_argmax_argmin(dtype):
    x = make((4, 6), dtype)
    for fn in (torch.argmax, torch.argmin):
        same_or_raises(fn, x)
        same_or_raises(fn, x, keepdim=True)
        same_or_raises(fn, x, 1)
        same_or_raises(fn, x, -2, keepdim=True)


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_aminmax(dtype):
    x = make((4, 6), dtype)
    same_or_raises(lambda v: tuple(torch.aminmax(v)), x)
    same_or_raises(lambda v: tuple(torch.aminmax(v, keepdim=True)), x)
    same_or_raises(lambda v: tuple(torch.aminmax(v, dim=1, keepdim=True)), x)


def test_max_other_is_elementwise():
    a, b = make((3, 4), torch.float32), make((4,), torch.int64)
    a[0, 0] = float("nan")
    check(torch.max, a, b)
    check(torch.min, a, b)
    check(torch.max, make((3,), torch.bool), make((3,), torch.bool))


# Defined values of the log-sum-exp family on a row with nan/+-inf, in float64 (never
# the host CPU's kernels, whose special-value results can depend on the ISA). The
# max-shifted definitions (PyTorch's): logsumexp(x) = m + log(sum(exp(x - m))), m =
# max(x), with m when m is +-inf; softmax(x) = exp(x - m) / sum(exp(x - m)), so a
# row holding nan or +inf (inf - inf) is nan throughout and a row of -inf too.

def _logsumexp(row):
    if any(v != v for v in row):
        return math.nan
    m = max(row)
    return m if math.isinf(m) else m + math.log(sum(math.exp(v - m) for v in row))


def _logaddexp(a, b):
    if a != a or b != b:
        return math.nan
    m, n = max(a, b), min(a, b)
    return m if m == -math.inf or m == math.inf else m + math.log1p(math.exp(n - m))


def _logcumsumexp(row):
    out, acc = [], -math.inf
    for v in row:
        acc = _logaddexp(acc, v)
        out.append(acc)
    return out


def _log_softmax(row):
    m = max(row) if all(v == v for v in row) else math.nan
    if m != m or math.isinf(m):
        return [math.nan] * len(row)
    lse = math.log(sum(math.exp(v - m) for v in row))
    return [v - m - lse for v in row]


def _softmax(row):
    return [math.exp(v) for v in _log_softmax(row)]


def _inf_norm(row):
    return math.nan if any(v != v for v in row) else max(abs(v) for v in row)


def rows(f, x):
    """f of each row of a 2-D tensor, as a tensor of x's dtype."""
    return torch.tensor([f(r) for r in x.double().tolist()], dtype=torch.float64).to(x.dtype)


def check_rows(fn, f, x):
    assert_special(fn(x.to("tpu")), rows(f, x), signed_zeros=False, what=f.__name__)


def test_nan_propagation():
    x = torch.randn(4, 5)
    x[1, 2] = float("nan")
    x[3, 0] = float("nan")
    x[3, 4] = float("nan")
    # nan is the largest value for max/argmax (first nan's index): comparisons, exact on any ISA
    for fn in (torch.amax, torch.amin, torch.max, torch.min, torch.argmax, torch.argmin):
        check(fn, x)
    for fn in (torch.max, torch.min):
        check(lambda v: tuple(fn(v, 1)), x)
    check(torch.argmax, x, 1)
    check(torch.amax, x, 0)
    check(lambda v: tuple(torch.aminmax(v, dim=1)), x)
    check(lambda v: tuple(torch.cummax(v, 1)), x)
    check(lambda v: tuple(torch.cummin(v, 1)), x)
    check(torch.nansum, x, 1)  # finite results
    check(torch.nanmean, x, 1)
    check_rows(lambda v: torch.logsumexp(v, 1), _logsumexp, x)
    check_rows(lambda v: torch.softmax(v, 1), _softmax, x)
    check_rows(lambda v: torch.logcumsumexp(v, 1), _logcumsumexp, x)
    check_rows(lambda v: torch.linalg.vector_norm(v, float("inf"), 1), _inf_norm, x)


def test_infinities():
    x = torch.tensor([[float("-inf"), float("-inf")], [float("inf"), 1.0], [float("-inf"), 0.0],
                      [float("inf"), float("inf")], [float("-inf"), float("inf")], [2.0, 1.0]])
    check_rows(lambda v: torch.logsumexp(v, 1), _logsumexp, x)
    check_rows(lambda v: torch.logcumsumexp(v, 1), _logcumsumexp, x)
    check_rows(lambda v: torch.log_softmax(v, 1), _log_softmax, x)
    check_rows(lambda v: torch.softmax(v, 1), _softmax, x)
    check_rows(lambda v: torch.amax(v, 1), max, x)


def test_logcumsumexp_float32_rounds_once():
    """Rows near 1e4, 4096 long: an ulp there (2**-10) is more than log1p adds for a term
    8 below the running value, so a plain float32 scan drifts (1.5 ulp from float64 in a
    doubling scan). The compensated scan rounds once: within half an ulp of float64
    (+5%), and the gradient (PyTorch's formula, itself logcumsumexp) no further from
    float64 than CPU's own kernel is."""
    x = 1e4 + torch.randn(4, 4096, generator=torch.Generator().manual_seed(0))
    ref = torch.logcumsumexp(x.double(), 1)
    got = torch.logcumsumexp(x.to("tpu"), 1).cpu().double()
    ulp = torch.exp2(torch.floor(torch.log2(ref.abs())) - 23)
    assert ((got - ref).abs() <= 0.525 * ulp).all(), ((got - ref).abs() / ulp).max().item()
    g = torch.randn(4, 300, generator=torch.Generator().manual_seed(1))
    grads = {}
    for name, dev, dt in (("f64", "cpu", torch.float64), ("cpu", "cpu", torch.float32), ("tpu", "tpu", torch.float32)):
        v = x[:, :300].to(dev, dt).requires_grad_()
        torch.logcumsumexp(v, 1).backward(g.to(dev, dt))
        grads[name] = v.grad.cpu().double()
    err = {k: (grads[k] - grads["f64"]).abs().max().item() for k in ("cpu", "tpu")}
    assert err["tpu"] <= err["cpu"] + 1e-6, err


@pytest.mark.parametrize("dtype", ALL, ids=str)
def test_scans(dtype):
    x = make((3, 37), dtype, -2, 3)  # 37: not a power of two (log-step scan)
    same_or_raises(torch.cumsum, x, 1)
    same_or_raises(torch.cumprod, x[:, :12], 1)
    same_or_raises(lambda v: tuple(torch.cummax(v, 1)), x)
    same_or_raises(lambda v: tuple(torch.cummin(v, -1)), x)
    same_or_raises(torch.logcumsumexp, x, 1)


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_softmax_family(dtype):
    x = make((3, 4, 5), dtype)
    for dim in (0, 1, -1):
        check(torch.softmax, x, dim)
        check(torch.log_softmax, x, dim)
    check(torch.softmax, x, 1, dtype=torch.float32)


def test_softmax_half_to_float():
    """half_to_float is CUDA-only in PyTorch; the tpu returns float32 like CUDA."""
    x = torch.randn(3, 5).half()
    y = torch.ops.aten._softmax(x.to("tpu"), 1, True)
    assert y.dtype == torch.float32
    # the half input upcasts exactly, and both sides compute in float32: float32 tolerance
    assert_same(y, torch.softmax(x.float(), 1))


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_var_std_mean(dtype):
    x = make((4, 6), dtype)
    kws = [{}, {"dim": (0, 1), "keepdim": True}, {"dim": 0, "correction": 0}, {"dim": 1, "correction": 2.5}]
    for kw in kws if dtype == torch.float32 else kws[2:]:
        check(torch.var, x, **kw)
        check(torch.std, x, **kw)
        check(lambda v: tuple(torch.var_mean(v, **kw)), x)
        check(lambda v: tuple(torch.std_mean(v, **kw)), x)
    same_or_raises(torch.var, make((3,), torch.int64))


def test_var_dof_non_positive():
    check(torch.var, torch.randn(1))
    check(torch.var, torch.randn(2, 3), 1, correction=3)
    check(torch.std, torch.randn(2, 3), 1, correction=5)


def test_var_complex():
    check(torch.var, torch.randn(4, 3, dtype=torch.complex64), 0)


@pytest.mark.parametrize("ord", [2, 1, float("inf"), float("-inf"), 0, 3, -1, 0.5])
def test_vector_norm_orders(ord):
    x = torch.randn(4, 5)
    x[0, 0] = 0.0
    check(torch.linalg.vector_norm, x, ord)
    check(torch.linalg.vector_norm, x, ord, dim=1, keepdim=True)
    check(torch.norm, x, ord, dim=(0, 1))


def test_norm_dtypes_and_errors():
    x = torch.randn(3, 4)
    check(torch.linalg.vector_norm, x.half())
    check(torch.linalg.vector_norm, x.bfloat16(), 1, dim=0)
    check(torch.linalg.vector_norm, x, dtype=torch.float64)
    check(torch.norm, x, 2, dtype=torch.float64)
    same_or_raises(torch.linalg.vector_norm, x, dtype=torch.float16)
    same_or_raises(torch.linalg.vector_norm, torch.arange(4))
    check(torch.linalg.vector_norm, torch.randn(3, dtype=torch.complex64))


def test_empty_reductions():
    e = torch.empty(2, 0)
    for fn in (torch.sum, torch.prod, torch.mean, torch.nansum, torch.count_nonzero, torch.any, torch.all,
               torch.var, torch.logsumexp, torch.amax, torch.argmax, torch.argmin):
        for args in ((1,), (0,)):
            same_or_raises(fn, e, *args)
    for fn in (torch.sum, torch.prod, torch.mean, torch.amax, torch.amin, torch.max, torch.min, torch.argmax,
               torch.aminmax, torch.linalg.vector_norm, torch.any, torch.all):
        same_or_raises(fn, e)
    same_or_raises(lambda v: tuple(torch.max(v, 1)), e)
    same_or_raises(lambda v: tuple(torch.aminmax(v, dim=1)), e)
    same_or_raises(lambda v: tuple(torch.max(v, 0)), e)
    same_or_raises(torch.cumsum, e, 1)
    same_or_raises(torch.softmax, e, 1)


def test_zero_dim_inputs():
    s = torch.tensor(2.5)
    for fn in (torch.sum, torch.mean, torch.prod, torch.amax, torch.max, torch.argmax, torch.any, torch.var,
               torch.linalg.vector_norm, torch.count_nonzero, torch.nansum):
        same_or_raises(fn, s)
    for fn in (torch.sum, torch.amax, torch.argmax, torch.cumsum, torch.cumprod, torch.softmax, torch.log_softmax,
               torch.logsumexp, torch.logcumsumexp):
        same_or_raises(fn, s, 0)
        same_or_raises(fn, s, -1)
    check(lambda v: tuple(torch.max(v, 0, keepdim=True)), s)
    check(lambda v: tuple(torch.cummax(v, 0)), s)
    check(lambda v: tuple(torch.aminmax(v, dim=0)), s)
    check(torch.argmax, s, 0, keepdim=True)


def test_non_contiguous_inputs():
    base = torch.randn(6, 8)
    fns = [lambda v: torch.sum(v, -1), torch.mean, lambda v: torch.amax(v, 0), lambda v: tuple(torch.max(v, -1)),
           lambda v: torch.var(v, 0), lambda v: torch.cumsum(v, -1), lambda v: torch.softmax(v, -1),
           lambda v: torch.linalg.vector_norm(v, 3)]
    views = (base.t(), base[::2, 1:7], base[:, 3], base.unsqueeze(0).expand(3, 6, 8))
    for i, x in enumerate(views):
        for fn in fns[i::2]:  # each op on two of the four view kinds
            check(fn, x)


def test_out_and_inplace_variants():
    x = torch.randn(4, 5)
    out = torch.empty(4, dtype=torch.float64)
    expected = torch.sum(x, 1, out=out.clone())
    actual = torch.sum(x.to("tpu"), 1, out=out.to("tpu"))
    assert_same(actual, expected)
    v, i = torch.empty(0), torch.empty(0, dtype=torch.long)
    got = torch.max(x.to("tpu"), 1, out=(v.to("tpu"), i.to("tpu")))
    assert_same(tuple(got), tuple(torch.max(x, 1)))
    check(lambda v: v.clone().cumsum_(1), x)


def test_large_reduction_accumulates_in_f32():
    x = torch.full((4096,), 0.1, dtype=torch.bfloat16)
    check(torch.sum, x)
    check(torch.mean, x.half())


# ------------------------------------------------------------------ gradients

GRADS = {
    "sum": lambda x: x.sum(1),
    "mean": lambda x: x.mean((0, 2)),
    "var": lambda x: x.var(1),
    "std": lambda x: x.std(-1, keepdim=True),
    "softmax": lambda x: x.softmax(1),
    "log_softmax": lambda x: x.log_softmax(-1),
    "logsumexp": lambda x: x.logsumexp(2),
    "norm": lambda x: torch.linalg.vector_norm(x, dim=1),
    "norm3": lambda x: torch.linalg.vector_norm(x, 3, dim=1),
    "amax": lambda x: x.amax(1),
    "max_dim": lambda x: x.max(1).values,
    "cumsum": lambda x: x.cumsum(1),
    "prod": lambda x: x.prod(1),
}


@pytest.mark.parametrize("name", list(GRADS))
def test_gradients(name):
    check_grad(GRADS[name], torch.randn(3, 4, 5))


def test_softmax_backward_reduced_precision():
    check_grad(lambda x: x.softmax(1), torch.randn(3, 6).bfloat16())
    check_grad(lambda x: x.log_softmax(1), torch.randn(3, 6).half())


def test_long_scan_accuracy():
    """The log-step scan over a long axis stays within f32 tolerance."""
    x = torch.randn(2, 1000)
    check(torch.cumsum, x, 1)


# ---------------------------------------------------------------- hash_tensor

@pytest.mark.parametrize("dtype", ALL + [torch.float64])
def test_hash_tensor(dtype):
    # xor of 64-bit patterns: every bit must match CPU's (floats widened to float64,
    # integers sign- or zero-extended), so values are compared exactly
    x = make((3, 4, 5), dtype)
    for dim, keep in [([], False), (1, False), ((0, 2), True), ((0, 1, 2), False)]:
        assert torch.equal(torch.hash_tensor(x.to("tpu"), dim, keepdim=keep).cpu(), torch.hash_tensor(x, dim, keepdim=keep))
    s = torch.tensor([float("nan"), -0.0, float("inf")])
    assert torch.equal(torch.hash_tensor(s.to("tpu")).cpu(), torch.hash_tensor(s))


def test_hash_tensor_errors():
    for fn in [lambda t: torch.hash_tensor(t), lambda t: torch.hash_tensor(t, dim=0),
               lambda t: torch.hash_tensor(t.reshape(2, 0) if t.numel() == 0 else t, mode=1)]:
        for x in [torch.ones(0), torch.ones(0, 3), torch.ones(2)]:
            same_or_raises(fn, x)
    same_or_raises(torch.hash_tensor, torch.ones(2, dtype=torch.complex64))
