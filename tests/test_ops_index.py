"""Index-family ops on tpu vs CPU: gather/scatter, advanced indexing and the
view-write patterns users write (x[idx] = v, x[mask] = 0, kv[:, t] = k), masks,
sort/topk and friends, searchsorted."""
import pytest
import torch

from tpu_testing import assert_same, check, check_grad

ALL = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8, torch.uint8, torch.bool]
NUM = [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8]


def make(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return torch.randn(shape).to(dtype)
    return torch.randint(0, 50, shape).to(dtype)


def tpu(x):
    return x.to("tpu")


# ---------------------------------------------------------------- gathers


@pytest.mark.parametrize("dtype", ALL)
def test_index_select(dtype):
    x = make((4, 5, 3), dtype)
    idx = torch.tensor([3, 0, 3, 1])
    check(lambda x, i: x.index_select(1, i), x, idx)
    check(lambda x, i: x.index_select(-1, i), x, torch.tensor([2, 0], dtype=torch.int32))
    check(lambda x, i: x.index_select(0, i), x, torch.tensor(2))  # 0-d index


def test_index_select_noncontiguous_and_grad():
    x = torch.randn(6, 5)
    check(lambda x, i: x.t().index_select(0, i), x, torch.tensor([4, 0, 4]))
    check_grad(lambda x: x.index_select(0, torch.tensor([1, 1, 3], device=x.device)), x)


def test_embedding_and_backward():
    w = torch.randn(10, 4)
    idx = torch.tensor([[1, 2, 2], [9, 0, 2]])
    check_grad(lambda w: torch.nn.functional.embedding(idx.to(w.device), w), w)
    check_grad(lambda w: torch.nn.functional.embedding(idx.to(w.device), w, padding_idx=2), w)
    check_grad(lambda w: torch.nn.functional.embedding(idx.to(w.device), w, padding_idx=-1,
                                                       scale_grad_by_freq=True), w)


@pytest.mark.parametrize("dtype", ALL)
def test_gather(dtype):
    x = make((3, 4), dtype)
    check(lambda x, i: torch.gather(x, 1, i), x, torch.tensor([[0, 3], [1, 1], [2, 0]]))
    check(lambda x, i: torch.gather(x, 0, i), x, torch.tensor([[2, 1, 0, 0]]))
    check(lambda x, i: torch.take(x, i), x, torch.tensor([[0, -1], [5, 11]]))
    check(lambda x, i: torch.take_along_dim(x, i, dim=1), x, torch.tensor([[3], [0], [1]]))


def test_gather_grad_and_errors():
    x = torch.randn(3, 4)
    check_grad(lambda x: torch.gather(x, 1, torch.tensor([[0, 0], [1, 3], [2, 2]], device=x.device)), x)
    with pytest.raises(RuntimeError, match="int32/int64"):
        torch.gather(tpu(x), 1, tpu(torch.zeros(3, 1, dtype=torch.int16)))


def test_gather_scatter_int32_index():
    # PyTorch accepts int32 indices for gather and the scatter family (OpInfo samples use them).
    x = torch.randn(10, 5)
    i = torch.randint(0, 10, (5, 5), dtype=torch.int32)
    # Plain scatter with repeated indices keeps an unspecified one of the writes
    # (PyTorch's docs), and a GPU may keep another than the CPU: distinct
    # indices per column for it.
    uniq = torch.argsort(torch.rand(10, 5), dim=0)[:5].to(torch.int32)
    src = torch.randn(5, 5)
    check(lambda x, i: torch.gather(x, 0, i), x, i)
    check(lambda x, i, s: torch.scatter(x, 0, i, s), x, uniq, src)
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), x, i, src)
    check(lambda x, i, s: torch.scatter_reduce(x, 0, i, s, "amax"), x, i, src)
    check(lambda x, i: torch.scatter(x, 0, i, 2.5), x, i)
    # An empty index of any dtype passes the dtype check (OpInfo gather sample).
    e = torch.tensor([], dtype=torch.uint8)
    check(lambda x, i: torch.gather(x, 0, i), torch.randn(5), e)
    check(lambda x, i: torch.gather(x, 0, i), torch.randn(5), torch.zeros(2, 0, dtype=torch.uint8))
    check(lambda x, i, s: torch.scatter_add(x, 0, i, s), torch.randn(5), e, torch.randn(0))


