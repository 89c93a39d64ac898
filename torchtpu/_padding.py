"""Padding symbolic sizes to buckets, for graphs where padding cannot change a result.

XLA programs have static shapes, so a graph traced with a symbolic size ``s``
(``dynamic=True``, ``mark_dynamic``, Dynamo's automatic dynamic shapes) needs a
program per value of ``s``. When every op of the graph treats the rows along
``s`` independently (elementwise ops, matmuls that do not contract over ``s``,
reductions and normalizations over other dims, attention over other dims,
convolutions and pooling over a batch ``s``, embeddings of ``s`` indices ...),
the rows past ``n`` of a program built for ``B >= n`` cannot reach rows below
``n``: the inputs are zero-padded from ``n`` to the bucket ``B`` (the next
power of two), the bucket's program runs, and the outputs are narrowed back to
``n``. So variable batch sizes in inference share a few programs.

The check is conservative: an op outside the tables below, an op that mixes
rows along ``s`` (a softmax or sum over ``s``, a matmul contracting ``s``, a
concatenation along ``s``), random ops, writes into inputs, a symbolic int
used as data, and indices computed on padded rows (they could be out of range
where the real rows are not) all keep ``s`` exact (one program per size, as
before). A bucket never passes the bound Dynamo's guards put on ``s``; a bucket
whose program still fails turns padding off for the graph (compile.py).

A value's rows along ``s``: a tensor whose shape holds ``s`` in one dim as
``s * inner`` (``inner`` free of ``s``: a view merged dims after it) has row
``i`` of ``s`` at indices ``[i * inner, (i + 1) * inner)`` of that dim, so its
real rows are a prefix of the padded ones.

Python glue: this reads shapes in FX metadata (sympy expressions); it emits nothing.
"""

from __future__ import annotations

import operator
import os

import torch
import torch.fx

from ._schema import aliases_input, is_view, named_args

_A = torch.ops.aten


def enabled() -> bool:
    v = os.environ.get("TORCHTPU_PAD_BUCKETS", "1")
    if v not in ("0", "1"):
        raise ValueError(f"TORCHTPU_PAD_BUCKETS must be 0 or 1, got {v!r}")
    return v == "1"


