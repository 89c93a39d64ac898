"""Fused optimizer steps on tpu: torch.optim.{Adam, AdamW, SGD, Adagrad}(fused=True).

They reach aten::_fused_adam_ / _fused_adamw_ / _fused_sgd_ / _fused_adagrad_ (float lr
and .tensor_lr), lowered in runtime/src/ops/optim.c. Each case runs 20 steps on the
same parameters (several shapes: 2-d, 0-d, 1-d, 3-d, empty) and gradients on CPU and
on tpu and compares parameters, gradients and every optimizer state tensor (exp_avg,
exp_avg_sq, max_exp_avg_sq, momentum_buffer, sum, step) with

  * CPU fused=True (PyTorch's fused CPU kernels, the same algorithm), and
  * CPU foreach=False and foreach=True (the reference math, another evaluation order).

float32 tolerance: tpu_testing's 1e-5 (rtol and atol). GradScaler-style calls pass
grad_scale / found_inf (the optimizer attributes GradScaler.step sets): grads are
unscaled in place, and a step with found_inf == 1 changes nothing.
"""
import copy

import pytest
import torch

import torchtpu
from tpu_testing import tol

STEPS = 20
SHAPES = [(4, 3), (), (7,), (2, 3, 5), (3, 0)]
F32 = tol(torch.float32)


def _params(device, dtype=torch.float32, shapes=SHAPES):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(s, generator=g).to(dtype).to(device).requires_grad_() for s in shapes]


def _grad(step, j, shape, device, dtype, noncontig):
    """Gradient j of `step`: the same values on every device; non-contiguous views
    (transposed, strided) when asked, made on the device itself."""
    g = torch.Generator().manual_seed(1000 * step + j)
    if noncontig and len(shape) >= 2:
        rev = tuple(reversed(shape))
        return torch.randn(rev, generator=g).to(dtype).to(device).permute(*reversed(range(len(shape))))
    if noncontig and len(shape) == 1:
        return torch.randn(2 * shape[0], generator=g).to(dtype).to(device)[::2]
    return torch.randn(shape, generator=g).to(dtype).to(device)


def _snapshot(params, opt):
    """Everything a step may change: params, grads and each state entry, by name."""
    out = {}
    for j, p in enumerate(params):
        out[f"param{j}"] = p.detach().cpu().clone()
        out[f"grad{j}"] = p.grad.detach().cpu().clone() if p.grad is not None else None
        for k, v in sorted(opt.state[p].items()):
            out[f"{k}{j}"] = v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v
    return out


def _run(device, make_opt, *, dtype=torch.float32, noncontig=False, scale=None, skip=(), emulate=False,
         lr_schedule=None, shapes=SHAPES, steps=STEPS):
    """`steps` optimizer steps. With `scale`, grads are multiplied by it and the
    optimizer gets grad_scale / found_inf (found_inf = 1 on the `skip` steps, whose
    grads also hold an inf). `emulate` does what that amounts to for a non-fused
    reference: unscaled grads, and no step at all on the skipped steps."""
    params = _params(device, dtype, shapes)
    opt = make_opt(params)
    for step in range(steps):
        skipped = step in skip
        for j, p in enumerate(params):
            g = _grad(step, j, p.shape, device, dtype, noncontig)
            if scale is not None and not emulate:
                g = g * scale
                if skipped and j == 0:
                    g[0, 0] = float("inf")
            p.grad = g
        if lr_schedule is not None:
            opt.param_groups[0]["lr"].fill_(lr_schedule(step))
        if scale is not None and emulate:
            if not skipped:
                opt.step()
            continue
        if scale is not None:  # as GradScaler.step sets them: a (1,) scale, a 0-d found_inf
            opt.grad_scale = torch.full((1,), float(scale), device=device)
            opt.found_inf = torch.full((), float(skipped), device=device)
        before = _snapshot(params, opt) if skipped else None
        opt.step()
        if skipped:  # nothing moved: params, the (still scaled) grads, state and step
            after = _snapshot(params, opt)
            for k, v in before.items():
                assert torch.equal(after[k], v), f"{device}: skipped step {step} changed {k}"
    return _snapshot(params, opt)


