"""A fast slice of the OpInfo conformance harness (tests/conformance/), for `make test`.

Common OpInfos, float32 forward and backward, through the same code as
`make conformance` (conformance.harness.run_cell), on the first SLICE_MAX_SAMPLES
samples.  PASSING lists, explicitly, the cells that pass today: each must stay "pass",
so a regression fails here.  Cells that do not pass yet are in NOT_YET (not run) with
the reason measured; move them to PASSING when their lowering lands.
"""
import functools

import pytest
import torch

import torchtpu
from conformance import harness

SLICE_MAX_SAMPLES = 3

FWD, BWD = "float32/fwd", "float32/bwd"
PASSING = {
    "add": (FWD, BWD),
    "mul": (FWD, BWD),
    "sub": (FWD, BWD),
    "div.no_rounding_mode": (FWD, BWD),
    "exp": (FWD, BWD),
    "log": (FWD, BWD),
    "sin": (FWD, BWD),
    "tanh": (FWD, BWD),
    "sigmoid": (FWD, BWD),
    "nn.functional.relu": (FWD, BWD),
    "sum": (FWD, BWD),
    "mean": (FWD, BWD),
    "amax": (FWD, BWD),
    "argmax": (FWD,),  # no autograd
    "mm": (FWD, BWD),
    "bmm": (FWD, BWD),
    "matmul": (FWD, BWD),
    "softmax": (FWD, BWD),
    "log_softmax": (FWD, BWD),
    "cat": (FWD, BWD),
    "index_select": (FWD, BWD),
    "where": (FWD, BWD),
    "clamp": (FWD, BWD),
    "transpose": (FWD, BWD),
    "nn.functional.linear": (FWD, BWD),
}
NOT_YET = {
    "gather": "fails: RuntimeError: tpu: aten::gather.out: gather(): Expected dtype int64 "
              "for index (INVALID_ARGUMENT)",
}

CELLS = [(op, col) for op, cols in PASSING.items() for col in cols]


@functools.lru_cache(maxsize=None)
def _ops():
    return {harness.op_key(op): op for op in harness.load_op_db()}


@pytest.mark.parametrize("key,col", CELLS, ids=[f"{k}-{c.replace('/', '-')}" for k, c in CELLS])
def test_opinfo_slice(key, col):
    op = _ops()[key]
    dtype, mode = col.split("/")
    with torchtpu.eager_mode("debug"):
        cell = harness.run_cell(op, dtype, mode, max_samples=SLICE_MAX_SAMPLES, timeout=60)
    assert cell["status"] == "pass", f"{key} {col}: {cell['status']}: {cell['reason']} " \
        f"(sample {cell.get('sample')}: {cell.get('sample_desc')})"
    assert cell["samples_passed"] > 0


def test_harness_classifies():
    """The harness itself: CPU-failing samples are skipped, a missing dtype is skipped,
    random ops are compared on shape only, an unlowered op is 'unsupported'."""
    ops = _ops()
    assert harness.random_reason(ops["nn.functional.dropout"])
    assert harness.random_reason(ops["empty_like"])
    assert harness.random_reason(ops["add"]) is None
    assert harness.random_reason(ops["nn.functional.normalize"]) is None
    cell = harness.run_cell(ops["argmax"], "float32", "bwd")
    assert cell["status"] == "skipped"
    cell = harness.run_cell(ops["sigmoid"], "bool", "bwd")
    assert cell["status"] == "skipped"
    err = NotImplementedError("Could not run 'aten::foo.out' on the tpu device: "
                              "no lowering for aten::foo.out")
    assert harness.unsupported_overload(err) == "aten::foo.out"
    assert harness.unsupported_overload(RuntimeError("x")) is None
    a = torch.tensor([1.0, 2.0]).to("tpu")
    harness.compare(a, torch.tensor([1.0, 2.0]))
    with pytest.raises(harness.Mismatch) as ei:
        harness.compare(a, torch.tensor([1.0, 2.5]))
    assert ei.value.max_abs_err == pytest.approx(0.5)
    harness.compare(a, torch.tensor([7.0, 9.0]), values=False)  # random: shape/dtype only
    with pytest.raises(harness.Mismatch):
        harness.compare(a, torch.tensor([7, 9]), values=False)
