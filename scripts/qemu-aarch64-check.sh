#!/usr/bin/env bash
# Run the Linux aarch64 build (scripts/build-linux-aarch64.sh) on this x86-64
# machine under qemu-aarch64 in user mode: the conformance kit on the
# aarch64 CPU plugin directory (`rlx-host plugins check`: every lowering
# entry against the CPU backend, compile/bind/run in every mode), the small
# demo model in every mode against rlx-runtime's CPU backend (`rlx-host demo
# --model small`, which fails on a mismatch), the plugin's own kernels on
# odd shapes (tests/qemu/kernels.rlxmodel) and elementwise chains in
# compiled mode (MLX's CPU code generation for arm64, the plugin's fused
# regions; tests/qemu/fused_chain.rlxmodel). The plugin's own kernels run
# their NEON versions there, the code every arm64 CPU runs, and are
# compared byte for byte with their portable loops.
#
# usage: qemu-aarch64-check.sh PROFILE_DIR
#
#   PROFILE_DIR  target/aarch64-unknown-linux-gnu/release (or debug)
#
# Needs qemu-aarch64 (apt package qemu-user-static) and the arm64 C and C++
# runtimes under /usr/aarch64-linux-gnu (g++-aarch64-linux-gnu brings
# them). Emulation is 10x to 50x slower than the real CPU: no timing here
# means anything.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

out=${1:?usage: qemu-aarch64-check.sh PROFILE_DIR}
qemu=$(command -v qemu-aarch64-static || command -v qemu-aarch64 || true)
[[ -n $qemu ]] || { echo "qemu-aarch64-check.sh: no qemu-aarch64 (apt-get install qemu-user-static)" >&2; exit 1; }
sysroot=/usr/aarch64-linux-gnu
[[ -f $sysroot/lib/ld-linux-aarch64.so.1 ]] ||
    { echo "qemu-aarch64-check.sh: no arm64 runtime under $sysroot (apt-get install g++-aarch64-linux-gnu)" >&2; exit 1; }

host=$out/rlx-host
dir=$out/plugins/mlx
# A private RLX_HOME: no plugin directory of this machine's user is
# searched, and compiled mode's kernels are cached apart from the x86 ones.
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
# MLX's CPU code generation runs `g++` from PATH; under emulation that is
# this machine's x86 compiler, whose kernels an arm64 process cannot load.
# An arm64 machine has its own g++: here the cross compiler stands in.
mkdir -p "$home/bin"
printf '#!/bin/sh\nexec aarch64-linux-gnu-g++ "$@"\n' > "$home/bin/g++"
chmod +x "$home/bin/g++"
# Kernels built in the run: the background build would be cancelled by
# these one-shot processes.
run() { PATH=$home/bin:$PATH RLX_HOME=$home RLX_MLX_BACKGROUND_COMPILE=0 "$qemu" -L "$sysroot" "$@"; }

