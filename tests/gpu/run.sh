#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU and the CUDA toolkit: builds with CUDA=1, runs the
# CUDA op tests against their CPU twins (build/cuda_tests) and the NCCL tests, the bf16 matmul and
# the attention and decoding benchmarks (tests/gpu/bench_ops.cu), short MLP and GPT training runs on the CPU and
# the GPU (compared, staged input checked, a GPU resume, greedy decoding on both), GPT-2
# 124M-shaped throughput runs in bf16 and fp32 with one step profiled op by op (with their GPU memory
# against the plan, and the costs of --recompute block and --grad-accum), the PyTorch peer on the
# same shapes (ratios), decoding at that shape and dptrain serve on the GPU (bench/serve_load.py),
# and the op tests under compute-sanitizer, then prints a summary table last.
# Under 6 minutes in all (GPU_CHECK_SECONDS, 330): every step has a time limit and the whole run a deadline.
#   tests/gpu/run.sh            run it (logs in build/gpu-check/logs)
#   tests/gpu/run.sh --dry-run  print every step's command without running any
#   tests/gpu/run.sh --prebuilt DIR [--dry-run]
#                               on a bare GPU machine: use the binaries and runtime packages that
#                               tests/gpu/pack.sh put in DIR (unpacked into a private prefix)
#                               instead of building
#   ... --logs-to DIR           also write the summary (summary.txt) and every step's log
#                               (gpu-check-logs.tgz) into DIR at the end
# Not for: CI (no GPU there) or tracking performance over time.
set -u
caller=$PWD
cd "$(dirname "$0")/../.."

dry=0 prebuilt="" logs_to=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) dry=1; shift ;;
    --prebuilt) prebuilt=${2:?--prebuilt needs the directory tests/gpu/pack.sh wrote}; shift 2 ;;
    --logs-to)
      logs_to=${2:?--logs-to needs a directory}
      case $logs_to in /*) ;; *) logs_to=$caller/$logs_to ;; esac  # relative to where run.sh was called
      shift 2 ;;
    -h | --help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument '$1' (use --dry-run, --prebuilt DIR, --logs-to DIR, or no argument)" >&2; exit 2 ;;
  esac
done

W=build/gpu-check
B=build  # where the binaries are
plain_ld=${LD_LIBRARY_PATH:-}  # the machine's own, for its python3 and PyTorch
if [ -n "$prebuilt" ]; then
  { [ -f "$prebuilt/bin.tar.gz" ] || [ -d "$prebuilt/bin" ]; } && [ -d "$prebuilt/debs" ] ||
    { echo "run.sh: $prebuilt is not what tests/gpu/pack.sh writes" >&2; exit 2; }
  B=$prebuilt/bin
  if [ -f "$prebuilt/bin.tar.gz" ]; then  # the binaries, compressed to keep the pack small
    B=$PWD/$W/packed/bin
    if [ $dry = 0 ]; then
      rm -rf "$W/packed" && mkdir -p "$W/packed" && tar -xzf "$prebuilt/bin.tar.gz" -C "$W/packed" ||
        { echo "run.sh: could not unpack $prebuilt/bin.tar.gz" >&2; exit 2; }
    fi
  fi
  # The packed runtime in a private prefix: Open MPI relocated with OPAL_PREFIX and friends.
  D=$PWD/$W/deps
  if [ $dry = 0 ]; then
    mkdir -p "$D" && for f in "$prebuilt"/debs/*.deb; do
      dpkg -x "$f" "$D" || { echo "run.sh: could not unpack $f" >&2; exit 2; }
    done
  fi
  L=$D/usr/lib/x86_64-linux-gnu
  # NCCL, cuBLAS and the CUDA runtime are the machine's (too large to pack): the toolkit's lib
  # folders, then the CUDA wheels beside python3's PyTorch (nvidia/*/lib), wherever they hold one.
  cuda_dirs=$(
    for d in "${CUDA_HOME:-/usr/local/cuda}"/lib64 "${CUDA_HOME:-/usr/local/cuda}"/lib \
      $(python3 -c 'import glob, site; print(" ".join(sorted({d for p in site.getsitepackages() for d in glob.glob(p + "/nvidia/*/lib")})))' 2>/dev/null); do
      for lib in libnccl.so.2 libcublas.so.13 libcublasLt.so.13 libcudart.so.13; do
        if [ -e "$d/$lib" ]; then echo "$d"; break; fi
      done
    done | awk '!seen[$0]++' | paste -sd: -)
  echo "CUDA libraries from: ${cuda_dirs:-no folder found, so the default search path}"
  # OpenBLAS: whichever variant the pack holds (openmp or pthread: the packing machine's choice;
  # dpkg -x makes no alternatives link for libopenblas.so.0).
  blas_dirs=$(for d in "$L"/openblas-*; do echo "$d"; done | paste -sd: -)
  export OPAL_PREFIX=$D/usr OPAL_LIBDIR=$L/openmpi/lib OPAL_SYSCONFDIR=$D/etc/openmpi \
         OPAL_PKGDATADIR=$D/usr/share/openmpi PMIX_INSTALL_PREFIX=$L/pmix2 \
         PMIX_MCA_mca_base_component_path=$L/pmix2/lib/pmix PATH=$D/usr/bin:$PATH \
         LD_LIBRARY_PATH=$L/openmpi/lib:$L:$blas_dirs${cuda_dirs:+:$cuda_dirs}${plain_ld:+:$plain_ld}
fi
# PyTorch runs with the machine's own libraries, not the packed ones.
PY="env LD_LIBRARY_PATH=$plain_ld python3"
JOBS=$(nproc 2>/dev/null || echo 4)
# The whole run: 330 s, so that a rerun of what failed fits beside it when GPU time is short.
BUDGET=${GPU_CHECK_SECONDS:-330}
# The toolkit: CUDA_HOME if set, else /usr/local/cuda, else wherever nvcc is on the PATH.
if [ -z "${CUDA_HOME:-}" ]; then
  CUDA_HOME=/usr/local/cuda
  if [ ! -x $CUDA_HOME/bin/nvcc ] && command -v nvcc >/dev/null 2>&1; then
    CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
  fi
