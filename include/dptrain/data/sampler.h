// The global sample order, the same for any world size. Not for: reading the samples.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace dptrain {

// Epoch e is a permutation of [0, N) from (seed, e), in global batches (the last may be short);
// rank r of W takes [c*r/W, c*(r+1)/W) of a batch of c. Only the slice depends on W, so W ranks
// consume exactly what 1 rank would. Thread-safe; two epochs are kept for several readers, as
// the steps in flight span at most one epoch boundary.
// block > 1 (--shuffle-block): blocks of consecutive samples move as units, so a slice is a few
// reads; the grid shifts by a random offset each epoch, so samples share a block only sometimes.
class Sampler {
  public:
    Sampler(long num_samples, long global_batch, uint64_t seed, int cached_epochs = 1, long block = 1);
    static int epochs_for(int readers) { return readers > 1 ? 2 : 1; }
    static size_t bytes_for(long num_samples, int cached_epochs, long block);
    long steps_per_epoch() const { return steps_per_epoch_; }
    long epoch_of(long step) const { return step / steps_per_epoch_; }
    int global_count(long step) const;
    // This rank's indices; returns how many.
    int slice(long step, int rank, int world, long* out);
    int batch(long step, long* out);  // the whole global batch

  private:
    const std::vector<long>& perm_of(long epoch);  // under mu_
    long n_, global_batch_, steps_per_epoch_, block_;
    uint64_t seed_;
    std::vector<long> blocks_;  // block > 1: the epoch's block starts
    std::mutex mu_;
    std::vector<long> perm_[2];
    long perm_epoch_[2] = {-1, -1};
};

} // namespace dptrain
