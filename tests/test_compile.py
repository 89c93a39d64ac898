"""torch.compile(backend="tpu"): whole FX graphs as one program each.

Every result is compared with PyTorch eager on the CPU (same seed). Float32
tolerances: a program and CPU eager sum in different orders, so values differ
by float32 rounding accumulated over the reduction lengths here (<= a few
hundred terms): rtol 1e-5 / atol 1e-5 for single ops, 1e-4 after training
steps (Adam divides by sqrt(v), which amplifies rounding in early steps).
torchtpu.metrics() tells how many programs were compiled and run, so the tests
check that the work really ran as programs, not as eager ops.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtpu
import torchtpu.compile as tc


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _metrics():
    m = torchtpu.metrics()
    return {k: m[k] for k in ("graph_compiles", "graph_runs")}


def _delta(before):
    after = _metrics()
    return {k: after[k] - before[k] for k in after}


def _no_fallbacks(fn, *args, **kwargs):
    """Runs fn; fails if any graph ran as eager ops instead of one program."""
    before = tc.stats()["fallbacks"]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="torchtpu: this graph runs as tpu eager ops")
        out = fn(*args, **kwargs)
    assert tc.stats()["fallbacks"] == before
    return out


def test_function_with_python_constants():
    def f(x, y):
        return torch.tanh(x) * y + 1.5, (x - 2).relu().sum(dim=1)

    x, y = torch.randn(8, 16), torch.randn(8, 16)
    m0 = _metrics()
    out = _no_fallbacks(torch.compile(f, backend="tpu"), x.to("tpu"), y.to("tpu"))
    for got, want in zip(out, f(x, y)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
    assert _delta(m0) == {"graph_compiles": 1, "graph_runs": 1}


def test_mlp_forward_backward():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    mt = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu")
    x = torch.randn(8, 16)
    m0 = _metrics()
    out = _no_fallbacks(mt, x.to("tpu"))
    torch.testing.assert_close(out.cpu(), m(x), rtol=1e-5, atol=1e-5)
    out.square().sum().backward()
    m(x).square().sum().backward()
    for (n, p), q in zip(mt.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5, msg=n)
    # one forward program and one backward program
    assert _delta(m0) == {"graph_compiles": 2, "graph_runs": 2}


class _GPT(nn.Module):
    """Embedding, causal attention (SDPA), GELU MLP, tied LM head, cross-entropy."""

    def __init__(self, vocab=64, d=32, heads=4, seq=16):
        super().__init__()
        self.heads = heads
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.ln1, self.ln2, self.ln_f = nn.LayerNorm(d), nn.LayerNorm(d), nn.LayerNorm(d)
        # No qkv bias: the key bias has an exactly zero gradient (softmax is shift
        # invariant), and Adam turns its rounding noise into lr-sized steps of
        # random sign on any backend.
        self.qkv, self.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d)
        self.fc, self.fc_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, idx, tgt):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        q, k, v = self.qkv(self.ln1(x)).split(x.shape[-1], dim=2)
        q, k, v = (t.view(B, T, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, -1)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))
        logits = F.linear(self.ln_f(x), self.wte.weight)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def _train(model, dev, compiled, steps=5, lr=1e-2):
    torch.manual_seed(1)
    idx = torch.randint(0, 64, (4, 16))
    tgt = torch.randint(0, 64, (4, 16))
    m = copy.deepcopy(model).to(dev)
    # A tensor learning rate: PyTorch's recipe for compiled optimizers with a
    # schedule (a float lr is a constant to Dynamo, so a schedule recompiles).
    opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(lr), weight_decay=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0 / (1 + s))
    i, t = idx.to(dev), tgt.to(dev)

    def step():
        loss = m(i, t)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    fn = torch.compile(step, backend="tpu") if compiled else step
    losses, compiles = [], []
    for _ in range(steps):
        losses.append(fn().item())
        sched.step()
        compiles.append(torchtpu.metrics()["graph_compiles"])
    return losses, m, compiles


def test_whole_train_step_compiled_with_lr_schedule():
    torch.manual_seed(0)
    base = _GPT()
    ref_losses, ref, _ = _train(base, "cpu", False)
    losses, got, compiles = _no_fallbacks(_train, base, "tpu", True)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(ref_losses), rtol=1e-4, atol=1e-4)
    for (n, p), q in zip(got.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-4, atol=1e-4, msg=n)
    # the tie survives: one tensor, updated once per step
    assert got.wte.weight.device.type == "tpu"
    # steady state: no recompiles after the first step, although the lr changes every step
    assert compiles[-1] == compiles[0], compiles


_HOST_STATE_OPTIMIZERS = {
    "AdamW": lambda p: torch.optim.AdamW(p, lr=1e-2),
    "Adam_amsgrad": lambda p: torch.optim.Adam(p, lr=1e-2, amsgrad=True),
    "NAdam": lambda p: torch.optim.NAdam(p, lr=1e-2, decoupled_weight_decay=True, weight_decay=0.1),
    "RAdam": lambda p: torch.optim.RAdam(p, lr=1e-2),
    "Adamax": lambda p: torch.optim.Adamax(p, lr=1e-2),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True),
    "Adadelta": lambda p: torch.optim.Adadelta(p, lr=1.0),
}


@pytest.mark.parametrize("name", list(_HOST_STATE_OPTIMIZERS))
def test_compiled_optimizer_step_counts_stay_on_the_host(name):
    """The step counts of non-capturable optimizers (and NAdam's mu_product) are 0-dim
    cpu tensors: their update and what is computed from them alone (bias corrections,
    RAdam's rectification, NAdam's momentum schedule) run on the host, as in eager, so
    a compiled step reads nothing back from the device (it made one blocking
    device-to-host copy per parameter per step)."""
    opt_cls = _HOST_STATE_OPTIMIZERS[name]
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    x, y = torch.randn(6, 8), torch.randn(6, 4)
    results = {}
    for dev in ("cpu", "tpu"):
        mm = copy.deepcopy(m).to(dev)
        opt = opt_cls(mm.parameters())
        step = torch.compile(opt.step, backend="tpu") if dev == "tpu" else opt.step
        moved = []
        for _ in range(4):
            F.mse_loss(mm(x.to(dev)), y.to(dev)).backward()
            torch.tpu.synchronize()
            before = torchtpu.metrics()
            _no_fallbacks(step) if dev == "tpu" else step()
            after = torchtpu.metrics()
            moved.append({k: after[k] - before[k] for k in ("d2h_transfers", "syncs")})
            opt.zero_grad(set_to_none=True)
        results[dev] = (mm, opt, moved)
    (ref, ref_opt, _), (got, got_opt, moved) = results["cpu"], results["tpu"]
    # debug mode waits after every execution by design: only the reads must be gone there
    waits = 1 if torchtpu.get_eager_mode() == "debug" else 0
    assert moved[1:] == [{"d2h_transfers": 0, "syncs": waits}] * 3, moved
    for p, q in zip(got.parameters(), ref.parameters()):
        # float32 after 4 steps; RAdam's rectified steps amplify rounding most (1.5e-6)
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5)
        for key, r in ref_opt.state[q].items():
            if isinstance(r, torch.Tensor) and r.dim() == 0:  # step, mu_product: cpu, equal
                s = got_opt.state[p][key]
                assert s.device.type == "cpu" and s.dtype == r.dtype, key
                torch.testing.assert_close(s, r, rtol=1e-6, atol=0, msg=key)
        assert got_opt.state[p]["step"].item() == 4


def test_batchnorm_running_stats_and_dropout_modes():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
    inner = copy.deepcopy(m).to("tpu")
    mt = torch.compile(inner, backend="tpu")
    x = torch.randn(32, 8)
    for _ in range(2):  # training mode: batch statistics, running stats updated in place
        torch.testing.assert_close(_no_fallbacks(mt, x.to("tpu")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(inner[1], name).cpu(), getattr(m[1], name), rtol=1e-5, atol=1e-6)
    m.eval()
    mt.eval()
    torch.testing.assert_close(_no_fallbacks(mt, x.to("tpu")).cpu(), m(x), rtol=1e-5, atol=1e-5)


def test_dropout_draws_like_eager_tpu():
    """Random ops draw from the device generator in program order: a compiled
    dropout gives the same mask as tpu eager for the same seed, and a new one
    on every call."""
    def f(x):
        return F.dropout(x, p=0.5, training=True) * 3

    x = torch.ones(64, 64, device="tpu")
    cf = torch.compile(f, backend="tpu")
    torch.manual_seed(7)
    eager = [f(x).cpu() for _ in range(2)]
    torch.manual_seed(7)
    compiled = [_no_fallbacks(cf, x).cpu() for _ in range(2)]
    assert not torch.equal(compiled[0], compiled[1])
    for a, b in zip(compiled, eager):
        torch.testing.assert_close(a, b)


def test_input_mutation_and_output_views():
    def f(x, cache, pos):
        cache.index_copy_(0, pos, x)  # a KV-cache style in-place write
        y = cache * 2
        return y.t(), y[1:3]

    x = torch.randn(2, 5)
    cache = torch.zeros(6, 5)
    pos = torch.tensor([1, 4])
    ct = cache.to("tpu")
    out = _no_fallbacks(torch.compile(f, backend="tpu"), x.to("tpu"), ct, pos.to("tpu"))
    want = f(x, cache, pos)
    for got, w in zip(out, want):
        assert got.shape == w.shape and got.stride() == w.stride()
        torch.testing.assert_close(got.cpu(), w)
    torch.testing.assert_close(ct.cpu(), cache)  # the input was updated in place


def test_graph_break_runs_the_rest_eagerly():
    def f(x):
        y = x.sin() * 2
        print("graph break")  # Dynamo breaks the graph here
        return (y + 1).cos()

    x = torch.randn(5, 5)
    m0 = _metrics()
    out = torch.compile(f, backend="tpu")(x.to("tpu"))
    torch.testing.assert_close(out.cpu(), f(x), rtol=1e-5, atol=1e-5)
    assert _delta(m0)["graph_compiles"] == 2
    explained = torch._dynamo.explain(f)(x.to("tpu"))
    assert explained.graph_count == 2 and explained.graph_break_count == 1


def test_op_without_lowering_falls_back_to_eager_with_a_warning():
    """A program cannot hold an op without a lowering or decomposition; that graph
    runs as tpu eager ops (never on the CPU), with a warning naming the op."""
    def f(x):  # memory-efficient attention's CUDA kernel: no lowering on tpu
        q = x.view(1, 4, 1, 4)
        return torch.ops.aten._efficient_attention_forward(q, q, q, None, None, None, None, None, 0.0, 0,
                                                          False)[0].sum() + 1

    x = torch.rand(4, 4) + 0.5
    assert not torchtpu._C.op_supported("_efficient_attention_forward"), "it has a lowering now: pick another op"
    before = tc.stats()["fallbacks"]
    with pytest.warns(UserWarning, match="_efficient_attention_forward"):
        cf = torch.compile(f, backend="tpu")
        with pytest.raises(NotImplementedError, match="_efficient_attention_forward"):
            cf(x.to("tpu"))  # no eager lowering either: the eager error, as without compile
    assert tc.stats()["fallbacks"] == before + 1


def test_index_error_inside_a_program_is_raised_at_sync():
    emb = nn.Embedding(10, 4).to("tpu")
    cf = torch.compile(lambda i: emb(i).sum(), backend="tpu")
    good = cf(torch.tensor([1, 2, 3], device="tpu")).item()
    assert good == pytest.approx(emb.weight[1:4].sum().item(), rel=1e-5)
    with pytest.raises(IndexError, match="index"):
        cf(torch.tensor([1, 20, 3], device="tpu")).item()


@pytest.mark.parametrize("name", ["llama", "bert", "gpt2", "t5", "vit"])
def test_hugging_face_models_compiled_forward_backward(name):
    """Transformers models from the model suite's fast slice, compiled whole:
    loss and every gradient match CPU eager. Gradient errors are measured against
    the model's largest gradient (tests/models/checks.py's convention: some
    parameters, like attention key biases, have exactly-zero true gradients whose
    computed values are rounding noise on every backend)."""
    from models import checks, families
    fam = families.BY_NAME[name]
    config = fam.config()
    base = checks.build_base(config, fam.task, "eager")
    inp = checks.make_inputs(fam.task, config, base)
    cpu, dev = checks.pair(base)
    out = _no_fallbacks(torch.compile(dev, backend="tpu"), **{k: v.to("tpu") for k, v in inp.items()})
    ref = cpu(**inp)
    torch.testing.assert_close(out.loss.cpu(), ref.loss, rtol=1e-5, atol=1e-5)
    out.loss.backward()
    ref.loss.backward()
    grads = [(n, p.grad, q.grad) for (n, p), q in zip(dev.named_parameters(), cpu.parameters()) if q.grad is not None]
    scale = max(g.abs().max().item() for _, _, g in grads)
    for n, got, want in grads:
        assert got is not None, n
        err = (got.cpu() - want).abs().max().item() / scale
        assert err < 1e-5, f"{n}: gradient error {err:.2e} of the largest gradient"


class _Decoder(nn.Module):
    """One attention layer over a preallocated KV cache written in place at a
    Python-int position, as static-cache decoding does."""

    def __init__(self, vocab=50, d=16, max_len=24):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.out = nn.Linear(d, vocab)
        self.register_buffer("k_cache", torch.zeros(1, max_len, d), persistent=False)
        self.register_buffer("v_cache", torch.zeros(1, max_len, d), persistent=False)
        self.register_buffer("key_pos", torch.arange(max_len), persistent=False)

    def forward(self, tokens, positions, start: int):
        x = self.emb(tokens)
        T = x.shape[1]
        self.k_cache[:, start:start + T] = self.k(x)
        self.v_cache[:, start:start + T] = self.v(x)
        mask = self.key_pos[None, :] <= positions[:, None]
        y = F.scaled_dot_product_attention(self.q(x), self.k_cache, self.v_cache, attn_mask=mask)
        return self.out(y[:, -1])


def _greedy(model, fwd, dev, steps=8):
    prompt = torch.tensor([[3, 14, 15, 9]], device=dev)
    P = prompt.shape[1]
    logits = fwd(prompt, torch.arange(P, device=dev), 0)
    toks, all_logits, compiles = [], [logits], []
    for i in range(steps):
        tok = logits.argmax(-1, keepdim=True)
        toks.append(tok)
        logits = fwd(tok, torch.tensor([P + i], device=dev), P + i)
        all_logits.append(logits)
        compiles.append(torch.tpu.is_available() and torchtpu.metrics()["graph_compiles"])
    return torch.cat(toks, 1).cpu(), torch.cat(all_logits).cpu(), compiles


def test_static_cache_decode_is_one_program_for_every_position():
    torch.manual_seed(0)
    base = _Decoder().eval()
    with torch.no_grad():
        ref_toks, ref_logits, _ = _greedy(base, copy.deepcopy(base), "cpu")
        m = copy.deepcopy(base).to("tpu")
        toks, logits, compiles = _no_fallbacks(_greedy, m, torch.compile(m, backend="tpu"), "tpu")
    assert torch.equal(toks, ref_toks)
    torch.testing.assert_close(logits, ref_logits, rtol=1e-5, atol=1e-5)
    # prefill, the first decode position, then Dynamo makes the position symbolic:
    # one program serves every later position (a runtime operand, not a constant)
    assert compiles[1] == compiles[-1], compiles


def test_hugging_face_generate_static_cache_compiled_forward():
    """transformers' recipe: generate(cache_implementation="static") with the
    model's forward compiled. Greedy tokens equal CPU's; the prefill and the
    decode step are one program each, reused for every position and by a second
    generate() (no recompiles)."""
    from models import checks, families
    fam = families.BY_NAME["llama"]
    config = fam.config()
    base = checks.build_base(config, fam.task, "sdpa")
    ids = checks.make_inputs(fam.task, config, base)["input_ids"][:1]
    kw = dict(max_new_tokens=12, do_sample=False, cache_implementation="static")
    ref = copy.deepcopy(base).generate(ids, **kw)
    m = copy.deepcopy(base).to("tpu")
    m.forward = torch.compile(m.forward, backend="tpu")
    m0 = _metrics()
    out = _no_fallbacks(m.generate, ids.to("tpu"), **kw)
    assert torch.equal(out.cpu(), ref)
    first = _delta(m0)["graph_compiles"]
    assert first == 2, first
    out = _no_fallbacks(m.generate, ids.to("tpu"), **kw)
    assert torch.equal(out.cpu(), ref)
    assert _delta(m0)["graph_compiles"] == first


def test_default_backend_compiles_tpu_graphs_with_the_tpu_backend():
    """torch.compile(model) with no backend: Inductor would generate Pallas kernels for
    a "tpu" device and fail for want of JAX; graphs on tpu tensors are compiled by the
    tpu backend instead (forward and backward as programs, equal to CPU eager), and
    graphs on cpu tensors still go to Inductor."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3))
    mt = torch.compile(copy.deepcopy(m).to("tpu"))  # torch.compile's defaults
    x = torch.randn(5, 4)
    m0, graphs = _metrics(), tc.stats()["graphs"]
    y = _no_fallbacks(mt, x.to("tpu"))
    y.square().sum().backward()
    ref = m(x)
    ref.square().sum().backward()
    torch.testing.assert_close(y.cpu(), ref, rtol=1e-5, atol=1e-5)
    for (n, p), q in zip(mt.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5, msg=n)
    assert _delta(m0) == {"graph_compiles": 2, "graph_runs": 2}
    assert tc.stats()["graphs"] == graphs + 2
    out = torch.compile(lambda a: torch.sin(a) * 2)(torch.ones(3))  # cpu: Inductor's
    torch.testing.assert_close(out, torch.sin(torch.ones(3)) * 2)
    assert tc.stats()["graphs"] == graphs + 2
