#!/usr/bin/env bash
# A new model reaches servers only once promoted (docs/SERVING.md, "A fleet"):
#   1. --promote-if promotes the checkpoints whose evaluation meets it and not the others (the
#      threshold set between two evaluations of the same run made before), and the rotation keeps
#      the promoted ones
#   2. dptrain-ckpt promote / rollback / promotions; a canary replica takes a promotion at once, a
#      stable one after --canary-seconds, a rollback moves both back, and a newer checkpoint that
#      nobody promoted is never served
#   3. SIGTERM with 8 streams in flight and --drain-seconds 1: /readyz is 503 from the signal on,
#      every stream ends with its final event and [DONE] within the drain, the server exits 0
#   4. bad options get one line and exit 2
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
"$PY" "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --lr 3e-3
   --warmup-steps 10 --eval-every 20 --eval-max 64 --log-every 1000 --steps 120)
evals() { grep '"type":"eval"' "$1/metrics.jsonl" | sed 's/.*"step":\([0-9]*\),"val_loss":\([0-9.e+-]*\).*/\1 \2/'; }

# 1. The same run twice: the first gives the evaluations, the second promotes by a threshold
# halfway between the third and fourth.
train 1 "${G[@]}" --run-dir "$WORK/first"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }
X=$(evals "$WORK/first" | awk 'NR == 3 { a = $2 } NR == 4 { b = $2 } END { printf "%.6f", (a + b) / 2 }')
want=$(evals "$WORK/first" | awk -v x="$X" '$2 <= x { print $1 }' | paste -sd' ')
train 1 "${G[@]}" --run-dir "$WORK/run" --keep-checkpoints 1 --promote-if "val_loss<=$X"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training with --promote-if exited $RC"; }
got=$(grep '^promoted step' "$WORK/out" | sed 's/^promoted step \([0-9]*\) .*/\1/' | paste -sd' ')
[ -n "$want" ] && [ "$got" = "$want" ] || { cat "$WORK/out"; fail "--promote-if val_loss<=$X: promoted '$got', want '$want'"; }
kept=$(ls "$WORK/run/checkpoints" | sed -n 's/^ckpt-0*\([0-9]*\)\.h5$/\1/p' | sort -n | paste -sd' ')
[ "$kept" = "$want" ] || fail "--keep-checkpoints 1 kept steps '$kept'; want the promoted ones, '$want'"
grep -q "^promoted step [0-9]* (--promote-if: val_loss [0-9.]* <= $X)$" "$WORK/out" || fail "no line with the promotion's reason"
echo "ok: --promote-if val_loss<=$X promoted steps $got (not the evaluations above it); the rotation kept them"
# --keep-promoted 2: each promotion past the newest two withdraws the oldest.
train 1 "${G[@]}" --run-dir "$WORK/keep" --keep-checkpoints 1 --promote-if "val_loss<=$X" --keep-promoted 2
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training with --keep-promoted exited $RC"; }
in_force=$("$BIN/dptrain-ckpt" promotions "$WORK/keep" | sed -n 's/^step \([0-9]*\) .*/\1/p' | paste -sd' ')
[ "$in_force" = "$(tr ' ' '\n' <<<"$want" | tail -n 2 | paste -sd' ')" ] \
  && grep -q '"action":"withdraw".*"by":"dptrain --keep-promoted"' "$WORK/keep/checkpoints/promotions.jsonl" \
  || fail "--keep-promoted 2: promotions in force '$in_force', want the newest two of '$want'"
echo "ok: --keep-promoted 2 kept steps $in_force in force and withdrew the older ones"

