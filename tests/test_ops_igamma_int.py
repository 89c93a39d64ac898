"""igamma / igammac, gcd / lcm, _add_relu, _addmm_activation, _int_mm,
_weight_int8pack_mm and _compute_linear_combination on tpu compared with
PyTorch on CPU.

igamma accuracy: float32 and float64 over a grid of a in [1e-3, 1e3] and x = a *
factor, judged against mpmath (30 digits) at the rounded inputs: tpu must be
within the dtype's tolerance of the true value (CPU float32 itself is off by up
to ~5e-7 there). Boundary values (a or x at 0, inf, negative, NaN) are PyTorch's
documented ones, checked exactly.

Known differences: _compute_linear_combination with coefficients of another
dtype than input: the CPU reinterprets their bytes as input's dtype (float32
input with float64 coefficients gives ~1e19); tpu casts them. Not compared.
_add_relu.Scalar with an integer self and a float Scalar
gives garbage on the CPU (2.13: _add_relu(tensor([1, -2]), 2.5) == [3, 2]);
not compared."""
import math

import mpmath
import pytest
import torch

import torchtpu
from tpu_testing import assert_same, check, check_like_cpu, check_special

mpmath.mp.dps = 30
F16 = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]


@pytest.mark.parametrize("name", ["igamma", "igammac", "gcd", "lcm", "_add_relu", "_addmm_activation", "_int_mm",
                                  "_weight_int8pack_mm", "_compute_linear_combination"])
def test_served_by_a_lowering(name):
    assert torchtpu._C.op_supported(name)


# ------------------------------------------------------------------ igamma

def _p_ref(upper):
    def f(a, x):
        if a != a or x != x or a < 0 or x < 0:
            return math.nan
        if a == 0:
            p = 1.0 if x > 0 else math.nan
        elif x == 0:
            p = 0.0
        elif a == math.inf:
            p = math.nan if x == math.inf else 0.0
        elif x == math.inf:
            p = 1.0
        else:
            lo, hi = (x, mpmath.inf) if upper else (0, x)
            return float(mpmath.gammainc(a, lo, hi, regularized=True))
        return 1.0 - p if upper else p
    return f


def _grid(dtype):
    avals = [1e-3, 0.02, 0.3, 1.0, 2.5, 7.0, 12.0, 30.0, 99.0, 100.0, 180.0, 1000.0]
    factors = [1e-3, 0.2, 0.6, 0.75, 0.9, 0.99, 1.0, 1.02, 1.2, 1.35, 2.0, 5.0, 30.0]
    a = torch.tensor([v for v in avals for _ in factors], dtype=torch.float64)
    x = torch.tensor([v * f for v in avals for f in factors], dtype=torch.float64)
    return a.to(dtype), x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("upper", [False, True], ids=["igamma", "igammac"])
def test_igamma_accuracy(dtype, upper):
    a, x = _grid(dtype)
    fn = torch.igammac if upper else torch.igamma
    check_special(fn, _p_ref(upper), a, x, what=fn.__name__)


SPECIAL = [0.0, 1.0, 2.0, -1.0, math.inf, math.nan, 0.5]


@pytest.mark.parametrize("upper", [False, True], ids=["igamma", "igammac"])
def test_igamma_boundaries(upper):
    a = torch.tensor([u for u in SPECIAL for _ in SPECIAL])
    x = torch.tensor([v for _ in SPECIAL for v in SPECIAL])
    fn = torch.special.gammaincc if upper else torch.special.gammainc
    check_special(fn, _p_ref(upper), a, x, what="boundaries")


@pytest.mark.parametrize("dtype", F16 + [torch.int64, torch.bool], ids=str)
@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=["igamma", "igammac"])
def test_igamma_dtypes(fn, dtype):
    g = torch.Generator().manual_seed(0)
    a = (torch.rand(3, 4, generator=g, dtype=torch.float64) * 6).to(dtype)
    x = (torch.rand(3, 4, generator=g, dtype=torch.float64) * 6).to(dtype)
    check_like_cpu(fn, a, x)


def test_igamma_promotion_broadcast_noncontiguous():
    g = torch.Generator().manual_seed(1)
    a = torch.rand(4, 6, generator=g) * 5
    x = torch.rand(6, 4, generator=g).t() * 5  # non-contiguous
    check(torch.igamma, a, x)
    check(torch.igammac, a[:, :1], x)  # broadcasting
    check(torch.igamma, a, torch.tensor(2.0, dtype=torch.float64))  # 0-d: a's dtype wins
    check(torch.igamma, a.to(torch.float16), a)  # f16 with f32 → f32
    check(torch.igamma, torch.randint(1, 5, (4, 6), generator=g), x.contiguous())  # int with float → float32


