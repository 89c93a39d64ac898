"""Parity checks of one Hugging Face model on "tpu" against PyTorch on CPU.

Every check starts from the same weights: the model is built once on CPU with a fixed
seed (`build_base`), and each check deep-copies that pristine model twice, keeping one
copy on CPU and moving the other with `.to("tpu")`.

Tolerances (stated once, here, with the reason):

float32
  forward   max|tpu - cpu| / max|cpu| <= 1e-4 over the compared output (logits).
            XLA's CPU kernels sum and evaluate transcendental functions in a different
            order than ATen's; the per-op difference is ~1e-6 relative and grows
            roughly linearly with depth; 1e-4 leaves that room for our 2-layer models
            and still catches a wrong op (an error of even one unit in one element of
            a 1e-2-scaled logit is 1e-2).
  loss      |tpu - cpu| / |cpu| <= 1e-4 (the same reasoning, a scalar).
  grads     per parameter: max|g_tpu - g_cpu| / max(max|g_cpu|, 1e-3 * G) <= 1e-3, where
            G is the largest |gradient| of the whole model. Backward sums many more
            terms than forward (1e-3 instead of 1e-4). The floor 1e-3 * G exists because
            some gradients are exactly zero in exact arithmetic (the key-projection bias
            under softmax's shift invariance; attention to padded positions): there
            the CPU reference is rounding noise of the terms it sums (~1e-7 G), and
            comparing noise with noise relative to itself means nothing.
  train     5 AdamW steps (lr 1e-3): the loss curve within 1e-3 relative; final
            parameters: max|p_tpu - p_cpu| <= 0.05 * lr * steps per parameter (5%
            of the largest possible Adam movement). Adam divides each gradient by its
            own running RMS, so an element whose gradient is noise (see grads) moves
            by up to lr per step in a direction set by rounding: parameters whose CPU
            gradients at step 1 are all below the noise floor 1e-5 * G are reported
            but only held to |diff| <= 2 * lr * steps (bounded movement).
  generate  greedy tokens identical. At the first differing token the CPU logits are
            consulted: if the two tokens' logits differ by <= 1e-4 * max|logits| it is
            a near-tie that any rounding can flip, reported as `tie` (pass); otherwise
            a failure.
  routing   MoE routers choose experts with topk; PyTorch leaves the order of equal
            elements unspecified, so an exact tie in the router scores may send a
            token to different experts on CPU and tpu (TopkRecorder). A failing
            fwd/bwd/train check whose first differing topk choice is such a tie
            (CPU scores within the `tie` margin) passes, reported as `tie`; a topk
            that differs without a tie is named in the failure.

bfloat16 autocast (torch.autocast("tpu") vs torch.autocast("cpu"))
  Matmuls and convolutions round their outputs to bfloat16 (8 bits of mantissa,
  relative step 2**-8 = 3.9e-3); one unit of difference in one rounded intermediate
  changes the next matmul's inputs, so differences of a few units accumulate over the
  layers. Direct tolerances: forward 3e-2 relative to max|cpu| (about 8 units), loss
  2e-2, grads 1e-1 (backward through bfloat16 activations doubles the rounded steps and
  sums many of them: bias gradients are sums over all tokens), train loss curve 5e-2,
  params 0.5 * lr * steps; generate with the near-tie margin 3e-2.
  A value over its direct tolerance still passes when tpu's bf16 result is no further
  from the float32 CPU result than BF16_REF_FACTOR = 2 times CPU's bf16 result is
  (`bf16_excused`): both are bf16 approximations of the same float32 computation with
  independent rounding, so their distance can reach twice either's error. Such cells
  list the excused tensors with both errors.
  Training parameters get one more, aggregate, escape: Adam's first steps move every
  element by about lr whatever its gradient's size, so an element whose bf16 gradient
  is small flips direction at random and single parameters can end 10x further from
  float32 training on either side (measured on CLIP: per-parameter ratios from 0.1 to
  10 both ways). All parameters together are stable: the bf16 train check passes when
  ||P_tpu - P_f32|| <= 2 ||P_cpu - P_f32|| over all (non-noise) parameters; the
  per-parameter outliers are then listed as a note.
"""
from __future__ import annotations

import copy
import math
import re
import time
import traceback

import torch

from models import shrink

