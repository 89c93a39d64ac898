"""Scripts as a new user writes them: the same code on CPU and on tpu agrees
(float32 within 1e-5 relative, bfloat16 within 1e-2 — tests/tpu_testing.py)."""
import pytest
import torch

from tpu_testing import assert_same


def run_both(fn):
    torch.manual_seed(0)
    expected = fn("cpu")
    torch.manual_seed(0)
    actual = fn("tpu")
    assert_same(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_creation(dtype):
    run_both(lambda d: [
        torch.zeros(2, 3, device=d, dtype=dtype),
        torch.ones(4, device=d, dtype=dtype),
        torch.full((2, 2), 3.5, device=d, dtype=dtype),
        torch.arange(10, device=d).to(dtype),
        torch.arange(1, 4, 0.5, device=d, dtype=dtype),
        torch.eye(3, device=d, dtype=dtype),
        torch.eye(2, 4, device=d, dtype=dtype),
        torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=d, dtype=dtype),
        torch.zeros_like(torch.empty(3, 2, device=d, dtype=dtype)),
        torch.scalar_tensor(2.5, device=d, dtype=dtype),
    ])


def test_creation_int_and_bool():
    run_both(lambda d: [
        torch.arange(5, device=d),
        torch.arange(2, 11, 3, device=d, dtype=torch.int32),
        torch.full((3,), 7, device=d),
        torch.ones(3, device=d, dtype=torch.bool),
        torch.zeros(2, device=d, dtype=torch.uint8),
    ])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_arithmetic_broadcasting(dtype):
    def f(d):
        a = torch.linspace(-2, 2, 12, device=d).reshape(3, 4).to(dtype)
        b = torch.linspace(0.5, 1.5, 4, device=d).to(dtype)
        c = torch.arange(3, device=d).reshape(3, 1)
        return [a + b, a - b * 2, a * c, a / b, (a + 1) ** 2, a.exp(), b.sqrt(), -a, a.abs(),
                torch.where(a > 0, a, b), a.clamp(-1, 1), torch.maximum(a, b), a.sigmoid(), a.tanh()]
    run_both(f)


def test_type_promotion():
    def f(d):
        i = torch.arange(6, device=d).reshape(2, 3)
        fl = torch.ones(3, device=d)
        h = torch.ones(3, device=d, dtype=torch.bfloat16)
        u = torch.arange(3, device=d, dtype=torch.uint8)
        b = torch.tensor([True, False, True], device=d)
        return [i + fl, i * 2.5, i + 1, i / 2, i // 2, h + fl, h * 2, u + 1, b + 1, b & b, i + b,
                fl + torch.tensor(2, dtype=torch.int64, device=d), h + torch.tensor(1.5, device=d)]
    run_both(f)


def test_reductions():
    def f(d):
        x = torch.linspace(-3, 3, 24, device=d).reshape(2, 3, 4)
        return [x.sum(), x.sum(1), x.sum((0, 2), keepdim=True), x.mean(-1), x.prod(0), x.amax(1), x.amin(),
                x.max(), x.max(2).values, x.max(2).indices, x.min(0)[1], x.argmax(), x.argmin(1),
                x.var(1), x.std(correction=0), (x > 0).any(), (x > -5).all(2), x.norm()]
    run_both(f)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matmul_family(dtype):
    def f(d):
        g = torch.Generator().manual_seed(0)
        a = torch.randn(4, 5, generator=g).to(d, dtype)
        b = torch.randn(5, 3, generator=g).to(d, dtype)
        bat = torch.randn(2, 4, 5, generator=g).to(d, dtype)
        v = torch.randn(5, generator=g).to(d, dtype)
        bias = torch.randn(3, generator=g).to(d, dtype)
        w = torch.randn(3, 5, generator=g).to(d, dtype)
        return [a @ b, torch.mm(a, b), torch.bmm(bat, b.expand(2, 5, 3)), torch.addmm(bias, a, b),
                torch.matmul(bat, b), a @ v, v @ v, torch.nn.functional.linear(a, w, bias),
                torch.baddbmm(torch.zeros(2, 4, 3, device=d, dtype=dtype), bat, b.expand(2, 5, 3))]
    run_both(f)


def test_views_and_inplace_writes():
    def f(d):
        x = torch.arange(12, device=d, dtype=torch.float32).reshape(3, 4)
        x[:, 1] += 10
        x.t().mul_(2)
        y = x.view(4, 3)
        y[0] = -1
        x[1:, 2:] = torch.ones(2, 2, device=d) * 7
        z = x.clone()
        z.narrow(1, 0, 2).zero_()
        kv = torch.zeros(2, 5, 3, device=d)
        for t in range(5):
            kv[:, t] = torch.full((2, 3), float(t), device=d)
        s = x.select(0, 2)
        s.add_(100)
        parts = list(x.unbind(1)) + list(x.split(2, dim=1)) + list(x.chunk(3, dim=0))
        e = x[0].expand(3, 4) + 0
        out = torch.empty(3, 4, device=d)
        torch.add(x, 1, out=out)
        r = torch.zeros(2, device=d)
        r.resize_(5)
        r.fill_(3)
        return [x, y, z, kv, s, e, out, r, x.diagonal(), x.flatten(), x.unflatten(1, (2, 2)),
                x.unsqueeze(0).squeeze(0), x.permute(1, 0).contiguous(), x.T.reshape(-1)] + parts
    run_both(f)


def test_indexing():
    def f(d):
        x = torch.arange(20, device=d, dtype=torch.float32).reshape(4, 5)
        idx = torch.tensor([2, 0, 3], device=d)
        mask = x > 7
        y = x.clone()
        y[idx] = 0
        y.masked_fill_(y > 15, -1)
        emb = torch.nn.functional.embedding(torch.tensor([[1, 3], [0, 2]], device=d), x)
        return [x[idx], x[:, idx], x[idx, idx], x.index_select(1, idx), x.gather(1, torch.tensor([[0], [1], [2], [4]], device=d)),
                x.masked_fill(mask, 0.5), x[1:3, ::2], x[-1], x[..., 2], y, emb,
                torch.cat([x, x * 2], 0), torch.stack([x, x], 1), x[torch.tensor([True, False, True, False], device=d)]]
    run_both(f)


def test_item_tolist_print_equal():
    c = torch.tensor([[1.5, 2.0], [3.0, -4.25]])
    x = c.to("tpu")
    assert x.sum().item() == c.sum().item() == 2.25  # exact in float32
    assert x.tolist() == c.tolist() == [[1.5, 2.0], [3.0, -4.25]]
    # torch.equal on tpu agrees with torch.equal on CPU, both ways
    for other in (c.clone(), c + 1, c * torch.tensor([[1.0, 1.0], [1.0, -1.0]])):
        assert torch.equal(x, other.to("tpu")) == torch.equal(c, other)
    assert torch.equal(x.clone().cpu(), c)
    assert_same(x.cpu().to("tpu") * 2, c * 2)
    s = str(x)
    assert s == str(c)[:-1] + ", device='tpu:0')"  # same formatting as CPU, plus the device
    assert x.is_tpu
    assert x.to(torch.bfloat16).dtype == torch.bfloat16
    assert torch.equal(x.to(torch.bfloat16).cpu(), c.to(torch.bfloat16))
