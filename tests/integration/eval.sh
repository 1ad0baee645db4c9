#!/usr/bin/env bash
# dptrain eval, against the run that trained the model, the server and an independent forward
# (tests/integration/hf_reference.py: GPT-2 from torch primitives over the exported weights):
#   1. --data gives the training run's own last evaluation (loss, bits per byte, accuracy)
#   2. --task scores multiple-choice items (HellaSwag's form and the plain one) that a tiny trained
#      model can tell apart: the same scores and accuracies to the bit on 1 and 2 ranks, from a
#      checkpoint and from its Hugging Face export; each log-likelihood equals the independent
#      forward's and the server's (echo + logprobs + max_tokens 0) within 1e-4, and so do the
#      three accuracies
#   3. bad options and items get one line and exit 2
# and training with --eval-task: each evaluation scores the items (its last equal to eval --task of
# the checkpoint), --promote-if "acc_norm>=X" promotes by them; its bad options refused.
source "$(dirname "$0")/lib.bash"
PY=/usr/bin/python3
REF="$ROOT/tests/integration/hf_reference.py"
$PY -c 'import torch' 2>/dev/null || fail "python3-torch is missing: run make test-deps"

"$PY" "$ROOT/tests/integration/make_text.py" 60000 >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
# Items: 40 chars of the text as the context, the next 12 as the right ending, 12 from
# elsewhere as the others; half in HellaSwag's form (its endings scored after a space).
$PY - "$WORK/text.txt" "$WORK/items.jsonl" <<'PY'
import json, random, sys
text = open(sys.argv[1]).read()
rnd = random.Random(5)
with open(sys.argv[2], "w") as out:
    for i in range(24):
        p = rnd.randrange(len(text) - 200)
        ctx, right = text[p:p + 40], text[p + 40:p + 52].replace("\n", " ")
        wrong = ["".join(rnd.sample(text[q:q + 40], 12)).replace("\n", " ") for q in
                 (rnd.randrange(len(text) - 200) for _ in range(3))]
        label = rnd.randrange(4)
        ends = wrong[:label] + [right] + wrong[label:]
        if i % 2:
            out.write(json.dumps({"ctx": ctx, "endings": [e.lstrip() for e in ends], "label": str(label)}) + "\n")
        else:
            out.write(json.dumps({"context": ctx, "choices": ends, "answer": label}) + "\n")
PY
# The run scores them at each evaluation (--eval-task) and promotes by them.
train 1 --model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 48 --batch-size 8 --lr 3e-3 \
  --warmup-steps 10 --eval-every 100 --log-every 50 --steps 300 --run-dir "$WORK/run" \
  --eval-task "$WORK/items.jsonl" --promote-if "acc_norm>=0.99"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }
grep -q "^eval task: .*items.jsonl: 24 items scored by log-likelihood at each evaluation, on the CPU$" "$WORK/out" \
  && [ "$(grep -c "^eval at step .* | task: 24 items, acc [0-9.]*, acc_norm [0-9.]*, acc_tokens [0-9.]*$" "$WORK/out")" = 3 ] \
  || { cat "$WORK/out"; fail "--eval-task: no banner line or not three eval lines with the task's accuracies"; }

# 1. The run's last evaluation, again.
$MPIRUN -np 2 "$BIN/dptrain" eval --checkpoint "$WORK/run" --data "$WORK/tok" --out "$WORK/data.jsonl" >"$WORK/ev.out" 2>&1 \
  || { cat "$WORK/ev.out"; fail "eval --data exited non-zero"; }
$PY - "$WORK/run/metrics.jsonl" "$WORK/data.jsonl" <<'PY' || fail "eval --data differs from the run's own evaluation"
import json, sys
run = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l][-1]
ev = [json.loads(l) for l in open(sys.argv[2])][0]
for ours, theirs in (("loss", "val_loss"), ("bits_per_byte", "val_bits_per_byte"), ("accuracy", "val_accuracy")):
    if abs(ev[ours] - run[theirs]) > 1e-5 * max(1, abs(run[theirs])):
        sys.exit(f"{ours}: eval {ev[ours]}, the run's {theirs} {run[theirs]}")
print(f"ok: eval --data: loss {ev['loss']:.5f}, bits per byte {ev['bits_per_byte']:.4f}, as the run's last evaluation")
PY
grep -q "^eval: .*(val): [0-9]* windows of 48 tokens | loss [0-9.]* | perplexity [0-9.]* | bits per byte" "$WORK/ev.out" \
  || { cat "$WORK/ev.out"; fail "eval --data: no line with the loss, perplexity and bits per byte"; }

