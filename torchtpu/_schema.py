"""What an aten op's schema says about a call: its arguments in schema order, and
whether its result aliases its first argument. The graph walk (compile.py) and the
padding check (_padding.py) both read graphs through these, so they agree.

Python glue: reads torch's op schemas; it emits nothing.
"""

from __future__ import annotations

import torch


def schema_args(op: torch._ops.OpOverload, args, kwargs) -> list:
    """Every non-out argument of op's schema, in order: positional, keyword, or its default."""
    full = []
    for i, a in enumerate(op._schema.arguments):
        if a.is_out:
            continue
        if i < len(args):
            full.append(args[i])
        elif a.name in kwargs:
            full.append(kwargs[a.name])
        else:
            full.append(a.default_value if a.has_default_value() else None)
    return full


def named_args(op: torch._ops.OpOverload, args, kwargs) -> dict:
    """schema_args keyed by the schema's argument names."""
    names = [a.name for a in op._schema.arguments if not a.is_out]
    return dict(zip(names, schema_args(op, args, kwargs)))


def aliases_input(op) -> bool:
    """An op whose result aliases its first argument without writing it (schema
    `Tensor(a)` or `Tensor(a)[]`: view, t, select, split, detach ...)."""
    if not isinstance(op, torch._ops.OpOverload) or len(op._schema.returns) != 1:
        return False
    info = op._schema.returns[0].alias_info
    return info is not None and not info.is_write


def is_view(op) -> bool:
    """An op whose one tensor result is a view of its first argument."""
    return aliases_input(op) and str(op._schema.returns[0].type) == "Tensor"
