// DeviceStep: NCCL sums, norm, clipping and update of a GPU-resident run (device_step.h). The update
// is Optimizer::step's, view by view, in one launch. Not for: the kernels (optim.cu).
#include "dptrain/backend/cuda/device_step.h"

#include "check.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/core/clock.h"
#include "dptrain/comm/nccl.h"

#include <algorithm>
#include <climits>
#include <cmath>

#include <sched.h>

namespace dptrain {

DeviceStep::DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper, const Sum& how)
    : model_(model), layout_(layout), hyper_(hyper) {
    agree(how);
    make_communicators(how);
    allocate_state(how.bucket_mb);
}

// Every rank decides together before any (collective) NCCL set-up: the state fits on every GPU,
// and hierarchical has equal nodes. A refusal on one rank then ends the job with one line.
void DeviceStep::agree(const Sum& how) {
    const Topology* topo = how.topo;
    const size_t P = layout_.total;
    sharded_ = how.shard;
    shard_ = !how.shard ? Span{0, P}
             : topo     ? shard_span(P, topo->rank, topo->size)
                        : shard_span(P, how.shard_rank, how.shard_ranks);
    const double need = (hyper_.kind == Optimizer::Kind::adamw ? 8.0 : 4.0) * (double)shard_.size(),
                 GiB = 1073741824.0;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const bool fits = need + (1 << 20) <= (double)free_bytes;
    const char* state = hyper_.kind == Optimizer::Kind::adamw ? "AdamW" : "SGD";
    // [0], [1] the largest and smallest node (hierarchical's cross groups need one rank per node),
    // [2] the lowest rank whose GPU lacks the room.
    int agreed[3] = {1, -1, fits ? INT_MAX : 0};
    if (topo) {
        world_size_ = topo->size;
        num_nodes_ = topo->num_nodes;
        local_size_ = topo->local_size;
        world_ = topo->world;
        // Sharded, the sums go to the owners over the world.
        hierarchical_ = how.algo == AllreduceAlgo::hierarchical && !sharded_;
        agreed[0] = topo->local_size;
        agreed[1] = -topo->local_size;
        agreed[2] = fits ? -INT_MAX : -topo->rank;  // the MAX of the negation is the lowest rank
        MpiCommunicator(topo->world).allreduce(agreed, 3, ReduceOp::max);
        agreed[2] = -agreed[2];
    }
    if (hierarchical_ && agreed[0] != -agreed[1])
        throw UserError(strfmt("--allreduce hierarchical needs the same number of ranks on every node; these "
                               "nodes hold between %d and %d; use --allreduce flat or auto",
                               -agreed[1], agreed[0]));
    if (!fits)
        throw UserError(strfmt("--gpu-state device: the %s state needs %.2f GiB on the GPU beside the model, and %.2f "
                               "GiB of %.2f GiB are free; lower --batch-size, or keep the state on the host with "
                               "--gpu-state host",
                               state, need / GiB, (double)free_bytes / GiB, (double)total_bytes / GiB));
    if (agreed[2] != INT_MAX)
        throw UserError(strfmt("--gpu-state device: rank %d's GPU has no room for the %s state beside the model; "
                               "lower --batch-size, or keep the state on the host with --gpu-state host",
                               agreed[2], state));
}

void DeviceStep::make_communicators(const Sum& how) {
    const Topology* topo = how.topo;
    if (world_size_ > 1 && nccl_library_version().empty())
        throw UserError("--gpu-state device: this build has no NCCL, which several ranks need to sum gradients on "
                        "their GPUs; use --gpu-state host, or build where NCCL is installed");
    const bool one = how.nccl_for_one;
    if (topo && hierarchical_) {
        // The node's communicator first on every node, then the cross-node ones: the same order everywhere.
        if (local_size_ > 1 || one) node_ = std::make_unique<NcclCommunicator>(topo->node);
        if (num_nodes_ > 1 || one)
            cross_ = std::make_unique<NcclCommunicator>(topo->cross, node_ ? node_->stream() : nullptr);
        comm_ = node_ ? node_.get() : cross_.get();
    } else if (topo && (world_size_ > 1 || one)) {
        nccl_ = std::make_unique<NcclCommunicator>(topo->world);
        comm_ = nccl_.get();
    }
}