def _compare(actual, expected, what, **tolerance):
    tolerance = tolerance or F32
    assert actual.keys() == expected.keys(), f"{what}: state keys {actual.keys()} != {expected.keys()}"
    for k, e in expected.items():
        a = actual[k]
        if e is None or a is None:
            assert a is None and e is None, f"{what}: {k}"
            continue
        assert a.dtype == e.dtype and a.shape == e.shape, \
            f"{what}: {k}: {a.dtype}{tuple(a.shape)} vs {e.dtype}{tuple(e.shape)}"
        torch.testing.assert_close(a, e, msg=lambda m: f"{what}: {k}: {m}", **tolerance)


def _check(make_opt, references=("foreach=False", "foreach=True"), **kw):
    """tpu fused vs CPU fused, and vs CPU non-fused references (same math)."""
    got = _run("tpu", lambda p: make_opt(p, fused=True), **kw)
    _compare(got, _run("cpu", lambda p: make_opt(p, fused=True), **kw), "cpu fused")
    for ref in references:
        foreach = ref == "foreach=True"
        ref_kw = dict(kw, emulate=True) if kw.get("scale") is not None else kw
        want = _run("cpu", lambda p: make_opt(p, foreach=foreach), **ref_kw)
        _compare(got, want, f"cpu {ref}")
    return got


# ---------------------------------------------------------------- Adam / AdamW


@pytest.mark.parametrize("wd", [0.0, 0.1])
@pytest.mark.parametrize("maximize", [False, True])
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("cls", [torch.optim.Adam, torch.optim.AdamW], ids=["adam", "adamw"])
def test_adam(cls, amsgrad, maximize, wd):
    got = _check(lambda p, **k: cls(p, lr=1e-2, betas=(0.8, 0.99), weight_decay=wd, amsgrad=amsgrad,
                                    maximize=maximize, **k))
    assert got["step0"].item() == STEPS
    assert ("max_exp_avg_sq0" in got) == amsgrad


@pytest.mark.parametrize("cls,amsgrad", [(torch.optim.Adam, True), (torch.optim.AdamW, False)], ids=["adam", "adamw"])
def test_adam_tensor_lr(cls, amsgrad):
    # A cpu tensor lr reaches the .tensor_lr overload as is (PyTorch moves it only when
    # it is on an accelerator). foreach=True refuses a tensor lr without capturable.
    _check(lambda p, **k: cls(p, lr=torch.tensor(1e-2), weight_decay=0.1, amsgrad=amsgrad, maximize=True, **k),
           references=("foreach=False",))


def test_tensor_lr_schedule_does_not_recompile():
    """The tensor lr is a runtime operand: a new value each step compiles nothing new."""
    def schedule(step):
        return 1e-2 * (1.0 - step / STEPS)

    def make(p, **k):
        return torch.optim.AdamW(p, lr=torch.tensor(1e-2), weight_decay=0.01, **k)

    misses = []

    def tracking(p, **k):
        opt = make(p, **k)
        step = opt.step

        def counted(*a, **kw):
            r = step(*a, **kw)
            # A sync per step: in fused eager mode each step is then one recording,
            # the same program every step unless the lr were baked into it.
            torch.tpu.synchronize()
            misses.append(torchtpu.metrics()["cache_misses"])
            return r

        opt.step = counted
        return opt

    got = _run("tpu", lambda p: tracking(p, fused=True), lr_schedule=schedule)
    assert misses[-1] == misses[2], f"cache misses grew while only lr changed: {misses}"
    _compare(got, _run("cpu", lambda p: make(p, fused=True), lr_schedule=schedule), "cpu fused")
    _compare(got, _run("cpu", lambda p: make(p, foreach=False), lr_schedule=schedule), "cpu foreach=False")


# ---------------------------------------------------------------------- SGD

SGD_CASES = {
    "plain": dict(lr=0.1),
    "plain_wd_max": dict(lr=0.1, weight_decay=0.01, maximize=True),
    "momentum": dict(lr=0.05, momentum=0.9),
    "nesterov_wd": dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-2),
    "dampening_max": dict(lr=0.05, momentum=0.5, dampening=0.1, maximize=True),
    "nesterov_max_wd": dict(lr=0.05, momentum=0.8, nesterov=True, maximize=True, weight_decay=0.1),
}


