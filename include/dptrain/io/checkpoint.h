// Checkpoints: everything an exact resume needs, in one HDF5 file written atomically (temp name,
// fsync, rename, fsync of the directory) with a checksum per dataset verified on load.
// Not for: deciding when to checkpoint (the trainer does).
#pragma once

#include "dptrain/core/error.h"

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace dptrain {

// Another format version: refused, never set aside as damaged (a newer dptrain's file holds the
// run's newest work).
class CheckpointFormatError : public UserError {
  public:
    using UserError::UserError;
};

// A 512-byte header (HDF5's user block) with the file's size and a checksum of the rest, verified
// before HDF5 parses a byte: HDF5 1.10 can crash on corrupt input
// (docs/RELIABILITY.md, "Checkpoints").
constexpr size_t kCheckpointHeader = 512;

struct CheckpointState {
    long step = 0;          // optimizer steps completed
    long epoch = 0;         // data position: epoch of the next step ...
    long epoch_offset = 0;  // ... and samples of that epoch already consumed
    long global_batch = 0;
    long train_samples = 0;  // 0: written before this was kept
    long updates = -1;  // step less non-finite skips (bias correction counts these); -1: use step
    uint64_t seed = 0;  // every random stream is counter-based from seed + position
    int world_size = 0;  // informational: another world size may resume
    std::string model;      // must match on resume
    std::string optimizer;  // adamw | sgd
    std::string options;    // resolved, as INI text
    std::string tokenizer;  // language models only
    std::string vocab;      // Tokenizer::table()
    std::vector<float> params, opt_m, opt_v;
};

// DIR/ckpt-00000120.h5 for step 120.
std::string checkpoint_path(const std::string& dir, long step);

// Writes s atomically into dir (made if missing), then keeps the newest `keep`. Throws UserError
// with the previous checkpoints intact.
std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep);

// A tensor in pieces: next(&n) returns the next piece and its float count. Every piece but the
// last is a whole number of the checksum's 8-byte words (an even float count).
struct TensorPieces {
    size_t size = 0;
    std::function<const float*(size_t* n)> next;
    static TensorPieces whole(const float* v, size_t n);
};

// With tensors from pieces (s's vectors unused): live buffers, or a sharded state as shards arrive.
std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep, const TensorPieces& params,
                            const TensorPieces& m, const TensorPieces& v);

// Verifies every checksum. Throws UserError naming the file and what is wrong.
CheckpointState load_checkpoint(const std::string& path);

// Fault injection for tests: flips bytes inside /params.
void corrupt_checkpoint_file(const std::string& path);

// Background writes from a host copy, one in flight at a time, with save_checkpoint's atomicity.
class AsyncCheckpointer {
  public:
    AsyncCheckpointer();
    ~AsyncCheckpointer();  // waits for the write in flight; errors are printed, not thrown
    // Waits for the previous write (throwing its UserError); returns the state to fill, whose
    // tensors keep their capacity so filling does not allocate.
    CheckpointState& next();
    void start(const std::string& dir, int keep);
    // Throws the write's UserError. Returns its path ("" if none).
    std::string wait();

  private:
    void run();
    CheckpointState state_;
    std::string dir_, path_, error_;
    int keep_ = 1;
    bool pending_ = false, stop_ = false;
    std::mutex mu_;
    std::condition_variable cv_;
    std::thread thread_;
};

// One run per checkpoint directory: an exclusive flock on DIR/.lock (released by the kernel however
// the holder dies) holding "PID HOST UNIX_TIME". Waits up to wait_s or until give_up() (a stop
// signal), then throws UserError naming the holder. Returns the fd to keep open; -1 without flock.
// `option` names the directory in messages: the run directory is locked the same way.
int lock_checkpoint_dir(const std::string& dir, double wait_s, bool (*give_up)() = nullptr,
                        const char* option = "--checkpoint-dir");

// False once DIR or its lock file was deleted or replaced: the lock no longer keeps others out.
bool holds_checkpoint_lock(const std::string& dir, int fd);
// Takes the lock again without waiting (DIR made again when missing). -2: another process holds
// it (*holder says who); -1: no flock. Throws UserError when DIR or the lock cannot be made.
int relock_checkpoint_dir(const std::string& dir, std::string* holder);

// Makes dir, checks it is writable (a bad --checkpoint-dir fails at start, not at the first
// checkpoint) and removes a killed writer's temporary files. Throws UserError.
void prepare_checkpoint_dir(const std::string& dir);

// Checkpoints in dir, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The step in a name exactly as checkpoint_path writes it (8+ digits), else -1 ("ckpt-10.h5").
long checkpoint_step(const std::string& path);

// The newest checkpoint that verifies; each bad newer one is skipped and described in *damaged.
// False when none is usable.
bool load_latest(const std::string& dir, CheckpointState* out, std::string* path, std::vector<std::string>* damaged);

// PATH: a checkpoint file, or a run or checkpoint directory for its newest that verifies. *path
// becomes the file read. Throws UserError naming PATH after `option` ("--resume"; "" for none).
CheckpointState load_checkpoint_or_newest(std::string* path, const std::string& option);

// Renames out of the ckpt-NNNNNNNN.h5 names (PATH.WHY, then .WHY.2, ...) so neither a new
// checkpoint of its step, the rotation, nor --resume auto touches it. WHY: "damaged" or
// "later-branch". Returns the new name; throws UserError when the rename fails.
std::string set_aside(const std::string& path, const std::string& why = "damaged");

} // namespace dptrain
