#!/usr/bin/env bash
# A serving fleet behind a real load balancer (Debian's HAProxy) on loopback, with load for the
# whole test: 2 stable replicas (--follow promoted) and 1 canary (--follow canary) while training
# goes on and promotes checkpoints (--promote-if). Every answer must come back (0 failed requests)
# and name a step that was promoted by then and not withdrawn more than a poll before; a promotion
# reaches the canary first and the stable replicas later; a rollback moves all back; one stable
# replica is stopped with SIGTERM mid-load and replaced.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
if ! command -v haproxy >/dev/null; then
  echo "SKIPPED fleet: no haproxy here (make test-deps installs it)"
  exit 0
fi
"$PY" "$ROOT/tests/integration/make_text.py" 40000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
# Evaluations every 20 steps promote (a threshold every evaluation meets); checkpoints every 30
# steps are never promoted (30, 90, ...), and no server may answer from them.
G=(--model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 32 --batch-size 8 --lr 3e-3
   --warmup-steps 10 --eval-every 20 --eval-max 32 --log-every 1000 --checkpoint-every 30 --keep-checkpoints 2
   --promote-if "val_loss<=100" --run-dir "$WORK/run")
train 1 "${G[@]}" --steps 40
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }

ports=($("$PY" -c 'import socket
ss = [socket.socket() for _ in range(5)]
[s.bind(("127.0.0.1", 0)) for s in ss]
print(" ".join(str(s.getsockname()[1]) for s in ss))'))
LB=${ports[0]}
PIDS=()
trap 'kill ${PIDS[@]:-} $LOAD_PID $TRAIN_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
LOAD_PID= TRAIN_PID=
replica() {  # N FOLLOW: replica N on ports[N]
  "$BIN/dptrain-serve" --checkpoint "$WORK/run" --host 127.0.0.1 --port "${ports[$1]}" --follow "$2" \
    --poll-seconds 0.3 --canary-seconds 4 --drain-seconds 20 >>"$WORK/replica$1.out" 2>&1 &
  PIDS[$1]=$!
}
replica 1 canary
replica 2 promoted
replica 3 promoted
cat >"$WORK/haproxy.cfg" <<CFG
global
    maxconn 1000
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1
    # A replica stopping answers 503 until the check sees /readyz 503: tried again elsewhere, which
    # needs the request whole in HAProxy's buffer (a completion request is small).
    option http-buffer-request
    retry-on conn-failure empty-response 503
frontend api
    bind 127.0.0.1:$LB
    default_backend replicas
backend replicas
    balance roundrobin
    option httpchk GET /readyz
    http-check expect status 200
    default-server inter 200ms fall 1 rise 2
    server canary 127.0.0.1:${ports[1]} check
    server stable1 127.0.0.1:${ports[2]} check
    server stable2 127.0.0.1:${ports[3]} check
CFG
haproxy -f "$WORK/haproxy.cfg" -db >"$WORK/haproxy.out" 2>&1 &
PIDS[4]=$!
step_of() { curl -s --max-time 2 "http://127.0.0.1:$1/v1/models" | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["data"][0]["model_step"])' 2>/dev/null || echo none; }
for _ in $(seq 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$LB/readyz")" = 200 ] && [ "$(step_of "${ports[3]}")" != none ] && break
  sleep 0.1
done
[ "$(step_of "${ports[1]}")" = 40 ] || { cat "$WORK"/replica*.out; fail "the canary does not serve the promoted step 40"; }

# Load for the whole test: 4 clients through the balancer, each answer's status, step and time.
"$PY" - "http://127.0.0.1:$LB" "$WORK/stop-load" "$WORK/answers.jsonl" <<'PY' &
import http.client, json, os, sys, threading, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
out, lock = open(sys.argv[3], "w"), threading.Lock()
def client(k):
    i = 0
    while not os.path.exists(sys.argv[2]):
        t0 = time.time()
        try:
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
            c.request("POST", "/v1/completions", json.dumps({"prompt": "the ", "max_tokens": 16, "seed": k * 100000 + i}),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            body = r.read()
            status, step = r.status, json.loads(body).get("model_step") if r.status == 200 else None
            said = "" if r.status == 200 else body[:200].decode("utf-8", "replace")
        except Exception as e:
            status, step, said = f"exception {e}", None, ""
        with lock:
            out.write(json.dumps({"t0": t0, "t1": time.time(), "status": status, "step": step, "said": said}) + "\n")
            out.flush()
        i += 1
ts = [threading.Thread(target=client, args=(k,)) for k in range(4)]
[t.start() for t in ts]
[t.join() for t in ts]
PY
LOAD_PID=$!

# Training goes on: evaluations at 60, 80, 100, 120 promote; checkpoints at 90 are never promoted.
watch_steps() {  # prints "time port step" whenever a replica's step changes, until stop-watch
  "$PY" - "$WORK/stop-watch" "${ports[1]}" "${ports[2]}" "${ports[3]}" <<'PY'
import json, os, sys, time, urllib.request
last = {}
while not os.path.exists(sys.argv[1]):
    for p in sys.argv[2:]:
        try:
            s = json.load(urllib.request.urlopen(f"http://127.0.0.1:{p}/v1/models", timeout=2))["data"][0]["model_step"]
        except Exception:
            continue
        if last.get(p) != s:
            last[p] = s
            print(f"{time.time():.3f} {p} {s}", flush=True)
    time.sleep(0.1)
PY
}
watch_steps >"$WORK/steps.txt" &
WATCH_PID=$!
PIDS[5]=$WATCH_PID
set +e
timeout -k 5 120 $MPIRUN -np 1 "$BIN/dptrain" "${G[@]}" --steps 120 --resume auto >"$WORK/train2.out" 2>&1
RC=$?
set -e
[ "$RC" = 0 ] || { cat "$WORK/train2.out"; fail "the second training run exited $RC"; }
newest=$("$BIN/dptrain-ckpt" promotions "$WORK/run" | sed -n 's/^newest promotion: step \([0-9]*\) .*/\1/p')
[ "$newest" = 120 ] || fail "the run's newest promotion is '$newest', want 120"
for _ in $(seq 150); do
  [ "$(step_of "${ports[2]}")$(step_of "${ports[3]}")" = 120120 ] && break
  sleep 0.1
done
[ "$(step_of "${ports[2]}")$(step_of "${ports[3]}")" = 120120 ] || fail "the stable replicas never took step 120"

# One stable replica stopped mid-load (SIGTERM: it drains) and replaced on its port.
kill -TERM "${PIDS[3]}"
wait "${PIDS[3]}" || fail "the stopped replica exited non-zero"
replica 3 promoted
for _ in $(seq 100); do [ "$(step_of "${ports[3]}")" = 120 ] && break; sleep 0.1; done
[ "$(step_of "${ports[3]}")" = 120 ] || fail "the replacement replica does not serve step 120"

# A rollback: every replica back to 100.
t_rb=$("$PY" -c 'import time; print(time.time())')
"$BIN/dptrain-ckpt" rollback "$WORK/run" --reason "the test" >/dev/null
for _ in $(seq 100); do
  [ "$(step_of "${ports[1]}")$(step_of "${ports[2]}")$(step_of "${ports[3]}")" = 100100100 ] && break
  sleep 0.1
done
[ "$(step_of "${ports[1]}")$(step_of "${ports[2]}")$(step_of "${ports[3]}")" = 100100100 ] || fail "the rollback did not move every replica to step 100"
sleep 1
touch "$WORK/stop-load" "$WORK/stop-watch"
wait "$LOAD_PID"
wait "$WATCH_PID"

"$PY" - "$WORK/answers.jsonl" "$WORK/run/checkpoints/promotions.jsonl" "$WORK/steps.txt" "${ports[1]}" "${ports[2]}" "${ports[3]}" <<'PY' || fail "the fleet's answers"
import json, sys
answers = [json.loads(l) for l in open(sys.argv[1])]
records = [json.loads(l) for l in open(sys.argv[2])]
promoted = {r["step"]: r["time"] for r in records if r["action"] == "promote"}
withdrawn = {r["step"]: r["time"] for r in records if r["action"] == "withdraw"}
bad = [a for a in answers if a["status"] != 200]
if bad:
    sys.exit(f"{len(bad)} of {len(answers)} requests failed, e.g. {bad[:3]}")
POLL = 2.0  # a replica moves within a poll (0.3 s) and a swap; answers already running finish
for a in answers:
    s = a["step"]
    if s not in promoted or promoted[s] > a["t1"]:
        sys.exit(f"an answer from step {s}, which was not promoted by then ({a})")
    if s in withdrawn and withdrawn[s] + POLL < a["t0"]:
        sys.exit(f"an answer from step {s} started {a['t0'] - withdrawn[s]:.1f} s after its promotion was withdrawn")
# First time each replica served each step: the canary before the stable ones.
# Each replica's steps over time: a stable replica takes a promotion only once it has stood for
# --canary-seconds (4); the canary takes the newest within a poll, before the stable ones.
canary, C = sys.argv[4], 4.0
first, seen = {}, set()
for line in open(sys.argv[3]):
    t, port, step = line.split()
    t, step = float(t), int(step)
    if port != canary and port in seen and step in promoted and not (step in withdrawn and withdrawn[step] < t):
        if t < promoted[step] + C - 0.5:
            sys.exit(f"a stable replica took step {step} {t - promoted[step]:.1f} s after its promotion (< {C:g} s)")
    if port in seen or port == canary:
        first.setdefault((port, step), t)
    seen.add(port)
c120 = first.get((canary, 120))
s120 = [t for (p, s), t in first.items() if s == 120 and p != canary]
if c120 is None or c120 > promoted[120] + 3 or not s120 or min(s120) < c120:
    sys.exit(f"step 120: promoted at {promoted[120]:.2f}, the canary took it at {c120}, the stable ones at {s120}")
# The timeline: what each replica served when (seconds from the first answer), and the promotions.
start = min(a["t0"] for a in answers)
names = {canary: "canary", sys.argv[5]: "stable1", sys.argv[6]: "stable2"}
events = [(float(t), f"{names.get(p, p)} serves step {s}") for t, p, s in (l.split() for l in open(sys.argv[3]))]
events += [(r["time"], f"{r['action']} step {r['step']}") for r in records]
for t, what in sorted(events):
    print(f"  {t - start:+7.2f} s  {what}")
steps = sorted({a["step"] for a in answers})
print(f"ok: {len(answers)} requests through HAProxy, 0 failed; answers from steps {steps} (90 and the other "
      f"unpromoted checkpoints never); each promotion reached the canary first; a stable replica stopped and "
      f"replaced, and a rollback to 100, under load")
PY
