"""Collective bandwidth of the "tpu" c10d backend next to gloo on CPU tensors, in the
same run (`make bench` runs it after bench/run.py). Outputs reports/bench-collectives.md
and .json. Nothing here asserts on time.

One torchrun launch of 2 processes (one CPU-plugin device each) with the group
"cpu:gloo,tpu:tpu": for each size from 1 KiB to 64 MiB and each of all_reduce (SUM) and
all_gather_into_tensor, the tpu tensor and the cpu tensor take turns (3 rounds), so
machine noise falls on both. A round's timing is the slowest rank's mean over the
iterations (synchronized before the clock stops); a row reports the median round. Bus bandwidth follows nccl-tests: all_reduce moves
2(n-1)/n of the buffer per rank, all_gather (n-1)/n of the output.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIZES = [1 << k for k in (10, 14, 18, 22, 24, 26)]  # 1 KiB ... 64 MiB per rank
NPROC = 2
ROUNDS = 3  # interleaved tpu/cpu rounds per row; the median is reported


def _time(op, sync, iters):
    import torch.distributed as dist

    for _ in range(2):
        op()
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        op()
    sync()
    return (time.perf_counter() - t0) / iters


def worker(out_path):
    import torch
    import torch.distributed as dist

    import torchtpu  # noqa: F401

    dist.init_process_group("cpu:gloo,tpu:tpu")
    r, n = dist.get_rank(), dist.get_world_size()
    rows = []
    for nbytes in SIZES:
        numel = nbytes // 4
        iters = max(5, min(100, (256 << 20) // nbytes))
        for coll in ("all_reduce", "all_gather"):
            row = {"collective": coll, "bytes": nbytes, "iters": iters, "rounds": ROUNDS}
            calls = {}
            for dev in ("tpu", "cpu"):
                x = torch.ones(numel).to(dev)
                out = torch.empty(numel * n).to(dev)
                sync = torch.tpu.synchronize if dev == "tpu" else (lambda: None)
                if coll == "all_reduce":
                    calls[dev] = (lambda x=x: dist.all_reduce(x)), sync
                else:
                    calls[dev] = (lambda x=x, out=out: dist.all_gather_into_tensor(out, x)), sync
            times = {dev: [] for dev in calls}
            for _ in range(ROUNDS):  # tpu and cpu take turns, so machine noise falls on both
                for dev, (op, sync) in calls.items():
                    secs = torch.tensor([_time(op, sync, iters)])
                    dist.all_reduce(secs, op=dist.ReduceOp.MAX)  # the slowest rank; over gloo, cpu tensor
                    times[dev].append(secs.item())
            moved = nbytes * 2 * (n - 1) / n if coll == "all_reduce" else nbytes * (n - 1)
            for dev, ts in times.items():
                secs = sorted(ts)[len(ts) // 2]
                row[dev] = {"seconds": secs, "busbw_GBps": moved / secs / 1e9}
            rows.append(row)
    if r == 0:
        with open(out_path, "w") as f:
            json.dump({"nproc": n, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def write_markdown(path, data):
    lines = [
        "# Collectives: the `tpu` backend (host path over gloo) vs gloo on CPU tensors",
        "",
        f"{data['nproc']} processes, one CPU-plugin device each, same run, interleaved per size "
        "(bench/collectives.py). Time: the median over 3 alternating rounds of the slowest rank's "
        "mean per call. Ratio = tpu bus "
        "bandwidth / gloo bus bandwidth (1.0 = staging costs nothing).",
        "",
        "| collective | bytes per rank | tpu µs | gloo µs | tpu GB/s | gloo GB/s | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in data["rows"]:
        t, c = row["tpu"], row["cpu"]
        lines.append(f"| {row['collective']} | {row['bytes']:,} | {t['seconds'] * 1e6:.0f} | "
                     f"{c['seconds'] * 1e6:.0f} | {t['busbw_GBps']:.3f} | {c['busbw_GBps']:.3f} | "
                     f"{t['busbw_GBps'] / c['busbw_GBps']:.2f} |")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args.worker)
        return
    os.makedirs(args.out, exist_ok=True)
    js = os.path.join(args.out, "bench-collectives.json")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={NPROC}",
           os.path.abspath(__file__), "--worker", js]
    subprocess.run(cmd, env=env, check=True)
    with open(js) as f:
        data = json.load(f)
    md = os.path.join(args.out, "bench-collectives.md")
    write_markdown(md, data)
    print(open(md).read())


if __name__ == "__main__":
    main()
