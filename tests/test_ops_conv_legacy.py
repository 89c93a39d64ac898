"""The legacy convolution / pooling / resize overloads (the kernels aten::convolution
and F.interpolate pick on CPU and CUDA) vs PyTorch on CPU, called the way they
are reached: torch.ops.aten.<op>.<overload>.

_conv_depthwise2d and conv_depthwise3d have CUDA kernels only, and
max_pool2d_backward has none on CPU: their references are the CPU ops they
stand for (conv with groups = input channels; max_pool2d_with_indices and its
backward). Lanczos resizing exists on CPU for float32 / float64 only.

Tolerances are tpu_testing's per dtype. Scaled ones say why next to them."""
import pytest
import torch
import torch.nn.functional as F

import torchtpu
from tpu_testing import assert_raises_like, assert_same, check, check_grad, to_tpu

A = torch.ops.aten
DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def _nc(fn):
    """fn on a non-contiguous view: its first argument is given with its last two
    dims swapped and swapped back (a transposed view) on each device."""
    return lambda x, *rest: fn(x.transpose(-1, -2), *rest)


def _tr(x):
    return x.transpose(-1, -2).contiguous()


def test_served():
    for name in ["_conv_depthwise2d", "conv_depthwise3d", "slow_conv3d_forward", "slow_conv_dilated2d",
                 "slow_conv_dilated3d", "slow_conv_transpose2d", "slow_conv_transpose3d", "_slow_conv2d_forward",
                 "_slow_conv2d_backward", "max_pool2d_backward", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
                 "adaptive_avg_pool3d_backward", "_upsample_lanczos2d_aa", "_upsample_lanczos2d_aa_backward"]:
        assert torchtpu._C.op_supported(name), name


def _out(op, *args, kw="out"):
    """op(*args, <kw>=empty) on the args' device; the result is the out tensor."""
    out = torch.empty(0, dtype=args[0].dtype, device=args[0].device)
    r = op(*args, **{kw: out})
    assert r.data_ptr() == out.data_ptr()
    return out


# ------------------------------------------------------------ forward convs

# (op, its args after padding: [output_padding,] [dilation])
CONV2D = [
    ("slow_conv_dilated2d", lambda: ([2, 1],)),
    ("_slow_conv2d_forward", lambda: ()),
    ("slow_conv_transpose2d", lambda: ([1, 0], [1, 2])),
]
CONV3D = [
    ("slow_conv_dilated3d", lambda: ([1, 2, 1],)),
    ("slow_conv3d_forward", lambda: ()),
    ("slow_conv_transpose3d", lambda: ([1, 0, 1], [1, 1, 2])),
]


def _conv_case(name, extra, nsp, dtype, bias=True):
    transposed = "transpose" in name
    k = [3, 2, 3][:nsp] if nsp == 2 else [2, 3, 2]
    x = _rand(2, 4, *([6, 7, 5][:nsp]), dtype=dtype)
    w = _rand(*((4, 3) if transposed else (3, 4)), *k, dtype=dtype) / 4
    b = _rand(3, dtype=dtype) if bias else None
    stride = [2, 1, 2][:nsp] if transposed else [1, 2, 1][:nsp]
    padding = [1, 0, 1][:nsp]
    return x, w, k, b, stride, padding, list(extra())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,extra", CONV2D + CONV3D)
