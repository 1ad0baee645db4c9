// Rotary positions on the projected q, k and grouped-query attention's repeat of k, v: the CUDA
// twin of src/backend/cpu/rope.cpp, a thread per output value (forward) or per input value
// (backward, which sums a group's heads in head order as the CPU does). Not for: the angle table
// (the model computes it on the host once).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

namespace dptrain::cuda {

constexpr int kRopeThreads = 256;

// x: one head's hs values; value i of it rotated by position t's angles (sign -1: back).
__device__ inline float rotated(const float* x, int i, const float* cos, const float* sin, int half, float sign) {
    if (i < half) return x[i] * cos[i] - x[i + half] * (sign * sin[i]);
    return x[i] * cos[i - half] + x[i - half] * (sign * sin[i - half]);
}

// out (BT, 3C): q rotated, each query head's k (rotated) and v from its group's kv head.
__global__ void rope_qkv_forward_kernel(float* out, const float* inp, const float* cos, const float* sin, long BT,
                                        int T, int NH, int KV, int hs) {
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV, half = hs / 2;
    const long n = BT * 3 * C;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        const long r = e / (3 * C);
        const int j = (int)(e % (3 * C)), part = j / C, h = (j % C) / hs, i = j % hs, t = (int)(r % T);
        const float* x = inp + r * W;
        const float *c = cos + (long)t * half, *s = sin + (long)t * half;
        float v;
        if (part == 0) v = rotated(x + h * hs, i, c, s, half, 1.0f);
        else if (part == 1) v = rotated(x + C + (h / group) * hs, i, c, s, half, 1.0f);
        else v = x[C + KV * hs + (h / group) * hs + i];
        out[e] = v;
    }
}

// dinp (BT, W) written: q's gradient rotated back; a kv head's k and v gradients summed over the
// query heads of its group in head order, k's rotated back after the sum.
__global__ void rope_qkv_backward_kernel(float* dinp, const float* dout, const float* cos, const float* sin, long BT,
                                         int T, int NH, int KV, int hs) {
    const int C = NH * hs, W = (NH + 2 * KV) * hs, group = NH / KV, half = hs / 2;
    const long n = BT * W;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        const long r = e / W;
        const int j = (int)(e % W), t = (int)(r % T);
        const float* d = dout + r * 3 * C;
        const float *c = cos + (long)t * half, *s = sin + (long)t * half;
        float v;
        if (j < C) {
            v = rotated(d + (j / hs) * hs, j % hs, c, s, half, -1.0f);
        } else if (j < C + KV * hs) {
            const int g = (j - C) / hs, i = (j - C) % hs, p = i < half ? i + half : i - half;
            float own = 0.0f, partner = 0.0f;  // the group's sums of this value and of its pair's
            for (int h = g * group; h < (g + 1) * group; ++h) {
                own += d[C + h * hs + i];
                partner += d[C + h * hs + p];
            }
            v = i < half ? own * c[i] + partner * s[i] : own * c[i - half] - partner * s[i - half];
        } else {
            const int g = (j - C - KV * hs) / hs, i = (j - C - KV * hs) % hs;
            v = 0.0f;
            for (int h = g * group; h < (g + 1) * group; ++h) v += d[2 * C + h * hs + i];
        }
        dinp[e] = v;
    }
}

// Decoding: row r's NH query and KV key heads rotated in place at position pos[r]; a thread a pair.
__global__ void rope_decode_kernel(float* qkv, const int* pos, const float* cos, const float* sin, int n, int NH,
                                   int KV, int hs) {
    const int W = (NH + 2 * KV) * hs, half = hs / 2, pairs = (NH + KV) * half;
    const long total = (long)n * pairs;
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < total; e += (long)gridDim.x * blockDim.x) {
        const long r = e / pairs;
        const int h = (int)(e % pairs) / half, i = (int)(e % pairs) % half;
        float* x = qkv + r * W + h * hs;
        const float c = cos[(long)pos[r] * half + i], s = sin[(long)pos[r] * half + i];
        const float a = x[i], b = x[i + half];
        x[i] = a * c - b * s;
        x[i + half] = b * c + a * s;
    }
}

void rope_decode(float* qkv, const int* pos, const float* cos, const float* sin, int n, int NH, int KV, int hs,
                 cudaStream_t stream) {
    if (n <= 0) return;
    CUDA_REQUIRE(KV > 0 && NH % KV == 0 && hs % 2 == 0);
    rope_decode_kernel<<<grid_for((long)n * (NH + KV) * (hs / 2), kRopeThreads), kRopeThreads, 0, stream>>>(
        qkv, pos, cos, sin, n, NH, KV, hs);
    CUDA_CHECK(cudaGetLastError());
}

void rope_qkv_forward(float* out, const float* inp, const float* cos, const float* sin, int B, int T, int NH, int KV,
                      int hs, cudaStream_t stream) {
    const long BT = (long)B * T;
    if (BT <= 0) return;
    CUDA_REQUIRE(KV > 0 && NH % KV == 0 && hs % 2 == 0);
    rope_qkv_forward_kernel<<<grid_for(BT * 3 * NH * hs, kRopeThreads), kRopeThreads, 0, stream>>>(
        out, inp, cos, sin, BT, T, NH, KV, hs);
    CUDA_CHECK(cudaGetLastError());
}

void rope_qkv_backward(float* dinp, const float* dout, const float* cos, const float* sin, int B, int T, int NH,
                       int KV, int hs, cudaStream_t stream) {
    const long BT = (long)B * T;
    if (BT <= 0) return;
    CUDA_REQUIRE(KV > 0 && NH % KV == 0 && hs % 2 == 0);
    rope_qkv_backward_kernel<<<grid_for(BT * (NH + 2 * KV) * hs, kRopeThreads), kRopeThreads, 0, stream>>>(
        dinp, dout, cos, sin, BT, T, NH, KV, hs);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
