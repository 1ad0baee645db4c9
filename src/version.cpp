// Build features for the banner: what was compiled in, and what the runtime libraries report.
#include "dptrain/version.h"

#include "dptrain/error.h"

#include <cblas.h>

#ifdef DPTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace dptrain {

std::string build_features() {
    std::string why;
    int devices = cuda_device_count(&why);
    std::string cuda = devices < 0 ? "CUDA ✗" : devices == 0 ? "CUDA ✓ (no GPU: " + why + ")" : strfmt("CUDA ✓ (%d devices)", devices);
#ifdef DPTRAIN_HAVE_NCCL
    const char* nccl = "NCCL ✓";
#else
    const char* nccl = "NCCL ✗";
#endif
    std::string blas = openblas_get_config();
    return strfmt("%s | %s | %s | OpenMP", cuda.c_str(), nccl, blas.c_str());
}

int cuda_device_count(std::string* why) {
#ifdef DPTRAIN_HAVE_CUDA
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        if (why) *why = cudaGetErrorString(e);
        return 0;
    }
    if (n == 0 && why) *why = "no CUDA devices visible";
    return n;
#else
    if (why) *why = "built without CUDA";
    return -1;
#endif
}

} // namespace dptrain
