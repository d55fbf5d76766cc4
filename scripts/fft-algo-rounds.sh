#!/usr/bin/env bash
# rlx-runtime's fft_algo_bench example (tests/runtime-suite/examples) on the
# CPU backend and on the MLX plugin in each mode, alternated for ROUNDS
# rounds (default 3), each in its own process; prints every line, then the
# best µs of each case per backend and its ratio to the CPU backend's.
# Build first: cargo build --release -p rlx-runtime-suite --example fft_algo_bench
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exe=${FFT_ALGO_BENCH:-target/release/examples/fft_algo_bench}
rounds=${1:-3}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((r = 1; r <= rounds; r++)); do
  for b in cpu lazy eager compiled; do
    if [[ $b == cpu ]]; then out=$(timeout 600 "$exe" cpu); else out=$(RLX_SUITE_MODE=$b timeout 600 "$exe" mlx); fi
    sed "s/^/$b /" <<<"$out" | tee -a "$log"
  done
done
echo
python3 - "$log" <<'PY'
import re, sys
best = {}
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) rows=(\d+)\s+n=(\d+)\s+native:\s+([\d.]+) µs\s+pocketfft:\s+([\d.]+) µs", line)
    if not m:
        continue
    b, rows, n, nat, pf = m.group(1), int(m.group(2)), int(m.group(3)), float(m.group(4)), float(m.group(5))
    for algo, v in (("native", nat), ("pocketfft", pf)):
        k = (rows, n, algo, b)
        best[k] = min(best.get(k, v), v)
cases = sorted({(r, n, a) for (r, n, a, _) in best})
print("%-22s %10s %18s %18s %18s" % ("case (best µs)", "cpu", "lazy", "eager", "compiled"))
for r, n, a in cases:
    cpu = best[(r, n, a, "cpu")]
    cells = ["%10.1f" % cpu]
    for b in ("lazy", "eager", "compiled"):
        v = best.get((r, n, a, b))
        cells.append("%10.1f %5.2fx" % (v, v / cpu) if v else "%18s" % "-")
    print("%-22s %s" % ("rows=%d n=%d %s" % (r, n, a), " ".join(cells)))
PY
