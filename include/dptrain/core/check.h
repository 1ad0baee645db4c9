// *_CHECK for library calls (STYLE.md, Errors): on failure the status text, statement, file:line,
// rank and host, then fatal. Macros, so this header needs no library's header.
// Not for: problems a user can fix (UserError), or preconditions on arguments.
#pragma once

#include "dptrain/core/error.h"

#include <string>

namespace dptrain {

[[noreturn]] void check_failed(const char* lib, const std::string& status, const char* call, const char* file,
                               int line);
// Defined by comm, the one layer that calls MPI.
std::string mpi_error_text(int rc);

} // namespace dptrain

// OK and STATUS are expressions of dptrain_rc_.
#define DPTRAIN_CHECK(LIB, TYPE, OK, STATUS, call)                                          \
    do {                                                                                   \
        TYPE dptrain_rc_ = (call);                                                         \
        if (!(OK)) ::dptrain::check_failed(LIB, STATUS, #call, __FILE__, __LINE__);        \
    } while (0)

// MPI_ERRORS_RETURN is set so errors reach here with context, not MPI's default abort.
#define MPI_CHECK(call) DPTRAIN_CHECK("MPI", int, dptrain_rc_ == 0, ::dptrain::mpi_error_text(dptrain_rc_), call)
#define CUDA_CHECK(call) \
    DPTRAIN_CHECK("CUDA", cudaError_t, dptrain_rc_ == cudaSuccess, cudaGetErrorString(dptrain_rc_), call)
#define CUBLAS_CHECK(call)                                                                       \
    DPTRAIN_CHECK("cuBLAS", cublasStatus_t, dptrain_rc_ == CUBLAS_STATUS_SUCCESS,                \
                  cublasGetStatusString(dptrain_rc_), call)
#define NCCL_CHECK(call) \
    DPTRAIN_CHECK("NCCL", ncclResult_t, dptrain_rc_ == ncclSuccess, ncclGetErrorString(dptrain_rc_), call)
