// AdamW and SGD-with-momentum updates on device buffers, the CUDA twins of adamw_update and
// sgd_momentum_update (optim.h / optim.cpp): the bias corrections are computed on the host with
// the CPU's own expressions, so both sides start from the same scalars.
// Not for: the learning-rate schedule, clipping or the norm (host-side or later work).
#include "dptrain/cuda_backend.h"

#include "check.h"

#include <cmath>

namespace dptrain::cuda {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1,
                             float beta2, float eps, float decay, float inv_c1, float inv_c2) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float gi = g[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = decay * p[i] - lr * (mi * inv_c1) / (sqrtf(vi * inv_c2) + eps);
    }
}

__global__ void sgd_momentum_kernel(float* p, const float* g, float* buf, size_t n, float lr, float momentum,
                                    float wd) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float b = momentum * buf[i] + g[i] + wd * p[i];
        buf[i] = b;
        p[i] -= lr * b;
    }
}

void adamw_update(float* p, const float* g, float* m, float* v, size_t n, float lr, float beta1, float beta2,
                  float eps, float wd, long t, cudaStream_t stream) {
    if (n == 0) return;
    const float inv_c1 = 1.0f / (1.0f - std::pow(beta1, (float)t));
    const float inv_c2 = 1.0f / (1.0f - std::pow(beta2, (float)t));
    const float decay = 1.0f - lr * wd;
    adamw_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(p, g, m, v, n, lr, beta1, beta2, eps, decay, inv_c1,
                                                            inv_c2);
    CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_update(float* p, const float* g, float* buf, size_t n, float lr, float momentum, float wd,
                         cudaStream_t stream) {
    if (n == 0) return;
    sgd_momentum_kernel<<<grid_for((long)n, 256), 256, 0, stream>>>(p, g, buf, n, lr, momentum, wd);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
