"""`make bench` / `make bench-quick`: torchtpu vs PyTorch on the CPU, in the same run.

For every workload (bench/workloads.py) the driver starts one fresh worker process per
backend (bench/worker.py) — "tpu" (torchtpu strict eager), "tpu-fused" (torchtpu fused
eager), "tpu-compile", "cpu" (PyTorch eager) and "inductor" (torch.compile on the CPU) —
and then:

  1. first step, cold: each worker, one after the other, builds the workload and times
     its first step including every compile (fresh process: empty in-memory executable
     cache and an empty TORCHTPU_CACHE_DIR for torchtpu; for Inductor an empty
     TORCHINDUCTOR_CACHE_DIR, so FX-graph, AOTAutograd and C++ kernel caches are all cold);
     1b. first step, warm (tpu and tpu-compile): right after the cold first step, a second
     fresh worker for the same backend starts with TORCHTPU_CACHE_DIR = the directory the
     cold worker just filled (the cold worker stays alive, idle, so the directory lives
     until it closes), builds the workload, times its first step and quits. Same process
     freshness, only the persistent disk compile cache differs (--no-warm-first skips it);
  2. warm-up: a few more untimed steps on each backend;
  3. timed repeats, interleaved: tpu, cpu, inductor, tpu, cpu, inductor, ... so that
     machine noise falls on all backends alike; each worker synchronises before it
     stops its timer (torch.tpu.synchronize() for tpu; CPU eager is synchronous);
  4. one untimed memory-probe step (tpu: live_bytes after every aten op), a report.

Only one worker computes at any moment: the others wait on their command pipe.
Nothing here asserts on time. Outputs: reports/bench.md, reports/bench.json, reports/bench.png.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

BACKENDS = ["tpu", "tpu-fused", "tpu-compile", "cpu", "inductor"]
BACKEND_LABEL = {"tpu": "torchtpu eager (tpu)", "tpu-fused": "torchtpu fused eager", "tpu-compile": "torch.compile(backend=\"tpu\")", "cpu": "PyTorch eager CPU", "inductor": "torch.compile Inductor CPU"}

# repeats / warm-up per workload (full, quick)
PLAN = {
    "full": {"repeats": {"dispatch": 20, "matmul": 10, "mlp_train": 15, "mlp_loop": 7, "gpt_train": 7,
                         "gpt_fwd": 10, "llama_decode": 7, "svd": 5, "qr": 5, "eigh": 5},
             "warmup": 2, "timeout_s": 1200},
    "quick": {"repeats": {"dispatch": 5, "matmul": 3, "mlp_train": 5, "mlp_loop": 3, "gpt_train": 3,
                          "gpt_fwd": 3, "llama_decode": 3, "svd": 3, "qr": 3, "eigh": 3},
              "warmup": 1, "timeout_s": 300,
              # Cold Inductor compiles (C++ kernels) take minutes on 2 cores: --quick keeps
              # Inductor's cache between its own runs, and says so in each row.
              "inductor_cache": os.path.join(tempfile.gettempdir(), "torchtpu-bench-inductor-cache")},
}


# ---------------------------------------------------------------- machine facts

def cpu_peak():
    """Theoretical fp32 peak of this CPU, with every assumption spelled out."""
    info = {"assumptions": []}
    text = ""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        pass
    first = text.split("\n\n")[0]
    fields = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    flags = set(fields.get("flags", "").split())
    info["model"] = fields.get("model name", platform.processor())
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    info["cores"] = cores
    siblings, cpu_cores = fields.get("siblings"), fields.get("cpu cores")
    if siblings and cpu_cores and int(siblings) > int(cpu_cores):
        info["assumptions"].append(
            f"SMT is on (siblings {siblings} > cpu cores {cpu_cores}): counting logical CPUs overstates the peak")
    info["assumptions"].append(f"cores = {cores} logical CPUs this process may run on (sched_getaffinity); "
                               "under a hypervisor these may be SMT siblings of fewer physical cores")
    mhz = None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        for line in out.splitlines():
            if line.lower().startswith("cpu max mhz"):
                mhz = float(line.split(":", 1)[1])
                info["assumptions"].append(f"clock = lscpu 'CPU max MHz' {mhz:.0f}")
    except (OSError, subprocess.SubprocessError, ValueError):
        pass
    if mhz is None and fields.get("cpu MHz"):
        mhz = float(fields["cpu MHz"])
        info["assumptions"].append(f"clock = /proc/cpuinfo 'cpu MHz' {mhz:.0f} (no 'CPU max MHz' from lscpu; "
                                   "turbo not counted)")
    if mhz is None:
        mhz = 2000.0
        info["assumptions"].append("clock unknown: assumed 2000 MHz")
    if "avx512f" in flags:
        width = 512
    elif "avx2" in flags or "fma" in flags or "avx" in flags:
        width = 256
    else:
        width = 128
    info["assumptions"].append(f"vector width {width} bits (flags: "
                               f"{' '.join(sorted(f for f in flags if f.startswith(('avx', 'fma'))))})")
    fma_units = 2
    info["assumptions"].append("2 FMA units per core (server x86 assumption)")
    flops_cycle = (width // 32) * 2 * fma_units
    info["assumptions"].append(f"FLOPs/cycle/core = ({width}/32 lanes) x 2 (FMA) x {fma_units} units = {flops_cycle}")
    info.update(mhz=mhz, vector_bits=width, fma_units=fma_units, flops_per_cycle=flops_cycle,
                peak_gflops=cores * mhz / 1e3 * flops_cycle)
    return info


def machine_info():
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "platform": platform.platform(),
            "cxx": shutil.which("g++") or shutil.which("c++")}


# ---------------------------------------------------------------- worker handle

class WorkerError(RuntimeError):
    pass


class Worker:
    def __init__(self, workload, backend, cfg, log_dir, timeout_s, extra_env=None, inductor_cache=None,
                 tpu_cache_dir=None, tag=None):
        """tpu_cache_dir: TORCHTPU_CACHE_DIR for a tpu worker (default: an empty directory of
        its own, removed by close()); a given directory is not removed by this worker.
        tag: appended to the log file's name ("warm" for the warm first-step worker)."""
        self.workload, self.backend, self.timeout_s = workload, backend, timeout_s
        self.cache_state = None
        self.tpu_cache_dir = None
        self.rfd, wfd = os.pipe()
        env = dict(os.environ)
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        env.update(extra_env or {})
        self.tmp = tempfile.mkdtemp(prefix=f"bench-{workload}-{backend}-")
        if backend == "inductor":
            # Cold compile: Inductor's FX-graph / AOTAutograd / C++ kernel caches in an
            # empty directory of this worker's own.
            env["TORCHINDUCTOR_CACHE_DIR"] = inductor_cache or os.path.join(self.tmp, "inductor")
            self.cache_state = ("reused: kept across --quick runs" if inductor_cache and os.path.isdir(inductor_cache)
                                and os.listdir(inductor_cache) else "empty (cold)")
        if backend.startswith("tpu"):
            env["TORCHTPU_EAGER_MODE"] = "fused" if backend == "tpu-fused" else "strict"
            # Cold compile: the disk compile cache in an empty directory of this worker's own
            # (unless the driver hands it a populated one: the warm first-step worker).
            self.tpu_cache_dir = tpu_cache_dir or os.path.join(self.tmp, "torchtpu-cache")
            env["TORCHTPU_CACHE_DIR"] = self.tpu_cache_dir
            env.pop("TORCHTPU_CPU_FALLBACK", None)
        self.log_path = os.path.join(log_dir, f"{workload}-{backend}{'-' + tag if tag else ''}.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), "--backend", backend,
             "--workload", workload, "--cfg", json.dumps(cfg), "--reply-fd", str(wfd)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True,
            pass_fds=(wfd,), env=env, cwd=ROOT)
        os.close(wfd)
        self.rf = os.fdopen(self.rfd, "r")
        self.buf = ""

    def _read(self, timeout):
        deadline = time.monotonic() + timeout
        while "\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerError(f"timed out after {timeout:.0f} s")
            r, _, _ = select.select([self.rfd], [], [], min(left, 1.0))
            if r:
                chunk = os.read(self.rfd, 65536).decode()
                if not chunk:
                    rc = self.proc.wait()
                    raise WorkerError(f"worker died (exit code {rc}); see {os.path.relpath(self.log_path, ROOT)}: "
                                      + self._log_tail())
                self.buf += chunk
        line, self.buf = self.buf.split("\n", 1)
        return json.loads(line)

    def _log_tail(self):
        try:
            self.log.flush()
            with open(self.log_path) as f:
                lines = [x for x in f.read().splitlines() if x.strip()]
            return " | ".join(lines[-3:])[-500:]
        except OSError:
            return ""

    def ready(self):
        return self._read(self.timeout_s)

    def cmd(self, name, **kw):
        try:
            self.proc.stdin.write(json.dumps({"cmd": name, **kw}) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as e:
            raise WorkerError(f"worker gone: {e}") from e
        return self._read(self.timeout_s)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self):
        try:
            if self.proc.poll() is None:
                self.cmd("quit")
                self.proc.wait(timeout=30)
        except (WorkerError, subprocess.TimeoutExpired, OSError, ValueError):
            self.kill()
        finally:
            self.log.close()
            try:
                self.rf.close()
            except OSError:
                pass
            shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------- one workload