def test_conv_forward(name, extra, dtype):
    nsp = 3 if name.endswith("3d") or name.startswith("slow_conv3d") else 2
    x, w, k, b, stride, padding, rest = _conv_case(name, extra, nsp, dtype)
    op = getattr(A, name)
    # The CPU's transposed kernels add their col2im partial sums in bf16 / f16;
    # ours accumulate in float32 and round once: a few roundings apart.
    sc = 4.0 if "transpose" in name and dtype != torch.float32 else 1.0
    check(lambda x, w, b: op(x, w, k, b, stride, padding, *rest), x, w, b, scale=sc)
    check(lambda x, w: op(x, w, k, None, stride, padding, *rest), x, w, scale=sc)
    # a non-contiguous input
    check(_nc(lambda x, w, b: op(x, w, k, b, stride, padding, *rest)), _tr(x), w, b, scale=sc)
    # the out= overload (.out, or .output for the *_forward ops)
    ov = op.output if name.endswith("_forward") else op.out
    if name.endswith("_forward"):
        fn = lambda x, w, b: ov(x, w, k, b, stride, padding, output=torch.empty(0, dtype=x.dtype, device=x.device))
    else:
        fn = lambda x, w, b: _out(ov, x, w, k, b, stride, padding, *rest)
    check(fn, x, w, b, scale=sc)


@pytest.mark.parametrize("name,extra", CONV2D + CONV3D)
def test_conv_forward_grad(name, extra):
    nsp = 3 if name.endswith("3d") or name.startswith("slow_conv3d") else 2
    x, w, k, b, stride, padding, rest = _conv_case(name, extra, nsp, torch.float32)
    op = getattr(A, name)
    # scale 2: grad_bias sums the 2 x 3 x 12 x 7 x 10 grad_output elements (another order)
    check_grad(lambda x, w, b: op(x, w, k, b, stride, padding, *rest), x, w, b, scale=2)


@pytest.mark.parametrize("name", ["slow_conv_dilated2d", "slow_conv_dilated3d", "slow_conv_transpose2d",
                                  "slow_conv_transpose3d"])
def test_conv_unbatched(name):
    # dilated and transpose3d drop the batch dim again; slow_conv_transpose2d's
    # CPU kernel returns [1, C, H, W]
    nsp = 3 if name.endswith("3d") else 2
    extra = dict(CONV2D + CONV3D)[name]
    x, w, k, b, stride, padding, rest = _conv_case(name, extra, nsp, torch.float32)
    op = getattr(A, name)
    fn = lambda x, w, b: op(x, w, k, b, stride, padding, *rest)
    if name == "slow_conv_transpose2d":
        check_grad(fn, x[0], w, b)
    else:  # their CPU derivative passes the unbatched input to convolution_backward, which rejects it
        check(fn, x[0], w, b)


def test_slow_conv2d_flat_weight():
    # the im2col kernel also takes weight as [O, C * kh * kw]
    x, w, b = _rand(2, 4, 6, 7), _rand(3, 4 * 3 * 2), _rand(3)
    check_grad(lambda x, w, b: A._slow_conv2d_forward(x, w, [3, 2], b, [1, 2], [1, 0]), x, w, b)


# ------------------------------------------------------------ _slow_conv2d_backward

