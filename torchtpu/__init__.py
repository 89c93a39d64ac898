"""torchtpu: "tpu" as a native PyTorch (PrivateUse1) device over PJRT.

``import torchtpu`` renames PrivateUse1 to ``tpu``, loads the C++ binding (which
registers the allocator, device guard, hooks and kernels), initialises the C
runtime with a PJRT plugin and registers ``torch.tpu``.

Plugin choice (first that applies):
  1. ``TORCHTPU_PJRT_PLUGIN`` (a path to a PJRT plugin .so);
  2. libtpu, when the ``libtpu`` package is installed;
  3. the XLA CUDA plugin (``jax_plugins.xla_cuda13`` / ``xla_cuda12``) when installed
     and a GPU is visible;
  4. the XLA CPU plugin from ``xla-cpu-pjrt`` (the embedded default).
``TORCHTPU_CPU_DEVICES`` sets the CPU plugin's device count (default 1).
Compiled programs are cached on disk (``TORCHTPU_CACHE_DIR``, default
``~/.cache/torchtpu``; ``TORCHTPU_DISK_CACHE=0`` turns it off): docs/compile-cache.md.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os


def _autoload() -> None:
    """The ``torch.backends`` entry point (pyproject.toml), which ``import torch`` calls
    at the end of its own import; TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns that off
    (docs/install.md). There is nothing to do: importing torchtpu to reach this function
    registers "tpu". It is defined before ``import torch`` because when torchtpu is
    imported first, that import runs the entry point on this half-imported module,
    whose import then finishes the registration."""


import torch

__all__ = [
    "__version__",
    "cache_clear",
    "cache_dir",
    "eager_mode",
    "get_eager_mode",
    "metrics",
    "plugin_path",
    "reset_metrics",
    "set_eager_mode",
    "synchronize",
]


def _package_file(package: str, filename: str) -> str | None:
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if not dirs and spec.origin:
        dirs = [os.path.dirname(spec.origin)]
    for d in dirs:
        path = os.path.join(d, filename)
        if os.path.isfile(path):
            return path
    return None


def _choose_plugin() -> tuple[str, str]:
    """The PJRT plugin to load and why it was chosen."""
    path = os.environ.get("TORCHTPU_PJRT_PLUGIN")
    if path:
        return path, "TORCHTPU_PJRT_PLUGIN is set"
    path = _package_file("libtpu", "libtpu.so")
    if path:
        return path, "the libtpu package is installed"
    if os.path.exists("/dev/nvidia0"):
        for pkg in ("jax_plugins.xla_cuda13", "jax_plugins.xla_cuda12"):
            path = _package_file(pkg, "xla_cuda_plugin.so")
            if path:
                return path, f"a GPU is visible (/dev/nvidia0) and {pkg} is installed"
    path = _package_file("xla_plugins.xla_cpu_pjrt", "xla_cpu_pjrt.so")
    if path:
        return path, "the default: no TPU or GPU plugin applies, xla-cpu-pjrt is installed"
    raise RuntimeError(
        "torchtpu: no PJRT plugin found. Set TORCHTPU_PJRT_PLUGIN to a plugin .so, "
        "or install libtpu, the XLA CUDA plugin, or xla-cpu-pjrt."
    )


torch.utils.rename_privateuse1_backend("tpu")

from . import _C  # noqa: E402  (registers allocator, guard, hooks, kernels)

__version__ = _C.version()
plugin_path, plugin_reason = _choose_plugin()
# XLA's INFO lines ("cpu_device_count set via create_options") are noise for users.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
try:
    _C.init(plugin_path, int(os.environ.get("TORCHTPU_CPU_DEVICES", "1") or "1"))
except RuntimeError as e:
    raise RuntimeError(
        f"{e}\ntorchtpu chose {plugin_path} because {plugin_reason}. Point TORCHTPU_PJRT_PLUGIN at a "
        "working PJRT plugin .so, or unset it to use the default; `python -m torchtpu` reports the setup."
    ) from e

from . import device_module  # noqa: E402

torch._register_device_module("tpu", device_module)
torch.utils.generate_methods_for_privateuse1_backend(
    for_tensor=True, for_module=True, for_storage=True
)

from . import integrations as _integrations  # noqa: E402  (accelerate/Trainer, DataLoader pinning)

_integrations.install()

# Printing a tensor runs many small ops (abs, masked_select, min/max ...) on
# its device; as PyTorch does for xla/lazy tensors, format tpu tensors from a
# host copy instead (one transfer, no compiles). The device suffix is computed
# before this hook, so the repr still says device='tpu:0'.
import torch._tensor_str as _tensor_str_mod  # noqa: E402

if hasattr(_tensor_str_mod, "_tensor_str") and not getattr(
    _tensor_str_mod._tensor_str, "_torchtpu", False
):
    _orig_tensor_str = _tensor_str_mod._tensor_str

    def _tpu_tensor_str(self, indent):
        if self.device.type == "tpu":
            self = self.to("cpu")
        return _orig_tensor_str(self, indent)

    _tpu_tensor_str._torchtpu = True
    _tensor_str_mod._tensor_str = _tpu_tensor_str

# ---- eager modes (DESIGN.md §5) ----

_EAGER_MODES = {"debug": 0, "strict": 1, "fused": 2}
_EAGER_NAMES = {v: k for k, v in _EAGER_MODES.items()}


def set_eager_mode(mode: str) -> None:
    """Selects the eager execution mode: "debug" (synchronous), "strict" (async,
    op by op) or "fused" (ops recorded and run as one program at each sync point;
    docs/eager-modes.md). Leaving "fused" runs what it recorded."""
    if not isinstance(mode, str):
        raise TypeError(f"eager mode must be a string, got {type(mode).__name__}")
    m = mode.lower()
    if m not in _EAGER_MODES:
        raise ValueError(
            f"torchtpu: unknown eager mode {mode!r}; expected 'debug', 'strict' or 'fused'"
        )
    _C.set_eager_mode(_EAGER_MODES[m])


def get_eager_mode() -> str:
    """The current eager mode name."""
    return _EAGER_NAMES.get(_C.eager_mode(), str(_C.eager_mode()))


@contextlib.contextmanager
def eager_mode(mode: str):
    """Context manager: run the block in eager mode `mode`, then restore."""
    previous = get_eager_mode()
    set_eager_mode(mode)
    try:
        yield
    finally:
        set_eager_mode(previous)


if os.environ.get("TORCHTPU_EAGER_MODE"):
    set_eager_mode(os.environ["TORCHTPU_EAGER_MODE"])

# ---- metrics (DESIGN.md §10) ----


def metrics() -> dict:
    """Runtime counters: ops executed, compiles, cache hits, transfers, ..."""
    m = dict(_C.metrics())
    ns = m.get("compile_ns")
    if ns is not None:
        m["compile_seconds"] = ns / 1e9
    return m


def reset_metrics() -> None:
    """Resets the counters (not the live_* gauges)."""
    _C.reset_metrics()


# ---- compile cache (docs/compile-cache.md) ----


def cache_dir() -> str | None:
    """The disk compile cache's directory, or None when the disk tier is off."""
    return _C.cache_dir() or None


