// Token choice (inference.h), shared by generate and serve. Not for: decoding (model/decoder.h).
#include "dptrain/infer/inference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dptrain {

TokenPicker::TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed)
    : V_(vocab_size), k_(top_k > 0 ? std::min(top_k, vocab_size) : vocab_size), temperature_(temperature),
      top_p_(top_p), probs_(vocab_size), order_(vocab_size), rng_(stream_seed(seed, 0x6E6E)) {}

int TokenPicker::pick(const float* z) {
    if (temperature_ == 0) return (int)(std::max_element(z, z + V_) - z);
    float top = k_ == V_ ? *std::max_element(z, z + V_) : 0.0f;  // top-k: the first of the sorted k
    if (k_ == V_ && top_p_ >= 1.0) {
        // Drawn in id order, O(V): sorting the whole vocabulary was 19x slower (docs/BENCHMARKS.md,
        // "Sampling over a GPT-2-sized vocabulary").
        double sum = 0;
        for (int i = 0; i < V_; ++i) sum += probs_[i] = (float)std::exp((z[i] - top) / temperature_);
        const double u = rng_.uniform() * sum;
        double acc = 0;
        int last = 0;
        for (int i = 0; i < V_; ++i) {
            if (probs_[i] <= 0) continue;
            last = i;
            if ((acc += probs_[i]) >= u) return i;
        }
        return last;
    }
    // Sorted in growing prefixes (each one pass keeping the m largest) until top_k or top_p is
    // met, not the whole vocabulary.
    std::iota(order_.begin(), order_.end(), 0);
    const auto larger = [&](int a, int b) { return z[a] > z[b]; };
    double sum = 0;
    int m = k_;
    if (k_ == V_) {
        for (int i = 0; i < V_; ++i) sum += std::exp((z[i] - top) / temperature_);
        m = std::min(V_, 64);
    }
    for (;;) {
        std::partial_sort(order_.begin(), order_.begin() + m, order_.end(), larger);
        top = z[order_[0]];
        double part = 0;
        for (int i = 0; i < m; ++i) part += probs_[i] = (float)std::exp((z[order_[i]] - top) / temperature_);
        if (k_ < V_) sum = part;
        if (m == k_ || part >= top_p_ * sum) break;
        m = (int)std::min<long>(k_, 4L * m);
    }

    int n = m;
    if (top_p_ < 1.0) {
        double acc = 0;
        for (n = 0; n < m;) {
            acc += probs_[n++];
            if (acc >= top_p_ * sum) break;
        }
        sum = acc;
    }
    const double u = rng_.uniform() * sum;
    double acc = 0;
    for (int i = 0; i < n; ++i)
        if ((acc += probs_[i]) >= u) return order_[i];
    return order_[n - 1];
}

int drawable_ids(const GptConfig& cfg, const Tokenizer& tok) { return std::min(cfg.vocab_size, tok.vocab_size()); }

} // namespace dptrain
