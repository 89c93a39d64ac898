"""The rejection samplers behind torch.distributions on tpu: _standard_gamma
(Gamma, Beta, Chi2, ...), _sample_dirichlet, poisson and binomial. Their numbers cannot
equal CPU's (another generator), so the samples are checked against the
distributions themselves with a fixed seed: a Kolmogorov-Smirnov distance to
the gamma CDF (torch.special.gammainc in float64) below its 99.9% critical
value, Poisson and binomial frequencies and moments within 5 standard errors,
and the edge values (alpha <= 0, NaN, inf; rate 0, negative rates; count <= 0,
prob outside (0, 1), NaN) as on CPU."""
import math

import pytest
import torch

from tpu_testing import assert_raises_like, assert_same

N = 20000


def _ks_gamma(x, alpha):
    xs, _ = x.double().sort()
    cdf = torch.special.gammainc(torch.tensor(alpha, dtype=torch.float64), xs)
    hi = torch.arange(1, len(xs) + 1, dtype=torch.float64) / len(xs)
    return max((hi - cdf).abs().max().item(), (cdf - (hi - 1.0 / len(xs))).abs().max().item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("alpha", [0.5, 1.0, 3.0, 50.0])
def test_standard_gamma_follows_the_gamma_distribution(alpha, dtype):
    torch.manual_seed(0)
    x = torch._standard_gamma(torch.full((N,), alpha, dtype=dtype, device="tpu")).cpu()
    assert x.dtype == dtype and bool((x > 0).all())
    # bfloat16 rounds each sample (8 bits): allow its quantisation on top
    crit = 1.95 / math.sqrt(N) + (2.0 ** -8 if dtype == torch.bfloat16 else 0.0)
    assert _ks_gamma(x, alpha) < crit


def test_standard_gamma_small_alpha_and_edges():
    torch.manual_seed(1)
    # alpha < 1 is boosted by U^(1/alpha); below the smallest normal float both clamp
    x = torch._standard_gamma(torch.full((N,), 0.05, device="tpu")).cpu().double()
    assert abs(x.mean().item() - 0.05) < 5 * math.sqrt(0.05 / N)
    edges = torch.tensor([0.0, -1.0, float("nan"), float("inf")])
    assert torch.equal(torch._standard_gamma(edges.to("tpu")).cpu(), torch._standard_gamma(edges))
    assert_raises_like(NotImplementedError('"gamma_cpu" not implemented for \'Long\''),
                       torch._standard_gamma, torch.tensor([1, 2]))


def test_gamma_samplers_replay_with_the_seed():
    a = torch.rand(4, 5, device="tpu") * 3
    torch.manual_seed(7)
    x1, p1 = torch._standard_gamma(a).cpu(), torch.poisson(a * 5).cpu()
    torch.manual_seed(7)
    x2, p2 = torch._standard_gamma(a).cpu(), torch.poisson(a * 5).cpu()
    assert torch.equal(x1, x2) and torch.equal(p1, p2)
    assert not torch.equal(torch._standard_gamma(a).cpu(), x1)  # the stream moves on


def test_dirichlet_and_distributions_on_tpu():
    torch.manual_seed(2)
    conc = torch.tensor([1.0, 2.0, 3.0])
    d = torch._sample_dirichlet(conc.expand(N, 3).to("tpu")).cpu().double()
    assert (d.sum(-1) - 1).abs().max() < 1e-6 and bool((d > 0).all())
    mean, var = conc / 6, conc * (6 - conc) / (36 * 7)
    assert ((d.mean(0) - mean).abs() < 5 * (var / N).sqrt()).all()
    # torch.distributions reach these samplers unmodified
    dists = [torch.distributions.Gamma(torch.tensor(2.0), torch.tensor(4.0)),
             torch.distributions.Beta(torch.tensor(2.0), torch.tensor(5.0)),
             torch.distributions.Chi2(torch.tensor(3.0)),
             torch.distributions.Dirichlet(conc),
             torch.distributions.Poisson(torch.tensor(4.0))]
    for dist in dists:
        on_tpu = type(dist)(**{k: getattr(dist, k).to("tpu") for k in dist.arg_constraints})
        s = on_tpu.sample((N,))
        assert s.device.type == "tpu" and s.shape == dist.sample((N,)).shape
        sd = dist.stddev.double() if not isinstance(dist, torch.distributions.Dirichlet) else dist.variance.sqrt()
        err = (s.cpu().double().mean(0) - dist.mean.double()).abs()
        assert bool((err < 5 * sd / math.sqrt(N)).all()), (type(dist).__name__, err)


@pytest.mark.parametrize("rate", [0.5, 3.0, 9.9, 10.0, 30.0, 1000.0, 1e5])
def test_poisson_follows_the_poisson_distribution(rate):
    torch.manual_seed(3)
    x = torch.poisson(torch.full((N,), rate, device="tpu")).cpu().double()
    assert bool((x == x.round()).all()) and bool((x >= 0).all())
    assert abs(x.mean().item() - rate) < 5 * math.sqrt(rate / N)
    assert abs(x.var().item() - rate) < 5 * math.sqrt((2 * rate * rate + rate) / N)
    # frequencies of the likeliest values against the pmf
    for k in range(max(0, int(rate) - 2), int(rate) + 3):
        p = math.exp(k * math.log(rate) - rate - math.lgamma(k + 1))
        assert abs((x == k).double().mean().item() - p) < 5 * math.sqrt(p * (1 - p) / N) + 1e-4


def test_poisson_edges():
    torch.manual_seed(4)
    x = torch.poisson(torch.tensor([0.0, 0.0, 2.0], device="tpu")).cpu()
    assert x[0] == 0 and x[1] == 0 and x.dtype == torch.float32
    assert torch.poisson(torch.zeros(0, 3, device="tpu")).shape == (0, 3)
    with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
        torch.poisson(torch.tensor([1.0, -1.0], device="tpu")).cpu()
    import torchtpu
    assert all(torchtpu._C.op_supported(n) for n in ("_standard_gamma", "_sample_dirichlet", "poisson", "binomial"))


def _pmf_binomial(n, p, k):
    return math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                    + k * math.log(p) + (n - k) * math.log1p(-p))


