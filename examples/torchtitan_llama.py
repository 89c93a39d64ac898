"""TorchTitan on tpu: its Llama debug model trained with FSDP2, then with tensor
parallelism (2 processes each), then with both on a 2 x 2 mesh (4 processes), for 20
steps each, against the same runs on CPU with gloo.

`make test-titan` runs it (TorchTitan in its own venv, .venv-titan, which sees .venv's
torch and torchtpu). Steps:

1. Local assets in a temporary directory: a byte-level BPE tokenizer (2,000 tokens, the
   debug model's vocabulary is 2,048) and a small text dataset as `tests/assets/c4_test`,
   the paths TorchTitan's debug config reads (its wheel ships neither).
2. A seed checkpoint (TorchTitan's `--checkpoint.create-seed-checkpoint`, one CPU process),
   so every run starts from the same weights: tpu and CPU random streams differ.
3. For each layout (FSDP: `data-parallel-shard-degree 2`; TP: `tensor-parallel-degree 2`;
   FSDP x TP: both, 4 processes; `--layouts a,b` picks some), `torchrun` of
   `torchtitan.train` on tpu, then on CPU/gloo, both
   loading the seed; the per-step losses must agree within LOSS_ATOL. A failed run or a
   mismatch exits 1.

The model config is `llama3_debugmodel_varlen_attn`: TorchTitan 0.3.0's language models
take flex or varlen attention only; varlen (aten::_flash_attention_forward/backward) has
a tpu lowering. `--parallelism.spmd-backend partial_dtensor`: the default (`spmd_types`)
fails with torch 2.13 on CPU too ("all parameters must be DTensors on the full SPMD mesh").

What the CPU reference needs that TorchTitan 0.3.0 lacks on torch 2.13 CPU (worker `cpu`
below; none of it touches the tpu run): the device type forced to cpu, torch.cpu stand-ins
for the memory-statistics calls, FSDP2 told to divide around a SUM (gloo has no
PREMUL_SUM; torchtpu's backend has it), a dense varlen attention on CPU (PyTorch has no CPU
kernel), and no timeout change after step 1. Both workers supply
`torch.distributed.set_timeout`, which TorchTitan 0.3.0 calls and torch 2.13 does not have
(a no-op: the runs keep their initial timeout).
"""
import json
import os
import random
import re
import subprocess
import sys
import tempfile

STEPS = 20
LOSS_ATOL = 1e-3  # float32, 20 AdamW steps; measured differences were <= 3e-4
# layout -> (processes, TorchTitan flags)
LAYOUTS = {
    "fsdp": (2, ["--parallelism.data-parallel-shard-degree", "2"]),
    "tp": (2, ["--parallelism.tensor-parallel-degree", "2", "--parallelism.data-parallel-shard-degree", "1"]),
    "fsdp_tp": (4, ["--parallelism.data-parallel-shard-degree", "2", "--parallelism.tensor-parallel-degree", "2"]),
}
# Pipeline parallel is not here: TorchTitan 0.3.0 calls the schedule's step with
# microbatch lists (arg_mbs=...), which torch 2.13's schedules do not take; its
# 2-process PP run fails the same way on CPU/gloo ("Expecting 2 arg_mbs but got 1").
ARGS = ["--module", "llama3", "--config", "llama3_debugmodel_varlen_attn", "--training.seq-len", "128",
        "--training.local-batch-size", "2", "--validator.no-enable", "--parallelism.spmd-backend",
        "partial_dtensor", "--comm.init-timeout-seconds", "300", "--debug.seed", "0"]


