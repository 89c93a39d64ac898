"""``torch.compile(model, backend="tpu")``: each FX graph becomes ONE program.

Dynamo captures the Python; AOTAutograd turns each captured graph into
functionalized aten forward and backward graphs (min-cut partition). This
module only walks those graphs: every aten node is recorded, by name and
schema arguments, into a runtime graph (``torchtpu._C.Graph``, backed by
``runtime/include/torchtpu/graph.h``), where the same C lowerings as eager ops
emit it into one StableHLO module. The program is compiled on its first run
through the same executable cache as eager ops (and its disk tier), and runs
asynchronously like an eager op.

* Decompositions are used only for ops with no lowering (PyTorch's core aten
  table, filtered by ``_C.op_supported``).
* Scalars that change between calls (a scheduled learning rate Dynamo passes
  as a float, 0-dim cpu tensors such as optimizer steps) are runtime inputs of
  the program, never constants: changing them never recompiles.
* A graph with an op the runtime cannot hold (no lowering and no
  decomposition, data-dependent shapes) runs as tpu eager ops instead, with a
  warning naming the op; ``torchtpu.metrics()["graph_fallbacks"]`` counts them.
* Symbolic sizes (``dynamic=True``, ``mark_dynamic``): a symbolic int that only
  feeds arithmetic stays a runtime operand (a decode position: one program for
  every value). XLA programs have static shapes, so a graph whose tensors have
  symbolic sizes, or that needs a symbolic int as a size, gets one program per
  distinct set of sizes, built on first use, at most ``TORCHTPU_GRAPH_PROGRAMS``
  (default 8) per graph; sizes past the cap run as eager ops, with one warning.
  A size along which no op mixes rows (a batch) is padded to a power-of-two
  bucket first, and the results narrowed back (``_padding.py``).

Python glue only: no lowering logic here.
"""

from __future__ import annotations

import operator
import os
import warnings

import torch
import torch.fx

from . import _C, _padding, _trace_cache
from ._schema import is_view, schema_args
from ._host_ops import HostOps, cpu_scalars

__all__ = ["backend", "stats"]

_STATS = {"graphs": 0, "fallbacks": 0, "prepare_failures": 0, "padded_runs": 0}


def _programs_cap() -> int:
    v = os.environ.get("TORCHTPU_GRAPH_PROGRAMS", "8")
    try:
        cap = int(v)
    except ValueError:
        raise ValueError(f"TORCHTPU_GRAPH_PROGRAMS must be a positive integer, got {v!r}") from None
    if cap < 1:
        raise ValueError(f"TORCHTPU_GRAPH_PROGRAMS must be a positive integer, got {v!r}")
    return cap

# Python arithmetic on symbolic ints → (aten op on 0-d values, overload, commutative)
_A = torch.ops.aten
_SYM_OPS = {operator.add: (_A.add.Tensor, True), operator.mul: (_A.mul.Tensor, True),
            operator.sub: (_A.sub.Tensor, False), operator.floordiv: (_A.floor_divide.default, False),
            operator.mod: (_A.remainder.Tensor, False), operator.neg: (_A.neg.default, False)}
# Shape assertions Dynamo records for symbolic ints: checked by Dynamo's guards.
_SKIPPED = {torch.ops.aten._assert_scalar.default, torch.ops.aten.sym_constrain_range_for_size.default}


def stats() -> dict:
    """Graphs handed to the backend, how many of them ran as eager ops, how many
    early compiles failed, and how many calls ran padded to a bucket."""
    return dict(_STATS)


class Unsupported(Exception):
    """The graph holds something a program cannot (the message names it)."""


def _lowering_name(op: torch._ops.OpOverload) -> str:
    name = op._schema.name.split("::", 1)[-1]
    if len(name) >= 2 and name.endswith("_") and not name.endswith("__"):
        name = name[:-1]
    return name


def _supported(op) -> bool:
    return (isinstance(op, torch._ops.OpOverload) and op.namespace == "aten"
            and _C.op_supported(_lowering_name(op)))


_DECOMPS = None
_EXTRA_DECOMPS = (torch.ops.aten.embedding.default,)


