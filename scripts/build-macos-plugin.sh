#!/usr/bin/env bash
# Build the macOS (Apple silicon) MLX plugin directory on Linux:
# target/aarch64-apple-darwin/release/plugins/mlx/ with librlx_mlx.dylib,
# MLX's libmlx.dylib and mlx.metallib from the pinned mlx-metal wheel.
# `--debug`: the dev profile instead, in .../debug/plugins/mlx (what CI
# builds to check the build and its load commands: a release build of the
# plugin crate, twice, is most of this script's time).
# docs/MACOS.md says what it does and what a Mac user does with the result.
# Needs: rustup, python3 with pip, network access to PyPI and crates.io the
# first time (ziglang, cargo-zigbuild, macholib and the wheel are cached).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=aarch64-apple-darwin
PROFILE=release
PROFILE_FLAG=(--release)
if [[ ${1:-} == --debug ]]; then
    PROFILE=debug
    # No debug info: faster, and no build-machine path in the C++ objects'
    # DWARF (the Rust side's is remapped below). Dependencies unoptimised
    # (the workspace's dev profile builds them at -O2 for the x86 tests'
    # speed): this build is checked, never run.
    export CARGO_PROFILE_DEV_DEBUG=0
    PROFILE_FLAG=(--config 'profile.dev.package."*".opt-level=0')
elif [[ -n ${1:-} ]]; then
    echo "usage: build-macos-plugin.sh [--debug]" >&2
    exit 2
fi
CACHE=${RLX_MLX_METAL_CACHE:-$HOME/.cache/rlx/mlx-metal-0.32.4}
STUBS=$PWD/target/macos-stubs
OUT=target/$TARGET/$PROFILE/plugins/mlx

# The cross toolchain: Rust's target, zig as C/C++ compiler and Mach-O
# linker (with macOS's libc stubs), cargo-zigbuild to drive it, and macholib
# to read the result.
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
python3 -c "import ziglang" 2>/dev/null || python3 -m pip install --quiet ziglang
python3 -c "import macholib" 2>/dev/null || python3 -m pip install --quiet macholib
command -v cargo-zigbuild >/dev/null || cargo install --locked cargo-zigbuild

# The mlx-metal wheel, pinned (file and sha256) in plugin-mlx/build/gpu.rs.
FILE=$(sed -n 's/.*file: "\(mlx_metal-[^"]*\.whl\)".*/\1/p' plugin-mlx/build/gpu.rs)
SHA=$(grep -A1 "file: \"$FILE\"" plugin-mlx/build/gpu.rs | sed -n 's/.*sha256: "\([0-9a-f]*\)".*/\1/p')
[[ -n $FILE && -n $SHA ]] || { echo "build-macos-plugin: no mlx-metal pin in plugin-mlx/build/gpu.rs" >&2; exit 1; }
mkdir -p "$CACHE"
if ! echo "$SHA  $CACHE/$FILE" | sha256sum -c --quiet 2>/dev/null; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: --platform macosx_14_0_arm64 \
        --python-version 3.12 --dest "$CACHE" "mlx-metal==0.32.4"
    echo "$SHA  $CACHE/$FILE" | sha256sum -c --quiet
    rm -rf "$CACHE/wheel"
fi
[[ -f $CACHE/wheel/mlx/lib/libmlx.dylib ]] || python3 -m zipfile -e "$CACHE/$FILE" "$CACHE/wheel"
export MLX_DIR=$CACHE/wheel/mlx

# Link stubs (scripts/macos_stubs.py says why): Accelerate now, libc++
# after a first link has shown which C++ runtime symbols the plugin needs.
python3 scripts/macos_stubs.py accelerate "$STUBS"
[[ -f $STUBS/libcxxsystem.tbd ]] || python3 - "$STUBS" <<'PY'
import sys; sys.path.insert(0, "scripts"); import macos_stubs as m
open(sys.argv[1] + "/libcxxsystem.tbd", "w").write(m.tbd("/usr/lib/libc++.1.dylib", ["___gxx_personality_v0"]))
PY

# The same flags in both links, so the second only relinks: the system
# libc++ (not zig's static copy) through its stub, a relocatable install
# name, no build-machine path in the binary, macOS 14 as the wheel. Symbols
# no stub names are left to dyld's flat lookup in the first link only: the
# check below fails the build if any remain.
export MACOSX_DEPLOYMENT_TARGET=14.0
export CXXSTDLIB=
export CARGO_TARGET_AARCH64_APPLE_DARWIN_RUSTFLAGS="-C link-arg=-F$STUBS -C link-arg=-L$STUBS \
-C link-arg=-nostdlib++ -C link-arg=-lcxxsystem -C link-arg=-Wl,-undefined,dynamic_lookup \
-C link-arg=-Wl,-install_name,@rpath/librlx_mlx.dylib \
--remap-path-prefix=$PWD=. --remap-path-prefix=$HOME=~"
build() { cargo zigbuild "${PROFILE_FLAG[@]}" --target "$TARGET" -p rlx-plugin-mlx "$@"; }
build
LIB=target/$TARGET/$PROFILE/librlx_mlx.dylib
python3 scripts/macos_stubs.py libcxx "$LIB" "$STUBS"
touch plugin-mlx/src/lib.rs  # relink against the complete stub
build
python3 scripts/macos_stubs.py check "$LIB"

# The directory a Mac user drops into ~/.rlx/plugins: MLX looks for
# mlx.metallib beside libmlx.dylib, and the plugin finds libmlx through its
# LC_RPATH (@loader_path/mlx/lib).
# The kernel builder (plugin-mlx/build/kernel_builder.rs), as the build
# script compiled it: compiled mode starts it with
# RLX_MLX_BACKGROUND_COMPILE=process (MLX keeps no Metal kernels on disk, so
# not by default).
BUILDER=$(ls -t target/$TARGET/$PROFILE/build/rlx-plugin-mlx-*/out/rlx-mlx-kernel-builder | head -1)
rm -rf "$OUT"
mkdir -p "$OUT/mlx/lib"
cp "$LIB" "$BUILDER" "$OUT/"
cp "$MLX_DIR/lib/libmlx.dylib" "$MLX_DIR/lib/mlx.metallib" "$OUT/mlx/lib/"
[[ -f $MLX_DIR/lib/libjaccl.dylib ]] && cp "$MLX_DIR/lib/libjaccl.dylib" "$OUT/mlx/lib/"
if grep -qa -e "$PWD" -e "$HOME/" "$OUT/librlx_mlx.dylib"; then
    echo "build-macos-plugin: warning: a build-machine path is left in librlx_mlx.dylib" >&2
fi
echo "macOS plugin directory: $OUT"
