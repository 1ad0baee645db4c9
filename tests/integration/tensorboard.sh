#!/usr/bin/env bash
# --tensorboard: the event files are read back by an independent reader: Python's protobuf
# (python3-protobuf) decoding the Event messages through a .proto subset compiled here by protoc,
# and python3-crc32c checking every TFRecord's two masked CRC-32Cs. Every step line's and every
# evaluation's values must equal metrics.jsonl's, and a resumed run's file must start its session
# at the checkpoint's step (so TensorBoard drops what the stopped run logged past it).
source "$(dirname "$0")/lib.bash"
command -v protoc >/dev/null && /usr/bin/python3 -c 'import google.protobuf, crc32c' 2>/dev/null \
  || { echo "SKIPPED tensorboard: protoc, python3-protobuf or python3-crc32c missing (make test-deps)"; exit 0; }
synth "$WORK/data" --train-samples 4096 --val-samples 512
train 2 --data "$WORK/data" --steps 40 --log-every 10 --eval-every 20 --checkpoint-every 20 --stop-after 20 \
  --run-dir "$WORK/run" --tensorboard
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "first run exited $RC"; }
sleep 1  # the resumed run's file is named by the second it opens
train 2 --data "$WORK/data" --steps 40 --log-every 10 --eval-every 20 --checkpoint-every 20 \
  --run-dir "$WORK/run" --tensorboard --resume auto
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "resumed run exited $RC"; }
cat >"$WORK/tb.proto" <<'PROTO'
syntax = "proto3";
package tb;
message SummaryValue { string tag = 1; float simple_value = 2; }
message Summary { repeated SummaryValue value = 1; }
message SessionLog { int32 status = 1; }
message Event {
  double wall_time = 1;
  int64 step = 2;
  oneof what { string file_version = 3; Summary summary = 5; SessionLog session_log = 6; }
}
PROTO
(cd "$WORK" && protoc --python_out=. tb.proto) || fail "protoc could not compile the .proto subset"
/usr/bin/python3 - "$WORK" <<'PY' || fail "the event files do not match metrics.jsonl"
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
assert len(files) == 2, f"want one event file per run, found {files}"
scalars = {}
for i, f in enumerate(files):
    events = list(records(f))
    assert events[0].file_version == "brain.Event:2", f"{f}: no file_version first"
    if i == 1:
        assert events[1].WhichOneof("what") == "session_log" and events[1].session_log.status == 1 \
            and events[1].step == 20, f"{f}: the resumed run does not start its session at step 20"
    for e in events:
        if e.WhichOneof("what") == "summary":
            for v in e.summary.value:
                scalars[(v.tag, e.step)] = v.simple_value
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
steps = sorted({s for (t, s) in scalars if t == "train/loss"})
if steps != [10, 20, 30, 40]:
    bad.append(f"loss at steps {steps}, want [10, 20, 30, 40]")
print("\n".join(bad[:10]) if bad else f"tensorboard ok: {len(scalars)} scalars in {len(files)} files match metrics.jsonl")
sys.exit(1 if bad else 0)
PY