# torch.nn.attention.varlen's custom ops stay whole in a traced graph. Their own
# Python bodies are their decompositions: off CUDA they call FlashAttention's aten
# ops, which have lowerings.
def _custom_op_decompositions() -> dict:
    from torch.nn.attention import varlen
    ns = torch.ops.torch_attn
    return {ns._varlen_attn.default: varlen._varlen_attn._init_fn,
            ns._varlen_attn_backward.default: varlen._varlen_attn_backward._init_fn}


def decompositions() -> dict:
    """PyTorch's decompositions (its core aten set first) for the ops we have no
    lowering for; ops with a lowering are never decomposed."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import core_aten_decompositions, decomposition_table
        # The core aten set, plus ops eager reaches through composite kernels that a
        # graph keeps whole. Not PyTorch's whole table: some of its entries are
        # reference implementations that write in place (prims.copy_to).
        table = core_aten_decompositions()
        table.update({op: decomposition_table[op] for op in _EXTRA_DECOMPS if op in decomposition_table})
        # lift_fresh marks torch.tensor(...) data for the tracer; decomposing it
        # (to alias) hides the constant from fake tensor tracing.
        keep = {torch.ops.aten.lift_fresh.default}
        _DECOMPS = {op: fn for op, fn in table.items()
                    if isinstance(op, torch._ops.OpOverload) and op.namespace == "aten" and not _supported(op)
                    and op not in keep}
        _DECOMPS.update(_custom_op_decompositions())
    return _DECOMPS


# ---------------------------------------------------------------- the walk

def _scalar_dtype(x):
    if isinstance(x, (bool, torch.SymBool)):
        return torch.bool
    if isinstance(x, (int, torch.SymInt)):
        return torch.int64
    if isinstance(x, (float, torch.SymFloat)):
        return torch.float64
    return None


class _Program:
    """One FX graph recorded into a runtime graph, and run."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, concrete=None, visible=None):
        # concrete: {placeholder index: int} — symbolic ints fixed to these values
        # (a program for one set of sizes); None: they are runtime operands.
        # visible: how many leading outputs the caller sees (visible_outputs).
        self.visible = visible
        self.graph = _C.Graph()
        self.env = {}
        self.concrete = concrete
        self.n_inputs = 0
        self.constants = []  # get_attr tensors, passed after the real inputs
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.mutations = []  # (value, tensor input index): written into the input after each run
        self.example_kinds = ["tensor" if isinstance(ex, torch.Tensor) and ex.device.type == "tpu" else "other"
                              for ex in example_inputs]
        self.subs = {}  # sympy symbol → its value, for sizes in node metadata
        for i, (node, ex) in enumerate(zip(placeholders, example_inputs)):
            if concrete is not None and i in concrete:
                self.env[node] = concrete[i]
                if isinstance(ex, torch.SymInt):
                    self.subs[ex.node.expr] = concrete[i]
                self.graph.add_input(False)  # keeps the input positions; unused
            else:
                self.env[node] = self._input(node, ex)
        self.n_inputs = len(placeholders)
        self.input_index = {node: i for i, node in enumerate(placeholders)}
        for node in gm.graph.nodes:  # constants are inputs too, added before any op
            if node.op == "get_attr":
                self.env[node] = self._constant(gm, node)
        # cpu ops on cpu scalars (step counts) run on the host; the values the
        # program reads come after the constants (_host_ops.py)
        self.host = HostOps(gm, placeholders, example_inputs)
        self.host_writes = []  # (input index, host node): copied into the cpu input after the run
        for node in self.host.feeds:
            self.env[node] = _C.GraphValue(self.graph.add_input(False), node.meta["val"].dtype)
        for node in gm.graph.nodes:
            if node.op == "call_function" and node in self.host.nodes:
                continue
            if node.op == "call_function" and self.host.is_host_write(node):
                self.host_writes.append((self.input_index[node.args[0]], node.args[1]))
            elif node.op == "call_function":
                self.env[node] = self._call(node)
            elif node.op == "output":
                self._outputs(node.args[0])
            elif node.op not in ("placeholder", "get_attr"):
                raise Unsupported(f"FX node kind {node.op!r} ({node.name})")

    def _input(self, node, ex):
        if isinstance(ex, torch.Tensor) and not cpu_scalars(ex):
            if ex.device.type != "tpu":
                raise Unsupported(f"input {node.name} is on {ex.device}, not tpu")
            return _C.GraphValue(self.graph.add_input(True))
        dtype = ex.dtype if isinstance(ex, torch.Tensor) else _scalar_dtype(ex)
        if dtype is None:
            raise Unsupported(f"input {node.name} of type {type(ex).__name__}")
        return _C.GraphValue(self.graph.add_input(False), dtype)

    def _constant(self, gm, node):
        """A tensor the graph holds (torch.tensor(...) data): uploaded once, then
        passed to every run as an extra input."""
        obj = gm
        for part in node.target.split("."):
            obj = getattr(obj, part)
        if not isinstance(obj, torch.Tensor):
            raise Unsupported(f"constant {node.target} of type {type(obj).__name__}")
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():  # the compiler runs under AOTAutograd's fake mode
            self.constants.append(obj.detach().to("tpu"))
        return _C.GraphValue(self.graph.add_input(True))

    def _arg(self, a):
        if isinstance(a, torch.fx.Node):
            if a not in self.env:  # a host value no op of the program reads (a list)
                raise Unsupported(f"{a.name}, computed on the host, used as one value")
            v = self.env[a]
            if not isinstance(v, (_C.GraphValue, int, float, bool)):
                raise Unsupported(f"{a.name} used as one value")
            return v
        if isinstance(a, (list, tuple)):
            return [self._arg(x) for x in a]
        return a

    def _call(self, node):
        target = node.target
        if target is operator.getitem:
            return self.env[node.args[0]][node.args[1]]
        if target in _SYM_OPS:
            return self._sym_arith(node)
        if target in _SKIPPED:
            return None
        sym = node.meta.get("val")
        if isinstance(sym, (torch.SymInt, torch.SymBool, torch.SymFloat, int)):
            return self._sym_value(node, sym)
        if not isinstance(target, torch._ops.OpOverload):
            raise Unsupported(f"call to {target} ({node.name})")
        if target is torch.ops.aten.copy_.default and node.args[0] in self.input_index:
            return self._mutate_input(node)
        if target is torch.ops.aten.copy.default and self._is_identity_copy(node.args[0], node.args[1]):
            return self.env[node.args[1]]  # one value: an output that is also written back is one buffer
        if target is torch.ops.aten.slice.Tensor and any(isinstance(a, torch.fx.Node) for a in node.args[2:4]):
            return self._slice_at(node)
        if _C.op_wants_out_dtype(_lowering_name(target)):
            return self._out_form_factory(node)
        schema = target._schema
        args = [self._arg(v) for v in schema_args(target, node.args, node.kwargs)]
        counts = self._result_counts(node, schema)
        try:
            first = self.graph.apply(schema.name, schema.overload_name, args, sum(n for n, _ in counts))
        except (NotImplementedError, RuntimeError) as e:
            raise Unsupported(f"{target}: {e}") from None
        return self._results(first, counts)

    # Factories lowered for their out= form: (op, overload) → (out overload, filler
    # for the out form's missing leading arguments).
    _OUT_FORMS = {("arange", "default"): ("out", None), ("arange", "start"): ("start_out", 1),
                  ("arange", "start_step"): ("start_out", None), ("eye", "default"): ("out", None),
                  ("eye", "m"): ("m_out", None), ("linspace", "default"): ("out", None),
                  ("logspace", "default"): ("out", None), ("range", "default"): ("out", 1),
                  ("range", "step"): ("out", None)}

    def _out_form_factory(self, node):
        """arange(end, dtype=...) → arange.out(end) + the dtype, as eager reaches it."""
        schema = node.target._schema
        key = (_lowering_name(node.target), schema.overload_name or "default")
        if key not in self._OUT_FORMS:
            raise Unsupported(f"{node.target} (only its out= form is lowered)")
        ovl, step = self._OUT_FORMS[key]
        args = [self._arg(a) for a in node.args]
        if any(isinstance(a, _C.GraphValue) for a in args):  # its result's size: fixed per program
            raise Unsupported(f"{node.target} with a bound known only at run time")
        if step is not None:
            args.append(step)
        first = self.graph.apply(schema.name, ovl, args, 1, node.meta["val"].dtype)
        return _C.GraphValue(first)

    def _sym_arith(self, node):
        """Arithmetic on symbolic ints (a decode position): 0-d int64 values."""
        op, commutative = _SYM_OPS[node.target]
        args = [self._arg(a) for a in node.args]
        if not any(isinstance(a, _C.GraphValue) for a in args):
            return node.target(*args)  # every operand fixed: a plain int
        if commutative and not isinstance(args[0], _C.GraphValue):
            args = args[::-1]
        if not isinstance(args[0], _C.GraphValue):
            raise Unsupported(f"{node.target} on {node.args}")
        return _C.GraphValue(self._apply(op, args), torch.int64)

    def _mutate_input(self, node):
        """copy_(input, value) at the end of an inference graph (optimizer state,
        running statistics, a KV cache written in place): the program writes the
        value into the input's storage itself after the run (graph.alias), with
        no copy when the input covers its storage."""
        dst, src = node.args[0], node.args[1]
        i = self.input_index[dst]
        if not isinstance(self.env[dst], _C.GraphValue):
            raise Unsupported(f"copy_ into input {dst.name}, which is not a tensor")
        if self._is_identity_copy(dst, src):
            value = self.env[src]
        else:
            value = _C.GraphValue(self._apply(_A.copy.default, [self._arg(dst), self._arg(src)]))
        # A cpu scalar input (an optimizer's step count) is not the program's to
        # write: it gets the value after the run, as AOTAutograd would do it.
        self.mutations.append((value, i, self.example_kinds[i] == "tensor"))
        return value

    def _is_identity_copy(self, dst, src):
        """copy(dst, src) is src's value itself: same dtype, same static shape."""
        if not (isinstance(src, torch.fx.Node) and isinstance(self.env.get(src), _C.GraphValue)):
            return False
        va, vb = dst.meta.get("val"), src.meta.get("val")
        return (isinstance(va, torch.Tensor) and isinstance(vb, torch.Tensor) and va.dtype == vb.dtype
                and all(isinstance(x, int) for x in (*va.shape, *vb.shape)) and tuple(va.shape) == tuple(vb.shape))

    def _sym_value(self, node, sym):
        """A size-like value (x.size(d), sym_max, comparisons): an int once the
        symbolic ints are fixed (or when it never was symbolic)."""
        v = self._int(sym)
        if isinstance(v, (int, bool)):
            return v
        raise Unsupported(f"{node.target} ({node.name}) computes a symbolic value the program cannot hold")

    def _apply(self, op, args, kwargs=None):
        """Records aten op `op` with these arguments (schema defaults filled in);
        returns the id of its first result."""
        full = schema_args(op, args, kwargs or {})
        try:
            return self.graph.apply(op._schema.name, op._schema.overload_name, full, 1)
        except (NotImplementedError, RuntimeError) as e:
            raise Unsupported(f"{op}: {e}") from None

    def _slice_at(self, node):
        """x[..., s:s + n] with a symbolic start s and a static length n (a KV-cache
        read at the decode position): narrow with the start read at run time."""
        x, dim = node.args[0], node.args[1] if len(node.args) > 1 else 0
        step = node.args[4] if len(node.args) > 4 else 1
        val = node.meta.get("val")
        length = self._int(val.shape[dim]) if isinstance(val, torch.Tensor) else None
        if step != 1 or not isinstance(length, int):
            raise Unsupported(f"slice with a symbolic bound, step {step}, length {length}")
        start = self._arg(node.args[2])
        op = _A.narrow.Tensor if isinstance(start, _C.GraphValue) else _A.narrow.default
        return _C.GraphValue(self._apply(op, [self._arg(x), dim, start, length]))

    def _int(self, x):
        """A size from node metadata as an int: symbolic ones through the fixed values."""
        if isinstance(x, (torch.SymInt, torch.SymBool)):
            import sympy
            e = x.node.expr.xreplace(self.subs) if self.subs else x.node.expr
            if isinstance(e, (bool, sympy.logic.boolalg.BooleanAtom)):
                return bool(e)
            if isinstance(e, int):
                return e
            if e.is_number:
                return int(e)
        return x

    @staticmethod
    def _result_counts(node, schema):
        """Per return: (1, False) for a tensor, (n, True) for a list of n tensors."""
        val = node.meta.get("val")
        vals = val if len(schema.returns) > 1 else [val]
        out = []
        for r, v in zip(schema.returns, vals):
            t = str(r.type)
            if t in ("Tensor", "Tensor?"):
                out.append((1, False))
            elif t == "List[Tensor]" and isinstance(v, (list, tuple)):
                out.append((len(v), True))
            else:
                raise Unsupported(f"{node.target} returns {t}")
        return out

    @staticmethod
    def _results(first, counts):
        vals, k = [], first
        for n, is_list in counts:
            vals.append([_C.GraphValue(k + j) for j in range(n)] if is_list else _C.GraphValue(k))
            k += n
        return vals[0] if len(counts) == 1 else vals

    def _outputs(self, outs):
        # ("run", k) | ("permuted", (k, inverse)) | ("input", i) | ("host", node) | ("const", value)
        # | ("view", (j, [(op, args, kwargs)])): views of output j, applied after the run
        self.out_spec = []
        ids = []
        views = self._output_views(outs)
        for o in outs:
            if isinstance(o, torch.fx.Node) and o in views:
                self.out_spec.append(("view", views[o]))
            elif isinstance(o, torch.fx.Node) and o in self.input_index:
                self.out_spec.append(("input", self.input_index[o]))
            elif isinstance(o, torch.fx.Node) and o in self.host.nodes:
                self.out_spec.append(("host", o))
            elif isinstance(o, torch.fx.Node) and isinstance(self.env[o], int):
                self.out_spec.append(("const", self.env[o]))  # a size, fixed in this program
            elif isinstance(o, torch.fx.Node):
                v = self.env[o]
                if isinstance(o.meta.get("val"), torch.SymInt):
                    raise Unsupported(f"output {o.name} is a symbolic int computed in the graph")
                if not isinstance(v, _C.GraphValue):
                    raise Unsupported(f"output {o.name} is not one value")
                v, inverse = self._memory_order(o, v)
                self.out_spec.append(("run", len(ids)) if inverse is None else ("permuted", (len(ids), inverse)))
                ids.append(v.id)
            else:
                self.out_spec.append(("const", o))
        self.copy_back = []  # (result index, input index): written by copy_ after the run
        aliases = []
        for v, i, in_program in self.mutations:
            (aliases if in_program else self.copy_back).append((len(ids), i))
            ids.append(v.id)
        self.graph.set_outputs(ids)
        for k, i in aliases:
            self.graph.alias(k, i)

    def _output_views(self, outs) -> dict:
        """Outputs that are views of another output (AOTAutograd returns the base of
        views it hands back): eager gives them the base's storage, so an in-place write
        to one shows in the other. They are made from the base's result after the run
        (metadata only), not computed as results of their own. {node: (j, views)}."""
        first = {}
        for j, o in enumerate(outs):
            if isinstance(o, torch.fx.Node) and o.op == "call_function":
                first.setdefault(o, j)
        found = {}
        for o, j in first.items():
            if self.visible is not None and j >= self.visible:
                continue  # a saved activation: its own result, in the layout the backward is prepared for
            chain, n = [], o
            while n.op == "call_function" and is_view(n.target) and isinstance(n.args[0], torch.fx.Node):
                chain.append(n)
                n = n.args[0]
                if n in first and not is_view(n.target):
                    break
            if not chain or n not in first or n in self.host.nodes:
                continue
            try:
                steps = [(c.target, [self._static(a) for a in c.args[1:]],
                          {k: self._static(a) for k, a in c.kwargs.items()}) for c in reversed(chain)]
            except Unsupported:
                continue  # a size known only at run time: computed as a result of its own
            found[o] = (first[n], steps)
        return found

    def _static(self, a):
        """An argument of a view op as a plain value (sizes fixed in this program)."""
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            if isinstance(v, (int, float, bool)):
                return v
            raise Unsupported(f"{a.name} is known only at run time")
        if isinstance(a, (list, tuple)):
            return type(a)(self._static(x) for x in a)
        return a

    def _memory_order(self, node, v):
        """An output eager PyTorch gives a permuted layout (a transpose) comes out of
        the program in its memory order and is permuted back on return, so its
        strides are eager's at no copy. Returns (value, inverse permutation or None)."""
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or val.dim() < 2:
            return v, None
        sizes = [self._int(x) for x in val.shape]
        strides = [self._int(x) for x in val.stride()]
        if not all(isinstance(x, int) for x in sizes + strides):
            return v, None  # symbolic: the program's own (contiguous) layout
        perm = _dense_order(sizes, strides)
        if perm is None or perm == list(range(val.dim())):
            return v, None  # not dense, or already contiguous
        inverse = sorted(range(val.dim()), key=lambda d: perm[d])
        return _C.GraphValue(self.graph.apply("aten::permute", "", [v, perm], 1)), inverse

    def prepare(self, example_inputs):
        """Starts the program the first run will build on the runtime's background
        thread (docs/compile.md), so that run waits only for what is left of its
        compile while the caller goes on: AOTAutograd compiles the backward graph
        right after the forward one, Dynamo finishes the frame. Each tensor input
        is described by its fake example's layout; a run with other layouts builds
        its own program, as it would without this."""
        from .device_module import current_device
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():  # AOTAutograd may call the compiler under its fake mode
            self._prepare(example_inputs, current_device)

    def _prepare(self, example_inputs, current_device):
        names = [n.name for n in sorted(self.input_index, key=self.input_index.get)]
        backward = any(name.startswith("tangents") for name in names)  # AOTAutograd's naming
        device, inputs = None, []
        for ex, kind, name in zip(example_inputs, self.example_kinds, names):
            if kind == "tensor":
                device = ex.device.index if device is None else device
                inputs.append(_layout(ex, backward and not name.startswith("tangents")))
            elif isinstance(ex, torch.Tensor):  # a cpu scalar: its dtype is what the program sees
                inputs.append(torch.zeros((), dtype=ex.dtype))
            elif isinstance(ex, torch.SymInt):  # a runtime operand: any value of its kind
                inputs.append(0)
            else:
                inputs.append(ex)
        inputs += self.constants
        inputs += [torch.zeros((), dtype=node.meta["val"].dtype) for node in self.host.feeds]
        try:
            self.graph.prepare(inputs, current_device() if device is None else device)
        except RuntimeError:  # only a head start is lost: the first run lowers it again and reports
            _STATS["prepare_failures"] += 1

    def __call__(self, args):
        host = self.host.run(args) if self.host.ops else {}
        feeds = [host[node] for node in self.host.feeds]
        results = self.graph.run(list(args[: self.n_inputs]) + self.constants + feeds)
        for k, i in self.copy_back:
            args[i].copy_(results[k])
        for i, node in self.host_writes:
            args[i].copy_(host[node])
        out = []
        for kind, x in self.out_spec:
            if kind == "host":
                out.append(host[x])
            elif kind == "run":
                out.append(results[x])
            elif kind == "permuted":
                out.append(results[x[0]].permute(x[1]))
            else:
                out.append(args[x] if kind == "input" else x)
        for j, (kind, x) in enumerate(self.out_spec):
            if kind == "view":
                base, steps = x
                y = out[base]
                for op, a, kw in steps:
                    y = op(y, *a, **kw)
                out[j] = y
        return out