void DeviceStep::allocate_state(double bucket_mb) {
    const size_t P = layout_.total, n = shard_.size();
    CUDA_CHECK(cudaMalloc(&m_, std::max<size_t>(n, 1) * sizeof(float)));
    if (hyper_.kind == Optimizer::Kind::adamw) CUDA_CHECK(cudaMalloc(&v_, std::max<size_t>(n, 1) * sizeof(float)));
    // The views' parts in the shard, at offsets from its start: the state holds the shard alone.
    std::vector<cuda::UpdateChunk> views;
    for (const ParamView& pv : layout_.views) {
        const size_t b = std::max(pv.offset, shard_.begin), e = std::min(pv.offset + pv.size, shard_.end);
        if (b < e) views.push_back({b - shard_.begin, e - b, pv.decay ? 1u : 0u});
    }
    const std::vector<cuda::UpdateChunk> chunks = cuda::update_chunks(views);
    n_chunks_ = (int)chunks.size();
    size_t covered = 0;  // the chunks back to back from 0 to the shard's end: each written once
    for (const cuda::UpdateChunk& c : chunks) covered = c.offset == covered ? covered + c.size : n + 1;
    // Only an update of every parameter writes the bf16 copy: other ranks' shards arrive in fp32.
    whole_ = covered == n && n == P;
    CUDA_CHECK(cudaMalloc(&chunks_, std::max<size_t>(chunks.size(), 1) * sizeof(cuda::UpdateChunk)));
    if (!chunks.empty()) {  // on the model's stream, where the update reads it, and done before it returns
        cudaStream_t s = model_.context().stream();
        CUDA_CHECK(cudaMemcpyAsync(chunks_, chunks.data(), chunks.size() * sizeof(cuda::UpdateChunk),
                                   cudaMemcpyHostToDevice, s));
        CUDA_CHECK(cudaStreamSynchronize(s));
    }
    CUDA_CHECK(cudaMalloc(&norm_, sizeof(double)));
    CUDA_CHECK(cudaMalloc(&partial_, cuda::kNormBlocks * sizeof(double)));
    CUDA_CHECK(cudaMallocHost(&norm_host_, sizeof(double)));
    CUDA_CHECK(cudaEventCreateWithFlags(&grads_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&updated_, cudaEventDisableTiming));
    buckets_ = cut_buckets(P, bucket_mb);  // as GradSync cuts them
    bucket_ready_.resize(buckets_.size(), nullptr);
    for (auto& e : bucket_ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    if (!sharded_) return;
    // Each bucket's values by owner: shards are consecutive in rank order, so a bucket's pieces are too.
    const int W = world_size_;
    shard_counts_.assign((size_t)W, 0);
    squares_.assign((size_t)W, 0.0);
    owner_counts_.assign(buckets_.size(), std::vector<size_t>((size_t)W, 0));
    for (int q = 0; q < W; ++q) {
        const Span sq = shard_span(P, q, W);
        shard_counts_[(size_t)q] = sq.size();
        for (size_t b = 0; b < buckets_.size(); ++b) {
            const size_t lo = std::max(sq.begin, buckets_[b].begin), hi = std::min(sq.end, buckets_[b].end);
            owner_counts_[b][(size_t)q] = lo < hi ? hi - lo : 0;
        }
    }
}

DeviceStep::DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper)
    : DeviceStep(model, layout, hyper, Sum()) {}

DeviceStep::~DeviceStep() {
    cross_.reset();  // before node_, whose stream it uses
    node_.reset();
    nccl_.reset();
    if (grads_ready_) cudaEventDestroy(grads_ready_);
    if (reduced_) cudaEventDestroy(reduced_);
    if (updated_) cudaEventDestroy(updated_);
    for (auto* e : bucket_ready_)
        if (e) cudaEventDestroy(e);
    if (norm_host_) cudaFreeHost(norm_host_);
    for (void* p : {(void*)m_, (void*)v_, (void*)norm_, (void*)partial_, (void*)chunks_})
        if (p) cudaFree(p);
}

static void check_shard(const Optimizer& opt, Span mine) {
    const Span held = opt.shard();
    if (held.begin != mine.begin || held.end != mine.end)
        fatal(strfmt("the optimizer holds the state of floats %zu..%zu, the GPU step keeps %zu..%zu", held.begin,
                     held.end, mine.begin, mine.end));
}

