"""The usual training entry points with the model on tpu, each compared with the
same code on CPU:

* a plain PyTorch loop fed by ``torch.utils.data.DataLoader`` (map-style Dataset,
  shuffled by a seeded generator, 0 and 2 worker processes; pin_memory=True too);
* accelerate's ``Accelerator`` loop;
* transformers' ``Trainer`` (train + evaluate): standard user code, nothing
  tpu-specific; after ``import torchtpu`` the Trainer picks the tpu device itself,
  as it picks cuda (torchtpu/integrations.py, docs/integrations.md).
"""
import copy
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

import torchtpu


@pytest.fixture(autouse=True)
def _one_cpu_thread():
    """CPU references on one thread: on a small shared machine OpenMP's spinning
    threads make them slower, not faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---- a plain loop with torch.utils.data.DataLoader ----


class Points(Dataset):
    """100 labelled points (5 classes); items carry their index so the test can
    check that both runs saw the same batches in the same order."""

    def __init__(self, n=100, dim=12, classes=5):
        g = torch.Generator().manual_seed(7)
        self.x = torch.randn(n, dim, generator=g)
        self.y = (self.x @ torch.randn(dim, classes, generator=g)).argmax(1)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i], i


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 5))


def _loop(model, device, num_workers, epochs=4):
    loader = DataLoader(
        Points(), batch_size=16, shuffle=True, num_workers=num_workers, pin_memory=False,
        generator=torch.Generator().manual_seed(1234),
    )
    model = model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    losses, order = [], []
    for _ in range(epochs):
        for x, y, idx in loader:  # the last batch of each epoch has 4 items
            x, y = x.to(device), y.to(device)
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            order.append(idx.tolist())
    return losses, order, model


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_loop_matches_cpu(num_workers):
    base = _mlp()
    cpu_losses, cpu_order, cpu_model = _loop(copy.deepcopy(base), "cpu", 0)
    tpu_losses, tpu_order, tpu_model = _loop(copy.deepcopy(base), "tpu", num_workers)
    assert len(cpu_losses) == 4 * 7
    assert tpu_order == cpu_order  # same shuffling, whatever the worker count
    assert cpu_order[0] != cpu_order[7]  # and the epochs are reshuffled
    first, last = sum(cpu_losses[:7]) / 7, sum(cpu_losses[-7:]) / 7
    assert last < 0.5 * first, (first, last)  # the task is learnable
    # float32 with a different summation order (as tests/test_training.py).
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-4)
    for pc, pt in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert pt.device.type == "tpu"
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-4)


def test_dataloader_pin_memory_true():
    """pin_memory=True (the Trainer's default, common in cuda scripts) pins for
    the current accelerator, tpu: batches arrive pinned and intact (no warning)
    and move to tpu with non_blocking=True as in cuda scripts."""
    import warnings

    points = Points()
    batches = 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader = list(DataLoader(points, batch_size=16, pin_memory=True))
    for x, _y, idx in loader:
        assert x.is_pinned() and x.device.type == "cpu"
        xt = x.to("tpu", non_blocking=True)
        assert xt.device.type == "tpu"
        torch.testing.assert_close(xt.cpu(), points.x[idx], rtol=0, atol=0)
        batches += 1
    assert batches == 7


# ---- accelerate's Accelerator ----


def _accelerate_loop(model, cpu):
    """The loop from accelerate's quick tour; only cpu=True differs."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)  # two Accelerators in one process
    accelerator = Accelerator(cpu=cpu)
    loader = DataLoader(Points(), batch_size=16, shuffle=True, generator=torch.Generator().manual_seed(9))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-2)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    losses = []
    for _ in range(2):
        for x, y, _idx in loader:
            loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            accelerator.backward(loss)
            opt.step()
            losses.append(loss.item())
    return accelerator.device, losses, model  # (the state is shared: read it now)


def test_accelerator_picks_tpu_and_matches_cpu():
    base = _mlp()
    cpu_device, cpu_losses, cpu_model = _accelerate_loop(copy.deepcopy(base), cpu=True)
    tpu_device, tpu_losses, tpu_model = _accelerate_loop(copy.deepcopy(base), cpu=False)
    assert cpu_device.type == "cpu" and tpu_device.type == "tpu"
    assert len(tpu_losses) == 14
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-4)
    for pc, pt in zip(cpu_model.parameters(), tpu_model.parameters()):
        assert pt.device.type == "tpu"
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-4)


