"""Random ops on tpu: statistics, ranges and reproducibility (the numbers cannot
equal CPU's). Bounds are 5-6 standard errors wide, so a correct generator fails
them with probability < 1e-6 per check, and every test is seeded (conftest)."""
import math

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401

N = 200_000
FLOATS = [torch.float32, torch.bfloat16, torch.float16, torch.float64]
INTS = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64]
# Extra slack for the rounding of low-precision results (relative to the spread).
QUANT = {torch.float32: 1e-6, torch.float64: 1e-12, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def cpu(x):
    assert x.device.type == "tpu", f"result on {x.device}"
    return x.cpu()


def assert_moments(x, mean, std, slack=0.0):
    """Sample mean and std of x (cpu) agree with (mean, std) within 5 standard errors."""
    v = x.double().flatten()
    n = v.numel()
    se_mean = std / math.sqrt(n)
    assert abs(v.mean().item() - mean) <= 5 * se_mean + slack * std, (v.mean().item(), mean)
    # std's standard error for a normal sample is std / sqrt(2n); 8 of them covers
    # the heavier-tailed distributions tested here as well.
    assert abs(v.std().item() - std) <= 8 * std / math.sqrt(2 * n) + slack * std, (v.std().item(), std)


def assert_freqs(samples, probs, n_cat):
    """Category frequencies of int samples agree with probs (5 binomial standard errors)."""
    counts = torch.bincount(samples.flatten(), minlength=n_cat).double()
    n = samples.numel()
    for k, p in enumerate(probs):
        se = math.sqrt(max(n * p * (1 - p), 1e-12))
        assert abs(counts[k].item() - n * p) <= 5 * se + 1e-9, (k, counts.tolist(), probs)


# ---------------------------------------------------------------- uniform


@pytest.mark.parametrize("dtype", FLOATS)
def test_uniform_(dtype):
    x = torch.empty(N, device="tpu", dtype=dtype).uniform_(-2, 3)
    c = cpu(x)
    assert c.dtype == dtype and c.shape == (N,)
    assert c.min().item() >= -2 and c.max().item() < 3
    assert_moments(c, 0.5, 5 / math.sqrt(12), slack=QUANT[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rand(dtype):
    c = cpu(torch.rand(N, device="tpu", dtype=dtype))
    assert c.dtype == dtype
    assert c.min().item() >= 0 and c.max().item() < 1
    assert_moments(c, 0.5, 1 / math.sqrt(12), slack=QUANT[dtype])


def test_rand_like_and_shapes():
    base = torch.empty(3, 4, 5, device="tpu", dtype=torch.float16)
    c = cpu(torch.rand_like(base))
    assert c.shape == (3, 4, 5) and c.dtype == torch.float16
    assert cpu(torch.rand((), device="tpu")).shape == ()
    assert cpu(torch.rand(0, 3, device="tpu")).shape == (0, 3)
    assert cpu(torch.empty(0, device="tpu").uniform_()).shape == (0,)


def test_uniform_non_contiguous_view_only_writes_the_view():
    base = torch.zeros(6, 8).to("tpu")
    base[:, ::2].uniform_(5, 6)
    c = cpu(base)
    assert (c[:, 1::2] == 0).all()
    assert ((c[:, ::2] >= 5) & (c[:, ::2] < 6)).all()


# ----------------------------------------------------------------- normal


@pytest.mark.parametrize("dtype", FLOATS)
def test_normal_(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).normal_(1.5, 2.0))
    assert c.dtype == dtype
    assert torch.isfinite(c).all()
    assert_moments(c, 1.5, 2.0, slack=QUANT[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_randn(dtype):
    c = cpu(torch.randn(N, device="tpu", dtype=dtype))
    assert c.dtype == dtype
    assert_moments(c, 0.0, 1.0, slack=QUANT[dtype])
    # Tails: P(|z| > 3) = 0.0027.
    frac = (c.double().abs() > 3).double().mean().item()
    assert abs(frac - 0.0027) < 5 * math.sqrt(0.0027 / N) + QUANT[dtype]


def test_normal_tensor_overloads():
    m = N // 2
    mean = torch.tensor([-5.0, 5.0]).repeat(m, 1).to("tpu")  # [m, 2]
    std = torch.tensor([1.0, 3.0]).to("tpu")  # [2], broadcast
    c = cpu(torch.normal(mean, std))
    assert c.shape == (m, 2) and c.dtype == torch.float32
    assert_moments(c[:, 0], -5.0, 1.0)
    assert_moments(c[:, 1], 5.0, 3.0)
    c = cpu(torch.normal(mean, 0.5))  # Tensor_float
    assert_moments(c[:, 1], 5.0, 0.5)
    c = cpu(torch.normal(2.0, std.repeat(m)))  # float_Tensor: std's dtype
    assert c.shape == (2 * m,)
    assert_moments(c[0::2], 2.0, 1.0)
    assert_moments(c[1::2], 2.0, 3.0)
    c = cpu(torch.normal(2.0, 3.0, size=(N,), device="tpu"))  # float_float
    assert_moments(c, 2.0, 3.0)
    # dtype follows mean (std's for float_Tensor), as on CPU.
    m64, s32 = torch.zeros(4, dtype=torch.float64), torch.ones(4)
    assert cpu(torch.normal(m64.to("tpu"), s32.to("tpu"))).dtype == torch.normal(m64, s32).dtype
    assert cpu(torch.normal(0.0, m64.to("tpu") + 1)).dtype == torch.float64
    out = torch.empty(N, device="tpu")
    torch.normal(torch.zeros(N).to("tpu"), 1.0, out=out)
    assert_moments(cpu(out), 0.0, 1.0)


def test_log_normal_():
    c = cpu(torch.empty(N, device="tpu").log_normal_(0.5, 0.75))
    assert (c > 0).all()
    assert_moments(c.log(), 0.5, 0.75)


@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_log_normal_dtypes(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).log_normal_())
    assert c.dtype == dtype and (c > 0).all()
    assert_moments(c.double().log(), 1.0, 2.0, slack=QUANT[dtype])


# ------------------------------------------- exponential, geometric, cauchy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_exponential_(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).exponential_(2.0))
    assert c.dtype == dtype
    assert (c.double() >= 0).all() and torch.isfinite(c).all()
    assert_moments(c, 0.5, 0.5, slack=QUANT[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int16])
def test_geometric_(dtype):
    p = 0.3
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).geometric_(p))
    assert c.dtype == dtype
    assert c.min().item() >= 1
    assert (c.double() == c.double().round()).all()
    assert_moments(c, 1 / p, math.sqrt(1 - p) / p)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cauchy_(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).cauchy_(1.0, 2.0)).double()
    assert c.dtype == torch.float64
    # Quartiles of Cauchy(1, 2) are 1 -+ 2; no moments exist.
    for lo, hi, p in [(-math.inf, 1.0, 0.5), (-1.0, 3.0, 0.5), (-math.inf, -1.0, 0.25)]:
        frac = ((c > lo) & (c <= hi)).double().mean().item()
        assert abs(frac - p) < 5 * math.sqrt(p * (1 - p) / N) + QUANT[dtype] * 2, (lo, hi, frac)


