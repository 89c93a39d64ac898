"""torch.linalg.lstsq on tpu (the SVD's minimum-norm solution) vs PyTorch on CPU
(LAPACK gelsy by default, gels/gelsd/gelss by name): solution, residuals, rank
and singular values per driver, tall/wide/square, vector right-hand sides,
rank-deficient A, gradients. float64 at 1e-7 and float32 at 4x its tolerance
(a different algorithm: Jacobi SVD vs LAPACK's QR/bidiagonalisation; the inputs
are well conditioned, cond < 10, so the difference stays a few ulps)."""
import pytest
import torch

from tpu_testing import assert_same, check, check_grad

SHAPES = [((2, 5, 3), (2, 5, 2)), ((3, 5), (3, 2)), ((4, 4), (4,)), ((2, 6, 3), (2, 6)), ((5, 3), (5, 0))]
# Left out: gels on wide A (the CPU's answer is not the minimum-norm one) and
# gelsd/gelss with an empty right-hand side (PyTorch's CPU raises a oneMKL error).
CASES = [(a, b, d) for a, b in SHAPES for d in (None, "gels", "gelsd", "gelss")
         if not (d == "gels" and a[-2] < a[-1]) and not (d in ("gelsd", "gelss") and b[-1] == 0)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("a_shape,b_shape,driver", CASES, ids=str)
def test_lstsq(a_shape, b_shape, driver, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(*a_shape, dtype=torch.float64, generator=g)
    a = (a + 3 * torch.eye(a_shape[-2], a_shape[-1], dtype=torch.float64)).to(dtype)  # well conditioned
    b = torch.randn(*b_shape, dtype=torch.float64, generator=g).to(dtype)
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver=driver)), a, b, scale=4.0)


def test_lstsq_rank_deficient_and_rcond():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(6, 4, dtype=torch.float64, generator=g)
    a[:, 3] = a[:, 0] - 2 * a[:, 1]  # rank 3: the minimum-norm solution, rank 3
    b = torch.randn(6, 2, dtype=torch.float64, generator=g)
    # The default driver is judged against the SVD's minimum-norm solution, not
    # the CPU's gelsy: on this input the CPU's pivoted QR now and then (about one
    # pytest run in six) decides rank 2 and returns another answer.
    s = torch.linalg.svdvals(a)
    expected_rank = int((s > s[0] * torch.finfo(a.dtype).eps * 6).sum())
    assert expected_rank == 3
    out = torch.linalg.lstsq(a.to("tpu"), b.to("tpu"))
    assert_same(out.solution, torch.linalg.pinv(a) @ b)
    assert out.rank.item() == expected_rank
    check(lambda x, y: tuple(torch.linalg.lstsq(x, y, driver="gelsd")[::2]), a, b)  # solution, rank
    check(lambda x, y: torch.linalg.lstsq(x, y, rcond=0.5, driver="gelsd").rank, a, b)


def test_lstsq_grad():
    g = torch.Generator().manual_seed(2)
    a = torch.randn(2, 6, 3, generator=g) + torch.eye(6, 3)
    b = torch.randn(2, 6, 2, generator=g)
    check_grad(lambda x, y: torch.linalg.lstsq(x, y).solution, a, b, scale=4.0)
