"""Float32 numerics measured against a float64 reference (issue 7, defect 2).

PyTorch's float32 CPU kernels are not the truth: they round too. Each test here
computes the op three times from the same float32 inputs - in float64 on the CPU
(the reference), in float32 on the CPU and in float32 on tpu - and requires the
tpu's error to be no larger than the CPU kernel's, within a stated slack.

Metric: the RMS of (result - reference) over the whole output, relative to the mean
|reference|. The max error over a tensor is one element's last-bit rounding, which
two correct implementations that round in different orders trade back and forth;
the RMS over thousands of elements measures the systematic part (an f32
accumulator losing bits as n grows, a rounded mean shifting every output).

Slack: tpu_err <= SLACK * cpu_err + FLOOR. SLACK = 1.25 for the reductions (after
the fix the measured ratios are 0.02-1.1; before it, XLA's plain float32 reduce
gave sum 1.3-1.5x, var/std 1.9-3x, softmax 1.4-1.7x, group_norm 2.4x, batch_norm
12x, cumsum 1.55x); 1.5 for layer norm as the issue asks. FLOOR = 1e-9 (relative)
only keeps a 0-vs-0 comparison from failing.
"""
import math

import pytest
import torch
import torch.nn.functional as F

SLACK = 1.25
SLACK_LN = 1.5
FLOOR = 1e-9


def _cotangent(shape, seed=5):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _run(fn, inputs, device, dtype, grad):
    """fn's output (and the gradients of every input for a fixed cotangent) as float64 CPU tensors."""
    ins = [x.to(dtype).to(device).requires_grad_(grad) for x in inputs]
    y = fn(*ins)
    outs = [y]
    if grad:
        outs += list(torch.autograd.grad(y, ins, _cotangent(y.shape).to(dtype).to(device)))
    return [o.detach().cpu().double() for o in outs]


def _rel_rms(x, ref):
    return ((x - ref).square().mean().sqrt() / ref.abs().mean().clamp_min(1e-30)).item()


def _rel_max(x, ref):
    return ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def errors(fn, inputs, grad=False):
    """[(cpu_err, tpu_err, max_cpu, max_tpu)] per output (y, then each input's grad) against float64."""
    ref = _run(fn, inputs, "cpu", torch.float64, grad)
    cpu = _run(fn, inputs, "cpu", torch.float32, grad)
    tpu = _run(fn, inputs, "tpu", torch.float32, grad)
    return [(_rel_rms(c, r), _rel_rms(t, r), _rel_max(c, r), _rel_max(t, r)) for r, c, t in zip(ref, cpu, tpu)]


def assert_as_accurate(errs, slack, names=None):
    for i, (ec, et, _, _) in enumerate(errs):
        what = names[i] if names else f"output {i}"
        assert et <= slack * ec + FLOOR, (
            f"{what}: tpu error vs float64 {et:.3e} > {slack} x cpu error {ec:.3e} ({et / max(ec, 1e-30):.2f}x)")


def _f32(*shape, offset=0.0, scale=1.0, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale + offset).float()


# ------------------------------------------------------------ (a) layer norm

@pytest.mark.parametrize("n", [64, 768])
def test_layer_norm_large_mean_vs_float64(n):
    """x = 1000 + randn: the statistics' accuracy decides every output. Before the
    fix the tpu forward was 1.7x (n=64) and 3.1x (n=768), grad_weight 2.5x (n=768)
    further from float64 than the CPU's (RMS); after, 0.4-0.7x. The mean is now an
    accurate sum divided once."""
    x, w, b = _f32(64, n, offset=1000.0), _f32(n, seed=1), _f32(n, seed=2)
    errs = errors(lambda x, w, b: F.layer_norm(x, (n,), w, b), [x, w, b], grad=True)
    assert_as_accurate(errs, SLACK_LN, ["out", "grad_input", "grad_weight", "grad_bias"])
    # The largest single error too (one element's rounding, hence the same slack
    # plus 4 ulp of the output scale).
    for i, (_, _, mc, mt) in enumerate(errs):
        assert mt <= SLACK_LN * mc + 4 * 2.0**-23, f"output {i}: max error {mt:.3e} vs cpu {mc:.3e}"


