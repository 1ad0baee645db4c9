// What the readers give the Prefetcher: samples of floats and integers, by global index. Apart
// from the shard formats that implement it (shards.h, tokens.h) and from MPI and HDF5, so that
// tests can read from memory.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace dptrain {

// What the Prefetcher reads from: samples made of `floats` features and `ints` integers (a label,
// or a window of tokens). Implemented by ShardSet (tabular) and TokenShardSet (tokens.h).
class Dataset {
  public:
    virtual ~Dataset() = default;
    virtual long num_samples() const = 0;
    virtual int floats_per_sample() const = 0;
    virtual int ints_per_sample() const = 0;
    // Reads samples idx[0..n) of `epoch` into x (n, floats) and y (n, ints), in that order.
    virtual void read(const long* idx, int n, long epoch, float* x, int* y) = 0;
    virtual int num_shards() const = 0;
    virtual const std::string& shard_path(int i) const = 0;
    // Where sample `i` (a global index) lives, for messages: "SHARD row K" where known.
    virtual std::string where(long i) const { return "sample " + std::to_string(i); }
    // Another reader of the same shards with its own file handles and scratch, for a second
    // reader thread (a Dataset is not thread-safe; its copies are).
    virtual std::unique_ptr<Dataset> reopen() const = 0;
    // What this reader and the copies reopen() makes keep for the whole run besides their batches'
    // scratch (labels read at open; HDF5's structures and chunk caches for each file read through
    // it, which a second reader shares), for the memory plan.
    virtual size_t held_bytes() const { return 0; }
    // The whole split's bytes as --io memory loads it into the node's shared memory.
    virtual double memory_bytes() const { return 0; }
};

} // namespace dptrain
