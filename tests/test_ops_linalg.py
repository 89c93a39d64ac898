"""linalg family (runtime/src/ops/linalg.c) vs PyTorch on CPU: Cholesky and
triangular solves on well-conditioned float32 inputs, and complex64/complex128 Hermitian ones."""
import warnings

import pytest
import torch
import torchtpu

from tpu_testing import assert_same, check, check_grad


def _spd(*batch, n=4):
    a = torch.randn(*batch, n, n)
    return a @ a.mT + n * torch.eye(n)


def _tri(*batch, n=4, upper=False):
    a = torch.randn(*batch, n, n) + n * torch.eye(n)
    return a.triu() if upper else a.tril()


@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
@pytest.mark.parametrize("upper", [False, True])
def test_cholesky(batch, upper):
    a = _spd(*batch)
    check(lambda a: torch.linalg.cholesky(a, upper=upper), a)
    check(lambda a: torch.linalg.cholesky_ex(a, upper=upper), a)
    check(lambda a: torch.cholesky(a, upper=upper), a)


def test_cholesky_grad_and_empty():
    check_grad(lambda a: torch.linalg.cholesky(a @ a.mT + 4 * torch.eye(4, device=a.device)), torch.randn(4, 4))
    check(lambda a: torch.linalg.cholesky(a), torch.zeros(0, 0))


def test_cholesky_errors():
    with pytest.raises(RuntimeError, match="floating point"):
        torch.linalg.cholesky(torch.ones(2, 2, dtype=torch.int64, device="tpu"))
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.cholesky(torch.ones(2, 3, device="tpu"))


def _not_pd(n, at, dtype=torch.float32):
    """An SPD matrix whose leading minor of order at + 1 is the first that is not
    positive definite."""
    a = _spd(n=n).to(dtype)
    a[at, at] = -100.0
    return a


NOT_PD = {
    "order_1": lambda: -torch.eye(3),
    "order_2_of_2": lambda: torch.tensor([[1.0, 2.0], [2.0, 1.0]]),
    "order_4": lambda: _not_pd(5, 3),
    "last": lambda: _not_pd(6, 5),
    "zero_pivot_last": lambda: torch.diag(torch.tensor([1.0, 0.0])),
    "nan": lambda: torch.tensor([[1.0, float("nan")], [float("nan"), 1.0]]),
    "batch": lambda: torch.stack([_spd(), _not_pd(4, 2), _not_pd(4, 1), _spd()]),
    "batch_2d": lambda: torch.stack([_spd(), _not_pd(4, 2)]).view(2, 1, 4, 4),
    "float64": lambda: _not_pd(4, 2, torch.float64),
    "complex64": lambda: _not_pd(4, 2, torch.complex64),
}


@pytest.mark.parametrize("name", sorted(NOT_PD))
def test_cholesky_info_of_matrices_that_are_not_positive_definite(name):
    # XLA's factor of such a matrix is unspecified: info (LAPACK's: the order of the
    # first leading minor that is not positive definite) must still be CPU's.
    a = NOT_PD[name]()
    expected = torch.linalg.cholesky_ex(a)
    actual = torch.linalg.cholesky_ex(a.to("tpu"))
    assert expected.info.ne(0).any()
    assert_same(actual.info, expected.info)
    good = expected.info == 0  # the factors of the good matrices in a batch are still right
    if good.any():
        torch.testing.assert_close(actual.L.cpu()[good], expected.L[good])


def _error(fn, a):
    try:
        fn(a)
    except RuntimeError as e:
        return e
    raise AssertionError("no error")


@pytest.mark.parametrize("name", ["order_2_of_2", "batch"])
def test_cholesky_raises_cpus_linalg_error(name):
    a = NOT_PD[name]()
    expected = _error(torch.linalg.cholesky, a)
    with pytest.raises(torch.linalg.LinAlgError) as info:  # ATen checks info (a sync, as on CUDA)
        torch.linalg.cholesky(a.to("tpu"))
    assert str(info.value) == str(expected)


@pytest.mark.parametrize("fn", [lambda a: torch.linalg.cholesky_ex(a, check_errors=True).L, torch.cholesky],
                         ids=["cholesky_ex_check_errors", "cholesky"])
