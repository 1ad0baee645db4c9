#!/usr/bin/env bash
# A bad option, config, shard or checkpoint: one "dptrain: error:" line that names the thing,
# a non-zero exit (2 for what the user can fix), on every rank, and no hang (train's timeout).
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3  # Debian's python3, which has h5py (make deps)
synth "$WORK/good" --train-samples 512 --val-samples 64 --shards 4

# expect_error NAME WANT_RC PATTERN NP [dptrain options]
expect_error() {
  local name=$1 want=$2 pattern=$3 np=$4; shift 4
  refused "$np" "$@"
  local lines
  lines=$(grep -c '^dptrain: error:' "$WORK/out" || true)
  if [ "$RC" = 0 ] || { [ "$want" != any ] && [ "$RC" != "$want" ]; } || [ "$lines" != 1 ] \
     || ! grep '^dptrain: error:' "$WORK/out" | matches -- "$pattern"; then
    cat "$WORK/out"
    fail "$name: want exit ${want} and one error line matching '$pattern'; got exit $RC and $lines error lines"
  fi
  if grep -qiE 'terminate called|stack trace|Segmentation' "$WORK/out"; then cat "$WORK/out"; fail "$name: crashed"; fi
  echo "ok: $name -> $(grep '^dptrain: error:' "$WORK/out")"
}

base=(--data "$WORK/good" --run-dir "$WORK/run" --steps 4 --batch-size 8 --eval-every 0)
expect_error "unknown option" 2 "bach-size" 2 "${base[@]}" --bach-size 3
expect_error "bad value" 2 "'--lr' is invalid" 2 "${base[@]}" --lr fast
expect_error "bad choice" 2 "--optimizer 'lamb'" 2 "${base[@]}" --optimizer lamb
expect_error "missing config" 2 "$WORK/none.ini" 2 "${base[@]}" --config "$WORK/none.ini"
expect_error "config is a directory" 2 "--config $WORK: is a directory" 2 "${base[@]}" --config "$WORK"
expect_error "infinite learning rate" 2 "--lr inf must be positive and finite" 2 "${base[@]}" --lr inf
touch "$WORK/a-file"
expect_error "stage into a file" 2 "--stage-dir $WORK/a-file: .*a-file/good: cannot create the directory" 2 "${base[@]}" --stage-dir "$WORK/a-file"
expect_error "GPU state without a GPU" 2 "--gpu-state device keeps the state on a GPU; with --device cpu leave it out" 2 "${base[@]}" --device cpu --gpu-state device
expect_error "a fault that never fires" 2 "--inject-fault: rank 5 is not in this run of 2 ranks" 2 "${base[@]}" --inject-fault 5:1:kill
# A thread count no machine has (100000 crashed a rank with no line; libgomp could not start them).
expect_error "--threads 100000" 2 "--threads 100000 must be in 0..256" 2 "${base[@]}" --threads 100000
set +e
"$BIN/dptrain" generate --checkpoint "$WORK/none" --threads 100000 >"$WORK/out" 2>&1; RC=$?
set -e
[ "$RC" = 2 ] && grep -q "^dptrain: error: generate: --threads 100000 must be in 1..256$" "$WORK/out" \
  || { cat "$WORK/out"; fail "generate --threads 100000: want exit 2 and one line"; }
for args in "--threads 100000" "--served-model-name ''"; do
  set +e
  eval "\"\$BIN/dptrain\" serve --checkpoint \"\$WORK/none\" $args" >"$WORK/out" 2>&1; RC=$?
  set -e
  [ "$RC" = 2 ] && [ "$(wc -l <"$WORK/out")" = 1 ] && grep -q "^dptrain: error: serve: --" "$WORK/out" \
    || { cat "$WORK/out"; fail "serve $args: want exit 2 and one line"; }
  echo "ok: serve $args -> $(cat "$WORK/out")"
done
# Metrics on a full disk (/dev/full): one warning naming the file and the reason, and the run goes
# on to its end (it exited 0 without a word, its metrics cut mid-record).
train 2 "${base[@]}" --metrics /dev/full --log-every 1 --overwrite-checkpoints
[ "$RC" = 0 ] && [ "$(grep -c '^dptrain: warning: --metrics /dev/full: a write failed (No space left on device)' "$WORK/out")" = 1 ] \
  && grep -q "^done: steps 1..4 " "$WORK/out" \
  || { cat "$WORK/out"; fail "--metrics on a full disk: want one warning and the run done"; }
