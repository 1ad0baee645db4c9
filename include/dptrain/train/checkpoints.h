// A run's checkpoints: the one it resumes from (found and checked on rank 0, given to every rank)
// and the ones it writes (rank 0; replicas are identical). Not for: the file format
// (io/checkpoint.h) or when to write (the step loop).
#pragma once

#include "dptrain/comm/communicator.h"
#include "dptrain/config/options.h"
#include "dptrain/io/checkpoint.h"
#include "dptrain/model/optim.h"
#include "dptrain/data/sampler.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dptrain {

struct RunIdentity {
    std::string model;      // signature
    long global_batch = 0;  // over all ranks
    int world_size = 1;
    long train_samples = 0;  // a step's sample order depends on it
    std::string tokenizer, vocab;  // kind and table; "" for tabular data
};

class Checkpoints {
  public:
    Checkpoints(const Options& o, int rank, RunIdentity id);
    ~Checkpoints();
    Checkpoints(const Checkpoints&) = delete;
    Checkpoints& operator=(const Checkpoints&) = delete;

    // Set-up, rank 0 only: --resume none refuses beside another run's checkpoints unless
    // --overwrite-checkpoints; auto or a path loads and checks one; else --init-from's weights.
    // Throws UserError naming the file and the fix.
    void find(const std::vector<float>& params, Optimizer& opt);
    // Collective: the checkpoint (each rank's shard with --shard-optimizer) or the --init-from
    // weights into every rank. Returns the checkpoint's step (0 fresh).
    long share(MpiCommunicator& world, std::vector<float>& params, Optimizer& opt);
    // After share(): the optimizer updates the state holds.
    long updates_at_start() const { return updates_at_start_; }
    const std::string& resumed_from() const { return resumed_from_; }
    // Rank 0: what --init-from gave, else "".
    const std::string& initialized_from() const { return initialized_from_; }

    // Rank 0 writes `step` (other ranks only send their optimizer shards with --shard-optimizer).
    // --async-checkpoint: copied and written in the background until the next save, a final one
    // or wait(). corrupt: --inject-fault. A failure ends the job; the previous ones are intact.
    void save(MpiCommunicator& world, long step, long updates, const Sampler& sampler,
              const std::vector<float>& params, Optimizer& opt, bool final_one, bool corrupt);
    // Rank 0; a failure ends the job.
    void wait();
    // Rank 0: "" before the first; a resumed run's own checkpoint of its first step counts.
    const std::string& last() const { return last_; }
    // After share(): this run resumed from --checkpoint-dir's own file of its start step.
    bool holds_start() const { return holds_start_; }
    // Collective: still the directory this run locked (one deleted since holds none of its work).
    bool dir_kept(MpiCommunicator& world);

  private:
    void resume_latest();  // rank 0, --resume auto
    void set_aside_later(bool skipped_as_damaged);  // rank 0, --resume PATH
    void withdraw_later();
    void note_option_changes() const;  // rank 0
    void note_data_change() const;       // rank 0
    void check_found(const std::vector<float>& params, Optimizer& opt) const;  // rank 0
    void keep_lock(long step);  // rank 0, before a write
    bool lock_lost() const;     // rank 0
    std::string write_sync(MpiCommunicator& world, const CheckpointState& s, const std::vector<float>& params,
                           Optimizer& opt);
    CheckpointState& next_async();
    void finish_async(long step);  // rank 0
    void gather_state(MpiCommunicator& world, Optimizer& opt, CheckpointState* s);
    TensorPieces shard_pieces(MpiCommunicator& world, const std::vector<float>& mine, size_t total);
    static std::vector<size_t> shard_counts(size_t total, int ranks);

    const Options& o_;
    int rank_;
    RunIdentity id_;
    CheckpointState found_;  // rank 0
    bool have_ = false;      // found_ is a checkpoint to resume from
    bool init_ = false;      // found_.params are --init-from's weights
    std::string resumed_from_, initialized_from_, last_;
    bool holds_start_ = false;
    long updates_at_start_ = 0;
    long async_step_ = 0;
    std::pair<uint64_t, uint64_t> dir_id_;  // (device, inode) of the directory locked
    CheckpointState sync_state_;  // attributes only: tensors come from the live buffers
    std::vector<float> shard_scratch_;  // rank 0: one other rank's shard
    std::unique_ptr<AsyncCheckpointer> async_;
    int run_lock_fd_ = -1;  // rank 0: --run-dir's lock, held for the run's life
    int lock_fd_ = -1;  // rank 0, held for the run's life
};

} // namespace dptrain
