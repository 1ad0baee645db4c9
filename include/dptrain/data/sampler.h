// The global sample order, the same for any world size. Not for: reading the samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dptrain {

// The global sample order: epoch e visits a permutation of [0, N) drawn from (seed, e), in
// global batches of G samples (the last batch of an epoch holds N mod G, when nonzero). Rank r
// of W reads samples [c*r/W, c*(r+1)/W) of a batch of c. Nothing here depends on W except the
// slice, so W ranks consume exactly the samples 1 rank would. slice() and batch() are
// thread-safe; with several reader threads the permutations of two epochs are kept, since the
// steps in flight span at most an epoch boundary.
// block > 1 (--shuffle-block): the permutation moves blocks of `block` consecutive samples as
// units, so a rank's slice is a few runs of consecutive rows, each one read. The block grid is
// shifted by a random offset each epoch (the first block is [0, offset)), so two samples share a
// block in some epochs only. block 1 is the per-sample permutation.
class Sampler {
  public:
    Sampler(long num_samples, long global_batch, uint64_t seed, int cached_epochs = 1, long block = 1);
    // The epochs a sampler for `readers` reader threads keeps, and the bytes it then holds.
    static int epochs_for(int readers) { return readers > 1 ? 2 : 1; }
    static size_t bytes_for(long num_samples, int cached_epochs, long block);
    long steps_per_epoch() const { return steps_per_epoch_; }
    long epoch_of(long step) const { return step / steps_per_epoch_; }
    // Samples in the global batch of `step`.
    int global_count(long step) const;
    // Fills out with this rank's sample indices for `step`; returns how many.
    int slice(long step, int rank, int world, long* out);
    // The whole global batch of `step` (for tests and tools).
    int batch(long step, long* out);

  private:
    const std::vector<long>& perm_of(long epoch);  // under mu_
    long n_, global_batch_, steps_per_epoch_, block_;
    uint64_t seed_;
    std::vector<long> blocks_;  // block > 1: the epoch's block starts, permuted
    std::mutex mu_;
    std::vector<long> perm_[2];
    long perm_epoch_[2] = {-1, -1};
};

} // namespace dptrain
