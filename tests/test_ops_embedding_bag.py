"""nn.EmbeddingBag / F.embedding_bag on tpu vs PyTorch on CPU: the three modes,
padding_idx, include_last_offset, per_sample_weights, 2-D input, empty bags,
the op's auxiliary results, gradients, and bad indices/offsets.

Tolerances: tpu_testing's float32 ones (sums of a few rows). scale_grad_by_freq is
compared with a reference built from the unscaled gradient divided by each row's
count in the batch (PyTorch's documented meaning): PyTorch 2.13's CPU kernel
divides some rows by another row's count (a row seen once got halved in our
probe), so its result is not the truth there."""
import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_raises_like, assert_same, check, check_grad

WEIGHT = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 0, 9, 9])
OFFSETS = torch.tensor([0, 3, 3, 7])  # bag 1 is empty


def _bag(mode, padding_idx=None, include_last_offset=False, psw=False):
    offsets = torch.tensor([0, 3, 3, 7, 9]) if include_last_offset else OFFSETS
    args = [WEIGHT, INDICES, offsets]
    if psw:
        args.append(torch.rand(len(INDICES), generator=torch.Generator().manual_seed(1)))

    def fn(w, i, o, p=None):
        return F.embedding_bag(i, w, o, mode=mode, padding_idx=padding_idx,
                               include_last_offset=include_last_offset, per_sample_weights=p)
    return fn, args


@pytest.mark.parametrize("include_last_offset", [False, True])
@pytest.mark.parametrize("padding_idx", [None, 4])
@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag(mode, padding_idx, include_last_offset):
    fn, args = _bag(mode, padding_idx, include_last_offset)
    check_grad(fn, *args)


def test_per_sample_weights():
    fn, args = _bag("sum", psw=True)
    check_grad(fn, *args)  # gradients of weight and of per_sample_weights
    fn, args = _bag("sum", padding_idx=4, psw=True)
    check_grad(fn, *args)


def test_two_dim_input_and_module():
    torch.manual_seed(0)
    idx = torch.randint(0, 10, (4, 5))
    for mode in ("sum", "mean", "max"):
        check_grad(lambda w, i: F.embedding_bag(i, w, mode=mode), WEIGHT, idx)
    # one SGD step of a module: same weights after the step
    cpu = torch.nn.EmbeddingBag(10, 3, mode="mean")
    tpu = torch.nn.EmbeddingBag(10, 3, mode="mean").to("tpu")
    tpu.load_state_dict(cpu.state_dict())
    for m, dev in ((cpu, "cpu"), (tpu, "tpu")):
        opt = torch.optim.SGD(m.parameters(), lr=0.5)
        m(idx.to(dev)).pow(2).sum().backward()
        opt.step()
    assert_same(tpu.weight.detach(), cpu.weight.detach())


@pytest.mark.parametrize("mode", [0, 1, 2])
def test_auxiliary_results(mode):
    # (output, offset2bag, bag_size, max_indices) in the CPU kernel's conventions
    check(lambda w, i, o: torch.ops.aten._embedding_bag(w, i, o, False, mode, False, None, False, 4),
          WEIGHT, INDICES, OFFSETS)
    check(lambda w, i, o: torch.ops.aten._embedding_bag_forward_only(w, i, o, False, mode, False, None, False, -1),
          WEIGHT, INDICES, OFFSETS)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_scale_grad_by_freq(mode):
    counts = torch.bincount(INDICES, minlength=10).clamp(min=1).to(WEIGHT.dtype)
    w0 = WEIGHT.clone().requires_grad_()
    out = F.embedding_bag(INDICES, w0, OFFSETS, mode=mode)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(2))
    (grad,) = torch.autograd.grad(out, w0, g)
    expected = grad / counts[:, None]
    w = WEIGHT.to("tpu").requires_grad_()
    out_t = F.embedding_bag(INDICES.to("tpu"), w, OFFSETS.to("tpu"), mode=mode, scale_grad_by_freq=True)
    assert_same(out_t.detach(), out.detach())
    out_t.backward(g.to("tpu"))
    assert_same(w.grad, expected)


def test_embedding_bag_errors():
    cases = [(torch.tensor([1, 12]), torch.tensor([0])),   # index out of range
             (torch.tensor([1, -1]), torch.tensor([0])),   # negative index
             (torch.tensor([1, 2]), torch.tensor([1])),    # offsets[0] != 0
             (torch.tensor([1, 2]), torch.tensor([0, 3]))]  # offsets[-1] > len(input)
    for i, o in cases:
        with pytest.raises(RuntimeError) as cpu:
            F.embedding_bag(i, WEIGHT, o)
        assert_raises_like(cpu.value, lambda i, w, o: F.embedding_bag(i, w, o), i, WEIGHT, o)
