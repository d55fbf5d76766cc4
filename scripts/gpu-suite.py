#!/usr/bin/env python3
"""Run the `gpu_all` parity suite on a GPU, one test per process, many at once.

Why processes and not test threads: MLX's CUDA backend compiles each fused
kernel with NVRTC under one process-wide lock (`get_jit_module`), and the
plugin runs one GPU job at a time per process (MLX's CUDA backend is not
safe for concurrent use), so eight test threads in one process compile and
run one thing at a time. On a cold kernel cache nearly all of a test's time
is NVRTC; separate processes compile side by side, one per core.

Each worker keeps its own `MLX_PTX_CACHE_DIR` (MLX writes a cache entry in
place, so a second process could read a half-written kernel), reused by the
tests it runs later. `--cache-from DIR` seeds every worker's cache with a
copy of DIR (a warm cache from an earlier run).

Usage:
  scripts/gpu-suite.py GPU_ALL_BINARY [--jobs N] [--timeout S] [--budget S]
                       [--skip PREFIX]... [--only PREFIX]... [--log DIR]

The plugin directory comes from RLX_TEST_MLX_DIR, as for the test binary.
Exit status: 0 when every test that ran passed and none was left unrun,
1 when a test failed or timed out, 2 when the budget left tests unrun or
cut. `--results FILE` appends one line per test; a later run given
`--skip-ok FILE` runs only what has not passed yet.
"""

import argparse
import collections
import os
import queue
import shutil
import subprocess
import sys
import threading
import time


def list_tests(binary):
    out = subprocess.run(
        [binary, "--list", "--format", "terse"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [line[: -len(": test")] for line in out.splitlines() if line.endswith(": test")]


def module_of(name):
    return name.split("::", 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("binary")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--timeout", type=float, default=600, help="seconds per test")
    ap.add_argument(
        "--budget",
        type=float,
        default=0,
        help="stop after this many seconds: tests still running are cut, not failed (0: no limit)",
    )
    ap.add_argument("--results", default=None, help="append 'STATUS TEST' lines to this file")
    ap.add_argument("--skip-ok", default=None, help="skip the tests a --results file lists as ok")
    ap.add_argument("--skip", action="append", default=[], help="skip tests starting with this")
    ap.add_argument("--only", action="append", default=[], help="run only tests starting with this")
    ap.add_argument("--log", default="gpu-suite-logs", help="directory for each test's output")
    ap.add_argument("--cache", default=None, help="base directory for the workers' kernel caches")
    ap.add_argument("--cache-from", default=None, help="seed every worker's cache from this directory")
    args = ap.parse_args()

    tests = list_tests(args.binary)
    if args.only:
        tests = [t for t in tests if any(t.startswith(p) for p in args.only)]
    tests = [t for t in tests if not any(t.startswith(p) for p in args.skip)]
    if args.skip_ok and os.path.exists(args.skip_ok):
        with open(args.skip_ok) as f:
            done = {line.split()[1] for line in f if line.startswith("ok ")}
        tests = [t for t in tests if t not in done]
    if not tests:
        print("gpu-suite: no test selected", file=sys.stderr)
        return 1

    os.makedirs(args.log, exist_ok=True)
    cache_base = args.cache or os.path.join(args.log, "ptx")
    jobs = max(1, min(args.jobs, len(tests)))
    for w in range(jobs):
        d = os.path.join(cache_base, f"w{w}")
        if args.cache_from and not os.path.exists(d):
            shutil.copytree(args.cache_from, d)
        os.makedirs(d, exist_ok=True)

    todo = queue.Queue()
    for t in tests:
        todo.put(t)
    results = {}
    lock = threading.Lock()
    start = time.monotonic()

    def worker(w):
        env = dict(os.environ, MLX_PTX_CACHE_DIR=os.path.join(cache_base, f"w{w}"))
        while True:
            left = args.budget - (time.monotonic() - start) if args.budget else None
            if left is not None and left < 1:
                return
            try:
                t = todo.get_nowait()
            except queue.Empty:
                return
            t0 = time.monotonic()
            log_path = os.path.join(args.log, t.replace("::", "__") + ".txt")
            limit = args.timeout if left is None else min(args.timeout, left)
            with open(log_path, "w") as log:
                try:
                    rc = subprocess.run(
                        [args.binary, "--exact", t, "--test-threads", "1", "--nocapture"],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        timeout=limit,
                    ).returncode
                    status = "ok" if rc == 0 else f"FAILED (exit {rc})"
                except subprocess.TimeoutExpired:
                    # Cut by the run's budget: unfinished, not failed.
                    status = "cut" if limit < args.timeout else f"TIMEOUT ({limit:.0f} s)"
            secs = time.monotonic() - t0
            with lock:
                results[t] = (status, secs)
                print(f"{time.monotonic() - start:7.1f} s  w{w:<2} {status:<18} {secs:6.1f} s  {t}", flush=True)
                if args.results:
                    with open(args.results, "a") as f:
                        f.write(f"{status.split()[0]} {t} {secs:.1f}\n")

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(jobs)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()

    unrun = [t for t in tests if t not in results or results[t][0] == "cut"]
    by_module = collections.OrderedDict()
    for t in tests:
        m = by_module.setdefault(module_of(t), collections.Counter())
        m[results[t][0].split()[0] if t in results else "unrun"] += 1
    print(f"\ngpu-suite: {len(tests)} tests, {jobs} processes, {time.monotonic() - start:.0f} s")
    for m, c in by_module.items():
        print(f"  {m:<20} " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    bad = [t for t, (s, _) in results.items() if s not in ("ok", "cut")]
    for t in bad:
        print(f"  {results[t][0]}: {t}")
    total = collections.Counter(s.split()[0] for s, _ in results.values())
    print("gpu-suite: " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())) + f", unrun {len(unrun)}")
    if bad:
        return 1
    return 2 if unrun else 0


if __name__ == "__main__":
    sys.exit(main())
