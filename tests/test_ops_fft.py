"""torch.fft.* (ATen's _fft_r2c/_fft_c2c/_fft_c2r), conj_physical and angle,
compared with PyTorch on CPU."""
import math

import pytest
import torch

from tpu_testing import check, check_special

# An FFT output element sums n products (n <= 120 here) in an order that differs
# from pocketfft's, with twiddle factors computed differently: about log2(n) (up to
# n) roundings of the dtype's epsilon, times the largest |input| (randn: ~3, sums up
# to ~30). For float32/complex64 (eps 1.2e-7) that is up to ~1e-5 absolute, so 2e-5
# (seed 0's worst: 1.6e-6); for float64/complex128 (eps 2.2e-16) the same argument
# gives 1e-10 with margin (seed 0's worst: 1e-15).
FFT_TOL = {
    torch.float32: dict(rtol=2e-5, atol=2e-5),
    torch.complex64: dict(rtol=2e-5, atol=2e-5),
    torch.float64: dict(rtol=1e-10, atol=1e-10),
    torch.complex128: dict(rtol=1e-10, atol=1e-10),
}


def close(actual, expected):
    assert actual.device.type == "tpu"
    a = actual.cpu()
    assert a.dtype == expected.dtype, f"dtype {a.dtype} != {expected.dtype}"
    assert a.shape == expected.shape, f"shape {tuple(a.shape)} != {tuple(expected.shape)}"
    torch.testing.assert_close(a, expected, equal_nan=True, **FFT_TOL[expected.dtype])


def run(fn, x, **kw):
    close(fn(x.to("tpu"), **kw), fn(x, **kw))


NORMS = [None, "forward", "ortho", "backward"]


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn", [torch.fft.fft, torch.fft.ifft, torch.fft.rfft, torch.fft.irfft,
                                torch.fft.hfft, torch.fft.ihfft])
@pytest.mark.parametrize("shape,dim", [((8,), -1), ((3, 6), -1), ((5, 7), 0), ((2, 3, 5), 1)])
def test_fft_1d_real_input(fn, norm, shape, dim):
    torch.manual_seed(0)
    run(fn, torch.randn(shape), dim=dim, norm=norm)


@pytest.mark.parametrize("fn", [torch.fft.fft, torch.fft.ifft, torch.fft.rfft, torch.fft.irfft,
                                torch.fft.hfft, torch.fft.ihfft])
@pytest.mark.parametrize("n", [4, 7, 12])
def test_fft_1d_n(fn, n):
    # n crops or zero-pads the signal (odd n exercises irfft's last_dim_size).
    torch.manual_seed(1)
    run(fn, torch.randn(3, 9), n=n, norm="ortho")


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn", [torch.fft.fft, torch.fft.ifft])
def test_fft_1d_complex_input(fn, norm):
    torch.manual_seed(2)
    run(fn, torch.randn(4, 10, dtype=torch.complex64), norm=norm)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("fn", [torch.fft.fft2, torch.fft.ifft2, torch.fft.fftn, torch.fft.ifftn,
                                torch.fft.rfft2, torch.fft.irfft2, torch.fft.rfftn, torch.fft.irfftn,
                                torch.fft.hfft2, torch.fft.ihfft2, torch.fft.hfftn, torch.fft.ihfftn])
def test_fft_nd(fn, norm):
    torch.manual_seed(3)
    run(fn, torch.randn(2, 5, 6), norm=norm)


@pytest.mark.parametrize("fn", [torch.fft.fftn, torch.fft.ifftn, torch.fft.rfftn, torch.fft.irfftn])
@pytest.mark.parametrize("dim,s", [((0, 2), None), ((2, 0), None), ((1,), (7,)), ((0, 1, 2), (3, 4, 5)),
                                   ((-1, -3), (6, 4))])
def test_fft_nd_dims(fn, dim, s):
    # Dims in any order, including non-trailing ones (transposed to the end and back).
    torch.manual_seed(4)
    run(fn, torch.randn(3, 4, 6), s=s, dim=dim)


