"""MoE routing ops on integer dtypes (issue 7, defect 3), and tiny Mixtral /
Qwen3-MoE models from transformers, forward and backward, against CPU.

Every integer op here is exact, so integer results compare with torch.equal
(same dtype, shape and values). Errors compare class and PyTorch's message.

histc on integers: PyTorch's CPU kernel rejects them (NotImplementedError);
CUDA's counts them, and transformers sends int32 expert ids to histc on every
device but cpu/mps (load_balancing_loss_func, the grouped_mm router). tpu
follows CUDA here: an integer histc counts as CUDA does, in the input's dtype.
The reference is CPU histc of the same values as float32 (the mathematically
defined counts; all values and bin edges here are exact in float32). bool stays
an error, as on CPU.

topk indices of tied values are unspecified in PyTorch (CPU's order depends on
its partial sort), so topk is checked on inputs without ties, and on ties by
values plus index validity.
"""
import copy

import pytest
import torch
import torch.nn.functional as F

import torchtpu  # noqa: F401
from tpu_testing import assert_same, tol

INT_DTYPES = [torch.int32, torch.int64, torch.uint8, torch.int8, torch.int16]


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _ids(shape, high, dtype, seed=0):
    return torch.randint(0, high, shape, generator=_gen(seed)).to(dtype)


def _same_int(t, c):
    assert t.device.type == "tpu"
    t = t.cpu()
    assert t.dtype == c.dtype and t.shape == c.shape, (t.dtype, c.dtype, t.shape, c.shape)
    assert torch.equal(t, c), (t, c)


def _same_error(fn, *args):
    with pytest.raises(Exception) as ec:
        fn(*args)
    with pytest.raises(type(ec.value)) as et:
        r = fn(*[a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args])
        r.cpu()
    assert str(ec.value).splitlines()[0] in str(et.value), (str(ec.value), str(et.value))


# ------------------------------------------------------------------ bincount


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("minlength", [0, 3, 12])
def test_bincount(dtype, minlength):
    x = _ids((40,), 8, dtype)
    _same_int(torch.bincount(x.to("tpu"), minlength=minlength), torch.bincount(x, minlength=minlength))


@pytest.mark.parametrize("wdtype", [torch.float32, torch.float64, torch.float16, torch.int32, torch.int64])
def test_bincount_weights(wdtype):
    x = _ids((40,), 6, torch.int32, seed=1)
    w = (torch.randn(40, generator=_gen(2)) * 4).to(wdtype)
    c = torch.bincount(x, w, minlength=9)
    t = torch.bincount(x.to("tpu"), w.to("tpu"), minlength=9)
    # sums of up to 40 weights, accumulated in another order: float32 tolerance
    assert c.dtype == (torch.float32 if wdtype == torch.float32 else torch.float64)
    assert t.dtype == c.dtype
    torch.testing.assert_close(t.cpu(), c, **tol(torch.float32))


def test_bincount_size_follows_the_data():
    # one compiled program per data range; the result always has max + 1 bins
    for high in [3, 5, 3, 1000]:
        x = torch.tensor([0, high - 1, 1], dtype=torch.int64)
        _same_int(torch.bincount(x.to("tpu")), torch.bincount(x))


def test_bincount_empty():
    x = torch.tensor([], dtype=torch.int64)
    _same_int(torch.bincount(x.to("tpu"), minlength=4), torch.bincount(x, minlength=4))
    _same_int(torch.bincount(x.to("tpu"), torch.tensor([]).to("tpu")), torch.bincount(x, torch.tensor([])))


@pytest.mark.parametrize(
    "case",
    ["negative", "two_dims", "zero_dim", "float", "bool", "weights_len", "minlength"],
)
def test_bincount_errors(case):
    i = torch.tensor([0, 2, 1])
    args = {
        "negative": (torch.tensor([1, -1, 2]),),
        "two_dims": (torch.tensor([[1, 2]]),),
        "zero_dim": (torch.tensor(1),),
        "float": (torch.tensor([1.0, 2.0]),),
        "bool": (torch.tensor([True, False]),),
        "weights_len": (i, torch.ones(4)),
    }
    if case == "minlength":
        _same_error(lambda x: torch.bincount(x, minlength=-1), i)
    else:
        _same_error(torch.bincount, *args[case])