@pytest.mark.parametrize("case", list(SGD_CASES))
def test_sgd(case):
    got = _check(lambda p, **k: torch.optim.SGD(p, **SGD_CASES[case], **k))
    assert (got.get("momentum_buffer0") is None) == ("momentum" not in SGD_CASES[case])


def test_sgd_tensor_lr():
    _check(lambda p, **k: torch.optim.SGD(p, lr=torch.tensor(0.05), momentum=0.9, weight_decay=1e-2, **k),
           references=("foreach=False",))


# ------------------------------------------------------------------ Adagrad

ADAGRAD_CASES = {
    "plain": dict(lr=0.1),
    "decay_wd": dict(lr=0.1, lr_decay=0.05, weight_decay=0.1),
    "max_init": dict(lr=0.1, maximize=True, initial_accumulator_value=0.5, eps=1e-6),
}


@pytest.mark.parametrize("case", list(ADAGRAD_CASES))
def test_adagrad(case):
    got = _check(lambda p, **k: torch.optim.Adagrad(p, **ADAGRAD_CASES[case], **k))
    assert got["step0"].item() == STEPS


def test_adagrad_tensor_lr():
    _check(lambda p, **k: torch.optim.Adagrad(p, lr=torch.tensor(0.1), lr_decay=0.05, **k),
           references=("foreach=False",))


# ------------------------------------------------------------- GradScaler-style

SCALED = {
    "adam": lambda p, **k: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, **k),
    "adamw_amsgrad_max": lambda p, **k: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, maximize=True, **k),
    "sgd_momentum": lambda p, **k: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True, **k),
    "sgd": lambda p, **k: torch.optim.SGD(p, lr=0.05, weight_decay=0.01, **k),
    "adagrad": lambda p, **k: torch.optim.Adagrad(p, lr=0.1, lr_decay=0.01, **k),
}


@pytest.mark.parametrize("name", list(SCALED))
def test_grad_scale_and_found_inf(name):
    """Grads scaled by 1024 with grad_scale=1024 (a power of two: unscaling is exact),
    found_inf = 1 on three steps (inf grads there): those steps change nothing (checked
    inside _run) and the others match unscaled non-fused steps. SGD with momentum does
    not skip step 0: PyTorch's fused SGD then keeps its empty_like (uninitialised)
    buffers and reads them on the next step, on CPU too."""
    skip = (2, 5, 11) if name == "sgd_momentum" else (0, 5, 11)
    got = _check(SCALED[name], scale=1024.0, skip=skip, references=("foreach=False",))
    if "step0" in got:
        assert got["step0"].item() == STEPS - 3


# --------------------------------------------------------- views, sizes, dtypes

NONCONTIG = {
    "adamw": lambda p, **k: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True, **k),
    "sgd": lambda p, **k: torch.optim.SGD(p, lr=0.05, momentum=0.9, **k),
    "adagrad": lambda p, **k: torch.optim.Adagrad(p, lr=0.1, **k),
}


@pytest.mark.parametrize("name", list(NONCONTIG))
def test_noncontiguous_grads(name):
    """Transposed and strided gradients. Compared with the non-fused CPU steps only:
    PyTorch's CPU _fused_sgd_ reads a non-contiguous grad in storage order (its kernel
    makes a contiguous copy and then ignores it), which is not the mathematical step."""
    make = NONCONTIG[name]
    got = _run("tpu", lambda p: make(p, fused=True), noncontig=True)
    for foreach in (False, True):
        _compare(got, _run("cpu", lambda p: make(p, foreach=foreach), noncontig=True), f"cpu foreach={foreach}")


def test_many_tensors_mixed_shapes():
    """No operand cap: 300 parameters of 3 shapes in one fused call (5 lists each)."""
    shapes = [(3,), (2, 2), ()] * 100
    make = lambda p, **k: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, **k)  # noqa: E731
    got = _run("tpu", lambda p: make(p, fused=True), shapes=shapes, steps=3)
    _compare(got, _run("cpu", lambda p: make(p, fused=True), shapes=shapes, steps=3), "cpu fused")


LOWP = {
    "adamw": lambda p, **k: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True, **k),
    "adagrad": lambda p, **k: torch.optim.Adagrad(p, lr=0.1, weight_decay=0.1, **k),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("name", list(LOWP))
