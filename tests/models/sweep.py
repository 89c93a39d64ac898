#!/usr/bin/env python
"""torchtpu model sweep: every transformers model type with a task head, shrunk, forward
on "tpu" vs CPU -> REPORT/models-sweep.{md,json}.

    sweep.py [--types llama,bert,...] [--limit N] [--report DIR] [--jobs N] [--timeout S]

For each model type the first head found in the auto mappings (HEADS, in order) is
built from the type's default config shrunk by tests/models/shrink.py; a dummy input
is built for the head's main input (input_ids / pixel_values / input_values /
input_features, plus decoder_input_ids for encoder-decoder models). The forward pass
runs on CPU and on tpu (float32, eval mode, from the same weights) and every floating
tensor of the output is compared: max|tpu - cpu| / max|cpu| <= 1e-4 (the float32
forward tolerance of checks.py, same reasoning).

Isolation: types run in worker subprocesses, CHUNK types per worker; a worker that
dies or stays on one type longer than --timeout is killed, that type recorded as
crash/timeout, and the rest of its chunk re-run in a fresh worker. (A subprocess per
type would spend most of the sweep importing torch and transformers.)
"""
from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import time

os.environ.pop("TORCHTPU_CPU_FALLBACK", None)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.dirname(_HERE)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

TOL = 1e-4
CHUNK = 12
START_RETRIES = 5
START_RETRY_DELAY_S = 20.0
# (name, geometry): the full shrink, then one keeping input sizes/positions/stage lists.
SHRINK_LEVELS = [("full", True), ("keep_geometry", False)]
# (head, mapping name in transformers.models.auto.modeling_auto): the first that has
# the model type is swept.
HEADS = [
    ("causal_lm", "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    ("masked_lm", "MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
    ("seq2seq_lm", "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
    ("speech_seq2seq", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
    ("ctc", "MODEL_FOR_CTC_MAPPING_NAMES"),
    ("image_cls", "MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("audio_cls", "MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
    ("seq_cls", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
    ("token_cls", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
    ("qa", "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
    ("zero_shot_image", "MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
    ("image_text_to_text", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES"),
    ("backbone", "MODEL_FOR_BACKBONE_MAPPING_NAMES"),
]
# A type's outcome, in the order of the pipeline; "pass"/"mismatch"/"tpu_error" are
# tpu results, the others mean the architecture could not be run generically.
NOT_RUNNABLE = ("shrink", "build", "no_input", "cpu", "harness")


def select_heads(types=None):
    """{model_type: (head, class name)} over HEADS, in the mappings' order."""
    from transformers.models.auto import modeling_auto as ma
    out = {}
    for head, mapping in HEADS:
        for t, cls in getattr(ma, mapping).items():
            if isinstance(cls, (list, tuple)):
                cls = cls[0]
            if t not in out:
                out[t] = (head, cls)
    if types:
        out = {t: out[t] for t in types if t in out}
    return out


# ---- worker side ----

def _candidates(head, config, model, batch=2, seq=8):
    """Possible input dicts for the head, tried on CPU in order."""
    import torch
    from models import shrink
    name = getattr(model, "main_input_name", "input_ids")
    enc_dec = bool(getattr(config, "is_encoder_decoder", False))
    base = {}
    if enc_dec:
        base["decoder_input_ids"] = shrink.token_ids(config, (batch, 4), 2)
    cands = []
    if name == "input_ids" or head in ("zero_shot_image", "image_text_to_text"):
        ids = shrink.token_ids(config, (batch, seq), 1)
        c = dict(base, input_ids=ids, attention_mask=torch.ones_like(ids))
        if head in ("zero_shot_image", "image_text_to_text"):
            c["pixel_values"] = shrink.pixel_values(config, batch, 1)
        # no cache: hybrid linear-attention models cannot size a cache from one forward
        cands.append(dict(c, use_cache=False))
        cands.append(c)
        cands.append(dict(base, input_ids=ids, use_cache=False))
        cands.append(dict(base, input_ids=ids))
    elif name == "pixel_values":
        cands.append(dict(base, pixel_values=shrink.pixel_values(config, batch, 1)))
    elif name == "input_values":
        cands.append(dict(base, input_values=shrink.audio_values(config, batch, 1)))
        cands.append(dict(base, input_values=shrink.audio_values(config, batch, 1, 16000)))
        # spectrogram models (audio-spectrogram-transformer) name theirs input_values too
        cands += [dict(base, input_values=f) for f in shrink.feature_candidates(config, batch, 1)]
    elif name == "input_features":
        cands += [dict(base, input_features=f) for f in shrink.feature_candidates(config, batch, 1)]
    return name, cands


def _float_tensors(out, prefix=""):
    import torch
    items = out.items() if hasattr(out, "items") else enumerate(out if isinstance(out, (list, tuple)) else [])
    res = []
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, torch.Tensor):
            if v.is_floating_point():
                res.append((key, v))
        elif isinstance(v, (list, tuple)) or hasattr(v, "items"):
            res += _float_tensors(v, key + ".")
    return res


def _prepare(model_type, head, cls_name, geometry):
    """(stage, error) or (model, input dict, CPU output) for one shrink level."""
    import torch
    import transformers
    from models import checks, shrink

    try:
        extra = {}
        if head == "causal_lm" and hasattr(transformers.AutoConfig.for_model(model_type), "is_decoder"):
            extra["is_decoder"] = True  # LM heads of encoder architectures (bert, reformer)
        config = shrink.shrink_config(model_type, geometry=geometry, **extra)
    except Exception as e:  # noqa: BLE001
        return "shrink", checks.describe_error(e)
    try:
        cls = getattr(transformers, cls_name)
        torch.manual_seed(0)
        model = cls._from_config(config).eval()
    except Exception as e:  # noqa: BLE001
        return "build", checks.describe_error(e)
    try:
        name, cands = _candidates(head, config, model)
    except Exception as e:  # noqa: BLE001
        return "no_input", checks.describe_error(e)
    if not cands:
        return "no_input", {"error": f"no dummy input for main input {name!r}"}
    first_err = None
    for c in cands:
        try:
            with torch.no_grad():
                ref = model(**c)
            return model, c, ref
        except Exception as e:  # noqa: BLE001
            first_err = first_err or checks.describe_error(e)
    return "cpu", first_err


def _topk_divergence(model, dev, inp):
    """checks.topk_divergence of one more forward on each side (None: same choices)."""
    import torch
    from models import checks
    try:
        with torch.no_grad():
            with checks.TopkRecorder() as rc:
                model(**inp)
            with checks.TopkRecorder() as rt:
                dev(**checks.to_device(inp, "tpu"))
    except Exception:  # noqa: BLE001 - a diagnosis, not a result
        return None
    return checks.topk_divergence(rc.calls, rt.calls, checks.TOL["f32"]["tie"])


def sweep_one(model_type, head, cls_name):
    """One type's result dict (never raises). Tries the full shrink, then a milder one
    that keeps input geometry and stage lists (SHRINK_LEVELS)."""
    import copy
    import torch
    from models import checks

    r = {"type": model_type, "head": head, "class": cls_name}
    failures = []
    for level, geometry in SHRINK_LEVELS:
        got = _prepare(model_type, head, cls_name, geometry)
        if isinstance(got[0], str):
            failures.append((level, got[0], got[1]))
            continue
        model, inp, ref = got
        r["shrink"] = level
        break
    else:
        level, stage, err = failures[0]
        return dict(r, outcome=stage, **err,
                    other_levels=[f"{lv}: {st}: {e.get('error', '')[:160]}" for lv, st, e in failures[1:]])
    r["params"] = sum(p.numel() for p in model.parameters())
    r["inputs"] = {k: (list(v.shape) if hasattr(v, "shape") else v) for k, v in inp.items()}
    try:
        dev = copy.deepcopy(model).to("tpu")
        with torch.no_grad():
            out = dev(**checks.to_device(inp, "tpu"))
        got = dict(_float_tensors(out))
    except Exception as e:  # noqa: BLE001
        return dict(r, outcome="tpu_error", **checks.describe_error(e))
    worst, bad, scales = ("-", 0.0), [], {}
    for k, v in _float_tensors(ref):
        scales[k] = v.abs().max().item() if v.numel() else 0.0
        if k not in got:
            bad.append((k, float("inf")))
            continue
        err = checks.rel_err(got[k], v) if got[k].dtype == v.dtype else float("inf")
        if err > worst[1] or worst[0] == "-":
            worst = (k, err)
        if not err <= TOL:
            bad.append((k, err))
    r.update(worst=worst[0], metric=worst[1], tol=TOL)
    if bad:
        r["bad"] = [f"{k}: {e:.3g}" for k, e in bad[:6]]
        tiny = [k for k, _ in bad if 0 < scales.get(k, 1.0) < 1e-30]
        if tiny:  # XLA flushes subnormals to zero, PyTorch's CPU kernels keep them
            r["subnormal"] = (f"{', '.join(tiny)}: max |cpu| {scales[tiny[0]]:.2g}, near the float32 "
                              "subnormal range (< 1.2e-38) that XLA flushes to zero")
        div = _topk_divergence(model, dev, inp)
        if div is not None:
            r["routing"] = div[1]
            if div[0]:  # an exact/near tie in a topk (MoE router) broken differently
                return dict(r, outcome="tie")
        try:
            r["first_module"] = checks.localize(model, dev, inp, "f32", TOL)
        except Exception as e:  # noqa: BLE001 - a diagnosis, not a result
            r["first_module"] = f"(localize failed: {checks.describe_error(e)['error'][:120]})"
        return dict(r, outcome="mismatch")
    return dict(r, outcome="pass")


def _worker(items, out_path):
    import torchtpu
    torchtpu.set_eager_mode("debug")
    with open(out_path, "a") as f:
        for t, head, cls in items:
            f.write(json.dumps({"start": t}) + "\n")
            f.flush()
            t0 = time.time()
            try:
                r = sweep_one(t, head, cls)
            except Exception as e:  # noqa: BLE001 - a harness bug must not end the chunk
                from models import checks
                r = {"type": t, "head": head, "class": cls, "outcome": "harness",
                     **checks.describe_error(e)}
            r["seconds"] = round(time.time() - t0, 1)
            f.write(json.dumps(r) + "\n")
            f.flush()


def run_chunk(items, timeout):
    """Runs items [(type, head, class)] in worker processes; returns their results."""
    results, todo = [], list(items)
    start_failures = 0
    while todo:
        fd, path = tempfile.mkstemp(prefix="sweep-", suffix=".jsonl")
        os.close(fd)
        spec = json.dumps(todo)
        # stderr to a file: a pipe nobody reads would block a chatty worker
        errf = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", spec,
                                 "--out", path], stdout=subprocess.DEVNULL, stderr=errf, text=True)
        current, started, seen = None, time.time(), 0
        killed = None
        while True:
            try:
                proc.wait(timeout=1.0)
                done = True
            except subprocess.TimeoutExpired:
                done = False
            with open(path) as f:
                lines = [json.loads(x) for x in f.read().splitlines() if x.strip()]
            for x in lines[seen:]:
                if "start" in x:
                    current, started = x["start"], time.time()
                else:
                    results.append(x)
                    todo = [it for it in todo if it[0] != x["type"]]
                    current = None
            seen = len(lines)
            if done:
                break
            # the worker's first type also pays the imports: allow it 60 s more
            limit = timeout + (60 if not results else 0)
            if current is not None and time.time() - started > limit:
                proc.kill()
                proc.wait()
                killed = "timeout"
                break
        errf.seek(0)
        err_tail = errf.read()[-1500:]
        errf.close()
        os.unlink(path)
        if current is not None:
            it = next(it for it in todo if it[0] == current)
            outcome = "timeout" if killed else "crash"
            last = [ln for ln in err_tail.splitlines() if ln.strip()][-1:]
            results.append({"type": it[0], "head": it[1], "class": it[2], "outcome": outcome,
                            "error": (f"timeout ({timeout:.0f} s)" if killed else
                                      f"worker died (exit {proc.returncode})"
                                      + (f": {last[0][:300]}" if last else ""))})
            todo = [x for x in todo if x[0] != current]
        elif todo and seen:
            pass  # exited between two types: a fresh worker takes the rest
        elif todo and start_failures < START_RETRIES:
            # died before its first type (e.g. the binding being rebuilt): retry later
            start_failures += 1
            time.sleep(START_RETRY_DELAY_S)
        elif todo:  # cannot start: give up on the chunk
            last = [ln for ln in err_tail.splitlines() if ln.strip()][-1:]
            for it in todo:
                results.append({"type": it[0], "head": it[1], "class": it[2], "outcome": "crash",
                                "error": f"worker failed to start: {last[0][:300] if last else ''}"})
            todo = []
    return results


# ---- report ----

def _group_key(r):
    o = r["outcome"]
    if o == "tpu_error":
        if r.get("op"):
            return f"missing/failing op `{r['op']}`"
        return "tpu error: " + re.sub(r"\d+", "N", r.get("error", ""))[:120]
    if o in NOT_RUNNABLE:
        return f"{o}: " + re.sub(r"\(\d+\)|\d+", "N", r.get("error", ""))[:100]
    return o


def write_report(results, report_dir, wall, total_types, skipped):
    os.makedirs(report_dir, exist_ok=True)
    results = sorted(results, key=lambda r: r["type"])
    counts = collections.Counter(r["outcome"] for r in results)
    runnable = [r for r in results if r["outcome"] not in NOT_RUNNABLE]
    passed = counts["pass"] + counts["tie"]
    data = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
            "wall_seconds": round(wall, 1), "tolerance": TOL, "types_with_head": total_types,
            "swept": len(results), "runnable": len(runnable), "passed": passed,
            "pass_rate": round(passed / len(runnable), 4) if runnable else None,
            "outcomes": dict(counts), "no_supported_head": skipped, "results": results}
    with open(os.path.join(report_dir, "models-sweep.json"), "w") as f:
        json.dump(data, f, indent=1)
    md = ["# torchtpu model sweep (every transformers model type with a task head)", "",
          f"{data['date']}, wall time {wall:.0f} s. Forward, float32, eval mode, shrunk "
          f"default config, tpu vs CPU, every floating output within {TOL} of max|cpu|.", "",
          f"- model types with a swept head: {len(results)} (of {total_types} with any head; "
          f"{len(skipped)} only have heads the sweep has no dummy input for)",
          f"- runnable generically (shrunk config builds and runs on CPU): {len(runnable)}",
          f"- **pass: {passed} / {len(runnable)}"
          + (f" = {100.0 * passed / len(runnable):.1f}%**" if runnable else "**")
          + (f" ({counts['tie']} of them `tie`: outputs differ only because a topk — an MoE "
             "router — met an exact tie that CPU and tpu break differently; PyTorch leaves "
             "that order unspecified)" if counts["tie"] else ""), "",
          "| outcome | types |", "|---|---|"]
    for o, n in counts.most_common():
        md.append(f"| {o} | {n} |")
    groups = collections.defaultdict(list)
    for r in results:
        if r["outcome"] not in ("pass",):
            groups[_group_key(r)].append(r)
    md += ["", "## Failures grouped by cause", ""]
    order = sorted(groups.items(), key=lambda kv: (kv[1][0]["outcome"] in NOT_RUNNABLE, -len(kv[1])))
    for key, rs in order:
        md.append(f"### {key} — {len(rs)}")
        md.append("")
        for r in rs:
            extra = ""
            if r["outcome"] == "tie":
                extra = f": {r.get('routing', '')}"
            elif r["outcome"] == "mismatch":
                extra = f": worst `{r.get('worst')}` {r.get('metric', 0):.3g}; " + ", ".join(r.get("bad", []))
                if r.get("first_module"):
                    extra += f"; first diverging module {r['first_module']}"
                if r.get("routing"):
                    extra += f"; {r['routing']}"
                if r.get("subnormal"):
                    extra += f"; {r['subnormal']}"
            elif r["outcome"] == "tpu_error":
                extra = f": {r.get('error', '')[:200]}" + (f" (at {r['where']})" if r.get("where") else "")
            elif r.get("error") and r["outcome"] not in ("timeout",):
                extra = f": {r.get('error', '')[:160]}"
            md.append(f"- {r['type']} ({r['class']}){extra}")
        md.append("")
    md += ["## All types", "", "| type | head | outcome | worst | s |", "|---|---|---|---|---|"]
    for r in results:
        w = f"{r.get('metric', 0):.2g}" if r.get("metric") is not None else ""
        md.append(f"| {r['type']} | {r['head']} | {r['outcome']} | {w} | {r.get('seconds', '')} |")
    with open(os.path.join(report_dir, "models-sweep.md"), "w") as f:
        f.write("\n".join(md) + "\n")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--types", default="", help="comma-separated model types (default: all)")
    p.add_argument("--limit", type=int, default=0, help="only the first N types (sorted)")
    p.add_argument("--report", default="reports")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per model type")
    p.add_argument("--chunk", type=int, default=CHUNK)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        _worker(json.loads(a.child), a.out)
        return 0
    from transformers.models.auto import modeling_auto as ma
    names = [n for n in dir(ma) if n.startswith("MODEL_FOR_") and n.endswith("_MAPPING_NAMES")]
    with_head = set()
    for n in names:
        with_head |= set(getattr(ma, n))
    wanted = [t for t in a.types.split(",") if t]
    heads = select_heads(wanted or None)
    if wanted:
        missing = [t for t in wanted if t not in heads]
        if missing:
            p.error(f"no swept head for: {', '.join(missing)}")
    items = sorted((t, h, c) for t, (h, c) in heads.items())
    if a.limit:
        items = items[:a.limit]
    skipped = sorted(with_head - set(select_heads()))
    chunks = [items[i:i + a.chunk] for i in range(0, len(items), a.chunk)]
    t0 = time.time()
    results = []
    with cf.ThreadPoolExecutor(max(1, a.jobs)) as ex:
        for res in ex.map(lambda ch: run_chunk(ch, a.timeout), chunks):
            results += res
            print(f"[{len(results)}/{len(items)}] " + ", ".join(
                f"{r['type']}={r['outcome']}" for r in res), flush=True)
    write_report(results, a.report, time.time() - t0, len(with_head), skipped)
    print(f"wrote {a.report}/models-sweep.md and models-sweep.json ({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
