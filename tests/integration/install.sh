#!/usr/bin/env bash
# make install DESTDIR=... PREFIX=/usr: the staged tree holds the programs, man pages made from
# their --help, bash completion, the configs and Slurm scripts, and the docs; it trains from
# another directory with the installed configs; messages name the installed commands by their
# bare names once they are on the PATH; completion offers options and their values; make
# uninstall removes every file it installed.
source "$(dirname "$0")/lib.bash"
command -v help2man >/dev/null || fail "help2man missing (make deps installs it)"
DEST=$WORK/dest
P=$DEST/usr
programs="dptrain dptrain-serve dptrain-data dptrain-bench dptrain-ckpt dptrain-report"

make -s -C "$ROOT" install DESTDIR="$DEST" PREFIX=/usr >"$WORK/install.out" 2>&1 \
  || { cat "$WORK/install.out"; fail "make install DESTDIR=$DEST PREFIX=/usr failed"; }
grep -q "^installed dptrain .* under $DEST/usr: bin/{dptrain,dptrain-serve,dptrain-data," "$WORK/install.out" \
  || { cat "$WORK/install.out"; fail "make install did not say what it installed where"; }
for p in $programs; do
  [ -x "$P/bin/$p" ] || fail "$P/bin/$p not installed"
  "$P/bin/$p" --version | matches -E "^$p [^ ]+$" || fail "$p --version: '$("$P/bin/$p" --version 2>&1)'"
  head -n 20 "$P/share/man/man1/$p.1" | matches "^\.TH $(tr a-z A-Z <<<"$p") \"1\"" || fail "$p.1: no man page header"
  grep -q "^\.SH \"SEE ALSO\"" "$P/share/man/man1/$p.1" || fail "$p.1: no SEE ALSO"
  [ -f "$P/share/bash-completion/completions/$p" ] || fail "no bash completion for $p"
  ! readelf -d "$P/bin/$p" | matches -i "$ROOT" || fail "$p: its dynamic section names the checkout $ROOT"
done
# dptrain-run, a script, has its page too.
head -n 20 "$P/share/man/man1/dptrain-run.1" | matches '^\.TH DPTRAIN-RUN "1"' || fail "dptrain-run.1: no man page"
grep -q "DPTRAIN_STOP_GRACE" "$P/share/man/man1/dptrain-run.1" || fail "dptrain-run.1 lacks what its --help says"

# The man pages say what --help says: dptrain's options, and the subcommands' own sections.
grep -qF -- '\fB\-\-batch\-size\fR' "$P/share/man/man1/dptrain.1" || fail "dptrain.1 lacks --batch-size"
grep -q '^\.SH "DPTRAIN GENERATE"' "$P/share/man/man1/dptrain.1" || fail "dptrain.1 lacks the generate section"
grep -q '^\.SH "DPTRAIN SERVE"' "$P/share/man/man1/dptrain.1" || fail "dptrain.1 lacks the serve section"
grep -q '^\.SH "DPTRAIN EVAL"' "$P/share/man/man1/dptrain.1" || fail "dptrain.1 lacks the eval section"
grep -qF -- '\fB\-\-max\-batch\fR' "$P/share/man/man1/dptrain-serve.1" || fail "dptrain-serve.1 lacks --max-batch"
for s in SYNTH TEXT TOKENS INGEST VERIFY; do
  grep -q "^\.SH \"DPTRAIN-DATA $s\"" "$P/share/man/man1/dptrain-data.1" || fail "dptrain-data.1 lacks $s"
done
[ -x "$P/bin/dptrain-run" ] || fail "dptrain-run not installed"
[ -x "$P/bin/dptrain-elastic" ] && grep -qF 'host\-discovery' "$P/share/man/man1/dptrain-elastic.1" \
  || fail "dptrain-elastic or its man page not installed"
for f in configs/local.ini configs/gpt-docs.ini slurm/single-node.sbatch slurm/stage-data.sh; do
  [ -f "$P/share/dptrain/$f" ] || fail "share/dptrain/$f not installed"
done
[ -x "$P/share/dptrain/slurm/single-node.sbatch" ] || fail "single-node.sbatch installed without the execute bit"
[ -f "$P/share/doc/dptrain/README.md" ] && [ -f "$P/share/doc/dptrain/DATA.md" ] || fail "docs not installed"
echo "ok: make install put $(find "$DEST" -type f | wc -l) files under $DEST/usr"

