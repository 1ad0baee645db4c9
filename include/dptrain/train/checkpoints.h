// A run's checkpoints: the one it resumes from (found and verified against this run on rank 0,
// then given to every rank) and the ones it writes (rank 0, every replica being identical), with
// everything an exact resume needs: parameters, optimizer state, data position, and what must
// match (model, optimizer, global batch, seed, sample order). Not for: the file format
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

// What every checkpoint of this run says of it, besides its step and tensors.
struct RunIdentity {
    std::string model;      // the model's signature
    long global_batch = 0;  // samples per optimizer step over all ranks
    int world_size = 1;
    long train_samples = 0;  // the training set's; the sample order of a step depends on it
    std::string tokenizer, vocab;  // a language model's tokenizer (kind, table); "" for tabular data
};

class Checkpoints {
  public:
    Checkpoints(const Options& o, int rank, RunIdentity id);
    ~Checkpoints();
    Checkpoints(const Checkpoints&) = delete;
    Checkpoints& operator=(const Checkpoints&) = delete;

    // Set-up, on rank 0 (other ranks return at once): with --resume none, refuses to start beside
    // another run's checkpoints unless --overwrite-checkpoints (then deletes them); with auto or a
    // path, loads the checkpoint and checks it against this run. A run that finds no checkpoint
    // starts from --init-from's weights when given (read here, on rank 0 alone). Throws UserError
    // naming the file and the fix.
    void find(const std::vector<float>& params, Optimizer& opt);
    // Collective: rank 0's checkpoint (if any) into every rank's params and opt (each rank's shard
    // of the state, with --shard-optimizer), or the --init-from weights into params. Returns the checkpoint's step (0 for a fresh run).
    long share(MpiCommunicator& world, std::vector<float>& params, Optimizer& opt);
    // Every rank, after share(): the optimizer updates the state holds (the checkpoint's; 0 fresh).
    long updates_at_start() const { return updates_at_start_; }
    const std::string& resumed_from() const { return resumed_from_; }
    // Rank 0: what --init-from gave ("" when the run resumed or started from random weights).
    const std::string& initialized_from() const { return initialized_from_; }

    // Rank 0 writes the checkpoint of `step` from the host state (other ranks return; with
    // --shard-optimizer, after sending rank 0 their shards of the optimizer state, which it writes
    // as they arrive). With
    // --async-checkpoint the state is copied and written by a background thread; the next
    // checkpoint, a final one or wait() waits for it. corrupt (--inject-fault): damage the file
    // after writing it. A failure ends the job: the previous checkpoints are intact.
    void save(MpiCommunicator& world, long step, long updates, const Sampler& sampler,
              const std::vector<float>& params, Optimizer& opt, bool final_one, bool corrupt);
    // Waits for a background write (rank 0); a failure ends the job.
    void wait();
    // The newest checkpoint written (rank 0), "" before the first; a resumed run's own checkpoint
    // of its first step counts (holds_start).
    const std::string& last() const { return last_; }
    // Every rank, after share(): --checkpoint-dir holds the checkpoint of the step this run starts
    // from (it resumed from that very file).
    bool holds_start() const { return holds_start_; }
    // Collective: the checkpoint directory is still the one this run locked (rank 0 looks; a
    // directory deleted since the last write holds none of this run's checkpoints).
    bool dir_kept(MpiCommunicator& world);

  private:
    void resume_latest();  // rank 0, --resume auto
    void set_aside_later(bool skipped_as_damaged);  // rank 0, --resume PATH
    void note_option_changes() const;  // rank 0
    void note_data_change() const;       // rank 0
    void check_found(const std::vector<float>& params, Optimizer& opt) const;  // rank 0: found_ fits this run
    void keep_lock(long step);  // rank 0, before a write: the directory's lock is this run's
    bool lock_lost() const;     // rank 0: the lock held is no longer the directory's
    std::string write_sync(MpiCommunicator& world, const CheckpointState& s, const std::vector<float>& params,
                           Optimizer& opt);
    CheckpointState& next_async();
    void finish_async(long step);  // rank 0
    void gather_state(MpiCommunicator& world, Optimizer& opt, CheckpointState* s);
    TensorPieces shard_pieces(MpiCommunicator& world, const std::vector<float>& mine, size_t total);
    // Each rank's shard size of a sharded state of `total` floats, in rank order.
    static std::vector<size_t> shard_counts(size_t total, int ranks);

    const Options& o_;
    int rank_;
    RunIdentity id_;
    CheckpointState found_;  // rank 0: the checkpoint to resume from
    bool have_ = false;      // found_ is a checkpoint to resume from
    bool init_ = false;      // found_.params are --init-from's weights
    std::string resumed_from_, initialized_from_, last_;
    bool holds_start_ = false;
    long updates_at_start_ = 0;
    long async_step_ = 0;                   // rank 0: the step of the background write started last
    std::pair<uint64_t, uint64_t> dir_id_;  // rank 0: the checkpoint directory locked (device, inode)
    CheckpointState sync_state_;  // reused by every synchronous checkpoint (its attributes: the tensors
                                  // are written from the live buffers)
    std::vector<float> shard_scratch_;  // rank 0: one other rank's shard, as a sharded state is written
    std::unique_ptr<AsyncCheckpointer> async_;
    int lock_fd_ = -1;  // rank 0: the checkpoint directory's lock, held for the run's life
};

} // namespace dptrain