def bucket(n: int) -> int:
    """The bucket a size pads to: the next power of two."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


class _Keep(Exception):
    """The symbol stays exact: the message says why."""


def _expr(x):
    import sympy
    if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return x.node.expr
    if isinstance(x, int):
        return sympy.Integer(x)
    return None


def _has(x, s) -> bool:
    e = _expr(x)
    return e is not None and e.has(s)


def _marker(val, s):
    """(dim, inner) where tensor `val` holds s as s * inner; None if s is not in its
    shape (or `val` is no tensor). Raises _Keep for s in two dims or in another form."""
    import sympy
    if not isinstance(val, torch.Tensor):
        return None
    found = None
    for d, size in enumerate(val.shape):
        e = _expr(size)
        if e is None or not e.has(s):
            continue
        inner = sympy.cancel(e / s)
        if found is not None or inner.has(s):
            raise _Keep(f"a tensor of shape {tuple(val.shape)} holds {s} as {e}")
        found = (d, inner)
    return found


def _vals(node):
    v = node.meta.get("val")
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _dims(d, rank):
    """A dim argument (an int, a list, or None or [] for every dim) as a set of dims."""
    if isinstance(d, int) and not isinstance(d, bool):
        return {d % rank} if rank else set()
    if isinstance(d, (list, tuple)) and d and all(isinstance(x, int) for x in d):
        return {x % rank for x in d} if rank else set()
    return set(range(rank))


# A rule: (the op's arguments by schema name, the tensor's rank) → the dims along
# which the op mixes that tensor's rows.
def _dim_arg(named, rank):
    return _dims(named.get("dim"), rank)


def _fixed(*dims):
    return lambda named, rank: set(dims)


def _last(k):
    return lambda named, rank: set(range(max(rank - k, 0), rank))


def _normalized(named, rank):
    return _last(len(named["normalized_shape"]))(named, rank)


def _indexed(named, rank):
    return {d for d, i in enumerate(named["indices"]) if i is not None}


def _padded(named, rank):
    return set(range(rank - len(named["pad"]) // 2, rank))


def _all(named, rank):
    return set(range(rank))


def _none(named, rank):
    return set()


def _except_batch(named, rank):
    return set(range(1, rank))


# op name → ({tensor argument name: rule}, rule for the other tensor arguments).
# An op not here and not pointwise keeps the symbol exact.
_MIXING = {
    # matmuls: the contracted dims
    "mm": ({"self": _fixed(1), "mat2": _fixed(0)}, _none),
    "addmm": ({"mat1": _fixed(1), "mat2": _fixed(0)}, _none),
    "bmm": ({"self": _fixed(2), "mat2": _fixed(1)}, _none),
    "baddbmm": ({"batch1": _fixed(2), "batch2": _fixed(1)}, _none),
    # reductions, scans, slicing and joining along their `dim` argument
    **{name: ({}, _dim_arg) for name in (
        "sum", "mean", "amax", "amin", "var", "std", "logsumexp", "any", "all", "max", "min", "argmax",
        "argmin", "prod", "cumsum", "cumprod", "_softmax", "_log_softmax", "_softmax_backward_data",
        "_log_softmax_backward_data", "sort", "topk", "linalg_vector_norm", "select", "narrow", "unbind",
        "slice", "split", "split_with_sizes", "cat")},
    "stack": ({}, _none),
    "index_select": ({"self": _dim_arg}, _none),  # rows of the index are rows of the result
    "gather": ({"self": _dim_arg}, _none),
    "embedding": ({"weight": _all}, _none),
    "index": ({"self": _indexed}, _none),  # x[idx]: rows of idx, or rows of x's other dims
    "constant_pad_nd": ({}, _padded),
    "flip": ({}, lambda named, rank: _dims(named.get("dims"), rank)),
    "native_layer_norm": ({"input": _normalized}, _all),
    "_native_batch_norm_legit_no_training": ({"input": _none}, _all),
    # batch-first image ops
    "convolution": ({"input": _except_batch}, _all),
    "max_pool2d_with_indices": ({}, _last(2)),
    "avg_pool2d": ({}, _last(2)),
    "_adaptive_avg_pool2d": ({}, _last(2)),
    # attention on [batch, heads, length, features]: rows of batch and heads only
    **{name: ({}, _last(2)) for name in (
        "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_fused_attention_overrideable")},
    # rearranging ops: no dim mixes (their results are matched by size in _match_outputs)
    **{name: ({}, _none) for name in (
        "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "clone", "_to_copy", "alias",
        "detach", "lift_fresh_copy", "copy", "view", "_unsafe_view", "reshape",
        # position-wise or value-free
        "tril", "triu", "zeros_like", "ones_like", "full_like", "empty_like", "fill")},
}

# Ops whose result's shape may take s from a size argument (by schema name); a
# symbolic size anywhere else is data, and keeps s exact.
_SIZE_ARGS = {"view": "size", "_unsafe_view": "size", "reshape": "shape", "expand": "size", "full": "size",
              "zeros": "size", "ones": "size", "empty": "size", "new_zeros": "size", "new_ones": "size",
              "new_full": "size", "new_empty": "size", "arange": "end", "slice": "end"}
_VIEWS = {"view", "_unsafe_view", "reshape"}


def _name(op) -> str:
    return op._schema.name.split("::", 1)[-1]


def _tensor_args(node, named):
    """(schema name, fx node) for every tensor argument, lists flattened."""
    out = []
    for name, a in named.items():
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            if isinstance(x, torch.fx.Node) and isinstance(x.meta.get("val"), torch.Tensor):
                out.append((name, x))
    return out


def _full_slice(named) -> bool:
    """slice(x, dim, 0, end) that keeps the whole dim (Dynamo writes x[:, a:b] so)."""
    val = named["self"].meta["val"]
    size = _expr(val.shape[named["dim"] % val.dim()])
    end = named["end"]
    end = end.meta.get("val") if isinstance(end, torch.fx.Node) else end
    return (named["start"] in (0, None) and named["step"] == 1
            and (end is None or (isinstance(end, int) and end >= 2 ** 62) or _expr(end) == size))


# Index arguments of ops that check their indices at run time (out of range raises).
_INDEX_ARGS = {"index": "indices", "index_select": "index", "gather": "index", "embedding": "indices"}


def _check_indices(node, name, named, marks, rows):
    """Padded rows of an index argument must hold valid indices, or the padded program
    raises where the exact one would not: zeros (a padded input, and its views and
    copies), rows that repeat unpadded values (an expanded table), or arange(s)
    reading the padded dim of `self` itself."""
    given = named[_INDEX_ARGS[name]]
    if name == "index":
        at = list(enumerate(given))
    else:
        at = [(named.get("dim"), given)]
    self_mark = marks.get(named.get("self"))
    for d, x in at:
        if not isinstance(x, torch.fx.Node) or marks.get(x) is None or rows.get(x) == "valid":
            continue
        if rows.get(x) == "index" and name in ("index", "index_select") and self_mark is not None \
                and d is not None and d % max(named["self"].meta["val"].dim(), 1) == self_mark[0]:
            continue
        raise _Keep(f"{node.target}: indices computed on padded rows may be out of range")


def _check_op(node, named, s, marks, rows):
    """Raises _Keep when op `node` may mix rows along s; returns its outputs' markers.
    `rows`: values whose padded rows are known: "valid" (indices wherever the real
    rows are: zeros of padded inputs, or values repeated from unpadded tensors) or
    "index" (each element holds its row along s: arange(s)), and their views."""
    name = _name(node.target)
    tags = node.target.tags
    outs = [_marker(v, s) for v in _vals(node)]
    ins = [(arg, x, marks.get(x)) for arg, x in _tensor_args(node, named)]
    marked = any(m is not None for _, _, m in ins)
    if torch.Tag.nondeterministic_seeded in tags and (marked or any(outs)):
        raise _Keep(f"{node.target} draws random numbers")
    if named.get("dropout_p") not in (None, 0, 0.0):
        raise _Keep(f"{node.target} with dropout")
    for arg, a in named.items():
        for x in (a if isinstance(a, (list, tuple)) else [a]):
            v = x.meta.get("val") if isinstance(x, torch.fx.Node) else x
            if not isinstance(v, torch.Tensor) and _has(v, s) and _SIZE_ARGS.get(name) != arg:
                raise _Keep(f"{node.target} reads {s} as a value ({arg})")
    if not marked:
        if any(outs) and name not in _SIZE_ARGS and torch.Tag.pointwise not in tags:
            raise _Keep(f"{node.target} makes a tensor sized by {s}")
        return outs
    if torch.Tag.pointwise not in tags:
        if name not in _MIXING:
            raise _Keep(f"{node.target} is not known to keep rows apart")
        by_arg, default = _MIXING[name]
        for arg, x, m in ins:
            mixed = by_arg.get(arg, default)(named, x.meta["val"].dim())
            if name == "index":  # x[arange(s)[:, None], j]: row i reads row i
                mixed -= {d for d, i in enumerate(named["indices"]) if rows.get(i) == "index"}
            if m is not None and m[0] in mixed and not (name == "slice" and _full_slice(named)):
                raise _Keep(f"{node.target} mixes rows along {s}")
    if name in _INDEX_ARGS:
        _check_indices(node, name, named, marks, rows)
    _match_outputs(node, name, ins, outs, s)
    return outs


def _match_outputs(node, name, ins, outs, s):
    """Every output keeps s, in the size an input had it (or, for a view, at the same
    flat offset), so row i of the output is row i of the inputs."""
    import sympy
    several = isinstance(node.meta.get("val"), (list, tuple))
    used = {u.args[1] for u in node.users if u.target is operator.getitem} if several else {0}
    for k, (val, m) in enumerate(zip(_vals(node), outs)):
        if not isinstance(val, torch.Tensor) or k not in used:  # batch norm's saved stats in eval
            continue
        if m is None:
            raise _Keep(f"{node.target} reduces over {s}")
        if name in _VIEWS:
            x, (d, _) = ins[0][1], ins[0][2]  # a view's one tensor argument
            before_in = sympy.Mul(*[_expr(z) for z in x.meta["val"].shape[:d]])
            before_out = sympy.Mul(*[_expr(z) for z in val.shape[:m[0]]])
            if sympy.expand(before_in - before_out) != 0:
                raise _Keep(f"{node.target} moves {s} inside another dim")
        elif not any(im is not None and sympy.expand(im[1] - m[1]) == 0 for _, _, im in ins):
            raise _Keep(f"{node.target} changes the size of the dim holding {s}")


class Plan:
    """How to pad and narrow one graph's calls (see the module docstring)."""

    def __init__(self, symbols, sources, inputs, sym_inputs, outputs, sym_outputs, passed, upper):
        self.symbols = symbols          # the padded symbols
        self.sources = sources          # symbol → (arg index, dim or None): where a call gives its value
        self.inputs = inputs            # (arg index, symbol, dim, inner)
        self.sym_inputs = sym_inputs    # (arg index, symbol): the int input that is the size itself
        self.outputs = outputs          # (output index, symbol, dim, inner, contiguous)
        self.sym_outputs = sym_outputs  # (output index, expression): sizes the graph returns
        self.passed = passed            # (output index, arg index): an input returned as it is
        self.upper = upper              # symbol → the largest value Dynamo's guards allow
        self._memo = {}                 # real sizes → _resolved(...)

    def sizes(self, args) -> dict:
        vals = {}
        for sym, (i, d) in self.sources.items():
            vals[sym] = int(args[i]) if d is None else int(args[i].shape[d])
        return vals

    def _resolved(self, vals):
        """The integers one set of real sizes needs: each symbol's bucket, each input's
        padding, each output's length, each size output. Computed once per set of sizes
        (a sympy substitution costs tens of microseconds; a call should not pay it)."""
        key = tuple(vals.values())
        r = self._memo.get(key)
        if r is None:
            buckets = {sym: bucket(vals[sym]) for sym in self.symbols}
            for sym, top in self.upper.items():
                buckets[sym] = max(min(buckets[sym], top), vals[sym])
            r = (buckets,
                 [(buckets[sym] - vals[sym]) * int(inner.subs(vals)) for _, sym, _, inner in self.inputs],
                 [vals[sym] * int(inner.subs(vals)) for _, sym, _, inner, _ in self.outputs],
                 [int(e.subs(vals)) for _, e in self.sym_outputs])
            if len(self._memo) >= 1024:  # sizes that never repeat: keep it bounded
                self._memo.clear()
            self._memo[key] = r
        return r

    def pad(self, args, vals):
        """The call's arguments at the bucket sizes; None when they already are."""
        buckets, extras, _, _ = self._resolved(vals)
        if all(buckets[sym] == vals[sym] for sym in self.symbols):
            return None
        out = list(args)
        for (i, _, d, _), extra in zip(self.inputs, extras):
            if extra:
                x = args[i]
                out[i] = torch.nn.functional.pad(x, [0, 0] * (x.dim() - 1 - d) + [0, extra])
        for i, sym in self.sym_inputs:
            out[i] = buckets[sym]
        return out

    def narrow(self, outs, vals, args):
        """The bucket program's results for the call that passed `args`."""
        _, _, lengths, sizes = self._resolved(vals)
        outs = list(outs)
        for (j, _, d, _, contiguous), n in zip(self.outputs, lengths):
            y = outs[j].narrow(d, 0, n)
            outs[j] = y.contiguous() if contiguous else y
        for (j, _), n in zip(self.sym_outputs, sizes):
            outs[j] = n
        for j, i in self.passed:
            outs[j] = args[i]
        return outs


