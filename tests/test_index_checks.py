"""Out-of-range indices raise instead of returning clamped or dropped values (issue 7).

Each checked op records a failing index in the device's error word; strict mode raises
at the next synchronising call (with no host sync per op), debug mode at the op. The
error class and text are PyTorch CPU's for the same call (IndexError for most ops,
RuntimeError for gather/scatter/index_add). Valid indices, including negative ones
where PyTorch allows them, still match CPU, and after an error the device keeps working.
"""
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from tpu_testing import check, to_tpu


@pytest.fixture(autouse=True)
def _asynchronous_mode():
    """These tests are about errors raised at the next synchronisation, which debug mode
    never defers: when the suite runs in debug mode (make test-modes), they run in strict
    (test_debug_raises_at_the_op covers debug)."""
    if torchtpu.get_eager_mode() != "debug":
        yield
        return
    with torchtpu.eager_mode("strict"):
        yield


# ------------------------------------------------------------------ the cases
# name -> fn(x, *inputs) that returns a tensor; inputs are built on CPU and moved.
# Exactly one bad index per case, so the reported value is the one CPU reports.
X = lambda: torch.randn(3, 4)  # noqa: E731
i64 = lambda *v: torch.tensor(v, dtype=torch.int64)  # noqa: E731

CASES = {
    "index_select": (lambda x, i: x.index_select(0, i), lambda: (X(), i64(0, 5))),
    "index_select_negative": (lambda x, i: x.index_select(0, i), lambda: (X(), i64(-1))),
    # (dim 0: CPU's kernel for an inner dim raises a RuntimeError with another text;
    # tpu raises the IndexError "index out of range in self" for every dim)
    "index_select_int32": (lambda x, i: x.index_select(0, i), lambda: (X(), torch.tensor([3], dtype=torch.int32))),
    "index_select_0d_self": (lambda x, i: x.index_select(0, i), lambda: (torch.tensor(1.5), i64(1))),
    "gather": (lambda x, i: x.gather(0, i), lambda: (X(), i64(0, 5, 0, 1).view(1, 4))),
    "gather_negative": (lambda x, i: x.gather(1, i), lambda: (X(), i64(-1, 0, 0).view(3, 1))),
    "embedding": (lambda w, i: F.embedding(i, w), lambda: (X(), i64(1, 7))),
    "index": (lambda x, i: x[i], lambda: (X(), i64(2, 5))),
    "index_negative": (lambda x, i: x[i], lambda: (X(), i64(-4))),
    "index_second_dim": (lambda x, i, j: x[i, j], lambda: (X(), i64(0, 1), i64(2, 9))),
    "setitem": (lambda x, i: _setitem(x, i, 1.0), lambda: (X(), i64(5))),
    "index_put_accumulate": (lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True),
                             lambda: (X(), i64(1, 3), torch.ones(2, 4))),
    "scatter_": (lambda x, i: x.clone().scatter_(0, i, 1.0), lambda: (X(), i64(5, 0, 0, 0).view(1, 4))),
    "scatter_add_": (lambda x, i, s: x.clone().scatter_add_(1, i, s),
                     lambda: (X(), i64(0, 4, 1).view(3, 1), torch.ones(3, 1))),
    "scatter_reduce_": (lambda x, i, s: x.clone().scatter_reduce_(0, i, s, "amax"),
                        lambda: (X(), i64(3, 0, 0, 0).view(1, 4), torch.ones(1, 4))),
    "index_add_": (lambda x, i, s: x.clone().index_add_(0, i, s), lambda: (X(), i64(2, 3), torch.ones(2, 4))),
    # (a vector: CPU's other kernel raises the IndexError "index out of range in self")
    "index_add_vector": (lambda x, i, s: x.clone().index_add_(0, i, s), lambda: (torch.zeros(2), i64(3), torch.ones(1))),
    "index_copy_": (lambda x, i, s: x.clone().index_copy_(1, i, s), lambda: (X(), i64(4), torch.ones(3, 1))),
    "index_fill_": (lambda x, i: x.clone().index_fill_(0, i, 2.0), lambda: (X(), i64(-4))),
    "take": (lambda x, i: torch.take(x, i), lambda: (X(), i64(3, 12))),
    "take_negative": (lambda x, i: torch.take(x, i), lambda: (X(), i64(-13))),
    "put_": (lambda x, i, s: x.clone().put_(i, s), lambda: (X(), i64(12), torch.ones(1))),
    "nll_loss": (lambda x, t: F.nll_loss(x, t), lambda: (X().log_softmax(1), i64(0, 4, 1))),
    "nll_loss_negative_target": (lambda x, t: F.nll_loss(x, t, reduction="none"),
                                 lambda: (X().log_softmax(1), i64(0, -1, 1))),
    "nll_loss_2d": (lambda x, t: F.nll_loss(x, t), lambda: (torch.randn(2, 3, 2, 2), torch.full((2, 2, 2), 3))),
    "cross_entropy": (lambda x, t: F.cross_entropy(x, t, weight=torch.ones(4, device=x.device)),
                      lambda: (X(), i64(3, 4, 1))),
    # RuntimeErrors: an index outside its 4x4 output plane; a sorter entry outside the sequence
    "max_unpool2d": (lambda x, i: F.max_unpool2d(x, i, 2), lambda: (torch.ones(1, 1, 2, 2), i64(0, 1, 2, 16).view(1, 1, 2, 2))),
    "searchsorted_sorter": (lambda s, v, so: torch.searchsorted(s, v, sorter=so),
                            lambda: (torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.5]), i64(0, 1, 3))),
}


