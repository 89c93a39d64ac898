#!/usr/bin/env python
"""Generates docs/ops.md: every aten overload registered for the tpu device.

    .venv/bin/python tools/gen_ops_doc.py           # write docs/ops.md (a few seconds)
    .venv/bin/python tools/gen_ops_doc.py --check   # exit 1 when docs/ops.md is stale
    .venv/bin/python tools/gen_ops_doc.py --probe   # re-measure the dtype column (minutes),
                                                    # then write docs/ops.md

The overload list is read live from PyTorch's dispatcher after ``import torchtpu``:
an aten overload is listed when its PrivateUse1 ("tpu") dispatch entry is one of
torchtpu's C++ kernels (torchtpu/csrc/kernels.cpp), its unboxed kernels for the hottest
ops (torchtpu/csrc/unboxed.cpp), or torchtpu's boxed fallback
(torchtpu/csrc/fallback.cpp) and the C runtime has a lowering for the overload's
base name (``torchtpu._C.op_supported``).

The dtype column comes from tools/ops_dtypes.json, which ``--probe`` rewrites: it runs
the forward cells of PyTorch's OpInfo database through the conformance harness
(tests/conformance/harness.py, tpu vs CPU) with a TorchDispatchMode that records which
listed overloads ran on tpu, and with which dtypes (see ``probe_worker``).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "ops.md")
DTYPES_JSON = os.path.join(REPO, "tools", "ops_dtypes.json")

# Probed dtypes, in column order, with their short names in the table.
PROBE_DTYPES = ["float32", "bfloat16", "float16", "int64", "int32", "int8", "uint8", "bool"]
SHORT = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "int64": "i64", "int32": "i32",
         "int8": "i8", "uint8": "u8", "bool": "bool"}

_ENTRY_RE = re.compile(r"registered at (\S*?)(torchtpu/csrc/[\w.]+):\d+ \[(kernel|backend fallback)\]")


def base_name(overload: str) -> str:
    """The lowering's name for "aten::add_.Tensor": "add" (as the binding computes it)."""
    name = overload.split("::", 1)[-1].split(".", 1)[0]
    if len(name) >= 2 and name.endswith("_") and name[-2] != "_":
        name = name[:-1]
    return name


def _tpu_entry(torch, name: str) -> tuple[str, str] | None:
    """(source file, "kernel" | "backend fallback") when the tpu entry of `name` is torchtpu's."""
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("PrivateUse1:"):
            m = _ENTRY_RE.search(line)
            return (os.path.basename(m.group(2)), m.group(3)) if m else None
    return None


def _entry_kind(torch, name: str) -> str:
    """How the tpu dispatch entry of `name` is filled, in one word."""
    for line in torch._C._dispatch_dump_table(name).splitlines():
        if line.startswith("PrivateUse1:"):
            if "torchtpu/csrc/" in line:
                return "torchtpu"
            if "[math kernel]" in line:
                return "composite-implicit"
            if "[default backend kernel]" in line:
                return "composite-explicit"
            return "other"
    return "none"


def collect() -> dict:
    """Everything the page says, read from the dispatcher and the runtime."""
    import torch
    import torchtpu  # noqa: F401  (registers the tpu kernels and the fallback)
    from torchtpu import _C

    names = sorted(n for n in torch._C._dispatch_get_all_op_names() if n.startswith("aten::"))
    listed, no_lowering = [], []
    kinds = collections.Counter()
    supported_bases = set()
    for n in names:
        base = base_name(n)
        lowered = _C.op_supported(base)
        if lowered:
            supported_bases.add(base)
        entry = _tpu_entry(torch, n)
        if entry is None:
            kinds[_entry_kind(torch, n)] += 1
            continue
        src, how = entry
        if src == "fallback.cpp" and how == "backend fallback":
            if lowered:
                listed.append(dict(name=n, route="fallback", lowering=base))
            else:
                no_lowering.append(n)
        elif src == "fallback.cpp":  # registered by name: listed, lowering or not
            listed.append(dict(name=n, route="fallback, explicit", lowering=base if lowered else "-"))
        elif src == "unboxed.cpp":  # the same lowering, called without boxing
            listed.append(dict(name=n, route="unboxed", lowering=base))
        else:
            listed.append(dict(name=n, route=f"kernel ({src})", lowering=""))
    registrations = sorted(x for x in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
                           if x.startswith("aten::"))
    eager_bases = {r["lowering"] for r in listed}
    return dict(torch=torch.__version__.split("+")[0], listed=listed, no_lowering=no_lowering,
                composite=dict(kinds), registrations=registrations,
                graph_only=sorted(supported_bases - eager_bases), n_lowerings=len(supported_bases))