def plan(gm: torch.fx.GraphModule, example_inputs):
    """The Plan for a graph with symbolic sizes, or (None, reason)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    sources, candidates = {}, []
    for i, ex in enumerate(example_inputs):
        if isinstance(ex, torch.SymInt) and ex.node.expr.is_Symbol:
            sources.setdefault(ex.node.expr, (i, None))
        elif isinstance(ex, torch.Tensor):
            for d, size in enumerate(ex.shape):
                e = _expr(size)
                if e is not None and e.is_Symbol:
                    sources.setdefault(e, (i, d))
    reasons = []
    inners = {}
    for sym in sources:
        try:
            candidates.append((sym, _analyse(gm, placeholders, example_inputs, sym, inners)))
        except _Keep as e:
            reasons.append(str(e))
    chosen = []
    for sym, found in candidates:  # a merged dim's inner size must stay exact
        if not any(inner.has(c) for c, _ in chosen for inner in inners[sym]) and \
           not any(inner.has(sym) for c, _ in chosen for inner in inners[c]):
            chosen.append((sym, found))
    if not chosen:
        return None, "; ".join(reasons) or "no symbolic size"
    inputs, sym_inputs, outputs, sym_outputs, passed = [], [], [], {}, set()
    for sym, (ins, syms, outs, souts, same) in chosen:
        inputs += ins
        sym_inputs += syms
        outputs += outs
        sym_outputs.update(souts)
        passed.update(same)
    symbols = [c for c, _ in chosen]
    return Plan(symbols, sources, inputs, sym_inputs, outputs, sorted(sym_outputs.items()), sorted(passed),
                _upper_bounds(example_inputs, symbols)), None


def _upper_bounds(example_inputs, symbols) -> dict:
    """The largest value each symbol may take (Dynamo's value ranges: a size checked
    against a table, `torch._check(b <= 16)`): a bucket never goes past it."""
    env = None
    for ex in example_inputs:
        sizes = [ex] if isinstance(ex, torch.SymInt) else list(ex.shape) if isinstance(ex, torch.Tensor) else []
        env = next((x.node.shape_env for x in sizes if isinstance(x, torch.SymInt)), None)
        if env is not None:
            break
    bounds = {}
    for sym in symbols:
        r = env.var_to_range.get(sym) if env is not None else None
        if r is not None and getattr(r.upper, "is_Integer", False):  # not int_oo
            bounds[sym] = int(r.upper)
    return bounds


# Ops that make a tensor sized by s from unpadded values: each row holds the same values.
_FILLS = {"expand", "full", "zeros", "ones", "new_zeros", "new_ones", "new_full"}
# Ops that keep each element's value and its row along s (checked by _check_op).
_KEEPS_VALUES = {"unsqueeze", "view", "_unsafe_view", "reshape", "expand", "clone", "_to_copy", "alias", "detach",
                 "lift_fresh_copy", "slice"}


def _known_rows(node, named, s, marks, rows):
    """What `node`'s padded rows hold (see _check_op), or None."""
    name = _name(node.target)
    if name == "arange":
        end = named.get("end")
        end = end.meta.get("val") if isinstance(end, torch.fx.Node) else end
        plain = _expr(end) == s and named.get("start", 0) in (0, None) and named.get("step", 1) in (1, None)
        return "index" if plain else None
    tensors = [x for _, x in _tensor_args(node, named)]
    if name in _FILLS and not any(x in marks for x in tensors):
        return "valid"  # every row the same values, independent of s
    return rows.get(tensors[0]) if name in _KEEPS_VALUES and tensors else None


