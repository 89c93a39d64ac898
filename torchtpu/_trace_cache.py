"""The trace tier of the compile cache: AOTAutograd's results for
``torch.compile(backend="tpu")`` graphs, kept on disk so that a new process
skips AOTAutograd's tracing and partitioning (docs/compile-cache.md).

PyTorch's AOTAutogradCache does the hard parts: the key (the Dynamo graph, its
inputs' metadata, the configs that shape AOTAutograd's output, torch's
version), the guards, and the entry with its runtime wrappers. This module
plugs torchtpu into it, for the duration of a backend call:

* the forward/backward compiler returns a ``TpuOutputCode``, the kind of result
  AOTAutogradCache's bundled mode pickles whole: it keeps the FX graph
  (GraphPickler), and on a hit the program is built from it again (its
  executable then comes from the executable tier);
* entries live in torchtpu's disk tier as blobs (checksummed, written
  atomically, evicted under the same size cap, removed by ``cache_clear``), not
  in Inductor's directory. torch's key does not cover torchtpu's
  decompositions or graph walk, so the entry's name adds a fingerprint of them.

Stored: graphs with static sizes and no collectives. Others (symbolic sizes,
collectives, non-tensor inputs other than numbers) compile in every process as
before. Python glue only: no lowering logic here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import pathlib
import pickle

import torch

from . import _C

try:  # torch internals (torch is pinned): without them the tier stays off
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache, BypassAOTAutogradCache
    from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler
    from torch._inductor.output_code import OutputCode
except ImportError:  # pragma: no cover - a torch without them
    AOTAutogradCache = None
    OutputCode = object

__all__ = ["compiler", "active"]

_FINGERPRINT = None


def _fingerprint() -> str:
    """What torch's key does not see but decides the entry: the decompositions
    (they follow the set of lowerings), and the code that walks and rebuilds graphs."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        from .compile import decompositions
        h = hashlib.sha256(torch.__version__.encode())
        h.update("\n".join(sorted(str(op) for op in decompositions())).encode())
        here = pathlib.Path(__file__).parent
        for name in ("compile.py", "_schema.py", "_host_ops.py", "_trace_cache.py"):
            h.update((here / name).read_bytes())
        _FINGERPRINT = h.hexdigest()
    return _FINGERPRINT


def _blob_name(key: str) -> str:
    return f"aotautograd {key} {_fingerprint()}"


def _candidates(cls, local, remote_cache, key):
    """AOTAutogradCache's lookup, from the disk tier (which has verified the entry)."""
    if not local:
        return
    data = _C.blob_load(_blob_name(key))
    if data is not None:
        yield pickle.loads(data), data, True


def _store(key: str, content: bytes) -> None:
    _C.blob_store(_blob_name(key), content)


def _on() -> bool:
    return AOTAutogradCache is not None and _C.blob_enabled()


@contextlib.contextmanager
def active():
    """Around a backend call: AOTAutogradCache in bundled mode, on torchtpu's disk
    tier. The backward is compiled with the forward (not at the first backward
    call, outside this context) so that the entry is whole when it is saved.
    Dynamo holds its compile lock during backend calls, so the class attributes
    patched here are not seen by other compiles."""
    if not _on():
        with torch._functorch.config.patch(enable_autograd_cache=False):
            yield
        return
    patches = {"iterate_over_candidates": classmethod(_candidates),
               "_write_to_local_cache": staticmethod(_store)}
    saved = {name: AOTAutogradCache.__dict__.get(name) for name in patches}  # None: inherited
    config = torch._functorch.config.patch(enable_autograd_cache=True, bundled_autograd_cache=True,
                                           force_non_lazy_backward_lowering=True)
    for name, fn in patches.items():
        setattr(AOTAutogradCache, name, fn)
    try:
        with config, _without_inductor_codegen():
            yield
    finally:
        for name, fn in saved.items():
            if fn is None:
                delattr(AOTAutogradCache, name)
            else:
                setattr(AOTAutogradCache, name, fn)


@contextlib.contextmanager
def _without_inductor_codegen():
    """The key's hash of Inductor's custom backend passes, without importing all of
    Inductor's code generators to find them (init_backend_registration: 0.6-0.7 s
    per process, a sixth of a warm first step). Those passes never run on a tpu
    graph; the key hashes the ones a user registered (none, usually) whether or not
    Inductor registered its own devices (all None) earlier in the process."""
    import torch._inductor.codecache as codecache
    if not hasattr(codecache, "init_backend_registration") or not hasattr(codecache, "custom_backend_passes"):
        yield  # another torch: its key as it is
        return
    saved = codecache.init_backend_registration, codecache.custom_backend_passes
    codecache.init_backend_registration = lambda: None
    codecache.custom_backend_passes = {d: p for d, p in saved[1].items() if p is not None}
    try:
        yield
    finally:
        codecache.init_backend_registration, codecache.custom_backend_passes = saved


def _storable_inputs(example_inputs) -> bool:
    """Whether a graph with these inputs can be stored: tensors of static sizes and
    plain numbers only."""
    for ex in example_inputs:
        if isinstance(ex, torch.Tensor):
            try:
                _describe(ex)
            except BypassAOTAutogradCache:
                return False
        elif type(ex) not in (int, float, bool):
            return False
    return True


@dataclasses.dataclass(frozen=True)
class _TensorMeta:
    """A tensor's metadata in place of a fake tensor: GraphPickler rebuilds fake
    tensors slowly (1 s for a small GPT's train step), and these fields are all
    a fake tensor is rebuilt from. Not a tuple: pytree must see it as a leaf."""
    shape: tuple
    stride: tuple
    offset: int
    dtype: torch.dtype
    device: str


