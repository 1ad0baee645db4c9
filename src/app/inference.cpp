// Token choice (inference.h): shared by generate and serve.
#include "dptrain/app/inference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dptrain {

TokenPicker::TokenPicker(int vocab_size, double temperature, int top_k, double top_p, uint64_t seed)
    : V_(vocab_size), k_(top_k > 0 ? std::min(top_k, vocab_size) : vocab_size), temperature_(temperature),
      top_p_(top_p), probs_(vocab_size), order_(vocab_size), rng_(stream_seed(seed, 0x6E6E)) {}

int TokenPicker::pick(const float* z) {
    if (temperature_ == 0) return (int)(std::max_element(z, z + V_) - z);
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + k_, order_.end(), [&](int a, int b) { return z[a] > z[b]; });
    double sum = 0;
    for (int i = 0; i < k_; ++i) sum += probs_[i] = (float)std::exp((z[order_[i]] - z[order_[0]]) / temperature_);
    // Nucleus: the fewest most likely tokens whose probabilities reach top_p.
    int n = k_;
    if (top_p_ < 1.0) {
        double acc = 0;
        for (n = 0; n < k_;) {
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

} // namespace dptrain
