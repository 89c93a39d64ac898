"""Fused eager mode (docs/eager-modes.md): ops are recorded and run as one program
at each sync point, with the semantics of strict mode. Every result is compared
with PyTorch on CPU (float32 tolerances of tpu_testing.TOL) or with strict mode
in the same process; torchtpu.metrics() shows what really ran."""
import os
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchtpu
from tpu_testing import assert_same, tol

F32 = tol(torch.float32)


@pytest.fixture
def fused():
    with torchtpu.eager_mode("fused"):
        yield


def _delta(before, *names):
    now = torchtpu.metrics()
    return {n: now[n] - before[n] for n in names}


def test_a_chain_of_ops_is_one_execution(fused):
    x = torch.randn(16)
    t = x.to("tpu")
    torch.tpu.synchronize()
    before = torchtpu.metrics()
    for _ in range(150):  # 300 ops of ~0.6 KB each: under the size limits (256 KiB, 2000 ops)
        t = t.add(1e-3).mul(0.999)
        x = x.add(1e-3).mul(0.999)
    mid = _delta(before, "executions", "fused_ops")
    assert mid["executions"] == 0  # nothing launched before the sync
    assert mid["fused_ops"] == 300
    # One program lets XLA contract each mul with the next add into an FMA (one
    # rounding instead of two); over 1,000 dependent ops that drifted up to ~150
    # float32 ulps from op-by-op rounding, hence 10x the float32 tolerance.
    assert_same(t, x, scale=10)
    assert _delta(before, "executions")["executions"] == 1


def test_views_inplace_and_reductions_match_cpu(fused):
    def f(x, w):
        y = x @ w
        y[1:3].mul_(2)  # a write into a view of a result
        z = y.t().contiguous().view(-1)[::3]
        y.add_(z.sum())
        s = torch.softmax(y, dim=-1)
        idx = torch.tensor([2, 0, 1])
        return s.index_select(0, idx.to(s.device)), y.amax(0), s.cumsum(1)

    x, w = torch.randn(5, 4), torch.randn(4, 6)
    want = f(x, w)
    got = f(x.to("tpu"), w.to("tpu"))
    assert_same(got, want)


def train_adamw_like_cpu(steps=6):
    """An MLP's AdamW training on tpu (in the current eager mode) beside the same
    on CPU: asserts the losses and parameters equal and returns each step's
    metric deltas. Also run by a subprocess (the donation test below)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 3))
    ref = nn.Sequential(nn.Linear(8, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 3))
    ref.load_state_dict(model.state_dict())
    model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    data = [(torch.randn(16, 8), torch.randint(0, 3, (16,))) for _ in range(steps)]
    deltas = []
    for x, y in data:
        before = torchtpu.metrics()
        loss = nn.functional.cross_entropy(model(x.to("tpu")), y.to("tpu"))
        opt.zero_grad()
        loss.backward()
        opt.step()
        got = loss.item()  # the sync point: one program for the step
        rloss = nn.functional.cross_entropy(ref(x), y)
        ropt.zero_grad()
        rloss.backward()
        ropt.step()
        torch.testing.assert_close(torch.tensor(got), rloss.detach(), **F32)
        deltas.append(_delta(before, "compiles", "fused_programs", "executions", "donated_buffers"))
    for p, r in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.cpu(), r.detach(), **F32)
    return deltas


def test_training_matches_cpu_and_steady_state_does_not_compile(fused):
    deltas = train_adamw_like_cpu()
    # Steps after the third build nothing new and launch a handful of programs.
    # An AdamW step updates each parameter and both moments in place, so their old
    # buffers are held by nothing but the recording and each goes to its new value
    # (donation, on by default).
    nparams = 6  # two Linear (weight, bias) and a LayerNorm (weight, bias)
    for c in deltas[3:]:
        assert c["compiles"] == 0 and c["fused_programs"] == 0, deltas
        assert c["executions"] <= 3, deltas
        assert c["donated_buffers"] >= 3 * nparams, deltas


def _fused_training_in_a_process(steps, fields, **env_vars):
    """train_adamw_like_cpu in fused mode, in a process of its own (the runtime
    reads these variables once): each step's deltas of the metrics `fields`."""
    script = f"""
import torchtpu, test_fused
torchtpu.set_eager_mode("fused")
for d in test_fused.train_adamw_like_cpu(steps={steps}):
    print("step", *(d[f] for f in {fields!r}))
print("ok")
"""
    env = dict(os.environ, **env_vars)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(__file__), env.get("PYTHONPATH")]))
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok"), r.stdout
    rows = [[int(v) for v in line.split()[1:]] for line in r.stdout.splitlines() if line.startswith("step")]
    assert len(rows) == steps, r.stdout
    return rows


