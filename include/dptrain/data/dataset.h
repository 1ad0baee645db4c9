// The interface the Prefetcher reads samples through. Not for: shard formats (shards.h, tokens.h),
// MPI or HDF5, so tests can read from memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace dptrain {

// ints: a label, or a window of tokens. Not thread-safe: reopen() for another thread.
class Dataset {
  public:
    virtual ~Dataset() = default;
    virtual long num_samples() const = 0;
    virtual int floats_per_sample() const = 0;
    virtual int ints_per_sample() const = 0;
    // x (n, floats), y (n, ints), in idx order.
    virtual void read(const long* idx, int n, long epoch, float* x, int* y) = 0;
    virtual int num_shards() const = 0;
    virtual const std::string& shard_path(int i) const = 0;
    // For messages: "SHARD row K" where known.
    virtual std::string where(long i) const { return "sample " + std::to_string(i); }
    virtual std::unique_ptr<Dataset> reopen() const = 0;
    // For the memory plan: kept all run by this reader and its reopened copies, beyond scratch.
    virtual size_t held_bytes() const { return 0; }
    virtual double memory_bytes() const { return 0; }  // --io memory's node copy
};

} // namespace dptrain