def test_low_precision(name, dtype):
    """bf16/f16 params, grads and state, computed in f32 and rounded on store, like the
    CPU kernels; tpu_testing's bf16/f16 tolerance. (CPU's vectorized loop rounds a few
    constants, weight_decay and eps, to the dtype first, its tail loop does not; the
    lowering keeps them in f32: seed 0's worst is 0.6 of the tolerance.)"""
    make = LOWP[name]
    got = _run("tpu", lambda p: make(p, fused=True), dtype=dtype)
    _compare(got, _run("cpu", lambda p: make(p, fused=True), dtype=dtype), "cpu fused", **tol(dtype))


def _sgd_low_precision_reference(dtype, lr, momentum, weight_decay):
    """The fused SGD step's math for a bf16/f16 param: f32 compute, the momentum buffer
    and the param rounded to the dtype on store, the update from the f32 buffer."""
    params = [p.detach() for p in _params("cpu", dtype)]
    bufs = [None] * len(params)
    for step in range(STEPS):
        for j, p in enumerate(params):
            g = _grad(step, j, p.shape, "cpu", dtype, False).float() + p.float() * weight_decay
            b = g if bufs[j] is None else bufs[j].float() * momentum + g
            bufs[j] = b.to(dtype)
            params[j] = (p.float() - b * lr).to(dtype)
    return params, bufs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
def test_low_precision_sgd(dtype):
    """Against the kernels' math written out, not CPU fused=True: PyTorch's CPU kernel
    loads the bf16/f16 momentum buffer as float32 in its vectorized loop (tensors of 16+
    elements get a wrong update there; its scalar tail loop is right)."""
    make = lambda p, **k: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-2, **k)  # noqa: E731
    got = _run("tpu", lambda p: make(p, fused=True), dtype=dtype)
    params, bufs = _sgd_low_precision_reference(dtype, 0.05, 0.9, 1e-2)
    for j, (p, b) in enumerate(zip(params, bufs)):
        torch.testing.assert_close(got[f"param{j}"], p, msg=lambda m: f"param{j}: {m}", **tol(dtype))
        torch.testing.assert_close(got[f"momentum_buffer{j}"], b, msg=lambda m: f"buffer{j}: {m}", **tol(dtype))


# ------------------------------------------------------------------ direct calls


def _adam_lists(device, n=3, amsgrad=True):
    g = torch.Generator().manual_seed(7)
    shapes = [(5,), (2, 3), ()][:n]
    mk = lambda: [torch.randn(s, generator=g).to(device) for s in shapes]  # noqa: E731
    params, grads, m = mk(), mk(), mk()
    v = [t.abs() for t in mk()]
    vmax = [t.abs() for t in mk()] if amsgrad else []
    steps = [torch.tensor(float(k + 3), device=device) for k in range(len(shapes))]
    return params, grads, m, v, vmax, steps


@pytest.mark.parametrize("lr_device", ["tpu", "cpu"])
def test_fused_adamw_tensor_lr_direct(lr_device):
    """The .tensor_lr overload called directly, lr on tpu (a device operand) or a 0-d
    cpu tensor; different step counts per parameter; every list written back."""
    out = {}
    for device in ("cpu", "tpu"):
        lists = _adam_lists(device)
        lr = torch.tensor(0.05, device=device if lr_device == "tpu" else "cpu")
        torch._fused_adamw_(*lists, lr=lr, beta1=0.9, beta2=0.999, weight_decay=0.1, eps=1e-8, amsgrad=True,
                            maximize=False, grad_scale=torch.tensor(2.0, device=device),
                            found_inf=torch.tensor(0.0, device=device))
        out[device] = [[t.cpu() for t in lst] for lst in lists]
    for la, le in zip(out["tpu"], out["cpu"]):
        for a, e in zip(la, le):
            torch.testing.assert_close(a, e, **F32)


def test_fused_adagrad_float_lr_writes_steps_back_unchanged():
    """The float-lr overload marks state_steps as written (Tensor(d!)[]); the kernel
    reads them only."""
    out = {}
    for device in ("cpu", "tpu"):
        params, grads, sums, _, _, steps = _adam_lists(device)
        sums = [s.abs() for s in sums]
        torch._fused_adagrad_(params, grads, sums, steps, lr=0.1, lr_decay=0.1, weight_decay=0.0, eps=1e-10,
                              maximize=False)
        out[device] = [t.cpu() for t in params + grads + sums + steps]
    for a, e in zip(out["tpu"], out["cpu"]):
        torch.testing.assert_close(a, e, **F32)
    assert [t.item() for t in out["tpu"][-3:]] == [3.0, 4.0, 5.0]


