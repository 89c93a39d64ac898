"""OpInfo conformance harness: every OpInfo of PyTorch's op_db, run on CPU and on "tpu".

One *cell* is an OpInfo x dtype x mode ("fwd" | "bwd").  For each cell the first
``max_samples`` sample inputs (``op.sample_inputs("cpu", dtype, requires_grad=...)``) are
run on CPU and on copies moved to "tpu" and compared:

  fwd   outputs, after the sample's ``output_process_fn_grad`` (as PyTorch's own
        test_compare_cpu), compared with the tolerance of their dtype (``tpu_testing.TOL``);
  bwd   float32 only, ``op.supports_autograd``: ``torch.autograd.grad`` of the float
        outputs with a fixed random cotangent made on CPU (no extra tpu ops are needed
        to form a loss), gradients of every float32 input that requires grad compared.

Cell status:
  pass         every sample that runs on CPU matches;
  fail         a sample gives wrong values (max abs error + sample recorded), a wrong
               dtype/shape/structure, or raises on tpu (exception type + first line);
  unsupported  a sample raises NotImplementedError on tpu (the aten overload it names is
               recorded) and no sample fails;
  skipped      nothing to compare (dtype not supported on CPU, no samples, CPU itself
               fails on every sample, no differentiable float32 input, ...);
  timeout      the cell used more than its budget of CPU time (ITIMER_PROF, so a busy
               machine doesn't shrink it; WALL_FACTOR x that in wall time); workers
               that hang in native code are killed by the parent (run_opinfo.py);
  crash        the worker process died while running the OpInfo (subprocess mode).

Two rules accept a sample whose values differ from CPU's:
  - ops returning (values, indices) (kthvalue, sort, topk, mode, median, max/min with
    dim, cummax/cummin): indices may pick another one of tied values, if the values
    match and input.gather(dim, indices) == values; argsort (stable=False): indices
    that order the input the same way (counted in samples_tie_indices);
  - float32/bfloat16/float16: when every tpu output element is no farther from the op's
    float64 result (inputs upcast exactly) than CPU's result, up to TOL[dtype]
    (accumulation order / intermediate rounding differ; counted in
    samples_float64_arbiter), or, on an ill-conditioned sample where both are off at
    different elements, when tpu's largest error against float64 is no larger than
    CPU's largest.  Backward gets the same arbiter: gradients of the float64 sample
    with the same cotangents.

OpInfos whose op draws its own random numbers (fractional_max_pool2d/3d) are given
draws made on CPU (``with_given_draws``), the same for both sides, and compared on values.

Samples of deterministic OpInfos that are random themselves (dropout_p > 0, attention
with training=True) are also
compared on shape/dtype only (samples_shape_only).  Tensor arguments PyTorch wants on
CPU stay there (CPU_ARGS); device arguments become "tpu"; inputs that view a larger
storage are recreated on tpu with the same storage, offset and strides.

A sample on which CPU itself raises is skipped (counted in ``samples_cpu_failed``),
never a failure.  Ops with random / uninitialised outputs are compared on structure,
shape and dtype only (``random_reason``).  Everything runs with TORCHTPU_CPU_FALLBACK
unset and a cell whose run increased ``torchtpu.metrics()["fallbacks"]`` fails.
"""
from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import signal
import sys
import time
import traceback

# No silent CPU fallback: this must be gone before torchtpu is imported.
os.environ.pop("TORCHTPU_CPU_FALLBACK", None)

_TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPO_DIR = os.path.dirname(_TESTS_DIR)
for _p in (_TESTS_DIR, _REPO_DIR):  # tpu_testing; torchtpu from the working tree
    if _p not in sys.path:
        sys.path.insert(0, _p)

import torch  # noqa: E402
from torch.testing._internal.opinfo.core import SampleInput  # noqa: E402
from torch.utils._pytree import tree_flatten, tree_map  # noqa: E402

import torchtpu  # noqa: E402,F401  (registers the "tpu" device)
from tpu_testing import TOL, tol  # noqa: E402,F401  (tolerances: stated once, there)

