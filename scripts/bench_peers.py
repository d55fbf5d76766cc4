#!/usr/bin/env python3
"""Time `rlx-host bench`'s builtin graphs in Python, as peers of its rows.

    python3 scripts/bench_peers.py --model mlp [--runs 20] [--warmup 3] [--seed 0] [--json]

The same graphs as `rlx-host bench` builds (cli/src/bench/
builtins.rs), at the same sizes, timed in:

- MLX, eager (`python-mlx`, mode `eager`): the ops called, then `mx.eval`;
- MLX, `mx.compile` (`python-mlx`, mode `compiled`);
- PyTorch, eager (`torch`, mode `eager`), under `torch.inference_mode()`.

Each runs on the GPU when the framework sees one (`mx.default_device()`;
`torch.cuda.is_available()`), else on the CPU. Every peer runs in its own
Python process, as `rlx-host bench` runs each backend, so the first run and
the peak RSS are that peer's alone. A run is timed up to the result being
computed: `mx.eval` or `torch.cuda.synchronize()` inside the timed region.
In the modes `eager` and `compiled`, inputs and params stay where the
framework put them and the result is not copied back to the host, unlike
`rlx-host bench`'s rows, whose every run passes host buffers in and out
through rlx-runtime. The `+io` modes (`compiled+io` for MLX, `eager+io`
for PyTorch) are those rows' like for like: every run makes its inputs from
the host's NumPy arrays and copies its result back into a NumPy array
(params stay resident, as the plugin keeps bound params).

Data: seeded with NumPy like rlx-host's (inputs uniform in [-1, 1); a
matrix param uniform in [-1, 1) / sqrt(its rows); a vector param uniform
in [-1, 1)), but not the same numbers, so a peer's error is measured
against NumPy in float64 on its own data (bf16 data rounded to bf16
first).

A package that is not installed gives a row saying
"skipped: <package> not installed", never an error. `--json` prints one
object, `{"model", "python", "packages", "rows": [...]}`, each row in the
shape of `rlx-host bench --json`'s rows.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

BATCH, D_MODEL, D_HIDDEN = 256, 1024, 4096

# model -> (inputs, params, dtype); inputs and params are (name, shape).
MODELS = {
    "mlp": (
        [("x", [BATCH, D_MODEL])],
        [("w1", [D_MODEL, D_HIDDEN]), ("b1", [D_HIDDEN]), ("w2", [D_HIDDEN, D_MODEL]), ("b2", [D_MODEL])],
        "f32",
    ),
    "matmuls": (
        [("x", [BATCH, D_MODEL])],
        [("w1", [D_MODEL, D_HIDDEN]), ("w2", [D_HIDDEN, D_MODEL])],
        "f32",
    ),
    "gelu": ([("x", [BATCH, D_HIDDEN])], [], "f32"),
    "add-broadcast": ([("x", [BATCH, D_HIDDEN])], [("b", [D_HIDDEN])], "f32"),
    "exp4": ([("x", [4])], [], "f32"),
}
MODELS["mlp-bf16"] = (MODELS["mlp"][0], MODELS["mlp"][1], "bf16")

# (backend, mode, the package it needs)
PEERS = [
    ("python-mlx", "eager", "mlx"),
    ("python-mlx", "compiled", "mlx"),
    ("python-mlx", "compiled+io", "mlx"),
    ("torch", "eager", "torch"),
    ("torch", "eager+io", "torch"),
]

# Agreement with the float64 reference, as rlx-host bench's tolerance for
# the same dtype: |got - ref| <= atol + rtol * |ref|.
TOLERANCE = {"f32": (1e-4, 1e-3), "bf16": (2e-2, 2e-2)}


def forward(model, v, gelu, exp):
    """The graph of `model` on the arrays `v` (by name)."""
    x = v["x"]
    if model in ("mlp", "mlp-bf16"):
        return gelu(x @ v["w1"] + v["b1"]) @ v["w2"] + v["b2"]
    if model == "matmuls":
        return (x @ v["w1"]) @ v["w2"]
    if model == "gelu":
        return gelu(x)
    if model == "add-broadcast":
        return x + v["b"]
    if model == "exp4":
        return exp(x)
    raise ValueError(model)


def row(backend, mode, **fields):
    base = {
        "backend": backend,
        "mode": mode,
        "requested": f"peer:{backend}:{mode}",
        "source": "peer",
        "device": None,
        "compile_ms": None,
        "first_run_ms": None,
        "median_ms": None,
        "min_ms": None,
        "runs_ms": [],
        "peak_rss_bytes": None,
        "rss_source": None,
        "checksum": None,
        "max_abs_err": None,
        "max_rel_err": None,
        "reference": None,
        "ratio_vs_cpu": None,
        "status": "ok",
        "error": None,
    }
    base.update(fields)
    return base


def peak_rss():
    """(bytes, source): VmHWM on Linux, else getrusage; (None, None)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024, "VmHWM"
    except OSError:
        pass
    try:
        import resource

        r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return (r if sys.platform == "darwin" else r * 1024), "getrusage"
    except (ImportError, OSError):
        return None, None


