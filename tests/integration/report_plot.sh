#!/usr/bin/env bash
# dptrain-report plot: a recorded metrics.jsonl (step records with phases, eval records, other
# record types, blank lines, a resumed stretch) gives the four charts as SVG and PNG, each file
# well formed; a malformed line, a file without step records and a missing file each end it with
# exit status 2 and one error line naming the file (and the line). No training run: the input is
# written here, so the test is quick and does not depend on the trainer's timing.
source "$(dirname "$0")/lib.bash"
REPORT=$BIN/dptrain-report
mkdir -p "$WORK/run"

/usr/bin/python3 - "$WORK/run/metrics.jsonl" <<'PY'
import json, math, sys
lines = [json.dumps({"type": "run", "ranks": 2})]
def step(s, loss):
    phases = {name: {"mean_ms": ms, "p90_ms": ms * 1.2, "max_ms": ms * 1.5, "slowest_rank": 1}
              for name, ms in (("data", 0.02), ("forward", 0.4), ("backward", 0.8 + s / 1e4),
                               ("allreduce", 0.3), ("optimizer", 0.1))}
    return json.dumps({"type": "step", "step": s, "total": 600, "loss": loss, "grad_norm": 0.9,
                       "lr": 2e-3 * min(1, s / 100), "ms_per_step": 1.7, "samples_per_s": 150000 + 10 * s,
                       "data_wait_pct": 0.3, "comm_exposed_pct": 2.1, "comm_total_pct": 5,
                       "tokens_per_s": 0, "mfu": -1, "phases": phases}, separators=(",", ":"))
for s in range(20, 420, 20):
    lines.append(step(s, 2 * math.exp(-s / 200) + 0.3))
    if s % 100 == 0:
        lines.append(json.dumps({"type": "eval", "step": s, "val_loss": 2 * math.exp(-s / 200) + 0.35,
                                 "val_accuracy": 0.8, "samples": 512}))
lines.append("")  # blank lines are allowed
lines.append(json.dumps({"type": "health", "rank": 1, "status": "ok"}))
for s in range(320, 620, 20):  # resumed from the checkpoint at step 300
    lines.append(step(s, 2 * math.exp(-s / 200) + 0.31))
lines.append(json.dumps({"type": "summary", "steps": 600}))
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
PY

"$REPORT" plot "$WORK/run" >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/out" "$WORK/err"; fail "plot exited $?"; }
[ ! -s "$WORK/err" ] || { cat "$WORK/err"; fail "plot wrote to stderr on good input"; }
for name in loss lr throughput phases; do
  for ext in svg png; do
    f=$WORK/run/plots/$name.$ext
    [ -s "$f" ] || fail "$f was not written"
    grep -qxF "dptrain-report: wrote $f" "$WORK/out" || { cat "$WORK/out"; fail "no 'wrote $f' line"; }
  done
done
[ "$(wc -l <"$WORK/out")" = 8 ] || { cat "$WORK/out"; fail "expected 8 'wrote' lines"; }

"$REPORT" plot "$WORK/run" --describe >"$WORK/describe.jsonl" || fail "plot --describe exited $?"
/usr/bin/python3 - "$WORK/run/plots" "$WORK/describe.jsonl" <<'PY' || fail "the charts are not well formed"
import json, struct, sys
import xml.etree.ElementTree as ET
d = sys.argv[1]
charts = {c["file"]: c for c in map(json.loads, open(sys.argv[2]))}
bad = []
for name in ("loss", "lr", "throughput", "phases"):
    png = open(f"{d}/{name}.png", "rb").read()
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        bad.append(f"{name}.png: no PNG signature")
        continue
    w, h = struct.unpack(">II", png[16:24])
    if (w, h) != (800, 450):
        bad.append(f"{name}.png: {w}x{h}, want 800x450")
    root = ET.parse(f"{d}/{name}.svg").getroot()  # raises on malformed XML
    if root.tag != "{http://www.w3.org/2000/svg}svg" or root.get("viewBox") != "0 0 800 450":
        bad.append(f"{name}.svg: root element {root.tag}, viewBox {root.get('viewBox')}")
    c = charts[name]
    names = [s["name"] for s in c["series"]]
    want = {"loss": 2, "lr": 1, "throughput": 1, "phases": 5}[name]
    if len(names) != want:
        bad.append(f"{name}: {len(names)} series, want {want}")
    if name == "phases" and names != ["data", "forward", "backward", "allreduce", "optimizer"]:
        bad.append(f"phases: series {names}, want every phase in the log's order")
    if name == "throughput" and c["y_title"] != "samples/s":
        bad.append(f"throughput: y axis {c['y_title']!r} is not samples/s though tokens_per_s is 0")
    if name == "loss":
        # 30 distinct logged steps: the resumed stretch replaces steps 320-400 of the first attempt.
        n = c["series"][0]["points"]
        if n != 30:
            bad.append(f"loss: train loss has {n} points, want 30")
