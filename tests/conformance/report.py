"""Writes reports/conformance.md and reports/conformance.json from harness results.

``results``: {op key: {"name", "variant", "random", "cells": {"float32/fwd": cell, ...}}}
in op_db order.  No torch / torchtpu import here."""
from __future__ import annotations

import collections
import json
import os
import re

COLUMN_TITLES = {
    "float32/fwd": "forward float32",
    "bfloat16/fwd": "forward bfloat16",
    "float16/fwd": "forward float16",
    "int64/fwd": "forward int64",
    "int32/fwd": "forward int32",
    "bool/fwd": "forward bool",
    "float32/bwd": "backward float32",
    "complex64/fwd": "forward complex64",
    "complex64/bwd": "backward complex64",
}
SHORT = {"float32/fwd": "f32", "bfloat16/fwd": "bf16", "float16/fwd": "f16", "int64/fwd": "i64",
         "int32/fwd": "i32", "bool/fwd": "bool", "float32/bwd": "f32 bwd", "complex64/fwd": "c64",
         "complex64/bwd": "c64 bwd"}
STATUS_MARK = {"pass": "pass", "fail": "**FAIL**", "unsupported": "unsup",
               "skipped": "skip", "timeout": "**TIMEOUT**", "crash": "**CRASH**"}
# Statuses that count as "runs on CPU" (the pass-rate denominator): all but skipped.
COUNTED = ("pass", "fail", "unsupported", "timeout", "crash")


def summarize(results: dict, columns: list[str]) -> dict:
    cols = {}
    for col in columns:
        c = collections.Counter()
        for entry in results.values():
            cell = entry["cells"].get(col)
            if cell is not None:
                c[cell["status"]] += 1
        denom = sum(c[s] for s in COUNTED)
        row = {"runs_on_cpu": denom}
        for s in COUNTED + ("skipped",):
            row[s] = c[s]
        for s in COUNTED:
            row[s + "_pct"] = round(100.0 * c[s] / denom, 1) if denom else 0.0
        # fail_total: wrong values + exceptions + timeouts + crashes
        row["fail_total"] = c["fail"] + c["timeout"] + c["crash"]
        row["fail_total_pct"] = round(100.0 * row["fail_total"] / denom, 1) if denom else 0.0
        cols[col] = row
    run_on_cpu = sum(1 for e in results.values()
                     if any(cell["status"] != "skipped" for cell in e["cells"].values()))
    all_pass = sum(1 for e in results.values()
                   if any(cell["status"] != "skipped" for cell in e["cells"].values())
                   and all(cell["status"] in ("pass", "skipped") for cell in e["cells"].values()))
    return {"opinfos": len(results), "opinfos_run_on_cpu": run_on_cpu,
            "opinfos_all_pass": all_pass, "columns": cols}


def top_unsupported(results: dict, n=None) -> list[dict]:
    cells = collections.Counter()
    ops = collections.defaultdict(set)
    for key, entry in results.items():
        for col, cell in entry["cells"].items():
            for ov in cell.get("unsupported_overloads", []):
                cells[ov] += 1
                ops[ov].add(key)
    rows = [{"overload": ov, "cells": cnt, "opinfos": len(ops[ov]),
             "example_opinfos": sorted(ops[ov])[:6]} for ov, cnt in cells.most_common()]
    rows.sort(key=lambda r: (-r["cells"], -r["opinfos"], r["overload"]))
    return rows[:n] if n else rows


_OVERLOAD_RE = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")


