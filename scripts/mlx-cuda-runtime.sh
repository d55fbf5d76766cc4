#!/usr/bin/env bash
# Link the CUDA runtime into an MLX CUDA plugin directory (plugins/mlx-cuda/).
#
# MLX's CUDA libmlx (mlx/lib/mlx-cu.so here) finds cuBLAS, cuFFT, cuSOLVER, NVRTC, cuDNN and NCCL
# through its own DT_RPATH, $ORIGIN/../../nvidia/<package>/lib, the layout of
# NVIDIA's pip packages (site-packages/nvidia/cu13/lib, .../cudnn/lib,
# .../nccl/lib). In the plugin directory that is <plugin>/nvidia/, which this
# script makes: a directory of symlinks to, in order of preference,
#
#   1. DIR, when given: a Python `nvidia` package directory (or a
#      site-packages directory holding one), or a CUDA toolkit (its root or
#      its lib64 directory);
#   2. the `nvidia` package of the python3 on PATH ($PYTHON if set);
#   3. a CUDA toolkit at $CUDA_HOME, $CUDA_PATH or /usr/local/cuda. A toolkit
#      has no cuDNN or NCCL of its own: those are looked for beside it and in
#      the system's library cache.
#
# It then reports, library by library, where each one will be found. The
# NVIDIA driver's libcuda.so.1 is never linked: it belongs to the machine.
#
# usage: mlx-cuda-runtime.sh [--plugin-dir PLUGIN_DIR]... [--keep] [--brief] [DIR]
#
#   --plugin-dir  the directory to complete; default: the directory this
#                 script is in when it is a plugin directory (the copy the
#                 build puts there), else this checkout's
#                 target/{release,debug}/plugins/mlx-cuda, whichever exist
#   --keep        leave an existing nvidia/ as it is (only report on it)
#                 unless DIR is given
#   --brief       report only what was linked and what is missing
#
# Exit status: 0 when every CUDA library resolves (the driver aside), 1 when
# some do not, 3 when no CUDA runtime was found at all (nothing changed).
set -euo pipefail

# The libraries MLX 0.32.4's libmlx.so needs (`readelf -d`: DT_NEEDED) and,
# after them, what those need in turn; the package directory that holds each
# in NVIDIA's pip layout.
cu13_libs=(libcublasLt.so.13 libcublas.so.13 libcufft.so.12 libcusolver.so.12
           libcusparse.so.12 libnvJitLink.so.13 libnvrtc.so.13)
cudnn_libs=(libcudnn.so.9)
nccl_libs=(libnccl.so.2)
# The files of a toolkit's lib directory that belong in nvidia/cu13/lib:
# those sonames with their siblings that they open at run time
# (libnvrtc-builtins, cuDNN's sub-libraries).
cu13_globs=('libcublas.so*' 'libcublasLt.so*' 'libcufft.so*' 'libcusolver.so*'
            'libcusparse.so*' 'libnvJitLink.so*' 'libnvrtc.so*'
            'libnvrtc-builtins.so*' 'libcudart.so*')

say() { printf '%s\n' "$*"; }
found() { [[ $brief == yes ]] || say "$@"; } # a line reporting success
die() { printf 'mlx-cuda-runtime.sh: %s\n' "$*" >&2; exit 2; }

usage() { sed -n '/^# usage:/,/^# Exit status/p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
plugin_dirs=()
keep=no
brief=no
src=""
while (($#)); do
    case $1 in
        --plugin-dir) [[ $# -ge 2 ]] || die "--plugin-dir needs a directory"
                      plugin_dirs+=("$2"); shift 2 ;;
        --keep) keep=yes; shift ;;
        --brief) brief=yes; shift ;;
        -h|--help) usage; exit 0 ;;
        -*) usage >&2; die "unknown option $1" ;;
        *) [[ -z $src ]] || { usage >&2; die "one DIR at most"; }
           src=$1; shift ;;
    esac
done

