"""The misc family compared with PyTorch on CPU: trace, softshrink/hardshrink
(and their backwards), nextafter, frexp, renorm and isin, with NaN, infinities,
signed zeros, denormals, empty and non-contiguous inputs, and dtype errors.

Results at special values (nan, +-inf, -0.0) are compared with their definitions
(C99 Annex F nextafter/frexp, the shrinks' piecewise formulas), never with the
host CPU's kernels, whose special-value results may depend on the ISA.
nextafter and frexp are exact operations: compared exactly (scale=0)."""
import math

import pytest
import torch

from tpu_testing import assert_raises_like, check, check_grad, check_special

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
INTS = [torch.int64, torch.int32, torch.int8, torch.uint8]

SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.25, 3.0, 1e-3, float("inf"), float("-inf"), float("nan")]


def special(dtype):
    return torch.tensor(SPECIAL).to(dtype)


def same_error(fn, *args, **kwargs):
    """PyTorch's CPU raises; tpu raises exactly the same class with the same first line."""
    try:
        fn(*args, **kwargs)
    except Exception as cpu:  # noqa: BLE001  (compared below)
        tpu = assert_raises_like(cpu, fn, *args, **kwargs)
        assert str(cpu).split("\n")[0] in str(tpu), f"{tpu!r} vs {cpu!r}"
        return
    pytest.fail("the CPU did not raise: this test expects an error")


# ------------------------------------------------------------------ trace

@pytest.mark.parametrize("dtype", FLOATS + INTS)
@pytest.mark.parametrize("shape", [(4, 4), (3, 5), (5, 2), (0, 3), (1, 1)])
def test_trace(dtype, shape):
    x = torch.randn(shape).mul(3).to(dtype) if dtype.is_floating_point else torch.randint(0, 50, shape, dtype=dtype)
    check(torch.trace, x)  # at most 25 terms: within the dtype tolerance


def test_trace_noncontiguous_and_grad():
    x = torch.randn(5, 4)
    check(torch.trace, x.t())
    check_grad(lambda a: torch.trace(a).reshape(1), x)


def test_trace_errors():
    same_error(torch.trace, torch.randn(3))
    same_error(torch.trace, torch.ones(2, 2, dtype=torch.bool))


# ---------------------------------------------------------------- shrinks

SHRINKS = [torch.nn.functional.softshrink, torch.nn.functional.hardshrink]


def _shrink_definition(fn, lambd):
    """hardshrink: x where |x| > lambd, else 0; softshrink: x -+ lambd beyond
    +-lambd, else 0. NaN stays NaN."""
    if fn is torch.nn.functional.hardshrink:
        return lambda x: x if x != x or abs(x) > lambd else 0.0
    return lambda x: x if x != x else x - lambd if x > lambd else x + lambd if x < -lambd else 0.0


@pytest.mark.parametrize("fn", SHRINKS)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("lambd", [None, 0.0, 0.5, 1.5])
def test_shrink(fn, dtype, lambd):
    kw = {} if lambd is None else {"lambd": lambd}
    # lambd is rounded to the dtype as the kernels do (0.5 and 1.5 are exact in every float dtype).
    # The sign of a zero result is not part of the definition.
    check_special(lambda x: fn(x, **kw), _shrink_definition(fn, 0.5 if lambd is None else lambd), special(dtype),
                  signed_zeros=False)
    check(lambda x: fn(x, **kw), torch.randn(6, 7).to(dtype)[:, ::2])


