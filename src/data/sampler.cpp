// Sampler: an epoch's permutation (of samples, or of blocks of them) from a counter-based stream.
#include "dptrain/data/sampler.h"

#include "dptrain/core/rng.h"

#include <algorithm>

namespace dptrain {

Sampler::Sampler(long num_samples, long global_batch, uint64_t seed, int cached_epochs, long block)
    : n_(num_samples), global_batch_(global_batch), block_(std::max(1l, std::min(block, num_samples))), seed_(seed) {
    steps_per_epoch_ = (n_ + global_batch_ - 1) / global_batch_;
    perm_[0].resize(n_);
    if (cached_epochs > 1) perm_[1].resize(n_);
    if (block_ > 1) blocks_.reserve((size_t)(n_ / block_ + 2));
}

size_t Sampler::bytes_for(long num_samples, int cached_epochs, long block) {
    const long b = std::max(1l, std::min(block, num_samples));
    return ((size_t)num_samples * (size_t)cached_epochs + (b > 1 ? (size_t)(num_samples / b + 2) : 0)) * sizeof(long);
}

int Sampler::global_count(long step) const {
    long in_epoch = step % steps_per_epoch_;
    return (int)std::min(global_batch_, n_ - in_epoch * global_batch_);
}

const std::vector<long>& Sampler::perm_of(long epoch) {
    for (int c = 0; c < 2; ++c)
        if (perm_epoch_[c] == epoch && !perm_[c].empty()) return perm_[c];
    // Replace the older cached epoch (the only one, with a single cache).
    int c = perm_[1].empty() ? 0 : (perm_epoch_[0] <= perm_epoch_[1] ? 0 : 1);
    std::vector<long>& p = perm_[c];
    Rng rng(stream_seed(seed_, (uint64_t)epoch));
    if (block_ == 1) {
        for (long i = 0; i < n_; ++i) p[i] = i;
        for (long i = n_ - 1; i > 0; --i) std::swap(p[i], p[rng.below((uint64_t)i + 1)]);
    } else {
        // Blocks [0, off), [off, off + B), ... , [.., n): shuffled as units, then laid out.
        long off = (long)rng.below((uint64_t)block_);
        blocks_.clear();
        if (off > 0) blocks_.push_back(0);
        for (long b = off; b < n_; b += block_) blocks_.push_back(b);
        const long nb = (long)blocks_.size();
        for (long i = nb - 1; i > 0; --i) std::swap(blocks_[i], blocks_[rng.below((uint64_t)i + 1)]);
        long k = 0;
        for (long b : blocks_) {
            long end = b < off ? off : std::min(n_, b + block_);
            for (long i = b; i < end; ++i) p[k++] = i;
        }
    }
    perm_epoch_[c] = epoch;
    return p;
}

int Sampler::slice(long step, int rank, int world, long* out) {
    std::lock_guard<std::mutex> g(mu_);
    const std::vector<long>& perm = perm_of(epoch_of(step));
    long base = (step % steps_per_epoch_) * global_batch_;
    long c = global_count(step);
    long lo = c * rank / world, hi = c * (rank + 1) / world;
    for (long i = lo; i < hi; ++i) out[i - lo] = perm[base + i];
    return (int)(hi - lo);
}

int Sampler::batch(long step, long* out) { return slice(step, 0, 1, out); }

} // namespace dptrain
