"""torch.profiler shows torchtpu's work (docs/profiler.md): aten ops on tpu with their
host time, compiles and compile-cache look-ups as named ranges, transfers; and
torchtpu.profile writes a Chrome trace that has them. Run in subprocesses with a
fresh compile cache so the first run must compile and the second must not."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys, torch, torchtpu
    x = torch.linspace(-1, 1, 37 * 41).reshape(37, 41).to("tpu")
    with torchtpu.profile(sys.argv[1], record_shapes=True) as prof:
        y = (x * 3.5).exp()
        y = (x * 3.5).exp()  # the same op again: an in-memory cache hit
        host = y.cpu()
    ref = (torch.linspace(-1, 1, 37 * 41).reshape(37, 41) * 3.5).exp()
    torch.testing.assert_close(host, ref, rtol=1.3e-6, atol=1e-5)
    names = {e.key for e in prof.key_averages()}
    assert "aten::exp" in names, sorted(names)
    # Strict eager compiles each op: the second mul and exp are in-memory cache hits.
    assert torchtpu.get_eager_mode() == "fused" or "torchtpu::cache_hit" in names, sorted(names)
""")


def _trace(tmp_path, name, cache, mode):
    path = tmp_path / name
    env = dict(os.environ, TORCHTPU_CACHE_DIR=str(cache), TORCHTPU_DISK_CACHE="1",
               TORCHTPU_EAGER_MODE=mode)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(path)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e.get("ph") == "X"]
    return events


def _named(events, name):
    return [e for e in events if e["name"] == name]


def _inside(inner, outer):
    return outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"] + 1


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_trace_has_ops_compiles_cache_and_transfers(tmp_path, mode):
    # Strict compiles mul and exp as two programs; fused records both pairs and
    # compiles them as one program at .cpu().
    programs = 2 if mode == "strict" else 1
    cache = tmp_path / "cache"
    first = _trace(tmp_path, "first.json", cache, mode)
    for op in ("aten::mul", "aten::exp"):
        assert _named(first, op), f"{op} missing from the trace"
        assert all(e["dur"] >= 0 for e in _named(first, op))
    compiles, misses = _named(first, "torchtpu::compile"), _named(first, "torchtpu::cache_miss")
    assert len(misses) >= programs and len(compiles) >= programs  # first time in this cache
    assert all(any(_inside(c, m) for m in misses) for c in compiles)
    assert _named(first, "torchtpu::disk_cache_lookup")
    if mode == "strict":
        assert len(_named(first, "torchtpu::cache_hit")) >= 2  # the second mul and exp
    assert _named(first, "torchtpu::copy_d2h")
    # A second process finds the programs on disk: loaded, never compiled.
    second = _trace(tmp_path, "second.json", cache, mode)
    assert len(_named(second, "torchtpu::disk_cache_hit")) >= programs
    assert not _named(second, "torchtpu::compile")


def test_transfers_and_synchronize_are_ranges():
    import torch
    import torchtpu

    with torchtpu.profile() as prof:
        x = torch.ones(1000).to("tpu")
        torch.tpu.synchronize()
        x.cpu()
    names = [e.name for e in prof.events()]
    for r in ("torchtpu::copy_h2d", "torchtpu::copy_d2h", "torchtpu::synchronize"):
        assert r in names, r
    assert set(torchtpu.profiler.RANGES) >= {"torchtpu::compile", "torchtpu::copy_h2d"}
