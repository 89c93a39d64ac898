"""Buffer donation: a compiled graph's in-place outputs reuse their inputs' buffers.

A parameter or optimizer state updated in place by a compiled step is given to
the program (PJRT donation), so the step never holds the old and the new value
at once. Donation is only taken when nothing else holds the buffer; otherwise
the output is a new buffer and every other holder keeps its values. Results are
compared with PyTorch on the CPU (float32: rtol/atol 1e-5 after a few SGD steps,
exact for the integer-valued updates). `torchtpu.metrics()["donated_buffers"]`
counts the donations. Fused eager mode records graph runs into its own program
and donates nothing (docs/compile.md); the values are checked there too.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu

FUSED = torchtpu.get_eager_mode() == "fused"
# Launches are queued behind earlier work only in strict mode: debug mode waits for each
# one, fused mode records. Deferred donations need a queue.
QUEUED = torchtpu.get_eager_mode() == "strict"
DEBUG = torchtpu.get_eager_mode() == "debug"
MIB = 1 << 20


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _donated():
    return torchtpu.metrics()["donated_buffers"]


def _add_one(t):
    t.add_(1)


def _add_one_and_return(t):
    return t.add_(1)


def _double_and_return(t):
    y = t * 2
    t.copy_(y)
    return y


@pytest.mark.parametrize("step", [_add_one, _add_one_and_return, _double_and_return])
def test_in_place_update_reuses_the_buffer(step):
    """The new value takes the old one's place: no second 4 MiB during the run. A
    graph also returning the value it writes into its input computes it once: the
    input takes the donated buffer and the result shares it (before, the result
    was a second buffer); the result is still its own tensor."""
    p = torch.ones(4 * MIB // 4, device="tpu")  # 4 MiB, made on the device
    ref = torch.ones(MIB)
    f = torch.compile(step, backend="tpu")
    for _ in range(2):
        f(p)
        step(ref)
    torch.tpu.synchronize()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    d0 = _donated()
    out = f(p)
    want = step(ref)
    torch.tpu.synchronize()
    assert torch.equal(p.cpu(), ref) and (out is None if want is None else torch.equal(out.cpu(), want))
    if not FUSED:
        assert _donated() - d0 == 1
        assert torch.tpu.max_memory_allocated() - base < MIB
        assert torch.tpu.memory_allocated() == base
    if step is _double_and_return:  # eager returns a new tensor: writes to it stay apart from p
        kept = out.clone().cpu()
        f(p)  # out holds the old buffer now: not donated, out keeps its values
        step(ref)
        assert torch.equal(out.cpu(), kept) and torch.equal(p.cpu(), ref)
        out.add_(1)
        assert torch.equal(p.cpu(), ref) and torch.equal(out.cpu(), kept + 1)


def test_a_tensor_sharing_the_buffer_keeps_its_values():
    p = torch.arange(1000, dtype=torch.float32, device="tpu")
    f = torch.compile(_add_one, backend="tpu")
    f(p)
    keep = p.clone()  # a copy adopts p's buffer: two holders
    view = p[10:20]   # a view of p's own storage sees the update
    d0 = _donated()
    f(p)
    torch.tpu.synchronize()
    if not FUSED:
        assert _donated() - d0 == 0  # keep holds the buffer: not donated
    ref = torch.arange(1000, dtype=torch.float32)
    assert torch.equal(keep.cpu(), ref + 1)
    assert torch.equal(p.cpu(), ref + 2)
    assert torch.equal(view.cpu(), ref[10:20] + 2)
    del keep
    f(p)
    torch.tpu.synchronize()
    if not FUSED:
        assert _donated() - d0 == 1  # sole holder again
    assert torch.equal(p.cpu(), ref + 3)
    assert torch.equal(view.cpu(), ref[10:20] + 3)


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_compiled_train_step_donates_parameters_and_state():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    model_t = copy.deepcopy(model).to("tpu")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_t = torch.optim.SGD(model_t.parameters(), lr=0.1, momentum=0.9)
    step = torch.compile(_train_step, backend="tpu")
    gen = torch.Generator().manual_seed(1)
    donated = []
    for _ in range(4):
        x = torch.randn(16, 64, generator=gen)
        y = torch.randint(0, 10, (16,), generator=gen)
        d0 = _donated()
        loss = _train_step(model, opt, x, y)
        loss_t = step(model_t, opt_t, x.to("tpu"), y.to("tpu"))
        donated.append(_donated() - d0)
        torch.testing.assert_close(loss_t.cpu(), loss, rtol=1e-5, atol=1e-5)
    for p, p_t in zip(model.parameters(), model_t.parameters()):
        torch.testing.assert_close(p_t.cpu(), p, rtol=1e-5, atol=1e-5)
    for p, p_t in zip(model.parameters(), model_t.parameters()):
        torch.testing.assert_close(opt_t.state[p_t]["momentum_buffer"].cpu(), opt.state[p]["momentum_buffer"],
                                   rtol=1e-5, atol=1e-5)
    if not FUSED:
        # From the second step on, every parameter and momentum buffer is donated.
        assert all(d >= 8 for d in donated[1:]), donated


def _write_rows(cache, pos, rows):
    cache.index_copy_(0, pos, rows)


def test_checked_program_donates_a_cache_written_in_place():
    """A KV-cache style update: index_copy_ has device-side index checks, and the
    program still donates the cache; a bad index still raises at the next sync."""
    cache_c = torch.zeros(64, 16)
    cache = cache_c.to("tpu")
    f = torch.compile(_write_rows, backend="tpu")
    gen = torch.Generator().manual_seed(0)
    donated = []
    for step in range(4):
        pos = torch.tensor([step * 3, 40 + step])
        rows = torch.randn(2, 16, generator=gen)
        d0 = _donated()
        _write_rows(cache_c, pos, rows)
        f(cache, pos.to("tpu"), rows.to("tpu"))
        torch.tpu.synchronize()
        donated.append(_donated() - d0)
        assert torch.equal(cache.cpu(), cache_c)
    if not FUSED:
        assert donated[-1] == 1, donated
    with pytest.raises(IndexError, match="index_copy"):
        f(cache, torch.tensor([2, 64], device="tpu"), torch.ones(2, 16, device="tpu"))
        torch.tpu.synchronize()




def _slow(n=2048, products=6):
    """A row computed behind ~100 GFLOP of matmuls (0.1-0.6 s of device work), and a
    function computing the same on the CPU (called once the test checked what ran
    meanwhile)."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g) / n ** 0.5
    y = a.to("tpu")
    torch.tpu.synchronize()
    at = y
    for _ in range(products):
        y = y @ at

    def on_cpu():
        yc = a
        for _ in range(products):
            yc = yc @ a
        return yc[0, :4]
    return y[0, :4], on_cpu


