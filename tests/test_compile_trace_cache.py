"""The trace tier of the compile cache (docs/compile-cache.md): AOTAutograd's
results for torch.compile(backend="tpu") graphs, stored in the disk tier so that
a new process skips AOTAutograd's tracing and partitioning.

Each test runs a whole compiled training step (forward, loss, backward, AdamW)
in fresh subprocesses with TORCHTPU_CACHE_DIR in its own tmp_path, and checks
torchtpu.metrics(), AOTAutograd's own counters, and the results against
PyTorch eager on the CPU (fp32, 3 steps: rtol 1e-4, atol 1e-5).
"""
import json
import os
import pickle
import subprocess
import sys

import pytest

from test_compile_cache import _cold, _env, entries, warm  # noqa: F401 (fixtures)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = r"""
import json, os, sys
import torch, torchtpu
from torch._dynamo.utils import counters

if os.environ.get("INDUCTOR_REGISTERED"):  # as a process that used Inductor first would have
    from torch._inductor.codegen.common import init_backend_registration
    init_backend_registration()

def train(dev, compiled):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.GELU(),
                            torch.nn.Linear(32, 4)).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(8, 16, generator=g).to(dev), torch.randn(8, 4, generator=g).to(dev)
    def step():
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    if compiled:
        step = torch.compile(step, backend="tpu", dynamic=bool(os.environ.get("DYNAMIC")))
    losses = [step().item() for _ in range(3)]
    return losses, [p.detach().cpu() for p in m.parameters()]

losses, params = train("tpu", True)
inductor = "torch._inductor.compile_fx" in sys.modules  # before the CPU run, which compiles nothing
ref_losses, ref_params = train("cpu", False)
ok = all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(params, ref_params))
ok = ok and torch.allclose(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-5)
print(json.dumps({"metrics": torchtpu.metrics(), "aot": dict(counters["aot_autograd"]), "ok": bool(ok),
                  "inductor": inductor, "losses": losses, "params": [p.flatten().tolist() for p in params]}), flush=True)
"""


def _trace_env(cache_dir, **extra):
    env = _env(cache_dir, **extra)
    for k in ("TORCHTPU_TRACE_CACHE", "DYNAMIC", "INDUCTOR_REGISTERED"):
        if k not in extra:
            env.pop(k, None)
    return env


def run(cache_dir, **extra):
    env = _trace_env(cache_dir, **extra)
    p = subprocess.run([sys.executable, "-c", PROGRAM], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, f"process failed ({p.returncode}):\n{p.stderr[-4000:]}"
    r = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])
    r["stderr"] = p.stderr
    return r


def trace(r):
    m = r["metrics"]
    return {"hits": m["trace_cache_hits"], "misses": m["trace_cache_misses"], "compiles": m["compiles"],
            "errors": m["disk_cache_errors"], "saved": r["aot"].get("autograd_cache_saved", 0),
            "aot_hits": r["aot"].get("autograd_cache_hit", 0), "aot_misses": r["aot"].get("autograd_cache_miss", 0)}


def blob_entries(cache_dir):
    """The tier's entries whose payload is a pickle (traced graphs), not an executable."""
    found = []
    for path in entries(cache_dir):
        try:
            pickle.loads(open(path, "rb").read()[88:])  # after diskcache.h's 88-byte header
        except Exception:
            continue
        found.append(path)
    return found


def test_warm_process_skips_aotautograd(warm):
    cache, cold = warm
    c = trace(cold)
    assert cold["ok"]
    # The train step's joint graph (forward + backward) and the optimizer step's graph.
    assert c["misses"] >= 2 and c["hits"] == 0 and c["saved"] == c["misses"]
    assert len(blob_entries(cache)) == c["saved"]

    w = run(cache)
    d = trace(w)
    assert w["ok"]
    assert d["hits"] == c["misses"] and d["misses"] == 0
    assert d["aot_hits"] == c["misses"] and d["aot_misses"] == 0  # AOTAutograd traced nothing
    assert d["compiles"] == 0  # the programs rebuilt from the stored graphs are the same programs
    assert w["losses"] == cold["losses"] and w["params"] == cold["params"]
    # Tracing opt.step() did not import Inductor (torchtpu/integrations.py), cold or warm
    assert not cold["inductor"] and not w["inductor"]


@pytest.mark.slow  # a process importing Inductor's code generators: 11-28 s (make test-slow)
def test_key_ignores_whether_inductor_registered_its_devices(warm):
    """The key does not import Inductor's code generators (docs/compile-cache.md):
    a process where Inductor had registered its devices before finds the entries
    of one where it had not."""
    cache, cold = warm
    w = run(cache, INDUCTOR_REGISTERED=1)
    d = trace(w)
    assert w["ok"] and d["hits"] == trace(cold)["misses"] and d["misses"] == 0 and d["compiles"] == 0
    assert w["losses"] == cold["losses"] and w["params"] == cold["params"]


