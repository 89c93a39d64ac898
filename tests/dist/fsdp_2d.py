"""Run by torchrun with 4 processes (tests/test_distributed.py): FSDP2 mixed precision
(bf16 params, fp32 reduce), torch.distributed.checkpoint save/load of the sharded
state, and a 2-D mesh (FSDP x tensor parallel) training 3 steps equal to a
single-process CPU run within 1e-5; all on tpu over the "tpu" backend."""
import copy
import datetime
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import torchtpu  # noqa: F401


def mlp(bias=True):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16, bias=bias), torch.nn.ReLU(), torch.nn.Linear(16, 8, bias=bias))


def shard(model, **kw):
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, **kw)
    return fully_shard(model, **kw)


def mixed_precision_and_checkpoint(r, n, ckpt):
    ref = mlp()
    x = torch.randn(n * 2, 8, generator=torch.Generator().manual_seed(1))
    m = shard(copy.deepcopy(ref).to("tpu"),
              mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    out = m(x[r * 2:(r + 1) * 2].to("tpu"))
    assert out.dtype == torch.bfloat16
    out.float().square().mean().backward()
    ref(x).square().mean().backward()
    for p, q in zip(m.parameters(), ref.parameters()):
        assert p.grad.dtype == torch.float32  # sharded fp32 params keep fp32 gradients
        torch.testing.assert_close(p.grad.full_tensor().cpu(), q.grad, rtol=3e-2, atol=3e-3)  # bf16 compute
    dcp.save({"model": m.state_dict()}, checkpoint_id=ckpt)
    fresh = shard(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).to("tpu"))
    state = {"model": fresh.state_dict()}
    dcp.load(state, checkpoint_id=ckpt)
    fresh.load_state_dict(state["model"])
    for (k, a), b in zip(m.state_dict().items(), fresh.state_dict().values()):
        torch.testing.assert_close(b.full_tensor().cpu(), a.full_tensor().cpu(), rtol=0, atol=0, msg=k)


def two_d(n):
    mesh = init_device_mesh("tpu", (2, n // 2), mesh_dim_names=("dp", "tp"))
    ref = mlp(bias=False)
    m = copy.deepcopy(ref).to("tpu")
    parallelize_module(m, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
    fully_shard(m, mesh=mesh["dp"])
    opt, ref_opt = torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    x = torch.randn(3, 4, 8, generator=torch.Generator().manual_seed(1))
    dp = mesh["dp"].get_local_rank()
    for s in range(3):
        opt.zero_grad()
        m(x[s, dp * 2:(dp + 1) * 2].to("tpu")).square().mean().backward()
        opt.step()
        ref_opt.zero_grad()
        ref(x[s]).square().mean().backward()
        ref_opt.step()
    for (k, a), b in zip(m.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a.full_tensor().cpu(), b, rtol=1e-5, atol=1e-5, msg=k)


def main():
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    mixed_precision_and_checkpoint(r, n, sys.argv[1])
    two_d(n)
    dist.destroy_process_group()
    print(f"rank {r}/{n}: FSDP2 mixed precision, checkpoint and 2-D OK", flush=True)


if __name__ == "__main__":
    main()