def test_donation_can_be_turned_off():
    # TORCHTPU_FUSED_DONATE=0: nothing is donated, training stays equal to CPU and
    # the steady state compiles nothing.
    steps = _fused_training_in_a_process(6, ["donated_buffers", "compiles"], TORCHTPU_FUSED_DONATE="0")
    for donated, compiles in steps[3:]:
        assert donated == 0 and compiles == 0, steps


def test_a_download_ends_the_recording_even_of_a_settled_value(fused):
    # .item() and .cpu() are sync points: reading a tensor computed earlier (here
    # an upload; in a loop, a loss that a size cut already computed) still runs
    # what was recorded, so a loop's recordings start at its sync points.
    x = torch.randn(16)
    settled = x.to("tpu")
    torch.tpu.synchronize()
    t = settled * 2
    before = torchtpu.metrics()
    u = (t + 1).sin()
    assert _delta(before, "fused_flushes")["fused_flushes"] == 0  # recorded
    assert settled.cpu().equal(x)
    assert _delta(before, "fused_flushes")["fused_flushes"] == 1
    before = torchtpu.metrics()
    assert_same(u, (x * 2 + 1).sin())  # already computed: nothing left to run
    assert _delta(before, "fused_flushes")["fused_flushes"] == 0


def test_cuts_by_program_size_repeat_at_every_step():
    # TORCHTPU_FUSED_MAX_TEXT=20000 cuts each step's recording every few ops (a
    # layer norm's program alone is larger), so `loss.item()` reads a value an
    # earlier cut already computed. The download still ends the recording: every
    # step is cut at the same ops, training equals CPU and the steady state
    # compiles nothing.
    steps = _fused_training_in_a_process(8, ["fused_programs", "compiles", "executions"],
                                         TORCHTPU_FUSED_MAX_TEXT="20000")
    assert steps[0][2] >= 3, steps  # cut: several programs per step
    for programs, compiles, _ in steps[4:]:
        assert programs == 0 and compiles == 0, steps


def test_chained_layer_norms_are_cut_into_one_repeated_program(fused):
    # A layer norm's program is ~60 KB of StableHLO; XLA's compile time grows
    # superlinearly with a program's size (40 chained in one program: 77 s). At
    # the default text limit (256 KiB) the first cut learns the period (layer
    # norm, gelu) and every later cut falls on it: one program, run again and again.
    torch.manual_seed(0)
    lns = [nn.LayerNorm(64) for _ in range(24)]
    x = torch.randn(8, 64)

    def run(t, mods):
        for m in mods:
            t = nn.functional.gelu(m(t))
        return t

    want = run(x, lns)
    mods = [m.to("tpu") for m in lns]
    before = torchtpu.metrics()
    got = run(x.to("tpu"), mods).cpu()
    d = _delta(before, "fused_programs", "fused_flushes")
    assert d["fused_flushes"] >= 4, d
    assert d["fused_programs"] <= 3, d
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)  # 24 float32 layers


def test_tied_weights_forward_and_backward_in_one_program(fused):
    # A model whose head shares the embedding matrix, forward and backward recorded
    # with no sync between them: one fused program. The CPU plugin's classic fusion
    # emitters compiled it to wrong gradients (max error 0.78; docs/compile-cache.md).
    from test_module_semantics import test_tied_weights_gradients_match_cpu
    test_tied_weights_gradients_match_cpu()


