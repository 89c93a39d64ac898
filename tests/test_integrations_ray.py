"""torchtpu's Ray Train hooks (torchtpu/integrations.py, docs/integrations.md) applied to
stand-ins for the two Ray modules they patch: Ray is not in the test venv (`make test-ray`
runs a real TorchTrainer DDP job on tpu). A worker without GPUs gets the tpu as its
device and "cpu:gloo,tpu:tpu" instead of "gloo" as its process group; other backends and
devices stay as Ray chose them, and installing twice wraps nothing twice."""
import sys
import types

import torch

import torchtpu  # noqa: F401
from torchtpu import integrations


def _stand_ins(monkeypatch):
    dm = types.ModuleType("ray.air._internal.device_manager.cpu")

    class CPUTorchDeviceManager:
        def get_devices(self):
            return [torch.device("cpu")]

    dm.CPUTorchDeviceManager = CPUTorchDeviceManager
    cfg = types.ModuleType("ray.train.torch.config")
    calls = []

    def _setup_torch_process_group(backend, world_rank, world_size, init_method, timeout_s=1800):
        calls.append((backend, world_rank, world_size, init_method, timeout_s))

    cfg._setup_torch_process_group = _setup_torch_process_group
    monkeypatch.setitem(sys.modules, dm.__name__, dm)
    monkeypatch.setitem(sys.modules, cfg.__name__, cfg)
    return dm, cfg, calls


def test_ray_worker_trains_on_tpu(monkeypatch):
    dm, cfg, calls = _stand_ins(monkeypatch)
    integrations.install()  # the modules are imported already: patched at once
    integrations.install()  # idempotent
    tpu = torch.device("tpu", torch.tpu.current_device())
    assert dm.CPUTorchDeviceManager().get_devices() == [tpu]
    cfg._setup_torch_process_group("gloo", 0, 2, "env://", timeout_s=60)
    cfg._setup_torch_process_group("nccl", 1, 2, "env://")
    cfg._setup_torch_process_group("cpu:gloo", 1, 2, "env://")
    assert calls == [("cpu:gloo,tpu:tpu", 0, 2, "env://", 60), ("nccl", 1, 2, "env://", 1800),
                     ("cpu:gloo", 1, 2, "env://", 1800)]


def test_ray_keeps_cpu_without_a_tpu(monkeypatch):
    dm, cfg, calls = _stand_ins(monkeypatch)
    integrations.install()
    monkeypatch.setattr(torch.tpu, "is_available", lambda: False)
    assert dm.CPUTorchDeviceManager().get_devices() == [torch.device("cpu")]
    cfg._setup_torch_process_group("gloo", 0, 1, "env://")
    assert calls == [("gloo", 0, 1, "env://", 1800)]
