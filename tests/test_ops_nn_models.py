"""Ops of the nn_models family (runtime/src/ops/nn_models.c): ops Hugging Face models
reach that no other family lowers. Compared with PyTorch on CPU; tolerances from
tpu_testing (float32 1e-5, bfloat16 1e-2)."""
import pytest
import torch

from tpu_testing import check, check_grad


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape,dim", [((6, 4, 3), 0), ((6, 4, 3), 2), ((5, 7), 1), ((5, 7), 0)])
def test_weight_norm_interface(shape, dim, dtype):
    v = torch.randn(shape, dtype=dtype)
    gshape = [s if i == dim else 1 for i, s in enumerate(shape)]
    g = torch.rand(gshape, dtype=dtype) + 0.5
    # w and norms (float32 norms for a bfloat16 g, like ATen's CPU kernel)
    check(lambda a, b: torch._weight_norm_interface(a, b, dim), v, g)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 2])
def test_weight_norm_backward(dim, dtype):
    v = torch.randn(6, 4, 3, dtype=dtype)
    g = torch.rand([6 if dim == 0 else 1, 1, 3 if dim == 2 else 1], dtype=dtype) + 0.5
    # _weight_norm picks the fused interface (and its backward) for dim 0 and the last dim
    check_grad(lambda a, b: torch._weight_norm(a, b, dim), v, g, scale=2.0)


def test_weight_norm_parametrization_module():
    """The path wav2vec2-style models take: parametrizations.weight_norm on a conv."""
    torch.manual_seed(0)
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), name="weight", dim=2)
    dev = torch.nn.utils.parametrizations.weight_norm(torch.nn.Conv1d(4, 6, 3), name="weight", dim=2)
    dev.load_state_dict(conv.state_dict())
    dev = dev.to("tpu")
    x = torch.randn(2, 4, 9)
    yc, yt = conv(x), dev(x.to("tpu"))
    torch.testing.assert_close(yt.cpu(), yc, rtol=1e-5, atol=1e-5)
    yc.sum().backward()
    yt.sum().backward()
    for (n, p), (_, q) in zip(conv.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-5, msg=n)


def test_weight_norm_bad_g_shape():
    v = torch.randn(6, 4, 3, device="tpu")
    g = torch.rand(1, 4, 1, device="tpu")
    with pytest.raises(RuntimeError, match="_weight_norm_interface"):
        torch._weight_norm_interface(v, g, 0)
        torch.tpu.synchronize()


# ---- CTC loss (nn_ctc.c) ----

def _ctc_case(T, B, C, S, flat, seed=0, il=None, tl=None, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    lp = torch.randn(T, B, C, generator=g, dtype=dtype).log_softmax(-1)
    tl = tl or [max(0, S - (i % 2)) for i in range(B)]
    il = il or [T - (i % 3) for i in range(B)]
    tg = torch.randint(1, C, (sum(tl),) if flat else (B, S), generator=g)
    return lp, tg, il, tl


def _ctc_check(lp, tg, il, tl, reduction="mean", zero_infinity=False):
    a = lp.clone().requires_grad_()
    t = lp.to("tpu").requires_grad_()
    lc = torch.nn.functional.ctc_loss(a, tg, il, tl, reduction=reduction, zero_infinity=zero_infinity)
    lt = torch.nn.functional.ctc_loss(t, tg.to("tpu"), il, tl, reduction=reduction, zero_infinity=zero_infinity)
    torch.testing.assert_close(lt.detach().cpu(), lc.detach(), rtol=1e-5, atol=1e-5, equal_nan=True)
    gout = torch.linspace(0.5, 1.5, lc.numel(), dtype=lc.dtype).reshape(lc.shape)
    lc.backward(gout)
    lt.backward(gout.to("tpu"))
    # the gradient sums over the alignment paths: 1e-5 relative to its largest entry
    scale = a.grad.abs().max().item() if a.grad.isfinite().all() else 1.0
    torch.testing.assert_close(t.grad.cpu(), a.grad, rtol=1e-5, atol=1e-5 * scale, equal_nan=True)


@pytest.mark.parametrize("flat", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss(flat, reduction):
    _ctc_check(*_ctc_case(12, 3, 5, 3, flat), reduction=reduction)


def test_ctc_loss_repeated_labels_and_float64():
    lp, _, il, tl = _ctc_case(10, 2, 4, 4, False, dtype=torch.float64)
    tg = torch.tensor([[1, 1, 2, 2], [3, 3, 3, 1]])  # repeats forbid the blank-skipping transition
    _ctc_check(lp, tg, il, [4, 4])


def test_ctc_loss_empty_targets_and_infeasible():
    lp, tg, _, _ = _ctc_case(6, 2, 5, 4, False)
    # sequence 1 cannot emit 4 labels in 3 steps: its loss is inf (nan gradients, as on
    # CPU) or 0 with zero_infinity
    _ctc_check(lp, tg, [6, 3], [4, 4], reduction="none")
    _ctc_check(lp, tg, [6, 3], [4, 4], reduction="none", zero_infinity=True)
    _ctc_check(lp, tg, [6, 0], [0, 0], reduction="sum")


def test_ctc_loss_errors():
    lp, tg, il, tl = _ctc_case(6, 2, 5, 3, False)
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        torch.nn.functional.ctc_loss(lp.to("tpu"), tg.to("tpu"), il, tl, blank=5)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 6"):
        torch.nn.functional.ctc_loss(lp.to("tpu"), tg.to("tpu"), [7, 6], tl)
        torch.tpu.synchronize()
    with pytest.raises(RuntimeError, match="ctc_loss_cpu"):
        torch.nn.functional.ctc_loss(lp.bfloat16().to("tpu"), tg.to("tpu"), il, tl)
        torch.tpu.synchronize()
