"""QR and eigh families vs PyTorch on CPU: linalg.qr (reduced / complete / r),
geqrf, linalg.householder_product (orgqr), ormqr, linalg.eigh / eigvalsh
(UPLO "L" / "U"), and their backward — float32 and float64, with batch dims.

QR follows LAPACK's geqrf convention (dlarfg: beta = -sign(alpha) * norm, tau = 0
for a column already zero below the diagonal), so for full-rank inputs Q, R, the
compact form and tau are unique and compared with CPU directly. The tpu
factorisation is blocked by 32-column panels with Q applied in WY form (LAPACK
switches to its blocked code only from 128 columns), so rounding differs: results use
COND_SCALE = 4 times the dtype tolerance (measured: the worst element of these
shapes differs by ~1e-6 in float32, 0.1 of the unscaled tolerance). Rank-deficient
inputs have no unique Q: there Q @ R == A, Q^T Q == I and R upper triangular.

Eigenvectors are unique only up to sign (and rotation within repeated
eigenvalues), so eigh is checked through eigenvalues (vs CPU, ascending),
V diag(w) V^T == A, V^T V == I and, for distinct eigenvalues, |V^T V_cpu| == I.
The Jacobi iteration stops at off(A) <= eps * ||A||_F (from 16 rows, after the
tridiagonal stage, at 4 sqrt(n) eps ||A||_F), so eigenvalues carry errors of a
few eps * ||A|| (CPU's tridiagonal QR has the same order): EIG_SCALE = 8
relative to ||A||_2 covers both sides. Eigenvector comparisons use float64
inputs (a gap-independent bound needs well separated eigenvalues, which random
small matrices have in float64 terms) or the invariants above."""
import pytest
import torch

from tpu_testing import LINALG_DTYPES, assert_raises_like, assert_same, check, tol

DTYPES = LINALG_DTYPES  # float64 in make test-slow (tpu_testing)
# (70, 45), (40, 75) and (2, 66, 66) span two or three 32-column panels of the
# blocked factorisation; (40, 75) also has columns right of the last reflector.
QR_SHAPES = [(1, 1), (3, 3), (5, 3), (3, 5), (2, 4, 4), (2, 3, 6, 4), (2, 4, 6), (24, 20), (70, 45), (40, 75),
             (2, 66, 66)]
EIG_SHAPES = [(1, 1), (2, 2), (3, 3), (5, 5), (2, 4, 4), (2, 3, 7, 7), (32, 32)]
COND_SCALE = 4.0
EIG_SCALE = 8.0


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _rand(shape, dtype):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def _sym(shape, dtype):
    x = torch.randn(*shape, dtype=torch.float64)
    return ((x + x.mT) / 2).to(dtype)


# ------------------------------------------------------------------- QR

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", QR_SHAPES)
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr(dtype, shape, mode):
    check(lambda a: torch.linalg.qr(a, mode=mode), _rand(shape, dtype), scale=COND_SCALE)


@pytest.mark.filterwarnings("ignore:torch.qr is deprecated")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", QR_SHAPES)
def test_geqrf_householder_product(dtype, shape):
    a = _rand(shape, dtype)
    check(torch.geqrf, a, scale=COND_SCALE)
    v, tau = torch.geqrf(a)
    if shape[-2] >= shape[-1]:
        check(torch.linalg.householder_product, v, tau, scale=COND_SCALE)
        # fewer reflectors than columns
        check(torch.linalg.householder_product, v, tau[..., : max(shape[-1] - 1, 0)].contiguous(),
              scale=COND_SCALE)
    # torch.qr (deprecated API) goes through linalg_qr as well
    check(torch.qr, a, scale=COND_SCALE)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 5, 5)])
@pytest.mark.parametrize("left", [True, False])
@pytest.mark.parametrize("transpose", [False, True])
def test_ormqr(dtype, shape, left, transpose):
    v, tau = torch.geqrf(_rand(shape, dtype))
    m = shape[-2]
    c = _rand(shape[:-2] + ((m, 2) if left else (3, m)), dtype)
    check(lambda x, t, y: torch.ormqr(x, t, y, left=left, transpose=transpose), v, tau, c, scale=COND_SCALE)


