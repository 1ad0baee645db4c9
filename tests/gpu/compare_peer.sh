#!/usr/bin/env bash
# The GPU check's comparison with the peer: dptrain's tokens/s (the last step line of its GPT-2
# 124M bf16 runs, with matmul and with flash attention) against PyTorch's on the same GPU and
# shapes (bench/gpt_pytorch.py, unfused and fused attention), as ratios: one short line per
# dptrain run, ratios first (run.sh's summary shows the last, the flash one, cut to 90 characters). Run by tests/gpu/run.sh after those steps; usage: compare_peer.sh LOGDIR
# Not for: judging anything by itself (the same-run ratio is the number; BENCHMARKS.md keeps them).
set -u
logs=${1:?usage: compare_peer.sh LOGDIR}
echo "dptrain's tokens/s over PyTorch's, bf16 on the same GPU and shapes (matmul, flash: dptrain's"
echo "attention; torch: PyTorch's unfused attention, torch-sdpa: its fused scaled_dot_product_attention,"
echo "torch-compile: that under torch.compile, where it ran):"
found=0
for run in gpt-124m-bf16 gpt-124m-bf16-flash; do
  # "22.6k tok/s" in dptrain's step lines ("step  8/12 ...", not the "step breakdown" after them), "123456 tokens/s" in the peer's: tokens per second.
  dptrain=$(grep -E '^step +[0-9]+/' "$logs/$run.log" 2>/dev/null | tail -n1 | grep -o '[0-9.]*[kM]\? tok/s' |
    awk '{ v = $1; m = 1; if (v ~ /k$/) m = 1e3; if (v ~ /M$/) m = 1e6; sub(/[kM]$/, "", v); printf "%.0f", v * m }')
  if [ -z "$dptrain" ]; then
    echo "$run: no step line with tok/s in $logs/$run.log"
    continue
  fi
  found=1
  name=matmul
  [ $run = gpt-124m-bf16-flash ] && name=flash
  line="ratio $name:"
  peers=""
  for peer in torch-124m-bf16 torch-124m-bf16-sdpa torch-124m-bf16-compile; do
    # torch.compile's run comes late in the check, and only where PyTorch has it.
    [ $peer = torch-124m-bf16-compile ] && [ ! -e "$logs/$peer.log" ] && continue
    t=$(grep -o '[0-9]* tokens/s' "$logs/$peer.log" 2>/dev/null | tail -n1 | awk '{ print $1 }')
    if [ -n "$t" ] && [ "$t" -gt 0 ]; then
      pname=torch
      [ $peer = torch-124m-bf16-sdpa ] && pname=torch-sdpa
      [ $peer = torch-124m-bf16-compile ] && pname=torch-compile
      line="$line $(awk -v d="$dptrain" -v t="$t" 'BEGIN { printf "%.2f", d / t }') vs $pname,"
      peers="$peers, $pname $t"
    else
      line="$line no result from $peer,"
    fi
  done
  echo "$line dptrain $dptrain tok/s${peers}"
done
[ $found = 1 ]
