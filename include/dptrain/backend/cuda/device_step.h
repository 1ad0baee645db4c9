// The optimizer step of a GPU-resident run (--device cuda --gpu-state device): the parameters and
// gradients are the model's own device buffers (cuda::Resident), the optimizer state lives beside
// them, the gradients are summed over the ranks with NCCL on device buffers, and the norm,
// clipping and AdamW/SGD update run as kernels (the CUDA twins of optim.h). As a GradHook it
// starts each bucket's sum as soon as backward has queued the bucket's last gradient: an event on
// the model's stream, NCCL's stream waits for it, so the sums run on the GPU while backward goes
// on, with no device-wide synchronisation. A bucket's sum is one ncclAllReduce over every rank
// (flat: NCCL's own rings and trees over NVLink and the network), or three steps over the
// topology's communicators (hierarchical: reduce-scatter among the node's ranks, all-reduce of
// this rank's share among the ranks of its local rank on the other nodes, all-gather in the
// node), all queued on one stream in one order on every rank. With the state sharded
// (--shard-optimizer), each bucket's values are reduced to their shards' owners instead (a group
// of ncclReduce, one per owner of a piece of it), the norm adds the ranks' squares in rank order,
// each rank updates its shard with its shard of the state, and the parameters are all-gathered.
// Host copies (checkpoints, resume) happen only in upload() and download().
// Built only with CUDA. Not for: deciding when to step or skip (the trainer does, from norm()).
#pragma once

#include "dptrain/backend/cuda/ops.h"
#include "dptrain/comm/buckets.h"
#include "dptrain/comm/types.h"
#include "dptrain/model/model.h"
#include "dptrain/model/optim.h"
#include "dptrain/comm/topology.h"

#include <memory>
#include <string>
#include <vector>

struct CUevent_st;