def test_layer_norm_unit_inputs_vs_float64():
    x, w, b = _f32(128, 768), _f32(768, seed=1), _f32(768, seed=2)
    errs = errors(lambda x, w, b: F.layer_norm(x, (768,), w, b), [x, w, b], grad=True)
    assert_as_accurate(errs, SLACK_LN, ["out", "grad_input", "grad_weight", "grad_bias"])


# -------------------------------------------------- (b) OpInfo layer norm

def _opinfo_layer_norm_samples():
    from torch.testing._internal.common_methods_invocations import op_db
    op = next(o for o in op_db if o.name == "nn.functional.layer_norm")
    return op, list(op.sample_inputs("cpu", torch.float32, requires_grad=True))


def _sample_call(op, s, device, dtype):
    def conv(t):
        if not isinstance(t, torch.Tensor):
            return t
        return t.detach().to(dtype).to(device).requires_grad_(True)
    args = [conv(s.input)] + [conv(a) for a in s.args]
    kwargs = {k: conv(v) for k, v in s.kwargs.items()}
    leaves = [t for t in args + list(kwargs.values()) if isinstance(t, torch.Tensor)]
    y = op(*args, **kwargs)
    gs = torch.autograd.grad(y, leaves, _cotangent(y.shape, seed=3).to(dtype).to(device))
    return [t.detach().cpu().double() for t in (y,) + gs]


def test_layer_norm_opinfo_backward_float32_tolerance():
    """Every OpInfo layer_norm sample, forward and all gradients, within PyTorch's
    float32 tolerance (rtol 1.3e-6, atol 1e-5) of the float64 result. (CPU float32
    misses it on the one-element samples - xhat is 0 there in exact arithmetic and
    the CPU kernel's x*rstd - mean*rstd leaves ~1e-5 of noise in grad_weight - so
    float64, not CPU, is the reference.)"""
    op, samples = _opinfo_layer_norm_samples()
    assert samples
    for i, s in enumerate(samples):
        ref = _sample_call(op, s, "cpu", torch.float64)
        tpu = _sample_call(op, s, "tpu", torch.float32)
        for k, (t, r) in enumerate(zip(tpu, ref)):
            torch.testing.assert_close(t, r, rtol=1.3e-6, atol=1e-5,
                                       msg=lambda m: f"sample {i} {tuple(s.input.shape)} output {k}: {m}")


# ---------------------------------------------------- (c) the other ops fixed

_CASES = {
    # name: (fn, inputs, grad)
    "sum_rows_64": (lambda x: x.sum(1), [_f32(256, 64, offset=1.0, scale=2.0)], False),
    "sum_rows_768": (lambda x: x.sum(1), [_f32(256, 768, offset=1.0, scale=2.0)], False),
    "sum_cols_768": (lambda x: x.sum(0), [_f32(768, 256, offset=1.0, scale=2.0)], False),
    "mean_rows_768": (lambda x: x.mean(1), [_f32(256, 768, offset=1.0, scale=2.0)], False),
    "var_64": (lambda x: x.var(1), [_f32(256, 64, offset=100.0, scale=2.0)], False),
    "var_768": (lambda x: x.var(1), [_f32(256, 768, offset=100.0, scale=2.0)], False),
    "std_768": (lambda x: x.std(1), [_f32(256, 768, offset=100.0, scale=2.0)], False),
    "var_mean_4096": (lambda x: torch.var_mean(x, 1)[0], [_f32(64, 4096, offset=100.0, scale=2.0)], False),
    "softmax_64": (lambda x: x.softmax(1), [_f32(256, 64, offset=1.0, scale=6.0)], True),
    "softmax_768": (lambda x: x.softmax(1), [_f32(256, 768, offset=1.0, scale=6.0)], True),
    "log_softmax_64": (lambda x: x.log_softmax(1), [_f32(256, 64, offset=1.0, scale=6.0)], True),
    "group_norm": (lambda x: F.group_norm(x, 4), [_f32(8, 32, 256, offset=50.0)], True),
    "batch_norm": (lambda x: F.batch_norm(x, None, None, training=True), [_f32(64, 16, 64, offset=50.0)], True),
    "cumsum_4096": (lambda x: x.cumsum(1), [_f32(16, 4096, offset=3.0)], False),
    "cross_entropy": (lambda x: F.cross_entropy(x, torch.arange(4096, device=x.device) % 10),
                      [_f32(4096, 10)], True),
    "vector_norm_1": (lambda x: torch.linalg.vector_norm(x, 1, dim=1), [_f32(64, 4096, offset=3.0)], False),
}


