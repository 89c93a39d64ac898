"""The disk tier of the compile cache (docs/compile-cache.md), process by process.

Every test runs a small program in fresh subprocesses with TORCHTPU_CACHE_DIR in
its own tmp_path and checks the counters of torchtpu.metrics() ("compiles" counts
only real PJRT compiles) and the results against PyTorch on the CPU.
"""
import hashlib
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A few ops (matmul, add, relu, softmax, reduction) plus an optional loop of
# shapes; prints one JSON line: metrics, results, whether they match CPU torch.
PROGRAM = r"""
import json, os, sys
import torch, torchtpu

def step(n):
    g = torch.Generator().manual_seed(n)
    x, w, b = torch.randn(n, 12, generator=g), torch.randn(12, 5, generator=g), torch.randn(5, generator=g)
    ref = torch.softmax(torch.relu(x @ w + b), dim=-1).sum(0)
    out = torch.softmax(torch.relu(x.to("tpu") @ w.to("tpu") + b.to("tpu")), dim=-1).sum(0).cpu()
    return out, ref

shapes = [int(s) for s in os.environ.get("SHAPES", "4").split(",")]
ok, outs = True, []
for i, n in enumerate(shapes):
    out, ref = step(n)
    ok = ok and torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    outs.append(out.tolist())
    if os.environ.get("PROGRESS"):
        print("progress", i, flush=True)
if os.environ.get("CLEAR"):
    before = torchtpu.metrics()["compiles"]
    torchtpu.cache_clear()
    out, ref = step(shapes[0])
    ok = ok and torch.allclose(out, ref, rtol=1e-5, atol=1e-5)
    print("cleared", torchtpu.metrics()["compiles"] - before, flush=True)
refusals = None
if os.environ.get("TORCHTPU_TEST_REFUSED_OPTION"):  # the refusing test plugin (test_a_refused_...)
    import ctypes
    refusals = ctypes.CDLL(os.environ["TORCHTPU_PJRT_PLUGIN"]).torchtpu_test_refusals()
print(json.dumps({"metrics": torchtpu.metrics(), "ok": bool(ok), "outs": outs,
                  "cache_dir": torchtpu.cache_dir(), "refusals": refusals}), flush=True)
"""


