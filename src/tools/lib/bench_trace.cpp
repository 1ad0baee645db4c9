// dptrain-bench trace: what the step instrumentation costs per step (trace marks, phase times,
// clock reads) for given phases and buckets, and its share of a --step-ms step.
// Not for: timing a real run (docs/BENCHMARKS.md, "Instrumentation overhead").
#include "dptrain/tools/bench.h"

#include "dptrain/comm/communicator.h"
#include "dptrain/core/clock.h"
#include "dptrain/io/metrics.h"
#include "dptrain/core/trace.h"
#include "dptrain/tools/cli.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

namespace dptrain {

int bench_trace(int argc, char** argv) {
    const int rank = MpiCommunicator(MPI_COMM_WORLD).rank();
    long events = 2000000;
    double step_ms = 0.6;
    int buckets = 1;
    boost::program_options::options_description desc;
    desc.add_options()("events", boost::program_options::value(&events))(
        "step-ms", boost::program_options::value(&step_ms))("buckets", boost::program_options::value(&buckets));
    parse_subcommand(argc, argv, desc);
    if (events < 1 || !(step_ms > 0) || buckets < 0)
        throw boost::program_options::error("--events must be at least 1, --step-ms above 0, --buckets at least 0");
    if (rank != 0) return 0;
    const char* names[6] = {"data", "forward", "backward", "all-reduce", "optimizer", "evaluation"};
    auto best_of = [](int reps, const std::function<double()>& fn) {
        double best = 1e30;
        for (int r = 0; r < reps; ++r) best = std::min(best, fn());
        return best;
    };
    double clock_ns = best_of(5, [&] {
        double t0 = now_seconds(), sink = 0;
        for (long i = 0; i < events; ++i) sink += now_seconds();
        double t = now_seconds() - t0;
        if (sink == 0) std::printf(" ");
        return t / events * 1e9;
    });
    double mark_ns = best_of(5, [&] {
        Tracer tr;
        tr.enable((size_t)events + 8);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) tr.mark(names[i % 5], i / 5);
        return (now_seconds() - t0) / events * 1e9;
    });
    double comm_ns = best_of(5, [&] {
        Tracer tr;
        tr.enable((size_t)events + 8);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) tr.comm("allreduce", i, 1.0, 2.0, 4096, "flat");
        return (now_seconds() - t0) / events * 1e9;
    });
    double phase_ns = best_of(5, [&] {
        PhaseTimes pt;
        pt.reserve(1000);
        double t0 = now_seconds();
        for (long i = 0; i < events; ++i) {
            pt.add((int)(i % kStepPhases), 1e-4);
            if (i % kStepPhases == kStepPhases - 1) pt.end_step();
        }
        return (now_seconds() - t0) / events * 1e9;
    });
    // 5 phase marks (a clock read plus the trace event each), one end of step, and per bucket two
    // clock reads and an event on the communication thread.
    double traced_ns = 5 * (mark_ns + clock_ns + phase_ns) + clock_ns + buckets * (comm_ns + 2 * clock_ns);
    double untraced_ns = 5 * (clock_ns + phase_ns) + clock_ns;
    std::printf("# dptrain-bench trace: best of 5 runs of %ld operations each\n", events);
    std::printf("clock read (steady_clock)        %8.1f ns\n", clock_ns);
    std::printf("Tracer::mark (one phase event)   %8.1f ns\n", mark_ns);
    std::printf("Tracer::comm (one bucket event)  %8.1f ns\n", comm_ns);
    std::printf("PhaseTimes::add                  %8.1f ns\n", phase_ns);
    std::printf("per step, breakdown only         %8.2f us = %.3f%% of a %.3g ms step\n", untraced_ns / 1e3,
                100 * untraced_ns / (step_ms * 1e6), step_ms);
    std::printf("per step, with --trace, %d bucket%s %8.2f us = %.3f%% of a %.3g ms step\n", buckets,
                buckets == 1 ? " " : "s", traced_ns / 1e3, 100 * traced_ns / (step_ms * 1e6), step_ms);
    return 0;
}

} // namespace dptrain