TOL = {
    "f32": dict(fwd=1e-4, loss=1e-4, grad=1e-3, grad_floor=1e-3, train_loss=1e-3,
                train_param=0.05, tie=1e-4),
    "bf16": dict(fwd=3e-2, loss=2e-2, grad=1e-1, grad_floor=1e-3, train_loss=5e-2,
                 train_param=0.5, tie=3e-2),
}
LR = 1e-3
STEPS = 5
NOISE_FLOOR = 1e-5
BF16_REF_FACTOR = 2.0
MAX_NEW_TOKENS = 8

_AUTO = {
    "causal_lm": "AutoModelForCausalLM",
    "masked_lm": "AutoModelForMaskedLM",
    "seq2seq_lm": "AutoModelForSeq2SeqLM",
    "speech_seq2seq": "AutoModelForSpeechSeq2Seq",
    "ctc": "AutoModelForCTC",
    "image_cls": "AutoModelForImageClassification",
    "audio_cls": "AutoModelForAudioClassification",
    "seq_cls": "AutoModelForSequenceClassification",
    "token_cls": "AutoModelForTokenClassification",
    "qa": "AutoModelForQuestionAnswering",
    "contrastive": "AutoModel",
}
GENERATIVE = {"causal_lm", "seq2seq_lm", "speech_seq2seq"}


# ---- errors ----

_OP_RE = re.compile(r"aten::[A-Za-z0-9_]+(?:\.[A-Za-z0-9_]+)?")


def describe_error(e: BaseException) -> dict:
    """The failing aten op (from torchtpu's NotImplementedError / lowering error), the
    message head and the innermost transformers frame that called it."""
    msg = f"{type(e).__name__}: {e}".strip()
    m = _OP_RE.search(msg)
    where = ""
    for fr in reversed(traceback.extract_tb(e.__traceback__)):
        if "transformers" in fr.filename or "torch/nn" in fr.filename:
            where = f"{fr.filename.split('site-packages/')[-1]}:{fr.lineno} ({fr.name})"
            break
    return {"error": msg.splitlines()[0][:400] if msg else type(e).__name__,
            "op": m.group(0) if m else None, "where": where}


# ---- models and inputs ----

def auto_class(task):
    import transformers
    return getattr(transformers, _AUTO[task])


def build_base(config, task, attn, seed=0):
    """The pristine CPU model (fixed seed), in eval mode."""
    torch.manual_seed(seed)
    kw = {"attn_implementation": attn} if attn else {}
    model = auto_class(task).from_config(config, **kw)
    return model.eval()


def pair(base):
    cpu = copy.deepcopy(base)
    dev = copy.deepcopy(base).to("tpu")
    return cpu, dev


def make_inputs(task, config, model, batch=2, seq=8, seed=1):
    """Dummy inputs with labels, on CPU. The second row of text inputs is padded (two
    masked positions) where the head takes an attention mask, to exercise masking."""
    g = torch.Generator().manual_seed(seed)
    name = getattr(model, "main_input_name", "input_ids")
    inp = {}
    if task in ("causal_lm", "masked_lm", "seq_cls", "token_cls", "qa", "seq2seq_lm",
                "contrastive"):
        ids = shrink.token_ids(config, (batch, seq), seed)
        inp["input_ids"] = ids
        if task in ("masked_lm", "seq_cls", "token_cls", "qa"):
            mask = torch.ones(batch, seq, dtype=torch.long)
            mask[-1, -2:] = 0
            inp["attention_mask"] = mask
    if task == "causal_lm":
        inp["labels"] = inp["input_ids"].clone()
    elif task == "masked_lm":
        labels = torch.full_like(inp["input_ids"], -100)
        labels[:, 1:seq - 2:2] = inp["input_ids"][:, 1:seq - 2:2]
        inp["labels"] = labels
    elif task in ("seq_cls", "image_cls", "audio_cls"):
        inp["labels"] = torch.randint(0, config.num_labels, (batch,), generator=g)
    elif task == "token_cls":
        inp["labels"] = torch.randint(0, config.num_labels, (batch, seq), generator=g)
    elif task == "seq2seq_lm":
        inp["labels"] = shrink.token_ids(config, (batch, 6), seed + 1)
    elif task == "speech_seq2seq":
        inp["input_features"] = shrink.feature_candidates(config, batch, seed)[0]
        inp["labels"] = shrink.token_ids(config, (batch, 6), seed + 1)
    elif task == "ctc":
        inp["input_values"] = shrink.audio_values(config, batch, seed)
        vocab = config.vocab_size
        inp["labels"] = torch.randint(1, vocab, (batch, 3), generator=g)
    if task in ("image_cls", "contrastive"):
        inp["pixel_values"] = shrink.pixel_values(config, batch, seed)
    if task == "audio_cls":
        inp[name] = shrink.audio_values(config, batch, seed)
    if task == "contrastive":
        inp["return_loss"] = True
    return inp