def test_cholesky_check_errors_raise_cpus_text(fn):
    # Checked on the device (check.h): a RuntimeError, which LinAlgError is too, with
    # CPU's text, at the op in debug mode and at the next synchronisation otherwise.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.cholesky's deprecation
        expected = _error(fn, NOT_PD["order_4"]())
        with pytest.raises(RuntimeError) as info:
            fn(NOT_PD["order_4"]().to("tpu")).cpu()
        assert str(expected) in str(info.value)
        torchtpu.synchronize()  # reported once
        check(fn, _spd())


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("unit", [False, True])
def test_solve_triangular(upper, left, unit):
    a = torch.randn(2, 4, 4) + 4 * torch.eye(4)  # the other triangle is ignored
    b = torch.randn(2, 4, 3) if left else torch.randn(2, 3, 4)
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit), a, b)


def test_solve_triangular_broadcast_and_grad():
    a = _tri(3, 1, n=3)
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), a, torch.randn(2, 3, 2))
    check_grad(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), _tri(n=3, upper=True), torch.randn(3, 2))


@pytest.mark.parametrize("upper", [False, True])
@pytest.mark.parametrize("transpose", [False, True])
def test_triangular_solve(upper, transpose):
    a = _tri(2, n=4, upper=upper)
    check(lambda b, a: torch.triangular_solve(b, a, upper=upper, transpose=transpose), torch.randn(2, 4, 2), a)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_solve_inverse(upper):
    f = torch.linalg.cholesky(_spd(2), upper=upper)
    check(lambda b, f: torch.cholesky_solve(b, f, upper=upper), torch.randn(2, 4, 3), f)
    check(lambda f: torch.cholesky_inverse(f, upper=upper), f[0])
    check(lambda f: torch.cholesky_inverse(f, upper=upper), torch.zeros(0, 0))


# ------------------------------------------------------------ complex (Hermitian) matrices

COMPLEX = [torch.complex64, torch.complex128]


def _hpd(dtype, *batch, n=4):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*batch, n, n, dtype=dtype, generator=g)
    return a @ a.mH + n * torch.eye(n, dtype=dtype)


def _complex_tri(dtype, *batch, n=4):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(*batch, n, n, dtype=dtype, generator=g) + n * torch.eye(n, dtype=dtype)).triu()


def _complex_grads(fn, *args):
    """fn's gradients for complex inputs on CPU and tpu (check_grad takes float inputs)."""
    out = []
    for dev in ("cpu", "tpu"):
        xs = [a.to(dev).requires_grad_() for a in args]
        y = fn(*xs)
        out.append(torch.autograd.grad(y, xs, torch.ones_like(y)))
    return out


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("upper", [False, True])
def test_complex_cholesky_and_solves(dtype, upper):
    """A = L L^H, upper gives U = L^H; cholesky_solve/inverse solve with the adjoint;
    triangular_solve's transpose is A^T (not conjugated), as ATen's."""
    a, rhs, t = _hpd(dtype, 2), torch.randn(2, 4, 3, dtype=dtype), _complex_tri(dtype, 2)
    check(lambda a: torch.linalg.cholesky(a, upper=upper), a)
    check(lambda a: torch.linalg.cholesky_ex(a, upper=upper), a)
    factor = torch.linalg.cholesky(a, upper=upper)
    check(lambda r, f: torch.cholesky_solve(r, f, upper=upper), rhs, factor)
    check(lambda f: torch.cholesky_inverse(f, upper=upper), factor[0])
    for left in (True, False):
        b = rhs if left else rhs.mH
        check(lambda t, b: torch.linalg.solve_triangular(t, b, upper=True, left=left), t, b)
        check(lambda t, b: torch.linalg.solve_triangular(t.mH, b, upper=False, left=left, unitriangular=True), t, b)
    for transpose in (False, True):
        check(lambda r, t: torch.triangular_solve(r, t, upper=True, transpose=transpose), rhs, t)


@pytest.mark.parametrize("dtype", COMPLEX)
def test_complex_lu_solves_and_gradients(dtype):
    a, rhs, t = _hpd(dtype, 2), torch.randn(2, 4, 3, dtype=dtype), _complex_tri(dtype, 2)
    for adjoint in (False, True):
        check(lambda a, r: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), r, adjoint=adjoint), a, rhs)
    check(lambda a: torch.linalg.lu(a), a)
    for fn, args in ((torch.linalg.cholesky, (a,)),
                     (lambda t, r: torch.linalg.solve_triangular(t, r, upper=True), (t, rhs)),
                     (lambda a, r: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), r), (a, rhs)),
                     (lambda a, r: torch.cholesky_solve(r, torch.linalg.cholesky(a)), (a, rhs))):
        cpu, tpu = _complex_grads(fn, *args)
        for gt, gc in zip(tpu, cpu):
            assert_same(gt, gc, scale=10 if dtype == torch.complex64 else 1.0)
