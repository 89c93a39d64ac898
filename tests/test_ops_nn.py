"""nn family: normalisation, losses, pooling, attention — tpu vs CPU.

Two levels: the aten ops the nn lowerings implement, called directly
(torch.ops.aten.*), and the nn layers / functionals users call, forward and
backward. Layers also need ops of other families (elementwise, reduce, matmul,
shape ...); a missing lowering of any family fails the test.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tpu_testing import assert_same, check, check_grad, to_tpu

A = torch.ops.aten

# The aten ops lowered by runtime/src/ops/nn*.c (base names).
NN_OPS = {
    "native_layer_norm", "native_layer_norm_backward", "native_group_norm", "native_group_norm_backward",
    "native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "_batch_norm_with_update", "_batch_norm_with_update_functional",
    "_batch_norm_no_update", "native_batch_norm_backward", "batch_norm_backward",
    "nll_loss_forward", "nll_loss_backward", "nll_loss2d_forward", "nll_loss2d_backward",
    "mse_loss", "mse_loss_backward", "smooth_l1_loss", "smooth_l1_loss_backward", "huber_loss",
    "huber_loss_backward", "soft_margin_loss", "soft_margin_loss_backward", "binary_cross_entropy",
    "binary_cross_entropy_backward", "binary_cross_entropy_with_logits",
    "max_pool2d_with_indices", "max_pool3d_with_indices", "max_pool2d_with_indices_backward",
    "max_pool3d_with_indices_backward", "avg_pool2d", "avg_pool3d", "avg_pool2d_backward", "avg_pool3d_backward",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "_adaptive_avg_pool2d_backward",
    "_adaptive_avg_pool3d_backward", "adaptive_max_pool2d", "adaptive_max_pool3d",
    "adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward", "max_unpool2d", "max_unpool3d",
}

REDUCTIONS = ["none", "mean", "sum"]
RED_ENUM = {"none": 0, "mean": 1, "sum": 2}


def check_module(mod, *inputs, scale=1.0, grad=True):
    """Runs mod on CPU and a tpu copy: outputs, input and parameter gradients, buffers."""
    mod_t = copy.deepcopy(mod).to("tpu")
    cin = [x.detach().clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    tin = [x.detach().to("tpu").requires_grad_(grad and x.is_floating_point()) for x in inputs]
    out_c, out_t = mod(*cin), mod_t(*tin)
    if isinstance(out_c, tuple):
        out_c, out_t = out_c[0], out_t[0]
    assert_same(out_t, out_c, scale)
    if grad:
        g = torch.randn_like(out_c)
        out_c.backward(g)
        out_t.backward(g.to("tpu"))
        for c, t in zip(cin, tin):
            if c.requires_grad:
                assert_same(t.grad, c.grad, scale)
        for (name, pc), (_, pt) in zip(mod.named_parameters(), mod_t.named_parameters()):
            if pc.grad is not None:
                assert pt.grad is not None, f"no gradient for {name}"
                assert_same(pt.grad, pc.grad, scale)
    for (name, bc), (_, bt) in zip(mod.named_buffers(), mod_t.named_buffers()):
        assert_same(bt, bc, scale)
    return mod_t


# ----------------------------------------------------------------- aten level

def test_native_layer_norm_ops():
    x, w, b = torch.randn(2, 3, 4), torch.randn(4), torch.randn(4)
    check(lambda x, w, b: A.native_layer_norm(x, [4], w, b, 1e-5), x, w, b)
    check(lambda x: A.native_layer_norm(x, [3, 4], None, None, 1e-5), x)
    _, m, r = A.native_layer_norm(x, [4], w, b, 1e-5)
    g = torch.randn_like(x)
    check(lambda *a: A.native_layer_norm_backward(*a[:2], [4], *a[2:], [True, True, True]), g, x, m, r, w, b)


@pytest.mark.parametrize("train", [True, False])
def test_native_batch_norm_ops(train):
    x, w, b = torch.randn(4, 3, 5, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    check(lambda x, w, b, rm, rv: A.native_batch_norm(x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5),
          x, w, b, rm, rv)
    check(lambda x, w, b, rm, rv: A._native_batch_norm_legit_functional(x, w, b, rm, rv, train, 0.1, 1e-5),
          x, w, b, rm, rv)
    if train:
        check(lambda x, w, b: A._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5), x, w, b)
    else:
        check(lambda x, w, b, rm, rv: A._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5),
              x, w, b, rm, rv)
    _, sm, si = A.native_batch_norm(x, w, b, rm.clone(), rv.clone(), train, 0.1, 1e-5)
    g = torch.randn_like(x)
    check(lambda g, x, w, rm, rv, sm, si: A.native_batch_norm_backward(g, x, w, rm, rv, sm, si, train, 1e-5,
                                                                        [True, True, True]),
          g, x, w, rm, rv, sm if train else None, si if train else None)


def test_batch_norm_running_stats_in_place():
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    for op in (A.native_batch_norm, A._native_batch_norm_legit):
        rmc, rvc, rmt, rvt = rm.clone(), rv.clone(), rm.to("tpu"), rv.to("tpu")
        op(x, w, b, rmc, rvc, True, 0.3, 1e-5)
        op(x.to("tpu"), w.to("tpu"), b.to("tpu"), rmt, rvt, True, 0.3, 1e-5)
        assert_same(rmt, rmc)
        assert_same(rvt, rvc)


def test_native_group_norm_ops():
    x, w, b = torch.randn(2, 6, 3, 3), torch.randn(6), torch.randn(6)
    check(lambda x, w, b: A.native_group_norm(x, w, b, 2, 6, 9, 3, 1e-5), x, w, b)
    _, m, r = A.native_group_norm(x, w, b, 2, 6, 9, 3, 1e-5)
    check(lambda g, x, m, r, w: A.native_group_norm_backward(g, x, m, r, w, 2, 6, 9, 3, [True, True, True]),
          torch.randn_like(x), x, m, r, w)


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss_ops(red, weighted):
    r = RED_ENUM[red]
    x, t = torch.randn(5, 7), torch.randint(0, 7, (5,))
    t[1] = -100
    w = torch.rand(7) if weighted else None
    out, tw = check(lambda x, t, w: A.nll_loss_forward(x, t, w, r, -100), x, t, w)[1]
    check(lambda g, x, t, w, tw: A.nll_loss_backward(g, x, t, w, r, -100, tw), torch.randn_like(out), x, t, w, tw)
    check(lambda x, t, w: A.nll_loss_forward(x, t, w, r, 2), x, t.clamp(min=0), w)  # ignore a real class
    check(lambda x, t, w: A.nll_loss_forward(x, t, w, r, -100), x[0], t[0], w)  # 1-d input
    x2, t2 = torch.randn(2, 4, 3, 3), torch.randint(0, 4, (2, 3, 3))
    w2 = w[:4] if weighted else None
    out, tw = check(lambda x, t, w: A.nll_loss2d_forward(x, t, w, r, -100), x2, t2, w2)[1]
    check(lambda g, x, t, w, tw: A.nll_loss2d_backward(g, x, t, w, r, -100, tw), torch.randn_like(out), x2, t2, w2,
          tw)


@pytest.mark.parametrize("red", REDUCTIONS)
@pytest.mark.parametrize("name,extra", [("mse_loss", ()), ("smooth_l1_loss", (0.5,)), ("smooth_l1_loss", (0.0,)),
                                        ("huber_loss", (0.7,)), ("soft_margin_loss", ())])
def test_pointwise_loss_ops(red, name, extra):
    r = RED_ENUM[red]
    f, fb = getattr(A, name), getattr(A, name + "_backward")
    x, y = torch.randn(5, 7), torch.randn(5, 7)
    check(lambda x, y: f(x, y, r, *extra), x, y)
    g = torch.randn_like(f(x, y, r, *extra))
    check(lambda g, x, y: fb(g, x, y, r, *extra), g, x, y)


@pytest.mark.parametrize("red", REDUCTIONS)
def test_binary_cross_entropy_ops(red):
    r = RED_ENUM[red]
    p, q, w = torch.rand(5, 7), torch.rand(5, 7), torch.rand(7)
    check(lambda x, y, w: A.binary_cross_entropy(x, y, w, r), p, q, w)
    g = torch.randn_like(A.binary_cross_entropy(p, q, w, r))
    check(lambda g, x, y, w: A.binary_cross_entropy_backward(g, x, y, w, r), g, p, q, w)
    check(lambda x, y, w, pw: A.binary_cross_entropy_with_logits(x, y, w, pw, r), torch.randn(5, 7) * 5, q, w, w * 3)


POOL2D = [(2, 2, 0, 1, False), (3, 2, 1, 1, True), (3, 1, 1, 2, False), ((3, 2), (2, 1), (1, 0), 1, True),
          (2, 3, 1, 1, True)]


@pytest.mark.parametrize("k,s,p,d,ceil", POOL2D)
def test_max_pool2d_ops(k, s, p, d, ceil):
    x = torch.randn(2, 3, 9, 8)
    out, idx = check(lambda x: A.max_pool2d_with_indices(x, k, s, p, d, ceil), x)[1]
    check(lambda g, x, i: A.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, i), torch.randn_like(out), x, idx)


@pytest.mark.parametrize("k,s,p,ceil", [(c[0], c[1], c[2], c[4]) for c in POOL2D if c[3] == 1])
@pytest.mark.parametrize("cip,div", [(True, None), (False, None), (True, 3)])
def test_avg_pool2d_ops(k, s, p, ceil, cip, div):
    x = torch.randn(2, 3, 9, 8)
    out = check(lambda x: A.avg_pool2d(x, k, s, p, ceil, cip, div), x)[1]
    check(lambda g, x: A.avg_pool2d_backward(g, x, k, s, p, ceil, cip, div), torch.randn_like(out), x)


def test_pool3d_ops():
    x = torch.randn(2, 2, 5, 6, 7)
    args = ([2, 2, 2], [2, 2, 2], [1, 0, 1], [1, 1, 1], True)
    out, idx = check(lambda x: A.max_pool3d_with_indices(x, *args), x)[1]
    check(lambda g, x, i: A.max_pool3d_with_indices_backward(g, x, *args, i), torch.randn_like(out), x, idx)
    args = ([3, 2, 2], [2, 2, 1], [1, 1, 0], True, False, None)
    out = check(lambda x: A.avg_pool3d(x, *args), x)[1]
    check(lambda g, x: A.avg_pool3d_backward(g, x, *args), torch.randn_like(out), x)


@pytest.mark.parametrize("size", [(3, 4), (5, 7), (9, 8), (1, 1), (2, 5)])
def test_adaptive_pool2d_ops(size):
    x = torch.randn(2, 3, 9, 8)
    out = check(lambda x: A._adaptive_avg_pool2d(x, size), x)[1]
    check(lambda g, x: A._adaptive_avg_pool2d_backward(g, x), torch.randn_like(out), x)
    out, idx = check(lambda x: A.adaptive_max_pool2d(x, size), x)[1]
    check(lambda g, x, i: A.adaptive_max_pool2d_backward(g, x, i), torch.randn_like(out), x, idx)


def test_adaptive_pool3d_ops():
    x = torch.randn(2, 2, 5, 6, 7)
    out = check(lambda x: A._adaptive_avg_pool3d(x, (2, 4, 3)), x)[1]
    check(lambda g, x: A._adaptive_avg_pool3d_backward(g, x), torch.randn_like(out), x)
    out, idx = check(lambda x: A.adaptive_max_pool3d(x, (2, 4, 3)), x)[1]
    check(lambda g, x, i: A.adaptive_max_pool3d_backward(g, x, i), torch.randn_like(out), x, idx)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_pool_half(dtype):
    x = torch.randn(2, 3, 8, 8, dtype=dtype)
    check(lambda x: A.max_pool2d_with_indices(x, 2, 2, 0, 1, False), x)
    check(lambda x: A.avg_pool2d(x, 3, 2, 1, False, True, None), x)
    check(lambda x: A._adaptive_avg_pool2d(x, (3, 3)), x)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_pool_integers(dtype):
    """Integer pooling as PyTorch's CPU kernels: max pools take every integer type
    (the type's minimum in the window still wins over padding), average pools int64
    only, the window sum divided with truncation toward zero; exact equality."""
    g = torch.Generator().manual_seed(0)
    low = 0 if dtype == torch.uint8 else -100
    x = torch.randint(low, 100, (2, 3, 7, 9), generator=g).to(dtype)
    x[0, 0, :2, :2] = torch.iinfo(dtype).min
    for k, s, p, d, ceil in [(3, 1, 0, 1, False), (3, 2, 1, 1, False), (2, 2, 0, 1, True), (3, 1, 1, 2, False)]:
        check(lambda x: A.max_pool2d_with_indices(x, k, s, p, d, ceil), x)
    x3 = x[:, :, :6].reshape(2, 3, 6, 3, 3)
    check(lambda x: A.max_pool3d_with_indices(x, 2, 1, 1, 1, False), x3)
    if dtype != torch.int64:
        with pytest.raises(NotImplementedError, match="avg_pool2d"):
            F.avg_pool2d(x.to("tpu"), 2)
        return
    for k, s, p, ceil, cip, div in [(3, 1, 0, False, True, None), (3, 2, 1, False, True, None),
                                    (3, 2, 1, False, False, None), (2, 2, 0, True, True, 3)]:
        check(lambda x: A.avg_pool2d(x, k, s, p, ceil, cip, div), x)
    check(lambda x: A.avg_pool3d(x, 2, 1, 1, False, True, None), x3)
    check(lambda x: F.avg_pool1d(x, 3, 2), x[0])
    check(lambda x: F.local_response_norm(x, 3), x)


def test_errors_match_pytorch():
    with pytest.raises(RuntimeError, match="normalized_shape"):
        A.native_layer_norm(torch.randn(2, 3).to("tpu"), [4], None, None, 1e-5)
    with pytest.raises(RuntimeError, match="pad should be"):
        A.max_pool2d_with_indices(torch.randn(1, 4, 4).to("tpu"), [2, 2], [], [2, 2], [1, 1], False)
    with pytest.raises(RuntimeError, match="running_mean must be defined"):
        A.native_batch_norm(torch.randn(2, 3).to("tpu"), None, None, None, None, False, 0.1, 1e-5)


# ------------------------------------------------------------- nn layers

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm(dtype):
    m = nn.LayerNorm([5, 6]).to(dtype)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    # bf16: the weight/bias gradients sum 12 bf16 products per element in another order
    # than the CPU; one bf16 rounding apart is 0.8 x TOL[bf16] (seed 0: 1.27 x). float32: 1.
    check_module(m, torch.randn(3, 4, 5, 6, dtype=dtype), scale=2 if dtype == torch.bfloat16 else 1)
    check_module(nn.LayerNorm(6, elementwise_affine=False), torch.randn(4, 6))


def test_layer_norm_mixed_dtype():
    # bf16 input with f32 parameters: out bf16, statistics f32 (PyTorch's mixed type)
    x, w, b = torch.randn(3, 8, dtype=torch.bfloat16), torch.randn(8), torch.randn(8)
    check(lambda x, w, b: A.native_layer_norm(x, [8], w, b, 1e-5), x, w, b)


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (8, 3)), (nn.BatchNorm1d, (4, 3, 5)),
                                       (nn.BatchNorm2d, (4, 3, 5, 5)), (nn.BatchNorm3d, (2, 3, 2, 3, 3))])
def test_batch_norm_train_and_eval(cls, shape):
    m = cls(3, momentum=0.2)
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    x = torch.randn(*shape) * 2 + 1
    mt = check_module(m, x)  # train: output, grads, running stats after one step
    m.eval()
    mt.eval()
    xe, g = torch.randn(*shape).requires_grad_(), torch.randn(*shape)
    xt = xe.detach().to("tpu").requires_grad_()
    out_c, out_t = m(xe), mt(xt)
    assert_same(out_t, out_c)
    out_c.backward(g)
    out_t.backward(g.to("tpu"))
    assert_same(xt.grad, xe.grad)
    assert_same(mt.weight.grad, m.weight.grad)


def test_batch_norm_no_running_stats_and_cumulative_momentum():
    check_module(nn.BatchNorm2d(3, affine=False, track_running_stats=False), torch.randn(4, 3, 2, 2))
    m = nn.BatchNorm1d(4, momentum=None)  # cumulative average: momentum from num_batches_tracked
    mt = copy.deepcopy(m).to("tpu")
    for _ in range(2):
        x = torch.randn(6, 4)
        assert_same(mt(x.to("tpu")), m(x))
    for (_, bc), (_, bt) in zip(m.named_buffers(), mt.named_buffers()):
        assert_same(bt, bc)


@pytest.mark.parametrize("groups,shape", [(2, (2, 6, 4, 4)), (3, (3, 6, 5)), (1, (2, 4, 3))])
def test_group_norm(groups, shape):
    m = nn.GroupNorm(groups, shape[1])
    with torch.no_grad():
        m.weight.normal_()
        m.bias.normal_()
    check_module(m, torch.randn(*shape))


def test_rms_norm():
    m = nn.RMSNorm([6])
    with torch.no_grad():
        m.weight.normal_()
    check_module(m, torch.randn(3, 4, 6))
    check_grad(lambda x: F.rms_norm(x, [6], eps=1e-3), torch.randn(5, 6))


# ------------------------------------------------------------------ losses

@pytest.mark.parametrize("red", REDUCTIONS)
def test_nll_and_cross_entropy(red):
    x, t = torch.randn(6, 5), torch.randint(0, 5, (6,))
    t[2] = 1
    w = torch.rand(5) + 0.5
    check_grad(lambda x: F.nll_loss(F.log_softmax(x, 1), t.to(x.device), reduction=red), x)
    check_grad(lambda x: F.nll_loss(x, t.to(x.device), weight=w.to(x.device), ignore_index=1, reduction=red), x)
    check_grad(lambda x: F.cross_entropy(x, t.to(x.device), reduction=red), x)
    check_grad(lambda x: F.cross_entropy(x, t.to(x.device), weight=w.to(x.device), reduction=red), x)
    x4, t4 = torch.randn(2, 5, 3, 4), torch.randint(0, 5, (2, 3, 4))
    check_grad(lambda x: F.cross_entropy(x, t4.to(x.device), reduction=red), x4)


@pytest.mark.parametrize("red", REDUCTIONS)
def test_cross_entropy_label_smoothing_and_probabilities(red):
    x, t = torch.randn(6, 5), torch.randint(0, 5, (6,))
    p = torch.softmax(torch.randn(6, 5), 1)
    check_grad(lambda x: F.cross_entropy(x, t.to(x.device), label_smoothing=0.1, reduction=red), x)
    check_grad(lambda x: F.cross_entropy(x, p.to(x.device), reduction=red), x)


@pytest.mark.parametrize("red", REDUCTIONS)
def test_regression_losses(red):
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    for fn in (lambda x: F.mse_loss(x, y.to(x.device), reduction=red),
               lambda x: F.l1_loss(x, y.to(x.device), reduction=red),
               lambda x: F.smooth_l1_loss(x, y.to(x.device), reduction=red, beta=0.5),
               lambda x: F.huber_loss(x, y.to(x.device), reduction=red, delta=0.8),
               lambda x: F.soft_margin_loss(x, y.sign().to(x.device), reduction=red)):
        check_grad(fn, x)


@pytest.mark.parametrize("red", REDUCTIONS)
def test_binary_losses(red):
    x, y, w = torch.randn(4, 5), torch.rand(4, 5), torch.rand(5)
    check_grad(lambda x: F.binary_cross_entropy(torch.sigmoid(x), y.to(x.device), weight=w.to(x.device),
                                                reduction=red), x)
    check_grad(lambda x: F.binary_cross_entropy_with_logits(x, y.to(x.device), pos_weight=w.to(x.device) * 2,
                                                            reduction=red), x)


@pytest.mark.parametrize("red", ["batchmean", "sum", "none"])
def test_kl_div_and_margin_ranking(red):
    x, y = F.log_softmax(torch.randn(4, 5), 1), torch.softmax(torch.randn(4, 5), 1)
    check_grad(lambda x: F.kl_div(x, y.to(x.device), reduction=red), x)
    a, b, t = torch.randn(6), torch.randn(6), torch.randint(0, 2, (6,)).float() * 2 - 1
    r = "mean" if red == "batchmean" else red
    check_grad(lambda a: F.margin_ranking_loss(a, b.to(a.device), t.to(a.device), margin=0.2, reduction=r), a)


# ----------------------------------------------------------------- pooling

@pytest.mark.parametrize("m,shape", [
    (nn.MaxPool1d(3, stride=2, padding=1), (2, 3, 11)),
    (nn.MaxPool2d(2), (2, 3, 8, 8)),
    (nn.MaxPool2d(3, stride=2, padding=1, dilation=1, ceil_mode=True), (2, 3, 9, 10)),
    (nn.MaxPool2d((2, 3), stride=(1, 2), dilation=(2, 1)), (1, 2, 7, 9)),
    (nn.MaxPool3d(2, stride=2, padding=1), (2, 2, 5, 6, 5)),
    (nn.AvgPool1d(3, stride=2, padding=1), (2, 3, 11)),
    (nn.AvgPool2d(3, stride=2, padding=1, count_include_pad=False), (2, 3, 9, 10)),
    (nn.AvgPool2d(2, ceil_mode=True, divisor_override=3), (2, 3, 7, 7)),
    (nn.AvgPool3d(2, stride=1, padding=1), (1, 2, 4, 5, 3)),
    (nn.AdaptiveAvgPool1d(4), (2, 3, 10)),
    (nn.AdaptiveAvgPool2d((3, 5)), (2, 3, 8, 11)),
    (nn.AdaptiveAvgPool2d(4), (2, 3, 8, 8)),
    (nn.AdaptiveAvgPool2d(1), (2, 3, 5, 5)),
    (nn.AdaptiveAvgPool3d((2, 3, 2)), (1, 2, 5, 6, 4)),
    (nn.AdaptiveMaxPool1d(4), (2, 3, 10)),
    (nn.AdaptiveMaxPool2d((3, 5)), (2, 3, 8, 11)),
    (nn.AdaptiveMaxPool3d(2), (1, 2, 5, 4, 3)),
], ids=lambda v: repr(v) if isinstance(v, nn.Module) else None)
def test_pool_layers(m, shape):
    check_module(m, torch.randn(*shape))


def test_max_pool_return_indices():
    x = torch.randn(2, 3, 8, 9)
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x)
    check(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True), x)


# --------------------------------------------------------------- attention

def _sdpa_inputs(hq=4, hkv=4, lq=5, lk=6, e=8):
    return torch.randn(2, hq, lq, e), torch.randn(2, hkv, lk, e), torch.randn(2, hkv, lk, e)


def test_sdpa_plain_and_causal():
    q, k, v = _sdpa_inputs()
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)
    q, k, v = _sdpa_inputs(lq=6)
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)


def test_sdpa_masks():
    q, k, v = _sdpa_inputs()
    bool_mask = torch.rand(5, 6) > 0.3
    bool_mask[:, 0] = True
    add_mask = torch.randn(2, 1, 5, 6)
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask.to(q.device)), q, k, v)
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=add_mask.to(q.device), scale=0.3),
               q, k, v)


def test_sdpa_gqa():
    q, k, v = _sdpa_inputs(hq=4, hkv=2)
    check_grad(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True, is_causal=True), q, k, v)


class _SelfAttention(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.mha = nn.MultiheadAttention(8, 2, **kw)

    def forward(self, x):
        return self.mha(x, x, x)[0]


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention(batch_first):
    check_module(_SelfAttention(batch_first=batch_first), torch.randn(3, 4, 8))
    m = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    x = torch.randn(3, 4, 8)
    seq = 4 if batch_first else 3
    mask = torch.triu(torch.ones(seq, seq, dtype=torch.bool), 1)
    mt = copy.deepcopy(m).to("tpu")
    out_c = m(x, x, x, attn_mask=mask, need_weights=False)[0]
    out_t = mt(x.to("tpu"), x.to("tpu"), x.to("tpu"), attn_mask=mask.to("tpu"), need_weights=False)[0]
    assert_same(out_t, out_c)



# ------------------------------------------------------------------ max_unpool


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nsp, shape", [(1, (2, 3, 8)), (2, (2, 3, 6, 8)), (2, (3, 6, 7)), (3, (1, 2, 4, 6, 4))])
def test_max_unpool(dtype, nsp, shape):
    pool = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[nsp]
    unpool = {1: F.max_unpool1d, 2: F.max_unpool2d, 3: F.max_unpool3d}[nsp]
    x = torch.randn(shape).to(dtype)
    y, i = pool(x, 2, stride=2, return_indices=True)
    check(lambda y, i: unpool(y, i, 2, stride=2, output_size=x.shape[-nsp:]), y, i)
    if dtype == torch.float32:
        check_grad(lambda y: unpool(y, i.to(y.device), 2, stride=2, output_size=x.shape[-nsp:]), y)


def test_max_unpool_errors():
    y = torch.randn(1, 1, 2, 2, device="tpu")
    with pytest.raises(RuntimeError, match="int64"):
        F.max_unpool2d(y, torch.zeros(1, 1, 2, 2, dtype=torch.int32, device="tpu"), 2)
