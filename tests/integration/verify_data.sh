#!/usr/bin/env bash
# dptrain-data verify reads every value of a set (a NaN feature, a label out of range, a token id
# outside the vocabulary are named: shard, row or offset) and writes or checks SHA256SUMS; a bit
# flipped on disk, which no value check can see, then fails the manifest, in `verify` and in
# dptrain --verify-data at start-up (exit 2, one line naming the file), before any step. Shards
# replaced with --overwrite replace their own lines in the manifest, and only those.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
DATA="$BIN/dptrain-data"

# verify_data NAME WANT_RC PATTERN DIR [options]: runs dptrain-data verify; checks exit and output
verify_data() {
  local name=$1 want=$2 pattern=$3; shift 3
  set +e
  "$DATA" verify "$@" >"$WORK/v.out" 2>&1
  local rc=$?
  set -e
  [ "$rc" = "$want" ] && grep -q -- "$pattern" "$WORK/v.out" \
    || { cat "$WORK/v.out"; fail "verify, $name: want exit $want and '$pattern', got exit $rc"; }
  echo "ok: verify, $name -> $(tail -n1 "$WORK/v.out" | cut -c1-170)"
}

synth "$WORK/set" --train-samples 512 --val-samples 64 --shards 4
verify_data "a good set, first time" 0 "SHA256SUMS written (5 files)" "$WORK/set"
grep -q "every feature finite, every label in \[0, 10)" "$WORK/v.out" || { cat "$WORK/v.out"; fail "no summary of the values"; }
verify_data "a good set, again" 0 "SHA256SUMS: all 5 files match" "$WORK/set"
(cd "$WORK/set" && sha256sum -c --quiet SHA256SUMS) || fail "SHA256SUMS is not sha256sum's format"

# One flipped bit in a feature's mantissa: every value is still finite, only the manifest sees it.
cp -r "$WORK/set" "$WORK/flip"
$PY - "$WORK/flip/train-00002-of-00004.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    at = f["features"].id.get_offset() + 4 * 37  # row 1, feature 5
with open(sys.argv[1], "r+b") as g:
    g.seek(at); b = g.read(1); g.seek(at); g.write(bytes([b[0] ^ 1]))
PY
verify_data "a flipped mantissa bit" 2 "flip/train-00002-of-00004.h5: FAILED: its SHA-256 does not match SHA256SUMS" "$WORK/flip"
train 2 --data "$WORK/flip" --run-dir "$WORK/run-flip" --steps 4 --batch-size 8 --eval-every 0 --verify-data
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && ! grep -q '^step' "$WORK/out" \
  && grep -q "^dptrain: error: .*flip/train-00002-of-00004.h5: FAILED: its SHA-256 does not match SHA256SUMS.*verify --update-sums" "$WORK/out" \
  || { cat "$WORK/out"; fail "--verify-data with a flipped bit: want exit 2 before any step and one line naming the file"; }
echo "ok: --verify-data, a flipped bit -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-150)"
# Without --verify-data the same set trains (the bit is a valid float): the check is what finds it.
train 2 --data "$WORK/flip" --run-dir "$WORK/run-flip2" --steps 4 --batch-size 8 --eval-every 0
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the flipped set without --verify-data: exit $RC"; }
# The good set passes, with one line saying what was checked.
train 2 --data "$WORK/set" --run-dir "$WORK/run-good" --steps 4 --batch-size 8 --eval-every 0 --verify-data
[ "$RC" = 0 ] && grep -q "^verify-data: $WORK/set/SHA256SUMS: every shard listed, every file matches (5 files hashed on 1 node" "$WORK/out" \
  || { cat "$WORK/out"; fail "--verify-data on a good set: exit $RC"; }
echo "ok: --verify-data, a good set -> $(grep '^verify-data:' "$WORK/out")"
# A file whose read never returns (a filesystem that hangs; here a FIFO without a writer, listed in
# the manifest, the second rank's share) ends the job after --step-timeout with one line naming
# the rank; the hashing was unwatched, and the job waited until the scheduler's limit.
cp -r "$WORK/set" "$WORK/stuck"; mkfifo "$WORK/stuck/stuck.fifo"
printf '%064d  stuck.fifo\n' 0 >>"$WORK/stuck/SHA256SUMS"
train 2 --data "$WORK/stuck" --run-dir "$WORK/run-stuck" --steps 4 --batch-size 8 --eval-every 0 --verify-data \
  --step-timeout 3
