#!/usr/bin/env bash
# --tensorboard: the event files are read back by an independent reader: Python's protobuf
# (python3-protobuf) decoding the Event messages through a .proto subset compiled here by protoc,
# and python3-crc32c checking every TFRecord's two masked CRC-32Cs, the files read in name order as
# TensorBoard reads them and with its rule for a restart (a SessionLog START at step S drops what
# was logged at S and later). What TensorBoard then shows must be metrics.jsonl, each step once:
#   1. a run killed after its checkpoint at step 20 (it logged steps 25 and 30) and resumed at once
#      (no pause: two files of one second must not overwrite or misorder each other);
#   2. the same directory trained again from step 0 (--overwrite-checkpoints).
source "$(dirname "$0")/lib.bash"
command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf, crc32c' 2>/dev/null \
  || { echo "SKIPPED tensorboard: protoc, python3-protobuf or python3-crc32c missing (make test-deps)"; exit 0; }
synth "$WORK/data" --train-samples 4096 --val-samples 512
T=(--data "$WORK/data" --steps 40 --log-every 5 --eval-every 20 --checkpoint-every 20 --run-dir "$WORK/run" --tensorboard)
refused 2 "${T[@]}" --inject-fault 0:33:kill
grep -q "^step *30/40" "$WORK/out" || { cat "$WORK/out"; fail "the killed run did not log step 30"; }
train 2 "${T[@]}" --resume auto
[ "$RC" = 0 ] && grep -q "resumed from .*ckpt-00000020.h5 at step 20" "$WORK/out" || { cat "$WORK/out"; fail "resumed run exited $RC"; }
cat >"$WORK/tb.proto" <<'PROTO'
syntax = "proto3";
package tb;
message SummaryValue { string tag = 1; float simple_value = 2; }
message Summary { repeated SummaryValue value = 1; }
message SessionLog { int32 status = 1; }
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; SessionLog session_log = 7; }
}
PROTO
(cd "$WORK" && protoc --python_out=. tb.proto) || fail "protoc could not compile the .proto subset"
cat >"$WORK/tbcheck.py" <<'PY'
import glob, json, math, struct, sys
import crc32c
sys.path.insert(0, sys.argv[1])
import tb_pb2

def masked(data):
    c = crc32c.crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF

def records(path):
    blob = open(path, "rb").read()
    at = 0
    while at < len(blob):
        head = blob[at:at + 8]
        (n,) = struct.unpack("<Q", head)
        (hcrc,) = struct.unpack("<I", blob[at + 8:at + 12])
        assert hcrc == masked(head), f"{path}: bad length CRC at byte {at}"
        data = blob[at + 12:at + 12 + n]
        (dcrc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        assert dcrc == masked(data), f"{path}: bad data CRC at byte {at}"
        at += 16 + n
        e = tb_pb2.Event()
        e.ParseFromString(data)
        yield e

files = sorted(glob.glob(sys.argv[1] + "/run/events.out.tfevents.*"))
assert len(files) == int(sys.argv[2]), f"want {sys.argv[2]} event files (one per run), found {files}"
seen = []  # (tag, step, value) as TensorBoard keeps them
for f in files:
    events = list(records(f))
    assert events[0].file_version == "brain.Event:2", f"{f}: no file_version first"
    assert events[1].WhichOneof("what") == "session_log" and events[1].session_log.status == 1, \
        f"{f}: no SessionLog START second"
    for e in events:
        if e.WhichOneof("what") == "session_log" and e.session_log.status == 1:
            seen = [x for x in seen if x[1] < e.step]  # TensorBoard's purge on a restart
        elif e.WhichOneof("what") == "summary":
            seen += [(v.tag, e.step, v.simple_value) for v in e.summary.value]
scalars, twice = {}, []
for t, st, v in seen:
    if (t, st) in scalars:
        twice.append(f"{t} at step {st}")
    scalars[(t, st)] = v
want = []
for line in open(sys.argv[1] + "/run/metrics.jsonl"):
    r = json.loads(line)
    if r["type"] == "step":
        want += [("train/loss", r["step"], r["loss"]), ("train/lr", r["step"], r["lr"]),
                 ("train/grad_norm", r["step"], r["grad_norm"]), ("train/samples_per_s", r["step"], r["samples_per_s"]),
                 ("time/data_wait_pct", r["step"], r["data_wait_pct"])]
    elif r["type"] == "eval":
        want += [("eval/loss", r["step"], r["val_loss"]), ("eval/accuracy", r["step"], r["val_accuracy"])]
bad = [f"{t} at step {s}: event {scalars.get((t, s))}, metrics {v}" for t, s, v in want
       if (t, s) not in scalars or not math.isclose(scalars[(t, s)], v, rel_tol=2e-5, abs_tol=1e-6)]
bad += [f"shown twice: {x}" for x in twice[:5]]
steps = sorted({s for (t, s) in scalars if t == "train/loss"})
if steps != list(range(5, int(sys.argv[3]) + 1, 5)):
    bad.append(f"loss at steps {steps}, want 5, 10, ... {sys.argv[3]}")
print("\n".join(bad[:10]) if bad else f"tensorboard ok: {len(scalars)} scalars in {len(files)} files match metrics.jsonl")
sys.exit(1 if bad else 0)
PY
# tbcheck.py WORK FILES LAST_STEP
/usr/bin/python3 "$WORK/tbcheck.py" "$WORK" 2 40 || fail "killed and resumed: TensorBoard's view is not metrics.jsonl"
train 2 "${T[@]}" --steps 10 --overwrite-checkpoints
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the run again from step 0 exited $RC"; }
/usr/bin/python3 "$WORK/tbcheck.py" "$WORK" 3 10 || fail "trained again from step 0: TensorBoard's view is not metrics.jsonl"