echo "ok: $(grep '^dptrain: warning: --metrics' "$WORK/out")"
# ... and with --metrics-required the run stops at the next step instead, with a checkpoint of the
# step before and exit 2: here a 64 KiB filesystem that fills after about 90 step records.
if [ "$(id -u)" = 0 ] && mkdir -p "$WORK/mfull" && mount -t tmpfs -o size=64k tmpfs "$WORK/mfull" 2>/dev/null; then
  train 2 --data "$WORK/good" --batch-size 8 --eval-every 0 --steps 3000 --log-every 1 --checkpoint-every 1000 --run-dir "$WORK/mreq" \
    --metrics "$WORK/mfull/m.jsonl" --metrics-required
  umount "$WORK/mfull"
  line=$(grep '^dptrain: error: --metrics .*: a write failed (No space left on device) and --metrics-required is set: stopped after step [0-9]* with a checkpoint' "$WORK/out" || true)
  n=$(sed -n 's/.*stopped after step \([0-9]*\) with.*/\1/p' <<<"$line")
  [ "$RC" = 2 ] && [ -n "$n" ] && [ "$n" -lt 3000 ] && [ "$(grep -c '^dptrain: warning: --metrics' "$WORK/out")" = 0 ] \
    && "$BIN/dptrain-ckpt" info "$(printf '%s/checkpoints/ckpt-%08d.h5' "$WORK/mreq" "$n")" >/dev/null \
    || { cat "$WORK/out"; fail "--metrics-required on a full disk: want exit 2, one line and the checkpoint of its step"; }
  echo "ok: --metrics-required -> $(cut -c1-150 <<<"$line")"
else
  echo "SKIPPED --metrics-required on a full disk: needs root and a tmpfs mount"
fi
# More threads than cores, or than OpenBLAS starts, is said, not left for the user to find.
train 1 "${base[@]}" --threads 100 --overwrite-checkpoints
[ "$RC" = 0 ] && grep -q "^note: --threads 100: 100 compute threads on the [0-9]* cores\? this rank may use: they take turns" "$WORK/out" \
  && grep -q "OpenBLAS runs at most [0-9]* threads" "$WORK/out" \
  || { cat "$WORK/out"; fail "--threads 100: no note of the cores and OpenBLAS's limit"; }
echo "ok: $(grep '^note: --threads' "$WORK/out")"
# Shards of the other model's kind: the fix named is the model, not a conversion into new shards.
"$BIN/dptrain-data" text --input "$ROOT/README.md" --out "$WORK/text" --vocab byte >/dev/null
expect_error "token shards for the MLP" 2 "text/train-00000-of-00001.h5 holds token shards .dataset /tokens.: train a language model on them with --model gpt" \
  2 "${base[@]}" --data "$WORK/text"
expect_error "tabular shards for the GPT" 2 "good/train-00000-of-00004.h5 holds tabular shards .*: train them with --model mlp" \
  2 "${base[@]}" --model gpt --n-layer 1 --n-embd 16 --n-head 2 --block-size 8
# The other model's options are said to be unused (they were silently ignored), not refused.
train 1 "${base[@]}" --n-layer 12 --block-size 4096 --overwrite-checkpoints
[ "$RC" = 0 ] && grep -q "^note: --n-layer 12, --block-size 4096 are options of --model gpt; the MLP leaves them unused" "$WORK/out" \
  || { cat "$WORK/out"; fail "GPT options given to the MLP: no note"; }