def load_dtypes(path: str = DTYPES_JSON) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def _dtype_cell(dtypes: list[str] | None) -> str:
    if not dtypes:
        return "—"
    return " ".join(SHORT[d] for d in PROBE_DTYPES if d in dtypes)


def render(info: dict, probe: dict) -> str:
    listed = info["listed"]
    by_route = collections.Counter(r["route"].split(" (")[0] for r in listed)
    meta = probe.get("meta", {})
    verified = probe.get("overloads", {})
    n_verified = sum(1 for r in listed if verified.get(r["name"]))
    comp = info["composite"]
    out = []
    w = out.append
    w("<!-- GENERATED by tools/gen_ops_doc.py: do not edit. Regenerate: "
      ".venv/bin/python tools/gen_ops_doc.py -->")
    w("# Operators on `tpu`")
    w("")
    w(f"Every aten overload registered for the `tpu` device (PyTorch {info['torch']}): "
      f"**{len(listed)} overloads**, {by_route['fallback'] + by_route['fallback, explicit'] + by_route['unboxed']} "
      f"of them run by a C lowering (through the boxed fallback, or {by_route['unboxed']} of the hottest through "
      f"unboxed kernels) and {by_route['kernel']} by a C++ kernel of the binding. "
      f"{info['n_lowerings']} aten base names have a lowering in the runtime.")
    w("")
    w("## How the list is made")
    w("")
    w("`tools/gen_ops_doc.py` reads PyTorch's dispatcher after `import torchtpu`. For each aten "
      "overload it looks at the `PrivateUse1` (`tpu`) entry of its dispatch table:")
    w("")
    w("- **kernel**: a C++ kernel of the binding (`torchtpu/csrc/kernels.cpp`, named in the *route* "
      "column): allocation, views, copies and other storage-level ops. Listed.")
    w("- **fallback**: torchtpu's boxed fallback (`torchtpu/csrc/fallback.cpp`), which turns the call "
      "into a C op descriptor for the runtime's lowering of the overload's *base name* (no `aten::`, "
      "no overload, no trailing in-place `_`: `add_.Tensor` and `add.out` both reach `add`). Listed "
      "when that lowering exists (`torchtpu._C.op_supported(base)`). *fallback, explicit*: the fallback "
      "registered for that overload by name, so that it outranks PyTorch's composite kernel.")
    w("- **unboxed**: an unboxed kernel (`torchtpu/csrc/unboxed.cpp`) for the hottest elementwise "
      "ops; it calls the same lowering as the fallback would, without building a boxed argument "
      "stack, and hands whatever it does not handle to the fallback.")
    w(f"- Not listed: {len(info['no_lowering'])} overloads reach the fallback but have no lowering; they "
      "raise `NotImplementedError` naming the overload (or run on the CPU with "
      "`TORCHTPU_CPU_FALLBACK=1`: [troubleshooting.md](troubleshooting.md)).")
    w(f"- Not listed: overloads whose `tpu` entry is one of PyTorch's composite kernels "
      f"({comp.get('composite-explicit', 0)} CompositeExplicitAutograd, "
      f"{comp.get('composite-implicit', 0)} CompositeImplicitAutograd). They run on `tpu` as the ops "
      "their kernel calls: `aten::abs` calls `aten::abs.out` (listed); `aten::linear` decomposes, for a "
      "2-D input with a bias, into `aten::t` and `aten::addmm`. Whether such an overload works depends "
      "on those ops.")
    w("")
    w("`torch._C._dispatch_get_registrations_for_dispatch_key(\"PrivateUse1\")` names only the overloads "
      f"registered by name ({len(info['registrations'])} aten ones: the kernels and the explicit fallback "
      "entries); the rest reach the fallback through its catch-all registration, which is why the list "
      "is computed per overload from the dispatch tables.")
    w("")
    w("Under `torch.compile(backend=\"tpu\")` a graph node is lowered by base name too, whatever its "
      "eager route; ops without a lowering are decomposed first ([compile.md](compile.md)). These "
      "lowerings are reached only that way (eager runs a binding kernel or PyTorch's composite kernel "
      "for them instead):")
    w("")
    w(", ".join(f"`{b}`" for b in info["graph_only"]) + ".")
    w("")
    w("## The dtype column")
    w("")
    if meta:
        w(f"Measured by `tools/gen_ops_doc.py --probe` (stored in `tools/ops_dtypes.json`), on the "
          f"{meta.get('platform', '?')} plugin with PyTorch {meta.get('torch', '?')}: every OpInfo of "
          f"PyTorch's `op_db` ({meta.get('opinfos', '?')} entries), forward only, for each of "
          f"{', '.join(meta.get('dtypes', PROBE_DTYPES))} that the OpInfo supports on CPU, its first "
          f"{meta.get('max_samples', '?')} sample inputs run on `tpu` and on CPU through the conformance "
          "harness (`tests/conformance/harness.py`: tolerances of `tests/tpu_testing.py`, eager mode "
          "`debug`). A dispatch mode records the overloads that ran on `tpu` inside each OpInfo x dtype "
          "cell. A dtype is listed for an overload when the overload ran with at least one tensor "
          "argument of that dtype inside a cell that **passed** (every sample matched CPU by value). "
          f"{n_verified} of the {len(listed)} overloads have at least one dtype.")
    else:
        w("Not measured yet: run `tools/gen_ops_doc.py --probe`.")
    w("")
    w("Read it as evidence, not as a limit. **—** means no passing OpInfo cell exercised the "
      "overload (no OpInfo reaches it, its OpInfo fails on some sample, or its outputs are random and "
      "compared on shape only), not that it fails. Short names: "
      + ", ".join(f"{SHORT[d]} = {d}" for d in PROBE_DTYPES) + ". `tests/test_ops_*.py` check more "
      "ops and dtypes by hand; `make conformance` gives per-OpInfo results (`reports/conformance.md`).")
    w("")
    w("## Overloads")
    w("")
    w("| overload | route | lowering | dtypes (verified) |")
    w("|---|---|---|---|")
    for r in listed:
        low = {"": "", "-": "none: raises `NotImplementedError`"}.get(r["lowering"], f"`{r['lowering']}`")
        w(f"| `{r['name']}` | {r['route']} | {low} | {_dtype_cell(verified.get(r['name']))} |")
    w("")
    return "\n".join(out)


