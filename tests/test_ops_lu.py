"""LU family vs PyTorch on CPU: lu_factor(_ex), lu_solve, solve, inv, det, slogdet,
logdet — float32 and float64, with batch dims.

Matrices are well conditioned (randn + n*I, or plain randn for pivoting tests
where only the factorisation itself is compared). Inverse/solve/det results are
compared with tolerances loosened by COND_SCALE: they are computed by a different
(unblocked vs LAPACK's blocked) elimination order, so rounding differences are
amplified by the condition number of A (up to ~10 here) and by n accumulated
steps. Measured with seed 0, the worst element used 0.07 of the unscaled dtype
tolerance, so 4 leaves margin for other orders of summation while a wrong pivot
or a wrong solve (errors of order 1) still fails."""
import pytest
import torch

from tpu_testing import LINALG_DTYPES, assert_same, check, check_grad

DTYPES = LINALG_DTYPES  # float64 in make test-slow (tpu_testing)
SHAPES = [(1, 1), (3, 3), (5, 5), (2, 4, 4), (2, 3, 6, 6)]
COND_SCALE = 4.0


def _well(shape, dtype):
    n = shape[-1]
    return (torch.randn(*shape, dtype=torch.float64) + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def _rand(shape, dtype):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_lu_factor(dtype, shape):
    # plain randn: the pivots are non-trivial; distinct |entries| make the pivot choice unique
    check(torch.linalg.lu_factor, _rand(shape, dtype), scale=COND_SCALE)
    check(torch.linalg.lu_factor_ex, _rand(shape, dtype), scale=COND_SCALE)


def test_lu_factor_singular_info():
    a = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    check(torch.linalg.lu_factor_ex, a)
    check(torch.linalg.lu_factor_ex, torch.zeros(2, 3, 3))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_inv(dtype, shape):
    a = _well(shape, dtype)
    check(torch.linalg.inv, a, scale=COND_SCALE)
    check(torch.linalg.inv_ex, a, scale=COND_SCALE)
    check(torch.inverse, a, scale=COND_SCALE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("left", [True, False])
def test_solve(dtype, shape, left):
    a = _well(shape, dtype)
    n = shape[-1]
    bshape = shape[:-1] + (2,) if left else shape[:-2] + (2, n)
    check(lambda x, y: torch.linalg.solve(x, y, left=left), a, _rand(bshape, dtype), scale=COND_SCALE)
    # the internal op too: its LU/pivots are of A itself, contiguous or not
    check(lambda x, y: torch.ops.aten._linalg_solve_ex(x, y, left=left), a, _rand(bshape, dtype), scale=COND_SCALE)
    check(lambda x, y: torch.ops.aten._linalg_solve_ex(x.mT, y, left=left), a, _rand(bshape, dtype),
          scale=COND_SCALE)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solve_vector_and_broadcast(dtype):
    a = _well((2, 4, 4), dtype)
    check(torch.linalg.solve, a, _rand((2, 4), dtype), scale=COND_SCALE)  # batch of vectors
    check(torch.linalg.solve, a[0], _rand((4,), dtype), scale=COND_SCALE)  # one vector
    check(torch.linalg.solve, a[0], _rand((3, 4, 2), dtype), scale=COND_SCALE)  # A broadcast over B
    check(torch.linalg.solve, a, _rand((4, 3), dtype), scale=COND_SCALE)  # B broadcast over A
    # LU/pivots/info keep A's own batch shape when A broadcasts over B
    check(torch.ops.aten._linalg_solve_ex, a[0], _rand((3, 4, 2), dtype), scale=COND_SCALE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_det_slogdet_logdet(dtype, shape):
    a = _well(shape, dtype)
    check(torch.linalg.det, a, scale=COND_SCALE)
    check(torch.det, a, scale=COND_SCALE)
    check(torch.linalg.slogdet, a, scale=COND_SCALE)
    check(torch.logdet, a, scale=COND_SCALE)
    r = _rand(shape, dtype)  # random signs exercise the permutation sign
    check(torch.linalg.det, r, scale=COND_SCALE)
    check(torch.linalg.slogdet, r, scale=COND_SCALE)
    # internal ops: LU/pivots returned as ATen does (of A^T for contiguous A)
    check(torch.ops.aten._linalg_det, r, scale=COND_SCALE)
    check(torch.ops.aten._linalg_slogdet, r.mT, scale=COND_SCALE)


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_empty(shape):
    a = torch.randn(*shape)
    for fn in (torch.linalg.det, torch.linalg.slogdet, torch.linalg.inv, torch.linalg.lu_factor_ex):
        check(fn, a)
    check(torch.linalg.solve, a, torch.randn(*shape[:-1], 2))


def test_det_singular():
    a = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    check(torch.linalg.det, a)
    check(torch.linalg.slogdet, a)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("left,adjoint", [(True, False), (True, True), (False, False), (False, True)])
def test_lu_solve(dtype, shape, left, adjoint):
    a = _well(shape, dtype)
    LU, piv = torch.linalg.lu_factor(_rand(shape, dtype) + 0.5 * a)
    n = shape[-1]
    bshape = shape[:-1] + (3,) if left else shape[:-2] + (3, n)
    check(lambda x, p, y: torch.linalg.lu_solve(x, p, y, left=left, adjoint=adjoint), LU, piv, _rand(bshape, dtype),
          scale=COND_SCALE)


def test_errors():
    t = torch.randn(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match="square"):
        torch.linalg.inv(t)
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        torch.linalg.det(torch.randn(3, device="tpu"))
    with pytest.raises(RuntimeError, match="Expected a floating point or complex tensor as input. Got Long"):
        torch.linalg.inv(torch.ones(2, 2, dtype=torch.int64, device="tpu"))


RECT = [(5, 3), (3, 5), (2, 4, 4), (2, 1, 6, 2), (0, 3), (3, 0)]


@pytest.mark.parametrize("shape", RECT)
def test_lu_rectangular_and_unpack(shape):
    # getrf on m x n: min(m, n) pivots; lu_unpack/linalg.lu give A = P L U
    a = _rand(shape, torch.float64)
    check(torch.linalg.lu_factor, a)
    lu, piv = torch.linalg.lu_factor(a)
    check(torch.lu_unpack, lu, piv)
    for unpack_data, unpack_pivots in ((False, True), (True, False)):  # the other part empty
        check(lambda x, p: torch.lu_unpack(x, p, unpack_data, unpack_pivots), lu, piv)
    check(torch.linalg.lu, a)
    if a.numel():  # gradients through L and U (PyTorch's linalg_lu_backward on tpu ops)
        check_grad(lambda x: torch.linalg.lu(x)[1].sum(-2) + torch.linalg.lu(x)[2].sum(-1).sum(-1, keepdim=True), a)
