"""Compiles started ahead of a graph's first run (docs/compile.md, "Background
compiles"): torch.compile(backend="tpu") hands each static graph's program to the
runtime's background threads as soon as AOTAutograd gives it to us, described by
the fake example inputs' layouts; the first run then finds it.

Checked with torchtpu.metrics(): prepared_programs (started ahead), prepared_hits
(first runs that found theirs), graph_compiles / graph_recompiles, and the
results against PyTorch eager on the CPU (fp32: rtol 1e-4, atol 1e-5).
"""
import json
import os
import subprocess
import sys

import torch

import torchtpu
from test_compile_cache import _env

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _delta(before, *names):
    m = torchtpu.metrics()
    return {n: m[n] - before[n] for n in names}


class _Block(torch.nn.Module):
    """Attention-shaped: the backward saves transposed (permuted) activations."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.norm = torch.nn.LayerNorm(32)
        self.out = torch.nn.Linear(32, 8)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).view(4, 6, 3, 32).unbind(2)
        att = torch.softmax(q @ k.transpose(-1, -2) / 32 ** 0.5, dim=-1)
        return self.out(att @ v + x)


def _train(dev, compiled, steps=3):
    torch.manual_seed(0)
    m = _Block().to(dev)
    # SGD, not Adam: the key projection's bias has a zero gradient (softmax ignores
    # a shift shared by all keys), and Adam would turn its rounding noise into steps
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 6, 32, generator=g).to(dev), torch.randn(4, 6, 8, generator=g).to(dev)

    def step():
        loss = torch.nn.functional.mse_loss(m(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    if compiled:
        step = torch.compile(step, backend="tpu")
    losses = [step().item() for _ in range(steps)]
    return losses, [p.detach().cpu() for p in m.parameters()]


def test_train_step_programs_are_ready_for_their_first_runs():
    torch._dynamo.reset()
    names = ("prepared_programs", "prepared_hits", "graph_compiles", "graph_recompiles", "graph_fallbacks")
    before = torchtpu.metrics()
    losses, params = _train("tpu", True)
    d = _delta(before, *names)
    ref_losses, ref_params = _train("cpu", False)
    # forward, backward and the optimizer step: each prepared, each first run found it
    assert d == {"prepared_programs": 3, "prepared_hits": 3, "graph_compiles": 3, "graph_recompiles": 0,
                 "graph_fallbacks": 0}, d
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-5)
    for p, r in zip(params, ref_params):
        torch.testing.assert_close(p, r, rtol=1e-4, atol=1e-5)


def test_a_run_with_other_layouts_builds_its_own_program():
    # The example is a window of a larger uploaded tensor: its storage will hold
    # the whole [4, 8] upload, which the layout of a window cannot tell; the
    # prepared program (storage read flat) is not the one the run needs.
    torch._dynamo.reset()
    base = torch.arange(32.0).view(4, 8)
    x = base.to("tpu")[:, :4]
    f = torch.compile(lambda t: t * 2 + 1, backend="tpu")
    before = torchtpu.metrics()
    out = f(x)
    d = _delta(before, "prepared_programs", "prepared_hits", "graph_compiles", "graph_recompiles")
    assert d == {"prepared_programs": 1, "prepared_hits": 0, "graph_compiles": 1, "graph_recompiles": 0}, d
    torch.testing.assert_close(out.cpu(), base[:, :4] * 2 + 1, rtol=0, atol=0)


_EXIT_SCRIPT = r"""
import json, torch, torchtpu
torch.manual_seed(0)
m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).to("tpu")
x = torch.randn(16, 256).to("tpu")
out = torch.compile(m, backend="tpu")(x)  # the backward's compile starts now; no backward runs
print(json.dumps({"sum": out.sum().item(), "metrics": torchtpu.metrics()}), flush=True)
"""


def _run(script, cache_dir, **extra):
    p = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=_env(cache_dir, **extra),
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"process failed ({p.returncode}):\n{p.stderr[-4000:]}"
    return json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("{")][-1])


def test_exit_with_a_compile_in_flight_and_the_switch(tmp_path):
    # The process ends while the backward's program may still be compiling on a
    # background thread: exit waits for it instead of tearing the plugin down
    # under it. With the switch off nothing is prepared; the results agree.
    on = _run(_EXIT_SCRIPT, tmp_path / "on")
    off = _run(_EXIT_SCRIPT, tmp_path / "off", TORCHTPU_BACKGROUND_COMPILE="0")
    assert on["metrics"]["prepared_programs"] == 2 and on["metrics"]["prepared_hits"] == 1, on["metrics"]
    assert off["metrics"]["prepared_programs"] == 0 and off["metrics"]["prepared_hits"] == 0, off["metrics"]
    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
    ref = m(torch.randn(16, 256)).sum().item()
    assert abs(on["sum"] - ref) <= 1e-3 * max(1.0, abs(ref)) and on["sum"] == off["sum"], (on["sum"], off["sum"], ref)


def test_a_saved_view_of_a_user_output_is_prepared():
    """The backward saves k, a view of the forward's user output y. A user output's
    views are made as views of its result (they alias, as in eager), but a saved
    activation stays a result of its own: the layout the backward is prepared for."""
    w = torch.randn(4, 4, requires_grad=True)
    wt = w.detach().to("tpu").requires_grad_()

    def f(x, w):
        y = x @ w
        k = y.view(3, 2, 2).transpose(1, 2)
        return y, torch.bmm(k, k).sum()

    x = torch.randn(3, 4)
    before = torchtpu.metrics()
    y, loss = torch.compile(f, backend="tpu")(x.to("tpu"), wt)
    loss.backward()
    yr, lr = f(x, w)
    lr.backward()
    torch.testing.assert_close(y.cpu(), yr.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-4, atol=1e-5)
    d = _delta(before, "prepared_programs", "prepared_hits")
    assert d == {"prepared_programs": 2, "prepared_hits": 2}, d
