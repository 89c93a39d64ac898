"""PyTorch's orthogonal polynomials (special_*_polynomial_*) and Bessel/Airy
functions (special_bessel_j0/j1/y0/y1, special_modified_bessel_k0/k1,
special_scaled_modified_bessel_k0/k1, special_spherical_bessel_j0,
special_airy_ai) on tpu against PyTorch on CPU.

Both families evaluate ATen's CPU kernels (Math.h) in the same operation order,
so finite values are compared with the CPU results, for float32 and float64 and
for integral/bool inputs (promoted to float32); float16/bfloat16 raise the CPU's
NotImplementedError.

Tolerances (tpu_testing.TOL, float32 1e-5, float64 1e-7, relative and absolute):
- The polynomials' recurrences and closed forms come out bit-identical to the
  CPU's; the unscaled tolerance holds there.
- Chebyshev trig forms (cos(n acos y), sin((n + 1) theta)/sin(theta), ...; ATen
  takes them for |y| < 1 above n = 4..8) amplify the 1-2 ulp difference between
  XLA's acos and the C library's by about n/sin(theta) (or n/cos(theta/2)): in
  float32 at n <= 50 the worst element measured needed 18x the tolerance, so those
  elements use TRIG_SCALE = 50 in float32; float64 keeps 1x.
- Bessel/Airy: the oscillating forms take sin/cos of a float32 phase (x - pi/4
  for J/Y, zeta + pi/4 = 2|x|^1.5/3 + pi/4 for Ai below -2.09) whose own rounding
  (an ulp of the phase, 2^-23 |phase|) is an absolute error of the result (the
  amplitude is <= 1) in any float32 evaluation: at x = -1000, Ai's phase is
  21083, and CPU and tpu float32 differ from float64 by 1.4e-4 and 2e-5. The
  float32 tolerance for those elements is the larger of the default and 2 ulps
  of the phase. Elsewhere the default tolerance holds.

Special values are compared with defined values, not with the CPU (tpu_testing's
rule), where ATen's code defines them: n < 0 → 0; n NaN, ±inf or outside int64 →
0 (ATen casts n to int64, which on x86 gives INT64_MIN); x NaN → NaN for n >= 1
(for Chebyshev U/V/W, Laguerre and Legendre ATen's CPU kernel returns an
uninitialised value there; tpu returns NaN); Hermite n > 128 (float) / 512
(double) → NaN; the interval ends' closed forms; J/Y(±inf) = NaN (cos(inf) in
the Hankel form), Y(0) = -inf, Y(x < 0) = NaN, K(0) = inf, K(x < 0) = NaN,
K(inf) = 0, spherical j0(±inf) = 0, Ai(±inf) = NaN, Ai(x > 103.892) = 0; the
finite ones exactly (past 103.892 Ai's formula is below float64's normal range,
so that cut-off itself is invisible once XLA flushes subnormals). K and
Ai on x > 0 decay exponentially: they are compared relatively only (no absolute
tolerance), within the default rtol, down to the smallest normal number (XLA's
CPU code flushes subnormal results to zero)."""
import pytest
import torch

from tpu_testing import assert_raises_like, assert_same, assert_special, tol

NAN, INF = float("nan"), float("inf")

CHEBYSHEV = {  # op -> (shifted, n above which ATen takes the trig form)
    "chebyshev_polynomial_t": (False, 6), "chebyshev_polynomial_u": (False, 8),
    "chebyshev_polynomial_v": (False, 8), "chebyshev_polynomial_w": (False, 8),
    "shifted_chebyshev_polynomial_t": (True, 6), "shifted_chebyshev_polynomial_u": (True, 6),
    "shifted_chebyshev_polynomial_v": (True, 6), "shifted_chebyshev_polynomial_w": (True, 4),
}
POLYS = list(CHEBYSHEV) + ["hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
                           "legendre_polynomial_p"]
BESSEL = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_k0", "modified_bessel_k1",
          "scaled_modified_bessel_k0", "scaled_modified_bessel_k1", "spherical_bessel_j0", "airy_ai"]
FLOATS = [torch.float32, torch.float64]
TRIG_SCALE = 50


@pytest.fixture(autouse=True)
def seed():
    torch.manual_seed(0)


def fn(name):
    return getattr(torch.special, name)


