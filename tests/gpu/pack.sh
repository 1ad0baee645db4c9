#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a bare GPU machine (CUDA there, but no MPI, HDF5, Boost or
# OpenBLAS, and no package registry): builds here with CUDA=1, and puts in build/gpu-pack
#   bin/   dptrain, dptrain-data, dptrain-ckpt, cuda_tests, mpi_tests and the bf16 matmul benchmark,
#          stripped;
#   debs/  the Debian packages of every library they load beyond glibc, libstdc++ and CUDA's own
#          (cuBLAS, the runtime, NCCL: run.sh finds those on the GPU machine), found with ldd and
#          dpkg -S, plus Open MPI's launcher, daemon and plugins;
#   STAMP  the commit the binaries were built from.
# There: tests/gpu/run.sh --prebuilt build/gpu-pack unpacks the packages into a private prefix
# (dpkg -x, never into /) and runs the same steps without building.
#   tests/gpu/pack.sh        (as root on Debian 12, where apt-get download works)
set -euo pipefail
cd "$(dirname "$0")/../.."
P=build/gpu-pack
rm -rf "$P" && mkdir -p "$P/bin" "$P/debs"
make -j"$(nproc)" CUDA=1 all build/cuda_tests build/mpi_tests >/dev/null
/usr/local/cuda/bin/nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -Iinclude -o "$P/bin/bench_ops" \
  tests/gpu/bench_ops.cu src/backend/cuda/matmul.cu src/backend/cuda/matmul_rows.cu src/backend/cuda/activation.cu src/backend/cuda/attention.cu \
  src/backend/cuda/flash_attention.cu src/backend/cuda/crossentropy.cu src/backend/cuda/optim.cu src/backend/cuda/layernorm.cu src/backend/cuda/encoder.cu src/backend/cuda/context.cpp src/backend/cuda/cublas_library.cpp src/core/error.cpp -lcublas -lcublasLt
for b in dptrain dptrain-data dptrain-ckpt cuda_tests mpi_tests; do cp "build/$b" "$P/bin/"; done
strip "$P"/bin/*
# Which source the binaries are: run.sh prints it, so a pack older than the tree shows.
git describe --always --dirty >"$P/STAMP" 2>/dev/null || echo unknown >"$P/STAMP"

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
echo "gpu-pack: $(ls "$P/bin" | wc -l) binaries, $(ls "$P/debs" | wc -l) packages, $(du -sh "$P" | cut -f1) in $P"
echo "on the GPU machine: tests/gpu/run.sh --prebuilt $P   (carry $P)"
