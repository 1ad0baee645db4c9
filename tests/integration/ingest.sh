#!/usr/bin/env bash
# dptrain-data ingest: a CSV with a header, a .npy pair, an .npz (np.savez and
# np.savez_compressed) and an HDF5 file with its own dataset names become shards whose values
# equal the inputs exactly (after float32 conversion), on one rank and on two; dptrain trains on
# the result; each bad input ends with exit 2 and one error line naming the file.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3  # Debian's python3 with numpy and h5py (make deps)
IN=$WORK/in
mkdir -p "$IN"

# N is not a multiple of the shard count, so the shards differ in size; labels 0..3 with the top
# class present, so num_classes is 4 by max label + 1.
$PY - "$IN" <<'PY'
import sys, numpy as np, h5py
d = sys.argv[1]
rng = np.random.default_rng(7)
N, D = 203, 5
x = rng.standard_normal((N, D)) * 10.0 ** rng.integers(-6, 6, (N, D))  # float64, varied magnitudes
y = rng.integers(0, 4, N)
y[0] = 3
with open(f"{d}/data.csv", "w") as f:
    f.write(",".join([f"f{i}" for i in range(D)] + ["label"]) + "\n")
    for r in range(N):  # repr: the shortest text that reads back as the same float64
        f.write(",".join(repr(float(v)) for v in x[r]) + f",{y[r]}\n")
np.save(f"{d}/features.npy", x)
np.save(f"{d}/labels.npy", y)
np.savez(f"{d}/data.npz", x=x.astype(np.float32), y=y.astype(np.int32))
np.savez_compressed(f"{d}/dataz.npz", features=x, labels=y.astype(np.uint8))
with h5py.File(f"{d}/data.h5", "w") as f:
    f["/data/X"] = x
    f["/data/y"] = y
np.save(f"{d}/expect_x.npy", x.astype(np.float32))
np.save(f"{d}/expect_y.npy", y.astype(np.int32))
PY

# check DIR: train shards then val, concatenated in order, equal the inputs bit for bit; 3 train
# shards within one row of each other, one val shard of round(0.1 N) rows; dtypes and num_classes.
cat >"$WORK/check.py" <<'PY'
import sys, glob, numpy as np, h5py
d, inp = sys.argv[1], sys.argv[2]
ex, ey = np.load(f"{inp}/expect_x.npy"), np.load(f"{inp}/expect_y.npy")
train = sorted(glob.glob(f"{d}/train-*-of-00003.h5"))
val = sorted(glob.glob(f"{d}/val-*.h5"))
assert len(train) == 3 and val == [f"{d}/val-00000-of-00001.h5"], (train, val)
xs, ys, rows = [], [], []
for p in train + val:
    with h5py.File(p, "r") as f:
        assert f["features"].dtype == np.float32 and f["labels"].dtype == np.int32, p
        assert int(f.attrs["num_classes"]) == 4, (p, f.attrs["num_classes"])
        xs.append(f["features"][...]); ys.append(f["labels"][...]); rows.append(len(ys[-1]))
assert max(rows[:3]) - min(rows[:3]) <= 1 and rows[3] == round(0.1 * len(ey)), rows
x, y = np.concatenate(xs), np.concatenate(ys)
assert x.shape == ex.shape and np.array_equal(x.view(np.uint32), ex.view(np.uint32)), "features differ"
assert np.array_equal(y, ey), "labels differ"
print(f"rows {rows}")
PY

# ingest NAME [options]: converts into $WORK/NAME with 3 shards; fails on a non-zero exit.
ingest() {
  local name=$1; shift
  "$BIN/dptrain-data" ingest --out "$WORK/$name" --shards 3 "$@" >"$WORK/ingest.out" 2>&1 \
    || { cat "$WORK/ingest.out"; fail "ingest $name failed"; }
  $PY "$WORK/check.py" "$WORK/$name" "$IN" >"$WORK/check.out" 2>&1 || { cat "$WORK/check.out"; fail "ingest $name: shards differ from the input"; }
  echo "ok: $name: $(cat "$WORK/check.out"); $(cat "$WORK/ingest.out")"
}
ingest csv --input "$IN/data.csv"
ingest npy --input "$IN/features.npy" --input "$IN/labels.npy"
ingest npz --input "$IN/data.npz"
ingest npz-compressed --input "$IN/dataz.npz"
ingest hdf5 --input "$IN/data.h5" --features-dataset /data/X --labels-dataset /data/y
grep -q "203 samples (183 train, 20 val), 5 features, 4 classes, from hdf5 .* 3 train + 1 val shards, [0-9]* bytes" \
  "$WORK/ingest.out" || fail "summary line: $(cat "$WORK/ingest.out")"

train 1 --data "$WORK/csv" --steps 5 --batch-size 8 --run-dir "$WORK/r"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "dptrain on the ingested CSV: exit $RC"; }
echo "ok: dptrain trains 5 steps on the ingested CSV"

# Two ranks write the shards (shard i by rank i % 2) and print one summary; same bytes of data.
set +e
$MPIRUN -np 2 "$BIN/dptrain-data" ingest --input "$IN/data.h5" --features-dataset /data/X --labels-dataset /data/y \
  --out "$WORK/mpi" --shards 3 >"$WORK/mpi.out" 2>&1
