"""The torchtpu demo: train a small MLP classifier on the `tpu` device.

The only change from CPU/CUDA code is the device string."""
import time

import torch
import torch.nn as nn

import torchtpu

DEVICE = "tpu"


def make_data(n, seed, dim=16, classes=4):
    """A learnable synthetic task: the class is the argmax of one fixed linear map."""
    w = torch.randn(dim, classes, generator=torch.Generator().manual_seed(1234))
    x = torch.randn(n, dim, generator=torch.Generator().manual_seed(seed))
    return x, (x @ w).argmax(dim=1)


def main():
    torch.manual_seed(0)
    print(f"device: {torch.tpu.get_device_name()}  (eager mode: {torchtpu.get_eager_mode()})")
    x_train, y_train = make_data(2048, seed=0)
    x_test, y_test = make_data(512, seed=1)
    x_train, y_train = x_train.to(DEVICE), y_train.to(DEVICE)
    x_test, y_test = x_test.to(DEVICE), y_test.to(DEVICE)

    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 4)).to(DEVICE)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    loss_fn = nn.CrossEntropyLoss()

    torchtpu.reset_metrics()
    start = time.perf_counter()
    steps, batch = 300, 128
    for step in range(steps):
        i = (step * batch) % x_train.shape[0]
        xb, yb = x_train[i:i + batch], y_train[i:i + batch]
        loss = loss_fn(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            print(f"step {step:4d}  loss {loss.item():.4f}")
    elapsed = time.perf_counter() - start

    with torch.no_grad():
        acc = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    print(f"test accuracy: {acc * 100:.1f}%   ({steps} steps in {elapsed:.1f} s)")
    m = torchtpu.metrics()
    keys = ["ops_executed", "compiles", "compile_seconds", "cache_hits", "cache_misses",
            "h2d_transfers", "h2d_bytes", "d2h_transfers", "d2h_bytes", "fallbacks", "live_buffers"]
    print("metrics: " + ", ".join(f"{k}={m[k]:.2f}" if isinstance(m[k], float) else f"{k}={m[k]}"
                                  for k in keys if k in m))


if __name__ == "__main__":
    main()