def _add_to_each(ts, y):
    for t in ts:
        t.add_(y)


def test_in_place_write_does_not_wait_for_the_device():
    """A compiled in-place update queued behind slow work returns at once. PJRT's CPU
    client keeps a donated buffer's donation hold until the execution that took it
    starts, and destroying the handle waits for that hold: releasing the old buffer
    right after the launch made the host wait for the device at every in-place write
    (a compiled decode loop ran one token at a time, 2.8x CPU eager instead of 3.4x).
    The handle is now destroyed once that execution finished (`donations_deferred`
    counts those released earlier)."""
    step = torch.compile(_add_one, backend="tpu")
    p = torch.zeros(4, device="tpu")
    step(p)                               # build the program first
    torch.tpu.synchronize()
    y, yc = _slow()
    p = p + y                             # a fresh buffer, written behind the matmuls
    m0 = torchtpu.metrics()
    step(p)                               # donates it
    busy = not torch.tpu.current_stream().query()
    m1 = torchtpu.metrics()
    for _ in range(20):
        step(p)
    torch.tpu.synchronize()
    torch.testing.assert_close(p.cpu(), yc() + 22, rtol=1e-4, atol=1e-4)  # float32 sums of 2048 products
    if not FUSED:                          # fused mode records instead of launching
        assert m1["donated_buffers"] - m0["donated_buffers"] == 1
    if QUEUED:
        assert m1["donations_deferred"] - m0["donations_deferred"] == 1 and busy
    elif DEBUG:                            # the launch was waited for, nothing to defer
        assert m1["donations_deferred"] == m0["donations_deferred"]


def test_deferred_donations_past_the_ring():
    """More donated handles waiting for their executions than the deferral ring holds
    (1024): the oldest is waited for to make room, and every value stays right. 20
    steps updating 60 tensors in place, all queued behind the same slow work (26
    executions: the CPU plugin blocks a launch past 32 in flight): the first 1024 of
    the 1200 handles are deferred, then the host waits."""
    step = torch.compile(_add_to_each, backend="tpu")
    ts = [torch.full((4,), float(i), device="tpu") for i in range(60)]
    step(ts, torch.ones(4, device="tpu"))
    torch.tpu.synchronize()
    y, yc = _slow()
    d0 = torchtpu.metrics()["donations_deferred"]
    for _ in range(20):
        step(ts, y)
    deferred = torchtpu.metrics()["donations_deferred"] - d0
    torch.tpu.synchronize()
    want = yc() * 20
    for i, t in enumerate(ts):
        torch.testing.assert_close(t.cpu(), want + i + 1, rtol=1e-4, atol=1e-4)
    if QUEUED:
        assert deferred >= 1024, deferred
    elif DEBUG:
        assert deferred == 0, deferred
