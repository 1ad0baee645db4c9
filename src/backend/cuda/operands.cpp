// operands.h's helpers that are not templates: device allocation with the user's message, and the
// flash kernels' shared-memory check. Not for: the classes (their own files, or inline there).
#include "operands.h"

#include "dptrain/core/error.h"

#include <algorithm>

namespace dptrain::cuda {

float* alloc_floats(size_t n, const std::string& what, std::vector<void*>& into) {
    void* p = nullptr;
    cudaError_t rc = cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(float));
    if (rc == cudaErrorMemoryAllocation) {
        cudaGetLastError();  // clear it: the user's to fix, not a broken device
        throw UserError(what + ", but an allocation of " + strfmt("%.2f GiB", 4.0 * (double)n / 1073741824.0) +
                        " failed (fragmented, or shared with another process?); lower --batch-size");
    }
    CUDA_CHECK(rc);
    into.push_back(p);
    return static_cast<float*>(p);
}

void require_flash_fits(int C, int NH, int device) {
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t want = flash_attention_shared_bytes(C, NH);
    if ((size_t)optin < want)
        throw UserError(strfmt("--attention flash at head size %d needs %zu bytes of shared memory per block, and GPU "
                               "%d allows %d; use --attention matmul or a smaller head size (more --n-head)",
                               C / NH, want, device, optin));
}

} // namespace dptrain::cuda
