// --shard-optimizer (ZeRO-1) collectives on the AllreduceEngine: reduce-scatter into owners' shards
// and all-gather of the updated shards, flat or hierarchical. Not for: the replicated all-reduce
// (allreduce.cpp) or which rank owns what (shard_span).
#include "dptrain/comm/allreduce.h"

#include "dptrain/core/error.h"
#include "dptrain/core/flat.h"

#include <algorithm>
#include <cstring>

namespace dptrain {

void AllreduceEngine::shard(size_t count, float* recv) {
    if (count > capacity_) fatal(strfmt("sharded range of %zu floats beyond the buffer's %zu", count, capacity_));
    const int W = topo_.size;
    sharded_ = count;
    recv_ = recv;
    if (bf16_wire_) recv16_.assign(std::max<size_t>(1, shard_span(count, topo_.rank, W).size()), 0);
    counts_.assign((size_t)W, 0);  // gather_shards' block sizes
    if (!win_) return;
    // Every owner's (node, local rank).
    const int mine[2] = {topo_.node_index, topo_.local_rank};
    std::vector<int> all(2 * (size_t)W);
    world_.allgather(mine, sizeof mine, all.data());
    const int L = topo_.local_size, N = topo_.num_nodes;
    node_of_.assign((size_t)W, 0);
    local_of_.assign((size_t)W, 0);
    owner_at_.assign((size_t)N * L, 0);
    for (int q = 0; q < W; ++q) {
        node_of_[q] = all[2 * q];
        local_of_[q] = all[2 * q + 1];
        owner_at_[(size_t)node_of_[q] * L + local_of_[q]] = q;
    }
    cross_counts_.assign((size_t)N, 0);
    cross_displs_.assign((size_t)N, 0);
    for (int n = 0; n < N; ++n) {
        const Span s = shard_span(count, owner_at_[(size_t)n * L + topo_.local_rank], W);
        cross_counts_[n] = s.size();
        cross_displs_[n] = s.begin;
    }
}

// The bucket with the control floats straddles the sharded range's end: the part after is
// all-reduced. A bucket mostly lies in one shard, so one MPI_Reduce per owner: Open MPI's
// reduce-scatter with one non-zero count cost several all-reduces (docs/BENCHMARKS.md).
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

// The node's sums of [a, b) from the slices that hold them (slice p in rank p's segment or
// staging): into `to`, or with to = null into my own segment, for the exchange across nodes.
static void collect_node_sums(NodeWindow& w, size_t offset, size_t g, size_t a, size_t b, bool f32, float* to) {
    const int r = w.local_rank();
    for (int p = 0; p < w.local_size(); ++p) {
        const size_t x = std::max(a, w.slice_begin(offset, g, p)), y = std::min(b, w.slice_begin(offset, g, p + 1));
        if (x >= y || (!to && p == r)) continue;
        if (to && f32) std::memcpy(to + (x - a), w.segment(p) + x, (y - x) * sizeof(float));
        else if (to) from_bf16(to + (x - a), w.staging(p) + x, y - x);
        else if (f32) std::memcpy(w.segment(r) + x, w.segment(p) + x, (y - x) * sizeof(float));
        else std::memcpy(w.staging(r) + x, w.staging(p) + x, (y - x) * sizeof(bf16));
    }
}

// Walk-through (local rank r of L; N nodes; the sharded part [offset, e)):
//  1. (bf16: stage my gradients) sync: every rank's part is written.
//  2. rank r sums slice r from every segment in local rank order, as the replicated path does.
//  3. sync. For each owner q of local rank r and its piece [a, b), rank r collects the node's
//     sums of [a, b): N = 1, into q's recv; N > 1, into its own segment, then the ranks of
//     local rank r MPI_Reduce it to q's node, in the same owner order on every node.
//  4. sync: nobody reads rank r's segment any more.
// No race: only rank r writes its segment, and in step 3 peers read only their own slices of it.
void AllreduceEngine::run_sharded_hierarchical(size_t offset, size_t count, DType wire) {
    NodeWindow& w = *win_;
    const size_t end = offset + count, e = std::min(end, sharded_), g = e - offset;
    const int r = w.local_rank(), W = topo_.size;
    const bool cross = topo_.num_nodes > 1, f32 = wire == DType::f32;
    auto bound = [&](int p) { return w.slice_begin(offset, g, p); };
    const size_t lo = bound(r), n = bound(r + 1) - lo;
    float* mine = w.segment(r);
    bf16* stage = w.staging(r);

    if (!f32) to_bf16(stage + offset, mine + offset, g);
    w.sync();
    if (f32) {
        w.sum_floats(lo, n);
    } else {
        w.sum_staged(lo, n);
        to_bf16(stage + lo, mine + lo, n);
    }
    w.sync();
    for (int q = 0; q < W; ++q) {
        if (local_of_[q] != r) continue;
        const Span s = shard_span(sharded_, q, W);
        const size_t a = std::max(offset, s.begin), b = std::min(e, s.end);
        if (a >= b) continue;
        const bool own = q == topo_.rank;
        float* to = own ? recv_ + (a - s.begin) : nullptr;
        collect_node_sums(w, offset, g, a, b, f32, cross ? nullptr : to);
        if (!cross) continue;
        if (f32) {
            cross_.reduce_sum(mine + a, to, b - a, DType::f32, node_of_[q]);
        } else {
            bf16* to16 = own ? recv16_.data() + (a - s.begin) : nullptr;
            cross_.reduce_sum(stage + a, to16, b - a, DType::bf16, node_of_[q]);
            if (own) from_bf16(to, to16, b - a);
        }
    }
    w.sync();
    if (e < end) run(e, end - e, wire);
}

void AllreduceEngine::gather_shards(float* buf) {
    if (win_ && topo_.size > 1) {
        gather_shards_hierarchical(buf);
        return;
    }
    for (int q = 0; q < topo_.size; ++q) counts_[(size_t)q] = shard_span(sharded_, q, topo_.size).size();
    world_.allgather(nullptr, buf, counts_.data(), DType::f32);
}

// 1. N > 1: the ranks of local rank r all-gather their shards across nodes, in place.
// 2. Rank r copies local rank r's shards (all nodes') into its segment; sync. (Safe: every
//    reduce-scatter ended with a sync, so no peer still reads it.)
// 3. Rank r copies the other local ranks' shards from their segments; sync, so no peer still
//    reads rank r's segment when backward writes into it again.
void AllreduceEngine::gather_shards_hierarchical(float* buf) {
    NodeWindow& w = *win_;
    const int L = w.local_size(), r = w.local_rank(), N = topo_.num_nodes, W = topo_.size;
    if (N > 1) cross_.allgather_in_place(buf, cross_counts_.data(), cross_displs_.data(), DType::f32);
    auto copy_shards = [&](int p, float* to, const float* from) {
        for (int node = 0; node < N; ++node) {
            const Span s = shard_span(sharded_, owner_at_[(size_t)node * L + p], W);
            std::memcpy(to + s.begin, from + s.begin, s.size() * sizeof(float));
        }
    };
    copy_shards(r, w.segment(r), buf);
    w.sync();
    for (int p = 0; p < L; ++p)
        if (p != r) copy_shards(p, buf, w.segment(p));
    w.sync();
}

} // namespace dptrain
