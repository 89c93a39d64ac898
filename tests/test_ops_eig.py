"""The general eigendecomposition (torch.linalg.eig / eigvals) and the complex
linear algebra its backward needs (complex mm / bmm / addmm / mv / dot / vdot,
conjugate and negative views reaching them, complex LU, solve, inverse,
lu_solve, sgn), vs PyTorch on CPU.

eig follows LAPACK's dgeev (Hessenberg reduction, dlahqr's double-shift QR,
dlanv2), so eigenvalues usually come in CPU's order, but not always: the order
is unspecified (PyTorch's docs say so), and CPU balances the matrix first and
runs another QR variant from 76 rows. So each tpu eigenvalue is matched to the
nearest CPU one (distinct eigenvalues: a permutation), and eigenvectors, unique
up to a complex phase, are compared by |V| in that matching; also checked: the
residual A V - V diag(w), norms of 1, and dgeev's conventions (a real
eigenvalue is exactly real with a real vector, a complex pair is exactly
conjugate with conjugate vectors, positive imaginary part first). Eigenvalues of
a non-normal matrix move by up to cond * eps, so EIG_SCALE = 50 relative to
max |A| (measured: float32 8x8 random matrices differ from CPU by ~2.6e-6 x
max |A|)."""
import pytest
import torch

from tpu_testing import LINALG_CDTYPES, LINALG_DTYPES, assert_raises_like, assert_same, check, tol

DTYPES = LINALG_DTYPES  # float64 in make test-slow (tpu_testing)
EIG_SCALE = 50.0
SHAPES = [(1, 1), (2, 2), (5, 5), (2, 3, 6, 6), (16, 16), (33, 33)]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _eig_tol(A):
    t = tol(A.dtype, EIG_SCALE)  # complex dtypes: their parts' tolerance
    return dict(rtol=0.0, atol=t["atol"] * max(1.0, A.abs().max().item()))


def _match(w, w_c, A, distinct):
    """Index of the nearest CPU eigenvalue for each tpu one (batch flattened),
    after checking the two spectra agree both ways within the tolerance."""
    n = w.shape[-1]
    w, w_c = w.cpu().reshape(-1, n), w_c.reshape(-1, n)
    d = (w.unsqueeze(-1) - w_c.unsqueeze(-2)).abs()  # (batch, tpu, cpu)
    atol = _eig_tol(A)["atol"]
    assert d.amin(-1).max() <= atol and d.amin(-2).max() <= atol, f"spectra differ: {w} vs {w_c}"
    p = d.argmin(-1)
    if distinct:
        assert (p.sort(-1)[0] == torch.arange(n)).all(), "two eigenvalues matched one CPU eigenvalue"
    return p


def _real(dtype):
    return {torch.complex64: torch.float32, torch.complex128: torch.float64}.get(dtype, dtype)


def _compare_with_cpu(A):
    """eig on tpu vs CPU for distinct eigenvalues: values by nearest match, |V| in
    that matching, and the decomposition's own checks. Returns (w, V) on tpu."""
    w_c, V_c = torch.linalg.eig(A)
    w, V = torch.linalg.eig(A.to("tpu"))
    p = _match(w, w_c, A, distinct=True)
    n = A.shape[-1]
    Vc = torch.gather(V_c.abs().reshape(-1, n, n), 2, p.unsqueeze(1).expand(-1, n, -1))
    torch.testing.assert_close(V.cpu().abs().reshape(-1, n, n), Vc, **tol(A.dtype, EIG_SCALE * 20))
    _check_decomposition(A, w, V)
    return w, V


def _check_grad_like_cpu(loss, A, scale):
    """d loss(X)/dX at X = A on tpu vs CPU; loss(X, dev) builds a scalar."""
    grads = []
    for dev in ["cpu", "tpu"]:
        X = A.detach().to(dev).requires_grad_()
        loss(X, dev).backward()
        grads.append(X.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], **tol(A.dtype, scale))