def test_igamma_out_and_inplace():
    g = torch.Generator().manual_seed(2)
    a, x = torch.rand(3, 5, generator=g) * 4, torch.rand(3, 5, generator=g) * 4

    def out_fn(a, x):
        out = torch.empty_like(a)
        torch.special.gammainc(a, x, out=out)
        return out

    def outc_fn(a, x):
        out = torch.empty_like(a)
        torch.igammac(a, x, out=out)
        return out

    check(out_fn, a, x)
    check(outc_fn, a, x)
    check(lambda a, x: a.clone().igamma_(x), a, x)
    check(lambda a, x: a.clone().igammac_(x), a, x)


@pytest.mark.parametrize("fn", [torch.igamma, torch.igammac], ids=["igamma", "igammac"])
def test_igamma_grad_other(fn):
    g = torch.Generator().manual_seed(3)
    a = torch.rand(3, 4, generator=g) * 4 + 0.2
    x = torch.rand(3, 4, generator=g) * 4 + 0.1
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    gy = torch.randn(3, 4, generator=g)
    fn(a, xc).backward(gy)
    yt = fn(a.to("tpu"), xt)
    yt.backward(gy.to("tpu"))
    assert xt.grad.device.type == "tpu"
    assert_same(xt.grad, xc.grad)


# ------------------------------------------------------------------ gcd / lcm

def _ints(dtype, shape, g, lo=-40, hi=40):
    if dtype == torch.uint8:
        lo = 0
    return torch.randint(lo, hi, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", INTS + [torch.float32, torch.bool], ids=str)
@pytest.mark.parametrize("fn", [torch.gcd, torch.lcm], ids=["gcd", "lcm"])
def test_gcd_lcm(fn, dtype):
    g = torch.Generator().manual_seed(4)
    if dtype in (torch.float32, torch.bool):
        check_like_cpu(fn, torch.ones(3).to(dtype), torch.ones(3).to(dtype))
        return
    a, b = _ints(dtype, (5, 6), g), _ints(dtype, (5, 6), g)
    a[0, :3] = 0
    b[0, 1:4] = 0  # gcd(0, 0) = 0, lcm(x, 0) = 0
    check(fn, a, b)
    check(fn, a, b[:1])  # broadcasting
    check(fn, a.t(), b.t())  # non-contiguous
    check(fn, a, torch.tensor(12, dtype=dtype))  # 0-d


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.int64, torch.uint8], ids=str)
def test_gcd_lcm_extremes(dtype):
    info = torch.iinfo(dtype)
    # Neither -1 nor INT_MAX with int32/int64: the CPU's lcm traps (SIGFPE: INT_MIN / -1,
    # gcd(INT_MIN, INT_MAX or 5) is -1 by the wrapped abs).
    wide = dtype in (torch.int32, torch.int64)
    v = [info.min, 8 if wide else info.max, 0, 1, 2 if wide or dtype == torch.uint8 else -1, 3, 6]
    a = torch.tensor([p for p in v for _ in v], dtype=dtype)
    b = torch.tensor([q for _ in v for q in v], dtype=dtype)
    check(torch.gcd, a, b)  # INT_MIN: |INT_MIN| wraps, gcd may be negative, as on the CPU
    check(torch.lcm, a, b)  # products wrap in the dtype, as on the CPU


def test_gcd_lcm_promotion_out_inplace():
    g = torch.Generator().manual_seed(5)
    a, b = _ints(torch.int8, (4, 4), g), _ints(torch.int32, (4, 4), g)
    check(torch.gcd, a, b)  # int8 with int32 → int32
    check(lambda a, b: torch.lcm(a, b, out=torch.empty(4, 4, dtype=torch.int32, device=a.device)), a, b)
    check(lambda a, b: a.clone().gcd_(b), b, a)
    check(lambda a, b: a.clone().lcm_(b), b, a)


# ------------------------------------------------------------------ _add_relu

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
                                   torch.uint8, torch.bool, torch.float16, torch.bfloat16], ids=str)
def test_add_relu(dtype):
    g = torch.Generator().manual_seed(6)
    a = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 9).to(dtype)
    b = (torch.randn(4, 5, generator=g, dtype=torch.float64) * 9).to(dtype)
    check_like_cpu(lambda a, b: torch.ops.aten._add_relu(a, b, alpha=2), a, b)


def test_add_relu_variants():
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
    A = torch.ops.aten._add_relu
    check(lambda a, b: A(a, b), a, b)  # broadcasting
    check(lambda a, b: A(a.t(), b[:4], alpha=-0.5), a, b)  # non-contiguous
    check(lambda a: A.Scalar(a, 0.25, 3), a)  # Scalar other
    check(lambda a, b: A(a, b), a.double(), torch.tensor(0.5))  # 0-d
    check(lambda a, b: A(a, b), a, torch.randint(-3, 3, (5,), generator=g))  # float with int
    check(lambda a, b: A(a, b, out=torch.empty(4, 5, device=a.device)), a, b)
    check(lambda a, b: torch.ops.aten._add_relu_(a.clone(), b), a, b)
    check(lambda a: torch.ops.aten._add_relu_.Scalar(a.clone(), -0.5), a)
    check(lambda a, b: A(a, b, alpha=2), torch.tensor([1, -5, 3]), torch.tensor([-1, 2, 0]))


