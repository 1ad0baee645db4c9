#!/usr/bin/env bash
# --trace: each rank writes a Chrome trace; dptrain-report merges them; the merged file parses as
# JSON and holds every phase of every step on every rank, each bucket's all-reduce with its bytes
# and algorithm (the two ranks' intervals of it overlapping: one clock), and the evaluation and
# checkpoint phases.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2000 --val-samples 256
train 2 --data "$WORK/data" --steps 20 --batch-size 8 --log-every 10 --eval-every 10 --checkpoint-every 10 \
  --bucket-mb 0.1 --overlap on --run-dir "$WORK/run" --trace "$WORK/run/trace.json"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "traced run exited $RC"; }
"$BIN/dptrain-report" trace "$WORK/merged.json" "$WORK"/run/trace-rank0000{0,1}.json || fail "merge failed"
/usr/bin/python3 - "$WORK/merged.json" <<'PY' || fail "the merged trace is incomplete"
import json, sys
events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e["ph"] == "X"]
bad = []
for rank in (0, 1):
    mine = [e for e in events if e["pid"] == rank]
    for step in range(1, 21):
        names = {e["name"] for e in mine if e["args"]["step"] == step}
        for phase in ("data", "forward", "backward", "all-reduce", "optimizer", "allreduce"):
            if phase not in names:
                bad.append(f"rank {rank} step {step}: no {phase}")
    for phase, steps in (("evaluation", {10, 20}), ("checkpoint", {10, 20})):
        got = {e["args"]["step"] for e in mine if e["name"] == phase}
        if got != steps:
            bad.append(f"rank {rank}: {phase} at steps {sorted(got)}, want {sorted(steps)}")
    buckets = [e for e in mine if e["name"] == "allreduce"]
    if any(e["args"]["bytes"] <= 0 or e["args"]["algorithm"] not in ("flat", "hierarchical") for e in buckets):
        bad.append(f"rank {rank}: an all-reduce event without bytes or algorithm")
    if any(e["dur"] < 0 for e in mine):
        bad.append(f"rank {rank}: negative duration")
# The ranks' clocks line up: a bucket's all-reduce is one collective, so on one machine's clock the
# two ranks' intervals of it overlap (each rank's trace counted from its own first event, and a
# rank that started later looked earlier).
spans = {r: {} for r in (0, 1)}
for e in events:
    if e["name"] == "allreduce":
        spans[e["pid"]].setdefault(e["args"]["step"], []).append((e["ts"], e["ts"] + e["dur"]))
apart = [(step, a, b) for step in spans[0] for a, b in zip(spans[0][step], spans[1].get(step, []))
         if a[0] > b[1] + 1 or b[0] > a[1] + 1]
if apart:
    bad.append(f"{len(apart)} bucket all-reduces whose two ranks' intervals do not overlap, e.g. step {apart[0][0]}: "
               f"{apart[0][1]} and {apart[0][2]} (us)")
print("\n".join(bad[:10]) if bad else f"trace ok: {len(events)} events")
sys.exit(1 if bad else 0)
PY
# With --grad-accum 4 each step holds four forwards and backwards; the trace keeps them all.
train 1 --data "$WORK/data" --steps 40 --batch-size 2 --grad-accum 4 --log-every 20 --eval-every 0 \
  --checkpoint-every 0 --run-dir "$WORK/accum" --trace "$WORK/accum/trace.json"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "traced --grad-accum run exited $RC"; }
/usr/bin/python3 - "$WORK/accum/trace-rank00000.json" <<'PY' || fail "the --grad-accum trace lost events"
import json, sys
t = json.load(open(sys.argv[1]))
events = [e for e in t["traceEvents"] if e["ph"] == "X"]
dropped = t["otherData"]["dropped"]
short = [s for s in range(1, 41) if sum(e["name"] == "forward" and e["args"]["step"] == s for e in events) != 4]
print(f"--grad-accum 4: {len(events)} events, {dropped} dropped, steps without 4 forwards: {short}")
sys.exit(1 if dropped or short else 0)
PY
# A rank's trace cut short (its rank killed while writing it) must not merge into invalid JSON: one
# line names the file and where it ends, exit 2.
head -c 3000 "$WORK/run/trace-rank00001.json" >"$WORK/cut.json"
set +e
"$BIN/dptrain-report" trace "$WORK/bad-merge.json" "$WORK/run/trace-rank00000.json" "$WORK/cut.json" 2>"$WORK/err"
rc=$?
set -e
[ "$rc" = 2 ] || fail "merging a cut trace: exit $rc, want 2"
[ "$(wc -l <"$WORK/err")" = 1 ] && grep -q "^dptrain-report: error: $WORK/cut.json: line [0-9]* column [0-9]*: .*cut short" "$WORK/err" \
  || { cat "$WORK/err"; fail "merging a cut trace: not one line naming the file and where"; }
echo "a cut trace is refused: $(cat "$WORK/err")"
# --trace FILE without an extension writes FILE-rank00000.json, the name the docs' merge command
# reads (it wrote FILE-rank00000); a path no rank can write stops the run before its first step.
train 1 --data "$WORK/data" --steps 2 --batch-size 8 --eval-every 0 --run-dir "$WORK/plain" --trace "$WORK/plain/FILE"
[ "$RC" = 0 ] && [ -s "$WORK/plain/FILE-rank00000.json" ] || { ls "$WORK/plain"; fail "--trace FILE: no FILE-rank00000.json"; }
refused 2 --data "$WORK/data" --steps 2 --batch-size 8 --eval-every 0 --run-dir "$WORK/unwritable" --trace /proc/none/t
[ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error: --trace /proc/none' "$WORK/out")" = 1 ] && ! grep -q '^step' "$WORK/out" \
  || { cat "$WORK/out"; fail "an unwritable --trace: want one line and exit 2 before the first step"; }
echo "ok: --trace FILE writes FILE-rank00000.json; an unwritable one stops the run at start"
# A resumed run given the same --trace (a requeued job's command line) keeps the first run's files
# and writes its own beside them, named by the step it resumed from (it once emptied the first
# run's at its start and wrote over them at its end).
sum0=$(cat "$WORK"/run/trace-rank0000{0,1}.json | md5sum)
train 2 --data "$WORK/data" --steps 30 --batch-size 8 --log-every 10 --eval-every 10 --checkpoint-every 10 \
  --bucket-mb 0.1 --run-dir "$WORK/run" --resume auto --trace "$WORK/run/trace.json"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the resumed traced run exited $RC"; }
[ "$(cat "$WORK"/run/trace-rank0000{0,1}.json | md5sum)" = "$sum0" ] || fail "the resumed run changed the first run's traces"
/usr/bin/python3 - "$WORK"/run/trace-from00000020-rank0000{0,1}.json <<'PY' || fail "the resumed run's traces lack its steps"
import json, sys
for path in sys.argv[1:]:
    steps = {e["args"]["step"] for e in json.load(open(path))["traceEvents"] if e["ph"] == "X" and e["name"] == "forward"}
    if steps != set(range(21, 31)):
        sys.exit(f"{path}: forward steps {sorted(steps)}, want 21..30")
PY
echo "ok: a resumed run's traces are trace-from00000020-rank*.json; the first run's are kept"