def top_overloads(results: dict, n=None) -> list[dict]:
    """aten overloads that block cells: missing lowerings (unsupported) plus those named
    by the exception of a failing cell ("tpu: aten::gather.out: ...")."""
    unsup = collections.Counter()
    fail = collections.Counter()
    ops = collections.defaultdict(set)
    for key, entry in results.items():
        for col, cell in entry["cells"].items():
            if cell["status"] not in ("unsupported", "fail"):
                continue
            for ov in cell.get("unsupported_overloads", []):
                unsup[ov] += 1
                ops[ov].add(key)
            if cell["status"] == "fail":
                for ov in dict.fromkeys(_OVERLOAD_RE.findall(cell.get("reason", ""))):
                    fail[ov] += 1
                    ops[ov].add(key)
    rows = [{"overload": ov, "cells": unsup[ov] + fail[ov], "unsupported_cells": unsup[ov],
             "failing_cells": fail[ov], "opinfos": len(ops[ov]),
             "example_opinfos": sorted(ops[ov])[:6]} for ov in set(unsup) | set(fail)]
    rows.sort(key=lambda r: (-r["cells"], -r["opinfos"], r["overload"]))
    return rows[:n] if n else rows


def top_failures(results: dict, n=25) -> list[dict]:
    c = collections.Counter()
    ops = collections.defaultdict(set)
    for key, entry in results.items():
        for col, cell in entry["cells"].items():
            if cell["status"] in ("fail", "timeout", "crash"):
                r = cell["reason"]
                if r.startswith("wrong values"):
                    r = "wrong values"
                elif cell["status"] == "timeout":
                    r = "timeout"
                elif cell["status"] == "crash":
                    r = r.split("; log tail")[0]
                r = r[:140]
                c[r] += 1
                ops[r].add(key)
    return [{"reason": r, "cells": cnt, "example_opinfos": sorted(ops[r])[:6]}
            for r, cnt in c.most_common(n)]


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ").replace("`", "'")


def write_reports(results: dict, meta: dict, report_dir: str, columns: list[str]) -> dict:
    os.makedirs(report_dir, exist_ok=True)
    summary = summarize(results, columns)
    unsup = top_unsupported(results)
    blocking = top_overloads(results)
    fails = top_failures(results)
    ops_list = [dict(v, key=k) for k, v in results.items()]
    data = {"meta": meta, "summary": summary, "top_unsupported_overloads": unsup,
            "top_blocking_overloads": blocking,
            "top_failure_reasons": fails, "ops": ops_list}
    with open(os.path.join(report_dir, "conformance.json"), "w") as f:
        json.dump(data, f, indent=1, default=str)

    L = []
    L.append("# torchtpu OpInfo conformance\n")
    L.append(f"PyTorch {meta.get('torch')} `op_db` ({summary['opinfos']} OpInfos selected), "
             f"each run on CPU and on `tpu` (plugin `{os.path.basename(meta.get('plugin', '?'))}`), "
             f"eager mode `{meta.get('eager_mode')}`, TORCHTPU_CPU_FALLBACK unset.  "
             f"Generated {meta.get('date')} in {meta.get('duration_s', 0):.0f} s "
             f"(`{meta.get('command')}`).\n")
    L.append(f"- samples per OpInfo x dtype x mode: first **{meta.get('max_samples')}** "
             f"(`op.sample_inputs(\"cpu\", dtype, requires_grad=...)`)")
    L.append(f"- time budget per OpInfo x dtype x mode: {meta.get('timeout')} s of CPU time "
             f"(timer signal; a worker hung in native code is killed after "
             f"{meta.get('hang_limit')} s); mode: {meta.get('mode')}")
    L.append("- tolerances: `tests/tpu_testing.py` `TOL` by output dtype "
             "(float32 1e-5, bfloat16 1e-2, float16 1e-3, integers/bool exact); OpInfo-specific looser "
             f"tolerances: {meta.get('tol_overrides') or 'none'}")
    L.append("- backward: `torch.autograd.grad` of the float outputs with a fixed random "
             "cotangent made on CPU; gradients of every float32 input that requires grad")
    L.append("- random / uninitialised outputs (rand, normal, bernoulli, dropout, multinomial, "
             "empty, ... or `has_nondeterministic_output`): shape/dtype only")
    L.append("- forward, (values, indices) ops: indices that pick another of tied values are "
             "accepted (values equal, input.gather(dim, indices) == values); float32/bfloat16/float16: "
             "a sample is accepted when tpu is no farther from the float64 result than CPU's "
             "result (counts per cell in conformance.json)")
    L.append("- a sample on which CPU itself raises is skipped, not a failure; "
             "percentages are of the OpInfos that run on CPU for that dtype/mode\n")
    L.append("## Summary\n")
    L.append(f"OpInfos: {summary['opinfos']}; that run on CPU (any column): "
             f"**{summary['opinfos_run_on_cpu']}**; passing every column they run: "
             f"{summary['opinfos_all_pass']}.\n")
    L.append("| column | run on CPU | pass | fail | unsupported | timeout | crash | skipped |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for col in columns:
        r = summary["columns"][col]
        L.append(f"| {COLUMN_TITLES.get(col, col)} | {r['runs_on_cpu']} | "
                 f"{r['pass']} ({r['pass_pct']}%) | {r['fail']} ({r['fail_pct']}%) | "
                 f"{r['unsupported']} ({r['unsupported_pct']}%) | {r['timeout']} | "
                 f"{r['crash']} | {r['skipped']} |")
    L.append("")
    L.append("## Top 20 aten overloads blocking cells (missing lowering or named by a failure)\n")
    L.append("| aten overload | cells | unsupported | failing | OpInfos | e.g. |")
    L.append("|---|---:|---:|---:|---:|---|")
    for r in blocking[:20]:
        L.append(f"| `{r['overload']}` | {r['cells']} | {r['unsupported_cells']} | "
                 f"{r['failing_cells']} | {r['opinfos']} | {', '.join(r['example_opinfos'][:4])} |")
    L.append("")
    L.append("## Missing lowerings (NotImplementedError), by OpInfo cells blocked\n")
    L.append("| aten overload | cells | OpInfos | e.g. |")
    L.append("|---|---:|---:|---|")
    for r in unsup[:40]:
        L.append(f"| `{r['overload']}` | {r['cells']} | {r['opinfos']} | "
                 f"{', '.join(r['example_opinfos'][:4])} |")
    if len(unsup) > 40:
        L.append(f"\n({len(unsup) - 40} more in conformance.json)")
    L.append("")
    L.append("## Most common failure reasons\n")
    L.append("| reason | cells | e.g. |")
    L.append("|---|---:|---|")
    for r in fails:
        L.append(f"| {_md_escape(r['reason'])} | {r['cells']} | "
                 f"{', '.join(r['example_opinfos'][:4])} |")
    L.append("")
    L.append("## Per OpInfo\n")
    L.append("Status per column (pass / **FAIL** / unsup / skip / **TIMEOUT** / **CRASH**); "
             "reasons for non-passing cells (skip reasons are in conformance.json).\n")
    L.append("| OpInfo | " + " | ".join(SHORT.get(c, c) for c in columns) + " | reasons |")
    L.append("|---|" + "---|" * len(columns) + "---|")
    for key, entry in results.items():
        marks, reasons = [], []
        for col in columns:
            cell = entry["cells"].get(col)
            if cell is None:
                marks.append("-")
                continue
            marks.append(STATUS_MARK.get(cell["status"], cell["status"]))
            if cell["status"] not in ("pass", "skipped"):
                r = cell["reason"]
                if "sample" in cell and cell["status"] != "unsupported":
                    r += f" [sample {cell['sample']}: {cell.get('sample_desc', '')}]"
                reasons.append(f"{SHORT.get(col, col)}: {r[:260]}")
        if entry.get("random"):
            reasons.append("shape/dtype only (" + entry["random"][:60] + ")")
        L.append(f"| {key} | " + " | ".join(marks) + " | " + _md_escape("; ".join(reasons)) + " |")
    L.append("")
    with open(os.path.join(report_dir, "conformance.md"), "w") as f:
        f.write("\n".join(L))
    return data