fi
NVCC="$CUDA_HOME/bin/nvcc"
# The trainer is an MPI program; one rank is enough here. Without mpirun it starts as a singleton.
if [ -n "$prebuilt" ]; then  # Debian's launcher name (dpkg -x makes no mpirun alternative link)
  LAUNCH="orterun -np 1 --oversubscribe $([ "$(id -u)" = 0 ] && echo --allow-run-as-root)"
elif command -v mpirun >/dev/null 2>&1; then
  LAUNCH="mpirun -np 1 --oversubscribe $([ "$(id -u)" = 0 ] && echo --allow-run-as-root)"
else
  LAUNCH=""
fi

say_what_runs_where() {
  echo "What runs on the GPU: build/cuda_tests (every CUDA op, the Llama's RMSNorm, rotary and SwiGLU ops among them, CudaMlp, CudaGpt, CudaLlama and the decoders against their CPU"
  echo "twins), nccl-tests (NcclCommunicator and DeviceStep's NCCL sums on device buffers), bench"
  echo "(cuda::matmul_forward_bf16 at GPT-2 124M shapes, the loss over GPT-2's vocabulary, the"
  echo "optimizer's norm and AdamW over 124M parameters, LayerNorm and the embedding), bench-attention"
  echo "(attention forward and backward at T = 1024: fp32 and TF32 products, and flash attention, its"
  echo "bf16 forms also forward and backward apart), bench-decode (decoding's products at GPT-2 124M"
  echo "shapes, 1, 8 and 32 rows: matmul_forward_rows against cuBLAS), mlp-train-gpu and gpt-train-gpu[-host|-flash]"
  echo "(--device cuda with the state on the GPU and on the host, and with flash attention, compared"
  echo "step by step with the CPU runs of the same configs by the host steps mlp-compare and"
  echo "gpt-compare[-host|-flash]; gpt-staged reads how many batches were copied during the step before"
  echo "theirs), llama-train[-gpu] (the Llama on both devices, compared by llama-compare; llama-decode-gpu:"
  echo "generate --device cuda's greedy text against the CPU's, fp32 and bf16 weights; llama-124m-bf16-flash"
  echo "and torch-llama-124m-sdpa: a 114M Llama's tokens/s beside PyTorch's), gpt-resume-gpu (a GPU run"
  echo "stopped and resumed), gpt-decode-gpu (generate --device cuda:"
  echo "the CPU's greedy text from the GPU's key/value cache; -bf16: with bf16 weights), gpt-accum-gpu (--grad-accum 2 summed on"
  echo "the GPU, compared with the CPU's batch of both by gpt-compare-accum), gpt-shard-gpu"
  echo "(--shard-optimizer with the state on the GPU, compared by gpt-compare-shard), gpt-recompute-gpu"
  echo "(--recompute block on the GPU: gpt-train-gpu's checkpoint bit for bit), gpt-124m-* (tokens/s and MFU of a GPT-2"
  echo "124M-shaped model in bf16 with matmul and with flash attention (also at batch 16, 32 and --batch-size auto), and in fp32,"
  echo "on one GPU, against the bf16 peak given by --peak-gflops, one step profiled op by op),"
  echo "torch-124m-* (PyTorch on the same GPU and shapes: the peer; the host step vs-pytorch gives the"
  echo "ratios), gpt-124m-recompute and gpt-124m-accum (--recompute block, and --grad-accum 2 of 4, at that"
  echo "shape: their step time against the flash run's, and the GPU memory against the plan; torch-124m-accum the"
  echo "peer's cost of the same split), generate-124m-gpu (decoding at that shape, fp32 and bf16 weights),"
  echo "decode-124m-graphs (dptrain-bench decode --device cuda: 1, 8 and 32 sequences, CUDA graphs against"
  echo "kernel by kernel), gpt-sample-gpu (generate --temperature 0.9 picked on the GPU: the CPU's text),"
  echo "serve-gpu (bench/serve_load.py --device cuda: batching on and off, a rollout under load),"
  echo "torch-attention (PyTorch's fused attention at bench-attention's shape), torch-124m-bf16-compile"
  echo "(torch.compile's step, the second peer; vs-pytorch-compile the ratios with it),"
  echo "racecheck-flash and memcheck (compute-sanitizer on the flash attention op test and on"
  echo "every op test, where installed)."
}

t0=$SECONDS
names=() devices=() results=() times=() notes=()
declare -A status

