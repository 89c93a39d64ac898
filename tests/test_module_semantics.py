"""Module-level semantics a user relies on when moving a model to tpu: parameter
identity and tying, state_dict / torch.save round trips, a second device, threads,
grad modes and explicit generators. Every result is compared with the same code on
CPU (float32: 1e-5, the suite's tolerance in tpu_testing.TOL)."""
import copy
import io
import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

import torchtpu
from tpu_testing import tol

F32 = tol(torch.float32)


class TiedLM(torch.nn.Module):
    """GPT-2's shape in miniature: the output head shares the embedding matrix."""

    def __init__(self, vocab=11, dim=6):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, dim)
        self.mix = torch.nn.Linear(dim, dim)
        self.norm = torch.nn.LayerNorm(dim)
        self.head = torch.nn.Linear(dim, vocab, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        h = self.norm(torch.tanh(self.mix(self.emb(ids))))
        return self.head(h)


def _ids(n=10, vocab=11):
    return torch.arange(n) % vocab


def _loss(model, ids):
    logits = model(ids)
    return torch.nn.functional.cross_entropy(logits, torch.roll(ids, 1))


# ---- identity and tying ----


@pytest.mark.parametrize("move", ["to", "to_kw", "tpu", "to_dtype", "apply"])
def test_tied_weights_survive_moving(move):
    torch.manual_seed(0)
    m = TiedLM()
    params_before = {n: p for n, p in m.named_parameters()}
    if move == "to":
        m.to("tpu")
    elif move == "to_kw":
        m.to(device=torch.device("tpu", 0))
    elif move == "tpu":
        m.tpu()
    elif move == "to_dtype":
        m.to("tpu", torch.float32)
    else:
        # Module._apply with an arbitrary function, as nn.Module.apply users write it.
        m._apply(lambda t: t.to("tpu"))
    assert m.head.weight is m.emb.weight
    assert m.emb.weight.device.type == "tpu"
    # Parameters are kept (moved in place), as on CUDA: optimizers built before
    # the move keep working.
    for n, p in m.named_parameters():
        assert p is params_before[n], n
    assert len(list(m.parameters())) == 5  # emb/head counted once


def test_tied_weights_gradients_match_cpu():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to("tpu")
    ids = _ids()
    _loss(cpu, ids).backward()
    _loss(dev, ids.to("tpu")).backward()
    for (n, pc), (_, pd) in zip(cpu.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, **F32, msg=n)
    # The shared matrix got the sum of both uses' gradients.
    assert dev.head.weight.grad is dev.emb.weight.grad


def test_optimizer_built_before_move_trains_like_cpu():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu)
    opt_c = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_d = torch.optim.AdamW(dev.parameters(), lr=1e-2)
    dev.to("tpu")  # after the optimizer was built, as many scripts do
    ids = _ids()
    for _ in range(3):
        for model, opt, x in ((cpu, opt_c, ids), (dev, opt_d, ids.to("tpu"))):
            opt.zero_grad()
            _loss(model, x).backward()
            opt.step()
    for (n, pc), (_, pd) in zip(cpu.named_parameters(), dev.named_parameters()):
        torch.testing.assert_close(pd.detach().cpu(), pc.detach(), **F32, msg=n)


def test_param_data_assignment_moves_in_place():
    p = torch.nn.Parameter(torch.arange(6.0).reshape(2, 3))
    p.data = p.data.to("tpu")  # FSDP2's fully_shard moves parameters this way
    assert isinstance(p, torch.nn.Parameter) and p.device.type == "tpu" and p.requires_grad
    torch.testing.assert_close(p.detach().cpu(), torch.arange(6.0).reshape(2, 3))
    (p * p).sum().backward()
    torch.testing.assert_close(p.grad.cpu(), 2 * torch.arange(6.0).reshape(2, 3))
    p.data = p.data.cpu()
    assert p.device.type == "cpu"
    assert torch._has_compatible_shallow_copy_type(torch.empty(1, device="tpu"), torch.empty(1))
    assert torch._has_compatible_shallow_copy_type(torch.empty(1), torch.empty(1, device="tpu"))