# 2. Servers. A newer checkpoint nobody promoted: 10 more steps without --promote-if.
train 1 "${G[@]}" --run-dir "$WORK/run" --keep-checkpoints 1 --steps 130 --eval-every 0 --resume auto
[ "$RC" = 0 ] && [ -f "$WORK/run/checkpoints/ckpt-00000130.h5" ] || { cat "$WORK/out"; fail "the resumed run"; }
newest=${want##* }
"$BIN/dptrain-ckpt" rollback "$WORK/run" --reason test >"$WORK/rb.out"
before=$(awk '{ print $(NF-1) }' <<<"$want")
grep -q "^withdrew the promotion of step $newest; step $before (ckpt-0*$before.h5) is the promoted one now$" "$WORK/rb.out" \
  || { cat "$WORK/rb.out"; fail "rollback: no line naming what is promoted now"; }
serve() {  # NAME ARGS...: a server on a free port; its URL in URL_NAME
  local name=$1; shift
  "$BIN/dptrain-serve" --checkpoint "$WORK/run" --port 0 --poll-seconds 0.2 --canary-seconds 3 "$@" >"$WORK/$name.out" 2>&1 &
  eval "PID_$name=$!"
  for _ in $(seq 100); do grep -q "listening on" "$WORK/$name.out" && break; sleep 0.1; done
  eval "URL_$name=$(sed -n 's/^serve: listening on \(http:[^ ]*\) .*/\1/p' "$WORK/$name.out")"
}
PID_canary= PID_stable= PID_drain=
trap 'kill $PID_canary $PID_stable $PID_drain 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 3  # the promotions older than --canary-seconds, so the stable replica takes the newest
serve canary --follow canary
serve stable
step_of() { curl -s "$1/v1/models" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["model_step"])'; }
[ "$(step_of "$URL_canary")" = "$before" ] && [ "$(step_of "$URL_stable")" = "$before" ] \
  || fail "after the rollback both must serve step $before (not the unpromoted 130): $(step_of "$URL_canary") / $(step_of "$URL_stable")"
grep -q "^serve: following promotions once promoted for 3 s$" "$WORK/stable.out" || fail "a stable server (--follow auto with promotions) does not say it follows them"
"$BIN/dptrain-ckpt" promote "$WORK/run/checkpoints/ckpt-00000130.h5" --reason "by the test" >/dev/null
t0=$SECONDS
for _ in $(seq 50); do [ "$(step_of "$URL_canary")" = 130 ] && break; sleep 0.1; done
[ "$(step_of "$URL_canary")" = 130 ] && [ "$(step_of "$URL_stable")" = "$before" ] \
  || fail "a promotion: the canary must take it at once and the stable replica not yet"
for _ in $(seq 80); do [ "$(step_of "$URL_stable")" = 130 ] && break; sleep 0.1; done
took=$((SECONDS - t0))
[ "$(step_of "$URL_stable")" = 130 ] && [ "$took" -ge 2 ] || fail "the stable replica took step 130 after ${took} s, want about 3 (--canary-seconds)"
"$BIN/dptrain-ckpt" rollback "$WORK/run" >/dev/null
for _ in $(seq 50); do [ "$(step_of "$URL_canary")$(step_of "$URL_stable")" = "$before$before" ] && break; sleep 0.1; done
[ "$(step_of "$URL_canary")$(step_of "$URL_stable")" = "$before$before" ] || fail "a rollback must move both back to $before"
echo "ok: canary took step 130 at once, the stable replica after ${took} s (--canary-seconds 3); a rollback moved both back to $before; the unpromoted newest was never served"
"$BIN/dptrain-ckpt" promotions "$WORK/run" | grep -q "^newest promotion: step $before " || fail "promotions: no line naming the newest"
# A bad checkpoint: a canary whose model of step 130 answers 500 withdraws its promotion within
# --canary-seconds; the stable replica never serves it, and the canary moves back.
kill "$PID_canary"
serve canary --follow canary --fail-at-step 130
"$BIN/dptrain-ckpt" promote "$WORK/run/checkpoints/ckpt-00000130.h5" --reason "a bad one" >/dev/null
for _ in $(seq 50); do [ "$(step_of "$URL_canary")" = 130 ] && break; sleep 0.1; done
[ "$(step_of "$URL_canary")" = 130 ] || fail "the canary did not take step 130"
# One error is enough: the canary may withdraw the step at its next poll, before a second request.
[ "$(curl -s -o /dev/null -w '%{http_code}' "$URL_canary/v1/completions" -H 'Content-Type: application/json' \
      -d '{"prompt": "the ", "max_tokens": 2}')" = 500 ] || fail "--fail-at-step 130: want 500"
for _ in $(seq 50); do [ "$(step_of "$URL_canary")" = "$before" ] && break; sleep 0.1; done
[ "$(step_of "$URL_canary")" = "$before" ] && grep -q "^serve: withdrew the promotion of step 130 (canary: [0-9]* server errors within" "$WORK/canary.out" \
  || { cat "$WORK/canary.out"; fail "the canary did not withdraw step 130 after its server errors"; }
sleep 3.5  # past --canary-seconds: a stable replica would have taken it
[ "$(step_of "$URL_stable")" = "$before" ] || fail "the stable replica took the withdrawn step 130"
grep -q '"action":"withdraw","step":130,.*"by":"dptrain serve --follow canary"' "$WORK/run/checkpoints/promotions.jsonl" \
  || fail "no withdrawal record by the canary"
echo "ok: a canary whose step 130 answered 500 withdrew it; the stable replica never served it"

# 3. Drain.
serve drain --max-tokens 1000000 --drain-seconds 1 --follow newest
"$PY" - "$URL_drain" "$PID_drain" <<'PY' || fail "drain"
import http.client, json, os, sys, threading, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
ends = {}
def stream(i):
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("POST", "/v1/completions", json.dumps({"prompt": "the ", "max_tokens": 1000000, "stream": True}),
              {"Content-Type": "application/json"})
    events = [e[6:] for e in c.getresponse().read().split(b"\n\n") if e.startswith(b"data: ")]
    ends[i] = (time.time(), events)
ts = [threading.Thread(target=stream, args=(i,)) for i in range(8)]
[t.start() for t in ts]
time.sleep(0.5)
t0 = time.time()
os.kill(int(sys.argv[2]), 15)
time.sleep(0.2)
c = http.client.HTTPConnection(u.hostname, u.port, timeout=5)
c.request("GET", "/readyz")
ready = c.getresponse().status
[t.join() for t in ts]
if ready != 503:
    sys.exit(f"/readyz {ready} after SIGTERM, want 503")
for i, (t, ev) in ends.items():
    last = json.loads(ev[-2]) if len(ev) > 1 else {}
    if ev[-1] != b"[DONE]" or last.get("choices", [{}])[0].get("finish_reason") != "abort" or t - t0 > 3:
        sys.exit(f"stream {i}: ended {t - t0:.1f} s after SIGTERM with {ev[-2:]}, want a final event (abort) and [DONE] within the drain")
print(f"ok: SIGTERM with 8 streams: /readyz 503, every stream ended with finish_reason abort and [DONE] within "
      f"{max(t for t, _ in ends.values()) - t0:.1f} s (--drain-seconds 1)")
PY
wait "$PID_drain"; rc=$?
[ "$rc" = 0 ] && grep -q "^serve: stopped after --drain-seconds" "$WORK/drain.out" || { cat "$WORK/drain.out"; fail "the drained server exited $rc"; }

# 4. Bad options.
bad() {
  local want=$1; shift
  set +e
  "$@" >"$WORK/bad.out" 2>&1; local rc=$?
  set -e
  [ "$rc" = 2 ] && grep -q -- "$want" "$WORK/bad.out" || { cat "$WORK/bad.out"; fail "$*: want exit 2 and '$want' (exit $rc)"; }
  echo "ok: $(grep -m1 -- "$want" "$WORK/bad.out" | cut -c1-150)"
}
bad "has no promotion in force; promote one" "$BIN/dptrain-serve" --checkpoint "$WORK/first" --follow promoted --port 0
# A run with --promote-if that has promoted nothing yet: followed by default (auto), none of its
# checkpoints is served, as with --follow promoted (its log exists from the start).
train 1 "${G[@]}" --steps 20 --run-dir "$WORK/none" --promote-if "val_loss<=0"
[ "$RC" = 0 ] && [ -f "$WORK/none/checkpoints/ckpt-00000020.h5" ] && [ -f "$WORK/none/checkpoints/promotions.jsonl" ] \
  && [ ! -s "$WORK/none/checkpoints/promotions.jsonl" ] || { cat "$WORK/out"; fail "--promote-if met by no evaluation: want an empty promotion log"; }
bad "--follow auto: .* has no promotion in force; promote one" "$BIN/dptrain-serve" --checkpoint "$WORK/none" --port 0
bad "holds no checkpoint of that step" "$BIN/dptrain-serve" --checkpoint "$WORK/run" --pin 7 --port 0
bad "--follow 'latest' is unknown" "$BIN/dptrain-serve" --checkpoint "$WORK/run" --follow latest --port 0
bad "'loss<3' is not a condition" "$BIN/dptrain" "${G[@]}" --run-dir "$WORK/x" --promote-if "loss<3"
