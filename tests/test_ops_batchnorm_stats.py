"""SyncBatchNorm's kernels (batch_norm_stats, batch_norm_elemt,
batch_norm_gather_stats[_with_counts], batch_norm_backward_reduce,
batch_norm_backward_elemt), batch_norm_update_stats, and the aliases native_norm,
_aminmax and embedding_renorm_, vs PyTorch on CPU.

ATen has the SyncBatchNorm kernels for CUDA only, so their reference here is the CUDA
kernels' definition (Normalization.cuh) evaluated in float64 on CPU from the same
inputs, and, where it says more, what SyncBatchNorm needs of them: the combined
statistics of per-rank chunks equal the statistics of the whole batch, and
forward + backward equal autograd of F.batch_norm on the whole batch.
batch_norm_update_stats, _aminmax and embedding_renorm_ are compared with their CPU
kernels; native_norm (sparse-only in ATen) with torch.linalg.vector_norm.

Running stats: these schemas do not mark running_mean / running_var mutated, but
the kernels update them in place, and so does tpu (the binding treats them as
written; tested against CPU's batch_norm_update_stats and the whole batch's
statistics)."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from tpu_testing import assert_same, check, to_tpu

FLOATS = [torch.float32, torch.bfloat16, torch.float16]
# The elementwise kernels' reduced-float path is one opmath conversion: bfloat16 covers it.
FLOATS_ELEMT = [torch.float32, torch.bfloat16]
SHAPES = [(6, 3), (4, 3, 5), (2, 3, 4, 5), "channels_last"]
OPS = ["batch_norm_stats", "batch_norm_elemt", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts",
       "batch_norm_backward_reduce", "batch_norm_backward_elemt", "batch_norm_update_stats", "native_norm",
       "_aminmax", "embedding_renorm"]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _input(shape, dtype):
    if shape == "channels_last":
        return (torch.randn(2, 3, 4, 5) * 2 + 1).to(dtype).contiguous(memory_format=torch.channels_last)
    return (torch.randn(*shape) * 2 + 1).to(dtype)


def _opmath(dtype):
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _dims(x):
    return [0] + list(range(2, x.dim()))


def _ref_stats(x, eps):
    """CUDA's batch_norm_stats: biased mean / invstd per channel, in opmath."""
    xd = x.double()
    mean, var = xd.mean(_dims(x)), xd.var(_dims(x), unbiased=False)
    return mean.to(_opmath(x.dtype)), (1 / torch.sqrt(var + eps)).to(_opmath(x.dtype))


def _chan(v, x):
    return v.double().reshape([1, -1] + [1] * (x.dim() - 2))


def test_served_by_lowerings():
    for name in OPS:
        assert torchtpu._C.op_supported(name), name


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_batch_norm_stats(shape, dtype):
    x = _input(shape, dtype)
    mean, invstd = torch.batch_norm_stats(x.to("tpu"), 1e-5)
    assert_same((mean, invstd), _ref_stats(x, 1e-5))


def test_batch_norm_stats_zero_variance_and_eps():
    # ATen's InvStd: 0 where var and eps are both 0; otherwise 1 / sqrt(var + eps).
    x = torch.ones(4, 2, 3)
    x[:, 1] = torch.randn(4, 3)
    _, invstd = torch.batch_norm_stats(x.to("tpu"), 0.0)
    assert_same(invstd, torch.stack([torch.tensor(0.0), _ref_stats(x, 0.0)[1][1]]))
    assert_same(torch.batch_norm_stats(x.to("tpu"), 1e-3)[1], _ref_stats(x, 1e-3)[1])


def test_batch_norm_stats_rejects_integers_and_1d():
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        torch.batch_norm_stats(torch.ones(4, 3, dtype=torch.long).to("tpu"), 1e-5)
    with pytest.raises(RuntimeError, match="expected 2D or higher input"):
        torch.batch_norm_stats(torch.ones(4).to("tpu"), 1e-5)


