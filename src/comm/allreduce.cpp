// Flat and hierarchical all-reduce over host memory, with the node's shared-memory window.
// Not for: the sharded form (sharded_allreduce.cpp) or buckets (gradsync.cpp).
#include "dptrain/comm/allreduce.h"

#include "dptrain/core/check.h"
#include "dptrain/core/error.h"
#include "dptrain/core/flat.h"

#include <algorithm>
#include <cstring>

namespace dptrain {

// NodeWindow

NodeWindow::NodeWindow(MPI_Comm node, size_t capacity, bool staged) : capacity_(capacity) {
    // Whole pages, so each lies in its owner's pages.
    size_t bytes = capacity * (sizeof(float) + (staged ? sizeof(bf16) : 0));
    bytes = (bytes + 4095) / 4096 * 4096;
    if (bytes == 0) bytes = 4096;
    // Open MPI backs it with a /dev/shm file: a container's 64 MiB default fits only a small model.
    const double MiB = 1048576.0;
    win_ = std::make_unique<SharedWindow>(
        node, bytes, /*own_pages=*/true, strfmt("the all-reduce's node-shared gradient buffer (%.1f MiB a rank)", bytes / MiB),
        "give /dev/shm more room (a container's default is 64 MiB: docker run --shm-size, or a memory-backed emptyDir "
        "on /dev/shm in Kubernetes), or use --allreduce flat");
    seg_.resize(local_size());
    stg_.resize(local_size());
    for (int q = 0; q < local_size(); ++q) {
        seg_[q] = reinterpret_cast<float*>(win_->segment(q));
        stg_[q] = staged ? reinterpret_cast<bf16*>(win_->segment(q) + capacity * sizeof(float)) : nullptr;
    }
    // Touch my own pages now (zero gradients), not on the first step.
    std::memset(win_->segment(local_rank()), 0, bytes);
    sync();
}

size_t NodeWindow::slice_begin(size_t offset, size_t count, int q) const {
    if (q >= local_size()) return offset + count;
    return offset + ((count * (size_t)q / (size_t)local_size()) & ~size_t(15));
}

// ((s0 + s1) + s2) + ... in local rank order. Other ranks than 0 sum through a stack block, as
// their own values are not first.
void NodeWindow::sum_floats(size_t lo, size_t n) {
    const int L = local_size(), r = local_rank();
    float* mine = seg_[r] + lo;
    if (r == 0) {
        for (int q = 1; q < L; ++q) {
            float* __restrict acc = mine;
            const float* __restrict src = seg_[q] + lo;
            for (size_t i = 0; i < n; ++i) acc[i] += src[i];
        }
        return;
    }
    constexpr size_t kBlock = 1024;
    float acc[kBlock];
    for (size_t b = 0; b < n; b += kBlock) {
        const size_t m = std::min(kBlock, n - b);
        std::memcpy(acc, seg_[0] + lo + b, m * sizeof(float));
        for (int q = 1; q < L; ++q) {
            const float* __restrict src = seg_[q] + lo + b;
            for (size_t i = 0; i < m; ++i) acc[i] += src[i];
        }
        std::memcpy(mine + b, acc, m * sizeof(float));
    }
}

void NodeWindow::sum_staged(size_t lo, size_t n) {
    float* mine = seg_[local_rank()] + lo;
    from_bf16(mine, stg_[0] + lo, n);
    for (int q = 1; q < local_size(); ++q) add_bf16(mine, stg_[q] + lo, n);
}

// AllreduceEngine

AllreduceEngine::AllreduceEngine(AllreduceAlgo algo, const Topology& topo, size_t capacity, size_t threshold_bytes,
                                 bool bf16_wire)
    : algo_(algo), topo_(topo), capacity_(capacity), threshold_(threshold_bytes), world_(topo.world),
      cross_(topo.cross), bf16_wire_(bf16_wire) {
    int ls[2] = {topo.local_size, -topo.local_size};
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, ls, 2, MPI_INT, MPI_MAX, topo.world));
    int max_local = ls[0], min_local = -ls[1];
    bool equal = max_local == min_local;
    if (algo_ == Algo::hierarchical && !equal)
        throw UserError(strfmt("--allreduce hierarchical needs the same number of ranks on every node (found %d to %d); "
                               "launch equal ranks per node or use --allreduce flat",
                               min_local, max_local));
    // auto: the window pays off only with several ranks per node.
    if (algo_ == Algo::automatic && (!equal || max_local == 1 || topo.spans_hosts)) algo_ = Algo::flat;
    if (algo_ != Algo::flat) topo.require_one_host("--allreduce hierarchical");
    if (algo_ != Algo::flat) {
        win_ = std::make_unique<NodeWindow>(topo.node, capacity, bf16_wire);
        buf_ = win_->segment(win_->local_rank());
    } else {
        own_.assign(std::max<size_t>(capacity, 1), 0.0f);
        buf_ = own_.data();
    }
    if (algo_ != Algo::hierarchical && bf16_wire) wire_.assign(std::max<size_t>(capacity, 1), 0);
}

