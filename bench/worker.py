"""One benchmark worker: a fresh process running one workload on one backend.

bench/run.py starts one worker per (workload, backend), so the first step of each is
cold (fresh process: no executable cache in memory; torchtpu's and Inductor's on-disk
caches point at an empty directory the driver made for this worker, except for the
warm first-step worker, which gets the directory its cold twin filled). bench/peers.py
uses the same workers, in its own venv, for the backends "xla" (PyTorch/XLA lazy
tensors, torch_xla.sync() after each step) and "xla-compile" (torch.compile with
backend "openxla"); PyTorch/XLA keeps no persistent compile cache unless asked to, so
its first step is cold too. The driver then sends commands,
one JSON line each on stdin, and the worker answers one JSON line each on a private
pipe (fd passed as --reply-fd) so that library output on stdout/stderr cannot mix in:

  setup       build the model and data (timed)
  first       one step, timed including compilation -> first_step_s
  warmup N    N untimed steps
  step        one timed step (synchronised) -> seconds
  memprobe    one extra, untimed step that samples torchtpu live_bytes after every aten
              op (a TorchDispatchMode); tpu only
  report      memory and metric summaries
  quit

Every answer is {"ok": true, ...} or {"ok": false, "error": ..., "missing_ops": [...]}.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


# ---------------------------------------------------------------- /proc memory readings

def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def rss_bytes():
    return (_status_kb("VmRSS") or 0) * 1024


def hwm_bytes():
    return (_status_kb("VmHWM") or 0) * 1024


def reset_hwm():
    """Resets VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- error description

_OP_RE = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")


def describe_error(exc):
    msg = f"{type(exc).__name__}: {exc}"
    ops = sorted(set(_OP_RE.findall(str(exc)))) if isinstance(exc, NotImplementedError) else []
    # The first line, or for a wrapper whose first line only says "raised:" (Dynamo's
    # BackendCompilerFailed), the first few non-empty lines, so the cause is in the report.
    lines = [x.strip() for x in msg.strip().splitlines() if x.strip()]
    first = (" ".join(lines[:3]) if lines and lines[0].rstrip().endswith(":") else lines[0]) if lines else msg
    return {"ok": False, "error": first[:600], "missing_ops": ops,
            "traceback": traceback.format_exc()[-3000:]}