DTYPES = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int64": torch.int64,
    "int32": torch.int32,
    "bool": torch.bool,
    "complex64": torch.complex64,
}
# The report columns: (dtype name, mode).  Backward is float32 and complex64.
# complex64 is opt-in (run_opinfo.py --dtypes complex64): not in the default set.
COLUMNS = [("float32", "fwd"), ("bfloat16", "fwd"), ("float16", "fwd"), ("int64", "fwd"), ("int32", "fwd"),
           ("bool", "fwd"), ("float32", "bwd"), ("complex64", "fwd"), ("complex64", "bwd")]
# Float types judged against float64 when tpu and CPU disagree (_closer_to_float64):
# CPU's own rounding is not the truth (float32 polygamma near a pole, matrix_exp of a
# large matrix: tpu lands nearer float64 than CPU does).
ARBITRATED = (torch.bfloat16, torch.float16, torch.float32)
DEFAULT_MAX_SAMPLES = 8
DEFAULT_TIMEOUT = 20.0
SEED = 0

# ---- OpInfo-specific looser tolerances: each with its written reason ----
# key -> (scale applied to TOL for float dtypes, reason).  Keep this short.
TOL_SCALE: dict[str, tuple[float, str]] = {
    # (none yet: every OpInfo is held to tpu_testing.TOL)
}

# ---- random / uninitialised outputs: compared on shape/dtype only ----
_RANDOM_NAME_RE = re.compile(
    r"rand|normal|bernoulli|dropout|multinomial|uniform|exponential|cauchy|geometric|"
    r"poisson|rrelu")
# Names the regex matches that are deterministic, with why.
_NOT_RANDOM = {
    "__rand__": "reflected bitwise and",
    "signal.windows.exponential": "exponential window function",
    "nn.functional.normalize": "Lp normalisation",
    "masked.normalize": "Lp normalisation",
    "nn.functional.poisson_nll_loss": "loss on given inputs",
    "native_dropout_backward": "mask is an input",
    "nn.functional.feature_alpha_dropout.without_train": "training=False: identity",
}


def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def random_reason(op) -> str | None:
    """Why this OpInfo's outputs are compared on shape/dtype only (None: on values)."""
    key = op_key(op)
    if key in _NOT_RANDOM or op.name in _NOT_RANDOM:
        return None
    if getattr(op, "has_nondeterministic_output", False):
        return "OpInfo has_nondeterministic_output (random or uninitialised output)"
    if _RANDOM_NAME_RE.search(op.name):
        return "random op (by name: " + _RANDOM_NAME_RE.search(op.name).group(0) + ")"
    return None


def load_op_db():
    from torch.testing._internal.common_methods_invocations import op_db
    return op_db


def select_ops(op_db, names=None):
    """OpInfos by key ("name" or "name.variant"); a bare name selects all its variants."""
    if not names:
        return list(op_db)
    want = set(names)
    out = [op for op in op_db if op_key(op) in want or op.name in want]
    found = {op_key(op) for op in out} | {op.name for op in out}
    missing = sorted(want - found)
    if missing:
        raise SystemExit(f"unknown OpInfo(s): {', '.join(missing)}")
    return out


# ---- time budget ----

class CellTimeout(BaseException):
    """Raised by the timer; a BaseException so an op's own `except Exception` can't eat it."""


def _on_alarm(signum, frame):
    raise CellTimeout()


WALL_FACTOR = 5.0  # wall-clock guard = WALL_FACTOR x the CPU-time budget


@contextlib.contextmanager
def time_budget(seconds):
    """Raises CellTimeout after `seconds` of this process's CPU time (ITIMER_PROF: the
    budget does not shrink when the machine is busy), or after WALL_FACTOR x `seconds`
    of wall-clock time (something blocked without using CPU)."""
    if not seconds or seconds <= 0 or not hasattr(signal, "setitimer"):
        yield
        return
    old_prof = signal.signal(signal.SIGPROF, _on_alarm)
    old_alrm = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_PROF, float(seconds))
    signal.setitimer(signal.ITIMER_REAL, float(seconds) * WALL_FACTOR)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGPROF, old_prof)
        signal.signal(signal.SIGALRM, old_alrm)


# ---- moving samples ----

# Tensor arguments PyTorch requires on CPU whatever the device (OpInfo sample functions
# make them with device="cpu" explicitly): op name -> positional arg indices, reason.
CPU_ARGS = {
    "tensor_split": ((0,), "tensor_indices_or_sections must be a CPU tensor"),
}