def _check_decomposition(A, w, V):
    """A V == V diag(w), columns of norm 1, dgeev's real/conjugate conventions
    (zgeev's for complex A: the largest component of each vector real)."""
    w, V = w.cpu(), V.cpu()
    assert w.dtype == V.dtype == (torch.complex64 if _real(A.dtype) == torch.float32 else torch.complex128)
    At = A.to(V.dtype)
    t = _eig_tol(A)
    torch.testing.assert_close(At @ V, V * w.unsqueeze(-2), **t)
    rt = _real(A.dtype)
    torch.testing.assert_close(V.abs().pow(2).sum(-2).sqrt(), torch.ones(w.shape, dtype=rt), **tol(rt, 10))
    if A.is_complex():
        big = V.abs().argmax(-2, keepdim=True)
        assert (torch.gather(V.imag, -2, big) == 0).all() and (torch.gather(V.real, -2, big) > 0).all()
        return
    real = w.imag == 0
    assert (V.imag[real.unsqueeze(-2).expand_as(V)] == 0).all(), "a real eigenvalue's vector is not real"
    pos = (w.imag > 0).nonzero()
    for idx in pos.tolist():  # the pair's second member follows, exactly conjugate
        *bt, j = idx
        assert torch.equal(w[(*bt, j + 1)], w[(*bt, j)].conj().resolve_conj())
        assert torch.equal(V[(*bt, slice(None), j + 1)], V[(*bt, slice(None), j)].conj().resolve_conj())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_eig_random(dtype, shape):
    A = torch.randn(shape, dtype=dtype)
    w, V = _compare_with_cpu(A)
    if len(shape) > 2:  # the values-only program (one shape: each costs a compile)
        assert torch.equal(torch.linalg.eigvals(A.to("tpu")).cpu(), w.cpu())


