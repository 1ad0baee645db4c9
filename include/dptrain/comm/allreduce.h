// All-reduce algorithms over host memory, chosen by --allreduce flat|hierarchical|auto:
//   flat          MPI_Allreduce over all ranks;
//   hierarchical  inside each node through an MPI-3 shared-memory window (each rank sums its 1/L
//                 slice straight from its peers' buffers), then across nodes among the ranks of
//                 equal local rank (MPI), then every rank copies the other slices back;
//   auto          hierarchical for messages of at least `threshold` bytes, flat below, when the
//                 topology allows (equal ranks per node, more than one rank per node).
// The engine owns the gradient buffer: for the shared-memory paths it lives in the node's window,
// so backward writes straight into memory the peers can read (no copy in or out).
// Not for: buckets and overlap (gradsync.h), device memory (NCCL).
#pragma once

#include "dptrain/core/bf16.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/comm/shared_window.h"
#include "dptrain/comm/topology.h"

#include <memory>
#include <string>
#include <vector>

namespace dptrain {

// The gradients' window: each rank of the node owns a float32 segment of `capacity` elements and
// (staged: for bf16 on the wire) a bf16 staging segment of the same count, and reads its peers'
// segments directly.
class NodeWindow {
  public:
    NodeWindow(MPI_Comm node, size_t capacity, bool staged);  // collective over node

    float* segment(int local_rank) const { return seg_[local_rank]; }
    bf16* staging(int local_rank) const { return stg_[local_rank]; }
    size_t capacity() const { return capacity_; }
    int local_rank() const { return win_->local_rank(); }
    int local_size() const { return win_->local_size(); }
    void sync() { win_->sync(); }  // SharedWindow::sync
    // Where local rank q's slice of the range [offset, offset + count) begins (q = local_size():
    // where the range ends). Slices are cut on 16-float (64-byte) multiples from the range's start,
    // so where the range starts on a cache line two ranks never write one line.
    size_t slice_begin(size_t offset, size_t count, int q) const;
    // My segment's [lo, lo + n) = the sum over the node's ranks of their segments' [lo, lo + n)
    // (sum_floats), or of their staging's (sum_staged), added in local rank order whichever rank
    // sums: the result does not depend on which rank owns the slice.
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

    // Collective over topo.world. Throws UserError (the same on every rank) when hierarchical is
    // asked of nodes with unequal rank counts. threshold_bytes: auto's switch point (messages of
    // at least this size go hierarchical). bf16_wire: run() may be asked for bf16 on the wire;
    // false leaves out the bf16 staging (half the gradients' bytes again, per path).
    AllreduceEngine(AllreduceAlgo algo, const Topology& topo, size_t capacity,
                    size_t threshold_bytes = kDefaultThreshold, bool bf16_wire = true);
    ~AllreduceEngine();

    // Where gradients go: capacity floats, zeroed, in the node's window when a shared-memory
    // path may be used.
    float* buffer() const { return buf_; }
    size_t capacity() const { return capacity_; }
    // buffer()[offset, offset + count) = its sum over all ranks, identical bytes on every rank.
    // wire = bf16 halves the bytes moved; sums are accumulated in float32 and rounded to bf16
    // for transfer (the result every rank gets is the bf16-rounded sum, widened to float32).
    void run(size_t offset, size_t count, DType wire);
    // Sharded optimizer state (--shard-optimizer, ZeRO stage 1). Collective over topo.world: the
    // buffer's first `count` floats are owned in shards, rank r's being shard_span(count, r, W).
    // From here on run() reduce-scatters that range: each rank receives the sum of its shard's
    // part into `recv` (the shard's floats), and floats from `count` on (the control floats) are
    // all-reduced as before. The buffer's own floats in the range are scratch after run().
    // Flat: one MPI_Reduce to each owner of a piece of the range. Hierarchical (where run() would
    // go hierarchical): the node reduce-scatters the range through its window, each element
    // summed in local rank order as the replicated path sums it, then across nodes the ranks of
    // equal local rank reduce each piece to its owner (the walk-through in sharded_allreduce.cpp).
    void shard(size_t count, float* recv);
    // In place: every rank's shard of buf[0, count) (each updated by its owner) to every rank:
    // MPI_Allgatherv (flat), or across nodes among the ranks of equal local rank and then through
    // the node's window (hierarchical).
    void gather_shards(float* buf);
    // "hierarchical (2 nodes x 2 ranks)" or "auto: hierarchical from 64 KiB, flat below".
    std::string describe() const;
    Algo algo() const { return algo_; }
    // The path run() takes for a message of `count` elements: "flat" or "hierarchical".
    const char* path_for(size_t count, DType wire) const;
    int world_size() const { return topo_.size; }

    // Measured crossover (docs/BENCHMARKS.md): the shared-memory path wins from 4 KiB on.
    static constexpr size_t kDefaultThreshold = 4 << 10;

  private:
    void run_flat(size_t offset, size_t count, DType wire);
    void run_hierarchical(size_t offset, size_t count, DType wire);
    bool windowed(size_t count, DType wire) const;  // run() takes the shared-memory path
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
    size_t sharded_ = 0;        // the sharded range [0, sharded_); 0: not sharded
    bool bf16_wire_;
    float* recv_ = nullptr;     // this rank's shard of the sums
    std::vector<bf16> recv16_;  // its bf16 staging
    std::vector<size_t> counts_;
    // Hierarchical sharding: each world rank's node and local rank; the world rank at (node n,
    // local rank l) is owner_at_[n * L + l]; the cross communicator's blocks of the all-gather.
    std::vector<int> node_of_, local_of_, owner_at_;
    std::vector<size_t> cross_counts_, cross_displs_;
};

} // namespace dptrain