def to_device(inp, device):
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in inp.items()}


def main_output(out):
    """The tensor compared by the forward check: logits (or CLIP's logits_per_image)."""
    for k in ("logits", "logits_per_image", "prediction_logits"):
        v = getattr(out, k, None) if not isinstance(out, dict) else out.get(k)
        if isinstance(v, torch.Tensor):
            return k, v
    for k, v in out.items():
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return k, v
    raise ValueError("model output has no floating-point tensor to compare")


# ---- comparisons ----

def rel_err(actual, expected):
    """max|a - e| / max|e| in float64 (nan/inf anywhere: inf unless both agree)."""
    a = actual.detach().cpu().double()
    e = expected.detach().cpu().double()
    if a.shape != e.shape:
        return math.inf
    if not torch.equal(torch.isnan(a), torch.isnan(e)):
        return math.inf
    fin = torch.isfinite(e) & torch.isfinite(a)
    if not torch.equal(a[~fin & ~torch.isnan(a)], e[~fin & ~torch.isnan(e)]):
        return math.inf
    if fin.sum() == 0:
        return 0.0
    diff = (a[fin] - e[fin]).abs().max().item()
    scale = e[fin].abs().max().item()
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def result(check, dtype, attn, status, **kw):
    r = {"check": check, "dtype": dtype, "attn": attn, "status": status}
    r.update({k: v for k, v in kw.items() if v is not None})
    return r


def _autocast(device, dtype):
    if dtype == "bf16":
        return torch.autocast(device, dtype=torch.bfloat16)
    return torch.autocast(device, enabled=False)


def _forward(model, inp, device, dtype):
    with _autocast(device, dtype):
        return model(**to_device(inp, device))


# ---- localisation of a forward mismatch ----

def localize(cpu, dev, inp, dtype, tol):
    """Runs both models once more with forward hooks; returns the first module (in
    completion order, so the innermost earliest one) whose first floating output
    differs by more than tol, with its error."""
    recs = {"cpu": [], "tpu": []}

    def hook_for(side):
        def hook(mod, args, out):
            t = out
            if isinstance(t, (tuple, list)):
                t = next((x for x in t if isinstance(x, torch.Tensor)), None)
            elif not isinstance(t, torch.Tensor):
                t = getattr(t, "last_hidden_state", None)
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                recs[side].append((mod._tt_name, type(mod).__name__, t.detach().to("cpu")))
        return hook

    handles = []
    for side, m in (("cpu", cpu), ("tpu", dev)):
        for n, mod in m.named_modules():
            mod._tt_name = n or "<model>"
            handles.append(mod.register_forward_hook(hook_for(side)))
    try:
        with torch.no_grad():
            _forward(cpu, inp, "cpu", dtype)
            _forward(dev, inp, "tpu", dtype)
    finally:
        for h in handles:
            h.remove()
    for (n, cls, c), (_, _, t) in zip(recs["cpu"], recs["tpu"]):
        err = rel_err(t, c)
        if err > tol:
            return f"{n} ({cls}): {err:.2e}"
    return None


# ---- the checks ----

def _abs_err(a, e, scale):
    """max|a - e| / scale (inf for a shape mismatch or a nan/inf in a only)."""
    a = a.detach().cpu().double()
    e = e.detach().cpu().double()
    if a.shape != e.shape or (not torch.isfinite(a).all() and torch.isfinite(e).all()):
        return math.inf
    diff = (a - e).abs().max().item() if a.numel() else 0.0
    return diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)


def bf16_excused(tpu, cpu, ref, scale):
    """The bf16 escape: tpu's bf16 result is no further from the float32 CPU result than
    BF16_REF_FACTOR x CPU's bf16 result is. Both are bf16 approximations of the same
    float32 computation; rounding in different places gives independent errors of the
    same size, so |tpu - cpu| can reach twice that error without anything being wrong.
    Returns (excused, err(tpu, f32), err(cpu, f32))."""
    e_t, e_c = _abs_err(tpu, ref, scale), _abs_err(cpu, ref, scale)
    return e_t <= BF16_REF_FACTOR * e_c, e_t, e_c


