"""Ray Train on tpu: a `TorchTrainer` DDP job with 2 workers, written as for cuda.

`make test-ray` runs it (Ray in its own venv, .venv-ray). Each worker trains a small MLP
with `ray.train.torch.prepare_model` on its half of every batch; torchtpu's Ray hooks
(torchtpu/integrations.py) give a worker without GPUs the tpu device and the process
group "cpu:gloo,tpu:tpu". Each worker checks its final parameters against single-process
training on the whole batches on CPU (float32, atol 1e-5); a failed check raises in the
worker, so `fit()` raises and the script exits non-zero.

Workers import torchtpu before Ray sets up their process group: an installed torchtpu
does it by autoload (`import torch`); a source checkout names the hook in the runtime
environment, as below.
"""
import json
import os
import tempfile

import ray
import ray.train
import ray.train.torch
import torch
import torch.nn as nn
from ray.train import ScalingConfig
from ray.train.torch import TorchTrainer

STEPS, BATCH, WORKERS = 5, 8, 2


def batches():
    g = torch.Generator().manual_seed(0)
    return torch.randn(STEPS, WORKERS * BATCH, 16, generator=g), torch.randn(STEPS, WORKERS * BATCH, 4, generator=g)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))


def train(model, device, rows):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = batches()
    for s in range(STEPS):
        opt.zero_grad()
        out = model(xs[s, rows].to(device))
        nn.functional.mse_loss(out, ys[s, rows].to(device)).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def train_loop_per_worker(config):
    import torch.distributed as dist

    rank = ray.train.get_context().get_world_rank()
    device = ray.train.torch.get_device()
    model = ray.train.torch.prepare_model(make_model())
    got = train(model, device, slice(rank * BATCH, (rank + 1) * BATCH))
    want = train(make_model(), "cpu", slice(None))  # one process, the whole batches
    summary = {"device": str(device), "backend": dist.get_backend_config(), "wrapper": type(model).__name__,
               "max_abs_err": max((a - b).abs().max().item() for a, b in zip(got, want))}
    if rank == 0:  # Ray keeps reported metrics only with checkpoints: a file says what happened
        with open(config["summary"], "w") as f:
            json.dump(summary, f)
    assert summary["device"].startswith("tpu") and "tpu:tpu" in summary["backend"], summary
    assert summary["wrapper"] == "DistributedDataParallel", summary
    assert summary["max_abs_err"] <= 1e-5, summary  # raised here, fit() fails


def main():
    ray.init(num_cpus=WORKERS, include_dashboard=False,
             runtime_env={"worker_process_setup_hook": "torchtpu.integrations.install"})
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "summary.json")
        trainer = TorchTrainer(train_loop_per_worker, train_loop_config={"summary": path},
                               scaling_config=ScalingConfig(num_workers=WORKERS))
        trainer.fit()  # raises when a worker's check failed
        with open(path) as f:
            m = json.load(f)
    print(f"ray train DDP on tpu: OK (device {m['device']}, process group {m['backend']}, {m['wrapper']}, "
          f"max |param - single-process CPU| = {m['max_abs_err']:.2e})")


if __name__ == "__main__":
    main()
