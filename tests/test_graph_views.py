"""View-family, scatter and factory lowerings (runtime/src/ops/views.c, factory.c)
inside a graph (torchtpu._C.Graph), against the same aten op on the CPU.

In a functionalized FX graph these ops are ordinary nodes over logical tensors;
eager mode never reaches their lowerings. Each case records one op over graph
inputs and compares every result (values, dtype, shape) with PyTorch."""
import pytest
import torch

import torchtpu
from torchtpu._schema import schema_args

A = torch.ops.aten
V = torchtpu._C.GraphValue


class T:
    """Placeholder for tensor input i of a case."""

    def __init__(self, i):
        self.i = i


def _sub(args, ins, vals):
    out = []
    for a in args:
        if isinstance(a, T):
            out.append(vals[a.i] if vals is not None else ins[a.i])
        elif isinstance(a, list) and a and all(isinstance(e, T) for e in a):
            out.append([vals[e.i] if vals is not None else ins[e.i] for e in a])
        else:
            out.append(a)
    return out


def _op(name, overload):
    return getattr(getattr(A, name), overload or "default")


def run_graph(name, overload, args, ins, nresults, kwargs=None):
    g = torchtpu._C.Graph()
    vals = [V(g.add_input()) for _ in ins]
    full = schema_args(_op(name, overload), args, kwargs or {})  # as the graph walk fills them
    first = g.apply("aten::" + name, overload, _sub(full, ins, vals), nresults)
    g.set_outputs(list(range(first, first + nresults)))
    return g.run([t.to("tpu") for t in ins])


def run_cpu(name, overload, args, ins, kwargs=None):
    return _op(name, overload)(*_sub(args, ins, None), **(kwargs or {}))


