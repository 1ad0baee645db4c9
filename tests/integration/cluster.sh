#!/usr/bin/env bash
# Real separate hosts on one machine (tests/cluster/up: network namespaces on a bridge): dptrain
# finds the nodes without --ranks-per-node and shows their host names; every all-reduce
# algorithm gives exact sums across the network; training on 2 emulated nodes x 2 ranks ends
# where 4 ranks on one node do (within 1e-5), for flat and hierarchical; the sharded optimizer
# through the hierarchical engine ends exactly where the replicated one does.
source "$(dirname "$0")/lib.bash"
cluster_up 2 2 dptt
synth "$WORK/data" --train-samples 2000 --val-samples 256
common=(--data "$WORK/data" --steps 20 --batch-size 8 --lr 5e-3 --eval-every 0 --log-every 10)

# Topology from the hosts alone.
MPIRUN="$CMPI" train 4 "${common[@]}" --allreduce hierarchical --run-dir "$WORK/hier"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "training across emulated nodes exited $RC"; }
grep -q "^4 ranks on 2 nodes$" "$WORK/out" || { cat "$WORK/out"; fail "want 4 ranks on 2 nodes"; }
for want in "0 0 0/2 dptt-node0" "1 0 1/2 dptt-node0" "2 1 0/2 dptt-node1" "3 1 1/2 dptt-node1"; do
  awk '/rank  node  local/ {t=1; next} t && NF==4 {print $1, $2, $3, $4}' "$WORK/out" | matches -x "$want" \
    || { cat "$WORK/out"; fail "rank table lacks '$want'"; }
done
grep -q "gradients: hierarchical (2 nodes x 2 ranks: shared memory in the node, MPI across)" "$WORK/out" \
  || { cat "$WORK/out"; fail "hierarchical did not run across 2 nodes"; }
MPIRUN="$CMPI" train 4 "${common[@]}" --allreduce flat --run-dir "$WORK/flat"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "flat across emulated nodes exited $RC"; }
train 4 "${common[@]}" --allreduce flat --run-dir "$WORK/one-node"
for r in hier flat; do
  "$BIN/dptrain-ckpt" diff "$WORK/$r/checkpoints/ckpt-00000020.h5" "$WORK/one-node/checkpoints/ckpt-00000020.h5" --tol 1e-5 \
    || fail "$r across 2 emulated nodes differs from 4 ranks on one node"
done

# The sharded optimizer through the hierarchical engine across the network: each node's sums of a
# piece go to its owner's node, a+b as the replicated all-reduce adds them, so bit-identical.
MPIRUN="$CMPI" train 4 "${common[@]}" --allreduce hierarchical --shard-optimizer --run-dir "$WORK/hier-shard"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "sharded training across emulated nodes exited $RC"; }
grep -q "reduce-scatter + all-gather, hierarchical (2 nodes x 2 ranks" "$WORK/out" || { cat "$WORK/out"; fail "no hierarchical shard"; }
"$BIN/dptrain-ckpt" diff "$WORK/hier-shard/checkpoints/ckpt-00000020.h5" "$WORK/hier/checkpoints/ckpt-00000020.h5" --tol 0 \
  || fail "sharded hierarchical across 2 emulated nodes differs from the replicated one"

# Ranks dealt round-robin over the nodes (--map-by node: ranks 0 and 2 on node 0): the shards'
# owners are not grouped by node, and the run still ends where one node's does.
MPIRUN="$CMPI --map-by node" train 4 "${common[@]}" --allreduce hierarchical --shard-optimizer --run-dir "$WORK/rr-shard"
[ "$RC" = 0 ] || { cat "$WORK/out"; fail "sharded training with ranks round-robin over the nodes exited $RC"; }
awk '/rank  node  local/ {t=1; next} t && NF==4 {print $1, $2, $3, $4}' "$WORK/out" | matches -x "1 1 0/2 dptt-node1" \
  || { cat "$WORK/out"; fail "--map-by node: want rank 1 first on node 1"; }
"$BIN/dptrain-ckpt" diff "$WORK/rr-shard/checkpoints/ckpt-00000020.h5" "$WORK/one-node/checkpoints/ckpt-00000020.h5" --tol 1e-5 \
  || fail "sharded hierarchical with ranks round-robin over 2 emulated nodes differs from 4 ranks on one node"

# Simulated nodes that mpirun's placement splits across hosts (--map-by node deals ranks 0 and 1
# to different hosts): what needs a node's shared memory (the hierarchical all-reduce's window,
# --io memory) is refused on every rank with one line (the window failed with MPI_ERR_INTERN, or
# hung); --allreduce auto takes flat, which needs none, and trains.
for opt in "--allreduce hierarchical" "--io memory"; do
  MPIRUN="$CMPI --map-by node" train 4 "${common[@]}" --ranks-per-node 2 $opt --run-dir "$WORK/split-sim"
  [ "$RC" = 2 ] && [ "$(grep -c '^dptrain: error:' "$WORK/out")" = 1 ] \
    && grep -q "^dptrain: error: $opt: a simulated node's ranks must all be on one host" "$WORK/out" \
    || { cat "$WORK/out"; fail "simulated nodes split across hosts, $opt: want one line and exit 2"; }
done
MPIRUN="$CMPI --map-by node" train 4 "${common[@]}" --ranks-per-node 2 --run-dir "$WORK/split-auto"
[ "$RC" = 0 ] && grep -q "gradients: flat" "$WORK/out" || { cat "$WORK/out"; fail "simulated nodes split across hosts, auto: want flat"; }
echo "ok: simulated nodes across hosts: a node window is refused with one line, auto trains flat"

# Every algorithm, replicated and sharded, exact sums across the network (the bench checks every size).
for mode in "" --sharded; do
  set +e
  timeout -k 5 120 $CMPI -np 4 "$BIN/dptrain-bench" allreduce -b 4 -e 1M -f 8 -n 2 -w 1 $mode >"$WORK/bench.out" 2>&1
  rc=$?
  set -e
  grep -q "^# wrong results: 0$" "$WORK/bench.out" && [ $rc = 0 ] || { cat "$WORK/bench.out"; fail "all-reduce $mode across nodes: wrong results or exit $rc"; }
done
echo "ok: 2 emulated nodes x 2 ranks: topology, flat, hierarchical and sharded training, exact all-reduce and reduce-scatter"
