"""torch.compile(backend="tpu", dynamic=True): symbolic sizes.

XLA programs have static shapes. A compiled graph with symbolic sizes gets one
program per distinct set of sizes (at most TORCHTPU_GRAPH_PROGRAMS per graph,
then eager ops with one warning); a symbolic int used only in arithmetic stays
a runtime operand. Every result is compared with PyTorch eager on the CPU
(float32: rtol/atol 1e-5 for forward values, 1e-4 for gradients), and
torchtpu.metrics() says how many programs were built and how many graphs ran
as eager ops instead.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn

import torchtpu

_KEYS = ("graph_compiles", "graph_recompiles", "graph_fallbacks", "graph_runs")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _counts():
    m = torchtpu.metrics()
    return {k: m[k] for k in _KEYS}


def _delta(before):
    now = _counts()
    return {k: now[k] - before[k] for k in _KEYS}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _run(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught if "torchtpu" in str(w.message)]


def test_one_program_per_batch_size_reused_without_recompiles():
    m = _mlp()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0 = _counts()
    for b in (3, 5, 7, 3, 5):
        x = torch.randn(b, 8)
        y, warned = _run(f, x.to("tpu"))
        assert not warned, warned
        torch.testing.assert_close(y.cpu(), m(x), rtol=1e-5, atol=1e-5)
    d = _delta(c0)
    # Dynamo traced once (symbolic batch); three sizes → three programs, the
    # repeats of 3 and 5 reuse theirs.
    assert d["graph_compiles"] == 3 and d["graph_recompiles"] == 2, d
    assert d["graph_fallbacks"] == 0 and d["graph_runs"] == 5, d


def test_symbolic_int_used_as_a_size_fixes_it_per_program():
    """x.view(b * s, d) needs b * s as a static size: each (b, s) gets its own program."""
    def f(x, w):
        b, s, d = x.shape
        y = (x.reshape(b * s, d) @ w).relu()
        return y.reshape(b, s, -1).sum(dim=1)

    w = torch.randn(6, 5)
    g = torch.compile(f, backend="tpu", dynamic=True)
    c0 = _counts()
    for shape in ((2, 3, 6), (4, 5, 6), (2, 3, 6)):
        x = torch.randn(*shape)
        out, warned = _run(g, x.to("tpu"), w.to("tpu"))
        assert not warned, warned
        torch.testing.assert_close(out.cpu(), f(x, w), rtol=1e-5, atol=1e-5)
    d = _delta(c0)
    assert d["graph_compiles"] == 2 and d["graph_fallbacks"] == 0, d


def test_training_with_dynamic_batch_matches_cpu():
    m = _mlp()
    mt = copy.deepcopy(m).to("tpu")
    f = torch.compile(mt, backend="tpu", dynamic=True)
    for b in (4, 6):
        x = torch.randn(b, 8)
        f(x.to("tpu")).square().mean().backward()
        m(x).square().mean().backward()
    for (n, p), q in zip(mt.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=n)


def test_program_cap_warns_once_then_runs_eager(monkeypatch):
    monkeypatch.setenv("TORCHTPU_GRAPH_PROGRAMS", "2")
    m = _mlp()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0 = _counts()
    seen = []
    for b in (2, 3, 4, 5, 2):
        x = torch.randn(b, 8)
        y, warned = _run(f, x.to("tpu"))
        seen.append(warned)
        torch.testing.assert_close(y.cpu(), m(x), rtol=1e-5, atol=1e-5)
    assert not seen[0] and not seen[1] and not seen[4], seen
    assert len(seen[2]) == 1 and "TORCHTPU_GRAPH_PROGRAMS" in seen[2][0], seen
    assert not seen[3], seen  # one warning per graph
    d = _delta(c0)
    assert d["graph_compiles"] == 2 and d["graph_fallbacks"] == 2, d


def test_program_cap_must_be_a_positive_integer(monkeypatch):
    monkeypatch.setenv("TORCHTPU_GRAPH_PROGRAMS", "zero")
    f = torch.compile(lambda x: x * 2, backend="tpu", dynamic=True)
    with pytest.raises(Exception, match="TORCHTPU_GRAPH_PROGRAMS must be a positive integer"):
        f(torch.randn(3).to("tpu"))
