"""Variable-length attention (torch.nn.attention.varlen.varlen_attn, i.e. aten's
_flash_attention_forward / _flash_attention_backward) on tpu against PyTorch's
scaled_dot_product_attention on CPU, one sequence at a time, forward and backward.

Tolerances: float32 atol 2e-5 (different summation order over keys); bfloat16
atol 2e-2 on outputs (inputs rounded to bf16, math in float32 on both sides)."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention.varlen import varlen_attn

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2}


def offsets(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)


def visible(lq, lk, causal, window):
    """FlashAttention's mask: aligned to the bottom right of the (lq, lk) block."""
    d = torch.arange(lk)[None, :] - (torch.arange(lq)[:, None] + lk - lq)
    left, right = window
    right = 0 if causal else right
    m = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        m &= d >= -left
    if right >= 0:
        m &= d <= right
    return m


def reference(q, k, v, lens_q, lens_k, causal, window):
    """Per sequence: CPU SDPA (math) with kv heads repeated for grouped queries."""
    outs, cq, ck = [], offsets(lens_q), offsets(lens_k)
    g = q.shape[1] // k.shape[1]
    for i, (lq, lk) in enumerate(zip(lens_q, lens_k)):
        qi = q[cq[i]:cq[i + 1]].transpose(0, 1)
        ki = k[ck[i]:ck[i + 1]].repeat_interleave(g, 1).transpose(0, 1)
        vi = v[ck[i]:ck[i + 1]].repeat_interleave(g, 1).transpose(0, 1)
        m = visible(lq, lk, causal, window)
        if lq == 0:
            outs.append(qi.transpose(0, 1))
            continue
        o = F.scaled_dot_product_attention(qi.float(), ki.float(), vi.float(), attn_mask=m)
        o = torch.where(m.any(1)[None, :, None], o, 0.0)  # a query that sees no key: 0, as FlashAttention
        outs.append(o.to(q.dtype).transpose(0, 1))
    return torch.cat(outs)


CASES = [  # lens_q, lens_k, heads, kv heads, causal, window
    ([5, 0, 7, 3], [5, 0, 7, 3], 4, 2, True, (-1, -1)),
    ([4, 6, 1], [6, 2, 5], 4, 4, False, (-1, -1)),
    ([9, 8], [9, 8], 4, 1, True, (3, 0)),
    ([3, 5], [7, 5], 2, 2, True, (-1, -1)),  # more keys than queries: bottom-right causal
    ([6, 2], [6, 2], 2, 2, False, (1, 2)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("lens_q,lens_k,h,hk,causal,window", CASES)
def test_varlen_attn_matches_sdpa(lens_q, lens_k, h, hk, causal, window, dtype):
    torch.manual_seed(0)
    q = torch.randn(sum(lens_q), h, 16, dtype=dtype)
    k = torch.randn(sum(lens_k), hk, 16, dtype=dtype)
    v = torch.randn(sum(lens_k), hk, 16, dtype=dtype)
    g = torch.randn(sum(lens_q), h, 16, dtype=dtype)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    want = reference(*leaves, lens_q, lens_k, causal, window)
    want.backward(g)
    tleaves = [x.to("tpu").requires_grad_() for x in (q, k, v)]
    cq, ck = offsets(lens_q).to("tpu"), offsets(lens_k).to("tpu")
    # varlen_attn says causal as a window: (left, 0)
    got = varlen_attn(*tleaves, cq, ck, max(lens_q), max(lens_k), window_size=(window[0], 0 if causal else window[1]),
                      enable_gqa=h != hk)
    got.backward(g.to("tpu"))
    tol = TOL[dtype]
    torch.testing.assert_close(got.cpu(), want.detach(), atol=tol, rtol=tol)
    grad_tol = 1e-4 if dtype == torch.float32 else 1e-1  # bf16 grads round once more on CPU's side
    for a, b in zip(tleaves, leaves):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=grad_tol, rtol=grad_tol)


def test_logsumexp_and_empty_rows():
    torch.manual_seed(1)
    lens = [3, 0, 4]
    q, k, v = (torch.randn(7, 2, 8) for _ in range(3))
    cu = offsets(lens).to("tpu")
    out, lse, rng, _, _ = torch.ops.aten._flash_attention_forward(
        q.to("tpu"), k.to("tpu"), v.to("tpu"), cu, cu, 4, 4, 0.0, True, False)
    assert lse.shape == (2, 7) and lse.dtype == torch.float32
    assert rng.shape == (2,) and rng.dtype == torch.uint64
    s = torch.einsum("qhd,khd->hqk", q, k) / 8 ** 0.5
    m = torch.block_diag(*(torch.ones(n, n).tril() for n in lens)).bool()
    want = torch.logsumexp(s.masked_fill(~m, float("-inf")), -1)
    torch.testing.assert_close(lse.cpu(), want, atol=1e-5, rtol=1e-5)


def test_batched_form_matches_sdpa():
    """No offsets: q (B, L, H, D), logsumexp (B, H, L)."""
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 5, 4, 8) for _ in range(3))
    out, lse, *_ = torch.ops.aten._flash_attention_forward(
        q.to("tpu"), k.to("tpu"), v.to("tpu"), None, None, 5, 5, 0.0, True, False)
    want = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    torch.testing.assert_close(out.cpu(), want.transpose(1, 2), atol=2e-5, rtol=2e-5)
    assert lse.shape == (2, 4, 5)


