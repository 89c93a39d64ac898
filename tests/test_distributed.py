"""The "tpu" c10d backend under torchrun (docs/distributed.md): every collective on
tpu tensors and DDP parity with single-process training on 2 and 4 processes, FSDP2
and DTensor tensor parallel (plus sequence parallel on a Llama-shaped block) on 2, FSDP2 mixed precision, distributed checkpoint and a
2-D (FSDP x TP) mesh on 4, and failures (a dead or divergent rank) raising instead of
hanging; one CPU-plugin device per process. Each case is one torchrun launch of a script in
tests/dist/ that checks its own results and prints one OK line per rank."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent / "dist"


def _torchrun(script, nproc, tmp_path, *args, **extra_env):
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCHTPU_CACHE_DIR=str(tmp_path / "cache"), **extra_env)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(HERE / script), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-6000:])
    return r.stdout


@pytest.mark.parametrize("nproc", [2, 4])
def test_collectives(nproc, tmp_path):
    out = _torchrun("collectives.py", nproc, tmp_path)
    assert sum("collectives OK" in line for line in out.splitlines()) == nproc


@pytest.mark.parametrize("nproc", [2, 4])
def test_ddp_matches_single_process(nproc, tmp_path):
    out = _torchrun("ddp.py", nproc, tmp_path)
    assert sum("DDP OK" in line for line in out.splitlines()) == nproc


def test_fsdp2_and_tensor_parallel(tmp_path):
    out = _torchrun("fsdp_tp.py", 2, tmp_path)
    assert sum("FSDP2 and DTensor OK" in line for line in out.splitlines()) == 2


def test_llama_block_tensor_and_sequence_parallel(tmp_path):
    out = _torchrun("llama_tp.py", 2, tmp_path)
    assert sum("TP+SP OK" in line for line in out.splitlines()) == 2


def test_fsdp2_mixed_precision_checkpoint_and_2d_mesh(tmp_path):
    out = _torchrun("fsdp_2d.py", 4, tmp_path, str(tmp_path / "checkpoint"))
    assert sum("mixed precision, checkpoint and 2-D OK" in line for line in out.splitlines()) == 4


@pytest.mark.parametrize("failure,survivors", [("dead", 1), ("diverge", 2)])
def test_failures_raise_instead_of_hanging(failure, survivors, tmp_path):
    out = _torchrun("failures.py", 2, tmp_path, FAILURE=failure)
    assert sum("raised after" in line and "OK" in line for line in out.splitlines()) == survivors
