"""c10d registration: the "tpu" process-group backend (csrc/c10d.cpp).

``dist.init_process_group("tpu")`` creates a group for tpu tensors only;
``init_process_group("cpu:gloo,tpu:tpu")`` adds gloo for cpu tensors; and the default
``init_process_group()`` (no backend) gives the same two-device group, through the
``tpu_default`` backend registered below as the default for the ``tpu`` device. On
plugins that cannot run collectives across processes, the CPU plugin among them,
collectives are staged through host memory over a gloo group that shares the process
group's store: the same API and semantics, documented in docs/distributed.md. With
``TORCH_DISTRIBUTED_DEBUG=DETAIL`` every collective is first checked against the other
ranks' (operation, shapes, dtypes), as torch does for gloo and nccl.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from . import _C

__all__ = ["BACKEND", "DEFAULT_BACKEND"]

BACKEND = "tpu"
# The backend of ``init_process_group()`` with no backend argument on a tpu machine
# (Backend.default_device_backend_map["tpu"]): gloo for cpu tensors, tpu for tpu tensors.
DEFAULT_BACKEND = "tpu_default"


def _checked(backend, store, prefix: str, rank: int, size: int, timeout):
    """``backend`` behind torch's collective-mismatch check (TORCH_DISTRIBUTED_DEBUG=DETAIL):
    before each collective the ranks exchange fingerprints (operation, tensor shapes and
    dtypes, sequence number) over a separate gloo group on its own store prefix, and every
    rank raises if they differ."""
    helper = dist.ProcessGroupGloo(dist.PrefixStore(prefix, store), rank, size, timeout)
    return dist.distributed_c10d._ProcessGroupWrapper(backend, helper)


def _detail() -> bool:
    return dist.get_debug_level() == dist.DebugLevel.DETAIL


def _create_backend(store, rank: int, size: int, timeout):
    # The host transport rendezvouses through the process group's own store
    # (prefixed), so there is no second rendezvous. With TORCH_DISTRIBUTED_DEBUG=DETAIL
    # torch wraps the returned backend in its mismatch check itself (TpuBackend keeps
    # the host transport's sequence numbers for it).
    host = dist.ProcessGroupGloo(dist.PrefixStore("torchtpu/host/", store), rank, size, timeout)
    return _C.TpuBackend(rank, size, host)


def _create_default_group(store, rank: int, size: int, timeout):
    """``init_process_group()`` with no backend: torch 2.13 then builds the group from
    ``Backend.default_device_backend_map[accelerator]`` alone and records gloo as its
    default backend type, whatever the accelerator's backend is. Returning a whole
    ProcessGroup (which torch accepts from a backend creator) gives the group both
    backends, cpu:gloo and tpu:tpu, with the tpu backend as its default, as nccl is for
    ``init_process_group()`` on CUDA. (torch skips its own DETAIL wrapper for a returned
    ProcessGroup, so both halves get the check here; and a ``device_id`` given to
    init_process_group is not recorded as this group's bound_device_id, since the
    creator is not told it.)"""
    pg = dist.ProcessGroup(store, rank, size)
    cpu = dist.ProcessGroupGloo(dist.PrefixStore("torchtpu/cpu/", store), rank, size, timeout)
    cpu._set_sequence_number_for_group()  # as torch does for the gloo backends it creates
    if _detail():
        cpu = _checked(cpu, store, "torchtpu/cpu-check/", rank, size, timeout)
    tpu = _create_backend(store, rank, size, timeout)
    if _detail():
        tpu = _checked(tpu, store, "torchtpu/tpu-check/", rank, size, timeout)
    pg._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.GLOO, cpu)
    pg._register_backend(torch.device("tpu"), dist.ProcessGroup.BackendType.CUSTOM, tpu)
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    return pg


if dist.is_available() and BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["tpu"])
    dist.Backend.register_backend(DEFAULT_BACKEND, _create_default_group, devices=["cpu", "tpu"])
    # register_backend leaves an existing mapping alone; "tpu" was put there by the
    # first registration, and the default for the device is the two-device group.
    if dist.Backend.default_device_backend_map.get("tpu") in (None, BACKEND):
        dist.Backend.default_device_backend_map["tpu"] = DEFAULT_BACKEND
