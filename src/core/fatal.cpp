// The fatal path: one line, then the whole job ends, so no rank waits forever in a collective
// (docs/ARCHITECTURE.md, "Errors and no hangs"). Not for: how (comm's set_job_abort; core knows no MPI).
#include "dptrain/core/error.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dptrain {

namespace {
std::atomic<JobAbort> job_abort{nullptr};
}

void set_job_abort(JobAbort abort) { job_abort.store(abort); }

[[noreturn]] void abort_job(int code) {
    std::thread([code] {
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(code);
    }).detach();
    if (JobAbort a = job_abort.load()) a(code);
    std::_Exit(code);
}

[[noreturn]] void fatal(const std::string& what, int code) {
    std::fprintf(stderr, "dptrain: error: %s (%s)\n", what.c_str(), process_identity().c_str());
    std::fflush(stderr);
    if (job_abort.load()) abort_job(code);
    std::_Exit(code);
}

} // namespace dptrain
