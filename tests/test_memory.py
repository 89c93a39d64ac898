"""torch.tpu's memory functions behave as torch.cuda's (docs/memory.md): they count
the device buffers torchtpu holds, per device and pool, and torch.accelerator reads
the same numbers."""
import pytest
import torch

import torchtpu  # noqa: F401

KIB = 1024
MIB = 1024 * 1024


def _settled():
    torch.tpu.synchronize()  # in-flight work holds buffers until it is retired
    return torch.tpu.memory_allocated()


def test_allocated_follows_a_tensor_exactly():
    base = _settled()
    # An upload is one buffer of exactly the tensor's bytes.
    x = torch.arange(1024, dtype=torch.float32).to("tpu")
    assert _settled() - base == 4 * KIB
    y = torch.arange(512, dtype=torch.int64).to("tpu")
    assert _settled() - base == 8 * KIB
    del x
    assert _settled() - base == 4 * KIB
    del y
    assert _settled() == base


def test_peak_and_its_reset():
    base = _settled()
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    x = torch.zeros(256 * KIB, dtype=torch.uint8).to("tpu")
    del x
    assert _settled() == base
    assert torch.tpu.max_memory_allocated() >= base + 256 * KIB
    torch.tpu.reset_peak_memory_stats("tpu:0")
    assert torch.tpu.max_memory_allocated(torch.device("tpu", 0)) == base
    torch.tpu.reset_max_memory_allocated(0)  # torch.cuda's older name
    assert torch.tpu.max_memory_allocated(0) == base


def test_stats_keys_pools_and_totals():
    torch.tpu.reset_accumulated_memory_stats()
    _settled()
    before = torch.tpu.memory_stats()
    big = torch.zeros(2 * MIB, dtype=torch.uint8).to("tpu")  # large pool: over 1 MiB
    small = torch.zeros(100, dtype=torch.uint8).to("tpu")
    _settled()
    s = torch.tpu.memory_stats()
    assert s["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert s["allocated_bytes.large_pool.current"] - before["allocated_bytes.large_pool.current"] == 2 * MIB
    assert s["allocated_bytes.small_pool.current"] - before["allocated_bytes.small_pool.current"] == 100
    assert s["allocation.all.current"] - before["allocation.all.current"] == 2
    assert s["allocated_bytes.all.allocated"] >= 2 * MIB + 100
    # No pool of our own: reserved and active memory are the allocated memory.
    assert s["reserved_bytes.all.current"] == s["allocated_bytes.all.current"] == s["active_bytes.all.current"]
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_reserved() == torch.tpu.max_memory_allocated()
    del big, small
    _settled()
    s = torch.tpu.memory_stats()
    assert s["allocated_bytes.large_pool.freed"] >= 2 * MIB
    torch.tpu.reset_accumulated_memory_stats()
    s = torch.tpu.memory_stats()
    assert s["allocated_bytes.all.allocated"] == 0 and s["allocated_bytes.all.freed"] == 0


def test_in_place_updates_do_not_grow_memory():
    w = torch.randn(64 * KIB, device="tpu")
    w.mul_(0.5).add_(1.0)  # caches the scalar operands first
    base = _settled()
    for _ in range(20):
        w.mul_(0.5).add_(1.0)
    assert _settled() == base


def test_model_training_returns_to_its_parameters():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to("tpu")
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    torch.tpu.empty_cache()  # cached scalars come and go (a direct-mapped cache evicts)
    base = _settled()
    x = torch.randn(32, 256, device="tpu")
    loss = model(x).square().mean()
    loss.backward()
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    assert _settled() - base >= grads  # gradients live on the device
    model.zero_grad(set_to_none=True)
    del x, loss
    torch.tpu.empty_cache()
    assert _settled() == base  # activations, gradients and the step's cached scalars are gone
    assert base >= params


def test_accelerator_reads_the_same_counters():
    x = torch.ones(1000, device="tpu")
    _settled()
    assert torch.accelerator.memory_allocated(0) == torch.tpu.memory_allocated(0)
    assert torch.accelerator.memory_stats(0)["allocation.all.current"] == torch.tpu.memory_stats()["allocation.all.current"]
    del x


def test_mem_get_info_is_the_plugins():
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    if torchtpu._C.platform_name() == "cpu":  # the host's memory
        with open("/proc/meminfo") as f:
            meminfo = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f}
        assert total == meminfo["MemTotal"]
        return
    # The allocator's limit and use: 64 MiB more in use is 64 MiB less free.
    big = torch.empty(64 << 20, dtype=torch.uint8, device="tpu")
    torch.tpu.synchronize()
    free_after, total_after = torch.tpu.mem_get_info()
    assert total_after == total and free_after <= free - (64 << 20)
    del big


def test_empty_cache_releases_cached_scalars():
    x = torch.randn(8, device="tpu")
    y = x.add(0.123456)  # the scalar operand is uploaded once and cached
    _settled()
    before = torch.tpu.memory_stats()["allocation.all.current"]
    torch.tpu.empty_cache()
    assert torch.tpu.memory_stats()["allocation.all.current"] < before
    assert torch.equal(x.add(0.123456).cpu(), y.cpu())  # the cache refills on use


def test_large_uploads_lend_pooled_host_blocks():
    # CPU plugin: an upload of >= 1 MiB becomes a device buffer over a reused host
    # block (no page faults), counted in h2d_lent; other plugins copy (0 lent).
    lends = torchtpu._C.platform_name() == "cpu"
    n = 1 << 20  # 4 MiB of float32
    before = torchtpu.metrics()["h2d_lent"]
    small = torch.randn(1000).to("tpu")  # small uploads keep the copying path
    assert torchtpu.metrics()["h2d_lent"] == before
    for i in range(12):
        a = torch.full((n,), float(i + 1)).to("tpu")
        total = (a * 2 + 1).sum()     # still running when a dies (strict: asynchronous)
        half = a[::2]                 # a view keeps the storage alive
        del a
        b = torch.full((n,), -3.0).to("tpu")  # may take a's block once it is free
        assert total.item() == pytest.approx((2 * (i + 1) + 1) * n, rel=1e-6)
        assert half.sum().item() == (i + 1) * n // 2
        assert b.min().item() == b.max().item() == -3.0
        del half, b
    assert torchtpu.metrics()["h2d_lent"] - before == (24 if lends else 0)
    host = torch.randn(n)
    orig = host.clone()
    dev = host.to("tpu")
    host.add_(1)  # the device copy does not follow later writes to the source
    assert torch.equal(dev.cpu(), orig)
    assert small.shape == (1000,)


def test_summary_and_bad_devices():
    text = torch.tpu.memory_summary()
    assert "Allocated memory" in text and "large pool" in text
    assert "Allocated memory" in torch.tpu.memory_summary(abbreviated=True)
    with pytest.raises(ValueError, match="expected a tpu device"):
        torch.tpu.memory_allocated("cpu")
    with pytest.raises(RuntimeError, match="is not a device"):
        torch.tpu.memory_stats(torch.tpu.device_count() + 5)
