"""Tensor parallel on a Llama-shaped block (RMSNorm, attention with q/k/v/o
projections, SwiGLU MLP) with ColwiseParallel, RowwiseParallel and SequenceParallel on
tpu, eager and under torch.compile: outputs and gradients equal to the unsharded block on
CPU within 1e-5. Run by
tests/dist/fsdp_tp.py under torchrun."""
import copy

import torch
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                               SequenceParallel, parallelize_module)

import torchtpu  # noqa: F401

DIM, HEADS, HIDDEN, SEQ = 32, 4, 64, 8


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(DIM, DIM, bias=False) for _ in range(4))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, -1, DIM // HEADS).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate, self.up = torch.nn.Linear(DIM, HIDDEN, bias=False), torch.nn.Linear(DIM, HIDDEN, bias=False)
        self.down = torch.nn.Linear(HIDDEN, DIM, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn_norm, self.mlp_norm = torch.nn.RMSNorm(DIM), torch.nn.RMSNorm(DIM)
        self.attn, self.mlp = Attention(), MLP()

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def llama_block(r, n, mesh, compiled=False):
    """compiled: the block under torch.compile(backend="tpu"). Its forward and backward
    graphs hold DTensor's functional collectives; each is cut at them into programs, with
    the collectives run in between (docs/compile.md), and no graph falls back to eager."""
    torch.manual_seed(0)
    ref = Block()
    tp = copy.deepcopy(ref).to("tpu")
    seq_in = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
    parallelize_module(tp, mesh, {
        "attn_norm": SequenceParallel(), "mlp_norm": SequenceParallel(),
        "attn": seq_in, "mlp": seq_in,
        "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
        "attn.o": RowwiseParallel(output_layouts=Shard(1)),
        "mlp.gate": ColwiseParallel(), "mlp.up": ColwiseParallel(),
        "mlp.down": RowwiseParallel(output_layouts=Shard(1)),
    })
    x = torch.randn(2, SEQ, DIM, generator=torch.Generator().manual_seed(1))
    local = x[:, r * SEQ // n:(r + 1) * SEQ // n].to("tpu")  # sequence-sharded activations
    m0 = torchtpu.metrics()
    y = (torch.compile(tp, backend="tpu") if compiled else tp)(local)
    y.square().sum().backward()
    if compiled:
        m1 = torchtpu.metrics()
        assert m1["graph_fallbacks"] == m0["graph_fallbacks"], "a graph ran as eager ops"
        assert m1["graph_runs"] - m0["graph_runs"] >= 4, m1["graph_runs"] - m0["graph_runs"]  # pieces of fw and bw
    yr = ref(x)
    yr.square().sum().backward()
    torch.testing.assert_close(y.cpu(), yr.detach()[:, r * SEQ // n:(r + 1) * SEQ // n], rtol=1e-5, atol=1e-5)
    for (name, a), b in zip(tp.named_parameters(), ref.parameters()):
        g = a.grad.full_tensor() if hasattr(a.grad, "full_tensor") else a.grad
        torch.testing.assert_close(g.cpu(), b.grad, rtol=1e-5, atol=1e-5, msg=name)