def cache_clear() -> None:
    """Empties both compile caches: the in-memory executables and the disk entries."""
    _C.cache_clear()


def synchronize() -> None:
    """Waits for all issued tpu work; raises the first asynchronous error."""
    _C.synchronize()


from . import profiler  # noqa: E402
from .profiler import profile  # noqa: E402,F401  (torchtpu.profile("trace.json"))
from . import distributed as _distributed  # noqa: E402,F401  (the "tpu" c10d backend)


# ---- interpreter exit ----
import atexit as _atexit  # noqa: E402


class _DrainProbe(torch.autograd.Function):
    """A graph node on the tpu device that does no device work (see below)."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return None


def _drain_autograd_thread() -> None:
    """Lets the tpu autograd thread drop its last graph task while Python still runs.

    Every backward keeps a Python object (the contextvars context PyTorch stashes in
    the thread-local state) alive in its graph task. A device's autograd thread can
    drop a finished task just after the main thread moved on; that release takes the
    GIL, and once interpreter finalization has begun, taking the GIL ends the thread
    with pthread_exit, which aborts the process ("terminate called without an active
    exception", exit status 134). A backward through one node on the device, run
    without that stash, is queued behind whatever the thread still holds: when it
    returns, the earlier release has happened, while the GIL could still be taken.
    The node allocates two empty 0-d tensors and runs no device program."""
    if not _C.is_initialized():
        return
    try:
        y = _DrainProbe.apply(torch.empty((), device="tpu", requires_grad=True))
        torch.autograd.Variable._execution_engine.run_backward(
            (y,), (torch.empty((), device="tpu"),), False, False, (), True, True)
    except Exception:  # noqa: BLE001  (a broken device at exit must not mask the real exit status)
        pass


_atexit.register(_drain_autograd_thread)
