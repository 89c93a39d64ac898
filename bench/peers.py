"""`make bench-peers`: PyTorch/XLA as a peer on bench/workloads.py, in its own venv.

Runs under .venv-peers (torch 2.9.0 + torch-xla 2.9.0, requirements-peers.txt), never
under the project's .venv and never as part of `make test`. For every workload the
driver starts one fresh worker process (bench/worker.py, the same as `make bench`) per
mode, all on the CPU of this machine:

  "cpu"          PyTorch eager on the CPU, this venv's torch: the in-run reference;
  "xla"          PyTorch/XLA lazy tensors on torch_xla.device() with PJRT_DEVICE=CPU
                 (XLA's CPU PJRT client), torch_xla.sync() + xm.wait_device_ops() after
                 each step;
  "xla-compile"  torch.compile(backend="openxla") on the same device, compiling what
                 `make bench`'s tpu-compile compiles (the whole training step; the model
                 for forward and decode workloads), then the same sync.

and then does what bench/run.py does: a cold first step per mode (fresh process, no
persistent compile cache: PyTorch/XLA keeps none unless asked), warm-up, timed repeats
interleaved cpu, xla, xla-compile, cpu, ... (only one worker computes at any moment),
and writes reports/bench-peers.md and reports/bench-peers.json with each mode's
speedup over this venv's CPU eager. If reports/bench.json from `make bench` exists, the
report puts torchtpu's ratios (tpu, tpu-compile; against that run's own CPU eager) next
to PyTorch/XLA's. A mode that fails on a workload gets a row saying so, with the error.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import run as bench  # noqa: E402  (the driver's worker handling, stats and formatting)

MODES = ["cpu", "xla", "xla-compile"]
MODE_LABEL = {"cpu": "PyTorch eager CPU (this venv)",
              "xla": "PyTorch/XLA lazy + torch_xla.sync()",
              "xla-compile": "torch.compile(backend=\"openxla\")"}


def check_env():
    """Fails early, with the fix, when this is not the peers venv."""
    missing = []
    for mod in ("torch", "torch_xla"):
        try:
            __import__(mod)
        except Exception as e:  # noqa: BLE001 - any import failure means: wrong venv
            missing.append(f"{mod} ({type(e).__name__}: {str(e).splitlines()[0][:200]})")
    if missing:
        sys.exit("bench/peers.py needs torch and torch-xla 2.9 (`make bench-peers` builds .venv-peers "
                 "from requirements-peers.txt); not importable here: " + "; ".join(missing))
    import torch
    import torch_xla
    return {"torch": torch.__version__, "torch_xla": getattr(torch_xla, "__version__", "?")}


# Lines of a worker's log that change what its numbers mean, and what the report says then.
LOG_SIGNS = [
    ("recompile_limit", "Dynamo hit its recompile limit (torch._dynamo.config.recompile_limit): the calls past "
                        "it run uncompiled, as lazy XLA ops"),
]


def log_notes(log_dir, workload, mode):
    try:
        with open(os.path.join(log_dir, f"{workload}-{mode}.log"), errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    return [note for needle, note in LOG_SIGNS if needle in text]


def load_ours(path):
    """Rows of reports/bench.json by (workload, backend), with its meta; None if absent."""
    if not path or not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            d = json.load(f)
        return {"meta": d.get("meta", {}), "path": path,
                "rows": {(r["workload"], r["backend"]): r for r in d.get("rows", [])}}
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"{type(e).__name__}: {e}", "path": path, "rows": {}, "meta": {}}


def _ratio(r):
    if not r:
        return "not run"
    if r.get("status") == "skipped":
        return "skipped"
    sp = r.get("speedup_vs_cpu_eager")
    if sp is not None:
        return f"{sp:.2f}x"
    return "failed" if r.get("status") == "failed" else "—"


def _first(r):
    return bench._secs(r.get("first_step_s")) if r and r.get("first_step_s") is not None else "—"


def write_markdown(path, meta, rows, ours):
    _fmt, _secs = bench._fmt, bench._secs
    L = [f"# PyTorch/XLA as a peer ({meta['mode']})\n"]
    peak = meta["cpu_peak"]
    L.append(f"Run {meta['started']} on {peak['model']} ({peak['cores']} CPUs) in `.venv-peers`: torch "
             f"{meta['versions']['torch']}, torch-xla {meta['versions']['torch_xla']} "
             f"({meta['machine']['torch_threads']} torch threads), Python {meta['machine']['python']}, "
             f"PJRT_DEVICE=CPU. Total wall time {meta['wall_s']:.0f} s. Load average (1 min) at start "
             f"{meta['loadavg_start'][0]:.1f}, at end {meta['loadavg_end'][0]:.1f} on {peak['cores']} CPUs; "
             f"OMP_WAIT_POLICY for all workers: {meta['omp_wait_policy']}.\n")
    if meta.get("load_warning"):
        L.append(f"**Warning:** {meta['load_warning']}\n")
    L.append("Speedup = this venv's PyTorch-eager-CPU median step time / the mode's median step time, "
             "from the same interleaved run (> 1: faster than CPU eager). First step = cold: a fresh "
             "process per (workload, mode), timed from before the first step to after "
             "`xm.wait_device_ops()`, including tracing and every XLA compile.\n")
    L.append("| workload | mode | median | spread (IQR) | speedup vs CPU eager | first step | "
             "first-step XLA compiles (s) | notes |")
    L.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        unit = r.get("unit", "")
        if r["status"] != "ok" and not r.get("stats_s"):
            err = (r.get("error") or "").replace("|", "\\|").replace("\n", " ")
            L.append(f"| {r['workload']} | {r['backend']} | FAILED | — | — | {_first(r)} | — | {err[:400]} |")
            continue
        iqr = r.get("figure_iqr")
        sp = r.get("speedup_vs_cpu_eager")
        fm = r.get("first_step_metrics") or {}
        comp = (f"{fm.get('xla_compiles', 0)} ({fm.get('xla_compile_seconds', 0):.2f} s)"
                if r["backend"] != "cpu" and fm else "—")
        notes = list(r.get("notes", []))
        if unit != "ms/step" and r.get("stats_s"):
            notes.insert(0, f"step {_secs(r['stats_s']['median'])}")
        tm, n = r.get("timed_metrics") or {}, r.get("timed_steps") or 0
        if r["backend"] != "cpu" and n:
            notes.append(f"{tm.get('xla_compiles', 0) / n:.2f} XLA compiles/step, "
                         f"{tm.get('xla_executions', 0) / n:.1f} executions/step")
        if r.get("xla_fallback_ops"):
            notes.append("CPU fallback ops: " + ", ".join(r["xla_fallback_ops"][:8]))
        if r["status"] != "ok":
            notes.append("ERROR " + (r.get("error") or ""))
        note = "; ".join(notes).replace("|", "\\|").replace("\n", " ")
        L.append(f"| {r['workload']} | {r['backend']} | {_fmt(r.get('figure_median'))} {unit} | "
                 f"{_fmt(iqr[0]) + '–' + _fmt(iqr[1]) if iqr else '—'} | "
                 f"{'—' if sp is None else f'{sp:.2f}x'} | {_first(r)} | {comp} | {note} |")
    L.append("")

    L.append("## Side by side with `make bench` (torchtpu)\n")
    if ours is None:
        L.append("No reports/bench.json: run `make bench` (or `make bench-quick`) first for this table.\n")
    elif ours.get("error"):
        L.append(f"reports/bench.json could not be read: {ours['error']}\n")
    else:
        om = ours["meta"]
        L.append(f"torchtpu columns: `{os.path.relpath(ours['path'], ROOT)}` ({om.get('mode', '?')} run of "
                 f"{om.get('started', '?')}, torch {om.get('machine', {}).get('torch', '?')}). Every ratio is "
                 "against the CPU eager of its own run (its own venv and torch version, its own moment of "
                 "machine load), so the columns compare ratios, not absolute times; the absolute medians are "
                 "in the two JSON files. A workload whose configuration differs between the two runs "
                 "(e.g. quick vs full) says so.\n")
        L.append("| workload | torchtpu eager (tpu) | torchtpu torch.compile (tpu-compile) | PyTorch/XLA lazy | "
                 "torch.compile openxla | first step: tpu / tpu-compile (cold; warm disk cache) | "
                 "first step: XLA lazy / openxla (cold) | note |")
        L.append("|---|---|---|---|---|---|---|---|")
        names = []
        for r in rows:
            if r["workload"] not in names:
                names.append(r["workload"])
        for w in names:
            mine = {b: ours["rows"].get((w, b)) for b in ("tpu", "tpu-compile", "cpu")}
            peer = {r["backend"]: r for r in rows if r["workload"] == w}
            note = ""
            ref = mine.get("cpu") or mine.get("tpu") or mine.get("tpu-compile")
            pcfg = (peer.get("cpu") or next(iter(peer.values()), {})).get("cfg")
            if ref is None:
                note = "not in bench.json"
            elif ref.get("cfg") != pcfg:
                note = f"different configuration: bench.json {ref.get('cfg')} vs here {pcfg}"

            def first_tpu(r):
                if not r or r.get("first_step_s") is None:
                    return "—"
                warm = r.get("first_step_warm_s")
                failed = (r.get("first_step_warm") or {}).get("status") == "failed"
                return _secs(r["first_step_s"]) + (f"; {_secs(warm)}" if warm is not None else
                                                   "; warm failed" if failed else "")
            L.append(f"| {w} | {_ratio(mine['tpu'])} | {_ratio(mine['tpu-compile'])} | {_ratio(peer.get('xla'))} | "
                     f"{_ratio(peer.get('xla-compile'))} | {first_tpu(mine['tpu'])} / {first_tpu(mine['tpu-compile'])} | "
                     f"{_first(peer.get('xla'))} / {_first(peer.get('xla-compile'))} | {note} |")
        L.append("")

    L.append("## Workloads\n")
    for name, d in meta["workloads"].items():
        L.append(f"- **{name}**: {d}")
    L.append("")
    failed = [r for r in rows if r["status"] == "failed"]
    L.append("## Failures\n")
    if not failed:
        L.append("None.\n")
    for r in failed:
        L.append(f"- **{r['workload']} / {r['backend']}**: {r.get('error')}")
    L.append("")
    L.append("## Method\n")
    L.append("- Same driver and worker processes as `make bench` (bench/run.py, bench/worker.py, "
             "bench/workloads.py), run by .venv-peers' Python. Timed repeats are interleaved cpu, xla, "
             "xla-compile, cpu, …; only one worker computes at a time.")
    L.append(f"- Warm-up: {meta['plan']['warmup']} untimed step(s) after the first step; repeats per workload: "
             f"{meta['plan']['repeats']}.")
    L.append("- xla (lazy): every op is traced into a lazy graph; the worker's torch_xla.sync() after the step "
             "compiles it (first time; cached by graph hash after that) and runs it, and "
             "xm.wait_device_ops() waits for the result. A whole step is one graph: for llama_decode that is "
             "the whole generation (prefill + every new token) unrolled, for dispatch the 1,000-op chain.")
    L.append("- xla-compile: `torch.compile(fn, backend=\"openxla\")` on the same functions as torchtpu's "
             "tpu-compile (training: the whole step, forward, loss, backward and optimizer, given to "
             "torch.compile; Dynamo decides where graphs break); the same sync after each step.")
    L.append("- XLA compile counts/time: torch_xla.debug.metrics `CompileTime` over the first step; "
             "'CPU fallback ops' = torch_xla.debug.metrics.executed_fallback_ops() at the end.")
    L.append("- torch 2.9.0 from PyPI is the CUDA 12.8 build: its libraries link CUDA runtime libraries "
             "at load time, so .venv-peers holds those nvidia-* wheels (see requirements-peers.txt). "
             "Nothing here uses a GPU; CPU eager here is that build's CPU kernels.")
    if meta["mode"] == "quick":
        L.append("- Quick mode: fewer repeats and warm-up; GPT workloads shrunk (seq 128, batch 4, vocab 8192) "
                 "— the same configurations as `make bench-quick`.")
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def main():
    import workloads
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller GPT (as make bench-quick)")
    ap.add_argument("--out", default=os.path.join(ROOT, "reports"))
    model_workloads = [w for w in workloads.WORKLOADS if w not in workloads.DECOMPOSITIONS]
    ap.add_argument("--workloads", default=",".join(model_workloads),
                    help="comma-separated subset of: " + ",".join(model_workloads))
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of: " + ",".join(MODES))
    ap.add_argument("--repeats", type=int, default=None, help="override the repeats of every workload")
    ap.add_argument("--ours", default=None,
                    help="torchtpu's bench.json for the side-by-side table (default: <out>/bench.json)")
    ap.add_argument("--omp-wait-policy", choices=["auto", "default", "passive"], default="auto",
                    help="as bench/run.py: PASSIVE when the 1-min load average exceeds the CPU count")
    args = ap.parse_args()

    os.environ.setdefault("PJRT_DEVICE", "CPU")   # the workers get CPU in any case
    versions = check_env()
    mode, plan, cfgs, names, log_dir = bench.resolve_plan(args, "bench-peers-logs")
    plan.pop("inductor_cache", None)
    modes = [m for m in args.modes.split(",") if m]
    for m in modes:
        if m not in MODES:
            sys.exit(f"unknown mode {m!r}; known: {', '.join(MODES)}")
    log = bench.log

    t0 = time.perf_counter()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    peak = bench.cpu_peak()
    load0 = os.getloadavg()
    extra_env = {"PJRT_DEVICE": "CPU"}
    policy, load_warning = bench.omp_wait_policy(args.omp_wait_policy, load0, peak, extra_env)
    if load_warning:
        log("warning: " + load_warning)
    log(f"bench-peers ({mode}): {', '.join(names)} on {', '.join(modes)}; torch {versions['torch']}, "
        f"torch-xla {versions['torch_xla']}, PJRT_DEVICE=CPU")
    rows = []
    for w in names:
        log(f"{w}: {workloads.describe(w, cfgs[w])}")
        try:
            res = bench.run_workload(w, cfgs[w], modes, plan, log_dir, log, {}, extra_env, warm_first=False)
        except Exception as e:  # noqa: BLE001 - the suite goes on
            res = [{"workload": w, "backend": m, "status": "failed", "error": f"driver: {type(e).__name__}: {e}",
                    "missing_ops": [], "times_s": [], "notes": [], "stats_s": None} for m in modes]
            log(f"  driver error: {e}")
        for r in res:
            r["cfg"] = cfgs[w]
            if r["backend"] != "cpu":
                r["notes"] = list(r.get("notes", [])) + log_notes(log_dir, w, r["backend"])
            if r.get("figure_median") is not None:
                sp = r.get("speedup_vs_cpu_eager")
                log(f"  {r['backend']:11s} {bench._fmt(r['figure_median'])} {r['unit']}"
                    + (f"  ({sp:.2f}x vs cpu eager)" if sp else ""))
        rows += res
    ours = load_ours(args.ours or os.path.join(args.out, "bench.json"))
    meta = {"mode": mode, "started": started, "loadavg_start": load0, "loadavg_end": os.getloadavg(),
            "omp_wait_policy": policy if policy != "default" else "default (unset)", "load_warning": load_warning,
            "wall_s": time.perf_counter() - t0, "plan": plan, "versions": versions,
            "machine": bench.machine_info(), "cpu_peak": peak, "pjrt_device": "CPU",
            "workloads": {w: workloads.describe(w, cfgs[w]) for w in names}, "modes": modes,
            "mode_labels": MODE_LABEL, "ours": None if ours is None else
            {"path": ours["path"], "error": ours.get("error"), "mode": ours["meta"].get("mode"),
             "started": ours["meta"].get("started")}}
    side = []
    if ours and not ours.get("error"):
        for w in names:
            peer = {r["backend"]: r for r in rows if r["workload"] == w}
            entry = {"workload": w}
            for b in ("tpu", "tpu-compile"):
                r = ours["rows"].get((w, b)) or {}
                entry[f"torchtpu_{b}_speedup"] = r.get("speedup_vs_cpu_eager")
                entry[f"torchtpu_{b}_first_step_s"] = r.get("first_step_s")
                entry[f"torchtpu_{b}_first_step_warm_s"] = r.get("first_step_warm_s")
                entry["same_cfg"] = r.get("cfg") == cfgs[w] if r else None
            for m in ("xla", "xla-compile"):
                r = peer.get(m) or {}
                entry[f"{m}_speedup"] = r.get("speedup_vs_cpu_eager")
                entry[f"{m}_first_step_s"] = r.get("first_step_s")
            side.append(entry)
    with open(os.path.join(args.out, "bench-peers.json"), "w") as f:
        json.dump({"meta": meta, "rows": rows, "side_by_side": side}, f, indent=1, default=str)
    write_markdown(os.path.join(args.out, "bench-peers.md"), meta, rows, ours)
    log(f"wrote {os.path.relpath(args.out, ROOT)}/bench-peers.md, bench-peers.json "
        f"in {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