void DeviceStep::upload(const float* params, const Optimizer& opt) {
    check_shard(opt, shard_);
    auto& o = const_cast<Optimizer&>(opt);  // m() and v() have no const accessors; nothing is written
    const size_t bytes = layout_.total * sizeof(float), state = shard_.size() * sizeof(float);
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(model_.device_params(), params, bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(m_, o.m().data(), state, cudaMemcpyHostToDevice, s));
    if (v_) CUDA_CHECK(cudaMemcpyAsync(v_, o.v().data(), state, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    model_.set_rounded_current(false);  // the next forward rounds the new parameters
}

void DeviceStep::download(float* params, Optimizer& opt) {
    check_shard(opt, shard_);
    const size_t bytes = layout_.total * sizeof(float), state = shard_.size() * sizeof(float);
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(params, model_.device_params(), bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(opt.m().data(), m_, state, cudaMemcpyDeviceToHost, s));
    if (v_) CUDA_CHECK(cudaMemcpyAsync(opt.v().data(), v_, state, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void DeviceStep::download_params(float* params) {
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(params, model_.device_params(), layout_.total * sizeof(float), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
}

void DeviceStep::poison() {
    const float nan = NAN;
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(model_.device_grads(), &nan, sizeof nan, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));  // &nan is a local: the copy must be done before it goes
}

void DeviceStep::wait_backward() {
    CUDA_CHECK(cudaEventRecord(grads_ready_, model_.context().stream()));
    CUDA_CHECK(cudaEventSynchronize(grads_ready_));
}

// Queued on NCCL's stream behind an event on the model's. Every rank launches buckets in backward's
// order, so the collectives match.
void DeviceStep::launch(size_t b) {
    CUDA_CHECK(cudaEventRecord(bucket_ready_[b], model_.context().stream()));
    CUDA_CHECK(cudaStreamWaitEvent(comm_->stream(), bucket_ready_[b], 0));
    if (sharded_) reduce_to_owners(b);
    else sum(model_.device_grads() + buckets_[b].begin, buckets_[b].end - buckets_[b].begin);
}

void DeviceStep::sum(float* g, size_t n) {
    if (!hierarchical_) return nccl_->allreduce_sum(g, n, DType::f32);
    // L blocks of a multiple of 32 values (128 bytes, NCCL's fastest): reduce-scatter in the node,
    // all-reduce of this rank's block across nodes, all-gather; the tail in the node, then across.
    const size_t L = node_ ? (size_t)node_->size() : 1, block = (n / L) & ~size_t(31), body = block * L;
    if (block > 0) {
        if (node_) node_->reduce_scatter_block(g, block, DType::f32);
        if (cross_) cross_->allreduce_sum(g + (node_ ? (size_t)node_->rank() : 0) * block, block, DType::f32);
        if (node_) node_->allgather_block(g, block, DType::f32);
    }
    if (body < n) {
        if (node_) node_->allreduce_sum(g + body, n - body, DType::f32);
        if (cross_) cross_->allreduce_sum(g + body, n - body, DType::f32);
    }
}

// One grouped NCCL reduce per owner of a piece, in place. Non-owners' copies are left part-summed:
// nothing reads them (norm and update read this rank's shard).
void DeviceStep::reduce_to_owners(size_t b) {
    const std::vector<size_t>& counts = owner_counts_[b];
    float* g = model_.device_grads() + buckets_[b].begin;
    size_t mine = 0;  // this rank's piece starts after the pieces of the ranks before it
    for (int q = 0; q < nccl_->rank(); ++q) mine += counts[(size_t)q];
    nccl_->reduce_scatter_sum(g, g + mine, counts.data(), DType::f32);
}

// On NCCL's stream behind the update's event; the model's stream waits for it, and the host polls
// NCCL's errors until done (a failed peer ends the job).
void DeviceStep::gather_params() {
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaEventRecord(updated_, s));
    CUDA_CHECK(cudaStreamWaitEvent(comm_->stream(), updated_, 0));
    nccl_->allgather(nullptr, model_.device_params(), shard_counts_.data(), DType::f32);
    CUDA_CHECK(cudaEventRecord(reduced_, comm_->stream()));
    CUDA_CHECK(cudaStreamWaitEvent(s, reduced_, 0));
    wait_sums();
}

// Until every sum queued is done, polling each communicator's errors (they share one stream).
void DeviceStep::wait_sums() {
    for (;;) {
        bool idle = true;
        for (NcclCommunicator* c : {nccl_.get(), node_.get(), cross_.get()})
            if (c) idle = c->poll() && idle;
        if (idle) return;
        sched_yield();
    }
}

void DeviceStep::grads_ready_from(size_t offset) {
    if (!comm_) return;
    while (launched_ < buckets_.size() && buckets_[launched_].begin >= offset) launch(launched_++);
}

double DeviceStep::allreduce() {
    if (!comm_) return 0.0;
    cudaStream_t s = model_.context().stream();
    double t0 = now_seconds();
    // The host waits too (polling NCCL's errors): the step's decisions need the summed norm anyway.
    while (launched_ < buckets_.size()) launch(launched_++);
    launched_ = 0;
    CUDA_CHECK(cudaEventRecord(reduced_, comm_->stream()));
    CUDA_CHECK(cudaStreamWaitEvent(s, reduced_, 0));
    wait_sums();
    double t = now_seconds() - t0;
    comm_seconds_ += t;
    return t;
}

double DeviceStep::norm() {
    cudaStream_t s = model_.context().stream();
    cuda::sum_squares(norm_, partial_, model_.device_grads() + shard_.begin, shard_.size(), s);
    CUDA_CHECK(cudaMemcpyAsync(norm_host_, norm_, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    if (!sharded_ || world_ == MPI_COMM_NULL || world_size_ == 1) return std::sqrt(*norm_host_);
    // Added in rank order, as the host path: every rank computes the same norm.
    MpiCommunicator(world_).allgather(norm_host_, sizeof(double), squares_.data());
    double sum = 0.0;
    for (double q : squares_) sum += q;
    return std::sqrt(sum);
}

double DeviceStep::update(double norm, double max_norm, double lr, long t) {
    cudaStream_t s = model_.context().stream();
    float* p = model_.device_params() + shard_.begin;  // the chunks' offsets are from the shard's start
    float* g = model_.device_grads() + shard_.begin;
    // clip_grad_norm's factor, applied as each gradient is read: scaling's bits, without its pass.
    const float gscale = max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
    // In bf16 the update also writes the model's rounded copy, saving the next forward's pass.
    const float wd = (float)hyper_.weight_decay;
    bf16* p16 = whole_ ? model_.rounded_params() : nullptr;
    if (hyper_.kind == Optimizer::Kind::adamw)
        cuda::adamw_update_chunks(p, g, m_, v_, chunks_, n_chunks_, (float)lr, (float)hyper_.beta1,
                                  (float)hyper_.beta2, (float)hyper_.eps, wd, t, gscale, s, p16);
    else
        cuda::sgd_momentum_update_chunks(p, g, m_, chunks_, n_chunks_, (float)lr, (float)hyper_.momentum, wd, gscale,
                                         s, p16);
    double waited = 0.0;
    if (sharded_ && comm_) {
        CUDA_CHECK(cudaStreamSynchronize(s));  // the update done first: the wait below is the gather's alone
        const double t0 = now_seconds();
        gather_params();
        waited = now_seconds() - t0;
        comm_seconds_ += waited;
    }
    model_.set_rounded_current(p16 != nullptr);
    CUDA_CHECK(cudaStreamSynchronize(s));  // the optimizer phase times the update itself
    return waited;
}

double DeviceStep::take_comm_seconds() {
    double c = comm_seconds_;
    comm_seconds_ = 0.0;
    return c;
}

std::string DeviceStep::describe() const {
    if (!comm_ && sharded_)
        return strfmt("on the GPU (no other rank: nothing to sum; optimizer state sharded: floats %zu..%zu)",
                      shard_.begin, shard_.end);
    if (!comm_) return "on the GPU (one rank: nothing to sum)";
    const char* plural = buckets_.size() == 1 ? "" : "s";
    if (sharded_)
        return strfmt("NCCL reduce of each bucket to its shards' owners, then all-gather of the parameters, over %d "
                      "rank%s on device buffers; optimizer state sharded: floats %zu..%zu (%.1f of %.1f MiB a state "
                      "tensor); %zu bucket%s",
                      world_size_, world_size_ == 1 ? "" : "s", shard_.begin, shard_.end,
                      shard_.size() * 4.0 / (1 << 20), layout_.total * 4.0 / (1 << 20), buckets_.size(), plural);
    if (hierarchical_)
        return strfmt("NCCL hierarchical on device buffers: reduce-scatter among each node's %d rank%s, all-reduce "
                      "across %d node%s, all-gather; %zu bucket%s",
                      local_size_, local_size_ == 1 ? "" : "s", num_nodes_, num_nodes_ == 1 ? "" : "s",
                      buckets_.size(), plural);
    return strfmt("NCCL all-reduce over %d rank%s on device buffers (NCCL's own rings and trees), %zu bucket%s",
                  world_size_, world_size_ == 1 ? "" : "s", buckets_.size(), plural);
}

} // namespace dptrain
