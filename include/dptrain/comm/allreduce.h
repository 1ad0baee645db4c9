// Host-memory all-reduce for --allreduce flat|hierarchical|auto, and its sharded (ZeRO-1) form.
// Not for: buckets and overlap (gradsync.h), device memory (NCCL).
//   flat          MPI_Allreduce over all ranks;
//   hierarchical  1. each rank sums its 1/L slice straight from its node peers' window segments;
//                 2. ranks of equal local rank all-reduce that slice across nodes (MPI);
//                 3. every rank copies the other slices back from the window;
//   auto          hierarchical from `threshold` bytes where the topology allows, flat below.
// The gradient buffer lives in the node's window, so backward writes where peers read: no copies.
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/shared_window.h"
#include "dptrain/comm/topology.h"

#include <memory>
#include <string>
#include <vector>

namespace dptrain {

// Per node rank: a float32 segment of `capacity`, and (staged) a bf16 one for bf16 on the wire.
class NodeWindow {
  public:
    NodeWindow(MPI_Comm node, size_t capacity, bool staged);  // collective over node

    float* segment(int local_rank) const { return seg_[local_rank]; }
    bf16* staging(int local_rank) const { return stg_[local_rank]; }
    size_t capacity() const { return capacity_; }
    int local_rank() const { return win_->local_rank(); }
    int local_size() const { return win_->local_size(); }
    void sync() { win_->sync(); }
    // Local rank q's slice start (q = local_size(): the end). Cut on 16-float multiples so two
    // ranks never write one cache line.
    size_t slice_begin(size_t offset, size_t count, int q) const;
    // My segment's [lo, lo + n) = the node's sum, added in local rank order so the bits do not
    // depend on which rank owns the slice.
    void sum_floats(size_t lo, size_t n);
    void sum_staged(size_t lo, size_t n);

  private:
    std::unique_ptr<SharedWindow> win_;
    size_t capacity_;
    std::vector<float*> seg_;
    std::vector<bf16*> stg_;
};

class AllreduceEngine {
  public:
    using Algo = AllreduceAlgo;

    // Collective over topo.world. Throws the same UserError on every rank for hierarchical on
    // unequal nodes. bf16_wire false saves the bf16 staging's memory.
    AllreduceEngine(AllreduceAlgo algo, const Topology& topo, size_t capacity,
                    size_t threshold_bytes = kDefaultThreshold, bool bf16_wire = true);
    ~AllreduceEngine();

    // Capacity floats, zeroed; in the node's window when a shared-memory path may be used.
    float* buffer() const { return buf_; }
    size_t capacity() const { return capacity_; }
    // buffer()[offset, offset + count) = the sum over ranks, the same bytes on every rank. bf16
    // wire: float32 sums rounded for transfer; every rank gets the rounded sum.
    void run(size_t offset, size_t count, DType wire);
    // --shard-optimizer (ZeRO-1); collective. From here run() reduce-scatters buf[0, count) into
    // `recv` (rank r's shard_span), all-reduces the rest, and leaves that range as scratch.
    // Hierarchical keeps local rank order (sharded_allreduce.cpp's walk-through).
    void shard(size_t count, float* recv);
    // In place: each owner's updated shard to every rank.
    void gather_shards(float* buf);
    // e.g. "auto: hierarchical from 64 KiB, flat below"
    std::string describe() const;
    Algo algo() const { return algo_; }
    const char* path_for(size_t count, DType wire) const;  // "flat" or "hierarchical"
    int world_size() const { return topo_.size; }

    // The measured crossover (docs/BENCHMARKS.md).
    static constexpr size_t kDefaultThreshold = 4 << 10;

  private:
    void run_flat(size_t offset, size_t count, DType wire);
    void run_hierarchical(size_t offset, size_t count, DType wire);
    bool windowed(size_t count, DType wire) const;
    void run_sharded(size_t offset, size_t count, DType wire);
    void run_sharded_hierarchical(size_t offset, size_t count, DType wire);
    void gather_shards_hierarchical(float* buf);

    Algo algo_;
    const Topology& topo_;
    size_t capacity_, threshold_;
    MpiCommunicator world_, cross_;
    std::unique_ptr<NodeWindow> win_;
    std::vector<float> own_;  // the buffer when there is no window
    std::vector<bf16> wire_;  // flat bf16 staging
    float* buf_ = nullptr;
    size_t sharded_ = 0;        // [0, sharded_); 0: not sharded
    bool bf16_wire_;
    float* recv_ = nullptr;     // this rank's shard of the sums
    std::vector<bf16> recv16_;
    std::vector<size_t> counts_;
    // Hierarchical sharding: world rank at (node n, local l) = owner_at_[n * L + l].
    std::vector<int> node_of_, local_of_, owner_at_;
    std::vector<size_t> cross_counts_, cross_displs_;
};

} // namespace dptrain
