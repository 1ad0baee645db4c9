#!/usr/bin/env bash
# data/get-tinyshakespeare.sh without a network: a copy given as a file:// URL is kept when its
# SHA-256 is Tiny Shakespeare's (where ../shared/data has the text), and anything else (another
# text, an unreachable URL) is refused with one line and leaves no file behind.
source "$(dirname "$0")/lib.bash"
GET="$ROOT/data/get-tinyshakespeare.sh"
text="$ROOT/../shared/data/tinyshakespeare.txt"
if [ -r "$text" ]; then
  TINYSHAKESPEARE_URL="file://$(realpath "$text")" "$GET" "$WORK/ts.txt" | tee "$WORK/out"
  cmp -s "$text" "$WORK/ts.txt" || fail "the verified copy differs from the source"
  grep -q "1115394 bytes, SHA-256 verified" "$WORK/out" || fail "no line saying the copy was verified"
  "$GET" "$WORK/ts.txt" | matches "already here, SHA-256 verified" || fail "a verified file is fetched again"
else
  echo "SKIPPED get-tinyshakespeare.sh with the real text (../shared/data/tinyshakespeare.txt absent)"
fi
printf 'First Citizen:\nBefore we proceed any further, hear me speak.\n' >"$WORK/other.txt"
set +e
TINYSHAKESPEARE_URL="file://$WORK/other.txt" "$GET" "$WORK/bad.txt" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 1 ] && [ "$(wc -l <"$WORK/err")" = 1 ] && grep -q "has SHA-256 .*: not the expected text; removed it" "$WORK/err" \
  || { cat "$WORK/err"; fail "another text: want exit 1 and one line"; }
[ ! -e "$WORK/bad.txt" ] && [ ! -e "$WORK/bad.txt.part" ] || fail "the text that did not match was left behind"
set +e
TINYSHAKESPEARE_URL="file://$WORK/nothing.txt" "$GET" "$WORK/none.txt" 2>"$WORK/err"; rc=$?
set -e
[ "$rc" = 1 ] && grep -q "^get-tinyshakespeare: cannot download file://" "$WORK/err" && [ ! -e "$WORK/none.txt.part" ] \
  || { cat "$WORK/err"; fail "an unreachable URL: want exit 1 and one line"; }
echo "ok: get-tinyshakespeare.sh keeps only the text whose SHA-256 matches"