# inversion (n p < 10), BTRS (n p >= 10), p > 1/2 (the failures are sampled), large n
@pytest.mark.parametrize("n,p", [(5, 0.5), (50, 0.05), (20, 0.3), (100, 0.3), (1000, 0.9), (3, 0.99), (10 ** 6, 0.5)])
def test_binomial_follows_the_binomial_distribution(n, p):
    torch.manual_seed(5)
    x = torch.binomial(torch.full((N,), float(n), device="tpu"), torch.full((N,), p, device="tpu")).cpu().double()
    assert bool((x == x.round()).all()) and bool((x >= 0).all()) and bool((x <= n).all())
    mu, var = n * p, n * p * (1 - p)
    assert abs(x.mean().item() - mu) < 5 * math.sqrt(var / N)
    assert abs(x.var().item() - var) < 5 * var * math.sqrt(2.0 / N) + 5 * math.sqrt(var / N)
    for k in range(max(0, int(mu) - 2), min(n, int(mu) + 3)):
        q = _pmf_binomial(n, p, k)
        assert abs((x == k).double().mean().item() - q) < 5 * math.sqrt(q * (1 - q) / N) + 1e-4


def test_binomial_edges_and_broadcasting():
    count = torch.tensor([0.0, 5.0, 10.0, -1.0, 5.0, 5.0, 5.0])
    prob = torch.tensor([0.5, 0.0, 1.0, 0.5, float("nan"), 1.5, -0.5])
    # no randomness at these edges: equal to CPU, NaN included
    assert torch.allclose(torch.binomial(count.to("tpu"), prob.to("tpu")).cpu(), torch.binomial(count, prob),
                          rtol=0, atol=0, equal_nan=True)
    x = torch.binomial(torch.full((3, 4), 7.0, device="tpu"), torch.full((4,), 0.5, device="tpu"))
    assert x.shape == (3, 4) and x.dtype == torch.float32
    assert_raises_like(RuntimeError("binomial only supports floating-point dtypes for count, got: Long"),
                       torch.binomial, torch.tensor([5, 5]), torch.tensor([0.5, 0.5]))
    dist = torch.distributions.Binomial(torch.tensor(30.0, device="tpu"), torch.tensor(0.4, device="tpu"))
    s = dist.sample((N,))
    assert s.device.type == "tpu" and abs(s.cpu().double().mean().item() - 12.0) < 5 * math.sqrt(7.2 / N)


def _gamma_grad_f64(alpha, x, h=1e-6):
    """dx/dalpha = (dQ/dalpha) / pdf, Q by torch.special.gammaincc in float64."""
    a, x = alpha.double(), x.double()
    dq = (torch.special.gammaincc(a + h, x) - torch.special.gammaincc(a - h, x)) / (2 * h)
    return dq / torch.exp((a - 1) * torch.log(x) - x - torch.lgamma(a))


@pytest.mark.parametrize("alpha", [0.05, 0.3, 1.0, 2.5, 10.0, 50.0, 300.0])
def test_standard_gamma_grad_matches_float64(alpha):
    # the series region (x < alpha + 1) and the difference-of-Q region both get samples
    torch.manual_seed(6)
    a = torch.full((2000,), alpha)
    x = torch._standard_gamma(a).clamp_min(1e-30)
    want = _gamma_grad_f64(a, x)
    got_tpu = torch._standard_gamma_grad(a.to("tpu"), x.to("tpu"))
    got = got_tpu.cpu()
    assert got.dtype == torch.float32
    rel = (got.double() - want).abs() / want.abs()
    assert rel.max().item() < 2e-3, rel.max().item()
    # CPU's kernel is an approximation of the same quantity
    assert_same(got_tpu, torch._standard_gamma_grad(a, x), scale=100)


def test_gamma_rsample_backward_on_tpu():
    import torchtpu
    assert torchtpu._C.op_supported("_standard_gamma_grad")
    torch.manual_seed(7)
    conc = torch.tensor([0.5, 2.0, 30.0], device="tpu", requires_grad=True)
    x = torch.distributions.Gamma(conc, torch.ones(3, device="tpu")).rsample((500,))
    x.sum().backward()
    want = _gamma_grad_f64(conc.detach().cpu().expand(500, 3), x.detach().cpu().clamp_min(1e-30)).sum(0)
    assert ((conc.grad.cpu().double() - want).abs() / want.abs()).max().item() < 2e-3