echo "ok: $(grep '^note: --n-layer' "$WORK/out")"
# A run that cannot allocate what it needs (3 GB of address space, a batch of 20M samples, the plan's
# refusal overridden): one line saying out of memory and naming dptrain plan, exit 2 (it was a bare
# std::bad_alloc). One process, without mpirun: the limit would be the launcher's too.
set +e
(ulimit -v 3000000; exec timeout -k 5 60 "$BIN/dptrain" "${base[@]}" --batch-size 20000000 --overwrite-checkpoints --force-memory) >"$WORK/out" 2>&1
RC=$?
set -e
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
  && grep -q "^dptrain: error: out of memory: this rank could not allocate what the run needs .*dptrain plan" "$WORK/out" \
  || { cat "$WORK/out"; fail "out of memory at set-up: want exit 2 and one line naming dptrain plan"; }
echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-120)"
# A run larger than its cgroup's memory limit (a pod's, Slurm's --mem): the plan, which reads the
# limit (/proc/meminfo shows the host's), refuses it before the model allocates, with exit 2 and the
# fix (it was OOM-killed without a word: exit 137). In a memory cgroup of its own, where one can be
# made (root with cgroup v1 or v2 writable).
cg=""
if mkdir "/sys/fs/cgroup/memory/dptrain-test-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/memory/dptrain-test-$$; echo $((256 << 20)) >"$cg/memory.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null && mkdir "/sys/fs/cgroup/dptrain-test-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/dptrain-test-$$; echo $((256 << 20)) >"$cg/memory.max"
fi
if [ -n "$cg" ]; then
  set +e
  # 30M parameters: about 460 MiB of parameters, gradients and AdamW state, in 256 MiB.
  (echo $BASHPID >"$cg/cgroup.procs"; exec timeout -k 5 60 $MPIRUN -np 1 "$BIN/dptrain" "${base[@]}" \
     --hidden 4096,4096,1024 --overwrite-checkpoints) >"$WORK/out" 2>&1
  RC=$?
  set -e
  rmdir "$cg" 2>/dev/null || true
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
    && grep -q "^dptrain: error: memory: the run needs .* MiB on rank 0 and 256.0 MiB are there (the cgroup's limit 0.2 GiB ($cg/memory\.[a-z_.]*) / 1 rank): it would be killed for lack of memory; .*--force-memory" "$WORK/out" \
    || { cat "$WORK/out"; fail "a run over its cgroup's memory limit: want exit 2 and the plan's line, got $RC"; }
  echo "ok: $(grep '^dptrain: error:' "$WORK/out" | cut -c1-160)"
else
  echo "SKIPPED the cgroup memory limit: no memory cgroup can be made here (cgroup_memory_limit's reading is unit-tested)"
fi
# A CPU quota (a pod's CPU limit) below the cores the rank sees: the default thread count keeps to
# it (it took every core and was throttled), and more threads than it are said with the quota.
cg=""
if mkdir "/sys/fs/cgroup/cpu/dptrain-test-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/cpu/dptrain-test-$$; echo 100000 >"$cg/cpu.cfs_period_us"; echo 100000 >"$cg/cpu.cfs_quota_us"
elif grep -qw cpu /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null && mkdir "/sys/fs/cgroup/dptrain-test-$$" 2>/dev/null; then
  cg=/sys/fs/cgroup/dptrain-test-$$; echo "100000 100000" >"$cg/cpu.max"
fi
if [ -n "$cg" ] && [ "$(nproc --all)" -ge 2 ]; then
  set +e
  (echo $BASHPID >"$cg/cgroup.procs"; exec timeout -k 5 60 $MPIRUN --bind-to none -np 1 "$BIN/dptrain" "${base[@]}" \
     --overwrite-checkpoints) >"$WORK/out" 2>&1
  RC=$?
  (echo $BASHPID >"$cg/cgroup.procs"; exec timeout -k 5 60 $MPIRUN --bind-to none -np 1 "$BIN/dptrain" "${base[@]}" \
     --threads 2 --overwrite-checkpoints) >"$WORK/out2" 2>&1
  RC2=$?
  set -e
  rmdir "$cg" 2>/dev/null || true
  [ "$RC" = 0 ] && grep -q "backend cpu, 1 thread per rank" "$WORK/out" \
    || { cat "$WORK/out"; fail "a CPU quota of 1: want 1 thread by default"; }
  [ "$RC2" = 0 ] && grep -q "^note: --threads 2: 2 compute threads on the 1 core this rank may use (a CPU quota of 1.00, $cg/cpu[.a-z_]*)" "$WORK/out2" \
    || { cat "$WORK/out2"; fail "--threads 2 under a CPU quota of 1: want the note naming the quota"; }
  echo "ok: a CPU quota of 1: 1 thread by default; $(grep '^note: --threads' "$WORK/out2" | cut -c1-140)"
