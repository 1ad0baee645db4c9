// DeviceStep: all-reduce (NCCL), norm, clipping and optimizer update of a GPU-resident run, on the
// model's device buffers. The update computes what Optimizer::step computes view by view (weight
// decay on the views that take it), in one launch over the views cut into chunks, and the clipping
// mirrors clip_grad_norm, with the CUDA twins of their ops.
#include "dptrain/backend/cuda/device_step.h"

#include "check.h"
#include "dptrain/comm/communicator.h"
#include "dptrain/core/error.h"
#include "dptrain/core/clock.h"
#ifdef DPTRAIN_HAVE_NCCL
#include "dptrain/comm/nccl.h"
#endif

#include <algorithm>
#include <climits>
#include <cmath>

#include <sched.h>

namespace dptrain {

#ifndef DPTRAIN_HAVE_NCCL
class NcclCommunicator {};  // never made without NCCL; complete so the unique_ptr can be destroyed
#endif

DeviceStep::DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper, const Sum& how)
    : model_(model), layout_(layout), hyper_(hyper) {
    agree(how);
    make_communicators(how);
    allocate_state(how.bucket_mb);
}

// Every rank decides together before any NCCL communicator is made (that is collective): the
// optimizer state beside the model's buffers must fit on every GPU (one clear line when it does
// not), and hierarchical needs equal nodes.
void DeviceStep::agree(const Sum& how) {
    const Topology* topo = how.topo;
    const size_t P = layout_.total;
    const double need = (hyper_.kind == Optimizer::Kind::adamw ? 8.0 : 4.0) * (double)P, GiB = 1073741824.0;
    size_t free_bytes = 0, total_bytes = 0;
    CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const bool fits = need + (1 << 20) <= (double)free_bytes;
    const char* state = hyper_.kind == Optimizer::Kind::adamw ? "AdamW" : "SGD";
    // [0], [1] the largest and smallest node (hierarchical needs them equal, so that each
    // cross-node group has one rank per node), [2] the lowest rank whose GPU lacks the room.
    int agreed[3] = {1, -1, fits ? INT_MAX : 0};
    if (topo) {
        world_size_ = topo->size;
        num_nodes_ = topo->num_nodes;
        local_size_ = topo->local_size;
        hierarchical_ = how.algo == AllreduceAlgo::hierarchical;
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
#ifdef DPTRAIN_HAVE_NCCL
    const bool one = how.nccl_for_one;
    if (topo && hierarchical_) {
        // The node's communicator first, on every node at once, then the cross-node ones.
        if (local_size_ > 1 || one) node_ = std::make_unique<NcclCommunicator>(topo->node);
        if (num_nodes_ > 1 || one)
            cross_ = std::make_unique<NcclCommunicator>(topo->cross, node_ ? node_->stream() : nullptr);
        comm_ = node_ ? node_.get() : cross_.get();
    } else if (topo && (world_size_ > 1 || one)) {
        nccl_ = std::make_unique<NcclCommunicator>(topo->world);
        comm_ = nccl_.get();
    }
#else
    (void)topo;
    if (world_size_ > 1)
        throw UserError("--gpu-state device: this build has no NCCL, which several ranks need to sum gradients on "
                        "their GPUs; use --gpu-state host, or build where NCCL is installed");
#endif
}

// The optimizer state, the update's chunks, the norm's scratch, and an event per bucket.
void DeviceStep::allocate_state(double bucket_mb) {
    const size_t P = layout_.total;
    CUDA_CHECK(cudaMalloc(&m_, std::max<size_t>(P, 1) * sizeof(float)));
    if (hyper_.kind == Optimizer::Kind::adamw) CUDA_CHECK(cudaMalloc(&v_, std::max<size_t>(P, 1) * sizeof(float)));
    // The update runs in one launch over the views cut into chunks (cuda::update_chunks).
    std::vector<cuda::UpdateChunk> views;
    for (const ParamView& pv : layout_.views) views.push_back({pv.offset, pv.size, pv.decay ? 1u : 0u});
    const std::vector<cuda::UpdateChunk> chunks = cuda::update_chunks(views);
    n_chunks_ = (int)chunks.size();
    size_t covered = 0;  // the chunks back to back from 0 to the last parameter: each written once
    for (const cuda::UpdateChunk& c : chunks) covered = c.offset == covered ? covered + c.size : P + 1;
    whole_ = covered == P;
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
    buckets_ = cut_buckets(P, bucket_mb);  // as GradSync cuts them
    bucket_ready_.resize(buckets_.size(), nullptr);
    for (auto& e : bucket_ready_) CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
}

DeviceStep::DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper)
    : DeviceStep(model, layout, hyper, Sum()) {}

