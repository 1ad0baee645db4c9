#!/usr/bin/env bash
# What a run says about itself: the step breakdown in the metrics and at the end (with a
# straggler made on purpose named), the warning of an input-bound run, EMF records that validate against docs/emf-schema.json,
# progress with percent and ETA, in place on a terminal and plain lines otherwise.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 2000 --val-samples 256
host=$(hostname)

# Rank 1 is a straggler from step 1: its forward takes 20 ms longer.
train 2 --data "$WORK/data" --steps 30 --batch-size 16 --log-every 10 --eval-every 30 --checkpoint-every 10 --run-dir "$WORK/run" \
  --metrics-format emf --job-name it-job --progress plain --inject-fault 1:1:slow
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the EMF run exited $RC"; }
grep -q $'\r' "$WORK/out" && fail "--progress plain wrote carriage returns"
grep -Eq '^step 10/30  33% \|.*\| ETA [0-9]+s$' "$WORK/out" || { cat "$WORK/out"; fail "no step line with percent and ETA"; }
grep -q '^step breakdown over 29 steps (the first, a warm-up, left out)' "$WORK/out" || { cat "$WORK/out"; fail "no breakdown at the end"; }
grep -Eq "^  forward .*slowest rank 1 on $host: " "$WORK/out" || { cat "$WORK/out"; fail "the straggler (rank 1) is not named"; }

/usr/bin/python3 - "$WORK/run/metrics.jsonl" "$ROOT/docs/emf-schema.json" "$host" <<'PY' || fail "the EMF metrics are wrong"
import json, sys
import jsonschema
path, schema_path, host = sys.argv[1:4]
schema = json.load(open(schema_path))
bad, kinds = [], {}
phases = ["data", "forward", "backward", "allreduce", "optimizer"]
for n, line in enumerate(open(path), 1):
    rec = json.loads(line)
    try:
        jsonschema.validate(rec, schema)
    except jsonschema.ValidationError as e:
        bad.append(f"line {n}: {e.message}")
        continue
    for d in rec["_aws"]["CloudWatchMetrics"]:
        for dims in d["Dimensions"]:
            for name in dims:
                if not isinstance(rec.get(name), str):
                    bad.append(f"line {n}: dimension {name} is not a string member")
        for m in d["Metrics"]:
            v = rec.get(m["Name"])
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                bad.append(f"line {n}: metric {m['Name']} is not a number")
    if rec["job"] != "it-job":
        bad.append(f"line {n}: job {rec['job']}")
    kinds.setdefault(rec["type"], []).append(rec)
steps = kinds.get("step", [])
if [r["step"] for r in steps] != [10, 20, 30]:
    bad.append(f"step records at {[r['step'] for r in steps]}, want 10, 20, 30")
for r in steps + kinds.get("summary", []):
    if sorted(r.get("phases", {})) != sorted(phases):
        bad.append(f"{r['type']} {r['step']}: phases {sorted(r.get('phases', {}))}")
        continue
    fw = r["phases"]["forward"]
    if fw["slowest_rank"] != 1 or fw["max_ms"] < 20 or fw["mean_ms"] > fw["max_ms"]:
        bad.append(f"{r['type']} {r['step']}: forward {fw}, want rank 1 slowest by 20 ms")
    if r["type"] == "step" and "Dimensions" in r["_aws"]["CloudWatchMetrics"][0]:
        if r["_aws"]["CloudWatchMetrics"][0]["Dimensions"] != [["job"]]:
            bad.append(f"step {r['step']}: dimensions {r['_aws']['CloudWatchMetrics'][0]['Dimensions']}")
ranks = kinds.get("rank", [])
if sorted((r["step"], r["rank"]) for r in ranks) != [(s, k) for s in (10, 20, 30) for k in ("0", "1")]:
    bad.append(f"per-rank records: {sorted((r['step'], r['rank']) for r in ranks)}")