def test_random_numbers_equal_strict_for_the_same_seed():
    def draw():
        torch.manual_seed(123)
        a = torch.randn(4, 5, device="tpu")
        b = nn.functional.dropout(torch.ones(64, device="tpu"), 0.5)
        c = torch.rand(3, device="tpu") + a.sum()
        return [t.cpu() for t in (a, b, c)]

    with torchtpu.eager_mode("strict"):
        strict = draw()
    with torchtpu.eager_mode("fused"):
        fused = draw()
    for s, f in zip(strict, fused):
        torch.testing.assert_close(f, s, rtol=0, atol=0)


def test_an_index_error_is_raised_at_the_sync_naming_the_op(fused):
    x = torch.arange(12.0, device="tpu").view(3, 4)
    bad = x.index_select(0, torch.tensor([0, 5], device="tpu")) * 2
    with pytest.raises(IndexError, match="index_select"):
        bad.cpu()
    # The device is usable after the error, still fused.
    ok = x.index_select(0, torch.tensor([2], device="tpu")) * 2
    assert_same(ok, torch.arange(8.0, 12.0).view(1, 4) * 2)


def test_dead_values_are_not_kept_and_memory_matches_strict():
    def run():
        torch.tpu.synchronize()
        base = torch.tpu.memory_allocated()
        x = torch.randn(256, 256, device="tpu")
        for _ in range(20):
            x = torch.tanh(x @ x.t() * 1e-3) + 1
        x.sum().item()
        return torch.tpu.memory_allocated() - base

    with torchtpu.eager_mode("strict"):
        strict = run()
    with torchtpu.eager_mode("fused"):
        fused = run()
    assert fused == strict == 256 * 256 * 4


def test_data_dependent_shapes_and_printing_cut_the_recording(fused):
    x = torch.tensor([0.0, 1.5, 0.0, -2.0, 3.0])
    t = x.to("tpu") * 2
    assert_same(torch.nonzero(t), torch.nonzero(x * 2))
    assert_same(t[t > 0], (x * 2)[x * 2 > 0])
    assert "device='tpu:0'" in repr(t + 1)


def test_leaving_fused_mode_runs_what_was_recorded():
    with torchtpu.eager_mode("strict"):
        with torchtpu.eager_mode("fused"):
            before = torchtpu.metrics()
            t = torch.ones(3, device="tpu") * 5
            assert _delta(before, "executions")["executions"] == 0
        assert _delta(before, "fused_flushes")["fused_flushes"] >= 1
    assert_same(t, torch.full((3,), 5.0))


def test_autograd_and_compile_inside_fused_mode(fused):
    w = torch.randn(6, 3, requires_grad=True)
    x = torch.randn(4, 6)
    wt = w.detach().to("tpu").requires_grad_()
    (torch.sin(x @ w) ** 2).mean().backward()
    (torch.sin(x.to("tpu") @ wt) ** 2).mean().backward()
    assert_same(wt.grad, w.grad)

    f = torch.compile(lambda a: torch.relu(a) * 3 + a.mean(), backend="tpu")
    assert_same(f(x.to("tpu")), torch.relu(x) * 3 + x.mean())


def _counts_in_a_process(script, **env_vars):
    """Runs `script` in a process of its own (the runtime reads these variables
    once); it prints "name count" lines and ends with "ok". Returns the counts
    and the completed process."""
    env = dict(os.environ, **env_vars)
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok"), r.stdout
    return {k: int(v) for k, v in (line.split() for line in r.stdout.splitlines() if " " in line)}, r