# -------------------------------------------------------------- bernoulli


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool])
def test_bernoulli_float_p(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).bernoulli_(0.3))
    assert c.dtype == dtype
    v = c.double()
    assert ((v == 0) | (v == 1)).all()
    assert abs(v.mean().item() - 0.3) <= 5 * math.sqrt(0.21 / N)


def test_bernoulli_edge_probabilities():
    assert (cpu(torch.empty(1000, device="tpu").bernoulli_(0.0)) == 0).all()
    assert (cpu(torch.empty(1000, device="tpu").bernoulli_(1.0)) == 1).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_bernoulli_tensor_probs(dtype):
    probs = torch.tensor([0.0, 0.2, 0.9, 1.0], dtype=dtype).repeat(N // 4)
    c = cpu(torch.bernoulli(probs.to("tpu")))
    assert c.dtype == dtype
    v = c.double().view(-1, 4)
    assert (v[:, 0] == 0).all() and (v[:, 3] == 1).all()
    for j, p in [(1, 0.2), (2, 0.9)]:
        p = float(torch.tensor(p, dtype=dtype))
        assert abs(v[:, j].mean().item() - p) <= 5 * math.sqrt(p * (1 - p) / (N // 4))


def test_bernoulli_p_and_inplace_tensor():
    # bernoulli.p: self only gives shape and dtype.
    c = cpu(torch.bernoulli(torch.zeros(N, dtype=torch.float64).to("tpu"), 0.6))
    assert c.dtype == torch.float64
    assert abs(c.mean().item() - 0.6) <= 5 * math.sqrt(0.24 / N)
    # bernoulli_.Tensor: p expanded to self's shape.
    self = torch.empty(N // 2, 2, device="tpu", dtype=torch.int32)
    self.bernoulli_(torch.tensor([0.25, 0.75]).to("tpu"))
    c = cpu(self).double()
    assert abs(c[:, 0].mean().item() - 0.25) <= 5 * math.sqrt(0.1875 / (N // 2))
    assert abs(c[:, 1].mean().item() - 0.75) <= 5 * math.sqrt(0.1875 / (N // 2))
    with pytest.raises(RuntimeError, match="expanded size"):
        torch.empty(4, device="tpu").bernoulli_(torch.full((3,), 0.5).to("tpu"))


# ---------------------------------------------------- random_ and randint


@pytest.mark.parametrize("dtype", INTS + [torch.bool])
def test_random_default_int(dtype):
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).random_())
    assert c.dtype == dtype
    hi = 1 if dtype == torch.bool else torch.iinfo(dtype).max
    v = c.double()
    assert v.min().item() >= 0 and v.max().item() <= hi
    # Uniform on [0, hi]; mean hi / 2 within 5 standard errors.
    sd = math.sqrt(((hi + 1) ** 2 - 1) / 12)
    assert abs(v.mean().item() - hi / 2) <= 5 * sd / math.sqrt(N)


@pytest.mark.parametrize("dtype", FLOATS)
def test_random_default_float(dtype):
    # PyTorch: integers in [0, 2^digits] for floating dtypes.
    digits = {torch.float32: 24, torch.float64: 53, torch.float16: 11, torch.bfloat16: 8}[dtype]
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).random_()).double()
    assert c.min().item() >= 0 and c.max().item() <= 2**digits
    assert (c == c.round()).all()
    assert abs(c.mean().item() / 2**digits - 0.5) < 0.01


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64] + FLOATS)
def test_random_from_to(dtype):
    lo, hi = (3, 20) if dtype == torch.uint8 else (-7, 10)
    c = cpu(torch.empty(N, device="tpu", dtype=dtype).random_(lo, hi))
    assert c.dtype == dtype
    v = c.long()
    assert v.min().item() == lo and v.max().item() == hi - 1
    assert (c.double() == v.double()).all()
    assert_freqs(v - lo, [1 / (hi - lo)] * (hi - lo), hi - lo)


def test_random_to_and_open_ended():
    c = cpu(torch.empty(N, device="tpu", dtype=torch.int64).random_(5))
    assert c.min().item() == 0 and c.max().item() == 4
    c = cpu(torch.empty(N, device="tpu", dtype=torch.int8).random_(100, None))
    assert c.min().item() == 100 and c.max().item() == 127
    c = cpu(torch.empty(N, device="tpu", dtype=torch.int64).random_(-(2**63), None))
    assert (c < 0).any() and (c > 0).any()
    assert abs((c < 0).double().mean().item() - 0.5) < 5 * math.sqrt(0.25 / N)
    big = 2**40
    c = cpu(torch.empty(N, device="tpu", dtype=torch.int64).random_(-big, big))
    assert c.min().item() >= -big and c.max().item() < big
    assert abs(c.double().mean().item()) <= 5 * (2 * big / math.sqrt(12)) / math.sqrt(N)


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32])
def test_randint(dtype):
    c = cpu(torch.randint(2, 9, (N,), device="tpu", dtype=dtype))
    assert c.dtype == dtype
    assert_freqs(c.long() - 2, [1 / 7] * 7, 7)
    c = cpu(torch.randint(4, (3, 5), device="tpu"))
    assert c.dtype == torch.int64 and c.shape == (3, 5) and c.min() >= 0 and c.max() < 4
    like = torch.empty(N, device="tpu", dtype=torch.int16)
    c = cpu(torch.randint_like(like, 3))
    assert c.dtype == torch.int16
    assert_freqs(c.long(), [1 / 3] * 3, 3)


