"""c10d registration: the "tpu" process-group backend (csrc/c10d.cpp).

``dist.init_process_group("tpu")`` (or the default ``init_process_group()``, which picks
``tpu`` for tpu tensors and gloo for cpu ones) creates it. On plugins that cannot run
collectives across processes, the CPU plugin among them, collectives are staged through
host memory over a gloo group that shares the process group's store: the same API and
semantics, documented in docs/distributed.md.
"""

from __future__ import annotations

import torch.distributed as dist

from . import _C

__all__ = ["BACKEND"]

BACKEND = "tpu"


def _create_backend(store, rank: int, size: int, timeout):
    # The host transport rendezvouses through the process group's own store
    # (prefixed), so there is no second rendezvous.
    host = dist.ProcessGroupGloo(dist.PrefixStore("torchtpu/host/", store), rank, size, timeout)
    return _C.TpuBackend(rank, size, host)


if dist.is_available() and BACKEND not in dist.Backend.backend_list:
    dist.Backend.register_backend(BACKEND, _create_backend, devices=["tpu"])