def check_forward(base, task, inp, dtype, attn):
    cpu, dev = pair(base)
    tol = TOL[dtype]
    with torch.no_grad():
        with TopkRecorder() as rc:
            oc = _forward(cpu, inp, "cpu", dtype)
        with TopkRecorder() as rt:
            ot = _forward(dev, inp, "tpu", dtype)
        o32 = _forward(copy.deepcopy(base), inp, "cpu", "f32") if dtype == "bf16" else None
    key, lc = main_output(oc)
    lt = getattr(ot, key) if not isinstance(ot, dict) else ot[key]
    err = rel_err(lt, lc) if lt.dtype == lc.dtype else math.inf
    kw = dict(metric=err, tol=tol["fwd"], where=key)
    ok = err <= tol["fwd"]
    if not ok and o32 is not None and lt.dtype == lc.dtype:
        ref = main_output(o32)[1]
        ok, e_t, e_c = bf16_excused(lt, lc, ref, ref.abs().max().item())
        kw["vs_f32"] = f"{key}: tpu {e_t:.3g}, cpu {e_c:.3g}"
    if getattr(oc, "loss", None) is not None:
        lt_loss = getattr(ot, "loss", None)
        loss_err = math.inf if lt_loss is None else rel_err(lt_loss.reshape(-1), oc.loss.reshape(-1))
        kw.update(loss_err=loss_err, loss_tol=tol["loss"])
        if not loss_err <= tol["loss"]:
            loss_ok = False
            if o32 is not None and lt_loss is not None:
                loss_ok, e_t, e_c = bf16_excused(lt_loss, oc.loss, o32.loss, o32.loss.abs().item())
                kw["loss_vs_f32"] = f"tpu {e_t:.3g}, cpu {e_c:.3g}"
            ok = ok and loss_ok
    if lt.dtype != lc.dtype:
        kw["detail"] = f"{key} dtype {lt.dtype} on tpu, {lc.dtype} on CPU"
    tie, routing = _routing(ok, rc, rt, tol)
    if routing:
        kw["detail"] = "; ".join(x for x in (kw.get("detail"), routing) if x)
    if not ok and not tie:
        kw["first_module"] = localize(cpu, dev, inp, dtype, tol["fwd"])
    return result("fwd", dtype, attn, "pass" if ok or tie else "fail", tie=tie or None, **kw)


def _unique_params(model):
    seen, out = set(), []
    for n, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            out.append((n, p))
    return out


def _backward(model, inp, device, dtype):
    model.train()
    out = _forward(model, inp, device, dtype)
    loss = out.loss
    if loss is None:
        raise ValueError("the model returned no loss for these labels")
    loss.backward()
    return loss


def _amax(t):
    """max|t| as a float; 0 for an empty tensor (mobilebert has a 0-size parameter)."""
    return t.detach().abs().max().item() if t.numel() else 0.0


def _grad_scale(model):
    return max((_amax(p.grad) for _, p in _unique_params(model) if p.grad is not None),
               default=0.0)


def grad_report(cpu, dev, tol, floor_rel, ref=None):
    """[(name, err)] per parameter and the failing names; `ref` (bf16 only) is the
    float32 CPU model whose gradients decide the bf16 escape."""
    pc, pt = _unique_params(cpu), _unique_params(dev)
    pr = _unique_params(ref) if ref is not None else [(None, None)] * len(pc)
    scale = _grad_scale(cpu)
    errs, bad, excused = [], [], []
    for (n, a), (_, b), (_, r) in zip(pc, pt, pr):
        if a.grad is None and b.grad is None:
            continue
        if (a.grad is None) != (b.grad is None):
            errs.append((n, math.inf))
            bad.append(n)
            continue
        denom = max(_amax(a.grad), floor_rel * scale)
        err = _abs_err(b.grad, a.grad, denom)
        errs.append((n, err))
        if err <= tol:
            continue
        if r is not None and r.grad is not None:
            denom32 = max(_amax(r.grad), floor_rel * _grad_scale(ref))
            ok, e_t, e_c = bf16_excused(b.grad, a.grad, r.grad, denom32)
            if ok:
                excused.append(f"{n} (tpu {e_t:.2g}, cpu {e_c:.2g} from f32)")
                continue
        bad.append(n)
    return errs, bad, excused


