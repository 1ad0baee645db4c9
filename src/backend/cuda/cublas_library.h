// Private to src/backend/cuda: cuBLAS and cuBLASLt opened with dlopen by the first cuda::Context, so
// other processes skip libcublasLt's static initialisers (docs/GPU.md, "What exists"); each name used
// is a macro onto the loaded table, one not listed fails to link. Not for: code outside the backend.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <type_traits>

// The exported names (after cublas_v2.h's _v2 renaming) of every function the backend calls.
#define DPTRAIN_CUBLAS_FUNCTIONS(X)                                                                 \
    X(cublasCreate_v2) X(cublasDestroy_v2) X(cublasSetStream_v2) X(cublasSetWorkspace_v2)           \
    X(cublasSetMathMode) X(cublasGetStatusString) X(cublasSgemm_v2) X(cublasSgemmStridedBatched)
// C++ overloads in cublas_api.h (a cudaDataType compute type), so their C types are written out.
#define DPTRAIN_CUBLAS_OVERLOADED(X) X(cublasGemmEx) X(cublasGemmStridedBatchedEx)
#define DPTRAIN_CUBLASLT_FUNCTIONS(X)                                                               \
    X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulDescCreate)              \
    X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)    \
    X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulPreferenceCreate)                                \
    X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                      \
    X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmulAlgoCheck)

namespace dptrain::cuda {

using cublasGemmEx_t = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType, int lda, const void* B,
                                          cudaDataType, int ldb, const void* beta, void* C, cudaDataType, int ldc,
                                          cublasComputeType_t, cublasGemmAlgo_t);
using cublasGemmStridedBatchedEx_t =
    cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int m, int n, int k, const void* alpha,
                       const void* A, cudaDataType, int lda, long long strideA, const void* B, cudaDataType, int ldb,
                       long long strideB, const void* beta, void* C, cudaDataType, int ldc, long long strideC,
                       int batchCount, cublasComputeType_t, cublasGemmAlgo_t);

// One pointer per function, typed from the library's own declaration.
struct CublasApi {
#define DPTRAIN_CUBLAS_POINTER(f) decltype(&::f) f = nullptr;
#define DPTRAIN_CUBLAS_TYPED_POINTER(f) f##_t f = nullptr;
    DPTRAIN_CUBLAS_FUNCTIONS(DPTRAIN_CUBLAS_POINTER)
    DPTRAIN_CUBLAS_OVERLOADED(DPTRAIN_CUBLAS_TYPED_POINTER)
    DPTRAIN_CUBLASLT_FUNCTIONS(DPTRAIN_CUBLAS_POINTER)
#undef DPTRAIN_CUBLAS_POINTER
#undef DPTRAIN_CUBLAS_TYPED_POINTER
};
// The written-out types are the exported ones: the unevaluated casts pick exactly that overload.
static_assert(std::is_same_v<decltype(static_cast<cublasGemmEx_t>(&::cublasGemmEx)), cublasGemmEx_t>);
static_assert(std::is_same_v<decltype(static_cast<cublasGemmStridedBatchedEx_t>(&::cublasGemmStridedBatchedEx)),
                             cublasGemmStridedBatchedEx_t>);

// Loaded on first call (thread-safe, once); a missing library or function ends the job with one
// line naming it and the fix.
const CublasApi& cublas_api();

} // namespace dptrain::cuda

// cublas_library.cpp resolves the names themselves, so it leaves them unmapped.
#ifndef DPTRAIN_CUBLAS_LOADER
#define cublasCreate_v2 ::dptrain::cuda::cublas_api().cublasCreate_v2
#define cublasDestroy_v2 ::dptrain::cuda::cublas_api().cublasDestroy_v2
#define cublasSetStream_v2 ::dptrain::cuda::cublas_api().cublasSetStream_v2
#define cublasSetWorkspace_v2 ::dptrain::cuda::cublas_api().cublasSetWorkspace_v2
#define cublasSetMathMode ::dptrain::cuda::cublas_api().cublasSetMathMode
#define cublasGetStatusString ::dptrain::cuda::cublas_api().cublasGetStatusString
#define cublasSgemm_v2 ::dptrain::cuda::cublas_api().cublasSgemm_v2
#define cublasGemmEx ::dptrain::cuda::cublas_api().cublasGemmEx
#define cublasSgemmStridedBatched ::dptrain::cuda::cublas_api().cublasSgemmStridedBatched
#define cublasGemmStridedBatchedEx ::dptrain::cuda::cublas_api().cublasGemmStridedBatchedEx
#define cublasLtCreate ::dptrain::cuda::cublas_api().cublasLtCreate
#define cublasLtDestroy ::dptrain::cuda::cublas_api().cublasLtDestroy
#define cublasLtMatmul ::dptrain::cuda::cublas_api().cublasLtMatmul
#define cublasLtMatmulDescCreate ::dptrain::cuda::cublas_api().cublasLtMatmulDescCreate
#define cublasLtMatmulDescDestroy ::dptrain::cuda::cublas_api().cublasLtMatmulDescDestroy
#define cublasLtMatmulDescSetAttribute ::dptrain::cuda::cublas_api().cublasLtMatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate ::dptrain::cuda::cublas_api().cublasLtMatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy ::dptrain::cuda::cublas_api().cublasLtMatrixLayoutDestroy
#define cublasLtMatmulPreferenceCreate ::dptrain::cuda::cublas_api().cublasLtMatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy ::dptrain::cuda::cublas_api().cublasLtMatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute ::dptrain::cuda::cublas_api().cublasLtMatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic ::dptrain::cuda::cublas_api().cublasLtMatmulAlgoGetHeuristic
#define cublasLtMatmulAlgoCheck ::dptrain::cuda::cublas_api().cublasLtMatmulAlgoCheck
#endif