# --- trains from another directory, with the installed programs and configs alone.
mkdir -p "$WORK/elsewhere" && cd "$WORK/elsewhere"
export PATH=$P/bin:$PATH
dptrain-data synth --out data/synth --train-samples 2000 --val-samples 200 >/dev/null
train 2 --config "$P/share/dptrain/configs/local.ini" --steps 20 --log-every 10 --eval-every 0 --checkpoint-every 20
[ "$RC" = 0 ] && grep -q "^done: steps 1..20 " "$WORK/out" || { cat "$WORK/out"; fail "the installed dptrain did not train"; }
dptrain-ckpt info runs/local/checkpoints/ckpt-00000020.h5 >/dev/null || fail "no checkpoint under runs/local of $PWD"
echo "ok: the installed dptrain trained 20 steps in $PWD with share/dptrain/configs/local.ini"

# --- messages name the installed commands as the user runs them.
set +e
msg=$(dptrain --config "$P/share/dptrain/configs/local.ini" --data "$WORK/none" 2>&1)
set -e
grep -q "make shards of your data with \`dptrain-data ingest --input FILE --out $WORK/none\`, or synthetic ones with \`dptrain-data synth --out $WORK/none\`" <<<"$msg" || fail "on the PATH: '$msg'"
set +e
msg=$(PATH=/usr/bin:/bin "$P/bin/dptrain-data" synth --bogus 2>&1)
set -e
grep -q "see $P/bin/dptrain-data synth --help" <<<"$msg" || fail "off the PATH: '$msg'"
echo "ok: the fix names dptrain-data on the PATH, $P/bin/dptrain-data off it"

# --- bash completion: what COMPREPLY holds after TAB at the end of a command line.
complete_line() {  # complete_line WORDS...: the last word is the one being completed
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); fn=$(complete -p "$1" | sed "s/.*-F \([^ ]*\) .*/\1/")
           "$fn" "$1" "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"; echo "${COMPREPLY[*]}"' \
    _ "$P/share/bash-completion/completions/dptrain" "$@"
}
[ "$(complete_line dptrain --device '')" = "cpu cuda auto" ] || fail "dptrain --device TAB: '$(complete_line dptrain --device '')'"
[ "$(complete_line dptrain --batch)" = "--batch-size" ] || fail "dptrain --batch TAB: '$(complete_line dptrain --batch)'"
[ "$(complete_line dptrain gen)" = "generate" ] || fail "dptrain gen TAB: '$(complete_line dptrain gen)'"
complete_line dptrain generate --tem | matches -x -- "--temperature" || fail "dptrain generate --tem TAB: '$(complete_line dptrain generate --tem)'"
[ "$(complete_line dptrain serve --max-ba)" = "--max-batch" ] || fail "dptrain serve --max-ba TAB: '$(complete_line dptrain serve --max-ba)'"
[ "$(complete_line dptrain-serve --max-ba)" = "--max-batch" ] || fail "dptrain-serve --max-ba TAB: '$(complete_line dptrain-serve --max-ba)'"
[ "$(complete_line dptrain-data '')" = "ingest synth text tokens verify --help --version" ] || fail "dptrain-data TAB: '$(complete_line dptrain-data '')'"
[ "$(complete_line dptrain-data text --tok)" = "--tokenizer --tokenizer-json" ] || fail "dptrain-data text --tok TAB: '$(complete_line dptrain-data text --tok)'"
[ "$(complete_line dptrain-data text --tokenizer-)" = "--tokenizer-json" ] || fail "dptrain-data text --tokenizer- TAB: '$(complete_line dptrain-data text --tokenizer-)'"
[ "$(complete_line dptrain-ckpt '')" = "diff export import info logits promote promotions rollback --help --version" ] || fail "dptrain-ckpt TAB: '$(complete_line dptrain-ckpt '')'"
[ "$(complete_line dptrain-ckpt export --dtype '')" = "float32 bfloat16" ] || fail "dptrain-ckpt export --dtype TAB: '$(complete_line dptrain-ckpt export --dtype '')'"
echo "ok: bash completion: dptrain's options and values, generate's options, the tools' commands and options"

# --- make uninstall leaves nothing behind but empty directories.
cd "$ROOT"
make -s uninstall DESTDIR="$DEST" PREFIX=/usr >/dev/null
left=$(find "$DEST" -not -type d)
[ -z "$left" ] || fail "make uninstall left: $left"
echo "ok: make uninstall removed every installed file"