def make_assets(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    tok_dir, data_dir = os.path.join(root, "tests/assets/tokenizer"), os.path.join(root, "tests/assets/c4_test")
    os.makedirs(tok_dir), os.makedirs(data_dir)
    rng = random.Random(0)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(600)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(200, 600))) for _ in range(400)]
    with open(os.path.join(data_dir, "train.json"), "w") as f:
        f.writelines(json.dumps({"text": t}) + "\n" for t in texts)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<|begin_of_text|>", "<|end_of_text|>"]
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=2000, special_tokens=special, show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(os.path.join(tok_dir, "tokenizer.json"))
    with open(os.path.join(tok_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": special[0], "eos_token": special[1]}, f)


# ---- the CPU reference's stand-ins (worker "cpu") ----

def _visible(cu_q, cu_k, tq, tk, causal, left, right):
    import torch
    def rows(cu, n):
        i = torch.arange(n)
        seq = (i[:, None] >= cu[None, 1:]).sum(1)
        return seq, i - cu[seq], cu[seq + 1] - cu[seq]
    sq, pq, lq = rows(cu_q.long(), tq)
    sk, pk, lk = rows(cu_k.long(), tk)
    d = pk[None, :] - (pq[:, None] + lk[None, :] - lq[:, None])
    m = sq[:, None] == sk[None, :]
    right = 0 if causal else right
    if left is not None and left >= 0:
        m &= d >= -left
    if right is not None and right >= 0:
        m &= d <= right
    return m


def _varlen_forward(q, k, v, cu_q, cu_k, max_q, max_k, dropout_p, causal, debug, *, scale=None,
                    window_size_left=None, window_size_right=None, **unused):
    import torch
    g = q.shape[1] // k.shape[1]
    s = torch.einsum("qhd,khd->hqk", q.float(), k.repeat_interleave(g, 1).float()) * (scale or q.shape[-1] ** -0.5)
    s = s.masked_fill(~_visible(cu_q, cu_k, q.shape[0], k.shape[0], causal, window_size_left, window_size_right),
                      float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None]).nan_to_num(0.0)
    out = torch.einsum("hqk,khd->qhd", p, v.repeat_interleave(g, 1).float()).to(q.dtype)
    empty = torch.empty(0)
    return out, lse, torch.zeros(2, dtype=torch.uint64), empty, empty


def _varlen_backward(grad, q, k, v, out, lse, cu_q, cu_k, max_q, max_k, dropout_p, causal, rng, unused, *,
                     scale=None, window_size_left=None, window_size_right=None):
    import torch
    hk, g = k.shape[1], q.shape[1] // k.shape[1]
    scale = scale or q.shape[-1] ** -0.5
    kf, vf = k.repeat_interleave(g, 1).float(), v.repeat_interleave(g, 1).float()
    m = _visible(cu_q, cu_k, q.shape[0], k.shape[0], causal, window_size_left, window_size_right)
    p = torch.exp(torch.einsum("qhd,khd->hqk", q.float(), kf) * scale - lse[..., None]).masked_fill(~m, 0.0)
    gf = grad.float()
    dv = torch.einsum("hqk,qhd->khd", p, gf)
    ds = p * (torch.einsum("qhd,khd->hqk", gf, vf) - (gf * out.float()).sum(-1).T[..., None]) * scale
    dq, dk = torch.einsum("hqk,khd->qhd", ds, kf), torch.einsum("hqk,qhd->khd", ds, q.float())
    dk, dv = (x.view(x.shape[0], hk, g, -1).sum(2) for x in (dk, dv))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _cpu_reference_setup():
    import types

    import torch
    import torch._utils
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives
    torch._utils._get_available_device_type = lambda: "cpu"
    stand_ins = {"get_device_name": lambda d=None: "cpu", "memory_stats": lambda d=None: {},
                 "get_device_properties": lambda d=None: types.SimpleNamespace(total_memory=1 << 34),
                 "reset_peak_memory_stats": lambda d=None: None, "empty_cache": lambda: None}
    for name, fn in stand_ins.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, fn)
    divide = _fsdp_collectives._get_gradient_divide_factors

    def sum_only(rs_group, ar_group, dtype, device_type="", factor=None, force_sum_reduction_for_comms=False):
        return divide(rs_group, ar_group, dtype, device_type, factor, True)

    _fsdp_collectives._get_gradient_divide_factors = sum_only
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_flash_attention_forward", _varlen_forward, "CPU")
    lib.impl("_flash_attention_backward", _varlen_backward, "CPU")
    import torchtitan.distributed.utils
    torchtitan.distributed.utils.set_pg_timeouts = lambda timeout, parallel_dims: None
    return lib