print("\n".join(bad) if bad else "charts ok")
sys.exit(1 if bad else 0)
PY

# Without phases the phases chart says so instead of failing; --out picks the directory.
sed 's/,"phases":.*$/}/' "$WORK/run/metrics.jsonl" >"$WORK/nophases.jsonl"  # phases is the last member
"$REPORT" plot "$WORK/nophases.jsonl" --out "$WORK/other" >/dev/null || fail "plot without phases exited $?"
[ -s "$WORK/other/phases.svg" ] && [ -s "$WORK/other/phases.png" ] || fail "plot without phases wrote no phases chart"
"$REPORT" plot "$WORK/nophases.jsonl" --describe | matches '"file":"phases",.*"message":"no phase data"' \
  || fail "the phases chart without phase data does not say so"

# expect_error FILE PATTERN: plot must exit 2 with exactly one stderr line matching PATTERN.
expect_error() {
  local rc=0
  "$REPORT" plot "$1" --out "$WORK/bad-out" >"$WORK/out" 2>"$WORK/err" || rc=$?
  [ "$rc" = 2 ] || { cat "$WORK/err"; fail "plot $1: exit $rc, want 2"; }
  [ "$(wc -l <"$WORK/err")" = 1 ] || { cat "$WORK/err"; fail "plot $1: want one stderr line"; }
  grep -qE "$2" "$WORK/err" || { cat "$WORK/err"; fail "plot $1: stderr does not match '$2'"; }
}
# A line cut short in the middle of the file (line 5), as a crash during a write would leave it.
awk 'NR == 5 { print substr($0, 1, 50); next } { print }' "$WORK/run/metrics.jsonl" >"$WORK/cut.jsonl"
expect_error "$WORK/cut.jsonl" "^dptrain-report: error: $WORK/cut.jsonl:5: column [0-9]+: "
printf '{"type":"run"}\n\n{"type":"eval","step":1,"val_loss":1,"val_accuracy":0,"samples":1}\n' >"$WORK/nosteps.jsonl"
expect_error "$WORK/nosteps.jsonl" "^dptrain-report: error: $WORK/nosteps.jsonl: no step records$"
expect_error "$WORK/missing.jsonl" "^dptrain-report: error: $WORK/missing.jsonl: cannot open it$"
[ ! -e "$WORK/bad-out" ] || fail "a failed plot created its output directory"

# The trace subcommand and its usage text still answer.
"$REPORT" --help | matches 'dptrain-report trace OUT.json' || fail "--help lacks the trace usage"
# A run with a non-finite loss (written as null, skipped with --on-nonfinite skip) and a last line
# cut short (the run killed while writing it): plotted, the cut line left out with one warning
# (both were refused: the runs a user most wants to look at).
mkdir -p "$WORK/nan"
{ sed -n '2,6p' "$WORK/run/metrics.jsonl" | sed '3s/"loss":[0-9.e+-]*/"loss":null/'; printf '{"type":"step","step":99'; } >"$WORK/nan/metrics.jsonl"
grep -q '"loss":null' "$WORK/nan/metrics.jsonl" || fail "the test's null loss was not written"
"$REPORT" plot "$WORK/nan" >"$WORK/out" 2>"$WORK/err" || { cat "$WORK/err"; fail "plot of a run with a null loss and a cut last line exited $?"; }
[ "$(wc -l <"$WORK/err")" = 1 ] && grep -q "^warning: .*nan/metrics.jsonl:6: the last line is cut short" "$WORK/err" \
  || { cat "$WORK/err"; fail "a cut last line: want one warning naming it"; }
"$REPORT" --help | matches 'dptrain-report plot RUN_DIR' || fail "--help lacks the plot usage"
echo "report plot ok"
