"""torch.compile(backend="tpu", dynamic=True): symbolic sizes.

XLA programs have static shapes. A compiled graph with symbolic sizes gets one
program per distinct set of sizes (at most TORCHTPU_GRAPH_PROGRAMS per graph,
then eager ops with one warning); a symbolic int used only in arithmetic stays
a runtime operand. A size along which no op of the graph mixes rows is padded
to a bucket (the next power of two) instead, and the results are narrowed back.
Every result is compared with PyTorch eager on the CPU (float32: rtol/atol 1e-5
for forward values, 1e-4 for gradients), and torchtpu.metrics() says how many
programs were built and how many graphs ran as eager ops instead;
torchtpu.compile.stats()["padded_runs"] how many calls ran padded.
"""
import copy
import warnings

import pytest
import torch
import torch.nn as nn

import torchtpu
import torchtpu.compile as tc

_KEYS = ("graph_compiles", "graph_recompiles", "graph_fallbacks", "graph_runs")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _counts():
    m = torchtpu.metrics()
    return {k: m[k] for k in _KEYS}


def _delta(before):
    now = _counts()
    return {k: now[k] - before[k] for k in _KEYS}


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _run(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, [str(w.message) for w in caught if "torchtpu" in str(w.message)]


def _padded_runs():
    return tc.stats()["padded_runs"]


def test_one_program_per_batch_size_reused_without_recompiles(monkeypatch):
    monkeypatch.setenv("TORCHTPU_PAD_BUCKETS", "0")
    m = _mlp()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0 = _counts()
    for b in (3, 5, 7, 3, 5):
        x = torch.randn(b, 8)
        y, warned = _run(f, x.to("tpu"))
        assert not warned, warned
        torch.testing.assert_close(y.cpu(), m(x), rtol=1e-5, atol=1e-5)
    d = _delta(c0)
    # Dynamo traced once (symbolic batch); three sizes → three programs, the
    # repeats of 3 and 5 reuse theirs.
    assert d["graph_compiles"] == 3 and d["graph_recompiles"] == 2, d
    assert d["graph_fallbacks"] == 0 and d["graph_runs"] == 5, d


def test_symbolic_int_used_as_a_size_fixes_it_per_program():
    """x.view(b * s, d) needs b * s as a static size: each (b, s) gets its own program."""
    def f(x, w):
        b, s, d = x.shape
        y = (x.reshape(b * s, d) @ w).relu()
        return y.reshape(b, s, -1).sum(dim=1)

    w = torch.randn(6, 5)
    g = torch.compile(f, backend="tpu", dynamic=True)
    c0 = _counts()
    for shape in ((2, 3, 6), (4, 5, 6), (2, 3, 6)):
        x = torch.randn(*shape)
        out, warned = _run(g, x.to("tpu"), w.to("tpu"))
        assert not warned, warned
        torch.testing.assert_close(out.cpu(), f(x, w), rtol=1e-5, atol=1e-5)
    d = _delta(c0)
    assert d["graph_compiles"] == 2 and d["graph_fallbacks"] == 0, d


def test_training_with_dynamic_batch_matches_cpu():
    m = _mlp()
    mt = copy.deepcopy(m).to("tpu")
    f = torch.compile(mt, backend="tpu", dynamic=True)
    for b in (4, 6):
        x = torch.randn(b, 8)
        f(x.to("tpu")).square().mean().backward()
        m(x).square().mean().backward()
    for (n, p), q in zip(mt.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=n)


def test_program_cap_warns_once_then_runs_eager(monkeypatch):
    monkeypatch.setenv("TORCHTPU_GRAPH_PROGRAMS", "2")
    monkeypatch.setenv("TORCHTPU_PAD_BUCKETS", "0")
    m = _mlp()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0 = _counts()
    seen = []
    for b in (2, 3, 4, 5, 2):
        x = torch.randn(b, 8)
        y, warned = _run(f, x.to("tpu"))
        seen.append(warned)
        torch.testing.assert_close(y.cpu(), m(x), rtol=1e-5, atol=1e-5)
    assert not seen[0] and not seen[1] and not seen[4], seen
    assert len(seen[2]) == 1 and "TORCHTPU_GRAPH_PROGRAMS" in seen[2][0], seen
    assert not seen[3], seen  # one warning per graph
    d = _delta(c0)
    assert d["graph_compiles"] == 2 and d["graph_fallbacks"] == 2, d


def test_program_cap_must_be_a_positive_integer(monkeypatch):
    monkeypatch.setenv("TORCHTPU_GRAPH_PROGRAMS", "zero")
    f = torch.compile(lambda x: x * 2, backend="tpu", dynamic=True)
    with pytest.raises(Exception, match="TORCHTPU_GRAPH_PROGRAMS must be a positive integer"):
        f(torch.randn(3).to("tpu"))


class _Block(nn.Module):
    """Embedding, layer norm, causal attention and an MLP: no op mixes the batch rows."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.emb, self.ln, self.heads = nn.Embedding(50, d), nn.LayerNorm(d), heads
        self.qkv, self.proj, self.head = nn.Linear(d, 3 * d), nn.Linear(d, d), nn.Linear(d, 5)
        self.mlp = nn.Sequential(nn.Linear(d, 64), nn.GELU(), nn.Linear(64, d))

    def forward(self, idx):
        x = self.emb(idx)
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in self.qkv(self.ln(x)).split(d, dim=-1))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.mlp(self.ln(x))
        return self.head(x[:, -1]).softmax(-1)


def test_batch_sizes_pad_to_power_of_two_buckets():
    torch.manual_seed(0)
    m = _Block().eval()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0, p0 = _counts(), _padded_runs()
    with torch.no_grad():
        for b in (3, 5, 6, 7, 8, 3):
            idx = torch.randint(0, 50, (b, 9))
            y, warned = _run(f, idx.to("tpu"))
            assert not warned, warned
            assert y.shape == (b, 5)
            torch.testing.assert_close(y.cpu(), m(idx), rtol=1e-5, atol=1e-5)
    d = _delta(c0)
    # 3 → 4; 5, 6, 7 → 8; 8 is a bucket already: two programs for six calls
    assert d["graph_compiles"] == 2 and d["graph_fallbacks"] == 0 and d["graph_runs"] == 6, d
    assert _padded_runs() - p0 == 5


def test_image_model_batches_pad():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3)).eval()
    m[1].running_mean.uniform_(-1, 1)
    m[1].running_var.uniform_(0.5, 2)
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu", dynamic=True)
    c0, p0 = _counts(), _padded_runs()
    with torch.no_grad():
        for b in (5, 6, 12):  # not 3: Dynamo gives a batch equal to the 3 channels their static size
            x = torch.randn(b, 3, 8, 8)
            torch.testing.assert_close(f(x.to("tpu")).cpu(), m(x), rtol=1e-5, atol=1e-5)
    assert _delta(c0)["graph_compiles"] == 2 and _padded_runs() - p0 == 3  # buckets 8 and 16


@pytest.mark.parametrize("fn", [
    lambda x: torch.softmax(x, 0),
    lambda x: x.t() @ x,
    lambda x: x - x.mean(0),
    lambda x: x.cumsum(0),
    lambda x: torch.cat([x, x * 2]),
    lambda x: x.flip(0),
    lambda x: x[1:],
], ids=["softmax", "contract", "mean", "cumsum", "cat", "flip", "slice"])
def test_rows_mixed_along_a_size_keep_it_exact(fn):
    """Padding would change these results: each size gets its own program."""
    g = torch.compile(fn, backend="tpu", dynamic=True)
    c0, p0 = _counts(), _padded_runs()
    for b in (3, 5):
        x = torch.randn(b, 4)
        torch.testing.assert_close(g(x.to("tpu")).cpu(), fn(x), rtol=1e-5, atol=1e-5)
    assert _padded_runs() == p0
    assert _delta(c0)["graph_compiles"] == 2


def test_bool_and_index_inputs_pad():
    def f(x, mask, idx):
        return x.masked_fill(mask, 0.0) * 2 + idx.unsqueeze(-1).float()

    g = torch.compile(f, backend="tpu", dynamic=True)
    p0 = _padded_runs()
    for b in (3, 5):
        args = (torch.randn(b, 4), torch.rand(b, 4) > 0.5, torch.randint(0, 9, (b,)))
        torch.testing.assert_close(g(*(a.to("tpu") for a in args)).cpu(), f(*args))
    assert _padded_runs() - p0 == 2


def test_random_ops_keep_sizes_exact():
    """A padded program would draw other numbers than the exact one."""
    g = torch.compile(lambda x: nn.functional.dropout(x, 0.5, training=True), backend="tpu", dynamic=True)
    p0 = _padded_runs()
    for b in (3, 5):
        y = g(torch.ones(b, 4).to("tpu")).cpu()
        assert y.shape == (b, 4) and set(y.unique().tolist()) <= {0.0, 2.0}
    assert _padded_runs() == p0


def test_training_forward_pads_and_gradients_match():
    """The forward graph pads the batch; the backward (whose weight gradients
    contract the batch) runs each size exactly, on the narrowed activations."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 4))
    mt = copy.deepcopy(m).to("tpu")
    f = torch.compile(mt, backend="tpu", dynamic=True)
    p0 = _padded_runs()
    for b in (3, 6):
        x = torch.randn(b, 8)
        f(x.to("tpu")).square().mean().backward()
        m(x).square().mean().backward()
    assert _padded_runs() - p0 == 2
    for (n, p), q in zip(mt.named_parameters(), m.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-4, atol=1e-4, msg=n)


def test_pad_buckets_switch_must_be_0_or_1(monkeypatch):
    monkeypatch.setenv("TORCHTPU_PAD_BUCKETS", "yes")
    f = torch.compile(lambda x: x * 2, backend="tpu", dynamic=True)
    with pytest.raises(Exception, match="TORCHTPU_PAD_BUCKETS must be 0 or 1"):
        f(torch.randn(3).to("tpu"))


def test_row_index_gathers_pad_and_other_indices_keep_exact():
    """x[arange(b)[:, None], j] reads row i of x for row i: padded. x[arange(b - 1, -1, -1)]
    reads other rows: exact."""
    def own_rows(x, j):
        return x[torch.arange(x.shape[0], device=x.device)[:, None], j] * 3

    def reversed_rows(x):
        return x[torch.arange(x.shape[0] - 1, -1, -1, device=x.device)] * 3

    for fn, pads in ((own_rows, True), (reversed_rows, False)):
        g = torch.compile(fn, backend="tpu", dynamic=True)
        p0 = _padded_runs()
        for b in (3, 5):
            # 8 columns: a bucket size already, so only the rows can pad
            args = (torch.randn(b, 8), torch.randint(0, 8, (b, 8)))[: 2 if fn is own_rows else 1]
            torch.testing.assert_close(g(*(a.to("tpu") for a in args)).cpu(), fn(*args))
        assert (_padded_runs() - p0 == 2) == pads, fn.__name__


@pytest.mark.parametrize("family", ["llama", "gpt2", "bert"])
def test_hf_model_batches_pad(family):
    """Hugging Face models (tiny configs) with a dynamic batch: one program per
    bucket, outputs equal to CPU (Llama's mask reads rows by arange(batch); BERT
    reads its token type ids from a buffer expanded to the batch)."""
    import transformers as hf
    torch.manual_seed(0)
    if family == "llama":
        cfg = hf.LlamaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, intermediate_size=64)
        m = hf.LlamaModel(cfg).eval()
    elif family == "bert":  # token type ids: a buffer expanded to the batch, then read as indices
        m = hf.BertModel(hf.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                       intermediate_size=64)).eval()
    else:
        m = hf.GPT2Model(hf.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=4,
                                       bos_token_id=0, eos_token_id=0)).eval()
    f = torch.compile(copy.deepcopy(m).to("tpu"), backend="tpu")
    c0, p0 = _counts(), _padded_runs()
    with torch.no_grad():
        for b in (2, 5, 6, 7):
            ids = torch.randint(0, 100, (b, 12))
            ids_tpu = ids.to("tpu")
            if b != 2:
                torch._dynamo.mark_dynamic(ids_tpu, 0)
            kw = {} if family == "bert" else {"use_cache": False}
            out = f(input_ids=ids_tpu, **kw).last_hidden_state
            torch.testing.assert_close(out.cpu(), m(input_ids=ids, **kw).last_hidden_state, rtol=1e-5, atol=1e-5)
    # batch 2: a static graph; 5, 6, 7: one dynamic graph, all in the bucket of 8
    assert _delta(c0)["graph_compiles"] == 2 and _padded_runs() - p0 == 3


