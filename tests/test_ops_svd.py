"""SVD (_linalg_svd: linalg.svd, svdvals, torch.svd and the composites on it:
pinv, matrix_rank, cond, norm/matrix_norm with ord 2, -2, 'nuc') and
linalg_matrix_exp vs PyTorch on CPU, float32 and float64 (matrix_exp also complex), with batch dims and
0-sized dims; gradients through PyTorch's own formulas.

Singular vectors are not unique (signs; any basis of a repeated singular
value's space), so factors are checked through invariants against CPU float64:
S, the reconstruction U diag(S) Vh = A, orthogonality of U and Vh, and for
well-separated singular values the projectors u_i v_i^T (the gap includes the
distance to 0 when m != n: the extra dimensions of the longer side count as 0).

Tolerances, relative to ||A||_2 = S_max (a backward-stable SVD perturbs A by
p(n) eps ||A||_2): REL[float32] = 2e-5 (~170 ulps: Jacobi applies ~n rotations
per sweep and ~10 sweeps to every column; the 64 x 128 x 128 batch measured
5e-6), REL[float64] = 1e-12. A projector u_i v_i^T moves by about
eps ||A|| / gap_i (Wedin), so it is compared with 100 * REL / (gap_i / S_max)
where that is below 0.1. Orthogonality: 100 float32 ulps / 1e-12.

matrix_exp: exp(A) is conditioned like ||A||, and each of the s squarings
doubles the relative error, so results are compared normwise with
REL_EXP * max(1, ||A||_1) * max|exp(A)| (float32 measured <= 4e-6 at ||A||_1 = 50,
float64 <= 6e-14). float16/bfloat16 are computed in float32 (CPU's float16 kernel
returns NaN here) and compared with the float64 result in their own tolerance."""
import pytest
import torch

from tpu_testing import LINALG_DTYPES, assert_raises_like, assert_same, check, check_grad

