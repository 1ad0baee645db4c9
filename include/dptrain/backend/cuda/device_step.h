// The optimizer step of a GPU-resident run (--gpu-state device): NCCL sums, norm, clipping and
// update on the model's own device buffers, the optimizer state beside them. Built only with CUDA.
// Not for: deciding when to step or skip (the trainer does, from norm()).
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

// docs/GPU.md, "Where the state lives". A step, on every rank in the same order:
//   1. backward's hook: each finished bucket queued on NCCL's stream behind an event on the
//      model's (all-reduce flat or hierarchical, or sharded: reduce to the owners);
//   2. allreduce(): the buckets left, then the host waits, polling NCCL's errors;
//   3. norm(): one double read back (sharded: squares added in rank order over MPI);
//   4. update(): one launch (sharded: then the parameters all-gathered).
class DeviceStep : public GradHook {
  public:
    using Hyper = OptimizerSettings;
    struct Sum {  // how the gradients are summed over the ranks
        const Topology* topo = nullptr;  // null: one process, no MPI needed (tests)
        AllreduceAlgo algo = AllreduceAlgo::automatic;  // --allreduce (auto = flat: NCCL's own choice)
        double bucket_mb = 4.0;          // --bucket-mb: the buckets summed during backward
        bool nccl_for_one = false;       // NCCL even for a one-rank group (tests)
        // --shard-optimizer (ZeRO-1): this rank keeps shard_span(P, rank, ranks) alone; without a
        // topology, shard_rank of shard_ranks simulated ranks (tests). Hierarchical is taken as flat.
        bool shard = false;
        int shard_rank = 0, shard_ranks = 1;
    };
    // Collective over topo->world. UserError, the same on every rank: no NCCL for several ranks,
    // hierarchical on unequal nodes, or no GPU room for the optimizer state.
    DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper, const Sum& sum);
    // One process: nothing to sum (tests).
    DeviceStep(cuda::Resident& model, const ParamLayout& layout, const Hyper& hyper);
    ~DeviceStep() override;
    DeviceStep(const DeviceStep&) = delete;
    DeviceStep& operator=(const DeviceStep&) = delete;

    // Host -> device (start, resume); the next forward rounds. opt.shard() must be shard().
    void upload(const float* params, const Optimizer& opt);
    // Device -> host, synchronously (checkpoints).
    void download(float* params, Optimizer& opt);
    void download_params(float* params);
    // --inject-fault nan: gradient 0 becomes NaN before the sum.
    void poison();
    // Waits for the queued backward, so that the step's phases time what they name.
    void wait_backward();
    // Gradients at offsets >= offset are complete once the model's stream gets here: starts their buckets.
    void grads_ready_from(size_t offset) override;
    // Starts the buckets left and waits for every sum; returns the seconds waited (exposed communication).
    double allreduce();
    // The step's one read back. Sharded: squares added in rank order, so all clip and skip alike
    // (without a topology, this shard's alone).
    double norm();
    // Clips as clip_grad_norm and updates (sharded: the shard, then all-gathers the parameters);
    // returns when done, with the all-gather's wait. Unsharded in bf16 it also writes the rounded copy.
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
    // Flat: nccl_. Hierarchical: node_ and cross_ (this local rank's across nodes) on node_'s
    // stream, none for a one-rank group. Every sum is queued on comm_'s stream.
    std::unique_ptr<NcclCommunicator> nccl_, node_, cross_;
    NcclCommunicator* comm_ = nullptr;
    int num_nodes_ = 1, local_size_ = 1;
    void agree(const Sum& how);  // the constructor's parts
    void make_communicators(const Sum& how);
    void allocate_state(double bucket_mb);
    void sum(float* g, size_t n);  // one bucket's sum, queued on comm_'s stream
    // Sharded, on comm_'s stream: bucket b reduced to its owners in place; the parameters' all-gather.
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
    double* norm_host_ = nullptr;  // page-locked
    CUevent_st *grads_ready_ = nullptr, *reduced_ = nullptr;
    std::vector<CUevent_st*> bucket_ready_;  // one per bucket
    std::vector<Bucket> buckets_;  // from the buffer's end (backward's first) down
    size_t launched_ = 0;          // buckets started this step
    void launch(size_t bucket);
    double comm_seconds_ = 0.0;
};

} // namespace dptrain
