#!/usr/bin/env bash
# Distributed figures on one machine, over loopback: a model as a pipeline
# of one stage per worker against the whole model in one process, and
# data-parallel digits training with 1 and 2 workers, and a tensor-parallel
# MLP over MLX's ring against one process.
#
# usage: scripts/dist-bench.sh [RLX_HOST] [MODEL...]
#   RLX_HOST  the rlx-host binary (default target/release/rlx-host, whose
#             plugins/ directory holds the MLX plugin)
#   MODEL     builtins to pipeline (default: transformer decoder-s1 mlp)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
H=${1:-$root/target/release/rlx-host}
shift || true
models=("$@"); ((${#models[@]})) || models=(transformer decoder-s1 mlp)
[[ -x $H ]] || { echo "no $H: cargo build --release -p rlx-host -p rlx-plugin-mlx" >&2; exit 2; }
port=$((32000 + RANDOM % 2000))
peers() { local n=$1; port=$((port + 10)); local p=(); for ((i = 0; i < n; i++)); do p+=("127.0.0.1:$((port + i))"); done; (IFS=,; echo "${p[*]}"); }
run_group() { # WORLD MODE -- coordinator args
    local world=$1 mode=$2; shift 2
    export WORLD=$world PEERS; PEERS=$(peers "$world")
    local pids=()
    for ((r = 1; r < world; r++)); do RANK=$r "$H" worker --mode "$mode" 2>/dev/null & pids+=($!); done
    RANK=0 "$H" dist "$@"
    wait "${pids[@]}"
}
for m in "${models[@]}"; do
    for mode in lazy compiled; do
        echo "== pipeline $m, 2 workers, $mode"
        run_group 3 "$mode" pipeline "$m" --batches 300 --local-mode "$mode"
    done
done
for form in "" --gather; do
    echo "== tensor-parallel MLP 1024 -> 4096 -> 1024, batch 8, 2 workers ${form:-(all_sum)}"
    run_group 3 lazy tensor-parallel --batch 8 --d 1024 --h 4096 --batches 100 $form
done
for w in 1 2; do
    echo "== data-parallel digits, $w worker(s), averaged by the coordinator"
    run_group $((w + 1)) lazy train
    echo "== data-parallel digits, $w worker(s), resident (MLX's ring inside the step)"
    run_group $((w + 1)) lazy train --resident
done
