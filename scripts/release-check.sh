#!/usr/bin/env bash
# The path a user takes, end to end, on this build: pack the Linux x86-64
# plugin directory into its release archive (`cargo xtask package`), sign
# the release with a fresh key, install the archive into an empty RLX home
# that trusts that key (`rlx-host plugins install`), and run the demo from
# there with an rlx-host outside the build tree (so that discovery finds
# only the installed plugin).
#
# usage: release-check.sh [--release] [--model small|decoder]
set -euo pipefail
cd "$(dirname "$0")/.."

profile=debug model=small
while (($#)); do
    case $1 in
        --release) profile=release; shift ;;
        --model) model=$2; shift 2 ;;
        *) echo "usage: release-check.sh [--release] [--model small|decoder]" >&2; exit 2 ;;
    esac
done
work=$(mktemp -d)
trap 'rm -rf -- "$work"' EXIT

build=(cargo build -q -p rlx-plugin-mlx -p rlx-host)
[[ $profile == release ]] && build+=(--release)
"${build[@]}"
cargo xtask keygen --dir "$work/keys" --name release-check
cargo xtask package "--$profile" --only linux-x86_64 --out "$work/dist" --sign "$work/keys/release-check.key"
mkdir -p "$work/home/trusted-keys" "$work/bin"
cp "$work/keys/release-check.pub" "$work/home/trusted-keys/"
cp "target/$profile/rlx-host" "$work/bin/"
export RLX_HOME=$work/home
unset RLX_BACKEND_PLUGINS
"$work/bin/rlx-host" plugins install "$work"/dist/rlx-mlx-*-linux-x86_64.tar.xz
"$work/bin/rlx-host" plugins list
"$work/bin/rlx-host" demo --model "$model" --runs 2