def stats(xs):
    xs = sorted(xs)
    if not xs:
        return None
    if len(xs) >= 2:
        q = statistics.quantiles(xs, n=4, method="inclusive")
        q1, q3 = q[0], q[2]
    else:
        q1 = q3 = xs[0]
    return {"median": statistics.median(xs), "q1": q1, "q3": q3, "min": xs[0], "max": xs[-1], "n": len(xs)}


def _dir_usage(path):
    """(entry files, bytes) under a torchtpu disk-cache directory."""
    n = size = 0
    for root, _, files in os.walk(path):
        for f in files:
            if f.startswith(".tmp-"):
                continue
            try:
                size += os.path.getsize(os.path.join(root, f))
                n += 1
            except OSError:
                pass
    return n, size


WARM_BACKENDS = ("tpu", "tpu-fused", "tpu-compile")


def run_workload(name, cfg, backends, plan, log_dir, log, skip=None, extra_env=None, warm_first=True):
    import workloads
    repeats = plan["repeats"][name]
    skip = skip or {}
    rows = {b: {"workload": name, "backend": b, "status": "ok", "error": None, "missing_ops": [],
                "times_s": [], "notes": []} for b in backends}
    for b, why in skip.items():
        if b in rows:
            rows[b].update(status="skipped", notes=[why])
    backends = [b for b in backends if b not in skip]
    workers = {}

    def fail(b, stage, res):
        row = rows[b]
        row["status"] = "failed"
        row["error"] = f"{stage}: {res.get('error')}"
        row["missing_ops"] = res.get("missing_ops", [])
        if res.get("traceback"):
            row["traceback"] = res["traceback"]
        log(f"  {b:9s} FAILED at {stage}: {res.get('error')}")
        w = workers.pop(b, None)
        if w:
            w.close()

    def call(b, stage, cmd, **kw):
        try:
            res = workers[b].cmd(cmd, **kw)
        except WorkerError as e:
            res = {"ok": False, "error": str(e)}
        if not res.get("ok"):
            fail(b, stage, res)
            return None
        return res

    def warm_first_step(b):
        """A second fresh process for backend b whose TORCHTPU_CACHE_DIR is the directory the
        cold worker b populated (b stays alive, idle, so the directory outlives this; it is
        removed when b closes): setup + first step, then it quits. Nothing else computes
        meanwhile: the other workers wait on their pipes."""
        cache = workers[b].tpu_cache_dir
        n, size = _dir_usage(cache)
        info = {"status": "ok", "error": None, "cache_entries": n, "cache_bytes": size}
        w = None
        try:
            w = Worker(name, b, cfg, log_dir, plan["timeout_s"], extra_env, tpu_cache_dir=cache, tag="warm")
            stage = "start"
            res = w.ready()
            if res.get("ok"):
                info["import_s"] = res.get("import_s")
                stage = "setup"
                res = w.cmd("setup")
            if res.get("ok"):
                info["setup_s"] = res["setup_s"]
                info["setup_metrics"] = res.get("setup_metrics", {})
                stage = "first step"
                res = w.cmd("first")
            if res.get("ok"):
                info["first_step_s"] = res["seconds"]
                info["metrics"] = res.get("metrics", {})
            else:
                info.update(status="failed", error=f"{stage}: {res.get('error')}")
                if res.get("traceback"):
                    info["traceback"] = res["traceback"]
        except Exception as e:  # noqa: BLE001 - a failed warm run is a result, the bench goes on
            info.update(status="failed", error=f"{type(e).__name__}: {e}" if not isinstance(e, WorkerError)
                        else str(e))
        finally:
            if w is not None:
                w.close()
        row = rows[b]
        row["first_step_warm"] = info
        if info["status"] == "ok":
            row["first_step_warm_s"] = info["first_step_s"]
            row["first_step_warm_metrics"] = info["metrics"]
            if row.get("first_step_s") and info["first_step_s"] > 0:
                row["first_step_cold_over_warm"] = row["first_step_s"] / info["first_step_s"]
            m = info["metrics"]
            log(f"  {b:9s} first step warm {info['first_step_s']:.3f} s (fresh process, disk cache of "
                f"{n} entries / {size / 1024:.0f} KB: {m.get('compiles', 0)} compiles, "
                f"{m.get('disk_cache_hits', 0)} disk hits, {m.get('disk_cache_misses', 0)} misses)")
        else:
            log(f"  {b:9s} first step warm FAILED: {info['error']}")

    t0 = time.perf_counter()
    # Start the workers together (imports overlap), then wait for each to be ready.
    for b in backends:
        ind_cache = os.path.join(plan["inductor_cache"], name) if plan.get("inductor_cache") else None
        workers[b] = Worker(name, b, cfg, log_dir, plan["timeout_s"], extra_env, ind_cache)
        if workers[b].cache_state:
            rows[b]["inductor_cache"] = workers[b].cache_state
            if workers[b].cache_state != "empty (cold)":
                rows[b]["notes"].append("first step with Inductor's on-disk cache from an earlier --quick run")
    for b in list(workers):
        try:
            res = workers[b].ready()
        except WorkerError as e:
            res = {"ok": False, "error": str(e)}
        if not res.get("ok"):
            fail(b, "start", res)
        else:
            rows[b]["import_s"] = res.get("import_s")
            rows[b]["torch_threads"] = res.get("threads")
    try:
        # 1. setup + cold first step, one backend at a time.
        for b in list(workers):
            res = call(b, "setup", "setup")
            if res is None:
                continue
            rows[b].update(setup_s=res["setup_s"], unit=res["unit"], kind=res["kind"], work=res["work"],
                           setup_metrics=res.get("setup_metrics", {}))
            rows[b]["notes"] += res.get("notes", [])
            res = call(b, "first step", "first")
            if res is None:
                continue
            rows[b]["first_step_s"] = res["seconds"]
            rows[b]["first_step_metrics"] = res.get("metrics", {})
            log(f"  {b:9s} first step {res['seconds']:.3f} s")
            # 1b. the same first step in a second fresh process, disk cache warm.
            if warm_first and b in WARM_BACKENDS:
                warm_first_step(b)
        # 2. warm-up.
        for b in list(workers):
            res = call(b, "warm-up", "warmup", n=plan["warmup"])
            if res is not None:
                rows[b]["warmup_s"] = res["seconds"]
        # 3. interleaved timed repeats.
        for r in range(repeats):
            for b in backends:
                if b not in workers:
                    continue
                res = call(b, f"timed step {r}", "step")
                if res is not None:
                    rows[b]["times_s"].append(res["seconds"])
        # 4. memory probe + report.
        for b in list(workers):
            res = call(b, "memory probe", "memprobe")
            if res is None:
                continue
            res = call(b, "report", "report")
            if res is None:
                continue
            rows[b]["memory"] = res["memory"]
            rows[b]["timed_metrics"] = res.get("timed_metrics", {})
            rows[b]["timed_steps"] = res.get("timed_steps", 0)
            for k in ("metrics_total", "xla_fallback_ops"):
                if k in res:
                    rows[b][k] = res[k]
    finally:
        for b in list(workers):
            workers.pop(b).close()

    # derived figures
    for b, row in rows.items():
        st = stats(row["times_s"])
        row["stats_s"] = st
        if st and "work" in row:
            wl = workloads.Workload(step=None, unit=row["unit"], work=row["work"], kind=row["kind"])
            row["figure_median"] = wl.figure(st["median"])
            lo, hi = wl.figure(st["q1"]), wl.figure(st["q3"])
            row["figure_iqr"] = [min(lo, hi), max(lo, hi)]
            lo, hi = wl.figure(st["min"]), wl.figure(st["max"])
            row["figure_range"] = [min(lo, hi), max(lo, hi)]
    cpu = rows.get("cpu", {}).get("stats_s")
    for b, row in rows.items():
        if row["stats_s"] and cpu:
            # speedup: > 1 means faster than PyTorch eager on the CPU
            row["speedup_vs_cpu_eager"] = cpu["median"] / row["stats_s"]["median"]
        tm = row.get("timed_metrics") or {}
        n = row.get("timed_steps") or 0
        if b.startswith("tpu") and n:
            row["tpu_per_step"] = {k: tm.get(k, 0) / n for k in
                                   ("ops_executed", "executions", "compiles", "cache_hits", "cache_misses",
                                    "h2d_bytes", "d2h_bytes", "h2d_transfers", "d2h_transfers", "fallbacks",
                                    "fused_ops", "fused_flushes", "fused_programs")}
            row["tpu_timed_compiles"] = tm.get("compiles", 0)
    log(f"  ({time.perf_counter() - t0:.1f} s)")
    return list(rows.values())