DeviceStep::~DeviceStep() {
    cross_.reset();  // before node_, whose stream it uses
    node_.reset();
    nccl_.reset();
    if (grads_ready_) cudaEventDestroy(grads_ready_);
    if (reduced_) cudaEventDestroy(reduced_);
    for (auto* e : bucket_ready_)
        if (e) cudaEventDestroy(e);
    if (norm_host_) cudaFreeHost(norm_host_);
    for (void* p : {(void*)m_, (void*)v_, (void*)norm_, (void*)partial_, (void*)chunks_})
        if (p) cudaFree(p);
}

void DeviceStep::upload(const float* params, const Optimizer& opt) {
    auto& o = const_cast<Optimizer&>(opt);  // m() and v() have no const accessors; nothing is written
    const size_t bytes = layout_.total * sizeof(float);
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(model_.device_params(), params, bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaMemcpyAsync(m_, o.m().data(), bytes, cudaMemcpyHostToDevice, s));
    if (v_) CUDA_CHECK(cudaMemcpyAsync(v_, o.v().data(), bytes, cudaMemcpyHostToDevice, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    model_.set_rounded_current(false);  // the next forward rounds the new parameters
}

void DeviceStep::download(float* params, Optimizer& opt) {
    const size_t bytes = layout_.total * sizeof(float);
    cudaStream_t s = model_.context().stream();
    CUDA_CHECK(cudaMemcpyAsync(params, model_.device_params(), bytes, cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaMemcpyAsync(opt.m().data(), m_, bytes, cudaMemcpyDeviceToHost, s));
    if (v_) CUDA_CHECK(cudaMemcpyAsync(opt.v().data(), v_, bytes, cudaMemcpyDeviceToHost, s));
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

// Bucket b's sum, queued on NCCL's stream behind an event at this point of the model's stream.
// Every rank launches the buckets in the same order (backward's), so the collectives match.
void DeviceStep::launch(size_t b) {
#ifdef DPTRAIN_HAVE_NCCL
    CUDA_CHECK(cudaEventRecord(bucket_ready_[b], model_.context().stream()));
    CUDA_CHECK(cudaStreamWaitEvent(comm_->stream(), bucket_ready_[b], 0));
    sum(model_.device_grads() + buckets_[b].begin, buckets_[b].end - buckets_[b].begin);
#else
    (void)b;
#endif
}

void DeviceStep::sum(float* g, size_t n) {
#ifdef DPTRAIN_HAVE_NCCL
    if (!hierarchical_) return nccl_->allreduce_sum(g, n, DType::f32);
    // L blocks, one per local rank: each rank sums its block over the node, then over the nodes
    // with the ranks that own the same block there, then the node gathers them. The values past
    // the L blocks (fewer than 32 L) are summed in the node, then across the nodes.
    // Blocks are multiples of 32 values (128 bytes), which NCCL moves fastest.
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
#else
    (void)g;
    (void)n;
#endif
}

// Until every sum queued is done, polling each communicator's errors (they share one stream).
void DeviceStep::wait_sums() {
#ifdef DPTRAIN_HAVE_NCCL
    for (;;) {
        bool idle = true;
        for (NcclCommunicator* c : {nccl_.get(), node_.get(), cross_.get()})
            if (c) idle = c->poll() && idle;
        if (idle) return;
        sched_yield();
    }
#endif
}

void DeviceStep::grads_ready_from(size_t offset) {
    if (!comm_) return;
    while (launched_ < buckets_.size() && buckets_[launched_].begin >= offset) launch(launched_++);
}

double DeviceStep::allreduce() {
    if (!comm_) return 0.0;
#ifdef DPTRAIN_HAVE_NCCL
    cudaStream_t s = model_.context().stream();
    double t0 = now_seconds();
    // The buckets backward did not start, then the model's stream waits for all the sums. The
    // host waits too (polling NCCL's errors, so a failed peer ends the job), because the step's
    // decisions need the summed gradient's norm anyway.
    while (launched_ < buckets_.size()) launch(launched_++);
    launched_ = 0;
    CUDA_CHECK(cudaEventRecord(reduced_, comm_->stream()));
    CUDA_CHECK(cudaStreamWaitEvent(s, reduced_, 0));
    wait_sums();
    double t = now_seconds() - t0;
    comm_seconds_ += t;
    return t;
#else
    return 0.0;
#endif
}

double DeviceStep::norm() {
    cudaStream_t s = model_.context().stream();
    cuda::sum_squares(norm_, partial_, model_.device_grads(), layout_.total, s);
    CUDA_CHECK(cudaMemcpyAsync(norm_host_, norm_, sizeof(double), cudaMemcpyDeviceToHost, s));
    CUDA_CHECK(cudaStreamSynchronize(s));
    return std::sqrt(*norm_host_);
}

void DeviceStep::update(double norm, double max_norm, double lr, long t) {
    cudaStream_t s = model_.context().stream();
    float* p = model_.device_params();
    float* g = model_.device_grads();
    // Clipping as clip_grad_norm's factor, taken by the update as it reads each gradient (the bits
    // of scaling first, without a pass of its own over the gradients).
    const float gscale = max_norm > 0 && norm > max_norm ? (float)(max_norm / (norm + 1e-6)) : 1.0f;
    // Every view in one launch, each as the per-view update would update it (the same bits). In
    // bf16 the update also writes each new value rounded into the model's copy, which the next
    // forward would otherwise make in a pass of its own (at GPT-2 124M, 0.5 GB less a step).
    const float wd = (float)hyper_.weight_decay;
    bf16* p16 = whole_ ? model_.rounded_params() : nullptr;
    if (hyper_.kind == Optimizer::Kind::adamw)
        cuda::adamw_update_chunks(p, g, m_, v_, chunks_, n_chunks_, (float)lr, (float)hyper_.beta1,
                                  (float)hyper_.beta2, (float)hyper_.eps, wd, t, gscale, s, p16);
    else
        cuda::sgd_momentum_update_chunks(p, g, m_, chunks_, n_chunks_, (float)lr, (float)hyper_.momentum, wd, gscale,
                                         s, p16);
    model_.set_rounded_current(p16 != nullptr);
    CUDA_CHECK(cudaStreamSynchronize(s));  // the optimizer phase times the update itself
}

double DeviceStep::take_comm_seconds() {
    double c = comm_seconds_;
    comm_seconds_ = 0.0;
    return c;
}

std::string DeviceStep::describe() const {
    if (!comm_) return "on the GPU (one rank: nothing to sum)";
    const char* plural = buckets_.size() == 1 ? "" : "s";
    if (hierarchical_)
        return strfmt("NCCL hierarchical on device buffers: reduce-scatter among each node's %d rank%s, all-reduce "
                      "across %d node%s, all-gather; %zu bucket%s",
                      local_size_, local_size_ == 1 ? "" : "s", num_nodes_, num_nodes_ == 1 ? "" : "s",
                      buckets_.size(), plural);
    return strfmt("NCCL all-reduce over %d rank%s on device buffers (NCCL's own rings and trees), %zu bucket%s",
                  world_size_, world_size_ == 1 ? "" : "s", buckets_.size(), plural);
}

} // namespace dptrain
