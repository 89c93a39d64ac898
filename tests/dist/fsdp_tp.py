"""Run by torchrun (tests/test_distributed.py): FSDP2 `fully_shard` (per layer and
root, reshard_after_forward both ways), DTensor (distribute_tensor, redistribute,
tensor parallel Colwise/Rowwise), a Llama-shaped block with sequence parallel
(llama_tp.py), and DDP and FSDP2 under torch.compile(backend="tpu") on tpu over the
"tpu" backend, each equal to a single-process CPU run within 1e-5."""
import copy
import datetime

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu
from llama_tp import llama_block

TOL = dict(rtol=1e-5, atol=1e-5)


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))


def fsdp(r, n, reshard):
    ref = mlp()
    model = copy.deepcopy(ref).to("tpu")
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, reshard_after_forward=reshard)
    fully_shard(model, reshard_after_forward=reshard)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
    x = torch.randn(3, n * 2, 8, generator=torch.Generator().manual_seed(1))
    for step in range(3):
        opt.zero_grad()
        model(x[step, r * 2:(r + 1) * 2].to("tpu")).square().mean().backward()
        opt.step()
        ref_opt.zero_grad()
        ref(x[step]).square().mean().backward()
        ref_opt.step()
    full = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
    for k, v in ref.state_dict().items():
        torch.testing.assert_close(full[k], v, **TOL, msg=f"fsdp reshard={reshard} {k}")


class MLP(torch.nn.Module):
    """A model whose forward is user code: Dynamo starts tracing only in user frames, so
    torch.compile of DDP(nn.Sequential(...)) would compile nothing (torch's own modules
    are inlined, never a root), while this one compiles around DDP's and FSDP2's hooks."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def compiled_ddp_and_fsdp(r, n):
    x = torch.randn(3, n * 2, 8, generator=torch.Generator().manual_seed(3))
    ref = MLP()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        ref_opt.zero_grad()
        ref(x[step]).square().mean().backward()
        ref_opt.step()
    fsdp_model = MLP().to("tpu")
    for layer in (fsdp_model.a, fsdp_model.b):
        fully_shard(layer)
    fully_shard(fsdp_model)
    for name, model in (("DDP", DDP(MLP().to("tpu"))), ("FSDP2", fsdp_model)):
        before = torchtpu.metrics()
        step_fn = torch.compile(model, backend="tpu")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad()
            step_fn(x[step, r * 2:(r + 1) * 2].to("tpu")).square().mean().backward()
            opt.step()
        after = torchtpu.metrics()
        assert after["graph_fallbacks"] == before["graph_fallbacks"], name
        assert after["graph_runs"] - before["graph_runs"] >= 6, (name, after["graph_runs"] - before["graph_runs"])
        for (k, v), w in zip(model.named_parameters(), ref.parameters()):
            got = v.full_tensor() if hasattr(v, "full_tensor") else v
            torch.testing.assert_close(got.detach().cpu(), w.detach(), **TOL, msg=f"compiled {name} {k}")


def dtensor(n, mesh):
    full = torch.arange(4.0 * n * 6).reshape(4 * n, 6)
    d = distribute_tensor(full.to("tpu"), mesh, [Shard(0)])
    assert d.to_local().shape == (4, 6) and d.to_local().device.type == "tpu"
    torch.testing.assert_close(d.redistribute(mesh, [Replicate()]).to_local().cpu(), full)
    torch.testing.assert_close(d.redistribute(mesh, [Shard(1)]).full_tensor().cpu(), full)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16, bias=False), torch.nn.ReLU(), torch.nn.Linear(16, 8, bias=False))
    tp = parallelize_module(copy.deepcopy(ref).to("tpu"), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(2))
    y = tp(x.to("tpu"))
    y.square().sum().backward()
    yr = ref(x)
    yr.square().sum().backward()
    torch.testing.assert_close(y.cpu(), yr.detach(), **TOL)
    for a, b in zip(tp.parameters(), ref.parameters()):
        torch.testing.assert_close(a.grad.full_tensor().cpu(), b.grad, **TOL)


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    fsdp(r, n, reshard=True)
    fsdp(r, n, reshard=False)
    mesh = init_device_mesh("tpu", (n,))
    dtensor(n, mesh)
    llama_block(r, n, mesh)
    llama_block(r, n, mesh, compiled=True)
    compiled_ddp_and_fsdp(r, n)
    dist.destroy_process_group()
    print(f"rank {r}/{n}: FSDP2 and DTensor OK", flush=True)


if __name__ == "__main__":
    main()
