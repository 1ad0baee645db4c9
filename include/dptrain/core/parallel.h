// Loops of the CPU ops and the optimizer over the OpenMP threads, or in the calling thread when
// a team would cost more than the loop. Not for OpenBLAS (its own threads) or the trainer's threads.
#pragma once

#include <omp.h>

namespace dptrain {

// Float operations below which a loop stays in the calling thread: an OpenMP team costs about as
// much as 16-32k additions. Measured: docs/BENCHMARKS.md ("OpenMP teams on small loops").
constexpr long kParallelGrain = 32768;

// As `omp parallel for schedule(static)`; cost: one item's work. A body must write each item's
// results alone, so the split never changes a result. Keep a body's loops in a function the
// lambda calls: GCC ignores `omp simd` inside a lambda (same section of docs/BENCHMARKS.md).
template <class Body>
void parallel_for(long n, long cost, Body&& body) {
    if (n <= 0) return;
    if (n * cost < kParallelGrain || omp_get_max_threads() == 1 || omp_in_parallel()) {
        body(0L, n);
        return;
    }
#pragma omp parallel
    {
        const long t = omp_get_thread_num(), threads = omp_get_num_threads();
        const long begin = n * t / threads, end = n * (t + 1) / threads;
        if (begin < end) body(begin, end);
    }
}

} // namespace dptrain
