"""Strict (asynchronous) eager mode is deterministic and right when a matmul's
right-hand operand is a fresh buffer.

The bug these guard against: the XLA CPU plugin's XNNPACK dot path keeps the
right-hand operand it prepared for an executable and reuses it when a later call
passes a buffer at the same address, even though the old buffer was destroyed
and the new one holds other values. malloc often puts a new weight buffer where
the previous one was, and where it does depends on when buffers are freed, so a
fine-tune repeated in one process sometimes computed `grad @ W_old` in backward
and ended with different weights (runtime/src/executable.c turns the XNNPACK
path off for the CPU plugin). The shapes are the ones that hit it: 96 rows
(a batch of 8 x 12 tokens) times 384-wide weights; 80 rows did not.
"""
import copy

import torch
import torch.nn as nn

import torchtpu


def test_matmul_with_a_fresh_weight_buffer_each_call():
    with torchtpu.eager_mode("strict"):
        _check_fresh_weights()


def _check_fresh_weights():
    # Each weight is uploaded into a new buffer after the previous one is freed:
    # the address is often the same, the values never are.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 384, generator=g)
    weights = [torch.randn(384, k, generator=g) for k in (384, 1536) for _ in range(12)]
    xt = x.to("tpu")
    for i, w in enumerate(weights):
        wt = w.to("tpu")
        got = (xt @ wt).cpu()
        del wt
        # float32 with K = 384 and unit-variance inputs: results are O(20), the
        # summation-order difference to the CPU kernel is ~1e-5; a stale operand
        # is off by O(20).
        torch.testing.assert_close(got, x @ w, rtol=1e-4, atol=1e-3, msg=f"weight {i}")


def _model():
    torch.manual_seed(0)
    # Four layers of one shape: a stale operand is another layer's (or the
    # previous step's) weight, which the same executable saw earlier.
    return nn.Sequential(*[m for _ in range(4) for m in (nn.Linear(384, 384), nn.Tanh())], nn.Linear(384, 8))


def _train(model, device, steps=8):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 12, 384, generator=g).to(device)
    y = torch.randint(0, 8, (96,), generator=g).to(device)
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)  # foreach on tpu
    losses = []
    for _ in range(steps):
        loss = nn.functional.cross_entropy(model(x).reshape(96, 8), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_training_repeats_bit_identical_in_strict_mode():
    base = _model()
    cpu_losses, _ = _train(copy.deepcopy(base), "cpu")
    with torchtpu.eager_mode("strict"):
        _check_repeats(base, cpu_losses)


def _check_repeats(base, cpu_losses):
    ref_losses, ref_params = _train(copy.deepcopy(base), "tpu")
    # The same program on the same inputs: every repeat must give the same bits.
    for r in range(5):
        losses, params = _train(copy.deepcopy(base), "tpu")
        assert losses == ref_losses, f"repeat {r}: losses {losses} != {ref_losses}"
        for i, (p, q) in enumerate(zip(params, ref_params)):
            assert torch.equal(p, q), f"repeat {r}: parameter {i} differs by {(p - q).abs().max().item()}"
    # And right: 8 float32 steps drift from the CPU curve by ~1e-6 relative;
    # a wrong gradient moves the loss by far more than 1e-4.
    torch.testing.assert_close(torch.tensor(ref_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-4)
