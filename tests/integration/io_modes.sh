#!/usr/bin/env bash
# The input path gives the same batches whatever reads them: --io direct, memory and collective,
# 1 to 3 reader threads and several prefetch depths train to bit-identical checkpoints, on
# contiguous shards (pread) and on chunked, compressed shards written by h5py (HDF5 reads); memory
# also across two simulated nodes. The same holds for --shuffle-block orders, and for token
# shards read directly or from memory. A bad --io combination is refused with one line.
source "$(dirname "$0")/lib.bash"
synth "$WORK/d" --train-samples 5000 --val-samples 300 --shards 3
# The same rows as chunked + gzip shards (the HDF5 path of every mode).
mkdir -p "$WORK/z"
/usr/bin/python3 - "$WORK/d" "$WORK/z" <<'PY'
import glob, os, sys, h5py
src, dst = sys.argv[1:3]
for path in sorted(glob.glob(f"{src}/*.h5")):
    with h5py.File(path, "r") as f, h5py.File(os.path.join(dst, os.path.basename(path)), "w") as g:
        g.create_dataset("features", data=f["features"][...], chunks=(64, f["features"].shape[1]), compression="gzip")
        g.create_dataset("labels", data=f["labels"][...], chunks=(64,), compression="gzip")
        g.attrs["num_classes"] = f.attrs["num_classes"]
PY

# run TAG DATA [options]: 3 ranks, 60 steps (several epochs of 5000 / 48); the checkpoint of step 60.
run() {
  local tag=$1 data=$2; shift 2
  train 3 --data "$data" --steps 60 --batch-size 16 --log-every 30 --eval-every 60 --run-dir "$WORK/r-$tag" "$@"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$tag: exited $RC"; }
}
same_as() {  # same_as REF TAG [STEP]: their checkpoints of STEP (default 60) are bit-identical
  local step; step=$(printf '%08d' "${3:-60}")
  "$BIN/dptrain-ckpt" diff "$WORK/r-$1/checkpoints/ckpt-$step.h5" "$WORK/r-$2/checkpoints/ckpt-$step.h5" \
    | matches "bit-identical" || fail "$2 trained differently from $1"
  echo "ok: $2 = $1"
}
run ref "$WORK/d"
run threads3 "$WORK/d" --io-threads 3 --prefetch 5
run depth1 "$WORK/d" --prefetch 1
run memory "$WORK/d" --io memory
grep -q "^io memory: .* MiB of training rows loaded into node-shared memory" "$WORK/out" || { cat "$WORK/out"; fail "memory: no load line"; }
# Simulated nodes change the all-reduce's summation order: compare with direct reads on the same.
run ref-nodes "$WORK/d" --ranks-per-node 1
run memory2 "$WORK/d" --io memory --io-threads 2 --ranks-per-node 1
run collective "$WORK/d" --io collective
run z-direct "$WORK/z"
grep -q "^note: train: 3 of 3 shards are chunked or compressed: HDF5 reads their rows through its chunk cache" "$WORK/out" \
  && ! grep -q "^note: val: .* chunked" "$WORK/out" || { cat "$WORK/out"; fail "chunked shards: no note for the training split's"; }
run z-threads "$WORK/z" --io-threads 2
run z-collective "$WORK/z" --io collective
run z-memory "$WORK/z" --io memory
for t in threads3 depth1 memory collective z-direct z-threads z-collective z-memory; do same_as ref $t; done
same_as ref-nodes memory2

# --shuffle-block: another sample order (so another model), the same in every mode; a resume must
# keep it.
run block "$WORK/d" --shuffle-block 64
run block-threads "$WORK/d" --shuffle-block 64 --io-threads 3
run block-memory "$WORK/d" --shuffle-block 64 --io memory
run z-block "$WORK/z" --shuffle-block 64
for t in block-threads block-memory z-block; do same_as block $t; done
! "$BIN/dptrain-ckpt" diff "$WORK/r-ref/checkpoints/ckpt-00000060.h5" "$WORK/r-block/checkpoints/ckpt-00000060.h5" \
  | matches "bit-identical" || fail "--shuffle-block 64 trained the same as per-sample order"
refused 3 --data "$WORK/d" --steps 80 --batch-size 16 --run-dir "$WORK/r-block" --resume auto --shuffle-block 16
[ "$RC" = 2 ] && grep -q "checkpoint was trained with --shuffle-block 64, this run has --shuffle-block 16" "$WORK/out" \
  || { cat "$WORK/out"; fail "a resume with another --shuffle-block: want exit 2 and the reason, got exit $RC"; }
echo "ok: --shuffle-block trains the same in every mode, and a resume must keep it"

# Token shards (--model gpt): --io memory (with reader threads, and across two simulated nodes)
# trains as --io direct does, on contiguous shards and on chunked, compressed ones; --io
# collective is refused for them with one line.
for i in $(seq 400); do echo "line $i: the quick brown fox jumps over the lazy dog, again and again."; done >"$WORK/fox.txt"
"$BIN/dptrain-data" text --input "$WORK/fox.txt" --out "$WORK/tok" --vocab char --shards 3 >/dev/null
mkdir -p "$WORK/tokz"
/usr/bin/python3 - "$WORK/tok" "$WORK/tokz" <<'PY'
import glob, os, sys, h5py
src, dst = sys.argv[1:3]
for path in sorted(glob.glob(f"{src}/*.h5")):
    with h5py.File(path, "r") as f, h5py.File(os.path.join(dst, os.path.basename(path)), "w") as g:
        g.create_dataset("tokens", data=f["tokens"][...], chunks=(1000,), compression="gzip")
        for k, v in f.attrs.items():
            g.attrs[k] = v
