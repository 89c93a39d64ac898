"""No fixed limits that real training hits (issue 7, defect 5).

An op takes any number of operands and returns any number of results: the
gradient scaler's unscale over hundreds of gradients, cat/stack of hundreds or
thousands of tensors (each strided view is a buffer plus an offset operand),
foreach optimizers over hundreds of parameters. An int list longer than a
lowering can read (TPU_MAX_RANK = 16) is a clean error naming the op, never a
read past its buffer.

Tolerances: values that go through the same float32 arithmetic on both sides
use tpu_testing's float32 tolerance; unscaling by a power of two and
concatenation are exact, so those compare with torch.equal.
"""
import pytest
import torch

import torchtpu
from tpu_testing import assert_same, tol, to_cpu, to_tpu

F32 = tol(torch.float32)


def _gen(seed):
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------ GradScaler


@pytest.mark.parametrize("with_inf", [False, True])
def test_unscale_300_float16_grads(with_inf):
    g = _gen(1)
    grads = [torch.randn(5, generator=g).to(torch.float16) for _ in range(300)]
    if with_inf:
        grads[217][3] = float("inf")
    cpu = [x.clone() for x in grads]
    tpu = [x.to("tpu") for x in grads]
    found_c, found_t = torch.zeros(1), torch.zeros(1, device="tpu")
    inv_c, inv_t = torch.full((1,), 1 / 1024), torch.full((1,), 1 / 1024, device="tpu")
    torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, inv_c)
    torch._amp_foreach_non_finite_check_and_unscale_(tpu, found_t, inv_t)
    assert found_c.item() == (1.0 if with_inf else 0.0)
    assert torch.equal(found_t.cpu(), found_c)
    for t, c in zip(tpu, cpu):  # a power-of-two scale: exact
        assert t.dtype == torch.float16
        assert torch.equal(t.cpu(), c)


def _scaler_run(device, nparams=300, steps=3):
    g = _gen(2)
    params = [torch.nn.Parameter(torch.randn(4, generator=g).to(device)) for _ in range(nparams)]
    opt = torch.optim.SGD(params, lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=1)
    for step in range(steps):
        opt.zero_grad()
        # float16 compute as under autocast; step 1 overflows (inf loss -> skipped step)
        loss = sum((p.to(torch.float16) * (i % 7 + 1)).sum() for i, p in enumerate(params))
        if step == 1:
            loss = loss * float("inf")
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return [p.detach() for p in params], scaler.get_scale()


def test_gradscaler_step_300_params_equals_cpu():
    cpu_params, cpu_scale = _scaler_run("cpu")
    tpu_params, tpu_scale = _scaler_run("tpu")
    assert cpu_scale == tpu_scale == 2.0**10 * 2 * 0.5 * 2  # grow, back off, grow
    for t, c in zip(tpu_params, cpu_params):
        assert_same(t, c)


# ------------------------------------------------------------------ cat / stack


def test_cat_of_1000_tensors():
    g = _gen(3)
    xs = [torch.randn(i % 3 + 1, 4, generator=g) for i in range(1000)]
    out = torch.cat(to_tpu(xs))
    assert torch.equal(out.cpu(), torch.cat(xs))
    out1 = torch.cat(to_tpu(xs), dim=0).sum(1)  # the result feeds on: a usable tensor
    assert_same(out1, torch.cat(xs).sum(1))


def test_cat_of_1000_strided_views():
    base = torch.randn(1000, 6, generator=_gen(4))
    tb = base.to("tpu")
    out = torch.cat([tb[i, 1::2] for i in range(1000)])
    assert torch.equal(out.cpu(), torch.cat([base[i, 1::2] for i in range(1000)]))


def test_stack_of_300_strided_views():
    # each view is a buffer and an offset operand: 600 operands, over the old 256
    base = torch.randn(300, 10, generator=_gen(5))
    tb = base.to("tpu")
    before = torchtpu.metrics()["cache_misses"]
    out = torch.stack([tb[i, ::2] for i in range(300)])
    assert torchtpu.metrics()["cache_misses"] > before  # really compiled here
    assert torch.equal(out.cpu(), torch.stack([base[i, ::2] for i in range(300)]))