if ((${#plugin_dirs[@]} == 0)); then
    if [[ -f $here/mlx/lib/mlx-cu.so ]]; then
        plugin_dirs=("$here")
    else
        for p in release debug; do
            d=$here/../target/$p/plugins/mlx-cuda
            if [[ -f $d/mlx/lib/mlx-cu.so ]]; then
                plugin_dirs+=("$(cd "$d" && pwd)")
            fi
        done
    fi
fi
((${#plugin_dirs[@]})) ||
    die "no plugin directory found: build with RLX_MLX_CUDA=1 first, or name one with --plugin-dir"
for pd in "${plugin_dirs[@]}"; do
    [[ -f $pd/mlx/lib/mlx-cu.so ]] || die "$pd is not an MLX CUDA plugin directory (no mlx/lib/mlx-cu.so)"
done

abs() { (cd "$1" && pwd); }

# Where the system's library cache has SONAME, or nothing.
cached() {
    local ldc
    ldc=$(command -v ldconfig || echo /sbin/ldconfig)
    "$ldc" -p 2>/dev/null | awk -v n="$1" '$1 == n && /x86-64/ { print $NF; exit }'
}

# --- find the runtime ------------------------------------------------------------
# mode=python: py_dirs holds `nvidia` package directories (several when a
#              namespace package is spread over several site-packages).
# mode=toolkit: tk_lib (and tk_include, if any) of a CUDA toolkit.
mode="" from=""
py_dirs=() tk_lib="" tk_include=""

is_nvidia_pkg() {
    local d
    for d in cu13 cudnn nccl cublas cuda_nvrtc; do
        [[ -d $1/$d/lib ]] && return 0
    done
    return 1
}

toolkit_lib() { # a toolkit root or lib dir -> its lib dir holding cuBLAS 13
    local d
    for d in "$1" "$1/lib64" "$1/targets/x86_64-linux/lib" "$1/lib"; do
        [[ -e $d/libcublasLt.so.13 ]] && { abs "$d"; return 0; }
    done
    return 1
}

try_toolkit() {
    local lib
    lib=$(toolkit_lib "$1") || return 1
    mode=toolkit tk_lib=$lib from="the CUDA toolkit at $1"
    local root
    for root in "$1" "$lib/.." "$lib/../.."; do
        if [[ -f $root/include/cuda_runtime.h ]]; then
            tk_include=$(abs "$root/include")
            break
        fi
    done
    return 0
}

if [[ -n $src ]]; then
    [[ -d $src ]] || die "$src is not a directory"
    if is_nvidia_pkg "$src"; then
        mode=python py_dirs=("$(abs "$src")") from="$src"
    elif [[ -d $src/nvidia ]] && is_nvidia_pkg "$src/nvidia"; then
        mode=python py_dirs=("$(abs "$src/nvidia")") from="$src/nvidia"
    elif ! try_toolkit "$src"; then
        die "$src holds neither NVIDIA's pip packages (nvidia/cu13/lib, nvidia/cudnn/lib, ...) nor a CUDA 13 toolkit (lib64/libcublasLt.so.13)"
    fi
else
    py=${PYTHON:-python3}
    if command -v "$py" >/dev/null; then
        while IFS= read -r d; do
            if [[ -n $d ]] && is_nvidia_pkg "$d"; then
                py_dirs+=("$(abs "$d")")
            fi
        done < <("$py" -c 'import nvidia; print("\n".join(list(nvidia.__path__)))' 2>/dev/null || true)
    fi
    if ((${#py_dirs[@]})); then
        mode=python from="the nvidia package of $(command -v "$py")"
    else
        for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
            if [[ -n $d && -d $d ]] && try_toolkit "$d"; then
                break
            fi
        done
    fi
fi

# --- make nvidia/ ----------------------------------------------------------------

# Remove a nvidia/ this script made: symlinks and the directories holding them.
clear_nvidia() {
    local n=$1
    if [[ -L $n ]]; then
        rm -f -- "$n"
    elif [[ -e $n ]]; then
        find "$n" -type l -delete
        find "$n" -depth -type d -empty -delete
        [[ ! -e $n ]] || die "$n holds files this script did not make: move it away first"
    fi
}

link_toolkit_dir() { # <dest lib dir> <source dir> <glob>...
    local dest=$1 dir=$2 g f
    shift 2
    mkdir -p "$dest"
    for g in "$@"; do
        for f in "$dir"/$g; do
            if [[ -e $f && ! -e $dest/${f##*/} ]]; then
                ln -s "$f" "$dest/${f##*/}"
            fi
        done
    done
    return 0
}

make_nvidia() { # <new dir>
    local new=$1 d s name lib pair g
    mkdir -p "$new"
    if [[ $mode == python ]]; then
        for d in "${py_dirs[@]}"; do
            for s in "$d"/*/; do
                s=${s%/}
                name=${s##*/}
                [[ $name == __pycache__ || -e $new/$name ]] && continue
                ln -s "$s" "$new/$name"
                say "  nvidia/$name -> $s"
            done
        done
    else
        link_toolkit_dir "$new/cu13/lib" "$tk_lib" "${cu13_globs[@]}"
        say "  nvidia/cu13/lib/ -> $tk_lib/{libcublas,libcufft,libcusolver,libnvrtc,...}"
        if [[ -n $tk_include ]]; then
            ln -s "$tk_include" "$new/cu13/include"
            say "  nvidia/cu13/include -> $tk_include"
        fi
        # cuDNN and NCCL: beside the toolkit's libraries, else where the
        # system's library cache has them.
        for pair in "cudnn:libcudnn.so.9:libcudnn*.so.9*" "nccl:libnccl.so.2:libnccl.so.2*"; do
            IFS=: read -r name lib g <<<"$pair"
            if [[ -e $tk_lib/$lib ]]; then
                d=$tk_lib
            else
                d=$(cached "$lib")
                d=${d%/*}
            fi
            if [[ -n $d && -e $d/$lib ]]; then
                link_toolkit_dir "$new/$name/lib" "$d" "$g"
                say "  nvidia/$name/lib/ -> $d/$g"
            fi
        done
    fi
    return 0
}

status=0
for pd in "${plugin_dirs[@]}"; do
    pd=$(abs "$pd")
    say "$pd:"
    if [[ $keep == yes && -z $src && ( -e $pd/nvidia || -L $pd/nvidia ) ]]; then
        say "  keeping its nvidia/ (run without --keep, or with a DIR, to remake it)"
    elif [[ -z $mode ]]; then
        say "  no CUDA runtime found: no DIR given, no Python nvidia package (pip install"
        say "  'nvidia-cublas==13.*' 'nvidia-cuda-nvrtc==13.*' 'nvidia-cuda-runtime==13.*'"
        say "  'nvidia-cufft==12.*' 'nvidia-cusolver==12.*' 'nvidia-cudnn-cu13==9.*'"
        say "  nvidia-nccl-cu13), no CUDA 13 toolkit at \$CUDA_HOME, \$CUDA_PATH or /usr/local/cuda"
        if [[ -e $pd/nvidia || -L $pd/nvidia ]]; then
            say "  (its existing nvidia/ is left as it is)"
        fi
        status=3
    else
        say "  linking the CUDA runtime from $from:"
        tmp=$pd/.nvidia.new.$$
        rm -rf -- "$tmp"
        make_nvidia "$tmp"
        clear_nvidia "$pd/nvidia"
        mv -- "$tmp" "$pd/nvidia"
    fi

    # --- report ----------------------------------------------------------------
    if [[ $brief == yes && $status == 3 && ! -e $pd/nvidia ]]; then
        continue # nothing there to report on
    fi
    missing=()
    for pair in "${cu13_libs[@]/#/cu13:}" "${cudnn_libs[@]/#/cudnn:}" "${nccl_libs[@]/#/nccl:}"; do
        pkg=${pair%%:*} lib=${pair#*:}
        hit=""
        for d in "$pd"/nvidia/*/lib; do
            if [[ -e $d/$lib ]]; then
                hit=${d#"$pd"/}
                break
            fi
        done
        if [[ -z $hit ]]; then
            c=$(cached "$lib")
            if [[ -n $c ]]; then
                hit="the system library cache ($c)"
            fi
        fi
        if [[ -n $hit ]]; then
            found "  $lib: $hit"
        else
            say "  $lib: NOT FOUND (pip package dir nvidia/$pkg)"
            missing+=("$lib")
        fi
    done
    if [[ -e $pd/nvidia/cu13/include/cuda_runtime.h ]]; then
        found "  CUDA headers (for MLX's run-time kernel compiles): nvidia/cu13/include"
    elif [[ -e $pd/nvidia/cu13/include ]]; then
        say "  CUDA headers: nvidia/cu13/include lacks cuda_runtime.h, and MLX will look nowhere"
        say "  else: install nvidia-cuda-runtime==13.* there"
        missing+=(cuda_runtime.h)
    else
        h=""
        for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda; do
            if [[ -n $d && -f $d/include/cuda_runtime.h ]]; then
                h=$d/include
                break
            fi
        done
        if [[ -n $h ]]; then
            found "  CUDA headers: $h (through CUDA_HOME, CUDA_PATH or /usr/local/cuda, as now set)"
        else
            say "  CUDA headers: NOT FOUND; MLX compiles kernels at run time and needs them:"
            say "  install nvidia-cuda-runtime==13.* or set CUDA_HOME to a CUDA 13 toolkit"
            missing+=(cuda_runtime.h)
        fi
    fi
    if [[ -n $(cached libcuda.so.1) ]]; then
        found "  libcuda.so.1 (the NVIDIA driver): $(cached libcuda.so.1)"
    else
        say "  libcuda.so.1 (the NVIDIA driver): not on this machine; the plugin loads only"
        say "  where the driver is installed"
    fi
    if ((${#missing[@]})) && ((status == 0)); then
        status=1
    fi
done
exit "$status"