RC=$?
set -e
[ "$RC" = 0 ] || { cat "$WORK/mpi.out"; fail "mpirun -np 2 ingest: exit $RC"; }
[ "$(grep -c '^dptrain-data ingest:' "$WORK/mpi.out")" = 1 ] && grep -q "written by 2 ranks" "$WORK/mpi.out" \
  || { cat "$WORK/mpi.out"; fail "mpirun -np 2 ingest: want one summary from 2 ranks"; }
$PY "$WORK/check.py" "$WORK/mpi" "$IN" >"$WORK/check.out" 2>&1 || { cat "$WORK/check.out"; fail "mpirun -np 2: shards differ"; }
echo "ok: mpirun -np 2: $(cat "$WORK/check.out")"

# Existing shards are kept unless --overwrite.
set +e
"$BIN/dptrain-data" ingest --input "$IN/data.csv" --out "$WORK/csv" --shards 3 >/dev/null 2>"$WORK/err"
RC=$?
set -e
[ "$RC" = 2 ] && grep -q "already holds 4 shards" "$WORK/err" || { cat "$WORK/err"; fail "existing shards: want exit 2"; }
"$BIN/dptrain-data" ingest --input "$IN/data.csv" --out "$WORK/csv" --shards 3 --overwrite >/dev/null
echo "ok: existing shards need --overwrite"

# Bad inputs.
$PY - "$IN" <<'PY'
import sys, numpy as np, h5py
d = sys.argv[1]
x = np.arange(12, dtype=np.float32).reshape(6, 2)
y = np.array([0, 1, 0, 1, 0, 1])
open(f"{d}/ragged.csv", "w").write("a,b,y\n1,2,0\n3,1\n")
open(f"{d}/word.csv", "w").write("a,b,y\n1,2,0\n3,four,1\n")
open(f"{d}/empty.csv", "w").write("")
np.save(f"{d}/complex.npy", x.astype(np.complex64))
np.save(f"{d}/fortran.npy", np.asfortranarray(x))
np.save(f"{d}/labels6.npy", y)
np.save(f"{d}/labels5.npy", y[:5])
np.save(f"{d}/x6.npy", x)
np.savez(f"{d}/names.npz", a=x, b=y)
with h5py.File(f"{d}/names.h5", "w") as f:
    f["X"] = x
    f["labels"] = y
raw = open(f"{d}/x6.npy", "rb").read()
open(f"{d}/short.npy", "wb").write(raw[:-7])
PY

# bad NAME FILE-IN-MESSAGE [options]: want exit 2 and exactly one line, naming the file.
bad() {
  local name=$1 file=$2; shift 2
  set +e
  "$BIN/dptrain-data" ingest --out "$WORK/bad" "$@" >"$WORK/bad.out" 2>"$WORK/bad.err"
  local rc=$?
  set -e
  local lines
  lines=$(wc -l <"$WORK/bad.err")
  if [ "$rc" != 2 ] || [ "$lines" != 1 ] || ! grep -q "^dptrain-data: error: $file: " "$WORK/bad.err"; then
    cat "$WORK/bad.out" "$WORK/bad.err"
    fail "$name: want exit 2 and one line 'dptrain-data: error: $file: ...'; got exit $rc and $lines lines"
  fi
  [ ! -e "$WORK/bad/train-00000-of-00001.h5" ] || fail "$name: shards were written"
  echo "ok: $name -> $(cat "$WORK/bad.err")"
}
bad "ragged CSV" "$IN/ragged.csv" --input "$IN/ragged.csv"
bad "non-numeric CSV field" "$IN/word.csv" --input "$IN/word.csv"
bad "empty file" "$IN/empty.csv" --input "$IN/empty.csv"
bad "complex .npy" "$IN/complex.npy" --input "$IN/complex.npy" --input "$IN/labels6.npy"
bad "Fortran-order .npy" "$IN/fortran.npy" --input "$IN/fortran.npy" --input "$IN/labels6.npy"
bad "truncated .npy" "$IN/short.npy" --input "$IN/short.npy" --input "$IN/labels6.npy"
bad "npz without the arrays" "$IN/names.npz" --input "$IN/names.npz"
bad "HDF5 without the dataset" "$IN/names.h5" --input "$IN/names.h5"
bad "features and labels of different N" "$IN/labels5.npy" --input "$IN/x6.npy" --input "$IN/labels5.npy"
grep -q "np.ascontiguousarray" <("$BIN/dptrain-data" ingest --input "$IN/fortran.npy" --input "$IN/labels6.npy" --out "$WORK/bad" 2>&1 || true) \
  || fail "Fortran-order .npy: the message should say np.ascontiguousarray"

# Under mpirun a bad input still gives one error line (from the lowest rank) and a failing exit.
set +e
$MPIRUN -np 2 "$BIN/dptrain-data" ingest --input "$IN/ragged.csv" --out "$WORK/bad" >"$WORK/mpi.out" 2>&1
RC=$?
set -e
[ "$RC" != 0 ] && [ "$(grep -c '^dptrain-data: error: ' "$WORK/mpi.out")" = 1 ] \
  || { cat "$WORK/mpi.out"; fail "mpirun -np 2 with a ragged CSV: want a failing exit and one error line"; }
echo "ok: mpirun -np 2 with a bad input -> exit $RC, one error line"
