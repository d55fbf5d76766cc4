#!/usr/bin/env python3
"""The protocol behind every "against a peer" figure: ours and the peer, each
a command run in its own process, alternated in one invocation, the ratio
taken per adjacent pair.

    scripts/peer-protocol.py --ours 'CMD' --peer 'CMD' \\
        [--pairs 7] [--extract REGEX] [--reference-peer MS] \\
        [--noisy 1.5] [--sittings 3] [--json]

Each command prints its figure in milliseconds, lower is better; `--extract`
is a regular expression whose first group that matches holds that figure
(alternatives `A|B` for two commands' formats; the last match counts;
default: a number followed by ` ms`). Pair `i` runs both
commands back to back, ours first in even pairs and the peer first in odd
ones, so that a machine drifting through the sitting weighs on both alike;
its ratio is ours / peer. The result is the median pair ratio, with the
smallest and largest ratio and the interquartile range (the spread).

A sitting whose peer is slow against its own reference (its median more
than `--noisy` times `--reference-peer`, the peer's figure in the table's
reference run) says the machine was busy: the sitting is marked noisy and
run again, up to `--sittings` in all. Exit status: 0 for a sitting that was
not noisy, 3 when every sitting was, 1 when a command failed or printed no
figure, 2 for a usage error.
"""

import argparse
import json
import re
import statistics
import subprocess
import sys

DEFAULT_EXTRACT = r"([0-9]+(?:\.[0-9]+)?)\s*ms\b"


def figure(cmd, extract):
    """Run `cmd` in a shell; its figure (ms), from the last match of `extract`."""
    out = subprocess.run(cmd, shell=True, capture_output=True, text=True)
    if out.returncode != 0:
        tail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        raise RuntimeError(f"{cmd!r} exited with {out.returncode}: {tail[0]}")
    found = [
        next((g for g in m.groups() if g), m.group(0))
        for m in re.finditer(extract, out.stdout)
    ]
    if not found:
        raise RuntimeError(f"{cmd!r} printed no figure matching {extract!r}")
    try:
        return float(found[-1])
    except ValueError:
        raise RuntimeError(f"{cmd!r}: {found[-1]!r} is not a figure") from None


def quartiles(xs):
    if len(xs) < 2:
        return (xs[0], xs[0])
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[0], q[2])


def sitting(args):
    pairs = []
    for i in range(args.pairs):
        order = ["ours", "peer"] if i % 2 == 0 else ["peer", "ours"]
        got = {}
        for who in order:
            got[who] = figure(getattr(args, who), args.extract)
        pairs.append(got)
        if not args.json:
            print(
                f"pair {i + 1}: ours {got['ours']:.3f} ms, peer {got['peer']:.3f} ms, "
                f"ratio {got['ours'] / got['peer']:.3f} ({' then '.join(order)})",
                flush=True,
            )
    ratios = [p["ours"] / p["peer"] for p in pairs]
    peer_median = statistics.median(p["peer"] for p in pairs)
    noisy = args.reference_peer is not None and peer_median > args.noisy * args.reference_peer
    return {
        "pairs": pairs,
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_iqr": list(quartiles(ratios)),
        "ours_median_ms": statistics.median(p["ours"] for p in pairs),
        "peer_median_ms": peer_median,
        "noisy": noisy,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", required=True, help="the command measuring ours")
    ap.add_argument("--peer", required=True, help="the command measuring the peer")
    ap.add_argument("--pairs", type=int, default=7, help="pairs a sitting (at least 7)")
    ap.add_argument("--extract", default=DEFAULT_EXTRACT, help="regex, group 1 = ms")
    ap.add_argument("--reference-peer", type=float, default=None,
                    help="the peer's ms in the table's reference run")
    ap.add_argument("--noisy", type=float, default=1.5,
                    help="a peer this many times its reference marks the sitting noisy")
    ap.add_argument("--sittings", type=int, default=3, help="sittings at most")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = ap.parse_args()
    if args.pairs < 7:
        ap.error("--pairs must be at least 7: fewer cannot outvote a noisy pair")
    results = []
    try:
        for s in range(args.sittings):
            r = sitting(args)
            results.append(r)
            if not args.json:
                ref = (
                    f"; peer {r['peer_median_ms']:.3f} ms against its reference "
                    f"{args.reference_peer:.3f}: {'NOISY' if r['noisy'] else 'ok'}"
                    if args.reference_peer is not None else ""
                )
                print(
                    f"sitting {s + 1}: ratio {r['ratio_median']:.3f} "
                    f"[{r['ratio_min']:.3f}, {r['ratio_max']:.3f}], "
                    f"IQR [{r['ratio_iqr'][0]:.3f}, {r['ratio_iqr'][1]:.3f}] over "
                    f"{len(r['pairs'])} pairs{ref}",
                    flush=True,
                )
            if not r["noisy"]:
                break
    except RuntimeError as e:
        print(f"peer-protocol: {e}", file=sys.stderr)
        return 1
    last = results[-1]
    if args.json:
        print(json.dumps({"sittings": results, "result": last}))
    return 3 if last["noisy"] else 0


if __name__ == "__main__":
    sys.exit(main())