namespace dptrain {

class NcclCommunicator;

class DeviceStep : public GradHook {
  public:
    using Hyper = OptimizerSettings;
    struct Sum {  // how the gradients are summed over the ranks
        const Topology* topo = nullptr;  // null: one process, no MPI needed (tests)
        AllreduceAlgo algo = AllreduceAlgo::automatic;  // --allreduce (auto = flat: NCCL's own choice)
        double bucket_mb = 4.0;          // --bucket-mb: the buckets summed during backward
        bool nccl_for_one = false;       // NCCL even where a group has one rank (a copy): tests of that path
        // --shard-optimizer (ZeRO-1): this rank keeps and updates shard_span(P, rank, ranks) alone,
        // the world's rank and size; without a topology (tests, no communication) shard_rank of
        // shard_ranks simulated ranks. The sums go to each shard's owner over NCCL's world
        // communicator (hierarchical is taken as flat), and update() all-gathers the parameters.
        bool shard = false;
        int shard_rank = 0, shard_ranks = 1;
    };
    // Collective over topo->world when it has more than one rank (NCCL's communicators are made
    // there); throws UserError (the same on every rank) when several ranks need NCCL and this build
    // has none, or hierarchical is asked of nodes with unequal rank counts, and when this GPU lacks
    // the memory for the optimizer state.
    DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper, const Sum& sum);
    // One process: nothing to sum (tests).
    DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper);
    ~DeviceStep() override;
    DeviceStep(const DeviceStep&) = delete;
    DeviceStep& operator=(const DeviceStep&) = delete;

    // Host -> device: the parameters and the optimizer's state (at start and after a resume); the
    // model's bf16 copy of the parameters is then made by its next forward. Sharded, opt holds
    // this rank's shard of the state (Optimizer::shard() must be shard()).
    void upload(const float* params, const Optimizer& opt);
    // Device -> host, synchronously: for a checkpoint or the end of the run.
    void download(float* params, Optimizer& opt);
    // --inject-fault nan: gradient 0 becomes NaN before the sum (every rank then sees it).
    void poison();
    // Waits for the backward queued on the model's stream, so that the step's phases time what
    // they name (backward kernels in backward, the sum in the all-reduce).
    void wait_backward();
    // GradHook, called by the resident model's backward as it queues work: gradients at offsets
    // >= offset are complete once the stream reaches this point; starts the buckets they fill.
    void grads_ready_from(size_t offset) override;
    // Starts what backward's hooks did not, and waits for every bucket's sum. Returns the seconds
    // the host waited (the exposed communication). The next step starts its buckets afresh.
    double allreduce();
    // sqrt(sum of squared gradients), read back to the host (the step's one wait for the device).
    // Sharded: each rank's shard's squares, added in rank order on every rank (MPI), so all clip
    // and skip alike; without a topology, this shard's alone.
    double norm();
    // Clips to max_norm (when > 0 and exceeded, as clip_grad_norm) and updates every parameter
    // (sharded: this rank's shard, then the parameters are all-gathered); returns when the update
    // is done, with the seconds the all-gather waited (0 unsharded). In bf16 an unsharded update
    // writes the model's rounded copy of each parameter too (Resident::rounded_params), so the next
    // forward takes it without a pass of its own; after a sharded one the next forward rounds them.
    double update(double norm, double max_norm, double lr, long t);
    Span shard() const { return shard_; }
    double take_comm_seconds();
    std::string describe() const;  // the banner's "gradients:" text

  private:
    cuda::Resident& model_;
    const ParamLayout& layout_;
    Hyper hyper_;
    int world_size_ = 1;
    bool hierarchical_ = false;
    // Flat: nccl_ over the world. Hierarchical: node_ over the node's ranks and cross_ over the
    // ranks of this local rank, one per node, sharing node_'s stream (either is left out where
    // its group has one rank, unless nccl_for_one). comm_ is the first of them: its stream is
    // the one every sum is queued on.
    std::unique_ptr<NcclCommunicator> nccl_, node_, cross_;
    NcclCommunicator* comm_ = nullptr;
    int num_nodes_ = 1, local_size_ = 1;
    void agree(const Sum& how);  // the constructor's parts, in order
    void make_communicators(const Sum& how);
    void allocate_state(double bucket_mb);
    void sum(float* g, size_t n);  // one bucket's sum, queued on comm_'s stream
    // Sharded: the sums of bucket b's values to their shards' owners (NCCL reduces, in place), and
    // the parameters' all-gather; both queued on comm_'s stream.
    void reduce_to_owners(size_t b);
    void gather_params();
    bool sharded_ = false;
    Span shard_;                                    // the parameters whose state this rank keeps
    std::vector<std::vector<size_t>> owner_counts_;  // per bucket: each rank's values of it
    std::vector<size_t> shard_counts_;               // each rank's shard size
    std::vector<double> squares_;                    // each rank's share of the norm's square
    MPI_Comm world_ = MPI_COMM_NULL;
    CUevent_st* updated_ = nullptr;
    void wait_sums();
    float *m_ = nullptr, *v_ = nullptr;  // device: AdamW moments, or SGD's momentum in m_
    cuda::UpdateChunk* chunks_ = nullptr;  // device: the views in chunks, for one update launch
    int n_chunks_ = 0;
    bool whole_ = false;  // the chunks cover every parameter: the update may write the bf16 copy
    double *norm_ = nullptr, *partial_ = nullptr;  // device: the norm's square and its chunks
    double* norm_host_ = nullptr;  // page-locked: where the norm's square is read back
    CUevent_st *grads_ready_ = nullptr, *reduced_ = nullptr;
    std::vector<CUevent_st*> bucket_ready_;  // one per bucket, reused every step
    std::vector<Bucket> buckets_;  // from the buffer's end (what backward finishes first) down
    size_t launched_ = 0;          // buckets started this step
    void launch(size_t bucket);
    double comm_seconds_ = 0.0;
};

} // namespace dptrain
