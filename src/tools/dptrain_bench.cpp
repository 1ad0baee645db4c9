// dptrain-bench allreduce: the gradient all-reduce through dptrain's Communicator beside the MPI
// library's own MPI_Allreduce, in the nccl-tests table format (algbw = bytes / time; busbw =
// algbw * 2 (n-1) / n, the per-link traffic of an optimal all-reduce).
//   mpirun -np N dptrain-bench allreduce [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP]
// Buffers are allocated and touched once; every timed call reuses them.
#include "dptrain/comm.h"
#include "dptrain/error.h"
#include "dptrain/metrics.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace dptrain;

static size_t parse_size(const char* s) {
    char* end = nullptr;
    double v = std::strtod(s, &end);
    switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

// Median seconds per call of fn over iters calls (after warmup), max over ranks.
template <typename Fn>
static double time_calls(Fn&& fn, int warmup, int iters) {
    for (int i = 0; i < warmup; ++i) fn();
    std::vector<double> t(iters);
    for (int i = 0; i < iters; ++i) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now_seconds();
        fn();
        t[i] = now_seconds() - t0;
    }
    std::sort(t.begin(), t.end());
    double med = t[iters / 2];
    MPI_Allreduce(MPI_IN_PLACE, &med, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return med;
}

int main(int argc, char** argv) {
    MPI_Init(&argc, &argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t minb = 1 << 10, maxb = 64 << 20;
    double factor = 4;
    int iters = 20, warmup = 3;
    bool ok = argc > 1 && std::strcmp(argv[1], "allreduce") == 0;
    for (int i = 2; ok && i < argc; i += 2) {
        if (i + 1 >= argc) ok = false;
        else if (!std::strcmp(argv[i], "-b")) minb = parse_size(argv[i + 1]);
        else if (!std::strcmp(argv[i], "-e")) maxb = parse_size(argv[i + 1]);
        else if (!std::strcmp(argv[i], "-f")) factor = std::atof(argv[i + 1]);
        else if (!std::strcmp(argv[i], "-n")) iters = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "-w")) warmup = std::atoi(argv[i + 1]);
        else ok = false;
    }
    if (!ok || minb < 4 || maxb < minb || factor <= 1 || iters < 1 || warmup < 0) {
        if (rank == 0)
            std::fprintf(stderr, "usage: mpirun -np N dptrain-bench allreduce [-b 1K] [-e 64M] [-f 4] [-n 20] [-w 3]\n");
        MPI_Finalize();
        return 2;
    }
    MpiCommunicator comm(MPI_COMM_WORLD);
    size_t maxn = maxb / sizeof(float);
    std::vector<float> buf(maxn, 1.0f), peer(maxn, 1.0f);
    if (rank == 0) {
        std::printf("# dptrain-bench allreduce: %d ranks, float32 sum, median of %d iterations after %d warm-up\n", size,
                    iters, warmup);
        std::printf("# %12s %12s | %10s %8s %8s | %10s %8s %8s | %6s\n", "size(B)", "count", "dptrain(us)", "algbw",
                    "busbw", "MPI(us)", "algbw", "busbw", "ratio");
    }
    int errors = 0;
    for (size_t bytes = minb; bytes <= maxb; bytes = (size_t)(bytes * factor)) {
        size_t n = bytes / sizeof(float);
        // Small integers: every sum is exact, so the result can be checked whatever the order.
        for (size_t i = 0; i < n; ++i) buf[i] = (float)((rank + i) % 7);
        comm.allreduce_sum(buf.data(), n);
        for (size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int r = 0; r < size; ++r) want += (float)((r + i) % 7);
            if (buf[i] != want) ++errors;
        }
        double t_ours = time_calls([&] { comm.allreduce_sum(buf.data(), n); }, warmup, iters);
        double t_mpi = time_calls(
            [&] { MPI_Allreduce(MPI_IN_PLACE, peer.data(), (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }, warmup, iters);
        double bus = size > 1 ? 2.0 * (size - 1) / size : 1.0;
        double a1 = bytes / t_ours / 1e9, a2 = bytes / t_mpi / 1e9;
        if (rank == 0)
            std::printf("  %12zu %12zu | %10.1f %8.2f %8.2f | %10.1f %8.2f %8.2f | %6.2f\n", bytes, n, t_ours * 1e6, a1,
                        a1 * bus, t_mpi * 1e6, a2, a2 * bus, t_mpi / t_ours);
    }
    MPI_Allreduce(MPI_IN_PLACE, &errors, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) std::printf("# wrong results: %d%s\n", errors, errors ? "  <-- FAILED" : "");
    MPI_Finalize();
    return errors ? 1 : 0;
}
