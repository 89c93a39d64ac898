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
    "gather": (FWD, BWD),
    # their random draws come from CPU (harness.with_given_draws): values compared
    "nn.functional.fractional_max_pool2d": (FWD, BWD),
    "nn.functional.fractional_max_pool3d": (FWD, BWD),
}
NOT_YET: dict[str, str] = {}

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


def test_harness_float64_arbiter_rules():
    """_no_farther: element by element, or (an ill-conditioned sample) by the largest
    error where float64 is finite; a NaN where float64 is finite never passes."""
    t = {"atol": 1e-5, "rtol": 1.3e-6}
    r = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    cpu = torch.tensor([1.0, 2.01, 3.0])
    assert harness._no_farther(torch.tensor([1.0, 2.005, 3.0]), cpu, r, t)
    # worse at one element, better at another, largest error no larger: passes
    assert harness._no_farther(torch.tensor([1.0, 2.0, 3.01]), cpu, r, t)
    # largest error larger than CPU's: fails
    assert not harness._no_farther(torch.tensor([1.0, 2.0, 3.02]), cpu, r, t)
    assert not harness._no_farther(torch.tensor([1.0, float("nan"), 3.0]), cpu, r, t)


def test_harness_given_draws():
    """fractional_max_pool's draws are passed in, shaped (N, C, dims) as the op draws them."""
    ops = _ops()
    gen = torch.Generator().manual_seed(0)
    for key, nd in (("nn.functional.fractional_max_pool2d", 2), ("nn.functional.fractional_max_pool3d", 3)):
        for sample in ops[key].sample_inputs("cpu", torch.float32):
            given = harness.with_given_draws(ops[key], sample, gen)
            if "_random_samples" in sample.kwargs:  # the OpInfo passes its own
                assert given is sample
                continue
            draws = given.kwargs["_random_samples"]
            x = sample.input
            want = tuple(x.shape[:2]) if x.dim() == nd + 2 else (1, x.shape[0])
            assert tuple(draws.shape) == want + (nd,)
            assert draws.numel() == 0 or (0 <= draws.min() and draws.max() < 1)
    add = next(iter(ops["add"].sample_inputs("cpu", torch.float32)))
    assert harness.with_given_draws(ops["add"], add, gen) is add