for r in ranks:
    if r["node"] != host or r["_aws"]["CloudWatchMetrics"][0]["Dimensions"] != [["job", "rank", "node"]]:
        bad.append(f"rank record {r['rank']}: node {r['node']}")
    if r["rank"] == "1" and r["forward_ms"] < 20:
        bad.append(f"rank 1 forward_ms {r['forward_ms']} < 20 ms")
if [(r["steps"], r["warmup_steps"]) for r in kinds.get("summary", [])] != [(29, 1)]:
    bad.append(f"summary: {kinds.get('summary')}: want 29 steps and 1 warm-up step left out")
if [r["step"] for r in kinds.get("stop_budget", [])] != [10]:
    bad.append(f"stop_budget records: {kinds.get('stop_budget')}: want one, at step 10 (the first checkpoint)")
if len(kinds.get("summary", [])) != 1 or len(kinds.get("eval", [])) != 1:
    bad.append(f"{len(kinds.get('summary', []))} summary and {len(kinds.get('eval', []))} eval records, want 1 each")
print("\n".join(bad[:10]) if bad else f"emf ok: {sum(len(v) for v in kinds.values())} records")
sys.exit(1 if bad else 0)
PY

# A record that breaks the schema must fail the check (the check can fail).
echo '{"_aws":{"Timestamp":1,"CloudWatchMetrics":[{"Namespace":"a:b","Dimensions":[["job"]],"Metrics":[]}]},"type":"step","step":1,"job":"x"}' >"$WORK/bad.json"
/usr/bin/python3 -c 'import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.load(open(sys.argv[2])))' \
  "$WORK/bad.json" "$ROOT/docs/emf-schema.json" 2>/dev/null && fail "the schema accepted a namespace with ':'"

# A resumed EMF run only appends (the CloudWatch agent tails the file: one rewritten under it is read
# again from the start, every record shipped twice); a JSON-lines run drops the records past its
# checkpoint (step 15 here, of a run killed in step 17 with a checkpoint of step 10).
for fmt in emf jsonl; do
  train 1 --data "$WORK/data" --steps 20 --batch-size 16 --log-every 5 --eval-every 0 --checkpoint-every 10 \
    --run-dir "$WORK/resumed-$fmt" --metrics-format "$fmt" --inject-fault 0:17:kill
  [ "$RC" != 0 ] || fail "$fmt: the run with a kill in step 17 exited 0"
  cp "$WORK/resumed-$fmt/metrics.jsonl" "$WORK/first-$fmt"
  train 1 --data "$WORK/data" --steps 20 --batch-size 16 --log-every 5 --eval-every 0 --checkpoint-every 10 \
    --run-dir "$WORK/resumed-$fmt" --metrics-format "$fmt" --resume auto
  [ "$RC" = 0 ] || { cat "$WORK/out"; fail "$fmt: the resumed run exited $RC"; }
  steps=$(grep '"type":"step"' "$WORK/resumed-$fmt/metrics.jsonl" | grep -o '"step":[0-9]*' | sed 's/.*://' | tr '\n' ' ')
  if [ "$fmt" = emf ]; then
    cmp -s "$WORK/first-$fmt" <(head -c "$(stat -c %s "$WORK/first-$fmt")" "$WORK/resumed-$fmt/metrics.jsonl") \
      || fail "emf: the resumed run rewrote what the first had written"
    [ "$steps" = "5 10 15 15 20 " ] || fail "emf: step records $steps, want 5 10 15 15 20"
  else
    [ "$steps" = "5 10 15 20 " ] || fail "jsonl: step records $steps, want 5 10 15 20 (the killed run's 15 dropped)"
  fi
done
echo "ok: a resumed EMF run only appends; a JSON-lines one drops the records past its checkpoint"

