"""linalg family (runtime/src/ops/linalg.c) vs PyTorch on CPU: Cholesky and
triangular solves on well-conditioned float32 inputs."""
import pytest
import torch
import torchtpu  # noqa: F401

from tpu_testing import check, check_grad


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
