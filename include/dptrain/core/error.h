// Errors, STYLE.md's two tiers: UserError (one line naming the thing and the fix) and fatal
// library failures (check.h's *_CHECK). Not for: what a check checks.
#pragma once

#include <stdexcept>
#include <string>

namespace dptrain {

// what() is the whole message: no prefix, no trailing newline.
class UserError : public std::runtime_error {
  public:
    explicit UserError(const std::string& msg) : std::runtime_error(msg) {}
};

// Set-up cut short by a stop signal: not a failure; the run ends with exit 75.
class StopRequested : public UserError {
  public:
    using UserError::UserError;
};

std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// For error lines, e.g. "rank 3 on ip-10-0-1-7"; set once after MPI_Init.
void set_process_identity(int rank, const std::string& host);
std::string process_identity();

// MPI_Abort while MPI runs; none: the process alone exits.
using JobAbort = void (*)(int code);
void set_job_abort(JobAbort abort);
// The JobAbort, then _Exit after 10 s: a launcher that lost a node may never deliver the kill.
[[noreturn]] void abort_job(int code);
[[noreturn]] void fatal(const std::string& what, int code = 1);  // prints the error line, abort_job

} // namespace dptrain