class TopkRecorder:
    """Records every torch.topk / Tensor.topk call (input on CPU, indices, dim) while
    active: MoE routers pick experts with topk, and an exact tie in the router scores
    (frequent in bfloat16) may be broken differently by two correct implementations
    (PyTorch documents no order among equal elements), which routes a token to other
    experts and changes their gradients."""

    def __init__(self):
        self.calls = []

    def __enter__(self):
        self._fn, self._meth = torch.topk, torch.Tensor.topk
        fn, calls = self._fn, self.calls

        def topk(input, k, dim=-1, *args, **kw):
            out = fn(input, k, dim, *args, **kw)
            calls.append((input.detach().float().cpu(), out.indices.detach().cpu(), dim))
            return out

        torch.topk = topk
        torch.Tensor.topk = lambda self_, *a, **kw: topk(self_, *a, **kw)
        return self

    def __exit__(self, *exc):
        torch.topk, torch.Tensor.topk = self._fn, self._meth


def topk_divergence(cpu_calls, tpu_calls, tie_tol):
    """None when every topk picked the same set on both sides; else (is_tie, detail):
    is_tie when, at the first differing row, the elements only CPU picked and only tpu
    picked have CPU scores within tie_tol * max|row| (a tie either side may break)."""
    for n, ((xc, ic, dim), (_, it, _)) in enumerate(zip(cpu_calls, tpu_calls)):
        if ic.shape != it.shape:
            return False, f"topk call {n}: index shapes {tuple(ic.shape)} vs {tuple(it.shape)}"
        a = ic.movedim(dim, -1).sort(-1).values.reshape(-1, ic.shape[dim])
        b = it.movedim(dim, -1).sort(-1).values.reshape(-1, it.shape[dim])
        rows = (a != b).any(-1).nonzero().flatten()
        if len(rows) == 0:
            continue
        r = int(rows[0])
        x = xc.movedim(dim, -1).reshape(-1, xc.shape[dim])[r]
        only_c = sorted(set(a[r].tolist()) - set(b[r].tolist()))
        only_t = sorted(set(b[r].tolist()) - set(a[r].tolist()))
        margin = (x[only_c].min() - x[only_t].max()).abs().item()
        rel = margin / max(x.abs().max().item(), 1e-30)
        return rel <= tie_tol, (f"topk call {n} row {r}: CPU picked {only_c}, tpu {only_t}, "
                                f"CPU score margin {rel:.2e} of max ({len(rows)} rows differ)")
    return None


def check_backward(base, task, inp, dtype, attn):
    cpu, dev = pair(base)
    tol = TOL[dtype]
    with TopkRecorder() as rc:
        lc = _backward(cpu, inp, "cpu", dtype)
    with TopkRecorder() as rt:
        lt = _backward(dev, inp, "tpu", dtype)
    ref = None
    if dtype == "bf16":
        ref = copy.deepcopy(base)
        _backward(ref, inp, "cpu", "f32")
    loss_err = rel_err(lt.reshape(-1), lc.reshape(-1))
    loss_ok = loss_err <= tol["loss"]
    if not loss_ok and ref is not None:
        l32 = _forward(copy.deepcopy(base).train(), inp, "cpu", "f32").loss
        loss_ok = bf16_excused(lt, lc, l32, l32.abs().item())[0]
    errs, bad, excused = grad_report(cpu, dev, tol["grad"], tol["grad_floor"], ref)
    worst = max(errs, key=lambda x: x[1]) if errs else ("-", 0.0)
    ok = not bad and loss_ok
    tie, detail = _routing(ok, rc, rt, tol)
    return result("bwd", dtype, attn, "pass" if ok or tie else "fail", metric=worst[1],
                  tol=tol["grad"], where=worst[0], loss_err=loss_err, loss_tol=tol["loss"],
                  n_params=len(errs), n_bad=len(bad) or None, bad=bad[:8] or None,
                  excused=excused[:8] or None, tie=tie or None, detail=detail)


def _routing(ok, rc, rt, tol):
    """(tie, detail) for a failing check whose topk choices differed: a tie excuses it
    (pass, reported as tie), a non-tie divergence is named in the failure."""
    if ok:
        return False, None
    div = topk_divergence(rc.calls, rt.calls, tol["tie"])
    if div is None:
        return False, None
    return div[0], ("routing tie: " if div[0] else "routing differs without a tie: ") + div[1]


