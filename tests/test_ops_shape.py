"""Shape-family ops on tpu vs CPU: cat/stack, padding, flips and rolls, repeats,
copies and casts, fold/unfold, interpolation and grid sampling, shuffles."""
import pytest
import torch
import torch.nn.functional as F

from tpu_testing import assert_raises_like, check, check_grad

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]


def make(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(0, 50, shape).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cat_stack(dtype):
    a, b = make((2, 3), dtype), make((2, 5), dtype)
    check(lambda a, b: torch.cat([a, b], 1), a, b)
    check(lambda a, b: torch.cat([a, b, a], -1), a, b)
    check(lambda a: torch.cat([a, a], 0), a)
    check(lambda a: torch.stack([a, a, a], 1), a)


def test_cat_rules_and_grad():
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    check(lambda a, e, b: torch.cat([a, e, b]), a, torch.empty(0), b)           # legacy 1-D empty skip
    check(lambda a, e: torch.cat([a, e], 0), a, torch.empty(0, 3))
    check(lambda a, i: torch.cat([a, i]), a, torch.arange(6).reshape(2, 3))    # promotion
    check(lambda a: torch.cat([a.t(), a.t()], 1), a)                            # non-contiguous
    check_grad(lambda a, b: torch.cat([a, b * 2], 0), a, b)
    with pytest.raises(RuntimeError, match="Sizes of tensors must match"):
        torch.cat([a.to("tpu"), torch.randn(2, 4).to("tpu")])


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
def test_pad_modes(mode):
    x1, x2, x3 = torch.randn(2, 3, 6), torch.randn(1, 2, 5, 6), torch.randn(1, 2, 3, 4, 5)
    check_grad(lambda x: F.pad(x, (2, 1), mode=mode), x1)
    check_grad(lambda x: F.pad(x, (1, 2, 2, 0), mode=mode), x2)
    check_grad(lambda x: F.pad(x, (1, 1, 2, 0, 1, 2), mode=mode), x3)
    if mode in ("constant", "replicate"):
        check(lambda x: F.pad(x, (-1, 2, 1, -2), mode=mode), x2)  # negative pads crop


def test_pad_dtypes_and_errors():
    for dtype in [torch.bfloat16, torch.int64, torch.uint8]:
        x = make((1, 2, 4, 4), dtype)
        check(lambda x: F.pad(x, (1, 2, 0, 3), mode="replicate"), x)
        if dtype.is_floating_point:
            check(lambda x: F.pad(x, (1, 2, 0, 3), mode="reflect"), x)
        check(lambda x: F.pad(x, (1, 2), value=3), x)
    with pytest.raises(RuntimeError, match="Padding size should be less"):
        F.pad(torch.randn(1, 2, 3).to("tpu"), (3, 0), mode="reflect")


@pytest.mark.parametrize("dtype", DTYPES)
def test_flip_roll_repeat(dtype):
    x = make((3, 4, 2), dtype)
    check(lambda x: torch.flip(x, [0, -1]), x)
    check(lambda x: torch.roll(x, 2, 1), x)
    check(lambda x: torch.roll(x, (-1, 5), (0, 2)), x)
    check(lambda x: torch.roll(x, 3), x)
    check(lambda x: x.repeat(2, 1, 3), x)
    check(lambda x: x.repeat(2, 1, 1, 2), x)
    check(lambda x: torch.tile(x, (2,)), x)
    check(lambda x: x.repeat_interleave(2, dim=1), x)


def test_flip_roll_grad_noncontig():
    x = torch.randn(4, 5)
    check_grad(lambda x: torch.flip(x.t(), [1]), x)
    check_grad(lambda x: torch.roll(x, (1, -2), (0, 1)), x)
    check_grad(lambda x: x.repeat(2, 3), x)
    with pytest.raises(RuntimeError, match="appears multiple times"):
        torch.flip(x.to("tpu"), [0, 0])


def test_repeat_interleave_tensor():
    r = torch.tensor([1, 0, 3])
    check(lambda r: torch.repeat_interleave(r, output_size=4), r)
    check(lambda x, r: x.repeat_interleave(r, dim=0, output_size=4), torch.randn(3, 2), r)
    # without output_size the runtime reads the sum first (as CPU's kernel does); the
    # result keeps repeats' dtype
    for reps in [r, torch.tensor([2, 2], dtype=torch.int32), torch.tensor([], dtype=torch.long), torch.tensor([0, 0])]:
        check(torch.repeat_interleave, reps)
    check(lambda x, r: x.repeat_interleave(r, dim=1), torch.randn(2, 3), r)
    for bad in [torch.tensor([1, -2, 3]), torch.tensor([[1, 2]]), torch.tensor([1.0, 2.0])]:
        try:
            torch.repeat_interleave(bad)
        except Exception as e:  # noqa: BLE001
            assert_raises_like(e, torch.repeat_interleave, bad)
    # data that disagrees with output_size fails at the next sync, with CPU's message
    with pytest.raises(RuntimeError, match="allocated size does not match required size"):
        torch.repeat_interleave(r.to("tpu"), output_size=5).cpu()
    with pytest.raises(RuntimeError, match="repeats can not be negative"):
        torch.repeat_interleave(torch.tensor([3, -1]).to("tpu"), output_size=2).cpu()


def test_copies_and_casts():
    x = torch.randn(3, 4)
    check(lambda x: x.t().clone(), x)  # x.t().contiguous(): see test_clone_after_contiguous
    check(lambda x: x.to(torch.bfloat16), x)
    check(lambda x: x.to(torch.int32), x * 10)
    check(lambda x: torch.narrow_copy(x, 1, -3, 2), x)
    check(lambda x: torch.split_with_sizes_copy(x, [1, 3], 1), x)
    check(lambda x: torch.unbind_copy(x, 0), x)
    check(lambda x, y: torch.block_diag(x, y), x, torch.randn(2, 1))
    check(lambda a, b: torch.cartesian_prod(a, b), torch.tensor([1, 2, 3]), torch.tensor([4, 5]))


def test_clone_after_contiguous():
    x = torch.arange(12.).reshape(3, 4)
    check(lambda x: (x.t().contiguous(), x.t().clone()), x)


def test_fold_unfold():
    x = torch.randn(2, 3, 7, 6)
    check_grad(lambda x: F.unfold(x, kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(2, 1)), x)
    cols = torch.randn(2, 3 * 4, 12)
    check_grad(lambda c: F.fold(c, output_size=(5, 6), kernel_size=2, padding=1, stride=(2, 2)), cols)


@pytest.mark.parametrize("shape,dim,size,step", [((10,), 0, 3, 2), ((4, 9), 1, 4, 1), ((4, 9, 2), 1, 2, 3),
                                                 ((5,), 0, 5, 1), ((), 0, 1, 1)])
def test_tensor_unfold_backward(shape, dim, size, step):
    # overlapping (step < size) and gapped (step > size) windows: unfold_backward
    check_grad(lambda x: x.unfold(dim, size, step), torch.randn(shape))


NEAREST = ["nearest", "nearest-exact"]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear"])
def test_interpolate(mode):
    nd = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode, 2)
    x = torch.randn((2, 3) + (5, 4, 3)[:nd])
    sizes = [(7, 3, 6)[:nd], (2, 8, 3)[:nd]]
    aligns = [None] if mode in NEAREST else [False, True]
    for size in sizes:
        for ac in aligns:
            check_grad(lambda x: F.interpolate(x, size=size, mode=mode, align_corners=ac), x)
    for ac in aligns:
        check(lambda x: F.interpolate(x, scale_factor=1.7, mode=mode, align_corners=ac), x)
    if mode in NEAREST:
        for ndim in (1, 3):
            y = torch.randn((1, 2) + (4, 3, 5)[:ndim])
            check_grad(lambda y: F.interpolate(y, scale_factor=2.5, mode=mode), y)
        check(lambda y: F.interpolate(y, size=(6, 9), mode=mode), torch.randint(0, 255, (1, 3, 4, 5)).to(torch.uint8))
    else:
        check(lambda x: F.interpolate(x, scale_factor=2, mode=mode), x.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_interpolate_antialias(mode, dtype):
    # the filter widens with the downscale factor (24 -> 5: 11 or 21 taps per output pixel)
    x = torch.randn(1, 2, 24, 12, dtype=dtype)
    for size, ac in [((5, 7), False), ((7, 3), True), ((30, 16), False)]:
        check_grad(lambda t: F.interpolate(t, size=size, mode=mode, antialias=True, align_corners=ac), x)
    check(lambda t: F.interpolate(t, scale_factor=0.3, mode=mode, antialias=True), x)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("nd", [2, 3])
def test_grid_sample(mode, padding, nd):
    # grads of input and grid (nearest: the grid's is 0); points beyond [-1, 1] exercise the padding
    x = torch.randn((2, 3) + (5, 6, 4)[:nd])
    grid = torch.rand((2,) + (4, 7, 3)[:nd] + (nd,)) * 2.6 - 1.3
    for ac in (False, True):
        check_grad(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding, align_corners=ac), x, grid)
    if nd == 2:
        check_grad(lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding), x.double(), grid.double())


def test_shuffles():
    x = torch.randn(2, 8, 3, 4)
    check(lambda x: F.pixel_shuffle(x, 2), x)
    check(lambda x: F.pixel_unshuffle(x, 3), torch.randn(1, 2, 6, 9))
    check(lambda x: F.channel_shuffle(x, 4), x)
    check(lambda x: torch.nn.ChannelShuffle(2)(x), x)