def _needs_storage(x):
    """x views a storage larger than itself (offset, gaps): .to() would compact it."""
    try:
        if x.layout != torch.strided or x.numel() == 0:
            return False
        span = 1 + sum((s - 1) * st for s, st in zip(x.shape, x.stride()) if s > 0)
        return x.storage_offset() != 0 or \
            x.untyped_storage().nbytes() != span * x.element_size()
    except Exception:  # noqa: BLE001
        return False


def _tensor_to_tpu(x):
    t = None
    if _needs_storage(x):  # same storage, offset and strides on tpu (as_strided samples)
        try:
            flat = torch.empty(0, dtype=x.dtype).set_(x.untyped_storage())
            t = flat.to("tpu").as_strided(x.shape, x.stride(), x.storage_offset())
        except Exception:  # noqa: BLE001
            t = None
    if t is None:
        t = x.detach().to("tpu")
    t = t.detach()
    if x.requires_grad:
        t.requires_grad_(True)
    return t


def _to_tpu_leaf(x):
    if isinstance(x, torch.Tensor):
        return _tensor_to_tpu(x)
    if isinstance(x, torch.device) and x.type == "cpu":
        return torch.device("tpu")
    if isinstance(x, str) and x in ("cpu", "cpu:0"):  # a device string (e.g. Tensor.to)
        return "tpu"
    return x


def sample_to_tpu(sample, op=None):
    """(input, args, kwargs) copies on tpu.  Device arguments ("cpu", torch.device("cpu"),
    device="cpu") become "tpu", as OpInfo samples made for that device would have;
    tensors that view a larger storage keep their storage, offset and strides."""
    inp = tree_map(_to_tpu_leaf, sample.input)
    keep = CPU_ARGS.get(op.name, ((), ""))[0] if op is not None else ()
    args = tuple(a if i in keep else tree_map(_to_tpu_leaf, a)
                 for i, a in enumerate(sample.args))
    kwargs = {k: tree_map(_to_tpu_leaf, v) for k, v in sample.kwargs.items()}
    return inp, args, kwargs


def sample_is_random(op, sample) -> str | None:
    """A random sample of an otherwise deterministic OpInfo (dropout inside the op)."""
    p = sample.kwargs.get("dropout_p")
    if isinstance(p, (int, float)) and p > 0:
        return f"dropout_p={p}"
    if "attention" in op.name and sample.kwargs.get("training") is True:
        return "attention with training=True (dropout)"
    return None


# OpInfos whose op draws its own random numbers, and the keyword that takes them
# instead: the draws then come from CPU, the same for both sides, and the values
# are compared (rather than shape/dtype only).
_GIVEN_DRAWS = {"nn.functional.fractional_max_pool2d": 2, "nn.functional.fractional_max_pool3d": 3}


def with_given_draws(op, sample, gen):
    """The sample with its op's random draws passed in (_random_samples, (N, C, dims)
    uniform in [0, 1) as the op draws them), drawn from `gen` on CPU."""
    nd = _GIVEN_DRAWS.get(op.name)
    if nd is None or "_random_samples" in sample.kwargs:
        return sample
    x = sample.input
    batch = tuple(x.shape[:-nd]) if x.dim() == nd + 2 else (1, x.shape[0])
    draws = torch.rand(*batch, nd, generator=gen, dtype=x.dtype)
    return SampleInput(x, args=sample.args, kwargs={**sample.kwargs, "_random_samples": draws},
                       output_process_fn_grad=sample.output_process_fn_grad)


def describe_sample(sample, limit=160) -> str:
    def d(x):
        if isinstance(x, torch.Tensor):
            return f"T{list(x.shape)}:{str(x.dtype).replace('torch.', '')}"
        if isinstance(x, (list, tuple)):
            inner = ", ".join(d(v) for v in x)
            return f"[{inner}]" if isinstance(x, list) else f"({inner})"
        if isinstance(x, dict):
            return "{" + ", ".join(f"{k}={d(v)}" for k, v in x.items()) + "}"
        return repr(x)
    parts = [d(sample.input)] + [d(a) for a in sample.args] + \
        [f"{k}={d(v)}" for k, v in sample.kwargs.items()]
    s = ", ".join(parts)
    return s if len(s) <= limit else s[:limit - 3] + "..."


# ---- comparing ----