def _structured():
    Q, _ = torch.linalg.qr(torch.randn(6, 6, dtype=torch.float64))
    S = torch.randn(7, 7, dtype=torch.float64)
    return {
        "upper_triangular": torch.randn(6, 6, dtype=torch.float64).triu(),
        "diagonal": torch.diag(torch.tensor([3.0, 1.0, 2.0, 1.0], dtype=torch.float64)),
        "identity": torch.eye(5, dtype=torch.float64),
        "zeros": torch.zeros(4, 4, dtype=torch.float64),
        "jordan": torch.tensor([[2.0, 1, 0], [0, 2, 1], [0, 0, 2]], dtype=torch.float64),
        "orthogonal": Q,
        "rotation": torch.tensor([[0.0, -1], [1, 0]], dtype=torch.float64),
        "cyclic": torch.eye(5, dtype=torch.float64)[[1, 2, 3, 4, 0]],
        "symmetric": S + S.T,
        "companion": torch.tensor([[0.0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [-6, 11, -6, 0]],
                                  dtype=torch.float64).T.contiguous(),
        "scaled_up": torch.randn(6, 6, dtype=torch.float64) * 1e8,
        "scaled_down": torch.randn(6, 6, dtype=torch.float64) * 1e-8,
        "rank_one": torch.outer(torch.randn(6, dtype=torch.float64), torch.randn(6, dtype=torch.float64)),
        "lower_triangular": torch.randn(6, 6, dtype=torch.float64).tril(),
    }


# float32 for a few, in make test-slow: the lowering is the same, only the dtype differs
STRUCTURED = [(name, torch.float64) for name in _structured()] + [
    pytest.param(name, torch.float32, marks=pytest.mark.slow)
    for name in ["jordan", "rotation", "symmetric", "scaled_up", "lower_triangular"]]


@pytest.mark.parametrize("name,dtype", STRUCTURED)
def test_eig_structured(name, dtype):
    A = _structured()[name].to(dtype)
    w_c = torch.linalg.eigvals(A)
    w, V = torch.linalg.eig(A.to("tpu"))
    _check_decomposition(A, w, V)
    _match(w, w_c, A, distinct=False)


@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_real_and_conjugate(dtype):
    S = torch.randn(9, 9, dtype=dtype)
    w = torch.linalg.eigvals((S + S.T).to("tpu")).cpu()
    assert (w.imag == 0).all()  # a symmetric matrix: every eigenvalue exactly real
    R = torch.tensor([[0.0, -2.0], [2.0, 0.0]], dtype=dtype)
    w = torch.linalg.eigvals(R.to("tpu")).cpu()
    assert w.tolist() == torch.linalg.eigvals(R).tolist()  # dlanv2's pair, positive imaginary part first
    assert w[0].imag > 0 and torch.equal(w[1], w[0].conj().resolve_conj())


@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_balancing(dtype):
    # rows and columns scaled over 12 orders of magnitude: dgebal's scaling brings
    # the error down to the unscaled matrix's, relative to each eigenvalue
    D = torch.diag(torch.logspace(-6, 6, 6, dtype=torch.float64))
    A = (D @ torch.randn(6, 6, dtype=torch.float64) @ torch.linalg.inv(D)).to(dtype)
    w = torch.linalg.eigvals(A.to("tpu")).cpu()
    w64 = torch.linalg.eigvals(A.double())
    torch.testing.assert_close(w.to(w64.dtype), w64, rtol=0, atol=tol(dtype, EIG_SCALE)["atol"] * w64.abs().max().item())
    # a lower triangular matrix: the exchanges isolate every eigenvalue, in CPU's order
    L = torch.randn(5, 5, dtype=dtype).tril()
    assert torch.equal(torch.linalg.eigvals(L.to("tpu")).cpu(), torch.linalg.eigvals(L))


def test_eig_large_matrix_residual():
    # from 76 rows LAPACK runs another algorithm (dlaqr0), so only the decomposition is checked
    A = torch.randn(2, 90, 90, dtype=torch.float64)
    w, V = torch.linalg.eig(A.to("tpu"))
    _check_decomposition(A, w, V)
    _match(w, torch.linalg.eigvals(A), A, distinct=True)


def test_eig_empty_and_out():
    for shape in [(0, 0), (0, 3, 3), (2, 0, 0)]:
        check(torch.linalg.eig, torch.randn(shape))
        check(torch.linalg.eigvals, torch.randn(shape))
    A = torch.randn(2, 5, 5)
    out = torch.empty(2, 5, dtype=torch.complex64, device="tpu")
    torch.linalg.eigvals(A.to("tpu"), out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.eigvals(A), **_eig_tol(A))


def test_eig_errors():
    for bad in [torch.randn(3, 4), torch.randn(3), torch.randn(3, 3, dtype=torch.float16)]:
        try:
            torch.linalg.eig(bad)
        except Exception as e:  # noqa: BLE001
            assert_raises_like(e, torch.linalg.eig, bad)
    A = torch.randn(4, 4)
    A[1, 2] = float("nan")
    with pytest.raises(RuntimeError, match="torch.linalg.eig: input tensor should not contain infs or NaNs"):
        torch.linalg.eig(A.to("tpu"))[0].cpu()
    A[1, 2] = float("inf")
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        torch.linalg.eigvals(A.to("tpu")).cpu()
    Ac = torch.randn(3, 3, dtype=torch.complex64)
    Ac[0, 0] = complex(1, float("nan"))
    with pytest.raises(RuntimeError, match="should not contain infs or NaNs"):
        torch.linalg.eigvals(Ac.to("tpu")).cpu()


@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_backward(dtype):
    A = torch.randn(2, 5, 5, dtype=dtype)
    cot = torch.randn(2, 5, 5, dtype=dtype)

    def loss(X, c):  # phase-invariant: |V| and the eigenvalues
        w, V = torch.linalg.eig(X)
        return (V.abs() * c).sum() + (w.real * c[..., 0]).sum() + (w.imag * c[..., 1]).sum()

    _check_grad_like_cpu(lambda X, dev: loss(X, cot.to(dev)), A, 1e3)
    _check_grad_like_cpu(lambda X, dev: torch.linalg.eigvals(X).abs().sum(), A, 1e2)


@pytest.mark.parametrize("dtype", LINALG_CDTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 5, 5), (16, 16)])
def test_eig_complex(dtype, shape):
    # zgeev's path: zlahqr's single shift on a complex Hessenberg matrix
    A = torch.randn(shape, dtype=dtype)
    _compare_with_cpu(A)