def _dense_order(sizes, strides):
    """The dims from outermost to innermost when the strides are a permutation of
    contiguous ones (dense: no gaps, no overlap), else None. The runtime's guess of a
    program input's buffer (exec.c tpu_guess_buffer_aval) follows the same rule."""
    perm = sorted(range(len(sizes)), key=lambda d: -strides[d])
    expect = 1
    for d in reversed(perm):
        if sizes[d] != 1 and strides[d] != expect:
            return None
        expect *= sizes[d]
    return perm


def _layout(ex, saved):
    """How tensor input `ex` (a fake example) will reach a program, for prepare():
    (dtype, sizes, strides, storage offset, storage bytes). A backward graph's
    saved activation (`saved`) that is a view inside its storage (a slice of a
    fused projection) comes from the forward program as a tensor of its own:
    contiguous, or in its memory order when dense (_Program._memory_order)."""
    from torch._prims_common import make_contiguous_strides_for
    nbytes = ex.untyped_storage().nbytes()
    own = ex.numel() * ex.element_size()
    dense = _dense_order(list(ex.shape), list(ex.stride())) is not None
    if not saved or (ex.storage_offset() == 0 and nbytes == own and dense):
        return (ex.dtype, list(ex.shape), list(ex.stride()), ex.storage_offset(), nbytes)
    strides = ex.stride() if dense else make_contiguous_strides_for(ex.shape)
    return (ex.dtype, list(ex.shape), list(strides), 0, own)


