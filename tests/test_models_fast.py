"""The fast slice of the model suite (tests/models/): five cheap Hugging Face families
(families.FAST: llama, bert, gpt2, t5, vit) built from small configs, compared on tpu
against CPU from the same weights. Tolerances and their reasons: tests/models/checks.py.
`make models` runs every family and check and writes reports/models.md."""
import functools
import os

import pytest
import torch

import torchtpu
from models import checks, families  # needs transformers: make test installs requirements-models.txt

# (dtype, check): float32 forward/backward/AdamW/greedy generate, bfloat16 forward.
CELLS = [("f32", "fwd"), ("f32", "bwd"), ("f32", "train"), ("f32", "gen"), ("bf16", "fwd")]
FNS = {"fwd": checks.check_forward, "bwd": checks.check_backward,
       "train": checks.check_train, "gen": checks.check_generate}


@functools.lru_cache(maxsize=None)
def _base(name):
    fam = families.BY_NAME[name]
    config = fam.config()
    base = checks.build_base(config, fam.task, "eager")
    return fam, base, checks.make_inputs(fam.task, config, base)


@pytest.fixture(autouse=True)
def _eager_mode():
    # debug by default: errors surface on the op's own line, so a failure names the op;
    # TORCHTPU_EAGER_MODE picks another mode (make test-modes)
    with torchtpu.eager_mode(os.environ.get("TORCHTPU_EAGER_MODE") or "debug"):
        yield


def _params():
    for name in families.FAST:
        for dtype, check in CELLS:
            if check == "gen" and families.BY_NAME[name].task not in checks.GENERATIVE:
                continue
            yield pytest.param(name, dtype, check, id=f"{name}-{dtype}-{check}")


@pytest.mark.parametrize("name,dtype,check", list(_params()))
def test_model_parity(name, dtype, check):
    fam, base, inp = _base(name)
    r = checks.run_check(FNS[check], check, dtype, "eager", base, fam.task, inp, dtype, "eager")
    assert r["status"] == "pass", f"{name} {dtype} {check}: {r}"


def test_cpu_reference_is_deterministic():
    """The suite's premise: two builds with the seed give the same weights, so a
    mismatch is the device's, not the initialisation's."""
    fam, base, inp = _base("llama")
    again = checks.build_base(fam.config(), fam.task, "eager")
    for (n, a), (_, b) in zip(base.named_parameters(), again.named_parameters()):
        assert torch.equal(a, b), n
