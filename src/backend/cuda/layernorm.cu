// LayerNorm forward/backward, the CUDA twin of src/backend/cpu/layernorm.cpp: a warp per row (llm.c's
// layout), weight/bias gradients as fixed-order column sums; bf16 forms and the fused residual add
// give the plain forms' bits. Not for: C much larger than ~8k (a block per row would be better).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"
#include "column_sums.cuh"

namespace dptrain::cuda {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each
constexpr float kEps = 1e-5f;     // as the CPU

// Out: float, or uint16_t (bf16, rounded as stored). With add (else null) the row is inp + add,
// stored to res first; each lane reads back only its own stores, so no sync is needed.
template <class Out>
__global__ void layernorm_forward_kernel(Out* out, float* mean, float* rstd, float* res, const float* inp,
                                         const float* add, const float* weight, const float* bias, long N, int C) {
    const long row = (long)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;  // whole warps leave: the shuffles below stay full-warp
    const float* x = inp + row * C;
    float s = 0.0f;
    if (add) {
        float* out_res = res + row * C;
        const float* y = add + row * C;
        for (int c = lane; c < C; c += 32) {
            const float sum = x[c] + y[c];
            out_res[c] = sum;
            s += sum;
        }
        x = out_res;  // not __restrict__ anywhere: these reads must see the stores above
    } else {
        for (int c = lane; c < C; c += 32) s += x[c];
    }
    const float m = warp_sum(s) / C;
    // Two passes over the row (as the CPU), not E[x^2] - m^2, which cancels badly for large means.
    float v = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float d = x[c] - m;
        v += d * d;
    }
    const float r = 1.0f / sqrtf(warp_sum(v) / C + kEps);
    Out* o = out + row * C;
    for (int c = lane; c < C; c += 32) store_out(&o[c], (x[c] - m) * r * weight[c] + bias[c]);
    if (lane == 0) {
        mean[row] = m;
        rstd[row] = r;
    }
}

// dx += rstd * (dnorm - mean(dnorm) - norm * mean(dnorm * norm)), dnorm = dy * weight; with dinp16
// (else null) dx's new value also rounded there. Dy: float, or uint16_t (bf16).
template <class Dy>
__global__ void layernorm_backward_input_kernel(float* dinp, uint16_t* dinp16, const Dy* dout, const float* inp,
                                                const float* weight, const float* mean, const float* rstd, long N,
                                                int C) {
    const long row = (long)blockIdx.x * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= N) return;
    const Dy* dy = dout + row * C;
    const float* x = inp + row * C;
    const float m = mean[row], s = rstd[row];
    float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * as_float(dy[c]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean = warp_sum(dnorm_mean) / C;
    dnorm_norm_mean = warp_sum(dnorm_norm_mean) / C;
    float* dx = dinp + row * C;
    uint16_t* dx16 = dinp16 ? dinp16 + row * C : nullptr;
    for (int c = lane; c < C; c += 32) {
        float norm = (x[c] - m) * s;
        float dnorm = weight[c] * as_float(dy[c]);
        const float v = dx[c] + s * (dnorm - dnorm_mean - norm * dnorm_norm_mean);
        dx[c] = v;
        if (dx16) dx16[c] = bf16_bits(v);
    }
}

// dweight[c] += sum_i norm[i][c] * dout[i][c], dbias[c] += sum_i dout[i][c].
template <class Dy> struct LayerNormParamTerms {
    const Dy* dout;
    const float *inp, *mean, *rstd;
    int C;
    __device__ void operator()(long row, int c, float* acc) const {
        float d = as_float(dout[row * C + c]);
        float norm = (inp[row * C + c] - mean[row]) * rstd[row];
        acc[0] += norm * d;
        acc[1] += d;
    }
};

template <class Out>
static void layernorm_forward_launch(Out* out, float* mean, float* rstd, float* res, const float* inp,
                                     const float* add, const float* weight, const float* bias, long N, int C,
                                     cudaStream_t stream) {
    if (N <= 0) return;
    unsigned blocks = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
    layernorm_forward_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(out, mean, rstd, res, inp, add, weight, bias,
                                                                        N, C);
    CUDA_CHECK(cudaGetLastError());
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       long N, int C, cudaStream_t stream) {
    layernorm_forward_launch(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, stream);
}

void layernorm_forward_bf16(bf16* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, long N, int C, cudaStream_t stream) {
    layernorm_forward_launch(out, mean, rstd, nullptr, inp, nullptr, weight, bias, N, C, stream);
}

void residual_layernorm_forward(float* res, float* out, float* mean, float* rstd, const float* a, const float* b,
                                const float* weight, const float* bias, long N, int C, cudaStream_t stream) {
    CUDA_REQUIRE(res != nullptr && b != nullptr);
    layernorm_forward_launch(out, mean, rstd, res, a, b, weight, bias, N, C, stream);
}

void residual_layernorm_forward_bf16(float* res, bf16* out, float* mean, float* rstd, const float* a, const float* b,
                                     const float* weight, const float* bias, long N, int C, cudaStream_t stream) {
    CUDA_REQUIRE(res != nullptr && b != nullptr);
    layernorm_forward_launch(out, mean, rstd, res, a, b, weight, bias, N, C, stream);
}

template <class Dy>
static void layernorm_backward_launch(float* dinp, bf16* dinp16, float* dweight, float* dbias, const Dy* dout,
                                      const float* inp, const float* weight, const float* mean, const float* rstd,
                                      long N, int C, Context& ctx, cudaStream_t stream, bool accumulate) {
    LayerNormParamTerms<Dy> terms{dout, inp, mean, rstd, C};
    if (N <= 0) return column_sums<2>(dweight, dbias, terms, N, C, ctx, stream, accumulate);  // 0 when written
    unsigned blocks = (unsigned)((N + kRowsPerBlock - 1) / kRowsPerBlock);
    layernorm_backward_input_kernel<<<blocks, kRowsPerBlock * 32, 0, stream>>>(dinp, dinp16, dout, inp, weight, mean,
                                                                               rstd, N, C);
    CUDA_CHECK(cudaGetLastError());
    column_sums<2>(dweight, dbias, terms, N, C, ctx, stream, accumulate);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate) {
    layernorm_backward_launch(dinp, nullptr, dweight, dbias, dout, inp, weight, mean, rstd, N, C, ctx, stream,
                              accumulate);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const bf16* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, long N, int C, Context& ctx,
                        cudaStream_t stream, bool accumulate) {
    layernorm_backward_launch(dinp, nullptr, dweight, dbias, dout, inp, weight, mean, rstd, N, C, ctx, stream,
                              accumulate);
}

void layernorm_backward_bf16(float* dinp, bf16* dinp16, float* dweight, float* dbias, const bf16* dout,
                             const float* inp, const float* weight, const float* mean, const float* rstd, long N,
                             int C, Context& ctx, cudaStream_t stream, bool accumulate) {
    CUDA_REQUIRE(dinp16 != nullptr);
    layernorm_backward_launch(dinp, dinp16, dweight, dbias, dout, inp, weight, mean, rstd, N, C, ctx, stream,
                              accumulate);
}

} // namespace dptrain::cuda