# ---------------------------------------------------------------- reports

def _fmt(x, digits=3):
    if x is None:
        return "—"
    if x == 0:
        return "0"
    a = abs(x)
    if a >= 1000:
        return f"{x:,.0f}"
    if a >= 100:
        return f"{x:.0f}"
    if a >= 10:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    return f"{x:.{digits}g}"


def _mb(b):
    return None if b is None else b / 2 ** 20


def _secs(s):
    if s is None:
        return "—"
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def enrich(rows, peak):
    dispatch_us = None
    for r in rows:
        if r["workload"] == "dispatch" and r["backend"] == "tpu" and r.get("figure_median"):
            dispatch_us = r["figure_median"]
    for r in rows:
        if r["workload"] == "matmul" and r.get("figure_median"):
            r["share_of_peak"] = r["figure_median"] / peak["peak_gflops"]
        if r["workload"] == "dispatch" and r["backend"] == "tpu" and r.get("timed_steps"):
            tm = r.get("timed_metrics", {})
            ops = r["timed_steps"] * r["cfg"]["ops"]
            r["dispatch_check"] = {"timed_compiles": tm.get("compiles", 0),
                                   "cache_hits_per_op": tm.get("cache_hits", 0) / ops,
                                   "ops_executed_per_op": tm.get("ops_executed", 0) / ops}
        if r["backend"] == "tpu" and r.get("tpu_per_step") and dispatch_us and r.get("stats_s"):
            est = r["tpu_per_step"]["ops_executed"] * dispatch_us * 1e-6
            r["dispatch_overhead_estimate_s"] = est
            r["dispatch_overhead_share"] = est / r["stats_s"]["median"]