def _setitem(x, i, v):
    y = x.clone()
    y[i] = v
    return y


def cpu_error(fn, inputs):
    try:
        fn(*inputs)
    except Exception as e:  # noqa: BLE001  (the class is what we compare)
        return e
    return None


def sync_item(y):
    return y.sum().item()


def sync_cpu(y):
    return y.cpu()


def sync_print(y):
    return repr(y)


def sync_torch_tpu(y):
    torch.tpu.synchronize()


def sync_torchtpu(y):
    torchtpu.synchronize()


SYNCS = [sync_item, sync_cpu, sync_print, sync_torch_tpu, sync_torchtpu]


@pytest.mark.parametrize("name", sorted(CASES))
def test_strict_raises_at_next_sync(name):
    fn, make = CASES[name]
    inputs = make()
    expected = cpu_error(fn, inputs)
    assert expected is not None, "the case must be an error on CPU"
    before = torchtpu.metrics()
    y = fn(*to_tpu(inputs))  # no error yet: nothing waited for the device
    mid = torchtpu.metrics()
    assert mid["syncs"] == before["syncs"] and mid["check_reads"] == before["check_reads"]
    assert mid["index_checks"] > before["index_checks"]
    sync = SYNCS[sorted(CASES).index(name) % len(SYNCS)]  # every sync point gets several ops
    with pytest.raises(type(expected)) as info:
        sync(y)
    msg = str(info.value)
    assert str(expected).splitlines()[0] in msg
    assert "raised at the next synchronisation" in msg and "aten::" in msg
    # Reported once; the device keeps working.
    torchtpu.synchronize()
    check(fn, *_valid_inputs(name, inputs))


@pytest.mark.parametrize("name", sorted(CASES))
def test_debug_raises_at_the_op(name):
    fn, make = CASES[name]
    inputs = make()
    expected = cpu_error(fn, inputs)
    tpu_inputs = to_tpu(inputs)
    with torchtpu.eager_mode("debug"):
        with pytest.raises(type(expected)) as info:
            fn(*tpu_inputs)
        assert str(expected).splitlines()[0] in str(info.value)
        assert "raised at the next synchronisation" not in str(info.value)
        torchtpu.synchronize()  # nothing stale
        check(fn, *_valid_inputs(name, inputs))


def _valid_inputs(name, inputs):
    """The same call with every index brought into range (negatives kept where valid)."""
    fn, _ = CASES[name]
    out = []
    for t in inputs:
        if isinstance(t, torch.Tensor) and not t.is_floating_point():
            hi = 0 if name.endswith("_0d_self") else 1
            t = t.clamp(-1, hi) if name in ("index_negative", "index_fill_", "take_negative") else t.clamp(0, hi)
        out.append(t)
    assert cpu_error(fn, out) is None
    return out