def test_load_state_dict_and_to_empty_keep_ties():
    torch.manual_seed(0)
    src = TiedLM()
    dst = TiedLM().to("tpu")
    missing = dst.load_state_dict(src.state_dict())
    assert not missing.missing_keys and not missing.unexpected_keys
    assert dst.head.weight is dst.emb.weight and dst.emb.weight.device.type == "tpu"
    torch.testing.assert_close(dst.emb.weight.detach().cpu(), src.emb.weight.detach())
    # to_empty from a real (cpu) model keeps the tie, like a move does.
    empty = TiedLM().to_empty(device="tpu")
    assert empty.head.weight is empty.emb.weight and empty.emb.weight.device.type == "tpu"
    # From the meta device PyTorch itself unties on every backend (meta tensors are
    # not shallow-copy compatible with dense ones; users call tie_weights()): tpu
    # must behave exactly as the CPU target does.
    with torch.device("meta"):
        meta_cpu, meta_tpu = TiedLM(), TiedLM()
    meta_cpu.to_empty(device="cpu")
    meta_tpu.to_empty(device="tpu")
    assert (meta_tpu.head.weight is meta_tpu.emb.weight) == (meta_cpu.head.weight is meta_cpu.emb.weight)
    meta_tpu.head.weight = meta_tpu.emb.weight
    meta_tpu.load_state_dict(src.state_dict())
    ids = _ids()
    torch.testing.assert_close(meta_tpu(ids.to("tpu")).detach().cpu(), src(ids).detach(), **F32)


# ---- state_dict, torch.save, back to CPU ----


def test_state_dict_save_load_and_back_to_cpu():
    torch.manual_seed(0)
    cpu = TiedLM()
    dev = copy.deepcopy(cpu).to("tpu")
    sd = dev.state_dict()
    assert all(v.device.type == "tpu" for v in sd.values())
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    on_cpu = torch.load(buf, map_location="cpu")
    buf.seek(0)
    on_tpu = torch.load(buf)
    for k, v in cpu.state_dict().items():
        assert on_cpu[k].device.type == "cpu"
        assert on_tpu[k].device.type == "tpu"
        torch.testing.assert_close(on_cpu[k], v, rtol=0, atol=0)
        torch.testing.assert_close(on_tpu[k].cpu(), v, rtol=0, atol=0)
    back = dev.cpu()
    assert back.head.weight is back.emb.weight and back.emb.weight.device.type == "cpu"
    ids = _ids()
    torch.testing.assert_close(back(ids), cpu(ids), **F32)


# ---- a second device, threads, grad modes ----


def test_model_on_second_device_matches_cpu():
    code = textwrap.dedent(
        """
        import copy, torch, torchtpu
        torch.manual_seed(0)
        cpu = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.GELU(), torch.nn.Linear(7, 3))
        dev = copy.deepcopy(cpu).to("tpu:1")
        x = torch.randn(4, 5)
        yc = cpu(x); yc.square().sum().backward()
        yd = dev(x.to("tpu:1")); yd.square().sum().backward()
        assert yd.device == torch.device("tpu:1"), yd.device
        torch.testing.assert_close(yd.detach().cpu(), yc.detach(), rtol=1e-5, atol=1e-5)
        for pc, pd in zip(cpu.parameters(), dev.parameters()):
            assert pd.grad.device == torch.device("tpu:1")
            torch.testing.assert_close(pd.grad.cpu(), pc.grad, rtol=1e-5, atol=1e-5)
        assert torch.tpu.current_device() == 0
        print("OK")
        """
    )
    env = dict(os.environ, TORCHTPU_CPU_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "OK" in r.stdout


def test_threads_share_one_model():
    torch.manual_seed(0)
    cpu = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    dev = copy.deepcopy(cpu).to("tpu")
    inputs = [torch.randn(3, 8) for _ in range(8)]
    expected = [cpu(x).detach() for x in inputs]
    results = [None] * len(inputs)
    errors = []

    def work(i):
        try:
            with torch.no_grad():
                for _ in range(5):
                    results[i] = dev(inputs[i].to("tpu")).cpu()
        except Exception as e:  # surfaced below with the thread's index
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for got, want in zip(results, expected):
        torch.testing.assert_close(got, want, **F32)


def test_no_grad_and_inference_mode():
    torch.manual_seed(0)
    cpu = torch.nn.Linear(4, 3)
    dev = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(2, 4)
    with torch.no_grad():
        y = dev(x.to("tpu"))
    assert not y.requires_grad and y.grad_fn is None
    torch.testing.assert_close(y.cpu(), cpu(x).detach(), **F32)
    with torch.inference_mode():
        z = dev(x.to("tpu"))
        assert z.is_inference() and not z.requires_grad
        z.add_(1)  # in-place on an inference tensor is allowed inside the mode
    torch.testing.assert_close(z.cpu(), cpu(x).detach() + 1, **F32)
    with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
        (dev.weight * z).sum()
    # Outside the modes, autograd works again on the same module.
    dev(x.to("tpu")).sum().backward()
    cpu(x).sum().backward()
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad, **F32)