else
  echo "SKIPPED the cgroup CPU quota: no cpu cgroup can be made here, or one core (cgroup_cpu_limit is unit-tested)"
fi
printf 'stepz = 3\n' >"$WORK/bad.ini"
expect_error "bad config key" 2 "stepz" 2 "${base[@]}" --config "$WORK/bad.ini"
expect_error "ranks per node" 2 "--ranks-per-node 3" 2 "${base[@]}" --ranks-per-node 3
expect_error "missing data dir" 2 "$WORK/nowhere" 2 "${base[@]}" --data "$WORK/nowhere"

cp -r "$WORK/good" "$WORK/missing"
rm "$WORK/missing/train-00002-of-00004.h5"
expect_error "missing shard" 2 "train-00002-of-00004.h5: shard missing" 2 "${base[@]}" --data "$WORK/missing"
# A set made with --val-fraction 0 (no validation split): the line says how to add one.
cp -r "$WORK/good" "$WORK/noval"
rm "$WORK"/noval/val-*.h5
expect_error "no validation split" 2 "training shards but no val-NNNNN-of-NNNNN.h5 .*with --split val" 2 "${base[@]}" --data "$WORK/noval"

cp -r "$WORK/good" "$WORK/trunc"
f="$WORK/trunc/train-00001-of-00004.h5"
truncate -s $(( $(stat -c %s "$f") / 2 )) "$f"
expect_error "truncated shard" 2 "train-00001-of-00004.h5.*truncated" 2 "${base[@]}" --data "$WORK/trunc"

# A shard of no rows (h5py writes one as readily as another; data/README.md lets N differ) is left
# out with a note, and the set trains as without it; it was refused, with advice whose ingest
# command then failed on that same shard. Every shard of no rows: refused.
cp -r "$WORK/good" "$WORK/zero"
$PY - "$WORK/zero/train-00004-of-00005.h5" "$WORK/zero/train-00000-of-00004.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[2], "r") as g:
    d, k = g["features"].shape[1], g.attrs["num_classes"]
with h5py.File(sys.argv[1], "w") as f:
    f["features"] = np.zeros((0, d), np.float32)
    f["labels"] = np.zeros((0,), np.int32)
    f.attrs["num_classes"] = k
PY
for i in 0 1 2 3; do mv "$WORK/zero/train-0000$i-of-00004.h5" "$WORK/zero/train-0000$i-of-00005.h5"; done
train 2 "${base[@]}" --data "$WORK/zero" --run-dir "$WORK/run-zero"
[ "$RC" = 0 ] && grep -q "^note: train: 1 shard of no samples left out (.*zero/train-00004-of-00005.h5)" "$WORK/out" \
  || { cat "$WORK/out"; fail "a shard of no rows: want a run and one note naming it, got exit $RC"; }
train 2 "${base[@]}" --run-dir "$WORK/run-nozero"
"$BIN/dptrain-ckpt" diff "$WORK/run-zero/checkpoints/ckpt-00000004.h5" "$WORK/run-nozero/checkpoints/ckpt-00000004.h5" >/dev/null \
  || fail "a shard of no rows: the set did not train as without it"
echo "ok: a shard of no rows is left out and the set trains as without it"
mkdir -p "$WORK/allzero" && cp "$WORK/zero/train-00004-of-00005.h5" "$WORK/allzero/train-00000-of-00001.h5"
cp "$WORK/good"/val-*.h5 "$WORK/allzero/"
expect_error "every shard of no rows" 2 "allzero: each of its 1 train shards holds no samples" 2 "${base[@]}" --data "$WORK/allzero"