def _train(model, inp, device, dtype):
    """STEPS AdamW steps on one batch: (loss curve, names of noise-gradient params)."""
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    losses, noisy = [], set()
    for step in range(STEPS):
        opt.zero_grad()
        loss = _forward(model, inp, device, dtype).loss
        loss.backward()
        if step == 0:
            scale = _grad_scale(model)
            noisy = {n for n, p in _unique_params(model) if p.grad is not None
                     and _amax(p.grad) <= NOISE_FLOOR * scale}
        opt.step()
        losses.append(loss.detach().float().cpu().item())
    return losses, noisy


def _aggregate_update_err(base, cpu, dev, ref, noisy):
    """||P - P_f32|| / ||P_f32 - P_0|| over all parameters but the noise-gradient ones,
    for tpu and CPU (bf16): how far each bf16 training ended from float32 training,
    relative to how far float32 training moved."""
    num_t = num_c = den = 0.0
    for (n, p0), (_, a), (_, b), (_, r) in zip(_unique_params(base), _unique_params(cpu),
                                               _unique_params(dev), _unique_params(ref)):
        if n in noisy:
            continue
        r = r.detach().double()
        num_t += (b.detach().cpu().double() - r).pow(2).sum().item()
        num_c += (a.detach().double() - r).pow(2).sum().item()
        den += (r - p0.detach().double()).pow(2).sum().item()
    den = math.sqrt(den) or 1e-30
    return math.sqrt(num_t) / den, math.sqrt(num_c) / den


def check_train(base, task, inp, dtype, attn):
    cpu, dev = pair(base)
    tol = TOL[dtype]
    with TopkRecorder() as rc:
        curve_c, noisy = _train(cpu, inp, "cpu", dtype)
    with TopkRecorder() as rt:
        curve_t, _ = _train(dev, inp, "tpu", dtype)
    ref, curve_r = None, None
    if dtype == "bf16":
        # noise-gradient parameters are judged on float32 gradients: in bf16 the
        # rounding noise of a zero gradient is far above NOISE_FLOOR
        ref = copy.deepcopy(base)
        curve_r, noisy = _train(ref, inp, "cpu", "f32")
    curve_err = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(curve_t, curve_c))
    if any(math.isnan(x) for x in curve_t):
        curve_err = math.inf
    curve_ok = curve_err <= tol["train_loss"]
    kw = {}
    if not curve_ok and curve_r is not None:
        t, c, r = (torch.tensor(x) for x in (curve_t, curve_c, curve_r))
        curve_ok, e_t, e_c = bf16_excused(t, c, r, r.abs().max().item())
        kw["loss_vs_f32"] = f"tpu {e_t:.3g}, cpu {e_c:.3g}"
    worst, bad, excused = ("-", 0.0), [], []
    pr = _unique_params(ref) if ref is not None else [(None, None)] * len(_unique_params(cpu))
    for (n, a), (_, b), (_, r) in zip(_unique_params(cpu), _unique_params(dev), pr):
        limit = (2.0 if n in noisy else tol["train_param"]) * LR * STEPS
        frac = _abs_err(b, a, limit)
        if frac > worst[1]:
            worst = (n, frac)
        if frac <= 1.0:
            continue
        if r is not None:
            ok, e_t, e_c = bf16_excused(b, a, r, LR * STEPS)
            if ok:
                excused.append(f"{n} (tpu {e_t:.2g}, cpu {e_c:.2g} of lr*steps from f32)")
                continue
        bad.append(n)
    if bad and ref is not None:
        agg = _aggregate_update_err(base, cpu, dev, ref, noisy)
        kw["aggregate_vs_f32"] = f"tpu {agg[0]:.3g}, cpu {agg[1]:.3g} of the f32 update"
        if agg[0] <= BF16_REF_FACTOR * agg[1]:
            kw["note"] = (f"bf16 train: per-parameter outliers within bf16 noise ({', '.join(bad[:4])}"
                          f"{', ...' if len(bad) > 4 else ''}); all parameters together: "
                          + kw["aggregate_vs_f32"])
            bad = []
    ok = curve_ok and not bad
    tie, kw["detail"] = _routing(ok, rc, rt, tol)
    return result("train", dtype, attn, "pass" if ok or tie else "fail", tie=tie or None,
                  metric=worst[1], tol=1.0,
                  where=worst[0], loss_err=curve_err, loss_tol=tol["train_loss"],
                  curve_cpu=[round(x, 6) for x in curve_c],
                  curve_tpu=[round(x, 6) for x in curve_t],
                  noisy=sorted(noisy)[:8] or None, bad=bad[:8] or None,
                  excused=excused[:8] or None, **kw)