def test_fft_float64():
    torch.manual_seed(5)
    x = torch.randn(4, 6, dtype=torch.float64)
    for fn in (torch.fft.fft, torch.fft.rfft, torch.fft.irfft, torch.fft.fft2):
        run(fn, x)


def test_fft_noncontiguous_input():
    torch.manual_seed(6)
    x = torch.randn(6, 8)
    close(torch.fft.rfft(x.to("tpu").t()), torch.fft.rfft(x.t()))
    close(torch.fft.fft(x.to("tpu")[:, ::2]), torch.fft.fft(x[:, ::2]))


def test_fft_int_and_bool_inputs():
    # Integral inputs are promoted to float32 before _fft_r2c.
    run(torch.fft.fft, torch.arange(8))
    run(torch.fft.rfft, torch.tensor([True, False, True, True]))


# The fft backward formulas go through view_as_real: a float view of complex storage.
@pytest.mark.parametrize("fn", [torch.fft.rfft, torch.fft.fft, torch.fft.irfft, torch.fft.fft2, torch.fft.rfftn])
def test_fft_grad(fn):
    torch.manual_seed(7)
    x = torch.randn(4, 6)
    xc = x.clone().requires_grad_(True)
    xt = x.to("tpu").requires_grad_(True)
    yc, yt = fn(xc, norm="ortho"), fn(xt, norm="ortho")
    close(yt, yc)
    # A real loss of the (possibly complex) result. Complex results are mapped back
    # to real through an irfft (view_as_real/abs would need view and sgn support).
    torch.manual_seed(8)
    wc = torch.randn(yc.shape, dtype=torch.complex64) if yc.is_complex() else None

    def loss(y, dev):
        if wc is not None:
            y = torch.fft.irfft(y * wc.to(dev), n=2 * y.shape[-1] - 1)
        return (y * wr.to(dev)).sum()

    wr = torch.randn(yc.shape if wc is None else (*yc.shape[:-1], 2 * yc.shape[-1] - 1))
    lc, lt = loss(yc, "cpu"), loss(yt, "tpu")
    lc.backward()
    lt.backward()
    close(xt.grad, xc.grad)


# ------------------------------------------------------------ complex helpers

def test_conj_physical():
    torch.manual_seed(8)
    z = torch.randn(3, 4, dtype=torch.complex64)
    close(torch.conj_physical(z.to("tpu")), torch.conj_physical(z))
    x = torch.randn(5)
    check(torch.conj_physical, x)
    check(torch.conj_physical, torch.arange(5))


def _angle(x):
    """angle of a real number: pi below 0, 0 at or above (-0.0 included), nan at nan."""
    return x if x != x else math.pi if x < 0 else 0.0


def test_angle_real():
    # Special values against the definition, not against the CPU's kernel.
    x = torch.tensor([-2.0, -0.0, 0.0, 3.0, float("nan"), float("-inf"), float("inf")])
    check_special(torch.angle, _angle, x)
    check_special(torch.angle, _angle, x.to(torch.bfloat16))
    check(torch.angle, torch.tensor([-3, 0, 4]))
    check(torch.angle, torch.tensor([True, False]))


def test_angle_complex():
    z = torch.tensor([1 + 1j, -1 + 0j, -1 - 1e-3j, 0j, 2j], dtype=torch.complex64)
    a = torch.angle(z.to("tpu"))
    close(a, torch.angle(z))
    assert abs(a.cpu()[1].item() - math.pi) < 1e-6


@pytest.mark.parametrize("fn", [torch.neg, torch.abs, torch.add, torch.sub, torch.mul, torch.div])
def test_complex64_elementwise(fn):
    torch.manual_seed(9)
    z = torch.randn(3, 4, dtype=torch.complex64)
    w = torch.randn(4, dtype=torch.complex64)
    if fn in (torch.neg, torch.abs):
        close(fn(z.to("tpu")), fn(z))
    else:
        close(fn(z.to("tpu"), w.to("tpu")), fn(z, w))
        # A real tensor promotes to complex64.
        r = torch.randn(4)
        close(fn(z.to("tpu"), r.to("tpu")), fn(z, r))
