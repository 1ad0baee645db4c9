// cuda::pick_tokens, the CUDA twin of cpu::pick_token (src/backend/cpu/pick.cpp): a row's next
// token where its logits are, so a decoder hands back ids, not rows of V floats: greedy, sampling
// over the whole vocabulary, and rows cut by top_k or top_p up to 2,048 sorted ids (wider ones are
// left to the host: kPickOnHost). Not for: the random stream (u comes from the host's TokenPicker).
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

// The first largest of the row's ids over the block (thread t's are [lo, hi)), by a fixed tree;
// every thread gets its value (*top) and id.
__device__ __forceinline__ int first_largest(const float* z, int lo, int hi, float* top) {
    __shared__ float best_v[kPickThreads];
    __shared__ int best_i[kPickThreads];
    const int t = threadIdx.x;
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = lo; i < hi; ++i)
        if (i == lo || z[i] > bv) bv = z[i], bi = i;
    best_v[t] = bv;
    best_i[t] = bi;
    __syncthreads();
    for (int s = kPickThreads / 2; s > 0; s >>= 1) {
        if (t < s && beats(best_v[t + s], best_i[t + s], best_v[t], best_i[t]))
            best_v[t] = best_v[t + s], best_i[t] = best_i[t + s];
        __syncthreads();
    }
    *top = best_v[0];
    return best_i[0];
}

// Thread 0's part of a whole-vocabulary draw: the chunks' sums added in order, the chunk where u's
// mass falls (*chosen, with the mass before it), or where rounding left u past the end, the last
// drawable id written at once (*chosen -1).
__device__ __forceinline__ void find_chunk(int* id, const double* sums, const int* last_pos, double u, int* chosen,
                                           double* before, double* target) {
    double total = 0;
    for (int k = 0; k < kPickThreads; ++k) total += sums[k];
    *target = u * total;
    double acc = 0;
    *chosen = -1;
    for (int k = 0; k < kPickThreads && *chosen < 0; ++k) {
        if (sums[k] > 0 && acc + sums[k] >= *target) *chosen = k, *before = acc;
        acc += sums[k];
    }
    if (*chosen >= 0) return;
    int at = 0;  // as on the CPU
    for (int k = kPickThreads - 1; k >= 0 && at == 0; --k)
        if (last_pos[k] >= 0) at = last_pos[k];
    *id = at;
}

// One block a row; thread t owns the ids [t * chunk, (t + 1) * chunk), so that the cumulative mass
// runs in id order as the CPU's does: each thread's sum of its ids in order, the chunks' sums added
// in order by thread 0, which finds the chunk where u's mass falls; that chunk's thread walks it.
__global__ void pick_tokens_kernel(int* ids, const float* logits, int stride, const TokenDraw* draws) {
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
    float top = 0;
    const int largest = first_largest(z, lo, hi, &top);
    if (d.temperature == 0) {
        if (t == 0) ids[row] = largest;
        return;
    }
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
    if (t == 0) find_chunk(&ids[row], sums, last_pos, d.u, &chosen, &chosen_from, &target);
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

// Rows cut by top_k or top_p: the kMaxSorted most likely at most, sorted on the device.
constexpr int kCutThreads = 1024;
constexpr int kMaxSorted = 2048;  // a power of 2: the bitonic sort's width

// Unsigned keys in the floats' order (larger float, larger key); -0 is +0, as the CPU compares.
__device__ inline unsigned order_key(float x) {
    const unsigned u = __float_as_uint(x == 0.0f ? 0.0f : x);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Sorted descending, a key before its id: the larger logit first, and of equal logits the
// smaller id first (as cpu::pick_token's sort).
__device__ inline unsigned long long sort_key(unsigned key, int id) {
    return ((unsigned long long)key << 32) | (unsigned)(0xFFFFFFFFu - (unsigned)id);
}
__device__ inline int id_of(unsigned long long k) { return (int)(0xFFFFFFFFu - (unsigned)(k & 0xFFFFFFFFu)); }

// This thread's offset in the block's order of `count`s (thread 0's first), and their total.
__device__ __forceinline__ int block_offset(int count, int* scan, int* total) {
    const int t = threadIdx.x;
    scan[t] = count;
    __syncthreads();
    for (int o = 1; o < kCutThreads; o <<= 1) {  // Hillis-Steele: inclusive sums
        const int v = t >= o ? scan[t - o] : 0;
        __syncthreads();
        scan[t] += v;
        __syncthreads();
    }
    *total = scan[kCutThreads - 1];
    const int off = scan[t] - count;
    __syncthreads();  // every thread read scan before it is written again
    return off;
}

// The M-th largest key K among the row's (thread t's ids [lo, hi)), a byte a pass from the top;
// *remaining: how many of the M largest equal K.
__device__ __forceinline__ unsigned kth_largest_key(const float* z, int lo, int hi, int M, int* hist,
                                                    int* remaining) {
    __shared__ unsigned prefix_s;
    __shared__ int remaining_s;
    const int t = threadIdx.x;
    unsigned prefix = 0, mask = 0;
    int left = M;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int i = t; i < 256; i += kCutThreads) hist[i] = 0;
        __syncthreads();
        for (int i = lo; i < hi; ++i) {
            const unsigned key = order_key(z[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (t == 0) {
            int above = 0, digit = 255;
            for (; digit > 0 && above + hist[digit] < left; --digit) above += hist[digit];
            prefix_s = prefix | ((unsigned)digit << shift);
            remaining_s = left - above;
        }
        __syncthreads();
        prefix = prefix_s;
        left = remaining_s;
        mask |= 255u << shift;
        __syncthreads();  // prefix_s read by all before thread 0 writes it again
    }
    *remaining = left;
    return prefix;
}

// keys[0, M): every key above K, then the first `remaining` equal to K in id order; zeros (below
// every real key) up to the next power of 2, which it returns.
__device__ __forceinline__ int gather_largest(unsigned long long* keys, const float* z, int lo, int hi, unsigned K,
                                              int remaining, int M, int* scan) {
    int above = 0, equal = 0;
    for (int i = lo; i < hi; ++i) {
        const unsigned key = order_key(z[i]);
        above += key > K;
        equal += key == K;
    }
    int total_above = 0, total_equal = 0;
    int at_above = block_offset(above, scan, &total_above);
    int at_equal = block_offset(equal, scan, &total_equal);
    for (int i = lo; i < hi; ++i) {
        const unsigned key = order_key(z[i]);
        if (key > K) keys[at_above++] = sort_key(key, i);
        else if (key == K && at_equal < remaining) keys[total_above + at_equal++] = sort_key(key, i);
    }
    int width = 1;
    while (width < M) width <<= 1;
    for (int i = M + (int)threadIdx.x; i < width; i += kCutThreads) keys[i] = 0;
    __syncthreads();
    return width;
}

// keys[0, width) sorted descending (width a power of 2).
__device__ __forceinline__ void bitonic_sort_desc(unsigned long long* keys, int width) {
    for (int size = 2; size <= width; size <<= 1)
        for (int half = size >> 1; half > 0; half >>= 1) {
            for (int i = threadIdx.x; i < width; i += kCutThreads) {
                const int j = i ^ half;
                if (j <= i) continue;
                const unsigned long long a = keys[i], b = keys[j];
                if ((i & size) == 0 ? a < b : a > b) keys[i] = b, keys[j] = a;
            }
            __syncthreads();
        }
}

// Thread 0's part: cpu::pick_token's nucleus and draw over the M sorted ids, in its order. The mass
// is their sum where top_k cuts, else the whole vocabulary's (the chunks' sums, in order). A nucleus
// reaching past the sorted ids leaves the row as it is (kPickOnHost).
__device__ __forceinline__ void draw_sorted(int* id, const unsigned long long* keys, const float* probs,
                                            const double* sums, int M, bool top_k_cuts, bool all_sorted,
                                            const TokenDraw& d) {
    double sum = 0;
    if (top_k_cuts)
        for (int i = 0; i < M; ++i) sum += probs[i];
    else
        for (int i = 0; i < kCutThreads; ++i) sum += sums[i];
    int n = M;
    if (d.top_p < 1.0) {
        double acc = 0;
        bool reached = false;
        for (n = 0; n < M && !reached;) {
            acc += probs[n++];
            reached = acc >= d.top_p * sum;
        }
        if (!reached && !top_k_cuts && !all_sorted) return;  // the nucleus is wider than the sorted ids
        sum = acc;
    }
    const double target = d.u * sum;
    double acc = 0;
    for (int i = 0; i < n; ++i)
        if ((acc += probs[i]) >= target) {
            *id = id_of(keys[i]);
            return;
        }
    *id = id_of(keys[n - 1]);
}

// One block a row that top_k or top_p cuts; other rows are pick_tokens_kernel's. The CPU's rule on
// the M most likely ids (M = top_k, or the kMaxSorted largest for a nucleus over the whole
// vocabulary): found by a radix select on the logits' keys, gathered in id order, sorted by a
// bitonic sort, their probabilities in that order, then the nucleus and the draw by thread 0. A
// row whose top_k exceeds kMaxSorted, or whose nucleus reaches past its kMaxSorted most likely ids,
// keeps kPickOnHost.
__global__ void __launch_bounds__(kCutThreads, 1) pick_cut_kernel(int* ids, const float* logits, int stride,
                                                               const TokenDraw* draws) {
    __shared__ unsigned long long keys[kMaxSorted];
    __shared__ float probs[kMaxSorted];
    __shared__ double sums[kCutThreads];
    __shared__ int scan[kCutThreads];
    __shared__ int hist[256];
    const int row = blockIdx.x, t = threadIdx.x;
    const TokenDraw d = draws[row];
    const int V = d.vocab, k = d.top_k > 0 ? min(d.top_k, V) : V;
    if (!(d.temperature > 0) || (k == V && d.top_p >= 1.0)) return;  // not cut
    const int M = k < V ? k : min(V, kMaxSorted);
    if (M > kMaxSorted) return;
    const float* z = logits + (size_t)row * stride;
    const int chunk = (V + kCutThreads - 1) / kCutThreads;
    const int lo = min(V, t * chunk), hi = min(V, lo + chunk);
    int remaining = 0;
    const unsigned K = kth_largest_key(z, lo, hi, M, hist, &remaining);
    bitonic_sort_desc(keys, gather_largest(keys, z, lo, hi, K, remaining, M, scan));
    // Probabilities in sorted order; over the whole vocabulary the mass unrounded (the CPU's sum
    // for top_p without top_k), in id order by chunks.
    const float top = z[id_of(keys[0])];
    for (int i = t; i < M; i += kCutThreads) probs[i] = prob(z, id_of(keys[i]), top, d.temperature);
    double mass = 0;
    if (k == V)
        for (int i = lo; i < hi; ++i) mass += exp((double)(z[i] - top) / d.temperature);
    sums[t] = mass;
    __syncthreads();
    if (t == 0) draw_sorted(&ids[row], keys, probs, sums, M, k < V, M == V, d);
}

} // namespace

void pick_tokens(int* ids, const float* logits, int n, int stride, const TokenDraw* draws, cudaStream_t stream) {
    CUDA_REQUIRE(n >= 0 && stride > 0);
    if (n == 0) return;
    pick_tokens_kernel<<<(unsigned)n, kPickThreads, 0, stream>>>(ids, logits, stride, draws);
    CUDA_CHECK(cudaGetLastError());
    pick_cut_kernel<<<(unsigned)n, kCutThreads, 0, stream>>>(ids, logits, stride, draws);  // after: it overwrites
    CUDA_CHECK(cudaGetLastError());
}

} // namespace dptrain::cuda
