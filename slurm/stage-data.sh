#!/usr/bin/env bash
# Copies a dataset's shards from FSx for Lustre (a directory) or S3 (s3://bucket/prefix) to this
# node's local NVMe, so that training reads local disks instead of the shared filesystem. Run it
# once per node: `srun --ntasks-per-node=1 slurm/stage-data.sh SRC` (multi-node.sbatch does with
# STAGE_FROM, slurm/stage-data.sbatch as a job of its own).
#
#   stage-data.sh SRC [DEST]      copy (or reuse a valid earlier copy); prints DEST on stdout
#   stage-data.sh --write-sums DIR   write DIR/SHA256SUMS (sha256sum format) for later copies to check
#
# - DEST defaults to STAGE_ROOT/<last part of SRC>; STAGE_ROOT defaults to the first of
#   /opt/dlami/nvme (Deep Learning AMI), /scratch (ParallelCluster's EphemeralVolume MountDir in
#   ParallelCluster/cluster-config.yaml) and /tmp that exists.
# - A copy is checked file by file against the source's list of files and sizes. When the source
#   has a SHA256SUMS file, the copied files are also checked against it (STAGE_SHA256=0 skips it).
# - A complete earlier copy whose source list (names, sizes, modification times) is unchanged is
#   reused without copying; an incomplete or outdated one is completed: only missing files and
#   files of another size are copied, files gone from the source are removed.
# - Progress and the copy rate go to stderr; the last line on stdout is DEST. Exit 0 when DEST
#   holds a verified copy, 1 otherwise.
# Settings: STAGE_ROOT, STAGE_PARALLEL (parallel copy/checksum streams, default 8), STAGE_SHA256.
set -euo pipefail
me="stage-data[$(hostname -s)]"
say() { echo "$me: $*" >&2; }
die() { echo "$me: error: $*" >&2; exit 1; }
PAR=${STAGE_PARALLEL:-8}

# sha_check DIR: verify DIR's files against DIR/SHA256SUMS with $PAR parallel streams.
sha_check() {
  local dir=$1 parts i rc=0
  parts=$(mktemp -d)
  (cd "$dir" && split -n "r/$PAR" SHA256SUMS "$parts/part.")
  for i in "$parts"/part.*; do
    [ -s "$i" ] || continue
    (cd "$dir" && sha256sum --quiet --strict -c "$i" >&2) &
  done
  for i in $(jobs -p); do wait "$i" || rc=1; done
  rm -rf "$parts"
  return $rc
}

if [ "${1:-}" = --write-sums ]; then
  dir=${2:?usage: stage-data.sh --write-sums DIR}
  [ -d "$dir" ] || die "$dir: no such directory"
  (cd "$dir" && find . -type f ! -name 'SHA256SUMS*' ! -name '.stage-*' -printf '%P\0' \
     | xargs -0 -r -n 16 -P "$PAR" sha256sum | LC_ALL=C sort -k2) >"$dir/SHA256SUMS.tmp"
  mv "$dir/SHA256SUMS.tmp" "$dir/SHA256SUMS"
  say "wrote $dir/SHA256SUMS ($(wc -l <"$dir/SHA256SUMS") files)"
  exit 0
fi

src=${1:?usage: stage-data.sh SRC [DEST] | --write-sums DIR}
src=${src%/}
if [ -z "${STAGE_ROOT:-}" ]; then
  for STAGE_ROOT in /opt/dlami/nvme /scratch /tmp; do [ -d "$STAGE_ROOT" ] && [ -w "$STAGE_ROOT" ] && break; done