def worker(kind):
    import runpy

    import torch
    import torch.distributed as dist
    if kind == "tpu":
        import torchtpu  # noqa: F401  (an installed torchtpu is loaded by `import torch` itself)
    kernels = _cpu_reference_setup() if kind == "cpu" else None  # noqa: F841  (kept alive: registered)
    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = lambda timeout, group=None: None
    runpy.run_module("torchtitan.train", run_name="__main__")


def launch(kind, nproc, extra, cwd, log):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           os.path.abspath(__file__), "--worker", kind, *ARGS, *extra]
    with open(log, "w") as f:
        rc = subprocess.call(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
    if rc != 0:
        sys.stdout.write(open(log).read()[-6000:])
        raise SystemExit(f"torchtitan_llama: the {kind} run failed (rc {rc}); log above")


def losses(log):
    found = {}
    for line in open(log):
        m = re.search(r"step:\s*(\d+)\s.*?loss:\s*([-0-9.eE+]+)", re.sub(r"\x1b\[[0-9;]*m", "", line))
        if m:
            found[int(m.group(1))] = float(m.group(2))
    return [found.get(s) for s in range(1, STEPS + 1)]


def compare(layout, curves):
    diffs = [abs(a - b) if a is not None and b is not None else float("inf")
             for a, b in zip(curves["tpu"], curves["cpu"])]
    for s, (a, b, d) in enumerate(zip(curves["tpu"], curves["cpu"], diffs), 1):
        print(f"{layout} step {s:2d}  loss tpu {a}  cpu/gloo {b}  |diff| {d:.2e}")
    return max(diffs)


def main(layouts):
    worst = {}
    with tempfile.TemporaryDirectory() as root:
        make_assets(root)
        seed = os.path.join(root, "seed")
        launch("cpu", 1, ["--training.steps", "1", "--checkpoint.enable", "--checkpoint.create-seed-checkpoint",
                          "--parallelism.data-parallel-shard-degree", "1", "--dump-folder", seed],
               root, os.path.join(root, "seed.log"))
        load = ["--training.steps", str(STEPS), "--checkpoint.enable", "--checkpoint.load-only",
                "--checkpoint.initial-load-path", os.path.join(seed, "checkpoint", "step-0")]
        for layout in layouts:
            nproc, flags = LAYOUTS[layout]
            curves = {}
            for kind in ("tpu", "cpu"):
                log = os.path.join(root, f"{layout}-{kind}.log")
                launch(kind, nproc, load + flags + ["--dump-folder", os.path.join(root, f"{layout}-{kind}")], root, log)
                curves[kind] = losses(log)
            worst[layout] = compare(layout, curves)
    print(json.dumps({"steps": STEPS, "processes": {k: LAYOUTS[k][0] for k in layouts}, "max_abs_loss_diff": worst,
                      "atol": LOSS_ATOL}))
    bad = {k: v for k, v in worst.items() if v > LOSS_ATOL}
    if bad:
        raise SystemExit(f"torchtitan_llama: tpu and CPU/gloo losses differ by more than {LOSS_ATOL}: {bad}")
    print(f"torchtitan on tpu matches CPU/gloo: {', '.join(layouts)}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        kind = sys.argv[2]
        sys.argv = [sys.argv[0], *sys.argv[3:]]
        worker(kind)
    else:
        # `--layouts fsdp,pp` runs some of them; all by default.
        chosen = sys.argv[sys.argv.index("--layouts") + 1].split(",") if "--layouts" in sys.argv else list(LAYOUTS)
        unknown = [x for x in chosen if x not in LAYOUTS]
        if unknown:
            raise SystemExit(f"torchtitan_llama: unknown layouts {unknown}; known: {list(LAYOUTS)}")
        main(chosen)