def test_eig_complex_structured_and_backward():
    H = torch.randn(6, 6, dtype=torch.complex128)
    for A in [H + H.mH, H.triu(), H.tril(), torch.randn(5, 5, dtype=torch.float64).to(torch.complex128)]:
        w, V = torch.linalg.eig(A.to("tpu"))
        _check_decomposition(A, w, V)
        _match(w, torch.linalg.eigvals(A), A, distinct=False)
    A = torch.randn(4, 4, dtype=torch.complex128)
    def loss(X, dev):
        w, V = torch.linalg.eig(X)
        return V.abs().sum() + (w * w.conj()).real.sum()

    _check_grad_like_cpu(loss, A, 1e3)


# ----------------------------------------------------- complex linear algebra

CDTYPES = LINALG_CDTYPES  # complex128 in make test-slow


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_products(dtype):
    A, B, C = (torch.randn(3, 4, 4, dtype=dtype) for _ in range(3))
    v = torch.randn(4, dtype=dtype)
    check(torch.mm, A[0], B[0], scale=4)
    check(torch.bmm, A, B, scale=4)
    check(torch.matmul, A, B, scale=4)
    check(torch.addmm, C[0], A[0], B[0], scale=4)
    check(torch.baddbmm, C, A, B, scale=4)
    check(torch.mv, A[0], v, scale=4)
    check(torch.dot, v, A[0, 0], scale=4)
    check(torch.vdot, v, A[0, 0], scale=4)
    # conjugate and negative views reach these ops with their bits set
    check(lambda x, y: x.mH @ y, A, B, scale=4)
    check(lambda x, y: torch.mm(x[0].conj(), y[0]), A, B, scale=4)
    check(lambda x, y: torch.mm(x[0]._neg_view(), y[0]), A.real.contiguous(), B.real.contiguous(), scale=4)
    check(lambda x: torch.sgn(x), torch.tensor([0, 3 + 4j, -2j, 1e-30 + 0j], dtype=dtype))


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_lu_family(dtype):
    A = torch.randn(3, 5, 5, dtype=dtype)
    B = torch.randn(3, 5, 2, dtype=dtype)
    check(torch.linalg.solve, A, B, scale=10)
    check(lambda a, b: torch.linalg.solve(a, b.mT, left=False), A, B, scale=10)
    check(torch.linalg.inv, A, scale=10)
    check(torch.linalg.lu_factor, A, scale=10)  # izamax's pivots: the same LU as LAPACK
    check(torch.linalg.lu, A, scale=10)
    for left in [True, False]:
        for adjoint in [False, True]:
            rhs = B if left else B.mT
            check(lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, left=left, adjoint=adjoint),
                  A, rhs, scale=10)


@pytest.mark.parametrize("dtype", CDTYPES)
def test_complex_det_slogdet(dtype):
    A = torch.randn(3, 4, 4, dtype=dtype)
    check(torch.linalg.det, A, scale=10)
    check(torch.linalg.slogdet, A, scale=10)  # sign complex, logabsdet real
    check(lambda a: a == a[0], A)  # eq / ne on complex, as det's backward uses them
    check(lambda a: a != 0, A)
    _check_grad_like_cpu(lambda X, dev: torch.linalg.det(X).abs().sum(), A, 100)
    # slogdet's backward multiplies by a complex Python scalar (a wrapped complex number)
    def slogdet_loss(X, dev):
        sign, logabsdet = torch.linalg.slogdet(X)
        return (sign.real + sign.imag + logabsdet).sum()

    _check_grad_like_cpu(slogdet_loss, A, 100)


def test_complex_solve_backward():
    A = torch.randn(4, 4, dtype=torch.complex128)
    B = torch.randn(4, 2, dtype=torch.complex128)
    _check_grad_like_cpu(lambda X, dev: torch.linalg.solve(X, B.to(dev)).abs().sum(), A, 10)
