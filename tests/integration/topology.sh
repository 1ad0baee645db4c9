#!/usr/bin/env bash
# Rank table: 4 ranks with --ranks-per-node 2 form 2 simulated nodes of 2; without it, 1 node.
source "$(dirname "$0")/lib.bash"
synth "$WORK/data" --train-samples 256 --val-samples 32
train 4 --data "$WORK/data" --run-dir "$WORK/run" --steps 2 --batch-size 4 --eval-every 0 --ranks-per-node 2
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "exit $RC"; }
grep -q "4 ranks on 2 simulated nodes" "$WORK/out" || { cat "$WORK/out"; fail "no simulated-node line"; }
for want in "0 0 0/2" "1 0 1/2" "2 1 0/2" "3 1 1/2"; do
  awk '/rank  node  local/ {t=1; next} t && NF==4 {print $1, $2, $3}' "$WORK/out" | matches -x "$want" \
    || { cat "$WORK/out"; fail "rank table lacks row '$want'"; }
done
train 4 --data "$WORK/data" --run-dir "$WORK/run2" --steps 2 --batch-size 4 --eval-every 0
grep -q "4 ranks on 1 node$" "$WORK/out" || { cat "$WORK/out"; fail "real topology: want 1 node"; }

# Simulated nodes share the host's cores: 4 one-rank nodes on this machine get the host's cores / 4
# compute threads each (unbound, as --bind-to none makes them on any machine), not a whole
# machine's worth per rank.
MPIRUN="$MPIRUN --bind-to none" train 4 --data "$WORK/data" --run-dir "$WORK/run3" --steps 2 --batch-size 4 --eval-every 0 --ranks-per-node 1
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "--ranks-per-node 1: exit $RC"; }
want=$(( $(nproc) / 4 )); [ "$want" -ge 1 ] || want=1
grep -q "backend cpu, $want threads\? per rank" "$WORK/out" \
  || { grep "backend cpu" "$WORK/out"; fail "4 simulated nodes on $(nproc) cores: want $want compute threads per rank"; }
echo "ok: 4 simulated one-rank nodes on $(nproc) cores: $want compute thread(s) per rank"
