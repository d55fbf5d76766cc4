#!/usr/bin/env python3
"""The MLX primitives one training step of Python MLX evaluates, op kind by
op kind: the peer of `cargo bench -p rlx-plugin-tests --bench op_counts`
(which runs this script) for the MLP of `tests/benches/resident.rs`
(256x1024 -> 4096 -> 1024, ReLU, mean squared error, f32).

    python3 scripts/op_counts.py

The step is MLX's idiom, as `scripts/resident_peers.py` times it:
`nn.value_and_grad` of the loss and `mlx.optimizers.Adam(1e-3)`'s update,
`lazy` as written and `compiled` under `mx.compile` with the model and
optimizer state as its state. After two steps (the optimizer's state
exists, the compiled function is traced), the third step's graph (its loss,
the new parameters and both moments, before evaluation) is drawn with
`mx.export_to_dot` and every node counted by its primitive's name, as the
plugin's `RLX_MLX_OP_COUNTS` counts a run: views (`Broadcast`, `Transpose`)
included, each fused kernel as one `Compiled...` node.

Prints one JSON line per mode: {"framework", "mode", "total", "ops"}.
Device-independent: it runs on MLX's default device (the CPU with
`mlx-cpu`).
"""

import collections
import json
import os
import re
import sys
import tempfile

BATCH, D_IN, D_HID, D_OUT = 256, 1024, 4096, 1024


def counts(mx, outs):
    """Primitive name -> nodes in the unevaluated graph under `outs`."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "step.dot")
        mx.export_to_dot(path, *outs)
        text = open(path).read()
    # Nodes drawn as rectangles are primitives; arrays are the other nodes.
    names = re.findall(r'\[label ="([^"]+)", shape=rectangle\]', text)
    return collections.Counter(names)


def main():
    try:
        import mlx.core as mx
        import mlx.nn as nn
        import mlx.optimizers as optim
        from mlx.utils import tree_flatten
    except ImportError as e:
        print("Python MLX is not installed (%s): pip install mlx-cpu==0.32.4" % e,
              file=sys.stderr)
        sys.exit(2)

    for mode in ["lazy", "compiled"]:
        mx.random.seed(0)
        model = nn.Sequential(
            nn.Linear(D_IN, D_HID), nn.ReLU(), nn.Linear(D_HID, D_OUT))
        x = mx.random.uniform(-1, 1, (BATCH, D_IN))
        t = mx.random.uniform(-1, 1, (BATCH, D_OUT))
        opt = optim.Adam(learning_rate=1e-3)
        mx.eval(model.parameters(), x, t)

        def loss_fn(m, x, t):
            return mx.mean((m(x) - t) ** 2)

        grad = nn.value_and_grad(model, loss_fn)
        state = [model.state, opt.state]

        def step(x, t):
            loss, g = grad(model, x, t)
            opt.update(model, g)
            return loss

        if mode == "compiled":
            step = mx.compile(step, inputs=state, outputs=state)

        def evaluated():
            return [step(x, t)] + [
                v for _, v in tree_flatten(state) if isinstance(v, mx.array)]

        for _ in range(2):
            mx.eval(evaluated())
        outs = evaluated()
        c = counts(mx, outs)
        mx.eval(outs)
        print(json.dumps({
            "framework": "mlx %s" % mx.__version__,
            "mode": mode,
            "total": sum(c.values()),
            "ops": dict(sorted(c.items())),
        }), flush=True)


if __name__ == "__main__":
    main()
