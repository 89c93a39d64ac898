#!/usr/bin/env python
"""torchtpu OpInfo conformance: PyTorch's op_db on "tpu" vs CPU -> REPORT/conformance.{md,json}.

    run_opinfo.py [--all] [--ops name,name] [--dtypes float32,bfloat16,float16,int64,int32,bool,complex64]
                  [--modes fwd,bwd] [--report DIR] [--jobs N] [--max-samples K]
                  [--timeout S] [--chunk C]

--jobs N (default: min(4, CPUs)) runs the OpInfos in N spawned worker processes, C
OpInfos per chunk.  A worker streams one result per OpInfo x dtype x mode; if it dies
(native crash) the cell it was running is recorded as "crash" and the rest of its chunk
is re-run in a fresh worker, so a crash costs only that cell.  A worker silent for
5 x timeout + 60 s (hung in native code, where the timer signal can't interrupt
it) is killed and that cell recorded as "timeout".  --jobs 0 runs everything in this process.
"""
from __future__ import annotations

import argparse
import collections
import datetime
import multiprocessing as mp
import os
import sys
import time
from multiprocessing.connection import wait

os.environ.pop("TORCHTPU_CPU_FALLBACK", None)  # before anything imports torchtpu

_HERE = os.path.dirname(os.path.abspath(__file__))
_TESTS = os.path.dirname(_HERE)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

HANG_GRACE_S = 60.0  # parent kills a silent worker after timeout x WALL_FACTOR + this
STARTUP_LIMIT_S = 300.0
START_RETRIES = 5
PARTIAL_EVERY_S = 120.0
START_RETRY_DELAY_S = 20.0


def _hang_limit(timeout):
    from conformance.harness import WALL_FACTOR
    return timeout * WALL_FACTOR + HANG_GRACE_S


def _parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--all", action="store_true", help="every OpInfo in op_db")
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (name or name.variant)")
    p.add_argument("--dtypes", default="float32,bfloat16,float16,int64,int32,bool")
    p.add_argument("--modes", default="fwd,bwd")
    p.add_argument("--report", default="reports", help="directory for conformance.{md,json}")
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1))
    p.add_argument("--max-samples", type=int, default=8)
    p.add_argument("--timeout", type=float, default=20.0,
                   help="seconds per OpInfo x dtype x mode")
    p.add_argument("--chunk", type=int, default=0,
                   help="OpInfos per worker chunk (default: about 4 chunks per job, >= 10)")
    p.add_argument("--eager", default="debug", choices=["debug", "strict", "fused"],
                   help="torchtpu eager mode (debug: errors surface on the op's own line; fused: each "
                        "sample's ops run as one fused program)")
    p.add_argument("-q", "--quiet", action="store_true")
    a = p.parse_args(argv)
    if not a.all and not a.ops:
        p.error("give --all or --ops")
    return a


def _columns(dtypes, modes):
    from conformance.harness import COLUMNS, DTYPES
    for d in dtypes:
        if d not in DTYPES:
            raise SystemExit(f"unknown dtype {d!r}; choose from {', '.join(DTYPES)}")
    return [f"{d}/{m}" for d, m in COLUMNS if d in dtypes and m in modes]


# ---- worker side ----