# [NOTE=regex] [FAIL_IF=regex] [SKIP_IF=regex] step NAME DEVICE LIMIT_S NEEDS COMMAND
# Runs COMMAND (a bash string) once step NEEDS passed ('-': no need), with its output in
# $W/logs/NAME.log, under min(LIMIT_S, time left of BUDGET). The summary's note is the last log line
# matching NOTE (on failure: the last line). FAIL_IF: a log line that turns success into failure.
# SKIP_IF: a log line that turns failure into a skip (a tool this machine does not support).
step() {
  local name=$1 device=$2 limit=$3 needs=$4 cmd=$5
  if [ $dry = 1 ]; then
    printf '%-11s on %-4s, limit %3ss%s:\n    %s\n' "$name" "$device" "$limit" \
      "$([ "$needs" != - ] && echo ", after $needs")" "$cmd"
    return
  fi
  local log=$W/logs/$name.log left=$((BUDGET - (SECONDS - t0))) result note="" start=$SECONDS rc
  [ "$limit" -gt "$left" ] && limit=$left
  if [ "$needs" != - ] && [ "${status[$needs]:-}" != PASS ]; then
    result=SKIP note="needs $needs, which did not pass"
  elif [ "$limit" -lt 15 ]; then
    result=SKIP note="out of time (${BUDGET}s budget)"
  else
    echo "==> $name ($device, limit ${limit}s): $cmd"
    timeout -k 5 "$limit" bash -c "$cmd" >"$log" 2>&1
    rc=$?
    result=PASS
    [ $rc = 0 ] || result=FAIL
    if [ $rc = 0 ] && [ -n "${FAIL_IF:-}" ] && grep -Eq "$FAIL_IF" "$log"; then
      result=FAIL note="log says: $(grep -Em1 "$FAIL_IF" "$log")"
    fi
    # A tool's refusal of the device is a skip whatever its exit status (a clean summary from a
    # tool that checked nothing is no pass); a timeout stays a failure.
    if [ $rc != 124 ] && [ -n "${SKIP_IF:-}" ] && grep -Eq "$SKIP_IF" "$log"; then
      result=SKIP note="this machine's tool: $(grep -Em1 "$SKIP_IF" "$log")"
    fi
    [ $rc = 124 ] && note="timed out after ${limit}s"
    if [ -z "$note" ] && [ -n "${NOTE:-}" ]; then note=$(grep -E "$NOTE" "$log" | tail -n1); fi
    # A failure's note: dptrain's own error line when there is one (mpirun's trailer comes after it).
    if [ -z "$note" ] && [ $result = FAIL ]; then
      note="exit $rc: $(grep -m1 '^dptrain: error:' "$log" || grep -v '^\s*$' "$log" | tail -n1)"
    fi
    # A fused GEMM that cuBLASLt declined at run time (src/backend/cuda/matmul.cu) ran unfused: slower, so said.
    if grep -q 'cuBLASLt declined' "$log"; then note="cuBLASLt declined a fused GEMM (see the log); $note"; fi
    tail -n 15 "$log" | sed 's/^/    | /'
  fi
  status[$name]=$result
  names+=("$name") devices+=("$device") results+=("$result") times+=($((SECONDS - start)))
  notes+=("$(echo "$note" | sed 's/^[[:space:]]*//' | cut -c1-90)")
}

# skipped NAME DEVICE WHY: a summary row for a step this machine cannot run.
skipped() {
  [ $dry = 1 ] && return
  status[$1]=SKIP
  names+=("$1") devices+=("$2") results+=(SKIP) times+=(0) notes+=("$3")
}

if [ $dry = 1 ]; then
  echo "tests/gpu/run.sh --dry-run: the steps, in order (nothing is run)."
else
  rm -rf "$W/logs" && mkdir -p "$W/logs"  # no log of an earlier run is read or copied as this one's
fi
say_what_runs_where
echo

step gpu-info GPU 20 - \
  "nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader"

# The whole program with CUDA=1: configure needs MPI, HDF5, Boost and OpenBLAS as on the CPU
# machines (`make deps`), the test programs Catch2 (`make test-deps`); where they are missing the
# build fails and the dependent steps are skipped.
if [ -n "$prebuilt" ]; then
  # Every library the binaries load is found (NCCL and cuBLAS are the machine's): the missing are named.
  NOTE='not found|built from' step build host 15 - \
    "changed=\$(sha256sum --quiet -c $prebuilt/TREE 2>/dev/null | sed 's/: .*//' | paste -sd' ' -); \
echo \"built from \$(cat $prebuilt/STAMP 2>/dev/null || echo unknown); \$([ -f $prebuilt/TREE ] || echo 'no TREE: the tree not compared'; \
[ -f $prebuilt/TREE ] && { [ -z \"\$changed\" ] && echo 'the tree as packed' || echo \"the tree differs in: \$changed\"; })\" && \
ls -l $B && if ldd $B/* | grep 'not found'; then exit 1; fi"
else
  NOTE='configure: missing|error' \
  step build host 240 - "make -j$JOBS CUDA=1 CUDA_HOME=$CUDA_HOME all build/cuda_tests build/mpi_tests"
fi

NOTE='test cases|assertions' FAIL_IF='^SKIPPED cuda: no GPU' \
step cuda-tests GPU 120 build "$B/cuda_tests --use-colour no"

# NcclCommunicator on device buffers (tests/mpi/test_nccl.cpp): one rank, since NCCL refuses two
# ranks on one GPU; a run that sees no GPU counts as a failure.
NOTE='test cases|assertions' FAIL_IF='^SKIPPED \[nccl\]' \
step nccl-tests GPU 60 build "$LAUNCH $B/mpi_tests --use-colour no '[nccl]'"

# Standalone (no MPI needed): only the sources the benchmark uses, Hopper machine code only.
if [ -n "$prebuilt" ]; then
  step bench-build host 15 - "ls -l $B/bench_ops"
  BENCH=$B/bench_ops
else
  step bench-build host 150 - \
    "mkdir -p $W && $NVCC -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Iinclude -o $W/bench_ops \
tests/gpu/bench_ops.cu src/backend/cuda/matmul.cu src/backend/cuda/matmul_rows.cu src/backend/cuda/activation.cu src/backend/cuda/attention.cu src/backend/cuda/flash_attention.cu src/backend/cuda/flash_attention_backward.cu src/backend/cuda/crossentropy.cu src/backend/cuda/optim.cu src/backend/cuda/layernorm.cu src/backend/cuda/encoder.cu src/backend/cuda/context.cpp src/backend/cuda/cublas_library.cpp src/core/error.cpp -lcublas -lcublasLt"
  BENCH=$W/bench_ops
fi

NOTE='^RESULT' \
step bench GPU 60 bench-build "$BENCH 50"
NOTE='^RESULT' \
step bench-attention GPU 60 bench-build "$BENCH 10 attention"
NOTE='^RESULT' \
step bench-decode GPU 60 bench-build "$BENCH 50 decode"
# The attention kernels' peer: PyTorch's fused causal scaled_dot_product_attention, bf16, at
# bench-attention's shape, in ms and TFLOP/s (the full and the causal count).
if [ $dry = 1 ] || $PY -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  NOTE='^RESULT' step torch-attention GPU 60 - "$PY bench/attention_pytorch.py"
else
  skipped torch-attention GPU "python3 has no PyTorch that sees a GPU"