def check(name, overload, args, ins, kwargs=None):
    want = run_cpu(name, overload, args, ins, kwargs)
    want = list(want) if isinstance(want, (list, tuple)) else [want]
    got = run_graph(name, overload, args, ins, len(want), kwargs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.cpu()
        assert g.dtype == w.dtype and g.shape == w.shape, (name, g.dtype, g.shape, w.dtype, w.shape)
        assert torch.equal(g, w.contiguous()), (name, g, w)


x23 = torch.arange(6.0).reshape(2, 3)
x234 = torch.arange(24.0).reshape(2, 3, 4)
x34 = torch.arange(12.0).reshape(3, 4)
BIG = 2**63 - 1

CASES = [
    ("view", "", [T(0), [3, -1]], [x23]),
    ("view", "dtype", [T(0), torch.int32], [x23]),
    ("view", "dtype", [T(0), torch.bfloat16], [x23]),
    ("view", "dtype", [T(0), torch.float32], [torch.arange(8.0).reshape(2, 4).to(torch.bfloat16)]),
    ("view", "dtype", [T(0), torch.bool], [torch.tensor([0, 1, 2], dtype=torch.uint8)]),
    ("view_copy", "", [T(0), [-1]], [x234]),
    ("_unsafe_view", "", [T(0), [4, 6]], [x234]),
    ("reshape", "", [T(0), [2, -1, 2]], [x234]),
    ("alias", "", [T(0)], [x23]),
    ("detach", "", [T(0)], [x23]),
    ("permute", "", [T(0), [2, 0, -2]], [x234]),
    ("permute_copy", "", [T(0), [-1, 1, 0]], [x234]),
    ("transpose", "int", [T(0), -1, 0], [x234]),
    ("transpose_copy", "int", [T(0), 1, 1], [x234]),
    ("t", "", [T(0)], [x23]),
    ("t_copy", "", [T(0)], [torch.arange(3.0)]),
    ("expand", "", [T(0), [2, -1, 4]], [torch.arange(3.0).reshape(3, 1)]),
    ("expand_copy", "", [T(0), [3, 0]], [torch.arange(3.0).reshape(3, 1)]),
    ("expand", "", [T(0), [2, 3]], [torch.tensor(5.0)]),
    ("slice", "Tensor", [T(0), -1, 1, None, 2], [x34]),
    ("slice", "Tensor", [T(0), 0, -2, BIG, 1], [x34]),
    ("slice", "Tensor", [T(0), 1, -100, 100, 3], [x34]),
    ("slice_copy", "Tensor", [T(0), 1, 3, 1, 1], [x34]),
    ("select", "int", [T(0), 1, -1], [x234]),
    ("select_copy", "int", [T(0), -1, 2], [x234]),
    ("narrow", "", [T(0), -1, -3, 2], [x234]),
    ("squeeze", "", [T(0)], [torch.arange(3.0).reshape(1, 3, 1)]),
    ("squeeze", "dim", [T(0), -1], [torch.arange(3.0).reshape(1, 3, 1)]),
    ("squeeze", "dims", [T(0), [0, 1]], [torch.arange(3.0).reshape(1, 3, 1)]),
    ("squeeze_copy", "dims", [T(0), [0, 2]], [torch.arange(3.0).reshape(1, 3, 1)]),
    ("unsqueeze", "", [T(0), -1], [x23]),
    ("unsqueeze_copy", "", [T(0), 0], [torch.tensor(2.0)]),
    ("diagonal", "", [T(0), 1], [x34]),
    ("diagonal", "", [T(0), -2], [x34]),
    ("diagonal", "", [T(0), 1, -1, 0], [x234]),
    ("diagonal_copy", "", [T(0), -1, 2, 1], [x234]),
    ("diagonal", "", [T(0), 7], [x34]),
    ("unfold", "", [T(0), 0, 3, 2], [torch.arange(7.0)]),
    ("unfold", "", [T(0), 1, 2, 1], [x234]),
    ("unfold_copy", "", [T(0), -1, 4, 4], [x234]),
    ("unfold", "", [T(0), 0, 1, 1], [torch.tensor(5.0)]),
    ("split", "Tensor", [T(0), 2, -1], [x234]),
    ("split", "sizes", [T(0), [1, 2], 1], [x234]),
    ("split_copy", "Tensor", [T(0), 5, 0], [x234]),
    ("split_with_sizes", "", [T(0), [1, 0, 3], -1], [x234]),
    ("split_with_sizes_copy", "", [T(0), [2], 0], [x234]),
    ("unbind", "int", [T(0), -1], [x234]),
    ("unbind_copy", "int", [T(0), 0], [x234]),
    ("stack", "", [[T(0), T(1)], -1], [x23, x23.int()]),
    ("stack", "", [[T(0), T(1), T(0)], 1], [x23, x23 * 2]),
    ("as_strided", "", [T(0), [2, 2], [1, 2], 1], [x23]),
    ("as_strided", "", [T(0), [3, 2], [2, 0], None], [x23]),
    ("as_strided_copy", "", [T(0), [], [], 5], [x23]),
    ("slice_scatter", "", [T(0), T(1), -1, 0, None, 3], [x34, -torch.ones(3, 2)]),
    ("slice_scatter", "", [T(0), T(1), 0, 1, BIG, 1], [x34, -torch.ones(2, 4)]),
    ("slice_scatter", "", [T(0), T(1), 1, 3, 1, 1], [x34, torch.ones(3, 0)]),
    ("select_scatter", "", [T(0), T(1), 1, -1], [x234, -torch.ones(2, 4)]),
    ("diagonal_scatter", "", [T(0), T(1), 1], [x34, -torch.arange(3.0)]),
    ("diagonal_scatter", "", [T(0), T(1), -1, 1, 0], [x34, -torch.arange(3.0)]),
    ("diagonal_scatter", "", [T(0), T(1), 1, -1, 0], [x234, -torch.ones(3, 1)]),
    ("as_strided_scatter", "", [T(0), T(1), [2, 2], [1, 2], 1], [x23, -torch.arange(4.0).reshape(2, 2)]),
    ("full", "", [[2, 3], 2.5], []),
    ("full", "", [[2], 3], []),
    ("full", "", [[2], True], []),
    ("full", "", [[2, 2], 7.9], [], {"dtype": torch.int32}),
    ("zeros", "", [[2, 3]], []),
    ("ones", "", [[3]], [], {"dtype": torch.int64}),
    ("scalar_tensor", "", [3], []),
    ("new_zeros", "", [T(0), [2]], [x23.int()]),
    ("new_ones", "", [T(0), [2]], [x23.int()], {"dtype": torch.float64}),
    ("new_full", "", [T(0), [3], 1.5], [x23.int()]),
    ("new_full", "", [T(0), [3], 1.5], [x23.int()], {"dtype": torch.float32}),
    ("zeros_like", "", [T(0)], [x23]),
    ("ones_like", "", [T(0)], [x23], {"dtype": torch.bool}),
    ("full_like", "", [T(0), -2.5], [x23.int()]),
    ("clone", "", [T(0)], [x23]),
    ("lift_fresh_copy", "", [T(0)], [x23]),
    ("_to_copy", "", [T(0)], [x23 * 1.5 - 2], {"dtype": torch.int32}),
    ("copy", "", [T(0), T(1)], [torch.zeros(2, 3, dtype=torch.int32), torch.tensor([1.5, -2.5, 3.0])]),
]


CASES = [c if len(c) == 5 else c + ({},) for c in CASES]


@pytest.mark.parametrize("name,overload,args,ins,kwargs", CASES,
                         ids=[f"{c[0]}.{c[1] or 'default'}-{i}" for i, c in enumerate(CASES)])
def test_graph_view_op_matches_cpu(name, overload, args, ins, kwargs):
    check(name, overload, args, ins, kwargs)


@pytest.mark.parametrize("name,overload,args,ins", [
    ("empty", "memory_format", [[2, 3]], []),
    ("empty_strided", "", [[2, 3], [1, 2]], []),
    ("new_empty", "", [T(0), [4]], [x23]),
    ("new_empty_strided", "", [T(0), [4], [1]], [x23]),
    ("empty_like", "", [T(0)], [x23]),
])
def test_graph_empty_factories_are_zeros(name, overload, args, ins):
    want = run_cpu(name, overload, args, ins)
    (got,) = run_graph(name, overload, args, ins, 1)
    got = got.cpu()
    assert got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, torch.zeros_like(want))


