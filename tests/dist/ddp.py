"""Run by torchrun (tests/test_distributed.py): every collective on tpu tensors
(collectives.py), then DDP on tpu over the "tpu" backend — small buckets, no_sync
gradient accumulation — ending with the parameters of single-process training on the
concatenated batch (computed on CPU). argv[1] is the backend string of
init_process_group, or "default" for none (cpu tensors over gloo and tpu tensors over tpu
all the same). Under TORCH_DISTRIBUTED_DEBUG=DETAIL every collective above also passes
the mismatch check, and at the end a shape mismatch on tpu and on cpu tensors must raise
on every rank. Then SyncBatchNorm (convert_sync_batchnorm) in a small conv net under DDP
must train exactly as plain BatchNorm on the concatenated batch in one process (its
batch statistics, their gradients and the running stats span the ranks)."""
import datetime
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import torchtpu  # noqa: F401
from collectives import run_all

# Each rank leaves with os._exit once it has printed its results, skipping interpreter
# finalization. A gloo worker thread can drop its last reference to a finished CPU
# collective's tensors after Python has started finalizing, even after
# destroy_process_group(); that drop takes the GIL, the finalizing interpreter ends the
# thread inside a noexcept destructor, and the rank aborts (SIGABRT) after passing
# (core dump: ProcessGroupGloo::runLoop -> ~AsyncAllreduceWork ->
# TensorImpl::decref_pyobject -> take_gil -> pthread_exit). A PyTorch teardown race, not
# the tpu backend's: its host staging tensors never reach Python. Keeping the tensors
# referenced from a module global did not close it (1 abort in 30 loaded runs): module
# globals are cleared during finalization too.


def model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32),
                               torch.nn.Tanh(), torch.nn.Linear(32, 4))


def bn_model_fn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                               torch.nn.ReLU(), torch.nn.Conv2d(4, 2, 3), torch.nn.BatchNorm2d(2),
                               torch.nn.Flatten(), torch.nn.Linear(2 * 3 * 3, 3))


def sync_batchnorm_parity():
    """DDP + SyncBatchNorm over the ranks' slices == BatchNorm on the whole batch."""
    r, n = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(2)
    steps, per_rank = 3, 2 + r % 2  # uneven slices: ranks' counts differ
    sizes = [2 + k % 2 for k in range(n)]
    data = torch.randn(steps, sum(sizes), 3, 5, 5, generator=g)
    target = torch.randn(steps, sum(sizes), 3, generator=g)
    ref = bn_model_fn()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    model = DDP(torch.nn.SyncBatchNorm.convert_sync_batchnorm(bn_model_fn()).to("tpu"))
    assert sum(isinstance(m, torch.nn.SyncBatchNorm) for m in model.modules()) == 2
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    lo = sum(sizes[:r])
    sl = slice(lo, lo + per_rank)
    for s in range(steps):
        ref_opt.zero_grad()
        # Each rank's loss is a sum over its samples / the whole batch: DDP's mean over
        # ranks times n is then the reference's mean over the whole batch.
        torch.nn.functional.mse_loss(ref(data[s]), target[s]).backward()
        ref_opt.step()
        opt.zero_grad()
        out = model(data[s, sl].to("tpu"))
        loss = torch.nn.functional.mse_loss(out, target[s, sl].to("tpu"), reduction="sum") * n / target[s].numel()
        loss.backward()
        opt.step()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5, msg=name)
    for (name, b), c in zip(model.module.named_buffers(), ref.buffers()):  # running stats, batch counts
        torch.testing.assert_close(b.cpu(), c, rtol=1e-5, atol=1e-5, msg=name)
    print(f"rank {r}/{n}: SyncBN OK", flush=True)


def mismatch_raises(device):
    """Ranks all_reduce tensors of different lengths: every rank raises naming the
    collective and both shapes, nothing is reduced, and the group still works."""
    r, n = dist.get_rank(), dist.get_world_size()
    x = torch.full((2 + r,), float(r + 1)).to(device)
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        msg = str(e)
        assert "Detected mismatch between collectives" in msg and "OpType=ALLREDUCE" in msg, msg
        assert "TensorShape=[2]" in msg and "TensorShape=[3]" in msg, msg
    else:
        raise AssertionError(f"a shape mismatch on {device} went through on rank {r}")
    assert x.cpu().tolist() == [float(r + 1)] * (2 + r)  # untouched
    y = torch.ones(3).to(device)
    dist.all_reduce(y)
    assert y.cpu().tolist() == [float(n)] * 3


def main():
    # "cpu:gloo,tpu:tpu" or no backend: cpu tensors over gloo, tpu tensors over the tpu
    # backend (docs/distributed.md)
    backend = None if sys.argv[1] == "default" else sys.argv[1]
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=60))
    r, n = dist.get_rank(), dist.get_world_size()
    run_all()
    g = torch.Generator().manual_seed(1)
    steps, micro, per_rank = 4, 2, 3
    data = torch.randn(steps, micro, n * per_rank, 8, generator=g)
    target = torch.randn(steps, micro, n * per_rank, 4, generator=g)

    ref = model_fn()
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        ref_opt.zero_grad()
        for m in range(micro):
            # DDP averages over ranks: the reference loss is the mean over the whole batch.
            loss = torch.nn.functional.mse_loss(ref(data[s, m]), target[s, m]) / micro
            loss.backward()
        ref_opt.step()

    model = DDP(model_fn().to("tpu"), bucket_cap_mb=0.002)  # several buckets
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sl = slice(r * per_rank, (r + 1) * per_rank)
    for s in range(steps):
        opt.zero_grad()
        for m in range(micro):
            x, y = data[s, m, sl].to("tpu"), target[s, m, sl].to("tpu")
            if m < micro - 1:
                with model.no_sync():  # accumulate locally, reduce on the last micro-batch
                    (torch.nn.functional.mse_loss(model(x), y) / micro).backward()
            else:
                (torch.nn.functional.mse_loss(model(x), y) / micro).backward()
        opt.step()
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5, msg=name)
    # The same group also reduces cpu tensors, over gloo.
    c = torch.ones(1)
    dist.all_reduce(c)
    assert c.item() == n
    sync_batchnorm_parity()
    if dist.get_debug_level() == dist.DebugLevel.DETAIL:
        mismatch_raises("tpu")
        mismatch_raises("cpu")
    dist.destroy_process_group()
    print(f"rank {r}/{n}: DDP OK", flush=True)
    sys.stderr.flush()
    os._exit(0)  # no interpreter finalization: see the note at the top


if __name__ == "__main__":
    main()