fi

# Flash attention's kernels share scratch between a warp's lanes and its WMMA calls: racecheck
# (compute-sanitizer, the PATH's else the toolkit's) on the small shapes of their op test.
SANITIZER=$(command -v compute-sanitizer 2>/dev/null || echo "$CUDA_HOME/bin/compute-sanitizer")
# Some sandboxed GPU machines run programs on the device but refuse the sanitizer's hooks: a skip.
SANITIZER_UNSUPPORTED='Device not supported'
if [ $dry = 1 ] || [ -x "$SANITIZER" ]; then
  NOTE='RACECHECK SUMMARY|test cases' SKIP_IF="$SANITIZER_UNSUPPORTED" \
  step racecheck-flash GPU 60 build \
    "$SANITIZER --tool racecheck --error-exitcode 1 --print-limit 20 $B/cuda_tests --use-colour no \
'cuda flash_attention_forward/backward match the CPU twin'"
else
  skipped racecheck-flash GPU "no compute-sanitizer on the PATH or in $CUDA_HOME/bin"
fi

step mlp-data CPU 60 build \
  "rm -rf $W/synth && $B/dptrain-data synth --out $W/synth --train-samples 16384 --val-samples 2048 --shards 2"

NOTE='^step|loss' \
step mlp-train CPU 60 mlp-data \
  "rm -rf $W/mlp && $LAUNCH $B/dptrain --model mlp --data $W/synth --steps 100 --batch-size 64 --log-every 20 \
--eval-every 100 --checkpoint-every 0 --run-dir $W/mlp"

NOTE='^done' \
step mlp-train-gpu GPU 60 mlp-data \
  "rm -rf $W/mlp-gpu && $LAUNCH $B/dptrain --model mlp --device cuda --data $W/synth --steps 100 --batch-size 64 \
--log-every 20 --eval-every 100 --checkpoint-every 0 --run-dir $W/mlp-gpu"

# The GPU run's validation loss against the CPU run's (same data, seed and steps): within 1e-3.
NOTE='^val loss' \
step mlp-compare host 15 mlp-train-gpu \
  "a=\$(sed -n 's/.*| val loss \\([0-9.]*\\) .*/\\1/p' $W/logs/mlp-train.log | tail -n1); \
b=\$(sed -n 's/.*| val loss \\([0-9.]*\\) .*/\\1/p' $W/logs/mlp-train-gpu.log | tail -n1); \
echo \"val loss cpu \$a gpu \$b\"; awk -v a=\"\$a\" -v b=\"\$b\" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-3 * a) }'"

step gpt-data CPU 60 build \
  "rm -rf $W/tok && mkdir -p $W && cat README.md docs/*.md >$W/docs.txt && \
$B/dptrain-data text --input $W/docs.txt --out $W/tok --vocab char --shards 2"

GPT_ARGS="--model gpt --data $W/tok --n-layer 2 --n-head 4 --n-embd 64 --block-size 64 --batch-size 8 --steps 50 \
--lr 3e-3 --warmup-steps 5 --log-every 10 --eval-every 50 --eval-max 64 --checkpoint-every 0"
NOTE='^step|loss' \
step gpt-train CPU 90 gpt-data "rm -rf $W/gpt && $LAUNCH $B/dptrain $GPT_ARGS --run-dir $W/gpt"

NOTE='^done' \
step gpt-train-gpu GPU 90 gpt-data "rm -rf $W/gpt-gpu && $LAUNCH $B/dptrain $GPT_ARGS --device cuda --run-dir $W/gpt-gpu"
NOTE='^done' \
step gpt-train-gpu-host GPU 90 gpt-data \
  "rm -rf $W/gpt-gpuh && $LAUNCH $B/dptrain $GPT_ARGS --device cuda --gpu-state host --run-dir $W/gpt-gpuh"

# compare_losses A B [TOL]: each step line's loss (steps 10..50) and the validation loss of two
# logs within TOL relative (default 1e-3: fp32 sums in other orders, compounding over 50 steps).
compare_losses() {
  local tol=${3:-1e-3}
  echo "paste <(sed -n 's/^step .*| loss \\([0-9.]*\\) .*/\\1/p; s/.*| val loss \\([0-9.]*\\) .*/\\1/p' $W/logs/$1.log) \
<(sed -n 's/^step .*| loss \\([0-9.]*\\) .*/\\1/p; s/.*| val loss \\([0-9.]*\\) .*/\\1/p' $W/logs/$2.log) | \
awk '{ d = \$1 - \$2; if (d < 0) d = -d; print \"$1\", \$1, \"$2\", \$2; n++; if (!(\$1 > 0 && d <= $tol * \$1)) bad++ } \
END { print n, \"steps compared,\", bad + 0, \"outside $tol\"; exit !(n >= 6 && bad == 0) }'"
}
# The GPU runs against the CPU run: parameters and AdamW on the GPU (the default, --gpu-state
# device), and on the host (--gpu-state host).
# Each first checks that its run took the path it is named for (the banner says where the state is).
NOTE='steps compared' step gpt-compare host 15 gpt-train-gpu \
  "grep -q 'optimizer on the GPU' $W/logs/gpt-train-gpu.log && $(compare_losses gpt-train gpt-train-gpu)"
NOTE='steps compared' step gpt-compare-host host 15 gpt-train-gpu-host \
  "grep -q 'optimizer on the host' $W/logs/gpt-train-gpu-host.log && $(compare_losses gpt-train gpt-train-gpu-host)"

# The Llama (CudaLlama) the same way: 50 steps on the CPU and on the GPU, 4 query heads over 2
# key/value heads, untied head; the step and validation losses within 1e-3.
LLAMA_ARGS="${GPT_ARGS/--model gpt/--model llama} --n-kv-head 2 --untie-embeddings"
NOTE='^step|loss' step llama-train CPU 90 gpt-data "rm -rf $W/llama && $LAUNCH $B/dptrain $LLAMA_ARGS --run-dir $W/llama"
NOTE='^done' step llama-train-gpu GPU 90 gpt-data \
  "rm -rf $W/llama-gpu && $LAUNCH $B/dptrain $LLAMA_ARGS --device cuda --run-dir $W/llama-gpu"