def test_refusals_name_the_op():
    q = torch.randn(4, 2, 8).to("tpu")
    cu = offsets([4]).to("tpu")
    with pytest.raises(NotImplementedError, match="_flash_attention_forward: dropout_p"):
        torch.ops.aten._flash_attention_forward(q, q, q, cu, cu, 4, 4, 0.5, False, False)
    with pytest.raises(NotImplementedError, match="_flash_attention_forward: not implemented for"):
        qd = torch.randn(4, 2, 8, dtype=torch.float64).to("tpu")
        torch.ops.aten._flash_attention_forward(qd, qd, qd, cu, cu, 4, 4, 0.0, False, False)
    with pytest.raises(NotImplementedError, match="quantized"):
        torch.ops.aten._flash_attention_forward.quantized(q, q, q, cu, cu, 4, 4, 0.0, False, False, None, None, None)
    with pytest.raises(RuntimeError, match="head count dividing"):
        k = torch.randn(4, 3, 8).to("tpu")
        torch.ops.aten._flash_attention_forward(q, k, k, cu, cu, 4, 4, 0.0, False, False)


def test_varlen_attn_compiled_is_one_program_per_graph():
    """Under torch.compile(backend="tpu") varlen_attn's custom ops become FlashAttention's
    aten ops in the program: forward and backward compiled, no eager fallback."""
    import torchtpu
    torch.manual_seed(3)
    lens = [5, 3, 8]
    q, k, v = (torch.randn(16, 4, 8) for _ in range(3))
    w = torch.randn(16, 4, 8)
    cu = offsets(lens)

    def step(q, k, v, cu, w):
        o = varlen_attn(q, k, v, cu, cu, 8, 8, window_size=(-1, 0), enable_gqa=False)
        return (o * w).sum()

    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    reference(*leaves, lens, lens, True, (-1, -1)).mul(w).sum().backward()
    tleaves = [x.to("tpu").requires_grad_() for x in (q, k, v)]
    before = torchtpu.metrics()
    torch._dynamo.reset()
    loss = torch.compile(step, backend="tpu", fullgraph=True)(*tleaves, cu.to("tpu"), w.to("tpu"))
    loss.backward()
    after = torchtpu.metrics()
    assert after["graph_fallbacks"] == before["graph_fallbacks"]
    assert after["graph_runs"] - before["graph_runs"] == 2  # the forward program, then the backward's
    for a, b in zip(tleaves, leaves):
        torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-4, rtol=1e-4)
