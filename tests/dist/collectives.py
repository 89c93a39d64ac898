"""Every collective of the "tpu" backend on tpu tensors, checked against the
closed-form answer for the world size; run by tests/dist/ddp.py under torchrun."""

import torch
import torch.distributed as dist

import torchtpu  # noqa: F401

def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype).to("tpu")


def close(a, b):
    torch.testing.assert_close(a.cpu(), b.cpu() if torch.is_tensor(b) else torch.tensor(b, dtype=a.dtype), rtol=1e-6, atol=1e-6)


def run_all():
    """Every collective on tpu tensors over the default group (initialised by the caller)."""
    r, n = dist.get_rank(), dist.get_world_size()
    ranks = torch.arange(n, dtype=torch.float32)
    # all_reduce, every op, sync and async
    base = ranks + 1
    for op, f in ((dist.ReduceOp.SUM, torch.sum), (dist.ReduceOp.AVG, torch.mean),
                  (dist.ReduceOp.MIN, torch.min), (dist.ReduceOp.MAX, torch.max),
                  (dist.ReduceOp.PRODUCT, torch.prod)):
        x = t([r + 1.0, 2 * (r + 1.0)])
        dist.all_reduce(x, op=op)
        close(x, torch.stack([f(base), f(2 * base)]))
    x = t([float(r)])
    w = dist.all_reduce(x, async_op=True)
    w.wait()
    close(x, [ranks.sum().item()])
    assert w.get_future().value()[0].device.type == "tpu"
    xi = t([r], torch.int64)
    dist.all_reduce(xi)
    assert xi.item() == n * (n - 1) // 2
    try:  # gloo has no AVG; an integer average is refused on every rank before data moves
        dist.all_reduce(xi, op=dist.ReduceOp.AVG)
    except RuntimeError as e:
        assert "floating-point" in str(e), e
    else:
        raise AssertionError("an integer AVG all_reduce was accepted")
    assert xi.item() == n * (n - 1) // 2  # untouched
    # broadcast / reduce
    x = t([float(r), 7.0])
    dist.broadcast(x, src=n - 1)
    close(x, [n - 1.0, 7.0])
    x = t([float(r)])
    dist.reduce(x, dst=0)
    if r == 0:
        close(x, [ranks.sum().item()])
    # all_gather (list and into a tensor), uneven sizes in the list form
    outs = [torch.zeros(2).to("tpu") for _ in range(n)]
    dist.all_gather(outs, t([r, r + 0.5]))
    for i, o in enumerate(outs):
        close(o, [i, i + 0.5])
    out = torch.zeros(2 * n).to("tpu")
    dist.all_gather_into_tensor(out, t([r, r + 0.5]))
    close(out, torch.stack([ranks, ranks + 0.5], 1).reshape(-1))
    # reduce_scatter (list and tensor), SUM and AVG
    out = torch.zeros(1).to("tpu")
    dist.reduce_scatter(out, [t([float(r + i)]) for i in range(n)])
    close(out, [ranks.sum().item() + n * r])
    out = torch.zeros(2).to("tpu")
    dist.reduce_scatter_tensor(out, t([float(r)] * (2 * n)), op=dist.ReduceOp.AVG)
    close(out, [ranks.mean().item()] * 2)
    # PREMUL_SUM (FSDP2's gradient divide factor): sum of factor * x, a Python or a tensor factor
    for factor in (0.25, torch.tensor(0.25).to("tpu")):
        inp = t([float(r + 1)] * (2 * n))
        dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(factor))
        close(out, [0.25 * base.sum().item()] * 2)
        close(inp, [float(r + 1)] * (2 * n))  # the input is left as it was
        x = t([r + 1.0])
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
        close(x, [0.25 * base.sum().item()])
    # Each rank scales its own contribution: rank r's factor is r + 1, so the sum
    # is sum((r + 1) * x_r), not (r + 1) * sum(x_r).
    weighted = (base * base).sum().item()
    for factor in (float(r + 1), torch.tensor(float(r + 1)).to("tpu")):
        x = t([r + 1.0])
        dist.all_reduce(x, op=dist._make_nccl_premul_sum(factor))
        close(x, [weighted])
        dist.reduce_scatter_tensor(out, t([float(r + 1)] * (2 * n)), op=dist._make_nccl_premul_sum(factor))
        close(out, [weighted] * 2)
        outs = [torch.zeros(1).to("tpu")]
        dist.reduce_scatter(outs[0], [t([float(r + 1)]) for _ in range(n)], op=dist._make_nccl_premul_sum(factor))
        close(outs[0], [weighted])
    # all_to_all_single with uneven splits: rank r sends i+1 values to rank i
    in_splits = [i + 1 for i in range(n)]
    out_splits = [r + 1] * n
    inp = t([100.0 * r + i for i in range(sum(in_splits))])
    out = torch.zeros(sum(out_splits)).to("tpu")
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = []
    for src in range(n):
        start = sum(range(1, r + 1))
        want += [100.0 * src + start + k for k in range(r + 1)]
    close(out, want)
    outs = [torch.zeros(1).to("tpu") for _ in range(n)]
    dist.all_to_all(outs, [t([10.0 * r + i]) for i in range(n)])
    close(torch.cat(outs), [10.0 * i + r for i in range(n)])
    # gather / scatter
    x = t([float(r)])
    gl = [torch.zeros(1).to("tpu") for _ in range(n)] if r == 0 else None
    dist.gather(x, gl, dst=0)
    if r == 0:
        close(torch.cat(gl), ranks)
    out = torch.zeros(1).to("tpu")
    dist.scatter(out, [t([i * 3.0]) for i in range(n)] if r == 0 else None, src=0)
    close(out, [3.0 * r])
    # send/recv ring and batch_isend_irecv
    nxt, prv = (r + 1) % n, (r - 1) % n
    buf = torch.zeros(3).to("tpu")
    if r % 2 == 0:
        dist.send(t([r, r, r]), nxt)
        dist.recv(buf, prv)
    else:
        dist.recv(buf, prv)
        dist.send(t([r, r, r]), nxt)
    close(buf, [prv] * 3)
    buf = torch.zeros(2).to("tpu")
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, t([r, -r]), nxt), dist.P2POp(dist.irecv, buf, prv)])
    for q in reqs:
        q.wait()
    close(buf, [prv, -prv])
    # subgroups: even ranks only
    evens = list(range(0, n, 2))
    g = dist.new_group(evens)
    if r in evens:
        x = t([1.0])
        dist.all_reduce(x, group=g)
        close(x, [len(evens)])
    # coalesced
    xs = [t([1.0]), t([2.0, 3.0])]
    with dist._coalescing_manager(async_ops=False):
        for x in xs:
            dist.all_reduce(x)
    close(xs[0], [n])
    close(xs[1], [2.0 * n, 3.0 * n])
    results_written_back_in_place(r, n)
    dist.barrier()
    print(f"rank {r}/{n}: collectives OK", flush=True)


def results_written_back_in_place(r, n):
    """On the CPU plugin a result becomes its tensor's buffer as the host staging
    block itself (no copy back); a clone taken before and a view's neighbours
    keep their own values, and the next collective reads the lent buffer."""
    lent = torchtpu.metrics()["h2d_lent"]
    base = torch.arange(4096, dtype=torch.float32)
    x = base.to("tpu") + r
    keep = x.clone()
    dist.all_reduce(x)
    want = n * base + n * (n - 1) / 2
    close(x, want)
    close(keep, base + r)
    x.add_(1.0)
    dist.all_reduce(x)
    close(x, n * (want + 1))
    if torchtpu._C.platform_name() == "cpu":
        assert torchtpu.metrics()["h2d_lent"] - lent == 2, torchtpu.metrics()["h2d_lent"] - lent
    buf = torch.zeros(8).to("tpu")
    view = buf[2:6]
    view.fill_(r + 1.0)
    dist.all_reduce(view)  # part of a storage: written back as a copy into the view
    close(buf, [0.0, 0.0] + [n * (n + 1) / 2] * 4 + [0.0, 0.0])


if __name__ == "__main__":
    main()