NOTE='steps compared' step llama-compare host 15 llama-train-gpu \
  "grep -q 'optimizer on the GPU' $W/logs/llama-train-gpu.log && $(compare_losses llama-train llama-train-gpu)"
# Its decoding on the GPU (CudaLlamaDecoder: the key/value heads' cache, rotation and grouped
# attention on the device) against the CPU's: the same greedy text, fp32 and bf16 weights.
NOTE='tokens/s' step llama-decode-gpu GPU 30 llama-train-gpu \
  "for p in fp32 bf16; do $B/dptrain generate --checkpoint $W/llama-gpu --prompt 'The ' --tokens 150 --temperature 0 \
--precision \$p >$W/ldecode-cpu.txt && $B/dptrain generate --checkpoint $W/llama-gpu --prompt 'The ' --tokens 150 \
--temperature 0 --precision \$p --device cuda >$W/ldecode-gpu.txt && cmp $W/ldecode-cpu.txt $W/ldecode-gpu.txt || exit 1; done"

# The input stream: the trainer staged most batches during the step before theirs (every one but
# the first, unless the reader had not finished it): at least half of the 49 that could be.
NOTE='batches copied' step gpt-staged host 15 gpt-train-gpu \
  "grep -o '[0-9]* of 50 batches copied to the GPU during the step before' $W/logs/gpt-train-gpu.log && \
n=\$(sed -n 's/.*| \\([0-9]*\\) of 50 batches copied to the GPU.*/\\1/p' $W/logs/gpt-train-gpu.log) && \
[ \"\${n:-0}\" -ge 25 ] && [ \"\$n\" -le 49 ]"

# A resume on the GPU: stopped at step 25 with a checkpoint, resumed to 50 (the state goes to the
# host and back), against the uninterrupted run's final checkpoint.
step gpt-resume-gpu GPU 90 gpt-train-gpu \
  "rm -rf $W/gpt-res && $LAUNCH $B/dptrain $GPT_ARGS --device cuda --run-dir $W/gpt-res --stop-after 25 && \
$LAUNCH $B/dptrain $GPT_ARGS --device cuda --run-dir $W/gpt-res --resume auto && \
$B/dptrain-ckpt diff $W/gpt-gpu/checkpoints/ckpt-00000050.h5 $W/gpt-res/checkpoints/ckpt-00000050.h5 --tol 1e-5"

# Incremental decoding on the GPU (CudaGptDecoder through generate --device cuda) against the
# CPU's, greedy, 150 tokens from the GPU run's checkpoint (past the block size, so the window
# slides): the same text. A near-tie of two logits could pick another token; the [cuda] test
# compares the logits themselves.
NOTE='tokens/s' step gpt-decode-gpu GPU 30 gpt-train-gpu \
  "$B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0 >$W/decode-cpu.txt && \
$B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0 --device cuda \
>$W/decode-gpu.txt && cmp $W/decode-cpu.txt $W/decode-gpu.txt"
# The same with bf16 weights (--precision bf16) on both.
NOTE='tokens/s' step gpt-decode-gpu-bf16 GPU 30 gpt-train-gpu \
  "$B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0 --precision bf16 \
>$W/decode-cpu16.txt && $B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0 \
--device cuda --precision bf16 >$W/decode-gpu16.txt && cmp $W/decode-cpu16.txt $W/decode-gpu16.txt"

# Sampled decoding (temperature 0.9, seed 5), each token picked on the GPU (cuda::pick_tokens),
# against the CPU's picks: the same rule and draws give the same text, unless a draw falls within
# the two devices' ~1e-6 difference in the logits of a boundary between tokens (rare in 150 tokens;
# the [cuda] tests compare the picks on the same logits exactly).
NOTE='tokens/s' step gpt-sample-gpu GPU 30 gpt-train-gpu \
  "$B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0.9 --seed 5 \
>$W/sample-cpu.txt && $B/dptrain generate --checkpoint $W/gpt-gpu --prompt 'The ' --tokens 150 --temperature 0.9 \
--seed 5 --device cuda >$W/sample-gpu.txt && cmp $W/sample-cpu.txt $W/sample-gpu.txt"

# Gradient accumulation on the GPU (--grad-accum 2 of batch 4, the micro-batches summed in the
# model's device buffer) against the CPU run's batch 8: the same samples a step, so the same curve
# within 1e-3, as the runs above.
NOTE='^done' step gpt-accum-gpu GPU 90 gpt-data \
  "rm -rf $W/gpt-acc && $LAUNCH $B/dptrain ${GPT_ARGS/--batch-size 8/--batch-size 4} --grad-accum 2 --device cuda \
--run-dir $W/gpt-acc"
NOTE='steps compared' step gpt-compare-accum host 15 gpt-accum-gpu \
  "grep -q 'optimizer on the GPU' $W/logs/gpt-accum-gpu.log && $(compare_losses gpt-train gpt-accum-gpu)"

# --shard-optimizer with the state on the GPU, on this one rank (its shard is the whole buffer; the
# state's shard, its upload and the update over it run, with nothing to send): the CPU run's curve
# within 1e-3. Several ranks' shards are held together by the [cuda] test of simulated ranks and
# the [nccl] test under mpirun where there are GPUs for them.
NOTE='^done' step gpt-shard-gpu GPU 90 gpt-data \
  "rm -rf $W/gpt-shard && $LAUNCH $B/dptrain $GPT_ARGS --shard-optimizer --device cuda --run-dir $W/gpt-shard"
NOTE='steps compared' step gpt-compare-shard host 15 gpt-shard-gpu \
  "grep -q 'optimizer state sharded' $W/logs/gpt-shard-gpu.log && $(compare_losses gpt-train gpt-shard-gpu)"