@pytest.mark.parametrize("fn", SHRINKS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shrink_grad(fn, dtype):
    x = torch.tensor([-2.0, -0.6, -0.5, -0.2, 0.0, 0.3, 0.5, 0.7, 3.0]).to(dtype)
    check_grad(lambda a: fn(a, 0.5), x)


@pytest.mark.parametrize("fn", SHRINKS)
def test_shrink_int_raises(fn):
    same_error(fn, torch.ones(3, dtype=torch.int64))


# -------------------------------------------------------------- nextafter

_BITS = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def _nextafter(dtype):
    """C99 nextafter in `dtype`: the neighbour of x toward y (y itself when equal,
    the smallest subnormal with y's side from +-0, nan if either is nan),
    computed on the bit pattern."""
    ity = _BITS[dtype]

    def f(x, y):
        if x != x or y != y:
            return math.nan
        if x == y:
            return y
        if x == 0:
            return math.copysign(torch.tensor(1, dtype=ity).view(dtype).item(), y)
        bits = torch.tensor(x, dtype=dtype).view(ity).item()
        away = (y > x) == (x > 0)  # the magnitude grows
        return torch.tensor(bits + (1 if away else -1), dtype=ity).view(dtype).item()
    return f


def _frexp(x):
    """frexp: x = m * 2^e with 0.5 <= |m| < 1; m = x and e = 0 at +-0, +-inf and nan."""
    if x != x or math.isinf(x):
        return x, 0
    return math.frexp(x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_nextafter(dtype):
    x = special(dtype)
    xs = x[:, None].expand(-1, len(SPECIAL)).contiguous()
    ys = x[None, :].expand(len(SPECIAL), -1).contiguous()
    check_special(torch.nextafter, _nextafter(dtype), xs, ys, scale=0)
    check_special(torch.nextafter, _nextafter(dtype), torch.randn(5, 3).to(dtype), torch.randn(3).to(dtype), scale=0)


def test_nextafter_tiny_and_int():
    tiny = torch.tensor([1e-45, -1e-45, 1.17549435e-38, 0.0, 3.4028234663852886e38])
    check_special(torch.nextafter, _nextafter(torch.float32), tiny, torch.tensor([0.0, 1.0, 0.0, -1.0, math.inf]),
                  scale=0)
    same_error(torch.nextafter, torch.ones(2, dtype=torch.int64), torch.ones(2, dtype=torch.int64))


# ------------------------------------------------------------------ frexp

@pytest.mark.parametrize("dtype", FLOATS)
def test_frexp(dtype):
    for x in (special(dtype), torch.randn(4, 6).mul(1000).to(dtype), torch.randn(4, 6).to(dtype).t()):
        check_special(torch.frexp, _frexp, x, dtype=(dtype, torch.int32), scale=0)


def test_frexp_denormals_and_empty():
    check_special(torch.frexp, _frexp, torch.tensor([1e-40, -1e-45, 3e-39, 1.17549435e-38, 3.4e38]),
                  dtype=(torch.float32, torch.int32), scale=0)
    check_special(torch.frexp, _frexp, torch.tensor([6e-8, -1e-5], dtype=torch.float16),
                  dtype=(torch.float16, torch.int32), scale=0)
    check(torch.frexp, torch.empty(0, 3))


def test_frexp_int_raises():
    same_error(torch.frexp, torch.ones(3, dtype=torch.int32))


# ----------------------------------------------------------------- renorm

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("p", [1, 2, 3, 0.5, float("inf")])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_renorm(dtype, p, dim):
    x = torch.randn(3, 4, 5).to(dtype)
    check(torch.renorm, x, p, dim, 1.5)
    check(torch.renorm, x, p, dim, 100.0)


def test_renorm_grad_and_errors():
    check_grad(lambda a: torch.renorm(a, 2, 0, 1.0), torch.randn(3, 4))
    same_error(torch.renorm, torch.ones(2, 2, dtype=torch.int64), 2, 0, 1.0)


# ------------------------------------------------------------------- isin

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int32, torch.bfloat16, torch.uint8])
@pytest.mark.parametrize("invert", [False, True])
def test_isin(dtype, invert):
    e = torch.randint(0, 10, (4, 5)).to(dtype)
    t = torch.randint(0, 10, (2, 3)).to(dtype)
    check(torch.isin, e, t, invert=invert)
    check(torch.isin, e, t, assume_unique=True, invert=invert)
    check(torch.isin, e, 3, invert=invert)
    check(lambda tt: torch.isin(4, tt, invert=invert), t)


def test_isin_edges():
    check(torch.isin, torch.tensor([1.0, float("nan"), 2.0]), torch.tensor([float("nan"), 2.0]))
    check(torch.isin, torch.arange(5), torch.empty(0, dtype=torch.int64))
    check(torch.isin, torch.empty(0, 2), torch.arange(3.0))
    check(torch.isin, torch.arange(6), torch.tensor([1.0, 4.5, 5.0]))


# ------------------------------------------------------------------- mode

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8, torch.bool])
@pytest.mark.parametrize("dim,keepdim", [(-1, False), (0, True), (1, False)])
def test_mode(dtype, dim, keepdim):
    x = torch.randint(0, 4, (3, 6, 5)).to(dtype)  # small range: many ties on purpose
    check(torch.mode, x, dim, keepdim)
    check(torch.mode, x.transpose(0, 2), dim, keepdim)


def test_mode_edges():
    check(torch.mode, torch.tensor([3, 1, 3, 1, 2, 1, 3]))
    check(torch.mode, torch.tensor([2.0, float("nan"), float("nan"), 1.0]))
    check(torch.mode, torch.tensor(3.0))
    check(torch.mode, torch.tensor(3.0), 0, True)
    check(torch.mode, torch.empty(0, 4), 1)
    same_error(torch.mode, torch.empty(0))


def test_rrelu_eval_matches_cpu_and_training_slopes_in_range():
    x = torch.randn(4, 5)
    check(lambda t: torch.nn.functional.rrelu(t, training=False), x)
    check_grad(lambda t: torch.nn.functional.rrelu(t, 0.1, 0.3, training=False), x)
    y = torch.nn.functional.rrelu(x.to("tpu"), 0.1, 0.3, training=True).cpu()
    neg = x < 0
    slopes = y[neg] / x[neg]
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6
    assert torch.equal(y[~neg], x[~neg])


