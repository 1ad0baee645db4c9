// Training data: the HDF5 shard set (format in data/README.md), the world-size independent
// Sampler, and the Prefetcher thread that reads the next batches while the current step
// computes. Not for: knowing the backend's memory beyond the host buffers it fills.
#pragma once

#include "dptrain/comm/shared_window.h"
#include "dptrain/data/h5.h"
#include "dptrain/data/io_mode.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace dptrain {

// What the Prefetcher reads from: samples made of `floats` features and `ints` integers (a label,
// or a window of tokens). Implemented by ShardSet (tabular) and TokenShardSet (tokens.h).
class Dataset {
  public:
    virtual ~Dataset() = default;
    virtual long num_samples() const = 0;
    virtual int floats_per_sample() const = 0;
    virtual int ints_per_sample() const = 0;
    // Reads samples idx[0..n) of `epoch` into x (n, floats) and y (n, ints), in that order.
    virtual void read(const long* idx, int n, long epoch, float* x, int* y) = 0;
    virtual int num_shards() const = 0;
    virtual const std::string& shard_path(int i) const = 0;
    // Another reader of the same shards with its own file handles and scratch, for a second
    // reader thread (a Dataset is not thread-safe; its copies are).
    virtual std::unique_ptr<Dataset> reopen() const = 0;
};

// DIR/SPLIT-00000-of-0000S.h5 ... : every path of the set, checked present; throws UserError
// naming the missing shard (or the directory) with `hint` as the fix.
std::vector<std::string> find_shards(const std::string& dir, const std::string& split, const std::string& hint);

// --io memory's buffer: `bytes` shared by the ranks of a node (a SharedWindow over the node's
// communicator; local rank 0 holds the memory, every rank maps it, at segment(0)). Making and
// freeing it are collective over the node. Refuses more than half the node's memory, or an
// allocation that fails, with a UserError naming `what` (e.g. "the rows of DIR/train") and --io
// direct as the fix; every rank computes the same need, so all refuse together.
std::shared_ptr<SharedWindow> node_memory(MPI_Comm node, double bytes, const std::string& what);

// One split ("train" or "val") of a tabular dataset: DIR/SPLIT-00000-of-0000S.h5 ... with
// /features float32 (N, D), /labels int32 (N), root attribute num_classes. Opening checks every
// shard (presence, dtype, shape, agreement between shards) and throws one UserError naming the
// first bad file. Not thread-safe: one reader per ShardSet.
class ShardSet : public Dataset {
  public:
    // mode memory: `comm` is the node's communicator; collective: all ranks' (the world).
    // Opening is collective over `comm` in those modes.
    static ShardSet open(const std::string& dir, const std::string& split, int max_rows, IoMode mode = IoMode::direct,
                         MPI_Comm comm = MPI_COMM_NULL);
    ShardSet(ShardSet&&) = default;
    ~ShardSet();

    long num_samples() const override { return total_; }
    int floats_per_sample() const override { return dim_; }
    int ints_per_sample() const override { return 1; }
    void read(const long* idx, int n, long, float* x, int* y) override { read_rows(idx, n, x, y); }
    int dim() const { return dim_; }
    int num_classes() const { return classes_; }
    int num_shards() const override { return (int)shards_.size(); }
    const std::string& shard_path(int i) const override { return shards_[i].path; }
    std::unique_ptr<Dataset> reopen() const override;

    static constexpr long kLabelCacheBytes = 64l << 20;  // all shards' labels together
    // Reads rows idx[0..n) (global sample indices) into x (n, D) and y (n), in that order.
    // Contiguous, unfiltered little-endian datasets (what dptrain-data and h5py write by default)
    // are read with one pread per run of consecutive rows at the dataset's file offset; HDF5's
    // own read of a scattered selection copies whole 64 KiB sieve buffers per row and cost ~4x
    // more. Other layouts (chunked, compressed) take one H5Dread per shard touched, with the
    // rows' runs as one hyperslab selection.
    void read_rows(const long* idx, int n, float* x, int* y);
    bool direct() const;  // every shard is read with pread
    IoMode mode() const { return mode_; }
    // --io memory: allocates the node-shared buffer (collective over the node's communicator given
    // to open) and loads this rank's share of the rows. Every rank of the node must have loaded its
    // share before any reads: the caller agrees across ranks afterwards (all_ok).
    void load_node_memory();
    double memory_bytes() const { return (double)total_ * bytes_per_sample(); }
    double bytes_per_sample() const { return 4.0 * dim_ + 4.0; }

  private:
    struct Shard {
        std::string path;
        long first = 0, count = 0;  // global index of row 0, rows
        h5::Hid file, features, labels;
        int fd = -1;  // >= 0: direct reads at the offsets below
        long features_at = 0, labels_at = 0;
        // Direct shards whose labels all fit in kLabelCacheBytes: the labels, read and checked
        // once at open, so that a row costs one pread instead of two.
        std::shared_ptr<const std::vector<int>> label_cache;
    };
    void add_shard(const std::string& path, const std::string& hint, hid_t fapl, size_t n_shards);
    void cache_labels();
    void read_hdf5(Shard& sh, size_t begin, size_t end);
    void read_direct(Shard& sh, size_t begin, size_t end);