# 2. The items, scored.
for np in 1 2; do
  $MPIRUN -np $np "$BIN/dptrain" eval --checkpoint "$WORK/run" --task "$WORK/items.jsonl" --out "$WORK/task$np.jsonl" \
    >"$WORK/task$np.out" 2>&1 || { cat "$WORK/task$np.out"; fail "eval --task on $np ranks exited non-zero"; }
done
cmp -s "$WORK/task1.jsonl" "$WORK/task2.jsonl" || fail "eval --task: 1 and 2 ranks give other scores"
$PY - "$WORK/run/metrics.jsonl" "$WORK/task1.jsonl" "$WORK/run/checkpoints/promotions.jsonl" <<'PY' \
  || fail "--eval-task: the run's scores or promotions"
import json, sys
evals = [json.loads(l) for l in open(sys.argv[1]) if '"type":"eval"' in l]
task = [json.loads(l) for l in open(sys.argv[2]) if '"type":"task"' in l][0]
for k in ("acc", "acc_norm", "acc_tokens"):  # the record's 6 significant digits
    if abs(evals[-1][k] - task[k]) > 1e-6:
        sys.exit(f"{k}: the run's last evaluation {evals[-1][k]}, eval --task of its checkpoint {task[k]}")
promoted = [json.loads(l)["step"] for l in open(sys.argv[3]) if '"action":"promote"' in l]
want = [e["step"] for e in evals if e["acc_norm"] >= 0.99]
if promoted != want or not promoted:
    sys.exit(f"--promote-if acc_norm>=0.99: promoted {promoted}, want {want} (acc_norm {[e['acc_norm'] for e in evals]})")
print(f"ok: --eval-task: the run's last acc/acc_norm/acc_tokens equal eval --task's on its checkpoint "
      f"({task['acc']:.3f}/{task['acc_norm']:.3f}/{task['acc_tokens']:.3f}); acc_norm by step "
      f"{[(e['step'], round(e['acc_norm'], 3)) for e in evals]}, promoted {promoted}")
PY
grep -q "^promoted step [0-9]* (--promote-if: acc_norm [0-9.]* >= 0.99)$" "$WORK/out" || fail "--eval-task: no promotion line with acc_norm"
"$BIN/dptrain-ckpt" export "$WORK/run" --out "$WORK/hf" >/dev/null
$MPIRUN -np 1 "$BIN/dptrain" eval --checkpoint "$WORK/hf" --task "$WORK/items.jsonl" --out "$WORK/taskhf.jsonl" \
  >"$WORK/taskhf.out" 2>&1 || { cat "$WORK/taskhf.out"; fail "eval --task of the export exited non-zero"; }
diff <(grep -v '"type":"task","task"' "$WORK/task1.jsonl") <(grep -v '"type":"task","task"' "$WORK/taskhf.jsonl") >/dev/null \
  || fail "eval --task: the export scores otherwise than its checkpoint"
$PY "$REF" score "$WORK/hf" "$WORK/items.jsonl" "$WORK/torch.json"
start_server() {
  # The newest: the run promotes (--promote-if), and promoted ones are served only after --canary-seconds.
  "$BIN/dptrain-serve" --checkpoint "$WORK/run" --follow newest --port 0 --poll-seconds 0 >"$WORK/serve.out" 2>&1 &
  SERVER=$!
  trap 'kill $SERVER 2>/dev/null || true; rm -rf "$WORK"' EXIT
  for _ in $(seq 100); do grep -q "listening on" "$WORK/serve.out" && break; sleep 0.1; done
  URL=$(sed -n 's/^serve: listening on \(http:[^ ]*\) .*/\1/p' "$WORK/serve.out")
  [ -n "$URL" ] || { cat "$WORK/serve.out"; fail "the server did not start"; }
}
start_server
$PY - "$WORK/items.jsonl" "$WORK/task1.jsonl" "$WORK/torch.json" "$URL" <<'PY' || fail "eval --task against PyTorch and the server"
import json, sys, urllib.request
items = [json.loads(l) for l in open(sys.argv[1])]
ours = [json.loads(l) for l in open(sys.argv[2])]
scores, summary = [r for r in ours if r["type"] == "item"], [r for r in ours if r["type"] == "task"][0]
torch_ = json.load(open(sys.argv[3]))
worst = 0
for r, t in zip(scores, torch_["loglikelihood"]):
    for a, b in zip(r["loglikelihood"], t):
        worst = max(worst, abs(a - b))
if worst > 1e-4:
    sys.exit(f"log-likelihoods: eval and PyTorch differ by {worst:.2e} (> 1e-4)")
