#!/usr/bin/env bash
# Build the MLX plugin and rlx-host, put the plugin where rlx-host's
# default discovery finds it (<executable dir>/plugins/mlx/), and run the
# demo: the plugin table, then a small transformer on the MLX plugin in
# every mode with parity and timing against rlx-runtime's CPU backend.
# Run from the repository root; extra arguments go to `rlx-host demo`
# (e.g. `--runs 20`, `--seed 3`, `-v`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

cargo build --release -p rlx-plugin-mlx -p rlx-host

# The plugin-mlx build script assembles the MLX runtime libraries into
# target/release/plugins/mlx/; the plugin library itself goes next to them.
lib=target/release/librlx_mlx.so
if [[ ! -f "$lib" && -f target/release/librlx_mlx.dylib ]]; then
    lib=target/release/librlx_mlx.dylib # macOS
fi
mkdir -p target/release/plugins/mlx
cp "$lib" target/release/plugins/mlx/

exec target/release/rlx-host demo "$@"