# ------------------------------------------------------- _addmm_activation

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64],
                         ids=str)
@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation(dtype, use_gelu):
    g = torch.Generator().manual_seed(8)
    s, m1, m2 = (torch.randn(sh, generator=g, dtype=torch.float64) * 3 for sh in [(6, 5), (6, 4), (4, 5)])
    s, m1, m2 = s.to(dtype), m1.to(dtype), m2.to(dtype)
    fn = torch.ops.aten._addmm_activation
    check_like_cpu(lambda s, a, b: fn(s, a, b, beta=0.5, alpha=2, use_gelu=use_gelu), s, m1, m2,
                   scale=4 if dtype in (torch.bfloat16, torch.float16) else 1)  # rounded, then activation


def test_addmm_activation_variants():
    g = torch.Generator().manual_seed(9)
    s, m1, m2 = torch.randn(5, generator=g), torch.randn(4, 3, generator=g), torch.randn(5, 3, generator=g).t()
    fn = torch.ops.aten._addmm_activation
    check(lambda s, a, b: fn(s, a, b, use_gelu=True), s, m1, m2)  # 1-D self, non-contiguous mat2
    check(lambda s, a, b: fn(s, a, b, out=torch.empty(4, 5, device=a.device)), s, m1, m2)
    check_like_cpu(lambda s, a, b: fn(s, a, b), s, m1, m2.t())  # shape mismatch


# ------------------------------------------------------- int8 matmuls

def test_int_mm():
    g = torch.Generator().manual_seed(10)
    a = torch.randint(-128, 128, (17, 32), generator=g, dtype=torch.int8)
    b = torch.randint(-128, 128, (32, 9), generator=g, dtype=torch.int8)
    check(torch._int_mm, a, b)
    check(torch._int_mm, a.t().contiguous().t(), b)  # non-contiguous
    check(torch._int_mm, a.to(torch.uint8), b)
    check(lambda a, b: torch._int_mm(a, b, out=torch.empty(17, 9, dtype=torch.int32, device=a.device)), a, b)
    for args in [(a.float(), b), (a, b.int()), (a[0], b), (a, b[:, None]), (a, b[:30])]:
        check_like_cpu(torch._int_mm, *args)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_weight_int8pack_mm(dtype):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(5, 32, generator=g).to(dtype)
    w = torch.randint(-128, 128, (7, 32), generator=g, dtype=torch.int8)
    s = torch.rand(7, generator=g).to(dtype)
    check(torch._weight_int8pack_mm, x, w, s)
    check(torch._weight_int8pack_mm, x[::2], w, s)  # A with a row stride
    check_like_cpu(torch._weight_int8pack_mm, x.t().contiguous().t(), w, s)  # A's last dim strided: an error


def test_weight_int8pack_mm_checks():
    g = torch.Generator().manual_seed(12)
    x, w, s = torch.randn(5, 32, generator=g), torch.randint(-9, 9, (7, 32), generator=g, dtype=torch.int8), \
        torch.rand(7, generator=g)
    for args in [(x, w, s.double()), (x, w.int(), s), (x[0], w, s), (x, w[:, :31], s), (x, w, s[:6]),
                 (x.bfloat16(), w, s), (x, w[None], s), (x.double(), w, s.double()), (x.int(), w, s)]:
        check_like_cpu(torch._weight_int8pack_mm, *args)


# ------------------------------------------------ _compute_linear_combination

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                                   torch.int64, torch.bool], ids=str)
def test_compute_linear_combination(dtype):
    g = torch.Generator().manual_seed(13)
    x = (torch.randn(3, 4, 5, generator=g, dtype=torch.float64) * 3).to(dtype)
    c = (torch.randn(2, 3, generator=g, dtype=torch.float64) * 3).to(dtype)
    check(torch._compute_linear_combination, x, c, scale=4 if dtype in (torch.bfloat16, torch.float16) else 1)


def test_compute_linear_combination_variants():
    g = torch.Generator().manual_seed(14)
    x, c = torch.randn(3, 4, generator=g), torch.randn(2, 3, generator=g)
    f = torch._compute_linear_combination
    check(f, x.t(), torch.randn(2, 4, generator=g).t().contiguous().t())  # non-contiguous
    check(f, x, c[:, :2])  # first coefficients.size(1) rows of input
    check(f, torch.randn(3, generator=g), c)  # 1-D input
    check(f, x, c[:, :, None])  # extra coefficient dims: index 0
    check(lambda x, c: f(x, c, out=torch.zeros(2, 4, device=x.device)), x, c)  # CPU adds into out: zeros
    check_like_cpu(f, x, c[0])  # IndexError