def _check_qr_invariants(a, q, r):
    q, r = q.cpu(), r.cpu()
    k = min(a.shape[-2], a.shape[-1])
    eye = torch.eye(q.shape[-1], dtype=a.dtype)
    t = tol(a.dtype, COND_SCALE)
    torch.testing.assert_close(q @ r, a, **t)
    torch.testing.assert_close(q.mT @ q, eye.expand_as(q.mT @ q), **t)
    assert torch.equal(r, r.triu()), "R is not upper triangular"
    # |diag(R)| is unique even without the sign convention (when A has full rank up to k)
    return k


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_rank_deficient(dtype, mode):
    # rank 2 in a 6 x 4 matrix, a zero column, and a matrix of repeated columns
    lowrank = _rand((6, 2), dtype) @ _rand((2, 4), dtype)
    zcol = _rand((5, 4), dtype)
    zcol[:, 1] = 0
    rep = _rand((4, 1), dtype).expand(4, 5).contiguous()
    for a in (lowrank, zcol, rep, torch.zeros(3, 3, dtype=dtype)):
        q, r = torch.linalg.qr(a.to("tpu"), mode=mode)
        _check_qr_invariants(a, q, r)
    # the first column is nonzero: that column of Q and row of R are still unique
    q, r = torch.linalg.qr(lowrank.to("tpu"), mode=mode)
    qc, rc = torch.linalg.qr(lowrank, mode=mode)
    torch.testing.assert_close(q.cpu()[:, 0], qc[:, 0], **tol(dtype, COND_SCALE))
    torch.testing.assert_close(r.cpu()[0], rc[0], **tol(dtype, COND_SCALE))
    # exactly zero columns below the diagonal give tau = 0, as LAPACK's dlarfg
    check(torch.geqrf, torch.zeros(3, 3, dtype=dtype))
    check(torch.geqrf, torch.eye(4, dtype=dtype))
    # ... also in a later panel, where the WY form must treat the reflector as I
    zlate = _rand((50, 45), dtype)
    zlate[:, 40] = 0
    check(torch.geqrf, zlate, scale=COND_SCALE)
    q, r = torch.linalg.qr(zlate.to("tpu"), mode=mode)
    _check_qr_invariants(zlate, q, r)


def test_qr_ill_conditioned():
    # columns scaled over 8 decades: the factorisation is still backward stable
    a = _rand((6, 5), torch.float64) * torch.logspace(0, -8, 5, dtype=torch.float64)
    q, r = torch.linalg.qr(a.to("tpu"))
    _check_qr_invariants(a, q, r)
    a32 = a.float()
    q, r = torch.linalg.qr(a32.to("tpu"))
    _check_qr_invariants(a32, q, r)


@pytest.mark.parametrize("shape", [(0, 0), (3, 0), (0, 3), (2, 0, 4), (0, 3, 3)])
@pytest.mark.parametrize("mode", ["reduced", "complete", "r"])
def test_qr_empty(shape, mode):
    a = torch.randn(*shape)
    check(lambda x: torch.linalg.qr(x, mode=mode), a)
    check(torch.geqrf, a)


def test_qr_errors():
    for fn, args in [
        (lambda a: torch.linalg.qr(a, mode="x"), (torch.randn(3, 3),)),
        (torch.linalg.qr, (torch.randn(3),)),
        (torch.linalg.qr, (torch.ones(3, 3, dtype=torch.int64),)),
        (torch.geqrf, (torch.randn(3),)),
        (torch.linalg.householder_product, (torch.randn(3, 4), torch.randn(2))),
        (torch.linalg.householder_product, (torch.randn(4, 3), torch.randn(4))),
        (torch.linalg.householder_product, (torch.randn(4, 3), torch.randn(2, dtype=torch.float64))),
    ]:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            assert_raises_like(e, fn, *args)
        else:
            pytest.fail("CPU did not raise")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,mode", [((5, 3), "reduced"), ((2, 4, 4), "reduced"), ((3, 3), "complete"),
                                        ((3, 5), "complete")])
