"""Glue that lets generic training code pick the ``tpu`` device by itself.

Installed by ``import torchtpu`` (docs/integrations.md says what works):

* Hugging Face accelerate: ``PartialState.default_device`` lists the devices it
  knows (mps, cuda, xpu, npu, ...) and ends with cpu; it has no PrivateUse1 case.
  The hook makes that last resort ``tpu`` when a tpu is available, so
  ``Accelerator()`` and transformers' ``Trainer`` (whose ``TrainingArguments.device``
  already says ``tpu:0`` through ``torch.accelerator``) place the model and the
  batches on tpu as they would on cuda. ``cpu=True`` / ``use_cpu=True`` still mean
  cpu. The hook is applied when ``accelerate.state`` is imported (or at once if it
  already is), so ``import torchtpu`` does not import accelerate.
* Ray Train: a worker without GPUs trains on tpu when one is present (its
  device manager's device, and its process group "cpu:gloo,tpu:tpu" instead of
  "gloo"), so ``TorchTrainer`` with ``prepare_model`` runs DDP on tpu.
* torch.compile: the ``"tpu"`` Dynamo backend (torchtpu/compile.py), registered
  when Dynamo's backend registry is imported; ``torch.compile(model)`` with the default
  backend compiles graphs on tpu tensors with it too (Inductor would need JAX). Dynamo's
  check whether an optimizer's gradients sit at static addresses for CUDA graphs is
  answered for non-cuda tensors without importing Inductor (it is always yes off cuda).

Python glue only: no numerics here.
"""

from __future__ import annotations

import importlib.abc
import sys

import torch

__all__ = ["install"]


# ---- accelerate ----


def _replace_once(owner, name: str, wrap) -> None:
    """Sets ``owner.name`` to ``wrap(original)`` (a property's getter for a property),
    marked as ours so that a second install leaves it alone; absent: nothing to do."""
    original = getattr(owner, name, None)
    getter = original.fget if isinstance(original, property) else original
    if getter is None or getattr(getter, "_torchtpu", False):
        return
    replacement = wrap(getter)
    replacement._torchtpu = True
    replacement.__doc__ = getter.__doc__
    setattr(owner, name, property(replacement) if isinstance(original, property) else replacement)


def _patch_accelerate_state(module) -> None:
    def wrap(original):
        def default_device(self) -> torch.device:
            device = original(self)
            if device.type == "cpu" and torch.tpu.is_available():
                return torch.device("tpu", torch.tpu.current_device())
            return device
        return default_device

    _replace_once(module.PartialState, "default_device", wrap)


class _PatchingLoader(importlib.abc.Loader):
    """Runs the wrapped loader, then the patch on the fresh module."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._patch(module)

    def __getattr__(self, name):  # get_source, get_filename, ... for tracebacks
        return getattr(self._loader, name)


class _PostImportHook(importlib.abc.MetaPathFinder):
    """Patches a module right after its first import, whoever imports it."""

    def __init__(self, patches):
        self._patches = patches

    def find_spec(self, fullname, path, target=None):
        patch = self._patches.get(fullname)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _PatchingLoader(spec.loader, patch)
                return spec
        return None


# ---- torch.compile ----


def _register_dynamo_backend(module) -> None:
    """``torch.compile(backend="tpu")``: registered when Dynamo's registry is first
    imported (by torch.compile itself), so ``import torchtpu`` stays light."""
    if "tpu" in module._COMPILER_FNS:
        return

    def tpu(gm, example_inputs, **kwargs):
        from .compile import backend
        return backend(gm, example_inputs, **kwargs)

    module.register_backend(compiler_fn=tpu, name="tpu")


def _route_inductor_on_tpu(module) -> None:
    """``torch.compile(model)`` with no backend: PyTorch's default, Inductor, generates
    Pallas kernels for a device named "tpu", which need JAX at run time (it fails with
    "No module named 'jax'"). A graph with tpu tensors among its inputs is compiled by
    the ``"tpu"`` backend instead, so a script that compiled its model on cuda keeps
    working when its device string becomes "tpu". Graphs on other devices still go
    to Inductor."""
    def wrap(original):
        def compile_fx(model_, example_inputs_, *args, **kwargs):
            if any(isinstance(x, torch.Tensor) and x.device.type == "tpu" for x in example_inputs_):
                from .compile import backend
                return backend(model_, example_inputs_)
            return original(model_, example_inputs_, *args, **kwargs)
        return compile_fx

    _replace_once(module, "compile_fx", wrap)


def _skip_cudagraph_probe_off_cuda(module) -> None:
    """When Dynamo traces ``opt.step()`` it asks, for every gradient, whether a CUDA
    graph would see it at a static address. The check imports Inductor's
    cudagraph_trees (and with it compile_fx and all of Inductor's lowerings, about
    1 s) before it looks at the device, and off cuda it answers True without using
    it. A tpu train step asks the same question and gets the same answer, without
    the import: the first compiled step with an optimizer is that much shorter, on a
    warm compile cache too. cuda tensors still take the original path."""
    def wrap(original):
        def is_static_for_cudagraphs(x):
            return original(x) if x.is_cuda else True
        return is_static_for_cudagraphs

    _replace_once(module, "_is_static_for_cudagraphs", wrap)


# ---- Ray Train ----


def _patch_ray_cpu_device_manager(module) -> None:
    """A Ray Train worker without GPUs gets the CPU device manager, whose device is
    cpu, so ``ray.train.torch.get_device()``, ``prepare_model`` and
    ``prepare_data_loader`` would put model and batches there. With a tpu present
    its device is tpu (as accelerate's default above); ``prepare_model`` then wraps
    DDP with ``device_ids=[tpu:i]``, as it does for cuda."""
    def wrap(original):
        def get_devices(self):
            devices = original(self)
            if devices == [torch.device("cpu")] and torch.tpu.is_available():
                return [torch.device("tpu", torch.tpu.current_device())]
            return devices
        return get_devices

    _replace_once(module.CPUTorchDeviceManager, "get_devices", wrap)


def _patch_ray_torch_config(module) -> None:
    """Ray Train picks "gloo" for workers without GPUs, a group for cpu tensors
    only. In a worker with a tpu the group is "cpu:gloo,tpu:tpu", so DDP's
    collectives on tpu tensors have a backend (the worker runs this function)."""
    def wrap(original):
        def setup(backend, *args, **kwargs):
            if backend == "gloo" and torch.tpu.is_available():
                backend = "cpu:gloo,tpu:tpu"
            return original(backend, *args, **kwargs)
        return setup

    _replace_once(module, "_setup_torch_process_group", wrap)


# ---- installation ----

_PATCHES = {"accelerate.state": _patch_accelerate_state,
            "torch._dynamo.backends.registry": _register_dynamo_backend,
            "torch._inductor.compile_fx": _route_inductor_on_tpu,
            "torch._dynamo.variables.optimizer": _skip_cudagraph_probe_off_cuda,
            "ray.air._internal.device_manager.cpu": _patch_ray_cpu_device_manager,
            "ray.train.torch.config": _patch_ray_torch_config}


def install() -> None:
    """Applies every hook once; idempotent."""
    if not any(isinstance(f, _PostImportHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _PostImportHook(_PATCHES))
    for name, patch in _PATCHES.items():
        if name in sys.modules:
            patch(sys.modules[name])