def test_accelerate_imported_before_torchtpu():
    """The hook also applies when accelerate was imported first."""
    code = ("import accelerate.state\nimport torchtpu\n"
            "from accelerate import PartialState\nprint(PartialState().device.type)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "tpu", out.stdout


# ---- transformers' Trainer ----


class Reviews(Dataset):
    """16 token sequences with binary labels, as a tokenised dataset returns them."""

    def __init__(self):
        g = torch.Generator().manual_seed(3)
        self.ids = torch.randint(5, 100, (16, 12), generator=g)
        self.labels = (self.ids[:, :6].sum(1) > self.ids[:, 6:].sum(1)).long()

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "attention_mask": torch.ones(12, dtype=torch.long),
                "labels": self.labels[i]}


def _tiny_bert():
    from transformers import BertConfig, BertForSequenceClassification

    # Dropout off: its masks come from different generators on CPU and tpu.
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32, num_labels=2,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    return BertForSequenceClassification(config)


def _train_with_trainer(model, output_dir, **extra):
    """Standard Trainer code; nothing in it names tpu."""
    from transformers import Trainer, TrainingArguments

    args = TrainingArguments(
        output_dir=str(output_dir), max_steps=5, per_device_train_batch_size=4, learning_rate=1e-3,
        logging_steps=1, save_strategy="no", report_to="none", seed=0, disable_tqdm=True,
        **{"optim": "adamw_torch", **extra},  # the default, "adamw_torch_fused": see below
    )
    trainer = Trainer(model=model, args=args, train_dataset=Reviews())
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    evaluation = trainer.evaluate(Reviews())
    return trainer, [h["loss"] for h in logs], [h["grad_norm"] for h in logs], evaluation["eval_loss"]


def test_trainer_puts_the_model_on_tpu_and_matches_cpu(tmp_path):
    base = _tiny_bert()
    cpu_trainer, cpu_losses, cpu_norms, cpu_eval = _train_with_trainer(
        copy.deepcopy(base), tmp_path / "cpu", use_cpu=True)
    before = torchtpu.metrics()
    tpu_trainer, tpu_losses, tpu_norms, tpu_eval = _train_with_trainer(copy.deepcopy(base), tmp_path / "tpu")
    after = torchtpu.metrics()

    assert cpu_trainer.args.device.type == "cpu"
    # The Trainer chose tpu by itself, for the model and for the batches.
    assert tpu_trainer.args.device.type == "tpu"
    assert tpu_trainer.accelerator.device.type == "tpu"
    assert all(p.device.type == "tpu" for p in tpu_trainer.model.parameters())
    assert after["executions"] > before["executions"] and after["fallbacks"] == before["fallbacks"]

    assert len(cpu_losses) == len(tpu_losses) == 5
    # float32 with a different summation order (as tests/test_training.py).
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(tpu_norms), torch.tensor(cpu_norms), rtol=1e-4, atol=1e-5)
    assert tpu_eval == pytest.approx(cpu_eval, rel=1e-4, abs=1e-5)
    moved = 0.0
    for (name, p0), pc, pt in zip(base.named_parameters(), cpu_trainer.model.parameters(),
                                  tpu_trainer.model.parameters()):
        moved = max(moved, (pc.detach() - p0.detach()).abs().max().item())
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-4, msg=name)
    assert moved > 1e-3  # 5 AdamW steps at lr 1e-3 really changed the weights


def test_trainer_default_optimizer_fused_adamw(tmp_path):
    """The Trainer's default optimizer (torch >= 2.8) is AdamW(fused=True): its steps
    run aten::_fused_adamw_ on tpu (no CPU fallback) and match the CPU Trainer's."""
    from transformers import TrainingArguments

    assert TrainingArguments(output_dir=str(tmp_path), report_to="none").optim == "adamw_torch_fused"
    base = _tiny_bert()
    default = dict(optim=TrainingArguments(output_dir=str(tmp_path), report_to="none").optim)
    cpu_trainer, cpu_losses, cpu_norms, _ = _train_with_trainer(
        copy.deepcopy(base), tmp_path / "cpu", use_cpu=True, **default)
    before = torchtpu.metrics()
    tpu_trainer, tpu_losses, tpu_norms, _ = _train_with_trainer(copy.deepcopy(base), tmp_path / "tpu", **default)
    after = torchtpu.metrics()

    assert tpu_trainer.optimizer.defaults["fused"] is True
    assert after["fallbacks"] == before["fallbacks"]
    # float32 with a different summation order (as the test above).
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(tpu_norms), torch.tensor(cpu_norms), rtol=1e-4, atol=1e-5)
    moved = 0.0
    for (name, p0), pc, pt in zip(base.named_parameters(), cpu_trainer.model.parameters(),
                                  tpu_trainer.model.parameters()):
        moved = max(moved, (pc.detach() - p0.detach()).abs().max().item())
        torch.testing.assert_close(pt.detach().cpu(), pc.detach(), rtol=1e-4, atol=1e-4, msg=name)
    assert moved > 1e-3  # 5 fused AdamW steps at lr 1e-3 really changed the weights
