"""Automatic mixed precision on tpu: torch.autocast("tpu") and torch.amp.GradScaler("tpu").

Issue "AMP and optimizers on tpu".

Cast policy: torchtpu registers PyTorch's CUDA op lists (ATen/autocast_mode.h:
AT_FORALL_LOWER_PRECISION_FP, AT_FORALL_FP32, AT_FORALL_FP32_SET_OPT_DTYPE,
AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE, AT_FORALL_PROMOTE) for AutocastPrivateUse1.
Results are compared with CPU autocast (torch.autocast("cpu", dtype=torch.bfloat16)).
CPU autocast uses a different, shorter fp32 list: it leaves softmax, log_softmax,
layer_norm, group_norm, sum, cumsum, exp, log, pow ... alone. For float32 inputs both
policies give the same dtypes; for a bfloat16 input (e.g. the output of a matmul)
those ops return bfloat16 on CPU but float32 on tpu (the CUDA policy, which the
issue asks for). Those cases are listed in DIVERGES_FROM_CPU and checked to be
float32 with values within bfloat16 tolerance of CPU's.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu  # noqa: F401
from tpu_testing import tol, to_tpu

BF16 = tol(torch.bfloat16)


def _r(*shape, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    return torch.randn(*shape, generator=g)


# ---------------------------------------------------------------- the device module


def test_device_module_amp_api():
    assert torch.tpu.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.amp.is_autocast_available("tpu")
    assert not torch.tpu.is_autocast_enabled()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("tpu")
        assert torch.tpu.is_autocast_enabled()
        assert torch.get_autocast_dtype("tpu") == torch.bfloat16
        assert not torch.is_autocast_enabled("cpu")
    assert not torch.is_autocast_enabled("tpu")
    with torch.autocast("tpu", dtype=torch.float16):
        assert torch.tpu.get_autocast_dtype() == torch.float16
    with pytest.warns(UserWarning, match="not supported"):
        with torch.autocast("tpu", dtype=torch.float64):
            assert not torch.is_autocast_enabled("tpu")


def test_autocast_only_affects_tpu_tensors():
    a, b = _r(4, 4), _r(4, 4, seed=1)
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert (a @ b).dtype == torch.float32  # cpu tensors: not tpu autocast's business
        assert (a.to("tpu") @ b.to("tpu")).dtype == torch.bfloat16
        with torch.autocast("tpu", enabled=False):
            assert (a.to("tpu") @ b.to("tpu")).dtype == torch.float32


# ---------------------------------------------------------------- per-op policy

# name -> (fn, float32 inputs). Output dtypes must equal CPU autocast's.
OPS = {
    # lower precision (bfloat16)
    "mm": (torch.mm, (_r(8, 16), _r(16, 4))),
    "bmm": (torch.bmm, (_r(2, 8, 16), _r(2, 16, 4))),
    "matmul": (torch.matmul, (_r(3, 8, 16), _r(16, 4))),
    "addmm": (torch.addmm, (_r(8, 4), _r(8, 16), _r(16, 4))),
    "addbmm": (torch.addbmm, (_r(8, 4), _r(2, 8, 16), _r(2, 16, 4))),
    "baddbmm": (torch.baddbmm, (_r(2, 8, 4), _r(2, 8, 16), _r(2, 16, 4))),
    "linear": (F.linear, (_r(8, 16), _r(4, 16), _r(4))),
    "linear_nobias": (F.linear, (_r(2, 8, 16), _r(4, 16))),
    "einsum": (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (_r(2, 8, 16), _r(2, 16, 4))),
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, padding=1), (_r(2, 3, 10), _r(4, 3, 3), _r(4))),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (_r(2, 3, 8, 8), _r(4, 3, 3, 3), _r(4))),
    "conv3d": (lambda x, w: F.conv3d(x, w), (_r(1, 2, 5, 5, 5), _r(3, 2, 2, 2, 2))),
    "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x, w, stride=2), (_r(2, 3, 6), _r(3, 4, 3))),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2),
                         (_r(2, 3, 5, 5), _r(3, 4, 3, 3), _r(4))),
    "conv_transpose3d": (lambda x, w: F.conv_transpose3d(x, w), (_r(1, 2, 3, 3, 3), _r(2, 3, 2, 2, 2))),
    "prelu": (F.prelu, (_r(2, 3, 4), _r(3))),
    "sdpa": (F.scaled_dot_product_attention, (_r(2, 4, 8, 16), _r(2, 4, 8, 16), _r(2, 4, 8, 16))),
    # float32 policies, float32 inputs
    "softmax": (lambda x: torch.softmax(x, -1), (_r(4, 10),)),
    "log_softmax": (lambda x: torch.log_softmax(x, 1), (_r(4, 10),)),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, (10,), w, b), (_r(4, 10), _r(10), _r(10))),
    "group_norm": (lambda x, w, b: F.group_norm(x, 2, w, b), (_r(2, 4, 5), _r(4), _r(4))),
    "exp": (torch.exp, (_r(4, 5),)),
    "log": (lambda x: torch.log(x.abs() + 1), (_r(4, 5),)),
    "pow": (lambda x: torch.pow(x, 2), (_r(4, 5),)),
    "sum": (torch.sum, (_r(4, 5),)),
    "cumsum": (lambda x: torch.cumsum(x, 1), (_r(4, 5),)),
    "cross_entropy": (F.cross_entropy, (_r(6, 5), torch.tensor([0, 1, 4, 2, 3, 1]))),
    "nll_loss": (lambda x, t: F.nll_loss(torch.log_softmax(x, 1), t), (_r(6, 5), torch.tensor([0, 1, 4, 2, 3, 1]))),
    "mse_loss": (F.mse_loss, (_r(4, 5), _r(4, 5, seed=1))),
    "l1_loss": (F.l1_loss, (_r(4, 5), _r(4, 5, seed=1))),
    "smooth_l1_loss": (F.smooth_l1_loss, (_r(4, 5), _r(4, 5, seed=1))),
    "bce_with_logits": (F.binary_cross_entropy_with_logits, (_r(4, 5), torch.rand(4, 5))),
    # ops without a policy: unchanged
    "relu": (torch.relu, (_r(4, 5),)),
    "add": (torch.add, (_r(4, 5), _r(4, 5, seed=1))),
}

# Chained: a bfloat16 intermediate (a matmul) feeds the op; output dtype equals CPU's.
CHAINED_SAME = {
    "mm_relu": lambda a, b: torch.relu(a @ b),
    "mm_cross_entropy": lambda a, b: F.cross_entropy(a @ b, torch.tensor([0, 1, 2, 3, 0, 1, 2, 3], device=a.device)),
    "mm_mse_loss": lambda a, b: F.mse_loss(a @ b, torch.zeros(8, 4, device=a.device)),
    "mm_bce_with_logits": lambda a, b: F.binary_cross_entropy_with_logits(a @ b, torch.ones(8, 4, device=a.device)),
    "mm_addcmul_promote": lambda a, b: torch.addcmul(a @ b, a[:, :4], b[:8]),
    "mm_mm": lambda a, b: (a @ b) @ b.t(),
}

# Chained, where CPU autocast keeps bfloat16 but the tpu (CUDA) policy runs in float32.
DIVERGES_FROM_CPU = {
    "mm_softmax": lambda a, b: torch.softmax(a @ b, -1),
    "mm_log_softmax": lambda a, b: torch.log_softmax(a @ b, -1),
    "mm_layer_norm": lambda a, b: F.layer_norm(a @ b, (4,)),
    "mm_group_norm": lambda a, b: F.group_norm((a @ b).unsqueeze(-1), 2),
    "mm_sum": lambda a, b: (a @ b).sum(),
    "mm_cumsum": lambda a, b: (a @ b).cumsum(0),
    "mm_exp": lambda a, b: (a @ b / 4).exp(),
    "mm_log": lambda a, b: ((a @ b).abs() + 1).log(),
    "mm_pow": lambda a, b: (a @ b).pow(2),
    "mm_norm": lambda a, b: (a @ b).norm(),
}


def _autocast(device, fn, args):
    with torch.autocast(device, dtype=torch.bfloat16):
        return fn(*args)


@pytest.mark.parametrize("name", list(OPS))
def test_op_policy_matches_cpu_autocast(name):
    fn, args = OPS[name]
    expected = _autocast("cpu", fn, args)
    actual = _autocast("tpu", fn, to_tpu(args))
    assert actual.device.type == "tpu"
    assert actual.dtype == expected.dtype, f"{name}: tpu {actual.dtype}, cpu autocast {expected.dtype}"
    # bf16 results rounded once on each side from float32 accumulators summed in another
    # order: they may sit one bf16 ulp (2**-8 relative = 0.4-0.8 x TOL[bf16]) apart, so 2.
    torch.testing.assert_close(actual.cpu(), expected, **tol(torch.bfloat16, 2))


@pytest.mark.parametrize("name", list(CHAINED_SAME))
def test_chained_policy_matches_cpu_autocast(name):
    args = (_r(8, 16), _r(16, 4))
    expected = _autocast("cpu", CHAINED_SAME[name], args)
    actual = _autocast("tpu", CHAINED_SAME[name], to_tpu(args))
    assert actual.dtype == expected.dtype
    torch.testing.assert_close(actual.cpu(), expected, **tol(torch.bfloat16, 2))  # as above: one bf16 ulp


@pytest.mark.parametrize("name", list(DIVERGES_FROM_CPU))
def test_chained_fp32_policy(name):
    args = (_r(8, 16), _r(16, 4))
    expected = _autocast("cpu", DIVERGES_FROM_CPU[name], args)
    actual = _autocast("tpu", DIVERGES_FROM_CPU[name], to_tpu(args))
    assert expected.dtype == torch.bfloat16  # CPU's policy leaves the op alone
    assert actual.dtype == torch.float32  # CUDA's (and tpu's) runs it in float32
    # CPU's op ran in bf16, tpu's in float32: CPU's result carries one more bf16 rounding
    # (two bf16 ulps from tpu's at most: 2 x TOL[bf16]; seed 0: 0.35 x)
    torch.testing.assert_close(actual.cpu(), expected.float(), **tol(torch.bfloat16, 2))


def test_binary_cross_entropy_is_banned():
    x = torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="unsafe to autocast"):
            F.binary_cross_entropy(x, torch.ones(4, device="tpu"))


def test_float16_autocast():
    a, b = _r(8, 16), _r(16, 4)
    with torch.autocast("tpu", dtype=torch.float16):
        out = a.to("tpu") @ b.to("tpu")
        sm = torch.softmax(out, -1)
    assert out.dtype == torch.float16 and sm.dtype == torch.float32
    # float16 results of float32 accumulators on both sides: the dtype's tolerance
    torch.testing.assert_close(out.cpu(), (a.half() @ b.half()), **tol(torch.float16))


# ---------------------------------------------------------------- small nets, forward + backward


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 1)
        return self.fc(x.flatten(1))


def _mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))


NETS = {
    "mlp": (_mlp, lambda: _r(8, 16)),
    "convnet": (ConvNet, lambda: _r(4, 3, 8, 8)),
}


@pytest.mark.parametrize("net", list(NETS))
def test_net_forward_backward_matches_cpu_autocast(net):
    make, data = NETS[net]
    torch.manual_seed(0)
    base = make()
    x = data()
    y = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2][: x.shape[0]])
    res = {}
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(base).to(device)
        with torch.autocast(device, dtype=torch.bfloat16):
            logits = model(x.to(device))
            loss = F.cross_entropy(logits, y.to(device))
        loss.backward()
        res[device] = (logits, loss, [p.grad for p in model.parameters()])
    (lc, sc, gc), (lt, st, gt) = res["cpu"], res["tpu"]
    assert lt.dtype == lc.dtype == torch.bfloat16
    assert st.dtype == sc.dtype == torch.float32
    # logits: bf16 from bf16 matmuls, one bf16 ulp apart at most (see
    # test_op_policy_matches_cpu_autocast); the loss is a float32 mean of those logits
    torch.testing.assert_close(lt.cpu(), lc, **tol(torch.bfloat16, 2))
    torch.testing.assert_close(st.cpu(), sc, **tol(torch.bfloat16, 2))
    for a, e in zip(gt, gc):
        assert a.dtype == e.dtype == torch.float32
        # grads pass through several bfloat16 matmuls: bfloat16 tolerance relative to the
        # gradient's own scale
        torch.testing.assert_close(a.cpu(), e, rtol=2e-2, atol=2e-2 * max(e.abs().max().item(), 1e-3))


# ---------------------------------------------------------------- GradScaler kernels


def _grad_lists():
    torch.manual_seed(5)
    clean = [torch.randn(3, 4), torch.randn(5).half(), torch.randn(2, 3).bfloat16(), torch.tensor(2.5)]
    dirty = [t.clone() for t in clean]
    dirty[1][2] = float("inf")
    dirty[2][1, 1] = float("nan")
    return clean, dirty


@pytest.mark.parametrize("which", ["clean", "dirty"])
@pytest.mark.parametrize("found0", [0.0, 1.0])
@pytest.mark.parametrize("inv", [0.125, 1.0, 1 / 3])
def test_amp_foreach_non_finite_check_and_unscale(which, found0, inv):
    clean, dirty = _grad_lists()
    grads = clean if which == "clean" else dirty
    for dtype_group in ([g for g in grads if g.dtype == torch.float32],
                        [g for g in grads if g.dtype == torch.float16],
                        [g for g in grads if g.dtype == torch.bfloat16]):
        cg = [g.clone() for g in dtype_group]
        tg = [g.to("tpu") for g in dtype_group]
        cf, tf = torch.full((1,), found0), torch.full((1,), found0, device="tpu")
        ci, ti = torch.full((1,), inv), torch.full((1,), inv, device="tpu")
        torch._amp_foreach_non_finite_check_and_unscale_(cg, cf, ci)
        torch._amp_foreach_non_finite_check_and_unscale_(tg, tf, ti)
        torch.testing.assert_close(tf.cpu(), cf, rtol=0, atol=0)
        for a, e in zip(tg, cg):
            assert a.dtype == e.dtype
            torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0, equal_nan=True)


def test_amp_unscale_mixed_dtypes_in_one_list():
    _, dirty = _grad_lists()
    cf, tf = torch.zeros(()), torch.zeros((), device="tpu")
    cg, tg = [g.clone() for g in dirty[:1] + dirty[3:]], [g.to("tpu") for g in dirty[:1] + dirty[3:]]
    torch._amp_foreach_non_finite_check_and_unscale_(cg, cf, torch.tensor(0.5))
    torch._amp_foreach_non_finite_check_and_unscale_(tg, tf, torch.tensor(0.5, device="tpu"))
    assert tf.item() == cf.item() == 0.0
    for a, e in zip(tg, cg):
        torch.testing.assert_close(a.cpu(), e, rtol=0, atol=0)


@pytest.mark.parametrize(
    "scale,tracker,found,growth,backoff,interval",
    [
        (1024.0, 0, 0.0, 2.0, 0.5, 3),   # counts up
        (1024.0, 2, 0.0, 2.0, 0.5, 3),   # grows, tracker resets
        (1024.0, 2, 1.0, 2.0, 0.5, 3),   # inf: backs off, tracker resets
        (1024.0, 5, 3.0, 2.0, 0.25, 3),  # found_inf is a count > 1
        (3e38, 0, 0.0, 2.0, 0.5, 1),     # growth would overflow: scale kept
        (65536.0, 1999, 0.0, 2.0, 0.5, 2000),
    ],
)
def test_amp_update_scale(scale, tracker, found, growth, backoff, interval):
    res = {}
    for device in ("cpu", "tpu"):
        s = torch.full((), scale, device=device)
        t = torch.full((), tracker, dtype=torch.int32, device=device)
        f = torch.full((), found, device=device)
        r = torch._amp_update_scale_(s, t, f, growth, backoff, interval)
        assert r is s
        res[device] = (s.cpu(), t.cpu())
    torch.testing.assert_close(res["tpu"][0], res["cpu"][0], rtol=0, atol=0)
    torch.testing.assert_close(res["tpu"][1], res["cpu"][1], rtol=0, atol=0)


# ---------------------------------------------------------------- GradScaler end to end


def _scaler_run(device, steps=8, inf_steps=(3,)):
    torch.manual_seed(0)
    model = _mlp().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 12, growth_interval=2)
    x, y = _r(16, 16).to(device), torch.arange(16).remainder(5).to(device)
    log = []
    for step in range(steps):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.float16):
            loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        if step in inf_steps:
            model[0].weight.grad[0, 0] = float("inf")
        before = [p.detach().clone() for p in model.parameters()]
        scaler.unscale_(opt)
        found = sum(v.item() for v in scaler._found_inf_per_device(opt).values())
        scaler.step(opt)
        scaler.update()
        skipped = all(torch.equal(b, p.detach()) for b, p in zip(before, model.parameters()))
        log.append((loss.item(), scaler.get_scale(), scaler._growth_tracker.item(), found, skipped))
    return log, [p.detach().cpu() for p in model.parameters()]


def test_grad_scaler_float16_matches_cpu():
    log_c, params_c = _scaler_run("cpu")
    log_t, params_t = _scaler_run("tpu")
    for step, (c, t) in enumerate(zip(log_c, log_t)):
        # scale, growth tracker, found_inf and whether the step was skipped: exact
        assert t[1:] == c[1:], f"step {step}: tpu {t}, cpu {c}"
        # the loss of a float16-autocast forward: float16 matmuls (1e-3 ulps) feeding a
        # softmax; 1e-2 relative is a few float16 ulps through the chain
        assert t[0] == pytest.approx(c[0], rel=1e-2)
    # step 3 had an inf gradient: skipped, scale halved, tracker reset
    assert log_c[3][3] == 1.0 and log_c[3][4] and log_c[3][1] == log_c[2][1] / 2 and log_c[3][2] == 0
    # it grew on the clean steps (growth_interval=2)
    assert log_c[1][1] == 2.0 ** 13
    for a, e in zip(params_t, params_c):
        # float32 parameters updated from float16-autocast gradients: float16 tolerance
        # (seed 0's worst: 0.2 x of it)
        torch.testing.assert_close(a, e, **tol(torch.float16))