# ------------------------------------------------------------------ histc


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("bins, lo, hi", [(8, 0, 8), (8, 0, 7), (4, 0, 0), (5, 2, 6), (3, 1, 10)])
def test_histc_integer_counts(dtype, bins, lo, hi):
    x = _ids((64,), 9, dtype, seed=3)
    want = torch.histc(x.to(torch.float32), bins=bins, min=lo, max=hi).to(dtype)
    _same_int(torch.histc(x.to("tpu"), bins=bins, min=lo, max=hi), want)


def test_histc_integer_constant_data():
    # min == max on constant data: the range is widened by one each side, as PyTorch does
    x = torch.full((6,), 3, dtype=torch.int32)
    want = torch.histc(x.float(), bins=4).to(torch.int32)
    _same_int(torch.histc(x.to("tpu"), bins=4), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_histc_float_matches_cpu(dtype):
    x = torch.randn(200, generator=_gen(4)).to(dtype)
    assert_same(torch.histc(x.to("tpu"), bins=10, min=-2, max=2), torch.histc(x, bins=10, min=-2, max=2))


def test_histc_errors():
    _same_error(lambda x: torch.histc(x, bins=4), torch.tensor([True, False]))
    _same_error(lambda x: torch.histc(x, bins=0), torch.tensor([1.0, 2.0]))


# ------------------------------------------------------------------ routing ops


@pytest.mark.parametrize("dtype", [torch.int64])
def test_one_hot(dtype):
    x = _ids((5, 2), 4, dtype, seed=5)
    _same_int(F.one_hot(x.to("tpu"), num_classes=5), F.one_hot(x, num_classes=5))
    _same_int(F.one_hot(x.to("tpu")), F.one_hot(x))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_topk_distinct_values(dtype):
    # a permutation per row: no ties, so indices are determined
    x = torch.stack([torch.randperm(12, generator=_gen(10 + r)) for r in range(6)]).to(dtype)
    for k, largest in [(2, True), (3, False)]:
        vc, ic = torch.topk(x, k, dim=-1, largest=largest)
        vt, it = torch.topk(x.to("tpu"), k, dim=-1, largest=largest)
        _same_int(vt, vc)
        _same_int(it, ic)


def test_topk_bool_is_an_error_as_on_cpu():
    _same_error(lambda x: torch.topk(x, 2), torch.tensor([True, False, True]))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_topk_with_ties(dtype):
    x = _ids((6, 8), 3, dtype, seed=6)
    vc, _ = torch.topk(x, 3, dim=-1)
    vt, it = torch.topk(x.to("tpu"), 3, dim=-1)
    _same_int(vt, vc)
    it = it.cpu()
    assert torch.equal(torch.gather(x, -1, it), vc)  # the indices point at those values
    assert all(len(set(row.tolist())) == 3 for row in it)  # and are distinct


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(dtype, descending):
    x = _ids((4, 16), 2 if dtype == torch.bool else 5, dtype, seed=7)
    vc, ic = torch.sort(x, dim=-1, descending=descending, stable=True)
    vt, it = torch.sort(x.to("tpu"), dim=-1, descending=descending, stable=True)
    _same_int(vt, vc)
    _same_int(it, ic)
    _same_int(torch.argsort(x.flatten().to("tpu"), stable=True), torch.argsort(x.flatten(), stable=True))


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool])
def test_scatter_add(dtype):
    src = _ids((6, 4), 2 if dtype == torch.bool else 5, dtype, seed=8)
    idx = torch.randint(0, 3, (6, 4), generator=_gen(9))
    base = torch.zeros(3, 4, dtype=dtype)
    _same_int(base.to("tpu").scatter_add(0, idx.to("tpu"), src.to("tpu")), base.scatter_add(0, idx, src))
    bt = base.to("tpu")
    bt.scatter_add_(0, idx.to("tpu"), src.to("tpu"))
    _same_int(bt, base.clone().scatter_add_(0, idx, src))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_index_add_(dtype):
    src = _ids((6, 4), 5, dtype, seed=10)
    idx = torch.tensor([0, 2, 1, 0, 2, 2])
    for alpha in [1, 2]:
        c = torch.ones(3, 4, dtype=dtype).index_add_(0, idx, src, alpha=alpha)
        t = torch.ones(3, 4, dtype=dtype, device="tpu").index_add_(0, idx.to("tpu"), src.to("tpu"), alpha=alpha)
        _same_int(t, c)


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool])
def test_cumsum(dtype):
    x = _ids((5, 6), 2 if dtype == torch.bool else 4, dtype, seed=11)
    _same_int(torch.cumsum(x.to("tpu"), 0), torch.cumsum(x, 0))
    _same_int(torch.cumsum(x.to("tpu"), 1, dtype=torch.int32), torch.cumsum(x, 1, dtype=torch.int32))