def _fallback_eager(gm, reason):
    _STATS["fallbacks"] += 1
    _C.note_graph_fallback()
    warnings.warn(f"torchtpu: this graph runs as tpu eager ops, not one program: {reason}", stacklevel=3)
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(gm.forward)


def _symbolic(ex) -> bool:
    if isinstance(ex, torch.SymInt):
        return True
    return isinstance(ex, torch.Tensor) and any(isinstance(s, torch.SymInt) for s in ex.shape)


class _PerSizes:
    """A graph with symbolic sizes: one program per distinct set of sizes (XLA
    programs have static shapes), each built on first use, at most
    TORCHTPU_GRAPH_PROGRAMS of them; new sizes past the cap run as eager ops.

    `generic` is the program that keeps symbolic ints as runtime operands (the
    runtime then compiles it once per set of tensor sizes); without one, every
    set of symbolic int values gets its own program with the ints fixed."""

    def __init__(self, gm, example_inputs, generic, visible):
        self._boxed_call = True  # an instance attribute: wrappers copy __dict__ (functools.wraps)
        self.gm, self.example_inputs, self.generic, self.visible = gm, example_inputs, generic, visible
        self.sym_ints = [i for i, ex in enumerate(example_inputs) if isinstance(ex, torch.SymInt)]
        self.sym_tensors = [i for i, ex in enumerate(example_inputs)
                            if isinstance(ex, torch.Tensor) and _symbolic(ex)]
        self.programs = {}
        self.cap = _programs_cap()
        self.warned = False
        self.eager = None
        self.padding = _padding.plan(gm, example_inputs)[0] if _padding.enabled() else None

    def _key(self, args):
        ints = () if self.generic is not None else tuple(int(args[i]) for i in self.sym_ints)
        return ints + tuple(tuple(args[i].shape) for i in self.sym_tensors)

    def __call__(self, args):
        if self.padding is not None:
            sizes = self.padding.sizes(args)
            padded = self.padding.pad(args, sizes)
            if padded is not None:
                try:
                    out = self.padding.narrow(self._run(padded), sizes, args)
                except Exception:  # noqa: BLE001 - a bucket's shapes the graph cannot take
                    # (a slice of a fixed-size table by the padded size): exact sizes from now
                    # on, and this call again; an error of the exact sizes is the caller's.
                    self.padding = None
                    return self._run(args)
                _STATS["padded_runs"] += 1
                return out
        return self._run(args)

    def _run(self, args):
        key = self._key(args)
        prog = self.programs.get(key)
        if prog is None:
            prog = self._new(key, args)
        return prog(args)

    def _new(self, key, args):
        if len(self.programs) >= self.cap:
            if not self.warned:
                self.warned = True
                warnings.warn(f"torchtpu: a compiled graph has met {self.cap} different sets of sizes "
                              f"(TORCHTPU_GRAPH_PROGRAMS); new sizes run as tpu eager ops. Pad inputs to a "
                              f"few sizes, or raise the cap.", stacklevel=4)
            _C.note_graph_fallback()
            if self.eager is None:
                from torch._functorch.aot_autograd import make_boxed_func
                self.eager = make_boxed_func(self.gm.forward)
            return self.eager
        if self.generic is not None:
            prog = self.generic
        else:
            fixed = {i: int(args[i]) for i in self.sym_ints}
            try:
                prog = _Program(self.gm, self.example_inputs, fixed, self.visible)
            except Unsupported as e:
                prog = _fallback_eager(self.gm, str(e))
        self.programs[key] = prog
        return prog