def listed_in_doc(text: str) -> list[str]:
    """The overloads of the page's table (its first column)."""
    return re.findall(r"^\| `(aten::[^`]+)` \|", text, flags=re.M)


# ---------------------------------------------------------------- the probe

def probe_worker(keys: list[str], dtypes: list[str], max_samples: int, timeout: float) -> None:
    """Runs the forward cells of OpInfos `keys`; prints one JSON line per event."""
    tests = os.path.join(REPO, "tests")
    sys.path.insert(0, tests)
    os.environ.pop("TORCHTPU_CPU_FALLBACK", None)
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from conformance import harness
    import torchtpu

    torchtpu.set_eager_mode("debug")
    for d in dtypes:
        harness.DTYPES.setdefault(d, getattr(torch, d))
    dk = torch._C.DispatchKey
    composite_keys = (dk.CompositeExplicitAutogradNonFunctional, dk.CompositeExplicitAutograd)
    kinds: dict[str, str] = {}

    def kind(name):
        if name not in kinds:
            kinds[name] = _entry_kind(torch, name)
        return kinds[name]

    class Recorder(TorchDispatchMode):
        """Records (overload, dtypes of its tpu tensor arguments) for every call
        that reaches torchtpu. PyTorch's CompositeExplicitAutograd kernels are run
        with the mode still active, so the ops they call (aten::abs ->
        aten::abs.out) are seen too (not for view ops, whose kernels only make
        metadata, nor for an op inside its own composite kernel)."""

        def __init__(self):
            super().__init__()
            self.calls: set[tuple[str, str]] = set()
            self.expanding: list[str] = []  # composite kernels being run, innermost last

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            flat, _ = tree_flatten((args, kwargs))
            tensors = [x for x in flat if isinstance(x, torch.Tensor) and x.device.type == "tpu"]
            dev = kwargs.get("device")
            factory = not tensors and dev is not None and torch.device(dev).type == "tpu"
            if tensors or factory:
                name = func.name()
                k = kind(name)
                if k == "torchtpu":
                    ds = {str(t.dtype).replace("torch.", "") for t in tensors}
                    if factory:
                        ds.add(str(kwargs.get("dtype") or torch.get_default_dtype()).replace("torch.", ""))
                    for d in ds:
                        self.calls.add((name, d))
                elif k == "composite-explicit" and not func.is_view and name not in self.expanding:
                    for key in composite_keys:
                        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
                            self.expanding.append(name)
                            try:
                                with self:
                                    return func._op_dk(key, *args, **kwargs)
                            finally:
                                self.expanding.pop()
            return func(*args, **kwargs)

    ops = {harness.op_key(op): op for op in harness.load_op_db()}

    def emit(**kw):
        sys.stdout.write(json.dumps(kw) + "\n")
        sys.stdout.flush()

    emit(event="ready")
    for key in keys:
        op = ops[key]
        for d in dtypes:
            emit(event="start", key=key, dtype=d)
            rec = Recorder()
            with rec:
                cell = harness.run_cell(op, d, "fwd", max_samples=max_samples, timeout=timeout)
            values = not cell.get("compare") and not cell.get("samples_shape_only")
            credit = sorted(n for n, dt in rec.calls if dt == d) if cell["status"] == "pass" and values else []
            emit(event="cell", key=key, dtype=d, status=cell["status"], reason=cell.get("reason", "")[:300], credit=credit)
    emit(event="end")


