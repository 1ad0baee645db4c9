#!/usr/bin/env bash
# dptrain-serve from OpenAI's own Node client (the openai package, installed with npm into this test's
# folder; skipped with a line saying so where npm cannot install it), on a tiny GPT trained here
# (openai_sdk.mjs): models.list(); a greedy completion, and streamed, the chunks joining into the
# same text; echo with logprobs and max_tokens 0 (the prompt scored: its tokens, null then negative
# logprobs, top_logprobs, offsets); several prompts, and token id prompts, each choice equal to its
# prompt's answer alone; chat, and streamed (the role first, the deltas joining into the same
# content, the finish reason last); tools, logprobs 9, max_tokens 0 without echo, stream with echo
# and an unknown field refused as the SDK's BadRequestError (400) naming the field.
source "$(dirname "$0")/lib.bash"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIPPED openai_sdk: no node and npm here to install the openai package (OpenAI's Node client)"
  exit 0
fi
# (--loglevel=error: quiet when it installs, where --silent hid why it could not.)
if ! (cd "$WORK" && timeout 180 npm install --no-audit --no-fund --loglevel=error openai) >"$WORK/npm.out" 2>&1; then
  echo "SKIPPED openai_sdk: npm could not install openai ($(grep -m1 -e 'FetchError' -e 'npm error' "$WORK/npm.out" || echo 'no word from npm: timed out?'))"
  exit 0
fi

# A character model whose vocabulary holds the chat template's text ("User: ...", "Assistant:") and
# whose block (64) holds the conversation.
{ printf 'User: Hello\nAssistant: Be brief.\n'; /usr/bin/python3 "$ROOT/tests/integration/make_text.py" 60000; } >"$WORK/text.txt"
"$BIN/dptrain-data" text --input "$WORK/text.txt" --out "$WORK/tok" --vocab char >/dev/null
train 1 --model gpt --data "$WORK/tok" --n-layer 2 --n-head 2 --n-embd 32 --block-size 64 --batch-size 8 --lr 3e-3 \
  --warmup-steps 10 --eval-every 0 --log-every 100 --checkpoint-every 100 --steps 100 --run-dir "$WORK/run"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training exited $RC"; }

PID=
trap '{ [ -n "$PID" ] && kill -9 "$PID" && wait "$PID" || true; } 2>/dev/null; rm -rf "$WORK"' EXIT
"$BIN/dptrain-serve" --checkpoint "$WORK/run" --port 0 --poll-seconds 0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
URL=
for _ in $(seq 100); do
  URL=$(sed -n 's/^serve: listening on \(http:[^ ]*\) .*/\1/p' "$WORK/serve.out" 2>/dev/null || true)
  [ -n "$URL" ] && break
  kill -0 "$PID" 2>/dev/null || { cat "$WORK/serve.err"; fail "dptrain-serve exited before listening"; }
  sleep 0.1
done
[ -n "$URL" ] || fail "dptrain-serve did not listen within 10 s"

timeout 60 node "$ROOT/tests/integration/openai_sdk.mjs" "$URL" "$WORK" \
  || { cat "$WORK/serve.err"; fail "OpenAI's Node client: a check failed (above)"; }
