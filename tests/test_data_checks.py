"""Inputs that only their data shows to be invalid raise PyTorch CPU's error instead of
returning a meaningless result: a distribution that is not one, a probability outside
[0, 1] (a missing sigmoid before binary_cross_entropy), a negative std, a histogram range
that is not finite, a masked_scatter source shorter than the mask's true positions, a
singular Cholesky factor, a singular matrix under check_errors=True, NaN in svd's or
eigh's input. Each is a device-side check (runtime/src/check.h) raising CPU's class
(torch.linalg.LinAlgError where CPU raises it): strict mode at the next synchronisation
with no host sync per op, debug mode at the op. Out-of-range indices: test_index_checks.py."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import torchtpu

t = torch.tensor

NAN = float("nan")
SINGULAR = t([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])  # U[3,3] is zero

# name -> fn(device): a call CPU refuses for its data
CASES = {
    "multinomial_negative": lambda d: torch.multinomial(t([0.5, -0.1], device=d), 1),
    "multinomial_negative_several_replaced": lambda d: torch.multinomial(t([0.5, -0.1], device=d), 2, True),
    "multinomial_nan": lambda d: torch.multinomial(t([float("nan"), 1.0], device=d), 1),
    "multinomial_nan_several_replaced": lambda d: torch.multinomial(t([float("nan"), 1.0], device=d), 3, True),
    "multinomial_inf": lambda d: torch.multinomial(t([float("inf"), 1.0], device=d), 1, True),
    "multinomial_inf_several_replaced": lambda d: torch.multinomial(t([float("inf"), 1.0], device=d), 2, True),
    "multinomial_zero_sum": lambda d: torch.multinomial(t([0.0, 0.0], device=d), 1),
    "multinomial_zero_sum_row": lambda d: torch.multinomial(t([[1.0, 0.0], [0.0, 0.0]], device=d), 3, True),
    "bernoulli_p_above_1": lambda d: torch.bernoulli(t([0.5, 1.5], device=d)),
    "bernoulli_p_nan": lambda d: torch.bernoulli(t([float("nan")], device=d, dtype=torch.float64)),
    "bernoulli__tensor_p": lambda d: torch.zeros(2, device=d).bernoulli_(t([0.5, -0.5], device=d)),
    "normal_negative_std": lambda d: torch.normal(torch.zeros(2, device=d), t([1.0, -1.0], device=d)),
    "normal_nan_std": lambda d: torch.normal(0.0, t([float("nan"), 1.0], device=d)),
    "bce_input_above_1": lambda d: F.binary_cross_entropy(t([0.5, 1.5], device=d), t([1.0, 0.0], device=d)),
    "bce_input_nan": lambda d: F.binary_cross_entropy(t([0.5, float("nan")], device=d), t([1.0, 0.0], device=d)),
    "bce_target_above_1": lambda d: F.binary_cross_entropy(t([0.5, 0.5], device=d), t([1.0, 2.0], device=d)),
    "histc_max_below_min": lambda d: torch.arange(5.0, device=d).histc(3, min=2, max=1),
    "histc_inf_data": lambda d: t([1.0, float("inf")], device=d).histc(3),
    "histc_nan_data": lambda d: t([1.0, float("nan")], device=d).histc(3),
    "masked_scatter_short_source": lambda d: torch.zeros(3, device=d).masked_scatter_(t([True, False, True], device=d),
                                                                                     t([1.0], device=d)),
    "masked_scatter_empty_source": lambda d: torch.zeros(2, 2, device=d).masked_scatter(t([False, True], device=d),
                                                                                       torch.zeros(0, device=d)),
    "cholesky_inverse_zero_pivot": lambda d: torch.cholesky_inverse(t([[1.0, 0.0], [1.0, 0.0]], device=d)),
    # check_errors=True: what the default (False) returns as `info`, raised
    "cholesky_ex_not_positive_definite": lambda d: torch.linalg.cholesky_ex(-torch.eye(3, device=d),
                                                                            check_errors=True)[0],
    "inv_ex_singular": lambda d: torch.linalg.inv_ex(SINGULAR.to(d), check_errors=True)[0],
    "solve_ex_singular": lambda d: torch.linalg.solve_ex(SINGULAR.to(d), torch.ones(3, device=d), check_errors=True)[0],
    "lu_factor_ex_singular": lambda d: torch.linalg.lu_factor_ex(SINGULAR.to(d), check_errors=True)[0],
    "svd_nan": lambda d: torch.linalg.svd(t([[1.0, float("nan")], [0.0, 1.0]], device=d))[0],
    "eigh_nan": lambda d: torch.linalg.eigvalsh(t([[2.0, NAN, 0.0], [NAN, 2.0, 1.0], [0.0, 1.0, 2.0]], device=d)),
}

# The CPU text these cases do not match exactly: ATen's histc names the two bounds
# ("range of [1, inf]"), a check reports one integer; a batch's cholesky_inverse has no
# "(Batch element i)"; LAPACK's eigh runs on non-finite input and fails to converge
# ("... is ill-conditioned or has too many repeated eigenvalues (error code: 1)"), or
# for some inputs returns NaNs or even finite values, where the device always refuses
# the input first ("... contained non-finite values").
PREFIX_ONLY = {"histc_inf_data": "torch.histc: range of [", "histc_nan_data": "torch.histc: range of [",
               "eigh_nan": "linalg.eigh: The algorithm failed to converge because the input matrix "}


def _cpu_error(fn):
    with pytest.raises(RuntimeError) as info:
        fn("cpu")
    return info.value


@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_cpus_error(name):
    fn = CASES[name]
    cpu_error = _cpu_error(fn)
    expected = PREFIX_ONLY.get(name) or str(cpu_error)
    debug = torchtpu.get_eager_mode() == "debug"
    before = torchtpu.metrics()
    with pytest.raises(RuntimeError) as info:
        y = fn("tpu")
        if not debug:  # nothing waited for the device yet
            assert torchtpu.metrics()["syncs"] == before["syncs"]
        y.cpu()
    assert expected in str(info.value), str(info.value)
    # CPU's class: torch.linalg.LinAlgError where CPU raises it (`except LinAlgError` works)
    assert type(info.value) is type(cpu_error), (type(info.value), type(cpu_error))
    assert "aten::" in str(info.value)  # names the op
    torchtpu.synchronize()  # reported once; the device keeps working


def test_valid_data_matches_cpu():
    g = torch.Generator().manual_seed(0)
    p, x = torch.rand(4, 3, generator=g), torch.randn(50, generator=g)
    torch.testing.assert_close(F.binary_cross_entropy(p.to("tpu"), p.flip(0).to("tpu")).cpu(),
                               F.binary_cross_entropy(p, p.flip(0)))
    for kw in ({}, {"min": -1, "max": 1}, {"bins": 7}):
        torch.testing.assert_close(x.to("tpu").histc(**kw).cpu(), x.histc(**kw))
    torch.testing.assert_close(t([1.0, float("nan"), 2.0], device="tpu").histc(3, min=0, max=3).cpu(),
                               t([1.0, float("nan"), 2.0]).histc(3, min=0, max=3))  # NaN dropped, bounds given
    edge = t([0.0, 1.0, 1.0, 0.0])  # the bounds are allowed
    assert torch.bernoulli(edge.to("tpu")).cpu().tolist() == edge.tolist()
    assert torch.multinomial(t([0.0, 3.0], device="tpu"), 2, True).cpu().tolist() == [1, 1]
    assert torch.normal(torch.zeros(2, device="tpu"), torch.zeros(2, device="tpu")).cpu().tolist() == [0.0, 0.0]
    L = t([[2.0, 0.0], [1.0, 3.0]])
    torch.testing.assert_close(torch.cholesky_inverse(L.to("tpu")).cpu(), torch.cholesky_inverse(L))


def test_no_sync_per_op_and_no_recompile():
    # The checks are part of the op's program: a loop of valid calls neither waits for
    # the device nor compiles again (strict mode).
    with torchtpu.eager_mode("strict"):
        p = torch.rand(8, device="tpu")
        y = t([1.0, 0.0] * 4, device="tpu")
        F.binary_cross_entropy(p, y)
        torch.bernoulli(p)
        torchtpu.synchronize()
        before = torchtpu.metrics()
        for _ in range(5):
            F.binary_cross_entropy(p, y)
            torch.bernoulli(p)
        after = torchtpu.metrics()
        assert after["syncs"] == before["syncs"] and after["compiles"] == before["compiles"]
        torchtpu.synchronize()


def test_bce_backward_is_unchecked_and_matches_cpu():
    # ATen checks the forward's data only.
    p = torch.rand(6, generator=torch.Generator().manual_seed(1)) * 0.8 + 0.1
    y = (p > 0.5).float()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        xt = p.to("tpu").requires_grad_()
        F.binary_cross_entropy(xt, y.to("tpu")).backward()
    xc = p.clone().requires_grad_()
    F.binary_cross_entropy(xc, y).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
