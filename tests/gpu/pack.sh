#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a bare GPU machine (CUDA there, but no MPI, HDF5, Boost or
# OpenBLAS, and no package registry): builds here with CUDA=1, and puts in build/gpu-pack
#   bin.tar.gz  bin/: dptrain, dptrain-data, dptrain-ckpt, dptrain-bench, cuda_tests, mpi_tests and
#          the bf16 matmul benchmark, stripped;
#   debs/  the Debian packages of every library they load beyond glibc, libstdc++ and CUDA's own
#          (cuBLAS, the runtime, NCCL: run.sh finds those on the GPU machine), found with ldd and
#          dpkg -S, plus Open MPI's launcher, daemon and plugins;
#   STAMP  the commit the binaries were built from; TREE the digests of its tracked files.
# There: tests/gpu/run.sh --prebuilt build/gpu-pack unpacks the packages into a private prefix
# (dpkg -x, never into /) and runs the same steps without building.
#   tests/gpu/pack.sh          (as root on Debian 12, where apt-get download works)
#   tests/gpu/pack.sh --check  exit 0 when build/gpu-pack was built from this tree as it is now
#                              (STAMP = git describe --always --dirty), else 1 saying so: the GPU
#                              machine may have no .git of this tree (run.sh compares TREE there)
set -euo pipefail
cd "$(dirname "$0")/../.."
P=build/gpu-pack
tree=$(git describe --always --dirty 2>/dev/null || echo unknown)
if [ "${1:-}" = --check ]; then
  have=$(cat "$P/STAMP" 2>/dev/null || echo none)
  [ "$have" = "$tree" ] && [ "$tree" != unknown ] && [ "${tree%-dirty}" = "$tree" ] \
    && { echo "gpu-pack: built from $tree, the tree as it is"; exit 0; }
  echo "gpu-pack: built from $have, the tree is at $tree: run tests/gpu/pack.sh (on a committed tree)" >&2
  exit 1
fi
case $tree in
  unknown | *-dirty) echo "gpu-pack: the tree is at $tree: commit first (the pack is built from the committed tree)" >&2; exit 1 ;;
esac
rm -rf "$P" && mkdir -p "$P/bin" "$P/debs"
# Built apart from build/ (a copy of the committed tree in build/gpu-pack-src) for any x86-64 CPU
# of the last decade (x86-64-v3: AVX2 and FMA): the GPU machine's CPU is not this one, and the
# default -march=native of a CPU with AVX-512 makes binaries that stop with SIGILL on one without.
S=build/gpu-pack-src
rm -rf "$S" && mkdir -p "$S" && git archive HEAD | tar -x -C "$S"
make -C "$S" -j"$(nproc)" CUDA=1 ARCH_FLAGS=-march=x86-64-v3 all build/cuda_tests build/mpi_tests >/dev/null
top=$PWD
(cd "$S" && /usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Iinclude -o "$top/$P/bin/bench_ops" \
  tests/gpu/bench_ops.cu src/backend/cuda/matmul.cu src/backend/cuda/matmul_rows.cu src/backend/cuda/activation.cu src/backend/cuda/attention.cu \
  src/backend/cuda/flash_attention.cu src/backend/cuda/flash_attention_backward.cu src/backend/cuda/crossentropy.cu src/backend/cuda/optim.cu src/backend/cuda/layernorm.cu src/backend/cuda/encoder.cu src/backend/cuda/context.cpp src/backend/cuda/cublas_library.cpp src/core/error.cpp -lcublas -lcublasLt)
for b in dptrain dptrain-data dptrain-ckpt dptrain-bench cuda_tests mpi_tests; do cp "$S/build/$b" "$P/bin/"; done
strip "$P"/bin/*
# Which source the binaries are: run.sh prints it, and compares the tree it runs in with the
# tracked files' digests in TREE (the GPU machine may have no .git of this tree to ask).
echo "$tree" >"$P/STAMP"
# The digests are of the committed files the binaries were built from (the copy in $S), not of
# the working tree, which may have moved on since.
git ls-tree -r -z --name-only HEAD | (cd "$S" && xargs -0 sha256sum) >"$P/TREE"

# The packages of the libraries the binaries load (CUDA's come from the GPU machine itself).
libs=$(for b in "$P"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux-x86-64)\.so|/libcu(blas|blasLt|dart|da)\.so|/usr/local/cuda')
# The C runtime itself stays the GPU machine's own (a newer glibc runs these binaries).
pkgs=$(for l in $libs; do dpkg -S "$(readlink -f "$l")" 2>/dev/null || dpkg -S "$l" 2>/dev/null; done | cut -d: -f1 | sort -u |
  grep -Evx 'libc6|libgcc-s1|libstdc\+\+6')
# Open MPI's launcher (orterun), daemon (orted) and the libraries its plugins load.
pkgs="$pkgs openmpi-bin libopenmpi3 openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
  libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libgfortran5
  libquadmath0 libxnvctrl0 libnuma1 libltdl7 libudev1"
(cd "$P/debs" && apt-get download $(echo "$pkgs" | tr ' ' '\n' | sort -u) >/dev/null)
# The binaries gzipped (a third of their size; gzip is on every machine): run.sh unpacks them.
nbin=$(ls "$P/bin" | wc -l)
tar -czf "$P/bin.tar.gz" -C "$P" bin && rm -rf "$P/bin"
echo "gpu-pack: $nbin binaries, $(ls "$P/debs" | wc -l) packages, $(du -sh "$P" | cut -f1) in $P, built from $tree"
# The pack goes to the GPU machine with the tracked tree: both together are kept under 62 MiB, so
# that the copy stays small and quick.
size=$(( $(du -sb "$P" | cut -f1) + $(git ls-files -z | xargs -0 cat 2>/dev/null | wc -c) ))
echo "gpu-pack: the pack and the tracked tree: $((size >> 20)) MiB together (at most 62)"
[ "$size" -le $((62 << 20)) ] || { echo "gpu-pack: the pack and the tracked tree are over 62 MiB together" >&2; exit 1; }
echo "on the GPU machine, with $P beside the tree: tests/gpu/run.sh --prebuilt $P --logs-to DIR"
