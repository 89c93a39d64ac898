"""Pairwise distances (torch.cdist, torch.pdist) and the multi-class margin losses
(nn.MultiMarginLoss, nn.MultiLabelMarginLoss) vs PyTorch on CPU, forward and
backward, float32 and float64.

Tolerances are tpu_testing's per-dtype ones (float32 1e-5, float64 1e-7), scaled
by 4 for p-norms with p not in {1, 2, inf}: they go through pow(pow(|d|, p)
summed, 1/p), where XLA's pow and the CPU's differ by an ulp or two per step.
Inputs include duplicate rows (zero distances, where the gradient conventions
of ATen's kernels apply) and targets with repeated labels."""
import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_raises_like, check, check_grad

DTYPES = [torch.float32, torch.float64]
PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _scale(p):
    return 1.0 if p in (0.0, 1.0, 2.0, float("inf")) else 4.0


def _with_duplicates(*shape, dtype):
    x = torch.randn(*shape, dtype=dtype)
    x[..., 2, :] = x[..., 0, :]  # a zero distance between rows 0 and 2
    return x


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", PS)
def test_cdist(dtype, p):
    a, b = _with_duplicates(2, 4, 5, dtype=dtype), torch.randn(2, 6, 5, dtype=dtype)
    b[:, 1] = a[:, 0]  # a zero distance across the two sets
    fn = lambda x, y: torch.cdist(x, y, p=p, compute_mode="donot_use_mm_for_euclid_dist")
    if p == 0.0:  # piecewise constant: PyTorch's gradient is 0
        check(fn, a, b)
    else:
        check_grad(fn, a, b, scale=_scale(p))


@pytest.mark.parametrize("shapes", [((4, 5), (6, 5)), ((2, 1, 3, 4), (5, 2, 4)), ((3, 0, 4), (3, 2, 4)),
                                    ((2, 3, 0), (2, 4, 0))])
def test_cdist_shapes(shapes):
    a, b = torch.randn(*shapes[0]), torch.randn(*shapes[1])
    check_grad(lambda x, y: torch.cdist(x, y, compute_mode="donot_use_mm_for_euclid_dist"), a, b)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("p", PS)
def test_pdist(dtype, p):
    x = _with_duplicates(7, 3, dtype=dtype)
    if p == 0.0:
        check(torch.pdist, x, p)
    else:
        check_grad(lambda t: torch.pdist(t, p=p), x, scale=_scale(p))


@pytest.mark.parametrize("n", [0, 1, 2, 129])
def test_pdist_sizes(n):
    # n = 129: 8,256 pairs, every row start of the triangular index is crossed
    if n == 0:  # no pairs: PyTorch's CPU backward crashes on this input, so forward only
        check(torch.pdist, torch.randn(n, 3))
    else:
        check_grad(torch.pdist, torch.randn(n, 3))


def test_distance_errors():
    for fn, args in [(torch.cdist, (torch.ones(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.long))),
                     (lambda a, b: torch.cdist(a, b, p=-1.0), (torch.randn(3, 4), torch.randn(2, 4))),
                     (torch.cdist, (torch.randn(3, 4), torch.randn(2, 5))),
                     (lambda a: torch.pdist(a, p=-1.0), (torch.randn(3, 4),)),
                     (torch.pdist, (torch.randn(2, 3, 4),)),
                     (torch.cdist, (torch.randn(3, 4).half(), torch.randn(2, 4).half()))]:
        with pytest.raises(Exception) as cpu:
            fn(*args)
        assert_raises_like(cpu.value, fn, *args)


# ------------------------------------------------------------ margin losses

REDUCTIONS = ["none", "mean", "sum"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(dtype, reduction, p):
    x, y = torch.randn(5, 6, dtype=dtype), torch.tensor([0, 5, 2, 2, 1])
    w = torch.rand(6, dtype=dtype)
    check_grad(lambda a, t: F.multi_margin_loss(a, t, p=p, margin=0.7, reduction=reduction), x, y)
    # weight is not differentiable in PyTorch: an int tensor carries it past check_grad's requires_grad
    check_grad(lambda a, t, ww: F.multi_margin_loss(a, t, p=p, weight=ww.double().to(a.dtype) / 8, reduction=reduction),
               x, y, (w * 8).round().long())


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multi_margin_loss_unbatched(reduction):
    # a 1-D input: reduction='none' keeps the target's shape, (1,) or ()
    for target in (torch.tensor([3]), torch.tensor(3)):
        check_grad(lambda a, t: F.multi_margin_loss(a, t, reduction=reduction), torch.randn(6), target)


def test_multi_margin_loss_margin_is_runtime():
    # a new margin reuses the compiled program (Scalars are runtime operands)
    import torchtpu
    x, y = torch.randn(4, 5), torch.tensor([1, 0, 3, 4])
    check(F.multi_margin_loss, x, y, margin=0.5)
    before = torchtpu.metrics()["compiles"]
    check(F.multi_margin_loss, x, y, margin=1.5)
    assert torchtpu.metrics()["compiles"] == before


TARGETS = torch.tensor([[3, 0, -1, 1, 0, 0],   # ends at the -1: labels {3, 0}
                        [0, 1, 2, 3, 4, 5],    # every class a target: loss 0
                        [5, 5, -1, 2, 2, 2],   # a repeated label counts twice
                        [-1, 2, 3, 0, 0, 0],   # no labels
                        [1, 2, 0, -1, 0, 0]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(dtype, reduction):
    x = torch.randn(5, 6, dtype=dtype)
    check_grad(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x, TARGETS)
    check_grad(lambda a, t: F.multilabel_margin_loss(a, t, reduction=reduction), x[0], TARGETS[0])
    # is_target, the op's second result
    check(torch.ops.aten.multilabel_margin_loss_forward, x, TARGETS, 1)


def test_margin_loss_errors():
    x = torch.randn(3, 4)
    cases = [(F.multi_margin_loss, (x, torch.tensor([0, 4, 1]))),
             (F.multi_margin_loss, (x, torch.tensor([0, 1]))),
             (lambda a, t, w: F.multi_margin_loss(a, t, weight=w), (x, torch.tensor([0, 1, 2]), torch.ones(5))),
             (F.multilabel_margin_loss, (x, torch.tensor([[0, -1, 5, 0]] * 3))),
             (F.multilabel_margin_loss, (x, torch.tensor([[0, -2, 1, 0]] * 3))),
             (F.multilabel_margin_loss, (x, torch.tensor([[0, 1, -1]] * 3)))]
    for fn, args in cases:
        with pytest.raises(Exception) as cpu:
            fn(*args)
        assert_raises_like(cpu.value, fn, *args)