class Mismatch(Exception):
    def __init__(self, msg, max_abs_err=None):
        super().__init__(msg)
        self.max_abs_err = max_abs_err


def _max_abs_err(a, e):
    if a.numel() == 0:
        return 0.0
    if a.dtype == torch.bool or e.dtype == torch.bool:
        return float((a.to(torch.int64) != e.to(torch.int64)).sum().item() > 0)
    ad = a.to(torch.complex128) if a.is_complex() else a.double()
    ed = e.to(torch.complex128) if e.is_complex() else e.double()
    both_nan = torch.isnan(ad) & torch.isnan(ed)
    diff = (ad - ed).abs()
    diff = torch.where(both_nan, torch.zeros_like(diff), diff)
    same_inf = (ad == ed)
    diff = torch.where(same_inf, torch.zeros_like(diff), diff)
    m = diff.max().item()
    return float("inf") if math.isnan(m) else float(m)


def compare(actual, expected, *, values=True, scale=1.0, path="out"):
    """actual (from tpu) vs expected (from CPU); raises Mismatch.  values=False: only
    structure, shape and dtype (random outputs)."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        a = actual.detach().cpu()
        e = expected.detach()
        if a.dtype != e.dtype:
            raise Mismatch(f"{path}: dtype {a.dtype} != {e.dtype}")
        if a.shape != e.shape:
            raise Mismatch(f"{path}: shape {tuple(a.shape)} != {tuple(e.shape)}")
        if not values:
            return
        if e.layout != torch.strided:
            e = e.to_dense()
            a = a.to_dense()
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **tol(e.dtype, scale))
        except AssertionError as ex:
            err = _max_abs_err(a, e)
            first = str(ex).strip().splitlines()[0] if str(ex).strip() else "values differ"
            raise Mismatch(f"{path}: {first} (max abs err {err:.3g})", err) from None
    elif isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected a sequence of {len(expected)}, got "
                           f"{type(actual).__name__}"
                           f"{'' if not isinstance(actual, (list, tuple)) else ' of ' + str(len(actual))}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, values=values, scale=scale, path=f"{path}[{i}]")
    elif isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare(actual[k], expected[k], values=values, scale=scale, path=f"{path}[{k!r}]")
    else:
        if isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected {type(expected).__name__}, got a tensor")
        if not values:
            return
        if isinstance(expected, float) and isinstance(actual, (int, float)):
            if math.isnan(expected) and math.isnan(actual):
                return
            if math.isclose(actual, expected, rel_tol=1e-5, abs_tol=1e-5):
                return
        if actual != expected:
            raise Mismatch(f"{path}: {actual!r} != {expected!r}")


# ---- classifying exceptions ----

_OVERLOAD_RE = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")


def first_line(e: BaseException, limit=200) -> str:
    s = str(e).strip()
    s = s.splitlines()[0] if s else ""
    return s if len(s) <= limit else s[:limit - 3] + "..."


def unsupported_overload(e: BaseException) -> str | None:
    """The aten overload a torchtpu NotImplementedError names ("" if it names none);
    None if e is not such an error."""
    if not isinstance(e, NotImplementedError):
        return None
    m = _OVERLOAD_RE.search(str(e))
    return m.group(0) if m else ""


# ---- running one cell ----

def _fallbacks():
    return torchtpu.metrics().get("fallbacks", 0)


def _flat_tensors(x):
    return [t for t in tree_flatten(x)[0] if isinstance(t, torch.Tensor)]


def _diff_outputs(out, complex_too=False):
    """Differentiable outputs: floating ones (and complex ones in a complex column)."""
    return [t for t in _flat_tensors(out) if t.requires_grad and t.grad_fn is not None
            and (t.is_floating_point() or (complex_too and t.is_complex()))]


def _grad_inputs(inp, args, kwargs, dtype=torch.float32):
    return [t for t in _flat_tensors((inp, args, kwargs))
            if t.requires_grad and t.dtype == dtype]


# Ops returning (values, indices) whose indices are implementation-defined when values
# tie (int64/bool/bfloat16 samples tie often): indices are accepted when they select
# the same values from the input.  name -> signature giving (dim, keepdim).
_TIE_SIGS = {
    "kthvalue": lambda input, k, dim=-1, keepdim=False: (dim, keepdim),
    "median": lambda input, dim=None, keepdim=False: (dim, keepdim),
    "nanmedian": lambda input, dim=None, keepdim=False: (dim, keepdim),
    "mode": lambda input, dim=-1, keepdim=False: (dim, keepdim),
    "max": lambda input, dim=None, keepdim=False: (dim, keepdim),
    "min": lambda input, dim=None, keepdim=False: (dim, keepdim),
    "sort": lambda input, dim=-1, descending=False, stable=False: (dim, True),
    "topk": lambda input, k, dim=-1, largest=True, sorted=True: (dim, True),
    "cummax": lambda input, dim: (dim, True),
    "cummin": lambda input, dim: (dim, True),
}


def _argsort_tie_ok(sample, actual, expected):
    """argsort (not stable): indices that order the input the same way."""
    try:
        dim, stable = (lambda input, dim=-1, descending=False, stable=False: (dim, stable))(
            sample.input, *sample.args, **sample.kwargs)
        a = actual.cpu()
        if stable or a.shape != expected.shape or a.dtype != expected.dtype:
            return False
        inp = sample.input
        if inp.dim() == 0:
            return torch.equal(a, expected)
        pa, pe = inp.gather(dim, a), inp.gather(dim, expected)
        return bool(((pa == pe) | (pa != pa) & (pe != pe)).all()) and \
            torch.equal(a.sort(dim).values, expected.sort(dim).values)
    except Exception:  # noqa: BLE001
        return False


def _tie_ok(op, sample, actual, expected, scale):
    """True if actual's indices differ from expected's only by the choice among tied
    values (values match, and input.gather(dim, indices) gives the values)."""
    if op.name == "argsort":
        return _argsort_tie_ok(sample, actual, expected)
    sig = _TIE_SIGS.get(op.name)
    if sig is None or not isinstance(expected, (tuple, list)) or len(expected) != 2:
        return False
    try:
        dim, keepdim = sig(sample.input, *sample.args, **sample.kwargs)
    except TypeError:
        return False
    if not isinstance(dim, int) or not isinstance(actual, (tuple, list)) or len(actual) != 2:
        return False
    values, idx = actual
    try:
        compare(values, expected[0], scale=scale, path="out[0]")
        compare(idx, expected[1], values=False, path="out[1]")
    except Mismatch:
        return False
    inp, v, i = sample.input, values.detach().cpu(), idx.cpu()
    if inp.dim() == 0:
        return False
    if not keepdim:
        v, i = v.unsqueeze(dim), i.unsqueeze(dim)
    try:
        picked = inp.gather(dim, i)
    except Exception:  # noqa: BLE001  (index out of range: wrong indices)
        return False
    return torch.equal(picked, v) or bool(((picked == v) | (picked != picked) & (v != v)).all())


def _upcast(x):
    if isinstance(x, torch.Tensor) and x.dtype in ARBITRATED:
        return x.detach().double()
    return x


def _closer_to_float64(op, sample, actual, expected):
    """float64 arbiter: True if every float output element of tpu is no farther from the
    op's float64 result (inputs upcast, exactly representable) than CPU's result is,
    up to TOL of the output's dtype.  Accumulation order and intermediate rounding
    differ between PyTorch's CPU kernels and XLA; neither is the reference then
    (nor is a CPU NaN where float64 is finite: matrix_exp overflows in bf16 on CPU)."""
    try:
        ref = op(tree_map(_upcast, sample.input), *tree_map(_upcast, tuple(sample.args)),
                 **{k: tree_map(_upcast, v) for k, v in sample.kwargs.items()})
    except Exception:  # noqa: BLE001
        return False
    fa, fe, fr = (_flat_tensors(x) for x in (actual, expected, ref))
    if not (len(fa) == len(fe) == len(fr)) or not fe:
        return False
    half = [e.dtype for e in fe if e.dtype in ARBITRATED]
    t = TOL[half[0] if half else torch.bfloat16]
    for a, e, r in zip(fa, fe, fr):
        a = a.detach().cpu()
        if e.dtype not in ARBITRATED:
            try:
                compare(a, e)
            except Mismatch:
                return False
            continue
        if not _no_farther(a, e, r, t):
            return False
    return True


def _no_farther(a, e, r, t) -> bool:
    """Every element of a (tpu) no farther from r (float64) than e (CPU) is, up to the
    tolerance t of e's dtype; or else, where float64 is finite, tpu's largest error
    no larger than CPU's largest (an ill-conditioned sample: both are off by the same
    amount, at different elements, because their summation orders differ) and
    elsewhere each element as above."""
    if r.shape != e.shape or not r.is_floating_point():
        return False
    r = r.double()
    ea, ee = (a.double() - r).abs(), (e.double() - r).abs()
    # A NaN from CPU where float64 is finite is CPU's failure: tpu must then be
    # within TOL of float64 itself.
    ee = torch.where(torch.isnan(ee) & ~torch.isnan(r), torch.zeros_like(ee), ee)
    # Past the dtype's range the right answer is inf of float64's sign.
    over = torch.isinf(a.double()) & (r.abs() > torch.finfo(e.dtype).max) & (a.double().sign() == r.sign())
    ok = (ea <= ee + t["atol"] + t["rtol"] * r.abs()) | (a.double() == e.double()) | \
         (torch.isnan(a.double()) & torch.isnan(r)) | over
    if bool(ok.all()):
        return True
    fin = torch.isfinite(r)
    if not bool(ok[~fin].all()) or not bool(fin.any()):
        return False
    return bool(ea[fin].max() <= ee[fin].max())


def _upcast_leaf(x):
    """float32 leaves that require grad stay leaves (float64, requiring grad)."""
    if isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.requires_grad:
        return x.detach().double().requires_grad_()
    return _upcast(x)


def _grads_closer_to_float64(op, sample, cots, grads_t, grads_c):
    """The float64 arbiter for gradients: the same sample with float64 inputs and the
    same cotangents; True if every tpu gradient element is no farther from float64's
    than CPU's is, up to TOL[float32]."""
    try:
        inp = tree_map(_upcast_leaf, sample.input)
        args = tree_map(_upcast_leaf, tuple(sample.args))
        kwargs = {k: tree_map(_upcast_leaf, v) for k, v in sample.kwargs.items()}
        leaves = [x for x in _flat_tensors((inp, args, kwargs))
                  if x.requires_grad and x.dtype == torch.float64]
        outs = _diff_outputs(sample.output_process_fn_grad(op(inp, *args, **kwargs)))
        if len(outs) != len(cots) or len(leaves) != len(grads_c):
            return False
        grads_r = torch.autograd.grad(outs, leaves, [c.double() for c in cots], allow_unused=True)
    except Exception:  # noqa: BLE001
        return False
    for gt, gc, gr in zip(grads_t, grads_c, grads_r):
        if gt is None or gc is None or gr is None:
            if not (gt is None and gc is None):
                return False
            continue
        if not _no_farther(gt.detach().cpu(), gc, gr, TOL[torch.float32]):
            return False
    return True