# What h5py writes by default from NumPy (float64 features, int64 labels shaped (N, 1), num_classes
# an int64) trains exactly as the float32/int32 set it came from, with one note of the cost, in
# each --io mode that reads through HDF5.
cp -r "$WORK/good" "$WORK/h5py"
$PY - "$WORK"/h5py/*.h5 <<'PY'
import sys, h5py, numpy as np
for p in sys.argv[1:]:
    with h5py.File(p, "r+") as f:
        x, y = f["features"][...], f["labels"][...]
        del f["features"], f["labels"]
        f["features"] = x.astype(np.float64)
        f["labels"] = y.astype(np.int64).reshape(-1, 1)
        f.attrs["num_classes"] = int(f.attrs["num_classes"])
PY
train 2 "${base[@]}" --run-dir "$WORK/run-f32"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the float32 set: exit $RC"; }
for io in direct memory; do
  train 2 "${base[@]}" --data "$WORK/h5py" --run-dir "$WORK/run-h5py-$io" --io "$io"
  [ "$RC" = 0 ] && grep -q "^note: train: 4 of 4 shards hold float64 features, int64 labels (h5py's defaults); HDF5 converts" "$WORK/out" \
    || { cat "$WORK/out"; fail "h5py's default dtypes (--io $io): want a run with one note of the conversion, got exit $RC"; }
  "$BIN/dptrain-ckpt" diff "$WORK/run-f32/checkpoints/ckpt-00000004.h5" "$WORK/run-h5py-$io/checkpoints/ckpt-00000004.h5" >/dev/null \
    || fail "h5py's default dtypes (--io $io): the checkpoint differs from the float32 set's"
done
echo "ok: float64 features and int64 (N, 1) labels train bit-identically to float32/int32 ($(grep '^note: train' "$WORK/out" | cut -c1-100)...)"
# The note's own command converts the split once.
cmd=$(grep '^note: train' "$WORK/out" | sed -n 's/.*To convert once: `\([^`]*\)`.*/\1/p' | sed "s|NEW_DIR|$WORK/converted|")
# shellcheck disable=SC2086  # the printed command, split into words as a shell would
(cd "$ROOT" && $cmd >/dev/null) || fail "the note's command failed: $cmd"
[ "$(h5dump -H -d labels "$WORK/converted/train-00000-of-00004.h5" | grep -c H5T_STD_I32LE)" = 1 ] \
  || fail "the note's command did not write int32 labels"
echo "ok: the note's ingest command writes float32/int32 shards"

# An int64 label beyond int32 is refused as out of range, not read as a wrapped value.
$PY - "$WORK/h5py/train-00002-of-00004.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["labels"][5, 0] = 2**33 + 1
PY
expect_error "int64 label beyond int32" 2 "train-00002-of-00004.h5: /labels\[5\] is beyond int32 (an int64 label), so outside \[0, num_classes" 2 "${base[@]}" --data "$WORK/h5py"

# Features that are not floating point are refused, with the advice to convert that file.
cp -r "$WORK/good" "$WORK/dtype"
$PY - "$WORK/dtype/train-00003-of-00004.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "r+") as f:
    x = f["features"][...]
    del f["features"]
    f["features"] = (x * 100).astype(np.int32)
PY
expect_error "wrong dtype" 2 "/features has dtype int32, expected float32 (float16 and float64 are converted as read)" 2 "${base[@]}" --data "$WORK/dtype"
# The advice converts the split into a new directory (never over the user's), and followed it
# gives a split dptrain trains on: every shard, in order, with its split, count and classes (it
# named the one shard, which then became 9 training rows and 1 validation row of a set of its own).
advice=$(sed -n 's/.*convert the split with `\([^`]*\)`.*/\1/p' "$WORK/out")
case "$advice" in
  *"dptrain-data ingest --split train --shards 4 --num-classes K --input $WORK/dtype/train-00000-of-00004.h5 "*"--out NEW_DIR") ;;
  *) cat "$WORK/out"; fail "wrong dtype: the advice is not to ingest the whole split into a new directory" ;;