def _gen_inputs(task, inp):
    keep = {"causal_lm": ("input_ids",), "seq2seq_lm": ("input_ids",),
            "speech_seq2seq": ("input_features",)}[task]
    return {k: inp[k] for k in keep}


def _generate(model, task, inp, device, dtype, static, config, disable_compile=False):
    pad = getattr(config, "pad_token_id", None)
    eos = getattr(config, "eos_token_id", None)
    if pad is None:
        pad = eos[0] if isinstance(eos, list) else (eos if eos is not None else 0)
    kw = dict(max_new_tokens=MAX_NEW_TOKENS, min_new_tokens=MAX_NEW_TOKENS, do_sample=False,
              num_beams=1, pad_token_id=pad, output_logits=True, return_dict_in_generate=True)
    if static:
        kw["cache_implementation"] = "static"
    if disable_compile:
        kw["disable_compile"] = True
    g_in = to_device(_gen_inputs(task, inp), device)
    if "input_ids" in g_in:
        g_in["attention_mask"] = torch.ones_like(g_in["input_ids"])
    with torch.no_grad(), _autocast(device, dtype):
        if task == "speech_seq2seq":
            # Whisper's own generate() wants a real checkpoint's generation config
            # (languages, timestamps); the model's forward + greedy loop is the same.
            from transformers import GenerationMixin
            out = GenerationMixin.generate(model, **g_in, **kw)
        else:
            out = model.generate(**g_in, **kw)
    return out


def check_generate(base, task, inp, dtype, attn, static=False):
    name = "gen_static" if static else "gen"
    config = base.config
    cpu, dev = pair(base)
    try:
        oc = _generate(cpu, task, inp, "cpu", dtype, static, config)
    except Exception as e:  # a CPU failure is not a tpu result
        return result(name, dtype, attn, "skip", reason="fails on CPU: " + describe_error(e)["error"])
    note = None
    try:
        ot = _generate(dev, task, inp, "tpu", dtype, static, config)
    except Exception as e:
        # transformers auto-compiles static-cache decoding on device.type "tpu" with
        # torch.compile(backend="tpu"); without such a Dynamo backend that raises.
        # Record it, then check the static cache itself with compilation disabled.
        if not (static and "backend" in str(e).lower() and "tpu" in str(e)):
            raise
        note = "auto-compile: " + describe_error(e)["error"]
        ot = _generate(dev, task, inp, "tpu", dtype, static, config, disable_compile=True)
    sc, st = oc.sequences, ot.sequences.cpu()
    if sc.shape == st.shape and torch.equal(sc, st):
        return result(name, dtype, attn, "pass", tokens=sc.shape[-1], note=note)
    # first differing step: is it a near-tie in the CPU logits?
    n = min(sc.shape[-1], st.shape[-1])
    diff = (sc[:, :n] != st[:, :n]).any(0).nonzero()
    if len(diff) == 0:
        return result(name, dtype, attn, "fail", detail=f"lengths {sc.shape[-1]} != {st.shape[-1]}")
    pos = int(diff[0])
    step = pos - (sc.shape[-1] - len(oc.logits))
    row = int((sc[:, pos] != st[:, pos]).nonzero()[0])
    lg = oc.logits[step][row].float()
    margin = (lg[sc[row, pos]] - lg[st[row, pos]]).abs().item()
    rel = margin / max(lg.abs().max().item(), 1e-30)
    tie = rel <= TOL[dtype]["tie"]
    return result(name, dtype, attn, "pass" if tie else "fail", tie=tie or None, note=note,
                  detail=f"first different token at step {step} (row {row}): cpu {int(sc[row, pos])} "
                         f"vs tpu {int(st[row, pos])}, CPU logit margin {rel:.2e} of max",
                  metric=rel, tol=TOL[dtype]["tie"])


def run_check(fn, name, dtype, attn, *args, **kw):
    """Runs one check; an exception becomes an `error` result naming the op."""
    t0 = time.time()
    try:
        r = fn(*args, **kw)
    except Exception as e:  # noqa: BLE001 - every failure is a result
        r = result(name, dtype, attn, "error", **describe_error(e))
    r["seconds"] = round(time.time() - t0, 2)
    return r