@pytest.mark.parametrize("name", sorted(_CASES))
def test_op_as_accurate_as_cpu(name):
    fn, inputs, grad = _CASES[name]
    assert_as_accurate(errors(fn, inputs, grad), SLACK)


def test_batch_norm_backward_params_vs_float64():
    x, w, b = _f32(64, 16, 64, offset=50.0), _f32(16, seed=1), _f32(16, seed=2)
    errs = errors(lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True), [x, w, b], grad=True)
    assert_as_accurate(errs, SLACK, ["out", "grad_input", "grad_weight", "grad_bias"])


# Special values: the mathematically defined results (not the CPU kernel's).
_SPECIAL = [
    ("sum inf", lambda x: x.sum(), [math.inf, 1.0, 2.0], math.inf),
    ("sum inf-inf", lambda x: x.sum(), [math.inf, -math.inf, 2.0], math.nan),
    ("sum nan", lambda x: x.sum(), [math.nan, 1.0, 2.0], math.nan),
    ("sum overflow", lambda x: x.sum(), [3e38, 3e38, 1.0], math.inf),
    ("sum -0", lambda x: x.sum(), [-0.0, -0.0], 0.0),
    ("sum cancel", lambda x: x.sum(), [1e8, 1.0, -1e8, 1.0], 2.0),  # exact; f32 left to right gives 1
    ("mean inf", lambda x: x.mean(), [math.inf, 1.0], math.inf),
    ("var inf", lambda x: x.var(), [math.inf, 1.0, 2.0], math.nan),
    ("logsumexp -inf", lambda x: x.logsumexp(0), [-math.inf, -math.inf], -math.inf),
    ("cumsum last", lambda x: x.cumsum(0)[-1], [1e8, 1.0, -1e8, 1.0], 2.0),
    ("cumsum inf", lambda x: x.cumsum(0)[1], [1.0, math.inf, -math.inf], math.inf),
]


@pytest.mark.parametrize("case", _SPECIAL, ids=[c[0] for c in _SPECIAL])
def test_accurate_sum_special_values(case):
    _, fn, values, want = case
    got = fn(torch.tensor(values, dtype=torch.float32, device="tpu")).item()
    if math.isnan(want):
        assert math.isnan(got), got
    else:
        assert got == want and math.copysign(1.0, got) == math.copysign(1.0, want), got


def test_accurate_sum_empty_and_masked_rows():
    x = torch.zeros(3, 0, device="tpu")
    assert x.sum(1).cpu().tolist() == [0.0, 0.0, 0.0]
    assert all(math.isnan(v) for v in x.mean(1).cpu().tolist())
    # A fully masked attention row: _softmax gives NaN (0/0), the masked entries 0.
    m = torch.tensor([[-math.inf, -math.inf], [0.0, -math.inf]], device="tpu").softmax(-1).cpu()
    assert torch.isnan(m[0]).all() and m[1].tolist() == [1.0, 0.0]