esac
! grep -q "synth" "$WORK/out" || fail "wrong dtype: the advice names synth"
cmd=${advice//NEW_DIR/$WORK/converted-int}
${cmd//--num-classes K/--num-classes 10} >"$WORK/conv.out" 2>&1 || { cat "$WORK/conv.out"; fail "wrong dtype: the advice failed"; }
cp "$WORK"/good/val-*.h5 "$WORK/converted-int/"
train 2 "${base[@]}" --data "$WORK/converted-int" --run-dir "$WORK/run-converted"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "wrong dtype: the split the advice wrote does not train"; }
echo "ok: wrong dtype: the advice, followed, wrote a 4-shard training split that trains"
# And dptrain-data refuses to write over shards without --overwrite, leaving them as they were.
sums=$(cd "$WORK/dtype" && sha256sum ./*.h5)
for cmd in "synth --out $WORK/dtype" "text --input $ROOT/README.md --out $WORK/dtype"; do
  set +e
  # shellcheck disable=SC2086  # cmd is meant to be split into words
  "$BIN/dptrain-data" $cmd >"$WORK/data.out" 2>&1
  rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q "^dptrain-data: error: --out $WORK/dtype already holds 5 shards (train-00000-of-00004.h5, ...); pass --overwrite" "$WORK/data.out" \
    || { cat "$WORK/data.out"; fail "dptrain-data $cmd: want exit 2 and a refusal, got exit $rc"; }
done
[ "$(cd "$WORK/dtype" && sha256sum ./*.h5)" = "$sums" ] || fail "dptrain-data changed the shards it refused to overwrite"
echo "ok: dptrain-data synth and text refuse to write over a directory's shards without --overwrite"

# num_classes as h5py writes a Python float: a whole number is taken, a fraction is refused.
cp -r "$WORK/good" "$WORK/kfloat"
$PY - "$WORK"/kfloat/*.h5 <<'PY'
import sys, h5py
for p in sys.argv[1:]:
    with h5py.File(p, "r+") as f:
        f.attrs["num_classes"] = float(f.attrs["num_classes"])
PY
train 2 "${base[@]}" --data "$WORK/kfloat" --run-dir "$WORK/run-kfloat"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "num_classes as a float64 whole number: exit $RC"; }
$PY -c 'import sys, h5py; f = h5py.File(sys.argv[1], "r+"); f.attrs["num_classes"] = 2.5' "$WORK/kfloat/val-00000-of-00001.h5"
expect_error "fractional num_classes" 2 "val-00000-of-00001.h5: num_classes = 2.5, expected a whole number" 2 "${base[@]}" --data "$WORK/kfloat"

cp -r "$WORK/good" "$WORK/shape"
$PY - "$WORK/shape/val-00000-of-00001.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    y = f["labels"][...]
    del f["labels"]
    f["labels"] = y[:-3]
PY
expect_error "wrong shape" 2 "val-00000-of-00001.h5: /labels shape does not match" 2 "${base[@]}" --data "$WORK/shape"

# Only rank 1 lacks a shard (as when one node's copy is stale): rank 1 names it, rank 0 does not
# wait forever. Both ranks get the same options, --data a relative path, but MPMD launch starts
# them in different directories, where "set" is a complete and a stale copy.
mkdir -p "$WORK/n0" "$WORK/n1"
cp -r "$WORK/good" "$WORK/n0/set"
cp -r "$WORK/good" "$WORK/n1/set"
rm "$WORK/n1/set/train-00000-of-00004.h5"
set +e
timeout -k 5 120 $MPIRUN -np 1 -wdir "$WORK/n0" "$BIN/dptrain" "${base[@]}" --data set : \
  -np 1 -wdir "$WORK/n1" "$BIN/dptrain" "${base[@]}" --data set >"$WORK/out" 2>&1
RC=$?
set -e
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && grep -q "set/train-00000-of-00004.h5: shard missing.*(rank 1 on" "$WORK/out" \
  || { cat "$WORK/out"; fail "shard missing on rank 1 only: want exit 2 and one line from rank 1; got exit $RC"; }
echo "ok: shard missing on one rank -> $(grep '^dptrain: error:' "$WORK/out")"

# A checkpoint from another model: resume refuses with the fix.
train 1 "${base[@]}" --hidden 16 --run-dir "$WORK/other"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training the small model failed"; }
expect_error "checkpoint from another model" 2 "checkpoint is from another model" 2 "${base[@]}" \
  --checkpoint-dir "$WORK/other/checkpoints" --resume auto

# A label out of range in a contiguous shard: its labels are read and checked when the shards
# are opened, so the run stops at start-up with exit 2 and one line naming the shard and row.
# (Labels of chunked shards are checked when read: tests/unit/test_data.cpp.)
cp -r "$WORK/good" "$WORK/label"
$PY - "$WORK/label/train-00001-of-00004.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    f["labels"][:] = 99
PY
refused 2 "${base[@]}" --data "$WORK/label" --steps 50
n=$(grep -c '^dptrain: error:' "$WORK/out" || true)
bad=$(grep '^dptrain: error:' "$WORK/out" | grep -vc 'train-00001-of-00004.h5: /labels\[0\] = 99 is outside \[0, num_classes = ' || true)
[ "$RC" = 2 ] && [ "$n" = 1 ] && [ "$bad" = 0 ] || { cat "$WORK/out"; fail "bad label: got exit $RC, $n error lines, $bad off-topic"; }
echo "ok: label out of range -> exit $RC at start-up, one line naming the shard and row"

# A fresh run into a directory holding another run's checkpoints refuses, naming both ways out.
expect_error "checkpoint dir in use" 2 "already holds 1 checkpoints.*--resume auto.*--overwrite-checkpoints" 2 \
  "${base[@]}" --run-dir "$WORK/other"
train 2 "${base[@]}" --run-dir "$WORK/other" --hidden 16 --overwrite-checkpoints
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "--overwrite-checkpoints did not start over"; }

# --device on a machine without a usable GPU (skipped where one is visible): cuda is refused with
# the reason and the fix, for both models; auto trains on the CPU and says why.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED --device refusal checks: a GPU is visible here"
else
  expect_error "--device cuda, MLP" 2 "--device cuda: .*\(no GPU\|no CUDA\)" 1 "${base[@]}" --device cuda
  for i in $(seq 200); do echo "the quick brown fox jumps over the lazy dog $i"; done >"$WORK/fox.txt"
  "$BIN/dptrain-data" text --input "$WORK/fox.txt" --out "$WORK/tok" --vocab char --shards 1 >/dev/null
  expect_error "--device cuda, GPT" 2 "--device cuda: .*\(no GPU\|no CUDA\)" 1 --model gpt --data "$WORK/tok" \
    --run-dir "$WORK/gptrun" --steps 2 --batch-size 4 --block-size 16 --n-layer 1 --n-embd 16 --n-head 2 --device cuda
  train 1 "${base[@]}" --device auto --run-dir "$WORK/auto"
  [ "$RC" = 0 ] && grep -q "\(no GPU\|built without CUDA\).*: the CPU backend trains" "$WORK/out" \
    || { cat "$WORK/out"; fail "--device auto without a GPU: want a CPU run that says why; got exit $RC"; }
  echo "ok: --device auto without a GPU -> $(grep -m1 -o '[^|]*the CPU backend trains' "$WORK/out")"
fi

# Token shards too small for the block size: the line says each shard is too short (it gave the
# split's total, enough for many windows); shards that leave much of the text unread get a note.
"$PY" "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/small.txt"
"$BIN/dptrain-data" text --input "$WORK/small.txt" --out "$WORK/small-shards" --shards 40 --vocab char >/dev/null
gpt=(--model gpt --data "$WORK/small-shards" --run-dir "$WORK/run-small" --steps 1 --batch-size 2 --eval-every 0
     --n-layer 1 --n-head 1 --n-embd 16)
expect_error "token shards shorter than two windows" 2 "no train shard holds a window of --block-size 600 + 1 (a shard needs at least 1200 tokens; the largest of its 40 holds [0-9]*, [0-9]* in all); make fewer shards" 2 "${gpt[@]}" --block-size 600
train 1 "${gpt[@]}" --block-size 256
[ "$RC" = 0 ] && grep -q "^note: the train split's windows of --block-size 256 cover [0-9]*% of its [0-9]* tokens: each of its 40 shards" "$WORK/out" \
  || { cat "$WORK/out"; fail "40 small token shards: no note of the tokens their windows leave unread"; }
echo "ok: small token shards -> $(grep '^note: the train split' "$WORK/out" | cut -c1-120)..."
