"""Bad input raises a Python exception naming the op and the cause; the process never aborts."""
import pytest
import torch


def test_shape_mismatch():
    a = torch.ones(2, 3, device="tpu")
    b = torch.ones(4, device="tpu")
    with pytest.raises(RuntimeError, match="size of tensor"):
        (a + b).cpu()
    with pytest.raises(RuntimeError, match="cannot be multiplied"):
        (a @ torch.ones(4, 2, device="tpu")).cpu()


def test_two_devices():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(3, device="tpu") + torch.ones(3)


def test_out_of_range_python_index():
    x = torch.ones(3, device="tpu")
    with pytest.raises(IndexError):
        x[5]
    with pytest.raises(IndexError):
        x.sum(dim=3)


def test_op_without_lowering_names_the_op():
    # sparse layouts have no lowerings
    with pytest.raises(NotImplementedError, match=r"aten::_to_sparse"):
        torch.ones(3, 3, device="tpu").to_sparse()


def test_wrong_dtype():
    # the CPU's messages (a bare RuntimeError would also accept a missing lowering's NotImplementedError)
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        torch.ones(3, device="tpu").add_(torch.ones(3, device="tpu"), alpha=1).long().add_(0.5)
    with pytest.raises(RuntimeError, match="expected m1 and m2 to have the same dtype"):
        torch.mm(torch.ones(2, 2, device="tpu"), torch.ones(2, 2, device="tpu", dtype=torch.bfloat16))


def test_process_survives_errors():
    for _ in range(3):
        with pytest.raises(RuntimeError, match="must match the size of tensor b"):
            torch.ones(2, 3, device="tpu") + torch.ones(4, device="tpu")
    assert (torch.ones(2, device="tpu") + 1).sum().item() == 4.0


def test_out_of_memory_raises_and_the_device_keeps_working():
    """A 4 TiB tensor does not fit: torch.OutOfMemoryError (also torch.tpu's, as
    torch.cuda.OutOfMemoryError), naming the op; later work is unaffected."""
    with pytest.raises(torch.tpu.OutOfMemoryError, match=r"out of tpu memory"):
        big = torch.ones(2 ** 40, device="tpu")  # held: fused mode skips dead work
        torch.tpu.synchronize()
        del big
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError
    x = torch.arange(6.0, device="tpu")
    torch.testing.assert_close((x * 2).cpu(), torch.arange(6.0) * 2)


def test_allocation_larger_than_the_device_raises_at_once():
    """As CUDA raises at allocation: a storage larger than the whole device raises
    at torch.empty, not at its first write, and names the request and the total.
    A large one that fits is still made lazily (no device memory until written)."""
    total = torch.tpu.mem_get_info()[1]
    n = total // 4 + 1  # float32 elements: one more than the device holds
    with pytest.raises(torch.tpu.OutOfMemoryError, match=r"tried to allocate .* \(%d bytes\); tpu:0 has" % (4 * n)):
        torch.empty(n, device="tpu")
    before = torch.tpu.memory_allocated()
    big = torch.empty(2 ** 28, device="tpu")  # 1 GiB: checked, fits
    assert big.numel() == 2 ** 28 and torch.tpu.memory_allocated() == before
    del big
    x = torch.arange(6.0, device="tpu")
    torch.testing.assert_close((x * 2).cpu(), torch.arange(6.0) * 2)


def _overlap_cases():
    def add_(x):  # an unboxed kernel
        x[1:] += x[:-1]

    def copy_(x):  # the binding's copy
        x[1:].copy_(x[:-1])

    def out(x):  # the boxed fallback, out=
        torch.mul(x[:-1], 2, out=x[1:])

    def addcmul_(x):  # the boxed fallback, in place
        x[1:].addcmul_(x[:-1], x[1:])

    def full_overlap(x):  # the same memory, read then written: allowed
        x.add_(x)
        torch.mul(x, 2, out=x)
        x.addcmul_(x, x)

    return {"add_": add_, "copy_": copy_, "out": out, "addcmul_": addcmul_, "full_overlap": full_overlap}


@pytest.mark.parametrize("name", ["add_", "copy_", "out", "addcmul_", "full_overlap"])
def test_partial_overlap_of_input_and_output_as_cpu(name):
    """x[1:] += x[:-1]: CPU refuses to write a tensor that shares part of its memory
    with an input; tpu raises the same error rather than give a result CPU never does."""
    fn = _overlap_cases()[name]
    x = torch.arange(6.0)
    y = x.to("tpu")
    try:
        fn(x)
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as info:
            fn(y)
        assert str(info.value).split("\n")[0] == str(e).split("\n")[0]
        assert "refer to a single memory location" in str(e)
        assert y.cpu().tolist() == list(range(6))  # nothing written
    else:
        fn(y)
        assert y.cpu().tolist() == x.tolist()