def _describe(t: torch.Tensor):
    sizes = (*t.shape, *t.stride(), t.storage_offset())
    if any(not isinstance(s, int) for s in sizes):
        raise BypassAOTAutogradCache("torchtpu stores graphs with static sizes only")
    return _TensorMeta(tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype, str(t.device))


def _fake(m: _TensorMeta, mode):
    """A fake tensor of mode with m's metadata, wrapped around a meta tensor. Made
    through fake dispatch (empty, then as_strided) one took 0.4 ms here (1 to 2 ms
    on a loaded machine), a quarter second of a small GPT's warm first step; this
    takes 0.05 ms."""
    from torch._prims_common import compute_required_storage_length
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    n = compute_required_storage_length(m.shape, m.stride, m.offset)
    with unset_fake_temporarily():  # a meta tensor, not a fake one of a mode in use
        meta = torch.empty(n, dtype=m.dtype, device="meta").as_strided(m.shape, m.stride, m.offset)
    return mode.fake_tensor_converter.from_meta_and_device(mode, meta, torch.device(m.device))


def _val_key(key: str) -> bool:
    return key == "val"


def _dump_graph(gm) -> bytes:
    """The graph, its nodes' "val" as _TensorMeta, and its tensor constants on the
    CPU (the graph walk uploads constants whatever their device)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx._graph_pickler import GraphPickler, Options
    from torch.utils import _pytree as pytree
    vals = {n: n.meta["val"] for n in gm.graph.nodes if "val" in n.meta}
    consts = {n.target: getattr(gm, n.target) for n in gm.graph.nodes
              if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), torch.Tensor)}
    try:
        for n, v in vals.items():
            n.meta["val"] = pytree.tree_map_only(torch.Tensor, _describe, v)
        with unset_fake_temporarily():  # a backend call runs under AOTAutograd's fake mode
            for name, t in consts.items():
                setattr(gm, name, t.detach().cpu())
        return GraphPickler.dumps(gm, Options(ops_filter=None, node_metadata_key_filter=_val_key))
    finally:
        for n, v in vals.items():
            n.meta["val"] = v
        for name, t in consts.items():
            setattr(gm, name, t)


def _load_graph(data: bytes, mode):
    from torch.fx._graph_pickler import GraphPickler
    from torch.utils import _pytree as pytree
    gm = GraphPickler.loads(data, mode)
    # One fake tensor per distinct metadata: the graph walk only reads them, and
    # a GPT's train step has thousands of nodes but a few dozen distinct shapes.
    memo = {}

    def fake(m):
        t = memo.get(m)
        if t is None:
            t = memo[m] = _fake(m, mode)
        return t

    for n in gm.graph.nodes:
        if "val" in n.meta:
            n.meta["val"] = pytree.tree_map_only(_TensorMeta, fake, n.meta["val"])
    gm.recompile()
    return gm


class TpuOutputCode(OutputCode):
    """One FX graph compiled by torchtpu (compile.compile_graph), as AOTAutogradCache
    stores it: the graph, whose placeholders' values describe its inputs; the
    program is rebuilt on load."""

    def __init__(self, gm, example_inputs, compile_fn, collective):
        super().__init__()
        self._boxed_call = True
        from .compile import visible_outputs
        self._compile_fn = compile_fn
        # AOTAutograd's metadata is there now, not when a stored graph is loaded
        self._visible = visible_outputs(gm)
        self._fn = compile_fn(gm, example_inputs, visible=self._visible)
        storable = (not collective and _on() and _storable_inputs(example_inputs)
                    and all("val" in n.meta for n in gm.graph.find_nodes(op="placeholder")))
        # The graph until it is pickled, shared with the copy AOTAutogradCache
        # pickles (so that pickling drops it here too); kept only if storable.
        self._graph = [gm if storable else None]
        self._pickled = None

    def __call__(self, inputs):
        return self._fn(inputs)

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_fn"] = None  # a runtime graph: rebuilt by post_compile
        if state["_pickled"] is not None:
            state["_graph"] = [None]  # holds fake tensors: stored as _pickled
        return state

    def prepare_for_serialization(self) -> None:
        if self._pickled is not None:
            return
        if self._graph[0] is None:
            raise BypassAOTAutogradCache("torchtpu stores graphs with static sizes and no collectives only")
        try:
            self._pickled = _dump_graph(self._graph[0])
        except BypassAOTAutogradCache:
            raise
        except Exception as e:  # an attribute GraphPickler cannot write
            raise BypassAOTAutogradCache(f"torchtpu cannot store this graph: {e}") from e
        self._graph[0] = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        if self._fn is not None:
            return
        from torch._subclasses import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        mode = FakeTensorMode(shape_env=ShapeEnv())
        gm = _load_graph(self._pickled, mode)
        # The example inputs are the placeholders' values (AOTAutograd's graphs take
        # their inputs in placeholder order).
        examples = [n.meta["val"] for n in gm.graph.find_nodes(op="placeholder")]
        self._fn = self._compile_fn(gm, examples, visible=getattr(self, "_visible", None))

    def set_triton_bundle(self, triton_bundle) -> None:
        pass


def compiler(compile_fn, is_collective):
    """AOTAutograd's forward/backward compiler around compile_fn (gm, example_inputs)
    → boxed callable, with results AOTAutogradCache can store."""
    if AOTAutogradCache is None:
        return compile_fn

    def compile_to_output_code(gm, example_inputs):
        collective = any(is_collective(n) for n in gm.graph.nodes)
        return TpuOutputCode(gm, example_inputs, compile_fn, collective)

    return SerializableAOTDispatchCompiler(TpuOutputCode, compile_to_output_code)
