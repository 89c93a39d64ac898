"""Complex elementwise math on tpu against PyTorch on CPU: the transcendental
functions, pow, lerp/addcmul/addcdiv, linspace/logspace, isnan/nan_to_num/sinc/trace,
and their gradients. Tolerances: tpu_testing.TOL (complex64 1e-5, complex128 1e-7).

Branch cuts follow C99 (and PyTorch): on a cut, the sign of a zero part picks the
side, so sqrt(-4 - 0j) = -2j while sqrt(-4 + 0j) = 2j."""
import pytest
import torch

import torchtpu  # noqa: F401
from tpu_testing import assert_same, check

COMPLEX = [torch.complex64, torch.complex128]
UNARY = ["exp", "exp2", "log", "log2", "log10", "log1p", "expm1", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "sinc",
         "square"]


def _random(dtype, n=64, scale=2.0):
    g = torch.Generator().manual_seed(0)
    return torch.randn(n, dtype=dtype, generator=g) * scale


def _on_the_cuts(dtype):
    """Points on every function's branch cuts (both axes, both signs of zero) and
    around them; results stay finite."""
    parts = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.5, -3.0, 1e-6, -1e-6]
    return torch.tensor([complex(a, b) for a in parts for b in parts], dtype=dtype)


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", UNARY)
def test_unary_complex(name, dtype):
    fn = getattr(torch, name)
    check(fn, _random(dtype))
    z = _on_the_cuts(dtype)
    if name in ("log", "log2", "log10", "rsqrt", "reciprocal"):
        z = z[z != 0]  # a pole: infinite parts, not compared here
    if name in ("log1p", "atanh"):
        z = z[(z != -1) & (z != 1)]
    check(fn, z)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_branch_cuts_take_the_side_of_the_signed_zero(dtype):
    z = torch.tensor([-4 - 0j, -4 + 0j], dtype=dtype)
    z[0] = torch.complex(torch.tensor(-4.0, dtype=z.real.dtype), torch.tensor(-0.0, dtype=z.real.dtype))
    root = torch.sqrt(z.to("tpu")).cpu()
    assert root[0].imag < 0 < root[1].imag  # -2j, then 2j, as on CPU
    assert_same(torch.sqrt(z.to("tpu")), torch.sqrt(z))
    assert_same(torch.asin(z.to("tpu") / 2), torch.asin(z / 2))


@pytest.mark.parametrize("dtype", COMPLEX)
def test_pow_complex(dtype):
    z, w = _random(dtype, 32, 1.5), _random(dtype, 32, 0.5).flip(0)
    # ATen's special exponents (products, sqrt, rsqrt, reciprocal) and the general case
    for e in (2, 3, -2, 0.5, -0.5, -1, 2.5, 1 - 0.5j, 0):
        check(lambda z: z ** e, z)
    check(torch.pow, z, w)
    check(lambda w: 2.0 ** w, w)
    check(torch.square, _on_the_cuts(dtype))
    check(lambda z: torch.pow(z, 0.5), _on_the_cuts(dtype))  # sqrt's cut


@pytest.mark.parametrize("dtype", COMPLEX)
def test_lerp_addcmul_addcdiv_complex(dtype):
    z, w, v = _random(dtype, 16), _random(dtype, 16).flip(0), _random(dtype, 16, 0.5) + 3
    check(lambda z, w: torch.lerp(z, w, 0.3), z, w)
    check(lambda z, w: torch.lerp(z, w, 0.7 - 0.2j), z, w)  # |w| >= 0.5: the other side of ATen's formula
    check(torch.lerp, z, w, v * 0.1)
    check(lambda z, w, v: torch.addcmul(z, w, v, value=0.5 - 1j), z, w, v)
    check(lambda z, w, v: torch.addcdiv(z, w, v, value=2), z, w, v)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_linspace_logspace_complex(dtype):
    for args in ((0, 1 + 1j, 5), (-1j, 3 + 1j, 7), (2.5, 3 + 1j, 4), (1 + 2j, -3 + 0.5j, 1), (0, 1j, 0), (0, 2, 6)):
        assert_same(torch.linspace(*args, dtype=dtype, device="tpu"), torch.linspace(*args, dtype=dtype))
        assert_same(torch.logspace(*args, base=2.0, dtype=dtype, device="tpu"),
                    torch.logspace(*args, base=2.0, dtype=dtype))
    assert_same(torch.linspace(0, 1 + 1j, 5, device="tpu"), torch.linspace(0, 1 + 1j, 5))  # dtype inferred


