"""torch.uint16, uint32 and uint64 on tpu vs PyTorch on CPU.

PyTorch gives these three "shell" dtypes a small set of kernels (copies, casts,
comparisons for equality, bitwise ops, mul, sums, sort, indexing); each op below
is one the CPU runs, compared exactly, with values at the top of each dtype's
range so that a signed reading of the bits would show. Ops the CPU refuses for
these dtypes (add, lt, max, ...) are not compared: there is no reference."""
import pytest
import torch

from tpu_testing import check

DTYPES = [torch.uint16, torch.uint32, torch.uint64]
TOP = {torch.uint16: 2**16 - 1, torch.uint32: 2**32 - 1, torch.uint64: 2**64 - 1}
SIGNED = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}

OPS = {
    "mul": lambda x, y, i: x * y,
    "mul_scalar": lambda x, y, i: x * 3,
    "eq": lambda x, y, i: x == y,
    "ne": lambda x, y, i: x != y,
    "eq_scalar": lambda x, y, i: x == 7,
    "and": lambda x, y, i: x & y,
    "or": lambda x, y, i: x | y,
    "xor": lambda x, y, i: x ^ y,
    "sum": lambda x, y, i: x.sum(),
    "sum_dim": lambda x, y, i: x.sum(1),
    "prod": lambda x, y, i: x.prod(1),
    "cumsum": lambda x, y, i: x.cumsum(1),
    "any_all": lambda x, y, i: (x.any(), (x * y).all()),
    "true_divide": lambda x, y, i: x / y,
    "to_float32": lambda x, y, i: x.to(torch.float32),
    "to_float64": lambda x, y, i: x.double(),
    "to_int64": lambda x, y, i: x.to(torch.int64),
    "from_float64": lambda x, y, i: (x.double() * 0.5).to(x.dtype),
    "view_signed": lambda x, y, i: x.view(SIGNED[x.dtype]),
    "view_bytes": lambda x, y, i: x.view(torch.uint8),
    "sort": lambda x, y, i: x.sort(1),
    "sort_descending": lambda x, y, i: x.sort(0, descending=True),
    "argsort": lambda x, y, i: x.argsort(1),
    "unique": lambda x, y, i: x.unique(return_counts=True),
    "where": lambda x, y, i: torch.where(x == y, x, y),
    "cat_stack": lambda x, y, i: (torch.cat([x, y]), torch.stack([x, y], 1)),
    "index": lambda x, y, i: x[i],
    "index_select": lambda x, y, i: x.index_select(1, i),
    "masked_select": lambda x, y, i: x[x == y],
    "setitem": lambda x, y, i: _setitem(x.clone(), y),
    "flip_roll": lambda x, y, i: (x.flip(0), x.roll(1, 1)),
    "transpose_copy": lambda x, y, i: x.t().contiguous(),
    "repeat_expand": lambda x, y, i: (x.repeat(2, 1), x[:1].expand(3, -1).contiguous()),
    "fill_zero": lambda x, y, i: (x.clone().fill_(7), x.clone().zero_()),
}


def _setitem(x, y):
    x[:, 1] = y[:, 2]
    return x


def _inputs(dtype):
    top = TOP[dtype]
    x = torch.tensor([[1, 5, top], [top - 1, 0, 3], [7, 7, 2]], dtype=dtype)
    y = torch.tensor([[3, 5, 1], [2, 9, 3], [7, 0, top]], dtype=dtype)
    return x, y, torch.tensor([2, 0])


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unsigned_op(dtype, name):
    check(OPS[name], *_inputs(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unsigned_round_trip_and_creation(dtype):
    x, _, _ = _inputs(dtype)
    t = x.to("tpu")
    assert t.dtype == dtype and t.device.type == "tpu"
    assert torch.equal(t.cpu(), x)
    full = torch.full((2, 3), TOP[dtype], dtype=dtype, device="tpu")
    assert torch.equal(full.cpu(), torch.full((2, 3), TOP[dtype], dtype=dtype))
    z = torch.zeros(4, dtype=dtype, device="tpu")
    assert z.dtype == dtype and torch.equal(z.cpu(), torch.zeros(4, dtype=dtype))
    e = torch.empty(5, dtype=dtype, device="tpu").copy_(torch.arange(5).to(dtype))
    assert torch.equal(e.cpu(), torch.arange(5).to(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unsigned_compiled(dtype):
    def f(x, y):
        return (x * y) ^ x, (x == y).sum()

    x, y, _ = _inputs(dtype)
    expected = f(x, y)
    actual = torch.compile(f, backend="tpu", fullgraph=True)(x.to("tpu"), y.to("tpu"))
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype and torch.equal(a.cpu(), e)


# Ops the CPU refuses for these dtypes run on tpu; each is judged against exact
# arithmetic on Python ints, wrapped modulo 2**bits as C's unsigned types wrap.
BEYOND_CPU = {
    "add": (lambda x, y: x + y, lambda a, b: a + b),
    "sub": (lambda x, y: x - y, lambda a, b: a - b),
    "floor_divide": (lambda x, y: x // y, lambda a, b: a // b),
    "remainder": (lambda x, y: x % y, lambda a, b: a % b),
    "maximum": (torch.maximum, max),
    "minimum": (torch.minimum, min),
    "lt": (lambda x, y: x < y, lambda a, b: a < b),
    "ge": (lambda x, y: x >= y, lambda a, b: a >= b),
    "shift_right": (lambda x, y: x >> 3, lambda a, b: a >> 3),
    "neg": (lambda x, y: -x, lambda a, b: -a),
}


@pytest.mark.parametrize("name", sorted(BEYOND_CPU))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_unsigned_op_beyond_cpu(dtype, name):
    tpu_fn, ref = BEYOND_CPU[name]
    top = TOP[dtype]
    xs, ys = [1, 5, top, top - 1, 2**15, 9], [3, 5, 1, top, 7, 2]
    out = tpu_fn(torch.tensor(xs, dtype=dtype).to("tpu"), torch.tensor(ys, dtype=dtype).to("tpu"))
    want = [ref(a, b) for a, b in zip(xs, ys)]
    if out.dtype == torch.bool:
        assert out.cpu().tolist() == want
    else:
        wrapped = [w % (top + 1) for w in want]
        assert out.dtype == dtype and out.cpu().tolist() == wrapped
        assert out.max().item() == max(wrapped)  # an unsigned max over the results, too


def test_uint64_python_scalars_past_int64_max():
    # A Python int above 2**63 - 1 reaches the op as a uint64 scalar: its bits, not an overflow.
    big = 2**64 - 1
    x = torch.tensor([1, 2, 2**63 + 5], dtype=torch.uint64)
    check(lambda t: (t * big, t == big, t.clone().fill_(big)), x)
    check(lambda t: (t.float() * big, t.double() + big), x)
    # ... also where the op takes a Scalar argument rather than a tensor operand.
    f = torch.tensor([1.0, -2.0, 0.5])
    check(lambda t: torch.add(t, t, alpha=big), f)
    # CPU's sub negates alpha as a uint64 (wrapping: -(2**64 - 1) == 1) and so
    # returns t + t; tpu returns t - alpha * t, checked against float64 arithmetic.
    d = f.double()
    for alpha in (big, 2**63 + 5):
        out = torch.sub(d.to("tpu"), d.to("tpu"), alpha=alpha).cpu()
        torch.testing.assert_close(out, d - float(alpha) * d, rtol=1e-15, atol=0)