def test_a_loop_without_syncs_is_cut_at_its_period():
    # A 3-op loop body, 200 times, with a limit of 64 recorded executions: the
    # first cut learns the period (3) and later cuts fall on multiples of it, so
    # every later chunk is the same program. After a sync, a 5-op loop learns its
    # own period: cuts on multiples of 3 would start its chunks at 5 different ops.
    script = r"""
import torch, torchtpu
def loop3(t):
    for _ in range(200):
        t = (t * 0.5).add(1.0).sin()
    return t
def loop5(t):
    for _ in range(200):
        t = (t * 0.5).add(1.0).sin().mul(2.0).cos()
    return t
x = torch.randn(32)
for name, loop in (("a", loop3), ("b", loop5)):
    torchtpu.set_eager_mode("strict")
    want = loop(x.to("tpu")).cpu()
    with torchtpu.eager_mode("fused"):
        before = torchtpu.metrics()
        got = loop(x.to("tpu")).cpu()
    m = torchtpu.metrics()
    print(name + "_programs", m["fused_programs"] - before["fused_programs"])
    print(name + "_flushes", m["fused_flushes"] - before["fused_flushes"])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
print("ok")
"""
    out, r = _counts_in_a_process(script, TORCHTPU_FUSED_MAX_OPS="64")
    # 600 executions: the first cut at 64 (one program), then 8 chunks of 66, the
    # first multiple of 3 past the limit (one program), then the remainder of 8 at
    # the download (one program).
    assert out["a_flushes"] == 10 and out["a_programs"] == 3, r.stdout
    # 1000 executions: 64, then 14 chunks of 65, then 26.
    assert out["b_flushes"] == 16 and out["b_programs"] == 3, r.stdout


def test_a_body_that_repeats_one_op_is_cut_at_the_body_not_the_op():
    # Each call repeats add, mul 50 times on the same input: the executables alone
    # repeat every 2 ops, but the body is the call (100 ops), where the first add
    # reads the input instead of the op just before. The period search compares
    # how far back each operand was made too, so once it has seen two calls every
    # cut holds one call: 5 programs (the cuts before that included). On the
    # executables' period the cuts drifted across the calls: 17 programs here, and
    # 42 for 40 calls of a 1000-op body at the default limits (6 now).
    script = r"""
import torch, torchtpu
def call(t):
    for _ in range(50):
        t = (t + 1.0) * 0.5
    return t
x = torch.randn(16)
want = [call(x)]
with torchtpu.eager_mode("fused"):
    xt = x.to("tpu")
    torch.tpu.synchronize()
    before = torchtpu.metrics()
    for _ in range(20):
        y = call(xt)
    got = y.cpu()
m = torchtpu.metrics()
print("programs", m["fused_programs"] - before["fused_programs"])
print("flushes", m["fused_flushes"] - before["fused_flushes"])
torch.testing.assert_close(got, want[0], rtol=1e-5, atol=1e-5)
print("ok")
"""
    out, r = _counts_in_a_process(script, TORCHTPU_FUSED_MAX_OPS="64")
    assert out["programs"] == 5 and out["flushes"] == 22, r.stdout


def test_a_loop_body_longer_than_a_recording_is_learned_across_cuts():
    # A loop body of 100 (then 200) executions: k-element products for k = 1..n,
    # each a program of its own, each followed by an add. With a limit of 64 no
    # single recording holds two bodies, so the period is found over the
    # recordings cut since the download (llama decode's token step is longer than
    # the text limit's recording). Before, cuts every 64 executions started at a
    # different place in the body each time: a new program per cut (27 and 22).
    script = r"""
import torch, torchtpu
def loop(t, n, iters):
    acc = torch.zeros((), device=t.device)
    for _ in range(iters):
        for k in range(1, n + 1):
            acc = acc + (t[:k] * 2.0)[-1]
    return acc
x = torch.randn(256)
for name, n, iters in (("a", 50, 20), ("b", 100, 10)):
    torchtpu.set_eager_mode("strict")
    want = loop(x.to("tpu"), n, iters).cpu()
    with torchtpu.eager_mode("fused"):
        before = torchtpu.metrics()
        got = loop(x.to("tpu"), n, iters).cpu()
    m = torchtpu.metrics()
    print(name + "_programs", m["fused_programs"] - before["fused_programs"])
    print(name + "_flushes", m["fused_flushes"] - before["fused_flushes"])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
print("ok")
"""
    out, r = _counts_in_a_process(script, TORCHTPU_FUSED_MAX_OPS="64")
    # 2001 executions (the zeros first). Cuts at 64, 128, 192, 256 (4 programs):
    # at the fourth, the last 255 executions hold two bodies (the zeros never
    # repeat). The period (100) is at most twice a recording: one cut per body,
    # 17 chunks of 100 (one program), then the remainder of 45 at the download.
    assert out["a_flushes"] == 22 and out["a_programs"] == 6, r.stdout
    # The period (200) is learned at the 7th cut (448); longer than twice a
    # recording, each body is cut into chunks of 64, 64, 64 and 8 at the same
    # places: 7 + 7 x 4 + 3 flushes, at most 7 + 4 + 1 programs.
    assert out["b_flushes"] == 38 and out["b_programs"] <= 12, r.stdout