# ------------------------------------------------------------- valid indices


def test_valid_negative_indices_match_cpu():
    x = torch.randn(3, 4)
    check(lambda x, i: x[i], x, torch.tensor([-3, -1, 2]))
    check(lambda x, i, j: x[i, j], x, torch.tensor([-1, 0]), torch.tensor([-4, 3]))
    check(lambda x, i: torch.take(x, i), x, torch.tensor([-12, -1, 11]))
    check(lambda x, i, s: x.clone().put_(i, s), x, torch.tensor([-12, 5]), torch.tensor([7.0, 8.0]))
    check(lambda x, i: x.clone().index_fill_(1, i, 0.5), x, torch.tensor([-4, 1]))
    check(lambda x, i: _setitem(x, i, 3.0), x, torch.tensor([-1]))
    check(lambda x, i, v: x.clone().index_put_((i,), v, accumulate=True), x, torch.tensor([-1, -1, 0]),
          torch.ones(3, 4))
    torchtpu.synchronize()


def test_valid_bounds_match_cpu():
    x = torch.randn(3, 4)
    check(lambda x, i: x.index_select(0, i), x, torch.tensor([0, 2, 2]))
    check(lambda x, i: x.gather(1, i), x, torch.tensor([[3], [0], [3]]))
    check(lambda w, i: F.embedding(i, w), x, torch.tensor([[0, 2], [2, 1]]))
    check(lambda x, i, s: x.clone().index_add_(1, i, s), x, torch.tensor([3, 0]), torch.ones(3, 2))
    check(lambda x, i, s: x.clone().scatter_add_(0, i, s), x, torch.tensor([[2, 0, 1, 2]]), torch.ones(1, 4))
    torchtpu.synchronize()


def test_ignore_index_is_not_an_error():
    x = torch.randn(4, 5).log_softmax(1)
    t = torch.tensor([1, -100, 4, -100])
    check(lambda x, t: F.nll_loss(x, t), x, t)
    check(lambda x, t: F.nll_loss(x, t, reduction="none"), x, t)
    check(lambda x, t: F.nll_loss(x, t, ignore_index=7), x, torch.tensor([7, 0, 7, 3]))
    check(lambda x, t: F.cross_entropy(x, t, ignore_index=-1), x, torch.tensor([-1, 2, 0, -1]))
    torchtpu.synchronize()
    # the target equal to a custom ignore_index is fine even though it is >= C
    before = torchtpu.metrics()["index_checks"]
    assert F.nll_loss(x.to("tpu"), torch.tensor([9, 9, 1, 2], device="tpu"), ignore_index=9).isfinite().item()
    assert torchtpu.metrics()["index_checks"] > before


def test_embedding_dense_backward_raises():
    # CPU silently drops such rows; the forward raised already, so the backward does too.
    g = torch.ones(2, 4, device="tpu")
    y = torch.ops.aten.embedding_dense_backward(g, torch.tensor([0, 9], device="tpu"), 3, -1, False)
    with pytest.raises(IndexError, match="embedding_dense_backward: index out of range in self"):
        y.cpu()
    idx = torch.tensor([0, 2, 2])
    got = torch.ops.aten.embedding_dense_backward(torch.ones(3, 4, device="tpu"), idx.to("tpu"), 3, -1, True)
    want = torch.ops.aten.embedding_dense_backward(torch.ones(3, 4), idx, 3, -1, True)
    torch.testing.assert_close(got.cpu(), want)


def test_embedding_backward_through_autograd_valid():
    w = torch.randn(5, 3, requires_grad=True)
    wt = w.detach().to("tpu").requires_grad_()
    idx = torch.tensor([[4, 0], [0, 3]])
    F.embedding(idx, w, padding_idx=0).sum().backward()
    F.embedding(idx.to("tpu"), wt, padding_idx=0).sum().backward()
    torch.testing.assert_close(wt.grad.cpu(), w.grad)


# ------------------------------------------------------------ the mechanism