DTYPES = LINALG_DTYPES  # float64 in make test-slow (tpu_testing)
REL = {torch.float32: 2e-5, torch.float64: 1e-12}
ORTH = {torch.float32: 1e-5, torch.float64: 1e-12}
REL_EXP = {torch.float32: 2e-6, torch.float64: 1e-14}


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _randn(shape, dtype):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def _with_singular_values(shape, s):
    """Random orthogonal factors around the given singular values (float64)."""
    m, n = shape[-2:]
    k = min(m, n)
    q1, _ = torch.linalg.qr(torch.randn(*shape[:-2], m, m, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(*shape[:-2], n, n, dtype=torch.float64))
    return (q1[..., :, :k] * s) @ q2[..., :k, :]


def _check_svd(a, full_matrices=False):
    """tpu's svd of a (float32/float64) through its invariants; returns it."""
    dtype = a.dtype
    U, S, Vh = [t.cpu() for t in torch.linalg.svd(a.to("tpu"), full_matrices=full_matrices)]
    Uc, Sc, Vhc = torch.linalg.svd(a, full_matrices=full_matrices)
    assert (U.dtype, S.dtype, Vh.dtype) == (dtype,) * 3
    assert (U.shape, S.shape, Vh.shape) == (Uc.shape, Sc.shape, Vhc.shape)
    a64 = a.double()
    s64 = torch.linalg.svdvals(a64)
    k = S.shape[-1]
    if k == 0:
        return U, S, Vh
    smax = s64[..., :1].clamp_min(1e-300)
    rel = REL[dtype]
    assert ((S.double() - s64).abs() <= rel * smax).all(), f"S {S} vs {s64}"
    assert (S[..., :-1] >= S[..., 1:]).all(), "S not descending"
    rec = (U[..., :, :k].double() * S.double().unsqueeze(-2)) @ Vh[..., :k, :].double()
    assert ((rec - a64).abs() <= rel * smax.unsqueeze(-1)).all(), "U diag(S) Vh != A"
    eye_u = torch.eye(U.shape[-1], dtype=torch.float64)
    eye_v = torch.eye(Vh.shape[-2], dtype=torch.float64)
    assert ((U.double().mT @ U.double() - eye_u).abs() <= ORTH[dtype]).all(), "U not orthogonal"
    assert ((Vh.double() @ Vh.double().mT - eye_v).abs() <= ORTH[dtype]).all(), "Vh not orthogonal"
    # projectors u_i v_i^T of well-separated singular values, against float64
    U64, _, Vh64 = torch.linalg.svd(a64, full_matrices=False)
    gap = torch.full_like(s64, float("inf"))
    if k > 1:
        d = (s64[..., 1:] - s64[..., :-1]).abs()
        gap[..., :-1] = torch.minimum(gap[..., :-1], d)
        gap[..., 1:] = torch.minimum(gap[..., 1:], d)
    if a.shape[-1] != a.shape[-2]:  # the thin factor's extra dimensions have singular value 0
        gap = torch.minimum(gap, s64)
    bound = 100 * rel * smax / gap
    for i in range(k):
        p = U[..., :, i:i + 1].double() @ Vh[..., i:i + 1, :].double()
        p64 = U64[..., :, i:i + 1] @ Vh64[..., i:i + 1, :]
        err = (p - p64).abs().amax(dim=(-2, -1))
        b = bound[..., i]
        assert ((err <= b) | (b > 0.1)).all(), f"projector {i}: {err} > {b}"
    return U, S, Vh


# m >= 2n (and wide m <= n/2) go through a QR first: (2, 2, 7, 3), (70, 20) (a
# two-panel QR) and (15, 40).
SHAPES = [(1, 1), (6, 4), (4, 6), (2, 2, 7, 3), (32, 32), (70, 20), (15, 40)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_svd(dtype, shape):
    a = _randn(shape, dtype)
    _check_svd(a, full_matrices=False)
    if len(shape) > 2 or shape[-2] < shape[-1]:  # tall (batched) and wide: U's or Vh's complement
        _check_svd(a, full_matrices=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_ill_conditioned(dtype):
    # cond 1e6 (float64) / 1e3 (float32: cond 1e6 leaves S_min below its resolution)
    lo = -6 if dtype == torch.float64 else -3
    a = _with_singular_values((2, 8, 6), torch.logspace(0, lo, 6, dtype=torch.float64)).to(dtype)
    _, S, _ = _check_svd(a)
    if dtype == torch.float64:  # Jacobi keeps the small ones to high relative accuracy here
        s64 = torch.linalg.svdvals(a)
        assert ((S - s64).abs() <= 1e-9 * s64).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_rank_deficient(dtype):
    b = torch.randn(2, 7, 2, dtype=torch.float64)
    c = torch.randn(2, 2, 5, dtype=torch.float64)
    _check_svd((b @ c).to(dtype), True)  # rank 2 of 5: noise-level singular values, U's complement
    z = torch.zeros(3, 4, dtype=dtype)
    z[:, 1] = torch.arange(3, dtype=dtype)  # exactly rank 1: U rebuilt where S = 0
    _check_svd(z, True)
    _check_svd(torch.zeros(2, 3, 4, dtype=dtype))  # all zero: U built from scratch
    mixed = torch.randn(2, 5, 3, dtype=torch.float64)
    mixed[1, :, 2] = 0  # one batch element needs the completion, the other must keep its U
    _check_svd(mixed.to(dtype), True)
    tall = torch.randn(2, 40, 3, dtype=torch.float64) @ torch.randn(2, 3, 9, dtype=torch.float64)
    tall[1, :, 4] = 0
    _check_svd(tall.to(dtype), True)  # through a QR: R's zero rows, U's completion from Q


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_repeated(dtype):
    s = torch.tensor([3.0, 3.0, 3.0, 1.0, 1.0], dtype=torch.float64)
    _check_svd(_with_singular_values((6, 5), s).to(dtype))
    _check_svd(torch.eye(4, dtype=dtype))
    q, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    _check_svd(q.to(dtype), True)


# From 32 columns Jacobi starts from A V0, V0 the eigenvectors of A^T A from
# eigh's tridiagonal stage: an odd count (the padding column's unit vector in
# V0), a tall input below the QR ratio and a wide one (decomposed as A^T).
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 50, 40), (41, 33), (33, 45)])
def test_svd_preconditioned(dtype, shape):
    a = _randn(shape, dtype)
    _check_svd(a, full_matrices=False)
    _check_svd(a, full_matrices=True)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_preconditioned_hard_spectra(dtype):
    # repeated, rank-deficient and graded singular values at 36 columns: A^T A's
    # eigenvectors are poor there (repeated or tiny eigenvalues), and Jacobi
    # must still end orthogonal and exact to the absolute tolerance
    lo = -6 if dtype == torch.float64 else -3
    spectra = [torch.tensor([2.0] * 18 + [1.0] * 18, dtype=torch.float64),
               torch.cat([torch.rand(6, dtype=torch.float64) + 1, torch.zeros(30, dtype=torch.float64)]),
               torch.logspace(0, lo, 36, dtype=torch.float64)]
    a = torch.stack([_with_singular_values((40, 36), s) for s in spectra]).to(dtype)
    _check_svd(a, full_matrices=True)


@pytest.mark.parametrize("shape", [(3, 0), (0, 3), (0, 0), (2, 0, 4), (0, 3, 3), (2, 4, 0)])
@pytest.mark.parametrize("full", [False, True])
def test_svd_empty(shape, full):
    a = torch.randn(*shape)
    check(lambda x: torch.linalg.svd(x, full_matrices=full), a)
    check(torch.linalg.svdvals, a)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svdvals_and_torch_svd(dtype):
    a = _randn((2, 5, 3), dtype)
    check(torch.linalg.svdvals, a, scale=10 if dtype == torch.float32 else 1e4)
    check(torch.linalg.svdvals, a.mT, scale=10 if dtype == torch.float32 else 1e4)
    # compute_uv=False: ATen's empty U and Vh
    out = torch.ops.aten._linalg_svd(a.to("tpu"), compute_uv=False)
    ref = torch.ops.aten._linalg_svd(a, compute_uv=False)
    assert [tuple(t.shape) for t in out] == [tuple(t.shape) for t in ref]
    for some in [True, False]:
        U, S, V = [t.cpu() for t in torch.svd(a.to("tpu"), some=some)]
        Uc, Sc, Vc = torch.svd(a, some=some)
        assert (U.shape, S.shape, V.shape) == (Uc.shape, Sc.shape, Vc.shape)
        rec = (U[..., :, :3] * S.unsqueeze(-2)) @ V.mT
        torch.testing.assert_close(rec.double(), a.double(), rtol=0, atol=REL[dtype] * 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_composites(dtype):
    scale = 10 if dtype == torch.float32 else 1e4  # S to ~REL S_max; float64 checks are 1e-7 * scale
    a = _randn((2, 5, 4), dtype)
    sq = _randn((3, 4, 4), dtype)
    check(torch.linalg.pinv, a, scale=scale)
    check(torch.linalg.matrix_rank, a)
    check(torch.linalg.matrix_rank, (_randn((2, 6, 2), dtype) @ _randn((2, 2, 5), dtype)))  # rank 2
    check(torch.linalg.cond, sq, scale=scale)
    for ord_ in [2, -2, "nuc"]:
        check(lambda x: torch.linalg.norm(x, ord=ord_, dim=(-2, -1)), a, scale=scale)
        check(lambda x: torch.linalg.matrix_norm(x, ord=ord_), a, scale=scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_svd_backward(dtype):
    scale = 100 if dtype == torch.float32 else 1e3
    a = _randn((2, 4, 3), dtype)
    w = _randn((2, 4, 3), dtype)
    check_grad(lambda x: torch.linalg.svdvals(x).pow(2).sum(-1) + torch.linalg.svdvals(x).sum(-1), a, scale=scale)
    # u_i v_i^T does not depend on the signs: a loss through U and Vh
    check_grad(lambda x: (lambda u, s, vh: ((u @ vh) * w.to(x.device)).sum((-2, -1)))(
        *torch.linalg.svd(x, full_matrices=False)), a, scale=scale)
    check_grad(lambda x: torch.linalg.pinv(x).sum(-1), a, scale=scale)
    check_grad(lambda x: torch.linalg.matrix_norm(x, "nuc"), a, scale=scale)


def test_svd_errors():
    for bad in [torch.ones(3, 3, dtype=torch.long), torch.ones(3), torch.ones(3, 3, dtype=torch.half)]:
        try:
            torch.linalg.svd(bad)
        except Exception as e:  # noqa: BLE001  (mirrored on tpu)
            assert_raises_like(e, torch.linalg.svd, bad)
        else:
            pytest.fail("CPU accepted it")
    a = torch.randn(3, 3)
    # non-finite input: LAPACK's refusal (a LinAlgError on CPU, a RuntimeError from the
    # device-side check on tpu, raised at the next sync)
    bad = torch.randn(2, 4, 3)
    bad[1, 2, 0] = float("nan")
    msg = "failed to converge because the input matrix contained non-finite values"
    with pytest.raises(RuntimeError, match=msg):
        torch.linalg.svd(bad)
    with pytest.raises(RuntimeError, match=msg):
        torch.linalg.svdvals(bad.mT.to("tpu")).cpu()
    torch.linalg.svdvals(a.to("tpu")).cpu()  # the error was reported once, not left pending
    with pytest.raises(RuntimeError) as cpu_err:
        torch.linalg.svd(a, driver="gesvd")
    assert_raises_like(cpu_err.value, lambda x: torch.linalg.svd(x, driver="gesvd"), a)


# ------------------------------------------------------------ matrix_exp

def _check_exp(a, dtype):
    """exp(a) on tpu (dtype) against CPU float64, normwise (see the top)."""
    ref = torch.linalg.matrix_exp(a.double())
    got = torch.linalg.matrix_exp(a.to(dtype).to("tpu"))
    assert got.dtype == dtype and got.shape == ref.shape
    if ref.numel() == 0:
        return
    norm1 = a.double().abs().sum(-2).amax(-1).clamp_min(1)[..., None, None]
    big = ref.abs().amax(dim=(-2, -1), keepdim=True)
    err = (got.cpu().double() - ref).abs()
    assert (err <= REL_EXP[dtype] * norm1 * big).all(), f"max err {err.max()}"


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (3, 3), (2, 4, 4), (2, 3, 5, 5), (16, 16), (0, 3, 3), (2, 0, 0)])
@pytest.mark.parametrize("size", [0.1, 1.0, 20.0])
def test_matrix_exp(dtype, shape, size):
    n = max(shape[-1], 1)
    _check_exp(torch.randn(*shape, dtype=torch.float64) * size / n ** 0.5, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_exp_exact(dtype):
    # nilpotent: exp = I + N; a rotation generator (scaled down 2^s times, squared back)
    # and a batch whose elements need different numbers of squarings
    n = torch.tensor([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0], [0.0, 0.0, 0.0]], dtype=dtype)
    check(torch.linalg.matrix_exp, n)
    t = 30.0
    rot = torch.tensor([[0.0, t], [-t, 0.0]], dtype=torch.float64)
    _check_exp(torch.stack([rot, rot / 1000, torch.zeros(2, 2, dtype=torch.float64)]), dtype)
    check(torch.matrix_exp, torch.zeros(2, 4, 4, dtype=dtype))
    check(torch.linalg.matrix_exp, torch.diag(torch.tensor([1.0, -2.0, 0.5], dtype=dtype)))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matrix_exp_half(dtype):
    a = torch.randn(2, 3, 3) * 0.5
    ref = torch.linalg.matrix_exp(a.to(dtype).double()).to(dtype)
    assert_same(torch.linalg.matrix_exp(a.to(dtype).to("tpu")), ref, scale=4)  # one rounding of the inputs' ulp


