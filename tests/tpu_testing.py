"""Shared helpers for tests: run the same function on CPU and on tpu, compare.

Tolerances per dtype are stated once, here (issue: float32 1e-5 relative,
bfloat16 1e-2).  A test that passes ``scale`` says why next to it.

Special values (nan, +-inf, -0.0) are never compared with the host CPU's kernels:
those differ between ISAs (AVX2 / AVX-512 / scalar) and libraries (oneDNN), e.g.
CPU float32 gelu(+inf) is NaN with oneDNN's AVX-512 kernel.  ``reference`` evaluates a scalar Python
definition in float64 (C99 Annex F functions come from the C library's libm, see
``libm``) and ``assert_special`` compares with it exactly at nan/inf (and at
signed zeros when asked)."""
import ctypes
import ctypes.util
import math
import re

import pytest
import torch

# The dtypes of the linalg decomposition tests. Their float64 sweeps are marked slow and run
# in `make test-slow` (README, "Other targets"), not in `make test`: what accelerators compute
# is float32, and each dtype compiles programs of its own.
LINALG_DTYPES = [torch.float32, pytest.param(torch.float64, marks=pytest.mark.slow)]
# The same for their complex tests: complex64 in `make test`, complex128 in `make test-slow`.
LINALG_CDTYPES = [torch.complex64, pytest.param(torch.complex128, marks=pytest.mark.slow)]

TOL = {
    # The requirement: ~80 float32 ulps (2**-23), room for a different
    # summation order or another (correctly rounded to a few ulps) algorithm.
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    # Far above float64's ulp (2**-52), on purpose: float64 checks here are about dtype
    # plumbing (float64 results, right to float32-and-better accuracy), not about
    # float64-exact algorithms.
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    # bf16 keeps 8 bits of mantissa (2**-8 = 3.9e-3 relative spacing): 1e-2 is ~2.5 ulps.
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
    # f16 keeps 11 bits (2**-11 = 4.9e-4): 1e-3 is ~2 ulps.
    torch.float16: dict(rtol=1e-3, atol=1e-3),
    # Complex results: their real and imaginary parts' dtype's tolerance.
    torch.complex64: dict(rtol=1e-5, atol=1e-5),
    torch.complex128: dict(rtol=1e-7, atol=1e-7),
}


def tol(dtype, scale=1.0):
    t = TOL.get(dtype, dict(rtol=0, atol=0))
    return dict(rtol=t["rtol"] * scale, atol=t["atol"] * scale)


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_tpu(v) for k, v in x.items()}
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def assert_same(actual, expected, scale=1.0, check_dtype=True):
    """actual from tpu, expected from CPU: same structure, dtypes, shapes, values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        assert actual.device.type == "tpu", f"result on {actual.device}, expected tpu"
        a = actual.cpu()
        if check_dtype:
            assert a.dtype == expected.dtype, f"dtype {a.dtype} != {expected.dtype}"
        assert a.shape == expected.shape, f"shape {tuple(a.shape)} != {tuple(expected.shape)}"
        torch.testing.assert_close(a, expected, equal_nan=True, check_dtype=check_dtype,
                                   **tol(expected.dtype, scale))
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, scale, check_dtype)
    else:
        assert actual == expected or (actual != actual and expected != expected), f"{actual} != {expected}"


def check(fn, *args, scale=1.0, check_dtype=True, **kwargs):
    """Runs fn(*args) on CPU and fn(*tpu copies) and compares the results."""
    expected = fn(*args, **kwargs)
    actual = fn(*to_tpu(args), **to_tpu(kwargs))
    assert_same(actual, expected, scale, check_dtype)
    return actual, expected


def check_grad(fn, *args, scale=1.0):
    """Compares fn's output and the gradients of its float inputs, CPU vs tpu."""
    cpu_in = [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
              for a in args]
    tpu_in = [a.detach().to("tpu").requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
              for a in args]
    out_c = fn(*cpu_in)
    out_t = fn(*tpu_in)
    assert_same(out_t, out_c, scale)
    g = torch.randn_like(out_c)
    out_c.backward(g)
    out_t.backward(g.to("tpu"))
    for c, t in zip(cpu_in, tpu_in):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert t.grad is not None, "no gradient on tpu"
            assert_same(t.grad, c.grad, scale)


# ------------------------------------------------------------- exceptions

def assert_raises_like(cpu_error, fn, *args, **kwargs):
    """fn on tpu copies of args raises exactly cpu_error's class (a subclass is not
    enough: NotImplementedError is a RuntimeError, and a missing lowering raises
    NotImplementedError). A NotImplementedError must also carry the CPU's dtype
    error (`not implemented for 'Long'`; the kernel name before it may differ), or
    else the CPU's whole first line, so that "no lowering for this op" never passes
    for a dtype error. Returns the tpu exception."""
    try:
        to_cpu(fn(*to_tpu(args), **to_tpu(kwargs)))
    except Exception as e:  # noqa: BLE001  (compared below)
        assert type(e) is type(cpu_error), (
            f"tpu raised {type(e).__name__}: {str(e)[:300]}\n"
            f"CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:300]}")
        if isinstance(cpu_error, NotImplementedError):
            first = str(cpu_error).split("\n")[0]
            m = re.search(r"not implemented for '[^']+'", first)
            want = m.group(0) if m else first
            assert want in str(e), f"tpu: {str(e)[:300]!r}\nCPU: {first!r}"
        return e
    pytest.fail(f"tpu did not raise; CPU raised {type(cpu_error).__name__}: {str(cpu_error)[:300]}")