PY
gpt() {  # gpt TAG DATA [options]: 3 ranks, 40 steps of a tiny GPT; the checkpoint of step 40
  local tag=$1 data=$2; shift 2
  train 3 --model gpt --data "$data" --n-layer 1 --n-head 2 --n-embd 16 --block-size 16 --batch-size 4 --steps 40 \
    --log-every 20 --eval-every 40 --eval-max 16 --run-dir "$WORK/r-$tag" "$@"
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$tag: exited $RC"; }
}
gpt tok-ref "$WORK/tok"
gpt tok-memory "$WORK/tok" --io memory --io-threads 2
grep -q "^io memory: .* MiB of training tokens loaded into node-shared memory" "$WORK/out" || { cat "$WORK/out"; fail "tok-memory: no load line"; }
gpt tok-z-memory "$WORK/tokz" --io memory
gpt tok-z-direct "$WORK/tokz" --io-threads 2
gpt tok-ref-nodes "$WORK/tok" --ranks-per-node 1
gpt tok-memory-nodes "$WORK/tok" --io memory --ranks-per-node 1
for t in tok-memory tok-z-memory tok-z-direct; do same_as tok-ref $t 40; done
same_as tok-ref-nodes tok-memory-nodes 40
refused 1 --model gpt --data "$WORK/tok" --io collective --steps 2 --run-dir "$WORK/r-tok-coll"
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && grep -q "io collective reads tabular shards" "$WORK/out" \
  || { cat "$WORK/out"; fail "--io collective with token shards: want exit 2 and one line, got exit $RC"; }
echo "ok: token shards train the same with --io direct and memory; collective is refused"

# --io memory on chunked shards with a label out of range in one rank's share: that rank's load
# fails after the node-shared window exists; every rank must still end with one line, exit 2.
cp -r "$WORK/z" "$WORK/zbad"
/usr/bin/python3 - "$WORK/zbad/train-00002-of-00003.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    y = f["labels"][...]
    y[-1] = 99
    f["labels"][...] = y
PY
train 3 --data "$WORK/zbad" --steps 5 --batch-size 16 --io memory --run-dir "$WORK/zbad-run"
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && grep -q 'train-00002-of-00003.h5: /labels\[[0-9]*\] = 99 is outside' "$WORK/out" \
  || { cat "$WORK/out"; fail "a failed --io memory load: want exit 2 and one line, got exit $RC"; }
echo "ok: a load that fails on one rank ends every rank with one line"

refused 2 --data "$WORK/d" --steps 5 --io collective --io-threads 2 --run-dir "$WORK/bad"
[ "$RC" = 2 ] && grep -q "io collective reads in the training thread; --io-threads 2 must be 1" "$WORK/out" || { cat "$WORK/out"; fail "collective with 2 reader threads was not refused"; }
refused 1 --data "$WORK/d" --steps 5 --io mmap --run-dir "$WORK/bad"
[ "$RC" = 2 ] && grep -q "\-\-io 'mmap' is unknown; use direct, memory or collective" "$WORK/out" || { cat "$WORK/out"; fail "--io mmap was not refused"; }
# Node-shared memory too small for what --io memory or the gradient all-reduce's window needs (a
# container's 64 MiB /dev/shm; here a 4 MiB tmpfs as Open MPI's backing directory): one line
# naming the need, the room and the fix, exit 2 on every rank (it was MPI_ERR_INTERN from the
# window's allocation, and with --io memory every rank waited in it until killed).
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/shm" && mount -t tmpfs -o size=4M tmpfs "$WORK/shm" 2>/dev/null; then
  trap 'umount "$WORK/shm" 2>/dev/null || true; rm -rf "$WORK"' EXIT
  export OMPI_MCA_osc_sm_backing_directory="$WORK/shm"
  train 2 --data "$WORK/d" --steps 2 --hidden 1024,1024 --allreduce hierarchical --run-dir "$WORK/shm-grad"
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
    && grep -q "^dptrain: error: the all-reduce's node-shared gradient buffer (.* MiB a rank): does not fit in node-shared memory: $WORK/shm has 4.0 MiB free, this node's 2 ranks need .* MiB; give /dev/shm more room .*, or use --allreduce flat" "$WORK/out" \
    || { cat "$WORK/out"; fail "a gradient window beyond /dev/shm: want one line naming the need and the fix"; }
  synth "$WORK/big" --train-samples 100000 --val-samples 300
  train 2 --data "$WORK/big" --steps 2 --io memory --allreduce flat --run-dir "$WORK/shm-io"
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
    && grep -q "^dptrain: error: --io memory: the rows of $WORK/big/train (.* GiB): does not fit in node-shared memory: $WORK/shm has 4.0 MiB free, .*; use --io direct" "$WORK/out" \
    || { cat "$WORK/out"; fail "--io memory beyond /dev/shm: want one line naming the need and the fix"; }
  unset OMPI_MCA_osc_sm_backing_directory
  echo "ok: node-shared memory too small -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-140)..."
else
  echo "SKIPPED node-shared memory too small: needs root and a tmpfs mount"
fi
echo "io modes ok"
