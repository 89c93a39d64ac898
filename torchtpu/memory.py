"""``torch.tpu``'s memory functions, named and shaped as ``torch.cuda``'s.

The numbers come from the C runtime's per-device accounting (runtime/include/
torchtpu/memory.h) through the binding's ``c10::DeviceAllocator``, the same path
``torch.accelerator.memory_*`` takes. What they count is in docs/memory.md: the
device buffers torchtpu holds; "reserved" equals "allocated" because the PJRT
plugin allocates and torchtpu keeps no pool of its own.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from . import _C
from .device_module import _index

__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
]


def memory_stats(device: Any = None) -> OrderedDict:
    """Allocator statistics of a device, with torch.cuda.memory_stats's keys
    ("allocated_bytes.all.current", "allocation.large_pool.peak", ...)."""
    return torch.accelerator.memory_stats(_index(device))


def memory_allocated(device: Any = None) -> int:
    """Bytes of device buffers held now."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    """The most bytes held at once since start or reset_peak_memory_stats()."""
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    """Equals memory_allocated(): torchtpu keeps no pool of its own."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_max_memory_allocated(device: Any = None) -> None:
    """As torch.cuda's: the same as reset_peak_memory_stats()."""
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device's memory. On the CPU plugin the device's
    memory is the host's; on other plugins it is what the plugin's allocator may
    hand out (its limit) and how much of that is not in use (docs/memory.md)."""
    return torch.accelerator.get_memory_info(_index(device))


def empty_cache() -> None:
    """Releases device buffers kept only to save work (the uploaded-scalar cache)."""
    torch.accelerator.empty_cache()


def _fmt_bytes(n: int) -> str:
    if abs(n) < 1024:
        return f"{n} B"
    for unit in ("KiB", "MiB", "GiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.1f} {unit}"


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of memory_stats(), as torch.cuda.memory_summary prints one."""
    idx = _index(device)
    stats = memory_stats(idx)
    pools = ["all"] if abbreviated else ["all", "large_pool", "small_pool"]
    rows = [("Allocated memory", "allocated_bytes", True), ("Reserved memory", "reserved_bytes", True),
            ("Allocations", "allocation", False)]
    head = f"{'Metric':<28}{'Cur Usage':>14}{'Peak Usage':>14}{'Tot Alloc':>14}{'Tot Freed':>14}"
    lines = [f"tpu:{idx} memory summary ({_C.platform_name()} plugin)", head, "-" * len(head)]
    for title, key, is_bytes in rows:
        for pool in pools:
            vals = [stats.get(f"{key}.{pool}.{f}", 0) for f in ("current", "peak", "allocated", "freed")]
            cells = [_fmt_bytes(v) if is_bytes else str(v) for v in vals]
            name = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            lines.append(f"{name:<28}" + "".join(f"{c:>14}" for c in cells))
    return "\n".join(lines)