@pytest.mark.parametrize("dtype", COMPLEX)
def test_nan_checks_sinc_trace_complex(dtype):
    z = _random(dtype, 12)
    nan, inf = float("nan"), float("inf")
    z[1], z[2], z[3], z[4] = complex(nan, 1), complex(1, nan), complex(inf, -inf), complex(-inf, 2)
    check(torch.isnan, z)
    check(torch.nan_to_num, z)
    check(lambda z: torch.nan_to_num(z, nan=1.5, posinf=7.0, neginf=-7.0), z)
    check(torch.sinc, torch.cat([_random(dtype, 8), torch.zeros(1, dtype=dtype)]))
    check(torch.trace, _random(dtype, 20).reshape(4, 5))


GRAD = ["exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "tan", "asin", "acos", "atan", "sinh", "tanh", "asinh",
        "atanh", "sigmoid", "log2", "exp2", "expm1", "log1p"]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("name", GRAD)
def test_unary_complex_gradients(name, dtype):
    """Wirtinger gradients (PyTorch's convention: conjugated derivatives) as on CPU."""
    fn = getattr(torch, name)
    z0, cot = _random(dtype, 24, 0.7), _random(dtype, 24).flip(0)
    grads = []
    for dev in ("cpu", "tpu"):
        z = z0.to(dev).requires_grad_()
        (g,) = torch.autograd.grad(fn(z), z, cot.to(dev))
        grads.append(g)
    assert_same(grads[1], grads[0])


@pytest.mark.parametrize("dtype", COMPLEX)
def test_pow_and_ternary_gradients_complex(dtype):
    z0, w0 = _random(dtype, 12, 0.8), _random(dtype, 12, 0.8).flip(0) + 2
    cot = _random(dtype, 12)
    fns = (lambda z, w: z ** 2.5, lambda z, w: z ** w, lambda z, w: torch.square(z),
           lambda z, w: torch.lerp(z, w, 0.3 + 0.1j), lambda z, w: torch.addcdiv(z, z, w, value=1 - 1j))
    for fn in fns:
        grads = []
        for dev in ("cpu", "tpu"):
            z, w = z0.to(dev).requires_grad_(), w0.to(dev).requires_grad_()
            grads.append(torch.autograd.grad(fn(z, w), (z, w), cot.to(dev), allow_unused=True))
        for t, c in zip(grads[1], grads[0]):
            if c is None:
                assert t is None
            else:
                assert_same(t, c)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_small_parts_keep_their_relative_accuracy(dtype):
    """sin(1e-6 i) = 1e-6 i to the last bits, as on CPU: a form through exp(y) - exp(-y)
    would leave a few percent of error in a part that small."""
    z = torch.tensor([1e-6j, 1e-4 + 1e-6j, 1e-6 + 0.5j, 2 + 1e-5j], dtype=dtype)
    rtol = 1e-5 if dtype == torch.complex64 else 1e-12
    for name in ("sin", "cos", "sinh", "cosh", "tan", "tanh", "expm1", "log1p"):
        fn = getattr(torch, name)
        got, want = fn(z.to("tpu")).cpu(), fn(z)
        torch.testing.assert_close(got.real, want.real, rtol=rtol, atol=0, msg=name)
        torch.testing.assert_close(got.imag, want.imag, rtol=rtol, atol=0, msg=name)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_logaddexp_complex(dtype):
    """ATen's complex logaddexp: ordered by real part, NaN parts infect, equal infinite
    real parts take ATen's special forms."""
    inf, nan = float("inf"), float("nan")
    x, y = _random(dtype, 20), _random(dtype, 20).flip(0)
    x[0], y[0] = complex(-inf, 1), complex(-inf, 2)
    x[1], y[2] = complex(nan, 0), complex(0, nan)
    x[3], y[3] = complex(inf, 0.5), complex(inf, 0.25)
    x[4], y[5] = complex(-inf, 0), complex(inf, 1)
    check(torch.logaddexp, x, y)
    z, w = x[6:].to("tpu").requires_grad_(), y[6:].to("tpu").requires_grad_()
    zc, wc = x[6:].clone().requires_grad_(), y[6:].clone().requires_grad_()
    cot = _random(dtype, 14)
    for got, want in zip(torch.autograd.grad(torch.logaddexp(z, w), (z, w), cot.to("tpu")),
                         torch.autograd.grad(torch.logaddexp(zc, wc), (zc, wc), cot)):
        assert_same(got, want)


