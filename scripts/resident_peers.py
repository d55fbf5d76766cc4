#!/usr/bin/env python3
"""Peers of `tests/benches/resident.rs` in Python: the same MLP
(256x1024 -> 4096 -> 1024, ReLU, f32), its arrays resident on the device.

    python3 scripts/resident_peers.py [--steps 50] [--warmup 5]

Rows (median and min ms of the timed steps; each framework in its own
process, on its GPU when it sees one):

- `train torch`: one step of PyTorch eager, mean squared error, backward,
  `torch.optim.Adam(lr=1e-3, fused=True)` (fused needs CUDA; elsewhere
  the default implementation), then `torch.cuda.synchronize()`; only the
  loss is read back, as the plugin's resident trainer reads only it.
- `train mlx`: one step of MLX, `nn.value_and_grad` and
  `mlx.optimizers.Adam(1e-3)` in a function `mx.compile`d with the model
  and optimizer state as its state, then `mx.eval` of the loss and state.
- `forward mlx`: the forward, `mx.compile`d, `mx.eval` of its output, which
  stays on the device.
- `forward torch`: the forward under `torch.inference_mode()`.

A framework that is not installed prints a row saying so.
"""

import argparse
import statistics
import subprocess
import sys
import time

BATCH, D_IN, D_HID, D_OUT = 256, 1024, 4096, 1024


def timed(step, warmup, steps):
    for _ in range(warmup):
        step()
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        step()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out), min(out)


def torch_rows(warmup, steps):
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(D_IN, D_HID), torch.nn.ReLU(), torch.nn.Linear(D_HID, D_OUT)
    ).to(dev)
    x = torch.rand(BATCH, D_IN, device=dev) * 2 - 1
    t = torch.rand(BATCH, D_OUT, device=dev) * 2 - 1
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=(dev == "cuda"))

    def train():
        opt.zero_grad(set_to_none=True)
        loss = torch.mean((model(x) - t) ** 2)
        loss.backward()
        opt.step()
        loss.item()

    def forward():
        with torch.inference_mode():
            model(x)
        sync()

    yield ("train", "torch", dev) + timed(train, warmup, steps)
    yield ("forward", "torch", dev) + timed(forward, warmup, steps)


def mlx_rows(warmup, steps):
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from functools import partial

    dev = str(mx.default_device()).replace(" ", "")
    mx.random.seed(0)
    model = nn.Sequential(nn.Linear(D_IN, D_HID), nn.ReLU(), nn.Linear(D_HID, D_OUT))
    x = mx.random.uniform(-1, 1, (BATCH, D_IN))
    t = mx.random.uniform(-1, 1, (BATCH, D_OUT))
    opt = optim.Adam(learning_rate=1e-3)
    mx.eval(model.parameters(), x, t)

    def loss_fn(m, x, t):
        return mx.mean((m(x) - t) ** 2)

    grad = nn.value_and_grad(model, loss_fn)
    state = [model.state, opt.state]

    @partial(mx.compile, inputs=state, outputs=state)
    def step(x, t):
        loss, g = grad(model, x, t)
        opt.update(model, g)
        return loss

    def train():
        loss = step(x, t)
        mx.eval(loss, state)
        loss.item()

    fwd = mx.compile(lambda x: model(x))

    def forward():
        mx.eval(fwd(x))

    yield ("train", "mlx", dev) + timed(train, warmup, steps)
    yield ("forward", "mlx", dev) + timed(forward, warmup, steps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--child", choices=["torch", "mlx"])
    a = ap.parse_args()
    if a.child:
        rows = torch_rows if a.child == "torch" else mlx_rows
        for r in rows(a.warmup, a.steps):
            print("ROW %s %s %s %.4f %.4f" % r, flush=True)
        return
    print("%-8s %-6s %-12s %10s %10s" % ("work", "peer", "device", "median ms", "min ms"))
    for peer in ["torch", "mlx"]:
        p = subprocess.run(
            [sys.executable, __file__, "--child", peer, "--steps", str(a.steps),
             "--warmup", str(a.warmup)],
            capture_output=True, text=True,
        )
        rows = [l.split()[1:] for l in p.stdout.splitlines() if l.startswith("ROW ")]
        if not rows:
            last = (p.stderr.strip().splitlines() or ["no output"])[-1]
            print("%-8s %-6s skipped: %s" % ("-", peer, last))
        for w, f, d, med, mn in rows:
            print("%-8s %-6s %-12s %10s %10s" % (w, f, d, med, mn))


if __name__ == "__main__":
    main()
