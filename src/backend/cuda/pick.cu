// cuda::pick_tokens, the CUDA twin of cpu::pick_token (src/backend/cpu/pick.cpp): a row's next
// token where its logits are, so a decoder hands back ids, not rows of V floats. Greedy and
// whole-vocabulary sampling here; a row cut by top_k or top_p is left to the host (kPickOnHost).
// Not for: the random stream (the draw's u comes from the host's TokenPicker).
#include "dptrain/backend/cuda/ops.h"

#include "check.h"

#include <climits>

namespace dptrain::cuda {

namespace {

constexpr int kPickThreads = 256;

// a before b: larger, or equal and earlier (std::max_element's first largest).
__device__ inline bool beats(float a, int ia, float b, int ib) { return a > b || (a == b && ia < ib); }

// The CPU's probability of id i, with its operations: a float difference, divided in double,
// exp in double, rounded to float.
__device__ inline float prob(const float* z, int i, float top, double temperature) {
    return (float)exp((double)(z[i] - top) / temperature);
}

// One block a row; thread t owns the ids [t * chunk, (t + 1) * chunk), so that the cumulative mass
// runs in id order as the CPU's does: each thread's sum of its ids in order, the chunks' sums added
// in order by thread 0, which finds the chunk where u's mass falls; that chunk's thread walks it.
__global__ void pick_tokens_kernel(int* ids, const float* logits, int stride, const TokenDraw* draws) {
    __shared__ float best_v[kPickThreads];
    __shared__ int best_i[kPickThreads];
    __shared__ double sums[kPickThreads];
    __shared__ int last_pos[kPickThreads];
    __shared__ int chosen;
    __shared__ double chosen_from, target;
    const int row = blockIdx.x, t = threadIdx.x;
    const TokenDraw d = draws[row];
    const int V = d.vocab;
    const bool cut = (d.top_k > 0 && d.top_k < V) || d.top_p < 1.0;
    if (d.temperature < 0 || (d.temperature > 0 && cut)) {
        if (t == 0) ids[row] = d.temperature < 0 ? -1 : kPickOnHost;
        return;
    }
    const float* z = logits + (size_t)row * stride;
    const int chunk = (V + kPickThreads - 1) / kPickThreads;
    const int lo = min(V, t * chunk), hi = min(V, lo + chunk);
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = lo; i < hi; ++i)
        if (i == lo || z[i] > bv) bv = z[i], bi = i;
    best_v[t] = bv;
    best_i[t] = bi;
    __syncthreads();
    for (int s = kPickThreads / 2; s > 0; s >>= 1) {  // a fixed tree: the first largest wins
        if (t < s && beats(best_v[t + s], best_i[t + s], best_v[t], best_i[t]))
            best_v[t] = best_v[t + s], best_i[t] = best_i[t + s];
        __syncthreads();
    }
    if (d.temperature == 0) {
        if (t == 0) ids[row] = best_i[0];
        return;
    }
    const float top = best_v[0];
    double sum = 0;
    int last = -1;
    for (int i = lo; i < hi; ++i) {
        const float p = prob(z, i, top, d.temperature);
        sum += p;
        if (p > 0) last = i;
    }
    sums[t] = sum;
    last_pos[t] = last;
    __syncthreads();
    if (t == 0) {
        double total = 0;
        for (int k = 0; k < kPickThreads; ++k) total += sums[k];
        target = d.u * total;
        double acc = 0;
        chosen = -1;
        for (int k = 0; k < kPickThreads && chosen < 0; ++k) {
            if (sums[k] > 0 && acc + sums[k] >= target) chosen = k, chosen_from = acc;
            acc += sums[k];
        }
        if (chosen < 0) {  // rounding left u past the end: the last drawable id, as on the CPU
            int at = 0;
            for (int k = kPickThreads - 1; k >= 0; --k)
                if (last_pos[k] >= 0) {
                    at = last_pos[k];
                    break;
                }
            ids[row] = at;
        }
    }
    __syncthreads();
    if (t != chosen) return;
    double acc = chosen_from;  // the mass of the ids before this chunk
    for (int i = lo; i < hi; ++i) {
        const float p = prob(z, i, top, d.temperature);
        if (p <= 0) continue;
        last = i;
        if ((acc += p) >= target) {
            ids[row] = i;
            return;
        }
    }
    ids[row] = last;
}

} // namespace

void pick_tokens(int* ids, const float* logits, int n, int stride, const TokenDraw* draws, cudaStream_t stream) {
    CUDA_REQUIRE(n >= 0 && stride > 0);
    if (n == 0) return;
    pick_tokens_kernel<<<(unsigned)n, kPickThreads, 0, stream>>>(ids, logits, stride, draws);
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
