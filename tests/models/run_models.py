#!/usr/bin/env python
"""torchtpu model suite: Hugging Face model families on "tpu" vs CPU -> REPORT/models.{md,json}.

    run_models.py [--families llama,bert,...] [--report DIR] [--jobs N] [--timeout S]
                  [--dtypes f32,bf16] [--checks fwd,bwd,train,gen,gen_static]
                  [--eager debug|strict|fused]

Each family runs in its own subprocess (one crash or hang costs one family); the child
streams one JSON line per check into a file, so a timeout keeps the checks done so far.
Models are built from configs (no downloads): see families.py, shrink.py, checks.py
(which states every tolerance and its reason).
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.pop("TORCHTPU_CPU_FALLBACK", None)  # a missing op must show, not fall back
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.dirname(_HERE)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

ALL_CHECKS = ("fwd", "bwd", "train", "gen", "gen_static")
# (column, dtype, attn, check): the report's columns, in order.
BF16_CHECKS = ("fwd", "bwd", "train", "gen")
SDPA_CHECKS = ("fwd", "bwd")


def plan(fam, dtypes, checks):
    """The (dtype, attn, check) cells of one family."""
    from models.checks import GENERATIVE
    cells = []
    for dtype in dtypes:
        for c in checks:
            if c.startswith("gen") and fam.task not in GENERATIVE:
                continue
            if dtype == "bf16" and c not in BF16_CHECKS:
                continue
            cells.append((dtype, "eager", c))
    if fam.sdpa and "f32" in dtypes:
        cells += [("f32", "sdpa", c) for c in SDPA_CHECKS if c in checks]
    return cells


def run_family(fam, dtypes, checks, emit, eager="debug"):
    """Runs every cell of one family in this process, calling emit(result dict).
    Debug eager mode by default: errors surface on the op's own line."""
    import torch
    import torchtpu
    from models import checks as ck

    torchtpu.set_eager_mode(eager)
    t0 = time.time()
    try:
        config = fam.config()
    except Exception as e:  # noqa: BLE001
        emit({"check": "build", "status": "error", **ck.describe_error(e)})
        return
    bases = {}
    for dtype, attn, c in plan(fam, dtypes, checks):
        if attn not in bases:
            try:
                base = ck.build_base(config, fam.task, attn)
                bases[attn] = (base, ck.make_inputs(fam.task, config, base))
            except Exception as e:  # noqa: BLE001
                bases[attn] = e
        if isinstance(bases[attn], Exception):
            err = ck.describe_error(bases[attn])
            msg = err["error"].lower()
            if attn == "sdpa" and ("sdpa" in msg or "scaled_dot_product_attention" in msg):
                emit(ck.result(c, dtype, attn, "skip", reason="sdpa not supported: " + err["error"]))
            else:  # building/initialising on CPU must work: a harness or model bug
                emit(ck.result(c, dtype, attn, "error", stage="build on CPU", **err))
            continue
        base, inp = bases[attn]
        fn = {"fwd": ck.check_forward, "bwd": ck.check_backward, "train": ck.check_train,
              "gen": ck.check_generate, "gen_static": ck.check_generate}[c]
        kw = {"static": True} if c == "gen_static" else {}
        emit(ck.run_check(fn, c, dtype, attn, base, fam.task, inp, dtype, attn, **kw))
    m = torchtpu.metrics()
    emit({"check": "_summary", "status": "info", "seconds": round(time.time() - t0, 1),
          "compiles": m.get("compiles"), "compile_seconds": round(m.get("compile_seconds", 0), 1),
          "torch": torch.__version__})


def _child(args):
    from models.families import BY_NAME
    fam = BY_NAME[args.child]
    with open(args.out, "a") as f:
        def emit(r):
            f.write(json.dumps(r) + "\n")
            f.flush()
        run_family(fam, args.dtypes.split(","), args.checks.split(","), emit, args.eager)