@pytest.mark.parametrize("alpha", [False, True])
def test_index_add_bool_alpha(alpha):
    x = torch.tensor([[True, False], [False, False], [True, True]])
    src = torch.tensor([[True, True], [False, True]])
    check(lambda x, i, s: x.index_add(0, i, s, alpha=alpha), x, torch.tensor([1, 2]), src)


# --------------------------------------------------------------- scatters


@pytest.mark.parametrize("dtype", NUM)
def test_scatter_family(dtype):
    x = make((3, 5), dtype)
    src = make((3, 5), dtype)
    idx = torch.tensor([[0, 1, 2], [4, 3, 2], [1, 1, 1]])
    uniq = torch.tensor([[0, 1, 2], [4, 3, 2], [1, 0, 3]])
    check(lambda x, i, s: x.scatter(1, i, s), x, uniq, src)
    check(lambda x, i: x.scatter(1, i, 7), x, uniq)
    check(lambda x, i, s: x.scatter_add(1, i, s), x, idx, src)
    if dtype != torch.bool:
        check(lambda x, i, s: x.scatter(1, i, s, reduce="add"), x, idx, src)



@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce(dtype, reduce):
    x = make((3, 5), dtype)
    src = make((3, 5), dtype)
    idx = torch.tensor([[0, 1, 2], [4, 3, 2], [1, 1, 1]])
    for include_self in [True, False]:
        check(lambda x, i, s: x.scatter_reduce(1, i, s, reduce, include_self=include_self), x, idx, src)


def test_scatter_add_grad_and_inplace():
    x = torch.randn(4, 3)
    idx = torch.tensor([[0, 1, 0], [3, 3, 3]])
    check_grad(lambda x, s: x.scatter_add(0, idx.to(x.device), s), x, torch.randn(2, 3))

    def inplace(x, s):
        y = x.clone()
        y.scatter_(0, torch.tensor([[1, 2, 0]], device=x.device), s)
        return y
    check(inplace, x, torch.randn(1, 3))


@pytest.mark.parametrize("dtype", NUM)
def test_index_add_copy_fill(dtype):
    x = make((5, 3), dtype)
    src = make((3, 3), dtype)
    idx = torch.tensor([4, 0, 4])
    check(lambda x, i, s: x.index_add(0, i, s), x, idx, src)
    if dtype.is_floating_point:
        check(lambda x, i, s: x.index_add(0, i, s, alpha=2), x, idx, src)
    check(lambda x, i, s: x.index_copy(0, i, s), x, torch.tensor([4, 0, 2]), src)
    check(lambda x, i: x.index_fill(1, i, 3), x, torch.tensor([2, 0]))
    check(lambda x, i: x.index_fill(-1, i, torch.tensor(1).to(x.device, x.dtype)), x, torch.tensor([1]))


def test_put_and_index_reduce():
    x = torch.randn(3, 4)
    check(lambda x, i, s: x.put(i, s), x, torch.tensor([0, -1, 5]), torch.tensor([1., 2., 3.]))
    check(lambda x, i, s: x.put(i, s, accumulate=True), x, torch.tensor([0, 0, 5]), torch.tensor([1., 2., 3.]))
    check(lambda x, i, s: x.index_reduce(0, i, s, "amax", include_self=False), x, torch.tensor([2, 0, 2]),
          torch.randn(3, 4))


# ------------------------------------------------------- advanced indexing


@pytest.mark.parametrize("dtype", ALL)
def test_advanced_index(dtype):
    x = make((4, 5, 6), dtype)
    i = torch.tensor([3, 0, -1])
    j = torch.tensor([[1], [3]])
    check(lambda x, i: x[i], x, i)
    check(lambda x, i: x[:, i], x, i)
    check(lambda x, i, j: x[i, j], x, i, j)            # broadcast [2, 3] + trailing dim
    check(lambda x, i, j: x[:, j, i], x, i, j)         # adjacent: stays in place
    check(lambda x, i, j: x[j, :, i], x, i, j)         # non-adjacent: goes first
    check(lambda x, i: x[..., i.to(torch.int32)], x, i)
    check(lambda x, i: x.transpose(0, 2)[i], x, torch.tensor([5, 1]))


def test_index_grad():
    x = torch.randn(4, 5)
    check_grad(lambda x: x[torch.tensor([0, 2, 0], device=x.device)], x)
    check_grad(lambda x: x[:, torch.tensor([[1, 4]], device=x.device)], x)