# --------------------------------------------------------------- randperm


@pytest.mark.parametrize("n", [0, 1, 10, 1000])
def test_randperm_is_a_permutation(n):
    c = cpu(torch.randperm(n, device="tpu"))
    assert c.dtype == torch.int64 and c.shape == (n,)
    assert torch.equal(c.sort().values, torch.arange(n))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32])
def test_randperm_dtypes(dtype):
    c = cpu(torch.randperm(300, device="tpu", dtype=dtype))
    assert c.dtype == dtype
    assert torch.equal(c.sort().values, torch.arange(300, dtype=dtype))


def test_randperm_is_uniform():
    # The position of element 0 over many permutations of 5 is uniform.
    pos = torch.stack([cpu(torch.randperm(5, device="tpu")).argmin() for _ in range(500)])
    assert_freqs(pos, [0.2] * 5, 5)


# ------------------------------------------------------------ multinomial


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_multinomial_with_replacement(dtype):
    p = torch.tensor([0.1, 0.0, 0.2, 0.3, 0.4], dtype=dtype)
    c = cpu(torch.multinomial((p * 7).to("tpu"), N, replacement=True))  # unnormalised
    assert c.dtype == torch.int64 and c.shape == (N,)
    assert (c != 1).all()
    assert_freqs(c, p.double().tolist(), 5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_multinomial_without_replacement(dtype):
    p = torch.tensor([[0.0, 1.0, 2.0, 0.0, 3.0, 4.0]], dtype=dtype).repeat(4000, 1)
    c = cpu(torch.multinomial(p.to("tpu"), 4))
    assert c.shape == (4000, 4)
    assert (c != 0).all() and (c != 3).all()
    assert (c.sort(dim=1).values == torch.tensor([1, 2, 4, 5])).all()
    # The first draw follows p.
    assert_freqs(c[:, 0], [0, 0.1, 0.2, 0, 0.3, 0.4], 6)
    # One draw per row of a [rows, k] input.
    c = cpu(torch.multinomial(p.to("tpu"), 1))
    assert c.shape == (4000, 1)
    assert_freqs(c, [0, 0.1, 0.2, 0, 0.3, 0.4], 6)


def test_multinomial_unique_and_edge_shapes():
    c = cpu(torch.multinomial(torch.ones(50).to("tpu"), 50))
    assert torch.equal(c.sort().values, torch.arange(50))
    assert cpu(torch.multinomial(torch.ones(0, 3).to("tpu"), 2)).shape == (0, 2)
    with pytest.raises(RuntimeError, match="without replacement"):
        torch.multinomial(torch.ones(3).to("tpu"), 4)
    with pytest.raises(RuntimeError, match="n_sample <= 0"):
        torch.multinomial(torch.ones(3).to("tpu"), 0)
    with pytest.raises(RuntimeError, match="1 or 2 dim"):
        torch.multinomial(torch.ones(2, 2, 2).to("tpu"), 1)


# ---------------------------------------------------------------- dropout


@pytest.mark.parametrize("dtype, p", [(d, 0.2) for d in FLOATS] + [(torch.float32, 0.5)])
def test_dropout_train(dtype, p):
    x = (torch.rand(N) + 1).to(dtype)  # no zeros of its own
    y = cpu(F.dropout(x.to("tpu"), p, training=True))
    assert y.dtype == dtype
    zero = y == 0
    assert abs(zero.double().mean().item() - p) <= 5 * math.sqrt(p * (1 - p) / N)
    expected = (x.double() / (1 - p)).to(dtype)
    # kept elements are x * (1 / (1 - p)) in the dtype, expected is x / (1 - p) rounded
    # once: a rounded scale then a rounded product are at most 2 ulps apart: 1e-6 is
    # 8 float32 ulps (2**-23), 1e-2 is ~2.5 bf16 ulps (2**-8) and ~10 float16 ulps.
    torch.testing.assert_close(y[~zero], expected[~zero], rtol=1e-2 if dtype in (torch.bfloat16, torch.float16) else 1e-6, atol=0)


def test_dropout_eval_and_extremes():
    x = torch.randn(1000)
    assert torch.equal(cpu(F.dropout(x.to("tpu"), 0.5, training=False)), x)
    assert torch.equal(cpu(F.dropout(x.to("tpu"), 0.0, training=True)), x)
    out, mask = torch.native_dropout(x.to("tpu"), 1.0, True)
    assert (cpu(out) == 0).all() and not cpu(mask).any()
    m = torch.nn.Dropout(0.3).eval()
    assert torch.equal(cpu(m(x.to("tpu"))), x)


def test_native_dropout_and_backward():
    x = torch.randn(4096).to("tpu")
    out, mask = torch.native_dropout(x, 0.25, True)
    assert mask.dtype == torch.bool and mask.shape == x.shape
    o, m = cpu(out), cpu(mask)
    torch.testing.assert_close(o, x.cpu() * m / 0.75)
    out, mask = torch.native_dropout(x, 0.25, False)
    assert torch.equal(cpu(out), x.cpu()) and cpu(mask).all()
    g = torch.randn(4096)
    gb = cpu(torch.ops.aten.native_dropout_backward(g.to("tpu"), torch.from_numpy(m.numpy()).to("tpu"), 4 / 3))
    torch.testing.assert_close(gb, g * m * (4 / 3))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("scale", [0.0, 2.0])
def test_native_dropout_backward_dtypes(dtype, scale):
    # CPU: grad * mask * scale with a float scale; integral/bool grads give float32.
    g = torch.tensor([[3, 0, 1], [1, 2, 5]]).to(dtype)
    m = torch.tensor([[True, False, True], [False, True, True]])
    want = torch.ops.aten.native_dropout_backward(g, m, scale)
    got = cpu(torch.ops.aten.native_dropout_backward(g.to("tpu"), m.to("tpu"), scale))
    assert got.dtype == want.dtype
    torch.testing.assert_close(got, want)


def test_dropout_gradient_is_mask_times_scale():
    x = (torch.rand(10_000) + 1).to("tpu").requires_grad_()
    y = F.dropout(x, 0.4, training=True)
    g = torch.randn(10_000)
    y.backward(g.to("tpu"))
    kept = cpu(y).detach() != 0
    torch.testing.assert_close(cpu(x.grad), g * kept / 0.6)


# ------------------------------------------------------- reproducibility


def _draws():
    return [
        torch.rand(257, device="tpu"),
        torch.randn(3, 5, device="tpu", dtype=torch.bfloat16),
        torch.randint(0, 1000, (64,), device="tpu"),
        torch.randperm(100, device="tpu"),
        torch.multinomial(torch.ones(10).to("tpu"), 5),
        torch.empty(50, device="tpu").bernoulli_(0.5),
        F.dropout(torch.ones(64).to("tpu"), 0.5, True),
    ]


def _same(a, b):
    return all(torch.equal(x.cpu(), y.cpu()) for x, y in zip(a, b))


def test_manual_seed_replays_and_calls_differ():
    torch.manual_seed(123)
    a = _draws()
    b = _draws()
    torch.manual_seed(123)
    c = _draws()
    assert _same(a, c)
    assert not torch.equal(a[0].cpu(), b[0].cpu()) and not torch.equal(a[1].cpu(), b[1].cpu())
    torch.manual_seed(124)
    d = _draws()
    assert not torch.equal(a[0].cpu(), d[0].cpu())


def test_tpu_manual_seed_and_rng_state_round_trip():
    torch.tpu.manual_seed(7)
    a = _draws()
    torch.tpu.manual_seed(7)
    assert _same(a, _draws())
    assert torch.tpu.initial_seed() == 7
    state = torch.tpu.get_rng_state()
    assert state.dtype == torch.uint8 and state.device.type == "cpu"
    first = _draws()
    torch.tpu.set_rng_state(state)
    assert _same(first, _draws())
    with torch.random.fork_rng(device_type="tpu"):
        torch.rand(10, device="tpu")
    after_fork = torch.rand(10, device="tpu")
    torch.tpu.set_rng_state(state)
    _draws()
    assert torch.equal(after_fork.cpu(), torch.rand(10, device="tpu").cpu())


def test_consecutive_calls_are_not_shifted_copies():
    # Each execution gets a fresh offset; the streams must not overlap.
    a = cpu(torch.rand(1000, device="tpu"))
    b = cpu(torch.rand(1000, device="tpu"))
    assert not torch.isin(b, a).float().mean().item() > 0.01


def test_generator_argument_is_accepted():
    x = torch.empty(10, device="tpu")
    x.uniform_(0, 1, generator=None)
    assert cpu(x).max().item() < 1


# --------------------------------------------------------------- errors


def test_errors_match_pytorch():
    f = torch.empty(4, device="tpu")
    i = torch.empty(4, device="tpu", dtype=torch.int64)
    with pytest.raises(RuntimeError, match=r"normal expects std >= 0.0, but found std -1"):
        f.normal_(0, -1)
    with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range, but found from=1 > to=0"):
        f.uniform_(1, 0)
    with pytest.raises(RuntimeError, match=r"bernoulli_ expects p to be in \[0, 1\], but got p=1.5"):
        f.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match=r"random_ expects 'from' to be less than 'to', but got from=5 >= to=5"):
        f.random_(5, 5)
    with pytest.raises(RuntimeError, match=r"to - 1 is out of bounds for signed char"):
        torch.empty(3, device="tpu", dtype=torch.int8).random_(0, 1000)
    with pytest.raises(RuntimeError, match=r"exponential_ expects lambda > 0.0, but found lambda=0"):
        f.exponential_(0)
    with pytest.raises(RuntimeError, match=r"geometric_ expects p to be in \(0, 1\), but got p=1"):
        f.geometric_(1)
    with pytest.raises(RuntimeError, match=r"log_normal_ expects std > 0.0, but found std=0"):
        f.log_normal_(0, 0)
    with pytest.raises(RuntimeError, match=r"cauchy_ expects sigma > 0.0, but found sigma=0"):
        f.cauchy_(0, 0)
    with pytest.raises(RuntimeError, match=r"dtype must be a floating point but you specified Long"):
        i.exponential_()
    with pytest.raises(NotImplementedError, match=r"not implemented for 'Long'"):
        i.normal_()
    with pytest.raises(RuntimeError, match=r"multinomial only supports floating-point dtypes for input, got: Long"):
        torch.multinomial(i, 1)
