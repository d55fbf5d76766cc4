#!/usr/bin/env bash
# Build the MLX plugin directory and rlx-host for Linux aarch64 (AWS
# Graviton, NVIDIA Grace Hopper, DGX Spark) on an x86-64 Linux machine:
#
#   target/aarch64-unknown-linux-gnu/release/plugins/mlx/   the CPU plugin directory
#   target/aarch64-unknown-linux-gnu/release/rlx-host       the CLI
#   target/aarch64-unknown-linux-gnu/release/plugins/mlx-cuda/   with --cuda: the CUDA
#       directory (Grace Hopper, DGX Spark) from the pinned mlx-cuda-13 aarch64
#       wheel, laid out as on x86-64 (docs/CUDA.md); its nvidia/ is made on
#       the machine that runs it (mlx-cuda-runtime.sh, or rlx-host plugins install)
#
# The plugin is compiled against the pinned mlx-cpu 0.32.4 aarch64 wheel
# (shim/build.rs, beside the x86-64 pin) with Debian's cross GCC: MLX's
# Linux wheels are built with libstdc++, so the shim's C++ must be too
# (zig's libc++ would not match MLX's std::vector and std::string).
#
# usage: build-linux-aarch64.sh [--debug] [--cuda] [--check]
#
#   --debug   a debug build (target/aarch64-unknown-linux-gnu/debug/...)
#   --cuda    also lay out and complete plugins/mlx-cuda/ (about 90 MB of
#             wheel the first time, cached under ~/.cache/rlx)
#   --check   then run the aarch64 build under qemu-aarch64 (user mode):
#             `rlx-host plugins check` (the conformance kit) on the plugin
#             directory and `rlx-host demo --model small`
#
# CARGO_TARGET_DIR is honoured (the paths above are then under it).
#
# Needs: rustup; apt packages g++-aarch64-linux-gnu (and, for --check,
# qemu-user-static); pip access to PyPI the first time (the wheel is
# cached under ~/.cache/rlx/mlx-cpu-0.32.4-aarch64).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=aarch64-unknown-linux-gnu
profile=release check=0 cuda=0
while (($#)); do
    case $1 in
        --debug) profile=debug; shift ;;
        --cuda) cuda=1; shift ;;
        --check) check=1; shift ;;
        -h|--help) sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        *) echo "build-linux-aarch64.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

command -v aarch64-linux-gnu-g++ >/dev/null ||
    { echo "build-linux-aarch64.sh: needs aarch64-linux-gnu-g++ (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
export CXX_aarch64_unknown_linux_gnu=aarch64-linux-gnu-g++
flag=()
[[ $profile == release ]] && flag=(--release)
((cuda)) && export RLX_MLX_CUDA=1
cargo build "${flag[@]}" --target "$TARGET" -p rlx-plugin-mlx -p rlx-host

OUT=${CARGO_TARGET_DIR:-target}/$TARGET/$profile
cp "$OUT/librlx_mlx.so" "$OUT/plugins/mlx/"
echo "Linux aarch64 plugin directory: $OUT/plugins/mlx"
if ((cuda)); then
    # The CUDA directory's copy of the library, needing its mlx-cu.so.
    (unset RLX_MLX_CUDA; cargo xtask cuda-plugin --profile-dir "$OUT")
    echo "Linux aarch64 CUDA plugin directory: $OUT/plugins/mlx-cuda"
fi
echo "Linux aarch64 rlx-host: $OUT/rlx-host"

if ((check)); then
    scripts/qemu-aarch64-check.sh "$OUT"
fi
