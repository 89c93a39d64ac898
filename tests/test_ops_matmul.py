"""Matmul family vs PyTorch on CPU: mm/bmm/addmm & co, dot, cross, the composites
that decompose into them (matmul, linear, einsum, tensordot, outer, kron), and
convolutions forward and backward."""
import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_raises_like, assert_same, check, check_grad, check_like_cpu

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
MM_DTYPES = FLOATS + [torch.int64, torch.int32]


def _rand(*shape, dtype=torch.float32):
    if dtype.is_floating_point:
        return torch.randn(*shape).to(dtype)
    return torch.randint(-5, 6, shape).to(dtype)


def _scale(dtype):
    # half types: f32 accumulation on both sides, but summation order differs,
    # so the final rounding can land one ulp apart
    return 2.0 if dtype in (torch.bfloat16, torch.float16) else 1.0


# ---------------------------------------------------------------- products


@pytest.mark.parametrize("dtype", MM_DTYPES)
def test_mm(dtype):
    a, b = _rand(5, 7, dtype=dtype), _rand(7, 3, dtype=dtype)
    check(torch.mm, a, b, scale=_scale(dtype))
    check(lambda x, y: x.t() @ y.t(), _rand(7, 5, dtype=dtype), _rand(3, 7, dtype=dtype), scale=_scale(dtype))


@pytest.mark.parametrize("dtype", MM_DTYPES)
def test_bmm(dtype):
    check(torch.bmm, _rand(4, 2, 6, dtype=dtype), _rand(4, 6, 3, dtype=dtype), scale=_scale(dtype))
    # non-contiguous batch operand
    check(lambda x, y: torch.bmm(x.transpose(1, 2), y), _rand(4, 6, 2, dtype=dtype), _rand(4, 6, 3, dtype=dtype),
          scale=_scale(dtype))


def test_mm_empty_and_zero_k():
    check(torch.mm, torch.randn(0, 3), torch.randn(3, 4))
    check(torch.mm, torch.randn(2, 0), torch.randn(0, 4))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_addmm(dtype):
    s, a, b = _rand(4, 3, dtype=dtype), _rand(4, 5, dtype=dtype), _rand(5, 3, dtype=dtype)
    check(torch.addmm, s, a, b, scale=_scale(dtype))
    check(lambda s, a, b: torch.addmm(s, a, b, beta=2, alpha=-3), s, a, b, scale=_scale(dtype))
    check(torch.addmm, _rand(3, dtype=dtype), a, b, scale=_scale(dtype))  # broadcast self
    check(lambda s, a, b: s.clone().addmm_(a, b, alpha=2), s, a, b, scale=_scale(dtype))


def test_addmm_beta_zero_ignores_nan():
    s = torch.full((2, 3), float("nan"))
    a, b = torch.randn(2, 4), torch.randn(4, 3)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=0), s, a, b)
    check(lambda s, a, b: torch.addmm(s, a, b, beta=1), s, a, b)  # NaN propagates