def check_like_cpu(fn, *args, scale=1.0, **kwargs):
    """check(), or when the CPU raises, the same exception class on tpu."""
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001  (any CPU error must be mirrored)
        assert_raises_like(e, fn, *args, **kwargs)
        return
    assert_same(fn(*to_tpu(args), **to_tpu(kwargs)), expected, scale)


# ----------------------------------------------------------- special values

def _load_libm():
    lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    fns = {}
    for name, nargs in [("fmod", 2), ("remainder", 2), ("atan2", 2), ("hypot", 2), ("pow", 2), ("copysign", 2),
                        ("fmax", 2), ("fmin", 2), ("nextafter", 2), ("exp", 1), ("expm1", 1), ("log", 1),
                        ("log1p", 1), ("sqrt", 1), ("floor", 1), ("ceil", 1), ("trunc", 1), ("rint", 1),
                        ("lgamma", 1), ("erf", 1), ("erfc", 1), ("tanh", 1), ("sin", 1), ("cos", 1)]:
        f = getattr(lib, name)
        f.restype = ctypes.c_double
        f.argtypes = [ctypes.c_double] * nargs
        fns[name] = f
    nextafterf = lib.nextafterf
    nextafterf.restype = ctypes.c_float
    nextafterf.argtypes = [ctypes.c_float, ctypes.c_float]
    fns["nextafterf"] = nextafterf
    return type("LibM", (), {k: staticmethod(v) for k, v in fns.items()})


# The C library's double functions: IEEE 754 / C99 Annex F results at special values
# (fmod(inf, y) = nan, pow(x, 0) = 1 for any x, atan2(+-0, -0) = +-pi, ...), with
# none of Python math's exceptions. Scalar code: no SIMD dispatch.
libm = _load_libm()


def ieee_div(a, b):
    """a / b in IEEE arithmetic (Python raises ZeroDivisionError instead)."""
    if a != a or b != b:
        return math.nan
    if b == 0.0:
        return math.nan if a == 0.0 else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def reference(fn, *tensors, dtype=None):
    """fn (a scalar Python function of floats, evaluated in float64) applied
    elementwise to the broadcast tensors; the result in `dtype` (default: the
    first tensor's). fn may return a bool (a bool tensor) or a tuple (a tuple of
    tensors of the given dtypes)."""
    bs = torch.broadcast_tensors(*tensors)
    vals = [t.double().flatten().tolist() for t in bs]
    out = [fn(*xs) for xs in zip(*vals)]
    shape = bs[0].shape
    dtype = dtype or tensors[0].dtype
    if out and isinstance(out[0], tuple):
        dts = dtype if isinstance(dtype, (tuple, list)) else [dtype] * len(out[0])
        return tuple(torch.tensor([o[i] for o in out], dtype=torch.float64).to(d).reshape(shape)
                     for i, d in enumerate(dts))
    if out and isinstance(out[0], bool):
        return torch.tensor(out, dtype=torch.bool).reshape(shape)
    return torch.tensor(out, dtype=torch.float64).to(dtype).reshape(shape)


def assert_special(actual, expected, scale=1.0, signed_zeros=True, what=""):
    """actual (tpu) against a defined reference: same dtype and shape, NaN exactly
    where expected is NaN, the same infinities, the same sign at zeros (when
    signed_zeros) and finite values within the dtype's tolerance."""
    if isinstance(expected, (tuple, list)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_special(a, e, scale, signed_zeros, what)
        return
    assert actual.device.type == "tpu", f"result on {actual.device}, expected tpu"
    a = actual.cpu()
    assert a.dtype == expected.dtype, f"{what}: dtype {a.dtype} != {expected.dtype}"
    assert a.shape == expected.shape, f"{what}: shape {tuple(a.shape)} != {tuple(expected.shape)}"
    if not expected.is_floating_point():
        assert torch.equal(a, expected), f"{what}:\n got      {a.tolist()}\n expected {expected.tolist()}"
        return
    ad, ed = a.double(), expected.double()
    bad = torch.isnan(ed) != torch.isnan(ad)
    inf = torch.isinf(ed)
    bad |= inf & (ad != ed)
    bad |= ~inf & torch.isinf(ad)
    if signed_zeros:
        bad |= (ed == 0) & (torch.signbit(ad) != torch.signbit(ed))
    fin = torch.isfinite(ed) & torch.isfinite(ad)
    t = tol(expected.dtype, scale)
    bad |= fin & ((ad - ed).abs() > t["atol"] + t["rtol"] * ed.abs())
    if bad.any():
        idx = bad.nonzero().tolist()[:8]
        rows = [f"  at {i}: got {ad[tuple(i)].item()!r}, expected {ed[tuple(i)].item()!r}" for i in idx]
        raise AssertionError(f"{what}: {int(bad.sum())} element(s) differ from the defined values:\n" + "\n".join(rows))


def check_special(fn, ref_fn, *tensors, scale=1.0, signed_zeros=True, dtype=None, what=""):
    """fn on tpu copies of `tensors` compared (assert_special) with
    reference(ref_fn, *tensors); the reference's dtype is `dtype`, by default the
    tensors' promoted dtype."""
    if dtype is None:
        dtype = tensors[0].dtype if len(tensors) == 1 else torch.result_type(*tensors)
    expected = reference(ref_fn, *tensors, dtype=dtype)
    assert_special(fn(*to_tpu(tensors)), expected, scale, signed_zeros, what or getattr(ref_fn, "__name__", ""))
