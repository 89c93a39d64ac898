"""The inference fast paths of nn.MultiheadAttention and nn.TransformerEncoderLayer
on tpu vs PyTorch on CPU (both take the fast path: eval, batch_first, no grad):
_native_multi_head_attention with every mask kind and the weights options, and
_transformer_encoder_layer_fwd pre/post-norm with relu/gelu, directly and through
the modules (float32 tolerances)."""
import pytest
import torch

from tpu_testing import assert_same, check, check_grad, check_like_cpu

G = torch.Generator().manual_seed(0)
Q, K = torch.randn(2, 3, 8, generator=G), torch.randn(2, 5, 8, generator=G)
KEY_PADDING = torch.tensor([[False, False, True, False, True], [False, True, True, True, True]])
CAUSAL = torch.triu(torch.ones(3, 5, dtype=torch.bool), diagonal=1)


def _pair(cls, *args, **kwargs):
    torch.manual_seed(0)
    cpu = cls(*args, **kwargs).eval()
    tpu = cls(*args, **kwargs).eval().to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    return cpu, tpu


@pytest.mark.parametrize("masks", [{}, {"key_padding_mask": KEY_PADDING}, {"attn_mask": CAUSAL},
                                   {"attn_mask": CAUSAL, "key_padding_mask": KEY_PADDING}], ids=str)
@pytest.mark.parametrize("weights", [{}, {"average_attn_weights": False}, {"need_weights": False}], ids=str)
def test_multihead_attention_module(masks, weights):
    cpu, tpu = _pair(torch.nn.MultiheadAttention, 8, 2, batch_first=True)
    with torch.no_grad():
        out_c, w_c = cpu(Q, K, K, **masks, **weights)
        out_t, w_t = tpu(Q.to("tpu"), K.to("tpu"), K.to("tpu"), **{k: v.to("tpu") for k, v in masks.items()}, **weights)
    assert_same(out_t, out_c)
    if w_c is None:
        assert w_t is None or w_t.numel() == 0
    else:
        assert_same(w_t, w_c)


def test_native_multi_head_attention_op():
    # the aten op itself (self-attention: ATen wants query, key and value alike), with a fully
    # masked batch entry (NaN, as on CPU)
    cpu, _ = _pair(torch.nn.MultiheadAttention, 8, 2, batch_first=True)
    mask = torch.tensor([[False, True, False], [True, True, True]])  # (B, L) key padding
    args = (Q, Q, Q, 8, 2, cpu.in_proj_weight.detach(), cpu.in_proj_bias.detach(), cpu.out_proj.weight.detach(),
            cpu.out_proj.bias.detach(), mask, True, True, 1)
    check(lambda *a: torch._native_multi_head_attention(*a), *args)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_transformer_encoder_layer(norm_first, activation):
    cpu, tpu = _pair(torch.nn.TransformerEncoderLayer, 8, 2, dim_feedforward=16, batch_first=True,
                     norm_first=norm_first, activation=activation)
    x = torch.randn(2, 4, 8, generator=G)
    causal = torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1)
    with torch.no_grad():
        assert_same(tpu(x.to("tpu")), cpu(x))
        assert_same(tpu(x.to("tpu"), src_mask=causal.to("tpu")), cpu(x, src_mask=causal))


def test_transformer_encoder_stack():
    layer = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    cpu, tpu = _pair(torch.nn.TransformerEncoder, layer, 3, enable_nested_tensor=False)
    x = torch.randn(2, 4, 8, generator=G)
    with torch.no_grad():
        assert_same(tpu(x.to("tpu")), cpu(x))


# ------------------------------------------- _masked_softmax and friends

X4 = torch.randn(2, 3, 4, 4, generator=G)
MASKS = {  # (mask, mask_type): a merged mask, an (L, L) attention mask, a (B, L) padding mask
    "merged": (torch.rand(2, 3, 4, 4, generator=G) > 0.6, 2),
    "attn": (torch.triu(torch.ones(4, 4, dtype=torch.bool), diagonal=1), 0),
    "padding": (torch.tensor([[False, True, False, True], [True, True, True, True]]), 1),
}


@pytest.mark.parametrize("kind", list(MASKS))
@pytest.mark.parametrize("dim", [3, 2, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_masked_softmax(kind, dim, dtype):
    # a fully masked slice is NaN on both (the padding mask's second row masks every key)
    mask, mask_type = MASKS[kind]
    check(lambda x, m: torch._masked_softmax(x, m, dim, mask_type), X4.to(dtype), mask)
    if kind == "merged":
        check(lambda x, m: torch._masked_softmax(x, m), X4.to(dtype), mask)  # dim and type absent
        # non-contiguous: CPU's kernel writes a contiguous result into a transposed
        # empty_like (a PyTorch bug), so the reference is the contiguous input's
        xt, mt = X4.to(dtype).transpose(1, 2), mask.transpose(1, 2)
        assert_same(torch._masked_softmax(xt.to("tpu"), mt.to("tpu"), dim),
                    torch._masked_softmax(xt.contiguous(), mt.contiguous(), dim))


def test_masked_softmax_backward_and_shapes():
    mask = MASKS["merged"][0]
    check_grad(lambda x: torch._masked_softmax(x, mask.to(x.device), 3, 2), X4)
    check_grad(lambda x: torch._masked_softmax(x, mask.to(x.device)[:, 0], 1), X4[:, 0])
    g, y = torch.randn(2, 3, 4, 4, generator=G), torch._masked_softmax(X4, mask, 2, 2)
    check(lambda g, y, m: torch.ops.aten._masked_softmax_backward(g, y, m, 2), g, y, mask)
    check(lambda x, m: torch._masked_softmax(x, m), torch.tensor(1.5), torch.tensor(False))  # 0-d
    check_like_cpu(lambda x, m: torch._masked_softmax(x, m, 3, 1), X4, torch.zeros(2, 3, dtype=torch.bool))
    check_like_cpu(lambda x, m: torch._masked_softmax(x, m, 3, 2), X4, torch.zeros(4, dtype=torch.bool))
    check_like_cpu(lambda x, m: torch._masked_softmax(x, m, 3), X4, torch.zeros(2, 3, 4, 4))
    check_like_cpu(lambda g, y, m: torch.ops.aten._masked_softmax_backward(g, y, m, 2), g, y, mask[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_transform_bias_rescale_qkv(dtype):
    qkv, bias = torch.randn(2, 5, 24, generator=G).to(dtype), torch.randn(24, generator=G).to(dtype)
    for heads in (1, 2, 4):
        check(lambda x, b: torch._transform_bias_rescale_qkv(x, b, heads), qkv, bias)
    check(lambda x, b: torch._transform_bias_rescale_qkv(x.transpose(0, 1), b, 2), qkv.transpose(0, 1), bias)
    check_like_cpu(lambda x, b: torch._transform_bias_rescale_qkv(x, b, 3), qkv, bias)
    import torchtpu
    assert all(torchtpu._C.op_supported(n) for n in
               ("_masked_softmax", "_masked_softmax_backward", "_transform_bias_rescale_qkv"))
