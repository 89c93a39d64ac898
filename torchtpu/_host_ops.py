"""The part of a compiled graph that PyTorch computes on the host.

An optimizer's ``step`` counts are 0-dim cpu tensors (unless ``capturable``), and
so is everything computed from them alone (``step + 1``, ``beta ** step``, the bias
corrections): PyTorch eager runs those ops on the CPU, and the graph says so (their
fake values are cpu tensors). A program cannot hold cpu tensors, so before this the
graph computed them on the device and copied each updated step count back with a
blocking device-to-host copy: one sync per parameter per step, which serialises host
and device (52 of them per step of a 4-layer GPT).

Here such ops run as what they are, cpu ops on cpu tensors, before each run of the
program: their results enter the program as runtime scalar operands (as the step
counts themselves do) and are written into their cpu inputs on the host. No device
value is read, so a compiled train step no longer waits for the device.

Python glue only: these are PyTorch's own cpu kernels on the graph's cpu scalars.
"""

from __future__ import annotations

import operator

import torch
import torch.fx


def cpu_scalars(val) -> bool:
    """val is a 0-dim cpu tensor, or a non-empty list of them."""
    if isinstance(val, (list, tuple)):
        return len(val) > 0 and all(cpu_scalars(v) for v in val)
    return isinstance(val, torch.Tensor) and val.device.type == "cpu" and val.dim() == 0


class HostOps:
    """Finds the host part of an FX graph and computes it for one run.

    nodes: every host node (cpu scalar inputs included), in graph order.
    feeds: the host values the program reads, in the order the program takes them.
    """

    def __init__(self, gm: torch.fx.GraphModule, placeholders, example_inputs):
        self.inputs = {}  # placeholder → input index
        self.ops = []     # host call_function nodes, in graph order
        for i, (node, ex) in enumerate(zip(placeholders, example_inputs)):
            if cpu_scalars(ex):
                self.inputs[node] = i
        nodes = set(self.inputs)
        for node in gm.graph.nodes:
            if node.op == "call_function" and self._is_host(node, nodes):
                nodes.add(node)
                self.ops.append(node)
        self.nodes = nodes
        self.feeds = [n for n in self.ops if isinstance(n.meta.get("val"), torch.Tensor)
                      and any(u not in nodes and not self.is_host_write(u) for u in n.users)]

    @staticmethod
    def _is_host(node, nodes) -> bool:
        t = node.target
        if not all(a in nodes for a in node.all_input_nodes):
            return False
        if t is operator.getitem:
            return bool(node.all_input_nodes) and cpu_scalars(node.meta.get("val"))
        if not isinstance(t, torch._ops.OpOverload) or t._schema.is_mutable:
            return False
        if torch.Tag.nondeterministic_seeded in t.tags:
            return False  # random draws keep the device generator's order
        return cpu_scalars(node.meta.get("val"))

    def is_host_write(self, node) -> bool:
        """copy_(cpu scalar input, host value): done on the host after the run."""
        return (node.op == "call_function" and node.target is torch.ops.aten.copy_.default
                and node.args[0] in self.inputs and node.args[1] in self.nodes)

    def run(self, args) -> dict:
        """Every host node's value for this call's inputs."""
        env = {node: args[i] for node, i in self.inputs.items()}

        def value(a):
            return env[a] if isinstance(a, torch.fx.Node) else a

        for node in self.ops:
            fn_args = torch.fx.node.map_aggregate(node.args, value)
            fn_kwargs = torch.fx.node.map_aggregate(node.kwargs, value)
            env[node] = node.target(*fn_args, **fn_kwargs)
        return env