def test_qr_backward(dtype, shape, mode):
    a = _rand(shape, dtype)
    ac, at = a.clone().requires_grad_(), a.to("tpu").requires_grad_()
    qc, rc = torch.linalg.qr(ac, mode=mode)
    qt, rt = torch.linalg.qr(at, mode=mode)
    gq, gr = torch.randn_like(qc), torch.randn_like(rc)
    (gc,) = torch.autograd.grad((qc * gq).sum() + (rc * gr).sum(), ac)
    (gt,) = torch.autograd.grad((qt * gq.to("tpu")).sum() + (rt * gr.to("tpu")).sum(), at)
    assert_same(gt, gc, scale=COND_SCALE * 4)


# ------------------------------------------------------------------ eigh

def _eig_check(a, w, v, w_ref, scale=EIG_SCALE):
    """a: the symmetric matrix the triangle describes (CPU); w, v from tpu."""
    w, v = w.cpu(), v.cpu()
    norm = torch.linalg.matrix_norm(a.double(), ord=2).clamp(min=1).amax().item()
    t = tol(a.dtype, scale)
    atol = t["atol"] * norm
    torch.testing.assert_close(w, w_ref, rtol=0, atol=atol)
    assert bool((w[..., 1:] >= w[..., :-1]).all()), "eigenvalues not ascending"
    n = a.shape[-1]
    torch.testing.assert_close(v @ torch.diag_embed(w) @ v.mT, a, rtol=0, atol=atol)
    eye = torch.eye(n, dtype=a.dtype).expand_as(a)
    torch.testing.assert_close(v.mT @ v, eye, **t)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", EIG_SHAPES)
@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh(dtype, shape, uplo):
    # a non-symmetric input: only the UPLO triangle may be read
    a = _rand(shape, dtype)
    s = a.tril() + a.tril(-1).mT if uplo == "L" else a.triu() + a.triu(1).mT
    w_ref, v_ref = torch.linalg.eigh(a, UPLO=uplo)
    w, v = torch.linalg.eigh(a.to("tpu"), UPLO=uplo)
    assert w.dtype == dtype and v.dtype == dtype and v.shape == a.shape
    _eig_check(s, w, v, w_ref)
    check(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), a, scale=EIG_SCALE * max(shape[-1], 1))
    if dtype == torch.float64:
        # distinct eigenvalues: each eigenvector is unique up to sign
        n = shape[-1]
        proj = (v.cpu().mT @ v_ref).abs()
        torch.testing.assert_close(proj, torch.eye(n, dtype=dtype).expand_as(proj), rtol=0, atol=1e-8)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_repeated_and_ill_conditioned(dtype):
    q, _ = torch.linalg.qr(_rand((6, 6), torch.float64))
    for lam in ([1.0, 1.0, 1.0, 2.0, 3.0, 3.0], [1e-6, 1e-4, 1e-2, 1.0, 1.0, 1e2], [-5.0, 0, 0, 0, 0, 5.0]):
        a = (q @ torch.diag(torch.tensor(lam, dtype=torch.float64)) @ q.T).to(dtype)
        a = (a + a.mT) / 2
        w, v = torch.linalg.eigh(a.to("tpu"))
        _eig_check(a, w, v, torch.linalg.eigvalsh(a))
    # already diagonal (zero sweeps), unsorted diagonal, zero and identity matrices
    for a in (torch.diag(torch.tensor([3.0, -1.0, 2.0, 0.5], dtype=dtype)), torch.zeros(3, 3, dtype=dtype),
              torch.eye(5, dtype=dtype)):
        w, v = check(torch.linalg.eigh, a)[0]
    # huge and tiny magnitudes (the iteration runs on A scaled by max |A|)
    for s in (1e30, 1e-30):
        a = _sym((4, 4), dtype) * s
        w, v = torch.linalg.eigh(a.to("tpu"))
        torch.testing.assert_close(w.cpu() / s, torch.linalg.eigvalsh(a) / s, **tol(dtype, EIG_SCALE * 4))