def _analyse(gm, placeholders, example_inputs, s, inners):
    marks, ins, syms, rows = {}, [], [], {}
    for i, (node, ex) in enumerate(zip(placeholders, example_inputs)):
        if isinstance(ex, torch.Tensor):
            m = _marker(ex, s)
            if m is not None:
                if ex.device.type != "tpu":
                    raise _Keep(f"input {node.name} is on {ex.device}")
                marks[node] = m
                rows[node] = "valid"
                ins.append((i, s, m[0], m[1]))
        elif _has(ex, s):
            if ex.node.expr != s:
                raise _Keep(f"input {node.name} is {ex.node.expr}")
            syms.append((i, s))
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem:
            m = _marker(node.meta.get("val"), s)
            if m is not None:
                marks[node] = m
            continue
        if not isinstance(node.target, torch._ops.OpOverload):
            continue  # arithmetic on sizes: checked where a size is read
        if node.target is _A.copy_.default:
            raise _Keep("the graph writes into an input")
        if not isinstance(node.meta.get("val"), (torch.Tensor, list, tuple)):
            continue  # sym_size and other sizes
        named = named_args(node.target, node.args, node.kwargs)
        for val, m in zip(_vals(node), _check_op(node, named, s, marks, rows)):
            if m is not None:
                marks.setdefault(node, m)
        known = _known_rows(node, named, s, marks, rows)
        if known is not None and node in marks:
            rows[node] = known
    inners[s] = [m[1] for m in marks.values()]
    return ins, syms, *_outputs(gm, s, marks, placeholders)


def _views_input(node) -> bool:
    """Whether `node` may be a view of a graph input: AOTAutograd rebuilds such an
    output from the caller's input by its view metadata, which a narrowed padded
    result does not share."""
    while node.op == "call_function":
        if node.target is not operator.getitem and not aliases_input(node.target):
            return False
        node = node.args[0]
    return node.op == "placeholder"


def _outputs(gm, s, marks, placeholders):
    outs, souts, passed = [], {}, []
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    for j, o in enumerate(out_node.args[0]):
        if not isinstance(o, torch.fx.Node):
            continue
        val = o.meta.get("val")
        if isinstance(val, torch.Tensor) and val.shape and _marker(val, s) is not None:
            if o.op == "placeholder":  # returned as the caller passed it, unpadded
                passed.append((j, placeholders.index(o)))
                continue
            if _views_input(o):
                raise _Keep(f"output {o.name} is a view of an input")
            d, inner = _marker(val, s)
            # a view of another output stays one (no contiguous copy: they share storage)
            outs.append((j, s, d, inner, val.is_contiguous() and not is_view(o.target)))
        elif isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and _has(val, s):
            souts[j] = val.node.expr
    return outs, souts, passed
