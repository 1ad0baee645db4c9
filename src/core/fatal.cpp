// The fatal path of an MPI job: one line naming the cause, rank and host, then MPI_Abort so that
// no other rank waits forever in a collective (DESIGN.md invariant 3).
#include "dptrain/core/check.h"
#include "dptrain/core/error.h"

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dptrain {

[[noreturn]] void abort_job(int code) {
    std::thread([code] {
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
}

[[noreturn]] void fatal(const std::string& what, int code) {
    std::fprintf(stderr, "dptrain: error: %s (%s)\n", what.c_str(), process_identity().c_str());
    std::fflush(stderr);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down) abort_job(code);
    std::_Exit(code);
}

std::string mpi_error_text(int rc) {
    char text[MPI_MAX_ERROR_STRING] = {};
    int n = 0;
    if (MPI_Error_string(rc, text, &n) != MPI_SUCCESS) return std::to_string(rc);
    return strfmt("%d (%s)", rc, text);
}

} // namespace dptrain