def peak_mem_text(r):
    mem = r.get("memory") or {}
    parts = []
    if r["backend"] == "tpu":
        lb = mem.get("live_bytes_peak_op_sampled") or mem.get("live_bytes_peak_step_sampled")
        if lb is not None:
            parts.append(f"live {_fmt(_mb(lb))} MB" if lb >= 2 ** 20 else f"live {lb} B")
    rss = mem.get("rss_peak_steady_delta_bytes")
    if rss is not None:
        parts.append(f"RSS +{_fmt(_mb(rss))} MB")
    return "; ".join(parts) or "—"


def _fused_vs_strict(L, rows):
    """Fused eager against strict eager, same run: step-time ratio, and per step the
    executions each launched and the programs fused mode built."""
    by = {(r["workload"], r["backend"]): r for r in rows}
    pairs = [(w, by[(w, "tpu")], by[(w, "tpu-fused")]) for (w, b) in by if b == "tpu" and (w, "tpu-fused") in by]
    if not pairs:
        return
    L.append("### Fused eager vs strict eager\n")
    L.append("fused / strict = strict median step time / fused median step time (> 1: fused is faster). "
             "For the dispatch workload the median is per op (µs/op).\n")
    L.append("Per op = median step time / aten ops run per step (`ops_executed`: launched in strict "
             "mode, recorded in fused mode), computation included.\n")
    L.append("| workload | strict median | fused median | fused / strict | fused vs CPU eager | "
             "strict per op | fused per op | "
             "strict executions/step | fused executions/step | fused programs built/step |")
    L.append("|---|---|---|---|---|---|---|---|---|---|")
    for w, s_row, f_row in pairs:
        ss, fs = s_row.get("stats_s"), f_row.get("stats_s")
        ratio = ss["median"] / fs["median"] if ss and fs else None
        sps, fps = s_row.get("tpu_per_step") or {}, f_row.get("tpu_per_step") or {}
        L.append(f"| {w} | {_secs(ss['median']) if ss else '—'} | {_secs(fs['median']) if fs else '—'} | "
                 f"{_fmt(ratio)}{'×' if ratio else ''} | {_fmt(f_row.get('speedup_vs_cpu_eager'))} | "
                 f"{_per_op(ss, sps)} | {_per_op(fs, fps)} | "
                 f"{_fmt(sps.get('executions'))} | {_fmt(fps.get('executions'))} | {_fmt(fps.get('fused_programs'))} |")
    L.append("")


