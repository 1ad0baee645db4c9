#!/usr/bin/env bash
# The layers of docs/ARCHITECTURE.md hold: a source or header includes dptrain headers only of its
# own folder or of folders below it, in this order (lowest first):
#   core, backend/cpu, model, comm, data, config, io, backend, train, app, tools
# (backend/cuda belongs to backend; tools/lib to tools). And beyond the includes it writes: model
# and the CPU backend reach neither mpi.h nor hdf5.h, even through other headers (checked with the
# preprocessor); the CUDA backend includes no MPI or NCCL header itself (it reaches them through
# comm); DPTRAIN_HAVE_CUDA and DPTRAIN_HAVE_NCCL appear only in src/backend/cuda/ and in no header.
source "$(dirname "$0")/lib.bash"
cd "$ROOT"
order=(core backend/cpu model comm data config io backend train app tools)
rank_of() {
  local d=$1 i
  case $d in backend/cuda*) d=backend ;; tools/*) d=tools ;; esac
  for i in "${!order[@]}"; do [ "${order[$i]}" = "$d" ] && { echo "$i"; return; }; done
  echo -1
}
bad=0
while IFS= read -r f; do
  dir=$(dirname "${f#src/}"); dir=${dir#include/dptrain/}
  [[ $f == include/* ]] && dir=$(dirname "${f#include/dptrain/}")
  me=$(rank_of "$dir")
  [ "$me" -ge 0 ] || { echo "$f: folder '$dir' is not a layer"; bad=1; continue; }
  while IFS= read -r inc; do
    them=$(rank_of "$(dirname "$inc")")
    if [ "$them" -lt 0 ] || [ "$them" -gt "$me" ]; then
      echo "$f includes dptrain/$inc: $dir may not depend on $(dirname "$inc")"; bad=1
    fi
  done < <(grep -ho '#include "dptrain/[^"]*"' "$f" | sed 's/#include "dptrain\///; s/"$//')
done < <(find src include -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | sort)

# Transitively: what the preprocessor opens for each model and CPU-backend source.
CONFIG_FLAGS=$(sed -n 's/^MPI_CFLAGS *:*= *//p; s/^HDF5_CFLAGS *:*= *//p' build/config.mk | tr '\n' ' ')
for f in src/model/*.cpp src/backend/cpu/*.cpp; do
  opened=$(g++ -std=c++17 -fopenmp -Iinclude $CONFIG_FLAGS -H -fsyntax-only "$f" 2>&1 | grep -E '^\.+ ' || true)
  if printf '%s\n' "$opened" | matches -E '/(mpi|hdf5)\.h$'; then
    echo "$f reaches $(printf '%s\n' "$opened" | grep -E '/(mpi|hdf5)\.h$' | sed -n '1{s/^\.* //;p}')"; bad=1
  fi
done
if grep -lE '#include <(mpi|nccl)\.h>' src/backend/cuda/* include/dptrain/backend/cuda/* 2>/dev/null; then
  echo "the CUDA backend includes MPI or NCCL itself (above); reach them through comm"; bad=1
fi
leak=$(grep -rlE 'DPTRAIN_HAVE_(CUDA|NCCL)' src include | grep -v '^src/backend/cuda/' || true)
[ -z "$leak" ] || { echo "DPTRAIN_HAVE_* outside src/backend/cuda/: $leak"; bad=1; }
[ "$bad" = 0 ] || fail "the layers do not hold (above)"
echo "layers hold: $(find src include -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' | wc -l) files"
