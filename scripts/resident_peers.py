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
- `decode mlx` / `decode torch`: one greedy step of the decoder of the
  bench's `decode` workload (`tests/src/decoder_package.rs`,
  `DecoderConfig::benchmark()`: vocab 256, d_model 512, 8 heads, 8
  layers, MLP 2048, GELU, RMS norms, learned positions), with a
  1,024-row K and V cache per layer resident on the device. Each step
  writes its row at the position, attends over all 1,024 rows under the
  causal bias (0 for rows up to the position, -1e9 after: the plugin's
  graph does the same), reads the logits to the host and takes their
  argmax there, as `decode_logits` does. The prompt (200 tokens) is
  stepped in and the context grown to 300 before timing. MLX: the step
  `mx.compile`d (`mx.fast.rms_norm`, `mx.fast.scaled_dot_product_attention`,
  `mx.slice_update` at the position); PyTorch: eager under
  `torch.inference_mode()`, the cache written in place.

A framework that is not installed prints a row saying so.
"""

import argparse
import statistics
import subprocess
import sys
import time

BATCH, D_IN, D_HID, D_OUT = 256, 1024, 4096, 1024
# The decoder of `DecoderConfig::benchmark()`, and the bench's context.
VOCAB, D_MODEL, HEADS, LAYERS, FFN, CAP = 256, 512, 8, 8, 2048, 1024
PROMPT, CONTEXT = 200, 300


def decoder_weights(randn):
    """Named weights, scaled as a trained model's roughly are (the norms'
    gains are ones: their values do not change the work)."""
    w = {"embed": randn(VOCAB, D_MODEL), "pos_embed": randn(CAP, D_MODEL),
         "lm_head": randn(D_MODEL, VOCAB)}
    for l in range(LAYERS):
        for n in ["wq", "wk", "wv", "wo"]:
            w[f"l{l}.{n}"] = randn(D_MODEL, D_MODEL)
        w[f"l{l}.w1"] = randn(D_MODEL, FFN)
        w[f"l{l}.w2"] = randn(FFN, D_MODEL)
    return w


def greedy(step, warmup, steps):
    """Steps the prompt in, grows the context, then times the steps."""
    nxt = 0
    for pos in range(CONTEXT):
        nxt = step(pos * 37 % VOCAB if pos < PROMPT else nxt, pos)
    pos = CONTEXT

    def one():
        nonlocal nxt, pos
        nxt = step(nxt, pos)
        pos += 1

    return timed(one, warmup, steps)


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
    yield ("decode", "torch", dev) + torch_decode(torch, dev, warmup, steps)


def torch_decode(torch, dev, warmup, steps):
    import torch.nn.functional as F

    w = decoder_weights(lambda *s: torch.randn(*s, device=dev) * 0.02)
    ones = torch.ones(D_MODEL, device=dev)
    caches = [torch.zeros(2, CAP, D_MODEL, device=dev) for _ in range(LAYERS)]
    keys = torch.arange(CAP, device=dev)
    hd = D_MODEL // HEADS

    def norm(x):
        return F.rms_norm(x, (D_MODEL,), ones, 1e-5)

    @torch.inference_mode()
    def step(tok, pos):
        x = (w["embed"][tok] + w["pos_embed"][pos])[None]
        bias = torch.where(keys <= pos, 0.0, -1e9)
        for l, kv in enumerate(caches):
            a = norm(x)
            q, k, v = (a @ w[f"l{l}.{n}"] for n in ["wq", "wk", "wv"])
            kv[0, pos] = k[0]
            kv[1, pos] = v[0]
            qh = q.view(HEADS, 1, hd)
            kh = kv[0].view(CAP, HEADS, hd).transpose(0, 1)
            vh = kv[1].view(CAP, HEADS, hd).transpose(0, 1)
            p = torch.softmax(qh @ kh.transpose(1, 2) / hd**0.5 + bias, -1)
            o = (p @ vh).transpose(0, 1).reshape(1, D_MODEL)
            x = x + o @ w[f"l{l}.wo"]
            x = x + F.gelu(norm(x) @ w[f"l{l}.w1"]) @ w[f"l{l}.w2"]
        logits = norm(x) @ w["lm_head"]
        return int(logits.cpu().argmax())

    return greedy(step, warmup, steps)


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
    yield ("decode", "mlx", dev) + mlx_decode(mx, nn, warmup, steps)


def mlx_decode(mx, nn, warmup, steps):
    w = decoder_weights(lambda *s: mx.random.normal(s) * 0.02)
    ones = mx.ones((D_MODEL,))
    caches = [mx.zeros((2, CAP, D_MODEL)) for _ in range(LAYERS)]
    keys = mx.arange(CAP)
    hd = D_MODEL // HEADS
    mx.eval(list(w.values()), caches)

    def norm(x):
        return mx.fast.rms_norm(x, ones, 1e-5)

    @mx.compile
    def step(tok, pos, caches):
        x = (w["embed"][tok] + w["pos_embed"][pos])[None]
        bias = mx.where(keys <= pos, 0.0, -1e9)
        out = []
        for l, kv in enumerate(caches):
            a = norm(x)
            q, k, v = (a @ w[f"l{l}.{n}"] for n in ["wq", "wk", "wv"])
            row = mx.stack([k, v])  # [2, 1, d]
            kv = mx.slice_update(kv, row, pos.reshape(1), axes=(1,))
            out.append(kv)
            qh = q.reshape(1, HEADS, 1, hd)
            kh = kv[0].reshape(CAP, HEADS, hd).transpose(1, 0, 2)[None]
            vh = kv[1].reshape(CAP, HEADS, hd).transpose(1, 0, 2)[None]
            o = mx.fast.scaled_dot_product_attention(qh, kh, vh, scale=hd**-0.5, mask=bias)
            x = x + o.reshape(1, D_MODEL) @ w[f"l{l}.wo"]
            x = x + nn.gelu(norm(x) @ w[f"l{l}.w1"]) @ w[f"l{l}.w2"]
        return norm(x) @ w["lm_head"], out

    def one(tok, pos):
        logits, new = step(mx.array(tok), mx.array(pos), caches)
        caches[:] = new
        row = logits.tolist()[0]
        return max(range(VOCAB), key=row.__getitem__)

    return greedy(one, warmup, steps)


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