def test_argmax_bool_is_an_error_as_on_cpu():
    _same_error(lambda x: torch.argmax(x, dim=0), torch.tensor([True, False, True]))


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_argmax_first_of_ties(dtype):
    x = _ids((5, 6), 3, dtype, seed=12)
    _same_int(torch.argmax(x.to("tpu"), dim=1), torch.argmax(x, dim=1))
    _same_int(torch.argmax(x.to("tpu")), torch.argmax(x))


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool])
def test_where_and_nonzero(dtype):
    x = _ids((4, 5), 2 if dtype == torch.bool else 3, dtype, seed=13)
    t = x.to("tpu")
    _same_int(torch.where(t > 0, t, torch.zeros_like(t)), torch.where(x > 0, x, torch.zeros_like(x)))
    for a, b in zip(torch.where(t), torch.where(x)):
        _same_int(a, b)
    _same_int(torch.nonzero(t), torch.nonzero(x))
    _same_int(torch.greater(t.sum(dim=0), 0).nonzero(), torch.greater(x.sum(dim=0), 0).nonzero())


def test_mixtral_style_routing_counts():
    # the router's bookkeeping as transformers writes it, on int64 expert ids
    logits = torch.randn(10, 4, generator=_gen(14))
    for dev in ["cpu", "tpu"]:
        probs = torch.softmax(logits.to(dev), dim=-1)
        _, top = torch.topk(probs, 2, dim=-1)
        mask = F.one_hot(top, num_classes=5).permute(2, 1, 0)
        hit = torch.greater(mask.sum(dim=(-1, -2)), 0).nonzero()
        counts = torch.bincount(top.reshape(-1), minlength=4)
        hist = torch.histc(top.reshape(-1).to(torch.int32 if dev == "tpu" else torch.float32), bins=4, min=0, max=4)
        if dev == "cpu":
            want = (mask, hit, counts, hist.to(torch.int32))
        else:
            for a, b in zip((mask, hit, counts, hist), want):
                _same_int(a, b)


# ------------------------------------------------------------------ tiny MoE models


def _compare_model(model_cpu, ids):
    model_cpu.train()
    model_tpu = copy.deepcopy(model_cpu).to("tpu")
    oc = model_cpu(input_ids=ids, labels=ids)
    ot = model_tpu(input_ids=ids.to("tpu"), labels=ids.to("tpu"))
    # float32 end to end, a few dozen ops deep: 10x the float32 tolerance
    assert_same(ot.logits, oc.logits, scale=10)
    assert_same(ot.loss, oc.loss, scale=10)
    assert oc.aux_loss is not None
    assert_same(ot.aux_loss, oc.aux_loss, scale=10)
    oc.loss.backward()
    ot.loss.backward()
    named_t = dict(model_tpu.named_parameters())
    for name, p in model_cpu.named_parameters():
        q = named_t[name]
        assert (p.grad is None) == (q.grad is None), name
        if p.grad is not None:
            assert_same(q.grad, p.grad, scale=10)


def test_tiny_mixtral_forward_backward():
    import transformers  # installed by `make test` (requirements-models.txt)
    torch.manual_seed(0)
    cfg = transformers.MixtralConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, vocab_size=100,
        output_router_logits=True, router_aux_loss_coef=0.02,
    )
    model = transformers.MixtralForCausalLM(cfg)
    ids = torch.randint(0, 100, (2, 7), generator=_gen(15))
    _compare_model(model, ids)


def test_tiny_qwen3_moe_forward_backward():
    import transformers  # installed by `make test` (requirements-models.txt)
    torch.manual_seed(0)
    cfg = transformers.Qwen3MoeConfig(
        hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, num_experts=4, num_experts_per_tok=2,
        vocab_size=100, output_router_logits=True, router_aux_loss_coef=0.02, norm_topk_prob=True,
    )
    model = transformers.Qwen3MoeForCausalLM(cfg)
    ids = torch.randint(0, 100, (2, 7), generator=_gen(16))
    _compare_model(model, ids)