def _ref_elemt(x, w, b, mean, invstd):
    y = (x.double() - _chan(mean, x)) * _chan(invstd, x)
    if w is not None:
        y = y * _chan(w, x)
    if b is not None:
        y = y + _chan(b, x)
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", FLOATS_ELEMT)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_elemt(shape, dtype, affine):
    x = _input(shape, dtype)
    mean, invstd = _ref_stats(x, 1e-5)
    w, b = (torch.randn(3), torch.randn(3)) if affine else (None, None)
    fn = lambda *a: torch.batch_norm_elemt(*a, 1e-5)
    args = (x, w, b, mean, invstd)
    assert_same(fn(*to_tpu(args)), _ref_elemt(*args))
    # It is F.batch_norm in training with those statistics.
    ref = F.batch_norm(x.float(), None, None, w, b, training=True, eps=1e-5).to(dtype)
    assert_same(fn(*to_tpu(args)), ref, scale=4.0 if dtype != torch.float32 else 1.0)


def test_batch_norm_elemt_out_and_noncontiguous():
    x = torch.randn(5, 4, 3).transpose(0, 2)  # (3, 4, 5), non-contiguous
    mean, invstd = _ref_stats(x, 1e-5)
    w, b = torch.randn(4), torch.randn(4)
    out = torch.empty(0, device="tpu")
    r = torch.batch_norm_elemt(x.to("tpu"), w.to("tpu"), b.to("tpu"), mean.to("tpu"), invstd.to("tpu"), 1e-5,
                               out=out)
    assert r is out
    assert_same(out, _ref_elemt(x, w, b, mean, invstd))


def _chunks(x, counts):
    return torch.split(x, counts, dim=0)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", [(9, 3), (9, 3, 4), (9, 3, 2, 2)], ids=str)
