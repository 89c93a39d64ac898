"""Run by torchrun (tests/test_distributed.py): failures are loud, never hangs.
FAILURE=dead: rank 1 dies before a collective; FAILURE=diverge: rank 1 calls a
different collective than rank 0. Every surviving rank's call on tpu tensors must raise
within the process group's timeout plus 10 s, naming the collective and its rank.
FAILURE=mismatch, run with TORCH_DISTRIBUTED_DEBUG=DETAIL: rank 1 calls the same
collective with another shape, then another dtype, then a different collective; each
time every rank raises at once (well within the timeout) naming both ranks' collectives
and what differs, nothing moves, and the group still works afterwards."""
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
    if mode == "mismatch":
        mismatches(r, x)
        return
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


def mismatches(r, x):
    assert dist.get_debug_level() == dist.DebugLevel.DETAIL, "run with TORCH_DISTRIBUTED_DEBUG=DETAIL"
    cases = {
        # what differs: (this rank's call, the message's evidence of the difference)
        "shape": (lambda: dist.all_reduce(torch.ones(4 + r).to("tpu")),
                  ["OpType=ALLREDUCE", "TensorShape=[4]", "TensorShape=[5]"]),
        "dtype": (lambda: dist.all_reduce(torch.ones(4, dtype=(torch.float32, torch.float64)[r]).to("tpu")),
                  ["OpType=ALLREDUCE", "TensorDtypes=Float", "TensorDtypes=Double"]),
        "op": (lambda: dist.all_reduce(x) if r == 0 else dist.all_gather_into_tensor(torch.zeros(8).to("tpu"), x),
               ["OpType=ALLREDUCE", "OpType=_ALLGATHER_BASE"]),
    }
    worst = 0.0
    for what, (call, evidence) in cases.items():
        t0 = time.monotonic()
        try:
            call()
        except RuntimeError as e:
            worst = max(worst, time.monotonic() - t0)
            msg = str(e)
            assert "Detected mismatch between collectives" in msg, msg
            assert all(s in msg for s in evidence), (what, msg)
        else:
            raise AssertionError(f"a {what} mismatch went through on rank {r}")
    assert worst < TIMEOUT_S, worst  # detected, not timed out
    assert x.cpu().tolist() == [2.0] * 4  # the op mismatch moved nothing
    dist.all_reduce(x)  # the group is still in step
    assert x.cpu().tolist() == [4.0] * 4
    dist.destroy_process_group()
    print(f"rank {r}: shape, dtype and op mismatches raised within {worst:.1f}s: OK", flush=True)


if __name__ == "__main__":
    main()