def assert_close_where(actual, expected, scale, what, relative=None):
    """actual (tpu) == expected (CPU) with per-element tolerance scale (a tensor);
    where `relative` (a bool tensor), without the absolute part (values that
    decay exponentially: their relative error is the one that matters)."""
    assert actual.device.type == "tpu"
    a = actual.cpu()
    assert a.dtype == expected.dtype and a.shape == expected.shape, what
    t = tol(expected.dtype)
    ad, ed = a.double(), expected.double()
    bad = torch.isnan(ad) != torch.isnan(ed)
    fin = torch.isfinite(ed)
    bad |= ~fin & ~torch.isnan(ed) & (ad != ed)
    atol = torch.full(ed.shape, t["atol"], dtype=torch.float64)
    if relative is not None:
        atol[relative] = 0.0
    bad |= fin & ((ad - ed).abs() > (atol + t["rtol"] * ed.abs()) * scale)
    if bad.any():
        rows = [f"  at {i}: got {ad[tuple(i)].item()!r}, expected {ed[tuple(i)].item()!r}"
                for i in bad.nonzero().tolist()[:8]]
        raise AssertionError(f"{what}: {int(bad.sum())} element(s) differ:\n" + "\n".join(rows))


# --------------------------------------------------------------- polynomials

def trig_mask(name, x, n):
    """Elements where ATen takes a Chebyshev trig form (see the module docstring)."""
    if name not in CHEBYSHEV:
        return torch.zeros(torch.broadcast_shapes(x.shape, n.shape), dtype=torch.bool)
    shifted, above = CHEBYSHEV[name]
    y = 2 * x.double() - 1 if shifted else x.double()
    return (n.double().trunc() > above) & (y.abs() < 1)


def end_values(name, n):
    """ATen's closed forms at x = 1 and at x = -1 (x = 0 for shifted ones)."""
    if name.startswith("legendre"):
        return 1.0, (-1.0) ** n
    s = -1.0 if n % 2 else 1.0
    kind = name[-1]
    pos = {"t": 1.0, "u": n + 1.0, "v": 1.0, "w": 2.0 * n + 1}
    neg = {"t": s, "u": s * (n + 1.0), "v": s * (2.0 * n + 1), "w": s}
    return pos[kind], neg[kind]


def defined_pairs(name, dtype):
    """(x, n, value) where ATen's code defines the value (module docstring)."""
    rows = [(NAN, -1, 0.0), (NAN, 0, 1.0), (NAN, 1, NAN), (NAN, 2, NAN), (NAN, 9, NAN), (0.5, NAN, 0.0),
            (0.5, INF, 0.0), (0.5, -INF, 0.0), (0.5, 1e30, 0.0), (1.0, NAN, 0.0), (-1.0, 1e20, 0.0),
            (0.25, -1e20, 0.0), (0.25, -2, 0.0)]
    if name.startswith("hermite"):  # the cap (below it the values overflow to NaN anyway: inf - inf)
        cap = 512 if dtype == torch.float64 else 128
        rows += [(0.5, cap + 1, NAN), (0.0, cap + 1, NAN), (1e-3, 4 * cap, NAN), (0.5, 1e6, NAN)]
    if name in CHEBYSHEV or name.startswith("legendre"):
        lo = 0.0 if name.startswith("shifted") else -1.0
        for k in (0, 1, 2, 3, 10, 51, 1000000):
            pos, neg = end_values(name, k)
            rows += [(1.0, k, pos), (lo, k, neg)]
    return rows


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", POLYS)
def test_polynomial(name, dtype):
    """One call per op and dtype: a grid of x over [-1.5, 1.5] (and 0, +-1, +-2,
    3) times n in [-3, 50] with fractions (the recurrence, the closed forms, the
    trig forms) and large n (up to 1000, float64; 200, float32) against the CPU,
    plus the defined special values."""
    x = torch.cat([torch.empty(30, dtype=torch.float64).uniform_(-1.5, 1.5),
                   torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-3, 0.999, -0.999, 3.0])])
    n = torch.tensor([-3, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 20, 33, 50, 2.5, -0.5, 7.9],
                     dtype=torch.float64)
    gx, gn = torch.broadcast_tensors(x[:, None], n[None, :])
    big = [600, 1000, 300, 800, 3, 511, 100] if dtype == torch.float64 else [200, 150, 90, 70, 3, 127, 100]
    lx = torch.tensor([0.3, -0.7, 0.95, 1.01, 0.3, 0.6, -0.2], dtype=torch.float64)
    lnn = torch.tensor(big, dtype=torch.float64)
    spec = defined_pairs(name, dtype)
    sx = torch.tensor([r[0] for r in spec], dtype=torch.float64)
    sn = torch.tensor([r[1] for r in spec], dtype=torch.float64)
    xs = torch.cat([gx.reshape(-1), lx, sx]).to(dtype)
    ns = torch.cat([gn.reshape(-1), lnn, sn]).to(dtype)
    got = fn(name)(xs.to("tpu"), ns.to("tpu"))
    k = len(spec)
    expected = fn(name)(xs[:-k], ns[:-k])
    scale = torch.ones(expected.shape, dtype=torch.float64)
    if dtype == torch.float32:
        scale[trig_mask(name, xs[:-k], ns[:-k])] = TRIG_SCALE
    assert_close_where(got[:-k], expected, scale, name)
    assert_special(got[-k:], torch.tensor([r[2] for r in spec], dtype=dtype), signed_zeros=False,
                   what=f"{name} special values {[(r[0], r[1]) for r in spec]}")


