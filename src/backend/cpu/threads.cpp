// Thread count of the CPU backend: one setting for OpenBLAS and OpenMP alike, so that ranks
// sharing a node do not oversubscribe its cores.
#include "dptrain/backend/cpu/ops.h"

#include "dptrain/core/error.h"
#include "dptrain/core/memory.h"

#include <cblas.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace dptrain::cpu {

static void flush_denormals() {
#if defined(__x86_64__) || defined(__i386__)
    constexpr unsigned kFlushZero = 0x8000, kDenormalsZero = 0x0040;
    _mm_setcsr(_mm_getcsr() | kFlushZero | kDenormalsZero);
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (1ull << 24)));  // FZ
#endif
}

void set_threads(int n) {
    if (n < 1) n = 1;
    openblas_set_num_threads(n);
    omp_set_num_threads(n);
    // Flush denormals in every compute thread: moments of zero-gradient parameters decay into
    // them, ~100 cycles an operation. Why: docs/GPU.md, "Note [CPU twin choices]".
    flush_denormals();
#pragma omp parallel
    flush_denormals();
}

static int affinity_cores(bool* bound) {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    cpu_set_t set;
    int n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : (int)online;
    if (bound) *bound = n < online;
    return n > 0 ? n : 1;
}

// A cgroup's CPU quota (a pod's CPU limit) caps the cores whatever the affinity shows: more
// threads than the quota are throttled every period.
int usable_cores(bool* bound) {
    const int n = affinity_cores(bound);
    const double quota = cgroup_cpu_limit(nullptr);
    return quota > 0 && quota < n ? std::max(1, (int)quota) : n;
}

int get_threads() { return omp_get_max_threads(); }

std::string thread_note(int want) {
    std::string note;
    const int cores = usable_cores(nullptr), blas = openblas_get_num_threads();
    std::string file;
    const double quota = cgroup_cpu_limit(&file);
    const std::string why = cores < affinity_cores(nullptr) ? strfmt(" (a CPU quota of %.2f, %s)", quota, file.c_str()) : "";
    if (want > cores)
        note = std::to_string(want) + " compute threads on the " + std::to_string(cores) +
               (cores == 1 ? " core" : " cores") + " this rank may use" + why + ": they take turns (fewer is faster)";
    if (blas < want)
        note += (note.empty() ? "" : "; ") + std::string("OpenBLAS runs at most ") + std::to_string(blas) +
                " threads (its build's limit): the matmuls use " + std::to_string(blas);
    return note;
}

} // namespace dptrain::cpu
