// The one shape of every library call's check (STYLE.md, Errors): MPI_CHECK, CUDA_CHECK,
// CUBLAS_CHECK and NCCL_CHECK each run the call once, and on failure print the library's own
// status text, the statement, file:line, rank and host, and end every rank (fatal). A macro
// expands only where it is used, so this header needs none of the libraries' headers.
// Not for: problems a user can fix (UserError), or preconditions on arguments.
#pragma once

#include "dptrain/core/error.h"

#include <string>

namespace dptrain {

// "LIB error STATUS in CALL at FILE:LINE", then fatal(). Never returns.
[[noreturn]] void check_failed(const char* lib, const std::string& status, const char* call, const char* file,
                               int line);
// MPI's text for an error code (MPI_Error_string), with the code.
std::string mpi_error_text(int rc);

} // namespace dptrain

// DPTRAIN_CHECK(LIB, TYPE, OK, STATUS, call): `call` once into `dptrain_rc_` of TYPE; OK and
// STATUS are expressions of dptrain_rc_.
#define DPTRAIN_CHECK(LIB, TYPE, OK, STATUS, call)                                          \
    do {                                                                                   \
        TYPE dptrain_rc_ = (call);                                                         \
        if (!(OK)) ::dptrain::check_failed(LIB, STATUS, #call, __FILE__, __LINE__);        \
    } while (0)

// MPI errors are fatal; main() sets MPI_ERRORS_RETURN on the communicators so that they reach
// this check with their context instead of MPI's default abort.
#define MPI_CHECK(call) DPTRAIN_CHECK("MPI", int, dptrain_rc_ == 0, ::dptrain::mpi_error_text(dptrain_rc_), call)
#define CUDA_CHECK(call) \
    DPTRAIN_CHECK("CUDA", cudaError_t, dptrain_rc_ == cudaSuccess, cudaGetErrorString(dptrain_rc_), call)
#define CUBLAS_CHECK(call)                                                                       \
    DPTRAIN_CHECK("cuBLAS", cublasStatus_t, dptrain_rc_ == CUBLAS_STATUS_SUCCESS,                \
                  cublasGetStatusString(dptrain_rc_), call)
#define NCCL_CHECK(call) \
    DPTRAIN_CHECK("NCCL", ncclResult_t, dptrain_rc_ == ncclSuccess, ncclGetErrorString(dptrain_rc_), call)
