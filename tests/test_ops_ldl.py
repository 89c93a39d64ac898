"""torch.linalg.ldl_factor(_ex) and ldl_solve vs PyTorch on CPU (LAPACK sytrf/sytrs),
float32 and float64, with batch dims.

Inputs are symmetric *indefinite* (randn + randn^T), so Bunch-Kaufman takes 1x1
pivots with and without row exchanges and 2x2 blocks; pivots and info are compared
exactly (they are LAPACK's choices, not rounding), LD and solutions with the dtype's
tolerance scaled by SCALE: an indefinite factorisation grows its entries (element
growth up to ~2.57^n in theory, a few units here), and the solve amplifies rounding
by A's condition number. Measured with seed 0: LD within 2.4e-6 and solutions
within 1.5e-6 (float32) at n <= 9, so 4x the float32 tolerance leaves margin while
a wrong pivot or a wrong block (errors of order 1) fails."""
import pytest
import torch

import torchtpu
from tpu_testing import LINALG_DTYPES, assert_same, check, check_like_cpu

DTYPES = LINALG_DTYPES  # float64 in make test-slow (tpu_testing)
SHAPES = [(1, 1), (2, 2), (3, 3), (5, 5), (4, 6, 6), (2, 3, 9, 9)]
SCALE = 4.0


def _sym(shape, dtype):
    a = torch.randn(*shape, dtype=torch.float64)
    return (a + a.mT).to(dtype)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _factor_same(A, **kw):
    LDc, pc, ic = torch.linalg.ldl_factor_ex(A, **kw)
    LDt, pt, it = torch.linalg.ldl_factor_ex(A.to("tpu"), **kw)
    assert pt.dtype == torch.int32 and it.dtype == torch.int32
    assert torch.equal(pt.cpu(), pc), f"pivots {pt.cpu().tolist()} != {pc.tolist()}"
    assert torch.equal(it.cpu(), ic)
    assert_same(LDt, LDc, scale=SCALE)
    return pc


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_ldl_factor_ex(dtype, shape):
    _factor_same(_sym(shape, dtype))


def test_ldl_factor_takes_2x2_blocks_and_exchanges():
    # the seed's batch exercises every branch: 2x2 blocks (negative pivots) and
    # 1x1 pivots with an exchange (a positive pivot that is not the row's own index)
    piv = _factor_same(_sym((8, 7, 7), torch.float32))
    own = torch.arange(1, 8, dtype=torch.int32)
    assert (piv < 0).any() and ((piv > 0) & (piv != own)).any()
    # a zero diagonal forces a 2x2 block at once
    piv = _factor_same(torch.tensor([[0.0, 1, 2], [1, 0, 3], [2, 3, 0]]))
    assert piv.tolist() == [-3, -3, 3]


def test_ldl_factor_large_blocked_on_cpu():
    # n > 64: LAPACK runs its blocked panel code (dlasyf); its pivot choices are the
    # unblocked algorithm's
    _factor_same(_sym((2, 70, 70), torch.float64))


def test_ldl_factor_reads_the_lower_triangle_only():
    A = _sym((3, 5, 5), torch.float32)
    A = A + torch.triu(torch.randn(3, 5, 5), 1) * 100  # garbage above the diagonal
    _factor_same(A)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ldl_factor_hermitian_flag_on_real_input(dtype):
    _factor_same(_sym((2, 5, 5), dtype), hermitian=True)


def test_ldl_factor_singular_info():
    _factor_same(torch.zeros(3, 3))
    A = torch.tensor([[1.0, 1, 0], [1, 1, 0], [0, 0, 0]])  # D's second pivot is 0
    _factor_same(A)
    _factor_same(torch.stack([A, torch.eye(3), torch.zeros(3, 3)]))