def _reader(proc, q, wid):
    for line in proc.stdout:
        try:
            q.put((wid, json.loads(line)))
        except ValueError:
            pass
    q.put((wid, None))


def probe(jobs: int, max_samples: int, timeout: float, only: list[str] | None, quiet: bool) -> dict:
    """Runs probe_worker over op_db in `jobs` processes; returns the new tools/ops_dtypes.json."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from conformance import harness
    import torch
    from torchtpu import _C

    keys = [harness.op_key(op) for op in harness.load_op_db()]
    if only:
        keys = [k for k in keys if k in set(only) or k.split(".")[0] in set(only)]
    pending = collections.deque(keys[i:i + 25] for i in range(0, len(keys), 25))
    cache = tempfile.mkdtemp(prefix="torchtpu-ops-probe-")
    env = dict(os.environ, TORCHTPU_CACHE_DIR=cache)  # an empty compile cache, removed at the end
    env.pop("TORCHTPU_CPU_FALLBACK", None)  # a missing lowering must fail its cell
    q: queue.Queue = queue.Queue()
    workers = {}  # wid -> dict(proc, keys, done, current, last, log)
    credit = collections.defaultdict(set)
    statuses = collections.Counter()
    hang_limit = timeout * 5 + 120
    next_wid = 0
    t0 = time.time()

    def start(chunk):
        nonlocal next_wid
        wid, next_wid = next_wid, next_wid + 1
        log = tempfile.TemporaryFile()
        cmd = [sys.executable, os.path.abspath(__file__), "--probe-worker", "--ops", ",".join(chunk),
               "--max-samples", str(max_samples), "--timeout", str(timeout)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True, env=env, cwd=REPO)
        workers[wid] = dict(proc=proc, keys=list(chunk), current=None, last=time.time(), log=log)
        threading.Thread(target=_reader, args=(proc, q, wid), daemon=True).start()

    try:
        while pending or workers:
            while pending and len(workers) < jobs:
                start(pending.popleft())
            try:
                wid, msg = q.get(timeout=10)
            except queue.Empty:
                for wid, w in list(workers.items()):
                    if time.time() - w["last"] > hang_limit:
                        w["proc"].kill()
                continue
            w = workers.get(wid)
            if w is None:
                continue
            w["last"] = time.time()
            if msg is None:  # the worker's stdout closed: it ended or died
                rc = w["proc"].wait()
                w["log"].close()
                del workers[wid]
                if w["current"]:
                    key, d = w["current"]
                    statuses["crash" if rc else "lost"] += 1
                    if not quiet:
                        print(f"  worker died (rc {rc}) in {key} {d}; going on", file=sys.stderr)
                    rest = w["keys"][w["keys"].index(key) + 1:]
                    if rest:
                        pending.appendleft(rest)
                continue
            if msg["event"] == "start":
                w["current"] = (msg["key"], msg["dtype"])
            elif msg["event"] == "cell":
                w["current"] = None
                statuses[msg["status"]] += 1
                for name in msg["credit"]:
                    credit[name].add(msg["dtype"])
                done = sum(statuses.values())
                if not quiet and done % 200 == 0:
                    print(f"  {done} cells, {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        for w in workers.values():
            w["proc"].kill()
        shutil.rmtree(cache, ignore_errors=True)

    _C_platform = _C.platform_name() if _C.is_initialized() else "?"
    return dict(
        meta=dict(torch=torch.__version__.split("+")[0], platform=_C_platform, dtypes=PROBE_DTYPES,
                  max_samples=max_samples, timeout_s=timeout, opinfos=len(keys),
                  cells=dict(sorted(statuses.items()))),
        overloads={n: [d for d in PROBE_DTYPES if d in ds] for n, ds in sorted(credit.items())},
    )


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when docs/ops.md differs from what would be written")
    ap.add_argument("--probe", action="store_true", help="re-measure the dtype column first (slow)")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--max-samples", type=int, default=4)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds per OpInfo x dtype cell")
    ap.add_argument("--ops", default="", help="probe only these OpInfos (comma-separated)")
    ap.add_argument("--dtypes-json", default=DTYPES_JSON, help="where the probe's results live (default: %(default)s)")
    ap.add_argument("--probe-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("-q", "--quiet", action="store_true")
    a = ap.parse_args(argv)
    if a.probe_worker:
        probe_worker([k for k in a.ops.split(",") if k], PROBE_DTYPES, a.max_samples, a.timeout)
        return 0
    if a.probe:
        data = probe(a.jobs, a.max_samples, a.timeout, [k for k in a.ops.split(",") if k] or None, a.quiet)
        with open(a.dtypes_json, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.write("\n")
    text = render(collect(), load_dtypes(a.dtypes_json))
    if a.check:
        try:
            with open(DOC) as f:
                current = f.read()
        except FileNotFoundError:
            current = ""
        if current != text:
            have, want = set(listed_in_doc(current)), set(listed_in_doc(text))
            print("docs/ops.md is stale: run .venv/bin/python tools/gen_ops_doc.py", file=sys.stderr)
            for n in sorted(want - have):
                print(f"  missing: {n}", file=sys.stderr)
            for n in sorted(have - want):
                print(f"  not registered: {n}", file=sys.stderr)
            return 1
        return 0
    with open(DOC, "w") as f:
        f.write(text)
    if not a.quiet:
        print(f"wrote {os.path.relpath(DOC, REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
