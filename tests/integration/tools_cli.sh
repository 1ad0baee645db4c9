#!/usr/bin/env bash
# The tools read their arguments as dptrain does (Boost.Program_options): --help prints every
# command's usage, and a bad argument ends the tool with exit 2 and one line naming it (never a
# silent default: --tol abc was once an exact comparison).
source "$(dirname "$0")/lib.bash"
cd "$WORK"
# expect_one_line CODE PATTERN CMD...: CMD exits CODE and prints exactly one line, matching PATTERN.
expect_one_line() {
  local code=$1 pattern=$2; shift 2
  set +e
  "$@" >"$WORK/out.txt" 2>"$WORK/err.txt"
  local rc=$?
  set -e
  [ "$rc" = "$code" ] || { cat "$WORK/out.txt" "$WORK/err.txt"; fail "$*: exit $rc, want $code"; }
  [ "$(wc -l <"$WORK/err.txt")" = 1 ] || { cat "$WORK/err.txt"; fail "$*: $(wc -l <"$WORK/err.txt") lines on stderr, want 1"; }
  grep -qE "$pattern" "$WORK/err.txt" || { cat "$WORK/err.txt"; fail "$*: stderr does not match '$pattern'"; }
}
# Every subcommand in dptrain's table of them (kCommands) has a usage line in dptrain --help.
subs=$(sed -n 's/^ *{"\([a-z]*\)", \(true\|false\), .*/\1/p' "$ROOT/src/app/main.cpp" | sort -u)
[ "$(wc -w <<<"$subs")" -ge 5 ] || fail "found only '$subs' as dptrain's subcommands in src/app/main.cpp"
help=$("$BIN/dptrain" --help)
for sub in $subs; do
  grep -Eq "^ +(mpirun -np N )?dptrain $sub( |$)" <<<"$help" || fail "dptrain --help has no usage line for '$sub'"
  # Each command's own help (dptrain options refused --help as an unexpected argument).
  sub_help=$("$BIN/dptrain" "$sub" --help 2>&1) && [ -n "$sub_help" ] || fail "dptrain $sub --help: exit non-zero or nothing printed"
done
"$BIN/dptrain-ckpt" --help | matches 'dptrain-ckpt diff A B \[--tol X\]' || fail "dptrain-ckpt --help lacks diff"
"$BIN/dptrain-bench" --help | matches 'dptrain-bench io --data DIR' || fail "dptrain-bench --help lacks io"
# The fix names the command as the user can run it: its absolute path from outside the checkout,
# build/... from its root (and its bare name when on the PATH: install.sh).
expect_one_line 2 "^dptrain-ckpt: error: diff: .*'abc'.*--tol.*; see $BIN/dptrain-ckpt --help$" \
  "$BIN/dptrain-ckpt" diff a.h5 b.h5 --tol abc
(cd "$ROOT" && expect_one_line 2 "^dptrain-data: error: unrecognised option '--bogus'; see build/dptrain-data synth --help$" \
  build/dptrain-data synth --bogus --out "$WORK/x")
# Option names are taken whole (Boost guessed: --batch was --batch-size, --ranks --ranks-per-node,
# which the INI file refuses), and a stray word is refused, not dropped (a mistyped subcommand
# trained the default model; an INI file given without --config trained without it).
expect_one_line 2 "^dptrain: error: unrecognised option '--batch' \(did you mean --batch-size\? option names are taken whole\)" \
  "$BIN/dptrain" --batch 8 --steps 1
expect_one_line 2 "^dptrain: error: unexpected argument 'doctr'; dptrain's commands \(generate, serve, eval, plan, doctor, stage, options\) come first" \
  "$BIN/dptrain" doctr --steps 1
expect_one_line 2 "^dptrain: error: unexpected argument 'local.ini'; .*an INI file follows --config" "$BIN/dptrain" local.ini
expect_one_line 2 "^dptrain: error: unexpected argument 'hello'; generate takes options alone" \
  "$BIN/dptrain" generate --checkpoint x --tokens 3 hello
expect_one_line 2 "^dptrain-data: error: unrecognised option '--train-samp'" "$BIN/dptrain-data" synth --out x --train-samp 9
expect_one_line 2 "^dptrain-data: error: unexpected argument 'extra'; synth takes options alone" "$BIN/dptrain-data" synth --out x extra
expect_one_line 2 "^dptrain-ckpt: error: info: give the checkpoint" "$BIN/dptrain-ckpt" info
expect_one_line 2 "^dptrain-ckpt: error: frob: not a command" "$BIN/dptrain-ckpt" frob
expect_one_line 2 "^dptrain-ckpt: error: missing.h5: " "$BIN/dptrain-ckpt" info missing.h5
expect_one_line 2 "^dptrain-bench: error: allreduce: -b '4Q' is not a size" \
  "$BIN/dptrain-bench" allreduce -b 4Q
expect_one_line 2 "^dptrain-bench: error: allreduce: --dtype 'f16' is unknown" \
  "$BIN/dptrain-bench" allreduce --dtype f16
expect_one_line 2 "^dptrain-bench: error: io: give the dataset" "$BIN/dptrain-bench" io
expect_one_line 2 "^dptrain-bench: error: trace: .*--events" "$BIN/dptrain-bench" trace --events x
expect_one_line 2 "^dptrain-bench: error: matmul: --shapes '128' is not CxOC" "$BIN/dptrain-bench" matmul --shapes 128
expect_one_line 2 "^dptrain-bench: error: matmul: --rows '0' is not a row count" "$BIN/dptrain-bench" matmul --rows 1,0
# A small real run: the op and its peer for one shape and two row counts, a line each.
[ "$("$BIN/dptrain-bench" matmul --shapes 64x96 --rows 1,3 --repeats 1 | grep -cE '^ +64 +96 +[13] ')" = 2 ] ||
  fail "dptrain-bench matmul did not print its two rows"
expect_one_line 2 "^dptrain-bench: error: products: --rows 100 is not a multiple of --micro-batches 3" \
  "$BIN/dptrain-bench" products --rows 100 --micro-batches 3
out=$("$BIN/dptrain-bench" products --dims 8,16,4 --rows 8 --micro-batches 2 --repeats 1)
grep -qE "^dptrain's ops +[0-9.]+ +[0-9.]+ +[0-9.]+x$" <<<"$out" && grep -qE "^sgemm alone \(peer\) +[0-9.]+" <<<"$out" ||
  { echo "$out"; fail "dptrain-bench products did not print its two rows"; }
expect_one_line 2 "^dptrain-bench: error: decode: --text needs --checkpoint" "$BIN/dptrain-bench" decode --text README.md
expect_one_line 2 "^dptrain-bench: error: decode: .*--n-embd a multiple of --n-head" \
  "$BIN/dptrain-bench" decode --n-embd 30 --n-head 4
out=$("$BIN/dptrain-bench" decode --vocab 97 --block-size 32 --n-layer 1 --n-head 2 --n-embd 16 --tokens 8 --repeats 1 \
  --streams 3)
grep -qE "^tokens/s \(best\) +[0-9.]+ +[0-9.]+ +[0-9.]+x$" <<<"$out" &&
  grep -qE "^tokens/s, 3 streams +[0-9.]+ +[0-9.]+ +[0-9.]+x$" <<<"$out" &&
  grep -qE "^greedy tokens equal before the first difference: [0-8] of 8$" <<<"$out" ||
  { echo "$out"; fail "dptrain-bench decode did not print its rate and agreement"; }
expect_one_line 2 "^dptrain-report: error: frob: not a command" "$BIN/dptrain-report" frob
echo "tools: --help and one-line errors ok"