MASKS = [[True, True, True], [True, False, False], [False, True, True], [False, False, True]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mask", MASKS)
def test_slow_conv2d_backward(mask, dtype):
    x, w = _rand(2, 4, 7, 6, dtype=dtype), _rand(3, 4, 3, 2, dtype=dtype)
    g = _rand(2, 3, 3, 7, dtype=dtype)  # stride [2, 1], padding [0, 1]: the output is 3 x 7
    expected = A._slow_conv2d_backward.output_mask(g, x, w, [3, 2], [2, 1], [0, 1], mask)
    actual = A._slow_conv2d_backward.output_mask(*to_tpu((g, x, w)), [3, 2], [2, 1], [0, 1], mask)
    # The CPU kernel sums grad_weight over the batch and col2im's grad_input
    # partial sums in bf16 / f16 (ours in float32, rounded once).
    sc = 1.0 if dtype == torch.float32 else 8.0
    for a, e in zip(actual, expected):
        if e is not None:  # masked-off gradients are undefined on CPU
            assert_same(a, e, scale=sc)


@pytest.mark.parametrize("flat", [False, True])
def test_slow_conv2d_backward_grad_input(flat):
    # the out= overload: three out tensors, resized
    x, w, g = _rand(2, 4, 7, 6), _rand(3, 4, 3, 2), _rand(2, 3, 3, 7)
    if flat:
        w = w.reshape(3, -1)

    def fn(g, x, w):
        outs = [torch.empty(0, device=x.device) for _ in range(3)]
        r = A._slow_conv2d_backward.grad_input(g, x, w, [3, 2], [2, 1], [0, 1], grad_input=outs[0],
                                               grad_weight=outs[1], grad_bias=outs[2])
        assert all(a.data_ptr() == o.data_ptr() for a, o in zip(r, outs))
        return outs

    check(fn, g, x, w)
    # a non-contiguous grad_output
    check(_nc(lambda g, x, w: A._slow_conv2d_backward(g, x, w, [3, 2], [2, 1], [0, 1], [True] * 3)), _tr(g), x, w)


def test_slow_conv2d_double_backward():
    # _slow_conv2d_backward is differentiable (the forward's double backward)
    x, w, g = _rand(2, 4, 7, 6), _rand(3, 4, 3, 2), _rand(2, 3, 3, 7)
    check_grad(lambda g, x, w: sum((o * o).sum() for o in
                                   A._slow_conv2d_backward(g, x, w, [3, 2], [2, 1], [0, 1], [True] * 3)), g, x, w,
               scale=4)  # sums of squares of conv outputs: a few float32 roundings more


# ------------------------------------------------------------ depthwise (CUDA-only kernels)

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("nsp", [2, 3])
def test_conv_depthwise(nsp, dtype):
    sp = [7, 6, 5][:nsp] if nsp == 2 else [4, 6, 5]
    k = [3, 2, 3][:nsp]
    stride, padding, dilation = [2, 1, 1][:nsp], [1, 0, 1][:nsp], [1, 2, 1][:nsp]
    x, w, b = _rand(2, 3, *sp, dtype=dtype), _rand(6, 1, *k, dtype=dtype), _rand(6, dtype=dtype)
    conv = F.conv2d if nsp == 2 else F.conv3d
    op = A._conv_depthwise2d if nsp == 2 else A.conv_depthwise3d
    ref = lambda x, w, b: conv(x, w, b, stride, padding, dilation, groups=3)
    expected = ref(x, w, b)
    assert_same(op(*to_tpu((x, w)), k, to_tpu(b), stride, padding, dilation), expected)
    assert_same(op(*to_tpu((x, w)), k, None, stride, padding, dilation), ref(x, w, None))
    xt = to_tpu(_tr(x)).transpose(-1, -2)  # non-contiguous on the device
    assert not xt.is_contiguous()
    assert_same(op(xt, to_tpu(w), k, to_tpu(b), stride, padding, dilation), expected)
    assert_same(_out(op.out, *to_tpu((x, w)), k, to_tpu(b), stride, padding, dilation), expected)
    if dtype == torch.float32:
        # PyTorch's derivative of these ops calls convolution_backward with
        # groups=1, which rejects a depthwise weight on every backend: the same
        # RuntimeError as CPU's convolution_backward given those arguments.
        y = op(to_tpu(x).requires_grad_(), to_tpu(w), k, None, stride, padding, dilation)
        with pytest.raises(RuntimeError) as cpu:
            A.convolution_backward(torch.randn_like(expected), x, w, None, stride, padding, dilation, False,
                                   [0] * nsp, 1, [True, True, False])
        with pytest.raises(RuntimeError) as dev:
            y.sum().backward()
        assert str(cpu.value).split("\n")[0] in str(dev.value)


# ------------------------------------------------------------ max_pool2d_backward

def _max_pool2d_backward_ref(g, x, k, s, p, d, ceil):
    _, idx = A.max_pool2d_with_indices(x, k, s, p, d, ceil)
    return A.max_pool2d_with_indices_backward(g, x, k, s, p, d, ceil, idx)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("geom", [([2, 2], [], [0, 0], [1, 1], False), ([3, 2], [2, 1], [1, 1], [1, 2], True),
                                  ([3, 3], [2, 2], [1, 0], [2, 1], False), ([2, 3], [3, 2], [0, 1], [1, 1], True)])
def test_max_pool2d_backward(geom, dtype):
    k, s, p, d, ceil = geom
    for x in (_rand(2, 3, 9, 8, dtype=dtype), _rand(3, 9, 8, dtype=dtype)):  # batched and unbatched
        out = A.max_pool2d_with_indices(x, k, s, p, d, ceil)[0]
        g = torch.randn_like(out)
        expected = _max_pool2d_backward_ref(g, x, k, s, p, d, ceil)
        assert_same(A.max_pool2d_backward(*to_tpu((g, x)), k, s, p, d, ceil), expected)
        assert_same(_out(A.max_pool2d_backward.out, *to_tpu((g, x)), k, s, p, d, ceil), expected)
        # a non-contiguous self
        xt = to_tpu(_tr(x)).transpose(-1, -2)
        assert_same(A.max_pool2d_backward(to_tpu(g), xt, k, s, p, d, ceil), expected)


def test_max_pool2d_backward_ties():
    # equal values in a window: the first one takes the gradient, as with indices
    x = torch.randint(0, 3, (2, 2, 8, 7)).float()
    g = _rand(2, 2, 4, 3)
    expected = _max_pool2d_backward_ref(g, x, [3, 3], [2, 2], [1, 0], [1, 1], False)
    assert_same(A.max_pool2d_backward(*to_tpu((g, x)), [3, 3], [2, 2], [1, 0], [1, 1], False), expected)


# ------------------------------------------------------------ adaptive avg pool out=

@pytest.mark.parametrize("dtype", DTYPES)
def test_adaptive_avg_pool_out(dtype):
    x2, x3 = _rand(2, 3, 7, 9, dtype=dtype), _rand(2, 3, 5, 7, 6, dtype=dtype)
    for x, op, size in ((x2, A.adaptive_avg_pool2d.out, [3, 4]), (x2[0], A.adaptive_avg_pool2d.out, [7, 3]),
                        (x3, A.adaptive_avg_pool3d.out, [2, 3, 4]), (x3[0], A.adaptive_avg_pool3d.out, [5, 1, 3])):
        check(lambda x: _out(op, x, size), x)
        check(_nc(lambda x: _out(op, x, size)), _tr(x))
    for x, size in ((x3, [2, 3, 4]), (x3[0], [3, 7, 2])):
        g = torch.randn_like(A.adaptive_avg_pool3d(x, size))
        check(lambda g, x: _out(A.adaptive_avg_pool3d_backward.grad_input, g, x, kw="grad_input"), g, x)


# ------------------------------------------------------------ lanczos resize

SIZES = [(5, 11), (14, 3), (7, 7), (1, 20)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("align", [False, True])
def test_upsample_lanczos2d_aa(size, align, dtype):
    x = _rand(2, 3, 7, 9, dtype=dtype)
    check(lambda x: A._upsample_lanczos2d_aa(x, list(size), align, None, None), x)
    check(lambda x: _out(A._upsample_lanczos2d_aa.out, x, list(size), align, None, None), x)
    check(_nc(lambda x: A._upsample_lanczos2d_aa(x, list(size), align, None, None)), _tr(x))
    g = _rand(2, 3, *size, dtype=dtype)
    check(lambda g: A._upsample_lanczos2d_aa_backward(g, list(size), [2, 3, 7, 9], align, None, None), g)
    check(lambda g: _out(A._upsample_lanczos2d_aa_backward.grad_input, g, list(size), [2, 3, 7, 9], align, None,
                         None, kw="grad_input"), g)


@pytest.mark.parametrize("scales", [(0.6, 1.4), (2.5, 0.3)])
def test_upsample_lanczos2d_aa_scales(scales):
    # explicit scales (scale_factor with recompute_scale_factor=False) change the filter's width
    x = _rand(1, 2, 10, 9)
    size = [int(10 * scales[0]), int(9 * scales[1])]
    check(lambda x: A._upsample_lanczos2d_aa(x, size, False, *scales), x)
    g = _rand(1, 2, *size)
    check(lambda g: A._upsample_lanczos2d_aa_backward.grad_input(
        g, size, [1, 2, 10, 9], False, *scales, grad_input=torch.empty(0, device=g.device)), g)


def test_interpolate_lanczos_grad():
    for size in ((4, 13), (16, 5)):
        check_grad(lambda x: F.interpolate(x, size=size, mode="lanczos", antialias=True), _rand(2, 3, 8, 9))


# ------------------------------------------------------------ errors

def test_conv_legacy_errors():
    x, w = _rand(2, 4, 7, 7), _rand(3, 4, 3, 3)
    cases = [
        (lambda x, w: A.slow_conv_dilated2d(x, w, [2, 3], None, [1, 1], [1, 1], [1, 1]), (x, w)),  # kernel_size
        (lambda x, w: A.slow_conv_dilated2d(x, w, [3, 3], None, [1, 1], [1, 1], [1, 1]), (x[0, 0], w)),  # rank
        (lambda x, w: A.slow_conv_dilated2d(x, w, [3, 3], None, [1, 1], [1, 1], [1, 1]), (x[:, :3], w)),  # channels
        (lambda x, w: A._slow_conv2d_forward(x, w, [3, 3], None, [1, 1], [1, 1]), (x[0], w)),  # unbatched
        (lambda x, w: A._slow_conv2d_forward(x, w, [3, 3], None, [1, 1], [0, 0]), (x[..., :2, :2], w)),  # too small
        (lambda x, w: A._slow_conv2d_forward(x, w, [3, 3], None, [1, 1], [1, 1]), (x, w.double())),  # dtypes
        (lambda x, w: A.slow_conv3d_forward(x, w, [1, 3, 3], None, [1, 1, 1], [0, 0, 0]), (x, w[:, :, None])),
        (lambda x, w: A.slow_conv3d_forward(x, w, [1, 3, 3], None, [0, 1, 1], [0, 0, 0]),
         (x[:, :, None], w[:, :, None])),  # stride 0
        (lambda x, w: A.slow_conv_transpose2d(x, w, [3, 3], None, [1, 1], [0, 0], [1, 1], [1, 1]),
         (x, w.transpose(0, 1))),  # output_padding
        (lambda x, w: A.slow_conv_transpose2d(x, w, [3, 3]), (x[0, 0], w.transpose(0, 1))),
        (lambda x, w: A.slow_conv_transpose3d(x, w, [1, 3, 3], None, [1, 2, 1], [0, 0, 0], [1, 1, 1], [1, 1, 1]),
         (x[:, :, None], w.transpose(0, 1)[:, :, None])),
    ]
    # grad_output not of the forward's output shape (7 x 7 here)
    for g in (_rand(2, 3, 7, 6), _rand(2, 2, 7, 7), _rand(3, 7, 7)):
        cases.append((lambda g, x, w: A._slow_conv2d_backward(g, x, w, [3, 3], [1, 1], [1, 1], [True] * 3),
                      (g, x, w)))
    for fn, args in cases:
        with pytest.raises(Exception) as cpu:
            fn(*args)
        assert_raises_like(cpu.value, fn, *args)


def test_max_pool2d_backward_errors():
    x = _rand(2, 3, 8, 8)
    fn = lambda g, x: A.max_pool2d_backward(g, x, [2, 2], [2, 2], [0, 0], [1, 1], False)
    for g, xx in ((_rand(2, 3, 3, 4), x), (_rand(2, 3, 4, 4), x[0, 0]), (_rand(2, 3, 4, 4), x.long())):
        with pytest.raises(RuntimeError):
            fn(*to_tpu((g, xx)))
