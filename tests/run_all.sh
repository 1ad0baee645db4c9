#!/usr/bin/env bash
# Runs every test: the unit tests, the multi-rank tests under mpirun -np 1, 2 and 4, and the
# integration scripts, each under a time limit. Prints one PASS/FAIL line per suite and ends with
# "N passed, N failed"; exits non-zero when anything failed.
set -u
cd "$(dirname "$0")/.."
MPIRUN=${MPIRUN:-mpirun --oversubscribe $( [ "$(id -u)" = 0 ] && echo --allow-run-as-root )}
export MPIRUN
log=build/test-logs
mkdir -p "$log"
passed=0 failed=0 failures=()

# Each suite runs in a session of its own (setsid; without job control, as here, it does not fork,
# so $! is the session's id), and what it leaves running in that session is ended when it is done:
# a server or a training run that a failing test started in the background and never stopped
# would otherwise hold its port, its files and a core under every suite after it. Open MPI puts
# each rank in a process group of its own, so the session is what holds them all. (Daemons that
# start sessions of their own, as slurm.sh's do, are their test's to stop.)
current= fuzz_pids=()
# left_in SID: the live processes of session SID, "pid name" a line (zombies left out: a container
# whose first process reaps nothing keeps them, and they cannot be killed).
left_in() { ps -e -o pid=,sid=,stat=,comm= | awk -v s="$1" '$2 == s && $3 !~ /^Z/ { print $1, $4 }'; }
# end_session SID LOG: TERM to what is left in session SID, KILL to what outlives 2 s of it; prints
# their names ("dptrain x2"), nothing when none, and their command lines into LOG.
end_session() {
  local left i
  command -v ps >/dev/null || return 0  # procps (scripts/install-deps --test) missing
  left=$(left_in "$1")
  [ -n "$left" ] || return 0
  # A moment for what is already on its way out (a helper whose parent just closed its pipe).
  sleep 0.3
  left=$(left_in "$1")
  [ -n "$left" ] || return 0
  awk '{ n[$2]++ } END { for (c in n) printf "%s%s x%d", (k++ ? ", " : ""), c, n[c] }' <<<"$left"
  ps -o pid,stat,etime,args -p "$(awk '{ print $1 }' <<<"$left" | paste -sd,)" >>"$2" 2>&1
  kill -TERM $(awk '{ print $1 }' <<<"$left") 2>/dev/null
  for i in 1 2 3 4 5 6 7 8 9 10; do
    left=$(left_in "$1")
    [ -n "$left" ] || return 0
    sleep 0.2
  done
  kill -KILL $(awk '{ print $1 }' <<<"$left") 2>/dev/null
  return 0
}
# Interrupted (^C, the job's end, a closed terminal): the suite running now ends too, with time for
# its own traps (timeout passes the TERM on and kills 5 s later), and so do the fuzz lanes.
interrupted() {
  trap - INT TERM HUP
  [ ${#fuzz_pids[@]} = 0 ] || kill -TERM "${fuzz_pids[@]}" 2>/dev/null
  if [ -n "$current" ]; then
    kill -TERM "$current" 2>/dev/null
    wait "$current" 2>/dev/null
    end_session "$current" /dev/null >/dev/null
  fi
  exit "$1"
}
trap 'interrupted 130' INT
trap 'interrupted 143' TERM
trap 'interrupted 129' HUP

# suite NAME LIMIT_SECONDS COMMAND...
suite() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc left
  setsid timeout -k 5 "$limit" "$@" >"$log/$name.log" 2>&1 &
  current=$!
  wait "$current"
  rc=$?
  left=$(end_session "$current" "$log/$name.log")
  current=
  [ -z "$left" ] || echo "left running: $left; ended" >>"$log/$name.log"
  if [ $rc = 0 ]; then
    passed=$((passed + 1)); printf 'PASS  %-28s %4ds\n' "$name" $((SECONDS - t0))
    grep -h '^SKIPPED' "$log/$name.log" | sort -u | sed 's/^/      /' || true
    [ -z "$left" ] || echo "      left running: $left; ended"
  else
    failed=$((failed + 1)); failures+=("$name")
    [ $rc = 124 ] && echo "      (timed out after ${limit}s)" >>"$log/$name.log"
    printf 'FAIL  %-28s %4ds  (exit %d; log: %s)\n' "$name" $((SECONDS - t0)) $rc "$log/$name.log"
    tail -n 25 "$log/$name.log" | sed 's/^/      | /'
  fi
}

suite unit 300 build/unit_tests --use-colour no
if [ -x build/cuda_tests ]; then suite cuda 300 build/cuda_tests --use-colour no; else echo "SKIPPED cuda: build/cuda_tests not built (no CUDA toolkit, or CUDA=0)"; fi
# World sizes: 1, 2, 4 and 8 (powers of two; 2, 4 or 8 ranks a simulated node), 3 and 5 (odd: no
# node layout but one node or a node each), 6 (nodes of 2 and of 3). 7 adds no layout 5 lacks and
# took 42 s of the suite's 20 minutes on 2 cores.
for np in 1 2 3 4 5 6 8; do suite "mpi-np$np" 300 $MPIRUN -np $np build/mpi_tests --use-colour no; done
for t in tests/integration/*.sh; do
  [ "$t" = tests/integration/slurm.sh ] || suite "$(basename "$t" .sh)" 600 "$t"
done

# Fuzz targets (libFuzzer, ASan): a fixed number of inputs from the checked-in corpus, seed 1, so
# a run is repeatable; `make fuzz` runs them for longer. HDF5 leaks on some error paths of its
# own, so leak detection is off (ASan's other checks stay on).
fuzz() {  # fuzz NAME RUNS [MAX_LEN]
  local bin=build/fuzz/fuzz_$1 scratch=build/fuzz/run-$1
  if [ ! -x "$bin" ]; then echo "SKIPPED fuzz-$1: no libFuzzer (clang) in this build"; return; fi
  rm -rf "$scratch" && mkdir -p "$scratch"
  suite "fuzz-$1" 300 "$bin" -runs="$2" -seed=1 -max_len="${3:-4096}" -detect_leaks=0 -timeout=20 \
    -artifact_prefix="$scratch/" "$scratch" "tests/fuzz/corpus/$1"
}
# Two lanes of about equal length (the shard and checkpoint targets write an HDF5 file per input:
# 41 and 29 s here, the other eleven 64 s).
fuzz_lane1() {
  fuzz shard 5000
  fuzz checkpoint 5000
}
fuzz_lane2() {
  fuzz options 20000
  fuzz jsonl 20000
  fuzz csv 20000
  fuzz npy 20000
  fuzz npz 20000
  fuzz trace 20000
  fuzz sums 20000
  fuzz tokens 20000
  fuzz safetensors 20000
  fuzz gpt2 20000
  fuzz bpe_json 5000 16384
  fuzz sentencepiece 5000 8192
}

# The Slurm test waits on its daemons and jobs about half of its time (the machine was 49% busy
# over its 70 s on 2 cores), so the fuzz targets, one process each, run beside it in two lanes
# (in one lane they took 152 s, the Slurm test 103 s, the last 49 s on one core). Their lines print as they finish; their counts join
# the others' through a file per lane. Their scratch files go to memory where there is a writable
# /dev/shm (the shard target: 20% faster than on disk).
fuzz_pids=()
for lane in 1 2; do
  rm -f "$log/fuzz$lane.counts"
  ( fuzz_pids=()
    trap 'interrupted 130' INT
    trap 'interrupted 143' TERM
    trap 'interrupted 129' HUP
    [ -w /dev/shm ] && export TMPDIR=/dev/shm
    passed=0 failed=0 failures=(); "fuzz_lane$lane"; echo "$passed $failed ${failures[*]}" >"$log/fuzz$lane.counts" ) &
  fuzz_pids+=($!)
done
suite slurm 600 tests/integration/slurm.sh
for lane in 1 2; do
  wait "${fuzz_pids[$((lane - 1))]}"
  names=
  read -r p f names <"$log/fuzz$lane.counts" || { p=0; f=1; names="fuzz-lane-$lane (no counts)"; }
  passed=$((passed + p)); failed=$((failed + f))
  [ -z "${names:-}" ] || failures+=($names)
done

echo
[ $failed = 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ $failed = 0 ]