def test_a_bucket_the_graph_cannot_take_falls_back_to_exact_sizes():
    """A 6-row table sliced by the batch: the bucket of 5 (8) would read past it, so the
    graph goes back to exact sizes, with the same results."""
    table = torch.randn(6, 4)

    def f(x, t):
        return x * t[: x.shape[0]]

    g = torch.compile(f, backend="tpu", dynamic=True)
    t = table.to("tpu")
    p0 = _padded_runs()
    for b in (3, 5, 6):
        x = torch.randn(b, 4)
        torch.testing.assert_close(g(x.to("tpu"), t).cpu(), f(x, table))
    assert _padded_runs() - p0 == 1  # 3 → 4 only


def test_indices_computed_on_padded_rows_keep_sizes_exact():
    """table[10 - idx]: padded rows would read index 10 of a 6-row table and raise; the
    size stays exact. table[idx] pads (a padded input's rows hold index 0)."""
    table = torch.randn(6, 4)
    for fn, pads in ((lambda idx, t: t[10 - idx] * 2, False), (lambda idx, t: t[idx] * 2, True)):
        g = torch.compile(fn, backend="tpu", dynamic=True)
        p0 = _padded_runs()
        for b in (3, 5):
            idx = torch.full((b,), 5)
            torch.testing.assert_close(g(idx.to("tpu"), table.to("tpu")).cpu(), fn(idx, table))
        assert (_padded_runs() - p0 == 2) == pads