fi
dest=${2:-$STAGE_ROOT/${src##*/}}
dest=${dest%/}
mkdir -p "$dest"

# manifest: "path<TAB>size<TAB>mtime" per file of the source, sorted by path.
list_source() {
  if [[ $src == s3://* ]]; then
    command -v aws >/dev/null || die "the aws CLI is needed to copy from $src"
    # `aws s3 ls --recursive` prints: DATE TIME SIZE KEY (the key may hold spaces)
    local prefix=${src#s3://*/}
    [ "$prefix" = "$src" ] && prefix=
    aws s3 ls --recursive "$src/" | awk -v p="${prefix:+$prefix/}" '
      { line = $0; sub(/^[^ ]+ +[^ ]+ +[0-9]+ /, "", line)
        if (substr(line, length(line)) == "/") next          # "folder" placeholder objects
        if (index(line, p) == 1) line = substr(line, length(p) + 1)
        if (line ~ /(^|\/)\.stage-/) next
        printf "%s\t%s\t%s %s\n", line, $3, $1, $2 }'
  else
    [ -d "$src" ] || die "$src: no such directory"
    find "$src" -type f ! -name '.stage-*' -printf '%P\t%s\t%T@\n'
  fi | LC_ALL=C sort
}
# the local files as "path<TAB>size", sorted
list_local() { find "$dest" -type f ! -name '.stage-*' -printf '%P\t%s\n' | LC_ALL=C sort; }

# One stager per destination at a time (two jobs sharing a node wait for each other).
exec 9>"$dest/.stage-lock"
flock 9

manifest=$(list_source) || die "cannot list $src"
[ -n "$manifest" ] || die "$src holds no files"
want=$(cut -f1,2 <<<"$manifest")
files=$(wc -l <<<"$manifest")
bytes=$(awk -F'\t' '{ s += $2 } END { printf "%.0f", s }' <<<"$manifest")
gib() { awk -v b="$1" 'BEGIN { if (b >= 1073741824) printf "%.2f GiB", b / 1073741824; else printf "%.1f MiB", b / 1048576 }'; }

if [ -f "$dest/.stage-complete" ] && [ "$(cat "$dest/.stage-manifest" 2>/dev/null)" = "$manifest" ] \
   && [ "$(list_local)" = "$want" ]; then
  say "reusing the copy in $dest of $src: $files files, $(gib "$bytes"), names and sizes match"
  echo "$dest"
  exit 0
fi

rm -f "$dest/.stage-complete"
avail=$(( $(df -Pk "$dest" | awk 'NR == 2 { print $4 }') * 1024 ))
have=$(list_local | awk -F'\t' '{ s += $2 } END { printf "%.0f", s }')
[ $((bytes - have)) -le "$avail" ] || die "$dest has $(gib "$avail") free; $src needs $(gib $((bytes - have))) more"

# What to copy: files missing here or of another size. Files no longer in the source go.
pending=$(LC_ALL=C comm -23 <(printf '%s\n' "$want") <(list_local) | cut -f1)
LC_ALL=C comm -13 <(cut -f1 <<<"$want") <(list_local | cut -f1) | while IFS= read -r stale; do
  rm -f -- "$dest/$stale"
done
ncopy=$( [ -n "$pending" ] && wc -l <<<"$pending" || echo 0)
copied=$(LC_ALL=C join -t $'\t' <(printf '%s\n' "$pending") <(printf '%s\n' "$want") | awk -F'\t' '{ s += $2 } END { printf "%.0f", s }')
say "copying $ncopy of $files files ($(gib "$copied") of $(gib "$bytes")) from $src to $dest, $PAR streams"
t0=$(date +%s.%N)
if [ "$ncopy" -gt 0 ]; then
  if [[ $src == s3://* ]]; then
    aws s3 sync "$src/" "$dest/" --only-show-errors --exclude '.stage-*' --exclude '*/.stage-*' >&2 \
      || die "aws s3 sync $src $dest failed"
  else
    cut -f1 <<<"$manifest" | sed 's|/[^/]*$||;t;d' | sort -u | (cd "$dest" && xargs -r -d '\n' mkdir -p)
    printf '%s\n' "$pending" | (cd "$src" && xargs -r -d '\n' -n 1 -P "$PAR" cp --preserve=timestamps --parents -t "$dest") \
      || die "copying from $src to $dest failed"
  fi
fi
t1=$(date +%s.%N)

# Verify: every file of the source is here with its size, and nothing else.
got=$(list_local)
if [ "$got" != "$want" ]; then
  diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") | head -n 10 >&2 || true
  die "the copy in $dest does not match $src (names and sizes above: < source, > copy)"
fi
if [ -f "$dest/SHA256SUMS" ] && [ "${STAGE_SHA256:-1}" = 1 ]; then
  sha_check "$dest" || die "checksums in $dest do not match its SHA256SUMS (a damaged copy or source)"
  sums=", SHA256SUMS verified"
else
  sums=
fi
printf '%s\n' "$manifest" >"$dest/.stage-manifest"
touch "$dest/.stage-complete"
awk -v b="$copied" -v t0="$t0" -v t1="$t1" -v n="$ncopy" -v f="$files" -v me="$me" -v s="$sums" -v sz="$(gib "$copied")" 'BEGIN {
  t = t1 - t0; if (t < 0.001) t = 0.001
  printf "%s: copied %d of %d files, %s in %.1f s: %.0f MB/s%s\n", me, n, f, sz, t, b / t / 1e6, s }' >&2
echo "$dest"
