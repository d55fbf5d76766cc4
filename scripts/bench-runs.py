#!/usr/bin/env python3
"""Summarise every timed run of `rlx-host bench --json` rows: the first run,
the slowest timed run (where it fell, in seconds of runs), and the median of
each tenth of the runs, which shows when compiled mode switched from lazy
evaluation to its compiled function.

    rlx-host bench mlp-train --backends mlx:lazy,mlx:compiled \\
        --runs 1500 --warmup 0 --json > out.json
    python3 scripts/bench-runs.py out.json
"""
import json
import statistics as st
import sys


def main(path):
    for r in json.load(open(path)).get("rows", []):
        runs = r.get("runs_ms") or []
        if not runs:
            print(r.get("requested"), r.get("status"), r.get("error"))
            continue
        slow = max(range(len(runs)), key=runs.__getitem__)
        tenths = [st.median(runs[j * len(runs) // 10:(j + 1) * len(runs) // 10]) for j in range(10)]
        print(
            f"{r['requested']:13s} first {r.get('first_run_ms') or 0:8.1f} ms; "
            f"slowest timed run {runs[slow]:7.1f} ms (run {slow}, at {sum(runs[:slow]) / 1000:.1f} s); "
            f"medians of tenths (ms): {' '.join(f'{x:.3f}' for x in tenths)}; "
            f"{len(runs)} runs in {sum(runs) / 1000:.1f} s"
        )


if __name__ == "__main__":
    main(sys.argv[1])
