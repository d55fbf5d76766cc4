#!/usr/bin/env bash
# Pack the MLX CUDA plugin directory into one .tar.xz, to move it to a GPU
# machine: the archive holds one directory, mlx-cuda/, to unpack into a
# plugins directory there, and then complete with its CUDA runtime there:
#
#   tar -C ~/.rlx/plugins -xJf mlx-cuda-plugin.tar.xz
#   ~/.rlx/plugins/mlx-cuda/mlx-cuda-runtime.sh [DIR]
#
# usage: pack-cuda-plugin.sh [--plugin-dir DIR] [--keep-arch SM] OUT.tar.xz
#
#   --plugin-dir  the directory to pack; default: this checkout's
#                 target/release/plugins/mlx-cuda, else target/debug/...
#   --keep-arch   keep only the GPU code for compute capability SM (90 for
#                 H100/H200) in libmlx, with the tool named by
#                 $CUDA_KEEP_ARCH_TOOL (a Python script taking IN OUT SM).
#                 The result runs only on GPUs of that architecture.
#
# Before packing, the plugin library built beside the directory
# (<profile>/librlx_mlx.so) is copied into it by `cargo xtask cuda-plugin`.
# In the archive libmlx (mlx/lib/mlx-cu.so) is stripped (--strip-unneeded),
# librlx_mlx.so has its debug info stripped, and nvidia/ (links into this
# machine's CUDA runtime) is left out. The directory itself is not changed
# beyond the copy of librlx_mlx.so.
set -euo pipefail

die() { printf 'pack-cuda-plugin.sh: %s\n' "$*" >&2; exit 2; }
usage() { sed -n '/^# usage:/,/^#  *The result runs/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
pd="" sm="" out=""
while (($#)); do
    case $1 in
        --plugin-dir) [[ $# -ge 2 ]] || die "--plugin-dir needs a directory"; pd=$2; shift 2 ;;
        --keep-arch) [[ $# -ge 2 ]] || die "--keep-arch needs an SM number"; sm=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [[ -z $out ]] || { usage >&2; die "one OUT at most"; }; out=$1; shift ;;
    esac
done
[[ -n $out ]] || { usage >&2; exit 2; }
if [[ -n $sm ]]; then
    [[ $sm =~ ^[0-9]+$ ]] || die "--keep-arch takes a compute capability like 90, not '$sm'"
    [[ -n ${CUDA_KEEP_ARCH_TOOL:-} ]] ||
        die "--keep-arch needs CUDA_KEEP_ARCH_TOOL, a Python script taking IN OUT SM"
    [[ -f $CUDA_KEEP_ARCH_TOOL ]] || die "CUDA_KEEP_ARCH_TOOL=$CUDA_KEEP_ARCH_TOOL does not exist"
fi
if [[ -z $pd ]]; then
    for p in release debug; do
        if [[ -f $root/target/$p/plugins/mlx-cuda/mlx/lib/mlx-cu.so ]]; then
            pd=$root/target/$p/plugins/mlx-cuda
            break
        fi
    done
    [[ -n $pd ]] || die "no target/{release,debug}/plugins/mlx-cuda: build with RLX_MLX_CUDA=1 first"
fi
[[ -f $pd/mlx/lib/mlx-cu.so ]] || die "$pd is not an MLX CUDA plugin directory (no mlx/lib/mlx-cu.so)"
pd=$(cd "$pd" && pwd)

# The copy step: <profile>/librlx_mlx.so into the directory, needing the
# directory's renamed libmlx (mlx-cu.so), by `cargo xtask cuda-plugin`
# (build-support/elf_names.rs says why a plain copy will not do).
lib=librlx_mlx.so
profile=$(cd "$pd/../.." && pwd)
if [[ -f $profile/$lib ]]; then
    (cd "$root" && cargo xtask cuda-plugin --profile-dir "$profile")
elif [[ -f $pd/$lib ]]; then
    echo "no $profile/$lib: packing the $lib already in $pd"
else
    echo "warning: no $lib built beside $pd: packing without the plugin library" >&2
fi

stage=$(mktemp -d)
trap 'rm -rf -- "$stage" "${tmp:-}"' EXIT
mkdir "$stage/mlx-cuda"
# Everything but nvidia/ and the two libraries rewritten below.
tar -C "$pd" --exclude=./nvidia --exclude='./.*' --exclude=./mlx/lib/mlx-cu.so \
    --exclude="./$lib" -cf - . | tar -C "$stage/mlx-cuda" -xf -

mlx=$stage/mlx-cuda/mlx/lib/mlx-cu.so
strip --strip-unneeded -o "$mlx" "$pd/mlx/lib/mlx-cu.so"
if [[ -n $sm ]]; then
    python3 "$CUDA_KEEP_ARCH_TOOL" "$mlx" "$mlx.sm" "$sm"
    mv -f -- "$mlx.sm" "$mlx"
fi
if [[ -f $pd/$lib ]]; then
    strip --strip-debug -o "$stage/mlx-cuda/$lib" "$pd/$lib"
fi

tmp=$out.tmp.$$
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner -cf - mlx-cuda |
    xz -T0 -9 >"$tmp"
mv -f -- "$tmp" "$out"
echo "packed $pd (${sm:+sm_$sm only, }without nvidia/) into $out: $(du -h "$out" | cut -f1)"