def to_bf16(np, a):
    """float32 values rounded to the nearest bf16 (ties to even), as float32."""
    bits = a.astype(np.float32).view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
    return rounded.view(np.float32)


def make_data(np, model, seed):
    inputs, params, dtype = MODELS[model]
    rng = np.random.default_rng(seed)
    data = {}
    for name, shape in inputs:
        data[name] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
    for name, shape in params:
        scale = 1.0 / math.sqrt(shape[-2]) if len(shape) >= 2 else 1.0
        data[name] = (rng.uniform(-1.0, 1.0, shape) * scale).astype(np.float32)
    if dtype == "bf16":
        data = {k: to_bf16(np, a) for k, a in data.items()}
    return data, [n for n, _ in inputs + params], dtype


def reference(np, model, data):
    """The graph in float64 with NumPy (GELU in its exact erf form)."""
    erf = np.frompyfunc(math.erf, 1, 1)

    def gelu(x):
        return x * 0.5 * (1.0 + erf(x / math.sqrt(2.0)).astype(np.float64))

    v = {k: a.astype(np.float64) for k, a in data.items()}
    return forward(model, v, gelu, np.exp)


def errors(np, got, want, dtype):
    got = got.astype(np.float64).reshape(want.shape)
    d = np.abs(got - want)
    atol, rtol = TOLERANCE[dtype]
    ok = bool(np.all(d <= atol + rtol * np.abs(want)))
    return float(d.max()), float((d / np.maximum(np.abs(want), 1e-6)).max()), ok


def time_runs(call, runs, warmup):
    """(first run ms, timed runs ms, last result); `call` returns a computed result."""
    t = time.perf_counter()
    y = call()
    first = (time.perf_counter() - t) * 1e3
    for _ in range(warmup):
        call()
    timed = []
    for _ in range(runs):
        t = time.perf_counter()
        y = call()
        timed.append((time.perf_counter() - t) * 1e3)
    return first, timed, y


def run_mlx(np, model, data, names, dtype, mode, runs, warmup):
    # The plugin's f32 precision: true f32 unless RLX_MLX_TF32=1. MLX reads
    # MLX_ENABLE_TF32 once, on first use, and defaults to TF32 on CUDA.
    if "MLX_ENABLE_TF32" not in os.environ:
        os.environ["MLX_ENABLE_TF32"] = "1" if os.environ.get("RLX_MLX_TF32") == "1" else "0"
    import mlx.core as mx

    dev = mx.default_device()
    device = f"{'gpu' if dev.type == mx.gpu else 'cpu'}:{getattr(dev, 'index', 0)}"
    arrays = [mx.array(data[n]) for n in names]
    if dtype == "bf16":
        arrays = [a.astype(mx.bfloat16) for a in arrays]
    mx.eval(arrays)

    def gelu(x):
        return x * 0.5 * (1.0 + mx.erf(x * (1.0 / math.sqrt(2.0))))

    def f(*a):
        return forward(model, dict(zip(names, a)), gelu, mx.exp)

    fn = mx.compile(f) if mode.startswith("compiled") else f
    n_inputs = len(MODELS[model][0])
    host = [data[n] for n in names[:n_inputs]]

    def call():
        if mode.endswith("+io"):
            a = [mx.array(h) for h in host]
            if dtype == "bf16":
                a = [x.astype(mx.bfloat16) for x in a]
            y = fn(*a, *arrays[n_inputs:])
            return np.array(y.astype(mx.float32) if dtype == "bf16" else y)
        y = fn(*arrays)
        mx.eval(y)
        return y

    first, timed, y = time_runs(call, runs, warmup)
    return device, first, timed, y if mode.endswith("+io") else np.array(y.astype(mx.float32))


def run_torch(np, model, data, names, dtype, mode, runs, warmup):
    import torch

    cuda = torch.cuda.is_available()
    # The same f32 precision as the plugin: true f32 (PyTorch's default)
    # unless RLX_MLX_TF32=1 opts the plugin into TF32, which MLX's own
    # MLX_ENABLE_TF32 default also means for the Python MLX peer.
    tf32 = os.environ.get("RLX_MLX_TF32") == "1"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    dev = torch.device("cuda" if cuda else "cpu")
    device = f"gpu:{torch.cuda.current_device()}" if cuda else "cpu"
    tdt = torch.bfloat16 if dtype == "bf16" else torch.float32
    tensors = [torch.from_numpy(data[n]).to(device=dev, dtype=tdt) for n in names]
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    gelu = torch.nn.functional.gelu  # approximate="none": the erf form

    n_inputs = len(MODELS[model][0])
    host = [data[n] for n in names[:n_inputs]]

    def call():
        with torch.inference_mode():
            if mode.endswith("+io"):
                a = [torch.from_numpy(h).to(device=dev, dtype=tdt) for h in host]
                y = forward(model, dict(zip(names, a + tensors[n_inputs:])), gelu, torch.exp)
                return y.float().cpu().numpy()
            y = forward(model, dict(zip(names, tensors)), gelu, torch.exp)
        sync()
        return y

    first, timed, y = time_runs(call, runs, warmup)
    return device, first, timed, y if mode.endswith("+io") else y.float().cpu().numpy()


