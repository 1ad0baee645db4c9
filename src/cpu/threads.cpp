// Thread count of the CPU backend: one setting for OpenBLAS and OpenMP alike, so that ranks
// sharing a node do not oversubscribe its cores.
#include "dptrain/backend.h"

#include <cblas.h>
#include <omp.h>
#include <xmmintrin.h>

namespace dptrain::cpu {

void set_threads(int n) {
    if (n < 1) n = 1;
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
    // Flush denormals to zero in every compute thread: optimizer moments of parameters whose
    // gradient stays zero decay geometrically into the denormal range, where each operation costs
    // ~100 cycles (seen: AdamW 3x slower after ~1000 steps). Values below 1e-38 do not matter here.
    constexpr unsigned kFlushZero = 0x8000, kDenormalsZero = 0x0040;
    _mm_setcsr(_mm_getcsr() | kFlushZero | kDenormalsZero);
#pragma omp parallel
    _mm_setcsr(_mm_getcsr() | kFlushZero | kDenormalsZero);
}

int get_threads() { return omp_get_max_threads(); }

} // namespace dptrain::cpu