@pytest.mark.parametrize("name,overload,args,ins", [
    ("view", "", [T(0), [4]], [x23]),
    ("view", "", [T(0), [-1, -1]], [x23]),
    ("permute", "", [T(0), [0, 0]], [x23]),
    ("expand", "", [T(0), [4, 3]], [x23]),
    ("slice", "Tensor", [T(0), 0, 0, 1, 0], [x23]),
    ("select", "int", [T(0), 0, 2], [x23]),
    ("squeeze", "dims", [T(0), [0, 0]], [x23]),
    ("diagonal", "", [T(0), 0, 1, -1], [x23]),
    ("unfold", "", [T(0), 1, 4, 1], [x23]),
    ("split_with_sizes", "", [T(0), [1, 1], 1], [x23]),
    ("as_strided", "", [T(0), [2, 2], [1, 3], 3], [x23]),
    ("slice_scatter", "", [T(0), T(1), 1, 0, None, 2], [x23, torch.ones(2, 1)]),
    ("stack", "", [[T(0), T(1)], 0], [x23, x23.t()]),
    ("full", "", [[-1], 1.0], []),
])
def test_graph_view_op_errors_like_cpu(name, overload, args, ins):
    with pytest.raises((RuntimeError, IndexError)):
        run_cpu(name, overload, args, ins)
    with pytest.raises((RuntimeError, IndexError)):
        run_graph(name, overload, args, ins, 1)


@pytest.mark.parametrize("name", ["rand_like", "randn_like"])
def test_graph_rand_like(name):
    (a,) = run_graph(name, "", [T(0)], [torch.zeros(4096)], 1)
    (b,) = run_graph(name, "", [T(0)], [torch.zeros(4096)], 1)
    a, b = a.cpu(), b.cpu()
    assert a.dtype == torch.float32 and a.shape == (4096,)
    assert not torch.equal(a, b)  # a fresh draw every run
    if name == "rand_like":
        assert 0 <= a.min() and a.max() < 1 and abs(a.mean() - 0.5) < 0.05
    else:
        assert abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1
