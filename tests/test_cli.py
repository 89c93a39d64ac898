"""`python -m torchtpu`: the environment report and self-test exit 0 on a working
setup, and non-zero with the fix in the message when something is broken."""
import os
import subprocess
import sys


def _run(*args, env=None, timeout=120):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "torchtpu", *args], capture_output=True, text=True, env=e,
                          timeout=timeout)


def test_report_and_self_test_pass():
    r = _run()
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    for field in ("torch ", "torchtpu ", "PJRT plugin", "chosen because", "PJRT C API", "tpu:0", "eager mode",
                  "compile cache"):
        assert field in out, field
    for check in ("host <-> device copies", "autograd + AdamW", "out-of-range index raises", "torch.compile"):
        assert any(check in line and " ok " in line for line in out.splitlines()), check
    assert "all good" in out


def test_unwritable_cache_dir_fails_with_the_fix():
    r = _run("--no-self-test", env={"TORCHTPU_CACHE_DIR": "/proc/torchtpu-cache"})
    assert r.returncode == 1
    assert "not writable" in r.stderr and "TORCHTPU_DISK_CACHE=0" in r.stderr


def test_missing_plugin_fails_at_import_with_the_fix():
    r = _run("--no-self-test", env={"TORCHTPU_PJRT_PLUGIN": "/nonexistent/plugin.so"})
    assert r.returncode != 0
    assert "/nonexistent/plugin.so" in r.stderr
    assert "TORCHTPU_PJRT_PLUGIN is set" in r.stderr and "unset it" in r.stderr