def test_first_error_wins_and_is_reported_once():
    x = torch.randn(3, 4, device="tpu")
    a = torch.take(x, torch.tensor([20], device="tpu"))
    b = x.gather(1, torch.tensor([[7]], device="tpu"))
    c = x + 1  # unchecked ops in between change nothing
    with pytest.raises(IndexError, match=r"aten::take: out of range: tried to access index 20"):
        c.cpu()
    torchtpu.synchronize()  # gather's error was masked by the first one: nothing stale
    assert (a.shape, b.shape) == ((1,), (1, 1))
    torch.testing.assert_close((x * 2).cpu(), x.cpu() * 2)


def test_no_sync_per_op_and_no_recompile():
    x = torch.randn(6, 5, device="tpu")
    good = torch.tensor([0, 5], device="tpu")
    bad = torch.tensor([0, 6], device="tpu")
    x.index_select(0, good).cpu()
    before = torchtpu.metrics()
    for _ in range(5):
        y = x.index_select(0, bad)
        y = x.index_select(0, good)
    mid = torchtpu.metrics()
    assert mid["syncs"] == before["syncs"]
    assert mid["check_reads"] == before["check_reads"]
    assert mid["index_checks"] - before["index_checks"] == 10
    assert mid["compiles"] == before["compiles"]  # the message is not part of the cache key
    with pytest.raises(IndexError, match="index out of range in self"):
        y.cpu()
    after = torchtpu.metrics()
    assert after["check_reads"] - mid["check_reads"] == 1  # one word per sync


def test_unchecked_work_never_reads_the_word():
    x = torch.randn(8, device="tpu")
    torchtpu.synchronize()
    before = torchtpu.metrics()
    for _ in range(20):
        x = x * 1.5 + 1
    x.cpu()
    torchtpu.synchronize()
    after = torchtpu.metrics()
    assert after["check_reads"] == before["check_reads"]
    assert after["index_checks"] == before["index_checks"]


def test_error_pending_across_mode_switch_surfaces_once():
    x = torch.randn(3, 4, device="tpu")
    x[torch.tensor([3], device="tpu")]
    with torchtpu.eager_mode("debug"):
        # The pending strict-mode error surfaces at the next checked op, naming its op.
        with pytest.raises(IndexError, match=r"aten::index: index 3 is out of bounds"):
            x.index_select(0, torch.tensor([1], device="tpu"))
        torch.testing.assert_close(x.index_select(0, torch.tensor([1], device="tpu")).cpu(), x.cpu()[1:2])


def test_threads_with_valid_indices_see_no_error():
    x = torch.randn(16, 4, device="tpu")
    xc = x.cpu()
    errors = []

    def work(k):
        try:
            for j in range(20):
                i = torch.tensor([(k + j) % 16, 15 - j % 16], device="tpu")
                torch.testing.assert_close(x.index_select(0, i).cpu(), xc.index_select(0, i.cpu()))
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    torchtpu.synchronize()


def test_inner_dim_index_select_raises_index_error():
    x = torch.randn(3, 4, 5, device="tpu")
    y = x.index_select(1, torch.tensor([1, 4], device="tpu"))
    with pytest.raises(IndexError, match="aten::index_select: index out of range in self"):
        y.cpu()


def test_each_device_has_its_own_word():
    code = """
        import pytest, torch, torchtpu
        a = torch.arange(6.0, device="tpu:0")
        b = torch.arange(6.0, device="tpu:1")
        bad = torch.take(b, torch.tensor([6], device="tpu:1"))  # error recorded on tpu:1 only
        assert torch.equal(torch.take(a, torch.tensor([5], device="tpu:0")).cpu(), torch.tensor([5.0]))
        with pytest.raises(IndexError, match="tried to access index 6 on a tensor of 6 elements"):
            bad.cpu()
        torch.tpu.synchronize()
        c = a.index_select(0, torch.tensor([9], device="tpu:0"))
        assert torch.equal(b.cpu(), torch.arange(6.0))  # a tpu:1 download does not read tpu:0's word
        with pytest.raises(IndexError, match="index out of range in self"):
            torchtpu.synchronize()  # synchronize reads every device
        torchtpu.synchronize()
        print("OK")
    """
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="2", TORCHTPU_EAGER_MODE=torchtpu.get_eager_mode())
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=repo, env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout
