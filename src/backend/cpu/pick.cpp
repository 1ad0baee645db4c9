// cpu::pick_token, the next token's rule (core/token_draw.h) at a given draw: what generate and
// serve pick by on the CPU, and the reference of cuda::pick_tokens. Not for: the random stream.
#include "dptrain/backend/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dptrain::cpu {

namespace {

// Every id drawable, no cut: drawn in id order, O(V). Sorting the whole vocabulary was 19x slower
// (docs/BENCHMARKS.md, "Sampling over a GPT-2-sized vocabulary").
int pick_in_id_order(const float* z, int V, double temperature, double u, float* probs) {
    const float top = *std::max_element(z, z + V);
    double sum = 0;
    for (int i = 0; i < V; ++i) sum += probs[i] = (float)std::exp((z[i] - top) / temperature);
    const double target = u * sum;
    double acc = 0;
    int last = 0;
    for (int i = 0; i < V; ++i) {
        if (probs[i] <= 0) continue;
        last = i;
        if ((acc += probs[i]) >= target) return i;
    }
    return last;
}

} // namespace

int pick_token(const float* z, const TokenDraw& d, float* probs, int* order) {
    const int V = d.vocab, k = d.top_k > 0 ? std::min(d.top_k, V) : V;
    if (d.temperature < 0) return -1;
    if (d.temperature == 0) return (int)(std::max_element(z, z + V) - z);
    if (k == V && d.top_p >= 1.0) return pick_in_id_order(z, V, d.temperature, d.u, probs);
    // Sorted in growing prefixes (each one pass keeping the m largest) until top_k or top_p is
    // met, not the whole vocabulary. Equal logits in id order: partial_sort's own order of equals
    // is its library's, and cuda::pick_tokens sorts them so.
    std::iota(order, order + V, 0);
    const auto larger = [&](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
    double sum = 0;
    int m = k;
    if (k == V) {
        const float top = *std::max_element(z, z + V);
        for (int i = 0; i < V; ++i) sum += std::exp((z[i] - top) / d.temperature);
        m = std::min(V, 64);
    }
    for (;;) {
        std::partial_sort(order, order + m, order + V, larger);
        const float top = z[order[0]];
        double part = 0;
        for (int i = 0; i < m; ++i) part += probs[i] = (float)std::exp((z[order[i]] - top) / d.temperature);
        if (k < V) sum = part;
        if (m == k || part >= d.top_p * sum) break;
        m = (int)std::min<long>(k, 4L * m);
    }
    int n = m;
    if (d.top_p < 1.0) {
        double acc = 0;
        for (n = 0; n < m;) {
            acc += probs[n++];
            if (acc >= d.top_p * sum) break;
        }
        sum = acc;
    }
    const double target = d.u * sum;
    double acc = 0;
    for (int i = 0; i < n; ++i)
        if ((acc += probs[i]) >= target) return order[i];
    return order[n - 1];
}

} // namespace dptrain::cpu