[ "$RC" != 0 ] && [ "$(grep -c 'dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "dptrain: error: set-up stuck for [0-9.]* s (--step-timeout 3): .*(rank 1 on " "$WORK/out" \
  || { cat "$WORK/out"; fail "--verify-data on a file that never answers: want one line from rank 1's watchdog"; }
echo "ok: --verify-data, a file that never answers -> $(grep -o 'dptrain: error: set-up stuck[^(]*' "$WORK/out")"
# A set without a manifest, and a shard the manifest does not list.
cp -r "$WORK/set" "$WORK/nosums"; rm "$WORK/nosums/SHA256SUMS"
train 2 --data "$WORK/nosums" --run-dir "$WORK/run-nosums" --steps 4 --batch-size 8 --eval-every 0 --verify-data
[ "$RC" = 2 ] && grep -q "^dptrain: error: $WORK/nosums/SHA256SUMS: cannot open it; write it with \`[^\`]*dptrain-data verify $WORK/nosums\`" "$WORK/out" \
  || { cat "$WORK/out"; fail "--verify-data without SHA256SUMS: want exit 2 and the command that writes it"; }
echo "ok: --verify-data, no manifest -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-150)"
cp -r "$WORK/set" "$WORK/unlisted"; grep -v 'val-00000' "$WORK/set/SHA256SUMS" >"$WORK/unlisted/SHA256SUMS"
verify_data "an unlisted shard" 2 "unlisted/val-00000-of-00001.h5 is not in .*SHA256SUMS; if the set changed on purpose, rewrite it with" "$WORK/unlisted"
verify_data "--update-sums" 0 "SHA256SUMS rewritten (5 files)" --update-sums "$WORK/unlisted"
verify_data "after --update-sums" 0 "all 5 files match" "$WORK/unlisted"

# Bad values, named: a NaN feature, a label out of range (chunked, so not seen by the reader's
# direct path), a token id outside the vocabulary.
cp -r "$WORK/set" "$WORK/nan"
$PY - "$WORK/nan/train-00001-of-00004.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    f["features"][17, 3] = np.nan
PY
verify_data "a NaN feature" 2 "nan/train-00001-of-00004.h5 row 17, feature 3 = nan: not a finite number; fix or drop that row" "$WORK/nan"
cp -r "$WORK/set" "$WORK/label"
$PY - "$WORK/label/val-00000-of-00001.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    x, y = f["features"][...], f["labels"][...]
    y[40] = 12
    del f["features"], f["labels"]
    f.create_dataset("features", data=x, chunks=(16, x.shape[1]), compression="gzip")
    f.create_dataset("labels", data=y, chunks=(16,), compression="gzip")
PY
verify_data "a label out of range (chunked)" 2 "label/val-00000-of-00001.h5: /labels\[40\] = 12 is outside \[0, num_classes = 10)" "$WORK/label"
"$DATA" text --input "$ROOT/README.md" --out "$WORK/tok" >/dev/null
$PY - "$WORK/tok/val-00000-of-00001.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["tokens"][123] = 5000
PY
verify_data "a token id outside the vocabulary" 2 "tok/val-00000-of-00001.h5: /tokens\[123\] = 5000 is outside the char vocabulary" "$WORK/tok"
verify_data "no directory" 2 "nowhere: directory not found" "$WORK/nowhere"

# Replacing one split with --overwrite replaces its lines in the manifest and keeps the others':
# the flipped training shard still fails (the manifest used to go, and `verify` then wrote a new
# one that vouched for the damaged shard).
$PY - "$WORK/flip/val-00000-of-00001.h5" "$WORK/val.csv" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r") as f:
    x, y = f["features"][...], f["labels"][...]
np.savetxt(sys.argv[2], np.column_stack([x[:40], y[:40]]), delimiter=",", fmt="%.6g")
PY
"$DATA" ingest --input "$WORK/val.csv" --out "$WORK/flip" --split val --num-classes 10 --overwrite >"$WORK/v.out" 2>&1 \
  || { cat "$WORK/v.out"; fail "ingest --split val --overwrite failed"; }
grep -q "flip/SHA256SUMS: the replaced shards' lines removed, the other files' kept" "$WORK/v.out" \
  && grep -q "flip/SHA256SUMS: the 1 new shard added" "$WORK/v.out" \
  || { cat "$WORK/v.out"; fail "ingest --overwrite: no lines saying what became of SHA256SUMS"; }
(cd "$WORK/flip" && grep val-00000-of-00001.h5 SHA256SUMS | sha256sum -c --quiet) || fail "the new val shard's sum is wrong"
verify_data "one split replaced, the damaged shard of the other still named" 2 \
  "flip/train-00002-of-00004.h5: FAILED: its SHA-256 does not match SHA256SUMS" "$WORK/flip"
# The whole set replaced: every line is the new shards'.
"$DATA" synth --out "$WORK/set" --train-samples 256 --val-samples 32 --shards 2 --overwrite >"$WORK/v.out" 2>&1
grep -q "set/SHA256SUMS: the 3 new shards added" "$WORK/v.out" || { cat "$WORK/v.out"; fail "synth --overwrite: SHA256SUMS not mended"; }
verify_data "the replaced set" 0 "SHA256SUMS: all 3 files match" "$WORK/set"
