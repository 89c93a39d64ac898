"""The torch.cuda-shaped surface beyond memory and streams, checked as torch.cuda's
behaves: torch.save/torch.load of tpu modules and optimizer state (with and without
map_location), pinned memory and non_blocking copies in both directions,
DataLoader(pin_memory_device="tpu"), torch.accelerator's answers."""
import copy
import io

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchtpu

from tpu_testing import assert_same


def _trained():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    x = torch.randn(5, 6).to("tpu")
    for _ in range(2):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    return model, opt, x


def _round_trip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False, **load_kwargs)


def test_save_load_module_and_optimizer_state():
    model, opt, x = _trained()
    # A whole module (pickled) and the optimizer state, back on tpu.
    m2 = _round_trip(model)
    assert all(p.device.type == "tpu" for p in m2.parameters())
    assert_same(m2(x), model(x).detach().cpu())
    st = _round_trip(opt.state_dict())
    for k, v in opt.state_dict()["state"][0].items():
        if torch.is_tensor(v):
            assert st["state"][0][k].device == v.device
            assert torch.equal(st["state"][0][k].cpu(), v.cpu())
    # map_location="cpu": a CPU copy that trains on exactly as the tpu one.
    cpu_sd = _round_trip(model.state_dict(), map_location="cpu")
    cpu_opt_sd = _round_trip(opt.state_dict(), map_location="cpu")
    assert all(v.device.type == "cpu" for v in cpu_sd.values())
    cpu_model = copy.deepcopy(model).cpu()
    cpu_model.load_state_dict(cpu_sd)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    cpu_opt.load_state_dict(cpu_opt_sd)
    assert cpu_opt.state_dict()["state"][0]["exp_avg"].device.type == "cpu"
    # A checkpoint saved on CPU loads onto tpu with map_location.
    back = _round_trip(cpu_sd, map_location="tpu")
    assert all(v.device == torch.device("tpu", 0) for v in back.values())
    back = _round_trip(cpu_sd, map_location=lambda s, loc: s.tpu())  # as `s.cuda()` in CUDA scripts
    assert all(v.device.type == "tpu" for v in back.values())
    # Loading the tpu optimizer state into a fresh tpu optimizer continues training alike.
    model2 = copy.deepcopy(model)
    opt2 = torch.optim.AdamW(model2.parameters(), lr=1e-2)
    opt2.load_state_dict(_round_trip(opt.state_dict()))
    for o, m in ((opt, model), (opt2, model2)):
        o.zero_grad()
        m(x).square().mean().backward()
        o.step()
    for p, q in zip(model.parameters(), model2.parameters()):
        if torchtpu.get_eager_mode() == "fused":
            # model2's parameters were clones sharing model's buffers: with
            # donation (TORCHTPU_FUSED_DONATE) only its step can donate them, and programs that
            # differ in aliasing may give results a last bit apart (docs/eager-modes.md).
            assert_same(q, p.detach().cpu())
        else:
            assert torch.equal(p.detach().cpu(), q.detach().cpu())


def test_pinned_and_non_blocking_copies():
    src = torch.randn(64, 33)
    pinned = src.pin_memory()
    assert pinned.is_pinned() and not src.is_pinned()
    assert torch.equal(pinned, src)
    dev = pinned.to("tpu", non_blocking=True)
    assert torch.equal(dev.cpu(), src)
    # device -> host non_blocking: valid once the device is synchronized, as on CUDA.
    out = (dev * 2).to("cpu", non_blocking=True)
    torch.tpu.synchronize()
    assert torch.equal(out, src * 2)
    empty = torch.empty(8, pin_memory=True)
    assert empty.is_pinned()


# PyTorch 2.13 deprecates pin_memory_device (it pins for the current accelerator,
# which is tpu) and says so; the argument must still work as in CUDA scripts.
@pytest.mark.filterwarnings("ignore:pin_memory_device is deprecated")
def test_dataloader_pins_for_tpu():
    data = TensorDataset(torch.arange(40.0).reshape(20, 2), torch.arange(20))
    loader = DataLoader(data, batch_size=8, pin_memory=True, pin_memory_device="tpu")
    seen = []
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        xt = xb.to("tpu", non_blocking=True)
        seen.append(xt.cpu())
    assert torch.equal(torch.cat(seen), data.tensors[0])


def test_accelerator_answers_tpu():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("tpu")
    assert torch.accelerator.device_count() == torch.tpu.device_count() >= 1
    assert torch.accelerator.current_device_index() == torch.tpu.current_device()
    x = torch.ones(3, device="tpu") * 2
    torch.accelerator.synchronize()
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated() > 0
    assert torch.equal(x.cpu(), torch.full((3,), 2.0))


def test_bf16_support_is_real():
    # As torch.cuda.is_bf16_supported: True only if bf16 tensors compute on the device.
    assert torch.tpu.is_bf16_supported()
    a = torch.randn(16, 16)
    got = (a.to("tpu", torch.bfloat16) @ a.to("tpu", torch.bfloat16)).float().cpu()
    want = (a.bfloat16() @ a.bfloat16()).float()
    torch.testing.assert_close(got, want, rtol=1.6e-2, atol=1e-2)