# ------------------------------------------------------------------ foreach


def _tensors(n, seed, shape=(3,)):
    g = _gen(seed)
    return [torch.randn(*shape, generator=g) for _ in range(n)]


def test_foreach_ops_over_500_tensors():
    xs, ys = _tensors(500, 6), _tensors(500, 7)
    txs, tys = to_tpu(xs), to_tpu(ys)
    torch._foreach_add_(xs, 1.5)
    torch._foreach_add_(txs, 1.5)
    torch._foreach_mul_(xs, 2.0)
    torch._foreach_mul_(txs, 2.0)
    torch._foreach_add_(xs, ys, alpha=0.5)
    torch._foreach_add_(txs, tys, alpha=0.5)
    torch._foreach_mul_(xs, ys)
    torch._foreach_mul_(txs, tys)
    assert_same(txs, xs)
    assert_same(torch._foreach_norm(txs), torch._foreach_norm(xs))
    assert_same(torch._foreach_norm(txs, 1), torch._foreach_norm(xs, 1))


def _params_with_grads(device, n=300, seed=8):
    g = _gen(seed)
    ps = [torch.nn.Parameter(torch.randn(3, 2, generator=g).to(device)) for _ in range(n)]
    for p in ps:
        p.grad = torch.randn(3, 2, generator=g).to(device)
    return ps


def test_clip_grad_norm_foreach_300_params():
    pc, pt = _params_with_grads("cpu"), _params_with_grads("tpu")
    nc = torch.nn.utils.clip_grad_norm_(pc, 1.0, foreach=True)
    nt = torch.nn.utils.clip_grad_norm_(pt, 1.0, foreach=True)
    assert_same(nt, nc)
    assert_same([p.grad for p in pt], [p.grad for p in pc])


@pytest.mark.parametrize("opt_cls", [torch.optim.Adam, torch.optim.AdamW, torch.optim.SGD])
def test_foreach_optimizer_300_params(opt_cls):
    pc, pt = _params_with_grads("cpu"), _params_with_grads("tpu")
    kw = dict(lr=0.01, foreach=True)
    if opt_cls is torch.optim.SGD:
        kw["momentum"] = 0.9
    oc, ot = opt_cls(pc, **kw), opt_cls(pt, **kw)
    for _ in range(2):
        oc.step()
        ot.step()
    assert_same([p.detach() for p in pt], [p.detach() for p in pc])


# ------------------------------------------------------------------ int lists


@pytest.mark.parametrize(
    "name, fn",
    [
        ("flip", lambda x: torch.flip(x, list(range(20)))),
        ("roll", lambda x: torch.roll(x, [1] * 20, [0, 1] * 10)),
        ("std", lambda x: torch.std(x, [0, 1] * 10)),
        ("native_layer_norm", lambda x: torch.ops.aten.native_layer_norm(x, [3] * 20, None, None, 1e-5)),
    ],
)
def test_int_list_longer_than_max_rank_is_a_clean_error(name, fn):
    x = torch.randn(2, 3, device="tpu")
    with pytest.raises(RuntimeError, match=rf"{name}: argument 1 is a list of 20 values, more than the 16"):
        out = fn(x)
        to_cpu(out)
    # the runtime is unharmed: the same op with a short list works
    assert_same(torch.flip(x, [0, 1]), torch.flip(x.cpu(), [0, 1]))


def test_int_list_of_max_rank_still_works():
    # 16 dims (the most a tensor has) is within every lowering's buffer
    x = torch.randn([1] * 14 + [2, 3], generator=_gen(9))
    dims = list(range(16))
    assert_same(torch.flip(x.to("tpu"), dims), torch.flip(x, dims))
    assert_same(torch.roll(x.to("tpu"), [1] * 16, dims), torch.roll(x, [1] * 16, dims))
    assert_same(x.to("tpu").sum(dims[::-1]), x.sum(dims[::-1]))
