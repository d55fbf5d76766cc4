#!/usr/bin/env bash
# Build the MLX plugin and rlx-host, put the plugin where rlx-host's
# default discovery finds it (<executable dir>/plugins/mlx/), and run the
# demo: the plugin table, then a decoder transformer on the MLX plugin in
# every mode with parity and timing against rlx-runtime's CPU backend.
# Run from the repository root; extra arguments go to `rlx-host demo`
# (e.g. `--runs 20`, `--seed 3`, `--model small`, `-v`).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# A fast BLAS: the MLX plugin uses the system OpenBLAS when it is installed
# (blas/optimized) and MLX's bundled reference BLAS otherwise, ~60x slower
# for f32 matmul. Install it where we can (root with apt-get), else say how.
have_openblas() {
    ls /usr/lib/*-linux-gnu/libopenblas.so.0 >/dev/null 2>&1 ||
        { command -v ldconfig >/dev/null && ldconfig -p | grep -q 'libopenblas\.so\.0'; }
}
if [[ $(uname -s) == Linux ]] && ! have_openblas; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        echo "demo.sh: installing OpenBLAS (libopenblas0-pthread) for the plugin's matmuls"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null ||
            { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenblas0-pthread >/dev/null; } ||
            echo "demo.sh: could not install OpenBLAS; the demo runs on the reference BLAS (slow matmuls)" >&2
    else
        echo "demo.sh: no OpenBLAS found, so MLX's matmuls use its slow reference BLAS; install it (e.g. sudo apt-get install libopenblas0-pthread) and run again" >&2
    fi
fi

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