echo "== $(file -b "$host" | cut -d, -f1-2)"
echo "== rlx-host plugins check $dir (under $(basename "$qemu"))"
run "$host" plugins check "$dir"
echo "== rlx-host demo --model small (under $(basename "$qemu"))"
run "$host" --plugin "$dir" demo --model small --runs 1
# The plugin's own kernels on shapes off every vector width (products of 5
# and 9 rows, one with a transposed operand; erf GELU, exp, sigmoid, SiLU;
# RMS and layer norm; softmax; a broadcast add), and elementwise chains
# compiled mode fuses (MLX's own kernels and the plugin's regions: one
# kernel with several outputs), built for arm64 and loaded: each output
# against the CPU backend within the demo's 1e-4 + 1e-3 * |cpu|.
# The CPU backend's outputs are saved by a run of their own (one per
# model) and compared with `--compare FILE`: `--compare cpu` runs the
# reference in a child of rlx-host, which an emulated process cannot start
# without the kernel's binfmt handler for arm64 (absent in most
# containers). Each run's own outputs are kept too
# (`$home/<model>-<mode>.safetensors`), for the byte-for-byte comparison
# below: every process under emulation costs seconds.
check() {
    local model=$1 mode=$2 name
    name=$(basename "$model" .rlxmodel)
    echo "== rlx-host run $model --mode $mode --compare (the CPU backend's saved outputs; under $(basename "$qemu"))"
    [[ -f $home/$name-cpu.safetensors ]] ||
        run "$host" run "$model" --backend cpu --output "$home/$name-cpu.safetensors" >/dev/null
    run "$host" --plugin "$dir" run "$model" --backend mlx --mode "$mode" \
        --compare "$home/$name-cpu.safetensors" --output "$home/$name-$mode.safetensors" --json |
        python3 -c '
import json, sys
d = json.load(sys.stdin)
if d.get("reference_error") is not None:
    sys.exit("no comparison: %s" % d["reference_error"])
bad = []
for o in d["outputs"]:
    if o["max_abs_err"] is None:
        sys.exit("%s: not compared" % o["name"])
    ok = o["max_abs_err"] <= 1e-4 or o["max_rel_err"] <= 1e-3
    print("  %s %s: max abs err %.3g, max rel err %.3g%s" % (
        o["name"], o["shape"], o["max_abs_err"], o["max_rel_err"], "" if ok else "  BEYOND"))
    if not ok:
        bad.append(o["name"])
sys.exit("outputs beyond 1e-4 + 1e-3 * |cpu|: %s" % bad if bad else 0)'
}
# The NEON kernels against the portable loops (RLX_MLX_PORTABLE_KERNELS=1),
# byte for byte: each NEON kernel does its portable loop's arithmetic lane
# by lane (the NEON outputs are the lazy runs' of `check`).
same_bytes() {
    local model=$1 name
    name=$(basename "$model" .rlxmodel)
    RLX_MLX_PORTABLE_KERNELS=1 run "$host" --plugin "$dir" run "$model" --backend mlx --mode lazy \
        --output "$home/$name-portable.safetensors" >/dev/null
    cmp -s "$home/$name-lazy.safetensors" "$home/$name-portable.safetensors" ||
        { echo "qemu-aarch64-check.sh: $model: the NEON kernels' outputs differ from the portable loops'" >&2; return 1; }
    echo "  the NEON kernels give the portable loops' bytes"
}
# One graph's checks, as a job of the pool below (each command fails the
# job: `set -e` holds in it, so no check may run as a condition).
graph() {
    check "$1" lazy
    same_bytes "$1"
}
for mode in lazy eager; do check tests/qemu/kernels.rlxmodel "$mode"; done
same_bytes tests/qemu/kernels.rlxmodel
for mode in lazy compiled; do check tests/qemu/fused_chain.rlxmodel "$mode"; done
# Every kernel with a portable path on the graphs that reach every branch
# of its loops (tests/static-host/tests/kernel_graphs: products of 1 to 9
# rows, unary kernels on lengths off every vector width, row kernels,
# broadcast arithmetic, Fma, the scan, and the builtin transformer and
# LSTM): on x86 they are compared with the AVX2 loops bit for bit; here
# the NEON kernels against the CPU backend and against the portable loops.
# Each emulated process takes seconds, nearly all of one core: the graphs
# run as jobs, one per core, each printing when all are done.
models=(tests/qemu/portable/*.rlxmodel)
for model in "${models[@]}"; do
    name=$(basename "$model" .rlxmodel)
    {
        graph "$model"
        touch "$home/$name.ok"
    } >"$home/$name.log" 2>&1 &
    while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n || true; done
done
wait
failed=0
for model in "${models[@]}"; do
    name=$(basename "$model" .rlxmodel)
    cat "$home/$name.log"
    [[ -f $home/$name.ok ]] || failed=$((failed + 1))
done
((failed == 0)) || { echo "qemu-aarch64-check.sh: $failed of ${#models[@]} graphs failed (above)" >&2; exit 1; }
echo "== ${#models[@]} graphs: the NEON kernels agree with the CPU backend and give the portable loops' bytes"
echo "== arm64: the conformance kit, the demo, the kernels and the fused chains agree with the CPU backend, the NEON kernels with the portable loops"
