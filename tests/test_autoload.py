"""Autoload: `import torch` alone brings in torchtpu through the "torch.backends" entry
point that pyproject.toml declares, and TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns it off.

The development install (a .pth file, no dist-info) declares no entry point, so each test
puts a throwaway dist-info that declares the same one on PYTHONPATH of a subprocess that
never imports torchtpu itself.
"""
import json
import os
import subprocess
import sys
import tomllib

import pytest
import torch

import torchtpu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GROUP = "torch.backends"
ENTRY_POINT = {"torchtpu": "torchtpu:_autoload"}


def _declared_entry_points() -> dict:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return project.get("entry-points", {}).get(GROUP, {})


def test_pyproject_declares_the_tested_entry_point():
    assert _declared_entry_points() == ENTRY_POINT
    module, _, attr = ENTRY_POINT["torchtpu"].partition(":")
    assert module == "torchtpu" and callable(getattr(torchtpu, attr))


@pytest.fixture
def autoload_path(tmp_path):
    """A PYTHONPATH with a dist-info declaring pyproject's entry point, then the
    directory this process imported torchtpu from."""
    dist_info = tmp_path / "torchtpu_autoload_test-0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: torchtpu-autoload-test\nVersion: 0\n")
    lines = [f"[{GROUP}]"] + [f"{name} = {target}" for name, target in _declared_entry_points().items()]
    (dist_info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(torchtpu.__file__)))
    return os.pathsep.join([str(tmp_path), package_parent])


def _run(code: str, pythonpath: str, cwd, **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if k != "TORCH_DEVICE_BACKEND_AUTOLOAD"}
    e["PYTHONPATH"] = pythonpath
    e.update(env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=cwd,
                          timeout=120)


# `import torch` alone, and `import torchtpu` first: then torch's import runs the entry
# point on the half-imported torchtpu (as `python -m torchtpu` does).
@pytest.mark.parametrize("first", ["", "import torchtpu\n"], ids=["torch_only", "torchtpu_first"])
def test_import_torch_autoloads_tpu(autoload_path, tmp_path, first):
    code = first + (
        "import json, sys, torch\n"
        "y = torch.ones(2, device='tpu') * 2\n"
        "print(y)\n"
        "print(json.dumps({'device': y.device.type, 'values': y.cpu().tolist(),"
        " 'autoloaded': 'torchtpu' in sys.modules}))\n"
    )
    r = _run(code, autoload_path, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["autoloaded"] and got["device"] == "tpu"
    assert got["values"] == (torch.ones(2) * 2).tolist()


def test_autoload_off_leaves_tpu_unregistered(autoload_path, tmp_path):
    code = (
        "import sys, torch\n"
        "assert 'torchtpu' not in sys.modules\n"
        "try:\n"
        "    torch.ones(2, device='tpu')\n"
        "except RuntimeError as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    r = _run(code, autoload_path, tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "tpu" in r.stdout