    // --io memory: the split's rows in one buffer shared by the node's ranks.
    struct NodeCopy {
        std::shared_ptr<SharedWindow> buf;
        const float* features = nullptr;  // (total, D)
        const int* labels = nullptr;      // (total)
    };
    ShardSet() = default;
    std::string dir_, split_;
    IoMode mode_ = IoMode::direct;
    MPI_Comm comm_ = MPI_COMM_NULL;
    std::shared_ptr<NodeCopy> node_copy_;
    h5::Hid xfer_;  // collective: the transfer property list
    std::vector<Shard> shards_;
    long total_ = 0;
    int dim_ = 0, classes_ = 0, max_rows_ = 0;
    // scratch reused by every read: (row in shard, position in the output) pairs, staged rows
    std::vector<std::pair<long, int>> order_;
    std::vector<float> xs_;
    std::vector<int> ys_;
};

// The global sample order: epoch e visits a permutation of [0, N) drawn from (seed, e), in
// global batches of G samples (the last batch of an epoch holds N mod G, when nonzero). Rank r
// of W reads samples [c*r/W, c*(r+1)/W) of a batch of c. Nothing here depends on W except the
// slice, so W ranks consume exactly the samples 1 rank would. slice() and batch() are
// thread-safe; with several reader threads the permutations of two epochs are kept, since the
// steps in flight span at most an epoch boundary.
// block > 1 (--shuffle-block): the permutation moves blocks of `block` consecutive samples as
// units, so a rank's slice is a few runs of consecutive rows, each one read. The block grid is
// shifted by a random offset each epoch (the first block is [0, offset)), so two samples share a
// block in some epochs only. block 1 is the per-sample permutation.
class Sampler {
  public:
    Sampler(long num_samples, long global_batch, uint64_t seed, int cached_epochs = 1, long block = 1);
    long steps_per_epoch() const { return steps_per_epoch_; }
    long epoch_of(long step) const { return step / steps_per_epoch_; }
    // Samples in the global batch of `step`.
    int global_count(long step) const;
    // Fills out with this rank's sample indices for `step`; returns how many.
    int slice(long step, int rank, int world, long* out);
    // The whole global batch of `step` (for tests and tools).
    int batch(long step, long* out);

  private:
    const std::vector<long>& perm_of(long epoch);  // under mu_
    long n_, global_batch_, steps_per_epoch_, block_;
    uint64_t seed_;
    std::vector<long> blocks_;  // block > 1: the epoch's block starts, permuted
    std::mutex mu_;
    std::vector<long> perm_[2];
    long perm_epoch_[2] = {-1, -1};
};

struct Batch {
    long step = -1;
    int n = 0;         // samples this rank holds
    int global_n = 0;  // samples in the global batch (the loss is averaged over these)
    std::vector<float> x;  // (max_rows, floats_per_sample)
    std::vector<int> y;    // (max_rows, ints_per_sample)
};

// Reader threads that fill a ring of `depth` Batch slots for steps first_step, first_step+1,
// ..., end_step-1; next() hands them out in step order. With K readers, reader k reads the steps
// k, k+K, k+2K, ... after first_step, each through its own Dataset, so K reads are in flight
// (depth is raised to K when smaller). Buffers are allocated once. A read error is rethrown by
// next() when the step it belongs to is due.
class Prefetcher {
  public:
    // fail_step >= 0: the read for that step fails with an injected I/O error (--inject-fault).
    // in_caller: no reader thread; next() reads the batch itself (collective reads, which every
    // rank must issue from the thread that runs the step's other collectives).
    // slow_from >= 0: from that step on, each read takes 20 ms longer (--inject-fault slow-read).
    Prefetcher(std::vector<Dataset*> readers, Sampler& sampler, int rank, int world, int max_rows, int depth,
               long first_step, long end_step, long fail_step = -1, bool in_caller = false, long slow_from = -1);
    Prefetcher(Dataset& shards, Sampler& sampler, int rank, int world, int max_rows, int depth, long first_step,
               long end_step, long fail_step = -1)
        : Prefetcher(std::vector<Dataset*>{&shards}, sampler, rank, world, max_rows, depth, first_step, end_step,
                     fail_step) {}
    ~Prefetcher();
    // Blocks until the batch of the next step is ready; the wait is added to wait_seconds().
    const Batch& next();
    // The batch after the one next() returned, when the reader has it ready; null otherwise (and
    // always with in_caller). Never waits. It stays valid and unchanged until after the release()
    // of the next() that returns it: for starting its copy to a GPU during the current step.
    const Batch* peek();
    // Hands the slot returned by next() back to the reader.
    void release();
    // The ring's buffers (x and y of every slot), allocated once: for page-locking them when the
    // batches go on to a GPU.
    std::vector<std::pair<void*, size_t>> buffers();
    double take_wait_seconds();

  private:
    void run(int reader);
    void read_batch(Dataset& data, long k, std::vector<long>& idx);
    std::vector<Dataset*> readers_;
    Sampler& sampler_;
    int rank_, world_;
    long first_, end_, fail_step_, slow_from_;
    std::vector<Batch> slots_;
    std::vector<std::vector<long>> idx_;  // per reader

    std::vector<long> ready_;             // per slot: the batch (counted from first_step) it holds, -1 none
    std::mutex mu_;
    std::condition_variable cv_;
    long consumed_ = 0;  // batches, counted from first_step
    bool stop_ = false;
    long error_at_ = -1;  // the batch whose read failed
    std::exception_ptr error_;
    double wait_ = 0.0;
    bool in_caller_ = false;
    std::vector<std::thread> threads_;
};

} // namespace dptrain