def _spectrum_batch(n, dtype):
    """Symmetric n x n matrices Q diag(lam) Q^T whose spectra defeat inverse
    iteration in different ways, one per batch element, plus a random one."""
    g = torch.Generator().manual_seed(1)
    q, _ = torch.linalg.qr(torch.randn(n, n, dtype=torch.float64, generator=g))
    third = n // 3
    spectra = [
        torch.tensor([1.0] * third + [2.0] * third + [3.0] * (n - 2 * third), dtype=torch.float64),  # repeated
        torch.cat([torch.zeros(n - 4, dtype=torch.float64), torch.randn(4, dtype=torch.float64, generator=g)]),
        torch.logspace(-6, 2, n, dtype=torch.float64),  # graded
        1 + 1e-6 * torch.randn(n, dtype=torch.float64, generator=g),  # one tight cluster
    ]
    mats = [q @ torch.diag(lam) @ q.T for lam in spectra]
    x = torch.randn(n, n, dtype=torch.float64, generator=g)
    mats.append(x + x.T)
    a = torch.stack(mats)
    return ((a + a.mT) / 2).to(dtype)


# From 16 rows eigh starts from Householder tridiagonalisation, bisection and
# inverse iteration (tridiag.c) and finishes with Jacobi sweeps. These shapes
# cover that path: the smallest size, an odd one (Jacobi's padding of V0), two
# loop panels of the reduction (n > 66) and bisection's padding rows (n not a
# multiple of 32).
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [16, 33, 70])
def test_eigh_tridiagonal_path(dtype, n):
    a = _rand((3, n, n), dtype)
    s = a.tril() + a.tril(-1).mT
    w_ref, v_ref = torch.linalg.eigh(a)
    w, v = torch.linalg.eigh(a.to("tpu"))
    _eig_check(s, w, v, w_ref)
    if dtype == torch.float64:
        proj = (v.cpu().mT @ v_ref).abs()
        torch.testing.assert_close(proj, torch.eye(n, dtype=dtype).expand_as(proj), rtol=0, atol=1e-8)


def test_eigh_tridiagonal_path_wide_panels():
    # past 8 panels of 64 rows the panels widen (their count is compile time)
    a = _sym((530, 530), torch.float32)
    w, v = torch.linalg.eigh(a.to("tpu"))
    _eig_check(a, w, v, torch.linalg.eigvalsh(a))
    _reconstruction_within_10x_cpu(a, w, v)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eigh_tridiagonal_path_hard_spectra(dtype):
    # repeated, low-rank, graded and clustered spectra in one batch with a random
    # matrix: inverse iteration cannot separate the first ones' vectors, so the
    # whole batch takes the QR orthonormalisation and the Jacobi polish
    a = _spectrum_batch(48, dtype)
    w, v = torch.linalg.eigh(a.to("tpu"))
    _eig_check(a, w, v, torch.linalg.eigvalsh(a))
    _reconstruction_within_10x_cpu(a, w, v)
    w_only = torch.linalg.eigvalsh(a.to("tpu"))
    _eig_check(a, w_only, v, torch.linalg.eigvalsh(a))
    # diagonal (T is already diagonal: every pivot of inverse iteration is
    # perturbed), identity and zero matrices
    for a in (torch.diag(torch.linspace(-3, 3, 40, dtype=dtype)), torch.eye(40, dtype=dtype),
              torch.zeros(40, 40, dtype=dtype)):
        w, v = torch.linalg.eigh(a.to("tpu"))
        _eig_check(a, w, v, torch.linalg.eigvalsh(a))
        _reconstruction_within_10x_cpu(a, w, v)


