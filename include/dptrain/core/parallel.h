// Loops of the CPU ops and the optimizer over the OpenMP threads, or in the calling thread when
// a team would cost more than the loop. Not for OpenBLAS (its own threads) or the trainer's threads.
#pragma once

#include <omp.h>

namespace dptrain {

// Work (in simple float operations) below which a loop runs in the calling thread. Starting an
// OpenMP team costs 1-4 us on every call, even a team of one: libgomp sets up the team and its
// closing barrier makes a futex call. That is what 16-32k additions take, and an MLP's
// micro-batch of 32 rows makes a dozen such loops smaller than that. Measured in
// docs/BENCHMARKS.md ("OpenMP teams on small loops").
constexpr long kParallelGrain = 32768;

// body(begin, end) over [0, n), as `#pragma omp parallel for schedule(static)` splits it: one
// contiguous range per thread, in order. The whole range goes to the caller when n * cost (cost:
// the work of one item) is below kParallelGrain, when one thread is set, or inside a parallel
// region already. Every body here writes each item's results alone, so the split never changes
// a result. Keep a body's loops in a function of its own that the lambda calls: GCC 12 left
// `#pragma omp simd` written inside a lambda unvectorised (seen in objdump: ReLU's backward a
// branchy scalar loop, 20% of an MLP step in perf).
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
