#!/usr/bin/env bash
# Copies a dataset's shards from FSx for Lustre (a directory) or S3 (s3://bucket/prefix) to this
# node's local NVMe, so that training reads local disks instead of the shared filesystem. Run it
# once per node: `srun --ntasks-per-node=1 slurm/stage-data.sh SRC` (multi-node.sbatch does with
# STAGE_FROM, slurm/stage-data.sbatch as a job of its own). The copy, its checks and the reuse of
# an earlier copy are `dptrain stage`, the same code as dptrain's --stage-dir (src/data/stage.cpp).
#
#   stage-data.sh SRC [DEST]         copy (or reuse a valid earlier copy); prints DEST on stdout
#   stage-data.sh --write-sums DIR   write DIR/SHA256SUMS (sha256sum format) for later copies to check
#
# - DEST defaults to STAGE_ROOT/<last part of SRC>; STAGE_ROOT defaults to the first of
#   /opt/dlami/nvme (Deep Learning AMI), /scratch (ParallelCluster's EphemeralVolume MountDir in
#   ParallelCluster/cluster-config.yaml) and /tmp that exists.
# - From a directory: files are copied under a temporary name, flushed and renamed (an interrupted
#   copy never leaves a partial shard); every size is checked, and every file against the source's
#   SHA256SUMS when it has one (STAGE_SHA256=0 skips it); a complete earlier copy whose source list
#   (names, sizes, modification times) is unchanged is reused; an outdated one is completed.
# - From S3: `aws s3 sync` copies what is new or changed; then the same SHA256SUMS check.
# - Progress and the copy rate go to stderr; the last line on stdout is DEST. Exit 0 when DEST
#   holds a verified copy, 1 otherwise.
# Settings: STAGE_ROOT, STAGE_PARALLEL (parallel copy/checksum streams, default 8), STAGE_SHA256,
# DPTRAIN (the dptrain binary; default: build/dptrain of the checkout holding this script, else
# dptrain on the PATH).
set -euo pipefail
me="stage-data[$(hostname -s)]"
die() { echo "$me: error: $*" >&2; exit 1; }
PAR=${STAGE_PARALLEL:-8}
if [ -z "${DPTRAIN:-}" ]; then
  DPTRAIN=$(cd "$(dirname "$0")/.." && pwd)/build/dptrain
  [ -x "$DPTRAIN" ] || DPTRAIN=$(command -v dptrain) || die "dptrain not found: neither $DPTRAIN nor on the PATH; build or install it, or set DPTRAIN"
fi
[ -x "$DPTRAIN" ] || die "$DPTRAIN: not found; build dptrain (make) or set DPTRAIN"

if [ "${1:-}" = --write-sums ]; then
  exec "$DPTRAIN" stage --write-sums "${2:?usage: stage-data.sh --write-sums DIR}" --streams "$PAR"
fi

src=${1:?usage: stage-data.sh SRC [DEST] | --write-sums DIR}
src=${src%/}
if [ -z "${STAGE_ROOT:-}" ]; then
  for STAGE_ROOT in /opt/dlami/nvme /scratch /tmp; do [ -d "$STAGE_ROOT" ] && [ -w "$STAGE_ROOT" ] && break; done
fi
dest=${2:-$STAGE_ROOT/${src##*/}}
dest=${dest%/}
sums=()
[ "${STAGE_SHA256:-1}" = 1 ] || sums=(--no-sums)

if [[ $src != s3://* ]]; then
  # dptrain's progress lines stream to stderr under this script's name. The filter is waited for
  # before anything else is said or the script ends, so its last lines are out by then.
  exec 4> >(sed -u "s/^dptrain stage/$me/" >&2)
  filter=$!
  rc=0
  out=$("$DPTRAIN" stage "$src" "$dest" --streams "$PAR" "${sums[@]}" 2>&4) || rc=$?
  exec 4>&-
  wait "$filter" || true
  [ "$rc" = 0 ] || die "staging $src to $dest failed (above)"
  echo "$out"
  exit 0
fi

command -v aws >/dev/null || die "the aws CLI is needed to copy from $src"
mkdir -p "$dest"
t0=$(date +%s.%N)
aws s3 sync "$src/" "$dest/" --only-show-errors --exclude '.stage-*' --exclude '*/.stage-*' --delete >&2 \
  || die "aws s3 sync $src $dest failed"
t1=$(date +%s.%N)
bytes=$(find "$dest" -type f ! -name '.stage-*' -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f", s }')
if [ -f "$dest/SHA256SUMS" ] && [ "${STAGE_SHA256:-1}" = 1 ]; then
  "$DPTRAIN" stage --check "$dest" --streams "$PAR" 2> >(sed "s/^dptrain stage/$me/" >&2) \
    || die "checksums in $dest do not match its SHA256SUMS (a damaged copy or source)"
fi
awk -v b="$bytes" -v t0="$t0" -v t1="$t1" -v me="$me" -v s="$src" 'BEGIN {
  t = t1 - t0; if (t < 0.001) t = 0.001
  printf "%s: synced %s: %.1f MiB in %.1f s\n", me, s, b / 1048576, t }' >&2
echo "$dest"