# ------------------------------------------------------- complex construction

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_complex_and_polar(dtype):
    torch.manual_seed(0)
    a, b = torch.randn(2, 1, dtype=dtype), torch.randn(3, dtype=dtype)  # broadcast to (2, 3)
    check(torch.complex, a, b)
    check(torch.polar, a.abs(), b)
    # gradients flow back through the real and imaginary parts
    w = torch.complex(torch.randn(2, 3, dtype=dtype), torch.randn(2, 3, dtype=dtype))
    check_grad(lambda x, y, wr, wi: (torch.complex(x, y) * torch.complex(wr, wi)).real, a, b, w.real.clone(),
               w.imag.clone())


def test_complex_errors():
    for x, y in [(torch.randn(2), torch.randn(2).double()), (torch.ones(2).long(), torch.ones(2).long())]:
        for fn in (torch.complex, torch.polar):
            with pytest.raises(RuntimeError) as cpu:
                fn(x, y)
            assert_raises_like(cpu.value, fn, x, y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex64, torch.complex128, torch.int64])
def test_complex_python_scalars(dtype):
    """A Python complex number is a wrapped complex scalar, as on CPU: it promotes a real
    tensor to complex64 (complex128 stays), and its imaginary part reaches the device."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(6, generator=g) * 4).to(dtype) if not dtype.is_complex else torch.randn(6, dtype=dtype, generator=g)
    for fn in (lambda x: x * 1j, lambda x: x + (2 - 1j), lambda x: (1 + 1j) - x, lambda x: x / (1 + 2j),
               lambda x: 0.5j * x, lambda x: x == (1 + 1j),
               lambda x: x * torch.tensor(1 - 3j), lambda x: torch.where(x.real > 0, x, 1j)):
        check(fn, x)
    if dtype.is_complex:  # a complex alpha needs complex inputs (CPU refuses it otherwise)
        check(lambda x: torch.add(x, x, alpha=2j), x)
    check(lambda x: x.clone().to(torch.complex64).fill_(3 - 1j), x)
    check(lambda x: x.new_full((2, 3), 4 - 3j, dtype=torch.complex64), x)
    check(lambda x: x.to(torch.complex64).masked_fill(x.real > 0, 2j), x)


def test_complex_python_scalar_into_a_real_tensor_is_refused():
    """CPU refuses an imaginary part where a real value is written; silently dropping it
    would be a wrong answer."""
    for fn in (lambda x: x.fill_(1j), lambda x: torch.nn.functional.threshold(x, 0.5, 1j)):
        with pytest.raises(RuntimeError, match="cannot be converted to type"):
            fn(torch.zeros(3))
        with pytest.raises(RuntimeError, match="cannot be converted to type"):
            fn(torch.zeros(3, device="tpu"))
    check(lambda x: x.fill_(2 + 0j), torch.zeros(3))  # no imaginary part: fine, as on CPU


# ------------------------------------------------------------- async asserts

def test_assert_async_raises_at_the_next_sync():
    import torchtpu
    torch._assert_async(torch.tensor(3.0, device="tpu"))
    torch._assert_async(torch.tensor([float("nan")], device="tpu"))  # NaN is nonzero, as on CPU
    torch._assert_async(torch.tensor(True, device="tpu"), "fine")
    torchtpu.synchronize()
    x = torch.tensor(0, device="tpu")
    with torchtpu.eager_mode("strict"):
        torch._assert_async(x, "my message")  # recorded on the device, no sync here
        with pytest.raises(RuntimeError, match="my message"):
            torchtpu.synchronize()
        torch._assert_async(x)
        with pytest.raises(RuntimeError, match="Expected Tensor with single nonzero value, but got zero"):
            x.cpu()
    with torchtpu.eager_mode("debug"), pytest.raises(RuntimeError, match="my message"):
        torch._assert_async(x, "my message")  # debug mode: raised at the op
    for bad, cpu_msg in ((torch.zeros(2), "more than one value"), (torch.zeros(0), "no values")):
        with pytest.raises(RuntimeError, match=cpu_msg):
            torch._assert_async(bad)
        with pytest.raises(RuntimeError, match=cpu_msg):
            torch._assert_async(bad.to("tpu"))


def test_functional_assert_async_and_dep_token():
    tok = torch.ops.aten._make_dep_token(device="tpu")
    assert tok.device.type == "tpu" and tok.shape == torch.ops.aten._make_dep_token().shape
    out = torch.ops.aten._functional_assert_async.msg(torch.tensor(1, device="tpu"), "m", tok)
    assert out.device.type == "tpu" and out.shape == tok.shape
    with pytest.raises(RuntimeError, match="bad thing"):  # at the op (debug) or at the next sync
        torch.ops.aten._functional_assert_async.msg(torch.tensor(False, device="tpu"), "bad thing", tok)
        out.cpu()


def test_assert_async_in_a_compiled_graph():
    @torch.compile(backend="tpu")
    def f(x):
        torch._assert_async((x > 0).all(), "x must be positive")
        return x * 2

    assert torch.equal(f(torch.ones(3, device="tpu")).cpu(), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="x must be positive"):
        f(-torch.ones(3, device="tpu")).cpu()
