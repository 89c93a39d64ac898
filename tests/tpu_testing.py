"""Shared helpers for tests: run the same function on CPU and on tpu, compare.

Tolerances per dtype are stated once, here (issue: float32 1e-5 relative,
bfloat16 1e-2)."""
import torch

TOL = {
    torch.float32: dict(rtol=1e-5, atol=1e-5),
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.bfloat16: dict(rtol=1e-2, atol=1e-2),
    torch.float16: dict(rtol=1e-3, atol=1e-3),
}


def tol(dtype, scale=1.0):
    t = TOL.get(dtype, dict(rtol=0, atol=0))
    return dict(rtol=t["rtol"] * scale, atol=t["atol"] * scale)


def to_tpu(x):
    if isinstance(x, torch.Tensor):
        return x.to("tpu")
    if isinstance(x, (list, tuple)):
        return type(x)(to_tpu(v) for v in x)
    if isinstance(x, dict):
        return {k: to_tpu(v) for k, v in x.items()}
    return x


def to_cpu(x):
    if isinstance(x, torch.Tensor):
        return x.cpu()
    if isinstance(x, (list, tuple)):
        return type(x)(to_cpu(v) for v in x)
    return x


def assert_same(actual, expected, scale=1.0, check_dtype=True):
    """actual from tpu, expected from CPU: same structure, dtypes, shapes, values."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"expected a tensor, got {type(actual)}"
        assert actual.device.type == "tpu", f"result on {actual.device}, expected tpu"
        a = actual.cpu()
        if check_dtype:
            assert a.dtype == expected.dtype, f"dtype {a.dtype} != {expected.dtype}"
        assert a.shape == expected.shape, f"shape {tuple(a.shape)} != {tuple(expected.shape)}"
        torch.testing.assert_close(a, expected, equal_nan=True, check_dtype=check_dtype,
                                   **tol(expected.dtype, scale))
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert_same(a, e, scale, check_dtype)
    else:
        assert actual == expected or (actual != actual and expected != expected), f"{actual} != {expected}"


def check(fn, *args, scale=1.0, check_dtype=True, **kwargs):
    """Runs fn(*args) on CPU and fn(*tpu copies) and compares the results."""
    expected = fn(*args, **kwargs)
    actual = fn(*to_tpu(args), **to_tpu(kwargs))
    assert_same(actual, expected, scale, check_dtype)
    return actual, expected


def check_grad(fn, *args, scale=1.0):
    """Compares fn's output and the gradients of its float inputs, CPU vs tpu."""
    cpu_in = [a.detach().clone().requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
              for a in args]
    tpu_in = [a.detach().to("tpu").requires_grad_(a.is_floating_point()) if isinstance(a, torch.Tensor) else a
              for a in args]
    out_c = fn(*cpu_in)
    out_t = fn(*tpu_in)
    assert_same(out_t, out_c, scale)
    g = torch.randn_like(out_c)
    out_c.backward(g)
    out_t.backward(g.to("tpu"))
    for c, t in zip(cpu_in, tpu_in):
        if isinstance(c, torch.Tensor) and c.requires_grad:
            assert t.grad is not None, "no gradient on tpu"
            assert_same(t.grad, c.grad, scale)