@pytest.mark.parametrize("name", POLYS)
def test_polynomial_overloads(name):
    """Scalar x (x_scalar), Scalar n (n_scalar, int and float), broadcasting; on
    two ops also integral promotion, mixed float dtypes, 0-d tensors, out=."""
    f = fn(name)
    x = torch.empty(3, 1, dtype=torch.float64).uniform_(-1.2, 1.2).float()
    n = torch.tensor([0, 1, 3, 12], dtype=torch.int64)
    cases = [(0.375, n), (x, 9.5)]
    full = name in ("chebyshev_polynomial_t", "laguerre_polynomial_l")
    if full:  # the rest of the promotion table, on two ops (one lowering serves all)
        cases += [(x, 5), (x.double(), n.float()), (torch.tensor(0.5), n), (x.double(), 7),
                  (torch.tensor([[0], [1], [2]]), n)]
    for a, m in cases:
        expected = f(a, m)
        got = f(a.to("tpu") if isinstance(a, torch.Tensor) else a, m.to("tpu") if isinstance(m, torch.Tensor) else m)
        loose = trig_mask(name, torch.as_tensor(a), torch.as_tensor(m)) & (expected.dtype == torch.float32)
        scale = torch.where(loose, float(TRIG_SCALE), 1.0)
        assert_close_where(got, expected, scale, f"{name}({type(a).__name__}, {type(m).__name__})")
    if not full:
        return
    out = torch.empty(3, 4, device="tpu")
    r = f(x.to("tpu"), n.to("tpu"), out=out)
    assert r is out
    assert_close_where(out, f(x, n), torch.where(trig_mask(name, x, n), float(TRIG_SCALE), 1.0), name + " out=")


