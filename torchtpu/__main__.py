"""``python -m torchtpu``: an environment report and a self-test of about 10 s.

Exits 0 when everything works. Otherwise it exits 1 and says what to fix. (A
missing plugin or a plugin with an incompatible PJRT ABI already fails at
``import torchtpu``, whose error names the fix.)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Callable

import torch

import torchtpu
from torchtpu import _C


def _dir_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def _cache_problem(path: str | None) -> str | None:
    """None when the disk cache directory can be written."""
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as e:
        return (f"the compile cache directory {path} is not writable ({e.strerror}): set "
                "TORCHTPU_CACHE_DIR to a writable directory, or TORCHTPU_DISK_CACHE=0 to turn the disk cache off")
    return None


def report() -> list[str]:
    """Prints the environment; returns the problems found."""
    major, minor = _C.api_version()
    cache = torchtpu.cache_dir()
    lines = [
        ("torch", torch.__version__),
        ("torchtpu", torchtpu.__version__),
        ("python", sys.version.split()[0]),
        ("PJRT plugin", torchtpu.plugin_path),
        ("  chosen because", torchtpu.plugin_reason),
        ("  platform", f"{_C.platform_name()} {_C.platform_version()}".strip()),
        ("  PJRT C API", f"{major}.{minor}"),
        ("devices", str(torch.tpu.device_count())),
    ]
    for i in range(torch.tpu.device_count()):
        lines.append((f"  tpu:{i}", torch.tpu.get_device_name(i)))
    lines += [
        ("eager mode", torchtpu.get_eager_mode()),
        ("compile cache", f"{cache} ({_dir_size(cache) / 2**20:.1f} MiB)" if cache else "off (TORCHTPU_DISK_CACHE=0)"),
    ]
    for k in sorted(os.environ):
        if k.startswith("TORCHTPU_"):
            lines.append((k, os.environ[k]))
    width = max(len(k) for k, _ in lines)
    for k, v in lines:
        print(f"{k:<{width}}  {v}")
    problems = []
    if torch.tpu.device_count() == 0:
        problems.append("the plugin reports no devices: check that the accelerator is visible to this process")
    p = _cache_problem(cache)
    if p:
        problems.append(p)
    return problems


# ---- self-test: each check compares tpu with PyTorch on CPU ----


def _check_transfer() -> None:
    x = torch.randn(64, 33)
    assert torch.equal(x.to("tpu").cpu(), x), "a round trip to the device changed the values"


def _check_ops() -> None:
    x = torch.randn(64, 64)
    want = torch.softmax(x @ x.T / 8, dim=-1).sum(0)
    got = torch.softmax(x.to("tpu") @ x.to("tpu").T / 8, dim=-1).sum(0).cpu()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def _train(device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 16).to(device), torch.randint(0, 4, (8,)).to(device)
    for _ in range(3):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


def _check_training() -> None:
    for got, want in zip(_train("tpu"), _train("cpu")):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def _check_index_error() -> None:
    x = torch.arange(4.0, device="tpu")
    try:
        x[torch.tensor([7], device="tpu")].cpu()
    except (IndexError, RuntimeError):
        return
    raise AssertionError("an out-of-range index did not raise")


def _check_compile() -> None:
    def f(a, b):
        return torch.nn.functional.silu(a @ b).mean(dim=0)

    a, b = torch.randn(16, 8), torch.randn(8, 8)
    got = torch.compile(f, backend="tpu")(a.to("tpu"), b.to("tpu")).cpu()
    torch.testing.assert_close(got, f(a, b), rtol=1e-4, atol=1e-5)


CHECKS: list[tuple[str, Callable[[], None]]] = [
    ("host <-> device copies", _check_transfer),
    ("matmul, softmax, reduction", _check_ops),
    ("autograd + AdamW, 3 steps", _check_training),
    ("out-of-range index raises", _check_index_error),
    ('torch.compile(backend="tpu")', _check_compile),
]


def self_test(skip_compile: bool) -> list[str]:
    problems = []
    print("\nself-test (tpu vs PyTorch on CPU):")
    for name, fn in CHECKS:
        if skip_compile and fn is _check_compile:
            continue
        t0 = time.perf_counter()
        try:
            fn()
            torchtpu.synchronize()
            status = "ok"
        except Exception as e:  # noqa: BLE001 (every failure is reported, none ends the run)
            status = "FAILED"
            problems.append(f"self-test '{name}' failed: {type(e).__name__}: {e}")
        print(f"  {name:<32} {status:<7} {time.perf_counter() - t0:6.2f} s")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m torchtpu", description=__doc__.split("\n")[0])
    ap.add_argument("--no-self-test", action="store_true", help="only print the environment")
    ap.add_argument("--no-compile", action="store_true", help="skip the torch.compile check (it imports Dynamo)")
    args = ap.parse_args(argv)
    problems = report()
    if not args.no_self_test:
        problems += self_test(args.no_compile)
    if problems:
        print("\nproblems:", file=sys.stderr)
        for p in problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    print("\nall good")
    return 0


if __name__ == "__main__":
    sys.exit(main())