# --recompute block on the GPU (each block's forward run again before its backward, one shared slot
# of its activations): the same ops on the same values, so the final checkpoint equals
# gpt-train-gpu's bit for bit.
NOTE='identical|differ' step gpt-recompute-gpu GPU 90 gpt-train-gpu \
  "rm -rf $W/gpt-rec && $LAUNCH $B/dptrain $GPT_ARGS --recompute block --device cuda --run-dir $W/gpt-rec && \
grep -q -- '--recompute block' $W/logs/gpt-recompute-gpu.log && $B/dptrain-ckpt diff $W/gpt-gpu/checkpoints/ckpt-00000050.h5 $W/gpt-rec/checkpoints/ckpt-00000050.h5"

# Flash attention (--attention flash, which takes --precision bf16): the small GPT on the CPU twin
# and on the GPU, compared; both round the same bf16 operands, but an activation an fp32 ulp apart
# can round to the neighbouring bf16 value on one side, so 5e-3 (as the [cuda] model test).
GPT_FLASH="$GPT_ARGS --precision bf16 --attention flash"
NOTE='^step|loss' \
step gpt-train-flash CPU 90 gpt-data "rm -rf $W/gptf && $LAUNCH $B/dptrain $GPT_FLASH --run-dir $W/gptf"
NOTE='^done' \
step gpt-train-gpu-flash GPU 90 gpt-data \
  "rm -rf $W/gptf-gpu && $LAUNCH $B/dptrain $GPT_FLASH --device cuda --run-dir $W/gptf-gpu"
NOTE='steps compared' step gpt-compare-flash host 15 gpt-train-gpu-flash \
  "grep -q 'flash attention' $W/logs/gpt-train-gpu-flash.log && $(compare_losses gpt-train-flash gpt-train-gpu-flash 5e-3)"

# Throughput at GPT-2 124M shapes (12 layers, 12 heads, 768 channels, 1024 tokens, vocabulary
# padded to 50304) on one GPU, in bf16 (the goal: MFU >= 40%) and in fp32 (no TF32: its ceiling
# is the fp32 rate, 67 TFLOP/s = 6.8% of the bf16 peak). MFU against the H200's dense bf16 peak,
# 989 TFLOP/s. Parameters, gradients and AdamW stay on the GPU (--gpu-state auto on one GPU;
# docs/GPU.md). In bf16 attention's products are TF32 (bench-attention shows what that buys), and
# a second bf16 run takes flash attention (nothing T x T: what the MFU goal needs).
G124="--model gpt --device cuda --data $W/tok --vocab-size 50304 --block-size 1024 --n-layer 12 --n-head 12 \
--n-embd 768 --batch-size 8 --steps 12 --warmup-steps 2 --log-every 4 --eval-every 0 --eval-max 8 \
--checkpoint-every 0 --peak-gflops 989000 --profile-ops 8"
NOTE='^step' \
step gpt-124m-bf16 GPU 150 gpt-data "rm -rf $W/g124b && $LAUNCH $B/dptrain $G124 --precision bf16 --run-dir $W/g124b"
NOTE='^step' \
step gpt-124m-bf16-flash GPU 150 gpt-data \
  "rm -rf $W/g124bf && $LAUNCH $B/dptrain $G124 --precision bf16 --attention flash --run-dir $W/g124bf"

# The peer in the same run: PyTorch on the same GPU with the same shapes and batch, bf16 autocast
# (fp32 master weights, as --precision bf16), with the same unfused attention as dptrain's and with
# its fused one (scaled_dot_product_attention); then dptrain's tokens/s over each (with matmul
# attention, and with flash attention: the fair match for the fused one), as ratios. It
# runs with the machine's own libraries ($PY). Where python3 has no PyTorch that sees a GPU the
# steps are listed as skipped (the fused attention also needs PyTorch 2.0).
T124="--device cuda --precision bf16 --batch 8 --block 1024 --layers 12 --heads 12 --embd 768 --vocab 50304 \
--steps 10 --warmup 3"
if [ $dry = 1 ] || $PY -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  NOTE='tokens/s' step torch-124m-bf16 GPU 120 - "$PY bench/gpt_pytorch.py $T124"
  NOTE='tokens/s' step torch-124m-bf16-sdpa GPU 120 - "$PY bench/gpt_pytorch.py $T124 --attention sdpa"
  NOTE='^ratio' step vs-pytorch host 15 gpt-124m-bf16 "tests/gpu/compare_peer.sh $W/logs"
else
  skipped torch-124m-bf16 GPU "python3 has no PyTorch that sees a GPU"
  skipped torch-124m-bf16-sdpa GPU "python3 has no PyTorch that sees a GPU"
fi

# A Llama of GPT-2 124M's size (12 layers, 12 heads over 4 key/value heads, SwiGLU 2048: 114M
# parameters with the 50304-token vocabulary, tied), bf16 with flash attention, beside PyTorch's
# same model (bench/gpt_pytorch.py --arch llama, fused attention) in the same run.
L124="${G124/--model gpt/--model llama} --n-kv-head 4 --ffn-hidden 2048"
NOTE='^step' step llama-124m-bf16-flash GPU 150 gpt-data \
  "rm -rf $W/l124 && $LAUNCH $B/dptrain $L124 --precision bf16 --attention flash --run-dir $W/l124"
if [ $dry = 1 ] || $PY -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  NOTE='tokens/s' step torch-llama-124m-sdpa GPU 120 - \
    "$PY bench/gpt_pytorch.py $T124 --arch llama --kv-heads 4 --ffn 2048 --attention sdpa"
else
  skipped torch-llama-124m-sdpa GPU "python3 has no PyTorch that sees a GPU"
fi