for k in ("acc", "acc_norm", "acc_tokens"):
    if summary[k] != torch_[k]:
        sys.exit(f"{k}: eval {summary[k]}, PyTorch {torch_[k]}")
if summary["acc"] < 0.75:
    sys.exit(f"acc {summary['acc']}: the trained model should tell the text's own continuation from shuffled ones")
served = 0
for item, r in list(zip(items, scores))[:4]:
    hs = "ctx" in item
    ctx = item["ctx" if hs else "context"]
    for e, ll in zip(item["endings" if hs else "choices"], r["loglikelihood"]):
        e = (" " if hs else "") + e
        # The block's 48 positions: the context cut from the left, as eval cuts it.
        body = json.dumps({"prompt": (ctx + e)[-48:], "max_tokens": 0, "echo": True, "logprobs": 0}).encode()
        req = urllib.request.Request(sys.argv[4] + "/v1/completions", body, {"Content-Type": "application/json"})
        lp = json.load(urllib.request.urlopen(req))["choices"][0]["logprobs"]
        got = sum(lp["token_logprobs"][-len(e):])
        if abs(got - ll) > 1e-4:
            sys.exit(f"the server's log-likelihood {got} != eval's {ll}")
        served = max(served, abs(got - ll))
print(f"ok: eval --task: acc {summary['acc']:.3f}, acc_norm {summary['acc_norm']:.3f}, acc_tokens "
      f"{summary['acc_tokens']:.3f} on {len(scores)} items, equal on 1 and 2 ranks and from the export; "
      f"log-likelihoods within {worst:.1e} of PyTorch's and {served:.1e} of the server's")
PY
grep -q "^eval: .*items.jsonl: 24 items | acc [0-9.]* | acc_norm [0-9.]* (log-likelihood per character, as lm-evaluation-harness) | acc_tokens" \
  "$WORK/task2.out" || { cat "$WORK/task2.out"; fail "eval --task: no line with the three accuracies"; }

# 3. Bad cases.
bad() {
  local want=$1; shift
  set +e
  $MPIRUN -np 2 "$BIN/dptrain" eval "$@" >"$WORK/bad.out" 2>&1; local rc=$?
  set -e
  [ "$rc" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/bad.out")" = 1 ] && grep -q -- "$want" "$WORK/bad.out" \
    || { cat "$WORK/bad.out"; fail "eval $*: want exit 2 and one line with '$want' (exit $rc)"; }
  echo "ok: eval $(cut -c1-60 <<<"$*") -> $(grep '^dptrain: error:' "$WORK/bad.out" | cut -c1-120)"
}
bad "give --data SHARDS, --task FILE.jsonl or both" --checkpoint "$WORK/run"
printf '{"context": "the", "choices": ["a"], "answer": 0}\n' >"$WORK/one.jsonl"
bad "one.jsonl:1: want" --checkpoint "$WORK/run" --task "$WORK/one.jsonl"
printf '{"context": "the", "choices": ["a", "b"], "answer": 2}\n' >"$WORK/label.jsonl"
bad "label.jsonl:1: answer must be an index into choices" --checkpoint "$WORK/run" --task "$WORK/label.jsonl"
bad "nowhere" --checkpoint "$WORK/nowhere" --task "$WORK/items.jsonl"
bad "--split 'test' is unknown" --checkpoint "$WORK/run" --data "$WORK/tok" --split test
# Training's --eval-task.
bad_train() {
  local want=$1; shift
  refused 2 "$@" --steps 5 --run-dir "$WORK/badrun"
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] && grep -q -- "$want" "$WORK/out" \
    || { cat "$WORK/out"; fail "dptrain $*: want exit 2 and one line with '$want' (exit $RC)"; }
  echo "ok: dptrain $(cut -c1-60 <<<"$*") -> $(grep '^dptrain: error:' "$WORK/out" | cut -c1-120)"
}
G=(--model gpt --data "$WORK/tok" --n-layer 1 --n-head 2 --n-embd 16 --block-size 48 --batch-size 4)
bad_train "asks for acc_norm, a score of multiple-choice items: give them with --eval-task" "${G[@]}" --promote-if "acc_norm>=0.5"
bad_train "--eval-task scores items by a language model's log-likelihood: it needs --model gpt" --data "$WORK/tok" \
  --eval-task "$WORK/items.jsonl"
bad_train "--eval-task $WORK/nothing.jsonl: cannot read it" "${G[@]}" --eval-task "$WORK/nothing.jsonl"
bad_train "--eval-task $WORK/label.jsonl:1: answer must be an index" "${G[@]}" --eval-task "$WORK/label.jsonl"