def _worker(conn, items, max_samples, timeout, eager, log_path):
    """items: [(op key, [columns])].  Sends ("start", key, col) / ("cell", key, col, cell)
    / ("end",)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ.pop("TORCHTPU_CPU_FALLBACK", None)
    import faulthandler
    faulthandler.enable()  # a native crash leaves the Python stack in the log
    import torch  # noqa: F401
    from conformance import harness
    import torchtpu
    torchtpu.set_eager_mode(eager)
    try:
        torch.set_num_threads(1)
    except Exception:  # noqa: BLE001
        pass
    ops = {harness.op_key(op): op for op in harness.load_op_db()}
    conn.send(("ready",))
    for key, cols in items:
        op = ops[key]
        for col in cols:
            conn.send(("start", key, col))
            print(f"== {key} {col}", flush=True)
            if os.environ.get("CONFORMANCE_SELFTEST_CRASH") == f"{key}/{col}":
                import signal  # self-test of the crash path: die like a native crash
                os.kill(os.getpid(), signal.SIGSEGV)
            if os.environ.get("CONFORMANCE_SELFTEST_HANG") == f"{key}/{col}":
                import signal  # self-test of the hang path: block like native code
                signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGPROF})
                time.sleep(10 ** 6)
            d, m = col.split("/")
            cell = harness.run_cell(op, d, m, max_samples=max_samples, timeout=timeout)
            conn.send(("cell", key, col, cell))
    conn.send(("end",))
    conn.close()


def _tail(path, n=4):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - 8192))
            lines = f.read().decode(errors="replace").splitlines()
        lines = [ln.strip() for ln in lines if ln.strip() and not ln.startswith("== ")]
        for i in range(len(lines) - 1, -1, -1):  # faulthandler's report, if any
            if lines[i].startswith("Fatal Python error"):
                frames = [ln for ln in lines[i + 1:] if ln.startswith("File ")][:n]
                return " / ".join([lines[i]] + frames)[:500]
        return " / ".join(lines[-n:])[-400:]
    except OSError:
        return ""


def _exit_desc(code):
    if code is None:
        return "still running"
    if code < 0:
        import signal
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def _term_to_exit(signum, frame):
    raise SystemExit(128 + signum)  # unwinds run_subprocess's finally: workers are killed


def run_subprocess(keys, columns, args, on_cell):
    import signal
    signal.signal(signal.SIGTERM, _term_to_exit)
    ctx = mp.get_context("spawn")
    work = collections.deque()
    if args.chunk <= 0:  # a worker start costs ~15-30 s (op_db import, PJRT client)
        args.chunk = max(10, -(-len(keys) // (args.jobs * 4)))
    for i in range(0, len(keys), args.chunk):
        work.append(([(k, list(columns)) for k in keys[i:i + args.chunk]], 0, 0.0))
    log_dir = os.path.join(args.report, "conformance-logs")
    os.makedirs(log_dir, exist_ok=True)
    active = {}  # conn -> state
    slot_ids = list(range(args.jobs))
    hang_limit = _hang_limit(args.timeout)

    def start(items, tries):
        slot = slot_ids.pop(0)
        log = os.path.join(log_dir, f"worker-{slot}.log")
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(child, items, args.max_samples, args.timeout,
                                                 args.eager, log), daemon=True)
        proc.start()
        child.close()
        active[parent] = dict(proc=proc, items=[(k, list(c)) for k, c in items], tries=tries,
                              current=None, since=time.monotonic(), ready=False, slot=slot,
                              log=log, ended=False)

    def remaining_after(st, skip_current):
        """Work left in st's chunk; the current cell dropped if skip_current."""
        out = []
        for k, cols in st["items"]:
            if skip_current and st["current"] and k == st["current"][0]:
                cols = [c for c in cols if c != st["current"][1]]
            if cols:
                out.append((k, cols))
        return out

    def finish(conn, st):
        del active[conn]
        slot_ids.append(st["slot"])
        slot_ids.sort()
        try:
            conn.close()
        except OSError:
            pass

    def handle(conn, st, msg):
        kind = msg[0]
        st["since"] = time.monotonic()
        if kind == "ready":
            st["ready"] = True
        elif kind == "start":
            st["current"] = (msg[1], msg[2])
        elif kind == "cell":
            _, key, col, cell = msg
            on_cell(key, col, cell)
            for k, cols in st["items"]:
                if k == key and col in cols:
                    cols.remove(col)
            st["items"] = [(k, c) for k, c in st["items"] if c]
            st["current"] = None
        elif kind == "end":
            st["ended"] = True

    try:
        while work or active:
            while work and slot_ids and work[0][2] <= time.monotonic():
                items, tries, _ = work.popleft()
                start(items, tries)
            conns = list(active)
            if not conns:  # only delayed retries left
                time.sleep(0.5)
                continue
            wait(conns + [active[c]["proc"].sentinel for c in conns], timeout=1.0)
            for conn in conns:
                st = active[conn]
                try:
                    while conn.poll():
                        handle(conn, st, conn.recv())
                except (EOFError, OSError):
                    pass
                proc = st["proc"]
                if st["ended"]:
                    proc.join(10)
                    finish(conn, st)
                    continue
                now = time.monotonic()
                dead = not proc.is_alive()
                hung = (st["current"] is not None and now - st["since"] > hang_limit) or \
                       (st["current"] is None and now - st["since"] > STARTUP_LIMIT_S)
                if not dead and not hung:
                    continue
                if hung and not dead:
                    proc.kill()
                proc.join(10)
                if st["current"] is not None:
                    key, col = st["current"]
                    if hung and not dead:
                        on_cell(key, col, dict(status="timeout", reason=(
                            f"hung in native code: worker killed after {hang_limit:g}s "
                            f"without a result"), time_s=round(now - st["since"], 1)))
                    else:
                        on_cell(key, col, dict(status="crash", reason=(
                            f"worker process died ({_exit_desc(proc.exitcode)}) while running "
                            f"this cell; log tail: {_tail(st['log'])}")))
                    rest = remaining_after(st, skip_current=True)
                    if rest:
                        work.appendleft((rest, 0, 0.0))
                else:
                    # died/hung between cells or at start-up (e.g. the binding is being
                    # rebuilt): retry the chunk after a pause, then give up
                    rest = remaining_after(st, skip_current=False)
                    if rest and st["tries"] < START_RETRIES:
                        work.appendleft((rest, st["tries"] + 1,
                                         time.monotonic() + START_RETRY_DELAY_S))
                    elif rest:
                        why = (f"worker failed ({_exit_desc(proc.exitcode)}) before running "
                               f"this cell, {START_RETRIES + 1} times; log tail: "
                               f"{_tail(st['log'])}")
                        for k, cols in rest:
                            for c in cols:
                                on_cell(k, c, dict(status="crash", reason=why))
                finish(conn, st)
    finally:
        for conn, st in list(active.items()):
            st["proc"].kill()
            st["proc"].join(5)