def test_batch_norm_gather_stats_with_counts(shape, dtype):
    # Ranks with 2, 3 and 4 samples: combined, their statistics are the whole batch's.
    x = _input(shape, dtype)
    parts = _chunks(x, [2, 3, 4])
    stats = [_ref_stats(p, 1e-5) for p in parts]
    mean_all = torch.stack([s[0] for s in stats])
    invstd_all = torch.stack([s[1] for s in stats])
    counts = torch.tensor([float(p.numel() // p.size(1)) for p in parts])
    mean, invstd = torch.batch_norm_gather_stats_with_counts(
        parts[0].to("tpu"), mean_all.to("tpu"), invstd_all.to("tpu"), None, None, 0.1, 1e-5, counts.to("tpu"))
    assert_same((mean, invstd), _ref_stats(x, 1e-5), scale=2.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_batch_norm_gather_stats_int_count(dtype):
    x = _input((8, 3, 5), dtype)
    parts = _chunks(x, [4, 4])
    stats = [_ref_stats(p, 1e-5) for p in parts]
    mean, invstd = torch.batch_norm_gather_stats(
        parts[1].to("tpu"), torch.stack([s[0] for s in stats]).to("tpu"),
        torch.stack([s[1] for s in stats]).to("tpu"), None, None, 0.1, 1e-5, 20)
    assert_same((mean, invstd), _ref_stats(x, 1e-5), scale=2.0)


def test_gather_stats_out():
    x = torch.randn(6, 3)
    m, i = _ref_stats(x, 1e-5)
    o0, o1 = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    r = torch.ops.aten.batch_norm_gather_stats_with_counts.out(
        x.to("tpu"), m[None].to("tpu"), i[None].to("tpu"), None, None, 0.1, 1e-5, torch.tensor([6.0]).to("tpu"),
        out0=o0, out1=o1)
    assert r[0] is o0 and r[1] is o1
    assert_same((o0, o1), (m, i))


def test_running_stats_updated_in_place():
    # aten's schemas do not mark running_mean / running_var mutated, but the kernels
    # update them in place: so does tpu (the binding writes them back)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 3, 4, generator=g)
    rm0, rv0 = torch.randn(3, generator=g), torch.rand(3, generator=g) + 0.5
    rm, rv = rm0.clone(), rv0.clone()
    torch.batch_norm_update_stats(x, rm, rv, 0.1)
    rm_t, rv_t = rm0.to("tpu"), rv0.to("tpu")
    out = torch.batch_norm_update_stats(x.to("tpu"), rm_t, rv_t, 0.1)
    assert_same((rm_t, rv_t), (rm, rv))
    assert_same(out, torch.batch_norm_update_stats(x, rm0.clone(), rv0.clone(), 0.1))
    # gather: the ranks' (mean, invstd, count) of two chunks give the whole batch's
    xs = (x[:2], x[2:])
    stats = [torch.batch_norm_stats(c.to("tpu"), 1e-5) for c in xs]
    mean = torch.stack([s[0] for s in stats])
    invstd = torch.stack([s[1] for s in stats])
    counts = torch.tensor([float(c.shape[0] * c.shape[2]) for c in xs], device="tpu")
    xd = x.double().transpose(0, 1).reshape(3, -1)
    want_rm = 0.9 * rm0.double() + 0.1 * xd.mean(1)
    want_rv = 0.9 * rv0.double() + 0.1 * xd.var(1, unbiased=True)
    for op in ("with_counts", "plain"):
        rm_t, rv_t = rm0.to("tpu"), rv0.to("tpu")
        if op == "with_counts":
            torch.batch_norm_gather_stats_with_counts(x.to("tpu"), mean, invstd, rm_t, rv_t, 0.1, 1e-5, counts)
        else:  # every rank with the same count (2 x 4 of one chunk: use equal chunks)
            m2 = torch.stack([torch.batch_norm_stats(c.to("tpu"), 1e-5)[0] for c in (x[:3], x[3:])])
            i2 = torch.stack([torch.batch_norm_stats(c.to("tpu"), 1e-5)[1] for c in (x[:3], x[3:])])
            torch.batch_norm_gather_stats(x.to("tpu"), m2, i2, rm_t, rv_t, 0.1, 1e-5, 12)
        assert_same((rm_t.double(), rv_t.double()), (want_rm, want_rv), scale=10)


def _ref_backward_reduce(dy, x, mean, invstd, w):
    d = _dims(x)
    xmu = x.double() - _chan(mean, x)
    sum_dy = dy.double().sum(d)
    sum_dy_xmu = (dy.double() * xmu).sum(d)
    wd = w.dtype if w is not None else mean.dtype
    return (sum_dy.to(mean.dtype), sum_dy_xmu.to(mean.dtype), (sum_dy_xmu * invstd.double()).to(wd),
            sum_dy.to(wd))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_batch_norm_backward_reduce(shape, dtype):
    x = _input(shape, dtype)
    dy = torch.randn(x.shape).to(dtype)
    if shape == "channels_last":
        dy = dy.contiguous(memory_format=torch.channels_last)
    mean, invstd = _ref_stats(x, 1e-5)
    w = torch.randn(3)
    r = torch.batch_norm_backward_reduce(dy.to("tpu"), x.to("tpu"), mean.to("tpu"), invstd.to("tpu"),
                                         w.to("tpu"), True, True, True)
    assert_same(r, _ref_backward_reduce(dy, x, mean, invstd, w), scale=2.0)


@pytest.mark.parametrize("mask", [(True, False, True), (False, True, False), (True, True, False)], ids=str)
def test_batch_norm_backward_reduce_masks(mask):
    # ATen leaves an output undefined where its flag is false; the binding returns
    # zeros of the same shape and dtype there (SyncBatchNorm drops it either way).
    x, dy = torch.randn(4, 3, 5), torch.randn(4, 3, 5)
    mean, invstd = _ref_stats(x, 1e-5)
    ref = list(_ref_backward_reduce(dy, x, mean, invstd, None))
    keep = [mask[0], mask[0], mask[1], mask[2]]
    ref = [r if k else torch.zeros_like(r) for r, k in zip(ref, keep)]
    r = torch.batch_norm_backward_reduce(dy.to("tpu"), x.to("tpu"), mean.to("tpu"), invstd.to("tpu"), None, *mask)
    assert_same(r, tuple(ref))


def _sync_bn_grad(x, dy, w, counts):
    """grad_input as SyncBatchNorm computes it, on tpu, with the ranks' sums added up."""
    mean, invstd = _ref_stats(x, 1e-5)
    t = lambda v: v.to("tpu")
    sum_dy, sum_dy_xmu, _, _ = torch.batch_norm_backward_reduce(t(dy), t(x), t(mean), t(invstd),
                                                                None if w is None else t(w), True, False, False)
    return torch.batch_norm_backward_elemt(t(dy), t(x), t(mean), t(invstd), None if w is None else t(w), sum_dy,
                                           sum_dy_xmu, t(counts))


@pytest.mark.parametrize("dtype", FLOATS_ELEMT)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_backward_elemt(shape, dtype, affine):
    # One rank holding the whole batch: grad_input is autograd's of F.batch_norm.
    x = _input(shape, dtype)
    dy = torch.randn(x.shape).to(dtype)
    w = torch.randn(3) if affine else None
    n = x.numel() // x.size(1)
    counts = torch.tensor([n // 2, n - n // 2], dtype=torch.int32)  # the total is what counts
    xr = x.float().requires_grad_()
    F.batch_norm(xr, None, None, w, None, training=True, eps=1e-5).backward(dy.float())
    got = _sync_bn_grad(x, dy, w, counts)
    assert got.dtype == dtype
    assert_same(got, xr.grad.to(dtype), scale=4.0 if dtype != torch.float32 else 1.0)


def test_batch_norm_backward_elemt_out():
    x, dy = torch.randn(4, 3), torch.randn(4, 3)
    mean, invstd = _ref_stats(x, 1e-5)
    sum_dy, sum_dy_xmu = dy.sum(0), (dy * (x - mean)).sum(0)
    t = lambda v: v.to("tpu")
    out = torch.empty(0, device="tpu")
    r = torch.ops.aten.batch_norm_backward_elemt.out(t(dy), t(x), t(mean), t(invstd), None, t(sum_dy),
                                                     t(sum_dy_xmu), torch.tensor([4], dtype=torch.int32, device="tpu"),
                                                     out=out)
    assert r is out
    xr = x.clone().requires_grad_()
    F.batch_norm(xr, None, None, training=True, eps=1e-5).backward(dy)
    assert_same(out, xr.grad)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_batch_norm_update_stats(shape, dtype):
    x = _input(shape, dtype)
    check(lambda v: torch.batch_norm_update_stats(v, None, None, 0.1), x)


def test_batch_norm_update_stats_out():
    x = torch.randn(5, 3, 2)
    o0, o1 = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    torch.ops.aten.batch_norm_update_stats.out(x.to("tpu"), None, None, 0.1, out0=o0, out1=o1)
    assert_same((o0, o1), torch.batch_norm_update_stats(x, None, None, 0.1))


# ------------------------------------------------------------------ aliases

@pytest.mark.parametrize("dtype", FLOATS)
def test_native_norm(dtype):
    x = torch.randn(3, 4, 5).to(dtype)
    assert_same(torch.ops.aten.native_norm(x.to("tpu")), torch.linalg.vector_norm(x))
    assert_same(torch.ops.aten.native_norm(x.to("tpu"), 3), torch.linalg.vector_norm(x, 3), scale=4.0)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf"), None])
@pytest.mark.parametrize("dim,keepdim", [([1], False), ([0, 2], True), (-1, False)])
def test_native_norm_dim_dtype(p, dim, keepdim):
    x = torch.randn(3, 4, 5).transpose(0, 2)  # non-contiguous
    ref = torch.linalg.vector_norm(x, 2.0 if p is None else p, dim, keepdim)
    got = torch.ops.aten.native_norm.ScalarOpt_dim_dtype(x.to("tpu"), p, dim, keepdim, None)
    assert_same(got, ref, scale=4.0)
    got = torch.ops.aten.native_norm.ScalarOpt_dim_dtype(x.half().to("tpu"), p, dim, keepdim, torch.float32)
    assert_same(got, torch.linalg.vector_norm(x.half(), 2.0 if p is None else p, dim, keepdim,
                                              dtype=torch.float32), scale=4.0)
    out = torch.empty(0, device="tpu")
    torch.ops.aten.native_norm.ScalarOpt_dim_dtype_out(x.to("tpu"), p, dim, keepdim, None, out=out)
    assert_same(out, ref, scale=4.0)


def test_native_norm_out():
    x = torch.randn(4, 6)
    out = torch.empty(0, device="tpu")
    torch.ops.aten.native_norm.out(x.to("tpu"), 1, out=out)
    assert_same(out, torch.linalg.vector_norm(x, 1))


@pytest.mark.filterwarnings("ignore:_aminmax is deprecated")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32,
                                   torch.int8, torch.uint8, torch.bool])
def test_aminmax(dtype):
    x = (torch.randn(3, 4, 5) * 10).to(dtype)
    check(lambda v: torch.ops.aten._aminmax(v), x)
    check(lambda v: torch.ops.aten._aminmax.dim(v, 1), x)
    check(lambda v: torch.ops.aten._aminmax.dim(v, -1, True), x.transpose(0, 2))


@pytest.mark.filterwarnings("ignore:_aminmax is deprecated")
def test_aminmax_out():
    x = torch.randn(3, 4)
    o0, o1 = torch.empty(0, device="tpu"), torch.empty(0, device="tpu")
    r = torch.ops.aten._aminmax.dim_out(x.to("tpu"), 0, False, out0=o0, out1=o1)
    assert r[0] is o0 and r[1] is o1
    assert_same((o0, o1), torch.ops.aten._aminmax.dim(x, 0))
    torch.ops.aten._aminmax.out(x.to("tpu"), out0=o0, out1=o1)
    assert_same((o0, o1), torch.ops.aten._aminmax(x))


# ------------------------------------------------------------ embedding_renorm_

@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf")])
def test_embedding_max_norm_forward_backward(norm_type):
    # nn.Embedding(max_norm=1) renorms the looked-up rows in place, each once even
    # when repeated, then looks them up; the weight ends up the same on both.
    emb = torch.nn.Embedding(10, 4, max_norm=1.0, norm_type=norm_type)
    with torch.no_grad():
        emb.weight.mul_(3)
        emb.weight[7] *= 0.01  # one row under max_norm: untouched
    emb_t = torch.nn.Embedding(10, 4, max_norm=1.0, norm_type=norm_type).to("tpu")
    with torch.no_grad():
        emb_t.weight.copy_(emb.weight.to("tpu"))
    idx = torch.tensor([[1, 3, 3, 7], [0, 1, 9, 3]])
    out = emb(idx)
    out_t = emb_t(idx.to("tpu"))
    assert_same(out_t, out)
    assert_same(emb_t.weight.detach(), emb.weight.detach())
    g = torch.randn(out.shape)
    out.backward(g)
    out_t.backward(g.to("tpu"))
    assert_same(emb_t.weight.grad, emb.weight.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_renorm_inplace_and_functional(dtype):
    w = (torch.randn(6, 5) * 2).to(dtype)
    idx = torch.tensor([4, 0, 4, -1, 2])  # repeated and negative (wraps, as self[i] does)
    wt = w.to("tpu")
    r = torch.embedding_renorm_(wt, idx.to("tpu"), 1.5, 2.0)
    assert r is wt
    ref = torch.embedding_renorm_(w.clone(), idx, 1.5, 2.0)
    assert_same(wt, ref)
    got = torch.ops.aten.embedding_renorm(w.to("tpu"), idx.int().to("tpu"), 1.5, 2.0)
    assert_same(got, ref)


def test_embedding_renorm_errors():
    with pytest.raises(IndexError, match=r"select\(\): index 7 out of range for tensor of size \[5, 3\]"):
        torch.embedding_renorm_(torch.randn(5, 3).to("tpu"), torch.tensor([1, 7]).to("tpu"), 1.0, 2.0).cpu()
    with pytest.raises(RuntimeError, match="Expected 2-dimensional tensor, but got 1-dimensional"):
        torch.embedding_renorm_(torch.randn(5).to("tpu"), torch.tensor([1]).to("tpu"), 1.0, 2.0)
    with pytest.raises(RuntimeError, match="'indices' to have one of the following scalar types: Long, Int"):
        torch.embedding_renorm_(torch.randn(5, 3).to("tpu"), torch.tensor([1.0]).to("tpu"), 1.0, 2.0)