def test_found_inf_other_than_one_does_not_skip():
    """Like the CPU and CUDA kernels, only found_inf == 1 skips (GradScaler writes 0 or 1)."""
    out = {}
    for device in ("cpu", "tpu"):
        params, grads, _, sums, _, _ = _adam_lists(device)
        torch._fused_sgd_(params, grads, [], weight_decay=0.0, momentum=0.0, lr=0.1, dampening=0.0,
                          nesterov=False, maximize=False, is_first_step=False,
                          found_inf=torch.tensor(2.0, device=device))
        out[device] = [t.cpu() for t in params]
    before = _adam_lists("cpu")[0]
    for a, e, b in zip(out["tpu"], out["cpu"], before):
        torch.testing.assert_close(a, e, **F32)
        assert not torch.equal(a, b)


@pytest.mark.parametrize("case", ["lengths", "amsgrad_without_max", "shape", "momentum_without_buffers"])
def test_bad_arguments_raise(case):
    params, grads, m, v, vmax, steps = _adam_lists("tpu")
    kw = dict(lr=0.1, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8, amsgrad=True, maximize=False)
    with pytest.raises(RuntimeError, match="_fused_"):
        if case == "lengths":
            torch._fused_adam_(params, grads[:2], m, v, vmax, steps, **kw)
        elif case == "amsgrad_without_max":
            torch._fused_adam_(params, grads, m, v, [], steps, **kw)
        elif case == "shape":
            torch._fused_adamw_(params, [grads[1], grads[0], grads[2]], m, v, vmax, steps, **kw)
        else:
            torch._fused_sgd_(params, grads, [], weight_decay=0.0, momentum=0.9, lr=0.1, dampening=0.0,
                              nesterov=False, maximize=False, is_first_step=False)
        torchtpu.synchronize()


def test_optimizer_state_dict_round_trip():
    """A fused tpu optimizer's state (device step tensors included) reloads into a
    fresh one and continues exactly like an uninterrupted run."""
    make = lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True, fused=True)  # noqa: E731
    whole = _run("tpu", make, steps=6)
    params = _params("tpu")
    opt = make(params)
    for step in range(6):
        if step == 3:
            sd = copy.deepcopy(opt.state_dict())
            params = [p.detach().clone().requires_grad_() for p in params]
            opt = make(params)
            opt.load_state_dict(sd)
        for j, p in enumerate(params):
            p.grad = _grad(step, j, p.shape, "tpu", torch.float32, False)
        opt.step()
    _compare(_snapshot(params, opt), whole, "resumed")


@pytest.mark.parametrize("opt_name", ["AdamW", "Adam", "SGD", "Adagrad"])
def test_float_lr_schedule_never_recompiles(opt_name):
    """A float lr that changes every step (LambdaLR, the Trainer's schedules) is a
    runtime operand of the fused op: after warm-up no step compiles, and the
    parameters follow CPU's fused optimizer under the same schedule."""
    torch.manual_seed(0)
    cpu = torch.nn.Linear(8, 4)
    dev = copy.deepcopy(cpu).to("tpu")
    make = getattr(torch.optim, opt_name)
    kw = dict(lr=1e-2, fused=True)
    if opt_name == "SGD":
        kw["momentum"] = 0.9
    oc, od = make(cpu.parameters(), **kw), make(dev.parameters(), **kw)
    sc = torch.optim.lr_scheduler.LambdaLR(oc, lambda s: 1.0 / (s + 1))
    sd = torch.optim.lr_scheduler.LambdaLR(od, lambda s: 1.0 / (s + 1))
    x = torch.randn(5, 8)
    for step in range(6):
        if step == 3:
            compiles = torchtpu.metrics()["compiles"]
        for mod, opt, sch, xx in ((cpu, oc, sc, x), (dev, od, sd, x.to("tpu"))):
            opt.zero_grad()
            mod(xx).square().sum().backward()
            opt.step()
            sch.step()
    assert torchtpu.metrics()["compiles"] == compiles
    for pc, pd in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(pd.detach().cpu(), pc.detach(), rtol=1e-5, atol=1e-5)