def test_a_tiny_executable_cache_evicts_without_harm():
    # TORCHTPU_CACHE_CAPACITY=16 (mappings): every step's fused program
    # evicts the op programs it was made of while the next recording still holds
    # them; training stays equal to CPU and the cache stays within its weight.
    script = r"""
import torch, torch.nn as nn, torchtpu
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
ref = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 2))
ref.load_state_dict(model.state_dict())
model.to("tpu")
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
ropt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
torchtpu.set_eager_mode("fused")
for step in range(4):
    x, y = torch.randn(8, 6), torch.randn(8, 2)
    loss = nn.functional.mse_loss(model(x.to("tpu")), y.to("tpu"))
    opt.zero_grad(); loss.backward(); opt.step()
    rloss = nn.functional.mse_loss(ref(x), y)
    ropt.zero_grad(); rloss.backward(); ropt.step()
    torch.testing.assert_close(torch.tensor(loss.item()), rloss.detach(), rtol=1e-5, atol=1e-5)
for p, r in zip(model.parameters(), ref.parameters()):
    torch.testing.assert_close(p.cpu(), r.detach(), rtol=1e-5, atol=1e-5)
print("programs", torchtpu.metrics()["fused_programs"])
print("ok")
"""
    env = dict(os.environ, TORCHTPU_CACHE_CAPACITY="16")
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().endswith("ok")


def test_executable_cache_is_bounded_in_memory_mappings():
    # An executable weighs the memory mappings its code added (a while-loop LU maps
    # ~30, an add ~3); with TORCHTPU_CACHE_CAPACITY=300 the process's mappings stay
    # near 300 above the start however many programs it compiles, so a long run
    # cannot exhaust vm.max_map_count (65530) and crash inside the plugin.
    script = r"""
import os, torch, torchtpu
def maps(): return sum(1 for _ in open("/proc/self/maps"))
torch.ones(1, device="tpu").cpu()
m0 = maps()
for n in range(2, 26):
    a = torch.randn(n, n, dtype=torch.float64)
    torch.testing.assert_close(torch.linalg.lu_factor(a.to("tpu"))[0].cpu(), torch.linalg.lu_factor(a)[0])
print(maps() - m0)
"""
    grown = {}
    for cap in ("300", "1000000"):
        env = dict(os.environ, TORCHTPU_CACHE_CAPACITY=cap)
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        grown[cap] = int(r.stdout.split()[-1])
    assert grown["1000000"] > 600, grown  # 24 LU programs kept: their mappings add up
    assert grown["300"] < 450, grown       # evicted to the capacity (plus the odd allocation)