@pytest.mark.parametrize("dtype", NUM + [torch.bool])
def test_index_put(dtype):
    x = make((5, 4), dtype)
    v = make((3, 4), dtype)

    def put(x, i, v):
        y = x.clone()
        y[i] = v
        return y
    check(put, x, torch.tensor([4, 0, 2]), v)
    check(put, x, torch.tensor([1]), v[0])
    if dtype != torch.bool:
        check(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, torch.tensor([4, 0, 4]), v)

    def put2(x, i, j, v):
        y = x.clone()
        y[i, j] = v
        return y
    check(put2, x, torch.tensor([0, 3]), torch.tensor([-1, 1]), v[0, :2])


def test_index_put_accumulate_grad():
    x = torch.randn(5, 3)
    v = torch.randn(4, 3)
    idx = torch.tensor([0, 4, 0, 1])
    check_grad(lambda x, v: x.index_put((idx.to(x.device),), v, accumulate=True), x, v)


def test_view_write_patterns():
    # kv-cache update: kv[:, t] = k
    kv = torch.zeros(2, 8, 4)
    k = torch.randn(2, 4)

    def cache(kv, k):
        y = kv.clone()
        for t in (0, 5):
            y[:, t] = k * (t + 1)
        return y
    check(cache, kv, k)

    def mask_zero(x):
        y = x.clone()
        y[y > 0] = 0
        return y
    check(mask_zero, torch.randn(4, 5))


def test_mask_read_patterns():
    def mask_values(x):
        y = x.clone()
        m = y < 0
        y[m] = y[m] * 0 + torch.arange(int(m.sum()), dtype=y.dtype, device=y.device)
        return y
    x = torch.tensor([[1., -1., 2.], [-3., -4., 5.]])
    check(mask_values, x)

    def mask_rows(x):
        y = x.clone()
        y[torch.tensor([True, False, True], device=x.device)] += 1
        return y
    check(mask_rows, torch.randn(3, 2))


# ------------------------------------------------------------------- masks


@pytest.mark.parametrize("dtype", ALL)
def test_masked_fill_scatter(dtype):
    x = make((3, 4), dtype)
    m = torch.rand(3, 4) > 0.5
    check(lambda x, m: x.masked_fill(m, 1), x, m)
    check(lambda x, m: x.masked_fill(m[0], 0), x, m)                    # broadcast mask
    check(lambda x, m: x.masked_fill(m, torch.tensor(1).to(x.device, x.dtype)), x, m)
    check(lambda x, m, s: x.masked_scatter(m, s), x, m, make((12,), dtype))


def test_masked_fill_errors():
    x = tpu(torch.randn(3))
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.masked_fill_(tpu(torch.ones(3, dtype=torch.uint8)), 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_dynamic_shapes(dtype):
    x = make((3, 4), dtype) if dtype != torch.int64 else torch.randint(0, 3, (3, 4))
    m = torch.rand(3, 4) > 0.5
    check(lambda x: torch.nonzero(x), x)
    check(lambda x: torch.nonzero(x, as_tuple=True), x)
    check(lambda x, m: torch.masked_select(x, m), x, m)
    check(lambda x, m: torch.masked_select(x, m[1]), x, m)  # broadcast mask
    check(lambda x: torch.unique(x, return_inverse=True, return_counts=True), x)
    check(lambda x: torch.unique_consecutive(x, return_inverse=True, return_counts=True), x)
    check(lambda x: torch.nonzero(x[:0]), x)
    assert "tpu" in repr(x.to("tpu"))  # printing uses masked_select


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.bool])
def test_unique_over_a_dim(dtype):
    # few distinct values, so slices repeat: sorted lexicographically like the CPU kernel
    x = torch.randint(0, 2, (4, 5, 3)).to(dtype)
    x[2] = x[0]
    x[:, 4] = x[:, 1]
    for dim in (0, 1, -1):
        check(lambda x: torch.unique(x, dim=dim, return_inverse=True, return_counts=True), x)
        check(lambda x: torch.unique_consecutive(x, dim=dim, return_inverse=True, return_counts=True), x)
        check(lambda x: torch.unique(x, dim=dim), x)
        check(lambda x: torch.ops.aten.unique_dim_consecutive(x, dim, False, True), x)
    check(lambda x: torch.unique(x.transpose(0, 2), dim=1, return_counts=True), x)  # non-contiguous
    check(lambda x: torch.unique(x[:, :1, :1], dim=0, return_inverse=True), x)  # one column
    check(lambda x: torch.unique_consecutive(x[:, 1], dim=0, return_inverse=True, return_counts=True), x)


