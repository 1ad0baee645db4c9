// Devices for the CUDA backend: how many this process sees (and why none), binding a rank to its
// GPU, and the per-device Context (stream + cuBLAS handle + cuBLAS workspace).
// Not for: kernels (*.cu) or communicators (nccl_comm.cpp).
#include "dptrain/backend/cuda/ops.h"
#include "dptrain/backend/gpu_sizes.h"

#include "check.h"

#include <cublasLt.h>

#include <cstdlib>

namespace dptrain::cuda {

static std::string visible_devices() {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    return v ? v : "";
}

int device_count(std::string* why) {
    int n = 0;
    cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) {
        cudaGetLastError();  // clear it, so that a later unrelated check does not report it
        n = 0;
    }
    if (!why) return n;
    why->clear();
    if (n > 0) return n;
    int driver = 0, runtime = 0;
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    const bool masked = std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
    if (rc == cudaErrorInsufficientDriver && driver == 0)
        *why = strfmt("no NVIDIA driver found (%s)", cudaGetErrorName(rc));
    else if (rc == cudaErrorInsufficientDriver)
        *why = strfmt("the driver supports CUDA %d.%d, older than this build's runtime %d.%d (%s)", driver / 1000,
                      driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, cudaGetErrorName(rc));
    else if (masked)  // with a driver and no device, CUDA_VISIBLE_DEVICES hiding them is the usual cause
        *why = strfmt("no CUDA device visible with CUDA_VISIBLE_DEVICES='%s' (%s)", visible_devices().c_str(),
                      cudaGetErrorName(rc));
    else
        *why = strfmt("the driver reports no CUDA device (%s: %s)", cudaGetErrorName(rc), cudaGetErrorString(rc));
    return 0;
}

std::string device_shortage_message(int local_size, int gpus, const std::string& visible, const std::string& why) {
    std::string msg = strfmt("node has %d rank%s but %d visible GPU%s", local_size, local_size == 1 ? "" : "s", gpus,
                             gpus == 1 ? "" : "s");
    if (!why.empty()) msg += " (" + why + ")";
    if (gpus > 0)
        msg += strfmt("; run %d rank%s per node (mpirun --map-by ppr:%d:node) or expose more GPUs", gpus,
                      gpus == 1 ? "" : "s", gpus);
    else
        msg += "; run on nodes with a GPU, or build with CUDA=0 for the CPU backend";
    if (gpus > 0 && !visible.empty()) msg += " (CUDA_VISIBLE_DEVICES=" + visible + ")";
    return msg;
}

int bind_device(int local_rank, int local_size) {
    if (local_size < 1 || local_rank < 0 || local_rank >= local_size)
        throw UserError(strfmt("local rank %d of %d ranks on this node is not valid (want 0 <= rank < ranks)",
                               local_rank, local_size));
    std::string why;
    int gpus = device_count(&why);
    if (local_size > gpus) throw UserError(device_shortage_message(local_size, gpus, visible_devices(), why));
    CUDA_CHECK(cudaSetDevice(local_rank));
    return local_rank;
}

Context::Context(int device) : device_(device) {
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    cublasHandle_t h = nullptr;
    CUBLAS_CHECK(cublasCreate(&h));
    blas_ = h;
    // Plain fp32 for cublasSgemm: TF32 tensor ops would round inputs to 10 mantissa bits and miss
    // the CPU by ~1e-3. (NVIDIA_TF32_OVERRIDE=1 in the environment would force them anyway.)
    CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
    workspace_bytes_ = gpu_blas_workspace_bytes();  // allocated once: no GEMM allocates behind our back
    CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
    CUBLAS_CHECK(cublasSetStream(h, stream_));
    CUBLAS_CHECK(cublasSetWorkspace(h, workspace_, workspace_bytes_));
    blas_stream_ = stream_;
    cublasLtHandle_t lt = nullptr;
    CUBLAS_CHECK(cublasLtCreate(&lt));
    lt_ = lt;
    lt_plans_ = lt_plans_create();
}

Context::~Context() {
    // No CHECK here: a destructor may run while unwinding from another error.
    cudaSetDevice(device_);
    if (reduction_) cudaFree(reduction_);
    if (lt_plans_) lt_plans_destroy(lt_plans_);
    if (lt_) cublasLtDestroy(lt_);
    if (blas_) cublasDestroy(blas_);
    if (workspace_) cudaFree(workspace_);
    if (stream_) cudaStreamDestroy(stream_);
}

float* Context::reduction_scratch(size_t n) {
    if (n > reduction_n_) {
        CUDA_CHECK(cudaSetDevice(device_));
        CUDA_CHECK(cudaDeviceSynchronize());  // work queued with the old scratch is done with it
        if (reduction_) CUDA_CHECK(cudaFree(reduction_));
        reduction_ = nullptr;
        reduction_n_ = 0;
        CUDA_CHECK(cudaMalloc(&reduction_, n * sizeof(float)));
        reduction_n_ = n;
    }
    return reduction_;
}

void Context::bind_blas(cudaStream_t stream) {
    if (stream == blas_stream_) return;
    CUBLAS_CHECK(cublasSetStream(blas_, stream));  // resets the workspace to cuBLAS's default pool
    if (stream == stream_) CUBLAS_CHECK(cublasSetWorkspace(blas_, workspace_, workspace_bytes_));
    blas_stream_ = stream;
}

PinnedHost::PinnedHost(void* p, size_t bytes) : p_(p) {
    if (!p || bytes == 0) {
        why_ = "nothing to pin";
        return;
    }
    cudaError_t rc = cudaHostRegister(p, bytes, cudaHostRegisterDefault);
    ok_ = rc == cudaSuccess;
    if (!ok_) {
        cudaGetLastError();  // not sticky: clear it so later checks do not report it
        why_ = strfmt("cudaHostRegister of %.1f MiB failed (%s): copies use pageable memory", bytes / 1048576.0,
                      cudaGetErrorString(rc));
    }
}

PinnedHost::~PinnedHost() {
    if (ok_) cudaHostUnregister(p_);
}

} // namespace dptrain::cuda