@pytest.mark.parametrize("dtype", DTYPES)
def test_matrix_exp_backward(dtype):
    # PyTorch's formula: matrix_exp of the block matrix [[A^T, G], [0, A^T]]
    scale = 10 if dtype == torch.float32 else 1.0
    check_grad(torch.linalg.matrix_exp, _randn((2, 3, 3), dtype), scale=scale)
    check_grad(torch.linalg.matrix_exp, _randn((2, 3, 3), dtype) * 3, scale=scale)  # with squarings


COMPLEX_EXP = {torch.complex64: torch.float32, torch.complex128: torch.float64}


@pytest.mark.parametrize("dtype", list(COMPLEX_EXP))
@pytest.mark.parametrize("shape", [(2, 2), (2, 4, 4), (16, 16), (0, 3, 3)])
@pytest.mark.parametrize("size", [0.1, 1.0, 20.0])
def test_matrix_exp_complex(dtype, shape, size):
    """Complex matrices: the same series and squarings, normwise against CPU complex128,
    in the tolerance of the parts' real dtype."""
    a = torch.randn(*shape, dtype=torch.complex128, generator=torch.Generator().manual_seed(0))
    a = a * size / max(shape[-1], 1) ** 0.5
    ref = torch.linalg.matrix_exp(a)
    got = torch.linalg.matrix_exp(a.to(dtype).to("tpu"))
    assert got.dtype == dtype and got.shape == ref.shape
    if ref.numel() == 0:
        return
    norm1 = a.abs().sum(-2).amax(-1).clamp_min(1)[..., None, None]
    big = ref.abs().amax(dim=(-2, -1), keepdim=True)
    err = (got.cpu().to(torch.complex128) - ref).abs()
    assert (err <= 2 * REL_EXP[COMPLEX_EXP[dtype]] * norm1 * big).all(), f"max err {err.max()}"


@pytest.mark.parametrize("dtype", list(COMPLEX_EXP))
def test_matrix_exp_complex_backward(dtype):
    a0 = torch.randn(2, 3, 3, dtype=dtype, generator=torch.Generator().manual_seed(1)) * 2
    cot = torch.randn(2, 3, 3, dtype=dtype, generator=torch.Generator().manual_seed(2))
    grads = []
    for dev in ("cpu", "tpu"):
        a = a0.to(dev).requires_grad_()
        grads.append(torch.autograd.grad(torch.linalg.matrix_exp(a), a, cot.to(dev))[0])
    assert_same(grads[1], grads[0], scale=10 if dtype == torch.complex64 else 1.0)


def test_matrix_exp_errors():
    for bad in [torch.ones(3, 3, dtype=torch.long), torch.ones(3), torch.ones(2, 3)]:
        with pytest.raises(RuntimeError) as cpu_err:
            torch.linalg.matrix_exp(bad)
        assert_raises_like(cpu_err.value, torch.linalg.matrix_exp, bad)