AllreduceEngine::~AllreduceEngine() = default;

std::string AllreduceEngine::describe() const {
    std::string shape = strfmt("%d node%s x %d rank%s", topo_.num_nodes, topo_.num_nodes == 1 ? "" : "s",
                               topo_.local_size, topo_.local_size == 1 ? "" : "s");
    switch (algo_) {
    case Algo::flat: return "flat (MPI over " + std::to_string(topo_.size) + " ranks)";
    case Algo::hierarchical:
        return "hierarchical (" + shape + ": shared memory in the node" + (topo_.num_nodes > 1 ? ", MPI across)" : ")");
    case Algo::automatic:
        return strfmt("auto (%s): hierarchical from %zu KiB, flat below", shape.c_str(), threshold_ >> 10);
    }
    return "?";
}

const char* AllreduceEngine::path_for(size_t count, DType wire) const {
    if (sharded_ > 0) return "reduce-scatter";
    return windowed(count, wire) ? "hierarchical" : "flat";
}

void AllreduceEngine::run(size_t offset, size_t count, DType wire) {
    if (offset + count > capacity_) fatal(strfmt("allreduce range %zu+%zu beyond the buffer's %zu", offset, count, capacity_));
    if (wire == DType::bf16 && !bf16_wire_) fatal("AllreduceEngine::run: bf16 on the wire of an engine made without its staging");
    if (sharded_ > 0 && offset < sharded_) {  // on one rank too: the shard's sums go to recv
        if (win_ && windowed(count, wire)) run_sharded_hierarchical(offset, count, wire);
        else run_sharded(offset, count, wire);
        return;
    }
    if (topo_.size == 1 || count == 0) {
        if (wire == DType::bf16)  // the result is the bf16-rounded sum on any rank count
            for (size_t i = offset; i < offset + count; ++i) buf_[i] = bf16_to_float(float_to_bf16(buf_[i]));
        return;
    }
    if (windowed(count, wire)) run_hierarchical(offset, count, wire);
    else run_flat(offset, count, wire);
}

bool AllreduceEngine::windowed(size_t count, DType wire) const {
    return algo_ == Algo::hierarchical || (algo_ == Algo::automatic && count * dtype_size(wire) >= threshold_);
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

// Walk-through (local rank r of L; N nodes):
//  1. sync: every rank's gradients for the range are written (bf16: staged).
//  2. rank r sums slice r from every segment in local rank order (sum_floats: deterministic, and
//     the same sums as the sharded path's, which slices alike).
//  3. N > 1: the ranks of local rank r all-reduce slice r across nodes.
//  4. sync; rank r copies every other slice q from rank q's segment.
//  5. sync: nobody reads rank r's segment any more, so it may be written again.
// No race: before step 4 only rank r writes slice r; in step 4 no peer reads what r writes.
void AllreduceEngine::run_hierarchical(size_t offset, size_t count, DType wire) {
    NodeWindow& w = *win_;
    const int L = w.local_size(), r = w.local_rank();
    auto bound = [&](int q) { return w.slice_begin(offset, count, q); };
    const size_t lo = bound(r), n = bound(r + 1) - lo;
    float* mine = w.segment(r);
    const bool cross = topo_.num_nodes > 1;

    if (wire == DType::f32) {
        w.sync();
        w.sum_floats(lo, n);
        if (cross && n > 0) cross_.allreduce_sum(mine + lo, n, DType::f32);
        w.sync();
        for (int q = 0; q < L; ++q)
            if (q != r) std::memcpy(mine + bound(q), w.segment(q) + bound(q), (bound(q + 1) - bound(q)) * sizeof(float));
        w.sync();
        return;
    }
    // bf16: sum the staged slices in float32; publish the rounded sum.
    bf16* stage = w.staging(r);
    to_bf16(stage + offset, mine + offset, count);
    w.sync();
    w.sum_staged(lo, n);
    to_bf16(stage + lo, mine + lo, n);
    if (cross && n > 0) cross_.allreduce_sum(stage + lo, n, DType::bf16);
    w.sync();
    for (int q = 0; q < L; ++q) from_bf16(mine + bound(q), w.staging(q) + bound(q), bound(q + 1) - bound(q));
    w.sync();
}

} // namespace dptrain