def run_one(name, args):
    """The family's results from a subprocess: a crash or timeout becomes a result."""
    fd, path = tempfile.mkstemp(prefix=f"models-{name}-", suffix=".jsonl")
    os.close(fd)
    cmd = [sys.executable, os.path.abspath(__file__), "--child", name, "--out", path,
           "--dtypes", args.dtypes, "--checks", args.checks, "--eager", args.eager]
    t0 = time.time()
    status, tail = None, ""
    try:
        p = subprocess.run(cmd, timeout=args.timeout, capture_output=True, text=True)
        if p.returncode != 0:
            status = f"crash (exit {p.returncode})"
            tail = (p.stderr or "")[-1500:]
    except subprocess.TimeoutExpired:
        status = f"timeout ({args.timeout:.0f} s)"
    with open(path) as f:
        results = [json.loads(line) for line in f if line.strip()]
    os.unlink(path)
    if status:
        results.append({"check": "_process", "status": "error", "error": status, "stderr": tail})
    return {"family": name, "seconds": round(time.time() - t0, 1), "results": results}


# ---- report ----

def _cell(r):
    if r is None:
        return "—"
    s = r["status"]
    if s == "pass":
        return "tie" if r.get("tie") else "ok"
    if s == "skip":
        return "skip"
    if s == "error":
        return "ERR"
    return "FAIL"


def _cause(r):
    if r["check"] == "_process":
        last = [ln for ln in (r.get("stderr") or "").splitlines() if ln.strip()][-1:]
        return r.get("error", "") + (f": {last[0][:300]}" if last else "")
    if r["status"] == "error":
        op = r.get("op")
        return (f"`{op}`: " if op else "") + r.get("error", "")[:240] + \
            (f" (at {r['where']})" if r.get("where") else "")
    if r["status"] == "fail":
        parts = []
        if r.get("metric") is not None:
            parts.append(f"worst {r.get('where', '?')}: {r['metric']:.3g} (tol {r.get('tol')})")
        if r.get("loss_err") is not None and r.get("loss_err") > r.get("loss_tol", 0):
            parts.append(f"loss err {r['loss_err']:.3g} (tol {r.get('loss_tol')})")
        if r.get("first_module"):
            parts.append(f"first diverging module {r['first_module']}")
        if r.get("n_bad"):
            parts.append(f"{r['n_bad']}/{r.get('n_params')} params over tol: {', '.join(r.get('bad') or [])}")
        if r.get("detail"):
            parts.append(r["detail"])
        return "; ".join(parts)
    if r["status"] == "skip":
        return r.get("reason", "")
    return ""


def columns(dtypes, checks):
    cols = []
    for dtype in dtypes:
        for c in checks:
            if dtype == "bf16" and c not in BF16_CHECKS:
                continue
            cols.append((dtype, "eager", c))
    if "f32" in dtypes:
        cols += [("f32", "sdpa", c) for c in SDPA_CHECKS if c in checks]
    return cols


