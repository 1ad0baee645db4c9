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

// A checkpoint whose header names a format version other than this build's: never taken for a
// damaged file (skipped or moved aside), since a newer dptrain's checkpoint holds the run's newest
// work; the run refuses instead.
class CheckpointFormatError : public UserError {
  public:
    using UserError::UserError;
};

// File layout: a 512-byte header ("user block", which HDF5 skips) holding the file's size and a
// checksum of everything after the header, then the HDF5 file. The header is verified before
// HDF5 reads a byte, so a corrupt or partial file is refused without being parsed (HDF5 1.10
// itself can crash on corrupt input; tests/fuzz found it).
constexpr size_t kCheckpointHeader = 512;

struct CheckpointState {
    long step = 0;          // optimizer steps completed
    long epoch = 0;         // data position: epoch of the next step ...
    long epoch_offset = 0;  // ... and samples of that epoch already consumed
    long global_batch = 0;
    long train_samples = 0;  // the training set's samples (0: a checkpoint from before it was kept)
    long updates = -1;  // optimizer updates applied: step less the steps skipped as non-finite (the
                        // moments' bias correction counts these); -1: from before it was kept (step)
    uint64_t seed = 0;  // every random stream is counter-based from seed + position
    int world_size = 0;  // informational: a different world size may resume
    std::string model;      // model signature; a resume must match it
    std::string optimizer;  // adamw | sgd
    std::string options;    // the resolved options as INI text
    std::string tokenizer;  // language models: name_of(TokenizerKind) ("" otherwise)
    std::string vocab;      // the tokenizer's table (Tokenizer::table(); kept with h5::write_text)
    std::vector<float> params, opt_m, opt_v;
};

// DIR/ckpt-00000120.h5 for step 120.
std::string checkpoint_path(const std::string& dir, long step);

// Writes the checkpoint of s.step into dir (created if missing) atomically, then deletes all but
// the newest `keep` checkpoints. Returns the path. Throws UserError (previous checkpoints intact).
std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep);

// A tensor handed to the writer in pieces, in order: next(&n) returns the next piece and its
// length in floats, covering `size` floats in all. Every piece but the last is a whole number of
// 8-byte words (the checksum's), so an even count of floats.
struct TensorPieces {
    size_t size = 0;
    std::function<const float*(size_t* n)> next;
    // One piece: all of v.
    static TensorPieces whole(const float* v, size_t n);
};

// The same, with the tensors from pieces instead of s's vectors (left unused): a run writes its
// live buffers and a sharded state as each rank's shard arrives, without a whole copy.
std::string save_checkpoint(const std::string& dir, const CheckpointState& s, int keep, const TensorPieces& params,
                            const TensorPieces& m, const TensorPieces& v);

// Loads and verifies every checksum. Throws UserError naming the file and what is wrong.
CheckpointState load_checkpoint(const std::string& path);

// Flips bytes inside the /params data of a checkpoint file (fault injection for tests).
void corrupt_checkpoint_file(const std::string& path);

// Writes checkpoints on a background thread from a host copy taken when the write is started, so
// training continues meanwhile; one write in flight at a time, with save_checkpoint's atomicity.
class AsyncCheckpointer {
  public:
    AsyncCheckpointer();
    ~AsyncCheckpointer();  // waits for the write in flight (errors then are printed, not thrown)
    // Waits for the previous write (throwing its UserError), then returns the state to fill. Its
    // tensors keep their capacity between checkpoints: filling them does not allocate.
    CheckpointState& next();
    // Starts writing what next() returned.
    void start(const std::string& dir, int keep);
    // Waits for the write in flight; throws its UserError. Returns its path ("" if none).
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

// One run at a time per checkpoint directory: an exclusive flock on DIR/.lock, which the kernel
// releases when the holder dies, and in it "PID HOST UNIX_TIME" of the holder. While another
// process holds it, waits up to wait_s seconds (saying so once on stderr), then throws UserError
// naming the holder; also when give_up() turns true while it waits (a stop signal: the run ends).
// Returns the descriptor to keep open for the run's life, or -1 where the filesystem has no flock
// (a warning on stderr; the run goes on unlocked).
int lock_checkpoint_dir(const std::string& dir, double wait_s, bool (*give_up)() = nullptr);

// Whether fd (from lock_checkpoint_dir) is still DIR/.lock: false once the directory or its lock
// file was deleted or replaced during the run, when the lock held no longer keeps another run out.
bool holds_checkpoint_lock(const std::string& dir, int fd);
// The lock taken again without waiting (DIR made again when missing): the descriptor; -2 when
// another process holds it (*holder: "pid P on HOST, for N s"); -1 where the filesystem has no
// flock. Throws UserError when DIR or its lock cannot be made.
int relock_checkpoint_dir(const std::string& dir, std::string* holder);

// Creates dir if needed, checks a file can be written there (so a bad --checkpoint-dir fails at
// start, not at the first checkpoint), and removes temporary files a killed writer left behind.
// Throws UserError naming the directory.
void prepare_checkpoint_dir(const std::string& dir);

// Checkpoints in dir, newest (highest step) first.
std::vector<std::string> list_checkpoints(const std::string& dir);
// The step in a checkpoint's name ([DIR/]ckpt-NNNNNNNN.h5, exactly as checkpoint_path writes it:
// zero-padded to 8 digits, more past 99,999,999), or -1 for any other name ("ckpt-10.h5").
long checkpoint_step(const std::string& path);

// The newest checkpoint of dir that verifies; each bad newer one is skipped, what is wrong with it
// (naming the file) added to *damaged. Returns false when dir has no usable checkpoint.
bool load_latest(const std::string& dir, CheckpointState* out, std::string* path, std::vector<std::string>* damaged);

// PATH: a checkpoint file, or a run or checkpoint directory (DIR/checkpoints, else DIR) for its
// newest checkpoint that verifies (each damaged newer one skipped with a line on stderr); *path
// becomes the file read. Throws UserError naming PATH, after `option` where one gave it
// ("--resume"; "" for none).
CheckpointState load_checkpoint_or_newest(std::string* path, const std::string& option);

// Renames a checkpoint out of the ckpt-NNNNNNNN.h5 names (PATH.WHY, or .WHY.2 and on when taken),
// so that neither a new checkpoint of its step nor the rotation of old ones overwrites or outlives
// it, and --resume auto does not pick it; returns the new name. Throws UserError when the rename
// fails. WHY: "damaged", or "later-branch" (newer than the checkpoint a run resumed from).
std::string set_aside(const std::string& path, const std::string& why = "damaged");

} // namespace dptrain