def test_damaged_trace_entries_are_traced_again(warm):
    """One entry with a flipped byte, the other truncated: both fail their checks,
    are removed and counted, and their graphs are traced and stored again."""
    cache, cold = warm
    blobs = blob_entries(cache)
    assert len(blobs) >= 2
    for i, path in enumerate(blobs):
        data = bytearray(open(path, "rb").read())
        if i % 2 == 0:
            data[len(data) // 2] ^= 0x40
        else:
            data = data[: len(data) // 2]
        open(path, "wb").write(bytes(data))
    r = run(cache)
    d = trace(r)
    assert r["ok"] and r["losses"] == cold["losses"] and r["params"] == cold["params"]
    assert d["errors"] == len(blobs) and d["hits"] == 0
    assert d["aot_misses"] == trace(cold)["misses"] and d["saved"] == d["aot_misses"]
    again = trace(run(cache))  # replaced by whole entries
    assert again["hits"] == trace(cold)["misses"] and again["errors"] == 0


@pytest.mark.slow  # two processes tracing with symbolic sizes: 37-41 s (make test-slow)
def test_symbolic_graphs_are_not_stored(tmp_path):
    """dynamic=True: the train step's graph has symbolic sizes (the batch) and is
    traced in every process; the optimizer step's (parameters keep static sizes)
    is stored."""
    cache = tmp_path / "cache"
    cold = run(cache, DYNAMIC=1)
    c = trace(cold)
    assert cold["ok"] and c["saved"] < c["misses"] and len(blob_entries(cache)) == c["saved"]
    w = run(cache, DYNAMIC=1)
    d = trace(w)
    assert w["ok"] and d["hits"] == c["saved"] and d["misses"] == c["misses"] - c["saved"]
    assert w["losses"] == cold["losses"]


def test_disk_tier_off_turns_the_trace_tier_off(tmp_path):
    cache = tmp_path / "cache"
    r = run(cache, TORCHTPU_DISK_CACHE=0)
    d = trace(r)
    assert r["ok"] and d["hits"] == d["misses"] == d["saved"] == 0
    assert not os.path.exists(cache) or not entries(cache)


def test_trace_tier_switch(tmp_path):
    """TORCHTPU_TRACE_CACHE=0: AOTAutograd runs (and no key is computed), the
    executables are still stored and served."""
    cache = tmp_path / "cache"
    r = run(cache, TORCHTPU_TRACE_CACHE=0)
    d = trace(r)
    assert r["ok"] and d["hits"] == d["misses"] == d["saved"] == 0
    assert entries(cache) and not blob_entries(cache)
    w = run(cache, TORCHTPU_TRACE_CACHE=0)
    assert w["ok"] and trace(w)["compiles"] == 0 and trace(w)["hits"] == 0


def test_fingerprint_follows_the_decompositions(monkeypatch):
    """torch's key does not see torchtpu's decompositions (they follow the set of
    lowerings): the entry's name does."""
    import torch
    from torchtpu import _trace_cache, compile as tc
    monkeypatch.setattr(_trace_cache, "_FINGERPRINT", None)
    before = _trace_cache._blob_name("k")
    table = dict(tc.decompositions())
    table[torch.ops.aten.lift_fresh.default] = None  # one more op decomposed
    monkeypatch.setattr(tc, "decompositions", lambda: table)
    monkeypatch.setattr(_trace_cache, "_FINGERPRINT", None)
    assert _trace_cache._blob_name("k") != before


CONSTANTS = r"""
import json
import torch, torchtpu

def f(x):  # a tensor constant in the graph: stored on the CPU, uploaded when rebuilt
    c = torch.tensor([1.5, -2.0, 3.0], device=x.device)
    return (x * c).sum(0) + torch.arange(3, device=x.device)

x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
rows = []
for _ in range(2):
    torch._dynamo.reset()  # forget the compiled function: the second compile is a lookup again
    out = torch.compile(f, backend="tpu")(x.to("tpu")).cpu()
    m = torchtpu.metrics()
    rows.append([torch.allclose(out, f(x), rtol=1e-6, atol=1e-6), m["trace_cache_hits"], m["trace_cache_misses"]])
print(json.dumps(rows))
"""


def test_second_compile_in_a_process_hits_and_keeps_constants(tmp_path):
    env = _trace_env(tmp_path / "cache")
    p = subprocess.run([sys.executable, "-c", CONSTANTS], cwd=REPO, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    (ok1, hits1, misses1), (ok2, hits2, misses2) = json.loads(p.stdout.splitlines()[-1])
    assert ok1 and ok2
    assert (hits1, misses1) == (0, 1) and (hits2, misses2) == (1, 1)