def test_ldl_factor_check_errors_raises():
    # a device-side check: raised at the next sync (debug mode: at the op itself)
    with pytest.raises(RuntimeError, match="ldl_factor_ex.*pivot 1 is zero"):
        LD, piv, info = torch.linalg.ldl_factor_ex(torch.zeros(2, 2, device="tpu"), check_errors=True)
        info.cpu()
        torchtpu.synchronize()
    # the error is consumed: the device is usable again
    assert torch.linalg.ldl_factor_ex(torch.eye(2, device="tpu"))[2].item() == 0


def test_ldl_factor_composite():
    check(torch.linalg.ldl_factor, _sym((2, 4, 4), torch.float32), scale=SCALE)


@pytest.mark.parametrize("shape", [(0, 0), (0, 2, 2), (3, 0, 0)])
def test_ldl_empty(shape):
    A = torch.zeros(shape)
    _factor_same(A)
    LD, piv, _ = torch.linalg.ldl_factor_ex(A)
    check(torch.linalg.ldl_solve, LD, piv, torch.zeros(*shape[:-1], 2))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_ldl_solve(dtype, shape):
    A = _sym(shape, dtype)
    LD, piv, _ = torch.linalg.ldl_factor_ex(A)
    B = torch.randn(*shape[:-1], 3, dtype=dtype)
    X, _ = check(torch.linalg.ldl_solve, LD, piv, B, scale=SCALE)
    # and it solves A X = B (in float64, relative to the sizes involved)
    A64, X64 = A.double(), X.cpu().double()
    res = (A64 @ X64 - B.double()).abs().max()
    assert res <= 1e-4 * (A64.abs().max() * X64.abs().max() * shape[-1] + 1)


def test_ldl_solve_broadcasts_batch_dims():
    A = _sym((3, 4, 4), torch.float32)
    LD, piv, _ = torch.linalg.ldl_factor_ex(A)
    check(torch.linalg.ldl_solve, LD, piv, torch.randn(4, 2), scale=SCALE)
    LD1, piv1, _ = torch.linalg.ldl_factor_ex(A[0])
    check(torch.linalg.ldl_solve, LD1, piv1, torch.randn(2, 4, 2), scale=SCALE)
    check(torch.linalg.ldl_solve, LD, piv.long(), torch.randn(3, 4, 1), scale=SCALE)  # int64 pivots


def test_ldl_errors_like_cpu():
    A = _sym((3, 3), torch.float32)
    LD, piv, _ = torch.linalg.ldl_factor_ex(A)
    check_like_cpu(torch.linalg.ldl_factor_ex, torch.ones(2, 3))
    check_like_cpu(torch.linalg.ldl_factor_ex, torch.ones(3))
    check_like_cpu(torch.linalg.ldl_factor_ex, torch.ones(2, 2, dtype=torch.int64))
    check_like_cpu(torch.linalg.ldl_factor_ex, torch.ones(2, 2, dtype=torch.float16))
    check_like_cpu(torch.linalg.ldl_solve, torch.ones(3), piv, torch.ones(3, 1))
    check_like_cpu(torch.linalg.ldl_solve, torch.ones(3, 2), piv, torch.ones(3, 1))
    check_like_cpu(torch.linalg.ldl_solve, LD, piv[:2], torch.ones(3, 1))
    check_like_cpu(torch.linalg.ldl_solve, LD, piv, torch.ones(3))
    check_like_cpu(torch.linalg.ldl_solve, LD, piv, torch.ones(4, 2))
    check_like_cpu(torch.linalg.ldl_solve, LD, piv, torch.ones(3, 2, dtype=torch.float64))


def test_ldl_in_compiled_graph():
    # the same lowerings inside one torch.compile program
    def f(A, B):
        LD, piv, _ = torch.linalg.ldl_factor_ex(A)
        return torch.linalg.ldl_solve(LD, piv, B) * 2

    A, B = _sym((3, 5, 5), torch.float32), torch.randn(3, 5, 2)
    out = torch.compile(f, backend="tpu")(A.to("tpu"), B.to("tpu"))
    assert_same(out, f(A, B), scale=SCALE)
