// ReLU, GELU (tanh approximation, as GPT-2), SwiGLU and the residual add, forward and backward: grid-stride
// twins of src/backend/cpu/activation.cpp; GELU's bf16 forms keep fc's output rounded for backward.
// Not for: GELU fused into a GEMM (matmul.cu's epilogues).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

namespace dptrain::cuda {

#define GRID_STRIDE(i, n) \
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < (n); i += (long)gridDim.x * blockDim.x)

constexpr int kThreads = 256;
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void relu_forward_kernel(float* out, const float* inp, long N) {
    GRID_STRIDE(i, N) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout, long N) {
    GRID_STRIDE(i, N) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

// tanhf here, the CPU's tanh_approx there: both within a few 1e-7 of tanh, so the twins agree to
// about 1e-6 (tests/cuda/test_cuda_ops.cpp holds them to 1e-5).
__device__ inline float gelu_value(float x) {
    float cube = 0.044715f * x * x * x;
    return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
}

__global__ void gelu_forward_kernel(float* out, const float* inp, long N) {
    GRID_STRIDE(i, N) out[i] = gelu_value(inp[i]);
}

// pre = inp rounded, out = GELU(inp) rounded: GELU of the unrounded value.
__global__ void gelu_forward_keep_kernel(uint16_t* pre, uint16_t* out, const float* inp, long N) {
    GRID_STRIDE(i, N) {
        const float x = inp[i];
        pre[i] = bf16_bits(x);
        out[i] = bf16_bits(gelu_value(x));
    }
}

// Out: float, or uint16_t (bf16, rounded as stored); In: float, or uint16_t (bf16, widened).
template <class Out, class In>
__global__ void gelu_backward_kernel(Out* dinp, const In* inp, const float* dout, long N) {
    GRID_STRIDE(i, N) {
        float x = as_float(inp[i]);
        float cube = 0.044715f * x * x * x;
        float t = tanhf(kGeluScale * (x + cube));
        float sech2 = 1.0f - t * t;
        float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
        store_out(&dinp[i], local * dout[i]);
    }
}

// inp (N, 2F): gate, up per row; out (N, F) = silu(gate) * up. expf here, the CPU's exp_approx
// there: the twins agree to a few 1e-7 relative.
__global__ void swiglu_forward_kernel(float* out, const float* inp, long N, int F) {
    GRID_STRIDE(e, N * F) {
        const long r = e / F;
        const int i = (int)(e % F);
        const float g = inp[r * 2 * F + i], u = inp[r * 2 * F + F + i];
        out[e] = g / (1.0f + expf(-g)) * u;
    }
}

// dinp (N, 2F) written: d gate = dout * up * sig * (1 + gate * (1 - sig)), d up = dout * silu(gate).
__global__ void swiglu_backward_kernel(float* dinp, const float* inp, const float* dout, long N, int F) {
    GRID_STRIDE(e, N * F) {
        const long r = e / F;
        const int i = (int)(e % F);
        const float g = inp[r * 2 * F + i], u = inp[r * 2 * F + F + i], d = dout[e];
        const float sig = 1.0f / (1.0f + expf(-g));
        dinp[r * 2 * F + F + i] = d * g * sig;
        dinp[r * 2 * F + i] = d * u * sig * (1.0f + g * (1.0f - sig));
    }
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, long N) {
    GRID_STRIDE(i, N) out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da, float* db, const float* dout, long N) {
    GRID_STRIDE(i, N) {
        float d = dout[i];
        da[i] += d;
        db[i] += d;
    }
}

void relu_forward(float* out, const float* inp, long N, cudaStream_t stream) {
    if (N <= 0) return;
    relu_forward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK(cudaGetLastError());
}

void relu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream) {
    if (N <= 0) return;
    relu_backward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(dinp, inp, dout, N);
    CUDA_CHECK(cudaGetLastError());
}

// One launcher for GELU backward's forms (Out and In: float, or bf16 bits).
template <class Out, class In>
static void gelu_backward_launch(Out* dinp, const In* inp, const float* dout, long N, cudaStream_t stream) {
    if (N <= 0) return;
    gelu_backward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(dinp, inp, dout, N);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_forward(float* out, const float* inp, long N, int F, cudaStream_t stream) {
    if (N <= 0 || F <= 0) return;
    swiglu_forward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, stream>>>(out, inp, N, F);
    CUDA_CHECK(cudaGetLastError());
}

void swiglu_backward(float* dinp, const float* inp, const float* dout, long N, int F, cudaStream_t stream) {
    if (N <= 0 || F <= 0) return;
    swiglu_backward_kernel<<<grid_for(N * F, kThreads), kThreads, 0, stream>>>(dinp, inp, dout, N, F);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_forward(float* out, const float* inp, long N, cudaStream_t stream) {
    if (N <= 0) return;
    gelu_forward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(out, inp, N);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_forward_keep_bf16(bf16* pre, bf16* out, const float* inp, long N, cudaStream_t stream) {
    if (N <= 0) return;
    gelu_forward_keep_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(pre, out, inp, N);
    CUDA_CHECK(cudaGetLastError());
}

void gelu_backward(float* dinp, const float* inp, const float* dout, long N, cudaStream_t stream) {
    gelu_backward_launch(dinp, inp, dout, N, stream);
}

void gelu_backward_bf16(bf16* dinp, const bf16* inp, const float* dout, long N, cudaStream_t stream) {
    gelu_backward_launch(dinp, inp, dout, N, stream);
}

void residual_forward(float* out, const float* a, const float* b, long N, cudaStream_t stream) {
    if (N <= 0) return;
    residual_forward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(out, a, b, N);
    CUDA_CHECK(cudaGetLastError());
}

void residual_backward(float* da, float* db, const float* dout, long N, cudaStream_t stream) {
    if (N <= 0) return;
    residual_backward_kernel<<<grid_for(N, kThreads), kThreads, 0, stream>>>(da, db, dout, N);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