# ---- explicit generators ----


def test_explicit_generator_is_its_own_stream():
    g = torch.Generator(device="tpu")
    assert g.device.type == "tpu"
    g.manual_seed(1)
    a = torch.randn(64, device="tpu", generator=g).cpu()
    torch.manual_seed(123)  # reseeding the default generator does not touch g
    g.manual_seed(1)
    b = torch.randn(64, device="tpu", generator=g).cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    # Two draws from g differ; another seed differs.
    c = torch.randn(64, device="tpu", generator=g).cpu()
    assert not torch.equal(b, c)
    g2 = torch.Generator(device="tpu").manual_seed(2)
    assert not torch.equal(a, torch.randn(64, device="tpu", generator=g2).cpu())
    # Drawing from g leaves the default stream where it was.
    torch.manual_seed(5)
    x = torch.randn(16, device="tpu").cpu()
    torch.manual_seed(5)
    torch.rand(16, device="tpu", generator=g)
    torch.randn(16, device="tpu", generator=g)
    y = torch.randn(16, device="tpu").cpu()
    torch.testing.assert_close(x, y, rtol=0, atol=0)


def test_generator_state_round_trip_and_dropout():
    g = torch.Generator(device="tpu").manual_seed(7)
    state = g.get_state()
    u1 = torch.rand(32, device="tpu", generator=g).cpu()
    g.set_state(state)
    u2 = torch.rand(32, device="tpu", generator=g).cpu()
    torch.testing.assert_close(u1, u2, rtol=0, atol=0)
    assert float(u1.min()) >= 0.0 and float(u1.max()) < 1.0
    g.manual_seed(3)
    p1 = torch.randperm(20, device="tpu", generator=g).cpu()
    g.manual_seed(3)
    p2 = torch.randperm(20, device="tpu", generator=g).cpu()
    assert torch.equal(p1, p2) and torch.equal(p1.sort().values, torch.arange(20))
    x = torch.ones(1000, device="tpu")
    g.manual_seed(11)
    m1 = torch.bernoulli(torch.full((1000,), 0.5, device="tpu"), generator=g).cpu()
    g.manual_seed(11)
    m2 = torch.bernoulli(torch.full((1000,), 0.5, device="tpu"), generator=g).cpu()
    assert torch.equal(m1, m2) and 350 < int(m1.sum()) < 650
    torch.testing.assert_close(x.cpu(), torch.ones(1000))


def test_default_generators_per_device_and_fork_rng():
    torch.tpu.manual_seed(42)
    assert torch.tpu.initial_seed() == 42
    st = torch.tpu.get_rng_state()
    a = torch.randn(8, device="tpu").cpu()
    torch.tpu.set_rng_state(st)
    b = torch.randn(8, device="tpu").cpu()
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    with torch.random.fork_rng(device_type="tpu"):
        torch.randn(8, device="tpu")
    c = torch.randn(8, device="tpu").cpu()
    torch.tpu.set_rng_state(st)
    torch.randn(8, device="tpu")
    d = torch.randn(8, device="tpu").cpu()
    torch.testing.assert_close(c, d, rtol=0, atol=0)
    assert len(torch.tpu.get_rng_state_all()) == torch.tpu.device_count()
