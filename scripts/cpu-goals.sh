#!/usr/bin/env bash
# The CPU goals of docs/PERFORMANCE.md ("CPU: graphs evaluated on the
# calling thread"): one `rlx-host bench` invocation per builtin model, each
# backend in its own process, one summary line per model.
#
#   scripts/cpu-goals.sh [HOST] [PLUGIN_DIR] [MODEL...]
#
# HOST defaults to ../target-openblas/release/rlx-host (rlx-host with the
# CPU backend linked against OpenBLAS, as that document builds it),
# PLUGIN_DIR to target/release/plugins/mlx, the models to every goal's.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
host=${1:-../target-openblas/release/rlx-host}
plugin=${2:-target/release/plugins/mlx}
shift $(( $# < 2 ? $# : 2 ))
models=("$@")
if [[ ${#models[@]} -eq 0 ]]; then
    models=(exp4 gelu add-broadcast scan1000 transformer decoder-s1 decoder-s128 mlp lstm mlp-train)
fi
for m in "${models[@]}"; do
    case $m in
        exp4) runs=200 ;;
        transformer) runs=300 ;;
        decoder-s1) runs=20 ;;
        decoder-s128 | lstm) runs=10 ;;
        mlp) runs=15 ;;
        *) runs=40 ;;
    esac
    "$host" --plugin "$plugin" bench "$m" --runs "$runs" 2>&1 |
        awk -v m="$m" '/^(cpu|mlx) / { printf "%s %s:%s median %s ms (%sx); ", m, $1, $2, $7, $11 } END { print "" }'
done
