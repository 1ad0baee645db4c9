// Errors: the two tiers of STYLE.md. UserError is for problems a user can fix (an option, a
// file, a dataset); it carries one line that names the thing and the fix. Library failures
// (MPI, HDF5, CUDA, NCCL) are fatal at once through the *_CHECK macros of check.h, which name
// the statement, file:line, rank and host.
#pragma once

#include <stdexcept>
#include <string>

namespace dptrain {

// A problem the user can fix. what() is the whole message: no prefix, no trailing newline.
class UserError : public std::runtime_error {
  public:
    explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// Set-up work cut short by a stop signal (SIGTERM, SIGUSR1): not a failure. what() says where it
// stopped; the run then ends with exit 75 and the stop's own line.
class StopRequested : public UserError {
  public:
    using UserError::UserError;
};

// printf-style std::string.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// Identity of this process for error lines: set once after MPI_Init ("rank 3 on ip-10-0-1-7").
void set_process_identity(int rank, const std::string& host);
std::string process_identity();

// Print "dptrain: error: WHAT (rank R on HOST)" and end every rank of the job (MPI_Abort when
// MPI is up, exit otherwise). Never returns.
// Ends the job from this rank: MPI_Abort, and if that has not ended this process within 10 s
// (a launcher that cannot reach a lost node may never deliver the kill), _Exit(code).
[[noreturn]] void abort_job(int code);
[[noreturn]] void fatal(const std::string& what, int code = 1);

} // namespace dptrain