def test_a_compiled_graph_runs_alone_not_inside_the_recording(fused):
    # A torch.compile graph is a whole program already. Recorded, it was inlined
    # into the fused program with the eager code around it, so a decode loop whose
    # eager code changes every step (the generated tokens, concatenated, grow)
    # compiled the whole model again at every token (HF generate with a static
    # cache: 37 s for 32 tokens, against 9.4 s now).
    torch.manual_seed(0)
    x, w = torch.randn(4, 8), torch.randn(8, 8)
    f = torch.compile(lambda a, b: torch.tanh(a @ b).sum(-1, keepdim=True), backend="tpu")
    xt, wt = x.to("tpu"), w.to("tpu")
    f(xt, wt).cpu()  # compiled outside the measurement
    before = torchtpu.metrics()
    got, want = xt[:, :1] * 2, x[:, :1] * 2
    for _ in range(6):
        got = torch.cat([got, f(xt + got.sum(), wt)], dim=1)
        want = torch.cat([want, torch.tanh((x + want.sum()) @ w).sum(-1, keepdim=True)], dim=1)
    got = got.cpu()
    d = _delta(before, "graph_runs", "fused_ops", "executions", "compiles")
    assert d["graph_runs"] == 6, d
    # Recorded: the mul, then per step a sum, an add and a cat; the graph runs
    # read the recording's results, so each cuts it (its own execution).
    assert d["fused_ops"] == 1 + 6 * 3, d
    assert d["executions"] >= 6 + 6, d
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_loop_that_changes_shapes_stops_getting_fused_programs():
    # A loop whose shapes change every iteration (a decode loop growing its KV
    # cache by concatenation) records the same ops with new shapes each time: a
    # fused program per iteration, each a compile of the whole body, never used
    # again. After 3 programs for one structure, a recording of it with new shapes
    # runs as its ops' own programs (strict mode's); the second time it comes, it
    # gets its program.
    script = r"""
import torch, torchtpu
torchtpu.set_eager_mode("fused")
x = torch.randn(64)
xt = x.to("tpu")
keys = ("fused_programs", "fused_unfused_runs", "fused_flushes")
for run, (lo, hi) in enumerate(((1, 13), (9, 13), (13, 17), (1, 5))):
    before = torchtpu.metrics()
    for n in range(lo, hi):
        got = ((xt[:n] * 2 + 1).exp().sum()).item()      # a sync per iteration
        want = ((x[:n] * 2 + 1).exp().sum()).item()
        assert abs(got - want) <= 1e-5 * abs(want), (n, got, want)
    m = torchtpu.metrics()
    print(run, *(m[k] - before[k] for k in keys))
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    runs = [list(map(int, line.split()[1:])) for line in r.stdout.splitlines()[:4]]
    # Sizes 1-12: 3 programs, then 9 recordings unfused. Sizes 9-12 again: they
    # come back, so they get their programs. Sizes 13-16: new, unfused. Sizes 1-4:
    # 1-3 hit, 4 comes back and gets its program.
    assert runs == [[3, 9, 12], [4, 0, 4], [0, 4, 4], [1, 0, 4]], r.stdout
    assert r.stdout.strip().endswith("ok")


def test_a_period_the_loop_does_not_follow_is_learned_again():
    # The body repeats a 3-op "layer" 4 times, then 10 ops that do not repeat
    # inside it (22 in all). A limit of 12 makes the first cut see only the
    # layers, so it takes 3 for the period; cuts on multiples of 3 then start at
    # a new place in the 22-op body each time (12 programs). The next cut does not
    # follow that period: it is dropped and learned again from the longer history.
    script = r"""
import torch, torchtpu
def loop(t, iters):
    for _ in range(iters):
        for _ in range(4):
            t = t.sin().cos().tanh()
        for k in range(1, 6):
            t = t + t[:k].sum()
    return t
x = torch.randn(32)
torchtpu.set_eager_mode("strict")
want = loop(x.to("tpu"), 40).cpu()
with torchtpu.eager_mode("fused"):
    before = torchtpu.metrics()
    got = loop(x.to("tpu"), 40).cpu()
m = torchtpu.metrics()
print("programs", m["fused_programs"] - before["fused_programs"])
print("flushes", m["fused_flushes"] - before["fused_flushes"])
torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
print("ok")
"""
    out, r = _counts_in_a_process(script, TORCHTPU_FUSED_MAX_OPS="12")
    # 880 executions; the body's period (22, at most twice a recording) is cut
    # once per body once learned.
    assert out["programs"] <= 6 and out["flushes"] == 42, r.stdout