def write_report(fams, dtypes, checks, report_dir, wall, eager="debug"):
    os.makedirs(report_dir, exist_ok=True)
    cols = columns(dtypes, checks)
    stats = {}
    for col in cols:
        n = sum(1 for f in fams if _find(f, col) and _find(f, col)["status"] != "skip")
        ok = sum(1 for f in fams if _find(f, col) and _find(f, col)["status"] == "pass")
        stats["/".join(col)] = {"pass": ok, "run": n}
    full_pass = [f["family"] for f in fams
                 if all((_find(f, c) is None or _find(f, c)["status"] in ("pass",)) for c in cols)
                 and not any(r["check"] == "_process" for r in f["results"])]
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "wall_seconds": round(wall, 1), "eager_mode": eager, "dtypes": dtypes, "checks": checks,
            "columns": ["/".join(c) for c in cols], "pass_rate": stats,
            "families_all_pass": full_pass, "families": fams}
    with open(os.path.join(report_dir, "models.json"), "w") as f:
        json.dump(data, f, indent=1)
    md = ["# torchtpu model suite (Hugging Face transformers on `tpu` vs CPU)", "",
          f"{data['date']}, {eager} eager mode, wall time {wall:.0f} s, {len(fams)} families, "
          f"{len(full_pass)} pass every check. Tolerances and their reasons: "
          "`tests/models/checks.py`. ok = pass, tie = generated tokens differ only after "
          "a near-tie in the CPU logits, FAIL = mismatch, ERR = raised on tpu, "
          "skip = not applicable or fails on CPU too (never counted as a pass).", "",
          "## Pass rate per check", "", "| check | pass / run |", "|---|---|"]
    for col in cols:
        s = stats["/".join(col)]
        md.append(f"| {col[0]} {col[1]} {col[2]} | {s['pass']} / {s['run']} |")
    md += ["", "## Families", "",
           "| family | " + " | ".join(f"{d} {a if a != 'eager' else ''} {c}".replace("  ", " ")
                                      for d, a, c in cols) + " | s |",
           "|---" * (len(cols) + 2) + "|"]
    for f in fams:
        md.append(f"| {f['family']} | " + " | ".join(_cell(_find(f, c)) for c in cols) +
                  f" | {f['seconds']:.0f} |")
    md += ["", "## Failures and first failing op", ""]
    for f in fams:
        bad = [r for r in f["results"] if r["status"] in ("fail", "error")]
        if not bad:
            continue
        first = next((r for r in bad if r.get("op")), None)
        md.append(f"### {f['family']}" + (f" — first failing op `{first['op']}`" if first else ""))
        md.append("")
        for r in bad:
            label = "process" if r["check"] == "_process" else \
                f"{r.get('dtype')} {r.get('attn')} {r['check']}"
            md.append(f"- {label}: {_cause(r)}")
        md.append("")
    notes = sorted({r["note"] for f in fams for r in f["results"] if r.get("note")})
    if notes:
        md += ["## Notes (not failures of the checked path)", ""]
        for n in notes:
            who = [f["family"] for f in fams if any(r.get("note") == n for r in f["results"])]
            md.append(f"- {n} — {len(who)} families ({', '.join(who)})")
        md.append("")
    skips = [(f["family"], r) for f in fams for r in f["results"] if r["status"] == "skip"]
    if skips:
        md += ["## Skipped cells", ""]
        md += [f"- {n} {r.get('dtype')} {r.get('attn')} {r['check']}: {r.get('reason', '')}"
               for n, r in skips]
    with open(os.path.join(report_dir, "models.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def _find(fam, col):
    dtype, attn, c = col
    for r in fam["results"]:
        if r.get("dtype") == dtype and r.get("attn") == attn and r["check"] == c:
            return r
    return None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--families", default="", help="comma-separated names (default: all)")
    p.add_argument("--report", default="reports")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per family")
    p.add_argument("--dtypes", default="f32,bf16")
    p.add_argument("--checks", default=",".join(ALL_CHECKS))
    p.add_argument("--eager", default="debug", choices=["debug", "strict", "fused"],
                   help="eager mode the tpu side runs in")
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args)
        return 0
    from models.families import FAMILIES
    names = [n for n in args.families.split(",") if n] or [f.name for f in FAMILIES]
    known = {f.name for f in FAMILIES}
    for n in names:
        if n not in known:
            p.error(f"unknown family {n!r}; known: {', '.join(sorted(known))}")
    t0 = time.time()
    fams = {}
    with cf.ThreadPoolExecutor(max(1, args.jobs)) as ex:
        futs = {ex.submit(run_one, n, args): n for n in names}
        for fut in cf.as_completed(futs):
            r = fut.result()
            fams[r["family"]] = r
            bad = sum(1 for x in r["results"] if x["status"] in ("fail", "error"))
            print(f"[{len(fams)}/{len(names)}] {r['family']}: {r['seconds']:.0f} s, "
                  f"{bad} failing cells", flush=True)
    ordered = [fams[n] for n in names]
    write_report(ordered, args.dtypes.split(","), args.checks.split(","), args.report,
                 time.time() - t0, args.eager)
    print(f"wrote {args.report}/models.md and models.json ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