def _env(cache_dir, **extra):
    env = dict(os.environ)
    for k in ("TORCHTPU_CACHE_DIR", "TORCHTPU_DISK_CACHE", "TORCHTPU_CACHE_MAX_BYTES",
              "TORCHTPU_QUICK_COMPILE_MAX_ELEMENTS"):
        env.pop(k, None)
    env["TORCHTPU_CACHE_DIR"] = str(cache_dir)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _popen(cache_dir, **extra):
    return subprocess.Popen([sys.executable, "-c", PROGRAM], cwd=REPO, env=_env(cache_dir, **extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc_out, proc_err, rc):
    assert rc == 0, f"process failed ({rc}):\n{proc_err[-4000:]}"
    lines = [ln for ln in proc_out.splitlines() if ln.startswith("{")]
    assert lines, f"no result line:\n{proc_out}\n{proc_err[-4000:]}"
    r = json.loads(lines[-1])
    r["stdout"], r["stderr"] = proc_out, proc_err
    return r


def run(cache_dir, **extra):
    p = _popen(cache_dir, **extra)
    out, err = p.communicate(timeout=300)
    return _result(out, err, p.returncode)


def entries(cache_dir):
    """Paths of the entry files (64 hex digits under a 2-character fan-out dir)."""
    found = []
    if not os.path.isdir(cache_dir):
        return found
    for sub in sorted(os.listdir(cache_dir)):
        d = os.path.join(cache_dir, sub)
        if len(sub) == 2 and os.path.isdir(d):
            found += [os.path.join(d, f) for f in sorted(os.listdir(d)) if len(f) == 64]
    return found


def disk(r):
    m = r["metrics"]
    return {k: m[k] for k in ("compiles", "disk_cache_hits", "disk_cache_misses", "disk_cache_errors",
                              "disk_cache_bytes_read", "disk_cache_bytes_written")}


def copy_cache(src, tmp_path):
    """A test's own copy of a cache directory shared by its module (it may damage it)."""
    dst = tmp_path / "cache"
    shutil.copytree(src, dst)
    return dst


# Both cache test modules use these two fixtures (test_compile_trace_cache imports
# them); `run` is the requesting module's own.
@pytest.fixture(scope="module")
def _cold(request, tmp_path_factory):
    """One cold process per module: (its cache directory, its result)."""
    cache = tmp_path_factory.mktemp("cold") / "cache"
    return cache, request.module.run(cache)


@pytest.fixture
def warm(_cold, tmp_path):
    """A copy of the directory the cold process filled, so that a test may damage
    its own; returns (dir, cold result)."""
    return copy_cache(_cold[0], tmp_path), _cold[1]


def test_cold_then_warm_process(warm):
    cache, cold = warm
    files = entries(cache)
    c = disk(cold)
    assert cold["ok"]
    assert c["compiles"] > 0 and c["disk_cache_misses"] == c["compiles"]
    assert c["disk_cache_hits"] == 0 and c["disk_cache_errors"] == 0
    assert 0 < len(files) <= c["compiles"]
    assert c["disk_cache_bytes_written"] == sum(os.path.getsize(f) for f in files)

    w = run(cache)
    d = disk(w)
    assert w["ok"] and w["cache_dir"] == str(cache)
    assert w["outs"] == cold["outs"]  # the same executables: bit-identical results
    assert d["compiles"] == 0
    assert d["disk_cache_hits"] == c["disk_cache_misses"] and d["disk_cache_misses"] == 0
    assert d["disk_cache_errors"] == 0 and d["disk_cache_bytes_written"] == 0
    assert d["disk_cache_bytes_read"] >= sum(os.path.getsize(f) for f in files)
    assert entries(cache) == files


def test_plugin_flags_from_the_environment_are_part_of_the_key(warm):
    """XLA_FLAGS changes what the plugin compiles without changing our options: a
    process with other flags compiles its own entries instead of loading programs
    compiled under different flags, and the original entries still serve a process
    without them."""
    cache, cold = warm
    files = entries(cache)
    flagged = run(cache, XLA_FLAGS="--xla_cpu_enable_fast_math=false")
    d = disk(flagged)
    assert flagged["ok"]
    assert d["disk_cache_hits"] == 0 and d["compiles"] == disk(cold)["compiles"] > 0
    assert len(entries(cache)) == 2 * len(files)
    plain = run(cache)
    assert plain["ok"] and disk(plain)["compiles"] == 0
    assert disk(plain)["disk_cache_hits"] == disk(cold)["disk_cache_misses"]


def _damage(files, how):
    if how == "swap":  # each entry holds another key's (intact) entry: foreign
        datas = [open(f, "rb").read() for f in files]
        for f, data in zip(files, datas[1:] + datas[:1]):
            open(f, "wb").write(data)
        return
    for f in files:
        data = bytearray(open(f, "rb").read())
        if how == "flip":
            data[len(data) // 2] ^= 0x40
        elif how == "truncate":
            data = data[: len(data) // 2]
        elif how == "empty":
            data = b""
        open(f, "wb").write(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "swap", "empty"])
def test_damaged_entries_are_recompiled(warm, how):
    cache, cold = warm
    files = entries(cache)
    if how == "swap" and len(files) < 2:
        pytest.skip("needs two entries")
    _damage(files, how)
    r = run(cache)
    d = disk(r)
    assert r["ok"] and r["outs"] == cold["outs"]
    assert d["disk_cache_errors"] == len(files)
    assert d["compiles"] == len(files) and d["disk_cache_hits"] == 0
    # The damaged entries were replaced by good ones: the next process only hits.
    again = disk(run(cache))
    assert again["compiles"] == 0 and again["disk_cache_errors"] == 0 and again["disk_cache_hits"] > 0


def test_plugin_that_cannot_load_its_entries_turns_the_tier_off(warm):
    """Entries that pass every check but hold bytes the plugin cannot deserialize:
    the tier turns itself off for the plugin after the first one; ops still run."""
    cache, cold = warm
    files = entries(cache)
    payload = b"not an executable" * 8
    for f in files:
        header = bytearray(open(f, "rb").read()[:88])
        header[16:24] = struct.pack("<Q", len(payload))
        header[56:88] = hashlib.sha256(payload).digest()
        open(f, "wb").write(bytes(header) + payload)
    r = run(cache)
    d = disk(r)
    assert r["ok"] and r["outs"] == cold["outs"]
    assert d["disk_cache_errors"] == 1 and d["disk_cache_misses"] == 1 and d["disk_cache_hits"] == 0
    assert d["compiles"] == len(files) and d["disk_cache_bytes_written"] == 0
    assert r["stderr"].count("torchtpu: compile cache") == 1
    assert "cannot load" in r["stderr"]


def test_killed_writer_leftovers_are_ignored_and_cleaned(warm):
    cache, cold = warm
    files = entries(cache)
    sub = os.path.dirname(files[0])
    stale = os.path.join(sub, ".tmp-999999-0-0")  # a writer killed long ago, before its rename
    live = os.path.join(sub, ".tmp-999999-1-0")  # maybe a live writer: must be left alone
    for path in (stale, live):
        with open(path, "wb") as f:
            f.write(open(files[0], "rb").read()[:100])
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    open(files[0], "wb").close()  # a zero-length entry file
    r = run(cache)
    d = disk(r)
    assert r["ok"] and r["outs"] == cold["outs"]
    assert d["disk_cache_errors"] == 1 and d["compiles"] == 1
    assert not os.path.exists(stale)  # removed by the store's directory scan
    assert os.path.exists(live)
    assert os.path.getsize(files[0]) > 100  # rewritten whole


def test_sigkill_mid_run_leaves_only_whole_entries(tmp_path):
    cache = tmp_path / "cache"
    shapes = ",".join(str(n) for n in range(1, 200))
    p = _popen(cache, SHAPES=shapes, PROGRESS=1)
    seen = 0
    for line in p.stdout:
        if line.startswith("progress"):
            seen += 1
            if seen == 6:
                break
    p.send_signal(signal.SIGKILL)
    p.communicate(timeout=60)
    assert p.returncode == -signal.SIGKILL
    assert entries(cache)
    # Whatever the kill interrupted, no entry is half written: a rerun of the
    # shapes it got through reads every entry without an error.
    r = run(cache, SHAPES=",".join(str(n) for n in range(1, seen + 1)))
    d = disk(r)
    assert r["ok"]
    assert d["disk_cache_errors"] == 0 and d["disk_cache_hits"] > 0


def test_two_processes_on_an_empty_dir(tmp_path):
    cache = tmp_path / "cache"
    procs = [_popen(cache, SHAPES="3,5,7"), _popen(cache, SHAPES="3,5,7")]
    results = [_result(*p.communicate(timeout=300), p.returncode) for p in procs]
    for r in results:
        assert r["ok"] and disk(r)["disk_cache_errors"] == 0
    assert results[0]["outs"] == results[1]["outs"]
    third = run(cache, SHAPES="3,5,7")
    d = disk(third)
    assert third["ok"] and d["compiles"] == 0 and d["disk_cache_errors"] == 0
    temps = [f for sub in os.listdir(cache) for f in os.listdir(os.path.join(cache, sub)) if f.startswith(".tmp-")]
    assert temps == []  # every writer renamed its temporary file


def _unwritable_dirs(tmp_path):
    dirs = ["/dev/null/torchtpu-cache"]  # under a regular file: unwritable even for root
    if os.geteuid() != 0:  # root ignores permission bits
        ro = tmp_path / "readonly"
        ro.mkdir()
        ro.chmod(0o500)
        dirs.append(str(ro))
    return dirs


def test_unwritable_dir_still_runs(tmp_path):
    for cache in _unwritable_dirs(tmp_path):
        r = run(cache, SHAPES="3,5")
        d = disk(r)
        assert r["ok"], cache
        assert d["compiles"] > 0 and d["disk_cache_hits"] == 0
        assert d["disk_cache_errors"] >= 1 and d["disk_cache_bytes_written"] == 0
        assert r["stderr"].count("torchtpu: compile cache") == 1  # warned once
        assert entries(cache) == []


def test_disabled_tier_writes_nothing(tmp_path):
    cache = tmp_path / "cache"
    r = run(cache, TORCHTPU_DISK_CACHE=0)
    d = disk(r)
    assert r["ok"] and r["cache_dir"] is None
    assert d["compiles"] > 0
    assert d["disk_cache_hits"] == d["disk_cache_misses"] == d["disk_cache_bytes_written"] == 0
    assert not os.path.exists(cache)


def test_size_cap_evicts_oldest(tmp_path):
    cache = tmp_path / "cache"
    one = run(tmp_path / "probe", SHAPES="2")
    entry = max(os.path.getsize(f) for f in entries(tmp_path / "probe"))
    cap = 3 * entry
    r = run(cache, SHAPES="2,3,4,5,6", TORCHTPU_CACHE_MAX_BYTES=cap)
    assert r["ok"] and one["ok"]
    files = entries(cache)
    assert files and sum(os.path.getsize(f) for f in files) <= cap
    assert disk(r)["disk_cache_bytes_written"] > cap  # so something was evicted


def test_cache_clear_empties_both_tiers(warm):
    cache, cold = warm
    files = entries(cache)
    r = run(cache, CLEAR=1)
    assert r["ok"]
    # After the clear the first program compiles again: neither tier still had it.
    cleared = [ln for ln in r["stdout"].splitlines() if ln.startswith("cleared")]
    assert cleared and int(cleared[0].split()[1]) == len(files)
    assert len(entries(cache)) == len(files)  # and its recompiles were stored again


def test_quick_tier_compiles_small_programs_only(tmp_path):
    """Compile tiers (docs/compile-cache.md): on the CPU plugin, loop-free programs
    whose arrays all hold at most 65536 elements compile with the quick options,
    larger ones with the defaults, and both match CPU. TORCHTPU_QUICK_COMPILE_MAX_ELEMENTS=0
    turns the tier off; the options are in the disk key, so a quick entry never
    serves a default compile of the same program."""
    # Strict mode (also under TORCHTPU_EAGER_MODE=fused): the tiers are about op programs.
    small = run(tmp_path / "a", TORCHTPU_EAGER_MODE="strict")  # SHAPES=4: every array has at most 60 elements
    m = small["metrics"]
    assert small["ok"] and m["compiles"] >= 4 and m["compiles_quick"] == m["compiles"], m
    # 8000 x 12 = 96000 elements in x: the matmul reading it compiles with the
    # defaults; the ops after it see 8000 x 5 = 40000 and compile quick.
    big = run(tmp_path / "b", SHAPES="8000", TORCHTPU_EAGER_MODE="strict")
    mb = big["metrics"]
    assert big["ok"] and 0 < mb["compiles_quick"] < mb["compiles"], mb
    off = run(tmp_path / "a", TORCHTPU_QUICK_COMPILE_MAX_ELEMENTS=0, TORCHTPU_EAGER_MODE="strict")
    mo = off["metrics"]
    assert off["ok"] and mo["compiles_quick"] == 0, mo
    assert mo["compiles"] == m["compiles"] and mo["disk_cache_hits"] == 0, (mo, m)
    import torch
    assert torch.allclose(torch.tensor(off["outs"]), torch.tensor(small["outs"]), rtol=1e-6, atol=1e-6)


REFUSING_PLUGIN = os.path.join(REPO, "build", "test-plugins", "refusing.so")


def _refusing(option):
    """The environment of a process on the CPU plugin refusing `option`
    (runtime/tests/plugins/refusing.c, built by `make test`)."""
    import xla_plugins.xla_cpu_pjrt as cpu
    assert os.path.exists(REFUSING_PLUGIN), f"{REFUSING_PLUGIN} is missing: `make test` builds it"
    return dict(TORCHTPU_PJRT_PLUGIN=REFUSING_PLUGIN, TORCHTPU_EAGER_MODE="strict",
                TORCHTPU_TEST_WRAPPED_PLUGIN=os.path.join(os.path.dirname(cpu.__file__), "xla_cpu_pjrt.so"),
                TORCHTPU_TEST_REFUSED_OPTION=option)


@pytest.mark.parametrize("option,quick", [("xla_option_torchtpu_never_sends", True),
                                          ("xla_backend_optimization_level", False),
                                          ("xla_cpu_use_xnnpack", True)])
def test_a_refused_compile_option_is_left_out(option, quick, tmp_path):
    """A CPU plugin without an option torchtpu sets (executable.c's overrides)
    refuses the compile: the program compiles again without it, once per process
    (later compiles leave it out), and the other override is still sent (the quick
    tiers are the LLVM level's). An option torchtpu never sends is the control:
    no refusal."""
    first = run(tmp_path / "cache", **_refusing(option))
    m = first["metrics"]
    refused = option != "xla_option_torchtpu_never_sends"
    assert first["ok"] and first["refusals"] == int(refused) and m["compiles"] >= 4, (first["refusals"], m)
    assert m["compiles_quick"] == (m["compiles"] if quick else 0), m
    if option != "xla_backend_optimization_level":
        return
    # The entries are stored under the options really used, so the next process
    # finds them after its own one refusal (its first lookup keys on the options
    # before the refusal, and misses).
    again = run(tmp_path / "cache", **_refusing(option))
    d = disk(again)
    assert again["ok"] and again["refusals"] == 1, again["refusals"]
    assert d["compiles"] == 1 and d["disk_cache_hits"] == m["compiles"] - 1, d
    assert again["outs"] == first["outs"]
