"""Runtime behaviour seen from Python: threads, eager modes, the cache, metrics."""
import threading

import pytest
import torch

import torchtpu


def test_ops_from_several_threads():
    """Users call ops from several threads (and autograd runs backward on its own)."""
    errors = []

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            a = torch.randn(8, 8, generator=g)
            b = torch.randn(8, 8, generator=g)
            ta, tb = a.to("tpu"), b.to("tpu")
            for _ in range(20):
                ta = (ta @ tb).tanh() + 0.5 * ta
                a = (a @ b).tanh() + 0.5 * a
            # 20 chained (matmul, tanh) steps: each step's float32 rounding differences
            # (summation order) feed the next, so 10x the single-op tolerance of 1e-5.
            torch.testing.assert_close(ta.cpu(), a, rtol=1e-4, atol=1e-4)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_debug_mode_is_synchronous_and_equal():
    outer = torchtpu.get_eager_mode()  # the suite runs in each mode (make test-modes)
    x = torch.linspace(-1, 1, 64, device="tpu")
    before_debug = (x.exp() * 3 - x).sum().item()
    before = torchtpu.metrics()["syncs"]
    with torchtpu.eager_mode("debug"):
        assert torchtpu.get_eager_mode() == "debug"
        debug = (x.exp() * 3 - x).sum().item()
        mid = torchtpu.metrics()["syncs"]
    assert torchtpu.get_eager_mode() == outer
    if outer != "fused":  # fused ran one fused program, not the same per-op executables
        assert debug == before_debug  # the same executables: bit-identical
    c = torch.linspace(-1, 1, 64)
    assert before_debug == pytest.approx((c.exp() * 3 - c).sum().item(), rel=1e-5)
    assert debug == pytest.approx((c.exp() * 3 - c).sum().item(), rel=1e-5)  # float32 tolerance: and right
    assert mid - before >= 4  # every op waited


def test_scalars_do_not_recompile():
    x = torch.ones(5, device="tpu")
    torchtpu.synchronize()  # fused mode: x's fill is not part of the loop's program

    def loop(scale, shift):
        for i in range(10):
            y = x * (scale * i) + shift * i
        return y.cpu()[0].item()

    # A first pass compiles what the mode needs (fused mode: the loop's recorded
    # program); a second pass with other scalars must reuse it, also where a scalar
    # happens to equal another (shift 1: `+ 1` at i = 1 beside add's alpha of 1).
    loop(0.25, 2)
    before = torchtpu.metrics()
    assert loop(0.1, 1) == torch.tensor(0.9 + 9, dtype=torch.float32).item()
    after = torchtpu.metrics()
    assert after["compiles"] == before["compiles"]


def test_kv_cache_offsets_do_not_recompile():
    cache = torch.zeros(2, 16, 4, device="tpu")
    cache[:, 0] = torch.ones(2, 4, device="tpu")
    before = torchtpu.metrics()["compiles"]
    for t in range(1, 16):
        cache[:, t] = torch.full((2, 4), float(t), device="tpu")
    assert torchtpu.metrics()["compiles"] == before
    expected = torch.arange(16, dtype=torch.float32).clamp(min=1).view(1, 16, 1).expand(2, 16, 4)
    torch.testing.assert_close(cache.cpu(), expected)


def test_metrics_count_transfers_and_buffers():
    m0 = torchtpu.metrics()
    x = torch.arange(1000, dtype=torch.float32).to("tpu")
    m1 = torchtpu.metrics()
    assert m1["h2d_bytes"] - m0["h2d_bytes"] >= 4000
    assert m1["live_buffers"] >= 1
    x.cpu()
    m2 = torchtpu.metrics()
    assert m2["d2h_bytes"] - m1["d2h_bytes"] >= 4000
    for key in ["ops_executed", "compiles", "compile_seconds", "cache_hits", "cache_misses", "h2d_transfers",
                "d2h_transfers", "fallbacks", "live_buffers", "live_bytes", "syncs"]:
        assert key in m2
