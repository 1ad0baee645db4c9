// Flat and hierarchical all-reduce over host memory, with the node's shared-memory window.
#include "dptrain/comm/allreduce.h"

#include "dptrain/core/check.h"
#include "dptrain/core/error.h"
#include "dptrain/model/model.h"

#include <algorithm>
#include <cstring>

namespace dptrain {

// ---------------------------------------------------------------------------------------------
// NodeWindow

NodeWindow::NodeWindow(MPI_Comm node, size_t capacity) : capacity_(capacity) {
    // Each segment: capacity floats + capacity bf16, rounded up to a page, in pages of its owner.
    size_t bytes = capacity * (sizeof(float) + sizeof(bf16));
    bytes = (bytes + 4095) / 4096 * 4096;
    if (bytes == 0) bytes = 4096;
    win_ = std::make_unique<SharedWindow>(node, bytes, /*own_pages=*/true);
    seg_.resize(local_size());
    stg_.resize(local_size());
    for (int q = 0; q < local_size(); ++q) {
        seg_[q] = reinterpret_cast<float*>(win_->segment(q));
        stg_[q] = reinterpret_cast<bf16*>(win_->segment(q) + capacity * sizeof(float));
    }
    // Touch my own pages now (zero gradients), not on the first step.
    std::memset(win_->segment(local_rank()), 0, bytes);
    sync();
}

// ---------------------------------------------------------------------------------------------
// AllreduceEngine

AllreduceEngine::AllreduceEngine(AllreduceAlgo algo, const Topology& topo, size_t capacity, size_t threshold_bytes)
    : algo_(algo), topo_(topo), capacity_(capacity), threshold_(threshold_bytes), world_(topo.world),
      cross_(topo.cross) {
    int ls[2] = {topo.local_size, -topo.local_size};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ls, 2, MPI_INT, MPI_MAX, topo.world));
    int max_local = ls[0], min_local = -ls[1];
    bool equal = max_local == min_local;
    if (algo_ == Algo::hierarchical && !equal)
        throw UserError(strfmt("--allreduce hierarchical needs the same number of ranks on every node (found %d to %d); "
                               "launch equal ranks per node or use --allreduce flat",
                               min_local, max_local));
    // auto: the shared-memory path pays off only with several ranks per node to share it.
    if (algo_ == Algo::automatic && (!equal || max_local == 1)) algo_ = Algo::flat;
    if (algo_ != Algo::flat) {
        win_ = std::make_unique<NodeWindow>(topo.node, capacity);
        buf_ = win_->segment(win_->local_rank());
    } else {
        own_.assign(std::max<size_t>(capacity, 1), 0.0f);
        buf_ = own_.data();
    }
    if (algo_ != Algo::hierarchical) wire_.assign(std::max<size_t>(capacity, 1), 0);  // flat bf16 staging
}

AllreduceEngine::~AllreduceEngine() = default;

std::string AllreduceEngine::describe() const {
    std::string shape = strfmt("%d node%s x %d rank%s", topo_.num_nodes, topo_.num_nodes == 1 ? "" : "s",
                               topo_.local_size, topo_.local_size == 1 ? "" : "s");
    switch (algo_) {
    case Algo::flat: return "flat (MPI_Allreduce over " + std::to_string(topo_.size) + " ranks)";
    case Algo::hierarchical:
        return "hierarchical (" + shape + ": shared memory in the node" + (topo_.num_nodes > 1 ? ", MPI across)" : ")");
    case Algo::automatic:
        return strfmt("auto (%s): hierarchical from %zu KiB, flat below", shape.c_str(), threshold_ >> 10);
    }
    return "?";
}

const char* AllreduceEngine::path_for(size_t count, DType wire) const {
    if (sharded_ > 0) return "reduce-scatter";
    bool hier = algo_ == Algo::hierarchical || (algo_ == Algo::automatic && count * dtype_size(wire) >= threshold_);
    return hier ? "hierarchical" : "flat";
}

void AllreduceEngine::run(size_t offset, size_t count, DType wire) {
    if (offset + count > capacity_) fatal(strfmt("allreduce range %zu+%zu beyond the buffer's %zu", offset, count, capacity_));
    if (sharded_ > 0 && offset < sharded_) {  // on one rank too: the shard's sums go to recv
        run_sharded(offset, count, wire);
        return;
    }
    if (topo_.size == 1 || count == 0) {
        if (wire == DType::bf16)  // the result is the bf16-rounded sum on any rank count
            for (size_t i = offset; i < offset + count; ++i) buf_[i] = bf16_to_float(float_to_bf16(buf_[i]));
        return;
    }
    bool hier = algo_ == Algo::hierarchical ||
                (algo_ == Algo::automatic && count * dtype_size(wire) >= threshold_);
    if (hier) run_hierarchical(offset, count, wire);
    else run_flat(offset, count, wire);
}

void AllreduceEngine::run_flat(size_t offset, size_t count, DType wire) {
    float* p = buf_ + offset;
    if (wire == DType::f32) {
        world_.allreduce_sum(p, count, DType::f32);
        return;
    }
    bf16* w = wire_.data() + offset;
    to_bf16(w, p, count);
    world_.allreduce_sum(w, count, DType::bf16);
    from_bf16(p, w, count);
}

