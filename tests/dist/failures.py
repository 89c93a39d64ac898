"""Run by torchrun (tests/test_distributed.py): failures are loud, never hangs.
FAILURE=dead: rank 1 dies before a collective; FAILURE=diverge: rank 1 calls a
different collective than rank 0. Every surviving rank's call on tpu tensors must raise
within the process group's timeout plus 10 s, naming the collective and its rank."""
import datetime
import os
import time

import torch
import torch.distributed as dist

import torchtpu  # noqa: F401

TIMEOUT_S = 5


def main():
    mode = os.environ["FAILURE"]
    dist.init_process_group("tpu", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    r = dist.get_rank()
    # A cpu tensor on the tpu-only group is refused, as torch refuses a device type
    # that has no backend in the group.
    try:
        dist.all_reduce(torch.ones(1))
    except RuntimeError as e:
        assert "cpu" in str(e), e
    else:
        raise AssertionError("a cpu tensor on the tpu group was accepted")
    x = torch.ones(4).to("tpu")
    dist.all_reduce(x)  # everyone is alive and in step for the first one
    if mode == "dead" and r == 1:
        os._exit(0)  # dies without a word
    name = "all_reduce"
    t0 = time.monotonic()
    try:
        if mode == "diverge" and r == 1:
            name = "all_gather_into_tensor"
            dist.all_gather_into_tensor(torch.zeros(8).to("tpu"), x)
        else:
            dist.all_reduce(x)
    except RuntimeError as e:
        waited = time.monotonic() - t0
        msg = str(e)
        assert name in msg and f"rank {r}" in msg, msg
        assert waited <= TIMEOUT_S + 10, waited
        print(f"rank {r} raised after {waited:.1f}s: OK", flush=True)
        os._exit(0)  # the process group is broken: skip its orderly teardown
    raise AssertionError(f"{name} returned on rank {r} ({mode})")


if __name__ == "__main__":
    main()
