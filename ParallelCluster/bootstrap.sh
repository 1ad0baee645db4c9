#!/bin/bash
# ParallelCluster OnNodeConfigured action (cluster-config.yaml): installs dptrain's dependencies,
# builds dptrain in /opt/dptrain on this node, for this node's CPU (-march=native), and installs
# it under /usr/local (make install: dptrain on the PATH, its configs and Slurm scripts in
# /usr/local/share/dptrain), after ParallelCluster has set the node up (Slurm, EFA, FSx mounted).
# ParallelCluster runs it as root.
#
#   bootstrap.sh SOURCE [INSTALL_DIR]
#     SOURCE       the dptrain source: s3://.../dptrain-src.tar.gz (from `git archive`), a git URL,
#                  or a directory (e.g. a checkout on /fsx)
#     INSTALL_DIR  where to put and build it (default /opt/dptrain; DPTRAIN_ROOT=/opt/dptrain
#                  makes the Slurm scripts use this build instead of the installed one)
#
# The packages are those of scripts/install-deps (read from the source, so the list lives in one
# place), without the ones only its tests use: a local Slurm and munge must not be installed
# beside ParallelCluster's own. Ubuntu 22.04 names them as Debian does. NCCL is added when the
# node's package sources offer it (the NVIDIA CUDA repository), so that the build finds it.
# Output: /var/log/dptrain-bootstrap.log. Safe to run again (a node replaced, a new version).
set -euo pipefail
src=${1:?usage: bootstrap.sh SOURCE [INSTALL_DIR]}
dir=${2:-/opt/dptrain}
exec > >(tee -a /var/log/dptrain-bootstrap.log) 2>&1
echo "dptrain bootstrap on $(hostname) at $(date -u +%FT%TZ): $src -> $dir"

. /etc/os-release
if [ "${ID:-}" != ubuntu ]; then
  echo "bootstrap.sh: this script installs with apt on Ubuntu (Image: Os: ubuntu2204); found ${PRETTY_NAME:-unknown}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt_get() { apt-get -o DPkg::Lock::Timeout=600 -y -q "$@"; }   # waits for boot-time apt runs

# --- the source
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
case $src in
  s3://*)
    aws s3 cp --only-show-errors "$src" "$tmp/src.tar.gz"
    mkdir -p "$tmp/src" && tar -xzf "$tmp/src.tar.gz" -C "$tmp/src" ;;
  *.git|https://*|git@*)
    command -v git >/dev/null || { apt_get update && apt_get install --no-install-recommends git; }
    git clone --depth 1 "$src" "$tmp/src" ;;
  *)
    [ -f "$src/Makefile" ] || { echo "bootstrap.sh: $src holds no dptrain source (no Makefile)" >&2; exit 1; }
    cp -a "$src" "$tmp/src" ;;
esac
[ -f "$tmp/src/scripts/install-deps" ] || { echo "bootstrap.sh: $src: no scripts/install-deps in it" >&2; exit 1; }

# --- the packages: scripts/install-deps's pkgs (building and running; its test_pkgs are not needed)
read -r -a pkgs <<<"$(sed -n '/^pkgs=(/,/)/p' "$tmp/src/scripts/install-deps" | tr -d '()' | sed 's/^pkgs=//' | tr '\n' ' ')"
[ ${#pkgs[@]} -ge 10 ] || { echo "bootstrap.sh: could not read the package list of scripts/install-deps" >&2; exit 1; }
apt_get update
if apt-cache policy libnccl-dev 2>/dev/null | grep 'Candidate: [0-9]' >/dev/null; then
  pkgs+=(libnccl2 libnccl-dev)
elif ! [ -e /usr/include/nccl.h ] && ! [ -e /usr/local/cuda/include/nccl.h ]; then
  # Without NCCL the build's GPU ranks sum their gradients through host memory (MPI): it runs, and
  # says so at start, but the GPUs' NVLink and GPUDirect over EFA go unused.
  echo "bootstrap.sh: warning: no NCCL here (no libnccl-dev in the package sources, no nccl.h): the build will" \
       "have none; add NVIDIA's CUDA repository (its cuda-keyring package) and run bootstrap.sh again" >&2
fi
echo "installing: ${pkgs[*]}"
apt_get install --no-install-recommends "${pkgs[@]}"

# --- the build, into a fresh directory that replaces the old one only once it is built
rm -rf "$dir.new"
mv "$tmp/src" "$dir.new"
make -C "$dir.new" -j"$(nproc)" all
make -C "$dir.new" install PREFIX=/usr/local
rm -rf "$dir.old"
if [ -d "$dir" ]; then mv "$dir" "$dir.old"; fi
mv "$dir.new" "$dir"
rm -rf "$dir.old"
/usr/local/bin/dptrain --version
echo "dptrain bootstrap done on $(hostname) at $(date -u +%FT%TZ): /usr/local/bin/dptrain (built in $dir)"