def test_unique_over_a_dim_edges():
    check(lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True), torch.empty(0, 3))
    check(lambda x: torch.unique(x, dim=1, return_inverse=True, return_counts=True), torch.empty(2, 0, 3))
    check(lambda x: torch.unique(x, dim=0, return_inverse=True, return_counts=True), torch.tensor([[2.0, 1.0]] * 3))
    # NaN slices never compare equal (CPU keeps each)
    check(lambda x: torch.unique(x, dim=0, return_counts=True), torch.tensor([[2.0, float("nan")]] * 2))
    with pytest.raises(RuntimeError, match="0 sized dimensions, and they aren't selected"):
        torch.unique(torch.empty(0, 3, device="tpu"), dim=1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        torch.unique(torch.zeros(2, 3, device="tpu"), dim=2)
    import torchtpu
    assert torchtpu._C.op_supported("unique_dim") and torchtpu._C.op_supported("unique_dim_consecutive")


def test_nonzero_static():
    x = torch.tensor([[0, 1], [2, 0], [3, 4]])
    check(lambda x: torch.nonzero_static(x, size=5), x)
    check(lambda x: torch.nonzero_static(x, size=2, fill_value=7), x)


# -------------------------------------------------------------- sort & co


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int32, torch.uint8])
def test_sort_argsort(dtype):
    x = make((4, 7), dtype) if dtype != torch.uint8 else torch.randperm(28).reshape(4, 7).to(dtype)
    check(lambda x: torch.sort(x, dim=1, stable=True), x)
    check(lambda x: torch.sort(x, dim=0, descending=True, stable=True), x)
    check(lambda x: torch.argsort(x, dim=-1, stable=True), x)


def test_sort_nan_and_noncontiguous():
    x = torch.tensor([[3., float("nan"), -1., 2.], [float("nan"), 0., float("inf"), -float("inf")]])
    check(lambda x: torch.sort(x, stable=True), x)
    check(lambda x: torch.sort(x, descending=True, stable=True), x)
    check(lambda x: torch.sort(x.t(), dim=0, stable=True), x)


def test_topk_kthvalue_median():
    x = torch.randperm(40).reshape(5, 8).float()
    check(lambda x: torch.topk(x, 3), x)
    check(lambda x: torch.topk(x, 2, dim=0, largest=False), x)
    check(lambda x: torch.kthvalue(x, 3, dim=1), x)
    check(lambda x: torch.kthvalue(x, 2, dim=0, keepdim=True), x)
    check(lambda x: torch.median(x), x)
    check(lambda x: torch.median(x, dim=1), x)
    y = torch.tensor([[1., float("nan"), 3.], [4., 2., 0.]])
    check(lambda y: torch.median(y, dim=1), y)
    check(lambda y: torch.nanmedian(y, dim=1), y)
    check(lambda y: torch.nanmedian(y), y)
    check_grad(lambda x: torch.topk(x, 2).values, x)


def test_searchsorted_bucketize_histc():
    s = torch.tensor([1., 3., 5., 7., 9.])
    v = torch.tensor([[3., 6., 9.], [0., 10., 5.]])
    check(lambda s, v: torch.searchsorted(s, v), s, v)
    check(lambda s, v: torch.searchsorted(s, v, right=True), s, v)
    check(lambda s, v: torch.searchsorted(s, v, side="right", out_int32=True), s, v)
    check(lambda s: torch.searchsorted(s, 4.0), s)
    s2 = torch.sort(torch.randn(2, 6)).values
    check(lambda s, v: torch.searchsorted(s, v), s2, torch.randn(2, 3))
    check(lambda v, s: torch.bucketize(v, s), v, s)
    check(lambda v, s: torch.bucketize(v, s, right=True), v, s)
    # A scalar is promoted with the sequence as a wrapped number: 2.5 among ints stays 2.5.
    si = torch.tensor([1, 2, 3, 2**40])
    for val in (2.5, 2, 2**40 - 1):
        check(lambda s: (torch.searchsorted(s, val), torch.searchsorted(s, val, right=True)), si)
        check(lambda s: (torch.bucketize(val, s), torch.bucketize(val, s, right=True)), si)
    x = torch.randn(100)
    check(lambda x: torch.histc(x, bins=7, min=-1, max=1), x)
    check(lambda x: torch.histc(x, bins=5), x)