def test_addmm_out():
    def fn(s, a, b):
        out = torch.empty(0, device=s.device)
        torch.addmm(s, a, b, out=out)
        return out

    check(fn, torch.randn(2, 3), torch.randn(2, 4), torch.randn(4, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_baddbmm_addbmm(dtype):
    b1, b2 = _rand(3, 2, 4, dtype=dtype), _rand(3, 4, 5, dtype=dtype)
    check(lambda s, x, y: torch.baddbmm(s, x, y, beta=0.5, alpha=2), _rand(3, 2, 5, dtype=dtype), b1, b2,
          scale=_scale(dtype))
    check(lambda s, x, y: torch.addbmm(s, x, y, beta=0.5, alpha=2), _rand(2, 5, dtype=dtype), b1, b2,
          scale=_scale(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64])
def test_mv_addmv_addr_dot(dtype):
    m, v, w = _rand(4, 6, dtype=dtype), _rand(6, dtype=dtype), _rand(4, dtype=dtype)
    sc = _scale(dtype)
    check(torch.mv, m, v, scale=sc)
    check(lambda s, m, v: torch.addmv(s, m, v, beta=2, alpha=0.5 if dtype.is_floating_point else 3), w, m, v,
          scale=sc)
    check(lambda s, x, y: torch.addr(s, x, y, alpha=2), m, w, v, scale=sc)
    check(torch.dot, v, v.flip(0), scale=sc)
    if dtype != torch.float16:
        check(torch.vdot, v, v.flip(0), scale=sc)
    check(torch.outer, w, v, scale=sc)


MATMUL_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3, 4), (4,)),
    ((4,), (2, 4, 3)),
    ((2, 3, 4), (4, 5)),
    ((3, 4), (2, 4, 5)),
    ((2, 3, 4), (2, 4, 5)),
    ((1, 3, 4), (2, 4, 5)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((2, 2, 3, 4), (2, 2, 4, 5)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES)
def test_matmul_broadcasting(sa, sb):
    check(torch.matmul, torch.randn(*sa), torch.randn(*sb))


@pytest.mark.parametrize("sa,sb", [MATMUL_SHAPES[i] for i in (1, 3, 4, 5, 8, 9)])
def test_matmul_grad(sa, sb):
    check_grad(torch.matmul, torch.randn(*sa), torch.randn(*sb))


def test_mm_bmm_addmm_grad():
    check_grad(torch.mm, torch.randn(3, 4), torch.randn(4, 5))
    check_grad(torch.bmm, torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    check_grad(lambda s, a, b: torch.addmm(s, a, b, beta=0.5, alpha=2), torch.randn(5), torch.randn(3, 4),
               torch.randn(4, 5))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_linear(dtype):
    x, w, b = _rand(2, 3, 4, dtype=dtype), _rand(5, 4, dtype=dtype), _rand(5, dtype=dtype)
    check(F.linear, x, w, b, scale=_scale(dtype))
    check(F.linear, x, w, scale=_scale(dtype))
    if dtype == torch.float32:
        check_grad(F.linear, x, w, b)
        check_grad(F.linear, torch.randn(4), w)


# On the CPU plugin, f32 products whose right operand is contracted along its minor
# dimension with rows a multiple of 2 KiB apart get 16 zeros appended to the contraction
# (builder.c, tpu_b_dot_pad_for_target: XLA:CPU's matmul is slow on those strides).
# These are the products that take that path; results and gradients must not change.
def test_products_with_a_padded_contraction():
    # Sums of 512-1024 products of unit normals reach ~30; f32 summation in another
    # order differs by a few 1e-5 (CPU's own result is 2.3e-5 off the float64 one).
    k, s = 512, 8.0
    check(lambda x, w: x @ w.t(), torch.randn(8, k), torch.randn(24, k), scale=s)
    check(lambda x, w: x @ w.t(), torch.randn(2, 2 * k), torch.randn(2, 2 * k), scale=s)
    check(F.linear, torch.randn(2, 3, k), torch.randn(16, k), torch.randn(16), scale=s)
    check(lambda c, x, w: torch.addmm(c, x, w.t(), beta=0.5, alpha=2), torch.randn(16), torch.randn(6, k),
          torch.randn(16, k), scale=s)
    check(lambda q, kk: q @ kk.transpose(1, 2), torch.randn(2, 5, k), torch.randn(2, 7, k), scale=s)
    check(lambda q, kk: q @ kk.transpose(-1, -2), torch.randn(2, 2, 3, k), torch.randn(2, 4, k), scale=s)
    check(lambda x, w: x.t() @ w.t(), torch.randn(k, 6), torch.randn(9, k), scale=s)
    check_grad(F.linear, torch.randn(4, 6, k), torch.randn(12, k), torch.randn(12), scale=s)
    check_grad(lambda q, kk: q @ kk.transpose(1, 2), torch.randn(2, 5, k), torch.randn(2, 7, k), scale=s)
    # not padded, the same answers: a matrix-vector product, a contraction on the
    # major dimension, bf16
    check(lambda x, w: x @ w.t(), torch.randn(1, k), torch.randn(24, k), scale=s)
    check(torch.mv, torch.randn(24, k), torch.randn(k), scale=s)
    check(torch.mm, torch.randn(8, k), torch.randn(k, 24), scale=s)
    check(lambda x, w: x @ w.t(), torch.randn(8, k).bfloat16(), torch.randn(24, k).bfloat16(), scale=2.0)


def test_padded_contraction_only_on_the_cpu_plugin(tmp_path, monkeypatch):
    # The test above proves the padded path only if products take it: read the
    # module of a product of a fresh shape. Other plugins get the plain product.
    import torchtpu
    monkeypatch.setenv("TORCHTPU_DUMP_DIR", str(tmp_path))
    x, w = torch.randn(3, 1536, device="tpu"), torch.randn(5, 1536, device="tpu")
    (x @ w.t()).cpu()
    text = "".join(p.read_text() for p in tmp_path.glob("*_mm.mlir"))
    assert "stablehlo.dot_general" in text
    padded = "tensor<3x1552xf32>" in text and "tensor<5x1552xf32>" in text
    assert padded == (torchtpu._C.platform_name() == "cpu"), text


def test_einsum_tensordot_kron():
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    check(lambda x, y: torch.einsum("bij,bjk->bik", x, y), a, b)
    check(lambda x, y: torch.einsum("bij,bjk->ik", x, y), a, b)
    check(lambda x: torch.einsum("bii->b", x), torch.randn(2, 3, 3))
    check(lambda x, y: torch.einsum("i,j->ij", x, y), torch.randn(3), torch.randn(4))
    check_grad(lambda x, y: torch.einsum("bij,bjk->bik", x, y), a, b)
    check(lambda x, y: torch.tensordot(x, y, dims=2), torch.randn(2, 3, 4), torch.randn(3, 4, 5))
    check(lambda x, y: torch.tensordot(x, y, dims=([0], [1])), torch.randn(3, 4), torch.randn(5, 3))
    check(torch.kron, torch.randn(2, 2), torch.randn(2, 3))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_cross(dtype):
    a, b = _rand(4, 3, dtype=dtype), _rand(4, 3, dtype=dtype)
    check(torch.linalg.cross, a, b)
    check(lambda x, y: torch.cross(x, y, dim=0), _rand(3, 2, dtype=dtype), _rand(3, 2, dtype=dtype))
    check(torch.linalg.cross, _rand(1, 3, dtype=dtype), b)  # broadcasting
    with pytest.raises(RuntimeError, match="must have length 3"):
        torch.linalg.cross(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu"))


# ---------------------------------------------------------------- errors


def test_errors():
    t = lambda *s, dtype=torch.float32: torch.ones(*s, device="tpu", dtype=dtype)  # noqa: E731
    with pytest.raises(RuntimeError, match=r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"):
        torch.mm(t(2, 3), t(4, 5))
    with pytest.raises(RuntimeError, match=r"expected m1 and m2 to have the same dtype, but got: float != c10::BFloat16"):
        torch.mm(t(2, 3), t(3, 5, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="self must be a matrix"):
        torch.mm(t(3), t(3, 2))
    with pytest.raises(RuntimeError, match="batch1 must be a 3D tensor"):
        torch.bmm(t(2, 3), t(2, 3, 4))
    with pytest.raises(RuntimeError, match="Expected size for first two dimensions of batch2"):
        torch.bmm(t(2, 2, 3), t(2, 4, 5))
    with pytest.raises(RuntimeError, match="1D tensors expected"):
        torch.dot(t(2, 2), t(2))
    with pytest.raises(RuntimeError, match="inconsistent tensor size"):
        torch.dot(t(2), t(3))
    # the CPU's dtype error (its first line), not a missing lowering
    with pytest.raises(NotImplementedError) as cpu:
        torch.mm(torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool))
    assert_raises_like(cpu.value, torch.mm, torch.ones(2, 2, dtype=torch.bool), torch.ones(2, 2, dtype=torch.bool))
    with pytest.raises(RuntimeError, match="expected input.* to have 3 channels"):
        F.conv2d(t(1, 5, 4, 4), t(2, 3, 3, 3))


# ---------------------------------------------------------------- convolution

CONV2D = [
    dict(),
    dict(stride=2, padding=1),
    dict(padding=2, dilation=2),
    dict(stride=(2, 1), padding=(0, 1), groups=2),
    dict(padding="same", dilation=(1, 2)),
    dict(padding="valid", groups=4),
]


@pytest.mark.parametrize("kw", CONV2D)
def test_conv2d_grad(kw):
    g = kw.get("groups", 1)
    check_grad(lambda x, w, b: F.conv2d(x, w, b, **kw), torch.randn(2, 4, 7, 8), torch.randn(6 if g != 4 else 8, 4 // g, 3, 3),
               torch.randn(6 if g != 4 else 8))


@pytest.mark.parametrize("kw", [dict(), dict(stride=3, padding=2, dilation=2), dict(padding="same", groups=2)])
def test_conv1d_grad(kw):
    g = kw.get("groups", 1)
    check_grad(lambda x, w: F.conv1d(x, w, **kw), torch.randn(2, 4, 11), torch.randn(6, 4 // g, 4))


def test_conv3d_grad():
    check_grad(lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1), torch.randn(1, 2, 5, 6, 4),
               torch.randn(3, 2, 3, 3, 2), torch.randn(3))


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(0, 2), dilation=(2, 1), groups=2, output_padding=(1, 0)),
    dict(stride=2, padding=3),  # padding larger than the dilated kernel edge: a crop
    # output_padding >= stride (allowed below dilation): the forward conv of dy
    # overshoots the input and grad_input must be cropped (OpInfo sample).
    dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2, dilation=(4, 4)),
])
def test_conv_transpose2d_grad(kw):
    g = kw.get("groups", 1)
    check_grad(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), torch.randn(2, 4, 5, 6), torch.randn(4, 6 // g, 3, 3),
               torch.randn(6))


def test_conv_transpose1d_3d():
    check_grad(lambda x, w: F.conv_transpose1d(x, w, stride=2), torch.randn(2, 3, 7), torch.randn(3, 2, 3))
    check(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1), torch.randn(1, 2, 3, 4, 3), torch.randn(2, 2, 3, 3, 3))
    kw = dict(stride=(3, 2, 1), padding=(1, 2, 3), output_padding=(2, 3, 1), groups=2, dilation=(4, 4, 4))
    check_grad(lambda x, w, b: F.conv_transpose3d(x, w, b, **kw), torch.randn(2, 2, 4, 4, 4),
               torch.randn(2, 2, 4, 5, 6), torch.randn(4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv2d_half(dtype):
    x, w, b = torch.randn(2, 3, 6, 6).to(dtype), torch.randn(4, 3, 3, 3).to(dtype), torch.randn(4).to(dtype)
    check(lambda x, w, b: F.conv2d(x, w, b, padding=1), x, w, b, scale=_scale(dtype))


def test_conv_int64_float64():
    x, w = torch.randint(-3, 4, (1, 2, 5)), torch.randint(-3, 4, (3, 2, 3))
    check(lambda x, w: F.conv1d(x, w, padding=1), x, w)
    check(lambda x, w: F.conv2d(x, w, stride=2), torch.randn(1, 2, 5, 5).double(), torch.randn(3, 2, 3, 3).double())


def test_conv_module_unbatched():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    x = torch.randn(3, 5, 5)
    expected = conv(x)
    conv_t = torch.nn.Conv2d(3, 4, 3, padding=1).to("tpu")
    conv_t.load_state_dict(conv.state_dict())
    assert_same(conv_t(x.to("tpu")), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool])
def test_addr(dtype):
    g = torch.Generator().manual_seed(3)
    if dtype == torch.bool:
        s, a, b = (torch.rand(*sh, generator=g) > 0.5 for sh in ((5, 10), (5,), (10,)))
        for kw in (dict(), dict(beta=False), dict(beta=True, alpha=False)):
            check(lambda s, a, b: torch.addr(s, a, b, **kw), s, a, b)
        return
    s, a, b = ((torch.randn(*sh, generator=g) * 5).to(dtype) for sh in ((5, 10), (5,), (10,)))
    kw = dict(beta=2, alpha=3) if dtype == torch.int64 else dict(beta=0.6, alpha=0.2)
    if dtype in (torch.bfloat16, torch.float16):
        # one rounding in float32 (CPU's kernel rounds after each operation): no
        # farther from float64 than CPU, and within the dtype's tolerance of it
        t = torch.addr(s.to("tpu"), a.to("tpu"), b.to("tpu"), **kw).cpu().double()
        f = torch.addr(s.double(), a.double(), b.double(), **kw)
        c = torch.addr(s, a, b, **kw).double()
        assert (t - f).abs().max() <= (c - f).abs().max()
        assert_same(torch.addr(s.to("tpu"), a.to("tpu"), b.to("tpu"), **kw).double(), f.to(dtype).double(), scale=4)
    else:
        check(lambda s, a, b: torch.addr(s, a, b, **kw), s, a, b)
        check(lambda s, a, b: torch.addr(s, a, b), s[0], a, b)  # self broadcast
        check(lambda s, a, b: s.clone().addr_(a, b, **kw), s, a, b)
        check(lambda s, a, b: torch.addr(s, a, b, out=torch.empty_like(s), **kw), s, a, b)
    if dtype == torch.float32:
        check(lambda s, a, b: torch.addr(s, a, b, beta=0), torch.full((5, 10), float("nan")), a, b)  # self ignored
        check_grad(lambda s, a, b: torch.addr(s, a, b, beta=0.6, alpha=0.2), s, a, b)
        check_like_cpu(lambda s, a, b: torch.addr(s, a, b, beta=True), s, a, b)
        check_like_cpu(lambda s, a, b: torch.addr(s, a[None], b), s, a, b)
    if dtype == torch.int64:
        check_like_cpu(lambda s, a, b: torch.addr(s, a, b, beta=0.5), s, a, b)
