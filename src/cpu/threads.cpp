// Thread count of the CPU backend: one setting for OpenBLAS and OpenMP alike, so that ranks
// sharing a node do not oversubscribe its cores.
#include "dptrain/backend.h"

#include <cblas.h>
#include <omp.h>

namespace dptrain::cpu {

void set_threads(int n) {
    if (n < 1) n = 1;
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
}

int get_threads() { return omp_get_max_threads(); }

} // namespace dptrain::cpu