def _per_op(stats, per_step):
    """Median step time per aten op the step ran, in µs ('—' without counters)."""
    ops = per_step.get("ops_executed")
    return f"{_fmt(stats['median'] / ops * 1e6)} µs" if stats and ops else "—"


def write_markdown(path, meta, rows, peak):
    L = []
    L.append(f"# torchtpu benchmarks ({meta['mode']})\n")
    L.append(f"Run {meta['started']} on {peak['model']} ({peak['cores']} CPUs), torch {meta['machine']['torch']} "
             f"({meta['machine']['torch_threads']} threads), Python {meta['machine']['python']}; "
             f"torchtpu PJRT plugin: `{meta.get('plugin') or '?'}`. Total wall time {meta['wall_s']:.0f} s. "
             f"Load average (1 min) at start {meta['loadavg_start'][0]:.1f}, at end {meta['loadavg_end'][0]:.1f} "
             f"on {peak['cores']} CPUs; OMP_WAIT_POLICY for all workers: {meta['omp_wait_policy']}.\n")
    if meta.get("load_warning"):
        L.append(f"**Warning:** {meta['load_warning']}\n")
    L.append("Speedup = PyTorch-eager-CPU median step time / this backend's median step time, "
             "from the same interleaved run (> 1: faster than CPU eager). Spread = IQR of the "
             "figure over the timed repeats (min–max in bench.json). First step = cold: a fresh "
             "process per (workload, backend), timed from before the first step to after it "
             "synchronises, including every compile (Inductor's cache: see Method).\n")
    L.append("| workload | backend | median | spread (IQR) | speedup vs CPU eager | first step | peak memory | notes |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        unit = r.get("unit", "")
        if r["status"] == "skipped":
            L.append(f"| {r['workload']} | {r['backend']} | skipped | — | — | — | — | "
                     f"{'; '.join(r.get('notes', [])).replace('|', '/')} |")
            continue
        if r["status"] != "ok" and not r.get("stats_s"):
            err = (r.get("error") or "").replace("|", "\\|")
            L.append(f"| {r['workload']} | {r['backend']} | FAILED | — | — | {_secs(r.get('first_step_s'))} | — | {err[:300]} |")
            continue
        med = f"{_fmt(r.get('figure_median'))} {unit}"
        iqr = r.get("figure_iqr")
        spread = f"{_fmt(iqr[0])}–{_fmt(iqr[1])}" if iqr else "—"
        sp = r.get("speedup_vs_cpu_eager")
        notes = list(r.get("notes", []))
        if unit != "ms/step" and r.get("stats_s"):
            notes.insert(0, f"step {_secs(r['stats_s']['median'])}")
        if r.get("share_of_peak") is not None:
            notes.append(f"{r['share_of_peak'] * 100:.0f}% of {peak['peak_gflops']:.0f} GFLOP/s peak")
        if r["backend"] == "tpu":
            fm = r.get("first_step_metrics", {})
            if fm:
                notes.append(f"first step: {fm.get('compiles', 0)} compiles, "
                             f"{fm.get('compile_seconds', fm.get('compile_ns', 0) / 1e9):.1f} s compiling")
            ps = r.get("tpu_per_step")
            if ps:
                notes.append(f"{ps['ops_executed']:.0f} ops/step, {ps['compiles']:.0f} compiles/step")
            if r.get("dispatch_overhead_share") is not None:
                notes.append(f"~{min(r['dispatch_overhead_share'], 9.99) * 100:.0f}% of step = per-op overhead est.")
            if r.get("dispatch_check"):
                dc = r["dispatch_check"]
                notes.append(f"timed compiles {dc['timed_compiles']}, cache hits/op {dc['cache_hits_per_op']:.2f}")
        if r.get("first_step_warm_s") is not None:
            ratio = r.get("first_step_cold_over_warm")
            notes.append(f"first step on a warm disk cache {_secs(r['first_step_warm_s'])}"
                         + (f" (cold/warm {ratio:.1f}x)" if ratio else ""))
        if r["status"] != "ok":
            notes.append("ERROR " + (r.get("error") or ""))
        note = "; ".join(notes).replace("|", "\\|")
        L.append(f"| {r['workload']} | {r['backend']} | {med} | {spread} | "
                 f"{'—' if sp is None else f'{sp:.2f}x'} | {_secs(r.get('first_step_s'))} | "
                 f"{peak_mem_text(r)} | {note} |")
    L.append("")
    L.append("## Workloads\n")
    for name, d in meta["workloads"].items():
        L.append(f"- **{name}**: {d}")
    L.append("")
    L.append("## torchtpu metrics per workload\n")
    L.append("Per timed step (after warm-up) and for the cold first step. 'per-op overhead est.' = "
             "ops/step × the dispatch workload's µs/op: the time the step would take if every op cost "
             "what a 16-element op costs (a floor on host-side overhead).\n")
    L.append("| workload | first-step compiles | first-step compile s | first step s | ops/step | executions/step | "
             "cache hits/step | compiles/step | h2d B/step | d2h B/step | per-op overhead est. |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["backend"] != "tpu":
            continue
        fm = r.get("first_step_metrics", {})
        ps = r.get("tpu_per_step") or {}
        est = r.get("dispatch_overhead_estimate_s")
        sh = r.get("dispatch_overhead_share")
        share = "" if sh is None else f" ({sh * 100:.0f}% of step)"
        L.append(f"| {r['workload']} | {fm.get('compiles', '—')} | "
                 f"{_fmt(fm.get('compile_seconds')) if fm else '—'} | {_fmt(r.get('first_step_s'))} | "
                 f"{_fmt(ps.get('ops_executed'))} | {_fmt(ps.get('executions'))} | {_fmt(ps.get('cache_hits'))} | "
                 f"{_fmt(ps.get('compiles'))} | {_fmt(ps.get('h2d_bytes'))} | {_fmt(ps.get('d2h_bytes'))} | "
                 f"{_secs(est) if est is not None else '—'}{share} |")
    L.append("")
    _fused_vs_strict(L, rows)
    warm = [r for r in rows if r["backend"] in WARM_BACKENDS and r["status"] != "skipped"]
    if warm:
        L.append("## First step: cold (empty disk cache) vs warm (populated disk cache), fresh process\n")
        L.append("Both are a fresh worker process (empty in-memory executable cache) running setup and then "
                 "one timed step, synchronised. Cold: TORCHTPU_CACHE_DIR is an empty directory. Warm: a "
                 "second process, started right after the cold one's first step, whose TORCHTPU_CACHE_DIR is "
                 "the directory the cold process filled during its setup and first step (entries / size "
                 "below). The compiles, disk hits and misses are torchtpu.metrics() deltas over the first "
                 "step alone (setup has its own, in bench.json). What warm still pays is PyTorch's own "
                 "first-use cost (for tpu-compile: Dynamo tracing, and AOTAutograd where its trace-tier "
                 "lookup misses: warm trace hits / misses) plus loading the executables from disk.\n")
        L.append("| workload | backend | cold first step | warm first step | cold / warm | cold compiles "
                 "(compile s) | warm compiles | warm disk hits | warm disk misses | warm graph compiles | "
                 "warm trace hits / misses | disk cache at warm start | warm setup |")
        L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in warm:
            fm = r.get("first_step_metrics") or {}
            w = r.get("first_step_warm") or {}
            wm = w.get("metrics") or {}
            if r.get("first_step_s") is None:
                L.append(f"| {r['workload']} | {r['backend']} | FAILED | not run | — | — | — | — | — | — | — | — | "
                         "cold worker failed before its first step finished: see Failures |")
                continue
            if w.get("status") == "failed":
                err = (w.get("error") or "").replace("|", "\\|")[:200]
                L.append(f"| {r['workload']} | {r['backend']} | {_secs(r.get('first_step_s'))} | FAILED | — | "
                         f"{fm.get('compiles', '—')} | — | — | — | — | — | — | {err} |")
                continue
            ratio = r.get("first_step_cold_over_warm")
            cs = fm.get("compile_seconds")
            cache = (f"{w['cache_entries']} entries, {_fmt(w['cache_bytes'] / 1024)} KB"
                     if "cache_entries" in w else "—")
            L.append(f"| {r['workload']} | {r['backend']} | {_secs(r.get('first_step_s'))} | "
                     f"{_secs(r.get('first_step_warm_s'))} | {'—' if ratio is None else f'{ratio:.1f}x'} | "
                     f"{fm.get('compiles', '—')}{'' if cs is None else f' ({cs:.2f} s)'} | "
                     f"{wm.get('compiles', '—')} | {wm.get('disk_cache_hits', '—')} | "
                     f"{wm.get('disk_cache_misses', '—')} | {wm.get('graph_compiles', '—')} | "
                     f"{wm.get('trace_cache_hits', '—')} / {wm.get('trace_cache_misses', '—')} | {cache} | "
                     f"{_secs(w.get('setup_s'))} |")
        L.append("")
    failed = [r for r in rows if r["status"] == "failed"]
    L.append("## Failures\n")
    if not failed:
        L.append("None.\n")
    for r in failed:
        ops = ", ".join(r.get("missing_ops") or []) or "—"
        L.append(f"- **{r['workload']} / {r['backend']}**: {r.get('error')} (missing aten ops: {ops})")
    L.append("")
    L.append("## Method and assumptions\n")
    L.append("- Timed repeats are interleaved tpu, cpu, inductor, tpu, cpu, inductor … across three "
             "worker processes; only one computes at a time. Each timed step ends with "
             "`torch.tpu.synchronize()` on tpu (CPU eager and Inductor are synchronous).")
    L.append(f"- Warm-up: {meta['plan']['warmup']} untimed step(s) after the first step; repeats per workload: "
             f"{meta['plan']['repeats']}.")
    if meta["plan"].get("inductor_cache"):
        ind = ("Inductor's compile with TORCHINDUCTOR_CACHE_DIR=" + meta["plan"]["inductor_cache"] +
               ", kept between --quick runs: cold on the first --quick run on a machine, warm (FX-graph and "
               "kernel caches hit) after it; each row's `inductor_cache` in JSON says which")
    else:
        ind = "Inductor's compile (TORCHINDUCTOR_CACHE_DIR in a new empty directory: fully cold)"
    L.append("- First step: fresh process per (workload, backend); includes torchtpu's compiles "
             "(in-memory executable cache and TORCHTPU_CACHE_DIR both empty at start) and " + ind +
             ". Model/data construction is timed separately (setup_s in JSON). The warm first step "
             "of tpu and tpu-compile (its own table above; `first_step_warm_s`, `first_step_warm` in JSON) "
             "is a second fresh process on the disk cache the cold one filled.")
    L.append("- Peak memory: 'RSS +X MB' = VmHWM − VmRSS before the model was built, with VmHWM reset "
             "(/proc/self/clear_refs) after warm-up, so it is the steady-state peak of the timed steps "
             "(the first-step peak, compile included, is `rss_peak_first_delta_bytes` in JSON). "
             "tpu 'live X MB' = high-water mark of torchtpu.metrics()['live_bytes'] (bytes of live "
             "PJRT buffers), sampled after every aten op during one extra untimed step (TorchDispatchMode), "
             "and after every step. torchtpu has no peak gauge of its own. With the XLA CPU plugin the "
             "device buffers live in host memory, so the tpu RSS figure includes them too.")
    L.append("- Matmul peak: " + "; ".join(peak["assumptions"]) +
             f" → peak = {peak['cores']} × {peak['mhz'] / 1e3:.3f} GHz × {peak['flops_per_cycle']} = "
             f"{peak['peak_gflops']:.1f} GFLOP/s.")
    L.append("- Inductor: `torch.compile(fn)` with default options; for training the model (+loss) is "
             "compiled and the optimizer step is eager. Inductor's dispatch row measures a fused kernel, "
             "not per-op dispatch.")
    if meta["mode"] == "quick":
        L.append("- Quick mode: fewer repeats and warm-up; GPT workloads shrunk (seq 128, batch 4, vocab 8192); "
                 "other workloads at full size.")
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def write_plot(path, rows):
    names = []
    for r in rows:
        if r["workload"] not in names:
            names.append(r["workload"])
    series = {b: [] for b in ("tpu", "inductor")}
    labels = {b: [] for b in series}
    for n in names:
        for b in series:
            r = next((x for x in rows if x["workload"] == n and x["backend"] == b), None)
            v = r.get("speedup_vs_cpu_eager") if r else None
            series[b].append(v)
            labels[b].append(f"{v:.2f}x" if v else ("not run" if r is None else
                                                    "skipped" if r["status"] == "skipped" else "failed"))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _write_png_fallback(path, names, series)
        return "fallback (matplotlib not importable)"
    fig, ax = plt.subplots(figsize=(9, 4.8))
    w = 0.38
    colors = {"tpu": "#d95f02", "inductor": "#1b9e77"}
    vals_all = [v for b in series for v in series[b] if v]
    lo = min(vals_all + [1.0]) / 2
    hi = max(vals_all + [1.0]) * 2
    for i, b in enumerate(series):
        xs = [j + (i - 0.5) * w for j in range(len(names))]
        # bars grow from 1x: up = faster than PyTorch eager CPU, down = slower
        ax.bar(xs, [(v - 1.0) if v else 0 for v in series[b]], w, bottom=1.0,
               label=BACKEND_LABEL[b], color=colors[b])
        for x, v, lab in zip(xs, series[b], labels[b]):
            y = v * (1.08 if v >= 1 else 1 / 1.08) if v else 1.0
            ax.text(x, y, lab, ha="center", va="bottom" if (not v or v >= 1) else "top", fontsize=8)
    ax.axhline(1.0, color="black", lw=1, ls="--", label="PyTorch eager CPU = 1x")
    ax.set_yscale("log")
    ax.set_ylim(lo, hi)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=15)
    ax.set_ylabel("speedup vs PyTorch eager CPU (log)")
    ax.set_title("CPU-eager median / backend median, same interleaved run")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return "matplotlib"


def _write_png_fallback(path, names, series):
    """A plain bar chart without text (log2 scale around 1x), written with zlib only."""
    import struct
    import zlib
    import math
    W, H = 60 * max(1, len(names)) + 20, 300
    px = [[(255, 255, 255)] * W for _ in range(H)]
    mid = H // 2
    scale = (H // 2 - 10) / 6.0          # ±6 doublings
    for x in range(W):
        px[mid][x] = (0, 0, 0)
    colors = {"tpu": (217, 95, 2), "inductor": (27, 158, 119)}
    for j in range(len(names)):
        for i, b in enumerate(series):
            v = series[b][j]
            if not v:
                continue
            h = int(max(-6, min(6, math.log2(v))) * scale)
            x0 = 20 + j * 60 + i * 22
            for y in range(min(mid, mid - h), max(mid, mid - h) + 1):
                for x in range(x0, x0 + 18):
                    px[y][x] = colors[b]
    raw = b"".join(b"\x00" + bytes(c for p in row for c in p) for row in px)

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)

    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


# ---------------------------------------------------------------- main

def resolve_plan(args, log_name):
    """The run plan both drivers (this one and peers.py) take from their common options:
    (mode, plan, workload configs, workload names, log directory)."""
    import workloads
    mode = "quick" if args.quick else "full"
    plan = json.loads(json.dumps(PLAN[mode]))
    if args.repeats:
        plan["repeats"] = {k: args.repeats for k in plan["repeats"]}
    cfgs = workloads.QUICK if args.quick else workloads.FULL
    names = [w for w in args.workloads.split(",") if w]
    for w in names:
        if w not in cfgs:
            sys.exit(f"unknown workload {w!r}; known: {', '.join(cfgs)}")
    os.makedirs(args.out, exist_ok=True)
    log_dir = os.path.join(args.out, log_name)
    os.makedirs(log_dir, exist_ok=True)
    return mode, plan, cfgs, names, log_dir


def omp_wait_policy(requested, load0, peak, extra_env):
    """OMP_WAIT_POLICY for every worker (both drivers): auto = PASSIVE when the 1-min load
    average exceeds the CPU count at start. Sets it in extra_env; returns (policy, warning)."""
    policy, warning = requested, None
    if policy == "auto":
        policy = "passive" if load0[0] > peak["cores"] else "default"
        if policy == "passive":
            warning = (f"the machine was busy at start (load {load0[0]:.1f} on {peak['cores']} CPUs): "
                       "all timings are inflated and noisy; OMP_WAIT_POLICY=PASSIVE was set for every "
                       "worker, because PyTorch's spinning OpenMP threads (CPU eager, Inductor) slow down "
                       "several-fold under oversubscription. Re-run on an idle machine for clean numbers.")
    if policy == "passive":
        extra_env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif "OMP_WAIT_POLICY" in os.environ:
        policy = f"inherited {os.environ['OMP_WAIT_POLICY']}"
    return policy, warning


def log(msg):
    print(msg, flush=True)


def main():
    import workloads
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller GPT (bench-quick)")
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    ap.add_argument("--workloads", default=",".join(workloads.WORKLOADS),
                    help="comma-separated subset of: " + ",".join(workloads.WORKLOADS))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--repeats", type=int, default=None, help="override the repeats of every workload")
    ap.add_argument("--inductor-dispatch", action="store_true",
                    help="also run the dispatch chain under Inductor (a 1,000-op graph: minutes of compile)")
    ap.add_argument("--no-warm-first", action="store_true",
                    help="skip the warm first step (a second fresh tpu / tpu-compile process on the "
                         "disk compile cache the cold one filled)")
    ap.add_argument("--omp-wait-policy", choices=["auto", "default", "passive"], default="auto",
                    help="OMP_WAIT_POLICY for every worker. auto: PASSIVE when the 1-min load average "
                         "exceeds the CPU count at start (spinning OpenMP threads collapse under "
                         "oversubscription), else PyTorch's default")
    args = ap.parse_args()

    mode, plan, cfgs, names, log_dir = resolve_plan(args, "bench-logs")
    backends = [b for b in args.backends.split(",") if b]

    t0 = time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    peak = cpu_peak()
    load0 = os.getloadavg()
    extra_env, load_warning = {}, None
    policy, load_warning = omp_wait_policy(args.omp_wait_policy, load0, peak, extra_env)
    if load_warning:
        log("warning: " + load_warning)
    log(f"bench ({mode}): {', '.join(names)} on {', '.join(backends)}; "
        f"CPU peak {peak['peak_gflops']:.1f} GFLOP/s")
    rows = []
    for w in names:
        log(f"{w}: {workloads.describe(w, cfgs[w])}")
        try:
            skip = {}
            if w == "dispatch" and not args.inductor_dispatch:
                skip["inductor"] = ("n/a: Inductor fuses the whole chain into one kernel, so there is no "
                                    "per-op dispatch to measure (and compiling the 1,000-op graph takes minutes); "
                                    "--inductor-dispatch runs it anyway")
            res = run_workload(w, cfgs[w], backends, plan, log_dir, log, skip, extra_env,
                               warm_first=not args.no_warm_first)
        except Exception as e:  # noqa: BLE001 - the suite goes on
            res = [{"workload": w, "backend": b, "status": "failed", "error": f"driver: {type(e).__name__}: {e}",
                    "missing_ops": [], "times_s": [], "notes": [], "stats_s": None} for b in backends]
            log(f"  driver error: {e}")
        for r in res:
            r["cfg"] = cfgs[w]
            if r.get("figure_median") is not None:
                sp = r.get("speedup_vs_cpu_eager")
                log(f"  {r['backend']:9s} {_fmt(r['figure_median'])} {r['unit']}"
                    + (f"  ({sp:.2f}x vs cpu eager)" if sp else ""))
        rows += res
    enrich(rows, peak)
    plugin = None
    try:
        plugin = subprocess.run([sys.executable, "-c", "import torchtpu; print(torchtpu.plugin_path)"],
                                capture_output=True, text=True, timeout=120, cwd=ROOT).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    meta = {"mode": mode, "started": started, "loadavg_start": load0, "loadavg_end": os.getloadavg(),
            "omp_wait_policy": policy if policy != "default" else "default (unset)", "load_warning": load_warning, "wall_s": time.perf_counter() - t0, "plan": plan,
            "machine": machine_info(), "cpu_peak": peak, "plugin": plugin,
            "workloads": {w: workloads.describe(w, cfgs[w]) for w in names}, "backends": backends}
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1, default=str)
    write_markdown(os.path.join(args.out, "bench.md"), meta, rows, peak)
    how = write_plot(os.path.join(args.out, "bench.png"), rows)
    log(f"wrote {os.path.relpath(args.out, ROOT)}/bench.md, bench.json, bench.png ({how}) "
        f"in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