def measure(peer, model, runs, warmup, seed):
    """The row of one peer, measured in this process."""
    backend, mode, package = next(p for p in PEERS if f"{p[0]}:{p[1]}" == peer)
    if model not in MODELS:
        return row(backend, mode, status="skipped",
                   error=f"skipped: no Python version of {model!r} (the peers time {', '.join(sorted(MODELS))})")
    try:
        __import__(package)
    except ModuleNotFoundError as e:
        if e.name and e.name.split(".")[0] == package:
            return row(backend, mode, status="skipped", error=f"skipped: {package} not installed")
        raise
    try:
        import numpy as np
    except ModuleNotFoundError:
        # The data and the float64 reference are NumPy's.
        return row(backend, mode, status="skipped", error="skipped: numpy not installed")
    data, names, dtype = make_data(np, model, seed)
    if backend == "torch":
        device, first, timed, out = run_torch(np, model, data, names, dtype, mode, runs, warmup)
    else:
        device, first, timed, out = run_mlx(np, model, data, names, dtype, mode, runs, warmup)
    rss, rss_source = peak_rss()
    abs_err, rel_err, ok = errors(np, out, reference(np, model, data), dtype)
    atol, rtol = TOLERANCE[dtype]
    s = sorted(timed)
    n = len(s)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return row(
        backend, mode,
        device=device,
        first_run_ms=first,
        median_ms=median,
        min_ms=s[0],
        runs_ms=timed,
        peak_rss_bytes=rss,
        rss_source=rss_source,
        checksum=float(out.astype(np.float64).sum()),
        max_abs_err=abs_err,
        max_rel_err=rel_err,
        reference="numpy",
        status="ok" if ok else "mismatch",
        error=None if ok else f"differs from NumPy float64 beyond {atol:g} + {rtol:g} * |ref| ({dtype})",
    )


def measure_in_child(peer, args):
    """Run one peer in a fresh Python process; its row, or a failed row."""
    backend, mode = peer.split(":")
    cmd = [sys.executable, os.path.abspath(__file__), "--model", args.model, "--runs", str(args.runs),
           "--warmup", str(args.warmup), "--seed", str(args.seed), "--peer", peer]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as e:
        return row(backend, mode, status="failed", error=f"cannot start {sys.executable}: {e}")
    for line in reversed(p.stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    why = lines[-1].strip() if lines else f"exited with status {p.returncode} and printed no row"
    return row(backend, mode, status="failed", error=why)


def package_version(name):
    try:
        from importlib import metadata

        return metadata.version(name)
    except Exception:  # not installed, or no metadata: say so, not fail
        return None


def print_table(rows):
    head = ["BACKEND", "MODE", "DEVICE", "FIRST RUN MS", "MEDIAN MS", "MIN MS", "MAX ABS ERR", "STATUS"]

    def ms(v):
        return "-" if v is None else f"{v:.4f}" if v < 1 else f"{v:.3f}" if v < 100 else f"{v:.1f}"

    cells = [[r["backend"], r["mode"] or "-", r["device"] or "-", ms(r["first_run_ms"]), ms(r["median_ms"]),
              ms(r["min_ms"]), "-" if r["max_abs_err"] is None else f"{r['max_abs_err']:.2e}",
              r["status"].upper()] for r in rows]
    widths = [max(len(c[i]) for c in [head] + cells) for i in range(len(head))]
    for c in [head] + cells:
        print("  ".join(x.ljust(w) for x, w in zip(c, widths)).rstrip())
    for r in rows:
        if r["error"]:
            print(f"{r['status'].upper():<8} {r['requested']}: {r['error']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a builtin model of rlx-host bench")
    ap.add_argument("--runs", type=int, default=20, help="timed runs (after the first run and the warm-up)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs after the first")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random data")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--peer", choices=[f"{b}:{m}" for b, m, _ in PEERS], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.peer:
        print(json.dumps(measure(args.peer, args.model, args.runs, args.warmup, args.seed)))
        return
    rows = [measure_in_child(f"{b}:{m}", args) for b, m, _ in PEERS]
    if args.json:
        print(json.dumps({
            "model": args.model,
            "python": sys.version.split()[0],
            "packages": {p: package_version(p) for p in ("mlx", "torch", "numpy")},
            "rows": rows,
        }))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