def _reconstruction_within_10x_cpu(a, w, v):
    """max |V diag(w) V^T - A| / ||A||_2 per matrix at most 10 times CPU's (the
    issue's bound), plus sqrt(n) eps where CPU's is exactly 0 (a diagonal input).
    Without the Jacobi polish after tridiag.c, the repeated and low-rank spectra
    miss this by 3x (float32) and 70x (float64)."""
    def err(w, v):
        w, v = w.cpu().double(), v.cpu().double()
        return (v @ torch.diag_embed(w) @ v.mT - a.double()).abs().amax((-2, -1))

    wc, vc = torch.linalg.eigh(a)
    norm = torch.linalg.matrix_norm(a.double(), ord=2).clamp(min=1)
    floor = a.shape[-1] ** 0.5 * torch.finfo(a.dtype).eps
    bound = 10 * err(wc, vc) / norm + floor
    got = err(w, v) / norm
    assert bool((got <= bound).all()), f"reconstruction error {got.tolist()} above {bound.tolist()}"


@pytest.mark.parametrize("shape", [(0, 0), (2, 0, 0), (0, 3, 3)])
def test_eigh_empty(shape):
    a = torch.randn(*shape)
    check(torch.linalg.eigh, a)
    check(torch.linalg.eigvalsh, a)


def test_eigh_errors():
    for fn, args in [
        (torch.linalg.eigh, (torch.randn(3, 4),)),
        (torch.linalg.eigh, (torch.randn(3),)),
        (lambda a: torch.linalg.eigh(a, UPLO="X"), (torch.randn(3, 3),)),
        (torch.linalg.eigh, (torch.ones(3, 3, dtype=torch.int64),)),
        (torch.linalg.eigvalsh, (torch.randn(2, 3),)),
    ]:
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001
            assert_raises_like(e, fn, *args)
        else:
            pytest.fail("CPU did not raise")


@pytest.mark.parametrize("n", [5, 20])
def test_eigh_non_finite(n):
    # LAPACK refuses a NaN or inf in the triangle it reads (CPU: LinAlgError, a
    # RuntimeError; tpu: the device-side check, raised at the next sync); the
    # other triangle is never read, on either side
    a = _sym((2, n, n), torch.float32)
    bad = a.clone()
    bad[1, 3, 1] = float("nan")  # lower triangle: read with UPLO="L"
    with pytest.raises(RuntimeError):
        torch.linalg.eigh(bad)
    msg = "linalg.eigh: The algorithm failed to converge because the input matrix contained non-finite values"
    with pytest.raises(RuntimeError, match=msg):
        torch.linalg.eigh(bad.to("tpu"))[0].cpu()
    with pytest.raises(RuntimeError, match=msg):  # the NaN in the upper triangle, read with UPLO="U"
        torch.linalg.eigvalsh(bad.mT.contiguous().to("tpu"), UPLO="U").cpu()
    # the error was reported once, not left pending; the unread triangle is ignored
    w, v = torch.linalg.eigh(bad.to("tpu"), UPLO="U")
    w_ref = torch.linalg.eigvalsh(bad, UPLO="U")
    s = bad.triu() + bad.triu(1).mT
    _eig_check(s, w, v, w_ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(4, 4), (2, 5, 5), (36, 36)])
def test_eigh_backward(dtype, shape):
    # sign-invariant losses: weighted eigenvalues and squared eigenvector entries
    a = _sym(shape, dtype)
    ww, wv = torch.randn(shape[:-1], dtype=dtype), torch.randn(shape, dtype=dtype)

    def loss(x, dev):
        w, v = torch.linalg.eigh(x)
        return (w * ww.to(dev)).sum() + (v * v * wv.to(dev)).sum()

    ac, at = a.clone().requires_grad_(), a.to("tpu").requires_grad_()
    (gc,) = torch.autograd.grad(loss(ac, "cpu"), ac)
    (gt,) = torch.autograd.grad(loss(at, "tpu"), at)
    # eigenvector gradients divide by eigenvalue gaps: allow for that amplification
    assert_same(gt, gc, scale=EIG_SCALE * 10)
    # eigvalsh's gradient (it computes eigenvectors when a gradient is needed)
    (gc,) = torch.autograd.grad((torch.linalg.eigvalsh(ac) * ww).sum(), ac)
    (gt,) = torch.autograd.grad((torch.linalg.eigvalsh(at) * ww.to("tpu")).sum(), at)
    assert_same(gt, gc, scale=EIG_SCALE)