# Functional collectives (DTensor, FSDP2, funcol under torch.compile): a program cannot
# hold them while collectives go through the host path (docs/distributed.md).
_COLLECTIVE_NAMESPACES = ("_c10d_functional", "c10d_functional", "_dtensor")


def _is_collective(node) -> bool:
    t = node.target
    return node.op == "call_function" and isinstance(t, torch._ops.OpOverload) and t.namespace in _COLLECTIVE_NAMESPACES


class _Unboxed(torch.nn.Module):
    """A boxed compiled piece called as split_module's base graph calls a submodule."""

    def __init__(self, boxed):
        super().__init__()
        self.boxed = boxed

    def forward(self, *args):
        return tuple(self.boxed(list(args)))


def _compile_around_collectives(gm, example_inputs):
    """The graph cut at its collectives: each run of other ops between them is
    compiled as a graph of its own (one program), and the collectives run as eager
    ops in between, through the process group's backend."""
    from torch.fx.passes.split_module import split_module
    part, last = [-1], [None]

    def piece(node):
        kind = _is_collective(node)
        if kind != last[0]:
            part[0], last[0] = part[0] + 1, kind
        return part[0]

    split = split_module(gm, gm, piece, keep_original_order=True, keep_original_node_name=True, tuple_return=True)
    examples = {n.name: n.meta.get("val") for n in gm.graph.nodes}
    examples.update((n.name, ex) for n, ex in zip((n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs))
    for node in split.graph.nodes:
        if node.op != "call_module":
            continue
        sub = getattr(split, node.target)
        if any(_is_collective(n) for n in sub.graph.nodes):
            continue  # runs as eager ops
        sub_examples = [examples.get(n.name) for n in sub.graph.nodes if n.op == "placeholder"]
        setattr(split, node.target, _Unboxed(compile_graph(sub, sub_examples, count=False, visible=0)))
    from torch._functorch.aot_autograd import make_boxed_func
    return make_boxed_func(split.forward)


def visible_outputs(gm: torch.fx.GraphModule):
    """How many leading outputs of an AOTAutograd graph its caller sees (None: all).
    Outputs that view another output are made as views only among these
    (_Program._output_views): the ones after them are saved activations, which the
    backward program is prepared to receive as results of their own. A backward
    graph's outputs are gradients: 0."""
    if any(n.op == "placeholder" and n.name.startswith("tangents") for n in gm.graph.nodes):
        return 0
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    try:  # AOTAutograd's order: runtime-mutated inputs, user outputs, intermediate bases, saved
        return meta.num_mutated_inp_runtime_indices + len(meta.output_info) + meta.num_intermediate_bases
    except AttributeError:
        return None


def compile_graph(gm: torch.fx.GraphModule, example_inputs, count=True, visible="auto"):
    """AOTAutograd's forward/backward compiler: an FX graph → a boxed callable.
    `visible`: visible_outputs(gm), given by a caller that computed it earlier."""
    _STATS["graphs"] += count
    if visible == "auto":
        visible = visible_outputs(gm)
    if any(_is_collective(n) for n in gm.graph.nodes):
        return _compile_around_collectives(gm, example_inputs)
    symbolic = any(_symbolic(ex) for ex in example_inputs)
    try:
        program = _Program(gm, example_inputs, visible=visible)
    except Unsupported as e:
        if not symbolic:
            return _fallback_eager(gm, str(e))
        program = None  # a symbolic int is needed as a size: fix it per call
    if program is not None and not any(isinstance(ex, torch.Tensor) and _symbolic(ex) for ex in example_inputs):
        program.prepare(example_inputs)  # static sizes: the first run's layouts are known
    if symbolic:
        return _PerSizes(gm, example_inputs, program, visible)
    program._boxed_call = True
    return program


_BACKEND = None


def backend(gm, example_inputs, **kwargs):
    """The ``"tpu"`` Dynamo backend (registered by ``import torchtpu``)."""
    global _BACKEND
    if _BACKEND is None:
        from torch._dynamo.backends.common import aot_autograd
        from torch._functorch.partitioners import min_cut_rematerialization_partition
        traced = _trace_cache.compiler(compile_graph, _is_collective)
        _BACKEND = aot_autograd(fw_compiler=traced, bw_compiler=traced,
                                partition_fn=min_cut_rematerialization_partition,
                                # inference graphs (optimizer steps, decode) keep their
                                # input mutations: the program writes them (graph.alias)
                                keep_inference_input_mutations=True,
                                decompositions=decompositions())
    with _trace_cache.active():
        return _BACKEND(gm, example_inputs, **kwargs)