# On a terminal (forced here: the test's output is a file), a status line is updated in place
# between step lines and cleared before each printed line.
train 1 --data "$WORK/data" --steps 400 --batch-size 16 --log-every 400 --eval-every 400 --run-dir "$WORK/tty" \
  --progress tty
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the tty run exited $RC"; }
grep -aq $'\r\x1b\[Kstep [0-9]*/400 [0-9]*% | [0-9.]* ms/step | ETA ' "$WORK/out" || { cat -v "$WORK/out"; fail "no in-place status line"; }
grep -aq $'\r\x1b\[Kstep 400/400 100% | loss' "$WORK/out" || { cat -v "$WORK/out" | tail; fail "the status line was not cleared before the step line"; }

# An input-bound run (rank 1's reads take 20 ms more from step 1) gets one warning naming the
# input pipeline and the rank, when the second and third step lines both show the wait; a
# balanced run gets none. (The balanced run's steps are larger and its intervals longer: 10 steps
# of 16 samples last about a millisecond, and a reader thread kept off a shared core by the ranks
# for a scheduler slice in two intervals in a row would be over 5% of that.)
train 2 --data "$WORK/data" --steps 30 --batch-size 16 --log-every 10 --run-dir "$WORK/slowread" --inject-fault 1:1:slow-read
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the slow-read run exited $RC"; }
[ "$(grep -c '^warning: waiting for data takes .* (slowest rank 1 on .*the input pipeline is the bottleneck' "$WORK/out")" = 1 ] \
  || { cat "$WORK/out"; fail "want exactly one data-wait warning naming rank 1"; }
train 2 --data "$WORK/data" --steps 150 --batch-size 64 --log-every 50 --run-dir "$WORK/balanced" --io memory
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "the balanced run exited $RC"; }
grep -q '^warning: waiting for data' "$WORK/out" && { cat "$WORK/out"; fail "a warning on a run that does not wait for data"; }

train 1 --data "$WORK/data" --steps 2 --metrics-format csv --run-dir "$WORK/x"
[ "$RC" = 2 ] && grep -q "metrics-format 'csv' is unknown; use jsonl or emf" "$WORK/out" || { cat "$WORK/out"; fail "a bad --metrics-format was not refused"; }
echo "observability ok"

# --profile-ops: the op table of the step named; with --grad-accum, of its last micro-batch, said
# so (it was headed as the whole step's, a third of it at --grad-accum 3).
train 1 --data "$WORK/data" --steps 6 --batch-size 8 --eval-every 0 --run-dir "$WORK/ops" --profile-ops 4
[ "$RC" = 0 ] && grep -q "^ops of step 4 on rank 0, forward + backward (wall clock around each op):$" "$WORK/out" \
  && grep -Eq "^  matmul +[0-9.]+ ms" "$WORK/out" || { cat "$WORK/out"; fail "--profile-ops 4: no op table of step 4"; }
train 1 --data "$WORK/data" --steps 6 --batch-size 8 --eval-every 0 --run-dir "$WORK/ops3" --profile-ops 4 --grad-accum 3
[ "$RC" = 0 ] && grep -q "^ops of step 4's last micro-batch (of 3) on rank 0, forward + backward" "$WORK/out" \
  || { cat "$WORK/out"; fail "--profile-ops with --grad-accum 3: the table is not said to be one micro-batch's"; }
echo "ok: --profile-ops names its step, and with --grad-accum its micro-batch"
# A warm-up as long as the run (the default 10 steps, in these runs of 6) is said: the rate only
# rises, never to --lr's peak and decay. The 30-step runs above have none.
grep -q "^note: --warmup-steps 10 >= --steps 6: the learning rate only rises, to [0-9.]*e-0[0-9] at the last step (--lr " \
  "$WORK/out" || { cat "$WORK/out"; fail "a warm-up longer than the run: no note"; }
train 1 --data "$WORK/data" --steps 12 --batch-size 8 --eval-every 0 --run-dir "$WORK/warm"
[ "$RC" = 0 ] && ! grep -q "^note: --warmup-steps" "$WORK/out" || { cat "$WORK/out"; fail "a note on a warm-up shorter than the run"; }
echo "ok: a warm-up as long as the run is noted"
