// RMSNorm forward/backward, the CUDA twin of src/backend/cpu/rmsnorm.cpp: a warp per row (as
// layernorm.cu), the weight gradient as a fixed-order column sum. Not for: C much larger than ~8k.
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "column_sums.cuh"

namespace dptrain::cuda {

constexpr int kRmsRowsPerBlock = 8;  // warps per block, one row each

// With add (else null) the row is inp + add, stored to res first; each lane reads back only its
// own stores, so no sync is needed.
__global__ void rmsnorm_forward_kernel(float* out, float* rstd, float* res, const float* inp, const float* add,
                                       const float* weight, long N, int C, float eps) {
    const long row = (long)blockIdx.x * kRmsRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;  // whole warps leave: the shuffles below stay full-warp
    const float* x = inp + row * C;
    if (add) {
        float* r = res + row * C;
        const float* y = add + row * C;
        for (int c = lane; c < C; c += 32) r[c] = x[c] + y[c];
        x = r;
    }
    float ss = 0.0f;
    for (int c = lane; c < C; c += 32) ss += x[c] * x[c];
    const float s = 1.0f / sqrtf(warp_sum(ss) / C + eps);
    float* o = out + row * C;
    for (int c = lane; c < C; c += 32) o[c] = x[c] * s * weight[c];
    if (lane == 0) rstd[row] = s;
}

// dx += s * (dy * w - x * s^2 * mean(dy * w * x)).
__global__ void rmsnorm_backward_input_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                              const float* rstd, long N, int C) {
    const long row = (long)blockIdx.x * kRmsRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const float *dy = dout + row * C, *x = inp + row * C;
    const float s = rstd[row];
    float gx = 0.0f;
    for (int c = lane; c < C; c += 32) gx += dy[c] * weight[c] * x[c];
    const float k = warp_sum(gx) / C * s * s;
    float* dx = dinp + row * C;
    for (int c = lane; c < C; c += 32) dx[c] += s * (dy[c] * weight[c] - x[c] * k);
}

// dweight[c] += sum_i x[i][c] * rstd[i] * dout[i][c].
struct RmsNormWeightTerms {
    const float *dout, *inp, *rstd;
    int C;
    __device__ void operator()(long row, int c, float* acc) const {
        acc[0] += inp[row * C + c] * rstd[row] * dout[row * C + c];
    }
};

static void rmsnorm_forward_launch(float* out, float* rstd, float* res, const float* inp, const float* add,
                                   const float* weight, long N, int C, float eps, cudaStream_t stream) {
    if (N <= 0) return;
    const unsigned blocks = (unsigned)((N + kRmsRowsPerBlock - 1) / kRmsRowsPerBlock);
    rmsnorm_forward_kernel<<<blocks, kRmsRowsPerBlock * 32, 0, stream>>>(out, rstd, res, inp, add, weight, N, C, eps);
    CUDA_CHECK(cudaGetLastError());
}

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, long N, int C, float eps,
                     cudaStream_t stream) {
    rmsnorm_forward_launch(out, rstd, nullptr, inp, nullptr, weight, N, C, eps, stream);
}

void residual_rmsnorm_forward(float* res, float* out, float* rstd, const float* a, const float* b,
                              const float* weight, long N, int C, float eps, cudaStream_t stream) {
    CUDA_REQUIRE(res != nullptr && b != nullptr);
    rmsnorm_forward_launch(out, rstd, res, a, b, weight, N, C, eps, stream);
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, long N, int C, Context& ctx, cudaStream_t stream, bool accumulate) {
    RmsNormWeightTerms terms{dout, inp, rstd, C};
    if (N > 0) {
        const unsigned blocks = (unsigned)((N + kRmsRowsPerBlock - 1) / kRmsRowsPerBlock);
        rmsnorm_backward_input_kernel<<<blocks, kRmsRowsPerBlock * 32, 0, stream>>>(dinp, dout, inp, weight, rstd, N,
                                                                                    C);
        CUDA_CHECK(cudaGetLastError());
    }
    column_sums<1>(dweight, nullptr, terms, N, C, ctx, stream, accumulate);
}

} // namespace dptrain::cuda