def run_inprocess(ops, columns, args, on_cell):
    from conformance import harness
    import torchtpu
    torchtpu.set_eager_mode(args.eager)
    for op in ops:
        key = harness.op_key(op)
        for col in columns:
            d, m = col.split("/")
            on_cell(key, col, harness.run_cell(op, d, m, max_samples=args.max_samples,
                                               timeout=args.timeout))


def main(argv=None):
    args = _parse(argv)
    t0 = time.monotonic()
    from conformance import harness, report
    import torch
    import torchtpu

    dtypes = [d for d in args.dtypes.split(",") if d]
    modes = [m for m in args.modes.split(",") if m]
    columns = _columns(dtypes, modes)
    op_db = harness.load_op_db()
    ops = harness.select_ops(op_db, None if args.all else [s for s in args.ops.split(",") if s])
    keys = [harness.op_key(op) for op in ops]
    results = {harness.op_key(op): dict(name=op.name, variant=op.variant_test_name,
                                        random=harness.random_reason(op), cells={})
               for op in ops}
    n_cells = len(keys) * len(columns)
    done = [0]
    per_op_done = collections.Counter()

    last_write = [time.monotonic()]

    def on_cell(key, col, cell):
        results[key]["cells"][col] = cell
        done[0] += 1
        per_op_done[key] += 1
        if time.monotonic() - last_write[0] > PARTIAL_EVERY_S:  # a long run leaves a trace
            last_write[0] = time.monotonic()
            partial = {k: v for k, v in results.items() if len(v["cells"]) == len(columns)}
            report.write_reports(partial, dict(partial=True, cells_done=done[0],
                                               cells_total=n_cells,
                                               duration_s=time.monotonic() - t0,
                                               max_samples=args.max_samples,
                                               timeout=args.timeout), args.report, columns)
        if not args.quiet and per_op_done[key] == len(columns):
            cells = results[key]["cells"]
            marks = " ".join(f"{report.SHORT[c]}={cells[c]['status']}" for c in columns
                             if c in cells)
            print(f"[{done[0]}/{n_cells} {time.monotonic() - t0:6.0f}s] {key}: {marks}",
                  flush=True)

    if args.jobs > 0 and args.chunk <= 0:
        args.chunk = max(10, -(-len(keys) // (args.jobs * 4)))
    mode = f"{args.jobs} spawned workers, {args.chunk} OpInfos per chunk" if args.jobs > 0 \
        else "in-process"
    print(f"conformance: {len(keys)} OpInfos x {len(columns)} columns, {mode}", flush=True)
    if args.jobs > 0:
        run_subprocess(keys, columns, args, on_cell)
    else:
        run_inprocess(ops, columns, args, on_cell)
    for key in keys:  # anything lost (should not happen): make it visible
        for col in columns:
            results[key]["cells"].setdefault(col, dict(status="crash",
                                                       reason="no result came back"))
        results[key]["cells"] = {c: results[key]["cells"][c] for c in columns}

    meta = dict(
        torch=torch.__version__, plugin=torchtpu.plugin_path, eager_mode=args.eager,
        date=datetime.datetime.now().isoformat(timespec="seconds"),
        duration_s=round(time.monotonic() - t0, 1), max_samples=args.max_samples,
        timeout=args.timeout, hang_limit=_hang_limit(args.timeout), mode=mode,
        columns=columns, command="tests/conformance/run_opinfo.py " + " ".join(
            sys.argv[1:] if argv is None else argv),
        tolerances={str(k): v for k, v in harness.TOL.items()},
        tol_overrides={k: {"scale": s, "reason": r} for k, (s, r) in harness.TOL_SCALE.items()},
        cpu_fallback_env=os.environ.get("TORCHTPU_CPU_FALLBACK"),
    )
    data = report.write_reports(results, meta, args.report, columns)
    s = data["summary"]
    print(f"\n{s['opinfos']} OpInfos, {s['opinfos_run_on_cpu']} run on CPU; "
          f"{meta['duration_s']:.0f} s")
    for col in columns:
        r = s["columns"][col]
        print(f"  {report.COLUMN_TITLES[col]:18s} pass {r['pass']}/{r['runs_on_cpu']} "
              f"({r['pass_pct']}%)  fail {r['fail']}  unsupported {r['unsupported']}  "
              f"timeout {r['timeout']}  crash {r['crash']}")
    print(f"reports: {os.path.join(args.report, 'conformance.md')}, conformance.json")
    return data


if __name__ == "__main__":
    main()