# The flash run again at batch 16 (16384 tokens a step): the optimizer's pass over the parameters
# and each step's fixed costs spread over twice the tokens, a choice the goal's shape leaves open.
NOTE='^step' \
step gpt-124m-bf16-flash-b16 GPU 150 gpt-data \
  "rm -rf $W/g124bf16 && $LAUNCH $B/dptrain ${G124/--batch-size 8/--batch-size 16} --precision bf16 \
--attention flash --run-dir $W/g124bf16"
# At batch 32, with PyTorch's fused-attention step at the same batch beside it.
NOTE='^step' \
step gpt-124m-bf16-flash-b32 GPU 150 gpt-data \
  "rm -rf $W/g124bf32 && $LAUNCH $B/dptrain ${G124/--batch-size 8/--batch-size 32} --precision bf16 \
--attention flash --run-dir $W/g124bf32"
if [ $dry = 1 ] || $PY -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  NOTE='tokens/s' step torch-124m-bf16-sdpa-b32 GPU 120 - "$PY bench/gpt_pytorch.py ${T124/--batch 8/--batch 32} --attention sdpa"
else
  skipped torch-124m-bf16-sdpa-b32 GPU "python3 has no PyTorch that sees a GPU"
fi
# And at --batch-size auto: the largest batch the memory plan fits in 90% of the GPU's free memory
# (the note line names it); tokens/s and MFU at that batch.
NOTE='auto:|^step' \
step gpt-124m-bf16-flash-auto GPU 150 gpt-data \
  "rm -rf $W/g124bfa && $LAUNCH $B/dptrain ${G124/--batch-size 8/--batch-size auto} --precision bf16 \
--attention flash --run-dir $W/g124bfa"

NOTE='^step' \
step gpt-124m-fp32 GPU 150 gpt-data "rm -rf $W/g124f && $LAUNCH $B/dptrain $G124 --run-dir $W/g124f"
# The memory plan's GPU part against what a run allocated on the GPU (cudaMemGetInfo before the
# model and at the end): within 15%, as the CPU runs' peak against the plan (memory_plan.sh), for
# the fp32 run and the bf16 one (the plan sizes a GPU's activations and bf16 operands as CudaGpt
# allocates them, backend/gpu_sizes.h).
plan_check() {  # plan_check RUN_STEP: the command that checks that step's "GPU memory:" line
  echo "line=\$(grep '^GPU memory:' $W/logs/$1.log) && echo \"\$line\" && \
m=\$(sed -n 's/^GPU memory: \\([0-9.]*\\) MiB.*/\\1/p' <<<\"\$line\") && \
p=\$(sed -n 's/.*(planned \\([0-9.]*\\) MiB on the GPU).*/\\1/p' <<<\"\$line\") && \
awk -v m=\"\$m\" -v p=\"\$p\" 'BEGIN { d = (m - p) / m; if (d < 0) d = -d; exit !(m > 0 && d <= 0.15) }'"
}
NOTE='^GPU memory' step gpt-124m-plan host 15 gpt-124m-fp32 "$(plan_check gpt-124m-fp32)"
NOTE='^GPU memory' step gpt-124m-plan-bf16 host 15 gpt-124m-bf16 "$(plan_check gpt-124m-bf16)"

# Block recomputation at GPT-2 124M's shape (bf16, flash attention, batch 8): its step time against
# gpt-124m-bf16-flash's (the host step prints the ratio) and its GPU memory against the plan.
NOTE='^step' \
step gpt-124m-recompute GPU 150 gpt-data \
  "rm -rf $W/g124r && $LAUNCH $B/dptrain $G124 --precision bf16 --attention flash --recompute block --run-dir $W/g124r"
NOTE='^GPU memory' step gpt-124m-plan-recompute host 15 gpt-124m-recompute "$(plan_check gpt-124m-recompute)"
# The cost steps compare with gpt-124m-bf16-flash: listed as skipped where it did not pass.
flash_passed() { [ $dry = 1 ] || [ "${status[gpt-124m-bf16-flash]:-}" = PASS ]; }
if flash_passed; then
  NOTE='recompute' step recompute-cost host 15 gpt-124m-recompute \
    "a=\$(grep -E '^step +[0-9]+/' $W/logs/gpt-124m-bf16-flash.log | tail -n1 | grep -o '[0-9.]* ms' | head -n1 | cut -d' ' -f1); \
b=\$(grep -E '^step +[0-9]+/' $W/logs/gpt-124m-recompute.log | tail -n1 | grep -o '[0-9.]* ms' | head -n1 | cut -d' ' -f1); \
grep -h '^GPU memory' $W/logs/gpt-124m-bf16-flash.log $W/logs/gpt-124m-recompute.log; \
awk -v a=\"\$a\" -v b=\"\$b\" 'BEGIN { if (!(a > 0 && b > 0)) exit 1; printf \"recompute block: %.1f ms a step against %.1f (%+.1f%%)\\n\", b, a, 100 * (b / a - 1) }'"
else
  skipped recompute-cost host "gpt-124m-bf16-flash did not pass: nothing to compare with"
fi

# Gradient accumulation at GPT-2 124M's shape: the flash run's 8 windows a step as 2 micro-batches
# of 4 (--grad-accum 2), its step time against gpt-124m-bf16-flash's.
NOTE='^step' \
step gpt-124m-accum GPU 150 gpt-data \
  "rm -rf $W/g124a && $LAUNCH $B/dptrain ${G124/--batch-size 8/--batch-size 4} --grad-accum 2 --precision bf16 \
--attention flash --run-dir $W/g124a"
if flash_passed; then
  NOTE='accum' step accum-cost host 15 gpt-124m-accum \
    "a=\$(grep -E '^step +[0-9]+/' $W/logs/gpt-124m-bf16-flash.log | tail -n1 | grep -o '[0-9.]* ms' | head -n1 | cut -d' ' -f1); \
b=\$(grep -E '^step +[0-9]+/' $W/logs/gpt-124m-accum.log | tail -n1 | grep -o '[0-9.]* ms' | head -n1 | cut -d' ' -f1); \
awk -v a=\"\$a\" -v b=\"\$b\" 'BEGIN { if (!(a > 0 && b > 0)) exit 1; printf \"grad-accum 2 x 4: %.1f ms a step against 1 x 8: %.1f (%+.1f%%)\\n\", b, a, 100 * (b / a - 1) }'"
else
  skipped accum-cost host "gpt-124m-bf16-flash did not pass: nothing to compare with"