# ------------------------------------------------------------ under torch.compile

def _fallbacks():
    import torchtpu
    return torchtpu.metrics()["graph_fallbacks"]


def test_compiled_complex_graph_is_one_program():
    """view_as_real / view_as_complex / _conj in a graph are values (in eager they are
    view bits the dispatcher handles): the graphs, forward and backward, stay one
    program each and their gradients match CPU's."""
    torch._dynamo.reset()
    z0, w0 = _random(torch.complex64, 16), _random(torch.complex64, 16).flip(0)

    def f(z, w):
        r = torch.view_as_real(torch.exp(z) * torch.sqrt(w)) ** 2
        c = torch.view_as_complex(torch.stack([z.real, w.imag], -1))
        return r.sum() + (c * z.conj()).abs().sum()

    before = _fallbacks()
    z, w = z0.to("tpu").requires_grad_(), w0.to("tpu").requires_grad_()
    out = torch.compile(f, backend="tpu")(z, w)
    out.backward()
    zc, wc = z0.clone().requires_grad_(), w0.clone().requires_grad_()
    ref = f(zc, wc)
    ref.backward()
    assert _fallbacks() == before
    assert_same(out, ref)
    assert_same(z.grad, zc.grad)
    assert_same(w.grad, wc.grad)


def test_compiled_graph_reads_conj_and_neg_views_as_their_values():
    """A tensor with the conjugate or negative bit (x.conj(), a saved _conj view) passed
    to a compiled program is resolved first: the program reads storages, so it saw x."""
    torch._dynamo.reset()
    z, w = _random(torch.complex64, 8), _random(torch.complex64, 8).flip(0)
    f = torch.compile(lambda x, y: x * y + 1, backend="tpu")
    assert_same(f(z.to("tpu").conj(), w.to("tpu")), z.conj() * w + 1)
    assert_same(f(torch._neg_view(z.to("tpu")), w.to("tpu")), -z * w + 1)


# ------------------------------------------------------------ truth values, norms, sampling

@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_truth_values(dtype):
    """A complex number is true when either part is nonzero: 1j is True (the imaginary
    part was dropped before: 1j.bool() gave False, nonzero() missed it)."""
    z = torch.tensor([1j, 0j, 2 + 0j, complex(0, -0.0), complex(float("nan"), 0), 3 - 4j], dtype=dtype)
    w = torch.tensor([0j, 1j, 0j, 5j, 0j, 1 + 1j], dtype=dtype)
    for fn in (lambda z: z.bool(), lambda z: z.any(), lambda z: z.all(), torch.count_nonzero, torch.nonzero,
               torch.logical_not, lambda z: torch.where(z.bool(), 1, 0)):
        check(fn, z)
    for fn in (torch.logical_and, torch.logical_or, torch.logical_xor):
        check(fn, z, w)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_renorm_and_silu_complex(dtype):
    z = _random(dtype, 60).reshape(3, 4, 5)
    for p, dim, maxnorm in ((2, 0, 1.0), (1, 1, 2.0), (float("inf"), 2, 0.5), (3.5, 1, 1.5)):
        check(lambda z: torch.renorm(z, p, dim, maxnorm), z)
    check(torch.nn.functional.silu, z)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_sampling(dtype):
    """randn / normal_ / uniform_ of a complex tensor sample its real pairs, as ATen:
    randn's parts each have variance 1/2; uniform_ bounds both parts. Values are the
    tpu generator's (compared by their moments, not CPU's numbers)."""
    torch.manual_seed(0)
    n = 100_000
    z = torch.randn(n, dtype=dtype, device="tpu").cpu()
    assert z.dtype == dtype
    for part in (z.real, z.imag):
        assert abs(part.mean().item()) < 0.02 and abs(part.var().item() - 0.5) < 0.02
    m = torch.empty(n, dtype=dtype, device="tpu").normal_(2.0, 3.0).cpu()
    for part in (m.real, m.imag):  # std / sqrt(2) per part
        assert abs(part.mean().item() - 2.0) < 0.05 and abs(part.std().item() - 3.0 / 2 ** 0.5) < 0.05
    u = torch.empty(n, dtype=dtype, device="tpu").uniform_(-1.0, 3.0).cpu()
    for part in (u.real, u.imag):
        assert part.min() >= -1.0 and part.max() <= 3.0 and abs(part.mean().item() - 1.0) < 0.05
    assert (z.real != z.imag).all()  # two independent draws per element
