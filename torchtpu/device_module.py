"""``torch.tpu``: the device module registered by ``import torchtpu``.

Mirrors the parts of ``torch.cuda`` that generic PyTorch code (``torch.manual_seed``,
``torch.random.fork_rng``, ``Tensor.tpu()``, ``Module.tpu()``) looks up on a device
module. Each device has a default generator; its (seed, offset) state lives in the C runtime.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from . import _C

__all__ = [
    "OutOfMemoryError",
    "current_device",
    "device",
    "device_count",
    "get_amp_supported_dtype",
    "get_autocast_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "is_autocast_enabled",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_autocast_dtype",
    "set_autocast_enabled",
    "set_device",
    "set_rng_state",
    "set_rng_state_all",
    "synchronize",
]


# What an allocation that does not fit raises, as ``torch.cuda.OutOfMemoryError`` is
# torch's one out-of-memory error: ``except torch.tpu.OutOfMemoryError`` works.
OutOfMemoryError = torch.OutOfMemoryError


def is_available() -> bool:
    return _C.is_initialized() and _C.device_count() > 0


def is_initialized() -> bool:
    return _C.is_initialized()


def _lazy_init() -> None:
    # The runtime is initialised by ``import torchtpu``; nothing is lazy.
    pass


def _is_in_bad_fork() -> bool:
    return False


def device_count() -> int:
    return _C.device_count()


def _index(dev: Any = None, optional: bool = True) -> int:
    if dev is None:
        return _C.current_device()
    if isinstance(dev, str):
        dev = torch.device(dev)
    if isinstance(dev, torch.device):
        if dev.type != "tpu":
            raise ValueError(f"expected a tpu device, got {dev}")
        return _C.current_device() if dev.index is None else dev.index
    return int(dev)


def current_device() -> int:
    return _C.current_device()


def set_device(dev: Any) -> None:
    idx = _index(dev)
    if idx >= 0:
        _C.set_device(idx)


class device:
    """Context manager that changes the current tpu device."""

    def __init__(self, dev: Any):
        self.idx = -1 if dev is None else _index(dev)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C.current_device()
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C.set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0 and self.idx != self.prev_idx:
            _C.set_device(self.prev_idx)
        return False


def synchronize(device: Any = None) -> None:
    """Waits for all work issued on the tpu devices."""
    _C.synchronize()


def _api_version() -> str:
    major, minor = _C.api_version()
    return f"{major}.{minor}"


def get_device_name(device: Any = None) -> str:
    """A truthful name: the PJRT platform behind "tpu", e.g. "PJRT cpu (...)"."""
    idx = _index(device)
    platform = _C.platform_name()
    kind = _C.device_kind(idx) if 0 <= idx < device_count() else ""
    version = _C.platform_version()
    parts = [p for p in (kind, f"plugin version {version}" if version else "",
                         f"PJRT API {_api_version()}") if p]
    return f"PJRT {platform} ({', '.join(parts)})"


class _DeviceProperties:
    def __init__(self, idx: int):
        self.index = idx
        self.name = get_device_name(idx)
        self.platform = _C.platform_name()
        self.platform_version = _C.platform_version()
        self.device_kind = _C.device_kind(idx)
        self.pjrt_api_version = _C.api_version()
        # As torch.cuda's: the device's memory in bytes (host memory on the CPU plugin).
        self.total_memory = torch.accelerator.get_memory_info(torch.device("tpu", idx))[1]

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name={self.name!r}, index={self.index}, "
                f"platform={self.platform!r}, device_kind={self.device_kind!r}, "
                f"total_memory={self.total_memory // (1024 * 1024)}MB)")


def get_device_capability(device: Any = None) -> dict:
    """What the device supports, as ``torch.accelerator.get_device_capability`` reports it
    (``supported_dtypes``) plus the PJRT platform, device kind and API version. A tpu
    has no CUDA-style (major, minor) compute capability."""
    idx = _index(device)
    cap = dict(torch.accelerator.get_device_capability(torch.device("tpu", idx)))
    cap.update(platform=_C.platform_name(), device_kind=_C.device_kind(idx),
               pjrt_api_version=_C.api_version())
    return cap


def get_device_properties(device: Any = None) -> _DeviceProperties:
    idx = _index(device)
    if not 0 <= idx < device_count():
        raise AssertionError(f"Invalid device id {idx}")
    return _DeviceProperties(idx)


# ---- RNG: a default generator per device, each a (seed, offset) pair in the C runtime ----

def _default_generator(device: Any = None) -> torch.Generator:
    return _C.default_generator(_index(device))


def manual_seed(seed: int) -> None:
    """Seeds the current device's default generator (like torch.cuda.manual_seed)."""
    _default_generator().manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _default_generator(i).manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)


def seed() -> None:
    _default_generator().seed()


def seed_all() -> None:
    s = int.from_bytes(os.urandom(8), "little") & (2**63 - 1)
    manual_seed_all(s)


def initial_seed() -> int:
    return _default_generator().initial_seed()


def get_rng_state(device: Any = "tpu") -> torch.Tensor:
    """The RNG state as a cpu uint8 tensor of 16 bytes: (seed, offset) little-endian."""
    return _default_generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
    state = new_state.detach().to("cpu", torch.uint8).contiguous()
    if state.numel() != 16:
        raise ValueError("tpu RNG state must hold 16 bytes (seed, offset)")
    _default_generator(device).set_state(state)


def get_rng_state_all() -> list:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    for i, st in enumerate(new_states):
        set_rng_state(st, i)


# ---- AMP: what torch.autocast("tpu") and torch.amp.GradScaler("tpu") look up ----
# The cast policies live in the binding (csrc/autocast.cpp, AutocastPrivateUse1).


def get_amp_supported_dtype() -> list:
    """Lower-precision dtypes torch.autocast("tpu", dtype=...) accepts."""
    return [torch.float16, torch.bfloat16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def is_autocast_enabled() -> bool:
    return torch.is_autocast_enabled("tpu")


def set_autocast_enabled(enabled: bool) -> None:
    torch.set_autocast_enabled("tpu", enabled)


def get_autocast_dtype() -> torch.dtype:
    return torch.get_autocast_dtype("tpu")


def set_autocast_dtype(dtype: torch.dtype) -> None:
    torch.set_autocast_dtype("tpu", dtype)


# ---- memory (torchtpu/memory.py) and streams/events (torchtpu/streams.py); both use _index ----

from . import memory, streams  # noqa: E402
from .memory import *  # noqa: E402,F401,F403  (torch.tpu.memory_allocated ...)
from .streams import *  # noqa: E402,F401,F403  (torch.tpu.Stream, Event, current_stream ...)

__all__ += memory.__all__ + streams.__all__
