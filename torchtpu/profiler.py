"""``torchtpu.profile``: torch.profiler with torchtpu's own ranges, exported as a trace.

``torch.profiler.profile()`` already shows torchtpu's work without this module: every
aten op on tpu (recorded by the dispatcher, with its host time) and the runtime's
ranges (csrc/profiler.cpp): ``torchtpu::compile``, ``torchtpu::cache_hit`` /
``cache_miss`` / ``disk_cache_lookup`` / ``disk_cache_hit``, ``torchtpu::copy_h2d`` /
``copy_d2h`` and ``torchtpu::synchronize``. This is the shortcut that writes a
Chrome/Perfetto trace (docs/profiler.md).
"""

from __future__ import annotations

import contextlib
import os

import torch

__all__ = ["RANGES", "profile"]

# The runtime's range names (runtime/include/torchtpu/trace.h, tpu_trace_kind_name).
RANGES = (
    "torchtpu::compile",
    "torchtpu::cache_hit",
    "torchtpu::cache_miss",
    "torchtpu::disk_cache_lookup",
    "torchtpu::disk_cache_hit",
    "torchtpu::copy_h2d",
    "torchtpu::copy_d2h",
    "torchtpu::synchronize",
)


@contextlib.contextmanager
def profile(path: str | os.PathLike | None = None, *, record_shapes: bool = False, **kwargs):
    """Profiles the block; writes a Chrome/Perfetto trace to ``path`` when given.

    Yields the ``torch.profiler.profile`` object (``key_averages()``, ``events()`` ...).
    With ``record_shapes=True`` a compile or cache range also carries the op's name as
    its input. Other keyword arguments go to ``torch.profiler.profile``."""
    kwargs.setdefault("activities", [torch.profiler.ProfilerActivity.CPU])
    with torch.profiler.profile(record_shapes=record_shapes, **kwargs) as prof:
        yield prof
        torch.tpu.synchronize()  # the block's device work belongs to the block
    if path is not None:
        prof.export_chrome_trace(os.fspath(path))