# ---------------------------------------------------------------- the worker

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", required=True,
                    choices=["tpu", "tpu-fused", "tpu-compile", "cpu", "inductor", "xla", "xla-compile"])
    ap.add_argument("--workload", required=True)
    ap.add_argument("--cfg", required=True, help="the workload's configuration, JSON")
    ap.add_argument("--reply-fd", type=int, required=True)
    args = ap.parse_args()
    reply_f = os.fdopen(args.reply_fd, "w", buffering=1)

    def reply(obj):
        reply_f.write(json.dumps(obj) + "\n")
        reply_f.flush()

    t_imp = time.perf_counter()
    import torch
    tpu = args.backend.startswith("tpu")
    xla = args.backend.startswith("xla")
    torchtpu = None
    if tpu:
        import torchtpu  # noqa: F401  (registers the device)
    if xla:
        # PyTorch/XLA (bench/peers.py only, in its own venv): PJRT_DEVICE comes from the driver.
        import torch_xla
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
    import workloads
    import_s = time.perf_counter() - t_imp

    if tpu:
        def sync():
            torch.tpu.synchronize()

        def metrics():
            return {k: v for k, v in torchtpu.metrics().items() if isinstance(v, (int, float))}
    elif xla:
        def sync():
            # Cut the lazy graph and run it (a no-op when nothing is pending, e.g. after a
            # torch.compile(backend="openxla") call that already executed), then wait for
            # the device: XLA executes asynchronously.
            torch_xla.sync()
            xm.wait_device_ops()

        def metrics():
            out = {}
            for name, key in (("CompileTime", "xla_compiles"), ("ExecuteTime", "xla_executions"),
                              ("TransferToDeviceTime", "xla_h2d_transfers"),
                              ("TransferFromDeviceTime", "xla_d2h_transfers")):
                d = met.metric_data(name)
                out[key] = d[0] if d else 0
                if key == "xla_compiles":
                    out["xla_compile_seconds"] = (d[1] / 1e9) if d else 0.0
            for name in ("CachedCompile", "UncachedCompile"):
                v = met.counter_value(name)
                out["xla_" + name] = v or 0
            out["xla_fallback_calls"] = sum(met.counter_value(n) or 0 for n in met.counter_names()
                                            if n.startswith("aten::"))
            return out
    else:
        def sync():
            pass

        def metrics():
            return {}

    cfg = json.loads(args.cfg)
    wl = None
    base_rss = rss_bytes()
    mem = {"rss_base_bytes": base_rss}
    live_peak = 0
    live_samples = []
    timed_m0 = timed_m1 = None
    timed_steps = 0
    first_metrics = {}

    def sample_live():
        nonlocal live_peak
        if tpu:
            lb = torchtpu.metrics().get("live_bytes", 0)
            live_peak = max(live_peak, lb)
            return lb
        return 0

    def step_and_sync():
        # The step's results are held until the device is synchronised: a lazy or
        # fused backend may skip work whose results nobody holds, and would then be
        # timed doing nothing (fused SVD/QR/eigh "ran" in 0.2-0.8 ms that way).
        out = wl.step()
        sync()
        del out

    reply({"ok": True, "ready": True, "import_s": import_s, "pid": os.getpid(),
           "torch": torch.__version__, "threads": torch.get_num_threads()})

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        cmd = json.loads(line)
        op = cmd["cmd"]
        try:
            if op == "quit":
                reply({"ok": True})
                break
            elif op == "setup":
                mem["hwm_reset_supported"] = reset_hwm()
                base_rss = rss_bytes()
                mem["rss_base_bytes"] = base_rss
                if tpu:
                    mem["live_bytes_before_setup"] = torchtpu.metrics().get("live_bytes", 0)
                m0 = metrics()
                t = time.perf_counter()
                wl = workloads.build(args.workload, args.backend, cfg)
                sync()
                setup_s = time.perf_counter() - t
                m1 = metrics()
                sample_live()
                reply({"ok": True, "setup_s": setup_s, "unit": wl.unit, "kind": wl.kind,
                       "work": wl.work, "notes": wl.notes,
                       "setup_metrics": {k: m1[k] - m0.get(k, 0) for k in m1}})
            elif op == "first":
                m0 = metrics()
                t = time.perf_counter()
                step_and_sync()
                first_s = time.perf_counter() - t
                m1 = metrics()
                sample_live()
                first_metrics = {k: m1[k] - m0.get(k, 0) for k in m1}
                mem["rss_peak_first_delta_bytes"] = hwm_bytes() - base_rss
                reply({"ok": True, "seconds": first_s, "metrics": first_metrics})
            elif op == "warmup":
                t = time.perf_counter()
                for _ in range(int(cmd.get("n", 1))):
                    step_and_sync()
                    sample_live()
                w_s = time.perf_counter() - t
                # Steady-state peak RSS: from here on (allocator caches, compiled code and
                # the model stay resident; compile-time transients are excluded).
                mem["rss_peak_through_warmup_delta_bytes"] = hwm_bytes() - base_rss
                reset_hwm()
                reply({"ok": True, "seconds": w_s})
            elif op == "step":
                if timed_m0 is None:
                    timed_m0 = metrics()
                t = time.perf_counter()
                step_and_sync()
                s = time.perf_counter() - t
                timed_m1 = metrics()
                timed_steps += 1
                sample_live()
                reply({"ok": True, "seconds": s})
            elif op == "memprobe":
                out = {"ok": True}
                mem["rss_peak_steady_delta_bytes"] = hwm_bytes() - base_rss
                if tpu:
                    from torch.utils._python_dispatch import TorchDispatchMode
                    get = torchtpu._C.metrics
                    peak = [0]

                    class LiveSampler(TorchDispatchMode):
                        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                            r = func(*args, **(kwargs or {}))
                            lb = dict(get()).get("live_bytes", 0)
                            if lb > peak[0]:
                                peak[0] = lb
                            return r

                    with LiveSampler():
                        step_and_sync()
                    peak[0] = max(peak[0], torchtpu.metrics().get("live_bytes", 0))
                    mem["live_bytes_peak_op_sampled"] = peak[0]
                    out["live_bytes_peak_op_sampled"] = peak[0]
                reply(out)
            elif op == "report":
                if "rss_peak_steady_delta_bytes" not in mem:
                    mem["rss_peak_steady_delta_bytes"] = hwm_bytes() - base_rss
                mem["live_bytes_peak_step_sampled"] = live_peak if tpu else None
                if tpu:
                    mem["live_bytes_end"] = torchtpu.metrics().get("live_bytes", 0)
                timed = {}
                if timed_m0 is not None and timed_m1 is not None and timed_steps:
                    timed = {k: (timed_m1[k] - timed_m0.get(k, 0)) for k in timed_m1}
                extra = {}
                if tpu or xla:
                    extra["metrics_total"] = metrics()
                if xla:
                    extra["xla_fallback_ops"] = sorted(met.executed_fallback_ops())
                reply({"ok": True, "memory": mem, "timed_metrics": timed,
                       "timed_steps": timed_steps, "first_metrics": first_metrics, **extra})
            else:
                reply({"ok": False, "error": f"unknown command {op!r}"})
        except BaseException as e:  # noqa: BLE001 - every failure is a result here
            reply(describe_error(e))
    reply_f.close()


if __name__ == "__main__":
    main()
