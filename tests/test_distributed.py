"""The "tpu" c10d backend under torchrun (docs/distributed.md), one CPU-plugin device
per process: every collective on tpu tensors, DDP (and SyncBatchNorm under DDP) parity
with single-process training (2 processes with init_process_group() and no backend, under
TORCH_DISTRIBUTED_DEBUG=DETAIL; 4 with "cpu:gloo,tpu:tpu"); FSDP2, DTensor tensor
parallel and sequence parallel on a Llama-shaped block, DDP and FSDP2 under
torch.compile (2); FSDP2 mixed precision,
distributed checkpoint and a 2-D (FSDP x TP) mesh (4); a dead or divergent rank raising
instead of hanging, and DETAIL's check raising on a shape, dtype or collective mismatch
(2). Each case is one torchrun launch of a script in tests/dist/ that checks its own
results and prints an OK marker per rank."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent / "dist"


def _torchrun(script, nproc, tmp_path, *args, **extra_env):
    # PYTHONFAULTHANDLER: a rank that dies of a signal prints every thread's Python stack.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1", TORCHTPU_CACHE_DIR=str(tmp_path / "cache"),
               **extra_env)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           str(HERE / script), *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        # Whole, in pytest's captured-output sections: its assertion repr cuts long messages.
        print(r.stdout)
        print(r.stderr, file=sys.stderr)
    assert r.returncode == 0, r.stderr[-2000:]
    # Ranks share stdout: their lines may interleave, so callers count markers, not lines.
    return r.stdout


DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}


@pytest.mark.parametrize("nproc,backend,env", [(2, "default", DETAIL), (4, "cpu:gloo,tpu:tpu", {})],
                         ids=["2-default-DETAIL", "4-cpu:gloo,tpu:tpu"])
def test_collectives_and_ddp(nproc, backend, env, tmp_path):
    out = _torchrun("ddp.py", nproc, tmp_path, backend, **env)
    assert out.count("collectives OK") == nproc
    assert out.count("DDP OK") == nproc
    assert out.count("SyncBN OK") == nproc


def test_fsdp2_tensor_and_sequence_parallel(tmp_path):
    out = _torchrun("fsdp_tp.py", 2, tmp_path)
    assert out.count("FSDP2 and DTensor OK") == 2


def test_fsdp2_mixed_precision_checkpoint_and_2d_mesh(tmp_path):
    out = _torchrun("fsdp_2d.py", 4, tmp_path, str(tmp_path / "checkpoint"))
    assert out.count("mixed precision, checkpoint and 2-D OK") == 4


@pytest.mark.parametrize("failure,survivors,env", [("dead", 1, {}), ("diverge", 2, {}), ("mismatch", 2, DETAIL)],
                         ids=["dead", "diverge", "mismatch-DETAIL"])
def test_failures_raise_instead_of_hanging(failure, survivors, env, tmp_path):
    out = _torchrun("failures.py", 2, tmp_path, FAILURE=failure, **env)
    assert out.count("s: OK") == survivors
