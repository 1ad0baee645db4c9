#!/usr/bin/env bash
# The layers of docs/ARCHITECTURE.md hold: a source or header includes dptrain headers only of its
# own folder or of the folders its layer may use (the table below; backend/cuda belongs to
# backend, tools/lib to tools). So comm knows no model, train and infer do not include each other,
# and infer includes neither train nor comm. Beyond the includes it writes: model, the CPU backend
# and infer reach neither mpi.h (nor, model and the CPU backend, hdf5.h), even through other
# headers (checked with the preprocessor); the CUDA backend includes no MPI or NCCL header itself
# (it reaches them through comm); DPTRAIN_HAVE_CUDA and DPTRAIN_HAVE_NCCL appear in no source.
source "$(dirname "$0")/lib.bash"
cd "$ROOT"
declare -A uses=(
  [core]=""
  [backend/cpu]="core"
  [model]="core backend/cpu"
  [comm]="core"
  [data]="core comm"
  [config]="core comm data model"
  [io]="core comm data model config"
  [backend]="core backend/cpu model comm config"
  [train]="core backend/cpu model comm data config io backend"
  [infer]="core backend/cpu model data config io backend"
  [app]="core backend/cpu model comm data config io backend train infer"
  [tools]="core backend/cpu model comm data config io backend train infer"
)
layer_of() {
  case $1 in backend/cuda*) echo backend ;; tools/*) echo tools ;; *) echo "$1" ;; esac
}
bad=0
while IFS= read -r f; do
  dir=$(dirname "${f#src/}"); dir=${dir#include/dptrain/}
  [[ $f == include/* ]] && dir=$(dirname "${f#include/dptrain/}")
  me=$(layer_of "$dir")
  [ -n "${uses[$me]+set}" ] || { echo "$f: folder '$dir' is not a layer"; bad=1; continue; }
  while IFS= read -r inc; do
    them=$(layer_of "$(dirname "$inc")")
    if [ "$them" != "$me" ] && [[ " ${uses[$me]} " != *" $them "* ]]; then
      echo "$f includes dptrain/$inc: $me may not depend on $them"; bad=1
    fi
  done < <(grep -ho '#include "dptrain/[^"]*"' "$f" | sed 's/#include "dptrain\///; s/"$//')
done < <(find src include -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort)

# Transitively: what the preprocessor opens for each model and CPU-backend source.
CONFIG_FLAGS=$(sed -n 's/^MPI_CFLAGS *:*= *//p; s/^HDF5_CFLAGS *:*= *//p' build/config.mk | tr '\n' ' ')
# reaches FILE PATTERN: the first header matching PATTERN that compiling FILE opens.
reaches() {
  g++ -std=c++17 -fopenmp -Iinclude $CONFIG_FLAGS -H -fsyntax-only "$1" 2>&1 | grep -E '^\.+ ' \
    | grep -E "$2" | sed -n '1{s/^\.* //;p}' || true
}
for f in src/model/*.cpp src/backend/cpu/*.cpp; do
  hit=$(reaches "$f" '/(mpi|hdf5)\.h$')
  [ -z "$hit" ] || { echo "$f reaches $hit"; bad=1; }
done
for f in $(find src/infer -name '*.cpp') src/app/serve_main.cpp; do
  hit=$(reaches "$f" '/mpi\.h$')
  [ -z "$hit" ] || { echo "$f reaches $hit (infer knows no MPI)"; bad=1; }
done
if grep -lE '#include <(mpi|nccl)\.h>' src/backend/cuda/* include/dptrain/backend/cuda/* 2>/dev/null; then
  echo "the CUDA backend includes MPI or NCCL itself (above); reach them through comm"; bad=1
fi
leak=$(grep -rlE 'DPTRAIN_HAVE_(CUDA|NCCL)' src include || true)
[ -z "$leak" ] || { echo "DPTRAIN_HAVE_* in a source (the Makefile picks files instead): $leak"; bad=1; }
[ "$bad" = 0 ] || fail "the layers do not hold (above)"
echo "layers hold: $(find src include -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | wc -l) files"