def _run_fwd_sample(op, sample, values, scale, dtype, res):
    """Returns None on pass, or raises.  CPU failure -> _CpuFailed."""
    tpu_inp, tpu_args, tpu_kwargs = sample_to_tpu(sample, op)  # before CPU mutates inputs
    # output_process_fn_grad on both sides, as PyTorch's test_compare_cpu does: it
    # removes what the op leaves unspecified (eigenvector and singular vector signs)
    # and is the identity for almost every OpInfo.
    try:
        expected = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
    except Exception as e:  # noqa: BLE001
        raise _CpuFailed(e) from None
    actual = sample.output_process_fn_grad(op(tpu_inp, *tpu_args, **tpu_kwargs))
    torchtpu.synchronize()
    try:
        compare(actual, expected, values=values, scale=scale)
    except Mismatch:
        if values and _tie_ok(op, sample, actual, expected, scale):
            res["samples_tie_indices"] = res.get("samples_tie_indices", 0) + 1
            return
        if values and dtype in ARBITRATED and _closer_to_float64(op, sample, actual,
                                                                     expected):
            res["samples_float64_arbiter"] = res.get("samples_float64_arbiter", 0) + 1
            return
        raise


def _run_bwd_sample(op, sample, values, scale, gen, dtype=torch.float32):
    tpu_inp, tpu_args, tpu_kwargs = sample_to_tpu(sample, op)
    cpu_leaves = _grad_inputs(sample.input, sample.args, sample.kwargs, dtype)
    tpu_leaves = _grad_inputs(tpu_inp, tpu_args, tpu_kwargs, dtype)
    complex_too = dtype.is_complex
    if not cpu_leaves:
        raise _NothingToCompare(f"no {dtype} input requires grad")
    if len(cpu_leaves) != len(tpu_leaves):
        raise Mismatch(f"{len(tpu_leaves)} tpu grad inputs vs {len(cpu_leaves)} on CPU")
    try:
        out_c = sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
        outs_c = _diff_outputs(out_c, complex_too)
        if not outs_c:
            raise _NothingToCompare("no differentiable float output")
        cots = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs_c]
        grads_c = torch.autograd.grad(outs_c, cpu_leaves, cots, allow_unused=True)
    except _NothingToCompare:
        raise
    except Exception as e:  # noqa: BLE001
        raise _CpuFailed(e) from None
    out_t = sample.output_process_fn_grad(op(tpu_inp, *tpu_args, **tpu_kwargs))
    outs_t = _diff_outputs(out_t, complex_too)
    if len(outs_t) != len(outs_c):
        raise Mismatch(f"{len(outs_t)} differentiable outputs on tpu vs {len(outs_c)} on CPU")
    grads_t = torch.autograd.grad(outs_t, tpu_leaves, [c.to("tpu") for c in cots],
                                  allow_unused=True)
    torchtpu.synchronize()
    try:
        for i, (gt, gc) in enumerate(zip(grads_t, grads_c)):
            if gc is None and gt is None:
                continue
            if gc is None:  # CPU: unused input; tpu must give zeros (or None)
                gc = torch.zeros(cpu_leaves[i].shape, dtype=cpu_leaves[i].dtype)
            if gt is None:
                raise Mismatch(f"grad[{i}]: None on tpu, a tensor on CPU")
            compare(gt, gc, values=values, scale=scale, path=f"grad[{i}]")
    except Mismatch:
        if values and _grads_closer_to_float64(op, sample, cots, grads_t, grads_c):
            return "float64_arbiter"
        raise