# ------------------------------------------------ (d) CLIP text encoder

def _clip(nl, impl, seed=0):
    from transformers import CLIPTextConfig, CLIPTextModel
    torch.manual_seed(seed)
    cfg = CLIPTextConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=nl, num_attention_heads=4,
                         vocab_size=1000, max_position_embeddings=64, attn_implementation=impl)
    model = CLIPTextModel(cfg)
    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(seed + 1))
    return model, ids


def _clip_fwd_bwd(model, ids, device):
    import copy
    m = copy.deepcopy(model).to(device)
    out = m(input_ids=ids.to(device)).last_hidden_state
    # A loss whose gradient reaches every parameter (a plain .sum() of a layer
    # norm's output has zero gradient upstream in exact arithmetic).
    w = torch.linspace(-1, 1, out.shape[-1], dtype=out.dtype, device=device)
    (out * w).square().sum().backward()
    grads = {n: p.grad.detach().cpu().double() for n, p in m.named_parameters() if p.grad is not None}
    return out.detach().cpu().double(), grads


CLIP_CONFIGS = [(1, "eager"), (1, "sdpa"), (2, "eager"), (2, "sdpa")]


@pytest.mark.parametrize("nl,impl", CLIP_CONFIGS)
def test_clip_text_matches_cpu(nl, impl):
    """Forward max|tpu - cpu| <= 1e-5 max|cpu|; every parameter's gradient
    max|g_tpu - g_cpu| <= 1e-4 max(max|g_cpu|, 1e-3 G), G the largest gradient of
    the model (the floor as in tests/models/checks.py: some gradients, e.g. the key
    bias under softmax's shift invariance, are rounding noise). Measured: forward
    ~2e-7, gradients <= 4e-6."""
    model, ids = _clip(nl, impl)
    oc, gc = _clip_fwd_bwd(model, ids, "cpu")
    ot, gt = _clip_fwd_bwd(model, ids, "tpu")
    assert (ot - oc).abs().max() <= 1e-5 * oc.abs().max()
    G = max(g.abs().max().item() for g in gc.values())
    assert gc.keys() == gt.keys()
    for n in gc:
        denom = max(gc[n].abs().max().item(), 1e-3 * G)
        err = (gt[n] - gc[n]).abs().max().item() / denom
        assert err <= 1e-4, f"{n}: gradient differs by {err:.2e} of its scale"


@pytest.mark.parametrize("nl,impl", CLIP_CONFIGS)
def test_clip_text_large_activations_vs_float64(nl, impl):
    """The residual stream of trained CLIP models carries large values; here every
    token embedding is shifted by +100, so each layer norm sees inputs with a large
    mean. Forward output and the largest gradient error (over all parameters,
    relative to the largest gradient G) against the float64 model: tpu <= 1.25x the
    CPU's. Before the fix, 1 layer: forward 1.44x, gradients 1.37x the CPU's error;
    after: 0.57x and 0.66x (2 layers: 0.60x, 0.87x)."""
    model, ids = _clip(nl, impl)
    with torch.no_grad():
        model.embeddings.token_embedding.weight.add_(100.0)
    import copy
    o64, g64 = _clip_fwd_bwd(copy.deepcopy(model).double(), ids, "cpu")
    oc, gc = _clip_fwd_bwd(model, ids, "cpu")
    ot, gt = _clip_fwd_bwd(model, ids, "tpu")
    fc, ft = (oc - o64).abs().max().item(), (ot - o64).abs().max().item()
    assert ft <= SLACK * fc, f"forward: tpu error {ft:.3e} vs cpu {fc:.3e}"
    G = max(g.abs().max().item() for g in g64.values())
    ec = max((gc[n] - g64[n]).abs().max().item() for n in g64) / G
    et = max((gt[n] - g64[n]).abs().max().item() for n in g64) / G
    assert et <= SLACK * ec, f"gradients: tpu error {et:.3e} G vs cpu {ec:.3e} G"