def test_polynomial_empty_and_scalar_shapes():
    f = torch.special.chebyshev_polynomial_t
    x, n = torch.empty(0, 3), torch.empty(0, 3)
    assert f(x.to("tpu"), n.to("tpu")).cpu().shape == (0, 3)
    assert_same(f(torch.tensor(0.3).to("tpu"), torch.tensor(4.0).to("tpu")), f(torch.tensor(0.3), torch.tensor(4.0)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_polynomial_half_raises(dtype):
    x = torch.rand(4).to(dtype)
    with pytest.raises(NotImplementedError) as cpu:
        torch.special.legendre_polynomial_p(x, x)
    assert_raises_like(cpu.value, torch.special.legendre_polynomial_p, x, x)


# ----------------------------------------------------------- Bessel and Airy

SPECIAL = [0.0, -0.0, -1.0, INF, -INF, NAN, 103.9]
DEFINED = {  # values at SPECIAL, from ATen's branches (module docstring); None: not special
    "bessel_j0": [1.0, 1.0, None, NAN, NAN, NAN, None],
    "bessel_j1": [0.0, -0.0, None, NAN, NAN, NAN, None],
    "bessel_y0": [-INF, -INF, NAN, NAN, NAN, NAN, None],
    "bessel_y1": [-INF, -INF, NAN, NAN, NAN, NAN, None],
    "modified_bessel_k0": [INF, INF, NAN, 0.0, NAN, NAN, None],
    "modified_bessel_k1": [INF, INF, NAN, 0.0, NAN, NAN, None],
    "scaled_modified_bessel_k0": [INF, INF, NAN, 0.0, NAN, NAN, None],
    "scaled_modified_bessel_k1": [INF, INF, NAN, 0.0, NAN, NAN, None],
    "spherical_bessel_j0": [1.0, 1.0, None, 0.0, 0.0, NAN, None],
    "airy_ai": [0.355028053887817239260, 0.355028053887817239260, None, NAN, NAN, NAN, 0.0],
}


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", BESSEL)
def test_bessel(name, dtype):
    """One call per op and dtype: every branch of the piecewise approximations,
    both signs and large x against the CPU, and the defined special values."""
    keep = [i for i, v in enumerate(DEFINED[name]) if v is not None]
    x = torch.cat([torch.linspace(-20.0, 20.0, 801, dtype=torch.float64),
                   torch.empty(64, dtype=torch.float64).uniform_(-120.0, 120.0),
                   torch.tensor([1e-7, -1e-7, 1e-5, 0.4999, 0.5, 1.9999, 2.0, 2.0001, 2.09, -2.09, 4.9999,
                                 5.0, 5.0001, -5.0, 8.0, 8.3203353, 8.33, 103.8, 103.9, 1e3, -1e3]),
                   torch.tensor([SPECIAL[i] for i in keep], dtype=torch.float64)]).to(dtype)
    k = len(keep)
    got = fn(name)(x.to("tpu"))
    x = x[:-k]
    expected = fn(name)(x)
    scale = torch.ones(x.shape, dtype=torch.float64)
    if dtype == torch.float32:  # 2 ulps of the sin/cos phase (module docstring)
        phase = x.double().abs()
        if name == "airy_ai":
            phase = torch.where(x < -2.09, 2 / 3 * phase ** 1.5, 0.0)
        elif not name.startswith("bessel_"):
            phase = torch.zeros_like(phase)
        scale = torch.clamp(phase * 2.0 ** -22 / tol(dtype)["atol"], min=1.0)
    decaying = x > 0 if name == "airy_ai" else torch.full(x.shape, "modified" in name)
    decaying &= expected.abs() >= torch.finfo(dtype).tiny  # XLA flushes subnormal results to 0
    assert_close_where(got[:-k], expected, scale, name, relative=decaying)
    want = torch.tensor([DEFINED[name][i] for i in keep], dtype=dtype)
    assert_special(got[-k:], want, what=f"{name} at {[SPECIAL[i] for i in keep]}")
    fin = torch.isfinite(want)
    assert torch.equal(got[-k:].cpu()[fin], want[fin]), f"{name}: {got[-k:].cpu()} != {want}"


@pytest.mark.parametrize("name", BESSEL)
def test_bessel_dtypes(name):
    """Integral and bool inputs give float32; f16/bf16 raise like the CPU."""
    f = fn(name)
    ints = [torch.arange(-3, 12), torch.arange(0, 12, dtype=torch.uint8), torch.tensor([True, False])]
    for x in ints if name in ("bessel_j0", "airy_ai") else ints[:1]:
        expected = f(x)
        assert_close_where(f(x.to("tpu")), expected, torch.ones(expected.shape, dtype=torch.float64), name)
    for dtype in (torch.float16, torch.bfloat16):
        h = torch.rand(3).to(dtype)
        with pytest.raises(NotImplementedError) as cpu:
            f(h)
        assert_raises_like(cpu.value, f, h)


def test_bessel_shapes_and_out():
    x = torch.rand(2, 3, 4, dtype=torch.float64) * 10
    assert_same(torch.special.bessel_j1(x.to("tpu")), torch.special.bessel_j1(x))
    assert torch.special.airy_ai(torch.empty(0, 2).to("tpu")).cpu().shape == (0, 2)
    out = torch.empty(2, 3, 4, dtype=torch.float64, device="tpu")
    assert torch.special.modified_bessel_k1(x.to("tpu"), out=out) is out
    assert_same(out, torch.special.modified_bessel_k1(x))
    assert_same(torch.special.airy_ai(x[0, 0].to("tpu")), torch.special.airy_ai(x[0, 0]))
    # views on tpu (non-contiguous, offset) as both operands
    xt, n = x.to("tpu"), torch.randint(0, 12, (4, 3, 2)).double()
    assert_same(torch.special.bessel_y1(xt.transpose(0, 2)[1:]), torch.special.bessel_y1(x.transpose(0, 2)[1:]))
    assert_same(torch.special.legendre_polynomial_p(xt.transpose(0, 2) / 10, n.to("tpu")),
                torch.special.legendre_polynomial_p(x.transpose(0, 2) / 10, n))
