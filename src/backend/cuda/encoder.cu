// Token + position embedding, forward and backward: the CUDA twin of src/backend/cpu/encoder.cpp.
// Backward sorts positions by token so each dwte row is one block's, summed in the CPU's order: bit
// for bit, no atomics (docs/GPU.md, "What exists"). Not for: more than 2^31 - 1 positions a batch.
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <cub/device/device_radix_sort.cuh>

namespace dptrain::cuda {

// Token at flat position i = b*T + t of inp (B, T) with row stride `stride`.
__device__ inline int token_at(const int* inp, long i, int T, int stride) {
    return inp[(i / T) * stride + i % T];
}

__global__ void encoder_forward_kernel(float* out, const int* inp, int stride, const float* wte, const float* wpe,
                                       long n, int T, int C) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        long pos = i / C;
        int c = (int)(i % C), t = (int)(pos % T);
        const float e = wte[(long)token_at(inp, pos, T, stride) * C + c];
        out[i] = wpe ? e + wpe[(long)t * C + c] : e;
    }
}

__global__ void encoder_decode_kernel(float* out, const int* tok, const int* pos, const float* wte, const float* wpe,
                                      long n, int C) {
    for (long e = blockIdx.x * (long)blockDim.x + threadIdx.x; e < n; e += (long)gridDim.x * blockDim.x) {
        const long i = e / C;
        const int c = (int)(e % C);
        const float w = wte[(long)tok[i] * C + c];
        out[e] = wpe ? w + wpe[(long)pos[i] * C + c] : w;
    }
}

// The sort's input: (token, position) pairs in position order, so the stable sort keeps each
// token's positions ascending; the token's first sorted place then owns its row.
__global__ void encoder_gather_kernel(int* tok, int* pos, const int* inp, int stride, int T, long BT) {
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < BT; i += (long)gridDim.x * blockDim.x) {
        tok[i] = token_at(inp, i, T, stride);
        pos[i] = (int)i;
    }
}

constexpr int kRowsInFlight = 8;  // rows of dout a thread loads before adding them, in order

__global__ void encoder_backward_wte_kernel(float* dwte, const float* dout, const int* tok, const int* pos, int C,
                                            long BT) {
    __shared__ long count;
    const long g = blockIdx.x;
    const int v = tok[g];
    if (g > 0 && tok[g - 1] == v) return;  // not the token's first place: uniform across the block
    if (threadIdx.x < 32) {  // warp 0 counts the token's places, 32 at a time, up to the first other token
        const int lane = threadIdx.x;
        long n = 0;
        for (long j0 = g;; j0 += 32) {
            const unsigned same = __ballot_sync(0xffffffffu, j0 + lane < BT && tok[j0 + lane] == v);
            const int run = same == 0xffffffffu ? 32 : __ffs(~same) - 1;  // leading places of the token
            n += run;
            if (run < 32) break;
        }
        if (lane == 0) count = n;
    }
    __syncthreads();
    const long n = count;
    float* row = dwte + (long)v * C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
        float acc = row[c];
        for (long q0 = 0; q0 < n; q0 += kRowsInFlight) {
            float x[kRowsInFlight];
            for (int k = 0; k < kRowsInFlight; ++k)
                x[k] = q0 + k < n ? dout[(long)pos[g + q0 + k] * C + c] : 0.0f;
            for (int k = 0; k < kRowsInFlight; ++k)
                if (q0 + k < n) acc += x[k];  // in position order; nothing added past the last
        }
        row[c] = acc;
    }
}

// dwpe[t][c] += dout[b][t][c] for b in order, one thread per (t, c): the CPU's order.
__global__ void encoder_backward_wpe_kernel(float* dwpe, const float* dout, int B, int T, int C) {
    const long n = (long)T * C, TC = n;
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n; i += (long)gridDim.x * blockDim.x) {
        float acc = dwpe[i];
        for (int b = 0; b < B; ++b) acc += dout[b * TC + i];
        dwpe[i] = acc;
    }
}

void encoder_decode(float* out, const int* tok, const int* pos, const float* wte, const float* wpe, int n, int C,
                    cudaStream_t stream) {
    const long values = (long)n * C;
    if (values <= 0) return;
    encoder_decode_kernel<<<grid_for(values, 256), 256, 0, stream>>>(out, tok, pos, wte, wpe, values, C);
    CUDA_CHECK(cudaGetLastError());
}

void encoder_forward(float* out, const int* inp, int stride, const float* wte, const float* wpe, int B, int T, int C,
                     cudaStream_t stream) {
    long n = (long)B * T * C;
    if (n <= 0) return;
    CUDA_REQUIRE(stride >= T);
    encoder_forward_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, inp, stride, wte, wpe, n, T, C);
    CUDA_CHECK(cudaGetLastError());
}

// CUB's temporary storage for sorting BT pairs (a host-side query; depends on BT and the device).
static size_t sort_temp_bytes(long BT) {
    size_t bytes = 0;
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, (const int*)nullptr, (int*)nullptr, (const int*)nullptr,
                                               (int*)nullptr, (int)BT, 0, 32));
    return bytes;
}

// The sort's room in the reduction scratch: tokens and positions, in and sorted (rounded up to
// 256 bytes), then CUB's storage; in floats.
static size_t ints_bytes(long BT) { return ((size_t)4 * BT * sizeof(int) + 255) / 256 * 256; }
static size_t scratch_floats(long BT, size_t temp_bytes) {
    return (ints_bytes(BT) + temp_bytes + sizeof(float) - 1) / sizeof(float);
}

size_t encoder_backward_scratch(long BT) { return BT <= 0 ? 0 : scratch_floats(BT, sort_temp_bytes(BT)); }

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* inp, int stride, int B, int T, int C,
                      Context& ctx, cudaStream_t stream) {
    long BT = (long)B * T;
    if (BT <= 0 || C <= 0) return;
    CUDA_REQUIRE(stride >= T && BT < (1L << 31));  // positions and the sort's count fit an int
    size_t temp_bytes = sort_temp_bytes(BT);  // once: the scratch's size and the sort's argument
    char* room = reinterpret_cast<char*>(ctx.reduction_scratch(scratch_floats(BT, temp_bytes)));
    int* tok = reinterpret_cast<int*>(room);
    int *pos = tok + BT, *tok_sorted = pos + BT, *pos_sorted = tok_sorted + BT;
    encoder_gather_kernel<<<grid_for(BT, 256), 256, 0, stream>>>(tok, pos, inp, stride, T, BT);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(room + ints_bytes(BT), temp_bytes, tok, tok_sorted, pos, pos_sorted,
                                               (int)BT, 0, 32, stream));
    encoder_backward_wte_kernel<<<(unsigned)BT, 256, 0, stream>>>(dwte, dout, tok_sorted, pos_sorted, C, BT);
    CUDA_CHECK(cudaGetLastError());
    if (!dwpe) return;
    encoder_backward_wpe_kernel<<<grid_for((long)T * C, 256), 256, 0, stream>>>(dwpe, dout, B, T, C);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