def test_outputs_that_view_another_output_share_its_storage():
    """As in eager (and Inductor): a write into y shows in the views returned with it,
    with or without padding, and their strides are eager's."""
    def f(x):
        y = x * 2
        return y, y.view(x.shape[0], 2, 2), y.t(), y[:, 1]

    for dynamic in (False, True):
        g = torch.compile(f, backend="tpu", dynamic=dynamic)
        for b in (3, 5):
            x = torch.randn(b, 4)
            outs, refs = g(x.to("tpu")), f(x)
            for o, r in zip(outs, refs):
                assert o.shape == r.shape and o.stride() == r.stride(), (dynamic, b)
            outs[0].add_(1)
            refs[0].add_(1)
            for o, r in zip(outs, refs):
                torch.testing.assert_close(o.cpu(), r)


def test_buckets_stop_at_the_bound_dynamo_knows():
    """torch._check(b <= 6): batch 5 pads to 6, not 8."""
    def f(x):
        torch._check(x.shape[0] <= 6)
        return x * 2

    g = torch.compile(f, backend="tpu", dynamic=True)
    c0, p0 = _counts(), _padded_runs()
    for b in (3, 5, 6):
        x = torch.randn(b, 4)
        torch.testing.assert_close(g(x.to("tpu")).cpu(), f(x))
    assert _padded_runs() - p0 == 2  # 3 → 4, 5 → 6; 6 is exact
    assert _delta(c0)["graph_compiles"] == 2  # the programs for 4 and 6
