// The fatal path without MPI: fatal() prints its one line and ends the process with its code, and
// with a job abort installed (what comm installs when MPI starts) calls it to end every rank; and
// the step's control, summed over ranks as reduce() sums it, reads back as "on any rank".
#include "dptrain/backend/gradient_path.h"
#include "dptrain/core/error.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

using namespace dptrain;

namespace {

// The exit status of a child that runs fn (which must not return).
template <class Fn>
int exit_of(Fn&& fn) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        fn();
        std::_Exit(99);  // fn returned: not what is tested
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
}

} // namespace

TEST_CASE("fatal: exits with its code, or through the job abort once one is installed", "[fatal]") {
    CHECK(exit_of([] { fatal("alone", 3); }) == 3);
    CHECK(exit_of([] { abort_job(5); }) == 5);
    // The job abort ends the process itself, as MPI_Abort does: its code, not fatal's, comes out.
    CHECK(exit_of([] {
              set_job_abort([](int code) { std::_Exit(40 + code); });
              fatal("with MPI up", 2);
          }) == 42);
    // Removed (MPI ending): back to this process alone.
    CHECK(exit_of([] {
              set_job_abort([](int code) { std::_Exit(40 + code); });
              set_job_abort(nullptr);
              fatal("after MPI", 2);
          }) == 2);
}

TEST_CASE("StepControl: each flag reads back as any rank's after the sum", "[step]") {
    auto summed = [](std::initializer_list<StepControl> ranks) {
        float sum[kControlFloats] = {}, one[kControlFloats];
        for (const StepControl& c : ranks) {
            pack(c, one);
            for (size_t i = 0; i < kControlFloats; ++i) sum[i] += one[i];
        }
        return unpack(sum);
    };
    const StepControl none = summed({{}, {}, {}});
    CHECK(!none.stop);
    CHECK(!none.nonfinite);
    CHECK(!none.preempted);
    CHECK(!none.left_out);
    StepControl stop;
    stop.stop = stop.preempted = stop.left_out = true;
    StepControl nan;
    nan.nonfinite = true;
    const StepControl any = summed({{}, stop, nan, {}});
    CHECK(any.stop);
    CHECK(any.preempted);
    CHECK(any.left_out);
    CHECK(any.nonfinite);
    const StepControl only_nan = summed({nan, {}});
    CHECK(only_nan.nonfinite);
    CHECK(!only_nan.stop);
}
