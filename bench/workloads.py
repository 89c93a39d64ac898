"""The benchmark workloads, written once in plain PyTorch and built for any backend.

A backend is one of:
  "tpu"      - torchtpu strict eager (device "tpu", asynchronous; synchronised before
               every timer stop with torch.tpu.synchronize()),
  "cpu"      - PyTorch eager on the CPU (synchronous),
  "inductor" - torch.compile (default backend, Inductor) on the CPU,
and, for bench/peers.py only (its own venv with torch 2.9 + torch-xla 2.9, PJRT_DEVICE=CPU):
  "xla"         - PyTorch/XLA lazy tensors on torch_xla.device() (the worker calls
                  torch_xla.sync() and xm.wait_device_ops() after each step),
  "xla-compile" - torch.compile(backend="openxla") on the XLA device, compiling what
                  "tpu-compile" compiles (the whole training step, or the model).

`build(name, backend, cfg)` returns a Workload: `step()` runs one timed unit of work
(it does not synchronise; the worker does), and `unit` / `work` say how to turn a step
time into the workload's own figure (µs/op, GFLOP/s, tokens/s ...).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------- configurations

FULL = {
    "dispatch": {"ops": 1000, "numel": 16},
    "matmul": {"n": 2048},
    "mlp_train": {"batch": 128, "dims": [784, 1024, 1024, 10]},
    "gpt_train": {"layers": 4, "d_model": 512, "heads": 8, "seq": 256, "batch": 8, "vocab": 50257},
    "gpt_fwd": {"layers": 4, "d_model": 512, "heads": 8, "seq": 256, "batch": 8, "vocab": 50257},
    "llama_decode": {"layers": 4, "d_model": 256, "heads": 4, "kv_heads": 2, "ffn": 768,
                     "vocab": 32000, "prompt": 16, "new_tokens": 64},
    "svd": {"batch": 64, "n": 128},
    "qr": {"batch": 64, "n": 128},
    "eigh": {"batch": 64, "n": 128},
}

# mlp_train's model and batch, run `steps` times per timed run.
FULL["mlp_loop"] = {**FULL["mlp_train"], "steps": 10}

# --quick: the GPT shapes and the decode length shrink (documented in the report);
# everything else is the full size, with fewer repeats.
QUICK = {
    **FULL,
    "gpt_train": {**FULL["gpt_train"], "seq": 128, "batch": 4, "vocab": 8192},
    "gpt_fwd": {**FULL["gpt_fwd"], "seq": 128, "batch": 4, "vocab": 8192},
    "llama_decode": {**FULL["llama_decode"], "new_tokens": 32},
}

WORKLOADS = list(FULL)
# The linear-algebra rows (issue 12's SVD/QR/eigh target): not part of the peers' plan.
DECOMPOSITIONS = ["svd", "qr", "eigh"]


@dataclass
class Workload:
    step: Callable[[], object]
    unit: str                    # the workload's own figure: "us/op", "GFLOP/s", "tokens/s", "ms/step"
    work: float                  # figure = work / seconds (throughputs) or seconds * work (latency)
    kind: str                    # "latency" (lower is better) or "throughput" (higher is better)
    notes: list[str] = field(default_factory=list)

    def figure(self, seconds: float) -> float:
        if self.kind == "latency":
            return seconds * self.work
        return self.work / seconds


# torch.compile backends of the "whole program" modes: the tpu one, and PyTorch/XLA's peer.
_WHOLE = {"tpu-compile": "tpu", "xla-compile": "openxla"}


def _compile(fn, backend):
    if backend == "inductor":
        return torch.compile(fn)
    if backend in _WHOLE:
        return torch.compile(fn, backend=_WHOLE[backend])
    return fn


def _device(backend):
    if backend.startswith("tpu"):
        return "tpu"
    if backend.startswith("xla"):
        import torch_xla
        return torch_xla.device()
    return "cpu"


def _train_step(loss_fn, opt, backend):
    """One training step. tpu-compile (and xla-compile) compile all of it (forward, loss,
    backward and the optimizer step); Inductor compiles the forward+loss given to it."""
    def step():
        loss = loss_fn()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return torch.compile(step, backend=_WHOLE[backend]) if backend in _WHOLE else step


# ---------------------------------------------------------------- 1. dispatch latency

def dispatch(backend, cfg):
    dev = _device(backend)
    n_ops = cfg["ops"]
    x0 = torch.randn(cfg["numel"], device=dev)

    def chain(x):
        # Alternating add / mul with Python-float scalars: 1,000 elementwise ops.
        for i in range(n_ops):
            x = x.add(1e-3) if i % 2 == 0 else x.mul(0.999)
        return x

    fn = _compile(chain, backend)
    state = {"x": x0}

    def step():
        state["x"] = fn(x0)
        return state["x"]

    notes = []
    if backend == "inductor":
        notes.append("Inductor fuses the 1,000-op chain into one kernel: µs/op = step/1,000")
    return Workload(step, "us/op", 1e6 / n_ops, "latency", notes)


# ---------------------------------------------------------------- 2. large matmul

def matmul(backend, cfg):
    dev = _device(backend)
    n = cfg["n"]
    a = torch.randn(n, n, device=dev)
    b = torch.randn(n, n, device=dev)
    fn = _compile(torch.mm, backend)
    out = {}

    def step():
        out["c"] = fn(a, b)
        return out["c"]

    return Workload(step, "GFLOP/s", 2.0 * n ** 3 / 1e9, "throughput")


# ---------------------------------------------------------------- 3. MLP training

def mlp_train(backend, cfg):
    dev = _device(backend)
    torch.manual_seed(0)
    dims = cfg["dims"]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(nn.Linear(dims[i], dims[i + 1]))
        if i < len(dims) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(cfg["batch"], dims[0], device=dev)
    y = torch.randint(0, dims[-1], (cfg["batch"],), device=dev)

    def fwd_loss(x, y):
        return F.cross_entropy(model(x), y)

    fl = _compile(fwd_loss, backend) if backend == "inductor" else fwd_loss
    step = _train_step(lambda: fl(x, y), opt, backend)

    notes = []
    if backend == "inductor":
        notes.append("forward+loss compiled (AOTAutograd backward); Adam step eager")
    if backend in _WHOLE:
        notes.append("whole step compiled: forward, loss, backward and the Adam step")
    return Workload(step, "ms/step", 1e3, "latency", notes)


def mlp_loop(backend, cfg):
    """mlp_train's step `steps` times in a row, synchronised once at the end: a training
    loop that does not read its loss every step. Strict mode queues steps ahead; fused
    mode has no sync to cut its recording at and must find the loop's period itself
    (docs/eager-modes.md), so a timed compile here means it did not."""
    inner = mlp_train(backend, cfg)
    n = cfg["steps"]

    def step():
        for _ in range(n):
            loss = inner.step()
        return loss

    return Workload(step, "ms/step", 1e3 / n, "latency",
                    inner.notes + [f"{n} steps per timed run, one sync after the last"])


# ---------------------------------------------------------------- 4. GPT-2-shaped decoder

class GPTBlock(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)

    def forward(self, x):
        B, T, C = x.shape
        h = self.heads
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, h, C // h).transpose(1, 2)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.proj(y)
        x = x + self.fc_proj(F.gelu(self.fc(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(self, vocab, seq, d, heads, layers):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq, d)
        self.blocks = nn.ModuleList(GPTBlock(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)   # tied LM head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def _gpt(backend, cfg):
    dev = _device(backend)
    torch.manual_seed(0)
    model = GPT(cfg["vocab"], cfg["seq"], cfg["d_model"], cfg["heads"], cfg["layers"]).to(dev)
    idx = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), device=dev)
    tgt = torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"]), device=dev)
    return model, idx, tgt


def gpt_train(backend, cfg):
    model, idx, tgt = _gpt(backend, cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    fl = _compile(model, backend) if backend == "inductor" else model
    step = _train_step(lambda: fl(idx, tgt), opt, backend)

    notes = []
    if backend == "inductor":
        notes.append("model+loss compiled (AOTAutograd backward); AdamW step eager")
    if backend in _WHOLE:
        notes.append("whole step compiled: forward, loss, backward and the AdamW step")
    return Workload(step, "tokens/s", cfg["batch"] * cfg["seq"], "throughput", notes)


def gpt_fwd(backend, cfg):
    model, idx, tgt = _gpt(backend, cfg)
    model.eval()
    fl = _compile(model, backend)
    out = {}

    def step():
        # The result is kept (as in every workload): a lazy backend (PyTorch/XLA) computes
        # only what is still referenced when the step is synchronised.
        with torch.no_grad():
            out["loss"] = fl(idx, tgt)
            return out["loss"]

    return Workload(step, "tokens/s", cfg["batch"] * cfg["seq"], "throughput")


# ---------------------------------------------------------------- 5. Llama-shaped greedy decoding

class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d, heads, kv_heads, max_len, batch):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.wq = nn.Linear(d, heads * self.hd, bias=False)
        self.wk = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wv = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(heads * self.hd, d, bias=False)
        # The preallocated KV cache, written in place at the current position.
        self.register_buffer("k_cache", torch.zeros(batch, kv_heads, max_len, self.hd), persistent=False)
        self.register_buffer("v_cache", torch.zeros(batch, kv_heads, max_len, self.hd), persistent=False)

    def forward(self, x, cos, sin, mask, start: int):
        B, T, _ = x.shape
        q = self.wq(x).view(B, T, self.h, self.hd).transpose(1, 2)
        k = self.wk(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        v = self.wv(x).view(B, T, self.kvh, self.hd).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        self.k_cache[:, :, start:start + T] = k          # in-place write into the cache
        self.v_cache[:, :, start:start + T] = v
        rep = self.h // self.kvh                          # GQA: repeat the KV heads
        L = self.k_cache.shape[2]
        kk = self.k_cache[:, :, None].expand(B, self.kvh, rep, L, self.hd).reshape(B, self.h, L, self.hd)
        vv = self.v_cache[:, :, None].expand(B, self.kvh, rep, L, self.hd).reshape(B, self.h, L, self.hd)
        # Static shapes: attend over the whole cache, masking positions not yet written.
        y = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask)
        return self.wo(y.transpose(1, 2).reshape(B, T, self.h * self.hd))


class LlamaBlock(nn.Module):
    def __init__(self, d, heads, kv_heads, ffn, max_len, batch):
        super().__init__()
        self.attn_norm = RMSNorm(d)
        self.attn = LlamaAttention(d, heads, kv_heads, max_len, batch)
        self.mlp_norm = RMSNorm(d)
        self.w1 = nn.Linear(d, ffn, bias=False)
        self.w3 = nn.Linear(d, ffn, bias=False)
        self.w2 = nn.Linear(ffn, d, bias=False)

    def forward(self, x, cos, sin, mask, start: int):
        x = x + self.attn(self.attn_norm(x), cos, sin, mask, start)
        h = self.mlp_norm(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class Llama(nn.Module):
    def __init__(self, vocab, d, heads, kv_heads, ffn, layers, max_len, batch=1, theta=10000.0):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList(LlamaBlock(d, heads, kv_heads, ffn, max_len, batch) for _ in range(layers))
        self.norm = RMSNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // heads
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd))
        freqs = torch.outer(torch.arange(max_len).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("key_pos", torch.arange(max_len), persistent=False)

    def forward(self, tokens, positions, start: int):
        """tokens [B, T], positions [T] (a device tensor), start: the cache slot of tokens[:, 0]."""
        x = self.embed(tokens)
        cos = self.cos[positions][None, None]             # rotary tables gathered by position
        sin = self.sin[positions][None, None]
        mask = (self.key_pos[None, :] <= positions[:, None])[None, None]   # causal over the cache
        for layer in self.layers:
            x = layer(x, cos, sin, mask, start)
        return self.lm_head(self.norm(x[:, -1:]))         # logits of the last position only


def llama_decode(backend, cfg):
    dev = _device(backend)
    torch.manual_seed(0)
    P, N = cfg["prompt"], cfg["new_tokens"]
    model = Llama(cfg["vocab"], cfg["d_model"], cfg["heads"], cfg["kv_heads"], cfg["ffn"],
                  cfg["layers"], max_len=P + N).to(dev).eval()
    fwd = _compile(model, backend)
    prompt = torch.randint(0, cfg["vocab"], (1, P), device=dev)
    prompt_pos = torch.arange(P, device=dev)
    one = torch.ones(1, dtype=torch.long, device=dev)
    out = {}

    def step():
        with torch.no_grad():
            logits = fwd(prompt, prompt_pos, 0)                 # prefill
            tok = logits[:, -1].argmax(-1, keepdim=True)         # greedy
            toks = [tok]
            pos = prompt_pos[-1:] + one
            for i in range(N - 1):                               # N new tokens in all
                logits = fwd(tok, pos, P + i)
                tok = logits[:, -1].argmax(-1, keepdim=True)
                toks.append(tok)
                pos = pos + one
            out["tokens"] = torch.cat(toks, dim=1)
            return out["tokens"]

    notes = [f"prefill {P} + {N} new tokens (batch 1); tokens/s = {N}/generation time; "
             "full-cache attention with a position mask (static shapes)"]
    return Workload(step, "tokens/s", N, "throughput", notes)


# ---------------------------------------------------------------- 7. decompositions

# Each returns the factors and the relative reconstruction error of each matrix (float64).
_DECOMPS = {
    "svd": (lambda a: torch.linalg.svd(a, full_matrices=False),
            lambda a, f: a - f[0] @ torch.diag_embed(f[1]) @ f[2]),
    "qr": (torch.linalg.qr, lambda a, f: a - f[0] @ f[1]),
    "eigh": (torch.linalg.eigh, lambda a, f: a @ f[1] - f[1] * f[0].unsqueeze(-2)),
}


def _decomp_inputs(name, batch, n, seed):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, n, n, generator=g)
    return a + a.mT if name == "eigh" else a


def _reconstruction_error(name, a, device):
    """max over the batch of ||residual||_F / ||A||_F, the factors computed on `device`."""
    fn, residual = _DECOMPS[name]
    f = [t.cpu().double() for t in fn(a.to(device))]
    a64 = a.double()
    return float((residual(a64, f).norm(dim=(-2, -1)) / a64.norm(dim=(-2, -1))).max())


def decomposition(name):
    def build(backend, cfg):
        dev = _device(backend)
        fn = _compile(_DECOMPS[name][0], backend)
        x = _decomp_inputs(name, cfg["batch"], cfg["n"], 0).to(dev)
        notes = []
        if dev != "cpu":
            # On other matrices of the same size (batch 4: another program, so the cold
            # first step stays cold), next to CPU's error on the same matrices.
            probe = _decomp_inputs(name, 4, cfg["n"], 1)
            mine, cpu = _reconstruction_error(name, probe, dev), _reconstruction_error(name, probe, "cpu")
            notes.append(f"reconstruction error (max ||A - factors||_F / ||A||_F, float32): "
                         f"{mine:.2e} here vs {cpu:.2e} on CPU ({mine / cpu:.1f}x)")
        return Workload(lambda: fn(x), "ms/step", 1e3, "latency", notes)
    return build


BUILDERS = {
    "dispatch": dispatch,
    "matmul": matmul,
    "mlp_train": mlp_train,
    "mlp_loop": mlp_loop,
    "gpt_train": gpt_train,
    "gpt_fwd": gpt_fwd,
    "llama_decode": llama_decode,
    "svd": decomposition("svd"),
    "qr": decomposition("qr"),
    "eigh": decomposition("eigh"),
}


def build(name, backend, cfg):
    return BUILDERS[name](backend, cfg)


def describe(name, cfg):
    c = cfg
    return {
        "dispatch": lambda: f"chain of {c['ops']} add/mul on a {c['numel']}-element fp32 tensor",
        "matmul": lambda: f"{c['n']}x{c['n']} @ {c['n']}x{c['n']} fp32 (2n^3 FLOPs)",
        "mlp_train": lambda: f"MLP {'-'.join(map(str, c['dims']))}, batch {c['batch']}, Adam, train step",
        "mlp_loop": lambda: (f"mlp_train's step {c['steps']} times without a sync between steps "
                             f"(figure per step)"),
        "gpt_train": lambda: (f"GPT-2-shaped {c['layers']}L d{c['d_model']} h{c['heads']}, seq {c['seq']}, "
                              f"batch {c['batch']}, vocab {c['vocab']}, AdamW train step"),
        "gpt_fwd": lambda: (f"GPT-2-shaped {c['layers']}L d{c['d_model']} h{c['heads']}, seq {c['seq']}, "
                            f"batch {c['batch']}, vocab {c['vocab']}, forward + loss, no_grad"),
        "llama_decode": lambda: (f"Llama-shaped {c['layers']}L d{c['d_model']} h{c['heads']}/kv{c['kv_heads']} "
                                 f"ffn {c['ffn']} vocab {c['vocab']}: greedy, prompt {c['prompt']}, "
                                 f"{c['new_tokens']} new tokens, KV cache written in place"),
        "svd": lambda: f"torch.linalg.svd (reduced) of {c['batch']} random {c['n']}x{c['n']} fp32 matrices",
        "qr": lambda: f"torch.linalg.qr of {c['batch']} random {c['n']}x{c['n']} fp32 matrices",
        "eigh": lambda: f"torch.linalg.eigh of {c['batch']} random symmetric {c['n']}x{c['n']} fp32 matrices",
    }[name]()