class _CpuFailed(Exception):
    def __init__(self, e):
        super().__init__(f"{type(e).__name__}: {first_line(e)}")


class _NothingToCompare(Exception):
    pass


def run_cell(op, dtype_name: str, mode: str, *, max_samples=DEFAULT_MAX_SAMPLES,
             timeout=DEFAULT_TIMEOUT) -> dict:
    """Runs one OpInfo x dtype x mode; never raises (except KeyboardInterrupt)."""
    dtype = DTYPES[dtype_name]
    t0 = time.monotonic()
    res = dict(status="skipped", reason="", samples_run=0, samples_passed=0,
               samples_cpu_failed=0, samples_skipped=0, max_samples=max_samples)
    rnd = random_reason(op)
    if rnd:
        res["compare"] = "shape/dtype only: " + rnd
    key = op_key(op)
    scale, scale_reason = TOL_SCALE.get(key, (1.0, None))
    if scale_reason:
        res["tol_scale"] = [scale, scale_reason]

    def done(status, reason=""):
        res["status"] = status
        res["reason"] = reason
        res["time_s"] = round(time.monotonic() - t0, 3)
        return res

    try:
        if dtype not in op.supported_dtypes("cpu"):
            return done("skipped", f"OpInfo does not support {dtype_name} on CPU")
        if mode == "bwd":
            if not op.supports_autograd:
                return done("skipped", "OpInfo does not support autograd")
            if dtype not in op.supported_backward_dtypes("cpu"):
                return done("skipped", f"OpInfo has no {dtype_name} backward on CPU")
    except Exception as e:  # noqa: BLE001
        return done("skipped", f"OpInfo dtype query failed: {type(e).__name__}: {first_line(e)}")

    unsupported: list[str] = []
    unsupported_msgs: list[str] = []
    cpu_fail_msgs: list[str] = []
    fb0 = _fallbacks()
    torch.manual_seed(SEED)
    gen = torch.Generator().manual_seed(SEED)
    values = rnd is None
    try:
        with time_budget(timeout):
            samples = op.sample_inputs("cpu", dtype, requires_grad=(mode == "bwd"))
            for i, sample in enumerate(itertools.islice(samples, max_samples)):
                sample = with_given_draws(op, sample, gen)
                sv = values
                if values and sample_is_random(op, sample):
                    sv = False
                    res["samples_shape_only"] = res.get("samples_shape_only", 0) + 1
                    res.setdefault("shape_only_reason",
                                   "random sample: " + sample_is_random(op, sample))
                try:
                    if mode == "fwd":
                        _run_fwd_sample(op, sample, sv, scale, dtype, res)
                    else:
                        if _run_bwd_sample(op, sample, sv, scale, gen, dtype) == "float64_arbiter":
                            res["samples_float64_arbiter"] = res.get("samples_float64_arbiter", 0) + 1
                except _CpuFailed as e:
                    res["samples_cpu_failed"] += 1
                    if len(cpu_fail_msgs) < 3:
                        cpu_fail_msgs.append(str(e))
                    continue
                except _NothingToCompare as e:
                    res["samples_skipped"] += 1
                    res.setdefault("skip_reason", str(e))
                    continue
                except Mismatch as e:
                    res["samples_run"] += 1
                    res.update(sample=i, sample_desc=describe_sample(sample),
                               max_abs_err=e.max_abs_err)
                    _add_unsupported(res, unsupported, unsupported_msgs)
                    return done("fail", f"wrong values: {e}" if e.max_abs_err is not None
                                else f"wrong result: {e}")
                except Exception as e:  # noqa: BLE001
                    res["samples_run"] += 1
                    ov = unsupported_overload(e)
                    if ov is not None:
                        if ov and ov not in unsupported:
                            unsupported.append(ov)
                        msg = first_line(e)
                        if msg not in unsupported_msgs:
                            unsupported_msgs.append(msg)
                        res.setdefault("sample", i)
                        res.setdefault("sample_desc", describe_sample(sample))
                        continue
                    res.update(sample=i, sample_desc=describe_sample(sample),
                               exception=type(e).__name__, exception_text=first_line(e))
                    _add_unsupported(res, unsupported, unsupported_msgs)
                    return done("fail", f"{type(e).__name__}: {first_line(e)}")
                res["samples_run"] += 1
                res["samples_passed"] += 1
        fb = _fallbacks() - fb0
        if fb:
            return done("fail", f"{fb} silent CPU fallback(s) (metrics()['fallbacks'])")
        if cpu_fail_msgs:
            res["cpu_fail_examples"] = cpu_fail_msgs
        if unsupported_msgs:
            _add_unsupported(res, unsupported, unsupported_msgs)
            return done("unsupported", "NotImplementedError: " + (
                ", ".join(unsupported) if unsupported else unsupported_msgs[0]))
        if res["samples_run"] == 0:
            if res["samples_cpu_failed"]:
                return done("skipped", "CPU itself fails on every sample ("
                            + cpu_fail_msgs[0] + ")")
            if res["samples_skipped"]:
                return done("skipped", res["skip_reason"])
            return done("skipped", "OpInfo has no samples for this dtype")
        return done("pass", "" if values else res.get("compare", ""))
    except CellTimeout:
        _add_unsupported(res, unsupported, unsupported_msgs)
        return done("timeout", f"timeout: over the budget of {timeout:g} s CPU time "
                    f"(or {timeout * WALL_FACTOR:g} s wall) after {res['samples_run']} samples")
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001  (sample generation etc.)
        tb = traceback.extract_tb(e.__traceback__)
        where = f"{os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else "?"
        return done("fail" if res["samples_run"] else "skipped",
                    f"harness/sample error {type(e).__name__}: {first_line(e)} at {where}")


def _add_unsupported(res, overloads, msgs):
    if overloads:
        res["unsupported_overloads"] = list(overloads)
    if msgs:
        res["unsupported_messages"] = list(msgs)[:5]


def run_op(op, columns=COLUMNS, *, max_samples=DEFAULT_MAX_SAMPLES,
           timeout=DEFAULT_TIMEOUT) -> dict:
    """All cells of one OpInfo: {"dtype/mode": cell}."""
    cells = {}
    for dtype_name, mode in columns:
        cells[f"{dtype_name}/{mode}"] = run_cell(op, dtype_name, mode,
                                                 max_samples=max_samples, timeout=timeout)
    return cells


def op_entry(op, cells) -> dict:
    return dict(name=op.name, variant=op.variant_test_name,
                random=random_reason(op), cells=cells)