void AllreduceEngine::shard(size_t count, float* recv) {
    if (algo_ != Algo::flat) fatal("AllreduceEngine::shard needs the flat algorithm");
    if (count > capacity_) fatal(strfmt("sharded range of %zu floats beyond the buffer's %zu", count, capacity_));
    sharded_ = count;
    recv_ = recv;
    recv16_.assign(std::max<size_t>(1, shard_span(count, topo_.rank, topo_.size).size()), 0);
    counts_.assign((size_t)topo_.size, 0);  // gather_shards' block sizes
}

// [offset, offset + count) may straddle the sharded range's end (the bucket with the control
// floats): the part inside is summed into its owners' shards, the part after is all-reduced.
// Buckets are smaller than shards, so a bucket mostly lies in one shard: one MPI_Reduce to each
// owner of a piece of it (measured: Open MPI's reduce-scatter with one non-zero count took 6x
// the time of an all-reduce of the same bytes; a reduce to the owner, less than the all-reduce).
void AllreduceEngine::run_sharded(size_t offset, size_t count, DType wire) {
    const size_t end = offset + count, g_end = std::min(end, sharded_);
    const int W = topo_.size;
    if (wire == DType::bf16) to_bf16(wire_.data() + offset, buf_ + offset, g_end - offset);
    for (int q = 0; q < W; ++q) {
        const Span s = shard_span(sharded_, q, W);
        const size_t lo = std::max(offset, s.begin), hi = std::min(g_end, s.end);
        if (lo >= hi) continue;
        const bool mine = q == topo_.rank;
        if (wire == DType::f32) {
            world_.reduce_sum(buf_ + lo, mine ? recv_ + (lo - s.begin) : nullptr, hi - lo, DType::f32, q);
        } else {
            world_.reduce_sum(wire_.data() + lo, mine ? recv16_.data() + (lo - s.begin) : nullptr, hi - lo, DType::bf16,
                              q);
            if (mine) from_bf16(recv_ + (lo - s.begin), recv16_.data() + (lo - s.begin), hi - lo);
        }
    }
    if (g_end < end) run(g_end, end - g_end, wire);
}

void AllreduceEngine::gather_shards(float* buf) {
    for (int q = 0; q < topo_.size; ++q) counts_[(size_t)q] = shard_span(sharded_, q, topo_.size).size();
    world_.allgather(nullptr, buf, counts_.data(), DType::f32);
}

// Walk-through (L ranks in the node, this one r; N nodes):
//  1. sync: every rank's gradients for [offset, offset+count) are written (and, for bf16, staged).
//  2. reduce-scatter in the node: rank r owns slice r and sums it from every peer's segment into
//     its own segment, own value first, then peers in rank order (deterministic). One peer per
//     pass keeps the loop vectorized.
//  3. across nodes (N > 1): the N ranks with local rank r all-reduce slice r (MPI).
//  4. sync; all-gather in the node: rank r copies every other slice q from rank q's segment.
//  5. sync: nobody reads rank r's segment any more, so its owner may write it again.
// Only rank r writes slice r of any segment before step 4; in step 4 rank r writes the other
// slices of its own segment, which no peer reads then. So no step races with another rank.
void AllreduceEngine::run_hierarchical(size_t offset, size_t count, DType wire) {
    NodeWindow& w = *win_;
    const int L = w.local_size(), r = w.local_rank();
    // Slice boundaries on 16-float (64-byte) multiples so two ranks never write one cache line.
    auto bound = [&](int q) {
        if (q >= L) return offset + count;
        size_t b = (count * (size_t)q / (size_t)L) & ~size_t(15);
        return offset + b;
    };
    const size_t lo = bound(r), hi = bound(r + 1), n = hi - lo;
    float* mine = w.segment(r);
    bool cross = topo_.num_nodes > 1;

    if (wire == DType::f32) {
        w.sync();
        for (int q = 0; q < L; ++q) {
            if (q == r) continue;
            float* __restrict acc = mine + lo;
            const float* __restrict src = w.segment(q) + lo;
            for (size_t i = 0; i < n; ++i) acc[i] += src[i];
        }
        if (cross && n > 0) cross_.allreduce_sum(mine + lo, n, DType::f32);
        w.sync();
        for (int q = 0; q < L; ++q)
            if (q != r) std::memcpy(mine + bound(q), w.segment(q) + bound(q), (bound(q + 1) - bound(q)) * sizeof(float));
        w.sync();
        return;
    }
    // bf16: stage my gradients as bf16; sum the bf16 slices in float32; publish the rounded sum.
    bf16* stage = w.staging(r);
    to_bf16(stage + offset, mine + offset, count);
    w.sync();
    from_bf16(mine + lo, stage + lo, n);
    for (int q = 0; q < L; ++q)
        if (q != r) add_bf16(mine + lo, w.staging(q) + lo, n);
    to_bf16(stage + lo, mine + lo, n);
    if (cross && n > 0) cross_.allreduce_sum(stage + lo, n, DType::bf16);
    w.sync();
    for (int q = 0; q < L; ++q) from_bf16(mine + bound(q), w.staging(q) + bound(q), bound(q + 1) - bound(q));
    w.sync();
}

} // namespace dptrain