fi
# The peer's cost of the same split: PyTorch (fused attention) with 2 micro-batches of 4 a step
# against its 1 x 8 (torch-124m-bf16-sdpa), tokens/s.
if [ $dry = 1 ] || [ "${status[torch-124m-bf16-sdpa]:-}" = PASS ]; then
  NOTE='tokens/s' step torch-124m-accum GPU 120 - "$PY bench/gpt_pytorch.py ${T124/--batch 8/--batch 4} --accum 2 --attention sdpa"
  NOTE='torch' step torch-accum-cost host 15 torch-124m-accum \
    "a=\$(grep -o '[0-9]* tokens/s' $W/logs/torch-124m-bf16-sdpa.log | tail -n1 | cut -d' ' -f1); \
b=\$(grep -o '[0-9]* tokens/s' $W/logs/torch-124m-accum.log | tail -n1 | cut -d' ' -f1); \
awk -v a=\"\$a\" -v b=\"\$b\" 'BEGIN { if (!(a > 0 && b > 0)) exit 1; printf \"torch accum 2 x 4: %d tokens/s against 1 x 8: %d (%+.1f%% time a token)\\n\", b, a, 100 * (a / b - 1) }'"
else
  skipped torch-124m-accum GPU "no PyTorch run at 1 x 8 to compare with"
  skipped torch-accum-cost host "no PyTorch run at 1 x 8 to compare with"
fi

# Decoding at GPT-2 124M's shape on the GPU (generate --device cuda, the key/value cache, one
# stream, greedy), from gpt-124m-bf16-flash's checkpoint: 256 new tokens, fp32 and bf16 weights.
NOTE='tokens/s' step generate-124m-gpu GPU 60 gpt-124m-bf16-flash \
  "set -o pipefail; for p in fp32 bf16; do $B/dptrain generate --checkpoint $W/g124bf --prompt 'The ' --tokens 256 --temperature 0 \
--device cuda --precision \$p 2>&1 >/dev/null | sed \"s/^/\$p: /\" || exit 1; done"

# Decoding at GPT-2 124M's shape (dptrain-bench decode --device cuda, GPT-2's initialisation):
# greedy tokens/s of one sequence and of 8 and 32 decoded together, ids picked on the GPU, fp32
# and bf16 weights, each with the decoder's CUDA graphs and launched kernel by kernel.
NOTE='tokens/s|speed-up' step decode-124m-graphs GPU 120 build \
  "set -o pipefail; for s in 8 32; do $LAUNCH $B/dptrain-bench decode --device cuda --tokens 200 --repeats 2 --streams \$s || exit 1; done"

# dptrain serve on the GPU (--device cuda): bench/serve_load.py's rows (1, 8 and 32 clients, batching
# on and off) and its rollout under load, with the machine's python3 as the clients.
NOTE='rollout' step serve-gpu GPU 120 gpt-data \
  "python3 bench/serve_load.py --build $B --device cuda --requests 32 --tokens 64"

# PyTorch's torch.compile of the GPT-2 124M step (fused attention), the second peer, where the
# machine's PyTorch has it: late in the run, as it compiles for a minute or more (in its warm-up
# steps, outside its timing); then the ratios again, with it.
if [ $dry = 1 ] || $PY -c 'import torch, sys; sys.exit(not (torch.cuda.is_available() and hasattr(torch, "compile")))' \
  2>/dev/null; then
  NOTE='tokens/s' step torch-124m-bf16-compile GPU 180 - "$PY bench/gpt_pytorch.py $T124 --attention sdpa --compile"
  NOTE='^ratio' step vs-pytorch-compile host 15 torch-124m-bf16-compile "tests/gpu/compare_peer.sh $W/logs"
else
  skipped torch-124m-bf16-compile GPU "python3 has no PyTorch 2 that sees a GPU"
fi

# Last, with what time is left: the op tests under compute-sanitizer's memcheck (an out-of-bounds
# access or a misaligned one in a kernel can pass a tolerance; memcheck names it): the PATH's, else
# the toolkit's; listed as skipped where there is none.
if [ $dry = 1 ] || [ -x "$SANITIZER" ]; then
  NOTE='ERROR SUMMARY|test cases' SKIP_IF="$SANITIZER_UNSUPPORTED" \
  step memcheck GPU 120 build \
    "$SANITIZER --tool memcheck --error-exitcode 1 --print-limit 20 $B/cuda_tests --use-colour no 'cuda *'"
else
  skipped memcheck GPU "no compute-sanitizer on the PATH or in $CUDA_HOME/bin"
fi

[ $dry = 1 ] && exit 0

echo
say_what_runs_where
echo
summary() {
  printf '%-23s %-5s %-6s %5s  %s\n' step on result secs note
  for i in "${!names[@]}"; do
    printf '%-23s %-5s %-6s %5s  %s\n' "${names[$i]}" "${devices[$i]}" "${results[$i]}" "${times[$i]}" "${notes[$i]}"
  done
}
summary
failed=0
for i in "${!names[@]}"; do [ "${results[$i]}" = FAIL ] && failed=$((failed + 1)); done
echo "total $((SECONDS - t0))s; $failed failed; logs in $W/logs"
# Two files: the summary and one archive of every step's log.
if [ -n "$logs_to" ]; then
  mkdir -p "$logs_to" && summary >"$logs_to/summary.txt" && tar czf "$logs_to/gpu-check-logs.tgz" -C "$W" logs &&
    echo "summary and logs (gpu-check-logs.tgz) written to $logs_to" || echo "run.sh: could not write to $logs_to" >&2
fi
[ $failed = 0 ]
